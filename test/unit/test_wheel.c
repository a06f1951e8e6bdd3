/* Timing wheel: firing exactly at the deadline across every level boundary and beyond the top,
 * cancel and move (also from callbacks), far jumps, next_expiry bounds, and a randomized
 * comparison against a brute-force model. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "net/wheel.h"

typedef struct item {
    wheel_timer t;
    unsigned fired;
    unsigned seq;      /* order of the last firing, over the whole test */
    uint64_t fired_at; /* g_now of the run that fired it */
    void (*action)(struct item *self);
} item;

#define ITEM_OF(tp) ((item *)((char *)(tp) - offsetof(item, t)))

static wheel g_w;     /* the wheel under test (static: the struct is ~12 KB) */
static uint64_t g_now; /* the time passed to the current wheel_run */
static unsigned g_seq;

static void on_fire(wheel_timer *t)
{
    item *it = ITEM_OF(t);
    it->fired++;
    it->fired_at = g_now;
    it->seq = ++g_seq;
    if (it->action)
        it->action(it);
}

static void item_init(item *it)
{
    memset(it, 0, sizeof *it);
    wheel_timer_init(&it->t, on_fire);
}

static size_t run(uint64_t now)
{
    g_now = now;
    return wheel_run(&g_w, now);
}

static const uint64_t deltas[] = {1,
                                  2,
                                  63,
                                  64,
                                  65,
                                  127,
                                  4095,
                                  4096,
                                  4097,
                                  (UINT64_C(1) << 18) - 1,
                                  UINT64_C(1) << 18,
                                  (UINT64_C(1) << 18) + 1,
                                  (UINT64_C(1) << 24) - 1,
                                  UINT64_C(1) << 24,
                                  (UINT64_C(1) << 30) - 1,
                                  UINT64_C(1) << 30,
                                  (UINT64_C(1) << 36) - 1, /* the last ms of the top level */
                                  UINT64_C(1) << 36,       /* beyond the top level */
                                  (UINT64_C(1) << 36) + 1,
                                  UINT64_C(1) << 40,
                                  UINT64_C(1) << 50};
#define NDELTAS (sizeof deltas / sizeof deltas[0])

/* Wheel start times: aligned, just past and just before digit boundaries, realistic epoch ms. */
static const uint64_t starts[] = {0,
                                  1,
                                  63,
                                  64,
                                  4095,
                                  (UINT64_C(1) << 36) - 1,
                                  (UINT64_C(1) << 36) - (UINT64_C(1) << 30) + 17,
                                  UINT64_C(1732912345678),
                                  UINT64_C(1) << 62};
#define NSTARTS (sizeof starts / sizeof starts[0])

static unsigned level_of(uint64_t now, uint64_t at)
{
    return (unsigned)(63 - __builtin_clzll(at ^ now)) / WHEEL_BITS;
}

START_TEST(test_basic_fire)
{
    item a;
    item_init(&a);
    wheel_init(&g_w, 1000);
    ck_assert(!wheel_is_scheduled(&a.t));
    wheel_add(&g_w, &a.t, 1010);
    ck_assert(wheel_is_scheduled(&a.t));
    ck_assert_uint_eq(a.t.expire_at, 1010);
    ck_assert_uint_eq(run(1005), 0);
    ck_assert_uint_eq(run(1010), 1);
    ck_assert_uint_eq(a.fired, 1);
    ck_assert_uint_eq(a.fired_at, 1010);
    ck_assert(!wheel_is_scheduled(&a.t));
    ck_assert_ptr_null(a.t.next);
    ck_assert_ptr_null(a.t.prev);
    ck_assert_uint_eq(run(5000), 0);
    ck_assert_uint_eq(a.fired, 1);
    ck_assert_uint_eq(wheel_next_expiry(&g_w), UINT64_MAX);
}
END_TEST

/* For one start time (_i), every delta: a jump to deadline - 1 fires nothing, the deadline
 * itself fires, whatever the level. */
START_TEST(test_not_early_jump)
{
    uint64_t start = starts[_i];
    for (size_t d = 0; d < NDELTAS; d++) {
        item a;
        item_init(&a);
        wheel_init(&g_w, start);
        uint64_t at = start + deltas[d];
        wheel_add(&g_w, &a.t, at);
        if (deltas[d] > 1)
            ck_assert_uint_eq(run(start + deltas[d] / 2), 0);
        ck_assert_msg(run(at - 1) == 0, "start %llu delta %llu fired early",
                      (unsigned long long)start, (unsigned long long)deltas[d]);
        ck_assert(wheel_is_scheduled(&a.t));
        ck_assert_msg(run(at) == 1, "start %llu delta %llu did not fire",
                      (unsigned long long)start, (unsigned long long)deltas[d]);
        ck_assert_uint_eq(a.fired, 1);
        ck_assert_uint_eq(wheel_count(&g_w), 0);
    }
}
END_TEST

/* The caller's pattern: wake only at wheel_next_expiry. Every wake is <= the deadline, the
 * timer fires exactly at its deadline, and it takes at most one wake per level (+ the far list). */
START_TEST(test_driven_by_next_expiry)
{
    uint64_t start = starts[_i];
    for (size_t d = 0; d < NDELTAS; d++) {
        item a;
        item_init(&a);
        wheel_init(&g_w, start);
        uint64_t at = start + deltas[d];
        wheel_add(&g_w, &a.t, at);
        unsigned wakes = 0;
        while (a.fired == 0 && wakes <= WHEEL_LEVELS + 1) {
            uint64_t next = wheel_next_expiry(&g_w);
            ck_assert_msg(next <= at && next > start, "start %llu delta %llu: next %llu",
                          (unsigned long long)start, (unsigned long long)deltas[d],
                          (unsigned long long)next);
            run(next);
            wakes++;
        }
        ck_assert_msg(a.fired == 1 && a.fired_at == at, "start %llu delta %llu: %u wakes",
                      (unsigned long long)start, (unsigned long long)deltas[d], wakes);
        ck_assert_uint_eq(wheel_next_expiry(&g_w), UINT64_MAX);
    }
}
END_TEST

/* next_expiry is at most one slot of the timer's level early. */
START_TEST(test_next_expiry_granularity)
{
    uint64_t start = starts[_i];
    for (size_t d = 0; d < NDELTAS; d++) {
        item a;
        item_init(&a);
        wheel_init(&g_w, start);
        ck_assert_uint_eq(wheel_next_expiry(&g_w), UINT64_MAX);
        uint64_t at = start + deltas[d];
        wheel_add(&g_w, &a.t, at);
        uint64_t next = wheel_next_expiry(&g_w);
        unsigned level = level_of(start, at);
        ck_assert(next <= at);
        if (level < WHEEL_LEVELS)
            ck_assert_uint_lt(at - next, UINT64_C(1) << (level * WHEEL_BITS));
        else /* far list: the start of the deadline's 2^36 ms epoch */
            ck_assert_uint_eq(next, at >> 36 << 36);
    }
}
END_TEST

START_TEST(test_past_and_present_deadlines)
{
    item a, b;
    item_init(&a);
    item_init(&b);
    wheel_init(&g_w, 500);
    wheel_add(&g_w, &a.t, 500); /* == now */
    wheel_add(&g_w, &b.t, 3);   /* in the past */
    ck_assert_uint_eq(wheel_next_expiry(&g_w), 3);
    ck_assert_uint_eq(run(500), 2);
    wheel_add(&g_w, &a.t, 400);
    ck_assert_uint_eq(run(100), 1); /* time going backwards: no advance, due timers still fire */
    ck_assert_uint_eq(a.fired, 2);
    wheel_add(&g_w, &a.t, 501);
    ck_assert_uint_eq(run(200), 0); /* backwards again: 501 is not due */
    ck_assert_uint_eq(run(501), 1);
}
END_TEST

START_TEST(test_cancel)
{
    item a, b, c;
    item_init(&a);
    item_init(&b);
    item_init(&c);
    wheel_init(&g_w, 0);
    wheel_cancel(&a.t); /* never scheduled: no-op */
    wheel_add(&g_w, &a.t, 100);
    wheel_add(&g_w, &b.t, 100); /* same slot */
    wheel_cancel(&a.t);
    ck_assert(!wheel_is_scheduled(&a.t));
    wheel_cancel(&a.t); /* twice: no-op */
    ck_assert_uint_eq(wheel_count(&g_w), 1);
    ck_assert_uint_eq(run(100), 1);
    ck_assert_uint_eq(a.fired, 0);
    ck_assert_uint_eq(b.fired, 1);

    /* Cancelling the last timer of a slot clears its bit: nothing left to wake for. */
    wheel_add(&g_w, &c.t, 100 + 5000);
    ck_assert_uint_ne(wheel_next_expiry(&g_w), UINT64_MAX);
    wheel_cancel(&c.t);
    ck_assert_uint_eq(wheel_next_expiry(&g_w), UINT64_MAX);
    wheel_add(&g_w, &c.t, UINT64_C(1) << 45); /* far list */
    wheel_cancel(&c.t);
    ck_assert_uint_eq(wheel_next_expiry(&g_w), UINT64_MAX);
    ck_assert_uint_eq(run(UINT64_C(1) << 46), 0);
    ck_assert_uint_eq(wheel_count(&g_w), 0);
}
END_TEST

START_TEST(test_readd_moves)
{
    item a;
    item_init(&a);
    wheel_init(&g_w, 0);
    wheel_add(&g_w, &a.t, 10);
    wheel_add(&g_w, &a.t, 20); /* later */
    ck_assert_uint_eq(wheel_count(&g_w), 1);
    ck_assert_uint_eq(run(10), 0);
    ck_assert_uint_eq(run(20), 1);

    wheel_add(&g_w, &a.t, 20 + 5000);
    wheel_add(&g_w, &a.t, 23); /* earlier, other level */
    ck_assert_uint_eq(wheel_next_expiry(&g_w), 23);
    ck_assert_uint_eq(run(23), 1);
    ck_assert_uint_eq(run(20 + 5000), 0);

    wheel_add(&g_w, &a.t, UINT64_MAX); /* far list, then due */
    wheel_add(&g_w, &a.t, 1);
    ck_assert_uint_eq(wheel_count(&g_w), 1);
    ck_assert_uint_eq(run(5020), 1);
    ck_assert_uint_eq(a.fired, 3);
}
END_TEST

START_TEST(test_beyond_top_level)
{
    item a, b, c;
    item_init(&a);
    item_init(&b);
    item_init(&c);
    wheel_init(&g_w, 5);
    uint64_t ta = 5 + (UINT64_C(1) << 36) + 12345, tb = UINT64_C(1) << 50, tc = UINT64_MAX - 1;
    wheel_add(&g_w, &a.t, ta);
    wheel_add(&g_w, &b.t, tb);
    wheel_add(&g_w, &c.t, tc);
    ck_assert_uint_eq(wheel_count(&g_w), 3);
    unsigned wakes = 0;
    while (a.fired == 0 && wakes < 10) {
        uint64_t next = wheel_next_expiry(&g_w);
        ck_assert_uint_le(next, ta);
        run(next);
        wakes++;
    }
    ck_assert_uint_eq(a.fired_at, ta);
    ck_assert_uint_le(wakes, WHEEL_LEVELS + 1);
    ck_assert_uint_eq(run(tb - 1), 0);
    ck_assert_uint_eq(run(tb), 1);
    ck_assert_uint_eq(run(tc - 1), 0);
    ck_assert_uint_eq(wheel_count(&g_w), 1);
    ck_assert_uint_eq(run(tc), 1);
    ck_assert_uint_eq(c.fired_at, tc);
    ck_assert_uint_eq(wheel_count(&g_w), 0);
}
END_TEST

/* A stalled loop: one run 10 s later fires everything due, once, and nothing else. */
START_TEST(test_jump_fires_all_due)
{
    enum { N = 10000, LATER = 1000 };
    static item due[N], later[LATER];
    uint64_t start = UINT64_C(1732912345678);
    wheel_init(&g_w, start);
    srand(7);
    for (unsigned i = 0; i < N; i++) {
        item_init(&due[i]);
        wheel_add(&g_w, &due[i].t, start + 1 + (uint64_t)rand() % 10000);
    }
    for (unsigned i = 0; i < LATER; i++) {
        item_init(&later[i]);
        wheel_add(&g_w, &later[i].t, start + 10001 + (uint64_t)rand() % (UINT64_C(1) << 40));
    }
    ck_assert_uint_eq(wheel_count(&g_w), N + LATER);
    ck_assert_uint_eq(run(start + 10000), N);
    unsigned bad = 0;
    for (unsigned i = 0; i < N; i++)
        bad += due[i].fired != 1 || due[i].t.expire_at > due[i].fired_at;
    for (unsigned i = 0; i < LATER; i++)
        bad += later[i].fired != 0 || !wheel_is_scheduled(&later[i].t);
    ck_assert_uint_eq(bad, 0);
    ck_assert_uint_eq(wheel_count(&g_w), LATER);
    ck_assert_uint_eq(run(start + 10000 + (UINT64_C(1) << 41)), LATER);
    ck_assert_uint_eq(wheel_count(&g_w), 0);
}
END_TEST

static void readd_plus_10(item *it)
{
    wheel_add(&g_w, &it->t, it->t.expire_at + 10);
}

/* Periodic timers. A re-add with a deadline that has already passed waits for the next run. */
START_TEST(test_periodic_readd)
{
    item a;
    item_init(&a);
    a.action = readd_plus_10;
    wheel_init(&g_w, 0);
    wheel_add(&g_w, &a.t, 10);
    unsigned early = 0;
    for (uint64_t now = 1; now <= 1000; now++) {
        unsigned before = a.fired;
        run(now);
        early += a.fired != before && now % 10 != 0;
    }
    ck_assert_uint_eq(early, 0);
    ck_assert_uint_eq(a.fired, 100);
    ck_assert_uint_eq(a.t.expire_at, 1010);
    ck_assert_uint_eq(run(2000), 1); /* 1010 fires; 1020 is already due: next run */
    ck_assert_uint_eq(a.t.expire_at, 1020);
    ck_assert_uint_le(wheel_next_expiry(&g_w), 1020);
    ck_assert_uint_eq(run(2000), 1); /* catch-up: one per run, never a livelock */
    ck_assert_uint_eq(a.t.expire_at, 1030);
}
END_TEST

static item *g_other;

static void postpone_other(item *self)
{
    (void)self;
    wheel_add(&g_w, &g_other->t, g_now + 100);
}

static void cancel_other(item *self)
{
    (void)self;
    wheel_cancel(&g_other->t);
}

static item *g_pair[2];

static void cancel_partner(item *self)
{
    wheel_cancel(&g_pair[self == g_pair[0]]->t);
}

/* Two timers due in one run, each cancelling the other: whichever fires first wins. */
START_TEST(test_cancel_other_due_in_same_run)
{
    item a, b;
    item_init(&a);
    item_init(&b);
    a.action = b.action = cancel_partner;
    g_pair[0] = &a;
    g_pair[1] = &b;
    wheel_init(&g_w, 0);
    wheel_add(&g_w, &a.t, 50);
    wheel_add(&g_w, &b.t, 50);
    ck_assert_uint_eq(run(50), 1);
    ck_assert_uint_eq(a.fired + b.fired, 1);
    ck_assert_uint_eq(wheel_count(&g_w), 0);

    /* different slots and levels, both due after a jump */
    wheel_add(&g_w, &a.t, 60);
    wheel_add(&g_w, &b.t, 9000);
    ck_assert_uint_eq(run(10000), 1);
    ck_assert_uint_eq(a.fired + b.fired, 2);
    ck_assert_uint_eq(wheel_count(&g_w), 0);

    /* one way: a cancels b; b fires only if the run happened to order it before a */
    item_init(&a);
    item_init(&b);
    a.action = cancel_other;
    g_other = &b;
    wheel_add(&g_w, &a.t, 10050);
    wheel_add(&g_w, &b.t, 10040);
    size_t n = run(10100);
    ck_assert_uint_eq(a.fired, 1);
    ck_assert_uint_eq(n, 1 + b.fired);
    if (b.fired)
        ck_assert_uint_lt(b.seq, a.seq);
    ck_assert(!wheel_is_scheduled(&b.t));
}
END_TEST

/* Moving a due, not yet fired timer to the future keeps it from firing now. */
START_TEST(test_postpone_other_due_in_same_run)
{
    item a, b;
    item_init(&a);
    item_init(&b);
    a.action = postpone_other;
    g_other = &b;
    wheel_init(&g_w, 0);
    wheel_add(&g_w, &a.t, 30);
    wheel_add(&g_w, &b.t, 30);
    size_t n = run(30);
    ck_assert_uint_eq(a.fired, 1);
    ck_assert_uint_eq(n, 1 + b.fired);
    if (b.fired) /* the order within a run is free, but b may only fire before a moved it */
        ck_assert_uint_lt(b.seq, a.seq);
    ck_assert(wheel_is_scheduled(&b.t));
    ck_assert_uint_eq(b.t.expire_at, 130);
    ck_assert_uint_eq(run(129), 0);
    ck_assert_uint_eq(run(130), 1);
}
END_TEST

static item g_c, g_d, g_e;

static void add_immediate(item *self)
{
    (void)self;
    wheel_add(&g_w, &g_c.t, g_now);     /* due now */
    wheel_add(&g_w, &g_d.t, g_now - 5); /* already past */
    wheel_add(&g_w, &g_e.t, g_now + 1);
}

/* Stated behaviour: a timer added from a callback with a deadline <= now fires on the NEXT
 * wheel_run, not in the current one; next_expiry reports it as due. */
START_TEST(test_add_due_from_callback_fires_next_run)
{
    item a;
    item_init(&a);
    item_init(&g_c);
    item_init(&g_d);
    item_init(&g_e);
    a.action = add_immediate;
    wheel_init(&g_w, 0);
    wheel_add(&g_w, &a.t, 10);
    ck_assert_uint_eq(run(10), 1);
    ck_assert_uint_eq(g_c.fired + g_d.fired + g_e.fired, 0);
    ck_assert_uint_eq(wheel_count(&g_w), 3);
    ck_assert_uint_eq(wheel_next_expiry(&g_w), 5);
    ck_assert_uint_eq(run(10), 2);
    ck_assert_uint_eq(g_c.fired + g_d.fired, 2);
    ck_assert_uint_eq(g_e.fired, 0);
    ck_assert_uint_eq(run(11), 1);
}
END_TEST

static size_t g_count_seen;

static void record_count(item *self)
{
    (void)self;
    g_count_seen = wheel_count(&g_w);
}

START_TEST(test_count)
{
    item it[6];
    for (int i = 0; i < 6; i++)
        item_init(&it[i]);
    wheel_init(&g_w, 1000);
    ck_assert_uint_eq(wheel_count(&g_w), 0);
    wheel_add(&g_w, &it[0].t, 999);                       /* due */
    wheel_add(&g_w, &it[1].t, 1001);                      /* level 0 */
    wheel_add(&g_w, &it[2].t, 1000 + 100000);             /* higher level */
    wheel_add(&g_w, &it[3].t, 1000 + (UINT64_C(1) << 37)); /* far */
    wheel_add(&g_w, &it[4].t, 1001);
    ck_assert_uint_eq(wheel_count(&g_w), 5);
    wheel_add(&g_w, &it[4].t, 1002); /* move: still 5 */
    ck_assert_uint_eq(wheel_count(&g_w), 5);
    wheel_cancel(&it[4].t);
    ck_assert_uint_eq(wheel_count(&g_w), 4);
    ck_assert_uint_eq(run(1001), 2);
    ck_assert_uint_eq(wheel_count(&g_w), 2);

    /* Inside a run, timers due but not fired yet still count. */
    it[5].action = record_count;
    wheel_add(&g_w, &it[5].t, 1005);
    wheel_add(&g_w, &it[0].t, 1005);
    wheel_add(&g_w, &it[1].t, 1005);
    ck_assert_uint_eq(run(1005), 3);
    ck_assert_uint_le(g_count_seen, 4); /* 2 later + up to 2 still pending */
    ck_assert_uint_ge(g_count_seen, 2);
    ck_assert_uint_eq(wheel_count(&g_w), 2);
}
END_TEST

static void free_self(item *self)
{
    free(self); /* the wheel must not touch the timer after its callback */
}

START_TEST(test_callback_frees_its_timer)
{
    wheel_init(&g_w, 0);
    for (int i = 0; i < 100; i++) {
        item *it = malloc(sizeof *it);
        ck_assert_ptr_nonnull(it);
        item_init(it);
        it->action = free_self;
        wheel_add(&g_w, &it->t, (uint64_t)(i % 7) * 3000);
    }
    ck_assert_uint_eq(run(20000), 100);
    ck_assert_uint_eq(wheel_count(&g_w), 0);
}
END_TEST

/* --- randomized comparison against a brute-force model ------------------------------------------ */

enum { P_ITEMS = 512, P_STEPS = 100000 };

typedef struct model {
    uint64_t now; /* the wheel's time */
    bool sched[P_ITEMS], eligible[P_ITEMS];
    uint64_t exp[P_ITEMS];
    uint64_t rng;
    unsigned long fired_total, fired_in_run;
    /* mismatches, counted in plain code and asserted once */
    unsigned long not_eligible, early, lost, count_bad, next_late, next_bad, sched_bad, ret_bad;
} model;

static model g_m;
static item g_items[P_ITEMS];

static uint64_t rnd(void)
{
    uint64_t x = g_m.rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    g_m.rng = x;
    return x * UINT64_C(2685821657736338717);
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Deadlines: the past, now, log-uniform up to 2^40 ms ahead, beyond the top level, never. */
static uint64_t random_deadline(void)
{
    uint64_t r = rnd(), now = g_m.now;
    switch (r % 32) {
    case 0:
        return now - (now < 1000 ? now : rnd() % 1000);
    case 1:
        return now;
    case 2:
        return sat_add(now, (UINT64_C(1) << 36) + rnd() % (UINT64_C(1) << 38));
    case 3:
        return (r >> 8) % 8 == 0 ? UINT64_MAX : sat_add(now, 1 + rnd() % 64);
    default: {
        unsigned bits = (unsigned)(rnd() % 41);
        return sat_add(now, 1 + (rnd() & ((UINT64_C(1) << bits) - 1)));
    }
    }
}

static void model_add(unsigned i, uint64_t at)
{
    wheel_add(&g_w, &g_items[i].t, at);
    g_m.sched[i] = true;
    g_m.exp[i] = at;
    g_m.eligible[i] = false; /* added or moved during a run: not in this run's set */
}

static void model_cancel(unsigned i)
{
    wheel_cancel(&g_items[i].t);
    g_m.sched[i] = g_m.eligible[i] = false;
}

/* Callbacks act on the wheel like the connection layer would, mirrored in the model. */
static void prop_fire(wheel_timer *t)
{
    unsigned i = (unsigned)(ITEM_OF(t) - g_items);
    g_m.not_eligible += !g_m.eligible[i];
    g_m.early += g_m.exp[i] > g_m.now;
    g_m.sched[i] = g_m.eligible[i] = false;
    g_m.fired_in_run++;
    uint64_t r = rnd() % 10;
    if (r == 0)
        model_add(i, random_deadline()); /* re-arm itself, possibly already due */
    else if (r == 1)
        model_cancel((unsigned)(rnd() % P_ITEMS)); /* maybe one due in this same run */
    else if (r == 2)
        model_add((unsigned)(rnd() % P_ITEMS), random_deadline());
}

static void model_run(uint64_t now)
{
    if (now > g_m.now)
        g_m.now = now;
    for (unsigned i = 0; i < P_ITEMS; i++)
        g_m.eligible[i] = g_m.sched[i] && g_m.exp[i] <= g_m.now;
    g_m.fired_in_run = 0;
    size_t ret = wheel_run(&g_w, now);
    g_m.ret_bad += ret != g_m.fired_in_run;
    g_m.fired_total += g_m.fired_in_run;
    for (unsigned i = 0; i < P_ITEMS; i++)
        g_m.lost += g_m.eligible[i]; /* due at the start, neither fired nor cancelled/moved */
}

static void model_check(unsigned long step)
{
    uint64_t min = UINT64_MAX;
    unsigned n = 0;
    for (unsigned i = 0; i < P_ITEMS; i++) {
        if (g_m.sched[i]) {
            n++;
            if (g_m.exp[i] < min)
                min = g_m.exp[i];
        }
    }
    uint64_t next = wheel_next_expiry(&g_w);
    if (n == 0)
        g_m.next_bad += next != UINT64_MAX;
    else
        g_m.next_late += next > min;
    if (n > 0 && min > g_m.now)
        g_m.next_bad += next <= g_m.now; /* nothing due: must not ask for an immediate wake */
    if (step % 256 == 0) {
        g_m.count_bad += wheel_count(&g_w) != n;
        for (unsigned i = 0; i < P_ITEMS; i++)
            g_m.sched_bad += wheel_is_scheduled(&g_items[i].t) != g_m.sched[i];
    }
}

static uint64_t random_advance(void)
{
    uint64_t r = rnd() % 100;
    if (r < 60)
        return rnd() % 64;
    if (r < 85)
        return rnd() % 5000;
    if (r < 98)
        return rnd() % (UINT64_C(1) << 24);
    return rnd() % (UINT64_C(1) << 38);
}

START_TEST(test_property_vs_model)
{
    static const uint64_t prop_starts[] = {0, UINT64_C(1732912345678),
                                           (UINT64_C(1) << 36) - 3000, (UINT64_C(1) << 42) - 1};
    memset(&g_m, 0, sizeof g_m);
    g_m.rng = UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(_i + 1);
    g_m.now = prop_starts[_i];
    wheel_init(&g_w, g_m.now);
    for (unsigned i = 0; i < P_ITEMS; i++) {
        memset(&g_items[i], 0, sizeof g_items[i]);
        wheel_timer_init(&g_items[i].t, prop_fire);
    }
    for (unsigned long step = 0; step < P_STEPS; step++) {
        uint64_t r = rnd() % 100;
        unsigned i = (unsigned)(rnd() % P_ITEMS);
        if (r < 45) {
            model_add(i, random_deadline());
        } else if (r < 60) {
            model_cancel(i);
        } else if (r < 90) {
            model_run(g_m.now + random_advance());
        } else if (r < 93) {
            model_run(g_m.now - (g_m.now < 50 ? g_m.now : rnd() % 50)); /* backwards */
        } else {
            uint64_t next = wheel_next_expiry(&g_w); /* the loop's pattern: wake when asked */
            if (next != UINT64_MAX && next - (next > g_m.now ? g_m.now : next) < (UINT64_C(1) << 40))
                model_run(next);
        }
        model_check(step);
    }
    ck_assert_msg(g_m.not_eligible + g_m.early + g_m.lost + g_m.count_bad + g_m.next_late +
                          g_m.next_bad + g_m.sched_bad + g_m.ret_bad ==
                      0,
                  "not_eligible %lu early %lu lost %lu count %lu next_late %lu next_bad %lu "
                  "sched %lu ret %lu",
                  g_m.not_eligible, g_m.early, g_m.lost, g_m.count_bad, g_m.next_late,
                  g_m.next_bad, g_m.sched_bad, g_m.ret_bad);
    ck_assert_uint_gt(g_m.fired_total, 10000); /* the run exercised firing */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wheel");
    TCase *tc = tcase_create("wheel");
    tcase_add_test(tc, test_basic_fire);
    tcase_add_loop_test(tc, test_not_early_jump, 0, NSTARTS);
    tcase_add_loop_test(tc, test_driven_by_next_expiry, 0, NSTARTS);
    tcase_add_loop_test(tc, test_next_expiry_granularity, 0, NSTARTS);
    tcase_add_test(tc, test_past_and_present_deadlines);
    tcase_add_test(tc, test_cancel);
    tcase_add_test(tc, test_readd_moves);
    tcase_add_test(tc, test_beyond_top_level);
    tcase_add_test(tc, test_jump_fires_all_due);
    tcase_add_test(tc, test_periodic_readd);
    tcase_add_test(tc, test_cancel_other_due_in_same_run);
    tcase_add_test(tc, test_postpone_other_due_in_same_run);
    tcase_add_test(tc, test_add_due_from_callback_fires_next_run);
    tcase_add_test(tc, test_count);
    tcase_add_test(tc, test_callback_frees_its_timer);
    tcase_add_loop_test(tc, test_property_vs_model, 0, 4);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
