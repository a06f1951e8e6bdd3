/* A byte budget shared by threads: bytes taken against a limit and given back, never blocking.
 *
 * The daemon has one (server.max_inflight_bytes) for the bytes it holds for requests still being
 * received: HTTP request bodies being buffered (proto/http.c) and memcached values being read
 * into their item (proto/memcache.c), counted together across every loop. A taker that is
 * refused answers its protocol's "busy" error instead of growing; a taker gives back exactly
 * what it took when the request completes or its connection closes, on every path.
 *
 * Takers take the bytes they actually hold, as they arrive (never a length a client only
 * declared: a request that sends its head and nothing more holds nothing). Fair shares: the last
 * `reserve` bytes of the limit are kept for takers holding little (at most `floor` bytes each,
 * budget_set_share), so that a few large requests held half-sent cannot starve the small ones;
 * to shut out those, as many takers as reserve / floor must hold their floor at once.
 *
 * budget_take never lets `held` pass `limit` (a compare-and-swap loop, not add-then-undo), so
 * the gauge read by /metrics never shows more than the limit. Relaxed atomics: the counter
 * orders nothing else. The struct is padded to cache lines of its own: loops update it, and its
 * neighbours must not pay for that (false sharing).
 */
#ifndef SF_UTIL_BUDGET_H
#define SF_UTIL_BUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct byte_budget {
    char pad_before[64];
    _Atomic uint64_t held;     /* bytes taken and not given back */
    _Atomic uint64_t refusals; /* budget_take calls refused */
    uint64_t limit;            /* set once, before any thread takes */
    uint64_t floor, reserve;   /* budget_set_share; 0, 0: one pool for every taker */
    char pad_after[64];
} byte_budget;

/* limit > 0 bytes. Before any thread uses b. */
void budget_init(byte_budget *b, uint64_t limit);

/* Keeps the last `reserve` bytes of the limit (clamped to it) for takers whose own bytes stay
 * within `floor`. Before any thread uses b. */
void budget_set_share(byte_budget *b, uint64_t floor, uint64_t reserve);

/* Takes n bytes for a taker already holding `have` when held + n stays within its ceiling: the
 * limit while have + n <= floor, else limit - reserve. True; else false, counted as a refusal,
 * nothing taken. n == 0 always succeeds. */
bool budget_take_share(byte_budget *b, uint64_t have, uint64_t n);

/* budget_take_share for a taker holding nothing. */
static inline bool budget_take(byte_budget *b, uint64_t n)
{
    return budget_take_share(b, 0, n);
}

/* Whether a request that will hold n bytes could take them all now (a new taker: have 0),
 * taking nothing: an announced length is checked before its bytes are read, and refused at once
 * when it cannot fit (false, counted as a refusal). A snapshot: its bytes are taken as they
 * arrive, and may still be refused then. */
bool budget_admits(byte_budget *b, uint64_t n);

/* Gives back n bytes taken earlier (n == 0 does nothing). */
void budget_give(byte_budget *b, uint64_t n);

static inline uint64_t budget_held(const byte_budget *b)
{
    return atomic_load_explicit(&b->held, memory_order_relaxed);
}

static inline uint64_t budget_refusals(const byte_budget *b)
{
    return atomic_load_explicit(&b->refusals, memory_order_relaxed);
}

static inline uint64_t budget_limit(const byte_budget *b)
{
    return b->limit;
}

static inline uint64_t budget_reserve(const byte_budget *b)
{
    return b->reserve;
}

static inline uint64_t budget_floor(const byte_budget *b)
{
    return b->floor;
}

#endif
