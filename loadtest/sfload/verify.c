/* ID verification: layouts, the sparse bitmap set, the per-thread verifier (see verify.h). */
#include "verify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snowflake/layout.h"

#define MIGRATE_STEP 32 /* old slots moved per insert while growing */
#define MIN_CAP      1024

/* --- layout -------------------------------------------------------------------------------- */

static const char node_low_suffix[] = ",node_bits_low";

int vlayout_parse(const char *s, vlayout *l)
{
    const sf_layout_preset *p = sf_layout_preset_find(s);
    if (p) {
        *l = (vlayout){p->timestamp_bits, p->datacenter_bits, p->worker_bits, p->sequence_bits,
                       p->node_bits_low};
        return 0;
    }
    unsigned v[4];
    for (int i = 0; i < 4; i++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned n = 0;
        while (*s >= '0' && *s <= '9' && n < 100)
            n = n * 10 + (unsigned)(*s++ - '0');
        v[i] = n;
        if (i < 3 && *s++ != '/')
            return -1;
    }
    bool node_low = strcmp(s, node_low_suffix) == 0;
    if ((*s && !node_low) || v[0] + v[1] + v[2] + v[3] > 63 || v[0] < 1 || v[3] < 1)
        return -1;
    *l = (vlayout){v[0], v[1], v[2], v[3], node_low};
    return 0;
}

void vlayout_name(const vlayout *l, char buf[VLAYOUT_NAME_MAX])
{
    snprintf(buf, VLAYOUT_NAME_MAX, "%u/%u/%u/%u%s", l->t, l->d, l->w, l->s,
             l->node_low ? node_low_suffix : "");
}

/* The value of label key (e.g. "layout=\"") in the line [p, eol), copied into buf. */
static bool label_value(const char *p, const char *eol, const char *key, char *buf, size_t size)
{
    size_t klen = strlen(key);
    for (const char *q = p; q + klen < eol; q++) {
        if (memcmp(q, key, klen) != 0 || (q > p && q[-1] != '{' && q[-1] != ','))
            continue;
        const char *v = q + klen;
        const char *e = memchr(v, '"', (size_t)(eol - v));
        if (!e || (size_t)(e - v) >= size)
            return false;
        memcpy(buf, v, (size_t)(e - v));
        buf[e - v] = '\0';
        return true;
    }
    return false;
}

int vlayout_from_metrics(const char *text, size_t len, vlayout *l)
{
    static const char fam[] = "snowflaked_info{";
    const char *end = text + len;
    for (const char *p = text; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        size_t n = (size_t)(eol - p);
        if (n >= sizeof fam - 1 && memcmp(p, fam, sizeof fam - 1) == 0) {
            char widths[32], low[8];
            if (!label_value(p, eol, "layout=\"", widths, sizeof widths) ||
                vlayout_parse(widths, l) != 0)
                return -1;
            l->node_low = label_value(p, eol, "node_bits_low=\"", low, sizeof low) &&
                          strcmp(low, "true") == 0;
            return 0;
        }
        p = nl ? nl + 1 : end;
    }
    return -1;
}

void vlayout_describe(const vlayout *l, uint64_t id, char *buf, size_t size)
{
    unsigned seq_shift = l->node_low ? l->d + l->w : 0, worker_shift = l->node_low ? 0 : l->s;
    uint64_t seq = (id >> seq_shift) & ((UINT64_C(1) << l->s) - 1);
    uint64_t worker = (id >> worker_shift) & ((UINT64_C(1) << l->w) - 1);
    uint64_t dc = (id >> (worker_shift + l->w)) & ((UINT64_C(1) << l->d) - 1);
    uint64_t ts = id >> (l->s + l->w + l->d);
    snprintf(buf, size, "%llu (timestamp %llu, dc %llu, worker %llu, seq %llu)",
             (unsigned long long)id, (unsigned long long)ts, (unsigned long long)dc,
             (unsigned long long)worker, (unsigned long long)seq);
}

/* --- the ID set ---------------------------------------------------------------------------- */

static size_t slot_of(uint64_t key, unsigned shift)
{
    return (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> shift);
}

/* The entry holding key, or the empty slot where it would go. */
static idset_entry *probe(idset_entry *tab, size_t cap, unsigned shift, uint64_t key)
{
    size_t mask = cap - 1;
    for (size_t i = slot_of(key, shift);; i = (i + 1) & mask)
        if (tab[i].key == key || tab[i].key == 0)
            return &tab[i];
}

static unsigned log2_of(size_t pow2)
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)pow2);
}

static int table_alloc(idset *s, size_t cap)
{
    idset_entry *t = calloc(cap, sizeof *t);
    if (!t)
        return -1;
    s->tab = t;
    s->cap = cap;
    s->used = 0;
    s->shift = 64 - log2_of(cap);
    return 0;
}

int idset_init(idset *s, unsigned block_bits, uint64_t expected_ids)
{
    memset(s, 0, sizeof *s);
    s->block_bits = block_bits > 6 ? 6 : block_bits;
    /* Size for dense IDs (full words) at load 1/2; sparser IDs grow it, incrementally. */
    uint64_t want = (expected_ids >> s->block_bits) * 2;
    size_t cap = MIN_CAP;
    while (cap < want && cap < ((size_t)1 << 40))
        cap <<= 1;
    return table_alloc(s, cap);
}

void idset_free(idset *s)
{
    free(s->tab);
    free(s->old);
    s->tab = s->old = NULL;
    s->cap = s->old_cap = s->used = 0;
}

static void migrate(idset *s, size_t steps)
{
    while (s->old && steps--) {
        idset_entry *e = &s->old[s->old_pos++];
        if (e->key) {
            *probe(s->tab, s->cap, s->shift, e->key) = *e;
            s->used++;
        }
        if (s->old_pos == s->old_cap) {
            free(s->old);
            s->old = NULL;
            s->old_cap = s->old_pos = 0;
        }
    }
}

static int grow(idset *s)
{
    if (s->old) /* cannot happen with the step size above; finish the migration first */
        migrate(s, SIZE_MAX);
    idset_entry *prev = s->tab;
    size_t prev_cap = s->cap;
    unsigned prev_shift = s->shift;
    if (table_alloc(s, prev_cap * 2) != 0) {
        s->tab = prev;
        s->cap = prev_cap;
        s->shift = prev_shift;
        return -1;
    }
    s->old = prev;
    s->old_cap = prev_cap;
    s->old_shift = prev_shift;
    s->old_pos = 0;
    return 0;
}

/* The entry holding key in either table, or NULL. */
static idset_entry *find(const idset *s, uint64_t key)
{
    idset_entry *e = probe(s->tab, s->cap, s->shift, key);
    if (e->key == key)
        return e;
    if (s->old) {
        /* Entries already migrated are also in tab (found above), so a hit here is live. */
        e = probe(s->old, s->old_cap, s->old_shift, key);
        if (e->key == key)
            return e;
    }
    return NULL;
}

static int add_word(idset *s, uint64_t key, uint64_t bits, uint64_t *common)
{
    idset_entry *e = find(s, key);
    if (e) {
        *common = e->bits & bits;
        s->ids += (uint64_t)__builtin_popcountll(bits & ~e->bits);
        e->bits |= bits;
        return 0;
    }
    *common = 0;
    if ((s->used + 1) * 2 > s->cap && grow(s) != 0)
        return -1;
    e = probe(s->tab, s->cap, s->shift, key);
    e->key = key;
    e->bits = bits;
    s->used++;
    s->ids += (uint64_t)__builtin_popcountll(bits);
    migrate(s, MIGRATE_STEP);
    return 0;
}

int idset_add(idset *s, uint64_t id)
{
    uint64_t key = (id >> s->block_bits) + 1;
    uint64_t bit = UINT64_C(1) << (id & ((UINT64_C(1) << s->block_bits) - 1));
    uint64_t common;
    if (add_word(s, key, bit, &common) != 0)
        return -1;
    return common ? 0 : 1;
}

bool idset_contains(const idset *s, uint64_t id)
{
    const idset_entry *e = find(s, (id >> s->block_bits) + 1);
    return e && (e->bits >> (id & ((UINT64_C(1) << s->block_bits) - 1)) & 1);
}

size_t idset_bytes(const idset *s)
{
    return (s->cap + s->old_cap) * sizeof(idset_entry);
}

uint64_t idset_count_common(idset *s, idset *const *earlier, unsigned n, idset_dup_fn dup, void *ud)
{
    uint64_t common_ids = 0;
    migrate(s, SIZE_MAX); /* every entry in tab: one pass sees each word once */
    for (size_t i = 0; i < s->cap; i++) {
        const idset_entry *e = &s->tab[i];
        if (!e->key)
            continue;
        uint64_t common = 0;
        for (unsigned j = 0; j < n; j++) {
            const idset_entry *f =
                earlier[j]->block_bits == s->block_bits ? find(earlier[j], e->key) : NULL;
            if (f)
                common |= f->bits & e->bits;
        }
        for (uint64_t c = common; c; c &= c - 1) {
            common_ids++;
            if (dup)
                dup(ud, ((e->key - 1) << s->block_bits) | (uint64_t)__builtin_ctzll(c));
        }
    }
    return common_ids;
}

/* --- the verifier -------------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void example(verifier *v, const char *fmt, ...)
{
    if (v->nexamples >= VERIFY_EXAMPLES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->examples[v->nexamples++], VERIFY_MSG, fmt, ap);
    va_end(ap);
}

int verifier_init(verifier *v, const vlayout *l, unsigned thread, uint64_t expected_ids)
{
    memset(v, 0, sizeof *v);
    v->layout = *l;
    v->thread = thread;
    return idset_init(&v->set, l->s, expected_ids);
}

void verifier_free(verifier *v)
{
    idset_free(&v->set);
}

typedef struct body_ctx {
    verifier *v;
    verify_stream *st;
    int failed;
} body_ctx;

static int check_id(void *ud, uint64_t id)
{
    body_ctx *b = ud;
    verifier *v = b->v;
    verify_stream *st = b->st;
    char d[96];
    v->ids++;
    if (st->have_last && id <= st->last) {
        v->non_increasing++;
        b->failed = 1;
        if (v->nexamples < VERIFY_EXAMPLES) {
            char prev[96];
            vlayout_describe(&v->layout, id, d, sizeof d);
            vlayout_describe(&v->layout, st->last, prev, sizeof prev);
            example(v, "not increasing on thread %u connection %u: %s after %s", v->thread,
                    st->conn, d, prev);
        }
    }
    st->last = id;
    st->have_last = true;
    if (v->rec) {
        idrec r = {id, (uint16_t)st->target, st->recv_ms, (uint16_t)(st->conn & IDREC_CONN_MAX),
                   st->fresh};
        idrec_writer_add(v->rec, &r);
    }
    st->fresh = false;
    int r = idset_add(&v->set, id);
    if (r < 0) {
        v->oom = true;
        b->failed = 1;
        return 1;
    }
    if (r == 0) {
        v->duplicates++;
        b->failed = 1;
        if (v->nexamples < VERIFY_EXAMPLES) {
            vlayout_describe(&v->layout, id, d, sizeof d);
            example(v, "duplicate on thread %u connection %u: %s", v->thread, st->conn, d);
        }
    }
    return 0;
}

/* Up to 48 bytes of body, printable. */
static void excerpt(const char *body, size_t len, char *out, size_t size)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 5 < size && i < 48; i++) {
        unsigned char c = (unsigned char)body[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[n++] = (char)c;
        else
            n += (size_t)snprintf(out + n, size - n, "\\x%02x", c);
    }
    out[n] = '\0';
}

void verifier_malformed(verifier *v, const verify_stream *st, const char *why)
{
    v->malformed++;
    example(v, "malformed response on thread %u connection %u: %s", v->thread, st->conn, why);
}

int verifier_body(verifier *v, verify_stream *st, const char *body, size_t len, ids_enc enc,
                  uint32_t expect_count)
{
    body_ctx b = {v, st, 0};
    const char *why = "";
    v->bodies++;
    long n = ids_parse(body, len, enc, check_id, &b, &why);
    if (v->oom) {
        example(v, "out of memory in the ID set after %llu IDs", (unsigned long long)v->ids);
        return -1;
    }
    if (n < 0 || (expect_count && (uint64_t)n != expect_count)) {
        char ex[200], msg[160];
        excerpt(body, len, ex, sizeof ex);
        if (n < 0)
            snprintf(msg, sizeof msg, "%s: \"%s\"", why, ex);
        else
            snprintf(msg, sizeof msg, "%ld IDs where count=%u asked for: \"%s\"", n, expect_count,
                     ex);
        verifier_malformed(v, st, msg);
        return -1;
    }
    return b.failed ? -1 : 0;
}

static void cross_dup(void *ud, uint64_t id)
{
    verifier *v = ud;
    if (v->nexamples < VERIFY_EXAMPLES) {
        char d[96];
        vlayout_describe(&v->layout, id, d, sizeof d);
        example(v, "duplicate across load threads: %s", d);
    }
}

void verifier_merge(verifier *const *v, unsigned n)
{
    verifier *dst = v[0];
    idset *sets[256];
    uint64_t cross = 0;
    if (n > 256)
        n = 256;
    for (unsigned i = 0; i < n; i++)
        sets[i] = &v[i]->set;
    for (unsigned i = 1; i < n; i++)
        cross += idset_count_common(sets[i], sets, i, cross_dup, dst);
    dst->distinct = dst->set.ids;
    for (unsigned i = 1; i < n; i++) {
        const verifier *src = v[i];
        dst->ids += src->ids;
        dst->bodies += src->bodies;
        dst->duplicates += src->duplicates;
        dst->non_increasing += src->non_increasing;
        dst->malformed += src->malformed;
        dst->oom = dst->oom || src->oom;
        dst->distinct += src->set.ids;
        for (unsigned k = 0; k < src->nexamples && dst->nexamples < VERIFY_EXAMPLES; k++)
            memcpy(dst->examples[dst->nexamples++], src->examples[k], VERIFY_MSG);
    }
    dst->duplicates += cross;
    dst->distinct -= cross;
}

int verifier_write_ids(verifier *const *v, unsigned n, FILE *f)
{
    for (unsigned t = 0; t < n; t++) {
        idset *s = &v[t]->set;
        migrate(s, SIZE_MAX);
        for (size_t i = 0; i < s->cap; i++) {
            const idset_entry *e = &s->tab[i];
            for (uint64_t bits = e->key ? e->bits : 0; bits; bits &= bits - 1) {
                uint64_t id = ((e->key - 1) << s->block_bits) | (uint64_t)__builtin_ctzll(bits);
                unsigned char b[8];
                for (int k = 0; k < 8; k++)
                    b[k] = (unsigned char)(id >> (8 * k));
                if (fwrite(b, 1, 8, f) != 8)
                    return -1;
            }
        }
    }
    return fflush(f) == 0 ? 0 : -1;
}

bool verifier_failed(const verifier *v)
{
    return v->duplicates || v->non_increasing || v->malformed || v->oom;
}
