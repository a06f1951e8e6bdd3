#!/bin/sh
# Builds the libFuzzer harnesses (build-fuzz/, clang, -DSF_FUZZ=ON) and runs each one for
# SECONDS_PER_HARNESS seconds (default 60) over a fresh copy of its seed corpus.
#
#   test/fuzz/run.sh                 6 harnesses x 60 s (CI)
#   test/fuzz/run.sh 3600            a long run: one hour each
#   test/fuzz/run.sh 600 http ids    only some harnesses (http memcache config ids snapshot tls)
#   test/fuzz/run.sh --seeds         regenerate the seed corpus (make_corpus.py + make_seeds)
#
# Environment:
#   FUZZ_JOBS=N     harnesses run N at a time (default 1; the machine's cores are the limit)
#   FUZZ_BUILD=DIR  build directory (default build-fuzz)
#   FUZZ_KEEP=1     keep growing DIR/work/<harness> across runs instead of starting from the
#                   seeds each time (for long campaigns)
#   FUZZ_ARGS=...   extra libFuzzer flags (e.g. -max_len=65536)
#
# Exit status: 0 when no harness crashed, leaked, timed out or ran out of memory; 1 otherwise,
# with the reproducer's path, its bytes in hex and the sanitizer report. Crash inputs are kept in
# DIR/artifacts/<harness>/; once the bug is fixed, add them to test/fuzz/corpus/<harness>/ as
# regression seeds (named regress-<what>).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
case $build in /*) ;; *) build=$root/$build ;; esac
all="http memcache config ids snapshot tls"

die() { echo "run.sh: $*" >&2; exit 1; }

command -v clang >/dev/null 2>&1 || die "clang not found (Debian: apt-get install clang libclang-rt-14-dev)"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    >"$probe/p.c"
clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err" ||
    die "clang cannot link libFuzzer (Debian 12: apt-get install libclang-rt-14-dev): $(cat "$probe/err")"

# ---- build ------------------------------------------------------------------------------------
build_start=$(date +%s)
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DSF_FUZZ=ON -DCMAKE_BUILD_TYPE=Release \
    >"$probe/cmake.log" 2>&1 || { cat "$probe/cmake.log"; die "cmake failed"; }
cmake --build "$build" --target fuzz -j"$(nproc)" >"$probe/build.log" 2>&1 ||
    { cat "$probe/build.log"; die "build failed"; }
build_secs=$(($(date +%s) - build_start))
echo "build: ${build_secs}s ($build)"

if [ "${1:-}" = "--seeds" ]; then
    python3 "$here/make_corpus.py" "$here/corpus"
    "$build/fuzz_make_seeds" "$here/corpus/fuzz_snapshot"
    for h in $all; do echo "seeds: $h $(ls "$here/corpus/fuzz_$h" | wc -l) files"; done
    exit 0
fi

secs=${1:-60}
case $secs in '' | *[!0-9]*) die "SECONDS_PER_HARNESS must be a number, got '$secs'" ;; esac
[ $# -gt 0 ] && shift
harnesses=${*:-$all}
for h in $harnesses; do
    case " $all " in *" $h "*) ;; *) die "unknown harness '$h' (one of: $all)" ;; esac
done

# ---- run ------------------------------------------------------------------------------------------
# One harness: libFuzzer over DIR/work/<h> (seeded from the committed corpus), crash inputs to
# DIR/artifacts/<h>/, everything it prints to DIR/logs/<h>.log.
run_one() {
    h=$1
    work=$build/work/fuzz_$h
    arts=$build/artifacts/fuzz_$h
    log=$build/logs/fuzz_$h.log
    if [ "${FUZZ_KEEP:-0}" != 1 ]; then rm -rf "$work"; fi
    mkdir -p "$work" "$arts" "$build/logs"
    cp "$here/corpus/fuzz_$h/"* "$work/" 2>/dev/null || true
    dict=
    [ -f "$here/dict/fuzz_$h.dict" ] && dict=-dict=$here/dict/fuzz_$h.dict
    rc=0
    # shellcheck disable=SC2086 # FUZZ_ARGS and dict are word lists on purpose
    "$build/fuzz_$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$arts/" $dict ${FUZZ_ARGS:-} "$work" \
        >"$log" 2>&1 || rc=$?
    echo "$rc" >"$build/logs/fuzz_$h.rc"
}

jobs=${FUZZ_JOBS:-1}
case $jobs in '' | *[!0-9]* | 0) die "FUZZ_JOBS must be a positive number" ;; esac
run_start=$(date +%s)
running=0
for h in $harnesses; do
    rm -f "$build/logs/fuzz_$h.rc"
    run_one "$h" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait
        running=0
    fi
done
wait
run_secs=$(($(date +%s) - run_start))

# ---- report -----------------------------------------------------------------------------------
status=0
total_execs=0
printf '%-16s %12s %9s %8s %8s %7s %6s  %s\n' harness executions exec/s cov ft corpus rssMB result
for h in $harnesses; do
    log=$build/logs/fuzz_$h.log
    rc=$(cat "$build/logs/fuzz_$h.rc" 2>/dev/null || echo 99)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
    # The last status line: "#N  DONE  cov: C ft: F corp: U/S ..." (or the last progress line).
    last=$(grep -E '^#[0-9]+' "$log" | grep ' cov: ' | tail -n 1 || true)
    cov=$(printf '%s\n' "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(printf '%s\n' "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    corp=$(printf '%s\n' "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
    result=ok
    if [ "$rc" != 0 ]; then
        result="FAILED (exit $rc)"
        status=1
    fi
    total_execs=$((total_execs + ${execs:-0}))
    printf '%-16s %12s %9s %8s %8s %7s %6s  %s\n' "fuzz_$h" "${execs:-?}" "${speed:-?}" \
        "${cov:-?}" "${ft:-?}" "${corp:-?}" "${rss:-?}" "$result"
done
printf '%-16s %12s %9s %35s  build %ss + fuzzing %ss = %ss\n' total "$total_execs" \
    "$((total_execs / (run_secs > 0 ? run_secs : 1)))" "" "$build_secs" "$run_secs" \
    "$((build_secs + run_secs))"

for h in $harnesses; do
    rc=$(cat "$build/logs/fuzz_$h.rc" 2>/dev/null || echo 99)
    [ "$rc" = 0 ] && continue
    log=$build/logs/fuzz_$h.log
    echo
    echo "==== fuzz_$h failed (exit $rc); log: $log"
    grep -E -A 40 'ERROR: |FUZZ PROPERTY FAILED|runtime error|Test unit written' "$log" | head -n 80
    for a in $(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log"); do
        echo "---- reproducer $a ($(wc -c <"$a") bytes), hex:"
        od -An -tx1 -v "$a" | head -n 40
        echo "---- replay: $build/fuzz_$h $a"
    done
done
exit $status
