#include "util/budget.h"

#include <assert.h>
#include <string.h>

void budget_init(byte_budget *b, uint64_t limit)
{
    memset(b, 0, sizeof *b);
    atomic_init(&b->held, 0);
    atomic_init(&b->refusals, 0);
    b->limit = limit;
}

void budget_set_share(byte_budget *b, uint64_t floor, uint64_t reserve)
{
    b->floor = floor;
    b->reserve = reserve < b->limit ? reserve : b->limit;
}

/* The most `held` may reach after a take of n by a taker holding `have`. */
static uint64_t ceiling(const byte_budget *b, uint64_t have, uint64_t n)
{
    bool small = have <= b->floor && n <= b->floor - have;
    return small ? b->limit : b->limit - b->reserve;
}

bool budget_take_share(byte_budget *b, uint64_t have, uint64_t n)
{
    if (n == 0)
        return true;
    uint64_t top = ceiling(b, have, n);
    uint64_t cur = atomic_load_explicit(&b->held, memory_order_relaxed);
    do {
        if (n > top || cur > top - n) {
            atomic_fetch_add_explicit(&b->refusals, 1, memory_order_relaxed);
            return false;
        }
    } while (!atomic_compare_exchange_weak_explicit(&b->held, &cur, cur + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

bool budget_admits(byte_budget *b, uint64_t n)
{
    uint64_t top = ceiling(b, 0, n);
    uint64_t cur = atomic_load_explicit(&b->held, memory_order_relaxed);
    if (n <= top && cur <= top - n)
        return true;
    atomic_fetch_add_explicit(&b->refusals, 1, memory_order_relaxed);
    return false;
}

void budget_give(byte_budget *b, uint64_t n)
{
    if (n == 0)
        return;
    uint64_t before = atomic_fetch_sub_explicit(&b->held, n, memory_order_relaxed);
    assert(before >= n); /* giving back more than was taken is a bug of the taker */
    (void)before;
}
