/* Cache store LRU (store_lru.c): the order items leave in, memcached's HOT/WARM/COLD/TEMP
 * segments and their moves, and the flat LRU. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "check_main.h"
#include "test_store.h"

START_TEST(test_lru_order)
{
    size_t sz;
    cache_store *s = mk_items(4, 1, &sz);
    ck_assert_int_eq(put100(s, "k0", 1), CACHE_STORED);
    ck_assert_int_eq(put100(s, "k1", 1), CACHE_STORED);
    ck_assert_int_eq(put100(s, "k2", 1), CACHE_STORED);
    ck_assert_int_eq(put100(s, "k3", 1), CACHE_STORED);
    ck_assert_uint_eq(stats(s).evictions, 0);
    ck_assert(has(s, "k1", 1)); /* read once: only marked fetched (memcached's rule) */
    ck_assert(has(s, "k0", 1));
    ck_assert(has(s, "k0", 1)); /* read twice: active, so now the most recent */
    ck_assert_int_eq(put100(s, "k4", 1), CACHE_STORED);
    ck_assert_int_eq(put100(s, "k5", 1), CACHE_STORED);
    ck_assert(has(s, "k0", 1)); /* once more (a fetched item needs one hit to be active again) */
    ck_assert_int_eq(cache_touch(s, "k3", 2, 0, 1), CACHE_TOUCHED); /* touch bumps too */
    ck_assert_int_eq(put100(s, "k6", 1), CACHE_STORED);
    ck_assert(!has(s, "k1", 1));
    ck_assert(!has(s, "k2", 1));
    ck_assert(!has(s, "k4", 1));
    ck_assert(has(s, "k0", 1));
    ck_assert(has(s, "k3", 1));
    ck_assert(has(s, "k5", 1));
    ck_assert(has(s, "k6", 1));
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.evictions, 3);
    ck_assert_uint_eq(st.curr_items, 4);
    ck_assert_uint_eq(st.mem_used, 4 * sz);
    cache_store_free(s);
}
END_TEST

/* ---- memcached's segments (store.h "Segments") --------------------------------------------- */

/* The segment gauges and move counters, summed over the classes. */
static cache_class_stats seg_totals(cache_store *s, uint64_t now)
{
    static cache_class_stats cls[CACHE_CLASSES_MAX];
    cache_class_stats t;
    memset(&t, 0, sizeof t);
    cache_store_class_stats(s, cls, now);
    for (unsigned k = 0; k < CACHE_CLASSES_MAX; k++) {
#define SEG_ADD(name) t.name += cls[k].name;
        CACHE_CLASS_COUNTERS(SEG_ADD)
        CACHE_CLASS_GAUGES(SEG_ADD)
#undef SEG_ADD
        t.age_hot = cls[k].age_hot > t.age_hot ? cls[k].age_hot : t.age_hot;
        t.age_warm = cls[k].age_warm > t.age_warm ? cls[k].age_warm : t.age_warm;
    }
    return t;
}

static cache_store *mk_seg(uint64_t mem, bool flat, uint32_t temp_ttl_s)
{
    cache_store_config c = {.max_memory_bytes = mem,
                            .shards = 1,
                            .seed = 42,
                            .flat_lru = flat,
                            .temporary_ttl_s = temp_ttl_s};
    char err[128];
    cache_store *s = cache_store_new(&c, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    return s;
}

/* New items go to HOT, whose tails go down to COLD past 20 % of the shard's bytes; an item read
 * twice in COLD goes to WARM; an active WARM tail stays in WARM; HOT and WARM tails idle longer
 * than 0.2 / 2 times the COLD tail go down by age. Every step is a juggle the stats count. */
START_TEST(test_lru_segments)
{
    cache_store *s = mk_seg(64 * MiB, false, 0);
    char key[16];
    for (unsigned i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "s%u", i);
        ck_assert_int_eq(put100(s, key, 1000), CACHE_STORED);
    }
    cache_class_stats t = seg_totals(s, 1000);
    ck_assert_uint_eq(t.number_hot, 2); /* 20 % of 10 equal items */
    ck_assert_uint_eq(t.number_cold, 8);
    ck_assert_uint_eq(t.number_warm + t.number_temp, 0);
    ck_assert_uint_eq(t.moves_to_cold, 8);
    ck_assert_uint_eq(stats(s).lru_juggles, 10);
    ck_assert(has(s, "s0", 1000)); /* fetched */
    ck_assert_uint_eq(seg_totals(s, 1000).number_warm, 0);
    ck_assert(has(s, "s0", 1000)); /* active, in COLD: to WARM */
    t = seg_totals(s, 1000);
    ck_assert_uint_eq(t.number_warm, 1);
    ck_assert_uint_eq(t.moves_to_warm, 1);
    ck_assert_uint_eq(t.hits_to_cold, 2);
    ck_assert(has(s, "s0", 1000)); /* fetched: active again, a mark only in WARM */
    ck_assert(has(s, "s0", 1000));
    ck_assert_uint_eq(seg_totals(s, 1000).hits_to_warm, 2);
    ck_assert_int_eq(put100(s, "s10", 1000), CACHE_STORED); /* the juggle rescues it in WARM */
    t = seg_totals(s, 1000);
    ck_assert_uint_eq(t.moves_within_lru, 1);
    ck_assert_uint_eq(t.number_warm, 1);
    /* 10 s on: the COLD tail (s1) is 10 s idle; s0 (idle 10 s) is not idle more than twice
     * that, the HOT tails (10 s) are more than 0.2 times: HOT empties into COLD */
    unsigned cursor = 0;
    cache_store_sweep(s, &cursor, 1, 11000);
    t = seg_totals(s, 11000);
    ck_assert_uint_eq(t.number_hot, 0);
    ck_assert_uint_eq(t.number_warm, 1);
    ck_assert_uint_eq(t.age_warm, 10);
    /* a fresh COLD tail: s0 is idle more than twice its age and goes down */
    for (unsigned i = 1; i < 11; i++) {
        snprintf(key, sizeof key, "s%u", i);
        ck_assert_int_eq(cache_delete(s, key, strlen(key), 0, 11000), CACHE_DELETED);
    }
    uint64_t down = seg_totals(s, 11000).moves_to_cold;
    ck_assert_int_eq(put100(s, "n1", 11000), CACHE_STORED);
    ck_assert_int_eq(put100(s, "n2", 11000), CACHE_STORED); /* n1 to COLD, then s0 */
    t = seg_totals(s, 11000);
    ck_assert_uint_eq(t.number_warm, 0);
    ck_assert_uint_eq(t.number_cold, 2);
    ck_assert_uint_eq(t.number_hot, 1);
    ck_assert_uint_eq(t.moves_to_cold, down + 2);
    cache_store_free(s);
}
END_TEST

/* flat_lru: one list (COLD), no moves, no juggles; a read item gets a second chance. */
START_TEST(test_lru_flat)
{
    cache_store *s = mk_seg(64 * MiB, true, 0);
    ck_assert_int_eq(put100(s, "a", 1000), CACHE_STORED);
    ck_assert_int_eq(put100(s, "b", 1000), CACHE_STORED);
    ck_assert(has(s, "a", 1000));
    ck_assert(has(s, "a", 1000));
    cache_class_stats t = seg_totals(s, 1000);
    ck_assert_uint_eq(t.number_cold, 2);
    ck_assert_uint_eq(t.number_hot + t.number_warm + t.number_temp, 0);
    ck_assert_uint_eq(t.moves_to_cold + t.moves_to_warm + t.moves_within_lru, 0);
    ck_assert_uint_eq(stats(s).lru_juggles, 0);
    cache_store_free(s);
}
END_TEST

/* temporary_ttl: an item stored with a TTL within it goes to TEMP and is never evicted, however
 * old; once only TEMP items are left, a store answers NO_MEMORY. */
START_TEST(test_lru_temp)
{
    size_t sz;
    cache_store *tmp = mk_items(1, 1, &sz);
    cache_store_free(tmp);
    cache_store *s = mk_seg(4 * sz, false, 61);
    char v[101];
    memset(v, 'v', 100);
    v[100] = 0;
    ck_assert_int_eq(put_full(s, "tmp", v, 0, 1000 + 30000, CACHE_MODE_SET, 0, NULL, 1000),
                     CACHE_STORED); /* TTL 30 s <= 61 */
    ck_assert_int_eq(put_full(s, "long", v, 0, 1000 + 3600000, CACHE_MODE_SET, 0, NULL, 1000),
                     CACHE_STORED);
    cache_class_stats t = seg_totals(s, 1000);
    ck_assert_uint_eq(t.number_temp, 1);
    ck_assert_uint_eq(t.number_hot + t.number_cold, 1);
    char key[16];
    for (unsigned i = 0; i < 20; i++) {
        snprintf(key, sizeof key, "k%u", i);
        ck_assert_int_eq(put_full(s, key, v, 0, 0, CACHE_MODE_SET, 0, NULL, 2000), CACHE_STORED);
    }
    ck_assert_uint_eq(stats(s).evictions, 18);
    ck_assert_uint_eq(seg_totals(s, 2000).number_temp, 1);
    ck_assert(has(s, "tmp", 2000)); /* unread, oldest, kept */
    /* all TEMP now: nothing evictable */
    for (unsigned i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "t%u", i);
        ck_assert_int_eq(put_full(s, key, v, 0, 3000 + 10000, CACHE_MODE_SET, 0, NULL, 3000),
                         CACHE_STORED);
    }
    ck_assert_uint_eq(seg_totals(s, 3000).number_temp, 4);
    ck_assert_int_eq(put_full(s, "more", v, 0, 0, CACHE_MODE_SET, 0, NULL, 3000), CACHE_NO_MEMORY);
    /* TEMP items still expire */
    unsigned cursor = 0;
    ck_assert_uint_eq(cache_store_sweep(s, &cursor, 1u << 20, 40000), 4);
    ck_assert_int_eq(put_full(s, "more", v, 0, 0, CACHE_MODE_SET, 0, NULL, 40000), CACHE_STORED);
    cache_store_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store_lru");
    TCase *tc0 = tcase_create("memory");
    tcase_add_test(tc0, test_lru_order);
    tcase_add_test(tc0, test_lru_segments);
    tcase_add_test(tc0, test_lru_flat);
    tcase_add_test(tc0, test_lru_temp);
    suite_add_tcase(s, tc0);
    return sf_run_suite(s);
}
