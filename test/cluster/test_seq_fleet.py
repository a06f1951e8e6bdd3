"""Segment-mode sequences on a fleet (ctest seq_fleet): 5 daemons with worker_id "etcd" on a
3-member etcd draw numbers from two namespaces (`fixed`, block 50; `adapt`, adaptive 50..800)
under one sfload per namespace over every daemon for ~36 s while
  - a holder is killed with kill -9 and restarted on its port 2 s later,
  - a holder is SIGSTOPped for TTL + 2 s (past its fence, its lease expires) and resumed,
  - the etcd leader is killed and restarted 3 s later,
  - etcd loses its quorum for 1.5 s (two members killed, below the fence: nobody fences).
At the end every daemon gets SIGTERM (exit 0, the unissued rest given back where it can be),
etcd's history of every counter and owner key is read back (a watch from revision 1) and
seqcheck.py checks the records against it: 0 duplicates, every number in a block that stayed
granted, claimed by the lease of the incarnation that answered, per-incarnation order, the
frozen daemon silent between SIGCONT and its new lease (in-flight answers aside), holes within
2 blocks per crash / stop without give-back / lost lease + 1 block per unrecovered unknown
claim + what was lost in flight. FIGURE lines: numbers, etcd writes per 1,000 numbers, holes
and their bound per namespace; every etcd round trip of the sources (their metric, last seen,
reads included) per 1,000 numbers of both namespaces.

Run: cd test/cluster && SNOWFLAKED_BIN=../../build/snowflaked SFLOAD_BIN=../../build/sfload \
     python3 -m unittest -v test_seq_fleet"""
import json
import os
import re
import signal
import tempfile
import time
import unittest

from etcdcluster import EtcdCluster, ensure_etcd
from fleet import BINARY, SFLOAD, Daemon, Load, etcd_sets, figure, low_port, wait_until
from idrecords import read_records
from seqcheck import (Freeze, SeqInc, check_namespace, counter_history, holder_by_time,
                      lease_owner_fn, owner_leases, resumed_after, watch_events)

PREFIX = "/sfseq"
DC = 1
TTL_S = 3
MARGIN_MS = 500
DAEMONS = 5
LOAD_S = 36
RATE = 120              # requests/s per namespace over all daemons
COUNT = 5               # numbers per request
CONNS = 2               # sfload connections per daemon and namespace
TIMEOUT_MS = 1000
NAMESPACES = [{"name": "fixed", "block": 50},
              {"name": "adapt", "adaptive": True, "block": 50, "block_min": 50,
               "block_max": 800}]
BLOCK_MAX = {"fixed": 50, "adapt": 800}
BAD_LOG = ("runtime error:", "Sanitizer", "Assertion", "assertion failed")


def seq_sets(endpoints):
    return (["snowflake.worker_bits=3", "snowflake.datacenter_id=%d" % DC,
             "sequences.namespaces=" + json.dumps(NAMESPACES),
             "sequences.adaptive_block_ms=2000"]
            + etcd_sets(endpoints, PREFIX, TTL_S, MARGIN_MS))


class Inc:
    """One daemon process on one port."""

    def __init__(self, pos, gen, d):
        self.pos, self.gen, self.d = pos, gen, d
        self.name = "n%d.%d" % (pos, gen)
        self.t_spawn, self.wall_spawn, self.t_end = time.monotonic(), time.time(), None
        self.ended = None
        self.unknown = self.recovered = 0.0
        self.claims_ok = 0.0
        self.round_trips = 0.0  # snowflaked_seq_etcd_round_trips_total: claims, reads, give-backs

    def poll_metrics(self):
        text = self.d.metrics()
        if not text:
            return
        for line in text.splitlines():
            if line.startswith("snowflaked_seq_etcd_round_trips_total "):
                self.round_trips = float(line.split()[1])
            m = re.match(r'snowflaked_seq_etcd_claims_total\{result="(\w+)"\} (\S+)$', line)
            if m:
                v = float(m.group(2))
                if m.group(1) == "unknown":
                    self.unknown = v
                elif m.group(1) == "recovered":
                    self.recovered = v
                elif m.group(1) == "ok":
                    self.claims_ok = v


class SeqFleetTest(unittest.TestCase):
    def setUp(self):
        for path in (BINARY, SFLOAD):
            self.assertTrue(os.access(path, os.X_OK), "not built: %s" % path)
        reason = ensure_etcd()
        if reason:
            self.fail(reason)
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_seq_fleet.")
        self.incs, self.loads = [], []
        self.ec = EtcdCluster().__enter__()

    def tearDown(self):
        for ld in self.loads:
            ld.close()
        for inc in self.incs:
            inc.d.close()
        self.ec.__exit__(None, None, None)
        self.tmp.cleanup()

    def spawn(self, pos):
        gen = sum(1 for i in self.incs if i.pos == pos)
        inc = Inc(pos, gen, Daemon(seq_sets(self.ec.endpoints()), name="n%d" % pos,
                                   port=self.ports[pos], threads=2 if pos >= 3 else 1))
        self.incs.append(inc)
        self.current[pos] = inc
        return inc

    def ready(self, inc):
        return inc.d.http("/readyz", timeout=2.0)[0] == 200

    def scan_logs(self):
        for inc in self.incs:
            text = inc.d.output()
            for bad in BAD_LOG:
                self.assertNotIn(bad, text, "%s logged %r:\n%s" % (inc.name, bad, text[-3000:]))

    def test_fleet_under_faults(self):
        self.ports = [low_port() for _ in range(DAEMONS)]
        self.current = {}
        for pos in range(DAEMONS):
            self.spawn(pos)
        for inc in list(self.current.values()):
            wait_until(lambda: self.ready(inc), 30, "%s ready" % inc.name, 0.1)
        loads = {}
        for ns in NAMESPACES:
            name = ns["name"]
            urls = ["http://127.0.0.1:%d/seqs/%s?count=%d" % (p, name, COUNT) for p in self.ports]
            loads[name] = Load(urls, seconds=LOAD_S, rate=RATE,
                               out=os.path.join(self.tmp.name, name + ".v2"),
                               connections_per_target=CONNS, min_ids=1000, timeout_ms=TIMEOUT_MS)
            self.loads.append(loads[name])
        t0 = time.monotonic()
        freezes = []  # (inc, t_cont monotonic)

        def at(t):  # sleep until t s into the load, polling every daemon's metrics
            while time.monotonic() - t0 < t:
                for inc in self.current.values():
                    if inc.ended is None and inc not in frozen:
                        inc.poll_metrics()
                time.sleep(0.3)
        frozen = set()

        # 1. kill -9 a holder, restart it on its port 2 s later
        at(3)
        victim = self.current[0]
        victim.poll_metrics()
        victim.d.signal(signal.SIGKILL)
        self.assertIsNotNone(victim.d.wait_exit(5))
        victim.t_end, victim.ended = time.monotonic(), "crash"
        at(5)
        self.spawn(0)
        # 2. SIGSTOP a holder past its fence (its lease expires), then SIGCONT
        at(8)
        ice = self.current[1]
        ice.poll_metrics()
        frozen.add(ice)
        ice.d.signal(signal.SIGSTOP)
        at(8 + TTL_S + 2)
        ice.d.signal(signal.SIGCONT)
        frozen.discard(ice)
        freezes.append((ice, time.monotonic(), time.time()))
        # 3. the etcd leader killed, back 3 s later
        at(16)
        leader = self.ec.wait_leader()
        self.ec.kill(leader)
        at(19)
        self.ec.restart(leader)
        # 4. a short quorum loss: two members killed for 1.5 s (below the fence)
        at(23)
        self.ec.wait_ready(timeout=20)
        leader = self.ec.wait_leader()
        lost = [leader, (leader + 1) % self.ec.n]
        for m in lost:
            self.ec.kill(m)
        time.sleep(1.5)
        for m in lost:
            self.ec.restart(m)
        at(LOAD_S)
        reports = {}
        for name, ld in loads.items():
            rc, rep, err = ld.finish()
            self.assertIsNotNone(rep, err)
            v = rep["verify"]
            self.assertEqual((rc, v["duplicates"], v["non_increasing"], v["malformed"]),
                             (0, 0, 0, 0), err[-3000:])
            reports[name] = rep
        # the resumed daemon took a new lease; every daemon is ready again
        for inc in self.current.values():
            wait_until(lambda: self.ready(inc), 20, "%s ready at the end" % inc.name, 0.2)
            inc.poll_metrics()
        self.scan_logs()
        # a clean stop of everything: exit 0, the unissued rest given back where possible
        for inc in self.current.values():
            inc.d.signal(signal.SIGTERM)
        for inc in self.current.values():
            rc = inc.d.wait_exit(20)
            self.assertEqual(rc, 0, "%s exit %s:\n%s" % (inc.name, rc, inc.d.output()[-3000:]))
            inc.t_end, inc.ended = time.monotonic(), "stop"
        self.scan_logs()
        self.ec.wait_ready(timeout=20)
        hist = counter_history(watch_events(self.ec, PREFIX + "/seq/next/"), PREFIX)
        owners = owner_leases(watch_events(self.ec, PREFIX + "/owner/"), PREFIX)
        inc_of_lease = lease_owner_fn(owners, [(i.name, i.d.pid, i.wall_spawn)
                                               for i in self.incs])
        spans = [(i.pos, i.name, i.t_spawn, i.t_end) for i in self.incs]
        problems, summaries = [], []
        for ns in NAMESPACES:
            name = ns["name"]
            ld = loads[name]
            recs = read_records(ld.out)
            rep = reports[name]
            self.assertEqual(len(recs), rep["verify"]["ids"])
            per_target = 2 * CONNS * COUNT  # in flight per connection: one request, + a retry
            seq_incs = {}
            for i in self.incs:
                inflight = 0
                for f, t_cont, _ in freezes:
                    if f is i:  # each timed-out reconnect during the freeze left a request
                        inflight += CONNS * COUNT * (int((TTL_S + 2) * 1000 / TIMEOUT_MS) + 2)
                seq_incs[i.name] = SeqInc(i.name, ended=i.ended,
                                          unknown_unrecovered=max(0, int(i.unknown - i.recovered)),
                                          inflight=inflight)
            fz = []
            for f, t_cont, wall_cont in freezes:
                back = resumed_after(f.d.output(), wall_cont)
                self.assertIsNotNone(back, "%s never issued again after SIGCONT:\n%s"
                                     % (f.name, f.d.output()[-2000:]))
                until = ld.ms(t_cont) + (back - wall_cont) * 1000 - 100
                fz.append(Freeze(f.name, ld.ms(t_cont), until, CONNS * COUNT))
            faults = sum(rep.get("faults", {}).values())
            r = check_namespace(name, recs, hist[name], holder_by_time(spans, ld.ms),
                                inc_of_lease, seq_incs, BLOCK_MAX[name], freezes=fz,
                                slack_ms=100, inflight=faults * COUNT + per_target)
            problems += r.problems()
            summaries.append(r.summary())
            print(r.summary(), flush=True)
            figure("seq_%s_numbers" % name, sum(r.issued.values()))
            figure("seq_%s_etcd_writes_per_1000" % name, "%.1f" % r.round_trips())
            figure("seq_%s_holes" % name, r.hole_total)
            figure("seq_%s_hole_bound" % name, sum(r.bounds.values()) + r.hole_slack)
            for inc in self.incs:  # every incarnation but the killed one's short life issued
                if inc.ended == "stop":
                    self.assertGreater(r.issued.get(inc.name, 0), 0,
                                       "%s issued no %s number\n%s" % (inc.name, name, r.summary()))
        numbers = sum(rep["verify"]["ids"] for rep in reports.values())
        figure("seq_etcd_round_trips_per_1000_metrics", "%.1f" % (
            1000.0 * sum(i.round_trips for i in self.incs) / max(1, numbers)))
        figure("seq_claims_unknown", sum(i.unknown for i in self.incs))
        figure("seq_claims_recovered", sum(i.recovered for i in self.incs))
        figure("load_seconds", "%.1f" % (time.monotonic() - t0))
        self.assertEqual(problems, [], "\n".join(summaries))


if __name__ == "__main__":
    unittest.main()
