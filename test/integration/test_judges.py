"""Independent judges of the real daemon's UUIDv7, ULID and TypeID output (issues 13 and 26):
Python's `uuid` module here, and the npm packages `uuid`, `ulid` and `typeid-js` through
test/judges/judge.mjs (installed by test/judges/install.sh, the ctest fixture `judges_install`;
test/judges/README.md).

One server is asked, on one keep-alive connection (one event loop, so one generator and issue
order = time order), for /uuids?count=1000, /ulids?count=1000, single /uuid and /ulid, and /uuid in
the hex and base32 encodings, /typeid?prefix=user then /typeids?prefix=user&count=1000, /typeid
without a prefix and /typeids with a 63-character prefix holding underscores; every ID's parse
answer comes from /uuid/{id}, /ulid/{id} or /typeid/{id}. The judges compare the libraries'
reading of each text with the daemon's own answer (timestamp, counter, bytes, canonical form,
TypeID prefix and embedded UUIDv7) and check that string order is issue order. Restarts (clean stop,
kill -9) on the same data_dir: every ID after compares greater than every ID before, as JS
strings and as Python integers.

The npm part FAILS when node or the installed packages are missing (run test/judges/install.sh);
with SNOWFLAKED_NO_NPM=1 it is skipped with that reason, and the Python judge still runs."""
import json
import os
import signal
import subprocess
import tempfile
import time
import unittest
import uuid

from sfharness import KeepAlive as Client, Server, get

JUDGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "judges")
JUDGE = os.path.join(JUDGES, "judge.mjs")
NO_NPM = os.environ.get("SNOWFLAKED_NO_NPM") == "1"
BATCH = 1000
# The node the daemon is given; with the default 5 + 5 node bits it sits right after the counter
# (UUIDv7: after the variant), i.e. bits 52-61 of a UUIDv7 and 58-67 of a ULID from the bottom.
DATACENTER, WORKER = 3, 17
NODE = DATACENTER << 5 | WORKER
NODE_ENV = {"SNOWFLAKED_SNOWFLAKE_DATACENTER_ID": str(DATACENTER),
            "SNOWFLAKED_SNOWFLAKE_WORKER_ID": str(WORKER)}
# A short lease, so that the refusals after kill -9 (until the clock passes the lease) are brief.
LEASE_ENV = dict(NODE_ENV, SNOWFLAKED_SNOWFLAKE_LEASE_MS="200")
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# A TypeID prefix at the spec's limit: 63 characters, underscores inside (consecutive too).
LONG_PREFIX = "a_b__" + "c" * 57 + "d"
NPM_PACKAGES = ("uuid", "ulid", "typeid-js")


def npm_judge(records):
    """Runs judge.mjs on the records; returns (exit code, its output). Fails the calling test when
    the judge cannot run (the npm judges are required unless SNOWFLAKED_NO_NPM=1)."""
    if NO_NPM:
        raise unittest.SkipTest("SNOWFLAKED_NO_NPM=1: npm judges skipped (Python judge only)")
    if not all(os.path.isdir(os.path.join(JUDGES, "node_modules", p)) for p in NPM_PACKAGES):
        raise AssertionError("npm judges not installed: run sh test/judges/install.sh "
                             "(or set SNOWFLAKED_NO_NPM=1 to skip them)")
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    try:
        p = subprocess.run(["node", JUDGE], input=data, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
    except FileNotFoundError:
        raise AssertionError("node not found: run sh test/judges/install.sh "
                             "(or set SNOWFLAKED_NO_NPM=1 to skip the npm judges)")
    return p.returncode, p.stdout.decode(errors="replace")


def first_disorder(ints):
    """The first position whose value is not above the one before it, or None."""
    return next((i for i in range(1, len(ints)) if ints[i] <= ints[i - 1]), None)


def crockford_int(text):
    """The 128-bit value of a 26-digit Crockford base32 text (uppercase)."""
    n = 0
    for ch in text:
        n = n * 32 + CROCKFORD.index(ch)
    return n


def crockford_text(n):
    return "".join(CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


def now_ms():
    return int(time.time() * 1000)


class Sample:
    """What one server issued, in issue order, with each ID's parse answer."""

    def __init__(self, server):
        c = Client(server)
        try:
            self.t0 = now_ms()
            self.uuids = [c.json("/uuid")["id"]] + c.json("/uuids?count=%d" % BATCH)["ids"]
            self.ulids = [c.json("/ulid")["id"]] + c.json("/ulids?count=%d" % BATCH)["ids"]
            self.hex = c.json("/uuid?encoding=hex")["id"]
            self.base32 = c.json("/uuid?encoding=base32")["id"]
            self.typeids = [c.json("/typeid?prefix=user")["id"]] + \
                c.json("/typeids?prefix=user&count=%d" % BATCH)["ids"]
            self.bare_typeid = c.json("/typeid")["id"]
            self.long_typeids = c.json("/typeids?prefix=%s&count=100" % LONG_PREFIX)["ids"]
            self.t1 = now_ms()
            self.uuid_parse = {u: c.json("/uuid/" + u) for u in self.uuids}
            self.ulid_parse = {u: c.json("/ulid/" + u) for u in self.ulids}
            self.hex_parse = c.json("/uuid/" + self.hex)
            self.base32_parse = c.json("/uuid/" + self.base32)
            self.typeid_parse = {t: c.json("/typeid/" + t) for t in
                                 self.typeids + [self.bare_typeid] + self.long_typeids}
        finally:
            c.close()


class Judges(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.environ.get("SNOWFLAKED_BIN"):
            raise unittest.SkipTest("SNOWFLAKED_BIN not set")
        server = Server(env=NODE_ENV)
        try:
            cls.s = Sample(server)
        finally:
            server.stop()

    def test_shapes(self):
        s = self.s
        self.assertEqual(len(s.uuids), BATCH + 1)
        self.assertEqual(len(s.ulids), BATCH + 1)
        for u in s.uuids:
            self.assertEqual(len(u), 36, u)
        for u in s.ulids:
            self.assertEqual(len(u), 26, u)
        self.assertEqual(len(s.hex), 32, s.hex)
        self.assertEqual(len(s.base32), 26, s.base32)
        self.assertEqual(len(s.typeids), BATCH + 1)
        for t in s.typeids:
            self.assertEqual(len(t), 5 + 26, t)
            self.assertTrue(t.startswith("user_"), t)
        self.assertEqual(len(s.bare_typeid), 26, s.bare_typeid)
        for t in s.long_typeids:
            self.assertEqual(len(t), 90, t)
            self.assertTrue(t.startswith(LONG_PREFIX + "_"), t)

    def check_python_uuid(self, text, answer, hex_text=None):
        """Python's uuid module on one canonical UUIDv7 text against our parse answer."""
        u = uuid.UUID(text)
        self.assertEqual(u.version, 7, text)
        self.assertEqual(u.variant, uuid.RFC_4122, text)
        self.assertEqual(str(u), text, "not the canonical lowercase form")
        self.assertEqual(u.int >> 80, answer["timestamp_ms"], text)
        self.assertEqual((u.int >> 64) & 0xfff, answer["counter"], text)
        self.assertEqual((u.int >> 52) & 0x3ff, NODE, text + ": node bits")
        self.assertEqual((answer["datacenter"], answer["worker"]), (DATACENTER, WORKER), text)
        self.assertEqual(answer["uuid"], text)
        self.assertEqual(answer["version"], 7, text)
        if hex_text is not None:
            self.assertEqual(u.hex, hex_text)
        return u

    def test_python_uuid_judge(self):
        s = self.s
        ints = []
        for text in s.uuids:
            answer = s.uuid_parse[text]
            ints.append(self.check_python_uuid(text, answer).int)
            # Stamped while we waited for it: no future (or stale) timestamps, 50 ms of slack
            # for the two clocks' reading.
            self.assertTrue(s.t0 - 50 <= answer["timestamp_ms"] <= s.t1 + 50,
                            (text, answer["timestamp_ms"], s.t0, s.t1))
        at = first_disorder(ints)
        self.assertIsNone(at, "UUIDs not strictly increasing as integers at %s: %s" % (
            at, s.uuids[at - 1:at + 1] if at else ""))
        # The hex encoding: its parse answer is the canonical text of the same 128 bits.
        self.check_python_uuid(s.hex_parse["uuid"], s.hex_parse, hex_text=s.hex)
        # The base32 encoding: 26 Crockford digits of the same 128 bits, uppercase.
        u = self.check_python_uuid(s.base32_parse["uuid"], s.base32_parse)
        self.assertEqual(s.base32, crockford_text(u.int))

    def test_python_ulid_judge(self):
        s = self.s
        ints = []
        for text in s.ulids:
            answer = s.ulid_parse[text]
            self.assertEqual(answer["ulid"], text)
            u = uuid.UUID(answer["uuid"])
            self.assertEqual(str(u), answer["uuid"], "uuid field not canonical lowercase")
            self.assertEqual(u.int >> 80, answer["timestamp_ms"], text)
            self.assertEqual((u.int >> 68) & 0xfff, answer["counter"], text)
            self.assertEqual((u.int >> 58) & 0x3ff, NODE, text + ": node bits")
            self.assertEqual((answer["datacenter"], answer["worker"]), (DATACENTER, WORKER), text)
            self.assertEqual(text, crockford_text(u.int))
            self.assertTrue(s.t0 - 50 <= answer["timestamp_ms"] <= s.t1 + 50,
                            (text, answer["timestamp_ms"], s.t0, s.t1))
            ints.append(u.int)
        at = first_disorder(ints)
        self.assertIsNone(at, "ULIDs not strictly increasing as integers at %s: %s" % (
            at, s.ulids[at - 1:at + 1] if at else ""))

    def test_python_typeid_judge(self):
        """The suffix is the lowercase Crockford base32 of the parse answer's UUID (computed here),
        that UUID a UUIDv7 by Python's uuid module with our node and fields; the UUIDs increase
        strictly in issue order, across /typeid, /typeids and the other prefixes."""
        s = self.s
        ints = []
        for text in s.typeids + [s.bare_typeid] + s.long_typeids:
            answer = s.typeid_parse[text]
            prefix, _, suffix = text.rpartition("_")
            self.assertEqual((answer["typeid"], answer["prefix"], answer["suffix"]),
                             (text, prefix, suffix))
            self.assertTrue(answer["uuid7"], text)
            u = self.check_python_uuid(answer["uuid"], answer)
            self.assertEqual(suffix, crockford_text(u.int).lower(), text)
            self.assertTrue(s.t0 - 50 <= answer["timestamp_ms"] <= s.t1 + 50,
                            (text, answer["timestamp_ms"], s.t0, s.t1))
            ints.append(u.int)
        at = first_disorder(ints)
        self.assertIsNone(at, "TypeIDs' UUIDs not strictly increasing at %s" % at)

    def test_npm_judges(self):
        s = self.s
        records = []
        for text in s.uuids:
            a = s.uuid_parse[text]
            records.append({"kind": "uuid7", "text": text, "timestamp_ms": a["timestamp_ms"],
                            "counter": a["counter"], "hex": text.replace("-", "")})
        a = s.hex_parse
        records.append({"kind": "uuid7", "label": "encoding=hex " + s.hex, "text": a["uuid"],
                        "timestamp_ms": a["timestamp_ms"], "counter": a["counter"],
                        "hex": s.hex})
        a = s.base32_parse
        records.append({"kind": "ulid", "label": "encoding=base32 " + s.base32, "text": s.base32,
                        "timestamp_ms": a["timestamp_ms"], "uuid": a["uuid"], "uuid_version": 7})
        records.append({"kind": "uuid7", "label": "base32's UUID " + a["uuid"], "text": a["uuid"],
                        "timestamp_ms": a["timestamp_ms"], "counter": a["counter"],
                        "hex": a["uuid"].replace("-", "")})
        for text in s.ulids:
            a = s.ulid_parse[text]
            records.append({"kind": "ulid", "text": text, "timestamp_ms": a["timestamp_ms"],
                            "uuid": a["uuid"]})
        records.append({"kind": "order", "label": "/uuid then /uuids issue order",
                        "texts": s.uuids})
        records.append({"kind": "order", "label": "/ulid then /ulids issue order",
                        "texts": s.ulids})
        for text in s.typeids + [s.bare_typeid] + s.long_typeids:
            a = s.typeid_parse[text]
            records.append({"kind": "typeid", "text": text, "prefix": a["prefix"],
                            "uuid": a["uuid"], "timestamp_ms": a["timestamp_ms"],
                            "counter": a["counter"]})
        records.append({"kind": "order", "label": "/typeid?prefix=user then /typeids issue order",
                        "texts": s.typeids})
        records.append({"kind": "order", "label": "/typeids with a 63-character prefix",
                        "texts": s.long_typeids})
        rc, out = npm_judge(records)
        print(out.splitlines()[-1])
        self.assertEqual(rc, 0, "npm judges rejected our output:\n" + out[-6000:])
        self.assertIn("judge: %d records" % len(records), out)
        self.assertIn(" 0 failures", out)


class RestartJudges(unittest.TestCase):
    """IDs issued after a restart on the same data_dir compare greater than those before."""

    def setUp(self):
        if not os.environ.get("SNOWFLAKED_BIN"):
            self.skipTest("SNOWFLAKED_BIN not set")
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_judges_")
        self.data = os.path.join(self.tmp.name, "data")
        self.server = None
        self.refusals = []

    def tearDown(self):
        if self.server is not None and self.server.proc.poll() is None:
            self.server.proc.kill()
            self.server.proc.wait()
        self.tmp.cleanup()

    def take(self):
        """Five UUIDs, five ULIDs, five TypeIDs. After kill -9 the lease E lies up to lease_ms
        ahead and the daemon refuses (503 + Retry-After) until its clock passes E: retried,
        bounded."""
        c = Client(self.server)
        start = time.time()
        deadline = start + 10
        refused = 0
        try:
            while True:
                c.sock.sendall(get("/uuids?count=5"))
                r = c.reader.response()
                if r.status != 503 or time.time() > deadline:
                    break
                self.assertIsNotNone(r.header("retry-after"), "503 without Retry-After")
                refused += 1
                time.sleep(0.02)
            self.assertEqual(r.status, 200, r.body[:300])
            self.refusals.append("%d refused in %.0f ms" % (refused, (time.time() - start) * 1000))
            return (r.json()["ids"], c.json("/ulids?count=5")["ids"],
                    c.json("/typeids?prefix=order&count=5")["ids"])
        finally:
            c.close()

    def kill9(self):
        self.server.proc.send_signal(signal.SIGKILL)
        self.server.proc.wait(timeout=15)
        self.server.log.close()
        self.server.dir.cleanup()

    def test_restarts(self):
        # run 1, clean stop (SIGTERM), run 2, kill -9, run 3.
        runs = []
        for how, end in (("first run", "stop"), ("after a clean stop", "kill"),
                         ("after kill -9", "stop")):
            self.server = Server(data_dir=self.data, env=LEASE_ENV)
            runs.append((how, self.take()))
            self.server.stop() if end == "stop" else self.kill9()
            self.server = None
        records = []
        for (before, (u0, l0, t0)), (after, (u1, l1, t1)) in zip(runs, runs[1:]):
            for kind, old, new, to_int in (("UUIDs", u0, u1, lambda t: uuid.UUID(t).int),
                                           ("ULIDs", l0, l1, crockford_int),
                                           ("TypeIDs", t0, t1,
                                            lambda t: crockford_int(t[6:].upper()))):
                label = "%s %s -> %s" % (kind, before, after)
                ints = [to_int(t) for t in old + new]
                self.assertIsNone(first_disorder(ints), "%s (Python int order): %s" % (
                    label, old + new))
                records.append({"kind": "order", "label": label, "texts": old + new})
        print("first /uuids per run: %s" % "; ".join(self.refusals))
        rc, out = npm_judge(records)
        print(out.splitlines()[-1])
        self.assertEqual(rc, 0, "npm judge: IDs after a restart do not sort after those before:\n"
                         + out[-4000:])

if __name__ == "__main__":
    unittest.main()
