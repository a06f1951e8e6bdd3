"""kill -9 during sustained ID load, then an immediate restart on the same data_dir: every ID
issued after the restart is greater than every ID issued before (the timestamp lease in
data_dir/snowflake.lease), also when the wall clock is one hour behind on the second run
(libfaketime, FAKETIME="-1h", the daemon has no injectable clock): then the daemon refuses
(503 + Retry-After) rather than issue a smaller or duplicate ID, and its clean stop does not pull
the lease back.

Load: build/sfload --ids-out (every ID it saw, checked for duplicates and per-connection order
by sfload itself) against /ids. UUIDv7 and ULIDs (/uuids, /ulids) go through the same kill -9
and stepped-back clock with keep-alive client threads here, compared as 128-bit integers. Each
phase is bounded to a few seconds."""
import calendar
import json
import os
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

import faultutil as fu
from faultutil import Reader, Server, get, request

IDS_PATH = "/ids?count=5"


def sfload(port, seconds, ids_out):
    """A bounded sfload run in the background: 4 connections, 4 requests in flight each."""
    return subprocess.Popen(
        [fu.SFLOAD, "-q", "--json", "-c", "4", "-P", "4", "-T", "1", "-t", str(seconds),
         "--timeout", "2000", "--ids-out", ids_out,
         "http://127.0.0.1:%d%s" % (port, IDS_PATH)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc, timeout=30):
    """Waits for an sfload run; returns its JSON report (exit 1 = some requests failed, as
    expected around a kill; 2 = usage error or refusal)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        fu.end_process(proc)
    if proc.returncode not in (0, 1):
        raise AssertionError("sfload exited %d: %s" % (proc.returncode, err.decode()[-2000:]))
    return json.loads(out)


CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def id128(text):
    """A UUID's or ULID's 128-bit value."""
    if "-" in text:
        return uuid.UUID(text).int
    v = 0
    for c in text:
        v = v * 32 + CROCKFORD.index(c)
    return v


class Load128:
    """Two keep-alive clients, one on /uuids?count=5 and one on /ulids?count=5, until stopped or
    the connection dies (a kill): every ID kept, per format, with the statuses seen."""

    def __init__(self, srv, seconds):
        self.ids = {"uuid": [], "ulid": []}
        self.statuses = {}
        self.errors = []
        self.deadline = time.monotonic() + seconds
        self.threads = [threading.Thread(target=self.run, args=(srv, k)) for k in self.ids]
        for t in self.threads:
            t.start()

    def run(self, srv, kind):
        try:
            with srv.connect(timeout=2) as s:
                rd = Reader(s)
                last = 0
                while time.monotonic() < self.deadline:
                    s.sendall(get("/%ss?count=5" % kind))
                    r = rd.response()
                    self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
                    if r.status != 200:
                        time.sleep(0.01)
                        continue
                    vals = [id128(x) for x in r.json()["ids"]]
                    if vals[0] <= last or vals != sorted(vals):
                        self.errors.append("%s out of order" % kind)
                    last = vals[-1]
                    self.ids[kind].extend(vals)
        except (OSError, EOFError, ValueError):
            pass  # the kill

    def join(self):
        for t in self.threads:
            t.join(30)
        return self


def probe_id(srv):
    """One GET /id on a new connection: (status, id or None, Retry-After or None)."""
    r = request(srv, get("/id"))
    return r.status, int(r.json()["id"]) if r.status == 200 else None, r.header("retry-after")


class CrashRestart(unittest.TestCase):
    def setUp(self):
        fu.need_binary(self)
        if not fu.SFLOAD or not os.access(fu.SFLOAD, os.X_OK):
            self.skipTest("SFLOAD_BIN is not set to the sfload binary")
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_fault_crash_")
        self.data = os.path.join(self.tmp.name, "data")
        self.servers, self.loads = [], []

    def tearDown(self):
        for p in self.loads:
            fu.end_process(p)
        for s in self.servers:
            fu.discard(s)
        self.tmp.cleanup()

    def start(self, **kw):
        srv = Server(data_dir=self.data, **kw)
        self.servers.append(srv)
        return srv

    def load(self, port, seconds, name):
        path = os.path.join(self.tmp.name, name)
        p = sfload(port, seconds, path)
        self.loads.append(p)
        return p, path

    def load_and_kill(self):
        """Phase A: 2.5 s of load, kill -9 at 1.5 s. Returns (sfload, its IDs file, lease E
        after the crash, time of the kill); the caller restarts at once, then calls
        ids_before()."""
        srv = self.start()
        p, path = self.load(srv.port, 2.5, "a.ids")
        time.sleep(1.5)
        srv.proc.kill()
        srv.proc.wait(timeout=10)
        killed_at = time.monotonic()
        return p, path, fu.read_lease(self.data), killed_at

    def ids_before(self, p, path, lease_e):
        report = finish(p)
        before = fu.read_ids(path)
        self.assertGreater(len(before), 1000, "too few IDs before the kill: %s" % report)
        self.assertEqual((report["verify"]["duplicates"], report["verify"]["non_increasing"],
                          report["verify"]["malformed"]), (0, 0, 0))
        # The lease promise: every ID issued so far has a tick starting before E.
        self.assertLess(fu.id_ms(max(before)), lease_e)
        fu.figure("crash: IDs issued before kill -9", len(before))
        return before

    def test_kill9_under_load_then_immediate_restart(self):
        pa, path_a, lease_e, killed_at = self.load_and_kill()
        srv = self.start()  # at once, same data_dir
        started_in = time.monotonic() - killed_at
        p, path = self.load(srv.port, 4.0, "b.ids")
        hi = max(self.ids_before(pa, path_a, lease_e))
        # Until the clock passes E the generator refuses: 503 + Retry-After, never an ID.
        first_ok, refusals, deadline = None, 0, time.monotonic() + 8
        while first_ok is None and time.monotonic() < deadline:
            status, i, retry = probe_id(srv)
            if status == 200:
                first_ok = time.monotonic() - killed_at
                self.assertGreater(i, hi)
                self.assertGreaterEqual(fu.id_ms(i), lease_e)
            else:
                self.assertEqual(status, 503)
                self.assertGreaterEqual(int(retry), 1)
                refusals += 1
                time.sleep(0.02)
        self.assertIsNotNone(first_ok, "no ID within 8 s of the restart")
        report = finish(p)
        after = fu.read_ids(path)
        self.assertGreater(len(after), 1000, "too few IDs after the restart: %s" % report)
        self.assertEqual((report["verify"]["duplicates"], report["verify"]["non_increasing"],
                          report["verify"]["malformed"]), (0, 0, 0))
        self.assertGreater(min(after), hi, "an ID after the restart is <= one from before")
        self.assertGreaterEqual(fu.id_ms(min(after)), lease_e, "an ID in a tick before E")
        fu.figure("crash: restart listening after kill -9", "%.0f ms" % (started_in * 1e3))
        fu.figure("crash: first ID after kill -9", "%.0f ms (%d probes refused with 503)" %
                  (first_ok * 1e3, refusals))
        fu.figure("crash: IDs issued after restart", "%d, smallest - largest before = %.0f ms "
                  "of ticks" % (len(after), fu.id_ms(min(after)) - fu.id_ms(hi)))
        self.assertEqual(fu.stop_expect(self.servers.pop())[0], 0)

    def faketime_or_skip(self):
        """libfaketime's preload library, installed if missing; skips the test without it."""
        reason = fu.ensure_programs({"faketime": "faketime"})
        lib = fu.libfaketime()
        if reason or not lib:
            self.skipTest(reason or "libfaketime not found after installing faketime")
        if "libtsan" in subprocess.run(["ldd", fu.sfharness.BINARY], capture_output=True,
                                       text=True).stdout:
            # libfaketime wraps pthread_cond_timedwait, which hides the synchronisation from
            # TSan: it then reports races that are not there. The ASan and plain runs cover this.
            self.skipTest("libfaketime and ThreadSanitizer do not mix")
        return lib

    def test_kill9_then_restart_with_the_wall_clock_one_hour_back(self):
        lib = self.faketime_or_skip()
        pa, path_a, lease_e, _ = self.load_and_kill()
        # FAKETIME="-1h" moves CLOCK_REALTIME and CLOCK_MONOTONIC alike (what `faketime -f -1h`
        # does): the daemon anchors its clock at the wall clock, so it runs an hour behind.
        # (FAKETIME_DONT_FAKE_MONOTONIC=1 is not used: libfaketime 0.9.10 then breaks
        # pthread_cond_timedwait on CLOCK_MONOTONIC condition variables, which return at once,
        # and the snapshot thread spins; an artefact of the preload, not of the daemon.)
        # In a sanitizer build libfaketime is preloaded ahead of the sanitizer runtime: allowed.
        srv = self.start(env={"LD_PRELOAD": lib, "FAKETIME": "-1h",
                              "ASAN_OPTIONS": "verify_asan_link_order=0",
                              "TSAN_OPTIONS": "verify_interceptors=0"})
        hi = max(self.ids_before(pa, path_a, lease_e))
        r = request(srv, get("/healthz"))
        shown = calendar.timegm(time.strptime(r.header("date"), "%a, %d %b %Y %H:%M:%S GMT"))
        skew = time.time() - shown
        self.assertTrue(3300 < skew < 3900,
                        "faketime not in effect (Date is %r)" % r.header("date"))
        p, path = self.load(srv.port, 2.0, "b.ids")
        statuses = {}
        for _ in range(20):
            status, i, retry = probe_id(srv)
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200:  # allowed only if still above everything from before
                self.assertGreater(i, hi)
            else:
                self.assertEqual(status, 503)
                self.assertGreaterEqual(int(retry), 3000, "Retry-After should be about an hour")
            time.sleep(0.05)
        ready = request(srv, get("/readyz"))
        if 200 not in statuses:
            self.assertEqual(ready.status, 503)
        report = finish(p)
        after = fu.read_ids(path)
        if len(after):
            self.assertGreater(min(after), hi, "an ID under the stepped-back clock is too small")
        rc, out = fu.stop_expect(self.servers.pop())
        lease_after = fu.read_lease(self.data)
        self.assertGreaterEqual(lease_after, lease_e, "the clean stop moved the lease back")
        fu.figure("clock -1h: probes", "%s, Retry-After %s s, /readyz %d" %
                  (statuses, retry, ready.status))
        fu.figure("clock -1h: sfload", "%d requests, %d refused (5xx), %d IDs issued" %
                  (report["requests"], report["errors"]["status_5xx"], len(after)))
        # Back on the real clock: still above everything issued in either earlier run.
        srv = self.start()
        p, path = self.load(srv.port, 1.5, "c.ids")
        report = finish(p)
        later = fu.read_ids(path)
        self.assertGreater(len(later), 1000, "too few IDs on the real clock: %s" % report)
        self.assertGreater(min(later), max(after) if len(after) else hi)
        self.assertEqual(fu.stop_expect(self.servers.pop())[0], 0)

    def test_kill9_uuid_ulid_then_restart_and_clock_one_hour_back(self):
        """UUIDv7 and ULIDs share the lease: after kill -9 and an immediate restart every new
        one is above every earlier one, and in a millisecond at or after E; with the clock an
        hour back they are refused (503 + Retry-After), never smaller."""
        srv = self.start()
        load = Load128(srv, 3.0)
        time.sleep(1.5)
        srv.proc.kill()
        srv.proc.wait(timeout=10)
        lease_e = fu.read_lease(self.data)
        before = load.join()
        srv = self.start()
        self.assertEqual(before.errors, [])
        for kind in ("uuid", "ulid"):
            self.assertGreater(len(before.ids[kind]), 200, kind)
            self.assertLess(max(before.ids[kind]) >> 80, lease_e, "%s beyond the lease" % kind)
        after = Load128(srv, 2.0).join()
        self.assertEqual(after.errors, [])
        for kind in ("uuid", "ulid"):
            self.assertGreater(len(after.ids[kind]), 200, "%s: %s" % (kind, after.statuses))
            self.assertGreater(min(after.ids[kind]), max(before.ids[kind]), kind)
            self.assertGreaterEqual(min(after.ids[kind]) >> 80, lease_e, kind)
            self.assertEqual(len(set(before.ids[kind] + after.ids[kind])),
                             len(before.ids[kind]) + len(after.ids[kind]))
        fu.figure("crash 128: UUIDv7/ULIDs before and after kill -9", "%d/%d, %d/%d" % (
            len(before.ids["uuid"]), len(before.ids["ulid"]), len(after.ids["uuid"]),
            len(after.ids["ulid"])))
        self.assertEqual(fu.stop_expect(self.servers.pop())[0], 0)
        lease_clean = fu.read_lease(self.data)
        top = max(max(after.ids["uuid"]), max(after.ids["ulid"])) >> 80
        self.assertGreater(lease_clean, top, "the clean-stop lease is above the last UUID")
        lib = self.faketime_or_skip()
        srv = self.start(env={"LD_PRELOAD": lib, "FAKETIME": "-1h",
                              "ASAN_OPTIONS": "verify_asan_link_order=0"})
        for path in ("/uuid", "/ulids?count=3"):
            r = request(srv, get(path))
            self.assertEqual(r.status, 503, path)
            self.assertGreaterEqual(int(r.header("retry-after")), 3000)
            self.assertIn("clock is behind", r.json()["error"])
        self.assertEqual(request(srv, get("/readyz")).status, 503)
        self.assertEqual(fu.stop_expect(self.servers.pop())[0], 0)
        self.assertGreaterEqual(fu.read_lease(self.data), lease_clean,
                                "the stop under the stepped-back clock moved the lease back")


if __name__ == "__main__":
    unittest.main()
