/* Slab allocator: contract in slab.h. */
#include "cache/slab.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/spinlock.h"

#define OS_PAGE 4096u

/* Under AddressSanitizer, chunks not handed out are poisoned, so a use after free of an item is
 * still caught as it was when items were malloc'ed. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

typedef struct slab_page slab_page;

/* The first SLAB_PAGE_HEADER bytes of every page. */
struct slab_page {
    slab_arena *arena;
    slab_page *prev, *next; /* the class's list of pages with a free chunk, or the pool */
    void *free;             /* chunks of this page freed since (a singly linked list) */
    uint32_t cls;
    uint32_t used;     /* chunks handed out and not freed */
    uint32_t carved;   /* chunks handed out at least once (the rest is untouched memory) */
    uint32_t capacity; /* chunks in the page */
    uint8_t listed;    /* on the class's list */
    uint8_t resident;  /* pooled with its memory (not given back to the kernel) */
};
_Static_assert(sizeof(slab_page) <= SLAB_PAGE_HEADER, "the page header fits its reserve");

typedef struct slab_class {
    alignas(64) _Atomic int lock;
    uint32_t size, capacity;
    slab_page *partial; /* pages with a free or uncarved chunk; allocation takes the first */
    uint64_t pages;     /* pages held */
    uint64_t used;      /* chunks handed out and not freed */
    uint64_t free;      /* chunks freed back to pages still held */
} slab_class;

struct slab_arena {
    void *owner;
    unsigned nclasses;
    slab_class *cls;
    alignas(64) _Atomic int pool_lock;
    slab_page *pool;
    uint64_t pooled, pooled_resident, taken;
    void **regions;
    size_t nregions, regions_cap;
};

static inline slab_page *page_of(const void *chunk)
{
    return (slab_page *)((uintptr_t)chunk & ~(uintptr_t)(SLAB_PAGE_BYTES - 1));
}

slab_arena *slab_arena_new(const uint32_t *chunk_sizes, unsigned nclasses, void *owner)
{
    if (nclasses == 0 || nclasses > SLAB_CLASSES_MAX)
        return NULL;
    for (unsigned i = 0; i < nclasses; i++)
        if (chunk_sizes[i] % 8 || chunk_sizes[i] < 16 ||
            chunk_sizes[i] > (SLAB_PAGE_BYTES - SLAB_PAGE_HEADER) / 8 ||
            (i && chunk_sizes[i] <= chunk_sizes[i - 1]))
            return NULL;
    slab_arena *a = aligned_alloc(64, sizeof *a);
    slab_class *cls = aligned_alloc(64, sizeof *cls * nclasses);
    if (!a || !cls) {
        free(a);
        free(cls);
        return NULL;
    }
    memset(a, 0, sizeof *a);
    memset(cls, 0, sizeof *cls * nclasses);
    for (unsigned i = 0; i < nclasses; i++) {
        atomic_init(&cls[i].lock, 0);
        cls[i].size = chunk_sizes[i];
        cls[i].capacity = (SLAB_PAGE_BYTES - SLAB_PAGE_HEADER) / chunk_sizes[i];
    }
    a->owner = owner;
    a->nclasses = nclasses;
    a->cls = cls;
    atomic_init(&a->pool_lock, 0);
    return a;
}

void slab_arena_free(slab_arena *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->nregions; i++) {
        /* The addresses may be mapped again for anything: no poison may outlive the region. */
        UNPOISON(a->regions[i], (size_t)SLAB_PAGE_BYTES * SLAB_REGION_PAGES);
        munmap(a->regions[i], (size_t)SLAB_PAGE_BYTES * SLAB_REGION_PAGES);
    }
    free(a->regions);
    free(a->cls);
    free(a);
}

/* Under the pool lock. */
static void pool_push(slab_arena *a, slab_page *p, bool resident)
{
    p->resident = resident;
    p->next = a->pool;
    a->pool = p;
    a->pooled++;
    a->pooled_resident += resident;
}

/* Under the pool lock: maps a region aligned to the page size (over-map by one page, trim) and
 * pools its pages. false if the kernel refuses. */
static bool map_region(slab_arena *a)
{
    if (a->nregions == a->regions_cap) {
        size_t cap = a->regions_cap ? a->regions_cap * 2 : 16;
        void **r = realloc(a->regions, cap * sizeof *r);
        if (!r)
            return false;
        a->regions = r;
        a->regions_cap = cap;
    }
    size_t bytes = (size_t)SLAB_PAGE_BYTES * SLAB_REGION_PAGES;
    char *raw = mmap(NULL, bytes + SLAB_PAGE_BYTES, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return false;
    char *base = (char *)(((uintptr_t)raw + SLAB_PAGE_BYTES - 1) & ~(uintptr_t)(SLAB_PAGE_BYTES - 1));
    if (base > raw)
        munmap(raw, (size_t)(base - raw));
    if (base + bytes < raw + bytes + SLAB_PAGE_BYTES)
        munmap(base + bytes, (size_t)(raw + bytes + SLAB_PAGE_BYTES - (base + bytes)));
    a->regions[a->nregions++] = base;
    for (unsigned i = SLAB_REGION_PAGES; i-- > 0;) {
        slab_page *p = (slab_page *)(base + (size_t)i * SLAB_PAGE_BYTES);
        p->arena = a;
        pool_push(a, p, false); /* untouched: the kernel has not backed it yet */
    }
    return true;
}

static slab_page *pool_take(slab_arena *a)
{
    spin_lock(&a->pool_lock);
    slab_page *p = a->pool;
    if (!p && map_region(a))
        p = a->pool;
    if (p) {
        a->pool = p->next;
        a->pooled--;
        a->pooled_resident -= p->resident;
        a->taken++;
    }
    spin_unlock(&a->pool_lock);
    return p;
}

static void pool_put(slab_arena *a, slab_page *p)
{
    spin_lock(&a->pool_lock);
    bool keep = a->pooled_resident < SLAB_POOL_RESIDENT;
    if (keep)
        pool_push(a, p, true);
    spin_unlock(&a->pool_lock);
    if (keep)
        return;
    /* Before the page is pooled (once it is, another thread may take it and carve it); the
     * system call outside the lock. */
    madvise((char *)p + OS_PAGE, SLAB_PAGE_BYTES - OS_PAGE, MADV_DONTNEED);
    spin_lock(&a->pool_lock);
    pool_push(a, p, false);
    spin_unlock(&a->pool_lock);
}

/* Under the class's lock. */
static void list_push(slab_class *c, slab_page *p)
{
    p->prev = NULL;
    p->next = c->partial;
    if (c->partial)
        c->partial->prev = p;
    c->partial = p;
    p->listed = 1;
}

static void list_remove(slab_class *c, slab_page *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        c->partial = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->listed = 0;
}

void *slab_alloc(slab_arena *a, unsigned cls)
{
    slab_class *c = &a->cls[cls];
    spin_lock(&c->lock);
    slab_page *p = c->partial;
    if (!p) {
        spin_unlock(&c->lock);
        p = pool_take(a);
        if (!p)
            return NULL;
        p->cls = cls;
        p->used = p->carved = 0;
        p->capacity = c->capacity;
        p->free = NULL;
        POISON((char *)p + SLAB_PAGE_HEADER, SLAB_PAGE_BYTES - SLAB_PAGE_HEADER);
        spin_lock(&c->lock);
        c->pages++;
        list_push(c, p);
    }
    void *chunk;
    if (p->free) {
        chunk = p->free;
        UNPOISON(chunk, c->size);
        memcpy(&p->free, chunk, sizeof p->free);
        c->free--;
    } else {
        chunk = (char *)p + SLAB_PAGE_HEADER + (size_t)p->carved * c->size;
        p->carved++;
        UNPOISON(chunk, c->size);
    }
    p->used++;
    c->used++;
    if (p->used == p->capacity)
        list_remove(c, p);
    spin_unlock(&c->lock);
    return chunk;
}

void slab_free(void *chunk)
{
    slab_page *p = page_of(chunk);
    slab_arena *a = p->arena;
    slab_class *c = &a->cls[p->cls];
    spin_lock(&c->lock);
    memcpy(chunk, &p->free, sizeof p->free);
    POISON(chunk, c->size);
    p->free = chunk;
    p->used--;
    c->used--;
    c->free++;
    if (!p->listed)
        list_push(c, p);
    /* An empty page goes back to the pool unless it is the class's only one with room. */
    bool release = p->used == 0 && (p->prev || p->next);
    if (release) {
        list_remove(c, p);
        c->pages--;
        c->free -= p->carved;
    }
    spin_unlock(&c->lock);
    if (release)
        pool_put(a, p);
}

void *slab_owner(const void *chunk)
{
    return page_of(chunk)->arena->owner;
}

unsigned slab_class_of(const void *chunk)
{
    return page_of(chunk)->cls;
}

void slab_get_stats(slab_arena *a, slab_stats *out)
{
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < a->nclasses; i++) {
        slab_class *c = &a->cls[i];
        spin_lock(&c->lock);
        out->pages_in_use += c->pages;
        out->chunk_bytes += c->used * c->size;
        out->free_chunk_bytes += c->free * c->size;
        spin_unlock(&c->lock);
    }
    spin_lock(&a->pool_lock);
    out->regions = a->nregions;
    out->pages_taken = a->taken;
    out->pages_pooled = a->pooled;
    spin_unlock(&a->pool_lock);
}
