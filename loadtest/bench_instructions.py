#!/usr/bin/env python3
"""Instructions per request of snowflaked builds, counted by valgrind's callgrind: repeatable
whatever else the machine does, so a change to a hot path can be compared without timing noise.

    python3 loadtest/bench_instructions.py BUILD_DIR [BUILD_DIR ...] [-t 3] [-w REGEX]

For each build and workload (GET /id keep-alive, GET /id one request per connection, GET /uuid
and /ulid keep-alive, GET /seq/{name} keep-alive (segment mode), memcached get of an ID key and
of a sequence key, memcached get/set, memcached sets that evict, TCP echo; -w picks workloads by
name): the daemon runs under callgrind with instrumentation off; after a warm-up,
it is switched on (callgrind_control -i on) for a run of sfload (from the first build
directory), then off; the instructions counted (all threads) divided by the requests sfload
completed. One server thread; figures, not a test.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, wait_port  # noqa: E402

WORKLOADS = [
    ("GET /id keep-alive -c 8", "http", ["-c", "8"], "/id"),
    ("GET /id conn-per-request -c 8", "http", ["-c", "8", "--close"], "/id"),
    ("GET /uuid keep-alive -c 8", "http", ["-c", "8"], "/uuid"),
    ("GET /ulid keep-alive -c 8", "http", ["-c", "8"], "/ulid"),
    # segment mode: a block of 10^7, so no block is reserved while counting
    ("GET /seq/bench keep-alive -c 8", "http", ["-c", "8"], "/seq/bench",
     {"SNOWFLAKED_SEQUENCES_NAMESPACES": '[{"name":"bench","block":10000000}]'}),
    # IDs and sequence numbers over the memcached protocol (cache.memcached_id_keys)
    ("memcached get id -c 8", "memcache", ["--mode", "memcache", "-c", "8", "--mc-id-key", "id"],
     None, {"SNOWFLAKED_CACHE_MEMCACHED_ID_KEYS_SNOWFLAKE": "id"}),
    ("memcached get seq:bench -c 8", "memcache",
     ["--mode", "memcache", "-c", "8", "--mc-id-key", "seq:bench"], None,
     {"SNOWFLAKED_CACHE_MEMCACHED_ID_KEYS_SEQUENCE": "seq",
      "SNOWFLAKED_SEQUENCES_NAMESPACES": '[{"name":"bench","block":10000000}]'}),
    ("memcached 90:10 get:set -c 8", "memcache",
     ["--mode", "memcache", "-c", "8", "--keys", "1000", "--value-size", "100"], None),
    ("TCP echo 32 B -c 8", "echo", ["--mode", "echo", "-c", "8", "--msg-size", "32"], None),
    # 1M keys of 1 KB into 2 MiB: full within the warm-up, then nearly every set evicts.
    ("memcached sets evicting -c 8", "memcache",
     ["--mode", "memcache", "-c", "8", "--keys", "1000000", "--value-size", "1000",
      "--mc-ratio", "0:100"], None, {"SNOWFLAKED_CACHE_MAX_MEMORY_BYTES": "2097152"}),
]


def control(pid, *args):
    subprocess.run(["callgrind_control"] + list(args) + [str(pid)], check=True,
                   capture_output=True, timeout=60)


def instructions(out_dir):
    total = 0
    for path in glob.glob(os.path.join(out_dir, "callgrind.out*")):
        with open(path) as f:
            for line in f:
                if line.startswith("totals:"):
                    total += int(line.split()[1])
    return total


def measure(build, sfload, name, kind, args, path, seconds, work, settings):
    ports = {"http": free_port(), "memcache": free_port(), "echo": free_port()}
    data = tempfile.mkdtemp(dir=work)
    out = tempfile.mkdtemp(dir=work)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
    env.update({"SNOWFLAKED_DATA_DIR": data, "SNOWFLAKED_SERVER_PORT": str(ports["http"]),
                "SNOWFLAKED_SERVER_THREADS": "1",
                "SNOWFLAKED_CACHE_MEMCACHED_PORT": str(ports["memcache"]),
                "SNOWFLAKED_ECHO_TCP_PORT": str(ports["echo"]),
                "SNOWFLAKED_CACHE_PERSIST": "false", "SNOWFLAKED_LOG_LEVEL": "warn"})
    env.update(settings)
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            "--callgrind-out-file=%s/callgrind.out.%%p" % out,
            os.path.join(build, "snowflaked")]
    p = subprocess.Popen(argv, env=env, cwd=work, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        for _ in range(10):  # valgrind starts slowly
            try:
                wait_port(ports[kind])
                break
            except SystemExit:
                continue
        target = ("http://127.0.0.1:%d%s" % (ports["http"], path) if path
                  else "127.0.0.1:%d" % ports[kind])
        load = [sfload, "--json", "-q", "-t", str(seconds)] + args + [target]
        subprocess.run(load[:4] + ["1"] + load[5:], capture_output=True, timeout=120)  # warm-up
        control(p.pid, "-i", "on")
        r = subprocess.run(load, capture_output=True, text=True, timeout=seconds + 120)
        control(p.pid, "-i", "off")
        control(p.pid, "-d")  # the counts of the instrumented run, in a file of their own
        report = json.loads(r.stdout)
        requests = report["requests"]
    finally:
        p.terminate()
        p.wait(timeout=60)
    return instructions(out), requests


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+")
    ap.add_argument("-t", "--time", type=int, default=3, help="seconds of collected load")
    ap.add_argument("-w", "--workloads", default="", help="only workloads whose name matches")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed")
    builds = [os.path.abspath(b) for b in args.builds]
    sfload = os.path.join(builds[0], "sfload")
    work = tempfile.mkdtemp(prefix="sf_instr_")
    print("%-32s %s" % ("instructions per request", " ".join("%14s" % os.path.basename(
        os.path.dirname(b)) for b in builds)))
    try:
        for name, kind, wargs, path, *settings in WORKLOADS:
            if not re.search(args.workloads, name):
                continue
            cells = []
            for b in builds:
                ir, n = measure(b, sfload, name, kind, wargs, path, args.time, work,
                                settings[0] if settings else {})
                cells.append("%14s" % ("%.0f (%d)" % (ir / n, n) if n else "-"))
            print("%-32s %s" % (name, " ".join(cells)), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
