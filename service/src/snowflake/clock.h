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
 * sf_clock_system() is thread-safe; fake clocks are for single-threaded tests unless noted.
 */
#ifndef SF_SNOWFLAKE_CLOCK_H
#define SF_SNOWFLAKE_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sf_clock sf_clock;
struct sf_clock {
    uint64_t (*now_ms)(sf_clock *self);
};

static inline uint64_t sf_clock_now(sf_clock *c)
{
    return c->now_ms(c);
}

/* The process-wide system clock (anchored on first call). */
sf_clock *sf_clock_system(void);
/* True when the system clock uses the TSC fast path (for diagnostics and benchmarks). */
bool sf_clock_system_uses_tsc(void);
/* The plain clock_gettime()-based reading, bypassing the TSC cache (tests compare the two). */
uint64_t sf_clock_system_now_slow(void);

/* A manual clock for tests: returns now; if step_every is non-zero, every step_every-th read
 * advances now by step_ms first, so code that spins waiting for time to pass terminates
 * without sleeping. Thread-safe (atomic). */
typedef struct sf_fake_clock {
    sf_clock base;
    _Atomic uint64_t now;
    _Atomic uint64_t reads;
    uint64_t step_every, step_ms;
} sf_fake_clock;

void sf_fake_clock_init(sf_fake_clock *c, uint64_t now_ms, uint64_t step_every, uint64_t step_ms);
void sf_fake_clock_set(sf_fake_clock *c, uint64_t now_ms);

#endif
