#!/bin/bash
# Runs memcached 1.6.18's own protocol test files (t/*.t from the Debian source package) with
# `prove` against snowflaked's memcached listener, one daemon for the whole run and a flush_all
# between files. Prints a per-file table; exits 1 if any file not in exclude.txt fails.
#
#   test/memcached_t/run.sh [SNOWFLAKED_BINARY] [FILE.t ...]
#
# MEMCACHED_T_SERVER=memcached runs the same files, the same way, against Debian's memcached
# binary instead (the control: what memcached itself passes as an external server).
#
# Environment: MEMCACHED_SRC_DIR (cache of the source package; default build/memcached-src),
# MEMCACHED_T_LOGS (per-file prove output; default build/memcached-t-logs/<server>), MEMCACHED_T_TIMEOUT
# (seconds per file, default 120). How it works and the exclusion rules: README.md here.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/build/snowflaked}
[ $# -gt 0 ] && shift
cache=${MEMCACHED_SRC_DIR:-$root/build/memcached-src}
per_file_timeout=${MEMCACHED_T_TIMEOUT:-120}
exclude="$here/exclude.txt"

die() { echo "memcached_t: $*" >&2; exit 2; }
# Only this script's settings reach the daemon (as in test/integration/sfharness.py).
for v in "${!SNOWFLAKED_@}"; do unset "$v"; done
server_kind=${MEMCACHED_T_SERVER:-snowflaked}
logs=${MEMCACHED_T_LOGS:-$root/build/memcached-t-logs/$server_kind}
case "$server_kind" in
    snowflaked) [ -x "$bin" ] || die "no snowflaked binary at $bin (make build, or pass its path)" ;;
    memcached) command -v memcached >/dev/null 2>&1 || die "no memcached binary (apt-get install memcached)" ;;
    *) die "MEMCACHED_T_SERVER must be snowflaked or memcached" ;;
esac

# --- Debian packages this needs: prove (perl), dpkg-source (dpkg-dev); as deploy/install-deps.sh.
need_pkgs() {
    local missing="" pkg status sudo=""
    for pkg in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        [ "$status" = "install ok installed" ] || missing="$missing $pkg"
    done
    [ -z "$missing" ] && return 0
    echo "memcached_t: installing:$missing" >&2
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "need root or sudo to install:$missing"
        sudo=sudo
    fi
    # shellcheck disable=SC2086  # word splitting of the package list is intended
    DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
}
need_pkgs perl dpkg-dev

tmp=$(mktemp -d "${TMPDIR:-/tmp}/memcached_t.XXXXXX")
daemon_pid=""
cleanup() {
    if [ -n "$daemon_pid" ]; then
        kill "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- (a) The source package, cached. The version installed (the memcached the diff tests compare
# against) when there is one. The machine's apt sources may have no deb-src lines, so this derives
# a private apt configuration from them: same URIs, suites and components, Types deb-src, its own
# lists directory; the system's apt state is not touched.
src_sources() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] && sed -n 's/^[[:space:]]*deb[[:space:]]\+/deb-src /p' "$f"
    done > "$tmp/apt/sources.list"
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # Each deb822 stanza that has Types: deb becomes Types: deb-src; others are dropped.
        awk 'function flush() { if (keep) printf "%s\n", buf; buf = ""; keep = 0 }
             /^[[:space:]]*$/ { flush(); next }
             /^Types:/ { if ($0 ~ /[[:space:]]deb([[:space:]]|$)/) keep = 1; $0 = "Types: deb-src" }
             { buf = buf $0 "\n" }
             END { flush() }' "$f"
    done > "$tmp/apt/src.sources"
}
fetch_source() {
    local version apt_opts
    mkdir -p "$tmp/apt/lists/partial" "$cache"
    src_sources
    apt_opts=(-o "Dir::Etc::SourceList=$tmp/apt/sources.list" -o "Dir::Etc::SourceParts=$tmp/apt/parts"
              -o "Dir::State::Lists=$tmp/apt/lists" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=")
    mkdir -p "$tmp/apt/parts"
    cp "$tmp/apt/src.sources" "$tmp/apt/parts/src.sources"
    echo "memcached_t: fetching the memcached source package (apt-get source) into $cache" >&2
    apt-get "${apt_opts[@]}" update >"$tmp/apt/update.log" 2>&1 ||
        { cat "$tmp/apt/update.log" >&2; die "apt-get update (deb-src) failed"; }
    version=$(dpkg-query -W -f='${Version}' memcached 2>/dev/null || true)
    (cd "$cache" && apt-get "${apt_opts[@]}" source "memcached${version:+=$version}") \
        >"$tmp/apt/source.log" 2>&1 || { cat "$tmp/apt/source.log" >&2; die "apt-get source memcached failed"; }
}
find_src() {
    local d
    for d in "$cache"/memcached-*/; do
        [ -f "$d/t/lib/MemcachedTest.pm" ] && { echo "${d%/}"; return 0; }
    done
    return 1
}
src=$(find_src) || { fetch_source; src=$(find_src) || die "no memcached-*/t/lib/MemcachedTest.pm under $cache"; }
echo "memcached_t: suite from $src" >&2

# MemcachedTest.pm asks "$builddir/memcached-debug -h" which optional features to test (UDP is
# only used when it starts a server itself). Against an external server (T_MEMD_USE_DAEMON) it
# never runs it; this stand-in answers -h for our server: no SASL, TLS, extstore, proxy, unix
# socket or privilege dropping, and refuses anything else.
cat > "$src/memcached-debug" <<'STANDIN'
#!/bin/sh
# Stand-in written by snowflaked's test/memcached_t/run.sh: the suite runs against an external server.
if [ "${1:-}" = "-h" ]; then
    echo "memcached 1.6.18 (stand-in for an external server: snowflaked's memcached listener)"
    exit 0
fi
echo "memcached-debug stand-in: this tree runs against an external server only" >&2
exit 1
STANDIN
chmod +x "$src/memcached-debug"

# --- The exclusion list: "file reason..." per line; a reason is required.
declare -A excluded=()
while read -r name reason; do
    case "$name" in ''|'#'*) continue ;; esac
    [ -n "$reason" ] || die "exclude.txt: $name has no reason"
    [ -f "$src/t/$name" ] || echo "memcached_t: exclude.txt names $name, which the suite does not have" >&2
    excluded[$name]=$reason
done < "$exclude"

if [ $# -gt 0 ]; then
    files=("$@")
else
    files=()
    for f in "$src"/t/*.t; do files+=("$(basename "$f")"); done
fi

# --- (b) Our daemon on free loopback ports, configured like memcached's defaults where a
# setting corresponds (-m 64, -I 1m, -t 4, -c 1024), nothing persisted; or the control.
root_user=""; [ "$(id -u)" -eq 0 ] && root_user=1
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_port=""; mc_port=""
start_daemon() {
    http_port=$(free_port); mc_port=$(free_port)
    mkdir -p "$tmp/data"
    if [ "$server_kind" = memcached ]; then
        memcached -l 127.0.0.1 -p "$mc_port" -U 0 -t 4 -c 1024 -m 64 -I 1m \
            ${root_user:+-u nobody} >>"$logs/server.log" 2>&1 &
    else
        SNOWFLAKED_DATA_DIR="$tmp/data" "$bin" \
            --set server.host=127.0.0.1 --set server.port="$http_port" --set server.threads=4 \
            --set server.max_connections=1024 --set cache.enabled=true --set cache.persist=false \
            --set cache.max_memory_bytes=67108864 --set cache.max_item_bytes=1048576 \
            --set cache.memcached_host=127.0.0.1 --set cache.memcached_port="$mc_port" \
            >>"$logs/server.log" 2>&1 &
    fi
    daemon_pid=$!
    for _ in $(seq 200); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$mc_port") 2>/dev/null; then return 0; fi
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.05
    done
    cat "$logs/server.log" >&2
    die "$server_kind did not start listening on 127.0.0.1:$mc_port"
}
# Between files: flush_all (must answer OK), then stats reset (answer not checked: memcached's
# files count from a fresh server's zero; a server without stats reset carries counters over).
between_files() {
    local reply=""
    { exec 3<>"/dev/tcp/127.0.0.1/$mc_port"; } 2>/dev/null || return 1
    printf 'flush_all\r\n' >&3
    IFS= read -r -t 10 reply <&3 || true
    printf 'stats reset\r\n' >&3
    IFS= read -r -t 10 _ <&3 || true
    exec 3<&-
    [ "$reply" = $'OK\r' ]
}

mkdir -p "$logs"
rm -f "$logs"/*.log "$logs/summary.txt"
start_daemon
echo "memcached_t: $server_kind pid $daemon_pid, memcached listener 127.0.0.1:$mc_port" >&2

# --- (c) Each file on its own, after between_files (and a fresh daemon if the last one died).
failed=0
printf '%-28s %-8s %-9s %s\n' FILE RESULT OK/RAN "FAILED SUBTESTS / NOTES" | tee "$logs/summary.txt"
for f in "${files[@]}"; do
    if [ -n "${excluded[$f]:-}" ]; then
        printf '%-28s %-8s %-9s %s\n' "$f" excluded - "${excluded[$f]}" | tee -a "$logs/summary.txt"
        continue
    fi
    note=""
    if ! kill -0 "$daemon_pid" 2>/dev/null; then
        wait "$daemon_pid" 2>/dev/null || true
        note="(daemon had exited after the previous file; restarted) "
        start_daemon
    fi
    between_files || note="${note}(flush_all before the file failed) "
    set +e
    (cd "$src" && T_MEMD_USE_DAEMON="127.0.0.1:$mc_port" timeout -k 5 "$per_file_timeout" \
        prove -v --merge "t/$f") >"$logs/$f.log" 2>&1
    rc=$?
    set -e
    IFS='|' read -r ran nfail list errs < <(awk -f "$here/prove_summary.awk" "$logs/$f.log")
    skip=$(sed -n 's/^t\/[^ ]* \.* skipped: *//p' "$logs/$f.log" | head -n 1)
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        result=HANG; note="${note}killed after ${per_file_timeout}s; "
    elif [ "$rc" -eq 0 ]; then
        result=pass; [ -n "$skip" ] && note="${note}skipped by the file: $skip"
    else
        result=FAIL
    fi
    [ -n "$list" ] && note="${note}failed: $list; "
    [ -n "$errs" ] && note="${note}$errs"
    [ "$result" = pass ] || failed=$((failed + 1))
    printf '%-28s %-8s %-9s %s\n' "$f" "$result" "$(( ${ran:-0} - ${nfail:-0} ))/${ran:-?}" "$note" |
        tee -a "$logs/summary.txt"
done

# --- (d) The verdict.
echo "memcached_t: $failed file(s) failed; per-file prove output in $logs" | tee -a "$logs/summary.txt"
[ "$failed" -eq 0 ]
