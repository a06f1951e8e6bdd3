#!/usr/bin/env python3
"""Connection per request (ab without -k, HTTP/1.0): snowflaked builds vs nginx `return 200`.

    python3 loadtest/bench_conn.py [-n 20000] [-c 100] [-r 3] [--pin]
        [--ours LABEL=BUILD_DIR ...] [--set KEY=VALUE ...] [--threads]

Every server is started once (loopback, ephemeral port, one loop thread / one nginx worker with
loadtest/nginx.conf.in, which listens `deferred` like our default tcp_defer_accept_s; with
--nginx-no-defer also without it) and warmed up; then each round runs ab once against each server in turn
(alternating), so the servers share the same noise. Server CPU per request is utime+stime of the
server processes from /proc (summed over threads; nginx: master + worker), before/after each run,
and also sum_exec_runtime from /proc/PID/task/*/schedstat (ns, finer than the 100 Hz ticks).
Prints per run and the median of the rounds, with ratios against nginx. Every run is bounded in
count (-n) and time (timeout); every process started is stopped by PID.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, free_port, wait_port  # noqa: E402

TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def raise_nofile():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def proc_ticks(pid):
    """utime, stime (ticks) of a whole process (all its threads, also exited ones)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]), int(fields[12])
    except OSError:
        return 0, 0


def threads(pid):
    """{tid: (name, runtime_ns, utime, stime)} of every live thread."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tids:
        try:
            base = "/proc/%d/task/%s/" % (pid, t)
            with open(base + "comm") as f:
                name = f.read().strip()
            with open(base + "schedstat") as f:
                ns = int(f.read().split()[0])
            with open(base + "stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(t)] = (name, ns, int(fields[11]), int(fields[12]))
        except OSError:
            pass
    return out


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


class Server:
    def __init__(self, label, argv, port, cpu, cwd, env=None):
        self.label, self.port = label, port
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu)] + argv
        self.argv = argv
        log = open(os.path.join(cwd, "%s.log" % label), "wb")
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     preexec_fn=raise_nofile)
        wait_port(port)
        time.sleep(0.2)

    def pids(self):
        return [self.proc.pid] + children(self.proc.pid)

    def snapshot(self):
        ut = st = 0
        per = {}
        for p in self.pids():
            u, s = proc_ticks(p)
            ut, st = ut + u, st + s
            for tid, v in threads(p).items():
                per[(p, tid)] = v
        return ut, st, per

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_ab(port, n, c, cpu, timeout):
    argv = ["ab", "-q", "-r", "-n", str(n), "-c", str(c), "http://127.0.0.1:%d/id" % port]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu)] + argv
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       preexec_fn=raise_nofile)
    res = {"complete": 0, "failed": 0, "non2xx": 0, "rps": 0.0}
    for line in r.stdout.splitlines():
        if line.startswith("Complete requests:"):
            res["complete"] = int(line.split()[2])
        elif line.startswith("Failed requests:"):
            res["failed"] = int(line.split()[2])
        elif line.startswith("Non-2xx responses:"):
            res["non2xx"] = int(line.split()[2])
        elif line.startswith("Requests per second:"):
            res["rps"] = float(line.split()[3])
    if not res["complete"]:
        sys.exit("ab failed: %s %s" % (r.stdout[-400:], r.stderr[-400:]))
    return res


SYSCALLS = ("accept4", "read", "recvfrom", "write", "writev", "sendto", "close", "shutdown",
            "epoll_wait", "epoll_pwait", "epoll_ctl", "ioctl", "setsockopt", "getsockopt", "futex")


def perf_syscalls(pids):
    ev = ",".join("syscalls:sys_enter_" + s for s in SYSCALLS) + ",raw_syscalls:sys_enter"
    out = tempfile.mktemp(prefix="perfstat.")
    p = subprocess.Popen(["perf", "stat", "-x", ",", "-o", out, "-e", ev, "-p",
                          ",".join(str(x) for x in pids)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return p, out


def perf_syscalls_done(p, out, n):
    p.send_signal(signal.SIGINT)
    p.wait(timeout=10)
    counts = {}
    with open(out) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) > 2 and parts[0].replace(".", "").isdigit():
                name = parts[2].split(":")[-1].replace("sys_enter_", "")
                counts[name] = int(float(parts[0])) / n
    os.unlink(out)
    return counts


def measure(srv, args):
    if args.syscalls:
        pp, pout = perf_syscalls(srv.pids())
    import resource
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    u0, s0, t0 = srv.snapshot()
    ab = run_ab(srv.port, args.n, args.c, args.client_cpu, args.timeout)
    u1, s1, t1 = srv.snapshot()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) * 1e6 / ab["complete"]
    sc = perf_syscalls_done(pp, pout, ab["complete"]) if args.syscalls else {}
    n = ab["complete"]
    per_thread = {}
    for k, v in t1.items():
        b = t0.get(k, (v[0], 0, 0, 0))
        name = "%s/%d" % (v[0], k[1])
        d = per_thread.setdefault(name, [0, 0])
        d[0] += (v[1] - b[1]) / 1e3 / n  # schedstat us/req
        d[1] += ((v[2] - b[2]) + (v[3] - b[3])) * TICK_US / n
    sched = sum(v[0] for v in per_thread.values())
    return {"rps": ab["rps"], "n": n, "failed": ab["failed"], "non2xx": ab["non2xx"],
            "cpu": ((u1 - u0) + (s1 - s0)) * TICK_US / n,
            "usr": (u1 - u0) * TICK_US / n, "sys": (s1 - s0) * TICK_US / n,
            "sched": sched, "client": client, "threads": per_thread, "syscalls": sc}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("-c", type=int, default=100)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--ours", action="append", default=[],
                    help="LABEL=BUILD_DIR[;key=value...] (repeatable; default ours=build)")
    ap.add_argument("--set", action="append", default=[], help="--set KEY=VALUE for every ours")
    ap.add_argument("--pin", action="store_true", help="servers on core 0, ab on core 1")
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--nginx-no-defer", action="store_true",
                    help="also nginx without `deferred` (no TCP_DEFER_ACCEPT), as nginx_nodef")
    ap.add_argument("--threads", action="store_true", help="print per-thread CPU")
    ap.add_argument("--syscalls", action="store_true",
                    help="count syscalls per request with perf stat tracepoints")
    ap.add_argument("--perf-record", metavar="DIR",
                    help="first record one run per server with perf record -g into DIR")
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    args.server_cpu = 0 if args.pin else None
    args.client_cpu = 1 if args.pin else None
    ours = [o.split("=", 1) for o in args.ours] or [["ours", "build"]]

    work = tempfile.mkdtemp(prefix="bench_conn.")
    servers = []
    try:
        for label, spec in ours:
            build, *sets = spec.split(";")
            port = free_port()
            data = tempfile.mkdtemp(dir=work)
            argv = [os.path.join(ROOT, build, "snowflaked"), "-p", str(port), "-t", "1",
                    "--set", "server.max_connections=20000", "--set", "data_dir=" + data,
                    "--set", "cache.persist=false", "--set", "cache.memcached_port=0",
                    "--set", "echo.tcp_port=0"]
            for kv in args.set + sets:
                argv += ["--set", kv]
            servers.append(Server(label, argv, port, args.server_cpu, work))
        for label, deferred in (("nginx", True), ("nginx_nodef", False)):
            if args.no_nginx or (not deferred and not args.nginx_no_defer):
                continue
            port = free_port()
            d = tempfile.mkdtemp(dir=work)
            with open(os.path.join(ROOT, "loadtest", "nginx.conf.in")) as f:
                conf = f.read().replace("@WORKERS@", "1").replace("@DIR@", d) \
                    .replace("@PORT@", str(port))
            if not deferred:
                conf = conf.replace(" deferred;", ";")
            with open(os.path.join(d, "nginx.conf"), "w") as f:
                f.write(conf)
            servers.append(Server(label, ["nginx", "-c", os.path.join(d, "nginx.conf"), "-p",
                                             d], port, args.server_cpu, work))
        for s in servers:  # warm-up: pools, page faults, TIME_WAIT steady state
            run_ab(s.port, max(2000, args.n // 5), args.c, args.client_cpu, args.timeout)
        if args.perf_record:
            for s in servers:
                out = os.path.join(args.perf_record, s.label + ".data")
                pr = subprocess.Popen(["perf", "record", "-q", "-g", "-F", "4999", "-o", out,
                                       "-p", ",".join(str(x) for x in s.pids())],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
                run_ab(s.port, args.n, args.c, args.client_cpu, args.timeout)
                pr.send_signal(signal.SIGINT)
                pr.wait(timeout=60)
                print("perf data: " + out, flush=True)
        res = {s.label: [] for s in servers}
        for rnd in range(args.rounds):
            order = servers if rnd % 2 == 0 else list(reversed(servers))
            for s in order:
                m = measure(s, args)
                res[s.label].append(m)
                print("round %d %-10s %8.0f req/s  cpu %6.2f us/req (usr %5.2f sys %5.2f)  "
                      "sched %6.2f us/req  ab %6.2f us/req  failed=%d non2xx=%d" %
                      (rnd + 1, s.label, m["rps"], m["cpu"], m["usr"], m["sys"], m["sched"],
                       m["client"],
                       m["failed"], m["non2xx"]), flush=True)
                if m["syscalls"]:
                    print("      syscalls/req: " + " ".join(
                        "%s=%.3f" % (k, v) for k, v in m["syscalls"].items() if v >= 0.0005))
                if args.threads:
                    for name, (sch, tk) in sorted(m["threads"].items(), key=lambda x: -x[1][0]):
                        if sch > 0.005 or tk > 0:
                            print("      %-16s sched %6.3f us/req  ticks %6.3f us/req" %
                                  (name, sch, tk))
        med = {}
        print("\nmedian of %d (ab -n %d -c %d, HTTP/1.0, no keep-alive%s):" %
              (args.rounds, args.n, args.c, ", pinned" if args.pin else ""))
        for s in servers:
            runs = res[s.label]
            med[s.label] = {k: statistics.median(r[k] for r in runs)
                            for k in ("rps", "cpu", "usr", "sys", "sched", "client")}
        ref = med.get("nginx")
        for s in servers:
            m = med[s.label]
            extra = ""
            if ref and s.label != "nginx":
                extra = "  ratio vs nginx: rps %.3f cpu %.3f sched %.3f" % (
                    m["rps"] / ref["rps"], m["cpu"] / ref["cpu"], m["sched"] / ref["sched"])
            print("%-10s %8.0f req/s  cpu %6.2f us/req (usr %5.2f sys %5.2f)  sched %6.2f  "
                  "ab %6.2f%s" % (s.label, m["rps"], m["cpu"], m["usr"], m["sys"], m["sched"],
                                  m["client"], extra))
        if ref:
            print("median of the per-round ratios vs nginx (each round's runs are adjacent):")
            for s in servers:
                if s.label == "nginx":
                    continue
                pr = [(a["rps"] / b["rps"], a["cpu"] / b["cpu"], a["sched"] / b["sched"])
                      for a, b in zip(res[s.label], res["nginx"])]
                print("%-10s rps %.3f cpu %.3f sched %.3f   (sched ratios: %s)" % (
                    s.label, statistics.median(x[0] for x in pr),
                    statistics.median(x[1] for x in pr), statistics.median(x[2] for x in pr),
                    " ".join("%.2f" % x[2] for x in pr)))
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
