/* Allocation classes and memcached's size classes (memcached: slabs.c): which allocation an item
 * gets (a slab chunk, a malloc'ed class, or its exact size), the per-shard free lists that spare
 * a steady workload both allocators, and memcached's classes, accounting buckets here (store.h:
 * "Allocation", "memcached's size classes"). The lookups on every request (class_of, mc_class,
 * item_alloc) are inline in store_int.h. */
#include "cache/store_int.h"

/* The store's allocation classes (store_int.h has the first ones): malloc'ed classes grow by
 * 1.25x from the largest slab chunk to LARGE_MAX. */
#define SLAB_CHUNK_MAX  ((SLAB_PAGE_BYTES - SLAB_PAGE_HEADER) / 8) /* 8184 */
#define MALLOC_STEP     16u
#define MALLOC_OVERHEAD 16u /* glibc's header + the store's address */
#define LARGE_MAX       (1024u * 1024u)
/* Free lists: at most FREE_PER_CLASS items per class and free_cap bytes per shard
 * (max(max_memory / 16 / shards, FREE_CAP_MIN)). */
#define FREE_PER_CLASS 64
#define FREE_CAP_MIN   (64u * 1024u)

/* Returns the number of classes, 0 if the slab classes do not come to SLAB_CLASSES. */
static unsigned build_classes(uint32_t *sz)
{
    unsigned n = 0;
    uint32_t c;
    for (c = SLAB_MIN; c <= SMALL_MAX; c += SLAB_STEP)
        sz[n++] = c;
    for (uint32_t pow2 = SMALL_MAX; pow2 < SLAB_CHUNK_MAX; pow2 *= 2)
        for (c = pow2 + pow2 / 16; c <= 2 * pow2 && c <= SLAB_CHUNK_MAX && n < MAX_CLASSES;
             c += pow2 / 16)
            sz[n++] = c;
    c = sz[n - 1];
    if (n != SLAB_CLASSES)
        return 0;
    while (c < LARGE_MAX) {
        c = (c + c / 4 + MALLOC_STEP - 1) & ~(MALLOC_STEP - 1);
        sz[n++] = (c < LARGE_MAX ? c : LARGE_MAX) - MALLOC_OVERHEAD;
    }
    return n < CLS_EXACT ? n : 0;
}

static size_t footprint(const cache_store *s, size_t raw)
{
    return class_bytes(s, class_of(s, raw), raw);
}

/* memcached's slab classes (store.h): slabs_init with chunk_size 48 + its 48-byte header,
 * factor 1.25, 8-byte alignment, the largest chunk last. */
static void build_mc_classes(cache_store *s)
{
    const double factor = 1.25;
    uint32_t chunk_max = s->max_item < 512u * 1024u ? s->max_item : 512u * 1024u;
    unsigned i = 0;
    uint32_t size = 96;
    while (++i < CACHE_CLASSES_MAX - 1 && size < chunk_max / factor) {
        size = (size + 7u) & ~7u;
        s->mc_chunk[i] = size;
        size = (uint32_t)(size * factor);
    }
    s->mc_chunk[i] = chunk_max;
    s->mc_nclasses = i;
}

/* The store's classes, its slab arena and memcached's classes (with the lookup table mc_class
 * reads), and the free lists' cap per shard. false: out of memory, or inconsistent classes. */
bool classes_init(cache_store *s, uint64_t max_memory, unsigned shards)
{
    s->nclasses = build_classes(s->class_size);
    s->slab = s->nclasses ? slab_arena_new(s->class_size, SLAB_CLASSES, s) : NULL;
    if (!s->slab)
        return false;
    build_mc_classes(s);
    for (unsigned k = 0; k <= MC_FAST_MAX / 8; k++) /* memcached's chunks are multiples of 8 */
        s->mc_class_by8[k] = (uint8_t)cache_store_size_class(s, k * 8);
    uint64_t cap = max_memory / 16 / shards;
    s->free_cap = cap > FREE_CAP_MIN ? (size_t)cap : FREE_CAP_MIN;
    return true;
}

unsigned cache_store_size_class(const cache_store *s, size_t bytes)
{
    return mc_class_of(s, bytes);
}

size_t cache_mc_item_size(size_t klen, size_t vlen, uint32_t flags)
{
    return mc_item_size(klen, vlen, flags);
}

unsigned cache_store_size_classes(const cache_store *s)
{
    return s->mc_nclasses;
}

uint32_t cache_store_class_chunk(const cache_store *s, unsigned cls)
{
    return cls >= 1 && cls <= s->mc_nclasses ? s->mc_chunk[cls] : 0;
}

uint32_t cache_store_max_item(const cache_store *s)
{
    return s->max_item;
}

unsigned cache_item_class(const cache_item *it)
{
    return mc_class(item_store(it), it);
}

/* Last reference gone (caller holds sh's lock): give back the reservation, keep the memory
 * for the next item of its class unless the free list is full. */
void item_free_locked(cache_shard *sh, cache_item *it)
{
    cache_store *s = sh->store;
    size_t bytes = item_bytes(s, it);
    if (it->accounted)
        atomic_fetch_sub_explicit(&s->used, bytes, memory_order_relaxed);
    unsigned cls = it->cls;
    if (cls != CLS_EXACT && sh->free_n[cls] < FREE_PER_CLASS &&
        sh->free_bytes + bytes <= s->free_cap) {
        it->h_next = sh->free_list[cls];
        sh->free_list[cls] = it;
        sh->free_n[cls]++;
        sh->free_bytes += bytes;
        return;
    }
    item_dealloc(it);
}

size_t cache_store_item_size(const cache_store *s, size_t klen, size_t ctype_len, size_t vlen)
{
    return footprint(s, raw_size(klen, ctype_len, vlen, 0));
}
