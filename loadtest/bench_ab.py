#!/usr/bin/env python3
"""Two snowflaked builds side by side on the rows of `make bench` (loadtest/bench.py's peers
section): before and after a change, in one sitting, on the same machine and client.

    python3 loadtest/bench_ab.py -a OLD_BUILD_DIR -b NEW_BUILD_DIR [-r 5] [-t 5]

Each round runs every row against A, then B (alternating, one server thread on core 0, sfload
from B's build directory on core 1), so the two share the machine's noise; prints the median of
the rounds and B/A ratios of requests per second, p99 latency and server CPU-us per request
(sfload --server-pid: utime+stime of the server over the run). Figures, not a test.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-a", required=True, help="build directory A (before)")
    ap.add_argument("-b", required=True, help="build directory B (after); its sfload is used")
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("-t", "--time", type=int, default=5, help="seconds per run")
    args = ap.parse_args()
    bench.raise_nofile()
    b = bench.Bench(argparse.Namespace(build=args.b, time=args.time, repeat=args.rounds))
    builds = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    rows = [(name, "http", sfargs, path) for name, sfargs, path in bench.http_rows(b)]
    rows += [(name, kind, sfargs, None) for name, kind, _, sfargs in bench.other_rows(b)]
    print("A = %s\nB = %s\n%d rounds of %d s, alternating; medians" % (
        builds["A"], builds["B"], args.rounds, args.time))
    print("%-34s %9s %9s %6s | %7s %7s %6s | %6s %6s %6s" % (
        "workload", "A req/s", "B req/s", "B/A", "A p99", "B p99", "B/A", "A us", "B us", "B/A"))
    try:
        for name, kind, sfargs, path in rows:
            runs = {"A": [], "B": []}
            for _ in range(args.rounds):
                for who in ("A", "B"):
                    srv = b.ours(build=builds[who])
                    try:
                        target = ("http://127.0.0.1:%d%s" % (srv["http"], path) if path
                                  else "127.0.0.1:%d" % srv[kind])
                        runs[who].append(bench.figures(b.load(srv, sfargs, target)))
                    finally:
                        b.stop(srv["proc"])
            a = [statistics.median(r[i] for r in runs["A"]) for i in range(3)]
            n = [statistics.median(r[i] for r in runs["B"]) for i in range(3)]
            print("%-34s %9.0f %9.0f %6s | %7.0f %7.0f %6s | %6.2f %6.2f %6s" % (
                name, a[0], n[0], bench.ratio(n[0], a[0]), a[1], n[1], bench.ratio(n[1], a[1]),
                a[2], n[2], bench.ratio(n[2], a[2])), flush=True)
    finally:
        b.stop_all()


if __name__ == "__main__":
    main()
