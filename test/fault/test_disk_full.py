"""Cache snapshot target on a full filesystem: cache.snapshot_path on a 1 MiB tmpfs (mounted by
the test; needs root), a small valid snapshot written first, then more data than fits.

Expected: every failed save is logged with the reason ("No space left on device") and counted
in snowflaked_cache_snapshot_failures_total; the previous snapshot stays byte for byte and no
temporary file is left behind; the service keeps serving IDs and the cache over HTTP and
memcached; the failed final save at SIGTERM is logged too; a restart loads the intact previous
snapshot. The mount is removed in tearDown."""
import os
import socket
import subprocess
import tempfile
import time
import unittest

import faultutil as fu
from faultutil import Server, free_port, get, metric, request

SMALL = 10                # keys in the first, valid snapshot
BIG_VALUE = 100 * 1024    # bytes per value of the fill
BIG_COUNT = 30            # 3 MiB: three times the filesystem


def mc(port, payload, replies):
    """Sends memcached commands, returns the first `replies` reply lines."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        buf = b""
        while buf.count(b"\r\n") < replies:
            d = s.recv(1 << 16)
            if not d:
                break
            buf += d
    return buf.split(b"\r\n")[:replies]


def wait_metric(srv, name, minimum, timeout=8):
    deadline = time.monotonic() + timeout
    while True:
        v = metric(srv, name)
        if v is not None and v >= minimum:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("%s stayed at %s (wanted >= %s) for %ds" % (name, v, minimum,
                                                                           timeout))
        time.sleep(0.1)


class DiskFull(unittest.TestCase):
    def setUp(self):
        fu.need_binary(self)
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_fault_disk_")
        self.mnt = os.path.join(self.tmp.name, "mnt")
        os.mkdir(self.mnt)
        self.mounted = False
        self.servers = []
        if os.geteuid() != 0:
            self.tmp.cleanup()
            self.skipTest("mounting a tmpfs needs root")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", self.mnt],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        if r.returncode != 0:
            self.tmp.cleanup()
            self.skipTest("cannot mount a tmpfs here: %s" % r.stdout.decode().strip())
        self.mounted = True

    def tearDown(self):
        for s in self.servers:
            fu.discard(s)
        if self.mounted:
            r = subprocess.run(["umount", self.mnt], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
            if r.returncode != 0:  # something still holds it: detach, freed when released
                subprocess.run(["umount", "-l", self.mnt], timeout=30)
        self.tmp.cleanup()

    def start(self):
        self.mc_port = free_port()
        srv = Server("--set", "cache.memcached_port=%d" % self.mc_port,
                     "--set", "cache.snapshot_path=%s" % os.path.join(self.mnt, "cache.snapshot"),
                     "--set", "cache.snapshot_interval_s=1",
                     data_dir=os.path.join(self.tmp.name, "data"))
        self.servers.append(srv)
        return srv

    def small_keys(self):
        return [b"small%d" % i for i in range(SMALL)]

    def test_full_snapshot_filesystem_keeps_the_old_snapshot_and_the_service(self):
        snap = os.path.join(self.mnt, "cache.snapshot")
        srv = self.start()
        cmds = b"".join(b"set %s 7 0 5\r\nv%04d\r\n" % (k, i)
                        for i, k in enumerate(self.small_keys()))
        self.assertEqual(set(mc(self.mc_port, cmds, SMALL)), {b"STORED"})
        wait_metric(srv, "snowflaked_cache_snapshot_last_items", SMALL)
        with open(snap, "rb") as f:
            good = f.read()
        self.assertGreater(len(good), 0)
        failures0 = metric(srv, "snowflaked_cache_snapshot_failures_total")
        self.assertEqual(failures0, 0)

        value = os.urandom(BIG_VALUE // 2).hex().encode()
        cmds = b"".join(b"set big%d 0 0 %d\r\n%s\r\n" % (i, len(value), value)
                        for i in range(BIG_COUNT))
        self.assertEqual(set(mc(self.mc_port, cmds, BIG_COUNT)), {b"STORED"})
        t_full = time.monotonic()
        wait_metric(srv, "snowflaked_cache_snapshot_failures_total", 2)  # two periodic saves
        fu.figure("disk full: second failed periodic save after", "%.1f s" %
                  (time.monotonic() - t_full))
        out = srv.output()
        self.assertRegex(out, r"ERROR +cache: periodic snapshot not written: .*No space left on "
                              r"device \(the previous snapshot is untouched\)")
        with open(snap, "rb") as f:
            self.assertEqual(f.read(), good, "the previous snapshot changed")
        self.assertEqual(os.listdir(self.mnt), ["cache.snapshot"], "a temporary file was left")

        # Still serving: IDs, readiness, the cache over both protocols, new writes.
        self.assertEqual(request(srv, get("/id")).status, 200)
        self.assertEqual(request(srv, get("/readyz")).status, 200)
        r = request(srv, get("/cache/big7"))
        self.assertEqual((r.status, r.body), (200, value))
        self.assertEqual(mc(self.mc_port, b"set after 0 0 2\r\nok\r\nget small3\r\n", 3),
                         [b"STORED", b"VALUE small3 7 5", b"v0003"])
        self.assertGreaterEqual(metric(srv, "snowflaked_cache_snapshot_last_success_seconds"), 1)
        fu.figure("disk full: failed saves while running",
                  int(metric(srv, "snowflaked_cache_snapshot_failures_total")))

        # The final save at SIGTERM fails the same way; it is logged and the exit status says so.
        rc, out = fu.stop_expect(self.servers.pop(), codes=(0, 1))
        self.assertRegex(out, r"ERROR +cache: final snapshot not written: .*No space left")
        fu.figure("disk full: exit status after a failed final snapshot", rc)
        with open(snap, "rb") as f:
            self.assertEqual(f.read(), good)
        self.assertEqual(os.listdir(self.mnt), ["cache.snapshot"])

        # The old snapshot is intact and loads.
        srv = self.start()
        self.assertEqual(metric(srv, "snowflaked_cache_snapshot_loaded_items"), SMALL)
        got = mc(self.mc_port, b"get small0 small9 big1\r\n", 5)
        self.assertEqual(got, [b"VALUE small0 7 5", b"v0000", b"VALUE small9 7 5", b"v0009",
                               b"END"])
        self.assertEqual(fu.stop_expect(self.servers.pop())[0], 0)  # 10 items fit again


if __name__ == "__main__":
    unittest.main()
