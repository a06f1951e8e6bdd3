/* snowflaked: start-up and shutdown.
 *
 * Exit codes: 0 clean stop (or --help/--version/--check-config), 1 a runtime failure at start
 * (data directory, lease file), 2 bad configuration or usage.
 *
 * Order matters: signals are blocked before any thread starts (so only the main thread takes
 * them, via sigwait); the lease is read and the first renewal is on disk before any ID can be
 * issued; on SIGTERM/SIGINT the generators are sealed and the exact final lease is written. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "app/wiring.h"
#include "cache/persist.h"
#include "cluster/peers.h"
#include "proto/echo.h"
#include "proto/memcache.h"
#include "config/config.h"
#include "http/http.h"
#include "net/loop.h"
#include "obs/log.h"
#include "snowflake/generator.h"
#include "snowflake/lease.h"
#include "util/version.h"

#ifndef SF_MALLOC_NAME
#define SF_MALLOC_NAME "glibc" /* CMake -DSF_MALLOC=... links another */
#endif

#define EXIT_CONFIG 2

__attribute__((format(printf, 2, 3), noreturn)) static void die(int code, const char *fmt, ...)
{
    log_shutdown(); /* what was logged before comes first */
    va_list ap;
    va_start(ap, fmt);
    fputs("snowflaked: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

/* mkdir -p, for data_dir. */
static int make_dirs(const char *path, char *err, size_t errlen)
{
    char buf[CFG_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                snprintf(err, errlen, "cannot create data_dir %s: %s", buf, strerror(errno));
                return -1;
            }
            if (end)
                break;
            *p = '/';
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "data_dir %s is not a directory", path);
        return -1;
    }
    return 0;
}

/* One process per data directory: two daemons sharing a lease (and so, usually, a worker id)
 * would issue duplicate IDs. The lock is held until exit; the kernel drops it on any death. */
static void lock_data_dir(const char *dir)
{
    char path[CFG_PATH_MAX + 32], text[32];
    snprintf(path, sizeof path, "%s/snowflaked.pid", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        die(EXIT_FAILURE, "cannot open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        ssize_t n = read(fd, text, sizeof text - 1);
        text[n > 0 ? n : 0] = '\0';
        text[strcspn(text, "\n")] = '\0';
        die(EXIT_FAILURE,
            "data_dir %s is in use by another snowflaked (pid %s); give each instance "
            "its own data_dir",
            dir, text[0] ? text : "unknown");
    }
    int len = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len)
        die(EXIT_FAILURE, "cannot write %s: %s", path, strerror(errno));
    /* fd stays open on purpose: closing it would release the lock. */
}

/* The floor below which no ID may be issued, from the lease file. */
static uint64_t read_lease_floor(const cfg *c, const cfg_cli *cli, const char *path,
                                 uint64_t *prev_end)
{
    char err[512];
    int rc = sf_lease_read(path, prev_end, err, sizeof err);
    if (rc == 1)
        return sf_lease_first_tick(&c->snowflake.layout, *prev_end);
    if (rc == 0) {
        LOG_INFO("no lease at %s: first start", path);
        *prev_end = 0;
        return 0;
    }
    if (!cli->ignore_corrupt_lease)
        die(EXIT_FAILURE, "%s (start with --ignore-corrupt-lease to override)", err);
    /* The previous run renewed its lease at most one window (plus the run-ahead) beyond its
     * clock; a second on top covers a wall clock that was stepped back while it ran. */
    const cfg_snowflake *s = &c->snowflake;
    *prev_end = sf_clock_now(sf_clock_system()) + s->lease_ms +
                sf_gen_ahead_ms_for(&s->layout, s->max_backward_ms, s->max_batch) + 1000;
    LOG_WARN("%s; --ignore-corrupt-lease: issuing from %llu ms", err,
             (unsigned long long)*prev_end);
    return sf_lease_first_tick(&c->snowflake.layout, *prev_end);
}

#define CACHE_SWEEP_INTERVAL_MS 100
#define CACHE_SWEEP_BUCKETS     256 /* per loop per tick: bounded work, memory comes back anyway */

/* auth.token, or the first line of auth.token_file (a Kubernetes Secret mounted as a file), so
 * the secret need not sit in the config or the environment. Never logged. */
static int load_token(const cfg_auth *a, char *out, size_t cap, char *err, size_t errlen)
{
    out[0] = '\0';
    if (a->token[0]) {
        snprintf(out, cap, "%s", a->token);
        return 0;
    }
    if (!a->token_file[0])
        return 0;
    FILE *f = fopen(a->token_file, "r");
    if (!f) {
        snprintf(err, errlen, "auth.token_file %s: %s", a->token_file, strerror(errno));
        return -1;
    }
    char line[512];
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t n = got ? strcspn(line, "\r\n") : 0;
    if (n == 0 || n >= cap) {
        snprintf(err, errlen, "auth.token_file %s: the first line must hold the token (1..%zu bytes)",
                 a->token_file, cap - 1);
        return -1;
    }
    memcpy(out, line, n);
    out[n] = '\0';
    return 0;
}

static void sweep_cache(net_loop *l, void *arg)
{
    cache_store_sweep(arg, &l->tick_cursor, CACHE_SWEEP_BUCKETS, sf_clock_now(sf_clock_system()));
}

int main(int argc, char **argv)
{
    char err[CFG_PATH_MAX * 3]; /* room for messages quoting paths */
    cfg_cli cli;
    if (cfg_parse_args(argc, argv, &cli, err, sizeof err) != 0) {
        fprintf(stderr, "snowflaked: %s\nTry 'snowflaked --help'.\n", err);
        return EXIT_CONFIG;
    }
    if (cli.help) {
        cfg_usage(stdout, "snowflaked");
        return 0;
    }
    if (cli.version) {
        printf("snowflaked %s\n", SF_VERSION);
        return 0;
    }
    static cfg c;
    if (cfg_load(&c, &cli, sf_clock_now(sf_clock_system()), err, sizeof err) != 0)
        die(EXIT_CONFIG, "%s", err);
    if (cli.check_config) {
        cfg_print_json(&c, stdout);
        return 0;
    }

    /* Only the main thread takes these signals; every thread created later inherits the mask. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    log_options lo;
    app_log_options(&c, &lo);
    if (log_init(&lo, err, sizeof err) != 0)
        die(EXIT_FAILURE, "log.file: %s", err);

    if (make_dirs(c.data_dir, err, sizeof err) != 0)
        die(EXIT_FAILURE, "%s", err);
    lock_data_dir(c.data_dir);
    char lease_path[CFG_PATH_MAX + 32];
    snprintf(lease_path, sizeof lease_path, "%s/" SF_LEASE_FILE, c.data_dir);
    uint64_t prev_end;
    uint64_t min_tick = read_lease_floor(&c, &cli, lease_path, &prev_end);

    const cfg_snowflake *s = &c.snowflake;
    size_t ngens = s->per_thread_worker_ids ? c.server.threads : 1;
    sf_gen *gens = aligned_alloc(64, sizeof(sf_gen) * ngens);
    sf_gen **gen_ptrs = calloc(ngens, sizeof *gen_ptrs);
    if (!gens || !gen_ptrs)
        die(EXIT_FAILURE, "out of memory");
    for (size_t i = 0; i < ngens; i++) {
        sf_gen_config gc;
        app_gen_config(&c, (uint32_t)i, NULL, &gc);
        gc.min_tick = min_tick;  /* from the lease file */
        gc.lease_guarded = true; /* nothing is issued before the keeper's first renewal */
        if (sf_gen_init(&gens[i], &gc, err, sizeof err) != 0)
            die(EXIT_CONFIG, "snowflake: %s", err);
        gen_ptrs[i] = &gens[i];
    }
    sf_lease_keeper keeper;
    if (sf_lease_keeper_start(&keeper, gen_ptrs, ngens, lease_path, s->lease_ms, prev_end, err,
                              sizeof err) != 0)
        die(EXIT_FAILURE, "%s", err);

    /* The network: loops, the HTTP listener, the API. */
    const cfg_server *sv = &c.server;
    net_config nc;
    app_net_config(&c, &nc);
    static net_server net;
    if (net_server_init(&net, &nc, sv->threads, err, sizeof err) != 0)
        die(EXIT_FAILURE, "%s", err);
    http_limits hl;
    app_http_limits(&c, &hl);
    http_server *http = http_server_new(&hl, &net, err, sizeof err);
    if (!http)
        die(EXIT_FAILURE, "%s", err);
    /* The cache store, shared by all loops; each loop sweeps expired items a little at a time. */
    cache_store *cache = NULL;
    if (c.cache.enabled) {
        cache_store_config cc;
        app_cache_config(&c, &cc);
        if (!(cache = cache_store_new(&cc, err, sizeof err)))
            die(EXIT_FAILURE, "cache: %s", err);
        net_server_on_tick(&net, CACHE_SWEEP_INTERVAL_MS, sweep_cache, cache);
    }
    cache_persist *persist = NULL;
    if (cache && c.cache.persist) {
        char path[CFG_PATH_MAX + 32];
        app_snapshot_path(&c, path, sizeof path);
        if (!(persist = cache_persist_start(cache, path, c.cache.snapshot_interval_s, err,
                                            sizeof err)))
            die(EXIT_FAILURE, "%s", err);
    }
    static api_ctx api;
    api.config = &c;
    api.gens = gen_ptrs;
    api.ngens = (unsigned)ngens;
    api.keeper = &keeper;
    api.http = http;
    api.net = &net;
    api.cache = cache;
    static char token[256];
    if (load_token(&c.auth, token, sizeof token, err, sizeof err) != 0)
        die(EXIT_FAILURE, "%s", err);
    api.token = token;
    api.token_len = strlen(token);
    if (api.token_len)
        LOG_INFO("access control: bearer token required for %s", c.auth.protect_reads
                                                                    ? "every route but health"
                                                                    : "cache writes");
    api.persist = persist;
    api.loops = aligned_alloc(64, sizeof(api_loop) * sv->threads);
    if (!api.loops)
        die(EXIT_FAILURE, "out of memory");
    memset(api.loops, 0, sizeof(api_loop) * sv->threads);
    *(void **)&api.malloc_calls = dlsym(RTLD_DEFAULT, "sf_malloc_calls");
    if (api_register(http, &api) != 0)
        die(EXIT_FAILURE, "too many routes");
    if (s->peers[0]) { /* before listening: a duplicate identity must not serve a single ID */
        peers_result pr;
        uint32_t last_worker = s->worker_id + (s->per_thread_worker_ids ? sv->threads - 1 : 0);
        if (peers_check(s->peers, &s->layout, s->datacenter_id, s->worker_id, last_worker,
                        s->peer_timeout_ms, &pr, err, sizeof err) != 0)
            die(EXIT_FAILURE, "%s", err);
        LOG_INFO("peers: %u of %u answered; no other replica uses datacenter %u worker %u",
                 pr.answered, pr.asked, s->datacenter_id, s->worker_id);
    }
    if (net_server_listen(&net, sv->host, (uint16_t)sv->port, &http_proto, http, err, sizeof err) !=
        0)
        die(EXIT_FAILURE, "%s", err);
    memcache_server *mc = NULL;
    if (cache && c.cache.memcached_port != 0) {
        if (!(mc = memcache_server_new(cache, sv->threads)))
            die(EXIT_FAILURE, "out of memory");
        if (net_server_listen(&net, c.cache.memcached_host, (uint16_t)c.cache.memcached_port,
                              &memcache_proto, mc, err, sizeof err) != 0)
            die(EXIT_FAILURE, "%s", err);
        LOG_INFO("memcached text protocol on %s:%u (no authentication, like memcached)",
                 c.cache.memcached_host, c.cache.memcached_port);
    }
    if (c.echo.tcp_port != 0) {
        if (net_server_listen(&net, c.echo.tcp_host, (uint16_t)c.echo.tcp_port, &echo_proto, NULL,
                              err, sizeof err) != 0)
            die(EXIT_FAILURE, "%s", err);
        LOG_INFO("raw TCP echo on %s:%u", c.echo.tcp_host, c.echo.tcp_port);
    }
    if (net_server_start(&net, err, sizeof err) != 0)
        die(EXIT_FAILURE, "%s", err);
    atomic_store(&api.listening, true);

    LOG_INFO("snowflaked %s: listening on http://%s%s%s:%u with %u loop%s (%s); datacenter %u, "
             "worker %u%s (%s), layout %u/%u/%u/%u, sync %s, lease %s, malloc " SF_MALLOC_NAME,
             SF_VERSION, strchr(sv->host, ':') ? "[" : "", sv->host,
             strchr(sv->host, ':') ? "]" : "", sv->port, sv->threads, sv->threads == 1 ? "" : "s",
             net.reuseport ? "SO_REUSEPORT" : "one acceptor", s->datacenter_id, s->worker_id,
             s->per_thread_worker_ids ? "+loop" : "", s->worker_origin, s->timestamp_bits,
             s->datacenter_bits, s->worker_bits, s->sequence_bits, sf_sync_mode_name(s->sync),
             lease_path);
    uint64_t retry = sf_gen_retry_after_ms(&gens[0]);
    if (retry > 0)
        LOG_WARN("clock is behind the stored lease; IDs are refused for about %llu ms",
                 (unsigned long long)retry);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    LOG_INFO("%s received, draining (up to %u ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
             sv->shutdown_grace_ms);
    /* A second signal during the drain ends the process at once. */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, NULL);
    net_server_drain(&net);
    net_server_join(&net);
    http_server_free(http);
    free(api.loops);
    memcache_server_free(mc);
    int code = 0;
    if (cache_persist_stop(persist) != 0)
        code = EXIT_FAILURE;
    cache_store_free(cache);

    if (sf_lease_keeper_stop(&keeper, err, sizeof err) != 0) {
        LOG_ERROR("final lease not written: %s", err);
        code = EXIT_FAILURE; /* the renewed lease on disk still covers every ID issued */
    }
    LOG_INFO("stopped%s", code ? " with errors" : "");
    log_shutdown();
    for (size_t i = 0; i < ngens; i++)
        sf_gen_destroy(&gens[i]);
    free(gens);
    free(gen_ptrs);
    return code;
}
