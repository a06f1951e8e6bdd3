#!/usr/bin/env python3
"""Multi-replica proof without a cluster: three snowflaked instances started the way the
StatefulSet starts them (POD_NAME/HOSTNAME snowflaked-0..2, the container's config.json, worker id
from the ordinal, each in its own network namespace with its own address on a private bridge),
loaded at once with /ids from the root namespace by sfload, must issue IDs whose union has no
duplicate, with worker ids 0, 1 and 2. A real Prometheus scrapes them all along; while sfload loads
them at a fixed rate for 12 s, and after it, its HTTP API must show every target up and ready, the
ID rate sfload measured, sane latency quantiles, counters adding up to every ID issued, and (with
deploy/monitoring/snowflaked.rules.yml) healthy rules and no alert (prometheus_scrape.py). A
fourth instance with a duplicate ordinal (snowflake.peers finds the owner) or an ordinal beyond
worker_bits must refuse to start.

Needs root (ip netns) and iproute2; creates only namespaces, a bridge and veth pairs of its own
(10.77.0.0/24), and removes them, and every process it started, on exit.

    deploy/test_replicas.py [-b build_dir] [-n requests_per_replica]
"""
import argparse
import array
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from prometheus_scrape import (MonitoredLoad, Prometheus, ScrapeChecks, QUERY_AT_S,
                               ids_issued_before)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CONFIG = os.path.join(ROOT, "deploy/container/config.json")
SUBNET = "10.77.0"
TAG = "sf%d" % (os.getpid() % 100000)  # interface and namespace names stay short and unique
REPLICAS = 3
SEQ_BITS, WORKER_BITS, DC_BITS = 12, 5, 5  # the default layout (config.json)


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


class Net:
    """A bridge in the root namespace and one namespace per replica, each with one address."""

    def __init__(self):
        self.bridge = TAG + "br"
        self.namespaces = []
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", SUBNET + ".1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")

    def add(self, i):
        ns, veth = "%sns%d" % (TAG, i), "%sv%d" % (TAG, i)
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", self.bridge)
        sh("ip", "link", "set", veth, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", "%s.%d/24" % (SUBNET, 10 + i), "dev",
           "eth0")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        return ns, "%s.%d" % (SUBNET, 10 + i)

    def remove(self):
        for ns in self.namespaces:
            sh("ip", "netns", "del", ns, check=False)  # takes its veth end (and the pair) along
        sh("ip", "link", "del", self.bridge, check=False)


def start(build, ns, name, data, peers, extra=()):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOSTNAME": name, "POD_NAME": name}
    argv = ["ip", "netns", "exec", ns, os.path.join(build, "snowflaked"), "-c", CONFIG,
            "--set", "data_dir=" + data, "--set", "snowflake.peers=" + peers,
            "--set", "log.level=info", *extra]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def http_status(addr, path, timeout=1.0):
    try:
        with socket.create_connection((addr, 8080), timeout=timeout) as s:
            s.sendall(b"GET %s HTTP/1.0\r\n\r\n" % path.encode())
            return int(s.recv(64).split()[1])
    except (OSError, IndexError, ValueError):
        return None


def wait_ready(addr, proc, deadline):
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError("replica at %s exited at start:\n%s" % (addr, proc.stdout.read()))
        if http_status(addr, "/readyz") == 200:
            return
        time.sleep(0.05)
    raise AssertionError("replica at %s not ready in time" % addr)


def worker_of(i):
    return (i >> SEQ_BITS) & ((1 << WORKER_BITS) - 1)


def datacenter_of(i):
    return (i >> (SEQ_BITS + WORKER_BITS)) & ((1 << DC_BITS) - 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", "--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-n", "--requests", type=int, default=5000,
                    help="/ids?count=100 requests per replica (default 5000: 500,000 IDs each)")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # in order with the FIGURE lines on stderr
    if os.geteuid() != 0:
        sys.exit("test_replicas: needs root (ip netns)")
    if not shutil.which("ip"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "iproute2"], check=True)
    sfload = os.path.join(args.build, "sfload")
    for tool in (sfload, os.path.join(args.build, "snowflaked")):
        if not os.access(tool, os.X_OK):
            sys.exit("test_replicas: %s missing (make build)" % tool)

    work = tempfile.mkdtemp(prefix="sf_replicas_")
    net, procs, failures, prom, load = None, [], [], None, None
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    t0 = time.time()
    try:
        net = Net()
        addrs = []
        for i in range(REPLICAS + 1):
            addrs.append(net.add(i))
        peers = ",".join("%s:8080" % a for _, a in addrs[:REPLICAS])
        pods = ["snowflaked-%d" % i for i in range(REPLICAS)]
        targets = ["%s:8080" % a for _, a in addrs[:REPLICAS]]
        # Started first so that it is up by the time the replicas are.
        prom = Prometheus(work, list(zip(pods, targets)))
        # Parallel start, as podManagementPolicy: Parallel does.
        for i in range(REPLICAS):
            ns, addr = addrs[i]
            procs.append(start(args.build, ns, "snowflaked-%d" % i,
                               os.path.join(work, "data-%d" % i), peers))
        deadline = time.time() + 20
        for i in range(REPLICAS):
            wait_ready(addrs[i][1], procs[i], deadline)
        print("3 replicas ready at %s" % ", ".join(a for _, a in addrs[:REPLICAS]))
        prom.wait_ready()
        issued_at_start = ids_issued_before(targets)

        # Load all three at once from the root namespace.
        outs = [os.path.join(work, "ids-%d.bin" % i) for i in range(REPLICAS)]
        runs = [subprocess.Popen([sfload, "--allow-remote", "-q", "-c", "8", "-P", "4", "-T",
                                  "1", "-n", str(args.requests), "-t", "60", "--ids-out", outs[i],
                                  "http://%s:8080/ids?count=100" % addrs[i][1]],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for i in range(REPLICAS)]
        for i, r in enumerate(runs):
            out, _ = r.communicate(timeout=120)
            if r.returncode != 0:
                failures.append("sfload against replica %d failed:\n%s" % (i, out))
        total = array.array("Q")
        for i, path in enumerate(outs):
            ids = array.array("Q")
            with open(path, "rb") as f:
                ids.frombytes(f.read())
            if len(ids) != args.requests * 100:
                failures.append("replica %d: %d IDs, expected %d" % (i, len(ids),
                                                                     args.requests * 100))
            workers = {worker_of(x) for x in ids}
            if workers != {i}:
                failures.append("replica %d issued worker ids %s" % (i, sorted(workers)))
            total.extend(ids)
        ordered = sorted(total)
        dups = sum(1 for a, b in zip(ordered, ordered[1:]) if a == b)
        workers = sorted({worker_of(x) for x in ordered})
        dcs = sorted({datacenter_of(x) for x in ordered})
        print("union: %d IDs, %d duplicates, worker ids %s, datacenter ids %s" % (
            len(ordered), dups, workers, dcs))
        if dups or workers != [0, 1, 2] or not ordered:
            failures.append("the union is not clean")

        # What Prometheus sees of a steady load, and of the whole run. Its first scrape comes
        # about 5 s after it starts (it applies discovered targets at most every 5 s): waiting
        # for it here, not before the first load, overlaps the two.
        t_monitored = time.time()
        checks = ScrapeChecks(prom, pods, failures)
        checks.wait_targets_up()
        load = MonitoredLoad(sfload, targets)
        load.sleep_until(QUERY_AT_S)
        prom_rate = checks.during_load()
        ids, sfload_rate = load.finish(failures)
        checks.compare_rate(prom_rate, sfload_rate)
        checks.after_load(issued_at_start + len(ordered) + ids)
        checks.rules_and_alerts()
        print("Prometheus checks: %.1f s" % (time.time() - t_monitored))

        # A fourth replica: a duplicate ordinal, then one beyond worker_bits.
        ns, addr = addrs[REPLICAS]
        for name, code, text in (("snowflaked-1", 1, "already issues IDs as datacenter 0 worker 1"),
                                 ("snowflaked-32", 2, "does not fit worker_bits")):
            p = start(args.build, ns, name, os.path.join(work, "data-x"), peers)
            try:
                out, _ = p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
                failures.append("%s did not refuse to start" % name)
                continue
            ok = p.returncode == code and text in out
            print("4th replica as %s: exit %d (%s)" % (name, p.returncode,
                                                       "refused as expected" if ok else "WRONG"))
            if not ok:
                failures.append("%s: exit %d, output:\n%s" % (name, p.returncode, out))
            if http_status(addr, "/id", timeout=0.3) is not None:
                failures.append("%s served a request" % name)
    finally:
        if load:
            load.kill()
        if prom:
            prom.stop()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for i, p in enumerate(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                failures.append("replica %d did not stop on SIGTERM" % i)
            if p.returncode not in (0, None):
                failures.append("replica %d exited %d" % (i, p.returncode))
        if net:
            net.remove()
        shutil.rmtree(work, ignore_errors=True)
    print("test_replicas: %s in %.1f s" % ("FAIL" if failures else "PASS", time.time() - t0))
    for f in failures:
        print("  - " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
