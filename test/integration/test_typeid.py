"""TypeIDs over HTTP against the real binary (issue 26): /typeid, /typeids, /typeid/{typeid} and
/bounds?type=typeid.

- The TypeID spec's own vectors (test/unit/typeid_spec_vectors.txt: valid.yml and invalid.yml of
  spec v0.3.0) through /typeid/{typeid}: each valid one decodes to its prefix and UUID, each
  invalid one is a 400 naming the rule it breaks (percent-encoded in the URL where it has to be).
- Issuing: every prefix rule is a 400 naming it; 63 characters pass; no prefix gives the bare
  suffix; JSON, text, Accept; HEAD takes nothing; the /uuids batch limits, at the limit with the
  longest prefix (the scratch and output sizing); strictly increasing and unique across loops and
  connections, and sharing the UUIDv7 generator with /uuid (one sequence, never the same UUID).
- Parsing: the fields equal /uuid/{uuid}'s for the same UUID; ?prefix= checks the type; a non-v7
  UUID decodes to uuid7 false; a future timestamp is refused as /uuid/ refuses it.
- /bounds?type=typeid: the uuid7 bounds as TypeIDs of the prefix; issued TypeIDs sort inside.
- Metrics: snowflaked_ids_issued_by_format_total{format="typeid"}.
Run: SNOWFLAKED_BIN=path python3 -m unittest test_typeid (ctest does this)."""
import os
import re
import time
import unittest
import urllib.parse
import uuid

from sfharness import KeepAlive as Client, Server, get, request, run_clients

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "unit", "typeid_spec_vectors.txt")
ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
MAX_BATCH = 4096  # snowflake.max_batch's default
LONG_PREFIX = "abcdefghijklmnopqrstuvwxyz_bcdefghijklmnopqrstuvwxyz__cdefghijk"  # 63, spec-valid

# The rule each of the spec's invalid cases breaks, as our message names it.
RULES = {
    "prefix-uppercase": "lowercase letters a-z and underscores only",
    "prefix-numeric": "lowercase letters a-z and underscores only",
    "prefix-period": "lowercase letters a-z and underscores only",
    "prefix-non-ascii": "lowercase letters a-z and underscores only",
    "prefix-spaces": "lowercase letters a-z and underscores only",
    "prefix-64-chars": "at most 63 characters",
    "separator-empty-prefix": "empty prefix has no separator",
    "separator-empty": "empty prefix has no separator",
    "suffix-short": "26 characters",
    "suffix-long": "26 characters",
    "suffix-spaces": "without i, l, o, u",
    "suffix-uppercase": "without i, l, o, u",
    "suffix-hyphens": "without i, l, o, u",
    "suffix-wrong-alphabet": "without i, l, o, u",
    "suffix-ambiguous-crockford": "without i, l, o, u",
    "suffix-hyphens-crockford": "26 characters",
    "suffix-overflow": "at most 7",
    "prefix-underscore-start": "starts with a letter",
    "prefix-underscore-end": "ends with a letter",
    "empty": None,  # "/typeid/" is no route: 404, as "/uuid/"
    "prefix-empty": "26 characters",
}


def load_vectors():
    """[(valid, name, typeid, prefix, uuid)] from the spec's vectors file."""
    out = []
    with open(VECTORS, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            kind, name = line.split()[:2]
            quoted = re.findall(r'"([^"]*)"', line)
            if kind == "valid":
                out.append((True, name, quoted[0], quoted[1], line.split()[-1]))
            else:
                out.append((False, name, quoted[0], None, None))
    return out


def suffix_int(suffix):
    """The 128-bit value of a TypeID suffix, decoded here (not by the server)."""
    assert re.fullmatch(r"[0-7][0-9a-hjkmnp-tv-z]{25}", suffix), suffix
    v = 0
    for c in suffix:
        v = v * 32 + ALPHABET.index(c)
    return v


def fetch(srv, path, extra=""):
    r = request(srv, get(path, extra))
    body = r.json() if r.body.startswith(b"{") else r.body.decode()
    return r, body


def issued(srv):
    text = request(srv, get("/metrics")).body.decode()
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r'^snowflaked_ids_issued_by_format_total\{format="(\w+)"\} (\d+)$', text, re.M)}


class TypeId(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.environ.get("SNOWFLAKED_BIN"):
            raise unittest.SkipTest("SNOWFLAKED_BIN not set")
        cls.srv = Server()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def ok(self, path, extra=""):
        r, body = fetch(self.srv, path, extra)
        self.assertEqual(r.status, 200, "%s: %s" % (path, body))
        return body

    def bad(self, path, rule):
        r, body = fetch(self.srv, path)
        self.assertEqual(r.status, 400, "%s: %s" % (path, body))
        self.assertIn(rule, body["error"], path)
        return body["error"]

    # ---- the spec's vectors through /typeid/{typeid} -----------------------------------------

    def test_spec_vectors(self):
        vectors = load_vectors()
        self.assertEqual(sum(1 for v in vectors if v[0]), 9)
        self.assertEqual(sum(1 for v in vectors if not v[0]), len(RULES))
        for valid, name, text, prefix, want_uuid in vectors:
            path = "/typeid/" + urllib.parse.quote(text, safe="_")
            r, body = fetch(self.srv, path)
            if valid:
                self.assertEqual(r.status, 200, "%s: %s" % (name, body))
                self.assertEqual((body["typeid"], body["prefix"], body["uuid"]),
                                 (text, prefix, want_uuid), name)
                self.assertEqual(body["suffix"], text[-26:], name)
                u = uuid.UUID(want_uuid)
                self.assertEqual(body["uuid7"], u.variant == uuid.RFC_4122 and u.version == 7,
                                 name)
            elif RULES[name] is None:
                self.assertEqual(r.status, 404, name)
            else:
                self.assertEqual(r.status, 400, "%s (%r) accepted: %s" % (name, text, body))
                self.assertIn(RULES[name], body["error"], name)
                self.assertIn("TypeID spec v0.3", body["error"], name)

    def test_parse_versions(self):
        # valid-uuidv7: a UUIDv7 of 2023, decoded like /uuid/{uuid}
        b = self.ok("/typeid/prefix_01h455vb4pex5vsknk084sn02q")
        self.assertEqual((b["version"], b["uuid7"], b["timestamp_ms"], b["counter"]),
                         (7, True, 0x01890a5dac96, 0x74b))
        u = self.ok("/uuid/01890a5d-ac96-774b-bcce-b302099a8057")
        for k in ("timestamp_ms", "time", "counter", "datacenter", "worker", "random",
                  "random_bits"):
            self.assertEqual(b[k], u[k], k)
        # a UUIDv4 (RFC 9562 A.3): the version, nothing else
        b = self.ok("/typeid/user_4hj44femph8cg9qb7r8zdm2j58")
        self.assertEqual(b, {"typeid": "user_4hj44femph8cg9qb7r8zdm2j58", "prefix": "user",
                             "suffix": "4hj44femph8cg9qb7r8zdm2j58",
                             "uuid": "919108f7-52d1-4320-9bac-f847db4148a8", "version": 4,
                             "uuid7": False})
        # the nil UUID: not of variant 10, so no version
        b = self.ok("/typeid/00000000000000000000000000")
        self.assertEqual((b["prefix"], b["version"], b["uuid7"]), ("", None, False))
        # a UUIDv7 an hour ahead: refused as /uuid/ refuses it
        ms = int(time.time() * 1000) + 3600 * 1000
        future = "%012x-7000-8000-000000000000" % ms
        future = future[:8] + "-" + future[8:]
        suffix = "".join(ALPHABET[(uuid.UUID(future).int >> (5 * i)) & 31]
                         for i in range(25, -1, -1))
        self.bad("/typeid/user_" + suffix, "is in the future")
        self.bad("/uuid/" + future, "is in the future")

    def test_parse_prefix_param(self):
        t = self.ok("/typeid?prefix=user")["id"]
        self.assertEqual(self.ok("/typeid/%s?prefix=user" % t)["prefix"], "user")
        err = self.bad("/typeid/%s?prefix=team" % t, "prefix: ")
        self.assertEqual(err, 'prefix: the TypeID\'s prefix is "user", not "team"')
        self.bad("/typeid/%s?prefix=" % t, 'not ""')
        self.bad("/typeid/%s?prefix=Team" % t, "lowercase letters a-z and underscores only")
        bare = self.ok("/typeid")["id"]
        self.assertEqual(self.ok("/typeid/%s?prefix=" % bare)["prefix"], "")
        # escapes are decoded before the rules apply; a bad escape or a far too long text says so
        self.assertEqual(self.ok("/typeid/us%65r_" + t[5:])["typeid"], t)
        self.bad("/typeid/user_%zz", "bad percent-encoding")
        self.bad("/typeid/" + "%61" * 100, "at most 90 characters")
        self.bad("/typeid/" + "a" * 300, "the suffix (after the last underscore) is 26 characters")

    # ---- issuing -------------------------------------------------------------------------

    def test_prefix_rules(self):
        cases = [("User", "lowercase letters a-z and underscores only"),
                 ("user1", "lowercase letters a-z and underscores only"),
                 ("us-er", "lowercase letters a-z and underscores only"),
                 ("us%20er", "lowercase letters a-z and underscores only"),
                 ("_user", "starts with a letter a-z, not an underscore"),
                 ("user_", "ends with a letter a-z, not an underscore"),
                 ("_", "starts with a letter"),
                 ("a" * 64, "at most 63 characters")]
        for prefix, rule in cases:
            for route in ("/typeid?prefix=", "/typeids?count=2&prefix="):
                err = self.bad(route + prefix, rule)
                self.assertTrue(err.startswith("prefix: the prefix "), err)
        for prefix in ("a", "my__type", "a_b_c", LONG_PREFIX):
            t = self.ok("/typeid?prefix=" + prefix)["id"]
            self.assertEqual(t.rpartition("_")[0], prefix)
            self.assertEqual(len(t), len(prefix) + 27)
        self.assertEqual(len(LONG_PREFIX), 63)
        # no prefix (absent or empty): the suffix alone, no separator
        for path in ("/typeid", "/typeid?prefix="):
            t = self.ok(path)["id"]
            self.assertRegex(t, r"^[0-7][0-9a-hjkmnp-tv-z]{25}$")
        self.bad("/typeid?encoding=hex", "encoding must be typeid")
        self.ok("/typeid?encoding=typeid&prefix=user")

    def test_shapes_text_and_head(self):
        self.assertRegex(self.ok("/typeid?prefix=user")["id"], r"^user_[0-7][0-9a-z]{25}$")
        text = self.ok("/typeid?prefix=user&format=text")
        self.assertRegex(text, r"^user_[0-7][0-9a-z]{25}$")
        text = self.ok("/typeid?prefix=user", "Accept: text/plain\r\n")
        self.assertRegex(text, r"^user_[0-7][0-9a-z]{25}$")
        lines = self.ok("/typeids?prefix=user&count=3&format=text")
        self.assertRegex(lines, r"^(user_[0-7][0-9a-z]{25}\n){3}$")
        self.assertEqual(len(self.ok("/typeids?prefix=user&count=5")["ids"]), 5)
        base = issued(self.srv)
        for path in ("/typeid?prefix=user", "/typeids?count=7&prefix=" + LONG_PREFIX):
            g = request(self.srv, get(path))
            h = request(self.srv, ("HEAD %s HTTP/1.1\r\nHost: t\r\n\r\n" % path).encode(),
                        head_only=True)
            self.assertEqual(h.status, 200)
            self.assertEqual(h.header("content-length"), g.header("content-length"))
        now = issued(self.srv)
        self.assertEqual(now["typeid"] - base["typeid"], 8, "HEAD took IDs")
        self.assertEqual(now["uuid7"], base["uuid7"], "TypeIDs counted as uuid7 too")

    def test_batch_limits(self):
        r_u, b_u = fetch(self.srv, "/uuids?count=%d" % (MAX_BATCH + 1))
        r_t, b_t = fetch(self.srv, "/typeids?count=%d&prefix=user" % (MAX_BATCH + 1))
        self.assertEqual((r_t.status, b_t), (r_u.status, b_u))
        for count in ("0", "x", "-1", ""):
            self.assertEqual(fetch(self.srv, "/typeids?count=" + count)[0].status, 400, count)
        # the largest answer: max_batch TypeIDs of the longest prefix (93 bytes each in JSON)
        ids = self.ok("/typeids?count=%d&prefix=%s" % (MAX_BATCH, LONG_PREFIX))["ids"]
        self.assertEqual(len(ids), MAX_BATCH)
        self.assertEqual(len(set(ids)), MAX_BATCH)
        self.assertEqual(ids, sorted(ids))
        text = self.ok("/typeids?count=%d&prefix=%s&format=text" % (MAX_BATCH, LONG_PREFIX))
        self.assertEqual(len(text), MAX_BATCH * 91)

    def test_order_and_shared_generator(self):
        """One connection, /uuid and /typeid alternating: their UUIDs form one strictly increasing
        sequence (one generator), and each TypeID's suffix decodes (here) to its parse answer."""
        c = Client(self.srv)
        try:
            ints, kinds = [], []
            for i in range(300):
                if i % 3 == 0:
                    ints.append(uuid.UUID(c.json("/uuid")["id"]).int)
                    kinds.append("uuid")
                else:
                    ids = c.json("/typeids?count=3&prefix=order")["ids"] if i % 3 == 2 else \
                        [c.json("/typeid?prefix=order")["id"]]
                    for t in ids:
                        self.assertTrue(t.startswith("order_"), t)
                        v = suffix_int(t[6:])
                        if i < 30:
                            self.assertEqual(uuid.UUID(c.json("/typeid/" + t)["uuid"]).int, v)
                        ints.append(v)
                        kinds.append("typeid")
            bad = [i for i in range(1, len(ints)) if ints[i] <= ints[i - 1]]
            self.assertEqual(bad, [], "not increasing at %s (%s)" % (
                bad[:3], [kinds[i] for i in bad[:3]]))
            for v in ints:
                u = uuid.UUID(int=v)
                self.assertEqual((u.version, u.variant), (7, uuid.RFC_4122))
        finally:
            c.close()

    def test_concurrent_unique(self):
        """4 connections (both loops) x 100 batches of 20: all unique, each connection's in
        order."""
        seen, errors = [], []

        def client():
            c = Client(self.srv)
            try:
                last = None
                for _ in range(100):
                    ids = c.json("/typeids?count=20&prefix=load")["ids"]
                    if last is not None and not last < ids[0]:
                        errors.append("out of order: %s then %s" % (last, ids[0]))
                    if ids != sorted(ids):
                        errors.append("batch out of order")
                    last = ids[-1]
                    seen.extend(ids)
            finally:
                c.close()

        errors += run_clients(client, 4)
        self.assertEqual(errors, [])
        self.assertEqual(len(seen), 4 * 100 * 20)
        self.assertEqual(len(set(seen)), len(seen))

    # ---- /bounds -------------------------------------------------------------------------

    def test_bounds(self):
        q = "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z"
        u = self.ok(q + "&type=uuid7")
        t = self.ok(q + "&type=typeid&prefix=user")
        self.assertEqual(t["type"], "typeid")
        for k in ("min", "max", "end"):
            self.assertTrue(t[k].startswith("user_"), t[k])
            self.assertEqual(suffix_int(t[k][5:]), uuid.UUID(u[k]).int, k)
        for k in ("from_ms", "to_ms", "first_tick_ms", "end_tick_ms", "empty"):
            self.assertEqual(t[k], u[k], k)
        bare = self.ok(q + "&type=typeid")
        self.assertEqual(bare["min"], t["min"][5:])
        # TypeIDs issued now lie in [min, end) of an interval around now, as strings
        now = int(time.time() * 1000)
        ids = self.ok("/typeids?count=50&prefix=user")["ids"]
        b = self.ok("/bounds?from=%d&to=%d&type=typeid&prefix=user" % (now - 1000, now + 5000))
        self.assertTrue(all(b["min"] <= i <= b["max"] < b["end"] for i in ids), (b, ids[:2]))
        e = self.ok("/bounds?from=%d&to=%d&type=typeid&prefix=user" % (now, now))
        self.assertEqual((e["empty"], e["max"], e["min"]), (True, None, e["end"]))
        for query, msg in (("&type=typeid&prefix=User", "prefix: the prefix has lowercase"),
                           ("&type=typeid&prefix=" + "a" * 64, "prefix: the prefix is at most 63"),
                           ("&type=uuid7&prefix=user", "prefix is for type=typeid only"),
                           ("&prefix=user", "prefix is for type=typeid only"),
                           ("&type=typeid&encoding=canonical", "encoding must be typeid"),
                           ("&type=typeid&json_ids=number", "json_ids must be string"),
                           ("&type=typeids", "type must be one of snowflake, uuid7, ulid, typeid")):
            self.bad(q + query, msg)


if __name__ == "__main__":
    unittest.main()
