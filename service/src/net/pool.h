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

#include "util/counter.h"

typedef struct pool_item {
    struct pool_item *next;
} pool_item;

/* Counters are written by the owning loop only and read by /metrics from any loop
 * (util/counter.h). */
typedef struct pool {
    pool_item *free_list;
    size_t obj_size;
    size_t max_free;
    _Atomic uint64_t nfree, in_use;
    _Atomic uint64_t mallocs;
} pool;

typedef struct pool_stats {
    uint64_t in_use, idle, mallocs;
} pool_stats;

static inline void pool_init(pool *p, size_t obj_size, size_t max_free)
{
    p->free_list = NULL;
    p->obj_size = obj_size < sizeof(pool_item) ? sizeof(pool_item) : obj_size;
    p->max_free = max_free;
    atomic_init(&p->nfree, 0);
    atomic_init(&p->in_use, 0);
    atomic_init(&p->mallocs, 0);
}

/* An object of obj_size bytes (uninitialised), or NULL if malloc failed. */
static inline void *pool_get(pool *p)
{
    pool_item *it = p->free_list;
    if (it) {
        p->free_list = it->next;
        counter_sub(&p->nfree, 1);
    } else {
        it = malloc(p->obj_size);
        if (!it)
            return NULL;
        counter_add(&p->mallocs, 1);
    }
    counter_add(&p->in_use, 1);
    return it;
}

static inline void pool_put(pool *p, void *obj)
{
    counter_sub(&p->in_use, 1);
    if (counter_get(&p->nfree) >= p->max_free) {
        free(obj);
        return;
    }
    pool_item *it = obj;
    it->next = p->free_list;
    p->free_list = it;
    counter_add(&p->nfree, 1);
}

/* Frees the idle objects (at loop exit; objects in use are the owner's business). */
static inline void pool_drain(pool *p)
{
    while (p->free_list) {
        pool_item *it = p->free_list;
        p->free_list = it->next;
        free(it);
    }
    counter_set(&p->nfree, 0);
}

/* Adds this pool's counters to *acc (any thread). */
static inline void pool_stats_add(const pool *p, pool_stats *acc)
{
    acc->in_use += counter_get(&p->in_use);
    acc->idle += counter_get(&p->nfree);
    acc->mallocs += counter_get(&p->mallocs);
}

#endif
