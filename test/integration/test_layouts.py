"""Named layouts against the real binary (issue 13): js53 IDs as JSON numbers that Python's json
(like JavaScript's JSON.parse) reads exactly, json_ids validation, and a sonyflake daemon whose
IDs decompose the way sony/sonyflake does; the lifetime warning. Run: SNOWFLAKED_BIN=path python3 -m unittest
test_layouts (ctest does this)."""
import json
import time
import unittest

from sfharness import Reader, Server, get, request

MAX_SAFE_INTEGER = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER
DEFAULT_EPOCH_MS = 1577836800000  # 2020-01-01T00:00:00Z
SONYFLAKE_EPOCH_MS = 1409529600000  # 2014-09-01T00:00:00Z, sonyflake's default StartTime


def get_json(srv, path):
    r = request(srv, get(path))
    return r.status, r.json()


class Js53(unittest.TestCase):
    """layout js53: 38 bits of 10 ms, 5 worker bits, 10 sequence bits = 53 bits."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--set", "snowflake.layout=js53", "--set", "snowflake.worker_id=21")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def check_js53(self, ids, before_ms, after_ms):
        for i in ids:
            self.assertIs(type(i), int)
            self.assertGreater(i, 0)
            self.assertLessEqual(i, MAX_SAFE_INTEGER)
            self.assertEqual((i >> 10) & 31, 21)  # worker
            ms = DEFAULT_EPOCH_MS + (i >> 15) * 10
            self.assertGreaterEqual(ms, before_ms - 10)
            self.assertLessEqual(ms, after_ms)

    def test_numbers_strictly_increasing(self):
        ids = []
        before = int(time.time() * 1000)
        with self.srv.connect() as s:
            rd = Reader(s)
            for _ in range(5):
                s.sendall(get("/id?json_ids=number"))
                r = rd.response()
                self.assertEqual(r.status, 200)
                self.assertRegex(r.body, rb'^\{"id":\d+\}$')  # a bare JSON number
                ids.append(r.json()["id"])
                s.sendall(get("/ids?count=1500&json_ids=number"))  # > 1024: spans ticks
                r = rd.response()
                self.assertEqual(r.status, 200)
                batch = json.loads(r.body)["ids"]
                self.assertEqual(len(batch), 1500)
                ids.extend(batch)
        after = int(time.time() * 1000)
        self.check_js53(ids, before, after)
        self.assertTrue(all(a < b for a, b in zip(ids, ids[1:])), "not strictly increasing")

    def test_number_round_trips_through_parse(self):
        status, body = get_json(self.srv, "/id?json_ids=number")
        self.assertEqual(status, 200)
        i = body["id"]
        status, parsed = get_json(self.srv, "/id/%d?json_ids=number" % i)
        self.assertEqual(status, 200)
        self.assertEqual(parsed["id"], i)
        self.assertEqual(parsed["worker"], 21)
        self.assertEqual(parsed["datacenter"], 0)
        self.assertEqual(parsed["timestamp_ms"], DEFAULT_EPOCH_MS + (i >> 15) * 10)
        status, parsed = get_json(self.srv, "/id/%d" % i)  # default: a string
        self.assertEqual(parsed["id"], str(i))

    def test_default_and_explicit_strings(self):
        for path in ("/id", "/id?json_ids=string", "/id?encoding=hex",
                     "/id?encoding=base62&json_ids=string"):
            status, body = get_json(self.srv, path)
            self.assertEqual(status, 200, path)
            self.assertIs(type(body["id"]), str, path)
        status, body = get_json(self.srv, "/ids?count=3&json_ids=string")
        self.assertTrue(all(type(i) is str for i in body["ids"]))
        # text answers are the same either way
        r = request(self.srv, get("/id?json_ids=number&format=text"))
        self.assertEqual(r.status, 200)
        self.assertRegex(r.body, rb"^\d+$")

    def test_info_metric(self):
        r = request(self.srv, get("/metrics"))
        self.assertEqual(r.status, 200)
        self.assertIn('layout="38/0/5/10",layout_name="js53",id_bits="53",node_bits_low="false",',
                      r.body.decode())

    def test_bad_json_ids(self):
        for path, frag in (("/id?json_ids=numbers", "json_ids must be number or string"),
                           ("/id?json_ids=Number", "json_ids must be number or string"),
                           ("/id?json_ids=", "json_ids must be number or string"),
                           ("/ids?count=2&json_ids=int", "json_ids must be number or string"),
                           ("/id/1?json_ids=1", "json_ids must be number or string"),
                           ("/id?json_ids=number&encoding=hex",
                            "json_ids=number needs encoding=dec, got hex"),
                           ("/ids?count=2&json_ids=number&encoding=base32",
                            "json_ids=number needs encoding=dec, got base32")):
            status, body = get_json(self.srv, path)
            self.assertEqual(status, 400, path)
            self.assertEqual(body["error"], frag, path)

    def test_bounds_as_numbers(self):
        """/bounds of a js53 layout with json_ids=number: min, max and end are JSON numbers a
        JavaScript client keeps exact, and the IDs issued inside the interval lie within."""
        t0 = int(time.time() * 1000)
        status, body = get_json(self.srv, "/ids?count=50&json_ids=number")
        self.assertEqual(status, 200)
        time.sleep(0.02)
        t1 = int(time.time() * 1000) + 1
        status, b = get_json(self.srv, "/bounds?from=%d&to=%d&json_ids=number" % (t0, t1))
        self.assertEqual(status, 200, b)
        for k in ("min", "max", "end"):
            self.assertIs(type(b[k]), int, k)
            self.assertLessEqual(b[k], MAX_SAFE_INTEGER)
        self.assertEqual(b["end"], b["max"] + 1)
        self.assertTrue(all(b["min"] <= i <= b["max"] for i in body["ids"]))
        status, b = get_json(self.srv, "/bounds?from=%d&to=%d" % (t0, t1))
        self.assertIs(type(b["min"]), str)  # strings by default
        for path, frag in (("/bounds?from=0&to=1&json_ids=number&encoding=hex",
                            "json_ids=number needs encoding=dec, got hex"),
                           ("/bounds?from=0&to=1&json_ids=maybe",
                            "json_ids must be number or string"),
                           ("/bounds?from=0&to=1&type=uuid7&json_ids=number",
                            "json_ids must be string for type=uuid7, ulid and typeid")):
            status, body = get_json(self.srv, path)
            self.assertEqual(status, 400, path)
            self.assertEqual(body["error"], frag, path)

    def test_parse_rejects_bits_above_53(self):
        status, body = get_json(self.srv, "/id/%d" % (MAX_SAFE_INTEGER + 1))
        self.assertEqual(status, 400)
        self.assertIn("bits above bit 52 set: not an ID of this 53-bit layout", body["error"])


class Js53NumbersByDefault(unittest.TestCase):
    """snowflake.json_ids=number: decimal IDs are numbers unless a request asks otherwise."""

    def test_config_default(self):
        srv = Server("--set", "snowflake.layout=js53", "--set", "snowflake.json_ids=number")
        try:
            status, body = get_json(srv, "/id")
            self.assertIs(type(body["id"]), int)
            self.assertLessEqual(body["id"], MAX_SAFE_INTEGER)
            status, body = get_json(srv, "/ids?count=100")
            self.assertTrue(all(type(i) is int for i in body["ids"]))
            status, body = get_json(srv, "/id?json_ids=string")
            self.assertIs(type(body["id"]), str)
            status, body = get_json(srv, "/id?encoding=hex")  # only decimal IDs are numbers
            self.assertEqual(status, 200)
            self.assertIs(type(body["id"]), str)
            self.assertEqual(len(body["id"]), 16)
        finally:
            srv.stop()


class Twitter63Bits(unittest.TestCase):
    def test_numbers_refused(self):
        srv = Server()
        try:
            for path in ("/id?json_ids=number", "/ids?count=2&json_ids=number",
                         "/id/123456789?json_ids=number"):
                status, body = get_json(srv, path)
                self.assertEqual(status, 400, path)
                self.assertEqual(body["error"],
                                 "json_ids=number needs a layout of at most 53 bits "
                                 "(this one has 63)")
            status, body = get_json(srv, "/id?json_ids=string")
            self.assertEqual(status, 200)
            self.assertIs(type(body["id"]), str)
        finally:
            srv.stop()


def start_log(srv, timeout=5):
    """The log up to the start-up lines (the logger writes from its own thread)."""
    deadline = time.time() + timeout
    while "listening on" not in srv.output() and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)  # the lines logged right after it
    return srv.output()


class LifetimeWarning(unittest.TestCase):
    def test_logged_at_start(self):
        srv = Server("--set", "snowflake.lifetime_warning_years=1000")
        try:
            self.assertEqual(request(srv, get("/id")).status, 200)  # a warning, not an error
            out = start_log(srv)
            self.assertRegex(out, r"WARN.*layout runs out of timestamps at "
                             r"2089-09-06T15:47:35\.552Z \(\d+\.\d years\): below "
                             r"snowflake\.lifetime_warning_years=1000")
        finally:
            srv.stop()
        srv = Server()  # 20 years by default: today's layout ends in 2089
        try:
            out = start_log(srv)
            self.assertIn("listening on", out)
            self.assertNotIn("runs out of timestamps", out)
        finally:
            srv.stop()


class Sonyflake(unittest.TestCase):
    """layout sonyflake: time<<24 | sequence<<16 | machine, machine = datacenter<<8 | worker."""

    def test_ids_decompose_like_sonyflake(self):
        srv = Server("--set", "snowflake.layout=sonyflake", "--set",
                     "snowflake.datacenter_id=192", "--set", "snowflake.worker_id=168")
        try:
            before = int(time.time() * 1000)
            ids = []
            for _ in range(3):
                status, body = get_json(srv, "/ids?count=600")  # > 256 per 10 ms tick
                self.assertEqual(status, 200)
                ids.extend(int(i) for i in body["ids"])
            after = int(time.time() * 1000)
            self.assertTrue(all(a < b for a, b in zip(ids, ids[1:])), "not strictly increasing")
            ticks = set()
            for i in ids:
                self.assertLess(i, 2**63)
                self.assertEqual(i & 0xffff, 192 << 8 | 168)  # sonyflake's machine id
                t = i >> 24  # sonyflake's elapsed time: 10 ms units since its StartTime
                self.assertGreaterEqual(SONYFLAKE_EPOCH_MS + t * 10, before - 10)
                self.assertLessEqual(SONYFLAKE_EPOCH_MS + t * 10, after)
                ticks.add(t)
            self.assertGreaterEqual(len(ticks), 8)  # 1800 IDs need at least 8 ticks
            # within a tick the sequence counts up from 0 (sonyflake's (id >> 16) & 0xff)
            for a, b in zip(ids, ids[1:]):
                if a >> 24 == b >> 24:
                    self.assertEqual((b >> 16) & 0xff, ((a >> 16) & 0xff) + 1)
            status, parsed = get_json(srv, "/id/%d" % ids[-1])
            self.assertEqual(status, 200)
            self.assertEqual(parsed["datacenter"], 192)
            self.assertEqual(parsed["worker"], 168)
            self.assertEqual(parsed["sequence"], (ids[-1] >> 16) & 0xff)
            self.assertEqual(parsed["timestamp_ms"], SONYFLAKE_EPOCH_MS + (ids[-1] >> 24) * 10)
            r = request(srv, get("/metrics"))
            self.assertIn('layout="39/8/8/8",layout_name="sonyflake",id_bits="63",'
                          'node_bits_low="true",', r.body.decode())
        finally:
            srv.stop()


class RandomSequenceStart(unittest.TestCase):
    """snowflake.random_sequence_start_bits: a fresh tick's first sequence is random below 2^bits
    (no order volume read off the sequence), for Snowflake IDs and the UUIDv7 counter alike;
    --check-config states the guaranteed capacity; a value not below sequence_bits exits 2."""

    def test_random_starts_and_capacity(self):
        import subprocess
        import sfharness
        srv = Server("--set", "snowflake.random_sequence_start_bits=8")
        try:
            first_seqs, counters = set(), set()
            for _ in range(60):
                status, body = get_json(srv, "/id")
                self.assertEqual(status, 200)
                first_seqs.add(int(body["id"]) & 0xfff)
                status, body = get_json(srv, "/uuid")
                counters.add(int(body["id"][15:18], 16))  # rand_a, the counter
                time.sleep(0.002)  # a fresh millisecond each time
            self.assertTrue(all(s < 256 for s in first_seqs), first_seqs)
            self.assertTrue(all(c < 256 for c in counters), counters)
            # 60 draws from 256 values: with a start of 0 every time there would be one value
            self.assertGreater(len(first_seqs), 20)
            self.assertGreater(len(counters), 20)
            status, body = get_json(srv, "/ids?count=4096")  # a full batch still fits
            self.assertEqual(status, 200)
            ids = [int(i) for i in body["ids"]]
            self.assertTrue(all(a < b for a, b in zip(ids, ids[1:])))
        finally:
            srv.stop()
        out = subprocess.run([sfharness.BINARY, "--check-config", "--set",
                              "snowflake.random_sequence_start_bits=8"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        resolved = json.loads(out.stdout)["resolved"]
        self.assertEqual(resolved["id_cap_per_second"], (4096 - 255) * 1000)
        out = subprocess.run([sfharness.BINARY, "--check-config", "--set",
                              "snowflake.random_sequence_start_bits=11", "--set",
                              "snowflake.layout=js53"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn("snowflake.random_sequence_start_bits", out.stderr)
        self.assertIn("must be below sequence_bits (10)", out.stderr)


if __name__ == "__main__":
    unittest.main()
