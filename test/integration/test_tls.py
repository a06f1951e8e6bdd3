"""TLS on every listener (docs/tls.md) against real peers: curl, openssl s_client, Python's ssl,
pymemcache; hostile input; mutual TLS; start-up refusals; a SIGHUP rotation.

Certificates come from tlscerts.py (openssl in a temporary directory)."""
import errno
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

import sfharness
import tlscerts

CERTS = None


def setUpModule():
    global CERTS
    CERTS = tlscerts.Certs()


def tearDownModule():
    CERTS.cleanup()


def tls_sets(prefix, port, **kw):
    """--set arguments for one listener's tls object."""
    vals = {"port": port, "cert_file": CERTS.server, "key_file": CERTS.server_key}
    vals.update(kw)
    return sfharness.set_args(*("%s.%s=%s" % (prefix, k, v) for k, v in vals.items()))


def client_ctx(cert=None, key=None, ca=None, minv=None, maxv=None, alpn=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca or CERTS.ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    if minv:
        ctx.minimum_version = minv
    if maxv:
        ctx.maximum_version = maxv
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


def https_get(port, path="/id", ctx=None, session=None, close=True):
    """(status, body, ssl socket info dict) of one request on a new TLS connection."""
    ctx = ctx or client_ctx()
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as s:
        s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" %
                   (path, "Connection: close\r\n" if close else "")).encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if not close and b"\r\n\r\n" in data:
                head, _, body = data.partition(b"\r\n\r\n")
                m = re.search(rb"content-length: *(\d+)", head, re.I)
                if m and len(body) >= int(m.group(1)):
                    break
        info = {"version": s.version(), "alpn": s.selected_alpn_protocol(),
                "reused": s.session_reused, "session": s.session}
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1") else None
    return status, body, info


def metric(text, name, **labels):
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            got = line[len(name):].split(" ")[0].strip("{}")
            if ",".join(sorted(got.split(","))) == want:
                return float(line.rsplit(" ", 1)[1])
    return None


def s_client(port, *args, stdin=b"", timeout=15):
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, *args],
                       input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace")


def pymemcache_client():
    return sfharness.debian_import("pymemcache.client.base", "python3-pymemcache").Client


class TlsListeners(unittest.TestCase):
    """HTTP, memcached and echo each over TLS beside their plaintext listeners."""

    @classmethod
    def setUpClass(cls):
        cls.https = sfharness.free_port()
        cls.mc, cls.mcs = sfharness.free_port(), sfharness.free_port()
        cls.echo, cls.echos = sfharness.free_port(), sfharness.free_port()
        cls.server = sfharness.Server(
            "--set", "cache.memcached_port=%d" % cls.mc, "--set", "echo.tcp_port=%d" % cls.echo,
            "--set", "server.header_timeout_ms=700",
            *tls_sets("server.tls", cls.https),
            *tls_sets("cache.memcached_tls", cls.mcs),
            *tls_sets("echo.tcp_tls", cls.echos))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def metrics(self):
        st, body, _ = https_get(self.https, "/metrics")
        self.assertEqual(st, 200)
        return body.decode()

    def test_curl_get_id(self):
        r = subprocess.run(["curl", "-sS", "--cacert", CERTS.ca,
                            "https://127.0.0.1:%d/id" % self.https],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout.decode(), r'^\{"id":"\d+"\}$')
        # localhost is in the SAN too; the plaintext port beside it still serves
        r = subprocess.run(["curl", "-sS", "--cacert", CERTS.ca, "--resolve",
                            "localhost:%d:127.0.0.1" % self.https,
                            "https://localhost:%d/id" % self.https],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run(["curl", "-sS", "http://127.0.0.1:%d/id" % self.server.port],
                           stdout=subprocess.PIPE, timeout=15)
        self.assertRegex(r.stdout.decode(), r'^\{"id":"\d+"\}$')

    def test_s_client_chain_and_alpn(self):
        rc, out = s_client(self.https, "-CAfile", CERTS.ca, "-verify_return_error",
                           "-alpn", "http/1.1", "-servername", "localhost", "-ign_eof",
                           stdin=b"GET /id HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertIn("Verify return code: 0 (ok)", out)
        self.assertIn("ALPN protocol: http/1.1", out)
        self.assertIn("HTTP/1.1 200", out)

    def test_tls12_and_tls13(self):
        for v, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
            st, body, info = https_get(self.https, ctx=client_ctx(minv=v, maxv=v))
            self.assertEqual((st, info["version"]), (200, name))
            self.assertRegex(body.decode(), r'^\{"id":"\d+"\}$')
        for v in ("-tls1_2", "-tls1_3"):
            rc, out = s_client(self.https, v, "-CAfile", CERTS.ca, stdin=b"")
            self.assertIn("Verify return code: 0 (ok)", out, v)
        # TLS 1.1 is below min_version
        rc, out = s_client(self.https, "-tls1_1", stdin=b"")
        self.assertNotEqual(rc, 0, out)

    def test_keep_alive_and_pipelining(self):
        ctx = client_ctx()
        raw = socket.create_connection(("127.0.0.1", self.https), timeout=5)
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
            data = b""
            while data.count(b"HTTP/1.1 200") < 20:
                chunk = s.recv(65536)
                self.assertTrue(chunk, data)
                data += chunk
            # a body larger than a record and than the socket's first write: a cache value
            big = os.urandom(300000).hex().encode()[:600000]
            s.sendall(b"PUT /cache/tlsbig HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                      % len(big) + big)
            data = b""
            while b"\r\n\r\n" not in data:
                data += s.recv(65536)
            self.assertRegex(data, rb"^HTTP/1.1 2\d\d")
        st, body, _ = https_get(self.https, "/cache/tlsbig")
        self.assertEqual((st, len(body)), (200, len(big)))
        self.assertEqual(body, big)

    def test_idle_connection_gives_buffers_back_and_goes_on(self):
        # idle for more than two sweeps (CONN_TLS_SWEEP_MS): OpenSSL's buffers were freed, the
        # next requests reallocate them
        raw = socket.create_connection(("127.0.0.1", self.https), timeout=5)
        with client_ctx().wrap_socket(raw, server_hostname="127.0.0.1") as s:
            for i in range(3):
                s.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n")
                data = b""
                while not re.search(rb'\{"id":"\d+"\}$', data):
                    chunk = s.recv(4096)
                    self.assertTrue(chunk, (i, data))
                    data += chunk
                self.assertTrue(data.startswith(b"HTTP/1.1 200"), data)
                if i < 2:
                    time.sleep(2.2)

    def test_resumption_with_tickets(self):
        # Python: the ticket of a first connection resumes the second
        ctx = client_ctx()
        st, _, info = https_get(self.https, ctx=ctx)
        self.assertEqual(st, 200)
        st, _, info2 = https_get(self.https, ctx=ctx, session=info["session"])
        self.assertEqual(st, 200)
        self.assertTrue(info2["reused"])
        # openssl s_client: -sess_out, then -sess_in reuses it
        sess = os.path.join(CERTS.dir, "sess.pem")
        req = b"GET /id HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        s_client(self.https, "-CAfile", CERTS.ca, "-ign_eof", "-sess_out", sess, stdin=req)
        rc, out = s_client(self.https, "-CAfile", CERTS.ca, "-ign_eof", "-sess_in", sess,
                           stdin=req)
        self.assertIn("Reused, TLSv1.3", out)
        self.assertGreaterEqual(metric(self.metrics(), "snowflaked_tls_handshakes_total",
                                       listener="http", resumed="true"), 2)

    def test_alpn_without_http11_fails(self):
        with self.assertRaises(ssl.SSLError) as cm:
            https_get(self.https, ctx=client_ctx(alpn=["h2"]))
        self.assertIn("NO APPLICATION PROTOCOL", str(cm.exception).upper().replace("_", " "))
        st, _, info = https_get(self.https, ctx=client_ctx(alpn=["h2", "http/1.1"]))
        self.assertEqual((st, info["alpn"]), (200, "http/1.1"))
        self.assertGreaterEqual(metric(self.metrics(), "snowflaked_tls_handshake_failures_total",
                                       listener="http", reason="alpn"), 1)

    def test_memcached_over_tls(self):
        Client = pymemcache_client()
        mc = Client(("127.0.0.1", self.mcs), timeout=5, tls_context=client_ctx())
        try:
            self.assertTrue(mc.set("tlskey", b"over tls", noreply=False))
            self.assertEqual(mc.get("tlskey"), b"over tls")
            self.assertEqual(mc.get_many(["tlskey", "nokey"]), {"tlskey": b"over tls"})
        finally:
            mc.close()
        plain = Client(("127.0.0.1", self.mc), timeout=5)  # the same store, in plaintext
        try:
            self.assertEqual(plain.get("tlskey"), b"over tls")
        finally:
            plain.close()

    def test_memcached_stats_settings_ssl(self):
        """stats settings has memcached's TLS build's ssl_* lines, from cache.memcached_tls
        (memcached's ssl_settings.t reads them), on either memcached port."""
        def stats(sock, which=b""):
            sock.sendall(b"stats%s\r\n" % which)
            got = b""
            while not got.endswith(b"END\r\n"):
                data = sock.recv(65536)
                self.assertTrue(data, got)
                got += data
            return dict(ln.split(b" ", 2)[1:] for ln in got.split(b"\r\n") if ln.startswith(b"STAT "))

        def settings(sock):
            return stats(sock, b" settings")
        raw = socket.create_connection(("127.0.0.1", self.mcs), timeout=5)
        with client_ctx().wrap_socket(raw, server_hostname="127.0.0.1") as s:
            over_tls = settings(s)
        with socket.create_connection(("127.0.0.1", self.mc), timeout=5) as s:
            plain = settings(s)
        def ssl_lines(st):
            return {k: v for k, v in st.items() if k.startswith(b"ssl_")}
        self.assertEqual(ssl_lines(plain), ssl_lines(over_tls))
        want = {b"ssl_enabled": b"yes", b"ssl_chain_cert": CERTS.server.encode(),
                b"ssl_key": CERTS.server_key.encode(), b"ssl_verify_mode": b"0",
                b"ssl_keyformat": b"1", b"ssl_ciphers": b"NULL", b"ssl_ca_cert": b"NULL",
                b"ssl_wbuf_size": b"16384", b"ssl_session_cache": b"yes",
                b"ssl_kernel_tls": b"no", b"ssl_min_version": b"tlsv1.2"}
        self.assertEqual(ssl_lines(over_tls), want)
        names = list(over_tls)  # memcached's order: after inline_ascii_response
        self.assertEqual(names[names.index(b"inline_ascii_response") + 1], b"ssl_enabled")
        # stats: memcached -Z's two more, after log_watchers; a handshake that fails counts
        raw = socket.create_connection(("127.0.0.1", self.mcs), timeout=5)
        with client_ctx().wrap_socket(raw, server_hostname="127.0.0.1") as s:
            before = stats(s)
            names = list(before)
            self.assertEqual(names[names.index(b"log_watchers") + 1:names.index(b"log_watchers") + 3],
                             [b"ssl_handshake_errors", b"time_since_server_cert_refresh"])
            self.assertLess(int(before[b"time_since_server_cert_refresh"]), 3600)
            with socket.create_connection(("127.0.0.1", self.mcs), timeout=5) as bad:
                bad.sendall(b"get x\r\n")  # plaintext to the TLS port
                bad.recv(100)
            after = stats(s)
            self.assertEqual(int(after[b"ssl_handshake_errors"]),
                             int(before[b"ssl_handshake_errors"]) + 1)

    def test_echo_over_tls(self):
        raw = socket.create_connection(("127.0.0.1", self.echos), timeout=5)
        with client_ctx().wrap_socket(raw, server_hostname="127.0.0.1") as s:
            payload = os.urandom(100000)
            s.sendall(payload)
            got = b""
            while len(got) < len(payload):
                chunk = s.recv(65536)
                self.assertTrue(chunk)
                got += chunk
            self.assertEqual(got, payload)

    def failures(self, reason):
        return metric(self.metrics(), "snowflaked_tls_handshake_failures_total", listener="http",
                      reason=reason) or 0

    def closed_without_answer(self, data, timeout=5):
        """Sends data to the TLS port; returns what came back before the server closed."""
        s = socket.create_connection(("127.0.0.1", self.https), timeout=timeout)
        s.sendall(data)
        got = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            pass
        s.close()
        return got

    def test_garbage_before_client_hello(self):
        before = self.failures("not_tls")
        for _ in range(5):
            got = self.closed_without_answer(b"\x00\x01garbage garbage garbage\r\n" * 4)
            self.assertNotIn(b"HTTP/1.1", got)
        self.assertEqual(self.failures("not_tls"), before + 5)
        # logged once per cause and interval, not per client
        time.sleep(1.5)
        self.assertEqual(len(re.findall(r"TLS handshakes? failed \(not_tls",
                                        self.server.output())), 1, self.server.output())
        self.assertEqual(https_get(self.https)[0], 200)

    def test_plaintext_request_to_tls_port(self):
        before = self.failures("not_tls")
        got = self.closed_without_answer(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertNotIn(b"HTTP/1.1 200", got)
        self.assertEqual(self.failures("not_tls"), before + 1)

    def test_stalled_handshake_times_out(self):
        before = self.failures("timeout")
        s = socket.create_connection(("127.0.0.1", self.https), timeout=5)
        s.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
        t0 = time.time()
        self.assertEqual(s.recv(100), b"")
        self.assertLess(time.time() - t0, 4)
        s.close()
        self.assertEqual(self.failures("timeout"), before + 1)

    def test_renegotiation_refused(self):
        m = self.metrics()
        before = metric(m, "snowflaked_tls_handshakes_total", listener="http", resumed="false")
        p = subprocess.Popen(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.https,
                              "-tls1_2", "-CAfile", CERTS.ca],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        time.sleep(0.5)
        p.stdin.write(b"R\n")
        p.stdin.flush()
        time.sleep(0.5)
        try:
            out = p.communicate(b"GET /id HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                timeout=15)[0]
        except BrokenPipeError:
            out = p.communicate(timeout=15)[0]
        out = out.decode(errors="replace")
        self.assertIn("RENEGOTIATING", out)
        after = metric(self.metrics(), "snowflaked_tls_handshakes_total", listener="http",
                       resumed="false")
        # the metrics request itself was one more full handshake; the renegotiation none
        self.assertEqual(after, before + 2, out)
        self.assertEqual(https_get(self.https)[0], 200)

    def test_metrics(self):
        https_get(self.https)
        m = self.metrics()
        self.assertGreaterEqual(metric(m, "snowflaked_tls_handshakes_total", listener="http",
                                       resumed="false"), 1)
        # exactly the certificate's notAfter: a 10-digit Unix time must not be rounded (%.9g
        # printed it to tens of seconds)
        end = subprocess.run(["openssl", "x509", "-in", CERTS.server, "-noout", "-enddate"],
                             capture_output=True, text=True, check=True).stdout
        not_after = ssl.cert_time_to_seconds(end.strip().split("=", 1)[1])
        for listener in ("http", "memcached", "echo"):
            na = metric(m, "snowflaked_tls_certificate_not_after_seconds", listener=listener)
            self.assertTrue(na and 25 * 86400 < na - time.time() < 31 * 86400, (listener, na))
            self.assertEqual(na, not_after, listener)
            self.assertEqual(metric(m, "snowflaked_tls_reloads_total", listener=listener,
                                    result="failed"), 0)
        self.assertIsNotNone(metric(m, "snowflaked_tls_handshake_failures_total",
                                    listener="memcached", reason="bad_certificate"))


class MutualTls(unittest.TestCase):
    """verify_client required on HTTP, optional on the echo."""

    @classmethod
    def setUpClass(cls):
        cls.https, cls.echos = sfharness.free_port(), sfharness.free_port()
        cls.server = sfharness.Server(
            *tls_sets("server.tls", cls.https, verify_client="required",
                      client_ca_file=CERTS.ca),
            *tls_sets("echo.tcp_tls", cls.echos, verify_client="optional",
                      client_ca_file=CERTS.ca, min_version="1.3",
                      ciphersuites="TLS_CHACHA20_POLY1305_SHA256", session_tickets="false"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def curl(self, *args):
        return subprocess.run(["curl", "-sS", "--cacert", CERTS.ca, *args,
                               "https://127.0.0.1:%d/id" % self.https],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15)

    def bad_cert_failures(self):
        st, body, _ = https_get(self.https, "/metrics",
                                ctx=client_ctx(CERTS.client, CERTS.client_key))
        return metric(body.decode(), "snowflaked_tls_handshake_failures_total", listener="http",
                      reason="bad_certificate")

    def test_client_certificate_accepted(self):
        r = self.curl("--cert", CERTS.client, "--key", CERTS.client_key)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout.decode(), r'^\{"id":"\d+"\}$')

    def test_refused_without_or_with_a_bad_certificate(self):
        before = self.bad_cert_failures()
        for args in ([], ["--cert", CERTS.other_client, "--key", CERTS.other_client_key],
                     ["--cert", CERTS.expired, "--key", CERTS.expired_key]):
            r = self.curl(*args)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertNotRegex(r.stdout.decode(), r'^\{"id":"\d+"\}$')
        for cert, key in ((None, None), (CERTS.other_client, CERTS.other_client_key),
                          (CERTS.expired, CERTS.expired_key)):
            with self.assertRaises((ssl.SSLError, ConnectionError)):
                https_get(self.https, ctx=client_ctx(cert, key))
        self.assertEqual(self.bad_cert_failures(), before + 6)

    def test_optional_verification(self):
        for cert, key, ok in ((None, None, True), (CERTS.client, CERTS.client_key, True),
                              (CERTS.other_client, CERTS.other_client_key, False)):
            raw = socket.create_connection(("127.0.0.1", self.echos), timeout=5)
            try:
                with client_ctx(cert, key).wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.sendall(b"ping")
                    self.assertEqual(s.recv(10), b"ping")
                self.assertTrue(ok, cert)
            except (ssl.SSLError, ConnectionError):
                self.assertFalse(ok, cert)


    def test_min_version_ciphersuites_and_no_tickets(self):
        raw = socket.create_connection(("127.0.0.1", self.echos), timeout=5)
        with client_ctx().wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"x")
            self.assertEqual(s.recv(10), b"x")
            self.assertEqual((s.version(), s.cipher()[0]),
                             ("TLSv1.3", "TLS_CHACHA20_POLY1305_SHA256"))
            session = s.session
        self.assertFalse(session.has_ticket)  # session_tickets false: nothing to resume with
        v12 = ssl.TLSVersion.TLSv1_2
        with self.assertRaises((ssl.SSLError, ConnectionError)):
            raw = socket.create_connection(("127.0.0.1", self.echos), timeout=5)
            with client_ctx(minv=v12, maxv=v12).wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(b"x")
                s.recv(10)
        st, body, _ = https_get(self.https, "/metrics",
                                ctx=client_ctx(CERTS.client, CERTS.client_key))
        self.assertEqual(metric(body.decode(), "snowflaked_tls_handshake_failures_total",
                                listener="echo", reason="protocol_version"), 1)


class Rotation(unittest.TestCase):
    """SIGHUP: new connections get the new certificate, open ones keep theirs; a bad pair is
    refused and the old one stays."""

    def test_sighup_rotates(self):
        cert = os.path.join(CERTS.dir, "live.pem")
        key = os.path.join(CERTS.dir, "live.key")
        with open(CERTS.server) as f, open(cert, "w") as g:
            g.write(f.read())
        with open(CERTS.server_key) as f, open(key, "w") as g:
            g.write(f.read())
        port = sfharness.free_port()
        server = sfharness.Server(*tls_sets("server.tls", port, cert_file=cert, key_file=key))
        try:
            req = b"GET /id HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            old = ssl.PEM_cert_to_DER_cert(open(CERTS.server).read())
            ticket_ctx = client_ctx()
            st, _, info = https_get(port, ctx=ticket_ctx)  # a ticket from before the rotation
            self.assertEqual(st, 200)
            # an open connection from before the rotation
            raw = socket.create_connection(("127.0.0.1", port), timeout=5)
            keep = client_ctx().wrap_socket(raw, server_hostname="127.0.0.1")
            self.assertEqual(keep.getpeercert(binary_form=True), old)
            with open(CERTS.server2) as f, open(cert, "w") as g:
                g.write(f.read())
            with open(CERTS.server2_key) as f, open(key, "w") as g:
                g.write(f.read())
            server.signal(signal.SIGHUP)
            new = ssl.PEM_cert_to_DER_cert(open(CERTS.server2).read())
            deadline = time.time() + 5
            while time.time() < deadline:
                raw = socket.create_connection(("127.0.0.1", port), timeout=5)
                with client_ctx().wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    got = s.getpeercert(binary_form=True)
                if got == new:
                    break
                time.sleep(0.05)
            self.assertEqual(got, new)
            raw = socket.create_connection(("127.0.0.1", port), timeout=5)
            with client_ctx().wrap_socket(raw, server_hostname="127.0.0.1") as s:
                self.assertEqual(s.getpeercert()["serialNumber"].upper().lstrip("0"),
                                 CERTS.serial_of(CERTS.server2).upper().lstrip("0"))
            # the ticket keys survived the reload: the old ticket resumes
            st, _, info2 = https_get(port, ctx=ticket_ctx, session=info["session"])
            self.assertEqual(st, 200)
            self.assertTrue(info2["reused"])
            keep.sendall(b"GET /id HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            self.assertIn(b"HTTP/1.1 200", keep.recv(4096))
            keep.close()
            # a key that does not match: refused, the new pair stays in service
            with open(CERTS.server_key) as f, open(key, "w") as g:
                g.write(f.read())
            server.signal(signal.SIGHUP)
            deadline = time.time() + 5
            while time.time() < deadline and "reload refused" not in server.output():
                time.sleep(0.05)
            self.assertIn("server.tls: certificate reload refused", server.output())
            st, body, _ = https_get(port, "/metrics")
            m = body.decode()
            self.assertEqual(metric(m, "snowflaked_tls_reloads_total", listener="http",
                                    result="failed"), 1)
            self.assertEqual(metric(m, "snowflaked_tls_reloads_total", listener="http",
                                    result="ok"), 1)
            raw = socket.create_connection(("127.0.0.1", port), timeout=5)
            with client_ctx().wrap_socket(raw, server_hostname="127.0.0.1") as s:
                self.assertEqual(s.getpeercert(binary_form=True), new)
        finally:
            server.stop()


def mc_command(sock, line):
    """One memcached command on sock (plain or TLS): its reply line, CRLF included."""
    sock.sendall(line)
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def copy_file(src, dst):
    with open(src, "rb") as f, open(dst + ".tmp", "wb") as g:
        g.write(f.read())
    os.replace(dst + ".tmp", dst)


def served_serial(port):
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    with client_ctx().wrap_socket(raw, server_hostname="127.0.0.1") as s:
        return s.getpeercert()["serialNumber"].upper().lstrip("0")


def serial(cert):
    return CERTS.serial_of(cert).upper().lstrip("0")


class RefreshCerts(unittest.TestCase):
    """memcached's refresh_certs on the memcached ports: every TLS listener reloaded as on
    SIGHUP, with memcached 1.6.18's replies (compared with Debian's memcached -Z)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sf_refresh_", dir=CERTS.dir)
        self.cert = os.path.join(self.dir, "tls.crt")
        self.key = os.path.join(self.dir, "tls.key")
        copy_file(CERTS.server, self.cert)
        copy_file(CERTS.server_key, self.key)

    def start(self):
        self.mc, self.mcs, self.https = (sfharness.free_port(), sfharness.free_port(),
                                         sfharness.free_port())
        server = sfharness.Server(
            "--set", "cache.memcached_port=%d" % self.mc,
            *tls_sets("cache.memcached_tls", self.mcs, cert_file=self.cert, key_file=self.key),
            *tls_sets("server.tls", self.https, cert_file=self.cert, key_file=self.key))
        self.addCleanup(server.stop)
        return server

    def tls_conn(self, port):
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        s = client_ctx().wrap_socket(raw, server_hostname="127.0.0.1")
        self.addCleanup(s.close)
        return s

    def stats(self, sock):
        sock.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            data += sock.recv(65536)
        return dict(l.split(" ", 2)[1:] for l in data.decode().split("\r\n")
                    if l.startswith("STAT "))

    def test_refresh_over_plaintext_and_tls(self):
        self.start()
        self.assertEqual(served_serial(self.mcs), serial(CERTS.server))
        plain = socket.create_connection(("127.0.0.1", self.mc), timeout=5)
        self.addCleanup(plain.close)
        time.sleep(1.1)
        before = self.stats(plain)  # memcached -Z's two TLS stats
        self.assertGreaterEqual(int(before["time_since_server_cert_refresh"]), 1)
        # sfharness.Server's plain TCP connect and close on the TLS port (how it waits for the
        # port): a failed handshake (eof)
        self.assertGreaterEqual(int(before["ssl_handshake_errors"]), 1)
        copy_file(CERTS.server2, self.cert)
        copy_file(CERTS.server2_key, self.key)
        self.assertEqual(mc_command(plain, b"refresh_certs\r\n"), b"OK\r\n")
        self.assertLess(int(self.stats(plain)["time_since_server_cert_refresh"]),
                        int(before["time_since_server_cert_refresh"]))
        self.assertEqual(served_serial(self.mcs), serial(CERTS.server2))
        self.assertEqual(served_serial(self.https), serial(CERTS.server2))  # every listener
        over_tls = self.tls_conn(self.mcs)
        copy_file(CERTS.server, self.cert)
        copy_file(CERTS.server_key, self.key)
        self.assertEqual(mc_command(over_tls, b"refresh_certs\r\n"), b"OK\r\n")
        self.assertEqual(served_serial(self.mcs), serial(CERTS.server))
        # the asking connection goes on, on the certificate it was accepted with
        self.assertEqual(mc_command(over_tls, b"version\r\n")[:8], b"VERSION ")
        # noreply: no "OK", the next command answers
        self.assertEqual(mc_command(plain, b"refresh_certs noreply\r\nversion\r\n")[:8],
                         b"VERSION ")

    def bad_pairs(self):
        """(what, cert source, key source): each makes the reload fail."""
        return [("key of another certificate", CERTS.server2, CERTS.server_key),
                ("certificate not PEM", CERTS.garbage, CERTS.server_key),
                ("key not PEM", CERTS.server, CERTS.garbage),
                ("certificate missing", None, CERTS.server_key)]

    def install(self, cert, key):
        if cert is None:
            os.unlink(self.cert)
        else:
            copy_file(cert, self.cert)
        copy_file(key, self.key)

    def restore(self):
        copy_file(CERTS.server, self.cert)
        copy_file(CERTS.server_key, self.key)

    def test_bad_pair_keeps_the_old_certificate(self):
        server = self.start()
        plain = socket.create_connection(("127.0.0.1", self.mc), timeout=5)
        self.addCleanup(plain.close)
        for what, cert, key in self.bad_pairs():
            with self.subTest(what):
                self.install(cert, key)
                reply = mc_command(plain, b"refresh_certs\r\n")
                self.assertTrue(reply.startswith(b"Error "), reply)
                self.assertTrue(reply.endswith(b"\r\n"), reply)
                self.assertEqual(served_serial(self.mcs), serial(CERTS.server))
                self.restore()
        self.assertIn("certificate reload refused, the previous one stays in service "
                      "(refresh_certs)", server.output())

    def test_replies_same_as_memcached(self):
        import test_memcache_diff as diff
        diff.memcached_or_skip("1.6.18")
        self.start()
        theirs = diff.Memcached("-Z", "-o", "ssl_chain_cert=%s,ssl_key=%s" % (self.cert, self.key))
        self.addCleanup(theirs.stop)
        plain_mc = diff.Memcached()
        self.addCleanup(plain_mc.stop)
        ours = socket.create_connection(("127.0.0.1", self.mc), timeout=5)
        self.addCleanup(ours.close)
        ref = self.tls_conn(theirs.port)
        cases = [("good pair", CERTS.server2, CERTS.server2_key)] + self.bad_pairs()
        for what, cert, key in cases:
            with self.subTest(what):
                self.install(cert, key)
                a = mc_command(ours, b"refresh_certs\r\n")
                b = mc_command(ref, b"refresh_certs\r\n")
                self.assertEqual(a, b)
                self.assertEqual(a == b"OK\r\n", what == "good pair", a)
                self.restore()
                mc_command(ref, b"refresh_certs\r\n")
                mc_command(ours, b"refresh_certs\r\n")
        # no TLS at all: memcached without -Z, us without a TLS listener
        srv, port = sfharness.memcache_server()
        self.addCleanup(srv.stop)
        for line in (b"refresh_certs\r\n", b"refresh_certs noreply\r\n"):
            a = socket.create_connection(("127.0.0.1", port), timeout=5)
            b = socket.create_connection(("127.0.0.1", plain_mc.port), timeout=5)
            ra, rb = mc_command(a, line), mc_command(b, line)
            a.close()
            b.close()
            # noreply silences "OK" only: memcached writes its error lines regardless
            self.assertEqual(ra, b"Error TLS not enabled\r\n")
            self.assertEqual(ra, rb)


class WatchFiles(unittest.TestCase):
    """tls.watch_files: a change in the files' directory reloads them without SIGHUP, including
    kubelet's update of a Secret volume (a new ..<timestamp> directory, then the `..data`
    symlink swapped by an atomic rename; tls.crt -> ..data/tls.crt)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sf_watch_", dir=CERTS.dir)

    def start(self, *extra):
        port = sfharness.free_port()
        server = sfharness.Server(*tls_sets("server.tls", port,
                                            cert_file=os.path.join(self.dir, "tls.crt"),
                                            key_file=os.path.join(self.dir, "tls.key"),
                                            **dict(extra)))
        self.addCleanup(server.stop)
        return server, port

    def wait_serial(self, port, cert, timeout=3.0):
        deadline = time.time() + timeout
        while True:
            got = served_serial(port)
            if got == serial(cert) or time.time() > deadline:
                return got
            time.sleep(0.05)

    def test_files_replaced_in_place(self):
        copy_file(CERTS.server, os.path.join(self.dir, "tls.crt"))
        copy_file(CERTS.server_key, os.path.join(self.dir, "tls.key"))
        server, port = self.start()
        self.assertEqual(served_serial(port), serial(CERTS.server))
        # written in place (truncate and write), as cp does
        for src, name in ((CERTS.server2, "tls.crt"), (CERTS.server2_key, "tls.key")):
            with open(src, "rb") as f, open(os.path.join(self.dir, name), "wb") as g:
                g.write(f.read())
        self.assertEqual(self.wait_serial(port, CERTS.server2), serial(CERTS.server2))
        deadline = time.time() + 3  # the log is written by a thread of its own
        while time.time() < deadline and "(files changed)" not in server.output():
            time.sleep(0.05)
        self.assertIn("(files changed)", server.output())
        # a bad pair: refused, logged, the one in service stays
        copy_file(CERTS.server_key, os.path.join(self.dir, "tls.key"))
        deadline = time.time() + 3
        while time.time() < deadline and "reload refused" not in server.output():
            time.sleep(0.05)
        self.assertIn("certificate reload refused, the previous one stays in service "
                      "(files changed)", server.output())
        self.assertEqual(served_serial(port), serial(CERTS.server2))

    def kubelet_update(self, cert, key, stamp):
        """What kubelet's AtomicWriter does: the files in a new ..<timestamp> directory, then a
        new `..data` symlink renamed over the old one."""
        ts = os.path.join(self.dir, "..2026_12_03_%s" % stamp)
        os.mkdir(ts)
        copy_file(cert, os.path.join(ts, "tls.crt"))
        copy_file(key, os.path.join(ts, "tls.key"))
        tmp = os.path.join(self.dir, "..data_tmp")
        os.symlink(os.path.basename(ts), tmp)
        os.rename(tmp, os.path.join(self.dir, "..data"))
        for name in ("tls.crt", "tls.key"):
            link = os.path.join(self.dir, name)
            if not os.path.islink(link):
                os.symlink(os.path.join("..data", name), link)

    def test_kubernetes_secret_volume_update(self):
        self.kubelet_update(CERTS.server, CERTS.server_key, "a")
        server, port = self.start()
        self.assertEqual(served_serial(port), serial(CERTS.server))
        self.kubelet_update(CERTS.server2, CERTS.server2_key, "b")
        self.assertEqual(self.wait_serial(port, CERTS.server2), serial(CERTS.server2))
        self.kubelet_update(CERTS.server, CERTS.server_key, "c")
        self.assertEqual(self.wait_serial(port, CERTS.server), serial(CERTS.server))

    def test_directory_removed_and_recreated(self):
        """rm -rf dir && mkdir dir && cp ...: the watch on the old directory died with it; the
        new one at the same path is watched (at once, or within the 2 s recheck) and its files
        are loaded. Once more slowly, with the directory missing for a while: the certificate in
        service stays, no reload is tried, and one line says it went away, one that it is back."""
        gone_line = "TLS certificate directory %s went away" % self.dir
        back_line = "TLS certificate directory %s is back" % self.dir
        copy_file(CERTS.server, os.path.join(self.dir, "tls.crt"))
        copy_file(CERTS.server_key, os.path.join(self.dir, "tls.key"))
        server, port = self.start()
        self.assertEqual(served_serial(port), serial(CERTS.server))
        shutil.rmtree(self.dir)
        os.mkdir(self.dir)
        copy_file(CERTS.server2, os.path.join(self.dir, "tls.crt"))
        copy_file(CERTS.server2_key, os.path.join(self.dir, "tls.key"))
        self.assertEqual(self.wait_serial(port, CERTS.server2, timeout=6), serial(CERTS.server2))
        # Told or not: the new directory may have come before the old one's removal was seen
        # (and may even have the old inode's number); told both ways or neither.
        out = server.output()
        gone, back = out.count(gone_line), out.count(back_line)
        self.assertLessEqual(gone, 1, out)
        self.assertEqual(gone, back, out)

        shutil.rmtree(self.dir)
        deadline = time.time() + 5
        while time.time() < deadline and server.output().count(gone_line) == gone:
            time.sleep(0.05)
        time.sleep(3)  # more than a recheck period and the debounce: nothing is reloaded
        self.assertEqual(served_serial(port), serial(CERTS.server2))
        os.mkdir(self.dir)
        copy_file(CERTS.server, os.path.join(self.dir, "tls.crt"))
        copy_file(CERTS.server_key, os.path.join(self.dir, "tls.key"))
        self.assertEqual(self.wait_serial(port, CERTS.server, timeout=6), serial(CERTS.server))
        out = server.output()
        self.assertEqual(out.count(gone_line), gone + 1, out)
        self.assertEqual(out.count(back_line), back + 1, out)
        self.assertNotIn("reload refused", out)
        # and the directory now in place is the one watched
        copy_file(CERTS.server2, os.path.join(self.dir, "tls.crt"))
        copy_file(CERTS.server2_key, os.path.join(self.dir, "tls.key"))
        self.assertEqual(self.wait_serial(port, CERTS.server2), serial(CERTS.server2))

    def test_unrelated_writes_reload_nothing(self):
        """A file beside the certificates written again and again (a log in the same directory),
        or the same bytes copied over the certificate: nothing is reloaded or logged, so the
        reload's own log line cannot feed the watch. Other bytes then reload at once."""
        copy_file(CERTS.server, os.path.join(self.dir, "tls.crt"))
        copy_file(CERTS.server_key, os.path.join(self.dir, "tls.key"))
        server, port = self.start()
        for i in range(4):
            with open(os.path.join(self.dir, "daemon.log"), "a") as f:
                f.write("line %d\n" % i)
            time.sleep(0.7)  # past the debounce: each write is a burst of its own
        copy_file(CERTS.server, os.path.join(self.dir, "tls.crt"))
        time.sleep(1.2)
        out = server.output()
        self.assertNotIn("certificate reloaded", out)
        self.assertNotIn("reload refused", out)
        self.assertEqual(served_serial(port), serial(CERTS.server))
        copy_file(CERTS.server2, os.path.join(self.dir, "tls.crt"))
        copy_file(CERTS.server2_key, os.path.join(self.dir, "tls.key"))
        self.assertEqual(self.wait_serial(port, CERTS.server2), serial(CERTS.server2))
        self.assertEqual(server.output().count("certificate reloaded"), 1, server.output())

    def test_watch_off(self):
        copy_file(CERTS.server, os.path.join(self.dir, "tls.crt"))
        copy_file(CERTS.server_key, os.path.join(self.dir, "tls.key"))
        server, port = self.start(("watch_files", "false"))
        copy_file(CERTS.server2, os.path.join(self.dir, "tls.crt"))
        copy_file(CERTS.server2_key, os.path.join(self.dir, "tls.key"))
        time.sleep(1.5)
        self.assertEqual(served_serial(port), serial(CERTS.server))
        server.signal(signal.SIGHUP)
        self.assertEqual(self.wait_serial(port, CERTS.server2), serial(CERTS.server2))


class StartupRefusals(unittest.TestCase):
    """A TLS listener that cannot work refuses the start with exit 2 and one clear line."""

    def run_daemon(self, *sets):
        import test_startup
        code, err = test_startup.run(*sfharness.set_args(*sets),
                                     env={"SNOWFLAKED_SNOWFLAKE_DATACENTER_ID": "7"})
        return code, err.decode(errors="replace")

    def test_port_without_certificate(self):
        code, err = self.run_daemon("server.tls.port=%d" % sfharness.free_port())
        self.assertEqual(code, 2, err)
        self.assertIn("server.tls.port: TLS on port", err)
        self.assertIn("server.tls.cert_file", err)

    def test_verify_without_ca(self):
        code, err = self.run_daemon("server.tls.port=%d" % sfharness.free_port(),
                                    "server.tls.cert_file=" + CERTS.server,
                                    "server.tls.key_file=" + CERTS.server_key,
                                    "server.tls.verify_client=required")
        self.assertEqual(code, 2, err)
        self.assertIn("server.tls.verify_client", err)
        self.assertIn("client_ca_file", err)

    def test_bad_files(self):
        port = "server.tls.port=%d" % sfharness.free_port()
        cases = [
            (("server.tls.cert_file=/nonexistent/c.pem", "server.tls.key_file=" + CERTS.server_key),
             "server.tls.cert_file /nonexistent/c.pem: No such file or directory"),
            (("server.tls.cert_file=" + CERTS.garbage, "server.tls.key_file=" + CERTS.server_key),
             "server.tls.cert_file " + CERTS.garbage + ": "),
            (("server.tls.cert_file=" + CERTS.server, "server.tls.key_file=" + CERTS.server2_key),
             "key values mismatch"),
            (("server.tls.cert_file=" + CERTS.server, "server.tls.key_file=" + CERTS.server_key,
              "server.tls.client_ca_file=" + CERTS.garbage, "server.tls.verify_client=optional"),
             "server.tls.client_ca_file " + CERTS.garbage),
            (("server.tls.cert_file=" + CERTS.server, "server.tls.key_file=" + CERTS.server_key,
              "server.tls.ciphersuites=NOPE"), "server.tls.ciphersuites \"NOPE\""),
        ]
        for sets, want in cases:
            code, err = self.run_daemon(port, *sets)
            self.assertEqual(code, 2, err)
            self.assertIn(want, err)
            self.assertEqual(err.count("\n"), 1, err)

    def test_port_taken_by_another_listener(self):
        port = sfharness.free_port()
        code, err = self.run_daemon("server.port=%d" % port, "server.tls.port=%d" % port,
                                    "server.tls.cert_file=" + CERTS.server,
                                    "server.tls.key_file=" + CERTS.server_key)
        self.assertEqual(code, 2, err)
        self.assertIn("server.tls.port: port %d on 127.0.0.1 is already used by server.port" % port,
                      err)

    def test_memcached_and_echo_keys(self):
        code, err = self.run_daemon("cache.memcached_tls.port=%d" % sfharness.free_port(),
                                    "cache.memcached_tls.cert_file=" + CERTS.server,
                                    "cache.memcached_tls.key_file=" + CERTS.server2_key)
        self.assertEqual(code, 2, err)
        self.assertIn("cache.memcached_tls.key_file", err)
        code, err = self.run_daemon("echo.tcp_tls.port=%d" % sfharness.free_port(),
                                    "echo.tcp_tls.min_version=1.1")
        self.assertEqual(code, 2, err)
        self.assertIn("echo.tcp_tls.min_version", err)

    def test_ktls_value(self):
        code, err = self.run_daemon("server.tls.port=%d" % sfharness.free_port(),
                                    "server.tls.cert_file=" + CERTS.server,
                                    "server.tls.key_file=" + CERTS.server_key,
                                    "server.tls.ktls=on")
        self.assertEqual(code, 2, err)
        self.assertIn("server.tls.ktls", err)


def kernel_has_tls_ulp():
    """As the daemon asks (net/tls.c): TCP_ULP "tls" on an unconnected socket is ENOTCONN where
    the kernel has the tls ULP, ENOENT where it has none."""
    with socket.socket() as s:
        try:
            s.setsockopt(socket.IPPROTO_TCP, 31, b"tls")  # TCP_ULP
        except OSError as e:
            return e.errno != errno.ENOENT
    return True


class KernelTls(unittest.TestCase):
    """ktls "auto": served correctly whether or not the kernel offers kernel TLS; the connections
    that got it are counted, and the log says once per listener what to expect."""

    def test_auto_serves_counts_and_says_why_once(self):
        https, mcs, mc = sfharness.free_port(), sfharness.free_port(), sfharness.free_port()
        echos = sfharness.free_port()
        server = sfharness.Server("--set", "cache.memcached_port=%d" % mc,
                                  *tls_sets("server.tls", https, ktls="auto"),
                                  *tls_sets("cache.memcached_tls", mcs, ktls="auto"),
                                  *tls_sets("echo.tcp_tls", echos))  # off, the default
        try:  # sfharness.Server waited for the three TLS ports
            conns = 0
            for v in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
                ctx = client_ctx(minv=v, maxv=v)
                for _ in range(3):  # one request per connection, and one keep-alive one
                    st, body, info = https_get(https, ctx=ctx)
                    self.assertEqual(st, 200, body)
                    self.assertEqual(info["version"], ctx.maximum_version.name.replace(
                        "TLSv1_", "TLSv1."))
                    conns += 1
                raw = socket.create_connection(("127.0.0.1", https), timeout=5)
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    conns += 1
                    for _ in range(5):
                        s.sendall(b"GET /ids?count=500 HTTP/1.1\r\nHost: x\r\n\r\n")
                        data = b""
                        while b"\r\n\r\n" not in data or len(data.partition(
                                b"\r\n\r\n")[2]) < int(re.search(
                                rb"content-length: *(\d+)", data, re.I).group(1)):
                            chunk = s.recv(65536)
                            self.assertTrue(chunk, data)
                            data += chunk
                        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:200])
                # memcached: a value of several records each way
                value = os.urandom(150000)
                raw = socket.create_connection(("127.0.0.1", mcs), timeout=5)
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    conns += 1
                    s.sendall(b"set big 0 0 %d\r\n%s\r\n" % (len(value), value))
                    self.assertEqual(mc_command(s, b""), b"STORED\r\n")
                    s.sendall(b"get big\r\n")
                    want = b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(value), value)
                    got = b""
                    while len(got) < len(want):
                        chunk = s.recv(65536)
                        self.assertTrue(chunk, got[:100])
                        got += chunk
                    self.assertEqual(got, want)
                    s.sendall(b"stats settings\r\n")
                    got = b""
                    while not got.endswith(b"END\r\n"):
                        chunk = s.recv(65536)
                        self.assertTrue(chunk)
                        got += chunk
                    self.assertIn(b"STAT ssl_kernel_tls yes\r\n", got)  # asked for, as -o
            server.signal(signal.SIGHUP)  # a reload that changes nothing says nothing more
            deadline = time.time() + 5
            while time.time() < deadline and server.output().count("certificate reloaded") < 3:
                time.sleep(0.05)
            st, body, _ = https_get(https, "/metrics")
            m = body.decode()
            log = server.output()
            sends = sum(metric(m, "snowflaked_tls_ktls_connections_total", listener=name,
                               direction="send") for name in ("http", "memcached"))
            recvs = sum(metric(m, "snowflaked_tls_ktls_connections_total", listener=name,
                               direction="receive") for name in ("http", "memcached"))
            self.assertEqual(metric(m, "snowflaked_tls_ktls_connections_total", listener="echo",
                                    direction="send"), 0)
            self.assertNotIn("echo.tcp_tls: kTLS", log)
            if not kernel_has_tls_ulp():
                self.assertEqual((sends, recvs), (0, 0))
                for what, name in (("server.tls", "http"), ("cache.memcached_tls", "memcached")):
                    line = ("%s: kTLS requested on the %s TLS listener but the kernel has no tls "
                            "ULP (CONFIG_TLS" % (what, name))
                    self.assertEqual(log.count(line), 1, log)
                self.assertIn("userspace TLS", log)
            else:  # where it exists (not on the machine this was written on): it is used
                self.assertIn("server.tls: kTLS offered on the http TLS listener", log)
                self.assertGreater(sends, 0, m)
                self.assertLessEqual(sends, conns + 1)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
