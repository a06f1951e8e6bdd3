/* Segment mode's core: the namespace table and the double-buffered blocks (seq/seq.h). */
#include "seq/seq.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obs/log.h"
#include "util/counter.h"
#include "util/spinlock.h"

const double seq_latency_bounds[SEQ_LATENCY_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t name_hash(const char *name, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h;
}

int seq_def_check(seq_ns_def *d, char *err, size_t errlen)
{
    size_t len = strnlen(d->name, sizeof d->name);
    if (len == sizeof d->name || !seq_name_valid(d->name, len)) {
        snprintf(err, errlen,
                 "namespace name \"%.*s\": 1 to %d characters of A-Z a-z 0-9 _ . -, the first "
                 "a letter or digit",
                 (int)(len > SEQ_NAME_MAX ? SEQ_NAME_MAX : len), d->name, SEQ_NAME_MAX);
        return -1;
    }
    size_t th = strnlen(d->token_sha256, sizeof d->token_sha256);
    bool hex = th == 0 || th == SHA256_HEX_LEN;
    for (size_t i = 0; hex && i < th; i++)
        hex = (d->token_sha256[i] >= '0' && d->token_sha256[i] <= '9') ||
              (d->token_sha256[i] >= 'a' && d->token_sha256[i] <= 'f');
    if (!hex) {
        snprintf(err, errlen, "namespace %s: token_sha256 is 64 lowercase hex digits", d->name);
        return -1;
    }
    if (d->max == 0)
        d->max = UINT64_MAX - 1;
    if (d->max == UINT64_MAX) {
        snprintf(err, errlen, "namespace %s: max is at most %llu", d->name,
                 (unsigned long long)(UINT64_MAX - 1));
        return -1;
    }
    if (d->start > d->max) {
        snprintf(err, errlen, "namespace %s: start %llu is above max %llu", d->name,
                 (unsigned long long)d->start, (unsigned long long)d->max);
        return -1;
    }
    if (!d->adaptive) {
        if (d->block == 0) {
            snprintf(err, errlen, "namespace %s: block must be at least 1", d->name);
            return -1;
        }
        d->block_min = d->block_max = d->block;
        return 0;
    }
    if (d->block_min == 0 || d->block_max < d->block_min) {
        snprintf(err, errlen,
                 "namespace %s: an adaptive block needs 1 <= block_min <= block_max (got %llu, "
                 "%llu)",
                 d->name, (unsigned long long)d->block_min, (unsigned long long)d->block_max);
        return -1;
    }
    if (d->block < d->block_min)
        d->block = d->block_min;
    if (d->block > d->block_max)
        d->block = d->block_max;
    return 0;
}

seq_table *seq_table_new(const seq_source *src, const seq_options *opt, clk_source *clock,
                         unsigned cap, char *err, size_t errlen)
{
    if (cap == 0 || cap > SEQ_MAX_NAMESPACES) {
        snprintf(err, errlen, "sequences: between 1 and %d namespaces", SEQ_MAX_NAMESPACES);
        return NULL;
    }
    seq_table *t = calloc(1, sizeof *t);
    unsigned slots = 4;
    while (slots < 2 * cap)
        slots *= 2;
    if (t) {
        t->ns = calloc(cap, sizeof *t->ns);
        t->index = calloc(slots, sizeof *t->index);
    }
    if (!t || !t->ns || !t->index) {
        if (t) {
            free(t->ns);
            free((void *)t->index);
        }
        free(t);
        snprintf(err, errlen, "sequences: out of memory");
        return NULL;
    }
    t->src = *src;
    t->opt = *opt;
    if (t->opt.prefetch_pct > 100)
        t->opt.prefetch_pct = 100;
    t->clock = clock;
    t->cap = cap;
    t->index_mask = slots - 1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    return t;
}

seq_ns *seq_find(seq_table *t, const char *name, size_t len)
{
    if (len == 0 || len > SEQ_NAME_MAX)
        return NULL;
    for (uint32_t i = name_hash(name, len) & t->index_mask;; i = (i + 1) & t->index_mask) {
        int v = atomic_load_explicit(&t->index[i], memory_order_acquire);
        if (v == 0)
            return NULL;
        seq_ns *ns = &t->ns[v - 1];
        if (strncmp(ns->def.name, name, len) == 0 && ns->def.name[len] == '\0')
            return ns;
    }
}

int seq_table_declare(seq_table *t, const seq_ns_def *def, const char *token, char *err,
                      size_t errlen)
{
    seq_ns_def d = *def;
    if (seq_def_check(&d, err, errlen) != 0)
        return -1;
    size_t len = strlen(d.name);
    if (seq_find(t, d.name, len)) {
        snprintf(err, errlen, "namespace %s is declared twice", d.name);
        return -1;
    }
    unsigned id = atomic_load_explicit(&t->count, memory_order_relaxed);
    if (id == t->cap) {
        snprintf(err, errlen, "namespace %s: the table is full (%u namespaces)", d.name, t->cap);
        return -1;
    }
    size_t tlen = token ? strlen(token) : 0;
    if (tlen > SEQ_TOKEN_MAX) {
        snprintf(err, errlen, "namespace %s: token longer than %d bytes", d.name, SEQ_TOKEN_MAX);
        return -1;
    }
    seq_ns *ns = &t->ns[id];
    memset(ns, 0, sizeof *ns);
    ns->id = id;
    ns->table = t;
    ns->def = d;
    ns->block = d.block;
    memcpy(ns->token, token ? token : "", tlen);
    ns->token_len = tlen;
    uint32_t i = name_hash(d.name, len) & t->index_mask;
    while (atomic_load_explicit(&t->index[i], memory_order_relaxed) != 0)
        i = (i + 1) & t->index_mask;
    atomic_store_explicit(&t->index[i], (int)id + 1, memory_order_release);
    atomic_store_explicit(&t->count, id + 1, memory_order_release);
    return 0;
}

static uint64_t prefetch_point(const seq_table *t, uint64_t lo, uint64_t hi)
{
    return lo + (hi - lo) * t->opt.prefetch_pct / 100;
}

/* Under the lock: whether to start a reserve now (then fetching is set and *want says how
 * many). The caller calls start_fetch after unlocking. */
static bool fetch_due(seq_ns *ns, uint64_t *want)
{
    if (ns->fetching || ns->exhausted || ns->next_lo != ns->next_hi)
        return false;
    seq_table *t = ns->table;
    uint64_t now = clk_now(t->clock);
    if (now < ns->retry_at_ms)
        return false;
    if (ns->def.adaptive && ns->last_fetch_ms) {
        /* Leaf's rule on our target: when the reserves come faster than half the target apart
         * (a block lasts less), the next block doubles; slower than twice the target, it halves. */
        uint64_t lasted = now - ns->last_fetch_ms, target = t->opt.adaptive_block_ms;
        if (lasted < target / 2)
            ns->block = ns->block <= ns->def.block_max / 2 ? ns->block * 2 : ns->def.block_max;
        else if (lasted > target * 2 && ns->block / 2 >= ns->def.block_min)
            ns->block /= 2;
    }
    ns->last_fetch_ms = now;
    ns->fetching = true;
    ns->fetch_started_ns = mono_ns();
    *want = ns->block;
    return true;
}

static void on_reserved(void *arg, const seq_result *res);

static void start_fetch(seq_ns *ns, uint64_t want)
{
    seq_table *t = ns->table;
    if (t->src.reserve(t->src.ctx, ns->id, want, on_reserved, ns) == 0)
        return;
    spin_lock(&ns->lock);
    ns->fetching = false;
    ns->retry_at_ms = clk_now(t->clock) + t->opt.retry_ms;
    snprintf(ns->err, sizeof ns->err, "the %s block source refused the request", t->src.kind);
    counter_add(&ns->stats.fetch_failures, 1);
    spin_unlock(&ns->lock);
}

static void first_done(seq_table *t)
{
    pthread_mutex_lock(&t->mu);
    if (t->first_pending && --t->first_pending == 0)
        pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void on_reserved(void *arg, const seq_result *res)
{
    seq_ns *ns = arg;
    seq_table *t = ns->table;
    uint64_t took_ns = mono_ns() - ns->fetch_started_ns; /* written before the reserve began */
    double s = (double)took_ns / 1e9;
    unsigned b = 0;
    while (b < SEQ_LATENCY_BUCKETS && s > seq_latency_bounds[b])
        b++;
    bool failed = false, recovered = false, log_it = false;
    uint64_t unlogged = 0;
    spin_lock(&ns->lock);
    ns->fetching = false;
    counter_add(&ns->stats.latency[b], 1);
    counter_add(&ns->stats.latency_sum_us, took_ns / 1000);
    counter_add(&ns->stats.store_ops, res->store_ops);
    if (res->status == SEQ_OK && res->lo < res->hi) {
        counter_add(&ns->stats.blocks, 1);
        counter_add(&ns->stats.block_numbers, res->hi - res->lo);
        ns->err[0] = '\0';
        recovered = ns->fail_logged_ms != 0;
        unlogged = ns->fails_unlogged;
        ns->fail_logged_ms = 0;
        ns->fails_unlogged = 0;
        if (ns->cur == ns->cur_hi) { /* nothing left: the new block is current at once */
            ns->cur = res->lo;
            ns->cur_hi = res->hi;
            ns->prefetch_at = prefetch_point(t, res->lo, res->hi);
        } else {
            ns->next_lo = res->lo;
            ns->next_hi = res->hi;
        }
    } else if (res->status == SEQ_EXHAUSTED) {
        ns->exhausted = true;
    } else {
        failed = true;
        counter_add(&ns->stats.fetch_failures, 1);
        uint64_t now = clk_now(t->clock);
        ns->retry_at_ms = now + t->opt.retry_ms;
        /* one line per failure would be one a second per namespace while a disk stays full:
         * the first, then one a minute with the count in between */
        log_it = ns->fail_logged_ms == 0 || now - ns->fail_logged_ms >= 60000;
        if (log_it) {
            unlogged = ns->fails_unlogged;
            ns->fails_unlogged = 0;
            ns->fail_logged_ms = now;
        } else {
            ns->fails_unlogged++;
        }
        snprintf(ns->err, sizeof ns->err, "%s", res->err ? res->err : "block reserve failed");
    }
    bool first = ns->awaited;
    ns->awaited = false;
    spin_unlock(&ns->lock);
    if (failed && log_it)
        LOG_WARN("sequences: namespace %s: no block reserved (%s): its numbers run out, then "
                 "requests get 503 until a reserve succeeds (%llu more failures since the last "
                 "line)",
                 ns->def.name, res->err ? res->err : "failed", (unsigned long long)unlogged);
    else if (recovered)
        LOG_INFO("sequences: namespace %s: blocks reserved again (%llu failures unlogged)",
                 ns->def.name, (unsigned long long)unlogged);
    if (first)
        first_done(t);
    else {
        pthread_mutex_lock(&t->mu); /* seq_table_stop waits for the reserves in flight */
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
    }
}

/* The refusals a take meets before the namespace's lock: not live, past the fence, a count no
 * two blocks hold. counted: a take's (the fenced counter), not a peek's. */
static seq_take_result gate(seq_ns *ns, uint32_t count, bool counted)
{
    seq_table *t = ns->table;
    int state = atomic_load_explicit(&ns->state, memory_order_acquire);
    if (state != SEQ_NS_LIVE)
        return state == SEQ_NS_CREATING ? SEQ_R_CREATING : SEQ_R_FAILED;
    if (t->src.fence_ms && clk_now(t->clock) >= t->src.fence_ms(t->src.ctx)) {
        if (counted)
            atomic_fetch_add_explicit(&ns->stats.fenced, 1, memory_order_relaxed);
        return SEQ_R_FENCED;
    }
    if (count == 0 || count > ns->def.block_min)
        return SEQ_R_TOO_MANY;
    return SEQ_R_OK;
}

/* Under the lock, fewer than count numbers held: once the source said exhausted (and no reserve
 * runs), none ever comes again: Gone when nothing is left, else a count above what is left is
 * the client's error, not the end of the namespace. */
static seq_take_result short_of(const seq_ns *ns, uint64_t avail)
{
    if (!ns->exhausted || ns->fetching)
        return SEQ_R_EMPTY;
    return avail ? SEQ_R_BEYOND_MAX : SEQ_R_EXHAUSTED;
}

/* seq_take's body, inlined into both: the quiet one is the HTTP park's (api/seq.c), which may
 * retry and counts the refusal it finally answers itself. */
static inline __attribute__((always_inline)) seq_take_result take(seq_ns *ns, uint64_t *out,
                                                                   uint32_t count,
                                                                   bool count_refusal)
{
    seq_table *t = ns->table;
    seq_take_result g = gate(ns, count, true);
    if (g != SEQ_R_OK)
        return g;
    uint64_t want = 0;
    bool fetch;
    spin_lock(&ns->lock);
    uint64_t avail = (ns->cur_hi - ns->cur) + (ns->next_hi - ns->next_lo);
    if (avail < count) {
        seq_take_result r = short_of(ns, avail);
        fetch = false;
        if (r == SEQ_R_EMPTY) {
            if (count_refusal)
                counter_add(&ns->stats.refused, 1);
            fetch = fetch_due(ns, &want);
        }
        spin_unlock(&ns->lock);
        if (fetch)
            start_fetch(ns, want);
        return r;
    }
    for (uint32_t i = 0; i < count; i++) {
        if (ns->cur == ns->cur_hi) { /* the next block becomes current */
            ns->cur = ns->next_lo;
            ns->cur_hi = ns->next_hi;
            ns->next_lo = ns->next_hi = 0;
            ns->prefetch_at = prefetch_point(t, ns->cur, ns->cur_hi);
        }
        out[i] = ns->cur++;
    }
    counter_add(&ns->stats.issued, count);
    fetch = ns->cur >= ns->prefetch_at && fetch_due(ns, &want);
    spin_unlock(&ns->lock);
    if (fetch)
        start_fetch(ns, want);
    return SEQ_R_OK;
}

seq_take_result seq_take(seq_ns *ns, uint64_t *out, uint32_t count)
{
    return take(ns, out, count, true);
}

seq_take_result seq_take_quiet(seq_ns *ns, uint64_t *out, uint32_t count)
{
    return take(ns, out, count, false);
}

seq_take_result seq_peek(seq_ns *ns, uint32_t count, uint64_t *next)
{
    seq_take_result r = gate(ns, count, false);
    if (r != SEQ_R_OK)
        return r;
    spin_lock(&ns->lock);
    uint64_t avail = (ns->cur_hi - ns->cur) + (ns->next_hi - ns->next_lo);
    if (avail < count)
        r = short_of(ns, avail);
    *next = ns->cur != ns->cur_hi ? ns->cur : ns->next_lo != ns->next_hi ? ns->next_lo : ns->cur;
    spin_unlock(&ns->lock);
    return r;
}

uint64_t seq_remaining(seq_ns *ns)
{
    spin_lock(&ns->lock);
    uint64_t n = (ns->cur_hi - ns->cur) + (ns->next_hi - ns->next_lo);
    spin_unlock(&ns->lock);
    return n;
}

uint64_t seq_block_end(seq_ns *ns)
{
    spin_lock(&ns->lock);
    uint64_t end = ns->next_lo != ns->next_hi ? ns->next_hi : ns->cur_hi;
    spin_unlock(&ns->lock);
    return end;
}

void seq_last_error(seq_ns *ns, char *buf, size_t cap)
{
    spin_lock(&ns->lock);
    snprintf(buf, cap, "%s", ns->err);
    spin_unlock(&ns->lock);
}

int seq_refusal(seq_ns *ns, seq_take_result res, char *msg, size_t cap)
{
    char why[160];
    switch (res) {
    case SEQ_R_OK: break;
    case SEQ_R_CREATING:
        snprintf(msg, cap, "namespace %s is being created", ns->def.name);
        return 503;
    case SEQ_R_FAILED:
        seq_last_error(ns, why, sizeof why);
        snprintf(msg, cap, "namespace %s was not created: %s", ns->def.name, why);
        return 404;
    case SEQ_R_EMPTY:
        seq_last_error(ns, why, sizeof why);
        snprintf(msg, cap, "namespace %s has no number in hand: %s", ns->def.name,
                 why[0] ? why : "the next block is being reserved");
        return 503;
    case SEQ_R_FENCED:
        snprintf(msg, cap, "namespace %s: this node is past its fence and issues nothing",
                 ns->def.name);
        return 503;
    case SEQ_R_EXHAUSTED:
        snprintf(msg, cap, "namespace %s is past its max %llu: no number is left", ns->def.name,
                 (unsigned long long)ns->def.max);
        return 410;
    case SEQ_R_BEYOND_MAX: { /* numbers remain: 410 would tell the client to give up */
        uint64_t left = seq_remaining(ns);
        snprintf(msg, cap, "namespace %s has %llu number%s left before its max %llu",
                 ns->def.name, (unsigned long long)left, left == 1 ? "" : "s",
                 (unsigned long long)ns->def.max);
        return 400;
    }
    case SEQ_R_TOO_MANY:
        snprintf(msg, cap, "count must be at most %llu for namespace %s (its block)",
                 (unsigned long long)ns->def.block_min, ns->def.name);
        return 400;
    }
    snprintf(msg, cap, "namespace %s: no refusal", ns->def.name);
    return 200;
}

/* ---- created at run time ---------------------------------------------------------------- */

static bool same_def(const seq_ns_def *a, const seq_ns_def *b)
{
    return strcmp(a->name, b->name) == 0 && a->start == b->start && a->max == b->max &&
           a->block == b->block && a->adaptive == b->adaptive && a->block_min == b->block_min &&
           a->block_max == b->block_max && strcmp(a->token_sha256, b->token_sha256) == 0;
}

static void on_created(void *arg, const seq_result *res)
{
    seq_ns *ns = arg;
    seq_table *t = ns->table;
    bool live = res->status == SEQ_OK ||
                (res->status == SEQ_EXISTS && res->def && same_def(res->def, &ns->def));
    spin_lock(&ns->lock);
    counter_add(&ns->stats.store_ops, res->store_ops);
    if (!live && res->status == SEQ_EXISTS)
        snprintf(ns->err, sizeof ns->err,
                 "the %s source holds namespace %s with another definition", t->src.kind,
                 ns->def.name);
    else if (!live)
        snprintf(ns->err, sizeof ns->err, "%s", res->err ? res->err : "creation failed");
    else
        ns->err[0] = '\0';
    uint64_t want = 0;
    bool fetch = live && fetch_due(ns, &want);
    spin_unlock(&ns->lock);
    atomic_store_explicit(&ns->state, live ? SEQ_NS_LIVE : SEQ_NS_FAILED, memory_order_release);
    if (live)
        LOG_INFO("sequences: namespace %s created (start %llu, block %llu)", ns->def.name,
                 (unsigned long long)ns->def.start, (unsigned long long)ns->def.block);
    else
        LOG_WARN("sequences: namespace %s not created: %s", ns->def.name,
                 res->err ? res->err : "another definition in the store");
    if (fetch)
        start_fetch(ns, want);
}

seq_create_result seq_table_create(seq_table *t, const seq_ns_def *def, seq_ns **out, char *err,
                                   size_t errlen)
{
    seq_ns_def d = *def;
    if (seq_def_check(&d, err, errlen) != 0)
        return SEQ_C_BAD;
    size_t len = strlen(d.name);
    pthread_mutex_lock(&t->mu);
    seq_ns *ns = seq_find(t, d.name, len);
    if (ns) {
        *out = ns;
        int state = atomic_load_explicit(&ns->state, memory_order_acquire);
        bool same = same_def(&ns->def, &d);
        if (state != SEQ_NS_FAILED || !same) {
            /* A failed one is tried again in its slot, with the same definition only: its
             * fields are read without a lock (metrics, listing). */
            pthread_mutex_unlock(&t->mu);
            if (!same)
                snprintf(err, errlen, "namespace %s exists with another definition%s", d.name,
                         state == SEQ_NS_FAILED ? " (its creation failed; it goes at restart)"
                                                : "");
            return same ? SEQ_C_SAME : SEQ_C_CONFLICT;
        }
    } else {
        unsigned id = atomic_load_explicit(&t->count, memory_order_relaxed);
        if (id == t->cap) {
            pthread_mutex_unlock(&t->mu);
            snprintf(err, errlen, "namespace %s: the table is full (sequences.max_namespaces %u)",
                     d.name, t->cap);
            return SEQ_C_FULL;
        }
        ns = &t->ns[id];
        memset(ns, 0, sizeof *ns);
        ns->id = id;
        ns->table = t;
        ns->def = d;
        ns->block = d.block;
        atomic_store_explicit(&ns->state, SEQ_NS_CREATING, memory_order_relaxed);
        uint32_t i = name_hash(d.name, len) & t->index_mask;
        while (atomic_load_explicit(&t->index[i], memory_order_relaxed) != 0)
            i = (i + 1) & t->index_mask;
        atomic_store_explicit(&t->index[i], (int)id + 1, memory_order_release);
        atomic_store_explicit(&t->count, id + 1, memory_order_release);
        *out = ns;
    }
    atomic_store_explicit(&ns->state, SEQ_NS_CREATING, memory_order_release);
    pthread_mutex_unlock(&t->mu);
    if (!t->src.create || t->src.create(t->src.ctx, ns->id, &ns->def, on_created, ns) != 0) {
        spin_lock(&ns->lock);
        snprintf(ns->err, sizeof ns->err, "the %s block source refused to create it",
                 t->src.kind);
        spin_unlock(&ns->lock);
        atomic_store_explicit(&ns->state, SEQ_NS_FAILED, memory_order_release);
        snprintf(err, errlen, "namespace %s: the %s block source refused to create it", d.name,
                 t->src.kind);
        return SEQ_C_REFUSED;
    }
    return SEQ_C_ACCEPTED;
}

/* ---- start and stop ---------------------------------------------------------------------- */

typedef struct list_ctx {
    seq_table *t;
    int failed;
    char *err;
    size_t errlen;
} list_ctx;

static void listed(void *arg, const seq_ns_def *def)
{
    list_ctx *lc = arg;
    if (lc->failed)
        return;
    if (seq_table_declare(lc->t, def, NULL, lc->err, lc->errlen) != 0)
        lc->failed = 1;
}

static void deadline_after(struct timespec *ts, uint32_t ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int seq_table_start(seq_table *t, char *err, size_t errlen)
{
    if (t->src.start(t->src.ctx, err, errlen) != 0)
        return -1;
    t->started = true;
    unsigned declared = seq_count(t);
    const char *names[SEQ_MAX_NAMESPACES];
    for (unsigned i = 0; i < declared; i++) {
        names[i] = t->ns[i].def.name;
        if (t->src.declare(t->src.ctx, i, &t->ns[i].def, err, errlen) != 0)
            return -1;
    }
    list_ctx lc = {.t = t, .err = err, .errlen = errlen};
    if (t->src.list(t->src.ctx, names, declared, listed, &lc, err, errlen) != 0 || lc.failed)
        return -1;
    unsigned n = seq_count(t);
    for (unsigned i = declared; i < n; i++)
        if (t->src.declare(t->src.ctx, i, &t->ns[i].def, err, errlen) != 0)
            return -1;
    pthread_mutex_lock(&t->mu);
    t->first_pending = n;
    pthread_mutex_unlock(&t->mu);
    for (unsigned i = 0; i < n; i++) {
        seq_ns *ns = &t->ns[i];
        uint64_t want = 0;
        spin_lock(&ns->lock);
        ns->awaited = true;
        bool fetch = fetch_due(ns, &want);
        spin_unlock(&ns->lock);
        if (fetch)
            start_fetch(ns, want);
        spin_lock(&ns->lock);
        bool refused = !ns->fetching && ns->awaited;
        if (refused)
            ns->awaited = false;
        spin_unlock(&ns->lock);
        if (refused)
            first_done(t);
    }
    struct timespec until;
    deadline_after(&until, t->opt.start_wait_ms);
    pthread_mutex_lock(&t->mu);
    while (t->first_pending > 0)
        if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
            break;
    unsigned late = t->first_pending;
    pthread_mutex_unlock(&t->mu);
    if (late)
        LOG_WARN("sequences: %u namespace(s) without their first block after %u ms: they answer "
                 "503 until it arrives",
                 late, t->opt.start_wait_ms);
    return 0;
}

static bool any_fetching(seq_table *t)
{
    for (unsigned i = 0; i < seq_count(t); i++) {
        seq_ns *ns = &t->ns[i];
        spin_lock(&ns->lock);
        bool f = ns->fetching;
        spin_unlock(&ns->lock);
        if (f)
            return true;
    }
    return false;
}

void seq_table_stop(seq_table *t)
{
    if (!t || t->stopped)
        return;
    t->stopped = true;
    if (!t->started)
        return;
    /* The reserves in flight finish first (bounded): a block reported after the release would be
     * a hole, and release must see the last one. */
    struct timespec until;
    deadline_after(&until, 10000);
    pthread_mutex_lock(&t->mu);
    while (t->src.release && any_fetching(t))
        if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&t->mu);
    for (unsigned i = 0; t->src.release && i < seq_count(t); i++) {
        seq_ns *ns = &t->ns[i];
        spin_lock(&ns->lock);
        uint64_t from = ns->cur, to = ns->cur_hi, nlo = ns->next_lo, nhi = ns->next_hi;
        bool busy = ns->fetching;
        ns->cur = ns->cur_hi = ns->next_lo = ns->next_hi = 0;
        ns->exhausted = true; /* nothing more from here on */
        spin_unlock(&ns->lock);
        if (busy)
            continue;
        if (nlo != nhi) { /* the next block; with the current when they touch */
            if (from != to && to == nlo)
                nlo = from;
            from = nlo;
            to = nhi;
        }
        if (from == to)
            continue;
        char why[256];
        if (t->src.release(t->src.ctx, ns->id, from, to, why, sizeof why) != 0)
            LOG_WARN("sequences: namespace %s: numbers %llu..%llu not given back (%s): a hole",
                     ns->def.name, (unsigned long long)from, (unsigned long long)to - 1, why);
    }
    t->src.stop(t->src.ctx);
}

void seq_table_free(seq_table *t)
{
    if (!t)
        return;
    seq_table_stop(t);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t->ns);
    free((void *)t->index);
    free(t);
}
