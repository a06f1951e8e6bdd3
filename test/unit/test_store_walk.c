/* Cache store walks (store_walk.c): the expiry sweep and cache_store_foreach (re-entrant,
 * concurrent with writers, every item exactly once). */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "check_main.h"
#include "test_store.h"

START_TEST(test_sweep)
{
    cache_store *s = mk(64 * MiB, 4, CACHE_LOCK_MUTEX);
    char key[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof key, "s%d", i);
        put_full(s, key, "v", 0, i % 2 ? 1000 : 0, CACHE_MODE_SET, 0, NULL, 1);
    }
    unsigned cursor = 0;
    ck_assert_uint_eq(cache_store_sweep(s, &cursor, 1u << 20, 999), 0); /* nothing expired yet */
    size_t first = cache_store_sweep(s, &cursor, 10, 2000), total = first;
    ck_assert_uint_lt(first, 100); /* ten buckets hold a handful of items, not 1000 */
    int calls = 1;
    while (total < 1000 && calls < 100000) {
        total += cache_store_sweep(s, &cursor, 10, 2000);
        calls++;
    }
    ck_assert_uint_eq(total, 1000);
    ck_assert_int_gt(calls, 20);
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.expired_swept, 1000);
    ck_assert_uint_eq(st.expired_lazy, 0);
    ck_assert_uint_eq(st.curr_items, 1000);
    ck_assert_uint_eq(st.bytes, st.mem_used);
    int missing = 0;
    for (int i = 0; i < 2000; i += 2) {
        snprintf(key, sizeof key, "s%d", i);
        missing += !has(s, key, 2000);
    }
    ck_assert_int_eq(missing, 0);
    /* Flushed items are reclaimed by the sweep too. */
    cache_flush_all(s, 3000, 3000);
    ck_assert_uint_eq(cache_store_sweep(s, &cursor, 1u << 20, 3000), 1000);
    ck_assert_uint_eq(stats(s).curr_items, 0);
    ck_assert_uint_eq(stats(s).mem_used, 0);
    cache_store_free(s);
}
END_TEST

/* foreach runs its callback without a shard lock: it may call into the store. */
static int touch_all(const cache_item *it, void *arg)
{
    cache_store *s = arg;
    cache_item *again = cache_get(s, cache_item_key(it), cache_item_klen(it), 1);
    ck_assert_ptr_eq(again, it);
    cache_item_release(again);
    return cache_delete(s, cache_item_key(it), cache_item_klen(it), 0, 1) == CACHE_DELETED ? 0 : 1;
}

START_TEST(test_foreach_reenters)
{
    cache_store *s = mk(MiB, 2, CACHE_LOCK_SPIN);
    char key[16];
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof key, "f%d", i);
        put(s, key, "x", CACHE_MODE_SET, 1);
    }
    ck_assert_int_eq(cache_store_foreach(s, 1, touch_all, s), 0);
    ck_assert_uint_eq(stats(s).curr_items, 0);
    ck_assert_uint_eq(stats(s).mem_used, 0);
    cache_store_free(s);
}
END_TEST

/* A walk keeps its place while other threads write, touch (moving items to the LRU head) and
 * evict: every item present throughout is visited, the walk ends, nothing is freed under it. */
typedef struct walk_load {
    cache_store *s;
    _Atomic bool stop;
    _Atomic unsigned ops;
} walk_load;

static void *walk_writer(void *arg)
{
    walk_load *w = arg;
    char key[32];
    for (unsigned i = 0; !atomic_load(&w->stop); i++) {
        snprintf(key, sizeof key, "churn%u", i % 5000);
        put(w->s, key, "churning-value", CACHE_MODE_SET, 1);
        snprintf(key, sizeof key, "stable%u", i % 2000);
        cache_touch(w->s, key, strlen(key), 0, 1); /* to the head: ahead of the walk again */
        atomic_store(&w->ops, i + 1);
    }
    return NULL;
}

static int count_stable(const cache_item *it, void *arg)
{
    unsigned *seen = arg;
    unsigned k;
    if (cache_item_klen(it) > 6 && memcmp(cache_item_key(it), "stable", 6) == 0 &&
        sscanf(cache_item_key(it) + 6, "%u", &k) == 1 && k < 2000)
        seen[k]++;
    return 0;
}

START_TEST(test_foreach_concurrent)
{
    /* room for the stable keys and part of the churn: evictions happen during the walks */
    cache_store *s = mk(256 * 1024, 4, _i ? CACHE_LOCK_SPIN : CACHE_LOCK_MUTEX);
    char key[32];
    for (unsigned i = 0; i < 2000; i++) {
        snprintf(key, sizeof key, "stable%u", i);
        put(s, key, "v", CACHE_MODE_SET, 1);
    }
    walk_load w = {.s = s};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, walk_writer, &w), 0);
    /* at least 20 walks, and until the writer has churned through the store a few times */
    for (int round = 0; round < 20 || atomic_load(&w.ops) < 20000; round++) {
        static unsigned seen[2000];
        memset(seen, 0, sizeof seen);
        ck_assert_int_eq(cache_store_foreach(s, 1, count_stable, seen), 0);
        unsigned missing = 0;
        for (unsigned i = 0; i < 2000; i++)
            missing += seen[i] == 0 && has(s, (snprintf(key, sizeof key, "stable%u", i), key), 1);
        ck_assert_uint_eq(missing, 0);
    }
    atomic_store(&w.stop, true);
    pthread_join(t, NULL);
    ck_assert_uint_gt(stats(s).evictions, 0);
    cache_store_free(s);
}
END_TEST

/* Every item present when the walk starts is visited exactly once, however many items are
 * stored or moved to the LRU head meanwhile; items stored during the walk are not visited. */
typedef struct walk_probe {
    cache_store *s;
    unsigned calls, visits[1000], newer;
} walk_probe;

static int probe_visit(const cache_item *it, void *arg)
{
    walk_probe *w = arg;
    unsigned k;
    if (w->calls++ == 0) { /* in the middle of the walk: churn and touch */
        char key[16];
        for (int i = 0; i < 3000; i++) {
            snprintf(key, sizeof key, "new%d", i);
            put(w->s, key, "n", CACHE_MODE_SET, 1);
        }
        for (int round = 0; round < 50; round++)
            for (int i = 0; i < 1000; i += 7) {
                snprintf(key, sizeof key, "k%d", i);
                cache_touch(w->s, key, strlen(key), 0, 1);
            }
    }
    if (cache_item_klen(it) >= 4 && memcmp(cache_item_key(it), "new", 3) == 0)
        w->newer++;
    else if (sscanf(cache_item_key(it), "k%u", &k) == 1 && k < 1000)
        w->visits[k]++;
    return 0;
}

START_TEST(test_foreach_exactly_once)
{
    cache_store *s = mk(64 * MiB, 1, CACHE_LOCK_MUTEX);
    char key[16];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        put(s, key, "v", CACHE_MODE_SET, 1);
    }
    static walk_probe w;
    memset(&w, 0, sizeof w);
    w.s = s;
    ck_assert_int_eq(cache_store_foreach(s, 1, probe_visit, &w), 0);
    for (int i = 0; i < 1000; i++)
        ck_assert_msg(w.visits[i] == 1, "k%d visited %u times", i, w.visits[i]);
    ck_assert_uint_eq(w.newer, 0);
    ck_assert_uint_eq(stats(s).walks_cut_short, 0);
    /* the next walk sees everything, the new keys included, once */
    memset(&w, 0, sizeof w);
    w.s = s;
    w.calls = 1; /* no churn this time */
    ck_assert_int_eq(cache_store_foreach(s, 1, probe_visit, &w), 0);
    ck_assert_uint_eq(w.newer, 3000);
    for (int i = 0; i < 1000; i++)
        ck_assert_uint_eq(w.visits[i], 1);
    cache_store_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store_walk");
    TCase *tc0 = tcase_create("memory");
    tcase_add_test(tc0, test_foreach_reenters);
    tcase_add_test(tc0, test_foreach_exactly_once);
    suite_add_tcase(s, tc0);
    TCase *tc1 = tcase_create("scale");
    tcase_set_timeout(tc1, 120); /* sanitizer builds */
    tcase_add_test(tc1, test_sweep);
    tcase_add_loop_test(tc1, test_foreach_concurrent, 0, 2);
    suite_add_tcase(s, tc1);
    return sf_run_suite(s);
}
