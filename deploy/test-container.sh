#!/bin/bash
# Builds the snowflaked container image with podman and proves it from outside, on loopback only.
#
#   deploy/test-container.sh              # as root; about 1-2 minutes once the base image exists
#   RUN_TESTS=1 deploy/test-container.sh  # also run `make test` in the build stage (slower)
#
# What it does: installs podman/runc/debootstrap/curl if missing; writes a containers.conf for this
# machine (runc, default ulimits within the host's hard limits) and exports CONTAINERS_CONF; makes
# the debian:bookworm-slim base image if it is missing (deploy/container/base-image.sh, kept for
# reuse); `podman build --format docker`; then runs the image with a named volume and checks:
# /id, /readyz, the HEALTHCHECK (and that it fails when nothing answers), uid 10001 as PID 1, the
# memcached port, the worker-id rule, a clean `podman stop` (exit code 0 within the stop timeout,
# drain and snapshot lines logged), the cache surviving stop/start and a new container on the same
# volume run with --read-only --cap-drop ALL (as the Kubernetes manifests run it), the same with
# TLS on as deploy/k8s/components/tls sets it (HTTPS, memcached over TLS, a certificate rotated by
# a kubelet-style ..data swap), the image metadata, and the image size (FAIL above 100 MB). Everything it started
# (containers, the volume, the test tag, temp files) is removed on exit, failure included.
# Exit code 0 only if every check passed. Needs root (rootful podman, debootstrap).
# shellcheck disable=SC2016  # single-quoted scripts for eval and bash -c expand later, on purpose
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1

TAG=${SNOWFLAKED_TEST_TAG:-localhost/snowflaked:test}
RUN_TESTS=${RUN_TESTS:-0}
MAX_IMAGE_BYTES=$((100 * 1000 * 1000)) # 100 MB as podman counts them
STOP_TIMEOUT=10                         # podman's and Docker's default
NAME=snowflaked-test-$$
NAME2=snowflaked-test2-$$
NAME3=snowflaked-test3-$$
VOLUME_NAME=snowflaked-test-data-$$
WORK=$(mktemp -d /tmp/snowflaked-container-test.XXXXXX)
T0=$(date +%s)

PASSED=0
FAILED=0
RESULTS=()
say() { printf 'test-container: %s\n' "$*" >&2; }
pass() { PASSED=$((PASSED + 1)); RESULTS+=("PASS  $*"); say "PASS $*"; }
fail() { FAILED=$((FAILED + 1)); RESULTS+=("FAIL  $*"); say "FAIL $*"; }
check() { # check "description" command...
    local what=$1; shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}

# podman without systemd logs an error for every healthcheck timer it cannot create or remove;
# the checks here run the health check by hand, so that line is noise.
pm() { # pm SECONDS podman-args...
    local t=$1; shift
    timeout --kill-after=5 "$t" podman "$@" 2> >(grep -v 'systemd connection' >&2)
}

summary() {
    local elapsed=$(($(date +%s) - T0))
    echo
    echo "=== snowflaked container test: $PASSED passed, $FAILED failed (${elapsed}s) ==="
    local r
    for r in "${RESULTS[@]}"; do echo "  $r"; done
    [ -n "${IMAGE_SIZE:-}" ] && echo "  image $TAG: $IMAGE_SIZE bytes ($((IMAGE_SIZE / 1000000)) MB)"
    if [ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$FAILED" -gt 0 ] || [ "$rc" -ne 0 ]; then
        local c
        for c in "$NAME" "$NAME2" "$NAME3"; do
            if podman container exists "$c" 2>/dev/null; then
                say "logs of $c:"
                podman logs --tail 30 "$c" 2>&1 | grep -v 'systemd connection' | sed 's/^/    /' >&2
            fi
        done
    fi
    if command -v podman >/dev/null; then
        pm 30 rm -f -v -t 2 "$NAME" "$NAME2" "$NAME3" >/dev/null 2>&1
        pm 30 volume rm -f "$VOLUME_NAME" >/dev/null 2>&1
        # Untag only: the build's cached layers (the dependency layers above all) stay for next time.
        pm 30 rmi --no-prune "$TAG" >/dev/null 2>&1
    fi
    rm -rf "$WORK"
    summary
    if [ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ] && [ "$rc" -eq 0 ]; then exit 0; fi
    exit 1
}
trap cleanup EXIT
trap 'fail "interrupted"; exit 1' INT TERM

abort() { fail "$*"; exit 1; }

# --- prerequisites --------------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || abort "must run as root (rootful podman, debootstrap)"

# Rootful podman needs only these (apt brings conmon, containernetworking-plugins and iptables with
# podman); uidmap, fuse-overlayfs and slirp4netns are for rootless use, buildah's CLI is not used
# (podman build has it built in), and crun fails on this machine's hybrid cgroups.
need=()
for cmd in podman runc debootstrap curl; do
    command -v "$cmd" >/dev/null || need+=("$cmd") # each command's package has its name
done
if [ "${#need[@]}" -gt 0 ]; then
    say "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! timeout 300 apt-get update -qq >"$WORK/apt.log" 2>&1 ||
        ! timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}" >>"$WORK/apt.log" 2>&1; then
        tail -20 "$WORK/apt.log" >&2
        abort "apt-get install ${need[*]}"
    fi
fi

# containers.conf for this machine: the repository's file with nofile at the caller's hard limit
# (runc cannot raise a limit above it) and nproc no higher than its hard limit either.
hard_nofile=$(ulimit -Hn)
[ "$hard_nofile" = unlimited ] && hard_nofile=1048576
hard_nproc=$(ulimit -Hu)
nproc=32768
[ "$hard_nproc" != unlimited ] && [ "$hard_nproc" -lt "$nproc" ] && nproc=$hard_nproc
sed -e "s/\"nofile=[0-9]*:[0-9]*\"/\"nofile=$hard_nofile:$hard_nofile\"/" \
    -e "s/\"nproc=[0-9]*:[0-9]*\"/\"nproc=$nproc:$nproc\"/" \
    deploy/container/containers.conf >"$WORK/containers.conf"
export CONTAINERS_CONF=$WORK/containers.conf
say "CONTAINERS_CONF: runtime runc, nofile=$hard_nofile, nproc=$nproc"

# --- base image and build -------------------------------------------------------------------------
t=$(date +%s)
if timeout 900 deploy/container/base-image.sh; then
    pass "base image debian:bookworm-slim present ($(($(date +%s) - t))s)"
else
    abort "base image (deploy/container/base-image.sh)"
fi

version=$(sed -n 's/^project(snowflaked VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
t=$(date +%s)
say "podman build --format docker -t $TAG (RUN_TESTS=$RUN_TESTS); log in $WORK/build.log"
if pm 1500 build --format docker --layers -t "$TAG" --build-arg RUN_TESTS="$RUN_TESTS" \
        --build-arg VERSION="${version:-0.0.0}" . >"$WORK/build.log" 2>&1; then
    pass "podman build ($(($(date +%s) - t))s)"
else
    tail -40 "$WORK/build.log" >&2
    abort "podman build"
fi

# --- image metadata and size ----------------------------------------------------------------------
IMAGE_SIZE=$(podman image inspect --format '{{.Size}}' "$TAG")
check "image size $IMAGE_SIZE bytes <= $MAX_IMAGE_BYTES" [ "$IMAGE_SIZE" -le "$MAX_IMAGE_BYTES" ]
meta=$(podman image inspect --format \
    'user={{.Config.User}} stop={{.Config.StopSignal}} entry={{json .Config.Entrypoint}} cmd={{json .Config.Cmd}} wd={{.Config.WorkingDir}} ports={{range $p, $_ := .Config.ExposedPorts}}{{$p}},{{end}} vols={{range $v, $_ := .Config.Volumes}}{{$v}},{{end}}' \
    "$TAG")
say "image config: $meta"
expected='user=10001:10001 stop=SIGTERM entry=["/usr/local/bin/snowflaked"] cmd=["-c","/etc/snowflaked/config.json"] wd=/var/lib/snowflaked ports=11211/tcp,8080/tcp, vols=/var/lib/snowflaked,'
check "image config (user, stop signal, exec-form entrypoint, ports, volume)" [ "$meta" = "$expected" ]
labels=$(podman image inspect --format '{{index .Labels "org.opencontainers.image.title"}} {{index .Labels "org.opencontainers.image.version"}} {{index .Labels "org.opencontainers.image.licenses"}}' "$TAG")
check "OCI labels (title version licenses: $labels)" [ "$labels" = "snowflaked ${version:-0.0.0} MIT" ]
HEALTH_SCRIPT=$(podman image inspect --format '{{index .Config.Healthcheck.Test 3}}' "$TAG" 2>/dev/null)
check "HEALTHCHECK kept in the image (--format docker)" [ -n "$HEALTH_SCRIPT" ]

# --- the worker-id rule ---------------------------------------------------------------------------
out=$(pm 60 run --rm "$TAG" 2>&1)
rc=$?
check "refuses to start without an ordinal hostname (exit $rc: ${out##*: })" \
    bash -c '[ "$1" -ne 0 ] && grep -q "does not end in -<number>" <<<"$2"' _ "$rc" "$out"
out=$(pm 60 run --rm -e SNOWFLAKED_SNOWFLAKE_WORKER_ID=7 "$TAG" -c /etc/snowflaked/config.json \
    --check-config 2>&1)
check "SNOWFLAKED_SNOWFLAKE_WORKER_ID=7 replaces the ordinal rule" grep -q '"worker_id": *7' <<<"$out"

# --- run ------------------------------------------------------------------------------------------
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
HTTP_PORT=$(free_port)
MC_PORT=$(free_port)
while [ "$MC_PORT" = "$HTTP_PORT" ]; do MC_PORT=$(free_port); done
BASE=http://127.0.0.1:$HTTP_PORT

http_code() { curl -s -o "$WORK/body" -w '%{http_code}' --max-time 5 "$@"; }
wait_ready() { # up to 30 s for /readyz to answer 200
    local _
    for _ in $(seq 1 60); do
        [ "$(http_code "$BASE/readyz")" = 200 ] && return 0
        sleep 0.5
    done
    return 1
}
mc() { # mc "command lines": sends them to the memcached port, prints the reply (2 s at most)
    timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "%b" "$2" >&3; timeout 2 cat <&3' _ "$MC_PORT" "$1"
}

run_container() { # run_container NAME [podman run options...]
    local name=$1; shift
    pm 60 run -d --name "$name" --hostname snowflaked-0 "$@" \
        -p "127.0.0.1:$HTTP_PORT:8080" -p "127.0.0.1:$MC_PORT:11211" \
        -v "$VOLUME_NAME:/var/lib/snowflaked" "$TAG" >/dev/null
}

say "running $NAME on 127.0.0.1:$HTTP_PORT (HTTP) and 127.0.0.1:$MC_PORT (memcached)"
run_container "$NAME" || abort "podman run"
check "/readyz answers 200 within 30 s" wait_ready

code=$(http_code "$BASE/id")
ID1=$(sed -n 's/^{"id":"\([0-9]\{1,20\}\)"}$/\1/p' "$WORK/body")
check "GET /id: 200 with a decimal id ($code $(cat "$WORK/body"))" eval '[ "$code" = 200 ] && [ -n "$ID1" ]'
[ -n "$ID1" ] || ID1=0

if pm 30 healthcheck run "$NAME" >/dev/null; then
    check "podman healthcheck run: healthy" \
        [ "$(podman inspect --format '{{.State.Health.Status}}' "$NAME")" = healthy ]
else
    fail "podman healthcheck run"
fi
# The same health command against a port where nothing listens must fail, or it proves nothing.
check "health command fails when nothing answers" \
    bash -c '! timeout 10 podman exec -e SNOWFLAKED_SERVER_PORT=1 "$1" bash -c "$2" 2>/dev/null' \
    _ "$NAME" "$HEALTH_SCRIPT"

top=$(pm 30 top "$NAME" pid huser comm | awk 'NR > 1 { print $1, $2, $3 }')
check "PID 1 is snowflaked as uid 10001 (podman top: $top)" [ "$top" = "1 10001 snowflaked" ]
uid=$(pm 30 exec "$NAME" id -u)
check "podman exec id -u: $uid" [ "$uid" = 10001 ]

reply=$(mc 'version\r\nquit\r\n')
check "memcached port: version (${reply%$'\r'})" grep -q '^VERSION 1\.6\.18-snowflaked-' <<<"$reply"
reply=$(mc 'set via-mc 0 0 2\r\nmc\r\nquit\r\n')
check "memcached port: set" grep -q '^STORED' <<<"$reply"

VALUE="persisted-$$-$RANDOM"
code=$(http_code -X PUT --data-binary "$VALUE" "$BASE/cache/k")
check "PUT /cache/k: 201 ($code)" [ "$code" = 201 ]

# Stop with an idle keep-alive connection open: the drain must not wait for it.
exec 7<>"/dev/tcp/127.0.0.1/$HTTP_PORT" &&
    printf 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' >&7
t=$(date +%s%N)
pm $((STOP_TIMEOUT + 20)) stop -t "$STOP_TIMEOUT" "$NAME" >/dev/null
stop_ms=$((($(date +%s%N) - t) / 1000000))
exec 7<&- 7>&-
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$NAME")
check "podman stop: exit code 0 ($exit_code) in ${stop_ms} ms < ${STOP_TIMEOUT}s" \
    eval '[ "$exit_code" = 0 ] && [ "$stop_ms" -lt $((STOP_TIMEOUT * 1000)) ]'
podman logs "$NAME" >"$WORK/logs1" 2>&1
check "logged: SIGTERM received, draining" grep -q 'SIGTERM received, draining' "$WORK/logs1"
check "logged: final snapshot" grep -q 'cache: final snapshot: [0-9]* items' "$WORK/logs1"
check "logged: stopped" grep -qE 'INFO +stopped$' "$WORK/logs1"

pm 60 start "$NAME" >/dev/null || fail "podman start"
check "/readyz 200 after podman start" wait_ready
code=$(http_code "$BASE/cache/k")
check "cache survives stop/start: GET /cache/k ($code)" \
    eval '[ "$code" = 200 ] && [ "$(cat "$WORK/body")" = "$VALUE" ]'
code=$(http_code "$BASE/cache/via-mc")
check "memcached write visible over HTTP after restart ($code)" \
    eval '[ "$code" = 200 ] && [ "$(cat "$WORK/body")" = mc ]'
http_code "$BASE/id" >/dev/null
ID2=$(sed -n 's/^{"id":"\([0-9]\{1,20\}\)"}$/\1/p' "$WORK/body")
check "ids keep increasing across the restart ($ID1 < ${ID2:-none})" \
    eval '[ -n "$ID2" ] && [ "$ID2" -gt "$ID1" ]'

# A new container on the same volume (an upgrade) finds the data too; this one runs the way the
# Kubernetes manifests do: read-only root file system, no capabilities, no privilege escalation.
pm $((STOP_TIMEOUT + 20)) stop -t "$STOP_TIMEOUT" "$NAME" >/dev/null
pm 30 rm -v "$NAME" >/dev/null
run_container "$NAME2" --read-only --cap-drop ALL --security-opt no-new-privileges ||
    fail "podman run (second container)"
check "/readyz 200 in a new container on the same volume (--read-only, --cap-drop ALL)" wait_ready
code=$(http_code "$BASE/cache/k")
check "cache survives into a new container: GET /cache/k ($code)" \
    eval '[ "$code" = 200 ] && [ "$(cat "$WORK/body")" = "$VALUE" ]'
pm $((STOP_TIMEOUT + 20)) stop -t "$STOP_TIMEOUT" "$NAME2" >/dev/null
check "second container stops with exit code 0" \
    [ "$(podman inspect --format '{{.State.ExitCode}}' "$NAME2")" = 0 ]

# --- TLS, as deploy/k8s/components/tls runs it ----------------------------------------------------
# The component's SNOWFLAKED_* settings (read from its patch), the certificate in a directory laid
# out as the kubelet lays out a Secret volume (..data symlink; files root:10001 mode 0440, as with
# the pod's fsGroup) mounted read-only at the component's path, the container restricted as in
# the pod. HTTPS and memcached over TLS verified against the test's CA; then the certificate is
# renewed with the kubelet's ..data swap and a new connection must get the new serial.
TLS_PATCH=deploy/k8s/components/tls/statefulset-patch.yaml
# "- name: SNOWFLAKED_X" and its "value: ..." line -> SNOWFLAKED_X=...
mapfile -t tls_env < <(sed -n '/- name: SNOWFLAKED_/{s/.*- name: //;N
    s/\n *value: "\{0,1\}\([^"]*\)"\{0,1\}$/=\1/p;}' "$TLS_PATCH")
tls_mount=$(sed -n 's/^ *mountPath: \(\/etc\/snowflaked-tls\)$/\1/p' "$TLS_PATCH")
check "components/tls: ${#tls_env[@]} settings and the mount path read (${tls_env[*]:0:2} ...)" \
    eval '[ "${#tls_env[@]}" -ge 8 ] && [ -n "$tls_mount" ] &&
          printf "%s\n" "${tls_env[@]}" | grep -qx SNOWFLAKED_SERVER_TLS_PORT=8443'
serials=$(python3 deploy/secret_volume.py make "$WORK/tls" --group 10001 --mode 0440 \
    IP:127.0.0.1 DNS:snowflaked-0.snowflaked-headless) || abort "certificates (secret_volume.py)"
read -r SERIAL1 SERIAL2 <<<"$serials"
HTTPS_PORT=$(free_port)
MCS_PORT=$(free_port)
env_args=()
for e in "${tls_env[@]}"; do env_args+=(-e "$e"); done
say "running $NAME3 with TLS: https://127.0.0.1:$HTTPS_PORT, memcached over TLS 127.0.0.1:$MCS_PORT"
pm 60 run -d --name "$NAME3" --hostname snowflaked-0 --read-only --cap-drop ALL \
    --security-opt no-new-privileges "${env_args[@]}" -v "$WORK/tls/volume:$tls_mount:ro" \
    -p "127.0.0.1:$HTTPS_PORT:8443" -p "127.0.0.1:$MCS_PORT:11212" \
    -v "$VOLUME_NAME:/var/lib/snowflaked" "$TAG" >/dev/null || fail "podman run (TLS)"
https_ready() {
    local _
    for _ in $(seq 1 60); do
        code=$(http_code --cacert "$WORK/tls/ca.pem" "https://127.0.0.1:$HTTPS_PORT/readyz")
        [ "$code" = 200 ] && return 0
        sleep 0.5
    done
    return 1
}
check "HTTPS /readyz 200 within 30 s (verified against the CA; key file 0440 root:10001)" https_ready
code=$(http_code --cacert "$WORK/tls/ca.pem" "https://127.0.0.1:$HTTPS_PORT/cache/k")
check "HTTPS GET /cache/k: the volume's data over TLS ($code)" \
    eval '[ "$code" = 200 ] && [ "$(cat "$WORK/body")" = "$VALUE" ]'
tls_serial() { # the serial a new TLS connection to port $1 gets (verified)
    timeout 10 openssl s_client -connect "127.0.0.1:$1" -CAfile "$WORK/tls/ca.pem" \
        -verify_ip 127.0.0.1 -verify_return_error </dev/null 2>/dev/null |
        openssl x509 -noout -serial 2>/dev/null | sed 's/^serial=//'
}
mcs() { # memcached over TLS: sends $1, prints the reply
    timeout 10 openssl s_client -connect "127.0.0.1:$MCS_PORT" -CAfile "$WORK/tls/ca.pem" \
        -verify_ip 127.0.0.1 -verify_return_error -quiet -ign_eof 2>/dev/null \
        < <(printf '%b' "$1")
}
reply=$(mcs 'set via-tls 0 0 3\r\ntls\r\nget via-tls\r\nquit\r\n')
check "memcached over TLS: set and get (${reply//$'\r\n'/ })" \
    grep -q '^VALUE via-tls 0 3' <<<"$reply"
check "the plaintext memcached port is off (components/tls)" \
    bash -c '! timeout 5 podman exec "$1" bash -c "exec 3<>/dev/tcp/127.0.0.1/11211" 2>/dev/null' \
    _ "$NAME3"
check "serial $(tls_serial "$HTTPS_PORT") on HTTPS is the first certificate's ($SERIAL1)" \
    [ "$(tls_serial "$HTTPS_PORT")" = "$SERIAL1" ]
python3 deploy/secret_volume.py swap "$WORK/tls/volume" "$WORK/tls/next" --group 10001 \
    --mode 0440 || fail "..data swap"
rotated() {
    local _
    for _ in $(seq 1 50); do
        [ "$(tls_serial "$HTTPS_PORT")" = "$SERIAL2" ] &&
            [ "$(tls_serial "$MCS_PORT")" = "$SERIAL2" ] && return 0
        sleep 0.2
    done
    return 1
}
check "after the ..data swap new connections get serial $SERIAL2 on HTTPS and memcached (10 s)" rotated
podman logs "$NAME3" >"$WORK/logs3" 2>&1
check "logged: certificate reloaded (files changed)" \
    grep -q 'certificate reloaded (files changed)' "$WORK/logs3"
pm $((STOP_TIMEOUT + 20)) stop -t "$STOP_TIMEOUT" "$NAME3" >/dev/null
check "TLS container stops with exit code 0" \
    [ "$(podman inspect --format '{{.State.ExitCode}}' "$NAME3")" = 0 ]
