"""Fleet identity on etcd against a real 3-member etcd (issue 14, design-14 §5, step 8).

EtcdIdentityScenario: 12 snowflaked daemons (`snowflake.worker_id: "etcd"`, worker_bits 3 -> 8
slots, one loop each, ttl_s 3, fence_margin_ms 500) and ONE sfload over all of them for the whole
run (--tolerate-faults: a waiter answers 503 until it claims; --ids-out-v2 records checked
by idrecords.py at the end). Steps, each asserted, with FIGURE lines:
  1 race: 12 started at once -> exactly 8 hold distinct slots, 4 wait; a 13th with
    wait_for_slot false exits 1 naming the range;
  2 kill -9 a holder under load -> a waiter takes its slot only after the lease expired, above
    every ID of the dead one;
  3 SIGKILL the etcd leader -> no holder fenced;
  4 SIGKILL a second member (no quorum) -> every holder fenced within ttl - margin of the loss;
    both members restarted -> every holder resumes on the same slot;
  5 SIGSTOP a holder for ttl + 2 s while a waiter takes its slot, SIGCONT -> the frozen one issues
    nothing (at most its in-flight requests), finds every other slot held and waits, unready
    (wait_for_slot; without it, it would exit 75);
  6 SIGTERM a holder -> its owner key is gone at once (revoked), a waiter claims within ~ttl/4;
  7 end: sfload exit 0, 0 duplicates, per (datacenter, worker) non-interleaving intervals in
    receive order, every holder issued IDs.
StaticFleetTest (no etcd): the same sfload + checker against static worker ids: a killed
daemon's worker id handed to a daemon started later passes; two daemons given one worker id at
the same time are caught.

Run: cd test/cluster && SNOWFLAKED_BIN=../../build/snowflaked SFLOAD_BIN=../../build/sfload \
     python3 -m unittest -v test_etcd_identity   (ctest -R etcd_identity does this)."""
import base64
import json
import os
import re
import signal
import statistics
import tempfile
import time
import unittest

from etcdcluster import EtcdCluster, b64, ensure_etcd, post
from fleet import BINARY, SFLOAD, Daemon, Load, etcd_sets, figure, low_port, wait_until
from idrecords import Layout, check_fleet, read_records

LAYOUT = "41/5/3/12"          # worker_bits 3: 8 slots per datacenter
LAY = Layout.parse(LAYOUT)
DC = 1                        # not 0, so a datacenter decoding error shows
TTL_S = 3                     # T - M - R = 1.75 s: a leader election (0.5-1.2 s plus a timed-out call) stays unfenced
MARGIN_MS = 500
RENEW_S = TTL_S / 4.0         # the keeper renews every ttl/4
PREFIX = "/sfci"
SLACK = 1.0                   # scheduling slack on a loaded 2-core machine
EX_TEMPFAIL = 75
IDS_PER_REQUEST = 10
CLAIM_RE = re.compile(r"etcd identity: claimed datacenter (\d+) worker[s]? (\d+)")


def layout_sets():
    return ["snowflake.worker_bits=3", "snowflake.datacenter_id=%d" % DC]


def ensure_binaries(test):
    for path in (BINARY, SFLOAD):
        test.assertTrue(os.access(path, os.X_OK), "not built: %s" % path)


class StaticFleetTest(unittest.TestCase):
    """sfload over several targets + the interval checker against the real binary, static ids."""

    def setUp(self):
        ensure_binaries(self)
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_static_fleet.")
        self.daemons = []
        self.loads = []

    def tearDown(self):
        for ld in self.loads:
            ld.close()
        for d in self.daemons:
            d.close()
        self.tmp.cleanup()

    def start(self, worker, port=None):
        d = Daemon(layout_sets() + ["snowflake.worker_id=%d" % worker], name="w%d" % worker,
                   port=port)
        self.daemons.append(d)
        return d

    def test_handoff_of_a_killed_workers_id(self):
        ds = [self.start(w) for w in range(4)]
        for d in ds:
            wait_until(d.port_open, 10, "daemon %s listening" % d.name)
        successor_port = low_port()  # listed now, listening only later (as an etcd waiter)
        rec = os.path.join(self.tmp.name, "ids.v2")
        urls = [d.url("/ids?count=10") for d in ds] + ["http://127.0.0.1:%d/ids?count=10"
                                                       % successor_port]
        load = Load(urls, seconds=6, rate=500, out=rec, min_ids=1000)
        self.loads.append(load)
        time.sleep(1.5)
        ds[2].signal(signal.SIGKILL)
        ds[2].wait_exit(5)
        t_kill = time.monotonic()
        time.sleep(0.5)
        succ = self.start(2, port=successor_port)
        wait_until(succ.port_open, 10, "successor listening")
        rc, rep, err = load.finish()
        self.assertEqual(rc, 0, err)
        self.assertEqual(rep["verify"]["duplicates"], 0)
        recs = read_records(rec)
        self.assertEqual(len(recs), rep["verify"]["ids"])
        fleet = check_fleet(recs, LAY)
        self.assertEqual(fleet.problems(), [], fleet.summary())
        self.assertEqual([t.target for t in fleet.tenures[(DC, 2)]], [2, 4], fleet.summary())
        self.assertTrue(all(fleet.per_target[k] > 0 for k in range(5)), fleet.per_target)
        # the killed daemon: nothing received after its kill (sfload's clock lags ours)
        self.assertEqual([r for r in recs if r.target == 2 and r.ms > load.ms(t_kill)], [])
        print(fleet.summary(), flush=True)

    def test_two_holders_of_one_worker_are_caught(self):
        # Two processes with one identity on one host are refused (cluster/hostclaim.h,
        # test_exclusive); two hosts given one worker id are not. b stands in for the second
        # host: layout 41/5/4/11 with worker 6 puts the same bits where 41/5/3/12's worker 3
        # sits (its extra worker bit is the top bit of 41/5/3/12's sequence, 0 below 2048 IDs
        # a millisecond), so both issue IDs of datacenter 1, worker 3 under LAY.
        a = self.start(3)
        b = Daemon(["snowflake.datacenter_id=%d" % DC, "snowflake.worker_bits=4",
                    "snowflake.sequence_bits=11", "snowflake.worker_id=6"], name="w3-alias")
        self.daemons.append(b)
        for d in (a, b):
            wait_until(d.port_open, 10, "daemon listening")
        rec = os.path.join(self.tmp.name, "dup.v2")
        load = Load([a.url("/ids?count=10"), b.url("/ids?count=10")], seconds=2, rate=400,
                    out=rec)
        self.loads.append(load)
        rc, rep, err = load.finish()
        fleet = check_fleet(read_records(rec), LAY)
        self.assertTrue(fleet.interleave, fleet.summary())
        # sfload fails exactly when the two daemons happened to issue the same ID
        self.assertEqual(rc != 0, bool(fleet.duplicates), err)


def owner_key(worker):
    return "%s/owner/%07d/%07d" % (PREFIX, DC, worker)


class Owner:
    """The owner record of a slot as etcd holds it."""

    def __init__(self, kv):
        self.lease = int(kv.get("lease", "0"))
        self.create_revision = int(kv["create_revision"])
        self.mod_revision = int(kv["mod_revision"])
        raw = base64.b64decode(kv.get("value", "")).decode(errors="replace")
        try:
            self.value = json.loads(raw)
        except ValueError:
            self.value = {"unparsable": raw}
        self.pid = self.value.get("pid")

    def __repr__(self):
        return "Owner(lease %d, pid %s, rev %d)" % (self.lease, self.pid, self.create_revision)


class EtcdView:
    """Reads of the slots straight from etcd (the JSON gateway of any live member)."""

    def __init__(self, ec):
        self.ec = ec

    def _post(self, path, body):
        for i in range(self.ec.n):
            if not self.ec.alive(i):
                continue
            st, j = post(self.ec.client_ports[i], path, body, 1.0)
            if st == 200:
                return j
        raise AssertionError("no etcd member answered %s" % path)

    def owner(self, worker, revision=None):
        """Owner or None (the key is absent), at revision if given."""
        body = {"key": b64(owner_key(worker))}
        if revision is not None:
            body["revision"] = revision
        kvs = self._post("/v3/kv/range", body).get("kvs", [])
        return Owner(kvs[0]) if kvs else None

    def lease_ttl(self, lease):
        """Remaining TTL in seconds; -1 when the lease is gone (expired or revoked)."""
        return int(self._post("/v3/lease/timetolive", {"ID": lease}).get("TTL", "-1"))


def claimed_worker(d, latest=False):
    """The worker d's log says it claimed, or None; AssertionError if it claimed twice,
    unless latest (a holder that lost its slot and waited may rightly claim another): then
    the last claim counts."""
    found = CLAIM_RE.findall(d.output())
    if not found:
        return None
    if latest:
        found = found[-1:]
    if len(found) > 1:
        raise AssertionError("daemon %s claimed more than once: %s" % (d.name, found))
    dc, w = int(found[0][0]), int(found[0][1])
    if dc != DC:
        raise AssertionError("daemon %s claimed datacenter %d, not %d" % (d.name, dc, DC))
    return w


def logs(daemons, lines=4):
    """The last lines of each daemon's log, for failure messages."""
    return "\n".join("--- %s (pid %d, %s):\n%s" % (
        d.name, d.pid, "running" if d.alive() else "exit %s" % d.proc.returncode,
        "\n".join(d.output().splitlines()[-lines:])) for d in daemons)


def ready(d):
    return d.http("/readyz", timeout=1.0)[0] == 200


class EtcdIdentityScenario(unittest.TestCase):
    LOAD_S = 65          # sfload -t: the whole scenario after the race must fit (asserted)
    RATE = 600           # requests/s over all targets: 25 per connection, 10 IDs each
    CONNS = 2            # connections per target (each in-flight request: one response)

    def setUp(self):
        reason = ensure_etcd()
        if reason:
            self.fail(reason)  # CI is root: never a silent skip
        ensure_binaries(self)
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_etcd_identity.")
        self.addCleanup(self.tmp.cleanup)
        self.daemons = []
        self.load = None
        self.ec = EtcdCluster().__enter__()
        self.addCleanup(self.ec.close)
        self.addCleanup(self._stop_all)
        self.etcd = EtcdView(self.ec)

    def _stop_all(self):
        if self.load:
            self.load.close()
        for d in self.daemons:
            d.close()

    def sets(self, wait=True):
        return layout_sets() + etcd_sets(self.ec.endpoints(), PREFIX, TTL_S, MARGIN_MS, wait)

    def new_holder_of(self, worker, among, timeout, what):
        """The daemon of `among` whose latest claim in its log is worker, and when it was seen
        (among may hold a former holder that lost its slot and waits: its latest claim counts)."""
        d = wait_until(lambda: next((x for x in among
                                     if claimed_worker(x, latest=True) == worker), None),
                       timeout, what)
        return d, time.monotonic()

    def test_scenario(self):
        # -- 1. race: 12 at once, 8 slots ---------------------------------------------------------
        fleet = [Daemon(self.sets(), name="n%02d" % k) for k in range(12)]
        self.daemons += fleet
        ready_at = {}

        def eight_ready():
            for d in fleet:
                self.assertTrue(d.alive(), "daemon %s exited:\n%s" % (d.name, d.output()))
                if d not in ready_at and d.port_open() and ready(d):
                    ready_at[d] = time.monotonic()
            return len(ready_at) >= 8
        wait_until(eight_ready, 15 + SLACK, "8 daemons ready")
        time.sleep(2 * RENEW_S + SLACK)  # a 9th would have claimed by now
        eight_ready()
        holders = [d for d in fleet if d in ready_at]
        waiters = [d for d in fleet if d not in ready_at]
        self.assertEqual(len(holders), 8, logs(fleet))
        slots = {d: claimed_worker(d) for d in holders}
        self.assertEqual(sorted(slots.values()), list(range(8)), slots)
        for d in holders:
            st, body, _ = d.http("/id")
            self.assertEqual(st, 200, body)
            i = int(json.loads(body)["id"])
            self.assertEqual(LAY.slot(i), (DC, slots[d]), "ID %d of %s" % (i, d.name))
            o = self.etcd.owner(slots[d])
            self.assertIsNotNone(o, "no owner key for worker %d" % slots[d])
            self.assertEqual(o.pid, d.pid, o.value)
        for d in waiters:  # listening but not ready, no IDs (main 772f22e; iface-14 had no port)
            self.assertTrue(d.alive(), d.output())
            self.assertIsNone(claimed_worker(d))
            self.assertIn("waiting for a free slot", d.output())
            st, body, _ = d.http("/readyz")
            self.assertEqual(st, 503, body)
            self.assertIn("etcd: waiting for a free slot in datacenter %d (workers 0..7)" % DC,
                          body)
            st, body, _ = d.http("/id")
            self.assertEqual(st, 503, body)
            self.assertEqual(d.metric("snowflaked_identity_slots_held"), 0.0)
        claim_s = sorted(ready_at[d] - d.t_start for d in holders)
        figure("claim_p50_s", "%.2f" % statistics.median(claim_s))
        figure("claim_max_s", "%.2f" % claim_s[-1])
        extra = Daemon(self.sets(wait=False), name="n12")
        self.daemons.append(extra)
        self.assertEqual(extra.wait_exit(15), 1, extra.output())
        msg = extra.output()
        self.assertIn("all 8 slots of datacenter %d (workers 0..7) under %s are held"
                      % (DC, PREFIX), msg)
        self.assertFalse(extra.port_open())

        # one sfload over every daemon (waiters too: 503 until they claim) for the whole run
        index = {d: k for k, d in enumerate(fleet)}
        rec = os.path.join(self.tmp.name, "ids.v2")
        self.load = Load([d.url("/ids?count=%d" % IDS_PER_REQUEST) for d in fleet],
                         seconds=self.LOAD_S,
                         rate=self.RATE, out=rec, connections_per_target=self.CONNS,
                         min_ids=10000)
        time.sleep(2.0)

        # -- 2. kill -9 a holder under load ---------------------------------------------------------
        victim = holders[0]
        w = slots[victim]
        before = self.etcd.owner(w)
        self.assertEqual(before.pid, victim.pid)
        victim.signal(signal.SIGKILL)
        self.assertEqual(victim.wait_exit(5), -signal.SIGKILL)
        t_kill = time.monotonic()
        remaining = self.etcd.lease_ttl(before.lease)  # the dead holder's lease still runs
        self.assertGreater(remaining, -1, "lease of a kill -9ed holder gone at once")
        seen_absent = False

        def new_owner():
            nonlocal seen_absent
            o = self.etcd.owner(w)
            if o is None:
                seen_absent = True
            return o if o is not None and o.lease != before.lease else None
        after = wait_until(new_owner, 3 * TTL_S + SLACK, "a new owner of worker %d" % w)
        t_new = time.monotonic()
        heir, _ = self.new_holder_of(w, waiters, 5, "the waiter that claimed worker %d" % w)
        self.assertEqual(after.pid, heir.pid, after.value)
        # etcd's history: the dead holder's key was deleted (its lease expired) before the claim
        self.assertIsNone(self.etcd.owner(w, revision=after.create_revision - 1),
                          "owner key of worker %d still there just before the new claim" % w)
        self.assertEqual(self.etcd.lease_ttl(before.lease), -1)
        reclaim = t_new - t_kill
        figure("reclaim_after_kill9_s", "%.2f" % reclaim)
        figure("reclaim_gap_seen_by_polling", int(seen_absent))
        # the lease ran at least TTL from the last renewal (at most ttl/4 before the kill)
        self.assertGreaterEqual(reclaim, TTL_S - 2 * RENEW_S,
                                "worker %d re-claimed %.2f s after kill -9" % (w, reclaim))
        wait_until(lambda: heir.port_open() and ready(heir), 5 + SLACK, "the heir ready")
        waiters.remove(heir)
        holders = [d for d in holders if d is not victim] + [heir]
        slots[heir] = w
        handoffs = {w: [index[victim], index[heir]]}
        time.sleep(1.0)

        # -- 3. SIGKILL the etcd leader: nobody fenced --------------------------------------------
        fenced_before = {d: d.metric("snowflaked_identity_fenced_seconds_total") for d in holders}
        for d, v in fenced_before.items():
            self.assertIsNotNone(v, "no snowflaked_identity_fenced_seconds_total on %s" % d.name)
        leader = self.ec.wait_leader()
        self.ec.kill(leader)
        t_leader = time.monotonic()
        new_leader = None
        not_ready = []
        while time.monotonic() - t_leader < 2 * TTL_S:
            for d in holders:
                st, body, _ = d.http("/readyz", timeout=1.0)
                if st == 503:  # fenced (no answer within 1 s on a loaded machine is not)
                    not_ready.append((round(time.monotonic() - t_leader, 2), d.name, st, body))
            if new_leader is None:
                new_leader = self.ec.leader()
                if new_leader is not None:
                    figure("etcd_leader_failover_s", "%.2f" % (time.monotonic() - t_leader))
            time.sleep(0.05)
        fenced_now = [d for d in holders
                      if d.metric("snowflaked_identity_fenced_seconds_total") != fenced_before[d]]
        self.assertEqual((not_ready, [d.name for d in fenced_now]), ([], []),
                         "holders fenced after the etcd leader's death (leader %d killed):\n%s"
                         % (leader, logs(fenced_now or holders, lines=8)))
        renew_max = 0.0
        for d in holders:
            self.assertTrue(d.alive(), d.output())
            renew_max = max(renew_max, d.metric("snowflaked_identity_renewal_max_seconds") or 0)
        figure("renewal_max_s", "%.3f" % renew_max)
        if new_leader is None:
            new_leader = self.ec.wait_leader()

        # -- 4. SIGKILL a second member (the new leader): quorum lost -> all fenced ----------------
        self.ec.kill(new_leader)
        t_loss = time.monotonic()
        fenced_at = {}

        def all_fenced():
            for d in holders:
                self.assertTrue(d.alive(), "%s exited on quorum loss:\n%s" % (d.name, d.output()))
                if d not in fenced_at and d.http("/readyz", timeout=1.0)[0] == 503:
                    fenced_at[d] = time.monotonic()
            return len(fenced_at) == len(holders)
        wait_until(all_fenced, 3 * TTL_S + SLACK, "every holder fenced",
                   interval=0.03)
        fenced_s = sorted(t - t_loss for t in fenced_at.values())
        figure("fenced_after_quorum_loss_p50_s", "%.2f" % statistics.median(fenced_s))
        figure("fenced_after_quorum_loss_max_s", "%.2f" % fenced_s[-1])
        self.assertLessEqual(fenced_s[-1], TTL_S - MARGIN_MS / 1000.0 + SLACK, fenced_s)
        for d in holders:
            st, body, hdr = d.http("/readyz")
            self.assertEqual(st, 503, body)
            self.assertIn("etcd", json.loads(body).get("reason", ""), body)
            st, body, hdr = d.http("/id")
            self.assertEqual(st, 503, body)
            self.assertIn("retry-after", hdr)
            self.assertEqual(d.metric("snowflaked_identity_fenced"), 1.0)
        time.sleep(0.5)
        self.ec.restart(leader)
        self.ec.restart(new_leader)
        t_restart = time.monotonic()
        resumed_at = {}

        def all_resumed():
            for d in holders:
                self.assertTrue(d.alive(), "%s exited during the quorum loss:\n%s"
                                % (d.name, d.output()))
                if d not in resumed_at and ready(d):
                    resumed_at[d] = time.monotonic()
            return len(resumed_at) == len(holders)
        wait_until(all_resumed, 20, "every holder ready again")
        resume_s = sorted(t - t_restart for t in resumed_at.values())
        figure("resume_after_restart_max_s", "%.2f" % resume_s[-1])
        for d in holders:
            self.assertEqual(claimed_worker(d), slots[d])  # same slot, no second claim
            self.assertEqual(self.etcd.owner(slots[d]).pid, d.pid)
            self.assertEqual(d.metric("snowflaked_identity_fenced"), 0.0)
        time.sleep(1.0)

        # -- 5. SIGSTOP a holder for ttl + 2 s; a waiter takes its slot; SIGCONT -------------------
        frozen = holders[1]
        wf = slots[frozen]
        frozen_lease = self.etcd.owner(wf).lease
        frozen.signal(signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            taker, t_taken = self.new_holder_of(wf, waiters, TTL_S + 2 + SLACK,
                                                "a waiter claiming the frozen worker %d" % wf)
            figure("freeze_takeover_s", "%.2f" % (t_taken - t_stop))
            self.assertNotEqual(self.etcd.owner(wf).lease, frozen_lease)
            time.sleep(max(0.0, t_stop + TTL_S + 2 - time.monotonic()))
        finally:
            frozen.signal(signal.SIGCONT)
        t_cont = time.monotonic()
        # It finds its slot taken and every other one held: with wait_for_slot it becomes a
        # waiter (without, it would exit 75), unready, issuing nothing.
        def frozen_waits():
            self.assertTrue(frozen.alive(), frozen.output())
            st, body, _ = frozen.http("/readyz")
            return st == 503 and "waiting for a free slot" in body
        wait_until(frozen_waits, TTL_S * 2 + SLACK, "the frozen holder waiting after SIGCONT")
        figure("frozen_waiting_after_sigcont_s", "%.2f" % (time.monotonic() - t_cont))
        self.assertEqual(frozen.metric("snowflaked_identity_slots_held"), 0.0)
        self.assertEqual(frozen.http("/id")[0], 503)
        wait_until(lambda: taker.port_open() and ready(taker), 5 + SLACK, "the taker ready")
        waiters.remove(taker)
        waiters.append(frozen)
        holders = [d for d in holders if d is not frozen] + [taker]
        slots[taker] = wf
        handoffs[wf] = [index[frozen], index[taker]]
        time.sleep(1.0)

        # -- 6. SIGTERM a holder: revoked, free at once, a waiter claims within ~ttl/4 -------------
        leaving = holders[1]
        wg = slots[leaving]
        lease_g = self.etcd.owner(wg).lease
        leaving.signal(signal.SIGTERM)
        t_term = time.monotonic()  # from here on the frozen one may hold a slot again
        t_free = None
        while leaving.alive() and time.monotonic() - t_term < 15:  # when the key goes
            o = self.etcd.owner(wg)
            if t_free is None and (o is None or o.lease != lease_g):
                t_free = time.monotonic()
            time.sleep(0.02)
        self.assertEqual(leaving.wait_exit(1), 0, leaving.output())
        t_exit = time.monotonic()
        o = self.etcd.owner(wg)
        self.assertTrue(o is None or o.lease != lease_g, "worker %d still owned after exit" % wg)
        self.assertEqual(self.etcd.lease_ttl(lease_g), -1, "lease not revoked")
        t_free = t_free or t_exit
        figure("sigterm_to_exit_s", "%.2f" % (t_exit - t_term))
        figure("sigterm_to_slot_free_s", "%.2f" % (t_free - t_term))
        successor, t_succ = self.new_holder_of(wg, waiters, RENEW_S * 2 + SLACK,
                                               "a waiter claiming the released worker %d" % wg)
        figure("revoke_to_reclaim_s", "%.2f" % (t_succ - t_free))
        wait_until(lambda: successor.port_open() and ready(successor), 5 + SLACK,
                   "the successor ready")
        waiters.remove(successor)
        holders = [d for d in holders if d is not leaving] + [successor]
        slots[successor] = wg
        handoffs[wg] = [index[leaving], index[successor]]
        time.sleep(1.0)

        # -- 7. end -----------------------------------------------------------------------------
        self.assertTrue(self.load.running(),
                        "the scenario outlasted sfload's -t %d s: raise LOAD_S" % self.LOAD_S)
        rc, rep, err = self.load.finish()
        self.assertIsNotNone(rep, err)
        self.assertEqual(rc, 0, err)
        v = rep["verify"]
        self.assertEqual((v["duplicates"], v["non_increasing"], v["malformed"]), (0, 0, 0), v)
        recs = read_records(rec)
        self.assertEqual(len(recs), v["ids"])
        # the frozen holder: what it sent after SIGCONT (a second after SIGSTOP, sfload has read
        # everything sent before the freeze) until step 6 is at most its in-flight requests
        ki = index[frozen]
        after_freeze = [r for r in recs if r.target == ki and
                        self.load.ms(t_stop) + 1000 < r.ms < self.load.ms(t_term)]
        figure("frozen_ids_after_sigcont", len(after_freeze))
        self.assertLessEqual(len(after_freeze), self.CONNS * IDS_PER_REQUEST,
                             "more than its in-flight responses: %s" % (after_freeze[:20],))
        fleet_rep = check_fleet(recs, LAY)
        print(fleet_rep.summary(), flush=True)
        self.assertEqual(fleet_rep.problems(late_allowed={ki: len(after_freeze)}), [],
                         fleet_rep.summary())
        self.assertEqual(sorted(fleet_rep.tenures), [(DC, k) for k in range(8)])
        for worker in range(8):  # exactly the expected holders issued for each worker id
            expected = handoffs.get(worker) or [index[d] for d in slots if slots[d] == worker]
            self.assertEqual([t.target for t in fleet_rep.tenures[(DC, worker)]], expected,
                             fleet_rep.summary())
        ever_held = set(holders) | {victim, frozen, leaving}
        for d in fleet:
            n = fleet_rep.per_target[index[d]]
            if d in ever_held:
                self.assertGreater(n, 0, "holder %s issued nothing" % d.name)
            else:
                self.assertEqual(n, 0, "waiter %s issued IDs" % d.name)
        # a clean stop of everyone still running: exit 0 (a waiter too), no sanitizer report
        for d in fleet:
            if d.alive():
                d.signal(signal.SIGTERM)
        for d in fleet:
            if d in (victim, leaving):
                continue
            self.assertEqual(d.wait_exit(15), 0, d.output())
            self.assertNotIn("runtime error:", d.output())
            self.assertNotIn("Sanitizer", d.output())


if __name__ == "__main__":
    unittest.main()
