#!/bin/sh
# wait_for takes a command string evaluated later: single quotes are intended.
# shellcheck disable=SC2016
# Daemon lifecycle against the real binary: data_dir and lease creation, one instance per
# data_dir, clean SIGTERM (exit 0, exact final lease), the crash-restart lease floor, and the
# corrupt-lease refusal with its override.
#
# Usage: sh test_lifecycle.sh <path-to-snowflaked>
set -eu

bin=$1
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_lifecycle.XXXXXX")
pids=""
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM HUP
for v in $(env | sed -n 's/^\(SNOWFLAKED_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export SNOWFLAKED_DATA_DIR="$tmp/data/nested"
# An identity of its own (cluster/hostclaim.h: one daemon per identity on a host): datacenter 7,
# which no other suite pins (sfharness.py gives unpinned Python suites 8..31), not the default 0
# that a `make run` or a benchmark on this machine holds.
export SNOWFLAKED_SNOWFLAKE_DATACENTER_ID=7
# A free ephemeral port: ctest runs suites in parallel.
SNOWFLAKED_SERVER_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export SNOWFLAKED_SERVER_PORT

fail() {
    echo "FAIL: $1"
    for f in "$tmp"/log*; do [ -f "$f" ] && { echo "--- $f:"; cat "$f"; }; done
    exit 1
}

# wait_for CONDITION-COMMAND: polls up to 5 s.
wait_for() {
    i=0
    while ! eval "$1"; do
        i=$((i + 1))
        [ $i -lt 100 ] || return 1
        sleep 0.05
    done
}

start() { # start LOGFILE [ARGS...]: background daemon, pid in $pid
    log=$1
    shift
    "$bin" "$@" >"$log" 2>&1 &
    pid=$!
    pids="$pids $pid"
}

lease="$SNOWFLAKED_DATA_DIR/snowflake.lease"
lease_ms() { cut -d' ' -f3 "$lease"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# 1. First start creates the nested data_dir and a lease one window (2 s) ahead of the clock.
start "$tmp/log1"
wait_for '[ -s "$lease" ]' || fail "no lease file written"
wait_for 'grep -q "first start" "$tmp/log1"' || fail "first start not reported"
ahead=$(($(lease_ms) - $(now_ms)))
if [ "$ahead" -le 1000 ] || [ "$ahead" -gt 2100 ]; then
    fail "lease is $ahead ms ahead, expected ~2000"
fi

# 2. A second instance on the same data_dir is refused.
rc=0
"$bin" >"$tmp/log2" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "second instance: exit $rc, expected 1"
grep -q "is in use by another snowflaked (pid $pid)" "$tmp/log2" || fail "second instance message"

# 3. SIGTERM: exit 0 and the final lease is exact (at or before now: nothing was issued ahead).
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit $rc, expected 0"
[ "$(lease_ms)" -le "$(now_ms)" ] || fail "final lease $(lease_ms) is ahead of now $(now_ms)"

# 4. kill -9 leaves the running lease ahead of the clock; a restart at once says it must wait.
start "$tmp/log3"
wait_for 'grep -q "lease" "$tmp/log3"' || fail "restart did not come up"
sleep 0.2
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
start "$tmp/log4"
wait_for 'grep -q "IDs are refused for about" "$tmp/log4"' || fail "no lease-floor warning after kill -9"
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "SIGINT: exit $rc, expected 0"

# 5. A corrupt lease stops start-up (exit 1, clear message); the override starts ahead of it.
echo "garbage" >"$lease"
rc=0
"$bin" >"$tmp/log5" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "corrupt lease: exit $rc, expected 1"
grep -q "corrupt lease file" "$tmp/log5" || fail "corrupt lease message"
grep -q -- "--ignore-corrupt-lease" "$tmp/log5" || fail "override not mentioned"
start "$tmp/log6" --ignore-corrupt-lease
wait_for 'grep -q "IDs are refused for about" "$tmp/log6"' || fail "override did not start ahead"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "override run: exit $rc"
grep -q "^snowflaked-lease 1 " "$lease" || fail "lease not rewritten after override"

# 6. An unusable data_dir is a start-up failure, not a crash.
touch "$tmp/file"
rc=0
SNOWFLAKED_DATA_DIR="$tmp/file/sub" "$bin" >"$tmp/log7" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "data_dir under a file: exit $rc, expected 1"
grep -q "cannot create data_dir" "$tmp/log7" || fail "data_dir message"

echo "lifecycle: all checks passed"
