/* Time -> ID bounds (bounds.h). */
#include "snowflake/bounds.h"

#include <stdio.h>

#include "util/rfc3339.h"

int sf_bounds_layout(const sf_layout *l, uint64_t from_ms, uint64_t to_ms, sf_bounds *out,
                     char *why, size_t whylen)
{
    char when[RFC3339_FORMAT_CAP];
    if (from_ms > to_ms) {
        snprintf(why, whylen, "from is after to");
        return -1;
    }
    if (from_ms < l->epoch_ms) {
        rfc3339_format_ms(l->epoch_ms, when);
        snprintf(why, whylen, "from is before the layout's epoch %s", when);
        return -1;
    }
    /* The start of the last tick: a later to would need the tick after it, which has no ID. */
    uint64_t last_tick_ms = sf_layout_ms_of(l, l->tick_max);
    if (to_ms > last_tick_ms) {
        rfc3339_format_ms(last_tick_ms, when);
        snprintf(why, whylen, "to is after the start of the layout's last tick %s", when);
        return -1;
    }
    /* epoch <= from <= to <= last_tick_ms (< 2^63): no overflow below. */
    uint64_t k_lo = (from_ms - l->epoch_ms) / l->unit_ms;
    uint64_t k_end = (to_ms - l->epoch_ms + l->unit_ms - 1) / l->unit_ms;
    out->from_ms = from_ms;
    out->to_ms = to_ms;
    out->empty = from_ms == to_ms;
    if (out->empty) /* min == end: the range holds nothing; where the next interval starts */
        k_lo = k_end;
    out->first_tick_ms = sf_layout_ms_of(l, k_lo);
    out->end_tick_ms = sf_layout_ms_of(l, k_end);
    out->min = k_lo << l->timestamp_shift;
    out->end = k_end << l->timestamp_shift;
    out->max = out->empty ? 0 : out->end - 1; /* non-empty: k_end >= 1 */
    return 0;
}

int sf_bounds_id128(sf_bounds_kind kind, uint64_t from_ms, uint64_t to_ms, sf_bounds128 *out,
                    char *why, size_t whylen)
{
    if (from_ms > to_ms) {
        snprintf(why, whylen, "from is after to");
        return -1;
    }
    if (to_ms > SF_ID128_MS_MAX) {
        char when[RFC3339_FORMAT_CAP];
        rfc3339_format_ms(SF_ID128_MS_MAX, when);
        snprintf(why, whylen, "to is after the last millisecond of 48-bit time %s", when);
        return -1;
    }
    out->from_ms = from_ms;
    out->to_ms = to_ms;
    out->empty = from_ms == to_ms;
    if (kind == SF_BOUNDS_UUID7) {
        out->min = sf_uuid7_make(from_ms, 0, 0);
        out->end = sf_uuid7_make(to_ms, 0, 0);
        out->max = out->empty ? (sf_id128){0, 0}
                              : sf_uuid7_make(to_ms - 1, SF_UUID7_RAND_A_MAX, SF_UUID7_RAND_B_MAX);
    } else {
        out->min = sf_ulid_make(from_ms, 0, 0);
        out->end = sf_ulid_make(to_ms, 0, 0);
        out->max = out->empty ? (sf_id128){0, 0} : sf_ulid_make(to_ms - 1, UINT16_MAX, UINT64_MAX);
    }
    return 0;
}
