"""UUIDv7 and ULID over HTTP, judged by Python's own uuid module and an independent Crockford
base32 decoder written here: /uuid, /uuids, /uuid/{uuid}, /ulid, /ulids, /ulid/{ulid}. Shapes,
encodings, text and HEAD, order and uniqueness, per-loop node ids, every 400 naming its
parameter, and the metrics by format.
Run: SNOWFLAKED_BIN=path python3 -m unittest test_formats (ctest does this)."""
import re
import threading
import time
import unittest
import uuid

from sfharness import Reader, Server, get, request, run_clients

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid_int(text):
    """The 128-bit value of a canonical ULID (26 uppercase Crockford digits), independently of
    the server's decoder."""
    assert re.fullmatch(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", text), text
    v = 0
    for c in text:
        v = v * 32 + CROCKFORD.index(c)
    return v


def fetch(srv, path):
    r = request(srv, get(path))
    return r.status, r.json() if r.body.startswith(b"{") else r.body.decode()


class Formats(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--set", "snowflake.datacenter_id=3", "--set", "snowflake.worker_id=9")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def ok(self, path):
        status, body = fetch(self.srv, path)
        self.assertEqual(status, 200, "%s: %s" % (path, body))
        return body

    def test_uuid_judged_by_python(self):
        before = int(time.time() * 1000)
        ids = self.ok("/uuids?count=1000")["ids"]
        after = int(time.time() * 1000)
        self.assertEqual(len(ids), 1000)
        self.assertEqual(len(set(ids)), 1000)
        ints = []
        for s in ids:
            self.assertRegex(s, r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
            u = uuid.UUID(s)
            self.assertEqual(u.version, 7)
            self.assertEqual(u.variant, uuid.RFC_4122)
            self.assertEqual(str(u), s)
            ints.append(u.int)
        self.assertEqual(ints, sorted(ints), "a batch is in increasing order")
        self.assertEqual(ids, sorted(ids), "and so is its text")
        for s in ids[:50] + ids[-50:]:
            u = uuid.UUID(s)
            p = self.ok("/uuid/" + s)
            self.assertEqual(p["uuid"], s)
            self.assertEqual(p["version"], 7)
            self.assertEqual(p["timestamp_ms"], u.int >> 80)
            self.assertEqual(p["counter"], (u.int >> 64) & 0xFFF)
            self.assertEqual((p["datacenter"], p["worker"]), (3, 9))
            self.assertEqual(p["random_bits"], 52)
            self.assertEqual(int(p["random"], 16), u.int & ((1 << 52) - 1))
            # the node sits at the top of rand_b, below the variant
            self.assertEqual((u.int >> 52) & 0x3FF, 3 << 5 | 9)
            self.assertTrue(before <= p["timestamp_ms"] <= after)
            self.assertRegex(p["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertEqual(ulid_int(p["base32"]), u.int)
        # the RFC's counter: consecutive IDs of one millisecond count up by one
        for a, b in zip(ints, ints[1:]):
            if a >> 80 == b >> 80:
                self.assertEqual(((b >> 64) & 0xFFF) - ((a >> 64) & 0xFFF), 1)

    def test_uuid_encodings(self):
        canonical = self.ok("/uuid")["id"]
        hexa = self.ok("/uuid?encoding=hex")["id"]
        b32 = self.ok("/uuid?encoding=base32")["id"]
        self.assertRegex(hexa, r"^[0-9a-f]{32}$")
        u1, u2, u3 = uuid.UUID(canonical), uuid.UUID(hex=hexa), uuid.UUID(int=ulid_int(b32))
        self.assertEqual(u2.hex, hexa)
        self.assertTrue(u1.int < u2.int < u3.int)
        self.assertEqual((u2.version, u3.version), (7, 7))
        # every form parses back to the same UUID, uppercase too
        for form in (hexa, hexa.upper(), str(u2).upper(), u2.hex):
            self.assertEqual(self.ok("/uuid/" + form)["uuid"], str(u2))
        self.assertEqual(self.ok("/uuid/" + b32)["uuid"], str(u3))
        text = self.ok("/uuids?count=3&format=text&encoding=hex")
        lines = text.split("\n")
        self.assertEqual(lines[-1], "")
        self.assertEqual([len(x) for x in lines[:-1]], [32, 32, 32])
        self.assertRegex(self.ok("/uuid?format=text"), r"^[0-9a-f-]{36}$")

    def test_ulid(self):
        ids = self.ok("/ulids?count=1000")["ids"]
        self.assertEqual(len(set(ids)), 1000)
        self.assertEqual(ids, sorted(ids))
        ints = [ulid_int(s) for s in ids]
        self.assertEqual(ints, sorted(ints))
        for s in ids[:30]:
            v = ulid_int(s)
            p = self.ok("/ulid/" + s)
            self.assertEqual(p["ulid"], s)
            self.assertEqual(p["timestamp_ms"], v >> 80)
            self.assertEqual(p["counter"], (v >> 68) & 0xFFF)
            self.assertEqual((p["datacenter"], p["worker"]), (3, 9))
            self.assertEqual(uuid.UUID(p["uuid"]).int, v)
            self.assertEqual(p["random_bits"], 58)
            self.assertEqual(int(p["random"], 16), v & ((1 << 58) - 1))
            self.assertEqual(self.ok("/ulid/" + s.lower())["ulid"], s)
        one = self.ok("/ulid?format=text")
        self.assertRegex(one, r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")
        self.assertGreater(ulid_int(one), ints[-1])

    def test_order_across_requests_and_connections(self):
        """One generator per format: every ID of a connection is above its previous one, and
        IDs from four connections at once never collide."""
        seen, errors = [], []

        def client():
            with self.srv.connect() as s:
                rd = Reader(s)
                last = [0, 0]
                for i in range(100):
                    s.sendall(get("/uuids?count=20" if i % 2 else "/ulids?count=20"))
                    r = rd.response()
                    ids = r.json()["ids"]
                    vals = [uuid.UUID(x).int if "-" in x else ulid_int(x) for x in ids]
                    k = i % 2
                    if vals[0] <= last[k] or vals != sorted(vals):
                        errors.append("out of order")
                    last[k] = vals[-1]
                    seen.extend(ids)

        errors += run_clients(client, 4)
        self.assertEqual(errors, [])
        self.assertEqual(len(seen), 4 * 100 * 20)
        self.assertEqual(len(set(seen)), len(seen))

    def test_head_takes_nothing(self):
        def issued():
            text = request(self.srv, get("/metrics")).body.decode()
            return {m.group(1): int(m.group(2)) for m in re.finditer(
                r'^snowflaked_ids_issued_by_format_total\{format="(\w+)"\} (\d+)$', text, re.M)}

        base = issued()
        for path in ("/uuid", "/uuids?count=7", "/ulid", "/ulids?count=7"):
            g = request(self.srv, get(path))
            h = request(self.srv, ("HEAD %s HTTP/1.1\r\nHost: t\r\n\r\n" % path).encode(),
                        head_only=True)
            self.assertEqual(h.status, 200)
            self.assertEqual(h.header("content-length"), g.header("content-length"))
        now = issued()
        self.assertEqual(now["uuid7"] - base["uuid7"], 8)
        self.assertEqual(now["ulid"] - base["ulid"], 8)
        self.assertEqual(now["snowflake"], base["snowflake"])
        text = request(self.srv, get("/metrics")).body.decode()
        self.assertRegex(text, r"(?m)^snowflaked_random_failures_total 0$")

    def test_id_space_budget_metrics(self):
        text = request(self.srv, get("/metrics")).body.decode()

        def value(name, fmt):
            m = re.search(r'^%s\{format="%s"\} (\S+)$' % (name, fmt), text, re.M)
            self.assertIsNotNone(m, "%s{%s}" % (name, fmt))
            return float(m.group(1))

        now = time.time()
        ends = {"snowflake": (1577836800000 + 2 ** 41) / 1000, "uuid7": 2 ** 48 / 1000,
                "ulid": 2 ** 48 / 1000}
        for fmt, end in ends.items():
            self.assertAlmostEqual(value("snowflaked_id_space_end_timestamp_seconds", fmt) / end,
                                   1, places=6)
            left = value("snowflaked_id_space_remaining_seconds", fmt)
            self.assertAlmostEqual(left / (end - now), 1, places=5)
            self.assertEqual(value("snowflaked_id_capacity_per_second", fmt), 4096000)

    def test_bad_input(self):
        cases = [
            ("/uuid?encoding=dec", "encoding must be one of canonical, hex, base32"),
            ("/ulid?encoding=hex", "encoding must be base32"),
            ("/uuids?count=0", "count must be an integer 1..4096"),
            ("/uuids?count=4097", "count must be an integer 1..4096"),
            ("/ulids", "count must be an integer 1..4096"),
            ("/ulids?count=1x", "count must be an integer 1..4096"),
            ("/uuid?format=xml", "format must be json or text"),
            ("/uuid/919108f7-52d1-4320-9bac-f847db4148a8", "not a version 7 UUID (version 4"),
            ("/uuid/017f22e2-79b0-7cc3-d8c4-dc0c0c07398f", "variant"),
            ("/uuid/017f22e2-79b0-7cc3-98c4-dc0c0c07398", "not a valid UUID"),
            ("/uuid/017f22e2x79b0-7cc3-98c4-dc0c0c07398f", "not a valid UUID"),
            ("/uuid/{017f22e2-79b0-7cc3-98c4-dc0c0c07398f}", "not a valid UUID"),
            ("/ulid/8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "first digit is at most 7"),
            ("/ulid/01ARYZ6S41TSV4RRFFQ69G5FAU", "not a valid ULID"),
            ("/ulid/01ARYZ6S41TSV4RRFFQ69G5FA", "not a valid ULID"),
            # year 10889: from the future
            ("/uuid/ffffffff-ffff-7fff-bfff-ffffffffffff", "in the future"),
            ("/ulid/7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "in the future"),
        ]
        for path, why in cases:
            status, body = fetch(self.srv, path)
            self.assertEqual(status, 400, "%s: %s" % (path, body))
            self.assertIn(why, body["error"], path)
        # RFC 9562's own example is a valid UUIDv7 (from 2022): it parses
        p = self.ok("/uuid/017F22E2-79B0-7CC3-98C4-DC0C0C07398F")
        self.assertEqual((p["timestamp_ms"], p["counter"]), (1645557742000, 0xCC3))
        # the ulid spec's example: timestamp 1469918176385
        p = self.ok("/ulid/01ARYZ6S41TSV4RRFFQ69G5FAV")
        self.assertEqual(p["timestamp_ms"], 1469918176385)


class PerLoopNodes(unittest.TestCase):
    def test_each_loop_its_worker(self):
        """per_thread_worker_ids: loop i issues as worker worker_id + i, in UUIDs and ULIDs
        alike, so two loops never collide."""
        srv = Server("--set", "snowflake.per_thread_worker_ids=true", "--set",
                     "snowflake.worker_id=4", threads=2)
        try:
            workers = set()
            for _ in range(40):
                u = request(srv, get("/uuid")).json()["id"]
                workers.add(request(srv, get("/uuid/" + u)).json()["worker"])
                l_ = request(srv, get("/ulid")).json()["id"]
                workers.add(request(srv, get("/ulid/" + l_)).json()["worker"])
            self.assertEqual(workers, {4, 5})
        finally:
            srv.stop()


class TwoReplicas(unittest.TestCase):
    def test_replicas_never_collide(self):
        """Two daemons with the same datacenter and different worker ids, issuing at once: their
        IDs may share (ms, counter) pairs, yet never collide, because the node sits in the
        random bits (the guarantee README states, not a probability)."""
        a = Server("--set", "snowflake.worker_id=1")  # in sfharness's datacenter for it
        b = Server("--set", "snowflake.worker_id=2",
                   env={"SNOWFLAKED_SNOWFLAKE_DATACENTER_ID": str(a.datacenter)})
        try:
            got = {a: [], b: []}

            def pull(srv):
                with srv.connect() as s:
                    rd = Reader(s)
                    for i in range(20):
                        s.sendall(get("/uuids?count=4096" if i % 2 else "/ulids?count=4096"))
                        got[srv].extend(rd.response().json()["ids"])

            threads = [threading.Thread(target=pull, args=(srv,)) for srv in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            ints = {srv: [uuid.UUID(x).int if "-" in x else ulid_int(x) for x in ids]
                    for srv, ids in got.items()}
            self.assertEqual(len(ints[a]), 20 * 4096)
            self.assertEqual(len(ints[b]), 20 * 4096)
            self.assertEqual(len(set(ints[a]) | set(ints[b])), 2 * 20 * 4096)
            # every UUID's node field names its daemon
            for srv, worker in ((a, 1), (b, 2)):
                nodes = {(v >> 52) & 0x3FF for v, x in zip(ints[srv], got[srv]) if "-" in x}
                self.assertEqual(nodes, {a.datacenter << 5 | worker})
        finally:
            a.stop()
            b.stop()


if __name__ == "__main__":
    unittest.main()
