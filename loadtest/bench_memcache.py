#!/usr/bin/env python3
"""memcached protocol throughput, side by side: memcslap (libmemcached-tools) set and get runs
against snowflaked's memcached listener and against memcached, alternating, same client, same
machine. Prints ops/s and server CPU-µs per operation (utime+stime from /proc) and the hit ratio
of the gets. By default both servers run 1 thread on core 0 and memcslap runs on core 1 (on 2
cores, unpinned runs mostly measure how the scheduler shares them). Loopback only.

    loadtest/bench_memcache.py [-e EXECUTE_NUMBER] [-c CONCURRENCY] [-r ROUNDS] [-t THREADS]
                               [--no-pin]
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, free_port, wait_port





def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])




CLIENT_PIN = []  # taskset for memcslap, set in main


def server_stats(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return {f[1]: f[2] for f in (ln.split(" ") for ln in buf.decode().split("\r\n"))
            if len(f) == 3 and f[0] == "STAT"}


def slap(port, test, execute, conc, pid):
    """One memcslap run: (operations of the test per second of its phase, server CPU-us per
    request of the whole run, hit ratio of its gets). memcslap's "Time to get N keys" counts
    the hits, not the gets, so the counts come from the server's own stats; memcslap -t get
    first loads its keys with sets, and that CPU is spread over all requests."""
    before, st0 = cpu_ticks(pid), server_stats(port)
    t0 = time.time()
    r = subprocess.run(CLIENT_PIN + ["memcslap", "-s", "127.0.0.1:%d" % port, "-c", str(conc), "-e",
                        str(execute), "-t", test], capture_output=True, text=True, timeout=300)
    secs = time.time() - t0
    ticks = cpu_ticks(pid) - before
    if r.returncode != 0:
        sys.exit("memcslap failed: " + r.stdout + r.stderr)
    st1 = server_stats(port)
    delta = {k: int(st1[k]) - int(st0[k]) for k in ("cmd_get", "cmd_set", "get_hits")}
    m = re.search(r"Time to %s\s+\d+ keys(?: by\s+\d+ threads)?:\s+([\d.]+) seconds" % test,
                  r.stdout)
    took = float(m.group(1)) if m else secs
    ops = delta["cmd_get"] if test == "get" else delta["cmd_set"]
    requests = delta["cmd_get"] + delta["cmd_set"]
    hits = delta["get_hits"] / delta["cmd_get"] if delta["cmd_get"] else 0.0
    return ops / took, ticks * 1e6 / os.sysconf("SC_CLK_TCK") / max(requests, 1), hits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-e", type=int, default=50000, help="operations per memcslap thread")
    ap.add_argument("-c", type=int, default=4, help="memcslap threads")
    ap.add_argument("-r", type=int, default=3, help="alternating rounds (median shown)")
    ap.add_argument("-t", type=int, default=1, help="server threads, both servers")
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin the servers to core 0 and memcslap to core 1")
    ap.add_argument("-b", default="build")
    a = ap.parse_args()
    if not shutil.which("memcslap") or not shutil.which("memcached"):
        subprocess.run(["sh", os.path.join(ROOT, "deploy", "install-deps.sh")], check=True,
                       env=dict(os.environ, SNOWFLAKED_EXTRA_PACKAGES="memcached"))
    ours_port, theirs_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as d:
        server_pin = [] if a.no_pin or os.cpu_count() < 2 else ["taskset", "-c", "0"]
        if server_pin:
            CLIENT_PIN[:] = ["taskset", "-c", "1"]
        ours = subprocess.Popen(server_pin + [os.path.join(ROOT, a.b, "snowflaked"), "-p", str(free_port()),
                                 "-t", str(a.t), "--set", "cache.memcached_port=%d" % ours_port,
                                 "--set", "cache.persist=false"], cwd=d,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        theirs = subprocess.Popen(server_pin + ["memcached", "-p", str(theirs_port), "-U", "0", "-l",
                                   "127.0.0.1", "-m", "64", "-t", str(a.t), "-u", "nobody"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(ours_port)
            wait_port(theirs_port)
            print("memcslap -c %d -e %d (set, then get), %d server threads each, %d rounds%s" %
                  (a.c, a.e, a.t, a.r,
                   ", servers on core 0, memcslap on core 1" if server_pin else ""))
            res = {}
            for test in ("set", "get"):
                for _ in range(a.r):
                    for name, port, p in (("ours", ours_port, ours),
                                          ("memcached", theirs_port, theirs)):
                        res.setdefault((test, name), []).append(slap(port, test, a.e, a.c,
                                                                     p.pid))
            print("%-5s | %12s %12s %6s | %9s %9s %6s | %8s %8s" % (
                "op", "ours ops/s", "mc ops/s", "ratio", "ours us", "mc us", "ratio",
                "ours hit", "mc hit"))
            for test in ("set", "get"):
                o = sorted(res[(test, "ours")])[a.r // 2]
                m = sorted(res[(test, "memcached")])[a.r // 2]
                hit = ("%7.1f%% %7.1f%%" % (o[2] * 100, m[2] * 100)) if test == "get" else ""
                print("%-5s | %12.0f %12.0f %6.2f | %9.2f %9.2f %6.2f | %s" %
                      (test, o[0], m[0], o[0] / m[0], o[1], m[1], o[1] / m[1], hit))
            print("(median by ops/s; ops/s: the test's requests over its phase's time, as the "
                  "servers count them; us = server CPU microseconds per request of the whole run, "
                  "memcslap's key loading included; hit: get hits / gets, both 64 MiB)")
        finally:
            for p in (ours, theirs):
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    main()
