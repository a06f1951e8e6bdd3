"""IDs over the memcached protocol (cache.memcached_id_keys, docs/cache.md "IDs over the memcached
protocol"), kayac/go-katsubushi's way, against the real binary: pymemcache's get, get_many and
gets; the exact bytes of get/gets/mg answers and of every refused write; the TLS listener; the
refusal when the clock is behind the lease (SERVER_ERROR, nothing else); 100k IDs over several
connections all distinct and increasing per connection; the metrics; HTTP /cache/ refusing the
reserved keys; the key family (a name K reserves K and every "K:<suffix>"); a snapshot's values
under keys since reserved dropped at start; a generator per loop; the configuration's checks."""
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import zlib

import sfharness
import tlscerts
from sfharness import get, memcache_server, request

KEYS = ("cache.memcached_id_keys.snowflake=id", "cache.memcached_id_keys.uuidv7=uuid",
        "cache.memcached_id_keys.ulid=ulid")
REFUSED = b"CLIENT_ERROR key is reserved for IDs: read it with get, gets or mg\r\n"
UUID7 = re.compile(rb"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
ULID = re.compile(rb"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")


def pymemcache():
    return sfharness.debian_import("pymemcache.client.base", "python3-pymemcache").Client


class Raw:
    """A text-protocol connection that sees exactly what went over the wire."""

    def __init__(self, port, sock=None):
        self.sock = sock or socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def close(self):
        self.sock.close()

    def until(self, end):
        while end not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("closed after %r" % self.buf[-200:])
            self.buf += chunk
        i = self.buf.index(end) + len(end)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def ask(self, raw, end=b"\r\n"):
        self.sock.sendall(raw)
        return self.until(end)

    def values(self, raw):
        """A retrieval's answer up to END: [(key, flags, value, cas or None)], framing checked."""
        self.sock.sendall(raw)
        out = []
        while True:
            line = self.until(b"\r\n")
            if line == b"END\r\n":
                return out
            parts = line.split()
            if parts[0] != b"VALUE":
                raise AssertionError("not a VALUE line: %r" % line)
            n = int(parts[3])
            data = self.until(b"\r\n")
            assert len(data) == n + 2, (line, data)
            out.append((parts[1], int(parts[2]), data[:-2], int(parts[4]) if len(parts) > 4
                        else None))


class MemcacheIds(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = tlscerts.Certs()
        cls.tls_port = sfharness.free_port()
        cls.srv, cls.port = memcache_server(
            *KEYS, "cache.memcached_tls.port=%d" % cls.tls_port,
            "cache.memcached_tls.cert_file=%s" % cls.certs.server,
            "cache.memcached_tls.key_file=%s" % cls.certs.server_key)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.certs.cleanup()

    def raw(self):
        c = Raw(self.port)
        self.addCleanup(c.close)
        return c

    def test_exact_bytes_of_get_gets_and_mixed_keys(self):
        c = self.raw()
        self.assertEqual(c.ask(b"set foo 7 0 3\r\nbar\r\n"), b"STORED\r\n")
        got = c.ask(b"get id\r\n", b"END\r\n")
        m = re.fullmatch(rb"VALUE id 0 (\d+)\r\n(\d+)\r\nEND\r\n", got)
        self.assertTrue(m, got)
        self.assertEqual(int(m.group(1)), len(m.group(2)))
        got = c.ask(b"gets id\r\n", b"END\r\n")  # cas 0: nothing to compare-and-swap
        self.assertTrue(re.fullmatch(rb"VALUE id 0 (\d+) 0\r\n(\d+)\r\nEND\r\n", got), got)
        vals = c.values(b"get id foo id uuid missing ulid id\r\n")
        self.assertEqual([v[0] for v in vals], [b"id", b"foo", b"id", b"uuid", b"ulid", b"id"])
        self.assertEqual(vals[1][1:3], (7, b"bar"))
        snow = [int(v[2]) for v in vals if v[0] == b"id"]
        self.assertEqual(snow, sorted(set(snow)), "distinct and increasing in key order")
        self.assertTrue(UUID7.match(vals[3][2]), vals[3])
        self.assertTrue(ULID.match(vals[4][2]), vals[4])
        self.assertTrue(all(v[1] == 0 for v in vals if v[0] != b"foo"))
        # the snowflake ID decodes on /id/{id} as ours, issued just now
        r = request(self.srv, get("/id/%d" % snow[0]))
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["datacenter"], self.srv.datacenter)

    def test_mg(self):
        c = self.raw()
        got = c.ask(b"mg id v k s t f c O7\r\n", b"\r\n")
        m = re.fullmatch(rb"VA (\d+) kid s(\d+) t-1 f0 c0 O7\r\n", got)
        self.assertTrue(m, got)
        self.assertEqual(m.group(1), m.group(2))
        value = c.until(b"\r\n")
        self.assertEqual(len(value), int(m.group(1)) + 2)
        self.assertEqual(c.ask(b"mg uuid k\r\n"), b"HD kuuid\r\n")
        self.assertEqual(c.ask(b"mg id v T30\r\n"), REFUSED)
        self.assertEqual(c.ask(b"mg notthere v\r\nmn\r\n", b"MN\r\n"), b"EN\r\nMN\r\n")

    def test_writes_of_reserved_keys_refused(self):
        c = self.raw()
        for cmd in (b"set id 0 0 2\r\nab\r\n", b"add uuid 0 0 2\r\nab\r\n",
                    b"replace ulid 0 0 2\r\nab\r\n", b"append id 0 0 2\r\nab\r\n",
                    b"prepend id 0 0 2\r\nab\r\n", b"cas id 0 0 2 5\r\nab\r\n",
                    b"incr id 1\r\n", b"decr id 1\r\n", b"delete id\r\n", b"touch id 10\r\n",
                    b"ms id 2\r\nab\r\n", b"ms aWQ= 2 b\r\nab\r\n", b"md id\r\n", b"ma id\r\n"):
            self.assertEqual(c.ask(cmd + b"mn\r\n", b"MN\r\n"), REFUSED + b"MN\r\n", cmd)
        # never in the cache: the key listing does not show them
        self.assertEqual(c.ask(b"set listed 0 0 1\r\nx\r\n"), b"STORED\r\n")
        dump = c.ask(b"lru_crawler metadump all\r\n", b"END\r\n")
        self.assertIn(b"key=listed ", dump)
        for k in (b"id", b"uuid", b"ulid"):
            self.assertNotIn(b"key=%s " % k, dump)
        # nor on HTTP: writes refused, reads find nothing
        r = request(self.srv, b"PUT /cache/id HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
        self.assertEqual(r.status, 409, r.body)
        self.assertIn("reserved for IDs", r.json()["error"])
        self.assertEqual(request(self.srv, get("/cache/id")).status, 404)
        self.assertEqual(request(self.srv, b"DELETE /cache/uuid HTTP/1.1\r\nHost: x\r\n\r\n").status,
                         409)

    def test_key_family_through_pymemcache_and_http(self):
        """A name K reserves K and every "K:<suffix>": get_many of 300 members gives 300 new,
        distinct IDs under the exact keys asked (how a key-hashing client spreads IDs over a
        fleet); "K:" alone and "Kx:1" stay cache keys; HTTP refuses writes of members."""
        mc = pymemcache()(("127.0.0.1", self.port), timeout=5)
        try:
            mc.delete("id:")  # a cache key, which another test may have set
            keys = ["id:%d" % i for i in range(300)] + ["uuid:a", "ulid:b", "id:x:y", "id:"]
            many = mc.get_many(keys)
            self.assertEqual(set(many), set(keys) - {"id:"})
            snow = [int(many[k]) for k in keys if k.startswith("id:") and k != "id:"]
            self.assertEqual(len(set(snow)), 301)
            self.assertTrue(UUID7.match(many["uuid:a"]) and ULID.match(many["ulid:b"]), many)
            with self.assertRaisesRegex(Exception, "reserved for IDs"):  # its CLIENT_ERROR
                mc.set("id:5", b"x", noreply=False)
            self.assertTrue(mc.set("id:", b"plain", noreply=False))
            self.assertTrue(mc.set("idx:1", b"plain2", noreply=False))
            self.assertEqual(mc.get_many(["id:", "idx:1"]), {"id:": b"plain", "idx:1": b"plain2"})
        finally:
            mc.close()

    def test_family_members_exact_bytes_and_http(self):
        c = self.raw()
        got = c.ask(b"get id:42 idx id:\r\n", b"END\r\n")
        self.assertTrue(re.fullmatch(rb"VALUE id:42 0 (\d+)\r\n(\d+)\r\nEND\r\n", got), got)
        self.assertEqual(c.ask(b"set uuid:1 0 0 2\r\nab\r\nmn\r\n", b"MN\r\n"), REFUSED + b"MN\r\n")
        self.assertEqual(c.ask(b"delete ulid:zz\r\n"), REFUSED)
        r = request(self.srv, b"PUT /cache/id:7 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
        self.assertEqual(r.status, 409, r.body)
        self.assertIn("reserved for IDs", r.json()["error"])
        self.assertEqual(request(self.srv, get("/cache/id:7")).status, 404)
        r = request(self.srv, b"PUT /cache/id: HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
        self.assertLess(r.status, 300, r.body)

    def test_pymemcache_get_get_many_gets(self):
        Client = pymemcache()
        mc = Client(("127.0.0.1", self.port), timeout=5)
        try:
            a, b = int(mc.get("id")), int(mc.get("id"))
            self.assertLess(a, b)
            many = mc.get_many(["id", "uuid", "ulid", "nokey"])
            self.assertEqual(set(many), {"id", "uuid", "ulid"})
            self.assertGreater(int(many["id"]), b)
            self.assertTrue(UUID7.match(many["uuid"]) and ULID.match(many["ulid"]), many)
            value, cas = mc.gets("id")
            self.assertGreater(int(value), int(many["id"]))
            self.assertEqual(cas, b"0")
            with self.assertRaises(Exception) as e:  # pymemcache raises MemcacheClientError
                mc.set("id", b"1", noreply=False)
            self.assertIn("reserved for IDs", str(e.exception))
        finally:
            mc.close()

    def test_tls_port(self):
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(self.certs.ca)
        mc = pymemcache()(("127.0.0.1", self.tls_port), timeout=5, tls_context=ctx)
        try:
            first = int(mc.get("id"))
            self.assertTrue(UUID7.match(mc.get("uuid")))
            value, cas = mc.gets("id")
            self.assertGreater(int(value), first)
        finally:
            mc.close()
        raw = ctx.wrap_socket(socket.create_connection(("127.0.0.1", self.tls_port), timeout=10),
                              server_hostname="127.0.0.1")
        c = Raw(0, raw)
        try:
            vals = c.values(b"get id id id\r\n")
            ids = [int(v[2]) for v in vals]
            self.assertEqual(len(ids), 3)
            self.assertEqual(ids, sorted(set(ids)))
            self.assertEqual(c.ask(b"set id 0 0 1\r\nx\r\n"), REFUSED)
        finally:
            c.close()

    def test_100k_distinct_over_several_connections_and_counted(self):
        before = self.counts()
        per_get, gets_per_conn, nconn = 100, 250, 4  # 4 x 250 x 100 = 100k
        line = b"get" + b" id" * per_get + b"\r\n"
        results, errors = [[] for _ in range(nconn)], []

        def worker(i):
            try:
                c = Raw(self.port)
                for _ in range(gets_per_conn):
                    c.sock.sendall(line)
                    got = c.until(b"END\r\n")
                    results[i].extend(int(x) for x in re.findall(rb"\r\n(\d+)\r\n", got))
                c.close()
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(nconn)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        total = sum(len(r) for r in results)
        self.assertEqual(total, per_get * gets_per_conn * nconn)
        self.assertEqual(len(set().union(*map(set, results))), total, "a duplicate ID")
        for r in results:
            self.assertTrue(all(a < b for a, b in zip(r, r[1:])), "not increasing per connection")
        print("100k IDs over %d connections in %.2f s" % (nconn, time.time() - t0))
        after = self.counts()
        self.assertGreaterEqual(after[0] - before[0], total)
        self.assertGreaterEqual(after[1] - before[1], total)

    def counts(self):
        text = request(self.srv, get("/metrics")).body.decode()
        mc = re.search(r'^snowflaked_memcached_ids_issued_total\{format="snowflake"\} (\d+)', text,
                       re.M)
        fmt = re.search(r'^snowflaked_ids_issued_by_format_total\{format="snowflake"\} (\d+)',
                        text, re.M)
        self.assertTrue(mc and fmt, "metrics missing")
        return int(mc.group(1)), int(fmt.group(1))


class Refusals(unittest.TestCase):
    def test_clock_behind_the_lease_refuses_with_server_error(self):
        """The lease says IDs up to an hour ahead were issued (a clock stepped back an hour): as
        HTTP answers 503, every ID key answers SERVER_ERROR and nothing else of its get, while
        cached keys still answer."""
        d = tempfile.mkdtemp(prefix="sf_it_lease_")
        data = os.path.join(d, "data")
        os.makedirs(data)
        line = "snowflaked-lease 1 %d" % (int(time.time() * 1000) + 3600 * 1000)
        with open(os.path.join(data, "snowflake.lease"), "w") as f:
            f.write("%s %08x\n" % (line, zlib.crc32(line.encode())))
        srv, port = memcache_server(*KEYS, data_dir=data)
        try:
            r = request(srv, get("/id"))
            self.assertEqual(r.status, 503)
            why = r.json()["error"].encode()
            c = Raw(port)
            self.assertEqual(c.ask(b"set foo 0 0 1\r\nx\r\n"), b"STORED\r\n")
            err = b"SERVER_ERROR " + why + b"\r\n"
            self.assertEqual(c.ask(b"get foo id\r\nmn\r\n", b"MN\r\n"), err + b"MN\r\n")
            self.assertEqual(c.ask(b"gets uuid foo\r\nmn\r\n", b"MN\r\n"), err + b"MN\r\n")
            self.assertEqual(c.ask(b"mg ulid v\r\n"), err)
            self.assertEqual(c.values(b"get foo\r\n"), [(b"foo", 0, b"x", None)])
            c.close()
        finally:
            srv.stop()


class Lifecycle(unittest.TestCase):
    def test_snapshot_value_under_a_key_since_reserved_is_dropped(self):
        """A value cached under "id" before the key was reserved comes back with the snapshot;
        with the key reserved it is dropped at start (said in the log) and never listed."""
        d = tempfile.mkdtemp(prefix="sf_it_snap_")
        data = os.path.join(d, "data")
        srv, port = memcache_server("cache.persist=true", data_dir=data)
        try:
            c = Raw(port)
            self.assertEqual(c.ask(b"set id 0 0 5\r\nhello\r\nset keep 0 0 1\r\nk\r\n",
                                   b"STORED\r\nSTORED\r\n"), b"STORED\r\nSTORED\r\n")
            # members of the family "id" (K:<suffix>), and keys that are not ("id:", "idx:1")
            for k in (b"id:1", b"id:two", b"id::", b"id:", b"idx:1"):
                self.assertEqual(c.ask(b"set %s 0 0 1\r\nv\r\n" % k), b"STORED\r\n")
            c.close()
        finally:
            srv.stop()  # the snapshot is written at a graceful stop
        srv, port = memcache_server("cache.persist=true", *KEYS, data_dir=data)
        try:
            c = Raw(port)
            vals = c.values(b"get id keep\r\n")
            self.assertEqual(vals[1], (b"keep", 0, b"k", None))
            self.assertTrue(vals[0][2].isdigit() and vals[0][2] != b"hello", vals)
            dump = c.ask(b"lru_crawler metadump all\r\n", b"END\r\n")
            self.assertIn(b"key=keep ", dump)
            for k in (b"id", b"id%3A1", b"id%3Atwo", b"id%3A%3A"):  # metadump URL-encodes
                self.assertNotIn(b"key=%s " % k, dump)
            self.assertIn(b"key=id%3A ", dump)
            self.assertIn(b"key=idx%3A1 ", dump)
            self.assertEqual([v[0] for v in c.values(b"get id: idx:1 id:1\r\n")],
                             [b"id:", b"idx:1", b"id:1"])
            c.close()
            said = 'the snapshot held 4 values under keys now reserved for IDs'
            deadline = time.time() + 5  # the log is written by its own thread
            while said not in srv.output() and time.time() < deadline:
                time.sleep(0.05)
            self.assertIn(said, srv.output())
        finally:
            srv.stop()

    def test_per_thread_generators(self):
        """With a generator per loop (snowflake.per_thread_worker_ids), each connection's IDs
        come from its loop's worker: distinct across connections, increasing within each."""
        srv, port = memcache_server(KEYS[0], "snowflake.per_thread_worker_ids=true",
                                    "snowflake.worker_id=4", threads=2)
        try:
            seen, workers = set(), set()
            for _ in range(8):
                c = Raw(port)
                ids = [int(v[2]) for v in c.values(b"get" + b" id" * 50 + b"\r\n")]
                c.close()
                self.assertEqual(ids, sorted(ids))
                self.assertFalse(seen & set(ids), "a duplicate across connections")
                seen |= set(ids)
                workers.add((ids[0] >> 12) & 31)
            self.assertEqual(len(seen), 400)
            self.assertLessEqual(workers, {4, 5})
        finally:
            srv.stop()


class Configuration(unittest.TestCase):
    def check(self, *sets):
        r = subprocess.run([sfharness.BINARY, "--check", *sfharness.set_args(*sets)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        return r.returncode, r.stdout.decode(errors="replace")

    def test_keys_checked(self):
        self.assertEqual(self.check(*KEYS)[0], 0)
        rc, out = self.check("cache.memcached_id_keys.snowflake=id",
                             "cache.memcached_id_keys.ulid=id")
        self.assertNotEqual(rc, 0)
        self.assertIn("cache.memcached_id_keys.ulid", out)
        self.assertIn("must differ from cache.memcached_id_keys.snowflake", out)
        # a name K reserves "K:<suffix>" too: no name may start with another and ':'
        for a, b in (("sfid", "sfid:u"), ("sfid:u", "sfid"), ("sfid", "sfid:")):
            rc, out = self.check("cache.memcached_id_keys.snowflake=" + a,
                                 "cache.memcached_id_keys.ulid=" + b)
            self.assertNotEqual(rc, 0, (a, b))
            self.assertIn("is in the key family of", out)
            self.assertIn('"%s"' % a, out)
            self.assertIn('"%s"' % b, out)
        self.assertEqual(self.check("cache.memcached_id_keys.snowflake=sfid",
                                    "cache.memcached_id_keys.ulid=sfidu",
                                    "cache.memcached_id_keys.uuidv7=u:sfid")[0], 0)
        rc, out = self.check("cache.memcached_id_keys.uuidv7=a b")
        self.assertNotEqual(rc, 0)
        self.assertIn("must be a memcached text key", out)
        rc, out = self.check("cache.memcached_id_keys.uuidv7=" + "k" * 251)
        self.assertNotEqual(rc, 0)
        self.assertIn("cache.memcached_id_keys.uuidv7", out)


if __name__ == "__main__":
    unittest.main()
