#!/usr/bin/env python3
"""The memcached protocol with and without eviction, two snowflaked builds side by side (before and
after a change to the store), with 1 and 2 server threads.

    python3 loadtest/bench_evict.py -a OLD_BUILD_DIR -b NEW_BUILD_DIR [-r 3] [-t 4] [-w REGEX]
        [-T 1,2]

Rows: a 90:10 get:set mix on 10,000 keys that fit (no eviction); sets only on 1,000,000 keys of
1,000 bytes into 16 MiB (nearly every set evicts); the 90:10 mix on those (gets mostly miss,
the sets evict). Each round runs every row against A, then B (alternating, so both share the
machine's noise); 1 server thread is pinned to core 0 and sfload (B's) to core 1, 2 server
threads and sfload are not pinned. Prints medians of requests per second and server CPU-us per
request (sfload --server-pid: utime+stime of the server over the run) and their B/A ratios. On a
shared machine the CPU per request is the figure to trust. Figures, not a test.
"""
import argparse
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

FIT = ["--mode", "memcache", "-c", "50", "--keys", "10000", "--value-size", "100"]
EVICTING = ["--mode", "memcache", "-c", "50", "--keys", "1000000", "--value-size", "1000"]
SMALL = ["cache.max_memory_bytes=16777216"]
ROWS = [
    ("90:10 get:set, 10k keys fit", FIT + ["--mc-ratio", "90:10"], []),
    ("sets, 1M keys x 1 KB in 16 MiB", EVICTING + ["--mc-ratio", "0:100"], SMALL),
    ("90:10, 1M keys x 1 KB in 16 MiB", EVICTING + ["--mc-ratio", "90:10"], SMALL),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-a", required=True, help="build directory A (before)")
    ap.add_argument("-b", required=True, help="build directory B (after); its sfload is used")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-t", "--time", type=int, default=4, help="seconds per run")
    ap.add_argument("-w", "--workloads", default="", help="only rows whose name matches")
    ap.add_argument("-T", "--threads", default="1,2", help="server thread counts")
    args = ap.parse_args()
    bench.raise_nofile()
    b = bench.Bench(argparse.Namespace(build=args.b, time=args.time, repeat=args.rounds))
    builds = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    print("A = %s\nB = %s\n%d rounds of %d s, alternating; medians" % (
        builds["A"], builds["B"], args.rounds, args.time))
    print("%-34s %2s | %9s %9s %6s | %7s %7s %6s" % (
        "workload", "T", "A req/s", "B req/s", "B/A", "A us", "B us", "B/A"))
    try:
        for threads in [int(t) for t in args.threads.split(",")]:
            for name, sfargs, extra in [r for r in ROWS if re.search(args.workloads, r[0])]:
                runs = {"A": [], "B": []}
                for _ in range(args.rounds):
                    for who in ("A", "B"):
                        srv = b.ours(threads=threads, cpu=0 if threads == 1 else None,
                                     extra=extra, build=builds[who])
                        try:
                            target = "127.0.0.1:%d" % srv["memcache"]
                            rep = b.load(srv, sfargs, target, cpu=1 if threads == 1 else None)
                            runs[who].append(bench.figures(rep))
                        finally:
                            b.stop(srv["proc"])
                a = [statistics.median(r[i] for r in runs["A"]) for i in (0, 2)]
                n = [statistics.median(r[i] for r in runs["B"]) for i in (0, 2)]
                print("%-34s %2d | %9.0f %9.0f %6s | %7.2f %7.2f %6s" % (
                    name, threads, a[0], n[0], bench.ratio(n[0], a[0]), a[1], n[1],
                    bench.ratio(n[1], a[1])), flush=True)
    finally:
        b.stop_all()
    print("commands (last round):")
    for c in b.commands[-2:]:
        print("  " + c)


if __name__ == "__main__":
    main()
