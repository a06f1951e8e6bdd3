"""GET /bounds against the real binary: the ID range of a time interval contains every ID the
server issued in it (server-stamped markers and the wall clock), excludes those issued after it,
min and max are attained IDs that /id/{id} decodes to the documented node/sequence, every bad
parameter is a 400 naming it, the encodings agree with each other, and the UUIDv7/ULID bounds
are the documented values (judged by Python's uuid module). Run: SNOWFLAKED_BIN=path python3 -m
unittest test_bounds (ctest does this)."""
import datetime
import json
import random
import time
import unittest
import urllib.parse
import uuid

from sfharness import Reader, Server, get, request

B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
EPOCH = 1577836800000  # 2020-01-01T00:00:00Z, the default


def b32_decode(s):
    v = 0
    for c in s.upper():
        v = v * 32 + B32.index(c)
    return v


def b32_encode(v, width):
    out = ""
    for _ in range(width):
        out = B32[v & 31] + out
        v >>= 5
    return out


def b62_decode(s):
    v = 0
    for c in s:
        v = v * 62 + B62.index(c)
    return v


def rfc3339(ms, offset_min=0):
    """ms as RFC 3339 in a zone offset_min east of UTC ("+hh:mm"/"-hh:mm", or Z for 0)."""
    tz = datetime.timezone(datetime.timedelta(minutes=offset_min))
    t = datetime.datetime.fromtimestamp(ms / 1000, tz)
    t = t.replace(microsecond=(ms % 1000) * 1000)
    text = t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    if offset_min == 0:
        return text + "Z"
    sign = "+" if offset_min > 0 else "-"
    return "%s%s%02d:%02d" % (text, sign, abs(offset_min) // 60, abs(offset_min) % 60)


def q(value):
    return urllib.parse.quote(str(value), safe="")


class OneServer(unittest.TestCase):
    """A server with the default configuration for the class, and /bounds on it."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def bounds(self, frm, to, extra=""):
        query = "from=%s&to=%s%s" % (q(frm), q(to), extra)
        r = request(self.srv, get("/bounds?" + query))
        self.assertEqual(r.status, 200, "%s: %s" % (query, r.body))
        self.assertEqual(r.header("content-type"), "application/json")
        return r.json()


class BoundsSnowflake(OneServer):

    def decode(self, id_text, enc="dec"):
        r = request(self.srv, get("/id/%s?encoding=%s" % (id_text, enc)))
        self.assertEqual(r.status, 200, r.body)
        return r.json()

    def issue(self, count):
        with self.srv.connect() as s:
            s.sendall(get("/ids?count=%d" % count))
            return [int(x) for x in Reader(s).response().json()["ids"]]

    def test_ids_between_two_instants(self):
        """Every ID issued between two server-stamped markers lies in the bounds of the interval
        of their timestamps; so do they when the interval is taken from the client's clock with
        50 ms of slack; IDs issued after the interval are >= end, those before < min."""
        wall_before = int(time.time() * 1000)
        before = self.issue(1)[0]
        time.sleep(0.003)
        ids = self.issue(1)
        first = int(self.decode(ids[0])["timestamp_ms"])  # server-stamped start marker
        for _ in range(20):
            ids += self.issue(50)
            time.sleep(0.002)
        last = int(self.decode(ids[-1])["timestamp_ms"])  # server-stamped end marker
        time.sleep(0.003)
        after = self.issue(1)[0]
        wall_after = int(time.time() * 1000)
        self.assertGreater(int(self.decode(after)["timestamp_ms"]), last)
        self.assertLess(int(self.decode(before)["timestamp_ms"]), first)
        # [first, last + 1): every ID issued between the markers, none before or after
        b = self.bounds(first, last + 1)
        lo, hi, end = int(b["min"]), int(b["max"]), int(b["end"])
        self.assertEqual(hi + 1, end)
        for i in ids:
            self.assertTrue(lo <= i <= hi, (i, b))
        self.assertGreaterEqual(after, end)
        self.assertLess(before, lo)
        # the client's clock, 50 ms each side, in RFC 3339 with an offset (percent-encoded +)
        b = self.bounds(rfc3339(wall_before - 50, 120), rfc3339(wall_after + 50, -330))
        self.assertEqual(b["from_ms"], wall_before - 50)
        self.assertEqual(b["to_ms"], wall_after + 50)
        for i in ids + [before, after]:
            self.assertTrue(int(b["min"]) <= i < int(b["end"]), (i, b))

    def test_json_shape_and_attained_bounds(self):
        jan, feb = 1767225600000, 1769904000000
        b = self.bounds("2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z")
        self.assertEqual(set(b), {"type", "from_ms", "to_ms", "first_tick_ms", "end_tick_ms",
                                  "min", "max", "end", "empty"})
        self.assertEqual(b["type"], "snowflake")
        self.assertEqual((b["from_ms"], b["to_ms"]), (jan, feb))
        self.assertEqual((b["first_tick_ms"], b["end_tick_ms"]), (jan, feb))
        self.assertIs(b["empty"], False)
        self.assertEqual(int(b["min"]), (jan - EPOCH) << 22)
        self.assertEqual(int(b["end"]), (feb - EPOCH) << 22)
        lo = self.decode(b["min"])
        self.assertEqual((lo["timestamp_ms"], lo["datacenter"], lo["worker"], lo["sequence"]),
                         (jan, 0, 0, 0))
        hi = self.decode(b["max"])
        self.assertEqual((hi["timestamp_ms"], hi["datacenter"], hi["worker"], hi["sequence"]),
                         (feb - 1, 31, 31, 4095))
        # the same instants as Unix ms, with offsets, lower case, sub-ms fractions
        for frm, to in [(jan, feb), ("2026-01-01T01:00:00+01:00", "2026-01-31t19:00:00-05:00"),
                        ("2026-01-01T00:00:00.0004Z", "2026-01-31T23:59:59.9991z")]:
            self.assertEqual(self.bounds(frm, to), b)
        # from floors, to ceils: 0.3 ms past a ms counts that whole ms
        c = self.bounds("2026-01-01T00:00:00.0003Z", "2026-01-01T00:00:00.0003Z")
        self.assertEqual((c["from_ms"], c["to_ms"]), (jan, jan + 1))
        self.assertEqual(int(c["end"]) - int(c["min"]), 1 << 22)
        # a raw '+' stays a '+' (only %2B-decoding clients send a space: that is refused)
        r = request(self.srv, get("/bounds?from=2026-01-01T01:00:00+01:00&to=%d" % feb))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json(), b)

    def test_empty_and_tiling(self):
        b = self.bounds(1767225600000, 1767225600000)
        self.assertIs(b["empty"], True)
        self.assertIsNone(b["max"])
        self.assertEqual(b["min"], b["end"])
        months = [1767225600000, 1769904000000, 1772323200000, 1775001600000]
        parts = [self.bounds(months[i], months[i + 1]) for i in range(3)]
        for x, y in zip(parts, parts[1:]):
            self.assertEqual(x["end"], y["min"])

    def test_encodings_round_trip(self):
        base = self.bounds(1767225600000, 1767225600123)
        self.assertEqual(self.bounds(1767225600000, 1767225600123, "&encoding=dec"), base)
        for enc, width, dec in [("hex", 16, lambda s: int(s, 16)), ("base62", 11, b62_decode),
                                ("base32", 13, b32_decode)]:
            b = self.bounds(1767225600000, 1767225600123, "&encoding=" + enc)
            for k in ("min", "max", "end"):
                self.assertEqual(len(b[k]), width, (enc, b))
                self.assertEqual(dec(b[k]), int(base[k]), (enc, k, b))
                self.assertEqual(self.decode(b[k], enc)["id"], base[k])
            self.assertLess(b["min"], b["max"])  # padded encodings sort as the numbers
            self.assertLess(b["max"], b["end"])

    def test_head(self):
        r = request(self.srv, b"HEAD /bounds?from=0&to=1 HTTP/1.1\r\nHost: t\r\n\r\n",
                    head_only=True)
        self.assertEqual(r.status, 400)
        r = request(self.srv, b"HEAD /bounds?from=%d&to=%d HTTP/1.1\r\nHost: t\r\n\r\n"
                    % (EPOCH, EPOCH + 1), head_only=True)
        self.assertEqual(r.status, 200)
        self.assertGreater(int(r.header("content-length")), 100)

    def test_every_400_names_its_parameter(self):
        ok = "from=%d&to=%d" % (EPOCH, EPOCH + 1)
        last_tick = EPOCH + (1 << 41) - 1
        cases = [
            ("to=1", "from is required"),
            ("from=&to=1", "from is required"),
            ("from=%d" % EPOCH, "to is required"),
            ("from=yesterday&to=1", "from: expected YYYY-MM-DDTHH:MM:SS"),
            ("from=%d&to=2026-01-01" % EPOCH, "to: expected"),
            ("from=%zz&to=1", "from: bad percent-encoding"),
            ("from=%d&to=%%4" % EPOCH, "to: bad percent-encoding"),
            ("from=" + "1" * 300 + "&to=1", "from: too long"),
            ("from=2026-01-01T01:00:00%2001:00&to=1", "from: a space where the offset's sign "
             "belongs: encode + as %2B"),
            ("from=2026-01-01T00:00:00&to=1", "from: a time zone is required"),
            ("from=2026-01-01T00:00:00+25:00&to=1", "from: offset out of range"),
            ("from=2016-12-31T23:59:60Z&to=1", "from: time of day out of range: a leap second"),
            ("from=2023-02-29T00:00:00Z&to=1", "from: day out of range"),
            ("from=2026-13-01T00:00:00Z&to=1", "from: month out of range"),
            ("from=%d&to=2026-01-01T00:00:00.Z" % EPOCH, "to: the fraction"),
            ("from=1969-12-31T23:59:59Z&to=1", "from: before 1970"),
            ("from=%d&to=253402300800000" % EPOCH, "to: Unix milliseconds must be"),
            ("from=%d&to=%d" % (EPOCH + 2, EPOCH + 1), "from is after to"),
            ("from=%d&to=%d" % (EPOCH - 1, EPOCH + 1),
             "from is before the layout's epoch 2020-01-01T00:00:00.000Z"),
            ("from=%d&to=%d" % (EPOCH, last_tick + 1),
             "to is after the start of the layout's last tick 2089-09-"),
            (ok + "&type=uuid4", "type must be one of snowflake, uuid7, ulid"),
            (ok + "&type=", "type must be one of"),
            (ok + "&encoding=base64", "encoding must be one of dec, hex, base62, base32"),
            (ok + "&type=uuid7&encoding=dec", "encoding must be one of canonical, hex, base32"),
            (ok + "&type=ulid&encoding=canonical", "encoding must be base32 for type=ulid"),
            # 48-bit ms end in 10889, beyond what times can say (9999): that check is unit-tested
            ("from=0&to=%d&type=uuid7" % (1 << 48), "to: Unix milliseconds must be 0..2534"),
            ("from=2&to=1&type=ulid", "from is after to"),
        ]
        for query, msg in cases:
            r = request(self.srv, get("/bounds?" + query))
            self.assertEqual(r.status, 400, "%s: %s" % (query, r.body))
            self.assertIn(msg, r.json()["error"], query)
        # the last tick's start itself is accepted, and end still fits a signed BIGINT
        b = self.bounds(EPOCH, last_tick)
        self.assertLess(int(b["end"]), 1 << 63)


class BoundsTenMsTicks(unittest.TestCase):
    """10 ms ticks: from floors to its tick, to ceils to the next tick start."""

    def test_ticks(self):
        srv = Server("--set", "snowflake.time_unit_ms=10")
        try:
            r = request(srv, get("/bounds?from=%d&to=%d" % (EPOCH + 15, EPOCH + 25)))
            b = r.json()
            self.assertEqual((b["first_tick_ms"], b["end_tick_ms"]), (EPOCH + 10, EPOCH + 30))
            self.assertEqual(int(b["min"]), 1 << 22)
            self.assertEqual(int(b["end"]), 3 << 22)
            # IDs issued now lie in [now-10ms, now+10ms)'s bounds
            with srv.connect() as s:
                s.sendall(get("/ids?count=100"))
                ids = [int(x) for x in Reader(s).response().json()["ids"]]
            now = int(time.time() * 1000)
            r = request(srv, get("/bounds?from=%d&to=%d" % (now - 1000, now + 1000)))
            b = r.json()
            for i in ids:
                self.assertTrue(int(b["min"]) <= i <= int(b["max"]), (i, b))
        finally:
            srv.stop()


class BoundsIssued128(OneServer):
    """UUIDv7s and ULIDs the server issued between two instants lie in the bounds of that
    interval (server-stamped markers: the first and last issued IDs' own milliseconds; and the
    client's clock with 50 ms of slack), those issued before and after outside."""

    def issue(self, route, count):
        with self.srv.connect() as s:
            s.sendall(get("/%s?count=%d" % (route, count)))
            r = Reader(s).response()
            self.assertEqual(r.status, 200, r.body)
            return r.json()["ids"]

    def check(self, route, kind, value, ms_of):
        wall_before = int(time.time() * 1000)
        before = self.issue(route, 1)[0]
        time.sleep(0.003)
        ids = []
        for _ in range(10):
            ids += self.issue(route, 100)
            time.sleep(0.002)
        time.sleep(0.003)
        after = self.issue(route, 1)[0]
        wall_after = int(time.time() * 1000)
        first, last = ms_of(ids[0]), ms_of(ids[-1])
        self.assertLess(ms_of(before), first)
        self.assertGreater(ms_of(after), last)
        self.assertEqual([value(i) for i in ids], sorted(value(i) for i in ids))
        b = self.bounds(first, last + 1, "&type=" + kind)
        lo, hi, end = value(b["min"]), value(b["max"]), value(b["end"])
        for i in ids:
            self.assertTrue(lo <= value(i) <= hi and value(i) < end, (i, b))
        self.assertLess(value(before), lo)
        self.assertGreaterEqual(value(after), end)
        b = self.bounds(rfc3339(wall_before - 50, 60), rfc3339(wall_after + 50, -60),
                        "&type=" + kind)
        for i in ids + [before, after]:
            self.assertTrue(value(b["min"]) <= value(i) < value(b["end"]), (i, b))

    def test_uuid7(self):
        # bytewise, as a uuid / BINARY(16) column compares
        self.check("uuids", "uuid7", lambda t: uuid.UUID(t).bytes,
                   lambda t: uuid.UUID(t).int >> 80)

    def test_ulid(self):
        # as text, as CHAR(26) COLLATE "C" compares
        self.check("ulids", "ulid", lambda t: t, lambda t: b32_decode(t) >> 80)


class BoundsUuidUlid(OneServer):
    """UUIDv7 / ULID bounds against constructed values: exact documented values, Python's uuid
    as the judge, and random IDs of each millisecond in and out of range."""

    def test_uuid7_values(self):
        jan, feb = 1767225600000, 1769904000000
        b = self.bounds("2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "&type=uuid7")
        self.assertEqual(b["type"], "uuid7")
        self.assertEqual((b["from_ms"], b["to_ms"], b["first_tick_ms"], b["end_tick_ms"]),
                         (jan, feb, jan, feb))
        self.assertEqual(b["min"], "019b76da-a800-7000-8000-000000000000")
        self.assertEqual(b["max"], "019c167f-cbff-7fff-bfff-ffffffffffff")
        self.assertEqual(b["end"], "019c167f-cc00-7000-8000-000000000000")
        for k, ms in (("min", jan), ("max", feb - 1), ("end", feb)):
            u = uuid.UUID(b[k])
            self.assertEqual(u.version, 7)
            self.assertEqual(u.variant, uuid.RFC_4122)
            self.assertEqual(str(u), b[k])
            self.assertEqual(u.int >> 80, ms)
        self.assertEqual(self.bounds(jan, feb, "&type=uuid7&encoding=canonical"), b)
        h = self.bounds(jan, feb, "&type=uuid7&encoding=hex")
        c = self.bounds(jan, feb, "&type=uuid7&encoding=base32")
        for k in ("min", "max", "end"):
            self.assertEqual(h[k], uuid.UUID(b[k]).hex)
            self.assertEqual(b32_decode(c[k]), uuid.UUID(b[k]).int)
            self.assertEqual(len(c[k]), 26)
        e = self.bounds(jan, jan, "&type=uuid7")
        self.assertIs(e["empty"], True)
        self.assertIsNone(e["max"])
        self.assertEqual(e["min"], e["end"])

    def test_uuid7_containment(self):
        rnd = random.Random(13)
        for _ in range(50):
            frm = rnd.randrange(0, 1 << 47)
            to = frm + rnd.randrange(1, 100000)
            b = self.bounds(frm, to, "&type=uuid7")
            lo, hi, end = (uuid.UUID(b[k]).bytes for k in ("min", "max", "end"))
            for ms, inside in ((frm, True), (to - 1, True), (rnd.randrange(frm, to), True),
                               (frm - 1, False), (to, False)):
                v = ms << 80 | 7 << 76 | rnd.getrandbits(12) << 64 | 2 << 62 | rnd.getrandbits(62)
                u = uuid.UUID(int=v).bytes  # bytewise order = a uuid/BINARY(16) column's order
                if inside:
                    self.assertTrue(lo <= u <= hi and u < end)
                else:
                    self.assertFalse(lo <= u < end)

    def test_ulid_values_and_containment(self):
        jan, feb = 1767225600000, 1769904000000
        b = self.bounds(jan, feb, "&type=ulid")
        self.assertEqual(b["type"], "ulid")
        self.assertEqual(b["min"], b32_encode(jan << 80, 26))
        self.assertEqual(b["max"], b32_encode((feb - 1) << 80 | (1 << 80) - 1, 26))
        self.assertEqual(b["end"], b32_encode(feb << 80, 26))
        self.assertEqual(b32_decode(b["max"]) + 1, b32_decode(b["end"]))
        self.assertEqual(self.bounds(jan, feb, "&type=ulid&encoding=base32"), b)
        rnd = random.Random(26)
        for _ in range(50):
            frm = rnd.randrange(0, 1 << 47)
            to = frm + rnd.randrange(1, 100000)
            b = self.bounds(frm, to, "&type=ulid")
            for ms, inside in ((frm, True), (to - 1, True), (frm - 1, False), (to, False)):
                text = b32_encode(ms << 80 | rnd.getrandbits(80), 26)
                # CHAR(26) COLLATE "C": plain string comparison
                self.assertEqual(b["min"] <= text <= b["max"] and text < b["end"], inside)


if __name__ == "__main__":
    unittest.main()
