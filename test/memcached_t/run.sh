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
#
# MEMCACHED_T_TLS=1 runs the files over TLS (memcached's SSL_TEST=1 mode: the harness adds -Z and
# its own test certificates to every server and connects with IO::Socket::SSL); exclude.txt plus
# exclude-tls.txt, and pending-tls.txt instead of pending.txt.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/build/snowflaked}
[ $# -gt 0 ] && shift
cache=${MEMCACHED_SRC_DIR:-$root/build/memcached-src}
# Over TLS 300: maxconns.t's 1024 connections are 1024 handshakes, each with a new
# IO::Socket::SSL context loading the client certificate (about 2 min of the client's CPU here).
per_file_timeout=${MEMCACHED_T_TIMEOUT:-$([ "${MEMCACHED_T_TLS:-0}" = 1 ] && echo 300 || echo 120)}
exclude="$here/exclude.txt"

die() { echo "memcached_t: $*" >&2; exit 2; }
# Only this script's settings reach the daemon (as in test/integration/sfharness.py).
for v in "${!SNOWFLAKED_@}"; do unset "$v"; done
server_kind=${MEMCACHED_T_SERVER:-snowflaked}
tls=${MEMCACHED_T_TLS:-0}
case "$tls" in 0|1) ;; *) die "MEMCACHED_T_TLS must be 0 or 1" ;; esac
logs=${MEMCACHED_T_LOGS:-$root/build/memcached-t-logs/$server_kind$([ "$tls" = 1 ] && echo -tls)}
case "$server_kind" in
    snowflaked) [ -x "$bin" ] || die "no snowflaked binary at $bin (make build, or pass its path)"
                bin=$(readlink -f "$bin") ;;
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
[ "$tls" = 1 ] && need_pkgs libio-socket-ssl-perl # the harness's TLS client (SSL_TEST=1)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/memcached_t.XXXXXX")
cleanup() {
    kill_leftovers 2>/dev/null || true
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

# MemcachedTest.pm starts a server per new_memcached() call as `$builddir/timedrun 600
# $builddir/memcached-debug <the file's flags> -p PORT ...` ($builddir is the current directory),
# and runs `memcached-debug -h` to decide which optional features to test. memcached_standin.py
# plays memcached-debug: it translates the file's memcached flags to our settings and execs
# snowflaked (or, for the control, execs the real memcached with the flags as given). timedrun is
# memcached's own (timedrun.c). Both go into a private copy of the tree's t/ in $tmp, so the cached
# source is never modified and concurrent runs do not meet.
suite="$tmp/suite"
mkdir -p "$suite"
cp -R "$src/t" "$suite/t"
mkdir -p "$suite/doc" && cp "$src/doc/protocol.txt" "$suite/doc/" # line-lengths.t reads it
# Started for every server: Debian's python3 directly (a version manager's shim can cost a second).
py=/usr/bin/python3; [ -x "$py" ] || py=$(command -v python3) || die "no python3"
# `memcached-debug -h` is answered by the shell script itself, with the stand-in's text: the test
# library runs it for every new_sock() (its TLS probe), and maxconns.t opens a thousand sockets,
# which at a Python start-up each (~50 ms) took longer than the file's timeout.
help=$(MEMCACHED_T_TLS=$tls "$py" "$here/memcached_standin.py" -h) || die "memcached_standin.py -h failed"
printf '#!/bin/sh\nif [ "$1" = -h ] && [ $# -eq 1 ]; then\n  cat <<"EOF"\n%s\nEOF\n  exit 0\nfi\nexec %s %s "$@"\n' \
    "$help" "$py" "$here/memcached_standin.py" >"$suite/memcached-debug"
chmod 755 "$suite/memcached-debug"
cc -O1 -o "$suite/timedrun" "$src/timedrun.c" || die "cannot build memcached's timedrun.c"

# --- The exclusion list: "file reason..." per line; a reason is required.
declare -A excluded=()
while read -r name reason; do
    case "$name" in ''|'#'*) continue ;; esac
    [ -n "$reason" ] || die "exclude.txt: $name has no reason"
    [ -f "$src/t/$name" ] || echo "memcached_t: exclude.txt names $name, which the suite does not have" >&2
    excluded[$name]=$reason
done < <(if [ "$tls" = 1 ]; then # the TLS files (reason "TLS" in exclude.txt) run in this mode
              awk '!($1 ~ /^ssl_/ && $2 == "TLS" && NF == 2)' "$exclude"; cat "$here/exclude-tls.txt"
          else cat "$exclude"; fi)

# --- Subtests we fail on purpose: "file n[,n...] reason..." per line; a reason is required.
declare -A expected=() expected_why=()
while read -r name nums reason; do
    case "$name" in ''|'#'*) continue ;; esac
    [ -n "$reason" ] || die "expected-failures.txt: $name has no reason"
    expected[$name]=" ${nums//,/ } "
    expected_why[$name]=$reason
done < <([ "$server_kind" = snowflaked ] && cat "$here/expected-failures.txt") # ours only

# --- Files not passing yet (the work is open): "file what is missing..." per line.
declare -A pending=()
while read -r name reason; do
    case "$name" in ''|'#'*) continue ;; esac
    [ -n "$reason" ] || die "pending.txt: $name has no reason"
    pending[$name]=$reason
done < <([ "$server_kind" = snowflaked ] && cat "$here/$([ "$tls" = 1 ] && echo pending-tls.txt || echo pending.txt)") # ours only

if [ $# -gt 0 ]; then
    files=("$@")
else
    files=()
    for f in "$src"/t/*.t; do files+=("$(basename "$f")"); done
fi

# --- (b) Each file on its own, as memcached's `make test` runs them: the file starts its servers
# itself (the stand-in above), each with its own data directory under $tmp and its output in
# FILE.server.log; servers a file leaves behind are killed after it.
mkdir -p "$logs" "$tmp/data"
rm -f "$logs"/*.log "$logs/summary.txt"
export MEMCACHED_T_SERVER="$server_kind" MEMCACHED_T_DATA="$tmp/data" SNOWFLAKED_BIN="$bin"
if [ "$tls" = 1 ]; then export SSL_TEST=1 MEMCACHED_T_TLS=1; else unset SSL_TEST; fi
kill_leftovers() {
    local pidfile pid
    for pidfile in "$tmp"/data/*/pid; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    done
}

failed=0
printf '%-28s %-8s %-9s %s\n' FILE RESULT OK/RAN "FAILED SUBTESTS / NOTES" | tee "$logs/summary.txt"
for f in "${files[@]}"; do
    if [ -n "${excluded[$f]:-}" ]; then
        printf '%-28s %-8s %-9s %s\n' "$f" excluded - "${excluded[$f]}" | tee -a "$logs/summary.txt"
        continue
    fi
    note=""
    set +e
    (cd "$suite" && MEMCACHED_T_SERVER_LOG="$logs/$f.server.log" timeout -k 5 "$per_file_timeout" \
        prove -v --merge "t/$f") >"$logs/$f.log" 2>&1
    rc=$?
    set -e
    kill_leftovers
    grep -h '^memcached-debug stand-in: refused' "$logs/$f.server.log" 2>/dev/null | sort -u |
        while read -r line; do echo "  $line"; done >"$tmp/refused"
    IFS='|' read -r ran nfail list errs < <(awk -f "$here/prove_summary.awk" "$logs/$f.log")
    skip=$(sed -n 's/^t\/[^ ]* \.* skipped: *//p' "$logs/$f.log" | head -n 1)
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        result=HANG; note="${note}killed after ${per_file_timeout}s; "
    elif [ "$rc" -eq 0 ]; then
        result=pass; [ -n "$skip" ] && note="${note}skipped by the file: $skip"
    else
        result=FAIL
    fi
    # Failures that are all on the expected list (and nothing else wrong) make a pass; an expected
    # failure that passed is an error: the list must stay exact.
    if [ -n "${expected[$f]:-}" ] && [ "$result" != HANG ] && [ -z "$errs" ]; then
        got=" $(sed -n 's/^not ok \([0-9]*\).*/\1/p' "$logs/$f.log" | tr '\n' ' ')"
        unexpected=""; missing=""
        for n in $got; do [[ "${expected[$f]}" == *" $n "* ]] || unexpected="$unexpected $n"; done
        for n in ${expected[$f]}; do [[ "$got" == *" $n "* ]] || missing="$missing $n"; done
        if [ -z "$unexpected" ] && [ -z "$missing" ]; then
            result=pass; list=""
            note="${note}expected failure(s)${expected[$f]% }: ${expected_why[$f]}; "
        elif [ -n "$missing" ]; then
            result=FAIL; note="${note}listed as expected failures but passed:$missing (expected-failures.txt); "
        fi
    fi
    [ -n "$list" ] && note="${note}failed: $list; "
    [ -n "$errs" ] && note="${note}$errs; "
    [ -s "$tmp/refused" ] && note="${note}a server flag was refused (FILE.server.log); "
    # A pending file's failure is shown but does not fail the run; its pass does (the list must
    # shrink as the work lands).
    if [ -n "${pending[$f]:-}" ]; then
        if [ "$result" = pass ]; then
            result=FAIL; note="${note}passes but is listed in pending.txt: remove its line; "
        else
            result="pending"; note="${note}pending: ${pending[$f]}; "
        fi
    fi
    case "$result" in pass|pending) ;; *) failed=$((failed + 1)) ;; esac
    printf '%-28s %-8s %-9s %s\n' "$f" "$result" "$(( ${ran:-0} - ${nfail:-0} ))/${ran:-?}" "$note" |
        tee -a "$logs/summary.txt"
    [ -s "$tmp/refused" ] && tee -a "$logs/summary.txt" <"$tmp/refused"
done

# --- (d) The verdict.
echo "memcached_t: $failed file(s) failed; per-file prove output in $logs" | tee -a "$logs/summary.txt"
[ "$failed" -eq 0 ]
