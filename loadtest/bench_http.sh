#!/bin/bash
# Side by side: snowflaked GET /id vs nginx `return 200` with the same body, same worker count,
# same client, same machine, alternating A/B rounds. Prints req/s, latency and server CPU
# microseconds per request (utime+stime of every server process from /proc, before/after).
#
#   loadtest/bench_http.sh [-d seconds] [-r rounds] [-w workers] [-b build_dir]
#
# Installs nginx, wrk and ab from Debian packages if missing. Loopback only; every run is bounded
# in time; every process started is stopped by PID on exit.
set -euo pipefail

DURATION=10
ROUNDS=3
WORKERS=1
BUILD=build
while getopts "d:r:w:b:" opt; do
    case $opt in
        d) DURATION=$OPTARG ;;
        r) ROUNDS=$OPTARG ;;
        w) WORKERS=$OPTARG ;;
        b) BUILD=$OPTARG ;;
        *) echo "usage: $0 [-d seconds] [-r rounds] [-w workers] [-b build_dir]" >&2; exit 2 ;;
    esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/$BUILD/snowflaked
[ -x "$BIN" ] || { echo "build first: make build" >&2; exit 1; }
SNOWFLAKED_EXTRA_PACKAGES="nginx wrk apache2-utils" sh "$ROOT/deploy/install-deps.sh"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ulimit -n "$(ulimit -Hn)"

WORK=$(mktemp -d /tmp/bench_http.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.2
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Sum of utime+stime (clock ticks) of a process and, for nginx, its workers.
cpu_ticks() {
    local total=0 p
    for p in "$@"; do
        if [ -r "/proc/$p/stat" ]; then
            total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
        fi
    done
    echo "$total"
}
TICK_US=$((1000000 / $(getconf CLK_TCK)))

start_ours() {
    OURS_PORT=$(free_port)
    mkdir -p "$WORK/sf"
    (cd "$WORK/sf" && exec "$BIN" -p "$OURS_PORT" -t "$WORKERS" \
        --set server.max_connections=20000 >"$WORK/sf/log" 2>&1) &
    OURS_PID=$!
    PIDS+=("$OURS_PID")
}

start_nginx() {
    NGINX_PORT=$(free_port)
    mkdir -p "$WORK/nginx"
    sed -e "s|@WORKERS@|$WORKERS|; s|@DIR@|$WORK/nginx|g; s|@PORT@|$NGINX_PORT|" \
        "$ROOT/loadtest/nginx.conf.in" >"$WORK/nginx/nginx.conf"
    "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" &
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
}

wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "server on port $1 did not start" >&2
    exit 1
}

nginx_pids() { echo "$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')"; }

# run NAME PORT PIDS... : runs the scenario $SCENARIO, prints "reqs rps p50 p99 cpu_us_per_req"
run_one() {
    local port=$1
    shift
    local pids="$*" before after out reqs rps p50 p99
    # shellcheck disable=SC2086 # a list of PIDs
    before=$(cpu_ticks $pids)
    case $SCENARIO in
        ka100) out=$(wrk -t1 -c100 -d"${DURATION}s" --latency "http://127.0.0.1:$port/id") ;;
        ka1000) out=$(wrk -t1 -c1000 -d"${DURATION}s" --latency "http://127.0.0.1:$port/id") ;;
        pipe16) out=$(wrk -t1 -c100 -d"${DURATION}s" --latency -s "$ROOT/loadtest/pipeline.lua" \
                      "http://127.0.0.1:$port/id" -- 16) ;;
        conn1000) out=$(timeout $((DURATION * 6)) ab -q -r -n $((DURATION * 3000)) -c 1000 \
                        "http://127.0.0.1:$port/id" 2>&1) ;;
    esac
    # shellcheck disable=SC2086
    after=$(cpu_ticks $pids)
    if [ "$SCENARIO" = conn1000 ]; then
        reqs=$(awk '/^Complete requests/ {print $3}' <<<"$out")
        local failed non2xx
        failed=$(awk '/^Failed requests/ {print $3}' <<<"$out")
        non2xx=$(awk '/^Non-2xx responses/ {print $3}' <<<"$out")
        rps=$(awk '/^Requests per second/ {print $4}' <<<"$out")
        p50=$(awk '$1 == "50%" {print $2 "ms"}' <<<"$out")
        p99=$(awk '$1 == "99%" {print $2 "ms"}' <<<"$out")
        [ "${failed:-0}" = 0 ] && [ -z "${non2xx:-}" ] || echo "  !! ab: failed=$failed non2xx=$non2xx" >&2
    else
        reqs=$(awk '/requests in/ {print $1}' <<<"$out")
        rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
        p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
        p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
        if grep -q "Non-2xx\|Socket errors" <<<"$out"; then
            grep "Non-2xx\|Socket errors" <<<"$out" | sed 's/^/  !! wrk: /' >&2
        fi
    fi
    local cpu
    cpu=$(awk -v t=$((after - before)) -v us="$TICK_US" -v n="$reqs" 'BEGIN {printf "%.2f", t * us / n}')
    echo "$reqs $rps $p50 $p99 $cpu"
}

start_ours
start_nginx
wait_port "$OURS_PORT"
wait_port "$NGINX_PORT"

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
echo "servers: snowflaked $("$BIN" --version | cut -d' ' -f2) (-t $WORKERS) vs $("$NGINX" -v 2>&1 | cut -d/ -f2) (worker_processes $WORKERS)"
echo "client: wrk -t1 (keep-alive, pipelined 16 via loadtest/pipeline.lua), ab -c 1000 without -k; ${DURATION}s per run, $ROUNDS alternating rounds, median shown"
echo

declare -A RES
for SCENARIO in ka100 ka1000 pipe16 conn1000; do
    for round in $(seq "$ROUNDS"); do
        RES[$SCENARIO,ours,$round]=$(run_one "$OURS_PORT" "$OURS_PID")
        # shellcheck disable=SC2046 # master and workers
        RES[$SCENARIO,nginx,$round]=$(run_one "$NGINX_PORT" $(nginx_pids))
    done
done

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
field() { # field SCENARIO SERVER N -> median of field N over rounds
    for round in $(seq "$ROUNDS"); do echo "${RES[$1,$2,$round]}" | cut -d' ' -f"$3"; done | median
}

printf "%-34s | %10s %10s %6s | %9s %9s | %9s %9s | %7s %7s %6s\n" scenario "ours rps" "nginx rps" ratio \
    "ours p50" "ngx p50" "ours p99" "ngx p99" "ours us" "ngx us" ratio
for SCENARIO in ka100 ka1000 pipe16 conn1000; do
    case $SCENARIO in
        ka100) name="keep-alive, wrk -c 100" ;;
        ka1000) name="keep-alive, wrk -c 1000" ;;
        pipe16) name="pipelined 16, wrk -c 100" ;;
        conn1000) name="conn per request, ab -c 1000" ;;
    esac
    o_rps=$(field $SCENARIO ours 2); n_rps=$(field $SCENARIO nginx 2)
    o_cpu=$(field $SCENARIO ours 5); n_cpu=$(field $SCENARIO nginx 5)
    printf "%-34s | %10.0f %10.0f %6.2f | %9s %9s | %9s %9s | %7s %7s %6.2f\n" "$name" \
        "$o_rps" "$n_rps" "$(awk -v a="$o_rps" -v b="$n_rps" 'BEGIN {print a / b}')" \
        "$(field $SCENARIO ours 3)" "$(field $SCENARIO nginx 3)" \
        "$(field $SCENARIO ours 4)" "$(field $SCENARIO nginx 4)" \
        "$o_cpu" "$n_cpu" "$(awk -v a="$o_cpu" -v b="$n_cpu" 'BEGIN {print a / b}')"
done
echo
echo "rps ratio = ours / nginx (higher is better); us = server CPU microseconds per request"
echo "(utime+stime of the server processes, /proc, $(getconf CLK_TCK) Hz; lower is better)."
