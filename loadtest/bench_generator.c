/* Generator benchmark: ns per ID for each sync mode at 1, 2 and 4 threads, throughput as a
 * fraction of the layout's cap, and the cost of one 4096-ID batch. Prints figures; not a test.
 *
 *   bench_generator [-d ms_per_run] [-b batches]
 *   bench_generator -n COUNT [-m mode]   issue COUNT IDs on one thread and exit, for
 *                                        valgrind --tool=callgrind (instructions per ID)
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
#include <time.h>
#include <unistd.h>

#include "snowflake/generator.h"

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
    if (sf_layout_init(&l, ts, dc, w, seq, SF_DEFAULT_EPOCH_MS, 1, sf_clock_now(sf_clock_system()),
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
    sf_clock *clock = sf_clock_system();
    uint64_t first_tick = sf_layout_tick_of(l, sf_clock_now(clock));
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
    uint64_t ticks = sf_layout_tick_of(l, sf_clock_now(clock)) - first_tick + 1;
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
    int opt;
    while ((opt = getopt(argc, argv, "d:b:n:m:")) != -1) {
        if (opt == 'd')
            ms = (unsigned)atoi(optarg);
        else if (opt == 'b')
            batches = (unsigned)atoi(optarg);
        else if (opt == 'n')
            count = atol(optarg);
        else if (opt == 'm' && sf_sync_mode_parse(optarg, &mode) == 0)
            ;
        else {
            fprintf(stderr, "usage: %s [-d ms_per_run] [-b batches] | -n count [-m mode]\n",
                    argv[0]);
            return 2;
        }
    }
    if (count > 0)
        return issue_count(count, mode);
    if (ms < 10 || batches < 100) {
        fprintf(stderr, "-d must be >= 10 and -b >= 100\n");
        return 2;
    }
    sf_layout capped = make_layout(41, 5, 5, 12), uncapped = make_layout(41, 0, 1, 21),
              uncapped_workers = make_layout(41, 0, 2, 20);
    printf("clock: %s; %ld online CPUs; %u ms per run\n",
           sf_clock_system_uses_tsc() ? "TSC-cached CLOCK_MONOTONIC" : "clock_gettime",
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
    return 0;
}
