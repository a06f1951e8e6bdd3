#!/usr/bin/env python3
"""Side by side: snowflaked against a peer under the same load from the same client (sfload),
on the same machine, alternating A/B runs, median of --repeat. One table of ratios (ours/peer)
with req/s, p99 latency and server CPU-microseconds per request, then the machine and the exact
commands. Loopback only; every run is bounded in time; every process started here is stopped by
PID (also on Ctrl-C).

    loadtest/bench.py                      # everything (about 21 minutes)
    loadtest/bench.py --quick              # 1 run of 3 s each, short sweeps (about 5 minutes)
    loadtest/bench.py --only peers,sync,alloc  -t 5 --repeat 3
    loadtest/bench.py --only sweep,openloop    # the two sweeps and their plots (about 2.5 min)
    loadtest/bench.py --only tls -t 5 --repeat 3
    loadtest/bench.py --only memcache_ids -t 5 --repeat 3   # about 1 minute

Sections:
  peers  GET /id vs nginx `return 200` (keep-alive, pipelined 16, connection per request at
         -c 1000); the cache over the memcached protocol vs memcached; raw TCP echo vs the epoll
         reference (loadtest/epoll_echo.c); HTTP echo of 1 KiB bodies vs nginx's echo module.
         Servers get one thread each, pinned to core 0; sfload runs on core 1. Then the
         keep-alive and pipelined HTTP rows again with h2load --h1 as the client.
  tls    the same over TLS 1.3 (one certificate, EC P-256, made here with openssl; one suite,
         TLS_AES_128_GCM_SHA256, pinned by sfload; the name checked against a private CA): GET /id
         keep-alive vs nginx (`ssl_protocols TLSv1.3`), one connection per request with a full
         handshake and with a resumed one (tickets) vs nginx, server CPU-us per connection; the
         memcached protocol vs memcached -Z. Our rows need the TLS listeners (server.tls.*,
         cache.memcached_tls.* in `snowflaked --print-schema`); without them only the peers run.
  sync   GET /id with the generator in atomic, spinlock and mutex mode, keep-alive and connection
         per request at -c 1000, 3000, 5000 (2 server threads, unpinned).
  alloc  glibc, jemalloc, tcmalloc and mimalloc builds (-DSF_MALLOC) on connection per request
         and on cache sets (where the daemon allocates).
  sweep  closed loop at 1..1000 connections: req/s and p50/p99/p99.9 of ours vs each peer
         (HTTP GET /id vs nginx, memcached vs memcached, TCP echo vs epoll_echo).
  openloop  sfload -R stepping the offered rate up to ~1.25x the closed-loop capacity: latency vs
         offered load per server; the knee (capacity) is the highest offered rate served at
         >= 95 % with p99 under --knee-p99-ms.
  formats  GET /id, /uuid, /ulid, /typeid?prefix=user (and /ids, /uuids, /ulids, /typeids at
         count=20) on one server thread pinned to core 0, sfload on core 1: req/s and server
         CPU-us per request against /id.
  sequences  GET /seq/{name} (segment mode) and /seqs/{name}?count=20 next to GET /id and
         /ids?count=20, the same pinning: req/s and server CPU-us per request against /id.
  memcache_ids  Snowflake IDs over the memcached protocol (a reserved key, katsubushi-style:
         `get id`, and the key 20 times in one get) against HTTP GET /id and /ids?count=20, and
         a sequence key (`get seq:bench`) against GET /seq/bench, the same pinning: req/s, IDs/s
         and server CPU-us per ID.

Every figure also goes to OUT/results.json (default BUILD/bench), and loadtest/plots.py draws
it with gnuplot into OUT (.dat files and .svg images; `plots.py results.json OUTDIR` redraws).
"""
import argparse
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import plots
from benchlib import ROOT, cpu_seconds, free_port, make_certs, rss_kib, wait_port

PEER_PACKAGES = ("nginx libnginx-mod-http-echo memcached libjemalloc-dev libgoogle-perftools-dev "
                 "libmimalloc-dev nghttp2-client gnuplot-nox")
ALLOCATORS = ("glibc", "jemalloc", "tcmalloc", "mimalloc")
# The part of nginx's configuration every peer here shares: one worker, no logging, the same
# keep-alive limits, temporary files in the run's directory.
NGINX_CONF_HEAD = """
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
daemon off;
{load_echo}
events {{ worker_connections 20000; multi_accept on; }}
http {{
    access_log off;
    server_tokens off;
    keepalive_requests 100000;
    keepalive_timeout 60s;
    client_body_buffer_size 64k;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
"""
NGINX_CONF = NGINX_CONF_HEAD + """
    server {{
        listen 127.0.0.1:{port} backlog=4096 deferred;  # TCP_DEFER_ACCEPT, as ours by default
        location /echo {{ echo_read_request_body; echo_request_body; }}
        location / {{ default_type application/json; return 200 '{{"id":"915000000000000000"}}'; }}
    }}
}}
"""
ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"
# nginx over TLS for the tls section (and sfload's TLS tests): the same answer as NGINX_CONF's,
# one worker, the certificate and key given, session tickets on (TLS 1.3 resumption is by
# ticket). {extra} takes more server blocks (tests: mTLS, a plaintext port).
NGINX_TLS_CONF = NGINX_CONF_HEAD + """
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols {protocols};
    ssl_session_tickets on;
    server {{
        listen 127.0.0.1:{port} ssl backlog=4096 deferred;
        location /metrics {{ default_type text/plain;
                             return 200 'snowflaked_info{{layout="41/5/5/12"}} 1\\n'; }}
        location / {{ default_type application/json; return 200 '{{"id":"915000000000000000"}}'; }}
    }}
{extra}
}}
"""
TLS_SUITE = "TLS_AES_128_GCM_SHA256"  # the one TLS 1.3 suite sfload offers in the tls section
# The daemon's TLS listeners (helper T's keys): what the tls section's rows of ours need.
OURS_TLS_KEYS = {"http": ("server.tls.port", "server.tls.cert_file", "server.tls.key_file"),
                 "memcache": ("cache.memcached_tls.port", "cache.memcached_tls.cert_file",
                              "cache.memcached_tls.key_file")}
# Connection counts of the closed-loop sweep; they include the peers rows' 50 and 100, whose
# req/s sets the open-loop steps: fractions of that closed-loop capacity.
SWEEP_LEVELS = (1, 10, 50, 100, 1000)
SWEEP_LEVELS_QUICK = (1, 50, 100, 1000)
OPENLOOP_FRACTIONS = (0.25, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75)
OPENLOOP_FRACTIONS_QUICK = (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25)


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = tempfile.mkdtemp(prefix="sf_bench_")
        self.procs = []
        self.commands = []
        self.build = os.path.join(ROOT, args.build)
        self.sfload = os.path.join(self.build, "sfload")
        self.results = {"sweep": [], "peers": [], "h2load": [], "openloop": [], "tls": []}
        self.ours_tls_missing = None  # why the tls section's rows of ours cannot run
        # The sweeps are many short runs (about 1 + 1.5 minutes in all; --quick about 1.5).
        self.sweep_seconds = 1 if args.quick else 1.5
        self.openloop_seconds = 1 if args.quick else 1.5
        self.body_1k = os.path.join(self.work, "body-1k")
        with open(self.body_1k, "wb") as f:
            f.write(b"x" * 1024)

    # ---- processes ------------------------------------------------------------------------

    def spawn(self, argv, env=None, cpu=None, cwd=None):
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu)] + argv
        shown = ["%s=%s" % (k, v) for k, v in sorted((env or {}).items())
                 if k.startswith("SNOWFLAKED_")] + argv
        self.commands.append(" ".join(shlex.quote(a) for a in shown))
        log = open(os.path.join(self.work, "server-%d.log" % len(self.procs)), "wb")
        p = subprocess.Popen(argv, env=env, cwd=cwd or self.work, stdout=log,
                             stderr=subprocess.STDOUT, preexec_fn=raise_nofile)
        log.close()  # the server has its own descriptor
        self.procs.append(p)
        return p

    def stop(self, p):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in list(self.procs):
            self.stop(p)

    def ours(self, threads=1, cpu=0, extra=(), build=None, env_extra=None):
        port, mc, echo = free_port(), free_port(), free_port()
        data = tempfile.mkdtemp(dir=self.work)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
        env.update({"SNOWFLAKED_DATA_DIR": data, "SNOWFLAKED_SERVER_PORT": str(port),
                    "SNOWFLAKED_SERVER_THREADS": str(threads),
                    "SNOWFLAKED_CACHE_MEMCACHED_PORT": str(mc),
                    "SNOWFLAKED_ECHO_TCP_PORT": str(echo),
                    "SNOWFLAKED_SERVER_MAX_CONNECTIONS": "20000",
                    "SNOWFLAKED_SERVER_BACKLOG": "4096",
                    "SNOWFLAKED_SERVER_MAX_REQUESTS_PER_CONNECTION": "100000",
                    "SNOWFLAKED_CACHE_PERSIST": "false",
                    "SNOWFLAKED_LOG_LEVEL": "warn"})
        env.update(env_extra or {})
        argv = [os.path.join(build or self.build, "snowflaked")]
        for kv in extra:
            argv += ["--set", kv]
        p = self.spawn(argv, env=env, cpu=cpu)
        wait_port(port)
        return {"proc": p, "pid": p.pid, "http": port, "memcache": mc, "echo": echo}

    def schema(self):
        """{key: schema row} of the daemon under test (snowflaked --print-schema), {} when it
        cannot say."""
        r = subprocess.run([os.path.join(self.build, "snowflaked"), "--print-schema"],
                           capture_output=True, text=True, timeout=30)
        try:
            return {k["key"]: k for k in json.loads(r.stdout)} if r.returncode == 0 else {}
        except ValueError:
            return {}

    def ours_tls(self, certs, cpu=0):
        """Ours with the TLS listeners on (HTTP and memcached), TLS 1.3 only, the tls section's
        suite, tickets on; None (and the reason in self.ours_tls_missing) when this build lacks
        them or they do not come up."""
        schema = self.schema()
        missing = [k for keys in OURS_TLS_KEYS.values() for k in keys if k not in schema]
        if missing:
            self.ours_tls_missing = "%s does not know %s" % (
                os.path.join(self.args.build, "snowflaked"), ", ".join(missing))
            return None
        https, mcs = free_port(), free_port()
        want = {"server.tls.port": str(https), "server.tls.cert_file": certs["server.pem"],
                "server.tls.key_file": certs["server.key"], "server.tls.ciphersuites": TLS_SUITE,
                "server.tls.session_tickets": "true", "cache.memcached_tls.port": str(mcs),
                "cache.memcached_tls.cert_file": certs["server.pem"],
                "cache.memcached_tls.key_file": certs["server.key"]}
        row = schema.get("server.tls.min_version")
        if row:  # "1.3", "TLSv1.3", whatever the daemon spells it
            want["server.tls.min_version"] = next(
                (c for c in row.get("choices", []) if c.endswith("1.3")), "1.3")
        env = {schema[k]["env"]: v for k, v in want.items() if k in schema}
        srv = self.ours(cpu=cpu, env_extra=env)
        for port in (https, mcs):
            if not port_opens(srv["proc"], port):
                self.ours_tls_missing = "the daemon did not listen on its TLS port %d (log: %s)" % (
                    port, os.path.join(self.work, "server-*.log"))
                self.stop(srv["proc"])
                return None
        srv.update(https=https, memcache_tls=mcs)
        return srv

    def nginx(self):
        port = free_port()
        d = tempfile.mkdtemp(dir=self.work)
        conf = os.path.join(d, "nginx.conf")
        load = "load_module %s;" % ECHO_MODULE if os.path.exists(ECHO_MODULE) else ""
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(dir=d, port=port, load_echo=load))
        p = self.spawn(["nginx", "-c", conf, "-p", d], cpu=0)
        wait_port(port)
        return {"proc": p, "pid": worker_pid(p.pid), "http": port}

    def nginx_tls(self, certs, cpu=0, protocols="TLSv1.3", extra=""):
        port = free_port()
        d = tempfile.mkdtemp(dir=self.work)
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_TLS_CONF.format(dir=d, port=port, cert=certs["server.pem"],
                                          key=certs["server.key"], protocols=protocols,
                                          extra=extra, load_echo=""))
        p = self.spawn(["nginx", "-c", conf, "-p", d], cpu=cpu)
        wait_port(port)
        return {"proc": p, "pid": worker_pid(p.pid), "https": port, "dir": d}

    def memcached_tls(self, certs, cpu=0, ssl_opts=()):
        """memcached -Z (Debian's is built with TLS) with the certificate; ssl_opts: more -o
        settings (ssl_verify_mode=2, ssl_ca_cert=...)."""
        port = free_port()
        root = ["-u", "root"] if os.geteuid() == 0 else []
        opts = ["ssl_chain_cert=" + certs["server.pem"], "ssl_key=" + certs["server.key"]]
        p = self.spawn(["memcached", "-Z", "-o", ",".join(opts + list(ssl_opts)), "-l",
                        "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1", "-m", "1024", "-c",
                        "20000"] + root, cpu=cpu)
        wait_port(port)
        return {"proc": p, "pid": p.pid, "memcache_tls": port}

    def memcached(self, cpu=0):
        port = free_port()
        root = ["-u", "root"] if os.geteuid() == 0 else []  # memcached refuses root otherwise
        p = self.spawn(["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1",
                        "-m", "1024", "-c", "20000"] + root, cpu=cpu)
        wait_port(port)
        return {"proc": p, "pid": p.pid, "memcache": port}

    def epoll_echo(self):
        port = free_port()
        p = self.spawn([os.path.join(self.build, "epoll_echo"), str(port)], cpu=0)
        wait_port(port)
        return {"proc": p, "pid": p.pid, "echo": port}

    # ---- load -------------------------------------------------------------------------------

    def load(self, server, args, target, cpu=1, seconds=None, warmup=1):
        """Runs sfload against the server (for seconds, default -t); returns its JSON report."""
        seconds = seconds or self.args.time
        argv = [self.sfload, "--json", "-q", "-t", str(seconds), "--warmup", str(warmup),
                "--server-pid", str(server["pid"])] + args + [target]
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu)] + argv
        self.commands.append(" ".join(shlex.quote(a) for a in argv))
        r = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + warmup + 120,
                           preexec_fn=raise_nofile)
        try:
            report = json.loads(r.stdout)
        except ValueError:
            sys.exit("sfload failed (%d): %s %s" % (r.returncode, r.stdout[-500:], r.stderr[-500:]))
        errors = sum(report.get("errors", {}).values())
        if errors:
            print("  note: %d errors: %s" % (errors, {k: v for k, v in report["errors"].items()
                                                     if v}), file=sys.stderr)
        return report

    def h2load(self, server, args, url, cpu=1):
        """Runs h2load --h1 against the server for -t seconds after 1 s of warm-up; returns
        {rps, mean_us, sd_us, max_us, cpu_us}. The server's CPU is read from /proc when the
        warm-up ends and after the run, so it covers the measured window (h2load has no
        --server-pid)."""
        seconds = min(self.args.time, 3)  # a second client, not the main figure: 3 s are enough
        argv = ["h2load", "--h1", "-t", "1", "-D", str(seconds), "--warm-up-time", "1"] + \
            args + [url]
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu)] + argv
        self.commands.append(" ".join(shlex.quote(a) for a in argv))
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=raise_nofile)
        time.sleep(1.0)
        before = cpu_seconds(server["pid"])
        try:
            out, _ = p.communicate(timeout=seconds + 120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        after = cpu_seconds(server["pid"])
        fig = parse_h2load(out)
        if fig is None:
            sys.exit("h2load failed (%d): %s" % (p.returncode, out[-800:]))
        if fig.pop("failed"):
            print("  note: h2load: %s" % re.search(r"requests: .*", out).group(0), file=sys.stderr)
        done = fig.pop("done")
        fig["cpu_us"] = (after - before) * 1e6 / done if done else 0.0
        return fig


H2LOAD_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def parse_h2load(out):
    """h2load's summary: 'finished in 5.00s, 123.00 req/s, ...', 'requests: N total, ... N done,
    N succeeded, N failed, N errored, N timeout' and 'time for request: min max mean sd +/-sd'.
    None when those lines are missing."""
    rps = re.search(r"^finished in [\d.]+s, ([\d.]+) req/s", out, re.M)
    reqs = re.search(r"^requests: .* (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, "
                     r"(\d+) timeout", out, re.M)
    lat = re.search(r"^time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+"
                    r"([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", out, re.M)
    if not (rps and reqs and lat):
        return None
    us = [float(lat.group(i)) * H2LOAD_UNITS[lat.group(i + 1)] for i in (1, 3, 5, 7)]
    done, ok = int(reqs.group(1)), int(reqs.group(2))
    return {"rps": float(rps.group(1)), "min_us": us[0], "max_us": us[1], "mean_us": us[2],
            "sd_us": us[3], "done": done, "failed": done - ok + int(reqs.group(4))}


def raise_nofile():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def port_opens(proc, port, seconds=10):
    """True once something accepts on port, False if proc exits or seconds pass first."""
    import socket
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def worker_pid(master):
    """nginx's worker (worker_processes 1): the one child of the master."""
    for _ in range(100):
        try:
            with open("/proc/%d/task/%d/children" % (master, master)) as f:
                kids = f.read().split()
            if kids:
                return int(kids[0])
        except OSError:
            pass
        time.sleep(0.05)
    return master


def figures(report):
    server = report.get("server", {})
    return (report["requests_per_sec"], report["latency_us"]["p99"],
            server.get("cpu_us_per_request", 0.0))


def median_figures(runs):
    return tuple(statistics.median(r[i] for r in runs) for i in range(3))


def ratio(a, b):
    return "%.2f" % (a / b) if b else "-"


def as_dict(fig):
    return {"rps": fig[0], "p99": fig[1], "cpu_us": fig[2]}


def print_row(name, ours, peer):
    print("%-34s %10.0f %10.0f %6s | %8.0f %8.0f %6s | %7.2f %7.2f %6s" % (
        name, ours[0], peer[0], ratio(ours[0], peer[0]), ours[1], peer[1], ratio(ours[1], peer[1]),
        ours[2], peer[2], ratio(ours[2], peer[2])), flush=True)


# ---- sections ------------------------------------------------------------------------------


def http_rows(b):
    """The HTTP workloads of the peers section: (name, sfload arguments, path)."""
    return [
        ("GET /id keep-alive -c 50", ["-c", "50"], "/id"),
        ("GET /id pipelined 16 -c 50", ["-c", "50", "-P", "16"], "/id"),
        ("GET /id conn-per-request -c 1000", ["-c", "1000", "--close"], "/id"),
        ("POST /echo 1 KiB keep-alive -c 50",
         ["-c", "50", "-X", "POST", "--body-file", b.body_1k], "/echo"),
    ]


def other_rows(b):
    """The other protocols: (name, server port key, peer starter, sfload arguments)."""
    return [
        ("memcached 90:10 get:set -c 50", "memcache", b.memcached,
         ["--mode", "memcache", "-c", "50", "--keys", "10000", "--value-size", "100"]),
        ("TCP echo 32 B ping-pong -c 100", "echo", b.epoll_echo,
         ["--mode", "echo", "-c", "100", "--msg-size", "32"]),
    ]


PEER_NAMES = {"memcache": "memcached", "echo": "epoll_echo"}


def h2load_rows():
    """The HTTP rows again with h2load --h1 as the client: (name, h2load arguments, path). For
    HTTP/1.1, h2load's -m is the pipelining depth."""
    return [
        ("GET /id keep-alive -c 50", ["-c", "50"], "/id"),
        ("GET /id pipelined 16 -c 50 (-m 16)", ["-c", "50", "-m", "16"], "/id"),
    ]


def section_peers(b):
    print("\n== snowflaked vs peers: 1 server thread on core 0, sfload on core 1, median of %d ==" %
          b.args.repeat)
    print("%-34s %10s %10s %6s | %8s %8s %6s | %7s %7s %6s" % (
        "workload", "ours/s", "peer/s", "ratio", "ours p99", "peer p99", "ratio", "ours us",
        "peer us", "ratio"))
    print("%-34s %29s | %24s | %22s" % ("", "requests per second", "p99 latency (us)",
                                         "server CPU-us per request"))
    for name, args, path in http_rows(b):
        if path == "/echo" and not os.path.exists(ECHO_MODULE):
            print("%-34s (skipped: nginx echo module not installed)" % name)
            continue
        runs = {"ours": [], "peer": []}
        for _ in range(b.args.repeat):
            for who in ("ours", "peer"):
                srv = b.ours() if who == "ours" else b.nginx()
                try:
                    rep = b.load(srv, args, "http://127.0.0.1:%d%s" % (srv["http"], path))
                    runs[who].append(figures(rep))
                finally:
                    b.stop(srv["proc"])
        ours, peer = median_figures(runs["ours"]), median_figures(runs["peer"])
        print_row(name, ours, peer)
        b.results["peers"].append({"name": name, "peer": "nginx", "ours": as_dict(ours),
                                   "peer_figures": as_dict(peer)})

    for name, kind, peer, args in other_rows(b):
        runs = {"ours": [], "peer": []}
        for _ in range(b.args.repeat):
            for who in ("ours", "peer"):
                srv = b.ours() if who == "ours" else peer()
                try:
                    rep = b.load(srv, args, "127.0.0.1:%d" % srv[kind])
                    runs[who].append(figures(rep))
                finally:
                    b.stop(srv["proc"])
        ours, peer = median_figures(runs["ours"]), median_figures(runs["peer"])
        print_row(name, ours, peer)
        b.results["peers"].append({"name": name, "peer": PEER_NAMES[kind], "ours": as_dict(ours),
                                   "peer_figures": as_dict(peer)})
    section_h2load(b)


def section_h2load(b):
    """The HTTP rows through a second client, h2load --h1 (nghttp2): its req/s and its
    latency summary (mean, sd, max: h2load prints no percentiles), server CPU from /proc."""
    print("\n-- the same HTTP rows with h2load --h1 (1 client thread on core 1, %d s after 1 s of "
          "warm-up), median of %d --" % (min(b.args.time, 3), b.args.repeat))
    print("%-34s %10s %10s %6s | %8s %8s %6s | %7s %7s | %8s %8s | %7s %7s %6s" % (
        "workload", "ours/s", "nginx/s", "ratio", "ours", "nginx", "ratio", "ours", "nginx",
        "ours", "nginx", "ours us", "nginx us", "ratio"))
    print("%-34s %29s | %24s | %15s | %17s | %22s" % (
        "", "requests per second", "mean latency (us)", "sd (us)", "max (us)",
        "server CPU-us per request"))
    keys = ("rps", "mean_us", "sd_us", "max_us", "cpu_us")
    for name, args, path in h2load_rows():
        runs = {"ours": [], "peer": []}
        for _ in range(b.args.repeat):
            for who in ("ours", "peer"):
                srv = b.ours() if who == "ours" else b.nginx()
                try:
                    runs[who].append(b.h2load(srv, args, "http://127.0.0.1:%d%s" % (
                        srv["http"], path)))
                finally:
                    b.stop(srv["proc"])
        o, p = ({k: statistics.median(r[k] for r in runs[who]) for k in keys}
                for who in ("ours", "peer"))
        print("%-34s %10.0f %10.0f %6s | %8.0f %8.0f %6s | %7.0f %7.0f | %8.0f %8.0f | "
              "%7.2f %7.2f %6s" % (name, o["rps"], p["rps"], ratio(o["rps"], p["rps"]),
                                   o["mean_us"], p["mean_us"], ratio(o["mean_us"], p["mean_us"]),
                                   o["sd_us"], p["sd_us"], o["max_us"], p["max_us"],
                                   o["cpu_us"], p["cpu_us"], ratio(o["cpu_us"], p["cpu_us"])),
              flush=True)
        b.results["h2load"].append({"name": name, "peer": "nginx", "ours": o, "peer_figures": p})


def tls_rows():
    """The tls section: (name, port key, peer, sfload arguments, what the CPU figure is per)."""
    return [
        ("GET /id keep-alive -c 50", "https", "nginx", ["-c", "50"], "request"),
        ("GET /id conn-per-request, full handshake -c 50", "https", "nginx",
         ["-c", "50", "--close"], "connection"),
        ("GET /id conn-per-request, resumed (ticket) -c 50", "https", "nginx",
         ["-c", "50", "--close", "--tls-resume"], "connection"),
        ("memcached 90:10 get:set -c 50", "memcache_tls", "memcached",
         ["--mode", "memcache", "--tls", "-c", "50", "--keys", "10000", "--value-size", "100"],
         "request"),
    ]


def tls_target(srv, kind):
    """By name: the certificate says localhost, and sfload checks it."""
    return ("https://localhost:%d/id" % srv["https"]) if kind == "https" else \
        "localhost:%d" % srv[kind]


def tls_figures(rep, per):
    """(req/s, p99 us, server CPU-us per request or per connection = per handshake)."""
    server = rep.get("server", {})
    key = "cpu_us_per_handshake" if per == "connection" else "cpu_us_per_request"
    return (rep["requests_per_sec"], rep["latency_us"]["p99"], server.get(key, 0.0))


def fmt_or_dash(fmt, v):
    return fmt % v if v is not None else "-"


def section_tls(b):
    """TLS 1.3 side by side: ours (when this build has the TLS listeners) and the peer
    alternating, one server thread on core 0, sfload on core 1, median of --repeat."""
    certs = make_certs(os.path.join(b.work, "certs"))
    common = ["--cacert", certs["ca.pem"], "--tls-version", "1.3", "--ciphersuites", TLS_SUITE]
    probe = b.ours_tls(certs)
    have_ours = probe is not None
    if probe:
        b.stop(probe["proc"])
    print("\n== TLS 1.3 (%s, EC P-256 certificate, verified): 1 server thread on core 0, sfload "
          "on core 1, median of %d ==" % (TLS_SUITE, b.args.repeat))
    print("%-48s %10s %10s %6s | %8s %8s %6s | %7s %7s %6s" % (
        "workload", "ours/s", "peer/s", "ratio", "ours p99", "peer p99", "ratio", "ours us",
        "peer us", "ratio"))
    print("%-48s %29s | %24s | %22s" % ("", "requests per second", "p99 latency (us)",
                                         "server CPU-us per req/conn"))
    if not have_ours:
        print("  (ours skipped: %s; the peers' rows run alone)" % b.ours_tls_missing)
    b.results["tls_setup"] = {"suite": TLS_SUITE, "version": "TLSv1.3", "certificate": "EC P-256",
                              "ours": have_ours, "ours_missing": None if have_ours else
                              b.ours_tls_missing}
    for name, kind, peer_name, args, per in tls_rows():
        runs = {"ours": [], "peer": []}
        hs = {"ours": [], "peer": []}
        for _ in range(b.args.repeat):
            for who in ("ours", "peer"):
                if who == "ours":
                    srv = b.ours_tls(certs) if have_ours else None
                elif kind == "https":
                    srv = b.nginx_tls(certs)
                else:
                    srv = b.memcached_tls(certs)
                if srv is None:
                    continue
                try:
                    rep = b.load(srv, common + args, tls_target(srv, kind))
                    runs[who].append(tls_figures(rep, per))
                    hs[who].append(rep.get("tls", {}))
                finally:
                    b.stop(srv["proc"])
        ours = median_figures(runs["ours"]) if runs["ours"] else None
        peer = median_figures(runs["peer"])
        o = ours or (None, None, None)
        print("%-48s %10s %10.0f %6s | %8s %8.0f %6s | %7s %7.2f %6s" % (
            name, fmt_or_dash("%.0f", o[0]), peer[0], ratio(o[0], peer[0]) if ours else "-",
            fmt_or_dash("%.0f", o[1]), peer[1], ratio(o[1], peer[1]) if ours else "-",
            fmt_or_dash("%.2f", o[2]), peer[2], ratio(o[2], peer[2]) if ours else "-"),
            flush=True)
        counts = {}
        for who in ("ours", "peer"):
            if hs[who]:
                counts[who] = {k: sum(h.get(k, 0) for h in hs[who])
                               for k in ("full", "resumed", "failures")}
        for who, c in counts.items():
            total = c["full"] + c["resumed"]
            if "--tls-resume" in args and total and c["resumed"] < 0.9 * total:
                print("  note: %s resumed only %d of %d handshakes" % (who, c["resumed"], total))
            if c["failures"]:
                print("  note: %s: %d handshakes failed" % (who, c["failures"]))
        b.results["tls"].append({"name": name, "peer": peer_name, "per": per,
                                 "ours": as_dict(ours) if ours else None,
                                 "peer_figures": as_dict(peer), "handshakes": counts})


def protocol_workloads(b):
    """One workload per protocol for the sweeps: (label, peer name, peer starter, port key,
    sfload arguments without -c, connections of the peers table row)."""
    return [
        ("HTTP GET /id keep-alive", "nginx", b.nginx, "http", [], 50),
        ("memcached 90:10 get:set", "memcached", b.memcached, "memcache",
         ["--mode", "memcache", "--keys", "10000", "--value-size", "100"], 50),
        ("TCP echo 32 B", "epoll_echo", b.epoll_echo, "echo",
         ["--mode", "echo", "--msg-size", "32"], 100),
    ]


def target_of(srv, kind):
    return ("http://127.0.0.1:%d/id" % srv["http"]) if kind == "http" else \
        "127.0.0.1:%d" % srv[kind]


def point(rep):
    lat = rep["latency_us"]
    return {"rps": rep["requests_per_sec"], "p50": lat["p50"], "p99": lat["p99"],
            "p999": lat["p99_9"], "cpu_us": rep.get("server", {}).get("cpu_us_per_request", 0.0)}


def section_sweep(b):
    """Closed loop over connection counts, ours and the peer alternating at each count on the
    same two long-lived servers (one run each; the tables above are the medians)."""
    levels = SWEEP_LEVELS_QUICK if b.args.quick else SWEEP_LEVELS
    print("\n== closed loop vs connections: 1 server thread on core 0, sfload on core 1, %g s "
          "per point ==" % b.sweep_seconds)
    print("%-26s %6s | %10s %10s %6s | %8s %8s | %8s %8s | %8s %8s" % (
        "workload", "conns", "ours/s", "peer/s", "ratio", "ours p50", "peer p50", "ours p99",
        "peer p99", "ours 99.9", "peer 99.9"))
    for label, peer_name, starter, kind, args, _ in protocol_workloads(b):
        servers = {"ours": b.ours(), "peer": starter()}
        entry = {"workload": label, "peer": peer_name, "points": []}
        try:
            for conns in levels:
                got = {}
                for who in ("ours", "peer"):
                    rep = b.load(servers[who], args + ["-c", str(conns)],
                                 target_of(servers[who], kind), seconds=b.sweep_seconds,
                                 warmup=0.5)
                    got[who] = point(rep)
                    entry["points"].append(dict(got[who], server=who, connections=conns))
                o, p = got["ours"], got["peer"]
                print("%-26s %6d | %10.0f %10.0f %6s | %8.0f %8.0f | %8.0f %8.0f | %8.0f %8.0f" % (
                    label, conns, o["rps"], p["rps"], ratio(o["rps"], p["rps"]), o["p50"],
                    p["p50"], o["p99"], p["p99"], o["p999"], p["p999"]), flush=True)
        finally:
            for srv in servers.values():
                b.stop(srv["proc"])
        b.results["sweep"].append(entry)


def knee_of(points, p99_bound_us):
    """(knee, reached): the knee is the highest offered rate that was served, achieved >= 95 %
    of offered and p99 <= the bound (None when no step was); reached says a higher step failed,
    so the knee is the capacity and not just the highest rate tried. A lower step that missed
    (a stall of a shared machine) does not hide a higher one that passed."""
    served = [p["offered"] for p in points
              if p["achieved"] >= 0.95 * p["offered"] and p["p99"] <= p99_bound_us]
    knee = max(served) if served else None
    return knee, any(p["offered"] > (knee or 0) for p in points)


def section_openloop(b):
    """sfload -R at rising offered rates (fractions of the closed-loop capacity at the row's
    connection count, the higher of ours and the peer's), ours and the peer alternating on two
    long-lived servers; a server's steps end after the second that fell behind (achieved < 95 %
    of offered: overloaded), so a noisy p99 does not cut the curve short."""
    fractions = OPENLOOP_FRACTIONS_QUICK if b.args.quick else OPENLOOP_FRACTIONS
    bound = b.args.knee_p99_ms * 1000.0
    print("\n== open loop (sfload -R): latency vs offered load, %g s per step after 0.5 s of "
          "warm-up; knee = highest rate served at >= 95 %% with p99 <= %g ms ==" % (
              b.openloop_seconds, b.args.knee_p99_ms))
    print("%-26s %9s | %-5s %9s %6s | %8s %8s %8s" % (
        "workload", "offered/s", "who", "achieved", "share", "p50 us", "p99 us", "p99.9 us"))
    for label, peer_name, starter, kind, args, conns in protocol_workloads(b):
        servers = {"ours": b.ours(), "peer": starter()}
        entry = {"workload": label, "peer": peer_name, "connections": conns,
                 "p99_bound_us": bound, "servers": {}}
        try:
            capacity = sweep_capacity(b, label, conns)
            if capacity is None:  # no sweep in this run: a short closed-loop probe
                capacity = max(b.load(servers[who], args + ["-c", str(conns)],
                                      target_of(servers[who], kind), seconds=1,
                                      warmup=0.5)["requests_per_sec"] for who in servers)
            entry["capacity_closed_loop"] = capacity
            failures = {"ours": 0, "peer": 0}
            points = {"ours": [], "peer": []}
            for frac in fractions:
                rate = max(1000, int(round(capacity * frac, -3)))
                for who in ("ours", "peer"):
                    if failures[who] >= 2:
                        continue
                    rep = b.load(servers[who], args + ["-c", str(conns), "-R", str(rate)],
                                 target_of(servers[who], kind), seconds=b.openloop_seconds,
                                 warmup=0.5)
                    pt = point(rep)
                    pt.update(offered=rate, achieved=pt.pop("rps"))
                    points[who].append(pt)
                    if pt["achieved"] < 0.95 * rate:  # overloaded: a p99 miss alone goes on
                        failures[who] += 1
                    print("%-26s %9d | %-5s %9.0f %5.0f%% | %8.0f %8.0f %8.0f" % (
                        label, rate, who, pt["achieved"], 100.0 * pt["achieved"] / rate,
                        pt["p50"], pt["p99"], pt["p999"]), flush=True)
                if failures["ours"] >= 2 and failures["peer"] >= 2:
                    break
        finally:
            for srv in servers.values():
                b.stop(srv["proc"])
        for who in ("ours", "peer"):
            knee, reached = knee_of(points[who], bound)
            entry["servers"][who] = {"points": points[who], "knee": knee, "knee_reached": reached}
        k = entry["servers"]
        print("%-26s knee: ours %s, %s %s (closed-loop capacity at -c %d: %.0f/s)" % (
            label, knee_text(k["ours"], bound), peer_name, knee_text(k["peer"], bound), conns,
            capacity),
            flush=True)
        b.results["openloop"].append(entry)


def knee_text(srv, p99_bound_us):
    """The knee, and the lower steps that missed (a stall, or a real dip a reader should see)."""
    if srv["knee"] is None:
        return "none (no step served)"
    missed = ["%d" % p["offered"] for p in srv["points"] if p["offered"] < srv["knee"] and not (
        p["achieved"] >= 0.95 * p["offered"] and p["p99"] <= p99_bound_us)]
    return "%.0f/s%s%s" % (srv["knee"], "" if srv["knee_reached"] else " (or more: never failed)",
                           " (missed lower steps: %s)" % ", ".join(missed) if missed else "")


def sweep_capacity(b, label, conns):
    """The higher closed-loop req/s of ours and the peer at conns connections in this run's
    sweep, None without one."""
    for w in b.results["sweep"]:
        if w["workload"] == label:
            rates = [p["rps"] for p in w["points"] if p["connections"] == conns]
            if rates:
                return max(rates)
    return None


def section_sync(b):
    print("\n== GET /id by generator sync mode: 2 server threads, sfload 1 thread, median of %d =="
          % b.args.repeat)
    print("%-26s %8s %12s %10s %12s" % ("model", "conns", "mode", "req/s", "CPU-us/req"))
    for model, extra in (("keep-alive", []), ("conn-per-request", ["--close"])):
        for conns in (1000, 3000, 5000):
            for mode in ("atomic", "spinlock", "mutex"):
                runs = []
                for _ in range(b.args.repeat):
                    srv = b.ours(threads=2, cpu=None, extra=["snowflake.sync=%s" % mode])
                    try:
                        rep = b.load(srv, ["-c", str(conns)] + extra,
                                     "http://127.0.0.1:%d/id" % srv["http"], cpu=None)
                        runs.append(figures(rep))
                    finally:
                        b.stop(srv["proc"])
                rps, _, us = median_figures(runs)
                print("%-26s %8d %12s %10.0f %12.2f" % (model, conns, mode, rps, us), flush=True)


def side_by_side(b, title, groups, extra=(), key=None):
    """Paths on the same server setup (b.ours(extra=...)), same client, rows alternating within
    each repeat; the ratio columns are against each group's first path. key: where the figures
    go in results.json (none: printed only)."""
    print("\n== %s: 1 server thread on core 0, sfload on core 1, keep-alive -c 50, "
          "median of %d ==" % (title, b.args.repeat))
    print("%-34s %10s %7s | %8s | %8s %7s" % ("request", "req/s", "ratio", "p99 us",
                                             "CPU-us", "ratio"))
    for paths in groups:
        runs = {p: [] for p in paths}
        for _ in range(b.args.repeat):
            for path in paths:
                srv = b.ours(extra=extra)
                try:
                    rep = b.load(srv, ["-c", "50"], "http://127.0.0.1:%d%s" % (srv["http"], path))
                    runs[path].append(figures(rep))
                finally:
                    b.stop(srv["proc"])
        base = median_figures(runs[paths[0]])
        for path in paths:
            f = median_figures(runs[path])
            if key:
                b.results.setdefault(key, {})[path] = as_dict(f)
            print("%-34s %10.0f %7s | %8.0f | %8.2f %7s" % (
                "GET " + path, f[0], ratio(f[0], base[0]), f[1], f[2], ratio(f[2], base[2])),
                flush=True)


def section_formats(b):
    """UUIDv7, ULIDs and TypeIDs against Snowflake IDs on the same server; the ratio column is
    against GET /id (or /ids)."""
    # Batches of 20: at 1000 per request all three run into the generator's cap of 4096 IDs per
    # ms (4,096 requests/s), and the server's CPU then measures waiting for the next ms.
    side_by_side(b, "ID formats", [["/id", "/uuid", "/ulid", "/typeid?prefix=user"],
                                   ["/ids?count=20", "/uuids?count=20", "/ulids?count=20",
                                    "/typeids?count=20&prefix=user"]])


def section_sequences(b):
    """Segment mode's GET /seq/{name} (docs/sequences.md) next to GET /id on the same server:
    one namespace with blocks of 100,000 (a block lasts over a second at these rates, so block
    reserves, each an fsync'd write in data_dir, stay off the request path); the ratio column is
    against GET /id (or /ids?count=20). A 503 (no number in hand) would show as an error note."""
    side_by_side(b, "Sequences", [["/id", "/seq/bench"], ["/ids?count=20", "/seqs/bench?count=20"]],
                 extra=['sequences.namespaces=[{"name":"bench","block":100000}]'], key="sequences")


def section_memcache_ids(b):
    """IDs over the memcached protocol (cache.memcached_id_keys, katsubushi's `get <key>`) against
    HTTP on the same server: one ID per request (get id vs GET /id) and 20 (get with the key 20
    times vs GET /ids?count=20), keep-alive -c 50, rows alternating within each repeat. The
    figure that matters is the server's CPU-microseconds per ID (from /proc of the daemon)."""
    n = 20
    print("\n== IDs over the memcached protocol vs HTTP: 1 server thread on core 0, sfload on "
          "core 1, keep-alive -c 50, median of %d ==" % b.args.repeat)
    print("%-34s %10s %10s | %8s | %8s %8s %7s" % ("request", "req/s", "IDs/s", "p99 us",
                                                   "CPU-us", "us/ID", "ratio"))
    rows = [("memcached get id", "memcache", ["--mc-id-key", "id"], 1),
            ("HTTP GET /id", "http", "/id", 1),
            ("memcached get id x%d" % n, "memcache", ["--mc-id-key", "id", "--mc-id-count", str(n)],
             n),
            ("HTTP GET /ids?count=%d" % n, "http", "/ids?count=%d" % n, n),
            # segment mode (cache.memcached_id_keys.sequence): a block of 10^7, never refilled
            ("memcached get seq:bench", "memcache", ["--mc-id-key", "seq:bench"], 1),
            ("HTTP GET /seq/bench", "http", "/seq/bench", 1)]
    keys = ("cache.memcached_id_keys.snowflake=id", "cache.memcached_id_keys.sequence=seq",
            'sequences.namespaces=[{"name":"bench","block":10000000}]')
    runs = {r[0]: [] for r in rows}
    for _ in range(b.args.repeat):
        for name, kind, extra, ids in rows:
            srv = b.ours(extra=keys)
            try:
                if kind == "memcache":
                    rep = b.load(srv, ["--mode", "memcache", "-c", "50"] + extra,
                                 "127.0.0.1:%d" % srv["memcache"])
                else:  # extra: the path
                    rep = b.load(srv, ["-c", "50"], "http://127.0.0.1:%d%s" % (srv["http"], extra))
                runs[name].append(figures(rep))
            finally:
                b.stop(srv["proc"])
    out = []
    for i, (name, kind, _, ids) in enumerate(rows):
        f = median_figures(runs[name])
        http = median_figures(runs[rows[i | 1][0]])  # the HTTP row of the pair
        print("%-34s %10.0f %10.0f | %8.0f | %8.2f %8.3f %7s" % (
            name, f[0], f[0] * ids, f[1], f[2], f[2] / ids, ratio(f[2], http[2])), flush=True)
        out.append({"name": name, "protocol": kind, "ids_per_request": ids, "rps": f[0],
                    "ids_per_sec": f[0] * ids, "p99": f[1], "cpu_us": f[2],
                    "cpu_us_per_id": f[2] / ids})
    print("  (ratio: CPU-us per request against the HTTP row of the same IDs per request)")
    b.results["memcache_ids"] = out


def build_with(b, alloc):
    if alloc == "glibc":
        return b.build
    d = os.path.join(ROOT, "build-malloc-" + alloc)
    subprocess.run(["cmake", "-S", ROOT, "-B", d, "-DCMAKE_BUILD_TYPE=Release",
                    "-DSF_MALLOC=" + alloc], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", d, "-j2", "--target", "snowflaked"], check=True,
                   stdout=subprocess.DEVNULL)
    return d


def section_alloc(b):
    print("\n== allocator (-DSF_MALLOC): 1 server thread on core 0, median of %d ==" % b.args.repeat)
    print("%-10s | %24s | %24s | %10s" % ("malloc", "conn-per-request -c 1000",
                                          "memcached sets -c 50", "RSS MiB"))
    print("%-10s | %10s %12s | %10s %12s |" % ("", "req/s", "CPU-us/req", "ops/s", "CPU-us/op"))
    for alloc in ALLOCATORS:
        build = build_with(b, alloc)
        cpr, sets, rss = [], [], []
        for _ in range(b.args.repeat):
            srv = b.ours(build=build)
            try:
                cpr.append(figures(b.load(srv, ["-c", "1000", "--close"],
                                          "http://127.0.0.1:%d/id" % srv["http"])))
                sets.append(figures(b.load(srv, ["--mode", "memcache", "-c", "50", "--mc-ratio",
                                                 "0:100", "--keys", "200000", "--value-size",
                                                 "300"], "127.0.0.1:%d" % srv["memcache"])))
                rss.append(rss_kib(srv["pid"]) / 1024)
            finally:
                b.stop(srv["proc"])
        c, s = median_figures(cpr), median_figures(sets)
        print("%-10s | %10.0f %12.2f | %10.0f %12.2f | %10.1f" % (
            alloc, c[0], c[2], s[0], s[2], statistics.median(rss)), flush=True)


def machine():
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return "%s, %d cores, Linux %s, %s, %s" % (
        model, os.cpu_count(), platform.release(),
        subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
        subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only",
                    default="peers,tls,sweep,openloop,formats,sequences,memcache_ids,sync,alloc",
                    help="sections: peers,tls,sweep,openloop,formats,sequences,memcache_ids,sync,"
                         "alloc")
    ap.add_argument("-t", "--time", type=int, default=5, help="seconds per run (default 5)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure, median (default 3)")
    ap.add_argument("--quick", action="store_true", help="-t 3 --repeat 1")
    ap.add_argument("-b", "--build", default="build", help="build directory (default build)")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get the peers")
    ap.add_argument("--knee-p99-ms", type=float, default=10.0,
                    help="open loop: a step beyond this p99 is past the knee (default 10)")
    ap.add_argument("--out", help="results.json, .dat files and plots (default BUILD/bench)")
    args = ap.parse_args()
    if args.quick:
        args.time, args.repeat = 3, 1
    if not 1 <= args.time <= 600 or not 1 <= args.repeat <= 20:
        sys.exit("-t must be 1..600 and --repeat 1..20")
    if not args.no_install:
        env = dict(os.environ, SNOWFLAKED_EXTRA_PACKAGES=PEER_PACKAGES)
        subprocess.run(["sh", os.path.join(ROOT, "deploy/install-deps.sh")], env=env, check=True)
    b = Bench(args)
    for tool in (b.sfload, os.path.join(b.build, "snowflaked"), os.path.join(b.build, "epoll_echo")):
        if not os.access(tool, os.X_OK):
            sys.exit("%s missing: run `make build` first" % tool)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    sections = {"peers": section_peers, "tls": section_tls, "sweep": section_sweep,
                "openloop": section_openloop,
                "sync": section_sync, "alloc": section_alloc, "formats": section_formats,
                "sequences": section_sequences, "memcache_ids": section_memcache_ids}
    for name in args.only.split(","):
        if name not in sections:
            sys.exit("unknown section %r (%s)" % (name, ", ".join(sections)))
    out = os.path.abspath(args.out or os.path.join(b.build, "bench"))
    b.results.update(machine=machine(), date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                     command=" ".join(shlex.quote(a) for a in sys.argv), seconds=args.time,
                     repeat=args.repeat, quick=args.quick)
    print("machine: " + b.results["machine"])
    print("date: " + b.results["date"])
    started = time.monotonic()
    try:
        for name in args.only.split(","):
            t0 = time.monotonic()
            sections[name](b)
            print("(%s: %.0f s)" % (name, time.monotonic() - t0), flush=True)
    finally:
        b.stop_all()
        b.results["wall_seconds"] = round(time.monotonic() - started, 1)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(b.results, f, indent=1)
    images = plots.render(b.results, out)
    print("\nresults: %s/results.json; plots: %s (%.0f s in all; redraw: python3 "
          "loadtest/plots.py %s/results.json DIR)" % (
              out, ", ".join(images) if images else "none", b.results["wall_seconds"], out))
    print("\ncommands (servers, then the load; each distinct one once, ports, pids and temporary "
          "directories vary):")
    seen = set()
    for c in b.commands:
        key = re.sub(r"\d{4,}|/tmp/\S+", "#", c)
        if key not in seen:
            seen.add(key)
            print("  " + c)


if __name__ == "__main__":
    main()
