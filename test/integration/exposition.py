"""A live /metrics exposition from a daemon that has served every route and protocol.

    with exercised_server() as (server, text):   # static identity, every listener open
        ...

exercise(http_port, memcached_port, echo_port) drives each HTTP route (every method family,
a 404, a 405, a 400, a HEAD), the memcached text protocol (storage, retrieval, arithmetic,
touch, meta commands, stats, an error) and the raw TCP echo, so that every labelled series the
daemon can print has been created (exercised_etcd_server: the same with its identity from a
one-member etcd). scrape(port) returns /metrics as text. metric_names(text)
gives the family names an exposition declares (# TYPE lines) and the sample names it prints.
Used by test_exposition.py (promtool check metrics) and by the checks of deploy/monitoring.
"""
import contextlib
import os
import re
import socket
import sys
import urllib.error
import urllib.request

import sfharness

TYPE_RE = re.compile(r"^# TYPE (\S+) (\S+)$", re.M)
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? ", re.M)


# exercised_server's bearer token: every request carries it (a daemon without one ignores it)
TOKEN = "exposition-token-0123456789"


def _http(port, method, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body,
                                 method=method, headers={"Authorization": "Bearer " + TOKEN})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _raw_http(port, raw):
    """Sends bytes the urllib client would refuse to send; returns the status line."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(raw)
        return s.recv(4096).split(b"\r\n", 1)[0]


def _memcached(port, lines):
    """Sends a memcached text-protocol session and reads until the final 'quit' closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"".join(l + b"\r\n" for l in lines) + b"quit\r\n")
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def exercise(http_port, memcached_port=None, echo_port=None):
    """Touches every route and protocol once or more; returns nothing, asserts the basics."""
    import json
    ok = []
    st, body = _http(http_port, "GET", "/id")
    ok.append(st == 200)
    sid = json.loads(body)["id"]
    for path in ("/id?format=text", "/ids?count=3", "/id/%s" % sid, "/uuids?count=2",
                 "/ulids?count=2", "/bounds?from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z",
                 "/healthz", "/readyz"):
        ok.append(_http(http_port, "GET", path)[0] == 200)
    for kind in ("uuid", "ulid"):
        st, body = _http(http_port, "GET", "/" + kind)
        ok.append(st == 200)
        ok.append(_http(http_port, "GET", "/%s/%s" % (kind, json.loads(body)["id"]))[0] == 200)
    ok.append(_http(http_port, "HEAD", "/id")[0] == 200)
    ok.append(_http(http_port, "PUT", "/cache/expo", b"41")[0] in (200, 201, 204))
    ok.append(_http(http_port, "GET", "/cache/expo")[0] == 200)
    ok.append(_http(http_port, "POST", "/cache/expo/incr")[0] == 200)
    ok.append(_http(http_port, "POST", "/cache/expo/decr")[0] == 200)
    ok.append(_http(http_port, "DELETE", "/cache/expo")[0] in (200, 204))
    ok.append(_http(http_port, "GET", "/cache/expo")[0] == 404)
    ok.append(_http(http_port, "POST", "/echo", b"hello")[0] == 200)
    # segment mode (the snowflaked_seq_* families): a namespace where the daemon has one
    ok.append(_http(http_port, "GET", "/seq/expo")[0] in (200, 404))
    ok.append(_http(http_port, "GET", "/seqs/expo?count=2")[0] in (200, 404))
    ok.append(_http(http_port, "GET", "/no/such/route")[0] == 404)
    ok.append(_http(http_port, "DELETE", "/id")[0] == 405)
    ok.append(_http(http_port, "GET", "/ids?count=banana")[0] == 400)
    ok.append(_raw_http(http_port, b"BREW / HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 4"))
    assert all(ok), "a route answered unexpectedly: %s" % ok
    if memcached_port:
        out = _memcached(memcached_port, [
            b"set a 0 0 1", b"1", b"add b 0 0 1", b"2", b"get a b", b"gets a", b"incr a 5",
            b"decr a 1", b"append a 0 0 1", b"x", b"touch b 100", b"delete b", b"get missing",
            b"mg a v", b"ms c 1", b"z", b"md c", b"ma a", b"mn", b"stats", b"stats slabs",
            b"version", b"bogus_command"])
        assert b"VALUE a" in out and b"ERROR" in out, out[-300:]
    if echo_port:
        with socket.create_connection(("127.0.0.1", echo_port), timeout=5) as s:
            s.sendall(b"ping\n")
            assert s.recv(16) == b"ping\n"


def scrape(http_port):
    st, body = _http(http_port, "GET", "/metrics")
    assert st == 200, st
    return body.decode()


def metric_names(text):
    """(families {name: type}, sample names) of an exposition."""
    return dict(TYPE_RE.findall(text)), set(SAMPLE_RE.findall(text))


@contextlib.contextmanager
def exercised_server(*extra_args, ready_timeout=5, **kw):
    """A daemon with its HTTP, memcached and echo listeners, ready and exercised; yields
    (server, text). extra_args and kw go to sfharness.Server."""
    import tlscerts
    mc, echo, https = sfharness.free_port(), sfharness.free_port(), sfharness.free_port()
    # a sequence namespace: on the file block source, or with worker_id "etcd" on the etcd one
    # (its snowflaked_seq_etcd_* families)
    seq_args = ["--set", 'sequences.namespaces=[{"name":"expo","block":10}]']
    certs = tlscerts.Certs()  # HTTPS too: the snowflaked_tls_* families exist only with TLS
    try:
        server = sfharness.Server("--set", "cache.memcached_port=%d" % mc,
                                  "--set", "echo.tcp_port=%d" % echo,
                                  "--set", "server.tls.port=%d" % https,
                                  "--set", "server.tls.cert_file=" + certs.server,
                                  "--set", "server.tls.key_file=" + certs.server_key,
                                  # access control with both credentials: the auth_granted and
                                  # tls_client_certificates families
                                  "--set", "server.tls.verify_client=optional",
                                  "--set", "server.tls.client_ca_file=" + certs.ca,
                                  "--set", 'auth.client_certificates=["CN=sf-client"]',
                                  "--set", "auth.token=" + TOKEN,
                                  *seq_args, *extra_args, **kw)
        try:
            sfharness.wait_ready(server, ready_timeout)
            exercise(server.port, mc, echo)
            exercise_tls(https, certs.ca, (certs.client, certs.client_key))
            yield server, scrape(server.port)
        finally:
            server.stop()
    finally:
        certs.cleanup()


def exercise_tls(port, ca, client=None):
    """One HTTPS write (with client, a (cert, key) pair: as that client certificate) and one
    failed handshake (plaintext to the TLS port)."""
    import ssl
    ctx = ssl.create_default_context(cafile=ca)
    if client:
        ctx.load_cert_chain(*client)
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                         server_hostname="127.0.0.1") as s:
        s.sendall(b"PUT /cache/tls HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                  b"Connection: close\r\n\r\nt")
        while s.recv(4096):
            pass
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass


def promtool():
    """The promtool command (Debian's prometheus package, installed when missing, as root)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
    import faultutil
    reason = faultutil.ensure_programs({"promtool": "prometheus"})
    if reason:
        raise AssertionError(reason)  # CI is root: never a silent skip
    return "promtool"


@contextlib.contextmanager
def exercised_etcd_server(**kw):
    """As exercised_server, with the worker id claimed from a one-member etcd on loopback over
    TLS with a client certificate (the identity_*, etcd_* and etcd_tls_* families exist only
    then). Fails when etcd cannot be installed."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
    import etcdcluster
    reason = etcdcluster.ensure_etcd()
    if reason:
        raise AssertionError(reason)  # CI is root: never a silent skip
    import tlscerts
    # over TLS with a client certificate: the etcd_tls_* families exist only then
    with tlscerts.Certs() as certs, etcdcluster.EtcdCluster(members=1, tls=certs) as ec:
        sets = []
        for kv in ("snowflake.worker_id=etcd", "snowflake.etcd.endpoints=" + ec.endpoints(),
                   "snowflake.etcd.ttl_s=5", "snowflake.etcd.fence_margin_ms=500",
                   "snowflake.etcd.tls.ca_file=" + certs.ca,
                   "snowflake.etcd.tls.cert_file=" + certs.client,
                   "snowflake.etcd.tls.key_file=" + certs.client_key):
            sets += ["--set", kv]
        with exercised_server(*sets, ready_timeout=15, **kw) as served:
            yield served
