#!/bin/sh
# Validates the Kubernetes material without a cluster (run by `make test-deploy`):
#   1. yamllint -s on the sources (deploy/k8s/.yamllint);
#   2. renders the base and every overlay with `kubectl kustomize` (warnings fail);
#   3. validates every rendered object against its schema with the npm package kubernetes-models,
#      rejecting fields that are not in the schema (validate-schema.mjs, with its self-test);
#   4. checks each rendered manifest against the binary (check_manifest.py): the ConfigMap's
#      config.json under the pods' simulated environment, ports, probes, scrape paths, env
#      names, worker ids for every ordinal, then the daemon started on loopback and probed;
#   5. checks that a StatefulSet overlay scaled one replica beyond the worker-id space fails step 4;
#   6. checks that a Deployment overlay (worker ids from etcd) whose HorizontalPodAutoscaler may
#      scale beyond the worker slots fails step 4;
#   7. the PrometheusRule (components/servicemonitor): generated from
#      deploy/monitoring/snowflaked.rules.yml and up to date (gen_prometheusrule.py --check, before
#      step 1); step 3 validates its schema, step 4 that its spec.groups equal the rules file and
#      pass `promtool check rules`; and an overlay that edits one rule must fail step 4;
#   8. TLS (components/tls, overlays/example-tls): step 3 checks the Certificate, its Secret's
#      mount and the probe schemes, step 4 rotates the certificate kubelet-style under the live
#      daemon; and the TLS overlay with one mistake each (the Secret of another name, an HTTP
#      probe on the HTTPS port, the certificate through a subPath mount, watch_files off, a
#      renewal after the expiry alert) must fail step 4; the overlay with components/tls-mutual
#      must pass step 4 whole (mutual TLS live);
#   9. a secured etcd (components/etcd-tls, etcd-auth, overlays/etcd-deployment-secured): step 4
#      checks the credential Secrets' mounts against the configured files, then runs the daemon
#      against a loopback etcd with TLS client certificates and RBAC, reading the credentials from
#      kubelet-style Secret volumes at the manifest's paths (must not SKIP); the overlay with one
#      mistake each (http:// endpoints with a CA mounted, the CA through a subPath mount, a
#      user-provided Secret without its annotation, the password file outside a Secret volume,
#      a password as an env value) must fail step 4; with components/etcd-tls-cert-manager the
#      client certificate's Secret is the manifest's own and step 4 passes.
#  10. request-rate autoscaling (overlays/etcd-deployment's HPA, deploy/k8s/prometheus-adapter):
#      the adapter's ConfigMap rendered and schema-checked; step 4 (and here, with the rendered
#      ConfigMap) checks the HPA's Pods metric against the adapter's rules, their series against
#      the recording rule of deploy/monitoring (promtool runs the adapter's query), its inputs
#      against docs/metrics.md, and the topologySpreadConstraints; and one mistake each (a metric
#      the adapter does not serve, no CPU metric, a target above the CPU budget, too short a
#      scale-down window, a hard zone spread, a spread that selects no pod, an adapter series no
#      rule records, a rate() around the recorded rate, the pod mapped from a label the scrape
#      does not set, a query not grouped by pod, an input missing from docs/metrics.md) must
#      fail it.
#
# Usage: sh deploy/k8s/validate.sh [-b BUILD_DIR]      (default build/; or SNOWFLAKED_BIN=path)
#
# Installs what is missing from Debian (yamllint, kubernetes-client, nodejs + npm, python3-yaml,
# etcd-server for the Deployment overlay's daemon, prometheus for promtool, openssl for the TLS
# overlay's certificates; with sudo when not root) and the npm packages pinned by
# package.json/package-lock.json into deploy/k8s/node_modules/ (git-ignored; reused while the
# lock file and Node's major version are unchanged). Every step runs under `timeout`; temporary
# files are removed on exit; the daemon check_manifest.py starts is killed by PID (and dies with
# it).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD_DIR=build
while [ $# -gt 0 ]; do
    case "$1" in
        -b) BUILD_DIR=${2:?-b needs a directory}; shift 2 ;;
        -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
        *) echo "validate.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
BIN=${SNOWFLAKED_BIN:-$BUILD_DIR/snowflaked}

T0=$(date +%s)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/snowflaked-k8s-validate.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { printf '== %s\n' "$*"; }
die() { printf 'validate.sh: %s\n' "$*" >&2; exit 1; }

[ -x "$BIN" ] || die "$BIN not found: build the daemon first (make build)"

# ---- tools ----------------------------------------------------------------------------------

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && SUDO=sudo
fi
APT="timeout 300 $SUDO apt-get -qq"

apt_install() {
    say "installing from Debian: $*"
    [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ] || die "need root or sudo to install: $*"
    export DEBIAN_FRONTEND=noninteractive
    # A first failure may be stale package lists: update once, then try again.
    if ! $APT install -y --no-install-recommends "$@" >"$TMP/apt.log" 2>&1; then
        { $APT update && $APT install -y --no-install-recommends "$@"; } >"$TMP/apt.log" 2>&1 ||
            { cat "$TMP/apt.log" >&2; die "apt-get install $* failed"; }
    fi
}

missing=""
command -v yamllint >/dev/null 2>&1 || missing="$missing yamllint"
# Debian's kubectl is the package kubernetes-client. (Debian 12's is 1.20, whose kustomize is too
# old for these files, as the version check below says; this project's machines come with a
# current kubectl.)
command -v kubectl >/dev/null 2>&1 || missing="$missing kubernetes-client"
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
# The Deployment overlay's daemon claims its worker id from a real (single-member, loopback) etcd.
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
# promtool (Debian's prometheus package) checks the PrometheusRule's rules.
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
# openssl makes the certificates of the TLS overlay's live check.
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
# python3 with PyYAML: the one on PATH if it has it, else Debian's with python3-yaml.
PY=python3
if ! python3 -c 'import yaml' >/dev/null 2>&1; then
    PY=/usr/bin/python3
    $PY -c 'import yaml' >/dev/null 2>&1 || missing="$missing python3 python3-yaml"
fi
# shellcheck disable=SC2086  # word splitting of the package list is intended
[ -z "$missing" ] || apt_install $missing

kver=$(kubectl version --client -o json 2>/dev/null |
    sed -n 's/.*"kustomizeVersion": *"v\{0,1\}\([0-9]*\).*/\1/p')
if [ -z "$kver" ] || [ "$kver" -lt 5 ]; then
    die "$(command -v kubectl) reports kustomize ${kver:+v}${kver:-(none: kubectl < 1.24)};" \
        "these files need kubectl's kustomize v5 (kubectl >= 1.27): install a current kubectl"
fi
say "tools: $(kubectl version --client 2>/dev/null | tr '\n' ' ')| $(yamllint --version)" \
    "| node $(node --version) | $($PY --version 2>&1) + PyYAML"

# ---- 1. yamllint ----------------------------------------------------------------------------

say "PrometheusRule up to date with deploy/monitoring/snowflaked.rules.yml"
timeout 60 "$PY" "$ROOT/deploy/monitoring/gen_prometheusrule.py" --check

say "yamllint -s (sources)"
timeout 60 yamllint -s -c "$HERE/.yamllint" "$HERE"

# ---- 2. render --------------------------------------------------------------------------------

render() { # DIR OUT
    if ! timeout 60 kubectl kustomize "$1" >"$2" 2>"$TMP/kustomize.err"; then
        cat "$TMP/kustomize.err" >&2
        die "kubectl kustomize $1 failed"
    fi
    if [ -s "$TMP/kustomize.err" ]; then
        cat "$TMP/kustomize.err" >&2
        die "kubectl kustomize $1 printed warnings"
    fi
    kinds=$(grep '^kind:' "$2" | cut -d' ' -f2 | tr '\n' ' ')
    say "rendered ${1#"$ROOT"/}: $(grep -c '^kind:' "$2") objects ($kinds)"
}
render "$HERE/base" "$TMP/base.yaml"
overlays=""
rendered="$TMP/base.yaml"
for k in "$HERE"/overlays/*/kustomization.yaml; do
    [ -f "$k" ] || continue
    name=$(basename "$(dirname "$k")")
    render "$(dirname "$k")" "$TMP/overlay-$name.yaml"
    overlays="$overlays $name"
    rendered="$rendered $TMP/overlay-$name.yaml"
done
[ -n "$overlays" ] || die "no overlays under $HERE/overlays"

# ---- 3. schemas -------------------------------------------------------------------------------

lock_hash=$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -c1-16)
stamp="$lock_hash node$(node -p 'process.versions.node.split(".")[0]')"
stamp_file="$HERE/node_modules/.validate-stamp"
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ]; then
    say "npm packages: reusing deploy/k8s/node_modules ($stamp)"
else
    say "npm packages: installing the pinned kubernetes-models & co. into deploy/k8s/node_modules"
    t=$(date +%s)
    (cd "$HERE" && timeout 300 npm ci --no-audit --no-fund --prefer-offline --loglevel=error) \
        >"$TMP/npm.log" 2>&1 || { cat "$TMP/npm.log" >&2; die "npm ci failed"; }
    printf '%s\n' "$stamp" >"$stamp_file"
    say "npm packages: installed in $(($(date +%s) - t)) s"
fi
say "schema validation (kubernetes-models; unknown fields rejected; self-test)"
# shellcheck disable=SC2086  # one argument per rendered file (paths without spaces: mktemp)
timeout 120 node "$HERE/validate-schema.mjs" --self-test $rendered

# ---- 4. the manifests against the binary ------------------------------------------------------

check() { timeout 120 "$PY" "$HERE/check_manifest.py" -b "$BIN" "$@"; }
CONTAINER_CONFIG="$ROOT/deploy/container/config.json"
say "check_manifest.py: base (must refuse to start until an overlay sets the datacenter id)"
check --container-config "$CONTAINER_CONFIG" --expect-refusal SNOWFLAKED_SNOWFLAKE_DATACENTER_ID \
    "$TMP/base.yaml"
for o in $overlays; do
    say "check_manifest.py: overlay $o"
    # A Deployment's pod template is a copy of the base StatefulSet's: it must not drift from it.
    same=""
    grep -q '^kind: Deployment$' "$TMP/overlay-$o.yaml" && same="--same-pod-as $TMP/base.yaml"
    # shellcheck disable=SC2086  # $same is empty or two words
    check --container-config "$CONTAINER_CONFIG" $same "$TMP/overlay-$o.yaml" \
        >"$TMP/check-$o.out" ||
        { cat "$TMP/check-$o.out"; die "check_manifest.py failed for overlay $o"; }
    cat "$TMP/check-$o.out"
done

# Writes DIR/kustomization.yaml: a Kustomization of the overlay (or component user) OVERLAY_DIR
# plus the fields read from standard input.
new_kustomization() { # DIR OVERLAY_DIR
    rm -rf "$1"
    mkdir "$1"
    {
        printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n'
        printf 'resources:\n  - %s\n' "$(realpath --relative-to="$1" "$2")"
        cat
    } >"$1/kustomization.yaml"
}

# check_manifest.py must refuse the rendered manifest $1.yaml with a FAIL matching $2 ($3 says
# what was rendered); the FAIL lines are shown.
must_be_refused() {
    if check --no-live "$1.yaml" >"$1.out" 2>&1; then
        cat "$1.out"
        die "$3 passed check_manifest.py"
    fi
    grep -q "$2" "$1.out" || { cat "$1.out"; die "no refusal matching '$2' for $3"; }
    grep '^FAIL' "$1.out" | cut -c1-200
}

# ---- 5. too many replicas cannot pass ---------------------------------------------------------

first=""
for o in $overlays; do
    if grep -q '^kind: StatefulSet$' "$TMP/overlay-$o.yaml"; then first=$o; break; fi
done
[ -n "$first" ] || die "no StatefulSet overlay (the default path) under $HERE/overlays"
cap=$(sed -n 's/.*(at most \([0-9]*\) replicas).*/\1/p' "$TMP/check-$first.out" | head -n 1)
[ -n "$cap" ] || die "could not read the replica limit from check_manifest.py"
too_many=$((cap + 1))
new_kustomization "$TMP/too-many" "$HERE/overlays/$first" <<EOF
replicas:
  - name: snowflaked
    count: $too_many
EOF
render "$TMP/too-many" "$TMP/too-many.yaml"
say "check_manifest.py: overlay $first scaled to $too_many replicas must fail"
must_be_refused "$TMP/too-many" "does not fit worker_bits" "$too_many replicas"
say "ok: $too_many replicas rejected"

# Renders overlay $2 with one JSON patch (replace $4 in every $3, or only the one named $6, by
# $5) into DIR $1 and $1.yaml.
render_patched() { # DIR OVERLAY KIND PATH VALUE [NAME]
    new_kustomization "$1" "$HERE/overlays/$2" <<EOF
patches:
  - target:
      kind: $3${6:+
      name: $6}
    patch: |-
      - op: replace
        path: $4
        value: $5
EOF
    render "$1" "$1.yaml"
}

# ---- 6. an autoscaler beyond the worker slots cannot pass -------------------------------------

hpa_checked=0
for o in $overlays; do
    grep -q '^kind: HorizontalPodAutoscaler$' "$TMP/overlay-$o.yaml" || continue
    cap=$(sed -n 's/.*(HPA: at most \([0-9]*\) replicas).*/\1/p' "$TMP/check-$o.out" | head -n 1)
    [ -n "$cap" ] || die "could not read the HPA limit of overlay $o from check_manifest.py"
    too_many=$((cap + 1))
    render_patched "$TMP/hpa-too-many" "$o" HorizontalPodAutoscaler /spec/maxReplicas "$too_many"
    say "check_manifest.py: overlay $o with HPA maxReplicas $too_many must fail"
    must_be_refused "$TMP/hpa-too-many" "exceeds the [0-9]* worker slots" \
        "HPA maxReplicas $too_many"
    say "ok: HPA maxReplicas $too_many rejected"
    hpa_checked=$((hpa_checked + 1))
done
[ "$hpa_checked" -gt 0 ] ||
    die "no overlay with a HorizontalPodAutoscaler (overlays/etcd-deployment)"

# ---- 7. a PrometheusRule that drifted from the rules file cannot pass -------------------------

rule_checked=0
for o in $overlays; do
    grep -q '^kind: PrometheusRule$' "$TMP/overlay-$o.yaml" || continue
    render_patched "$TMP/rule-drift" "$o" PrometheusRule /spec/groups/0/rules/0/expr "vector(1)"
    say "check_manifest.py: overlay $o with an edited PrometheusRule must fail"
    must_be_refused "$TMP/rule-drift" "spec.groups = " "an edited PrometheusRule"
    say "ok: edited PrometheusRule rejected"
    rule_checked=1
    break
done
[ "$rule_checked" -gt 0 ] || die "no overlay with a PrometheusRule (components/servicemonitor)"

# ---- 8. TLS mistakes cannot pass ---------------------------------------------------------------

tls_checked=0
for o in $overlays; do
    grep -q '^kind: Certificate$' "$TMP/overlay-$o.yaml" || continue
    grep -q 'SNOWFLAKED_SERVER_TLS_PORT' "$TMP/overlay-$o.yaml" || continue
    sts=/spec/template/spec/containers/0
    # kind | name | JSON path | value | what | the refusal check_manifest.py must print
    # (one mistake a line; the lines are long rather than split)
    while IFS='|' read -r kind name path value what refusal <&3; do
        render_patched "$TMP/tls-mistake" "$o" "$kind" "$path" "$value" "$name"
        say "check_manifest.py: overlay $o with $what must fail"
        must_be_refused "$TMP/tls-mistake" "$refusal" "$what"
        say "ok: $what rejected"
    done 3<<EOF
Certificate|snowflaked-tls|/spec/secretName|snowflaked-tls-other|a Certificate whose Secret is not the mounted one|which a Certificate (spec.secretName) or Secret
StatefulSet||$sts/readinessProbe/httpGet/scheme|HTTP|an HTTP readiness probe on the HTTPS port|readinessProbe: scheme HTTPS
StatefulSet||$sts/volumeMounts/0|{name: tls, mountPath: /etc/snowflaked-tls/tls.crt, subPath: tls.crt, readOnly: true}|the certificate through a subPath mount|never sees the kubelet's ..data
StatefulSet||$sts/env/3|{name: SNOWFLAKED_SERVER_TLS_WATCH_FILES, value: "false"}|server.tls.watch_files false|server.tls.watch_files is on
Certificate|snowflaked-tls|/spec/renewBefore|240h|a renewal 10 days before expiry|certificate-expiry alert of deploy/monitoring
EOF
    # The documented mutual-TLS component on top: checked whole, the daemon live.
    new_kustomization "$TMP/tls-mutual" "$HERE/overlays/$o" <<EOF
components:
  - $(realpath --relative-to="$TMP/tls-mutual" "$HERE/components/tls-mutual")
EOF
    render "$TMP/tls-mutual" "$TMP/tls-mutual.yaml"
    say "check_manifest.py: overlay $o with components/tls-mutual"
    check "$TMP/tls-mutual.yaml" >"$TMP/tls-mutual.out" ||
        { cat "$TMP/tls-mutual.out"; die "check_manifest.py failed for $o + tls-mutual"; }
    grep -E '^(ok .*(client_ca_file reads|verify_client|over TLS|without a cert)|check_manifest:)' \
        "$TMP/tls-mutual.out"
    tls_checked=1
    break
done
[ "$tls_checked" -gt 0 ] || die "no overlay with TLS and a Certificate (components/tls)"

# ---- 9. etcd credential mistakes cannot pass --------------------------------------------------

# Renders overlay $2 with the strategic-merge patch read from standard input into $1.yaml.
render_smp() { # DIR OVERLAY
    patch=$(sed 's/^/      /')
    new_kustomization "$1" "$HERE/overlays/$2" <<EOF
patches:
  - patch: |-
$patch
EOF
    render "$1" "$1.yaml"
}
# A patch of the Deployment's container snowflaked; $1 is the body under the container's name.
dep_patch() {
    printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: snowflaked\nspec:\n'
    printf '  template:\n    spec:\n      containers:\n        - name: snowflaked\n'
    printf '%s\n' "$1" | sed 's/^/          /'
}
cred_checked=0
for o in $overlays; do
    grep -q 'SNOWFLAKED_SNOWFLAKE_ETCD_TLS_CA_FILE' "$TMP/overlay-$o.yaml" || continue
    grep -q 'SNOWFLAKED_SNOWFLAKE_ETCD_AUTH_PASSWORD_FILE' "$TMP/overlay-$o.yaml" || continue
    grep -q '^ok .*etcd over TLS: a CA file' "$TMP/check-$o.out" ||
        die "overlay $o: check_manifest.py did not check the etcd CA"
    for live in "the client certificate in service is the Secret's tls.crt" \
        "the daemon authenticated as" "etcd holds the owner key.*read over TLS as root" \
        "after SIGTERM the slot is free"; do
        grep -q "^ok   $live" "$TMP/check-$o.out" ||
            die "overlay $o: the daemon was not run live against the secured etcd ($live)"
    done
    # what | the refusal check_manifest.py must print | the patch (one mistake a line)
    while IFS='|' read -r what refusal patch <&3; do
        case "$patch" in
            endpoints)
                new_kustomization "$TMP/cred-mistake" "$HERE/overlays/$o" <<EOF
configMapGenerator:
  - name: snowflaked-etcd
    behavior: replace
    literals:
      - endpoints=http://10.0.0.11:2379,http://10.0.0.12:2379
EOF
                render "$TMP/cred-mistake" "$TMP/cred-mistake.yaml" ;;
            annotation)
                render_smp "$TMP/cred-mistake" "$o" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: snowflaked
spec:
  template:
    metadata:
      annotations:
        user-provided-secret.snowflaked.io/snowflaked-etcd-auth: null
EOF
                ;;
            *)
                dep_patch "$patch" | render_smp "$TMP/cred-mistake" "$o" ;;
        esac
        say "check_manifest.py: overlay $o with $what must fail"
        must_be_refused "$TMP/cred-mistake" "$refusal" "$what"
        say "ok: $what rejected"
    done 3<<EOF
http:// endpoints with etcd's CA mounted|http:// endpoints with snowflake.etcd.tls.* set: use https://|endpoints
the etcd CA through a subPath mount|subPath mount|volumeMounts: [{name: etcd-tls, mountPath: /etc/snowflaked-etcd-tls/ca.crt, subPath: ca.crt, readOnly: true}]
a user-provided Secret without its annotation|no annotation user-provided-secret|annotation
the password file outside the Secret volume|password_file /etc/snowflaked/etcd-password is a file of a Secret volume|env: [{name: SNOWFLAKED_SNOWFLAKE_ETCD_AUTH_PASSWORD_FILE, value: /etc/snowflaked/etcd-password}]
a password as an env value|no password in an env value|env: [{name: ETCD_PASSWORD, value: hunter2}]
EOF
    new_kustomization "$TMP/cred-cm" "$HERE/overlays/$o" <<EOF
components:
  - $(realpath --relative-to="$TMP/cred-cm" "$HERE/components/etcd-tls-cert-manager")
EOF
    render "$TMP/cred-cm" "$TMP/cred-cm.yaml"
    say "check_manifest.py: overlay $o with components/etcd-tls-cert-manager"
    check --no-live "$TMP/cred-cm.yaml" >"$TMP/cred-cm.out" ||
        { cat "$TMP/cred-cm.out"; die "check_manifest.py failed for $o + etcd-tls-cert-manager"; }
    grep -q "Secret snowflaked-etcd-client of the manifest has key tls.crt" "$TMP/cred-cm.out" ||
        { cat "$TMP/cred-cm.out"; die "the Certificate's Secret was not recognised"; }
    cred_checked=1
    break
done
[ "$cred_checked" -gt 0 ] ||
    die "no overlay with the etcd credential components (overlays/etcd-deployment-secured)"

# ---- 10. request-rate autoscaling: HPA -> prometheus-adapter -> recording rule -------------

# check_manifest.py (static) must refuse the rendered manifest $1.yaml with a FAIL matching $2
# ($3 says what); further arguments go to check_manifest.py.
autoscaling_refused() { # BASE REFUSAL WHAT [ARGS...]
    base=$1 refusal=$2 what=$3
    shift 3
    say "check_manifest.py: $what must fail"
    if check --no-live "$@" "$base.yaml" >"$base.out" 2>&1; then
        cat "$base.out"
        die "$what passed check_manifest.py"
    fi
    grep -q "$refusal" "$base.out" ||
        { cat "$base.out"; die "no refusal matching '$refusal' for $what"; }
    grep '^FAIL' "$base.out" | cut -c1-200
    say "ok: $what rejected"
}

ADAPTER="$HERE/prometheus-adapter"
render "$ADAPTER" "$TMP/prometheus-adapter.yaml"
say "schema validation of the prometheus-adapter ConfigMap"
timeout 60 node "$HERE/validate-schema.mjs" "$TMP/prometheus-adapter.yaml"
rate_checked=0
for o in $overlays; do
    grep -q '^kind: HorizontalPodAutoscaler$' "$TMP/overlay-$o.yaml" || continue
    grep -q 'type: Pods$' "$TMP/overlay-$o.yaml" || continue
    grep -q '^ok   HPA Pods metric .* is served by prometheus-adapter' "$TMP/check-$o.out" ||
        die "step 4 did not check overlay $o's request-rate metric"
    say "check_manifest.py: overlay $o with the rendered prometheus-adapter ConfigMap"
    check --no-live --adapter-config "$TMP/prometheus-adapter.yaml" "$TMP/overlay-$o.yaml" \
        >"$TMP/rate.out" ||
        { cat "$TMP/rate.out"; die "check_manifest.py failed for $o with the adapter ConfigMap"; }
    grep -E '^ok   (HPA |the adapter|prometheus-adapter|recording rule|topology|the zone)' \
        "$TMP/rate.out"
    pods_metric=$(sed -n 's/^ok   HPA Pods metric \([a-z_]*\) is served.*/\1/p' "$TMP/rate.out")
    pm=/spec/metrics/0
    tsc=/spec/template/spec/topologySpreadConstraints
    # kind | JSON path | value | what | the refusal check_manifest.py must print
    while IFS='|' read -r kind path value what refusal <&3; do
        render_patched "$TMP/rate-mistake" "$o" "$kind" "$path" "$value"
        autoscaling_refused "$TMP/rate-mistake" "$refusal" "overlay $o with $what"
    done 3<<EOF
HorizontalPodAutoscaler|$pm/pods/metric/name|snowflaked_request_rate|an HPA metric the adapter does not serve|not served by prometheus-adapter
HorizontalPodAutoscaler|/spec/metrics|[{type: Pods, pods: {metric: {name: $pods_metric}, target: {type: AverageValue, averageValue: 10k}}}]|no CPU metric beside the request rate|also scales on CPU
HorizontalPodAutoscaler|$pm/pods/target/averageValue|50k|a request-rate target above the CPU budget|the request rate never scales
HorizontalPodAutoscaler|/spec/behavior/scaleDown/stabilizationWindowSeconds|30|scale-down damped less than the rate window|>= the recording rule's rate window
Deployment|$tsc/0/whenUnsatisfiable|DoNotSchedule|a hard zone spread|the zone spread is ScheduleAnyway
Deployment|$tsc/1/labelSelector|{matchLabels: {app.kubernetes.io/name: other}}|a spread that selects no pod|labelSelector selects the pods
EOF
    # The adapter's rules and the metrics reference, each with one mistake.
    a="$TMP/adapter-mistake.yaml"
    while IFS='|' read -r from to what refusal <&3; do
        sed "s/$from/$to/" "$ADAPTER/config.yaml" >"$a"
        ! cmp -s "$a" "$ADAPTER/config.yaml" || die "could not make $what ($from)"
        autoscaling_refused "$TMP/overlay-$o" "$refusal" "overlay $o with $what" \
            --adapter-config "$a"
    done 3<<'EOF'
seriesQuery: 'instance:snowflaked_requests:rate2m|seriesQuery: 'instance:snowflaked_requests:rate5m|an adapter series no recording rule produces|not a recording rule there
(<<\.Series>>{<<\.LabelMatchers>>})|(rate(<<.Series>>{<<.LabelMatchers>>}[2m]))|a rate() around the recorded rate in the adapter's query|gives each pod its recorded rate
pod: {resource: pod}|pod_name: {resource: pod}|the pod mapped from a label the scrape does not set|carry the namespace and pod name
max by (<<\.GroupBy>>)|max|an adapter query that does not group by pod|gives each pod its recorded rate
EOF
    doc="$TMP/metrics-mistake.md"
    # shellcheck disable=SC2016  # a literal backquote
    grep -v '^| `snowflaked_memcached_commands_total`' "$ROOT/docs/metrics.md" >"$doc"
    autoscaling_refused "$TMP/overlay-$o" "not documented there" \
        "overlay $o with a recording-rule input missing from docs/metrics.md" --metrics-doc "$doc"
    rate_checked=1
done
[ "$rate_checked" -gt 0 ] ||
    die "no overlay whose HPA scales on request rate (overlays/etcd-deployment)"

say "validate.sh: all checks passed in $(($(date +%s) - T0)) s"
