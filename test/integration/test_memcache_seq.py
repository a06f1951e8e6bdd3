"""Sequences and TypeIDs over the memcached protocol (cache.memcached_id_keys.sequence and
.typeid, docs/cache.md "IDs over the memcached protocol", docs/sequences.md) against the real
binary, through pymemcache and raw sockets: `get seq:<namespace>` draws the namespace's next
numbers (the same as /seq/<namespace>), several keys on a line consecutive per namespace in key
order, all or none; `get tid:<type>` a TypeID; the refusals in HTTP's words (unknown namespace,
a namespace with a token, past max, more than a block, no number in hand: SERVER_ERROR ...
(retry)), a bad type, the bare key; gets/gat/gats/mg; writes refused (noreply too); a get paused
on a full output never draws twice; the metrics; the configuration's family checks.

Run as ctest does, from test/integration: `python3 -m unittest -v test_memcache_seq`."""
import json
import re
import subprocess
import time
import unittest

import sfharness
from sfharness import Server, get, memcache_server, request, wait_ready
from test_memcache_ids import REFUSED, Raw, pymemcache

TOKEN = "orders-Token_0123456789"
KEYS = ("cache.memcached_id_keys.snowflake=id", "cache.memcached_id_keys.sequence=seq",
        "cache.memcached_id_keys.typeid=tid")
TYPEID = re.compile(rb"^(?:([a-z](?:[a-z_]{0,61}[a-z])?)_)?([0-7][0-9a-hjkmnp-tv-z]{25})$")
RETRY = re.compile(rb"^SERVER_ERROR namespace \S+ .* \(retry\)\r\n$")


def namespaces(*defs):
    return "sequences.namespaces=" + json.dumps(list(defs))


def seq_values(c, line, timeout=10):
    """The numbers of a get line of sequence keys: [(key, number)], waiting out the 503-like
    SERVER_ERROR ... (retry) of a block still on its way on a busy machine."""
    deadline = time.monotonic() + timeout
    while True:
        c.sock.sendall(line)
        first = c.until(b"\r\n")
        if first.startswith(b"SERVER_ERROR") and time.monotonic() < deadline:
            assert RETRY.match(first), first
            time.sleep(0.02)
            continue
        c.buf = first + c.buf
        out = []
        while True:
            head = c.until(b"\r\n")
            if head == b"END\r\n":
                return out
            parts = head.split()
            assert parts[0] == b"VALUE", head
            data = c.until(b"\r\n")
            assert len(data) == int(parts[3]) + 2, (head, data)
            out.append((parts[1], int(data[:-2])))


class SequenceKeys(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv, cls.port = memcache_server(
            *KEYS, namespaces({"name": "orders", "start": 1000, "block": 50},
                              {"name": "items", "start": 1, "block": 100},
                              {"name": "inv", "token": TOKEN, "block": 20},
                              {"name": "small", "block": 4, "max": 9},
                              {"name": "paused", "block": 1000},
                              {"name": "pm", "block": 1000}))
        wait_ready(cls.srv)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def raw(self):
        c = Raw(self.port)
        self.addCleanup(c.close)
        return c

    def test_exact_bytes_consecutive_in_key_order_and_shared_with_http(self):
        c = self.raw()
        got = seq_values(c, b"get seq:orders\r\n")
        self.assertEqual(len(got), 1)
        first = got[0][1]
        self.assertGreaterEqual(first, 1000)
        vals = seq_values(c, b"get seq:orders seq:items seq:orders id seq:items seq:orders\r\n")
        self.assertEqual([k for k, _ in vals[:3]], [b"seq:orders", b"seq:items", b"seq:orders"])
        orders = [n for k, n in vals if k == b"seq:orders"]
        items = [n for k, n in vals if k == b"seq:items"]
        # one node, the file source: dense (the next block continues the last)
        self.assertEqual(orders, [first + 1, first + 2, first + 3])
        self.assertEqual(items, [items[0], items[0] + 1])
        # the line's exact bytes: flags 0, the length, the number
        c.sock.sendall(b"get seq:orders\r\n")
        got = c.until(b"END\r\n")
        self.assertEqual(got, b"VALUE seq:orders 0 4\r\n%d\r\nEND\r\n" % (first + 4))
        # the same namespace as HTTP's /seq/orders: its next number
        r = request(self.srv, get("/seq/orders"))
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["id"], first + 5)
        self.assertEqual(seq_values(c, b"get seq:orders\r\n"), [(b"seq:orders", first + 6)])

    def test_pymemcache_get_get_many_gets_and_gat(self):
        mc = pymemcache()(("127.0.0.1", self.port), timeout=5)
        try:
            a = int(mc.get("seq:items"))
            many = mc.get_many(["seq:items", "seq:orders", "tid:user", "tid"])
            self.assertEqual(set(many), {"seq:items", "seq:orders", "tid:user", "tid"})
            self.assertGreater(int(many["seq:items"]), a)
            m = TYPEID.match(many["tid:user"])
            self.assertTrue(m and m.group(1) == b"user", many)
            m = TYPEID.match(many["tid"])
            self.assertTrue(m and m.group(1) is None, many)  # no prefix: the suffix alone
            value, cas = mc.gets("seq:items")
            self.assertGreater(int(value), int(many["seq:items"]))
            with self.assertRaisesRegex(Exception, "reserved for IDs"):
                mc.set("seq:items", b"x", noreply=False)
            with self.assertRaisesRegex(Exception, 'no sequence namespace "nope"'):
                mc.get("seq:nope")
        finally:
            mc.close()
        c = self.raw()
        self.assertEqual(seq_values(c, b"gat 10 seq:items\r\n"), [(b"seq:items", int(value) + 1)])
        c.sock.sendall(b"gats 0 seq:items tid:t\r\n")
        got = c.until(b"END\r\n")
        self.assertTrue(re.fullmatch(rb"VALUE seq:items 0 \d+ 0\r\n\d+\r\n"
                                     rb"VALUE tid:t 0 28 0\r\nt_[0-7][0-9a-z]{25}\r\nEND\r\n", got),
                        got)

    def test_typeids_increase_in_key_order(self):
        c = self.raw()
        vals = c.values(b"get tid:user tid:user tid:a_b tid tid:user\r\n")
        ids = [v[2] for v in vals]
        self.assertEqual([v[0] for v in vals],
                         [b"tid:user", b"tid:user", b"tid:a_b", b"tid", b"tid:user"])
        suffixes = []
        for key, v in zip([v[0] for v in vals], ids):
            m = TYPEID.match(v)
            self.assertTrue(m, v)
            want = key[4:] or None
            self.assertEqual(m.group(1), want, v)
            suffixes.append(m.group(2))
        self.assertEqual(suffixes, sorted(set(suffixes)), "distinct and increasing in key order")
        # each decodes on HTTP's /typeid/{typeid} as a UUIDv7
        r = request(self.srv, get("/typeid/" + ids[0].decode()))
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["prefix"], "user")

    def test_refusals_are_the_lines_only_answer(self):
        c = self.raw()
        cases = (
            (b"get seq\r\n", b"CLIENT_ERROR a sequence is read as seq:<namespace>\r\n"),
            (b"get id seq:orders seq\r\n",
             b"CLIENT_ERROR a sequence is read as seq:<namespace>\r\n"),
            (b"get seq:nope\r\n", b'CLIENT_ERROR no sequence namespace "nope"\r\n'),
            (b"get id seq:orders seq:nope\r\n", b'CLIENT_ERROR no sequence namespace "nope"\r\n'),
            (b"get seq:inv\r\n", b"CLIENT_ERROR namespace inv has a token: use HTTP\r\n"),
            (b"mg seq:inv v\r\n", b"CLIENT_ERROR namespace inv has a token: use HTTP\r\n"),
            (b"mg seq v\r\n", b"CLIENT_ERROR a sequence is read as seq:<namespace>\r\n"),
            (b"get " + b"seq:small " * 5 + b"\r\n",
             b"CLIENT_ERROR count must be at most 4 for namespace small (its block)\r\n"),
            (b"get" + b" seq:items" * 129 + b"\r\n",
             b"CLIENT_ERROR more than 128 sequence keys in a get\r\n"),
            (b"get tid:User\r\n", None),
            (b"get seq:orders tid:_x\r\n", None),
            (b"mg tid:a__ v\r\n", None),
        )
        for line, want in cases:
            got = c.ask(line + b"mn\r\n", b"MN\r\n")
            if want is None:  # the TypeID spec's rule, named
                self.assertTrue(re.fullmatch(rb"CLIENT_ERROR type: the prefix .* \(TypeID spec "
                                             rb"v0\.3\)\r\nMN\r\n", got), (line, got))
            else:
                self.assertEqual(got, want + b"MN\r\n", line)
        # none of the refused lines took a number of orders: the next one follows the last
        a = seq_values(c, b"get seq:orders\r\n")[0][1]
        c.ask(b"get seq:orders seq:nope\r\n")
        self.assertEqual(seq_values(c, b"get seq:orders\r\n")[0][1], a + 1)
        # HTTP refuses the token's namespace without it, as before
        self.assertEqual(request(self.srv, get("/seq/inv")).status, 401)

    def test_max_all_or_none_and_no_hole_in_the_other_namespace(self):
        """small: start 1, max 9, blocks of 4. A line wanting more than is left is refused as a
        whole; the namespace short of numbers is drawn from first, so that the other namespace
        of the line loses nothing; then the last number, then 410's words."""
        c = self.raw()
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 8 and time.monotonic() < deadline:
            want = min(2, 8 - len(got))
            got += [n for _, n in seq_values(c, b"get" + b" seq:small" * want + b"\r\n")]
        self.assertEqual(got, list(range(1, 9)))
        before = seq_values(c, b"get seq:orders\r\n")[0][1]
        line = c.ask(b"get seq:orders seq:small seq:small\r\n")
        self.assertTrue(line.startswith((b"CLIENT_ERROR namespace small is past its max 9",
                                         b"SERVER_ERROR namespace small")), line)
        c.sock.sendall(b"mn\r\n")
        self.assertEqual(c.until(b"\r\n"), b"MN\r\n", "nothing after the refusal")
        self.assertEqual(seq_values(c, b"get seq:orders\r\n")[0][1], before + 1)
        self.assertEqual(seq_values(c, b"get seq:small\r\n"), [(b"seq:small", 9)])
        gone = b"CLIENT_ERROR namespace small is past its max 9: no number is left\r\n"
        deadline = time.monotonic() + 10
        while True:  # 503's words while the source is still saying "past max"
            line = c.ask(b"get seq:small\r\n")
            if line == gone or time.monotonic() > deadline:
                break
            self.assertTrue(RETRY.match(line), line)
            time.sleep(0.02)
        self.assertEqual(line, gone)
        self.assertEqual(c.ask(b"mg seq:small v\r\n"),
                         b"CLIENT_ERROR namespace small is past its max 9: no number is left\r\n")

    def test_mg_flags(self):
        c = self.raw()
        got = c.ask(b"mg seq:pm v k s t f c O7\r\n")
        m = re.fullmatch(rb"VA (\d+) kseq:pm s(\d+) t-1 f0 c0 O7\r\n", got)
        self.assertTrue(m, got)
        self.assertEqual(m.group(1), m.group(2))
        n1 = int(c.until(b"\r\n"))
        self.assertEqual(c.ask(b"mg seq:pm k\r\n"), b"HD kseq:pm\r\n")  # taken all the same
        self.assertEqual(c.ask(b"mg seq:pm v\r\n"), b"VA %d\r\n" % len(b"%d" % (n1 + 2)))
        self.assertEqual(int(c.until(b"\r\n")), n1 + 2)
        self.assertEqual(c.ask(b"mg seq:pm v T30\r\n"), REFUSED)
        got = c.ask(b"mg tid:order v k\r\n")
        self.assertEqual(got, b"VA 32 ktid:order\r\n")
        self.assertTrue(TYPEID.match(c.until(b"\r\n")[:-2]))
        got = c.ask(b"mg c2VxOnBt b v k\r\n")  # base64 "seq:pm": the decoded key is the one
        self.assertEqual(got[:3], b"VA ", got)
        self.assertEqual(int(c.until(b"\r\n")), n1 + 3)

    def test_writes_refused_noreply_too(self):
        c = self.raw()
        for cmd in (b"set seq:orders 0 0 2\r\nab\r\n", b"add tid:user 0 0 2\r\nab\r\n",
                    b"incr seq:orders 1\r\n", b"delete seq\r\n", b"touch tid 10\r\n",
                    b"ms seq:orders 2\r\nab\r\n", b"md tid:x\r\n", b"ma seq:orders\r\n"):
            self.assertEqual(c.ask(cmd + b"mn\r\n", b"MN\r\n"), REFUSED + b"MN\r\n", cmd)
        # noreply: nothing answered (memcached's rule), nothing stored, the key still draws
        for cmd in (b"set seq:orders 0 0 2 noreply\r\nab\r\n", b"delete seq:orders noreply\r\n",
                    b"set tid:user 0 0 2 noreply\r\nab\r\n", b"ms seq:orders 2 q\r\nab\r\n"):
            got = c.ask(cmd + b"mn\r\n", b"MN\r\n")
            self.assertIn(got, (b"MN\r\n", REFUSED + b"MN\r\n"), cmd)
        vals = seq_values(c, b"get seq:orders\r\n")
        self.assertEqual(vals[0][0], b"seq:orders")
        dump = c.ask(b"lru_crawler metadump all\r\n", b"END\r\n")
        self.assertNotIn(b"key=seq", dump)
        self.assertNotIn(b"key=tid", dump)

    def test_paused_get_never_draws_twice(self):
        """A get whose output fills (large cached values) pauses until the client reads; the
        sequence keys of a paused line must not be drawn again when it resumes (a hole)."""
        c = self.raw()
        big = b"x" * 500000
        self.assertEqual(c.ask(b"set big 0 0 %d\r\n%s\r\n" % (len(big), big)), b"STORED\r\n")
        line = b"get" + b" big seq:paused" * 12 + b" big\r\n"
        c.sock.sendall(line)
        time.sleep(0.3)  # the output fills and the get pauses before the client reads
        got = c.until(b"END\r\n")
        nums = [int(x) for x in re.findall(rb"VALUE seq:paused 0 \d+\r\n(\d+)\r\n", got)]
        self.assertEqual(len(nums), 12)
        self.assertEqual(got.count(b"VALUE big 0 500000\r\n"), 13)
        self.assertEqual(nums, list(range(nums[0], nums[0] + 12)))
        self.assertEqual(seq_values(c, b"get seq:paused\r\n")[0][1], nums[-1] + 1)

    def test_long_line_with_a_key_too_long_draws_only_what_it_answers(self):
        """A get line longer than 2048 bytes is answered as it arrives; a key too long in it
        ends the answer with CLIENT_ERROR: the sequence keys after it are never drawn."""
        c = self.raw()
        a = seq_values(c, b"get seq:items\r\n")[0][1]
        head = b"get" + b" seq:items" * 3 + b"".join(b" miss%04d" % i for i in range(300))
        self.assertGreater(len(head), 2048)
        c.sock.sendall(head)  # no newline yet: its keys are answered as they arrive
        time.sleep(0.3)
        c.sock.sendall(b" seq:items " + b"k" * 251 + b" seq:items seq:items\r\n")
        got = c.until(b"CLIENT_ERROR bad command line format\r\n")
        nums = [int(x) for x in re.findall(rb"VALUE seq:items 0 \d+\r\n(\d+)\r\n", got)]
        # (a loaded machine may read both parts at once: then only the error, memcached's way)
        self.assertIn(nums, ([a + 1, a + 2, a + 3, a + 4], []))
        self.assertEqual(seq_values(c, b"get seq:items\r\n")[0][1], a + 1 + len(nums))

    def test_metrics(self):
        c = self.raw()
        seq_values(c, b"get seq:items seq:items\r\n")
        c.values(b"get tid:m\r\n")
        body = request(self.srv, get("/metrics")).body.decode()

        def value(name, label):
            m = re.search(r"^%s\{%s\} (\d+)$" % (re.escape(name), re.escape(label)), body, re.M)
            self.assertTrue(m, (name, label))
            return int(m.group(1))

        self.assertGreaterEqual(
            value("snowflaked_memcached_ids_issued_total", 'format="sequence"'), 2)
        self.assertGreaterEqual(value("snowflaked_memcached_ids_issued_total", 'format="typeid"'),
                                1)
        self.assertGreaterEqual(value("snowflaked_ids_issued_by_format_total", 'format="typeid"'),
                                1)
        self.assertGreaterEqual(value("snowflaked_seq_issued_total", 'namespace="items"'), 2)


class NoNumberInHand(unittest.TestCase):
    def test_burst_beyond_both_blocks_is_server_error_retry(self):
        """A block reserve slower than the gets (400 ms): the line is refused at once with
        HTTP's 503 words and "(retry)", never a wait; what was answered is distinct and
        increasing."""
        srv, port = memcache_server(*KEYS, namespaces({"name": "burst", "block": 10}),
                                    "sequences.reserve_delay_ms=400", "sequences.retry_ms=100")
        try:
            wait_ready(srv, timeout=20)
            c = Raw(port)
            got, refused = [], 0
            deadline = time.monotonic() + 10
            while len(got) < 40 and time.monotonic() < deadline:
                c.sock.sendall(b"get seq:burst seq:burst seq:burst\r\n")
                first = c.until(b"\r\n")
                if first.startswith(b"SERVER_ERROR"):
                    refused += 1
                    self.assertTrue(re.fullmatch(
                        rb"SERVER_ERROR namespace burst has no number in hand: .* \(retry\)\r\n",
                        first), first)
                    time.sleep(0.02)
                    continue
                c.buf = first + c.buf
                got += [int(v[2]) for v in c.values(b"")]
            c.close()
            self.assertGreater(refused, 0, "a 400 ms reserve never ran dry at this rate")
            self.assertEqual(got, sorted(set(got)))
            self.assertGreaterEqual(len(got), 30)
        finally:
            srv.stop()

    def test_no_namespaces_every_name_unknown(self):
        srv, port = memcache_server(*KEYS)
        try:
            c = Raw(port)
            self.assertEqual(c.ask(b"get seq:any\r\n"),
                             b'CLIENT_ERROR no sequence namespace "any"\r\n')
            vals = c.values(b"get tid:x id\r\n")
            self.assertEqual([v[0] for v in vals], [b"tid:x", b"id"])
            c.close()
        finally:
            srv.stop()


class Configuration(unittest.TestCase):
    def check(self, *sets):
        r = subprocess.run([sfharness.BINARY, "--check", *sfharness.set_args(*sets)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        return r.returncode, r.stdout.decode(errors="replace")

    def test_families_of_the_new_keys_checked(self):
        self.assertEqual(self.check(*KEYS)[0], 0)
        rc, out = self.check("cache.memcached_id_keys.snowflake=id",
                             "cache.memcached_id_keys.sequence=id")
        self.assertNotEqual(rc, 0)
        self.assertIn("cache.memcached_id_keys.sequence", out)
        for a, b in (("seq", "seq:t"), ("tid:x", "tid")):
            rc, out = self.check("cache.memcached_id_keys.sequence=" + a,
                                 "cache.memcached_id_keys.typeid=" + b)
            self.assertNotEqual(rc, 0, (a, b))
            self.assertIn("is in the key family of", out)
        rc, out = self.check("cache.memcached_id_keys.typeid=a b")
        self.assertNotEqual(rc, 0)
        self.assertIn("must be a memcached text key", out)


if __name__ == "__main__":
    unittest.main()
