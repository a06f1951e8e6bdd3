#!/usr/bin/env python3
"""The bounded wait for a burst in segment mode (docs/sequences.md, "Bursts wait briefly"): the
share of /seq requests answered 503 under closed-loop load when blocks run dry, without the wait
(sequences.burst_wait_ms=0) and with it, against a block source slowed by
sequences.reserve_delay_ms. One fresh daemon (2 loops) per cell, one namespace with small blocks,
`sfload -c C -t T` on loopback; prints a markdown table.

    python3 loadtest/bench_seq_burst.py [--build build] [-t 3] [-c 8] [--block 1000]

Bounded: 3 delays x 3 waits x T seconds (27 s at the default), loopback only."""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))


def run_cell(build, delay, wait, block, conns, seconds):
    os.environ.setdefault("SNOWFLAKED_BIN", os.path.join(build, "snowflaked"))
    sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
    from sfharness import Server, wait_ready
    ns = json.dumps([{"name": "burst", "block": block}])
    srv = Server("--set", "sequences.namespaces=" + ns,
                 "--set", "sequences.reserve_delay_ms=%d" % delay,
                 "--set", "sequences.burst_wait_ms=%d" % wait,
                 "--set", "sequences.retry_ms=100")
    try:
        wait_ready(srv, timeout=30)
        # Without --tolerate-faults: after a 503 the client reconnects and asks again at once (a
        # closed loop that does not honour Retry-After, the worst case for the server).
        out = subprocess.run([os.path.join(build, "sfload"), "--json",
                              "-c", str(conns), "-t", str(seconds),
                              "http://127.0.0.1:%d/seq/burst" % srv.port],
                             capture_output=True, text=True, timeout=seconds + 60)
        r = json.loads(out.stdout)
    finally:
        srv.stop()
    # sfload ends a connection after an error status (a 503 here) and counts what it had in
    # flight on it as failed: every request that did not get numbers is one the server refused.
    return r["requests"], r["requests"] - r["succeeded"], r["latency_us"]["p99"], \
        r["latency_us"]["max"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-t", "--time", type=int, default=3)
    ap.add_argument("-c", "--conns", type=int, default=8)
    ap.add_argument("--block", type=int, default=1000)
    ap.add_argument("--delays", default="0,50,100")
    ap.add_argument("--waits", default="0,20,50")
    a = ap.parse_args()
    a.time = max(1, min(a.time, 10))
    delays = [int(x) for x in a.delays.split(",")]
    waits = [int(x) for x in a.waits.split(",")]
    print("| reserve delay | " + " | ".join("wait %d ms: 503 share (200/s, p99 ms)" % w
                                           for w in waits) + " |")
    print("|---" * (len(waits) + 1) + "|")
    for d in delays:
        cells = []
        for w in waits:
            req, refused, p99, _ = run_cell(a.build, d, w, a.block, a.conns, a.time)
            cells.append("%.1f %% (%d/s, %.1f)" % (100.0 * refused / max(req, 1),
                                                   (req - refused) // a.time, p99 / 1000.0))
        print("| %d ms | %s |" % (d, " | ".join(cells)), flush=True)


if __name__ == "__main__":
    main()
