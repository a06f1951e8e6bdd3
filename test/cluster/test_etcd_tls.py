"""snowflake.worker_id "etcd" against an etcd that speaks only TLS (test/cluster/etcdcluster.py's
TLS mode: a real 3-member etcd 3.4 on loopback, client and peer TLS, --client-cert-auth and
--trusted-ca-file, certificates made by tlscerts.py with openssl in a temp dir).

- the daemon claims a worker over https with a client certificate and issues IDs; an independent
  `etcdctl --cacert --cert --key` sees its owner and floor keys;
- fail closed at start, exit 1 at once naming the endpoint and the cause: another CA in ca_file,
  a server certificate for another name (server_name), no client certificate, a client
  certificate of another CA; https:// without ca_file is a configuration error (exit 2);
- the client certificate rotated mid-run (files replaced in the watched directory): reloaded,
  a bad new pair refused with the old one kept, the identity never dropped (same worker, IDs all
  along, no lapse);
- FIGURE tls_claim_ms / plain_claim_ms: start to listening (the claim dominates) over TLS and
  over plaintext etcd, the median of a few starts.
"""
import os
import shutil
import statistics
import sys
import tempfile
import time
import unittest

from etcdcluster import EtcdCluster, ensure_etcd
from test_etcd_identity_faults import Daemon, figure, id_worker

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import tlscerts  # noqa: E402


class EtcdTls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = ensure_etcd()
        if reason:
            raise AssertionError(reason)  # CI is root: never a silent skip
        cls.certs = tlscerts.Certs()
        cls.ec = EtcdCluster(tls=cls.certs).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.ec.close()
        cls.certs.cleanup()

    def setUp(self):
        self.prefix = "/tls%d/%s" % (os.getpid(), self._testMethodName)

    def daemon(self, ca=None, cert=None, key=None, *extra, endpoints=None):
        tls = []
        for k, v in (("ca_file", ca), ("cert_file", cert), ("key_file", key)):
            if v:
                tls += ["--set", "snowflake.etcd.tls.%s=%s" % (k, v)]
        d = Daemon(endpoints or self.ec.endpoints(), self.prefix, *tls, *extra)
        self.addCleanup(d.close)
        return d

    def good(self, *extra):
        return self.daemon(self.certs.ca, self.certs.client, self.certs.client_key, *extra)

    def ids(self, d, n):
        return [d.new_id() for _ in range(n)]

    # ---- working ------------------------------------------------------------------------------
    def test_claims_over_tls_and_etcdctl_sees_the_keys(self):
        d = self.good()
        d.wait_listening()
        got = self.ids(d, 50)
        self.assertNotIn(None, got, d.output())
        self.assertEqual(got, sorted(got))
        w = id_worker(got[0])
        self.assertTrue(d.wait_output("etcd over TLS: CA %s" % self.certs.ca), d.output())
        r = self.ec.etcdctl("get", "--prefix", self.prefix + "/", "--keys-only")
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("%s/owner/0000000/%07d" % (self.prefix, w), r.stdout)
        self.assertIn("%s/floor/0000000/%07d" % (self.prefix, w), r.stdout)
        self.assertIn("%s/meta" % self.prefix, r.stdout)
        # a leader change and a killed member: the client moves on over TLS
        n = self.ec.wait_leader()
        self.ec.kill(n)
        time.sleep(3)  # > ttl: renewals went through another member
        self.ec.restart(n)
        self.ec.wait_ready()
        later = self.ids(d, 20)
        self.assertNotIn(None, later, d.output())
        self.assertGreater(min(later), max(got))
        self.assertEqual({id_worker(i) for i in later}, {w})

    # ---- fail closed ----------------------------------------------------------------------------
    def refused(self, d, *texts):
        t0 = time.monotonic()
        rc = d.wait_exit(15)
        out = d.output()
        self.assertEqual(rc, 1, out)
        self.assertLess(time.monotonic() - t0, 8, "not at once (start_timeout_ms is 10 s)")
        self.assertIn("etcd https://127.0.0.1:", out)
        for t in texts:
            self.assertIn(t, out)
        self.assertNotIn("claimed", out)

    def test_wrong_ca_exits_1_naming_it(self):
        d = self.daemon(self.certs.other_ca, self.certs.client, self.certs.client_key)
        self.refused(d, "certificate verify failed: unable to get local issuer certificate",
                     "snowflake.etcd.tls.ca_file " + self.certs.other_ca)

    def test_certificate_for_another_name_exits_1(self):
        d = self.good("--set", "snowflake.etcd.tls.server_name=etcd.example.org")
        self.refused(d, "certificate verify failed: hostname mismatch",
                     "not for etcd.example.org")

    def test_no_client_certificate_exits_1(self):
        d = self.daemon(self.certs.ca)
        self.refused(d, "no client certificate", "snowflake.etcd.tls.cert_file")

    def test_client_certificate_of_another_ca_exits_1(self):
        d = self.daemon(self.certs.ca, self.certs.other_client, self.certs.other_client_key)
        self.refused(d, "etcd refused our client certificate",
                     "snowflake.etcd.tls.cert_file " + self.certs.other_client)

    def test_https_without_ca_file_is_a_config_error(self):
        d = self.daemon()
        self.assertEqual(d.wait_exit(15), 2, d.output())
        self.assertIn("snowflake.etcd.tls.ca_file", d.output())
        self.assertIn("required with https://", d.output())

    def test_mixed_schemes_are_a_config_error(self):
        mixed = self.ec.endpoint(0) + "," + self.ec.endpoint(1).replace("https", "http")
        d = self.daemon(self.certs.ca, endpoints=mixed)
        self.assertEqual(d.wait_exit(15), 2, d.output())
        self.assertIn("every endpoint must be https://", d.output())

    # ---- rotation -----------------------------------------------------------------------------
    def test_client_certificate_rotated_keeps_the_identity(self):
        live = tempfile.mkdtemp(prefix="sf_etcd_certs_")
        self.addCleanup(shutil.rmtree, live, True)
        cert, key = os.path.join(live, "client.pem"), os.path.join(live, "client.key")

        def install(c, k):  # as kubelet does: new files renamed into place
            for src, dst in ((c, cert), (k, key)):
                shutil.copy(src, dst + ".new")
                os.rename(dst + ".new", dst)

        install(self.certs.client, self.certs.client_key)
        # A TTL of 4 s and a 900 ms request timeout (not 2 s / 400 ms): the member killed below makes
        # the client fail over with a full handshake, which under TSan on a loaded machine can
        # take longer than 400 ms; what is asserted (no fence, no lapse, same worker through the
        # rotation and the failover) is the same.
        d = self.daemon(self.certs.ca, cert, key, "--set", "snowflake.etcd.ttl_s=4",
                        "--set", "snowflake.etcd.request_timeout_ms=900")
        d.wait_listening()
        first = self.ids(d, 20)
        w = id_worker(first[0])
        c2, k2 = self.certs.leaf("client_rotated", "/CN=sf-client-2", "clientAuth")
        install(c2, k2)
        self.assertTrue(d.wait_output("snowflake.etcd.tls: certificates reloaded (files changed)"),
                        d.output())
        # a bad pair (the new certificate with the other key) is refused, the old one stays
        install(self.certs.client, k2)
        self.assertTrue(d.wait_output("certificate reload refused"), d.output())
        # the member in use restarted: the reconnect is a full handshake with the rotated pair
        # (sessions of the old context are not resumed), still the same identity
        full_before = self.handshakes(d, "full")
        cur = self.current_member(d)
        self.ec.kill(cur)
        time.sleep(1.0)
        self.ec.restart(cur)
        self.ec.wait_ready()
        deadline = time.monotonic() + 3 * 4  # three TTLs of renewals after the rotation
        seen = []
        while time.monotonic() < deadline:
            i = d.new_id()
            self.assertIsNotNone(i, "fenced during the rotation:\n" + d.output())
            seen.append(i)
            time.sleep(0.05)
        self.assertGreater(min(seen), max(first))
        self.assertEqual({id_worker(i) for i in seen}, {w})
        self.assertNotIn("lapsed", d.output())
        self.assertEqual(d.metric("snowflaked_identity_fenced_seconds_total"), 0)
        self.assertGreater(self.handshakes(d, "full"), full_before)
        self.assertEqual(d.metric('snowflaked_etcd_tls_reloads_total{result="ok"}'), 1)
        self.assertEqual(d.metric('snowflaked_etcd_tls_reloads_total{result="refused"}'), 1)

    def metrics(self, d):
        return d.get("/metrics").body.decode().splitlines()

    def handshakes(self, d, session):
        return sum(float(line.rsplit(" ", 1)[1]) for line in self.metrics(d)
                   if line.startswith("snowflaked_etcd_tls_handshakes_total{")
                   and 'session="%s"' % session in line)

    def current_member(self, d):
        for line in self.metrics(d):
            if line.startswith("snowflaked_etcd_endpoint_current{") and line.endswith(" 1"):
                port = int(line.split('endpoint="', 1)[1].split('"', 1)[0].rsplit(":", 1)[1])
                return self.ec.client_ports.index(port)
        raise AssertionError("no current endpoint")

    # ---- figure ---------------------------------------------------------------------------------
    def test_claim_latency_tls_and_plain(self):
        def start_ms(make):
            out = []
            for _ in range(5):
                t0 = time.monotonic()
                d = make()
                d.wait_listening()
                out.append((time.monotonic() - t0) * 1000)
                d.proc.terminate()
                d.wait_exit(10)
            return statistics.median(out)

        tls = start_ms(self.good)
        with EtcdCluster() as plain:
            ms = start_ms(lambda: self.daemon(endpoints=plain.endpoints()))
        figure("tls_claim_ms", "%.1f" % tls)
        figure("plain_claim_ms", "%.1f" % ms)
        self.assertLess(tls, 5000)


if __name__ == "__main__":
    unittest.main()
