/* Cache store operations: every store mode with memcached's edge cases, delete, touch, incr/decr,
 * invalidate, expiry and flush at explicit times, restore, references that outlive their key,
 * counters, the meta commands' history, and a multi-threaded run with both lock kinds. The
 * store's parts have their own files (test_store_class.c, _table, _lru, _evict, _walk), as the
 * store has (cache/store_int.h). */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "check_main.h"
#include "test_store.h"

START_TEST(test_config_rejects)
{
    char err[128];
    cache_store_config c = {.max_memory_bytes = MiB, .shards = 3};
    ck_assert_ptr_null(cache_store_new(&c, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "power of two"));
    c.shards = 8192;
    ck_assert_ptr_null(cache_store_new(&c, err, sizeof err));
    c = (cache_store_config){.max_memory_bytes = 0};
    ck_assert_ptr_null(cache_store_new(&c, err, sizeof err));
    c = (cache_store_config){.max_memory_bytes = MiB, .lock = (cache_lock_kind)7};
    ck_assert_ptr_null(cache_store_new(&c, err, sizeof err));
    c = (cache_store_config){.max_memory_bytes = MiB};
    cache_store *s = cache_store_new(&c, err, sizeof err);
    ck_assert_uint_eq(cache_store_shards(s), CACHE_DEFAULT_SHARDS);
    cache_store_free(s);
}
END_TEST

START_TEST(test_key_validation)
{
    char k[260];
    memset(k, 'k', sizeof k);
    ck_assert(cache_key_valid(k, 250));
    ck_assert(!cache_key_valid(k, 251));
    ck_assert(!cache_key_valid(k, 0));
    ck_assert(cache_key_valid("!~", 2));
    ck_assert(!cache_key_valid("a b", 3));
    ck_assert(!cache_key_valid("a\nb", 3));
    ck_assert(!cache_key_valid("a\x7f", 2));
    ck_assert(!cache_key_valid("\x80", 1));
    ck_assert(!cache_key_valid("a\0b", 3));
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    int err = -1;
    ck_assert_ptr_null(cache_item_new(s, "a b", 3, 1, 0, 0, NULL, 0, &err));
    ck_assert_int_eq(err, CACHE_BAD_KEY);
    ck_assert_ptr_null(cache_item_new(s, k, 251, 1, 0, 0, NULL, 0, &err));
    ck_assert_int_eq(err, CACHE_BAD_KEY);
    char ct[130];
    memset(ct, 't', sizeof ct);
    ck_assert_ptr_null(cache_item_new(s, "a", 1, 1, 0, 0, ct, 128, &err));
    ck_assert_int_eq(err, CACHE_BAD_ARG);
    cache_item *it = cache_item_new(s, k, 250, 3, 0, 0, ct, 127, &err);
    ck_assert_ptr_nonnull(it);
    ck_assert_int_eq(err, CACHE_OK);
    memcpy(cache_item_value_mut(it), "xyz", 3);
    ck_assert_int_eq(cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, 1), CACHE_STORED);
    it = cache_get(s, k, 250, 1);
    ck_assert_ptr_nonnull(it);
    size_t ctlen;
    ck_assert_uint_eq(cache_item_klen(it), 250);
    ck_assert_int_eq(memcmp(cache_item_key(it), k, 250), 0);
    ck_assert_uint_eq(cache_item_vlen(it), 3);
    ck_assert_int_eq(memcmp(cache_item_value(it), "xyz", 3), 0);
    ck_assert_ptr_nonnull(cache_item_ctype(it, &ctlen));
    ck_assert_uint_eq(ctlen, 127);
    cache_item_release(it);
    /* An unstored item can be dropped (connection closed mid-value). */
    it = cache_item_new(s, "z", 1, 10, 0, 0, NULL, 0, &err);
    cache_item_release(it);
    ck_assert_uint_eq(stats(s).mem_used, cache_store_item_size(s, 250, 127, 3));
    cache_store_free(s);
}
END_TEST

START_TEST(test_set_get_cas_unique)
{
    cache_store *s = mk(16 * MiB, 8, CACHE_LOCK_MUTEX);
    uint64_t c1 = 0, c2 = 0;
    ck_assert_int_eq(put_full(s, "k", "v1", 17, 0, CACHE_MODE_SET, 0, &c1, 10), CACHE_STORED);
    cache_item *it = cache_get(s, "k", 1, 10);
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(cache_item_flags(it), 17);
    ck_assert_uint_eq(cache_item_cas(it), c1);
    ck_assert_uint_eq(cache_item_expiry(it), 0);
    size_t ctlen = 9;
    cache_item_ctype(it, &ctlen);
    ck_assert_uint_eq(ctlen, 0);
    cache_item_release(it);
    ck_assert_int_eq(put_full(s, "k", "v2", 0, 0, CACHE_MODE_SET, 0, &c2, 10), CACHE_STORED);
    ck_assert_uint_gt(c2, c1);
    ck_assert_str_eq(val(s, "k", 10), "v2");
    ck_assert_ptr_null(cache_get(s, "nope", 4, 10));
    /* CAS values are unique across shards. */
    enum { N = 2000 };
    static uint64_t cas[N];
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "u%d", i);
        put_full(s, key, "x", 0, 0, CACHE_MODE_SET, 0, &cas[i], 10);
    }
    int dup = 0;
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++)
            dup += cas[i] == cas[j] || cas[i] == 0;
    ck_assert_int_eq(dup, 0);
    cache_store_free(s);
}
END_TEST

START_TEST(test_add_replace)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_SPIN);
    ck_assert_int_eq(put(s, "r", "x", CACHE_MODE_REPLACE, 1), CACHE_NOT_STORED);
    ck_assert(!has(s, "r", 1));
    ck_assert_int_eq(put(s, "a", "1", CACHE_MODE_ADD, 1), CACHE_STORED);
    ck_assert_int_eq(put(s, "a", "2", CACHE_MODE_ADD, 1), CACHE_NOT_STORED);
    ck_assert_str_eq(val(s, "a", 1), "1");
    ck_assert_int_eq(put(s, "a", "3", CACHE_MODE_REPLACE, 1), CACHE_STORED);
    ck_assert_str_eq(val(s, "a", 1), "3");
    /* ADD on an expired key stores; REPLACE on one does not. */
    ck_assert_int_eq(put_full(s, "e", "old", 0, 100, CACHE_MODE_SET, 0, NULL, 1), CACHE_STORED);
    ck_assert_int_eq(put(s, "e", "new", CACHE_MODE_REPLACE, 100), CACHE_NOT_STORED);
    ck_assert_int_eq(put(s, "e", "new", CACHE_MODE_ADD, 100), CACHE_STORED);
    ck_assert_str_eq(val(s, "e", 200), "new");
    ck_assert_uint_eq(stats(s).expired_lazy, 1);
    ck_assert_uint_eq(stats(s).curr_items, 2);
    cache_store_free(s);
}
END_TEST

START_TEST(test_append_prepend)
{
    cache_store_config c = {.max_memory_bytes = MiB, .max_item_bytes = 8, .shards = 2};
    char err[64];
    cache_store *s = cache_store_new(&c, err, sizeof err);
    ck_assert_int_eq(put(s, "m", "x", CACHE_MODE_APPEND, 1), CACHE_NOT_STORED);
    ck_assert_int_eq(put(s, "m", "x", CACHE_MODE_PREPEND, 1), CACHE_NOT_STORED);
    ck_assert(!has(s, "m", 1));
    ck_assert_int_eq(put_full(s, "k", "b", 7, 5000, CACHE_MODE_SET, 0, NULL, 1), CACHE_STORED);
    uint64_t c0 = cas_of(s, "k", 1), c1 = 0;
    /* The new bytes' own flags and expiry are ignored: the old ones stay. */
    ck_assert_int_eq(put_full(s, "k", "cd", 9, 0, CACHE_MODE_APPEND, 0, &c1, 2), CACHE_STORED);
    ck_assert_int_eq(put_full(s, "k", "a", 9, 9, CACHE_MODE_PREPEND, 0, NULL, 3), CACHE_STORED);
    cache_item *it = cache_get(s, "k", 1, 4);
    ck_assert_int_eq(memcmp(cache_item_value(it), "abcd", 4), 0);
    ck_assert_uint_eq(cache_item_vlen(it), 4);
    ck_assert_uint_eq(cache_item_flags(it), 7);
    ck_assert_uint_eq(cache_item_expiry(it), 5000);
    ck_assert_uint_gt(c1, c0);
    ck_assert_uint_gt(cache_item_cas(it), c1);
    cache_item_release(it);
    /* Past max_item_bytes: refused, old value intact. */
    ck_assert_int_eq(put(s, "k", "12345", CACHE_MODE_APPEND, 5), CACHE_TOO_LARGE);
    ck_assert_str_eq(val(s, "k", 5), "abcd");
    ck_assert_int_eq(put(s, "k", "1234", CACHE_MODE_APPEND, 5), CACHE_STORED);
    ck_assert_str_eq(val(s, "k", 5), "abcd1234");
    /* Expired: nothing to append to. */
    ck_assert_int_eq(put(s, "k", "z", CACHE_MODE_APPEND, 5000), CACHE_NOT_STORED);
    ck_assert_uint_eq(stats(s).bytes, stats(s).mem_used);
    cache_store_free(s);
}
END_TEST

/* A content type belongs to the bytes it came with: a value the store computes has none. */
static size_t ctype_len_of(cache_store *s, const char *key, uint64_t now)
{
    cache_item *it = cache_get(s, key, strlen(key), now);
    ck_assert_ptr_nonnull(it);
    size_t ctlen;
    cache_item_ctype(it, &ctlen);
    cache_item_release(it);
    return ctlen;
}

START_TEST(test_computed_values_drop_the_content_type)
{
    cache_store *s = mk(16 * MiB, 2, CACHE_LOCK_MUTEX);
    const char *keys[] = {"app", "pre", "inc", "dec", "held"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int err;
        cache_item *it = cache_item_new(s, keys[i], strlen(keys[i]), 1, 0, 0, "text/html", 9, &err);
        memcpy(cache_item_value_mut(it), "7", 1);
        ck_assert_int_eq(cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, 1), CACHE_STORED);
        ck_assert_uint_eq(ctype_len_of(s, keys[i], 1), 9);
    }
    ck_assert_int_eq(put(s, "app", "<svg/>", CACHE_MODE_APPEND, 2), CACHE_STORED);
    ck_assert_int_eq(put(s, "pre", "<svg/>", CACHE_MODE_PREPEND, 2), CACHE_STORED);
    uint64_t v;
    ck_assert_int_eq(cache_incr(s, "inc", 3, 1, false, &v, 2), CACHE_OK); /* same length */
    ck_assert_int_eq(cache_incr(s, "dec", 3, 1, true, &v, 2), CACHE_OK);
    cache_item *reader = cache_get(s, "held", 4, 2); /* a reader holds it: the copying path */
    ck_assert_int_eq(cache_incr(s, "held", 4, 100, false, &v, 2), CACHE_OK);
    cache_item_release(reader);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(ctype_len_of(s, keys[i], 3) == 0, "%s kept its content type", keys[i]);
    ck_assert_str_eq(val(s, "inc", 3), "8");
    ck_assert_str_eq(val(s, "held", 3), "107");
    cache_store_free(s);
}
END_TEST

START_TEST(test_cas_mode)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    ck_assert_int_eq(put_full(s, "c", "v", 0, 0, CACHE_MODE_CAS, 1, NULL, 1), CACHE_NOT_FOUND);
    ck_assert(!has(s, "c", 1));
    uint64_t c1, c2 = 0;
    put_full(s, "c", "v1", 0, 0, CACHE_MODE_SET, 0, &c1, 1);
    ck_assert_int_eq(put_full(s, "c", "v2", 0, 0, CACHE_MODE_CAS, c1 + 1, NULL, 1), CACHE_EXISTS);
    ck_assert_str_eq(val(s, "c", 1), "v1");
    ck_assert_int_eq(put_full(s, "c", "v2", 0, 0, CACHE_MODE_CAS, c1, &c2, 1), CACHE_STORED);
    ck_assert_str_eq(val(s, "c", 1), "v2");
    ck_assert_uint_gt(c2, c1);
    ck_assert_int_eq(put_full(s, "c", "v3", 0, 0, CACHE_MODE_CAS, c1, NULL, 1), CACHE_EXISTS);
    /* Expired counts as missing. */
    put_full(s, "x", "v", 0, 50, CACHE_MODE_SET, 0, &c1, 1);
    ck_assert_int_eq(put_full(s, "x", "w", 0, 0, CACHE_MODE_CAS, c1, NULL, 50), CACHE_NOT_FOUND);
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.cas_hits, 1);
    ck_assert_uint_eq(st.cas_badval, 2);
    ck_assert_uint_eq(st.cas_misses, 2);
    cache_store_free(s);
}
END_TEST

START_TEST(test_delete)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    ck_assert_int_eq(cache_delete(s, "d", 1, 0, 1), CACHE_NOT_FOUND);
    uint64_t c;
    put_full(s, "d", "v", 0, 0, CACHE_MODE_SET, 0, &c, 1);
    ck_assert_int_eq(cache_delete(s, "d", 1, c + 1, 1), CACHE_EXISTS);
    ck_assert(has(s, "d", 1));
    ck_assert_int_eq(cache_delete(s, "d", 1, c, 1), CACHE_DELETED);
    ck_assert(!has(s, "d", 1));
    put(s, "d", "v", CACHE_MODE_SET, 1);
    ck_assert_int_eq(cache_delete(s, "d", 1, 0, 1), CACHE_DELETED);
    ck_assert_int_eq(cache_delete(s, "d", 1, 0, 1), CACHE_NOT_FOUND);
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.delete_hits, 2);
    ck_assert_uint_eq(st.delete_misses, 2);
    ck_assert_uint_eq(st.curr_items, 0);
    ck_assert_uint_eq(st.mem_used, 0);
    cache_store_free(s);
}
END_TEST

START_TEST(test_incr_decr)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    uint64_t v = 123;
    ck_assert_int_eq(cache_incr(s, "n", 1, 1, false, &v, 1), CACHE_NOT_FOUND);
    ck_assert_int_eq(cache_incr(s, "n", 1, 1, true, &v, 1), CACHE_NOT_FOUND);
    static const char *bad[] = {"abc",
                                "-1",
                                "+1",
                                " 1",
                                "1 ",
                                "1.5",
                                "18446744073709551616",
                                "99999999999999999999",
                                "000000000000000000001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put(s, "n", bad[i], CACHE_MODE_SET, 1);
        ck_assert_msg(cache_incr(s, "n", 1, 1, false, &v, 1) == CACHE_NOT_NUMERIC, "%s", bad[i]);
        ck_assert_str_eq(val(s, "n", 1), bad[i]);
    }
    /* Wrap at 2^64. */
    put(s, "n", "18446744073709551615", CACHE_MODE_SET, 1);
    ck_assert_int_eq(cache_incr(s, "n", 1, 1, false, &v, 1), CACHE_OK);
    ck_assert_uint_eq(v, 0);
    ck_assert_str_eq(val(s, "n", 1), "0");
    put(s, "n", "18446744073709551610", CACHE_MODE_SET, 1);
    ck_assert_int_eq(cache_incr(s, "n", 1, 10, false, &v, 1), CACHE_OK);
    ck_assert_uint_eq(v, 4);
    /* Decr floors at 0. */
    put(s, "n", "5", CACHE_MODE_SET, 1);
    ck_assert_int_eq(cache_incr(s, "n", 1, 10, true, &v, 1), CACHE_OK);
    ck_assert_uint_eq(v, 0);
    ck_assert_str_eq(val(s, "n", 1), "0");
    /* Length change 99 -> 100 keeps flags and expiry, changes the CAS. */
    put_full(s, "n", "99", 33, 9000, CACHE_MODE_SET, 0, NULL, 1);
    uint64_t c0 = cas_of(s, "n", 1);
    ck_assert_int_eq(cache_incr(s, "n", 1, 1, false, &v, 2), CACHE_OK);
    ck_assert_uint_eq(v, 100);
    cache_item *it = cache_get(s, "n", 1, 2);
    ck_assert_uint_eq(cache_item_vlen(it), 3);
    ck_assert_int_eq(memcmp(cache_item_value(it), "100", 3), 0);
    ck_assert_uint_eq(cache_item_flags(it), 33);
    ck_assert_uint_eq(cache_item_expiry(it), 9000);
    ck_assert_uint_gt(cache_item_cas(it), c0);
    /* Same length while a reader holds it: the reader's copy does not change. */
    ck_assert_int_eq(cache_incr(s, "n", 1, 5, false, &v, 2), CACHE_OK);
    ck_assert_int_eq(memcmp(cache_item_value(it), "100", 3), 0);
    cache_item_release(it);
    ck_assert_str_eq(val(s, "n", 2), "105");
    /* Same length, no reader: in place; CAS still moves. */
    c0 = cas_of(s, "n", 2);
    ck_assert_int_eq(cache_incr(s, "n", 1, 1, true, &v, 2), CACHE_OK);
    ck_assert_str_eq(val(s, "n", 2), "104");
    ck_assert_uint_gt(cas_of(s, "n", 2), c0);
    ck_assert_int_eq(cache_incr(s, "n", 1, 5, true, &v, 2), CACHE_OK);
    ck_assert_str_eq(val(s, "n", 2), "99");
    it = cache_get(s, "n", 1, 2);
    ck_assert_uint_eq(cache_item_flags(it), 33);
    cache_item_release(it);
    /* Expired: not found. */
    ck_assert_int_eq(cache_incr(s, "n", 1, 1, false, &v, 9000), CACHE_NOT_FOUND);
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.incr_hits, 4);
    ck_assert_uint_eq(st.decr_hits, 3);
    ck_assert_uint_eq(st.incr_misses, 2);
    ck_assert_uint_eq(st.decr_misses, 1);
    ck_assert_uint_eq(st.bytes, st.mem_used);
    cache_store_free(s);
}
END_TEST

START_TEST(test_touch_and_expiry)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    put_full(s, "t", "v", 0, 1000, CACHE_MODE_SET, 0, NULL, 1);
    ck_assert(has(s, "t", 999));
    ck_assert_int_eq(cache_touch(s, "t", 1, 2000, 999), CACHE_TOUCHED);
    ck_assert(has(s, "t", 1999));
    ck_assert(!has(s, "t", 2000));
    ck_assert_int_eq(cache_touch(s, "t", 1, 5000, 2000), CACHE_NOT_FOUND);
    put_full(s, "u", "v", 0, 1000, CACHE_MODE_SET, 0, NULL, 1);
    ck_assert_int_eq(cache_touch(s, "u", 1, 0, 10), CACHE_TOUCHED); /* never expires now */
    ck_assert(has(s, "u", UINT64_C(1) << 50));
    ck_assert_int_eq(cache_touch(s, "u", 1, 5, 10), CACHE_TOUCHED); /* in the past */
    ck_assert(!has(s, "u", 10));
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.touch_hits, 3);
    ck_assert_uint_eq(st.touch_misses, 1);
    ck_assert_uint_eq(st.expired_lazy, 2);
    ck_assert_uint_eq(st.curr_items, 0);
    ck_assert_uint_eq(st.mem_used, 0);
    cache_store_free(s);
}
END_TEST

START_TEST(test_flush_now)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    put(s, "a", "1", CACHE_MODE_SET, 90);
    put(s, "b", "2", CACHE_MODE_SET, 100);
    cache_item *ref = cache_get(s, "a", 1, 100);
    cache_flush_all(s, 100, 100);
    ck_assert(!has(s, "a", 100));
    ck_assert(!has(s, "b", 100));
    /* Stored in the flush's own millisecond, after it: survives. */
    ck_assert_int_eq(put(s, "c", "3", CACHE_MODE_ADD, 100), CACHE_STORED);
    ck_assert_int_eq(put(s, "b", "4", CACHE_MODE_ADD, 100), CACHE_STORED);
    ck_assert_str_eq(val(s, "c", 100), "3");
    ck_assert_str_eq(val(s, "b", 101), "4");
    ck_assert_int_eq(memcmp(cache_item_value(ref), "1", 1), 0);
    cache_item_release(ref);
    ck_assert_uint_eq(stats(s).flushed, 2);
    ck_assert_uint_eq(stats(s).curr_items, 2);
    cache_store_free(s);
}
END_TEST

START_TEST(test_flush_delayed)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    put(s, "a", "1", CACHE_MODE_SET, 100);
    cache_flush_all(s, 200, 100);
    ck_assert(has(s, "a", 150));
    put(s, "b", "2", CACHE_MODE_SET, 150);
    ck_assert(has(s, "b", 199));
    ck_assert(!has(s, "a", 200));
    ck_assert(!has(s, "b", 200));
    put(s, "c", "3", CACHE_MODE_SET, 200);
    put(s, "d", "4", CACHE_MODE_SET, 250);
    ck_assert(has(s, "c", 300));
    ck_assert(has(s, "d", 300));
    /* A later flush replaces a pending one; 0 cancels. */
    cache_flush_all(s, 1000, 300);
    cache_flush_all(s, 0, 300);
    ck_assert(has(s, "c", 2000));
    cache_store_free(s);
}
END_TEST

/* A flush already due is applied in every shard when a later flush is scheduled, whether or
 * not the shard saw traffic in between (review finding: it used to come back to life). */
START_TEST(test_flush_due_then_rescheduled)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    char key[16];
    for (int i = 0; i < 64; i++) {
        snprintf(key, sizeof key, "d%d", i);
        put(s, key, "v", CACHE_MODE_SET, 0);
    }
    cache_flush_all(s, 1000, 0);
    ck_assert(!has(s, "d0", 1001)); /* one shard saw the due flush */
    cache_flush_all(s, 61000, 1001);
    int alive = 0;
    for (int i = 0; i < 64; i++) {
        snprintf(key, sizeof key, "d%d", i);
        alive += has(s, key, 1002);
    }
    ck_assert_int_eq(alive, 0);
    cache_store_free(s);
}
END_TEST

/* Absurd restored CAS values (a foreign or crafted snapshot) cannot wrap the counter. */
START_TEST(test_restore_huge_cas)
{
    cache_store *s = mk(MiB, 64, CACHE_LOCK_MUTEX);
    int err;
    cache_item *it = cache_item_new(s, "h", 1, 1, 0, 0, NULL, 0, &err);
    cache_item_value_mut(it)[0] = 'v';
    ck_assert_int_eq(cache_store_restore(s, it, UINT64_MAX - 5, 1), CACHE_STORED);
    cache_store_raise_cas(s, UINT64_MAX - 5);
    uint64_t restored = cas_of(s, "h", 1), c;
    ck_assert_uint_lt(restored, CACHE_CAS_RESTORE_MAX);
    ck_assert_int_eq(put_full(s, "n", "w", 0, 0, CACHE_MODE_SET, 0, &c, 1), CACHE_STORED);
    ck_assert_uint_gt(c, 0);
    ck_assert_uint_ne(c, restored);
    cache_store_free(s);
}
END_TEST

START_TEST(test_too_large)
{
    cache_store_config c = {.max_memory_bytes = 4096, .max_item_bytes = 100000, .shards = 1};
    char err[64];
    cache_store *s = cache_store_new(&c, err, sizeof err);
    int e = 0;
    ck_assert_ptr_null(cache_item_new(s, "k", 1, 100001, 0, 0, NULL, 0, &e));
    ck_assert_int_eq(e, CACHE_TOO_LARGE);
    ck_assert_ptr_null(cache_item_new(s, "k", 1, 5000, 0, 0, NULL, 0, &e)); /* > max_memory */
    ck_assert_int_eq(e, CACHE_TOO_LARGE);
    cache_item *it = cache_item_new(s, "k", 1, 3000, 0, 0, NULL, 0, &e);
    ck_assert_ptr_nonnull(it);
    memset(cache_item_value_mut(it), 'x', 3000);
    ck_assert_int_eq(cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, 1), CACHE_STORED);
    ck_assert_uint_le(stats(s).mem_used, 4096);
    cache_store_free(s);
}
END_TEST

START_TEST(test_reference_survives)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    put_full(s, "k", "first", 5, 0, CACHE_MODE_SET, 0, NULL, 1);
    cache_item *r1 = cache_get(s, "k", 1, 1);
    put(s, "k", "second", CACHE_MODE_SET, 1);
    cache_item *r2 = cache_get(s, "k", 1, 1);
    ck_assert_int_eq(cache_delete(s, "k", 1, 0, 1), CACHE_DELETED);
    put(s, "k", "third-and-longer", CACHE_MODE_SET, 1);
    cache_flush_all(s, 1, 1);
    ck_assert(!has(s, "k", 2));
    ck_assert_uint_eq(cache_item_vlen(r1), 5);
    ck_assert_int_eq(memcmp(cache_item_value(r1), "first", 5), 0);
    ck_assert_uint_eq(cache_item_flags(r1), 5);
    ck_assert_int_eq(memcmp(cache_item_value(r2), "second", 6), 0);
    ck_assert_uint_gt(stats(s).mem_used, stats(s).bytes);
    cache_item_release(r2);
    cache_item_release(r1);
    ck_assert_uint_eq(stats(s).mem_used, 0);
    cache_store_free(s);
}
END_TEST

START_TEST(test_stats_counters)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_SPIN);
    put(s, "a", "1", CACHE_MODE_SET, 1);
    put(s, "b", "22", CACHE_MODE_SET, 1);
    put(s, "a", "x", CACHE_MODE_ADD, 1); /* not stored: not a set */
    has(s, "a", 1);
    has(s, "a", 1);
    has(s, "zz", 1);
    cache_delete(s, "b", 1, 0, 1);
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.sets, 2);
    ck_assert_uint_eq(st.get_hits, 2);
    ck_assert_uint_eq(st.get_misses, 1);
    ck_assert_uint_eq(st.delete_hits, 1);
    ck_assert_uint_eq(st.curr_items, 1);
    ck_assert_uint_eq(st.bytes, cache_store_item_size(s, 1, 0, 1));
    ck_assert_uint_eq(st.mem_used, st.bytes);
    ck_assert_uint_eq(st.mem_limit, MiB);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_uint_gt(st.mallocs, 0);
    cache_store_free(s);
}
END_TEST

/* Snapshot loading keeps each item's CAS; everything issued afterwards is larger. */
START_TEST(test_restore_keeps_cas)
{
    cache_store *s = mk(MiB, 4, CACHE_LOCK_MUTEX);
    const uint64_t restored[] = {UINT64_C(1) << 40, 77, (UINT64_C(1) << 40) + 3};
    const char *keys[] = {"r0", "r1", "r2"};
    for (int i = 0; i < 3; i++) {
        int err;
        cache_item *it = cache_item_new(s, keys[i], 2, 1, 9, 0, NULL, 0, &err);
        ck_assert_ptr_nonnull(it);
        cache_item_value_mut(it)[0] = 'v';
        ck_assert_int_eq(cache_store_restore(s, it, restored[i], 1), CACHE_STORED);
    }
    cache_store_raise_cas(s, (UINT64_C(1) << 40) + 3);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(cas_of(s, keys[i], 1), restored[i]);
    /* cas against the restored value works; new values exceed every restored one */
    uint64_t c;
    ck_assert_int_eq(put_full(s, "r1", "w", 0, 0, CACHE_MODE_CAS, 77, &c, 1), CACHE_STORED);
    ck_assert_uint_gt(c, (UINT64_C(1) << 40) + 3);
    ck_assert_int_eq(put_full(s, "fresh", "w", 0, 0, CACHE_MODE_SET, 0, &c, 1), CACHE_STORED);
    ck_assert_uint_gt(c, (UINT64_C(1) << 40) + 3);
    /* a flush kills restored items too */
    cache_flush_all(s, 2, 2);
    ck_assert(!has(s, "r0", 2));
    ck_assert(!has(s, "r2", 2));
    cache_store_free(s);
}
END_TEST

/* ---- concurrency ---------------------------------------------------------------------------- */

enum { NKEYS = 512, NCTR = 8, NAPP = 8, OPS = 100000, THREADS = 4 };

typedef struct worker {
    cache_store *s;
    unsigned seed;
    uint64_t gets, hits, stored, deleted, incrs, incr_missing, malformed, appended;
} worker;

static unsigned rnd(unsigned *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* A value of length L is L copies of 'a' + L % 26: a torn or mixed-up item shows. */
static bool well_formed(const cache_item *it, char kind)
{
    size_t n = cache_item_vlen(it);
    const char *v = cache_item_value(it);
    if (cache_item_key(it)[0] != kind)
        return false;
    for (size_t i = 0; i < n; i++) {
        char want = kind == 'k' ? (char)('a' + n % 26) : kind == 'p' ? 'x' : 0;
        if (kind == 'c' ? (v[i] < '0' || v[i] > '9') : v[i] != want)
            return false;
    }
    return n > 0;
}

static void *worker_run(void *p)
{
    worker *w = p;
    char key[16], val[256];
    for (int i = 0; i < OPS; i++) {
        unsigned r = rnd(&w->seed), op = r % 100, k = (r >> 8) % NKEYS;
        uint64_t now = 1 + (uint64_t)i / 1000;
        if (op < 50) {
            char kind = op < 40 ? 'k' : op < 45 ? 'c' : 'p';
            snprintf(key, sizeof key, "%c%u", kind, kind == 'k' ? k : k % NCTR);
            cache_item *it = cache_get(w->s, key, strlen(key), now);
            w->gets++;
            if (it) {
                w->hits++;
                w->malformed += !well_formed(it, kind);
                cache_item_release(it);
            }
        } else if (op < 75) {
            size_t n = 1 + (r >> 20) % 200;
            memset(val, 'a' + (int)(n % 26), n);
            val[n] = 0;
            snprintf(key, sizeof key, "k%u", k);
            w->stored += put(w->s, key, val, (cache_mode)(op % 3), now) == CACHE_STORED;
        } else if (op < 85) {
            snprintf(key, sizeof key, "k%u", k);
            w->deleted += cache_delete(w->s, key, strlen(key), 0, now) == CACHE_DELETED;
        } else if (op < 97) {
            snprintf(key, sizeof key, "c%u", k % NCTR);
            uint64_t v;
            int rc = cache_incr(w->s, key, strlen(key), 1, false, &v, now);
            w->incrs += rc == CACHE_OK;
            w->incr_missing += rc != CACHE_OK;
        } else {
            snprintf(key, sizeof key, "p%u", k % NAPP);
            w->appended += put(w->s, key, "x", CACHE_MODE_APPEND, now) == CACHE_STORED;
        }
    }
    return NULL;
}

/* _i bit 0: lock kind; bit 1: a store small enough that eviction runs all the time (then
 * the exact-count invariants give way to well-formedness and the memory bound). */
START_TEST(test_concurrent)
{
    bool small = _i & 2;
    cache_store *s =
        mk(small ? 48 * 1024 : 64 * MiB, 16, _i & 1 ? CACHE_LOCK_SPIN : CACHE_LOCK_MUTEX);
    char key[16];
    for (int i = 0; i < NCTR; i++) {
        snprintf(key, sizeof key, "c%d", i);
        ck_assert_int_eq(put(s, key, "0", CACHE_MODE_ADD, 1), CACHE_STORED);
        snprintf(key, sizeof key, "p%d", i);
        ck_assert_int_eq(put(s, key, "x", CACHE_MODE_ADD, 1), CACHE_STORED);
    }
    worker w[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t] = (worker){.s = s, .seed = 2463534242u + (unsigned)t * 7919u};
        pthread_create(&th[t], NULL, worker_run, &w[t]);
    }
    worker sum = {0};
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        sum.gets += w[t].gets;
        sum.hits += w[t].hits;
        sum.stored += w[t].stored;
        sum.deleted += w[t].deleted;
        sum.incrs += w[t].incrs;
        sum.incr_missing += w[t].incr_missing;
        sum.malformed += w[t].malformed;
        sum.appended += w[t].appended;
    }
    cache_stats st = stats(s);
    ck_assert_uint_eq(sum.malformed, 0);
    ck_assert_uint_eq(st.get_hits, sum.hits);
    ck_assert_uint_eq(st.get_hits + st.get_misses, sum.gets);
    ck_assert_uint_eq(st.sets, sum.stored + sum.appended + 2 * NCTR);
    ck_assert_uint_eq(st.delete_hits, sum.deleted);
    ck_assert_uint_eq(st.incr_hits, sum.incrs);
    ck_assert_uint_gt(sum.hits, 0);
    ck_assert_uint_gt(sum.deleted, 0);
    ck_assert_uint_le(st.mem_used, st.mem_limit);
    uint64_t ctr_total = 0, app_total = 0, present = 0;
    int malformed = 0;
    for (int i = 0; i < NCTR; i++) {
        snprintf(key, sizeof key, "c%d", i);
        cache_item *it = cache_get(s, key, strlen(key), 1000);
        if (it) {
            char buf[24] = {0};
            memcpy(buf, cache_item_value(it), cache_item_vlen(it));
            ctr_total += strtoull(buf, NULL, 10);
            malformed += !well_formed(it, 'c');
            present++;
        }
        cache_item_release(it);
        snprintf(key, sizeof key, "p%d", i);
        it = cache_get(s, key, strlen(key), 1000);
        if (it) {
            malformed += !well_formed(it, 'p');
            app_total += cache_item_vlen(it);
            present++;
        }
        cache_item_release(it);
    }
    if (small) {
        ck_assert_uint_gt(st.evictions, 1000);
    } else {
        /* Nothing evicted: every increment and every append landed exactly once. */
        ck_assert_uint_eq(st.evictions, 0);
        ck_assert_uint_eq(sum.incr_missing, 0);
        ck_assert_uint_eq(ctr_total, sum.incrs);
        ck_assert_uint_eq(app_total, sum.appended + NAPP);
    }
    for (unsigned k = 0; k < NKEYS; k++) {
        snprintf(key, sizeof key, "k%u", k);
        cache_item *it = cache_get(s, key, strlen(key), 1000);
        if (it) {
            present++;
            malformed += !well_formed(it, 'k');
        }
        cache_item_release(it);
    }
    ck_assert_int_eq(malformed, 0);
    st = stats(s);
    ck_assert_uint_eq(st.curr_items, present);
    ck_assert_uint_eq(st.bytes, st.mem_used); /* no reference outstanding */
    cache_store_free(s);
}
END_TEST

/* ---- history for memcached's meta commands ----------------------------------------------- */

static cache_item *meta_get(cache_store *s, const char *key, const cache_get_opts *o,
                            cache_item_meta *m, uint64_t now)
{
    return cache_get_meta(s, key, strlen(key), o, m, now);
}

START_TEST(test_meta_history)
{
    cache_store *s = mk(8 * MiB, 4, CACHE_LOCK_MUTEX);
    const uint64_t t0 = 1700000000000ull;
    cache_get_opts peek = {.no_bump = true, .count = CACHE_COUNT_NONE};
    cache_get_opts bump = {.count = CACHE_COUNT_GET};
    cache_item_meta m;
    ck_assert_int_eq(put(s, "a", "x", CACHE_MODE_SET, t0), CACHE_STORED);
    cache_item *it = meta_get(s, "a", &peek, &m, t0 + 2500);
    ck_assert_ptr_nonnull(it);
    cache_item_release(it);
    ck_assert(!m.fetched && !m.token_sent && !m.stale && !m.won);
    ck_assert_uint_eq(m.idle_s, 2); /* stored in second t0/1000, read two seconds later */
    cache_item_release(meta_get(s, "a", &peek, &m, t0 + 5000)); /* no_bump changes nothing */
    ck_assert(!m.fetched);
    ck_assert_uint_eq(m.idle_s, 5);
    cache_item_release(meta_get(s, "a", &bump, &m, t0 + 5000)); /* shows the state before */
    ck_assert(!m.fetched);
    ck_assert_uint_eq(m.idle_s, 5);
    cache_item_release(meta_get(s, "a", &peek, &m, t0 + 7000));
    ck_assert(m.fetched);
    ck_assert_uint_eq(m.idle_s, 2);
    /* a classic hit and a touch count as accesses; a new value starts a new history */
    ck_assert_int_eq(put(s, "b", "x", CACHE_MODE_SET, t0), CACHE_STORED);
    ck_assert(has(s, "b", t0 + 9000));
    cache_item_release(meta_get(s, "b", &peek, &m, t0 + 10000));
    ck_assert(m.fetched);
    ck_assert_uint_eq(m.idle_s, 1);
    ck_assert_int_eq(put(s, "c", "x", CACHE_MODE_SET, t0), CACHE_STORED);
    ck_assert_int_eq(cache_touch(s, "c", 1, 0, t0 + 3000), CACHE_TOUCHED);
    cache_item_release(meta_get(s, "c", &peek, &m, t0 + 3000));
    ck_assert(m.fetched);
    ck_assert_uint_eq(m.idle_s, 0);
    ck_assert_int_eq(put(s, "c", "y", CACHE_MODE_SET, t0 + 4000), CACHE_STORED);
    cache_item_release(meta_get(s, "c", &peek, &m, t0 + 4000));
    ck_assert(!m.fetched);
    /* a clock that went back reads as no idle time, not four billion seconds */
    cache_item_release(meta_get(s, "c", &peek, &m, t0));
    ck_assert_uint_eq(m.idle_s, 0);
    /* counters: get_*, touch_* or none */
    cache_stats before = stats(s);
    cache_get_opts tch = {.count = CACHE_COUNT_TOUCH};
    cache_item_release(meta_get(s, "c", &tch, &m, t0 + 4000));
    ck_assert_ptr_null(meta_get(s, "zz", &tch, &m, t0 + 4000));
    ck_assert_ptr_null(meta_get(s, "zz", &peek, &m, t0 + 4000));
    ck_assert_ptr_null(meta_get(s, "zz", &bump, &m, t0 + 4000));
    cache_stats after = stats(s);
    ck_assert_uint_eq(after.touch_hits - before.touch_hits, 1);
    ck_assert_uint_eq(after.touch_misses - before.touch_misses, 1);
    ck_assert_uint_eq(after.get_misses - before.get_misses, 1);
    ck_assert_uint_eq(after.get_hits - before.get_hits, 0);
    cache_store_free(s);
}
END_TEST

START_TEST(test_meta_recache_tokens)
{
    cache_store *s = mk(8 * MiB, 4, CACHE_LOCK_SPIN);
    const uint64_t t0 = 1700000000000ull;
    cache_item_meta m;
    ck_assert_int_eq(put_full(s, "a", "x", 0, t0 + 120000, CACHE_MODE_SET, 0, NULL, t0),
                     CACHE_STORED);
    /* R: 120 s left is not below 120 (whole seconds, as memcached), is below 121 */
    cache_get_opts r120 = {.recache_ms = t0 + 5 + 120000};
    cache_item_release(meta_get(s, "a", &r120, &m, t0 + 5));
    ck_assert(!m.won && !m.token_sent);
    cache_get_opts no_token = {.recache_ms = t0 + 121000, .no_token = true};
    cache_item_release(meta_get(s, "a", &no_token, &m, t0));
    ck_assert(!m.won && !m.token_sent);
    cache_get_opts r121 = {.recache_ms = t0 + 121000};
    cache_item_release(meta_get(s, "a", &r121, &m, t0));
    ck_assert(m.won && !m.token_sent);
    cache_item_release(meta_get(s, "a", &r121, &m, t0)); /* only one winner */
    ck_assert(!m.won && m.token_sent);
    /* T applied under the lock; R compares the new expiry only when T came first */
    ck_assert_int_eq(put_full(s, "b", "x", 0, t0 + 300000, CACHE_MODE_SET, 0, NULL, t0),
                     CACHE_STORED);
    cache_get_opts t_after = {
        .set_expiry = true, .expiry_ms = t0 + 10000, .recache_ms = t0 + 100000};
    cache_item_release(meta_get(s, "b", &t_after, &m, t0));
    ck_assert(!m.won);
    ck_assert_uint_eq(m.expiry_ms, t0 + 300000); /* the old one */
    cache_item *it = meta_get(s, "b", &(cache_get_opts){0}, &m, t0);
    ck_assert_uint_eq(cache_item_expiry(it), t0 + 10000);
    cache_item_release(it);
    t_after.recache_sees_new = true;
    cache_item_release(meta_get(s, "b", &t_after, &m, t0));
    ck_assert(m.won);
    /* no expiry: never a recache win */
    ck_assert_int_eq(put(s, "c", "x", CACHE_MODE_SET, t0), CACHE_STORED);
    cache_item_release(meta_get(s, "c", &r121, &m, t0));
    ck_assert(!m.won);
    /* created with its token out (mg N's creator) */
    int err;
    cache_item *n = cache_item_new_ex(s, "d", 1, 0, 0, 0, NULL, 0, CACHE_ITEM_TOKEN_SENT, &err);
    ck_assert_int_eq(cache_store_item(s, n, CACHE_MODE_ADD, 0, NULL, t0), CACHE_STORED);
    cache_item_release(meta_get(s, "d", &r121, &m, t0));
    ck_assert(m.token_sent && !m.won);
    cache_store_free(s);
}
END_TEST

START_TEST(test_invalidate)
{
    cache_store *s = mk(8 * MiB, 4, CACHE_LOCK_MUTEX);
    const uint64_t t0 = 1700000000000ull;
    cache_get_opts peek = {.no_bump = true, .count = CACHE_COUNT_NONE};
    cache_get_opts plain = {0};
    cache_item_meta m;
    ck_assert_int_eq(cache_invalidate(s, "a", 1, 0, false, 0, t0), CACHE_NOT_FOUND);
    uint64_t cas;
    ck_assert_int_eq(put_full(s, "a", "moo", 0, 0, CACHE_MODE_SET, 0, &cas, t0), CACHE_STORED);
    ck_assert_int_eq(cache_invalidate(s, "a", 1, cas + 1, false, 0, t0), CACHE_EXISTS);
    /* in place (only the table holds it) */
    ck_assert_int_eq(cache_invalidate(s, "a", 1, cas, true, t0 + 30000, t0), CACHE_DELETED);
    cache_item *it = meta_get(s, "a", &plain, &m, t0);
    ck_assert_ptr_nonnull(it);
    ck_assert(m.stale && m.won && !m.token_sent); /* the first reader of a stale item wins */
    ck_assert_uint_gt(cache_item_cas(it), cas);
    ck_assert_uint_eq(cache_item_expiry(it), t0 + 30000);
    ck_assert_str_eq(val(s, "a", t0), "moo");
    uint64_t cas2 = cache_item_cas(it);
    /* with a reader holding it: a marked copy replaces it, the reader's item is unchanged */
    ck_assert_int_eq(cache_invalidate(s, "a", 1, 0, false, 0, t0 + 1000), CACHE_DELETED);
    ck_assert_uint_eq(cache_item_cas(it), cas2);
    cache_item_release(it);
    it = meta_get(s, "a", &peek, &m, t0 + 1000);
    ck_assert(m.stale && !m.token_sent && m.fetched); /* the token is free again */
    ck_assert_uint_gt(cache_item_cas(it), cas2);
    ck_assert_uint_eq(cache_item_expiry(it), t0 + 30000);
    ck_assert_uint_eq(cache_item_vlen(it), 3);
    cache_item_release(it);
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.curr_items, 1);
    ck_assert_uint_eq(st.bytes, st.mem_used);
    cache_store_free(s);
}
END_TEST

START_TEST(test_cas_stale_mode)
{
    cache_store *s = mk(8 * MiB, 4, CACHE_LOCK_MUTEX);
    const uint64_t t0 = 1700000000000ull;
    cache_get_opts peek = {.no_bump = true, .count = CACHE_COUNT_NONE};
    cache_item_meta m;
    ck_assert_int_eq(put_full(s, "a", "x", 0, 0, CACHE_MODE_CAS_STALE, 1, NULL, t0),
                     CACHE_NOT_FOUND);
    /* CAS values are one store-wide sequence: a store before "a" makes CAS 1 an older one */
    ck_assert_int_eq(put(s, "before", "b", CACHE_MODE_SET, t0), CACHE_STORED);
    uint64_t cas;
    ck_assert_int_eq(put_full(s, "a", "x", 0, t0 + 30000, CACHE_MODE_SET, 0, &cas, t0),
                     CACHE_STORED);
    cache_item_release(meta_get(s, "a", &(cache_get_opts){.recache_ms = t0 + 60000}, &m, t0));
    ck_assert(m.won);
    ck_assert_int_eq(put_full(s, "a", "y", 0, 0, CACHE_MODE_CAS_STALE, 0, NULL, t0), CACHE_EXISTS);
    ck_assert_int_eq(put_full(s, "a", "y", 0, 0, CACHE_MODE_CAS_STALE, cas + 1, NULL, t0),
                     CACHE_EXISTS);
    /* older: stored, stale, old expiry and token mark kept */
    ck_assert_int_eq(put_full(s, "a", "y", 0, t0 + 90000, CACHE_MODE_CAS_STALE, 1, &cas, t0),
                     CACHE_STORED);
    cache_item *it = meta_get(s, "a", &peek, &m, t0);
    ck_assert(m.stale && m.token_sent);
    ck_assert_uint_eq(cache_item_expiry(it), t0 + 30000);
    ck_assert_str_eq(val(s, "a", t0), "y");
    cache_item_release(it);
    /* the current CAS: a plain CAS store, fresh history */
    ck_assert_int_eq(put_full(s, "a", "z", 0, t0 + 90000, CACHE_MODE_CAS_STALE, cas, NULL, t0),
                     CACHE_STORED);
    it = meta_get(s, "a", &peek, &m, t0);
    ck_assert(!m.stale && !m.token_sent);
    ck_assert_uint_eq(cache_item_expiry(it), t0 + 90000);
    cache_item_release(it);
    cache_store_free(s);
}
END_TEST

START_TEST(test_binary_keys)
{
    cache_store *s = mk(8 * MiB, 4, CACHE_LOCK_MUTEX);
    int err;
    const char k[] = "\x01\xff \r\n";
    ck_assert_ptr_null(cache_item_new(s, k, 5, 1, 0, 0, NULL, 0, &err));
    ck_assert_int_eq(err, CACHE_BAD_KEY);
    ck_assert_ptr_null(cache_item_new_ex(s, k, 0, 1, 0, 0, NULL, 0, CACHE_ITEM_KEY_BINARY, &err));
    cache_item *it = cache_item_new_ex(s, k, 5, 1, 0, 0, NULL, 0, CACHE_ITEM_KEY_BINARY, &err);
    ck_assert_ptr_nonnull(it);
    memcpy(cache_item_value_mut(it), "v", 1);
    ck_assert_int_eq(cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, 1000), CACHE_STORED);
    it = cache_get(s, k, 5, 1000);
    ck_assert_ptr_nonnull(it);
    ck_assert(cache_item_key_binary(it));
    ck_assert_mem_eq(cache_item_key(it), k, 5);
    cache_item_release(it);
    /* KEY_ANY: any bytes, no mark; the same bytes as a text key are the same item */
    it = cache_item_new_ex(s, "foo", 3, 1, 0, 0, NULL, 0, CACHE_ITEM_KEY_ANY, &err);
    memcpy(cache_item_value_mut(it), "w", 1);
    ck_assert_int_eq(cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, 1000), CACHE_STORED);
    it = cache_get(s, "foo", 3, 1000);
    ck_assert(!cache_item_key_binary(it));
    cache_item_release(it);
    /* an expiry beyond 48 bits of ms is clamped there, never wrapped to "never" */
    ck_assert_int_eq(put_full(s, "far", "x", 0, UINT64_MAX, CACHE_MODE_SET, 0, NULL, 1000),
                     CACHE_STORED);
    it = cache_get(s, "far", 3, 1000);
    ck_assert_uint_eq(cache_item_expiry(it), (UINT64_C(1) << 48) - 1);
    cache_item_release(it);
    cache_store_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store");
    TCase *tc0 = tcase_create("semantics");
    tcase_add_test(tc0, test_config_rejects);
    tcase_add_test(tc0, test_key_validation);
    tcase_add_test(tc0, test_set_get_cas_unique);
    tcase_add_test(tc0, test_add_replace);
    tcase_add_test(tc0, test_append_prepend);
    tcase_add_test(tc0, test_computed_values_drop_the_content_type);
    tcase_add_test(tc0, test_cas_mode);
    tcase_add_test(tc0, test_delete);
    tcase_add_test(tc0, test_incr_decr);
    tcase_add_test(tc0, test_touch_and_expiry);
    tcase_add_test(tc0, test_flush_now);
    tcase_add_test(tc0, test_flush_delayed);
    tcase_add_test(tc0, test_flush_due_then_rescheduled);
    tcase_add_test(tc0, test_restore_huge_cas);
    tcase_add_test(tc0, test_stats_counters);
    tcase_add_test(tc0, test_reference_survives);
    tcase_add_test(tc0, test_meta_history);
    tcase_add_test(tc0, test_meta_recache_tokens);
    tcase_add_test(tc0, test_invalidate);
    tcase_add_test(tc0, test_cas_stale_mode);
    tcase_add_test(tc0, test_binary_keys);
    suite_add_tcase(s, tc0);
    TCase *tc1 = tcase_create("memory");
    tcase_add_test(tc1, test_too_large);
    tcase_add_test(tc1, test_restore_keeps_cas);
    suite_add_tcase(s, tc1);
    TCase *tc2 = tcase_create("scale");
    tcase_set_timeout(tc2, 120); /* sanitizer builds */
    tcase_add_loop_test(tc2, test_concurrent, 0, 4);
    suite_add_tcase(s, tc2);
    return sf_run_suite(s);
}
