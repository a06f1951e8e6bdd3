/* The meta commands of the memcached text protocol: mg, ms, md, ma and me (mn, which only
 * answers "MN", stays in memcache.c's dispatch). Dispatch calls the mc_meta_* entry points
 * declared in memcache_int.h, and memcache.c's store_done hands a finished ms data block to
 * mc_meta_ms_done.
 *
 * memcached 1.6's meta protocol (doc/protocol.txt "Meta Commands"), byte-exact with 1.6.18
 * (test_memcache_diff.py, memcached's t/metaget.t). A flag is one letter, its argument glued to
 * it ("T30"); the reply repeats the return flags in request order. Flags are checked first, as
 * memcached does: a repeated flag or one it does not know refuses the command.
 *
 * Item history. mg h (hit before), l (seconds since the last access) and u (no bump), the
 * recache tokens (N vivify on miss, R recache below a TTL, W won, Z already sent, X stale),
 * md I and ms I (stale marking) use the history the store keeps per item and decides under the
 * shard's lock (cache_get_meta, cache_invalidate, CACHE_MODE_CAS_STALE), so of two clients only
 * one wins a token. An mg N miss creates the empty item by an ADD; a client that loses the race
 * looks again and sees the winner's item (Z).
 *
 * Base64 keys (b): read with memcached's lenient decoder (util/base64.h b64_decode_memcached:
 * bytes outside the alphabet skipped, the first padded group ends the key), and any decoded
 * bytes are a key (our text-key rule is for text keys). k answers
 * as memcached does: on a hit by how the item was stored (ms b marks it; mg N, ma N and an
 * append create items without the mark, so k then echoes the decoded bytes), on a miss by the
 * request's b. Except (a deliberate difference): decoded bytes with a blank or a control
 * character are echoed in base64 with b, never raw into the reply line (put_key).
 *
 * me <key> [b]: memcached's debug line; exp, la, cas and fetch as memcached computes them, cls
 * the memcached class the store counts the item in (cache_item_class), size our item's. */
#include "proto/memcache_int.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cache/store.h"
#include "net/conn.h"
#include "util/base64.h"
#include "util/decimal.h"
#include "util/fmt.h"

/* Meta commands (memcached 1.6): "<cmd> <key> <flag>*". memcached refuses more than 17 flags
 * (20 tokens counting its end marker), an O(paque) token longer than 32 bytes (the O included;
 * MC_OPAQUE_MAX, in memcache_int.h: mc_conn keeps one for ms), and a key token longer than 250
 * bytes before any base64 decoding. */
#define MC_META_TOKENS_MAX 19
#define MC_B64_KEY_MAX     (4 * ((CACHE_KEY_MAX + 2) / 3)) /* base64 of the longest key */
#define MC_META_HDR_MAX    512                             /* a meta reply line, see below */
#define MC_ARITH_TRIES     1000 /* ma goes again when another writer won: lock-free, bounded */

/* The longest meta reply line: "VA <len>", each return flag at most once (s f t c O k), "\r\n". */
_Static_assert(3 + 10 + 2 * (2 + 10) + 2 * (2 + FMT_U64_MAX) + 1 + MC_OPAQUE_MAX + 4 +
                       MC_B64_KEY_MAX + 2 <=
                   MC_META_HDR_MAX,
               "meta reply lines fit MC_META_HDR_MAX");

typedef enum { MC_MG, MC_MS, MC_MD, MC_MA } mc_meta_cmd;

typedef struct mc_meta {
    const char *key; /* the key token, or kbuf once base64-decoded */
    size_t klen;
    const char *err; /* why parsing failed */
    bool b, q, v, has_cas, has_ttl, has_viv, stale, no_bump;
    char mode; /* M's letter, 0 without */
    uint32_t client_flags;
    int64_t ttl, viv_ttl, recache; /* T, N and R exptimes */
    uint64_t cas, delta, initial;
    char kbuf[CACHE_KEY_MAX];
} mc_meta;

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
static bool meta_parse(mc_meta *mm, const mc_tok *t, size_t nt, size_t first)
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
            mm->klen = b64_decode_memcached(t[1].p, t[1].n, mm->kbuf, sizeof mm->kbuf);
            mm->key = mm->kbuf;
            if (mm->klen == 0) {
                err = "CLIENT_ERROR error decoding key";
                bad = true;
            }
            break;
        case 'N':
            if (!mc_parse_i32(&a, &mm->viv_ttl)) {
                err = MC_BAD_TOKEN;
                bad = true;
            }
            mm->has_viv = true;
            break;
        case 'T':
            if (!mc_parse_i32(&a, &mm->ttl)) {
                err = MC_BAD_TOKEN;
                bad = true;
            }
            mm->has_ttl = true;
            break;
        case 'R':
            if (!mc_parse_i32(&a, &mm->recache)) {
                err = MC_BAD_TOKEN;
                bad = true;
            }
            break;
        case 'h':
        case 'l':
        case 'O': /* checked where it is echoed, as memcached does */
        case 'P': /* proxy hints: accepted, no effect */
        case 'L':
        case 'k':
        case 's':
        case 't':
        case 'c':
        case 'f': break;
        case 'u': mm->no_bump = true; break;
        case 'v': mm->v = true; break;
        case 'q': mm->q = true; break;
        case 'I': mm->stale = true; break;
        case 'F':
            if (!mc_parse_u32(&a, &mm->client_flags))
                bad = true;
            break;
        case 'C':
            if (!mc_parse_u64(&a, &mm->cas)) {
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
            if (!mc_parse_u64(&a, &mm->initial)) {
                err = "CLIENT_ERROR invalid numeric initial value";
                bad = true;
            }
            break;
        case 'D':
            if (!mc_parse_u64(&a, &u)) {
                err = "CLIENT_ERROR invalid numeric delta value";
                bad = true;
            }
            mm->delta = u;
            break;
        default:
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

/* Whether a key can go into a reply line as it is: no blank, no control character (what the log
 * escapes). A key created from base64 without the binary mark (mg N, ma N, an append) may hold
 * any byte; memcached echoes it raw into the reply of whoever reads the item, so CR LF in it
 * would forge reply lines. UTF-8 and other bytes >= 0x80 go as memcached sends them. */
static bool key_echoes_raw(const char *key, size_t klen)
{
    for (size_t i = 0; i < klen; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c <= ' ' || c == 0x7f)
            return false;
    }
    return true;
}

/* " k<key>", base64 with a trailing " b" when the request used b, or when the key cannot be
 * echoed raw (key_echoes_raw). */
static size_t put_key(char *p, const char *key, size_t klen, bool b)
{
    p[0] = ' ';
    p[1] = 'k';
    if (!b && key_echoes_raw(key, klen)) {
        memcpy(p + 2, key, klen);
        return 2 + klen;
    }
    size_t n = 2 + b64_encode_to(key, klen, p + 2);
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

/* The first O token longer than memcached allows, or nt. memcached meets it while writing the
 * reply, after the flags before it took effect: T (and N on a created item) up to there apply,
 * and no recache token is handed out (that comes after the flags). */
static size_t first_bad_opaque(const mc_tok *t, size_t nt, size_t first)
{
    for (size_t i = first; i < nt; i++)
        if (t[i].p[0] == 'O' && t[i].n > MC_OPAQUE_MAX)
            return i;
    return nt;
}

/* mg's lookup options from the flags before `end`: T, R (and whether a T came first), u. */
static cache_get_opts mg_opts(const mc_meta *mm, const mc_tok *t, size_t end, uint64_t now)
{
    cache_get_opts o = {.no_bump = mm->no_bump};
    for (size_t i = 2; i < end; i++) {
        if (t[i].p[0] == 'T') {
            o.set_expiry = true;
            o.expiry_ms = expiry_ms(mm->ttl, now);
            o.count = CACHE_COUNT_TOUCH;
        } else if (t[i].p[0] == 'R') {
            o.recache_ms = expiry_ms(mm->recache, now);
            o.recache_sees_new = o.set_expiry;
        }
    }
    return o;
}

/* mg N on a miss: memcached creates an empty item (flags 0, the T/N expiry, whichever comes
 * last) and the creator wins its recache token. An ADD, so of two clients racing only one
 * creates it; the other goes back to the lookup and sees it (Z). Like memcached, the item does
 * not remember that its key came in base64 (k then echoes the decoded bytes). CACHE_STORED
 * with *cas set; CACHE_NOT_STORED when someone else stored the key first; else a failure. */
static int mg_vivify(mc_conn *m, const mc_meta *mm, const mc_tok *t, size_t end, bool token,
                     uint64_t *cas, uint64_t now)
{
    uint64_t exp = 0;
    for (size_t i = 2; i < end; i++) {
        if (t[i].p[0] == 'T')
            exp = expiry_ms(mm->ttl, now);
        else if (t[i].p[0] == 'N')
            exp = expiry_ms(mm->viv_ttl, now);
    }
    int e;
    unsigned marks = (mm->b ? CACHE_ITEM_KEY_ANY : 0) | (token ? CACHE_ITEM_TOKEN_SENT : 0);
    cache_item *it = cache_item_new_ex(m->srv->store, mm->key, mm->klen, 0, 0, exp, NULL, 0, marks, &e);
    if (!it)
        return e;
    return cache_store_item(m->srv->store, it, CACHE_MODE_ADD, 0, cas, now);
}

/* What mg answers from: the item (NULL for one it just created) and its history. */
typedef struct mg_view {
    const cache_item *it;
    cache_item_meta h;
    bool created;
    uint64_t cas;
} mg_view;

/* mg's return flags in request order, as memcached writes them: a T before t shows the new TTL,
 * one after it the old; N shows on a created item only. Then Z, X, W. */
static size_t mg_flags(char *hdr, size_t n, const mc_meta *mm, const mc_tok *t, size_t nt,
                       const mg_view *v, uint64_t now)
{
    const cache_item *it = v->it;
    uint64_t exp = v->created ? 0 : v->h.expiry_ms;
    for (size_t i = 2; i < nt; i++) {
        switch (t[i].p[0]) {
        case 'T': exp = expiry_ms(mm->ttl, now); break;
        case 'N':
            if (v->created)
                exp = expiry_ms(mm->viv_ttl, now);
            break;
        case 's': n += put_u64_flag(hdr + n, 's', it ? cache_item_vlen(it) : 0); break;
        case 't': n += put_ttl(hdr + n, exp, now); break;
        case 'c': n += put_u64_flag(hdr + n, 'c', it ? cache_item_cas(it) : v->cas); break;
        case 'f': n += put_u64_flag(hdr + n, 'f', it ? cache_item_flags(it) : 0); break;
        case 'l': n += put_u64_flag(hdr + n, 'l', v->h.idle_s); break;
        case 'h': n += put_u64_flag(hdr + n, 'h', v->h.fetched); break;
        case 'k':
            n += it ? put_key(hdr + n, cache_item_key(it), cache_item_klen(it),
                              cache_item_key_binary(it))
                    : put_key(hdr + n, mm->key, mm->klen, false);
            break;
        case 'O': n += put_opaque(hdr + n, t[i].p, t[i].n); break;
        default: break;
        }
    }
    if (v->h.token_sent)
        n += put_u64_flag(hdr + n, 'Z', 0) - 1; /* " Z" */
    if (v->h.stale)
        n += put_u64_flag(hdr + n, 'X', 0) - 1;
    if (v->h.won)
        n += put_u64_flag(hdr + n, 'W', 0) - 1;
    return n;
}

/* mg of a reserved ID key (memcache_ids.c): a new ID, "VA <len> <flags>" with v, else "HD
 * <flags>" (the ID is taken all the same: an mg reads once, as a get). The return flags describe
 * it as an item that is not stored: s its length, f 0, c 0, t -1, h 0, l 0, k and O echoed. The
 * flags that would change an item (T, N, R) are refused; q has nothing to elide (never a miss). */
static void mg_id(mc_conn *m, const mc_meta *mm, const mc_tok *t, size_t nt, int f,
                  bool bad_opaque)
{
    if (bad_opaque) {
        conn_write(m->c, OPAQUE_TOO_LONG, sizeof OPAQUE_TOO_LONG - 1);
        return;
    }
    for (size_t i = 2; i < nt; i++)
        if (strchr("TNR", t[i].p[0])) {
            OUT(m, MC_ID_KEY_REFUSED);
            return;
        }
    counter_add(&m->ml->cmd_get, 1);
    char id[MC_ID_TEXT_MAX];
    size_t idn = mc_ids_one(m, f, mm->key, mm->klen, id);
    if (!idn)
        return; /* "SERVER_ERROR <why>" written */
    char hdr[MC_META_HDR_MAX + MC_ID_TEXT_MAX + 2]; /* the line, then the ID */
    size_t n = 2;
    if (mm->v) {
        memcpy(hdr, "VA ", 3);
        n = 3 + fmt_u64(hdr + 3, idn);
    } else {
        memcpy(hdr, "HD", 2);
    }
    for (size_t i = 2; i < nt; i++) {
        switch (t[i].p[0]) {
        case 's': n += put_u64_flag(hdr + n, 's', idn); break;
        case 't': n += put_ttl(hdr + n, 0, 0); break;
        case 'c':
        case 'f':
        case 'l':
        case 'h': n += put_u64_flag(hdr + n, t[i].p[0], 0); break;
        case 'k': n += put_key(hdr + n, mm->key, mm->klen, mm->b); break;
        case 'O': n += put_opaque(hdr + n, t[i].p, t[i].n); break;
        default: break;
        }
    }
    hdr[n++] = '\r';
    hdr[n++] = '\n';
    if (mm->v) {
        memcpy(hdr + n, id, idn);
        n += idn;
        hdr[n++] = '\r';
        hdr[n++] = '\n';
    }
    conn_write(m->c, hdr, n);
}

/* mg <key> <flags>*: HD or VA <len>, the return flags (then the value); EN on a miss. */
void mc_meta_mg(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    mc_meta mm;
    if (!meta_line_ok(m, MC_MG, nt, t))
        return;
    if (!meta_parse(&mm, t, nt, 2)) {
        conn_write(m->c, mm.err, strlen(mm.err));
        conn_write(m->c, "\r\n", 2);
        return;
    }
    size_t end = first_bad_opaque(t, nt, 2);
    bool bad_opaque = end < nt;
    int idf = mc_id_key(m->srv, mm.key, mm.klen);
    if (idf >= 0) {
        mg_id(m, &mm, t, nt, idf, bad_opaque);
        return;
    }
    cache_get_opts o = mg_opts(&mm, t, end, now);
    o.no_token = bad_opaque;
    /* memcached bumps before the reply unless a flag needs the item locked (N T R h l): then
     * after it, which an error skips */
    for (size_t i = 2; bad_opaque && i < nt; i++)
        o.no_bump |= strchr("NTRhl", t[i].p[0]) != NULL;
    bool vivify = mm.has_viv; /* decided on all the flags; the expiry on those before `end` */
    counter_add(o.set_expiry ? &m->ml->cmd_touch : &m->ml->cmd_get, 1);
    mg_view v = {.it = NULL};
    cache_item *it = NULL;
    for (int tries = 0; tries < MC_ARITH_TRIES; tries++) {
        it = cache_get_meta(m->srv->store, mm.key, mm.klen, &o, &v.h, now);
        if (it || !vivify)
            break;
        int r = mg_vivify(m, &mm, t, end, !bad_opaque, &v.cas, now);
        if (r == CACHE_STORED) {
            v.created = true;
            v.h.won = !bad_opaque;
            break;
        }
        if (r != CACHE_NOT_STORED) /* no room: memcached answers the miss */
            break;
    }
    if (mc_watching(&m->srv->watch, MC_LOG_FETCHERS))
        mc_watch_get(m, mm.key, mm.klen, it);
    v.it = it;
    if (bad_opaque) {
        cache_item_release(it);
        conn_write(m->c, OPAQUE_TOO_LONG, sizeof OPAQUE_TOO_LONG - 1);
        return;
    }
    char hdr[MC_META_HDR_MAX];
    size_t n = 2;
    if (!it && !v.created) {
        memcpy(hdr, "EN", 2);
        put_miss_flags(hdr, &n, &mm, t, nt, 2);
        if (!mm.q) /* quiet mode elides a miss (the only reply it elides for mg) */
            write_line(m, hdr, n);
        return;
    }
    size_t vlen = it ? cache_item_vlen(it) : 0;
    if (mm.v) {
        memcpy(hdr, "VA ", 3);
        n = 3 + fmt_u64(hdr + 3, vlen);
    } else {
        memcpy(hdr, "HD", 2);
    }
    n = mg_flags(hdr, n, &mm, t, nt, &v, now);
    hdr[n++] = '\r';
    hdr[n++] = '\n';
    if (conn_write(m->c, hdr, n) == 0 && mm.v &&
        (vlen == 0 || conn_write(m->c, cache_item_value(it), vlen) == 0))
        conn_write(m->c, "\r\n", 2);
    cache_item_release(it);
}

/* me <key> [b]: memcached's debug line "ME <key> exp=<s> la=<s> cas=<n> fetch=<yes|no> cls=<n>
 * size=<n>", or EN. exp is memcached's own expression, now minus the expiry (so the seconds
 * left, negated), -1 for none; la the seconds since the last access; cls the memcached slab
 * class memcached would store the item in (cache_item_class); size our accounted size. The lookup changes nothing (no bump, no counters), as memcached's. */
void mc_meta_me(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    if (nt < 2 || t[1].n > CACHE_KEY_MAX) {
        OUT(m, "CLIENT_ERROR bad command line format");
        return;
    }
    char kbuf[CACHE_KEY_MAX];
    const char *key = t[1].p;
    size_t klen = t[1].n;
    if (nt >= 3 && t[2].n == 1 && t[2].p[0] == 'b') {
        klen = b64_decode_memcached(t[1].p, t[1].n, kbuf, sizeof kbuf);
        key = kbuf;
        if (klen == 0) {
            OUT(m, "CLIENT_ERROR bad command line format");
            return;
        }
    }
    cache_get_opts o = {.no_bump = true, .no_token = true, .count = CACHE_COUNT_NONE};
    cache_item_meta h;
    cache_item *it = cache_get_meta(m->srv->store, key, klen, &o, &h, now);
    if (!it) {
        OUT(m, "EN");
        return;
    }
    char line[MC_META_HDR_MAX];
    size_t n = 3;
    memcpy(line, "ME ", 3);
    if (cache_item_key_binary(it) || !key_echoes_raw(cache_item_key(it), cache_item_klen(it))) {
        n += b64_encode_to(cache_item_key(it), cache_item_klen(it), line + n);
    } else {
        memcpy(line + n, cache_item_key(it), cache_item_klen(it));
        n += cache_item_klen(it);
    }
    long long exp = -1;
    if (h.expiry_ms)
        exp = h.expiry_ms > now ? -(long long)((h.expiry_ms - now + 999) / 1000) : 0;
    size_t size = cache_item_size(it);
    n += (size_t)snprintf(line + n, sizeof line - n,
                          " exp=%lld la=%u cas=%llu fetch=%s cls=%u size=%zu\r\n", exp, h.idle_s,
                          (unsigned long long)cache_item_cas(it), h.fetched ? "yes" : "no",
                          cache_item_class(it), size);
    conn_write(m->c, line, n);
    cache_item_release(it);
}

/* The error of a refused ms, whose data block is then swallowed (mc_store_refuse: ms has no
 * noreply, errors are written in quiet mode too). */
static void ms_refuse(mc_conn *m, const char *err, int64_t vlen)
{
    mc_store_refuse(m, err, strlen(err), vlen);
}

/* ms <key> <datalen> <flags>*: the item is made (mc_store_begin) and stored when its data is in
 * (mc_meta_ms_done). Once <datalen> reads, every refusal swallows the data block, also those
 * memcached answers before reading it (a key over 250 bytes, too many flags), whose block it
 * would read as commands. */
void mc_meta_ms(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    mc_meta mm;
    int64_t vlen = nt >= 3 ? mc_data_len(&t[2]) : -1;
    if (!meta_line_ok(m, MC_MS, nt, t)) {
        mc_swallow(m, vlen);
        return;
    }
    if (vlen < 0) {
        conn_write(m->c, "CLIENT_ERROR bad command line format\r\n", 38);
        return;
    }
    if (!meta_parse(&mm, t, nt, 3)) {
        ms_refuse(m, mm.err, vlen);
        return;
    }
    if (mc_id_key(m->srv, mm.key, mm.klen) >= 0) { /* b: the decoded key is the one compared */
        ms_refuse(m, MC_ID_KEY_REFUSED, vlen);
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
    if (mm.stale && mode == CACHE_MODE_CAS) /* I: an older CAS still stores, marked stale */
        mode = CACHE_MODE_CAS_STALE;
    if (err) {
        ms_refuse(m, err, vlen);
        return;
    }
    m->meta = true;
    m->meta_b = mm.b;
    m->meta_q = mm.q;
    m->mode = (uint8_t)mode;
    m->cas_in = mm.has_cas ? mm.cas : 0;
    mc_store_begin(m,
                   &(mc_value){.key = mm.key,
                               .klen = mm.klen,
                               .vlen = vlen,
                               .flags = mm.client_flags,
                               .expiry_ms = mm.has_ttl ? expiry_ms(mm.ttl, now) : 0,
                               .marks = mm.b ? CACHE_ITEM_KEY_BINARY : 0},
                   now);
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
        size_t ovlen = cache_item_vlen(old);
        int e;
        /* memcached's joined item forgets a base64 key's mark (as the store's append does), and
         * its HTTP content type (store.h: a changed value is not served under the old type) */
        joined = cache_item_new_ex(s, key, klen, ovlen + vlen, cache_item_flags(old),
                                   cache_item_expiry(old), NULL, 0, CACHE_ITEM_KEY_ANY, &e);
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
void mc_meta_ms_done(mc_conn *m, cache_item *it, uint64_t now)
{
    char hdr[MC_META_HDR_MAX];
    char key[CACHE_KEY_MAX];
    size_t klen = cache_item_klen(it);
    memcpy(key, cache_item_key(it), klen); /* the store takes the item */
    /* watch: the lookup memcached's store makes (item_get), then the store (item_store) */
    bool watched = mc_watching(&m->srv->watch, MC_LOG_FETCHERS | MC_LOG_MUTATIONS);
    mc_watch_prior prior;
    uint32_t wvlen = (uint32_t)cache_item_vlen(it), wflags = cache_item_flags(it);
    uint64_t wexp = cache_item_expiry(it);
    if (watched)
        mc_watch_peek(m, key, klen, now, &prior);
    uint64_t cas = 0;
    int r;
    bool concat = m->mode == CACHE_MODE_APPEND || m->mode == CACHE_MODE_PREPEND;
    if (concat && m->cas_in)
        r = ms_concat_cas(m, it, &cas, now);
    else
        r = cache_store_item(m->srv->store, it, (cache_mode)m->mode, m->cas_in, &cas, now);
    if (concat && (r == CACHE_TOO_LARGE || r == CACHE_NO_MEMORY))
        r = CACHE_NOT_STORED; /* memcached: the joined item could not be allocated */
    if (r == CACHE_TOO_LARGE || r == CACHE_NO_MEMORY) {
        /* refused at the store (under -M): as when the allocation fails, counted and the old
         * value dropped */
        mc_count_refusal(m, r);
        cache_delete(m->srv->store, key, klen, 0, now);
    }
    if (watched && mc_watching(&m->srv->watch, MC_LOG_MUTATIONS))
        mc_watch_store(m, key, klen, r, (cache_mode)m->mode, wvlen, wflags, wexp, &prior, now);
    switch (r) {
    case CACHE_STORED:
        counter_add(&m->ml->total_items, 1);
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
void mc_meta_md(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    mc_meta mm;
    if (!meta_line_ok(m, MC_MD, nt, t))
        return;
    if (!meta_parse(&mm, t, nt, 2)) {
        OUT(m, "CLIENT_ERROR invalid or duplicate flag");
        return;
    }
    if (mc_id_key(m->srv, mm.key, mm.klen) >= 0) {
        OUT(m, MC_ID_KEY_REFUSED);
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
    /* I: marked stale (a new CAS, T's expiry, the token free again) instead of deleted */
    int r = mm.stale ? cache_invalidate(m->srv->store, mm.key, mm.klen, cas, mm.has_ttl,
                                        expiry_ms(mm.ttl, now), now)
                     : cache_delete(m->srv->store, mm.key, mm.klen, cas, now);
    if (r == CACHE_NO_MEMORY) { /* a copy was needed (readers hold the item) and had no room */
        OUT(m, "SERVER_ERROR out of memory");
        return;
    }
    if (r == CACHE_DELETED && mm.q) /* quiet mode elides HD only */
        return;
    memcpy(hdr, r == CACHE_DELETED ? "HD" : r == CACHE_EXISTS ? "EX" : "NF", 2);
    write_line(m, hdr, n);
}

/* The item's value as a number, as the store's incr reads it: 1..20 decimal digits, at most
 * 2^64-1, nothing else (util/decimal.h). */
static bool value_u64(const char *p, size_t n, uint64_t *out_v)
{
    return dec_parse_u64(p, n, UINT64_MAX, out_v);
}

typedef struct mc_arith {
    uint64_t value, cas;
    uint64_t base_exp; /* the expiry before ma's T/N flags: the old item's, or none if created */
    bool created;
} mc_arith;

/* Stores the number as the item's new value (ADD when creating, else CAS against the one read),
 * without an HTTP content type (as the store's incr: the old one described another value). */
static int arith_store(mc_conn *m, const mc_meta *mm, uint64_t v, uint32_t flags, uint64_t exp,
                       cache_mode mode, uint64_t cas_in, mc_arith *a, unsigned marks, uint64_t now)
{
    char num[FMT_U64_MAX];
    size_t len = fmt_u64(num, v);
    int e;
    cache_item *it = cache_item_new_ex(m->srv->store, mm->key, mm->klen, len, flags, exp, NULL,
                                       0, marks, &e);
    if (!it)
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
            /* memcached's ma N creates the item without its base64 mark, as mg N */
            int r = arith_store(m, mm, mm->initial, 0, viv_exp, CACHE_MODE_ADD, 0, a,
                                mm->b ? CACHE_ITEM_KEY_ANY : 0, now);
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
        a->base_exp = cache_item_expiry(it);
        uint64_t exp = mm->has_ttl ? expiry_ms(mm->ttl, now) : a->base_exp;
        unsigned marks = cache_item_key_binary(it) ? CACHE_ITEM_KEY_BINARY
                         : mm->b                   ? CACHE_ITEM_KEY_ANY
                                                   : 0;
        int r = arith_store(m, mm, v, cache_item_flags(it), exp, CACHE_MODE_CAS, cas, a, marks,
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
void mc_meta_ma(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now)
{
    mc_meta mm;
    if (!meta_line_ok(m, MC_MA, nt, t))
        return;
    if (!meta_parse(&mm, t, nt, 2)) {
        OUT(m, "CLIENT_ERROR invalid or duplicate flag");
        return;
    }
    if (mc_id_key(m->srv, mm.key, mm.klen) >= 0) {
        OUT(m, MC_ID_KEY_REFUSED);
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
            counter_add(decr ? &m->ml->decr_misses : &m->ml->incr_misses, 1);
        memcpy(hdr, r == CACHE_NOT_FOUND ? "NF" : "EX", 2);
        if (!put_miss_flags(hdr, &n, &mm, t, nt, 2))
            conn_write(m->c, OPAQUE_TOO_LONG, sizeof OPAQUE_TOO_LONG - 1);
        else
            write_line(m, hdr, n);
        return;
    }
    if (!a.created)
        counter_add(decr ? &m->ml->decr_hits : &m->ml->incr_hits, 1);
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
