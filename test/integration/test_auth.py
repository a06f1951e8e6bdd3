"""Access control against the real binary: a bearer token (auth.token, SNOWFLAKED_AUTH_TOKEN or
auth.token_file) is required for cache writes, and with auth.protect_reads for every route but
health and readiness; 401 with WWW-Authenticate otherwise; the token never appears in logs."""
import os
import socket
import subprocess
import tempfile
import time
import unittest

from sfharness import (BINARY, Reader, Server, free_port, get, metric, request, rss_kib,
                       wait_ready)

TOKEN = "s3cret-Token_42-and-more"  # tokens under 16 bytes are refused


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


def put_head(path, length, extra=""):
    """The head of a PUT whose body of `length` bytes is not sent with it."""
    return ("PUT %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n"
            % (path, extra, length)).encode()


class AccessBeforeTheBody(unittest.TestCase):
    """Issue 21: the token is checked at the end of the headers. A refused write is answered
    before a byte of its body is read (never a 100 Continue first), with Connection: close, and
    its body is neither buffered nor taken for a request."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--set", "auth.token=" + TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_expect_100_continue_gets_401_and_no_100(self):
        with self.srv.connect() as s:
            s.sendall(put_head("/cache/e", 1 << 20, "Expect: 100-continue\r\n"))
            rd = Reader(s)
            r = rd.response()
            self.assertEqual(r.status, 401)  # the first answer: no 100 Continue before it
            self.assertEqual(r.header("www-authenticate"), 'Bearer realm="snowflaked"')
            self.assertEqual(r.header("connection"), "close")
            self.assertTrue(rd.closed())

    def test_expect_100_continue_with_the_token(self):
        with self.srv.connect() as s:
            s.sendall(put_head("/cache/e", 5, "Expect: 100-continue\r\n" + bearer()))
            rd = Reader(s)
            self.assertEqual(rd.response().status, 100)
            s.sendall(b"hello")
            self.assertIn(rd.response().status, (201, 204))
            s.sendall(get("/cache/e"))
            self.assertEqual(rd.response().body, b"hello")  # and the connection stays open

    def test_401_comes_before_the_body(self):
        for extra in ("", "Authorization: Bearer wrong\r\n"):
            with self.subTest(extra), self.srv.connect(timeout=3) as s:
                t0 = time.monotonic()
                s.sendall(put_head("/cache/big", 1 << 20, extra))  # headers only
                rd = Reader(s)
                r = rd.response()  # today: nothing until the body or the 408
                self.assertEqual(r.status, 401)
                self.assertLess(time.monotonic() - t0, 2)
                self.assertEqual(r.header("connection"), "close")
                self.assertTrue(rd.closed())

    def test_a_refused_body_is_never_a_request(self):
        smuggled = b"DELETE /cache/keep HTTP/1.1\r\nHost: t\r\n" + bearer().encode() + b"\r\n"
        request(self.srv, put("/cache/keep", b"v", "Bearer " + TOKEN))
        with self.srv.connect() as s:
            s.sendall(put("/cache/x", smuggled))
            rd = Reader(s)
            self.assertEqual(rd.response().status, 401)
            self.assertTrue(rd.closed())  # one answer, then the end
        self.assertEqual(request(self.srv, get("/cache/keep")).status, 200)

    def test_refused_bodies_hold_no_memory(self):
        # 24 tokenless PUTs of 1 MiB each, all but the last byte sent: today the server
        # buffered every body (24 MiB) before the 401, or until the 408.
        srv = Server("--set", "auth.token=" + TOKEN)
        conns = []
        try:
            wait_ready(srv)
            request(srv, get("/metrics"))
            before = rss_kib(srv.proc.pid)
            for i in range(24):
                s = srv.connect(timeout=3)
                conns.append(s)
                try:
                    s.sendall(put_head("/cache/m%d" % i, 1 << 20) + b"x" * ((1 << 20) - 1))
                except OSError:
                    pass  # the server answered and closed before taking it all: fine
            grown = rss_kib(srv.proc.pid) - before
            self.assertLess(grown, 8 * 1024, "RSS grew by %d KiB" % grown)
            self.assertEqual(metric(srv, "snowflaked_inflight_bytes"), 0)
            for s in conns:
                self.assertEqual(Reader(s).response().status, 401)
            self.assertGreaterEqual(metric(srv, "snowflaked_auth_failures_total"), 24)
        finally:
            for s in conns:
                s.close()
            srv.stop()


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

    def test_unreadable_empty_or_short_token_file_refuses_to_start(self):
        # unreadable: a runtime failure (1); a first line that is no token of 16..255 bytes
        # (empty, or short enough to guess over the network) is bad configuration (2), as
        # auth.token below 16 bytes is
        with tempfile.TemporaryDirectory() as d:
            empty, short = os.path.join(d, "empty"), os.path.join(d, "short")
            spaced = os.path.join(d, "spaced")
            open(empty, "w").close()
            with open(short, "w") as f:
                f.write("fifteen-bytes!!\n")
            with open(spaced, "w") as f:  # no Authorization header can carry it
                f.write("fifteen-bytes!! and more\n")
            for path, code, text in ((os.path.join(d, "missing"), 1, "No such file"),
                                     (empty, 2, "first line must hold the token (16..255 bytes), "
                                                "got 0"),
                                     (short, 2, "(16..255 bytes), got 15"),
                                     (spaced, 2, "visible ASCII without spaces (0x21-0x7E), "
                                                 "byte 16 is not")):
                env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
                env["SNOWFLAKED_DATA_DIR"] = os.path.join(d, "data")
                env["SNOWFLAKED_SNOWFLAKE_DATACENTER_ID"] = "2"  # an identity of its own
                p = subprocess.run([BINARY, "--set", "auth.token_file=" + path, "-p",
                                    str(free_port())], env=env, capture_output=True, text=True,
                                   timeout=20)
                self.assertEqual(p.returncode, code, p.stderr)
                self.assertIn("auth.token_file " + path, p.stderr)
                self.assertIn(text, p.stderr)
                self.assertNotIn("fifteen-bytes!!", p.stderr)

    def test_short_token_refuses_to_start(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
        for args in (["--set", "auth.token=x"], ["--check-config", "--set", "auth.token=x"]):
            p = subprocess.run([BINARY, *args, "-p", str(free_port())], env=env,
                               capture_output=True, text=True, timeout=20)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("auth.token: must be at least 16 bytes", p.stderr)
        # from the environment too: a token a header cannot carry, named, never shown
        p = subprocess.run([BINARY, "-p", str(free_port())], capture_output=True, text=True,
                           env=dict(env, SNOWFLAKED_AUTH_TOKEN="secret-with\ttab-0123456789"),
                           timeout=20)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("SNOWFLAKED_AUTH_TOKEN", p.stderr)
        self.assertIn("auth.token: must be visible ASCII without spaces (0x21-0x7E), byte 12",
                      p.stderr)
        self.assertNotIn("secret-with", p.stderr)

    def test_check_config_does_not_print_the_token(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
        p = subprocess.run([BINARY, "--check-config", "--set", "auth.token=" + TOKEN], env=env,
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(TOKEN, p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
