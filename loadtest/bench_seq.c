/* Segment mode's take path: ns per number for one namespace shared by 1, 2 and 4 threads (the
 * daemon's design: one state per namespace under a spinlock, whatever loop asks), next to each
 * thread with a namespace of its own (what per-loop blocks would cost: no sharing at all), and
 * batches of 100. Blocks are huge here (2^40), so the figure is the take itself, never a refill.
 * Prints figures; not a test.
 *
 *   bench_seq [-d ms_per_run]
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seq/seq.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A source granting every reserve at once, from a thread of its own (the contract: never from
 * inside reserve). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct {
        uint64_t want;
        seq_done_fn done;
        void *arg;
    } q[64];
    unsigned n;
    uint64_t counter;
    bool stop;
    pthread_t thread;
} src = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *granter(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&src.mu);
    while (!src.stop || src.n) {
        if (!src.n) {
            pthread_cond_wait(&src.cv, &src.mu);
            continue;
        }
        __typeof__(src.q[0]) j = src.q[--src.n];
        seq_result r = {.status = SEQ_OK, .lo = src.counter, .hi = src.counter + j.want};
        src.counter += j.want;
        if (r.lo == 0) /* numbers start at 1 here: 0 is the takers' "none yet" */
            r.lo = 1;
        pthread_mutex_unlock(&src.mu);
        j.done(j.arg, &r);
        pthread_mutex_lock(&src.mu);
    }
    pthread_mutex_unlock(&src.mu);
    return NULL;
}

static int s_start(void *c, char *e, size_t l)
{
    (void)c, (void)e, (void)l;
    return pthread_create(&src.thread, NULL, granter, NULL);
}
static int s_declare(void *c, unsigned id, const seq_ns_def *d, char *e, size_t l)
{
    (void)c, (void)id, (void)d, (void)e, (void)l;
    return 0;
}
static int s_list(void *c, const char *const *dn, size_t n, void (*f)(void *, const seq_ns_def *),
                  void *a, char *e, size_t l)
{
    (void)c, (void)dn, (void)n, (void)f, (void)a, (void)e, (void)l;
    return 0;
}
static int s_reserve(void *c, unsigned id, uint64_t want, seq_done_fn done, void *arg)
{
    (void)c, (void)id;
    pthread_mutex_lock(&src.mu);
    int rc = src.n < 64 ? 0 : -1;
    if (rc == 0) {
        src.q[src.n].want = want;
        src.q[src.n].done = done;
        src.q[src.n++].arg = arg;
        pthread_cond_signal(&src.cv);
    }
    pthread_mutex_unlock(&src.mu);
    return rc;
}
static void s_stop(void *c)
{
    (void)c;
    pthread_mutex_lock(&src.mu);
    src.stop = true;
    pthread_cond_broadcast(&src.cv);
    pthread_mutex_unlock(&src.mu);
    pthread_join(src.thread, NULL);
}

typedef struct run {
    seq_ns *ns;
    uint32_t batch;
    _Atomic bool *go, *stop;
    _Atomic int *ready;
    uint64_t count, errors, last;
} run;

static void *taker(void *p)
{
    run *r = p;
    uint64_t out[100], n = 0, errors = 0, prev = 0;
    atomic_fetch_add(r->ready, 1);
    while (!atomic_load(r->go)) {
    }
    while (!atomic_load_explicit(r->stop, memory_order_relaxed)) {
        for (int i = 0; i < 64; i++) {
            if (seq_take(r->ns, out, r->batch) != SEQ_R_OK) {
                errors++;
                continue;
            }
            if (out[0] <= prev) /* increasing per thread: the shared state's promise */
                errors++;
            prev = out[r->batch - 1];
            n += r->batch;
        }
    }
    r->count = n;
    r->errors = errors;
    return NULL;
}

/* ns per number with `threads` takers; own: each thread its own namespace. */
static double measure(seq_table *t, unsigned threads, bool own, uint32_t batch, unsigned ms,
                      uint64_t *errors)
{
    _Atomic bool go = false, stop = false;
    _Atomic int ready = 0;
    run runs[4];
    pthread_t th[4];
    for (unsigned i = 0; i < threads; i++) {
        char name[16]; /* "n" and a u32 in decimal */
        snprintf(name, sizeof name, "n%u", own ? i : 0);
        runs[i] = (run){.ns = seq_find(t, name, strlen(name)), .batch = batch, .go = &go,
                        .stop = &stop, .ready = &ready};
        pthread_create(&th[i], NULL, taker, &runs[i]);
    }
    while (atomic_load(&ready) < (int)threads) {
    }
    uint64_t t0 = mono_ns();
    atomic_store(&go, true);
    struct timespec d = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
    atomic_store(&stop, true);
    uint64_t total = 0;
    *errors = 0;
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        total += runs[i].count;
        *errors += runs[i].errors;
    }
    uint64_t el = mono_ns() - t0;
    /* wall time per number per thread: what one loop pays for each number it hands out */
    return total ? (double)el * threads / (double)total : 0;
}

int main(int argc, char **argv)
{
    unsigned ms = 1000;
    int c;
    while ((c = getopt(argc, argv, "d:")) != -1)
        if (c == 'd')
            ms = (unsigned)atoi(optarg);
    seq_source s = {.kind = "bench", .start = s_start, .declare = s_declare, .list = s_list,
                    .reserve = s_reserve, .stop = s_stop};
    seq_options o = {.prefetch_pct = 20, .retry_ms = 10, .adaptive_block_ms = 60000,
                     .start_wait_ms = 5000};
    char err[256];
    seq_table *t = seq_table_new(&s, &o, clk_system(), 8, err, sizeof err);
    for (unsigned i = 0; t && i < 4; i++) {
        seq_ns_def d = {.start = 1, .block = UINT64_C(1) << 40};
        snprintf(d.name, sizeof d.name, "n%u", i);
        if (seq_table_declare(t, &d, NULL, err, sizeof err) != 0)
            t = NULL;
    }
    if (!t || seq_table_start(t, err, sizeof err) != 0) {
        fprintf(stderr, "bench_seq: %s\n", err);
        return 1;
    }
    printf("segment take path, %u ms per run, ns per number per thread (median of 3)\n", ms);
    const struct {
        unsigned threads;
        bool own;
        uint32_t batch;
        const char *what;
    } cases[] = {
        {1, false, 1, "1 thread, one namespace"},
        {2, false, 1, "2 threads, one shared namespace"},
        {4, false, 1, "4 threads, one shared namespace"},
        {2, true, 1, "2 threads, a namespace each (no sharing)"},
        {4, true, 1, "4 threads, a namespace each (no sharing)"},
        {1, false, 100, "1 thread, batches of 100"},
        {2, false, 100, "2 threads sharing, batches of 100"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double v[3];
        uint64_t errors = 0, e;
        for (int k = 0; k < 3; k++) {
            v[k] = measure(t, cases[i].threads, cases[i].own, cases[i].batch, ms, &e);
            errors += e;
        }
        for (int a = 0; a < 3; a++) /* sort 3 */
            for (int b = a + 1; b < 3; b++)
                if (v[b] < v[a]) {
                    double x = v[a];
                    v[a] = v[b];
                    v[b] = x;
                }
        printf("  %-44s %8.1f ns%s\n", cases[i].what, v[1], errors ? "  ERRORS" : "");
    }
    seq_table_free(t);
    return 0;
}
