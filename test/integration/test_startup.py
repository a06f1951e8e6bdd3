"""What the daemon says at start, against the real binary: a fatal line quoting a hostile etcd's
error text, or a value read from it, reaches stderr escaped (no raw CR, LF or ESC, in text and
JSON log formats); a warning for an HTTP listener beyond loopback without a token and for a
memcached listener beyond loopback (it has no authentication); the shipped deploy configs keep
the memcached port's administrative and key-listing commands off."""
import base64
import http.server
import json
import os
import subprocess
import tempfile
import time
import unittest

from sfharness import BINARY, LoopbackServer, Server, free_port, send_json, set_args, wait_ready

# What a hostile or broken etcd puts in its error message: a line break that would forge a log
# line, and a terminal escape (red) that would reach the operator's terminal.
HOSTILE = "no leader\r\n2026-01-01T00:00:00.000Z INFO  all good\x1b[31m"


def b64(s):
    return base64.b64encode(s.encode()).decode()


class FakeEtcd(http.server.BaseHTTPRequestHandler):
    """Every call answers 503 with the gateway's streaming error shape and HOSTILE as message;
    with meta_value set, a txn answers that the fleet's meta key holds it instead."""
    meta_value = None

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.meta_value is not None and self.path == "/v3/kv/txn":
            header = {"cluster_id": "7", "member_id": "1", "revision": "3", "raft_term": "2"}
            kv = {"key": b64("/snowflaked/meta"), "value": b64(self.meta_value),
                  "create_revision": "2", "mod_revision": "2", "version": "1"}
            send_json(self, 200, {"header": header, "responses": [
                {"response_range": {"header": header, "kvs": [kv], "count": "1"}}]})
            return
        send_json(self, 503, {"error": {"grpc_code": 14, "http_code": 503, "message": HOSTILE,
                                        "http_status": "Service Unavailable"}})

    def log_message(self, *args):
        pass


def run(*args, env=None, timeout=30):
    """Runs the daemon to its exit; (exit code, stderr bytes)."""
    with tempfile.TemporaryDirectory(prefix="sf_start_") as d:
        full = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
        full.update({"SNOWFLAKED_DATA_DIR": os.path.join(d, "data"),
                     "SNOWFLAKED_SERVER_PORT": str(free_port()),
                     "SNOWFLAKED_SERVER_THREADS": "1"})
        full.update(env or {})
        p = subprocess.run([BINARY, *args], env=full, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stderr


class HostileEtcd(unittest.TestCase):
    handler = FakeEtcd

    @classmethod
    def setUpClass(cls):
        cls.httpd = LoopbackServer(cls.handler)
        cls.endpoint = "http://127.0.0.1:%d" % cls.httpd.port

    @classmethod
    def tearDownClass(cls):
        cls.httpd.stop()

    def refused(self, *extra):
        """The daemon started against the fake etcd: it must exit 1 with no raw CR or ESC on
        stderr; its stderr."""
        code, err = run("--worker-id", "etcd", "--set", "snowflake.etcd.endpoints=" +
                        self.endpoint, "--set", "snowflake.etcd.start_timeout_ms=300", *extra)
        self.assertEqual(code, 1, err)
        self.assertNotIn(b"\r", err)
        self.assertNotIn(b"\x1b", err)
        return err

    def fatal_line(self, err):
        """The one "snowflaked: " line of err."""
        fatal = [l for l in err.split(b"\n") if l.startswith(b"snowflaked: ")]
        self.assertEqual(len(fatal), 1, err)
        return fatal[0]

    def test_fatal_line_is_escaped(self):
        err = self.refused()
        # one line per event: the forged "INFO  all good" never starts a line of its own
        for line in err.split(b"\n"):
            self.assertFalse(line.startswith(b"2026-01-01T00:00:00.000Z"), err)
        fatal = self.fatal_line(err)
        self.assertIn(b"no leader\\r\\n2026-01-01T00:00:00.000Z INFO  all good\\x1b[31m", fatal)
        self.assertIn(b"not guessing a worker id", fatal)

    def test_json_log_stays_json(self):
        err = self.refused("--set", "log.format=json")
        lines = [json.loads(l) for l in err.decode().splitlines() if l]
        last = lines[-1]
        self.assertEqual(last["level"], "error")
        self.assertIn(HOSTILE, last["msg"])  # escaped on the wire, exact once parsed


class MetaFromEtcd(FakeEtcd):
    meta_value = "layout=other " + HOSTILE


class HostileEtcdValue(HostileEtcd):
    """The fleet's meta key read back from etcd is echoed in the refusal (another fleet's layout):
    a value, not an error text, and escaped all the same."""
    handler = MetaFromEtcd

    def test_fatal_line_is_escaped(self):
        self.assertIn(b"another fleet's layout (layout=other no leader\\r\\n2026-01-01",
                      self.fatal_line(self.refused()))

    def test_json_log_stays_json(self):
        last = json.loads(self.refused("--set", "log.format=json").decode().splitlines()[-1])
        self.assertIn(MetaFromEtcd.meta_value, last["msg"])


HTTP_WARNING = "is reachable beyond loopback without a token"
MEMCACHED_WARNING = "is reachable beyond loopback and has no authentication"


class ExposureWarnings(unittest.TestCase):
    def output_after_start(self, *sets):
        srv = Server(*set_args(*sets))
        try:
            wait_ready(srv)
            deadline = time.monotonic() + 5  # the logger thread writes within 100 ms
            while "listening on" not in srv.output() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)
            return srv.output()
        finally:
            srv.stop()

    def test_loopback_says_nothing(self):
        out = self.output_after_start("cache.memcached_port=%d" % free_port())
        self.assertNotIn(HTTP_WARNING, out)
        self.assertNotIn(MEMCACHED_WARNING, out)

    def test_http_beyond_loopback_without_a_token(self):
        out = self.output_after_start("server.host=0.0.0.0")
        self.assertRegex(out, r"WARN  HTTP on 0\.0\.0\.0:\d+ " + HTTP_WARNING)
        out = self.output_after_start("server.host=0.0.0.0", "auth.token=" + "t" * 16)
        self.assertNotIn(HTTP_WARNING, out)

    def test_memcached_beyond_loopback(self):
        port = free_port()
        out = self.output_after_start("cache.memcached_host=0.0.0.0",
                                      "cache.memcached_port=%d" % port)
        self.assertIn("WARN  memcached on 0.0.0.0:%d %s" % (port, MEMCACHED_WARNING), out)
        self.assertNotIn(HTTP_WARNING, out)


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHIPPED = ["deploy/container/config.json", "deploy/k8s/base/config.json",
           "deploy/k8s/overlays/etcd-deployment/config.json"]
ADMIN_KEYS = ["memcached_flush_all", "memcached_watch", "memcached_key_listing",
              "memcached_memlimit_command", "memcached_shutdown", "memcached_debug_commands"]


class ShippedConfigs(unittest.TestCase):
    """The image and the manifests open 0.0.0.0:11211, which has no authentication: every
    administrative and key-listing switch is off there (the embedded defaults stay memcached's)."""

    def effective(self, path):
        p = subprocess.run([BINARY, "-c", os.path.join(ROOT, path), "--check-config",
                            "--worker-id", "0"], capture_output=True, text=True, timeout=20,
                           env={k: v for k, v in os.environ.items()
                                if not k.startswith("SNOWFLAKED_")})
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)["cache"]

    def test_admin_commands_off(self):
        for path in SHIPPED:
            with self.subTest(path):
                cache = self.effective(path)
                self.assertEqual((cache["memcached_host"], cache["memcached_port"]),
                                 ("0.0.0.0", 11211))
                self.assertEqual({k: cache[k] for k in ADMIN_KEYS},
                                 {k: False for k in ADMIN_KEYS})

    def test_embedded_defaults_stay_memcached(self):
        p = subprocess.run([BINARY, "--check-config"], capture_output=True, text=True,
                           timeout=20, env={k: v for k, v in os.environ.items()
                                            if not k.startswith("SNOWFLAKED_")})
        cache = json.loads(p.stdout)["cache"]
        self.assertEqual({k: cache[k] for k in ADMIN_KEYS},
                         {"memcached_flush_all": True, "memcached_watch": True,
                          "memcached_key_listing": True, "memcached_memlimit_command": True,
                          "memcached_shutdown": False, "memcached_debug_commands": False})


if __name__ == "__main__":
    unittest.main()
