#!/bin/sh
# Command-line and configuration behaviour of the real binary: --check-config, --version, --help,
# error exits (code 2, message naming the file and the key path), env and flag precedence.
#
# Usage: sh test_cli_config.sh <path-to-snowflaked> <repo-root>
# POSIX sh only. Every run passes --check-config, so a config that wrongly loads never starts a
# server. Prints "FAIL: ..." with the captured output and exits 1 on the first failure.
set -eu

if [ $# -ne 2 ]; then
    echo "usage: sh $0 <path-to-snowflaked> <repo-root>" >&2
    exit 64
fi
bin=$1
repo=$2
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
case $repo in /*) ;; *) repo=$(pwd)/$repo ;; esac
[ -x "$bin" ] || { echo "FAIL: $bin is not an executable"; exit 1; }
[ -f "$repo/config.json" ] || { echo "FAIL: $repo/config.json not found"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_cli_config.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM HUP

# The caller's environment must not leak in: drop every SNOWFLAKED_* variable and POD_NAME.
for v in $(env | sed -n 's/^\(SNOWFLAKED_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done
unset POD_NAME POD_INDEX 2>/dev/null || true

# A hung binary must fail the test, not the CI job's patience.
limit=
if command -v timeout >/dev/null 2>&1; then
    limit="timeout 30"
fi

rc=0
what=
# run DESCRIPTION CMD...: runs CMD with stdout/stderr captured; exit code in $rc.
run() {
    what=$1
    shift
    rc=0
    $limit "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || rc=$?
}

fail() {
    echo "FAIL: $what: $1"
    echo "--- exit code: $rc"
    echo "--- stdout:"
    cat "$tmp/out"
    echo "--- stderr:"
    cat "$tmp/err"
    exit 1
}

expect_rc() {
    [ "$rc" -eq "$1" ] || fail "expected exit code $1, got $rc"
}

# expect_in FILE TEXT...: every TEXT occurs literally in stdout/stderr ("out" or "err").
expect_in() {
    f=$1
    shift
    for t in "$@"; do
        grep -F -q -e "$t" "$tmp/$f" || fail "std$f lacks '$t'"
    done
}

# expect_config_error FILE-NAME CONTENT TEXT...: loading a file with CONTENT exits 2 and says
# "snowflaked: <file>: ..." with each TEXT on stderr, nothing on stdout.
expect_config_error() {
    name=$1
    printf '%s\n' "$2" >"$tmp/$name"
    shift 2
    # Run from inside $tmp with a relative -c path: the message must use the path as typed.
    # shellcheck disable=SC2016 # $1/$@ belong to the inner sh
    run "invalid config $name" sh -c 'cd "$1" && shift && exec "$@"' sh "$tmp" \
        "$bin" --check-config -c "$name"
    expect_rc 2
    expect_in err "$name: " "$@"
    [ ! -s "$tmp/out" ] || fail "stdout should be empty on a config error"
}

# --- valid configurations ---------------------------------------------------------------------
run "--check-config -c config.json" "$bin" --check-config -c "$repo/config.json"
expect_rc 0
expect_in out '"port": 8080' '"host": "127.0.0.1"' '"epoch": "2020-01-01T00:00:00Z"' \
    '"sync": "atomic"' '"resolved"'
cp "$tmp/out" "$tmp/printed.json"

run "--check-config with built-in defaults" "$bin" --check-config
expect_rc 0
expect_in out '"port": 8080' '"timestamp_bits": 41'

# The printed config, minus the "resolved" object, is itself a loadable config.
awk '/^  "resolved": \{/ { sub(/,$/, "", prev); print prev; print "}"; done = 1; exit }
     NR > 1 { print prev } { prev = $0 }
     END { if (!done) exit 1 }' "$tmp/printed.json" >"$tmp/reloaded.json" ||
    { what="strip resolved"; fail "no \"resolved\" object in the printed config"; }
run "reload the printed config" "$bin" --check-config -c "$tmp/reloaded.json"
expect_rc 0
expect_in out '"port": 8080'

# A named layout's printed config reloads: its widths are printed and equal the preset's.
run "--check-config --set snowflake.layout=sonyflake" "$bin" --check-config \
    --set snowflake.layout=sonyflake
expect_rc 0
expect_in out '"layout": "sonyflake"' '"timestamp_bits": 39' '"node_bits_low": true' \
    '"epoch": "2014-09-01T00:00:00Z"' '"layout_name": "sonyflake"' '"id_bits": 63' \
    '"json_safe": false' '"lifetime_ends": "2188-11-16T03:28:58.880Z"'
awk '/^  "resolved": \{/ { sub(/,$/, "", prev); print prev; print "}"; done = 1; exit }
     NR > 1 { print prev } { prev = $0 }
     END { if (!done) exit 1 }' "$tmp/out" >"$tmp/sonyflake.json" ||
    { what="strip resolved (sonyflake)"; fail "no \"resolved\" object in the printed config"; }
run "reload the printed sonyflake config" "$bin" --check-config -c "$tmp/sonyflake.json"
expect_rc 0
expect_in out '"layout_name": "sonyflake"' '"sequence_bits": 8'

run "js53 with JSON numbers" env SNOWFLAKED_SNOWFLAKE_LAYOUT=js53 "$bin" --check-config \
    --set snowflake.json_ids=number
expect_rc 0
expect_in out '"json_ids": "number"' '"id_bits": 53' '"json_safe": true' \
    '"id_cap_per_second": 102400'

run "--version" "$bin" --version
expect_rc 0
grep -E -q '[0-9]+\.[0-9]+' "$tmp/out" || fail "no version number on stdout"

run "--help" "$bin" --help
expect_rc 0
cat "$tmp/out" "$tmp/err" >"$tmp/both"
grep -F -q -e '--config' "$tmp/both" || fail "help does not mention --config"
grep -F -q -e 'SNOWFLAKED_' "$tmp/both" || fail "help does not explain SNOWFLAKED_ variables"
# Every form snowflake.worker_id takes, and every exit code the daemon uses (docs/operations.md).
for form in '"ordinal"' '"env:NAME"' '"etcd"'; do
    grep -F -q -e "$form" "$tmp/both" || fail "help does not list the worker id form $form"
done
for code in '0 clean stop' '1 refused at start' '2 usage' '75 the etcd identity lost'; do
    grep -F -q -e "$code" "$tmp/both" || fail "help does not explain exit status '$code'"
done

# --- invalid configurations: exit 2, file name and key path on stderr ---------------------------
expect_config_error unknown_key.json '{"server": {"port": 8080, "bogus": 1}}' \
    'server.bogus' 'unknown key'
expect_config_error unknown_top.json '{"sever": {}}' 'sever' 'unknown key'
expect_config_error bad_port.json '{"server": {"port": 70000}}' \
    'server.port' '1..65535' '70000'
expect_config_error port_type.json '{"server": {"port": "8080"}}' 'server.port' 'integer'
expect_config_error bits_sum.json '{"snowflake": {"timestamp_bits": 43}}' \
    'snowflake' 'timestamp_bits' 'at most 63'
expect_config_error layout_name.json '{"snowflake": {"layout": "snowflake"}}' \
    'snowflake.layout' 'custom|twitter|sonyflake|js53' '"snowflake"'
expect_config_error layout_fixed.json '{"snowflake": {"layout": "sonyflake", "sequence_bits": 12}}' \
    'snowflake.sequence_bits' 'layout sonyflake fixes it at 8, got 12'
expect_config_error json_numbers.json '{"snowflake": {"json_ids": "number"}}' \
    'snowflake.json_ids' 'at most 53 bits (this one has 63)'
expect_config_error bad_worker.json '{"snowflake": {"worker_id": 99}}' \
    'snowflake.worker_id' '0..31'
expect_config_error worker_word.json '{"snowflake": {"worker_id": "leader"}}' \
    'snowflake.worker_id' 'ordinal'
expect_config_error bad_epoch.json '{"snowflake": {"epoch": "2020-02-30T00:00:00Z"}}' \
    'snowflake.epoch' 'day'
expect_config_error invalid.json '{"server": {"port": 8080,}}' 'not valid JSON' 'line 1'
expect_config_error port_clash.json '{"echo": {"tcp_port": 8080}}' 'echo.tcp_port' 'server.port'

run "missing config file" "$bin" --check-config -c "$tmp/does-not-exist.json"
expect_rc 2
expect_in err 'does-not-exist.json' 'cannot open'

# --- environment and flags ----------------------------------------------------------------------
run "SNOWFLAKED_SERVER_PORT=9090" env SNOWFLAKED_SERVER_PORT=9090 "$bin" --check-config \
    -c "$repo/config.json"
expect_rc 0
expect_in out '"port": 9090'

run "flag beats env" env SNOWFLAKED_SERVER_PORT=9090 "$bin" --check-config -p 9191
expect_rc 0
expect_in out '"port": 9191'

run "--set beats env" env SNOWFLAKED_LOG_LEVEL=debug "$bin" --check-config \
    --set log.level=error
expect_rc 0
expect_in out '"level": "error"'

run "--worker-id ordinal from POD_NAME" env POD_NAME=snowflaked-3 "$bin" --check-config \
    --worker-id ordinal
expect_rc 0
expect_in out '"worker_id": "ordinal"' '"worker_id": 3' 'POD_NAME=snowflaked-3'

run "--worker-id ordinal prefers POD_INDEX (downward API) over POD_NAME" \
    env POD_INDEX=5 POD_NAME=snowflaked-3 "$bin" --check-config --worker-id ordinal
expect_rc 0
expect_in out '"worker_id": 5' 'POD_INDEX=5'

run "ordinal beyond worker_bits refuses to start" env POD_NAME=snowflaked-32 "$bin" --check-config \
    --worker-id ordinal
expect_rc 2
expect_in err 'snowflake.worker_id' '32' 'worker_bits'

run "bad POD_INDEX" env POD_INDEX=x1 "$bin" --check-config --worker-id ordinal
expect_rc 2
expect_in err 'POD_INDEX'

run "bad env value" env SNOWFLAKED_SERVER_PORT=http "$bin" --check-config
expect_rc 2
expect_in err 'SNOWFLAKED_SERVER_PORT' 'server.port'

run "bad flag value" "$bin" --check-config -p 0
expect_rc 2
expect_in err 'flag --port' 'server.port'

run "unknown flag" "$bin" --check-config --bogus
expect_rc 2
expect_in err '--bogus'

run "missing flag value" "$bin" --check-config -c
expect_rc 2

run "stray argument" "$bin" --check-config stray
expect_rc 2
expect_in err 'stray'

echo "PASS: test_cli_config.sh"
