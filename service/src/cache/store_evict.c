/* Reserving memory and evicting (memcached: lru_pull_tail): a store reserves its item's bytes
 * before taking its shard's lock and, over the limit, evicts in one LRU order across all shards
 * (store.h: "Memory"), holding one shard's lock at a time. */
#include "cache/store_int.h"

#include <limits.h>

/* Evictions per lock hold: bounds the time one store stalls the shard's readers. */
#define EVICT_BATCH 16
/* Shards whose tail hints one eviction compares: all of them up to this many (so with the
 * default 64 shards eviction follows the global order exactly), a window of them beyond. */
#define EVICT_SCAN_MAX 64
/* Oldest shards a scan remembers (evict_cache): about as many evictions per scan. */
#define EVICT_CANDIDATES 8

/* An eviction notice's copy of its item, taken under the shard's lock. */
typedef struct evict_note {
    cache_evicted e;
    char key[CACHE_KEY_MAX];
} evict_note;

static void note_evicted(evict_note *n, const cache_item *it)
{
    memcpy(n->key, it->data, it->klen);
    n->e = (cache_evicted){.key = n->key,
                           .klen = it->klen,
                           .vlen = it->vlen,
                           .flags = item_flags(it),
                           .expiry_ms = item_expiry(it),
                           .atime_s = it->atime, /* modulo 2^30 */
                           .fetched = it->fetched};
}

void cache_store_set_evict_hook(cache_store *s, cache_evict_fn fn, void *arg)
{
    atomic_store_explicit(&s->evict_arg, arg, memory_order_relaxed);
    atomic_store_explicit(&s->evict_fn, fn, memory_order_release);
}

/* Eviction follows one order across all shards: each shard publishes its tail's age key
 * (tail_hint); an evictor reads the hints without locks, takes the shard with the oldest, checks
 * the key under that shard's lock, and evicts that shard's tails down to the next oldest hint.
 * One shard lock at a time, so stores in different shards cannot deadlock, and a get still
 * takes nothing but its own shard's lock. */

/* The oldest hint among n from `first` (branch-free: the scan is most of an eviction's cost),
 * its shard's index in *best; HINT_EMPTY if all are. */
static uint64_t oldest_hint(const cache_store *s, unsigned first, unsigned n, unsigned *best)
{
    uint64_t b = HINT_EMPTY;
    unsigned at = first;
    for (unsigned k = first; k < first + n; k++) {
        uint64_t h = atomic_load_explicit(&s->tail_hint[k], memory_order_relaxed);
        bool older = h < b;
        at = older ? k : at;
        b = older ? h : b;
    }
    *best = at;
    return b;
}

/* The same, passing over one shard (busy with another evictor). Off the common path. */
static uint64_t oldest_hint_except(const cache_store *s, unsigned first, unsigned n,
                                   unsigned except, unsigned *best)
{
    uint64_t b = HINT_EMPTY;
    unsigned at = first;
    for (unsigned k = first; k < first + n; k++) {
        uint64_t h = atomic_load_explicit(&s->tail_hint[k], memory_order_relaxed);
        bool older = h < b && k != except;
        at = older ? k : at;
        b = older ? h : b;
    }
    *best = at;
    return b;
}

/* The shard whose tail hint is the oldest (its hint in *hint), or NULL if every hint says
 * empty; with `except` < nshards, the oldest other than that one. Stores of more than
 * EVICT_SCAN_MAX shards: that many from the writer's own shard on (an approximation, as redis'
 * sampled LRU; the whole store when they are all empty). */
static cache_shard *scan_oldest(cache_store *s, const cache_shard *home, unsigned except,
                                uint64_t *hint)
{
    unsigned best, n = s->nshards;
    unsigned first = 0, len = n, wrap = 0; /* [first, first + len) then [0, wrap) */
    if (n > EVICT_SCAN_MAX) {
        first = home->index;
        len = n - first < EVICT_SCAN_MAX ? n - first : EVICT_SCAN_MAX;
        wrap = EVICT_SCAN_MAX - len;
    }
    for (;;) {
        *hint = except < n ? oldest_hint_except(s, first, len, except, &best)
                           : oldest_hint(s, first, len, &best);
        if (wrap) {
            unsigned b2;
            uint64_t h = except < n ? oldest_hint_except(s, 0, wrap, except, &b2)
                                    : oldest_hint(s, 0, wrap, &b2);
            if (h < *hint) {
                *hint = h;
                best = b2;
            }
        }
        if (*hint != HINT_EMPTY)
            return &s->shards[best];
        if (len == n)
            return NULL;
        first = 0; /* the window was empty: look at every shard */
        len = n;
        wrap = 0;
    }
}

/* What this thread's last scan of a store of up to EVICT_SCAN_MAX shards found: the
 * EVICT_CANDIDATES shards with the oldest tails, and `bound`, an age than which every other
 * shard's tail is no older. A shard's tail only grows younger (the tail leaves: the next one was
 * placed later; a bumped tail's dating item is replaced by a later one; an empty shard receives
 * an item younger than any age seen in the scan), so as long as the oldest candidate is not
 * younger than `bound`, it is the oldest shard, without a scan: one scan serves about
 * EVICT_CANDIDATES evictions. Per thread, so nothing is shared or locked; `store_id` says whose
 * it is. (Restored items keep old CAS values and may break the rule; eviction is then only
 * approximately ordered until the next scan.) */
typedef struct evict_cache {
    uint64_t store_id;
    uint64_t bound;
    unsigned n;
    unsigned shard[EVICT_CANDIDATES];
} evict_cache;

static _Thread_local evict_cache tl_evict;

/* Keeps the EVICT_CANDIDATES + 1 oldest hints, unsorted, with the position of the youngest of
 * them (the one to replace): a hint older than that one is rare after the first few. */
static void scan_candidates(cache_store *s, evict_cache *c)
{
    enum { KEEP = EVICT_CANDIDATES + 1 };
    uint64_t key[KEEP];
    unsigned idx[KEEP], m = 0, worst = 0;
    /* Items placed from now on are younger than this, whatever shard they land in. */
    uint64_t horizon = atomic_load_explicit(&s->cas_seq, memory_order_relaxed);
    for (unsigned k = 0; k < s->nshards; k++) {
        uint64_t h = atomic_load_explicit(&s->tail_hint[k], memory_order_relaxed);
        if (h == HINT_EMPTY || (m == KEEP && h >= key[worst]))
            continue;
        unsigned at = m < KEEP ? m++ : worst;
        key[at] = h;
        idx[at] = k;
        if (m == KEEP) {
            worst = 0;
            for (unsigned i = 1; i < KEEP; i++)
                worst = key[i] > key[worst] ? i : worst;
        }
    }
    c->store_id = s->id;
    c->n = 0;
    for (unsigned i = 0; i < m; i++)
        if (m < KEEP || i != worst)
            c->shard[c->n++] = idx[i];
    c->bound = m == KEEP && key[worst] < horizon ? key[worst] : horizon;
}

/* The candidate with the oldest tail, other than `except`, if it is provably the oldest shard
 * (not younger than the bound; `fresh`: the scan just ran, so it is); else NULL. */
static cache_shard *pick_candidate(cache_store *s, const evict_cache *c, unsigned except,
                                   bool fresh, uint64_t *hint)
{
    uint64_t b = HINT_EMPTY;
    unsigned at = 0;
    for (unsigned i = 0; i < c->n; i++) {
        uint64_t h = atomic_load_explicit(&s->tail_hint[c->shard[i]], memory_order_relaxed);
        bool older = h < b && c->shard[i] != except;
        at = older ? c->shard[i] : at;
        b = older ? h : b;
    }
    if (b == HINT_EMPTY || (b > c->bound && !fresh))
        return NULL;
    *hint = b;
    return &s->shards[at];
}

/* The oldest shard (its hint in *hint), from this thread's candidates or a new scan; NULL if
 * nothing is left. `except` as for scan_oldest. */
static cache_shard *find_oldest(cache_store *s, const cache_shard *home, unsigned except,
                                uint64_t *hint)
{
    if (s->nshards > EVICT_SCAN_MAX)
        return scan_oldest(s, home, except, hint);
    evict_cache *c = &tl_evict;
    if (c->store_id == s->id) {
        cache_shard *sh = pick_candidate(s, c, except, false, hint);
        if (sh)
            return sh;
    }
    scan_candidates(s, c);
    return pick_candidate(s, c, except, true, hint);
}

/* The oldest shard, locked, with its hint in *hint; NULL if there is nothing to evict. If
 * another evictor holds it, the next oldest (whose tail is about as old) if that one is free:
 * concurrent evictors, which all find the same oldest shard, spread instead of queueing. */
static cache_shard *lock_oldest(cache_store *s, const cache_shard *home, uint64_t *hint)
{
    cache_shard *sh = find_oldest(s, home, UINT_MAX, hint);
    if (!sh || try_lock(sh))
        return sh;
    uint64_t next_hint;
    cache_shard *next = find_oldest(s, home, sh->index, &next_hint);
    if (next && try_lock(next)) {
        *hint = next_hint;
        return next;
    }
    lock(sh);
    return sh;
}

/* Evicts the shard's tails while the store is over its limit and their keys are not younger than
 * `upto` (the hint that chose the shard: ties go too, and the next scan finds the next oldest).
 * Called with the shard's lock held; releases it. A
 * tail read since it last got there is not evicted but gets a second chance: its mark is cleared
 * and it moves to the head (so a hit only sets a bit instead of relinking the list). Returns
 * evictions + second chances; 0 when the shard is empty or its hint was stale (it is refreshed: the
 * caller scans again). An evicted item still referenced by a reader keeps its memory until
 * released, so this may unlink several items without getting under the limit. */
static unsigned evict_oldest(cache_shard *sh, uint64_t upto)
{
    unsigned n = 0, spared = 0, noted = 0;
    cache_evict_fn notify = atomic_load_explicit(&sh->store->evict_fn, memory_order_acquire);
    evict_note notes[EVICT_BATCH]; /* filled only while notices are on */
    while (n < EVICT_BATCH && spared < 4 * EVICT_BATCH && over_limit(sh->store)) {
        cache_item *it = evict_candidate(sh);
        if (!it)
            break;
        if (it->active) { /* whatever its age: rescued, as memcached's lru_pull_tail does */
            it->active = 0;
            if (sh->store->flat || sh->marker) { /* to a head a walk has still to visit */
                lru_move(sh, it, bump_seg(sh, it), true);
            } else {
                cache_class_stats *cs = cls_stats(sh, it);
                if (it->seg == SEG_WARM)
                    cs->moves_within_lru++;
                else
                    cs->moves_to_warm++;
                lru_move(sh, it, SEG_WARM, true);
            }
            spared++;
            continue;
        }
        if (lru_age_key(sh, it) > upto)
            break;
        cache_item **pp = find_link(sh, item_hash(sh->store, it), it->data, it->klen);
        cache_class_stats *cs = cls_stats(sh, it);
        cs->evicted++;
        cs->evicted_nonzero += cache_item_expiry(it) != 0;
        cs->evicted_unfetched += !it->fetched;
        if (notify)
            note_evicted(&notes[noted++], it);
        item_unref_locked(sh, lru_detach(sh, pp));
        sh->stats.evictions++;
        n++;
    }
    if (n + spared == 0)
        lru_hint_refresh(sh);
    unlock(sh);
    void *arg = atomic_load_explicit(&sh->store->evict_arg, memory_order_relaxed);
    for (unsigned i = 0; i < noted; i++)
        notify(arg, &notes[i].e);
    return n + spared;
}

static bool evict_until_fits(cache_store *s, cache_shard *home)
{
    unsigned fruitless = 0;
    while (over_limit(s)) {
        uint64_t hint;
        cache_shard *sh = lock_oldest(s, home, &hint);
        if (!sh)
            return false; /* nothing linked: everything left is pinned by readers, or in flight */
        /* Hints that keep moving under us (other evictors, writers): stop comparing. */
        if (fruitless >= s->nshards)
            hint = HINT_EMPTY;
        if (evict_oldest(sh, hint) > 0)
            fruitless = 0;
        else if (++fruitless > 2 * s->nshards + 2)
            return !over_limit(s);
    }
    return true;
}

/* Reserves the item's bytes; on failure the item is still marked accounted, so releasing it
 * gives the reservation back. */
int evict_reserve(cache_store *s, cache_shard *home, cache_item *it)
{
    size_t bytes = item_bytes(s, it);
    if (bytes > memory_limit(s))
        return CACHE_TOO_LARGE;
    atomic_fetch_add_explicit(&s->used, bytes, memory_order_relaxed);
    it->accounted = 1;
    if (!over_limit(s) || (!s->no_evictions && evict_until_fits(s, home)))
        return CACHE_OK;
    return CACHE_NO_MEMORY;
}

bool cache_store_evicts(const cache_store *s)
{
    return !s->no_evictions;
}

void cache_store_set_memory_limit(cache_store *s, uint64_t bytes)
{
    atomic_store_explicit(&s->max_memory, bytes, memory_order_relaxed);
}
