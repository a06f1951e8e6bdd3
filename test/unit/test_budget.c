/* util/budget: takes up to the limit and not a byte past it, refusals counted and taking
 * nothing, gives back to zero; four threads hammering one budget never see it above its limit
 * and leave it at zero. Fair shares (budget_set_share): a taker within the floor may use the
 * reserve, one past it may not, whatever it held before; budget_admits says what a take of an
 * announced length would say now and takes nothing. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>

#include "check_main.h"
#include "util/budget.h"

START_TEST(test_take_and_give)
{
    byte_budget b;
    budget_init(&b, 100);
    ck_assert_uint_eq(budget_limit(&b), 100);
    ck_assert(budget_take(&b, 0));
    ck_assert(budget_take(&b, 60));
    ck_assert(budget_take(&b, 40)); /* exactly the limit */
    ck_assert_uint_eq(budget_held(&b), 100);
    ck_assert(!budget_take(&b, 1));
    ck_assert(budget_take(&b, 0)); /* nothing is always there */
    ck_assert_uint_eq(budget_refusals(&b), 1);
    budget_give(&b, 40);
    ck_assert(!budget_take(&b, 41)); /* refused whole: nothing taken */
    ck_assert_uint_eq(budget_held(&b), 60);
    ck_assert(budget_take(&b, 40));
    budget_give(&b, 100);
    budget_give(&b, 0);
    ck_assert_uint_eq(budget_held(&b), 0);
    ck_assert_uint_eq(budget_refusals(&b), 2);
}
END_TEST

START_TEST(test_huge_requests_do_not_wrap)
{
    byte_budget b;
    budget_init(&b, 1000);
    ck_assert(budget_take(&b, 10));
    ck_assert(!budget_take(&b, UINT64_MAX));     /* more than the limit */
    ck_assert(!budget_take(&b, UINT64_MAX - 5)); /* held + n would wrap below the limit */
    ck_assert(!budget_take(&b, 1001));
    ck_assert_uint_eq(budget_held(&b), 10);
}
END_TEST

START_TEST(test_share_keeps_the_reserve_for_small_takers)
{
    byte_budget b;
    budget_init(&b, 1000);
    budget_set_share(&b, 100, 200); /* takers past 100 bytes may fill 800 */
    ck_assert_uint_eq(budget_reserve(&b), 200);
    ck_assert_uint_eq(budget_floor(&b), 100);
    ck_assert(budget_take_share(&b, 0, 500));
    ck_assert(budget_take_share(&b, 500, 300)); /* 800: the large takers' share is full */
    ck_assert(!budget_take_share(&b, 0, 101));  /* a new large one: refused */
    ck_assert(!budget_take_share(&b, 800, 1));  /* the large one growing: refused */
    ck_assert(!budget_take_share(&b, 50, 51));  /* crossing the floor: a large take */
    ck_assert_uint_eq(budget_refusals(&b), 3);
    ck_assert(budget_take_share(&b, 0, 100)); /* small ones: from the reserve */
    ck_assert(budget_take_share(&b, 0, 60));
    ck_assert(budget_take_share(&b, 60, 40)); /* exactly the floor */
    ck_assert_uint_eq(budget_held(&b), 1000);
    ck_assert(!budget_take_share(&b, 0, 1)); /* the limit still binds everyone */
    ck_assert(!budget_take(&b, 1));
    budget_give(&b, 200);
    ck_assert(!budget_take_share(&b, 101, 1)); /* past the floor: 800 held is its ceiling */
    ck_assert(budget_take(&b, 1));             /* budget_take: a taker holding nothing */
    budget_give(&b, 801);
    ck_assert_uint_eq(budget_held(&b), 0);
    ck_assert(budget_take_share(&b, UINT64_MAX, 0)); /* nothing is always there */
    ck_assert(budget_take_share(&b, UINT64_MAX, 800)); /* no wrap past the floor */
    ck_assert(!budget_take_share(&b, UINT64_MAX, 1));
    budget_give(&b, 800);
}
END_TEST

START_TEST(test_share_clamped_and_off)
{
    byte_budget b;
    budget_init(&b, 1000);
    budget_set_share(&b, 10, 5000); /* more reserve than limit: everything is reserved */
    ck_assert_uint_eq(budget_reserve(&b), 1000);
    ck_assert(!budget_take_share(&b, 0, 11));
    ck_assert(budget_take_share(&b, 0, 10));
    budget_give(&b, 10);
    budget_init(&b, 1000); /* no share: one pool for every taker */
    ck_assert(budget_take_share(&b, 5000, 1000));
    ck_assert(!budget_take_share(&b, 0, 1));
    budget_give(&b, 1000);
}
END_TEST

START_TEST(test_admits_takes_nothing)
{
    byte_budget b;
    budget_init(&b, 1000);
    budget_set_share(&b, 100, 200);
    ck_assert(budget_admits(&b, 0));
    ck_assert(budget_admits(&b, 800));
    ck_assert(!budget_admits(&b, 801)); /* a large request may not use the reserve */
    ck_assert(budget_admits(&b, 100));
    ck_assert_uint_eq(budget_held(&b), 0);
    ck_assert_uint_eq(budget_refusals(&b), 1);
    ck_assert(budget_take(&b, 700));
    ck_assert(budget_admits(&b, 100)); /* 800: within the large share */
    ck_assert(!budget_admits(&b, 101));
    ck_assert(!budget_take(&b, 250)); /* a large take: not from the reserve */
    ck_assert(budget_take(&b, 100));   /* small ones: 950, from the reserve */
    ck_assert(budget_take(&b, 100));
    ck_assert(budget_take(&b, 50));
    ck_assert(budget_admits(&b, 50));
    ck_assert(!budget_admits(&b, 51));
    ck_assert(!budget_admits(&b, UINT64_MAX)); /* no wrap */
    ck_assert_uint_eq(budget_held(&b), 950);
    ck_assert_uint_eq(budget_refusals(&b), 5);
    budget_give(&b, 950);
}
END_TEST

#define THREADS 4
#define ROUNDS  200000

typedef struct {
    byte_budget *b;
    uint64_t max_seen, taken;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *w = p;
    for (unsigned i = 0; i < ROUNDS; i++) {
        uint64_t n = 1 + (i * 7919u) % 300;
        if (!budget_take(w->b, n))
            continue;
        w->taken++;
        uint64_t h = budget_held(w->b);
        if (h > w->max_seen)
            w->max_seen = h;
        budget_give(w->b, n);
    }
    return NULL;
}

START_TEST(test_threads_never_pass_the_limit)
{
    byte_budget b;
    budget_init(&b, 1000);
    pthread_t t[THREADS];
    worker_arg a[THREADS] = {{0}};
    for (int i = 0; i < THREADS; i++) {
        a[i].b = &b;
        ck_assert_int_eq(pthread_create(&t[i], NULL, worker, &a[i]), 0);
    }
    uint64_t taken = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_uint_le(a[i].max_seen, 1000);
        taken += a[i].taken;
    }
    ck_assert_uint_eq(budget_held(&b), 0);
    ck_assert_uint_eq(taken + budget_refusals(&b), (uint64_t)THREADS * ROUNDS);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("budget");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_take_and_give);
    tcase_add_test(tc, test_huge_requests_do_not_wrap);
    tcase_add_test(tc, test_threads_never_pass_the_limit);
    tcase_add_test(tc, test_share_keeps_the_reserve_for_small_takers);
    tcase_add_test(tc, test_share_clamped_and_off);
    tcase_add_test(tc, test_admits_takes_nothing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
