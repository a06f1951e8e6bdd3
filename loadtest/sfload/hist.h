/* Latency histogram: log-linear buckets in the manner of HdrHistogram, in nanoseconds.
 *
 * Values below 256 ns have a bucket each; above, every power-of-two range [2^e, 2^(e+1)) is split
 * into 128 equal buckets, so a bucket is at most 1/128 (0.78 %) of its values wide. Values are
 * clamped to HIST_MAX_NS (about 2.4 hours). 4736 buckets, 38 KB, one allocation-free struct.
 *
 * Ownership and threads: one histogram per load thread, written only by that thread; merge them
 * with hist_merge once the threads have been joined. Nothing here fails or allocates.
 *
 * Contract
 *   hist_record(h, ns)      O(1): counts one value.
 *   hist_percentile(h, p)   p in [0, 100]: the smallest recorded-bucket value such that at least
 *                           p % of the values are <= it, reported as the highest value of its
 *                           bucket, but never above the exact maximum. 0 when empty. p = 100 gives
 *                           the exact maximum.
 *   hist_merge(dst, src)    dst += src.
 *   hist_bucket_low/high(i) the value range bucket i counts (for printing a distribution).
 */
#ifndef SFLOAD_HIST_H
#define SFLOAD_HIST_H

#include <stddef.h>
#include <stdint.h>

#define HIST_SUB_BITS 7 /* 128 buckets per power of two above the exact range */
#define HIST_SUB      (1u << HIST_SUB_BITS)
#define HIST_EXACT    (2u * HIST_SUB) /* values below this have their own bucket */
#define HIST_TOP_EXP  42              /* highest power of two counted: [2^42, 2^43) ns */
#define HIST_MAX_NS   ((UINT64_C(1) << (HIST_TOP_EXP + 1)) - 1)
#define HIST_BUCKETS  (HIST_EXACT + (HIST_TOP_EXP - HIST_SUB_BITS) * HIST_SUB)

typedef struct hist {
    uint64_t counts[HIST_BUCKETS];
    uint64_t total;
    uint64_t min, max; /* exact; min is UINT64_MAX while empty */
    double sum, sumsq; /* for mean and standard deviation */
} hist;

void hist_init(hist *h);
size_t hist_index(uint64_t ns);
uint64_t hist_bucket_low(size_t i);
uint64_t hist_bucket_high(size_t i);

static inline void hist_record(hist *h, uint64_t ns)
{
    if (ns > HIST_MAX_NS)
        ns = HIST_MAX_NS;
    h->counts[hist_index(ns)]++;
    h->total++;
    if (ns < h->min)
        h->min = ns;
    if (ns > h->max)
        h->max = ns;
    double d = (double)ns;
    h->sum += d;
    h->sumsq += d * d;
}

void hist_merge(hist *dst, const hist *src);
uint64_t hist_percentile(const hist *h, double p);
double hist_mean(const hist *h);
double hist_stdev(const hist *h);

#endif
