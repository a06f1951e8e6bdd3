#!/bin/sh
# Installs the npm judges (test/judges/README.md) and proves they can judge: the packages pinned by
# package.json + package-lock.json (uuid, ulid, typeid-js, and @seriousme/openapi-schema-validator
# for service/openapi.yaml) into test/judges/node_modules/ (git-ignored), then
# `node judge.mjs --self-test`. Run by ctest `judges_install` (the fixture of ctests `judges` and
# `openapi`).
#
# Usage: sh test/judges/install.sh
#
# - node and npm: installed from Debian (nodejs, npm; with sudo when not root) when missing, as
#   deploy/install-deps.sh and deploy/k8s/validate.sh do.
# - npm ci --prefer-offline: served from npm's cache when it holds the pinned tarballs (no network),
#   else fetched from the registry npm is configured with; the lock file names no registry, only
#   versions and integrity hashes, so a mirror works unchanged and a tampered tarball is refused.
# - Reused while the lock file and Node's major version are unchanged (stamp in node_modules/).
# - SNOWFLAKED_NO_NPM=1: does nothing and says so (ctest then shows `judges_install` and `judges`
#   as skipped). Without it, a machine where npm cannot be had fails here: the judges are part of
#   `make test`, not an optional extra.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)

if [ "${SNOWFLAKED_NO_NPM:-}" = 1 ]; then
    echo "judges skipped: SNOWFLAKED_NO_NPM=1 (npm judges not installed; unset it to run them)"
    exit 0
fi

say() { printf 'judges: %s\n' "$*"; }
die() { printf 'judges/install.sh: %s\n' "$*" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/snowflaked-judges.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- node and npm ---------------------------------------------------------------------------
# By command, not by Debian package name: NodeSource's nodejs package carries npm itself and
# conflicts with Debian's npm package (asking apt for npm would replace that Node).
missing=""
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
    say "installing from Debian:$missing"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "need root or sudo to install:$missing"
        SUDO=sudo
    fi
    APT="timeout 300 $SUDO apt-get -qq"
    export DEBIAN_FRONTEND=noninteractive
    # A first failure may be stale package lists: update once, then try again.
    # shellcheck disable=SC2086  # word splitting of the package list is intended
    if ! $APT install -y --no-install-recommends $missing >"$TMP/apt.log" 2>&1; then
        # shellcheck disable=SC2086
        { $APT update && $APT install -y --no-install-recommends $missing; } >"$TMP/apt.log" 2>&1 ||
            { cat "$TMP/apt.log" >&2; die "apt-get install$missing failed"; }
    fi
fi

# ---- the pinned packages ----------------------------------------------------------------------
lock_hash=$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -c1-16)
stamp="$lock_hash node$(node -p 'process.versions.node.split(".")[0]')"
stamp_file="$HERE/node_modules/.judges-stamp"
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ]; then
    say "reusing test/judges/node_modules ($stamp)"
else
    say "npm ci: the pinned uuid, ulid, typeid-js and OpenAPI validator into node_modules"
    t=$(date +%s)
    (cd "$HERE" && timeout 300 npm ci --no-audit --no-fund --prefer-offline --loglevel=error) \
        >"$TMP/npm.log" 2>&1 ||
        { cat "$TMP/npm.log" >&2; die "npm ci failed (offline with an empty npm cache? see above)"; }
    printf '%s\n' "$stamp" >"$stamp_file"
    say "installed in $(($(date +%s) - t)) s ($stamp)"
fi

# ---- the judge can judge ----------------------------------------------------------------------
timeout 60 node "$HERE/judge.mjs" --self-test
