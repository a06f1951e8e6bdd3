/* memcached's watch, live logging: the contract, the formats and what differs from memcached are
 * in memcache_watch.h. This file has the per-loop rings (single writer, seqlock slots), the
 * producers the protocol calls, the watchers (one timer each, on the watcher's loop) and the
 * command. */
#include "proto/memcache_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <uv.h>

#include "net/conn.h"
#include "net/loop.h"
#include "proto/memcache_int.h"
#include "util/counter.h"

#define WATCH_TICK_MIN_MS 1    /* a watcher's timer while lines come (memcached's logger: 1 ms) */
#define WATCH_TICK_MAX_MS 100  /* ... backing off to this while none do */
#define WATCH_LINE_MAX    4096 /* memcached's LOGGER_PARSE_SCRATCH */
#define WATCH_SKIP_MAX    128  /* a "skipped=N" line */
/* memcached's tokenizer stops at 23 tokens (the rest of a longer line is one more token that
 * process_watch_command does not look at). */
#define WATCH_TOKENS 23

_Static_assert((MC_WATCH_RING_SLOTS & (MC_WATCH_RING_SLOTS - 1)) == 0, "a power of two");

/* ---- events and rings ------------------------------------------------------------------------ */

typedef enum { EV_ITEM_GET = 1, EV_ITEM_STORE, EV_EVICTION, EV_CONN_NEW, EV_CONN_CLOSE } ev_type;

/* One event as a ring slot holds it: what its line needs, rendered only by the watchers. */
typedef struct ev {
    uint64_t gid;
    int64_t sec;
    int32_t usec;
    uint8_t type;    /* ev_type */
    uint8_t status;  /* item_get: 1 found; item_store: memcached's store_item_type; conn_close:
                      * MC_CLOSE_* */
    uint8_t cmd;     /* item_store: memcached's NREAD_* */
    uint8_t fetched; /* eviction */
    int32_t cfd;
    uint32_t clsid;
    uint32_t size; /* value bytes */
    int32_t la;    /* eviction: seconds since the last access */
    int64_t ttl;   /* item_store: seconds left, 0 = none; eviction: seconds left, -1 = none */
    uint16_t rport;
    uint8_t family; /* conn events: AF_INET, AF_INET6, 0 = unknown */
    uint8_t klen;
    uint8_t pad[4];
    union {
        char key[CACHE_KEY_MAX];
        uint8_t ip[16];
    } u;
} ev;

#define EV_WORDS      (sizeof(ev) / 8)
#define EV_HEAD_WORDS (offsetof(ev, u) / 8)
_Static_assert(sizeof(ev) % 8 == 0 && offsetof(ev, u) % 8 == 0, "events copy as whole words");
_Static_assert(EV_HEAD_WORDS + (255 + 7) / 8 <= EV_WORDS, "any klen stays inside a slot");

/* A slot is a seqlock: stamp 2i+1 while event i is written, 2i+2 once complete. The payload is
 * relaxed atomic words so that a reader racing the writer is defined behaviour; the stamps tell
 * it whether what it copied is whole. */
typedef struct slot {
    _Atomic uint64_t stamp;
    _Atomic uint64_t w[EV_WORDS];
} slot;

size_t mc_watch_ring_bytes(void)
{
    return MC_WATCH_RING_SLOTS * sizeof(slot);
}

typedef struct mc_watch_ring {
    _Atomic uint64_t head;    /* events written so far: the next one's index */
    _Atomic uint64_t written; /* the same, as a counter ("stats" log_worker_written) */
    slot slots[MC_WATCH_RING_SLOTS];
} mc_watch_ring;

static size_t ev_words(const ev *e)
{
    size_t body = e->type == EV_CONN_NEW || e->type == EV_CONN_CLOSE ? sizeof e->u.ip : e->klen;
    return EV_HEAD_WORDS + (body + 7) / 8;
}

static uint32_t ev_flag(unsigned type)
{
    switch (type) {
    case EV_ITEM_GET: return MC_LOG_FETCHERS;
    case EV_ITEM_STORE: return MC_LOG_MUTATIONS;
    case EV_EVICTION: return MC_LOG_EVICTIONS;
    default: return MC_LOG_CONNEVENTS;
    }
}

/* The ring's only writer (its loop's thread): stamps the event and publishes it, overwriting the
 * oldest. Never waits. */
static void ring_put(mc_watch *w, mc_watch_ring *r, ev *e)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e->sec = (int64_t)ts.tv_sec;
    e->usec = (int32_t)(ts.tv_nsec / 1000);
    e->gid = atomic_fetch_add_explicit(&w->gid, 1, memory_order_relaxed) + 1;
    uint64_t words[EV_WORDS];
    size_t n = ev_words(e);
    memcpy(words, e, n * 8);
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    slot *s = &r->slots[h & (MC_WATCH_RING_SLOTS - 1)];
    /* Seqlock without fences (which ThreadSanitizer cannot model): the data words are release
     * stores and the reader's are acquire loads, so a reader that sees any word of this write
     * also sees the odd stamp before it, and its second stamp check fails. Plain moves on x86. */
    atomic_store_explicit(&s->stamp, 2 * h + 1, memory_order_relaxed);
    for (size_t i = 0; i < n; i++)
        atomic_store_explicit(&s->w[i], words[i], memory_order_release);
    atomic_store_explicit(&s->stamp, 2 * h + 2, memory_order_release);
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    counter_add(&r->written, 1);
}

/* Event i (< head) into *e: 1, or -1 when it was overwritten (before or while it was read), or
 * 0 when its writer has not finished it (read again later). */
static int ring_get(mc_watch_ring *r, uint64_t i, ev *e)
{
    slot *s = &r->slots[i & (MC_WATCH_RING_SLOTS - 1)];
    uint64_t want = 2 * i + 2;
    uint64_t s1 = atomic_load_explicit(&s->stamp, memory_order_acquire);
    if (s1 != want)
        return s1 < want ? 0 : -1;
    uint64_t words[EV_WORDS];
    for (size_t k = 0; k < EV_HEAD_WORDS; k++)
        words[k] = atomic_load_explicit(&s->w[k], memory_order_acquire);
    memcpy(e, words, EV_HEAD_WORDS * 8);
    size_t n = ev_words(e); /* from a possibly torn header: bounded all the same (asserted) */
    for (size_t k = EV_HEAD_WORDS; k < n; k++)
        words[k] = atomic_load_explicit(&s->w[k], memory_order_acquire);
    if (atomic_load_explicit(&s->stamp, memory_order_relaxed) != s1)
        return -1;
    memcpy(e, words, n * 8);
    return 1;
}

/* The thread's loop ring for events that come without a connection (the store's eviction hook):
 * bound when the thread opens a memcached connection (mc_watch_open). */
static _Thread_local const memcache_server *tl_srv;
static _Thread_local unsigned tl_loop;

static mc_watch_ring *ring_of(mc_conn *m)
{
    return perloop_at(&m->srv->watch.rings, conn_loop(m->c)->index);
}

/* ---- lifecycle and stats --------------------------------------------------------------------- */

int mc_watch_init(mc_watch *w, unsigned nloops)
{
    memset(w, 0, sizeof *w);
    if (perloop_init(&w->rings, nloops, sizeof(mc_watch_ring)) != 0)
        return -1;
    pthread_mutex_init(&w->mu, NULL);
    return 0;
}

void mc_watch_free(mc_watch *w)
{
    if (!w->rings.base)
        return;
    perloop_free(&w->rings);
    pthread_mutex_destroy(&w->mu);
}

void mc_watch_stats_get(const mc_watch *w, mc_watch_stats *out)
{
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < perloop_count(&w->rings); i++)
        out->worker_written +=
            counter_get(&((const mc_watch_ring *)perloop_at(&w->rings, i))->written);
    out->worker_dropped = atomic_load_explicit(&w->dropped, memory_order_relaxed);
    out->watcher_skipped = atomic_load_explicit(&w->skipped, memory_order_relaxed);
    out->watcher_sent = atomic_load_explicit(&w->sent, memory_order_relaxed);
    out->watchers = atomic_load_explicit(&w->count, memory_order_relaxed);
}

/* ---- producers ------------------------------------------------------------------------------- */

static void ev_key(ev *e, const char *key, size_t klen)
{
    e->klen = (uint8_t)(klen > CACHE_KEY_MAX ? CACHE_KEY_MAX : klen);
    memcpy(e->u.key, key, e->klen);
}

void mc_watch_get(mc_conn *m, const char *key, size_t klen, const cache_item *it)
{
    ev e = {.type = EV_ITEM_GET, .cfd = m->cfd};
    ev_key(&e, key, klen);
    if (it) {
        e.status = 1;
        e.size = (uint32_t)cache_item_vlen(it);
        e.clsid = mc_slab_clsid(m->srv, klen, e.size, cache_item_flags(it));
    }
    ring_put(&m->srv->watch, ring_of(m), &e);
}

void mc_watch_peek(mc_conn *m, const char *key, size_t klen, uint64_t now, mc_watch_prior *prior)
{
    memset(prior, 0, sizeof *prior);
    if (klen == 0 || klen > CACHE_KEY_MAX)
        return;
    /* No bump, no counters, no token: the lookup memcached's write makes changes nothing. */
    cache_get_opts o = {.no_bump = true, .no_token = true, .count = CACHE_COUNT_NONE};
    cache_item_meta h;
    cache_item *it = cache_get_meta(m->srv->store, key, klen, &o, &h, now);
    if (it) {
        prior->found = true;
        prior->vlen = (uint32_t)cache_item_vlen(it);
        prior->flags = cache_item_flags(it);
        prior->expiry_ms = cache_item_expiry(it);
    }
    if (mc_watching(&m->srv->watch, MC_LOG_FETCHERS))
        mc_watch_get(m, key, klen, it);
    cache_item_release(it);
}

/* Seconds from now to an expiry, rounded up (memcached's relative times are whole seconds). */
static int64_t secs_left(uint64_t expiry_ms, uint64_t now)
{
    int64_t d = (int64_t)(expiry_ms - now);
    return d > 0 ? (d + 999) / 1000 : d / 1000;
}

void mc_watch_store(mc_conn *m, const char *key, size_t klen, int result, cache_mode mode,
                    uint32_t vlen, uint32_t flags, uint64_t expiry_ms, const mc_watch_prior *prior,
                    uint64_t now)
{
    /* memcached's store_item_type and NREAD_* numbering */
    static const uint8_t cmd_of[] = {
        [CACHE_MODE_SET] = 2,      [CACHE_MODE_ADD] = 1,     [CACHE_MODE_REPLACE] = 3,
        [CACHE_MODE_APPEND] = 4,   [CACHE_MODE_PREPEND] = 5, [CACHE_MODE_CAS] = 6,
        [CACHE_MODE_CAS_STALE] = 6};
    ev e = {.type = EV_ITEM_STORE, .cfd = m->cfd};
    ev_key(&e, key, klen);
    switch (result) {
    case CACHE_NOT_STORED: e.status = 0; break;
    case CACHE_STORED: e.status = 1; break;
    case CACHE_EXISTS: e.status = 2; break;
    case CACHE_NOT_FOUND: e.status = 3; break;
    case CACHE_TOO_LARGE: e.status = 4; break;
    default: e.status = 5; break;
    }
    e.cmd = (unsigned)mode < sizeof cmd_of ? cmd_of[mode] : 0;
    bool joined =
        result == CACHE_STORED && (mode == CACHE_MODE_APPEND || mode == CACHE_MODE_PREPEND);
    if (joined && prior && prior->found) { /* memcached logs the joined item */
        vlen += prior->vlen;
        flags = prior->flags;
        expiry_ms = prior->expiry_ms;
    }
    if (vlen || result == CACHE_STORED) { /* a refused allocation logs no item (memcached) */
        e.size = vlen;
        e.clsid = mc_slab_clsid(m->srv, klen, vlen, flags);
        e.ttl = expiry_ms ? secs_left(expiry_ms, now) : 0;
    }
    ring_put(&m->srv->watch, ring_of(m), &e);
}

static void conn_event(mc_conn *m, ev_type type, uint8_t reason)
{
    ev e = {.type = (uint8_t)type, .cfd = m->cfd, .status = reason};
    if (m->peer_known) {
        const struct sockaddr *sa = (const void *)m->peer_addr;
        if (sa->sa_family == AF_INET) {
            const struct sockaddr_in *a = (const void *)m->peer_addr;
            e.family = AF_INET;
            e.rport = ntohs(a->sin_port);
            memcpy(e.u.ip, &a->sin_addr, 4);
        } else if (sa->sa_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const void *)m->peer_addr;
            e.family = AF_INET6;
            e.rport = ntohs(a->sin6_port);
            memcpy(e.u.ip, &a->sin6_addr, 16);
        }
    }
    ring_put(&m->srv->watch, ring_of(m), &e);
}

void mc_watch_note_peer(mc_conn *m)
{
    _Static_assert(sizeof m->peer_addr >= sizeof(struct sockaddr_in6), "room for IPv6");
    socklen_t len = sizeof m->peer_addr;
    m->peer_known = true; /* tried once: a failure leaves the address unknown */
    if (m->cfd < 0 || getpeername(m->cfd, (struct sockaddr *)m->peer_addr, &len) != 0)
        memset(m->peer_addr, 0, sizeof m->peer_addr);
}

void mc_watch_open(mc_conn *m)
{
    m->cfd = conn_fd(m->c);
    tl_srv = m->srv;
    tl_loop = conn_loop(m->c)->index;
    if (mc_watching(&m->srv->watch, MC_LOG_CONNEVENTS)) {
        mc_watch_note_peer(m);
        conn_event(m, EV_CONN_NEW, 0);
    }
}

void mc_watch_evicted(void *arg, const cache_evicted *x)
{
    memcache_server *s = arg;
    if (!mc_watching(&s->watch, MC_LOG_EVICTIONS))
        return;
    if (tl_srv != s) { /* a thread without a ring of this server's */
        atomic_fetch_add_explicit(&s->watch.dropped, 1, memory_order_relaxed);
        return;
    }
    uint64_t now = mc_now(s);
    ev e = {.type = EV_EVICTION, .fetched = x->fetched, .size = x->vlen, .cfd = -1};
    ev_key(&e, x->key, x->klen);
    e.clsid = mc_slab_clsid(s, x->klen, x->vlen, x->flags);
    e.ttl = x->expiry_ms ? secs_left(x->expiry_ms, now) : -1;
    e.la = (int32_t)(((uint32_t)(now / 1000) - x->atime_s) & ((UINT32_C(1) << 30) - 1));
    ring_put(&s->watch, perloop_at(&s->watch.rings, tl_loop), &e);
}

/* ---- watchers -------------------------------------------------------------------------------- */

typedef struct mc_watcher mc_watcher;

struct mc_watcher {
    uv_timer_t timer; /* on the watcher's loop; owns this object (freed in its close callback) */
    memcache_server *srv;
    conn *c;
    uint32_t want;  /* MC_LOG_* */
    unsigned index; /* in srv->watch.want[] */
    unsigned tick_ms, tick_max_ms;
    uint64_t skipped; /* lines lost since the last one written */
    unsigned nloops;
    uint64_t cursor[]; /* per loop ring: the next event to read */
};

/* Under watch.mu: what the live watchers want, published to the hot paths; the store's eviction
 * hook is on only while someone watches evictions. */
static void publish_flags(memcache_server *s)
{
    uint32_t f = 0;
    for (unsigned i = 0; i < MC_WATCHERS_MAX; i++)
        f |= s->watch.want[i];
    atomic_store_explicit(&s->watch.flags, f, memory_order_release);
    cache_store_set_evict_hook(s->store, (f & MC_LOG_EVICTIONS) ? mc_watch_evicted : NULL, s);
}

/* memcached's logger line formats (logger.c _logger_parse_*). Returns the length, 0 if it does
 * not fit. */
static size_t format(const memcache_server *s, const ev *e, char *out, size_t cap)
{
    static const char *const store_status[] = {"not_stored", "stored",    "exists",
                                               "not_found",  "too_large", "no_memory"};
    static const char *const cmds[] = {"null", "add", "set", "replace", "append", "prepend", "cas"};
    static const char *const reasons[] = {"error", "normal", "idle_timeout", "shutdown", "max_age"};
    char key[3 * CACHE_KEY_MAX + 1];
    long long sec = (long long)e->sec;
    int usec = (int)e->usec;
    unsigned long long gid = (unsigned long long)e->gid;
    int n = 0;
    (void)s;
    switch (e->type) {
    case EV_ITEM_GET:
        mc_uri_encode(e->u.key, e->klen, key);
        n = snprintf(out, cap,
                     "ts=%lld.%d gid=%llu type=item_get key=%s status=%s clsid=%u cfd=%d size=%d\n",
                     sec, usec, gid, key, e->status ? "found" : "not_found", e->clsid, e->cfd,
                     (int)e->size);
        break;
    case EV_ITEM_STORE:
        mc_uri_encode(e->u.key, e->klen, key);
        n = snprintf(out, cap,
                     "ts=%lld.%d gid=%llu type=item_store key=%s status=%s cmd=%s ttl=%u clsid=%u "
                     "cfd=%d size=%d\n",
                     sec, usec, gid, key, store_status[e->status < 6 ? e->status : 5],
                     cmds[e->cmd < 7 ? e->cmd : 0], (unsigned)e->ttl, e->clsid, e->cfd,
                     (int)e->size);
        break;
    case EV_EVICTION:
        mc_uri_encode(e->u.key, e->klen, key);
        n = snprintf(out, cap,
                     "ts=%lld.%d gid=%llu type=eviction key=%s fetch=%s ttl=%lld la=%d clsid=%u "
                     "size=%d\n",
                     sec, usec, gid, key, e->fetched ? "yes" : "no", (long long)e->ttl, e->la,
                     e->clsid, (int)e->size);
        break;
    case EV_CONN_NEW:
    case EV_CONN_CLOSE: {
        char ip[INET6_ADDRSTRLEN] = "unknown";
        if (e->family == AF_INET || e->family == AF_INET6)
            inet_ntop(e->family, e->u.ip, ip, sizeof ip);
        unsigned r = e->status >= MC_CLOSE_ERROR && e->status <= MC_CLOSE_MAX_AGE
                         ? e->status - MC_CLOSE_ERROR
                         : 0;
        if (e->type == EV_CONN_NEW)
            n = snprintf(
                out, cap,
                "ts=%lld.%d gid=%llu type=conn_new rip=%s rport=%hu transport=tcp cfd=%d\n", sec,
                usec, gid, ip, e->rport, e->cfd);
        else
            n = snprintf(out, cap,
                         "ts=%lld.%d gid=%llu type=conn_close rip=%s rport=%hu transport=tcp "
                         "reason=%s cfd=%d\n",
                         sec, usec, gid, ip, e->rport, reasons[r], e->cfd);
        break;
    }
    default: break;
    }
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static void lost(mc_watcher *wt, uint64_t n)
{
    wt->skipped += n;
    atomic_fetch_add_explicit(&wt->srv->watch.skipped, n, memory_order_relaxed);
}

/* One event this watcher wants: its line, after a "skipped=N" line if lines were lost. Above the
 * output's high-water mark the line is lost too (memcached: the watcher's buffer is full). */
static void emit(mc_watcher *wt, const ev *e)
{
    conn *c = wt->c;
    if (conn_closing(c) || conn_output_full(c)) {
        lost(wt, 1);
        return;
    }
    char line[WATCH_SKIP_MAX + WATCH_LINE_MAX];
    size_t n = 0;
    if (wt->skipped) {
        int k = snprintf(line, WATCH_SKIP_MAX, "skipped=%llu\n", (unsigned long long)wt->skipped);
        n = k > 0 && k < WATCH_SKIP_MAX ? (size_t)k : 0;
    }
    size_t body = format(wt->srv, e, line + n, WATCH_LINE_MAX);
    if (!body) {
        lost(wt, 1);
        return;
    }
    wt->skipped = 0;
    conn_write(c, line, n + body);
    atomic_fetch_add_explicit(&wt->srv->watch.sent, 1, memory_order_relaxed);
}

/* Reads one loop's ring from this watcher's cursor. Returns whether there was anything. */
static bool drain_ring(mc_watcher *wt, mc_watch_ring *r, uint64_t *cur)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    if (*cur == head)
        return false;
    if (head - *cur > MC_WATCH_RING_SLOTS) { /* lapped: the oldest are gone */
        lost(wt, head - MC_WATCH_RING_SLOTS - *cur);
        *cur = head - MC_WATCH_RING_SLOTS;
    }
    for (; *cur < head; (*cur)++) {
        ev e;
        int got = ring_get(r, *cur, &e);
        if (got == 0)
            break; /* still being written: next tick */
        if (got < 0) {
            lost(wt, 1);
            continue;
        }
        if (ev_flag(e.type) & wt->want)
            emit(wt, &e);
    }
    return true;
}

static void watcher_tick(uv_timer_t *t)
{
    mc_watcher *wt = t->data;
    conn *c = wt->c;
    bool busy = false;
    for (unsigned i = 0; i < wt->nloops; i++)
        busy |= drain_ring(wt, perloop_at(&wt->srv->watch.rings, i), &wt->cursor[i]);
    conn_flush_out(c);
    if (conn_phase_of(c) == CONN_OPEN) {
        /* memcached never times a watcher out, whether it is quiet or does not read: keep the
         * connection's deadline ahead of us (a cheap update while the timer is armed). */
        conn_set_timeout(c, c->inflight ? CONN_TIMEOUT_WRITE : CONN_TIMEOUT_IDLE);
    }
    wt->tick_ms = busy ? WATCH_TICK_MIN_MS
                       : (wt->tick_ms * 2 > wt->tick_max_ms ? wt->tick_max_ms : wt->tick_ms * 2);
    uv_timer_start(&wt->timer, watcher_tick, wt->tick_ms, 0);
}

static void watcher_free(uv_handle_t *h)
{
    free(h->data);
}

typedef enum { ATTACH_OK, ATTACH_TOO_MANY, ATTACH_FAILED } attach_result;

static attach_result attach(mc_conn *m, uint32_t want)
{
    memcache_server *s = m->srv;
    mc_watch *w = &s->watch;
    unsigned nloops = perloop_count(&w->rings);
    mc_watcher *wt = calloc(1, sizeof *wt + nloops * sizeof wt->cursor[0]);
    if (!wt)
        return ATTACH_FAILED;
    pthread_mutex_lock(&w->mu);
    unsigned i = 0;
    while (i < MC_WATCHERS_MAX && w->want[i])
        i++;
    if (i == MC_WATCHERS_MAX) {
        pthread_mutex_unlock(&w->mu);
        free(wt);
        return ATTACH_TOO_MANY;
    }
    /* Only what happens from now on (memcached's min_gid): cursors at the heads, then the flags
     * that make producers write. */
    for (unsigned k = 0; k < nloops; k++)
        wt->cursor[k] = atomic_load_explicit(&((mc_watch_ring *)perloop_at(&w->rings, k))->head,
                                             memory_order_acquire);
    w->want[i] = want;
    atomic_fetch_add_explicit(&w->count, 1, memory_order_relaxed);
    publish_flags(s);
    pthread_mutex_unlock(&w->mu);

    wt->srv = s;
    wt->c = m->c;
    wt->want = want;
    wt->index = i;
    wt->nloops = nloops;
    /* Back off no further than half the idle timeout: each tick keeps the connection alive. */
    uint32_t idle = conn_loop(m->c)->server->cfg.idle_timeout_ms;
    wt->tick_max_ms = idle / 2 < WATCH_TICK_MAX_MS ? (idle / 2 ? idle / 2 : 1) : WATCH_TICK_MAX_MS;
    wt->tick_ms = WATCH_TICK_MIN_MS;
    uv_timer_init(&conn_loop(m->c)->uv, &wt->timer);
    wt->timer.data = wt;
    uv_timer_start(&wt->timer, watcher_tick, wt->tick_ms, 0);
    m->watcher = wt;
    return ATTACH_OK;
}

static void detach(mc_conn *m)
{
    mc_watcher *wt = m->watcher;
    mc_watch *w = &m->srv->watch;
    m->watcher = NULL;
    pthread_mutex_lock(&w->mu);
    w->want[wt->index] = 0;
    atomic_fetch_sub_explicit(&w->count, 1, memory_order_relaxed);
    publish_flags(m->srv);
    pthread_mutex_unlock(&w->mu);
    uv_close((uv_handle_t *)&wt->timer, watcher_free);
}

void mc_watch_close(mc_conn *m)
{
    if (m->watcher)
        detach(m);
    if (!mc_watching(&m->srv->watch, MC_LOG_CONNEVENTS))
        return;
    uint8_t reason = m->close_reason;
    if (reason == MC_CLOSE_UNSET)
        reason = (m->c->flags & CONN_PEER_EOF) ? MC_CLOSE_NORMAL
                 : conn_draining(m->c)         ? MC_CLOSE_SHUTDOWN
                                               : MC_CLOSE_ERROR;
    conn_event(m, EV_CONN_CLOSE, reason);
}

/* ---- the command ----------------------------------------------------------------------------- */

static uint32_t kind_flag(const mc_tok *t)
{
    static const struct {
        const char *name;
        uint32_t flag;
    } kinds[] = {{"rawcmds", MC_LOG_RAWCMDS},     {"evictions", MC_LOG_EVICTIONS},
                 {"fetchers", MC_LOG_FETCHERS},   {"mutations", MC_LOG_MUTATIONS},
                 {"sysevents", MC_LOG_SYSEVENTS}, {"connevents", MC_LOG_CONNEVENTS},
                 {"proxyreqs", MC_LOG_PROXYREQS}, {"proxyevents", MC_LOG_PROXYEVENTS},
                 {"proxyuser", MC_LOG_PROXYUSER}};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (tok_is(t, kinds[i].name))
            return kinds[i].flag;
    return 0;
}

/* memcached's process_watch_command: -W first, then the pipelining rule, then the arguments (a
 * trailing "noreply" silences the errors: it is no kind of event, so it is one). */
void mc_watch_command(mc_conn *m, const mc_tok *t, size_t nt, bool stacked)
{
    size_t n = nt > WATCH_TOKENS ? WATCH_TOKENS : nt;
    m->noreply = last_is_noreply(t, n);
    if (!m->srv->opts.watch_enabled) {
        OUT(m, "CLIENT_ERROR watch commands not allowed");
        return;
    }
    if (stacked) {
        OUT(m, "ERROR cannot pipeline other commands before watch");
        return;
    }
    uint32_t want = n > 1 ? 0 : MC_LOG_FETCHERS;
    for (size_t i = 1; i < n; i++) {
        uint32_t f = kind_flag(&t[i]);
        if (!f) {
            OUT(m, "ERROR");
            return;
        }
        want |= f;
    }
    switch (attach(m, want)) {
    case ATTACH_TOO_MANY: OUT(m, "WATCHER_TOO_MANY log watcher limit reached"); return;
    case ATTACH_FAILED: OUT(m, "WATCHER_FAILED failed to add log watcher"); return;
    case ATTACH_OK: break;
    }
    m->state = MC_WATCH;
    conn_write(m->c, "OK\r\n", 4);
    conn_set_timeout(m->c, CONN_TIMEOUT_IDLE);
}
