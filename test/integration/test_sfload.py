"""sfload (loadtest/sfload/) against the real binary, briefly and on loopback only: /id keep-alive
with --verify-ids, /ids pipelined over two threads, connection per request with --webbench,
open loop, the memcached protocol, TCP echo (the server's and a Python one), status classes; and
the verifier failing (exit 1, a clear message) on duplicate, decreasing and malformed IDs from a
tiny fake server. Fleets (issue 14): one run over three daemons while one is killed (kill -9) and
another restarted, with --tolerate-faults and --ids-out-v2 records checked per daemon and
connection; duplicates across two daemons given the same worker id; 503 as "refused"; a dead
target with and without --tolerate-faults and --min-ids. TLS (TLSPeers): https:// against nginx
(keep-alive, connection per request with full and resumed handshakes, TLS 1.2 and 1.3, a pinned
suite, mTLS), the memcached protocol against memcached -Z (and its required client certificate),
echo against a Python ssl server (messages larger than the TLS buffers), the ID layout read from
/metrics over TLS; wrong CA, wrong name, a plaintext port and a stalled handshake reported with
their reason and counted, never a crash. Certificates come from loadtest/benchlib.make_certs.
Run: SNOWFLAKED_BIN=... SFLOAD_BIN=... python3 -m unittest test_sfload (ctest does this)."""
import argparse
import http.server
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import struct
import sys
import tempfile
import threading
import time
import unittest

from sfharness import LoopbackServer, Server, free_port, send_json

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "loadtest"))
sys.path.insert(0, os.path.join(HERE, "..", "fault"))
import bench  # noqa: E402  (the peers as the tls section of make bench starts them)
from benchlib import make_certs  # noqa: E402
from faultutil import ensure_programs  # noqa: E402

SFLOAD = os.environ.get("SFLOAD_BIN", "")
SHIM = os.environ.get("SF_MALLOC_SHIM", "")  # test/integration/malloc_count.c (not with sanitizers)


def sfload(*args, timeout=60):
    """Runs sfload (every run is bounded by -n and -t) and returns the CompletedProcess."""
    return subprocess.run([SFLOAD, "-q", *args], capture_output=True, text=True,
                          timeout=timeout)


def sfload_json(test, *args):
    p = sfload("--json", *args)
    try:
        out = json.loads(p.stdout)
    except ValueError:
        test.fail("no JSON from sfload (exit %d):\n%s\n%s" % (p.returncode, p.stdout, p.stderr))
    return p, out


@unittest.skipUnless(SFLOAD, "SFLOAD_BIN not set")
class AgainstSnowflaked(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.mc_port, cls.echo_port = free_port(), free_port()
        cls.srv = Server("--set", "cache.memcached_port=%d" % cls.mc_port,
                         "--set", "echo.tcp_port=%d" % cls.echo_port)  # Server waits for both
        cls.url = "http://127.0.0.1:%d" % cls.srv.port

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def assert_clean(self, p, out):
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(out["passed"])
        self.assertEqual(out["failed"], 0)
        self.assertEqual(sum(out["errors"].values()), 0, out["errors"])

    def test_id_keep_alive_verified(self):
        p, out = sfload_json(self, "-c", "8", "-n", "5000", "-t", "5", "--verify-ids",
                             "--server-pid", str(self.srv.proc.pid), self.url + "/id")
        self.assert_clean(p, out)
        self.assertEqual(out["connection_model"], "keep-alive")
        self.assertEqual(out["requests"], 5000)
        self.assertEqual(out["succeeded"], 5000)
        v = out["verify"]
        self.assertTrue(v["passed"])
        self.assertEqual((v["ids"], v["duplicates"], v["non_increasing"], v["malformed"]),
                         (5000, 0, 0, 0))
        self.assertEqual(v["layout"], "41/5/5/12")
        self.assertEqual(v["layout_source"], "metrics")
        lat = out["latency_us"]
        self.assertEqual(lat["count"], 5000)
        self.assertTrue(0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"]
                        <= lat["p99_9"] <= lat["max"], lat)
        self.assertGreater(out["requests_per_sec"], 0)
        self.assertGreater(out["bytes_received"], 5000 * 27)
        self.assertGreater(out["server"]["cpu_us_per_request"], 0)

    def test_ids_pipelined_two_threads_verified(self):
        p, out = sfload_json(self, "-c", "4", "-T", "2", "-P", "8", "-n", "3000", "-t", "5",
                             "--verify-ids", self.url + "/ids?count=100")
        self.assert_clean(p, out)
        self.assertEqual(out["threads"], 2)
        self.assertEqual(out["connection_model"], "pipeline")
        self.assertEqual(out["requests"], 3000)
        self.assertEqual(out["verify"]["ids"], 300000)
        self.assertEqual(out["verify"]["duplicates"], 0)
        self.assertEqual(out["verify"]["non_increasing"], 0)

    def test_ids_out_writes_every_id(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ids.bin")
            p, out = sfload_json(self, "-c", "4", "-T", "2", "-n", "500", "-t", "5", "--ids-out",
                                 path, self.url + "/ids?count=20")
            self.assert_clean(p, out)
            with open(path, "rb") as f:
                data = f.read()
            ids = struct.unpack("<%dQ" % (len(data) // 8), data)
            self.assertEqual(len(ids), 10000)
            self.assertEqual(len(set(ids)), 10000)
            self.assertTrue(all(0 < i < (1 << 63) for i in ids))

    def test_sequence_numbers_verified(self):
        # /seq/{name} and /seqs/{name} (segment mode) are ID routes: unique, increasing per
        # connection (a block large enough that a closed loop never empties both: no 503)
        srv = Server("--set", 'sequences.namespaces=[{"name": "orders", "block": 100000}]')
        try:
            url = "http://127.0.0.1:%d" % srv.port
            p, out = sfload_json(self, "-c", "4", "-n", "400", "-t", "5", "--verify-ids",
                                 url + "/seqs/orders?count=10")
            self.assert_clean(p, out)
            self.assertEqual((out["verify"]["ids"], out["verify"]["duplicates"]), (4000, 0))
            p, out = sfload_json(self, "-c", "2", "-n", "100", "-t", "5", "--verify-ids",
                                 url + "/seq/orders")
            self.assert_clean(p, out)
            self.assertEqual(out["verify"]["ids"], 100)
        finally:
            srv.stop()

    def test_text_and_hex_ids_round_robin(self):
        # One connection: its round-robin over the four paths is exact.
        p, out = sfload_json(self, "-c", "1", "-n", "2000", "-t", "5", "--verify-ids",
                             "-p", "/id?format=text", "-p", "/ids?count=7&format=text",
                             "-p", "/id?encoding=hex", "-p", "/healthz", self.url)
        self.assert_clean(p, out)
        # /healthz is requested but carries no IDs: 500 * (1 + 7 + 1).
        self.assertEqual(out["verify"]["ids"], 4500)

    def test_unsupported_encoding_refused(self):
        p = sfload("-n", "10", "-t", "5", "--verify-ids", self.url + "/id?encoding=base62")
        self.assertEqual(p.returncode, 2)
        self.assertIn("decimal and hex IDs only", p.stderr)

    def test_webbench_connection_per_request(self):
        p = sfload("--webbench", "-c", "4", "-n", "2000", "-t", "5", self.url + "/id")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"\nBenchmarking: GET http://127\.0\.0\.1:\d+/id\n"
                                   r"4 clients, running 5 sec\.\n")
        self.assertRegex(p.stdout, r"\nSpeed=\d+ pages/min, \d+ bytes/sec\.\n"
                                   r"Requests: 2000 susceed, 0 failed\.\n$")
        # The same model reported as JSON: one connection per request.
        p, out = sfload_json(self, "--close", "-c", "4", "-n", "500", "-t", "5", "--verify-ids",
                             self.url + "/id")
        self.assert_clean(p, out)
        self.assertEqual(out["connection_model"], "close")
        self.assertGreaterEqual(out["connects"], 500)
        self.assertEqual(out["verify"]["ids"], 500)

    def test_open_loop_rate(self):
        p, out = sfload_json(self, "-c", "4", "-R", "2000", "-t", "1", "--warmup", "0.2",
                             self.url + "/id")
        self.assert_clean(p, out)
        self.assertTrue(out["open_loop"])
        self.assertTrue(1800 <= out["requests"] <= 2000, out["requests"])

    def test_status_classes_are_errors(self):
        p, out = sfload_json(self, "-c", "2", "-n", "100", "-t", "5", self.url + "/nope")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(out["errors"]["status_4xx"], 100)
        self.assertFalse(out["passed"])

    def test_memcache(self):
        p, out = sfload_json(self, "--mode", "memcache", "-c", "4", "-P", "4", "-n", "4000",
                             "-t", "5", "--mc-ratio", "50:50", "--keys", "100",
                             "--value-size", "300", "127.0.0.1:%d" % self.mc_port)
        self.assert_clean(p, out)
        mc = out["memcache"]
        self.assertEqual(mc["gets"] + mc["sets"], 4000)
        self.assertGreater(mc["sets"], 1000)
        self.assertGreater(mc["hits"], 0)

    def test_echo_tcp(self):
        p, out = sfload_json(self, "--mode", "echo", "-c", "4", "-P", "4", "--msg-size", "5000",
                             "-n", "4000", "-t", "5", "127.0.0.1:%d" % self.echo_port)
        self.assert_clean(p, out)
        self.assertEqual(out["succeeded"], 4000)
        self.assertEqual(out["bytes_received"], 4000 * 5000)

    def test_refusals(self):
        self.assertEqual(sfload(self.url + "/id").returncode, 2)  # unbounded
        p = sfload("-t", "1", "http://192.0.2.1:80/id")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--allow-remote", p.stderr)
        self.assertEqual(sfload("-t", "3601", self.url).returncode, 2)


class EchoHandler(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            while True:
                data = self.request.recv(65536)
                if not data:
                    return
                self.request.sendall(data)
        except OSError:
            pass


class FakeIds(http.server.BaseHTTPRequestHandler):
    """/id?fake=dup: always {"id":"1"}; fake=down: decreasing IDs; fake=bad: not an ID;
    fake=busy: 503 (a fenced daemon)."""
    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    next_down = 10 ** 12

    def do_GET(self):
        if self.path.startswith("/id?fake=dup") or self.path.startswith("/seq/dup"):
            body = b'{"id":"1"}'
        elif self.path.startswith("/id?fake=down"):
            with FakeIds.lock:
                FakeIds.next_down -= 1
                body = b'{"id":"%d"}' % FakeIds.next_down
        elif self.path.startswith("/id?fake=bad"):
            body = b'{"id":"x1"}'
        elif self.path.startswith("/id?fake=busy"):
            send_json(self, 503, b'{"error":"fenced"}', [("Retry-After", "1")])
            return
        else:
            self.send_error(404)
            return
        send_json(self, 200, body)

    def log_message(self, *args):
        pass


@unittest.skipUnless(SFLOAD, "SFLOAD_BIN not set")
class NamedLayouts(unittest.TestCase):
    """--verify-ids against daemons with the js53 layout (53 bits, widths summing to less than 63)
    and the sonyflake layout (sequence above the node); the layout comes from /metrics or
    --id-layout, and examples decode in that layout."""

    def run_verified(self, srv, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ids.bin")
            p, out = sfload_json(self, "-c", "2", "-n", "60", "-t", "10", "--ids-out", path,
                                 *args, "http://127.0.0.1:%d/ids?count=100" % srv.port)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn("assuming 41/5/5/12", p.stderr)
            v = out["verify"]
            self.assertTrue(v["passed"], v)
            self.assertEqual((v["ids"], v["distinct_ids"], v["duplicates"], v["non_increasing"],
                              v["malformed"]), (6000, 6000, 0, 0, 0))
            with open(path, "rb") as f:
                data = f.read()
            return v, struct.unpack("<%dQ" % (len(data) // 8), data)

    def test_js53(self):
        srv = Server("--set", "snowflake.layout=js53", "--set", "snowflake.worker_id=21")
        try:
            v, ids = self.run_verified(srv)
            self.assertEqual((v["layout"], v["layout_source"]), ("38/0/5/10", "metrics"))
            self.assertEqual(len(set(ids)), 6000)
            self.assertTrue(all(0 < i < 2**53 and (i >> 10) & 31 == 21 for i in ids))
            v, _ = self.run_verified(srv, "--id-layout", "js53")
            self.assertEqual((v["layout"], v["layout_source"]), ("38/0/5/10", "option"))
        finally:
            srv.stop()

    def test_sonyflake(self):
        srv = Server("--set", "snowflake.layout=sonyflake", "--set",
                     "snowflake.datacenter_id=192", "--set", "snowflake.worker_id=168")
        try:
            v, ids = self.run_verified(srv)
            self.assertEqual((v["layout"], v["layout_source"]),
                             ("39/8/8/8,node_bits_low", "metrics"))
            self.assertEqual(len(set(ids)), 6000)
            self.assertTrue(all(i & 0xffff == 192 << 8 | 168 for i in ids))
            v, _ = self.run_verified(srv, "--id-layout", "sonyflake")
            self.assertEqual((v["layout"], v["layout_source"]),
                             ("39/8/8/8,node_bits_low", "option"))
        finally:
            srv.stop()


@unittest.skipUnless(SFLOAD, "SFLOAD_BIN not set")
class AgainstFakes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.servers = [LoopbackServer(FakeIds), LoopbackServer(EchoHandler)]
        cls.http_port, cls.echo_port = (s.port for s in cls.servers)

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.stop()

    def run_fake(self, path, *extra):
        return sfload("-c", "2", "-n", "50", "-t", "5", "--verify-ids", "--id-layout",
                      "41/5/5/12", *extra, "http://127.0.0.1:%d%s" % (self.http_port, path))

    def test_duplicates_fail(self):
        p = self.run_fake("/id?fake=dup")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("ID verification FAILED: 49 duplicates", p.stderr)
        self.assertRegex(p.stderr, r"duplicate on thread 0 connection \d: 1 \(timestamp 0, "
                                   r"dc 0, worker 0, seq 1\)")
        self.assertIn("result       FAIL", p.stdout)

    def test_sequence_duplicates_fail(self):
        p = self.run_fake("/seq/dup")  # a sequence route is verified like /id
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("ID verification FAILED: 49 duplicates", p.stderr)
        p = self.run_fake("/seq/dup/x")  # not a sequence route: nothing to verify
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("needs an ID route", p.stderr)

    def test_duplicates_across_threads_fail(self):
        p = sfload("--json", "-c", "2", "-T", "2", "-n", "2", "-t", "5", "--verify-ids",
                   "http://127.0.0.1:%d/id?fake=dup" % self.http_port)
        self.assertEqual(p.returncode, 1, p.stderr)
        out = json.loads(p.stdout)
        self.assertEqual(out["verify"]["duplicates"], 1)
        self.assertEqual(out["verify"]["layout_source"], "default")  # no /metrics here
        self.assertIn("duplicate across load threads", p.stderr)
        self.assertIn("assuming 41/5/5/12", p.stderr)

    def test_decreasing_fails(self):
        p = self.run_fake("/id?fake=down")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertRegex(p.stderr, r"FAILED: 0 duplicates, (4[89]) not increasing")

    def test_malformed_fails(self):
        p = self.run_fake("/id?fake=bad")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("50 malformed", p.stderr)
        self.assertIn('JSON "id" is not a valid ID', p.stderr)

    def test_503_is_refused_with_tolerate_faults(self):
        url = "http://127.0.0.1:%d/id?fake=busy" % self.http_port
        # Default: a 503 is a failed request.
        p, out = sfload_json(self, "-c", "2", "-n", "20", "-t", "5", url)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual((out["errors"]["status_5xx"], out["refused"]), (20, 0))
        # --tolerate-faults: refused, counted per target, and each connection backs off
        # (50, 100, 200, 400, 500 ms...), so 1 s holds at most 6 requests per connection.
        p, out = sfload_json(self, "-c", "2", "-t", "1", "--tolerate-faults", url)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(out["passed"])
        self.assertEqual(out["errors"]["status_5xx"], 0)
        self.assertEqual(out["failed"], 0)
        self.assertGreaterEqual(out["refused"], 2)
        self.assertLessEqual(out["refused"], 2 * 6)
        self.assertEqual(out["targets"][0]["status_503"], out["refused"])
        self.assertEqual(out["targets"][0]["ok"], 0)
        # ... and with --min-ids the run fails: no IDs came.
        p, out = sfload_json(self, "-c", "2", "-t", "0.5", "--tolerate-faults", "--min-ids", "1",
                             url)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("fewer than --min-ids 1", p.stderr)

    def test_echo(self):
        p, out = sfload_json(self, "--mode", "echo", "-c", "3", "-P", "4", "--msg-size", "3000",
                             "-n", "3000", "-t", "5", "127.0.0.1:%d" % self.echo_port)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(out["succeeded"], 3000)
        self.assertEqual(out["bytes_received"], 3000 * 3000)


def read_records(path):
    """--ids-out-v2: (id, target, ms, conn, fresh) per 16-byte record, in file order."""
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) % 16 == 0, len(data)
    out = []
    for off in range(0, len(data), 16):
        i, target, ms, conn = struct.unpack_from("<QHIH", data, off)
        out.append((i, target, ms, conn & 0x7FFF, bool(conn & 0x8000)))
    return out


def worker_of(i):
    return (i >> 12) & 31  # 41/5/5/12


@unittest.skipUnless(SFLOAD, "SFLOAD_BIN not set")
class Fleet(unittest.TestCase):
    """One sfload over several daemons (the etcd scenarios of issue 14 build on this)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_fleet_")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.discard()
        self.tmp.cleanup()

    def start(self, worker, port=None, data_dir=None):
        s = Server("--set", "snowflake.worker_id=%d" % worker, threads=1, port=port,
                   data_dir=data_dir)
        self.servers.append(s)
        return s

    def stop(self, s):
        """SIGTERM; the daemon must exit 0."""
        s.proc.terminate()
        self.assertEqual(s.proc.wait(timeout=15), 0, s.output())

    def test_kill_and_restart_under_load(self):
        dirs = [os.path.join(self.tmp.name, "d%d" % k) for k in range(3)]
        workers = [7, 8, 9]
        a, b, c = (self.start(w, data_dir=d) for w, d in zip(workers, dirs))
        rec = os.path.join(self.tmp.name, "ids.v2")
        urls = ["http://127.0.0.1:%d/ids?count=5" % s.port for s in (a, b, c)]
        t_start = time.monotonic()
        p = subprocess.Popen([SFLOAD, "-q", "--json", "-c", "6", "-R", "2000", "-t", "4",
                              "--timeout", "1000", "--tolerate-faults", "--verify-ids",
                              "--min-ids", "1000", "--ids-out-v2", rec, *urls],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(1.0)
            a.proc.kill()  # kill -9 under load
            a.proc.wait(timeout=10)
            t_killed = time.monotonic()
            time.sleep(0.3)
            self.stop(b)  # a clean restart of another, same port and data dir
            time.sleep(0.7)
            b2 = self.start(workers[1], port=b.port, data_dir=dirs[1])
            stdout, stderr = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0, stderr)
        out = json.loads(stdout)
        v = out["verify"]
        self.assertTrue(out["passed"] and v["passed"], v)
        self.assertEqual((v["duplicates"], v["non_increasing"], v["malformed"]), (0, 0, 0))
        self.assertGreaterEqual(v["ids"], 1000)
        # Per-target counts add up and tell what happened to each daemon.
        t = out["targets"]
        self.assertEqual([x["target"] for x in t], urls)
        self.assertEqual(sum(x["requests"] for x in t), out["requests"])
        self.assertEqual(sum(x["ids"] for x in t), v["ids"])
        self.assertTrue(all(x["ids"] > 0 and x["errors"] == 0 for x in t), t)
        self.assertGreater(t[0]["faults"], 0, t)  # killed: reset, then refused
        self.assertGreater(t[1]["faults"], 0, t)  # restarted: refused while down
        self.assertEqual(t[2]["faults"], 0, t)    # untouched
        self.assertEqual(t[2]["ok"], t[2]["requests"])
        self.assertGreater(out["faults"]["connect"], 0)
        self.assertEqual(sum(out["errors"].values()), 0, out["errors"])
        # The records: one per ID, each from the daemon its target names.
        recs = read_records(rec)
        self.assertEqual(len(recs), v["ids"])
        self.assertEqual(len({r[0] for r in recs}), len(recs))
        for k in range(3):
            mine = [r for r in recs if r[1] == k]
            self.assertEqual(len(mine), t[k]["ids"])
            self.assertTrue(all(worker_of(r[0]) == workers[k] for r in mine))
        self.assertTrue(all(r[1] == r[3] % 3 for r in recs))  # connection i -> target i % 3
        # Per connection, in receive order: IDs strictly increase within each TCP connection (a
        # fresh bit starts the next), receive times never go back.
        by_conn = {}
        for r in recs:
            by_conn.setdefault(r[3], []).append(r)
        self.assertEqual(sorted(by_conn), list(range(6)))
        for conn, rs in by_conn.items():
            self.assertTrue(rs[0][4], "first record of connection %d is not fresh" % conn)
            for prev, cur in zip(rs, rs[1:]):
                self.assertLessEqual(prev[2], cur[2])
                if not cur[4]:
                    self.assertLess(prev[0], cur[0], (conn, prev, cur))
        # Nothing from the killed daemon after the kill (sfload's clock starts after t_start).
        bound_ms = (t_killed - t_start) * 1000
        self.assertLessEqual(max(r[2] for r in recs if r[1] == 0), bound_ms)
        # The restarted daemon: a gap in its receive times (it was down >= 0.7 s), and every ID
        # after the gap is above every ID before it (a restart never goes back).
        rb = sorted((r for r in recs if r[1] == 1), key=lambda r: r[2])
        gap, at = max((cur[2] - prev[2], k + 1) for k, (prev, cur) in enumerate(zip(rb, rb[1:])))
        self.assertGreaterEqual(gap, 500, "no downtime seen in the restarted daemon's records")
        self.assertTrue(rb[at:], "no IDs from the restarted daemon")
        self.assertLess(max(r[0] for r in rb[:at]), min(r[0] for r in rb[at:]))
        print("FIGURE fleet: %d IDs, per target ids/faults %s, faults %s, restart gap %d ms"
              % (v["ids"], [(x["ids"], x["faults"]) for x in t], out["faults"], gap))
        for s in (c, b2):
            self.stop(s)

    def test_frozen_daemon_times_out_and_resumes(self):
        a, b = self.start(11), self.start(12)
        urls = ["http://127.0.0.1:%d/ids?count=5" % s.port for s in (a, b)]
        p = subprocess.Popen([SFLOAD, "-q", "--json", "-c", "2", "-R", "400", "-t", "3",
                              "--timeout", "300", "--tolerate-faults", "--verify-ids", *urls],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.8)
            a.proc.send_signal(signal.SIGSTOP)
            time.sleep(1.0)
            a.proc.send_signal(signal.SIGCONT)
            stdout, stderr = p.communicate(timeout=60)
        finally:
            a.proc.send_signal(signal.SIGCONT)
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0, stderr)
        out = json.loads(stdout)
        t = out["targets"]
        self.assertGreater(out["faults"]["timeout"], 0, out["faults"])
        self.assertGreater(t[0]["faults"], 0, t)
        self.assertEqual(t[1]["faults"], 0, t)
        self.assertEqual(out["errors"]["timeout"], 0)
        self.assertEqual(out["verify"]["duplicates"], 0)
        # Resumed after SIGCONT: every request of the frozen daemon's connection was answered
        # in the end (those due while frozen were sent again, late).
        self.assertGreater(t[0]["ids"], 0)
        self.assertEqual(t[0]["ok"], t[0]["requests"])
        for s in (a, b):
            self.stop(s)

    def test_same_worker_id_duplicates_are_found(self):
        # Two daemons with one identity can no longer run on one host (cluster/hostclaim.h), so
        # b packs the same bits under another layout: worker 10 of 41/5/6/11 is worker 5 of
        # 41/5/5/12 with the sequence's top bit, 0 below 2048 (an ID space the claim cannot tell
        # apart: the layouts differ). datacenter 0 pinned: the message names it.
        dc0 = {"SNOWFLAKED_SNOWFLAKE_DATACENTER_ID": "0"}
        a = Server("--set", "snowflake.worker_id=5", threads=1, env=dc0)
        self.servers.append(a)
        b = Server("--set", "snowflake.worker_id=10", "--set", "snowflake.worker_bits=6",
                   "--set", "snowflake.sequence_bits=11", threads=1, env=dc0)
        self.servers.append(b)
        p, out = sfload_json(self, "-c", "2", "-n", "4000", "-t", "5", "--tolerate-faults",
                             "--verify-ids", "http://127.0.0.1:%d/ids?count=50" % a.port,
                             "http://127.0.0.1:%d/ids?count=50" % b.port)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertFalse(out["passed"])
        self.assertGreater(out["verify"]["duplicates"], 0)
        self.assertEqual(out["verify"]["non_increasing"], 0)
        self.assertTrue(all(x["ids"] > 0 for x in out["targets"]), out["targets"])
        self.assertIn("ID verification FAILED", p.stderr)
        self.assertRegex(p.stderr, r"duplicate on thread 0 connection \d: \d+ \(timestamp \d+, "
                                   r"dc 0, worker 5, seq \d+\)")
        for s in (a, b):
            self.stop(s)

    def test_dead_target(self):
        live = self.start(3)
        dead = "http://127.0.0.1:%d/id" % free_port()
        url = "http://127.0.0.1:%d/id" % live.port
        # Default behaviour: connect errors fail the run.
        p, out = sfload_json(self, "-c", "2", "-t", "0.5", "--verify-ids", url, dead)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertGreater(out["errors"]["connect"], 0)
        self.assertGreater(out["targets"][1]["errors"], 0)
        # --tolerate-faults: the dead target's connection retries with backoff (50..500 ms: at
        # most 5 connects in 1 s), the live one carries on; exit 0.
        p, out = sfload_json(self, "-c", "2", "-t", "1", "--tolerate-faults", "--verify-ids",
                             "--min-ids", "10", url, dead)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(out["errors"]["connect"], 0)
        self.assertTrue(1 <= out["faults"]["connect"] <= 6, out["faults"])
        self.assertEqual(out["targets"][1]["faults"], out["faults"]["connect"])
        self.assertEqual(out["targets"][1]["ids"], 0)
        self.assertGreater(out["targets"][0]["ids"], 10)
        self.stop(live)



class TLSEchoServer(LoopbackServer):
    """EchoHandler over TLS (Python's ssl), the handshake in the connection's thread."""

    def __init__(self, certs):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(certs["server.pem"], certs["server.key"])
        super().__init__(EchoHandler)

    def get_request(self):
        sock, addr = super().get_request()
        return self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


class PlainAnswer(socketserver.BaseRequestHandler):
    """A plaintext HTTP server that answers at once, whatever comes (a ClientHello too)."""

    def handle(self):
        try:
            self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        except OSError:
            pass


@unittest.skipUnless(SFLOAD, "SFLOAD_BIN not set")
class TLSPeers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = ensure_programs({"nginx": "nginx", "memcached": "memcached",
                                  "openssl": "openssl"})
        if reason:
            raise unittest.SkipTest(reason)
        cls.dir = tempfile.mkdtemp(prefix="sf_tls_")
        cls.certs = c = make_certs(os.path.join(cls.dir, "certs"))
        args = argparse.Namespace(build=os.path.dirname(SFLOAD), time=1, repeat=1, quick=True,
                                  knee_p99_ms=10.0)
        cls.b = bench.Bench(args)
        cls.mtls_port = free_port()
        extra = """
    server {
        listen 127.0.0.1:%d ssl;
        ssl_verify_client on;
        ssl_client_certificate %s;
        location / { default_type application/json; return 200 '{"id":"1"}'; }
    }""" % (cls.mtls_port, c["ca.pem"])
        try:
            cls.nginx = cls.b.nginx_tls(c, cpu=None, protocols="TLSv1.2 TLSv1.3", extra=extra)
            cls.mc = cls.b.memcached_tls(c, cpu=None)
            cls.mc_mtls = cls.b.memcached_tls(c, cpu=None, ssl_opts=[
                "ssl_verify_mode=2", "ssl_ca_cert=" + c["ca.pem"]])
        except BaseException:
            cls.tearDownClass()
            raise
        cls.https = "https://localhost:%d" % cls.nginx["https"]
        cls.fakes = [TLSEchoServer(c), LoopbackServer(PlainAnswer)]
        cls.echo_port, cls.plain_port = (f.port for f in cls.fakes)
        cls.stall = socket.socket()  # listens, never accepts, never answers
        cls.stall.bind(("127.0.0.1", 0))
        cls.stall.listen(16)

    @classmethod
    def tearDownClass(cls):
        cls.b.stop_all()
        for f in getattr(cls, "fakes", []):
            f.stop()
        if getattr(cls, "stall", None):
            cls.stall.close()
        shutil.rmtree(cls.b.work, ignore_errors=True)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def ca(self, *extra):
        return ["--cacert", self.certs["ca.pem"], *extra]

    def assert_clean(self, p, out, handshakes=None):
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(out["passed"])
        self.assertEqual(sum(out["errors"].values()), 0, out["errors"])
        t = out["tls"]
        self.assertEqual(t["failures"], 0, t)
        self.assertIsNone(t["first_failure"])
        self.assertTrue(t["verified"])
        if handshakes is not None:
            self.assertEqual(t["handshakes"], handshakes, t)

    def assert_failed(self, p, out, n, why):
        """-n n: every request failed with its connection's handshake, for reason why (a
        connection may reconnect once more with nothing to send while another finishes: failed
        connects count against -n, as without TLS)."""
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertFalse(out["passed"])
        self.assertGreaterEqual(out["errors"]["connect"], n, out["errors"])
        self.assertEqual(sum(out["errors"].values()), out["errors"]["connect"], out["errors"])
        self.assertEqual(out["succeeded"], 0)
        self.assertEqual(out["tls"]["handshakes"], 0)
        self.assertGreaterEqual(out["tls"]["failures"], n)
        self.assertIn(why, out["tls"]["first_failure"])
        self.assertIn("TLS handshakes failed", p.stderr)
        self.assertIn(why, p.stderr)

    def test_https_keep_alive_verified(self):
        p, out = sfload_json(self, *self.ca(), "-c", "4", "-n", "2000", "-t", "10",
                             "--server-pid", str(self.nginx["pid"]), self.https + "/id")
        self.assert_clean(p, out, handshakes=4)
        self.assertEqual(out["succeeded"], 2000)
        self.assertEqual(out["connects"], 4)
        t = out["tls"]
        self.assertEqual((t["version"], t["full"], t["resumed"]), ("TLSv1.3", 4, 0))
        self.assertFalse(t["resume"])
        self.assertIn("cpu_us_per_handshake", out["server"])
        # By address: the certificate names 127.0.0.1 too (checked as an IP, no SNI).
        p, out = sfload_json(self, *self.ca(), "-c", "2", "-n", "100", "-t", "10",
                             "https://127.0.0.1:%d/id" % self.nginx["https"])
        self.assert_clean(p, out, handshakes=2)
        # The text report says what was negotiated and verified.
        p = sfload(*self.ca(), "-c", "2", "-n", "100", "-t", "10", self.https + "/id")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"\n  tls          TLSv1\.3 TLS_\w+, server verified, no "
                                   r"resumption; handshakes 2 full, 0 resumed, 0 failed\n")

    def test_connection_per_request_full_and_resumed(self):
        p, out = sfload_json(self, *self.ca(), "--close", "-c", "2", "-n", "100", "-t", "10",
                             self.https + "/id")
        self.assert_clean(p, out, handshakes=100)
        self.assertEqual((out["tls"]["full"], out["tls"]["resumed"]), (100, 0))
        self.assertEqual(out["connects"], 100)
        # --tls-resume: each slot's first handshake is full, the others resume its ticket (two
        # load threads, each with its own TLS context).
        p, out = sfload_json(self, *self.ca(), "--close", "--tls-resume", "-c", "2", "-T", "2",
                             "-n", "100", "-t", "10", self.https + "/id")
        self.assert_clean(p, out, handshakes=100)
        self.assertEqual((out["tls"]["full"], out["tls"]["resumed"]), (2, 98))
        self.assertTrue(out["tls"]["resume"])
        # TLS 1.2 (session tickets there too), and a pinned TLS 1.3 suite.
        p, out = sfload_json(self, *self.ca(), "--close", "--tls-resume", "--tls-version", "1.2",
                             "-c", "2", "-n", "50", "-t", "10", self.https + "/id")
        self.assert_clean(p, out, handshakes=50)
        self.assertEqual(out["tls"]["version"], "TLSv1.2")
        self.assertEqual(out["tls"]["resumed"], 48)
        p, out = sfload_json(self, *self.ca(), "--tls-version", "1.3", "--ciphersuites",
                             "TLS_CHACHA20_POLY1305_SHA256", "-c", "1", "-n", "10", "-t", "10",
                             self.https + "/id")
        self.assert_clean(p, out, handshakes=1)
        self.assertEqual(out["tls"]["cipher"], "TLS_CHACHA20_POLY1305_SHA256")

    def test_wrong_ca_and_wrong_name_fail_clearly(self):
        p, out = sfload_json(self, "--cacert", self.certs["other-ca.pem"], "-c", "2", "-n", "20",
                             "-t", "10", self.https + "/id")
        self.assert_failed(p, out, 20, "certificate verify failed: unable to get local issuer "
                                       "certificate")
        p, out = sfload_json(self, *self.ca(), "--sni", "wrong.example", "-c", "2", "-n", "20",
                             "-t", "10", self.https + "/id")
        self.assert_failed(p, out, 20, "certificate verify failed: hostname mismatch (name "
                                       "wrong.example)")
        # --insecure: the same server is accepted, and the report says it was not verified.
        p, out = sfload_json(self, "--insecure", "--sni", "wrong.example", "-c", "2", "-n", "20",
                             "-t", "10", self.https + "/id")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(out["tls"]["verified"])
        # Neither given: refused before any connection.
        p = sfload("-n", "1", "-t", "5", self.https + "/id")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--cacert FILE", p.stderr)

    def test_plaintext_port_and_stalled_handshake(self):
        p, out = sfload_json(self, "--tls", "--insecure", "-c", "1", "-n", "5", "-t", "10",
                             "https://127.0.0.1:%d/id" % self.plain_port)
        self.assert_failed(p, out, 5, "is the server speaking TLS on this port?")
        port = self.stall.getsockname()[1]
        p, out = sfload_json(self, "--insecure", "--timeout", "300", "-c", "1", "-n", "2", "-t",
                             "10", "https://127.0.0.1:%d/id" % port)
        self.assert_failed(p, out, 2, "handshake timed out (--timeout 300 ms)")
        p, out = sfload_json(self, "--mode", "memcache", "--tls", "--insecure", "--timeout",
                             "300", "-c", "1", "-n", "1", "-t", "10", "127.0.0.1:%d" % port)
        self.assert_failed(p, out, 1, "handshake timed out")

    def test_mtls(self):
        url = "https://localhost:%d/id" % self.mtls_port
        cert = ["--cert", self.certs["client.pem"], "--key", self.certs["client.key"]]
        p, out = sfload_json(self, *self.ca(*cert), "-c", "2", "-n", "100", "-t", "10", url)
        self.assert_clean(p, out, handshakes=2)
        # nginx's ssl_verify_client answers a missing certificate at the HTTP level: 400.
        p, out = sfload_json(self, *self.ca(), "-c", "2", "-n", "20", "-t", "10", url)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(out["errors"]["status_4xx"], 20)
        # memcached's ssl_verify_mode=2 refuses the connection (TLS 1.3: after our side of the
        # handshake), which counts as a failed handshake.
        target = "localhost:%d" % self.mc_mtls["memcache_tls"]
        p, out = sfload_json(self, "--mode", "memcache", "--tls", *self.ca(*cert), "-c", "2",
                             "-n", "200", "-t", "10", target)
        self.assert_clean(p, out, handshakes=2)
        p, out = sfload_json(self, "--mode", "memcache", "--tls", *self.ca(), "-c", "1", "-n",
                             "3", "-t", "10", target)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertGreaterEqual(out["errors"]["connect"], 3, out["errors"])
        self.assertGreaterEqual(out["tls"]["failures"], 3)
        self.assertRegex(out["tls"]["first_failure"],
                         r"certificate required|closed by the server|reset by the server")

    def test_memcache_over_tls(self):
        p, out = sfload_json(self, "--mode", "memcache", "--tls", *self.ca(), "-c", "4", "-P",
                             "4", "-n", "4000", "-t", "10", "--mc-ratio", "50:50", "--keys",
                             "100", "--value-size", "300", "--server-pid", str(self.mc["pid"]),
                             "localhost:%d" % self.mc["memcache_tls"])
        self.assert_clean(p, out, handshakes=4)
        mc = out["memcache"]
        self.assertEqual(mc["gets"] + mc["sets"], 4000)
        self.assertGreater(mc["hits"], 0)
        self.assertIn("cpu_us_per_handshake", out["server"])

    def test_echo_over_tls(self):
        target = "localhost:%d" % self.echo_port
        p, out = sfload_json(self, "--mode", "echo", "--tls", *self.ca(), "-c", "3", "-P", "4",
                             "--msg-size", "3000", "-n", "3000", "-t", "10", target)
        self.assert_clean(p, out, handshakes=3)
        self.assertEqual(out["succeeded"], 3000)
        self.assertGreater(out["bytes_received"], 3000 * 3000)  # ciphertext: records add bytes
        # Messages of 100 kB: several TLS records each, more than the 16 KiB BIO pair holds,
        # pipelined two deep.
        p, out = sfload_json(self, "--mode", "echo", "--tls", *self.ca(), "-c", "2", "-P", "2",
                             "--msg-size", "100000", "-n", "200", "-t", "20", target)
        self.assert_clean(p, out, handshakes=2)
        self.assertEqual(out["succeeded"], 200)

    def mallocs(self, *args):
        """Allocation calls of a whole sfload run under the counting shim (test_alloc.py's)."""
        count = os.path.join(self.dir, "mallocs")
        p = subprocess.run([SFLOAD, "-q", *args], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, LD_PRELOAD=SHIM, SF_MALLOC_COUNT_FILE=count))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(count, "rb") as f:
            return struct.unpack("=Q", f.read(8))[0]

    def test_steady_state_allocations(self):
        """20,000 more requests on the same connections: sfload's own code allocates nothing per
        request, plaintext or TLS; OpenSSL 3.0's record layer allocates a 40-byte WPACKET
        sub-packet per record it builds or decrypts (2 records per request here: at most 4 calls,
        each served by glibc's per-thread cache)."""
        if not SHIM:
            self.skipTest("SF_MALLOC_SHIM not set (a sanitizer build)")
        mc = self.b.memcached(cpu=None)
        plain = ["--mode", "memcache", "-c", "4", "-t", "30", "127.0.0.1:%d" % mc["memcache"]]
        extra = self.mallocs("-n", "21000", *plain) - self.mallocs("-n", "1000", *plain)
        self.assertLessEqual(extra, 16, "plaintext: %d allocations for 20,000 requests" % extra)
        https = [*self.ca(), "-c", "4", "-t", "30", self.https + "/id"]
        extra = self.mallocs("-n", "21000", *https) - self.mallocs("-n", "1000", *https)
        self.assertLessEqual(extra, 4 * 20000 + 16, "TLS: %d allocations for 20,000 requests"
                             % extra)

    def test_layout_from_metrics_over_tls(self):
        p, out = sfload_json(self, *self.ca(), "--verify-ids", "-c", "1", "-n", "1", "-t", "10",
                             self.https + "/id")
        self.assert_clean(p, out)
        self.assertEqual(out["verify"]["layout_source"], "metrics")
        self.assertEqual(out["verify"]["ids"], 1)


if __name__ == "__main__":
    unittest.main()
