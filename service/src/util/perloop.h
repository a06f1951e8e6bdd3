/* Per-loop state: an array of one slot per event loop, each slot starting on a cache line of its
 * own.
 *
 * A layer that keeps something per loop (the HTTP server's head pool, scratch and route metrics,
 * the memcached counters, the API's counters, one generator per loop) puts it in slot i, written
 * by loop i only and reached with the loop's index (conn_loop(c)->index,
 * http_request.loop_index). Slots never share a line, so one loop's counter updates never pull
 * another loop's line across cores (false sharing); nothing else is needed for that, no padding
 * in the slot types.
 *
 * perloop_init and perloop_free: the main thread, before the loops start and after they are
 * joined. perloop_at: any thread. Slot types may ask for at most PERLOOP_ALIGN alignment.
 */
#ifndef SF_UTIL_PERLOOP_H
#define SF_UTIL_PERLOOP_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define PERLOOP_ALIGN 64 /* a cache line */

typedef struct perloop {
    char *base;
    size_t stride; /* a slot's size, rounded up to whole cache lines */
    unsigned n;
} perloop;

/* n zeroed slots of `size` bytes. Returns 0, or -1 when out of memory (p is then empty: at and
 * count must not be used, free may). */
static inline int perloop_init(perloop *p, unsigned n, size_t size)
{
    p->stride = (size + PERLOOP_ALIGN - 1) / PERLOOP_ALIGN * PERLOOP_ALIGN;
    if (p->stride == 0)
        p->stride = PERLOOP_ALIGN;
    size_t bytes = p->stride * (n ? n : 1);
    p->base = aligned_alloc(PERLOOP_ALIGN, bytes);
    p->n = p->base ? n : 0;
    if (!p->base)
        return -1;
    memset(p->base, 0, bytes);
    return 0;
}

/* Slot i (i < n). */
static inline void *perloop_at(const perloop *p, unsigned i)
{
    return p->base + (size_t)i * p->stride;
}

static inline unsigned perloop_count(const perloop *p)
{
    return p->n;
}

/* Frees the slots (not what they point to). An empty or zeroed perloop is fine. */
static inline void perloop_free(perloop *p)
{
    free(p->base);
    p->base = NULL;
    p->n = 0;
}

#endif
