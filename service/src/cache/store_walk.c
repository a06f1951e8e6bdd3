/* Walks over the shards (memcached: crawler.c and the stats commands): the expiry sweep, the
 * sliced scan, the marker walk of cache_store_foreach, the summed stats and the class dump. None
 * is on the request path; each bounds how long it holds a shard's lock. */
#include "cache/store_int.h"

/* Buckets swept per lock hold: bounds the time a sweep stalls the shard's readers. */
#define SWEEP_BATCH    256
#define SCAN_VISIT_MAX (16 * SWEEP_BATCH) /* buckets one cache_store_scan call may look at */

static size_t sweep_chain(cache_shard *sh, cache_item **pp, uint64_t now)
{
    size_t n = 0;
    while (*pp) {
        if (reap(sh, pp, now, true))
            n++;
        else
            pp = &(*pp)->h_next;
    }
    return n;
}

/* The cursor is (shard << pos_bits) | bucket position: one shard's buckets in a row, so a
 * lock hold covers many buckets. */
size_t cache_store_sweep(cache_store *s, unsigned *cursor, size_t budget, uint64_t now_ms)
{
    const unsigned pos_bits = 32 - s->shard_bits;
    const uint64_t pos_mask = (UINT64_C(1) << pos_bits) - 1;
    unsigned shard = (unsigned)((uint64_t)*cursor >> pos_bits) & (s->nshards - 1);
    size_t pos = (size_t)(*cursor & pos_mask), reclaimed = 0;
    while (budget > 0) {
        cache_shard *sh = &s->shards[shard];
        size_t k = 0;
        lock(sh);
        flush_due(sh, now_ms);
        lru_juggle(sh, now_ms); /* the age rules move items without traffic too */
        size_t n = sh->mask + 1, on = sh->old ? sh->old_mask + 1 : 0;
        size_t end = n > on ? n : on;
        for (; pos < end && k < budget && k < SWEEP_BATCH; pos++, k++) {
            if (pos < n)
                reclaimed += sweep_chain(sh, &sh->buckets[pos], now_ms);
            if (pos < on)
                reclaimed += sweep_chain(sh, &sh->old[pos], now_ms);
        }
        unlock(sh);
        budget -= k ? k : 1; /* a visit past the end still costs, so the loop ends */
        if (pos >= end) {
            shard = (shard + 1) & (s->nshards - 1);
            pos = 0;
        }
    }
    *cursor = (unsigned)(((uint64_t)shard << pos_bits) | pos);
    return reclaimed;
}

/* Takes references to the live items of one chain into out[*n..max); false (nothing taken)
 * when they would not all fit. Dead items met are unlinked, as the sweep does. */
static bool scan_chain(cache_shard *sh, cache_item **pp, uint64_t now, cache_item **out, size_t *n,
                       size_t max)
{
    sweep_chain(sh, pp, now);
    size_t len = 0;
    for (const cache_item *it = *pp; it; it = it->h_next)
        len++;
    if (*n + len > max && *n > 0)
        return false;
    for (cache_item *it = *pp; it && *n < max; it = it->h_next) /* an overlong chain is cut */
        if (ref_take(it)) /* an item at REFS_MAX readers is skipped */
            out[(*n)++] = it;
    return true;
}

size_t cache_store_scan(cache_store *s, uint64_t *cursor, cache_item **out, size_t max,
                        uint64_t now_ms)
{
    size_t n = 0, visited = 0;
    while (*cursor != CACHE_SCAN_DONE && n < max && visited < SCAN_VISIT_MAX) {
        unsigned shard = (unsigned)(*cursor >> 32);
        size_t pos = (size_t)(*cursor & UINT32_MAX);
        if (shard >= s->nshards) {
            *cursor = CACHE_SCAN_DONE;
            break;
        }
        cache_shard *sh = &s->shards[shard];
        lock(sh);
        flush_due(sh, now_ms);
        size_t nb = sh->mask + 1, on = sh->old ? sh->old_mask + 1 : 0;
        size_t end = nb > on ? nb : on, k = 0;
        bool full = false;
        for (; pos < end && k < SWEEP_BATCH && !full; k++) {
            size_t before = n;
            if ((pos < on && !scan_chain(sh, &sh->old[pos], now_ms, out, &n, max)) ||
                (pos < nb && !scan_chain(sh, &sh->buckets[pos], now_ms, out, &n, max))) {
                while (n > before) /* this bucket comes whole in the next call */
                    item_unref_locked(sh, out[--n]);
                full = true;
                break;
            }
            pos++;
        }
        unlock(sh);
        visited += k + 1;
        *cursor = pos >= end ? (uint64_t)(shard + 1) << 32 : ((uint64_t)shard << 32) | pos;
        if (full)
            break;
    }
    return n;
}

void cache_store_stats(cache_store *s, cache_stats *out)
{
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < s->nshards; i++) {
        cache_shard *sh = &s->shards[i];
        lock(sh);
#define CACHE_STATS_ADD(name) out->name += sh->stats.name;
        CACHE_STATS_COUNTERS(CACHE_STATS_ADD)
#undef CACHE_STATS_ADD
        out->free_bytes += sh->free_bytes;
        unlock(sh);
    }
    out->mem_used = atomic_load_explicit(&s->used, memory_order_relaxed);
    out->mem_limit = memory_limit(s);
    slab_stats ss;
    slab_get_stats(s->slab, &ss);
    out->mallocs = atomic_load_explicit(&s->mallocs, memory_order_relaxed) + ss.pages_taken;
    out->slab_page_bytes = ss.pages_in_use * SLAB_PAGE_BYTES;
    out->slab_free_chunk_bytes = ss.free_chunk_bytes;
}

void cache_store_class_stats(cache_store *s, cache_class_stats *out, uint64_t now_ms)
{
    memset(out, 0, sizeof *out * CACHE_CLASSES_MAX);
    uint32_t now_s = now_s30(now_ms);
    for (unsigned i = 0; i < s->nshards; i++) {
        cache_shard *sh = &s->shards[i];
        lock(sh);
        for (unsigned c = 0; c < CACHE_CLASSES_MAX; c++) {
#define CACHE_CLASS_ADD(name) out[c].name += sh->cls_stats[c].name;
            CACHE_CLASS_COUNTERS(CACHE_CLASS_ADD)
            CACHE_CLASS_GAUGES(CACHE_CLASS_ADD)
#undef CACHE_CLASS_ADD
        }
        /* ages: of the segment tails, each counted in its item's class (the oldest wins) */
        static const unsigned segs[3] = {SEG_HOT, SEG_WARM, SEG_COLD};
        for (unsigned k = 0; k < 3; k++) {
            const cache_item *t = seg_last(sh, segs[k]);
            if (!t)
                continue;
            cache_class_stats *x = &out[mc_class(s, t)];
            uint32_t *age = k == 0 ? &x->age_hot : k == 1 ? &x->age_warm : &x->age;
            uint32_t a = idle_s(t, now_s);
            *age = a > *age ? a : *age;
        }
        unlock(sh);
    }
}

void cache_store_class_dump(cache_store *s, unsigned cls, size_t scan, uint64_t now_ms,
                            int (*fn)(const cache_item *, void *), void *arg)
{
    for (unsigned i = 0; i < s->nshards; i++) {
        cache_shard *sh = &s->shards[i];
        int rc = 0;
        size_t seen = 0;
        lock(sh);
        flush_due(sh, now_ms);
        /* most recent first: HOT, WARM, COLD, then TEMP, each from its head */
        for (unsigned seg = 0; seg < SEG_COUNT; seg++)
            for (cache_item *it = sh->seg_head[seg]; it && seen < scan && rc == 0;
                 it = it->lru_next) {
                if (it == sh->marker)
                    continue;
                seen++;
                if (mc_class(s, it) == cls && !is_expired(it, now_ms) && !is_flushed(sh, it))
                    rc = fn(it, arg);
            }
        unlock(sh);
        if (rc)
            return;
    }
}

/* A walk must not hold a shard's lock for long (at 10M items a shard holds ~150,000), and it
 * must not lose its place while the lock is dropped. So it plants a marker node in the LRU list
 * and moves it one item toward the head per step: the items between the marker and the head are
 * the ones still to visit, whatever happens to the others meanwhile. Each item carries a bit
 * compared with the shard's walk parity, flipped when a walk starts, so every item present then
 * is visited exactly once: an item moved to the head after its visit (a write, touch, second
 * chance) is met again but skipped, as is an item stored after the walk began. Skipped steps are
 * bounded (so a shard written faster than it can be walked still ends the walk; counted in
 * walks_cut_short, never seen in practice). Eviction steps over the marker. One walk at a time. */
#define WALK_CHUNK      256 /* steps (visits or skips) per lock hold */
#define WALK_SKIP_RATIO 8   /* skips allowed per item present at the start */

/* The order a walk takes the segments in: TEMP, COLD, WARM, HOT, least recent first within
 * each. Nothing the walk has not visited may enter a list behind it, so while a walk is under
 * way on a shard its items do not change segment except toward HOT (bump_seg; TEMP items stay
 * in TEMP), which comes last: the juggle waits and rescues go to HOT. */
static const uint8_t walk_order[SEG_COUNT] = {SEG_TEMP, SEG_COLD, SEG_WARM, SEG_HOT};

/* Puts the marker in front of x (toward the head) in list m->seg; x NULL: behind its tail. */
static void marker_insert_before(cache_shard *sh, cache_item *m, cache_item *x)
{
    unsigned seg = m->seg;
    m->lru_next = x;
    m->lru_prev = x ? x->lru_prev : sh->seg_tail[seg];
    if (m->lru_prev)
        m->lru_prev->lru_next = m;
    else
        sh->seg_head[seg] = m;
    if (x)
        x->lru_prev = m;
    else
        sh->seg_tail[seg] = m;
}

/* Up to WALK_CHUNK steps of the walk; references the live unseen items in batch. Returns how
 * many; *done once the marker reached the head (or the skip budget ran out). */
static size_t walk_chunk(cache_shard *sh, cache_item *marker, uint64_t now, size_t *skips,
                         cache_item **batch, bool *done)
{
    const unsigned parity = sh->walk_parity & 1;
    size_t n = 0;
    flush_due(sh, now);
    for (unsigned step = 0; step < WALK_CHUNK; step++) {
        cache_item *it = marker->lru_prev;
        if (!it) { /* the head of this list: on to the next segment's tail */
            unsigned k = 0;
            while (walk_order[k] != marker->seg)
                k++;
            if (k + 1 == SEG_COUNT) {
                *done = true;
                break;
            }
            list_unlink(sh, marker);
            marker->seg = walk_order[k + 1];
            marker_insert_before(sh, marker, NULL);
            continue;
        }
        list_unlink(sh, marker);
        marker_insert_before(sh, marker, it); /* `it` is now behind the marker */
        if (it->walk_seen == parity) {
            if ((*skips)-- == 0) {
                sh->stats.walks_cut_short++;
                *done = true;
                break;
            }
            continue;
        }
        it->walk_seen = parity & 1;
        if (!is_expired(it, now) && !is_flushed(sh, it) && ref_take(it))
            batch[n++] = it;
    }
    return n;
}

int cache_store_foreach(cache_store *s, uint64_t now_ms, int (*fn)(const cache_item *, void *),
                        void *arg)
{
    cache_item marker, *batch[WALK_CHUNK];
    int rc = 0;
    pthread_mutex_lock(&s->walk_mu);
    for (unsigned i = 0; i < s->nshards && rc == 0; i++) {
        cache_shard *sh = &s->shards[i];
        memset(&marker, 0, sizeof marker);
        lock(sh);
        sh->walk_parity ^= 1; /* every item present is unseen now */
        size_t skips = WALK_SKIP_RATIO * (sh->stats.curr_items + WALK_CHUNK);
        marker.seg = walk_order[0];
        marker_insert_before(sh, &marker, NULL); /* behind the tail: everything is ahead */
        sh->marker = &marker;
        bool done = false;
        while (!done && rc == 0) {
            size_t n = walk_chunk(sh, &marker, now_ms, &skips, batch, &done);
            unlock(sh);
            for (size_t k = 0; k < n; k++) {
                if (rc == 0)
                    rc = fn(batch[k], arg);
                cache_item_release(batch[k]);
            }
            lock(sh);
        }
        list_unlink(sh, &marker);
        sh->marker = NULL;
        unlock(sh);
    }
    pthread_mutex_unlock(&s->walk_mu);
    return rc;
}
