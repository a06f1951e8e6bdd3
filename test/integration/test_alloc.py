"""No allocation per request in steady state: with an LD_PRELOAD shim counting every malloc,
calloc, realloc and aligned allocation of the process, 100,000 requests after a warm-up must not
allocate (a small allowance covers libc internals that are not per request).

The shim (malloc_count.c) keeps its count in a file it maps shared (SF_MALLOC_COUNT_FILE), read
here directly: the daemon has no code for it."""
import os
import struct
import tempfile
import unittest

from sfharness import Reader, Server, get

SHIM = os.environ.get("SF_MALLOC_SHIM", "")
CONNS = 8
ALLOWANCE = 16


class CountingServer(Server):
    """A Server under the counting shim; mallocs() is the process's allocation calls so far."""

    def __init__(self, *args, **kw):
        self.count_dir = tempfile.TemporaryDirectory(prefix="sf_mallocs_")
        self.count_file = os.path.join(self.count_dir.name, "count")
        super().__init__(*args, env={"LD_PRELOAD": SHIM, "SF_MALLOC_COUNT_FILE": self.count_file},
                         **kw)

    def mallocs(self):
        with open(self.count_file, "rb") as f:
            data = f.read(8)
        if len(data) != 8:
            raise AssertionError("the shim wrote no count to %s" % self.count_file)
        return struct.unpack("=Q", data)[0]

    def stop(self):
        try:
            super().stop()
        finally:
            self.count_dir.cleanup()


class SteadyStateAllocations(unittest.TestCase):
    def assert_no_allocation(self, srv, run, warm, rounds, what):
        """run(warm) to reach the working size of pools and free lists, then run(rounds): the
        allocation calls of the second must stay within ALLOWANCE."""
        run(warm)
        before = srv.mallocs()
        n = run(rounds)
        after = srv.mallocs()
        print("\n%d %s: %d allocation calls (%.4f each)" % (n, what, after - before,
                                                            (after - before) / n))
        self.assertLessEqual(after - before, ALLOWANCE)

    def pipelined(self, conns, readers, mix, statuses):
        """run(total) for assert_no_allocation: the mix 20 times over per write on each
        connection, every answer one of statuses; returns the requests answered."""
        def run(total):
            batch = b"".join(mix) * 20
            per = len(mix) * 20
            done = 0
            while done < total:
                for s, rd in zip(conns, readers):
                    s.sendall(batch)
                    for _ in range(per):
                        self.assertIn(rd.response().status, statuses)
                    done += per
            return done
        return run

    def test_100k_requests_do_not_allocate(self):
        if not SHIM:
            self.skipTest("SF_MALLOC_SHIM not set")
        srv = CountingServer("--set", "server.max_requests_per_connection=1000000", threads=2)
        try:
            conns = [srv.connect() for _ in range(CONNS)]
            readers = [Reader(s) for s in conns]
            mix = [get("/id"), get("/ids?count=16"), get("/healthz"), get("/nope"),
                   get("/id?format=text&encoding=base62"), get("/id/914999261932814336"),
                   get("/typeid?prefix=user"), get("/typeids?count=16&prefix=user"),
                   get("/typeid/user_01h455vb4pex5vsknk084sn02q")]

            run = self.pipelined(conns, readers, mix, (200, 404))  # 120 requests per write
            self.assert_no_allocation(srv, run, 20000, 100000, "requests")
            for s in conns:
                s.close()
        finally:
            srv.stop()

    def test_sequences_do_not_allocate(self):
        """Segment mode's routes (docs/sequences.md): numbers from the blocks in memory, a batch,
        text, an unknown namespace, a namespace with a token, the listing. The blocks are large
        enough that none is reserved while counting (a reserve writes a file, off the request
        path, with stdio's buffers)."""
        if not SHIM:
            self.skipTest("SF_MALLOC_SHIM not set")
        token = "alloc-namespace-token-01"
        srv = CountingServer(
            "--set", "server.max_requests_per_connection=1000000", "--set",
            'sequences.namespaces=[{"name":"alloc","block":10000000},'
            '{"name":"guarded","block":10000000,"token":"%s"}]' % token, threads=2)
        try:
            conns = [srv.connect() for _ in range(CONNS)]
            readers = [Reader(s) for s in conns]
            mix = [get("/seq/alloc"), get("/seqs/alloc?count=16"), get("/seq/alloc?format=text"),
                   get("/seq/nope"), get("/seq/guarded", "Authorization: Bearer %s\r\n" % token),
                   get("/seq/guarded"), get("/sequences")]

            run = self.pipelined(conns, readers, mix, (200, 401, 404))
            self.assert_no_allocation(srv, run, 20000, 100000, "sequence requests")
            for s in conns:
                s.close()
        finally:
            srv.stop()

    def test_tls_keep_alive_allocates_only_in_openssl_records(self):
        """The same over TLS (server.tls): our side allocates nothing per request (OpenSSL's
        16 KiB buffers are per connection and kept while it is busy: net/transport_tls.c), but
        OpenSSL 3.0's record layer itself makes a 40-byte allocation (a WPACKET_SUB: the record
        header, the TLS 1.3 AAD) about twice per record, in both directions: a request and its
        response, one record each, cost OPENSSL_PER_EXCHANGE allocation calls, and no more."""
        if not SHIM:
            self.skipTest("SF_MALLOC_SHIM not set")
        import socket
        import ssl
        import tlscerts
        from sfharness import free_port, set_args
        OPENSSL_PER_EXCHANGE = 4
        with tlscerts.Certs() as certs:
            port = free_port()
            srv = CountingServer(*set_args("server.max_requests_per_connection=1000000",
                                           "server.tls.port=%d" % port,
                                           "server.tls.cert_file=" + certs.server,
                                           "server.tls.key_file=" + certs.server_key), threads=2)
            try:
                ctx = ssl.create_default_context(cafile=certs.ca)
                raw = socket.create_connection(("127.0.0.1", port), timeout=5)  # Server waited
                conns = [ctx.wrap_socket(raw, server_hostname="127.0.0.1")] + [
                    ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                                    server_hostname="127.0.0.1") for _ in range(3)]
                readers = [Reader(s) for s in conns]
                mix = [get("/id"), get("/ids?count=16"), get("/healthz"), get("/nope")]

                def run(total):
                    done = 0
                    while done < total:
                        for s, rd in zip(conns, readers):
                            s.sendall(mix[done % len(mix)])  # one record each way
                            self.assertIn(rd.response().status, (200, 404))
                            done += 1
                    return done

                run(2000)
                before = srv.mallocs()
                n = run(8000)
                after = srv.mallocs()
                for s in conns:
                    s.close()
                print("\n%d TLS requests: %d allocation calls (%.4f per request)" %
                      (n, after - before, (after - before) / n))
                self.assertLessEqual(after - before, OPENSSL_PER_EXCHANGE * n + ALLOWANCE)
            finally:
                srv.stop()

    def test_cache_traffic_does_not_allocate(self):
        """HTTP and memcached cache traffic on a fixed key set (replacing values of the same
        sizes, hits, misses, deletes and re-adds, incr): items come from the store's free lists."""
        if not SHIM:
            self.skipTest("SF_MALLOC_SHIM not set")
        import socket
        from sfharness import free_port
        mc_port = free_port()
        srv = CountingServer("--set", "server.max_requests_per_connection=1000000", "--set",
                             "cache.memcached_port=%d" % mc_port, threads=2)
        try:
            http = srv.connect()
            reader = Reader(http)
            mc = socket.create_connection(("127.0.0.1", mc_port), timeout=5)
            http_batch, mc_batch = [], []
            for i in range(40):
                body = b"v%03d" % i * 25
                http_batch.append(b"PUT /cache/h%d HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n"
                                  b"\r\n%s" % (i, len(body), body))
                http_batch.append(get("/cache/h%d" % i))
                http_batch.append(get("/cache/missing%d" % i))
                mc_batch.append(b"set m%d 1 0 100\r\n%s\r\n" % (i, body))
            mc_batch += [b"get m%d m%d nope\r\n" % (i, i + 1) for i in range(39)]
            mc_batch += [b"delete m0\r\n", b"add m0 0 0 100\r\n%s\r\n" % (b"x" * 100),
                         b"set n 0 0 1\r\n5\r\n", b"incr n 1\r\n", b"decr n 1\r\n",
                         b"version\r\n"]
            http_payload, mc_payload = b"".join(http_batch), b"".join(mc_batch)
            mc_end = b"VERSION "

            def run(rounds):
                for _ in range(rounds):
                    http.sendall(http_payload)
                    for _ in http_batch:
                        self.assertIn(reader.response().status, (200, 201, 204, 404))
                    mc.sendall(mc_payload)
                    got = b""
                    while mc_end not in got or not got.endswith(b"\r\n"):
                        chunk = mc.recv(1 << 16)
                        self.assertTrue(chunk, "memcached connection closed")
                        got += chunk
                    self.assertNotIn(b"ERROR", got)
                return rounds * (len(http_batch) + len(mc_batch))

            self.assert_no_allocation(srv, run, 100, 500, "cache requests")
            http.close()
            mc.close()
        finally:
            srv.stop()

    def test_memcached_ids_do_not_allocate(self):
        """IDs over the memcached protocol (cache.memcached_id_keys): gets of the reserved keys of
        every format, alone, repeated, as family members (K:<suffix>) and mixed with cache keys,
        gets and mg, and refused writes of them: the IDs are composed into the output, nothing
        allocated."""
        if not SHIM:
            self.skipTest("SF_MALLOC_SHIM not set")
        import socket
        from sfharness import free_port
        mc_port = free_port()
        srv = CountingServer("--set", "cache.memcached_port=%d" % mc_port,
                             "--set", "cache.memcached_id_keys.snowflake=id",
                             "--set", "cache.memcached_id_keys.uuidv7=uuid",
                             "--set", "cache.memcached_id_keys.ulid=ulid", threads=2)
        try:
            mc = socket.create_connection(("127.0.0.1", mc_port), timeout=5)
            mc.sendall(b"set c 0 0 3\r\nabc\r\n")
            self.assertEqual(mc.recv(100), b"STORED\r\n")
            batch = [b"get id\r\n", b"get id id id id id id id id id id\r\n",
                     b"get uuid ulid c id nope\r\n", b"gets id uuid\r\n", b"mg id v k s\r\n",
                     b"mg ulid\r\n", b"set id 0 0 3\r\nabc\r\n", b"delete uuid\r\n",
                     # the families (K:<suffix>), as a key-hashing client sends them
                     b"get id:1 id:2 uuid:x c ulid:y:z id:\r\n", b"mg id:9 v k\r\n",
                     b"set id:3 0 0 3\r\nabc\r\n"] * 10
            payload = b"".join(batch) + b"mn\r\n"

            def run(rounds):
                for _ in range(rounds):
                    mc.sendall(payload)
                    got = b""
                    while not got.endswith(b"MN\r\n"):
                        chunk = mc.recv(1 << 16)
                        self.assertTrue(chunk, "memcached connection closed")
                        got += chunk
                    self.assertNotIn(b"SERVER_ERROR", got)
                return rounds * len(batch)

            self.assert_no_allocation(srv, run, 100, 1000, "memcached ID commands")
            mc.close()
        finally:
            srv.stop()

    def test_memcached_sequences_and_typeids_do_not_allocate(self):
        """Sequence and TypeID keys over memcached (cache.memcached_id_keys.sequence, .typeid):
        one and several namespaces on a line, mg, typed and untyped TypeIDs, and the refusals
        (unknown namespace, a token's namespace, a bad type, the bare key, a refused write). The
        blocks are large enough that none is reserved while counting."""
        if not SHIM:
            self.skipTest("SF_MALLOC_SHIM not set")
        import socket
        from sfharness import free_port
        mc_port = free_port()
        srv = CountingServer(
            "--set", "cache.memcached_port=%d" % mc_port,
            "--set", "cache.memcached_id_keys.sequence=seq",
            "--set", "cache.memcached_id_keys.typeid=tid", "--set",
            'sequences.namespaces=[{"name":"a","block":10000000},{"name":"b","block":10000000},'
            '{"name":"guarded","block":10000000,"token":"alloc-namespace-token-01"}]', threads=2)
        try:
            mc = socket.create_connection(("127.0.0.1", mc_port), timeout=5)
            batch = [b"get seq:a\r\n", b"get seq:a seq:b seq:a seq:a seq:b tid:user\r\n",
                     b"gets seq:b tid\r\n", b"mg seq:a v k s\r\n", b"mg tid:order v\r\n",
                     b"get seq:nope\r\n", b"get seq:guarded\r\n", b"get tid:Bad\r\n",
                     b"get seq\r\n", b"set seq:a 0 0 3\r\nabc\r\n"] * 10
            payload = b"".join(batch) + b"mn\r\n"

            def run(rounds):
                for _ in range(rounds):
                    mc.sendall(payload)
                    got = b""
                    while not got.endswith(b"MN\r\n"):
                        chunk = mc.recv(1 << 16)
                        self.assertTrue(chunk, "memcached connection closed")
                        got += chunk
                    self.assertNotIn(b"SERVER_ERROR", got)
                return rounds * len(batch)

            self.assert_no_allocation(srv, run, 100, 1000, "memcached sequence and TypeID commands")
            mc.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
