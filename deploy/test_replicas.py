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

TLS is on, as deploy/k8s/components/tls turns it on: the component's SNOWFLAKED_* variables (HTTPS
on 8443, memcached over TLS only, on 11212, watch_files), its Secret mount path mapped to a
directory per replica laid out as the kubelet lays out a Secret volume (secret_volume.py), holding
a certificate made here with openssl (test/integration/tlscerts.py: one CA, one server certificate
per replica for its pod names and its address). Every client verifies against that CA: sfload
over https://, Prometheus scraping https://, memcached over TLS (raw ssl sockets and sfload
--mode memcache). During the monitored load every replica's certificate is renewed the kubelet's
way (..data symlink swap, new key and serial): new connections to both TLS ports must get the new
serial, a memcached TLS connection opened before keeps working, and the load runs on with no
error; Prometheus must then see each pod's new not-after time and one reload per TLS listener.

Needs root (ip netns) and iproute2; creates only namespaces, a bridge and veth pairs of its own
(10.77.0.0/24), and removes them, and every process it started, on exit.

    deploy/test_replicas.py [-b build_dir] [-n requests_per_replica]
"""
import argparse
import array
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import ssl
import time
import urllib.error
import urllib.request

from prometheus_scrape import (MonitoredLoad, Prometheus, ScrapeChecks, QUERY_AT_S,
                               ids_issued_before)
from secret_volume import SecretVolume

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CONFIG = os.path.join(ROOT, "deploy/container/config.json")
TLS_PATCH = os.path.join(ROOT, "deploy/k8s/components/tls/statefulset-patch.yaml")
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
import tlscerts  # noqa: E402
SUBNET = "10.77.0"
TAG = "sf%d" % (os.getpid() % 100000)  # interface and namespace names stay short and unique
REPLICAS = 3
SEQ_BITS, WORKER_BITS, DC_BITS = 12, 5, 5  # the default layout (config.json)


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


class Net:
    """A bridge in the root namespace and one namespace per replica, each with one address
    (subnet.10 + i; the bridge is subnet.1)."""

    def __init__(self, subnet=SUBNET, tag=TAG):
        self.subnet, self.tag = subnet, tag
        self.bridge = tag + "br"
        self.namespaces = []
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", subnet + ".1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")

    def add(self, i):
        ns, veth = "%sns%d" % (self.tag, i), "%sv%d" % (self.tag, i)
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", self.bridge)
        sh("ip", "link", "set", veth, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", "%s.%d/24" % (self.subnet, 10 + i),
           "dev", "eth0")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        return ns, "%s.%d" % (self.subnet, 10 + i)

    def remove(self):
        for ns in self.namespaces:
            sh("ip", "netns", "del", ns, check=False)  # takes its veth end (and the pair) along
        sh("ip", "link", "del", self.bridge, check=False)


class Tls:
    """The TLS configuration of components/tls for each replica: its SNOWFLAKED_* values, with
    the Secret's mount path replaced by the replica's own kubelet-style directory."""

    def __init__(self, work):
        import yaml  # main() made sure of it
        with open(TLS_PATCH) as f:
            pod = yaml.safe_load(f)["spec"]["template"]["spec"]
        ctr = next(c for c in pod["containers"] if c["name"] == "snowflaked")
        self.env = {e["name"]: str(e["value"]) for e in ctr["env"] if "value" in e}
        self.mount = next(m["mountPath"] for m in ctr["volumeMounts"] if m["name"] == "tls")
        self.http_port = int(self.env["SNOWFLAKED_SERVER_TLS_PORT"])
        self.mc_port = int(self.env["SNOWFLAKED_CACHE_MEMCACHED_TLS_PORT"])
        self.dir = os.path.join(work, "tls")
        os.makedirs(self.dir)
        self.certs = tlscerts.Certs(self.dir)
        self.ca = self.certs.ca
        self.ctx = ssl.create_default_context(cafile=self.ca)
        self.volumes = {}

    def names(self, i, addr):
        pod = "snowflaked-%d" % i
        return ["DNS:%s.snowflaked-headless" % pod, "DNS:%s.snowflaked-headless.snowflaked.svc"
                % pod, "IP:" + addr]

    def files(self, i, addr, days=30):
        cert, key = self.certs.server_cert("snowflaked-%d-%d" % (i, len(self.volumes)),
                                           self.names(i, addr), days=days)
        return {"tls.crt": cert, "tls.key": key, "ca.crt": self.ca}

    def add(self, i, addr):
        self.volumes[i] = SecretVolume(os.path.join(self.dir, "secret-%d" % i),
                                       self.files(i, addr))

    def pod_env(self, i):
        vol = self.volumes[i].path
        return {k: v.replace(self.mount, vol) for k, v in self.env.items()}

    def renew(self, i, addr, days):
        """cert-manager renews (new key, new serial), the kubelet swaps ..data; the new
        serial (hex, as getpeercert() prints it) and not-after time."""
        files = self.files(i, addr, days=days)
        self.volumes[i].update(files)
        return self.certs.serial_of(files["tls.crt"]).upper(), not_after(files["tls.crt"])

    def connect(self, addr, port):
        sock = socket.create_connection((addr, port), timeout=2)
        try:
            return self.ctx.wrap_socket(sock, server_hostname=addr)
        except (OSError, ssl.SSLError):
            sock.close()
            raise

    def serial(self, addr, port):
        with self.connect(addr, port) as s:
            return s.getpeercert()["serialNumber"]


def not_after(cert):
    out = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-enddate"], check=True,
                         capture_output=True, text=True).stdout
    return ssl.cert_time_to_seconds(out.strip().split("=", 1)[1])


def mc_exchange(sock, request, until):
    """Sends a memcached request on an open (TLS) socket, reads until the reply ends with
    `until`."""
    sock.sendall(request)
    reply = b""
    while not reply.endswith(until):
        chunk = sock.recv(4096)
        if not chunk:
            break
        reply += chunk
    return reply


def replica_command(build, ns, name, data, peers, extra=(), env_extra=None):
    """(argv, env) of replica `name` in network namespace ns, as a pod of the StatefulSet runs
    it: the image's config, its own data_dir, the peers, the pod's names in the environment
    (test_fleet_clients.py starts its replicas so too). `ip netns exec` execs the daemon, so
    the PID Popen gets is snowflaked's own."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOSTNAME": name, "POD_NAME": name,
           **(env_extra or {})}
    argv = ["ip", "netns", "exec", ns, os.path.join(build, "snowflaked"), "-c", CONFIG,
            "--set", "data_dir=" + data, "--set", "snowflake.peers=" + peers,
            "--set", "log.level=info", *extra]
    return argv, env


def start(build, ns, name, data, peers, extra=(), env_extra=None):
    argv, env = replica_command(build, ns, name, data, peers, extra, env_extra)
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def finish(name, t0, failures, say=print):
    """A deploy test's last lines: PASS or FAIL with the time taken, each failure, and the exit
    status (1 on a failure)."""
    say("%s: %s in %.1f s" % (name, "FAIL" if failures else "PASS", time.time() - t0))
    for f in failures:
        say("  - " + f)
    sys.exit(1 if failures else 0)


def https_status(tls, addr, path, timeout=1.0):
    try:
        with urllib.request.urlopen("https://%s:%d%s" % (addr, tls.http_port, path),
                                    timeout=timeout, context=tls.ctx) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError):
        return None


def http_status(addr, path, timeout=1.0):
    try:
        with socket.create_connection((addr, 8080), timeout=timeout) as s:
            s.sendall(b"GET %s HTTP/1.0\r\n\r\n" % path.encode())
            return int(s.recv(64).split()[1])
    except (OSError, IndexError, ValueError):
        return None


def wait_ready(tls, addr, proc, deadline):
    """Ready as the kubelet's probe sees it: GET /readyz over HTTPS (here verified, too)."""
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError("replica at %s exited at start:\n%s" % (addr, proc.stdout.read()))
        if https_status(tls, addr, "/readyz") == 200:
            return
        time.sleep(0.05)
    raise AssertionError("replica at %s not ready in time" % addr)


def worker_of(i):
    return (i >> SEQ_BITS) & ((1 << WORKER_BITS) - 1)


def datacenter_of(i):
    return (i >> (SEQ_BITS + WORKER_BITS)) & ((1 << DC_BITS) - 1)


# The renewal comes 3 s into the 12 s monitored load: the load runs on across it, and the
# mid-load queries (QUERY_AT_S) see its rate afterwards.
ROTATE_AT_S = 3.0
# The renewed certificates live longer (60 days, not 30), so their not-after time differs.
RENEWED_DAYS = 60
# The daemon reloads 500 ms after the directory went quiet; allow for a loaded machine.
ROTATION_TIMEOUT_S = 5.0


def memcached_over_tls(build, tls, addrs, failures):
    """The memcached protocol over TLS on every replica, verified against the CA: a set and a
    get on a raw TLS socket, the plaintext port closed (components/tls turns it off), then
    sfload --mode memcache over TLS on all three at once."""
    for i, addr in enumerate(addrs):
        try:
            with tls.connect(addr, tls.mc_port) as s:
                reply = mc_exchange(s, b"set tls-%d 0 0 5\r\nhello\r\nget tls-%d\r\n" % (i, i),
                                    b"END\r\n")
        except (OSError, ssl.SSLError) as e:
            reply = repr(e).encode()
        ok = reply == b"STORED\r\nVALUE tls-%d 0 5\r\nhello\r\nEND\r\n" % i
        print("memcached over TLS on %s:%d: %s" % (addr, tls.mc_port, "ok" if ok else reply[:80]))
        if not ok:
            failures.append("replica %d: memcached over TLS answered %r" % (i, reply[:200]))
        try:
            socket.create_connection((addr, 11211), timeout=0.5).close()
            failures.append("replica %d: the plaintext memcached port 11211 is open" % i)
        except OSError:
            pass
    r = subprocess.run([os.path.join(build, "sfload"), "--allow-remote", "-q", "--json",
                        "--mode", "memcache", "--tls", "--cacert", tls.ca, "-c", "6", "-T", "1",
                        "-n", "30000", "-t", "30"] +
                       ["%s:%d" % (a, tls.mc_port) for a in addrs],
                       capture_output=True, text=True, timeout=60)
    try:
        res = json.loads(r.stdout)
    except ValueError:
        res = {}
    print("FIGURE sfload memcache over TLS (3 replicas): %s responses in %.2f s, exit %d" % (
        res.get("responses"), res.get("duration_s", 0), r.returncode))
    if r.returncode != 0 or not res.get("passed"):
        failures.append("sfload memcache over TLS failed (exit %d): %s %s" % (
            r.returncode, r.stdout[-500:], r.stderr[-500:]))


def rotate(tls, addrs, failures):
    """cert-manager renews every replica's certificate; the kubelet swaps each Secret volume's
    ..data symlink. A memcached TLS connection opened before must keep working; new connections
    to both TLS ports must get the new serial. Returns {pod: new not-after time}."""
    old = []
    for i, addr in enumerate(addrs):
        s = tls.connect(addr, tls.mc_port)
        mc_exchange(s, b"set rot-%d 0 0 3\r\nold\r\n" % i, b"\r\n")
        old.append((s, tls.serial(addr, tls.http_port)))
    t0 = time.time()
    want = {i: tls.renew(i, addr, RENEWED_DAYS) for i, addr in enumerate(addrs)}
    renewed = {}
    for i, addr in enumerate(addrs):
        serial, end = want[i]
        seen = None
        while time.time() - t0 < ROTATION_TIMEOUT_S:
            try:
                seen = (tls.serial(addr, tls.http_port), tls.serial(addr, tls.mc_port))
            except (OSError, ssl.SSLError) as e:
                seen = repr(e)
            if seen == (serial, serial):
                break
            time.sleep(0.1)
        took = time.time() - t0
        print("FIGURE rotation snowflaked-%d: serial %s -> %s on HTTPS and memcached-TLS after "
              "%.2f s (new connections), not after %s" % (
                  i, old[i][1], serial, took, time.strftime("%Y-%m-%d", time.gmtime(end))))
        if seen != (serial, serial):
            failures.append("replica %d: after the ..data swap new connections see serials %s, "
                            "expected %s" % (i, seen, serial))
        renewed["snowflaked-%d" % i] = end
        s = old[i][0]
        try:
            reply = mc_exchange(s, b"get rot-%d\r\n" % i, b"END\r\n")
            kept = s.getpeercert()["serialNumber"]
        except (OSError, ssl.SSLError) as e:
            reply, kept = repr(e).encode(), None
        finally:
            s.close()
        if reply != b"VALUE rot-%d 0 3\r\nold\r\nEND\r\n" % i or kept != old[i][1]:
            failures.append("replica %d: the memcached TLS connection opened before the rotation "
                            "answered %r (certificate serial %s, was %s)" % (
                                i, reply[:100], kept, old[i][1]))
    return renewed


def rotation_seen_by_prometheus(prom, pods, renewed, failures):
    """What an operator sees of the renewal: each pod's not-after time is the new
    certificate's, and each TLS listener reloaded once, successfully."""
    seen = {(m.get("pod"), m.get("listener")): v for m, v in prom.query(
        'snowflaked_tls_certificate_not_after_seconds{job="snowflaked"}')}
    reloads = {(m.get("pod"), m.get("listener"), m.get("result")): v for m, v in prom.query(
        'snowflaked_tls_reloads_total{job="snowflaked"}')}
    print("FIGURE prometheus snowflaked_tls_certificate_not_after_seconds: %s" % ", ".join(
        "%s/%s=%d" % (p, l, v) for (p, l), v in sorted(seen.items())))
    print("FIGURE prometheus snowflaked_tls_reloads_total: %s" % ", ".join(
        "%s/%s/%s=%d" % (p, l, r, v) for (p, l, r), v in sorted(reloads.items())))
    listeners = sorted({l for _, l in seen})
    if len(listeners) != 2:
        failures.append("prometheus: TLS listeners %s, expected HTTP and memcached" % listeners)
    for pod in pods:
        for lst in listeners:
            if seen.get((pod, lst)) != renewed[pod]:
                failures.append("prometheus: %s %s not after %s, expected the renewed %d" % (
                    pod, lst, seen.get((pod, lst)), renewed[pod]))
            if reloads.get((pod, lst, "ok")) != 1 or reloads.get((pod, lst, "failed")) != 0:
                failures.append("prometheus: %s %s reloads ok %s failed %s, expected 1 and 0" % (
                    pod, lst, reloads.get((pod, lst, "ok")), reloads.get((pod, lst, "failed"))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", "--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-n", "--requests", type=int, default=5000,
                    help="/ids?count=100 requests per replica (default 5000: 500,000 IDs each)")
    args = ap.parse_args()
    if importlib.util.find_spec("yaml") is None:  # Tls reads components/tls with it
        # validate.sh, which make test-deploy runs first, installs Debian's python3-yaml for
        # /usr/bin/python3: run under that one when this python3 lacks PyYAML.
        debian = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(debian) and os.access(debian,
                                                                                      os.X_OK):
            os.execv(debian, [debian, os.path.abspath(__file__)] + sys.argv[1:])
        sys.exit("test_replicas: needs PyYAML for %s (Debian: python3-yaml)" % TLS_PATCH)
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
        tls = Tls(work)
        addrs = []
        for i in range(REPLICAS + 1):
            addrs.append(net.add(i))
            tls.add(i, addrs[i][1])
        # snowflake.peers: the daemon's own start-up probe (GET /id) speaks plaintext HTTP, on
        # the port the daemon always opens beside HTTPS.
        peers = ",".join("%s:8080" % a for _, a in addrs[:REPLICAS])
        pods = ["snowflaked-%d" % i for i in range(REPLICAS)]
        targets = ["%s:%d" % (a, tls.http_port) for _, a in addrs[:REPLICAS]]
        # Started first so that it is up by the time the replicas are.
        prom = Prometheus(work, list(zip(pods, targets)), tls_ca=tls.ca)
        # Parallel start, as podManagementPolicy: Parallel does.
        for i in range(REPLICAS):
            ns, addr = addrs[i]
            procs.append(start(args.build, ns, "snowflaked-%d" % i,
                               os.path.join(work, "data-%d" % i), peers, env_extra=tls.pod_env(i)))
        deadline = time.time() + 20
        for i in range(REPLICAS):
            wait_ready(tls, addrs[i][1], procs[i], deadline)
        print("3 replicas ready (HTTPS /readyz, verified) at %s" %
              ", ".join(a for _, a in addrs[:REPLICAS]))
        for i in range(REPLICAS):
            if http_status(addrs[i][1], "/readyz") != 200:  # the plaintext twin stays
                failures.append("replica %d: no plaintext HTTP on 8080 beside HTTPS" % i)
        prom.wait_ready()
        issued_at_start = ids_issued_before(targets, tls.ctx)

        # Load all three at once from the root namespace, over HTTPS.
        outs = [os.path.join(work, "ids-%d.bin" % i) for i in range(REPLICAS)]
        runs = [subprocess.Popen([sfload, "--allow-remote", "-q", "-c", "8", "-P", "4", "-T",
                                  "1", "-n", str(args.requests), "-t", "60", "--ids-out", outs[i],
                                  "--cacert", tls.ca,
                                  "https://%s:%d/ids?count=100" % (addrs[i][1], tls.http_port)],
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
        memcached_over_tls(args.build, tls, [a for _, a in addrs[:REPLICAS]], failures)

        # What Prometheus sees of a steady load, and of the whole run. Its first scrape comes
        # about 5 s after it starts (it applies discovered targets at most every 5 s): waiting
        # for it here, not before the first load, overlaps the two.
        t_monitored = time.time()
        checks = ScrapeChecks(prom, pods, failures)
        checks.wait_targets_up()
        load = MonitoredLoad(sfload, targets, cacert=tls.ca)
        load.sleep_until(ROTATE_AT_S)
        renewed = rotate(tls, [a for _, a in addrs[:REPLICAS]], failures)
        load.sleep_until(QUERY_AT_S)
        prom_rate = checks.during_load()
        ids, sfload_rate = load.finish(failures)
        checks.compare_rate(prom_rate, sfload_rate)
        checks.after_load(issued_at_start + len(ordered) + ids)
        rotation_seen_by_prometheus(prom, pods, renewed, failures)
        checks.rules_and_alerts()
        print("Prometheus checks: %.1f s" % (time.time() - t_monitored))

        # A fourth replica: a duplicate ordinal, then one beyond worker_bits.
        ns, addr = addrs[REPLICAS]
        for name, code, text in (("snowflaked-1", 1, "already issues IDs as datacenter 0 worker 1"),
                                 ("snowflaked-32", 2, "does not fit worker_bits")):
            p = start(args.build, ns, name, os.path.join(work, "data-x"), peers,
                      env_extra=tls.pod_env(REPLICAS))
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
            if http_status(addr, "/id", timeout=0.3) is not None or \
                    https_status(tls, addr, "/id", timeout=0.3) is not None:
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
    finish("test_replicas", t0, failures)


if __name__ == "__main__":
    main()
