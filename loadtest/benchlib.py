"""Helpers shared by the Python benchmarks in loadtest/ (loopback only)."""
import os
import socket
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    """The resident set size of process pid in KiB (VmRSS), 0 when /proc does not say."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """utime + stime of process pid (all its threads) in seconds, from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()  # the name in () may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit("server on %d did not start" % port)


def make_certs(directory, names=("localhost",), addresses=("127.0.0.1", "::1")):
    """A throwaway PKI made with the openssl command in directory (EC P-256 keys, valid 2 days),
    for the TLS rows of bench.py and sfload's TLS tests. Returns {name: path} for:
      ca.pem, ca.key            the CA
      server.pem, server.key    signed by it; names and addresses as subjectAltName, serverAuth
      client.pem, client.key    signed by it; CN sfload-client, clientAuth (mTLS)
      other-ca.pem              another CA, which vouches for none of the above
      other-server.pem/.key     signed by the other CA, same names (a chain nobody trusts here)
    (A minimal fixture; test/integration/tlscerts.py is the daemon's tests' fuller one.)"""
    import random
    import subprocess
    os.makedirs(directory, exist_ok=True)

    def openssl(*args):
        r = subprocess.run(["openssl"] + list(args), cwd=directory, capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("openssl %s failed: %s" % (" ".join(args), r.stderr.strip()))

    def key(name):
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
                name + ".key")

    def ca(name, cn):
        key(name)
        openssl("req", "-x509", "-new", "-key", name + ".key", "-out", name + ".pem", "-days", "2",
                "-subj", "/CN=" + cn, "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def leaf(name, issuer, cn, ext):
        key(name)
        openssl("req", "-new", "-key", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn)
        with open(os.path.join(directory, name + ".ext"), "w") as f:
            f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n" + ext)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", issuer + ".pem", "-CAkey",
                issuer + ".key", "-set_serial", str(random.getrandbits(63)), "-days", "2",
                "-out", name + ".pem", "-extfile", name + ".ext")

    san = "subjectAltName=" + ",".join(["DNS:" + n for n in names] +
                                       ["IP:" + a for a in addresses]) + "\n"
    ca("ca", "sfload test CA")
    leaf("server", "ca", names[0], san + "extendedKeyUsage=serverAuth\n")
    leaf("client", "ca", "sfload-client", "extendedKeyUsage=clientAuth\n")
    ca("other-ca", "another test CA")
    leaf("other-server", "other-ca", names[0], san + "extendedKeyUsage=serverAuth\n")
    return {n: os.path.join(directory, n) for n in (
        "ca.pem", "ca.key", "server.pem", "server.key", "client.pem", "client.key",
        "other-ca.pem", "other-server.pem", "other-server.key")}
