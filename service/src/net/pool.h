/* Fixed-size object pool: a free list in front of malloc, one per loop (not thread-safe).
 *
 * Objects come back to the free list when released, so a loop that has seen its peak load
 * serves requests without calling malloc. At most `max_free` objects are kept idle; beyond that
 * they are returned to malloc so a burst does not pin memory forever. `mallocs` counts every
 * malloc the pool made: in steady state it stops moving (tests and /metrics check that).
 */
#ifndef SF_NET_POOL_H
#define SF_NET_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct pool_item {
    struct pool_item *next;
} pool_item;

typedef struct pool {
    pool_item *free_list;
    size_t obj_size;
    size_t nfree, max_free;
    size_t in_use;
    uint64_t mallocs;
} pool;

static inline void pool_init(pool *p, size_t obj_size, size_t max_free)
{
    p->free_list = NULL;
    p->obj_size = obj_size < sizeof(pool_item) ? sizeof(pool_item) : obj_size;
    p->nfree = 0;
    p->max_free = max_free;
    p->in_use = 0;
    p->mallocs = 0;
}

/* An object of obj_size bytes (uninitialised), or NULL if malloc failed. */
static inline void *pool_get(pool *p)
{
    pool_item *it = p->free_list;
    if (it) {
        p->free_list = it->next;
        p->nfree--;
    } else {
        it = malloc(p->obj_size);
        if (!it)
            return NULL;
        p->mallocs++;
    }
    p->in_use++;
    return it;
}

static inline void pool_put(pool *p, void *obj)
{
    p->in_use--;
    if (p->nfree >= p->max_free) {
        free(obj);
        return;
    }
    pool_item *it = obj;
    it->next = p->free_list;
    p->free_list = it;
    p->nfree++;
}

/* Frees the idle objects (at loop exit; objects in use are the owner's business). */
static inline void pool_drain(pool *p)
{
    while (p->free_list) {
        pool_item *it = p->free_list;
        p->free_list = it->next;
        free(it);
    }
    p->nfree = 0;
}

#endif
