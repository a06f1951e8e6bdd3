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
 * as sf_gen_batch and sf_id128_issue compose theirs. Nothing is allocated. */
#include <string.h>

#include "net/conn.h"
#include "proto/memcache_int.h"
#include "snowflake/id128.h"
#include "snowflake/issue128.h"
#include "snowflake/rng.h"
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
        if (n > CACHE_KEY_MAX || !cache_key_valid(k, n) || !ids->gens[f] || !ids->ngens)
            return -1;
        for (int e = 0; e < f; e++) /* equal, or one in the other's family (mc_id_key) */
            if (families_overlap(s->id_key[e], s->id_klen[e], k, n))
                return -1;
        memcpy(s->id_key[f], k, n);
        s->id_klen[f] = (uint8_t)n;
        s->ids_on = true;
    }
    s->id_ngens = ids->ngens;
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

bool mc_ids_reserve(mc_conn *m, const char *p, size_t n, mc_id_spans *sp)
{
    uint32_t any = 0;
    for (int f = 0; f < MC_ID_FORMATS; f++)
        sp->want[f] = sp->used[f] = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && p[i] == ' ')
            i++;
        size_t s = i;
        while (i < n && p[i] != ' ')
            i++;
        int f = i > s ? mc_id_key(m->srv, p + s, i - s) : -1;
        if (f >= 0) {
            sp->want[f]++;
            any++;
        }
    }
    if (!any)
        return true;
    for (int f = 0; f < MC_ID_FORMATS; f++) {
        if (!sp->want[f])
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

/* ID k of a reservation as text into out; 0 when the random source failed. */
static size_t format_slot(const sf_gen *g, int f, const sf_span *span, uint32_t k, char *out)
{
    const sf_layout *l = &g->layout;
    uint64_t index = span->first_seq + (uint64_t)k;
    uint64_t tick = span->first_tick + (index >> l->sequence_bits), seq = index & l->sequence_max;
    if (f == MC_ID_SNOWFLAKE)
        return fmt_u64(out, sf_layout_compose(l, tick, g->node_bits, seq));
    sf_id128_format f128 = f == MC_ID_UUID7 ? SF_FORMAT_UUID7 : SF_FORMAT_ULID;
    uint64_t lo, hi = 0;
    if (sf_rng_u64(&lo) != 0 || (sf_id128_random_bits(l, f128) > 64 && sf_rng_u64(&hi) != 0))
        return 0;
    sf_id128 id = sf_id128_compose(l, f128, tick, (uint32_t)seq, g->node_bits, lo, hi);
    return f128 == SF_FORMAT_UUID7 ? sf_uuid_format(id, out) : sf_ulid_format(id, out);
}

bool mc_ids_value(mc_conn *m, mc_id_spans *sp, int f, const char *key, size_t klen, bool with_cas)
{
    char buf[6 + CACHE_KEY_MAX + 2 * FMT_U64_MAX + 8 + MC_ID_TEXT_MAX + 2];
    char id[MC_ID_TEXT_MAX];
    size_t idn = format_slot(sp->g[f], f, &sp->span[f], sp->used[f]++, id);
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

size_t mc_ids_one(mc_conn *m, int f, char *out)
{
    sf_gen *g = gen_of(m, f);
    sf_span span;
    int rc = sf_gen_reserve(g, 1, &span);
    if (rc != SF_OK) {
        refuse(m, rc);
        return 0;
    }
    size_t n = format_slot(g, f, &span, 0, out);
    if (!n) {
        refuse(m, SF_ERANDOM);
        return 0;
    }
    counter_add(&m->ml->ids_issued[f], 1);
    return n;
}
