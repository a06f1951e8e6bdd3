/* The store's lifecycle and its operations (store.h is the contract; store_int.h lists the files
 * the rest lives in): creating and freeing a store, the writes (the modes, delete, invalidate,
 * touch, incr/decr, flush, restore) and the reads (get, get_meta). */
#include "cache/store_int.h"
#include "util/decimal.h"
#include "util/fmt.h"

#include <stdio.h>
#include <time.h>

const char *cache_result_name(int r)
{
    static const char *const names[] = {"OK",        "STORED",      "NOT_STORED", "EXISTS",
                                        "NOT_FOUND", "DELETED",     "TOUCHED",    "TOO_LARGE",
                                        "NO_MEMORY", "NOT_NUMERIC", "BAD_KEY",    "BAD_ARG"};
    return r >= 0 && (size_t)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

/* ---- store lifecycle ------------------------------------------------------------------------- */

static uint64_t default_seed(const void *p)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return mum((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30), (uint64_t)(uintptr_t)p | 1);
}

static int shard_init(cache_store *s, cache_shard *sh, unsigned index, cache_lock_kind kind)
{
    memset(sh, 0, sizeof *sh);
    sh->store = s;
    if (table_init(sh) != 0)
        return -1;
    pthread_mutex_init(&sh->mutex, NULL);
    atomic_init(&sh->spin, 0);
    sh->lock_kind = kind;
    sh->index = index;
    sh->hshift = s->shard_bits;
    return 0;
}

static _Atomic uint64_t store_ids; /* the last store id handed out */

static const char *check_config(const cache_store_config *c, unsigned shards)
{
    if (c->max_memory_bytes == 0)
        return "max_memory_bytes must be > 0";
    if (shards == 0 || (shards & (shards - 1)) || shards > CACHE_MAX_SHARDS)
        return "shards must be a power of two <= 4096";
    if (c->lock != CACHE_LOCK_MUTEX && c->lock != CACHE_LOCK_SPIN)
        return "unknown lock kind";
    return NULL;
}

cache_store *cache_store_new(const cache_store_config *c, char *err, size_t errlen)
{
    unsigned shards = c->shards ? c->shards : CACHE_DEFAULT_SHARDS;
    const char *why = check_config(c, shards);
    if (why) {
        snprintf(err, errlen, "cache: %s", why);
        return NULL;
    }
    cache_store *s = aligned_alloc(64, sizeof *s);
    cache_shard *sh = aligned_alloc(64, sizeof *sh * shards);
    size_t hint_bytes = (sizeof(uint64_t) * shards + 63) & ~(size_t)63;
    _Atomic uint64_t *hints = aligned_alloc(64, hint_bytes);
    if (!s || !sh || !hints) {
        free(s);
        free(sh);
        free(hints);
        snprintf(err, errlen, "cache: out of memory");
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->shards = sh;
    s->tail_hint = hints;
    for (unsigned i = 0; i < shards; i++)
        atomic_init(&hints[i], HINT_EMPTY);
    s->shard_bits = (unsigned)__builtin_ctz(shards);
    s->seed = c->seed ? c->seed : default_seed(s);
    s->id = atomic_fetch_add_explicit(&store_ids, 1, memory_order_relaxed) + 1;
    atomic_init(&s->max_memory, c->max_memory_bytes);
    s->no_evictions = c->no_evictions;
    s->flat = c->flat_lru;
    s->temp_ttl_ms = (uint64_t)c->temporary_ttl_s * 1000;
    s->max_item = c->max_item_bytes ? c->max_item_bytes : CACHE_DEFAULT_ITEM_BYTES;
    if (!classes_init(s, c->max_memory_bytes, shards)) {
        free(s);
        free(sh);
        free(hints);
        snprintf(err, errlen, "cache: out of memory (or the size classes are inconsistent)");
        return NULL;
    }
    atomic_init(&s->used, 0);
    atomic_init(&s->cas_seq, 0);
    atomic_init(&s->evict_fn, NULL);
    atomic_init(&s->evict_arg, NULL);
    atomic_init(&s->mallocs, 0);
    pthread_mutex_init(&s->walk_mu, NULL);
    for (unsigned i = 0; i < shards; i++) {
        if (shard_init(s, &sh[i], i, c->lock) != 0) {
            s->nshards = i;
            cache_store_free(s);
            snprintf(err, errlen, "cache: out of memory");
            return NULL;
        }
    }
    s->nshards = shards;
    return s;
}

void cache_store_free(cache_store *s)
{
    if (!s)
        return;
    for (unsigned i = 0; i < s->nshards; i++) {
        cache_shard *sh = &s->shards[i];
        /* Slab chunks go with the arena; malloc'ed items one by one. */
        for (unsigned seg = 0; seg < SEG_COUNT; seg++)
            for (cache_item *it = sh->seg_head[seg], *next; it; it = next) {
                next = it->lru_next;
                if (it != sh->marker && it->cls >= SLAB_CLASSES)
                    item_dealloc(it);
            }
        for (unsigned c = SLAB_CLASSES; c < MAX_CLASSES; c++)
            for (cache_item *it = sh->free_list[c], *next; it; it = next) {
                next = it->h_next;
                item_dealloc(it);
            }
        table_destroy(sh);
        pthread_mutex_destroy(&sh->mutex);
    }
    free(s->shards);
    free(s->tail_hint);
    slab_arena_free(s->slab);
    pthread_mutex_destroy(&s->walk_mu);
    free(s);
}

/* The preamble of every operation by key: the key's hash and shard, or false for a key no item
 * can have (empty, or longer than CACHE_KEY_MAX), which the caller answers as a miss. */
static inline bool locate(const cache_store *s, const char *key, size_t klen, uint64_t *h,
                          cache_shard **sh)
{
    if (klen == 0 || klen > CACHE_KEY_MAX)
        return false;
    *h = hash_key(s->seed, key, klen);
    *sh = shard_for(s, *h);
    return true;
}

/* ---- writes: set, add, replace, cas ---------------------------------------------------------- */

static int mode_check(cache_shard *sh, const cache_item *old, cache_mode mode, uint64_t cas_in)
{
    cache_class_stats *cs = old ? cls_stats(sh, old) : NULL;
    switch (mode) {
    case CACHE_MODE_SET: return CACHE_STORED;
    case CACHE_MODE_ADD: return old ? CACHE_NOT_STORED : CACHE_STORED;
    case CACHE_MODE_REPLACE: return old ? CACHE_STORED : CACHE_NOT_STORED;
    case CACHE_MODE_CAS:
        if (!old) {
            sh->stats.cas_misses++;
            return CACHE_NOT_FOUND;
        }
        if (old->cas != cas_in) {
            sh->stats.cas_badval++;
            cs->cas_badval++;
            return CACHE_EXISTS;
        }
        sh->stats.cas_hits++;
        cs->cas_hits++;
        return CACHE_STORED;
    default: return CACHE_BAD_ARG;
    }
}

/* Every CAS handed out from now on exceeds `cas` (restored items keep theirs). */
static void cas_raise(cache_store *s, uint64_t cas)
{
    uint64_t cur = atomic_load_explicit(&s->cas_seq, memory_order_relaxed);
    while (cur < cas && !atomic_compare_exchange_weak_explicit(
                            &s->cas_seq, &cur, cas, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* set/add/replace/cas; restore_cas != 0: a SET keeping that CAS (snapshot loading). */
static int store_plain(cache_store *s, cache_item *it, cache_mode mode, uint64_t cas_in,
                       uint64_t *cas_out, bool *replaced, uint64_t now_ms, uint64_t restore_cas)
{
    /* Reserve first (eviction takes other shards' locks, never with ours held), then decide. */
    uint64_t h = item_hash(s, it);
    cache_shard *sh = shard_for(s, h);
    int rc = evict_reserve(s, sh, it);
    if (rc != CACHE_OK) {
        cache_item_release(it);
        return rc;
    }
    lock(sh);
    uint64_t dead = sh->stats.expired_lazy + sh->stats.flushed;
    cache_item **pp = find_live(sh, h, it->data, it->klen, now_ms);
    if (sh->stats.expired_lazy + sh->stats.flushed != dead) /* the key's item was dead: its */
        cls_stats(sh, it)->reclaimed++;                     /* place goes to the new one */
    const cache_item *old = pp ? *pp : NULL;
    if (mode == CACHE_MODE_CAS_STALE && old && cas_in != 0 && cas_in < old->cas) {
        /* memcached's ms I with an older CAS: the value goes in, the staleness stays visible */
        set_expiry(it, item_expiry(old));
        it->stale = 1;
        it->token_sent = old->token_sent;
        sh->stats.cas_hits++;
        rc = CACHE_STORED;
    } else {
        rc = mode_check(sh, old, mode == CACHE_MODE_CAS_STALE ? CACHE_MODE_CAS : mode, cas_in);
    }
    if (rc == CACHE_STORED) {
        if (replaced)
            *replaced = pp != NULL;
        lru_replace_locked(sh, pp, it, h, now_ms);
        if (restore_cas) {
            it->cas = restore_cas; /* later CAS must exceed it */
            cas_raise(s, restore_cas);
            if (evict_candidate(sh) == it)
                lru_hint_refresh(sh); /* dated by the CAS it was given a moment ago */
        }
        sh->stats.sets++;
        cls_stats(sh, it)->sets++;
        if (cas_out)
            *cas_out = it->cas;
    }
    unlock(sh);
    if (rc != CACHE_STORED)
        cache_item_release(it);
    return rc;
}

/* ---- copy-on-write updates: append, prepend, invalidate, incr, decr -------------------------- */

/* append/prepend, incr/decr and invalidate change an item readers may hold, and a stored item is
 * immutable: they make a changed copy without the shard's lock (item_make may take a slab
 * class's lock, evict_reserve other shards' locks) and link it only if the key still holds the
 * item it was copied from; if not, they decide again on the newer item. cow_update is that loop;
 * a cow_op says what one update does at its three steps. */
#define COW_COPY (-1) /* decide's answer: copy *pp (referenced) */
typedef struct cow_op cow_op;
struct cow_op {
    /* Under the lock, pp the key's live item or NULL: the answer (a miss, a refusal, an update
     * done in place: nobody else holds the item), or COW_COPY with a reference taken to *pp. */
    int (*decide)(cow_op *op, cache_shard *sh, cache_item **pp);
    /* Without the lock: the changed copy of old, or NULL with *err. */
    cache_item *(*make)(cow_op *op, cache_store *s, uint64_t h, const cache_item *old, int *err);
    /* Under the lock, old still the key's item at *pp: links n in its place, with the counters. */
    void (*commit)(cow_op *op, cache_shard *sh, cache_item **pp, cache_item *old, cache_item *n,
                   uint64_t h, uint64_t now);
    int done; /* the answer once committed */
};

static int cow_update(cache_store *s, cache_shard *sh, uint64_t h, const char *key, size_t klen,
                      cow_op *op, uint64_t now)
{
    for (;;) {
        lock(sh);
        cache_item **pp = find_live(sh, h, key, klen, now);
        int rc = op->decide(op, sh, pp);
        if (rc != COW_COPY) {
            unlock(sh);
            return rc;
        }
        cache_item *old = *pp;
        unlock(sh);
        cache_item *n = op->make(op, s, h, old, &rc);
        if (n)
            rc = evict_reserve(s, sh, n);
        bool done = false;
        if (rc == CACHE_OK) {
            lock(sh);
            pp = find_live(sh, h, key, klen, now);
            done = pp && *pp == old;
            if (done)
                op->commit(op, sh, pp, old, n, h, now);
            unlock(sh);
        }
        if (!done)
            cache_item_release(n);
        cache_item_release(old);
        if (done)
            return op->done;
        if (rc != CACHE_OK)
            return rc;
        /* replaced or gone meanwhile: decide again on the newer item */
    }
}

/* Append/prepend: old+new, always a copy. */
typedef struct concat_op {
    cow_op op;
    const cache_item *add;
    bool append;
    uint64_t *cas_out;
} concat_op;

static int concat_decide(cow_op *op, cache_shard *sh, cache_item **pp)
{
    (void)op;
    (void)sh;
    return pp && ref_take(*pp) ? COW_COPY : CACHE_NOT_STORED;
}

static cache_item *concat_make(cow_op *op, cache_store *s, uint64_t h, const cache_item *old,
                               int *err)
{
    const concat_op *c = (const concat_op *)op;
    size_t ov = old->vlen, av = c->add->vlen;
    cache_item *n = item_make(s, h, old->data, old->klen, ov + av, item_flags(old),
                              cache_item_expiry(old), NULL, 0, err); /* no content type: store.h */
    if (n) {
        char *v = cache_item_value_mut(n);
        memcpy(v + (c->append ? 0 : av), cache_item_value(old), ov);
        memcpy(v + (c->append ? ov : 0), cache_item_value(c->add), av);
    }
    return n;
}

static void concat_commit(cow_op *op, cache_shard *sh, cache_item **pp, cache_item *old,
                          cache_item *n, uint64_t h, uint64_t now)
{
    const concat_op *c = (const concat_op *)op;
    (void)old;
    lru_replace_locked(sh, pp, n, h, now);
    sh->stats.sets++;
    cls_stats(sh, n)->sets++;
    if (c->cas_out)
        *c->cas_out = n->cas;
}

static int store_concat(cache_store *s, cache_item *add, bool append, uint64_t *cas_out,
                        uint64_t now)
{
    uint64_t h = item_hash(s, add);
    concat_op c = {{concat_decide, concat_make, concat_commit, CACHE_STORED}, add, append, cas_out};
    int rc = cow_update(s, shard_for(s, h), h, add->data, add->klen, &c.op, now);
    cache_item_release(add);
    return rc;
}

/* memcached's md I: marked stale in place, or a marked copy while readers hold the item. */
typedef struct invalidate_op {
    cow_op op;
    uint64_t cas_in, expiry_ms;
    bool set_exp;
} invalidate_op;

static int invalidate_decide(cow_op *op, cache_shard *sh, cache_item **pp)
{
    const invalidate_op *x = (const invalidate_op *)op;
    if (!pp || (x->cas_in && (*pp)->cas != x->cas_in)) {
        sh->stats.delete_misses++; /* memcached counts both so */
        return pp ? CACHE_EXISTS : CACHE_NOT_FOUND;
    }
    cache_item *old = *pp;
    /* Only the table holds it and new references need this lock: nobody can watch the change
     * (incr_decide's argument), so the item is marked in place. */
    if (item_refs(old, memory_order_acquire) == 1) {
        old->stale = 1;
        old->token_sent = 0; /* the next reader wins the recache */
        old->cas = next_cas(sh);
        if (x->set_exp)
            set_expiry(old, x->expiry_ms);
        return CACHE_DELETED;
    }
    /* Readers hold it: a marked copy takes its place. */
    return ref_take(old) ? COW_COPY : CACHE_NO_MEMORY;
}

static cache_item *invalidate_make(cow_op *op, cache_store *s, uint64_t h, const cache_item *old,
                                   int *err)
{
    (void)op;
    size_t ctlen;
    const char *ctype = cache_item_ctype(old, &ctlen);
    cache_item *n =
        item_make(s, h, old->data, old->klen, old->vlen, item_flags(old), 0, ctype, ctlen, err);
    if (n) {
        memcpy(cache_item_value_mut(n), cache_item_value(old), old->vlen);
        n->key_binary = old->key_binary;
        n->stale = 1;
    }
    return n;
}

static void invalidate_commit(cow_op *op, cache_shard *sh, cache_item **pp, cache_item *old,
                              cache_item *n, uint64_t h, uint64_t now)
{
    const invalidate_op *x = (const invalidate_op *)op;
    set_expiry(n, x->set_exp ? x->expiry_ms : item_expiry(old));
    n->fetched = old->fetched;
    lru_replace_locked(sh, pp, n, h, now);
    n->atime = old->atime; /* still referenced by us */
}

int cache_invalidate(cache_store *s, const char *key, size_t klen, uint64_t cas_in, bool set_exp,
                     uint64_t expiry_ms, uint64_t now_ms)
{
    uint64_t h;
    cache_shard *sh;
    if (!locate(s, key, klen, &h, &sh))
        return CACHE_NOT_FOUND;
    invalidate_op x = {{invalidate_decide, invalidate_make, invalidate_commit, CACHE_DELETED},
                       cas_in,
                       expiry_ms,
                       set_exp};
    return cow_update(s, sh, h, key, klen, &x.op, now_ms);
}

/* incr/decr: the new value in place when the item is the table's alone and its length stays,
 * else a copy. */
typedef struct incr_op {
    cow_op op;
    uint64_t delta;
    bool decr;
    uint64_t v; /* the new value, decided under the lock */
    size_t len;
    char buf[20];
} incr_op;

static void incr_count(cache_shard *sh, const cache_item *it, bool decr)
{
    if (decr) {
        sh->stats.decr_hits++;
        cls_stats(sh, it)->decr_hits++;
    } else {
        sh->stats.incr_hits++;
        cls_stats(sh, it)->incr_hits++;
    }
}

static int incr_decide(cow_op *op, cache_shard *sh, cache_item **pp)
{
    incr_op *x = (incr_op *)op;
    if (!pp) {
        (*(x->decr ? &sh->stats.decr_misses : &sh->stats.incr_misses))++;
        return CACHE_NOT_FOUND;
    }
    cache_item *old = *pp;
    uint64_t cur;
    if (!dec_parse_u64(cache_item_value(old), old->vlen, UINT64_MAX, &cur))
        return CACHE_NOT_NUMERIC;
    x->v = x->decr ? (x->delta > cur ? 0 : cur - x->delta) : cur + x->delta; /* incr wraps */
    x->len = fmt_u64(x->buf, x->v);
    /* Only the table holds it and new references need this lock: nobody can watch the change,
     * so "immutable once stored" still holds for every reader. The acquire pairs with the
     * readers' releases: their reads of the old value come first. An item with a content type
     * is rebuilt without it (store.h). */
    if (x->len == old->vlen && old->ctlen == 0 && item_refs(old, memory_order_acquire) == 1) {
        memcpy(cache_item_value_mut(old), x->buf, x->len);
        old->cas = next_cas(sh);
        lru_move(sh, old, bump_seg(sh, old), false); /* dated by its new CAS */
        incr_count(sh, old, x->decr);
        return CACHE_OK;
    }
    /* Length or type changed, or readers hold the item: a new one. */
    return ref_take(old) ? COW_COPY : CACHE_NO_MEMORY;
}

static cache_item *incr_make(cow_op *op, cache_store *s, uint64_t h, const cache_item *old,
                             int *err)
{
    const incr_op *x = (const incr_op *)op;
    cache_item *n = item_make(s, h, old->data, old->klen, x->len, item_flags(old),
                              cache_item_expiry(old), NULL, 0, err); /* no content type: store.h */
    if (n)
        memcpy(cache_item_value_mut(n), x->buf, x->len);
    return n;
}

static void incr_commit(cow_op *op, cache_shard *sh, cache_item **pp, cache_item *old,
                        cache_item *n, uint64_t h, uint64_t now)
{
    (void)old;
    lru_replace_locked(sh, pp, n, h, now);
    incr_count(sh, n, ((const incr_op *)op)->decr);
}

int cache_incr(cache_store *s, const char *key, size_t klen, uint64_t delta, bool decr,
               uint64_t *out, uint64_t now_ms)
{
    uint64_t h;
    cache_shard *sh;
    if (!locate(s, key, klen, &h, &sh))
        return CACHE_NOT_FOUND;
    incr_op x = {
        .op = {incr_decide, incr_make, incr_commit, CACHE_OK}, .delta = delta, .decr = decr};
    int rc = cow_update(s, sh, h, key, klen, &x.op, now_ms);
    if (rc == CACHE_OK)
        *out = x.v;
    return rc;
}

/* ---- the store modes, delete, touch, flush --------------------------------------------------- */

/* cache_store_item(_ex): inline in both, the set path of every store. */
static inline int store_item(cache_store *s, cache_item *it, cache_mode mode, uint64_t cas_in,
                             uint64_t *cas_out, bool *replaced, uint64_t now_ms)
{
    if (replaced)
        *replaced = mode == CACHE_MODE_APPEND || mode == CACHE_MODE_PREPEND;
    if (mode == CACHE_MODE_APPEND || mode == CACHE_MODE_PREPEND)
        return store_concat(s, it, mode == CACHE_MODE_APPEND, cas_out, now_ms);
    if ((unsigned)mode > CACHE_MODE_CAS_STALE) {
        cache_item_release(it);
        return CACHE_BAD_ARG;
    }
    return store_plain(s, it, mode, cas_in, cas_out, replaced, now_ms, 0);
}

int cache_store_item(cache_store *s, cache_item *it, cache_mode mode, uint64_t cas_in,
                     uint64_t *cas_out, uint64_t now_ms)
{
    return store_item(s, it, mode, cas_in, cas_out, NULL, now_ms);
}

int cache_store_item_ex(cache_store *s, cache_item *it, cache_mode mode, uint64_t cas_in,
                        uint64_t *cas_out, bool *replaced, uint64_t now_ms)
{
    return store_item(s, it, mode, cas_in, cas_out, replaced, now_ms);
}

int cache_store_restore(cache_store *s, cache_item *it, uint64_t cas, uint64_t now_ms)
{
    /* A CAS this large (never reached in practice: 2^62 stores) would wrap the counter: such a
     * record gets a fresh one instead of breaking uniqueness. */
    return store_plain(s, it, CACHE_MODE_SET, 0, NULL, NULL, now_ms,
                       cas < CACHE_CAS_RESTORE_MAX ? cas : 0);
}

void cache_store_raise_cas(cache_store *s, uint64_t cas)
{
    if (cas < CACHE_CAS_RESTORE_MAX)
        cas_raise(s, cas);
}

int cache_delete(cache_store *s, const char *key, size_t klen, uint64_t cas_in, uint64_t now_ms)
{
    uint64_t h;
    cache_shard *sh;
    if (!locate(s, key, klen, &h, &sh))
        return CACHE_NOT_FOUND;
    int rc;
    lock(sh);
    cache_item **pp = find_live(sh, h, key, klen, now_ms);
    if (!pp) {
        sh->stats.delete_misses++;
        rc = CACHE_NOT_FOUND;
    } else if (cas_in && (*pp)->cas != cas_in) {
        rc = CACHE_EXISTS;
    } else {
        cls_stats(sh, *pp)->delete_hits++;
        item_unref_locked(sh, lru_detach(sh, pp));
        sh->stats.delete_hits++;
        rc = CACHE_DELETED;
    }
    unlock(sh);
    return rc;
}

int cache_touch(cache_store *s, const char *key, size_t klen, uint64_t expiry_ms, uint64_t now_ms)
{
    uint64_t h;
    cache_shard *sh;
    if (!locate(s, key, klen, &h, &sh))
        return CACHE_NOT_FOUND;
    lock(sh);
    cache_item **pp = find_live(sh, h, key, klen, now_ms);
    if (pp) {
        set_expiry(*pp, expiry_ms);
        hit_mark(sh, *pp, now_ms); /* memcached's touch bumps as a fetch does */
        lru_move(sh, *pp, bump_seg(sh, *pp), true);
        sh->stats.touch_hits++;
        cls_stats(sh, *pp)->touch_hits++;
    } else {
        sh->stats.touch_misses++;
    }
    unlock(sh);
    return pp ? CACHE_TOUCHED : CACHE_NOT_FOUND;
}

void cache_flush_all(cache_store *s, uint64_t at_ms, uint64_t now_ms)
{
    for (unsigned i = 0; i < s->nshards; i++) {
        cache_shard *sh = &s->shards[i];
        lock(sh);
        flush_due(sh, now_ms); /* a flush already due is applied, not replaced */
        sh->flush_at = at_ms;
        flush_due(sh, now_ms); /* due at once: effective in every shard before we return */
        unlock(sh);
    }
}

/* ---- reads ----------------------------------------------------------------------------------- */

/* Takes the shard's lock (the caller releases it) and a reference to the key's live item, or NULL
 * (at REFS_MAX references too: a miss, as memcached answers). */
static inline cache_item *lock_ref(cache_shard *sh, uint64_t h, const char *key, size_t klen,
                                   uint64_t now)
{
    lock(sh);
    cache_item **pp = find_live(sh, h, key, klen, now);
    return pp && ref_take(*pp) ? *pp : NULL;
}

cache_item *cache_get(cache_store *s, const char *key, size_t klen, uint64_t now_ms)
{
    uint64_t h;
    cache_shard *sh;
    if (!locate(s, key, klen, &h, &sh))
        return NULL;
    cache_item *it = lock_ref(sh, h, key, klen, now_ms);
    if (it) {
        cache_class_stats *cs = cls_stats(sh, it);
        (&cs->hits_to_hot)[it->seg]++; /* the segment it was hit in */
        hit_mark(sh, it, now_ms);
        sh->stats.get_hits++;
        cs->get_hits++;
    } else {
        sh->stats.get_misses++;
    }
    unlock(sh);
    return it;
}

cache_item *cache_get_meta(cache_store *s, const char *key, size_t klen, const cache_get_opts *o,
                           cache_item_meta *out, uint64_t now_ms)
{
    memset(out, 0, sizeof *out);
    uint64_t h;
    cache_shard *sh;
    if (!locate(s, key, klen, &h, &sh))
        return NULL;
    cache_item *it = lock_ref(sh, h, key, klen, now_ms);
    if (it) {
        uint64_t exp = item_expiry(it);
        out->expiry_ms = exp;
        out->idle_s = idle_s(it, now_s30(now_ms));
        out->fetched = it->fetched;
        out->token_sent = it->token_sent;
        out->stale = it->stale;
        if (o->set_expiry)
            set_expiry(it, o->expiry_ms);
        /* R: the expiry rounded up to the second is before the deadline (memcached compares
         * whole seconds: "R30" right after "T30" does not win) */
        uint64_t rexp = o->set_expiry && o->recache_sees_new ? item_expiry(it) : exp;
        bool recache = o->recache_ms && rexp != 0 && rexp + 999 < o->recache_ms;
        if (!o->no_token && !it->token_sent && (it->stale || recache)) {
            it->token_sent = 1;
            out->won = true;
        }
        if (!o->no_bump)
            hit_mark(sh, it, now_ms);
        if (o->count == CACHE_COUNT_GET)
            sh->stats.get_hits++;
        else if (o->count == CACHE_COUNT_TOUCH)
            sh->stats.touch_hits++;
    } else if (o->count == CACHE_COUNT_GET) {
        sh->stats.get_misses++;
    } else if (o->count == CACHE_COUNT_TOUCH) {
        sh->stats.touch_misses++;
    }
    unlock(sh);
    return it;
}
