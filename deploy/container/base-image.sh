#!/bin/bash
# Builds the local stand-in for docker.io/library/debian:bookworm-slim, once.
#
# This machine has no container registry, so `FROM debian:bookworm-slim` can only resolve to an
# image that is already in podman's local storage. This script makes one the way the official
# slim image is made (debootstrap minbase, then the "minimizing" apt/dpkg configuration and the
# "slimify" pass of debuerreotype) and imports it under the official name. When that image is
# already present it does nothing, so it is cheap to call before every build.
#
#   deploy/container/base-image.sh            # build only if missing
#   BASE_IMAGE_REBUILD=1 deploy/container/base-image.sh   # replace it
#   deploy/container/base-image.sh --mirrors  # print the mirrors it would use, build nothing
#
# Needs root (debootstrap), podman, debootstrap and a Debian mirror. About 40 s when it builds.
# The mirrors are the ones this machine's apt already uses (its sources, see apt_mirror below), so
# the repository names no package host and the image fetches from wherever the machine may.
# Environment: BASE_IMAGE (the name to import as), BASE_SUITE (bookworm), BASE_MIRROR and
# BASE_SECURITY_MIRROR (override the mirrors taken from apt's sources).
set -euo pipefail

IMAGE=${BASE_IMAGE:-docker.io/library/debian:bookworm-slim}
SUITE=${BASE_SUITE:-bookworm}

log() { printf 'base-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# apt_mirror SUITE [APT_DIR]: prints the first URI of the apt source that serves SUITE on this
# machine (nothing if none does). deb822 files (sources.list.d/*.sources, Debian 12's default)
# come first: the first stanza of Types deb, not Enabled: no, whose Suites include SUITE. Then the
# one-line format (sources.list, sources.list.d/*.list): the first "deb [options] URI SUITE ..."
# line. APT_DIR (default /etc/apt) lets the parsing be tried on other files.
apt_mirror() {
    local suite=$1 dir=${2:-/etc/apt} uri
    local -a deb822 oneline
    shopt -s nullglob
    deb822=("$dir"/sources.list.d/*.sources)
    oneline=("$dir"/sources.list "$dir"/sources.list.d/*.list)
    shopt -u nullglob
    [ -f "${oneline[0]}" ] || oneline=("${oneline[@]:1}") # sources.list, named without a glob
    if [ ${#deb822[@]} -gt 0 ]; then
        # Paragraph mode: one record a stanza. Field names are case-insensitive; a line starting
        # with white space continues the field before it; # starts a comment line.
        uri=$(awk -v suite="$suite" '
            function has(list, word,   n, a, i) {
                n = split(list, a, /[ \t]+/)
                for (i = 1; i <= n; i++) if (a[i] == word) return 1
                return 0
            }
            BEGIN { RS = ""; FS = "\n" }
            {
                split("", v); key = ""
                for (i = 1; i <= NF; i++) {
                    line = $i
                    if (line ~ /^#/) continue
                    if (line ~ /^[ \t]/) { if (key != "") v[key] = v[key] " " line; continue }
                    p = index(line, ":")
                    if (!p) continue
                    key = tolower(substr(line, 1, p - 1)); v[key] = substr(line, p + 1)
                }
                if (tolower(v["enabled"]) ~ /^[ \t]*no[ \t]*$/) next
                if (!has(v["types"], "deb") || !has(v["suites"], suite)) next
                n = split(v["uris"], u, /[ \t]+/)
                for (i = 1; i <= n; i++) if (u[i] != "") { print u[i]; exit }
            }' "${deb822[@]}")
        if [ -n "$uri" ]; then printf '%s\n' "$uri"; return; fi
    fi
    [ ${#oneline[@]} -gt 0 ] || return 0
    # "deb [key=value ...] URI SUITE COMPONENT...": the options may hold spaces inside the brackets.
    awk -v suite="$suite" '
        { sub(/#.*/, "") }
        $1 != "deb" { next }
        {
            i = 2
            if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
            if ($(i + 1) == suite) { print $i; exit }
        }' "${oneline[@]}"
}

# The mirrors: the environment's, else apt's; resolved only to build (a reused image needs none).
resolve_mirrors() {
    MIRROR=${BASE_MIRROR:-$(apt_mirror "$SUITE")}
    SECURITY_MIRROR=${BASE_SECURITY_MIRROR:-$(apt_mirror "$SUITE-security")}
    [ -n "$MIRROR" ] || die "no apt source on this machine serves suite $SUITE (looked for" \
        "URIs: in /etc/apt/sources.list.d/*.sources, deb lines in /etc/apt/sources.list and" \
        "/etc/apt/sources.list.d/*.list); set BASE_MIRROR to a Debian mirror URL"
    [ -n "$SECURITY_MIRROR" ] || die "no apt source on this machine serves suite $SUITE-security" \
        "(looked in the same files); set BASE_SECURITY_MIRROR to a Debian security mirror URL"
}

if [ "${1:-}" = --mirrors ]; then
    resolve_mirrors
    printf 'MIRROR=%s\nSECURITY_MIRROR=%s\n' "$MIRROR" "$SECURITY_MIRROR"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap creates device nodes and chowns files)"
command -v podman >/dev/null || die "podman is not installed (apt-get install podman runc)"

if [ "${BASE_IMAGE_REBUILD:-0}" != 1 ] && podman image exists "$IMAGE"; then
    log "$IMAGE present, reusing it"
    exit 0
fi
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
resolve_mirrors

ROOTFS=$(mktemp -d /var/tmp/snowflaked-rootfs.XXXXXX)

# debootstrap mounts proc/sys (and in some environments binds /dev) inside the target; a failure
# half-way can leave them mounted. Unmount everything below the target, deepest first, before
# removing it, and never let rm cross into another file system.
cleanup() {
    local mnt
    awk -v root="$ROOTFS" 'index($2, root "/") == 1 { print $2 }' /proc/self/mounts | sort -r |
        while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done
    rm -rf --one-file-system "$ROOTFS"
    rm -f "$ROOTFS.log"
}
trap cleanup EXIT

log "debootstrap --variant=minbase $SUITE from $MIRROR (about 30 s)"
if ! timeout 900 debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" \
        >"$ROOTFS.log" 2>&1; then
    tail -n 30 "$ROOTFS.log" >&2
    rm -f "$ROOTFS.log"
    die "debootstrap failed"
fi
rm -f "$ROOTFS.log"

# --- the official image's minimizing configuration ----------------------------------------------
# No service may start during a package install inside a build.
cat >"$ROOTFS/usr/sbin/policy-rc.d" <<'EOF'
#!/bin/sh
# Package installs in an image build must not start services.
exit 101
EOF
chmod 0755 "$ROOTFS/usr/sbin/policy-rc.d"

# A build layer does not survive power loss anyway: skip dpkg's fsyncs.
printf '%s\n' '# Image builds are thrown away on failure: no fsync after each unpack.' \
    'force-unsafe-io' >"$ROOTFS/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"

# apt keeps no .deb files or binary caches in a layer, stores its lists compressed, fetches no
# translations, and lets autoremove take what only a Suggests kept.
cat >"$ROOTFS/etc/apt/apt.conf.d/docker-clean" <<'EOF'
// Downloaded packages and apt's binary caches only make image layers bigger.
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
printf '%s\n' '// Keep the package lists compressed on disk.' 'Acquire::GzipIndexes "true";' \
    >"$ROOTFS/etc/apt/apt.conf.d/docker-gzip-indexes"
printf '%s\n' '// No description translations.' 'Acquire::Languages "none";' \
    >"$ROOTFS/etc/apt/apt.conf.d/docker-no-languages"
printf '%s\n' '// Autoremove what only a Suggests kept installed.' \
    'Apt::AutoRemove::SuggestsImportant "false";' \
    >"$ROOTFS/etc/apt/apt.conf.d/docker-autoremove-suggests"
chmod 0644 "$ROOTFS"/etc/apt/apt.conf.d/docker-* "$ROOTFS/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"

# The same sources as the official image: the release, its updates and the security archive.
rm -f "$ROOTFS/etc/apt/sources.list"
cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

# --- slimify: delete documentation, manuals and translations, and keep dpkg from adding more ----
# The dpkg filters make every later `apt-get install` in an image built FROM this one skip the
# same paths, which is what keeps the runtime stage small.
EXCLUDES="/usr/share/doc/* /usr/share/groff/* /usr/share/info/* /usr/share/linda/*
/usr/share/lintian/overrides/* /usr/share/locale/* /usr/share/man/*"
INCLUDES="/usr/share/doc/*/copyright /usr/share/locale/locale.alias /usr/share/locale/languages
/usr/share/locale/all_languages /usr/share/locale/currency/* /usr/share/locale/l10n/*"
set -f # these are patterns for dpkg and find, never for the shell
{
    echo '# This is the "slim" variant of the Debian base image (built by'
    echo '# deploy/container/base-image.sh the way the official one is): files that are not needed'
    echo '# in a container are excluded, and this configuration keeps them that way.'
    for p in $EXCLUDES; do echo "path-exclude $p"; done
    for p in $INCLUDES; do echo "path-include $p"; done
} >"$ROOTFS/etc/dpkg/dpkg.cfg.d/docker"
chmod 0644 "$ROOTFS/etc/dpkg/dpkg.cfg.d/docker"

keep=()
for p in $INCLUDES; do keep+=(-o -path "$ROOTFS$p"); done
keep=("(" "${keep[@]:1}" ")")
for p in $EXCLUDES; do
    dir="$ROOTFS${p%/\*}"
    [ -d "$dir" ] || continue
    # Files first (keeping the includes), then empty directories and dangling links until none.
    find "$dir" -depth -mindepth 1 -not "${keep[@]}" -not -type d -not -type l -delete
    while [ -n "$(find "$dir" -depth -mindepth 1 \( -empty -o -xtype l \) -print -delete | head -c1)" ]; do :; done
done
set +f

# --- what a fresh image must not carry over from this build -------------------------------------
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/* "$ROOTFS"/var/cache/debconf/*-old \
    "$ROOTFS"/var/log/apt/* "$ROOTFS"/tmp/* "$ROOTFS"/var/tmp/*
rm -f "$ROOTFS"/var/log/dpkg.log "$ROOTFS"/var/log/bootstrap.log "$ROOTFS"/var/log/alternatives.log \
    "$ROOTFS"/var/cache/ldconfig/aux-cache "$ROOTFS"/run/mount/utab
rmdir "$ROOTFS/run/mount" 2>/dev/null || true
# debootstrap copies the build host's name and resolver; the container runtime provides both.
: >"$ROOTFS/etc/resolv.conf"
echo localhost >"$ROOTFS/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$ROOTFS/etc/hosts"

log "importing as $IMAGE"
old=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
if ! tar -C "$ROOTFS" --numeric-owner --xattrs \
        --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' -c . |
        podman import --change 'CMD ["bash"]' \
            --message "debootstrap --variant=minbase $SUITE, slimmed (deploy/container/base-image.sh)" \
            - "$IMAGE" >"$ROOTFS.log" 2>&1; then
    cat "$ROOTFS.log" >&2
    die "podman import failed"
fi
# A rebuild leaves the previous base untagged: remove it unless images built on it still use it.
if [ -n "$old" ]; then podman rmi "$old" >/dev/null 2>&1 || true; fi
log "done: $IMAGE ($(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
