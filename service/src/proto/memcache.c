/* The memcached text protocol (memcache.h): the classic commands (get/gets/gat/gats, the storage
 * commands and their data blocks, delete, incr/decr, touch, flush_all, verbosity), the command
 * dispatch, the line buffer with its long-get streaming, the per-read state machine, and the
 * server object. The meta commands mg, ms, md, ma are in memcache_meta.c, "stats" in
 * memcache_stats.c; what the files share (connection state, counters, reply and number helpers)
 * is in memcache_int.h. */
#include "proto/memcache.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/conn.h"
#include "net/loop.h"
#include "proto/memcache_int.h"
#include "util/clock.h"
#include "util/fmt.h"

/* Replies are byte-exact with memcached 1.6.18, checked session by session against the real one
 * (test/integration/test_memcache_diff.py). The differences we keep on purpose:
 *  - keys: 1..250 bytes of 0x21..0x7e (cache_key_valid, the rule protocol.txt states); memcached
 *    also takes control and non-ASCII bytes. Storing such a key with a classic command is a
 *    CLIENT_ERROR here; in base64 (the meta b flag) any bytes are a key, as in memcached.
 *  - the item size limit counts the value only (cache.max_item_bytes); memcached's 1 MiB
 *    includes its ~50-byte header and the key.
 *  - numbers beyond 32 bits in flags, exptime or a length are refused (mc_parse_u32, mc_parse_i32);
 *    memcached truncates them silently (flags 4294967296 become 0).
 *  - incr/decr (the store's cache_incr): the value must be plain digits (memcached's strtoull
 *    also takes " 12" or "12 34"), and a shorter result is stored as is, where memcached pads
 *    it with spaces in place (protocol.txt says clients must not rely on either).
 *  - a refused storage command (classic or ms) whose length reads swallows its data block
 *    whatever the refusal (mc_store_refuse); memcached swallows only after a failed allocation
 *    and reads the block of a line refused for its key, numbers or meta flags as commands, so a
 *    stored value could flush the cache (issue 21).
 *  - a value whose data block is not whole in the read of its line is staged as it arrives,
 *    taking its bytes from the in-flight budget, and its item is allocated once the block is in
 *    (mc_store_begin); memcached allocates the item at the line, so a line that announces a value
 *    and sends none holds its whole length. A refusal by the budget keeps the key's old value;
 *    memcached's failed allocation drops it (we still do, when the cache itself fails).
 *  - client bytes shown to others have their control characters escaped as the log does
 *    (mc_escaped: stats detail dump's prefixes, stats cachedump's keys); meta k echoes a key
 *    with blanks or control characters in base64 (memcache_meta.c put_key). memcached prints
 *    them raw, so a key could forge reply lines.
 *  - before authentication (-Y, cache.memcached_auth_file) every line is answered; memcached
 *    writes each unauthenticated answer over the previous one while it is unsent, so of lines
 *    pipelined in one read only the last is answered (which depends on how the bytes were cut
 *    into reads; a client that counts replies loses sync). A client that waits for each answer
 *    sees the same bytes (test_memcache_auth.py KnownDifferences pins the rest).
 *  - version is 1.6.18-snowflaked-<ours>; stats: see memcache_stats.c.
 *  - meta commands: see memcache_meta.c ("me" reports our item's size and the memcached slab
 *    class of that size). */

/* The tokens memcached's tokenizer keeps (its MAX_TOKENS, 24, counts the end marker): the rest of
 * a longer line is not looked at, as there (its last token, noreply or "HTTP/", is the 23rd). */
#define MC_TOKENS_MAX   23
#define MC_GET_LEAD_MAX 100 /* leading blanks memcached tolerates before a long "get " */

/* ---- output ------------------------------------------------------------------------------ */

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
    if (with_cas) { /* memcached -C: every CAS reads 0 */
        hdr[n++] = ' ';
        n += fmt_u64(hdr + n, m->srv->opts.cas_enabled ? cache_item_cas(it) : 0);
    }
    hdr[n++] = '\r';
    hdr[n++] = '\n';
    if (conn_write(m->c, hdr, n) == 0 && conn_write(m->c, cache_item_value(it), vlen) == 0)
        conn_write(m->c, "\r\n", 2);
}

/* ---- parsing helpers ---------------------------------------------------------------------- */

/* memcached reads numbers with strtoull/strtol (util.c safe_strto*): leading white space, an
 * optional sign, decimal digits, then the end of the token or a white-space byte after which the
 * rest is ignored. Tokens are split on ' ' only, so "+5", "-0", "5\t" and a stray "\r" pass.
 * This is not util/decimal.h's strict reader, on purpose: what memcached's clients send is read
 * as memcached reads it (also any count of leading zeros, where the strict reader stops at 20
 * digits), and test_memcache_diff holds the two servers to the same answers. */
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
bool mc_parse_u64(const mc_tok *t, uint64_t *out_v)
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
bool mc_parse_u32(const mc_tok *t, uint32_t *out_v)
{
    uint64_t v;
    if (!mc_parse_u64(t, &v) || v > UINT32_MAX)
        return false;
    *out_v = (uint32_t)v;
    return true;
}

/* safe_strtol into an int32. memcached truncates a 64-bit long here too (exptime 4294967296 is 0,
 * a length of 4294967297 reads 1 byte); we refuse values outside int32, as above. */
bool mc_parse_i32(const mc_tok *t, int64_t *out_v)
{
    bool neg;
    uint64_t v;
    if (!scan_number(t, &neg, &v) || v > (neg ? 2147483648u : 2147483647u))
        return false;
    *out_v = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

/* Splits on ' ' (empty tokens skipped, as memcached) into t[0..MC_TOKENS_MAX). Returns the count,
 * never more than MC_TOKENS_MAX: every t[0..count) is filled, so a command may read t[nt - 1]. */
static size_t tokenize(const char *p, size_t n, mc_tok *t)
{
    size_t k = 0, i = 0;
    while (i < n && k < MC_TOKENS_MAX) {
        while (i < n && p[i] == ' ')
            i++;
        if (i == n)
            break;
        size_t s = i;
        while (i < n && p[i] != ' ')
            i++;
        t[k].p = p + s;
        t[k].n = i - s;
        k++;
    }
    return k;
}

/* ---- retrieval ---------------------------------------------------------------------------- */

typedef enum { GET_DONE, GET_FAILED, GET_PAUSED } get_result;

/* After a value: whether the output is at its high-water mark with keys left in p[i..n), *stop
 * then the offset of the next one. */
static bool get_pause(mc_conn *m, const char *p, size_t n, size_t i, size_t *stop)
{
    if (!conn_output_full(m->c))
        return false;
    while (i < n && p[i] == ' ')
        i++;
    if (i == n)
        return false;
    *stop = i;
    m->get_paused = true;
    return true;
}

/* Answers the space-separated keys in p[0..n) (as get/gets/gat/gats per m->get_*).
 * GET_FAILED (with the error written) on a key that is too long, as memcached: the values
 * before it stay, no END; also when the connection is closing. A value that fills the output to
 * its high-water mark pauses the command while keys remain: GET_PAUSED with *stop = the offset
 * of the rest, to be answered once the output drains (conn backpressure), so a multiget of any
 * size streams through a bounded buffer as memcached's does. */
static get_result get_keys(mc_conn *m, const char *p, size_t n, uint64_t now, size_t *stop)
{
    cache_store *store = m->srv->store;
    mc_id_spans ids;
    ids.want[MC_ID_SEQUENCE] = ids.used[MC_ID_SEQUENCE] = 0;
    if (m->srv->ids_on && !mc_ids_reserve(m, p, n, &ids))
        return GET_FAILED; /* the refusal is the whole answer (nothing written before it) */
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
        m->get_any = true;
        if (klen > CACHE_KEY_MAX) {
            conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
            return GET_FAILED;
        }
        /* memcached counts so */
        counter_add(m->get_touch ? &m->ml->cmd_touch : &m->ml->cmd_get, 1);
        int idf = mc_id_key(m->srv, key, klen);
        if (idf >= 0) { /* an ID key: never looked up in the store (gat touches nothing) */
            if (!mc_ids_value(m, &ids, idf, key, klen, m->get_cas) || conn_closing(m->c))
                return GET_FAILED;
            if (!mc_ids_pending(&ids) && get_pause(m, p, n, i, stop))
                return GET_PAUSED;
            continue;
        }
        cache_item *it = cache_get(store, key, klen, now);
        mc_detail_record(m->srv, key, klen, it ? MC_DETAIL_HIT : MC_DETAIL_GET);
        if (mc_watching(&m->srv->watch, MC_LOG_FETCHERS))
            mc_watch_get(m, key, klen, it);
        if (!it)
            continue;
        if (m->get_touch)
            cache_touch(store, key, klen, m->get_exp, now);
        out_value(m, it, m->get_cas);
        cache_item_release(it);
        if (conn_closing(m->c))
            return GET_FAILED;
        if (!mc_ids_pending(&ids) && get_pause(m, p, n, i, stop))
            return GET_PAUSED;
    }
    return GET_DONE;
}

/* The end of a get's answer; a get line that named no key is an ERROR (as when it comes in one
 * read: cmd_get), also when it was streamed as a long line. */
static void get_end(mc_conn *m)
{
    if (m->get_any) {
        conn_write(m->c, "END\r\n", 5);
        m->resp_stacked = false; /* memcached writes a get's answer out at once */
    } else {
        conn_write(m->c, "ERROR\r\n", 7);
    }
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
        if (!mc_parse_i32(&t, &e)) {
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
    m->get_cas = with_cas;
    m->get_touch = touch;
    m->get_exp = exp_ms;
    m->get_any = true; /* "gat <exptime>" without a key answers END */
    size_t stop;
    get_result r = get_keys(m, rest, n, now, &stop);
    if (r == GET_DONE)
        get_end(m);
    else if (r == GET_PAUSED) { /* the rest of the line stays in the input (get_cont) */
        m->state = MC_GET_CONT;
        m->get_stop = rest + stop;
    }
}

/* ---- storage ------------------------------------------------------------------------------ */

/* ---- data blocks: received into the item, or swallowed ----------------------------------- */

int64_t mc_data_len(const mc_tok *t)
{
    int64_t v;
    if (!mc_parse_i32(t, &v) || v < 0 || v > INT32_MAX - 2)
        return -1;
    return v;
}

void mc_swallow(mc_conn *m, int64_t vlen)
{
    if (vlen < 0)
        return;
    m->state = MC_SWALLOW;
    m->need = (uint64_t)vlen + 2;
}

void mc_store_refuse(mc_conn *m, const char *err, size_t errlen, int64_t vlen)
{
    out(m, err, errlen);
    out(m, "\r\n", 2);
    mc_swallow(m, vlen);
}

#define STORE_REFUSE(m, lit, vlen) mc_store_refuse((m), lit, sizeof(lit) - 1, (vlen))

void mc_store_failed(mc_conn *m, const char *key, size_t klen, int err, int64_t vlen,
                     bool drop_old, uint64_t now)
{
    if (err == CACHE_BAD_KEY || err == CACHE_BAD_ARG) {
        STORE_REFUSE(m, "CLIENT_ERROR bad command line format", vlen);
        return;
    }
    mc_count_refusal(m, err);
    if (err == CACHE_TOO_LARGE)
        STORE_REFUSE(m, "SERVER_ERROR object too large for cache", vlen);
    else
        STORE_REFUSE(m, "SERVER_ERROR out of memory storing object", vlen);
    if (m->meta) { /* memcached drops the old value whatever the mode */
        if (drop_old)
            cache_delete(m->srv->store, key, klen, 0, now);
        return;
    }
    if (mc_watching(&m->srv->watch, MC_LOG_MUTATIONS))
        mc_watch_store(m, key, klen, err, (cache_mode)m->mode, 0, 0, 0, NULL, now);
    /* memcached: a failed set must not leave the old value visible */
    if (drop_old && m->mode == CACHE_MODE_SET) {
        if (mc_watching(&m->srv->watch, MC_LOG_FETCHERS)) {
            mc_watch_prior prior;
            mc_watch_peek(m, key, klen, now, &prior);
        }
        cache_delete(m->srv->store, key, klen, 0, now);
    }
}

static void data_begin(mc_conn *m, cache_item *it, uint32_t vlen)
{
    m->item = it;
    m->vlen = vlen;
    m->need = (uint64_t)vlen + 2;
    m->state = MC_DATA;
}

void mc_store_begin(mc_conn *m, const mc_value *v, uint64_t now)
{
    cache_store *s = m->srv->store;
    size_t vlen = (size_t)v->vlen;
    int err;
    if (m->line_rest >= vlen + 2) { /* the whole block is here: nothing waits on the network */
        cache_item *it = cache_item_new_ex(s, v->key, v->klen, vlen, v->flags, v->expiry_ms, NULL,
                                           0, v->marks, &err);
        if (!it)
            mc_store_failed(m, v->key, v->klen, err, v->vlen, true, now);
        else
            data_begin(m, it, (uint32_t)vlen);
        return;
    }
    err = cache_item_check(s, v->key, v->klen, vlen, v->flags, NULL, 0, v->marks);
    if (err != CACHE_OK) {
        mc_store_failed(m, v->key, v->klen, err, v->vlen, true, now);
        return;
    }
    if (m->srv->inflight && !budget_admits(m->srv->inflight, vlen)) {
        mc_store_failed(m, v->key, v->klen, CACHE_NO_MEMORY, v->vlen, false, now);
        return;
    }
    memcpy(m->pend_key, v->key, v->klen);
    m->pend_klen = (uint8_t)v->klen;
    m->pend_marks = (uint8_t)v->marks;
    m->pend_flags = v->flags;
    m->pend_exp = v->expiry_ms;
    data_begin(m, NULL, (uint32_t)vlen);
}

/* <cmd> <key> <flags> <exptime> <bytes> [<cas unique>] [noreply]. Once the line has a storage
 * command's shape, every refusal swallows the data block when <bytes> reads as a length (memcached
 * only does after a failed allocation, and reads the block of a line it refused for its key or
 * numbers as commands: a value would be a command). */
static void cmd_store(mc_conn *m, const mc_tok *t, size_t nt, cache_mode mode, uint64_t now)
{
    size_t want = mode == CACHE_MODE_CAS ? 6 : 5;
    if (nt != want && nt != want + 1) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    m->noreply = nt == want + 1 && tok_is(&t[want], "noreply");
    int64_t vlen = mc_data_len(&t[4]);
    uint32_t flags;
    int64_t exptime;
    uint64_t cas = 0;
    if (vlen < 0 || t[1].n > CACHE_KEY_MAX || !mc_parse_u32(&t[2], &flags) ||
        !mc_parse_i32(&t[3], &exptime) || (mode == CACHE_MODE_CAS && !mc_parse_u64(&t[5], &cas)) ||
        !cache_key_valid(t[1].p, t[1].n)) {
        STORE_REFUSE(m, "CLIENT_ERROR bad command line format", vlen);
        return;
    }
    if (mc_id_key(m->srv, t[1].p, t[1].n) >= 0) { /* the block is swallowed, not stored */
        STORE_REFUSE(m, MC_ID_KEY_REFUSED, vlen);
        return;
    }
    mc_detail_record(m->srv, t[1].p, t[1].n, MC_DETAIL_SET);
    m->meta = false;
    m->mode = (uint8_t)mode;
    m->cas_in = cas;
    mc_store_begin(m,
                   &(mc_value){.key = t[1].p, .klen = t[1].n, .vlen = vlen, .flags = flags,
                               .expiry_ms = expiry_ms(exptime, now)},
                   now);
}

static void store_done(mc_conn *m, uint64_t now)
{
    cache_item *it = m->item;
    m->item = NULL;
    mc_value_release(m);
    m->state = MC_LINE;
    counter_add(&m->ml->cmd_set, 1);
    if (m->tail[0] != '\r' || m->tail[1] != '\n') {
        cache_item_release(it);
        if (m->meta) /* ms reports errors even in quiet mode */
            conn_write(m->c, "CLIENT_ERROR bad data chunk\r\n", 29);
        else
            OUT(m, "CLIENT_ERROR bad data chunk");
        return;
    }
    if (m->meta) {
        mc_meta_ms_done(m, it, now);
        return;
    }
    cache_mode mode = (cache_mode)m->mode;
    uint64_t cas_in = m->cas_in;
    bool cas_off = mode == CACHE_MODE_CAS && !m->srv->opts.cas_enabled;
    if (cas_off) { /* memcached -C: items' CAS are 0; only a cas of 0 matches */
        if (cas_in == 0)
            mode = CACHE_MODE_REPLACE;
        else
            cas_in = UINT64_MAX; /* never issued: EXISTS when present, NOT_FOUND when absent */
    }
    char key[CACHE_KEY_MAX]; /* a refused set deletes its key after the store took the item */
    size_t klen = 0;
    if (mode == CACHE_MODE_SET) {
        klen = cache_item_klen(it);
        memcpy(key, cache_item_key(it), klen);
    }
    /* watch: the lookup memcached's store makes (item_get), then the store (item_store) */
    bool watched = mc_watching(&m->srv->watch, MC_LOG_FETCHERS | MC_LOG_MUTATIONS);
    char wkey[CACHE_KEY_MAX];
    size_t wklen = 0;
    mc_watch_prior prior;
    uint32_t wflags = 0;
    uint64_t wexp = 0;
    if (watched) {
        wklen = cache_item_klen(it);
        memcpy(wkey, cache_item_key(it), wklen);
        wflags = cache_item_flags(it);
        wexp = cache_item_expiry(it);
        mc_watch_peek(m, wkey, wklen, now, &prior);
    }
    int r = cache_store_item(m->srv->store, it, mode, cas_in, NULL, now);
    if (cas_off && r == CACHE_NOT_STORED)
        r = CACHE_NOT_FOUND;
    if (watched && mc_watching(&m->srv->watch, MC_LOG_MUTATIONS))
        mc_watch_store(m, wkey, wklen, r, (cache_mode)m->mode, m->vlen, wflags, wexp, &prior, now);
    switch (r) {
    case CACHE_STORED:
        counter_add(&m->ml->total_items, 1);
        OUT(m, "STORED");
        break;
    case CACHE_NOT_STORED: OUT(m, "NOT_STORED"); break;
    case CACHE_EXISTS: OUT(m, "EXISTS"); break;
    case CACHE_NOT_FOUND: OUT(m, "NOT_FOUND"); break;
    case CACHE_TOO_LARGE:
    case CACHE_NO_MEMORY:
        /* memcached: an append/prepend whose result cannot be allocated is NOT_STORED */
        if (m->mode == CACHE_MODE_APPEND || m->mode == CACHE_MODE_PREPEND) {
            OUT(m, "NOT_STORED");
            break;
        }
        mc_count_refusal(m, r);
        /* as when the allocation fails: a failed set must not leave the old value visible */
        if (mode == CACHE_MODE_SET)
            cache_delete(m->srv->store, key, klen, 0, now);
        if (r == CACHE_TOO_LARGE)
            OUT(m, "SERVER_ERROR object too large for cache");
        else
            OUT(m, "SERVER_ERROR out of memory storing object");
        break;
    default: OUT(m, "SERVER_ERROR out of memory storing object"); break;
    }
}

/* Value bytes of a staged value (MC_DATA without item), taken from the in-flight budget as they
 * arrive, the command's share being what it already holds. False: refused (the budget, or the
 * chunk pool out of memory), nothing taken. */
static bool stage_in(mc_conn *m, const char *p, size_t k)
{
    byte_budget *b = m->srv->inflight;
    if (b && !budget_take_share(b, m->held, k))
        return false;
    if (obuf_append(&m->stage, p, k) != 0) {
        if (b)
            budget_give(b, k);
        return false;
    }
    if (b)
        m->held += (uint32_t)k;
    return true;
}

/* A staged value is in (and its "\r\n"): its item is allocated and filled from the stage. False
 * when the allocation failed (answered as at the line, mc_store_failed; back to MC_LINE). */
static bool stage_done(mc_conn *m, uint64_t now)
{
    if (m->tail[0] != '\r' || m->tail[1] != '\n')
        return true; /* store_done answers the bad data chunk */
    int err;
    cache_item *it = cache_item_new_ex(m->srv->store, m->pend_key, m->pend_klen, m->vlen,
                                       m->pend_flags, m->pend_exp, NULL, 0, m->pend_marks, &err);
    if (!it) {
        mc_value_release(m);
        m->state = MC_LINE;
        mc_store_failed(m, m->pend_key, m->pend_klen, err, -1, true, now);
        return false;
    }
    char *dst = cache_item_value_mut(it);
    for (const obuf_chunk *ch = m->stage.head; ch; ch = ch->next) {
        memcpy(dst, ch->data + ch->start, ch->end - ch->start);
        dst += ch->end - ch->start;
    }
    m->item = it;
    return true;
}

/* MC_DATA: copies what arrived into the item (or the stage); stores it once value and "\r\n" are
 * complete. A staged byte past the in-flight budget refuses the command: the rest of its block
 * is swallowed, the key's old value stays. */
static size_t data_in(mc_conn *m, const char *p, size_t n, uint64_t now)
{
    uint64_t total = (uint64_t)m->vlen + 2, got = total - m->need;
    size_t used = 0;
    if (got < m->vlen) {
        size_t k = m->vlen - got < n ? (size_t)(m->vlen - got) : n;
        if (m->item) {
            memcpy(cache_item_value_mut(m->item) + got, p, k);
        } else if (!stage_in(m, p, k)) {
            mc_value_release(m);
            mc_store_failed(m, m->pend_key, m->pend_klen, CACHE_NO_MEMORY,
                            (int64_t)(m->vlen - got), false, now);
            return 0; /* MC_SWALLOW: the rest of the block, these bytes first */
        }
        used = k;
        got += k;
    }
    while (used < n && got < total)
        m->tail[got++ - m->vlen] = p[used++];
    m->need = total - got;
    if (m->need == 0 && (m->item || stage_done(m, now)))
        store_done(m, now);
    return used;
}

/* ---- other commands ----------------------------------------------------------------------- */

/* delete, incr, decr, touch of a reserved ID key: refused (an ID is not a cached value), true
 * with the error written (nothing under noreply, as their other errors). */
static bool id_key_refused(mc_conn *m, const mc_tok *key)
{
    if (mc_id_key(m->srv, key->p, key->n) < 0)
        return false;
    OUT(m, MC_ID_KEY_REFUSED);
    return true;
}

/* watch fetchers: the lookup memcached's delete, incr/decr and touch make (an item_get line). */
static void watch_lookup(mc_conn *m, const mc_tok *key, uint64_t now)
{
    if (mc_watching(&m->srv->watch, MC_LOG_FETCHERS)) {
        mc_watch_prior prior;
        mc_watch_peek(m, key->p, key->n, now, &prior);
    }
}

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
    if (id_key_refused(m, &t[1]))
        return;
    mc_detail_record(m->srv, t[1].p, t[1].n, MC_DETAIL_DEL);
    watch_lookup(m, &t[1], now);
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
    if (!mc_parse_u64(&t[2], &delta)) {
        OUT(m, "CLIENT_ERROR invalid numeric delta argument");
        return;
    }
    if (id_key_refused(m, &t[1]))
        return;
    watch_lookup(m, &t[1], now);
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
    if (!mc_parse_i32(&t[2], &e)) {
        OUT(m, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    if (id_key_refused(m, &t[1]))
        return;
    counter_add(&m->ml->cmd_touch, 1);
    watch_lookup(m, &t[1], now);
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
    counter_add(&m->ml->cmd_flush, 1);
    if (!m->srv->opts.flush_enabled) { /* memcached -F; still counted, as there */
        OUT(m, "CLIENT_ERROR flush_all not allowed");
        return;
    }
    /* memcached reads a delay whenever there is a token besides noreply ("flush_all 5 x" waits
     * 5 s; "flush_all x y" is an error) */
    if (nt != (m->noreply ? 2u : 1u) && !mc_parse_i32(&t[1], &delay)) {
        OUT(m, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    uint64_t at = delay > 0 ? expiry_ms(delay, now) : now;
    cache_flush_all(m->srv->store, at, now);
    atomic_store_explicit(&m->srv->admin.flushed_ms, at, memory_order_relaxed);
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
    if (!mc_parse_u32(&t[1], &level)) {
        OUT(m, "CLIENT_ERROR bad command line format");
        return;
    }
    /* the level is kept for "stats settings" only: logging has its own configuration */
    atomic_store_explicit(&m->srv->verbosity, level, memory_order_relaxed);
    OUT(m, "OK");
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static bool starts(const char *p, size_t n, const char *s)
{
    size_t k = strlen(s);
    return n >= k && memcmp(p, s, k) == 0;
}

/* Cross-protocol protection, as memcached 1.6.18 (proto_text.c, the last branch of
 * process_command_ascii): a line whose command memcached does not know, and whose last token
 * (the 23rd when there are more, where the tokenizer stops) starts with "HTTP/", is an
 * HTTP request line ("GET / HTTP/1.1", "POST /x HTTP/1.0"): the connection is closed without a
 * word, so a web page cannot use a browser to speak to the cache. Commands memcached dispatches
 * by their first letter (g, s, a, c, i, d, t, two-letter m...) or knows by name answer their own
 * error instead, whatever their last token. */
static bool looks_like_http(const mc_tok *t, size_t nt)
{
    static const char *const named[] = {"replace", "prepend", "bget",    "flush_all", "version",
                                        "quit",    "lru_crawler", "watch", "verbosity", "lru"};
    const mc_tok *c0 = &t[0];
    if (c0->n < 2 || strchr("gsacidt", c0->p[0]) || (c0->p[0] == 'm' && c0->n == 2))
        return false;
    for (size_t i = 0; i < sizeof named / sizeof *named; i++)
        if (tok_is(c0, named[i]))
            return false;
    const mc_tok *last = &t[nt - 1];
    return last->n >= 5 && memcmp(last->p, "HTTP/", 5) == 0;
}

static bool is_meta(const mc_tok *c0)
{
    return tok_is(c0, "mg") || tok_is(c0, "ms") || tok_is(c0, "md") || tok_is(c0, "ma") ||
           tok_is(c0, "me") || tok_is(c0, "mn");
}

/* mg, ms, md, ma, me, mn: counted together in cmd_meta ("number of meta commands", as
 * protocol.txt defines it; memcached 1.6.18 itself counts only me there). */
static void meta_command(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    counter_add(&m->ml->cmd_meta, 1);
    const mc_tok *c0 = &t[0];
    if (tok_is(c0, "mg"))
        mc_meta_mg(m, t, nt, now);
    else if (tok_is(c0, "ms"))
        mc_meta_ms(m, t, nt, now);
    else if (tok_is(c0, "md"))
        mc_meta_md(m, t, nt, now);
    else if (tok_is(c0, "ma"))
        mc_meta_ma(m, t, nt, now);
    else if (tok_is(c0, "me"))
        mc_meta_me(m, t, nt, now);
    else { /* mn: the end of a quiet pipeline, whatever follows it */
        conn_write(m->c, "MN\r\n", 4);
        m->resp_stacked = false; /* memcached flushes at mn */
    }
}

/* One complete command line (without its "\r\n"). */
static void command(mc_conn *m, const char *line, size_t n, uint64_t now)
{
    /* memcached's resp stack: replies wait until the read's commands are done, except a get's
     * (get_end) and mn's, which go out at once; watch refuses to start behind a waiting one. */
    bool stacked = m->resp_stacked;
    m->resp_stacked = true;
    m->noreply = false;
    const char *nul = memchr(line, '\0', n); /* memcached reads the line as a C string */
    if (nul)
        n = (size_t)(nul - line);
    mc_tok t[MC_TOKENS_MAX];
    size_t nt = tokenize(line, n, t);
    m->last_cmd_ms = now;
    counter_add(&m->ml->commands, 1);
    if (nt == 0) {
        conn_write(m->c, "ERROR\r\n", 7);
        return;
    }
    const mc_tok *c0 = &t[0];
    const char *rest = c0->p + c0->n;
    size_t rn = (size_t)(line + n - rest);
    if (tok_is(c0, "get") || tok_is(c0, "bget")) /* bget: memcached's ancient alias */
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
    else if (tok_is(c0, "shutdown"))
        mc_admin_shutdown(m, t, nt);
    else if (tok_is(c0, "refresh_certs"))
        mc_admin_refresh_certs(m, t, nt);
    else if (tok_is(c0, "slabs"))
        mc_admin_slabs(m, t, nt);
    else if (tok_is(c0, "lru"))
        mc_admin_lru(m, t, nt);
    else if (tok_is(c0, "lru_crawler"))
        mc_admin_lru_crawler(m, t, nt, now);
    else if (tok_is(c0, "cache_memlimit"))
        mc_admin_memlimit(m, t, nt);
    else if (tok_is(c0, "debugtime") && m->srv->opts.debug_commands) /* memcached-debug only */
        mc_admin_debugtime(m, t, nt);
    else if (tok_is(c0, "stats"))
        mc_cmd_stats(m, t, nt, now);
    else if (tok_is(c0, "quit")) {
        m->close_reason = MC_CLOSE_NORMAL;
        conn_end_after_flush(m->c);
    } else if (tok_is(c0, "watch"))
        mc_watch_command(m, t, nt, stacked);
    else if (c0->n == 2 && c0->p[0] == 'm' && is_meta(c0))
        meta_command(m, t, nt, now);
    else if (looks_like_http(t, nt)) {
        m->close_reason = MC_CLOSE_ERROR;
        conn_close(m->c); /* no reply: a browser tricked into POSTing here cannot drive us */
    } else
        conn_write(m->c, "ERROR\r\n", 7);
}

/* ---- input: parsed in place ------------------------------------------------------------------ */

/* Bytes a step does not consume stay in the connection's input buffer and come back, with what
 * arrives next, at the start of mc_data's data: an unfinished command line, or the unfinished last
 * key of a long get line. Nothing is copied. */
typedef enum {
    MC_STEP_MORE,   /* the rest is unfinished (a line, a key): wait for more bytes */
    MC_STEP_GO,     /* consumed something; go on */
    MC_STEP_DONE,   /* a command finished (counted for fairness); go on */
    MC_STEP_PAUSED, /* a get paused on a full output: the rest waits until it drains */
    MC_STEP_CLOSE,  /* close the connection */
} mc_step;

/* A line of more than MEMCACHE_LINE_MAX bytes and no newline yet: a long multiget continues as
 * MC_GET_CONT, its keys answered as they arrive; anything else closes the connection (memcached
 * alike). Returns the bytes of the line's head ("get ") or -1. */
static ssize_t long_line(mc_conn *m, const char *p, size_t n)
{
    size_t lead = 0;
    while (lead < n && p[lead] == ' ')
        lead++;
    if (lead > MC_GET_LEAD_MAX)
        return -1;
    bool gets = starts(p + lead, n - lead, "gets ");
    if (!gets && !starts(p + lead, n - lead, "get "))
        return -1;
    m->state = MC_GET_CONT;
    m->get_cas = gets;
    m->get_touch = false;
    m->get_any = false;
    m->noreply = false;
    counter_add(&m->ml->commands, 1); /* one command, however long (command() counts the rest) */
    return (ssize_t)(lead + (gets ? 5 : 4));
}

/* MC_LINE: one command line from p. */
static mc_step line_in(mc_conn *m, const char *p, size_t n, uint64_t now, size_t *used)
{
    const char *nl = memchr(p, '\n', n);
    if (!nl) {
        *used = 0;
        if (n <= MEMCACHE_LINE_MAX)
            return MC_STEP_MORE;
        ssize_t head = long_line(m, p, n);
        if (head < 0)
            return MC_STEP_CLOSE;
        *used = (size_t)head;
        return MC_STEP_GO;
    }
    size_t ln = (size_t)(nl - p);
    m->line_rest = n - ln - 1; /* what a storage command's block may find here (mc_store_begin) */
    if (ln && p[ln - 1] == '\r')
        ln--;
    command(m, p, ln, now);
    if (m->state == MC_WALK) { /* the "\n" stays until the walk ends: mc_data comes back */
        *used = (size_t)(nl - p);
        return MC_STEP_GO;
    }
    if (m->get_stop) { /* a get paused on a full output: the rest of its line stays (MC_GET_CONT) */
        *used = (size_t)(m->get_stop - p);
        m->get_stop = NULL;
        return MC_STEP_DONE; /* the command ran (the output is full: mc_data yields next) */
    }
    *used = (size_t)(nl - p) + 1;
    return MC_STEP_DONE;
}

/* MC_GET_CONT: the rest of a get line (after a pause, or of a long line still arriving). */
static mc_step get_cont(mc_conn *m, const char *p, size_t n, uint64_t now, size_t *used)
{
    const char *nl = memchr(p, '\n', n);
    size_t end = nl ? (size_t)(nl - p) : n, stop;
    const char *nul = memchr(p, '\0', end);
    if (nul) { /* the line ends there (memcached reads it as a C string); the rest is skipped */
        get_result r = get_keys(m, p, (size_t)(nul - p), now, &stop);
        if (r == GET_PAUSED) {
            *used = stop;
            return MC_STEP_PAUSED;
        }
        if (r == GET_DONE)
            get_end(m);
        m->state = MC_SKIP_LINE;
        *used = (size_t)(nul - p) + 1;
        return MC_STEP_GO;
    }
    if (nl) {
        size_t seg = end;
        if (seg && p[seg - 1] == '\r')
            seg--;
        get_result r = get_keys(m, p, seg, now, &stop);
        if (r == GET_PAUSED) {
            *used = stop;
            return MC_STEP_PAUSED;
        }
        if (r == GET_DONE)
            get_end(m);
        m->state = MC_LINE;
        *used = end + 1;
        return MC_STEP_DONE;
    }
    /* No line end yet: the keys followed by a blank are answered; the unfinished last one waits
     * in the input for the rest of it. */
    size_t cut = n;
    while (cut > 0 && p[cut - 1] != ' ')
        cut--;
    if (cut) {
        get_result r = get_keys(m, p, cut, now, &stop);
        if (r == GET_PAUSED) {
            *used = stop;
            return MC_STEP_PAUSED;
        }
        if (r == GET_FAILED) {
            m->state = MC_SKIP_LINE;
            *used = n;
            return MC_STEP_GO;
        }
    }
    if (n - cut > CACHE_KEY_MAX + 1) { /* the unfinished key is already too long ('\r' aside) */
        conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
        m->state = MC_SKIP_LINE;
        *used = n;
        return MC_STEP_GO;
    }
    *used = cut;
    return cut ? MC_STEP_GO : MC_STEP_MORE;
}

/* ---- authentication (memcached -Y, memcache_auth.h) ------------------------------------------ */

/* Until its credentials match, a connection's lines are read as memcached 1.6.18 reads them
 * (proto_text.c try_read_command_asciiauth): a "set <key> <flags> <exptime> <bytes>" whose data
 * block is "<user> <password>" authenticates (STORED; key, flags and exptime are not looked at,
 * nothing is stored), and the connection continues as any other, with what followed in the same
 * read; a wrong pair answers CLIENT_ERROR authentication failure, and every other line CLIENT_ERROR
 * unauthenticated; the connection stays open for another try, as memcached's does. Every line
 * gets its answer, also when several came in one read (memcached keeps only the last: the list
 * of differences at the top). memcached closes a line of more than 2048 bytes without its
 * newline (or longer than its 16 KiB read buffer), and a block that buffer cannot hold when a
 * byte comes beyond the full buffer: the same here, without the buffer (the block is read as it
 * comes, its tokens' bytes kept while they could match). */

#define MC_AUTH_READ_MAX 16384 /* memcached's READ_BUFFER_SIZE */
#define MC_REPLY(lit)    conn_write(m->c, lit "\r\n", sizeof(lit "\r\n") - 1)

static mc_step auth_line_in(mc_conn *m, const char *p, size_t n, uint64_t now, size_t *used)
{
    *used = 0;
    if (n < 2) /* memcached: "impossible for the auth command to be this short": it waits */
        return MC_STEP_MORE;
    const char *nl = memchr(p, '\n', n);
    if (!nl)
        return n > MEMCACHE_LINE_MAX ? MC_STEP_CLOSE : MC_STEP_MORE;
    size_t ln = (size_t)(nl - p);
    if (ln + 1 > MC_AUTH_READ_MAX) /* never whole in memcached's read buffer: it closes */
        return MC_STEP_CLOSE;
    *used = ln + 1;
    m->last_cmd_ms = now;
    m->resp_stacked = true;
    const char *nul = memchr(p, '\0', ln); /* a C string there */
    if (nul)
        ln = (size_t)(nul - p);
    mc_tok t[MC_TOKENS_MAX];
    size_t nt = tokenize(p, ln, t); /* the '\r' stays, as there: a number is read up to it */
    uint64_t size;
    if (nt < 5 || !tok_is(&t[0], "set") || !mc_parse_u64(&t[4], &size)) {
        MC_REPLY("CLIENT_ERROR unauthenticated");
        return MC_STEP_DONE;
    }
    size = (uint32_t)size; /* memcached's safe_strtoul stores it in 32 bits */
    memset(&m->auth, 0, sizeof m->auth);
    m->auth.big = size + 2 > MC_AUTH_READ_MAX; /* (a uint32 + 2 there, which can wrap) */
    m->vlen = (uint32_t)size;
    m->need = size + 2;
    m->state = MC_AUTH_DATA;
    return MC_STEP_GO;
}

/* The credentials against the table in use (a reload may be swapping it). */
static bool auth_check(memcache_server *s, const mc_auth_rx *rx)
{
    if ((uint64_t)rx->tlen[0] + rx->tlen[1] > MC_AUTH_CRED_MAX)
        return false; /* longer than any entry: not kept whole */
    pthread_mutex_lock(&s->auth_mu);
    bool ok = mc_auth_match(s->auth, rx->buf, rx->tlen[0], rx->buf + rx->tlen[0], rx->tlen[1]);
    pthread_mutex_unlock(&s->auth_mu);
    return ok;
}

/* MC_AUTH_DATA: the credentials' block, then its "\r\n". */
static mc_step auth_data_in(mc_conn *m, const char *p, size_t n, size_t *used)
{
    mc_auth_rx *rx = &m->auth;
    uint64_t got = (uint64_t)m->vlen + 2 - m->need;
    size_t k = m->need < n ? (size_t)m->need : n;
    *used = k;
    m->need -= k;
    /* memcached waits for the block in its read buffer; once that is full, the next byte that
     * comes is read into no room (0 bytes: taken for the peer's close) and it closes */
    if (rx->big)
        return got + k > MC_AUTH_READ_MAX ? MC_STEP_CLOSE : MC_STEP_GO;
    for (size_t i = 0; i < k; i++, got++) {
        char b = p[i];
        if (got >= m->vlen) {
            m->tail[got - m->vlen] = b;
        } else if (rx->nul) {
            continue;
        } else if (b == '\0') {
            rx->nul = true; /* the block is read as a C string: it ends here */
        } else if (b == ' ') {
            rx->in_tok = false;
        } else {
            if (!rx->in_tok) {
                rx->in_tok = true;
                if (rx->ntok < 3)
                    rx->ntok++;
            }
            if (rx->ntok <= 2) {
                unsigned w = rx->ntok - 1u;
                uint64_t at = (uint64_t)rx->tlen[0] + (w ? rx->tlen[1] : 0);
                if (at < MC_AUTH_CRED_MAX)
                    rx->buf[at] = b;
                rx->tlen[w]++;
            }
        }
    }
    if (m->need)
        return MC_STEP_GO;
    m->state = MC_LINE;
    m->resp_stacked = true;
    if (m->tail[0] != '\r' || m->tail[1] != '\n') {
        MC_REPLY("CLIENT_ERROR bad command line termination");
    } else if (rx->ntok < 2) {
        MC_REPLY("CLIENT_ERROR bad authentication token format");
    } else {
        counter_add(&m->ml->auth_cmds, 1);
        if (auth_check(m->srv, rx)) {
            m->authed = true;
            MC_REPLY("STORED");
        } else {
            counter_add(&m->ml->auth_errors, 1);
            MC_REPLY("CLIENT_ERROR authentication failure");
        }
    }
    explicit_bzero(rx, sizeof *rx); /* the password */
    return MC_STEP_DONE;
}

static void mc_open(conn *c)
{
    mc_conn *m = conn_state(c);
    m->c = c;
    m->srv = net_listener_ctx(c->listener);
    m->ml = perloop_at(&m->srv->loops, conn_loop(c)->index);
    obuf_init(&m->stage, &conn_loop(c)->chunks);
    m->authed = !m->srv->auth_on;
    counter_add(&m->ml->conns_opened, 1);
    /* A fresh connection is idle, not a request in progress: memcached clients open pools
     * ahead of use (maxconns.t holds a thousand silent ones). The header timeout is for a
     * command that has started (mc_data). */
    conn_set_timeout(c, CONN_TIMEOUT_IDLE);
    mc_watch_open(m);
}

static ssize_t mc_data(conn *c, const char *data, size_t len)
{
    mc_conn *m = conn_state(c);
    if (m->state == MC_WATCH)
        return (ssize_t)len; /* a watcher only listens (memcached stops reading it) */
    if (mc_watching(&m->srv->watch, MC_LOG_CONNEVENTS) && !m->peer_known)
        mc_watch_note_peer(m); /* for its conn_close line, while the socket is open */
    m->resp_stacked = false;   /* what earlier reads answered is written */
    uint64_t now = mc_now(m->srv);
    size_t pos = 0;
    unsigned handled = 0;
    bool yielded = false;
    bool resumed = m->get_paused; /* the client read what a paused get had queued */
    m->get_paused = false;
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
        } else if (m->state == MC_WALK) {
            if (!mc_admin_walk(m, now)) {
                conn_yield(c);
                yielded = true;
                break;
            }
            pos++; /* the walking command's "\n" */
            handled++;
        } else if (m->state == MC_SKIP_LINE) {
            const char *nl = memchr(p, '\n', n);
            pos += nl ? (size_t)(nl - p) + 1 : n;
            if (nl) {
                m->state = MC_LINE;
                handled++;
            }
        } else {
            /* Fairness and backpressure: the rest waits for a later loop turn. */
            if (handled >= m->srv->opts.reqs_per_event || conn_output_full(c)) {
                if (handled >= m->srv->opts.reqs_per_event)
                    counter_add(&m->ml->conn_yields, 1);
                m->resp_stacked = false; /* memcached flushes its replies when it yields */
                conn_yield(c);
                yielded = true;
                break;
            }
            size_t k = 0;
            mc_step st = m->state == MC_GET_CONT    ? get_cont(m, p, n, now, &k)
                         : m->state == MC_AUTH_DATA ? auth_data_in(m, p, n, &k)
                         : m->authed                ? line_in(m, p, n, now, &k)
                                                    : auth_line_in(m, p, n, now, &k);
            if (m->clock_moved) { /* debugtime: the commands after it see the new time */
                m->clock_moved = false;
                now = mc_now(m->srv);
            }
            if (st == MC_STEP_CLOSE) {
                m->close_reason = MC_CLOSE_ERROR;
                return PROTO_CLOSE;
            }
            pos += k;
            if (st == MC_STEP_DONE)
                handled++;
            else if (st == MC_STEP_MORE)
                break;
            if (m->state == MC_WATCH)
                return (ssize_t)len; /* the rest of the read is never looked at (memcached) */
        }
    }
    if (!conn_closing(c)) {
        bool partial = m->state != MC_LINE || (pos < len && !yielded);
        /* A get paused on our output owes us nothing while it is paused: not a partial command,
         * whether the rest of its line is here or still arriving (the write timeout governs a
         * client that stops reading; a header deadline armed now would expire while we are the
         * ones waiting). Once the output drains, a line still unfinished arms it afresh. */
        if (partial && yielded && m->state == MC_GET_CONT &&
            (conn_output_full(c) || memchr(data + pos, '\n', len - pos)))
            partial = false;
        if (m->state == MC_WALK) /* a walk owes us nothing either: it waits for our output */
            partial = false;
        if (partial) {
            if (!m->in_cmd || handled || resumed) /* a draining get is not a slowloris */
                conn_set_timeout(c, CONN_TIMEOUT_HEADER);
            m->in_cmd = true;
        } else if (m->in_cmd || handled) {
            conn_set_timeout(c, CONN_TIMEOUT_IDLE);
            m->in_cmd = false;
        }
        /* Past its age (cache.memcached_max_connection_age_s) and every command read answered,
         * none half received, none waiting for a later turn: this read's replies are the last,
         * then the connection closes (half-close and drain, as any close of ours). The protocol
         * has no way to announce it: the client sees EOF when it next reads. */
        if (!partial && !yielded && m->state == MC_LINE && pos == len && conn_aged(c)) {
            m->close_reason = MC_CLOSE_MAX_AGE;
            conn_close_aged(c);
        }
    }
    return (ssize_t)pos;
}

static void mc_close(conn *c)
{
    mc_conn *m = conn_state(c);
    if (m->state == MC_AUTH_DATA)
        explicit_bzero(&m->auth, sizeof m->auth); /* part of a password */
    cache_item_release(m->item);
    m->item = NULL;
    mc_value_release(m);
    mc_admin_close(m);
    mc_watch_close(m);
    counter_add(&m->ml->conns_closed, 1);
}

/* The connection waited for a command longer than its idle timeout (or sat in the middle of one
 * longer than header_timeout_ms): closed without a word, as memcached does. Closes by the idle
 * timeout are memcached's idle_kicks; a watcher's conn_close line says why. */
static void mc_timeout(conn *c, conn_timeout_kind kind)
{
    mc_conn *m = conn_state(c);
    if (kind == CONN_TIMEOUT_IDLE)
        counter_add(&m->ml->idle_kicks, 1);
    m->close_reason = MC_CLOSE_IDLE_TIMEOUT;
}

const proto memcache_proto = {
    .name = "memcache",
    .state_size = sizeof(mc_conn),
    .reject_line = "ERROR Too many open connections\r\n", /* memcached at -c, as it writes it */
    .accept_at_connect = true, /* memcached counts pooled idle connections (curr_connections) */
    .on_open = mc_open,
    .on_data = mc_data,
    .on_timeout = mc_timeout,
    .on_close = mc_close,
};

/* ---- server ------------------------------------------------------------------------------- */

memcache_server *memcache_server_new(cache_store *store, unsigned nloops)
{
    memcache_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (perloop_init(&s->loops, nloops, sizeof(mc_loop)) != 0 || !(s->stats = mc_stats_new())) {
        perloop_free(&s->loops);
        free(s);
        return NULL;
    }
    if (mc_watch_init(&s->watch, nloops) != 0) {
        perloop_free(&s->loops);
        free(s);
        return NULL;
    }
    s->store = store;
    pthread_mutex_init(&s->auth_mu, NULL);
    s->started_ms = clk_now(clk_system());
    memcache_options_default(&s->opts);
    atomic_init(&s->admin.crawler_enabled, true);
    atomic_init(&s->admin.crawler_sleep, 100); /* memcached's defaults */
    atomic_init(&s->admin.crawler_tocrawl, 0);
    atomic_init(&s->admin.slab_automove, 1);
    mc_admin_set_ratio(&s->admin, 0.8);
    atomic_init(&s->admin.flushed_ms, 0);
    return s;
}

void memcache_options_default(memcache_options *o)
{
    memset(o, 0, sizeof *o);
    o->flush_enabled = true;
    o->cas_enabled = true;
    o->watch_enabled = true;
    o->dump_enabled = true;
    o->memlimit_enabled = true;
    o->lru_crawler = true;
    o->reqs_per_event = MEMCACHE_MAX_PIPELINE;
    o->item_size_max = CACHE_DEFAULT_ITEM_BYTES;
}

void memcache_server_set_options(memcache_server *s, const memcache_options *o)
{
    s->opts = *o;
    if (s->opts.reqs_per_event == 0)
        s->opts.reqs_per_event = 1;
    if (s->opts.item_size_max == 0)
        s->opts.item_size_max = CACHE_DEFAULT_ITEM_BYTES;
    atomic_store(&s->admin.crawler_enabled, s->opts.lru_crawler);
}

void memcache_server_set_budget(memcache_server *s, byte_budget *inflight)
{
    s->inflight = inflight;
}

/* A file others may read gives its passwords to every account on the host. */
static void auth_warn_mode(const char *path, unsigned mode)
{
    if (mode & S_IROTH)
        LOG_WARN("memcached auth file %s is readable by every user of this host (mode %04o): "
                 "chmod o-r it",
                 path, mode);
}

/* A fresh table from the file, or NULL with the reason (rc MC_AUTH_EIO / MC_AUTH_EFORMAT). */
static mc_auth_table *auth_read(const char *path, int *rc, char *err, size_t errlen)
{
    mc_auth_table *t = malloc(sizeof *t);
    if (!t) {
        snprintf(err, errlen, "%s: out of memory", path);
        *rc = MC_AUTH_EIO;
        return NULL;
    }
    unsigned mode;
    *rc = mc_auth_load(path, t, &mode, err, errlen);
    if (*rc != 0) {
        free(t); /* cleared by mc_auth_load */
        return NULL;
    }
    auth_warn_mode(path, mode);
    return t;
}

int memcache_server_set_auth_file(memcache_server *s, const char *path, char *err, size_t errlen)
{
    int rc;
    mc_auth_table *t = auth_read(path, &rc, err, errlen);
    if (!t)
        return rc;
    char *copy = strdup(path);
    if (!copy) {
        mc_auth_clear(t);
        free(t);
        snprintf(err, errlen, "%s: out of memory", path);
        return MC_AUTH_EIO;
    }
    s->auth = t;
    s->auth_path = copy;
    s->auth_on = true;
    return 0;
}

int memcache_server_reload_auth(memcache_server *s, unsigned *entries, char *err, size_t errlen)
{
    if (!s->auth_on) {
        snprintf(err, errlen, "no auth file");
        return MC_AUTH_EIO;
    }
    int rc;
    mc_auth_table *t = auth_read(s->auth_path, &rc, err, errlen);
    if (!t) {
        counter_add(&s->auth_reload_failures, 1);
        return rc; /* the table in use stays */
    }
    counter_add(&s->auth_reloads, 1);
    *entries = t->n;
    pthread_mutex_lock(&s->auth_mu);
    mc_auth_table *old = s->auth;
    s->auth = t;
    pthread_mutex_unlock(&s->auth_mu);
    mc_auth_clear(old);
    free(old);
    return 0;
}

void memcache_server_auth_stats(const memcache_server *s, memcache_auth_stats *out)
{
    *out = (memcache_auth_stats){.reloads = counter_get(&s->auth_reloads),
                                 .reload_failures = counter_get(&s->auth_reload_failures)};
    for (unsigned i = 0; i < perloop_count(&s->loops); i++) {
        const mc_loop *l = perloop_at(&s->loops, i);
        out->checks += counter_get(&l->auth_cmds);
        out->failures += counter_get(&l->auth_errors);
    }
}

uint64_t memcache_server_commands(const memcache_server *s)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < perloop_count(&s->loops); i++) {
        const mc_loop *l = perloop_at(&s->loops, i);
        sum += counter_get(&l->commands);
    }
    return sum;
}

unsigned memcache_server_auth_entries(memcache_server *s)
{
    if (!s->auth_on)
        return 0;
    pthread_mutex_lock(&s->auth_mu);
    unsigned n = s->auth->n;
    pthread_mutex_unlock(&s->auth_mu);
    return n;
}

void memcache_server_free(memcache_server *s)
{
    if (!s)
        return;
    perloop_free(&s->loops);
    mc_stats_free(s->stats);
    mc_watch_free(&s->watch);
    if (s->auth) {
        mc_auth_clear(s->auth);
        free(s->auth);
    }
    free(s->auth_path);
    pthread_mutex_destroy(&s->auth_mu);
    free(s);
}
