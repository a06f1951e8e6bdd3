"""snowflake.worker_id "etcd" against an etcd with RBAC (`auth enable`, test/cluster/etcdcluster.py):
a user whose role has readwrite on the test prefix only, its password in a file.

JWT tokens (RS256, keys from openssl) living 2 s, 3 members:
- the claim works, IDs flow for 12 s while the token expires about six times: re-authenticated
  every time, 0 failed requests; the password and the token appear nowhere (log, /metrics,
  --check-config);
- a wrong password, a missing password file, a user whose role has no permission on the prefix:
  exit 1 at start naming the cause (never retried like an unreachable etcd);
- the password changed mid-run: the daemon fences (503), then issues again once the file holds the
  new one, above everything issued before;
- the role's permission revoked mid-run: fenced, no ID after the fence, issuing again after the
  grant.
Simple tokens (expire after 1 s idle), 1 member: a daemon frozen past the token's life
re-authenticates when it wakes up.
JWTs over TLS (client certificates, 1 member): RBAC and https together: the claim works and IDs
flow while the token expires, a wrong password still exits 1 naming the user.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from etcdcluster import EtcdAuth, EtcdCluster, ensure_etcd
from test_etcd_identity_faults import Daemon, figure, id_ms, sfharness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import tlscerts  # noqa: E402

TTL_S, MARGIN_MS, TIMEOUT_MS = 4, 600, 900
JWT_TTL = "2s"
USER = EtcdAuth.USER  # the limited user: readwrite on its prefix only


def metric(d, name, labels=""):
    """The value of name{labels} (labels as written, e.g. 'result="ok"'), or None."""
    want = name + ("{%s}" % labels if labels else "")
    for line in d.get("/metrics").body.decode().splitlines():
        if line.startswith(want + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


class AuthBase(unittest.TestCase):
    auth = None
    members = 3
    kw = {}

    @classmethod
    def setUpClass(cls):
        reason = ensure_etcd()
        if reason:
            raise AssertionError(reason)  # CI is root: never a silent skip
        t0 = time.monotonic()
        cls.ec = EtcdCluster(members=cls.members, auth=cls.auth, auth_prefixes=("/ta/",),
                             **cls.kw).__enter__()
        figure("etcd_auth_cluster_ready_s_%s" % cls.auth, "%.2f" % (time.monotonic() - t0))

    @classmethod
    def tearDownClass(cls):
        cls.ec.close()

    def setUp(self):
        self.prefix = "/ta/%d/%s" % (os.getpid(), self._testMethodName)
        self.tmp = tempfile.TemporaryDirectory(prefix="sf_etcd_auth_")
        self.addCleanup(self.tmp.cleanup)

    def password_file(self, password, name="password"):
        path = os.path.join(self.tmp.name, name)
        with open(path + ".new", "w") as f:
            f.write(password + "\n")
        os.replace(path + ".new", path)  # as a Secret update: the whole file at once
        return path

    def user(self, name, password, role_prefix):
        """A user of its own whose role has readwrite on role_prefix only."""
        role = name + "_role"
        self.ec.etcdctl("role", "add", role)
        self.ec.etcdctl("role", "grant-permission", role, "--prefix=true", "readwrite",
                        role_prefix)
        self.ec.etcdctl("user", "add", name, "--new-user-password", password,
                        "--interactive=false")
        self.ec.etcdctl("user", "grant-role", name, role)
        return role

    def daemon(self, user, pw_file, *extra):
        d = Daemon(self.ec.endpoints(), self.prefix,
                   "--set", "snowflake.etcd.ttl_s=%d" % TTL_S,
                   "--set", "snowflake.etcd.fence_margin_ms=%d" % MARGIN_MS,
                   "--set", "snowflake.etcd.request_timeout_ms=%d" % TIMEOUT_MS,
                   "--set", "snowflake.etcd.auth.username=" + user,
                   "--set", "snowflake.etcd.auth.password_file=" + pw_file, *extra)
        self.addCleanup(d.close)
        return d

    def wait_ids(self, d, timeout=15):
        """The first ID the daemon issues."""
        d.wait_listening()
        self.wait_status(d, True, timeout)
        return d.new_id()

    def wait_status(self, d, want_ok, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (d.new_id() is not None) == want_ok:
                return time.monotonic()
            time.sleep(0.05)
        raise AssertionError("/id still %s after %ss:\n%s" %
                             ("failing" if want_ok else "issuing", timeout, d.output()))

    def assert_no_secret(self, d, *secrets):
        text = d.output() + d.get("/metrics").body.decode()
        for s in secrets:
            self.assertNotIn(s, text)
        self.assertIsNone(re.search(r"eyJ[A-Za-z0-9_-]{10,}", text), "a JWT leaked")

    def assert_start_fails(self, d, *needles):
        rc = d.wait_exit(20)
        out = d.output()
        self.assertEqual(rc, 1, out)
        for n in needles:
            self.assertIn(n, out)
        return out


class JwtAuth(AuthBase):
    auth = "jwt"
    kw = {"jwt_ttl": JWT_TTL}

    def test_claim_and_jwt_reauthentication(self):
        d = self.daemon(USER, self.password_file(self.ec.auth.password))
        last = self.wait_ids(d)
        ok0 = metric(d, "snowflaked_etcd_authentications_total", 'result="ok"')
        failed, served = 0, 0
        t_end = time.monotonic() + 12
        while time.monotonic() < t_end:  # the 2 s token expires about six times
            i = d.new_id()
            if i is None:
                failed += 1
            else:
                self.assertGreater(i, last)
                last, served = i, served + 1
            time.sleep(0.02)
        ok = metric(d, "snowflaked_etcd_authentications_total", 'result="ok"')
        refused = metric(d, "snowflaked_etcd_auth_refusals_total", 'reason="token"')
        figure("etcd_auth_jwt_reauthentications_12s", "%d" % (ok - ok0))
        figure("etcd_auth_jwt_token_refusals_12s", "%d" % refused)
        self.assertEqual(failed, 0, "IDs refused while the token was renewed:\n" + d.output())
        self.assertGreater(served, 100)
        self.assertGreaterEqual(ok - ok0, 3, d.output())
        self.assertGreaterEqual(refused, 3)
        self.assertEqual(metric(d, "snowflaked_etcd_authentications_total", 'result="refused"'), 0)
        self.assertEqual(metric(d, "snowflaked_identity_renewals_total", 'result="error"'), 0)
        self.assert_no_secret(d, self.ec.auth.password)
        d.proc.send_signal(signal.SIGTERM)
        self.assertEqual(d.wait_exit(10), 0, d.output())
        # released: the owner key is gone (read as root)
        r = self.ec.etcdctl("get", "--prefix", self.prefix + "/owner/")
        self.assertEqual(r.stdout.strip(), "")

    def test_wrong_password_exits_1(self):
        d = self.daemon(USER, self.password_file("Wr0ng-pw-7f3a"))
        t0 = time.monotonic()
        out = self.assert_start_fails(d, "authentication failed", "etcd user %s" % USER,
                                      "credentials or permissions do not work")
        self.assertLess(time.monotonic() - t0, 8, "retried like an unreachable etcd")
        self.assertNotIn("Wr0ng-pw-7f3a", out)

    def test_missing_password_file_exits_1(self):
        path = os.path.join(self.tmp.name, "absent")
        self.assert_start_fails(self.daemon(USER, path), path, "No such file")

    def test_role_without_the_prefix_exits_1(self):
        self.user("nope", "nope-pw-91", "/elsewhere/")
        d = self.daemon("nope", self.password_file("nope-pw-91"))
        self.assert_start_fails(d, "permission denied", "etcd user nope may not read and write "
                                "under " + self.prefix)

    def test_check_config_hides_nothing_secret(self):
        pw = self.password_file("cc-secret-pw-55")
        r = subprocess.run([sfharness.BINARY, "--worker-id", "etcd",
                            "--set", "snowflake.etcd.endpoints=" + self.ec.endpoints(),
                            "--set", "snowflake.etcd.auth.username=" + USER,
                            "--set", "snowflake.etcd.auth.password_file=" + pw, "--check-config"],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(pw, r.stdout)
        self.assertNotIn("cc-secret-pw-55", r.stdout + r.stderr)
        r = subprocess.run([sfharness.BINARY, "--worker-id", "etcd",
                            "--set", "snowflake.etcd.endpoints=" + self.ec.endpoints(),
                            "--set", "snowflake.etcd.auth.username=" + USER, "--check-config"],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("password_file go together", r.stderr)

    def test_password_changed_mid_run(self):
        self.user("pwc", "pwc-old-pw-1", self.prefix + "/")
        pw = self.password_file("pwc-old-pw-1")
        d = self.daemon("pwc", pw)
        before = self.wait_ids(d)
        self.ec.etcdctl("user", "passwd", "pwc", "--interactive=false", stdin="pwc-new-pw-2\n")
        t_change = time.monotonic()
        t_fenced = self.wait_status(d, False, TTL_S + 3)
        figure("etcd_auth_password_change_to_fence_s", "%.2f" % (t_fenced - t_change))
        time.sleep(1)
        self.assertIsNone(d.new_id())
        self.assertGreater(metric(d, "snowflaked_etcd_authentications_total",
                                  'result="refused"'), 0)
        self.password_file("pwc-new-pw-2")  # the Secret updated
        t_file = time.monotonic()
        self.wait_status(d, True, 15)
        figure("etcd_auth_password_file_to_ids_s", "%.2f" % (time.monotonic() - t_file))
        self.assertGreater(d.new_id(), before)
        self.assert_no_secret(d, "pwc-old-pw-1", "pwc-new-pw-2")

    def test_permission_revoked_mid_run(self):
        role = self.user("rv", "rv-pw-3", self.prefix + "/")
        d = self.daemon("rv", self.password_file("rv-pw-3"))
        self.wait_ids(d)
        issued, stop = [], threading.Event()

        def fetch():
            while not stop.is_set():
                i = d.new_id()
                if i is not None:
                    issued.append((time.time(), i))
                time.sleep(0.01)
        t = threading.Thread(target=fetch)
        t.start()
        try:
            time.sleep(1)
            self.ec.etcdctl("role", "revoke-permission", role, "--prefix=true", self.prefix + "/")
            t_revoke = time.time()
            self.wait_status(d, False, TTL_S + 3)
            time.sleep(TTL_S)  # past any lease the daemon held: still nothing
        finally:
            stop.set()
            t.join()
        after = [(at, i) for at, i in issued if at > t_revoke]
        # the fence: at most the last renewal before the revocation + TTL - margin
        bound_ms = (t_revoke + TTL_S) * 1000
        self.assertTrue(all(at * 1000 < bound_ms for at, _ in after), after[-3:])
        self.assertTrue(all(id_ms(i) < bound_ms for _, i in after))
        figure("etcd_auth_revoke_to_last_id_s", "%.2f" % ((after[-1][0] - t_revoke) if after else 0))
        self.assertIsNone(d.new_id())
        self.assertGreater(metric(d, "snowflaked_etcd_auth_refusals_total",
                                  'reason="permission"'), 0)
        self.assertIn("permission denied", d.output())
        self.ec.etcdctl("role", "grant-permission", role, "--prefix=true", "readwrite",
                        self.prefix + "/")
        self.wait_status(d, True, 15)
        self.assertGreater(d.new_id(), issued[-1][1])


class SimpleAuth(AuthBase):
    auth = "simple"
    members = 1
    kw = {"simple_ttl_s": 1}

    def test_simple_token_expired_while_idle(self):
        d = self.daemon(USER, self.password_file(self.ec.auth.password))
        before = self.wait_ids(d)
        refused0 = metric(d, "snowflaked_etcd_auth_refusals_total", 'reason="token"')
        d.proc.send_signal(signal.SIGSTOP)  # idle past the simple token's 1 s
        time.sleep(3.0)
        d.proc.send_signal(signal.SIGCONT)
        self.wait_status(d, True, 10)
        self.assertGreater(d.new_id(), before)
        deadline = time.monotonic() + 5
        while metric(d, "snowflaked_etcd_auth_refusals_total", 'reason="token"') == refused0:
            self.assertLess(time.monotonic(), deadline, d.output())
            time.sleep(0.1)
        self.assert_no_secret(d, self.ec.auth.password)


class TlsJwtAuth(AuthBase):
    """RBAC over https with a client certificate: the token rides in the TLS connection. With auth
    on, etcd's gateway refuses (HTTP 400) a client certificate with a subject CN: ours has none."""
    auth = "jwt"
    members = 1

    @classmethod
    def setUpClass(cls):
        cls.certs = tlscerts.Certs()
        cls.kw = {"jwt_ttl": JWT_TTL, "tls": cls.certs}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.certs.cleanup()

    def daemon(self, user, pw_file, *extra):
        return super().daemon(user, pw_file,
                              "--set", "snowflake.etcd.tls.ca_file=" + self.certs.ca,
                              "--set", "snowflake.etcd.tls.cert_file=" + self.ec.tls.client_cert,
                              "--set", "snowflake.etcd.tls.key_file=" + self.ec.tls.client_key,
                              *extra)

    def test_claim_and_reauthentication_over_tls(self):
        self.assertTrue(self.ec.endpoints().startswith("https://"))
        d = self.daemon(USER, self.password_file(self.ec.auth.password))
        last = self.wait_ids(d)
        failed = 0
        t_end = time.monotonic() + 6
        while time.monotonic() < t_end:  # the 2 s token expires about three times
            i = d.new_id()
            if i is None:
                failed += 1
            else:
                self.assertGreater(i, last)
                last = i
            time.sleep(0.02)
        self.assertEqual(failed, 0, "IDs refused while the token was renewed:\n" + d.output())
        self.assertGreaterEqual(metric(d, "snowflaked_etcd_auth_refusals_total",
                                       'reason="token"'), 1, d.output())
        self.assertGreater(metric(d, "snowflaked_etcd_tls_handshakes_total",
                                  'endpoint="%s",session="full"' % self.ec.endpoints()[8:]) or 0,
                           0, d.get("/metrics").body.decode())
        self.assert_no_secret(d, self.ec.auth.password)

    def test_wrong_password_over_tls_exits_1(self):
        d = self.daemon(USER, self.password_file("Wr0ng-pw-tls-2"))
        out = self.assert_start_fails(d, "authentication failed", "etcd user %s" % USER,
                                      "credentials or permissions do not work")
        self.assertNotIn("Wr0ng-pw-tls-2", out)


if __name__ == "__main__":
    unittest.main()
