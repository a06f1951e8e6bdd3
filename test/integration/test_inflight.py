"""The in-flight byte budget (server.max_inflight_bytes, issue 21): bytes held for requests still
being received -- HTTP request bodies being buffered and memcached values being read into their
item -- are counted together against one budget. Past it, a new request is refused with its
protocol's error (HTTP 503 with Retry-After, decided at the end of the headers from the
Content-Length, a chunked body as it grows; memcached "SERVER_ERROR out of memory storing
object" with the data block swallowed, never run as commands). snowflaked_inflight_bytes never
passes the budget, and returns to 0 when the clients go away mid-body, however they go."""
import socket
import struct
import time
import unittest

import test_memcache
from sfharness import Reader, Server, free_port, get, metric, request

BUDGET = 1 << 20
BODY_MAX = 256 * 1024  # four half-sent maximum bodies or values fill the budget


def put_head(path, length, extra=""):
    return ("PUT %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n"
            % (path, extra, length)).encode()


def abort(sock):
    """Closes with a reset (SO_LINGER 0): the most abrupt way a client can go."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class InflightBudget(unittest.TestCase):
    def setUp(self):
        self.socks = []
        self.peak = 0
        self.start()

    def start(self, *extra):
        self.mc_port = free_port()
        self.srv = Server("--set", "server.max_inflight_bytes=%d" % BUDGET,
                          "--set", "server.max_body_bytes=%d" % BODY_MAX,
                          "--set", "cache.max_item_bytes=%d" % BODY_MAX,
                          "--set", "cache.memcached_port=%d" % self.mc_port, *extra)

    def tearDown(self):
        for s in self.socks:
            s.close()
        self.srv.stop()

    def held(self):
        v = metric(self.srv, "snowflaked_inflight_bytes")
        self.assertIsNotNone(v, "no snowflaked_inflight_bytes in /metrics")
        self.assertLessEqual(v, BUDGET)  # never past the budget, whenever we look
        self.peak = max(self.peak, v)
        return v

    def wait_held(self, want, timeout=5):
        deadline = time.time() + timeout
        while self.held() != want:
            if time.time() > deadline:
                self.fail("snowflaked_inflight_bytes is %s, expected %d" % (self.held(), want))
            time.sleep(0.02)

    def http_half_put(self, i):
        s = self.srv.connect()
        self.socks.append(s)
        s.sendall(put_head("/cache/h%d" % i, BODY_MAX) + b"x" * 1000)
        return s

    def mc(self):
        c = test_memcache.Client(self.mc_port)
        self.socks.append(c.sock)
        return c

    def mc_half_set(self, i):
        c = self.mc()
        c.send(b"set m%d 0 0 %d\r\n" % (i, BODY_MAX) + b"y" * 1000)
        return c

    def assert_http_busy(self, head_and_body):
        with self.srv.connect(timeout=3) as s:
            s.sendall(head_and_body)
            rd = Reader(s)
            r = rd.response()  # the first answer: no 100 Continue before it
            self.assertEqual(r.status, 503, r.body)
            self.assertEqual(r.header("retry-after"), "1")
            self.assertEqual(r.header("connection"), "close")
            self.assertIn("server.max_inflight_bytes", r.json()["error"])
            self.assertTrue(rd.closed())

    def test_http_and_memcached_share_the_budget_and_give_it_back(self):
        keep = self.mc()
        self.assertEqual(keep.ask(b"set keep 0 0 4\r\nsafe\r\n"), b"STORED\r\n")
        self.assertEqual(self.held(), 0)
        # Two half-sent PUT bodies and two half-sent memcached values: the budget is full.
        h = [self.http_half_put(i) for i in range(2)]
        m = [self.mc_half_set(i) for i in range(2)]
        self.wait_held(BUDGET)
        # HTTP: refused at the end of the headers, from the Content-Length, before 100 Continue.
        self.assert_http_busy(put_head("/cache/late", 10, "Expect: 100-continue\r\n"))
        self.assert_http_busy(put_head("/cache/late", 10) + b"0123456789")
        # A chunked body is refused when it grows past the budget.
        self.assert_http_busy(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked"
                              b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        # memcached: refused, and the data block -- itself a valid command -- is swallowed.
        for cmd in (b"set", b"add", b"replace", b"append", b"prepend"):
            with self.subTest(cmd=cmd):
                self.assertEqual(keep.ask(cmd + b" refused 0 0 16\r\nset pwn 0 0 1\r\nx\r\n"),
                                 b"SERVER_ERROR out of memory storing object\r\n")
        self.assertEqual(keep.ask(b"cas refused 0 0 16 1\r\nset pwn 0 0 1\r\nx\r\n"),
                         b"SERVER_ERROR out of memory storing object\r\n")
        self.assertEqual(keep.ask(b"ms refused 16 T0\r\nset pwn 0 0 1\r\nx\r\n"),
                         b"SERVER_ERROR out of memory storing object\r\n")
        self.assertEqual(keep.get_all(b"get pwn keep\r\n"), {"keep": (0, b"safe", None)})
        # Requests without a body still pass.
        self.assertEqual(request(self.srv, get("/id")).status, 200)
        self.assertEqual(keep.get_all(b"get keep\r\n"), {"keep": (0, b"safe", None)})
        self.assertGreaterEqual(metric(self.srv, "snowflaked_inflight_refusals_total"), 10)
        self.assertEqual(self.held(), BUDGET)
        # One client gives up mid-body (a reset), then another (a plain close): given back.
        abort(h[0])
        m[0].close()
        self.wait_held(BUDGET - 2 * BODY_MAX)
        # A completed request gives back its bytes too.
        c = self.mc()
        self.assertEqual(c.ask(b"set full 0 0 %d\r\n" % BODY_MAX + b"z" * BODY_MAX + b"\r\n"),
                         b"STORED\r\n")
        r = request(self.srv, put_head("/cache/fullh", BODY_MAX) + b"w" * BODY_MAX)
        self.assertEqual(r.status, 201)
        self.assertEqual(self.held(), BUDGET - 2 * BODY_MAX)
        for s in (h[1], m[1].sock):
            abort(s)
        self.wait_held(0)
        self.assertLessEqual(self.peak, BUDGET)

    def test_many_clients_leaving_mid_body(self):
        # More half-sent bodies and values than the budget holds, from both protocols at once:
        # the late ones are refused, the gauge stays within the budget, and when every client
        # has gone (half by a reset) nothing is left held.
        http_socks, mc_socks = [], []
        for i in range(8):
            s = self.srv.connect(timeout=3)
            self.socks.append(s)
            http_socks.append(s)
            try:
                s.sendall(put_head("/cache/c%d" % i, BODY_MAX) + b"x" * (BODY_MAX // 2))
            except OSError:
                pass
            c = self.mc()
            c.send(b"set c%d 0 0 %d\r\n" % (i, BODY_MAX) + b"y" * (BODY_MAX // 2))
            mc_socks.append(c.sock)
            self.held()
        self.wait_held(BUDGET)

        def first_answer(s):
            s.settimeout(0.3)
            try:
                return s.recv(4096)
            except socket.timeout:
                return b""  # still receiving: one of those the budget took
        http_answers = [first_answer(s) for s in http_socks]
        mc_answers = [first_answer(s) for s in mc_socks]
        # Four were taken; the other twelve were refused with their protocol's error.
        busy = [a for a in http_answers if a.startswith(b"HTTP/1.1 503 ")]
        oom = [a for a in mc_answers if a == b"SERVER_ERROR out of memory storing object\r\n"]
        self.assertEqual(len(busy) + len(oom), 12, (http_answers, mc_answers))
        self.assertEqual(http_answers.count(b"") + mc_answers.count(b""), 4)
        for i, s in enumerate(self.socks):
            if i % 2:
                abort(s)
            else:
                s.close()
        self.socks = []
        self.wait_held(0)
        self.assertGreaterEqual(metric(self.srv, "snowflaked_inflight_refusals_total"), 12)

    def test_timeouts_give_back(self):
        # A client that stops mid-body is timed out (HTTP: 408; memcached: closed), and what it
        # held goes back to the budget.
        self.srv.stop()
        self.start("--set", "server.header_timeout_ms=300")
        h = self.http_half_put(0)
        self.mc_half_set(0)
        self.wait_held(2 * BODY_MAX)
        r = Reader(h).response()
        self.assertEqual(r.status, 408)
        self.wait_held(0)


if __name__ == "__main__":
    unittest.main()
