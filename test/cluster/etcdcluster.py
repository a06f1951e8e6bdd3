"""A 3-member etcd cluster on loopback ephemeral ports for tests (design-14 §5).

    with EtcdCluster() as ec:       # started and ready (a linearizable range works on every member)
        ec.endpoints()              # "http://127.0.0.1:P1,http://127.0.0.1:P2,..."
        n = ec.leader()             # index of the leader (0..2) or None
        ec.kill(n); ec.restart(n)   # SIGKILL; start again with the same data dir
        ec.stop(n); ec.cont(n)      # SIGSTOP / SIGCONT

    with EtcdCluster(tls=True) as ec:        # https clients with --client-cert-auth, peer TLS
    with EtcdCluster(auth=EtcdAuth("/p")) as ec:  # auth enable: root + a user limited to /p/
        ec.call(i, path, body)      # a gateway call as the cluster's admin (TLS, root token)
        ec.etcdctl(*args)           # etcdctl as root over the cluster's security (an independent reader)

Flags: --heartbeat-interval 50 --election-timeout 500, so elections take about a second.
Security (issue 24; off by default, then everything is as before): tls=True makes a CA, one
certificate per member (serverAuth+clientAuth, IP:127.0.0.1) for its client and peer listeners, the
harness's admin client certificate and the daemons' client certificate (ec.tls, an EtcdTls), all with
openssl (test/integration/tlscerts.py). auth=EtcdAuth(prefix, token="jwt", ttl_s=3) adds RS256 JWT
keys (openssl), a root user and a user limited to read/write on prefix + "/" (role of the same
name), then `auth enable`; the daemons' password is in ec.auth.password_file.
Teardown: SIGTERM, SIGKILL after 2 s, by PID; the data dirs are removed. Only processes this
object started are signalled. ensure_etcd() installs etcd-server with apt-get when missing (root),
else returns the reason the caller should fail with.
"""
import base64
import collections
import http.client
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import tlscerts  # noqa: E402  (openssl certificate fixture of issue 23)


def ensure_etcd():
    """None when etcd is installed (installing it if possible), else the reason."""
    return faultutil.ensure_programs({"etcd": "etcd-server"})


def ensure_etcdctl():
    """None when etcdctl is installed (installing it if possible), else the reason."""
    return faultutil.ensure_programs({"etcdctl": "etcd-client"})


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


def post(port, path, body, timeout=1.0):
    """(status, json) from one gateway call; (None, reason) on no answer."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
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


def write_secret_dir(directory, files):
    """Writes {name: bytes} into directory the way the kubelet updates a Secret volume: a new
    ..<n> directory, then an atomic rename of the ..data symlink over the old one; each name is a
    symlink through ..data, so a reader sees all old or all new files."""
    os.makedirs(directory, exist_ok=True)
    old = [e for e in os.listdir(directory) if e[:2] == ".." and e[2:].isdigit()]
    n = max([int(e[2:]) for e in old] + [-1]) + 1
    gen = os.path.join(directory, "..%d" % n)
    os.mkdir(gen)
    for name, data in files.items():
        with open(os.path.join(gen, name), "wb") as f:
            f.write(data)
        os.chmod(os.path.join(gen, name), 0o600)
    tmp = os.path.join(directory, "..data_tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink("..%d" % n, tmp)
    os.rename(tmp, os.path.join(directory, "..data"))
    for name in files:
        link = os.path.join(directory, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..data", name), link)
    for e in old:
        shutil.rmtree(os.path.join(directory, e), ignore_errors=True)


class EtcdTls:
    """The certificates of a TLS cluster. The daemons' client certificate and key live in a
    kubelet-style Secret directory (client_dir: tls.crt, tls.key through ..data) so that
    rotate_client() swaps them the way a Kubernetes Secret update does."""

    def __init__(self, directory, members, certs=None):
        """certs: a tlscerts.Certs whose CA signs everything (tests that also need its other_ca
        and other_client); by default one of our own in directory/pki."""
        if certs is None:
            os.makedirs(os.path.join(directory, "pki"), exist_ok=True)
            certs = tlscerts.Certs(os.path.join(directory, "pki"))
        self.certs = certs
        self.ca = self.certs.ca
        self.members = [self.certs._leaf("member%d" % i, "etcd-member-%d" % i,
                                         "serverAuth,clientAuth",
                                         "subjectAltName=IP:127.0.0.1,DNS:localhost")
                        for i in range(members)]
        # No CN in any client certificate: once auth is enabled, etcd 3.4's JSON gateway answers
        # 400 "CommonName of client sending a request against gateway will be ignored ..." to a
        # client certificate with a CN (its gRPC port would take the CN as the user name). The
        # harness authenticates with root's password like any client.
        self.admin = self.certs.leaf("admin", "/O=etcdcluster-admin", "clientAuth")
        self.client_dir = os.path.join(directory, "client-tls")
        self.rotations = 0
        self.rotate_client()

    def rotate_client(self):
        """A new key and certificate (same CA, same CN, new serial) into client_dir; returns the
        new serial."""
        # No CN (see admin above): only the password grants the user's role.
        cert, key = self.certs.leaf("client%d" % self.rotations, "/O=snowflaked", "clientAuth")
        self.rotations += 1
        with open(cert, "rb") as c, open(key, "rb") as k:
            write_secret_dir(self.client_dir, {"tls.crt": c.read(), "tls.key": k.read()})
        return self.certs.serial_of(cert)

    @property
    def client_cert(self):
        return os.path.join(self.client_dir, "tls.crt")

    @property
    def client_key(self):
        return os.path.join(self.client_dir, "tls.key")

    def context(self):
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.load_cert_chain(self.admin[0], self.admin[1])
        return ctx


class EtcdAuth:
    """RBAC of a cluster: root (password root_password) and USER with the role USER granted
    readwrite on prefix + "/" only (the least-privilege role of docs/identity-etcd.md), tokens
    "jwt" (RS256, ttl_s) or "simple". The user's password is in the Secret-style directory
    password_dir (file "password", read through ..data)."""

    USER = "snowflaked"

    def __init__(self, prefix, token="jwt", ttl_s=3):
        self.prefix, self.token, self.ttl_s = prefix, token, ttl_s
        self.root_password = "root-" + os.urandom(6).hex()
        self.password = "pw-" + os.urandom(6).hex()
        self.password_dir = None
        self.jwt_keys = None
        self.enabled = False

    @property
    def password_file(self):
        return os.path.join(self.password_dir, "password")

    def prepare(self, directory):
        self.password_dir = os.path.join(directory, "client-auth")
        self.write_password(self.password)
        if self.token == "jwt":
            priv, pub = os.path.join(directory, "jwt.key"), os.path.join(directory, "jwt.pub")
            for args in (["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                          "-out", priv], ["pkey", "-in", priv, "-pubout", "-out", pub]):
                r = subprocess.run([tlscerts.OPENSSL] + args, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=60)
                if r.returncode:
                    raise RuntimeError("openssl %s: %s" % (args[0], r.stdout.decode()))
            self.jwt_keys = (priv, pub)

    def write_password(self, password):
        """The daemons' password file as a Secret update would change it (atomic ..data swap)."""
        write_secret_dir(self.password_dir, {"password": password.encode() + b"\n"})

    def token_flags(self):
        """etcd's flags for the token kind: JWTs live ttl_s; simple tokens expire after ttl_s idle."""
        if self.token == "jwt":
            return ["--auth-token", "jwt,pub-key=%s,priv-key=%s,sign-method=RS256,ttl=%ds" % (
                self.jwt_keys[1], self.jwt_keys[0], self.ttl_s)]
        return ["--auth-token", "simple", "--auth-token-ttl", str(self.ttl_s)]


EtcdctlResult = collections.namedtuple("EtcdctlResult", "returncode stdout")  # stdout has stderr too


class EtcdCluster:
    def __init__(self, members=3, start_timeout=20.0, tls=False, auth=None, auth_prefixes=("/",),
                 jwt_ttl="3s", simple_ttl_s=300):
        """tls: True, or a tlscerts.Certs to sign with. auth: an EtcdAuth, or "jwt" / "simple" for
        one on auth_prefixes[0] (JWTs living jwt_ttl, simple tokens simple_ttl_s idle)."""
        if isinstance(auth, str):
            ttl = int(str(jwt_ttl).rstrip("s")) if auth == "jwt" else simple_ttl_s
            auth = EtcdAuth(auth_prefixes[0].rstrip("/"), token=auth, ttl_s=ttl)
        self.n = members
        self.start_timeout = start_timeout
        self.dir = tempfile.mkdtemp(prefix="etcdcluster.")
        ports = _free_ports(2 * members)
        self.client_ports = ports[:members]
        self.peer_ports = ports[members:]
        self.procs = [None] * members
        self.logs = [None] * members
        self.tls = None
        if tls:
            self.tls = EtcdTls(self.dir, members, None if tls is True else tls)
        self.auth = auth
        self._token = None
        if auth is not None:
            auth.prepare(self.dir)

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self):
        try:
            for i in range(self.n):
                self._spawn(i, "new")
            self.wait_ready()
            if self.auth is not None:
                self.enable_auth()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def scheme(self):
        return "https" if self.tls else "http"

    def _security_flags(self, i):
        """etcd flags of member i for TLS and auth; none on a plain cluster."""
        flags = []
        if self.tls:
            cert, key = self.tls.members[i]
            flags += ["--cert-file", cert, "--key-file", key, "--client-cert-auth",
                      "--trusted-ca-file", self.tls.ca,
                      "--peer-cert-file", cert, "--peer-key-file", key,
                      "--peer-client-cert-auth", "--peer-trusted-ca-file", self.tls.ca]
        if self.auth is not None:
            flags += self.auth.token_flags()
        return flags

    def _spawn(self, i, state):
        s = self.scheme
        cluster = ",".join("e%d=%s://127.0.0.1:%d" % (j, s, self.peer_ports[j]) for j in range(self.n))
        c, p = self.client_ports[i], self.peer_ports[i]
        log = open(os.path.join(self.dir, "e%d.log" % i), "ab")
        self.logs[i] = log
        self.procs[i] = subprocess.Popen(
            ["etcd", "--name", "e%d" % i, "--data-dir", os.path.join(self.dir, "d%d" % i),
             "--listen-client-urls", "%s://127.0.0.1:%d" % (s, c),
             "--advertise-client-urls", "%s://127.0.0.1:%d" % (s, c),
             "--listen-peer-urls", "%s://127.0.0.1:%d" % (s, p),
             "--initial-advertise-peer-urls", "%s://127.0.0.1:%d" % (s, p),
             "--initial-cluster", cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", "etcdcluster-%d" % os.getpid(),
             "--heartbeat-interval", "50", "--election-timeout", "500"] + self._security_flags(i),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def member_ready(self, i):
        st, j = self.call(i, "/v3/kv/range", {"key": b64("/etcdcluster/ready")}, 1.0)
        return st == 200 and "header" in j

    # -- secured access (plain clusters: exactly post()) -------------------------------------------
    def connection(self, i, timeout=3.0):
        """An http.client connection to member i's gateway (https with the admin certificate on a
        TLS cluster)."""
        if self.tls:
            return http.client.HTTPSConnection("127.0.0.1", self.client_ports[i], timeout=timeout,
                                               context=self.tls.context())
        return http.client.HTTPConnection("127.0.0.1", self.client_ports[i], timeout=timeout)

    def headers(self, fresh=False):
        """Request headers of the admin: with the root token on an auth cluster (fresh: a new
        one, for a call that cannot be repeated on 401, e.g. a watch: a JWT lives seconds)."""
        h = {"Content-Type": "application/json"}
        if self.auth is not None and self.auth.enabled:
            if self._token is None or fresh:
                self._token = self.authenticate("root", self.auth.root_password)
            if self._token:
                h["Authorization"] = self._token
        return h

    def authenticate(self, user, password, i=None):
        """A token for user from any answering member (None if none answered 200)."""
        for m in ([i] if i is not None else range(self.n)):
            if not self.alive(m):
                continue
            st, j = self._raw(m, "/v3/auth/authenticate", {"name": user, "password": password},
                              1.0, {"Content-Type": "application/json"})
            if st == 200 and j.get("token"):
                return j["token"]
        return None

    def _raw(self, i, path, body, timeout, headers):
        conn = self.connection(i, timeout)
        try:
            conn.request("POST", path, json.dumps(body), headers)
            r = conn.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data or b"{}")
            except ValueError:
                return r.status, {}
        except (OSError, http.client.HTTPException, ValueError) as e:
            return None, str(e)
        finally:
            conn.close()

    def call(self, i, path, body, timeout=1.0):
        """(status, json) of one gateway call on member i as the admin; (None, reason) on no
        answer. A plain cluster: post() itself. An expired or invalid root token (JWT ttl) is
        renewed once."""
        if not self.tls and self.auth is None:
            return post(self.client_ports[i], path, body, timeout)
        st, j = self._raw(i, path, body, timeout, self.headers())
        if st == 401 and self.auth is not None and self.auth.enabled:
            self._token = None
            st, j = self._raw(i, path, body, timeout, self.headers())
        return st, j

    def etcdctl(self, *args, user=None, password=None, cert=None, check=True, timeout=10,
                stdin=None):
        """etcdctl (API 3) against every member with the cluster's security: the admin certificate
        over TLS, --user root:<password> on an auth cluster; user/password
        act as another user, cert=(cert, key) presents another client certificate."""
        live = [i for i in range(self.n) if self.alive(i)]
        cmd = ["etcdctl", "--endpoints", self.endpoints(live), "--dial-timeout", "2s",
               "--command-timeout", "5s"]
        if self.tls:
            c, k = cert or self.tls.admin
            cmd += ["--cacert", self.tls.ca, "--cert", c, "--key", k]
        if user is not None:
            cmd += ["--user", "%s:%s" % (user, password)]
        elif self.auth is not None and self.auth.enabled:
            cmd += ["--user", "root:%s" % self.auth.root_password]
        r = subprocess.run(cmd + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           input=(stdin or "").encode(), timeout=timeout,
                           env=dict(os.environ, ETCDCTL_API="3"))
        out = r.stdout.decode(errors="replace")
        if check and r.returncode != 0:
            raise RuntimeError("etcdctl %s failed (%d): %s" % (" ".join(args), r.returncode, out))
        return EtcdctlResult(r.returncode, out)

    def enable_auth(self):
        """root, the limited user and its role (readwrite on prefix + "/"), then auth enable."""
        a = self.auth
        a.enabled = False
        u = a.USER
        self.etcdctl("user", "add", "root", "--interactive=false",
                     "--new-user-password=" + a.root_password)
        self.etcdctl("role", "add", u)
        self.etcdctl("role", "grant-permission", u, "--prefix=true", "readwrite", a.prefix + "/")
        self.etcdctl("user", "add", u, "--interactive=false", "--new-user-password=" + a.password)
        self.etcdctl("user", "grant-role", u, u)
        self.etcdctl("auth", "enable")
        a.enabled = True

    # -- RBAC changes during a run (chaos events) --------------------------------------------------
    def set_user_password(self, password):
        """The limited user's password in etcd (not in its file: write_password() does that)."""
        # etcdctl 3.4's `user passwd` has no --new-user-password: non-interactive, it reads stdin
        self.etcdctl("user", "passwd", self.auth.USER, "--interactive=false",
                     stdin=password + "\n")

    def revoke_prefix(self):
        self.etcdctl("role", "revoke-permission", self.auth.USER, "--prefix=true",
                     self.auth.prefix + "/")

    def grant_prefix(self):
        self.etcdctl("role", "grant-permission", self.auth.USER, "--prefix=true", "readwrite",
                     self.auth.prefix + "/")

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
            st, j = self.call(i, "/v3/maintenance/status", {}, 0.5)
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
