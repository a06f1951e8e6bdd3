/* Generator benchmark: ns per ID for each sync mode at 1, 2 and 4 threads, throughput as a
 * fraction of the layout's cap, the cost of one 4096-ID batch, and Snowflake IDs next to UUIDv7
 * and ULIDs (median ns per call, one thread; a 4096 batch each). Prints figures; not a test.
 *
 *   bench_generator [-d ms_per_run] [-b batches]
 *   bench_generator -n COUNT [-m mode] [-f snowflake|uuid7|ulid]   issue COUNT IDs on one
 *                                        thread and exit, for valgrind --tool=callgrind
 *                                        (instructions per ID)
 *
 * "capped" uses the default 41/5/5/12 layout (cap 4,096,000 IDs/s per worker), where the
 * sequence runs out every millisecond and the generator waits for the next tick; "uncapped" uses
 * 41/0/1/21 (cap 2.1e9/s), so the figure is the raw cost of the clock read and the update.
 * "per-thread" gives every thread its own generator (its own worker id). */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "snowflake/generator.h"
#include "snowflake/issue128.h"
#include "snowflake/rng.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct run {
    sf_gen *gen;
    _Atomic bool *go, *stop;
    _Atomic int *ready;
    uint64_t count, errors, checksum;
} run;

static void *spin_issue(void *p)
{
    run *r = p;
    uint64_t id, n = 0, sum = 0, errors = 0;
    atomic_fetch_add(r->ready, 1);
    while (!atomic_load(r->go))
        ;
    while (!atomic_load_explicit(r->stop, memory_order_relaxed)) {
        for (int i = 0; i < 256; i++) { /* check the flag rarely */
            if (sf_gen_next(r->gen, &id) == SF_OK)
                sum ^= id;
            else
                errors++;
        }
        n += 256;
    }
    r->count = n;
    r->errors = errors;
    r->checksum = sum;
    return NULL;
}

static sf_layout make_layout(unsigned ts, unsigned dc, unsigned w, unsigned seq)
{
    sf_layout l;
    char err[256];
    if (sf_layout_init(&l, ts, dc, w, seq, SF_DEFAULT_EPOCH_MS, 1, clk_now(clk_system()),
                       err, sizeof err) != 0) {
        fprintf(stderr, "layout: %s\n", err);
        exit(1);
    }
    return l;
}

static void make_gen(sf_gen *g, const sf_layout *l, sf_sync_mode mode, uint32_t worker)
{
    sf_gen_config cfg = {
        .layout = *l, .worker = worker, .sync = mode, .max_backward_ms = 5, .max_batch = 4096};
    char err[256];
    if (sf_gen_init(g, &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "generator: %s\n", err);
        exit(1);
    }
}

typedef struct result {
    double per_second; /* IDs per second of wall time */
    double of_cap;     /* IDs / what the layout allows in the ticks the run touched */
    uint64_t errors;
} result;

/* Runs `threads` issuers for about ms milliseconds. */
static result measure(const sf_layout *l, sf_sync_mode mode, int threads, bool per_thread,
                      unsigned ms)
{
    sf_gen gens[4];
    for (int i = 0; i < (per_thread ? threads : 1); i++)
        make_gen(&gens[i], l, mode, (uint32_t)i);
    _Atomic bool go = false, stop = false;
    _Atomic int ready = 0;
    pthread_t th[4];
    run runs[4];
    for (int t = 0; t < threads; t++) {
        runs[t] =
            (run){.gen = &gens[per_thread ? t : 0], .go = &go, .stop = &stop, .ready = &ready};
        pthread_create(&th[t], NULL, spin_issue, &runs[t]);
    }
    while (atomic_load(&ready) < threads) {
    }
    clk_source *clock = clk_system();
    uint64_t first_tick = sf_layout_tick_of(l, clk_now(clock));
    uint64_t t0 = mono_ns();
    atomic_store(&go, true);
    struct timespec d = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&d, NULL);
    atomic_store(&stop, true);
    uint64_t elapsed = mono_ns() - t0;
    uint64_t total = 0;
    result r = {0};
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        total += runs[t].count;
        r.errors += runs[t].errors;
    }
    /* The cap counts every tick the run could have used, the partial first and last included. */
    uint64_t ticks = sf_layout_tick_of(l, clk_now(clock)) - first_tick + 1;
    double cap = (double)ticks * (double)(l->sequence_max + 1) * (per_thread ? threads : 1);
    for (int i = 0; i < (per_thread ? threads : 1); i++)
        sf_gen_destroy(&gens[i]);
    r.per_second = (double)total * 1e9 / (double)elapsed;
    r.of_cap = (double)total / cap;
    return r;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void bench_batch(const sf_layout *l, unsigned batches)
{
    static uint64_t ids[4096];
    uint64_t *ns = malloc(sizeof(uint64_t) * batches);
    sf_gen g;
    make_gen(&g, l, SF_SYNC_ATOMIC, 0);
    for (unsigned i = 0; i < batches; i++) {
        uint64_t t0 = mono_ns();
        if (sf_gen_batch(&g, ids, 4096) != SF_OK) {
            fprintf(stderr, "batch failed\n");
            exit(1);
        }
        ns[i] = mono_ns() - t0;
    }
    qsort(ns, batches, sizeof *ns, cmp_u64);
    printf("\nbatch of 4096 (atomic, uncapped layout, %u batches): median %.2f us, p99 %.2f us, "
           "max %.2f us\n",
           batches, ns[batches / 2] / 1e3, ns[batches * 99 / 100] / 1e3, ns[batches - 1] / 1e3);
    free(ns);
    sf_gen_destroy(&g);
}

/* ---- Snowflake IDs next to UUIDv7 and ULIDs ------------------------------------------------ */

typedef enum { FMT_SNOWFLAKE = -1 } fmt_snowflake; /* else an sf_id128_format */

static const char *fmt_name(int f)
{
    return f == FMT_SNOWFLAKE ? "snowflake" : f == SF_FORMAT_UUID7 ? "uuid7" : "ulid";
}

static void make_format_gen(sf_gen *g, int f, sf_sync_mode mode)
{
    if (f == FMT_SNOWFLAKE) {
        sf_layout l = make_layout(41, 5, 5, 12);
        make_gen(g, &l, mode, 0);
        return;
    }
    sf_layout l;
    char err[256];
    if (sf_layout_init_unix_ms(&l, 5, 5, err, sizeof err) != 0) {
        fprintf(stderr, "layout: %s\n", err);
        exit(1);
    }
    make_gen(g, &l, mode, 0);
}

static inline int issue_n(sf_gen *g, int f, void *out, uint32_t n)
{
    return f == FMT_SNOWFLAKE ? sf_gen_batch(g, out, n)
                              : sf_id128_issue(g, (sf_id128_format)f, out, n);
}

static void sleep_to_next_ms(void)
{
    struct timespec d = {.tv_sec = 0, .tv_nsec = 1100000};
    nanosleep(&d, NULL);
}

/* Median ns of one call (less the timer's own cost), single IDs then 4096-batches, each batch
 * in a fresh millisecond: the work of issuing, not the waits for the next tick that 4096 IDs per
 * ms impose on all three formats alike. */
static void bench_formats(unsigned samples, unsigned batches)
{
    uint64_t *ns = malloc(sizeof(uint64_t) * samples);
    static sf_id128 out[4096];
    for (unsigned i = 0; i < samples; i++) {
        uint64_t t0 = mono_ns();
        ns[i] = mono_ns() - t0;
    }
    qsort(ns, samples, sizeof *ns, cmp_u64);
    double timer = (double)ns[samples / 2];
    printf("\nformats, 1 thread, atomic, 5+5 node bits (timer overhead %.0f ns subtracted):\n",
           timer);
    printf("%-10s | %14s %14s | %18s %12s\n", "format", "single ns p50", "single ns p99",
           "batch 4096 us p50", "ns per ID");
    for (int f = FMT_SNOWFLAKE; f <= SF_FORMAT_ULID; f++) {
        sf_gen g;
        make_format_gen(&g, f, SF_SYNC_ATOMIC);
        for (unsigned i = 0; i < samples; i++) {
            if (i % 2048 == 0)
                sleep_to_next_ms(); /* stay under 4096 per ms: no waits in the samples */
            uint64_t t0 = mono_ns();
            if (issue_n(&g, f, out, 1) != SF_OK) {
                fprintf(stderr, "%s: issue failed\n", fmt_name(f));
                exit(1);
            }
            ns[i] = mono_ns() - t0;
        }
        qsort(ns, samples, sizeof *ns, cmp_u64);
        double p50 = (double)ns[samples / 2] - timer, p99 = (double)ns[samples * 99 / 100] - timer;
        unsigned nb = batches < samples ? batches : samples;
        for (unsigned i = 0; i < nb; i++) {
            sleep_to_next_ms();
            uint64_t t0 = mono_ns();
            if (issue_n(&g, f, out, 4096) != SF_OK) {
                fprintf(stderr, "%s: batch failed\n", fmt_name(f));
                exit(1);
            }
            ns[i] = mono_ns() - t0;
        }
        qsort(ns, nb, sizeof *ns, cmp_u64);
        printf("%-10s | %14.1f %14.1f | %18.2f %12.1f\n", fmt_name(f), p50, p99,
               ns[nb / 2] / 1e3, ns[nb / 2] / 4096.0);
        sf_gen_destroy(&g);
    }
    free(ns);
}

/* Fixed work for instruction counting: uncapped layout for Snowflake IDs, so no tick waits (the
 * 128-bit formats have 4096 per ms, far above what callgrind's pace reaches). */
static int issue_count_format(long count, sf_sync_mode mode, int f)
{
    sf_gen g;
    make_format_gen(&g, f, mode);
    sf_id128 id;
    uint64_t sum = 0;
    for (long i = 0; i < count; i++) {
        if (issue_n(&g, f, &id, 1) != SF_OK)
            return 1;
        sum ^= id.hi ^ id.lo;
    }
    printf("issued %ld %s (%s), checksum %llx\n", count, fmt_name(f), sf_sync_mode_name(mode),
           (unsigned long long)sum);
    sf_gen_destroy(&g);
    return 0;
}

/* Fixed work for instruction counting: uncapped layout, so no tick waits. */
static int issue_count(long count, sf_sync_mode mode)
{
    sf_layout l = make_layout(41, 0, 1, 21);
    sf_gen g;
    make_gen(&g, &l, mode, 0);
    uint64_t id, sum = 0;
    for (long i = 0; i < count; i++) {
        if (sf_gen_next(&g, &id) != SF_OK)
            return 1;
        sum ^= id;
    }
    printf("issued %ld IDs (%s), checksum %llx\n", count, sf_sync_mode_name(mode),
           (unsigned long long)sum);
    sf_gen_destroy(&g);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned ms = 1000, batches = 20000;
    long count = 0;
    sf_sync_mode mode = SF_SYNC_ATOMIC;
    int opt, format = FMT_SNOWFLAKE;
    while ((opt = getopt(argc, argv, "d:b:n:m:f:")) != -1) {
        if (opt == 'd')
            ms = (unsigned)atoi(optarg);
        else if (opt == 'b')
            batches = (unsigned)atoi(optarg);
        else if (opt == 'n')
            count = atol(optarg);
        else if (opt == 'm' && sf_sync_mode_parse(optarg, &mode) == 0)
            ;
        else if (opt == 'f' && (strcmp(optarg, "uuid7") == 0 || strcmp(optarg, "ulid") == 0 ||
                                strcmp(optarg, "snowflake") == 0))
            format = optarg[0] == 's' ? FMT_SNOWFLAKE
                     : optarg[1] == 'u' ? SF_FORMAT_UUID7 : SF_FORMAT_ULID;
        else {
            fprintf(stderr,
                    "usage: %s [-d ms_per_run] [-b batches] | -n count [-m mode] "
                    "[-f snowflake|uuid7|ulid]\n",
                    argv[0]);
            return 2;
        }
    }
    bool waited;
    char err[256];
    if (sf_rng_probe(&waited, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (count > 0)
        return format == FMT_SNOWFLAKE ? issue_count(count, mode)
                                       : issue_count_format(count, mode, format);
    if (ms < 10 || batches < 100) {
        fprintf(stderr, "-d must be >= 10 and -b >= 100\n");
        return 2;
    }
    sf_layout capped = make_layout(41, 5, 5, 12), uncapped = make_layout(41, 0, 1, 21),
              uncapped_workers = make_layout(41, 0, 2, 20);
    printf("clock: %s; %ld online CPUs; %u ms per run\n",
           clk_system_uses_tsc() ? "TSC-cached CLOCK_MONOTONIC" : "clock_gettime",
           sysconf(_SC_NPROCESSORS_ONLN), ms);
    printf("%-10s %-10s %7s | %12s %8s | %12s %9s\n", "mode", "counters", "threads", "capped ID/s",
           "% of cap", "uncapped ID/s", "ns per ID");
    const int thread_counts[] = {1, 2, 4};
    for (int per_thread = 0; per_thread < 2; per_thread++) {
        for (int m = 0; m < 3; m++) {
            if (per_thread && m != SF_SYNC_ATOMIC)
                continue;
            for (int k = 0; k < 3; k++) {
                int t = thread_counts[k];
                result capped_r = measure(&capped, (sf_sync_mode)m, t, per_thread, ms);
                result raw = measure(per_thread ? &uncapped_workers : &uncapped, (sf_sync_mode)m, t,
                                     per_thread, ms);
                printf("%-10s %-10s %7d | %12.0f %7.2f%% | %12.0f %9.2f%s\n",
                       sf_sync_mode_name((sf_sync_mode)m), per_thread ? "per-thread" : "shared", t,
                       capped_r.per_second, 100.0 * capped_r.of_cap, raw.per_second,
                       1e9 / raw.per_second, capped_r.errors + raw.errors ? "  (errors!)" : "");
            }
        }
    }
    bench_batch(&uncapped, batches);
    bench_formats(200000, 500);
    return 0;
}
