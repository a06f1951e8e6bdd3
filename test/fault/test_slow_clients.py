"""Slow and non-reading clients against server.header_timeout_ms / write_timeout_ms and the
output cap, then slowhttptest (Debian package) in its three modes with a probe connection
showing that the service still answers /id.

Server settings for the class: header_timeout_ms=1000, write_timeout_ms=1000 (short, so that
every case ends within seconds), idle_timeout_ms=10000, the memcached listener on."""
import csv
import glob
import os
import selectors
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import faultutil as fu
from faultutil import Server, free_port, get, request, wait_quiet

HEADER_MS = 1000
WRITE_MS = 1000
BLOB = 256 * 1024  # the slow-read target, /cache/blob


def put(path, body):
    return (b"PUT %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" %
            (path.encode(), len(body))) + body


class Prober(threading.Thread):
    """GET /id on a new connection every `every` seconds until stopped: (status or error,
    seconds) per probe."""

    def __init__(self, srv, every=0.25, timeout=3.0):
        super().__init__(daemon=True)
        self.srv, self.every, self.timeout = srv, every, timeout
        self.results = []
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            t = time.monotonic()
            try:
                with socket.create_connection(("127.0.0.1", self.srv.port),
                                              timeout=self.timeout) as s:
                    s.sendall(get("/id"))
                    s.settimeout(self.timeout)
                    r = fu.Reader(s).response()
                    self.results.append((r.status, time.monotonic() - t))
            except (OSError, EOFError, ValueError) as e:
                self.results.append((e.__class__.__name__, time.monotonic() - t))
            self.halt.wait(self.every)

    def finish(self):
        self.halt.set()
        self.join(timeout=10)
        return self.results


def send_queued(port):
    """Bytes queued in the kernel on the server's side of its established connections (the sum
    of Send-Q in `ss`), 0 if ss is not available."""
    try:
        out = subprocess.run(["ss", "-tnH", "state", "established", "( sport = :%d )" % port],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    total = 0
    for line in out.decode().splitlines():
        f = line.split()
        if len(f) >= 2 and f[1].isdigit():
            total += int(f[1])
    return total


def read_until_closed(s, timeout):
    """(bytes, how, seconds): reads until EOF/reset or timeout."""
    s.settimeout(timeout)
    data, t0 = b"", time.monotonic()
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return data, "eof", time.monotonic() - t0
            data += d
    except ConnectionResetError:
        return data, "reset", time.monotonic() - t0
    except socket.timeout:
        return data, "open", time.monotonic() - t0


class SlowClients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not fu.sfharness.BINARY:
            raise unittest.SkipTest("SNOWFLAKED_BIN is not set")
        cls.mc_port = free_port()
        cls.srv = Server("--set", "server.header_timeout_ms=%d" % HEADER_MS,
                         "--set", "server.write_timeout_ms=%d" % WRITE_MS,
                         "--set", "server.idle_timeout_ms=10000",
                         "--set", "cache.memcached_port=%d" % cls.mc_port)
        r = request(cls.srv, put("/cache/blob", os.urandom(BLOB)))
        assert r.status == 201, r.status

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def settle(self):
        wait_quiet(self.srv, timeout=10)

    def trickle(self, head, count, every=0.05, limit=6.0):
        """`count` connections each sending `head` one byte every `every` s, all at once. Returns
        per connection (response bytes, how it ended, seconds from its first byte)."""
        sel = selectors.DefaultSelector()
        conns = []
        for i in range(count):
            s = self.srv.connect()
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, i)
            conns.append({"s": s, "pos": 0, "data": b"", "end": None, "t0": time.monotonic()})
        next_byte = time.monotonic()
        deadline = time.monotonic() + limit
        try:
            while time.monotonic() < deadline and any(c["end"] is None for c in conns):
                if time.monotonic() >= next_byte:
                    for c in conns:
                        if c["end"] is None and c["pos"] < len(head):
                            try:
                                c["s"].send(head[c["pos"]:c["pos"] + 1])
                                c["pos"] += 1
                            except OSError:
                                pass  # closed: the read side tells how
                    next_byte += every
                for k, _ in sel.select(0.01):
                    c = conns[k.data]
                    try:
                        d = k.fileobj.recv(65536)
                    except BlockingIOError:
                        continue
                    except ConnectionResetError:
                        d, c["end"] = b"", "reset"
                    if d:
                        c["data"] += d
                        c.setdefault("t_first", time.monotonic() - c["t0"])
                    else:
                        c["end"] = c["end"] or "eof"
                        c["t_end"] = time.monotonic() - c["t0"]
                        sel.unregister(k.fileobj)
        finally:
            for c in conns:
                c["s"].close()
            sel.close()
        return conns

    def test_slowloris_head_trickled_byte_by_byte_gets_408_at_the_header_timeout(self):
        prober = Prober(self.srv)
        prober.start()
        head = b"GET /id HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 1000  # never completes
        conns = self.trickle(head, 20)
        probes = prober.finish()
        for c in conns:
            self.assertEqual(c["end"], "eof", "slowloris connection not closed")
            got, rest = fu.parse_responses(c["data"])
            self.assertEqual(([g[0] for g in got], rest), ([408], b""))
            self.assertEqual(got[0][1].get("connection"), "close")
            self.assertTrue(HEADER_MS / 1e3 * 0.9 <= c["t_first"] <= HEADER_MS / 1e3 + 1.5,
                            "408 after %.2f s" % c["t_first"])
        firsts = sorted(c["t_first"] for c in conns)
        fu.figure("slowloris: 408 after", "%.2f-%.2f s (header_timeout_ms=%d), bytes sent before "
                  "it: %d-%d" % (firsts[0], firsts[-1], HEADER_MS, min(c["pos"] for c in conns),
                                 max(c["pos"] for c in conns)))
        self.assertEqual({p[0] for p in probes}, {200}, probes)
        self.settle()

    def test_connection_that_sends_nothing_is_closed_at_the_header_timeout(self):
        with self.srv.connect() as s:
            data, how, took = read_until_closed(s, 5)
        self.assertEqual((data, how), (b"", "eof"))
        self.assertTrue(0.9 <= took <= HEADER_MS / 1e3 + 1.5, took)
        fu.figure("silent connection: closed after", "%.2f s without a response" % took)

    def test_slow_body_is_cut_by_the_same_deadline(self):
        """The header timeout runs from the first byte of a request until it is complete: a body
        trickled after a complete head gets the 408 too (not only the head, as the README's
        configuration table says)."""
        for name, head, unit in (
                ("content-length", b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n"
                                   b"\r\n", b"x"),
                ("chunked", b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                            b"\r\n", b"1\r\nx\r\n")):
            with self.subTest(name):
                with self.srv.connect() as s:
                    s.sendall(head)
                    t0, sent = time.monotonic(), 0
                    s.settimeout(0.1)
                    data = b""
                    while time.monotonic() - t0 < 5 and not data:
                        try:
                            s.sendall(unit)
                            sent += 1
                        except OSError:
                            break
                        try:
                            data = s.recv(65536)
                        except socket.timeout:
                            pass
                    took = time.monotonic() - t0
                    rest, how, _ = read_until_closed(s, 3)
                got, left = fu.parse_responses(data + rest)
                self.assertEqual([g[0] for g in got], [408], data + rest)
                self.assertEqual((left, how), (b"", "eof"))
                self.assertTrue(0.8 <= took <= HEADER_MS / 1e3 + 1.5, took)
                fu.figure("slow body (%s): 408 after" % name, "%.2f s, %d body units sent" %
                          (took, sent))
        self.settle()

    def test_http_client_that_never_reads_is_closed(self):
        text0 = fu.metrics_text(self.srv)
        rss0 = fu.rss_kib(self.srv.proc.pid)
        hog = self.srv.connect()
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.settimeout(2)
        t0 = time.monotonic()
        try:  # 200 x 256 KiB = 50 MiB of responses asked for, none read
            hog.sendall(get("/cache/blob") * 200)
        except OSError:
            pass
        peak, closed_in = rss0, None
        while time.monotonic() - t0 < 10:
            peak = max(peak, fu.rss_kib(self.srv.proc.pid))
            if fu.metric(self.srv, "snowflaked_connections_open") == 1:
                closed_in = time.monotonic() - t0
                break
            time.sleep(0.1)
        hog.close()
        self.assertIsNotNone(closed_in, "a client that never reads was not closed in 10 s")
        text = fu.metrics_text(self.srv)
        by = {kind: fu.labelled(text, "snowflaked_connection_timeouts_total", 'kind="%s"' % kind)
              - fu.labelled(text0, "snowflaked_connection_timeouts_total", 'kind="%s"' % kind)
              for kind in ("write",)}
        cap = (fu.metric(self.srv, "snowflaked_output_limit_closes_total") or 0)
        self.assertGreaterEqual(by["write"] + cap, 1)
        self.assertLess(peak - rss0, 32 * 1024, "server RSS grew by %d KiB" % (peak - rss0))
        fu.figure("never-reading HTTP client: closed after", "%.2f s (write timeouts +%d, "
                  "output-limit closes %d), server RSS +%d KiB" % (closed_in, by["write"], cap,
                                                                  peak - rss0))

    def test_memcached_multiget_never_read_is_held_then_timed_out(self):
        """One get line naming 400 values of 1 MB (400 MB of output, a 2.4 KB command) from a
        client that never reads: the get pauses at the output's high-water mark (256 KiB), so
        the server's RSS grows by about one value, not by the 400 MB asked for nor by the
        output limit, and the write timeout closes the connection. (Regression test for the
        output limit once checked only after a whole read was answered into memory, and for
        multigets once closed at the output limit instead of streaming.)"""
        value = b"v" * (1000 * 1000)
        with socket.create_connection(("127.0.0.1", self.mc_port), timeout=10) as m:
            m.sendall(b"".join(b"set big%d 0 0 %d\r\n%s\r\n" % (i, len(value), value)
                               for i in range(8)))
            buf = b""
            while buf.count(b"\r\n") < 8:
                buf += m.recv(4096)
            self.assertEqual(buf, b"STORED\r\n" * 8)
        text0 = fu.metrics_text(self.srv)
        caps0 = fu.metric(self.srv, "snowflaked_output_limit_closes_total")
        writes0 = fu.labelled(text0, "snowflaked_connection_timeouts_total", 'kind="write"')
        rss0 = fu.rss_kib(self.srv.proc.pid)
        hog = socket.socket()
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.connect(("127.0.0.1", self.mc_port))
        t0 = time.monotonic()
        hog.sendall(b"get " + b" ".join(b"big%d" % (i % 8) for i in range(400)) + b"\r\n")
        peak, writes = rss0, writes0
        while time.monotonic() - t0 < WRITE_MS / 1e3 + 6 and writes == writes0:
            peak = max(peak, fu.rss_kib(self.srv.proc.pid))
            writes = fu.labelled(fu.metrics_text(self.srv), "snowflaked_connection_timeouts_total",
                                 'kind="write"')
            time.sleep(0.05)
        took = time.monotonic() - t0
        hog.close()
        self.assertEqual(writes, writes0 + 1, "the stalled multi-get was not timed out")
        self.assertEqual(fu.metric(self.srv, "snowflaked_output_limit_closes_total"), caps0)
        self.assertLess(peak - rss0, 6 * 1024, "server RSS grew by %d KiB" % (peak - rss0))
        fu.figure("never-reading memcached multi-get (400 x 1 MB)", "held at the high-water "
                  "mark, closed by the write timeout after %.2f s, server RSS +%d KiB"
                  % (took, peak - rss0))
        self.settle()

    def test_slowhttptest_three_modes_while_probing_id(self):
        reason = fu.ensure_programs({"slowhttptest": "slowhttptest"})
        if reason:
            self.skipTest(reason)
        base = "http://127.0.0.1:%d" % self.srv.port
        modes = [
            ("slowloris (-H)", 400, ["-H", "-i", "1", "-x", "24", "-t", "GET",
                                     "-u", base + "/id"], "header"),
            ("slow body (-B)", 400, ["-B", "-i", "1", "-s", "8192", "-x", "10", "-t", "POST",
                                     "-u", base + "/echo"], "header"),
            # 2 pipelined GETs of a 256 KiB value, read 4 bytes a second through a 1-4 byte
            # window. The kernel takes the whole 512 KiB into the socket send buffer (loopback,
            # autotuned; server.so_sndbuf=0): the server has nothing left to write, so neither
            # the write timeout nor the output cap applies; the idle timeout (10 s here) ends
            # such a connection. What it costs is kernel memory, measured below (Send-Q).
            ("slow read (-X)", 200, ["-X", "-k", "2", "-n", "1", "-w", "1", "-y", "4", "-z", "4",
                                     "-u", base + "/cache/blob"], None),
        ]
        with tempfile.TemporaryDirectory(prefix="sf_fault_sht_") as tmp:
            for name, conns, args, kind in modes:
                with self.subTest(name):
                    text0 = fu.metrics_text(self.srv)
                    rss0 = fu.rss_kib(self.srv.proc.pid)
                    prefix = os.path.join(tmp, name.split()[-1].strip("()-"))
                    cmd = ["slowhttptest", "-c", str(conns), "-r", "200", "-l", "8", "-p", "2",
                           "-g", "-o", prefix] + args
                    prober = Prober(self.srv)
                    t0 = time.monotonic()
                    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                    prober.start()
                    peak, sendq = rss0, 0
                    try:
                        while proc.poll() is None and time.monotonic() - t0 < 40:
                            peak = max(peak, fu.rss_kib(self.srv.proc.pid))
                            sendq = max(sendq, send_queued(self.srv.port))
                            time.sleep(0.5)
                        out = proc.communicate(timeout=10)[0].decode(errors="replace")
                    finally:
                        fu.end_process(proc)
                        probes = prober.finish()
                    took = time.monotonic() - t0
                    self.assertEqual(proc.returncode, 0, out[-2000:])
                    rows = []
                    for path in glob.glob(prefix + "*.csv"):
                        with open(path) as f:
                            rows = list(csv.DictReader(f))
                    max_conn = max((int(r["Connected"]) for r in rows), default=-1)
                    text1 = fu.metrics_text(self.srv)
                    closed = {k: fu.labelled(text1, "snowflaked_connection_timeouts_total",
                                             'kind="%s"' % k) -
                              fu.labelled(text0, "snowflaked_connection_timeouts_total",
                                          'kind="%s"' % k) for k in ("header", "idle", "write")}
                    lat = sorted(p[1] for p in probes)
                    fu.figure("slowhttptest %s" % name, "%.1f s, up to %d attack connections open"
                              " at once, server timeouts %s; server RSS +%d KiB, kernel send "
                              "queues up to %.1f MiB; %d probes of /id: %s, latency max %.0f ms, "
                              "median %.0f ms" %
                              (took, max_conn, {k: int(v) for k, v in closed.items()},
                               peak - rss0, sendq / 2**20, len(probes),
                               sorted({str(p[0]) for p in probes}), lat[-1] * 1e3,
                               lat[len(lat) // 2] * 1e3))
                    self.assertGreater(len(probes), 5)
                    self.assertEqual({p[0] for p in probes}, {200}, probes)
                    self.assertLess(peak - rss0, 64 * 1024, "server RSS grew by %d KiB" %
                                    (peak - rss0))
                    if kind:
                        self.assertGreater(closed[kind], 0, "the server closed none by %s "
                                           "timeout" % kind)
                    self.settle()


if __name__ == "__main__":
    unittest.main()
