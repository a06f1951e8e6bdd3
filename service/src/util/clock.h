/* Time sources for the generator, in milliseconds since the Unix epoch.
 *
 * The system clock reads CLOCK_MONOTONIC anchored once to CLOCK_REALTIME at first use, so a step of
 * the wall clock while the process runs (NTP, an operator) cannot move it backwards; across
 * restarts the lease file (lease.h) guards against steps. Reading it is the generator's hot path:
 * where the kernel's clocksource is a constant, synchronised TSC, each thread caches the current
 * millisecond together with the TSC value before which that millisecond cannot have ended
 * (computed with a conservatively low TSC frequency), so most reads cost one RDTSC instead of a
 * clock_gettime(). Without such a TSC every read is a clock_gettime().
 *
 * A clock is an object with a read function so tests can inject a fake one (no sleeping).
 * clk_system() is thread-safe; fake clocks are for single-threaded tests unless noted.
 */
#ifndef SF_UTIL_CLOCK_H
#define SF_UTIL_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct clk_source clk_source;
struct clk_source {
    uint64_t (*now_ms)(clk_source *self);
};

static inline uint64_t clk_now(clk_source *c)
{
    return c->now_ms(c);
}

/* The process-wide system clock (anchored on first call). */
clk_source *clk_system(void);
/* True when the system clock uses the TSC fast path (for diagnostics and benchmarks). */
bool clk_system_uses_tsc(void);
/* The plain clock_gettime()-based reading, bypassing the TSC cache (tests compare the two). */
uint64_t clk_system_now_slow(void);

/* A manual clock for tests: returns now; if step_every is non-zero, every step_every-th read
 * advances now by step_ms first, so code that spins waiting for time to pass terminates
 * without sleeping. Thread-safe (atomic). */
typedef struct clk_fake {
    clk_source base;
    _Atomic uint64_t now;
    _Atomic uint64_t reads;
    uint64_t step_every, step_ms;
} clk_fake;

void clk_fake_init(clk_fake *c, uint64_t now_ms, uint64_t step_every, uint64_t step_ms);
void clk_fake_set(clk_fake *c, uint64_t now_ms);

#endif
