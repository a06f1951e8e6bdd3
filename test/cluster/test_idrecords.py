"""Self-test of idrecords.py (the --ids-out-v2 reader and the fleet checks) on synthetic records:
a clean handoff passes; interleaving holders, duplicates, a new holder below the old one, a
zombie holder issuing after the handoff and a non-increasing connection are each caught."""
import os
import tempfile
import unittest

from idrecords import Layout, Rec, check_fleet, check_handoffs, encode_records, read_records

LAY = Layout.parse("41/5/3/12")


def mk(ts, w, seq, dc=0):
    return (((ts << 5 | dc) << 3 | w) << 12) | seq


def stream(target, conn, w, ts0, ms0, n, step_ms=10, dc=0):
    """n IDs of worker w from one connection: one per tick, received every step_ms."""
    return [Rec(mk(ts0 + k, w, 0, dc), target, ms0 + k * step_ms, conn, k == 0) for k in range(n)]


class IdRecordsSelfTest(unittest.TestCase):
    def clean_handoff(self):
        # worker 3: target 0 until 1000 ms, target 5 from 2500 ms (higher ticks); worker 1 steady.
        return (stream(0, 0, 3, 1000, 0, 100) + stream(5, 5, 3, 3500, 2500, 50)
                + stream(1, 1, 1, 1000, 0, 300))

    def test_layout_decodes(self):
        i = mk(123456, 5, 77, dc=9)
        self.assertEqual((LAY.ticks(i), LAY.datacenter(i), LAY.worker(i)), (123456, 9, 5))
        self.assertEqual(str(Layout.parse("41/5/3/12")), "41/5/3/12")
        self.assertRaises(ValueError, Layout.parse, "41/5/3")
        self.assertRaises(ValueError, Layout.parse, "41/5/10/12")

    def test_file_round_trip(self):
        recs = self.clean_handoff()
        with tempfile.NamedTemporaryFile(suffix=".v2") as f:
            f.write(encode_records(recs))
            f.flush()
            self.assertEqual(read_records(f.name), recs)
            f.write(b"\0" * 7)  # torn
            f.flush()
            self.assertRaises(ValueError, read_records, f.name)
        # the byte layout of the README: id, target, ms, conn | 0x8000
        raw = encode_records([Rec(0x0102030405060708, 3, 0x0A0B0C0D, 9, True)])
        self.assertEqual(raw.hex(), "0807060504030201" "0300" "0d0c0b0a" "0980")

    def test_clean_handoff_passes(self):
        rep = check_fleet(self.clean_handoff(), LAY)
        self.assertEqual(rep.problems(), [])
        self.assertEqual([t.target for t in rep.tenures[(0, 3)]], [0, 5])
        self.assertEqual(rep.per_target[5], 50)
        self.assertIn("slot (0, 3)", rep.summary())

    def test_interleaving_holders_caught(self):
        # two holders of worker 3 at the same time: their tick ranges overlap
        recs = stream(0, 0, 3, 1000, 0, 100) + stream(5, 5, 3, 1050, 500, 100)
        rep = check_fleet(recs, LAY)
        self.assertEqual(len(rep.interleave), 1, rep.problems())
        self.assertTrue(any("interleave" in p for p in rep.problems()))

    def test_duplicates_caught(self):
        recs = self.clean_handoff()
        copy = recs[10]._replace(target=7, conn=7, fresh=True)
        rep = check_fleet(recs + [copy], LAY)
        self.assertEqual(rep.duplicates, [(recs[10].id, [0, 7])])
        self.assertTrue(any(p.startswith("duplicate ID") for p in rep.problems()))
        # the same ID twice from the same daemon is a duplicate too
        rep = check_fleet(recs + [recs[20]._replace(conn=9, fresh=True)], LAY)
        self.assertEqual([d[0] for d in rep.duplicates], [recs[20].id])

    def test_new_holder_below_old_caught(self):
        # the later holder (received from 2500 ms) issues IDs below the earlier one's
        recs = stream(0, 0, 3, 5000, 0, 100) + stream(5, 5, 3, 1000, 2500, 50)
        rep = check_fleet(recs, LAY)
        self.assertEqual(len(rep.order), 1)
        self.assertEqual(rep.interleave, [])
        self.assertTrue(any("higher IDs came first" in p for p in rep.problems()))

    def test_zombie_after_handoff_caught(self):
        # the old holder keeps issuing (low ticks) after the new holder's first ID
        recs = self.clean_handoff() + [Rec(mk(1100 + k, 3, 0), 0, 2600 + k, 0, False)
                                       for k in range(3)]
        rep = check_fleet(recs, LAY)
        self.assertEqual(rep.late, {((0, 3), 0): 3})
        self.assertEqual(len(rep.problems()), 1)
        self.assertEqual(rep.problems(late_allowed={0: 3}), [])
        self.assertEqual(rep.problems(late_allowed={((0, 3), 0): 3}), [])
        self.assertEqual(len(rep.problems(late_allowed={0: 2})), 1)

    def test_connection_order_caught(self):
        recs = stream(1, 1, 1, 1000, 0, 10)
        recs.insert(5, recs[2]._replace(id=recs[2].id + 1))  # goes back on the same connection
        rep = check_fleet(recs, LAY)
        self.assertEqual(len(rep.non_increasing), 1)
        # a reconnect (fresh bit) starts a new order stream: a lower ID after it is fine
        ok = stream(1, 1, 1, 2000, 0, 10) + stream(1, 1, 1, 1000, 200, 10)
        self.assertEqual(check_fleet(ok, LAY).non_increasing, [])

    def test_workers_and_datacenters_are_separate(self):
        # the same worker in two datacenters is two slots: no interleave between them
        recs = stream(0, 0, 2, 1000, 0, 50, dc=0) + stream(1, 1, 2, 1000, 0, 50, dc=1)
        rep = check_fleet(recs, LAY)
        self.assertEqual(rep.problems(), [])
        self.assertEqual(sorted(rep.tenures), [(0, 2), (1, 2)])


class HandoffSelfTest(unittest.TestCase):
    """check_handoffs: holders named by a function (here: target and a restart at 2000 ms on
    target 0), etcd's order of holders per slot."""

    @staticmethod
    def holder(r):
        return "t%d%s" % (r.target, "b" if r.target == 0 and r.ms >= 2000 else "")

    def test_holder_taking_its_slot_back_passes(self):
        # worker 3: t0 (restarted as t0b later) / t5 / t0b: one target, two processes, A B A
        recs = (stream(0, 0, 3, 1000, 0, 100) + stream(5, 5, 3, 2000, 1100, 50)
                + stream(0, 1, 3, 3000, 2100, 50))
        rep = check_handoffs(recs, LAY, self.holder, {(0, 3): ["t0", "t5", "t0b"]})
        self.assertEqual(rep.problems(), [])
        self.assertEqual([r.holder for r in rep.runs[(0, 3)]], ["t0", "t5", "t0b"])
        # the same process taking it back after t5 is fine too when etcd says so
        recs2 = stream(5, 5, 3, 1000, 0, 50) + stream(7, 7, 3, 2000, 600, 50) + stream(
            5, 5, 3, 3000, 1200, 50)
        self.assertEqual(check_handoffs(recs2, LAY, self.holder,
                                        {(0, 3): ["t5", "t7", "t7", "t5"]}).problems(), [])
        # ... but not when etcd never gave it back
        rep = check_handoffs(recs2, LAY, self.holder, {(0, 3): ["t5", "t7"]})
        self.assertEqual(len(rep.out_of_order), 1, rep.problems())

    def test_two_holders_at_once_caught(self):
        recs = stream(0, 0, 3, 1000, 0, 100) + stream(5, 5, 3, 1050, 500, 100)
        rep = check_handoffs(recs, LAY, self.holder, {(0, 3): ["t0", "t5"]})
        self.assertTrue(any("does not follow etcd's order" in p for p in rep.problems()))

    def test_below_predecessor_and_late_caught(self):
        recs = stream(0, 0, 3, 5000, 0, 100) + stream(5, 5, 3, 1000, 2500, 50)
        rep = check_handoffs(recs, LAY, self.holder, {(0, 3): ["t0", "t5"]})
        self.assertEqual(len(rep.out_of_order), 1, rep.problems())
        recs = (stream(1, 1, 3, 1000, 0, 100) + stream(5, 5, 3, 3500, 1500, 50)
                + [Rec(mk(1100 + k, 3, 0), 1, 1600 + k, 1, False) for k in range(3)])
        rep = check_handoffs(recs, LAY, self.holder, {(0, 3): ["t1", "t5"]})
        self.assertEqual(rep.late, {((0, 3), "t1"): 3})
        self.assertEqual(len(rep.problems()), 1)
        self.assertEqual(rep.problems(late_allowed={"t1": 3}), [])
        unknown = check_handoffs(recs, LAY, lambda r: None, {})
        self.assertEqual(len(unknown.problems()), 1)


if __name__ == "__main__":
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    unittest.main()
