"""One port, one issuer; one identity, one issuer (issue 21, section 1).

A second daemon on our port, or with our identity, must refuse to start (exit 1, naming the port
or the identity and the holder's pid) while the first keeps serving, and nothing served meanwhile
may repeat an ID. The wildcard/loopback overlaps count as the same port. A kill -9 of the holder
leaves no stale claim, and a successor with the identity from another data_dir (without the
holder's lease) starts past every ID the holder handed out. A foreign SO_REUSEPORT listener that
joins our port later gets no connection (the steering program), and a more specific one, which
would take the loopback traffic, is detected: logged, counted, /readyz 503 while it listens.
"""
import ctypes
import errno
import os
import select
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

from sfharness import BINARY, Reader, Server, free_port, get, request, wait_ready

SO_ATTACH_REUSEPORT_CBPF = 51  # asm-generic/socket.h


def attach_ret(sock, index):
    """Attaches to sock's SO_REUSEPORT group the classic BPF program "return index": it replaces
    the group's program (ours) and sends every new connection to the socket holding index."""
    code = (ctypes.c_uint8 * 8)()
    struct.pack_into("=HBBI", code, 0, 0x06, 0, 0, index)  # BPF_RET | BPF_K
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF,
                    struct.pack("@HP", 1, ctypes.addressof(code)))


def split(port, foreign, n, host="127.0.0.1"):
    """n new connections to host:port, each asking for /id: (answered by us, taken by foreign).
    A connection the kernel gave the foreign socket (None: closed) is accepted and closed there."""
    ours = stolen = 0
    for _ in range(n):
        with socket.create_connection((host, port), timeout=5) as c:
            c.sendall(get("/id"))
            ready, _, _ = select.select([c] + ([foreign] if foreign else []), [], [], 5)
            if foreign in ready:
                foreign.accept()[0].close()
                stolen += 1
            elif c in ready:
                ours += c.recv(100).startswith(b"HTTP/1.1 200")
    return ours, stolen


def has_ipv6_loopback():
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def second(first, port, *args, host=None, timeout=8):
    """Starts another daemon with its own data_dir on port, in the first's datacenter (sfharness
    gives each Server one of its own); returns (exit code, output). One still running after
    timeout seconds (it shares the port or the identity) is stopped and reported with code
    None."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
    with tempfile.TemporaryDirectory(prefix="sf_excl_") as d:
        env.update({"SNOWFLAKED_DATA_DIR": d, "SNOWFLAKED_SERVER_PORT": str(port),
                    "SNOWFLAKED_SERVER_THREADS": "2",
                    "SNOWFLAKED_SNOWFLAKE_DATACENTER_ID": str(first.datacenter)})
        if host:
            env["SNOWFLAKED_SERVER_HOST"] = host
        p = subprocess.Popen([BINARY, *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = p.communicate(timeout=timeout)
            return p.returncode, out
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)
            out, _ = p.communicate(timeout=15)
            return None, out


class Hammer:
    """Threads asking for /ids?count=1000 on each (host, port) until stopped; every ID kept."""

    def __init__(self, *targets):
        self.ids, self.answers = [], 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(t,)) for t in targets]
        for t in self.threads:
            t.start()

    def run(self, target):
        req = get("/ids?count=1000&format=text")
        while not self.stopping.is_set():
            try:
                with socket.create_connection(target, timeout=5) as s:
                    s.sendall(req)
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = s.recv(65536)
                        if not chunk:
                            raise ConnectionError
                        data += chunk
                    head, body = data.split(b"\r\n\r\n", 1)
                    length = int([h.split(b":")[1] for h in head.split(b"\r\n")
                                  if h.lower().startswith(b"content-length:")][0])
                    while len(body) < length:
                        chunk = s.recv(65536)
                        if not chunk:
                            raise ConnectionError
                        body += chunk
            except (OSError, ConnectionError, IndexError):
                time.sleep(0.01)  # a port not (or no longer) served
                continue
            if head.startswith(b"HTTP/1.1 200"):
                got = body.split()
                with self.lock:
                    self.ids.extend(got)
                    self.answers += 1

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join()
        return self.ids

    def wait_answers(self, n, timeout=10):
        deadline = time.time() + timeout
        while self.answers < n and time.time() < deadline:
            time.sleep(0.01)


class SamePort(unittest.TestCase):
    def check_refused(self, first, port, *args, host=None, names_port=True):
        """Tries a second daemon while the first is hammered; returns its output."""
        hammer = Hammer(("127.0.0.1", port), ("127.0.0.2", port))
        hammer.wait_answers(5)
        code, out = second(first, port, *args, host=host)
        hammer.wait_answers(hammer.answers + 20)
        ids = hammer.stop()
        self.assertGreater(len(ids), 20000)
        self.assertEqual(len(ids) - len(set(ids)), 0, "duplicate IDs served")
        self.assertEqual(code, 1, out)
        if names_port:
            self.assertIn(":%d" % port, out)
        self.assertIn("pid %d" % first.proc.pid, out)
        self.assertEqual(request(first, get("/readyz")).status, 200)  # the first is unharmed
        return out

    def test_second_on_our_port_refuses(self):
        first = Server(threads=2)
        try:
            out = self.check_refused(first, first.port, "--set", "snowflake.worker_id=7")
            self.assertIn("cannot listen on 127.0.0.1:%d: already in use" % first.port, out)
        finally:
            first.stop()

    def test_issue_repro_same_port_same_default_worker(self):
        first = Server(threads=2)
        try:
            out = self.check_refused(first, first.port, names_port=False)
            self.assertIn("datacenter %d worker 0 is already issuing IDs on this host"
                          % first.datacenter, out)
        finally:
            first.stop()

    def test_loopback_beside_our_wildcard_refuses(self):
        first = Server(threads=2, env={"SNOWFLAKED_SERVER_HOST": "0.0.0.0"})
        try:
            out = self.check_refused(first, first.port, "--set", "snowflake.worker_id=7",
                                     host="127.0.0.1")
            self.assertIn("cannot listen on 127.0.0.1:%d" % first.port, out)
            self.assertIn("0.0.0.0:%d" % first.port, out)  # where the holder listens
        finally:
            first.stop()

    def test_wildcard_over_our_loopback_refuses(self):
        first = Server(threads=2, env={"SNOWFLAKED_SERVER_HOST": "127.0.0.1"})
        try:
            hammer = Hammer(("127.0.0.1", first.port))
            hammer.wait_answers(5)
            code, out = second(first, first.port, "--set", "snowflake.worker_id=7", host="0.0.0.0")
            hammer.wait_answers(hammer.answers + 20)
            ids = hammer.stop()
            self.assertEqual(code, 1, out)
            self.assertIn("cannot listen on 0.0.0.0:%d" % first.port, out)
            self.assertIn("pid %d" % first.proc.pid, out)
            self.assertEqual(len(ids), len(set(ids)), "duplicate IDs served")
        finally:
            first.stop()

    def test_memcached_port_is_ours_alone_too(self):
        mc = free_port()
        first = Server("--set", "cache.memcached_port=%d" % mc)
        try:
            code, out = second(first, free_port(), "--set", "snowflake.worker_id=7",
                               "--set", "cache.memcached_port=%d" % mc)
            self.assertEqual(code, 1, out)
            self.assertIn("cannot listen on 127.0.0.1:%d: already in use by pid %d"
                          % (mc, first.proc.pid), out)
        finally:
            first.stop()


class SameIdentity(unittest.TestCase):
    def test_same_identity_other_port_and_data_dir_refuses(self):
        first = Server(threads=2, env={"SNOWFLAKED_SNOWFLAKE_WORKER_ID": "3"})
        try:
            other = free_port()
            hammer = Hammer(("127.0.0.1", first.port), ("127.0.0.1", other))
            hammer.wait_answers(5)
            code, out = second(first, other, "--set", "snowflake.worker_id=3")
            hammer.wait_answers(hammer.answers + 20)
            ids = hammer.stop()
            self.assertEqual(len(ids) - len(set(ids)), 0, "duplicate IDs served")
            self.assertEqual(code, 1, out)
            self.assertIn("datacenter %d worker 3 is already issuing IDs on this host"
                          % first.datacenter, out)
            self.assertIn("pid %d (snowflaked)" % first.proc.pid, out)
        finally:
            first.stop()

    def test_per_thread_worker_ids_claim_every_worker(self):
        first = Server("--set", "snowflake.per_thread_worker_ids=true", threads=2)  # workers 0, 1
        try:
            code, out = second(first, free_port(), "--set", "snowflake.worker_id=1", "--set",
                               "server.threads=1")
            self.assertEqual(code, 1, out)
            self.assertIn("worker 1 is already issuing", out)
            self.assertIn("pid %d" % first.proc.pid, out)
            code, out = second(first, free_port(), "--set", "snowflake.worker_id=1", "--set",
                               "snowflake.per_thread_worker_ids=true")  # 1, 2 over 0, 1
            self.assertEqual(code, 1, out)
            srv = Server("--set", "snowflake.worker_id=2",  # beside them: fine
                         env={"SNOWFLAKED_SNOWFLAKE_DATACENTER_ID": str(first.datacenter)})
            srv.stop()
        finally:
            first.stop()

    def test_same_worker_other_datacenter_starts(self):
        first = Server()
        try:
            srv = Server()  # worker 0 as well: sfharness moves it to another datacenter
            self.assertNotEqual(srv.datacenter, first.datacenter)
            self.assertEqual(request(srv, get("/id")).status, 200)
            srv.stop()
        finally:
            first.stop()

    def test_uuid_node_shared_across_snowflake_epochs_refuses(self):
        """Another Snowflake epoch is another ID space, but UUIDv7/ULID carry the same node."""
        first = Server()
        try:
            code, out = second(first, free_port(), "--set", "snowflake.epoch=2021-01-01T00:00:00Z")
            self.assertEqual(code, 1, out)
            self.assertIn("UUIDv7/ULID node %d of 10 bits" % (first.datacenter << 5), out)
        finally:
            first.stop()

    def test_restart_after_kill_9_is_immediate(self):
        first = Server(threads=2)
        data = os.path.join(first.dir.name, "data")
        port = first.port
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        started = time.time()
        again = Server(threads=2, port=port, data_dir=data)
        try:
            self.assertLess(time.time() - started, 5)
            wait_ready(again)
            self.assertEqual(request(again, get("/id")).status, 200)
        finally:
            again.stop()
            first.log.close()
            first.dir.cleanup()


# A layout whose run-ahead can be watched: 1 s ticks of 256 IDs, so a batch of 512 from a fresh
# tick spans two (the caller waits for the second), and the datacenter/worker pinned (no other
# suite uses them) so that A and B share one identity.
COARSE = ["--set", "snowflake.time_unit_ms=1000", "--set", "snowflake.sequence_bits=8",
          "--set", "snowflake.max_batch=512", "--set", "snowflake.lease_ms=10000",
          "--set", "snowflake.datacenter_id=6", "--set", "snowflake.worker_id=23"]
NODE_SEQ_BITS = 5 + 5 + 8  # datacenter, worker, sequence below the tick


def take(srv, path):
    r = request(srv, get(path))
    if r.status != 200:
        raise AssertionError("%s: %d %r" % (path, r.status, r.body))
    return r.body.split()


class SuccessorFromAnotherDataDir(unittest.TestCase):
    """A holds an identity and is killed (or stops cleanly); B starts with the same identity at
    once, from another data_dir (so not from A's lease). Whatever A handed out, B must not hand out again: its
    floor is past A's clock, not just past its own (absent) lease."""

    def test_kill_9_then_same_identity_elsewhere_reissues_nothing(self):
        self.check_successor(lambda a: os.kill(a.proc.pid, signal.SIGKILL))

    def test_clean_stop_then_same_identity_elsewhere_reissues_nothing(self):
        self.check_successor(lambda a: a.proc.send_signal(signal.SIGTERM))

    def check_successor(self, end):
        a = Server(*COARSE)
        b = None
        try:
            # Right after a tick began (so A's batch starts in a fresh tick and B, before the fix,
            # could start inside A's last one): 512 IDs, the second half in the next tick.
            while time.time() % 1.0 > 0.2:
                time.sleep(0.01)
            a_ids = [int(x) for x in take(a, "/ids?count=512&format=text")]
            a_uuids = take(a, "/uuids?count=512&format=text")
            end(a)
            a.proc.wait()
            started = time.time()
            b = Server(*COARSE)  # its own temporary data_dir: no lease of A's to read
            waited = time.time() - started
            b_ids = [int(x) for x in take(b, "/ids?count=100&format=text")]
            b_ids += [int(take(b, "/id?format=text")[0]) for _ in range(5)]
            b_uuids = take(b, "/uuids?count=100&format=text")
            self.assertEqual(len(set(a_ids) & set(b_ids)), 0, "B reissued A's IDs")
            a_top = max(i >> NODE_SEQ_BITS for i in a_ids)
            self.assertGreater(a_top, min(i >> NODE_SEQ_BITS for i in a_ids))  # ran ahead
            self.assertGreater(min(i >> NODE_SEQ_BITS for i in b_ids), a_top,
                               "B issued in a tick A may have used")
            self.assertEqual(len(set(a_uuids) & set(b_uuids)), 0, "B reissued A's UUIDs")
            ms = lambda u: int(u.replace(b"-", b"")[:12], 16)
            self.assertGreater(min(map(ms, b_uuids)), max(map(ms, a_uuids)))
            self.assertLess(waited, 5)  # up to two 1 s ticks of waiting at start, and no more
            self.assertIn("once our clock is past anything a previous holder of this identity",
                          b.output())
        finally:
            if b:
                b.stop()
            a.log.close()
            a.dir.cleanup()


class ForeignListener(unittest.TestCase):
    def test_late_reuseport_joiner_gets_no_connection(self):
        srv = Server(threads=2)
        foreign = socket.socket()
        try:
            foreign.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            foreign.bind(("127.0.0.1", srv.port))  # joins our group: same uid, same address
            foreign.listen(512)
            foreign.setblocking(False)
            served = 0
            for _ in range(300):
                try:
                    with srv.connect(timeout=2) as s:
                        s.sendall(get("/id"))
                        served += s.recv(100).startswith(b"HTTP/1.1 200")
                except OSError:
                    pass  # a connection the foreign socket took never answers
            stolen = 0
            try:
                while True:
                    foreign.accept()[0].close()
                    stolen += 1
            except BlockingIOError:
                pass
            self.assertEqual(stolen, 0)
            self.assertEqual(served, 300)
            deadline = time.time() + 5
            while "joined our SO_REUSEPORT group" not in srv.output() and time.time() < deadline:
                time.sleep(0.05)
            self.assertIn("joined our SO_REUSEPORT group", srv.output())
            # Steered away, yet not ready: any member of the group may replace our program and
            # take everything (StealingListener); the issue 21 review made it count as harmful.
            deadline = time.time() + 5
            while request(srv, get("/readyz")).status != 503 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(request(srv, get("/readyz")).status, 503)
            foreign.close()
            wait_ready(srv)
        finally:
            foreign.close()
            srv.stop()

    def metrics(self, port):
        with socket.create_connection(("127.0.0.2", port), timeout=5) as s:
            s.sendall(get("/metrics", "Connection: close\r\n"))
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        values = {}
        for line in data.split(b"\r\n\r\n", 1)[1].decode().splitlines():
            if line.startswith("snowflaked_foreign"):
                k, v = line.split()
                values[k] = float(v)
        return values

    def readyz(self, port):
        with socket.create_connection(("127.0.0.2", port), timeout=5) as s:
            s.sendall(get("/readyz", "Connection: close\r\n"))
            return s.recv(4096)

    def wait_status(self, port, status, timeout=5):
        deadline = time.time() + timeout
        while not self.readyz(port).startswith(b"HTTP/1.1 %d" % status):
            if time.time() > deadline:
                self.fail("/readyz not %d within %d s: %r" % (status, timeout, self.readyz(port)))
            time.sleep(0.05)

    def test_more_specific_listener_is_detected(self):
        # We hold 0.0.0.0: the loopback one is another group and would take 127.0.0.1's traffic;
        # we are reached on 127.0.0.2 meanwhile.
        srv = Server(threads=2, env={"SNOWFLAKED_SERVER_HOST": "0.0.0.0"})
        try:
            self.wait_status(srv.port, 200)
            self.assertEqual(self.metrics(srv.port).get("snowflaked_foreign_listeners"), 0)
            foreign = socket.socket()
            foreign.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            foreign.bind(("127.0.0.1", srv.port))
            foreign.listen(16)
            self.wait_status(srv.port, 503)
            self.assertIn(b"another process listens on our port", self.readyz(srv.port))
            m = self.metrics(srv.port)
            self.assertEqual(m["snowflaked_foreign_listeners"], 1)
            self.assertEqual(m["snowflaked_foreign_listeners_harmful"], 1)
            self.assertEqual(m["snowflaked_foreign_listeners_detected_total"], 1)
            wait_output(srv, "foreign listener: ")
            self.assertIn("foreign listener: pid %d (python" % os.getpid(), srv.output())
            self.assertIn("listens on 127.0.0.1:%d, overlapping our 0.0.0.0:%d"
                          % (srv.port, srv.port), srv.output())
            time.sleep(1.5)  # logged once per appearance, not every second
            self.assertEqual(srv.output().count("foreign listener: "), 1)
            foreign.close()
            self.wait_status(srv.port, 200)
            m = self.metrics(srv.port)
            self.assertEqual(m["snowflaked_foreign_listeners"], 0)
            self.assertEqual(m["snowflaked_foreign_listeners_detected_total"], 1)
        finally:
            srv.stop()


class Kept:
    """A keep-alive connection to srv opened now: a listener appearing later does not take it,
    so /readyz and /metrics stay reachable while a foreign socket takes the new connections."""

    def __init__(self, srv):
        self.sock = srv.connect()
        self.reader = Reader(self.sock)

    def get(self, path):
        self.sock.sendall(get(path))
        return self.reader.response()

    def metrics(self):
        values = {}
        for line in self.get("/metrics").body.decode().splitlines():
            if line.startswith("snowflaked_foreign"):
                k, v = line.split()
                values[k] = float(v)
        return values

    def wait_status(self, status, timeout=5):
        deadline = time.time() + timeout
        while True:
            r = self.get("/readyz")
            if r.status == status:
                return r
            if time.time() > deadline:
                raise AssertionError("/readyz not %d within %d s: %d %r"
                                     % (status, timeout, r.status, r.body))
            time.sleep(0.05)

    def close(self):
        self.sock.close()


def wait_output(srv, text, timeout=5):
    deadline = time.time() + timeout  # the logger writes from its own thread
    while text not in srv.output() and time.time() < deadline:
        time.sleep(0.05)
    return srv.output()


def assert_harmful(tc, srv, kept, logged, line):
    """One foreign listener of this test process, counted harmful: /readyz 503 with its reason,
    both gauges 1, and the log line naming us (waited for until `logged` appears)."""
    r = kept.wait_status(503)
    tc.assertIn(b"another process listens on our port", r.body)
    m = kept.metrics()
    tc.assertEqual(m["snowflaked_foreign_listeners"], 1)
    tc.assertEqual(m["snowflaked_foreign_listeners_harmful"], 1)
    out = wait_output(srv, logged)
    tc.assertIn("foreign listener: pid %d (python" % os.getpid(), out)
    tc.assertIn(line, out)


class StealingListener(unittest.TestCase):
    """A foreign socket on our exact address takes connections even though our steering program
    is attached: by replacing the program (it belongs to the group, and any member may replace
    it) or by binding to a device (looked up before us). Issue 21 review, hole 1."""

    def test_joiner_replacing_our_steering_program(self):
        srv = Server(threads=2)
        kept = Kept(srv)
        foreign = socket.socket()
        try:
            kept.wait_status(200)
            foreign.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            foreign.bind(("127.0.0.1", srv.port))  # joins our group (same uid, same address)
            foreign.listen(512)
            foreign.setblocking(False)
            attach_ret(foreign, 2)  # our two sockets hold 0 and 1: all to index 2, the foreign
            replaced = split(srv.port, foreign, 50)
            time.sleep(2.5)  # our housekeeping ticks every second
            after = split(srv.port, foreign, 200)
            print("\nsteering replaced by a joiner: first 50 connections (ours, foreign) %r; "
                  "200 after 2.5 s %r" % (replaced, after))
            self.assertEqual(after, (200, 0))
            assert_harmful(self, srv, kept, "joined our SO_REUSEPORT group",
                           "joined our SO_REUSEPORT group on 127.0.0.1:%d" % srv.port)
            foreign.close()
            kept.wait_status(200)
            self.assertEqual(split(srv.port, None, 50), (50, 0))
        finally:
            foreign.close()
            kept.close()
            srv.stop()

    def test_device_bound_listener_on_our_address(self):
        srv = Server(threads=2)
        kept = Kept(srv)
        foreign = socket.socket()
        try:
            kept.wait_status(200)
            foreign.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                foreign.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
            except PermissionError:
                self.skipTest("SO_BINDTODEVICE not permitted here (CAP_NET_RAW before Linux "
                              "5.7)")
            foreign.bind(("127.0.0.1", srv.port))  # our address, bound to lo: another group
            foreign.listen(512)
            foreign.setblocking(False)
            taken = split(srv.port, foreign, 100)
            print("\ndevice-bound listener: 100 connections (ours, foreign) %r" % (taken,))
            assert_harmful(self, srv, kept, "bound to device lo",
                           "listens on 127.0.0.1:%d bound to device lo" % srv.port)
            foreign.close()
            kept.wait_status(200)
        finally:
            foreign.close()
            kept.close()
            srv.stop()


@unittest.skipUnless(has_ipv6_loopback(), "no IPv6 loopback (::1) in this sandbox")
class V6OnlyListener(unittest.TestCase):
    """Another program's [::]:P socket with IPV6_V6ONLY (nginx's `listen [::]:80`) takes no IPv4
    connection: it does not overlap our 127.0.0.1:P or 0.0.0.0:P, and the kernel lets both
    listen. /proc/net/tcp6 does not show the flag; sock_diag does. Issue 21 review, hole 2."""

    def v6_listener(self, port, v6only, reuseport=False):
        s = socket.socket(socket.AF_INET6)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if v6only else 0)
        if reuseport:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("::", port))
        s.listen(16)
        return s

    def test_v6only_listener_first_we_start(self):
        for host in ("127.0.0.1", "0.0.0.0"):
            with self.subTest(host=host):
                port = free_port()
                foreign = self.v6_listener(port, True)
                try:
                    srv = Server(threads=2, port=port, env={"SNOWFLAKED_SERVER_HOST": host})
                except RuntimeError as e:
                    foreign.close()
                    self.fail("refused beside a v6only [::]:%d: %s" % (port, e))
                try:
                    wait_ready(srv)
                    time.sleep(1.5)  # a housekeeping scan or two
                    kept = Kept(srv)
                    self.assertEqual(kept.get("/readyz").status, 200)
                    m = kept.metrics()
                    self.assertEqual(m["snowflaked_foreign_listeners"], 0)
                    self.assertEqual(m["snowflaked_foreign_listeners_harmful"], 0)
                    kept.close()
                finally:
                    foreign.close()
                    srv.stop()

    def test_v6only_listener_later_stays_ready(self):
        srv = Server(threads=2)
        kept = Kept(srv)
        try:
            kept.wait_status(200)
            foreign = self.v6_listener(srv.port, True)
            try:
                time.sleep(2)
                self.assertEqual(kept.get("/readyz").status, 200)
                self.assertEqual(kept.metrics()["snowflaked_foreign_listeners_harmful"], 0)
                self.assertNotIn("foreign listener", srv.output())
            finally:
                foreign.close()
        finally:
            kept.close()
            srv.stop()

    def test_dual_stack_listener_first_refuses(self):
        first = Server(threads=2)  # only to hand `second` a datacenter
        try:
            port = free_port()
            foreign = self.v6_listener(port, False)
            try:
                code, out = second(first, port, "--set", "snowflake.worker_id=7")
            finally:
                foreign.close()
            self.assertEqual(code, 1, out)
            self.assertIn("cannot listen on 127.0.0.1:%d: already in use by pid %d"
                          % (port, os.getpid()), out)
            self.assertIn("listening on [::]:%d" % port, out)
        finally:
            first.stop()

    def test_dual_stack_listener_later_is_harmful(self):
        srv = Server(threads=2)
        kept = Kept(srv)
        try:
            kept.wait_status(200)
            foreign = self.v6_listener(srv.port, False, reuseport=True)  # same uid: allowed
            try:
                kept.wait_status(503)
                self.assertEqual(kept.metrics()["snowflaked_foreign_listeners_harmful"], 1)
                out = wait_output(srv, "foreign listener")
                self.assertIn("listens on [::]:%d, overlapping our 127.0.0.1:%d"
                              % (srv.port, srv.port), out)
            finally:
                foreign.close()
            kept.wait_status(200)
        finally:
            kept.close()
            srv.stop()


if __name__ == "__main__":
    unittest.main()
