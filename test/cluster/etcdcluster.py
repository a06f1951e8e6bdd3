"""A 3-member etcd cluster on loopback ephemeral ports for tests (design-14 §5).

    with EtcdCluster() as ec:       # started and ready (a linearizable range works on every member)
        ec.endpoints()              # "http://127.0.0.1:P1,http://127.0.0.1:P2,..."
        n = ec.leader()             # index of the leader (0..2) or None
        ec.kill(n); ec.restart(n)   # SIGKILL; start again with the same data dir
        ec.stop(n); ec.cont(n)      # SIGSTOP / SIGCONT

    with EtcdCluster(tls=tlscerts.Certs()) as ec:   # client and peer TLS, --client-cert-auth
        ec.endpoints()              # "https://127.0.0.1:P1,..."; ec.ca, ec.client, ec.client_key
        ec.post(i, path, body)      # a gateway call to member i (over TLS with the client cert)

TLS mode: one certificate of the test CA (certs.ca) for each member's client and peer ports,
SAN IP:127.0.0.1 and DNS:localhost, serverAuth and clientAuth (etcd 3.4's gateway dials its own
client port with it, and peers use it both ways); --client-cert-auth and --trusted-ca-file on
both ports; clients present certs.client.

RBAC (auth="jwt" or "simple"): after start, `etcdctl` adds user root, role ROLE with readwrite on
each prefix of auth_prefixes, user USER (password USER_PASSWORD) with that role, and enables auth.
JWT tokens are RS256 with keys made by `openssl` in the data dir and live jwt_ttl; simple tokens
expire after simple_ttl_s idle. ec.etcdctl(...) runs etcdctl as root; readiness checks then
authenticate as root. Both modes can be combined (tls=..., auth=...).

Flags: --heartbeat-interval 50 --election-timeout 500, so elections take about a second.
Teardown: SIGTERM, SIGKILL after 2 s, by PID; the data dirs are removed. Only processes this
object started are signalled. ensure_etcd() installs etcd-server with apt-get when missing (root),
else returns the reason the caller should fail with.
"""
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
import faultutil  # noqa: E402  (ensure_programs)


def ensure_etcd():
    """None when etcd is installed (installing it if possible), else the reason."""
    return faultutil.ensure_programs({"etcd": "etcd-server"})


def _free_ports(n):
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def post(port, path, body, timeout=1.0, context=None, token=None):
    """(status, json) from one gateway call; (None, reason) on no answer. context: an
    ssl.SSLContext for a TLS member (https); token: an etcd auth token (Authorization header)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = token
    req = urllib.request.Request("%s://127.0.0.1:%d%s" % ("https" if context else "http", port, path),
                                 data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}
    except (OSError, ValueError) as e:
        return None, str(e)


def b64(s):
    return base64.b64encode(s.encode()).decode()


ROOT_PASSWORD = "root-pw-etcdcluster"
USER, USER_PASSWORD, ROLE = "sf", "sf-pw-etcdcluster", "sfrole"


class EtcdCluster:
    def __init__(self, members=3, start_timeout=20.0, tls=None, auth=None, auth_prefixes=("/",),
                 jwt_ttl="3s", simple_ttl_s=300):
        self.auth = auth
        self.auth_prefixes = auth_prefixes
        self.jwt_ttl = jwt_ttl
        self.simple_ttl_s = simple_ttl_s
        self.n = members
        self.certs = tls
        self.scheme = "https" if tls else "http"
        self.ssl_context = None
        if tls:
            self.member_cert, self.member_key = tls.leaf(
                "etcd_member", "/CN=etcd-member", "serverAuth,clientAuth",
                "IP:127.0.0.1,DNS:localhost")
            self.ca, self.client, self.client_key = tls.ca, tls.client, tls.client_key
            # etcd's JSON gateway answers 400 "CommonName of client sending a request against
            # gateway will be ignored" to a client certificate with a CN once auth is on: gateway
            # clients then need one without (ec.gateway_cert, ec.gateway_key; etcdctl, which
            # speaks gRPC, keeps certs.client)
            self.gateway_cert, self.gateway_key = tls.client, tls.client_key
            if auth:
                self.gateway_cert, self.gateway_key = tls.leaf(
                    "etcd_gateway_client", "/O=etcdcluster", "clientAuth")
            ctx = ssl.create_default_context(cafile=tls.ca)
            ctx.load_cert_chain(self.gateway_cert, self.gateway_key)
            self.ssl_context = ctx
        self.start_timeout = start_timeout
        self.dir = tempfile.mkdtemp(prefix="etcdcluster.")
        ports = _free_ports(2 * members)
        self.client_ports = ports[:members]
        self.peer_ports = ports[members:]
        self.procs = [None] * members
        self.logs = [None] * members

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self):
        try:
            if self.auth == "jwt":
                self._jwt_keys()
            for i in range(self.n):
                self._spawn(i, "new")
            self.wait_ready()
            if self.auth:
                self._enable_auth()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _spawn(self, i, state):
        sc = self.scheme
        cluster = ",".join("e%d=%s://127.0.0.1:%d" % (j, sc, self.peer_ports[j]) for j in range(self.n))
        c, p = self.client_ports[i], self.peer_ports[i]
        tls = []
        if self.certs:
            tls = ["--cert-file", self.member_cert, "--key-file", self.member_key,
                   "--client-cert-auth", "--trusted-ca-file", self.certs.ca,
                   "--peer-cert-file", self.member_cert, "--peer-key-file", self.member_key,
                   "--peer-client-cert-auth", "--peer-trusted-ca-file", self.certs.ca]
        log = open(os.path.join(self.dir, "e%d.log" % i), "ab")
        self.logs[i] = log
        self.procs[i] = subprocess.Popen(
            ["etcd", "--name", "e%d" % i, "--data-dir", os.path.join(self.dir, "d%d" % i),
             "--listen-client-urls", "%s://127.0.0.1:%d" % (sc, c),
             "--advertise-client-urls", "%s://127.0.0.1:%d" % (sc, c),
             "--listen-peer-urls", "%s://127.0.0.1:%d" % (sc, p),
             "--initial-advertise-peer-urls", "%s://127.0.0.1:%d" % (sc, p), *tls,
             "--initial-cluster", cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", "etcdcluster-%d" % os.getpid(),
             "--heartbeat-interval", "50", "--election-timeout", "500", *self._auth_flags()],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    # -- RBAC ----------------------------------------------------------------------------------
    def _jwt_keys(self):
        self.priv = os.path.join(self.dir, "jwt.key")
        self.pub = os.path.join(self.dir, "jwt.pub")
        subprocess.run(["openssl", "genrsa", "-out", self.priv, "2048"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["openssl", "rsa", "-in", self.priv, "-pubout", "-out", self.pub],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _auth_flags(self):
        if self.auth == "jwt":
            return ["--auth-token", "jwt,pub-key=%s,priv-key=%s,sign-method=RS256,ttl=%s" %
                    (self.pub, self.priv, self.jwt_ttl)]
        if self.auth == "simple":
            return ["--auth-token", "simple", "--auth-token-ttl", str(self.simple_ttl_s)]
        return []

    def etcdctl(self, *args, root=True, check=True, stdin=None, timeout=30):
        """etcdctl (API v3) against the live members, with the CA and client certificate in TLS
        mode and as root once auth is on; its CompletedProcess (stdout, stderr text)."""
        live = ",".join(self.endpoint(i) for i in range(self.n) if self.alive(i))
        cmd = ["etcdctl", "--endpoints", live, "--dial-timeout", "2s", "--command-timeout", "5s"]
        if self.certs:
            cmd += ["--cacert", self.certs.ca, "--cert", self.client, "--key", self.client_key]
        if root and getattr(self, "auth_on", False):
            cmd += ["--user", "root:" + ROOT_PASSWORD]
        r = subprocess.run(cmd + list(args), input=stdin, capture_output=True, text=True,
                           env=dict(os.environ, ETCDCTL_API="3"), timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError("etcdctl %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r

    def _enable_auth(self):
        self.etcdctl("user", "add", "root", "--new-user-password", ROOT_PASSWORD,
                     "--interactive=false")
        self.etcdctl("role", "add", ROLE)
        for p in self.auth_prefixes:
            self.etcdctl("role", "grant-permission", ROLE, "--prefix=true", "readwrite", p)
        self.etcdctl("user", "add", USER, "--new-user-password", USER_PASSWORD,
                     "--interactive=false")
        self.etcdctl("user", "grant-role", USER, ROLE)
        self.etcdctl("auth", "enable")
        self.auth_on = True

    def token(self, i=None, user="root", password=ROOT_PASSWORD):
        """A token from member i (the first live one by default), or None."""
        for j in ([i] if i is not None else range(self.n)):
            if self.alive(j):
                st, r = self.post(j, "/v3/auth/authenticate",
                                  {"name": user, "password": password}, 2.0)
                if st == 200 and r.get("token"):
                    return r["token"]
        return None

    def member_ready(self, i):
        tok = self.token(i) if getattr(self, "auth_on", False) else None
        st, j = self.post(i, "/v3/kv/range", {"key": b64("/etcdcluster/ready")}, 1.0, token=tok)
        return st == 200 and "header" in j

    def post(self, i, path, body, timeout=1.0, token=None):
        """post() to member i, over TLS with the client certificate in TLS mode."""
        return post(self.client_ports[i], path, body, timeout, self.ssl_context, token)

    def wait_ready(self, members=None, timeout=None):
        members = range(self.n) if members is None else members
        deadline = time.monotonic() + (timeout or self.start_timeout)
        for i in members:
            while not self.member_ready(i):
                if self.procs[i].poll() is not None:
                    raise RuntimeError("etcd member %d exited (%s); log in %s" %
                                       (i, self.procs[i].returncode, self.dir))
                if time.monotonic() > deadline:
                    raise RuntimeError("etcd member %d not ready in time" % i)
                time.sleep(0.05)

    def close(self):
        for i in range(self.n):
            self._terminate(i)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _terminate(self, i):
        p = self.procs[i]
        if p is None:
            return
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                os.kill(p.pid, signal.SIGTERM)
                p.wait(2.0)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)  # a last leader may ignore SIGTERM (design §1)
                p.wait(5.0)
            except ProcessLookupError:
                pass
        self.procs[i] = None
        if self.logs[i]:
            self.logs[i].close()
            self.logs[i] = None

    # -- queries and faults ----------------------------------------------------------------------
    def endpoint(self, i):
        return "%s://127.0.0.1:%d" % (self.scheme, self.client_ports[i])

    def endpoints(self, order=None):
        return ",".join(self.endpoint(i) for i in (order or range(self.n)))

    def leader(self):
        """Index of the member that reports itself leader, or None."""
        for i in range(self.n):
            if not self.alive(i):
                continue
            st, j = self.post(i, "/v3/maintenance/status", {}, 0.5)
            if st == 200 and j.get("leader") and j.get("leader") == j.get("header", {}).get("member_id"):
                return i
        return None

    def wait_leader(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n = self.leader()
            if n is not None:
                return n
            time.sleep(0.05)
        raise RuntimeError("no etcd leader within %.1f s" % timeout)

    def alive(self, i):
        return self.procs[i] is not None and self.procs[i].poll() is None

    def kill(self, i):
        os.kill(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].wait(5.0)
        self.procs[i] = None
        self.logs[i].close()
        self.logs[i] = None

    def stop(self, i):
        os.kill(self.procs[i].pid, signal.SIGSTOP)

    def cont(self, i):
        os.kill(self.procs[i].pid, signal.SIGCONT)

    def restart(self, i):
        if self.alive(i):
            self._terminate(i)
        self._spawn(i, "existing")
