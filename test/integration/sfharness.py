"""Shared helpers for integration tests against the real snowflaked binary (loopback only).

Every test server gets its own temporary data_dir and a free ephemeral port, and is killed at the
end even if the test fails. Responses are parsed by a deliberately small HTTP/1.1 reader so that
the tests see exactly what went over the wire.
"""
import importlib
import json
import os
import re
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

BINARY = os.environ.get("SNOWFLAKED_BIN", "")

DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"


def debian_import(module, debian_package):
    """import_module(module), falling back to Debian's dist-packages: deploy/install-deps.sh
    installs the test's Python libraries as Debian packages (python3-pymemcache, python3-yaml),
    which live beside the system Python, and the python3 running the tests need not be that one
    (pyenv, a venv). They are pure Python (or fall back to it), so any python3 can load them.

    Raises ImportError naming the Debian package when neither has the module: the test needing it
    fails instead of being skipped, since CI installs it and a skipped test proves nothing."""
    try:
        return importlib.import_module(module)
    except ImportError:
        pass
    if DEBIAN_DIST_PACKAGES not in sys.path:
        sys.path.append(DEBIAN_DIST_PACKAGES)
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError("%s cannot be imported by %s, not even from %s (Debian: apt-get install "
                          "%s; deploy/install-deps.sh installs it)"
                          % (module, sys.executable, DEBIAN_DIST_PACKAGES, debian_package)) from e


_HANDED_OUT = set()


def free_port():
    """A port nothing listens on now and that this process has not handed out before: two calls
    before either port is bound (a test's TLS port, then the Server's own) must not get the same
    one, which the kernel may give twice once the probe socket is closed."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


# One identity per host (cluster/hostclaim.h): ctest runs suites in parallel, and every daemon
# would be datacenter 0 worker 0. So a Server whose test does not pin the datacenter (nor the
# layout, nor etcd) runs in a datacenter of its own, 8..31 (0..7 are left to tests that pin one
# and to the shell suites), tried in turn while another process on this host holds the identity;
# a restart on the same data_dir keeps its datacenter, so crash-restart tests still compare one
# identity with itself.
_PINNED = re.compile(r"datacenter|layout|_bits|etcd|^-c$|^--config", re.I)
_DC_BY_DATA_DIR = {}
_dc_next = [os.getpid() % 24]
CLAIMED = "is already issuing IDs on this host"


def _pick_datacenter(refused=False):
    """This process's datacenter (its Servers share one, as they would all share 0), moved on
    for good when a daemon was refused in it (another process, or one of ours, holds it)."""
    if refused:
        _dc_next[0] = (_dc_next[0] + 1) % 24
    return 8 + _dc_next[0]


class Server:
    def __init__(self, *args, env=None, threads=2, port=None, nofile=None, data_dir=None):
        self.dir = tempfile.TemporaryDirectory(prefix="sf_it_")
        self.port = port or free_port()
        self.log_path = os.path.join(self.dir.name, "log")
        data = os.path.abspath(data_dir or os.path.join(self.dir.name, "data"))
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
        full_env.update({
            "SNOWFLAKED_DATA_DIR": data,
            "SNOWFLAKED_SERVER_PORT": str(self.port),
            "SNOWFLAKED_SERVER_THREADS": str(threads),
        })
        full_env.update(env or {})
        pinned = any(_PINNED.search(str(a)) for a in args) or any(
            _PINNED.search(k) or _PINNED.search(str(v)) for k, v in (env or {}).items())
        self.datacenter = None if pinned else _DC_BY_DATA_DIR.get(data) or _pick_datacenter()
        for _ in range(24):
            if self.datacenter is not None:
                full_env["SNOWFLAKED_SNOWFLAKE_DATACENTER_ID"] = str(self.datacenter)
            try:
                self._start(args, full_env, nofile)
                break
            except RuntimeError as e:
                if self.datacenter is None or CLAIMED not in str(e):
                    raise
                self.log.close()
                self.datacenter = _pick_datacenter(refused=True)
        if self.datacenter is not None:
            _DC_BY_DATA_DIR[data] = self.datacenter

    def _start(self, args, full_env, nofile):
        self.log = open(self.log_path, "wb")
        def limits():
            if nofile:
                import resource
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        self.proc = subprocess.Popen([BINARY, *args], env=full_env, stdout=self.log,
                                     stderr=subprocess.STDOUT, preexec_fn=limits)
        # Every listener the arguments open (the memcached and echo ports, and the TLS ports of
        # all three), not just HTTP.
        ports = [self.port] + [int(a.split("=", 1)[1]) for a in args if isinstance(a, str) and
                               re.match(r"(cache\.memcached_port|echo\.tcp_port|(server|cache\.memcached|"
                                        r"echo\.tcp)[._]tls\.port)=[1-9]", a)]
        deadline = time.time() + 10
        while ports and time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("snowflaked exited at start:\n" + self.output())
            try:
                socket.create_connection(("127.0.0.1", ports[0]), timeout=0.2).close()
                ports.pop(0)
            except OSError:
                time.sleep(0.02)
        if ports:
            raise RuntimeError("snowflaked did not start listening:\n" + self.output())

    def output(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def connect(self, timeout=5):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def cpu_seconds(self):
        """utime + stime of the server process (all threads)."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout=15):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        """SIGTERM, then checks that the server exited 0 without a sanitizer report."""
        hung = False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                hung = True
                self.proc.kill()
                self.proc.wait()
        out = self.output()
        self.log.close()
        self.dir.cleanup()
        if hung:
            raise AssertionError("snowflaked did not stop on SIGTERM:\n" + out)
        if self.proc.returncode != 0:
            raise AssertionError("snowflaked exited %d:\n%s" % (self.proc.returncode, out))
        if "runtime error:" in out or "Sanitizer" in out:
            raise AssertionError("sanitizer report:\n" + out)


    def discard(self):
        """kill -9 if still running, then removes its directory: a tearDown's cleanup of a
        server a test may have left running, killed or stopped (stop() checks the exit; this
        does not)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.dir.cleanup()


def set_args(*sets):
    """Server arguments for "key=value" settings: a --set before each."""
    return [a for kv in sets for a in ("--set", kv)]


def memcache_server(*sets, **kw):
    """A Server with its memcached listener on a free port (Server waits for it too) and these
    "key=value" settings besides: (server, memcached port)."""
    port = free_port()
    return Server(*set_args("cache.memcached_port=%d" % port, *sets), **kw), port


class Response:
    def __init__(self, status, reason, headers, body, version):
        self.status, self.reason, self.headers, self.body, self.version = (
            status, reason, headers, body, version)

    def header(self, name):
        return self.headers.get(name.lower())

    def json(self):
        return json.loads(self.body)


class Reader:
    """Reads HTTP/1.1 responses from a socket, one at a time."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.eof = False

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            self.eof = True
            raise EOFError("connection closed")
        self.buf += data

    def response(self, head_only=False):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        m = re.match(r"(HTTP/1\.[01]) (\d{3}) ?(.*)", lines[0])
        if not m:
            raise ValueError("bad status line %r" % lines[0])
        headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        status = int(m.group(2))
        length = 0 if head_only or status in (100, 204, 304) else int(
            headers.get("content-length", "0"))
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return Response(status, m.group(3), headers, body, m.group(1))

    def closed(self, timeout=3):
        """True when the peer closes (EOF or reset) within timeout, with no more bytes."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return self.buf == b""
                self.buf += data
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


class KeepAlive:
    """GET requests on one keep-alive connection (one event loop of the server, so one
    generator: issue order is time order); json() fails on any status but 200."""

    def __init__(self, server, timeout=10):
        self.sock = server.connect(timeout=timeout)
        self.reader = Reader(self.sock)

    def close(self):
        self.sock.close()

    def json(self, path):
        self.sock.sendall(get(path))
        r = self.reader.response()
        if r.status != 200:
            raise AssertionError("GET %s: %d %s" % (path, r.status, r.body[:300]))
        return r.json()


def run_clients(client, n=4, timeout=60):
    """Runs client() in n threads at once and waits (at most timeout s each); returns the
    exceptions they raised, as repr strings (a test asserts the list is empty)."""
    errors = []

    def guarded():
        try:
            client()
        except Exception as e:  # reported to the caller
            errors.append(repr(e))

    threads = [threading.Thread(target=guarded) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    errors.extend("a client still running after %d s" % timeout for t in threads if t.is_alive())
    return errors


def request(server, raw, head_only=False):
    """Sends raw bytes on a new connection and returns the first response."""
    with server.connect() as s:
        s.sendall(raw)
        return Reader(s).response(head_only)


def rss_kib(pid):
    """The resident set size of process pid in KiB (VmRSS), 0 when /proc does not say."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def metric(server, name):
    """The value of an unlabelled metric from /metrics."""
    text = request(server, get("/metrics")).body.decode()
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def wait_ready(server, timeout=10):
    """Waits until /readyz answers 200. The port accepts before the daemon calls itself ready
    (/readyz says "starting" until the main thread has started every loop), and under a
    sanitizer that moment can come after the first requests were served."""
    deadline = time.time() + timeout
    while request(server, get("/readyz")).status != 200:
        if time.time() > deadline:
            raise AssertionError("/readyz not 200 within %.0f s:\n%s" % (timeout, server.output()))
        time.sleep(0.02)


def wait_quiet(server, timeout=5):
    """Waits until the only open connection is the one asking (earlier probes are closed)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metric(server, "snowflaked_connections_open") == 1:
            return
        time.sleep(0.02)
    raise AssertionError("connections did not settle")


def get(path, extra=""):
    return ("GET %s HTTP/1.1\r\nHost: t\r\n%s\r\n" % (path, extra)).encode()


class LoopbackServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """A fake peer: a socketserver handler (http.server's too) served on a free loopback port
    (self.port) from a daemon thread, a thread per connection, until stop()."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, handler):
        super().__init__(("127.0.0.1", 0), handler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def stop(self):
        self.shutdown()
        self.server_close()


def send_json(handler, status, body, headers=()):
    """Answers an http.server handler's request: status, a JSON body (bytes as they are, or an
    object to dump) with its Content-Type and Content-Length, and more (name, value) headers."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
