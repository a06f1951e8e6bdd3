"""Shared helpers for the fault-injection and hostile-client tests (test/fault/).

Each test file runs alone from this directory:
    SNOWFLAKED_BIN=../../build/snowflaked SFLOAD_BIN=../../build/sfload \
        python3 -m unittest -v test_x
It imports the integration harness (../integration/sfharness.py): every server gets its own
temporary data_dir and an ephemeral port on 127.0.0.1 and is killed by PID at the end.

Figures the tests measure are printed to stderr as "FIGURE <name>: <value>" lines (ctest -V and
--output-on-failure show them)."""
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import sfharness  # noqa: E402
from sfharness import (Reader, Server, free_port, get, metric, request,  # noqa: E402,F401
                       rss_kib, wait_quiet)

SFLOAD = os.environ.get("SFLOAD_BIN", "")
EPOCH_MS = 1577836800000  # snowflake.epoch default, 2020-01-01T00:00:00Z
TS_SHIFT = 22             # 41/5/5/12: dc 5 + worker 5 + sequence 12 bits below the timestamp


def figure(name, value):
    sys.stderr.write("FIGURE %s: %s\n" % (name, value))
    sys.stderr.flush()


def need_binary(testcase):
    if not sfharness.BINARY or not os.access(sfharness.BINARY, os.X_OK):
        testcase.skipTest("SNOWFLAKED_BIN is not set to the snowflaked binary")


# ---- Debian packages -------------------------------------------------------------------------

def ensure_programs(programs):
    """programs: {program: Debian package}. Installs the missing ones with apt-get (root only).
    Returns None when every program is on PATH, else the reason why not (for skipTest)."""
    missing = {prog: pkg for prog, pkg in programs.items() if not shutil.which(prog)}
    if not missing:
        return None
    pkgs = sorted(set(missing.values()))
    if os.geteuid() != 0:
        return "needs %s (not installed; not root, so apt-get is not possible)" % " ".join(pkgs)
    if not shutil.which("apt-get"):
        return "needs %s (not installed; no apt-get on this machine)" % " ".join(pkgs)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # DPkg::Lock::Timeout: parallel ctest runs may install at the same time.
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends",
               "-o", "DPkg::Lock::Timeout=180"] + pkgs
    log = []
    for cmd in (install, ["apt-get", "update", "-q", "-o", "DPkg::Lock::Timeout=180"], install):
        try:
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=300)
            log.append(r.stdout.decode(errors="replace")[-300:])
        except (OSError, subprocess.TimeoutExpired) as e:
            log.append(repr(e))
        if all(shutil.which(prog) for prog in missing):
            return None
    return "needs %s; apt-get install failed: %s" % (" ".join(pkgs), log[-1].strip())


def libfaketime():
    """Path of libfaketime's multi-threaded preload library (package libfaketime), or None."""
    for pattern in ("/usr/lib/*/faketime/libfaketimeMT.so.1",
                    "/usr/lib/faketime/libfaketimeMT.so.1",
                    "/usr/lib/*/faketime/libfaketime.so.1"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


# ---- processes -------------------------------------------------------------------------------

def discard(srv):
    """Ends a server that is not expected to stop cleanly (SIGKILL by PID if still running) and
    removes its temporary directory; never raises on its exit status."""
    if srv is None:
        return
    if srv.proc.poll() is None:
        srv.proc.kill()
        srv.proc.wait(timeout=10)
    try:
        srv.log.close()
    except OSError:
        pass
    srv.dir.cleanup()


def end_process(proc, timeout=10):
    """SIGTERM, then SIGKILL, a child we started (by its PID); no-op if it has exited."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def metrics_text(srv):
    return request(srv, get("/metrics")).body.decode()


def labelled(text, name, labels):
    """Value of name{labels} in a /metrics text, e.g. labelled(t, "x", 'kind="write"')."""
    m = re.search(r"^%s\{%s\} (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


# ---- IDs -------------------------------------------------------------------------------------

def read_ids(path):
    """IDs written by sfload --ids-out (8-byte little-endian each), as an array('Q')."""
    import array
    ids = array.array("Q")
    with open(path, "rb") as f:
        ids.frombytes(f.read())
    if sys.byteorder != "little":
        ids.byteswap()
    return ids


def id_ms(i):
    """Unix ms at which the tick of an ID (default layout and epoch) starts."""
    return (i >> TS_SHIFT) + EPOCH_MS


def read_lease(data_dir):
    """E from data_dir/snowflake.lease ("snowflaked-lease 1 <E> <crc>")."""
    with open(os.path.join(data_dir, "snowflake.lease")) as f:
        return int(f.read().split()[2])


# ---- raw HTTP exchanges ----------------------------------------------------------------------

def parse_responses(data, head_only=False):
    """Splits a byte stream into complete HTTP/1.x responses: ([(status, headers, body)], rest).
    rest holds whatever does not form a complete response (a truncated one, or garbage)."""
    out = []
    while True:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            return out, data
        lines = data[:end].decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
        if not m:
            return out, data
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        status = int(m.group(1))
        length = 0 if head_only or status in (100, 204, 304) else int(
            headers.get("content-length", "0"))
        if len(data) < end + 4 + length:
            return out, data
        out.append((status, headers, data[end + 4:end + 4 + length]))
        data = data[end + 4 + length:]


def exchange_all(port, raws, timeout=4.0):
    """Sends each raw request on its own new connection (all at once) and reads each until the
    server closes or `timeout` passes. Returns {key: (bytes, how)} with how in eof/reset/open."""
    import selectors
    sel = selectors.DefaultSelector()
    state = {}
    try:
        for key, raw in raws.items():
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                s.sendall(raw)
            except OSError:
                pass  # the server may refuse a long request before it is all sent
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, key)
            state[key] = [s, b"", None]
        deadline = time.time() + timeout
        while time.time() < deadline and any(v[2] is None for v in state.values()):
            for k, _ in sel.select(0.05):
                st = state[k.data]
                try:
                    d = k.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    d, st[2] = b"", "reset"
                if d:
                    st[1] += d
                else:
                    st[2] = st[2] or "eof"
                    sel.unregister(k.fileobj)
        return {k: (v[1], v[2] or "open") for k, v in state.items()}
    finally:
        for v in state.values():
            v[0].close()
        sel.close()


def cpu_share(srv, seconds):
    """Server CPU (utime+stime, all threads) over `seconds` of wall time, as a share of one core."""
    c0, t0 = srv.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return (srv.cpu_seconds() - c0) / (time.monotonic() - t0)


def stop_expect(srv, codes=(0,), timeout=20):
    """SIGTERM by PID; returns the exit status (asserted to be in codes) and the log."""
    if srv.proc.poll() is None:
        srv.proc.send_signal(signal.SIGTERM)
    try:
        rc = srv.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        srv.proc.wait()
        out = srv.output()
        discard(srv)
        raise AssertionError("snowflaked did not stop on SIGTERM within %ds:\n%s" % (timeout, out))
    out = srv.output()
    discard(srv)
    if rc not in codes:
        raise AssertionError("snowflaked exited %d (expected %s):\n%s" % (rc, codes, out[-3000:]))
    return rc, out
