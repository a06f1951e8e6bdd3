/* Generator: uniqueness and order under every sync mode, per-thread worker ids, sequence
 * exhaustion, clock regressions, batches across ticks, lease guard, lease cap and late binding
 * (alone and racing issuing threads), sealing, lifetime end, Sonyflake field order. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_main.h"
#include "snowflake/generator.h"

#define T0 (SF_DEFAULT_EPOCH_MS + UINT64_C(200000000000)) /* ~2026, a fixed "now" for fakes */

static sf_layout twitter_layout(void)
{
    sf_layout l;
    char err[256];
    ck_assert_msg(sf_layout_init(&l, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 1, T0, err, sizeof err) ==
                      0,
                  "%s", err);
    return l;
}

static void gen_init(sf_gen *g, sf_sync_mode mode, uint32_t worker, clk_source *clock)
{
    sf_gen_config cfg = {.layout = twitter_layout(),
                         .datacenter = 1,
                         .worker = worker,
                         .sync = mode,
                         .max_backward_ms = 5,
                         .max_batch = 4096,
                         .clock = clock};
    char err[256];
    ck_assert_msg(sf_gen_init(g, &cfg, err, sizeof err) == 0, "%s", err);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- many threads, one generator per mode (or one per thread) ------------------------------ */

#define THREADS    8
#define PER_THREAD 1000000

typedef struct worker_arg {
    sf_gen *gen;
    uint64_t *ids;
    size_t n;
    int failures, last_error;
} worker_arg;

static void *issue_many(void *p)
{
    worker_arg *a = p;
    for (size_t i = 0; i < a->n; i++) {
        int rc = sf_gen_next(a->gen, &a->ids[i]);
        if (rc != SF_OK) {
            a->failures++;
            a->last_error = rc;
        }
    }
    return NULL;
}

static void run_threads(sf_gen *gens, int ngens, size_t per_thread, uint64_t *all)
{
    pthread_t th[THREADS];
    worker_arg args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (worker_arg){
            .gen = &gens[t % ngens], .ids = all + (size_t)t * per_thread, .n = per_thread};
        ck_assert_int_eq(pthread_create(&th[t], NULL, issue_many, &args[t]), 0);
    }
    /* Plain loops, one assertion each: check's per-assertion bookkeeping is a syscall. */
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        ck_assert_msg(args[t].failures == 0, "thread %d: %d failures, last: %s", t,
                      args[t].failures, sf_gen_strerror(args[t].last_error));
        size_t not_increasing = 0;
        for (size_t i = 1; i < per_thread; i++)
            not_increasing += args[t].ids[i] <= args[t].ids[i - 1];
        ck_assert_msg(not_increasing == 0, "thread %d: %zu IDs not increasing", t, not_increasing);
    }
    size_t total = (size_t)THREADS * per_thread, duplicates = 0;
    qsort(all, total, sizeof *all, cmp_u64);
    for (size_t i = 1; i < total; i++)
        duplicates += all[i] == all[i - 1];
    ck_assert_msg(duplicates == 0, "%zu duplicate IDs", duplicates);
}

START_TEST(test_unique_increasing_each_mode)
{
    sf_sync_mode mode = (sf_sync_mode)_i;
    sf_gen g;
    gen_init(&g, mode, 3, NULL);
    uint64_t *all = malloc(sizeof(uint64_t) * THREADS * PER_THREAD);
    ck_assert_ptr_nonnull(all);
    run_threads(&g, 1, PER_THREAD, all);
    /* The node bits are the configured ones in every ID. */
    ck_assert_uint_eq((all[0] >> 12) & 31, 3);
    ck_assert_uint_eq((all[0] >> 17) & 31, 1);
    free(all);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_per_thread_worker_ids)
{
    sf_gen gens[THREADS];
    for (int i = 0; i < THREADS; i++)
        gen_init(&gens[i], SF_SYNC_ATOMIC, 10 + (uint32_t)i, NULL);
    size_t per = 200000;
    uint64_t *all = malloc(sizeof(uint64_t) * THREADS * per);
    ck_assert_ptr_nonnull(all);
    run_threads(gens, THREADS, per, all);
    /* Every worker id 10..17 issued exactly `per` IDs. */
    size_t count[32] = {0};
    for (size_t i = 0; i < THREADS * per; i++)
        count[(all[i] >> 12) & 31]++;
    /* (run_threads sorted `all`; counting does not care) */
    for (int w = 10; w < 10 + THREADS; w++)
        ck_assert_uint_eq(count[w], per);
    free(all);
    for (int i = 0; i < THREADS; i++)
        sf_gen_destroy(&gens[i]);
}
END_TEST

/* Demand far above capacity: 8 threads asking for whole ticks at once. Reservations run ahead of
 * the clock and callers wait; beyond max_ahead they are refused as busy. The clock never went
 * back, so it must never be reported as behind, and every ID stays unique. */
typedef struct batch_arg {
    sf_gen *gen;
    uint64_t *ids;
    size_t batches, ok, busy, other;
} batch_arg;

static void *issue_batches(void *p)
{
    batch_arg *a = p;
    for (size_t b = 0; b < a->batches; b++) {
        int rc = sf_gen_batch(a->gen, a->ids + a->ok * 4096, 4096);
        if (rc == SF_OK)
            a->ok++;
        else if (rc == SF_EBUSY)
            a->busy++;
        else
            a->other++;
    }
    return NULL;
}

START_TEST(test_overload_is_busy_not_clock_behind)
{
    sf_gen g;
    gen_init(&g, (sf_sync_mode)_i, 0, NULL);
    pthread_t th[THREADS];
    batch_arg args[THREADS];
    const size_t batches = 40;
    uint64_t *all = malloc(sizeof(uint64_t) * THREADS * batches * 4096);
    ck_assert_ptr_nonnull(all);
    for (int t = 0; t < THREADS; t++) {
        args[t] =
            (batch_arg){.gen = &g, .ids = all + (size_t)t * batches * 4096, .batches = batches};
        ck_assert_int_eq(pthread_create(&th[t], NULL, issue_batches, &args[t]), 0);
    }
    size_t ok = 0, busy = 0, other = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        ok += args[t].ok;
        busy += args[t].busy;
        other += args[t].other;
    }
    sf_gen_stats st;
    sf_gen_stats_get(&g, &st);
    ck_assert_uint_eq(other, 0);
    ck_assert_uint_eq(st.clock_behind_errors, 0);
    ck_assert_uint_eq(st.busy_errors, busy);
    ck_assert_uint_gt(ok, 0);
    /* Compact the issued batches and check uniqueness. */
    size_t n = 0;
    for (int t = 0; t < THREADS; t++)
        for (size_t i = 0; i < args[t].ok * 4096; i++)
            all[n++] = args[t].ids[i];
    qsort(all, n, sizeof *all, cmp_u64);
    size_t dups = 0;
    for (size_t i = 1; i < n; i++)
        dups += all[i] == all[i - 1];
    ck_assert_uint_eq(dups, 0);
    free(all);
    sf_gen_destroy(&g);
}
END_TEST

/* ---- fake-clock scenarios -------------------------------------------------------------------- */

static uint64_t tick_of(uint64_t id)
{
    return id >> 22;
}
static uint64_t seq_of(uint64_t id)
{
    return id & 4095;
}
static uint64_t now_tick(void)
{
    return T0 - SF_DEFAULT_EPOCH_MS;
}

START_TEST(test_sequence_exhaustion_waits_for_next_tick)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_init(&g, (sf_sync_mode)_i, 0, &clk.base);
    uint64_t id = 0, prev = 0;
    for (int i = 0; i < 4096; i++) {
        ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
        ck_assert_uint_eq(tick_of(id), now_tick());
        ck_assert_uint_eq(seq_of(id), (uint64_t)i);
        ck_assert(i == 0 || id > prev);
        prev = id;
    }
    sf_gen_stats st;
    sf_gen_stats_get(&g, &st);
    ck_assert_uint_eq(st.exhaustion_waits, 0);
    /* The tick is full: the next ID needs the next tick, so the call spins until the clock
     * (advancing 1 ms every 10 reads) gets there. */
    clk.step_every = 10;
    clk.step_ms = 1;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_eq(tick_of(id), now_tick() + 1);
    ck_assert_uint_eq(seq_of(id), 0);
    ck_assert_uint_ge(atomic_load(&clk.now), T0 + 1); /* it did not issue from the future */
    sf_gen_stats_get(&g, &st);
    ck_assert_uint_eq(st.exhaustion_waits, 1);
    ck_assert_uint_eq(st.clock_behind_waits, 0);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_clock_behind_small_gap_waits)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_init(&g, (sf_sync_mode)_i, 0, &clk.base);
    uint64_t first, id;
    ck_assert_int_eq(sf_gen_next(&g, &first), SF_OK);
    clk_fake_set(&clk, T0 - 2); /* stepped back 2 ms: within max_backward_ms (5) */
    clk.step_every = 5;
    clk.step_ms = 1;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_gt(id, first);
    ck_assert_uint_eq(tick_of(id), tick_of(first)); /* continues the last tick */
    ck_assert_uint_eq(seq_of(id), 1);
    ck_assert_uint_ge(atomic_load(&clk.now), T0); /* returned only once the clock caught up */
    sf_gen_stats st;
    sf_gen_stats_get(&g, &st);
    ck_assert_uint_eq(st.clock_behind_waits, 1);
    ck_assert_uint_eq(st.clock_behind_errors, 0);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_clock_behind_one_hour_errors)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_init(&g, (sf_sync_mode)_i, 0, &clk.base);
    uint64_t first, id = 12345, batch[4] = {0};
    ck_assert_int_eq(sf_gen_next(&g, &first), SF_OK);
    clk_fake_set(&clk, T0 - 3600000);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ECLOCK);
    ck_assert_uint_eq(id, 12345); /* nothing issued */
    ck_assert_int_eq(sf_gen_batch(&g, batch, 4), SF_ECLOCK);
    ck_assert_uint_eq(batch[0], 0);
    uint64_t retry = sf_gen_retry_after_ms(&g);
    ck_assert_uint_ge(retry, 3600000 - 5);
    ck_assert_uint_le(retry, 3600000);
    sf_gen_stats st;
    sf_gen_stats_get(&g, &st);
    ck_assert_uint_eq(st.clock_behind_errors, 2);
    /* The state is untouched: once time is back, issuing resumes after `first`. */
    clk_fake_set(&clk, T0 + 1);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_gt(id, first);
    ck_assert_uint_eq(sf_gen_retry_after_ms(&g), 0);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_batch_across_tick_boundary)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_init(&g, (sf_sync_mode)_i, 7, &clk.base);
    uint64_t ids[4096], id;
    for (int i = 0; i < 4000; i++)
        ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    clk.step_every = 3;
    clk.step_ms = 1;
    ck_assert_int_eq(sf_gen_batch(&g, ids, 200), SF_OK);
    for (int i = 0; i < 200; i++) {
        ck_assert(ids[i] > (i ? ids[i - 1] : id));
        ck_assert_uint_eq((ids[i] >> 12) & 31, 7);
        uint64_t want_tick = now_tick() + (i < 96 ? 0 : 1);
        ck_assert_uint_eq(tick_of(ids[i]), want_tick);
        ck_assert_uint_eq(seq_of(ids[i]), (uint64_t)(i < 96 ? 4000 + i : i - 96));
    }
    ck_assert_uint_ge(atomic_load(&clk.now), T0 + 1);
    sf_gen_stats st;
    sf_gen_stats_get(&g, &st);
    ck_assert_uint_eq(st.exhaustion_waits, 1);
    /* A whole tick's worth in one operation from a fresh tick, and the limits. */
    clk_fake_set(&clk, T0 + 10);
    clk.step_every = 0;
    ck_assert_int_eq(sf_gen_batch(&g, ids, 4096), SF_OK);
    ck_assert_uint_eq(tick_of(ids[0]), now_tick() + 10);
    ck_assert_uint_eq(tick_of(ids[4095]), now_tick() + 10);
    ck_assert_uint_eq(seq_of(ids[4095]), 4095);
    ck_assert_int_eq(sf_gen_batch(&g, ids, 0), SF_EINVAL);
    ck_assert_int_eq(sf_gen_batch(&g, ids, 4097), SF_EINVAL);
    sf_gen_destroy(&g);
}
END_TEST

/* Sonyflake order (sequence above the node, snowflake.node_bits_low): the same reservations,
 * composed differently. One node's IDs still increase strictly when the clock moves on mid-tick,
 * when a full tick rolls over into the next (singly and within a batch), and each reads back
 * the way sony/sonyflake decomposes it: id >> 24 time, id >> 16 & 0xff sequence, id & 0xffff
 * machine. */
START_TEST(test_node_bits_low_strictly_increasing)
{
    const sf_layout_preset *p = sf_layout_preset_find("sonyflake");
    sf_layout l;
    char err[256];
    ck_assert_int_eq(sf_layout_init(&l, p->timestamp_bits, p->datacenter_bits, p->worker_bits,
                                    p->sequence_bits, p->epoch_ms, p->unit_ms, T0, err, sizeof err),
                     0);
    sf_layout_set_node_bits_low(&l, true);
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    sf_gen_config cfg = {.layout = l,
                         .datacenter = 0xc0,
                         .worker = 0xa8,
                         .sync = (sf_sync_mode)_i,
                         .max_backward_ms = 5,
                         .max_batch = 4096,
                         .clock = &clk.base};
    ck_assert_msg(sf_gen_init(&g, &cfg, err, sizeof err) == 0, "%s", err);
    const uint64_t k = (T0 - SF_SONYFLAKE_EPOCH_MS) / 10; /* the tick of T0 */
    enum { N = 200 + 256 + 1 + 1000 };
    static uint64_t ids[N];
    size_t n = 0;
    for (int i = 0; i < 200; i++) /* tick k, sequence 0..199 */
        ck_assert_int_eq(sf_gen_next(&g, &ids[n++]), SF_OK);
    clk_fake_set(&clk, T0 + 10); /* the clock moves on: tick k+1 from 0, filled */
    for (int i = 0; i < 256; i++)
        ck_assert_int_eq(sf_gen_next(&g, &ids[n++]), SF_OK);
    /* Full: the next ID waits for tick k+2. The clock advances 10 ms every second read: the
     * reservation's read still sees k+1, the wait's read k+2. */
    clk.step_every = 2;
    clk.step_ms = 10;
    ck_assert_int_eq(sf_gen_next(&g, &ids[n++]), SF_OK);
    ck_assert_int_eq(sf_gen_batch(&g, ids + n, 1000), SF_OK); /* k+2 (255 more) .. k+5 */
    n += 1000;
    size_t bad_order = 0, bad_machine = 0, bad_seq = 0, full_ticks = 0, new_ticks = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t tick = ids[i] >> 24, seq = (ids[i] >> 16) & 0xff;
        bad_machine += (ids[i] & 0xffff) != 0xc0a8;
        if (i == 0) {
            bad_seq += seq != 0;
            continue;
        }
        uint64_t prev_tick = ids[i - 1] >> 24, prev_seq = (ids[i - 1] >> 16) & 0xff;
        bad_order += ids[i] <= ids[i - 1];
        if (tick == prev_tick) {
            bad_seq += seq != prev_seq + 1;
        } else {
            bad_seq += seq != 0 || tick != prev_tick + 1;
            new_ticks++;
            full_ticks += prev_seq == 255;
        }
    }
    ck_assert_uint_eq(bad_order, 0);
    ck_assert_uint_eq(bad_machine, 0);
    ck_assert_uint_eq(bad_seq, 0);
    ck_assert_uint_eq(new_ticks, 5); /* k -> k+1 by the clock, then 4 full ticks */
    ck_assert_uint_eq(full_ticks, 4);
    ck_assert_uint_eq(ids[0] >> 24, k);
    ck_assert_uint_eq(ids[n - 1] >> 24, k + 5);
    ck_assert_uint_ge(atomic_load(&clk.now), T0 + 50); /* nothing issued from the future */
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_lease_guard)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen_config cfg = {.layout = twitter_layout(),
                         .sync = (sf_sync_mode)_i,
                         .max_backward_ms = 5,
                         .max_batch = 16,
                         .lease_guarded = true,
                         .clock = &clk.base};
    sf_gen g;
    char err[256];
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    uint64_t id = 0;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE); /* no lease persisted yet */
    ck_assert_uint_eq(id, 0);
    /* Come back in a second: not the ticks since the epoch (a Retry-After of years, seen while
     * an etcd identity waited for a slot), since the clock does not bring a lease. */
    ck_assert_uint_gt(sf_gen_retry_after_ms(&g), 0);
    ck_assert_uint_le(sf_gen_retry_after_ms(&g), 1000);
    sf_gen_extend_lease(&g, now_tick() + 1); /* covers exactly the current tick */
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    clk_fake_set(&clk, T0 + 1);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    sf_gen_extend_lease(&g, now_tick()); /* lowering is ignored */
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    sf_gen_stats st;
    sf_gen_stats_get(&g, &st);
    ck_assert_uint_eq(st.lease_errors, 3);
    sf_gen_extend_lease(&g, now_tick() + 100);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_eq(tick_of(id), now_tick() + 1);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_min_tick_and_seal)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen_config cfg = {.layout = twitter_layout(),
                         .sync = (sf_sync_mode)_i,
                         .max_backward_ms = 5,
                         .max_batch = 16,
                         .min_tick = now_tick() + 3,
                         .clock = &clk.base};
    sf_gen g;
    char err[256];
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    ck_assert_uint_eq(sf_gen_next_tick(&g), now_tick() + 3);
    clk.step_every = 4;
    clk.step_ms = 1;
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK); /* waited 3 ms for the floor */
    ck_assert_uint_eq(tick_of(id), now_tick() + 3);
    ck_assert_uint_eq(seq_of(id), 0);
    ck_assert_uint_eq(sf_gen_seal(&g), now_tick() + 4);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ESEALED);
    ck_assert_int_eq(sf_gen_batch(&g, &id, 1), SF_ESEALED);
    ck_assert_uint_eq(sf_gen_next_tick(&g), now_tick() + 4);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_lifetime_end)
{
    clk_fake clk;
    sf_layout l = twitter_layout();
    clk_fake_init(&clk, SF_DEFAULT_EPOCH_MS + l.tick_max, 0, 0);
    sf_gen_config cfg = {.layout = l, .max_backward_ms = 5, .max_batch = 16, .clock = &clk.base};
    sf_gen g;
    char err[256];
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_eq(id >> 22, l.tick_max);
    ck_assert_uint_lt(id, UINT64_C(1) << 63);
    clk_fake_set(&clk, SF_DEFAULT_EPOCH_MS + l.tick_max + 1);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_EEXPIRED);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_init_rejects_bad_ids)
{
    sf_gen_config cfg = {.layout = twitter_layout(), .max_backward_ms = 5, .max_batch = 16};
    sf_gen g;
    char err[256];
    cfg.worker = 32;
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "worker id 32"));
    cfg.worker = 31;
    cfg.datacenter = 32;
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "datacenter id 32"));
    cfg.datacenter = 0;
    cfg.max_batch = 0;
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), -1);
}
END_TEST

START_TEST(test_sync_mode_names)
{
    sf_sync_mode m;
    ck_assert_int_eq(sf_sync_mode_parse("spinlock", &m), 0);
    ck_assert_int_eq(m, SF_SYNC_SPINLOCK);
    ck_assert_int_eq(sf_sync_mode_parse("Mutex", &m), -1);
    ck_assert_str_eq(sf_sync_mode_name(SF_SYNC_MUTEX), "mutex");
}
END_TEST

/* Random sequence start: each fresh tick starts below 2^bits at a random place, IDs stay
 * strictly increasing, a tick still holds at least 2^s - 2^bits + 1 IDs, and the run-ahead
 * limit grows by the skipped slots so a maximal batch is never refused as busy. */
START_TEST(test_random_sequence_start)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen_config cfg = {.layout = twitter_layout(),
                         .worker = 1,
                         .sync = (sf_sync_mode)_i,
                         .max_backward_ms = 5,
                         .max_batch = 4096,
                         .random_start_bits = 8,
                         .clock = &clk.base};
    sf_gen g;
    char err[256];
    ck_assert_msg(sf_gen_init(&g, &cfg, err, sizeof err) == 0, "%s", err);
    uint64_t starts_seen = 0, prev = 0, id;
    unsigned distinct = 0;
    static uint8_t seen[256];
    memset(seen, 0, sizeof seen);
    for (int t = 0; t < 400; t++) {
        clk_fake_set(&clk, T0 + (uint64_t)t);
        ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
        ck_assert_uint_gt(id, prev);
        uint64_t seq = seq_of(id);
        ck_assert_uint_lt(seq, 256);
        distinct += !seen[seq];
        seen[seq] = 1;
        starts_seen |= seq;
        for (int k = 0; k < 3; k++) { /* within the tick: consecutive */
            uint64_t next;
            ck_assert_int_eq(sf_gen_next(&g, &next), SF_OK);
            ck_assert_uint_eq(next, id + 1 + (uint64_t)k);
        }
        prev = id + 3;
    }
    /* 400 draws from 256 values: about 202 distinct ones expected (sd ~4); every bit varies. */
    ck_assert_uint_gt(distinct, 150);
    ck_assert_uint_eq(starts_seen, 255);
    /* A full batch from a fresh tick fits the run-ahead limit. */
    clk_fake_init(&clk, T0 + 1000, 3, 1);
    static uint64_t batch[4096];
    ck_assert_int_eq(sf_gen_batch(&g, batch, 4096), SF_OK);
    for (int i = 1; i < 4096; i++)
        ck_assert_uint_gt(batch[i], batch[i - 1]);
    ck_assert_double_eq_tol(sf_gen_cap_per_second(&g.layout, 8), (4096.0 - 255.0) * 1000.0, 1e-6);
    ck_assert_uint_eq(sf_gen_ahead_ms_for(&g.layout, 5, 4096, 8),
                      sf_gen_ahead_ms_for(&g.layout, 5, 4096, 0) + 1);
    sf_gen_destroy(&g);
    /* bits must stay below sequence_bits */
    cfg.random_start_bits = 12;
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "below sequence_bits"));
}
END_TEST

/* A successor of an identity that cannot read its previous holder's lease (another data_dir)
 * floors at sf_gen_successor_tick of its clock: past the tick that clock is in, by
 * max_backward_ms (at least one tick). Enough because the holder handed out nothing beyond its
 * own clock, even with a batch that ran ahead of it (the call waited), which is pinned here for
 * every sync mode; the successor issues at once from that floor, above everything handed out. */
START_TEST(test_successor_floor)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen holder;
    gen_init(&holder, (sf_sync_mode)_i, 3, &clk.base);
    static uint64_t ids[4096];
    uint64_t top = 0;
    for (int round = 0; round < 3; round++) { /* 3 full ticks, the later ones ahead of the clock */
        clk.step_every = 7;
        clk.step_ms = 1;
        ck_assert_int_eq(sf_gen_batch(&holder, ids, 4096), SF_OK);
        clk.step_every = 0;
        uint64_t clock_tick = atomic_load(&clk.now) - SF_DEFAULT_EPOCH_MS;
        for (int i = 0; i < 4096; i++) {
            ck_assert_uint_le(tick_of(ids[i]), clock_tick); /* nothing past the clock */
            top = tick_of(ids[i]) > top ? tick_of(ids[i]) : top;
        }
    }
    ck_assert_uint_gt(top, now_tick() + 1);
    sf_gen_stats st;
    sf_gen_stats_get(&holder, &st);
    ck_assert_uint_ge(st.exhaustion_waits, 2); /* reserved ahead of the clock, then waited */
    /* The holder ends here; a successor reads its own clock at least as late. */
    uint64_t end = atomic_load(&clk.now);
    sf_layout l = twitter_layout();
    uint64_t floor = sf_gen_successor_tick(&l, 5, end);
    ck_assert_uint_eq(floor, end - SF_DEFAULT_EPOCH_MS + 5 + 1);
    sf_gen_config cfg = {.layout = l,
                         .datacenter = 1,
                         .worker = 3, /* the same identity */
                         .sync = (sf_sync_mode)_i,
                         .max_backward_ms = 5,
                         .max_batch = 4096,
                         .min_tick = floor,
                         .clock = &clk.base};
    char err[256];
    sf_gen next;
    ck_assert_msg(sf_gen_init(&next, &cfg, err, sizeof err) == 0, "%s", err);
    clk_fake_set(&clk, sf_layout_ms_of(&l, floor)); /* what the daemon waits for */
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&next, &id), SF_OK);
    ck_assert_uint_gt(tick_of(id), top);
    sf_gen_stats_get(&next, &st);
    ck_assert_uint_eq(st.clock_behind_waits + st.exhaustion_waits, 0); /* no wait on a loop */
    sf_gen_destroy(&next);
    sf_gen_destroy(&holder);
    /* Coarser ticks: max_backward_ms rounds up to whole ticks, at least one. */
    sf_layout l10, l1000;
    ck_assert_int_eq(
        sf_layout_init(&l10, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 10, T0, err, sizeof err), 0);
    ck_assert_int_eq(
        sf_layout_init(&l1000, 41, 5, 5, 8, SF_DEFAULT_EPOCH_MS, 1000, T0, err, sizeof err), 0);
    ck_assert_uint_eq(sf_gen_successor_tick(&l10, 5, T0 + 19), sf_layout_tick_of(&l10, T0) + 1 + 2);
    ck_assert_uint_eq(sf_gen_successor_tick(&l10, 25, T0), sf_layout_tick_of(&l10, T0) + 3 + 1);
    ck_assert_uint_eq(sf_gen_successor_tick(&l1000, 0, T0 + 999),
                      sf_layout_tick_of(&l1000, T0) + 1 + 1);
    ck_assert_uint_eq(sf_gen_successor_tick(&l1000, 1000, T0), sf_layout_tick_of(&l1000, T0) + 2);
}
END_TEST

/* ---- lease cap and late binding (identity backends) ----------------------------------------- */

static sf_gen_config guarded_config(sf_sync_mode mode, clk_source *clock)
{
    return (sf_gen_config){.layout = twitter_layout(),
                           .sync = mode,
                           .max_backward_ms = 10,
                           .max_batch = 8192,
                           .lease_guarded = true,
                           .clock = clock};
}

static uint64_t dc_of(uint64_t id)
{
    return (id >> 17) & 31;
}
static uint64_t worker_of(uint64_t id)
{
    return (id >> 12) & 31;
}

static void sleep_ms(unsigned ms)
{
    struct timespec d = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
}

START_TEST(test_cap_lease)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen_config cfg = guarded_config((sf_sync_mode)_i, &clk.base);
    sf_gen g;
    char err[256];
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    uint64_t id;
    sf_gen_extend_lease(&g, now_tick() + 100);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    sf_gen_cap_lease(&g, now_tick() + 1); /* below the old limit, above the current tick */
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_eq(tick_of(id), now_tick());
    clk_fake_set(&clk, T0 + 1);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE); /* old limit now+100 no longer counts */
    ck_assert_int_eq(sf_gen_status(&g, NULL), SF_ELEASE);
    sf_gen_extend_lease(&g, now_tick() + 1000); /* a renewal after the loss: no effect */
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    sf_gen_cap_lease(&g, now_tick() + 500); /* a higher cap neither raises nor lifts the lower */
    sf_gen_extend_lease(&g, now_tick() + 1000);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    sf_gen_cap_lease(&g, 0); /* everything, even ticks long past */
    clk_fake_set(&clk, T0);
    ck_assert_int_eq(sf_gen_status(&g, NULL), SF_ELEASE);
    ck_assert_int_eq(sf_gen_bind(&g, 1, 1, 0, err, sizeof err), SF_EBOUND); /* was leased */
    sf_gen_destroy(&g);
}
END_TEST

/* A lease-guarded generator of datacenter 3 worker 7 on a fake clock at T0, leased 100 ticks
 * ahead; returns the first ID it issued. */
static uint64_t issuing_as_3_7(sf_gen *g, clk_fake *clk, sf_sync_mode mode)
{
    clk_fake_init(clk, T0, 0, 0);
    sf_gen_config cfg = guarded_config(mode, &clk->base);
    cfg.datacenter = 3;
    cfg.worker = 7;
    char err[256];
    ck_assert_int_eq(sf_gen_init(g, &cfg, err, sizeof err), 0);
    uint64_t id;
    sf_gen_extend_lease(g, now_tick() + 100);
    ck_assert_int_eq(sf_gen_next(g, &id), SF_OK);
    return id;
}

/* The same slot re-claimed after a cap: resume raises the floor to the new holder's handoff and
 * lifts the ceiling; nothing below the floor is issued, nothing at all until the next extend;
 * the node bits are kept. */
START_TEST(test_resume_after_cap)
{
    clk_fake clk;
    sf_gen g;
    char err[256];
    uint64_t before = issuing_as_3_7(&g, &clk, (sf_sync_mode)_i), id;
    sf_gen_cap_lease(&g, 0); /* lapsed */
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    uint64_t floor = now_tick() + 5; /* another holder ran in between, up to here */
    ck_assert_int_eq(sf_gen_resume(&g, floor, err, sizeof err), SF_OK);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE); /* not before the next renewal */
    sf_gen_extend_lease(&g, now_tick() + 100);
    clk_fake_set(&clk, T0 + 5);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_ge(tick_of(id), floor);
    ck_assert_uint_gt(id, before);
    ck_assert_uint_eq(dc_of(id), 3);
    ck_assert_uint_eq(worker_of(id), 7);
    ck_assert_int_eq(sf_gen_resume(&g, floor - 3, err, sizeof err), SF_OK); /* never lowers */
    uint64_t next;
    ck_assert_int_eq(sf_gen_next(&g, &next), SF_OK);
    ck_assert_uint_gt(next, id);
    ck_assert_int_eq(sf_gen_resume(&g, UINT64_MAX, err, sizeof err), SF_EINVAL);
    sf_gen_destroy(&g);
}
END_TEST

/* Another slot after a loss: refused unless capped to 0; then new node bits, the new floor, and
 * issuing again after the next extend. */
START_TEST(test_rebind_after_cap)
{
    clk_fake clk;
    sf_gen g;
    char err[256];
    uint64_t id = issuing_as_3_7(&g, &clk, (sf_sync_mode)_i);
    ck_assert_int_eq(sf_gen_rebind(&g, 3, 9, 0, err, sizeof err), SF_EBOUND); /* not capped */
    sf_gen_cap_lease(&g, 0);
    ck_assert_int_eq(sf_gen_rebind(&g, 3, 32, 0, err, sizeof err), SF_EINVAL); /* 5 bits */
    uint64_t floor = now_tick() + 3;
    ck_assert_int_eq(sf_gen_rebind(&g, 4, 9, floor, err, sizeof err), SF_OK);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE); /* until the next extend */
    sf_gen_extend_lease(&g, now_tick() + 100);
    clk_fake_set(&clk, T0 + 3);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_eq(dc_of(id), 4);
    ck_assert_uint_eq(worker_of(id), 9);
    ck_assert_uint_ge(tick_of(id), floor);
    sf_gen_destroy(&g);
}
END_TEST

/* A cap before the first lease: bind is still allowed, and the ceiling stays. */
START_TEST(test_cap_before_lease_stays)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen_config cfg = guarded_config(SF_SYNC_ATOMIC, &clk.base);
    sf_gen g;
    char err[256];
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    sf_gen_cap_lease(&g, now_tick() + 2);
    ck_assert_int_eq(sf_gen_bind(&g, 2, 3, 0, err, sizeof err), SF_OK);
    sf_gen_extend_lease(&g, now_tick() + 100);
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    clk_fake_set(&clk, T0 + 2);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    sf_gen_destroy(&g);
}
END_TEST

typedef struct long_batch_arg {
    sf_gen *gen;
    uint64_t ids[4097];
    int rc;
} long_batch_arg;

static void *one_long_batch(void *p)
{
    long_batch_arg *a = p;
    a->rc = sf_gen_batch(a->gen, a->ids, 4097);
    return NULL;
}

/* What a cap does not stop: a reservation made before it. The batch reserves ticks now and
 * now + 1 (4097 IDs, 4096 per tick), then waits for the clock to reach now + 1; the cap lands
 * meanwhile, and the batch still returns its IDs, tick now + 1 included, above the cap. A call
 * begun after the cap is refused. */
START_TEST(test_cap_does_not_recall_a_reservation_in_flight)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen_config cfg = guarded_config((sf_sync_mode)_i, &clk.base);
    sf_gen g;
    char err[256];
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    sf_gen_extend_lease(&g, now_tick() + 100);
    long_batch_arg *a = calloc(1, sizeof *a);
    ck_assert_ptr_nonnull(a);
    a->gen = &g;
    a->rc = 99;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, one_long_batch, a), 0);
    /* Published: the state word moved past tick now + 1. Bounded: 10 s. */
    for (int i = 0; i < 10000 && sf_gen_next_tick(&g) != now_tick() + 2; i++)
        sleep_ms(1);
    ck_assert_uint_eq(sf_gen_next_tick(&g), now_tick() + 2);
    sf_gen_cap_lease(&g, now_tick());
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    clk_fake_set(&clk, T0 + 1);
    pthread_join(th, NULL);
    ck_assert_int_eq(a->rc, SF_OK);
    ck_assert_uint_eq(tick_of(a->ids[0]), now_tick());
    ck_assert_uint_eq(tick_of(a->ids[4096]), now_tick() + 1); /* >= the cap: reserved before it */
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    free(a);
    sf_gen_destroy(&g);
}
END_TEST

#define RACE_THREADS 3
#define RACE_IDS     20000

typedef struct race_arg {
    sf_gen *gen;
    _Atomic int *capped; /* set (release) once sf_gen_cap_lease returned */
    uint64_t cap_tick;
    uint64_t ids[RACE_IDS];
    size_t n;
    size_t after_cap_above; /* IDs from calls begun after the cap, at or above it */
    size_t errors;          /* refusals other than SF_ELEASE */
} race_arg;

/* Issues until RACE_IDS or until 5 s after the cap (a capped generator issues nothing more). */
static void *issue_until_capped(void *p)
{
    race_arg *a = p;
    uint64_t spins = 0;
    while (a->n < RACE_IDS && spins++ < UINT64_C(200000000)) {
        int began_after_cap = atomic_load_explicit(a->capped, memory_order_acquire);
        uint64_t id;
        int rc = sf_gen_next(a->gen, &id);
        if (rc == SF_OK) {
            a->ids[a->n++] = id;
            if (began_after_cap && tick_of(id) >= a->cap_tick)
                a->after_cap_above++;
        } else if (rc != SF_ELEASE) {
            a->errors++;
        } else if (began_after_cap) {
            break; /* refused after the cap: done */
        } else {
            sched_yield();
        }
    }
    return NULL;
}

/* Threads issue on the system clock while the lease is extended, then capped: no call begun
 * after the cap returned gets a tick at or above it; all IDs stay unique and increasing. */
START_TEST(test_cap_races_issuing_threads)
{
    sf_gen_config cfg = guarded_config((sf_sync_mode)_i, NULL);
    sf_gen g;
    char err[256];
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    _Atomic int capped = 0;
    race_arg *args = calloc(RACE_THREADS, sizeof *args);
    ck_assert_ptr_nonnull(args);
    pthread_t th[RACE_THREADS];
    for (int t = 0; t < RACE_THREADS; t++) {
        args[t].gen = &g;
        args[t].capped = &capped;
        args[t].cap_tick = UINT64_MAX;
    }
    sf_gen_extend_lease(&g, sf_gen_now_tick(&g) + 2);
    for (int t = 0; t < RACE_THREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, issue_until_capped, &args[t]), 0);
    for (int i = 0; i < 5; i++) { /* renewals while issuing, then the loss */
        sf_gen_extend_lease(&g, sf_gen_now_tick(&g) + 3);
        sleep_ms(1);
    }
    uint64_t cap = sf_gen_now_tick(&g) + 1;
    for (int t = 0; t < RACE_THREADS; t++)
        args[t].cap_tick = cap; /* read by the threads only after the release below */
    sf_gen_cap_lease(&g, cap);
    atomic_store_explicit(&capped, 1, memory_order_release);
    sf_gen_extend_lease(&g, cap + 1000); /* a late renewal */
    size_t total = 0;
    for (int t = 0; t < RACE_THREADS; t++) {
        pthread_join(th[t], NULL);
        ck_assert_uint_eq(args[t].after_cap_above, 0);
        ck_assert_uint_eq(args[t].errors, 0);
        for (size_t i = 1; i < args[t].n; i++)
            ck_assert_uint_gt(args[t].ids[i], args[t].ids[i - 1]);
        total += args[t].n;
    }
    uint64_t *all = malloc((total ? total : 1) * sizeof *all);
    ck_assert_ptr_nonnull(all);
    size_t k = 0;
    for (int t = 0; t < RACE_THREADS; t++)
        for (size_t i = 0; i < args[t].n; i++)
            all[k++] = args[t].ids[i];
    qsort(all, total, sizeof *all, cmp_u64);
    for (size_t i = 1; i < total; i++)
        ck_assert_uint_ne(all[i], all[i - 1]);
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    free(all);
    free(args);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_bind)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen_config cfg = guarded_config((sf_sync_mode)_i, &clk.base);
    sf_gen g;
    char err[256];
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE); /* waiting for a slot */
    ck_assert_int_eq(sf_gen_bind(&g, 32, 0, 0, err, sizeof err), SF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "datacenter id 32"));
    ck_assert_int_eq(sf_gen_bind(&g, 0, 99, 0, err, sizeof err), SF_EINVAL);
    ck_assert_int_eq(sf_gen_bind(&g, 3, 7, now_tick() + 2, err, sizeof err), SF_OK);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE); /* bound, not leased yet */
    ck_assert_int_eq(sf_gen_bind(&g, 4, 8, now_tick(), err, sizeof err), SF_OK); /* re-bind */
    ck_assert_uint_eq(sf_gen_next_tick(&g), now_tick() + 2); /* the floor did not move down */
    sf_gen_extend_lease(&g, now_tick() + 100);
    clk.step_every = 4;
    clk.step_ms = 1;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK); /* waited for the floor */
    ck_assert_uint_eq(tick_of(id), now_tick() + 2);
    ck_assert_uint_eq(dc_of(id), 4);
    ck_assert_uint_eq(worker_of(id), 8);
    ck_assert_int_eq(sf_gen_bind(&g, 5, 9, 0, err, sizeof err), SF_EBOUND);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_eq(worker_of(id), 8);
    sf_gen_destroy(&g);

    cfg.lease_guarded = false; /* issuing from the start: nothing to bind */
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    ck_assert_int_eq(sf_gen_bind(&g, 1, 1, 0, err, sizeof err), SF_EBOUND);
    sf_gen_destroy(&g);

    cfg.lease_guarded = true; /* sealed while waiting: binding keeps it sealed */
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    sf_gen_seal(&g);
    ck_assert_int_eq(sf_gen_bind(&g, 1, 1, now_tick() + 5, err, sizeof err), SF_OK);
    sf_gen_extend_lease(&g, now_tick() + 100);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ESEALED);
    sf_gen_destroy(&g);
}
END_TEST

/* Threads spin on sf_gen_next (system clock) while the main thread binds, then extends: every ID
 * carries the bound node bits and a tick at or above min_tick. */
START_TEST(test_bind_races_issuing_threads)
{
    sf_gen_config cfg = guarded_config((sf_sync_mode)_i, NULL);
    sf_gen g;
    char err[256];
    ck_assert_int_eq(sf_gen_init(&g, &cfg, err, sizeof err), 0);
    _Atomic int never = 0;
    race_arg *args = calloc(RACE_THREADS, sizeof *args);
    ck_assert_ptr_nonnull(args);
    pthread_t th[RACE_THREADS];
    for (int t = 0; t < RACE_THREADS; t++) {
        args[t].gen = &g;
        args[t].capped = &never;
        args[t].cap_tick = UINT64_MAX;
        ck_assert_int_eq(pthread_create(&th[t], NULL, issue_until_capped, &args[t]), 0);
    }
    sleep_ms(2); /* they spin on SF_ELEASE */
    uint64_t min_tick = sf_gen_now_tick(&g) + 5; /* 5 ms ahead: within max_backward, waited */
    ck_assert_int_eq(sf_gen_bind(&g, 2, 9, min_tick, err, sizeof err), SF_OK);
    sleep_ms(1);
    sf_gen_extend_lease(&g, sf_gen_now_tick(&g) + 60000);
    for (int t = 0; t < RACE_THREADS; t++) {
        pthread_join(th[t], NULL);
        ck_assert_uint_eq(args[t].errors, 0);
        ck_assert_uint_eq(args[t].n, RACE_IDS);
        size_t wrong_node = 0, below = 0, not_increasing = 0;
        for (size_t i = 0; i < args[t].n; i++) {
            uint64_t id = args[t].ids[i];
            wrong_node += dc_of(id) != 2 || worker_of(id) != 9;
            below += tick_of(id) < min_tick;
            not_increasing += i > 0 && id <= args[t].ids[i - 1];
        }
        ck_assert_msg(wrong_node == 0 && below == 0 && not_increasing == 0,
                      "thread %d: %zu with other node bits, %zu below min_tick, %zu not increasing",
                      t, wrong_node, below, not_increasing);
    }
    free(args);
    sf_gen_destroy(&g);
}
END_TEST

static Suite *generator_suite(void)
{
    Suite *s = suite_create("generator");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_unique_increasing_each_mode, SF_SYNC_ATOMIC, SF_SYNC_MUTEX + 1);
    tcase_add_test(tc, test_per_thread_worker_ids);
    tcase_add_loop_test(tc, test_overload_is_busy_not_clock_behind, 0, 3);
    suite_add_tcase(s, tc);
    tc = tcase_create("rules");
    tcase_add_loop_test(tc, test_sequence_exhaustion_waits_for_next_tick, 0, 3);
    tcase_add_loop_test(tc, test_clock_behind_small_gap_waits, 0, 3);
    tcase_add_loop_test(tc, test_clock_behind_one_hour_errors, 0, 3);
    tcase_add_loop_test(tc, test_batch_across_tick_boundary, 0, 3);
    tcase_add_loop_test(tc, test_node_bits_low_strictly_increasing, 0, 3);
    tcase_add_loop_test(tc, test_lease_guard, 0, 3);
    tcase_add_loop_test(tc, test_cap_lease, 0, 3);
    tcase_add_test(tc, test_cap_before_lease_stays);
    tcase_add_loop_test(tc, test_resume_after_cap, 0, 3);
    tcase_add_loop_test(tc, test_rebind_after_cap, 0, 3);
    tcase_add_loop_test(tc, test_cap_does_not_recall_a_reservation_in_flight, 0, 3);
    tcase_add_loop_test(tc, test_cap_races_issuing_threads, 0, 3);
    tcase_add_loop_test(tc, test_bind, 0, 3);
    tcase_add_loop_test(tc, test_bind_races_issuing_threads, 0, 3);
    tcase_add_loop_test(tc, test_min_tick_and_seal, 0, 3);
    tcase_add_test(tc, test_lifetime_end);
    tcase_add_loop_test(tc, test_successor_floor, 0, 3);
    tcase_add_loop_test(tc, test_random_sequence_start, 0, 3);
    tcase_add_test(tc, test_init_rejects_bad_ids);
    tcase_add_test(tc, test_sync_mode_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(generator_suite());
}
