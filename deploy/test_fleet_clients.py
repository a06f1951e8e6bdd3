#!/usr/bin/env python3
"""A fleet behind the memcached clients and proxies users already run: three replicas started the
way the StatefulSet starts them (POD_NAME snowflaked-0..2, the container's config.json, worker id
from the ordinal, a data_dir each), each in its own network namespace at its own address on a
private bridge, all on memcached port 11211 as pods are, reached from the root namespace through

1. pymemcache's HashClient (Debian python3-pymemcache) over the three: cache keys spread over all
   three replicas (the split is printed and each replica must hold a fair share), every read finds
   its write, each key on the replica HashClient's hasher names; then IDs fetched through it
   with the ID key family (`get sfid:0 sfid:1 ...`: the reserved name sfid reserves every
   sfid:<suffix>), hashed over the three as cache keys are, each replica serving > 15 %; one
   replica killed with kill -9 at 25 %, taken off the hash, restarted at 35 % and readmitted: at
   least 1M IDs, no duplicate, each replica's IDs (told apart by the ID's worker bits)
   increasing across its restart;
2. nutcracker (Debian nutcracker, twemproxy 0.5) with ketama in front of the three: every
   memcached command it forwards works through it, IDs through it (family keys) spread over all
   three and unique; a replica killed
   with kill -9 is ejected (its keys move to the others after server_failure_limit errors) and,
   restarted on its data_dir, readmitted after server_retry_timeout, with no duplicate ID across
   the kill, the ejection and the readmission.

Figures are printed as FIGURE lines. Needs root (ip netns, apt-get for nutcracker when missing);
creates only namespaces, a bridge and veth pairs of its own (10.78.0.0/24) and removes them, and
every process it started, on exit.

    deploy/test_fleet_clients.py [-b build_dir] [-n ids]
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from test_replicas import Net, datacenter_of, finish, http_status, replica_command, worker_of

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CONFIG = os.path.join(ROOT, "deploy/container/config.json")
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
sys.path.insert(0, os.path.join(ROOT, "test", "fault"))
import faultutil  # noqa: E402
import sfharness  # noqa: E402

SUBNET = "10.78.0"  # test_replicas has 10.77.0: the two never share addresses
TAG = "sff%d" % (os.getpid() % 10000)
REPLICAS = 3
MC_PORT = 11211
# The reserved keys (cache.memcached_id_keys.*): a get of one returns a new ID.
ID_KEY, UUID_KEY, ULID_KEY = "sfid", "sfuuid", "sfulid"
KEYS_PER_GET = 400   # one `get sfid:n ...` line of a few kB: one read on the server
# The ID keys fetched through the clients: the family sfid:0 .. sfid:3999 of the reserved name
# (a name K reserves K and every "K:<suffix>"), which hashes over the replicas as cache keys do.
ID_FAMILY = 4000
CACHE_KEYS = 3000
# nutcracker's pool: what notes/recommendation.md recommends for a resilient pool, with times
# short enough for a test. The ring is built on the node names (snowflaked-N), not addresses,
# so a pod that comes back at another address keeps its keys.
RETRY_TIMEOUT_MS = 2000
FAILURE_LIMIT = 2
PROXY_TIMEOUT_MS = 400


def log(msg):
    print(msg, flush=True)


def tail(path, n=3000):
    """The last n characters of a log file, "" when there is none."""
    try:
        with open(path) as f:
            return f.read()[-n:]
    except OSError:
        return ""


# ---- replicas --------------------------------------------------------------------------------

class Replica:
    def __init__(self, build, i, ns, addr, work, peers, ids):
        self.build, self.i, self.ns, self.addr = build, i, ns, addr
        self.name = "snowflaked-%d" % i
        self.data = os.path.join(work, "data-%d" % i)
        self.logpath = os.path.join(work, "replica-%d.log" % i)
        self.peers, self.ids = peers, ids
        self.proc = None
        self.starts = 0

    def start(self):
        # a snapshot every second (the image: 300 s), so that a replica killed with kill -9
        # comes back with the cache it had a moment before (docs/fleet.md)
        extra = ["--set", "cache.snapshot_interval_s=1"]
        if self.ids:
            extra += ["--set", "cache.memcached_id_keys.snowflake=" + ID_KEY,
                      "--set", "cache.memcached_id_keys.uuidv7=" + UUID_KEY,
                      "--set", "cache.memcached_id_keys.ulid=" + ULID_KEY]
        argv, env = replica_command(self.build, self.ns, self.name, self.data, self.peers, extra)
        self.starts += 1
        out = open(self.logpath, "a")
        out.write("---- start %d\n" % self.starts)
        out.flush()
        # replica_command: this PID is snowflaked's own (kill -9 hits it)
        self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def wait_ready(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("%s exited at start:\n%s" % (self.name, self.log_tail()))
            if http_status(self.addr, "/readyz", timeout=0.5) == 200:
                return
            time.sleep(0.05)
        raise AssertionError("%s not ready in %d s:\n%s" % (self.name, timeout, self.log_tail()))

    def log_tail(self):
        return tail(self.logpath)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, failures):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            failures.append("%s did not stop on SIGTERM" % self.name)
        if self.proc.returncode != 0:
            failures.append("%s exited %d:\n%s" % (self.name, self.proc.returncode,
                                                    self.log_tail()))


# ---- raw memcached text protocol -------------------------------------------------------------

class Raw:
    """A plain memcached text-protocol connection (or one of pymemcache's sockets): for what the
    dict-returning client APIs cannot show (a get naming one key many times returns one value
    per key named; a proxy's exact replies)."""

    def __init__(self, addr=None, port=MC_PORT, timeout=5.0, sock=None):
        if sock is None:
            sock = socket.create_connection((addr, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.buf = b""

    def close(self):
        self.sock.close()

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("connection closed")
        self.buf += chunk

    def line(self):
        while True:
            n = self.buf.find(b"\r\n")
            if n >= 0:
                out, self.buf = self.buf[:n], self.buf[n + 2:]
                return out
            self._fill()

    def data(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n + 2:]
        return out

    def call(self, request, multi=None):
        """One request; its reply as lines (each value's data in place of its line). A reply
        to get/gets/stats runs to END (or an error line), any other is one line."""
        if multi is None:
            multi = request.split(b" ", 1)[0].strip() in (b"get", b"gets", b"stats")
        self.sock.sendall(request)
        lines = []
        while True:
            ln = self.line()
            lines.append(ln)
            if ln.startswith(b"VALUE "):
                lines.append(self.data(int(ln.split()[3])))
            elif not multi or ln == b"END" or ln.startswith(
                    (b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")):
                return lines

    def ids(self, key, count):
        """`get key key ...` (count times): see get_ids."""
        return self.get_ids([key.encode()] * count)

    def get_ids(self, keys):
        """`get k1 k2 ...` (bytes keys, each an ID key): the IDs in the order they came (ints),
        every VALUE line checked to echo the key sent in its place; raises RuntimeError on an
        error line (a refusal: SERVER_ERROR ...) or another key. Reads the whole reply, then
        splits it: 1M IDs in seconds."""
        self.sock.sendall(b"get " + b" ".join(keys) + b"\r\n")
        while not (self.buf.endswith(b"END\r\n") and (self.buf == b"END\r\n" or
                                                       self.buf.endswith(b"\r\nEND\r\n"))):
            if self.buf.startswith((b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR")) and \
                    self.buf.endswith(b"\r\n"):
                err, self.buf = self.buf, b""
                raise RuntimeError(err.strip().decode(errors="replace"))
            self._fill()
        parts, self.buf = self.buf.split(b"\r\n"), b""
        # VALUE line, data, ..., END, "": a value line is 4 words, its data the next part
        heads, values = parts[0:-2:2], parts[1:-2:2]
        if parts[-2] != b"END" or any(not h.startswith(b"VALUE ") for h in heads):
            raise RuntimeError("malformed reply: %r" % parts[:4])
        if [h.split(b" ", 2)[1] for h in heads] != keys:
            raise RuntimeError("the VALUE lines do not echo the keys sent: %r for %r" % (
                heads[:3], keys[:3]))
        return [int(v) for v in values]


def snapshots(addr):
    """snowflaked_cache_snapshots_total of a replica (plaintext /metrics on 8080)."""
    with socket.create_connection((addr, 8080), timeout=2) as c:
        c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
    for ln in data.decode(errors="replace").splitlines():
        if ln.startswith("snowflaked_cache_snapshots_total "):
            return float(ln.split()[1])
    return None


def mc_stats(addr):
    r = Raw(addr, MC_PORT)
    try:
        lines = r.call(b"stats\r\n")
    finally:
        r.close()
    return {p[1].decode(): p[2].decode() for p in (ln.split(b" ", 2) for ln in lines[:-1])
            if len(p) == 3}


# ---- ID bookkeeping --------------------------------------------------------------------------

class IdLog:
    """Every ID received, per replica (worker bits) in the order received: one sequential client,
    so that order is the order each replica issued them in."""

    def __init__(self):
        self.by_worker = {}
        self.total = 0

    def add(self, ids):
        for x in ids:
            self.by_worker.setdefault(worker_of(x), []).append(x)
        self.total += len(ids)

    def check(self, what, failures, workers=None):
        everything = [x for v in self.by_worker.values() for x in v]
        dups = len(everything) - len(set(everything))
        backwards = {w: sum(1 for a, b in zip(v, v[1:]) if b <= a)
                     for w, v in self.by_worker.items()}
        split = {w: len(v) for w, v in sorted(self.by_worker.items())}
        dcs = sorted({datacenter_of(x) for x in everything})
        log("FIGURE %s: %d IDs, %d duplicates, per worker id %s, datacenter ids %s, "
            "not increasing %s" % (what, len(everything), dups, split, dcs, backwards))
        if dups:
            failures.append("%s: %d duplicate IDs" % (what, dups))
        if any(backwards.values()):
            failures.append("%s: IDs not increasing per replica: %s" % (what, backwards))
        if workers is not None and sorted(self.by_worker) != sorted(workers):
            failures.append("%s: IDs from worker ids %s, expected %s" % (
                what, sorted(self.by_worker), sorted(workers)))
        return dups


# ---- 1. pymemcache HashClient ----------------------------------------------------------------

def hash_client(addrs, **kw):
    base = sfharness.debian_import("pymemcache.client.hash", "python3-pymemcache")
    return base.HashClient([(a, MC_PORT) for a in addrs], connect_timeout=2, timeout=5, **kw)


def hashclient_cache(replicas, failures):
    """Cache keys through HashClient: spread over all three, each read finds its write, and each
    key on the replica the hasher names (read back on that replica directly)."""
    addrs = [r.addr for r in replicas]
    hc = hash_client(addrs)
    before = [int(mc_stats(a).get("curr_items", 0)) for a in addrs]
    t0 = time.time()
    values = {"fleet:%d" % k: ("v%d-" % k).encode() * (1 + k % 7) for k in range(CACHE_KEYS)}
    for key, value in values.items():
        if not hc.set(key, value, noreply=False):
            failures.append("HashClient set %s: not stored" % key)
            break
    got = {}
    keys = list(values)
    for n in range(0, len(keys), 100):
        got.update(hc.get_many(keys[n:n + 100]))
    missing = [k for k in keys if got.get(k) != values[k]]
    took = time.time() - t0
    owner = {k: hc.hasher.get_node(k) for k in keys}
    split = [int(mc_stats(a).get("curr_items", 0)) - b for a, b in zip(addrs, before)]
    expected = [sum(1 for k in keys if owner[k] == "%s:%d" % (a, MC_PORT)) for a in addrs]
    log("FIGURE HashClient cache: %d keys set and read back in %.2f s, %d wrong or missing; "
        "split over snowflaked-0/1/2 (curr_items): %s (hasher: %s)" % (
            len(keys), took, len(missing), split, expected))
    if missing:
        failures.append("HashClient: %d of %d reads did not find their write (first %s)" % (
            len(missing), len(keys), missing[:3]))
    if split != expected:
        failures.append("HashClient: replicas hold %s keys, the hasher placed %s" % (split,
                                                                                  expected))
    if min(split) < len(keys) // (2 * len(addrs)):
        failures.append("HashClient: keys not spread over all three: %s" % split)
    # Each key where the hasher put it: read a sample straight from that replica.
    for k in keys[:300]:
        r = Raw(owner[k].rsplit(":", 1)[0])
        try:
            lines = r.call(b"get %s\r\n" % k.encode())
        finally:
            r.close()
        if lines[:2] != [b"VALUE %s 0 %d" % (k.encode(), len(values[k])), values[k]]:
            failures.append("HashClient: %s is not on %s, where the hasher put it: %r" % (
                k, owner[k], lines[:2]))
            break
    hc.close()


def hashclient_ids(replicas, target, failures):
    """At least `target` IDs through HashClient with the ID key family: a name K reserves K and
    every "K:<suffix>", so the keys sfid:0 .. sfid:3999, taken KEYS_PER_GET at a time round
    robin, hash over all three replicas as cache keys do, each answering a new ID under the key
    sent. First a hundred get_many calls (pymemcache's own multi-get, its dict keyed by the
    keys sent); then, for speed, the same routing (HashClient's hasher, its client and socket for
    each server) with each server's keys of a round written as one `get` line and the reply read
    back raw (pymemcache parses ~100k values/s in Python; the raw reader several times that).

    Spread without failures first: each replica must serve > 15 % of those IDs. Then kill -9
    one replica at 25 %: HashClient's retries (ignore_exc, retry_attempts 2) mark it dead and its
    keys hash to the two others; restart it on its data_dir at 35 %, wait (a round every 20 ms)
    until HashClient has readmitted it (dead_timeout) and its IDs come back, above all it issued
    before the kill, and run on over all three to the target (at least half of it after that).
    Every ID of the run: no duplicate, each replica's increasing, each replica > 15 % of all."""
    addrs = [r.addr for r in replicas]
    hc = hash_client(addrs, retry_attempts=2, retry_timeout=0.05, dead_timeout=2,
                     ignore_exc=True)
    idlog = IdLog()
    rounds = [["%s:%d" % (ID_KEY, (b * KEYS_PER_GET + k) % ID_FAMILY) for k in range(KEYS_PER_GET)]
              for b in range(ID_FAMILY // KEYS_PER_GET)]
    plans = {}   # (the live servers, round) -> {server: [bytes keys]}, as HashClient routes them
    stats = {"rounds": 0, "gets": 0, "retries": 0, "errors": set(), "get_many": 0}
    log("HashClient ID keys: %s:0 .. %s:%d (the family of %s), %d per round, round robin" % (
        ID_KEY, ID_KEY, ID_FAMILY - 1, ID_KEY, KEYS_PER_GET))
    t0 = time.time()

    def plan(b):
        if hc._dead_clients:  # as HashClient._get_client: readmit after dead_timeout
            hc._retry_dead()
        ring = (tuple(hc.hasher.nodes), b)
        if ring not in plans:
            groups = {}
            for k in rounds[b]:
                c = hc._get_client(k)
                if c is not None:
                    groups.setdefault(c.server, []).append(k)
            plans[ring] = groups
        return plans[ring]

    def via_get_many(b):
        """One round through HashClient.get_many: every key answered, under the key sent."""
        keys = rounds[b]
        got = hc.get_many(keys)
        stats["get_many"] += 1
        if set(got) - set(keys):
            failures.append("HashClient.get_many: keys not asked %s" %
                            sorted(set(got) - set(keys))[:3])
        idlog.add([int(v) for v in got.values()])
        return len(got)

    def bulk(b):
        for server, keys in plan(b).items():
            client = hc.clients[hc._make_client_key(server)]
            try:
                if client.sock is None:
                    client._connect()
                idlog.add(Raw(sock=client.sock).get_ids([k.encode() for k in keys]))
                stats["gets"] += 1
            except (OSError, ConnectionError, RuntimeError) as e:
                client.close()
                stats["errors"].add(type(e).__name__ if not isinstance(e, RuntimeError) else str(e))
                # The application's retry, through HashClient's own get_many: a failure counts
                # against the server, after retry_attempts it is taken off the hash (and its keys
                # then hash to the others); what the others answer is kept.
                stats["retries"] += 1
                try:
                    idlog.add([int(v) for v in hc.get_many(keys).values()])
                except Exception as e2:  # noqa: BLE001 (whatever pymemcache raises: retried)
                    stats["errors"].add(type(e2).__name__)
                time.sleep(0.01)
        stats["rounds"] += 1

    def run_until(total, deadline, until=None):
        while (idlog.total < total or (until and not until())) and time.time() < deadline:
            bulk(stats["rounds"] % len(rounds))

    deadline = t0 + 90
    for b in range(100):   # 40,000 IDs through the public get_many
        n = via_get_many(b % len(rounds))
        if n != KEYS_PER_GET:
            failures.append("HashClient.get_many of %d ID keys gave %d IDs" % (KEYS_PER_GET, n))
            break
    run_until(int(target * 0.25), deadline)
    spread = {w: len(v) for w, v in sorted(idlog.by_worker.items())}
    n_spread = idlog.total
    victim = replicas[0]
    before = list(idlog.by_worker.get(victim.i, []))
    moves = []
    t_kill = time.time()
    victim.kill9()
    run_until(idlog.total + 1, deadline,
              lambda: "%s:%d" % (victim.addr, MC_PORT) not in hc.hasher.nodes)
    moves.append("%s killed at %d IDs, off HashClient's hash after %.3f s" % (
        victim.name, n_spread, time.time() - t_kill))
    run_until(int(target * 0.35), deadline)
    victim.start()
    victim.wait_ready()
    t_restart = time.time()
    # Until HashClient tries it again (dead_timeout), a round every 20 ms, as a client at a
    # modest rate would; then on at full speed with all three until the target.
    while len(idlog.by_worker.get(victim.i, [])) == len(before) and time.time() < deadline:
        bulk(stats["rounds"] % len(rounds))
        time.sleep(0.02)
    run_until(max(target, idlog.total + target // 2), deadline)
    after = idlog.by_worker.get(victim.i, [])[len(before):]
    if not after:
        failures.append("HashClient: %s never served again after its restart" % victim.name)
    else:
        moves.append("restarted, serves again %.3f s after (dead_timeout 2 s), its first ID "
                     "%d ms after its last before the kill" % (
                         time.time() - t_restart, (after[0] >> 22) - (before[-1] >> 22)))
    took = time.time() - t0
    split = {w: len(v) for w, v in sorted(idlog.by_worker.items())}
    log("FIGURE HashClient IDs: %d IDs in %.2f s (%d get_many + %d rounds of %d family keys, "
        "%d gets, %.0f IDs/s, one Python client, shared machine); before the kill %d IDs per "
        "worker id %s; %s; %d retries through HashClient.get_many, errors seen %s" % (
            idlog.total, took, stats["get_many"], stats["rounds"], KEYS_PER_GET, stats["gets"],
            idlog.total / took, n_spread, spread, "; ".join(moves), stats["retries"],
            sorted(stats["errors"])))
    dups = idlog.check("HashClient IDs", failures, workers=[r.i for r in replicas])
    for what, counts, total in (("before the kill", spread, n_spread),
                                ("over the run", split, idlog.total)):
        small = {w: n for w, n in counts.items() if n <= 0.15 * total}
        if len(counts) != len(replicas) or small:
            failures.append("HashClient IDs %s not spread over the three replicas (each > 15 %%): "
                            "%s of %d" % (what, counts, total))
    if idlog.total < target:
        failures.append("HashClient: %d IDs in 90 s, expected %d" % (idlog.total, target))
    hc.close()
    return dups


# ---- 2. nutcracker ---------------------------------------------------------------------------

class Nutcracker:
    """nutcracker in the root namespace on 127.0.0.1, one pool over the three replicas."""

    def __init__(self, work, replicas):
        self.port = sfharness.free_port()
        self.stats_port = sfharness.free_port()
        self.conf = os.path.join(work, "nutcracker.yml")
        self.logpath = os.path.join(work, "nutcracker.log")
        with open(self.conf, "w") as f:
            f.write(nutcracker_yml("127.0.0.1:%d" % self.port,
                                   ["%s:%d:1 %s" % (r.addr, MC_PORT, r.name) for r in replicas]))
        check = subprocess.run(["nutcracker", "-t", "-c", self.conf], capture_output=True,
                               text=True)
        if check.returncode != 0:
            raise AssertionError("nutcracker -t refuses the configuration: %s%s" % (
                check.stdout, check.stderr))
        # Stats every 200 ms (-i; the default is 30 s): each server's server_ejects count.
        self.proc = subprocess.Popen(["nutcracker", "-c", self.conf, "-o", self.logpath,
                                      "-a", "127.0.0.1", "-s", str(self.stats_port), "-i", "200"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise AssertionError("nutcracker did not listen:\n%s" % self.log_tail())

    def connect(self):
        return Raw("127.0.0.1", self.port)

    def stats(self):
        """The pool's stats (its counters, and {node name: {...}} per server) from the stats
        port's JSON."""
        import json
        with socket.create_connection(("127.0.0.1", self.stats_port), timeout=2) as s:
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return json.loads(data)["fleet"]

    def log_tail(self):
        return tail(self.logpath)

    def stop(self):
        faultutil.end_process(self.proc)


def nutcracker_yml(listen, servers):
    """The pool of docs/fleet.md: ketama (twemproxy 0.5's default and recommended
    distribution) over fnv1a_64 (its default hash), ejection on, the ring on node names."""
    return """fleet:
  listen: %s
  hash: fnv1a_64
  distribution: ketama
  timeout: %d
  auto_eject_hosts: true
  server_retry_timeout: %d
  server_failure_limit: %d
  server_connections: 1
  servers:
%s
""" % (listen, PROXY_TIMEOUT_MS, RETRY_TIMEOUT_MS, FAILURE_LIMIT,
       "".join("   - %s\n" % s for s in servers))


# The commands notes/memcache.md lists as supported, each with the reply memcached gives.
COMMANDS = [
    (b"set nc:a 5 0 3\r\nabc\r\n", [b"STORED"]),
    (b"get nc:a\r\n", [b"VALUE nc:a 5 3", b"abc", b"END"]),
    (b"add nc:a 0 0 1\r\nx\r\n", [b"NOT_STORED"]),
    (b"add nc:b 0 0 1\r\nx\r\n", [b"STORED"]),
    (b"replace nc:b 0 0 2\r\nyy\r\n", [b"STORED"]),
    (b"replace nc:none 0 0 1\r\nz\r\n", [b"NOT_STORED"]),
    (b"append nc:a 0 0 2\r\nde\r\n", [b"STORED"]),
    (b"prepend nc:a 0 0 2\r\n_-\r\n", [b"STORED"]),
    (b"get nc:a nc:b nc:none\r\n", [b"VALUE nc:a 5 7", b"_-abcde", b"VALUE nc:b 0 2", b"yy",
                                    b"END"]),
    (b"set nc:n 0 0 2\r\n10\r\n", [b"STORED"]),
    (b"incr nc:n 5\r\n", [b"15"]),
    (b"decr nc:n 20\r\n", [b"0"]),
    (b"incr nc:none 1\r\n", [b"NOT_FOUND"]),
    (b"touch nc:n 100\r\n", [b"TOUCHED"]),
    (b"touch nc:none 100\r\n", [b"NOT_FOUND"]),
    (b"delete nc:b\r\n", [b"DELETED"]),
    (b"delete nc:b\r\n", [b"NOT_FOUND"]),
    (b"set nc:q 0 0 1 noreply\r\nq\r\n", []),
    (b"get nc:q\r\n", [b"VALUE nc:q 0 1", b"q", b"END"]),
    (b"version\r\n", None),  # VERSION <ours>: checked by prefix
]


def nutcracker_commands(nc, failures):
    """Every command twemproxy forwards, through it; then cas (its token from gets), a get of
    keys on all three replicas (nutcracker splits it per server and joins the replies), and the
    ID keys."""
    c = nc.connect()
    bad = 0
    try:
        for req, want in COMMANDS:
            if not want and want is not None:
                c.sock.sendall(req)
                continue
            got = c.call(req)
            if want is None:
                ok = len(got) == 1 and got[0].startswith(b"VERSION ")
            else:
                ok = got == want
            if not ok:
                bad += 1
                failures.append("nutcracker: %r answered %r, expected %r" % (req, got, want))
        got = c.call(b"gets nc:a\r\n")
        token = got[0].split()[4] if got and got[0].startswith(b"VALUE ") else b"0"
        for req, want in ((b"cas nc:a 0 0 1 %s\r\nC\r\n" % token, [b"STORED"]),
                          (b"cas nc:a 0 0 1 %s\r\nD\r\n" % token, [b"EXISTS"]),
                          (b"get nc:a\r\n", [b"VALUE nc:a 0 1", b"C", b"END"])):
            got = c.call(req)
            if got != want:
                bad += 1
                failures.append("nutcracker: %r answered %r, expected %r" % (req, got, want))
        keys = [b"nc:multi:%d" % k for k in range(60)]
        for k in keys:
            c.call(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(k), k))
        got = c.call(b"get " + b" ".join(keys) + b"\r\n")
        want = [x for k in keys for x in (b"VALUE %s 0 %d" % (k, len(k)), k)] + [b"END"]
        if got != want:
            bad += 1
            failures.append("nutcracker: a get of 60 keys over 3 replicas answered %r..." %
                            got[:6])
    finally:
        c.close()
    # What it does not forward: it closes the client's connection (docs/fleet.md).
    closed = []
    for req in (b"mg nc:a v\r\n", b"gat 10 nc:a\r\n", b"stats\r\n", b"flush_all\r\n"):
        c = nc.connect()
        try:
            got = c.call(req)
        except (OSError, ConnectionError):
            got = None
        finally:
            c.close()
        closed.append(req.split()[0].decode())
        if got is not None:
            bad += 1
            failures.append("nutcracker answered %r with %r (it closes on what it does not "
                            "forward, docs/fleet.md)" % (req, got))
    log("nutcracker: %s: the client's connection closed, as docs/fleet.md says" % " ".join(
        closed))
    log("nutcracker: %d memcached commands through it (set get gets add replace append prepend "
        "cas delete incr decr touch version, noreply, a 60-key get over 3 replicas): %s" % (
            len(COMMANDS) + 4, "all as memcached answers" if not bad else "%d WRONG" % bad))


def owner_of(replicas, key):
    """The replica holding key (read on each directly), or None."""
    for r in replicas:
        c = Raw(r.addr)
        try:
            if c.call(b"get %s\r\n" % key)[0].startswith(b"VALUE "):
                return r
        finally:
            c.close()
    return None


def nutcracker_ids(nc, idlog, count, failures):
    """count IDs through nutcracker in gets of KEYS_PER_GET keys of the ID key family (sfid:0 ..
    sfid:3999 round robin): nutcracker splits each get over the replicas its ketama ring names
    and reassembles the reply in key order, each value under the key sent. All three replicas
    must serve a share (> 15 %). Then the name itself (`get sfid sfid`: its owner on the ring),
    gets, UUIDv7 and ULID keys."""
    c = nc.connect()
    t0 = time.time()
    got = 0
    per_worker = {}
    rounds = [[b"%s:%d" % (ID_KEY.encode(), (b * KEYS_PER_GET + k) % ID_FAMILY)
               for k in range(KEYS_PER_GET)] for b in range(ID_FAMILY // KEYS_PER_GET)]
    try:
        b = 0
        while got < count and time.time() - t0 < 30:
            try:
                ids = c.get_ids(rounds[b % len(rounds)])
            except RuntimeError as e:
                failures.append("nutcracker: a get of %d ID family keys: %s" % (KEYS_PER_GET, e))
                break
            b += 1
            idlog.add(ids)
            for x in ids:
                per_worker[worker_of(x)] = per_worker.get(worker_of(x), 0) + 1
            got += len(ids)
        small = {w: n for w, n in per_worker.items() if n <= 0.15 * got}
        if len(per_worker) != REPLICAS or small:
            failures.append("nutcracker: ID family keys not spread over the three replicas "
                            "(each > 15 %%): %s of %d" % (dict(sorted(per_worker.items())), got))
        lines = c.call(b"gets %s %s\r\n" % (ID_KEY.encode(), ID_KEY.encode()))
        heads_ok = len(lines) == 5 and all(ln.startswith(b"VALUE %s 0 " % ID_KEY.encode())
                                           for ln in lines[0:4:2])
        if not heads_ok or int(lines[1]) >= int(lines[3]):
            failures.append("nutcracker: gets %s %s answered %r" % (ID_KEY, ID_KEY, lines))
        else:
            idlog.add([int(lines[1]), int(lines[3])])
        for key, length in ((UUID_KEY, 36), (ULID_KEY, 26)):
            lines = c.call(b"get %s %s\r\n" % (key.encode(), key.encode()))
            ok = len(lines) == 5 and lines[0] == b"VALUE %s 0 %d" % (key.encode(), length) \
                and len(lines[1]) == length and lines[1] != lines[3]
            if not ok:
                failures.append("nutcracker: get %s answered %r" % (key, lines[:5]))
    finally:
        c.close()
    took = time.time() - t0
    log("FIGURE nutcracker IDs: %d IDs in %.2f s through nutcracker (gets of %d family keys), "
        "per worker id %s" % (got, took, KEYS_PER_GET, dict(sorted(per_worker.items()))))


def nutcracker_eject_readmit(nc, replicas, idlog, failures):
    """kill -9 the replica that owns the ID key (without IDs: a cache key) on nutcracker's ring
    and ask through nutcracker every 20 ms: SERVER_ERROR until server_failure_limit failures
    eject it, then answers from another replica (its keys moved); restart it on its data_dir:
    after server_retry_timeout nutcracker tries it again and its keys come back to it, its IDs
    never one issued before (the lease). Also a cache key of the killed replica: a miss after
    the ejection, its new write on a survivor."""
    c = nc.connect()
    by_worker = {r.i: r for r in replicas}
    # A cache key on the victim, written through nutcracker before the kill.
    if idlog is not None:
        victim = by_worker[worker_of(c.ids(ID_KEY, 1)[0])]
    else:
        c.call(b"set nc:victim:0 0 0 3\r\nold\r\n")
        victim = owner_of(replicas, b"nc:victim:0")
    key = next(b"nc:victim:%d" % k for k in range(1000)
               if c.call(b"set nc:victim:%d 0 0 3\r\nold\r\n" % k) == [b"STORED"] and
               owner_of([victim], b"nc:victim:%d" % k) is victim)
    before_kill = list(idlog.by_worker.get(victim.i, [])) if idlog is not None else []
    # Let a periodic snapshot (every second) take the key "old" before the kill.
    n_snap = snapshots(victim.addr)
    if n_snap is None:
        failures.append("%s: no snowflaked_cache_snapshots_total in /metrics" % victim.name)
        n_snap = float("inf")
    t_snap = time.time()
    while (snapshots(victim.addr) or 0) <= n_snap + 1 and time.time() - t_snap < 5:
        time.sleep(0.1)
    log("nutcracker: the %s and cache key %s are on %s; kill -9 it" % (
        "ID key " + ID_KEY if idlog is not None else "probe", key.decode(), victim.name))

    events = []   # (seconds since t_ref, replica index that answered, or the error line)
    seq = [0]

    def answer():
        """Which replica answers for the victim's keys through nutcracker (or the error)."""
        if idlog is not None:
            ids = c.ids(ID_KEY, 10)
            idlog.add(ids)
            return worker_of(ids[0])
        seq[0] += 1
        value = b"%08d" % seq[0]
        reply = c.call(b"set %s 0 0 8\r\n%s\r\n" % (key, value))
        if reply != [b"STORED"]:
            raise RuntimeError(reply[-1].decode(errors="replace"))
        for r in replicas:
            if r.proc.poll() is None:
                d = Raw(r.addr)
                try:
                    if d.call(b"get %s\r\n" % key)[1:2] == [value]:
                        return r.i
                finally:
                    d.close()
        return "stored nowhere"

    def ask(t_ref):
        nonlocal c
        try:
            events.append((time.time() - t_ref, answer()))
        except RuntimeError as e:
            events.append((time.time() - t_ref, str(e)))
        except (OSError, ConnectionError) as e:
            events.append((time.time() - t_ref, "connection: %r" % e))
            c.close()
            c = nc.connect()
        time.sleep(0.02)

    t_kill = time.time()
    victim.kill9()
    while time.time() - t_kill < 10:
        ask(t_kill)
        if isinstance(events[-1][1], int) and events[-1][1] != victim.i:
            break
    eject = next((t for t, w in events if isinstance(w, int) and w != victim.i), None)
    errors = [w for _, w in events if not isinstance(w, int)]
    log("FIGURE nutcracker ejection: %s ejected %.3f s after kill -9, after %d failed requests "
        "(%s); its keys then answered by snowflaked-%s" % (
            victim.name, eject if eject is not None else -1, len(errors),
            sorted(set(errors)), events[-1][1]))
    if eject is None:
        failures.append("nutcracker: %s not ejected within 10 s of kill -9: %s" % (
            victim.name, events[-5:]))
        c.close()
        return
    if len(errors) > FAILURE_LIMIT * 3:
        failures.append("nutcracker: %d failed requests before the ejection (limit %d)" % (
            len(errors), FAILURE_LIMIT))
    # A cache key of the dead replica: a miss (its data went with it), a write lands on a
    # survivor.
    if idlog is not None:
        miss = c.call(b"get %s\r\n" % key)
        stored = c.call(b"set %s 0 0 3\r\nnew\r\n" % key)
        holder = owner_of([r for r in replicas if r is not victim], key)
        log("nutcracker: after the ejection, get %s -> %r, set -> %r on %s" % (
            key.decode(), miss, stored, holder.name if holder else None))
        if miss != [b"END"] or stored != [b"STORED"] or holder is None:
            failures.append("nutcracker: the ejected replica's key: get %r, set %r, on %s" % (
                miss, stored, holder))
    # Answers from the survivors while the victim stays down, past server_retry_timeout: then
    # nutcracker puts it back on the ring and tries it again (server_failure_limit failures
    # more), as documented: a client retries a SERVER_ERROR.
    t_down = time.time()
    while time.time() - t_down < RETRY_TIMEOUT_MS / 1000.0 * 1.5:
        ask(t_kill)
    down_errors = [w for t, w in events if t > eject and not isinstance(w, int)]

    # Restart on the same data_dir and ordinal, as the StatefulSet does.
    t_restart = time.time()
    victim.start()
    victim.wait_ready()
    t_ready = time.time() - t_restart
    n0 = len(events)
    limit = RETRY_TIMEOUT_MS / 1000.0 * 3 + 10
    while time.time() - t_restart < limit:
        ask(t_restart)
        if events[-1][1] == victim.i:
            break
    back = [t for t, w in events[n0:] if w == victim.i]
    after_errors = [w for _, w in events[n0:] if not isinstance(w, int)]
    log("FIGURE nutcracker readmission: %s ready %.3f s after its restart, its keys back on it "
        "%.3f s after the restart (server_retry_timeout %d ms); errors: %d while ejected "
        "(%.1f s), %d after the restart %s" % (
            victim.name, t_ready, back[0] if back else -1, RETRY_TIMEOUT_MS,
            len(down_errors), time.time() - t_kill, len(after_errors),
            sorted(set(after_errors))))
    if not back:
        failures.append("nutcracker: %s not readmitted within %.0f s of its restart: %s" % (
            victim.name, limit, events[-5:]))
    if idlog is not None and back:
        # The readmitted replica restored its snapshot: the cache key it owned reads its value
        # from before the kill, while the write made during the ejection sits, unread, on a
        # survivor (docs/fleet.md: why a cache behind an ejecting proxy wants short TTLs or
        # cache.persist off).
        c2 = nc.connect()
        try:
            now = c2.call(b"get %s\r\n" % key)
        finally:
            c2.close()
        holder = owner_of([r for r in replicas if r is not victim], key)
        log("FIGURE nutcracker readmission, cache: %s reads %r through nutcracker (restored from "
            "%s's snapshot); the value written while it was out stays on %s" % (
                key.decode(), now[1] if len(now) == 3 else now, victim.name,
                holder.name if holder else None))
        if now[:2] != [b"VALUE %s 0 3" % key, b"old"] or holder is None:
            failures.append("nutcracker: after the readmission %s reads %r (expected the "
                            "snapshot's 'old'), the survivor's copy on %s" % (key, now, holder))
    if idlog is not None:
        # More IDs from the readmitted replica; all of its IDs after the restart must be above
        # all it issued before the kill (IdLog.check: increasing per worker, no duplicate).
        for _ in range(50):
            ask(t_restart)
        after = idlog.by_worker.get(victim.i, [])[len(before_kill):]
        log("nutcracker: %s issued %d IDs before the kill, %d after its readmission; the first "
            "after is %d ms after the last before" % (
                victim.name, len(before_kill), len(after),
                ((after[0] >> 22) - (before_kill[-1] >> 22)) if after and before_kill else -1))
        if after and before_kill and after[0] <= before_kill[-1]:
            failures.append("nutcracker: %s reissued: %d after the restart <= %d before" % (
                victim.name, after[0], before_kill[-1]))
    c.close()
    time.sleep(0.5)  # two stats intervals
    stats = nc.stats()
    at = {n: v.get("server_ejected_at") for n, v in sorted(stats.items()) if isinstance(v, dict)}
    log("FIGURE nutcracker stats: server_ejects %s (the pool's), server_ejected_at %s" % (
        stats.get("server_ejects"), ", ".join(
            "%s %s" % (n, "%.3f s after the kill" % (v / 1e6 - t_kill) if v else "never")
            for n, v in at.items())))
    if back and at.get(victim.name):
        log("FIGURE nutcracker readmission: %s back on the ring %.3f s after its last ejection "
            "(server_retry_timeout %d ms)" % (victim.name, t_restart + back[0] -
                                              at[victim.name] / 1e6, RETRY_TIMEOUT_MS))
    if not stats.get("server_ejects") or not at.get(victim.name) or \
            any(v for n, v in at.items() if n != victim.name):
        failures.append("nutcracker stats: server_ejects %s, server_ejected_at %s: expected "
                        "ejections of %s alone" % (stats.get("server_ejects"), at, victim.name))


def docs_pool_ok(work, failures):
    """docs/fleet.md's nutcracker.yml passes nutcracker's own check (-t)."""
    with open(os.path.join(ROOT, "docs", "fleet.md")) as f:
        doc = f.read()
    start = doc.find("```yaml\n")
    block = doc[start + 8:doc.find("```", start + 8)] if start >= 0 else ""
    path = os.path.join(work, "docs-nutcracker.yml")
    with open(path, "w") as f:
        f.write(block)
    r = subprocess.run(["nutcracker", "-t", "-c", path], capture_output=True, text=True)
    ok = r.returncode == 0 and "fleet:" in block and "distribution: ketama" in block
    log("docs/fleet.md's nutcracker.yml: %s" % ("nutcracker -t: syntax is ok" if ok else
                                                 "REFUSED"))
    if not ok:
        failures.append("docs/fleet.md's nutcracker.yml: nutcracker -t says %s%s" % (
            r.stdout, r.stderr))


def build_has_ids(build):
    """Whether this snowflaked knows cache.memcached_id_keys (its --check-config accepts it)."""
    r = subprocess.run([os.path.join(build, "snowflaked"), "-c", CONFIG, "--set",
                        "snowflake.worker_id=0", "--set",
                        "cache.memcached_id_keys.snowflake=" + ID_KEY, "--check-config"],
                       capture_output=True, text=True)
    return r.returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", "--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-n", "--ids", type=int, default=1000000,
                    help="IDs to fetch through HashClient (default 1,000,000)")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    if os.geteuid() != 0:
        sys.exit("test_fleet_clients: needs root (ip netns)")
    why = faultutil.ensure_programs({"ip": "iproute2", "nutcracker": "nutcracker"})
    if why:
        sys.exit("test_fleet_clients: " + why)
    sfharness.debian_import("pymemcache.client.hash", "python3-pymemcache")
    if not os.access(os.path.join(args.build, "snowflaked"), os.X_OK):
        sys.exit("test_fleet_clients: %s/snowflaked missing (make build)" % args.build)
    ids = build_has_ids(args.build)

    work = tempfile.mkdtemp(prefix="sf_fleet_")
    net, replicas, nc, failures = None, [], None, []
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    t0 = time.time()
    try:
        net = Net(SUBNET, TAG)
        addrs = [net.add(i) for i in range(REPLICAS)]
        peers = ",".join("%s:8080" % a for _, a in addrs)
        replicas = [Replica(args.build, i, ns, addr, work, peers, ids)
                    for i, (ns, addr) in enumerate(addrs)]
        for r in replicas:   # in parallel, as podManagementPolicy: Parallel
            r.start()
        for r in replicas:
            r.wait_ready()
        log("3 replicas ready at %s, memcached on %d" % (
            ", ".join(r.addr for r in replicas), MC_PORT))

        hashclient_cache(replicas, failures)
        idlog = None
        if ids:
            hashclient_ids(replicas, args.ids, failures)
        else:
            failures.append("this build has no memcached-protocol IDs (cache.memcached_id_keys): "
                            "their HashClient and nutcracker parts did not run")

        docs_pool_ok(work, failures)
        nc = Nutcracker(work, replicas)
        log("nutcracker %s on 127.0.0.1:%d (stats on %d), pool:\n%s" % (
            subprocess.run(["nutcracker", "-V"], capture_output=True,
                           text=True).stderr.split("\n")[0].split()[-1],
            nc.port, nc.stats_port, open(nc.conf).read().rstrip()))
        nutcracker_commands(nc, failures)
        if ids:
            idlog = IdLog()
            nutcracker_ids(nc, idlog, 100000, failures)
        nutcracker_eject_readmit(nc, replicas, idlog, failures)
        if idlog:
            idlog.check("nutcracker IDs across kill -9, ejection and readmission", failures)
    finally:
        if nc:
            nc.stop()
        for r in replicas:
            r.stop(failures)
        if net:
            net.remove()
        shutil.rmtree(work, ignore_errors=True)
    finish("test_fleet_clients", t0, failures, say=log)


if __name__ == "__main__":
    main()
