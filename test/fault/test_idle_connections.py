"""10,000 concurrent idle keep-alive connections: each made one request (so it sits in the
keep-alive idle state, not waiting for a first request), all held open at once by two helper
processes (5,000 non-blocking sockets each, RLIMIT_NOFILE raised for them and for the server).

Figure and bar: server RSS per idle connection = (RSS with the connections - RSS before) /
10,000 <= 4 KiB. Then every connection sends one more request and every answer is read."""
import multiprocessing
import resource
import selectors
import socket
import subprocess
import time
import unittest

import faultutil as fu
from faultutil import Server, get, metric, request

N = 10000
HELPERS = 2
BAR_BYTES = 4096


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
        return None
    except (ValueError, OSError) as e:
        return "cannot raise RLIMIT_NOFILE to %d (hard limit %d): %s" % (want, hard, e)


def round_trip(socks, deadline):
    """Sends GET /id on every socket, reads one complete response from each; returns the number
    answered 200."""
    sel = selectors.EpollSelector()
    req = get("/id")
    bufs = {}
    for i, s in enumerate(socks):
        s.send(req)  # tiny: fits the empty socket buffer
        sel.register(s, selectors.EVENT_READ, i)
        bufs[i] = b""
    ok = 0
    left = len(socks)
    try:
        while left and time.monotonic() < deadline:
            for k, _ in sel.select(0.2):
                i = k.data
                try:
                    d = k.fileobj.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    d = b""
                bufs[i] += d
                got, _ = fu.parse_responses(bufs[i])
                if got or not d:
                    ok += bool(got) and got[0][0] == 200
                    left -= 1
                    sel.unregister(k.fileobj)
    finally:
        sel.close()
    return ok


def holder(port, count, pipe):
    """Helper process: opens `count` connections, one request each, reports, holds them idle,
    then on "go" does one more request on each, reports, and on "close" closes them all."""
    socks = []
    try:
        err = raise_nofile(count + 256)
        if err:
            pipe.send(("error", err))
            return
        sel = selectors.EpollSelector()
        pending = 0
        for i in range(count):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
            sel.register(s, selectors.EVENT_WRITE, i)
            pending += 1
            if pending >= 500 or i == count - 1:  # keep the listen backlog from overflowing
                deadline = time.monotonic() + 20
                while pending and time.monotonic() < deadline:
                    for k, _ in sel.select(0.2):
                        e = k.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if e:
                            pipe.send(("error", "connect: errno %d" % e))
                            return
                        sel.unregister(k.fileobj)
                        pending -= 1
                if pending:
                    pipe.send(("error", "%d connects did not complete" % pending))
                    return
        sel.close()
        pipe.send(("ready", round_trip(socks, time.monotonic() + 60)))
        if not pipe.poll(120) or pipe.recv() != "go":
            return
        pipe.send(("done", round_trip(socks, time.monotonic() + 60)))
        pipe.poll(60)
    except Exception as e:  # reported to the test
        pipe.send(("error", repr(e)))
    finally:
        for s in socks:
            s.close()


class IdleConnections(unittest.TestCase):
    def setUp(self):
        fu.need_binary(self)
        self.srv, self.helpers = None, []

    def tearDown(self):
        for proc, pipe in self.helpers:
            try:
                pipe.send("close")
            except OSError:
                pass
        for proc, _ in self.helpers:
            proc.join(timeout=20)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
        fu.discard(self.srv)

    def test_10000_idle_keep_alive_connections(self):
        try:
            self.srv = srv = Server("--set", "server.max_connections=%d" % (N + 200),
                                    "--set", "server.idle_timeout_ms=120000",
                                    nofile=N + 1024)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            self.skipTest("cannot start the server with RLIMIT_NOFILE=%d: %s" % (N + 1024, e))
        for _ in range(20):  # warm: first requests, pools, date cache
            self.assertEqual(request(srv, get("/id")).status, 200)
        time.sleep(0.3)
        rss0 = fu.rss_kib(srv.proc.pid)
        ctx = multiprocessing.get_context("fork")
        t0 = time.monotonic()
        for h in range(HELPERS):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=holder, args=(srv.port, N // HELPERS, theirs), daemon=True)
            proc.start()
            self.helpers.append((proc, ours))
        first = 0
        for proc, pipe in self.helpers:
            if not pipe.poll(90):
                self.fail("a helper did not report within 90 s")
            kind, value = pipe.recv()
            if kind == "error":
                if "RLIMIT_NOFILE" in value:
                    self.skipTest(value)
                self.fail("helper: %s" % value)
            first += value
        opened_in = time.monotonic() - t0
        self.assertEqual(first, N, "first requests answered")
        deadline = time.monotonic() + 15
        while metric(srv, "snowflaked_connections_open") != N + 1:
            self.assertLess(time.monotonic(), deadline, "connections_open is %s" %
                            metric(srv, "snowflaked_connections_open"))
            time.sleep(0.1)
        time.sleep(0.5)
        rss1 = fu.rss_kib(srv.proc.pid)
        per_conn = (rss1 - rss0) * 1024 / N
        cpu = fu.cpu_share(srv, 1.0)
        fu.figure("10k idle: connections opened and answered once", "%.1f s" % opened_in)
        fu.figure("10k idle: server RSS", "%d KiB -> %d KiB = %.0f bytes per idle connection "
                  "(bar %d)" % (rss0, rss1, per_conn, BAR_BYTES))
        fu.figure("10k idle: server CPU while holding them", "%.1f%% of one core" % (cpu * 100))
        self.assertLessEqual(per_conn, BAR_BYTES)

        t0 = time.monotonic()
        for _, pipe in self.helpers:
            pipe.send("go")
        second = 0
        for _, pipe in self.helpers:
            self.assertTrue(pipe.poll(90), "a helper did not finish the second round")
            kind, value = pipe.recv()
            self.assertEqual(kind, "done", value)
            second += value
        fu.figure("10k idle: second request on every connection", "%d of %d answered 200 in "
                  "%.1f s" % (second, N, time.monotonic() - t0))
        self.assertEqual(second, N)
        for _, pipe in self.helpers:
            pipe.send("close")
        for proc, _ in self.helpers:
            proc.join(timeout=30)
        srv, self.srv = self.srv, None
        self.assertEqual(fu.stop_expect(srv)[0], 0)


if __name__ == "__main__":
    unittest.main()
