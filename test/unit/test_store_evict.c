/* Cache store eviction (store_evict.c): NO_MEMORY when everything is pinned, eviction across
 * shards in one LRU order (exact up to 64 shards, sampled beyond), and what it spares. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "check_main.h"
#include "test_store.h"

/* NO_MEMORY: everything left is pinned by readers. Eviction still unlinks the pinned items (a
 * reader's reference keeps only that reader's copy alive), but their memory stays reserved
 * until released, so the new item cannot fit. */
START_TEST(test_no_memory_when_pinned)
{
    size_t sz;
    cache_store *s = mk_items(2, 1, &sz);
    put100(s, "a", 1);
    put100(s, "b", 1);
    cache_item *ra = cache_get(s, "a", 1, 1), *rb = cache_get(s, "b", 1, 1);
    ck_assert_int_eq(put100(s, "c", 1), CACHE_NO_MEMORY);
    ck_assert(!has(s, "c", 1));
    ck_assert(!has(s, "a", 1));
    ck_assert(!has(s, "b", 1));
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.mem_used, 2 * sz);
    ck_assert_uint_eq(st.curr_items, 0);
    ck_assert_uint_eq(st.bytes, 0);
    ck_assert_uint_eq(cache_item_vlen(ra), 100);
    ck_assert_int_eq(cache_item_value(rb)[99], 'v');
    cache_item_release(ra);
    ck_assert_uint_eq(stats(s).mem_used, sz);
    cache_item_release(rb);
    ck_assert_uint_eq(stats(s).mem_used, 0);
    ck_assert_int_eq(put100(s, "c", 1), CACHE_STORED);
    cache_store_free(s);
}
END_TEST

START_TEST(test_evict_across_shards)
{
    size_t sz;
    cache_store *s = mk_items(8, 4, &sz);
    char key[8];
    int stored = 0, i = 0;
    /* Fill the store from shards 1..3 only. */
    while (stored < 8) {
        snprintf(key, sizeof key, "%c%c", 'a' + i / 26, 'a' + i % 26);
        i++;
        if (cache_store_shard_of(s, key, 2) == 0)
            continue;
        ck_assert_int_eq(put100(s, key, 1), CACHE_STORED);
        stored++;
    }
    ck_assert_uint_eq(stats(s).evictions, 0);
    do {
        snprintf(key, sizeof key, "%c%c", 'a' + i / 26, 'a' + i % 26);
        i++;
    } while (cache_store_shard_of(s, key, 2) != 0);
    cache_table_info ti;
    cache_store_table_info(s, 0, &ti);
    ck_assert_uint_eq(ti.items, 0);
    ck_assert_int_eq(put100(s, key, 1), CACHE_STORED);
    ck_assert(has(s, key, 1));
    cache_stats st = stats(s);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_uint_eq(st.curr_items, 8);
    ck_assert_uint_le(st.mem_used, st.mem_limit);
    cache_store_free(s);
}
END_TEST

/* ---- eviction order across shards (issue 12) ----------------------------------------------
 * One LRU order for the whole store, whichever shard a key hashes to: memcached's lru.t writes
 * large items one after another and expects exactly the oldest to go, and a key written (or
 * appended to, touched, read twice) recently must not be evicted while older ones survive. */

/* A store whose limit holds exactly n items of klen-byte keys and vlen-byte values. */
static cache_store *mk_fit(unsigned n, unsigned shards, size_t klen, size_t vlen)
{
    cache_store *tmp = mk(MiB, 1, CACHE_LOCK_MUTEX);
    size_t sz = cache_store_item_size(tmp, klen, 0, vlen);
    cache_store_free(tmp);
    return mk(sz * n, shards, CACHE_LOCK_MUTEX);
}

static int put_n(cache_store *s, const char *key, size_t vlen, uint64_t now)
{
    int err;
    cache_item *it = cache_item_new(s, key, strlen(key), vlen, 0, 0, NULL, 0, &err);
    if (!it)
        return err;
    memset(cache_item_value_mut(it), 'v', vlen);
    return cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, now);
}

static void key_n(char *buf, size_t len, unsigned i)
{
    snprintf(buf, len, "e%06u", i); /* 7 bytes */
}

/* Whether the key is stored, without reading it (a get marks the item: fetched, then active). */
static int match_key(const cache_item *it, void *arg)
{
    const char *key = arg;
    return cache_item_klen(it) == strlen(key) && memcmp(cache_item_key(it), key, strlen(key)) == 0;
}

static bool stored_quietly(cache_store *s, const char *key, uint64_t now)
{
    return cache_store_foreach(s, now, match_key, (void *)key) != 0;
}

/* Writes `total` keys one after another into a store holding `cap`; returns which survived
 * (one get each, after the last write: a single read changes nothing). */
static void write_sequence(cache_store *s, unsigned total, bool *present)
{
    char key[16];
    for (unsigned i = 0; i < total; i++) {
        key_n(key, sizeof key, i);
        ck_assert_int_eq(put_n(s, key, 100, 1 + i), CACHE_STORED);
    }
    for (unsigned i = 0; i < total; i++) {
        key_n(key, sizeof key, i);
        present[i] = has(s, key, 1 + total);
    }
}

/* Ordering quality of one run: of the evicted items, the fraction older than the oldest
 * survivor (1 = exact LRU order), and the number of survivors. */
static double evicted_older_fraction(const bool *present, unsigned total, unsigned *survivors)
{
    unsigned oldest = total, evicted = 0, older = 0;
    *survivors = 0;
    for (unsigned i = 0; i < total; i++) {
        if (present[i]) {
            (*survivors)++;
            if (oldest == total)
                oldest = i;
        }
    }
    for (unsigned i = 0; i < total; i++) {
        if (!present[i]) {
            evicted++;
            older += i < oldest;
        }
    }
    return evicted ? (double)older / evicted : 1.0;
}

/* Up to 64 shards every eviction compares every shard's tail: the survivors are exactly the
 * `cap` most recent keys, the evicted exactly the older ones (fraction 1.0). */
START_TEST(test_evict_global_order)
{
    static const unsigned shard_counts[] = {64, 16, 4};
    enum { CAP = 500, TOTAL = 4 * CAP };
    static bool present[TOTAL];
    cache_store *s = mk_fit(CAP, shard_counts[_i], 7, 100);
    write_sequence(s, TOTAL, present);
    for (unsigned i = 0; i < TOTAL; i++)
        ck_assert_msg(present[i] == (i >= TOTAL - CAP), "key %u: present %d", i, present[i]);
    unsigned survivors;
    ck_assert(evicted_older_fraction(present, TOTAL, &survivors) == 1.0);
    ck_assert_uint_eq(survivors, CAP);
    ck_assert_uint_eq(stats(s).evictions, TOTAL - CAP);
    cache_store_free(s);
}
END_TEST

/* Above 64 shards an eviction compares a window of 64 shards' tails (sampled, as redis does):
 * the order is approximate. Bound kept: at least 95 % of the evicted items are older than the
 * oldest survivor... measured below and printed; the bound asserted is the one stated in
 * store.h. */
START_TEST(test_evict_order_sampled)
{
    enum { CAP = 2000, TOTAL = 4 * CAP };
    static bool present[TOTAL];
    cache_store *s = mk_fit(CAP, 1024, 7, 100);
    write_sequence(s, TOTAL, present);
    unsigned survivors, recent = 0;
    double f = evicted_older_fraction(present, TOTAL, &survivors);
    for (unsigned i = TOTAL - CAP; i < TOTAL; i++)
        recent += present[i];
    printf("eviction order, 1024 shards, %u items in a store for %u: evicted older than the "
           "oldest survivor %.4f, most recent %u kept %u\n",
           TOTAL, CAP, f, CAP, recent);
    ck_assert_uint_eq(survivors, CAP);
    ck_assert_uint_ge(recent, CAP * 95 / 100);
    cache_store_free(s);
}
END_TEST

/* A working set read in one phase (each key read twice: WARM) and then no longer read gives way
 * to the next one: after 3 * CAP stores of new keys, few of the old keys are left and nearly all
 * of the newest CAP are. A run of items leaving WARM is dated by the newest CAS among them
 * (age_key); dated "now" at every look, they outlived newer items of every other shard (memcslap's
 * rounds of new keys: hits fell from 50 % to 21 % over four rounds). */
START_TEST(test_evict_old_working_set)
{
    enum { CAP = 2000, SHARDS = 64 };
    cache_store *s = mk_fit(CAP, SHARDS, 7, 100);
    char key[16];
    uint64_t now = 1000;
    for (unsigned i = 0; i < CAP; i++) {
        key_n(key, sizeof key, i);
        ck_assert_int_eq(put_n(s, key, 100, now), CACHE_STORED);
    }
    for (unsigned r = 0; r < 2; r++)
        for (unsigned i = 0; i < CAP; i++) {
            key_n(key, sizeof key, i);
            has(s, key, now += 1);
        }
    for (unsigned i = CAP; i < 4 * CAP; i++) {
        key_n(key, sizeof key, i);
        ck_assert_int_eq(put_n(s, key, 100, now += 1), CACHE_STORED);
    }
    unsigned old = 0, recent = 0;
    for (unsigned i = 0; i < CAP; i++) {
        key_n(key, sizeof key, i);
        old += stored_quietly(s, key, now);
        key_n(key, sizeof key, 3 * CAP + i);
        recent += stored_quietly(s, key, now);
    }
    printf("old working set: %u of %u left; newest %u: %u left\n", old, CAP, CAP, recent);
    ck_assert_uint_le(old, CAP / 20);
    ck_assert_uint_ge(recent, CAP * 90 / 100);
    cache_store_free(s);
}
END_TEST

/* A key written first, then touched (_i = 0) or read twice (_i = 1, memcached's ACTIVE), outlives
 * every key written before that: while any of them is present, so is it. Touched, it is evicted
 * soon after (its own shard dates it by the next key stored there); read twice, it is in WARM
 * and stays until memcached's age rule sends it to COLD. Read once (_i = 2) it is only marked
 * fetched and goes first, as in memcached. */
START_TEST(test_evict_keeps_recently_used)
{
    enum { CAP = 300, SHARDS = 64 };
    cache_store *s = mk_fit(CAP, SHARDS, 7, 100);
    char key[16], first[16];
    for (unsigned i = 0; i < CAP; i++) {
        key_n(key, sizeof key, i);
        ck_assert_int_eq(put_n(s, key, 100, 1), CACHE_STORED);
    }
    key_n(first, sizeof first, 0);
    if (_i == 0) {
        ck_assert_int_eq(cache_touch(s, first, strlen(first), 0, 2), CACHE_TOUCHED);
    } else {
        ck_assert(has(s, first, 2));
        if (_i == 1)
            ck_assert(has(s, first, 2));
    }
    if (_i == 2) { /* the next store evicts it, not the second oldest */
        key_n(key, sizeof key, CAP);
        ck_assert_int_eq(put_n(s, key, 100, 3), CACHE_STORED);
        ck_assert(!stored_quietly(s, first, 3));
        key_n(key, sizeof key, 1);
        ck_assert(stored_quietly(s, key, 3));
        cache_store_free(s);
        return;
    }
    /* CAP - 1 more keys: exactly the CAP - 1 written before the touch or reads must go. */
    for (unsigned i = CAP; i < 2 * CAP - 1; i++) {
        key_n(key, sizeof key, i);
        ck_assert_int_eq(put_n(s, key, 100, 3), CACHE_STORED);
        if (!stored_quietly(s, first, 3)) {
            for (unsigned j = 1; j < CAP; j++) {
                key_n(key, sizeof key, j);
                ck_assert_msg(!stored_quietly(s, key, 3), "key %u outlived a more recent one", j);
            }
        }
    }
    ck_assert_uint_eq(stats(s).evictions, CAP - 1);
    ck_assert(stored_quietly(s, first, 3));
    for (unsigned i = 1; i < CAP; i++) {
        key_n(key, sizeof key, i);
        ck_assert_msg(!stored_quietly(s, key, 3), "key %u, older than the touch, survived it", i);
    }
    if (_i == 0) {
        /* Touched: in HOT, then COLD, dated by the next key stored in its shard: gone well
         * before another CAP keys. */
        for (unsigned i = 2 * CAP - 1; i < 3 * CAP; i++) {
            key_n(key, sizeof key, i);
            ck_assert_int_eq(put_n(s, key, 100, 4), CACHE_STORED);
        }
        ck_assert(!stored_quietly(s, first, 4));
        cache_store_free(s);
        return;
    }
    /* Read twice: in WARM (memcached's segmented LRU), which eviction leaves alone while COLD
     * has items, so another CAP keys in the same second leave it there... */
    for (unsigned i = 2 * CAP - 1; i < 3 * CAP; i++) {
        key_n(key, sizeof key, i);
        ck_assert_int_eq(put_n(s, key, 100, 4), CACHE_STORED);
    }
    ck_assert(stored_quietly(s, first, 4));
    /* ...until it is idle for more than warm_max_factor (2) times its shard's COLD tail: keys
     * stored 100 s later make the COLD tails young once the CAP older keys are gone: it goes
     * down to COLD at its shard's next store, dated there by the keys moved down after it, and
     * is evicted within another CAP keys. */
    for (unsigned i = 3 * CAP; i < 6 * CAP; i++) {
        key_n(key, sizeof key, i);
        ck_assert_int_eq(put_n(s, key, 100, 100000), CACHE_STORED);
    }
    ck_assert(!stored_quietly(s, first, 100000));
    cache_store_free(s);
}
END_TEST

/* issue 12: many large items, and an append to one recently written key after each. The key
 * is always the most recent item (an append stores a new one), so it must never be evicted,
 * whichever shard it hashes to; before eviction was ordered across shards, a write into the
 * key's own shard evicted it there first. */
START_TEST(test_evict_spares_appended_key)
{
    enum { BIG = 64 * 1024, CAP = 40, ROUNDS = 400 };
    cache_store *s = mk_fit(CAP, 64, 8, BIG);
    ck_assert_int_eq(put(s, "appended", "a", CACHE_MODE_SET, 1), CACHE_STORED);
    char key[16];
    for (unsigned i = 0; i < ROUNDS; i++) {
        snprintf(key, sizeof key, "big%05u", i);
        ck_assert_int_eq(put_n(s, key, BIG, 2 + i), CACHE_STORED);
        ck_assert_msg(put(s, "appended", "a", CACHE_MODE_APPEND, 2 + i) == CACHE_STORED,
                      "append %u: the key was evicted", i);
    }
    cache_item *it = cache_get(s, "appended", 8, 2 + ROUNDS);
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(cache_item_vlen(it), ROUNDS + 1);
    cache_item_release(it);
    ck_assert_uint_gt(stats(s).evictions, ROUNDS - CAP);
    cache_store_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store_evict");
    TCase *tc0 = tcase_create("memory");
    tcase_add_test(tc0, test_no_memory_when_pinned);
    tcase_add_test(tc0, test_evict_across_shards);
    tcase_add_loop_test(tc0, test_evict_global_order, 0, 3);
    tcase_add_test(tc0, test_evict_order_sampled);
    tcase_add_loop_test(tc0, test_evict_keeps_recently_used, 0, 3);
    tcase_add_test(tc0, test_evict_old_working_set);
    tcase_add_test(tc0, test_evict_spares_appended_key);
    suite_add_tcase(s, tc0);
    return sf_run_suite(s);
}
