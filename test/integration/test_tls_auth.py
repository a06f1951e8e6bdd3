"""Client certificates as credentials on the HTTP TLS listener (auth.client_certificates,
auth.credentials; docs/tls.md "Client certificates as credentials"), with curl --cert/--key and
Python's ssl against the real binary: a listed subject DN, DNS or URI SAN writes without a token,
an unlisted one (same CA) does not, another CA's fails the handshake, the token still works, the
plaintext port knows no certificate, protect_reads, "token_and_certificate", an open connection
keeping its identity across a CA rotation, metrics, the refusal log and start-up refusals.

Certificates come from tlscerts.py (openssl in a temporary directory)."""
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import unittest

import sfharness
import tlscerts
from test_tls import metric

TOKEN = "s3cret-Token_42-and-more"
CERTS = None
LISTED = {}  # name -> (cert, key)
SPIFFE = "spiffe://cluster.local/ns/shop/sa/orders"
ENTRIES = '["CN=orders-api,O=shop", "DNS:billing.shop.svc", "URI:%s"]' % SPIFFE


def setUpModule():
    global CERTS
    CERTS = tlscerts.Certs()
    # the subject DN: RFC 2253 puts the most specific RDN first, -subj the least
    LISTED["dn"] = CERTS.leaf("orders", "/O=shop/CN=orders-api")
    # a dNSName SAN, in another case than the entry (DNS names compare case-insensitively)
    LISTED["dns"] = CERTS.leaf("billing", "/CN=billing", san="DNS:Billing.Shop.svc")
    # a SPIFFE ID, as SPIRE or cert-manager's csi-driver-spiffe put it
    LISTED["uri"] = CERTS.leaf("spiffe", "/O=SPIRE", san="URI:" + SPIFFE)
    # near misses: the DN's RDNs in the other order, a case changed, a DNS SAN one label off
    LISTED["near_dn"] = CERTS.leaf("near_dn", "/CN=orders-api/O=shop")
    LISTED["near_case"] = CERTS.leaf("near_case", "/O=shop/CN=Orders-api")
    LISTED["near_dns"] = CERTS.leaf("near_dns", "/CN=x", san="DNS:billing.shop.svc.evil")
    # a listed name from another CA
    LISTED["other_ca"] = CERTS.leaf("other_orders", "/O=shop/CN=orders-api",
                                    ca=(CERTS.other_ca, CERTS.other_ca_key))


def tearDownModule():
    CERTS.cleanup()


def tls_sets(port, **kw):
    vals = {"port": port, "cert_file": CERTS.server, "key_file": CERTS.server_key,
            "client_ca_file": CERTS.ca, "verify_client": "optional"}
    vals.update(kw)
    return sfharness.set_args(*("server.tls.%s=%s" % kv for kv in vals.items()))


def curl(port, path="/cache/k", method="GET", cert=None, token=None, data=None, https=True):
    """(status or None when curl failed, headers+body text, curl's exit code)."""
    cmd = ["curl", "-sS", "-i", "-X", method, "--max-time", "10"]
    if https:
        cmd += ["--cacert", CERTS.ca]
    if cert:
        cmd += ["--cert", LISTED[cert][0] if isinstance(cert, str) else cert[0],
                "--key", LISTED[cert][1] if isinstance(cert, str) else cert[1]]
    if token:
        cmd += ["-H", "Authorization: Bearer " + token]
    if data is not None:
        cmd += ["--data-binary", data]
    cmd.append("%s://127.0.0.1:%d%s" % ("https" if https else "http", port, path))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    out = r.stdout.decode(errors="replace")
    m = re.match(r"HTTP/1\.1 (\d+)", out)
    return (int(m.group(1)) if m and r.returncode == 0 else None), out, r.returncode


class EitherCredential(unittest.TestCase):
    """verify_client optional, a token and three entries: either credential suffices."""

    @classmethod
    def setUpClass(cls):
        cls.https = sfharness.free_port()
        cls.server = sfharness.Server("--set", "auth.token=" + TOKEN,
                                      "--set", "auth.client_certificates=" + ENTRIES,
                                      *tls_sets(cls.https))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def scrape(self):
        st, out, _ = curl(self.server.port, "/metrics", https=False)
        self.assertEqual(st, 200)
        return out

    def test_listed_certificates_write_without_a_token(self):
        for name in ("dn", "dns", "uri"):
            st, out, _ = curl(self.https, "/cache/" + name, "PUT", cert=name, data="v-" + name)
            self.assertIn(st, (200, 201, 204), (name, out))
            st, out, _ = curl(self.https, "/cache/" + name, cert=name)
            self.assertEqual(st, 200, out)
            self.assertTrue(out.endswith("v-" + name), out)
            st, out, _ = curl(self.https, "/cache/" + name, "DELETE", cert=name)
            self.assertIn(st, (200, 204), out)

    def test_unlisted_certificate_of_the_same_ca_gets_401(self):
        for cert in ((CERTS.client, CERTS.client_key), "near_dn", "near_case", "near_dns"):
            st, out, _ = curl(self.https, "/cache/u", "PUT", cert=cert, data="x")
            self.assertEqual(st, 401, (cert, out))
            self.assertIn('WWW-Authenticate: Bearer realm="snowflaked"', out)
            self.assertIn("a bearer token or a listed client certificate is required", out)
        # ... and the token, on the same connection kind, still works
        st, out, _ = curl(self.https, "/cache/u", "PUT", cert=(CERTS.client, CERTS.client_key),
                          token=TOKEN, data="x")
        self.assertIn(st, (200, 201, 204), out)

    def test_another_cas_certificate_fails_the_handshake(self):
        # verify_client "optional": a certificate that is sent must verify (as memcached's
        # ssl_verify_mode 1); a listed name signed by another CA never reaches HTTP
        for cert in ("other_ca", (CERTS.other_client, CERTS.other_client_key)):
            st, out, rc = curl(self.https, "/cache/o", "PUT", cert=cert, data="x")
            self.assertIsNone(st, out)
            self.assertNotEqual(rc, 0)

    def test_token_without_a_certificate(self):
        st, out, _ = curl(self.https, "/cache/t", "PUT", token=TOKEN, data="x")
        self.assertIn(st, (200, 201, 204), out)
        st, out, _ = curl(self.https, "/cache/t", "PUT", data="x")
        self.assertEqual(st, 401, out)
        st, out, _ = curl(self.https, "/cache/t", "PUT", token="wrong-" + TOKEN, data="x")
        self.assertEqual(st, 401, out)
        self.assertIn('error="invalid_token"', out)

    def test_plaintext_port_knows_no_certificate(self):
        st, out, _ = curl(self.server.port, "/cache/p", "PUT", data="x", https=False)
        self.assertEqual(st, 401, out)
        st, out, _ = curl(self.server.port, "/cache/p", "PUT", token=TOKEN, data="x", https=False)
        self.assertIn(st, (200, 201, 204), out)

    def test_reads_stay_open(self):
        for port, https in ((self.https, True), (self.server.port, False)):
            st, out, _ = curl(port, "/id", https=https)
            self.assertEqual(st, 200, out)

    def test_keep_alive_connection_keeps_its_grant(self):
        """The match is made once per connection: every request on it is granted."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(CERTS.ca)
        ctx.load_cert_chain(*LISTED["uri"])
        raw = socket.create_connection(("127.0.0.1", self.https), timeout=5)
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            rd = sfharness.Reader(s)
            for i in range(5):
                s.sendall(b"PUT /cache/ka%d HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n%d" %
                          (i, i))
                self.assertIn(rd.response().status, (200, 201, 204))

    def test_metrics_and_log(self):
        before = self.scrape()
        curl(self.https, "/cache/m", "PUT", cert="dn", data="x")
        curl(self.https, "/cache/m", "PUT", cert=(CERTS.client, CERTS.client_key), data="x")
        curl(self.https, "/cache/m", "PUT", token=TOKEN, data="x")
        curl(self.server.port, "/cache/m", "PUT", token=TOKEN, data="x", https=False)
        after = self.scrape()

        def delta(name, **labels):
            return (metric(after, name, **labels) or 0) - (metric(before, name, **labels) or 0)
        self.assertEqual(delta("snowflaked_auth_granted_total", credential="certificate"), 1)
        self.assertEqual(delta("snowflaked_auth_granted_total", credential="token"), 2)
        self.assertEqual(delta("snowflaked_auth_failures_total"), 1)
        self.assertEqual(delta("snowflaked_tls_client_certificates_total", listener="http",
                               result="listed"), 1)
        self.assertEqual(delta("snowflaked_tls_client_certificates_total", listener="http",
                               result="unlisted"), 1)
        self.assertEqual(delta("snowflaked_tls_client_certificates_total", listener="http",
                               result="none"), 1)
        # the refusal's log line names the certificate, so the operator knows what to list
        deadline = time.time() + 5
        while time.time() < deadline and "not in auth.client_certificates" not in \
                self.server.output():
            time.sleep(0.1)
        self.assertRegex(self.server.output(),
                         r"WARN.*client certificate not in auth\.client_certificates.*CN=sf-client")


class CertificateOnly(unittest.TestCase):
    """verify_client required, no token, protect_reads: only listed certificates get in, and a
    refusal is 403 (no HTTP credential could help); health stays open everywhere."""

    @classmethod
    def setUpClass(cls):
        cls.https = sfharness.free_port()
        cls.server = sfharness.Server("--set", "auth.client_certificates=" + ENTRIES,
                                      "--set", "auth.protect_reads=true",
                                      *tls_sets(cls.https, verify_client="required"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_listed_reads_and_writes(self):
        st, out, _ = curl(self.https, "/id", cert="dn")
        self.assertEqual(st, 200, out)
        st, out, _ = curl(self.https, "/cache/c", "PUT", cert="dns", data="x")
        self.assertIn(st, (200, 201, 204), out)

    def test_unlisted_gets_403_even_for_reads(self):
        for path in ("/id", "/metrics", "/cache/c"):
            st, out, _ = curl(self.https, path, cert=(CERTS.client, CERTS.client_key))
            self.assertEqual(st, 403, (path, out))
            self.assertNotIn("WWW-Authenticate", out)
            self.assertIn("a client certificate listed in auth.client_certificates is required",
                          out)
        st, out, _ = curl(self.https, "/healthz", cert=(CERTS.client, CERTS.client_key))
        self.assertEqual(st, 200, out)

    def test_no_or_foreign_certificate_fails_the_handshake(self):
        for cert in (None, "other_ca"):
            st, out, rc = curl(self.https, "/id", cert=cert)
            self.assertIsNone(st, out)
            self.assertNotEqual(rc, 0)

    def test_plaintext_port_serves_only_health(self):
        st, out, _ = curl(self.server.port, "/id", https=False)
        self.assertEqual(st, 403, out)
        st, out, _ = curl(self.server.port, "/healthz", https=False)
        self.assertEqual(st, 200, out)


class TokenAndCertificate(unittest.TestCase):
    """auth.credentials "token_and_certificate": a listed certificate and the token, both."""

    @classmethod
    def setUpClass(cls):
        cls.https = sfharness.free_port()
        cls.server = sfharness.Server("--set", "auth.token=" + TOKEN,
                                      "--set", "auth.client_certificates=" + ENTRIES,
                                      "--set", "auth.credentials=token_and_certificate",
                                      *tls_sets(cls.https))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_both_needed(self):
        st, out, _ = curl(self.https, "/cache/b", "PUT", cert="dn", token=TOKEN, data="x")
        self.assertIn(st, (200, 201, 204), out)
        # the certificate alone: the token can still help -> 401 with its challenge
        st, out, _ = curl(self.https, "/cache/b", "PUT", cert="dn", data="x")
        self.assertEqual(st, 401, out)
        self.assertIn("WWW-Authenticate: Bearer", out)
        # the token without a listed certificate (none, unlisted, plaintext): nothing helps -> 403
        for port, https, cert in ((self.https, True, None),
                                  (self.https, True, (CERTS.client, CERTS.client_key)),
                                  (self.server.port, False, None)):
            st, out, _ = curl(port, "/cache/b", "PUT", cert=cert, token=TOKEN, data="x",
                              https=https)
            self.assertEqual(st, 403, (port, cert, out))
            self.assertIn("required, with the bearer token", out)
        # reads stay open without protect_reads
        st, out, _ = curl(self.server.port, "/id", https=False)
        self.assertEqual(st, 200, out)
        st, out, _ = curl(self.server.port, "/metrics", https=False)
        self.assertEqual(metric(out, "snowflaked_auth_granted_total",
                                credential="token_and_certificate"), 1)


class Rotation(unittest.TestCase):
    """A CA rotated (SIGHUP): an open connection keeps the identity verified at its handshake,
    a new one is verified against the new CA file."""

    def test_open_connection_keeps_its_identity(self):
        d = CERTS.path("rot")
        os.makedirs(d, exist_ok=True)
        ca = os.path.join(d, "ca.pem")
        shutil.copy(CERTS.ca, ca)
        https = sfharness.free_port()
        server = sfharness.Server("--set", "auth.client_certificates=" + ENTRIES,
                                  *tls_sets(https, client_ca_file=ca, watch_files="false"))
        try:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(CERTS.ca)
            ctx.load_cert_chain(*LISTED["dn"])
            put = b"PUT /cache/r HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nr"
            # a session to resume later (TLS 1.3 tickets come after the handshake: read first)
            raw = socket.create_connection(("127.0.0.1", https), timeout=5)
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(put)
                self.assertIn(sfharness.Reader(s).response().status, (200, 201, 204))
                session = s.session
            raw = socket.create_connection(("127.0.0.1", https), timeout=5)
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as s:
                self.assertTrue(s.session_reused)  # resumption works before the rotation
                s.sendall(put)
                self.assertIn(sfharness.Reader(s).response().status, (200, 201, 204))
                session = s.session
            raw = socket.create_connection(("127.0.0.1", https), timeout=5)
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                rd = sfharness.Reader(s)
                s.sendall(put)
                self.assertIn(rd.response().status, (200, 201, 204))
                shutil.copy(CERTS.other_ca, ca + ".new")
                os.rename(ca + ".new", ca)
                server.signal(signal.SIGHUP)
                deadline = time.time() + 5
                while time.time() < deadline and "certificate reloaded" not in server.output():
                    time.sleep(0.05)
                self.assertIn("certificate reloaded", server.output())
                s.sendall(put)
                self.assertIn(rd.response().status, (200, 201, 204))
            st, out, rc = curl(https, "/cache/r", "PUT", cert="dn", data="x")
            self.assertIsNone(st, out)  # our CA is no longer trusted: the handshake fails
            # nor does a session verified under the old CA resume into a grant
            raw = socket.create_connection(("127.0.0.1", https), timeout=5)
            try:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as s:
                    reused = s.session_reused
                    s.sendall(put)
                    status = sfharness.Reader(s).response().status
                self.fail("resumed=%s, answered %s after the CA rotation" % (reused, status))
            except (ssl.SSLError, ConnectionError):
                pass
        finally:
            server.stop()


class ExposureWarning(unittest.TestCase):
    def test_a_certificate_list_protects_as_a_token(self):
        """No "reachable beyond loopback without a token" warning: writes need a certificate."""
        import test_startup
        https = sfharness.free_port()
        srv = sfharness.Server("--set", "server.host=0.0.0.0",
                               "--set", "auth.client_certificates=" + ENTRIES, *tls_sets(https))
        try:
            sfharness.wait_ready(srv)
            deadline = time.monotonic() + 5
            while "listening on" not in srv.output() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)
            out = srv.output()
        finally:
            srv.stop()
        self.assertIn("access control: a listed client certificate on server.tls (3 in "
                      "auth.client_certificates) required for cache writes", out)
        self.assertNotIn(test_startup.HTTP_WARNING, out)


class StartupRefusals(unittest.TestCase):
    def run_daemon(self, *sets):
        import test_startup
        code, err = test_startup.run(*sfharness.set_args(*sets),
                                     env={"SNOWFLAKED_SNOWFLAKE_DATACENTER_ID": "7"})
        return code, err.decode(errors="replace")

    def tls(self, **kw):
        return ["server.tls.%s=%s" % kv for kv in {
            "port": sfharness.free_port(), "cert_file": CERTS.server,
            "key_file": CERTS.server_key, "client_ca_file": CERTS.ca,
            "verify_client": "optional", **kw}.items()]

    def test_without_a_tls_listener_asking_for_certificates(self):
        for sets, why in (([], "server.tls.port is 0"),
                          (self.tls(verify_client="none"), 'server.tls.verify_client is "none"')):
            code, err = self.run_daemon("auth.client_certificates=" + ENTRIES, *sets)
            self.assertEqual(code, 2, err)
            self.assertIn("auth.client_certificates: needs the HTTP TLS listener", err)
            self.assertIn(why, err)

    def test_bad_entries(self):
        for entry, why in (("/O=shop/CN=x", "old /C=../CN=.. form"),
                           ("CN = x, O = shop", "not RFC 2253 form"),
                           ("subject=CN=x", 'leave out the "subject="'),
                           ("DNS:*.shop.svc", "no wildcards"),
                           ("URI:no-scheme", "starts with its scheme"),
                           ("orders-api", "neither a subject DN")):
            code, err = self.run_daemon('auth.client_certificates=["%s"]' % entry, *self.tls())
            self.assertEqual(code, 2, (entry, err))
            self.assertIn("auth.client_certificates: [0]", err)
            self.assertIn(why, err)

    def test_token_and_certificate_needs_both(self):
        code, err = self.run_daemon("auth.credentials=token_and_certificate",
                                    "auth.client_certificates=" + ENTRIES, *self.tls())
        self.assertEqual(code, 2, err)
        self.assertIn("auth.credentials", err)

    def test_check_config_shows_the_list(self):
        import json
        env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
        r = subprocess.run([sfharness.BINARY, "--check-config",
                            *sfharness.set_args("auth.client_certificates=" + ENTRIES,
                                                *self.tls())],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        shown = json.loads(r.stdout)["auth"]
        self.assertEqual(shown["client_certificates"], json.loads(ENTRIES))
        self.assertEqual(shown["credentials"], "token_or_certificate")


if __name__ == "__main__":
    unittest.main()
