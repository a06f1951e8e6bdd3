"""Segment mode on a fleet: the etcd block source (cluster/seq_etcd.c, docs/sequences.md "On a
fleet") against a real one-member etcd (etcdcluster.py). Each test uses its own key prefix.

- three daemons drawing from the same namespaces: no number twice, strictly increasing per
  daemon, every number inside a block whose claim etcd's history holds (the counter key's history
  walked back revision by revision), every claim's nonce once; a restarted daemon goes on without
  reissuing;
- a clean stop gives the unissued rest back: the next start continues without a hole;
- a claim whose answer is lost (a proxy forwards it to etcd and drops etcd's answer): the daemon
  re-reads the counter, finds its nonce (claims_total{result="recovered"}) and never sends that
  claim again;
- a daemon SIGSTOPped past its fence (etcd unreachable meanwhile) issues nothing after SIGCONT
  until its identity is renewed, then goes on above everything before;
- every answer of etcd delayed 300 ms: /seqs latency stays low (blocks are fetched off the request
  path) and nothing is refused;
- etcd with RBAC (JWTs living 3 s): the source shares the identity's token (one authentication
  at start, one per expiry, not one per client) and numbers flow across the expiries.
"""
import base64
import json
import os
import signal
import socket
import sys
import threading
import time
import unittest

from etcdcluster import EtcdCluster, ensure_etcd, ensure_etcdctl, post
from test_etcd_identity_faults import TTL_S, Daemon


def figure(name, value):
    print("FIGURE %s %s" % (name, value), flush=True)


def b64(s):
    return base64.b64encode(s.encode()).decode()


def nsconf(*defs):
    return "sequences.namespaces=" + json.dumps(list(defs))


class Proxy(threading.Thread):
    """TCP proxy to etcd on loopback: passes bytes both ways; drop_match (bytes): the next
    /v3/kv/txn request holding it is forwarded, etcd's answer dropped and the connection closed;
    blackhole: every connection closed at once; delay: seconds before each answer chunk."""

    def __init__(self, target_port):
        super().__init__(daemon=True)
        self.target = target_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.drop_match = None
        self.dropped = 0
        self.blackhole = False
        self.delay = 0.0
        self.conns = []
        self.closed = False

    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def run(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.blackhole:
                c.close()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=2)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            st = {"drop": False, "buf": b""}
            with self.lock:
                self.conns.append((c, u))
            threading.Thread(target=self.up, args=(c, u, st), daemon=True).start()
            threading.Thread(target=self.down, args=(c, u, st), daemon=True).start()

    @staticmethod
    def shut(c, u):
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def up(self, c, u, st):
        try:
            while True:
                data = c.recv(65536)
                if not data or self.blackhole:
                    break
                if data.startswith(b"POST "):
                    st["buf"] = b""
                st["buf"] = (st["buf"] + data)[-65536:]
                with self.lock:
                    m = self.drop_match
                    if m and b"/v3/kv/txn" in st["buf"] and m in st["buf"]:
                        st["drop"] = True  # before etcd can answer
                        self.drop_match = None
                u.sendall(data)
        except OSError:
            pass
        self.shut(c, u)

    def down(self, c, u, st):
        try:
            while True:
                data = u.recv(65536)
                if not data or self.blackhole:
                    break
                if st["drop"]:
                    with self.lock:
                        self.dropped += 1
                    break  # etcd applied it; the daemon never hears
                if self.delay:
                    time.sleep(self.delay)
                c.sendall(data)
        except OSError:
            pass
        self.shut(c, u)

    def cut_all(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for c, u in conns:
            self.shut(c, u)

    def close(self):
        self.closed = True
        self.sock.close()
        self.cut_all()


class SeqEtcd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = ensure_etcd()
        if reason:
            raise AssertionError(reason)  # CI is root: never a silent skip
        cls.ec = EtcdCluster(members=1).__enter__()
        cls.eport = int(cls.ec.endpoint(0).rsplit(":", 1)[1])

    @classmethod
    def tearDownClass(cls):
        cls.ec.close()

    def setUp(self):
        self.prefix = "/s%d/%s" % (os.getpid(), self._testMethodName)

    def daemon(self, *extra, endpoints=None):
        d = Daemon(endpoints or self.ec.endpoints(), self.prefix,
                   "--set", "sequences.retry_ms=100", *extra)
        self.addCleanup(d.close)
        return d

    def proxy(self):
        p = Proxy(self.eport)
        p.start()
        self.addCleanup(p.close)
        return p

    # ---- etcd's view ----------------------------------------------------------------------------

    def counter_key(self, name):
        return "%s/seq/next/%s" % (self.prefix, name)

    def counter(self, name):
        st, r = post(self.eport, "/v3/kv/range", {"key": b64(self.counter_key(name))})
        self.assertEqual(st, 200, r)
        kvs = r.get("kvs", [])
        return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None

    def history(self, name):
        """Every value the counter ever had, oldest first (walked back by revision)."""
        key, out, rev = b64(self.counter_key(name)), [], None
        for _ in range(100000):
            body = {"key": key}
            if rev is not None:
                body["revision"] = str(rev)
            st, r = post(self.eport, "/v3/kv/range", body, timeout=5)
            self.assertEqual(st, 200, r)
            kv = r["kvs"][0]
            out.append(json.loads(base64.b64decode(kv["value"])))
            mod, create = int(kv["mod_revision"]), int(kv["create_revision"])
            if mod == create:
                break
            rev = mod - 1
        out.reverse()
        return out

    def blocks(self, name):
        """The blocks etcd granted [lo, hi), a given-back rest cut off; asserts the format, every
        nonce once and the blocks disjoint."""
        hist = self.history(name)
        nonces = [v["nonce"] for v in hist]
        self.assertEqual(len(nonces), len(set(nonces)), "a claim reached etcd twice")
        blocks, prev = [], None
        for v in hist:
            self.assertEqual(v["v"], 1)
            for f in ("next", "lo", "hi"):
                self.assertIsInstance(v[f], str)
            nxt, lo, hi = int(v["next"]), int(v["lo"]), int(v["hi"])
            self.assertLessEqual(lo, hi)
            self.assertEqual(len(v["lease"]), 16)
            if lo < hi:
                self.assertEqual(nxt, hi)
                if prev is not None:
                    self.assertGreaterEqual(lo, prev, "a claim below the counter")
                blocks.append([lo, hi])
            elif prev is not None and nxt < prev:  # a give-back: the last block ends at next
                self.assertTrue(blocks and blocks[-1][1] == prev, v)
                blocks[-1][1] = nxt
            prev = nxt
        for (a, b), (c, _) in zip(blocks, blocks[1:]):
            self.assertLessEqual(b, c, "blocks overlap")
        return blocks

    def assert_inside(self, numbers, blocks):
        import bisect
        los = [b[0] for b in blocks]
        for n in numbers:
            i = bisect.bisect_right(los, n) - 1
            self.assertTrue(i >= 0 and blocks[i][0] <= n < blocks[i][1],
                            "%d issued outside every block etcd granted" % n)

    # ---- the daemon's view ----------------------------------------------------------------------

    @staticmethod
    def take(d, name, count=1):
        r = d.get("/seqs/%s?count=%d" % (name, count))
        if r.status == 200:
            return [int(x) for x in r.json()["ids"]]
        return "%d %s" % (r.status, r.body[:70].decode(errors="replace"))

    def wait_take(self, d, name, count=1, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.take(d, name, count)
            if isinstance(got, list):
                return got
            time.sleep(0.05)
        self.fail("no number from %s in %ss:\n%s" % (name, timeout, d.output()[-3000:]))

    def metric(self, d, name, labels):
        for line in d.get("/metrics").body.decode().splitlines():
            if line.startswith(name + "{") and labels in line:
                return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self, d):
        d.proc.send_signal(signal.SIGTERM)
        self.assertEqual(d.wait_exit(20), 0, d.output()[-3000:])

    # ---- tests ----------------------------------------------------------------------------------

    def test_fleet_no_duplicates_restart(self):
        conf = nsconf({"name": "a", "block": 120}, {"name": "b", "block": 60})
        pf = ("--set", "sequences.prefetch_percent=0")  # two blocks in hand: few 503
        ds = [self.daemon("--set", conf, *pf) for _ in range(3)]
        for d in ds:
            d.wait_listening(20)
            self.wait_take(d, "a")
        issued = {"a": [], "b": []}  # (daemon run, numbers in order)
        refused, asked, reasons = [0], [0], {}

        def draw(d, run, rounds):
            mine = {"a": [], "b": []}
            for i in range(rounds):
                for name, count in (("a", 3), ("b", 2)):
                    got = self.take(d, name, count)
                    asked[0] += 1
                    if isinstance(got, list):
                        mine[name].extend(got)
                    else:
                        refused[0] += 1
                        reasons[got] = reasons.get(got, 0) + 1
            for name in mine:
                issued[name].append((run, mine[name]))

        def phase(runs):
            ts = [threading.Thread(target=draw, args=(d, run, 60)) for run, d in runs]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)

        phase([(i, d) for i, d in enumerate(ds)])
        self.stop(ds[0])  # a clean stop: its rest given back unless another claimed after
        ds[0] = self.daemon("--set", conf, *pf)
        ds[0].wait_listening(20)
        issued["a"].append((6, self.wait_take(ds[0], "a")))  # its first renewal opens it
        phase([(3 + i, d) for i, d in enumerate(ds)])
        for name in ("a", "b"):
            every = [n for _, nums in issued[name] for n in nums]
            self.assertEqual(len(every), len(set(every)), "%s: a number issued twice" % name)
            for run, nums in issued[name]:
                self.assertEqual(nums, sorted(set(nums)), "%s run %d not increasing" % (name, run))
            blocks = self.blocks(name)
            self.assert_inside(every, blocks)
            figure("seq_etcd_%s_numbers" % name, len(every))
            figure("seq_etcd_%s_claims" % name, len(blocks))
        # 503 "being reserved" when a block runs out faster than etcd answers: a few at most
        figure("seq_etcd_refused", "%d/%d %s" % (refused[0], asked[0], reasons))
        self.assertLess(refused[0], asked[0] / 2, "too many 503 while blocks were claimable")
        ok = sum(self.metric(d, "snowflaked_seq_etcd_claims_total", 'result="ok"') or 0
                 for d in ds)
        self.assertGreater(ok, 0)

    def test_clean_stop_gives_back(self):
        conf = nsconf({"name": "c", "block": 100})
        d = self.daemon("--set", conf)
        d.wait_listening(20)
        first = self.wait_take(d, "c", 7)
        self.assertEqual(first, list(range(1, 8)))
        self.assertEqual(self.counter("c")["next"], "101")
        self.stop(d)
        v = self.counter("c")
        self.assertEqual((v["next"], v["lo"], v["hi"]), ("8", "8", "8"), v)
        d2 = self.daemon("--set", conf)
        d2.wait_listening(20)
        self.assertEqual(self.wait_take(d2, "c", 1), [8])  # no hole
        self.assertEqual(self.metric(d2, "snowflaked_seq_etcd_claims_total", 'result="ok"'), 1)
        self.blocks("c")

    def test_lost_answer_recovered(self):
        p = self.proxy()
        conf = nsconf({"name": "d", "block": 10})
        d = self.daemon("--set", conf, "--set", "sequences.prefetch_percent=50",
                        endpoints=p.endpoint())
        d.wait_listening(20)
        got = list(self.wait_take(d, "d", 5))
        with p.lock:
            p.drop_match = b64(self.counter_key("d")).encode()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (p.dropped == 0 or len(got) < 60):
            r = self.take(d, "d", 5)
            if isinstance(r, list):
                got.extend(r)
            else:
                time.sleep(0.05)
        self.assertEqual(p.dropped, 1, "the proxy dropped no claim's answer")
        self.assertEqual(len(got), len(set(got)))
        self.assertEqual(got, sorted(got))
        rec = self.metric(d, "snowflaked_seq_etcd_claims_total", 'result="recovered"')
        unk = self.metric(d, "snowflaked_seq_etcd_claims_total", 'result="unknown"')
        figure("seq_etcd_unknown", unk)
        figure("seq_etcd_recovered", rec)
        self.assertGreaterEqual(rec, 1, d.output()[-3000:])
        blocks = self.blocks("d")  # every nonce once: the lost claim was never sent again
        self.assert_inside(got, blocks)
        # recovered: no hole from the lost answer, the blocks follow each other
        for (_, b), (c, _) in zip(blocks, blocks[1:]):
            self.assertEqual(b, c)

    def test_sigstop_past_fence_issues_nothing(self):
        p = self.proxy()
        conf = nsconf({"name": "e", "block": 1000})
        d = self.daemon("--set", conf, endpoints=p.endpoint())
        d.wait_listening(20)
        before = self.wait_take(d, "e", 5)
        p.blackhole = True
        p.cut_all()
        d.proc.send_signal(signal.SIGSTOP)
        time.sleep(TTL_S + 1.5)  # the lease expired: past the fence
        d.proc.send_signal(signal.SIGCONT)
        t_end = time.monotonic() + 2.0
        answered = 0
        while time.monotonic() < t_end:  # etcd unreachable: no renewal, no re-claim
            got = self.take(d, "e", 1)
            self.assertNotIsInstance(got, list, "issued past its fence: %s" % got)
            answered += 1
            time.sleep(0.05)
        self.assertGreater(answered, 0)
        p.blackhole = False
        after = self.wait_take(d, "e", 5, timeout=30)
        self.assertGreater(after[0], before[-1])
        fenced = self.metric(d, "snowflaked_seq_fenced_total", 'namespace="e"')
        self.assertGreater(fenced, 0)
        self.assert_inside(before + after, self.blocks("e"))

    def test_created_over_the_api(self):
        """PUT /seq/{name}: the definition and the counter created together in etcd; another
        daemon putting the same definition serves it too (from the same counter), a restart
        lists it."""
        import sfharness
        admin = "admin-token-0123456789"
        args = ("--set", "auth.token=" + admin, "--set", "sequences.api_create=true")
        body = json.dumps({"start": 500, "block": 10}).encode()

        def put(d):
            with socket.create_connection(("127.0.0.1", d.port), timeout=5) as s:
                s.sendall(("PUT /seq/tickets HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s"
                           "\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                           "Connection: close\r\n\r\n" % (admin, len(body))).encode() + body)
                return sfharness.Reader(s).response().status

        a, b = self.daemon(*args), self.daemon(*args)
        a.wait_listening(20)
        b.wait_listening(20)
        self.assertIn(put(a), (200, 202))
        got_a = self.wait_take(a, "tickets", 3)
        self.assertEqual(got_a, [500, 501, 502])
        stored = self.history_def("tickets")
        self.assertEqual((stored["start"], stored["block"]), ("500", "10"))
        self.assertIn(put(b), (200, 202))  # exists with this definition: served
        got_b = self.wait_take(b, "tickets", 3)
        self.assertGreaterEqual(got_b[0], 510)
        self.stop(a)
        a2 = self.daemon(*args)
        a2.wait_listening(20)
        got_a2 = self.wait_take(a2, "tickets", 3)  # listed from etcd at start
        every = got_a + got_b + got_a2
        self.assertEqual(len(every), len(set(every)))
        self.assert_inside(every, self.blocks("tickets"))

    def history_def(self, name):
        st, r = post(self.eport, "/v3/kv/range",
                     {"key": b64("%s/seq/def/%s" % (self.prefix, name))})
        self.assertEqual(st, 200, r)
        return json.loads(base64.b64decode(r["kvs"][0]["value"]))

    def test_slow_etcd_p99(self):
        p = self.proxy()
        p.delay = 0.3
        conf = nsconf({"name": "f", "block": 1000})
        d = self.daemon("--set", conf, "--set", "sequences.prefetch_percent=0", "--set", "snowflake.etcd.ttl_s=8",
                        "--set", "snowflake.etcd.request_timeout_ms=1500",
                        "--set", "sequences.start_wait_ms=20000", endpoints=p.endpoint())
        d.wait_listening(40)
        self.wait_take(d, "f", 1, timeout=30)
        lat, refused, numbers = [], 0, []
        deadline = time.monotonic() + 20
        with socket.create_connection(("127.0.0.1", d.port), timeout=5) as s:
            import sfharness
            rd = sfharness.Reader(s)
            for _ in range(3000):
                if time.monotonic() > deadline:
                    break
                t0 = time.monotonic()
                s.sendall(b"GET /seqs/f?count=2 HTTP/1.1\r\nHost: x\r\n\r\n")
                r = rd.response()
                lat.append(time.monotonic() - t0)
                time.sleep(0.002)  # about 800 numbers/s: a block lasts longer than a claim
                if r.status == 200:
                    numbers.extend(int(x) for x in r.json()["ids"])
                else:
                    refused += 1
        lat.sort()
        p99 = lat[int(len(lat) * 0.99) - 1]
        figure("seq_etcd_slow_requests", len(lat))
        figure("seq_etcd_slow_p99_ms", round(p99 * 1000, 2))
        self.assertGreater(len(lat), 500)
        self.assertEqual(refused, 0)
        self.assertLess(p99, 0.25, "a request waited for etcd")
        self.assertEqual(numbers, sorted(set(numbers)))
        blocks = self.blocks("f")
        self.assertGreaterEqual(len(blocks), 2, "the run crossed no block boundary")
        self.assert_inside(numbers, blocks)


class SeqEtcdAuth(unittest.TestCase):
    JWT_TTL_S = 3
    take = staticmethod(SeqEtcd.take)
    wait_take = SeqEtcd.wait_take
    metric = SeqEtcd.metric

    @classmethod
    def setUpClass(cls):
        reason = ensure_etcd() or ensure_etcdctl()  # etcdctl: auth enable
        if reason:
            raise AssertionError(reason)
        cls.ec = EtcdCluster(members=1, auth="jwt", auth_prefixes=("/sa/",),
                             jwt_ttl="%ds" % cls.JWT_TTL_S).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.ec.close()

    def test_shared_token(self):
        prefix = "/sa/%d" % os.getpid()
        d = Daemon(self.ec.endpoints(), prefix,
                   "--set", nsconf({"name": "g", "block": 20}),
                   "--set", "sequences.prefetch_percent=0",
                   # authentications (bcrypt, RS256) are slow on a loaded machine
                   "--set", "snowflake.etcd.ttl_s=5",
                   "--set", "snowflake.etcd.request_timeout_ms=1000",
                   "--set", "snowflake.etcd.auth.username=" + self.ec.auth.USER,
                   "--set", "snowflake.etcd.auth.password_file=" + self.ec.auth.password_file)
        self.addCleanup(d.close)
        d.wait_listening(20)
        t0 = time.monotonic()
        got = self.wait_take(d, "g", 5)
        auth = "snowflaked_etcd_authentications_total"
        first = self.metric(d, auth, 'result="ok"')
        if time.monotonic() - t0 < 1.0:  # the claim's token has not expired yet: just one
            self.assertEqual(first, 1, "the source authenticated on its own")
        t_end = time.monotonic() + 2.5 * self.JWT_TTL_S
        refused = 0
        while time.monotonic() < t_end:  # a claim every 4 requests: across 2 expiries
            r = self.take(d, "g", 5)
            if isinstance(r, list):
                got.extend(r)
            else:
                refused += 1
                time.sleep(0.05)
        elapsed = time.monotonic() - t0 + 1
        oks = self.metric(d, auth, 'result="ok"')
        figure("seq_etcd_auth_ok", oks)
        figure("seq_etcd_auth_refused_requests", refused)
        self.assertEqual(got, sorted(set(got)))
        self.assertGreater(len(got), 100)
        # one client would authenticate at start + once per expiry; two unshared about twice that
        self.assertLessEqual(oks, 2 + int(elapsed / self.JWT_TTL_S), d.output()[-2000:])
        self.assertEqual(self.metric(d, auth, 'result="refused"'), 0)


if __name__ == "__main__":
    unittest.main()
