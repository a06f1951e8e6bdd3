# snowflaked container image: build with the project's own CMake build, ship only the binary and
# its runtime libraries on debian:bookworm-slim. deploy/README.md ("Container") tells how to
# build, run and test it; deploy/test-container.sh proves it end to end with podman.
#
#   podman build --format docker -t snowflaked .          # --format docker keeps HEALTHCHECK
#   podman build --format docker --build-arg RUN_TESTS=1 -t snowflaked .   # + `make test` first
#   podman run -d --hostname snowflaked-0 -p 8080:8080 -v snowflaked-data:/var/lib/snowflaked snowflaked

# --- build ----------------------------------------------------------------------------------------
FROM debian:bookworm-slim AS build
# 1 = run the whole test suite (`make test`) before the image is produced; it needs more packages
# (check, python3, memcached and its clients) and about a minute more.
ARG RUN_TESTS=0
# The dependency layer comes first and depends only on RUN_TESTS and the installer script, so it is
# cached across source changes (apt-get of build-essential is the slow part of a build).
# CMakeLists.txt requires python3 (for the integration tests) even when none is run: hence
# python3-minimal in the plain build.
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update -qq; \
    if [ "$RUN_TESTS" = 1 ]; then \
        sh /tmp/install-deps.sh; \
    else \
        apt-get install -y -qq --no-install-recommends \
            build-essential cmake pkg-config libuv1-dev libcjson-dev libssl-dev python3-minimal; \
    fi; \
    rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh

WORKDIR /src
COPY . .
# The commands `make build` wraps (its `deps` step would install the test packages too); the
# image needs only the daemon, so only that target is built unless the tests run.
RUN set -eux; \
    if [ "$RUN_TESTS" = 1 ]; then \
        make test BUILD=build BUILD_TYPE=Release; \
    else \
        cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null; \
        cmake --build build --target snowflaked -j "$(nproc)"; \
    fi; \
    strip --strip-unneeded build/snowflaked; \
    ./build/snowflaked --version; \
    ./build/snowflaked -c deploy/container/config.json --worker-id 0 --check-config >/dev/null

# --- runtime --------------------------------------------------------------------------------------
FROM debian:bookworm-slim

# Runtime libraries only (the binary links libuv, libcjson, OpenSSL 3's libssl3 for the TLS
# listeners, and glibc), and the unprivileged user
# that owns the data directory (lease file, pid lock, cache snapshot).
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends libuv1 libcjson1 libssl3; \
    rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log /var/cache/debconf/*-old; \
    groupadd --gid 10001 snowflaked; \
    useradd --no-log-init --uid 10001 --gid 10001 --home-dir /var/lib/snowflaked --no-create-home \
            --shell /usr/sbin/nologin snowflaked; \
    install -d -o 10001 -g 10001 -m 0750 /var/lib/snowflaked

COPY --from=build /src/build/snowflaked /usr/local/bin/snowflaked
COPY deploy/container/config.json /etc/snowflaked/config.json

# The data directory survives the container: mount a named volume or a host directory (owned by
# 10001:10001) there to keep the lease and the cache snapshot across restarts.
VOLUME /var/lib/snowflaked
WORKDIR /var/lib/snowflaked
# HTTP (ids, cache, echo, health, metrics) and the memcached text protocol, as config.json enables.
EXPOSE 8080 11211

USER 10001:10001
# The daemon is PID 1: it takes SIGTERM through sigwait, drains for server.shutdown_grace_ms
# (8 s in the container config, inside podman's and Docker's 10 s default stop timeout), writes
# the cache snapshot and the final lease, and exits 0.
STOPSIGNAL SIGTERM
# bash's /dev/tcp: no curl or wget in the image. Follows SNOWFLAKED_SERVER_PORT when it is set.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${SNOWFLAKED_SERVER_PORT:-8080} && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && grep -q '^HTTP/1\\.[01] 200 ' <&3"]

# Labels last, so that a new version number does not invalidate the layers above. (No "created"
# label: it would make every build a new image; `podman image inspect` has .Created.)
ARG VERSION=0.1.0
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="snowflaked" \
      org.opencontainers.image.description="Snowflake IDs, a memcached-class cache and echo over HTTP/1.1 and the memcached text protocol" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.vendor="The snowflaked authors" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim"

ENTRYPOINT ["/usr/local/bin/snowflaked"]
CMD ["-c", "/etc/snowflaked/config.json"]
