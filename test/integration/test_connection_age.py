"""The connection age cap (server.max_connection_age_s, cache.memcached_max_connection_age_s;
docs/rebalancing.md) with real clients: Python's http.client, curl, raw HTTP/1.0 and pipelined
HTTP/1.1, memcached over a raw socket and through pymemcache, and both protocols over TLS.

HTTP: the first response that starts past a connection's age carries Connection: close and is
its last (the max_requests_per_connection path); an idle connection waits for its next request.
memcached: the reply that crosses the age is the last, every command read answered, then EOF.
Each connection's age is drawn in [0.9, 1.0] x the cap. Off (0) by default."""
import http.client
import os
import re
import select
import socket
import ssl
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fault"))

import faultutil  # noqa: E402
import sfharness  # noqa: E402
import tlscerts  # noqa: E402

AGE = 1  # seconds: each connection's own age is in [0.9, 1.0] s


def age_closes(server, listener):
    v = faultutil.labelled(faultutil.metrics_text(server), "snowflaked_connection_age_closes_total",
                           'listener="%s"' % listener)
    return None if v is None else int(v)


def read_until_eof(sock, timeout=5):
    """Everything the peer sends until it closes; fails on a reset (a lost response)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def responses(data):
    """[(status, headers dict, body)] of the complete HTTP responses in data."""
    return faultutil.parse_responses(data)[0]


class HttpAge(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.reason = faultutil.ensure_programs({"curl": "curl"})
        cls.server = sfharness.Server("--set", "server.max_connection_age_s=%d" % AGE)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_http_client_keep_alive_gets_close_after_the_age(self):
        before = age_closes(self.server, "http")
        c = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=5)
        t0, n, ids = time.monotonic(), 0, set()
        while True:
            c.request("GET", "/id")
            r = c.getresponse()
            body = r.read()
            self.assertEqual(r.status, 200)
            ids.add(body)
            n += 1
            if r.getheader("Connection") == "close":
                break
            self.assertLess(time.monotonic() - t0, 3, "no Connection: close after the age")
            time.sleep(0.02)
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.85, "closed before 0.9 x the age")
        self.assertLess(elapsed, 1.5)
        self.assertEqual(len(ids), n)
        # http.client reconnects by itself after Connection: close
        c.request("GET", "/id")
        self.assertEqual(c.getresponse().status, 200)
        c.close()
        self.assertEqual(age_closes(self.server, "http"), before + 1)

    def test_curl_reconnects_after_close(self):
        if self.reason:
            self.fail(self.reason)
        # 40 requests at 20/s over curl's one reused connection: 2 s, two ages
        r = subprocess.run(["curl", "-sS", "-v", "--rate", "20/s", "-o", "/dev/null",
                            "-w", "%{http_code}\\n",
                            "http://127.0.0.1:%d/id?[1-40]" % self.server.port],
                           capture_output=True, timeout=30)
        err = r.stderr.decode(errors="replace")
        self.assertEqual(r.returncode, 0, err)
        self.assertEqual(r.stdout.decode().split(), ["200"] * 40, err)
        closes = len(re.findall(r"^< Connection: close", err, re.M | re.I))
        connects = len(re.findall(r"^\* +(?:Connected to|Trying 127)", err, re.M))
        self.assertGreaterEqual(closes, 1, err)
        self.assertLessEqual(closes, 3, err)
        self.assertGreaterEqual(connects, closes + 1, err)

    def test_http10_keep_alive(self):
        s = self.server.connect()
        t0 = time.monotonic()
        while True:
            s.sendall(b"GET /id HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                self.assertTrue(chunk, "EOF before the response")
                head += chunk
            if b"Connection: close" in head:
                break
            self.assertIn(b"Connection: keep-alive", head)
            self.assertLess(time.monotonic() - t0, 3)
            time.sleep(0.02)
        self.assertGreaterEqual(time.monotonic() - t0, 0.85)
        read_until_eof(s)  # then EOF, no reset
        s.close()

    def test_pipelined_requests_all_answered(self):
        s = self.server.connect()
        s.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while b"}" not in first:
            first += s.recv(4096)
        time.sleep(AGE + 0.1)
        # five requests in one write, the age passed: the first answer is the last
        s.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n" * 5)
        got = responses(read_until_eof(s))
        s.close()
        self.assertEqual(len(got), 1, got)
        self.assertEqual(got[0][0], 200)
        self.assertEqual(got[0][1].get("connection"), "close")
        # the client sends the four unanswered again on a new connection (RFC 9112 9.3.2)
        s = self.server.connect()
        s.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n" * 3 +
                  b"GET /id HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        again = responses(read_until_eof(s))
        s.close()
        self.assertEqual([st for st, _, _ in again], [200] * 4)
        ids = {b for _, _, b in got + again}
        self.assertEqual(len(ids), 5)

    def test_idle_connection_is_left_to_its_next_request(self):
        s = self.server.connect()
        s.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(len(responses(s.recv(4096))), 1)
        time.sleep(AGE + 0.3)
        r, _, _ = select.select([s], [], [], 0)
        self.assertEqual(r, [], "an idle connection was closed at its age")
        s.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n")
        got = responses(read_until_eof(s))
        s.close()
        self.assertEqual(len(got), 1)
        self.assertEqual((got[0][0], got[0][1].get("connection")), (200, "close"))

    def test_ages_are_spread(self):
        """Twenty connections opened together are retired over [0.9, 1.0] x the age."""
        socks = [self.server.connect() for _ in range(20)]
        t0 = time.monotonic()
        closed = {}
        while len(closed) < len(socks) and time.monotonic() - t0 < 4:
            for i, s in enumerate(socks):
                if i in closed:
                    continue
                s.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n")
                head = b""
                while b"}" not in head:
                    chunk = s.recv(4096)
                    self.assertTrue(chunk)
                    head += chunk
                if b"Connection: close" in head:
                    closed[i] = time.monotonic() - t0
            time.sleep(0.005)
        for s in socks:
            s.close()
        self.assertEqual(len(closed), len(socks))
        times = sorted(closed.values())
        print("\n20 connections retired at %.3f .. %.3f s (age cap %d s)"
              % (times[0], times[-1], AGE), file=sys.stderr)
        self.assertGreaterEqual(times[0], 0.85)
        self.assertLess(times[-1], 1.4)
        self.assertGreater(times[-1] - times[0], 0.03, "no jitter")


class HttpAgeOff(unittest.TestCase):
    def test_off_by_default(self):
        server = sfharness.Server()
        self.addCleanup(server.stop)
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            c.request("GET", "/id")
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            self.assertNotEqual(r.getheader("Connection"), "close")
            time.sleep(0.05)
        c.close()
        self.assertEqual(age_closes(server, "http"), 0)


def mc_reply(sock, want_end=b"\r\n"):
    data = b""
    while not data.endswith(want_end):
        chunk = sock.recv(65536)
        if not chunk:
            return data, True
        data += chunk
    return data, False


class MemcachedAge(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server, cls.port = sfharness.memcache_server(
            "cache.memcached_max_connection_age_s=%d" % AGE)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def test_raw_reply_completes_then_eof(self):
        before = age_closes(self.server, "memcached")
        s = self.connect()
        s.sendall(b"set k 0 0 5\r\nhello\r\n")
        self.assertEqual(mc_reply(s)[0], b"STORED\r\n")
        t0 = time.monotonic()
        while True:
            s.sendall(b"get k\r\n")
            data, eof = mc_reply(s, b"END\r\n")
            if eof:
                # the command sent after the close: no reply, no partial one
                self.assertEqual(data, b"")
                break
            self.assertEqual(data, b"VALUE k 0 5\r\nhello\r\nEND\r\n")
            self.assertLess(time.monotonic() - t0, 3, "never closed")
            time.sleep(0.02)
        self.assertGreaterEqual(time.monotonic() - t0, 0.85)
        s.close()
        self.assertEqual(age_closes(self.server, "memcached"), before + 1)

    def test_pipelined_commands_read_are_all_answered(self):
        s = self.connect()
        s.sendall(b"version\r\n")
        self.assertTrue(mc_reply(s)[0].startswith(b"VERSION"))
        time.sleep(AGE + 0.1)
        s.sendall(b"set a 0 0 1\r\nx\r\nget a\r\nget nope\r\nset b 0 0 2\r\nyz\r\nget a b\r\n")
        self.assertEqual(read_until_eof(s),
                         b"STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\nEND\r\nSTORED\r\n"
                         b"VALUE a 0 1\r\nx\r\nVALUE b 0 2\r\nyz\r\nEND\r\n")
        s.close()

    def test_half_received_command_is_finished_first(self):
        s = self.connect()
        s.sendall(b"version\r\n")
        mc_reply(s)
        time.sleep(AGE + 0.1)
        s.sendall(b"set c 0 0 10\r\n01234")  # past the age, its data block half sent
        time.sleep(0.2)
        r, _, _ = select.select([s], [], [], 0)
        self.assertEqual(r, [], "closed in the middle of a command")
        s.sendall(b"56789\r\nget c\r\n")
        self.assertEqual(read_until_eof(s), b"STORED\r\nVALUE c 0 10\r\n0123456789\r\nEND\r\n")
        s.close()

    def test_watch_says_max_age_and_is_never_retired(self):
        w = self.connect()
        w.sendall(b"watch connevents\r\n")
        self.assertEqual(mc_reply(w)[0], b"OK\r\n")
        s = self.connect()
        t0 = time.monotonic()
        while True:
            s.sendall(b"version\r\n")
            data, eof = mc_reply(s)
            if eof:
                break
            self.assertLess(time.monotonic() - t0, 3)
            time.sleep(0.02)
        port = s.getsockname()[1]
        s.close()
        log = b""
        w.settimeout(5)
        while not re.search(rb"type=conn_close .*rport=%d .*reason=max_age" % port, log):
            chunk = w.recv(65536)
            self.assertTrue(chunk, "the watcher was closed: %r" % log)
            log += chunk
        # the watcher, surely older than its age now, still streams (and is sent input)
        time.sleep(0.3)
        w.sendall(b"version\r\n")
        s = self.connect()
        port = s.getsockname()[1]
        log = b""
        while not re.search(rb"type=conn_new .*rport=%d " % port, log):
            chunk = w.recv(65536)
            self.assertTrue(chunk, "the watcher was retired: %r" % log)
            log += chunk
        s.close()
        w.close()

    def test_pymemcache(self):
        base = sfharness.debian_import("pymemcache.client.base", "python3-pymemcache")
        retrying = sfharness.debian_import("pymemcache.client.retrying", "python3-pymemcache")
        exc = sfharness.debian_import("pymemcache.exceptions", "python3-pymemcache")
        # The plain client: the command after the close fails once (the protocol has no way to
        # announce a close), the next one reconnects.
        c = base.Client(("127.0.0.1", self.port), connect_timeout=5, timeout=5)
        errors, ok, t0 = 0, 0, time.monotonic()
        while time.monotonic() - t0 < 2.5:
            try:
                c.set("p", b"v")
                self.assertEqual(c.get("p"), b"v")
                ok += 1
            except exc.MemcacheUnexpectedCloseError:
                errors += 1
            time.sleep(0.02)
        c.close()
        self.assertGreater(ok, 20)
        self.assertGreaterEqual(errors, 2)
        self.assertLessEqual(errors, 3)
        # RetryingClient retries that one: no error reaches the caller, and every read finds
        # its write. With replies (default_noreply=False): a noreply set written after the close
        # would be lost without a word (docs/rebalancing.md).
        before = age_closes(self.server, "memcached")
        r = retrying.RetryingClient(base.Client(("127.0.0.1", self.port), connect_timeout=5,
                                                timeout=5, default_noreply=False),
                                    attempts=2, retry_delay=0,
                                    retry_for=[exc.MemcacheUnexpectedCloseError])
        t0, n = time.monotonic(), 0
        while time.monotonic() - t0 < 2.5:
            r.set("q%d" % n, b"w")
            self.assertEqual(r.get("q%d" % n), b"w")
            n += 1
            time.sleep(0.02)
        r.close()
        self.assertGreaterEqual(age_closes(self.server, "memcached") - before, 2)


class MemcachedAgeOff(unittest.TestCase):
    def test_off_by_default(self):
        server, port = sfharness.memcache_server()
        self.addCleanup(server.stop)
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            s.sendall(b"version\r\n")
            data, eof = mc_reply(s)
            self.assertFalse(eof)
            time.sleep(0.05)
        s.close()
        self.assertEqual(age_closes(server, "memcached"), 0)


class TlsAge(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = tlscerts.Certs()
        cls.https, cls.mcs = sfharness.free_port(), sfharness.free_port()
        sets = ["server.max_connection_age_s=%d" % AGE,
                "cache.memcached_max_connection_age_s=%d" % AGE]
        for prefix, port in (("server.tls", cls.https), ("cache.memcached_tls", cls.mcs)):
            sets += ["%s.port=%d" % (prefix, port), "%s.cert_file=%s" % (prefix, cls.certs.server),
                     "%s.key_file=%s" % (prefix, cls.certs.server_key)]
        cls.server = sfharness.Server(*sfharness.set_args(*sets))
        cls.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        cls.ctx.load_verify_locations(cls.certs.ca)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.certs.cleanup()

    def test_https_keep_alive(self):
        c = http.client.HTTPSConnection("127.0.0.1", self.https, timeout=5, context=self.ctx)
        t0 = time.monotonic()
        while True:
            c.request("GET", "/id")
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            if r.getheader("Connection") == "close":
                break
            self.assertLess(time.monotonic() - t0, 3)
            time.sleep(0.02)
        self.assertGreaterEqual(time.monotonic() - t0, 0.85)
        c.request("GET", "/id")
        self.assertEqual(c.getresponse().status, 200)
        c.close()

    def test_memcached_over_tls(self):
        raw = socket.create_connection(("127.0.0.1", self.mcs), timeout=5)
        s = self.ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        t0 = time.monotonic()
        while True:
            s.sendall(b"version\r\n")
            data, eof = mc_reply(s)
            if eof:
                self.assertEqual(data, b"")
                break
            self.assertTrue(data.startswith(b"VERSION "))
            self.assertLess(time.monotonic() - t0, 3)
            time.sleep(0.02)
        self.assertGreaterEqual(time.monotonic() - t0, 0.85)
        s.close()
        self.assertGreaterEqual(age_closes(self.server, "memcached"), 1)


if __name__ == "__main__":
    unittest.main()
