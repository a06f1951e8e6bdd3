#include "snowflake/clock.h"

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
    bool use_tsc;
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

uint64_t sf_clock_system_now_slow(void)
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

static uint64_t calibrate_tsc_per_ms(void)
{
    /* ~5 ms against CLOCK_MONOTONIC; the 1% margin dwarfs the calibration error (~1e-4). */
    uint64_t t0 = __rdtsc(), n0 = read_ns(CLOCK_MONOTONIC), n1;
    do {
        n1 = read_ns(CLOCK_MONOTONIC);
    } while (n1 - n0 < 5000000u);
    uint64_t t1 = __rdtsc();
    double per_ms = (double)(t1 - t0) * 1e6 / (double)(n1 - n0);
    return per_ms > 1000.0 ? (uint64_t)(per_ms * 0.99) : 0;
}
#endif

static void system_init(void)
{
    /* Anchor: pick the monotonic reading between two realtime reads to halve the error. */
    uint64_t r0 = read_ns(CLOCK_REALTIME), m = read_ns(CLOCK_MONOTONIC),
             r1 = read_ns(CLOCK_REALTIME);
    sys.mono_to_unix_ns = (int64_t)(r0 + (r1 - r0) / 2) - (int64_t)m;
#ifdef SF_HAVE_RDTSC
    if (tsc_trustworthy()) {
        sys.tsc_per_ms_low = calibrate_tsc_per_ms();
        sys.use_tsc = sys.tsc_per_ms_low != 0;
    }
#endif
}

#ifdef SF_HAVE_RDTSC
/* Per-thread cache: `ms` is current while the TSC is below `valid_until`. */
static _Thread_local struct {
    uint64_t valid_until;
    uint64_t ms;
} tls_cache;

static uint64_t system_now_tsc(void)
{
    uint64_t t = __rdtsc();
    if (__builtin_expect(t < tls_cache.valid_until, 1))
        return tls_cache.ms;
    /* The clock is read after t, so at TSC t at most `left` ns of this millisecond remained. */
    uint64_t ns = anchored_ns();
    uint64_t left_ns = 1000000u - ns % 1000000u;
    tls_cache.ms = ns / 1000000u;
    tls_cache.valid_until = t + left_ns * sys.tsc_per_ms_low / 1000000u;
    return tls_cache.ms;
}
#endif

static uint64_t system_now(sf_clock *self)
{
    (void)self;
#ifdef SF_HAVE_RDTSC
    if (sys.use_tsc)
        return system_now_tsc();
#endif
    return sf_clock_system_now_slow();
}

static sf_clock system_clock = {.now_ms = system_now};

sf_clock *sf_clock_system(void)
{
    pthread_once(&sys.once, system_init);
    return &system_clock;
}

bool sf_clock_system_uses_tsc(void)
{
    pthread_once(&sys.once, system_init);
    return sys.use_tsc;
}

/* ---- fake clock ----------------------------------------------------------------------------- */

static uint64_t fake_now(sf_clock *self)
{
    sf_fake_clock *c = (sf_fake_clock *)self;
    if (c->step_every) {
        uint64_t n = atomic_fetch_add(&c->reads, 1) + 1;
        if (n % c->step_every == 0)
            return atomic_fetch_add(&c->now, c->step_ms) + c->step_ms;
    }
    return atomic_load(&c->now);
}

void sf_fake_clock_init(sf_fake_clock *c, uint64_t now_ms, uint64_t step_every, uint64_t step_ms)
{
    c->base.now_ms = fake_now;
    atomic_init(&c->now, now_ms);
    atomic_init(&c->reads, 0);
    c->step_every = step_every;
    c->step_ms = step_ms;
}

void sf_fake_clock_set(sf_fake_clock *c, uint64_t now_ms)
{
    atomic_store(&c->now, now_ms);
}
