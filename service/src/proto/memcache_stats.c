/* memcached's "stats" and its subcommands (memcache_int.h: mc_cmd_stats), as memcached 1.6.18
 * built without TLS, extstore and the proxy answers them: the same keys in the same order, the
 * same errors, values from our own counters.
 *
 *   stats                     the general set as memcached prints it without its LRU crawler
 *                             thread: 90 keys (83 with cache.lru_segmented=false, as memcached
 *                             -o no_lru_crawler,no_lru_maintainer; one more, idle_kicks, with
 *                             cache.memcached_idle_timeout_s). The segmented LRU's keys
 *                             (lru_maintainer_juggles, evicted_active, moves_*) come from the
 *                             store, whose juggling runs inline (store.h "Segments"), so
 *                             `stats settings` says lru_maintainer_thread yes while segmented;
 *                             direct_reclaims and lru_bumps_dropped are 0 (eviction is inline,
 *                             bumps are never queued). No lru_crawler_* keys: we have no crawler
 *                             thread (an expiry sweep); its lru_crawler is whether
 *                             lru_crawler crawl/metadump run (memcache_options.lru_crawler,
 *                             lru_crawler enable|disable). Fields with
 *                             a counterpart here get it (store counters, the listener's bytes and
 *                             refusals, the per-loop command counters); memcached internals we do
 *                             not have print 0: response_obj_*, read_buf_*,
 *                             time_in_listen_disabled_us, slab_reassign_*, slabs_moved,
 *                             malloc_fails, log_*, unexpected_napi_ids, round_robin_fallback,
 *                             slab_global_page_pool, crawler_items_checked, lrutail_reflocked.
 *                             The mapping is in test/memcached_t/README.md.
 *                             auth_cmds / auth_errors: credentials checked / refused (memcached
 *                             -Y, cache.memcached_auth_file).
 *                             With a memcached TLS listener (memcache_options.tls), as memcached
 *                             -Z: ssl_handshake_errors (that listener's failed handshakes, every
 *                             cause) and time_since_server_cert_refresh (seconds since its
 *                             certificate was last loaded: start, SIGHUP, refresh_certs, watch).
 *   stats reset               RESET: the counters memcached resets read 0 afterwards. They are
 *                             never written here (they are single-writer counters of the loops
 *                             and the store, and /metrics must stay monotonic): the reset takes
 *                             a baseline, and this view shows value - baseline.
 *                             With a TLS listener (memcached -Z) also ssl_handshake_errors and
 *                             time_since_server_cert_refresh, as memcached's TLS build.
 *   stats settings            every key memcached prints (with its TLS build's ssl_*), each
 *                             value from the live configuration or state (options, the store,
 *                             the admin commands' settings); memcached's default only where we have no such setting
 *                             and behave as that default (umask, slab_automove_window, ...).
 *                             test_memcache_diff's StatsSettingsValues compares the values with
 *                             memcached's started with the equivalent flags.
 *   stats items / slabs       per size class (store.h: memcached's slab classes as accounting
 *                             buckets). A class appears in items while it holds items, in
 *                             slabs once it has held one (memcached keeps its pages). Pages are the
 *                             1 MiB pages memcached would need for the items (ceil(items / chunks
 *                             per page)), total_malloced the bytes the store holds for items
 *                             (reserved + its free lists). items: number_hot/warm/cold/temp and
 *                             moves_* / hits_to_* from the store's segments; age_hot, age_warm
 *                             and age are the idle seconds of the oldest HOT/WARM/COLD shard
 *                             tail that is an item of the class; evicted_time is 0.
 *   stats sizes[_enable|_disable]  the histogram is not kept: sizes answers "disabled", enabling
 *                             answers memcached's error form (sizes_status error).
 *   stats conns               the listening socket and the connections of the asking
 *                             connection's loop (connections belong to their loop thread and are
 *                             not read from another one).
 *   stats detail on|off|dump  per-prefix counts (memcache_int.h: mc_detail_record), at most
 *                             MC_DETAIL_MAX prefixes (later ones are not counted).
 *   stats cachedump <cls> <n> "ITEM key [N b; T s]" lines, most recent first, bounded scan.
 *
 * Threads: called on loop threads. The baselines and the detail table are shared by the loops
 * and kept under one mutex, taken by stats commands (rare, short) and by detail recording (off
 * unless asked for). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "net/loop.h"
#include "net/tls.h"
#include "proto/memcache_int.h"
#include "util/fmt.h"

#define MC_DETAIL_MAX     256     /* prefixes counted by "stats detail" */
#define MC_PAGE_BYTES     1048576 /* memcached's slab page (stats slabs' chunks_per_page) */
#define MC_DUMP_MAX_BYTES (2u * 1024u * 1024u) /* memcached's cachedump reply limit */
#define MC_DUMP_SCAN      4096 /* cachedump: the most recent items looked at per shard */
#define MC_STAT_LINE_MAX  (CACHE_KEY_MAX + 128)

/* The counters "stats reset" zeroes (memcached: its thread and slab stats, `stats`, the item
 * stats), as monotonic raw values. */
/* clang-format off */
#define MC_RESETTABLE(X)                                                                          \
    X(total_connections) X(rejected_connections) X(cmd_get) X(cmd_set) X(cmd_flush) X(cmd_touch)  \
    X(cmd_meta) X(get_hits) X(get_misses) X(get_expired) X(get_flushed) X(delete_misses)          \
    X(delete_hits) X(incr_misses) X(incr_hits) X(decr_misses) X(decr_hits) X(cas_misses)          \
    X(cas_hits) X(cas_badval) X(touch_hits) X(touch_misses) X(store_too_large)                    \
    X(store_no_memory) X(bytes_read) X(bytes_written) X(listen_disabled_num) X(conn_yields)       \
    X(total_items) X(expired_unfetched) X(evicted_unfetched) X(evictions) X(reclaimed)         \
    X(crawler_reclaimed) X(idle_kicks) X(lru_maintainer_juggles) X(auth_cmds) X(auth_errors)
/* clang-format on */
typedef struct mc_counts {
#define MC_COUNT_FIELD(name) uint64_t name;
    MC_RESETTABLE(MC_COUNT_FIELD)
#undef MC_COUNT_FIELD
} mc_counts;

typedef struct mc_prefix {
    uint64_t get, hit, set, del;
    uint8_t len;
    char name[CACHE_KEY_MAX];
} mc_prefix;

struct mc_stats {
    pthread_mutex_t mu;
    mc_counts base;                                /* raw values at the last reset */
    cache_class_stats base_cls[CACHE_CLASSES_MAX]; /* the same per class (events only) */
    unsigned nprefix;
    mc_prefix prefix[MC_DETAIL_MAX]; /* in order of first appearance */
};

mc_stats *mc_stats_new(void)
{
    mc_stats *st = calloc(1, sizeof *st);
    if (st)
        pthread_mutex_init(&st->mu, NULL);
    return st;
}

void mc_stats_free(mc_stats *st)
{
    if (!st)
        return;
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* ---- output ------------------------------------------------------------------------------- */

static void stat_line(conn *c, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "STAT <name> <value>\r\n" (memcached's APPEND_STAT). */
static void stat_line(conn *c, const char *name, const char *fmt, ...)
{
    char buf[MC_STAT_LINE_MAX];
    int n = snprintf(buf, sizeof buf, "STAT %s ", name);
    va_list ap;
    va_start(ap, fmt);
    int v = vsnprintf(buf + n, sizeof buf - (size_t)n - 2, fmt, ap);
    va_end(ap);
    n += v < (int)(sizeof buf - (size_t)n - 2) ? v : (int)(sizeof buf - (size_t)n - 3);
    buf[n++] = '\r';
    buf[n++] = '\n';
    conn_write(c, buf, (size_t)n);
}

#define WRITE_LIT(c, lit) conn_write((c), lit, sizeof(lit) - 1)

#define STAT_U(c, name, v) stat_line((c), (name), "%llu", (unsigned long long)(v))

/* ---- gathering ---------------------------------------------------------------------------- */

static uint64_t loops_sum(const memcache_server *s, size_t off)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < perloop_count(&s->loops); i++) {
        const char *l = perloop_at(&s->loops, i);
        sum += counter_get((const _Atomic uint64_t *)(const void *)(l + off));
    }
    return sum;
}
#define SUM(s, field) loops_sum((s), offsetof(mc_loop, field))

static void class_totals(const cache_class_stats *cls, cache_class_stats *tot)
{
    memset(tot, 0, sizeof *tot);
    for (unsigned k = 0; k < CACHE_CLASSES_MAX; k++) {
#define CLASS_ADD(name) tot->name += cls[k].name;
        CACHE_CLASS_COUNTERS(CLASS_ADD)
#undef CLASS_ADD
    }
}

/* The raw (never reset) values of the resettable counters. */
static void gather(const mc_conn *m, const cache_stats *cs, const cache_class_stats *cls,
                   mc_counts *out)
{
    const memcache_server *s = m->srv;
    net_listener_stats ls;
    net_listener_stats_sum(m->c->listener, &ls);
    cache_class_stats tot;
    class_totals(cls, &tot);
    out->total_connections = SUM(s, conns_opened);
    out->rejected_connections = counter_get(&ls.rejected_at_cap);
    out->cmd_get = SUM(s, cmd_get);
    out->cmd_set = SUM(s, cmd_set);
    out->cmd_flush = SUM(s, cmd_flush);
    out->cmd_touch = SUM(s, cmd_touch);
    out->cmd_meta = SUM(s, cmd_meta);
    out->get_hits = cs->get_hits;
    out->get_misses = cs->get_misses;
    out->get_expired = cs->expired_lazy;
    out->get_flushed = cs->flushed;
    out->delete_misses = cs->delete_misses;
    out->delete_hits = cs->delete_hits;
    out->incr_misses = cs->incr_misses + SUM(s, incr_misses); /* incr in the store, ma here */
    out->incr_hits = cs->incr_hits + SUM(s, incr_hits);
    out->decr_misses = cs->decr_misses + SUM(s, decr_misses);
    out->decr_hits = cs->decr_hits + SUM(s, decr_hits);
    out->cas_misses = cs->cas_misses;
    out->cas_hits = cs->cas_hits;
    out->cas_badval = cs->cas_badval;
    out->touch_hits = cs->touch_hits;
    out->touch_misses = cs->touch_misses;
    out->store_too_large = SUM(s, store_too_large);
    out->store_no_memory = SUM(s, store_no_memory);
    out->bytes_read = counter_get(&ls.bytes_in);
    out->bytes_written = counter_get(&ls.bytes_out);
    out->listen_disabled_num = counter_get(&ls.accept_pauses);
    out->conn_yields = SUM(s, conn_yields);
    out->total_items = SUM(s, total_items);
    out->expired_unfetched = tot.expired_unfetched;
    out->evicted_unfetched = tot.evicted_unfetched;
    out->evictions = cs->evictions;
    out->reclaimed = tot.reclaimed;
    out->crawler_reclaimed = tot.crawler_reclaimed;
    out->idle_kicks = SUM(s, idle_kicks);
    out->lru_maintainer_juggles = cs->lru_juggles;
    out->auth_cmds = SUM(s, auth_cmds);
    out->auth_errors = SUM(s, auth_errors);
}

/* v - baseline, as this view shows it (0 if the counter is somehow below its baseline). */
static inline uint64_t since(uint64_t v, uint64_t base)
{
    return v >= base ? v - base : 0;
}

/* The counters as shown: raw minus the last reset's baseline, per class too (events only).
 * *used (if not NULL): bit k set when class k holds items or ever stored one (memcached keeps a
 * class's slab pages once it has them, so `stats slabs` lists it with 0 used chunks). */
static void shown(const mc_conn *m, mc_counts *out, cache_stats *cs, cache_class_stats *cls,
                  uint64_t *used)
{
    mc_stats *st = m->srv->stats;
    cache_store_stats(m->srv->store, cs);
    cache_store_class_stats(m->srv->store, cls, mc_now(m->srv));
    gather(m, cs, cls, out);
    if (used) {
        *used = 0;
        for (unsigned k = 0; k < CACHE_CLASSES_MAX; k++)
            if (cls[k].items || cls[k].sets)
                *used |= UINT64_C(1) << k;
    }
    pthread_mutex_lock(&st->mu);
#define SHOW(name) out->name = since(out->name, st->base.name);
    MC_RESETTABLE(SHOW)
#undef SHOW
    for (unsigned k = 0; k < CACHE_CLASSES_MAX; k++) {
        cache_class_stats *c = &cls[k];
        const cache_class_stats *b = &st->base_cls[k];
        uint64_t items = c->items, bytes = c->bytes; /* state, not events: never reset (nor */
#define SHOW_CLS(name) c->name = since(c->name, b->name); /* the gauges and ages) */
        CACHE_CLASS_COUNTERS(SHOW_CLS)
#undef SHOW_CLS
        c->items = items;
        c->bytes = bytes;
    }
    pthread_mutex_unlock(&st->mu);
}

static void stats_reset(mc_conn *m)
{
    mc_stats *st = m->srv->stats;
    cache_stats cs;
    static _Thread_local cache_class_stats cls[CACHE_CLASSES_MAX]; /* 7.5 KiB: off the stack */
    mc_counts raw;
    cache_store_stats(m->srv->store, &cs);
    cache_store_class_stats(m->srv->store, cls, mc_now(m->srv));
    gather(m, &cs, cls, &raw);
    pthread_mutex_lock(&st->mu);
    st->base = raw;
    memcpy(st->base_cls, cls, sizeof st->base_cls);
    st->nprefix = 0; /* memcached's stats_prefix_clear */
    pthread_mutex_unlock(&st->mu);
}

/* ---- stats -------------------------------------------------------------------------------- */

static void hash_info(cache_store *store, uint64_t *buckets, bool *expanding)
{
    *buckets = 0;
    *expanding = false;
    for (unsigned i = 0; i < cache_store_shards(store); i++) {
        cache_table_info ti;
        cache_store_table_info(store, i, &ti);
        *buckets += ti.buckets;
        *expanding |= ti.old_buckets != 0;
    }
}

static unsigned log2_floor(uint64_t v)
{
    return v ? 63u - (unsigned)__builtin_clzll(v) : 0;
}

/* Descriptors kept for the rest of the process out of RLIMIT_NOFILE (memcached's reserved_fds). */
static uint64_t reserved_fds(const net_server *ns)
{
    struct rlimit rl;
    if (ns->fd_conn_cap == UINT32_MAX || getrlimit(RLIMIT_NOFILE, &rl) != 0 ||
        rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur < ns->fd_conn_cap)
        return 0;
    return (uint64_t)rl.rlim_cur - ns->fd_conn_cap;
}

/* This server's TLS listener (memcached -Z), on the asking connection's loop, or NULL. */
static const net_listener *tls_listener(const mc_conn *m)
{
    const net_loop *lp = m->c->loop;
    for (unsigned i = 0; i < lp->nlisteners; i++) {
        const net_listener *l = &lp->listeners[i];
        if (l->spec && l->spec->tls && l->spec->ctx == (const void *)m->srv)
            return l;
    }
    return NULL;
}

static void stats_general(mc_conn *m, uint64_t now)
{
    const memcache_server *s = m->srv;
    conn *c = m->c;
    const net_server *ns = c->loop->server;
    cache_stats cs;
    static _Thread_local cache_class_stats cls[CACHE_CLASSES_MAX];
    mc_counts v;
    shown(m, &v, &cs, cls, NULL);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t curr = SUM(s, conns_opened) - SUM(s, conns_closed), buckets;
    bool expanding;
    hash_info(s->store, &buckets, &expanding);

    stat_line(c, "pid", "%ld", (long)getpid());
    STAT_U(c, "uptime", (now - s->started_ms) / 1000);
    STAT_U(c, "time", now / 1000);
    stat_line(c, "version", "%s", MC_VERSION);
    stat_line(c, "libevent", "libuv-%s", uv_version_string()); /* our event library */
    stat_line(c, "pointer_size", "%d", (int)(8 * sizeof(void *)));
    stat_line(c, "rusage_user", "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    stat_line(c, "rusage_system", "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    STAT_U(c, "max_connections", ns->cfg.max_connections);
    STAT_U(c, "curr_connections", curr);
    STAT_U(c, "total_connections", v.total_connections);
    STAT_U(c, "rejected_connections", v.rejected_connections);
    STAT_U(c, "connection_structures", curr + 1); /* the connections and the listener */
    STAT_U(c, "response_obj_oom", 0);
    STAT_U(c, "response_obj_count", 0);
    STAT_U(c, "response_obj_bytes", 0);
    STAT_U(c, "read_buf_count", 0);
    STAT_U(c, "read_buf_bytes", 0);
    STAT_U(c, "read_buf_bytes_free", 0);
    STAT_U(c, "read_buf_oom", 0);
    STAT_U(c, "reserved_fds", reserved_fds(ns));
    STAT_U(c, "cmd_get", v.cmd_get);
    STAT_U(c, "cmd_set", v.cmd_set);
    STAT_U(c, "cmd_flush", v.cmd_flush);
    STAT_U(c, "cmd_touch", v.cmd_touch);
    STAT_U(c, "cmd_meta", v.cmd_meta);
    STAT_U(c, "get_hits", v.get_hits);
    STAT_U(c, "get_misses", v.get_misses);
    STAT_U(c, "get_expired", v.get_expired);
    STAT_U(c, "get_flushed", v.get_flushed);
    STAT_U(c, "delete_misses", v.delete_misses);
    STAT_U(c, "delete_hits", v.delete_hits);
    STAT_U(c, "incr_misses", v.incr_misses);
    STAT_U(c, "incr_hits", v.incr_hits);
    STAT_U(c, "decr_misses", v.decr_misses);
    STAT_U(c, "decr_hits", v.decr_hits);
    STAT_U(c, "cas_misses", v.cas_misses);
    STAT_U(c, "cas_hits", v.cas_hits);
    STAT_U(c, "cas_badval", v.cas_badval);
    STAT_U(c, "touch_hits", v.touch_hits);
    STAT_U(c, "touch_misses", v.touch_misses);
    STAT_U(c, "store_too_large", v.store_too_large);
    STAT_U(c, "store_no_memory", v.store_no_memory);
    STAT_U(c, "auth_cmds", v.auth_cmds);
    STAT_U(c, "auth_errors", v.auth_errors);
    if (s->opts.idle_timeout_s) /* as memcached: only with -o idle_timeout */
        STAT_U(c, "idle_kicks", v.idle_kicks);
    STAT_U(c, "bytes_read", v.bytes_read);
    STAT_U(c, "bytes_written", v.bytes_written);
    STAT_U(c, "limit_maxbytes", cs.mem_limit);
    STAT_U(c, "accepting_conns", conn_draining(c) ? 0 : 1);
    STAT_U(c, "listen_disabled_num", v.listen_disabled_num);
    STAT_U(c, "time_in_listen_disabled_us", 0);
    STAT_U(c, "threads", perloop_count(&s->loops));
    STAT_U(c, "conn_yields", v.conn_yields);
    STAT_U(c, "hash_power_level", log2_floor(buckets));
    STAT_U(c, "hash_bytes", buckets * sizeof(void *));
    STAT_U(c, "hash_is_expanding", expanding ? 1 : 0);
    static const char *const zeros[] = {
        "slab_reassign_rescues", "slab_reassign_chunk_rescues", "slab_reassign_evictions_nomem",
        "slab_reassign_inline_reclaim", "slab_reassign_busy_items", "slab_reassign_busy_deletes",
        "slab_reassign_running", "slabs_moved"};
    for (size_t i = 0; i < sizeof zeros / sizeof *zeros; i++)
        STAT_U(c, zeros[i], 0);
    bool segmented = cache_store_segmented(s->store);
    if (segmented) /* our maintainer: the juggling on the store path and in the sweep */
        STAT_U(c, "lru_maintainer_juggles", v.lru_maintainer_juggles);
    STAT_U(c, "malloc_fails", 0);
    mc_watch_stats ws; /* watch (memcache_watch.c); not reset by "stats reset" */
    mc_watch_stats_get(&s->watch, &ws);
    STAT_U(c, "log_worker_dropped", ws.worker_dropped);
    STAT_U(c, "log_worker_written", ws.worker_written);
    STAT_U(c, "log_watcher_skipped", ws.watcher_skipped);
    STAT_U(c, "log_watcher_sent", ws.watcher_sent);
    STAT_U(c, "log_watchers", ws.watchers);
    /* memcached's TLS build with -Z: failed handshakes (ours by cause in /metrics'
     * snowflaked_tls_handshake_failures_total) and the seconds since the certificate was loaded
     * (start, SIGHUP, refresh_certs). ssl_new_sessions, printed with its session cache, is not:
     * our resumption is by tickets, with no server-side session to count. */
    const net_listener *tl = tls_listener(m);
    if (tl) {
        net_listener_stats ts;
        net_listener_stats_sum(tl, &ts);
        uint64_t fails = 0;
        for (int r = 0; r < NET_TLS_FAIL_COUNT; r++)
            fails += counter_get(&ts.tls_failures[r]);
        int64_t since = (int64_t)time(NULL) - atomic_load(&tl->spec->tls->loaded_at_s);
        STAT_U(c, "ssl_handshake_errors", fails);
        STAT_U(c, "time_since_server_cert_refresh", since > 0 ? since : 0);
    }
    STAT_U(c, "unexpected_napi_ids", 0);
    STAT_U(c, "round_robin_fallback", 0);
    STAT_U(c, "bytes", cs.bytes);
    STAT_U(c, "curr_items", cs.curr_items);
    STAT_U(c, "total_items", v.total_items);
    STAT_U(c, "slab_global_page_pool", 0);
    STAT_U(c, "expired_unfetched", v.expired_unfetched);
    STAT_U(c, "evicted_unfetched", v.evicted_unfetched);
    cache_class_stats tot;
    class_totals(cls, &tot);
    if (segmented)
        STAT_U(c, "evicted_active", tot.evicted_active);
    STAT_U(c, "evictions", v.evictions);
    STAT_U(c, "reclaimed", v.reclaimed);
    STAT_U(c, "crawler_reclaimed", v.crawler_reclaimed); /* the expiry sweep: our crawler */
    STAT_U(c, "crawler_items_checked", 0);
    STAT_U(c, "lrutail_reflocked", 0);
    if (segmented) {
        STAT_U(c, "moves_to_cold", tot.moves_to_cold);
        STAT_U(c, "moves_to_warm", tot.moves_to_warm);
        STAT_U(c, "moves_within_lru", tot.moves_within_lru);
        STAT_U(c, "direct_reclaims", 0);   /* no allocation loop retries: eviction is inline */
        STAT_U(c, "lru_bumps_dropped", 0); /* bumps are never queued, so never dropped */
    }
    WRITE_LIT(c, "END\r\n");
}

/* "oldest": memcached's oldest_live, the moment of the last flush_all on its relative clock
 * (seconds since it started); ours, seconds since this listener started, rounded up so that a
 * flush in the first second is not 0 (never). */
static uint64_t flushed_s(const memcache_server *s)
{
    uint64_t at = atomic_load_explicit(&s->admin.flushed_ms, memory_order_relaxed);
    if (at == 0)
        return 0;
    return at > s->started_ms ? (at - s->started_ms + 999) / 1000 : 1;
}

static void stats_settings(mc_conn *m)
{
    const memcache_server *s = m->srv;
    conn *c = m->c;
    const net_server *ns = c->loop->server;
    const net_listener_spec *spec = c->listener->spec;
    unsigned threads = perloop_count(&s->loops);
    cache_stats cs;
    cache_store_stats(s->store, &cs);
    STAT_U(c, "maxbytes", cs.mem_limit);
    STAT_U(c, "maxconns", ns->cfg.max_connections);
    STAT_U(c, "tcpport", spec->port);
    STAT_U(c, "udpport", 0);
    stat_line(c, "inter", "%s", spec->host[0] ? spec->host : "NULL");
    STAT_U(c, "verbosity", atomic_load_explicit(&s->verbosity, memory_order_relaxed));
    STAT_U(c, "oldest", flushed_s(s));
    stat_line(c, "evictions", cache_store_evicts(s->store) ? "on" : "off");
    stat_line(c, "domain_socket", "NULL");
    stat_line(c, "umask", "700");
    stat_line(c, "shutdown_command", s->opts.shutdown_enabled ? "yes" : "no");
    stat_line(c, "growth_factor", "1.25");
    stat_line(c, "chunk_size", "48");
    STAT_U(c, "num_threads", threads);
    STAT_U(c, "num_threads_per_udp", threads);
    stat_line(c, "stat_key_prefix", ":");
    stat_line(c, "detail_enabled", "%s",
              atomic_load_explicit(&s->detail_on, memory_order_relaxed) ? "yes" : "no");
    STAT_U(c, "reqs_per_event", s->opts.reqs_per_event);
    stat_line(c, "cas_enabled", s->opts.cas_enabled ? "yes" : "no");
    stat_line(c, "tcp_backlog", "%d", ns->cfg.backlog);
    stat_line(c, "binding_protocol", "ascii");
    stat_line(c, "auth_enabled_sasl", "no");
    stat_line(c, "auth_enabled_ascii", "%s", s->auth_on ? s->auth_path : "no"); /* -Y's file */
    STAT_U(c, "item_size_max", cache_store_max_item(s->store));
    stat_line(c, "maxconns_fast", "yes");
    stat_line(c, "hashpower_init", "0");
    stat_line(c, "slab_reassign", "yes");
    STAT_U(c, "slab_automove", atomic_load(&s->admin.slab_automove));
    stat_line(c, "slab_automove_ratio", "%.2f", mc_admin_ratio(&s->admin));
    stat_line(c, "slab_automove_window", "30");
    STAT_U(c, "slab_chunk_max",
           cache_store_class_chunk(s->store, cache_store_size_classes(s->store)));
    stat_line(c, "lru_crawler", atomic_load(&s->admin.crawler_enabled) ? "yes" : "no");
    STAT_U(c, "lru_crawler_sleep", atomic_load(&s->admin.crawler_sleep));
    STAT_U(c, "lru_crawler_tocrawl", atomic_load(&s->admin.crawler_tocrawl));
    stat_line(c, "tail_repair_time", "0");
    stat_line(c, "flush_enabled", s->opts.flush_enabled ? "yes" : "no");
    stat_line(c, "dump_enabled", s->opts.dump_enabled ? "yes" : "no");
    stat_line(c, "hash_algorithm", "wyhash");
    /* no thread, but the juggling it does runs inline whenever the LRU is segmented */
    bool segmented = cache_store_segmented(s->store);
    uint32_t temp_ttl = cache_store_temporary_ttl(s->store);
    stat_line(c, "lru_maintainer_thread", segmented ? "yes" : "no");
    stat_line(c, "lru_segmented", segmented ? "yes" : "no");
    /* the store's (fixed): "lru tune" is accepted and changes nothing */
    STAT_U(c, "hot_lru_pct", CACHE_HOT_LRU_PCT);
    STAT_U(c, "warm_lru_pct", CACHE_WARM_LRU_PCT);
    stat_line(c, "hot_max_factor", "%.2f", 1.0 / CACHE_HOT_MAX_FACTOR_DIV);
    stat_line(c, "warm_max_factor", "%.2f", (double)CACHE_WARM_MAX_FACTOR_MULT);
    stat_line(c, "temp_lru", temp_ttl ? "yes" : "no");
    STAT_U(c, "temporary_ttl", temp_ttl ? temp_ttl : 61); /* memcached's default when off */
    STAT_U(c, "idle_timeout",
           s->opts.idle_timeout_s ? s->opts.idle_timeout_s : ns->cfg.idle_timeout_ms / 1000);
    /* a watcher's buffer is its connection's output up to the high-water mark (memcache_watch.h);
     * a worker's, its loop's ring of events */
    STAT_U(c, "watcher_logbuf_size", ns->cfg.out_high_water);
    STAT_U(c, "worker_logbuf_size", mc_watch_ring_bytes());
    stat_line(c, "read_buf_mem_limit", "0");
    stat_line(c, "track_sizes", "no");
    stat_line(c, "inline_ascii_response", "no");
    /* memcached's TLS build (Debian's): these whether or not -Z is on, its NULLs as it prints
     * them ("(null)" for a path never set, "NULL" where it says so); ssl_keyformat 1 = PEM,
     * ssl_wbuf_size memcached's default (our TLS writes go through the connection's own output
     * buffer, in records of at most 16 KiB), ssl_kernel_tls: kTLS asked for (ktls "auto", as
     * memcached's -o ssl_kernel_tls asks; whether the kernel gave it is in our metrics) */
    const memcache_options *o = &s->opts;
    stat_line(c, "ssl_enabled", o->tls_on ? "yes" : "no");
    stat_line(c, "ssl_chain_cert", "%s", o->tls_cert_file ? o->tls_cert_file : "(null)");
    stat_line(c, "ssl_key", "%s", o->tls_key_file ? o->tls_key_file : "(null)");
    STAT_U(c, "ssl_verify_mode", o->tls_verify_mode);
    stat_line(c, "ssl_keyformat", "1");
    stat_line(c, "ssl_ciphers", "%s", o->tls_cipher_list ? o->tls_cipher_list : "NULL");
    stat_line(c, "ssl_ca_cert", "%s", o->tls_ca_file ? o->tls_ca_file : "NULL");
    stat_line(c, "ssl_wbuf_size", "16384");
    stat_line(c, "ssl_session_cache", o->tls_resumption ? "yes" : "no");
    stat_line(c, "ssl_kernel_tls", o->tls_ktls ? "yes" : "no");
    stat_line(c, "ssl_min_version", o->tls_min13 ? "tlsv1.3" : "tlsv1.2");
    stat_line(c, "num_napi_ids", "(null)");
    stat_line(c, "memory_file", "(null)");
    WRITE_LIT(c, "END\r\n");
}

/* items:N:<name> (memcached's item_stats), classes that hold items. */
static void stats_items(mc_conn *m)
{
    conn *c = m->c;
    static _Thread_local cache_class_stats cls[CACHE_CLASSES_MAX];
    cache_stats cs;
    mc_counts v;
    shown(m, &v, &cs, cls, NULL);
    char name[64];
    bool segmented = cache_store_segmented(m->srv->store);
    bool temp = cache_store_temporary_ttl(m->srv->store) != 0;
    for (unsigned k = 1; k < CACHE_CLASSES_MAX; k++) {
        const cache_class_stats *x = &cls[k];
        if (x->items == 0)
            continue;
#define ITEM(field, val)                                                                         \
    do {                                                                                         \
        snprintf(name, sizeof name, "items:%u:%s", k, field);                                    \
        STAT_U(c, name, val);                                                                    \
    } while (0)
        ITEM("number", x->items);
        if (segmented) {
            ITEM("number_hot", x->number_hot);
            ITEM("number_warm", x->number_warm);
            ITEM("number_cold", x->number_cold);
            if (temp)
                ITEM("number_temp", x->number_temp);
            ITEM("age_hot", x->age_hot);
            ITEM("age_warm", x->age_warm);
        }
        ITEM("age", x->age);
        ITEM("mem_requested", x->bytes);
        ITEM("evicted", x->evicted);
        ITEM("evicted_nonzero", x->evicted_nonzero);
        ITEM("evicted_time", 0);
        ITEM("outofmemory", 0);
        ITEM("tailrepairs", 0);
        ITEM("reclaimed", x->reclaimed);
        ITEM("expired_unfetched", x->expired_unfetched);
        ITEM("evicted_unfetched", x->evicted_unfetched);
        if (segmented)
            ITEM("evicted_active", x->evicted_active);
        ITEM("crawler_reclaimed", x->crawler_reclaimed);
        ITEM("crawler_items_checked", 0);
        ITEM("lrutail_reflocked", 0);
        if (segmented) {
            ITEM("moves_to_cold", x->moves_to_cold);
            ITEM("moves_to_warm", x->moves_to_warm);
            ITEM("moves_within_lru", x->moves_within_lru);
            ITEM("direct_reclaims", 0);
            ITEM("hits_to_hot", x->hits_to_hot);
            ITEM("hits_to_warm", x->hits_to_warm);
            ITEM("hits_to_cold", x->hits_to_cold);
            ITEM("hits_to_temp", x->hits_to_temp);
        }
#undef ITEM
    }
    WRITE_LIT(c, "END\r\n");
}

/* N:<name> (memcached's slabs_stats), classes that hold or held items, then the totals. */
static void stats_slabs(mc_conn *m)
{
    conn *c = m->c;
    cache_store *store = m->srv->store;
    static _Thread_local cache_class_stats cls[CACHE_CLASSES_MAX];
    cache_stats cs;
    mc_counts v;
    uint64_t used;
    shown(m, &v, &cs, cls, &used);
    char name[64];
    unsigned active = 0;
    for (unsigned k = 1; k <= cache_store_size_classes(store); k++) {
        const cache_class_stats *x = &cls[k];
        if (!(used & (UINT64_C(1) << k)))
            continue;
        uint64_t chunk = cache_store_class_chunk(store, k);
        uint64_t per_page = MC_PAGE_BYTES / chunk;
        uint64_t pages = (x->items + per_page - 1) / per_page;
#define SLAB(field, val)                                                                         \
    do {                                                                                         \
        snprintf(name, sizeof name, "%u:%s", k, field);                                          \
        STAT_U(c, name, val);                                                                    \
    } while (0)
        SLAB("chunk_size", chunk);
        SLAB("chunks_per_page", per_page);
        SLAB("total_pages", pages);
        SLAB("total_chunks", pages * per_page);
        SLAB("used_chunks", x->items);
        SLAB("free_chunks", pages * per_page - x->items);
        SLAB("free_chunks_end", 0);
        SLAB("get_hits", x->get_hits);
        SLAB("cmd_set", x->sets);
        SLAB("delete_hits", x->delete_hits);
        SLAB("incr_hits", x->incr_hits);
        SLAB("decr_hits", x->decr_hits);
        SLAB("cas_hits", x->cas_hits);
        SLAB("cas_badval", x->cas_badval);
        SLAB("touch_hits", x->touch_hits);
#undef SLAB
        active++;
    }
    STAT_U(c, "active_slabs", active);
    STAT_U(c, "total_malloced", cs.mem_used + cs.free_bytes + cs.slab_free_chunk_bytes);
    WRITE_LIT(c, "END\r\n");
}

/* ---- stats conns -------------------------------------------------------------------------- */

/* memcached's "tcp:1.2.3.4:5" / "tcp6:[::1]:5" of fd's peer or local address. */
static bool sock_addr(int fd, bool peer, char *out, size_t n)
{
    char addr[INET6_ADDRSTRLEN + 8]; /* "[v6]:port" */
    int family = conn_sock_addr_text(fd, peer, addr, sizeof addr);
    if (!family)
        return false;
    snprintf(out, n, "%s%s", family == AF_INET ? "tcp:" : family == AF_INET6 ? "tcp6:" : "",
             addr);
    return true;
}

/* memcached's state names for what a connection is doing. */
static const char *conn_state_name(const mc_conn *self, const mc_conn *x)
{
    if (x == self)
        return "conn_parse_cmd"; /* it is running this command */
    if (x->state == MC_DATA)
        return "conn_nread";
    if (x->state == MC_SWALLOW)
        return "conn_swallow";
    if (x->state == MC_WATCH)
        return "conn_watch";
    if (conn_output_pending(x->c))
        return "conn_mwrite";
    return x->in_cmd ? "conn_read" : "conn_waiting";
}

static void stats_conns(mc_conn *m, uint64_t now)
{
    conn *self = m->c;
    net_listener *l = self->listener;
    char key[64], addr[INET6_ADDRSTRLEN + 16], laddr[INET6_ADDRSTRLEN + 16];
    int lfd = l->fd >= 0 ? l->fd : l->spec->shared_fd;
    if (sock_addr(lfd, false, laddr, sizeof laddr)) {
        snprintf(key, sizeof key, "%d:addr", lfd);
        stat_line(self, key, "%s", laddr);
        snprintf(key, sizeof key, "%d:state", lfd);
        stat_line(self, key, "conn_listening");
        snprintf(key, sizeof key, "%d:secs_since_last_cmd", lfd);
        STAT_U(self, key, (now - m->srv->started_ms) / 1000);
    }
    /* Oldest first, as memcached lists them by socket number (a new connection usually gets a
     * higher one): the asking connection's line is last unless a newer one is open. */
    conn *oldest = self->loop->conns;
    while (oldest && oldest->next)
        oldest = oldest->next;
    for (conn *c = oldest; c; c = c->prev) {
        if (c->listener != l || conn_closing(c))
            continue;
        const mc_conn *x = conn_state(c);
        int fd = conn_fd(c);
        if (fd < 0 || !sock_addr(fd, true, addr, sizeof addr) ||
            !sock_addr(fd, false, laddr, sizeof laddr))
            continue;
        snprintf(key, sizeof key, "%d:addr", fd);
        stat_line(self, key, "%s", addr);
        snprintf(key, sizeof key, "%d:listen_addr", fd);
        stat_line(self, key, "%s", laddr);
        snprintf(key, sizeof key, "%d:state", fd);
        stat_line(self, key, "%s", conn_state_name(m, x));
        snprintf(key, sizeof key, "%d:secs_since_last_cmd", fd);
        uint64_t last = x->last_cmd_ms ? x->last_cmd_ms : now;
        STAT_U(self, key, now > last ? (now - last) / 1000 : 0);
    }
    WRITE_LIT(self, "END\r\n");
}

/* ---- stats detail ------------------------------------------------------------------------- */

void mc_detail_record_slow(memcache_server *s, const char *key, size_t klen, mc_detail_kind k)
{
    const char *colon = memchr(key, ':', klen);
    if (!colon)
        return; /* memcached counts only keys with a prefix */
    size_t len = (size_t)(colon - key);
    mc_stats *st = s->stats;
    pthread_mutex_lock(&st->mu);
    mc_prefix *p = NULL;
    for (unsigned i = 0; i < st->nprefix && !p; i++)
        if (st->prefix[i].len == len && memcmp(st->prefix[i].name, key, len) == 0)
            p = &st->prefix[i];
    if (!p && st->nprefix < MC_DETAIL_MAX) {
        p = &st->prefix[st->nprefix++];
        memset(p, 0, sizeof *p);
        p->len = (uint8_t)len;
        memcpy(p->name, key, len);
    }
    if (p) {
        switch (k) {
        case MC_DETAIL_HIT: p->hit++; /* fall through: a hit is a get */
        /* FALLTHROUGH */
        case MC_DETAIL_GET: p->get++; break;
        case MC_DETAIL_SET: p->set++; break;
        case MC_DETAIL_DEL: p->del++; break;
        }
    }
    pthread_mutex_unlock(&st->mu);
}

static void detail_dump(mc_conn *m)
{
    mc_stats *st = m->srv->stats;
    char line[MC_ESCAPED_MAX(CACHE_KEY_MAX) + 4 * FMT_U64_MAX + 48];
    char name[MC_ESCAPED_MAX(CACHE_KEY_MAX)];
    pthread_mutex_lock(&st->mu);
    for (unsigned i = 0; i < st->nprefix; i++) {
        const mc_prefix *p = &st->prefix[i];
        size_t nlen = mc_escaped(p->name, p->len, name); /* a get's key may hold any byte */
        int n = snprintf(line, sizeof line, "PREFIX %.*s get %llu hit %llu set %llu del %llu\r\n",
                         (int)nlen, name, (unsigned long long)p->get,
                         (unsigned long long)p->hit, (unsigned long long)p->set,
                         (unsigned long long)p->del);
        conn_write(m->c, line, (size_t)n);
    }
    pthread_mutex_unlock(&st->mu);
    WRITE_LIT(m->c, "END\r\n");
}

static bool tok_eq(const mc_tok *t, const char *s)
{
    size_t n = strlen(s);
    return t->n == n && memcmp(t->p, s, n) == 0;
}

static void stats_detail(mc_conn *m, const mc_tok *t, size_t nt)
{
    /* with key listing off (-X): the prefixes are part of the keys, and recording them takes a
     * shared lock on every command; only "off" stays allowed (memcached's -X does not cover it) */
    if (!m->srv->opts.dump_enabled && !(nt >= 3 && tok_eq(&t[2], "off"))) {
        WRITE_LIT(m->c, "CLIENT_ERROR stats detail not allowed\r\n");
        return;
    }
    if (nt >= 3 && tok_eq(&t[2], "on")) {
        atomic_store_explicit(&m->srv->detail_on, true, memory_order_relaxed);
        WRITE_LIT(m->c, "OK\r\n");
    } else if (nt >= 3 && tok_eq(&t[2], "off")) {
        atomic_store_explicit(&m->srv->detail_on, false, memory_order_relaxed);
        WRITE_LIT(m->c, "OK\r\n");
    } else if (nt >= 3 && tok_eq(&t[2], "dump")) {
        detail_dump(m);
    } else {
        WRITE_LIT(m->c, "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    }
}

/* ---- stats cachedump ---------------------------------------------------------------------- */

typedef struct dump_state {
    conn *c;
    uint64_t left; /* items still to show; UINT64_MAX: no limit */
    size_t bytes;  /* written so far */
} dump_state;

static int dump_one(const cache_item *it, void *arg)
{
    dump_state *d = arg;
    char line[MC_ESCAPED_MAX(CACHE_KEY_MAX) + 2 * FMT_U64_MAX + 32];
    char key[MC_ESCAPED_MAX(CACHE_KEY_MAX)];
    size_t klen = mc_escaped(cache_item_key(it), cache_item_klen(it), key); /* ms b: any bytes */
    uint64_t exp = cache_item_expiry(it);
    int n = snprintf(line, sizeof line, "ITEM %.*s [%zu b; %llu s]\r\n", (int)klen, key,
                     cache_item_vlen(it), (unsigned long long)(exp / 1000));
    if (d->bytes + (size_t)n + 5 > MC_DUMP_MAX_BYTES)
        return 1;
    conn_write(d->c, line, (size_t)n);
    d->bytes += (size_t)n;
    return --d->left == 0;
}

static void stats_cachedump(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    uint32_t cls, limit;
    if (!m->srv->opts.dump_enabled) { /* -X: first, as memcached */
        WRITE_LIT(m->c, "CLIENT_ERROR stats cachedump not allowed\r\n");
        return;
    }
    if (nt < 4) {
        WRITE_LIT(m->c, "CLIENT_ERROR bad command line\r\n");
        return;
    }
    if (!mc_parse_u32(&t[2], &cls) || !mc_parse_u32(&t[3], &limit)) {
        WRITE_LIT(m->c, "CLIENT_ERROR bad command line format\r\n");
        return;
    }
    if (cls >= CACHE_CLASSES_MAX) {
        WRITE_LIT(m->c, "CLIENT_ERROR Illegal slab id\r\n");
        return;
    }
    dump_state d = {m->c, limit ? limit : UINT64_MAX, 0};
    if (cls >= 1)
        cache_store_class_dump(m->srv->store, cls, MC_DUMP_SCAN, now, dump_one, &d);
    WRITE_LIT(m->c, "END\r\n");
}

/* ---- dispatch ----------------------------------------------------------------------------- */

void mc_cmd_stats(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    if (nt == 1) {
        stats_general(m, now);
        return;
    }
    const mc_tok *sub = &t[1];
    if (tok_eq(sub, "reset")) {
        stats_reset(m);
        WRITE_LIT(m->c, "RESET\r\n");
    } else if (tok_eq(sub, "detail")) {
        stats_detail(m, t, nt);
    } else if (tok_eq(sub, "settings")) {
        stats_settings(m);
    } else if (tok_eq(sub, "cachedump")) {
        stats_cachedump(m, t, nt, now);
    } else if (tok_eq(sub, "conns")) {
        stats_conns(m, now);
    } else if (tok_eq(sub, "items")) {
        stats_items(m);
    } else if (tok_eq(sub, "slabs")) {
        stats_slabs(m);
    } else if (tok_eq(sub, "sizes")) {
        WRITE_LIT(m->c, "STAT sizes_status disabled\r\nEND\r\n");
    } else if (tok_eq(sub, "sizes_enable")) {
        /* memcached's answer when it cannot keep the histogram (no terminator, as memcached) */
        WRITE_LIT(m->c, "STAT sizes_status error\r\nSTAT sizes_error not_supported\r\n");
    } else if (tok_eq(sub, "sizes_disable")) {
        WRITE_LIT(m->c, "STAT sizes_status disabled\r\n");
    } else {
        WRITE_LIT(m->c, "ERROR\r\n");
    }
}
