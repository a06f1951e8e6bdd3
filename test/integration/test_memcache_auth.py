"""memcached ASCII authentication (memcached's -Y authfile; cache.memcached_auth_file) against the
real binary.

Side by side (Diff*): memcached 1.6 started with -Y and ours with cache.memcached_auth_file, both on
the same file (memcached's own t/authfile), run the same scripted sessions; after each step both
are read until they have been quiet for QUIET seconds (or closed the connection), and the bytes
must be identical, including whether the connection is still open. A sentinel command cannot end
a step here: before authentication every line, "mn" included, answers CLIENT_ERROR
unauthenticated. The stats counters (auth_cmds, auth_errors, reset by "stats reset") and "stats
settings" (auth_enabled_ascii: the file's path) are compared the same way.

Ours only (no memcached needed): start-up refusals (exit 1 unreadable, exit 2 empty or malformed,
with the line number, never the password), the warning for a file others may read, the reload on
SIGHUP (a good file replaces the table for new checks, authenticated connections stay so; a bad
one is logged and the old table kept), --check-config showing the path only, the HTTP cache API
unaffected, and no password in any log line.
"""
import os
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import sfharness
from sfharness import BINARY, Server, free_port, get, memcache_server, metric, request, set_args
from test_memcache_diff import Memcached, memcached_or_skip

QUIET = 0.25  # seconds without a byte from either server: the step's answer is complete
AUTHFILE = b"foo:bar\nbaaaz:quux\n"  # memcached 1.6.18's t/authfile
UNAUTH = b"CLIENT_ERROR unauthenticated\r\n"


class Part(bytes):
    """Sent, then both servers must stay silent (the command is not complete yet)."""


def authfile(directory, data=AUTHFILE, mode=0o600, name="authfile"):
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_quiet(socks, quiet=QUIET, limit=10.0):
    """What each socket received until all were quiet for `quiet` s (or closed): [(bytes,
    closed)]."""
    got = [b"" for _ in socks]
    closed = [False for _ in socks]
    deadline = time.time() + limit
    last = time.time()
    while time.time() < deadline:
        live = [s for s, c in zip(socks, closed) if not c]
        if not live:
            break
        wait = quiet - (time.time() - last)
        if wait <= 0:
            break
        ready, _, _ = select.select(live, [], [], wait)
        for s in ready:
            i = socks.index(s)
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                data = b""
            if data:
                got[i] += data
            else:
                closed[i] = True
            last = time.time()
    return list(zip(got, closed))


def send(sock, data):
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed by the server: read_quiet reports it


class DiffBase(unittest.TestCase):
    """memcached -Y and ours on the same auth file, fresh for the class."""
    MC_FLAGS = ("-t", "2", "-m", "64")

    @classmethod
    def setUpClass(cls):
        memcached_or_skip("1.6")
        cls.dir = tempfile.TemporaryDirectory(prefix="sf_mcauth_")
        cls.path = authfile(cls.dir.name)
        cls.mc = Memcached(*cls.MC_FLAGS, "-Y", cls.path)
        try:
            cls.srv, cls.sf_port = memcache_server("cache.memcached_auth_file=" + cls.path)
        except BaseException:
            cls.mc.stop()
            cls.dir.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.stop()
        finally:
            cls.mc.stop()
            cls.dir.cleanup()

    def pair(self):
        return [connect(self.mc.port), connect(self.sf_port)]

    def session(self, steps, conns=None):
        """Each step to both servers; the same bytes back and the same open/closed state. A Part
        step must get no answer. Returns the connections (closed ones included)."""
        conns = conns or self.pair()
        try:
            for i, step in enumerate(steps):
                for s in conns:
                    send(s, bytes(step))
                (want, want_closed), (got, got_closed) = read_quiet(conns)
                what = repr(bytes(step)) if len(step) < 120 else "%r...(%d bytes)" % (
                    bytes(step)[:100], len(step))
                self.assertEqual((got, got_closed), (want, want_closed),
                                 "step %d %s\n  memcached: %r%s\n  ours:      %r%s" % (
                                     i, what, want, " <closed>" if want_closed else "", got,
                                     " <closed>" if got_closed else ""))
                if isinstance(step, Part):
                    self.assertEqual(want, b"", "step %d: memcached answered a part" % i)
                if want_closed:
                    break
        except BaseException:
            for s in conns:
                s.close()
            raise
        return conns

    def run_session(self, steps):
        for s in self.session(steps):
            s.close()


class DiffSessions(DiffBase):
    def test_ascii_auth_t(self):
        """memcached's t/ascii-auth.t, step by step, then its second socket."""
        self.run_session([b"set foo 0 0 2\r\nhi\r\n", b"get foo\r\n",
                          b"set foo 0 0 7\r\nfoo bab\r\n", b"set foo 0 0 7\r\nfoo bar\r\n",
                          b"set toast 0 0 2\r\nhi\r\n", b"get toast\r\n"])
        self.run_session([b"set foo 0 0 10\r\nbaaaz quux\r\n", b"set toast2 0 0 2\r\nho\r\n",
                          b"get toast2\r\n"])

    def test_every_command_before_authentication(self):
        lines = [b"get foo\r\n", b"gets foo\r\n", b"version\r\n", b"stats\r\n",
                 b"stats settings\r\n", b"quit\r\n", b"mn\r\n", b"mg foo v\r\n", b"ms foo 2\r\n",
                 b"md foo\r\n", b"me foo\r\n", b"delete foo\r\n", b"incr foo 1\r\n",
                 b"touch foo 0\r\n", b"flush_all\r\n", b"verbosity 1\r\n", b"shutdown\r\n",
                 b"watch\r\n", b"lru_crawler metadump all\r\n", b"cache_memlimit 100\r\n",
                 b"GET / HTTP/1.1\r\n", b"POST /x HTTP/1.0\r\n", b"add foo 0 0 7\r\n",
                 b"SET foo 0 0 7\r\n", b"set foo 0 0\r\n", b"set foo 0 0 x\r\n",
                 b"set foo 0 0 -1\r\n", b"set foo 0 0 \r\n", b"set\r\n", b"\r\n", b" \r\n",
                 b"bogus\r\n", b"get foo\n", b"\x80\x00\x00\r\n"]
        # still unauthenticated after all of it
        self.run_session(lines + [b"set a 0 0 7\r\nfoo bar\r\n", b"mn\r\n"])

    def test_credentials_block(self):
        steps = [
            b"set whatever x y 7 noreply\r\nfoo bar\r\n",  # noreply: answered all the same
            b"mn\r\n",
        ]
        self.run_session(steps)
        for block in (b"set a 0 0 7\nfoo bar\r\n",  # LF-only line
                      b"set a 0 0 14\r\n   foo   bar  \r\n",  # blanks around the tokens
                      b"set a 0 0 13\r\nfoo bar extra\r\n",  # more tokens
                      b"set a 0 0 9\r\nfoo bar\0x\r\n",  # a NUL ends the block
                      b"set a 0 0 8\r\nfoo\0 bar\r\n",
                      b"set a 0 0 8\r\nfoo bar\r\r\n",  # a CR in the password
                      b"set a 0 0 7\r\nfoo\tbar\r\n",  # a tab is no separator
                      b"set a 0 0 0\r\n\r\n",
                      b"set a 0 0 -0\r\n\r\n",
                      b"set a 0 0 4294967303\r\nfoo bar\r\n",  # 2^32 + 7: read as 7
                      b"set a 0 0 +7\r\nfoo bar\r\n",
                      b"set a 0 0 07\r\nfoo bar\r\n",
                      b"set a 0 0 8\r\nfoo quux\r\n",  # another user's password
                      b"set a 0 0 7\r\nFOO bar\r\n",
                      b"set a 0 0 7\r\nfoo barXY",  # bad termination
                      b"set a 0 0 1000\r\n" + b"u" * 996 + b" bar\r\n"):
            self.run_session([block, b"mn\r\n", b"get a\r\n"])

    def test_cut_and_pipelined(self):
        """The block across writes; the commands after it in the same write are served."""
        self.run_session([Part(b"set a 0 0 7\r"), Part(b"\nfoo"), Part(b" b"), b"ar\r\n",
                          b"get a\r\n"])
        self.run_session([Part(b"\n"), b"\n"])  # a lone "\n" waits for a second byte
        self.run_session([b"set a 0 0 7\r\nfoo bar\r\nset k 0 0 1\r\nv\r\nget k\r\nmn\r\n"])
        self.run_session([b"get k\r\nset a 0 0 7\r\nfoo", b" bar\r\nget k\r\n"])

    def test_after_authentication(self):
        """An authenticated connection is an ordinary one; another still has to authenticate."""
        a = self.session([b"set a 0 0 7\r\nfoo bar\r\n", b"set k 5 0 2\r\nhi\r\n",
                          b"get k\r\n", b"mg k v f\r\n", b"set a 0 0 7\r\nfoo bar\r\n",
                          b"get a\r\n", b"bogus\r\n"])
        try:
            self.run_session([b"get k\r\n"])
        finally:
            for s in a:
                s.close()

    def test_closes(self):
        # a line over 2048 bytes without its newline, whatever it is (get included)
        self.run_session([Part(b"get " + b"k" * 2040), b"k" * 10])
        self.run_session([b"set a 0 0 7" + b" " * 2100])
        # with its newline in one write: answered while memcached's 16 KiB read buffer holds it
        self.run_session([b"get " + b"k" * 3000 + b"\r\n", b"get " + b"k" * 16382 + b"\n"])
        # a block longer than memcached's 16 KiB read buffer: closed when a byte comes beyond
        # the full buffer
        self.run_session([Part(b"set a 0 0 16383\r\n" + b"x" * 16384), b"x"])
        self.run_session([Part(b"set a 0 0 20000\r\n"), Part(b"x" * 16000), b"x" * 1000])
        # one that fits is read
        self.run_session([b"set a 0 0 16382\r\n" + b"x" * 16382 + b"\r\n", b"mn\r\n"])


def pymemcache_client():
    base = sfharness.debian_import("pymemcache.client.base", "python3-pymemcache")
    exceptions = sfharness.debian_import("pymemcache.exceptions", "python3-pymemcache")
    return base.Client, exceptions.MemcacheClientError


class DiffClients(DiffBase):
    def test_pymemcache(self):
        """A real client against both: refused before, authenticated by a set of "user
        password" (noreply off), then an ordinary client."""
        Client, ClientError = pymemcache_client()
        for port in (self.mc.port, self.sf_port):
            c = Client(("127.0.0.1", port), timeout=5)
            try:
                with self.assertRaisesRegex(ClientError, "unauthenticated"):
                    c.get("k")
                with self.assertRaisesRegex(ClientError, "authentication failure"):
                    c.set("auth", "foo wrong", noreply=False)
                self.assertTrue(c.set("auth", "foo bar", noreply=False))
                self.assertTrue(c.set("k", b"v", noreply=False))
                self.assertEqual(c.get("k"), b"v")
                self.assertEqual(c.get_many(["k", "missing"]), {"k": b"v"})
            finally:
                c.close()


class KnownDifferences(DiffBase):
    """Pipelined before authentication, memcached 1.6.18 loses replies: its unauthenticated path
    writes each answer into the connection's response object when one is still unsent
    (proto_text.c try_read_command_asciiauth: `if (!c->resp) resp_start(c)`; out_string resets
    it), so of the answers to the lines that came in one read (up to its reqs_per_event) only the
    last is sent. Which answers survive depends on how the bytes were cut into reads; a client
    cannot rely on it, and one that counts replies loses sync. We answer every line (as memcached
    does once authenticated). A client that waits for each answer, as ascii-auth.t and pymemcache
    do, sees the same bytes from both (the Diff* sessions)."""

    def pipelined(self, data, memcached, ours):
        conns = self.pair()
        try:
            for s in conns:
                s.sendall(data)
            (want, want_closed), (got, got_closed) = read_quiet(conns)
            self.assertEqual((want, want_closed), (memcached, False), "memcached")
            self.assertEqual((got, got_closed), (ours, False), "ours")
        finally:
            for s in conns:
                s.close()

    def test_pipelined_before_authentication(self):
        lines = [b"get foo\r\n", b"version\r\n", b"mn\r\n", b"set foo 0 0\r\n", b"\r\n"]
        self.pipelined(b"".join(lines), UNAUTH, UNAUTH * len(lines))
        self.pipelined(b"set a 0 0 7\r\nfoo barXY\r\n", UNAUTH,
                       b"CLIENT_ERROR bad command line termination\r\n" + UNAUTH)
        self.pipelined(b"set a 0 0 7\r\nfoo baz\r\nget k\r\n", UNAUTH,
                       b"CLIENT_ERROR authentication failure\r\n" + UNAUTH)
        # a failure then a success: memcached's STORED replaces the failure's answer
        self.pipelined(b"set a 0 0 7\r\nfoo baz\r\nset a 0 0 7\r\nfoo bar\r\nget k\r\n",
                       b"STORED\r\nEND\r\n",
                       b"CLIENT_ERROR authentication failure\r\nSTORED\r\nEND\r\n")


class DiffStats(DiffBase):
    """auth_cmds and auth_errors counted as memcached counts them; stats settings."""

    def stats(self, sock, sub=b""):
        sock.sendall(b"stats" + sub + b"\r\n")
        buf = read_until(sock, b"END\r\n")
        out = {}
        for line in buf.split(b"\r\n"):
            parts = line.split(b" ", 2)
            if parts[0] == b"STAT" and len(parts) == 3:
                out[parts[1].decode()] = parts[2].decode()
        return out

    def test_counters_and_settings(self):
        readers = self.session([b"set a 0 0 7\r\nfoo bar\r\n"])
        try:
            before = [self.stats(s) for s in readers]
            for b in before:
                self.assertIn("auth_cmds", b)
            self.run_session([b"set a 0 0 7\r\nfoo baz\r\n",  # failure
                              b"set a 0 0 2\r\nhi\r\n",  # bad format: not counted
                              b"set a 0 0 7\r\nfoo barXY",  # bad termination: not counted
                              b"get a\r\n",  # unauthenticated: not counted
                              b"set a 0 0 10\r\nbaaaz quux\r\n"])  # success
            after = [self.stats(s) for s in readers]
            for key in ("auth_cmds", "auth_errors"):
                deltas = [int(a[key]) - int(b[key]) for a, b in zip(after, before)]
                self.assertEqual(deltas[1], deltas[0], key)
            self.assertEqual(int(after[1]["auth_cmds"]) - int(before[1]["auth_cmds"]), 2)
            self.assertEqual(int(after[1]["auth_errors"]) - int(before[1]["auth_errors"]), 1)
            settings = [self.stats(s, b" settings") for s in readers]
            for key in ("auth_enabled_ascii", "auth_enabled_sasl", "binding_protocol"):
                self.assertEqual(settings[1][key], settings[0][key], key)
            self.assertEqual(settings[1]["auth_enabled_ascii"], self.path)
            self.session([b"stats reset\r\n"], readers)
            after = [self.stats(s) for s in readers]
            for a in after:
                self.assertEqual((a["auth_cmds"], a["auth_errors"]), ("0", "0"))
            # the general keys in the same order as memcached's -Y (auth_* included)
            keys = [list(self.stats(s)) for s in readers]
            self.assertLess(keys[1].index("auth_cmds"), keys[1].index("auth_errors"))
            self.assertEqual(keys[1][keys[1].index("auth_cmds") - 1],
                             keys[0][keys[0].index("auth_cmds") - 1])
        finally:
            for s in readers:
                s.close()


def env_without_settings(d):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
    env["SNOWFLAKED_DATA_DIR"] = os.path.join(d, "data")
    env["SNOWFLAKED_SNOWFLAKE_DATACENTER_ID"] = "3"  # an identity of its own
    return env


def wait_log(test, srv, text, timeout=5):
    deadline = time.time() + timeout
    while text not in srv.output():
        if time.time() > deadline:
            test.fail("no %r in the log:\n%s" % (text, srv.output()))
        time.sleep(0.02)


def read_until(sock, end):
    buf = b""
    while not buf.endswith(end):
        data = sock.recv(65536)
        if not data:
            raise AssertionError("closed after %r" % buf)
        buf += data
    return buf


def authenticate(port, user=b"foo", password=b"bar"):
    """A connection after the credentials' set: (socket, the answer line)."""
    s = connect(port)
    block = user + b" " + password
    s.sendall(b"set a 0 0 %d\r\n%s\r\n" % (len(block), block))
    return s, read_until(s, b"\r\n")


class Ours(unittest.TestCase):
    def test_refuses_to_start(self):
        """Unreadable: exit 1; empty or malformed: exit 2 with the line; never the password."""
        with tempfile.TemporaryDirectory() as d:
            cases = [(os.path.join(d, "missing"), 1, "No such file or directory"),
                     (authfile(d, b"", name="empty"), 2, "no user:password line"),
                     (authfile(d, b"foo:s3cr3t\nbaaaz s3cr3t\n", name="bad"), 2,
                      "line 2: no ':' between the user and the password"),
                     (authfile(d, b"foo:s3cr3t pw\n", name="space"), 2,
                      "line 1: a space in the password"),
                     (authfile(d, b"foo:s3cr3t\n\n", name="blank"), 2, "line 2: empty line"),
                     (authfile(d, b"".join(b"u%d:s3cr3t\n" % i for i in range(9)),
                               name="nine"), 2, "line 9: more than 8 entries"),
                     (d, 1, "not a regular file")]
            for path, code, text in cases:
                p = subprocess.run(
                    [BINARY, *set_args("cache.memcached_port=%d" % free_port(),
                                       "cache.memcached_auth_file=" + path),
                     "-p", str(free_port())], env=env_without_settings(d),
                    capture_output=True, text=True, timeout=20)
                self.assertEqual(p.returncode, code, p.stderr)
                self.assertIn("cache.memcached_auth_file " + path, p.stderr)
                self.assertIn(text, p.stderr)
                self.assertNotIn("s3cr3t", p.stdout + p.stderr)

    def test_check_config_shows_the_path_only(self):
        with tempfile.TemporaryDirectory() as d:
            path = authfile(d, b"foo:s3cr3t\n")
            p = subprocess.run([BINARY, "--check-config", *set_args(
                "cache.memcached_auth_file=" + path)], env=env_without_settings(d),
                capture_output=True, text=True, timeout=20)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn('"memcached_auth_file": "%s"' % path, p.stdout)
            self.assertNotIn("s3cr3t", p.stdout + p.stderr)

    def test_world_readable_warning(self):
        with tempfile.TemporaryDirectory() as d:
            for mode, warned in ((0o644, True), (0o640, False), (0o600, False)):
                path = authfile(d, mode=mode)
                srv, port = memcache_server("cache.memcached_auth_file=" + path)
                try:
                    s, answer = authenticate(port)
                    s.close()
                    self.assertEqual(answer, b"STORED\r\n")
                    wait_log(self, srv, "listening on http://")  # the logger thread is there
                    out = srv.output()
                finally:
                    srv.stop()
                self.assertEqual("is readable by every user of this host (mode 0%o)" % mode in out,
                                 warned, out)
                self.assertIn("memcached text protocol on 127.0.0.1:%d (authentication: 2 "
                              "entries of %s)" % (port, path), out)
                self.assertNotIn("no authentication", out)

    def test_sighup_reloads(self):
        with tempfile.TemporaryDirectory() as d:
            path = authfile(d, b"foo:bar\n")
            srv, port = memcache_server("cache.memcached_auth_file=" + path)
            try:
                kept, answer = authenticate(port)
                self.assertEqual(answer, b"STORED\r\n")
                pending = connect(port)  # unauthenticated across the reload
                # a good new file: the new password from now on, the old one refused
                authfile(d, b"foo:n3w\napp:other\n")
                srv.signal(signal.SIGHUP)
                self.wait_log(srv, "memcached auth file %s reloaded: 2 entries" % path)
                s, answer = authenticate(port, b"foo", b"n3w")
                s.close()
                self.assertEqual(answer, b"STORED\r\n")
                s, answer = authenticate(port, b"foo", b"bar")
                s.close()
                self.assertEqual(answer, b"CLIENT_ERROR authentication failure\r\n")
                pending.sendall(b"set a 0 0 7\r\nfoo n3w\r\n")
                self.assertEqual(pending.recv(100), b"STORED\r\n")
                # the connection authenticated before stays so
                kept.sendall(b"set k 0 0 1\r\nv\r\nget k\r\n")
                self.assertEqual(read_until(kept, b"END\r\n"),
                                 b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n")
                # a bad file is refused: logged, the table in use kept
                authfile(d, b"foo:s3cr3t\nnocolon\n")
                srv.signal(signal.SIGHUP)
                self.wait_log(srv, "memcached auth file not reloaded, the previous one stays in "
                                   "use: %s: line 2: no ':'" % path)
                s, answer = authenticate(port, b"foo", b"n3w")
                s.close()
                self.assertEqual(answer, b"STORED\r\n")
                os.unlink(path)
                srv.signal(signal.SIGHUP)
                self.wait_log(srv, "not reloaded, the previous one stays in use: %s: No such "
                                   "file" % path)
                s, answer = authenticate(port, b"app", b"other")
                s.close()
                self.assertEqual(answer, b"STORED\r\n")
                # /metrics: 5 in, 1 refused; one reload taken, two refused
                for name, value in (('auth_total{result="ok"}', 5),
                                    ('auth_total{result="failure"}', 1),
                                    ('auth_reloads_total{result="ok"}', 1),
                                    ('auth_reloads_total{result="failure"}', 2)):
                    self.assertEqual(metric(srv, "snowflaked_memcached_" + name), value, name)
                kept.close()
                pending.close()
                out = srv.output()
            finally:
                srv.stop()
            for secret in ("s3cr3t", "n3w", "other"):
                self.assertNotIn(secret, out)

    def test_reload_while_authenticating(self):
        """SIGHUPs swap the table while the loops check credentials (a sanitizer build sees any
        race): foo:bar is in every version of the file, so every attempt succeeds."""
        with tempfile.TemporaryDirectory() as d:
            versions = [b"foo:bar\n", b"x:y\nfoo:bar\nbaaaz:quux\n"]
            path = authfile(d, versions[0])
            srv, port = memcache_server("cache.memcached_auth_file=" + path)
            answers, stop = [], threading.Event()

            def attempts():
                while not stop.is_set():
                    s, answer = authenticate(port)
                    s.close()
                    answers.append(answer)

            workers = [threading.Thread(target=attempts) for _ in range(2)]
            try:
                for w in workers:
                    w.start()
                for i in range(40):
                    authfile(d, versions[i % 2])
                    srv.signal(signal.SIGHUP)
                    time.sleep(0.02)
                wait_log(self, srv, "reloaded: 1 entry")
            finally:
                stop.set()
                for w in workers:
                    w.join()
                srv.stop()
            self.assertGreater(len(answers), 10)
            self.assertEqual(set(answers), {b"STORED\r\n"})

    def wait_log(self, srv, text):
        wait_log(self, srv, text)

    def test_http_cache_api_unaffected(self):
        with tempfile.TemporaryDirectory() as d:
            path = authfile(d)
            srv, port = memcache_server("cache.memcached_auth_file=" + path)
            try:
                put = b"PUT /cache/h HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx"
                self.assertEqual(request(srv, put).status, 201)
                self.assertEqual(request(srv, get("/cache/h")).body, b"x")
                s = connect(port)
                s.sendall(b"get h\r\n")
                self.assertEqual(s.recv(100), UNAUTH)
                s.close()
                s, answer = authenticate(port)
                s.sendall(b"get h\r\n")
                got = read_until(s, b"END\r\n")
                s.close()
                self.assertEqual(got, b"VALUE h 0 1\r\nx\r\nEND\r\n")
            finally:
                srv.stop()

    def test_tls_listener_alone_authenticates_the_same(self):
        """memcached -Z -Y: the TLS listener (the plaintext one off) asks for the credentials
        first, byte for byte as in plaintext, inside the TLS session."""
        import ssl
        import tlscerts
        with tempfile.TemporaryDirectory() as d, tlscerts.Certs() as certs:
            path = authfile(d)
            port = free_port()
            srv = Server(*set_args("cache.memcached_auth_file=" + path,
                                   "cache.memcached_tls.port=%d" % port,
                                   "cache.memcached_tls.cert_file=" + certs.server,
                                   "cache.memcached_tls.key_file=" + certs.server_key))
            try:
                ctx = ssl.create_default_context(cafile=certs.ca)
                raw = socket.create_connection(("127.0.0.1", port), timeout=5)
                s = ctx.wrap_socket(raw, server_hostname="localhost")
                s.sendall(b"get a\r\n")
                self.assertEqual(read_until(s, b"\r\n"), UNAUTH)
                s.sendall(b"set a 0 0 7\r\nfoo baz\r\n")
                self.assertEqual(read_until(s, b"\r\n"), b"CLIENT_ERROR authentication failure\r\n")
                s.sendall(b"set a 0 0 7\r\nfoo bar\r\n")
                self.assertEqual(read_until(s, b"\r\n"), b"STORED\r\n")
                s.sendall(b"set k 0 0 1\r\nv\r\nget k\r\n")
                self.assertEqual(read_until(s, b"END\r\n"), b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n")
                s.close()
                self.assertEqual(metric(srv, 'snowflaked_memcached_auth_total{result="ok"}'), 1)
                self.assertEqual(metric(srv, 'snowflaked_memcached_auth_total{result="failure"}'), 1)
            finally:
                srv.stop()

    def test_without_the_file_nothing_changes(self):
        srv, port = memcache_server()
        try:
            s = connect(port)
            s.sendall(b"set a 0 0 7\r\nfoo bar\r\nget a\r\nstats settings\r\n")
            got = b""
            while got.count(b"END\r\n") < 2:
                data = s.recv(65536)
                self.assertTrue(data, got)
                got += data
            s.close()
            self.assertTrue(got.startswith(b"STORED\r\nVALUE a 0 7\r\nfoo bar\r\nEND\r\n"), got)
            self.assertIn(b"STAT auth_enabled_ascii no\r\n", got)
            for result in ("ok", "failure"):  # exported, 0, for the dashboards' sake
                self.assertEqual(metric(srv, 'snowflaked_memcached_auth_total{result="%s"}'
                                        % result), 0)
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
