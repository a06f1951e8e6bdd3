"""Connections that rebalance when the fleet grows (docs/rebalancing.md), proven with haproxy.

haproxy (Debian's 2.6, installed at test time when missing) in `mode tcp` with `balance
roundrobin` stands in for kube-proxy: it picks a backend per connection, never per request. wrk
holds keep-alive connections through it to one snowflaked replica; then a second replica is added
with haproxy's runtime API (`add server` + `enable server` over its admin socket, as kube-proxy
adds a pod that became Ready). Each replica's share of the requests is read every half second
from its own /metrics (snowflaked_http_requests_total{route="/id"}).

With server.max_connection_age_s = 3 each connection is retired within 2.7-3 s of its opening,
wrk reconnects, haproxy alternates: the second replica's share reaches 40-60 % within the cap plus
a few seconds. Without the cap it stays at ~0 % for as long as the connections live.
max_requests_per_connection is raised out of the way in both runs, so that only the age cap can
move a connection. Loopback only, ephemeral ports; each run is bounded (wrk -d)."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fault"))

import faultutil  # noqa: E402
import sfharness  # noqa: E402

PROGRAMS = {"haproxy": "haproxy", "wrk": "wrk"}
CAP = 3          # seconds: server.max_connection_age_s
CONNECTIONS = 16  # wrk's keep-alive connections
SAMPLE = 0.5     # seconds between scrapes
# Seconds of wrk against the first replica alone before the second is added: just after every
# connection's first retirement (2.7-3 s), so they all reconnected to the first replica and the
# second waits for the next one: the least favourable moment, a whole cap to wait.
ADD_AT = CAP + 0.5


def id_requests(server):
    return int(faultutil.labelled(faultutil.metrics_text(server), "snowflaked_http_requests_total",
                                  'route="/id",status="200"') or 0)


class Haproxy:
    def __init__(self, first_port):
        self.dir = tempfile.mkdtemp(prefix="sf_haproxy_")
        self.sock = os.path.join(self.dir, "admin.sock")
        self.port = sfharness.free_port()
        cfg = os.path.join(self.dir, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("global\n"
                    "    stats socket %s level admin\n"
                    "    nbthread 1\n"
                    "    maxconn 1000\n"
                    "defaults\n"
                    "    mode tcp\n"
                    "    timeout connect 2s\n"
                    "    timeout client 60s\n"
                    "    timeout server 60s\n"
                    "listen front\n"
                    "    bind 127.0.0.1:%d\n"
                    "    balance roundrobin\n"
                    "    server a 127.0.0.1:%d\n" % (self.sock, self.port, first_port))
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("haproxy exited:\n" + self.output())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                if os.path.exists(self.sock):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("haproxy did not start:\n" + self.output())

    def output(self):
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read().decode(errors="replace")

    def command(self, line):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(self.sock)
        s.sendall(line.encode() + b"\n")
        s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
        s.close()
        return out.decode(errors="replace")

    def add_server(self, name, port):
        out = self.command("add server front/%s 127.0.0.1:%d" % (name, port))
        if "New server registered" not in out:
            raise RuntimeError("haproxy add server: " + out)
        self.command("enable server front/%s" % name)

    def stop(self):
        faultutil.end_process(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Rebalance(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.reason = faultutil.ensure_programs(PROGRAMS)

    def setUp(self):
        if self.reason:
            self.fail(self.reason)  # CI is root: never a silent skip

    def run_load(self, cap, seconds):
        """[(seconds since the second replica was added, its share of the interval's requests)]
        and the total requests, with server.max_connection_age_s = cap (0 = off)."""
        sets = sfharness.set_args("server.max_connection_age_s=%d" % cap,
                                  "server.max_requests_per_connection=1000000000")
        a = sfharness.Server(*sets, threads=1)
        self.addCleanup(a.stop)
        b = sfharness.Server(*sets, threads=1)
        self.addCleanup(b.stop)
        hp = Haproxy(a.port)
        self.addCleanup(hp.stop)
        wrk = subprocess.Popen(["wrk", "-t1", "-c%d" % CONNECTIONS, "-d%ds" % seconds,
                                "--timeout", "5s", "http://127.0.0.1:%d/id" % hp.port],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.addCleanup(faultutil.end_process, wrk)
        time.sleep(ADD_AT)
        hp.add_server("b", b.port)
        added = time.monotonic()
        last = (id_requests(a), id_requests(b))
        samples = []
        while time.monotonic() - added < seconds - ADD_AT - 1:
            time.sleep(SAMPLE)
            now = (id_requests(a), id_requests(b))
            da, db = now[0] - last[0], now[1] - last[1]
            last = now
            if da + db:
                samples.append((time.monotonic() - added, db / (da + db)))
        out, _ = wrk.communicate(timeout=seconds + 30)
        out = out.decode(errors="replace")
        self.assertEqual(wrk.returncode, 0, out)
        self.assertNotRegex(out, r"Non-2xx", out)
        total = last[0] + last[1]
        self.assertGreater(total, 1000, out)
        return samples, total, out

    def test_second_replica_gets_half_within_the_cap(self):
        samples, total, out = self.run_load(CAP, 16)
        reached = next((t for t, share in samples if 0.40 <= share <= 0.60), None)
        tail = [share for t, share in samples if reached is not None and t >= reached + 1]
        print("\nwith max_connection_age_s=%d: the second replica's share per %.1f s after it "
              "was added: %s; 40-60 %% reached after %s s; %d requests"
              % (CAP, SAMPLE, " ".join("%.0f%%" % (100 * s) for _, s in samples),
                 "%.1f" % reached if reached is not None else "never", total), file=sys.stderr)
        faultutil.figure("rebalance_40_60_percent_s (haproxy roundrobin, age cap %d s)" % CAP,
                         "%.1f" % reached if reached is not None else "never")
        self.assertIsNotNone(reached, samples)
        self.assertLessEqual(reached, CAP + 3, samples)
        # and it stays balanced once there
        self.assertTrue(tail, samples)
        self.assertGreater(sum(tail) / len(tail), 0.30, samples)
        self.assertLess(sum(tail) / len(tail), 0.70, samples)
        self.assertNotIn("Socket errors: connect", out)

    def test_without_the_cap_the_second_replica_stays_idle(self):
        samples, total, _ = self.run_load(0, 12)
        print("\nwithout the cap: the second replica's share per %.1f s after it was added: %s; "
              "%d requests" % (SAMPLE, " ".join("%.0f%%" % (100 * s) for _, s in samples), total),
              file=sys.stderr)
        self.assertTrue(samples)
        self.assertLess(max(s for _, s in samples), 0.02, samples)


if __name__ == "__main__":
    unittest.main()
