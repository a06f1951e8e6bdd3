"""HTTP clients people load us with, as independent judges of the HTTP/1.1 layer (issue 15).

h2load --h1 (Debian nghttp2-client), wrk, ab (apache2-utils) and curl, each installed at test
time when missing, run short bounded loads against the real daemon: keep-alive and pipelined,
GET and POST with a body, ID routes and echo. Each client must report every request done and
2xx, and the daemon's own per-route counters must agree with the client's count, so neither
side can hide a lost or extra response. (webbench's connection-per-request pattern is sfload
--webbench in test_sfload.py.)
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fault"))

import faultutil  # noqa: E402
import sfharness  # noqa: E402
import tlscerts  # noqa: E402

CLIENTS = {"h2load": "nghttp2-client", "wrk": "wrk", "ab": "apache2-utils", "curl": "curl"}
# Node (fetch) comes with the npm judges (deploy/install-deps.sh); Debian's package if missing.
HTTPS_CLIENTS = {"h2load": "nghttp2-client", "wrk": "wrk", "node": "nodejs"}


def route_count(server, route, status="200"):
    text = sfharness.request(server, sfharness.get("/metrics")).body.decode()
    m = re.search(r'^snowflaked_http_requests_total\{route="%s",status="%s"\} (\d+)$'
                  % (re.escape(route), status), text, re.M)
    return int(m.group(1)) if m else 0


def run(argv, timeout=60):
    r = subprocess.run(argv, capture_output=True, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")


class Clients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.reason = faultutil.ensure_programs(CLIENTS)

    def setUp(self):
        if self.reason:
            self.fail(self.reason)  # CI is root: never a silent skip
        self.server = sfharness.Server()
        self.addCleanup(self.server.stop)
        self.base = "http://127.0.0.1:%d" % self.server.port

    def h2load(self, n, *args):
        rc, out = run(["h2load", "--h1", "-n", str(n), *args])
        self.assertEqual(rc, 0, out)
        m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                      r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
        self.assertIsNotNone(m, out)
        self.assertEqual([int(x) for x in m.groups()], [n, n, n, n, 0, 0, 0], out)
        self.assertRegex(out, r"status codes: %d 2xx, 0 3xx, 0 4xx, 0 5xx" % n)
        print("h2load --h1 -n %d %s: %s" % (n, " ".join(args),
                                            re.search(r"finished in .*", out).group(0)))
        return out

    def test_h2load_keep_alive(self):
        self.h2load(3000, "-c", "8", self.base + "/id")
        self.assertEqual(route_count(self.server, "/id"), 3000)

    def test_h2load_pipelined(self):
        # --h1 -m N: N requests in flight per connection, i.e. HTTP/1.1 pipelining
        out = self.h2load(4000, "-c", "4", "-m", "16", self.base + "/ids?count=4")
        self.assertEqual(route_count(self.server, "/ids"), 4000)
        # every response carried its four IDs (the body size of /ids?count=4 does not vary
        # much: 4 IDs of 18..19 digits), so no response was cut or doubled
        data = int(re.search(r"\) total, \S+ \((\d+)\) headers.*?, \S+ \((\d+)\) data",
                             out).group(2))
        self.assertTrue(4000 * 80 <= data <= 4000 * 100, data)

    def test_h2load_post_echo_body_round_trips(self):
        with tempfile.NamedTemporaryFile(prefix="sf_body_") as f:
            body = b"x" * 1000
            f.write(body)
            f.flush()
            out = self.h2load(1000, "-c", "2", "-m", "8", "-d", f.name, self.base + "/echo")
        data = int(re.search(r"\S+ \((\d+)\) data", out).group(1))
        self.assertEqual(data, 1000 * len(body))  # each response: exactly the body sent
        self.assertEqual(route_count(self.server, "/echo"), 1000)

    def test_wrk_keep_alive(self):
        rc, out = run(["wrk", "-t1", "-c8", "-d2s", "--latency", self.base + "/id"])
        self.assertEqual(rc, 0, out)
        self.assertNotIn("Non-2xx", out)
        self.assertNotIn("Socket errors", out)
        n = int(re.search(r"(\d+) requests in", out).group(1))
        self.assertGreater(n, 100, out)
        # wrk counts finished responses; connections it closed at the deadline may have had a
        # request in flight that we answered (at most one per connection)
        self.assertTrue(n <= route_count(self.server, "/id") <= n + 8, out)

    def test_ab_keep_alive_and_connection_per_request(self):
        for extra in (["-k"], []):
            before = route_count(self.server, "/id")
            rc, out = run(["ab", *extra, "-q", "-n", "2000", "-c", "10", self.base + "/id"])
            self.assertEqual(rc, 0, out)
            self.assertRegex(out, r"Complete requests:\s+2000")
            self.assertRegex(out, r"Failed requests:\s+0")
            self.assertNotRegex(out, r"Non-2xx responses")
            self.assertEqual(route_count(self.server, "/id") - before, 2000)

    def test_curl_reuses_the_connection(self):
        rc, out = run(["curl", "-sv", "--max-time", "10", self.base + "/id",
                       self.base + "/uuid", self.base + "/ulid"])
        self.assertEqual(rc, 0, out)
        self.assertEqual(out.count("HTTP/1.1 200"), 3, out)
        self.assertIn("Re-using existing connection", out)


class HttpsClients(unittest.TestCase):
    """The same load tools over the HTTPS listener (server.tls), and Node's fetch verifying the
    chain against a CA of the test's own (docs/tls.md)."""

    @classmethod
    def setUpClass(cls):
        cls.reason = faultutil.ensure_programs(HTTPS_CLIENTS)
        cls.certs = tlscerts.Certs()

    @classmethod
    def tearDownClass(cls):
        cls.certs.cleanup()

    def setUp(self):
        if self.reason:
            self.fail(self.reason)  # CI is root: never a silent skip
        self.tls_port = sfharness.free_port()
        self.server = sfharness.Server(
            "--set", "server.tls.port=%d" % self.tls_port,
            "--set", "server.tls.cert_file=" + self.certs.server,
            "--set", "server.tls.key_file=" + self.certs.server_key)
        self.addCleanup(self.server.stop)
        self.base = "https://127.0.0.1:%d" % self.tls_port

    def test_h2load_h1_over_tls(self):
        out = Clients.h2load(self, 2000, "-c", "4", "-m", "4", self.base + "/id")
        self.assertRegex(out, r"TLS Protocol: TLSv1\.3")
        self.assertRegex(out, r"Application protocol: http/1\.1")  # ALPN on the HTTPS port
        self.assertEqual(route_count(self.server, "/id"), 2000)

    def test_wrk_keep_alive_over_tls(self):
        rc, out = run(["wrk", "-t1", "-c4", "-d2s", self.base + "/id"])
        self.assertEqual(rc, 0, out)
        self.assertNotIn("Non-2xx", out)
        self.assertNotIn("Socket errors", out)
        n = int(re.search(r"(\d+) requests in", out).group(1))
        self.assertGreater(n, 100, out)
        self.assertTrue(n <= route_count(self.server, "/id") <= n + 4, out)

    def node_fetch(self, extra_ca):
        script = ("fetch(process.argv[1]).then(async r => console.log(r.status, await r.text()))"
                  ".catch(e => { console.log('ERR', e.cause ? e.cause.code : e.message); "
                  "process.exitCode = 3; })")
        env = dict(os.environ)
        env.pop("NODE_EXTRA_CA_CERTS", None)
        if extra_ca:
            env["NODE_EXTRA_CA_CERTS"] = extra_ca
        r = subprocess.run(["node", "-e", script, "https://localhost:%d/id" % self.tls_port],
                           capture_output=True, timeout=30, env=env)
        return r.returncode, r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")

    def test_node_fetch_with_a_custom_ca(self):
        rc, out = self.node_fetch(self.certs.ca)
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r'^200 \{"id":"\d+"\}')
        # and without the CA, Node refuses the chain: the 200 above was a verified one
        rc, out = self.node_fetch(None)
        self.assertEqual(rc, 3, out)
        self.assertIn("UNABLE_TO_VERIFY_LEAF_SIGNATURE", out)


if __name__ == "__main__":
    unittest.main()
