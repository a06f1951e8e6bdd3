"""The echo endpoints against the real binary: POST /echo and GET /echo?msg= over HTTP, and the
raw TCP echo listener (echo.tcp_port) with byte-exact round trips, backpressure that bounds the
server's memory when the peer does not read, the idle timeout and the connection limit."""
import os
import socket
import time
import unittest

from sfharness import Reader, Server, free_port, get, request, rss_kib, wait_quiet


def post(path, body, extra=""):
    return (b"POST %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n" %
            (path.encode(), extra.encode(), len(body))) + body


class HttpEcho(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--set", "server.max_body_bytes=2000000")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_body_and_content_type_round_trip(self):
        body = bytes(range(256)) * 40
        r = request(self.srv, post("/echo", body, "Content-Type: image/x-test; q=1\r\n"))
        self.assertEqual((r.status, r.body), (200, body))
        self.assertEqual(r.header("content-type"), "image/x-test; q=1")
        r = request(self.srv, post("/echo", b"abc"))
        self.assertEqual(r.header("content-type"), "application/octet-stream")
        r = request(self.srv, post("/echo", b""))
        self.assertEqual((r.status, r.body, r.header("content-length")), (200, b"", "0"))

    def test_large_body_is_returned_whole(self):
        body = os.urandom(1500000)  # many output chunks, moved without a copy
        r = request(self.srv, post("/echo", body))
        self.assertEqual((r.status, len(r.body)), (200, len(body)))
        self.assertEqual(r.body, body)

    def test_chunked_request_body(self):
        chunks = [b"hello ", b"chunked", b" " * 3000, b"world"]
        raw = b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        raw += b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        r = request(self.srv, raw)
        self.assertEqual((r.status, r.body), (200, b"".join(chunks)))

    def test_body_over_the_limit_is_413(self):
        r = request(self.srv, post("/echo", b"x" * 2000001))
        self.assertEqual(r.status, 413)

    def test_pipelined_posts_keep_order(self):
        with self.srv.connect() as s:
            bodies = [os.urandom(n) for n in (0, 1, 100, 20000, 7)]
            s.sendall(b"".join(post("/echo", b) for b in bodies))
            reader = Reader(s)
            self.assertEqual([reader.response().body for _ in bodies], bodies)

    def test_get_msg(self):
        r = request(self.srv, get("/echo?msg=hi%20there%2C+%E2%9C%93&x=1"))
        self.assertEqual((r.status, r.body), (200, "hi there,+\u2713".encode()))
        self.assertEqual(r.header("content-type"), "text/plain; charset=utf-8")
        r = request(self.srv, b"HEAD /echo?msg=abc HTTP/1.1\r\nHost: t\r\n\r\n", head_only=True)
        self.assertEqual((r.status, r.header("content-length")), (200, "3"))
        self.assertEqual(request(self.srv, get("/echo?msg=")).body, b"")

    def test_bad_requests(self):
        self.assertEqual(request(self.srv, get("/echo")).status, 400)
        self.assertEqual(request(self.srv, get("/echo?msg=%zz")).status, 400)
        r = request(self.srv, post("/echo", b"x", "Content-Type: %s\r\n" % ("a" * 200)))
        self.assertEqual(r.status, 400)
        raw = b"PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx"
        self.assertEqual(request(self.srv, raw).status, 405)

    def test_disabled(self):
        srv = Server("--set", "echo.http_enabled=false")
        try:
            self.assertEqual(request(srv, post("/echo", b"x")).status, 404)
        finally:
            srv.stop()


class TcpEcho(unittest.TestCase):
    def start(self, *extra):
        self.echo_port = free_port()
        return Server("--set", "echo.tcp_port=%d" % self.echo_port, *extra)

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.echo_port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    @staticmethod
    def read_exact(s, n):
        got = bytearray()
        while len(got) < n:
            chunk = s.recv(min(1 << 20, n - len(got)))
            if not chunk:
                raise AssertionError("closed after %d of %d bytes" % (len(got), n))
            got += chunk
        return bytes(got)

    def test_round_trips_byte_exact(self):
        srv = self.start()
        try:
            s = self.connect()
            for size in (1, 2, 64, 1000, 65536, 300000):
                msg = os.urandom(size)
                s.sendall(msg)
                self.assertEqual(self.read_exact(s, size), msg)
            # many small messages in one write come back in order
            msgs = b"".join(b"%06d|" % i for i in range(5000))
            s.sendall(msgs)
            self.assertEqual(self.read_exact(s, len(msgs)), msgs)
            s.close()
        finally:
            srv.stop()

    def test_backpressure_bounds_memory_when_the_peer_does_not_read(self):
        srv = self.start("--set", "server.output_high_water_bytes=65536")
        try:
            s = self.connect()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            rss_before = rss_kib(srv.proc.pid)
            block = os.urandom(65536)
            s.setblocking(False)
            sent = 0
            deadline = time.time() + 10
            stalled_since = None
            while time.time() < deadline and sent < 256 << 20:
                try:
                    sent += s.send(block[sent % len(block):])
                    stalled_since = None
                except BlockingIOError:
                    # the server stopped reading: TCP flow control holds us back
                    stalled_since = stalled_since or time.time()
                    if time.time() - stalled_since > 0.5:
                        break
                    time.sleep(0.01)
            self.assertLess(sent, 64 << 20, "the server kept reading from a peer that never reads")
            grown = rss_kib(srv.proc.pid) - rss_before
            self.assertLess(grown, 16 * 1024, "server RSS grew %d KiB" % grown)
            # now read: everything comes back, in order, and the server resumes reading
            s.setblocking(True)
            s.settimeout(10)
            expect = (block * (sent // len(block) + 1))[:sent]
            self.assertEqual(self.read_exact(s, sent), expect)
            s.sendall(b"more")
            self.assertEqual(self.read_exact(s, 4), b"more")
            s.close()
        finally:
            srv.stop()

    def test_idle_timeout_closes(self):
        srv = self.start("--set", "server.idle_timeout_ms=300")
        try:
            s = self.connect()
            s.sendall(b"x")
            self.assertEqual(self.read_exact(s, 1), b"x")
            t0 = time.time()
            s.settimeout(5)
            self.assertEqual(s.recv(10), b"")
            self.assertLess(time.time() - t0, 2.0)
        finally:
            srv.stop()

    def test_activity_keeps_the_connection_and_idle_closes_it(self):
        """The idle deadline moves with every read (lazily: the timer is re-armed when it fires
        early), and it still fires once the peer goes quiet."""
        srv = self.start("--set", "server.idle_timeout_ms=300")
        try:
            s = self.connect()
            t_end = time.time() + 1.2
            while True:  # four idle periods of activity every 100 ms
                s.sendall(b"k")
                self.assertEqual(self.read_exact(s, 1), b"k")
                quiet = time.time()
                if quiet > t_end:
                    break
                time.sleep(0.1)
            s.settimeout(5)
            self.assertEqual(s.recv(10), b"")
            self.assertGreater(time.time() - quiet, 0.25)
            self.assertLess(time.time() - quiet, 1.5)
        finally:
            srv.stop()

    def test_connection_limit_applies(self):
        srv = self.start("--set", "server.max_connections=3")
        try:
            # The harness's start-up probes and the metrics query count until the server has
            # closed them: wait for those to be gone, so the cap is ours alone.
            wait_quiet(srv)
            time.sleep(0.2)  # and for the server to close the one that asked
            held = [self.connect() for _ in range(3)]
            for s in held:
                s.sendall(b"ok")
                self.assertEqual(self.read_exact(s, 2), b"ok")
            extra = self.connect()  # accepted by the kernel, closed by the server at the cap
            extra.settimeout(5)
            try:
                extra.sendall(b"x")
                self.assertEqual(extra.recv(10), b"")
            except ConnectionResetError:
                pass
            for s in held:
                s.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
