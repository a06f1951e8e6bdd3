/* Snowflake ID layout: how the 63 usable bits of an ID are split.
 *
 *   bit 63        : sign, always 0 (IDs stay positive in signed 64-bit languages)
 *   timestamp_bits: ticks since the custom epoch (one tick = unit_ms milliseconds)
 *   datacenter_bits, worker_bits: the node that issued the ID
 *   sequence_bits : counter within one tick
 *
 * Pure functions, no I/O, callable from any thread. sf_layout_init() validates and precomputes
 * shifts and masks; everything else assumes a layout that passed it.
 */
#ifndef SF_SNOWFLAKE_LAYOUT_H
#define SF_SNOWFLAKE_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SF_MIN_SEQUENCE_BITS  8
#define SF_MIN_LIFETIME_YEARS 10
#define SF_MS_PER_YEAR        (365.2425 * 86400.0 * 1000.0)

typedef struct sf_layout {
    uint8_t timestamp_bits, datacenter_bits, worker_bits, sequence_bits;
    uint32_t unit_ms;  /* tick length */
    uint64_t epoch_ms; /* custom epoch, ms since the Unix epoch */
    /* derived */
    uint8_t worker_shift, datacenter_shift, timestamp_shift;
    uint64_t sequence_max, worker_max, datacenter_max, tick_max;
    /* The tick space of a 128-bit format (UUIDv7, ULID; sf_layout_init_unix_ms): Unix-epoch
     * milliseconds in 48 bits and a 12-bit counter, no 64-bit packing. The node is
     * (datacenter << worker_bits) | worker, placed by the format (snowflake/id128.h). */
    bool wide;
} sf_layout;

typedef struct sf_id_parts {
    uint64_t tick;         /* ticks since the custom epoch */
    uint64_t timestamp_ms; /* start of that tick, ms since the Unix epoch */
    uint32_t datacenter, worker, sequence;
} sf_id_parts;

/* Validates the widths (sum 63, sequence >= 8, at least one node bit), the epoch (not after
 * now_ms) and the lifetime (at least SF_MIN_LIFETIME_YEARS of ticks left after now_ms, the end
 * within 63-bit milliseconds), then fills *l.
 * Returns 0, or -1 with a one-line reason in err (naming the offending field). */
int sf_layout_init(sf_layout *l, unsigned timestamp_bits, unsigned datacenter_bits,
                   unsigned worker_bits, unsigned sequence_bits, uint64_t epoch_ms,
                   uint32_t unit_ms, uint64_t now_ms, char *err, size_t errlen);

/* The tick space of UUIDv7 and ULID: 48-bit Unix ms (to 10889), a SF_WIDE_COUNTER_BITS counter
 * per ms (RFC 9562 section 6.2, method 1), and a node of datacenter_bits + worker_bits, at most
 * SF_WIDE_NODE_BITS_MAX so that at least 32 bits of each ID stay random. Returns 0, or -1 with a
 * reason in err. */
#define SF_WIDE_TIMESTAMP_BITS 48
#define SF_WIDE_COUNTER_BITS   12
#define SF_WIDE_NODE_BITS_MAX  30
int sf_layout_init_unix_ms(sf_layout *l, unsigned datacenter_bits, unsigned worker_bits,
                           char *err, size_t errlen);

/* The Twitter layout 41/5/5/12, epoch 2020-01-01T00:00:00Z, 1 ms ticks. */
#define SF_DEFAULT_EPOCH_MS UINT64_C(1577836800000)

/* Compose an ID; fields must be within their maxima (asserted in debug builds). */
static inline uint64_t sf_layout_pack(const sf_layout *l, uint64_t tick, uint32_t datacenter,
                                      uint32_t worker, uint32_t sequence)
{
    return (tick << l->timestamp_shift) | ((uint64_t)datacenter << l->datacenter_shift) |
           ((uint64_t)worker << l->worker_shift) | sequence;
}

/* Decompose an ID. Returns 0, or -1 (reason in err) if the sign bit is set or, when now_ms is
 * non-zero, if the ID's tick starts after now_ms + slack_ms (an ID from the future). */
int sf_layout_unpack(const sf_layout *l, uint64_t id, uint64_t now_ms, uint64_t slack_ms,
                     sf_id_parts *out, char *err, size_t errlen);

/* Ticks <-> milliseconds since the Unix epoch. tick_of() clamps times before the epoch to 0. */
static inline uint64_t sf_layout_tick_of(const sf_layout *l, uint64_t unix_ms)
{
    if (unix_ms <= l->epoch_ms)
        return 0;
    return l->unit_ms == 1 ? unix_ms - l->epoch_ms : (unix_ms - l->epoch_ms) / l->unit_ms;
}
static inline uint64_t sf_layout_ms_of(const sf_layout *l, uint64_t tick)
{
    return l->epoch_ms + tick * l->unit_ms;
}

/* Maximum IDs per second one worker can issue: 2^sequence_bits per tick. */
double sf_layout_cap_per_second(const sf_layout *l);

#endif
