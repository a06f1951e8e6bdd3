/* Private to cache/store*.c: the store's structs and the helpers its files share (store.h is the
 * contract; this is how it is kept). The files follow memcached's seams:
 *   store.c        lifecycle and the operations: get, the store modes, delete, invalidate, touch,
 *                  incr/decr, flush, restore
 *   store_item.c   items: accessors, making one, the last release               (items.c)
 *   store_class.c  allocation classes, free lists, memcached's size classes     (slabs.c)
 *   store_table.c  the hash table and its incremental resize                    (assoc.c)
 *   store_lru.c    linking items, the segmented LRU, the age keys of its tails  (items.c)
 *   store_evict.c  reserving memory, eviction in one order across shards        (lru_pull_tail)
 *   store_walk.c   sweep, scan, foreach, stats, class dumps                     (crawler.c)
 * There is no LTO, so a helper on the get/set/evict paths that the store inlined while it was
 * one file is static inline here (and must stay so: out of line it costs instructions); what
 * the compiler kept out of line then is a function in its file, declared below. "Under the
 * lock" means the shard's lock (lock(sh)), which every helper taking a shard needs unless it
 * says otherwise. */
#ifndef SF_CACHE_STORE_INT_H
#define SF_CACHE_STORE_INT_H

#include "cache/slab.h"
#include "cache/store.h"
#include "util/spinlock.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Allocation classes (store.h): ids [0, SLAB_CLASSES) are slab chunks (slab.h), 8-byte steps
 * from SLAB_MIN to SMALL_MAX, then steps of 1/16 of each power of two (64 bytes to 2 KiB, 128 to
 * 4 KiB, 256 up to the largest chunk with 8 to a page): at most ~6 % rounding where 1.25x steps
 * waste ~11 % on average; ids [SLAB_CLASSES, nclasses) are malloc'ed, with
 * the store's address in a word before the item (slab chunks find it through their page), in
 * classes of 16k - 16 bytes that fill glibc's chunks (an 8-byte header, 16-byte rounding)
 * exactly; CLS_EXACT is an item above them all, malloc'ed at its exact size (store_class.c). */
#define SLAB_MIN     64u
#define SLAB_STEP    8u
#define SMALL_MAX    1024u
#define SLAB_CLASSES 168u
#define MAX_CLASSES  256
#define CLS_EXACT    255u
#define MC_FAST_MAX  8192u /* memcached sizes up to this find their class in a table */
/* Buckets moved per operation while resizing: a table of n buckets starts growing at n + 1
 * items and is done after n / MIGRATE_STEP operations, long before it must grow again. */
#define MIGRATE_STEP 8
/* Tail hint of a shard with nothing to evict. */
#define HINT_EMPTY UINT64_MAX

/* memcached's segmented LRU (store.h: "Segments"). The order is memcached's LRU ids
 * (HOT_LRU 0, WARM_LRU 64, COLD_LRU 128, TEMP_LRU 192, shifted). */
enum { SEG_HOT = 0, SEG_WARM, SEG_COLD, SEG_TEMP, SEG_COUNT };
/* HOT and WARM keep at most these shares of a shard's HOT + WARM + COLD bytes; their tails older
 * than these multiples of the COLD tail's age go to COLD (store.h: memcached's defaults). */
#define HOT_LRU_PCT          CACHE_HOT_LRU_PCT
#define WARM_LRU_PCT         CACHE_WARM_LRU_PCT
#define HOT_MAX_FACTOR_DIV   CACHE_HOT_MAX_FACTOR_DIV
#define WARM_MAX_FACTOR_MULT CACHE_WARM_MAX_FACTOR_MULT
/* The access second is kept modulo 2^30 (34 years), compared modulo 2^30. */
#define ATIME_MASK ((UINT32_C(1) << 30) - 1)

struct cache_shard;

/* 52 bytes before the data (the struct's size, 56, counts the padding the data starts in). No
 * stored hash: chains are short (load factor <= 1), so comparing lengths and keys
 * is as quick, and the hash is recomputed from the key where it is needed (resize, eviction, the
 * last release). No store or shard pointer: the store is found through the item's slab page or
 * the word before a malloc'ed item (item_store), the shard from the key's hash. Client flags,
 * zero for most items, take 4 bytes after the value only when they are not (has_flags): with
 * them in the header, the 1M-item benchmark's items (32-byte key, 100-byte value) would be
 * 188 bytes, in the 192-byte class, instead of 184 in the 184-byte one.
 *
 * The references and the expiry share one atomic word (REF_ONE, EXP_MASK): the expiry is
 * milliseconds since the epoch, which needs 48 bits until the year 10889, and memcached itself
 * counts references in 16 bits (with the same ceiling, REFS_MAX). That frees the 32 bits of
 * `atime`, the last access memcached's meta commands report.
 * References are taken under the shard's lock (so at most REFS_MAX + 1 at any moment) and
 * dropped anywhere; the expiry is only changed under the lock, by a compare-and-swap that keeps
 * the reference count. `atime` and the history bits (fetched, token_sent, stale) change under
 * the lock and are read under it only (cache_get_meta, cache_item_meta_of); key_binary sits in
 * its own byte and never changes once the item is made, so it is read without the lock. */
struct cache_item {
    cache_item *h_next; /* hash chain; free-list link once freed */
    cache_item *lru_prev, *lru_next;
    uint64_t cas;             /* also orders items against a flush (flush_cas) */
    _Atomic uint64_t ref_exp; /* references << 48 | expiry ms (0 = never) */
    uint32_t atime : 30;      /* second (now_ms / 1000, modulo 2^30) of the last access */
    uint32_t seg : 2;         /* the LRU segment whose list holds it (SEG_*) */
    /* A memory location of its own (C11 6.7.2.1): atime and seg change under the lock while
     * vlen and has_flags, fixed since the item was made, are read without it. Adjacent, the four
     * would be one location, and writing seg a race with reading vlen (TSan saw it). */
    uint32_t : 0;
    uint32_t vlen : 31;       /* max_item_bytes <= 1 GiB */
    uint32_t has_flags : 1;   /* nonzero client flags, after the value (item_flags) */
    uint8_t klen;
    uint8_t ctlen : 7;
    uint8_t key_binary : 1; /* the key came in base64 (memcached's meta b): k answers in base64 */
    uint8_t cls;            /* allocation class (SLAB_CLASSES, CLS_EXACT) */
    uint8_t linked : 1, accounted : 1;
    uint8_t active : 1;     /* hit while fetched: memcached's ACTIVE (rescued at its list's tail) */
    uint8_t walk_seen : 1;  /* == shard's walk_parity: visited by (or newer than) the last walk */
    uint8_t fetched : 1;    /* hit (with an LRU bump) since it was stored: memcached's FETCHED */
    uint8_t token_sent : 1; /* a recache token (meta W) went out: memcached's TOKEN_SENT */
    uint8_t stale : 1;      /* invalidated (md I, ms I), served stale: memcached's STALE */
    uint8_t bumped : 1;     /* moved to a head by touch or a rescue, not its store (lru_age_key) */
    char data[];            /* key, content type, value, client flags if has_flags */
};
#define ITEM_HEADER offsetof(cache_item, data)
_Static_assert(ITEM_HEADER == 52, "the item header is part of every item's footprint");
_Static_assert(sizeof(cache_item) <= 64, "an item fits the smallest class");

#define REF_SHIFT 48
#define REF_ONE   (UINT64_C(1) << REF_SHIFT)
#define EXP_MASK  (REF_ONE - 1)
/* memcached's IT_REFCOUNT_LIMIT: a lookup finding this many references answers a miss rather
 * than overflow the 16-bit count. Unreachable here (references are held for one command, or
 * 256 at a time by a walk), but bounded all the same. */
#define REFS_MAX 60000u

static inline uint32_t item_flags(const cache_item *it)
{
    uint32_t f = 0;
    if (it->has_flags)
        memcpy(&f, it->data + it->klen + it->ctlen + it->vlen, sizeof f);
    return f;
}

static inline uint64_t item_expiry(const cache_item *it)
{
    return atomic_load_explicit(&it->ref_exp, memory_order_relaxed) & EXP_MASK;
}

static inline unsigned item_refs(const cache_item *it, memory_order mo)
{
    return (unsigned)(atomic_load_explicit(&it->ref_exp, mo) >> REF_SHIFT);
}

/* Under the shard's lock. false (nothing taken) at REFS_MAX. */
static inline bool ref_take(cache_item *it)
{
    uint64_t old = atomic_fetch_add_explicit(&it->ref_exp, REF_ONE, memory_order_relaxed);
    if ((old >> REF_SHIFT) < REFS_MAX)
        return true;
    atomic_fetch_sub_explicit(&it->ref_exp, REF_ONE, memory_order_relaxed);
    return false;
}

/* true if that was the last reference. */
static inline bool ref_drop(cache_item *it)
{
    return (atomic_fetch_sub_explicit(&it->ref_exp, REF_ONE, memory_order_acq_rel) >> REF_SHIFT) ==
           1;
}

static inline uint64_t clamp_expiry(uint64_t e)
{
    return e > EXP_MASK ? EXP_MASK : e;
}

/* Under the shard's lock (or before the item is published): a new expiry, references kept. */
static inline void set_expiry(cache_item *it, uint64_t e)
{
    uint64_t old = atomic_load_explicit(&it->ref_exp, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&it->ref_exp, &old,
                                                  (old & ~EXP_MASK) | clamp_expiry(e),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

static inline uint32_t now_s30(uint64_t now_ms)
{
    return (uint32_t)(now_ms / 1000) & ATIME_MASK;
}

/* Seconds since the item's last access (modulo 2^30: a clean wrap); 0 for an access a loop
 * whose clock runs a little ahead stamped "in the future". */
static inline uint32_t idle_s(const cache_item *it, uint32_t now_s)
{
    uint32_t d = (now_s - it->atime) & ATIME_MASK;
    return d > ATIME_MASK / 2 ? 0 : d;
}

typedef struct cache_shard {
    alignas(64) pthread_mutex_t mutex; /* one of the two, by lock_kind */
    _Atomic int spin;
    cache_lock_kind lock_kind;
    unsigned index, hshift; /* hshift = shard bits: bucket index = hash >> hshift */
    cache_store *store;
    cache_item **buckets;
    size_t mask;
    cache_item **old; /* the previous table while a resize is in progress */
    size_t old_mask, migrate_pos;
    cache_item *seg_head[SEG_COUNT], *seg_tail[SEG_COUNT]; /* most recent at the head */
    uint64_t seg_bytes[SEG_COUNT];
    cache_item *marker;  /* a walk's place in an LRU list (cache_store_foreach), or NULL */
    uint8_t walk_parity; /* flipped when a walk starts: every item present becomes unseen */
    uint64_t flush_at;   /* a flush not applied yet (0 = none): due once now >= flush_at */
    uint64_t flush_cas;  /* applied flushes: items with cas <= flush_cas are dead */
    size_t free_bytes;
    cache_item *free_list[MAX_CLASSES];
    uint8_t free_n[MAX_CLASSES];
    cache_stats stats;                              /* only the CACHE_STATS_COUNTERS fields */
    cache_class_stats cls_stats[CACHE_CLASSES_MAX]; /* by memcached size class (store.h) */
} cache_shard;

struct cache_store {
    cache_shard *shards;
    unsigned nshards, shard_bits;
    uint64_t seed;
    uint64_t id;                 /* unique per store in the process: names it in evict_cache */
    _Atomic uint64_t max_memory; /* cache_store_set_memory_limit may change it at any time */
    bool no_evictions;           /* full: NO_MEMORY instead of evicting (memcached -M) */
    bool flat;                   /* one LRU (COLD) per shard: memcached without lru_segmented */
    uint64_t temp_ttl_ms;        /* items whose TTL at store time is <= it go to TEMP; 0 = off */
    uint32_t max_item;
    size_t free_cap; /* per shard */
    slab_arena *slab; /* the slab classes' chunks */
    unsigned nclasses;
    uint32_t class_size[MAX_CLASSES];
    unsigned mc_nclasses;                 /* memcached's size classes, 1..mc_nclasses */
    uint32_t mc_chunk[CACHE_CLASSES_MAX]; /* their chunk sizes */
    uint8_t mc_class_by8[MC_FAST_MAX / 8 + 1]; /* memcached size / 8, rounded up -> its class */
    /* Both written by every store (one line: the second write finds it already owned). */
    alignas(64) _Atomic uint64_t used; /* reserved bytes; also written by every final release */
    _Atomic uint64_t cas_seq;          /* the last CAS handed out, store-wide */
    /* Per shard, the age key of its LRU tail (tail_key), written under the shard's lock when the
     * tail changes and read by evictors without any lock: a hint, checked under the lock before
     * use. Its own array, so a scan reads a few lines instead of one per shard. */
    alignas(64) _Atomic uint64_t *tail_hint;
    _Atomic(cache_evict_fn) evict_fn; /* cache_store_set_evict_hook; NULL = off */
    void *_Atomic evict_arg;
    pthread_mutex_t walk_mu; /* one cache_store_foreach at a time (one marker per shard) */
    _Atomic uint64_t mallocs;
};

/* ---- what the store's files call across them (out of line: see the top) ---------------------- */

/* store_class.c */
bool classes_init(cache_store *s, uint64_t max_memory, unsigned shards);
void item_free_locked(cache_shard *sh, cache_item *it);
/* store_table.c */
int table_init(cache_shard *sh);
void table_destroy(cache_shard *sh);
void table_grow(cache_shard *sh);
void table_free(cache_item **t, size_t n);
/* store_lru.c */
uint64_t lru_age_key(const cache_shard *sh, const cache_item *it);
void lru_hint_refresh(cache_shard *sh);
void lru_move(cache_shard *sh, cache_item *it, unsigned seg, bool bumped);
bool lru_juggle_tail(cache_shard *sh, unsigned seg, uint64_t limit, uint32_t max_age,
                     uint32_t now_s);
void lru_juggle(cache_shard *sh, uint64_t now_ms);
cache_item *lru_detach(cache_shard *sh, cache_item **pp);
void lru_replace_locked(cache_shard *sh, cache_item **old_pp, cache_item *it, uint64_t h,
                        uint64_t now);
/* store_evict.c */
int evict_reserve(cache_store *s, cache_shard *home, cache_item *it);
/* store_item.c */
cache_item *item_make(cache_store *s, uint64_t h, const char *key, size_t klen, size_t vlen,
                      uint32_t flags, uint64_t expiry_ms, const char *ctype, size_t ctlen,
                      int *err);

/* ---- hashing, shards, locks ------------------------------------------------------------------ */

/* wyhash-style: 64x64->128 multiply, fold the halves. Seeded so clients cannot aim keys at
 * one chain. */
static inline uint64_t mum(uint64_t a, uint64_t b)
{
    unsigned __int128 r = (unsigned __int128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t hash_key(uint64_t seed, const char *key, size_t len)
{
    const uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull,
                   k2 = 0x8ebc6af09c88c6e3ull;
    uint64_t h = mum(seed ^ k0, len ^ k1), w;
    for (; len >= 8; key += 8, len -= 8) {
        memcpy(&w, key, 8);
        h = mum(h ^ w, k1);
    }
    w = 0;
    memcpy(&w, key, len);
    return mum(h ^ w ^ k2, k0 ^ (h >> 32));
}

static inline void lock(cache_shard *sh)
{
    if (sh->lock_kind == CACHE_LOCK_SPIN)
        spin_lock(&sh->spin);
    else
        pthread_mutex_lock(&sh->mutex);
}

static inline bool try_lock(cache_shard *sh)
{
    if (sh->lock_kind == CACHE_LOCK_SPIN)
        return spin_trylock(&sh->spin);
    return pthread_mutex_trylock(&sh->mutex) == 0;
}

static inline void unlock(cache_shard *sh)
{
    if (sh->lock_kind == CACHE_LOCK_SPIN)
        atomic_store_explicit(&sh->spin, 0, memory_order_release);
    else
        pthread_mutex_unlock(&sh->mutex);
}

static inline cache_shard *shard_for(const cache_store *s, uint64_t h)
{
    return &s->shards[h & (s->nshards - 1)];
}

static inline uint64_t item_hash(const cache_store *s, const cache_item *it)
{
    return hash_key(s->seed, it->data, it->klen);
}

static inline cache_shard *item_shard(const cache_store *s, const cache_item *it)
{
    return shard_for(s, item_hash(s, it));
}

/* The store an item belongs to, from the item alone (cache_item_release, cache_item_size). */
static inline cache_store *item_store(const cache_item *it)
{
    if (it->cls < SLAB_CLASSES)
        return slab_owner(it);
    cache_store *s;
    memcpy(&s, (const char *)it - sizeof s, sizeof s);
    return s;
}

/* ---- items, their classes and memory (store_item.c, store_class.c) --------------------------- */

/* cache_key_valid, inline for cache_item_new (it checks every byte of every stored key). */
static inline bool key_valid(const char *key, size_t klen)
{
    if (klen == 0 || klen > CACHE_KEY_MAX)
        return false;
    for (size_t i = 0; i < klen; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x21 || c > 0x7e)
            return false;
    }
    return true;
}

static inline unsigned class_of(const cache_store *s, size_t size)
{
    if (size <= SMALL_MAX)
        return size <= SLAB_MIN ? 0 : (unsigned)((size - SLAB_MIN + SLAB_STEP - 1) / SLAB_STEP);
    if (size > s->class_size[s->nclasses - 1])
        return CLS_EXACT;
    unsigned lo = (SMALL_MAX - SLAB_MIN) / SLAB_STEP + 1, hi = s->nclasses - 1; /* first >= */
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (s->class_size[mid] >= size)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static inline size_t raw_size(size_t klen, size_t ctlen, size_t vlen, uint32_t flags)
{
    return ITEM_HEADER + klen + ctlen + vlen + (flags ? sizeof flags : 0);
}

/* The bytes an item of class cls and raw size raw takes (and is accounted for). */
static inline size_t class_bytes(const cache_store *s, unsigned cls, size_t raw)
{
    return cls != CLS_EXACT ? s->class_size[cls] : raw;
}

static inline size_t item_bytes(const cache_store *s, const cache_item *it)
{
    return class_bytes(s, it->cls, raw_size(it->klen, it->ctlen, it->vlen, it->has_flags));
}

static inline size_t mc_item_size(size_t klen, size_t vlen, uint32_t flags)
{
    /* memcached's item header (48) and CAS (8), the key's NUL, the value's CRLF. */
    return 48 + 8 + klen + 1 + vlen + 2 + (flags ? sizeof flags : 0);
}

/* cache_store_size_class: the first class that holds `bytes`, else the last. Inline for mc_class,
 * which a few bytes of large items take here. */
static inline unsigned mc_class_of(const cache_store *s, size_t bytes)
{
    unsigned lo = 1, hi = s->mc_nclasses;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (s->mc_chunk[mid] >= bytes)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static inline size_t mc_size(const cache_item *it)
{
    return mc_item_size(it->klen, it->vlen, it->has_flags);
}

/* The item's memcached class (a table lookup: its counters are updated on every link). */
static inline unsigned mc_class(const cache_store *s, const cache_item *it)
{
    size_t x = mc_size(it);
    return x <= MC_FAST_MAX ? s->mc_class_by8[(x + 7) / 8] : mc_class_of(s, x);
}

static inline cache_class_stats *cls_stats(cache_shard *sh, const cache_item *it)
{
    return &sh->cls_stats[mc_class(sh->store, it)];
}

/* The per-class count of the item's segment (number_hot, ..., number_temp: adjacent). */
static inline uint64_t *seg_number(cache_shard *sh, const cache_item *it)
{
    return &cls_stats(sh, it)->number_hot + it->seg;
}

/* The shard's free list first, so a steady same-size workload never reaches the allocators. */
static inline cache_item *item_alloc(cache_shard *sh, unsigned cls, size_t raw)
{
    cache_store *s = sh->store;
    if (cls != CLS_EXACT) {
        lock(sh);
        cache_item *it = sh->free_list[cls];
        if (it) {
            sh->free_list[cls] = it->h_next;
            sh->free_n[cls]--;
            sh->free_bytes -= s->class_size[cls];
        }
        unlock(sh);
        if (it)
            return it;
    }
    if (cls < SLAB_CLASSES)
        return slab_alloc(s->slab, cls);
    char *m = malloc(sizeof s + class_bytes(s, cls, raw));
    if (!m)
        return NULL;
    atomic_fetch_add_explicit(&s->mallocs, 1, memory_order_relaxed);
    memcpy(m, &s, sizeof s);
    return (cache_item *)(m + sizeof s);
}

static inline void item_dealloc(cache_item *it)
{
    if (it->cls < SLAB_CLASSES)
        slab_free(it);
    else
        free((char *)it - sizeof(cache_store *));
}

static inline void item_unref_locked(cache_shard *sh, cache_item *it)
{
    if (ref_drop(it))
        item_free_locked(sh, it);
}

static inline uint64_t memory_limit(const cache_store *s)
{
    return atomic_load_explicit(&s->max_memory, memory_order_relaxed);
}

static inline bool over_limit(cache_store *s)
{
    return atomic_load_explicit(&s->used, memory_order_relaxed) > memory_limit(s);
}

/* ---- CAS, expiry and flush ------------------------------------------------------------------- */

/* One store-wide sequence (not one per shard): CAS values then also order items by the time they
 * were stored, across shards, which eviction needs (lru_age_key). Taken under the shard's lock, so
 * CAS values increase along each shard's LRU list from the tail (except bumped items). */
static inline uint64_t next_cas(cache_shard *sh)
{
    return atomic_fetch_add_explicit(&sh->store->cas_seq, 1, memory_order_relaxed) + 1;
}

/* Every CAS handed out so far is <= this (a CAS taken later under the same lock is larger: both
 * touch one atomic, whose modification order the lock orders). */
static inline uint64_t cas_horizon(const cache_shard *sh)
{
    return atomic_load_explicit(&sh->store->cas_seq, memory_order_relaxed);
}

static inline bool is_expired(const cache_item *it, uint64_t now)
{
    uint64_t e = item_expiry(it);
    return e != 0 && now >= e;
}

/* A pending flush takes effect at the first operation on the shard at or after its time, before
 * that operation stores anything: everything stored until then is dead (CAS <= the horizon),
 * anything stored from then on lives. So no item needs a timestamp of its own. */
static inline void flush_due(cache_shard *sh, uint64_t now)
{
    if (sh->flush_at != 0 && now >= sh->flush_at) {
        sh->flush_cas = cas_horizon(sh);
        sh->flush_at = 0;
    }
}

static inline bool is_flushed(const cache_shard *sh, const cache_item *it)
{
    return it->cas <= sh->flush_cas;
}

/* ---- LRU lists (store_lru.c) ----------------------------------------------------------------- */

/* The last item of a segment's list (a walk's marker is not an item), or NULL. */
static inline cache_item *seg_last(const cache_shard *sh, unsigned seg)
{
    cache_item *it = sh->seg_tail[seg];
    return it && it == sh->marker ? it->lru_prev : it;
}

/* What eviction takes next in this shard: COLD's tail, else HOT's (memcached pulls HOT into
 * COLD when COLD is empty), else WARM's (memcached's maintainer would drain it to COLD; we have
 * no thread to wait for). TEMP is never evicted. NULL if there is nothing. */
static inline cache_item *evict_candidate(const cache_shard *sh)
{
    cache_item *it = seg_last(sh, SEG_COLD);
    if (!it)
        it = seg_last(sh, SEG_HOT);
    if (!it)
        it = seg_last(sh, SEG_WARM);
    return it;
}

/* List surgery only (items and a walk's marker); true if `it` was the tail. */
static inline bool list_unlink(cache_shard *sh, cache_item *it)
{
    unsigned seg = it->seg;
    bool was_tail = sh->seg_tail[seg] == it;
    if (it->lru_prev)
        it->lru_prev->lru_next = it->lru_next;
    else
        sh->seg_head[seg] = it->lru_next;
    if (it->lru_next)
        it->lru_next->lru_prev = it->lru_prev;
    else
        sh->seg_tail[seg] = it->lru_prev;
    return was_tail;
}

/* Where a touch, an incr in place or a rescue during a walk puts an item: HOT (COLD when flat),
 * TEMP items staying in TEMP. A walk visits HOT last, so nothing it has not visited lands
 * behind it (cache_store_foreach). */
static inline unsigned bump_seg(const cache_shard *sh, const cache_item *it)
{
    if (it->seg == SEG_TEMP)
        return SEG_TEMP;
    return sh->store->flat ? SEG_COLD : SEG_HOT;
}

/* The bytes HOT and WARM take their shares of (memcached's total_bytes: TEMP not counted). */
static inline uint64_t juggled_bytes(const cache_shard *sh)
{
    return sh->seg_bytes[SEG_HOT] + sh->seg_bytes[SEG_WARM] + sh->seg_bytes[SEG_COLD];
}

/* A hit that bumps (under the lock): memcached's FETCHED, the second-chance mark and the last
 * access. Marks instead of relinking (the LRU pointers of 3 items are 3 cache misses). As in
 * memcached's segmented LRU, the first hit only marks the item fetched and a hit on a fetched
 * item marks it active (a second chance at the tail), so one read right after a store (a check)
 * does not keep an item over those stored after it. Each is written only when it changes, so a
 * hot item read many times a second costs no more stores to its header than the mark alone did:
 * a read-only check, then at most one store per second for the access time. */
static inline void hit_mark(cache_shard *sh, cache_item *it, uint64_t now_ms)
{
    if (!it->fetched) {
        it->fetched = 1;
    } else if (!it->active) {
        it->active = 1;
        /* memcached's do_item_bump: an item turning active in COLD goes to WARM (memcached
         * hands it to its maintainer thread; here the move is done at once: O(1), once per
         * stay in COLD). Elsewhere the mark is enough: the juggle rescues it at its tail. */
        if (it->seg == SEG_COLD && !sh->store->flat && !sh->marker) {
            it->active = 0;
            cls_stats(sh, it)->moves_to_warm++;
            lru_move(sh, it, SEG_WARM, true);
            /* What memcached's maintainer would do soon after: keep WARM within its share (a
             * read-only phase never stores, so the juggle on stores would not; without this,
             * WARM grew to ~75 % of a shard and kept yesterday's hot items over today's). */
            uint64_t limit = juggled_bytes(sh) * WARM_LRU_PCT / 100;
            /* memcached's lru_pull_tail looks at up to 5 tails: active ones are rescued within
             * WARM on the way to one that goes to COLD. */
            for (unsigned k = 0; k < 5 && sh->seg_bytes[SEG_WARM] > limit; k++)
                if (!lru_juggle_tail(sh, SEG_WARM, limit, UINT32_MAX, now_s30(now_ms)))
                    break;
        }
    }
    uint32_t t = now_s30(now_ms);
    if (it->atime != t)
        it->atime = t;
}

/* ---- the table (store_table.c) --------------------------------------------------------------- */

/* Moves the next few buckets of the old table; frees it when the last one has moved. */
static inline void migrate_step(cache_shard *sh)
{
    if (!sh->old)
        return;
    size_t n = sh->old_mask + 1, end = sh->migrate_pos + MIGRATE_STEP;
    if (end > n)
        end = n;
    for (size_t i = sh->migrate_pos; i < end; i++) {
        for (cache_item *it = sh->old[i], *next; it; it = next) {
            next = it->h_next;
            cache_item **b = &sh->buckets[(item_hash(sh->store, it) >> sh->hshift) & sh->mask];
            it->h_next = *b;
            *b = it;
        }
        sh->old[i] = NULL; /* lookups still scan the old table: keep it consistent */
    }
    sh->migrate_pos = end;
    if (end == n) {
        table_free(sh->old, sh->old_mask + 1);
        sh->old = NULL;
    }
}

/* A resize starts once a table holds more items than buckets (table_grow). */
static inline void maybe_grow(cache_shard *sh)
{
    if (!sh->old && sh->stats.curr_items > sh->mask + 1)
        table_grow(sh);
}

/* The link pointing at the item with this key, in the new table or the old one, or NULL. */
static inline cache_item **find_link(cache_shard *sh, uint64_t h, const char *key, size_t klen)
{
    cache_item **tabs[2] = {sh->buckets, sh->old};
    size_t masks[2] = {sh->mask, sh->old_mask};
    for (int t = 0; t < 2 && tabs[t]; t++) {
        for (cache_item **pp = &tabs[t][(h >> sh->hshift) & masks[t]]; *pp; pp = &(*pp)->h_next) {
            const cache_item *it = *pp;
            if (it->klen == klen && memcmp(it->data, key, klen) == 0)
                return pp;
        }
    }
    return NULL;
}

/* Unlinks *pp if it is expired or flushed (counted as `swept` or lazy); true if it did. */
static inline bool reap(cache_shard *sh, cache_item **pp, uint64_t now, bool swept)
{
    cache_item *it = *pp;
    if (is_expired(it, now)) {
        if (swept)
            sh->stats.expired_swept++;
        else
            sh->stats.expired_lazy++;
        if (!it->fetched)
            cls_stats(sh, it)->expired_unfetched++;
    } else if (is_flushed(sh, it)) {
        sh->stats.flushed++;
    } else {
        return false;
    }
    if (swept) { /* memory of a dead item taken back for reuse (reclaimed), by the background
                  * walk, our LRU crawler (crawler_reclaimed: the part the crawler took) */
        cls_stats(sh, it)->reclaimed++;
        cls_stats(sh, it)->crawler_reclaimed++;
    }
    lru_detach(sh, pp);
    item_unref_locked(sh, it);
    return true;
}

/* The link to the live item for the key, or NULL (a dead one met on the way is unlinked).
 * Also advances a resize in progress: every operation pays a little of it. */
static inline cache_item **find_live(cache_shard *sh, uint64_t h, const char *key, size_t klen,
                                     uint64_t now)
{
    flush_due(sh, now);
    migrate_step(sh);
    cache_item **pp = find_link(sh, h, key, klen);
    if (pp && reap(sh, pp, now, false))
        return NULL;
    return pp;
}

#endif
