/* Cache store classes (store_class.c): the allocation classes' footprint, the free lists' reuse,
 * memcached's size classes and the per-class counters. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "check_main.h"
#include "test_store.h"

/* Slab classes (no per-chunk overhead): 8-byte steps to 1 KiB, then steps of 1/16 of each power
 * of two to 7936 (8 chunks to a 64 KiB page); then
 * malloc'ed classes of 16k - 16 bytes (glibc's chunk filled exactly, the store's address before
 * the item) up to 1 MiB, exact sizes beyond. The header is 52 bytes; nonzero client flags take 4
 * more, after the value. */
START_TEST(test_size_classes)
{
    cache_store *s = mk(64 * MiB, 1, CACHE_LOCK_MUTEX);
    const size_t hdr = 52 + 1; /* header + the 1-byte key */
    ck_assert_uint_eq(cache_store_item_size(s, 1, 0, 0), 64);
    ck_assert_uint_eq(cache_store_item_size(s, 32, 0, 100), 184); /* the 1M-item benchmark */
    /* The same item with client flags: 188 bytes, in the 192-byte class. */
    cache_item *it =
        cache_item_new(s, "0123456789abcdef0123456789abcdef", 32, 100, 7, 0, NULL, 0, &(int){0});
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(cache_item_size(it), 192);
    ck_assert_uint_eq(cache_item_flags(it), 7);
    cache_item_release(it);
    size_t prev = 0;
    int bad = 0;
    for (size_t v = 0; v < 2 * MiB; v = v < 8192 ? v + 1 : v + 997) {
        size_t sz = cache_store_item_size(s, 1, 0, v), raw = hdr + v;
        bad += sz < prev || sz < raw;
        if (raw <= 1024) /* 64: the smallest class */
            bad += sz % 8 != 0 || (sz >= raw + 8 && sz != 64);
        else if (raw <= 7936)
            bad += sz % 8 != 0 || sz > raw + raw / 16;
        else if (raw <= MiB - 16)
            bad += sz % 16 != 0 || sz > raw + raw / 4 + 16;
        else
            bad += sz != raw; /* plain malloc: the exact size */
        prev = sz;
    }
    ck_assert_int_eq(bad, 0);
    ck_assert_uint_eq(cache_store_item_size(s, 1, 0, MiB - 16 - hdr), MiB - 16);
    ck_assert_uint_eq(cache_store_item_size(s, 1, 0, MiB - 15 - hdr), MiB - 15);
    cache_store_free(s);
}
END_TEST

START_TEST(test_freelist_reuse)
{
    cache_store *s = mk(64 * MiB, 64, CACHE_LOCK_MUTEX);
    char key[16], v[300];
    memset(v, 'q', sizeof v - 1);
    v[sizeof v - 1] = 0;
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 50; k++) {
            snprintf(key, sizeof key, "f%d", k);
            put(s, key, v, CACHE_MODE_SET, 1);
        }
    uint64_t m0 = stats(s).mallocs;
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "f%d", i % 50);
        bad += put(s, key, v, i % 2 ? CACHE_MODE_SET : CACHE_MODE_REPLACE, 1) != CACHE_STORED;
        cache_item *it = cache_get(s, key, strlen(key), 1);
        bad += !it;
        cache_item_release(it);
    }
    ck_assert_int_eq(bad, 0);
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.mallocs, m0);
    ck_assert_uint_gt(st.free_bytes, 0);
    cache_store_free(s);
}
END_TEST

/* memcached's two reclaim counters: reclaimed counts dead items whose memory was taken back (a
 * set taking the place of its key's dead item, or the sweep); crawler_reclaimed the part the
 * sweep, our LRU crawler, took. */
START_TEST(test_reclaim_counters)
{
    cache_store_config c = {.max_memory_bytes = 64 * MiB};
    char err[128];
    cache_store *s = cache_store_new(&c, err, sizeof err);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(put_full(s, "a", "x", 0, 2000, CACHE_MODE_SET, 0, NULL, 1000), CACHE_STORED);
    ck_assert_int_eq(put_full(s, "b", "x", 0, 2000, CACHE_MODE_SET, 0, NULL, 1000), CACHE_STORED);
    ck_assert_int_eq(put(s, "a", "y", CACHE_MODE_SET, 3000), CACHE_STORED); /* a was dead */
    unsigned cursor = 0;
    ck_assert_uint_eq(cache_store_sweep(s, &cursor, 1u << 20, 3000), 1); /* b */
    static cache_class_stats cls[CACHE_CLASSES_MAX];
    cache_store_class_stats(s, cls, 3000);
    uint64_t reclaimed = 0, crawler = 0;
    for (unsigned k = 0; k < CACHE_CLASSES_MAX; k++) {
        reclaimed += cls[k].reclaimed;
        crawler += cls[k].crawler_reclaimed;
    }
    ck_assert_uint_eq(reclaimed, 2);
    ck_assert_uint_eq(crawler, 1);
    cache_store_free(s);
}
END_TEST

START_TEST(test_memcached_size_classes)
{
    /* memcached 1.6.18 -vv with its defaults prints these chunk sizes for classes 1..39 */
    static const size_t want[] = {96,     120,    152,    192,    240,    304,    384,   480,
                                  600,    752,    944,    1184,   1480,   1856,   2320,  2904,
                                  3632,   4544,   5680,   7104,   8880,   11104,  13880, 17352,
                                  21696,  27120,  33904,  42384,  52984,  66232,  82792, 103496,
                                  129376, 161720, 202152, 252696, 315872, 394840, 524288};
    cache_store_config c = {.max_memory_bytes = 64 * MiB, .max_item_bytes = 1024 * 1024};
    char err[128];
    cache_store *s = cache_store_new(&c, err, sizeof err);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(cache_store_size_classes(s), 39);
    for (unsigned k = 1; k <= 39; k++) {
        ck_assert_uint_eq(cache_store_class_chunk(s, k), want[k - 1]);
        ck_assert_uint_eq(cache_store_size_class(s, want[k - 1]), k);
        if (k < 39)
            ck_assert_uint_eq(cache_store_size_class(s, want[k - 1] + 1), k + 1);
    }
    ck_assert_uint_eq(cache_store_size_class(s, 0), 1);
    ck_assert_uint_eq(cache_store_size_class(s, 5 * MiB), 39); /* chunked: the largest class */
    ck_assert_uint_eq(cache_store_class_chunk(s, 0), 0);
    ck_assert_uint_eq(cache_store_class_chunk(s, 40), 0);
    cache_store_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store_class");
    TCase *tc0 = tcase_create("semantics");
    tcase_add_test(tc0, test_memcached_size_classes);
    tcase_add_test(tc0, test_reclaim_counters);
    suite_add_tcase(s, tc0);
    TCase *tc1 = tcase_create("memory");
    tcase_add_test(tc1, test_size_classes);
    tcase_add_test(tc1, test_freelist_reuse);
    suite_add_tcase(s, tc1);
    return sf_run_suite(s);
}
