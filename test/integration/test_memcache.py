"""The memcached text protocol (cache.memcached_port) against the real binary: every command,
byte-exact replies and error strings, noreply, exptime rules, values split across reads,
pipelining, the 2048-byte line rule, oversized values swallowed, stats, quit."""
import base64
import random
import subprocess
import shutil
import socket
import threading
import time
import unittest

import sfharness
from sfharness import Reader, get, memcache_server, metric, request

MAX_ITEM = 65536


class Client(Reader):
    """A raw text-protocol client that sees exactly what went over the wire (closed() comes
    from the HTTP harness's Reader: same buffer, same socket)."""

    def __init__(self, port, timeout=5):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().__init__(sock)

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        try:
            super()._fill()
        except EOFError:
            raise EOFError("connection closed after %r" % self.buf) from None

    def read(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        out, self.buf = self.buf.split(b"\r\n", 1)
        return out + b"\r\n"

    def ask(self, raw, nbytes=None):
        """Sends raw and returns one reply line (or nbytes bytes)."""
        self.send(raw)
        return self.read(nbytes) if nbytes is not None else self.line()

    def get_all(self, raw):
        """Sends a retrieval command; returns {key: (flags, value, cas or None)} up to END."""
        self.send(raw)
        found = {}
        while True:
            ln = self.line()
            if ln == b"END\r\n":
                return found
            parts = ln.split()
            if parts[0] != b"VALUE":
                raise AssertionError("unexpected %r" % ln)
            value = self.read(int(parts[3]) + 2)
            assert value.endswith(b"\r\n"), value
            cas = int(parts[4]) if len(parts) > 4 else None
            found[parts[1].decode()] = (int(parts[2]), value[:-2], cas)

    def stats(self, sub=b""):
        """{name: value} of "stats<sub>" (sub with its leading space) up to END, STAT and
        cachedump's ITEM lines."""
        self.send(b"stats" + sub + b"\r\n")
        out = {}
        while True:
            ln = self.line()
            if ln == b"END\r\n":
                return out
            parts = ln.decode().rstrip("\r\n").split(" ", 2)
            if parts[0] not in ("STAT", "ITEM"):
                raise AssertionError("unexpected %r" % ln)
            out[parts[1]] = parts[2]


class MemcacheServer(unittest.TestCase):
    """One daemon for the class's tests (self.srv), its memcached listener on a free port
    (self.port), with the class's SETTINGS ("key=value" each) besides. self.client() is a
    Client closed when the test ends, even a failed one."""
    SETTINGS = ()

    @classmethod
    def setUpClass(cls):
        cls.srv, cls.port = memcache_server(*cls.SETTINGS)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def client(self, timeout=5):
        c = Client(self.port, timeout=timeout)
        self.addCleanup(c.close)
        return c


class MemcacheSession(MemcacheServer):
    """A MemcacheServer whose every test has a client of its own in self.c."""

    def setUp(self):
        self.c = self.client()


class Memcache(MemcacheSession):
    SETTINGS = ("cache.max_item_bytes=%d" % MAX_ITEM,)

    def key(self, name):
        return ("%s_%s" % (self.id().rsplit(".", 1)[1], name)).encode()

    def set(self, key, value, flags=0, exptime=0, cmd=b"set"):
        return self.c.ask(b"%s %s %d %d %d\r\n%s\r\n" % (cmd, key, flags, exptime, len(value),
                                                          value))

    def get(self, key):
        got = self.c.get_all(b"get " + key + b"\r\n")
        return got[key.decode()][1] if got else None

    # ---- storage and retrieval ------------------------------------------------------------

    def test_set_get_round_trip(self):
        k = self.key("a")
        self.assertEqual(self.set(k, b"hello", flags=42), b"STORED\r\n")
        want = b"VALUE " + k + b" 42 5\r\nhello\r\nEND\r\n"
        self.assertEqual(self.c.ask(b"get " + k + b"\r\n", len(want)), want)
        binary = bytes(range(256)) + b"\r\n\r\nEND\r\n"
        self.assertEqual(self.set(k, binary, flags=4294967295), b"STORED\r\n")
        self.assertEqual(self.c.get_all(b"get " + k + b"\r\n"),
                         {k.decode(): (4294967295, binary, None)})
        self.assertEqual(self.set(k, b""), b"STORED\r\n")
        self.assertEqual(self.get(k), b"")
        self.assertEqual(self.c.ask(b"get nosuchkey_x\r\n"), b"END\r\n")

    def test_multi_get_with_misses(self):
        a, b = self.key("a"), self.key("b")
        self.set(a, b"1")
        self.set(b, b"22", flags=7)
        got = self.c.get_all(b"get " + a + b" missing1 " + b + b" missing2 " + a + b"\r\n")
        self.assertEqual(got, {a.decode(): (0, b"1", None), b.decode(): (7, b"22", None)})
        # the same key twice answers twice, in order
        self.c.send(b"get " + a + b" " + b + b" " + a + b"\r\n")
        keys = []
        while True:
            ln = self.c.line()
            if ln == b"END\r\n":
                break
            keys.append(ln.split()[1])
            self.c.read(int(ln.split()[3]) + 2)
        self.assertEqual(keys, [a, b, a])

    def test_gets_and_cas(self):
        k = self.key("a")
        self.set(k, b"v1")
        cas = self.c.get_all(b"gets " + k + b"\r\n")[k.decode()][2]
        self.assertIsNotNone(cas)
        self.assertEqual(self.c.ask(b"cas %s 3 0 2 %d\r\nv2\r\n" % (k, cas)), b"STORED\r\n")
        flags, value, cas2 = self.c.get_all(b"gets " + k + b"\r\n")[k.decode()]
        self.assertEqual((flags, value), (3, b"v2"))
        self.assertNotEqual(cas2, cas)
        self.assertEqual(self.c.ask(b"cas %s 0 0 2 %d\r\nv3\r\n" % (k, cas)), b"EXISTS\r\n")
        self.assertEqual(self.get(k), b"v2")
        self.assertEqual(self.c.ask(b"cas %s 0 0 2 %d\r\nv3\r\n" % (self.key("none"), cas)),
                         b"NOT_FOUND\r\n")
        # refused, its data block swallowed (issue 21; memcached reads it as a command)
        self.assertEqual(self.c.ask(b"cas %s 0 0 2 zz\r\nv3\r\n" % k),
                         b"CLIENT_ERROR bad command line format\r\n")
        self.assertEqual(self.c.ask(b"cas %s 0 0 2\r\n" % k), b"ERROR\r\n")

    def test_add_replace_append_prepend(self):
        k, none = self.key("a"), self.key("none")
        self.assertEqual(self.set(k, b"x", cmd=b"add"), b"STORED\r\n")
        self.assertEqual(self.set(k, b"y", cmd=b"add"), b"NOT_STORED\r\n")
        self.assertEqual(self.get(k), b"x")
        self.assertEqual(self.set(k, b"mid", flags=5, cmd=b"replace"), b"STORED\r\n")
        self.assertEqual(self.set(none, b"y", cmd=b"replace"), b"NOT_STORED\r\n")
        self.assertEqual(self.get(none), None)
        self.assertEqual(self.set(k, b">>", flags=9, cmd=b"append"), b"STORED\r\n")
        self.assertEqual(self.set(k, b"<<", flags=9, cmd=b"prepend"), b"STORED\r\n")
        self.assertEqual(self.c.get_all(b"get " + k + b"\r\n"), {k.decode(): (5, b"<<mid>>", None)})
        self.assertEqual(self.set(none, b"y", cmd=b"append"), b"NOT_STORED\r\n")
        self.assertEqual(self.set(none, b"y", cmd=b"prepend"), b"NOT_STORED\r\n")
        self.assertEqual(self.get(none), None)

    def test_delete(self):
        k = self.key("a")
        self.set(k, b"x")
        self.assertEqual(self.c.ask(b"delete " + k + b"\r\n"), b"DELETED\r\n")
        self.assertEqual(self.c.ask(b"delete " + k + b"\r\n"), b"NOT_FOUND\r\n")
        self.assertEqual(self.get(k), None)
        self.set(k, b"x")
        self.assertEqual(self.c.ask(b"delete " + k + b" 0\r\n"), b"DELETED\r\n")
        self.assertEqual(self.c.ask(b"delete " + k + b" 5\r\n"),
                         b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n")
        self.assertEqual(self.c.ask(b"delete\r\n"), b"ERROR\r\n")

    def test_incr_decr(self):
        k = self.key("n")
        self.set(k, b"10", flags=3)
        self.assertEqual(self.c.ask(b"incr " + k + b" 5\r\n"), b"15\r\n")
        self.assertEqual(self.c.ask(b"decr " + k + b" 6\r\n"), b"9\r\n")
        self.assertEqual(self.c.ask(b"incr " + k + b" 991\r\n"), b"1000\r\n")
        self.assertEqual(self.c.get_all(b"get " + k + b"\r\n"), {k.decode(): (3, b"1000", None)})
        self.assertEqual(self.c.ask(b"decr " + k + b" 5000\r\n"), b"0\r\n")  # stops at 0
        self.set(k, b"18446744073709551615")
        self.assertEqual(self.c.ask(b"incr " + k + b" 2\r\n"), b"1\r\n")  # wraps
        self.assertEqual(self.c.ask(b"incr " + self.key("none") + b" 1\r\n"), b"NOT_FOUND\r\n")
        self.set(k, b"abc")
        self.assertEqual(self.c.ask(b"incr " + k + b" 1\r\n"),
                         b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
        self.assertEqual(self.c.ask(b"decr " + k + b" 1\r\n"),
                         b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
        for bad in (b"x", b"-1", b"18446744073709551616", b"1x"):
            self.assertEqual(self.c.ask(b"incr " + k + b" " + bad + b"\r\n"),
                             b"CLIENT_ERROR invalid numeric delta argument\r\n")
        self.assertEqual(self.c.ask(b"incr " + k + b"\r\n"), b"ERROR\r\n")

    def test_touch_and_gat(self):
        k = self.key("a")
        self.set(k, b"v", flags=1)
        self.assertEqual(self.c.ask(b"touch " + k + b" 100\r\n"), b"TOUCHED\r\n")
        self.assertEqual(self.c.ask(b"touch " + self.key("none") + b" 100\r\n"), b"NOT_FOUND\r\n")
        self.assertEqual(self.c.ask(b"touch " + k + b" abc\r\n"),
                         b"CLIENT_ERROR invalid exptime argument\r\n")
        self.assertEqual(self.c.get_all(b"gat 100 " + k + b" missing\r\n"),
                         {k.decode(): (1, b"v", None)})
        got = self.c.get_all(b"gats 0 " + k + b"\r\n")
        self.assertIsNotNone(got[k.decode()][2])
        self.assertEqual(self.c.ask(b"gat abc " + k + b"\r\n"),
                         b"CLIENT_ERROR invalid exptime argument\r\n")
        self.assertEqual(self.c.ask(b"gat 10\r\n"), b"END\r\n")  # memcached 1.6 alike
        self.assertEqual(self.c.ask(b"gat\r\n"), b"ERROR\r\n")
        # gat with a negative exptime returns the item once, then it is gone
        self.assertEqual(self.c.get_all(b"gat -1 " + k + b"\r\n"), {k.decode(): (1, b"v", None)})
        self.assertEqual(self.get(k), None)
        self.set(k, b"v")
        self.assertEqual(self.c.ask(b"touch " + k + b" -1\r\n"), b"TOUCHED\r\n")
        self.assertEqual(self.get(k), None)

    def test_exptime_rules(self):
        rel, neg, absf, absp = (self.key(n) for n in ("rel", "neg", "absf", "absp"))
        self.assertEqual(self.set(rel, b"r", exptime=1), b"STORED\r\n")
        self.assertEqual(self.set(neg, b"n", exptime=-1), b"STORED\r\n")
        self.assertEqual(self.set(absf, b"f", exptime=int(time.time()) + 100), b"STORED\r\n")
        self.assertEqual(self.set(absp, b"p", exptime=int(time.time()) - 10), b"STORED\r\n")
        self.assertEqual(self.get(neg), None)
        self.assertEqual(self.get(absp), None)
        self.assertEqual(self.get(rel), b"r")
        self.assertEqual(self.get(absf), b"f")
        time.sleep(2.1)
        self.assertEqual(self.get(rel), None)
        self.assertEqual(self.get(absf), b"f")
        # a touch moves the deadline: 30 days exactly is still relative
        self.assertEqual(self.c.ask(b"touch " + absf + b" 2592000\r\n"), b"TOUCHED\r\n")
        self.assertEqual(self.get(absf), b"f")

    def test_flush_all(self):
        k = self.key("a")
        self.set(k, b"v")
        self.assertEqual(self.c.ask(b"flush_all\r\n"), b"OK\r\n")
        self.assertEqual(self.get(k), None)
        self.set(k, b"v2")  # stored after the flush: visible
        self.assertEqual(self.get(k), b"v2")
        self.assertEqual(self.c.ask(b"flush_all 0\r\n"), b"OK\r\n")
        self.assertEqual(self.get(k), None)
        self.assertEqual(self.c.ask(b"flush_all abc\r\n"),
                         b"CLIENT_ERROR invalid exptime argument\r\n")
        self.assertEqual(self.c.ask(b"flush_all noreply\r\nversion\r\n")[:8], b"VERSION ")

    def test_flush_all_delayed(self):
        k = self.key("a")
        self.set(k, b"v")
        self.assertEqual(self.c.ask(b"flush_all 2\r\n"), b"OK\r\n")
        self.assertEqual(self.get(k), b"v")
        time.sleep(2.2)
        self.assertEqual(self.get(k), None)

    def test_noreply(self):
        k = self.key("a")
        self.c.send(b"set %s 1 0 3 noreply\r\nabc\r\n" % k +
                    b"add %s 0 0 1 noreply\r\nx\r\n" % k +
                    b"append %s 0 0 1 noreply\r\nd\r\n" % k +
                    b"replace %s 0 0 1 noreply\r\nq\r\n" % self.key("none") +
                    b"incr %s 1 noreply\r\n" % k +
                    b"touch %s 100 noreply\r\n" % k +
                    b"set %s 0 0 1 noreply\r\n7\r\n" % self.key("n") +
                    b"incr %s 5 noreply\r\n" % self.key("n") +
                    b"delete %s noreply\r\n" % self.key("none") +
                    b"delete %s 0 noreply\r\n" % self.key("none") +
                    b"verbosity 1 noreply\r\n"
                    b"version\r\n")
        self.assertTrue(self.c.line().startswith(b"VERSION "))
        self.assertEqual(self.c.get_all(b"get %s %s\r\n" % (k, self.key("n"))),
                         {k.decode(): (1, b"abcd", None), self.key("n").decode(): (0, b"12", None)})
        self.assertEqual(self.c.ask(b"delete %s noreply\r\nget %s\r\n" % (k, k)), b"END\r\n")

    # ---- framing ----------------------------------------------------------------------------

    def test_value_split_byte_by_byte(self):
        k = self.key("a")
        value = bytes(range(200)) * 3
        raw = b"set %s 9 0 %d\r\n%s\r\nget %s\r\n" % (k, len(value), value, k)
        for i in range(len(raw)):
            self.c.send(raw[i:i + 1])
            if i % 97 == 0:
                time.sleep(0.002)  # let some bytes arrive alone
        self.assertEqual(self.c.line(), b"STORED\r\n")
        self.assertEqual(self.c.line(), b"VALUE %s 9 %d\r\n" % (k, len(value)))
        self.assertEqual(self.c.read(len(value) + 7), value + b"\r\nEND\r\n")

    def test_large_value_many_writes(self):
        k = self.key("a")
        value = bytes(i % 251 for i in range(60000))
        self.c.send(b"set %s 0 0 %d\r\n" % (k, len(value)))
        for i in range(0, len(value), 1000):
            self.c.send(value[i:i + 1000])
            time.sleep(0.001)
        self.c.send(b"\r\n")
        self.assertEqual(self.c.line(), b"STORED\r\n")
        self.assertEqual(self.get(k), value)

    def test_pipeline_200_commands(self):
        raw, want = b"", b""
        for i in range(100):
            k = self.key("k%d" % i)
            raw += b"set %s 0 0 %d\r\n%d\r\n" % (k, len(str(i)), i)
            want += b"STORED\r\n"
            raw += b"get %s\r\n" % k
            want += b"VALUE %s 0 %d\r\n%d\r\nEND\r\n" % (k, len(str(i)), i)
        self.c.send(raw)
        self.assertEqual(self.c.read(len(want)), want)
        self.assertTrue(self.c.ask(b"version\r\n").startswith(b"VERSION "))

    def test_long_line_without_newline_closes(self):
        self.c.send(b"x" * 3000)
        self.assertTrue(self.c.closed())
        c = self.client()
        c.send(b"set k 0 0 1 " + b" " * 2100)
        self.assertTrue(c.closed())

    def test_long_line_with_newline_is_a_command(self):
        self.assertEqual(self.c.ask(b"x" * 2000 + b"\r\n"), b"ERROR\r\n")
        self.assertEqual(self.c.ask(b"set " + b"k" * 3000 + b" 0 0 1\r\n"),
                         b"CLIENT_ERROR bad command line format\r\n")

    def test_long_multiget(self):
        keys = [self.key("k%04d" % i) for i in range(600)]
        for k in keys[::50]:
            self.set(k, k)
        line = b"get " + b" ".join(keys) + b"\r\n"
        self.assertGreater(len(line), 8192)
        for i in range(0, len(line), 1500):  # arrives in pieces, a key cut at each boundary
            self.c.send(line[i:i + 1500])
            time.sleep(0.002)
        got = self.c.get_all(b"")
        self.assertEqual(got, {k.decode(): (0, k, None) for k in keys[::50]})
        self.assertTrue(self.c.ask(b"version\r\n").startswith(b"VERSION "))

    def test_bare_newline_and_empty_line(self):
        self.assertTrue(self.c.ask(b"version\n").startswith(b"VERSION "))
        self.assertEqual(self.c.ask(b"\r\n"), b"ERROR\r\n")

    # ---- errors ---------------------------------------------------------------------------

    def test_error_strings(self):
        c = self.c
        self.assertEqual(c.ask(b"bogus\r\n"), b"ERROR\r\n")
        self.assertEqual(c.ask(b"get\r\n"), b"ERROR\r\n")
        self.assertEqual(c.ask(b"set k 0 0\r\n"), b"ERROR\r\n")
        self.assertEqual(c.ask(b"set k 0 0 1 noreply extra\r\n"), b"ERROR\r\n")
        # a refused storage line whose length reads: its data block is swallowed (issue 21)
        self.assertEqual(c.ask(b"set k abc 0 1\r\nx\r\n"),
                         b"CLIENT_ERROR bad command line format\r\n")
        self.assertEqual(c.ask(b"set k 0 0 -1\r\n"), b"CLIENT_ERROR bad command line format\r\n")
        self.assertEqual(c.ask(b"set k 4294967296 0 1\r\nx\r\n"),
                         b"CLIENT_ERROR bad command line format\r\n")
        long_key = b"k" * 251
        self.assertEqual(c.ask(b"set " + long_key + b" 0 0 1\r\nx\r\n"),
                         b"CLIENT_ERROR bad command line format\r\n")
        self.assertEqual(c.ask(b"get " + long_key + b"\r\n"),
                         b"CLIENT_ERROR bad command line format\r\n")
        self.assertEqual(c.ask(b"incr " + long_key + b" 1\r\n"),
                         b"CLIENT_ERROR bad command line format\r\n")
        self.assertEqual(c.ask(b"get " + b"k" * 250 + b"\r\n"), b"END\r\n")
        # a data block not followed by \r\n: refused, the bytes after it are read as commands
        k = self.key("chunk")
        self.assertEqual(c.ask(b"set %s 0 0 3\r\nabcde\r\n" % k),
                         b"CLIENT_ERROR bad data chunk\r\n")
        self.assertEqual(c.line(), b"ERROR\r\n")
        self.assertEqual(self.get(k), None)
        self.assertTrue(c.ask(b"version\r\n").startswith(b"VERSION "))

    def test_too_large_value_is_swallowed(self):
        k = self.key("big")
        self.set(k, b"old")
        big = b"\r\n" * (MAX_ITEM // 2 + 10)  # looks like commands if not swallowed
        self.assertEqual(self.c.ask(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(big), big)),
                         b"SERVER_ERROR object too large for cache\r\n")
        self.assertTrue(self.c.ask(b"version\r\n").startswith(b"VERSION "))
        self.assertEqual(self.get(k), None)  # memcached drops the old value of a failed set
        self.assertEqual(self.c.ask(b"add %s 0 0 %d\r\n%s\r\n" % (k, len(big), big)),
                         b"SERVER_ERROR object too large for cache\r\n")
        self.assertEqual(self.set(k, b"ok"), b"STORED\r\n")

    # ---- meta commands (byte-exactness: test_memcache_diff.py; here what it cannot show) ----

    def test_meta_binary_base64_key(self):
        # any decoded bytes are a key, as in memcached (the text key rule is for text keys), and
        # k answers it encoded again
        self.assertEqual(self.c.ask(b"ms AAEC 3 b\r\nabc\r\n"), b"HD\r\n")
        want = b"VA 3 kAAEC b\r\nabc\r\n"
        self.assertEqual(self.c.ask(b"mg AAEC b k v\r\n", len(want)), want)
        self.assertEqual(self.c.ask(b"ma AAEC b N0 k\r\n"),
                         b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
        self.assertEqual(self.c.ask(b"md AAEC b k\r\n"), b"HD kAAEC b\r\n")
        self.assertEqual(self.c.ask(b"mg AAEC b k v\r\n"), b"EN kAAEC b\r\n")
        self.assertEqual(self.c.ask(b"mg YSBi b\r\n"), b"EN\r\n")  # "a b"
        # a printable one round-trips, returned encoded
        k = self.key("b64")
        enc = base64.b64encode(k)
        self.assertEqual(self.c.ask(b"ms %s 2 b k\r\nhi\r\n" % enc), b"HD k%s b\r\n" % enc)
        self.assertEqual(self.get(k), b"hi")
        want = b"VA 2 k%s b\r\nhi\r\n" % enc
        self.assertEqual(self.c.ask(b"mg %s b k v\r\n" % enc, len(want)), want)

    def concurrently(self, work, threads=4):
        errors = []

        def run():
            c = Client(self.port)
            try:
                work(c)
            except Exception as e:  # reported below
                errors.append(e)
            finally:
                c.close()
        ts = [threading.Thread(target=run) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        self.assertEqual(errors, [])

    def test_meta_arithmetic_concurrent(self):
        # ma computes and stores in CAS mode, going again when another writer came in between:
        # no increment may be lost, and each counts in stats
        k = self.key("n").decode()

        def stats_hits():
            return int(self.stats()["incr_hits"])
        before = stats_hits()
        replies = []

        def work(c):
            c.send(("ma %s N0 q\r\n" % k).encode() * 200 + b"mn\r\n")
            while True:
                ln = c.line()
                if ln == b"MN\r\n":
                    break
                replies.append(ln)
        self.concurrently(work)
        self.assertEqual(replies, [b"HD\r\n"])  # quiet hides the hits, not the one creation
        self.assertEqual(self.c.ask(("mg %s v\r\n" % k).encode()), b"VA 3\r\n")
        self.assertEqual(self.c.line(), b"799\r\n")  # the creating call adds nothing
        self.assertEqual(stats_hits() - before, 799)

    def test_meta_append_with_cas_concurrent(self):
        # ms MA with a CAS builds the joined item and stores it in CAS mode: an append made
        # with a stale CAS is EX, never applied twice nor lost
        k = self.key("log")
        self.assertEqual(self.c.ask(b"ms %s 0\r\n\r\n" % k), b"HD\r\n")

        def work(c):
            done = 0
            while done < 50:
                cas = c.ask(b"mg %s c\r\n" % k).split()[1][1:]
                reply = c.ask(b"ms %s 1 MA C%s\r\nx\r\n" % (k, cas))
                self.assertIn(reply, (b"HD\r\n", b"EX\r\n"))
                done += reply == b"HD\r\n"
        self.concurrently(work)
        self.assertEqual(self.get(k), b"x" * 200)

    # ---- other commands -------------------------------------------------------------------

    def test_version_verbosity(self):
        self.assertRegex(self.c.ask(b"version\r\n"), rb"^VERSION \S+\r\n$")
        self.assertEqual(self.c.ask(b"verbosity 1\r\n"), b"OK\r\n")
        self.assertEqual(self.c.ask(b"verbosity\r\n"), b"ERROR\r\n")
        self.assertEqual(self.c.ask(b"verbosity x\r\n"), b"CLIENT_ERROR bad command line format\r\n")
        self.assertEqual(self.c.ask(b"verbosity noreply\r\nversion\r\n")[:8], b"VERSION ")

    def test_stats(self):
        k = self.key("a")
        self.set(k, b"v")
        self.get(k)
        self.get(self.key("none"))
        self.c.send(b"stats\r\n")
        stats = {}
        while True:
            ln = self.c.line()
            if ln == b"END\r\n":
                break
            parts = ln.decode().split()
            self.assertEqual((parts[0], len(parts)), ("STAT", 3), ln)
            stats[parts[1]] = parts[2]
        for name in ("pid", "uptime", "time", "version", "curr_connections", "total_connections",
                     "cmd_get", "cmd_set", "get_hits", "get_misses", "curr_items", "total_items",
                     "bytes", "evictions", "limit_maxbytes", "threads"):
            self.assertIn(name, stats)
        self.assertEqual(int(stats["pid"]), self.srv.proc.pid)
        self.assertLessEqual(abs(int(stats["time"]) - time.time()), 5)
        self.assertGreaterEqual(int(stats["get_hits"]), 1)
        self.assertGreaterEqual(int(stats["get_misses"]), 1)
        self.assertGreaterEqual(int(stats["cmd_set"]), 1)
        self.assertGreaterEqual(int(stats["curr_items"]), 1)
        self.assertGreaterEqual(int(stats["curr_connections"]), 1)
        self.assertEqual(int(stats["threads"]), 2)

    def stats(self, sub=b""):
        return self.c.stats(sub)

    def test_stats_general_has_memcacheds_90_keys(self):
        stats = self.stats()
        # memcached 1.6.18 without LRU crawler (83 keys), with its segmented LRU's 7:
        # lru_maintainer_juggles, evicted_active, moves_*, direct_reclaims, lru_bumps_dropped
        self.assertEqual(len(stats), 90)
        self.assertIn("lru_maintainer_juggles", stats)
        self.assertEqual(stats["accepting_conns"], "1")
        self.assertEqual(stats["max_connections"], self.stats(b" settings")["maxconns"])
        self.assertGreater(int(stats["bytes_read"]), 0)  # the listener's own bytes

    def test_stats_reset(self):
        k = self.key("a")
        self.set(k, b"v")
        self.get(k)
        self.get(self.key("none"))
        self.assertEqual(self.c.ask(b"stats reset\r\n"), b"RESET\r\n")
        stats = self.stats()
        for name in ("cmd_get", "cmd_set", "get_hits", "get_misses", "total_items",
                     "total_connections", "delete_hits", "evictions", "reclaimed"):
            self.assertEqual(stats[name], "0", name)
        self.assertGreaterEqual(int(stats["curr_items"]), 1)  # state, not a counter: kept
        self.assertGreaterEqual(int(stats["curr_connections"]), 1)
        self.get(k)
        stats = self.stats()
        self.assertEqual((stats["cmd_get"], stats["get_hits"]), ("1", "1"))
        # /metrics counts from the start: a reset of the memcached view leaves it monotonic
        self.assertGreaterEqual(
            metric(self.srv, 'snowflaked_cache_operations_total{op="get_hits"}'), 2)

    def test_stats_items_and_slabs_by_size_class(self):
        self.set(b"e1", b"")  # 64 + 2 bytes: memcached's class 1 (96-byte chunks)
        slabs = self.stats(b" slabs")
        self.assertEqual(slabs["1:chunk_size"], "96")
        self.assertGreaterEqual(int(slabs["1:used_chunks"]), 1)
        self.assertIn("e1", self.stats(b" cachedump 1 0"))
        big = self.key("big")
        # accounted 57832 bytes (our allocation class for 64 + key + 50000). With 64 KiB items
        # the classes are memcached's up to 42384 bytes, then the largest chunk: 65536
        # (memcached -I 64k -o slab_chunk_max=64k alike), where it lands.
        self.set(big, b"B" * 50000)
        self.assertEqual(self.stats(b" settings")["slab_chunk_max"], str(MAX_ITEM))
        slabs = self.stats(b" slabs")
        last = max(int(k.split(":")[0]) for k in slabs if k.endswith(":chunk_size"))
        self.assertEqual((last, slabs["%d:chunk_size" % last]), (29, str(MAX_ITEM)))
        self.assertGreaterEqual(int(self.stats(b" items")["items:%d:number" % last]), 1)
        self.assertGreaterEqual(int(slabs["total_malloced"]), 57832)
        self.assertEqual(self.c.ask(b"delete %s\r\n" % big), b"DELETED\r\n")

    def test_stats_settings(self):
        st = self.stats(b" settings")
        self.assertEqual((st["tcpport"], st["udpport"]), (str(self.port), "0"))
        self.assertEqual((st["evictions"], st["cas_enabled"], st["growth_factor"]),
                         ("on", "yes", "1.25"))
        self.assertEqual((st["item_size_max"], st["num_threads"]), (str(MAX_ITEM), "2"))
        self.assertEqual(st["maxbytes"], self.stats()["limit_maxbytes"])

    def test_stats_detail(self):
        c = self.c
        self.assertEqual(c.ask(b"stats reset\r\n"), b"RESET\r\n")  # also empties the table
        self.assertEqual(c.ask(b"stats detail on\r\n"), b"OK\r\n")
        try:
            self.set(b"dt:1", b"v")
            self.get(b"dt:1")
            self.get(b"dt:2")
            self.assertEqual(c.ask(b"delete dt:3\r\n"), b"NOT_FOUND\r\n")
            self.get(b"noprefix")  # no ':': not counted
            self.assertEqual(self.stats(b" settings")["detail_enabled"], "yes")
            c.send(b"stats detail dump\r\n")
            self.assertEqual(c.line(), b"PREFIX dt get 2 hit 1 set 1 del 1\r\n")
            self.assertEqual(c.line(), b"END\r\n")
        finally:
            self.assertEqual(c.ask(b"stats detail off\r\n"), b"OK\r\n")
        self.get(b"dt:1")  # off: not counted
        c.send(b"stats detail dump\r\n")
        self.assertEqual(c.line(), b"PREFIX dt get 2 hit 1 set 1 del 1\r\n")
        self.assertEqual(c.line(), b"END\r\n")
        self.assertEqual(c.ask(b"stats detail\r\n"),
                         b"CLIENT_ERROR usage: stats detail on|off|dump\r\n")

    def test_stats_cachedump(self):
        k = b"cdk"  # short: its item stays in class 1
        self.set(k, b"12345", exptime=int(time.time()) + 1000)
        dump = self.stats(b" cachedump 1 0")
        self.assertRegex(dump[k.decode()], r"^\[5 b; \d+ s\]$")
        self.assertLessEqual(abs(int(dump[k.decode()].split()[2]) - time.time() - 1000), 5)
        self.assertEqual(self.c.ask(b"stats cachedump 1\r\n"), b"CLIENT_ERROR bad command line\r\n")
        self.assertEqual(self.c.ask(b"stats cachedump 64 1\r\n"),
                         b"CLIENT_ERROR Illegal slab id\r\n")

    def test_stats_conns_lists_listener_and_self(self):
        self.c.send(b"stats conns\r\n")
        text = b""
        while not text.endswith(b"END\r\n"):
            text += self.c.line()
        self.assertRegex(text, rb"STAT \d+:addr tcp:127\.0\.0\.1:%d\r\n"
                         rb"STAT \d+:state conn_listening" % self.port)
        self.assertRegex(text, rb"STAT \d+:listen_addr tcp:127\.0\.0\.1:%d\r\n" % self.port)
        self.assertIn(b"conn_parse_cmd", text)

    def test_expired_items_are_reclaimed_and_unfetched(self):
        before = self.stats()
        self.set(self.key("short"), b"v", exptime=1)
        time.sleep(2.5)  # expired; the sweep (every 100 ms per loop), our crawler, takes it back
        after = self.stats()
        self.assertGreaterEqual(
            int(after["crawler_reclaimed"]) - int(before["crawler_reclaimed"]), 1)
        self.assertGreaterEqual(
            int(after["expired_unfetched"]) - int(before["expired_unfetched"]), 1)

    def test_quit_closes(self):
        self.c.send(b"quit\r\n")
        self.assertTrue(self.c.closed())

    def test_pymemcache_client(self):
        PyClient = sfharness.debian_import("pymemcache.client.base", "python3-pymemcache").Client
        mc = PyClient(("127.0.0.1", self.port), timeout=5)
        try:
            k = self.key("py").decode()
            self.assertTrue(mc.set(k, b"value", noreply=False))
            self.assertEqual(mc.get(k), b"value")
            value, cas = mc.gets(k)
            self.assertTrue(mc.cas(k, b"v2", cas))
            self.assertFalse(mc.cas(k, b"v3", cas))
            self.assertEqual(mc.get_many([k, "py_missing"]), {k: b"v2"})
            mc.set(k + "n", b"5", noreply=False)
            self.assertEqual(mc.incr(k + "n", 3), 8)
            self.assertTrue(mc.delete(k, noreply=False))
            self.assertIsNone(mc.get(k))
        finally:
            mc.close()


class RefusedStorageBlocks(MemcacheServer):
    """Issue 21: a storage command refused with an error never runs its data block as commands,
    whatever the command (set/add/replace/append/prepend/cas, ms), the refusal, and however the
    bytes arrive (one write, split at random points, byte by byte, pipelined). The blocks are
    command lines that would show if they ran; after each, "keep" still holds "safe" and the
    HTTP item is still there. Its own daemon: a failure flushes the store. The exhaustive matrix
    (every block, every cut) is unit_memcache_stream's refused_store tcase."""
    SMALL = 64  # cache.max_item_bytes: a 100-byte block is a too-large refusal
    SETTINGS = ("cache.max_item_bytes=%d" % SMALL,)
    LINE_ERR = b"CLIENT_ERROR bad command line format\r\n"
    LARGE_ERR = b"SERVER_ERROR object too large for cache\r\n"
    BLOCKS = [b"flush_all noreply", b"delete keep", b"set keep 0 0 4 noreply\r\nevil",
              b"set canary 0 0 1\r\nx", b"md keep q", b"version"]
    TAIL = b"get keep canary\r\nmn\r\n"
    TAIL_REPLY = b"VALUE keep 0 4\r\nsafe\r\nEND\r\nMN\r\n"
    # (why, key, flags, exptime, cas, error, too large)
    CLASSIC = [
        ("control byte in key", b"k\x01y", b"0", b"0", b"1", LINE_ERR, False),
        ("UTF-8 key", "user:José".encode(), b"0", b"0", b"1", LINE_ERR, False),
        ("key over 250 bytes", b"k" * 251, b"0", b"0", b"1", LINE_ERR, False),
        ("flags over 32 bits", b"k", b"4294967296", b"0", b"1", LINE_ERR, False),
        ("flags not a number", b"k", b"abc", b"0", b"1", LINE_ERR, False),
        ("exptime over int32", b"k", b"0", b"4294967296", b"1", LINE_ERR, False),
        ("exptime not a number", b"k", b"0", b"x", b"1", LINE_ERR, False),
        ("bad cas unique", b"k", b"0", b"0", b"zz", LINE_ERR, False),
        ("value too large", b"k", b"0", b"0", b"1", LARGE_ERR, True),
    ]
    # (why, line after "ms <key> <len>" as key + flags, error, too large)
    META = [
        ("key over 250 bytes", b"k" * 251, b"", LINE_ERR, False),
        ("UTF-8 key", "user:José".encode(), b"", LINE_ERR, False),
        ("too many flags", b"k", b" a b c d e f g h i j k l m n o p q r",
         b"CLIENT_ERROR options flags too long\r\n", False),
        ("unknown flag", b"k", b" Z", b"CLIENT_ERROR invalid flag\r\n", False),
        ("bad mode", b"k", b" MX", b"CLIENT_ERROR invalid mode for ms M token\r\n", False),
        ("bad base64 key", b"a!", b" b", b"CLIENT_ERROR error decoding key\r\n", False),
        ("value too large", b"k", b" T0", LARGE_ERR, True),
    ]

    def cases(self):
        """(what, refused line + block + CRLF, expected error) for every command and reason."""
        n = 0
        for cmd in (b"set", b"add", b"replace", b"append", b"prepend", b"cas"):
            for why, key, flags, exptime, cas, err, large in self.CLASSIC:
                if why == "bad cas unique" and cmd != b"cas":
                    continue
                for noreply in (False, True):
                    block = self.BLOCKS[n % len(self.BLOCKS)]
                    n += 1
                    if large:
                        block = block.ljust(100)
                    line = b"%s %s %s %s %d" % (cmd, key, flags, exptime, len(block))
                    if cmd == b"cas":
                        line += b" " + (cas if why == "bad cas unique" else b"1")
                    line += b" noreply" if noreply else b""
                    yield ("%s: %s%s" % (cmd.decode(), why, " noreply" if noreply else ""),
                           line + b"\r\n" + block + b"\r\n", b"" if noreply else err)
        for why, key, flags, err, large in self.META:
            for block in self.BLOCKS:
                if large:
                    block = block.ljust(100)
                yield ("ms: " + why, b"ms %s %d%s\r\n" % (key, len(block), flags) + block +
                       b"\r\n", err)

    def reset(self, c):
        c.send(b"set keep 0 0 4 noreply\r\nsafe\r\ndelete canary noreply\r\n")

    def check(self, what, c, sends, want):
        self.reset(c)
        for piece in sends:
            c.send(piece)
        got = c.read(len(want))
        self.assertEqual(got, want, what)

    def test_issue_21_reproduction(self):
        r = request(self.srv, b"PUT /cache/web HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nok")
        self.assertEqual(r.status, 201, r.body)
        c = self.client()
        c.send(b"set keep 0 0 4\r\nsafe\r\nset user:Jos\xc3\xa9 0 0 17 noreply\r\n"
               b"flush_all noreply\r\nget keep\r\n")
        want = b"STORED\r\nVALUE keep 0 4\r\nsafe\r\nEND\r\n"
        self.assertEqual(c.read(len(want)), want)
        self.assertEqual(request(self.srv, get("/cache/web")).status, 200)

    def test_whole_split_and_bytewise(self):
        rng = random.Random(21)
        c = self.client()
        for what, raw, err in self.cases():
            data = raw + self.TAIL
            want = err + self.TAIL_REPLY
            self.check(what + " (one write)", c, [data], want)
            cuts = sorted(rng.sample(range(1, len(data)), 3))
            self.check(what + " (cut at %s)" % cuts, c,
                       [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])], want)
            self.check(what + " (byte by byte)", c,
                       [data[i:i + 1] for i in range(len(data))], want)

    def test_pipelined(self):
        cases = list(self.cases())
        c = self.client()
        self.reset(c)
        c.send(b"".join(raw for _, raw, _ in cases) + self.TAIL)
        want = b"".join(err for _, _, err in cases) + self.TAIL_REPLY
        self.assertEqual(c.read(len(want)), want)
        self.assertGreater(len(cases), 100)


class ClientBytesInReplies(MemcacheSession):
    """Issue 21: client bytes that go into a reply another client or an operator reads are made
    safe: control characters escaped as the log escapes them (stats detail dump's prefixes,
    stats cachedump's keys), and a key that is not a text key echoed in base64 by k (an item
    created from a base64 key without the binary mark). Text keys print as before."""

    def lines_until_end(self, raw):
        self.c.send(raw)
        out = []
        while True:
            ln = self.c.line()
            if ln == b"END\r\n":
                return out
            out.append(ln)

    def test_detail_dump_escapes_prefixes(self):
        c = self.c
        self.assertEqual(c.ask(b"stats detail on\r\n"), b"OK\r\n")
        try:
            c.send(b"get \x1b[2J\rEND:a\r\n")  # a get key may hold any byte but blank and LF
            self.assertEqual(c.line(), b"END\r\n")
            c.send(b"get ok:a\r\n")
            self.assertEqual(c.line(), b"END\r\n")
            self.assertEqual(self.lines_until_end(b"stats detail dump\r\n"),
                             [b"PREFIX \\x1b[2J\\rEND get 1 hit 0 set 0 del 0\r\n",
                              b"PREFIX ok get 1 hit 0 set 0 del 0\r\n"])
        finally:
            self.assertEqual(c.ask(b"stats detail off\r\n"), b"OK\r\n")

    def test_cachedump_escapes_binary_keys(self):
        key = b"x\r\nITEM forged [1 b; 0 s]\r\n\x1b"
        b64 = base64.b64encode(key)
        self.assertEqual(self.c.ask(b"ms %s 1 b\r\nv\r\n" % b64), b"HD\r\n")
        self.assertEqual(self.c.ask(b"set plain 0 0 1\r\nv\r\n"), b"STORED\r\n")
        dumped = []
        for cls in range(1, 4):
            dumped += self.lines_until_end(b"stats cachedump %d 0\r\n" % cls)
        self.assertIn(b"ITEM x\\r\\nITEM forged [1 b; 0 s]\\r\\n\\x1b [1 b; 0 s]\r\n", dumped)
        self.assertIn(b"ITEM plain [1 b; 0 s]\r\n", dumped)
        self.assertEqual(len(dumped), 2, dumped)

    def test_k_echoes_a_non_text_key_in_base64(self):
        key = b"n\r\nVA 6\r\nforged"
        b64 = base64.b64encode(key)
        # ma N creates the item without the binary mark: k would echo the decoded bytes
        self.assertEqual(self.c.ask(b"ma %s b N0 J5 v\r\n" % b64), b"VA 1\r\n")
        self.assertEqual(self.c.line(), b"5\r\n")
        self.assertEqual(self.c.ask(b"mg %s b k v\r\n" % b64), b"VA 1 k%s b\r\n" % b64)
        self.assertEqual(self.c.line(), b"5\r\n")
        self.assertTrue(self.c.ask(b"me %s b\r\n" % b64).startswith(b"ME %s exp=" % b64))
        self.assertEqual(self.c.ask(b"mg nokey k\r\n"), b"EN knokey\r\n")
        self.assertEqual(self.c.ask(b"ms textkey 1 k\r\nv\r\n"), b"HD ktextkey\r\n")


class RealClients(MemcacheServer):
    """libmemcached's own tools against our listener (Debian: libmemcached-tools)."""

    def test_memccapable_ascii_conformance(self):
        tool = shutil.which("memccapable")
        if not tool:
            self.skipTest("memccapable not installed (Debian: libmemcached-tools)")
        r = subprocess.run([tool, "-a", "-h", "127.0.0.1", "-p", str(self.port), "-t", "5"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("All tests passed", r.stdout)

    def test_memcslap_runs_clean(self):
        tool = shutil.which("memcslap")
        if not tool:
            self.skipTest("memcslap not installed (Debian: libmemcached-tools)")
        for test in ("set", "get"):
            r = subprocess.run([tool, "-s", "127.0.0.1:%d" % self.port, "-c", "4", "-e", "2000",
                                "-t", test], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("fail", (r.stdout + r.stderr).lower())


class MemcacheSmallBuffers(MemcacheServer):
    """A 4 KiB read buffer and short timeouts: lines cut by every read, deadlines enforced."""
    SETTINGS = ("server.read_buffer_bytes=4096", "server.header_timeout_ms=500",
                "server.idle_timeout_ms=1500")

    def test_big_pipeline_through_a_small_buffer(self):
        raw, want = b"", b""
        for i in range(5000):
            k = b"sb_key%d" % i
            raw += b"set %s 0 0 %d\r\n%d\r\nget %s\r\n" % (k, len(str(i)), i, k)
            want += b"STORED\r\nVALUE %s 0 %d\r\n%d\r\nEND\r\n" % (k, len(str(i)), i)
        # Connected only now: building the pipeline can take longer than the 500 ms the server
        # gives a new connection to send its first command (it then closes, rightly).
        c = self.client(timeout=20)
        sender = threading.Thread(target=c.send, args=(raw,))
        sender.start()
        got = c.read(len(want))
        sender.join()
        self.assertEqual(got, want)

    def test_long_multiget_through_a_small_buffer(self):
        c = self.client()
        keys = [b"sb_mk%05d" % i for i in range(3000)]
        for k in keys[::100]:
            c.ask(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(k), k))
        got = c.get_all(b"gets " + b" ".join(keys) + b"\r\n")
        self.assertEqual({k: v[1] for k, v in got.items()},
                         {k.decode(): k for k in keys[::100]})
        self.assertTrue(all(v[2] is not None for v in got.values()))

    def test_partial_command_times_out(self):
        c = self.client()
        start = time.time()
        c.send(b"set k 0 0 10\r\nabc")
        self.assertTrue(c.closed(timeout=5))
        self.assertLess(time.time() - start, 1.4)  # the header deadline, not the idle one

    def test_idle_connection_times_out(self):
        c = self.client()
        self.assertTrue(c.ask(b"version\r\n").startswith(b"VERSION "))
        start = time.time()
        self.assertTrue(c.closed(timeout=5))
        self.assertGreater(time.time() - start, 1.0)


class MemcacheMaxConnections(MemcacheServer):
    """At server.max_connections the memcached listener answers as memcached at -c: the
    connection is accepted, told "ERROR Too many open connections" and closed, and counted in
    rejected_connections. Silent connections count from connect (no TCP_DEFER_ACCEPT here)."""
    SETTINGS = ("server.max_connections=6",)

    def test_refused_with_memcacheds_line(self):
        first = self.client()
        self.assertTrue(first.ask(b"version\r\n").startswith(b"VERSION "))
        # The harness's start-up probe of this port may not be closed yet on a slow (TSan)
        # build: it would take a place and be refused in another's stead.
        deadline = time.time() + 5
        while first.stats()["curr_connections"] != "1" and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(first.stats()["curr_connections"], "1")
        # silent connections count all the same; the loops accept them in their own order, so
        # which one is refused is not known: exactly one of the six beyond the first five
        silent = [self.client() for _ in range(6)]
        deadline = time.time() + 5
        while first.stats()["rejected_connections"] == "0" and time.time() < deadline:
            time.sleep(0.05)
        refused = []
        for c in silent:
            c.sock.settimeout(0.2)
            try:
                data = c.sock.recv(64)
            except socket.timeout:
                continue
            refused.append(data)
            self.assertTrue(c.closed(timeout=5))
        self.assertEqual(refused, [b"ERROR Too many open connections\r\n"])
        stats = first.stats()
        self.assertEqual((stats["rejected_connections"], stats["curr_connections"]), ("1", "6"))


class MemcacheStreaming(MemcacheServer):
    """A multiget whose values add up to far more than the output limit (8 MiB) streams: the
    command pauses whenever the output reaches its high-water mark and goes on as the client
    reads, however the line arrived. The header timeout is short and the reader slow, so a
    stream that counted as an unfinished command would be cut; the output limit is the smallest
    the configuration accepts (high-water mark + one largest value), so a get that wrote one
    value more than it should before pausing would be cut too. Edge cases around a pause (NUL,
    CR, a too-long key) must answer exactly what the same bytes in one read answer."""

    VALUES = 10
    SIZE = 1000 * 1000
    SETTINGS = ("server.header_timeout_ms=500",
                "server.output_limit_bytes=%d" % (262144 + 1048576 + 16384))

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        c = Client(cls.port)
        assert c.ask(b"set sm 7 0 2\r\nsm\r\n") == b"STORED\r\n"
        cls.values = {}
        for i in range(cls.VALUES):
            key = b"st_%02d" % i
            value = bytes([65 + i]) * (cls.SIZE - 7) + b"%07d" % i
            cls.values[key] = value
            assert c.ask(b"set %s %d 0 %d\r\n%s\r\n" % (key, i, len(value), value)) == \
                b"STORED\r\n"
        c.close()

    def read_slowly(self, c, keys, with_cas=False):
        """Reads the answer to a get of `keys` at ~15 MB/s and checks it value by value."""
        want = b""
        for k in keys:
            if k in self.values:
                want += b"VALUE %s %d %d" % (k, int(k[3:]), self.SIZE)
                want += b" " if with_cas else b"\r\n"
        got = bytearray(c.buf)  # values hold no "\r\n": the first END line ends the answer
        t0 = time.monotonic()
        while b"END\r\n" not in got:
            data = c.sock.recv(262144)
            if not data:
                self.fail("closed after %d bytes" % len(got))
            got += data
            time.sleep(0.015)
        took = time.monotonic() - t0
        end = got.index(b"END\r\n") + 5
        got, c.buf = got[:end], bytes(got[end:])
        pos, hits = 0, 0
        for k in keys:
            if k not in self.values:
                continue
            head_end = got.index(b"\r\n", pos)
            head = bytes(got[pos:head_end]).split()
            self.assertEqual(head[:4], [b"VALUE", k, b"%d" % int(k[3:]), b"%d" % self.SIZE])
            self.assertEqual(len(head), 5 if with_cas else 4)
            start = head_end + 2
            self.assertEqual(bytes(got[start:start + self.SIZE]), self.values[k], k)
            self.assertEqual(bytes(got[start + self.SIZE:start + self.SIZE + 2]), b"\r\n")
            pos = start + self.SIZE + 2
            hits += 1
        self.assertEqual(bytes(got[pos:]), b"END\r\n")
        return hits, took

    def check_alive(self, c, caps0):
        self.assertTrue(c.ask(b"version\r\n").startswith(b"VERSION "))
        self.assertEqual(metric(self.srv, "snowflaked_output_limit_closes_total"), caps0)

    def keys(self, rounds=2, misses=0):
        out = []
        for r in range(rounds):
            for i in range(self.VALUES):
                out.append(b"st_%02d" % i)
                out += [b"st_miss_%04d_%02d_padding_padding" % (r, i)] * misses
        return out

    def test_whole_line_in_one_read(self):
        caps0 = metric(self.srv, "snowflaked_output_limit_closes_total")
        c = self.client(timeout=20)
        keys = self.keys()
        c.send(b"get " + b" ".join(keys) + b"\r\n")
        hits, took = self.read_slowly(c, keys)
        self.assertEqual(hits, 20)  # 20 MB through an 8 MiB output limit
        self.assertGreater(took, 0.6)  # longer than the header timeout
        self.check_alive(c, caps0)

    def test_line_cut_across_reads_and_commands_after_it(self):
        caps0 = metric(self.srv, "snowflaked_output_limit_closes_total")
        c = self.client(timeout=20)
        keys = self.keys()
        line = b"gets " + b" ".join(keys) + b"\r\n"
        c.send(line[:37])  # cut inside a key: the line completes in the line buffer
        time.sleep(0.05)
        c.send(line[37:] + b"get st_03\r\n")  # pipelined behind the paused get
        hits, _ = self.read_slowly(c, keys, with_cas=True)
        self.assertEqual(hits, 20)
        self.assertEqual(self.read_slowly(c, [b"st_03"])[0], 1)
        self.check_alive(c, caps0)

    def test_long_line_arriving_in_pieces(self):
        caps0 = metric(self.srv, "snowflaked_output_limit_closes_total")
        c = self.client(timeout=20)
        keys = self.keys(misses=12)
        line = b"get " + b" ".join(keys) + b"\r\n"
        self.assertGreater(len(line), 3 * 2048)  # streamed as a long line
        sender = threading.Thread(target=lambda: [
            (c.send(line[i:i + 700]), time.sleep(0.01)) for i in range(0, len(line), 700)])
        sender.start()
        hits, _ = self.read_slowly(c, keys)
        sender.join()
        self.assertEqual(hits, 20)
        self.check_alive(c, caps0)

    def test_reader_pausing_mid_line_past_the_header_timeout(self):
        """The first half of a get line, then the client reads nothing for three header
        timeouts: the server is the one waiting (its output is full), so the unfinished line
        must not be cut. Then the rest of the line, and every value arrives."""
        caps0 = metric(self.srv, "snowflaked_output_limit_closes_total")
        c = self.client(timeout=20)
        keys = self.keys(misses=12)
        line = b"get " + b" ".join(keys) + b"\r\n"
        # The first round: ten 1 MB values (far beyond the high-water mark) in a line longer than
        # 2048 bytes, which the server streams instead of waiting for its end.
        half = line.index(b" st_00", 5)
        self.assertGreater(half, 2048)
        c.send(line[:half])
        time.sleep(1.5)  # header_timeout_ms is 500
        sender = threading.Thread(target=lambda: (time.sleep(0.2), c.send(line[half:])))
        sender.start()
        hits, _ = self.read_slowly(c, keys)
        sender.join()
        self.assertEqual(hits, 20)
        self.check_alive(c, caps0)

    def test_gat_touches_every_key_of_a_paused_line(self):
        c = self.client(timeout=20)
        keys = self.keys(rounds=1)
        c.send(b"gat 3600 " + b" ".join(keys) + b"\r\n")
        self.assertEqual(self.read_slowly(c, keys)[0], 10)
        c.send(b"stats\r\n")
        stats = b""
        while not stats.endswith(b"END\r\n"):
            stats += c.line()
        self.assertRegex(stats.decode(), r"STAT touch_hits 10\r\n")
        for k in keys:  # the expiry reached the keys answered after each pause
            ttl = int(c.ask(b"mg %s t\r\n" % k).split()[1][1:])
            self.assertTrue(3590 <= ttl <= 3600, (k, ttl))
            self.assertEqual(c.ask(b"touch %s 0\r\n" % k), b"TOUCHED\r\n")

    def answer(self, *reads):
        """What the server answers to `reads` sent apart (each then has time to be read as
        one), up to the reply of a final `version`; values shortened to their last 7 bytes."""
        c = Client(self.port, timeout=20)
        for r in reads[:-1]:
            c.send(r)
            time.sleep(0.1)
        c.send(reads[-1] + b"version\r\n")
        out = []
        while True:
            ln = c.line()
            if ln.startswith(b"VERSION "):
                break
            if ln.startswith(b"VALUE "):
                ln += c.read(int(ln.split()[3]) + 2)[-9:]
            out.append(ln)
        c.close()
        return out

    def test_edge_cases_at_a_pause_answer_as_in_one_read(self):
        big = b"VALUE st_00 0 1000000\r\n0000000\r\n"
        big1 = b"VALUE st_01 1 1000000\r\n0000001\r\n"
        small = b"VALUE sm 7 2\r\nsm\r\n"
        err = b"CLIENT_ERROR bad command line format\r\n"
        end = b"END\r\n"
        pad = b" ".join(b"miss_padding_%04d" % i for i in range(150))  # a long line
        cases = [
            # a NUL ends the line, in a line completed across reads and in a long line
            ((b"get st_00 y", b"\0 st_01\r\n"), [big, end]),
            ((b"get st_00 " + pad + b" st_01 \0 st_02", b"\r\n"), [big, big1, end]),
            # "\r\r\n": the key is "st_01\r" (a miss), whether or not the line was cut
            ((b"get st_00 st_01\r", b"\r\n"), [big, end]),
            ((b"get st_00 sm\r", b"\0\r\n"), [big, end]),  # "\r" then NUL: "sm\r" too
            # a get line that names no key is an ERROR, also when it streams as a long line
            ((b"get " + b" " * 2100, b" " * 900 + b"\r\n"), [b"ERROR\r\n"]),
            ((b"get \0" + b"x" * 2100, b"\r\n"), [b"ERROR\r\n"]),
            # the last pending key fills the output; the next one waits for it to drain
            ((b"get " + pad + b" st_0", b"0 st_01\r\n"), [big, big1, end]),
        ]
        for reads, want in cases:
            with self.subTest(reads[0][:30]):
                self.assertEqual(self.answer(b"".join(reads)), want)  # in one read
                self.assertEqual(self.answer(*reads), want)
        # A too-long key in a long line arriving in pieces: the values before it, then the
        # error, wherever the reads are cut (in one read memcached answers the error alone).
        line = b"get " + b"sm " * 700 + b"z" * 300 + b"\r\n"
        self.assertEqual(self.answer(line), [err])
        for cuts in ((2154, 2400), (2110, 2390), (2300, 2404)):  # z from 2104 to 2404
            with self.subTest(cuts=cuts):
                self.assertEqual(self.answer(line[:cuts[0]], line[cuts[0]:cuts[1]],
                                             line[cuts[1]:]), [small] * 700 + [err])

    def test_a_reader_pausing_longer_than_the_header_timeout(self):
        # The get's line is all here: the client owes nothing, so only the write timeout
        # (30 s) governs it, not the 500 ms header timeout.
        c = self.client(timeout=20)
        keys = self.keys(rounds=1)
        c.send(b"get " + b" ".join(keys) + b"\r\n")
        time.sleep(1.5)
        self.assertEqual(self.read_slowly(c, keys)[0], 10)
        self.assertTrue(c.ask(b"version\r\n").startswith(b"VERSION "))

    def test_a_trickled_long_line_still_has_a_deadline(self):
        c = self.client()
        c.send(b"get " + b"miss " * 450)  # > 2048 bytes and no newline: a long get
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 3 and not closed:
            time.sleep(0.2)
            try:
                c.send(b"k ")  # keys answered (misses) are not progress of a stalled output
            except OSError:
                closed = True
            closed = closed or c.closed(timeout=0.01)
        self.assertTrue(closed)
        self.assertLess(time.monotonic() - t0, 2)  # the 500 ms header deadline


def start_server(test, *sets):
    """A server with these settings (its memcached listener on a free port, nothing persisted)
    and a client, both stopped at the end of the test: (server, port, client)."""
    srv, port = memcache_server("cache.persist=false", *sets)
    test.addCleanup(srv.stop)  # also after a shutdown command: checks its exit, frees its files
    c = Client(port)
    test.addCleanup(c.close)
    return srv, port, c


class MemcacheAdmin(unittest.TestCase):
    """The operators' commands (memcache_admin.c) and memcached's command-line switches
    (cache.memcached_*, cache.evictions), each server started with the settings under test."""

    def server(self, *sets):
        srv, _, c = start_server(self, *sets)
        return srv, c

    def dump(self, c, what=b"all"):
        c.send(b"lru_crawler metadump " + what + b"\r\n")
        lines = []
        while True:
            while b"\n" not in c.buf:
                c.buf += c.sock.recv(65536)
            ln, c.buf = c.buf.split(b"\n", 1)
            if ln == b"END\r":
                return lines
            lines.append(ln)

    def test_metadump_lines_and_streaming(self):
        _, c = self.server("server.so_sndbuf=4096")
        self.assertEqual(c.ask(b"set a%20b 0 0 1\r\nx\r\n"), b"STORED\r\n")
        self.assertEqual(c.ask(b"set e 5 100 2\r\nyy\r\n"), b"STORED\r\n")
        lines = sorted(self.dump(c))
        self.assertRegex(lines[0], rb"^key=a%2520b exp=-1 la=\d+ cas=\d+ fetch=no cls=1 size=64$")
        self.assertRegex(lines[1], rb"^key=e exp=\d+ la=\d+ cas=\d+ fetch=no cls=1 size=64$")
        self.assertEqual(self.dump(c, b"2"), [])  # class 2 holds none of them
        # Many items stream in slices through a bounded output; every key comes exactly once.
        n = 20000
        c.send(b"".join(b"set k%d 0 0 100 noreply\r\n%s\r\n" % (i, b"v" * 100) for i in range(n)))
        self.assertTrue(c.ask(b"version\r\n").startswith(b"VERSION"))
        keys = [ln.split()[0] for ln in self.dump(c, b"hash")]
        self.assertEqual(len(keys), n + 2)
        self.assertEqual(len(set(keys)), n + 2)
        # Behind another reply of the same read: refused, as memcached.
        self.assertEqual(c.ask(b"mg zz v\r\nlru_crawler metadump all\r\n"), b"EN\r\n")
        self.assertEqual(c.line(), b"ERROR cannot pipeline other commands before metadump\r\n")
        # One walk at a time: a second connection's metadump is BUSY while one streams (to a
        # reader that does not read, behind small socket buffers: it pauses on its output).
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(c.sock.getpeername())
        slow.sendall(b"lru_crawler metadump all\r\n")
        time.sleep(0.3)
        self.assertEqual(c.ask(b"lru_crawler metadump all\r\n"),
                         b"BUSY currently processing crawler request\r\n")
        slow.close()  # gives the walk up: the next one starts
        time.sleep(0.3)
        self.assertEqual(len(self.dump(c)), n + 2)

    def test_crawl_unlinks_expired_items(self):
        _, c = self.server()
        for i in range(50):
            c.send(b"set s%d 0 1 2 noreply\r\nok\r\n" % i)
        self.assertEqual(c.ask(b"set keep 0 0 2\r\nok\r\n"), b"STORED\r\n")
        time.sleep(2.1)
        self.assertEqual(c.ask(b"lru_crawler crawl all\r\n"), b"OK\r\n")
        self.assertEqual(c.stats()["curr_items"], "1")
        self.assertEqual(c.ask(b"lru_crawler disable\r\n"), b"OK\r\n")
        self.assertEqual(c.ask(b"lru_crawler crawl 1\r\n"),
                         b"CLIENT_ERROR lru crawler disabled\r\n")

    def test_cache_memlimit(self):
        _, c = self.server()
        self.assertEqual(c.ask(b"cache_memlimit 8\r\n"), b"OK\r\n")
        self.assertEqual(c.stats()["limit_maxbytes"], str(8 << 20))
        big = b"B" * 500000
        for i in range(40):  # 20 MB through an 8 MiB cache: evicts, stays under the new limit
            self.assertEqual(c.ask(b"set b%d 0 0 %d\r\n%s\r\n" % (i, len(big), big)), b"STORED\r\n")
        st = c.stats()
        self.assertLessEqual(int(st["bytes"]), 8 << 20)
        self.assertGreater(int(st["evictions"]), 0)

    def test_shutdown_enabled(self):
        for cmd, sig in ((b"shutdown\r\n", "SIGINT"), (b"shutdown graceful\r\n", "SIGTERM")):
            srv, c = self.server("cache.memcached_shutdown=true")
            self.assertEqual(c.ask(b"shutdown foo\r\n"), b"CLIENT_ERROR invalid shutdown mode\r\n")
            c.send(cmd)
            self.assertTrue(c.closed(timeout=5))
            self.assertEqual(srv.wait(timeout=15), 0)
            self.assertIn(sig + " received, draining", srv.output())

    def test_flush_all_disabled(self):
        _, c = self.server("cache.memcached_flush_all=false")
        self.assertEqual(c.ask(b"set k 0 0 1\r\nx\r\n"), b"STORED\r\n")
        self.assertEqual(c.ask(b"flush_all\r\n"), b"CLIENT_ERROR flush_all not allowed\r\n")
        self.assertEqual(c.ask(b"flush_all 0 noreply\r\nget k\r\n"), b"VALUE k 0 1\r\n")
        self.assertEqual(c.read(8), b"x\r\nEND\r\n")

    def test_cas_disabled(self):
        _, c = self.server("cache.memcached_cas=false")
        self.assertEqual(c.ask(b"set a 0 0 1\r\nx\r\n"), b"STORED\r\n")
        self.assertEqual(c.ask(b"gets a\r\n"), b"VALUE a 0 1 0\r\n")
        self.assertEqual(c.read(8), b"x\r\nEND\r\n")
        self.assertEqual(c.ask(b"cas a 0 0 1 5\r\ny\r\n"), b"EXISTS\r\n")
        self.assertEqual(c.ask(b"cas zz 0 0 1 5\r\ny\r\n"), b"NOT_FOUND\r\n")
        self.assertEqual(c.ask(b"cas zz 0 0 1 0\r\ny\r\n"), b"NOT_FOUND\r\n")
        self.assertEqual(c.ask(b"cas a 0 0 1 0\r\ny\r\n"), b"STORED\r\n")

    def test_reqs_per_event_counts_yields(self):
        _, c = self.server("cache.memcached_reqs_per_event=1")
        c.send(b"set f 0 0 5\r\nBubba\r\n" * 6)
        for _ in range(6):
            self.assertEqual(c.line(), b"STORED\r\n")
        self.assertGreaterEqual(int(c.stats()["conn_yields"]), 5)

    def test_no_evictions(self):
        _, c = self.server("cache.evictions=false", "cache.max_memory_bytes=2097152")
        big = b"B" * 100000
        replies = {c.ask(b"set b%d 0 0 %d\r\n%s\r\n" % (i, len(big), big)) for i in range(40)}
        self.assertEqual(replies, {b"STORED\r\n", b"SERVER_ERROR out of memory storing object\r\n"})
        st = c.stats()
        self.assertEqual(st["evictions"], "0")
        # every refusal counts in store_no_memory, as memcached's failed allocations (dash-M.t)
        refused = int(st["store_no_memory"])
        self.assertGreater(refused, 0)
        self.assertEqual(c.ask(b"ms b999 %d\r\n%s\r\n" % (len(big), big)),
                         b"SERVER_ERROR out of memory storing object\r\n")
        self.assertEqual(c.stats()["store_no_memory"], str(refused + 1))
        # a refused set (or ms) does not leave the key's old value visible, as in memcached
        self.assertEqual(c.ask(b"get b0\r\n"), b"VALUE b0 0 %d\r\n" % len(big))
        c.read(len(big) + 7)
        self.assertEqual(c.ask(b"set b0 0 0 %d\r\n%s\r\n" % (2 * len(big), big + big)),
                         b"SERVER_ERROR out of memory storing object\r\n")
        self.assertEqual(c.ask(b"get b0\r\n"), b"END\r\n")
        self.assertEqual(c.ask(b"get b1\r\n"), b"VALUE b1 0 %d\r\n" % len(big))
        c.read(len(big) + 7)
        self.assertEqual(c.ask(b"ms b1 %d\r\n%s\r\n" % (2 * len(big), big + big)),
                         b"SERVER_ERROR out of memory storing object\r\n")
        self.assertEqual(c.ask(b"mg b1 v\r\n"), b"EN\r\n")
        self.assertEqual(c.stats()["store_no_memory"], str(refused + 3))

    def settings(self, c):
        c.send(b"stats settings\r\n")
        out = {}
        while True:
            ln = c.line()
            if ln == b"END\r\n":
                return out
            out[ln.split()[1].decode()] = ln.split()[2].decode()

    def test_lru_crawler_off_at_start(self):
        _, c = self.server("cache.memcached_lru_crawler=false")  # memcached -o no_lru_crawler
        self.assertEqual(self.settings(c)["lru_crawler"], "no")
        self.assertEqual(c.ask(b"lru_crawler crawl 1\r\n"), b"CLIENT_ERROR lru crawler disabled\r\n")
        self.assertEqual(c.ask(b"lru_crawler metadump all\r\n"),
                         b"CLIENT_ERROR lru crawler disabled\r\n")
        self.assertEqual(c.ask(b"lru_crawler enable\r\n"), b"OK\r\n")
        self.assertEqual(self.settings(c)["lru_crawler"], "yes")
        self.assertEqual(c.ask(b"lru_crawler enable\r\n"),
                         b"ERROR failed to start lru crawler thread\r\n")
        self.assertEqual(c.ask(b"lru_crawler crawl 1\r\n"), b"OK\r\n")
        self.assertEqual(c.ask(b"lru_crawler disable\r\n"), b"OK\r\n")
        self.assertEqual(self.settings(c)["lru_crawler"], "no")
        self.assertEqual(c.ask(b"lru_crawler enable\r\n"), b"OK\r\n")  # no thread to wait for

    def test_stats_slabs_keeps_a_class_that_held_items(self):
        _, c = self.server()
        self.assertEqual(c.ask(b"set k 0 0 2\r\nok\r\n"), b"STORED\r\n")
        self.assertEqual(c.ask(b"delete k\r\n"), b"DELETED\r\n")
        c.send(b"stats slabs\r\n")
        slabs = {}
        while True:
            ln = c.line()
            if ln == b"END\r\n":
                break
            slabs[ln.split()[1].decode()] = ln.split()[2].decode()
        # as memcached, whose class keeps its page: listed, no chunk used; items lists none
        self.assertEqual(slabs["1:used_chunks"], "0")
        self.assertEqual(slabs["active_slabs"], "1")
        self.assertEqual(c.ask(b"stats items\r\n"), b"END\r\n")


    def test_lru_flat(self):
        # memcached -o no_lru_maintainer: one LRU, none of the maintainer's keys (stats.t's 83)
        _, c = self.server("cache.lru_segmented=false")
        self.assertEqual(c.ask(b"set f 0 0 1\r\nx\r\n"), b"STORED\r\n")
        self.assertEqual(len(c.stats()), 83)
        settings = c.stats(b" settings")
        self.assertEqual(settings["lru_maintainer_thread"], "no")
        self.assertEqual(settings["lru_segmented"], "no")
        items = c.stats(b" items")
        self.assertFalse([k for k in items if "number_hot" in k or "moves_" in k], items)

    def test_lru_temporary_ttl(self):
        # memcached -o temporary_ttl=61: TTLs up to 61 s go to the TEMP LRU, longer ones to HOT
        _, c = self.server("cache.memcached_temporary_ttl_s=61")
        settings = c.stats(b" settings")
        self.assertEqual((settings["temp_lru"], settings["temporary_ttl"]), ("yes", "61"))
        self.assertEqual(c.ask(b"set t 0 30 1\r\nx\r\n"), b"STORED\r\n")
        items = c.stats(b" items")
        self.assertEqual((items["items:1:number_temp"], items["items:1:number_hot"]), ("1", "0"))
        self.assertEqual(c.ask(b"set h 0 3600 1\r\nx\r\n"), b"STORED\r\n")
        items = c.stats(b" items")
        self.assertEqual(int(items["items:1:number_hot"]) + int(items["items:1:number_cold"]), 1)
        self.assertEqual(items["items:1:number_temp"], "1")
        self.assertGreater(int(c.stats()["lru_maintainer_juggles"]), 0)

    def test_idle_timeout_kicks(self):
        _, c = self.server("cache.memcached_idle_timeout_s=1", "server.idle_timeout_ms=60000")
        c.send(b"stats\r\n")
        names = []
        while True:
            ln = c.line()
            if ln == b"END\r\n":
                break
            names.append(ln.split()[1])
        # memcached's place for it (printed only with -o idle_timeout), 91 keys in all
        self.assertEqual(names[names.index(b"auth_errors") + 1], b"idle_kicks")
        self.assertEqual(len(names), 91)
        self.assertEqual(c.stats()["idle_kicks"], "0")
        c.send(b"stats settings\r\n")
        settings = {}
        while True:
            ln = c.line()
            if ln == b"END\r\n":
                break
            settings[ln.split()[1]] = ln.split()[2]
        self.assertEqual(settings[b"idle_timeout"], b"1")
        # the listener's own timeout, not the server's 60 s: an idle connection goes after ~1 s
        idle = Client(c.sock.getpeername()[1])
        self.addCleanup(idle.close)
        for _ in range(20):  # c stays busy meanwhile; the idle one goes within ~1 s
            self.assertEqual(c.ask(b"version\r\n")[:8], b"VERSION ")
            if idle.closed(timeout=0.25):
                break
        else:
            self.fail("the idle connection was not closed within 5 s")
        self.assertEqual(c.stats()["idle_kicks"], "1")
        # without it (memcached's default) the key is not printed
        _, d = self.server()
        self.assertNotIn("idle_kicks", d.stats())

    def test_debugtime(self):
        _, off = self.server()
        self.assertEqual(off.ask(b"debugtime 5\r\n"), b"ERROR\r\n")  # a release build's answer
        _, c = self.server("cache.memcached_debug_commands=true")
        self.assertEqual(c.ask(b"set e 0 3 1\r\nx\r\n"), b"STORED\r\n")
        self.assertEqual(c.ask(b"debugtime 2\r\nget e\r\n"), b"OK\r\n")
        self.assertEqual(c.line(), b"VALUE e 0 1\r\n")
        self.assertEqual(c.read(8), b"x\r\nEND\r\n")
        self.assertEqual(c.ask(b"debugtime 2\r\nget e\r\n"), b"OK\r\n")
        self.assertEqual(c.line(), b"END\r\n")
        self.assertEqual(c.ask(b"debugtime x\r\n"), b"ERROR\r\n")
        self.assertEqual(c.ask(b"debugtime p\r\n"), b"OK\r\n")
        self.assertEqual(c.ask(b"debugtime r\r\n"), b"OK\r\n")


class MemcacheWatch(unittest.TestCase):
    """memcached's watch (memcache_watch.c): log lines as they happen, a watcher that does not read
    loses lines and is told how many (skipped=N), no cost while nobody watches. The exact
    line formats are compared with memcached's in test_memcache_diff.py."""

    def server(self, *sets):
        """A server with these settings: its memcached port and a client."""
        _, port, c = start_server(self, *sets)
        return port, c

    @staticmethod
    def lines(w, until, timeout=5.0):
        """Log lines ("\n"-terminated) from watcher w until one contains `until`."""
        out = []
        deadline = time.time() + timeout
        w.sock.settimeout(0.2)
        while time.time() < deadline:
            while b"\n" in w.buf:
                ln, w.buf = w.buf.split(b"\n", 1)
                out.append(ln.decode())
                if until in out[-1]:
                    return out
            try:
                data = w.sock.recv(65536)
            except socket.timeout:
                continue
            if not data:
                break
            w.buf += data
        raise AssertionError("no line with %r in %r" % (until, out[-5:]))

    def watcher(self, port, kinds=b""):
        w = Client(port)
        self.addCleanup(w.close)
        self.assertEqual(w.ask(b"watch" + kinds + b"\r\n"), b"OK\r\n")
        return w

    def test_lines_for_gets_stores_and_connections(self):
        port, c = self.server()
        w = self.watcher(port, b" fetchers mutations connevents")
        c2 = Client(port)
        self.addCleanup(c2.close)
        self.assertEqual(c2.ask(b"set k,1 5 100 3\r\nabc\r\n"), b"STORED\r\n")
        self.assertEqual(c2.ask(b"get k,1\r\n"), b"VALUE k,1 5 3\r\n")
        c2.send(b"quit\r\n")
        # Only c2's lines: connections accepted late (TCP_DEFER_ACCEPT holds a silent one up to
        # a second: the harness's probe, `c`) log theirs too.
        rport = "rport=%d " % c2.sock.getsockname()[1]
        got = [ln for ln in self.lines(w, rport + "transport=tcp reason=")
               if "type=item_" in ln or rport in ln]
        pat = r"ts=\d+\.\d+ gid=\d+ "
        self.assertRegex(got[0], pat + r"type=conn_new rip=127\.0\.0\.1 rport=\d+ transport=tcp cfd=\d+$")
        cfd = got[0].split("cfd=")[1]
        self.assertRegex(got[1], pat + "type=item_get key=k%%2C1 status=not_found clsid=0 cfd=%s size=0$" % cfd)
        self.assertRegex(got[2], pat + "type=item_store key=k%%2C1 status=stored cmd=set ttl=100 clsid=1 cfd=%s size=3$" % cfd)
        self.assertRegex(got[3], pat + "type=item_get key=k%%2C1 status=found clsid=1 cfd=%s size=3$" % cfd)
        self.assertRegex(got[4], pat + r"type=conn_close rip=127\.0\.0\.1 rport=\d+ transport=tcp reason=normal cfd=%s$" % cfd)
        gids = [int(ln.split("gid=")[1].split()[0]) for ln in got]
        self.assertEqual(gids, sorted(gids))
        # A protocol error closes with reason=error; the watcher's own input is ignored.
        w.send(b"version\r\n")
        c3 = Client(port)
        self.addCleanup(c3.close)
        c3.send(b"GET / HTTP/1.1\r\n")
        rport = "rport=%d " % c3.sock.getsockname()[1]
        self.assertIn("reason=error", self.lines(w, rport + "transport=tcp reason=")[-1])
        self.assertNotIn(b"VERSION", w.buf)
        self.assertEqual(c.stats()["log_watchers"], "1")

    def test_evictions(self):
        port, c = self.server("cache.max_memory_bytes=2097152")
        w = self.watcher(port, b" evictions")
        big = b"B" * 100000
        for i in range(40):
            self.assertEqual(c.ask(b"set e%d 0 0 %d\r\n%s\r\n" % (i, len(big), big)), b"STORED\r\n")
        got = self.lines(w, "type=eviction")
        self.assertRegex(got[-1], r"^ts=\d+\.\d+ gid=\d+ type=eviction key=e\d+ fetch=no ttl=-1 "
                                  r"la=\d+ clsid=\d+ size=100000$")

    def test_a_slow_watcher_skips_and_says_so(self):
        port, c = self.server("server.output_high_water_bytes=4096")
        w = Client(port)
        self.addCleanup(w.close)
        w.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.assertEqual(w.ask(b"watch\r\n"), b"OK\r\n")
        key = b"k" * 240
        # Lines until some are skipped: how much the kernel buffers for a watcher that does not
        # read depends on how far its send buffer autotuned (a few MB on loopback), so the test
        # writes in rounds of ~170 KB of lines, up to ~17 MB, and asks after each round.
        for i in range(100 * 500):
            c.send(b"get %d%s\r\n" % (i, key))
            self.assertEqual(c.line(), b"END\r\n")
            if i % 500 == 499 and int(c.stats()["log_watcher_skipped"]) > 0:
                break
        st = c.stats()
        self.assertGreater(int(st["log_watcher_skipped"]), 0)
        self.assertGreater(int(st["log_watcher_sent"]), 0)
        # Reading again: the lines that fitted, then skipped=N before the next line.
        # The skipped= line goes out before the next line logged once there is room, so when the
        # watcher has read all it was sent, another "get after" makes that next line. A slow
        # server (TSan on a busy machine) may take longer than a read timeout to send more: then
        # the watcher asks again, until the deadline.
        w.sock.settimeout(0.5)
        seen = []
        deadline = time.monotonic() + 30
        for n in range(10000):
            if n % 50 == 0:
                self.assertEqual(c.ask(b"get after\r\n"), b"END\r\n")
            while b"\n" not in w.buf:
                try:
                    data = w.sock.recv(65536)
                    self.assertTrue(data, "the watcher's connection closed")
                    w.buf += data
                except socket.timeout:
                    self.assertLess(time.monotonic(), deadline, "no skipped= line from the watcher")
                    self.assertEqual(c.ask(b"get after\r\n"), b"END\r\n")
            ln, w.buf = w.buf.split(b"\n", 1)
            seen.append(ln)
            if ln.startswith(b"skipped="):
                break
        self.assertRegex(seen[-1].decode(), r"^skipped=\d+$")
        self.assertRegex(self.lines(w, "type=item_get")[0], r"^ts=\d+\.\d+ gid=\d+ type=item_get ")

    def test_errors_limit_and_disabled(self):
        port, c = self.server()
        self.assertEqual(c.ask(b"watch bogus\r\n"), b"ERROR\r\n")
        self.assertEqual(c.ask(b"watch noreply\r\nversion\r\n")[:8], b"VERSION ")
        self.assertEqual(c.ask(b"mn\r\nverbosity 1\r\nwatch\r\n"), b"MN\r\n")
        self.assertEqual(c.line(), b"OK\r\n")
        self.assertEqual(c.line(), b"ERROR cannot pipeline other commands before watch\r\n")
        watchers = [self.watcher(port) for _ in range(20)]
        extra = Client(port)
        self.addCleanup(extra.close)
        self.assertEqual(extra.ask(b"watch\r\n"), b"WATCHER_TOO_MANY log watcher limit reached\r\n")
        self.assertEqual(c.stats()["log_watchers"], "20")
        for w in watchers:
            w.close()
        deadline = time.time() + 5
        while c.stats()["log_watchers"] != "0" and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(c.stats()["log_watchers"], "0")
        self.assertEqual(extra.ask(b"watch\r\n"), b"OK\r\n")
        _, off = self.server("cache.memcached_watch=false")  # memcached -W
        self.assertEqual(off.ask(b"watch\r\n"), b"CLIENT_ERROR watch commands not allowed\r\n")
        self.assertEqual(off.ask(b"watch noreply\r\nmn\r\n"), b"MN\r\n")

    def test_nothing_is_logged_while_nobody_watches(self):
        port, c = self.server()
        for i in range(50):
            self.assertEqual(c.ask(b"set n%d 0 0 1\r\nx\r\n" % i), b"STORED\r\n")
            self.assertEqual(c.ask(b"get n%d\r\n" % i), b"VALUE n%d 0 1\r\n" % i)
            c.read(8)
        self.assertEqual(c.stats()["log_worker_written"], "0")
        w = self.watcher(port, b" mutations")
        self.assertEqual(c.ask(b"get n1\r\n"), b"VALUE n1 0 1\r\n")  # not a mutation: unlogged
        c.read(8)
        self.assertEqual(c.ask(b"set n1 0 0 1\r\ny\r\n"), b"STORED\r\n")
        self.assertIn("type=item_store key=n1 ", self.lines(w, "item_store")[0])
        self.assertEqual(c.stats()["log_worker_written"], "1")
        w.close()
        deadline = time.time() + 5
        while c.stats()["log_watchers"] != "0" and time.time() < deadline:
            time.sleep(0.05)
        for i in range(20):
            self.assertEqual(c.ask(b"set n%d 0 0 1\r\nx\r\n" % i), b"STORED\r\n")
        self.assertEqual(c.stats()["log_worker_written"], "1")


class CommandsMetric(MemcacheServer):
    """snowflaked_memcached_commands_total: every command line answered counts once (the
    memcached side of the request rate an autoscaler scales on), whatever it does: a get of
    three keys is one, a storage command with its data block is one, an ERROR is one, a get
    line streamed past the line buffer is one; a pipeline counts each of its commands."""

    def test_every_command_line_counts_once(self):
        name = "snowflaked_memcached_commands_total"
        before = metric(self.srv, name)
        self.assertIsNotNone(before, "%s not exported" % name)
        c = self.client()
        self.assertEqual(c.ask(b"set cm 0 0 1\r\nv\r\n"), b"STORED\r\n")
        self.assertEqual(set(c.get_all(b"get cm none1 none2\r\n")), {"cm"})
        self.assertEqual(c.ask(b"no_such_command\r\n"), b"ERROR\r\n")
        self.assertEqual(c.ask(b"mn\r\n"), b"MN\r\n")
        c.send(b"delete cm\r\nversion\r\n")  # two in one write
        self.assertEqual(c.line(), b"DELETED\r\n")
        self.assertTrue(c.line().startswith(b"VERSION "))
        self.assertEqual(metric(self.srv, name) - before, 6)
        # a get line longer than the line buffer, streamed in pieces: one command too
        line = b"get " + b" ".join(b"cm_long_%04d" % i for i in range(400)) + b"\r\n"
        self.assertGreater(len(line), 4096)
        for i in range(0, len(line), 1500):
            c.send(line[i:i + 1500])
            time.sleep(0.002)
        self.assertEqual(c.get_all(b""), {})
        self.assertEqual(metric(self.srv, name) - before, 7)
        # HTTP requests are not memcached commands
        request(self.srv, get("/id"))
        self.assertEqual(metric(self.srv, name) - before, 7)


if __name__ == "__main__":
    unittest.main()
