/* The memcached protocol's operators' commands (memcache_int.h lists the entry points), byte-exact
 * with memcached 1.6.18's proto_text.c (process_shutdown_command, process_slabs_command,
 * process_lru_command, process_memlimit_command, process_debugtime_command,
 * process_lru_crawler_command), checked against the real one in test_memcache_diff.py.
 *
 * What we answer without memcached's machinery behind it:
 *  - slabs: our slab pages are not memcached's (slab.h: 64 KiB, an empty one goes back to a pool
 *    every class takes from), so there is nothing to move by hand. "slabs reassign"
 *    validates as memcached and then answers what memcached answers when the source class has
 *    no spare page (NOSPARE); "slabs automove" is accepted and only reported.
 *  - lru tune|mode|temp_ttl: validated and accepted, but the values change nothing: the store's
 *    segments (HOT/WARM/COLD/TEMP, store.h) keep memcached's default tuning, and whether they
 *    exist and the temporary TTL are set at start (cache.lru_segmented,
 *    cache.memcached_temporary_ttl_s).
 *  - lru_crawler crawl: a walk of the whole store that unlinks what has expired (the loops'
 *    sweep does the same a little at a time); metadump: one line per live item. Both run on the
 *    requesting connection in bounded slices across loop turns (cache_store_scan), one walk at a
 *    time per server (BUSY as memcached); commands pipelined behind them wait for the end. A
 *    crawl of some classes walks the whole store all the same (expired items of any size go). A
 *    metadump line's "la" is the walk's time and "fetch" is "no" (the item's history is not read
 *    here yet), "size" is the item's accounted size and "cls" the memcached size class the
 *    store counts it in (cache_item_class: the same as stats items and me).
 *  - debugtime (memcached-debug only, behind memcache_options.debug_commands): moves this
 *    listener's clock (mc_now), which expiry is computed and checked against; HTTP keeps the
 *    system clock, so an item set here with a relative exptime may expire at a different moment
 *    for HTTP readers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/memcache_int.h"
#include "util/clock.h"

/* ---- time ------------------------------------------------------------------------------------ */

uint64_t mc_debug_now(const memcache_server *s)
{
    uint64_t paused = atomic_load_explicit(&s->admin.clock_paused, memory_order_relaxed);
    if (paused)
        return paused;
    int64_t off = atomic_load_explicit(&s->admin.clock_offset_ms, memory_order_relaxed);
    return clk_now(clk_system()) + (uint64_t)off;
}

/* debugtime <seconds>|p|r: the whole command line is accepted only with debug commands on
 * (dispatch answers ERROR otherwise, as a release build). */
void mc_admin_debugtime(mc_conn *m, const mc_tok *t, size_t nt)
{
    mc_admin *a = &m->srv->admin;
    if (nt >= 2 && tok_is(&t[1], "p")) {
        uint64_t now = mc_now(m->srv);
        uint64_t none = 0;
        atomic_compare_exchange_strong(&a->clock_paused, &none, now ? now : 1);
    } else if (nt >= 2 && tok_is(&t[1], "r")) {
        atomic_store(&a->clock_paused, 0);
    } else {
        int64_t delta;
        /* safe_strtoll: int64; a delta beyond a century is refused (it would wrap the clock) */
        if (nt < 2 || !mc_parse_i32(&t[1], &delta)) {
            conn_write(m->c, "ERROR\r\n", 7);
            return;
        }
        atomic_fetch_add(&a->clock_offset_ms, delta * 1000);
    }
    m->clock_moved = true;
    conn_write(m->c, "OK\r\n", 4);
}

/* ---- shutdown -------------------------------------------------------------------------------- */

void mc_admin_shutdown(mc_conn *m, const mc_tok *t, size_t nt)
{
    const memcache_options *o = &m->srv->opts;
    if (!o->shutdown_enabled) {
        conn_write(m->c, "ERROR: shutdown not enabled\r\n", 29);
        return;
    }
    bool graceful;
    if (nt == 1)
        graceful = false;
    else if (nt == 2 && tok_is(&t[1], "graceful"))
        graceful = true;
    else {
        conn_write(m->c, "CLIENT_ERROR invalid shutdown mode\r\n", 36);
        return;
    }
    conn_close(m->c); /* memcached closes the asking connection without a reply */
    if (o->shutdown)
        o->shutdown(o->shutdown_arg, graceful);
}

/* ---- refresh_certs ------------------------------------------------------------------------- */

/* memcached 1.6.18's process_refresh_certs_command: "OK", or load_server_certificates' error line
 * ("Error TLS not enabled" without TLS). "noreply" as the last token silences the "OK" only:
 * memcached writes the error line with write_and_free, which does not look at noreply. Any
 * arguments are ignored, as there. The reload reads the certificate files on this loop thread
 * (memcached does the same on its worker); it is an operator's command, not the request path. */
void mc_admin_refresh_certs(mc_conn *m, const mc_tok *t, size_t nt)
{
    const memcache_options *o = &m->srv->opts;
    m->noreply = last_is_noreply(t, nt);
    static const char not_enabled[] = "Error TLS not enabled\r\n";
    char reply[1024 + 512];
    if (!o->refresh_certs) {
        conn_write(m->c, not_enabled, sizeof not_enabled - 1);
        return;
    }
    if (o->refresh_certs(o->refresh_certs_arg, reply, sizeof reply) == 0) {
        out(m, "OK\r\n", 4);
        return;
    }
    conn_write(m->c, reply, strlen(reply));
}

/* ---- slabs ----------------------------------------------------------------------------------- */

/* The classes are memcached's, as the store counts items in them (cache_item_class:
 * "stats items", "stats slabs", "me" and metadump all name the same class for an item). */
static unsigned largest_class(const memcache_server *s)
{
    return cache_store_size_classes(s->store);
}

unsigned mc_slab_clsid(const memcache_server *s, size_t klen, size_t vlen, uint32_t flags)
{
    return cache_store_size_class(s->store, cache_mc_item_size(klen, vlen, flags));
}

/* memcached's safe_strtod: a number, then the end or white space. */
static bool parse_double(const mc_tok *t, double *out_v)
{
    char buf[64];
    if (t->n == 0 || t->n >= sizeof buf)
        return false;
    memcpy(buf, t->p, t->n);
    buf[t->n] = '\0';
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (errno == ERANGE || end == buf || (*end && *end != ' ' && (*end < '\t' || *end > '\r')))
        return false;
    *out_v = v;
    return true;
}

void mc_admin_set_ratio(mc_admin *a, double ratio)
{
    uint64_t bits;
    memcpy(&bits, &ratio, sizeof bits);
    atomic_store_explicit(&a->automove_ratio, bits, memory_order_relaxed);
}

double mc_admin_ratio(const mc_admin *a)
{
    uint64_t bits = atomic_load_explicit(&a->automove_ratio, memory_order_relaxed);
    double ratio;
    memcpy(&ratio, &bits, sizeof ratio);
    return ratio;
}

static void slabs_automove(mc_conn *m, const mc_tok *t, size_t nt)
{
    m->noreply = last_is_noreply(t, nt);
    if (tok_is(&t[2], "ratio")) {
        double ratio;
        if (nt < 4 || !parse_double(&t[3], &ratio)) {
            OUT(m, "ERROR");
            return;
        }
        mc_admin_set_ratio(&m->srv->admin, ratio);
        OUT(m, "OK");
        return;
    }
    uint32_t level;
    if (!mc_parse_u32(&t[2], &level)) {
        OUT(m, "CLIENT_ERROR bad command line format");
        return;
    }
    if (level > 2) {
        OUT(m, "ERROR");
        return;
    }
    atomic_store(&m->srv->admin.slab_automove, level);
    OUT(m, "OK");
}

void mc_admin_slabs(mc_conn *m, const mc_tok *t, size_t nt)
{
    if (nt == 4 && tok_is(&t[1], "reassign")) {
        int64_t src, dst;
        if (!mc_parse_i32(&t[2], &src) || !mc_parse_i32(&t[3], &dst)) {
            OUT(m, "CLIENT_ERROR bad command line format");
            return;
        }
        int64_t largest = largest_class(m->srv);
        if (src == dst)
            OUT(m, "SAME src and dst class are identical");
        else if (src < 0 || src > largest || dst < 0 || dst > largest)
            OUT(m, "BADCLASS invalid src or dst class id"); /* -1 ("any"): none has a spare page */
        else
            OUT(m, "NOSPARE source class has no spare pages"); /* there are no pages to move */
    } else if (nt >= 3 && tok_is(&t[1], "automove")) {
        slabs_automove(m, t, nt);
    } else {
        OUT(m, "ERROR");
    }
}

/* ---- lru ------------------------------------------------------------------------------------- */

void mc_admin_lru(mc_conn *m, const mc_tok *t, size_t nt)
{
    if (nt < 2) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    m->noreply = last_is_noreply(t, nt);
    if (tok_is(&t[1], "tune") && nt >= 6) {
        uint32_t hot, warm;
        double hot_factor, factor;
        if (!mc_parse_u32(&t[2], &hot) || !mc_parse_u32(&t[3], &warm) ||
            !parse_double(&t[4], &hot_factor) || !parse_double(&t[5], &factor))
            OUT(m, "ERROR");
        else if ((uint32_t)(hot + warm) > 80) /* memcached adds in 32 bits */
            OUT(m, "ERROR hot and warm pcts must not exceed 80");
        else if (factor <= 0 || hot_factor <= 0)
            OUT(m, "ERROR hot/warm age factors must be greater than 0");
        else
            OUT(m, "OK");
    } else if (tok_is(&t[1], "mode") && nt >= 3) {
        if (tok_is(&t[2], "flat") || tok_is(&t[2], "segmented"))
            OUT(m, "OK");
        else
            OUT(m, "ERROR");
    } else if (tok_is(&t[1], "temp_ttl") && nt >= 3) {
        int64_t ttl;
        if (!mc_parse_i32(&t[2], &ttl))
            OUT(m, "ERROR");
        else
            OUT(m, "OK");
    } else {
        OUT(m, "ERROR");
    }
}

/* ---- cache_memlimit -------------------------------------------------------------------------- */

void mc_admin_memlimit(mc_conn *m, const mc_tok *t, size_t nt)
{
    if (nt != 2 && nt != 3) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    m->noreply = last_is_noreply(t, nt);
    if (!m->srv->opts.memlimit_enabled) { /* memcached has no switch for it: as flush_all's -F */
        OUT(m, "CLIENT_ERROR cache_memlimit not allowed");
        return;
    }
    uint32_t mib;
    if (!mc_parse_u32(&t[1], &mib))
        OUT(m, "ERROR");
    else if (mib < 8)
        OUT(m, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m");
    else if (mib > 1000000000)
        OUT(m, "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes");
    else {
        cache_store_set_memory_limit(m->srv->store, (uint64_t)mib << 20);
        OUT(m, "OK");
    }
}

/* ---- lru_crawler ----------------------------------------------------------------------------- */

#define WALK_SLICE       64 /* items referenced per cache_store_scan call */
#define WALK_SLICES_TURN 16 /* scans per loop turn: ~1000 items, then the loop serves others */

size_t mc_uri_encode(const char *src, size_t n, char *dst)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)src[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '.' || ch == '_' || ch == '~') {
            dst[d++] = (char)ch;
        } else {
            dst[d++] = '%';
            dst[d++] = hex[ch >> 4];
            dst[d++] = hex[ch & 15];
        }
    }
    dst[d] = '\0';
    return d;
}

typedef enum { CLASSES_OK, CLASSES_BAD, CLASSES_NONE, CLASSES_HASH } classes_result;

/* "all", "hash" or a comma-separated list of class ids 1..63 (memcached's strtok_r: empty
 * elements are skipped; a list of none starts nothing). */
static classes_result parse_classes(const mc_tok *t, uint64_t *mask)
{
    *mask = 0;
    if (tok_is(t, "all")) {
        *mask = UINT64_MAX;
        return CLASSES_OK;
    }
    if (tok_is(t, "hash"))
        return CLASSES_HASH;
    size_t ids = 0;
    for (size_t i = 0, s = 0; i <= t->n; i++) {
        if (i < t->n && t->p[i] != ',')
            continue;
        if (i > s) {
            mc_tok e = {t->p + s, i - s};
            uint32_t id;
            if (!mc_parse_u32(&e, &id) || id < 1 || id >= 64)
                return CLASSES_BAD;
            *mask |= UINT64_C(1) << id;
            ids++;
        }
        s = i + 1;
    }
    return ids ? CLASSES_OK : CLASSES_NONE;
}

/* crawl (dump false) or metadump: the checks after the crawler's own, then the walk starts. */
static void walk_start(mc_conn *m, const mc_tok *classes, bool dump, uint64_t now)
{
    uint64_t mask;
    classes_result r = parse_classes(classes, &mask);
    if (r == CLASSES_HASH && !dump) { /* memcached walks the hash table for metadump only */
        conn_write(m->c, "ERROR an unknown error happened\r\n", 33);
        return;
    }
    if (r == CLASSES_BAD) {
        conn_write(m->c, "BADCLASS invalid class id\r\n", 27);
        return;
    }
    if (r == CLASSES_NONE) {
        conn_write(m->c, "NOTSTARTED no items to crawl\r\n", 30);
        return;
    }
    bool idle = false;
    if (!atomic_compare_exchange_strong(&m->srv->admin.walk_busy, &idle, true)) {
        conn_write(m->c, "BUSY currently processing crawler request\r\n", 43);
        return;
    }
    if (!dump) /* memcached answers a crawl at once and crawls in the background */
        conn_write(m->c, "OK\r\n", 4);
    m->state = MC_WALK;
    m->walk_dump = dump;
    m->walk_cursor = 0;
    m->walk_classes = r == CLASSES_HASH ? UINT64_MAX : mask;
    (void)now;
}

void mc_admin_lru_crawler(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    mc_admin *a = &m->srv->admin;
    bool enabled = atomic_load(&a->crawler_enabled);
    if (nt == 3 && tok_is(&t[1], "crawl")) {
        if (!enabled)
            conn_write(m->c, "CLIENT_ERROR lru crawler disabled\r\n", 35);
        else
            walk_start(m, &t[2], false, now);
    } else if (nt == 3 && tok_is(&t[1], "metadump")) {
        if (!enabled)
            conn_write(m->c, "CLIENT_ERROR lru crawler disabled\r\n", 35);
        else if (!m->srv->opts.dump_enabled) /* -X */
            OUT(m, "ERROR metadump not allowed");
        else if (conn_output_pending(m->c) > 0) /* earlier replies of this batch are queued */
            conn_write(m->c, "ERROR cannot pipeline other commands before metadump\r\n", 54);
        else
            walk_start(m, &t[2], true, now);
    } else if (nt == 3 && (tok_is(&t[1], "tocrawl") || tok_is(&t[1], "sleep"))) {
        uint32_t v;
        bool sleep = tok_is(&t[1], "sleep");
        if (!mc_parse_u32(&t[2], &v))
            conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
        else if (sleep && v > 1000000)
            conn_write(m->c, "CLIENT_ERROR sleep must be one second or less\r\n", 47);
        else {
            atomic_store(sleep ? &a->crawler_sleep : &a->crawler_tocrawl, v);
            conn_write(m->c, "OK\r\n", 4);
        }
    } else if (nt == 2 && tok_is(&t[1], "enable")) {
        bool off = false;
        if (atomic_compare_exchange_strong(&a->crawler_enabled, &off, true))
            conn_write(m->c, "OK\r\n", 4);
        else /* memcached: its crawler thread is already running */
            conn_write(m->c, "ERROR failed to start lru crawler thread\r\n", 42);
    } else if (nt == 2 && tok_is(&t[1], "disable")) {
        atomic_store(&a->crawler_enabled, false);
        conn_write(m->c, "OK\r\n", 4);
    } else {
        conn_write(m->c, "ERROR\r\n", 7);
    }
}

/* One metadump line, if the item's class was asked for. */
static void dump_line(mc_conn *m, const cache_item *it, uint64_t now)
{
    size_t total = cache_item_size(it);
    unsigned cls = cache_item_class(it);
    if (!(m->walk_classes & (UINT64_C(1) << cls)))
        return;
    char key[3 * CACHE_KEY_MAX + 1], line[3 * CACHE_KEY_MAX + 256];
    mc_uri_encode(cache_item_key(it), cache_item_klen(it), key);
    uint64_t exp = cache_item_expiry(it);
    int n = snprintf(line, sizeof line, "key=%s exp=%lld la=%llu cas=%llu fetch=no cls=%u size=%zu\n",
                     key, exp ? (long long)(exp / 1000) : -1LL, (unsigned long long)(now / 1000),
                     (unsigned long long)(m->srv->opts.cas_enabled ? cache_item_cas(it) : 0), cls,
                     total);
    if (n > 0 && (size_t)n < sizeof line)
        conn_write(m->c, line, (size_t)n);
}

bool mc_admin_walk(mc_conn *m, uint64_t now)
{
    cache_item *batch[WALK_SLICE];
    for (unsigned slice = 0; slice < WALK_SLICES_TURN; slice++) {
        if (m->walk_cursor == CACHE_SCAN_DONE)
            break;
        if (m->walk_dump && conn_output_full(m->c))
            return false; /* resumes as the output drains */
        size_t n = cache_store_scan(m->srv->store, &m->walk_cursor, batch, WALK_SLICE, now);
        for (size_t i = 0; i < n; i++) {
            if (m->walk_dump && !conn_closing(m->c))
                dump_line(m, batch[i], now);
            cache_item_release(batch[i]);
        }
    }
    if (m->walk_cursor != CACHE_SCAN_DONE)
        return false;
    if (m->walk_dump)
        conn_write(m->c, "END\r\n", 5);
    m->state = MC_LINE;
    atomic_store(&m->srv->admin.walk_busy, false);
    return true;
}

void mc_admin_close(mc_conn *m)
{
    if (m->state == MC_WALK) {
        m->state = MC_LINE;
        atomic_store(&m->srv->admin.walk_busy, false);
    }
}
