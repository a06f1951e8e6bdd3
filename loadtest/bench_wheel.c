/* Timing wheel benchmark against a binary min-heap with index-tracked entries (cancel is
 * O(log n)), on the connection layer's operations: arm, cancel, re-arm, and expire by advancing
 * the clock in 1 ms steps as the loop's uv timer would. Prints figures; not a test.
 *
 *   bench_wheel [-n COUNT] [-r REPEATS] [-s wheel|heap|both]
 *
 * COUNT timeouts (default 1,000,000) uniform in [1 ms, 60 s] ahead, fixed seed; each phase is
 * timed over all COUNT operations, best of REPEATS (default 3). For instruction counts run one
 * structure under callgrind and read the inclusive cost of its phase_* functions:
 *   valgrind --tool=callgrind --callgrind-out-file=cg.wheel ./bench_wheel -n 100000 -r 1 -s wheel
 *   callgrind_annotate --inclusive=yes cg.wheel | grep phase_
 * Both structures are called out of line (the wheel lives in its own file; the heap functions
 * are noinline) so neither gains from inlining into the loop. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/wheel.h"

#define SPAN_MS 60000
#define START_MS UINT64_C(1732912345678) /* a realistic epoch time, not aligned */
#define SEED UINT64_C(0x5eed5eed12345678)
#define NOINLINE __attribute__((noinline))

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state = SEED;

static uint64_t rnd(void)
{
    uint64_t x = rng_state; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * UINT64_C(2685821657736338717);
}

/* --- the reference: binary min-heap, entries know their index ----------------------------------- */

typedef struct heap_timer heap_timer;
struct heap_timer {
    uint64_t expire_at;
    size_t idx; /* position in the heap, SIZE_MAX when not scheduled */
    void (*cb)(heap_timer *t);
};

typedef struct heap {
    heap_timer **a;
    size_t n;
} heap;

static void heap_set(heap *h, size_t i, heap_timer *t)
{
    h->a[i] = t;
    t->idx = i;
}

static void sift_up(heap *h, size_t i)
{
    heap_timer *t = h->a[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->a[parent]->expire_at <= t->expire_at)
            break;
        heap_set(h, i, h->a[parent]);
        i = parent;
    }
    heap_set(h, i, t);
}

static void sift_down(heap *h, size_t i)
{
    heap_timer *t = h->a[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->a[c + 1]->expire_at < h->a[c]->expire_at)
            c++;
        if (t->expire_at <= h->a[c]->expire_at)
            break;
        heap_set(h, i, h->a[c]);
        i = c;
    }
    heap_set(h, i, t);
}

/* Restores the heap property around index i after its key changed either way. */
static void heap_fix(heap *h, size_t i)
{
    if (i > 0 && h->a[(i - 1) / 2]->expire_at > h->a[i]->expire_at)
        sift_up(h, i);
    else
        sift_down(h, i);
}

static NOINLINE void heap_remove(heap *h, heap_timer *t)
{
    if (t->idx == SIZE_MAX)
        return;
    size_t i = t->idx;
    heap_timer *last = h->a[--h->n];
    t->idx = SIZE_MAX;
    if (last == t)
        return;
    heap_set(h, i, last);
    heap_fix(h, i);
}

/* Same contract as wheel_add: a scheduled t gets its key changed in place (one sift). */
static NOINLINE void heap_add(heap *h, heap_timer *t, uint64_t at)
{
    t->expire_at = at;
    if (t->idx != SIZE_MAX) {
        heap_fix(h, t->idx);
        return;
    }
    heap_set(h, h->n++, t);
    sift_up(h, h->n - 1);
}

static NOINLINE size_t heap_run(heap *h, uint64_t now)
{
    size_t fired = 0;
    while (h->n > 0 && h->a[0]->expire_at <= now) {
        heap_timer *t = h->a[0];
        heap_remove(h, t);
        t->cb(t);
        fired++;
    }
    return fired;
}

/* --- workload ------------------------------------------------------------------------------------- */

static size_t count;
static uint64_t *deadline, *rearm_deadline; /* per operation */
static size_t *order, *rearm_order;          /* random permutation / random picks */
static wheel the_wheel;
static wheel_timer *wt;
static heap the_heap;
static heap_timer *ht;
static size_t fired_total;

static void wheel_fired(wheel_timer *t)
{
    (void)t;
    fired_total++;
}

static void heap_fired(heap_timer *t)
{
    (void)t;
    fired_total++;
}

static void make_workload(void)
{
    deadline = malloc(count * sizeof *deadline);
    rearm_deadline = malloc(count * sizeof *rearm_deadline);
    order = malloc(count * sizeof *order);
    rearm_order = malloc(count * sizeof *rearm_order);
    wt = malloc(count * sizeof *wt);
    ht = malloc(count * sizeof *ht);
    the_heap.a = malloc(count * sizeof *the_heap.a);
    if (!deadline || !rearm_deadline || !order || !rearm_order || !wt || !ht || !the_heap.a) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < count; i++) {
        deadline[i] = START_MS + 1 + rnd() % SPAN_MS;
        rearm_deadline[i] = START_MS + 1 + rnd() % SPAN_MS;
        rearm_order[i] = rnd() % count;
        order[i] = i;
    }
    for (size_t i = count - 1; i > 0; i--) { /* Fisher-Yates: cancel in random order */
        size_t j = rnd() % (i + 1), tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

static void reset(void)
{
    wheel_init(&the_wheel, START_MS);
    the_heap.n = 0;
    for (size_t i = 0; i < count; i++) {
        wheel_timer_init(&wt[i], wheel_fired);
        ht[i] = (heap_timer){.idx = SIZE_MAX, .cb = heap_fired};
    }
}

static NOINLINE void phase_wheel_insert(void)
{
    for (size_t i = 0; i < count; i++)
        wheel_add(&the_wheel, &wt[i], deadline[i]);
}

static NOINLINE void phase_heap_insert(void)
{
    for (size_t i = 0; i < count; i++)
        heap_add(&the_heap, &ht[i], deadline[i]);
}

static NOINLINE void phase_wheel_rearm(void)
{
    for (size_t i = 0; i < count; i++)
        wheel_add(&the_wheel, &wt[rearm_order[i]], rearm_deadline[i]);
}

static NOINLINE void phase_heap_rearm(void)
{
    for (size_t i = 0; i < count; i++)
        heap_add(&the_heap, &ht[rearm_order[i]], rearm_deadline[i]);
}

static NOINLINE void phase_wheel_cancel(void)
{
    for (size_t i = 0; i < count; i++)
        wheel_cancel(&wt[order[i]]);
}

static NOINLINE void phase_heap_cancel(void)
{
    for (size_t i = 0; i < count; i++)
        heap_remove(&the_heap, &ht[order[i]]);
}

/* The loop under load wakes every millisecond: advance 60 s in 1 ms steps. */
static NOINLINE void phase_wheel_expire(void)
{
    for (uint64_t now = START_MS + 1; now <= START_MS + SPAN_MS; now++)
        wheel_run(&the_wheel, now);
}

static NOINLINE void phase_heap_expire(void)
{
    for (uint64_t now = START_MS + 1; now <= START_MS + SPAN_MS; now++)
        heap_run(&the_heap, now);
}

enum { INSERT, REARM, CANCEL, EXPIRE, NPHASES };
static const char *const phase_names[NPHASES] = {
    "insert", "re-arm (move a scheduled timer)", "cancel (random order)",
    "expire all (60 s in 1 ms steps), per timer"};

typedef struct impl {
    const char *name;
    void (*phase[NPHASES])(void);
    double best_ns[NPHASES]; /* per operation */
} impl;

static double timed(void (*f)(void))
{
    uint64_t t0 = mono_ns();
    f();
    return (double)(mono_ns() - t0) / (double)count;
}

static void keep_best(double *best, double ns)
{
    if (*best == 0 || ns < *best)
        *best = ns;
}

/* One repetition: insert, re-arm, cancel all; then insert again and expire all. */
static void measure(impl *m)
{
    reset();
    keep_best(&m->best_ns[INSERT], timed(m->phase[INSERT]));
    keep_best(&m->best_ns[REARM], timed(m->phase[REARM]));
    keep_best(&m->best_ns[CANCEL], timed(m->phase[CANCEL]));
    m->phase[INSERT]();
    size_t before = fired_total;
    keep_best(&m->best_ns[EXPIRE], timed(m->phase[EXPIRE]));
    if (fired_total - before != count) {
        fprintf(stderr, "%s: fired %zu of %zu\n", m->name, fired_total - before, count);
        exit(1);
    }
}

static void report(const impl *w, const impl *h, bool both)
{
    printf("%-46s %10s %10s %10s\n", "ns per operation", "wheel", "heap", "wheel/heap");
    for (int p = 0; p < NPHASES; p++) {
        printf("%-46s %10.1f %10.1f", phase_names[p], w->best_ns[p], h->best_ns[p]);
        if (both)
            printf(" %10.2f", w->best_ns[p] / h->best_ns[p]);
        printf("\n");
    }
    double wic = w->best_ns[INSERT] + w->best_ns[CANCEL], hic = h->best_ns[INSERT] + h->best_ns[CANCEL];
    printf("%-46s %10.1f %10.1f", "insert + cancel", wic, hic);
    if (both)
        printf(" %10.2f", wic / hic);
    printf("\n");
}

int main(int argc, char **argv)
{
    count = 1000000;
    int repeats = 3, opt;
    const char *which = "both";
    while ((opt = getopt(argc, argv, "n:r:s:")) != -1) {
        if (opt == 'n')
            count = (size_t)atol(optarg);
        else if (opt == 'r')
            repeats = atoi(optarg);
        else if (opt == 's')
            which = optarg;
        else
            count = 0;
    }
    bool do_wheel = strcmp(which, "heap") != 0, do_heap = strcmp(which, "wheel") != 0;
    if (count < 2 || repeats < 1 || (!do_wheel && !do_heap) ||
        (strcmp(which, "both") && strcmp(which, "wheel") && strcmp(which, "heap"))) {
        fprintf(stderr, "usage: %s [-n count >= 2] [-r repeats] [-s wheel|heap|both]\n", argv[0]);
        return 2;
    }
    make_workload();
    impl w = {.name = "wheel",
              .phase = {phase_wheel_insert, phase_wheel_rearm, phase_wheel_cancel,
                        phase_wheel_expire}};
    impl h = {.name = "heap",
              .phase = {phase_heap_insert, phase_heap_rearm, phase_heap_cancel, phase_heap_expire}};
    for (int r = 0; r < repeats; r++) {
        if (do_wheel)
            measure(&w);
        if (do_heap)
            measure(&h);
    }
    printf("bench_wheel: %zu timeouts uniform in [1 ms, %d ms] ahead, seed %#llx, best of %d\n",
           count, SPAN_MS, (unsigned long long)SEED, repeats);
    report(&w, &h, do_wheel && do_heap);
    return 0;
}
