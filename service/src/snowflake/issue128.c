#include "snowflake/issue128.h"

#include "snowflake/rng.h"

/* Bits after the counter: UUIDv7's rand_b (after the variant) and ULID's remainder. */
#define UUID7_TAIL_BITS 62
#define ULID_TAIL_BITS  68

static inline uint64_t low_mask(unsigned bits)
{
    return bits >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << bits) - 1;
}

static inline unsigned node_bits_of(const sf_layout *l)
{
    return (unsigned)l->datacenter_bits + l->worker_bits;
}

unsigned sf_id128_random_bits(const sf_layout *l, sf_id128_format f)
{
    return (f == SF_FORMAT_UUID7 ? UUID7_TAIL_BITS : ULID_TAIL_BITS) - node_bits_of(l);
}

/* The tail (node above random) as bits 64.. in *hi and 0..63 in the result. */
static inline uint64_t tail_of(unsigned random_bits, uint64_t node, uint64_t random_lo,
                               uint64_t random_hi, uint64_t *hi)
{
    if (random_bits >= 64) {
        *hi = node << (random_bits - 64) | (random_hi & low_mask(random_bits - 64));
        return random_lo;
    }
    *hi = node >> (64 - random_bits);
    return node << random_bits | (random_lo & low_mask(random_bits));
}

static inline sf_id128 compose(sf_id128_format f, unsigned random_bits, uint64_t ms,
                               uint64_t counter, uint64_t node, uint64_t random_lo,
                               uint64_t random_hi)
{
    uint64_t tail_hi, tail_lo = tail_of(random_bits, node, random_lo, random_hi, &tail_hi);
    if (f == SF_FORMAT_UUID7)
        return sf_uuid7_make(ms, (uint32_t)counter, tail_lo);
    return (sf_id128){.hi = (ms & SF_ID128_MS_MAX) << 16 | (counter & 0xfff) << 4 | (tail_hi & 0xf),
                      .lo = tail_lo};
}

sf_id128 sf_id128_compose(const sf_layout *l, sf_id128_format f, uint64_t ms, uint32_t counter,
                          uint64_t node, uint64_t random_lo, uint64_t random_hi)
{
    return compose(f, sf_id128_random_bits(l, f), ms, counter, node & low_mask(node_bits_of(l)),
                   random_lo, random_hi);
}

void sf_id128_decompose(const sf_layout *l, sf_id128_format f, sf_id128 id, sf_id128_parts *out)
{
    unsigned rbits = sf_id128_random_bits(l, f);
    uint64_t tail_hi, tail_lo;
    out->ms = sf_id128_ms(id);
    if (f == SF_FORMAT_UUID7) {
        out->counter = (uint32_t)(id.hi & 0xfff);
        tail_hi = 0;
        tail_lo = id.lo & SF_UUID7_RAND_B_MAX;
    } else {
        out->counter = (uint32_t)(id.hi >> 4 & 0xfff);
        tail_hi = id.hi & 0xf;
        tail_lo = id.lo;
    }
    uint64_t node;
    if (rbits >= 64) {
        node = tail_hi >> (rbits - 64);
        out->random_lo = tail_lo;
        out->random_hi = tail_hi & low_mask(rbits - 64);
    } else {
        node = tail_lo >> rbits | tail_hi << (64 - rbits);
        out->random_lo = tail_lo & low_mask(rbits);
        out->random_hi = 0;
    }
    node &= low_mask(node_bits_of(l));
    out->datacenter = (uint32_t)(node >> l->worker_bits);
    out->worker = (uint32_t)(node & l->worker_max);
    out->random_bits = rbits;
}

int sf_id128_issue(sf_gen *g, sf_id128_format f, sf_id128 *out, uint32_t n)
{
    if (!g->layout.wide)
        return SF_EINVAL;
    sf_span span;
    int rc = sf_gen_reserve(g, n, &span);
    if (rc != SF_OK)
        return rc;
    /* Random words go into the first half of out and are consumed from the last ID back: ID i
     * reads word i before writing words 2i and 2i+1, which no earlier ID needs. One refill of
     * the thread's buffer serves 512 IDs. */
    uint64_t *words = (uint64_t *)(void *)out;
    if (sf_rng_fill(words, (size_t)n * sizeof *words) != 0)
        return SF_ERANDOM;
    const sf_layout *l = &g->layout;
    const unsigned rbits = sf_id128_random_bits(l, f), seq_bits = l->sequence_bits;
    const uint64_t seq_max = l->sequence_max, node = g->node_bits;
    for (uint32_t i = n; i-- > 0;) {
        uint64_t index = span.first_seq + (uint64_t)i;
        uint64_t random_hi = 0;
        if (rbits > 64 && sf_rng_u64(&random_hi) != 0) /* fewer than 4 node bits in a ULID */
            return SF_ERANDOM;
        out[i] = compose(f, rbits, span.first_tick + (index >> seq_bits), index & seq_max, node,
                         words[i], random_hi);
    }
    return SF_OK;
}
