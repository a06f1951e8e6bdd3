/* Single-writer counters: statistics one thread updates and any thread reads.
 *
 * Every counter here has exactly one writer (the loop that owns it, a logger slot's thread), so
 * an update needs no read-modify-write instruction: a relaxed load, the arithmetic and a relaxed
 * store, which compile to plain moves on x86-64 and arm64 — no lock prefix, no cache line taken
 * from another core on the request path. Readers on other threads (a /metrics scrape, memcached
 * "stats", a sum over loops) load relaxed: they get a recent value, never a torn one, and no
 * ordering with other data. The _Atomic type is what makes those concurrent plain accesses
 * defined behaviour (and keeps ThreadSanitizer quiet); relaxed order is what keeps them cheap.
 *
 * Two writers on one counter would lose updates: such counters (the cache store's, a shared
 * generator's) use atomic_fetch_add instead.
 */
#ifndef SF_UTIL_COUNTER_H
#define SF_UTIL_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

/* The value, from any thread. */
static inline uint64_t counter_get(const _Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* The writer's update: += n. */
static inline void counter_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, counter_get(c) + n, memory_order_relaxed);
}

/* The writer's update: -= n (gauges, such as a pool's objects in use). */
static inline void counter_sub(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, counter_get(c) - n, memory_order_relaxed);
}

/* The writer's update: = v. */
static inline void counter_set(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, v, memory_order_relaxed);
}

#endif
