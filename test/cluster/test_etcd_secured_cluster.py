"""The secured etcd clusters of etcdcluster.py (issue 24) as independent clients see them, before any
daemon talks to them: chaos.py --etcd-tls / --etcd-auth and the identity tests rely on exactly this.

TLS (--client-cert-auth, peer TLS): etcdctl with the admin certificate and with the daemons' client
certificate reads and writes; no client certificate, a certificate of another CA, and plain http
are refused; a rotated client certificate (new serial, same CA) is accepted; a killed member comes
back over peer TLS. RBAC (auth enable, RS256 JWT ttl 2 s): the limited user reads and writes under
its prefix only; its JWT expires after the ttl (the gateway answers 401) while the harness's own
calls renew theirs; a changed password refuses the old one; a revoked permission refuses writes
until granted again. Both at once: the user over TLS."""
import json
import os
import ssl
import time
import unittest
import urllib.error
import urllib.request

from etcdcluster import EtcdAuth, EtcdCluster, b64, ensure_etcd, ensure_etcdctl

PREFIX = "/sfsecured"


def need_tools():
    reason = ensure_etcd() or ensure_etcdctl()
    if reason:
        raise AssertionError(reason)


def raw(ec, i, path, body, headers=None, context=None):
    """One gateway call with the given TLS context and headers: (status, json) or (None, why)."""
    url = "%s://127.0.0.1:%d%s" % (ec.scheme, ec.client_ports[i], path)
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=3, context=context) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body or b"{}")
        except ValueError:
            return e.code, body.decode(errors="replace")
    except (OSError, ValueError) as e:
        return None, str(e)


class TlsCluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need_tools()
        cls.ec = EtcdCluster(tls=True).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.ec.close()

    def test_admin_and_daemon_certificates_read_and_write(self):
        ec = self.ec
        self.assertTrue(ec.endpoints().startswith("https://127.0.0.1:"))
        ec.etcdctl("put", PREFIX + "/a", "1")
        rc, out = ec.etcdctl("get", PREFIX + "/a", "--print-value-only",
                             cert=(ec.tls.client_cert, ec.tls.client_key))
        self.assertEqual(out.strip(), "1")
        st, j = ec.call(0, "/v3/kv/range", {"key": b64(PREFIX + "/a")})
        self.assertEqual(st, 200, j)
        self.assertEqual(j.get("count"), "1")

    def test_no_certificate_other_ca_and_plain_http_refused(self):
        ec = self.ec
        ctx = ssl.create_default_context(cafile=ec.tls.ca)  # verifies etcd, presents nothing
        st, why = raw(ec, 0, "/v3/kv/range", {"key": b64("/x")}, context=ctx)
        self.assertIsNone(st, "a client without a certificate got an answer: %s" % why)
        other = ec.tls.certs
        rc, out = ec.etcdctl("get", "/x", cert=(other.other_client, other.other_client_key),
                             check=False)
        self.assertNotEqual(rc, 0, "a client certificate of another CA was accepted: %s" % out)
        req = urllib.request.Request("http://127.0.0.1:%d/v3/kv/range" % ec.client_ports[0],
                                     data=b"{}", method="POST")
        with self.assertRaises((OSError, urllib.error.URLError)):
            urllib.request.urlopen(req, timeout=3).read()
        # A client that does not know etcd's CA refuses etcd (the daemon's fail-closed case).
        ctx = ssl.create_default_context(cafile=other.other_ca)
        ctx.load_cert_chain(ec.tls.client_cert, ec.tls.client_key)
        st, why = raw(ec, 1, "/v3/kv/range", {"key": b64("/x")}, context=ctx)
        self.assertIsNone(st)
        self.assertIn("CERTIFICATE_VERIFY_FAILED", why)

    def test_rotated_client_certificate_accepted(self):
        ec = self.ec
        before = ec.tls.certs.serial_of(ec.tls.client_cert)
        after = ec.tls.rotate_client()
        self.assertNotEqual(before, after)
        self.assertEqual(ec.tls.certs.serial_of(ec.tls.client_cert), after)
        rc, out = ec.etcdctl("put", PREFIX + "/rotated", "yes",
                             cert=(ec.tls.client_cert, ec.tls.client_key))
        self.assertIn("OK", out)

    def test_member_back_over_peer_tls(self):
        ec = self.ec
        n = ec.wait_leader()
        ec.kill(n)
        ec.wait_leader(timeout=10)
        ec.etcdctl("put", PREFIX + "/during", "x")
        ec.restart(n)
        ec.wait_ready([n])
        st, j = ec.call(n, "/v3/kv/range", {"key": b64(PREFIX + "/during")})
        self.assertEqual((st, j.get("count")), (200, "1"), j)


class AuthCluster(unittest.TestCase):
    TLS = False

    @classmethod
    def setUpClass(cls):
        need_tools()
        cls.auth = EtcdAuth(PREFIX, token="jwt", ttl_s=2)
        cls.ec = EtcdCluster(tls=cls.TLS, auth=cls.auth).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.ec.close()

    def user(self, *args, password=None, check=False):
        a = self.auth
        return self.ec.etcdctl(*args, user=a.USER, password=password or a.password, check=check)

    def test_user_limited_to_its_prefix(self):
        rc, out = self.user("put", PREFIX + "/owner/1", "me")
        self.assertEqual(rc, 0, out)
        rc, out = self.user("get", PREFIX + "/owner/1", "--print-value-only")
        self.assertEqual((rc, out.strip()), (0, "me"))
        for args in (("put", "/elsewhere", "x"), ("get", "/elsewhere"),
                     ("put", PREFIX + "x", "no")):  # the prefix ends in "/": not /sfsecuredx
            rc, out = self.user(*args)
            self.assertNotEqual(rc, 0, "%s allowed: %s" % (args, out))
            self.assertIn("permission denied", out)
        rc, out = self.ec.etcdctl("get", "/elsewhere", user="root",
                                  password=self.auth.root_password, check=False)
        self.assertEqual(rc, 0, out)  # root may

    def test_unauthenticated_refused(self):
        rc, out = self.ec.etcdctl("get", PREFIX + "/owner/1", user=self.auth.USER,
                                  password="wrong", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("authentication failed", out)
        ctx = self.ec.tls.context() if self.ec.tls else None
        st, j = raw(self.ec, 0, "/v3/kv/range", {"key": b64(PREFIX + "/owner/1")}, context=ctx)
        self.assertNotEqual(st, 200, j)

    def test_jwt_expires_and_harness_renews(self):
        ec, a = self.ec, self.auth
        tok = ec.authenticate(a.USER, a.password)
        self.assertTrue(tok and tok.startswith("eyJ"), "not a JWT: %r" % tok)
        ctx = ec.tls.context() if ec.tls else None
        st, j = raw(ec, 0, "/v3/kv/range", {"key": b64(PREFIX + "/")},
                    {"Authorization": tok}, ctx)
        self.assertEqual(st, 200, j)
        ec.call(0, "/v3/kv/range", {"key": b64("/")})  # the harness's root token, fresh
        time.sleep(a.ttl_s + 1.5)
        st, j = raw(ec, 0, "/v3/kv/range", {"key": b64(PREFIX + "/")},
                    {"Authorization": tok}, ctx)
        self.assertEqual(st, 401, "an expired JWT: %s %s" % (st, j))
        st, j = ec.call(1, "/v3/kv/range", {"key": b64("/")})  # re-authenticates by itself
        self.assertEqual(st, 200, j)

    def test_password_change_and_revocation(self):
        ec, a = self.ec, self.auth
        old, new = a.password, "pw-new-" + os.urandom(4).hex()
        ec.set_user_password(new)
        a.password = new
        rc, out = self.user("get", PREFIX + "/x", password=old)
        self.assertNotEqual(rc, 0, "the old password still works: %s" % out)
        rc, out = self.user("get", PREFIX + "/x", password=new)
        self.assertEqual(rc, 0, out)
        a.write_password(new)
        with open(a.password_file) as f:
            self.assertEqual(f.read(), new + "\n")
        ec.revoke_prefix()
        rc, out = self.user("put", PREFIX + "/x", "1")
        self.assertIn("permission denied", out)
        ec.grant_prefix()
        rc, out = self.user("put", PREFIX + "/x", "1")
        self.assertEqual(rc, 0, out)


class TlsAuthCluster(AuthCluster):
    """Both: the user's password over a client-certificate TLS connection."""
    TLS = True

    def test_gateway_refuses_a_client_certificate_with_a_cn(self):
        """etcd 3.4 with auth on: its JSON gateway answers 400 to a client certificate that has
        a CN, token or not; so the client certificates here (and in components/etcd-tls) have
        none. Pinned because the daemon's client speaks to this gateway."""
        ec, a = self.ec, self.auth
        cn_cert, cn_key = ec.tls.certs.client, ec.tls.certs.client_key  # CN sf-client, same CA
        ctx = ssl.create_default_context(cafile=ec.tls.ca)
        ctx.load_cert_chain(cn_cert, cn_key)
        tok = ec.authenticate(a.USER, a.password)
        st, body = raw(ec, 0, "/v3/kv/range", {"key": b64(PREFIX + "/")},
                       {"Authorization": tok}, ctx)
        self.assertEqual(st, 400, body)
        self.assertIn("CommonName", str(body))
        ctx = ssl.create_default_context(cafile=ec.tls.ca)
        ctx.load_cert_chain(ec.tls.client_cert, ec.tls.client_key)  # no CN
        st, body = raw(ec, 0, "/v3/kv/range", {"key": b64(PREFIX + "/")},
                       {"Authorization": tok}, ctx)
        self.assertEqual(st, 200, body)


def load_tests(loader, tests, pattern):
    suite = unittest.TestSuite()
    for cls in (TlsCluster, AuthCluster, TlsAuthCluster):
        suite.addTests(loader.loadTestsFromTestCase(cls))
    return suite


if __name__ == "__main__":
    unittest.main()
