/* Slab allocator for the cache's small items: chunks of one fixed size per class, carved from
 * 64 KiB pages aligned to 64 KiB, so a chunk finds its page, and the page its arena and class,
 * by masking the chunk's address. No per-chunk header: glibc's malloc adds 8 bytes to every
 * chunk and rounds it to 16, 4-6 % of a 200-byte item.
 *
 * Pages come from 2 MiB regions mapped on demand and never unmapped before slab_arena_free. A
 * page whose chunks are all free goes back to the arena's page pool, for any class (each class
 * keeps at most one empty page, so an alloc/free pair at a page boundary does not thrash); beyond
 * SLAB_POOL_RESIDENT pooled pages, a page's memory is returned to the kernel (MADV_DONTNEED, all
 * but the page's first 4 KiB). What a workload that shifts between sizes can leave behind is free
 * chunks in pages that still hold a live chunk: slab_stats counts them (free_chunk_bytes).
 *
 * Threads: slab_alloc and slab_free may be called from any thread; one spinlock per class and one
 * for the page pool, held for O(1) work (the pool's also across the mmap of a new region).
 * Chunks are 8-byte aligned. Failures are NULL, never errno. */
#ifndef SF_CACHE_SLAB_H
#define SF_CACHE_SLAB_H

#include <stddef.h>
#include <stdint.h>

#define SLAB_PAGE_BYTES    (64u * 1024u)
#define SLAB_PAGE_HEADER   64u /* at the start of every page */
#define SLAB_REGION_PAGES  32u /* pages per mapping: 2 MiB */
#define SLAB_POOL_RESIDENT 16u /* pooled pages kept resident (1 MiB) */
#define SLAB_CLASSES_MAX   192u

typedef struct slab_arena slab_arena;

typedef struct slab_stats {
    uint64_t regions;          /* mappings made */
    uint64_t pages_taken;      /* pages a class took from the pool */
    uint64_t pages_in_use;     /* pages holding a class's chunks (live, free or not yet carved) */
    uint64_t pages_pooled;     /* pages in the pool */
    uint64_t chunk_bytes;      /* bytes of chunks handed out and not freed */
    uint64_t free_chunk_bytes; /* bytes of chunks freed back to pages still in use */
} slab_stats;

/* chunk_sizes[0..nclasses): increasing multiples of 8, each <= (SLAB_PAGE_BYTES -
 * SLAB_PAGE_HEADER) / 8 (at least 8 chunks a page). owner is what slab_owner returns. NULL if
 * the sizes are invalid or memory is short. */
slab_arena *slab_arena_new(const uint32_t *chunk_sizes, unsigned nclasses, void *owner);
/* Every chunk must have been freed or be abandoned: the regions are unmapped. */
void slab_arena_free(slab_arena *a);

void *slab_alloc(slab_arena *a, unsigned cls); /* NULL: no memory could be mapped */
void slab_free(void *chunk);
void *slab_owner(const void *chunk);
unsigned slab_class_of(const void *chunk);
void slab_get_stats(slab_arena *a, slab_stats *out);

#endif
