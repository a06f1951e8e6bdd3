"""Access control against the real binary: a bearer token (auth.token, SNOWFLAKED_AUTH_TOKEN or
auth.token_file) is required for cache writes, and with auth.protect_reads for every route but
health and readiness; 401 with WWW-Authenticate otherwise; the token never appears in logs."""
import os
import subprocess
import tempfile
import unittest

from sfharness import BINARY, Server, free_port, get, metric, request, wait_ready

TOKEN = "s3cret-Token_42"


def put(path, body, auth=None):
    extra = "Authorization: %s\r\n" % auth if auth else ""
    return (b"PUT %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n" %
            (path.encode(), extra.encode(), len(body))) + body


def bearer(token=TOKEN):
    return "Authorization: Bearer %s\r\n" % token


class WritesProtected(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--set", "auth.token=" + TOKEN, "--set", "log.access_log=true")
        wait_ready(cls.srv)  # test_reads_stay_open asks /readyz

    @classmethod
    def tearDownClass(cls):
        out = cls.srv.output()
        cls.srv.stop()
        assert TOKEN not in out, "the token was logged"

    def test_writes_need_the_token(self):
        r = request(self.srv, put("/cache/k", b"v"))
        self.assertEqual(r.status, 401)
        self.assertEqual(r.header("www-authenticate"), 'Bearer realm="snowflaked"')
        r = request(self.srv, put("/cache/k", b"v", "Bearer wrong"))
        self.assertEqual(r.status, 401)
        self.assertIn('error="invalid_token"', r.header("www-authenticate"))
        r = request(self.srv, put("/cache/k", b"v", "Bearer " + TOKEN[:-1]))  # a prefix
        self.assertEqual(r.status, 401)
        r = request(self.srv, put("/cache/k", b"v", "bearer   " + TOKEN))  # scheme is caseless
        self.assertIn(r.status, (201, 204))
        for raw in (b"DELETE /cache/k HTTP/1.1\r\nHost: t\r\n\r\n",
                    b"POST /cache/n/incr HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"):
            self.assertEqual(request(self.srv, raw).status, 401)
        self.assertGreaterEqual(metric(self.srv, "snowflaked_auth_failures_total"), 5)

    def test_reads_stay_open(self):
        request(self.srv, put("/cache/open", b"v", "Bearer " + TOKEN))
        self.assertEqual(request(self.srv, get("/cache/open")).status, 200)
        for path in ("/id", "/ids?count=3", "/healthz", "/readyz", "/metrics", "/echo?msg=x"):
            self.assertEqual(request(self.srv, get(path)).status, 200, path)


class ReadsProtected(unittest.TestCase):
    def test_protect_reads(self):
        srv = Server("--set", "auth.protect_reads=true", env={"SNOWFLAKED_AUTH_TOKEN": TOKEN})
        try:
            for path in ("/id", "/ids?count=3", "/id/914999261932814336", "/metrics",
                         "/cache/x", "/echo?msg=x"):
                self.assertEqual(request(srv, get(path)).status, 401, path)
                self.assertNotEqual(request(srv, get(path, bearer())).status, 401, path)
            for path in ("/healthz", "/readyz"):  # probes never need credentials
                self.assertEqual(request(srv, get(path)).status, 200, path)
        finally:
            srv.stop()


class TokenFile(unittest.TestCase):
    def test_token_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "token")
            with open(path, "w") as f:
                f.write(TOKEN + "\n")
            srv = Server("--set", "auth.token_file=" + path)
            try:
                self.assertEqual(request(srv, put("/cache/f", b"v")).status, 401)
                self.assertEqual(request(srv, put("/cache/f", b"v", "Bearer " + TOKEN)).status,
                                 201)
            finally:
                srv.stop()

    def test_unreadable_or_empty_token_file_refuses_to_start(self):
        with tempfile.TemporaryDirectory() as d:
            empty = os.path.join(d, "empty")
            open(empty, "w").close()
            for path, text in ((os.path.join(d, "missing"), "No such file"),
                               (empty, "first line must hold the token")):
                env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
                env["SNOWFLAKED_DATA_DIR"] = os.path.join(d, "data")
                env["SNOWFLAKED_SNOWFLAKE_DATACENTER_ID"] = "2"  # an identity of its own
                p = subprocess.run([BINARY, "--set", "auth.token_file=" + path, "-p",
                                    str(free_port())], env=env, capture_output=True, text=True,
                                   timeout=20)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn(text, p.stdout + p.stderr)

    def test_check_config_does_not_print_the_token(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
        p = subprocess.run([BINARY, "--check-config", "--set", "auth.token=" + TOKEN], env=env,
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(TOKEN, p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
