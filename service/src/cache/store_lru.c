/* Linking and the segmented LRU (memcached: items.c): an item goes into its bucket, its list and
 * the counters together and leaves them together; the HOT, WARM, COLD and TEMP lists and their
 * juggling; the age key of each shard's eviction candidate, published for cross-shard eviction
 * (store.h: "Segments", "Memory"). Under the lock throughout. The part of a hit (hit_mark) is
 * inline in store_int.h. */
#include "cache/store_int.h"

/* Items a bumped tail looks past (toward the head) for one whose position its CAS dates. */
#define BUMP_LOOKAHEAD 8
/* Juggling passes (HOT, WARM and COLD tails looked at once each) per store and per shard the
 * sweep visits: a store adds one item to HOT, so two passes keep up with it and with the hits
 * that mark items active, and a store never pays for a backlog (memcached's maintainer thread
 * runs up to 500 per class and wakeup). */
#define JUGGLE_PASSES 2

/* Whether the tail of `seg` is (or just became) the shard's eviction candidate: a change there
 * changes the published hint. */
static inline bool seg_evicts_first(const cache_shard *sh, unsigned seg)
{
    switch (seg) {
    case SEG_COLD: return true;
    case SEG_HOT: return !seg_last(sh, SEG_COLD);
    case SEG_WARM: return !seg_last(sh, SEG_COLD) && !seg_last(sh, SEG_HOT);
    default: return false;
    }
}

/* The age key by which eviction compares candidates across shards (smaller = older). CAS values
 * come from one store-wide sequence, so an item placed at a head by its store is dated by its
 * CAS. A bumped item (touch, a rescue into WARM or HOT) went to its head later than its CAS says:
 * it is dated by the first item toward the head of its list that a store placed (placed after
 * the bump), or as "now" if the head comes first. Items keep their mark when they move down to
 * COLD, where they are dated the same way by the items moved there after them. A run of more
 * than BUMP_LOOKAHEAD bumped items (a phase of WARM items leaving for COLD, after the reads that
 * put them there stopped) is dated by the newest CAS in its first BUMP_LOOKAHEAD: such items may
 * go a little before their turn; dated "now" at every look, they outlived every newer item of
 * the other shards (memcslap's rounds of new keys fell from 50 % to 21 % hits, memcached ~47 %). */
uint64_t lru_age_key(const cache_shard *sh, const cache_item *it)
{
    uint64_t newest = 0;
    for (unsigned bumped = 0; it; it = it->lru_prev) {
        if (it == sh->marker)
            continue;
        if (!it->bumped)
            return it->cas;
        newest = it->cas > newest ? it->cas : newest;
        if (++bumped > BUMP_LOOKAHEAD)
            return newest;
    }
    return atomic_load_explicit(&sh->store->cas_seq, memory_order_relaxed);
}

/* Publishes the candidate's age key for evictors. Called when the candidate changes; what changes
 * the key of an unchanged candidate (items ahead of a bumped one leaving, new ones arriving) only
 * makes it younger, so a published hint is never younger than the truth and evictors check it. */
void lru_hint_refresh(cache_shard *sh)
{
    const cache_item *c = evict_candidate(sh);
    atomic_store_explicit(&sh->store->tail_hint[sh->index], c ? lru_age_key(sh, c) : HINT_EMPTY,
                          memory_order_relaxed);
}

static void lru_remove(cache_shard *sh, cache_item *it)
{
    unsigned seg = it->seg;
    sh->seg_bytes[seg] -= item_bytes(sh->store, it);
    (*seg_number(sh, it))--;
    if (list_unlink(sh, it) && seg_evicts_first(sh, seg))
        lru_hint_refresh(sh);
}

static void lru_push(cache_shard *sh, cache_item *it, unsigned seg)
{
    it->seg = seg & 3u;
    it->lru_prev = NULL;
    it->lru_next = sh->seg_head[seg];
    sh->seg_head[seg] = it;
    sh->seg_bytes[seg] += item_bytes(sh->store, it);
    (*seg_number(sh, it))++;
    if (it->lru_next) {
        it->lru_next->lru_prev = it;
    } else {
        sh->seg_tail[seg] = it;
        if (seg_evicts_first(sh, seg))
            lru_hint_refresh(sh);
    }
}

/* To the head of `seg`, dated by `bumped` (set: by the move, per lru_age_key; clear: by its CAS,
 * which the caller just renewed). */
void lru_move(cache_shard *sh, cache_item *it, unsigned seg, bool bumped)
{
    it->bumped = bumped;
    if (sh->seg_head[seg] != it) {
        lru_remove(sh, it);
        lru_push(sh, it, seg);
    } else if (sh->seg_tail[seg] == it && seg_evicts_first(sh, seg)) {
        lru_hint_refresh(sh); /* alone in its list: its key changed */
    }
}

/* memcached's lru_pull_tail for HOT and WARM without evicting: an active tail is rescued (HOT's
 * to WARM, WARM's to WARM's head), an inactive one goes to COLD if its segment is over its share
 * of the shard's bytes (and holds more than that item: a shard's share may be smaller than one
 * large item, where memcached's per-class lists hold many) or it is older than max_age seconds.
 * true if it moved something. */
bool lru_juggle_tail(cache_shard *sh, unsigned seg, uint64_t limit, uint32_t max_age,
                     uint32_t now_s)
{
    cache_item *it = seg_last(sh, seg);
    if (!it)
        return false;
    if (it->active) {
        it->active = 0;
        cache_class_stats *cs = cls_stats(sh, it);
        if (seg == SEG_WARM)
            cs->moves_within_lru++;
        else
            cs->moves_to_warm++;
        lru_move(sh, it, SEG_WARM, true);
        return true;
    }
    bool crowded = sh->seg_bytes[seg] > limit && it->lru_prev && it->lru_prev != sh->marker;
    if (crowded || idle_s(it, now_s) > max_age) {
        cls_stats(sh, it)->moves_to_cold++;
        lru_move(sh, it, SEG_COLD, it->bumped);
        return true;
    }
    return false;
}

/* memcached's lru_maintainer_juggle, inline and bounded (there is no maintainer thread): up to
 * JUGGLE_PASSES passes over the HOT, WARM and COLD tails (an active COLD tail goes to WARM),
 * fewer when one moves nothing. Counted in lru_juggles (memcached's lru_maintainer_juggles).
 * Not while a walk is under way (items would move behind its marker) nor in flat mode. */
void lru_juggle(cache_shard *sh, uint64_t now_ms)
{
    if (sh->store->flat || sh->marker)
        return;
    sh->stats.lru_juggles++;
    uint32_t now_s = now_s30(now_ms);
    uint64_t total = juggled_bytes(sh);
    const cache_item *cold = seg_last(sh, SEG_COLD);
    uint32_t cold_age = cold ? idle_s(cold, now_s) : 0;
    for (unsigned pass = 0; pass < JUGGLE_PASSES; pass++) {
        bool moved = lru_juggle_tail(sh, SEG_HOT, total * HOT_LRU_PCT / 100,
                                     cold_age / HOT_MAX_FACTOR_DIV, now_s);
        moved |= lru_juggle_tail(sh, SEG_WARM, total * WARM_LRU_PCT / 100,
                                 cold_age * WARM_MAX_FACTOR_MULT, now_s);
        cache_item *c = seg_last(sh, SEG_COLD);
        if (c && c->active) {
            c->active = 0;
            cls_stats(sh, c)->moves_to_warm++;
            lru_move(sh, c, SEG_WARM, true);
            moved = true;
        }
        if (!moved)
            break;
    }
}

/* Unlinks *pp from the table and the LRU; the table's reference is the caller's to drop. */
cache_item *lru_detach(cache_shard *sh, cache_item **pp)
{
    cache_item *it = *pp;
    *pp = it->h_next;
    lru_remove(sh, it);
    it->linked = 0;
    sh->stats.curr_items--;
    sh->stats.bytes -= item_bytes(sh->store, it);
    cache_class_stats *cs = cls_stats(sh, it);
    cs->items--;
    cs->bytes -= item_bytes(sh->store, it);
    return it;
}

/* The segment a new item starts in: TEMP if its TTL is within the temporary TTL (memcached's
 * exptime - current_time <= temporary_ttl), else HOT (COLD when flat). */
static inline unsigned link_seg(const cache_shard *sh, const cache_item *it, uint64_t now)
{
    uint64_t e = item_expiry(it), ttl = sh->store->temp_ttl_ms;
    if (ttl && e != 0 && e <= now + ttl)
        return SEG_TEMP;
    return sh->store->flat ? SEG_COLD : SEG_HOT;
}

static void link_item(cache_shard *sh, cache_item *it, uint64_t h, uint64_t now)
{
    it->atime = now_s30(now);
    it->cas = next_cas(sh);
    it->bumped = 0;
    it->walk_seen = sh->walk_parity & 1; /* stored after the last walk began: not its business */
    cache_item **b = &sh->buckets[(h >> sh->hshift) & sh->mask];
    it->h_next = *b;
    *b = it;
    lru_push(sh, it, link_seg(sh, it, now));
    it->linked = 1;
    sh->stats.curr_items++;
    sh->stats.bytes += item_bytes(sh->store, it);
    cache_class_stats *cs = cls_stats(sh, it);
    cs->items++;
    cs->bytes += item_bytes(sh->store, it);
    maybe_grow(sh);
    lru_juggle(sh, now);
}

/* Puts `it` (key hash h) in place of *old_pp (NULL: no previous item). */
void lru_replace_locked(cache_shard *sh, cache_item **old_pp, cache_item *it, uint64_t h,
                        uint64_t now)
{
    if (old_pp)
        item_unref_locked(sh, lru_detach(sh, old_pp));
    link_item(sh, it, h, now);
}

bool cache_store_segmented(const cache_store *s)
{
    return !s->flat;
}

uint32_t cache_store_temporary_ttl(const cache_store *s)
{
    return (uint32_t)(s->temp_ttl_ms / 1000);
}
