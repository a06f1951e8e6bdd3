/* memcached's "watch" (doc/protocol.txt "Watchers"): a connection turns into a live log of what
 * the server does, in memcached 1.6.18's line formats (logger.c):
 *
 *   ts=<sec>.<usec> gid=<n> type=item_get key=<uri> status=<found|not_found> clsid=<c> cfd=<fd>
 * size=<n> ts=... type=item_store key=<uri> status=<stored|...> cmd=<set|...> ttl=<s> clsid=<c>
 * cfd=<fd> size=<n> ts=... type=eviction key=<uri> fetch=<yes|no> ttl=<s|-1> la=<s> clsid=<c>
 * size=<n> ts=... type=conn_new rip=<ip> rport=<port> transport=tcp cfd=<fd> ts=... type=conn_close
 * rip=<ip> rport=<port> transport=tcp reason=<normal|error|idle_timeout|shutdown> cfd=<fd>
 *   skipped=<n>      (lines this watcher lost since its last line: it did not read fast enough)
 *
 * Internal to service/src/proto (memcache_int.h includes it).
 *
 * Producers: the protocol's hot paths test one relaxed atomic flag word (mc_watching), the union
 * of what the live watchers asked for; nothing else runs while nobody watches that kind of event.
 * When someone does, the event is written to its loop's ring (one per event loop, single writer,
 * MC_WATCH_RING_SLOTS fixed-size slots, overwritten oldest first, never waited for): no lock, no
 * allocation, a clock read and a copy of at most ~300 bytes. Evictions come from the store
 * (cache_store_set_evict_hook), on the evicting thread, outside the shard's lock; a thread that
 * never served a memcached connection has no ring, and its evictions are counted as dropped.
 *
 * Consumers: each watcher (at most MC_WATCHERS_MAX, as memcached) has a timer on its own loop that
 * reads every loop's ring from its own cursors (a seqlock per slot: a slot overwritten while being
 * read is detected and counted) and writes the lines it wants into its connection's output. Above
 * the output's high-water mark it keeps consuming but writes nothing: the lines are counted, and a
 * "skipped=N" line goes out before the next line that fits (memcached's rule for a watcher whose
 * buffer is full). A watcher that fell a whole ring behind counts what it lost the same way. The
 * timer runs every 1 ms while there are lines, backing off to 100 ms when idle.
 *
 * Differences from memcached (what we do not have): item_get's status is found or not_found (our
 * store does not tell expired and flushed misses apart); "rawcmds", "sysevents", "proxyreqs",
 * "proxyevents", "proxyuser" are accepted and emit nothing (memcached 1.6.18 itself logs no raw
 * commands, and we have no crawler status, slab mover or proxy); a connection that opened before
 * any connevents watcher existed and never sent a byte afterwards has no known peer address at its
 * close (rip=unknown rport=0); clsid is the memcached slab class of the item's size.
 */
#ifndef SF_PROTO_MEMCACHE_WATCH_H
#define SF_PROTO_MEMCACHE_WATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"
#include "util/perloop.h"

/* memcached's LOG_* watcher flags (logger.h), same bits. */
#define MC_LOG_SYSEVENTS   (1u << 1)
#define MC_LOG_FETCHERS    (1u << 2)
#define MC_LOG_MUTATIONS   (1u << 3)
#define MC_LOG_CONNEVENTS  (1u << 5)
#define MC_LOG_EVICTIONS   (1u << 6)
#define MC_LOG_RAWCMDS     (1u << 9)
#define MC_LOG_PROXYREQS   (1u << 10)
#define MC_LOG_PROXYEVENTS (1u << 11)
#define MC_LOG_PROXYUSER   (1u << 12)

#define MC_WATCHERS_MAX     20  /* memcached's WATCHER_LIMIT */
#define MC_WATCH_RING_SLOTS 256 /* per loop: ~80 KiB; power of two */

/* The bytes of one loop's ring ("stats settings" worker_logbuf_size). */
size_t mc_watch_ring_bytes(void);

/* Why a connection closed: memcached's close_reasons (error, normal, idle_timeout, shutdown) as
 * conn_close lines name them, and ours, max_age (cache.memcached_max_connection_age_s); UNSET = the
 * protocol did not say (mc_watch_close then decides from the connection: the peer's EOF is normal,
 * a server drain is shutdown, anything else error). */
enum {
    MC_CLOSE_UNSET = 0,
    MC_CLOSE_ERROR,
    MC_CLOSE_NORMAL,
    MC_CLOSE_IDLE_TIMEOUT,
    MC_CLOSE_SHUTDOWN,
    MC_CLOSE_MAX_AGE
};

/* The watch state of one memcache_server. */
typedef struct mc_watch {
    _Atomic uint32_t flags;         /* what the live watchers want: the hot path's only check */
    _Atomic uint64_t gid;           /* memcached's global log id, one per line written */
    perloop rings;                  /* mc_watch_ring, one per loop */
    pthread_mutex_t mu;             /* want[] and count: adds and removals of watchers only */
    uint32_t want[MC_WATCHERS_MAX]; /* each watcher's flags, 0 = free slot */
    _Atomic unsigned count;         /* live watchers ("stats": log_watchers) */
    _Atomic uint64_t sent, skipped; /* lines written to / lost by watchers (log_watcher_*) */
    _Atomic uint64_t dropped;       /* events with no ring to go to (log_worker_dropped) */
} mc_watch;

/* "stats" figures, memcached's log_* names. */
typedef struct mc_watch_stats {
    uint64_t worker_dropped, worker_written, watcher_skipped, watcher_sent, watchers;
} mc_watch_stats;

struct mc_conn;
struct memcache_server;
typedef struct mc_tok mc_tok;

/* True when a watcher wants events of `flag` (one relaxed load: all that runs while nobody
 * watches). */
static inline bool mc_watching(const mc_watch *w, uint32_t flag)
{
    return (atomic_load_explicit(&w->flags, memory_order_relaxed) & flag) != 0;
}

/* memcache_server_new / _free (main thread). mc_watch_init: 0 or -1 (out of memory). */
int mc_watch_init(mc_watch *w, unsigned nloops);
void mc_watch_free(mc_watch *w);
void mc_watch_stats_get(const mc_watch *w, mc_watch_stats *out);

/* watch [<kind>...]: the command (t[0] is "watch"). `stacked`: replies of earlier commands of
 * this read are still unsent (memcached refuses to watch then). On success the connection is a
 * watcher (MC_WATCH): it gets "OK" and then only log lines; its input is ignored. */
void mc_watch_command(struct mc_conn *m, const mc_tok *t, size_t nt, bool stacked);

/* Connection lifecycle (mc_open, mc_data, mc_close). mc_watch_open also binds the thread to its
 * loop's ring for evictions. mc_watch_note_peer: remembers the peer's address for the close line
 * (called while connevents are watched). mc_watch_close: logs conn_close if watched and, for a
 * watcher, removes it. */
void mc_watch_open(struct mc_conn *m);
void mc_watch_note_peer(struct mc_conn *m);
void mc_watch_close(struct mc_conn *m);

/* item_get: a lookup by a command (get, gets, gat, gats, mg); `it` NULL for a miss. */
void mc_watch_get(struct mc_conn *m, const char *key, size_t klen, const cache_item *it);

/* What was under a key before a command changed it (memcached logs the lookup its writes make as
 * an item_get). */
typedef struct mc_watch_prior {
    bool found;
    uint32_t vlen, flags;
    uint64_t expiry_ms;
} mc_watch_prior;
/* Looks the key up without side effects and, when fetchers are watched, logs it as item_get;
 * fills *prior (found false on a miss). For storage commands and delete, incr, decr, touch. */
void mc_watch_peek(struct mc_conn *m, const char *key, size_t klen, uint64_t now,
                   mc_watch_prior *prior);

/* item_store: the result of a storage command (a cache_result) under `mode`, for an item of
 * vlen bytes, client flags and expiry; `prior` from mc_watch_peek (append/prepend report the
 * joined size and the old item's flags and expiry, as memcached's new item has them). */
void mc_watch_store(struct mc_conn *m, const char *key, size_t klen, int result, cache_mode mode,
                    uint32_t vlen, uint32_t flags, uint64_t expiry_ms, const mc_watch_prior *prior,
                    uint64_t now);

/* The store's eviction hook (arg: the memcache_server). */
void mc_watch_evicted(void *arg, const cache_evicted *e);

#endif
