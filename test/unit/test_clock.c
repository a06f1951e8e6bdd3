/* Clocks: the system clock is anchored to the wall clock, never runs ahead of clock_gettime and
 * never lags it (the TSC cache is only a shortcut), per thread and across threads. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "check_main.h"
#include "util/clock.h"

START_TEST(test_anchored_to_wall_clock)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t wall = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    uint64_t now = clk_now(clk_system());
    ck_assert_uint_le(now > wall ? now - wall : wall - now, 50);
}
END_TEST

/* slow() before <= cached <= slow() after, for every read: the cached millisecond is exactly the
 * one clock_gettime would have given at some instant between the two. */
static void *bracket_reads(void *arg)
{
    size_t *violations = arg;
    clk_source *c = clk_system();
    size_t bad = 0;
    for (int i = 0; i < 300000; i++) {
        uint64_t before = clk_system_now_slow();
        uint64_t cached = clk_now(c);
        uint64_t after = clk_system_now_slow();
        bad += cached < before || cached > after;
        for (int k = i % 64; k > 0; k--) /* land at different offsets in the millisecond */
            __asm__ __volatile__("" ::: "memory");
    }
    *violations = bad;
    return NULL;
}

START_TEST(test_cached_reads_match_clock_gettime)
{
    pthread_t th[4];
    size_t bad[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, bracket_reads, &bad[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(bad[i] == 0, "thread %d: %zu cached reads outside their bracket", i, bad[i]);
    }
}
END_TEST

START_TEST(test_monotonic_per_thread)
{
    clk_source *c = clk_system();
    uint64_t prev = clk_now(c), backwards = 0, start = prev;
    while (prev - start < 30) { /* 30 ms of back-to-back reads */
        uint64_t now = clk_now(c);
        backwards += now < prev;
        prev = now;
    }
    ck_assert_uint_eq(backwards, 0);
}
END_TEST

START_TEST(test_fake_clock_steps)
{
    clk_fake f;
    clk_fake_init(&f, 1000, 3, 2);
    ck_assert_uint_eq(clk_now(&f.base), 1000);
    ck_assert_uint_eq(clk_now(&f.base), 1000);
    ck_assert_uint_eq(clk_now(&f.base), 1002); /* every 3rd read steps 2 ms */
    clk_fake_set(&f, 5);
    ck_assert_uint_eq(clk_now(&f.base), 5);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("clock");
    TCase *tc = tcase_create("clock");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_anchored_to_wall_clock);
    tcase_add_test(tc, test_cached_reads_match_clock_gettime);
    tcase_add_test(tc, test_monotonic_per_thread);
    tcase_add_test(tc, test_fake_clock_steps);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
