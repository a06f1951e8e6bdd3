"""A fleet of real snowflaked daemons and one sfload over all of them (issue 14, design-14 §5).

    d = Daemon(["snowflake.worker_id=etcd", ...])  # started, NOT waited for (a daemon that is
    d.port_open(); d.http("/readyz")              # killed, frozen or restarted may not listen)
    d.wait_until(lambda: ..., 5, "what")          # bounded polls
    load = Load([d.url("/ids?count=10") for d in fleet], seconds=60, rate=600, out=path)
    load.finish()                                 # (exit status, JSON report)

Unlike sfharness.Server, a Daemon does not wait for its port at start (nor fail when it exits at
start: a 13th daemon must exit 1) and keeps its exit status for the test to check (75 = lease
lost). Ports are taken below the kernel's ephemeral range (ip_local_port_range starts at 32768
here), so that a port nobody listens on yet (a daemon started later on a port sfload already
targets) is never the source port of another connection (no self-connect, no EADDRINUSE when
the daemon finally binds it). Every process is signalled by PID only, and killed
at close() if still alive.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from sfharness import Reader, get  # noqa: E402

BINARY = os.environ.get("SNOWFLAKED_BIN", os.path.join(HERE, "..", "..", "build", "snowflaked"))
SFLOAD = os.environ.get("SFLOAD_BIN", os.path.join(HERE, "..", "..", "build", "sfload"))

_taken_ports = set()


def low_port():
    """A free 127.0.0.1 port in 20000..32767 (below the ephemeral range), never handed out twice
    by this process."""
    for _ in range(1000):
        p = random.randrange(20000, 32768)
        if p in _taken_ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
        _taken_ports.add(p)
        return p
    raise RuntimeError("no free port below 32768")


def etcd_sets(endpoints, prefix, ttl_s, margin_ms, wait=True):
    """--set values for worker_id "etcd" as the cluster tests run it (request timeout 400 ms)."""
    return ["snowflake.worker_id=etcd",
            "snowflake.etcd.endpoints=" + endpoints,
            "snowflake.etcd.prefix=" + prefix,
            "snowflake.etcd.ttl_s=%d" % ttl_s,
            "snowflake.etcd.fence_margin_ms=%d" % margin_ms,
            "snowflake.etcd.request_timeout_ms=400",
            "snowflake.etcd.start_timeout_ms=10000",
            "snowflake.etcd.wait_for_slot=%s" % ("true" if wait else "false")]


def figure(name, value):
    print("FIGURE %s %s" % (name, value), flush=True)


def wait_until(pred, timeout, what, interval=0.02):
    """pred()'s first truthy value within timeout seconds, else AssertionError naming what."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


class Daemon:
    def __init__(self, sets, name="d", threads=1, port=None, env=None):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="sf_fleet_%s." % name)
        self.port = port or low_port()
        self.log_path = os.path.join(self.dir, "log")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
        full_env.update({"SNOWFLAKED_DATA_DIR": os.path.join(self.dir, "data"),
                         "SNOWFLAKED_SERVER_PORT": str(self.port),
                         "SNOWFLAKED_SERVER_THREADS": str(threads)})
        full_env.update(env or {})
        args = [BINARY]
        for s in sets:
            args += ["--set", s]
        self._log = open(self.log_path, "wb")
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(args, env=full_env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid

    # -- state ------------------------------------------------------------------------------
    def alive(self):
        return self.proc.poll() is None

    def port_open(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            return True
        except OSError:
            return False

    def output(self):
        self._log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    # -- HTTP (sfharness's reader: exactly what went over the wire) --------------------------
    def connect(self, timeout=2.0):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def http(self, path, timeout=2.0):
        """(status, body text, headers) of GET path, or (None, reason, {}) without an answer."""
        try:
            with self.connect(timeout) as s:
                s.sendall(get(path))
                r = Reader(s).response()
                return r.status, r.body.decode(errors="replace"), r.headers
        except (OSError, EOFError, ValueError) as e:
            return None, str(e), {}

    def metrics(self):
        st, body, _ = self.http("/metrics")
        return body if st == 200 else None

    def metric(self, name, labels=None):
        """A metric's value (labels: the exact label text inside {}), None when absent."""
        text = self.metrics() or ""
        pat = (r"^%s \s*(\S+)$" % re.escape(name) if labels is None
               else r"^%s\{%s\} (\S+)$" % (re.escape(name), re.escape(labels)))
        m = re.search(pat, text, re.M)
        return float(m.group(1)) if m else None

    # -- signals (this PID only) -------------------------------------------------------------
    def signal(self, sig):
        os.kill(self.pid, sig)

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self):
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGCONT)
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Load:
    """One sfload over every URL for `seconds`, open loop, tolerant of faults, with every ID
    recorded (--ids-out-v2). t0 is taken just before the exec: sfload's record times (ms since its
    own start, same monotonic clock) are then at most a few ms below time.monotonic() - t0."""

    def __init__(self, urls, seconds, rate, out, connections_per_target=2, min_ids=1,
                 timeout_ms=1000):
        self.urls, self.seconds, self.out = urls, seconds, out
        self.connections_per_target = connections_per_target
        self.stderr_path = out + ".stderr"
        self._err = open(self.stderr_path, "wb")
        args = [SFLOAD, "-q", "--json", "-c", str(connections_per_target * len(urls)),
                "-R", str(rate), "-t", str(seconds), "--timeout", str(timeout_ms),
                "--tolerate-faults", "--verify-ids", "--min-ids", str(min_ids),
                "--ids-out-v2", out] + list(urls)
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._err,
                                     stdin=subprocess.DEVNULL)

    def ms(self, t):
        """A time.monotonic() value as sfload record time (upper bound: sfload started later)."""
        return (t - self.t0) * 1000.0

    def running(self):
        return self.proc.poll() is None

    def finish(self, grace=30):
        """Waits for the end of -t (plus grace); (exit status, JSON report or None, stderr)."""
        try:
            out, _ = self.proc.communicate(timeout=max(0, self.seconds - (time.monotonic() - self.t0))
                                           + grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        self._err.close()
        with open(self.stderr_path, "rb") as f:
            err = f.read().decode(errors="replace")
        try:
            rep = json.loads(out)
        except ValueError:
            rep = None
        return self.proc.returncode, rep, err

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if not self._err.closed:
            self._err.close()
