"""Descriptor exhaustion: the server runs with RLIMIT_NOFILE = 64 and 300 clients connect and
send a request each, far more than it has descriptors for.

Expected: the connections it took keep being served (GET /id stays 200 for longer than the
lease window, i.e. the lease keeper still finds a descriptor to renew the lease); accepting
pauses instead of spinning (server CPU < 20 % of one core, measured against wall time while
saturated); once clients leave, the waiting connections are accepted and answered, all 300."""
import os
import resource
import selectors
import socket
import time
import unittest

import faultutil as fu
from faultutil import Reader, Server, get, metric

NOFILE = 64
CLIENTS = 300
SATURATED_S = 3.0  # longer than snowflake.lease_ms (2 s): a lease that cannot be renewed shows


def answers(socks, indices, seconds, close_done=False):
    """Reads the sockets in `indices` for up to `seconds`; returns {index: status} of those
    that delivered one complete response (their first), closing them at once if close_done."""
    sel = selectors.DefaultSelector()
    bufs, done = {}, {}
    for i in indices:
        sel.register(socks[i], selectors.EVENT_READ, i)
    deadline = time.monotonic() + seconds
    try:
        while len(done) < len(indices) and time.monotonic() < deadline:
            for k, _ in sel.select(0.05):
                i = k.data
                try:
                    d = k.fileobj.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    d = b""
                bufs[i] = bufs.get(i, b"") + d
                got, _ = fu.parse_responses(bufs[i])
                if got or not d:
                    done[i] = got[0][0] if got else None
                    sel.unregister(k.fileobj)
                    if close_done:
                        k.fileobj.close()
    finally:
        sel.close()
    return done


class FdExhaustion(unittest.TestCase):
    def setUp(self):
        fu.need_binary(self)
        self.srv, self.socks = None, []
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < CLIENTS + 64:  # this process holds all the client sockets
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))

    def tearDown(self):
        for s in self.socks:
            s.close()
        fu.discard(self.srv)

    def test_out_of_descriptors_serves_existing_pauses_accepting_and_recovers(self):
        self.srv = srv = Server(nofile=NOFILE)
        fds_idle = fu.open_fds(srv.proc.pid)
        for _ in range(CLIENTS):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", srv.port))
            self.socks.append(s)
        # Each connects (the kernel completes the handshake into the backlog) and sends a
        # request, whether or not the server has accepted it.
        sel = selectors.DefaultSelector()
        for i, s in enumerate(self.socks):
            sel.register(s, selectors.EVENT_WRITE, i)
        pending, deadline = set(range(CLIENTS)), time.monotonic() + 10
        while pending and time.monotonic() < deadline:
            for k, _ in sel.select(0.1):
                err = k.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                self.assertEqual(err, 0, "connect failed: %s" % os.strerror(err))
                k.fileobj.send(get("/id"))
                sel.unregister(k.fileobj)
                pending.discard(k.data)
        sel.close()
        self.assertEqual(pending, set(), "connects did not complete")

        first = answers(self.socks, range(CLIENTS), 1.5)
        served = sorted(first)
        self.assertEqual({first[i] for i in served}, {200})
        self.assertGreaterEqual(len(served), 10)
        self.assertLess(len(served), CLIENTS, "the server was not short of descriptors")
        fds_full = fu.open_fds(srv.proc.pid)
        self.assertLessEqual(fds_full, NOFILE)

        # Saturated: the accepted connections keep being served, the accept loop does not spin.
        for i in served:
            self.socks[i].setblocking(True)
            self.socks[i].settimeout(5)
        readers = {i: Reader(self.socks[i]) for i in served}
        statuses = {}
        c0, t0 = srv.cpu_seconds(), time.monotonic()
        while time.monotonic() - t0 < SATURATED_S:
            for i in served[:5]:
                self.socks[i].sendall(get("/id"))
                st = readers[i].response().status
                statuses[st] = statuses.get(st, 0) + 1
            time.sleep(0.25)
        cpu = (srv.cpu_seconds() - c0) / (time.monotonic() - t0)
        fu.figure("fd exhaustion: descriptors", "%d at start, %d of %d while saturated" %
                  (fds_idle, fds_full, NOFILE))
        fu.figure("fd exhaustion: connections served while saturated", "%d of %d" %
                  (len(served), CLIENTS))
        fu.figure("fd exhaustion: server CPU while saturated", "%.1f%% of one core over %.1f s" %
                  (cpu * 100, SATURATED_S))
        fu.figure("fd exhaustion: /id on existing connections while saturated", statuses)
        self.assertLess(cpu, 0.20, "the server spins while out of descriptors")
        self.assertEqual(set(statuses), {200}, "existing connections not served (a 503 means the "
                         "lease could not be renewed):\n" + srv.output()[-2000:])
        self.assertNotIn("lease renewal failed", srv.output())

        # Clients leave: the waiting connections are accepted and answered, in backlog order.
        t0 = time.monotonic()
        for i in served:
            self.socks[i].close()
        left = [i for i in range(CLIENTS) if i not in first]
        got = answers(self.socks, left, 20, close_done=True)
        self.assertEqual({v for v in got.values()} - {200}, set())
        left = [i for i in left if i not in got]
        self.assertEqual(left, [], "%d connections never answered after descriptors freed" %
                         len(left))
        fu.figure("fd exhaustion: all waiting connections answered after release", "%.2f s" %
                  (time.monotonic() - t0))
        time.sleep(0.3)
        self.assertGreaterEqual(metric(srv, "snowflaked_accept_pauses_total"), 1)
        self.assertEqual(metric(srv, "snowflaked_lease_write_failures_total"), 0)
        self.assertEqual(metric(srv, "snowflaked_cache_snapshot_failures_total"), 0)
        srv, self.srv = self.srv, None
        self.assertEqual(fu.stop_expect(srv)[0], 0)


if __name__ == "__main__":
    unittest.main()
