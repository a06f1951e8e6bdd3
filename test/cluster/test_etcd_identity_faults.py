"""snowflake.worker_id "etcd": bad input and faults, one daemon at a time, against a real
one-member etcd (test/cluster/etcdcluster.py). Each test uses its own key prefix.

- no etcd at start: exit 1 within start_timeout_ms, naming the endpoints, never a guessed id;
- a server answering garbage instead of etcd: the same, the answer called garbage;
- all slots held: exit 1 naming the range; with wait_for_slot, it listens but is not ready (/readyz
  503 naming the wait, /id 503), takes the slot within a renewal period of its release, and
  SIGTERM while waiting exits 0;
- a floor record that cannot be read is not taken (the next slot is, the key is named, counted);
- a floor in the future: the new holder issues nothing before it (handoff without going back);
- another layout under the same prefix: refused, naming both;
- handoff after kill -9: the successor's first ID is above the dead holder's last;
- clean stop: the owner key is gone at once and the floor holds the exact final E;
- the lease revoked behind its back, or its owner key deleted: the daemon stops issuing, takes the
  same slot back under a new lease and goes on above everything issued before; when another
  process took the slot meanwhile, it moves to another free slot in process (above that slot's
  floor), waits with wait_for_slot when none is free, else exits 75 (EX_TEMPFAIL: its supervisor
  restarts it);
- etcd frozen (SIGSTOP): fenced (503, /readyz says etcd, metric) within ttl - margin of the last
  renewal, then issuing again after SIGCONT, same slot.
"""
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from etcdcluster import EtcdCluster, ensure_etcd, post

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import sfharness  # noqa: E402

TTL_S, MARGIN_MS, TIMEOUT_MS = 2, 500, 400
WORKER_BITS = 2  # 4 slots
SEQ_BITS = 12
TS_SHIFT = 5 + WORKER_BITS + SEQ_BITS  # default datacenter_bits 5
EPOCH_MS = 1577836800000


def figure(name, value):
    print("FIGURE %s %s" % (name, value), flush=True)


def b64(s):
    return base64.b64encode(s.encode()).decode()


def id_ms(i):
    return (int(i) >> TS_SHIFT) + EPOCH_MS


def id_worker(i):
    return (int(i) >> SEQ_BITS) & ((1 << WORKER_BITS) - 1)


class Daemon:
    """snowflaked with worker_id etcd; does not wait for the port (a waiter has none)."""

    def __init__(self, endpoints, prefix, *extra, env=None):
        self.dir = tempfile.TemporaryDirectory(prefix="sf_etcd_")
        self.port = sfharness.free_port()
        self.log_path = os.path.join(self.dir.name, "log")
        full = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
        full.update({"SNOWFLAKED_DATA_DIR": os.path.join(self.dir.name, "data"),
                     "SNOWFLAKED_SERVER_PORT": str(self.port),
                     "SNOWFLAKED_SERVER_THREADS": "1",
                     "SNOWFLAKED_SNOWFLAKE_ETCD_ENDPOINTS": endpoints,
                     "POD_NAME": "faults-%d" % self.port})
        full.update(env or {})
        args = ["--worker-id", "etcd",
                "--set", "snowflake.worker_bits=%d" % WORKER_BITS,
                "--set", "snowflake.etcd.prefix=" + prefix,
                "--set", "snowflake.etcd.ttl_s=%d" % TTL_S,
                "--set", "snowflake.etcd.fence_margin_ms=%d" % MARGIN_MS,
                "--set", "snowflake.etcd.request_timeout_ms=%d" % TIMEOUT_MS,
                "--set", "server.shutdown_grace_ms=2000", *extra]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sfharness.BINARY, *args], env=full, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def output(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_output(self, text, timeout=5):
        """The log is written by a background thread: give it time."""
        deadline = time.monotonic() + timeout
        while text not in self.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        return text in self.output()

    def listening(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            return True
        except OSError:
            return False

    def wait_listening(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("exited %d:\n%s" % (self.proc.returncode, self.output()))
            if self.listening():
                return
            time.sleep(0.02)
        raise AssertionError("not listening after %ss:\n%s" % (timeout, self.output()))

    def get(self, path):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
            return sfharness.Reader(s).response()

    def new_id(self):
        r = self.get("/id")
        return int(r.json()["id"]) if r.status == 200 else None

    def metric(self, name):
        for line in self.get("/metrics").body.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.dir.cleanup()


class GarbageServer(threading.Thread):
    """Answers every request with 200 and a body that is not etcd's."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stopped = False

    def run(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                c.settimeout(2)
                try:
                    c.recv(65536)
                    body = b"<html>not etcd</html>"
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d"
                              b"\r\n\r\n%s" % (len(body), body))
                except OSError:
                    pass

    def close(self):
        self.stopped = True
        self.sock.close()


class EtcdIdentityFaults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = ensure_etcd()
        if reason:
            raise AssertionError(reason)  # CI is root: never a silent skip
        cls.ec = EtcdCluster(members=1).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.ec.close()

    def setUp(self):
        self.prefix = "/t%d/%s" % (os.getpid(), self._testMethodName)
        self.port = int(self.ec.endpoint(0).rsplit(":", 1)[1])

    def daemon(self, *extra, endpoints=None, **kw):
        d = Daemon(endpoints or self.ec.endpoints(), self.prefix, *extra, **kw)
        self.addCleanup(d.close)
        return d

    def etcd_get(self, key):
        st, r = post(self.port, "/v3/kv/range", {"key": b64(key)})
        self.assertEqual(st, 200, r)
        kvs = r.get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def etcd_put(self, key, value):
        st, r = post(self.port, "/v3/kv/put", {"key": b64(key), "value": b64(value)})
        self.assertEqual(st, 200, r)

    def owner_key(self, w):
        return "%s/owner/0000000/%07d" % (self.prefix, w)

    def floor_key(self, w):
        return "%s/floor/0000000/%07d" % (self.prefix, w)

    def hold_all(self, n=4):
        ds = [self.daemon() for _ in range(n)]
        for d in ds:
            d.wait_listening()
        return ds

    # ---- start ----------------------------------------------------------------------------------

    def test_no_etcd_at_start_exits_1(self):
        dead = "http://127.0.0.1:%d" % sfharness.free_port()
        t0 = time.monotonic()
        d = self.daemon("--set", "snowflake.etcd.start_timeout_ms=800", endpoints=dead)
        rc = d.wait_exit(15)
        took = time.monotonic() - t0
        figure("no_etcd_exit_s", "%.2f" % took)
        self.assertEqual(rc, 1, d.output())
        self.assertIn("no usable answer from " + dead, d.output())
        self.assertIn("not guessing a worker id", d.output())
        self.assertGreaterEqual(took, 0.8)

    def test_garbage_server_is_not_etcd(self):
        g = GarbageServer()
        g.start()
        self.addCleanup(g.close)
        d = self.daemon("--set", "snowflake.etcd.start_timeout_ms=600",
                        endpoints="http://127.0.0.1:%d" % g.port)
        self.assertEqual(d.wait_exit(15), 1, d.output())
        self.assertIn("no usable answer", d.output())
        self.assertNotIn("claimed", d.output())

    def test_all_slots_held_exits_1_naming_the_range(self):
        self.hold_all()
        d = self.daemon()
        self.assertEqual(d.wait_exit(15), 1, d.output())
        self.assertIn("all 4 slots of datacenter 0 (workers 0..3) under %s are held" % self.prefix,
                      d.output())

    def test_waiter_takes_a_released_slot_and_sigterm_while_waiting_exits_0(self):
        held = self.hold_all()
        w = self.daemon("--set", "snowflake.etcd.wait_for_slot=true")
        w.wait_listening()
        self.assertTrue(w.wait_output("waiting for a free slot"), w.output())
        r = w.get("/readyz")
        self.assertEqual(r.status, 503)
        self.assertIn(b"waiting for a free slot in datacenter 0 (workers 0..3)", r.body)
        refused = w.get("/id")
        self.assertEqual(refused.status, 503)
        # A waiter has no lease floor yet: its Retry-After is the lease refusal's 1 s, never the
        # time to a tick computed from a zero floor (it was 218441336 s).
        self.assertEqual(refused.header("Retry-After"), "1", refused.headers)
        self.assertEqual(w.metric("snowflaked_identity_slots_held"), 0)
        last = held[2].new_id()
        held[2].proc.send_signal(signal.SIGTERM)  # clean stop: revoked at once
        self.assertEqual(held[2].wait_exit(10), 0, held[2].output())
        t0 = time.monotonic()
        while (first := w.new_id()) is None and time.monotonic() - t0 < 10:
            time.sleep(0.02)
        figure("released_to_claimed_s", "%.2f" % (time.monotonic() - t0))
        self.assertIsNotNone(first, w.output())
        self.assertEqual(w.get("/readyz").status, 200)
        self.assertEqual(id_worker(first), id_worker(last))
        self.assertGreater(first, last)
        # a second waiter, stopped while waiting
        w2 = self.daemon("--set", "snowflake.etcd.wait_for_slot=true")
        w2.wait_listening()
        t0 = time.monotonic()
        w2.proc.send_signal(signal.SIGTERM)
        self.assertEqual(w2.wait_exit(5), 0, w2.output())
        figure("sigterm_while_waiting_exit_s", "%.2f" % (time.monotonic() - t0))
        self.assertNotIn("etcd identity: released", w2.output())  # it held nothing

    def test_clean_stop_revokes_and_writes_the_exact_floor(self):
        d = self.daemon()
        d.wait_listening()
        last = d.new_id()
        self.assertIsNotNone(self.etcd_get(self.owner_key(0)))
        d.proc.send_signal(signal.SIGTERM)
        self.assertEqual(d.wait_exit(10), 0, d.output())
        self.assertIsNone(self.etcd_get(self.owner_key(0)))  # revoked, not expired
        floor = json.loads(self.etcd_get(self.floor_key(0)))
        self.assertGreater(floor["E"], id_ms(last))
        self.assertLess(floor["E"], time.time() * 1000 + 1000)  # exact, not the renewed one
        self.assertEqual(floor["by"], "faults-%d" % d.port)

    # ---- records ----------------------------------------------------------------------------------

    def test_unreadable_floor_is_not_taken(self):
        self.etcd_put(self.floor_key(0), "{not json")
        d = self.daemon()
        d.wait_listening()
        self.assertEqual(id_worker(d.new_id()), 1)
        self.assertTrue(d.wait_output(self.floor_key(0)), d.output())
        self.assertEqual(d.metric("snowflaked_identity_bad_records_total"), 1)

    def test_future_floor_is_honoured(self):
        ahead_ms = int(time.time() * 1000) + 2500
        self.etcd_put(self.floor_key(0), json.dumps({"v": 1, "E": ahead_ms}))
        d = self.daemon()
        d.wait_listening()
        r = d.get("/id")
        self.assertEqual(r.status, 503, r.body)  # the clock is behind the previous holder's E
        self.assertIsNotNone(r.header("Retry-After"))
        deadline = time.monotonic() + 10
        while (i := d.new_id()) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertIsNotNone(i, d.output())
        self.assertGreaterEqual(id_ms(i), ahead_ms)

    def test_other_layout_under_the_prefix_is_refused(self):
        d = self.daemon()
        d.wait_listening()
        other = self.daemon("--set", "snowflake.sequence_bits=11")
        self.assertEqual(other.wait_exit(15), 1, other.output())
        self.assertIn("another fleet's layout", other.output())
        self.assertIn("2/11", other.output())

    # ---- running ----------------------------------------------------------------------------------

    def test_handoff_after_kill_9_goes_up(self):
        one = ("--set", "snowflake.etcd.worker_max=0")  # both want worker 0
        a = self.daemon(*one)
        a.wait_listening()
        ids = [a.new_id() for _ in range(50)]
        b = self.daemon(*one, "--set", "snowflake.etcd.wait_for_slot=true")
        b.wait_listening()
        a.proc.kill()
        a.proc.wait()
        t0 = time.monotonic()
        while (first := b.new_id()) is None and time.monotonic() - t0 < 15:
            time.sleep(0.02)
        figure("kill9_to_reclaim_s", "%.2f" % (time.monotonic() - t0))
        self.assertIsNotNone(first, b.output())
        self.assertEqual(id_worker(first), 0)
        self.assertGreater(first, max(ids))

    def revoke(self):
        owner = json.loads(self.etcd_get(self.owner_key(0)))
        st, r = post(self.port, "/v3/lease/revoke", {"ID": str(int(owner["lease"], 16))})
        self.assertEqual(st, 200, r)
        return owner

    def reclaimed(self, how):
        d = self.daemon()
        d.wait_listening()
        before = [d.new_id() for _ in range(20)]
        old = json.loads(self.etcd_get(self.owner_key(0)))["lease"]
        how()
        ok = 'snowflaked_identity_reclaims_total{result="ok"}'
        t0 = time.monotonic()
        while d.metric(ok) != 1 and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        figure("lapse_to_reclaimed_s", "%.2f" % (time.monotonic() - t0))
        self.assertEqual(d.metric(ok), 1, d.output())
        while (after := d.new_id()) is None and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        self.assertIsNotNone(after, d.output())
        self.assertEqual(id_worker(after), 0)
        self.assertGreater(after, max(before))
        self.assertNotEqual(json.loads(self.etcd_get(self.owner_key(0)))["lease"], old)
        self.assertEqual(d.get("/readyz").status, 200)
        self.assertTrue(d.wait_output("re-claim") or d.wait_output("claimed"), d.output())
        d.proc.send_signal(signal.SIGTERM)
        self.assertEqual(d.wait_exit(10), 0, d.output())

    def test_revoked_lease_reclaims_the_same_slot(self):
        self.reclaimed(self.revoke)

    def test_deleted_owner_key_reclaims_the_same_slot(self):
        self.reclaimed(lambda: self.assertEqual(
            post(self.port, "/v3/kv/deleterange", {"key": b64(self.owner_key(0))})[0], 200))

    def intrude(self):
        """Revokes the holder's lease and at once another "process" takes worker 0."""
        st, r = post(self.port, "/v3/lease/grant", {"TTL": 30})
        self.assertEqual(st, 200, r)
        self.revoke()
        st, r = post(self.port, "/v3/kv/put", {"key": b64(self.owner_key(0)),
                                                "value": b64('{"holder":"intruder"}'),
                                                "lease": r["ID"]})
        self.assertEqual(st, 200, r)

    def test_slot_taken_while_lapsed_moves_to_a_free_one(self):
        e1 = int(time.time() * 1000) + 1500  # worker 1's previous holder went up to here
        self.etcd_put(self.floor_key(1), json.dumps({"v": 1, "E": e1}))
        d = self.daemon()
        d.wait_listening()
        self.assertEqual(id_worker(d.new_id()), 0)
        self.intrude()
        t0 = time.monotonic()
        while (i := d.new_id()) is None or id_worker(i) != 1:
            self.assertLess(time.monotonic() - t0, 10, d.output())
            time.sleep(0.05)
        figure("taken_to_moved_s", "%.2f" % (time.monotonic() - t0))
        self.assertGreaterEqual(id_ms(i), e1)  # above the new slot's floor
        self.assertTrue(d.wait_output("now issuing as datacenter 0 worker 1"), d.output())
        self.assertEqual(d.get("/readyz").status, 200)
        self.assertIsNone(d.proc.poll())
        d.proc.send_signal(signal.SIGTERM)
        self.assertEqual(d.wait_exit(10), 0, d.output())

    def test_slot_taken_while_lapsed_and_none_free_waits(self):
        d = self.daemon("--set", "snowflake.etcd.wait_for_slot=true")
        d.wait_listening()
        others = [self.daemon() for _ in range(3)]
        for o in others:
            o.wait_listening()
        self.intrude()
        t0 = time.monotonic()
        while d.get("/readyz").status == 200 and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        r = d.get("/readyz")
        self.assertEqual(r.status, 503, d.output())
        self.assertEqual(d.get("/id").status, 503)
        freed = id_worker(others[1].new_id())
        others[1].proc.send_signal(signal.SIGTERM)  # frees its worker
        self.assertEqual(others[1].wait_exit(10), 0)
        while (i := d.new_id()) is None and time.monotonic() - t0 < 15:
            time.sleep(0.05)
        self.assertIsNotNone(i, d.output())
        self.assertEqual(id_worker(i), freed)

    def test_frozen_holder_finds_its_slot_taken_and_waits(self):
        one = ("--set", "snowflake.etcd.worker_max=0", "--set", "snowflake.etcd.wait_for_slot=true")
        a = self.daemon(*one)
        a.wait_listening()
        last = a.new_id()
        b = self.daemon(*one)
        b.wait_listening()
        a.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            while (first := b.new_id()) is None and time.monotonic() - t0 < TTL_S + 8:
                time.sleep(0.05)
            self.assertIsNotNone(first, b.output())
            self.assertGreater(first, last)
        finally:
            a.proc.send_signal(signal.SIGCONT)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            r = a.get("/readyz")
            if r.status == 503 and b"waiting for a free slot" in r.body:
                break
            time.sleep(0.05)
        self.assertIn(b"waiting for a free slot", a.get("/readyz").body, a.output())
        self.assertEqual(a.get("/id").status, 503)
        self.assertIsNone(a.proc.poll())

    def test_slot_taken_while_lapsed_and_none_free_exits_75(self):
        d = self.daemon()
        d.wait_listening()
        last = d.new_id()
        for o in [self.daemon() for _ in range(3)]:
            o.wait_listening()
        self.intrude()
        self.assertEqual(d.wait_exit(TTL_S + 10), 75, d.output())
        self.assertIn("held by another process now", d.output())
        self.assertIn("exit 75", d.output())
        floor = json.loads(self.etcd_get(self.floor_key(0)))
        self.assertGreater(floor["E"], id_ms(last))  # the renewed floor still covers its IDs

    def test_frozen_etcd_fences_then_resumes(self):
        d = self.daemon()
        d.wait_listening()
        self.assertIsNotNone(d.new_id())
        self.ec.stop(0)
        t0 = time.monotonic()
        try:
            while d.get("/id").status == 200 and time.monotonic() - t0 < 10:
                time.sleep(0.02)
            fenced_after = time.monotonic() - t0
            figure("etcd_frozen_to_fenced_s", "%.2f" % fenced_after)
            self.assertLessEqual(fenced_after, TTL_S - MARGIN_MS / 1000 + 0.5)
            r = d.get("/readyz")
            self.assertEqual(r.status, 503)
            self.assertIn(b"etcd", r.body)
            self.assertEqual(d.metric("snowflaked_identity_fenced"), 1)
        finally:
            self.ec.cont(0)
        t0 = time.monotonic()
        while d.new_id() is None and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        figure("etcd_back_to_issuing_s", "%.2f" % (time.monotonic() - t0))
        self.assertEqual(d.get("/readyz").status, 200)
        self.assertEqual(d.metric("snowflaked_identity_fenced"), 0)
        self.assertGreater(d.metric("snowflaked_identity_fenced_seconds_total"), 0)
        self.assertEqual(d.metric("snowflaked_identity_slots_held"), 1)
        ep = self.ec.endpoint(0).split("//", 1)[1]
        self.assertGreater(d.metric('snowflaked_etcd_requests_total{endpoint="%s",result="answered"}'
                                    % ep), 0)
        self.assertGreaterEqual(d.metric('snowflaked_etcd_requests_total{endpoint="%s",'
                                         'result="failed"}' % ep), 1)  # the timed-out renewals
        self.assertEqual(d.metric('snowflaked_etcd_endpoint_current{endpoint="%s"}' % ep), 1)



class CleanStopWithAMemberFrozen(unittest.TestCase):
    """A clean stop while one of three etcd members is frozen (quorum intact): the final floor
    and the revoke go to the other members, exit 0, the slot is free at once. make chaos found
    the stop trying only the frozen member and exiting 1 with the slot held until its TTL."""

    def test_each_member(self):
        reason = ensure_etcd()
        if reason:
            self.fail(reason)
        ec = EtcdCluster().__enter__()
        self.addCleanup(ec.close)
        for m in range(3):
            prefix = "/t%d/frozen_member_%d" % (os.getpid(), m)
            d = Daemon(ec.endpoints(), prefix)
            self.addCleanup(d.close)
            d.wait_listening()
            self.assertIsNotNone(d.new_id())
            ec.stop(m)
            try:
                time.sleep(0.3)
                d.proc.send_signal(signal.SIGTERM)
                rc = d.wait_exit(15)
            finally:
                ec.cont(m)
            self.assertEqual(rc, 0, d.output())
            self.assertIn("etcd identity: released", d.output())
            ec.wait_ready(timeout=10)
            port = int(ec.endpoint((m + 1) % 3).rsplit(":", 1)[1])
            st, r = post(port, "/v3/kv/range", {"key": b64(prefix + "/owner/0000000/0000000")})
            self.assertEqual((st, r.get("kvs")), (200, None), r)  # revoked, not waiting for TTL


if __name__ == "__main__":
    unittest.main()
