#!/usr/bin/env python3
"""System calls per new TLS connection: snowflaked's TLS listener beside nginx's, same certificate
(EC P-256, made here), same suite, same client. Each server is started as bench.py's tls section
starts it (one loop / one worker), warmed up, then `strace -f -c -p PID` counts every system call
of the process while sfload makes N connections with one request each (HTTP/1.0 GET /id, full
TLS 1.3 handshake, the server closes). The table is calls per connection by type; the
denominator is the successful accept4 calls strace saw, so it is exact for both servers.

    loadtest/strace_tls.py                    # -n 400, -c 1 and -c 32
    loadtest/strace_tls.py -b build -n 1000 -c 1 --only ours
    loadtest/strace_tls.py --keep-alive -n 20000 -c 32   # per request on open connections

-c 1 is one connection at a time (every accept is its own wake-up: the worst case for an
accept loop that tries again until EAGAIN); -c 32 keeps 32 in flight, as bench.py's rows do.
strace slows both servers alike; the counts, not the times, are the figure. Loopback only;
every process started here is stopped by PID.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from benchlib import make_certs  # noqa: E402

SUITE = bench.TLS_SUITE


def parse_summary(text):
    """strace -c's table -> {syscall: (calls, errors)}."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(\d*)\s+(\w+)\s*$", line)
        if m and m.group(3) != "total":
            out[m.group(3)] = (int(m.group(1)), int(m.group(2) or 0))
    return out


def count(b, srv, certs, n, conns, keep_alive):
    target = "https://localhost:%d/id" % srv["https"]
    load = [b.sfload, "-q", "--cacert", certs["ca.pem"], "--tls-version", "1.3",
            "--ciphersuites", SUITE, "-c", str(conns)] + ([] if keep_alive else ["--close"])
    subprocess.run(load + ["-n", "50", target], check=True, capture_output=True, timeout=120)
    log = os.path.join(b.work, "strace-%d.txt" % srv["pid"])
    st = subprocess.Popen(["strace", "-f", "-c", "-o", log, "-p", str(srv["pid"])],
                          stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # strace attaches to every thread before the first connection
    r = subprocess.run(load + ["-n", str(n), target], capture_output=True, text=True,
                       timeout=600)
    time.sleep(0.5)  # the last close reaches the server
    st.send_signal(signal.SIGINT)
    st.wait(timeout=30)
    if r.returncode != 0:
        sys.exit("sfload failed: %s" % r.stderr[-500:])
    with open(log) as f:
        calls = parse_summary(f.read())
    if keep_alive:  # sfload's -n: requests, the connections' handshakes included
        return n, calls
    acc = calls.get("accept4", (0, 0)) if "accept4" in calls else calls.get("accept", (0, 0))
    return acc[0] - acc[1], calls


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", "--build", default="build")
    ap.add_argument("-n", type=int, default=400, help="connections measured (default 400)")
    ap.add_argument("-c", default="1,32", help="concurrencies, comma-separated (default 1,32)")
    ap.add_argument("--only", default="ours,nginx")
    ap.add_argument("--keep-alive", action="store_true",
                    help="-n requests on -c open connections; per request, not per connection")
    args = ap.parse_args()
    b = bench.Bench(argparse.Namespace(build=args.build, quick=True, repeat=1, time=1,
                                       no_install=True))
    certs = make_certs(os.path.join(b.work, "certs"))
    who = args.only.split(",")
    results = {}
    try:
        for c in (int(x) for x in args.c.split(",")):
            for name in who:
                srv = b.ours_tls(certs) if name == "ours" else b.nginx_tls(certs)
                if srv is None:
                    sys.exit("ours: %s" % b.ours_tls_missing)
                try:
                    results[(name, c)] = count(b, srv, certs, args.n, c, args.keep_alive)
                finally:
                    b.stop(srv["proc"])
    finally:
        b.stop_all()
    names = sorted({k for _, calls in results.values() for k in calls})
    cols = [(name, c) for c in (int(x) for x in args.c.split(",")) for name in who]
    print("system calls per %s (strace -f -c; errors in parentheses)" % (
        "request" if args.keep_alive else "connection"))
    print("%-16s" % "syscall" + "".join("%16s" % ("%s -c %d" % k) for k in cols))
    for s in names:
        row = ""
        for k in cols:
            acc, calls = results[k]
            v, e = calls.get(s, (0, 0))
            row += "%16s" % ("%.2f" % (v / acc) + (" (%.2f)" % (e / acc) if e else "")
                             if v else "-")
        if row.strip(" -"):
            print("%-16s" % s + row)
    print("%-16s" % "total" + "".join(
        "%16.2f" % (sum(v for v, _ in results[k][1].values()) / results[k][0]) for k in cols))
    print("%-16s" % ("requests" if args.keep_alive else "connections") + "".join("%16d" % results[k][0] for k in cols))


if __name__ == "__main__":
    main()
