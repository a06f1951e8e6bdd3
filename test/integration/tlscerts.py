"""Certificates for the TLS tests, made with the openssl command in a temporary directory.

    certs = tlscerts.Certs()        # or: with tlscerts.Certs() as certs:
    certs.ca, certs.server, certs.server_key, certs.client, certs.client_key, ...
    certs.cleanup()

What it makes (PEM files, EC P-256 keys, SHA-256):
  ca                          the test CA ("sf-test-ca")
  server, server_key          signed by ca, SAN IP:127.0.0.1 and DNS:localhost, serverAuth
  server2, server2_key        the same names, another key and serial (a rotated certificate)
  client, client_key          signed by ca, CN "sf-client", clientAuth
  expired, expired_key        a client certificate of ca that expired in 2020 (openssl ca)
  other_ca                    another CA ("sf-other-ca")
  other_client, other_client_key  a client certificate signed by other_ca
  garbage                     a file that is not PEM
  server_cert(name, sans)     more server certificates of ca, for other names (deploy/)

Other suites (sfload's TLS client, memcached's TLS tests) import it; nothing here comes from
outside the test's own temporary directory."""
import os
import shutil
import subprocess
import tempfile

OPENSSL = shutil.which("openssl") or "openssl"


def _run(*args, cwd):
    r = subprocess.run([OPENSSL, *args], cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed:\n%s" % (" ".join(args), r.stdout.decode(errors="replace")))
    return r.stdout.decode(errors="replace")


class Certs:
    def __init__(self, directory=None):
        self._own = directory is None
        self.dir = directory or tempfile.mkdtemp(prefix="sf_tls_")
        self._serial = 1000
        self.ca, self.ca_key = self._ca("ca", "sf-test-ca")
        self.other_ca, self.other_ca_key = self._ca("other_ca", "sf-other-ca")
        self.server, self.server_key = self._leaf("server", "127.0.0.1", "serverAuth",
                                                  "subjectAltName=IP:127.0.0.1,DNS:localhost")
        self.server2, self.server2_key = self._leaf("server2", "127.0.0.1", "serverAuth",
                                                    "subjectAltName=IP:127.0.0.1,DNS:localhost")
        self.client, self.client_key = self._leaf("client", "sf-client", "clientAuth")
        self.other_client, self.other_client_key = self._leaf(
            "other_client", "sf-other-client", "clientAuth", ca=(self.other_ca, self.other_ca_key))
        self.expired, self.expired_key = self._expired("expired", "sf-expired-client")
        self.garbage = self.path("garbage.pem")
        with open(self.garbage, "w") as f:
            f.write("this is not a certificate\n")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _key(self, name):
        key = self.path(name + ".key")
        _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key,
             cwd=self.dir)
        return key

    def _ca(self, name, cn):
        key = self._key(name)
        cert = self.path(name + ".pem")
        _run("req", "-x509", "-new", "-key", key, "-sha256", "-days", "30", "-subj", "/CN=" + cn,
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", cert, cwd=self.dir)
        return cert, key

    def _csr(self, name, cn, subj=None):
        key = self._key(name)
        csr = self.path(name + ".csr")
        _run("req", "-new", "-key", key, "-subj", subj or "/CN=" + cn, "-out", csr, cwd=self.dir)
        return key, csr

    def leaf(self, name, subj, usage="clientAuth", san=None, ca=None):
        """Another leaf certificate, (cert, key): subj in openssl's -subj form
        ("/O=shop/CN=orders-api"), san a subjectAltName value ("DNS:a,URI:spiffe://td/x"), signed
        by ca ((cert, key); the test CA without it)."""
        return self._leaf(name, None, usage, "subjectAltName=" + san if san else None, ca=ca,
                          subj=subj)

    def _leaf(self, name, cn, usage, extra=None, ca=None, days=30, subj=None):
        ca_cert, ca_key = ca or (self.ca, self.ca_key)
        key, csr = self._csr(name, cn, subj)
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=%s\n" % usage)
            if extra:
                f.write(extra + "\n")
        self._serial += 1
        cert = self.path(name + ".pem")
        _run("x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-set_serial",
             str(self._serial), "-days", str(days), "-sha256", "-extfile", ext, "-out", cert,
             cwd=self.dir)
        return cert, key

    def _expired(self, name, cn):
        """Validity in the past needs `openssl ca` (x509 -req only counts days from now)."""
        key, csr = self._csr(name, cn)
        cadir = self.path("cadb")
        os.makedirs(os.path.join(cadir, "new"), exist_ok=True)
        open(os.path.join(cadir, "index.txt"), "w").close()
        with open(os.path.join(cadir, "serial"), "w") as f:
            f.write("%04X\n" % (self._serial + 100))
        cnf = os.path.join(cadir, "ca.cnf")
        with open(cnf, "w") as f:
            f.write("[ca]\ndefault_ca = d\n[d]\ndatabase = %s/index.txt\nnew_certs_dir = %s/new\n"
                    "serial = %s/serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n"
                    "x509_extensions = e\n[p]\ncommonName = supplied\n"
                    "[e]\nbasicConstraints = CA:FALSE\nextendedKeyUsage = clientAuth\n"
                    % (cadir, cadir, cadir))
        cert = self.path(name + ".pem")
        _run("ca", "-batch", "-config", cnf, "-cert", self.ca, "-keyfile", self.ca_key, "-in", csr,
             "-out", cert, "-notext", "-startdate", "20200101000000Z", "-enddate",
             "20200201000000Z", cwd=self.dir)
        return cert, key

    def server_cert(self, name, sans, days=30):
        """Another server certificate of ca, with a key and serial of its own, for the names in
        sans ("DNS:name", "IP:address"); CN is name. deploy/ makes one per replica this way, and
        its successor for a rotation."""
        return self._leaf(name, name, "serverAuth", "subjectAltName=" + ",".join(sans), days=days)

    def serial_of(self, cert):
        """The certificate's serial as openssl prints it (hex)."""
        out = _run("x509", "-in", cert, "-noout", "-serial", cwd=self.dir)
        return out.strip().split("=", 1)[1]

    def cleanup(self):
        if self._own:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()
