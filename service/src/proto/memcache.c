#include "proto/memcache.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "net/conn.h"
#include "net/loop.h"
#include "snowflake/clock.h"
#include "util/fmt.h"

#ifndef SF_VERSION
#define SF_VERSION "0"
#endif

/* What `version` and `stats` report: the memcached protocol level we implement first (clients
 * and conformance checkers such as memccapable parse it to decide which behaviour to expect),
 * then who we are. */
#define MEMCACHED_COMPAT "1.6.18"
#define MC_VERSION       MEMCACHED_COMPAT "-snowflaked-" SF_VERSION

/* Replies are byte-exact with memcached 1.6.18, checked session by session against the real one
 * (test/integration/test_memcache_diff.py). The differences we keep on purpose:
 *  - keys: 1..250 bytes of 0x21..0x7e (cache_key_valid, the rule protocol.txt states); memcached
 *    also takes control and non-ASCII bytes. Storing such a key is a CLIENT_ERROR here.
 *  - the item size limit counts the value only (cache.max_item_bytes); memcached's 1 MiB
 *    includes its ~50-byte header and the key.
 *  - numbers beyond 32 bits in flags, exptime or a length are refused (parse_u32, parse_i32);
 *    memcached truncates them silently (flags 4294967296 become 0).
 *  - incr/decr (the store's cache_incr): the value must be plain digits (memcached's strtoull
 *    also takes " 12" or "12 34"), and a shorter result is stored as is, where memcached pads
 *    it with spaces in place (protocol.txt says clients must not rely on either).
 *  - version is 1.6.18-snowflaked-<ours>; stats answers the general set only (no sub-stats).
 *  - meta commands: see the meta section (h, l, N, R, I and k with b; no "me"). */

#define MC_REL_MAX      2592000 /* exptimes up to 30 days are relative */
#define MC_TOKENS_MAX   24      /* memcached's tokenizer limit; more is reported as MAX + 1 */
#define MC_GET_LEAD_MAX 100     /* leading blanks memcached tolerates before a long "get " */

/* Meta commands (memcached 1.6): "<cmd> <key> <flag>*". memcached refuses more than 17 flags
 * (20 tokens counting its end marker), an O(paque) token longer than 32 bytes (the O included),
 * and a key token longer than 250 bytes before any base64 decoding. */
#define MC_META_TOKENS_MAX 19
#define MC_OPAQUE_MAX      32
#define MC_B64_KEY_MAX     (4 * ((CACHE_KEY_MAX + 2) / 3)) /* base64 of the longest key */
#define MC_META_HDR_MAX    512                             /* a meta reply line, see below */
#define MC_ARITH_TRIES     1000 /* ma goes again when another writer won: lock-free, bounded */

/* The longest meta reply line: "VA <len>", each return flag at most once (s f t c O k), "\r\n". */
_Static_assert(3 + 10 + 2 * (2 + 10) + 2 * (2 + FMT_U64_MAX) + 1 + MC_OPAQUE_MAX + 4 +
                       MC_B64_KEY_MAX + 2 <=
                   MC_META_HDR_MAX,
               "meta reply lines fit MC_META_HDR_MAX");

/* Per-loop counters: single writer (the loop), relaxed atomics, summed by "stats". The incr/decr
 * counters are ma's only (incr/decr count in the store); "stats" adds the two. */
typedef struct mc_loop {
    _Atomic uint64_t cmd_get, cmd_set, cmd_flush, cmd_touch, total_items;
    _Atomic uint64_t conns_opened, conns_closed;
    _Atomic uint64_t incr_hits, incr_misses, decr_hits, decr_misses;
    char pad[64]; /* loops write their own line */
} mc_loop;

struct memcache_server {
    cache_store *store;
    unsigned nloops;
    uint64_t started_ms;
    mc_loop *loops;
};

typedef enum {
    MC_LINE = 0,  /* waiting for a command line */
    MC_DATA,      /* receiving a storage command's data block into m->item */
    MC_SWALLOW,   /* discarding a refused data block */
    MC_GET_CONT,  /* a long get/gets line: keys are answered as they arrive */
    MC_SKIP_LINE, /* discarding the rest of a failed long get line */
} mc_state;

typedef struct mc_conn {
    conn *c;
    memcache_server *srv;
    mc_loop *ml;
    cache_item *item; /* MC_DATA: the unstored item being filled */
    char *lbuf;       /* a command line (or a get's key) split across reads, owned here */
    size_t llen, lcap;
    uint64_t cas_in;
    uint64_t need; /* MC_DATA / MC_SWALLOW: bytes still expected (value + "\r\n") */
    uint32_t vlen;
    uint8_t state, mode;
    bool noreply;
    bool get_cas; /* MC_GET_CONT: gets */
    bool in_cmd;  /* a command is partly received (the header timeout runs) */
    char tail[2]; /* the two bytes after the value: must be "\r\n" */
    /* ms: what the reply after the data block needs, noted when the line is parsed (memcached
     * stashes the same): the return flags O, k, c in request order, the opaque, b and q. */
    bool meta, meta_b, meta_q;
    uint8_t meta_nret, meta_olen;
    char meta_ret[3];
    char meta_opaque[MC_OPAQUE_MAX];
} mc_conn;

typedef struct mc_tok {
    const char *p;
    size_t n;
} mc_tok;

static void stat_add(_Atomic uint64_t *f, uint64_t n)
{
    NET_STAT_ADD(*f, n);
}

/* ---- output ------------------------------------------------------------------------------ */

static void out(mc_conn *m, const char *s, size_t n)
{
    if (!m->noreply)
        conn_write(m->c, s, n);
}

#define OUT(m, lit) out((m), lit "\r\n", sizeof(lit "\r\n") - 1)

static void out_value(mc_conn *m, const cache_item *it, bool with_cas)
{
    char hdr[CACHE_KEY_MAX + 3 * FMT_U64_MAX + 16];
    size_t klen = cache_item_klen(it), vlen = cache_item_vlen(it), n = 0;
    memcpy(hdr, "VALUE ", 6);
    n = 6;
    memcpy(hdr + n, cache_item_key(it), klen);
    n += klen;
    hdr[n++] = ' ';
    n += fmt_u64(hdr + n, cache_item_flags(it));
    hdr[n++] = ' ';
    n += fmt_u64(hdr + n, vlen);
    if (with_cas) {
        hdr[n++] = ' ';
        n += fmt_u64(hdr + n, cache_item_cas(it));
    }
    hdr[n++] = '\r';
    hdr[n++] = '\n';
    if (conn_write(m->c, hdr, n) == 0 && conn_write(m->c, cache_item_value(it), vlen) == 0)
        conn_write(m->c, "\r\n", 2);
}

/* ---- parsing helpers ---------------------------------------------------------------------- */

static bool tok_is(const mc_tok *t, const char *s)
{
    size_t n = strlen(s);
    return t->n == n && memcmp(t->p, s, n) == 0;
}

/* memcached reads numbers with strtoull/strtol (util.c safe_strto*): leading white space, an
 * optional sign, decimal digits, then the end of the token or a white-space byte after which the
 * rest is ignored. Tokens are split on ' ' only, so "+5", "-0", "5\t" and a stray "\r" pass. */
static bool mc_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* strtoull's scan: sign and magnitude. false without digits, on overflow (ERANGE) or when the
 * digits are followed by something else than white space. */
static bool scan_number(const mc_tok *t, bool *neg, uint64_t *mag)
{
    size_t i = 0;
    while (i < t->n && mc_space(t->p[i]))
        i++;
    *neg = i < t->n && t->p[i] == '-';
    if (i < t->n && (t->p[i] == '-' || t->p[i] == '+'))
        i++;
    size_t first = i;
    uint64_t v = 0;
    for (; i < t->n; i++) {
        unsigned d = (unsigned)(unsigned char)t->p[i] - '0';
        if (d > 9)
            break;
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (i == first || (i < t->n && !mc_space(t->p[i])))
        return false;
    *mag = v;
    return true;
}

/* safe_strtoull: strtoull negates in unsigned arithmetic, then memcached refuses a result that
 * looks negative if the token has a '-' ("-1" fails, "-0" is 0). */
static bool parse_u64(const mc_tok *t, uint64_t *out_v)
{
    bool neg;
    uint64_t v;
    if (!scan_number(t, &neg, &v))
        return false;
    if (neg)
        v = 0 - v;
    if (v > INT64_MAX && memchr(t->p, '-', t->n))
        return false;
    *out_v = v;
    return true;
}

/* safe_strtoul into 32 bits. memcached (unsigned long is 64-bit there) silently truncates a larger
 * value: flags 4294967296 are stored as 0. We refuse it instead (bad command line format): an
 * intended difference, the value cannot be what the client meant. */
static bool parse_u32(const mc_tok *t, uint32_t *out_v)
{
    uint64_t v;
    if (!parse_u64(t, &v) || v > UINT32_MAX)
        return false;
    *out_v = (uint32_t)v;
    return true;
}

/* safe_strtol into an int32. memcached truncates a 64-bit long here too (exptime 4294967296 is 0,
 * a length of 4294967297 reads 1 byte); we refuse values outside int32, as above. */
static bool parse_i32(const mc_tok *t, int64_t *out_v)
{
    bool neg;
    uint64_t v;
    if (!scan_number(t, &neg, &v) || v > (neg ? 2147483648u : 2147483647u))
        return false;
    *out_v = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

/* memcached exptime -> absolute ms (0 = never). Negative: already expired. */
static uint64_t expiry_ms(int64_t t, uint64_t now_ms)
{
    if (t == 0)
        return 0;
    if (t < 0)
        return 1; /* long past: invisible at once */
    if (t <= MC_REL_MAX)
        return now_ms + (uint64_t)t * 1000;
    return (uint64_t)t * 1000;
}

/* Splits on ' ' (empty tokens skipped, as memcached). Returns the count, MC_TOKENS_MAX + 1 when
 * there are more. */
static size_t tokenize(const char *p, size_t n, mc_tok *t)
{
    size_t k = 0, i = 0;
    while (i < n) {
        while (i < n && p[i] == ' ')
            i++;
        if (i == n)
            break;
        size_t s = i;
        while (i < n && p[i] != ' ')
            i++;
        if (k == MC_TOKENS_MAX)
            return MC_TOKENS_MAX + 1;
        t[k].p = p + s;
        t[k].n = i - s;
        k++;
    }
    return k;
}

static bool last_is_noreply(const mc_tok *t, size_t nt)
{
    return nt > 0 && tok_is(&t[nt - 1], "noreply");
}

/* ---- retrieval ---------------------------------------------------------------------------- */

/* Answers every space-separated key in p[0..n). false (with the error written) on a key that
 * is too long, as memcached: the values before it stay, no END. */
static bool get_keys(mc_conn *m, const char *p, size_t n, bool with_cas, bool touch,
                     uint64_t exp_ms, uint64_t now)
{
    cache_store *store = m->srv->store;
    size_t i = 0;
    while (i < n) {
        while (i < n && p[i] == ' ')
            i++;
        if (i == n)
            break;
        const char *key = p + i;
        while (i < n && p[i] != ' ')
            i++;
        size_t klen = (size_t)(p + i - key);
        if (klen > CACHE_KEY_MAX) {
            conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
            return false;
        }
        stat_add(touch ? &m->ml->cmd_touch : &m->ml->cmd_get, 1); /* memcached counts so */
        cache_item *it = cache_get(store, key, klen, now);
        if (it && touch)
            cache_touch(store, key, klen, exp_ms, now);
        if (it) {
            out_value(m, it, with_cas);
            cache_item_release(it);
        }
        if (conn_closing(m->c))
            return false;
    }
    return true;
}

static void get_end(mc_conn *m)
{
    conn_write(m->c, "END\r\n", 5);
}

/* get/gets <key>*, gat/gats <exptime> <key>*: `rest` is the line after the command name. */
static void cmd_get(mc_conn *m, const char *rest, size_t n, bool with_cas, bool touch, uint64_t now)
{
    uint64_t exp_ms = 0;
    size_t first = 0;
    while (first < n && rest[first] == ' ')
        first++;
    if (first == n) { /* no key (gat: no exptime) */
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    if (touch) { /* "gat <exptime>" without keys answers END, as memcached */
        size_t i = first;
        while (i < n && rest[i] != ' ')
            i++;
        mc_tok t = {rest + first, i - first};
        int64_t e;
        if (!parse_i32(&t, &e)) {
            conn_write(m->c, "CLIENT_ERROR invalid exptime argument\r\n", 39);
            return;
        }
        exp_ms = expiry_ms(e, now);
        rest += i;
        n -= i;
    }
    /* A key too long answers only the error (memcached drops the values it had stacked). */
    for (size_t i = 0, s = 0; i <= n; i++) {
        if (i == n || rest[i] == ' ') {
            if (i - s > CACHE_KEY_MAX) {
                conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
                return;
            }
            s = i + 1;
        }
    }
    if (get_keys(m, rest, n, with_cas, touch, exp_ms, now))
        get_end(m);
}

/* ---- storage ------------------------------------------------------------------------------ */

/* <cmd> <key> <flags> <exptime> <bytes> [<cas unique>] [noreply] */
static void cmd_store(mc_conn *m, const mc_tok *t, size_t nt, cache_mode mode, uint64_t now)
{
    size_t want = mode == CACHE_MODE_CAS ? 6 : 5;
    if (nt != want && nt != want + 1) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    m->noreply = nt == want + 1 && tok_is(&t[want], "noreply");
    uint32_t flags;
    int64_t exptime, vlen;
    uint64_t cas = 0;
    if (t[1].n > CACHE_KEY_MAX || !parse_u32(&t[2], &flags) || !parse_i32(&t[3], &exptime) ||
        !parse_i32(&t[4], &vlen) || (mode == CACHE_MODE_CAS && !parse_u64(&t[5], &cas)) ||
        vlen < 0 || vlen > INT32_MAX - 2 || !cache_key_valid(t[1].p, t[1].n)) {
        OUT(m, "CLIENT_ERROR bad command line format");
        return;
    }
    int err = 0;
    cache_item *it = cache_item_new(m->srv->store, t[1].p, t[1].n, (size_t)vlen, flags,
                                    expiry_ms(exptime, now), NULL, 0, &err);
    if (!it) {
        if (err == CACHE_BAD_KEY || err == CACHE_BAD_ARG) {
            OUT(m, "CLIENT_ERROR bad command line format");
            return;
        }
        if (err == CACHE_TOO_LARGE)
            OUT(m, "SERVER_ERROR object too large for cache");
        else
            OUT(m, "SERVER_ERROR out of memory storing object");
        /* memcached: a failed set must not leave the old value visible */
        if (mode == CACHE_MODE_SET)
            cache_delete(m->srv->store, t[1].p, t[1].n, 0, now);
        m->state = MC_SWALLOW;
        m->need = (uint64_t)vlen + 2;
        return;
    }
    m->item = it;
    m->meta = false;
    m->mode = (uint8_t)mode;
    m->cas_in = cas;
    m->vlen = (uint32_t)vlen;
    m->need = (uint64_t)vlen + 2;
    m->state = MC_DATA;
}

static void ms_done(mc_conn *m, cache_item *it, uint64_t now);

static void store_done(mc_conn *m, uint64_t now)
{
    cache_item *it = m->item;
    m->item = NULL;
    m->state = MC_LINE;
    stat_add(&m->ml->cmd_set, 1);
    if (m->tail[0] != '\r' || m->tail[1] != '\n') {
        cache_item_release(it);
        if (m->meta) /* ms reports errors even in quiet mode */
            conn_write(m->c, "CLIENT_ERROR bad data chunk\r\n", 29);
        else
            OUT(m, "CLIENT_ERROR bad data chunk");
        return;
    }
    if (m->meta) {
        ms_done(m, it, now);
        return;
    }
    int r = cache_store_item(m->srv->store, it, (cache_mode)m->mode, m->cas_in, NULL, now);
    switch (r) {
    case CACHE_STORED:
        stat_add(&m->ml->total_items, 1);
        OUT(m, "STORED");
        break;
    case CACHE_NOT_STORED: OUT(m, "NOT_STORED"); break;
    case CACHE_EXISTS: OUT(m, "EXISTS"); break;
    case CACHE_NOT_FOUND: OUT(m, "NOT_FOUND"); break;
    case CACHE_TOO_LARGE:
    case CACHE_NO_MEMORY:
        /* memcached: an append/prepend whose result cannot be allocated is NOT_STORED */
        if (m->mode == CACHE_MODE_APPEND || m->mode == CACHE_MODE_PREPEND)
            OUT(m, "NOT_STORED");
        else if (r == CACHE_TOO_LARGE)
            OUT(m, "SERVER_ERROR object too large for cache");
        else
            OUT(m, "SERVER_ERROR out of memory storing object");
        break;
    default: OUT(m, "SERVER_ERROR out of memory storing object"); break;
    }
}

/* MC_DATA: copies what arrived into the item; stores it once value and "\r\n" are complete. */
static size_t data_in(mc_conn *m, const char *p, size_t n, uint64_t now)
{
    uint64_t total = (uint64_t)m->vlen + 2, got = total - m->need;
    size_t used = 0;
    if (got < m->vlen) {
        size_t k = m->vlen - got < n ? (size_t)(m->vlen - got) : n;
        memcpy(cache_item_value_mut(m->item) + got, p, k);
        used = k;
        got += k;
    }
    while (used < n && got < total)
        m->tail[got++ - m->vlen] = p[used++];
    m->need = total - got;
    if (m->need == 0)
        store_done(m, now);
    return used;
}

/* ---- other commands ----------------------------------------------------------------------- */

static void cmd_delete(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    if (nt < 2 || nt > 4) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    if (nt > 2) {
        bool zero = tok_is(&t[2], "0");
        m->noreply = last_is_noreply(t, nt);
        bool ok = (nt == 3 && (zero || m->noreply)) || (nt == 4 && zero && m->noreply);
        if (!ok) {
            OUT(m, "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
            return;
        }
    }
    if (t[1].n > CACHE_KEY_MAX) {
        OUT(m, "CLIENT_ERROR bad command line format");
        return;
    }
    if (cache_delete(m->srv->store, t[1].p, t[1].n, 0, now) == CACHE_DELETED)
        OUT(m, "DELETED");
    else
        OUT(m, "NOT_FOUND");
}

static void cmd_incr(mc_conn *m, const mc_tok *t, size_t nt, bool decr, uint64_t now)
{
    if (nt != 3 && nt != 4) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    m->noreply = nt == 4 && tok_is(&t[3], "noreply");
    uint64_t delta, v = 0;
    if (t[1].n > CACHE_KEY_MAX) {
        OUT(m, "CLIENT_ERROR bad command line format");
        return;
    }
    if (!parse_u64(&t[2], &delta)) {
        OUT(m, "CLIENT_ERROR invalid numeric delta argument");
        return;
    }
    int r = cache_key_valid(t[1].p, t[1].n)
                ? cache_incr(m->srv->store, t[1].p, t[1].n, delta, decr, &v, now)
                : CACHE_NOT_FOUND;
    if (r == CACHE_OK) {
        char buf[FMT_U64_MAX + 2];
        size_t n = fmt_u64(buf, v);
        buf[n++] = '\r';
        buf[n++] = '\n';
        out(m, buf, n);
    } else if (r == CACHE_NOT_FOUND) {
        OUT(m, "NOT_FOUND");
    } else if (r == CACHE_NOT_NUMERIC) {
        OUT(m, "CLIENT_ERROR cannot increment or decrement non-numeric value");
    } else {
        OUT(m, "SERVER_ERROR out of memory");
    }
}

static void cmd_touch(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    if (nt != 3 && nt != 4) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    m->noreply = nt == 4 && tok_is(&t[3], "noreply");
    int64_t e;
    if (t[1].n > CACHE_KEY_MAX) {
        OUT(m, "CLIENT_ERROR bad command line format");
        return;
    }
    if (!parse_i32(&t[2], &e)) {
        OUT(m, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    stat_add(&m->ml->cmd_touch, 1);
    if (cache_touch(m->srv->store, t[1].p, t[1].n, expiry_ms(e, now), now) == CACHE_TOUCHED)
        OUT(m, "TOUCHED");
    else
        OUT(m, "NOT_FOUND");
}

static void cmd_flush(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    if (nt > 3) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    m->noreply = last_is_noreply(t, nt);
    int64_t delay = 0;
    stat_add(&m->ml->cmd_flush, 1);
    /* memcached reads a delay whenever there is a token besides noreply ("flush_all 5 x" waits
     * 5 s; "flush_all x y" is an error) */
    if (nt != (m->noreply ? 2u : 1u) && !parse_i32(&t[1], &delay)) {
        OUT(m, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    cache_flush_all(m->srv->store, delay > 0 ? expiry_ms(delay, now) : now, now);
    OUT(m, "OK");
}

static void cmd_verbosity(mc_conn *m, const mc_tok *t, size_t nt)
{
    if (nt != 2 && nt != 3) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    m->noreply = last_is_noreply(t, nt);
    uint32_t level;
    if (!parse_u32(&t[1], &level)) {
        OUT(m, "CLIENT_ERROR bad command line format");
        return;
    }
    OUT(m, "OK"); /* the level is accepted and ignored: logging has its own configuration */
}

static void stat_line(conn *c, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void stat_line(conn *c, const char *name, const char *fmt, ...)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf, "STAT %s ", name);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n - 2, fmt, ap);
    va_end(ap);
    buf[n++] = '\r';
    buf[n++] = '\n';
    conn_write(c, buf, (size_t)n);
}

static uint64_t loops_sum(const memcache_server *s, size_t off)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < s->nloops; i++)
        sum += atomic_load_explicit((const _Atomic uint64_t *)((const char *)&s->loops[i] + off),
                                    memory_order_relaxed);
    return sum;
}
#define SUM(s, field) loops_sum((s), offsetof(mc_loop, field))

static void cmd_stats(mc_conn *m, size_t nt, uint64_t now)
{
    if (nt != 1) { /* stats items, slabs, settings... are not kept */
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    const memcache_server *s = m->srv;
    conn *c = m->c;
    cache_stats cs;
    cache_store_stats(s->store, &cs);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t opened = SUM(s, conns_opened), closed = SUM(s, conns_closed);
    stat_line(c, "pid", "%ld", (long)getpid());
    stat_line(c, "uptime", "%llu", (unsigned long long)((now - s->started_ms) / 1000));
    stat_line(c, "time", "%llu", (unsigned long long)(now / 1000));
    stat_line(c, "version", "%s", MC_VERSION);
    stat_line(c, "pointer_size", "%d", (int)(8 * sizeof(void *)));
    stat_line(c, "rusage_user", "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    stat_line(c, "rusage_system", "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    stat_line(c, "curr_connections", "%llu", (unsigned long long)(opened - closed));
    stat_line(c, "total_connections", "%llu", (unsigned long long)opened);
    stat_line(c, "cmd_get", "%llu", (unsigned long long)SUM(s, cmd_get));
    stat_line(c, "cmd_set", "%llu", (unsigned long long)SUM(s, cmd_set));
    stat_line(c, "cmd_flush", "%llu", (unsigned long long)SUM(s, cmd_flush));
    stat_line(c, "cmd_touch", "%llu", (unsigned long long)SUM(s, cmd_touch));
#define U(name, v) stat_line(c, name, "%llu", (unsigned long long)(v))
    U("get_hits", cs.get_hits);
    U("get_misses", cs.get_misses);
    U("get_expired", cs.expired_lazy);
    U("get_flushed", cs.flushed);
    U("delete_misses", cs.delete_misses);
    U("delete_hits", cs.delete_hits);
    U("incr_misses", cs.incr_misses + SUM(s, incr_misses)); /* incr in the store, ma here */
    U("incr_hits", cs.incr_hits + SUM(s, incr_hits));
    U("decr_misses", cs.decr_misses + SUM(s, decr_misses));
    U("decr_hits", cs.decr_hits + SUM(s, decr_hits));
    U("cas_misses", cs.cas_misses);
    U("cas_hits", cs.cas_hits);
    U("cas_badval", cs.cas_badval);
    U("touch_hits", cs.touch_hits);
    U("touch_misses", cs.touch_misses);
    U("limit_maxbytes", cs.mem_limit);
    U("threads", s->nloops);
    U("bytes", cs.bytes);
    U("curr_items", cs.curr_items);
    U("total_items", SUM(s, total_items));
    U("expired_unfetched", cs.expired_swept);
    U("evictions", cs.evictions);
#undef U
    conn_write(c, "END\r\n", 5);
}

/* ---- meta commands ------------------------------------------------------------------------ */

/* memcached 1.6's meta protocol (doc/protocol.txt "Meta Commands"): mg, ms, md, ma, mn. A flag
 * is one letter, its argument glued to it ("T30"); the reply repeats the return flags in request
 * order. Flags are checked first, as memcached does: a repeated flag or one it does not know
 * refuses the command. The flags memcached knows but that need item state our store does not
 * keep are refused the same way ("CLIENT_ERROR invalid flag"), never answered wrongly: mg h (hit
 * before), l (seconds since the last access), N (vivify on miss, with its win/stale tokens W, Z,
 * X) and R (recache); md I and ms I with a CAS (marking an item stale). The key-returning flag k
 * encodes the key in base64 when the request had b (memcached: when the item was stored with b;
 * we keep no such mark). "me" (memcached's debug dump) is not implemented: ERROR. */

typedef enum { MC_MG, MC_MS, MC_MD, MC_MA } mc_meta_cmd;

typedef struct mc_meta {
    const char *key; /* the key token, or kbuf once base64-decoded */
    size_t klen;
    const char *err; /* why parsing failed */
    bool b, q, v, has_cas, has_ttl, has_viv, stale;
    char mode; /* M's letter, 0 without */
    uint32_t client_flags;
    int64_t ttl, viv_ttl; /* T and N exptimes */
    uint64_t cas, delta, initial;
    char kbuf[CACHE_KEY_MAX];
} mc_meta;

static const char mc_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return c == '=' ? 0 : -1; /* '=' counts as a digit of value 0, as in memcached */
}

/* Decodes a key the way memcached does: bytes outside the alphabet are skipped, the rest must be
 * a non-empty multiple of 4 digits; the first group with '=' padding ends the key (one or two
 * '=' drop as many bytes, more is an error). out holds n * 3 / 4 bytes. 0 = invalid. */
static size_t b64_decode(const char *in, size_t n, char *out)
{
    size_t digits = 0, o = 0;
    for (size_t i = 0; i < n; i++)
        digits += b64_value((unsigned char)in[i]) >= 0;
    if (digits == 0 || digits % 4)
        return 0;
    unsigned char g[4];
    unsigned k = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)in[i]);
        if (v < 0)
            continue;
        pad += in[i] == '=';
        g[k++] = (unsigned char)v;
        if (k < 4)
            continue;
        out[o++] = (char)(g[0] << 2 | g[1] >> 4);
        out[o++] = (char)(g[1] << 4 | g[2] >> 2);
        out[o++] = (char)(g[2] << 6 | g[3]);
        k = 0;
        if (pad) {
            if (pad > 2)
                return 0;
            return o - pad;
        }
    }
    return o;
}

static size_t b64_encode(const char *in, size_t n, char *out)
{
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16 |
                     (uint32_t)(unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
        out[o++] = mc_b64[v >> 18];
        out[o++] = mc_b64[v >> 12 & 63];
        out[o++] = mc_b64[v >> 6 & 63];
        out[o++] = mc_b64[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)(unsigned char)in[i + 1] << 8;
        out[o++] = mc_b64[v >> 18];
        out[o++] = mc_b64[v >> 12 & 63];
        out[o++] = i + 1 < n ? mc_b64[v >> 6 & 63] : '=';
        out[o++] = '=';
    }
    return o;
}

/* The checks before the flags, in memcached's order. false with the reply written. */
static bool meta_line_ok(mc_conn *m, mc_meta_cmd cmd, size_t nt, const mc_tok *t)
{
    if (nt < 2) {
        conn_write(m->c, "ERROR\r\n", 7);
        return false;
    }
    if (t[1].n > CACHE_KEY_MAX || (cmd == MC_MS && nt == 2)) {
        conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
        return false;
    }
    if (nt > MC_META_TOKENS_MAX) {
        if (cmd == MC_MG) /* sic: mg words it differently */
            OUT(m, "CLIENT_ERROR options flags are too long");
        else
            OUT(m, "CLIENT_ERROR options flags too long");
        return false;
    }
    return true;
}

/* A flag's argument: the token after its letter. */
static mc_tok flag_arg(const mc_tok *t)
{
    return (mc_tok){t->p + 1, t->n - 1};
}

#define MC_BAD_TOKEN "CLIENT_ERROR bad token in command line format"

/* memcached's flag pre-parse over t[first..nt). A repeated flag (or a byte >= 127: memcached says
 * "duplicate" for those too) or an unknown one fails at once; a bad argument is noted and parsing
 * goes on, so the last such error is the one reported (F's has no text of its own). */
static bool meta_parse(mc_meta *mm, mc_meta_cmd cmd, const mc_tok *t, size_t nt, size_t first)
{
    memset(mm, 0, offsetof(mc_meta, kbuf));
    mm->key = t[1].p;
    mm->klen = t[1].n;
    mm->delta = 1;
    uint64_t seen[2] = {0, 0};
    const char *err = NULL;
    bool bad = false;
    for (size_t i = first; i < nt; i++) {
        unsigned o = (unsigned char)t[i].p[0];
        if (o >= 127 || (seen[o >> 6] >> (o & 63) & 1)) {
            mm->err = "CLIENT_ERROR duplicate flag";
            return false;
        }
        seen[o >> 6] |= 1ull << (o & 63);
        mc_tok a = flag_arg(&t[i]);
        uint64_t u;
        switch (o) {
        case 'b':
            mm->b = true;
            mm->klen = b64_decode(t[1].p, t[1].n, mm->kbuf);
            mm->key = mm->kbuf;
            if (mm->klen == 0) {
                err = "CLIENT_ERROR error decoding key";
                bad = true;
            }
            break;
        case 'N':
            if (cmd == MC_MG)
                goto invalid;
            if (!parse_i32(&a, &mm->viv_ttl)) {
                err = MC_BAD_TOKEN;
                bad = true;
            }
            mm->has_viv = true;
            break;
        case 'T':
            if (!parse_i32(&a, &mm->ttl)) {
                err = MC_BAD_TOKEN;
                bad = true;
            }
            mm->has_ttl = true;
            break;
        case 'R':
            if (cmd == MC_MG)
                goto invalid;
            if (!parse_i32(&a, &(int64_t){0})) {
                err = MC_BAD_TOKEN;
                bad = true;
            }
            break;
        case 'h':
        case 'l':
            if (cmd == MC_MG)
                goto invalid;
            break;
        case 'O': /* checked where it is echoed, as memcached does */
        case 'P': /* proxy hints: accepted, no effect */
        case 'L':
        case 'k':
        case 's':
        case 't':
        case 'c':
        case 'f':
        /* u ("no LRU bump") is accepted: our hits always bump, which no reply shows */
        case 'u': break;
        case 'v': mm->v = true; break;
        case 'q': mm->q = true; break;
        case 'I': mm->stale = true; break;
        case 'F':
            if (!parse_u32(&a, &mm->client_flags))
                bad = true;
            break;
        case 'C':
            if (!parse_u64(&a, &mm->cas)) {
                err = MC_BAD_TOKEN;
                bad = true;
            }
            mm->has_cas = true;
            break;
        case 'M':
            if (t[i].n != 2) {
                err = "CLIENT_ERROR incorrect length for M token";
                bad = true;
            } else {
                mm->mode = t[i].p[1];
            }
            break;
        case 'J':
            if (!parse_u64(&a, &mm->initial)) {
                err = "CLIENT_ERROR invalid numeric initial value";
                bad = true;
            }
            break;
        case 'D':
            if (!parse_u64(&a, &u)) {
                err = "CLIENT_ERROR invalid numeric delta value";
                bad = true;
            }
            mm->delta = u;
            break;
        default:
        invalid:
            mm->err = "CLIENT_ERROR invalid flag";
            return false;
        }
    }
    mm->err = err ? err : "CLIENT_ERROR bad command line format";
    return !bad;
}

static size_t put_u64_flag(char *p, char flag, uint64_t v)
{
    p[0] = ' ';
    p[1] = flag;
    return 2 + fmt_u64(p + 2, v);
}

/* " k<key>", base64 with a trailing " b" when the request used b. */
static size_t put_key(char *p, const char *key, size_t klen, bool b)
{
    p[0] = ' ';
    p[1] = 'k';
    if (!b) {
        memcpy(p + 2, key, klen);
        return 2 + klen;
    }
    size_t n = 2 + b64_encode(key, klen, p + 2);
    memcpy(p + n, " b", 2);
    return n + 2;
}

static size_t put_opaque(char *p, const char *o, size_t n)
{
    p[0] = ' ';
    memcpy(p + 1, o, n);
    return 1 + n;
}

/* t: seconds left, -1 for none. Rounded up: memcached counts whole seconds from the second the
 * TTL was set, so right after "T30" it says 30. An item already due (T-1 in the same mg) says 0,
 * where memcached prints a wrapped unsigned number. */
static size_t put_ttl(char *p, uint64_t exp, uint64_t now)
{
    if (exp == 0) {
        memcpy(p, " t-1", 4);
        return 4;
    }
    return put_u64_flag(p, 't', exp > now ? (exp - now + 999) / 1000 : 0);
}

/* The O and k flags of a reply without an item (EN, NF, EX, md's). false: an opaque is too long
 * (memcached then answers only that error). */
static bool put_miss_flags(char *hdr, size_t *n, const mc_meta *mm, const mc_tok *t, size_t nt,
                           size_t first)
{
    for (size_t i = first; i < nt; i++) {
        if (t[i].p[0] == 'O') {
            if (t[i].n > MC_OPAQUE_MAX)
                return false;
            *n += put_opaque(hdr + *n, t[i].p, t[i].n);
        } else if (t[i].p[0] == 'k') {
            *n += put_key(hdr + *n, mm->key, mm->klen, mm->b);
        }
    }
    return true;
}

static void write_line(mc_conn *m, char *hdr, size_t n)
{
    hdr[n++] = '\r';
    hdr[n++] = '\n';
    conn_write(m->c, hdr, n);
}

#define OPAQUE_TOO_LONG "CLIENT_ERROR opaque token too long\r\n"

/* mg <key> <flags>*: HD or VA <len>, the return flags (then the value); EN on a miss. */
static void cmd_mg(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    mc_meta mm;
    if (!meta_line_ok(m, MC_MG, nt, t))
        return;
    if (!meta_parse(&mm, MC_MG, t, nt, 2)) {
        conn_write(m->c, mm.err, strlen(mm.err));
        conn_write(m->c, "\r\n", 2);
        return;
    }
    cache_store *store = m->srv->store;
    stat_add(mm.has_ttl ? &m->ml->cmd_touch : &m->ml->cmd_get, 1);
    cache_item *it = cache_get(store, mm.key, mm.klen, now);
    char hdr[MC_META_HDR_MAX];
    size_t n = 2;
    if (!it) {
        memcpy(hdr, "EN", 2);
        if (!put_miss_flags(hdr, &n, &mm, t, nt, 2))
            conn_write(m->c, OPAQUE_TOO_LONG, sizeof OPAQUE_TOO_LONG - 1);
        else if (!mm.q) /* quiet mode elides a miss (the only reply it elides for mg) */
            write_line(m, hdr, n);
        return;
    }
    size_t vlen = cache_item_vlen(it);
    uint64_t exp = cache_item_expiry(it);
    if (mm.v) {
        memcpy(hdr, "VA ", 3);
        n = 3 + fmt_u64(hdr + 3, vlen);
    } else {
        memcpy(hdr, "HD", 2);
    }
    /* In request order, as memcached: a T before a t shows the new TTL, one after the old. */
    for (size_t i = 2; i < nt; i++) {
        switch (t[i].p[0]) {
        case 'T':
            exp = expiry_ms(mm.ttl, now);
            cache_touch(store, mm.key, mm.klen, exp, now);
            break;
        case 's': n += put_u64_flag(hdr + n, 's', vlen); break;
        case 't': n += put_ttl(hdr + n, exp, now); break;
        case 'c': n += put_u64_flag(hdr + n, 'c', cache_item_cas(it)); break;
        case 'f': n += put_u64_flag(hdr + n, 'f', cache_item_flags(it)); break;
        case 'k': n += put_key(hdr + n, mm.key, mm.klen, mm.b); break;
        case 'O':
            if (t[i].n > MC_OPAQUE_MAX) {
                cache_item_release(it);
                conn_write(m->c, OPAQUE_TOO_LONG, sizeof OPAQUE_TOO_LONG - 1);
                return;
            }
            n += put_opaque(hdr + n, t[i].p, t[i].n);
            break;
        default: break;
        }
    }
    hdr[n++] = '\r';
    hdr[n++] = '\n';
    if (conn_write(m->c, hdr, n) == 0 && mm.v && conn_write(m->c, cache_item_value(it), vlen) == 0)
        conn_write(m->c, "\r\n", 2);
    cache_item_release(it);
}

/* The error of a refused ms, whose data block is then swallowed (memcached alike). */
static void ms_refuse(mc_conn *m, const char *err, int64_t vlen)
{
    conn_write(m->c, err, strlen(err));
    conn_write(m->c, "\r\n", 2);
    m->state = MC_SWALLOW;
    m->need = (uint64_t)vlen + 2;
}

/* ms <key> <datalen> <flags>*: the item is allocated now, stored when its data is in (ms_done). */
static void cmd_ms(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    mc_meta mm;
    int64_t vlen;
    if (!meta_line_ok(m, MC_MS, nt, t))
        return;
    if (!parse_i32(&t[2], &vlen) || vlen < 0 || vlen > INT32_MAX - 2) {
        conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
        return;
    }
    if (!meta_parse(&mm, MC_MS, t, nt, 3)) {
        ms_refuse(m, mm.err, vlen);
        return;
    }
    const char *err = NULL;
    m->meta_nret = m->meta_olen = 0;
    for (size_t i = 3; i < nt; i++) {
        char f = t[i].p[0];
        if (f == 'O' && t[i].n > MC_OPAQUE_MAX) {
            err = "CLIENT_ERROR opaque token too long";
        } else if (f == 'O' || f == 'k' || f == 'c') {
            m->meta_ret[m->meta_nret++] = f; /* each at most once: meta_parse refused repeats */
            if (f == 'O') {
                memcpy(m->meta_opaque, t[i].p, t[i].n);
                m->meta_olen = (uint8_t)t[i].n;
            }
        }
    }
    cache_mode mode;
    switch (mm.mode) {
    case 0:
    case 'S': mode = CACHE_MODE_SET; break;
    case 'E': mode = CACHE_MODE_ADD; break;
    case 'A': mode = CACHE_MODE_APPEND; break;
    case 'P': mode = CACHE_MODE_PREPEND; break;
    case 'R': mode = CACHE_MODE_REPLACE; break;
    default: ms_refuse(m, "CLIENT_ERROR invalid mode for ms M token", vlen); return;
    }
    /* memcached: a CAS turns set and replace into cas; add ignores it; append/prepend check it
     * when it is not 0 (ms_concat_cas) */
    if (mm.has_cas && (mode == CACHE_MODE_SET || mode == CACHE_MODE_REPLACE))
        mode = CACHE_MODE_CAS;
    if (mm.stale && mode == CACHE_MODE_CAS)
        err = "CLIENT_ERROR invalid flag"; /* I: a stale item, which the store cannot mark */
    if (err) {
        ms_refuse(m, err, vlen);
        return;
    }
    int e = 0;
    cache_item *it = cache_item_new(m->srv->store, mm.key, mm.klen, (size_t)vlen, mm.client_flags,
                                    mm.has_ttl ? expiry_ms(mm.ttl, now) : 0, NULL, 0, &e);
    if (!it) {
        if (e == CACHE_BAD_KEY || e == CACHE_BAD_ARG) { /* our key rule: no control bytes */
            ms_refuse(m, "CLIENT_ERROR bad command line format", vlen);
            return;
        }
        /* memcached drops the old value whatever the mode */
        cache_delete(m->srv->store, mm.key, mm.klen, 0, now);
        ms_refuse(m,
                  e == CACHE_TOO_LARGE ? "SERVER_ERROR object too large for cache"
                                       : "SERVER_ERROR out of memory storing object",
                  vlen);
        return;
    }
    m->item = it;
    m->meta = true;
    m->meta_b = mm.b;
    m->meta_q = mm.q;
    m->mode = (uint8_t)mode;
    m->cas_in = mm.has_cas ? mm.cas : 0;
    m->vlen = (uint32_t)vlen;
    m->need = (uint64_t)vlen + 2;
    m->state = MC_DATA;
}

/* ms MA/MP with a CAS other than 0: memcached appends only if the item's CAS matches. The store's
 * append does not compare, so the joined item is built here and stored in CAS mode: atomic, and
 * a writer in between makes it EX as in memcached. Takes the reference to `it`. */
static int ms_concat_cas(mc_conn *m, cache_item *it, uint64_t *cas_out, uint64_t now)
{
    cache_store *s = m->srv->store;
    const char *key = cache_item_key(it);
    size_t klen = cache_item_klen(it), vlen = cache_item_vlen(it);
    cache_item *old = cache_get(s, key, klen, now);
    int r = CACHE_NOT_STORED; /* absent: append/prepend never store */
    if (old && cache_item_cas(old) != m->cas_in)
        r = CACHE_EXISTS;
    cache_item *joined = NULL;
    if (old && r != CACHE_EXISTS) {
        size_t ovlen = cache_item_vlen(old), ctlen;
        const char *ct = cache_item_ctype(old, &ctlen);
        int e;
        joined = cache_item_new(s, key, klen, ovlen + vlen, cache_item_flags(old),
                                cache_item_expiry(old), ct, ctlen, &e);
        if (joined) {
            bool append = m->mode == CACHE_MODE_APPEND;
            char *v = cache_item_value_mut(joined);
            memcpy(v, cache_item_value(append ? old : it), append ? ovlen : vlen);
            memcpy(v + (append ? ovlen : vlen), cache_item_value(append ? it : old),
                   append ? vlen : ovlen);
        }
    }
    cache_item_release(old);
    cache_item_release(it);
    if (!joined)
        return r; /* absent, other CAS, or no room for the result (memcached: NS) */
    r = cache_store_item(s, joined, CACHE_MODE_CAS, m->cas_in, cas_out, now);
    return r == CACHE_EXISTS || r == CACHE_STORED ? r : CACHE_NOT_STORED;
}

/* The data block of an ms is in: store, then "HD|NS|EX|NF" and the noted return flags. */
static void ms_done(mc_conn *m, cache_item *it, uint64_t now)
{
    char hdr[MC_META_HDR_MAX];
    char key[CACHE_KEY_MAX];
    size_t klen = cache_item_klen(it);
    memcpy(key, cache_item_key(it), klen); /* the store takes the item */
    uint64_t cas = 0;
    int r;
    bool concat = m->mode == CACHE_MODE_APPEND || m->mode == CACHE_MODE_PREPEND;
    if (concat && m->cas_in)
        r = ms_concat_cas(m, it, &cas, now);
    else
        r = cache_store_item(m->srv->store, it, (cache_mode)m->mode, m->cas_in, &cas, now);
    if (concat && (r == CACHE_TOO_LARGE || r == CACHE_NO_MEMORY))
        r = CACHE_NOT_STORED; /* memcached: the joined item could not be allocated */
    switch (r) {
    case CACHE_STORED:
        stat_add(&m->ml->total_items, 1);
        if (m->meta_q) /* quiet mode elides HD only */
            return;
        memcpy(hdr, "HD", 2);
        break;
    case CACHE_NOT_STORED: memcpy(hdr, "NS", 2); break;
    case CACHE_EXISTS: memcpy(hdr, "EX", 2); break;
    case CACHE_NOT_FOUND: memcpy(hdr, "NF", 2); break;
    case CACHE_TOO_LARGE: OUT(m, "SERVER_ERROR object too large for cache"); return;
    default: OUT(m, "SERVER_ERROR out of memory storing object"); return;
    }
    size_t n = 2;
    for (unsigned i = 0; i < m->meta_nret; i++) {
        if (m->meta_ret[i] == 'O')
            n += put_opaque(hdr + n, m->meta_opaque, m->meta_olen);
        else if (m->meta_ret[i] == 'k')
            n += put_key(hdr + n, key, klen, m->meta_b);
        else
            n += put_u64_flag(hdr + n, 'c', r == CACHE_STORED ? cas : 0);
    }
    write_line(m, hdr, n);
}

/* md <key> <flags>*: HD (q: none), NF, EX (C given and different; C0 never matches). */
static void cmd_md(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    mc_meta mm;
    if (!meta_line_ok(m, MC_MD, nt, t))
        return;
    if (!meta_parse(&mm, MC_MD, t, nt, 2) || mm.stale) { /* I: stale marking, not kept */
        OUT(m, "CLIENT_ERROR invalid or duplicate flag");
        return;
    }
    char hdr[MC_META_HDR_MAX];
    size_t n = 2;
    if (!put_miss_flags(hdr, &n, &mm, t, nt, 2)) {
        conn_write(m->c, OPAQUE_TOO_LONG, sizeof OPAQUE_TOO_LONG - 1);
        return;
    }
    /* cache_delete takes 0 as "no CAS"; memcached's C0 compares and fails: no item has the
     * largest CAS (the store's counters would need 2^58 writes per shard to reach it) */
    uint64_t cas = mm.has_cas ? (mm.cas ? mm.cas : UINT64_MAX) : 0;
    int r = cache_delete(m->srv->store, mm.key, mm.klen, cas, now);
    if (r == CACHE_DELETED && mm.q) /* quiet mode elides HD only */
        return;
    memcpy(hdr, r == CACHE_DELETED ? "HD" : r == CACHE_EXISTS ? "EX" : "NF", 2);
    write_line(m, hdr, n);
}

/* memcached's incr operand, as the store reads it: 1..20 decimal digits, at most 2^64-1. */
static bool value_u64(const char *p, size_t n, uint64_t *out_v)
{
    mc_tok t = {p, n};
    if (n == 0 || n > FMT_U64_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return false;
    return parse_u64(&t, out_v);
}

typedef struct mc_arith {
    uint64_t value, cas;
    uint64_t base_exp; /* the expiry before ma's T/N flags: the old item's, or none if created */
    bool created;
} mc_arith;

/* Stores the number as the item's new value (ADD when creating, else CAS against the one read). */
static int arith_store(mc_conn *m, const mc_meta *mm, uint64_t v, uint32_t flags, uint64_t exp,
                       const char *ct, size_t ctlen, cache_mode mode, uint64_t cas_in, mc_arith *a,
                       uint64_t now)
{
    char num[FMT_U64_MAX];
    size_t len = fmt_u64(num, v);
    int e;
    cache_item *it =
        cache_item_new(m->srv->store, mm->key, mm->klen, len, flags, exp, ct, ctlen, &e);
    if (!it) /* a base64 key the store refuses (control bytes) cannot exist: a miss */
        return e == CACHE_BAD_KEY ? CACHE_NOT_FOUND : CACHE_NO_MEMORY;
    memcpy(cache_item_value_mut(it), num, len);
    a->value = v;
    return cache_store_item(m->srv->store, it, mode, cas_in, &a->cas, now);
}

/* ma's arithmetic. cache_incr can neither compare a CAS nor return the new one, so this reads the
 * item, computes, and stores the result in CAS mode, going again when another writer came in
 * between (each retry means one of them succeeded). viv_exp: a created item's expiry.
 * CACHE_OK, CACHE_NOT_FOUND, CACHE_EXISTS, CACHE_NOT_NUMERIC or CACHE_NO_MEMORY. */
static int meta_arith(mc_conn *m, const mc_meta *mm, bool decr, uint64_t viv_exp, mc_arith *a,
                      uint64_t now)
{
    cache_store *s = m->srv->store;
    for (int tries = 0; tries < MC_ARITH_TRIES; tries++) {
        cache_item *it = cache_get(s, mm->key, mm->klen, now);
        if (!it) {
            if (!mm->has_viv)
                return CACHE_NOT_FOUND;
            a->base_exp = 0;
            int r = arith_store(m, mm, mm->initial, 0, viv_exp, NULL, 0, CACHE_MODE_ADD, 0, a, now);
            a->created = r == CACHE_STORED;
            if (r == CACHE_STORED)
                return CACHE_OK;
            if (r != CACHE_NOT_STORED) /* NOT_STORED: someone added it first, go again */
                return r == CACHE_NOT_FOUND ? r : CACHE_NO_MEMORY;
            continue;
        }
        uint64_t v, cas = cache_item_cas(it);
        if (mm->cas && cas != mm->cas) { /* memcached compares only a CAS other than 0 */
            cache_item_release(it);
            return CACHE_EXISTS;
        }
        if (!value_u64(cache_item_value(it), cache_item_vlen(it), &v)) {
            cache_item_release(it);
            return CACHE_NOT_NUMERIC;
        }
        v = decr ? (v > mm->delta ? v - mm->delta : 0) : v + mm->delta; /* incr wraps */
        size_t ctlen;
        const char *ct = cache_item_ctype(it, &ctlen);
        a->base_exp = cache_item_expiry(it);
        uint64_t exp = mm->has_ttl ? expiry_ms(mm->ttl, now) : a->base_exp;
        int r = arith_store(m, mm, v, cache_item_flags(it), exp, ct, ctlen, CACHE_MODE_CAS, cas, a,
                            now);
        cache_item_release(it);
        if (r == CACHE_STORED)
            return CACHE_OK;
        if (r != CACHE_EXISTS && r != CACHE_NOT_FOUND) /* else changed or gone meanwhile */
            return CACHE_NO_MEMORY;
    }
    return CACHE_NO_MEMORY;
}

/* The expiry the T and N flags leave on an item ma creates: memcached applies them in request
 * order, the last one wins. */
static uint64_t arith_created_exp(const mc_meta *mm, const mc_tok *t, size_t nt, uint64_t now)
{
    uint64_t exp = 0;
    for (size_t i = 2; i < nt; i++) {
        if (t[i].p[0] == 'T')
            exp = expiry_ms(mm->ttl, now);
        else if (t[i].p[0] == 'N')
            exp = expiry_ms(mm->viv_ttl, now);
    }
    return exp;
}

/* ma <key> <flags>*: HD / VA <len> and the return flags (then the number); NF, EX. q elides a
 * success on an existing item (even with v) and nothing else, as memcached. */
static void cmd_ma(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    mc_meta mm;
    if (!meta_line_ok(m, MC_MA, nt, t))
        return;
    if (!meta_parse(&mm, MC_MA, t, nt, 2)) {
        OUT(m, "CLIENT_ERROR invalid or duplicate flag");
        return;
    }
    bool decr;
    switch (mm.mode) {
    case 0:
    case 'I':
    case '+': decr = false; break;
    case 'D':
    case '-': decr = true; break;
    default: OUT(m, "CLIENT_ERROR invalid mode for ma M token"); return;
    }
    mc_arith a = {0, 0, 0, false};
    int r = meta_arith(m, &mm, decr, arith_created_exp(&mm, t, nt, now), &a, now);
    if (r == CACHE_NOT_NUMERIC) {
        OUT(m, "CLIENT_ERROR cannot increment or decrement non-numeric value");
        return;
    }
    if (r == CACHE_NO_MEMORY) {
        OUT(m, "SERVER_ERROR out of memory");
        return;
    }
    char hdr[MC_META_HDR_MAX];
    size_t n = 2;
    if (r != CACHE_OK) {
        if (r == CACHE_NOT_FOUND)
            stat_add(decr ? &m->ml->decr_misses : &m->ml->incr_misses, 1);
        memcpy(hdr, r == CACHE_NOT_FOUND ? "NF" : "EX", 2);
        if (!put_miss_flags(hdr, &n, &mm, t, nt, 2))
            conn_write(m->c, OPAQUE_TOO_LONG, sizeof OPAQUE_TOO_LONG - 1);
        else
            write_line(m, hdr, n);
        return;
    }
    if (!a.created)
        stat_add(decr ? &m->ml->decr_hits : &m->ml->incr_hits, 1);
    char num[FMT_U64_MAX];
    size_t len = fmt_u64(num, a.value);
    if (mm.v) {
        memcpy(hdr, "VA ", 3);
        n = 3 + fmt_u64(hdr + 3, len);
    } else {
        memcpy(hdr, "HD", 2);
    }
    uint64_t exp = a.base_exp; /* t shows the expiry as set by the T/N flags before it */
    for (size_t i = 2; i < nt; i++) {
        switch (t[i].p[0]) {
        case 'T': exp = expiry_ms(mm.ttl, now); break;
        case 'N':
            if (a.created)
                exp = expiry_ms(mm.viv_ttl, now);
            break;
        case 't': n += put_ttl(hdr + n, exp, now); break;
        case 'c': n += put_u64_flag(hdr + n, 'c', a.cas); break;
        case 'k': n += put_key(hdr + n, mm.key, mm.klen, mm.b); break;
        case 'O':
            if (t[i].n > MC_OPAQUE_MAX) {
                conn_write(m->c, OPAQUE_TOO_LONG, sizeof OPAQUE_TOO_LONG - 1);
                return;
            }
            n += put_opaque(hdr + n, t[i].p, t[i].n);
            break;
        default: break;
        }
    }
    if (mm.q && !a.created)
        return;
    hdr[n++] = '\r';
    hdr[n++] = '\n';
    if (mm.v) {
        memcpy(hdr + n, num, len);
        n += len;
        hdr[n++] = '\r';
        hdr[n++] = '\n';
    }
    conn_write(m->c, hdr, n);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static bool starts(const char *p, size_t n, const char *s)
{
    size_t k = strlen(s);
    return n >= k && memcmp(p, s, k) == 0;
}

/* One complete command line (without its "\r\n"). */
static void command(mc_conn *m, const char *line, size_t n, uint64_t now)
{
    m->noreply = false;
    const char *nul = memchr(line, '\0', n); /* memcached reads the line as a C string */
    if (nul)
        n = (size_t)(nul - line);
    mc_tok t[MC_TOKENS_MAX];
    size_t nt = tokenize(line, n, t);
    if (nt == 0) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    const mc_tok *c0 = &t[0];
    const char *rest = c0->p + c0->n;
    size_t rn = (size_t)(line + n - rest);
    if (tok_is(c0, "get"))
        cmd_get(m, rest, rn, false, false, now);
    else if (tok_is(c0, "gets"))
        cmd_get(m, rest, rn, true, false, now);
    else if (tok_is(c0, "gat"))
        cmd_get(m, rest, rn, false, true, now);
    else if (tok_is(c0, "gats"))
        cmd_get(m, rest, rn, true, true, now);
    else if (tok_is(c0, "set"))
        cmd_store(m, t, nt, CACHE_MODE_SET, now);
    else if (tok_is(c0, "add"))
        cmd_store(m, t, nt, CACHE_MODE_ADD, now);
    else if (tok_is(c0, "replace"))
        cmd_store(m, t, nt, CACHE_MODE_REPLACE, now);
    else if (tok_is(c0, "append"))
        cmd_store(m, t, nt, CACHE_MODE_APPEND, now);
    else if (tok_is(c0, "prepend"))
        cmd_store(m, t, nt, CACHE_MODE_PREPEND, now);
    else if (tok_is(c0, "cas"))
        cmd_store(m, t, nt, CACHE_MODE_CAS, now);
    else if (tok_is(c0, "delete"))
        cmd_delete(m, t, nt, now);
    else if (tok_is(c0, "incr"))
        cmd_incr(m, t, nt, false, now);
    else if (tok_is(c0, "decr"))
        cmd_incr(m, t, nt, true, now);
    else if (tok_is(c0, "touch"))
        cmd_touch(m, t, nt, now);
    else if (tok_is(c0, "flush_all"))
        cmd_flush(m, t, nt, now);
    else if (tok_is(c0, "version"))
        conn_write(m->c, "VERSION " MC_VERSION "\r\n", sizeof("VERSION " MC_VERSION "\r\n") - 1);
    else if (tok_is(c0, "verbosity"))
        cmd_verbosity(m, t, nt);
    else if (tok_is(c0, "stats"))
        cmd_stats(m, nt, now);
    else if (tok_is(c0, "quit"))
        conn_end_after_flush(m->c);
    else if (tok_is(c0, "mg"))
        cmd_mg(m, t, nt, now);
    else if (tok_is(c0, "ms"))
        cmd_ms(m, t, nt, now);
    else if (tok_is(c0, "md"))
        cmd_md(m, t, nt, now);
    else if (tok_is(c0, "ma"))
        cmd_ma(m, t, nt, now);
    else if (tok_is(c0, "mn")) /* the end of a quiet pipeline: whatever follows it */
        conn_write(m->c, "MN\r\n", 4);
    else
        conn_write(m->c, "ERROR\r\n", 7);
}

/* The line buffer. Everything that arrives is consumed: a command line or a get's key that is
 * cut by the end of a read waits here, not in the connection's input buffer, which a full read
 * could not be appended to. */
static bool lbuf_add(mc_conn *m, const char *p, size_t n)
{
    if (n == 0) /* lbuf may be NULL: NULL + 0 and memcpy(NULL, p, 0) are undefined (fuzzing) */
        return true;
    if (m->llen + n > m->lcap) {
        size_t cap = m->lcap ? m->lcap : 256;
        while (cap < m->llen + n)
            cap *= 2;
        char *b = realloc(m->lbuf, cap);
        if (!b)
            return false;
        m->lbuf = b;
        m->lcap = cap;
    }
    memcpy(m->lbuf + m->llen, p, n);
    m->llen += n;
    return true;
}

static void lbuf_reset(mc_conn *m)
{
    m->llen = 0;
    if (m->lcap > 2 * MEMCACHE_LINE_MAX) { /* a rare long line: do not keep its memory */
        free(m->lbuf);
        m->lbuf = NULL;
        m->lcap = 0;
    }
}

/* Keys of a long get, p[0..n) with no newline: answers those followed by a blank and keeps the
 * unfinished last one in the line buffer. false to close (out of memory). */
static bool get_stream(mc_conn *m, const char *p, size_t n, uint64_t now)
{
    size_t cut = n;
    while (cut > 0 && p[cut - 1] != ' ')
        cut--;
    if (cut && !get_keys(m, p, cut, m->get_cas, false, 0, now)) {
        m->state = MC_SKIP_LINE;
        return true;
    }
    if (n - cut > CACHE_KEY_MAX + 1) { /* the unfinished key is already too long ('\r' aside) */
        conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
        m->state = MC_SKIP_LINE;
        return true;
    }
    return lbuf_add(m, p + cut, n - cut);
}

/* A NUL byte ends a long get line where it stands (memcached reads the line as a C string): the
 * keys before it are answered, the rest of the line is skipped. Returns the bytes used. */
static size_t get_nul_end(mc_conn *m, const char *p, const char *nul, uint64_t now)
{
    if (get_keys(m, p, (size_t)(nul - p), m->get_cas, false, 0, now))
        get_end(m);
    m->state = MC_SKIP_LINE;
    return (size_t)(nul - p) + 1;
}

/* A line of more than MEMCACHE_LINE_MAX bytes and no newline yet, all in the line buffer: a long
 * multiget continues as MC_GET_CONT; anything else closes the connection (memcached alike). */
static bool long_line(mc_conn *m, uint64_t now)
{
    size_t lead = 0, n = m->llen;
    while (lead < n && m->lbuf[lead] == ' ')
        lead++;
    if (lead > MC_GET_LEAD_MAX)
        return false;
    bool gets = starts(m->lbuf + lead, n - lead, "gets ");
    if (!gets && !starts(m->lbuf + lead, n - lead, "get "))
        return false;
    m->state = MC_GET_CONT;
    m->get_cas = gets;
    m->noreply = false;
    size_t skip = lead + (gets ? 5 : 4);
    char *line = m->lbuf; /* get_stream refills the buffer: take it over */
    m->lbuf = NULL;
    m->llen = m->lcap = 0;
    const char *nul = memchr(line + skip, '\0', n - skip);
    bool ok = true;
    if (nul)
        get_nul_end(m, line + skip, nul, now);
    else
        ok = get_stream(m, line + skip, n - skip, now);
    free(line);
    return ok;
}

/* MC_GET_CONT: the rest of a long get line. Returns bytes used, or -1 to close. */
static ssize_t get_cont(mc_conn *m, const char *p, size_t n, uint64_t now, bool *done)
{
    *done = false;
    size_t used = 0;
    if (m->llen) { /* finish the key cut by the previous read */
        size_t k = 0;
        while (k < n && p[k] != ' ' && p[k] != '\n' && p[k] != '\0')
            k++;
        if (!lbuf_add(m, p, k))
            return -1;
        used = k;
        if (k == n) {
            if (m->llen > CACHE_KEY_MAX + 1) {
                conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
                lbuf_reset(m);
                m->state = MC_SKIP_LINE;
            }
            return (ssize_t)used;
        }
        size_t kl = m->llen;
        if (p[k] == '\n' && kl && m->lbuf[kl - 1] == '\r')
            kl--;
        bool ok = get_keys(m, m->lbuf, kl, m->get_cas, false, 0, now);
        lbuf_reset(m);
        if (!ok) {
            m->state = MC_SKIP_LINE;
            return (ssize_t)used;
        }
        if (p[k] != ' ') { /* the line's end, or a NUL ending it early */
            get_end(m);
            m->state = p[k] == '\n' ? MC_LINE : MC_SKIP_LINE;
            *done = p[k] == '\n';
            return (ssize_t)used + 1;
        }
        p += k;
        n -= k;
    }
    const char *nl = memchr(p, '\n', n);
    const char *nul = memchr(p, '\0', nl ? (size_t)(nl - p) : n);
    if (nul)
        return (ssize_t)(used + get_nul_end(m, p, nul, now));
    if (nl) {
        size_t seg = (size_t)(nl - p);
        if (seg && p[seg - 1] == '\r')
            seg--;
        if (get_keys(m, p, seg, m->get_cas, false, 0, now))
            get_end(m);
        m->state = MC_LINE;
        *done = true;
        return (ssize_t)(used + (size_t)(nl - p) + 1);
    }
    if (!get_stream(m, p, n, now))
        return -1;
    return (ssize_t)(used + n);
}

static void mc_open(conn *c)
{
    mc_conn *m = conn_state(c);
    m->c = c;
    m->srv = net_listener_ctx(c->listener);
    m->ml = &m->srv->loops[conn_loop(c)->index];
    stat_add(&m->ml->conns_opened, 1);
}

/* MC_LINE: one command line from p (or completing the buffered one). Returns bytes used, -1 to
 * close; *done when a command ran. */
static ssize_t line_in(mc_conn *m, const char *p, size_t n, uint64_t now, bool *done)
{
    const char *nl = memchr(p, '\n', n);
    *done = false;
    if (nl && m->llen == 0) { /* the usual case: the whole line is here */
        size_t ln = (size_t)(nl - p);
        if (ln && p[ln - 1] == '\r')
            ln--;
        command(m, p, ln, now);
        *done = true;
        return (ssize_t)(nl - p) + 1;
    }
    size_t k = nl ? (size_t)(nl - p) : n;
    if (!lbuf_add(m, p, k))
        return -1;
    if (!nl) {
        if (m->llen > MEMCACHE_LINE_MAX && !long_line(m, now))
            return -1;
        return (ssize_t)n;
    }
    size_t ln = m->llen;
    if (ln && m->lbuf[ln - 1] == '\r')
        ln--;
    command(m, m->lbuf, ln, now);
    lbuf_reset(m);
    *done = true;
    return (ssize_t)k + 1;
}

static ssize_t mc_data(conn *c, const char *data, size_t len)
{
    mc_conn *m = conn_state(c);
    uint64_t now = sf_clock_now(sf_clock_system());
    size_t pos = 0;
    unsigned handled = 0;
    bool yielded = false;
    while (pos < len && !conn_closing(c)) {
        const char *p = data + pos;
        size_t n = len - pos;
        if (m->state == MC_DATA) {
            pos += data_in(m, p, n, now);
            if (m->state == MC_LINE)
                handled++;
        } else if (m->state == MC_SWALLOW) {
            size_t k = m->need < n ? (size_t)m->need : n;
            pos += k;
            m->need -= k;
            if (m->need == 0) {
                m->state = MC_LINE;
                handled++;
            }
        } else if (m->state == MC_SKIP_LINE) {
            const char *nl = memchr(p, '\n', n);
            pos += nl ? (size_t)(nl - p) + 1 : n;
            if (nl) {
                m->state = MC_LINE;
                handled++;
            }
        } else {
            /* Fairness and backpressure: the rest waits for a later loop turn. */
            if (handled >= MEMCACHE_MAX_PIPELINE || conn_output_full(c)) {
                conn_yield(c);
                yielded = true;
                break;
            }
            bool done;
            ssize_t k = m->state == MC_GET_CONT ? get_cont(m, p, n, now, &done)
                                                : line_in(m, p, n, now, &done);
            if (k < 0)
                return PROTO_CLOSE;
            pos += (size_t)k;
            if (done)
                handled++;
        }
    }
    if (!conn_closing(c)) {
        bool partial = m->state != MC_LINE || m->llen || (pos < len && !yielded);
        if (partial) {
            if (!m->in_cmd || handled)
                conn_set_timeout(c, CONN_TIMEOUT_HEADER);
            m->in_cmd = true;
        } else if (m->in_cmd || handled) {
            conn_set_timeout(c, CONN_TIMEOUT_IDLE);
            m->in_cmd = false;
        }
    }
    return (ssize_t)pos;
}

static void mc_close(conn *c)
{
    mc_conn *m = conn_state(c);
    cache_item_release(m->item);
    m->item = NULL;
    free(m->lbuf);
    m->lbuf = NULL;
    stat_add(&m->ml->conns_closed, 1);
}

const proto memcache_proto = {
    .name = "memcache",
    .state_size = sizeof(mc_conn),
    .on_open = mc_open,
    .on_data = mc_data,
    .on_timeout = NULL, /* memcached closes idle and stalled connections without a word */
    .on_close = mc_close,
};

/* ---- server ------------------------------------------------------------------------------- */

memcache_server *memcache_server_new(cache_store *store, unsigned nloops)
{
    memcache_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->loops = calloc(nloops ? nloops : 1, sizeof *s->loops);
    if (!s->loops) {
        free(s);
        return NULL;
    }
    s->store = store;
    s->nloops = nloops;
    s->started_ms = sf_clock_now(sf_clock_system());
    return s;
}

void memcache_server_free(memcache_server *s)
{
    if (!s)
        return;
    free(s->loops);
    free(s);
}
