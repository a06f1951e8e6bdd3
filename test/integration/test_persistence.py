"""Cache persistence against the real binary: 100,000 keys written over both protocols survive a
graceful restart with the same value, flags, CAS and (reduced) TTL; periodic snapshots bound what
a kill -9 loses; a version-1 snapshot (no CAS) still loads."""
import os
import signal
import socket
import struct
import tempfile
import time
import unittest
import zlib

from sfharness import Reader, Server, free_port, get, metric, request

N_EACH = 50000   # keys per protocol
BATCH = 500      # requests per pipelined write


class Mc:
    """A minimal memcached text-protocol client: pipelined writes, multi-key gets."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def close(self):
        self.s.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise AssertionError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise AssertionError("connection closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def pipeline(self, commands):
        """Sends the commands in one write; returns one reply line per command."""
        self.s.sendall(b"".join(commands))
        return [self._line() for _ in commands]

    def gets(self, keys):
        """{key: (flags, value, cas)} for the keys present."""
        self.s.sendall(b"gets " + b" ".join(keys) + b"\r\n")
        found = {}
        while True:
            ln = self._line()
            if ln == b"END":
                return found
            _, key, flags, size, cas = ln.split()
            value = self._exact(int(size) + 2)[:-2]
            found[key] = (int(flags), value, int(cas))


def mc_key(i):
    return b"mc:%d" % i


def http_key(i):
    return b"http:%d" % i


class Persistence(unittest.TestCase):
    def start(self, data_dir, *extra):
        self.mc_port = free_port()
        return Server("--set", "cache.memcached_port=%d" % self.mc_port, *extra,
                      data_dir=data_dir)

    def write_both(self, srv):
        """50,000 keys over memcached (flags, some with TTL), 50,000 over HTTP (content type,
        some with TTL). Returns {key: (flags, value, cas)} as read back before the restart."""
        mc = Mc(self.mc_port)
        for start in range(0, N_EACH, BATCH):
            cmds = []
            for i in range(start, start + BATCH):
                value = b"m%07d" % i * (1 + i % 5)
                exptime = 600 if i % 10 == 0 else 0
                cmds.append(b"set %s %d %d %d\r\n%s\r\n" % (mc_key(i), i * 7919 % (1 << 32),
                                                              exptime, len(value), value))
            self.assertEqual(set(mc.pipeline(cmds)), {b"STORED"})
        for start in range(0, N_EACH, BATCH):
            if start % 5000 == 0:  # under server.max_requests_per_connection (10,000)
                if start:
                    sock.close()
                sock = srv.connect(timeout=10)
                reader = Reader(sock)
            reqs = []
            for i in range(start, start + BATCH):
                body = b"h%07d" % i * (1 + i % 3)
                ttl = "?ttl=600" if i % 10 == 0 else ""
                reqs.append(b"PUT /cache/%s%s HTTP/1.1\r\nHost: t\r\nContent-Type: text/x-%d\r\n"
                            b"Content-Length: %d\r\n\r\n%s" % (http_key(i), ttl.encode(), i % 7,
                                                               len(body), body))
            sock.sendall(b"".join(reqs))
            for _ in reqs:
                self.assertEqual(reader.response().status, 201)
        sock.close()
        before = self.read_all(mc)
        mc.close()
        self.assertEqual(len(before), 2 * N_EACH)
        return before

    def read_all(self, mc):
        got = {}
        for start in range(0, N_EACH, 100):
            got.update(mc.gets([mc_key(i) for i in range(start, start + 100)]))
            got.update(mc.gets([http_key(i) for i in range(start, start + 100)]))
        return got

    def test_100k_keys_over_both_protocols_survive_a_graceful_restart(self):
        with tempfile.TemporaryDirectory(prefix="sf_persist_") as d:
            srv = self.start(d)
            try:
                before = self.write_both(srv)
                # TTL is absolute across the restart: written with 6 s to live, gone 6 s later
                # even though the restart happened in between (6 s: a stop, a start and a
                # snapshot load of 100,000 keys fit in it on a loaded machine; 3 s did not).
                mc = Mc(self.mc_port)
                self.assertEqual(mc.pipeline([b"set short 5 6 1\r\nx\r\n"]), [b"STORED"])
                short_written = time.time()
                mc.close()
                etag = request(srv, get("/cache/http:42")).header("etag")
            finally:
                srv.stop()  # SIGTERM: exit 0, snapshot written
            srv = self.start(d)
            try:
                self.assertEqual(metric(srv, "snowflaked_cache_snapshot_loaded_items"),
                                 2 * N_EACH + 1)
                mc = Mc(self.mc_port)
                self.assertEqual(mc.gets([b"short"])[b"short"][:2], (5, b"x"))
                after = self.read_all(mc)
                self.assertEqual(len(after), len(before))
                diff = [k for k in before if after.get(k) != before[k]]
                self.assertEqual(diff, [], "changed after restart (flags, value or CAS)")
                # A CAS from before the restart still works, and new CAS values are larger.
                flags, value, cas = before[mc_key(7)]
                self.assertEqual(mc.pipeline([b"cas %s 1 0 3 %d\r\nnew\r\n" % (mc_key(7), cas)]),
                                 [b"STORED"])
                new_cas = mc.gets([mc_key(7)])[mc_key(7)][2]
                self.assertGreater(new_cas, max(c for _, _, c in before.values()))
                r = request(srv, get("/cache/http:42"))
                self.assertEqual((r.status, r.header("content-type"), r.header("etag")),
                                 (200, "text/x-0", etag))
                time.sleep(max(0.0, short_written + 6.2 - time.time()))
                self.assertEqual(mc.gets([b"short"]), {})
                self.assertEqual(len(mc.gets([mc_key(10), http_key(20)])), 2)  # 600 s TTLs
                mc.close()
            finally:
                srv.stop()

    def test_periodic_snapshot_bounds_what_kill_9_loses(self):
        with tempfile.TemporaryDirectory(prefix="sf_persist_") as d:
            srv = self.start(d, "--set", "cache.snapshot_interval_s=1")
            try:
                mc = Mc(self.mc_port)
                cmds = [b"set k%d %d 0 2\r\nv%d\r\n" % (i, i, i % 10) for i in range(1000)]
                self.assertEqual(set(mc.pipeline(cmds)), {b"STORED"})
                mc.close()
                deadline = time.time() + 5
                while metric(srv, "snowflaked_cache_snapshot_last_items") < 1000:
                    self.assertLess(time.time(), deadline, "no periodic snapshot within 5 s")
                    time.sleep(0.1)
                self.assertEqual(metric(srv, "snowflaked_cache_snapshot_failures_total"), 0)
                srv.proc.send_signal(signal.SIGKILL)
                srv.proc.wait()
            finally:
                srv.log.close()
                srv.dir.cleanup()
            srv = self.start(d)
            try:
                mc = Mc(self.mc_port)
                got = {}
                for start in range(0, 1000, 100):
                    got.update(mc.gets([b"k%d" % i for i in range(start, start + 100)]))
                mc.close()
                self.assertEqual(len(got), 1000)
                self.assertEqual(got[b"k123"][:2], (123, b"v3"))
                self.assertEqual(metric(srv, "snowflaked_cache_snapshot_loaded_items"), 1000)
            finally:
                srv.stop()

    def test_base64_keys_survive_a_restart(self):
        """Keys given in base64 (meta b) may be any bytes: saved with their mark and loaded back,
        not taken for a damaged file."""
        with tempfile.TemporaryDirectory(prefix="sf_persist_") as d:
            srv = self.start(d)
            try:
                mc = Mc(self.mc_port)
                self.assertEqual(mc.pipeline([b"ms AAEC 2 b\r\nhi\r\n",  # bytes 0 1 2
                                              b"ms Zm9v 1 b\r\nx\r\n",  # "foo", marked
                                              b"mg Ymlu b N60\r\n",  # "bin", unmarked
                                              b"set text 0 0 1\r\ny\r\n"]),
                                 [b"HD", b"HD", b"HD W", b"STORED"])
                mc.close()
            finally:
                srv.stop()
            srv = self.start(d)
            try:
                self.assertEqual(metric(srv, "snowflaked_cache_snapshot_loaded_items"), 4)
                mc = Mc(self.mc_port)
                self.assertEqual(mc.pipeline([b"mg AAEC b k s\r\n", b"mg foo k s\r\n",
                                              b"mg bin k\r\n", b"mg text k s\r\n"]),
                                 [b"HD kAAEC b s2", b"HD kZm9v b s1",
                                  b"HD kbin",  # the history (token, hits) is not saved
                                  b"HD ktext s1"])
                mc.close()
            finally:
                srv.stop()

    def test_version_1_snapshot_still_loads(self):
        """Files written before the CAS was added (version 1) load, with new CAS values."""
        now_ms = int(time.time() * 1000)
        records = b""
        for key, ctype, value, flags, expiry in [(b"old1", b"", b"hello", 3, 0),
                                                 (b"old2", b"text/plain", b"x" * 300, 0,
                                                  now_ms + 600000),
                                                 (b"gone", b"", b"y", 0, now_ms - 1000)]:
            records += struct.pack("<BBIIQ", len(key), len(ctype), len(value), flags, expiry)
            records += key + ctype + value
        body = b"SFCACHE1" + struct.pack("<IIQ", 1, 0, now_ms) + records
        data = body + b"\0SFEND\0\0" + struct.pack("<QII", 3, zlib.crc32(body), 0)
        with tempfile.TemporaryDirectory(prefix="sf_persist_") as d:
            with open(os.path.join(d, "cache.snapshot"), "wb") as f:
                f.write(data)
            srv = self.start(d)
            try:
                mc = Mc(self.mc_port)
                got = mc.gets([b"old1", b"old2", b"gone"])
                mc.close()
                self.assertEqual(sorted(got), [b"old1", b"old2"])
                self.assertEqual(got[b"old1"][:2], (3, b"hello"))
                r = request(srv, get("/cache/old2"))
                self.assertEqual((r.status, r.header("content-type")), (200, "text/plain"))
            finally:
                srv.stop()


if __name__ == "__main__":
    unittest.main()
