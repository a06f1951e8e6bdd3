/* Cache store benchmark: memory per item and get/set cost. Prints figures; not a test.
 *
 *   bench_store [-n items] [-d ms_per_run]
 *   valgrind --tool=callgrind --callgrind-out-file=F bench_store -p [-n items]
 *   callgrind_annotate --inclusive=yes F | grep phase_
 *   bench_store -o
 *
 * Inserts n items (32-byte keys, 100-byte values, default 1,000,000) into a store with room to
 * spare and reports the process's RSS growth per item (from /proc/self/statm, so it includes the
 * bucket arrays and malloc's own overhead) next to what the store accounts per item (its size
 * class). Then the cost of get (hit, random key) and set (replace with a same-size value) on one
 * thread, and gets / a 90:10 get:set mix on 2 threads, with each lock kind; then sets into a
 * store that holds a quarter of the keys (about 3 in 4 sets evict: eviction's cost and how it
 * scales) on 1 and 2 threads. Keys are formatted beforehand so the figures are the store's, not
 * snprintf's. With -p, instead: fixed operation counts on one thread, one function per phase
 * (phase_get, phase_set, phase_set_evicting: n operations each), for callgrind's instruction
 * counts, which the machine's load does not move. With -o: the eviction order's quality, for
 * several shard counts: 4 x N keys written one after another into a store holding N; how many of
 * the N most recent survive and which fraction of the evicted are older than the oldest
 * survivor (1 and 1.0 for exact LRU). */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/store.h"

#define KEY_LEN 32
#define VAL_LEN 100
#define NOW     1

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* This thread's CPU time: on a machine shared with other work, time waiting for a core does
 * not count; cache misses and lock handoffs between the threads do. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rss_bytes(void)
{
    unsigned long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%lu %lu", &size, &resident) != 2) {
        fprintf(stderr, "cannot read /proc/self/statm\n");
        exit(1);
    }
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static char *g_keys; /* n keys of KEY_LEN bytes, back to back */
static char g_val[VAL_LEN];

static const char *key_at(size_t i)
{
    return g_keys + i * KEY_LEN;
}

/* shards 0: the default. */
static cache_store *make_store_sized(cache_lock_kind lk, uint64_t bytes, unsigned shards)
{
    cache_store_config c = {.max_memory_bytes = bytes, .lock = lk, .shards = shards};
    char err[128];
    cache_store *s = cache_store_new(&c, err, sizeof err);
    if (!s) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return s;
}

static cache_store *make_store(cache_lock_kind lk)
{
    return make_store_sized(lk, UINT64_C(4) << 30, 0);
}

static int set_key(cache_store *s, size_t i)
{
    int err;
    cache_item *it = cache_item_new(s, key_at(i), KEY_LEN, VAL_LEN, 0, 0, NULL, 0, &err);
    if (!it)
        return err;
    memcpy(cache_item_value_mut(it), g_val, VAL_LEN);
    return cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, NOW);
}

static void fill(cache_store *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (set_key(s, i) != CACHE_STORED) {
            fprintf(stderr, "insert %zu failed\n", i);
            exit(1);
        }
}

static inline uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

typedef struct run {
    cache_store *s;
    size_t n;
    unsigned set_pct; /* share of sets, in percent */
    bool misses_ok;   /* an evicting store: gets may miss */
    uint64_t seed, ops, misses, cpu_ns;
    _Atomic bool *go, *stop;
    _Atomic int *ready;
} run;

static void *worker(void *p)
{
    run *r = p;
    uint64_t x = r->seed, ops = 0, misses = 0;
    atomic_fetch_add(r->ready, 1);
    while (!atomic_load(r->go)) {
    }
    uint64_t cpu0 = thread_cpu_ns();
    while (!atomic_load_explicit(r->stop, memory_order_relaxed)) {
        for (int i = 0; i < 256; i++) {
            uint64_t v = next_rand(&x);
            size_t k = (size_t)(v % r->n);
            if ((v >> 40) % 100 < r->set_pct) {
                misses += set_key(r->s, k) != CACHE_STORED;
            } else {
                cache_item *it = cache_get(r->s, key_at(k), KEY_LEN, NOW);
                misses += it == NULL;
                cache_item_release(it);
            }
        }
        ops += 256;
    }
    r->cpu_ns = thread_cpu_ns() - cpu0;
    r->ops = ops;
    r->misses = r->misses_ok ? 0 : misses;
    return NULL;
}

/* ns per operation (wall time / total ops) with `threads` threads for about ms milliseconds. */
/* ns per operation (wall time / total ops) with `threads` threads for about ms milliseconds;
 * *cpu_per_op (if not NULL) gets the threads' CPU ns per operation. */
static double measure_ex(cache_store *s, size_t n, int threads, unsigned set_pct, unsigned ms,
                         bool misses_ok, double *cpu_per_op)
{
    _Atomic bool go = false, stop = false;
    _Atomic int ready = 0;
    pthread_t th[2];
    run runs[2];
    for (int t = 0; t < threads; t++) {
        runs[t] = (run){.s = s,
                        .n = n,
                        .set_pct = set_pct,
                        .misses_ok = misses_ok,
                        .seed = 88172645463325252ull + t,
                        .go = &go,
                        .stop = &stop,
                        .ready = &ready};
        pthread_create(&th[t], NULL, worker, &runs[t]);
    }
    while (atomic_load(&ready) < threads) {
    }
    uint64_t t0 = mono_ns();
    atomic_store(&go, true);
    struct timespec d = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&d, NULL);
    atomic_store(&stop, true);
    uint64_t ops = 0, misses = 0, cpu = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        ops += runs[t].ops;
        misses += runs[t].misses;
        cpu += runs[t].cpu_ns;
    }
    if (cpu_per_op)
        *cpu_per_op = (double)cpu / (double)ops;
    uint64_t elapsed = mono_ns() - t0;
    if (misses) {
        fprintf(stderr, "unexpected misses / failed sets: %llu\n", (unsigned long long)misses);
        exit(1);
    }
    return (double)elapsed / (double)ops;
}

static double measure(cache_store *s, size_t n, int threads, unsigned set_pct, unsigned ms)
{
    return measure_ex(s, n, threads, set_pct, ms, false, NULL);
}

/* The phases of -p: n operations each on random keys, one function each (not inlined, so
 * callgrind's inclusive cost of each is that phase's). */
static __attribute__((noinline)) uint64_t phase_get(cache_store *s, size_t n)
{
    uint64_t x = 88172645463325252ull, hits = 0;
    for (size_t i = 0; i < n; i++) {
        cache_item *it = cache_get(s, key_at(next_rand(&x) % n), KEY_LEN, NOW);
        hits += it != NULL;
        cache_item_release(it);
    }
    return hits;
}

static inline uint64_t set_random(cache_store *s, size_t n, uint64_t seed)
{
    uint64_t x = seed, stored = 0;
    for (size_t i = 0; i < n; i++)
        stored += set_key(s, next_rand(&x) % n) == CACHE_STORED;
    return stored;
}

static __attribute__((noinline)) uint64_t phase_set(cache_store *s, size_t n)
{
    return set_random(s, n, 88172645463325253ull);
}

/* Another seed, also so that the compiler does not fold it into phase_set. */
static __attribute__((noinline)) uint64_t phase_set_evicting(cache_store *s, size_t n)
{
    return set_random(s, n, 88172645463325254ull);
}

static void order_quality(unsigned shards, size_t cap)
{
    cache_store *s = make_store(CACHE_LOCK_MUTEX);
    size_t item = cache_store_item_size(s, KEY_LEN, 0, VAL_LEN), total = 4 * cap;
    cache_store_free(s);
    s = make_store_sized(CACHE_LOCK_MUTEX, (uint64_t)item * cap, shards);
    for (size_t i = 0; i < total; i++)
        set_key(s, i);
    size_t oldest = total, recent = 0, evicted = 0, older = 0;
    bool *present = calloc(total, sizeof *present);
    for (size_t i = 0; i < total; i++) {
        cache_item *it = cache_get(s, key_at(i), KEY_LEN, NOW);
        present[i] = it != NULL;
        cache_item_release(it);
        if (present[i] && oldest == total)
            oldest = i;
        recent += present[i] && i >= total - cap;
    }
    for (size_t i = 0; i < total; i++)
        if (!present[i]) {
            evicted++;
            older += i < oldest;
        }
    printf("  %6u shards: %zu of the %zu most recent kept (%.2f %%), evicted older than the "
           "oldest survivor %.4f\n",
           shards, recent, cap, 100.0 * (double)recent / (double)cap,
           evicted ? (double)older / (double)evicted : 1.0);
    free(present);
    cache_store_free(s);
}

static int phases(size_t n)
{
    cache_store *s = make_store(CACHE_LOCK_MUTEX);
    size_t item = cache_store_item_size(s, KEY_LEN, 0, VAL_LEN);
    fill(s, n);
    uint64_t hits = phase_get(s, n), stored = phase_set(s, n);
    cache_store_free(s);
    s = make_store_sized(CACHE_LOCK_MUTEX, (uint64_t)item * (n / 4), 0);
    fill(s, n);
    cache_stats st;
    cache_store_stats(s, &st);
    uint64_t ev0 = st.evictions, evict_stored = phase_set_evicting(s, n);
    cache_store_stats(s, &st);
    printf("phases of %zu operations: get hits %llu, sets stored %llu, evicting sets stored %llu "
           "with %llu evictions\n",
           n, (unsigned long long)hits, (unsigned long long)stored,
           (unsigned long long)evict_stored, (unsigned long long)(st.evictions - ev0));
    cache_store_free(s);
    return 0;
}

int main(int argc, char **argv)
{
    size_t n = 1000000;
    unsigned ms = 1000;
    int opt;
    bool by_phase = false, order = false;
    while ((opt = getopt(argc, argv, "n:d:po")) != -1) {
        if (opt == 'n')
            n = (size_t)atol(optarg);
        else if (opt == 'p')
            by_phase = true;
        else if (opt == 'o')
            order = true;
        else if (opt == 'd')
            ms = (unsigned)atoi(optarg);
        else {
            fprintf(stderr, "usage: %s [-n items] [-d ms_per_run] [-p | -o]\n", argv[0]);
            return 2;
        }
    }
    if (n < 1000 || ms < 10) {
        fprintf(stderr, "-n must be >= 1000 and -d >= 10\n");
        return 2;
    }
    g_keys = malloc(n * KEY_LEN);
    for (size_t i = 0; i < n; i++) {
        char buf[KEY_LEN + 1];
        snprintf(buf, sizeof buf, "key:%028zu", i);
        memcpy(g_keys + i * KEY_LEN, buf, KEY_LEN);
    }
    memset(g_val, 'v', VAL_LEN);
    if (by_phase) {
        int rc = phases(n);
        free(g_keys);
        return rc;
    }
    if (order) {
        static const unsigned shard_counts[] = {1, 16, 64, 256, 1024, 4096};
        size_t cap = n / 4 < 20000 ? n / 4 : 20000;
        printf("eviction order: %zu keys written one after another into a store holding %zu\n",
               4 * cap, cap);
        for (size_t i = 0; i < sizeof shard_counts / sizeof shard_counts[0]; i++)
            order_quality(shard_counts[i], cap);
        free(g_keys);
        return 0;
    }

    uint64_t rss0 = rss_bytes();
    cache_store *s = make_store(CACHE_LOCK_MUTEX);
    uint64_t t0 = mono_ns();
    fill(s, n);
    uint64_t t1 = mono_ns();
    uint64_t rss1 = rss_bytes();
    cache_stats st;
    cache_store_stats(s, &st);
    printf("insert %zu items (%d-byte keys, %d-byte values, 64 shards): %.0f ns/insert\n", n,
           KEY_LEN, VAL_LEN, (double)(t1 - t0) / (double)n);
    printf("  RSS growth:     %.1f bytes/item (%.1f MiB)\n", (double)(rss1 - rss0) / (double)n,
           (double)(rss1 - rss0) / (1024.0 * 1024.0));
    printf("  accounted:      %.1f bytes/item (size class of header + key + value = %zu)\n",
           (double)st.mem_used / (double)n, cache_store_item_size(s, KEY_LEN, 0, VAL_LEN));
    printf("  payload:        %d bytes/item; mallocs %llu, resizes %llu\n", KEY_LEN + VAL_LEN,
           (unsigned long long)st.mallocs, (unsigned long long)st.resizes);
    cache_store_free(s);

    printf("\nns per operation (wall time / ops; %zu keys, uniform random, all hits):\n", n);
    printf("  %-6s %10s %10s %12s %16s\n", "lock", "get 1T", "set 1T", "get 2T", "90:10 mix 2T");
    for (int lk = 0; lk < 2; lk++) {
        s = make_store((cache_lock_kind)lk);
        fill(s, n);
        double g1 = measure(s, n, 1, 0, ms), s1 = measure(s, n, 1, 100, ms),
               g2 = measure(s, n, 2, 0, ms), m2 = measure(s, n, 2, 10, ms);
        printf("  %-6s %10.1f %10.1f %12.1f %16.1f\n", lk ? "spin" : "mutex", g1, s1, g2, m2);
        cache_store_stats(s, &st);
        cache_store_free(s);
    }
    printf("(2T figures are aggregate: 2 threads' ops over the same wall time)\n");

    /* The class size is the store's constant: a throwaway store tells it. */
    s = make_store(CACHE_LOCK_MUTEX);
    size_t item = cache_store_item_size(s, KEY_LEN, 0, VAL_LEN);
    cache_store_free(s);
    printf("\nsets into a store holding a quarter of the %zu keys (3 in 4 sets evict), ns/op "
           "(wall, and the threads' CPU):\n",
           n);
    printf("  %-6s %10s %10s %10s %10s %12s %8s\n", "lock", "set 1T", "cpu 1T", "set 2T", "cpu 2T",
           "evictions", "per set");
    for (int lk = 0; lk < 2; lk++) {
        s = make_store_sized((cache_lock_kind)lk, (uint64_t)item * (n / 4), 0);
        fill(s, n);
        cache_store_stats(s, &st);
        uint64_t ev0 = st.evictions, sets0 = st.sets;
        double c1, c2, s1 = measure_ex(s, n, 1, 100, ms, true, &c1),
                       s2 = measure_ex(s, n, 2, 100, ms, true, &c2);
        cache_store_stats(s, &st);
        printf("  %-6s %10.1f %10.1f %10.1f %10.1f %12llu %8.2f\n", lk ? "spin" : "mutex", s1, c1,
               s2, c2, (unsigned long long)(st.evictions - ev0),
               (double)(st.evictions - ev0) / (double)(st.sets - sets0));
        cache_store_free(s);
    }
    free(g_keys);
    return 0;
}
