/* util/budget: takes up to the limit and not a byte past it, refusals counted and taking
 * nothing, gives back to zero; four threads hammering one budget never see it above its limit
 * and leave it at zero. */
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
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
