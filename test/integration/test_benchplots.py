"""loadtest/bench.py's h2load rows and open-loop knee, and loadtest/plots.py, against the real
daemon, the real h2load (nghttp2-client) and the real gnuplot (gnuplot-nox), briefly and on
loopback only: h2load --h1 keep-alive and pipelined runs parsed into req/s, latency and server
CPU per request; sfload closed- and open-loop points turned into a results.json; plots.py
drawing every figure from it (in process and as the command the README gives), the TLS rows'
figure with and without our figures (a build without TLS listeners), and saying clearly what is
missing when gnuplot is not there.
Run: SNOWFLAKED_BIN=... SFLOAD_BIN=... python3 -m unittest test_benchplots (ctest does this)."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
LOADTEST = os.path.join(HERE, "..", "..", "loadtest")
sys.path.insert(0, LOADTEST)
sys.path.insert(0, os.path.join(HERE, "..", "fault"))
import bench  # noqa: E402
import plots  # noqa: E402
from faultutil import ensure_programs  # noqa: E402

BUILD = os.path.dirname(os.environ.get("SFLOAD_BIN", ""))


class H2loadOutput(unittest.TestCase):
    def test_h2load_output_units(self):
        out = ("finished in 3.00s, 33631.00 req/s, 5.81MB/s\n"
               "requests: 67262 total, 67262 started, 67262 done, 67260 succeeded, 2 failed, "
               "1 errored, 0 timeout\n"
               "                     min         max         mean         sd        +/- sd\n"
               "time for request:      410us      8.23ms      1.49ms       743us    88.66%\n")
        fig = bench.parse_h2load(out)
        self.assertEqual(fig["rps"], 33631.0)
        self.assertEqual((fig["min_us"], fig["max_us"], fig["mean_us"], fig["sd_us"]),
                         (410.0, 8230.0, 1490.0, 743.0))
        self.assertEqual((fig["done"], fig["failed"]), (67262, 3))
        self.assertIsNone(bench.parse_h2load("connect: Connection refused\n"))


class OursTLS(unittest.TestCase):
    """The tls section's rows of ours: the daemon's TLS settings come from its schema (names,
    environment variables, the minimum version as its choices spell it); a build without the
    TLS listeners is skipped with the keys it lacks."""

    def setUp(self):
        args = argparse.Namespace(build=BUILD or ".", time=1, repeat=1, quick=True,
                                  knee_p99_ms=10.0)
        self.b = bench.Bench(args)
        self.addCleanup(shutil.rmtree, self.b.work, ignore_errors=True)
        self.certs = {"server.pem": "/c/server.pem", "server.key": "/c/server.key"}

    def test_env_from_schema(self):
        keys = [k for ks in bench.OURS_TLS_KEYS.values() for k in ks] + [
            "server.tls.min_version", "server.tls.ciphersuites", "server.tls.session_tickets"]
        schema = {k: {"key": k, "env": "SNOWFLAKED_" + k.upper().replace(".", "_")}
                  for k in keys}
        schema["server.tls.min_version"]["choices"] = ["TLSv1.2", "TLSv1.3"]
        started = {}

        def ours(cpu=0, env_extra=None, **kw):
            started["env"] = env_extra
            return {"proc": None, "pid": 1, "http": 1}
        with mock.patch.object(self.b, "schema", return_value=schema), \
                mock.patch.object(self.b, "ours", side_effect=ours), \
                mock.patch.object(bench, "port_opens", return_value=True):
            srv = self.b.ours_tls(self.certs)
        env = started["env"]
        self.assertEqual(env["SNOWFLAKED_SERVER_TLS_MIN_VERSION"], "TLSv1.3")
        self.assertEqual(env["SNOWFLAKED_SERVER_TLS_CIPHERSUITES"], bench.TLS_SUITE)
        self.assertEqual(env["SNOWFLAKED_SERVER_TLS_SESSION_TICKETS"], "true")
        self.assertEqual(env["SNOWFLAKED_SERVER_TLS_CERT_FILE"], "/c/server.pem")
        self.assertEqual(env["SNOWFLAKED_CACHE_MEMCACHED_TLS_KEY_FILE"], "/c/server.key")
        self.assertEqual(srv["https"], int(env["SNOWFLAKED_SERVER_TLS_PORT"]))
        self.assertEqual(srv["memcache_tls"], int(env["SNOWFLAKED_CACHE_MEMCACHED_TLS_PORT"]))

    @unittest.skipUnless(BUILD, "SFLOAD_BIN not set")
    def test_schema_of_the_real_daemon(self):
        schema = self.b.schema()  # snowflaked --print-schema of the build under test
        self.assertEqual(schema["server.port"]["env"], "SNOWFLAKED_SERVER_PORT")
        self.assertEqual(schema["cache.memcached_port"]["env"], "SNOWFLAKED_CACHE_MEMCACHED_PORT")

    def test_build_without_tls_is_skipped(self):
        with mock.patch.object(self.b, "schema", return_value={"server.port": {}}):
            self.assertIsNone(self.b.ours_tls(self.certs))
        self.assertIn("does not know server.tls.port", self.b.ours_tls_missing)
        self.assertIn("cache.memcached_tls.key_file", self.b.ours_tls_missing)


class BenchPlots(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = ensure_programs({"h2load": "nghttp2-client", "gnuplot": "gnuplot-nox"})
        if reason:
            raise unittest.SkipTest(reason)

    def setUp(self):
        args = argparse.Namespace(build=BUILD, time=1, repeat=1, quick=True, knee_p99_ms=10.0)
        self.b = bench.Bench(args)
        self.addCleanup(shutil.rmtree, self.b.work, ignore_errors=True)
        self.addCleanup(self.b.stop_all)
        self.srv = self.b.ours(cpu=None)  # no pinning: the test may run beside other suites
        self.url = "http://127.0.0.1:%d/id" % self.srv["http"]

    def test_h2load_keep_alive_and_pipelined(self):
        for args in (["-c", "4"], ["-c", "4", "-m", "8"]):
            fig = self.b.h2load(self.srv, args, self.url, cpu=None)
            self.assertGreater(fig["rps"], 100, args)
            self.assertGreater(fig["mean_us"], 0, args)
            self.assertGreaterEqual(fig["max_us"], fig["mean_us"], args)
            self.assertGreaterEqual(fig["mean_us"], fig["min_us"], args)
            self.assertGreater(fig["cpu_us"], 0, args)  # the daemon's own CPU, from /proc
        self.assertIn("--h1", " ".join(self.b.commands))

    def test_open_loop_knee_and_every_plot(self):
        sweep = {"workload": "HTTP GET /id keep-alive", "peer": "itself", "points": []}
        for conns in (1, 4):
            rep = self.b.load(self.srv, ["-c", str(conns)], self.url, cpu=None, seconds=0.5,
                              warmup=0)
            for who in ("ours", "peer"):  # the same server twice stands in for a peer
                sweep["points"].append(dict(bench.point(rep), server=who, connections=conns))
        # Open loop at rates a loaded 2-core machine serves easily; the bound is loose (1 s)
        # so that the knee is the highest step, and a fake step beyond it shows the cut.
        steps = []
        for rate in (200, 400):
            rep = self.b.load(self.srv, ["-c", "4", "-R", str(rate)], self.url, cpu=None,
                              seconds=1, warmup=0)
            pt = bench.point(rep)
            pt.update(offered=rate, achieved=pt.pop("rps"))
            self.assertGreaterEqual(pt["achieved"], 0.95 * rate, pt)
            steps.append(pt)
        self.assertEqual(bench.knee_of(steps, 1e6), (400, False))
        overloaded = dict(steps[-1], offered=800, achieved=500.0)
        self.assertEqual(bench.knee_of(steps + [overloaded], 1e6), (400, True))
        self.assertEqual(bench.knee_of(steps, 0.001), (None, True))  # no step under 1 ns
        stalled = dict(steps[0], p99=2e6)  # a stall at the lowest rate hides no higher step
        self.assertEqual(bench.knee_of([stalled, steps[1], overloaded], 1e6), (400, True))

        servers = {who: {"points": steps + [overloaded], "knee": 400, "knee_reached": True}
                   for who in ("ours", "peer")}
        figures = {"rps": sweep["points"][0]["rps"], "p99": sweep["points"][0]["p99"],
                   "cpu_us": sweep["points"][0]["cpu_us"]}
        results = {"sweep": [sweep],
                   "peers": [{"name": "GET /id -c 1", "peer": "itself", "ours": figures,
                              "peer_figures": figures}],
                   "openloop": [{"workload": "HTTP GET /id keep-alive", "peer": "itself",
                                 "connections": 4, "p99_bound_us": 1e6, "servers": servers}],
                   # the tls section: a row with ours, and one from a build without TLS
                   "tls": [{"name": "GET /id keep-alive -c 50", "peer": "nginx", "per": "request",
                            "ours": figures, "peer_figures": figures, "handshakes": {}},
                           {"name": "GET /id conn-per-request, full handshake -c 50",
                            "peer": "nginx", "per": "connection", "ours": None,
                            "peer_figures": dict(figures, cpu_us=500.0), "handshakes": {}}]}
        expected = ["concurrency-throughput.svg", "concurrency-latency.svg", "peers.svg",
                    "openloop.svg", "tls.svg"]
        with tempfile.TemporaryDirectory() as out:
            self.assertEqual(plots.render(results, out), expected)
            for image in expected:
                root = ET.parse(os.path.join(out, image)).getroot()  # well-formed SVG
                self.assertTrue(root.tag.endswith("svg"), image)
            with open(os.path.join(out, "openloop.svg")) as f:
                self.assertIn("knee ours 400/s, itself 400/s", f.read())
            with open(os.path.join(out, "openloop-http-get-id-keep-alive.dat")) as f:
                rows = [line.split() for line in f if not line.startswith("#")]
            self.assertEqual([r[1] for r in rows], ["200.000", "400.000", "800.000"] * 2)
            with open(os.path.join(out, "tls.dat")) as f:
                tls_rows = [line for line in f if not line.startswith("#")]
            self.assertEqual(len(tls_rows), 2)
            self.assertIn('"full handshake vs nginx (CPU per connection)" "nginx" NaN',
                          tls_rows[1].replace("conn-per-request, ", ""))  # ours: no figures

            # The command the README gives, on the saved results, into a second directory.
            saved = os.path.join(out, "results.json")
            with open(saved, "w") as f:
                json.dump(results, f)
            again = os.path.join(out, "again")
            r = subprocess.run([sys.executable, os.path.join(LOADTEST, "plots.py"), saved, again,
                                "--format", "png"], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), [os.path.join(again, i.replace(".svg", ".png"))
                                                for i in expected])
            with open(os.path.join(again, "peers.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

            # Without gnuplot on PATH: exit 1 and a message naming the package, no traceback.
            r = subprocess.run([sys.executable, os.path.join(LOADTEST, "plots.py"), saved,
                                os.path.join(out, "none")], capture_output=True, text=True,
                               timeout=60, env=dict(os.environ, PATH="/nonexistent"))
            self.assertEqual(r.returncode, 1)
            self.assertIn("gnuplot-nox", r.stderr)
            self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    unittest.main()
