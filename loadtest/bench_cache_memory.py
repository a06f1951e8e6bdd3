#!/usr/bin/env python3
"""Memory per item, side by side: N items (32-byte keys, 100-byte values) stored over the
memcached text protocol into snowflaked and into memcached, RSS measured from /proc before and
after. Prints bytes per item for both and their ratio. Loopback only; both servers are started
here and stopped by PID.

    loadtest/bench_cache_memory.py [-n ITEMS] [-b build_dir] [-r ROUNDS]
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import statistics
import tempfile
import time

from benchlib import ROOT, free_port, rss_kib, wait_port




def load(port, n):
    s = socket.create_connection(("127.0.0.1", port))
    value = b"v" * 100
    batch = 500
    for start in range(0, n, batch):
        cmds = b"".join(b"set k%031d 0 0 100 noreply\r\n%s\r\n" % (i, value)
                        for i in range(start, min(n, start + batch)))
        s.sendall(cmds)
    s.sendall(b"version\r\n")  # everything before it has been processed when this answers
    buf = b""
    while b"VERSION" not in buf:
        buf += s.recv(4096)
    s.sendall(b"get k%031d\r\n" % (n - 1))
    buf = b""
    while not buf.endswith(b"END\r\n"):
        buf += s.recv(4096)
    assert b"VALUE" in buf, "the last item is missing"
    s.close()


def measure(name, argv, port, n, env=None, cwd=None):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                         cwd=cwd)
    try:
        wait_port(port)
        time.sleep(0.3)
        before = rss_kib(p.pid)
        t0 = time.time()
        load(port, n)
        secs = time.time() - t0
        time.sleep(0.3)
        after = rss_kib(p.pid)
        per = (after - before) * 1024.0 / n
        print("%-12s RSS %7.1f MiB -> %7.1f MiB: %6.1f bytes/item (load %.1f s)" %
              (name, before / 1024, after / 1024, per, secs))
        return per
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=1000000)
    ap.add_argument("-b", default="build")
    ap.add_argument("-r", type=int, default=1, help="alternating rounds (medians compared)")
    a = ap.parse_args()
    memcached = shutil.which("memcached") or "/usr/bin/memcached"
    if not os.path.exists(memcached):
        subprocess.run(["sh", os.path.join(ROOT, "deploy", "install-deps.sh")], check=True,
                       env=dict(os.environ, SNOWFLAKED_EXTRA_PACKAGES="memcached"))
    print("%d items, 32-byte keys, 100-byte values, memcached protocol, noreply sets" % a.n)
    mem_mb = str(max(64, a.n * 400 // (1 << 20)))
    ours_runs, theirs_runs = [], []
    for _ in range(a.r):
        port = free_port()
        with tempfile.TemporaryDirectory() as d:
            ours_runs.append(measure(
                "snowflaked", [os.path.join(ROOT, a.b, "snowflaked"), "-p", str(free_port()),
                               "-t", "1", "--set", "cache.memcached_port=%d" % port, "--set",
                               "cache.max_memory_bytes=%d" % (int(mem_mb) << 20), "--set",
                               "cache.persist=false"], port, a.n, cwd=d))
        port = free_port()
        theirs_runs.append(measure("memcached", [memcached, "-p", str(port), "-U", "0", "-l",
                                                 "127.0.0.1", "-m", mem_mb, "-t", "1", "-u",
                                                 "nobody"], port, a.n))
    ours, theirs = statistics.median(ours_runs), statistics.median(theirs_runs)
    if a.r > 1:
        print("medians of %d rounds: snowflaked %.1f, memcached %.1f bytes/item" %
              (a.r, ours, theirs))
    print("ratio snowflaked/memcached: %.2f" % (ours / theirs))


if __name__ == "__main__":
    main()
