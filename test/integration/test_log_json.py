"""log.format "json" against the real binary: every line the daemon writes (stderr, or log.file)
is one JSON object with the documented keys in order, timestamps are RFC 3339 UTC with
milliseconds, and with log.access_log each request is one structured access entry whose method,
path, status, bytes and proto are those of the request, whatever bytes the path holds. A start-up
failure after the logger started is reported as JSON too."""
import datetime
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from sfharness import BINARY, Server, free_port, get, request

LOG_KEYS = ["ts", "level", "type", "msg"]
ACCESS_KEYS = ["ts", "level", "type", "method", "path", "status", "duration_ms", "bytes",
               "proto", "remote"]
LEVELS = {"debug", "info", "warn", "error"}


def parse_lines(test, data):
    """Every line of data (bytes) as a JSON object (pairs in order), checked against the schema."""
    test.assertTrue(data.endswith(b"\n"), "last line not terminated: %r" % data[-200:])
    entries = []
    for raw in data.split(b"\n")[:-1]:
        text = raw.decode("utf-8")  # strict: invalid UTF-8 fails here
        pairs = json.loads(text, object_pairs_hook=lambda p: p)
        keys = [k for k, _ in pairs]
        e = dict(pairs)
        test.assertIn(e.get("type"), ("log", "access"), text)
        test.assertEqual(keys, ACCESS_KEYS if e["type"] == "access" and "msg" not in e
                         else LOG_KEYS, text)
        test.assertIn(e["level"], LEVELS, text)
        test.assertRegex(e["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", text)
        ts = datetime.datetime.strptime(e["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc)
        age = abs((datetime.datetime.now(datetime.timezone.utc) - ts).total_seconds())
        test.assertLess(age, 120, text)
        entries.append(e)
    return entries


# (raw request, method, path as logged, status, response is to HEAD)
REQUESTS = [
    (get("/id"), "GET", "/id", 200, False),
    (b"HEAD /id HTTP/1.1\r\nHost: t\r\n\r\n", "HEAD", "/id", 200, True),
    (get("/no/such/route"), "GET", "/no/such/route", 404, False),
    (get('/q"uo"te\\back\\slash?x="1"&y=\\'), "GET", '/q"uo"te\\back\\slash?x="1"&y=\\', 404,
     False),
    (b"GET /http10 HTTP/1.0\r\n\r\n", "GET", "/http10", 404, False),
    # A control character or a byte above 0x7f in the target: llhttp refuses it before the URL
    # is complete, so the entry has the 400 and an empty path, and stays valid JSON.
    (b"GET /ctl\x01\x1b[31m HTTP/1.1\r\nHost: t\r\n\r\n", "GET", "", 400, False),
    (b"GET /bad\xff\xfe HTTP/1.1\r\nHost: t\r\n\r\n", "GET", "", 400, False),
]


class JsonLog(unittest.TestCase):
    def run_requests(self, srv):
        sent = []
        for raw, method, path, status, head in REQUESTS:
            r = request(srv, raw, head_only=head)
            self.assertEqual(r.status, status, raw)
            sent.append((method, path, status, 0 if head else len(r.body)))
        return sent

    def check_access(self, entries, sent):
        access = [e for e in entries if e["type"] == "access"]
        got = sorted((e["method"], e["path"], e["status"], e["bytes"]) for e in access)
        self.assertEqual(got, sorted(sent))
        for e in access:
            self.assertEqual(e["level"], "info")
            self.assertIsInstance(e["duration_ms"], float)
            self.assertGreaterEqual(e["duration_ms"], 0)
            want = ("" if e["status"] == 400 else
                    "HTTP/1.0" if e["path"] == "/http10" else "HTTP/1.1")
            self.assertEqual(e["proto"], want, e)
            # the client's address: these requests come from this process over loopback
            self.assertRegex(e["remote"], r"^127\.0\.0\.1:\d{1,5}$", e)

    def test_stderr(self):
        srv = Server("--set", "log.format=json", "--set", "log.access_log=true")
        try:
            sent = self.run_requests(srv)
        finally:
            srv.signal()
            srv.wait()
            with open(srv.log_path, "rb") as f:
                data = f.read()
            srv.stop()
        entries = parse_lines(self, data)
        self.check_access(entries, sent)
        msgs = [e["msg"] for e in entries if e["type"] == "log"]
        self.assertTrue(any(m.startswith("snowflaked ") and "listening on" in m for m in msgs),
                        msgs)
        self.assertTrue(any(m.startswith("SIGTERM received") for m in msgs), msgs)
        self.assertIn("stopped", msgs)  # not necessarily last: order across threads is per flush

    def test_log_file(self):
        with tempfile.TemporaryDirectory(prefix="sf_jsonlog_") as d:
            path = os.path.join(d, "snowflaked.log")
            srv = Server("--set", "log.format=json", "--set", "log.access_log=true",
                         "--set", "log.file=" + path)
            try:
                sent = self.run_requests(srv)
            finally:
                srv.stop()
            with open(path, "rb") as f:
                entries = parse_lines(self, f.read())
        self.check_access(entries, sent)
        self.assertIn("stopped", [e.get("msg") for e in entries])

    def test_sighup_reopens_the_log_file(self):
        """logrotate's way: rename the file, SIGHUP; later lines go to a new file at the old
        path, nothing is lost or written twice, and the daemon keeps serving."""
        with tempfile.TemporaryDirectory(prefix="sf_jsonlog_") as d:
            path = os.path.join(d, "snowflaked.log")
            srv = Server("--set", "log.format=json", "--set", "log.access_log=true",
                         "--set", "log.file=" + path)
            try:
                request(srv, get("/before-rotation"))
                deadline = time.monotonic() + 5
                while b"/before-rotation" not in open(path, "rb").read():
                    self.assertLess(time.monotonic(), deadline, "access line not written")
                    time.sleep(0.02)
                os.rename(path, path + ".1")
                srv.signal(signal.SIGHUP)
                while not os.path.exists(path):
                    self.assertLess(time.monotonic(), deadline, "no new file after SIGHUP")
                    time.sleep(0.02)
                self.assertEqual(request(srv, get("/after-rotation")).status, 404)
            finally:
                srv.stop()
            with open(path + ".1", "rb") as f:
                old = parse_lines(self, f.read())
            with open(path, "rb") as f:
                new = parse_lines(self, f.read())
        old_paths = [e["path"] for e in old if e["type"] == "access"]
        new_paths = [e["path"] for e in new if e["type"] == "access"]
        self.assertEqual((old_paths, new_paths), (["/before-rotation"], ["/after-rotation"]))
        self.assertIn("stopped", [e.get("msg") for e in new])

    def test_text_unchanged(self):
        """The default stays the text format, access lines as before."""
        srv = Server("--set", "log.access_log=true")
        try:
            request(srv, get("/id"))
        finally:
            srv.signal()
            srv.wait()
            out = srv.output()
            srv.stop()
        self.assertRegex(out, r"(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ACCESS GET /id 200 "
                              r"\d+\.\d{3}ms$")
        self.assertNotIn('{"ts"', out)

    def test_start_failure_is_json(self):
        """The port is taken (no SO_REUSEPORT on the holder): the daemon fails after its logger
        started, and the reason is the last JSON line, at error."""
        with socket.socket() as holder, tempfile.TemporaryDirectory(prefix="sf_jsonlog_") as d:
            holder.bind(("127.0.0.1", 0))
            holder.listen(1)
            port = holder.getsockname()[1]
            env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
            p = subprocess.run([BINARY, "--set", "log.format=json", "--set", "server.port=%d" % port,
                                "--set", "data_dir=" + os.path.join(d, "data"),
                                "--set", "snowflake.datacenter_id=4",  # an identity of its own
                                "--set", "server.threads=1"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               timeout=20)
        self.assertNotEqual(p.returncode, 0)
        entries = parse_lines(self, p.stderr)
        self.assertEqual(entries[-1]["level"], "error", entries)
        self.assertTrue(entries[-1]["msg"].startswith("snowflaked: "), entries[-1])
        self.assertIn(str(port), entries[-1]["msg"])

    def test_bad_value_refused(self):
        p = subprocess.run([BINARY, "--set", "log.format=logfmt", "--check-config"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.decode().strip().splitlines()[0],
                         'snowflaked: flag --set: log.format: must be one of text|json, '
                         'got "logfmt"')
        p = subprocess.run([BINARY, "--set", "log.format=json", "--check-config"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["log"]["format"], "json")


if __name__ == "__main__":
    unittest.main()
