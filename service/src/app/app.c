/* The application object: see app.h.
 *
 * A failed app_start is followed by the process exit, so it leaves what it built as it is, as
 * the daemon always did: the kernel drops the data directory lock, the lease on disk already
 * covers every ID (none: nothing listens yet), and releasing by hand would do harm — stopping the
 * lease keeper or the persistence thread writes final files for a run that never served, and
 * loops that never ran cannot be closed by net_server_join. app_build, run once per input by the
 * fuzz harnesses, releases everything on failure instead.
 */
#include "app/app.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/wiring.h"
#include "cluster/etcd_tls.h"
#include "cluster/seq_etcd.h"
#include "cluster/peers.h"
#include "obs/log.h"
#include "proto/echo.h"
#include "seq/source_file.h"
#include "snowflake/rng.h"
#include "util/version.h"

#ifndef SF_MALLOC_NAME
#define SF_MALLOC_NAME "glibc" /* CMake -DSF_MALLOC=... links another */
#endif

#define EXIT_CONFIG             2
#define LOOP_TICK_INTERVAL_MS   100 /* housekeeping: the cache sweep, the quiescence count */
#define CACHE_SWEEP_BUCKETS     256 /* per loop per tick: bounded work, memory comes back anyway */
#define SUCCESSOR_LOG_MS        100 /* a shorter wait at start is logged at debug level */

/* ---- the data directory and the lease (daemon) ---------------------------------------------- */

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
static int lock_data_dir(const char *dir, char *err, size_t errlen)
{
    char path[CFG_PATH_MAX + 32], text[32];
    snprintf(path, sizeof path, "%s/snowflaked.pid", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        ssize_t n = read(fd, text, sizeof text - 1);
        text[n > 0 ? n : 0] = '\0';
        text[strcspn(text, "\n")] = '\0';
        snprintf(err, errlen,
                 "data_dir %s is in use by another snowflaked (pid %s); give each instance "
                 "its own data_dir",
                 dir, text[0] ? text : "unknown");
        close(fd);
        return -1;
    }
    int len = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return 0; /* fd stays open on purpose: closing it would release the lock */
}

/* The tick space of the UUIDv7 and ULID generators: Unix ms, the Snowflake layout's node bits.
 * Cannot fail on a valid layout: 10 years of ticks of at most 1 s take 29 bits, a sequence 8,
 * so the node has at most 26 of the 63. */
static int wide_layout(const cfg_snowflake *s, sf_layout *out, char *why, size_t len)
{
    return sf_layout_init_unix_ms(out, s->layout.datacenter_bits, s->layout.worker_bits, why, len);
}

/* With --ignore-corrupt-lease, the floor a corrupt lease file is replaced by (a Unix-ms time
 * every generator converts into its own ticks). The previous run renewed its lease at most one
 * window (plus the run-ahead of its furthest-running generator) beyond its clock; a second on
 * top covers a wall clock that was stepped back while it ran. */
static uint64_t corrupt_lease_floor_ms(const app *a)
{
    const cfg_snowflake *s = &a->config->snowflake;
    char why[256];
    unsigned r = s->random_sequence_start_bits;
    uint64_t ahead = sf_gen_ahead_ms_for(&s->layout, s->max_backward_ms, s->max_batch, r);
    sf_layout wide;
    if (wide_layout(s, &wide, why, sizeof why) == 0) {
        uint64_t wide_ahead = sf_gen_ahead_ms_for(&wide, s->max_backward_ms, s->max_batch, r);
        if (wide_ahead > ahead)
            ahead = wide_ahead;
    }
    return clk_now(clk_system()) + s->lease_ms + ahead + 1000;
}

/* A static identity's floor from its holders on this host, at now (the host claim held, so none
 * is left): the start of the first tick, in the Snowflake and the wide tick spaces alike, past
 * anything a previous holder can have handed out (sf_gen_successor_tick). A restart from the
 * same data_dir has the lease file, which already reaches further after a crash; one from
 * another data_dir (another lease, old or none) has only this. */
static uint64_t successor_floor_ms(const app *a, uint64_t now)
{
    const cfg_snowflake *s = &a->config->snowflake;
    char why[256];
    uint64_t floor =
        sf_layout_ms_of(&s->layout, sf_gen_successor_tick(&s->layout, s->max_backward_ms, now));
    sf_layout wide;
    if (wide_layout(s, &wide, why, sizeof why) == 0) {
        uint64_t w = sf_layout_ms_of(&wide, sf_gen_successor_tick(&wide, s->max_backward_ms, now));
        if (w > floor)
            floor = w;
    }
    return floor;
}

/* While claiming a slot: a SIGTERM or SIGINT is pending (main blocks them for its sigwait). */
static bool stop_signal_pending(void)
{
    sigset_t pending;
    return sigpending(&pending) == 0 &&
           (sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1);
}

/* snowflake.etcd.tls: the etcd client's certificates re-read when they change, the old context
 * kept when the new files do not make one (a cert written before its key, a bad pair). The
 * identity is untouched either way: connections open keep their context, new ones take the new. */
static pthread_mutex_t etcd_tls_reload_lock = PTHREAD_MUTEX_INITIALIZER;

static void reload_etcd_tls(app *a, const char *why, bool only_changed)
{
    if (!a->etcd_tls)
        return;
    pthread_mutex_lock(&etcd_tls_reload_lock);
    if (!only_changed || etcd_tls_files_changed(a->etcd_tls)) {
        char err[CFG_PATH_MAX * 2];
        if (etcd_tls_reload(a->etcd_tls, err, sizeof err) != 0)
            LOG_ERROR("snowflake.etcd.tls: certificate reload refused, the previous one stays in "
                      "service (%s): %s",
                      why, err);
        else
            LOG_INFO("snowflake.etcd.tls: certificates reloaded (%s): new etcd connections use "
                     "them",
                     why);
    }
    pthread_mutex_unlock(&etcd_tls_reload_lock);
}

static void etcd_tls_files_changed_cb(void *arg)
{
    reload_etcd_tls(arg, "files changed", true);
}

static void dir_of(const char *path, char *out, size_t outlen);

/* https:// endpoints: the client context (a bad CA, certificate or key: exit 1 naming the key),
 * and the watch of its files' directories. */
static int etcd_tls_init(app *a, char *err, size_t errlen)
{
    const cfg_etcd *e = &a->config->snowflake.etcd;
    if (strncmp(e->endpoints, "https://", 8) != 0)
        return 0;
    etcd_tls_config tc = {.what = "snowflake.etcd.tls"};
    snprintf(tc.ca_file, sizeof tc.ca_file, "%s", e->tls.ca_file);
    snprintf(tc.cert_file, sizeof tc.cert_file, "%s", e->tls.cert_file);
    snprintf(tc.key_file, sizeof tc.key_file, "%s", e->tls.key_file);
    snprintf(tc.server_name, sizeof tc.server_name, "%s", e->tls.server_name);
    if (!(a->etcd_tls = etcd_tls_new(&tc, err, errlen)))
        return -1;
    LOG_INFO("etcd over TLS: CA %s, client certificate %s%s%s", tc.ca_file,
             tc.cert_file[0] ? tc.cert_file : "none", tc.server_name[0] ? ", server name " : "",
             tc.server_name);
    if (!e->tls.watch_files)
        return 0;
    static char dirs[3][CFG_PATH_MAX];
    const char *ptrs[3];
    const char *files[] = {tc.ca_file, tc.cert_file, tc.key_file};
    size_t n = 0;
    for (size_t k = 0; k < 3; k++)
        if (files[k][0]) {
            dir_of(files[k], dirs[n], sizeof dirs[n]);
            ptrs[n] = dirs[n];
            n++;
        }
    char werr[CFG_PATH_MAX + 128];
    net_fswatch_opts o = {.debounce_ms = 500, .changed = etcd_tls_files_changed_cb, .arg = a};
    a->etcd_tls_watch = net_fswatch_start(ptrs, n, &o, werr, sizeof werr);
    if (!a->etcd_tls_watch)
        LOG_WARN("snowflake.etcd.tls files not watched (SIGHUP still reloads them): %s", werr);
    return 0;
}

/* The etcd backend's view of the config: the fleet's layout in one line (every member must
 * agree on it), who we are ($POD_NAME, else the host name) for operators. */
static int etcd_identity_init(app *a, char *err, size_t errlen)
{
    if (etcd_tls_init(a, err, errlen) != 0)
        return -1;
    const cfg_snowflake *s = &a->config->snowflake;
    const cfg_etcd *e = &s->etcd;
    char layout[160], host[256] = "";
    snprintf(layout, sizeof layout, "%u/%u/%u/%u epoch_ms=%llu unit_ms=%u node_bits_low=%d",
             s->timestamp_bits, s->datacenter_bits, s->worker_bits, s->sequence_bits,
             (unsigned long long)s->epoch_ms, s->time_unit_ms, s->node_bits_low ? 1 : 0);
    const char *holder = getenv("POD_NAME");
    if (!holder || !*holder) {
        gethostname(host, sizeof host - 1);
        holder = host;
    }
    sf_identity_etcd_config ec = {.endpoints = e->endpoints,
                                  .prefix = e->prefix,
                                  .ttl_s = e->ttl_s,
                                  .fence_margin_ms = e->fence_margin_ms,
                                  .request_timeout_ms = e->request_timeout_ms,
                                  .start_timeout_ms = e->start_timeout_ms,
                                  .datacenter = s->datacenter_id,
                                  .worker_min = e->worker_min,
                                  .worker_max = e->worker_max,
                                  .layout = layout,
                                  .holder = holder,
                                  .version = SF_VERSION,
                                  .auth_user = e->auth_username,
                                  .auth_password_file = e->auth_password_file,
                                  .clock = clk_system(),
                                  .should_stop = stop_signal_pending,
                                  .tls = a->etcd_tls};
    return sf_identity_etcd_init(&a->identity, &ec, err, errlen);
}

/* The identity's hooks (identity.h), on the lease keeper's thread. A lapse stops every
 * generator at once; the same slots re-claimed resume them from the previous holders' E; slots
 * someone else took stop the process like SIGTERM, exiting APP_EXIT_LOST so its supervisor
 * restarts it (it claims afresh, other slots or waiting). */
static void identity_stop_issuing(void *arg)
{
    app *a = arg;
    for (unsigned i = 0; i < perloop_count(&a->gens); i++)
        sf_gen_cap_lease(a->gen_ptrs[i], 0);
}

/* Every loop has run its housekeeping tick since the call: a request handler that was issuing
 * when we started has returned (ticks and handlers share the loop's thread). Bounded. */
static int wait_loops_quiet(app *a)
{
    unsigned n = a->net->nloops;
    uint64_t seen[CFG_MAX_THREADS];
    for (unsigned i = 0; i < n; i++)
        seen[i] = atomic_load(&a->loop_ticks[i]);
    for (int tries = 0; tries < 300; tries++) { /* 3 s: ticks come every 100 ms */
        unsigned quiet = 0;
        for (unsigned i = 0; i < n; i++)
            quiet += atomic_load(&a->loop_ticks[i]) != seen[i];
        if (quiet == n)
            return 0;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* Slots claimed later (waiting at start) or anew (the old ones taken): stop, let every
 * reservation in flight finish (it could pair the new node bits with an old tick), then
 * rebind each generator to its slot above the previous holders' floor. */
static int identity_bind(void *arg, const sf_identity_slots *s)
{
    app *a = arg;
    char why[256];
    identity_stop_issuing(a);
    if (atomic_load(&a->api.listening) && wait_loops_quiet(a) != 0) {
        LOG_ERROR("identity: the event loops did not pass a tick within 3 s; slots not taken up");
        return -1;
    }
    for (unsigned i = 0; i < perloop_count(&a->gens); i++) {
        sf_gen *g = a->gen_ptrs[i];
        if (sf_gen_rebind(g, s->datacenter, s->worker[i % a->gens_per_format],
                          sf_lease_first_tick(&g->layout, s->handoff_ms), why, sizeof why) != 0) {
            LOG_ERROR("identity claimed but generator %u cannot take it: %s", i, why);
            return -1;
        }
    }
    LOG_INFO("identity: now issuing as datacenter %u worker %u%s", s->datacenter, s->worker[0],
             s->n > 1 ? " (and one per loop)" : "");
    return 0;
}

static int identity_resume(void *arg, uint64_t handoff_ms)
{
    app *a = arg;
    char why[256];
    for (unsigned i = 0; i < perloop_count(&a->gens); i++) {
        sf_gen *g = a->gen_ptrs[i];
        if (sf_gen_resume(g, sf_lease_first_tick(&g->layout, handoff_ms), why, sizeof why) != 0) {
            LOG_ERROR("identity re-claimed but generator %u cannot resume: %s", i, why);
            return -1;
        }
    }
    return 0;
}

static void identity_lost(void *arg)
{
    app *a = arg;
    atomic_store(&a->identity_lost, true);
    LOG_ERROR("identity lost: stopping (exit %d) so the supervisor restarts and claims afresh",
              APP_EXIT_LOST);
    kill(getpid(), SIGTERM);
}

/* The identity: the ids config resolved (number, ordinal, env) and the lease file's floor through
 * the static backend, or slots claimed in etcd (cluster/identity.h). One slot, or one per loop
 * (per_thread_worker_ids). With etcd's wait_for_slot and every slot held, the daemon starts
 * anyway with placeholder ids in a->identity.slots (the generators, lease-guarded, issue
 * nothing) and the lease keeper claims later (identity_bind). */
static int claim_identity(app *a, bool ignore_corrupt, char *err, size_t errlen)
{
    const cfg *c = a->config;
    const cfg_snowflake *s = &c->snowflake;
    unsigned slots = s->per_thread_worker_ids ? c->server.threads : 1;
    if (s->worker_source == CFG_WORKER_ETCD) {
        if (etcd_identity_init(a, err, errlen) != 0)
            return -1;
        a->identity.hooks = (sf_identity_hooks){.bind = identity_bind,
                                                .stop_issuing = identity_stop_issuing,
                                                .resume = identity_resume,
                                                .lost = identity_lost,
                                                .arg = a};
        a->identity.wait_for_slot = s->etcd.wait_for_slot; /* at start and after a loss */
        int rc = sf_identity_claim(&a->identity, slots, false, err, errlen);
        if (rc == SF_IDENTITY_TAKEN && !s->etcd.wait_for_slot) {
            size_t len = strlen(err);
            snprintf(err + len, errlen - len,
                     ". Raise worker_max, stop an instance, or set snowflake.etcd.wait_for_slot");
            return -1;
        }
        if (rc != SF_IDENTITY_TAKEN)
            return rc;
        LOG_WARN("%s; waiting for a free slot (wait_for_slot): listening, /readyz 503 until one "
                 "is claimed (trying every %u ms)",
                 err, s->etcd.ttl_s * 250u);
        sf_identity_claim_later(&a->identity, slots);
        sf_identity_slots *p = &a->identity.slots;
        p->datacenter = s->datacenter_id;
        p->n = slots;
        for (unsigned i = 0; i < slots; i++)
            p->worker[i] = s->etcd.worker_min + i; /* config checked that the range holds them */
        return 0;
    }
    sf_identity_static_config ic = {.datacenter = s->datacenter_id,
                                    .first_worker = s->worker_id,
                                    .origin = s->worker_origin,
                                    .lease_path = a->lease_path,
                                    .ignore_corrupt = ignore_corrupt,
                                    .corrupt_floor_ms =
                                        ignore_corrupt ? corrupt_lease_floor_ms(a) : 0};
    if (sf_identity_static_init(&a->identity, &ic, err, errlen) != 0)
        return -1;
    return sf_identity_claim(&a->identity, slots, false, err, errlen);
}

/* ---- the parts both ways of building share -------------------------------------------------- */

/* The generators: for each format (Snowflake, UUIDv7, ULID) one, or one per loop
 * (per_thread_worker_ids), each on its own cache lines, all above the lease floor prev_end_ms,
 * with the ids of the claimed slots (NULL: the configuration's, in process). gen_ptrs lists them
 * format by format. */
static int make_gens(app *a, unsigned nloops, clk_source *clock, const sf_identity_slots *slots,
                     uint64_t prev_end_ms, bool guarded, char *err, size_t errlen)
{
    const cfg_snowflake *s = &a->config->snowflake;
    unsigned per_format = s->per_thread_worker_ids ? nloops : 1, formats = 3;
    sf_layout wide;
    char why[256];
    if (wide_layout(s, &wide, why, sizeof why) != 0) {
        snprintf(err, errlen, "snowflake: %s", why);
        return EXIT_CONFIG;
    }
    unsigned n = per_format * formats;
    a->gens_per_format = per_format;
    a->gen_ptrs = calloc(n, sizeof *a->gen_ptrs);
    if (!a->gen_ptrs || perloop_init(&a->gens, n, sizeof(sf_gen)) != 0) {
        snprintf(err, errlen, "out of memory");
        return EXIT_FAILURE;
    }
    for (unsigned i = 0; i < n; i++) {
        sf_gen *g = perloop_at(&a->gens, i);
        sf_gen_config gc;
        app_gen_config(a->config, i % per_format, clock, &gc);
        if (i >= per_format)
            gc.layout = wide;
        if (slots) {
            gc.datacenter = slots->datacenter;
            gc.worker = slots->worker[i % per_format];
        }
        gc.min_tick = sf_lease_first_tick(&gc.layout, prev_end_ms);
        gc.lease_guarded = guarded;
        if (sf_gen_init(g, &gc, why, sizeof why) != 0) {
            snprintf(err, errlen, "snowflake: %s", why);
            return EXIT_CONFIG;
        }
        a->gen_ptrs[i] = g; /* also marks it initialised, for app_free */
    }
    return 0;
}

/* auth.token, or the first line of auth.token_file (a Kubernetes Secret mounted as a file), so
 * the secret need not sit in the config or the environment. Never logged. An unreadable file is
 * a runtime failure (EXIT_FAILURE); a first line that is not a token of CFG_TOKEN_MIN..255
 * bytes is bad configuration (EXIT_CONFIG), as a short auth.token is at load. */
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
        return EXIT_FAILURE;
    }
    char line[512];
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t n = got ? strcspn(line, "\r\n") : 0;
    if (n < CFG_TOKEN_MIN || n >= cap) {
        snprintf(err, errlen,
                 "auth.token_file %s: the first line must hold the token (%d..%zu bytes), got %zu",
                 a->token_file, CFG_TOKEN_MIN, cap - 1, n);
        return EXIT_CONFIG;
    }
    memcpy(out, line, n);
    out[n] = '\0';
    return 0;
}

/* The API's context, the bearer token and the routes. */
static int make_api(app *a, char *err, size_t errlen)
{
    const cfg *c = a->config;
    api_ctx *api = &a->api;
    app_api_options(c, &api->opt);
    api->gens = a->gen_ptrs;
    api->ngens = a->gens_per_format;
    api->all_gens = a->gen_ptrs;
    api->nall_gens = perloop_count(&a->gens);
    api->gens128[SF_FORMAT_UUID7] = a->gen_ptrs + a->gens_per_format;
    api->gens128[SF_FORMAT_ULID] = a->gen_ptrs + 2 * a->gens_per_format;
    api->keeper = a->daemon ? &a->keeper : NULL; /* in process: no lease file */
    api->identity = a->daemon ? &a->identity : NULL;
    api->http = a->http;
    api->net = a->net;
    api->cache = a->cache;
    api->mc = a->mc;
    api->inflight = &a->inflight;
    int rc = load_token(&c->auth, a->token, sizeof a->token, err, errlen);
    if (rc != 0)
        return rc;
    api->opt.token = a->token;
    api->opt.token_len = strlen(a->token);
    const char *what = c->auth.protect_reads ? "every route but health" : "cache writes";
    if (api->opt.client_certificates)
        LOG_INFO("access control: %s%s%s on server.tls (%u in auth.client_certificates) required "
                 "for %s",
                 api->opt.token_len ? "bearer token " : "",
                 !api->opt.token_len ? "" : api->opt.token_and_certificate ? "and " : "or ",
                 "a listed client certificate", a->http_peers.n, what);
    else if (api->opt.token_len)
        LOG_INFO("access control: bearer token required for %s", what);
    if (perloop_init(&api->loops, a->net->nloops, sizeof(api_loop)) != 0) {
        snprintf(err, errlen, "out of memory");
        return EXIT_FAILURE;
    }
    if (api_register(a->http, api) != 0) {
        snprintf(err, errlen, "too many routes");
        return EXIT_FAILURE;
    }
    return 0;
}

/* memcached's "shutdown" (cache.memcached_shutdown): the same stop as a signal. main.c takes
 * SIGTERM and SIGINT in its sigwait (both drain, up to server.shutdown_grace_ms); kill() makes
 * the signal the process's, where raise() would leave it pending on this loop thread, which
 * blocks it. memcached's plain "shutdown" is its SIGINT, "shutdown graceful" its SIGUSR1. */
static void request_stop(void *arg, bool graceful)
{
    (void)arg;
    LOG_INFO("memcached shutdown%s command: stopping", graceful ? " graceful" : "");
    kill(getpid(), graceful ? SIGTERM : SIGINT);
}

/* cache.memcached_auth_file (memcached -Y), read now: unreadable is a runtime failure (exit 1),
 * empty or malformed bad configuration (exit 2), as auth.token_file. */
static int load_memcached_auth(memcache_server *mc, const cfg *c, char *err, size_t errlen)
{
    const char *path = c->cache.memcached_auth_file;
    if (!path[0])
        return 0;
    char why[CFG_PATH_MAX + 256];
    int rc = memcache_server_set_auth_file(mc, path, why, sizeof why);
    if (rc == 0)
        return 0;
    snprintf(err, errlen, "cache.memcached_auth_file %s", why);
    return rc == MC_AUTH_EFORMAT ? EXIT_CONFIG : EXIT_FAILURE;
}

void app_reload_memcached_auth(app *a)
{
    if (!a->mc || !a->config->cache.memcached_auth_file[0])
        return;
    char why[CFG_PATH_MAX + 256];
    unsigned n = 0;
    if (memcache_server_reload_auth(a->mc, &n, why, sizeof why) != 0)
        LOG_ERROR("memcached auth file not reloaded, the previous one stays in use: %s", why);
    else
        LOG_INFO("memcached auth file %s reloaded: %u entr%s", a->config->cache.memcached_auth_file,
                 n, n == 1 ? "y" : "ies");
}

static int refresh_certs(void *arg, char *reply, size_t replylen);

/* A key made a memcached ID key (cache.memcached_id_keys: the name K and its family "K:<suffix>")
 * after a value was cached under it: the snapshot brought it back, but no client may read it any
 * more (the key answers IDs, HTTP refuses its writes), and listings must not show it. One walk of
 * the store before the listeners open, each item visited once (so it is bounded by the items the
 * snapshot loaded); the walk lets its callback delete the item it holds a reference to. */
typedef struct reserved_drop {
    app *a;
    uint64_t now_ms, dropped;
    char first[CACHE_KEY_MAX + 1]; /* the first key dropped, for the warning */
} reserved_drop;

static int drop_if_reserved(const cache_item *it, void *arg)
{
    reserved_drop *d = arg;
    const char *key = cache_item_key(it);
    size_t klen = cache_item_klen(it);
    if (memcache_server_id_key(d->a->mc, key, klen) >= 0 &&
        cache_delete(d->a->cache, key, klen, 0, d->now_ms) == CACHE_DELETED && !d->dropped++) {
        for (size_t i = 0; i < klen; i++) /* a binary key (mg b) may hold any byte */
            d->first[i] = key[i] > ' ' && key[i] < 0x7f ? key[i] : '?';
        d->first[klen] = '\0';
    }
    return 0;
}

static void drop_reserved_keys(app *a)
{
    const cfg_cache *cc = &a->config->cache;
    if (!a->mc || !(cc->memcached_id_keys.snowflake[0] || cc->memcached_id_keys.uuidv7[0] ||
                    cc->memcached_id_keys.ulid[0]))
        return;
    reserved_drop d = {.a = a, .now_ms = clk_now(clk_system())};
    cache_store_foreach(a->cache, d.now_ms, drop_if_reserved, &d);
    if (d.dropped)
        LOG_WARN("cache: the snapshot held %llu value%s under keys now reserved for IDs "
                 "(cache.memcached_id_keys: a name K and every \"K:<suffix>\"), e.g. \"%s\": "
                 "dropped",
                 (unsigned long long)d.dropped, d.dropped == 1 ? "" : "s", d.first);
}

/* The HTTP server, the cache store (with a memcached server when `memcache`) and the API, on
 * a->net. */
static int make_serving(app *a, uint64_t cache_seed, bool memcache, char *err, size_t errlen)
{
    const cfg *c = a->config;
    http_limits hl;
    app_http_limits(c, &hl);
    if (!(a->http = http_server_new(&hl, a->net, err, errlen)))
        return EXIT_FAILURE;
    /* One budget for the bytes held for requests being received, whichever protocol. */
    budget_init(&a->inflight, c->server.max_inflight_bytes);
    uint64_t floor, reserve;
    app_inflight_share(c, &floor, &reserve);
    budget_set_share(&a->inflight, floor, reserve);
    http_server_set_budget(a->http, &a->inflight);
    if (c->cache.enabled) { /* one store shared by all loops */
        cache_store_config cc;
        app_cache_config(c, &cc);
        cc.seed = cache_seed;
        char why[256];
        if (!(a->cache = cache_store_new(&cc, why, sizeof why))) {
            snprintf(err, errlen, "cache: %s", why);
            return EXIT_FAILURE;
        }
        if (memcache && !(a->mc = memcache_server_new(a->cache, a->net->nloops))) {
            snprintf(err, errlen, "out of memory");
            return EXIT_FAILURE;
        }
        if (a->mc) {
            memcache_options mo;
            app_memcache_options(c, &mo);
            if (a->daemon)
                mo.shutdown = request_stop;
            bool any_tls = false;
            for (int i = 0; i < APP_TLS_LISTENERS; i++)
                any_tls |= a->tls_on[i];
            if (any_tls) { /* else memcached's "Error TLS not enabled" */
                mo.refresh_certs = refresh_certs;
                mo.refresh_certs_arg = a;
            }
            memcache_server_set_options(a->mc, &mo);
            memcache_server_set_budget(a->mc, &a->inflight);
            /* the reserved ID keys answer from the generators HTTP's /id, /uuid, /ulid use */
            const memcache_ids ids = {
                .keys = {c->cache.memcached_id_keys.snowflake, c->cache.memcached_id_keys.uuidv7,
                         c->cache.memcached_id_keys.ulid},
                .gens = {a->gen_ptrs, a->gen_ptrs + a->gens_per_format,
                         a->gen_ptrs + 2 * a->gens_per_format},
                .ngens = a->gens_per_format};
            if (memcache_server_set_ids(a->mc, &ids) != 0) { /* the configuration checked them */
                snprintf(err, errlen, "cache.memcached_id_keys: not valid memcached keys");
                return EXIT_FAILURE;
            }
            int rc = load_memcached_auth(a->mc, c, err, errlen);
            if (rc != 0)
                return rc;
        }
    }
    return make_api(a, err, errlen);
}

/* ---- the daemon ----------------------------------------------------------------------------- */

/* Before any ID can be issued: a duplicate identity must not serve a single one. The slots
 * claimed are checked (with etcd they need not be contiguous: the range spanning them is). */
static int check_peers(const app *a, char *err, size_t errlen)
{
    const cfg_snowflake *s = &a->config->snowflake;
    const sf_identity_slots *sl = &a->identity.slots;
    if (!s->peers[0])
        return 0;
    if (s->worker_source == CFG_WORKER_ETCD) { /* and the keeper may be changing the slots */
        LOG_INFO("peers: not checked: etcd guarantees one holder per slot");
        return 0;
    }
    peers_result pr;
    uint32_t first = sl->worker[0], last = sl->worker[0];
    for (unsigned i = 1; i < sl->n; i++) {
        first = sl->worker[i] < first ? sl->worker[i] : first;
        last = sl->worker[i] > last ? sl->worker[i] : last;
    }
    if (peers_check(s->peers, &s->layout, sl->datacenter, first, last, s->peer_timeout_ms, &pr, err,
                    errlen) != 0)
        return -1;
    LOG_INFO("peers: %u of %u answered; no other replica uses datacenter %u worker %u", pr.answered,
             pr.asked, sl->datacenter, first);
    return 0;
}

/* The static identity, held on this host for our lifetime (cluster/hostclaim.h): another process
 * with the same one, whatever its port and data directory, would issue the same IDs. etcd
 * arbitrates its own slots among every holder, on this host or not (identity_etcd.c); a slot
 * taken later or anew is bound on the keeper's thread without a host claim. */
static int claim_on_host(app *a, char *err, size_t errlen)
{
    const cfg_snowflake *s = &a->config->snowflake;
    const sf_identity_slots *sl = &a->identity.slots;
    if (s->worker_source == CFG_WORKER_ETCD)
        return 0;
    return hostclaim_identity(&a->claims, &s->layout, sl->datacenter, sl->worker, sl->n, err,
                              errlen);
}

/* The data directory, its lock, the lease floor, the peer check, the host claim, the
 * generators and the lease keeper: the
 * first renewal is on disk before any ID can be issued. */
static int start_ids(app *a, const cfg_cli *cli, char *err, size_t errlen)
{
    const cfg *c = a->config;
    if (make_dirs(c->data_dir, err, errlen) != 0 || lock_data_dir(c->data_dir, err, errlen) != 0)
        return EXIT_FAILURE;
    snprintf(a->lease_path, sizeof a->lease_path, "%s/" SF_LEASE_FILE, c->data_dir);
    int claimed = claim_identity(a, cli->ignore_corrupt_lease, err, errlen);
    if (claimed == SF_IDENTITY_STOPPED) {
        LOG_INFO("%s: exiting", err);
        return APP_STOPPED_AT_START;
    }
    if (claimed != 0 || check_peers(a, err, errlen) != 0 || claim_on_host(a, err, errlen) != 0)
        return EXIT_FAILURE;
    uint64_t prev_end = a->identity.slots.handoff_ms;
    if (c->snowflake.worker_source != CFG_WORKER_ETCD) { /* etcd's floor covers its holders */
        uint64_t successor = successor_floor_ms(a, clk_now(clk_system()));
        if (successor > prev_end)
            prev_end = a->issue_from_ms = successor; /* app_start waits for it */
    }
    bool waited;
    if (sf_rng_probe(&waited, err, errlen) != 0)
        return EXIT_FAILURE;
    if (waited)
        LOG_WARN("waited for the kernel's random pool to be initialised (UUIDv7, ULID)");
    int rc =
        make_gens(a, c->server.threads, NULL, &a->identity.slots, prev_end, true, err, errlen);
    if (rc != 0)
        return rc;
    sf_lease_store store; /* renew/release of the identity: the lease file, or etcd */
    sf_identity_lease_store(&a->identity, &store);
    /* etcd: the floor must reach past the fence (renewal + TTL - margin), or it, not the
     * fence, would stop the generators: a window of one TTL does. */
    uint32_t window = c->snowflake.worker_source == CFG_WORKER_ETCD
                          ? c->snowflake.etcd.ttl_s * 1000u
                          : c->snowflake.lease_ms;
    if (sf_lease_keeper_start_store(&a->keeper, a->gen_ptrs, perloop_count(&a->gens), &store,
                                    window, prev_end, err, errlen) != 0)
        return EXIT_FAILURE;
    return 0;
}

/* Each loop's housekeeping: a tick count (the identity waits on it, wait_loops_quiet) and the
 * cache's expiry sweep, a little at a time. */
static void loop_tick(net_loop *l, void *arg)
{
    app *a = arg;
    atomic_fetch_add(&a->loop_ticks[l->index], 1);
    if (a->cache)
        cache_store_sweep(a->cache, &l->tick_cursor, CACHE_SWEEP_BUCKETS,
                          clk_now(clk_system()));
}

/* Before listening, until the clock reaches the successor floor start_ids raised the generators
 * to (when it was above the lease's): a request at once would be refused as "clock behind", or
 * wait on its event loop. Bounded by sf_gen_successor_tick: max_backward_ms rounded up to
 * ticks, plus one tick, less what start-up took since (6 ms with the defaults, 2 s with 1 s
 * ticks, under 3 s whatever the layout). A SIGTERM meanwhile is taken up right after, as a
 * clean stop. */
static void wait_successor_floor(const app *a)
{
    clk_source *clock = clk_system();
    uint64_t now = clk_now(clock), from = a->issue_from_ms;
    if (from <= now)
        return;
    const sf_identity_slots *sl = &a->identity.slots;
    if (from - now >= SUCCESSOR_LOG_MS)
        LOG_INFO("identity: datacenter %u worker %u%s: listening in %llu ms, once our clock is "
                 "past anything a previous holder of this identity on this host can have issued "
                 "(its lease, in another data_dir, is not ours to read)",
                 sl->datacenter, sl->worker[0], sl->n > 1 ? " (and one per loop)" : "",
                 (unsigned long long)(from - now));
    else
        LOG_DEBUG("identity: waiting %llu ms to start past a previous holder",
                  (unsigned long long)(from - now));
    while ((now = clk_now(clock)) < from) {
        uint64_t ms = from - now;
        struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                              .tv_nsec = (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* ---- TLS on the listeners ------------------------------------------------------------------ */

static const struct {
    const char *name; /* the metrics' listener label */
    const char *what; /* the configuration section */
} tls_names[APP_TLS_LISTENERS] = {
    [APP_TLS_HTTP] = {"http", "server.tls"},
    [APP_TLS_MEMCACHED] = {"memcached", "cache.memcached_tls"},
    [APP_TLS_ECHO] = {"echo", "echo.tcp_tls"},
};

static const cfg_tls *tls_config_of(const cfg *c, int i)
{
    return i == APP_TLS_HTTP ? &c->server.tls
           : i == APP_TLS_MEMCACHED ? &c->cache.memcached_tls
                                    : &c->echo.tcp_tls;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The certificate in service expires soon or has: said at start and at each reload (the metric
 * snowflaked_tls_certificate_not_after_seconds is what alerts). */
static void warn_not_after(const app *a, int i)
{
    int64_t na = atomic_load(&a->tls[i].not_after_s), now = (int64_t)time(NULL);
    if (na && na <= now)
        LOG_ERROR("%s: the certificate of %s expired %lld s ago: clients will refuse it",
                  tls_names[i].what, a->tls[i].cfg.cert_file, (long long)(now - na));
    else if (na && na - now < 14 * 86400)
        LOG_WARN("%s: the certificate of %s expires in %lld h", tls_names[i].what,
                 a->tls[i].cfg.cert_file, (long long)((na - now) / 3600));
}

/* tls.ktls "auto": whether this listener's connections can get kernel TLS, said at start and
 * again when a reload finds it changed (a `modprobe tls` and a SIGHUP). */
static void say_ktls(const app *a, int i, net_tls_ktls before)
{
    net_tls_ktls k = (net_tls_ktls)atomic_load(&a->tls[i].ktls);
    if (k == before || k == NET_TLS_KTLS_OFF)
        return;
    if (k == NET_TLS_KTLS_ON)
        LOG_INFO("%s: kTLS offered on the %s TLS listener: %s", tls_names[i].what,
                 tls_names[i].name, net_tls_ktls_text(k));
    else
        LOG_WARN("%s: kTLS requested on the %s TLS listener but %s", tls_names[i].what,
                 tls_names[i].name, net_tls_ktls_text(k));
}

/* Every TLS context the configuration asks for, before anything listens: a certificate, key or
 * CA file that does not load is a configuration error (exit 2), named with OpenSSL's reason. */
static int make_tls(app *a, char *err, size_t errlen)
{
    const cfg *c = a->config;
    for (int i = 0; i < APP_TLS_LISTENERS; i++) {
        const cfg_tls *t = tls_config_of(c, i);
        if (!t->port || (i == APP_TLS_MEMCACHED && !c->cache.enabled))
            continue; /* the memcached listeners need the cache, as the plaintext one does */
        net_tls_config nc;
        app_tls_config(t, i == APP_TLS_HTTP, &nc);
        if (net_tls_init(&a->tls[i], tls_names[i].name, tls_names[i].what, &nc, err, errlen) != 0)
            return -1;
        a->tls_on[i] = true;
        if (i == APP_TLS_HTTP && c->auth.client_certificates[0]) { /* checked at load */
            char why[512];
            if (certname_list_init(&a->http_peers, c->auth.client_certificates, why,
                                   sizeof why) != 0) {
                snprintf(err, errlen, "auth.client_certificates: %s", why);
                return -1;
            }
            a->tls[i].peers = &a->http_peers;
        }
        warn_not_after(a, i);
        say_ktls(a, i, NET_TLS_KTLS_OFF);
    }
    return 0;
}

static const char *verify_text(net_tls_verify v)
{
    return v == NET_TLS_VERIFY_REQUIRED   ? "required"
           : v == NET_TLS_VERIFY_OPTIONAL ? "optional"
                                          : "none";
}

static int listen_tls(app *a, int i, const char *host, const proto *p, void *ctx, char *err,
                      size_t errlen)
{
    if (!a->tls_on[i])
        return 0;
    const cfg_tls *t = tls_config_of(a->config, i);
    if (net_server_listen_tls(a->net, host, (uint16_t)t->port, p, ctx, &a->tls[i], err,
                              errlen) != 0)
        return -1;
    LOG_INFO("%s over TLS on %s:%u (TLS %s+, client certificates %s, tickets %s)",
             p->name, host, t->port, t->min_tls13 ? "1.3" : "1.2",
             verify_text(a->tls[i].cfg.verify), t->session_tickets ? "on" : "off");
    return 0;
}

/* SIGHUP (the main thread), refresh_certs (a loop thread) and the file watch may ask at once:
 * net_tls_reload runs on one thread at a time. */
static pthread_mutex_t tls_reload_lock = PTHREAD_MUTEX_INITIALIZER;

/* Every TLS listener's files read again (only_changed: only those whose bytes changed since
 * they were loaded; SIGHUP and refresh_certs are an operator's explicit ask and always reload).
 * 0; -1 when one was refused (mc, when not NULL: the
 * first refusal as memcached's refresh_certs line). `why` names what asked, for the log. */
static int reload_tls(app *a, const char *why, bool only_changed, char *mc, size_t mclen)
{
    int rc = 0;
    pthread_mutex_lock(&tls_reload_lock);
    for (int i = 0; i < APP_TLS_LISTENERS; i++) {
        if (!a->tls_on[i] || (only_changed && !net_tls_files_changed(&a->tls[i])))
            continue;
        char err[CFG_PATH_MAX * 2];
        net_tls_ktls ktls_before = (net_tls_ktls)atomic_load(&a->tls[i].ktls);
        if (net_tls_reload_mc(&a->tls[i], err, sizeof err, rc == 0 ? mc : NULL,
                              rc == 0 ? mclen : 0) != 0) {
            LOG_ERROR("%s: certificate reload refused, the previous one stays in service (%s): %s",
                      tls_names[i].what, why, err);
            rc = -1;
            continue;
        }
        LOG_INFO("%s: certificate reloaded (%s) from %s: new connections get it, open ones keep "
                 "theirs",
                 tls_names[i].what, why, a->tls[i].cfg.cert_file);
        warn_not_after(a, i);
        say_ktls(a, i, ktls_before);
    }
    pthread_mutex_unlock(&tls_reload_lock);
    return rc;
}

void app_reload_tls(app *a)
{
    reload_tls(a, "SIGHUP", false, NULL, 0);
    reload_etcd_tls(a, "SIGHUP", false);
}

/* tls.watch_files: the directories of the TLS files are watched (net/fswatch.h), and a change
 * reloads every TLS listener once the burst has been quiet this long: a cert and its key written
 * one after the other make one reload, not one refused (the new cert with the old key) and one
 * accepted. */
#define TLS_WATCH_DEBOUNCE_MS 500

static void tls_files_changed(void *arg)
{
    reload_tls(arg, "files changed", true, NULL, 0);
}

/* A watched directory removed or replaced (an operator recreating a mount path): the watch looks
 * for it every NET_FSWATCH_RECHECK_MS and reloads once it is back with files in it. One line
 * each way. */
static void tls_dir_state(void *arg, const char *dir, bool present)
{
    (void)arg;
    if (present)
        LOG_INFO("TLS certificate directory %s is back: watched again, its files are reloaded "
                 "once they are quiet",
                 dir);
    else
        LOG_WARN("TLS certificate directory %s went away: the certificates in service stay, "
                 "and the directory is watched again when it comes back (checked every %d s)",
                 dir, NET_FSWATCH_RECHECK_MS / 1000);
}

/* The directory part of path ("." when none), in out. */
static void dir_of(const char *path, char *out, size_t outlen)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, outlen, ".");
    else if (slash == path)
        snprintf(out, outlen, "/");
    else
        snprintf(out, outlen, "%.*s", (int)(slash - path), path);
}

/* After the listeners are up. A watch that cannot start (no inotify instance left) is a warning:
 * SIGHUP and refresh_certs still reload. */
static void watch_tls_files(app *a)
{
    static char dirs[APP_TLS_LISTENERS * 3][CFG_PATH_MAX];
    const char *ptrs[APP_TLS_LISTENERS * 3];
    size_t n = 0;
    for (int i = 0; i < APP_TLS_LISTENERS; i++) {
        if (!a->tls_on[i] || !tls_config_of(a->config, i)->watch_files)
            continue;
        const net_tls_config *t = &a->tls[i].cfg;
        const char *files[] = {t->cert_file, t->key_file, t->client_ca_file};
        for (size_t k = 0; k < 3; k++)
            if (files[k][0]) {
                dir_of(files[k], dirs[n], sizeof dirs[n]);
                ptrs[n] = dirs[n];
                n++;
            }
    }
    if (n == 0)
        return;
    char err[CFG_PATH_MAX + 128];
    net_fswatch_opts o = {.debounce_ms = TLS_WATCH_DEBOUNCE_MS,
                          .changed = tls_files_changed,
                          .dir_state = tls_dir_state,
                          .arg = a};
    a->tls_watch = net_fswatch_start(ptrs, n, &o, err, sizeof err);
    if (!a->tls_watch)
        LOG_WARN("TLS certificate files not watched (SIGHUP and refresh_certs still reload): %s",
                 err);
    else
        LOG_INFO("TLS certificate files watched: a change in %s%s reloads them", ptrs[0],
                 n > 1 ? " (and the other directories of the files)" : "");
}

/* memcached's refresh_certs (on a loop thread): every TLS listener, as SIGHUP. */
static int refresh_certs(void *arg, char *reply, size_t replylen)
{
    return reload_tls(arg, "refresh_certs", false, reply, replylen);
}

/* Failed handshakes, per listener and cause, logged at most once a minute each: a scanner or a
 * misconfigured client must not write a line per connection. The causes a TCP health check or a
 * port scan produces (eof) are debug lines. */
#define TLS_FAIL_LOG_MS 60000

static void log_tls_failures(app *a)
{
    uint64_t now = mono_ms();
    for (int i = 0; i < APP_TLS_LISTENERS; i++) {
        if (!a->tls_on[i])
            continue;
        const net_listener *l = NULL;
        for (unsigned k = 0; k < a->net->loops[0].nlisteners; k++)
            if (a->net->loops[0].listeners[k].spec->tls == &a->tls[i])
                l = &a->net->loops[0].listeners[k];
        if (!l)
            continue;
        net_listener_stats sum;
        net_listener_stats_sum(l, &sum);
        for (int r = 0; r < NET_TLS_FAIL_COUNT; r++) {
            uint64_t n = counter_get(&sum.tls_failures[r]), seen = a->tls_fail_seen[i][r];
            if (n <= seen ||
                (a->tls_fail_logged_ms[i][r] && now - a->tls_fail_logged_ms[i][r] < TLS_FAIL_LOG_MS))
                continue;
            const char *detail = atomic_load_explicit(&a->tls[i].last_detail[r],
                                                      memory_order_relaxed);
            log_level lv = r == NET_TLS_FAIL_EOF ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN;
            log_write(lv, "%s on %s:%u: %llu TLS handshake%s failed (%s%s%s)%s", l->spec->proto->name,
                      l->spec->host, l->spec->port, (unsigned long long)(n - seen),
                      n - seen == 1 ? "" : "s", net_tls_fail_name((net_tls_fail)r),
                      detail ? ": " : "", detail ? detail : "",
                      seen ? " in the last minute or so" : "");
            a->tls_fail_seen[i][r] = n;
            a->tls_fail_logged_ms[i][r] = now;
        }
        /* Verified client certificates the access list does not name: what to add (or why a
         * client gets 401/403), at most once a minute. */
        uint64_t n = counter_get(&sum.tls_peers[NET_TLS_PEER_UNLISTED]), seen = a->peer_unlisted_seen;
        if (!a->tls[i].peers || n <= seen ||
            (a->peer_unlisted_logged_ms && now - a->peer_unlisted_logged_ms < TLS_FAIL_LOG_MS))
            continue;
        char names[sizeof a->tls[i].last_unlisted];
        net_tls_last_unlisted(&a->tls[i], names, sizeof names);
        LOG_WARN("%s on %s:%u: %llu connection%s with a client certificate not in "
                 "auth.client_certificates%s (the last: %s); the certificate grants nothing",
                 l->spec->proto->name, l->spec->host, l->spec->port, (unsigned long long)(n - seen),
                 n - seen == 1 ? "" : "s", seen ? " in the last minute or so" : "", names);
        a->peer_unlisted_seen = n;
        a->peer_unlisted_logged_ms = now;
    }
}

static int listen_all(app *a, char *err, size_t errlen)
{
    const cfg *c = a->config;
    const cfg_server *sv = &c->server;
    if (net_server_listen(a->net, sv->host, (uint16_t)sv->port, &http_proto, a->http, err,
                          errlen) != 0 ||
        listen_tls(a, APP_TLS_HTTP, sv->host, &http_proto, a->http, err, errlen) != 0)
        return -1;
    if (sv->max_connection_age_s) /* both HTTP listeners */
        net_server_set_max_age(a->net, a->http, sv->max_connection_age_s * 1000);
    if (a->mc) {
        if (c->cache.memcached_port &&
            net_server_listen(a->net, c->cache.memcached_host, (uint16_t)c->cache.memcached_port,
                              &memcache_proto, a->mc, err, errlen) != 0)
            return -1;
        if (listen_tls(a, APP_TLS_MEMCACHED, c->cache.memcached_host, &memcache_proto, a->mc, err,
                       errlen) != 0)
            return -1;
        if (c->cache.memcached_idle_timeout_s) /* both listeners */
            net_server_set_idle_timeout(a->net, a->mc, c->cache.memcached_idle_timeout_s * 1000);
        if (c->cache.memcached_max_connection_age_s) /* both listeners */
            net_server_set_max_age(a->net, a->mc, c->cache.memcached_max_connection_age_s * 1000);
        if (c->cache.memcached_port && c->cache.memcached_auth_file[0])
            LOG_INFO("memcached text protocol on %s:%u (authentication: %u entr%s of %s)",
                     c->cache.memcached_host, c->cache.memcached_port,
                     memcache_server_auth_entries(a->mc),
                     memcache_server_auth_entries(a->mc) == 1 ? "y" : "ies",
                     c->cache.memcached_auth_file);
        else if (c->cache.memcached_port)
            LOG_INFO("memcached text protocol on %s:%u (no authentication, like memcached)",
                     c->cache.memcached_host, c->cache.memcached_port);
    }
    if (c->echo.tcp_port != 0) {
        if (net_server_listen(a->net, c->echo.tcp_host, (uint16_t)c->echo.tcp_port, &echo_proto,
                              NULL, err, errlen) != 0)
            return -1;
        LOG_INFO("raw TCP echo on %s:%u", c->echo.tcp_host, c->echo.tcp_port);
    }
    if (listen_tls(a, APP_TLS_ECHO, c->echo.tcp_host, &echo_proto, NULL, err, errlen) != 0)
        return -1;
    for (unsigned i = 0; i < a->net->nspecs; i++) {
        const net_listener_spec *sp = &a->net->specs[i];
        if (a->net->reuseport && !sp->steered)
            LOG_WARN("%s:%u: the kernel refused our SO_REUSEPORT steering program (%s): a foreign "
                     "socket joining the port would get connections; it is detected instead "
                     "(/readyz 503, snowflaked_foreign_listeners)",
                     sp->host, sp->port, strerror(sp->steer_errno));
    }
    return 0;
}

static void log_listening(const app *a)
{
    const cfg_server *sv = &a->config->server;
    const cfg_snowflake *s = &a->config->snowflake;
    bool v6 = strchr(sv->host, ':') != NULL;
    bool etcd = s->worker_source == CFG_WORKER_ETCD;
    uint32_t dc, worker; /* the keeper thread may be changing the slots (etcd): the atomic copy */
    if (!sf_identity_current(&a->identity, &dc, &worker)) {
        LOG_INFO("snowflaked %s: listening on %s:%u, waiting for a free etcd slot", SF_VERSION,
                 sv->host, sv->port);
        return;
    }
    LOG_INFO("snowflaked %s: listening on http://%s%s%s:%u with %u loop%s (%s); datacenter %u, "
             "worker %u%s (%s), layout %u/%u/%u/%u, sync %s, lease %s%s, malloc " SF_MALLOC_NAME,
             SF_VERSION, v6 ? "[" : "", sv->host, v6 ? "]" : "", sv->port, sv->threads,
             sv->threads == 1 ? "" : "s", a->net->reuseport ? "SO_REUSEPORT" : "one acceptor",
             dc, worker, s->per_thread_worker_ids ? "+loop" : "",
             s->worker_origin, s->timestamp_bits, s->datacenter_bits, s->worker_bits,
             s->sequence_bits, sf_sync_mode_name(s->sync), etcd ? "floor in etcd under " : "",
             etcd ? s->etcd.prefix : a->lease_path);
    if (s->lifetime_warning[0])
        LOG_WARN("%s", s->lifetime_warning);
    uint64_t retry = sf_gen_retry_after_ms(a->gen_ptrs[0]);
    if (retry > 0)
        LOG_WARN("clock is behind the stored lease; IDs are refused for about %llu ms",
                 (unsigned long long)retry);
}

/* What anyone who can reach the machine may do: said once at start, so an operator who opened a
 * port to the network by mistake reads it before anyone else finds out. */
static void warn_exposed(const app *a)
{
    const cfg *c = a->config;
    /* A certificate list protects as a token does: without a listed certificate (the plaintext
     * port never has one) a write is refused. */
    if (!cfg_host_is_loopback(c->server.host) && !a->api.opt.token_len &&
        !a->api.opt.client_certificates)
        LOG_WARN("HTTP on %s:%u is reachable beyond loopback without a token: anyone who can reach "
                 "it can write, delete and read the cache and take IDs (set auth.token or "
                 "auth.token_file, or auth.client_certificates, or server.host 127.0.0.1)",
                 c->server.host, c->server.port);
    const cfg_tls *mt = &c->cache.memcached_tls;
    bool mc_auth = c->cache.memcached_auth_file[0] != '\0';
    if (a->mc && mt->port && mt->verify_client != CFG_VERIFY_REQUIRED && !mc_auth &&
        !cfg_host_is_loopback(c->cache.memcached_host))
        LOG_WARN("memcached over TLS on %s:%u is reachable beyond loopback without client "
                 "certificates or authentication: TLS encrypts, it does not authenticate; set "
                 "cache.memcached_tls.verify_client \"required\" with a client_ca_file to admit "
                 "only certificate holders, or cache.memcached_auth_file",
                 c->cache.memcached_host, mt->port);
    if (a->mc && c->cache.memcached_port && !mc_auth &&
        !cfg_host_is_loopback(c->cache.memcached_host))
        LOG_WARN("memcached on %s:%u is reachable beyond loopback and has no authentication: "
                 "anyone who can reach it can %s the whole cache, HTTP items included (keep it "
                 "on a private network, set cache.memcached_auth_file, or cache.memcached_host "
                 "127.0.0.1)",
                 c->cache.memcached_host, c->cache.memcached_port,
                 c->cache.memcached_flush_all ? "read, change and flush" : "read and change");
}

static int start_sequences(app *a, char *err, size_t errlen);

int app_start(app *a, const cfg *c, const cfg_cli *cli, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->config = c;
    a->daemon = true;
    a->net = &a->own_net;
    log_options lo;
    app_log_options(c, &lo);
    char why[512];
    if (log_init(&lo, why, sizeof why) != 0) {
        snprintf(err, errlen, "log.file: %s", why);
        return EXIT_FAILURE;
    }
    /* Certificates first: a file that does not load is a configuration error, refused before
     * the data directory, the lease or the identity are touched. */
    if (make_tls(a, err, errlen) != 0)
        return EXIT_CONFIG;
    int rc = start_ids(a, cli, err, errlen);
    if (rc != 0)
        return rc;
    rc = start_sequences(a, err, errlen);
    if (rc != 0)
        return rc;
    net_config nc;
    app_net_config(c, &nc);
    if (net_server_init(a->net, &nc, c->server.threads, err, errlen) != 0)
        return EXIT_FAILURE;
    rc = make_serving(a, 0, c->cache.memcached_port != 0 || c->cache.memcached_tls.port != 0, err,
                      errlen);
    if (rc != 0)
        return rc;
    a->loop_ticks = calloc(a->net->nloops, sizeof *a->loop_ticks);
    if (!a->loop_ticks) {
        snprintf(err, errlen, "out of memory");
        return EXIT_FAILURE;
    }
    net_server_on_tick(a->net, LOOP_TICK_INTERVAL_MS, loop_tick, a);
    if (a->cache) {
        if (c->cache.persist) {
            char path[CFG_PATH_MAX + 32];
            app_snapshot_path(c, path, sizeof path);
            a->persist =
                cache_persist_start(a->cache, path, c->cache.snapshot_interval_s, err, errlen);
            if (!a->persist)
                return EXIT_FAILURE;
            a->api.persist = a->persist;
            drop_reserved_keys(a);
        }
    }
    wait_successor_floor(a);
    if (listen_all(a, err, errlen) != 0 || net_server_start(a->net, err, errlen) != 0)
        return EXIT_FAILURE;
    atomic_store(&a->api.listening, true);
    log_listening(a);
    warn_exposed(a);
    watch_tls_files(a);
    return 0;
}

/* Segment mode (seq/seq.h): the namespaces of the configuration and those created over the API
 * before (their files in data_dir/sequences), over the file block source; every first block
 * reserved (up to sequences.start_wait_ms) before the listeners open. Nothing when no namespace
 * is declared and none was ever created. */
static int start_sequences(app *a, char *err, size_t errlen)
{
    const cfg *c = a->config;
    const cfg_sequences *sq = &c->sequences;
    char dir[CFG_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/" SEQ_FILE_DIR, c->data_dir);
    struct stat st;
    seq_source src;
    if (c->snowflake.worker_source == CFG_WORKER_ETCD) {
        /* A fleet: blocks by compare-and-swap on etcd counters under the identity's prefix,
         * fenced by its slot (a file would not be unique across the fleet) */
        if (!app_sequences_possible(c))
            return 0;
        const cfg_etcd *e = &c->snowflake.etcd;
        seq_etcd_config ec = {.endpoints = e->endpoints,
                              .prefix = e->prefix,
                              .request_timeout_ms = e->request_timeout_ms,
                              .start_timeout_ms = e->start_timeout_ms,
                              .tls = a->etcd_tls,
                              .auth_user = e->auth_username,
                              .auth_password_file = e->auth_password_file,
                              .identity = &a->identity};
        snprintf(dir, sizeof dir, "etcd %s/seq/", e->prefix);
        a->seq_etcd = seq_etcd_source_new(&ec, err, errlen);
        if (!a->seq_etcd)
            return EXIT_FAILURE;
        seq_etcd_source_ops(a->seq_etcd, &src);
    } else {
        if (!app_sequences_possible(c) && stat(dir, &st) != 0)
            return 0;
        a->seq_file = seq_file_source_new(dir, sq->reserve_delay_ms, err, errlen);
        if (!a->seq_file)
            return EXIT_FAILURE;
        seq_file_source_ops(a->seq_file, &src);
    }
    seq_options o = {.prefetch_pct = sq->prefetch_percent,
                     .retry_ms = sq->retry_ms,
                     .adaptive_block_ms = sq->adaptive_block_ms,
                     .start_wait_ms = sq->start_wait_ms};
    a->seq = seq_table_new(&src, &o, clk_system(), sq->max_namespaces, err, errlen);
    if (!a->seq)
        return EXIT_FAILURE;
    for (unsigned i = 0; i < sq->nns; i++) {
        const cfg_seq_ns *n = &sq->ns[i];
        seq_ns_def d = {.start = n->start,
                        .max = n->max,
                        .block = n->block,
                        .adaptive = n->adaptive,
                        .block_min = n->block_min,
                        .block_max = n->block_max};
        snprintf(d.name, sizeof d.name, "%s", n->name);
        if (seq_table_declare(a->seq, &d, n->token[0] ? n->token : NULL, err, errlen) != 0)
            return EXIT_CONFIG;
    }
    if (seq_table_start(a->seq, err, errlen) != 0)
        return EXIT_FAILURE;
    a->api.seq = a->seq;
    LOG_INFO("sequences: %u namespace(s) (%u declared), blocks from %s", seq_count(a->seq),
             sq->nns, dir);
    return 0;
}

/* net_server_watch's report: once per foreign listener, when it appears. */
static void report_foreign(void *arg, const net_listener_spec *spec, const lg_listener *l,
                           net_foreign_kind kind)
{
    (void)arg;
    char who[128], where[64], ours[64], dev[IF_NAMESIZE];
    lg_describe(l, who, sizeof who);
    lg_addr_text(&l->a, where, sizeof where);
    lg_addr_text(&spec->addr, ours, sizeof ours);
    static const char ready[] = "/readyz answers 503 while it listens";
    switch (kind) {
    case NET_FOREIGN_OVERLAP:
        LOG_ERROR("foreign listener: %s listens on %s, overlapping our %s: it can take "
                  "connections meant for us (IDs, cache); %s%s",
                  who, where, ours, ready, lg_overlap_note(&spec->addr, l));
        break;
    case NET_FOREIGN_GROUP:
        LOG_ERROR("foreign listener: %s joined our SO_REUSEPORT group on %s%s: our steering "
                  "program gives it no connection until it attaches its own (any member may), %s; "
                  "%s",
                  who, ours, l->diag ? "" : " (or is bound to a device there: /proc does not say)",
                  spec->steered ? "so ours is attached again every second while it stays"
                                : "and the kernel refused ours",
                  ready);
        break;
    case NET_FOREIGN_DEVICE:
        if (!if_indextoname(l->ifindex, dev))
            snprintf(dev, sizeof dev, "#%u", l->ifindex);
        LOG_ERROR("foreign listener: %s listens on %s bound to device %s (SO_BINDTODEVICE): "
                  "the kernel gives it the connections arriving on that device before us; %s",
                  who, where, dev, ready);
        break;
    }
}

void app_housekeeping(app *a)
{
    uint32_t before = atomic_load(&a->net->foreign_now);
    net_server_watch(a->net, report_foreign, a);
    if (before && !atomic_load(&a->net->foreign_now))
        LOG_INFO("foreign listeners gone from our ports");
    hostclaim_drain(&a->claims);
    log_tls_failures(a);
}

int app_stop(app *a)
{
    net_fswatch_stop(a->tls_watch); /* no reload while the listeners go */
    a->tls_watch = NULL;
    net_server_drain(a->net);
    net_server_wait(a->net); /* no more IDs or cache writes: the final snapshot and lease */
    int code = 0;
    if (cache_persist_stop(a->persist) != 0)
        code = EXIT_FAILURE;
    a->persist = NULL;
    seq_table_stop(a->seq); /* the unissued numbers given back, the source's thread joined */
    char err[512];
    if (sf_lease_keeper_stop(&a->keeper, err, sizeof err) != 0) {
        LOG_ERROR("final lease not written: %s", err);
        code = EXIT_FAILURE; /* the renewed lease on disk still covers every ID issued */
    }
    net_server_join(a->net); /* after the threads that open files: see net_server_wait */
    if (atomic_load(&a->identity_lost)) {
        LOG_INFO("stopped: the identity was lost (exit %d)", APP_EXIT_LOST);
        code = APP_EXIT_LOST;
    } else {
        LOG_INFO("stopped%s", code ? " with errors" : "");
    }
    log_shutdown();
    app_free(a);
    return code;
}

/* ---- in process ----------------------------------------------------------------------------- */

int app_build(app *a, const cfg *c, const app_options *o, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->config = c;
    a->net = o->net;
    if (make_gens(a, o->net->nloops, o->clock, NULL, 0, false, err, errlen) != 0 ||
        make_serving(a, o->cache_seed, true, err, errlen) != 0) {
        app_free(a);
        return -1;
    }
    atomic_store(&a->api.listening, true);
    return 0;
}

void app_free(app *a)
{
    http_server_free(a->http);
    perloop_free(&a->api.loops);
    seq_table_free(a->seq);
    seq_file_source_free(a->seq_file);
    seq_etcd_source_free(a->seq_etcd);
    a->seq = NULL;
    a->seq_file = NULL;
    a->seq_etcd = NULL;
    a->api.seq = NULL;
    memcache_server_free(a->mc);
    cache_store_free(a->cache);
    for (unsigned i = 0; a->gen_ptrs && i < perloop_count(&a->gens); i++)
        if (a->gen_ptrs[i])
            sf_gen_destroy(a->gen_ptrs[i]);
    perloop_free(&a->gens);
    free(a->gen_ptrs);
    free((void *)a->loop_ticks);
    a->loop_ticks = NULL;
    net_fswatch_stop(a->etcd_tls_watch);
    a->etcd_tls_watch = NULL;
    sf_identity_free(&a->identity);
    etcd_tls_free(a->etcd_tls); /* after the client that used it */
    a->etcd_tls = NULL;
    hostclaim_release(&a->claims); /* after the final lease: no ID of ours can follow */
    for (int i = 0; i < APP_TLS_LISTENERS; i++)
        if (a->tls_on[i]) /* every connection is gone: the last references */
            net_tls_free(&a->tls[i]);
    memset(a->tls_on, 0, sizeof a->tls_on);
    certname_list_free(&a->http_peers);
    a->http = NULL;
    a->mc = NULL;
    a->cache = NULL;
    a->gen_ptrs = NULL;
}
