"""cluster/etcd_client against a real 3-member etcd (test/cluster/etcdcluster.py), through
etcd_probe (one client for the whole run, as the keeper thread would have): grant, a claim txn
wins, a second claim loses and sees the holder, keepalive renews, revoke frees the slot; the leader
killed -> calls succeed on another member within a few seconds; a second member killed (no quorum)
-> calls fail within the request timeout, never hang; both restarted -> calls succeed again."""
import json
import os
import subprocess
import time
import unittest

from etcdcluster import EtcdCluster, ensure_etcd

PROBE = os.environ.get("ETCD_PROBE_BIN",
                       os.path.join(os.path.dirname(__file__), "..", "..", "build", "etcd_probe"))
TIMEOUT_MS = 1000


def figure(name, value):
    print("FIGURE %s %s" % (name, value), flush=True)


class Probe:
    def __init__(self, endpoints):
        self.p = subprocess.Popen([PROBE, endpoints, str(TIMEOUT_MS)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def do(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()  # every call is bounded by TIMEOUT_MS x endpoints
        if not out:
            raise AssertionError("etcd_probe exited (%s) on %r" % (self.p.poll(), line))
        return json.loads(out)

    def until_ok(self, line, seconds):
        """Repeats line until it succeeds; (answer, elapsed s, attempts)."""
        t0 = time.monotonic()
        n = 0
        while True:
            n += 1
            r = self.do(line)
            if r["ok"] or time.monotonic() - t0 > seconds:
                return r, time.monotonic() - t0, n
            time.sleep(0.05)

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
            self.p.wait(5)
            self.p.stdout.close()
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait(5)


class EtcdClientTest(unittest.TestCase):
    def setUp(self):
        reason = ensure_etcd()
        if reason:
            self.fail(reason)  # CI is root: never a silent skip
        self.assertTrue(os.path.exists(PROBE), "build etcd_probe first (%s)" % PROBE)
        t0 = time.monotonic()
        self.ec = EtcdCluster().__enter__()
        figure("etcd_cluster_ready_s", "%.2f" % (time.monotonic() - t0))
        self.addCleanup(self.ec.close)

    def test_claim_keepalive_revoke(self):
        pr = Probe(self.ec.endpoints())
        self.addCleanup(pr.close)
        r = pr.do("grant 4242 5")
        self.assertTrue(r["ok"], r)
        self.assertGreaterEqual(r["ttl"], 5)
        again = pr.do("grant 4242 5")  # our own ID: a retried grant cannot make a second lease
        self.assertEqual((again["ok"], again.get("code")), (False, 9), again)
        self.assertTrue(pr.do("grant 4343 5")["ok"])
        won = pr.do("claim /t/owner/0 holderA 4242")
        self.assertEqual((won["ok"], won["succeeded"]), (True, True), won)
        lost = pr.do("claim /t/owner/0 holderB 4343")
        self.assertEqual((lost["ok"], lost["succeeded"]), (True, False), lost)
        self.assertEqual([(kv["value"], kv["lease"]) for kv in lost["kvs"]], [("holderA", 4242)])
        for _ in range(3):
            ka = pr.do("keepalive 4242")
            self.assertTrue(ka["ok"], ka)
            self.assertGreaterEqual(ka["ttl"], 4)
        self.assertEqual(pr.do("keepalive 999")["ttl"], 0)  # unknown lease: lost
        self.assertTrue(pr.do("revoke 4242")["ok"])
        self.assertEqual(pr.do("range /t/owner/0")["kvs"], [])
        self.assertTrue(pr.do("revoke 4242")["was_gone"])
        won = pr.do("claim /t/owner/0 holderB 4343")
        self.assertEqual((won["ok"], won["succeeded"]), (True, True), won)
        unknown = pr.do("claim /t/owner/1 x 777")  # put bound to an unknown lease: whole txn fails
        self.assertEqual((unknown["ok"], unknown.get("code")), (False, 5), unknown)

    def test_failover_and_quorum_loss(self):
        leader = self.ec.wait_leader()
        # the leader first in the list, so the client is talking to it when it dies
        order = [leader] + [i for i in range(3) if i != leader]
        pr = Probe(self.ec.endpoints(order))
        self.addCleanup(pr.close)
        self.assertTrue(pr.do("grant 5151 10")["ok"])
        self.assertTrue(pr.do("keepalive 5151")["ok"])
        self.ec.kill(leader)
        t_kill = time.monotonic()
        r, took, n = pr.until_ok("keepalive 5151", 8.0)
        self.assertTrue(r["ok"], r)
        self.assertNotEqual(r["endpoint"], self.ec.endpoint(leader)[7:])
        self.assertGreater(r["ttl"], 0)
        figure("etcd_failover_keepalive_s", "%.2f" % (time.monotonic() - t_kill))
        c, took, n = pr.until_ok("claim /t/owner/2 h 5151", 8.0)
        self.assertTrue(c["ok"] and c["succeeded"], c)
        # quorum lost: every call fails within the timeout (x the 2 endpoints it may try), no hang
        second = [i for i in range(3) if i != leader and self.ec.alive(i)][0]
        self.ec.kill(second)
        t_kill = time.monotonic()
        # A leader keeps answering keepalives from its own lessor until it notices the lost quorum
        # (check-quorum, about one election timeout): wait for the first failure, bounded.
        while pr.do("keepalive 5151")["ok"]:
            self.assertLess(time.monotonic() - t_kill, 5.0, "calls still succeed without quorum")
            time.sleep(0.05)
        figure("etcd_no_quorum_first_failure_s", "%.2f" % (time.monotonic() - t_kill))
        worst = 0
        for line in ("keepalive 5151", "range /t/owner/2", "claim /t/owner/3 h 5151",
                     "grant 6161 5", "keepalive 5151"):
            t0 = time.monotonic()
            r = pr.do(line)
            dt = time.monotonic() - t0
            worst = max(worst, dt)
            self.assertFalse(r["ok"], r)
            self.assertIn(r["kind"], ("unavailable", "server"), r)
            self.assertLess(dt, 3 * TIMEOUT_MS / 1000 + 1.0, r)
        figure("etcd_no_quorum_call_max_s", "%.2f" % worst)
        self.ec.restart(leader)
        self.ec.restart(second)
        t_restart = time.monotonic()
        r, took, n = pr.until_ok("keepalive 5151", 20.0)
        self.assertTrue(r["ok"], r)
        self.assertGreater(r["ttl"], 0)  # leader changes extend leases (design §1)
        figure("etcd_recovery_keepalive_s", "%.2f" % (time.monotonic() - t_restart))
        r, took, n = pr.until_ok("range /t/owner/2", 10.0)
        self.assertEqual([kv["lease"] for kv in r["kvs"]], [5151], r)


if __name__ == "__main__":
    unittest.main()
