"""Self-test of seqcheck.py on synthetic etcd histories and sfload records: a clean history
passes; a duplicate, a number outside every block, a number from another lease's block, a
broken order (per connection and across an incarnation's connections), a frozen daemon's
numbers past its fence, a hole above the bound and an inconsistent counter are each caught."""
import base64
import json
import unittest

from idrecords import Rec
from seqcheck import (Freeze, SeqInc, check_namespace, counter_history, holder_by_time,
                      lease_owner_fn, owner_leases, resumed_after)

P = "/sfseq"
LEASE = {"A": 0xA1, "B": 0xB2}


def kv_event(key, value, rev, lease=0, created=None):
    return {"type": "PUT", "kv": {
        "key": base64.b64encode(key.encode()).decode(),
        "value": base64.b64encode(json.dumps(value).encode()).decode(),
        "mod_revision": str(rev), "create_revision": str(created or rev), "lease": str(lease)}}


def counter(nxt, lo, hi, who, nonce):
    return {"v": 1, "next": str(nxt), "lo": str(lo), "hi": str(hi), "worker": 1,
            "lease": "%016x" % (LEASE[who] if who else 0), "nonce": nonce}


def owners():
    return [kv_event(P + "/owner/0000001/0000001", {"pid": 100, "started_ms": 1}, 2, LEASE["A"]),
            kv_event(P + "/owner/0000001/0000002", {"pid": 200, "started_ms": 1}, 3, LEASE["B"])]


def recs(who, numbers, ms0, conn, step=10):
    """Records of incarnation who (target 0 = A, 1 = B) on one connection."""
    return [Rec(n, 0 if who == "A" else 1, ms0 + k * step, conn, k == 0)
            for k, n in enumerate(numbers)]


class SeqCheckSelfTest(unittest.TestCase):
    def history(self, extra=()):
        k = P + "/seq/next/orders"
        ev = [kv_event(k, counter(1, 1, 1, "A", "n0"), 4),             # declare: start 1
              kv_event(k, counter(51, 1, 51, "A", "n1"), 5),           # A [1, 51)
              kv_event(k, counter(101, 51, 101, "B", "n2"), 6),        # B [51, 101)
              kv_event(k, counter(151, 101, 151, "A", "n3"), 7),       # A [101, 151)
              kv_event(k, counter(120, 101, 151, "A", "n3"), 8),       # A gives [120, 151) back
              kv_event(k, counter(170, 120, 170, "B", "n4"), 9)]       # B [120, 170)
        return counter_history(ev + list(extra), P)

    def good_records(self):
        return (recs("A", range(1, 51), 0, 0) + recs("B", range(51, 101), 0, 2)
                + recs("A", range(101, 120), 600, 0)[0:] + recs("B", range(120, 170), 600, 2))

    def check(self, records, hist=None, incs=None, freezes=(), slack_ms=50, block_max=50):
        hist = hist or self.history()
        lease_map = {l: "A" if o.pid == 100 else "B" for l, o in owner_leases(owners(), P).items()}
        incs = incs or {"A": SeqInc("A", ended="stop"), "B": SeqInc("B", ended="stop")}
        return check_namespace("orders", records, hist["orders"],
                               lambda r: "A" if r.target == 0 else "B", lease_map.get, incs,
                               block_max=block_max, freezes=freezes, slack_ms=slack_ms)

    def assertCaught(self, rep, text):
        probs = rep.problems()
        self.assertTrue(any(text in p for p in probs), "%r not in %s" % (text, probs))

    def test_good_history_passes(self):
        rep = self.check(self.good_records())
        self.assertEqual(rep.problems(), [], rep.summary())
        h = rep.hist
        self.assertEqual((len(h.claims), len(h.givebacks), h.start), (4, 1, 1))
        self.assertEqual(rep.granted_total, 169)
        self.assertEqual(rep.hole_total, 0)
        self.assertEqual(rep.drops, {"A": (0, 0), "B": (1, 0)})  # B never gave back
        self.assertAlmostEqual(rep.round_trips(), 1000.0 * 5 / 169)
        self.assertIn("4 claims, 1 give-backs", rep.summary())

    def test_duplicate(self):
        rep = self.check(self.good_records() + recs("B", [77], 2000, 3))
        self.assertCaught(rep, "number 77 received 2 times")

    def test_outside_every_block(self):
        # 130 was A's, given back and granted to B: from A it is another lease's; 500 nobody's
        rep = self.check(self.good_records() + recs("A", [500], 3000, 1))
        self.assertCaught(rep, "number 500 (target 0, 3000 ms) is in no granted block")
        k = P + "/seq/next/orders"
        hist = self.history([kv_event(k, counter(150, 120, 170, "B", "n5"), 10)])  # B back to 150
        rep = self.check(self.good_records(), hist=hist)
        self.assertCaught(rep, "is in no granted block")  # 150..169 received, then given back

    def test_block_of_another_lease(self):
        r = self.good_records()
        r = [x._replace(target=0) if x.id == 60 else x for x in r]  # A answered B's 60
        rep = self.check(r)
        self.assertCaught(rep, "number 60 answered by A is in block [51, 101) of lease b2 (B)")
        rep = self.check(self.good_records() + recs("A", [125], 3000, 5))  # given back, B's now
        self.assertCaught(rep, "number 125 answered by A is in block [120, 170)")

    def test_order_broken(self):
        r = self.good_records()
        i, j = 10, 11  # A's conn 0: 11 then 12 -> 12 then 11
        r[i], r[j] = r[j]._replace(ms=r[i].ms), r[i]._replace(ms=r[j].ms)
        self.assertCaught(self.check(r), "A connection 0: 11 after 12 (not increasing)")
        # across A's connections: 30 received at 200 ms on conn 0, then 25 at 900 ms on conn 1
        r = [x for x in self.good_records() if x.id != 25] + [Rec(25, 0, 900, 1, True)]
        self.assertCaught(self.check(r), "A: 25 received at 900 ms, after")
        # within the slack: receive jitter between two connections is not a violation
        r = [x for x in self.good_records() if x.id != 25] + [Rec(25, 0, 260, 1, True)]
        self.assertEqual(self.check(r, slack_ms=50).problems(), [])

    def test_frozen_past_fence(self):
        # A resumed at 300 ms, a new lease at 400 ms: it sent 9 numbers (at 310..390 ms) between
        f = Freeze("A", 300, 400, 2)
        self.assertCaught(self.check(self.good_records(), freezes=[f]),
                          "A sent 9 numbers between 300 and 400 ms")
        self.assertEqual(self.check(self.good_records(), freezes=[Freeze("A", 300, 400, 9)])
                         .problems(), [])
        self.assertEqual(self.check(self.good_records(), freezes=[Freeze("A", 490, 600, 1)])
                         .problems(), [])

    def test_hole_too_big(self):
        # A gave back: no hole allowed; one number never received is caught
        r = [x for x in self.good_records() if x.id != 105]
        self.assertCaught(self.check(r), "A: 1 numbers granted and never received, bound 0")
        # crashed, blocks of at most 25: 2 x 25 allowed, 51 missing is not
        crash = {"A": SeqInc("A", ended="crash"), "B": SeqInc("B", ended="stop")}
        r = [x for x in self.good_records() if not (x.target == 0 and 5 <= x.id < 106)]
        self.assertEqual(len(self.good_records()) - len(r), 51)
        self.assertCaught(self.check(r, incs=crash, block_max=25),
                          "A: 51 numbers granted and never received, bound 50")
        r = [x for x in self.good_records() if not (x.target == 0 and 6 <= x.id < 106)]
        self.assertEqual(self.check(r, incs=crash, block_max=25).problems(), [])
        # an unknown claim not recovered adds one block: 69 missing, bound 75
        r = [x for x in self.good_records() if x.target != 0]
        self.assertCaught(self.check(r, incs=crash, block_max=25), "A: 69 numbers")
        unk = {"A": SeqInc("A", ended="crash", unknown_unrecovered=1), "B": SeqInc("B", "stop")}
        self.assertEqual(self.check(r, incs=unk, block_max=25).problems(), [])
        # numbers lost in flight (the caller's count) widen the bound
        self.assertEqual(self.check(r, incs={"A": SeqInc("A", "crash", inflight=19),
                                             "B": SeqInc("B", "stop")}, block_max=25)
                         .problems(), [])

    def test_counter_inconsistent(self):
        k = P + "/seq/next/orders"
        hist = self.history([kv_event(k, counter(200, 160, 200, "A", "n1"), 10)])
        rep = self.check(self.good_records(), hist=hist)
        self.assertCaught(rep, "counter: revision 10: counter 170 -> 200 but the value says "
                               "block [160, 200)")
        self.assertCaught(rep, "counter: nonce n1 claimed twice")
        # a give-back reaching into another lease's claim
        hist = self.history([kv_event(k, counter(100, 100, 100, "B", "n8"), 10)])
        self.assertCaught(self.check(self.good_records(), hist=hist),
                          "counter set back to 100 by lease b2, into claims not all its own")
        # one spanning two claims of its own lease, back to back, is a give-back
        hist = self.history([kv_event(k, counter(220, 170, 220, "B", "n9"), 10),
                             kv_event(k, counter(165, 165, 165, "B", "n10"), 11)])
        rep = self.check(self.good_records()[:-5], hist=hist)  # B issued up to 164
        self.assertEqual(rep.problems(), [])
        self.assertEqual((rep.hist.next, rep.hole_total), (165, 0))
        rep = self.check(self.good_records(), hist=hist)  # 165..169 issued, then given back
        self.assertCaught(rep, "number 165 (target 1, 1050 ms) is in no granted block")
        # a raised start is no claim: the numbers it skips are nobody's
        hist = self.history([kv_event(k, counter(300, 300, 300, "A", "n6"), 10),
                             kv_event(k, counter(350, 300, 350, "B", "n7"), 11)])
        self.assertEqual(self.check(self.good_records() + recs("B", range(300, 350), 2000, 3),
                                    hist=hist).problems(), [])
        self.assertCaught(self.check(self.good_records() + recs("B", [250], 900, 3), hist=hist),
                          "number 250 (target 1, 900 ms) is in no granted block")


class HelpersTest(unittest.TestCase):
    def test_resumed_after(self):
        log = ("2026-12-03T20:32:07.846Z INFO  etcd identity: claimed datacenter 1 worker 0 ...\n"
               "2026-12-03T20:32:08.500Z ERROR etcd identity: fenced: no successful renewal ...\n"
               "2026-12-03T20:32:09.100Z WARN  etcd identity: renewed after 600 ms fenced; "
               "issuing again\n")
        t0 = 1796329927.0  # 2026-12-03T20:32:07Z
        self.assertAlmostEqual(resumed_after(log, t0), t0 + 0.846, places=3)
        self.assertAlmostEqual(resumed_after(log, t0 + 1), t0 + 2.1, places=3)
        self.assertIsNone(resumed_after(log, t0 + 3))

    def test_attribution(self):
        # port 0: a.0 until 10.0 s, a.1 from 11.0 s (split at 10.5 s); port 1: b.0 throughout
        holder = holder_by_time([(0, "a.0", 0.0, 10.0), (0, "a.1", 11.0, None),
                                 (1, "b.0", 0.0, None)], lambda t: t * 1000)
        self.assertEqual([holder(Rec(1, 0, ms, 0, False)) for ms in (5000, 10400, 10600)],
                         ["a.0", "a.0", "a.1"])
        self.assertEqual(holder(Rec(1, 1, 99999, 0, False)), "b.0")
        owners = owner_leases([
            kv_event(P + "/owner/0000001/0000001", {"pid": 7, "started_ms": 1000}, 2, 0x11),
            kv_event(P + "/owner/0000001/0000001", {"pid": 7, "started_ms": 1000}, 3, 0x11, 2),
            kv_event(P + "/owner/0000001/0000002", {"pid": 7, "started_ms": 60000}, 9, 0x22)], P)
        self.assertEqual(sorted(owners), [0x11, 0x22])  # a rewrite is not a new owner
        of = lease_owner_fn(owners, [("old", 7, 0.5), ("new", 7, 59.0)])  # pid 7 reused
        self.assertEqual((of(0x11), of(0x22), of(0x33)), ("old", "new", None))


if __name__ == "__main__":
    unittest.main()
