#include "util/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define SF_HAVE_RDTSC 1
#endif

/* ---- system clock ------------------------------------------------------------------------- */

static struct {
    pthread_once_t once;
    int64_t mono_to_unix_ns; /* add to CLOCK_MONOTONIC to get anchored Unix time */
    _Atomic bool use_tsc;
    uint64_t tsc_per_ms_low; /* TSC ticks per ms, rounded down 1%: deadlines come early */
} sys = {.once = PTHREAD_ONCE_INIT};

static uint64_t read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t anchored_ns(void)
{
    return (uint64_t)((int64_t)read_ns(CLOCK_MONOTONIC) + sys.mono_to_unix_ns);
}

uint64_t clk_system_now_slow(void)
{
    return anchored_ns() / 1000000u;
}

#ifdef SF_HAVE_RDTSC
/* The TSC is only trusted where the kernel trusts it: clocksource "tsc" (the kernel verified it
 * is synchronised across CPUs) and a rate that neither changes nor stops. */
static bool tsc_trustworthy(void)
{
    char src[32] = "";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (!f)
        return false;
    bool ok = fgets(src, sizeof src, f) && strncmp(src, "tsc", 3) == 0;
    fclose(f);
    if (!ok)
        return false;
    f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return false;
    char line[4096];
    bool constant = false, nonstop = false;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) == 0) {
            constant = strstr(line, " constant_tsc") != NULL;
            nonstop = strstr(line, " nonstop_tsc") != NULL;
            break;
        }
    }
    fclose(f);
    return constant && nonstop;
}

/* One TSC reading bracketed by two clock readings; the narrower the bracket, the better we
 * know which nanosecond the TSC value belongs to. */
typedef struct tsc_sample {
    uint64_t tsc, ns, width;
} tsc_sample;

static tsc_sample best_sample(void)
{
    tsc_sample best = {.width = UINT64_MAX};
    for (int i = 0; i < 16; i++) {
        uint64_t n0 = read_ns(CLOCK_MONOTONIC);
        uint64_t t = __rdtsc();
        uint64_t n1 = read_ns(CLOCK_MONOTONIC);
        if (n1 - n0 < best.width)
            best = (tsc_sample){.tsc = t, .ns = n0 + (n1 - n0) / 2, .width = n1 - n0};
    }
    return best;
}

/* TSC ticks per ms, lowered by 1 % so that cached deadlines come early; 0 = do not use the TSC.
 * Preemption while sampling only widens a bracket, and the narrowest of 16 is kept; if even that
 * is wide (a throttled container at start-up), the TSC is not used at all. */
static uint64_t calibrate_tsc_per_ms(void)
{
    tsc_sample a = best_sample();
    uint64_t until = a.ns + 10000000u;
    while (read_ns(CLOCK_MONOTONIC) < until) {
    }
    tsc_sample b = best_sample();
    if (a.width > 20000 || b.width > 20000 || b.tsc <= a.tsc)
        return 0; /* more than 0.2 % of uncertainty over 10 ms */
    double per_ms = (double)(b.tsc - a.tsc) * 1e6 / (double)(b.ns - a.ns);
    return per_ms > 1000.0 ? (uint64_t)(per_ms * 0.99) : 0;
}
#endif

static void system_init(void)
{
    /* Anchor: the monotonic reading between two realtime reads. If the wall clock stepped between
     * them (NTP at boot) or we were preempted, try again; a signed midpoint keeps a backward
     * step from wrapping. */
    for (int attempt = 0;; attempt++) {
        int64_t r0 = (int64_t)read_ns(CLOCK_REALTIME);
        int64_t m = (int64_t)read_ns(CLOCK_MONOTONIC);
        int64_t r1 = (int64_t)read_ns(CLOCK_REALTIME);
        if ((r1 >= r0 && r1 - r0 < 100000) || attempt == 100) {
            sys.mono_to_unix_ns = r0 + (r1 - r0) / 2 - m;
            break;
        }
    }
#ifdef SF_HAVE_RDTSC
    if (tsc_trustworthy()) {
        sys.tsc_per_ms_low = calibrate_tsc_per_ms();
        atomic_store(&sys.use_tsc, sys.tsc_per_ms_low != 0);
    }
#endif
}

#ifdef SF_HAVE_RDTSC
/* Per-thread cache: `ms` is current while filled_at <= TSC < valid_until. */
static _Thread_local struct {
    uint64_t filled_at, valid_until;
    uint64_t ms;
    uint64_t ns_before, ns_after; /* clock readings bracketing filled_at */
} tls_cache;

/* The fast path must never be wrong, so every refill checks the TSC against the clock: between
 * two fills at least (ns_before - previous ns_after) really elapsed. A TSC that went backwards, or
 * one that ticked fewer times than that at our (deliberately low) rate would predict, means our
 * deadlines could be late: the process switches to plain clock_gettime() for good. */
static void check_tsc(uint64_t t, uint64_t ns_before)
{
    if (!tls_cache.filled_at)
        return;
    if (t < tls_cache.filled_at) {
        atomic_store(&sys.use_tsc, false);
        return;
    }
    uint64_t at_least_ns = ns_before > tls_cache.ns_after ? ns_before - tls_cache.ns_after : 0;
    double tsc_ns = (double)(t - tls_cache.filled_at) * 1e6 / (double)sys.tsc_per_ms_low;
    if (tsc_ns < (double)at_least_ns)
        atomic_store(&sys.use_tsc, false);
}

static uint64_t system_now_tsc(void)
{
    uint64_t t = __rdtsc();
    if (__builtin_expect(t < tls_cache.valid_until && t >= tls_cache.filled_at, 1))
        return tls_cache.ms;
    uint64_t before = anchored_ns();
    t = __rdtsc();
    uint64_t ns = anchored_ns();
    check_tsc(t, before);
    /* `ns` was read after t, so at TSC t at most `left` ns of its millisecond remained. */
    uint64_t left_ns = 1000000u - ns % 1000000u;
    tls_cache.ms = ns / 1000000u;
    tls_cache.ns_before = before;
    tls_cache.ns_after = ns;
    tls_cache.filled_at = t;
    tls_cache.valid_until = t + left_ns * sys.tsc_per_ms_low / 1000000u;
    return tls_cache.ms;
}
#endif

static uint64_t system_now(clk_source *self)
{
    (void)self;
#ifdef SF_HAVE_RDTSC
    if (atomic_load_explicit(&sys.use_tsc, memory_order_relaxed))
        return system_now_tsc();
#endif
    return clk_system_now_slow();
}

static clk_source system_clock = {.now_ms = system_now};

clk_source *clk_system(void)
{
    pthread_once(&sys.once, system_init);
    return &system_clock;
}

bool clk_system_uses_tsc(void)
{
    pthread_once(&sys.once, system_init);
    return atomic_load(&sys.use_tsc);
}

/* ---- fake clock ----------------------------------------------------------------------------- */

static uint64_t fake_now(clk_source *self)
{
    clk_fake *c = (clk_fake *)self;
    if (c->step_every) {
        uint64_t n = atomic_fetch_add(&c->reads, 1) + 1;
        if (n % c->step_every == 0)
            return atomic_fetch_add(&c->now, c->step_ms) + c->step_ms;
    }
    return atomic_load(&c->now);
}

void clk_fake_init(clk_fake *c, uint64_t now_ms, uint64_t step_every, uint64_t step_ms)
{
    c->base.now_ms = fake_now;
    atomic_init(&c->now, now_ms);
    atomic_init(&c->reads, 0);
    c->step_every = step_every;
    c->step_ms = step_ms;
}

void clk_fake_set(clk_fake *c, uint64_t now_ms)
{
    atomic_store(&c->now, now_ms);
}
