#!/bin/sh
# Installs the Debian 12 packages snowflaked needs to build and test; silent when all are present.
# Idempotent: safe to run before every build. Uses sudo only when not already root.
set -eu

PACKAGES="build-essential cmake pkg-config libuv1-dev libcjson-dev check python3"
# OpenSSL 3 for TLS on the listeners (net/tls.c) and in sfload; the openssl command makes the
# tests' certificates.
PACKAGES="$PACKAGES libssl-dev openssl"
# Real memcached clients for the protocol tests (memccapable, memcslap, pymemcache), and memcached
# itself: test_memcache_diff.py runs it and compares its replies with ours.
PACKAGES="$PACKAGES libmemcached-tools python3-pymemcache memcached"
# memcached's own t/*.t files (test/memcached_t): prove (perl), apt-get source (dpkg-dev).
PACKAGES="$PACKAGES perl dpkg-dev"
# ... and over TLS (memcached_suite_tls): the harness's TLS client, IO::Socket::SSL.
PACKAGES="$PACKAGES libio-socket-ssl-perl"
# PyYAML for the checks of deploy/monitoring's rules (ctest monitoring) and of service/openapi.yaml;
# jsonschema for the daemon's JSON bodies against openapi.yaml's schemas (ctest openapi_live).
PACKAGES="$PACKAGES python3-yaml python3-jsonschema"
PACKAGES="$PACKAGES ${SNOWFLAKED_EXTRA_PACKAGES:-}"

missing=""
for pkg in $PACKAGES; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    case "$status" in
        "install ok installed") ;;
        *) missing="$missing $pkg" ;;
    esac
done
# node + npm for the npm judges of the UUID/ULID output (ctest judges, test/judges/README.md;
# SNOWFLAKED_NO_NPM=1 skips them). Looked up by command, not by package: NodeSource's nodejs
# package carries npm and conflicts with Debian's npm, which apt would otherwise swap in for it.
if [ "${SNOWFLAKED_NO_NPM:-}" != 1 ]; then
    command -v node >/dev/null 2>&1 || missing="$missing nodejs"
    command -v npm >/dev/null 2>&1 || missing="$missing npm"
fi
[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to install:$missing" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
# shellcheck disable=SC2086  # word splitting of the package list is intended
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
