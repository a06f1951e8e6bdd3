#include "snowflake/layout.h"

#include <stdio.h>

int sf_layout_init(sf_layout *l, unsigned timestamp_bits, unsigned datacenter_bits,
                   unsigned worker_bits, unsigned sequence_bits, uint64_t epoch_ms,
                   uint32_t unit_ms, uint64_t now_ms, char *err, size_t errlen)
{
    unsigned sum = timestamp_bits + datacenter_bits + worker_bits + sequence_bits;
    if (timestamp_bits > 63 || datacenter_bits > 63 || worker_bits > 63 || sequence_bits > 63 ||
        sum != 63) {
        snprintf(err, errlen,
                 "timestamp_bits + datacenter_bits + worker_bits + sequence_bits must be 63 "
                 "(the sign bit stays 0), got %u+%u+%u+%u",
                 timestamp_bits, datacenter_bits, worker_bits, sequence_bits);
        return -1;
    }
    if (sequence_bits < SF_MIN_SEQUENCE_BITS) {
        snprintf(err, errlen, "sequence_bits must be at least %d, got %u", SF_MIN_SEQUENCE_BITS,
                 sequence_bits);
        return -1;
    }
    if (datacenter_bits + worker_bits == 0) {
        snprintf(err, errlen,
                 "datacenter_bits + worker_bits must be at least 1: IDs must name "
                 "the node that issued them");
        return -1;
    }
    if (sequence_bits > 31 || worker_bits > 31 || datacenter_bits > 31) {
        snprintf(err, errlen, "sequence_bits, worker_bits and datacenter_bits must be at most 31");
        return -1;
    }
    if (unit_ms < 1) {
        snprintf(err, errlen, "time_unit_ms must be at least 1");
        return -1;
    }
    if (epoch_ms > now_ms) {
        snprintf(err, errlen, "epoch is in the future (%llu ms > now %llu ms)",
                 (unsigned long long)epoch_ms, (unsigned long long)now_ms);
        return -1;
    }
    /* Lifetime: the first tick that no longer fits, in ms since the Unix epoch. */
    double end_ms = (double)epoch_ms + (double)(UINT64_C(1) << timestamp_bits) * (double)unit_ms;
    if (end_ms >= 9.2e18) { /* keep every tick's ms value inside 63 bits */
        snprintf(err, errlen, "timestamp_bits=%u with time_unit_ms=%u reaches beyond 64-bit time",
                 timestamp_bits, unit_ms);
        return -1;
    }
    double left_years = (end_ms - (double)now_ms) / SF_MS_PER_YEAR;
    if (left_years < SF_MIN_LIFETIME_YEARS) {
        snprintf(err, errlen,
                 "layout runs out of timestamps in %.1f years (%u bits of %u ms from the epoch); "
                 "at least %d years are required: add timestamp_bits, raise time_unit_ms or "
                 "move the epoch",
                 left_years < 0 ? 0.0 : left_years, timestamp_bits, unit_ms, SF_MIN_LIFETIME_YEARS);
        return -1;
    }
    l->timestamp_bits = (uint8_t)timestamp_bits;
    l->datacenter_bits = (uint8_t)datacenter_bits;
    l->worker_bits = (uint8_t)worker_bits;
    l->sequence_bits = (uint8_t)sequence_bits;
    l->unit_ms = unit_ms;
    l->epoch_ms = epoch_ms;
    l->worker_shift = (uint8_t)sequence_bits;
    l->datacenter_shift = (uint8_t)(sequence_bits + worker_bits);
    l->timestamp_shift = (uint8_t)(sequence_bits + worker_bits + datacenter_bits);
    l->sequence_max = (UINT64_C(1) << sequence_bits) - 1;
    l->worker_max = (UINT64_C(1) << worker_bits) - 1;
    l->datacenter_max = (UINT64_C(1) << datacenter_bits) - 1;
    l->tick_max = (UINT64_C(1) << timestamp_bits) - 1;
    l->wide = false;
    return 0;
}

int sf_layout_init_unix_ms(sf_layout *l, unsigned datacenter_bits, unsigned worker_bits,
                           char *err, size_t errlen)
{
    if (datacenter_bits + worker_bits > SF_WIDE_NODE_BITS_MAX) {
        snprintf(err, errlen,
                 "datacenter_bits + worker_bits is %u; UUIDv7 and ULID carry the node in their "
                 "random bits and need at most %d node bits (at least 32 random bits)",
                 datacenter_bits + worker_bits, SF_WIDE_NODE_BITS_MAX);
        return -1;
    }
    *l = (sf_layout){.timestamp_bits = SF_WIDE_TIMESTAMP_BITS,
                     .datacenter_bits = (uint8_t)datacenter_bits,
                     .worker_bits = (uint8_t)worker_bits,
                     .sequence_bits = SF_WIDE_COUNTER_BITS,
                     .unit_ms = 1,
                     .epoch_ms = 0,
                     .worker_shift = 0,
                     .datacenter_shift = (uint8_t)worker_bits,
                     .timestamp_shift = 0, /* no 64-bit packing */
                     .sequence_max = (UINT64_C(1) << SF_WIDE_COUNTER_BITS) - 1,
                     .worker_max = (UINT64_C(1) << worker_bits) - 1,
                     .datacenter_max = (UINT64_C(1) << datacenter_bits) - 1,
                     .tick_max = (UINT64_C(1) << SF_WIDE_TIMESTAMP_BITS) - 1,
                     .wide = true};
    return 0;
}

int sf_layout_unpack(const sf_layout *l, uint64_t id, uint64_t now_ms, uint64_t slack_ms,
                     sf_id_parts *out, char *err, size_t errlen)
{
    if (id >> 63) {
        snprintf(err, errlen, "sign bit set: not a snowflake ID");
        return -1;
    }
    uint64_t tick = id >> l->timestamp_shift;
    uint64_t ms = sf_layout_ms_of(l, tick);
    if (now_ms && ms > now_ms + slack_ms) {
        snprintf(err, errlen, "timestamp %llu ms is in the future", (unsigned long long)ms);
        return -1;
    }
    out->tick = tick;
    out->timestamp_ms = ms;
    out->datacenter = (uint32_t)((id >> l->datacenter_shift) & l->datacenter_max);
    out->worker = (uint32_t)((id >> l->worker_shift) & l->worker_max);
    out->sequence = (uint32_t)(id & l->sequence_max);
    return 0;
}

double sf_layout_cap_per_second(const sf_layout *l)
{
    return (double)(l->sequence_max + 1) * 1000.0 / (double)l->unit_ms;
}
