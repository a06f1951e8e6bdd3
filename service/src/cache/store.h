/* Cache store: the core of a memcached-class key/value cache. No I/O, no libuv; the HTTP and
 * memcached-protocol handlers sit on top of it.
 *
 * Shape. Keys hash (seeded 64-bit hash) to one of `shards` shards (a power of two). Each shard
 * has its own lock (mutex, or a test-and-test-and-set spinlock with PAUSE and a sched_yield every
 * 1024 spins), its own chained hash table and its own LRU lists, memcached's segments (below).
 * Eviction order across shards: "Memory" below. Tables double at load factor 1 by INCREMENTAL resize: old and new bucket
 * arrays live side by side and every operation on the shard moves a few buckets, so no call ever
 * pays for a whole rehash. Tables never shrink.
 *
 * Segments (memcached 1.6's segmented LRU, per shard instead of per size class). Each shard has
 * four lists, most recent at the head: HOT, WARM, COLD and TEMP. A stored item goes to HOT, or
 * to TEMP when temporary_ttl_s is set and its TTL is at most that (memcached's -o temporary_ttl:
 * TEMP items are never evicted, only expired, flushed or deleted; when nothing else is left a
 * store answers NO_MEMORY). The first hit marks an item fetched, a hit on a fetched item marks it
 * active: an item turning active in COLD moves to WARM at once (moves_to_warm; O(1), once per
 * stay in COLD), and if WARM then holds more than its share, up to 5 of its tails are looked at
 * as below (a read-only phase never stores, and WARM would otherwise fill the shard with what
 * was read then); elsewhere the mark is all a hit writes. memcached's maintainer thread is done
 * inline ("juggling", counted in lru_juggles): each store into a shard, and the expiry sweep in
 * each shard it visits, look at the HOT, WARM and COLD tails up to twice: an active HOT tail goes
 * to WARM (moves_to_warm), an active WARM tail to WARM's head (moves_within_lru), an active COLD
 * tail to WARM; an inactive HOT or WARM tail goes to COLD (moves_to_cold) when its segment holds
 * more than 20 % / 40 % of the shard's HOT+WARM+COLD bytes (memcached's hot_lru_pct,
 * warm_lru_pct; and more than that one item: a shard's share may be smaller than one large item)
 * or it is idle longer than 0.2 / 2 times the COLD tail (hot_max_factor, warm_max_factor). While
 * a walk (cache_store_foreach) is in a shard, items there change segment only toward HOT, which
 * the walk visits last. Touch and incr move an item to HOT's head (TEMP items stay in TEMP).
 * flat_lru (memcached without lru_segmented) keeps one list, COLD: items stored there, hits only
 * mark them, and eviction gives an active tail a second chance at the head (CLOCK-like).
 *
 * Items. One allocation each: header, key (1..250 bytes of 0x21..0x7e, the memcached rule:
 * cache_key_valid), optional content type (<= 127 bytes, for HTTP), value (<= max_item_bytes).
 * The content type belongs to the value it came with: a value the store computes (append,
 * prepend, incr/decr) has none, so bytes written without one (over memcached) are never served
 * under a type an HTTP writer chose for other bytes.
 * A stored item is immutable (touch changes only its expiry, atomically) and reference counted:
 * cache_get returns a referenced item that stays valid, unchanged, until cache_item_release,
 * whatever happens to the key meanwhile (replace, delete, eviction, flush).
 *
 * Writing. cache_item_new allocates an item whose value the caller fills (cache_item_value_mut)
 * across as many network reads as it takes; cache_store_item then stores it under a mode. The
 * store takes the caller's reference in every case: on success the item is linked, otherwise
 * released. The caller must not touch it afterwards.
 *   SET      always                               -> STORED
 *   ADD      key absent (or expired / flushed)    -> STORED, else NOT_STORED
 *   REPLACE  key present                          -> STORED, else NOT_STORED
 *   APPEND / PREPEND  key present: a new item old+new (old flags and expiry, no content type; the
 *            passed item's flags/expiry are ignored) -> STORED, else NOT_STORED
 *   CAS      present and cas matches -> STORED; present, other cas -> EXISTS; absent -> NOT_FOUND
 *   CAS_STALE  as CAS, except that 0 < cas_in < the item's cas stores too, the new item marked
 *            stale with the old one's expiry and token mark (memcached's ms I)
 * Any mode may also fail with TOO_LARGE (value > max_item_bytes, or item > max_memory_bytes)
 * or NO_MEMORY (nothing left to evict). Memory is reserved before the mode is checked (eviction
 * must not run under the shard's lock), so under pressure a refused ADD may still have evicted,
 * and APPEND/PREPEND/incr need room for both versions for a moment (memcached alike).
 *
 * Time. Every call that looks at an item takes `now_ms` (ms since the Unix epoch) from the caller,
 * usually the loop's cached time; the store never reads a clock. expiry_ms is absolute, 0 = never;
 * an item is expired once now_ms >= expiry_ms. Expired items are unlinked lazily when met, and
 * by cache_store_sweep, which loops call with a small budget so memory comes back without traffic.
 * cache_flush_all(at_ms): once now_ms >= at_ms, every item stored before at_ms (or in the
 * millisecond at_ms but before the call) is a miss. (Exactly: the flush takes effect at the
 * first operation on each shard with now_ms >= at_ms, and kills what was stored before it.) A later flush replaces a pending one, as in
 * memcached; at_ms = 0 cancels it.
 *
 * CAS values are unique and increase per key: one store-wide sequence (one atomic add per store,
 * on the cache line the memory counter's add already owns), so they also date items across
 * shards for eviction.
 *
 * History (memcached's meta commands read it: mg h l t, the recache tokens W Z X, me). Every
 * item knows the second of its last access (its store, or a hit that bumps: cache_get, touch,
 * cache_get_meta without no_bump), whether it was hit since it was stored (fetched), whether a
 * recache token went out for it (token_sent) and whether it was invalidated (stale). Storing
 * a key starts a new history (except CAS_STALE, above); cache_invalidate marks an item stale
 * without deleting it. These bits live in the item's 52-byte header; a hit writes the access
 * second only when it changed (store_int.h's hit_mark). The access second is kept modulo 2^30 (34
 * years; the header's other 2 bits name the item's segment) and compared modulo 2^30. Expiry
 * times are kept to the millisecond
 * up to the year 10889 (larger ones are clamped there).
 *
 * Memory. Every item's real allocation size (its size class, or its exact size above 1 MiB) is
 * reserved in a store-wide counter before it is linked and given back when its last reference
 * goes, so items still held by readers after unlinking count until released. Over
 * max_memory_bytes, the store evicts in one LRU order across shards, as memcached (whose LRU is
 * global per class) does. Each shard's eviction candidate is its COLD tail, else its HOT tail
 * (memcached pulls HOT into COLD when COLD is empty), else its WARM tail (memcached's maintainer
 * would drain WARM to COLD); an active candidate is rescued to WARM instead (memcached's
 * lru_pull_tail). Every shard publishes the age of its candidate in a small array (an item's age
 * is its CAS; for an item moved by touch or a rescue, the CAS of the next item a store placed
 * ahead of it in its list, which for an item moved down to COLD is one moved down after it); the
 * writer that must evict compares the shards' candidate ages without
 * locks, locks the shard with the oldest (the next oldest if another evictor holds it), checks
 * the age there and evicts. A candidate's age only grows younger, so each thread remembers the 8
 * oldest shards its last comparison found and the age all others are younger than, and compares
 * all shards again only once those 8 are used up (about one comparison per 8 evictions). So,
 * with up to 64 shards (the default) and stores one after another: an item
 * stored, appended to or touched later than another is never evicted first, and one read twice
 * or touched outlives every item stored before that (it may outlive exact LRU by the few stores
 * until its shard receives the next item; read twice, it stays in WARM until the rules above
 * move it down). With more shards an eviction compares a window of 64
 * (from the writer's shard, as redis samples): with 1024 shards, 99.3 % of the evicted items
 * were older than the oldest survivor (test_store_evict's test_evict_order_sampled asserts that
 * >= 95 % of the most recent ones stay). Concurrent stores are ordered as their CAS additions were.
 * Gets take only their shard's lock; a store takes other shards' locks only when it must evict,
 * one at a time. If nothing can be evicted (everything left is pinned by readers) the store
 * answers NO_MEMORY. Not counted: items allocated but not yet
 * stored, bucket arrays (~8-16 bytes per item), idle free-list memory (bounded, below).
 * Allocation. Items up to 7936 bytes are chunks of a slab class (slab.h: 64 KiB pages, no
 * per-chunk header), in 8-byte steps to 1 KiB, then in steps of 1/16 of each power of two (at
 * most ~6 % rounding, ~2 % on average); larger ones are malloc'ed
 * in classes of 16k - 16 bytes (glibc's 8-byte chunk header and 16-byte rounding, and the store's
 * address in a word before the item: a slab chunk finds it through its page) up to 1 MiB, and at
 * their exact size beyond. The header is 52 bytes (client flags, when not 0, 4 more after the
 * value), so 1,000,000 items of 32-byte keys and 100-byte values take 184 bytes each plus ~8.4
 * of buckets (memcached 1.6.18: 192-byte chunks, ~200 bytes an item in all;
 * loadtest/bench_cache_memory.py). What the limit does not see is
 * fragmentation: chunks freed back to slab pages that still hold a live item of their class,
 * after the workload moved to other sizes (at most the limit again, in the worst case; the
 * stats say how much: slab_free_chunk_bytes). Empty pages go back to a pool shared by every
 * class, their memory to the kernel beyond 1 MiB of them.
 * Freed items go to a per-shard free list per size class (at most 64 per class and
 * max(max_memory/16/shards, 64 KiB) bytes per shard), and allocation takes from there first: a
 * steady same-size workload touches neither the slab classes' locks nor malloc. `mallocs` in
 * the stats counts every malloc the store made and every slab page it took.
 *
 * memcached's size classes (`stats items`, `stats slabs`, mg/me "cls"). Our slab classes are not
 * memcached's (finer steps, a smaller header), so memcached's are accounting buckets here:
 * class 1 holds 96 bytes,
 * each next class 1.25 times the previous (rounded up to 8), as long as it stays below the
 * largest chunk / 1.25; the last class is the largest chunk itself, min(512 KiB, max_item_bytes)
 * (memcached's slab_chunk_max: half its 1 MiB page). An item is counted in the first class that
 * holds the size memcached 1.6.18 gives it (cache_mc_item_size: its 48-byte header, the CAS, key
 * and NUL, value and CRLF, the client flags when not 0); larger items, which memcached chains
 * from chunks of the largest class, count in the largest class. The classes are as memcached
 * 1.6.18 builds them with -n 48 -f 1.25 (96, 120, 152, ... 394840, 524288 for 1 MiB items: 39
 * classes), so an item lands in the class memcached would put it in. Per class
 * and shard, under the shard's lock, the store counts items, their bytes, evictions, expiries and
 * hits (cache_class_stats); cache_store_class_stats sums them.
 *
 * Threads. Every function is thread-safe except cache_store_free, which must come after all
 * other calls and after every reference was released. Failures are results, never errno.
 */
#ifndef SF_CACHE_STORE_H
#define SF_CACHE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CACHE_KEY_MAX            250
#define CACHE_CTYPE_MAX          127
#define CACHE_DEFAULT_SHARDS     64
#define CACHE_MAX_SHARDS         4096
#define CACHE_DEFAULT_ITEM_BYTES (1024u * 1024u)

typedef enum { CACHE_LOCK_MUTEX = 0, CACHE_LOCK_SPIN } cache_lock_kind;

typedef enum {
    CACHE_OK = 0, /* cache_item_new, cache_incr: done */
    CACHE_STORED,
    CACHE_NOT_STORED, /* ADD on a present key, REPLACE/APPEND/PREPEND on an absent one */
    CACHE_EXISTS,     /* cas mismatch (CAS mode, delete with cas) */
    CACHE_NOT_FOUND,  /* CAS / delete / touch / incr on an absent key */
    CACHE_DELETED,
    CACHE_TOUCHED,
    CACHE_TOO_LARGE,   /* value > max_item_bytes or item > max_memory_bytes */
    CACHE_NO_MEMORY,   /* nothing evictable left, or malloc failed */
    CACHE_NOT_NUMERIC, /* incr/decr on a value that is not a decimal 64-bit unsigned */
    CACHE_BAD_KEY,     /* cache_item_new: key fails cache_key_valid */
    CACHE_BAD_ARG,     /* content type too long, unknown mode */
} cache_result;

typedef enum {
    CACHE_MODE_SET = 0,
    CACHE_MODE_ADD,
    CACHE_MODE_REPLACE,
    CACHE_MODE_APPEND,
    CACHE_MODE_PREPEND,
    CACHE_MODE_CAS,
    /* memcached's ms with I and a CAS: as CAS, but a cas_in older (smaller, not 0) than the
     * item's still stores, marked stale, keeping the old item's expiry and token mark */
    CACHE_MODE_CAS_STALE,
} cache_mode;

typedef struct cache_store_config {
    uint64_t max_memory_bytes; /* > 0 */
    uint32_t max_item_bytes;   /* largest value; 0 = CACHE_DEFAULT_ITEM_BYTES */
    uint32_t shards;           /* power of two <= CACHE_MAX_SHARDS; 0 = CACHE_DEFAULT_SHARDS */
    cache_lock_kind lock;
    uint64_t seed;     /* hash seed; 0 = derived from the clock and ASLR */
    bool no_evictions; /* when full, refuse (NO_MEMORY) instead of evicting (memcached -M) */
    bool flat_lru;     /* one LRU per shard instead of HOT/WARM/COLD (memcached without
                        * lru_segmented: -o no_lru_maintainer, no_modern) */
    uint32_t temporary_ttl_s; /* items stored with a TTL <= this go to TEMP, never evicted
                               * (memcached's -o temporary_ttl with temp_lru); 0 = off */
} cache_store_config;

/* Per-shard counters (kept under the shard's lock), summed by cache_store_stats. The X-macro
 * lets exporters (metrics, memcached "stats") iterate names without repeating them. */
/* clang-format off */
#define CACHE_STATS_COUNTERS(X)                                                                   \
    X(get_hits) X(get_misses) X(sets) X(cas_hits) X(cas_badval) X(cas_misses)                     \
    X(delete_hits) X(delete_misses) X(touch_hits) X(touch_misses)                                 \
    X(incr_hits) X(incr_misses) X(decr_hits) X(decr_misses)                                       \
    X(evictions) X(expired_lazy) X(expired_swept) X(flushed) X(resizes) X(curr_items) X(bytes)    \
    X(walks_cut_short) X(lru_juggles)
/* clang-format on */

typedef struct cache_stats {
#define CACHE_STATS_FIELD(name) uint64_t name;
    CACHE_STATS_COUNTERS(CACHE_STATS_FIELD)
#undef CACHE_STATS_FIELD
    /* `sets` counts STORED results; `bytes` is the size of linked items; `flushed` counts
     * items unlinked because of a flush (lazily or by the sweep). */
    uint64_t mem_used;   /* reserved bytes: linked items + unlinked ones still referenced */
    uint64_t mem_limit;  /* max_memory_bytes */
    uint64_t mallocs;    /* every malloc/calloc the store made (items, bucket arrays) and every
                          * slab page its classes took from the page pool */
    uint64_t free_bytes; /* idle bytes in the free lists */
    uint64_t slab_page_bytes;       /* slab pages holding a class's chunks */
    uint64_t slab_free_chunk_bytes; /* chunks freed back to those pages (fragmentation) */
} cache_stats;

/* Per size class (memcached's slab class ids 1..CACHE_CLASSES_MAX - 1; 0 unused), summed over
 * the shards by cache_store_class_stats. items/bytes are what is linked now; the rest count events:
 * evicted (evicted_nonzero: of those, items with an expiry; evicted_unfetched: never read),
 * expired_unfetched (expired items unlinked that were never read), reclaimed (dead items,
 * expired or flushed, unlinked without a read meeting them: by the sweep, or by a write of the
 * same key taking their place), and the hits of each command on items of the
 * class (sets: items stored in it). */
#define CACHE_CLASSES_MAX 64 /* memcached's MAX_NUMBER_OF_SLAB_CLASSES */
/* clang-format off */
#define CACHE_CLASS_COUNTERS(X)                                                                   \
    X(items) X(bytes) X(evicted) X(evicted_nonzero) X(evicted_unfetched) X(expired_unfetched)     \
    X(reclaimed) X(crawler_reclaimed) X(get_hits) X(sets) X(delete_hits) X(incr_hits) X(decr_hits) X(cas_hits)         \
    X(cas_badval) X(touch_hits) X(evicted_active) X(moves_to_cold) X(moves_to_warm)              \
    X(moves_within_lru) X(hits_to_hot) X(hits_to_warm) X(hits_to_cold) X(hits_to_temp)
/* Items linked now in each LRU segment (adjacent, in segment order: the store indexes them). */
#define CACHE_CLASS_GAUGES(X) X(number_hot) X(number_warm) X(number_cold) X(number_temp)
/* clang-format on */
typedef struct cache_class_stats {
#define CACHE_CLASS_FIELD(name) uint64_t name;
    CACHE_CLASS_COUNTERS(CACHE_CLASS_FIELD)
    CACHE_CLASS_GAUGES(CACHE_CLASS_FIELD)
#undef CACHE_CLASS_FIELD
    /* seconds since the last access of the oldest HOT, WARM and COLD tail of the class (the
     * tails of the shards' lists that are items of this class; memcached's age_hot, age_warm,
     * age): filled by cache_store_class_stats */
    uint32_t age_hot, age_warm, age;
} cache_class_stats;

typedef struct cache_store cache_store;
typedef struct cache_item cache_item;

const char *cache_result_name(int r); /* "STORED", "NOT_FOUND", ... */

/* NULL with a reason in err on a bad configuration or when out of memory. */
cache_store *cache_store_new(const cache_store_config *c, char *err, size_t errlen);
void cache_store_free(cache_store *s);

/* 1..250 bytes, each in 0x21..0x7e (no spaces or control characters). */
bool cache_key_valid(const char *key, size_t klen);

/* ---- reading ----------------------------------------------------------------------------- */

/* A referenced item, or NULL on a miss (expired and flushed items met are unlinked). The item is
 * marked as hit (fetched, then active: see Segments). Release with cache_item_release. */
cache_item *cache_get(cache_store *s, const char *key, size_t klen, uint64_t now_ms);
void cache_item_release(cache_item *it); /* NULL is fine */

/* cache_get for memcached's meta commands: the item's history before this call (`out`) and
 * the recache-token decision, all under the shard's lock so two clients never both win.
 *   no_bump      memcached's u: no second-chance mark, no fetched, no access time
 *   set_expiry   T: the item's new expiry (expiry_ms), applied before the reference is
 *                returned (the caller shows the old one from out->expiry_ms where it must)
 *   recache_ms   R: win the token if no token went out yet and the expiry (the new one when
 *                recache_sees_new, else the old) is set and, rounded up to the second, before
 *                recache_ms; 0 = no R
 *   count        which counters a hit or miss bumps (get_*, touch_*, or none: memcached's me)
 *   no_token     decide nothing about the token (memcached: an error came first; me)
 * A stale item whose token has not gone out is always won. Winning marks the token sent. */
typedef enum { CACHE_COUNT_GET = 0, CACHE_COUNT_TOUCH, CACHE_COUNT_NONE } cache_count;
typedef struct cache_get_opts {
    bool no_bump, set_expiry, recache_sees_new, no_token;
    cache_count count;
    uint64_t expiry_ms, recache_ms;
} cache_get_opts;
typedef struct cache_item_meta {
    uint64_t expiry_ms;      /* before this call (0 = never) */
    uint32_t idle_s;         /* seconds since the last access, before this call */
    bool fetched;            /* hit (with a bump) before this call: memcached's h */
    bool token_sent, stale;  /* before this call: memcached's Z and X */
    bool won;                /* this call won the recache token: memcached's W */
} cache_item_meta;
cache_item *cache_get_meta(cache_store *s, const char *key, size_t klen, const cache_get_opts *o,
                           cache_item_meta *out, uint64_t now_ms);

const char *cache_item_key(const cache_item *it);
size_t cache_item_klen(const cache_item *it);
const char *cache_item_value(const cache_item *it);
size_t cache_item_vlen(const cache_item *it);
uint32_t cache_item_flags(const cache_item *it);
uint64_t cache_item_cas(const cache_item *it);                   /* 0 before it is stored */
uint64_t cache_item_expiry(const cache_item *it);                /* ms since the epoch, 0 = never */
const char *cache_item_ctype(const cache_item *it, size_t *len); /* len 0 = none */
size_t cache_item_size(const cache_item *it);                    /* bytes it is accounted for */
bool cache_item_key_binary(const cache_item *it); /* made with CACHE_ITEM_KEY_BINARY */

/* ---- writing ----------------------------------------------------------------------------- */

/* An unstored item with room for vlen value bytes, flags, expiry and content type set; NULL with
 * *err = CACHE_BAD_KEY, CACHE_BAD_ARG, CACHE_TOO_LARGE or CACHE_NO_MEMORY. */
cache_item *cache_item_new(cache_store *s, const char *key, size_t klen, size_t vlen,
                           uint32_t flags, uint64_t expiry_ms, const char *ctype, size_t ctype_len,
                           int *err);
/* cache_item_new with marks (or-ed):
 *   CACHE_ITEM_KEY_BINARY  the key came base64-encoded (memcached's meta b): any bytes, 1..250
 *                          of them, and memcached's k answers it encoded again
 *   CACHE_ITEM_KEY_ANY     any bytes too, but echoed as they are (memcached's mg N and ma N
 *                          create items so, even from a base64 key)
 *   CACHE_ITEM_TOKEN_SENT  stored with its recache token already out (meta N: the creator won)
 * Keys are compared as bytes: a binary key "foo" is the text key "foo". */
#define CACHE_ITEM_KEY_BINARY 1u
#define CACHE_ITEM_TOKEN_SENT 2u
#define CACHE_ITEM_KEY_ANY    4u
cache_item *cache_item_new_ex(cache_store *s, const char *key, size_t klen, size_t vlen,
                              uint32_t flags, uint64_t expiry_ms, const char *ctype,
                              size_t ctype_len, unsigned marks, int *err);
/* What cache_item_new_ex would refuse for these arguments, without allocating: CACHE_OK, or
 * CACHE_BAD_KEY, CACHE_BAD_ARG or CACHE_TOO_LARGE (never CACHE_NO_MEMORY: that is found only by
 * allocating). For a value received over several reads, checked when its command is read and
 * allocated once it is in (proto/memcache.c). */
int cache_item_check(const cache_store *s, const char *key, size_t klen, size_t vlen,
                     uint32_t flags, const char *ctype, size_t ctype_len, unsigned marks);
/* The value buffer to fill, only between cache_item_new and cache_store_item. */
char *cache_item_value_mut(cache_item *it);

/* Stores `it` under `mode` (table at the top). Takes the caller's reference in every case.
 * cas_in is used by CACHE_MODE_CAS only; *cas_out (if not NULL) gets the new CAS on STORED. */
int cache_store_item(cache_store *s, cache_item *it, cache_mode mode, uint64_t cas_in,
                     uint64_t *cas_out, uint64_t now_ms);
/* The same, telling whether a live item was replaced (for HTTP's 201 Created vs 204). */
int cache_store_item_ex(cache_store *s, cache_item *it, cache_mode mode, uint64_t cas_in,
                        uint64_t *cas_out, bool *replaced, uint64_t now_ms);

/* DELETED; NOT_FOUND; EXISTS if cas_in != 0 and differs from the item's. */
int cache_delete(cache_store *s, const char *key, size_t klen, uint64_t cas_in, uint64_t now_ms);

/* memcached's md I: marks the item stale, clears its token mark, gives it a new CAS and, with
 * set_expiry, a new expiry; it stays readable. DELETED (done), NOT_FOUND; EXISTS if cas_in != 0
 * and differs from the item's. May need room for a copy while readers hold the item:
 * NO_MEMORY then. */
int cache_invalidate(cache_store *s, const char *key, size_t klen, uint64_t cas_in,
                     bool set_expiry, uint64_t expiry_ms, uint64_t now_ms);

/* Sets a new expiry (0 = never) and moves the item to the head of HOT (TEMP items stay in
 * TEMP): TOUCHED or NOT_FOUND. The CAS is unchanged, as in memcached. */
int cache_touch(cache_store *s, const char *key, size_t klen, uint64_t expiry_ms, uint64_t now_ms);

/* memcached incr/decr: the value must be 1..20 decimal digits <= 2^64-1 (else NOT_NUMERIC);
 * incr wraps modulo 2^64, decr stops at 0. The result is stored as decimal with the old flags
 * and expiry, no content type, and a new CAS. CACHE_OK with the new value in *out, NOT_FOUND,
 * NOT_NUMERIC, NO_MEMORY. */
int cache_incr(cache_store *s, const char *key, size_t klen, uint64_t delta, bool decr,
               uint64_t *out, uint64_t now_ms);

/* Invalidates everything stored before at_ms, from at_ms on (semantics at the top); at_ms <=
 * now_ms takes effect at once, in every shard, before the call returns. A flush already due at
 * now_ms is applied first, never replaced; a pending one is (at_ms = 0 cancels it). */
void cache_flush_all(cache_store *s, uint64_t at_ms, uint64_t now_ms);

/* Snapshot loading: stores `it` like CACHE_MODE_SET but keeps the given CAS (> 0) instead of
 * issuing one; later CAS values of its shard are larger. Then, once every item is back,
 * cache_store_raise_cas(max restored CAS) makes every CAS issued afterwards larger than all of
 * them, so CAS stay unique across the restart. */
int cache_store_restore(cache_store *s, cache_item *it, uint64_t cas, uint64_t now_ms);
#define CACHE_CAS_RESTORE_MAX (UINT64_C(1) << 62) /* larger restored CAS values are replaced */
void cache_store_raise_cas(cache_store *s, uint64_t cas);

/* ---- upkeep and introspection -------------------------------------------------------------- */

/* Examines up to `budget` buckets from *cursor on (shard after shard; start with 0 and keep
 * passing the same cursor) and unlinks expired and flushed items. Returns how many it unlinked. */
size_t cache_store_sweep(cache_store *s, unsigned *cursor, size_t budget, uint64_t now_ms);

/* A walk in bounded slices, for a caller that must not hold the thread for long (memcached's
 * "lru_crawler metadump" on an event loop). From *cursor (start with 0), takes references to up
 * to `max` live items (not expired, not flushed) into out[] bucket by bucket, unlinking the dead
 * ones it meets, and returns how many; each call looks at a bounded number of buckets, so it may
 * return 0 before the end. *cursor == CACHE_SCAN_DONE once every shard was walked. The caller
 * releases each item (cache_item_release). No lock is held between calls: items stored or
 * deleted meanwhile may or may not be seen, and one moved by a table resize in progress may be
 * seen twice or missed (the resize moves a few buckets per operation on the shard). */
#define CACHE_SCAN_DONE UINT64_MAX
size_t cache_store_scan(cache_store *s, uint64_t *cursor, cache_item **out, size_t max,
                        uint64_t now_ms);
void cache_store_stats(cache_store *s, cache_stats *out);
/* Calls fn for every live item (not expired, not flushed), shard by shard, in LRU order from
 * the least recent (TEMP, COLD, WARM, HOT, each from its tail: reloading them in order restores
 * recency). Items are referenced under
 * the shard's lock 256 at a time (tens of microseconds per hold, whatever the shard's size) and
 * fn runs without any shard lock held: it may call into the store, and slow work in fn stalls nobody.
 * Every item present in a shard when the walk reaches it is visited exactly once (unless
 * it is deleted, replaced or expires first); items stored after that are not. A non-zero
 * return of fn stops the walk and is returned. Walks are serialised (one at a time per store):
 * fn must not start another one. */
int cache_store_foreach(cache_store *s, uint64_t now_ms, int (*fn)(const cache_item *, void *),
                        void *arg);

/* memcached's size classes (the mapping at the top). cache_mc_item_size: the size memcached
 * 1.6.18 gives an item (ITEM_ntotal); cache_store_size_class: the class (1..
 * cache_store_size_classes) an item of memcached size `bytes` is counted in; cache_item_class:
 * an item's; cache_store_class_chunk: a class's chunk size (0 outside the classes). */
size_t cache_mc_item_size(size_t klen, size_t vlen, uint32_t flags);
unsigned cache_store_size_class(const cache_store *s, size_t bytes);
unsigned cache_item_class(const cache_item *it);
unsigned cache_store_size_classes(const cache_store *s);
uint32_t cache_store_class_chunk(const cache_store *s, unsigned cls);
/* out[0..CACHE_CLASSES_MAX): the counters of every class, summed over the shards. */
void cache_store_class_stats(cache_store *s, cache_class_stats *out, uint64_t now_ms);
/* Whether the store keeps HOT/WARM/COLD segments (not flat_lru), and its temporary TTL. */
bool cache_store_segmented(const cache_store *s);
uint32_t cache_store_temporary_ttl(const cache_store *s);
/* Whether a full store evicts (false: no_evictions, memcached -M). */
bool cache_store_evicts(const cache_store *s);
/* The segmented LRU's shares and age factors: memcached's defaults (hot_lru_pct, warm_lru_pct,
 * hot_max_factor 0.2, warm_max_factor 2.0), fixed. */
#define CACHE_HOT_LRU_PCT          20
#define CACHE_WARM_LRU_PCT         40
#define CACHE_HOT_MAX_FACTOR_DIV   5 /* hot_max_factor = 1 / 5 */
#define CACHE_WARM_MAX_FACTOR_MULT 2
/* `stats cachedump`: calls fn for live items of class cls (cache_store_size_class), most
 * recently used first, shard after shard, under the shard's lock (fn must be quick and must not
 * call into the store), until fn returns non-zero. A debugging aid with bounded cost: it looks at
 * most at the `scan` most recent items of each shard. */
void cache_store_class_dump(cache_store *s, unsigned cls, size_t scan, uint64_t now_ms,
                            int (*fn)(const cache_item *, void *), void *arg);
/* The largest value accepted (max_item_bytes). */
uint32_t cache_store_max_item(const cache_store *s);

/* Eviction notices (memcached's "watch evictions"). Once set, fn(arg, e) is called for every
 * item evicted, on the evicting thread, after the shard's lock is released, with a copy of what
 * a log line needs (e->key is valid for the call only). fn NULL (the default) turns it off; arg
 * must stay valid while any thread may still be evicting. Costs nothing while off. */
typedef struct cache_evicted {
    const char *key;
    size_t klen;
    uint32_t vlen, flags;
    uint64_t expiry_ms; /* 0 = never */
    uint32_t atime_s;   /* the second of its last access (now_ms / 1000, modulo 2^30) */
    bool fetched;       /* hit since it was stored */
} cache_evicted;
typedef void (*cache_evict_fn)(void *arg, const cache_evicted *e);
void cache_store_set_evict_hook(cache_store *s, cache_evict_fn fn, void *arg);

/* Changes max_memory_bytes at run time (memcached's cache_memlimit). Raising it takes effect at
 * once; lowering it evicts nothing by itself: the next stores evict down to the new limit as
 * they reserve memory (memcached alike: its pages go back as the slab mover frees them). */
void cache_store_set_memory_limit(cache_store *s, uint64_t bytes);

/* Bytes an item of these lengths and client flags 0 is accounted for (its size class; nonzero
 * flags take 4 bytes more). */
size_t cache_store_item_size(const cache_store *s, size_t klen, size_t ctype_len, size_t vlen);
unsigned cache_store_shard_of(const cache_store *s, const char *key, size_t klen);
unsigned cache_store_shards(const cache_store *s);

typedef struct cache_table_info {
    size_t items, buckets;
    size_t old_buckets; /* 0 unless a resize is in progress */
    size_t migrated;    /* old buckets moved so far */
} cache_table_info;
void cache_store_table_info(cache_store *s, unsigned shard, cache_table_info *out);

#endif
