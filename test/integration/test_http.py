"""HTTP/1.x behaviour of the real binary: keep-alive, pipelining, HTTP/1.0, rejections, limits,
timeouts, connection cap, graceful shutdown, the ID API. Run: SNOWFLAKED_BIN=path python3 -m
unittest test_http (ctest does this)."""
import json
import re
import signal
import socket
import threading
import time
import unittest

from sfharness import Reader, Server, get, request, wait_quiet


class HttpBasics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--set", "server.max_header_bytes=2048", "--set",
                         "server.max_url_bytes=512", "--set", "server.max_body_bytes=4096",
                         "--set", "server.max_headers=20")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_id_json_and_headers(self):
        r = request(self.srv, get("/id"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-type"), "application/json")
        self.assertRegex(r.header("server"), r"^snowflaked/\d+\.\d+\.\d+$")
        self.assertRegex(r.header("date"), r"^\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$")
        self.assertEqual(int(r.header("content-length")), len(r.body))
        self.assertRegex(r.json()["id"], r"^\d{15,19}$")

    def test_keep_alive(self):
        with self.srv.connect() as s:
            rd = Reader(s)
            ids = []
            for _ in range(5):
                s.sendall(get("/id"))
                r = rd.response()
                self.assertEqual(r.status, 200)
                self.assertIsNone(r.header("connection"))
                ids.append(int(r.json()["id"]))
            self.assertEqual(ids, sorted(set(ids)))

    def test_200_pipelined_in_one_write(self):
        with self.srv.connect() as s:
            s.sendall(get("/id") * 200)
            rd = Reader(s)
            ids = [int(rd.response().json()["id"]) for _ in range(200)]
        self.assertEqual(len(ids), 200)
        self.assertEqual(ids, sorted(ids))
        self.assertEqual(len(set(ids)), 200)

    def test_pipelined_mixed_routes_in_order(self):
        reqs = [get("/id"), get("/healthz"), get("/nope"), get("/ids?count=2"), get("/readyz")]
        with self.srv.connect() as s:
            s.sendall(b"".join(reqs))
            rd = Reader(s)
            statuses = [rd.response().status for _ in reqs]
        self.assertEqual(statuses, [200, 200, 404, 200, 200])

    def test_byte_by_byte(self):
        raw = get("/id", "Accept: text/plain\r\n")
        with self.srv.connect() as s:
            for b in raw:
                s.send(bytes([b]))
                time.sleep(0.001)
            r = Reader(s).response()
        self.assertEqual(r.status, 200)
        self.assertRegex(r.body.decode(), r"^\d+$")

    def test_http10_closes(self):
        with self.srv.connect() as s:
            s.sendall(b"GET /id HTTP/1.0\r\n\r\n")
            rd = Reader(s)
            r = rd.response()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("connection"), "close")
            self.assertTrue(rd.closed())

    def test_http10_keep_alive(self):
        with self.srv.connect() as s:
            rd = Reader(s)
            for _ in range(3):
                s.sendall(b"GET /id HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                r = rd.response()
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("connection"), "keep-alive")

    def test_connection_close(self):
        with self.srv.connect() as s:
            s.sendall(get("/id", "Connection: close\r\n") + get("/id"))
            rd = Reader(s)
            r = rd.response()
            self.assertEqual(r.header("connection"), "close")
            self.assertTrue(rd.closed())  # the second request is not answered

    def test_head(self):
        with self.srv.connect() as s:
            s.sendall(b"HEAD /id HTTP/1.1\r\nHost: t\r\n\r\n" + get("/healthz"))
            rd = Reader(s)
            r = rd.response(head_only=True)
            self.assertEqual(r.status, 200)
            self.assertGreater(int(r.header("content-length")), 0)
            self.assertEqual(rd.response().status, 200)  # no stray body bytes in between

    def test_head_does_not_consume_ids(self):
        def issued():
            text = request(self.srv, get("/metrics")).body.decode()
            return int(re.search(r"^snowflaked_ids_issued_total (\d+)$", text, re.M).group(1))
        before = issued()
        for path in ("/id", "/ids?count=100"):
            r = request(self.srv, ("HEAD %s HTTP/1.1\r\nHost: t\r\n\r\n" % path).encode(),
                        head_only=True)
            g = request(self.srv, get(path))
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("content-length"), g.header("content-length"))
        self.assertEqual(issued(), before + 101)  # only the GETs took IDs

    def test_upgrade_is_answered_then_closed(self):
        with self.srv.connect() as s:
            s.sendall(get("/id", "Connection: Upgrade\r\nUpgrade: websocket\r\n") + b"junk")
            rd = Reader(s)
            r = rd.response()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("connection"), "close")
            self.assertTrue(rd.closed())

    def test_expect_100_continue_and_chunked(self):
        with self.srv.connect() as s:
            s.sendall(b"GET /id HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                      b"Expect: 100-continue\r\n\r\n")
            rd = Reader(s)
            self.assertEqual(rd.response().status, 100)
            s.sendall(b"hello")
            self.assertEqual(rd.response().status, 200)
            s.sendall(b"GET /id HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"5\r\nhello\r\n0\r\n\r\n")
            self.assertEqual(rd.response().status, 200)

    def test_expect_other_is_417(self):
        r = request(self.srv, get("/id", "Content-Length: 1\r\nExpect: something\r\n"))
        self.assertEqual(r.status, 417)

    def test_not_found_and_method(self):
        r = request(self.srv, get("/nothing"))
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json(), {"error": "not found"})
        r = request(self.srv, b"POST /id HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("allow"), "GET, HEAD")

    def test_not_found_and_method_come_before_the_body(self):
        # Issue 21: a request with a body is decided at the end of its headers: answered before
        # the body arrives, never after a 100 Continue, and the connection closes (the unread
        # body is never taken for a request).
        heads = ((b"POST /id HTTP/1.1\r\nHost: t\r\nContent-Length: 4000\r\n", 405),
                 (b"PUT /nothing HTTP/1.1\r\nHost: t\r\nContent-Length: 4000\r\n", 404),
                 (b"POST /nothing HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n", 404))
        for head, status in heads:
            for expect in (b"", b"Expect: 100-continue\r\n"):
                with self.subTest(head=head, expect=expect), self.srv.connect(timeout=3) as s:
                    s.sendall(head + expect + b"\r\n")
                    rd = Reader(s)
                    r = rd.response()
                    self.assertEqual(r.status, status)
                    if status == 405:
                        self.assertEqual(r.header("allow"), "GET, HEAD")
                    self.assertEqual(r.header("connection"), "close")
                    self.assertTrue(rd.closed())
        # Without a body they are answered at the end of the message, as before, and the
        # connection stays open.
        with self.srv.connect() as s:
            s.sendall(b"POST /id HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n" + get("/id"))
            rd = Reader(s)
            self.assertEqual(rd.response().status, 405)
            self.assertEqual(rd.response().status, 200)

    def test_rejections_400_and_close(self):
        vectors = {
            "bad request line": b"GET\r\n\r\n",
            "lowercase method": b"get / HTTP/1.1\r\n\r\n",
            "CL and TE": b"POST /id HTTP/1.1\r\nContent-Length: 3\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "differing CL": b"GET /id HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            "signed CL": b"GET /id HTTP/1.1\r\nContent-Length: +1\r\n\r\na",
            "bare LF": b"GET /id HTTP/1.1\nHost: t\n\n",
            "bare CR": b"GET /id HTTP/1.1\rHost: t\r\r",
            "obs-fold": b"GET /id HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n",
            "bad chunk size": b"GET /id HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "control char": b"GET /id HTTP/1.1\r\nX-A: a\x01b\r\n\r\n",
            "NUL in header": b"GET /id HTTP/1.1\r\nX-A: a\x00b\r\n\r\n",
            "space before colon": b"GET /id HTTP/1.1\r\nHost : t\r\n\r\n",
            "HTTP/0.9": b"GET /id\r\n\r\n",
        }
        for name, raw in vectors.items():
            with self.subTest(name), self.srv.connect() as s:
                s.sendall(raw)
                rd = Reader(s)
                r = rd.response()
                self.assertEqual(r.status, 400, name)
                self.assertEqual(r.header("connection"), "close")
                self.assertIn("error", r.json())
                self.assertTrue(rd.closed(), name)

    def test_obs_fold_after_an_empty_first_line(self):
        # A folded Content-Length or Transfer-Encoding must not frame the request.
        for raw in (b"POST /id HTTP/1.1\r\nContent-Length:\r\n 5\r\n\r\nhello" + get("/healthz"),
                    b"POST /id HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" +
                    get("/healthz")):
            with self.subTest(raw[:40]), self.srv.connect() as s:
                s.sendall(raw)
                rd = Reader(s)
                self.assertEqual(rd.response().status, 400)
                self.assertTrue(rd.closed())

    def test_error_after_head_has_a_body(self):
        with self.srv.connect() as s:
            s.sendall(b"HEAD /id HTTP/1.1\r\n\r\n\x01GET / HTTP/1.1\r\n\r\n")
            rd = Reader(s)
            self.assertEqual(rd.response(head_only=True).status, 200)
            r = rd.response()  # not HEAD: the 400 carries its body
            self.assertEqual(r.status, 400)
            self.assertIn("error", r.json())

    def test_obs_fold_split_across_reads(self):
        with self.srv.connect() as s:
            s.sendall(b"GET /id HTTP/1.1\r\nX-A: a\r\n")
            time.sleep(0.05)
            s.sendall(b" b\r\n\r\n")
            self.assertEqual(Reader(s).response().status, 400)

    def test_http2_preface(self):
        with self.srv.connect() as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            rd = Reader(s)
            self.assertEqual(rd.response().status, 505)
            self.assertTrue(rd.closed())

    def test_limits(self):
        r = request(self.srv, get("/id?" + "a" * 600))
        self.assertEqual(r.status, 414)
        r = request(self.srv, get("/id", "X-Big: " + "b" * 3000 + "\r\n"))
        self.assertEqual(r.status, 431)
        r = request(self.srv, get("/id", "".join("X-%d: v\r\n" % i for i in range(30))))
        self.assertEqual(r.status, 431)
        r = request(self.srv, get("/id", "Content-Length: 5000\r\n"))
        self.assertEqual(r.status, 413)
        with self.srv.connect() as s:
            s.sendall(b"GET /id HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
                      b"1000\r\n" + b"x" * 4096 + b"\r\n" + b"10\r\n" + b"y" * 16 + b"\r\n")
            self.assertEqual(Reader(s).response().status, 413)

    def test_ids_api(self):
        r = request(self.srv, get("/ids?count=5"))
        ids = [int(x) for x in r.json()["ids"]]
        self.assertEqual(len(ids), 5)
        self.assertEqual(ids, sorted(set(ids)))
        r = request(self.srv, get("/ids?count=4096&format=text"))
        self.assertEqual(len(r.body.decode().split()), 4096)
        for bad in ("", "?count=0", "?count=4097", "?count=abc", "?count=-1", "?count=1.5"):
            with self.subTest(bad):
                r = request(self.srv, get("/ids" + bad))
                self.assertEqual(r.status, 400)
                self.assertIn("1..4096", r.json()["error"])

    def test_encodings_and_parse(self):
        for enc, pattern in (("dec", r"^\d+$"), ("hex", r"^[0-9a-f]{16}$"),
                             ("base62", r"^[0-9A-Za-z]{11}$"), ("base32", r"^[0-9A-Z]{13}$")):
            with self.subTest(enc):
                r = request(self.srv, get("/id?format=text&encoding=" + enc))
                self.assertRegex(r.body.decode(), pattern)
                p = request(self.srv, get("/id/" + r.body.decode()))
                self.assertEqual(p.status, 200)
                info = p.json()
                self.assertEqual(set(info), {"id", "timestamp_ms", "time", "datacenter",
                                             "worker", "sequence"})
                self.assertLess(abs(info["timestamp_ms"] / 1000 - time.time()), 5)
                self.assertRegex(info["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertEqual(request(self.srv, get("/id?encoding=base64")).status, 400)
        self.assertEqual(request(self.srv, get("/id/12ab")).status, 400)
        self.assertEqual(request(self.srv, get("/id/9223372036854775808")).status, 400)  # sign
        self.assertEqual(request(self.srv, get("/id/9223372036854775807")).status, 400)  # future

    def test_accept_text_plain(self):
        r = request(self.srv, get("/id", "Accept: text/plain\r\n"))
        self.assertTrue(r.header("content-type").startswith("text/plain"))

    def test_metrics(self):
        request(self.srv, get("/id"))
        r = request(self.srv, get("/metrics"))
        self.assertEqual(r.status, 200)
        text = r.body.decode()
        self.assertIn('snowflaked_http_requests_total{route="/id",status="200"}', text)
        self.assertIn("snowflaked_connections_open", text)
        self.assertIn('snowflaked_info{version="', text)
        info = re.search(r"^snowflaked_info\{(.*)\} 1$", text, re.M)
        self.assertIsNotNone(info)
        self.assertIn('layout="41/5/5/12",layout_name="custom",id_bits="63",node_bits_low="false",',
                      info.group(1))
        self.assertRegex(text, r"snowflaked_ids_issued_total [1-9]")
        for line in text.splitlines():  # exposition format sanity
            if line and not line.startswith("#"):
                self.assertRegex(line, r'^[a-z_]+(\{[^}]*\})? [0-9.e+-]+$')

    def test_unique_across_connections_and_loops(self):
        ids, lock = [], threading.Lock()

        def worker():
            got = []
            for _ in range(100):
                got.append(int(request(self.srv, get("/id")).json()["id"]))
            with lock:
                ids.extend(got)
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(ids), 800)
        self.assertEqual(len(set(ids)), 800)


class LargeBatches(unittest.TestCase):
    def test_max_batch_beyond_default_buffer(self):
        srv = Server("--set", "snowflake.max_batch=40000")
        try:
            r = request(srv, get("/ids?count=40000"))
            self.assertEqual(r.status, 200)
            ids = [int(x) for x in r.json()["ids"]]
            self.assertEqual(len(set(ids)), 40000)
            self.assertEqual(ids, sorted(ids))
        finally:
            srv.stop()


class SlowResponses(unittest.TestCase):
    def test_idle_starts_after_a_long_response(self):
        # A response that takes longer than idle_timeout to drain must not end the connection
        # the moment it is written.
        # The idle clock starts when the last bytes reach the kernel; the ~40 KB still in socket
        # buffers then take under 1 s at this reading pace, well inside the 2 s idle timeout, while
        # the whole response takes ~3 s (longer than the timeout).
        srv = Server("--set", "server.idle_timeout_ms=2000", "--set", "server.so_sndbuf=16384",
                     threads=1)
        try:
            s = srv.connect()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(get("/ids?count=4096"))
            got = b""
            t0 = time.time()
            while not got.endswith(b'"]}'):
                got += s.recv(4096)
                time.sleep(0.08)
            self.assertGreater(time.time() - t0, 2.0)  # longer than the idle timeout
            s.sendall(get("/id"))  # reused at once
            self.assertEqual(Reader(s).response().status, 200)
            s.close()
        finally:
            srv.stop()

    def test_drain_closes_a_connection_whose_response_was_in_flight(self):
        srv = Server("--set", "server.shutdown_grace_ms=8000", "--set", "server.so_sndbuf=8192",
                     threads=1)
        try:
            s = srv.connect()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(get("/ids?count=4096"))
            time.sleep(0.1)
            t0 = time.time()
            srv.signal(signal.SIGTERM)  # the response is still being written
            got = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                got += d
            self.assertTrue(got.endswith(b'"]}'))
            self.assertEqual(srv.wait(timeout=10), 0)
            self.assertLess(time.time() - t0, 4)  # not the 8 s grace period
            s.close()
        finally:
            srv.stop()


class Timeouts(unittest.TestCase):
    def test_header_timeout_sends_408_and_closes(self):
        srv = Server("--set", "server.header_timeout_ms=300")
        try:
            with srv.connect() as s:
                s.sendall(b"GET /id HTTP/1.1\r\nHost: t\r\n")  # never finished
                t0 = time.time()
                rd = Reader(s)
                r = rd.response()
                self.assertEqual(r.status, 408)
                self.assertTrue(rd.closed())
                self.assertLess(time.time() - t0, 3)
            with srv.connect() as s:  # an idle connection is closed silently
                s.sendall(get("/id"))
                rd = Reader(s)
                rd.response()
                self.assertFalse(rd.closed(timeout=0.1))
        finally:
            srv.stop()

    def test_idle_timeout(self):
        srv = Server("--set", "server.idle_timeout_ms=300")
        try:
            with srv.connect() as s:
                s.sendall(get("/id"))
                rd = Reader(s)
                self.assertEqual(rd.response().status, 200)
                self.assertTrue(rd.closed(timeout=3))
        finally:
            srv.stop()


class ConnectionCap(unittest.TestCase):
    def test_max_connections(self):
        srv = Server("--set", "server.max_connections=20", threads=1)
        try:
            wait_quiet(srv)  # the start-up probe must not count against the cap
            time.sleep(0.05)
            held = [srv.connect() for _ in range(20)]
            for s in held:  # all served
                s.sendall(get("/healthz"))
                self.assertEqual(Reader(s).response().status, 200)
            extra = srv.connect()
            self.assertTrue(Reader(extra).closed(timeout=3))  # closed at once, not queued
            extra.close()
            held[0].sendall(get("/id"))  # existing ones still served
            self.assertEqual(Reader(held[0]).response().status, 200)
            held.pop().close()
            time.sleep(0.2)
            with srv.connect() as s:  # room again
                s.sendall(get("/healthz"))
                self.assertEqual(Reader(s).response().status, 200)
            held[0].sendall(get("/metrics"))  # on a held connection: a new one may hit the cap
            text = Reader(held[0]).response().body.decode()
            self.assertRegex(text, r"snowflaked_connections_rejected_total [1-9]")
            for s in held:
                s.close()
        finally:
            srv.stop()


class SingleAcceptor(unittest.TestCase):
    def test_without_reuseport_loops_share_one_listener(self):
        srv = Server("--set", "server.reuseport=false", threads=2)
        try:
            self.assertIn("one acceptor", srv.output() or "one acceptor")
            ids = set()
            for _ in range(200):
                ids.add(int(request(srv, get("/id")).json()["id"]))
            self.assertEqual(len(ids), 200)
        finally:
            srv.stop()


class SlowReaders(unittest.TestCase):
    def test_client_that_never_reads_is_cut_off(self):
        srv = Server("--set", "server.write_timeout_ms=500", threads=1)
        try:
            hog = srv.connect()
            hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            try:  # ~90 KB per response, never read: output backs up, reading stops
                for _ in range(200):
                    hog.sendall(get("/ids?count=4096"))
            except OSError:
                pass
            r = request(srv, get("/healthz"))  # the loop still serves others
            self.assertEqual(r.status, 200)
            time.sleep(1.5)
            text = request(srv, get("/metrics")).body.decode()
            self.assertRegex(text, r'snowflaked_connection_timeouts_total\{kind="write"\} [1-9]')
            self.assertEqual(
                int(re.search(r"^snowflaked_connections_open (\d+)$", text, re.M).group(1)), 1)
            hog.close()
        finally:
            srv.stop()


class DescriptorExhaustion(unittest.TestCase):
    def test_emfile_pauses_accepting_without_spinning(self):
        # Idle connections must be accepted as they connect (first come, first served), which
        # TCP_DEFER_ACCEPT would postpone until they send or the deferral ends.
        srv = Server("--set", "server.tcp_defer_accept_s=0", threads=1, nofile=48)
        try:
            conns = []
            for _ in range(80):  # more than the server has descriptors for
                conns.append(srv.connect())
            time.sleep(0.3)
            cpu0 = srv.cpu_seconds()
            time.sleep(1.0)
            busy = srv.cpu_seconds() - cpu0
            self.assertLess(busy, 0.2, "accept loop spins while out of descriptors")
            served = 0
            for s in conns[:20]:  # the early ones were accepted and are served
                s.sendall(get("/healthz"))
                served += Reader(s).response().status == 200
            self.assertEqual(served, 20)
            for s in conns[:40]:
                s.close()
            time.sleep(0.5)  # descriptors free: accepting resumes (first come, first served)
            s = conns[45]
            s.sendall(get("/healthz"))
            self.assertEqual(Reader(s).response().status, 200)
            for s in conns[40:]:
                s.close()
            time.sleep(0.3)
            text = request(srv, get("/metrics")).body.decode()
            self.assertRegex(text, r"snowflaked_accept_pauses_total [1-9]")
        finally:
            srv.stop()


class Shutdown(unittest.TestCase):
    def test_sigterm_answers_in_flight_then_exits_0(self):
        srv = Server()
        try:
            partial = []
            for _ in range(20):  # requests whose first bytes are in when the signal comes
                s = srv.connect()
                s.sendall(b"GET /id HTTP/1.1\r\nHost: t\r\n")
                partial.append(s)
            idle = srv.connect()
            idle.sendall(get("/id"))
            idle_reader = Reader(idle)
            idle_reader.response()
            time.sleep(0.1)
            srv.signal(signal.SIGTERM)
            time.sleep(0.2)
            self.assertTrue(idle_reader.closed(timeout=3))  # idle keep-alive closed
            idle.close()
            # New connections are refused once draining: the listeners are closed.
            with self.assertRaises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()
            for s in partial:
                s.sendall(b"\r\n")
                rd = Reader(s)
                r = rd.response()
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("connection"), "close")
                self.assertTrue(rd.closed())
                s.close()
            self.assertEqual(srv.wait(timeout=10), 0)
            self.assertIn("draining", srv.output())
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
