/* IDs over the memcached protocol (memcache.h memcache_server_set_ids), kayac/go-katsubushi's
 * way: reserved keys whose get answers a new ID, so every memcached client and proxy is an ID
 * client. The retrieval commands call in here for the keys mc_id_key recognises (memcache.c
 * get_keys, memcache_meta.c mg); the write commands refuse them with MC_ID_KEY_REFUSED.
 *
 * A get line's IDs are reserved before its answer starts (mc_ids_reserve): one reservation per
 * format for all of that format's keys on the line, through the generator's own sf_gen_reserve,
 * the call behind HTTP's /ids, /uuids and /ulids, so the lease, clock-behind, overload and
 * fencing rules are HTTP's, and a refusal is the line's only answer (no VALUE before it, no
 * END). The IDs are then composed key by key from the reserved slots, increasing in key order,
 * as sf_gen_batch and sf_id128_issue compose theirs. Nothing is allocated.
 *
 * TypeID keys ("tid:<type>") take UUIDv7 slots of their own reservation, the type checked first
 * by the TypeID spec's rules. Sequence keys ("seq:<namespace>") take their numbers per namespace
 * in one seq_take (as /seqs/{name}?count=N), before anything is written: the namespaces every
 * key names are checked first (known, no token, live), then those short of numbers are drawn
 * from first, so that a refusal rarely comes after another namespace's numbers were taken (those
 * would be a hole: no give-back). Their refusals are seq_refusal's, HTTP's words. */
#include <string.h>

#include "net/conn.h"
#include "proto/memcache_int.h"
#include "snowflake/id128.h"
#include "snowflake/issue128.h"
#include "snowflake/rng.h"
#include "snowflake/typeid.h"
#include "util/counter.h"
#include "util/fmt.h"

/* Whether a key could be in both families: the names equal, or one starting with the other
 * and ':' (b = "a:" too: "a::x" is "a" + ":x" and "a:" + "x"). */
static bool families_overlap(const char *a, size_t an, const char *b, size_t bn)
{
    if (an > bn) {
        const char *t = a;
        a = b, b = t;
        size_t tn = an;
        an = bn, bn = tn;
    }
    return memcmp(a, b, an) == 0 && (bn == an || b[an] == ':');
}

int memcache_server_set_ids(memcache_server *s, const memcache_ids *ids)
{
    s->ids_on = false;
    for (int f = 0; f < MC_ID_FORMATS; f++) {
        const char *k = ids->keys[f];
        size_t n = k ? strlen(k) : 0;
        s->id_klen[f] = 0;
        s->id_gens[f] = ids->gens[f];
        if (!n)
            continue;
        if (n > CACHE_KEY_MAX || !cache_key_valid(k, n) ||
            (f != MC_ID_SEQUENCE && (!ids->gens[f] || !ids->ngens)))
            return -1;
        for (int e = 0; e < f; e++) /* equal, or one in the other's family (mc_id_key) */
            if (families_overlap(s->id_key[e], s->id_klen[e], k, n))
                return -1;
        memcpy(s->id_key[f], k, n);
        s->id_klen[f] = (uint8_t)n;
        s->ids_on = true;
    }
    s->id_ngens = ids->ngens;
    s->id_seq = ids->seq;
    return 0;
}

int memcache_server_id_key(const memcache_server *s, const char *key, size_t klen)
{
    return mc_id_key(s, key, klen);
}

void memcache_server_ids_issued(const memcache_server *s, uint64_t out[MC_ID_FORMATS])
{
    for (int f = 0; f < MC_ID_FORMATS; f++)
        out[f] = 0;
    for (unsigned i = 0; i < perloop_count(&s->loops); i++) {
        const mc_loop *l = perloop_at(&s->loops, i);
        for (int f = 0; f < MC_ID_FORMATS; f++)
            out[f] += counter_get(&l->ids_issued[f]);
    }
}

/* The connection's generator of format f: its loop's with per-thread worker IDs, as HTTP's. */
static sf_gen *gen_of(const mc_conn *m, int f)
{
    const memcache_server *s = m->srv;
    return s->id_ngens > 1 ? s->id_gens[f][conn_loop(m->c)->index] : s->id_gens[f][0];
}

/* "SERVER_ERROR <why>" of a generator's refusal (what HTTP's 503 says). */
static void refuse(mc_conn *m, int rc)
{
    char line[160];
    size_t n = (size_t)snprintf(line, sizeof line, "SERVER_ERROR %s\r\n", sf_gen_strerror(rc));
    conn_write(m->c, line, n < sizeof line ? n : sizeof line - 1);
}

/* The error line "<kind> <msg>\r\n". */
static void error_line(mc_conn *m, const char *kind, const char *msg)
{
    char line[400];
    size_t n = (size_t)snprintf(line, sizeof line, "%s %s\r\n", kind, msg);
    conn_write(m->c, line, n < sizeof line ? n : sizeof line - 1);
}

/* The suffix of a key of format f's family ("K:<suffix>"): its length (0: the bare K). */
static size_t key_suffix(const mc_conn *m, int f, const char *key, size_t klen, const char **sfx)
{
    size_t kn = m->srv->id_klen[f];
    *sfx = key + kn + 1;
    return klen > kn ? klen - kn - 1 : 0;
}

/* The TypeID key's type is valid; else false with the CLIENT_ERROR written (/typeid's words). */
static bool typeid_ok(mc_conn *m, const char *key, size_t klen)
{
    const char *type, *why;
    size_t tn = key_suffix(m, MC_ID_TYPEID, key, klen, &type);
    if (sf_typeid_prefix_check(type, tn, &why) == 0)
        return true;
    char msg[160];
    snprintf(msg, sizeof msg, "type: %s (TypeID spec v0.3)", why);
    error_line(m, "CLIENT_ERROR", msg);
    return false;
}

/* The namespace a sequence key names, one that may be drawn from over this protocol; else NULL
 * with the CLIENT_ERROR written. */
static seq_ns *seq_ns_of(mc_conn *m, const char *key, size_t klen)
{
    const char *name;
    size_t len = key_suffix(m, MC_ID_SEQUENCE, key, klen, &name);
    char msg[400];
    if (!len) {
        snprintf(msg, sizeof msg, "a sequence is read as %.*s:<namespace>",
                 (int)m->srv->id_klen[MC_ID_SEQUENCE], key);
        error_line(m, "CLIENT_ERROR", msg);
        return NULL;
    }
    seq_ns *ns = m->srv->id_seq ? seq_find(m->srv->id_seq, name, len) : NULL;
    if (!ns) { /* HTTP's 404 */
        snprintf(msg, sizeof msg, "no sequence namespace \"%.*s\"", (int)len, name);
        error_line(m, "CLIENT_ERROR", msg);
        return NULL;
    }
    /* memcached's SASL/auth-file users say nothing of who may draw from which namespace */
    if (ns->token_len || ns->def.token_sha256[0]) {
        snprintf(msg, sizeof msg, "namespace %s has a token: use HTTP", ns->def.name);
        error_line(m, "CLIENT_ERROR", msg);
        return NULL;
    }
    return ns;
}

/* A refused take in HTTP's words: 503 (retry later) a SERVER_ERROR, the 4xx a CLIENT_ERROR. */
static void seq_refuse(mc_conn *m, seq_ns *ns, seq_take_result res)
{
    char msg[320], retry[340];
    if (seq_refusal(ns, res, msg, sizeof msg) == 503) {
        snprintf(retry, sizeof retry, "%s (retry)", msg);
        error_line(m, "SERVER_ERROR", retry);
    } else {
        error_line(m, "CLIENT_ERROR", msg);
    }
}

/* The line's sequence keys (sp->want[MC_ID_SEQUENCE] of them) grouped by namespace, each
 * namespace's numbers taken in one seq_take: all or none. false with the error line written. */
static bool seq_reserve(mc_conn *m, const char *p, size_t n, mc_id_spans *sp)
{
    char msg[96];
    if (sp->want[MC_ID_SEQUENCE] > MC_SEQ_KEYS_MAX) {
        snprintf(msg, sizeof msg, "more than %u sequence keys in a get", MC_SEQ_KEYS_MAX);
        error_line(m, "CLIENT_ERROR", msg);
        return false;
    }
    for (size_t i = 0; i < n;) {
        while (i < n && p[i] == ' ')
            i++;
        size_t s = i;
        while (i < n && p[i] != ' ')
            i++;
        if (i == s || mc_id_key(m->srv, p + s, i - s) != MC_ID_SEQUENCE)
            continue;
        seq_ns *ns = seq_ns_of(m, p + s, i - s);
        if (!ns)
            return false;
        unsigned d = 0;
        while (d < sp->ndraw && sp->draw[d].ns != ns)
            d++;
        if (d == MC_SEQ_NS_MAX) {
            snprintf(msg, sizeof msg, "more than %u sequence namespaces in a get", MC_SEQ_NS_MAX);
            error_line(m, "CLIENT_ERROR", msg);
            return false;
        }
        if (d == sp->ndraw)
            sp->draw[sp->ndraw++] = (mc_seq_draw){.ns = ns};
        sp->draw[d].want++;
    }
    uint32_t at = 0;
    for (unsigned d = 0; d < sp->ndraw; d++) {
        sp->draw[d].at = at;
        at += sp->draw[d].want;
    }
    /* Those short of numbers first: a refusal then comes before the others are drawn from. */
    for (int pass = 0; pass < 2; pass++)
        for (unsigned d = 0; d < sp->ndraw; d++) {
            mc_seq_draw *w = &sp->draw[d];
            if ((seq_remaining(w->ns) < w->want) != (pass == 0))
                continue;
            seq_take_result res = seq_take(w->ns, sp->nums + w->at, w->want);
            if (res != SEQ_R_OK) {
                seq_refuse(m, w->ns, res);
                return false;
            }
        }
    return true;
}

bool mc_ids_reserve(mc_conn *m, const char *p, size_t n, mc_id_spans *sp)
{
    uint32_t any = 0;
    for (int f = 0; f < MC_ID_FORMATS; f++)
        sp->want[f] = sp->used[f] = 0;
    sp->ndraw = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && p[i] == ' ')
            i++;
        size_t s = i;
        while (i < n && p[i] != ' ')
            i++;
        if (i - s > CACHE_KEY_MAX) { /* get_keys stops there (CLIENT_ERROR): none after it */
            n = s;
            break;
        }
        int f = i > s ? mc_id_key(m->srv, p + s, i - s) : -1;
        if (f == MC_ID_TYPEID && !typeid_ok(m, p + s, i - s))
            return false; /* checked before anything is reserved */
        if (f >= 0) {
            sp->want[f]++;
            any++;
        }
    }
    if (!any)
        return true;
    if (sp->want[MC_ID_SEQUENCE] && !seq_reserve(m, p, n, sp))
        return false;
    for (int f = 0; f < MC_ID_FORMATS; f++) {
        if (!sp->want[f] || f == MC_ID_SEQUENCE)
            continue;
        sf_gen *g = sp->g[f] = gen_of(m, f);
        if (sp->want[f] > g->max_batch) {
            char line[128];
            size_t k = (size_t)snprintf(line, sizeof line,
                                        "CLIENT_ERROR more than %u ID keys of one format in a get "
                                        "(snowflake.max_batch)\r\n",
                                        (unsigned)g->max_batch);
            conn_write(m->c, line, k < sizeof line ? k : sizeof line - 1);
            return false;
        }
        int rc = sf_gen_reserve(g, sp->want[f], &sp->span[f]);
        if (rc != SF_OK) { /* the slots reserved for the other formats are spent, never reused */
            refuse(m, rc);
            return false;
        }
    }
    return true;
}

/* ID k of a reservation as text into out; 0 when the random source failed. key: the TypeID's
 * (its type, checked). */
static size_t format_slot(const mc_conn *m, const sf_gen *g, int f, const sf_span *span, uint32_t k,
                          const char *key, size_t klen, char *out)
{
    const sf_layout *l = &g->layout;
    uint64_t index = span->first_seq + (uint64_t)k;
    uint64_t tick = span->first_tick + (index >> l->sequence_bits), seq = index & l->sequence_max;
    if (f == MC_ID_SNOWFLAKE)
        return fmt_u64(out, sf_layout_compose(l, tick, g->node_bits, seq));
    sf_id128_format f128 = f == MC_ID_ULID ? SF_FORMAT_ULID : SF_FORMAT_UUID7;
    uint64_t lo, hi = 0;
    if (sf_rng_u64(&lo) != 0 || (sf_id128_random_bits(l, f128) > 64 && sf_rng_u64(&hi) != 0))
        return 0;
    sf_id128 id = sf_id128_compose(l, f128, tick, (uint32_t)seq, g->node_bits, lo, hi);
    if (f == MC_ID_TYPEID) {
        const char *type;
        size_t tn = key_suffix(m, f, key, klen, &type);
        return sf_typeid_format(type, tn, id, out);
    }
    return f128 == SF_FORMAT_UUID7 ? sf_uuid_format(id, out) : sf_ulid_format(id, out);
}

bool mc_ids_value(mc_conn *m, mc_id_spans *sp, int f, const char *key, size_t klen, bool with_cas)
{
    char buf[6 + CACHE_KEY_MAX + 2 * FMT_U64_MAX + 8 + MC_ID_TEXT_MAX + 2];
    char id[MC_ID_TEXT_MAX];
    size_t idn;
    if (f == MC_ID_SEQUENCE) { /* the namespace's next number taken for the line */
        const char *name;
        size_t len = key_suffix(m, f, key, klen, &name);
        unsigned d = 0;
        while (d + 1 < sp->ndraw && !(strlen(sp->draw[d].ns->def.name) == len &&
                                      memcmp(sp->draw[d].ns->def.name, name, len) == 0))
            d++;
        idn = fmt_u64(id, sp->nums[sp->draw[d].at + sp->draw[d].used++]);
        sp->used[f]++;
    } else {
        idn = format_slot(m, sp->g[f], f, &sp->span[f], sp->used[f]++, key, klen, id);
    }
    if (!idn) {
        refuse(m, SF_ERANDOM);
        return false;
    }
    size_t n = 6;
    memcpy(buf, "VALUE ", 6);
    memcpy(buf + n, key, klen);
    n += klen;
    memcpy(buf + n, " 0 ", 3); /* flags 0, as katsubushi */
    n += 3;
    n += fmt_u64(buf + n, idn);
    if (with_cas) { /* nothing to compare-and-swap: 0, as memcached -C answers */
        memcpy(buf + n, " 0", 2);
        n += 2;
    }
    buf[n++] = '\r';
    buf[n++] = '\n';
    memcpy(buf + n, id, idn);
    n += idn;
    buf[n++] = '\r';
    buf[n++] = '\n';
    counter_add(&m->ml->ids_issued[f], 1);
    conn_write(m->c, buf, n);
    return true;
}

size_t mc_ids_one(mc_conn *m, int f, const char *key, size_t klen, char *out)
{
    if (f == MC_ID_SEQUENCE) {
        seq_ns *ns = seq_ns_of(m, key, klen);
        uint64_t v;
        if (!ns)
            return 0;
        seq_take_result res = seq_take(ns, &v, 1);
        if (res != SEQ_R_OK) {
            seq_refuse(m, ns, res);
            return 0;
        }
        counter_add(&m->ml->ids_issued[f], 1);
        return fmt_u64(out, v);
    }
    if (f == MC_ID_TYPEID && !typeid_ok(m, key, klen))
        return 0;
    sf_gen *g = gen_of(m, f);
    sf_span span;
    int rc = sf_gen_reserve(g, 1, &span);
    if (rc != SF_OK) {
        refuse(m, rc);
        return 0;
    }
    size_t n = format_slot(m, g, f, &span, 0, key, klen, out);
    if (!n) {
        refuse(m, SF_ERANDOM);
        return 0;
    }
    counter_add(&m->ml->ids_issued[f], 1);
    return n;
}
