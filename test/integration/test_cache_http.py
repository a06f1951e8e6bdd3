"""The cache over HTTP (/cache/{key}) against the real binary: status codes, ETag/CAS,
conditional requests, TTL, counters, key rules, limits, eviction under the memory limit."""
import os
import socket
import tempfile
import time
import unittest

from sfharness import Reader, Server, free_port, get, metric, request


def req(srv, method, path, body=b"", headers=""):
    raw = ("%s %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n" %
           (method, path, len(body), headers)).encode() + body
    return request(srv, raw, head_only=method == "HEAD")


class CacheHttp(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--set", "cache.max_item_bytes=65536", "--set",
                         "server.max_body_bytes=131072")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_put_get_head_delete(self):
        r = req(self.srv, "PUT", "/cache/k1", b"hello", "Content-Type: text/x-test\r\n")
        self.assertEqual(r.status, 201)
        etag = r.header("etag")
        self.assertRegex(etag, r'^"\d+"$')
        g = request(self.srv, get("/cache/k1"))
        self.assertEqual((g.status, g.body, g.header("content-type"), g.header("etag")),
                         (200, b"hello", "text/x-test", etag))
        h = req(self.srv, "HEAD", "/cache/k1")
        self.assertEqual((h.status, h.header("content-length")), (200, "5"))
        r = req(self.srv, "PUT", "/cache/k1", b"world")
        self.assertEqual(r.status, 204)
        self.assertNotEqual(r.header("etag"), etag)
        self.assertEqual(request(self.srv, get("/cache/k1")).header("content-type"),
                         "application/octet-stream")
        self.assertEqual(req(self.srv, "DELETE", "/cache/k1").status, 204)
        self.assertEqual(req(self.srv, "DELETE", "/cache/k1").status, 404)
        r = request(self.srv, get("/cache/k1"))
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json(), {"error": "not found"})

    def test_conditionals(self):
        r = req(self.srv, "PUT", "/cache/c1", b"v1", "If-None-Match: *\r\n")
        self.assertEqual(r.status, 201)
        self.assertEqual(req(self.srv, "PUT", "/cache/c1", b"v2", "If-None-Match: *\r\n").status,
                         412)
        etag = r.header("etag")
        self.assertEqual(request(self.srv, get("/cache/c1", "If-None-Match: %s\r\n" % etag))
                         .status, 304)
        self.assertEqual(req(self.srv, "PUT", "/cache/c1", b"v3", 'If-Match: "1"\r\n').status,
                         412)
        r = req(self.srv, "PUT", "/cache/c1", b"v3", "If-Match: %s\r\n" % etag)
        self.assertEqual(r.status, 204)
        self.assertEqual(req(self.srv, "DELETE", "/cache/c1", headers="If-Match: %s\r\n" % etag)
                         .status, 412)  # the old tag
        self.assertEqual(req(self.srv, "DELETE", "/cache/c1",
                             headers="If-Match: %s\r\n" % r.header("etag")).status, 204)
        self.assertEqual(req(self.srv, "PUT", "/cache/c2", b"x", 'If-Match: "5"\r\n').status, 412)
        self.assertEqual(req(self.srv, "PUT", "/cache/c2", b"x", "If-Match: garbage\r\n").status,
                         400)

    def test_etag_numbers_span_64_bits(self):
        # a tag is read by util/decimal.h: any CAS up to 2^64 - 1 is a tag (none matches here),
        # one beyond it or with a sign or blank is not a tag at all
        req(self.srv, "PUT", "/cache/c3", b"x")
        for tag, status in (('"18446744073709551615"', 412), ('W/"18446744073709551610"', 412),
                            ('"0018446744073709551615"', 400), ('"18446744073709551616"', 400),
                            ('"+5"', 400), ('" 5"', 400), ('""', 400)):
            with self.subTest(tag):
                self.assertEqual(req(self.srv, "PUT", "/cache/c3", b"y", "If-Match: %s\r\n" % tag)
                                 .status, status)

    def test_ttl(self):
        self.assertEqual(req(self.srv, "PUT", "/cache/t1?ttl=1", b"x").status, 201)
        self.assertEqual(request(self.srv, get("/cache/t1")).status, 200)
        time.sleep(1.2)
        self.assertEqual(request(self.srv, get("/cache/t1")).status, 404)
        for bad in ("abc", "-1", "1.5", "99999999999"):
            self.assertEqual(req(self.srv, "PUT", "/cache/t2?ttl=" + bad, b"x").status, 400)

    def test_counters(self):
        req(self.srv, "PUT", "/cache/n", b"41")
        r = req(self.srv, "POST", "/cache/n/incr")
        self.assertEqual((r.status, r.body), (200, b"42"))
        self.assertEqual(req(self.srv, "POST", "/cache/n/decr?by=50").body, b"0")
        req(self.srv, "PUT", "/cache/n", b"18446744073709551615")
        self.assertEqual(req(self.srv, "POST", "/cache/n/incr").body, b"0")  # wraps
        req(self.srv, "PUT", "/cache/s", b"text")
        self.assertEqual(req(self.srv, "POST", "/cache/s/incr").status, 409)
        self.assertEqual(req(self.srv, "POST", "/cache/missing/incr").status, 404)
        self.assertEqual(req(self.srv, "POST", "/cache/n/incr?by=x").status, 400)
        self.assertEqual(request(self.srv, get("/cache/n/incr")).status, 405)
        self.assertEqual(req(self.srv, "POST", "/cache/n").status, 405)

    def test_keys(self):
        self.assertEqual(req(self.srv, "PUT", "/cache/a%2Fb%3Fc", b"v").status, 201)
        self.assertEqual(request(self.srv, get("/cache/a%2Fb%3Fc")).body, b"v")
        for bad in ("/cache/a%20b", "/cache/a%0Ab", "/cache/" + "k" * 251, "/cache/%zz"):
            with self.subTest(bad[:20]):
                self.assertEqual(request(self.srv, get(bad)).status, 400)
        self.assertEqual(request(self.srv, get("/cache/" + "k" * 250)).status, 404)

    def test_too_large(self):
        self.assertEqual(req(self.srv, "PUT", "/cache/big", b"x" * 65537).status, 413)
        self.assertEqual(req(self.srv, "PUT", "/cache/big", b"x" * 65536).status, 201)

    def test_binary_value_round_trip(self):
        value = bytes(range(256)) * 64
        req(self.srv, "PUT", "/cache/bin", value)
        self.assertEqual(request(self.srv, get("/cache/bin")).body, value)


class ContentTypeAcrossProtocols(unittest.TestCase):
    """A read says nosniff, and a value changed over memcached (which carries no content type) is
    never served under the type an HTTP writer gave to the bytes before: an attacker who can
    reach the memcached port cannot make a browser run their bytes as the old text/html."""

    @classmethod
    def setUpClass(cls):
        cls.mc_port = free_port()
        cls.srv = Server("--set", "cache.memcached_port=%d" % cls.mc_port)
        cls.mc = socket.create_connection(("127.0.0.1", cls.mc_port), timeout=5)

    @classmethod
    def tearDownClass(cls):
        cls.mc.close()
        cls.srv.stop()

    def memcached(self, raw, reply_end=b"\r\n"):
        self.mc.sendall(raw)
        got = b""
        while not got.endswith(reply_end):
            chunk = self.mc.recv(4096)
            self.assertTrue(chunk, "memcached port closed after %r" % raw)
            got += chunk
        return got

    def test_reads_say_nosniff(self):
        req(self.srv, "PUT", "/cache/ns", b"<b>x</b>", "Content-Type: text/html\r\n")
        for method in ("GET", "HEAD"):
            r = req(self.srv, method, "/cache/ns")
            self.assertEqual((r.status, r.header("x-content-type-options")), (200, "nosniff"))
        etag = req(self.srv, "GET", "/cache/ns").header("etag")
        r = req(self.srv, "GET", "/cache/ns", headers="If-None-Match: %s\r\n" % etag)
        self.assertEqual((r.status, r.header("x-content-type-options")), (304, "nosniff"))

    def test_memcached_writes_drop_the_http_content_type(self):
        def cas_of(key):
            line = self.memcached(b"gets %s\r\n" % key, b"END\r\n").split(b"\r\n")[0]
            return int(line.split()[4])
        # (name, the memcached exchange, its expected reply); each starts from an item PUT over
        # HTTP as text/html with the value "7"
        cases = [
            ("set", lambda k: b"set %s 0 0 6\r\n<svg/>\r\n" % k, b"STORED\r\n"),
            ("replace", lambda k: b"replace %s 0 0 6\r\n<svg/>\r\n" % k, b"STORED\r\n"),
            ("cas", lambda k: b"cas %s 0 0 6 %d\r\n<svg/>\r\n" % (k, cas_of(k)), b"STORED\r\n"),
            ("append", lambda k: b"append %s 0 0 6\r\n<svg/>\r\n" % k, b"STORED\r\n"),
            ("prepend", lambda k: b"prepend %s 0 0 6\r\n<svg/>\r\n" % k, b"STORED\r\n"),
            ("incr", lambda k: b"incr %s 1\r\n" % k, b"8\r\n"),
            ("decr", lambda k: b"decr %s 1\r\n" % k, b"6\r\n"),
            ("ms", lambda k: b"ms %s 6\r\n<svg/>\r\n" % k, b"HD\r\n"),
            ("ms MA", lambda k: b"ms %s 6 MA\r\n<svg/>\r\n" % k, b"HD\r\n"),
            ("ms MP C", lambda k: b"ms %s 6 MP C%d\r\n<svg/>\r\n" % (k, cas_of(k)), b"HD\r\n"),
            ("ma", lambda k: b"ma %s\r\n" % k, b"HD\r\n"),
            ("ma MD", lambda k: b"ma %s MD\r\n" % k, b"HD\r\n"),
        ]
        for i, (name, exchange, reply) in enumerate(cases):
            with self.subTest(name):
                key = b"ct%d" % i
                r = req(self.srv, "PUT", "/cache/" + key.decode(), b"7",
                        "Content-Type: text/html\r\n")
                self.assertIn(r.status, (201, 204))
                self.assertEqual(req(self.srv, "GET", "/cache/" + key.decode())
                                 .header("content-type"), "text/html")
                self.assertEqual(self.memcached(exchange(key)), reply)
                r = req(self.srv, "GET", "/cache/" + key.decode())
                self.assertEqual((r.status, r.header("content-type")),
                                 (200, "application/octet-stream"), r.body)
        # add stores only when the key is absent: the HTTP item is deleted first, so a type
        # cannot survive there; md I (invalidate) keeps the value and so its type
        req(self.srv, "PUT", "/cache/inv", b"7", "Content-Type: text/html\r\n")
        self.assertEqual(self.memcached(b"md inv I\r\n"), b"HD\r\n")
        self.assertEqual(req(self.srv, "GET", "/cache/inv").header("content-type"), "text/html")


class CacheEviction(unittest.TestCase):
    VALUE = b"v" * 8000
    N = 400  # ~3.2 MB into a 1 MiB cache

    def fill(self, shards):
        srv = Server("--set", "cache.max_memory_bytes=1048576", "--set",
                     "cache.max_item_bytes=16384", "--set", "cache.shards=%d" % shards)
        for i in range(self.N):  # every PUT succeeds: older items make room
            self.assertEqual(req(srv, "PUT", "/cache/e%d" % i, self.VALUE).status, 201)
        present = [i for i in range(self.N) if request(srv, get("/cache/e%d" % i)).status == 200]
        return srv, present

    def test_one_shard_evicts_in_exact_lru_order(self):
        srv, present = self.fill(1)
        try:
            # Exactly the newest items survive, as many as fit in 1 MiB (~8 KiB each).
            self.assertEqual(present, list(range(self.N - len(present), self.N)))
            self.assertGreaterEqual(len(present), 100)
            self.assertEqual(metric(srv, "snowflaked_cache_evictions_total"),
                             self.N - len(present))
            # Second chance (CLOCK): the scan above read every survivor, so one more item finds
            # them all marked, clears the marks, and the oldest still goes first.
            self.assertEqual(req(srv, "PUT", "/cache/x1", self.VALUE).status, 201)
            self.assertEqual(request(srv, get("/cache/e%d" % present[0])).status, 404)
            # Now only the item read since is marked: it is spared and the next one goes.
            self.assertEqual(request(srv, get("/cache/e%d" % present[1])).status, 200)
            self.assertEqual(req(srv, "PUT", "/cache/x2", self.VALUE).status, 201)
            self.assertEqual(request(srv, get("/cache/e%d" % present[2])).status, 404)
            self.assertEqual(request(srv, get("/cache/e%d" % present[1])).status, 200)
            self.assertEqual(request(srv, get("/cache/e%d" % present[3])).status, 200)
        finally:
            srv.stop()

    def test_sharded_store_stays_under_the_limit(self):
        # With 64 shards the LRU is per shard (the hash seed is random per run), so which old
        # items survive varies; what holds is the memory bound, the newest item, and that
        # eviction does not throw away more than it must.
        srv, present = self.fill(64)
        try:
            self.assertIn(self.N - 1, present)
            self.assertGreaterEqual(len(present), 100)
            self.assertLessEqual(metric(srv, "snowflaked_cache_bytes"), 1048576)
            self.assertEqual(metric(srv, "snowflaked_cache_evictions_total"),
                             self.N - len(present))
        finally:
            srv.stop()


class CachePersistence(unittest.TestCase):
    def test_graceful_restart_keeps_the_cache(self):
        with tempfile.TemporaryDirectory(prefix="sf_snap_") as d:
            srv = Server(data_dir=d)
            try:
                for i in range(200):
                    self.assertEqual(req(srv, "PUT", "/cache/p%d" % i, b"value-%d" % i).status,
                                     201)
                req(srv, "PUT", "/cache/typed", b"{}", "Content-Type: application/json\r\n")
                req(srv, "PUT", "/cache/short?ttl=3", b"x")
                short_written = time.time()
                req(srv, "PUT", "/cache/long?ttl=600", b"y")
            finally:
                srv.stop()  # SIGTERM: exit 0 asserted, snapshot written
            self.assertTrue(os.path.exists(os.path.join(d, "cache.snapshot")))
            srv = Server(data_dir=d)
            try:
                for i in range(200):
                    r = request(srv, get("/cache/p%d" % i))
                    self.assertEqual((r.status, r.body), (200, b"value-%d" % i))
                r = request(srv, get("/cache/typed"))
                self.assertEqual(r.header("content-type"), "application/json")
                self.assertEqual(request(srv, get("/cache/long")).status, 200)
                # Loaded before it expired (the restart takes well under 3 s, even under TSan),
                # and it still expires 3 s after it was written: the TTL is absolute.
                self.assertEqual(metric(srv, "snowflaked_cache_snapshot_loaded_items"), 203)
                time.sleep(max(0.0, short_written + 3.2 - time.time()))
                self.assertEqual(request(srv, get("/cache/short")).status, 404)  # TTL kept
            finally:
                srv.stop()

    def test_corrupt_snapshot_is_set_aside(self):
        with tempfile.TemporaryDirectory(prefix="sf_snap_") as d:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "cache.snapshot"), "wb") as f:
                f.write(b"SFCACHE1" + b"\x01\x00\x00\x00" + b"garbage" * 10)
            srv = Server(data_dir=d)
            try:
                self.assertEqual(request(srv, get("/cache/anything")).status, 404)
                deadline = time.time() + 5  # the logger writes asynchronously
                while "starting with an empty cache" not in srv.output() and time.time() < deadline:
                    time.sleep(0.05)
                self.assertIn("starting with an empty cache", srv.output())
                self.assertTrue(os.path.exists(os.path.join(d, "cache.snapshot.corrupt")))
            finally:
                srv.stop()


if __name__ == "__main__":
    unittest.main()
