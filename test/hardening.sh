#!/bin/sh
# The hardening stage of CI (`make test-hardening`, run by .ci/run after make test and
# make test-deploy): every ctest suite again under ASan+UBSan and under TSan (any report fails
# the suite), then each libFuzzer harness for FUZZ_SECONDS (default 60) over its seed corpus.
# Ends with one line saying what ran.
set -eu
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
start=$(date +%s)

count() { # suites ctest ran in a build directory
    sed -n 's/.*tests passed, [0-9]* tests failed out of \([0-9]*\).*/\1/p' "$1" | tail -n 1
}

SNOWFLAKED_EXTRA_PACKAGES="clang libclang-rt-14-dev" sh deploy/install-deps.sh
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
# stage NAME CMD...: runs CMD, shows and keeps its output in $log/NAME, fails on its failure.
# (Its status is taken with ||, inside the pipeline, where set -e would end the group first.)
stage() {
    name=$1
    shift
    { rc=0; "$@" 2>&1 || rc=$?; echo "$rc" >"$log/$name.rc"; } | tee "$log/$name"
    rc=$(cat "$log/$name.rc")
    [ "$rc" = 0 ] || { echo "test-hardening: $name failed (exit $rc)"; exit 1; }
}
stage asan make test-asan
stage tsan make test-tsan
# The harnesses are single-threaded and time nothing: one per core halves the stage's wall
# clock (FUZZ_JOBS=1 for one at a time).
stage fuzz env FUZZ_JOBS="${FUZZ_JOBS:-$(nproc)}" sh test/fuzz/run.sh "$FUZZ_SECONDS"
execs=$(awk '$1 == "total" {print $2}' "$log/fuzz" | tail -n 1)
harnesses=$(grep -c '^fuzz_' "$log/fuzz" || true) # one report line per harness (run.sh)
echo "test-hardening: passed: $(count "$log/asan") suites under ASan+UBSan," \
    "$(count "$log/tsan") under TSan, ${harnesses} fuzz harnesses x ${FUZZ_SECONDS} s" \
    "(${execs:-?} executions), in $(( $(date +%s) - start )) s"
