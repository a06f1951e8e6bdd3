/* UUIDv7 and ULID issue: compose/decompose inverse for every node width, 8 threads x 1M IDs of
 * each format strictly increasing per thread and unique, exhaustion continuing in the next
 * millisecond, clock-behind / sealed / lease refusals, restarts above the lease floor, and the
 * random bits really varying. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "snowflake/issue128.h"
#include "snowflake/rng.h"

#define T0 UINT64_C(1780000000000) /* 2026-05-28, a fixed "now" for fake clocks */

static sf_layout wide_layout(unsigned dc_bits, unsigned worker_bits)
{
    sf_layout l;
    char err[256];
    ck_assert_msg(sf_layout_init_unix_ms(&l, dc_bits, worker_bits, err, sizeof err) == 0, "%s",
                  err);
    return l;
}

static void gen_init(sf_gen *g, sf_sync_mode mode, uint32_t dc, uint32_t worker, clk_source *clock,
                     uint64_t min_tick)
{
    sf_gen_config cfg = {.layout = wide_layout(5, 5),
                         .datacenter = dc,
                         .worker = worker,
                         .sync = mode,
                         .max_backward_ms = 5,
                         .max_batch = 4096,
                         .min_tick = min_tick,
                         .clock = clock};
    char err[256];
    ck_assert_msg(sf_gen_init(g, &cfg, err, sizeof err) == 0, "%s", err);
}

START_TEST(test_layout_limits)
{
    sf_layout l;
    char err[256];
    ck_assert_int_eq(sf_layout_init_unix_ms(&l, 16, 15, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "at most 30 node bits"));
    l = wide_layout(15, 15);
    ck_assert(l.wide);
    ck_assert_uint_eq(l.tick_max, SF_ID128_MS_MAX);
    ck_assert_uint_eq(l.sequence_max, 4095);
    ck_assert_uint_eq(sf_id128_random_bits(&l, SF_FORMAT_UUID7), 32);
    ck_assert_uint_eq(sf_id128_random_bits(&l, SF_FORMAT_ULID), 38);
    l = wide_layout(5, 5);
    ck_assert_uint_eq(sf_id128_random_bits(&l, SF_FORMAT_UUID7), 52);
    ck_assert_uint_eq(sf_id128_random_bits(&l, SF_FORMAT_ULID), 58);
    /* A Snowflake generator refuses 64-bit IDs from a wide layout, and the reverse. */
    sf_gen g;
    gen_init(&g, SF_SYNC_ATOMIC, 0, 0, NULL, 0);
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_EINVAL);
    ck_assert_int_eq(sf_gen_batch(&g, &id, 1), SF_EINVAL);
    sf_gen_destroy(&g);
}
END_TEST

/* Every node width, both formats: decompose(compose(fields)) gives the fields back, the version
 * and variant are right, and the node sits above the random bits. */
START_TEST(test_compose_decompose)
{
    static const unsigned widths[][2] = {{0, 1}, {0, 2}, {1, 2}, {0, 4}, {2, 3},
                                         {5, 5}, {8, 8}, {0, 10}, {15, 15}};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        sf_layout l = wide_layout(widths[w][0], widths[w][1]);
        for (int f = SF_FORMAT_UUID7; f <= SF_FORMAT_ULID; f++) {
            unsigned rbits = sf_id128_random_bits(&l, (sf_id128_format)f);
            uint64_t rlo = UINT64_C(0x9e3779b97f4a7c15), rhi = UINT64_C(0xfedcba9876543210);
            uint64_t node = (l.datacenter_max << l.worker_bits | l.worker_max) & UINT64_C(0x2aaaaaaa);
            sf_id128 id = sf_id128_compose(&l, (sf_id128_format)f, T0, 0xabc, node, rlo, rhi);
            sf_id128_parts p;
            sf_id128_decompose(&l, (sf_id128_format)f, id, &p);
            ck_assert_uint_eq(p.ms, T0);
            ck_assert_uint_eq(p.counter, 0xabc);
            ck_assert_uint_eq((uint64_t)p.datacenter << l.worker_bits | p.worker, node);
            ck_assert_uint_eq(p.random_bits, rbits);
            uint64_t want_lo = rbits >= 64 ? rlo : rlo & ((UINT64_C(1) << rbits) - 1);
            uint64_t want_hi = rbits > 64 ? rhi & ((UINT64_C(1) << (rbits - 64)) - 1) : 0;
            ck_assert_uint_eq(p.random_lo, want_lo);
            ck_assert_uint_eq(p.random_hi, want_hi);
            if (f == SF_FORMAT_UUID7) {
                sf_uuid7_fields uf;
                const char *why;
                ck_assert(sf_uuid7_split(id, &uf, &why));
                ck_assert_uint_eq(uf.rand_a, 0xabc);
                ck_assert_uint_eq(uf.rand_b >> rbits, node); /* node at the top of rand_b */
            } else {
                ck_assert_uint_eq(id.hi >> 4 & 0xfff, 0xabc);
            }
            /* The all-ones node and random fill the tail exactly: nothing spills into the
             * counter, version or variant. */
            sf_id128 full = sf_id128_compose(&l, (sf_id128_format)f, T0, 0, ~UINT64_C(0),
                                              ~UINT64_C(0), ~UINT64_C(0));
            if (f == SF_FORMAT_UUID7) {
                ck_assert_uint_eq(full.hi, T0 << 16 | 0x7000);
                ck_assert_uint_eq(full.lo, UINT64_C(1) << 63 | SF_UUID7_RAND_B_MAX);
            } else {
                ck_assert_uint_eq(full.hi, T0 << 16 | 0xf);
                ck_assert_uint_eq(full.lo, ~UINT64_C(0));
            }
        }
    }
}
END_TEST

/* ---- 8 threads x 1M of each format, one generator ----------------------------------------- */

#define THREADS    8
#define PER_THREAD 1000000

typedef struct worker_arg {
    sf_gen *gen;
    sf_id128_format format;
    uint64_t *his; /* the high halves: (ms, counter) make them unique within one node */
    size_t n;
    int failures, last_error, out_of_order;
} worker_arg;

static void *issue_many(void *p)
{
    worker_arg *a = p;
    sf_id128 prev = {0, 0}, batch[7];
    for (size_t i = 0; i < a->n;) {
        /* Alternate single IDs and small batches: both paths, one order. */
        uint32_t n = (i % 3 == 0 && a->n - i >= 7) ? 7 : 1;
        int rc = sf_id128_issue(a->gen, a->format, batch, n);
        if (rc != SF_OK) {
            a->failures++;
            a->last_error = rc;
            continue;
        }
        for (uint32_t k = 0; k < n; k++, i++) {
            if (sf_id128_cmp(batch[k], prev) <= 0)
                a->out_of_order++;
            prev = batch[k];
            a->his[i] = batch[k].hi;
        }
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

START_TEST(test_threads_unique_increasing)
{
    sf_id128_format format = _i % 2 ? SF_FORMAT_ULID : SF_FORMAT_UUID7;
    sf_gen g;
    gen_init(&g, (sf_sync_mode)(_i / 2), 3, 7, NULL, 0);
    uint64_t *all = malloc(sizeof(uint64_t) * THREADS * PER_THREAD);
    ck_assert_ptr_nonnull(all);
    pthread_t th[THREADS];
    worker_arg args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (worker_arg){.gen = &g, .format = format, .his = all + (size_t)t * PER_THREAD,
                               .n = PER_THREAD};
        ck_assert_int_eq(pthread_create(&th[t], NULL, issue_many, &args[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        ck_assert_msg(args[t].out_of_order == 0, "thread %d: %d IDs not above the previous", t,
                      args[t].out_of_order);
        /* Overload refusals are allowed (8 threads can outrun 4096 per ms); nothing else. */
        ck_assert_msg(args[t].failures == 0 || args[t].last_error == SF_EBUSY,
                      "thread %d: %s", t, sf_gen_strerror(args[t].last_error));
    }
    size_t total = (size_t)THREADS * PER_THREAD;
    qsort(all, total, sizeof *all, cmp_u64);
    size_t duplicates = 0;
    for (size_t i = 1; i < total; i++)
        duplicates += all[i] == all[i - 1];
    ck_assert_uint_eq(duplicates, 0);
    free(all);
    sf_gen_destroy(&g);
}
END_TEST

/* 4096 IDs use a millisecond's counter; the 4097th continues in the next millisecond and waits
 * for it (RFC 9562's "freeze and wait"): the counter never wraps within a millisecond. Refusing
 * demand far ahead of the clock is reserve()'s rule, tested with the generator. */
START_TEST(test_counter_exhaustion)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_init(&g, SF_SYNC_ATOMIC, 0, 1, &clk.base, 0);
    static sf_id128 ids[4096];
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_UUID7, ids, 4096), SF_OK);
    sf_id128_parts first, last, next;
    sf_id128_decompose(&g.layout, SF_FORMAT_UUID7, ids[0], &first);
    sf_id128_decompose(&g.layout, SF_FORMAT_UUID7, ids[4095], &last);
    ck_assert_uint_eq(first.ms, T0);
    ck_assert_uint_eq(first.counter, 0);
    ck_assert_uint_eq(last.ms, T0);
    ck_assert_uint_eq(last.counter, 4095);
    for (int i = 1; i < 4096; i++)
        ck_assert_int_gt(sf_id128_cmp(ids[i], ids[i - 1]), 0);
    clk_fake_init(&clk, T0, 2, 1); /* the clock moves on while the generator waits */
    sf_id128 one;
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_UUID7, &one, 1), SF_OK);
    sf_id128_decompose(&g.layout, SF_FORMAT_UUID7, one, &next);
    ck_assert_uint_eq(next.ms, T0 + 1);
    ck_assert_uint_eq(next.counter, 0);
    ck_assert_uint_ge(clk_now(&clk.base), T0 + 1); /* not issued before its millisecond */
    sf_gen_stats st;
    sf_gen_stats_get(&g, &st);
    ck_assert_uint_eq(st.exhaustion_waits, 1);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_refusals)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_init(&g, SF_SYNC_SPINLOCK, 1, 2, &clk.base, 0);
    sf_id128 before, id = {1, 2};
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_ULID, &before, 1), SF_OK);
    clk_fake_set(&clk, T0 - 3600000); /* stepped back an hour */
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_ULID, &id, 1), SF_ECLOCK);
    ck_assert_uint_eq(id.hi, 1); /* nothing issued */
    ck_assert_uint_ge(sf_gen_retry_after_ms(&g), 3600000 - 5);
    clk_fake_set(&clk, T0 + 1);
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_ULID, &id, 1), SF_OK);
    ck_assert_int_gt(sf_id128_cmp(id, before), 0);
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_ULID, &id, 0), SF_EINVAL);
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_ULID, &id, 4097), SF_EINVAL);
    uint64_t next = sf_gen_seal(&g);
    ck_assert_uint_eq(next, T0 + 2); /* the ms after the last ID: the clean-stop lease */
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_ULID, &id, 1), SF_ESEALED);
    sf_gen_destroy(&g);
}
END_TEST

/* A restart with the lease floor E: the first ID is at E or later, above every ID before, even
 * with the clock an hour behind (refused until it catches up within max_backward). */
START_TEST(test_restart_above_floor)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_init(&g, SF_SYNC_MUTEX, 0, 0, &clk.base, 0);
    sf_id128 last;
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_UUID7, &last, 1), SF_OK);
    uint64_t floor_ms = sf_layout_ms_of(&g.layout, sf_gen_seal(&g));
    sf_gen_destroy(&g);
    /* Same clock: the first ID is in the floor's millisecond, after a wait. */
    clk_fake_init(&clk, T0, 1, 1);
    gen_init(&g, SF_SYNC_MUTEX, 0, 0, &clk.base, floor_ms);
    sf_id128 first;
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_UUID7, &first, 1), SF_OK);
    ck_assert_int_gt(sf_id128_cmp(first, last), 0);
    ck_assert_uint_ge(sf_id128_ms(first), floor_ms);
    sf_gen_destroy(&g);
    /* Clock an hour behind the floor: refused, never below. */
    clk_fake_init(&clk, T0 - 3600000, 0, 0);
    gen_init(&g, SF_SYNC_MUTEX, 0, 0, &clk.base, floor_ms);
    ck_assert_int_eq(sf_id128_issue(&g, SF_FORMAT_UUID7, &first, 1), SF_ECLOCK);
    sf_gen_destroy(&g);
}
END_TEST

/* The random bits vary: in 100k IDs of one millisecond-counter stream no random tail repeats
 * (52 bits: a repeat by chance has probability ~1e-6), and each of the 52 bits takes both
 * values. */
START_TEST(test_random_bits_vary)
{
    sf_gen g;
    gen_init(&g, SF_SYNC_ATOMIC, 0, 0, NULL, 0);
    enum { N = 100000 };
    static sf_id128 ids[4096];
    uint64_t *tails = malloc(sizeof(uint64_t) * N);
    ck_assert_ptr_nonnull(tails);
    uint64_t ones = 0, zeros = 0;
    for (size_t i = 0; i < N;) {
        uint32_t n = N - i < 4096 ? (uint32_t)(N - i) : 4096;
        int rc = sf_id128_issue(&g, SF_FORMAT_UUID7, ids, n);
        if (rc == SF_EBUSY)
            continue;
        ck_assert_int_eq(rc, SF_OK);
        for (uint32_t k = 0; k < n; k++, i++) {
            sf_id128_parts p;
            sf_id128_decompose(&g.layout, SF_FORMAT_UUID7, ids[k], &p);
            tails[i] = p.random_lo;
            ones |= p.random_lo;
            zeros |= ~p.random_lo;
        }
    }
    ck_assert_uint_eq(ones, (UINT64_C(1) << 52) - 1);
    ck_assert_uint_eq(zeros & ((UINT64_C(1) << 52) - 1), (UINT64_C(1) << 52) - 1);
    qsort(tails, N, sizeof *tails, cmp_u64);
    for (size_t i = 1; i < N; i++)
        ck_assert_uint_ne(tails[i], tails[i - 1]);
    free(tails);
    sf_gen_destroy(&g);
}
END_TEST

static Suite *issue128_suite(void)
{
    Suite *s = suite_create("issue128");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_layout_limits);
    tcase_add_test(tc, test_compose_decompose);
    tcase_add_loop_test(tc, test_threads_unique_increasing, 0, 6); /* 3 sync modes x 2 formats */
    tcase_add_test(tc, test_counter_exhaustion);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_restart_above_floor);
    tcase_add_test(tc, test_random_bits_vary);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    bool waited;
    char err[256];
    if (sf_rng_probe(&waited, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return EXIT_FAILURE;
    }
    return sf_run_suite(issue128_suite());
}
