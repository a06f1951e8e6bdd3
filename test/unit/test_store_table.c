/* Cache store hash table (store_table.c): the incremental resize, with lookups, inserts and
 * deletes while the old and new tables live side by side. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "check_main.h"
#include "test_store.h"

static void key_of(char *buf, size_t n, unsigned i)
{
    snprintf(buf, n, "key:%u", i);
}

/* Every key 0..n-1 present with its value; returns how many were not. */
static unsigned count_missing(cache_store *s, unsigned n)
{
    unsigned missing = 0;
    char key[32];
    for (unsigned i = 0; i < n; i++) {
        key_of(key, sizeof key, i);
        cache_item *it = cache_get(s, key, strlen(key), 1);
        if (!it || cache_item_vlen(it) != 4 || memcmp(cache_item_value(it), &i, 4) != 0)
            missing++;
        cache_item_release(it);
    }
    return missing;
}

START_TEST(test_incremental_resize)
{
    enum { N = 200000 };
    unsigned shards = _i ? 8 : 1;
    cache_store *s = mk(512 * MiB, shards, CACHE_LOCK_MUTEX);
    char key[32];
    unsigned missing = 0, checks = 0, bad_put = 0;
    size_t last_checked = 0;
    for (unsigned i = 0; i < N; i++) {
        key_of(key, sizeof key, i);
        int e;
        cache_item *it = cache_item_new(s, key, strlen(key), 4, 0, 0, NULL, 0, &e);
        memcpy(cache_item_value_mut(it), &i, 4);
        bad_put += cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, 1) != CACHE_STORED;
        /* The newest key and an old one, every time. */
        missing += count_missing(s, 1) + !has(s, key, 1);
        /* Mid-resize (shard 0 half migrated): everything inserted so far is reachable. */
        cache_table_info ti;
        cache_store_table_info(s, 0, &ti);
        if (ti.old_buckets >= 1024 && ti.migrated >= ti.old_buckets / 2 &&
            ti.old_buckets != last_checked) {
            last_checked = ti.old_buckets;
            missing += count_missing(s, i + 1);
            checks++;
        }
    }
    ck_assert_uint_eq(bad_put, 0);
    ck_assert_uint_eq(missing, 0);
    ck_assert_uint_ge(checks, shards == 1 ? 7 : 4);
    ck_assert_uint_eq(count_missing(s, N), 0);
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.curr_items, N);
    ck_assert_uint_ge(st.resizes, shards == 1 ? 13 : 8 * 10);
    size_t total_buckets = 0;
    for (unsigned i = 0; i < shards; i++) {
        cache_table_info ti;
        cache_store_table_info(s, i, &ti);
        total_buckets += ti.buckets;
    }
    ck_assert_uint_ge(total_buckets, N / 2); /* load factor stayed near 1 */
    ck_assert_uint_le(total_buckets, 4 * (size_t)N);
    cache_store_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store_table");
    TCase *tc0 = tcase_create("scale");
    tcase_set_timeout(tc0, 120); /* sanitizer builds */
    tcase_add_loop_test(tc0, test_incremental_resize, 0, 2);
    suite_add_tcase(s, tc0);
    return sf_run_suite(s);
}
