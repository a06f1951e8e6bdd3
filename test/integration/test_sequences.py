"""Segment mode on a single node (docs/sequences.md) against the real binary: /seq/{name} and
/seqs/{name} hand out dense, strictly increasing numbers from blocks reserved in
data_dir/sequences; a clean restart continues without a hole, a kill -9 under load never
reissues and leaves holes within the bound (the rest of the current block plus the next one,
plus the responses in flight when the process died); a block reserve slower than the load gives
503 with Retry-After, never a wait and never a duplicate; a full disk (a small tmpfs mounted on
data_dir/sequences, root only) refuses instead of issuing numbers it did not save; a namespace's
own token is required for it.

Run as ctest does, from test/integration: `python3 -m unittest -v test_sequences`."""
import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from sfharness import BINARY, Reader, Server, get, request, wait_ready

TOKEN = "orders-Token_0123456789"
ADMIN = "admin-Token_0123456789xyz"


def namespaces(*defs):
    return "sequences.namespaces=" + json.dumps(list(defs))


def seq_file(data_dir, name):
    """(next, fields) of data_dir/sequences/<name>.seq."""
    with open(os.path.join(data_dir, "sequences", name + ".seq")) as f:
        line = f.read()
    fields = line.split()
    return int(fields[2]), fields


def request_ok(srv, path, extra="", head_only=False, timeout=5):
    """request(), waiting out 503s (a block on its way on a busy machine) up to timeout."""
    deadline = time.monotonic() + timeout
    while True:
        raw = get(path, extra) if not head_only else (
            "HEAD %s HTTP/1.1\r\nHost: t\r\n%s\r\n" % (path, extra)).encode()
        r = request(srv, raw, head_only=head_only)
        if r.status != 503 or time.monotonic() > deadline:
            return r
        time.sleep(0.02)


class Client:
    """One keep-alive connection; take() returns (status, numbers, response)."""

    def __init__(self, srv, auth=None):
        self.sock = srv.connect()
        self.reader = Reader(self.sock)
        self.extra = "Authorization: Bearer %s\r\n" % auth if auth else ""

    def take(self, name, count=None):
        path = "/seq/%s" % name if count is None else "/seqs/%s?count=%d" % (name, count)
        self.sock.sendall(get(path, self.extra))
        r = self.reader.response()
        if r.status != 200:
            return r.status, [], r
        body = r.json()
        return 200, [body["id"]] if count is None else body["ids"], r

    def take_one(self, name, timeout=5):
        """One number, waiting out 503s (a block on its way) up to timeout."""
        deadline = time.monotonic() + timeout
        while True:
            st, nums, r = self.take(name)
            if st == 200:
                return nums[0]
            if st != 503 or time.monotonic() > deadline:
                raise AssertionError("GET /seq/%s: %d %r" % (name, st, r.body))
            time.sleep(0.02)

    def close(self):
        self.sock.close()


def load(srv, name, threads, seconds, stop_after=None):
    """threads keep-alive clients taking numbers for up to `seconds`; stop_after(received) may
    end the run early. Returns (per-client number lists, statuses seen)."""
    out = [[] for _ in range(threads)]
    statuses = {}
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def run(i):
        try:
            c = Client(srv)
        except OSError:
            return
        try:
            while time.monotonic() < end:
                st, nums, _ = c.take(name)
                out[i].extend(nums)
                with lock:
                    statuses[st] = statuses.get(st, 0) + 1
        except (OSError, EOFError, ValueError):
            pass  # the server died under us (kill -9)
        finally:
            c.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    if stop_after:
        stop_after(out)
    for t in ts:
        t.join(seconds + 10)
    return out, statuses


class Basics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--set", namespaces({"name": "orders", "start": 1000, "block": 50},
                                             {"name": "inv", "token": TOKEN, "block": 20},
                                             {"name": "small", "block": 4, "max": 9},
                                             {"name": "tail", "block": 4, "max": 7}),
                         "--set", "auth.token=" + ADMIN)
        wait_ready(cls.srv)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_dense_and_increasing_across_blocks(self):
        c = Client(self.srv)
        got = []
        for _ in range(130):  # across two block boundaries (a slow fsync may give a 503)
            got.append(c.take_one("orders"))
        deadline = time.monotonic() + 5
        while True:
            st, batch, r = c.take("orders", 50)
            if st != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        self.assertEqual(st, 200, r.body)
        got += batch
        c.close()
        self.assertEqual(got, list(range(got[0], got[0] + 180)))
        self.assertGreaterEqual(got[0], 1000)

    def test_increasing_across_connections_and_loops(self):
        """One client hopping over 8 connections (the kernel spreads them over both loops):
        each request sent after the previous answer gets a larger number, whatever loop it
        lands on (one state per namespace, not per loop)."""
        conns = [Client(self.srv) for _ in range(8)]
        got = [conns[i % 8].take_one("orders") for i in range(400)]
        for c in conns:
            c.close()
        self.assertEqual(got, sorted(set(got)))
        self.assertLessEqual(got[-1] - got[0] + 1 - len(got), 0)  # dense: one node, one client

    def test_text_and_json_shapes(self):
        r = request_ok(self.srv, "/seq/orders?format=text")
        self.assertEqual(r.status, 200)
        self.assertRegex(r.body.decode(), r"^\d+\n?$")
        r = request_ok(self.srv, "/seqs/orders?count=3", "Accept: text/plain\r\n")
        lines = r.body.decode().split("\n")
        self.assertEqual(len([x for x in lines if x]), 3)
        r = request_ok(self.srv, "/seq/orders?json_ids=string")
        self.assertIsInstance(r.json()["id"], str)
        r = request(self.srv, get("/seqs/orders?count=0"))
        self.assertEqual(r.status, 400)
        r = request(self.srv, get("/seqs/orders?count=51"))  # above the block: never possible
        self.assertEqual(r.status, 400)
        self.assertIn("at most 50", r.json()["error"])
        r = request(self.srv, get("/seq/nope"))
        self.assertEqual(r.status, 404)
        r = request(self.srv, get("/seq/../etc"))
        self.assertEqual(r.status, 404)

    def test_head_spends_nothing(self):
        a = request_ok(self.srv, "/seq/orders").json()["id"]
        r = request_ok(self.srv, "/seq/orders", head_only=True)
        self.assertEqual(r.status, 200)
        b = request_ok(self.srv, "/seq/orders").json()["id"]
        self.assertEqual(b, a + 1)
        # HEAD answers the refusal GET would get, not 200
        r = request(self.srv, b"HEAD /seqs/orders?count=51 HTTP/1.1\r\nHost: t\r\n\r\n",
                    head_only=True)
        self.assertEqual(r.status, 400)

    def test_count_beyond_what_is_left_is_400_not_410(self):
        """Once the store says max is near, a count above what is left is the client's error
        (400 saying how many are left): 410 Gone, which tells a client to give the namespace
        up, comes only when none is left. HEAD answers as GET would."""
        got, deadline = [], time.monotonic() + 10
        while True:
            r = request(self.srv, get("/seqs/tail?count=3"))
            if r.status == 200:
                got += r.json()["ids"]
            elif r.status != 503 or time.monotonic() > deadline:
                break
            else:
                time.sleep(0.02)
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json()["error"], "namespace tail has 1 number left before its max 7")
        self.assertEqual(got, [1, 2, 3, 4, 5, 6])
        head = b"HEAD %s HTTP/1.1\r\nHost: t\r\n\r\n"
        self.assertEqual(request(self.srv, head % b"/seqs/tail?count=3", head_only=True).status,
                         400)
        self.assertEqual(request(self.srv, head % b"/seq/tail", head_only=True).status, 200)
        self.assertEqual(request(self.srv, get("/seq/tail")).json()["id"], 7)
        self.assertEqual(request(self.srv, head % b"/seq/tail", head_only=True).status, 410)
        r = request(self.srv, get("/seqs/tail?count=3"))
        self.assertEqual(r.status, 410)
        self.assertIn("past its max 7", r.json()["error"])

    def test_namespace_token(self):
        r = request(self.srv, get("/seq/inv"))
        self.assertEqual(r.status, 401)
        self.assertIn("Bearer", r.header("WWW-Authenticate"))
        r = request(self.srv, get("/seq/inv", "Authorization: Bearer wrong-token-0123456\r\n"))
        self.assertEqual(r.status, 401)
        self.assertIn("invalid_token", r.header("WWW-Authenticate"))
        r = request_ok(self.srv, "/seq/inv", "Authorization: Bearer %s\r\n" % TOKEN)
        self.assertEqual(r.status, 200)
        r = request_ok(self.srv, "/seq/inv", "Authorization: Bearer %s\r\n" % ADMIN)
        self.assertEqual(r.status, 200)  # auth.token opens every namespace
        # the namespace token opens only its namespace: not the others' when reads are protected
        r = request_ok(self.srv, "/seq/orders", "Authorization: Bearer %s\r\n" % TOKEN)
        self.assertEqual(r.status, 200)  # reads are open here

    def test_max_then_gone(self):
        got = []
        for _ in range(12):
            r = request(self.srv, get("/seq/small"))
            if r.status == 200:
                got.append(r.json()["id"])
            else:
                self.assertIn(r.status, (410, 503), r.body)
                if r.status == 410:
                    break
                time.sleep(0.05)
        self.assertEqual(got, list(range(1, 10)))
        r = request(self.srv, get("/seq/small"))
        self.assertEqual(r.status, 410)
        self.assertIn("past its max 9", r.json()["error"])

    def test_metrics_and_listing(self):
        request_ok(self.srv, "/seq/orders")
        text = request(self.srv, get("/metrics")).body.decode()
        for name in ("snowflaked_seq_issued_total", "snowflaked_seq_blocks_total",
                     "snowflaked_seq_remaining", "snowflaked_seq_store_ops_total",
                     "snowflaked_seq_block_fetch_seconds_bucket"):
            self.assertRegex(text, r'(?m)^%s\{namespace="orders"[^}]*\} \d' % name)
        m = re.search(r'(?m)^snowflaked_seq_block_fetch_seconds_count\{namespace="orders"\} (\d+)',
                      text)
        self.assertGreaterEqual(int(m.group(1)), 1)
        # the gauges the space alerts read: max (none without one), the furthest block held
        self.assertRegex(text, r'(?m)^snowflaked_seq_max\{namespace="small"\} 9$')
        self.assertNotRegex(text, r'(?m)^snowflaked_seq_max\{namespace="orders"\}')
        m = re.search(r'(?m)^snowflaked_seq_block_end\{namespace="orders"\} (\d+)$', text)
        held = int(re.search(r'(?m)^snowflaked_seq_remaining\{namespace="orders"\} (\d+)$',
                             text).group(1))
        self.assertGreater(int(m.group(1)), 1000 + held)  # past what was issued and is held
        listing = request(self.srv, get("/sequences")).json()
        self.assertEqual(listing["source"], "file")
        names = [n["name"] for n in listing["namespaces"]]
        self.assertEqual(names, ["orders", "inv", "small", "tail"])
        self.assertIs(listing["namespaces"][1]["token"], True)
        self.assertNotIn(TOKEN, json.dumps(listing))
        self.assertIsNone(listing["namespaces"][0]["max"])


class Restarts(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_seq_")
        self.data = os.path.join(self.tmp.name, "data")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.discard()
        self.tmp.cleanup()

    def start(self, *sets, block=100):
        args = ["--set", namespaces({"name": "orders", "block": block})]
        for s in sets:
            args += ["--set", s]
        srv = Server(*args, data_dir=self.data)
        self.servers.append(srv)
        wait_ready(srv)
        return srv

    def test_clean_restart_continues_without_a_hole(self):
        srv = self.start()
        c = Client(srv)
        first = [c.take("orders")[1][0] for _ in range(30)]
        c.close()
        srv.stop()
        self.servers.remove(srv)
        self.assertEqual(seq_file(self.data, "orders")[0], first[-1] + 1)  # given back
        srv = self.start()
        c = Client(srv)
        self.assertEqual(c.take("orders")[1][0], first[-1] + 1)
        c.close()

    def test_kill9_under_load_never_reissues(self):
        """Three rounds of kill -9 under load: every number is unique over all runs, each run's
        numbers are dense except the responses in flight at the kill, and the hole a crash
        leaves is within 2 blocks plus those in flight."""
        block, threads = 100, 4
        seen, runs = set(), []
        for _ in range(3):
            srv = self.start(block=block)

            def kill_later(out):
                deadline = time.monotonic() + 5
                while sum(map(len, out)) < 450 and time.monotonic() < deadline:
                    time.sleep(0.01)
                srv.proc.send_signal(signal.SIGKILL)
                srv.proc.wait()

            out, statuses = load(srv, "orders", threads, 8, stop_after=kill_later)
            got = sorted(n for o in out for n in o)
            self.assertGreaterEqual(len(got), 450, statuses)
            for o in out:  # each connection sees its numbers strictly increasing
                self.assertEqual(o, sorted(set(o)))
            self.assertEqual(len(got), len(set(got)))
            dup = seen & set(got)
            self.assertEqual(dup, set(), "numbers reissued after kill -9")
            seen |= set(got)
            missing = (got[-1] - got[0] + 1) - len(got)
            self.assertLessEqual(missing, threads, "holes inside one run: %d" % missing)
            runs.append((got[0], got[-1]))
            self.assertLessEqual(got[-1], seq_file(self.data, "orders")[0] - 1)
        for (_, last), (first, _) in zip(runs, runs[1:]):
            self.assertGreater(first, last)
            self.assertLessEqual(first - last - 1, 2 * block + threads,
                                 "a crash left a hole above the bound")


class SlowBlockSource(unittest.TestCase):
    def test_burst_beyond_both_blocks_gets_503_not_a_wait(self):
        srv = Server("--set", namespaces({"name": "burst", "block": 10}),
                     "--set", "sequences.reserve_delay_ms=400",
                     "--set", "sequences.retry_ms=100")
        try:
            wait_ready(srv, timeout=20)
            c = Client(srv)
            got, refused, slowest = [], 0, 0.0
            deadline = time.monotonic() + 10
            while len(got) < 40 and time.monotonic() < deadline:
                t0 = time.monotonic()
                st, nums, r = c.take("burst")
                slowest = max(slowest, time.monotonic() - t0)
                if st == 503:
                    refused += 1
                    self.assertEqual(r.header("Retry-After"), "1")
                    self.assertIn("no number in hand", r.json()["error"])
                    time.sleep(0.02)
                else:
                    self.assertEqual(st, 200, r.body)
                    got += nums
            c.close()
            self.assertGreater(refused, 0, "a 400 ms reserve never ran dry at this rate")
            self.assertEqual(got, list(range(1, 41)))  # dense: refusals spend nothing
            # the request path never waited for the store (a reserve takes 400 ms)
            self.assertLess(slowest, 0.2)
            text = request(srv, get("/metrics")).body.decode()
            m = re.search(r'(?m)^snowflaked_seq_refused_total\{namespace="burst"\} (\d+)', text)
            self.assertGreaterEqual(int(m.group(1)), refused)
            m = re.search(r'(?m)^snowflaked_seq_block_fetch_seconds_bucket\{namespace="burst",'
                          r'le="0\.25"\} (\d+)', text)
            self.assertEqual(int(m.group(1)), 0)  # every fetch took the injected 400 ms
        finally:
            srv.stop()


class DiskFull(unittest.TestCase):
    """data_dir/sequences on a 256 KiB tmpfs (root only), filled while the daemon issues."""

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("mounting a tmpfs needs root")
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_seq_full_")
        self.data = os.path.join(self.tmp.name, "data")
        self.mnt = os.path.join(self.data, "sequences")
        os.makedirs(self.mnt)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs",
                            self.mnt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=30)
        if r.returncode != 0:
            self.tmp.cleanup()
            self.skipTest("cannot mount a tmpfs here: %s" % r.stdout.decode().strip())

    def tearDown(self):
        r = subprocess.run(["umount", self.mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", self.mnt], timeout=30)
        self.tmp.cleanup()

    def fill(self):
        path = os.path.join(self.mnt, "fill")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096) > 0:
                pass
        except OSError:
            pass  # ENOSPC: full
        finally:
            os.close(fd)
        return path

    def test_full_disk_refuses_then_recovers(self):
        srv = Server("--set", namespaces({"name": "inv", "block": 20}),
                     "--set", "sequences.retry_ms=100", data_dir=self.data)
        try:
            wait_ready(srv)
            c = Client(srv)
            got = [c.take("inv")[1][0] for _ in range(5)]
            deadline = time.monotonic() + 5  # the prefetched block is on disk and in hand
            while (request(srv, get("/sequences")).json()["namespaces"][0]["remaining"] < 35
                   and time.monotonic() < deadline):
                time.sleep(0.02)
            filler = self.fill()
            on_disk = seq_file(self.data, "inv")[0]
            refusal = None
            for _ in range(200):
                st, nums, r = c.take("inv")
                if st == 503 and "being reserved" in r.json()["error"]:
                    # the failing write is still on the worker thread: its ENOSPC comes next
                    time.sleep(0.05)
                    continue
                if st == 503:
                    refusal = r.json()["error"]
                    break
                self.assertEqual(st, 200)
                got += nums
            self.assertIsNotNone(refusal, "numbers kept coming on a full disk")
            self.assertIn("No space left on device", refusal)
            self.assertLess(got[-1], on_disk)  # every number issued is covered by the file
            self.assertEqual(seq_file(self.data, "inv")[0], on_disk)
            self.assertFalse([n for n in os.listdir(self.mnt) if n.endswith(".tmp")])
            deadline = time.monotonic() + 5  # the logger writes asynchronously
            while "No space left" not in srv.output() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertRegex(srv.output(), r"WARN +sequences: namespace inv: no block reserved "
                                           r"\(.*No space left on device\)")
            os.unlink(filler)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                st, nums, _ = c.take("inv")
                if st == 200:
                    break
                time.sleep(0.05)
            self.assertEqual(st, 200)
            self.assertGreater(nums[0], got[-1])
            c.close()
            deadline = time.monotonic() + 5
            while "blocks reserved again" not in srv.output() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertIn("sequences: namespace inv: blocks reserved again", srv.output())
        finally:
            srv.stop()


def put(path, body, token=None):
    auth = "Authorization: Bearer %s\r\n" % token if token else ""
    return ("PUT %s HTTP/1.1\r\nHost: t\r\n%sContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (path, auth, len(body))).encode() + body


class CreatedOverTheApi(unittest.TestCase):
    """PUT /seq/{name} with the admin token (sequences.api_create): stored on the source's
    thread (202, then live), kept across a restart, refusals for everything else."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_seq_api_")
        self.data = os.path.join(self.tmp.name, "data")

    def tearDown(self):
        self.tmp.cleanup()

    def start(self, *sets):
        args = ["--set", "auth.token=" + ADMIN, "--set", "sequences.api_create=true"]
        for s in sets:
            args += ["--set", s]
        srv = Server(*args, data_dir=self.data)
        wait_ready(srv)
        return srv

    def wait_live(self, srv, name):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for n in request(srv, get("/sequences")).json()["namespaces"]:
                if n["name"] == name and n["state"] == "live":
                    return n
            time.sleep(0.02)
        self.fail("namespace %s never became live:\n%s" % (name, srv.output()))

    def test_create_use_restart(self):
        srv = self.start()
        try:
            body = json.dumps({"start": 500, "block": 10, "max": 100000}).encode()
            r = request(srv, put("/seq/tickets", body))
            self.assertEqual(r.status, 401)
            r = request(srv, put("/seq/tickets", body, TOKEN))  # not the admin's
            self.assertEqual(r.status, 401)
            r = request(srv, put("/seq/tickets", body, ADMIN))
            self.assertIn(r.status, (200, 202), r.body)
            self.assertEqual(r.header("Location"), "/seq/tickets")
            self.wait_live(srv, "tickets")
            c = Client(srv)
            got = [c.take_one("tickets") for _ in range(25)]
            c.close()
            self.assertEqual(got, list(range(500, 525)))
            # the same definition again: nothing to do; another: conflict
            self.assertEqual(request(srv, put("/seq/tickets", body, ADMIN)).status, 200)
            other = json.dumps({"start": 1, "block": 10}).encode()
            r = request(srv, put("/seq/tickets", other, ADMIN))
            self.assertEqual(r.status, 409)
            self.assertIn("another definition", r.json()["error"])
            for bad, why in ((b"[]", "JSON object"), (b'{"block": 0}', "block must be at least 1"),
                             (b'{"blok": 5}', "unknown or mistyped"),
                             (b'{"start": -1}', "integers"),
                             (b'{"token": "short"}', "16 to 255 bytes"),
                             # strict JSON: nothing after the object, no field twice, no \u0000
                             (b'{"start": 5}x', "text after the JSON value at byte 12"),
                             (b'{"start": 5}{"start": 6}', "text after the JSON value"),
                             (b'{"start": 5, "start": 6}', "field start is given twice"),
                             (b'{"token": "abcdefgh\\u0000ijklmnopq"}', "\\u0000 in a string"),
                             # a token no Authorization header can carry
                             (b'{"token": "two words 0123456789"}', "0x21-0x7E"),
                             (b'{"token": "tab\\there-0123456789"}', "0x21-0x7E"),
                             (b'{"token": "caf\\u00e9-0123456789"}', "0x21-0x7E")):
                r = request(srv, put("/seq/x1", bad, ADMIN))
                self.assertEqual(r.status, 400, (bad, r.body))
                self.assertIn(why, r.json()["error"])
                self.assertNotIn("0123456789", r.json()["error"])  # never the token
            self.assertEqual(request(srv, get("/seq/x1")).status, 404)  # none was created
            r = request(srv, put("/seq/a%2Fb", b"{}", ADMIN))
            self.assertEqual(r.status, 400)
            r = request(srv, put("/seqs/tickets", b"{}", ADMIN))
            self.assertEqual(r.status, 405)
        finally:
            srv.stop()
        self.assertEqual(seq_file(self.data, "tickets")[1][-2], "api")
        self.assertEqual(seq_file(self.data, "tickets")[1][-3], "-")  # no token
        srv = self.start()  # a restart finds it in data_dir and goes on without a hole
        try:
            n = self.wait_live(srv, "tickets")
            self.assertEqual((n["start"], n["block"], n["max"]), (500, 10, 100000))
            c = Client(srv)
            self.assertEqual(c.take_one("tickets"), 525)
            c.close()
        finally:
            srv.stop()

    def test_token_of_a_created_namespace(self):
        """A token given at creation is kept as its SHA-256 only (in the file too) and guards the
        namespace across a restart; auth.token opens it as well."""
        own = "tickets-own-Token-42xyz"
        body = json.dumps({"block": 10, "token": own}).encode()
        for round_ in range(2):
            srv = self.start()
            try:
                if round_ == 0:
                    self.assertIn(request(srv, put("/seq/guarded", body, ADMIN)).status,
                                  (200, 202))
                self.wait_live(srv, "guarded")
                r = request(srv, get("/seq/guarded"))
                self.assertEqual(r.status, 401)
                r = request(srv, get("/seq/guarded", "Authorization: Bearer %s\r\n" % TOKEN))
                self.assertEqual(r.status, 401)
                self.assertIn("invalid_token", r.header("WWW-Authenticate"))
                for tok in (own, ADMIN):
                    r = request_ok(srv, "/seq/guarded", "Authorization: Bearer %s\r\n" % tok)
                    self.assertEqual(r.status, 200, r.body)
                listing = request(srv, get("/sequences")).body.decode()
                self.assertIn('"token":true', listing)
                self.assertNotIn(own, listing)
            finally:
                srv.stop()
            _, fields = seq_file(self.data, "guarded")
            self.assertEqual(fields[9], hashlib.sha256(own.encode()).hexdigest())
            with open(os.path.join(self.data, "sequences", "guarded.seq")) as f:
                self.assertNotIn(own, f.read())

    def test_off_without_api_create(self):
        srv = Server("--set", "auth.token=" + ADMIN,
                     "--set", namespaces({"name": "fixed"}), data_dir=self.data)
        try:
            wait_ready(srv)
            r = request(srv, put("/seq/new", b"{}", ADMIN))
            self.assertEqual(r.status, 403)
            self.assertIn("sequences.api_create", r.json()["error"])
        finally:
            srv.stop()

    def test_table_full(self):
        srv = self.start("sequences.max_namespaces=2", namespaces({"name": "one"}))
        try:
            self.assertIn(request(srv, put("/seq/two", b"{}", ADMIN)).status, (200, 202))
            r = request(srv, put("/seq/three", b"{}", ADMIN))
            self.assertEqual(r.status, 507)
            self.assertIn("max_namespaces", r.json()["error"])
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
