/* Log-linear latency histogram (see hist.h). */
#include "hist.h"

#include <math.h>
#include <string.h>

void hist_init(hist *h)
{
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

size_t hist_index(uint64_t ns)
{
    if (ns > HIST_MAX_NS)
        ns = HIST_MAX_NS;
    if (ns < HIST_EXACT)
        return (size_t)ns;
    unsigned e = 63u - (unsigned)__builtin_clzll(ns); /* >= HIST_SUB_BITS + 1 */
    unsigned shift = e - HIST_SUB_BITS;
    return HIST_EXACT + (size_t)(e - HIST_SUB_BITS - 1) * HIST_SUB +
           (size_t)((ns >> shift) - HIST_SUB);
}

uint64_t hist_bucket_low(size_t i)
{
    if (i < HIST_EXACT)
        return i;
    size_t k = i - HIST_EXACT;
    unsigned e = (unsigned)(k / HIST_SUB) + HIST_SUB_BITS + 1;
    uint64_t sub = k % HIST_SUB;
    return (HIST_SUB + sub) << (e - HIST_SUB_BITS);
}

uint64_t hist_bucket_high(size_t i)
{
    if (i < HIST_EXACT)
        return i;
    unsigned e = (unsigned)((i - HIST_EXACT) / HIST_SUB) + HIST_SUB_BITS + 1;
    return hist_bucket_low(i) + (UINT64_C(1) << (e - HIST_SUB_BITS)) - 1;
}

void hist_merge(hist *dst, const hist *src)
{
    for (size_t i = 0; i < HIST_BUCKETS; i++)
        dst->counts[i] += src->counts[i];
    dst->total += src->total;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    dst->sum += src->sum;
    dst->sumsq += src->sumsq;
}

uint64_t hist_percentile(const hist *h, double p)
{
    if (h->total == 0)
        return 0;
    if (p >= 100.0)
        return h->max;
    if (p < 0.0)
        p = 0.0;
    /* The rank of the value asked for, 1-based: ceil(p% of total), at least 1. */
    uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)h->total);
    if (rank < 1)
        rank = 1;
    if (rank > h->total)
        rank = h->total;
    uint64_t seen = 0;
    for (size_t i = 0; i < HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            uint64_t v = hist_bucket_high(i);
            if (v > h->max)
                v = h->max;
            if (v < h->min)
                v = h->min;
            return v;
        }
    }
    return h->max;
}

double hist_mean(const hist *h)
{
    return h->total ? h->sum / (double)h->total : 0.0;
}

double hist_stdev(const hist *h)
{
    if (h->total < 2)
        return 0.0;
    double m = hist_mean(h);
    double v = h->sumsq / (double)h->total - m * m;
    return v > 0 ? sqrt(v) : 0.0;
}
