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

bool budget_take(byte_budget *b, uint64_t n)
{
    if (n == 0)
        return true;
    uint64_t cur = atomic_load_explicit(&b->held, memory_order_relaxed);
    do {
        if (n > b->limit || cur > b->limit - n) {
            atomic_fetch_add_explicit(&b->refusals, 1, memory_order_relaxed);
            return false;
        }
    } while (!atomic_compare_exchange_weak_explicit(&b->held, &cur, cur + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

void budget_give(byte_budget *b, uint64_t n)
{
    if (n == 0)
        return;
    uint64_t before = atomic_fetch_sub_explicit(&b->held, n, memory_order_relaxed);
    assert(before >= n); /* giving back more than was taken is a bug of the taker */
    (void)before;
}
