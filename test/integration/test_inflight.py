"""The in-flight byte budget (server.max_inflight_bytes, issue 21): bytes held for requests still
being received -- HTTP request bodies being buffered and memcached values being staged until
their data block is in -- are counted together against one budget, as they arrive: a length a
client only announced (a Content-Length, a storage command's <bytes>) holds nothing until its
bytes come. An announced length the budget could not hold now is refused at once with its
protocol's error (HTTP 503 with Retry-After at the end of the headers, before any 100 Continue;
memcached "SERVER_ERROR out of memory storing object" at the line); a body that grows past the
budget is refused then. A refused data block is swallowed, never run as commands, and a set or
ms the budget refused keeps the key's old value (other clients' bytes caused it, not the cache).
The last eighth of the budget is kept for requests holding at most 64 KiB, so a few large
requests held half-sent do not starve the small ones. snowflaked_inflight_bytes never passes the
budget, and returns to 0 when the clients go away mid-body, however they go."""
import socket
import struct
import time
import unittest

import test_memcache
from sfharness import Reader, Server, free_port, get, metric, request

BUDGET = 1 << 20
BODY_MAX = 256 * 1024  # cache.max_item_bytes too
FLOOR = 64 * 1024  # a request holding at most this may use the whole budget
RESERVE = BUDGET // 8  # the rest of them may not use (app_inflight_share)
CEILING = BUDGET - RESERVE  # what requests past the floor may fill together
BUSY = b"SERVER_ERROR out of memory storing object\r\n"


def put_head(path, length, extra=""):
    return ("PUT %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n"
            % (path, extra, length)).encode()


def abort(sock):
    """Closes with a reset (SO_LINGER 0): the most abrupt way a client can go."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def first_answer(s, wait=0.3):
    s.settimeout(wait)
    try:
        return s.recv(4096)
    except socket.timeout:
        return b""  # still receiving
    except OSError:
        return b"reset"


class BudgetCase(unittest.TestCase):
    budget = BUDGET
    extra = ("--set", "server.max_body_bytes=%d" % BODY_MAX,
             "--set", "cache.max_item_bytes=%d" % BODY_MAX)

    def setUp(self):
        self.socks = []
        self.peak = 0
        self.start()

    def start(self, *extra):
        self.mc_port = free_port()
        self.srv = Server("--set", "server.max_inflight_bytes=%d" % self.budget,
                          "--set", "cache.memcached_port=%d" % self.mc_port, *self.extra, *extra)

    def tearDown(self):
        for s in self.socks:
            s.close()
        self.srv.stop()

    def held(self):
        v = metric(self.srv, "snowflaked_inflight_bytes")
        self.assertIsNotNone(v, "no snowflaked_inflight_bytes in /metrics")
        self.assertLessEqual(v, self.budget)  # never past the budget, whenever we look
        self.peak = max(self.peak, v)
        return v

    def wait_held(self, want, timeout=5):
        deadline = time.time() + timeout
        while self.held() != want:
            if time.time() > deadline:
                self.fail("snowflaked_inflight_bytes is %s, expected %d" % (self.held(), want))
            time.sleep(0.02)

    def conn(self):
        s = self.srv.connect(timeout=5)
        self.socks.append(s)
        return s

    def mc(self):
        c = test_memcache.Client(self.mc_port)
        self.socks.append(c.sock)
        return c


class InflightBudget(BudgetCase):
    def http_half_put(self, i, sent, length=BODY_MAX):
        s = self.conn()
        s.sendall(put_head("/cache/h%d" % i, length) + b"x" * sent)
        return s

    def mc_half_set(self, i, sent, length=BODY_MAX):
        c = self.mc()
        c.send(b"set m%d 0 0 %d\r\n" % (i, length) + b"y" * sent)
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
        # What is held is what was received, whichever protocol.
        h = [self.http_half_put(i, 1000) for i in range(2)]
        m = [self.mc_half_set(i, 1000) for i in range(2)]
        self.wait_held(4000)
        # Grown to all but a byte of their maximum: nearly the whole share of large requests.
        for s in h:
            s.sendall(b"x" * (BODY_MAX - 1001))
        m[0].send(b"y" * (BODY_MAX - 1001))
        full = 3 * (BODY_MAX - 1) + 1000
        self.wait_held(full)
        room = CEILING - full
        # HTTP: a Content-Length it could not hold is refused at the end of the headers, before
        # 100 Continue, whether or not the body follows.
        self.assert_http_busy(put_head("/cache/late", room + 1, "Expect: 100-continue\r\n"))
        self.assert_http_busy(put_head("/cache/late", room + 1) + b"z" * (room + 1))
        # A chunked body is refused when it grows past the budget.
        body = b"".join(b"%x\r\n" % 8192 + b"c" * 8192 + b"\r\n" for _ in range(room // 8192 + 2))
        self.assert_http_busy(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked"
                              b"\r\n\r\n" + body + b"0\r\n\r\n")
        # memcached: a value it could not hold is refused at its line, and the data block --
        # itself a valid command -- is swallowed, however much of it is already there.
        block = b"set pwn 0 0 1\r\nx\r\n".ljust(room + 1, b".")
        for cmd in (b"set", b"add", b"replace", b"append", b"prepend"):
            with self.subTest(cmd=cmd):
                self.assertEqual(keep.ask(cmd + b" refused 0 0 %d\r\n" % len(block) + block +
                                          b"\r\n"), BUSY)
        self.assertEqual(keep.ask(b"cas refused 0 0 %d 1\r\n" % len(block) + block + b"\r\n"),
                         BUSY)
        self.assertEqual(keep.ask(b"ms refused %d T0\r\n" % len(block) + block + b"\r\n"), BUSY)
        keep.send(b"set half 0 0 %d\r\n" % len(block) + block[:1000])  # the rest comes later
        self.assertEqual(keep.line(), BUSY)
        keep.send(block[1000:] + b"\r\n")
        self.assertEqual(keep.get_all(b"get pwn keep half refused\r\n"),
                         {"keep": (0, b"safe", None)})
        # Requests that wait for nothing hold nothing and pass: without a body, a value whole in
        # the read of its line, a small body.
        self.assertEqual(request(self.srv, get("/id")).status, 200)
        self.assertEqual(keep.ask(b"set small 0 0 5\r\nhello\r\n"), b"STORED\r\n")
        r = request(self.srv, put_head("/cache/smallh", 5) + b"hello")
        self.assertEqual(r.status, 201, r.body)
        self.assertGreaterEqual(metric(self.srv, "snowflaked_inflight_refusals_total"), 11)
        self.assertEqual(self.held(), full)
        # One client gives up mid-body (a reset), then another (a plain close): given back.
        abort(h[0])
        m[0].close()
        self.wait_held(BODY_MAX - 1 + 1000)
        # A completed request gives back its bytes too.
        c = self.mc()
        self.assertEqual(c.ask(b"set full 0 0 %d\r\n" % BODY_MAX + b"z" * BODY_MAX + b"\r\n"),
                         b"STORED\r\n")
        r = request(self.srv, put_head("/cache/fullh", BODY_MAX) + b"w" * BODY_MAX)
        self.assertEqual(r.status, 201)
        self.assertEqual(self.held(), BODY_MAX - 1 + 1000)
        for s in (h[1], m[1].sock):
            abort(s)
        self.wait_held(0)
        self.assertLessEqual(self.peak, CEILING)

    def test_many_clients_leaving_mid_body(self):
        # More half-sent maximum bodies and values than the budget holds, from both protocols
        # at once: each client either holds what it sent or was refused with its protocol's
        # error, what is held stays within the large requests' share, and when every client
        # has gone (half by a reset) nothing is left held.
        half = BODY_MAX // 2
        http_socks, mc_socks = [], []
        for i in range(8):
            s = self.conn()
            http_socks.append(s)
            try:
                s.sendall(put_head("/cache/c%d" % i, BODY_MAX) + b"x" * half)
            except OSError:
                pass
            c = self.mc()
            c.send(b"set c%d 0 0 %d\r\n" % (i, BODY_MAX) + b"y" * half)
            mc_socks.append(c.sock)
            self.held()
        http_answers = [first_answer(s) for s in http_socks]
        mc_answers = [first_answer(s) for s in mc_socks]
        busy = [a for a in http_answers if a.startswith(b"HTTP/1.1 503 ")]
        oom = [a for a in mc_answers if a == BUSY]
        holding = http_answers.count(b"") + mc_answers.count(b"")
        self.assertEqual(len(busy) + len(oom) + holding, 16, (http_answers, mc_answers))
        self.assertLessEqual(holding, CEILING // half)
        self.assertGreaterEqual(holding, (CEILING - BODY_MAX) // half)
        self.wait_held(holding * half)
        for i, s in enumerate(self.socks):
            if i % 2:
                abort(s)
            else:
                s.close()
        self.socks = []
        self.wait_held(0)
        self.assertGreaterEqual(metric(self.srv, "snowflaked_inflight_refusals_total"),
                                16 - holding)

    def test_timeouts_give_back(self):
        # A client that stops mid-body is timed out (HTTP: 408; memcached: closed), and what it
        # held goes back to the budget.
        self.srv.stop()
        self.start("--set", "server.header_timeout_ms=1000")
        h = self.http_half_put(0, 1000)
        self.mc_half_set(0, 1000)
        self.wait_held(2000)
        r = Reader(h).response()
        self.assertEqual(r.status, 408)
        self.wait_held(0)

    def test_reserve_keeps_room_for_small_requests(self):
        # Large bodies held half-sent fill their share of the budget; a large request more is
        # refused, while small ones still pass from the reserve.
        self.assertEqual(metric(self.srv, "snowflaked_inflight_reserve_bytes"), RESERVE)
        h = [self.http_half_put(i, BODY_MAX - 1) for i in range(3)]
        room = CEILING - 3 * (BODY_MAX - 1)
        h.append(self.http_half_put(3, room - 1, length=room))
        self.wait_held(CEILING - 1)
        self.assertEqual(first_answer(self.http_half_put(9, 1000), 1)[:13], b"HTTP/1.1 503 ")
        c = self.mc()
        c.send(b"set big 0 0 %d\r\n" % (FLOOR + 1) + b"b" * 100)
        self.assertEqual(c.line(), BUSY)
        c.send(b"b" * (FLOOR + 1 - 100) + b"\r\n")
        # A small value and a small body, each sent in two parts: held from the reserve meanwhile.
        c.send(b"set small 0 0 %d\r\n" % FLOOR + b"s" * 1000)
        s = self.conn()
        s.sendall(put_head("/cache/smallh", FLOOR) + b"t" * 1000)
        self.wait_held(CEILING - 1 + 2000)
        c.send(b"s" * (FLOOR - 1000) + b"\r\n")
        self.assertEqual(c.line(), b"STORED\r\n")
        s.sendall(b"t" * (FLOOR - 1000))
        self.assertEqual(Reader(s).response().status, 201)
        self.assertEqual(c.get_all(b"get small big\r\n"), {"small": (0, b"s" * FLOOR, None)})
        self.assertEqual(self.held(), CEILING - 1)
        for s in h:
            abort(s)
        self.wait_held(0)

    def test_budget_refusal_keeps_the_old_value(self):
        # Issue 21 review: a set or ms refused because other clients' bytes fill the budget used
        # to delete the key's old value (as memcached does when its allocation fails). Refused at
        # the line or midway through its block, the old value stays.
        keep = self.mc()
        for k in (b"keep", b"mkeep", b"late", b"mlate"):
            self.assertEqual(keep.ask(b"set %s 0 0 4\r\nsafe\r\n" % k), b"STORED\r\n")
        # Two values start (taken as they arrive), then real partial bodies fill the budget.
        mid = [self.mc(), self.mc()]
        vlen = BODY_MAX - 1000
        mid[0].send(b"set keep 0 0 %d\r\n" % vlen + b"n" * 1000)
        mid[1].send(b"ms mkeep %d T0\r\n" % vlen + b"n" * 1000)
        deadline = time.time() + 5
        while self.held() < 2000 and time.time() < deadline:  # 2000 here (the bytes received)
            time.sleep(0.02)
        holders = []
        for i in range(8):
            s = self.http_half_put(i, BODY_MAX - 1)
            if first_answer(s, 1):
                break  # refused: the budget is as full as large requests may make it
            holders.append(s)
        self.assertGreaterEqual(len(holders), 2)
        # At the line: a value it could not hold now.
        self.assertEqual(keep.ask(b"set late 0 0 %d\r\n" % vlen + b"l" * 1000), BUSY)
        keep.send(b"l" * (vlen - 1000) + b"\r\n")
        self.assertEqual(keep.ask(b"ms mlate %d T0\r\n" % vlen + b"l" * 1000), BUSY)
        keep.send(b"l" * (vlen - 1000) + b"\r\n")
        self.assertEqual(keep.get_all(b"get late mlate\r\n"),
                         {k: (0, b"safe", None) for k in ("late", "mlate")})
        # Midway: the rest of the values that started before the budget filled.
        for c in mid:
            c.send(b"n" * (vlen - 1000) + b"\r\n")
            self.assertEqual(c.line(), BUSY)
        self.assertEqual(keep.get_all(b"get keep mkeep\r\n"),
                         {k: (0, b"safe", None) for k in ("keep", "mkeep")})
        for s in holders:
            abort(s)
        self.wait_held(0)
        # Nothing is wrong with the connections: once there is room, the same commands store.
        for c in mid:
            self.assertEqual(c.ask(b"set keep 0 0 %d\r\n" % vlen + b"v" * vlen + b"\r\n"),
                             b"STORED\r\n")


class AnnouncedLengths(BudgetCase):
    """Issue 21 review: heads and command lines announcing large bodies and values and sending
    none used to take their whole length from the budget at once, so a few of them (64 at the
    defaults) refused every other large request until their header timeout. Here the budget could
    hold 16 announced lengths and not one more value of 100 KB."""
    ANNOUNCED = 1000000
    N = 16
    budget = N * ANNOUNCED + 50000
    extra = ()

    def test_http_heads_without_bodies_hold_nothing(self):
        heads = [self.conn() for _ in range(self.N)]
        for s in heads:  # /echo is a read route: no token needed
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
                      % self.ANNOUNCED)
        for s in heads:
            self.assertEqual(first_answer(s, 0.2), b"")
        self.assertEqual(self.held(), 0)
        body = bytes(range(256)) * 400  # 100 KB
        r = request(self.srv, b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
                    % len(body) + body)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.body, body)
        # What they hold is what they sent.
        for s in heads:
            s.sendall(b"x" * 1000)
        self.wait_held(self.N * 1000)
        for s in heads:
            abort(s)
        self.wait_held(0)

    def test_memcached_lines_without_values_hold_nothing(self):
        lines = [self.mc() for _ in range(self.N)]
        for i, c in enumerate(lines):
            c.send(b"set k%d 0 0 %d\r\n" % (i, self.ANNOUNCED))
        for c in lines:
            self.assertEqual(first_answer(c.sock, 0.2), b"")
        self.assertEqual(self.held(), 0)
        value = bytes(range(256)) * 400  # 100 KB
        legit = self.mc()
        self.assertEqual(legit.ask(b"set legit 0 0 %d\r\n" % len(value) + value + b"\r\n"),
                         b"STORED\r\n")
        self.assertEqual(legit.get_all(b"get legit\r\n"), {"legit": (0, value, None)})
        for c in lines:
            c.send(b"v" * 1000)
        self.wait_held(self.N * 1000)
        for c in lines:
            c.sock.close()
        self.wait_held(0)


if __name__ == "__main__":
    unittest.main()
