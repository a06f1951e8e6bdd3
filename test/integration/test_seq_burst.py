"""Segment mode's bounded wait for a burst (docs/sequences.md, "Bursts wait briefly"), against the
real binary: a /seq request that finds both blocks used up is parked (its connection held, the
loop free) for at most sequences.burst_wait_ms, answered as soon as the next block is there, or
503 + Retry-After at its deadline; 0 refuses at once. Pipelined requests behind a parked one are
answered in order; HEAD and HTTP/1.0 keep their shapes; a client that goes away while parked
frees its slot; a drain answers parked requests at once.

The block source is slowed with sequences.reserve_delay_ms (every reserve waits that long).
Timings are generous: the suite also runs under ASan/UBSan and TSan on a loaded machine.

Run as ctest does, from test/integration: `python3 -m unittest -v test_seq_burst`."""
import json
import signal
import socket
import ssl
import struct
import threading
import time
import unittest

import sfharness
import tlscerts
from sfharness import Reader, Server, get, metric, request, wait_ready


def namespaces(*defs):
    return "sequences.namespaces=" + json.dumps(list(defs))


def counter(srv, name):
    v = metric(srv, name)
    return int(v) if v is not None else None


def slow_server(name, block, delay_ms, wait_ms, *more):
    """A ready daemon with one namespace whose every block reserve takes delay_ms."""
    srv = Server(*more, "--set", namespaces({"name": name, "block": block}),
                 "--set", "sequences.reserve_delay_ms=%d" % delay_ms,
                 "--set", "sequences.burst_wait_ms=%d" % wait_ms,
                 "--set", "sequences.start_wait_ms=10000",
                 "--set", "sequences.retry_ms=100")
    try:
        wait_ready(srv, timeout=30)
    except BaseException:
        srv.stop()
        raise
    return srv


def pipeline(srv, raws):
    """Sends every request at once on one connection; returns (socket, reader)."""
    s = srv.connect(timeout=30)
    s.sendall(b"".join(raws))
    return s, Reader(s)


class BurstWaits(unittest.TestCase):
    """reserve 200 ms, blocks of 10, burst_wait_ms 1000: a burst is served, never refused."""

    @classmethod
    def setUpClass(cls):
        cls.srv = slow_server("b", 10, 200, 1000)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_a_burst_is_served_without_503(self):
        served0 = counter(self.srv, "snowflaked_seq_parked_served_total")
        out, errors = [[] for _ in range(6)], []

        def run(i):
            try:
                s = self.srv.connect(timeout=30)
                rd = Reader(s)
                for _ in range(12):
                    s.sendall(get("/seq/b"))
                    r = rd.response()
                    if r.status != 200:
                        errors.append((r.status, r.body))
                        return
                    out[i].append(r.json()["id"])
                s.close()
            except OSError as e:
                errors.append(repr(e))

        ts = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        self.assertEqual(errors, [])
        every = [n for nums in out for n in nums]
        self.assertEqual(len(every), 72)
        self.assertEqual(len(set(every)), 72)  # never a duplicate
        for nums in out:
            self.assertEqual(nums, sorted(nums))
        self.assertGreater(counter(self.srv, "snowflaked_seq_parked_served_total"), served0,
                           "72 numbers in blocks of 10 at 200 ms a block never ran dry")
        self.assertEqual(counter(self.srv, "snowflaked_seq_parked"), 0)

    def test_pipelined_behind_a_parked_request_in_order_with_head_and_http10(self):
        """25 GETs (beyond both blocks), a HEAD, a /healthz and an HTTP/1.0 GET in one write:
        answered in order; the HEAD without a body; the HTTP/1.0 one last, then the close."""
        raws = [get("/seq/b") for _ in range(25)]
        raws.append(b"HEAD /seq/b HTTP/1.1\r\nHost: t\r\n\r\n")
        raws.append(get("/healthz"))
        raws.append(b"GET /seq/b HTTP/1.0\r\n\r\n")
        s, rd = pipeline(self.srv, raws)
        nums = []
        for _ in range(25):
            r = rd.response()
            self.assertEqual(r.status, 200, r.body)
            nums.append(r.json()["id"])
        self.assertEqual(nums, sorted(nums))
        self.assertEqual(len(set(nums)), 25)
        head = rd.response(head_only=True)
        self.assertEqual(head.status, 200)
        self.assertGreater(int(head.header("Content-Length")), 0)
        self.assertEqual(rd.response().status, 200)  # /healthz, after the parked ones
        last = rd.response()
        self.assertEqual(last.status, 200, last.body)
        self.assertGreater(last.json()["id"], nums[-1])
        self.assertEqual(last.header("Connection"), "close")
        self.assertTrue(rd.closed(timeout=10))
        s.close()

    def test_http10_parked_alone(self):
        """An HTTP/1.0 request parked on its own (the first read, one-shot): answered, closed."""
        hold = [get("/seq/b") for _ in range(22)]  # empties both blocks on another connection
        s, rd = pipeline(self.srv, hold)
        c = self.srv.connect(timeout=30)
        c.sendall(b"GET /seq/b HTTP/1.0\r\n\r\n")
        r = Reader(c).response()
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.version, "HTTP/1.1")
        self.assertEqual(r.header("Connection"), "close")
        c.close()
        for _ in range(22):
            self.assertEqual(rd.response().status, 200)
        s.close()

    def test_client_gone_while_parked(self):
        """Connections reset while their requests are parked: slots freed, the server serves on
        (and stops clean: no sanitizer report, checked by tearDownClass)."""
        for _ in range(5):
            s, _ = pipeline(self.srv, [get("/seq/b") for _ in range(30)])
            time.sleep(0.05)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # RST
        deadline = time.monotonic() + 30
        while counter(self.srv, "snowflaked_seq_parked") != 0:
            self.assertLess(time.monotonic(), deadline, "parked requests of a gone client stay")
            time.sleep(0.05)
        s, rd = pipeline(self.srv, [get("/seq/b")])
        self.assertEqual(rd.response().status, 200)
        s.close()


class BurstRefusedAtZero(unittest.TestCase):
    def test_zero_refuses_at_once(self):
        srv = slow_server("z", 10, 400, 0)
        try:
            s, rd = pipeline(srv, [get("/seq/z") for _ in range(30)])
            statuses = []
            for _ in range(30):
                r = rd.response()
                statuses.append(r.status)
                if r.status == 503:
                    self.assertEqual(r.header("Retry-After"), "1")
                    self.assertIn("no number in hand", r.json()["error"])
            s.close()
            self.assertIn(503, statuses)
            self.assertEqual(counter(srv, "snowflaked_seq_parked_served_total"), 0)
            self.assertEqual(counter(srv, "snowflaked_seq_parked_refused_total"), 0)
        finally:
            srv.stop()

    def test_deadline_answers_503(self):
        """A wait shorter than the reserve: parked, then 503 + Retry-After at its deadline."""
        srv = slow_server("d", 10, 3000, 100)
        try:
            s, rd = pipeline(srv, [get("/seq/d") for _ in range(22)])
            statuses = [rd.response().status for _ in range(22)]
            s.close()
            self.assertIn(503, statuses)
            self.assertGreater(counter(srv, "snowflaked_seq_parked_refused_total"), 0)
        finally:
            srv.stop()


class DrainAnswersParked(unittest.TestCase):
    def test_sigterm_answers_parked_requests(self):
        srv = slow_server("t", 5, 2000, 10000)
        try:
            s, rd = pipeline(srv, [get("/seq/t") for _ in range(12)])
            deadline = time.monotonic() + 20
            while counter(srv, "snowflaked_seq_parked") == 0:
                self.assertLess(time.monotonic(), deadline, "nothing was parked")
                time.sleep(0.02)
            t0 = time.monotonic()
            srv.signal(signal.SIGTERM)
            got = []
            try:
                while True:
                    got.append(rd.response())
            except (EOFError, OSError):
                pass
            waited = time.monotonic() - t0
            s.close()
            self.assertTrue(got)
            self.assertEqual(got[-1].status, 503, got[-1].body)
            self.assertEqual(got[-1].header("Retry-After"), "1")
            self.assertEqual(got[-1].header("Connection"), "close")
            self.assertLess(waited, 8, "a drain waited for the parked request's 10 s")
            self.assertTrue(all(r.status in (200, 503) for r in got))
            self.assertEqual(srv.wait(timeout=60), 0)  # the drain ends (the source's thread too)
        finally:
            srv.stop()


class OverTls(unittest.TestCase):
    """The hold stops TLS reads too: pipelined requests behind a parked one, over TLS, are
    answered in order and none is lost in OpenSSL's buffer."""

    def test_pipelined_over_tls(self):
        certs = tlscerts.Certs()
        port = sfharness.free_port()
        srv = slow_server("s", 10, 200, 2000,
                          *sfharness.set_args("server.tls.port=%d" % port,
                                              "server.tls.cert_file=" + certs.server,
                                              "server.tls.key_file=" + certs.server_key))
        try:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(certs.ca)
            raw = socket.create_connection(("127.0.0.1", port), timeout=30)
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            s.sendall(b"".join(get("/seq/s") for _ in range(30)) + get("/healthz"))
            rd = Reader(s)
            nums = []
            for _ in range(30):
                r = rd.response()
                self.assertEqual(r.status, 200, r.body)
                nums.append(r.json()["id"])
            self.assertEqual(nums, sorted(nums))
            self.assertEqual(len(set(nums)), 30)
            self.assertEqual(rd.response().status, 200)
            s.close()
            self.assertGreater(counter(srv, "snowflaked_seq_parked_served_total"), 0)
        finally:
            srv.stop()
            certs.cleanup()


if __name__ == "__main__":
    unittest.main()
