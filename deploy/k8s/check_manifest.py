#!/usr/bin/env python3
"""Check that a rendered snowflaked manifest agrees with what the binary actually does.

    python3 deploy/k8s/check_manifest.py [-b build/snowflaked] [--container-config FILE]
                                         [--expect-refusal TEXT] [--no-live]
                                         [--etcd-support auto|config|full] RENDERED.yaml

No cluster needed. From the output of `kubectl kustomize` it takes the StatefulSet (or the
Deployment, below), the ConfigMap it mounts, the Services, the PodDisruptionBudget, any
HorizontalPodAutoscaler and ServiceMonitor, and

1. proves the mounted config.json is accepted by `snowflaked --check-config` with the pod's
   environment as Kubernetes would set it (downward API simulated: POD_INDEX from the pod-index
   label, POD_NAME, limits.cpu), for every ordinal of the StatefulSet, both with POD_INDEX
   (Kubernetes >= 1.28) and with only POD_NAME (older clusters: empty label); that each pod gets
   the worker id of its ordinal; that the replica count fits worker_bits and that the first
   ordinal beyond it is refused;
2. checks that every environment variable the manifest sets is one the binary reads
   (SNOWFLAKED_<key> for a key of the --check-config output, POD_INDEX, POD_NAME): the daemon
   silently ignores other SNOWFLAKED_* names, so a typo would do nothing; and that no Service's
   docker-link variables can collide with a key;
3. checks that the resolved listener ports equal the containerPorts, that the Services, probes,
   Prometheus annotations and ServiceMonitor point at them, that selectors select the pods, that
   data_dir is the persistent volume, that the grace period covers the drain and the memory
   limit the cache;
4. starts the binary with that config on loopback (host 127.0.0.1, free ports, a temporary
   data_dir) and the same environment, probes the startup/liveness/readiness paths (200), the
   Prometheus path, the memcached port and an ID, then stops it with SIGTERM as the kubelet
   would and checks that it exits 0 and leaves the lease (and cache snapshot) in data_dir.

With TLS on (components/tls: server.tls.port, cache.memcached_tls.port), step 3 also checks that
every certificate, key and CA file the configuration names lies in a read-only Secret volume
mounted as a directory (not subPath: such a mount never sees an update), under the key a
cert-manager Secret has for it (tls.crt, tls.key, ca.crt), readable by the pod's user; that the
Secret is the spec.secretName of a cert-manager Certificate of the manifest (or a Secret of it);
that tls.watch_files is on; that the Certificate rotates its key, renews before the
certificate-expiry alert of deploy/monitoring would fire, and names every Service and every pod
of the headless Service in the pods' namespace; that each probe's scheme is the one of its port
(HTTPS on a TLS port, HTTP on a plaintext one), and the Prometheus annotations and ServiceMonitor
too (with a CA to verify and a serverName among the certificate's names); that a NetworkPolicy
keeps the plaintext HTTP port closed when the probes use HTTPS. Step 4 then lays out a Secret
volume the way the kubelet does (..data symlink), with a certificate made by openssl for the
Certificate's names, starts the daemon on it, speaks HTTPS and memcached over TLS verifying the
name of the client Service, rotates the certificate with the kubelet's ..data swap and requires
a new connection to get the new serial, without a restart, while an open one keeps working.

A Deployment (overlays/etcd-deployment) instead of a StatefulSet: worker ids are claimed from etcd
(snowflake.worker_id "etcd"), so step 1 becomes: --check-config accepts the config with the pod's
environment (endpoints from a ConfigMap or Secret key: http:// URLs), the etcd timing rules, and
the replica ceiling: (HPA maxReplicas + the rollout's maxSurge) x slots per pod (server.threads
with per_thread_worker_ids, else 1) <= worker_max - worker_min + 1, printed as "(HPA: at most N
replicas)"; an HPA is autoscaling/v2, the Deployment has no spec.replicas, a Utilization target
has its resource request, the startupProbe outlasts start_timeout_ms + ttl_s (a pod connecting
to etcd does not listen yet). Step 3 wants data_dir on an emptyDir and a grace period that also covers
the final floor write and the lease revoke. Step 4 starts a single-member etcd on loopback
(Debian's etcd-server), points the daemon at it, probes as above plus snowflaked_identity_info
and an ID with the lowest worker of the range, sees the owner key in etcd, starts a second pod
beside it (it must take the next worker), and after SIGTERM (exit 0) sees the owner keys gone
(leases revoked) and the floor key kept.
With --etcd-support config (a daemon with the snowflake.etcd keys but no backend; auto looks for
the backend in this repository's source) the live part is reported as SKIP; otherwise a daemon
that does not claim its slot from etcd FAILS.
A secured etcd (issue 24; components/etcd-tls, etcd-auth): each credential file of the etcd client
(snowflake.etcd.tls.ca_file / cert_file / key_file, snowflake.etcd.auth.password_file) is a file
of a Secret volume mounted read-only as a directory (no subPath), at the path the key names, the
key the Secret must have (ca.crt, tls.crt, tls.key; password), readable by the pod's user; the
certificate and its key from one Secret; each such Secret is made by the manifest (a Secret or a
Certificate's spec.secretName) or named by a pod annotation user-provided-secret.snowflaked.io/
<name>; https:// endpoints exactly when a CA is mounted; a client certificate only with its key
and a CA; a password file only with a user name; no password in config.json, a ConfigMap, an env
value or a --set. Until the daemon knows those keys (--etcd-credentials auto looks in this
repository's source), they are left out of --check-config (https:// read as http:// there), the
rest is checked as above, and SKIP says so (the live daemon is then not started).
Live, the loopback etcd is secured as the manifest's client expects: https with its CA and
--client-cert-auth when the manifest mounts a CA (and a client certificate), `auth enable` when it
names a user, that user's role holding readwrite on the prefix only (docs/identity-etcd.md);
certificates by openssl, none with a CN (etcd 3.4's gateway refuses one under auth); the
certificates, passwords and token flags of test/cluster/etcdcluster.py (EtcdTls, EtcdAuth). The
Secrets are laid out kubelet-style (..data symlink) with the keys the README's kubectl commands
give them, and the daemon gets the manifest's own variables and file names with only each Secret
mount's directory mapped to its temporary volume: a wrong path or key name does not start. On top
of the checks above: TLS handshakes with etcd, the client certificate in service being the
Secret's tls.crt (its notAfter), an authentication of the manifest's user, no call refused for
the role's permissions; etcd is read over TLS as root.

--expect-refusal TEXT: the manifest must NOT start as is (the base, whose datacenter id is a
placeholder): --check-config must fail naming TEXT, an environment variable the manifest sets;
the remaining checks then run with that variable set to 0.

Everything started is killed by PID (and dies with this script); temporary files are removed.
Exit status 0 when every check passes, 1 otherwise, 2 on usage errors.
"""

import argparse
import base64
import http.client
import json
import math
import os
import re
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

try:
    import yaml
except ImportError:  # validate.sh installs python3-yaml; say so when run by hand
    sys.exit("check_manifest: needs PyYAML (Debian: apt-get install python3-yaml)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The certificates of the live TLS check (made with openssl) and the kubelet's Secret volume.
sys.path.insert(0, os.path.join(ROOT, "deploy"))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from secret_volume import SecretVolume  # noqa: E402
import tlscerts  # noqa: E402
# The secured loopback etcd's certificates and RBAC user (issue 24), as test/cluster makes them.
sys.path.insert(0, os.path.join(ROOT, "test", "cluster"))
import etcdcluster  # noqa: E402
# The alerting and recording rules a PrometheusRule must carry (deploy/monitoring/README.md).
RULES_FILE = os.path.join(ROOT, "deploy", "monitoring", "snowflaked.rules.yml")
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
CONTAINER = "snowflaked"
# Waits for the live daemon (listening, probes answering 200) give up after this long.
LIVE_TIMEOUT_S = 15.0
# What a stop may take beyond preStop + server.shutdown_grace_ms: the final cache snapshot and
# lease write (under 1 s for a full 64 MiB cache on a local disk; budget slow volumes).
FINAL_WRITE_BUDGET_S = 10
# The repository this script belongs to (deploy/k8s/..): its source says whether the daemon
# has the etcd identity backend (etcd_support).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The etcd client's credential files (issue 24; the planned key names, rename here) and the key of
# the mounted Secret each must be (None: any key; the user's Secret names it).
ETCD_CRED_FILES = {
    "snowflake.etcd.tls.ca_file": "ca.crt",
    "snowflake.etcd.tls.cert_file": "tls.crt",
    "snowflake.etcd.tls.key_file": "tls.key",
    "snowflake.etcd.auth.password_file": None,
}
ETCD_AUTH_USER = "snowflake.etcd.auth.username"
# A pod template annotation user-provided-secret.snowflaked.io/<Secret name> documents a Secret the
# pods mount that the manifest does not create (the user makes it with kubectl).
USER_PROVIDED_SECRET = "user-provided-secret.snowflaked.io/"
# How long the loopback etcd may take to answer its first request.
ETCD_START_TIMEOUT_S = 15.0
# Memory limit rule: RSS measured 62-81 MiB with a full 64 MiB cache (81 with the smallest items).
MEM_FACTOR, MEM_HEADROOM = 1.3, 64 * 2**20


# ---------------------------------------------------------------------------------------------
# Helpers

# The memcached port's administrative and key-listing commands, each behind a cache.* key; the
# reply when the key is off (memcached 1.6.18's own for -F, -X, -W; a plain CLIENT_ERROR for
# cache_memlimit, which memcached cannot turn off). The shipped configs turn them all off.
# The listeners, by the name their containerPort and Service ports must carry: (port key, host
# key, TLS section or None). A TLS listener is a second port on its plaintext twin's host.
LISTENERS = [
    ("http", "server.port", "server.host", None),
    ("https", "server.tls.port", "server.host", "server.tls"),
    ("memcached", "cache.memcached_port", "cache.memcached_host", None),
    ("memcached-tls", "cache.memcached_tls.port", "cache.memcached_host", "cache.memcached_tls"),
    ("echo", "echo.tcp_port", "echo.tcp_host", None),
    ("echo-tls", "echo.tcp_tls.port", "echo.tcp_host", "echo.tcp_tls"),
]
# The keys of the Secret cert-manager writes for a Certificate (type kubernetes.io/tls), and the
# TLS file each must be: a certificate path pointing at tls.key is a swapped pair.
CERT_MANAGER_KEYS = {"cert_file": "tls.crt", "key_file": "tls.key", "client_ca_file": "ca.crt"}
# How long a renewed certificate may take to reach the live daemon: the kubelet's ..data swap is
# seen at once, the daemon reloads 500 ms after the directory went quiet.
ROTATION_TIMEOUT_S = 5.0

MEMCACHED_ADMIN = [
    ("cache.memcached_flush_all", b"flush_all\r\n", b"CLIENT_ERROR flush_all not allowed"),
    ("cache.memcached_key_listing", b"stats cachedump 1 1\r\n",
     b"CLIENT_ERROR stats cachedump not allowed"),
    ("cache.memcached_watch", b"watch\r\n", b"CLIENT_ERROR watch commands not allowed"),
    ("cache.memcached_memlimit_command", b"cache_memlimit 4096\r\n",
     b"CLIENT_ERROR cache_memlimit not allowed"),
    ("cache.memcached_shutdown", b"shutdown\r\n", b"ERROR: shutdown not enabled"),
]


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print(f"ok   {what}")
        else:
            self.failed += 1
            print(f"FAIL {what}" + (f": {detail}" if detail else ""))
        return bool(cond)

    def summary(self):
        print(f"check_manifest: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
SUFFIX = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(q):
    """A Kubernetes resource quantity ("250m", "2", "192Mi") as a float."""
    m = QUANTITY.match(str(q).strip())
    if not m:
        raise ValueError(f"not a quantity: {q!r}")
    return float(m.group(1)) * SUFFIX[m.group(2)]


def matches(selector, labels):
    """Does a Service selector (plain map) or a LabelSelector (matchLabels) select labels?"""
    if not selector:
        return False
    if "matchLabels" in selector or "matchExpressions" in selector:
        if selector.get("matchExpressions"):
            return False  # not used here: fail rather than half-implement them
        selector = selector.get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def env_name(path):
    """The environment variable of a config key: server.port -> SNOWFLAKED_SERVER_PORT."""
    return "SNOWFLAKED_" + path.upper().replace(".", "_")


def dotted(obj, path):
    """obj["a"]["b"] for "a.b"."""
    for part in path.split("."):
        obj = obj[part]
    return obj


GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
GO_UNIT_S = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration(text):
    """A Go duration as cert-manager takes it ("2160h", "720h0m0s") in seconds."""
    text = str(text).strip()
    parts = GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * GO_UNIT_S[u] for n, u in parts)


def dns_match(pattern, name):
    """Does a certificate's DNS name (wildcard only as the whole leftmost label, RFC 6125) cover
    name?"""
    pattern, name = pattern.lower().rstrip("."), name.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = name.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == name


def expiry_alert_days():
    """The earliest warning of deploy/monitoring's certificate-expiry alerts, in days (None
    without one): a renewal must come before it, or the alert fires before every renewal."""
    try:
        with open(RULES_FILE, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    days = [int(d) for d in re.findall(
        r"snowflaked_tls_certificate_not_after_seconds - time\(\) < (\d+) \* 86400", text)]
    return max(days) if days else None


def flatten(obj, prefix=""):
    out = {}
    for k, v in obj.items():
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, path))
        else:
            out[path] = v
    return out


def service_link_vars(svc):
    """The docker-link variables the kubelet injects for a Service (enableServiceLinks)."""
    p = svc["metadata"]["name"].upper().replace("-", "_")
    names = {f"{p}_SERVICE_HOST", f"{p}_SERVICE_PORT", f"{p}_PORT"}
    for port in svc.get("spec", {}).get("ports", []):
        proto = port.get("protocol", "TCP").upper()
        if port.get("name"):
            names.add(f"{p}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}")
        base = f"{p}_PORT_{port['port']}_{proto}"
        names |= {base, base + "_PROTO", base + "_PORT", base + "_ADDR"}
    return names


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """In the child before exec: SIGKILL it if this script dies (even by SIGKILL)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def http_get(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def resolve_env(container, pod_name, namespace, ordinal_label, configmap, secret=lambda _: None):
    """The container's environment as the kubelet builds it; sources not simulated raise.
    configmap(name) / secret(name): the object of the manifest or None."""
    env = {}
    if container.get("envFrom"):
        raise ValueError("envFrom is not simulated (and would hide which variables are set)")
    for e in container.get("env", []):
        name = e["name"]
        if "value" in e:
            env[name] = str(e["value"])
            continue
        src = e.get("valueFrom") or {}
        if "fieldRef" in src:
            fp = src["fieldRef"]["fieldPath"]
            if fp == "metadata.name":
                env[name] = pod_name
            elif fp == "metadata.namespace":
                env[name] = namespace
            elif fp == f"metadata.labels['{POD_INDEX_LABEL}']":
                env[name] = ordinal_label  # "" where the label does not exist (< 1.28)
            else:
                raise ValueError(f"{name}: fieldRef {fp} is not simulated")
        elif "resourceFieldRef" in src:
            ref = src["resourceFieldRef"]
            if ref.get("containerName", container["name"]) != container["name"]:
                raise ValueError(f"{name}: resourceFieldRef of another container")
            kind, _, res = ref["resource"].partition(".")
            have = (container.get("resources") or {}).get(kind, {}).get(res)
            if have is None:
                raise ValueError(f"{name}: {ref['resource']} is not set, so the value would be "
                                 "the node's capacity: set it")
            divisor = quantity(ref.get("divisor", "1"))
            env[name] = str(math.ceil(quantity(have) / divisor - 1e-9))  # the kubelet rounds up
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            cm = configmap(ref["name"])
            if cm is None or ref["key"] not in cm.get("data", {}):
                raise ValueError(f"{name}: ConfigMap {ref['name']} key {ref['key']} is not in "
                                 "the manifest")
            env[name] = cm["data"][ref["key"]]
        elif "secretKeyRef" in src:
            ref = src["secretKeyRef"]
            sec = secret(ref["name"])
            plain = (sec or {}).get("stringData") or {}
            coded = (sec or {}).get("data") or {}
            if ref["key"] in plain:
                env[name] = plain[ref["key"]]
            elif ref["key"] in coded:
                env[name] = base64.b64decode(coded[ref["key"]]).decode("utf-8")
            else:
                raise ValueError(f"{name}: Secret {ref['name']} key {ref['key']} is not in the "
                                 "manifest")
        else:
            raise ValueError(f"{name}: env source {sorted(src)} is not simulated")
    return env


# Request-rate autoscaling (an HPA with a Pods metric): prometheus-adapter's rules (the plain
# config.yaml, or a rendered manifest with its ConfigMap) and the metrics reference the recording
# rule's inputs must be documented in.
ADAPTER_CONFIG = os.path.join(ROOT, "deploy", "k8s", "prometheus-adapter", "config.yaml")
METRICS_DOC = os.path.join(ROOT, "docs", "metrics.md")
# The dearest server CPU per request measured (loadtest/README.md: GET /id keep-alive 16.38 us in
# the formats sitting of 2026-12-02, 15.57 us with a connection per request; 7.82 us keep-alive and
# 6.29 us per memcached command in the peers run). A pod at the HPA's request-rate target must stay
# under its CPU target even at this cost, or the CPU metric always fires first and the request
# rate scales nothing.
DEAREST_CPU_S_PER_REQUEST = 16.4e-6
# The labels prometheus-adapter maps a series to its pod by (resources.overrides).
ADAPTER_POD_RESOURCES = {"pod", "pods"}
# The target labels naming the pod's namespace and the pod that a ServiceMonitor's scrape (the
# Prometheus Operator) and the usual annotation-scrape job put on every series.
SCRAPE_POD_LABELS = ("namespace", "pod")


class SetupError(Exception):
    """The manifest lacks what the remaining checks need."""


# ---------------------------------------------------------------------------------------------
# The checks


class ManifestCheck:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.c = Checks()
        self.binary = os.path.abspath(args.binary)
        with open(args.manifest, encoding="utf-8") as f:
            self.docs = [d for d in yaml.safe_load_all(f) if d]
        self.proc = None
        self.etcd_proc = None
        self.overrides = {}
        self.etcd = None  # snowflake.etcd settings (Deployment path)
        # Why the Deployment's daemon is not started against a loopback etcd (None: it is).
        self.live_skip = "not a Deployment"
        # The loopback etcd's security (issue 24): an ssl context with the admin's client
        # certificate (https), root's token (auth enabled); EtcdTls / EtcdAuth of etcdcluster.py.
        self.etcd_ctx = self.etcd_token = self.etcd_tls = self.etcd_auth = None
        # The live daemon's environment and flags beyond the pod's: the credential files mapped
        # from the Secret mounts to the temporary Secret volumes.
        self.live_env, self.live_args = {}, []

    def kind(self, k):
        return [d for d in self.docs if d.get("kind") == k]

    def configmap(self, name):
        return next((cm for cm in self.kind("ConfigMap") if cm["metadata"]["name"] == name), None)

    def secret(self, name):
        return next((s for s in self.kind("Secret") if s["metadata"]["name"] == name), None)

    def check_config(self, env, config=None):
        """--check-config in a clean environment (nothing inherited but PATH)."""
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
        p = subprocess.run([self.binary, "-c", config or self.cfg_file, "--check-config"],
                           env=full, capture_output=True, text=True, timeout=30)
        out = json.loads(p.stdout) if p.returncode == 0 else None
        return p.returncode, out, p.stderr.strip()

    def pod_env(self, ordinal, with_label=True):
        if self.is_deployment:  # a Deployment's pods: <name>-<template hash>-<random>, no index
            env = resolve_env(self.ctr, self.pod_name(ordinal),
                              self.namespace, "", self.configmap, self.secret)
            return {**env, **self.overrides}
        env = resolve_env(self.ctr, f"{self.sts_name}-{ordinal}", self.namespace,
                          str(ordinal) if with_label else "", self.configmap, self.secret)
        return {**env, **self.overrides}

    def pod_name(self, ordinal):
        return f"{self.sts_name}-{ordinal}" if not self.is_deployment else \
            f"{self.sts_name}-5d8f7c9b4d-x{ordinal:04d}"

    def target(self, port_ref):
        """A Service targetPort or probe port (name or number) as a number."""
        return self.cports.get(port_ref) if isinstance(port_ref, str) else port_ref

    # ---- the objects ----------------------------------------------------------------------

    def find_objects(self):
        c = self.c
        stss, deps = self.kind("StatefulSet"), self.kind("Deployment")
        if not c.ok(len(stss) + len(deps) == 1, "exactly one StatefulSet or Deployment",
                    f"found {len(stss)} StatefulSets, {len(deps)} Deployments"):
            raise SetupError
        self.is_deployment = bool(deps)
        self.workload = "Deployment" if deps else "StatefulSet"
        self.sts = (deps or stss)[0]
        self.sts_name = self.sts["metadata"]["name"]
        self.namespace = self.sts["metadata"].get("namespace", "default")
        self.spec = self.sts["spec"]
        self.pod = self.spec["template"]
        self.pod_spec = self.pod["spec"]
        self.pod_labels = self.pod["metadata"].get("labels", {})
        ctrs = [x for x in self.pod_spec["containers"] if x["name"] == CONTAINER]
        if not c.ok(len(ctrs) == 1, f"a container named {CONTAINER}"):
            raise SetupError
        self.ctr = ctrs[0]
        self.replicas = self.spec.get("replicas", 1)
        self.start = (self.spec.get("ordinals") or {}).get("start", 0)
        self.cports = {p.get("name"): p["containerPort"] for p in self.ctr.get("ports", [])}
        self.volumes = {v["name"]: v for v in self.pod_spec.get("volumes", [])}
        self.claims = {t["metadata"]["name"] for t in self.spec.get("volumeClaimTemplates", [])}
        self.services = self.kind("Service")
        self.hpas = [h for h in self.kind("HorizontalPodAutoscaler")
                     if h["spec"]["scaleTargetRef"].get("name") == self.sts_name]
        self.certificates = [d for d in self.kind("Certificate")
                             if d.get("apiVersion", "").startswith("cert-manager.io/")]

    def find_config(self):
        """-c PATH must be a key of a ConfigMap of the manifest, mounted at PATH's directory."""
        c = self.c
        argv = (self.ctr.get("command") or []) + (self.ctr.get("args") or [])
        path = None
        for i, a in enumerate(argv):
            if a in ("-c", "--config") and i + 1 < len(argv):
                path = argv[i + 1]
            elif a.startswith("--config="):
                path = a.split("=", 1)[1]
        if not c.ok(path is not None, "the container passes -c CONFIG", f"args {argv}"):
            raise SetupError
        text = None
        for vm in self.ctr.get("volumeMounts", []):
            mp = vm["mountPath"].rstrip("/")
            vol = self.volumes.get(vm["name"], {})
            if "configMap" not in vol or not path.startswith(mp + "/") or "subPath" in vm:
                continue
            key = path[len(mp) + 1:]
            items = {it["path"]: it["key"] for it in vol["configMap"].get("items", [])}
            key = items.get(key, key) if items else key
            name = vol["configMap"]["name"]
            cm = self.configmap(name)
            if c.ok(cm is not None, f"ConfigMap {name} is in the manifest"):
                text = cm.get("data", {}).get(key)
                c.ok(text is not None, f"{path} is key {key} of that ConfigMap")
        if not c.ok(text is not None, f"{path} comes from a mounted ConfigMap"):
            raise SetupError
        self.cfg_file = os.path.join(self.tmp, "config.json")
        with open(self.cfg_file, "w", encoding="utf-8") as f:
            f.write(text)

    # ---- 1. --check-config for every ordinal ----------------------------------------------

    def check_ordinals(self):
        c = self.c
        try:
            env0 = self.pod_env(self.start)
        except ValueError as e:
            c.ok(False, "the container environment can be simulated", str(e))
            raise SetupError from e
        self.env0 = env0
        refuse = self.args.expect_refusal
        if refuse:
            rc, _, err = self.check_config(env0)
            c.ok(rc == 2 and refuse in err, f"refused as is, naming {refuse}", f"exit {rc}: {err}")
            print(f"     ({err})")
            if refuse in env0:
                self.overrides[refuse] = "0"
                print(f"     continuing with {refuse}=0")
        first = f"{self.sts_name}-{self.start}"
        rc, eff, err = self.check_config(self.pod_env(self.start))
        if not c.ok(rc == 0, f"--check-config accepts the ConfigMap's config.json (pod {first})",
                    f"exit {rc}: {err}"):
            raise SetupError
        self.eff = eff
        sf = eff["snowflake"]
        last = self.start + self.replicas - 1
        capacity = 1 << sf["worker_bits"]
        print(f"     layout {sf['timestamp_bits']}/{sf['datacenter_bits']}/{sf['worker_bits']}/"
              f"{sf['sequence_bits']}, datacenter {sf['datacenter_id']}, {self.replicas} replicas "
              f"from ordinal {self.start}, threads {eff['resolved']['threads']}")
        c.ok(sf["worker_id"] in ("ordinal", "env:POD_INDEX"),
             "snowflake.worker_id follows the pod ordinal", f"worker_id {sf['worker_id']!r}")
        c.ok(last < capacity, f"ordinals {self.start}..{last} fit worker_bits={sf['worker_bits']}"
             f" (at most {capacity} replicas)", f"replicas {self.replicas}")
        c.ok(not sf["per_thread_worker_ids"],
             "per_thread_worker_ids is off (ordinals are worker ids, one per pod)")
        bad = []
        for ordinal in range(self.start, last + 1):
            for with_label in (True, False):
                rc, out, err = self.check_config(self.pod_env(ordinal, with_label))
                got = out["resolved"]["worker_id"] if out else None
                dc = out["snowflake"]["datacenter_id"] if out else None
                if rc != 0 or got != ordinal or dc != sf["datacenter_id"]:
                    via = "POD_INDEX" if with_label else "POD_NAME"
                    bad.append(f"{self.sts_name}-{ordinal} ({via}): exit {rc}, worker {got}, "
                               f"datacenter {dc} {err}")
        c.ok(not bad, f"every pod {self.sts_name}-{self.start}..{last} gets worker id = its "
             "ordinal, via POD_INDEX and via POD_NAME alone", "; ".join(bad))
        rc, _, err = self.check_config(self.pod_env(capacity))
        c.ok(rc == 2 and "worker_bits" in err,
             f"pod {self.sts_name}-{capacity} (beyond worker_bits) is refused with a clear line",
             f"exit {rc}: {err}")
        print(f"     ({err})")

    # ---- 1b. a Deployment: worker ids from etcd, the autoscaler within the slots ----------

    def etcd_support(self):
        """Whether the daemon's source (this repository) has the etcd backend wired in
        ("full", issue 14 step 6) or only the config keys ("config", step 5: such a daemon
        accepts worker_id "etcd" but cannot claim a slot). Once the source has the backend, the
        binary must use it: the live check then fails a daemon that does not."""
        if self.args.etcd_support != "auto":
            return self.args.etcd_support
        app = os.path.join(REPO, "service", "src", "app")
        for name in sorted(os.listdir(app)) if os.path.isdir(app) else []:
            if name.endswith(".c"):
                with open(os.path.join(app, name), encoding="utf-8", errors="replace") as f:
                    if "CFG_WORKER_ETCD" in f.read():
                        return "full"
        backend = os.path.join(REPO, "service", "src", "cluster", "identity_etcd.c")
        return "full" if os.path.exists(backend) else "config"

    def check_etcd_identity(self):
        c = self.c
        try:
            env0 = self.pod_env(0)
        except ValueError as e:
            c.ok(False, "the container environment can be simulated", str(e))
            raise SetupError from e
        self.env0 = env0
        self.live_skip = None if self.etcd_support() == "full" else (
            "this daemon has the snowflake.etcd keys but no etcd backend (--etcd-support config, "
            "or a source without it)")
        # The etcd client's credential settings: as the pod sets them (checked by
        # check_etcd_credentials); left out of --check-config while the daemon lacks them.
        self.cred_env = dict(env0)
        known = self.etcd_credentials_support()
        cfg_env = dict(env0)
        left_out = [env_name(k) for k in list(ETCD_CRED_FILES) + [ETCD_AUTH_USER]
                    if env_name(k) in env0 and k.split(".")[2] not in known]
        for name in left_out:
            del cfg_env[name]
        ep = env_name("snowflake.etcd.endpoints")
        if left_out and "tls" not in known and ep in cfg_env:
            cfg_env[ep] = cfg_env[ep].replace("https://", "http://")
        if left_out:
            print(f"SKIP {', '.join(left_out)} left out of --check-config (and https:// read as "
                  "http://): this daemon has no snowflake.etcd tls/auth client yet (issue 24); "
                  "the manifest's side is checked below")
        self.env0 = env0 = cfg_env
        rc, eff, err = self.check_config(env0)
        if not c.ok(rc == 0, f"--check-config accepts the ConfigMap's config.json (pod "
                    f"{self.pod_name(0)}, environment as the kubelet sets it)",
                    f"exit {rc}: {err}"):
            raise SetupError
        worker, etcd = eff["snowflake"]["worker_id"], dict(eff["snowflake"].get("etcd") or {})
        self.eff = eff
        sf = eff["snowflake"]
        if not c.ok(worker == "etcd" and etcd, "snowflake.worker_id is \"etcd\" (a Deployment's "
                    "pods have no identity of their own)", f"worker_id {worker!r}"):
            raise SetupError
        capacity = 1 << sf["worker_bits"]
        wmin = etcd["worker_min"]
        wmax = etcd["worker_max"]  # --check-config prints "max" resolved
        self.etcd = etcd
        threads = eff["resolved"]["threads"]
        per_pod = threads if sf["per_thread_worker_ids"] else 1
        slots = wmax - wmin + 1
        print(f"     layout {sf['timestamp_bits']}/{sf['datacenter_bits']}/{sf['worker_bits']}/"
              f"{sf['sequence_bits']}, datacenter {sf['datacenter_id']}, workers {wmin}..{wmax} "
              f"under {etcd['prefix']} ({slots} slots), threads {threads}, {per_pod} slot(s) "
              f"per pod")
        c.ok(0 <= wmin <= wmax < capacity,
             f"worker_min..worker_max {wmin}..{wmax} within worker_bits={sf['worker_bits']}")
        # Where etcd is: set, plain http:// URLs (no TLS in the client yet).
        endpoints = etcd.get("endpoints") or ""
        urls = [u.strip() for u in endpoints.split(",") if u.strip()]
        c.ok(urls and all(re.match(r"^https?://[^/\s:]+:[0-9]+/?$", u) for u in urls),
             f"snowflake.etcd.endpoints are http(s)://host:port URLs ({endpoints})")
        source = next((e.get("valueFrom") for e in self.ctr.get("env", [])
                       if e["name"] == env_name("snowflake.etcd.endpoints")), None)
        c.ok(source and ("configMapKeyRef" in source or "secretKeyRef" in source),
             "the endpoints come from a ConfigMap or Secret key (one place per cluster)",
             f"{env_name('snowflake.etcd.endpoints')}: {source}")
        # Timing: renewal every ttl/4; a call must end before the next renewal is due, and the
        # fence margin must leave room for renewals (the daemon enforces the same bounds).
        ttl_ms = etcd["ttl_s"] * 1000
        margin = etcd["fence_margin_ms"]
        c.ok(2 <= etcd["ttl_s"] <= 300 and ttl_ms * 0.02 + 100 <= margin <= ttl_ms / 2,
             f"ttl_s {etcd['ttl_s']}, fence_margin_ms {margin}: 2% of ttl + 100 <= margin <= "
             "ttl/2")
        c.ok(etcd["request_timeout_ms"] <= ttl_ms / 4,
             f"request_timeout_ms {etcd['request_timeout_ms']} <= ttl/4 (one renewal ends before "
             "the next is due)")
        # The replica ceiling: every pod holds per_pod slots, a rolling update's surge pods
        # hold theirs while the old pods still run.
        strategy = self.spec.get("strategy") or {}
        surge_spec = 0 if strategy.get("type") == "Recreate" else \
            (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")

        def surge(n):
            if isinstance(surge_spec, str) and surge_spec.endswith("%"):
                return math.ceil(n * int(surge_spec[:-1]) / 100)  # the controller rounds up
            return int(surge_spec)

        def fits(n):
            return (n + surge(n)) * per_pod <= slots
        cap = max((n for n in range(0, slots + 1) if fits(n)), default=0)
        hpa = None
        if self.hpas:
            c.ok(len(self.hpas) == 1, f"one HorizontalPodAutoscaler scales {self.sts_name}",
                 f"found {len(self.hpas)}")
            hpa = self.hpas[0]
            ref = hpa["spec"]["scaleTargetRef"]
            c.ok(hpa["apiVersion"] == "autoscaling/v2" and ref.get("kind") == "Deployment" and
                 ref.get("apiVersion") == "apps/v1",
                 f"HPA {hpa['metadata']['name']} (autoscaling/v2) targets Deployment "
                 f"{self.sts_name}", f"{hpa['apiVersion']} -> {ref}")
            c.ok("replicas" not in self.spec, "the Deployment leaves replicas to the HPA (no "
                 "spec.replicas for kubectl apply to reset)",
                 f"replicas {self.spec.get('replicas')}")
            lo = hpa["spec"].get("minReplicas", 1)
            top = hpa["spec"]["maxReplicas"]
            c.ok(2 <= lo <= top, f"HPA minReplicas {lo} >= 2 (one pod restarting or evicted "
                 f"leaves one serving) and <= maxReplicas {top}")
            requests = (self.ctr.get("resources") or {}).get("requests") or {}
            for m in hpa["spec"].get("metrics", []):
                res = (m.get("resource") or m.get("containerResource") or {})
                if res.get("target", {}).get("type") == "Utilization":
                    c.ok(res["name"] in requests, f"HPA {res['name']} utilization: the container "
                         f"requests {res['name']} (utilization is a percentage of it)")
            what = f"HPA maxReplicas {top}"
        else:
            top = self.spec.get("replicas", 1)
            what = f"replicas {top}"
        self.replicas = top
        c.ok(fits(top), f"{what} + maxSurge {surge(top)}, x {per_pod} slot(s) per pod, fit "
             f"the {slots} worker slots {wmin}..{wmax} (HPA: at most {cap} replicas)",
             f"{(top + surge(top)) * per_pod} slots needed: exceeds the {slots} worker slots "
             f"{wmin}..{wmax} of datacenter {sf['datacenter_id']}")
        # A pod that connects to etcd at start does not listen yet: the startupProbe must give
        # it that long before the kubelet restarts it.
        sp = self.ctr.get("startupProbe") or {}
        budget = sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3)
        need = etcd["start_timeout_ms"] / 1000 + etcd["ttl_s"]
        c.ok(budget >= need, f"startupProbe allows {budget} s >= start_timeout "
             f"{need - etcd['ttl_s']:g} s + ttl {etcd['ttl_s']} s (connecting to etcd, waiting "
             "out an expired holder)" + (", wait_for_slot true" if etcd["wait_for_slot"] else ""))
        c.ok(self.pod_spec.get("restartPolicy", "Always") == "Always",
             "restartPolicy Always: a pod whose slot was taken while it was cut off exits 75 and "
             "is restarted")

    # ---- 2. environment variables ---------------------------------------------------------

    # ---- 1c. a secured etcd: the credential Secrets (issue 24) -------------------------------

    def etcd_credentials_support(self):
        """The sections of the etcd client this daemon's source knows: {"tls", "auth"} once
        issue 24's keys are in the schema (service/src/config/config.c)."""
        if self.args.etcd_credentials != "auto":
            return {"none": set(), "full": {"tls", "auth"}}[self.args.etcd_credentials]
        try:
            with open(os.path.join(REPO, "service", "src", "config", "config.c")) as f:
                schema = f.read()
        except OSError:
            return set()
        return {k.split(".")[2] for k in ETCD_CRED_FILES if f'"{k}"' in schema}

    def etcd_setting(self, key):
        """The value of an etcd client key for the pod: its env var, else the effective config."""
        v = self.cred_env.get(env_name(key))
        if v is None:
            try:
                v = dotted(self.eff, key)
            except (KeyError, TypeError):
                v = None
        return v or None

    def check_etcd_credentials(self):
        c = self.c
        files = {k: self.etcd_setting(k) for k in ETCD_CRED_FILES}
        user = self.etcd_setting(ETCD_AUTH_USER)
        ca, cert, key, pw = (files[k] for k in ETCD_CRED_FILES)
        endpoints = self.cred_env.get(env_name("snowflake.etcd.endpoints")) or \
            (self.etcd or {}).get("endpoints") or ""
        urls = [u.strip() for u in endpoints.split(",") if u.strip()]
        https = [u for u in urls if u.startswith("https://")]
        self.etcd_secured = bool(ca or cert or key or pw or user)
        if ca or https:
            c.ok(ca and len(https) == len(urls), "etcd over TLS: a CA file (snowflake.etcd.tls."
                 f"ca_file {ca}) and https:// endpoints only ({endpoints})",
                 "a CA mounted with http:// endpoints sends everything in clear (the CA is "
                 "never used); https:// endpoints need etcd's CA" if ca else
                 "https:// endpoints without snowflake.etcd.tls.ca_file: etcd's own CA is not in "
                 "the image's trust store (components/etcd-tls)")
        if cert or key:
            c.ok(cert and key and ca, f"the etcd client certificate comes with its key and a CA "
                 f"(cert_file {cert}, key_file {key}, ca_file {ca})")
        if pw or user:
            c.ok(pw and user, f"an etcd user with a password file (username {user!r}, "
                 f"password_file {pw})")
        sources = {}
        for k, path in files.items():
            if not path:
                continue
            src = self.file_source(path)
            if not c.ok(isinstance(src, tuple), f"{k} {path} is a file of a Secret volume",
                        src if isinstance(src, str) else ""):
                continue
            name, skey, vm, mode = src
            sources[k] = (name, vm["mountPath"])
            c.ok(vm.get("readOnly"), f"{k}: its mount {vm['mountPath']} is readOnly")
            want = ETCD_CRED_FILES[k]
            if want:
                c.ok(skey == want, f"{k} reads {want} of Secret {name}", f"it reads {skey}")
            c.ok(self.readable(mode), f"{k}: mode {mode:04o} lets the pod's user read it",
                 "root-owned file, group fsGroup: give the group read (0440)")
            keys = self.secret_keys(name)
            documented = (self.pod["metadata"].get("annotations") or {}).get(
                USER_PROVIDED_SECRET + name)
            if keys:
                c.ok(skey in keys, f"{k}: Secret {name} of the manifest has key {skey}",
                     f"it has {sorted(keys)}")
            else:
                c.ok(documented is not None, f"{k}: Secret {name} is user-provided, documented by "
                     f"the pod annotation {USER_PROVIDED_SECRET}{name} ({documented})",
                     f"no Secret or Certificate of the manifest makes {name} and no annotation "
                     f"{USER_PROVIDED_SECRET}{name} says the user does: the pods would wait in "
                     "ContainerCreating")
        tls_keys = [k for k in ("snowflake.etcd.tls.cert_file", "snowflake.etcd.tls.key_file")
                    if k in sources]
        if len(tls_keys) == 2:
            c.ok(sources[tls_keys[0]] == sources[tls_keys[1]], "the etcd client certificate and "
                 "key come from one Secret directory (one ..data swap renews both)",
                 f"{sources[tls_keys[0]]} vs {sources[tls_keys[1]]}: a renewal could pair a new "
                 "certificate with the old key")
        # RBAC with a client certificate: etcd 3.4's gateway answers 400 to a certificate
        # with a CN once auth is on (README.md), so a Certificate of the manifest must set none.
        if pw and "snowflake.etcd.tls.cert_file" in sources:
            sec = sources["snowflake.etcd.tls.cert_file"][0]
            for cert in self.certificates:
                if cert["spec"].get("secretName") == sec:
                    c.ok(not cert["spec"].get("commonName"), f"Certificate "
                         f"{cert['metadata']['name']} (etcd client, RBAC on) has no commonName",
                         "etcd 3.4's gateway refuses a client certificate with a CN when auth "
                         "is enabled (400): every renewal would fence the pods")
        # No password anywhere but a Secret file.
        pw_env = sorted(e["name"] for e in self.ctr.get("env", [])
                        if "PASSWORD" in e["name"].upper() and "value" in e
                        and not e["name"].upper().endswith("_FILE"))
        pw_env += sorted(e["name"] for e in self.ctr.get("env", [])
                         if "PASSWORD" in e["name"].upper() and not e["name"].upper().endswith(
                             "_FILE") and "configMapKeyRef" in (e.get("valueFrom") or {}))
        c.ok(not pw_env, "no password in an env value or ConfigMap reference",
             f"{pw_env}: visible to anyone who can read the Deployment or ConfigMap; mount a "
             "Secret and set snowflake.etcd.auth.password_file")
        in_cm = []
        for cm in self.kind("ConfigMap"):
            for k, v in (cm.get("data") or {}).items():
                if "password" in k.lower() or (k.endswith(".json") and
                                               re.search(r'"password"\s*:', v or "")):
                    in_cm.append(f"{cm['metadata']['name']}/{k}")
        c.ok(not in_cm, "no password in a ConfigMap", f"{in_cm}: ConfigMaps are not secret")
        args = " ".join(self.ctr.get("args", []) + self.ctr.get("command", []))
        c.ok("password=" not in args.lower(), "no password in the container's args")
        # The live daemon reads these files from temporary Secret volumes (check_live_etcd).
        self.cred_files, self.cred_sources, self.etcd_user = files, {}, user
        for k, path in files.items():
            src = self.file_source(path) if path else None
            if isinstance(src, tuple):
                self.cred_sources[k] = src
        need = ({"tls"} if ca or cert or key else set()) | ({"auth"} if pw or user else set())
        missing = need - self.etcd_credentials_support()
        if self.live_skip is None and missing:
            self.live_skip = (f"this daemon has no snowflake.etcd.{'/'.join(sorted(missing))} "
                              "client (issue 24): it cannot use the manifest's credentials")
        elif self.live_skip is None and len(self.cred_sources) < sum(map(bool, files.values())):
            self.live_skip = "a credential file is not in a Secret volume (FAIL above)"

    def check_env(self):
        c, eff, env0 = self.c, self.eff, self.env0
        keys = flatten({k: v for k, v in eff.items() if k != "resolved"})
        allowed = {env_name(k) for k in keys} | {"POD_INDEX", "POD_NAME"}
        worker = eff["snowflake"]["worker_id"]
        if isinstance(worker, str) and worker.startswith("env:"):
            allowed.add(worker[4:])
        unknown = sorted(set(env0) - allowed)
        c.ok(not unknown, f"every env var is read by the binary ({', '.join(sorted(env0))})",
             f"not read (silently ignored): {unknown}")
        threads = env0.get(env_name("server.threads"))
        if threads is not None:
            c.ok(eff["resolved"]["threads"] == int(threads),
                 f"server.threads = {threads} from the CPU limit")
        links = set()
        for svc in self.services:
            if svc["metadata"].get("namespace", "default") == self.namespace:
                links |= service_link_vars(svc)
        clash = sorted(links & allowed)
        if self.pod_spec.get("enableServiceLinks", True):
            c.ok(not clash, "no Service link variable collides with a SNOWFLAKED_ key",
                 f"{clash} (set enableServiceLinks: false)")
        else:
            c.ok(True, "enableServiceLinks is false (no docker-link SNOWFLAKED_* variables)")

    # ---- 3. ports, selectors, probes, scraping, storage, shutdown, memory -------------------

    def check_ports(self):
        c, eff = self.c, self.eff
        self.listeners, self.tls, hosts = {}, {}, {}
        for name, port_key, host_key, tls_key in LISTENERS:
            port = dotted(eff, port_key)
            if not port or (name.startswith("memcached") and not eff["cache"]["enabled"]):
                continue
            self.listeners[name] = port
            hosts[name] = dotted(eff, host_key)
            if tls_key:
                self.tls[name] = (tls_key, dotted(eff, tls_key))
        for name in self.listeners:
            c.ok(hosts[name] in ("0.0.0.0", "::"),
                 f"{name} listener binds all addresses ({hosts[name]}), reachable via the pod IP")
        c.ok(self.cports == self.listeners,
             f"containerPorts {self.cports} = resolved listener ports {self.listeners}")
        if not self.is_deployment:  # a Deployment's pods have no stable names to publish
            svc_name = self.spec.get("serviceName")
            c.ok(any(s["metadata"]["name"] == svc_name and s["spec"].get("clusterIP") == "None"
                     for s in self.services),
                 f"serviceName {svc_name} is a headless Service of the manifest")
        for svc in self.services:
            name = svc["metadata"]["name"]
            c.ok(matches(svc["spec"].get("selector"), self.pod_labels),
                 f"Service {name} selects the pods")
            for p in svc["spec"]["ports"]:
                t = self.target(p.get("targetPort", p["port"]))
                c.ok(t in self.listeners.values() and t == self.listeners.get(p.get("name"), t),
                     f"Service {name} port {p.get('name')} {p['port']} -> targetPort "
                     f"{p.get('targetPort')} = {t}, a listener")
        c.ok(matches(self.spec["selector"], self.pod_labels),
             f"{self.workload} selector selects its pods")
        for pdb in self.kind("PodDisruptionBudget"):
            c.ok(matches(pdb["spec"]["selector"], self.pod_labels),
                 f"PodDisruptionBudget {pdb['metadata']['name']} selects the pods")

    def http_listener(self, port_ref):
        """The HTTP listener ("http" or "https") a probe or scrape port (name or number) is."""
        port = self.target(port_ref)
        return next((n for n in ("http", "https") if self.listeners.get(n) == port), None)

    def check_scheme(self, what, listener, scheme):
        """An HTTP probe or scrape must speak the scheme of its port: HTTP on a TLS port gets a
        TLS alert back, HTTPS on a plaintext one a handshake failure: forever failing probes."""
        want = "HTTPS" if listener in self.tls else "HTTP"
        self.c.ok(str(scheme or "HTTP").upper() == want,
                  f"{what}: scheme {want} on the {listener} port",
                  f"scheme {scheme or 'HTTP (the default)'} on the "
                  f"{'TLS' if want == 'HTTPS' else 'plaintext'} port {self.listeners[listener]}")

    def check_probes_and_scraping(self):
        c = self.c
        self.probes = {}
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            pr = self.ctr.get(kind)
            if not c.ok(pr and "httpGet" in pr, f"{kind} is an HTTP GET"):
                continue
            g = pr["httpGet"]
            lst = self.http_listener(g["port"])
            if not c.ok(lst, f"{kind} {g['path']} on port {g['port']} = an HTTP listener "
                        f"({self.listeners.get('http')} or {self.listeners.get('https')})"):
                continue
            self.check_scheme(kind, lst, g.get("scheme"))
            if lst in self.tls:
                verify = self.tls[lst][1]["verify_client"]
                c.ok(verify != "required", f"{kind}: {self.tls[lst][0]}.verify_client "
                     f"{verify} admits the kubelet", "the kubelet's HTTPS probe sends no client "
                     "certificate: use optional (a certificate sent must verify)")
            self.probes[kind] = (g["path"], lst)
        c.ok((self.probes.get("readinessProbe") or ("",))[0] == "/readyz" and
             (self.probes.get("livenessProbe") or ("",))[0] == "/healthz",
             "readiness uses /readyz, liveness /healthz")
        self.scrapes = set()
        ann = self.pod["metadata"].get("annotations", {})
        if ann.get("prometheus.io/scrape") == "true":
            port = ann.get("prometheus.io/port")
            lst = self.http_listener(int(port) if str(port).isdigit() else port)
            if c.ok(lst, f"prometheus.io/port {port} = an HTTP listener"):
                self.check_scheme("prometheus.io/scheme", lst, ann.get("prometheus.io/scheme"))
                self.scrapes.add((ann.get("prometheus.io/path", "/metrics"), lst))
        for sm in self.kind("ServiceMonitor"):
            chosen = [s for s in self.services
                      if matches(sm["spec"]["selector"], s["metadata"].get("labels", {}))]
            c.ok(len(chosen) == 1, f"ServiceMonitor {sm['metadata']['name']} selects one Service",
                 f"selects {[s['metadata']['name'] for s in chosen]}")
            by_name = {p.get("name"): p for s in chosen for p in s["spec"]["ports"]}
            for ep in sm["spec"]["endpoints"]:
                sp = by_name.get(ep.get("port"))
                lst = self.http_listener(sp.get("targetPort", sp["port"])) if sp else None
                if not c.ok(lst, f"ServiceMonitor endpoint port {ep.get('port')} is a port of the "
                            "Service that leads to an HTTP listener"):
                    continue
                self.check_scheme(f"ServiceMonitor endpoint {ep.get('port')}", lst,
                                  ep.get("scheme"))
                if lst in self.tls:
                    self.check_scrape_tls(ep.get("tlsConfig") or {})
                self.scrapes.add((ep.get("path", "/metrics"), lst))
        c.ok(bool(self.scrapes), "Prometheus scraping is configured",
             "no prometheus.io annotations and no ServiceMonitor")

    def check_scrape_tls(self, tc):
        """A ServiceMonitor scraping HTTPS verifies the pods' certificate: a CA from a Secret the
        manifest provides, and (Prometheus connects to pod IPs) a serverName the certificate
        has."""
        c = self.c
        if tc.get("insecureSkipVerify"):
            print("     note: the ServiceMonitor scrapes HTTPS without verifying the certificate")
            return
        ref = (tc.get("ca") or {}).get("secret") or {}
        keys = self.secret_keys(ref.get("name"))
        c.ok(ref.get("key") in keys, f"ServiceMonitor tlsConfig.ca is key {ref.get('key')} of "
             f"Secret {ref.get('name')}, which the manifest provides",
             f"the manifest's Secret {ref.get('name')} has keys {sorted(keys)}")
        names = self.certificate_names(self.tls["https"][1])
        server = tc.get("serverName")
        c.ok(server and any(dns_match(n, server) for n in names),
             f"ServiceMonitor tlsConfig.serverName {server} is a name of the pods' certificate "
             "(Prometheus connects to pod IPs)", f"certificate names {names}")

    def check_network_policies(self):
        c = self.c
        probe_ports = {self.listeners[lst] for _, lst in self.probes.values()}
        selecting = []
        for np in self.kind("NetworkPolicy"):
            name = np["metadata"]["name"]
            if not matches(np["spec"]["podSelector"], self.pod_labels):
                continue
            selecting.append(name)
            rules = np["spec"].get("ingress", [])
            ports = [self.target(p.get("port")) for r in rules for p in r.get("ports", [])]
            c.ok(all(p in self.listeners.values() for p in ports),
                 f"NetworkPolicy {name}: its ports {ports} are listeners")
            open_ports = {self.target(p.get("port")) for r in rules if not r.get("from")
                          for p in r.get("ports", [])}
            c.ok(probe_ports <= open_ports, f"NetworkPolicy {name} lets everyone (kubelet probes, "
                 f"Prometheus) reach the probes' port {sorted(probe_ports)}",
                 f"open to all: {sorted(open_ports)}")
            if "https" in self.tls and probe_ports == {self.listeners["https"]}:
                c.ok(self.listeners["http"] not in ports,
                     f"NetworkPolicy {name} keeps the plaintext HTTP port "
                     f"{self.listeners['http']} closed (TLS on, probes on HTTPS)",
                     "it admits the plaintext port: bearer tokens and cache data in clear")
        if "https" in self.tls and not selecting:
            print(f"     note: no NetworkPolicy selects the pods: the plaintext HTTP port "
                  f"{self.listeners['http']} (always open beside HTTPS) is reachable from the pod "
                  "network (README.md, TLS)")

    # ---- 3b. TLS: the certificate's Secret, its mount, the Certificate --------------------

    def secret_keys(self, name):
        """The keys the manifest's Secret `name` will have: a Secret of the manifest, or the
        Secret a cert-manager Certificate of the manifest writes (tls.crt, tls.key, and ca.crt,
        which cert-manager adds where the issuer knows its CA). Empty if neither."""
        if name is None:
            return set()
        sec = self.secret(name)
        if sec is not None:
            return set((sec.get("data") or {})) | set((sec.get("stringData") or {}))
        if any(cert["spec"].get("secretName") == name for cert in self.certificates):
            return set(CERT_MANAGER_KEYS.values())
        return set()

    def certificate_of(self, section):
        """The Certificate whose Secret holds `section`'s cert_file (None if none)."""
        src = self.tls_sources.get(section["cert_file"])
        if not src:
            return None
        return next((cert for cert in self.certificates
                     if cert["spec"].get("secretName") == src[0]), None)

    def certificate_names(self, section):
        cert = self.certificate_of(section)
        return list((cert or {}).get("spec", {}).get("dnsNames") or [])

    def file_source(self, path):
        """(Secret name, key, volumeMount, volume) of a file the container opens, or a reason
        it is none."""
        mounts = [vm for vm in self.ctr.get("volumeMounts", [])
                  if path == vm["mountPath"] or path.startswith(vm["mountPath"].rstrip("/") + "/")]
        if not mounts:
            return f"{path} is on no volume mount (the image has no certificate)"
        vm = max(mounts, key=lambda m: len(m["mountPath"]))
        vol = self.volumes.get(vm["name"], {})
        if vm.get("subPath") or vm.get("subPathExpr"):
            return (f"{path} comes from a subPath mount of volume {vm['name']}: a subPath mount "
                    "is bound to the file it found at start and never sees the kubelet's ..data "
                    "swap, so a renewed certificate would never reach the pod; mount the Secret "
                    "as a directory")
        rel = path[len(vm["mountPath"].rstrip("/")) + 1:]
        secret = vol.get("secret")
        if secret is None:
            sources = [s["secret"] for s in (vol.get("projected") or {}).get("sources", [])
                       if "secret" in s]
            hits = [s for s in sources if rel in {it["path"] for it in s.get("items", [])} or
                    (not s.get("items") and rel in self.secret_keys(s.get("name")))]
            if not hits:
                return f"{path} is in volume {vm['name']}, which is not a Secret volume"
            secret = {"secretName": hits[0].get("name"), "items": hits[0].get("items"),
                      "defaultMode": (vol.get("projected") or {}).get("defaultMode")}
        items = {it["path"]: it for it in secret.get("items") or []}
        if items and rel not in items:  # the kubelet writes only the listed items
            return (f"{path}: volume {vm['name']} lists items of Secret "
                    f"{secret.get('secretName')} and {rel} is not one of them ({sorted(items)})")
        key = items[rel]["key"] if rel in items else rel
        mode = (items.get(rel) or {}).get("mode", secret.get("defaultMode"))
        return secret.get("secretName"), key, vm, 0o644 if mode is None else mode

    def readable(self, mode):
        """Can the container's user read a Secret file of this mode? The kubelet makes the
        files root's, with the pod's fsGroup as their group (the process is in that group)."""
        pod_sc = self.pod_spec.get("securityContext") or {}
        ctr_sc = self.ctr.get("securityContext") or {}
        user = ctr_sc.get("runAsUser", pod_sc.get("runAsUser"))
        group = ctr_sc.get("runAsGroup", pod_sc.get("runAsGroup"))
        fs_group = pod_sc.get("fsGroup")
        if user == 0:
            return True
        if fs_group is not None or group == 0:
            return bool(mode & 0o040)
        return bool(mode & 0o004)

    def check_tls(self):
        c = self.c
        self.tls_sources = {}
        if not self.tls:
            return
        for lst, (key, sec) in sorted(self.tls.items()):
            files = {k: sec[k] for k in CERT_MANAGER_KEYS if sec[k]}
            for role, path in files.items():
                src = self.file_source(path)
                if not c.ok(isinstance(src, tuple), f"{key}.{role} {path} is in a Secret volume",
                            src if isinstance(src, str) else ""):
                    continue
                name, skey, vm, mode = src
                self.tls_sources[path] = (name, skey, vm)
                c.ok(vm.get("readOnly"), f"{key}.{role}: its mount {vm['mountPath']} is readOnly")
                keys = self.secret_keys(name)
                c.ok(skey in keys, f"{key}.{role} {path} is key {skey} of Secret {name}, which a "
                     "Certificate (spec.secretName) or Secret of the manifest provides",
                     f"Secret {name} has keys {sorted(keys)} in the manifest"
                     if keys else f"no Certificate has secretName {name} and no Secret of the "
                     f"manifest is named so (Certificates: "
                     f"{[x['spec'].get('secretName') for x in self.certificates]})")
                want = CERT_MANAGER_KEYS[role]
                c.ok(skey == want, f"{key}.{role} reads {want}", f"it reads {skey}")
                c.ok(self.readable(mode), f"{key}.{role}: mode {mode:04o} lets the pod's user "
                     "read it", "root-owned file, group fsGroup: give the group read (0440)")
            c.ok(sec["watch_files"], f"{key}.watch_files is on (a renewed Secret reaches the "
                 "daemon without a restart)", "off: nothing sends SIGHUP in a pod, so the "
                 "daemon would serve the old certificate until it expires")
        for cert in {id(x): x for x in filter(None, (self.certificate_of(sec)
                                                      for _, sec in self.tls.values()))}.values():
            self.check_certificate(cert)

    def check_certificate(self, cert):
        c, spec = self.c, cert["spec"]
        name = cert["metadata"]["name"]
        ns = cert["metadata"].get("namespace", "default")
        c.ok(ns == self.namespace, f"Certificate {name} is in the pods' namespace {self.namespace}"
             " (a Secret volume reads its own namespace)", f"namespace {ns}")
        rotation = (spec.get("privateKey") or {}).get("rotationPolicy")
        c.ok(rotation == "Always", f"Certificate {name}: privateKey.rotationPolicy Always (a new "
             "key with every renewal)",
             f"rotationPolicy {rotation or 'unset (Never before cert-manager 1.18)'}")
        try:
            duration = go_duration(spec.get("duration", "2160h"))
            if "renewBeforePercentage" in spec:
                before = duration * (100 - spec["renewBeforePercentage"]) / 100
            else:
                before = go_duration(spec["renewBefore"]) if "renewBefore" in spec else \
                    duration / 3
        except ValueError as e:
            c.ok(False, f"Certificate {name}: duration and renewBefore parse", str(e))
            return
        alert = expiry_alert_days()
        day = 86400
        c.ok(0 < before < duration, f"Certificate {name}: renewed {before / day:g} days before "
             f"the end of its {duration / day:g} days")
        if alert is not None:
            c.ok(before > alert * day, f"Certificate {name}: renewBefore {before / day:g} days > "
                 f"the {alert}-day certificate-expiry alert of deploy/monitoring",
                 "the alert would fire before every renewal")
        usages = spec.get("usages")
        c.ok(usages is None or "server auth" in usages,
             f"Certificate {name}: usages allow server auth", f"usages {usages}")
        names = spec.get("dnsNames") or []
        want = [f"{s['metadata']['name']}.{self.namespace}.svc" for s in self.services]
        headless = self.spec.get("serviceName")
        if not self.is_deployment and headless:
            want += [f"{self.sts_name}-{o}.{headless}.{self.namespace}.svc"
                     for o in range(self.start, self.start + self.replicas)]
        missing = [w for w in want if not any(dns_match(n, w) for n in names)]
        c.ok(not missing, f"Certificate {name} names every Service and pod in namespace "
             f"{self.namespace} ({len(want)} names, e.g. {want[-1]})",
             f"not covered: {missing} (dnsNames {names}; the namespace in them must be the "
             "overlay's: overlays/example-tls fills it in)")
        ref = spec.get("issuerRef") or {}
        issuers = [d for d in self.kind(ref.get("kind", "Issuer"))
                   if d["metadata"]["name"] == ref.get("name")]
        if issuers:
            c.ok(True, f"Certificate {name}: issuer {ref.get('kind', 'Issuer')} "
                 f"{ref.get('name')} is in the manifest")
        else:
            print(f"     note: Certificate {name}'s issuer {ref.get('kind', 'Issuer')} "
                  f"{ref.get('name')} must exist in the cluster")

    def check_prometheus_rules(self):
        """A PrometheusRule must carry exactly the groups of deploy/monitoring/snowflaked.rules.yml
        (generated from it by gen_prometheusrule.py; compared here as data, after kustomize),
        pass `promtool check rules`, and its target-down regex must match the job name the
        ServiceMonitor gives the scraped targets (the Service's name, or its spec.jobLabel)."""
        c = self.c
        rules = self.kind("PrometheusRule")
        if not rules:
            return
        with open(RULES_FILE, encoding="utf-8") as f:
            want = yaml.safe_load(f)["groups"]
        exprs = [r["expr"] for g in want for r in g["rules"]]
        up_regexes = sorted({m for e in exprs for m in re.findall(r'\bup\{job=~"([^"]+)"\}', e)})
        for pr in rules:
            name = pr["metadata"]["name"]
            groups = (pr.get("spec") or {}).get("groups")
            c.ok(groups == want, f"PrometheusRule {name}: spec.groups = "
                 f"{os.path.relpath(RULES_FILE, ROOT)} ({len(want)} groups)",
                 "differs: run python3 deploy/monitoring/gen_prometheusrule.py")
            path = os.path.join(self.tmp, f"prometheusrule-{name}.yml")
            with open(path, "w", encoding="utf-8") as f:
                yaml.safe_dump({"groups": groups or []}, f)
            if not shutil.which("promtool"):
                c.ok(False, f"PrometheusRule {name}: promtool check rules",
                     "promtool not found (Debian package prometheus; validate.sh installs it)")
                continue
            p = subprocess.run(["promtool", "check", "rules", path], capture_output=True,
                               text=True, timeout=60)
            found = re.search(r"SUCCESS: (\d+) rules found", p.stdout)
            c.ok(p.returncode == 0 and found, f"PrometheusRule {name}: promtool check rules: "
                 f"{found.group(1) if found else 0} rules",
                 (p.stdout + p.stderr).strip()[-400:])
        sms = self.kind("ServiceMonitor")
        c.ok(sms, "PrometheusRule next to a ServiceMonitor (its alerts need the scrape)")
        for sm in sms:
            label = sm["spec"].get("jobLabel")
            for svc in self.services:
                if not matches(sm["spec"]["selector"], svc["metadata"].get("labels", {})):
                    continue
                job = svc["metadata"].get("labels", {}).get(label) if label else \
                    svc["metadata"]["name"]
                c.ok(up_regexes and all(re.fullmatch(r, job or "") for r in up_regexes),
                     f"the rules' up{{job=~...}} {up_regexes} match the scrape job {job!r} of "
                     f"ServiceMonitor {sm['metadata']['name']}")

    # ---- 3c. autoscaling on request rate: HPA -> prometheus-adapter -> recording rule --------

    def load_adapter_rules(self):
        """prometheus-adapter's `rules:` from --adapter-config: its config.yaml, or a rendered
        manifest whose ConfigMap carries it under the key config.yaml. None (after a FAIL) when
        it does not parse."""
        c, path = self.c, self.args.adapter_config
        try:
            with open(path, encoding="utf-8") as f:
                docs = [d for d in yaml.safe_load_all(f) if d]
            conf = next((d for d in docs if "rules" in d), None)
            if conf is None:  # a rendered manifest: the ConfigMap's config.yaml
                cms = [d for d in docs if d.get("kind") == "ConfigMap" and
                       "config.yaml" in (d.get("data") or {})]
                conf = yaml.safe_load(cms[0]["data"]["config.yaml"]) if cms else None
        except (OSError, yaml.YAMLError) as e:
            c.ok(False, f"prometheus-adapter config {path} parses", str(e))
            return None
        rules = (conf or {}).get("rules")
        if not c.ok(isinstance(rules, list) and rules and
                    all(isinstance(r, dict) for r in rules),
                    f"prometheus-adapter config {os.path.relpath(path, ROOT)} parses and has "
                    "`rules:`", f"got {conf!r:.200}"):
            return None
        return rules

    @staticmethod
    def series_name(query):
        """The metric a seriesQuery names (`name{...}`, or `{__name__="name",...}`, or
        `{__name__=~"^name$"}`), or None when it names no single metric."""
        m = re.match(r'^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{.*\})?\s*$', query or "")
        if m:
            return m.group(1)
        m = re.search(r'__name__\s*(=~|=)\s*"([^"]*)"', query or "")
        if not m:
            return None
        name = m.group(2)
        if m.group(1) == "=~":  # a regex: only one that is a plain name, anchored or not
            name = name.removeprefix("^").removesuffix("$")
        return name if re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name) else None

    def documented_metrics(self):
        try:
            with open(self.args.metrics_doc, encoding="utf-8") as f:
                return set(re.findall(r"^\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \|", f.read(), re.M))
        except OSError:
            return set()

    def check_adapter_rule(self, rule, records):
        """One prometheus-adapter rule: its series a recording rule's output that keeps the labels
        it maps to namespace and pod, the rule's inputs documented metrics, a name.as. Returns
        (metric name served, record) or None."""
        c = self.c
        name = (rule.get("name") or {})
        served = name.get("as")
        query = rule.get("seriesQuery")
        what = f"prometheus-adapter rule {served or query!r}"
        series = self.series_name(query)
        if not c.ok(series in records, f"{what}: its seriesQuery names {series}, a recording "
                    f"rule of {os.path.relpath(RULES_FILE, ROOT)}",
                    f"seriesQuery {query!r}: not a recording rule there "
                    f"(records: {sorted(records)})"):
            return None
        try:
            matched = re.search(name.get("matches") or "", series)
        except re.error as e:
            matched = None
            print(f"     name.matches: {e}")
        c.ok(served and matched, f"{what}: name.matches {name.get('matches')!r} matches "
             f"{series}, renamed to name.as {served!r}", f"name {name}")
        over = (rule.get("resources") or {}).get("overrides") or {}
        by_res = {v.get("resource"): k for k, v in over.items() if isinstance(v, dict)}
        ns_label = by_res.get("namespace")
        pod_label = next((by_res[r] for r in ADAPTER_POD_RESOURCES if r in by_res), None)
        c.ok(ns_label and pod_label, f"{what}: resources.overrides map labels to namespace "
             f"({ns_label}) and pod ({pod_label})", f"overrides {over}")
        # Labels whose values are the pod's namespace and name on every scraped series: the
        # Prometheus Operator's (a ServiceMonitor's targets), plus any a ServiceMonitor relabels.
        target = set(SCRAPE_POD_LABELS)
        for sm in self.kind("ServiceMonitor"):
            for ep in sm["spec"].get("endpoints") or []:
                target |= {r.get("targetLabel") for r in ep.get("relabelings") or []} - {None}
        c.ok({ns_label, pod_label} <= target, f"{what}: the labels it maps ({ns_label}, "
             f"{pod_label}) carry the namespace and pod name on every scraped series",
             f"the scrape sets {sorted(target)}")
        mq = rule.get("metricsQuery") or ""
        c.ok(all(t in mq for t in ("<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>")),
             f"{what}: metricsQuery uses <<.Series>>, <<.LabelMatchers>> and <<.GroupBy>>",
             f"metricsQuery {mq!r}")
        # The recording rule must keep those labels: a `by` that omits them, or a `without`
        # that names them, leaves the adapter nothing to map to a pod.
        expr = records[series]
        agg = re.match(r"^\s*(?:sum|max|min|avg|count)\s+(by|without)\s*\(([^)]*)\)", expr)
        kept = True
        if agg:
            listed = {x.strip() for x in agg.group(2).split(",") if x.strip()}
            want = {ns_label, pod_label} - {None}
            kept = want <= listed if agg.group(1) == "by" else not (want & listed)
        c.ok(kept, f"recording rule {series} keeps the labels {ns_label}, {pod_label} the adapter "
             "maps to the pod", f"its expression starts {expr[:80]!r}")
        bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
        inputs = sorted(set(re.findall(r"\b(snowflaked_[a-zA-Z0-9_]+)\b", bare)))
        documented = self.documented_metrics()
        missing = [n for n in inputs if n not in documented]
        c.ok(inputs and not missing, f"recording rule {series}: its inputs {inputs} are metrics "
             f"of {os.path.relpath(self.args.metrics_doc, ROOT)}",
             f"not documented there: {missing}")
        return served, series, expr, (ns_label, pod_label), mq

    def check_adapter_query(self, series, labels, mq):
        """metricsQuery as the adapter fills it in for two pods of the HPA's namespace, run by
        promtool on the recorded series: one value per pod, the recorded one (a rate() around an
        already recorded rate, a missing `by`, a matcher on the wrong label all fail here)."""
        c = self.c
        promtool = shutil.which("promtool")
        if not c.ok(promtool, "promtool is installed (Debian prometheus; validate.sh installs "
                    "it)"):
            return
        ns_label, pod_label = labels
        pods = {f"{self.sts_name}-5d8f7c9b4d-a": 120, f"{self.sts_name}-5d8f7c9b4d-b": 3500}
        other = f"{self.sts_name}-5d8f7c9b4d-c"  # not asked for: must not show up
        matchers = f'{ns_label}="{self.namespace}",{pod_label}=~"{"|".join(pods)}"'
        query = (mq.replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers)
                 .replace("<<.GroupBy>>", pod_label))
        inputs = []
        for i, (pod, v) in enumerate({**pods, other: 7}.items()):
            labels = {"job": "snowflaked-headless", "instance": f"10.0.0.{i}:8080",
                      ns_label: self.namespace, pod_label: pod}
            text = ",".join(f'{k}="{x}"' for k, x in labels.items())
            inputs.append({"series": f"{series}{{{text}}}", "values": f"{v}x10"})
        test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
            "interval": "1m", "input_series": inputs,
            "promql_expr_test": [{"expr": query, "eval_time": "5m", "exp_samples": [
                {"labels": f'{{{pod_label}="{p}"}}', "value": v} for p, v in pods.items()]}]}]}
        path = os.path.join(self.tmp, "adapter-query.test.yml")
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(test, f)
        p = subprocess.run([promtool, "test", "rules", path], capture_output=True, text=True,
                           timeout=60, cwd=self.tmp)
        c.ok(p.returncode == 0, f"the adapter's metricsQuery for pods of {self.namespace} "
             f"({query}) gives each pod its recorded rate (promtool)",
             " ".join((p.stdout + p.stderr).split())[-600:])

    def check_spread(self):
        """topologySpreadConstraints beside the anti-affinity: zone and node, selecting the
        pods; the zone one soft (a full or missing zone must not stop the scale-up)."""
        c = self.c
        tsc = self.pod_spec.get("topologySpreadConstraints") or []
        by_key = {t.get("topologyKey"): t for t in tsc}
        for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname"):
            t = by_key.get(key)
            if not c.ok(t, f"topologySpreadConstraints spread the pods over {key}",
                        f"keys {sorted(by_key)}"):
                continue
            c.ok(matches(t.get("labelSelector"), self.pod_labels),
                 f"topologySpreadConstraint {key}: its labelSelector selects the pods",
                 f"{t.get('labelSelector')} vs pod labels {self.pod_labels}")
        zone = by_key.get("topology.kubernetes.io/zone") or {}
        if zone:
            c.ok(zone.get("whenUnsatisfiable") == "ScheduleAnyway",
                 "the zone spread is ScheduleAnyway (a single-zone cluster or a zone out of "
                 "capacity must not leave the HPA's new pods pending)",
                 f"whenUnsatisfiable {zone.get('whenUnsatisfiable')}")
        if self.is_deployment:
            c.ok(all("pod-template-hash" in (t.get("matchLabelKeys") or []) for t in tsc),
                 "each spread counts its own ReplicaSet (matchLabelKeys pod-template-hash): a "
                 "rollout's new pods spread by themselves")
        anti = ((self.pod_spec.get("affinity") or {}).get("podAntiAffinity") or {})
        c.ok(anti, "the pod anti-affinity stays beside the spread")

    def check_request_rate_autoscaling(self):
        """An HPA with a Pods metric scales on the request rate the adapter serves: that metric
        is a name.as of a prometheus-adapter rule whose series is the recording rule's output,
        a CPU metric beside it, a target a pod can serve under its CPU target, damped
        scale-down, spread pods."""
        c = self.c
        if not self.hpas:
            return
        hpa = self.hpas[0]
        spec = hpa["spec"]
        metrics = spec.get("metrics") or []
        pods_metrics = [m for m in metrics if m.get("type") == "Pods"]
        if not pods_metrics:
            print("     note: the HPA has no Pods metric (request rate): CPU alone")
            return
        cpu = [m["resource"] for m in metrics if m.get("type") == "Resource" and
               (m.get("resource") or {}).get("name") == "cpu"]
        c.ok(cpu, "the HPA also scales on CPU (a Resource cpu metric beside the request rate: "
             "TLS handshakes, large batches and values cost CPU the rate does not weigh)",
             f"metrics {[m.get('type') for m in metrics]}")
        with open(RULES_FILE, encoding="utf-8") as f:
            records = {r["record"]: r["expr"] for g in yaml.safe_load(f)["groups"]
                       for r in g["rules"] if "record" in r}
        rules = self.load_adapter_rules() or []
        served = {}
        for rule in rules:
            got = self.check_adapter_rule(rule, records)
            if got and got[0]:
                served[got[0]] = got[1:]
        requests = (self.ctr.get("resources") or {}).get("requests") or {}
        for m in pods_metrics:
            name = ((m.get("pods") or {}).get("metric") or {}).get("name")
            target = (m.get("pods") or {}).get("target") or {}
            if not c.ok(name in served, f"HPA Pods metric {name} is served by prometheus-adapter "
                        f"(a rule's name.as in {os.path.relpath(self.args.adapter_config, ROOT)})",
                        f"not served by prometheus-adapter: its rules serve {sorted(served)}"):
                continue
            series, expr, labels, mq = served[name]
            self.check_adapter_query(series, labels, mq)
            try:
                avg = quantity(target.get("averageValue"))
            except ValueError:
                avg = None
            if not c.ok(target.get("type") == "AverageValue" and avg and avg > 0,
                        f"HPA {name}: target AverageValue {target.get('averageValue')} per pod",
                        f"target {target}"):
                continue
            util = next((r["target"].get("averageUtilization") for r in cpu
                         if r.get("target", {}).get("type") == "Utilization"), None)
            if util and "cpu" in requests:
                budget = quantity(requests["cpu"]) * util / 100
                need = avg * DEAREST_CPU_S_PER_REQUEST
                c.ok(need <= budget, f"HPA {name} {target['averageValue']}/s per pod x "
                     f"{DEAREST_CPU_S_PER_REQUEST * 1e6:g} us (the dearest CPU per request "
                     f"measured) = {need * 1000:.0f}m <= the CPU target {util} % of "
                     f"{requests['cpu']} = {budget * 1000:.0f}m: the request rate leads",
                     "a pod reaches the CPU target before the request-rate target, so the "
                     "request rate never scales: lower averageValue (loadtest/README.md)")
            window = re.search(r"\[(\d+[smh])\]", expr)
            down = ((spec.get("behavior") or {}).get("scaleDown") or {}) \
                .get("stabilizationWindowSeconds", 300)
            if window:
                secs = go_duration(window.group(1))
                c.ok(down >= secs, f"HPA scaleDown stabilizationWindowSeconds {down} >= the "
                     f"recording rule's rate window {window.group(1)} (a dip it averages over "
                     "sheds no pods)", f"{down} s")
        # The connection age caps (per listener): kube-proxy balances connections, not
        # requests, so without them keep-alive clients never reach the pods the HPA adds.
        caps = [("server", "max_connection_age_s", "http")]
        if self.eff["cache"]["enabled"] and ("memcached" in self.listeners or
                                             "memcached-tls" in self.listeners):
            caps.append(("cache", "memcached_max_connection_age_s", "memcached"))
        for section, key, lst in caps:
            age = (self.eff.get(section) or {}).get(key)
            if age is None:
                print(f"     note: this daemon has no {section}.{key}: keep-alive {lst} clients "
                      "stay on the old pods when the HPA adds some")
                continue
            c.ok(age > 0, f"{section}.{key} {age} > 0: keep-alive {lst} connections move to the "
                 "pods the HPA adds (kube-proxy balances connections, not requests)",
                 "0: connections never leave the old pods, the new ones get no traffic")
        self.check_spread()

    def check_storage_shutdown_memory(self):
        c, eff = self.c, self.eff
        server, cache = eff["server"], eff["cache"]
        mounts = {vm["mountPath"].rstrip("/"): vm for vm in self.ctr.get("volumeMounts", [])}
        data = mounts.get(eff["data_dir"].rstrip("/"))
        if self.is_deployment:
            # etcd mode keeps no lease file (the floor is in etcd): nothing in data_dir must
            # outlive the pod, and a shared or persistent volume would only invite two pods
            # into one pid lock.
            c.ok(data is not None and "emptyDir" in self.volumes.get(data["name"], {}) and
                 not data.get("readOnly"),
                 f"data_dir {eff['data_dir']} is a writable emptyDir (etcd mode: no lease file)")
        else:
            c.ok(data is not None and data["name"] in self.claims and not data.get("readOnly"),
                 f"data_dir {eff['data_dir']} is a volumeClaimTemplate mount (the lease survives "
                 "the pod)")
        writable = [p for p, vm in mounts.items() if not vm.get("readOnly") and
                    (vm["name"] in self.claims or "emptyDir" in self.volumes.get(vm["name"], {}))]
        ro_root = (self.ctr.get("securityContext") or {}).get("readOnlyRootFilesystem", False)
        for key, path in (("cache.snapshot_path", cache["snapshot_path"]),
                          ("log.file", eff["log"]["file"])):
            if path:
                c.ok(not ro_root or any(path.startswith(w + "/") for w in writable),
                     f"{key} {path} is on a writable volume")
        lifecycle = self.ctr.get("lifecycle") or {}
        self.pre_stop = ((lifecycle.get("preStop") or {}).get("sleep") or {}).get("seconds", 0)
        self.tgps = self.pod_spec.get("terminationGracePeriodSeconds", 30)
        drain = server["shutdown_grace_ms"] / 1000
        # etcd mode: after the snapshot, the last floor write and the lease revoke (one etcd
        # call each, request_timeout_ms at most): killed before the revoke, the slot stays held
        # until the lease expires.
        etcd_calls = 2 * self.etcd["request_timeout_ms"] / 1000 if self.etcd else 0
        c.ok(self.tgps >= self.pre_stop + drain + FINAL_WRITE_BUDGET_S + etcd_calls,
             f"terminationGracePeriodSeconds {self.tgps} >= preStop {self.pre_stop} s + drain "
             f"{drain:g} s + {FINAL_WRITE_BUDGET_S} s for the final snapshot and lease" +
             (f" + {etcd_calls:g} s for the floor write and lease revoke" if self.etcd else ""))
        if cache["enabled"]:
            lim = (self.ctr.get("resources") or {}).get("limits", {}).get("memory")
            need = MEM_FACTOR * cache["max_memory_bytes"] + MEM_HEADROOM
            c.ok(lim is not None and quantity(lim) >= need,
                 f"memory limit {lim} >= {MEM_FACTOR} x cache.max_memory_bytes + "
                 f"{MEM_HEADROOM >> 20} MiB ({need / 2**20:.0f} MiB)")

    def check_same_pod(self):
        """--same-pod-as RENDERED: the Deployment's pod template was copied from the base
        StatefulSet's; what must not drift apart (security, resources, ports, stop) is compared."""
        path = self.args.same_pod_as
        if not path:
            return
        with open(path, encoding="utf-8") as f:
            ref = next((d for d in yaml.safe_load_all(f)
                        if d and d.get("kind") in ("StatefulSet", "Deployment")), None)
        if not self.c.ok(ref is not None, f"{path} has a workload to compare the pod with"):
            return
        rpod = ref["spec"]["template"]["spec"]
        rctr = next(x for x in rpod["containers"] if x["name"] == CONTAINER)
        diff = []
        for key in ("securityContext", "automountServiceAccountToken", "enableServiceLinks",
                    "affinity"):
            if rpod.get(key) != self.pod_spec.get(key):
                diff.append(f"pod {key}")
        for key in ("securityContext", "resources", "ports", "lifecycle", "args",
                    "imagePullPolicy"):  # not image: each overlay points it at its registry
            if rctr.get(key) != self.ctr.get(key):
                diff.append(f"container {key}")
        self.c.ok(not diff, f"the pod template agrees with {ref['kind']} {ref['metadata']['name']}"
                  " of the base on security, resources, ports, preStop and args",
                  f"differs: {', '.join(diff)}")

    def check_container_config(self):
        """The image's config.json (deploy/container) must agree on what the image declares."""
        path = self.args.container_config
        if not path:
            return
        if not os.path.exists(path):
            print(f"     ({path} not there: comparison skipped)")
            return
        rc, img, err = self.check_config({"POD_INDEX": "0"}, config=path)
        if not self.c.ok(rc == 0, f"{path} is accepted", err):
            return
        eff = self.eff
        pairs = {
            "data_dir": (img["data_dir"], eff["data_dir"]),
            "server.port": (img["server"]["port"], eff["server"]["port"]),
            "cache.memcached_port": (img["cache"]["memcached_port"],
                                     eff["cache"]["memcached_port"]),
        }
        if "memcached-tls" in self.tls and not eff["cache"]["memcached_port"]:
            # components/tls: memcached over TLS instead of the image's plaintext port.
            del pairs["cache.memcached_port"]
        for key, _, _ in MEMCACHED_ADMIN:  # what anyone who reaches the port may do
            name = key.split(".", 1)[1]
            pairs[key] = (img["cache"][name], eff["cache"][name])
        if not self.is_deployment:  # the image defaults to "ordinal"; etcd is the overlay's choice
            pairs["snowflake.worker_id"] = (img["snowflake"]["worker_id"],
                                            eff["snowflake"]["worker_id"])
        diff = {k: v for k, v in pairs.items() if v[0] != v[1]}
        self.c.ok(not diff, f"{', '.join(pairs)} agree with {path}",
                  f"image vs manifest: {diff}")

    # ---- 4. the live daemon ---------------------------------------------------------------

    def prepare_tls(self):
        """The Secret volumes of the TLS files, laid out as the kubelet does (..data symlink) in
        the temporary directory, with a certificate made by openssl for the Certificate's names
        (wildcards included) and 127.0.0.1; --set arguments pointing the configuration's paths
        there (a flag beats the pod's SNOWFLAKED_* variables)."""
        self.tls_args, self.secret_vols, self.tls_ctx = [], {}, None
        if not self.tls:
            return
        os.makedirs(os.path.join(self.tmp, "certs"))
        self.certs = tlscerts.Certs(os.path.join(self.tmp, "certs"))
        names = sorted({n for _, sec in self.tls.values() for n in self.certificate_names(sec)})
        self.tls_sans = ["DNS:" + n for n in names] + ["IP:127.0.0.1"]
        cert, key = self.certs.server_cert("pod", self.tls_sans)
        self.tls_files = {"tls.crt": cert, "tls.key": key, "ca.crt": self.certs.ca}
        for key_path, sec in self.tls.values():
            for role in CERT_MANAGER_KEYS:
                path = sec[role]
                if not path or path not in self.tls_sources:
                    continue
                secret, _, vm = self.tls_sources[path]
                vol = self.secret_vols.get(vm["mountPath"])
                if vol is None:
                    vol = SecretVolume(os.path.join(self.tmp, f"secret-{secret}"),
                                       self.tls_files)
                    self.secret_vols[vm["mountPath"]] = vol
                local = vol.path + path[len(vm["mountPath"].rstrip("/")):]
                self.tls_args += ["--set", f"{key_path}.{role}={local}"]
        self.tls_ctx = ssl.create_default_context(cafile=self.certs.ca)
        # A client certificate of the same CA, for a listener with mutual TLS (client_ca_file
        # ca.crt, the issuer's CA); sent only when the listener asks for one.
        self.tls_ctx.load_cert_chain(self.certs.client, self.certs.client_key)
        # The name a client of the ClusterIP Service verifies: <service>.<namespace>.svc.
        client = next((s for s in self.services if s["spec"].get("clusterIP") != "None"),
                      self.services[0] if self.services else None)
        self.tls_name = f"{client['metadata']['name']}.{self.namespace}.svc" if client else \
            (names[0] if names else "localhost")

    def start_daemon(self, ordinal, extra=()):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **self.pod_env(ordinal),
               **self.live_env}
        self.data_dir = os.path.join(self.tmp, f"data-{ordinal}")
        self.log_path = os.path.join(self.tmp, f"daemon-{ordinal}.log")
        base_cmd = [self.binary, "-c", self.cfg_file, "--set", f"data_dir={self.data_dir}",
                    "--set", "server.host=127.0.0.1", "--set", "cache.memcached_host=127.0.0.1",
                    "--set", "echo.tcp_host=127.0.0.1", *getattr(self, "tls_args", []),
                    *self.live_args, *extra]
        keys = {name: port_key for name, port_key, _, _ in LISTENERS}
        for _ in range(3):  # a free port can be taken between free_port() and the daemon's bind
            self.port = {name: free_port() for name in self.listeners}
            cmd = base_cmd + [a for n, p in self.port.items() for a in ("--set", f"{keys[n]}={p}")]
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
            print(f"     started pod {self.pod_name(ordinal)} as PID {self.proc.pid} on "
                  f"127.0.0.1:{self.port}")
            deadline = time.monotonic() + LIVE_TIMEOUT_S
            while self.proc.poll() is None and time.monotonic() < deadline:
                try:  # every port: the TLS listeners open after the plaintext HTTP one
                    for port in self.port.values():
                        socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    return True
                except OSError:
                    time.sleep(0.02)
            if self.proc.poll() is None or b"in use" not in self.daemon_log().encode():
                return False
        return False

    def daemon_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def tls_connect(self, listener):
        """A TLS socket to the live daemon's `listener`, verifying the chain against the test CA
        and the name a client of the Service verifies."""
        sock = socket.create_connection(("127.0.0.1", self.port[listener]), timeout=2)
        try:
            return self.tls_ctx.wrap_socket(sock, server_hostname=self.tls_name)
        except (OSError, ssl.SSLError):
            sock.close()
            raise

    def https_connection(self):
        """An http.client connection to the HTTPS listener through tls_connect()."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.port["https"], timeout=2,
                                           context=self.tls_ctx)
        conn.sock = self.tls_connect("https")
        return conn

    def get(self, path, listener="http"):
        """GET path on the HTTP or HTTPS listener: (status, headers, body)."""
        if listener not in self.tls:
            return http_get(f"http://127.0.0.1:{self.port[listener]}{path}")
        conn = self.https_connection()
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def poll(self, path, want=200, listener="http"):
        """GET path until it answers `want` (a pod may be ready a moment after it listens)."""
        deadline = time.monotonic() + LIVE_TIMEOUT_S
        last = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                last = self.get(path, listener)
                if last[0] == want:
                    return last
            except OSError as e:  # ssl.SSLError included: a verification failure stays one
                last = (None, {}, str(e).encode())
            time.sleep(0.05)
        return last or (None, {}, b"")

    def probe_and_scrape(self):
        """Every probe answers 200; every scrape path is Prometheus text 0.0.4 with
        snowflaked_ready 1. The scraped bodies, for the caller's own checks."""
        c, bodies = self.c, []
        for kind, (path, lst) in self.probes.items():
            st, _, body = self.poll(path, listener=lst)
            over = f" over TLS, verified as {self.tls_name}" if lst in self.tls else ""
            c.ok(st == 200, f"{kind} GET {path} on {lst} -> 200{over}",
                 f"got {st} {body[:200]!r}")
        for path, lst in sorted(self.scrapes):
            st, headers, raw = self.poll(path, listener=lst)
            body = raw.decode("utf-8", "replace")
            ctype = headers.get("Content-Type", "")
            c.ok(st == 200 and ctype.startswith("text/plain") and "version=0.0.4" in ctype and
                 re.search(r"^snowflaked_ready 1$", body, re.M),
                 f"Prometheus GET {path} on {lst} -> 200 text format 0.0.4 with "
                 "snowflaked_ready 1", f"{st} {ctype}")
            bodies.append(body)
        return bodies

    def check_live(self):
        c, eff = self.c, self.eff
        sf = eff["snowflake"]
        ordinal = self.start + self.replicas - 1  # the highest pod: the one closest to the limit
        self.prepare_tls()
        if not c.ok(self.start_daemon(ordinal), f"pod {self.sts_name}-{ordinal} runs and listens",
                    f"exit {self.proc.poll()}"):
            print("     daemon log:\n" + self.daemon_log()[-3000:])
            return
        for body in self.probe_and_scrape():
            info = re.search(r"^snowflaked_info\{([^}]*)\}", body, re.M)
            labels = dict(re.findall(r'(\w+)="([^"]*)"', info.group(1))) if info else {}
            c.ok(labels.get("worker_id") == str(ordinal) and
                 labels.get("datacenter_id") == str(sf["datacenter_id"]),
                 f"snowflaked_info says worker {ordinal}, datacenter {sf['datacenter_id']}",
                 f"{labels}")
        api = "https" if "https" in self.tls else "http"  # what the Services publish
        try:
            new_id = json.loads(self.poll("/id", listener=api)[2])["id"]
            parts = json.loads(self.get(f"/id/{new_id}", api)[2])
        except (TypeError, ValueError, KeyError, OSError) as e:
            parts = {"error": str(e)}
        c.ok(parts.get("worker") == ordinal and parts.get("datacenter") == sf["datacenter_id"],
             f"an ID from pod {self.sts_name}-{ordinal} ({api}) carries worker {ordinal}, "
             f"datacenter {sf['datacenter_id']}", f"{parts}")
        self.check_memcached()
        self.check_rotation()
        self.check_sigterm({"snowflake.lease"})
        if c.failed:
            print("     daemon log:\n" + self.daemon_log()[-3000:])

    def mc_connect(self, listener):
        if listener in self.tls:
            return self.tls_connect(listener)
        return socket.create_connection(("127.0.0.1", self.port[listener]), 2)

    def check_memcached(self):
        for lst in ("memcached", "memcached-tls"):
            if lst in self.port:
                self.check_memcached_on(lst)

    def check_memcached_on(self, lst):
        self.check_memcached_admin(lst)
        reply = b""
        try:
            with self.mc_connect(lst) as s:
                s.sendall(b"set k8s-check 0 0 2\r\nok\r\nversion\r\n")
                while b"VERSION" not in reply or not reply.endswith(b"\r\n"):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
        except OSError as e:
            reply += str(e).encode()
        over = f" over TLS, verified as {self.tls_name}" if lst in self.tls else ""
        self.c.ok(reply.startswith(b"STORED\r\nVERSION "),
                  f"the {lst} containerPort speaks the memcached protocol{over}",
                  repr(reply[:80]))
        if lst in self.tls and self.tls[lst][1]["verify_client"] == "required":
            self.check_client_refused(lst)

    def check_client_refused(self, lst):
        """Mutual TLS required: a client without a certificate gets nothing (with TLS 1.3 the
        server's refusal arrives after the client's side of the handshake, at the first read)."""
        bare = ssl.create_default_context(cafile=self.certs.ca)
        reply = b""
        try:
            sock = socket.create_connection(("127.0.0.1", self.port[lst]), timeout=2)
            with bare.wrap_socket(sock, server_hostname=self.tls_name) as s:
                s.sendall(b"version\r\n")
                reply = s.recv(100)
        except (OSError, ssl.SSLError) as e:
            reply = b"" if isinstance(e, ssl.SSLError) or not reply else reply
        self.c.ok(not reply.startswith(b"VERSION"), f"the {lst} port refuses a client without a "
                  "certificate (verify_client required)", repr(reply[:80]))

    def check_memcached_admin(self, lst):
        """The port has no authentication: the administrative and key-listing commands the
        configuration turns off must be refused by the running daemon (memcached's own answers
        where it has the switch); the ones left on are listed."""
        def enabled(key):
            return self.eff["cache"][key.split(".", 1)[1]]
        off = [row for row in MEMCACHED_ADMIN if not enabled(row[0])]
        on = [row[0] for row in MEMCACHED_ADMIN if enabled(row[0])]
        if on:
            print(f"     note: on for anyone who reaches the memcached port: {', '.join(on)}")
        if not off:
            return
        reply = b""
        try:
            with self.mc_connect(lst) as s:
                s.sendall(b"".join(cmd for _, cmd, _ in off))
                while reply.count(b"\r\n") < len(off):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
        except OSError as e:
            reply += str(e).encode()
        want = b"".join(refusal + b"\r\n" for _, _, refusal in off)
        self.c.ok(reply == want, f"the {lst} port refuses what the config turns off ("
                  + ", ".join(k for k, _, _ in off) + ")", repr(reply[:300]))

    def serial(self, listener):
        with self.tls_connect(listener) as s:
            return s.getpeercert()["serialNumber"]

    def check_rotation(self):
        """cert-manager renews: the kubelet swaps the Secret volume's ..data symlink. A new
        connection to every TLS listener must get the new certificate (new key, new serial)
        without a restart; a connection opened before keeps working."""
        c = self.c
        if not self.tls or not self.secret_vols:
            return
        try:
            before = {lst: self.serial(lst) for lst in self.tls}
            old = self.https_connection() if "https" in self.tls else None
            if old:
                old.request("GET", "/healthz")
                old.getresponse().read()
        except (OSError, ssl.SSLError, http.client.HTTPException) as e:
            c.ok(False, "TLS connections before the rotation", str(e))
            return
        cert, key = self.certs.server_cert("pod-renewed", self.tls_sans)
        files = {**self.tls_files, "tls.crt": cert, "tls.key": key}
        t0 = time.monotonic()
        for vol in self.secret_vols.values():
            vol.update(files)
        want = self.certs.serial_of(cert).upper()
        after, took = {}, None
        while time.monotonic() - t0 < ROTATION_TIMEOUT_S and self.proc.poll() is None:
            try:
                after = {lst: self.serial(lst) for lst in self.tls}
            except (OSError, ssl.SSLError) as e:
                after = {"error": str(e)}
            if all(v == want for v in after.values()):
                took = time.monotonic() - t0
                break
            time.sleep(0.1)
        c.ok(took is not None, f"the Secret volume's ..data swap reaches {sorted(self.tls)}: a new "
             f"connection gets the renewed certificate (serial {before} -> {want}) after "
             f"{took or 0:.2f} s, without a restart", f"serials {after} after {ROTATION_TIMEOUT_S}"
             f" s; log:\n{self.daemon_log()[-1500:]}")
        deadline = time.monotonic() + 2  # the log line is written by the logger thread
        while "certificate reloaded (files changed)" not in self.daemon_log() and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        c.ok("certificate reloaded (files changed)" in self.daemon_log(),
             "the daemon logs the reload ('certificate reloaded (files changed)')")
        if old:
            try:
                old.request("GET", "/healthz")
                r = old.getresponse()
                st = r.status
                r.read()
                kept = old.sock.getpeercert()["serialNumber"]
            except (OSError, http.client.HTTPException) as e:
                st, kept = str(e), None
            finally:
                old.close()
            c.ok(st == 200 and kept == before["https"], "a connection opened before the rotation "
                 f"keeps its certificate (serial {kept}) and still works (GET /healthz -> 200)",
                 f"{st}, serial {kept}")

    def check_sigterm(self, want):
        """SIGTERM as the kubelet sends it (after preStop), then the drain and the final writes;
        data_dir must keep `want` (and the cache snapshot when it is written there)."""
        c, cache = self.c, self.eff["cache"]
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=self.tgps - self.pre_stop)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.monotonic() - t0
        c.ok(rc == 0, f"SIGTERM: exit 0 after {took:.2f} s (within the grace period {self.tgps} s"
             f" - preStop {self.pre_stop} s)", f"exit {rc}")
        left = set(os.listdir(self.data_dir)) if os.path.isdir(self.data_dir) else set()
        want = set(want)
        if cache["enabled"] and cache["persist"] and not cache["snapshot_path"]:
            want.add("cache.snapshot")
        c.ok(want <= left, f"data_dir keeps {sorted(want)} for the next start",
             f"has {sorted(left)}")

    # ---- 4b. the live daemon against a real etcd ------------------------------------------

    def start_etcd(self, flags=(), scheme="http"):
        """A single-member etcd on loopback (free ports, temporary data dir); its client URL.
        flags: its security (etcd_security()), scheme "https" with them."""
        c = self.c
        binary = shutil.which("etcd")
        if not c.ok(binary, "etcd is installed (Debian etcd-server; validate.sh installs it)"):
            return None
        log_path = os.path.join(self.tmp, "etcd.log")
        for attempt in range(3):  # a free port can be taken before etcd binds it
            client = f"{scheme}://127.0.0.1:{free_port()}"
            peer = f"http://127.0.0.1:{free_port()}"  # one member: no peer traffic
            data = os.path.join(self.tmp, f"etcd-data-{attempt}")
            cmd = [binary, "--name", "k8scheck", "--data-dir", data,
                   "--listen-client-urls", client, "--advertise-client-urls", client,
                   "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                   "--initial-cluster", f"k8scheck={peer}", "--initial-cluster-state", "new",
                   "--heartbeat-interval", "50", "--election-timeout", "500", *flags]
            with open(log_path, "wb") as log:
                self.etcd_proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL,
                                                  preexec_fn=die_with_parent)
            deadline = time.monotonic() + ETCD_START_TIMEOUT_S
            while self.etcd_proc.poll() is None and time.monotonic() < deadline:
                try:  # a range is linearizable: it answers once the member is the leader
                    self.etcd_range(client, "/")
                    print(f"     etcd {self.etcd_version(client)} as PID {self.etcd_proc.pid} on "
                          f"{client}")
                    return client
                except (OSError, ValueError):
                    time.sleep(0.05)
            self.etcd_proc.kill()
            self.etcd_proc.wait()
            with open(log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            if "address already in use" not in text:
                c.ok(False, "etcd answers on loopback", text[-1500:])
                return None
        c.ok(False, "etcd answers on loopback", "ports taken three times")
        return None

    def etcd_post(self, client, path, body):
        """One call of etcd's JSON gateway as its admin: over https with the admin's client
        certificate, with root's token once auth is on."""
        headers = {"Content-Type": "application/json"}
        if self.etcd_token:
            headers["Authorization"] = self.etcd_token
        req = urllib.request.Request(client + path, data=json.dumps(body).encode(),
                                     headers=headers)
        with urllib.request.urlopen(req, timeout=2, context=self.etcd_ctx) as r:
            return json.loads(r.read())

    # ---- 4c. a secured etcd (issue 24): TLS with client certificates, RBAC ----------------

    def etcd_security(self):
        """The loopback etcd's security as the manifest's client expects it: https with
        --client-cert-auth when it mounts a CA (and a client certificate), RBAC when it names a
        user. Certificates by openssl (etcdcluster.EtcdTls: none with a CN, which etcd 3.4's
        gateway refuses under auth), passwords and token flags of etcdcluster.EtcdAuth. Returns
        (etcd flags, scheme)."""
        files = self.cred_files
        flags, scheme = [], "http"
        if files["snowflake.etcd.tls.ca_file"]:
            self.etcd_tls = etcdcluster.EtcdTls(os.path.join(self.tmp, "etcd-pki"), 1)
            cert, key = self.etcd_tls.members[0]
            flags += ["--cert-file", cert, "--key-file", key, "--trusted-ca-file",
                      self.etcd_tls.ca]
            if files["snowflake.etcd.tls.cert_file"]:
                flags.append("--client-cert-auth")
            self.etcd_ctx = self.etcd_tls.context()
            scheme = "https"
        if self.etcd_user:
            # Simple tokens, alive while used: this check is about the manifest, not tokens
            # expiring (test/cluster's JWT runs re-authenticate every few seconds).
            self.etcd_auth = etcdcluster.EtcdAuth(self.etcd["prefix"].rstrip("/"), "simple", 300)
            self.etcd_auth.USER = self.etcd_user  # the manifest's user, not the harness's
            flags += self.etcd_auth.token_flags()
        return flags, scheme

    def etcd_enable_auth(self, client):
        """root, the manifest's user with the least-privilege role of docs/identity-etcd.md
        (readwrite on prefix + "/" only, a role of the user's name), then auth enable (what
        etcdcluster.EtcdCluster.enable_auth does with etcdctl, here through the gateway);
        root's token for the checks' own reads."""
        a = self.etcd_auth
        user, prefix = a.USER, a.prefix + "/"
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        for path, body in (
                ("/v3/auth/user/add", {"name": "root", "password": a.root_password}),
                ("/v3/auth/role/add", {"name": "root"}),
                ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
                ("/v3/auth/role/add", {"name": user}),
                ("/v3/auth/role/grant", {"name": user, "perm": {
                    "permType": "READWRITE", "key": etcdcluster.b64(prefix),
                    "range_end": etcdcluster.b64(end)}}),
                ("/v3/auth/user/add", {"name": user, "password": a.password}),
                ("/v3/auth/user/grant", {"user": user, "role": user}),
                ("/v3/auth/enable", {})):
            self.etcd_post(client, path, body)
        self.etcd_token = self.etcd_post(client, "/v3/auth/authenticate", {
            "name": "root", "password": a.root_password})["token"]
        print(f"     etcd auth enabled: user {user!r}, role {user!r} with readwrite on "
              f"{prefix} only")

    def etcd_secret_volumes(self):
        """The credential Secrets as the README's kubectl commands make them (ca.crt, tls.crt,
        tls.key of the loopback etcd's CA and a CN-less client certificate; the password key),
        each laid out as the kubelet mounts it (..data symlink) in the temporary directory.
        The live daemon gets the manifest's own variables and file names; only each Secret
        mount's directory is mapped to its temporary volume (a value in config.json instead of
        a variable: a --set of the mapped path)."""
        by_key = {}
        if self.etcd_tls:
            by_key = {"ca.crt": self.etcd_tls.ca, "tls.crt": self.etcd_tls.client_cert,
                      "tls.key": self.etcd_tls.client_key}
        pw_file = os.path.join(self.tmp, "etcd-password")
        if self.etcd_auth:
            with open(pw_file, "w", encoding="utf-8") as f:
                f.write(self.etcd_auth.password + "\n")  # as `kubectl --from-file` keeps it
        role = {"snowflake.etcd.tls.ca_file": self.etcd_tls and self.etcd_tls.ca,
                "snowflake.etcd.tls.cert_file": self.etcd_tls and self.etcd_tls.client_cert,
                "snowflake.etcd.tls.key_file": self.etcd_tls and self.etcd_tls.client_key,
                "snowflake.etcd.auth.password_file": pw_file}
        volumes = {}  # mountPath -> (secret, {file in the volume: source})
        for k, (secret, skey, vm, _) in self.cred_sources.items():
            rel = self.cred_files[k][len(vm["mountPath"].rstrip("/")) + 1:]
            volumes.setdefault(vm["mountPath"].rstrip("/"), (secret, {}))[1][rel] = \
                by_key.get(skey) or role[k]
        local_of = {}
        for mount, (secret, files) in volumes.items():
            vol = SecretVolume(os.path.join(self.tmp, f"etcd-secret-{secret}"), files)
            local_of[mount] = vol.path
            print(f"     Secret {secret} ({', '.join(sorted(files))}) mounted at {mount} -> "
                  f"{vol.path}")
        for k, (_, _, vm, _) in self.cred_sources.items():
            mount = vm["mountPath"].rstrip("/")
            local = local_of[mount] + self.cred_files[k][len(mount):]
            if env_name(k) in self.cred_env:
                self.live_env[env_name(k)] = local
            else:
                self.live_args += ["--set", f"{k}={local}"]

    def check_etcd_client_metrics(self, body):
        """The daemon's etcd client used the mounted credentials: the client certificate in
        service is the Secret's tls.crt (its notAfter), TLS handshakes happened, the user got
        a token and no call was refused for its permissions."""
        c = self.c

        def value(name, labels=""):
            m = re.search(rf"^{name}{re.escape(labels)} ([0-9.e+]+)$", body, re.M)
            return float(m.group(1)) if m else None
        if self.etcd_tls:
            shakes = sum(float(v) for v in re.findall(
                r"^snowflaked_etcd_tls_handshakes_total\{[^}]*\} ([0-9.e+]+)$", body, re.M))
            c.ok(shakes > 0, f"the daemon speaks TLS to etcd ({shakes:g} handshakes, "
                 "snowflaked_etcd_tls_handshakes_total)")
        if self.etcd_tls and self.cred_files["snowflake.etcd.tls.cert_file"]:
            end = subprocess.run([tlscerts.OPENSSL, "x509", "-noout", "-enddate", "-in",
                                  self.etcd_tls.client_cert], capture_output=True, text=True,
                                 timeout=30).stdout.strip().split("=", 1)[-1]
            want = ssl.cert_time_to_seconds(end)
            got = value("snowflaked_etcd_tls_client_cert_expiry_timestamp_seconds")
            c.ok(got == want, "the client certificate in service is the Secret's tls.crt "
                 f"(snowflaked_etcd_tls_client_cert_expiry_timestamp_seconds {got} = its "
                 f"notAfter {end})", f"want {want}")
        if self.etcd_auth:
            ok = value("snowflaked_etcd_authentications_total", '{result="ok"}')
            c.ok(ok and ok >= 1, f"the daemon authenticated as {self.etcd_auth.USER!r} with the "
                 f"Secret's password (snowflaked_etcd_authentications_total{{result=\"ok\"}} "
                 f"{ok})", f"{ok}")
            denied = value("snowflaked_etcd_auth_refusals_total", '{reason="permission"}')
            c.ok(not denied, "no etcd call refused for the role's permissions (readwrite on "
                 "the prefix is enough)", f"snowflaked_etcd_auth_refusals_total"
                 f"{{reason=\"permission\"}} {denied}")

    def etcd_version(self, client):
        try:
            return self.etcd_post(client, "/v3/maintenance/status", {}).get("version", "?")
        except (OSError, ValueError):
            return "?"

    def etcd_range(self, client, prefix):
        """{key: value} of every key under prefix (etcd's JSON gateway: base64 both ways)."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        b64 = lambda t: base64.b64encode(t.encode()).decode()  # noqa: E731
        out = self.etcd_post(client, "/v3/kv/range", {"key": b64(prefix), "range_end": b64(end)})
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
                for kv in out.get("kvs", [])}

    def check_live_etcd(self):
        c, eff, etcd = self.c, self.eff, self.etcd
        if self.live_skip:
            print(f"SKIP the daemon started against etcd on loopback: {self.live_skip}")
            return
        flags, scheme = self.etcd_security() if self.etcd_secured else ((), "http")
        client = self.start_etcd(flags, scheme)
        if client is None:
            return
        if self.etcd_secured:
            try:
                if self.etcd_auth:
                    self.etcd_enable_auth(client)
                self.etcd_secret_volumes()
            except (OSError, ValueError, KeyError) as e:
                c.ok(False, "the loopback etcd's RBAC and the credential Secrets are set up",
                     str(e))
                return
        sf = eff["snowflake"]
        dc = sf["datacenter_id"]
        per_pod = eff["resolved"]["threads"] if sf["per_thread_worker_ids"] else 1
        want_workers = list(range(etcd["worker_min"], etcd["worker_min"] + per_pod))
        prefix = etcd["prefix"].rstrip("/")
        pod = self.pod_name(0)
        # The manifest's endpoints are the cluster's; here the loopback etcd (flag > env).
        if not c.ok(self.start_daemon(0, ("--set", f"snowflake.etcd.endpoints={client}")),
                    f"pod {pod} claims a slot from etcd and listens", f"exit {self.proc.poll()}"):
            print("     daemon log:\n" + self.daemon_log()[-3000:])
            return
        for body in self.probe_and_scrape():
            info = re.search(r"^snowflaked_identity_info\{([^}]*)\} 1$", body, re.M)
            labels = dict(re.findall(r'(\w+)="([^"]*)"', info.group(1))) if info else {}
            c.ok(labels.get("backend") == "etcd" and labels.get("datacenter") == str(dc),
                 f"snowflaked_identity_info says backend etcd, datacenter {dc}", f"{labels}")
            c.ok(re.search(r"^snowflaked_identity_fenced 0$", body, re.M),
                 "snowflaked_identity_fenced 0")
            if self.etcd_secured:
                self.check_etcd_client_metrics(body)
        try:
            new_id = json.loads(self.poll("/id")[2])["id"]
            parts = json.loads(http_get(f"http://127.0.0.1:{self.port['http']}/id/{new_id}")[2])
        except (TypeError, ValueError, KeyError, OSError) as e:
            parts = {"error": str(e)}
        c.ok(parts.get("worker") in want_workers and parts.get("datacenter") == dc,
             f"an ID from pod {pod} carries the lowest free worker ({want_workers}), datacenter "
             f"{dc}", f"{parts}")
        owners = {}
        try:
            owners = self.etcd_range(client, f"{prefix}/owner/")
        except (OSError, ValueError) as e:
            owners = {"error": str(e)}
        keys = {f"{prefix}/owner/{dc:07d}/{w:07d}" for w in want_workers}
        # Secured: read by the etcd's admin (over TLS with its own certificate, as root).
        via = "" if not self.etcd_secured else ", read" + (" over TLS" if self.etcd_tls else "") \
            + (" as root" if self.etcd_auth else "")
        c.ok(set(owners) == keys, f"etcd holds the owner key(s) {sorted(keys)} while it runs"
             f"{via}", f"{sorted(owners)}")
        self.check_memcached()
        self.check_second_pod(client, want_workers[-1] + 1)
        self.check_sigterm(set())  # no lease file in etcd mode: the floor is in etcd
        try:
            owners = self.etcd_range(client, f"{prefix}/owner/")
            floors = self.etcd_range(client, f"{prefix}/floor/")
        except (OSError, ValueError) as e:
            owners, floors = {"error": str(e)}, {}
        c.ok(not owners, "after SIGTERM the slot is free at once (lease revoked: no owner "
             f"key{via})", f"{sorted(owners)}")
        fkeys = {f"{prefix}/floor/{dc:07d}/{w:07d}" for w in want_workers}
        c.ok(fkeys <= set(floors), f"the floor of the slot stays in etcd ({sorted(fkeys)})",
             f"{sorted(floors)}")
        if c.failed:
            print("     daemon log:\n" + self.daemon_log()[-3000:])

    def check_second_pod(self, client, want):
        """A second replica of the same template, beside the first: the next slot, never the
        first one's worker id. Stopped again with SIGTERM (its slot freed)."""
        c = self.c
        if want > self.etcd["worker_max"]:
            print("     (one pod fills the range: no second pod started)")
            return
        first = (self.proc, self.port, self.data_dir, self.log_path)
        try:
            started = self.start_daemon(1, ("--set", f"snowflake.etcd.endpoints={client}"))
            if not c.ok(started, f"a second pod {self.pod_name(1)} starts beside it",
                        f"exit {self.proc.poll()}"):
                print("     daemon log:\n" + self.daemon_log()[-3000:])
                return
            try:
                new_id = json.loads(self.poll("/id")[2])["id"]
                parts = json.loads(
                    http_get(f"http://127.0.0.1:{self.port['http']}/id/{new_id}")[2])
            except (TypeError, ValueError, KeyError, OSError) as e:
                parts = {"error": str(e)}
            c.ok(parts.get("worker") == want,
                 f"the second pod claims the next free worker {want}", f"{parts}")
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=self.tgps - self.pre_stop)
            except subprocess.TimeoutExpired:
                rc = None
            c.ok(rc == 0, "the second pod: SIGTERM, exit 0", f"exit {rc}")
        finally:
            if self.proc is not first[0] and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc, self.port, self.data_dir, self.log_path = first

    def stop(self):
        for proc in (self.proc, self.etcd_proc):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()

    def run(self):
        print(f"== {self.args.manifest}")
        try:
            self.find_objects()
            self.find_config()
            if self.is_deployment:
                self.check_etcd_identity()
                self.check_etcd_credentials()
            else:
                self.check_ordinals()
        except SetupError:
            return self.c.summary()
        self.check_env()
        self.check_ports()
        self.check_tls()
        self.check_probes_and_scraping()
        self.check_network_policies()
        self.check_prometheus_rules()
        self.check_request_rate_autoscaling()
        self.check_storage_shutdown_memory()
        self.check_container_config()
        self.check_same_pod()
        if not self.args.no_live:
            if self.is_deployment:
                self.check_live_etcd()
            else:
                self.check_live()
        return self.c.summary()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifest", help="output of kubectl kustomize")
    ap.add_argument("-b", "--binary", default="build/snowflaked")
    ap.add_argument("--container-config", help="the image's config.json, to compare with")
    ap.add_argument("--expect-refusal", metavar="TEXT",
                    help="the manifest must not start as is: --check-config names TEXT")
    ap.add_argument("--same-pod-as", metavar="RENDERED",
                    help="a rendered manifest whose pod template this one's must match on "
                    "security, resources, ports, preStop and args (the base)")
    ap.add_argument("--no-live", action="store_true", help="static checks only, start nothing")
    ap.add_argument("--etcd-credentials", choices=("auto", "none", "full"), default="auto",
                    help="whether the daemon knows snowflake.etcd.tls.* / auth.* (issue 24): "
                    "none leaves them out of --check-config; auto (default): read from this "
                    "repository's source")
    ap.add_argument("--adapter-config", metavar="FILE", default=ADAPTER_CONFIG,
                    help="prometheus-adapter's config.yaml, or a rendered manifest with its "
                    "ConfigMap (default: deploy/k8s/prometheus-adapter/config.yaml)")
    ap.add_argument("--metrics-doc", metavar="FILE", default=METRICS_DOC,
                    help="the metrics reference the recording rules' inputs must be in "
                    "(default: docs/metrics.md)")
    ap.add_argument("--etcd-support", choices=("auto", "config", "full"), default="auto",
                    help="config: the daemon knows the snowflake.etcd keys but has no etcd "
                    "backend, so a Deployment's daemon is not started (SKIP line); full: it is "
                    "started against a loopback etcd; auto (default): read from this "
                    "repository's source")
    args = ap.parse_args()
    if not os.access(args.binary, os.X_OK):
        print(f"check_manifest: {args.binary} not found or not executable (make build)",
              file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="snowflaked-k8s-check-")
    check = None
    try:
        check = ManifestCheck(args, tmp)
        return check.run()
    finally:
        if check is not None:
            check.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    # timeout(1) and Ctrl-C: unwind through the finally blocks, which kill the daemon by PID.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
