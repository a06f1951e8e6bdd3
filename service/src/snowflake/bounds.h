/* Time -> ID bounds: for a half-open interval of Unix milliseconds [from_ms, to_ms), the IDs any
 * node could have issued in it, as a range a database can scan:
 *
 *     WHERE id >= min AND id < end        (or BETWEEN min AND max)
 *
 * min and max are tight: each is an ID a node can actually issue (min: the tick containing
 * from, node 0, sequence 0; max: the last tick starting before to, the all-ones node, the last
 * sequence), so no narrower range holds every possible ID.
 *
 * Snowflake (sf_bounds_layout): ticks are unit_ms long, so from floors to its tick and to
 * ceils to the next tick start (an ID stamped in a tick that starts before to may have been
 * issued before to): k_lo = floor((from-epoch)/unit), k_end = ceil((to-epoch)/unit),
 * min = k_lo << S, end = k_end << S, max = end - 1, S = timestamp_shift. The node and sequence
 * fields are all below the timestamp in every field order (node | sequence, or Sonyflake's
 * sequence | node), and an ID's unused high bits are 0, so "all zeros / all ones below the
 * timestamp" is right for any layout sf_layout_init accepts. Adjacent intervals [a,b) [b,c)
 * tile (end of one = min of the next) when b is tick-aligned (always with 1 ms ticks); otherwise
 * the boundary tick belongs to both: still a superset, and first_tick_ms/end_tick_ms show the
 * aligned interval actually covered.
 *
 * UUIDv7 / ULID (sf_bounds_id128): 1 ms ticks, the timestamp on top: min = ts(from) with every
 * other free bit 0 (UUIDv7 keeps ver 7 and var 10), max = ts(to-1) with every free bit 1,
 * end = the smallest ID of ms to (for ULID end = max + 1; for UUIDv7 no valid v7 UUID lies in
 * (max, end)). Bytewise order (uuid columns, BINARY(16), base32 text) is this order.
 *
 * Validation (-1 and a one-line reason in why that starts with the parameter's name): from > to;
 * Snowflake: from before the epoch, to after the start of the layout's last tick (so end fits
 * the layout's bits: a 63-bit end never overflows a signed BIGINT); UUIDv7/ULID: to beyond the
 * last 48-bit millisecond (2^48-1). from == to is valid and empty: min == end, max undefined.
 *
 * Pure functions, any thread, no allocation.
 */
#ifndef SF_SNOWFLAKE_BOUNDS_H
#define SF_SNOWFLAKE_BOUNDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "snowflake/id128.h"
#include "snowflake/layout.h"

typedef struct sf_bounds {
    uint64_t from_ms, to_ms;             /* as asked */
    uint64_t first_tick_ms, end_tick_ms; /* start of the first tick covered, of the tick after */
    bool empty;                          /* from == to: nothing lies in [min, end) */
    uint64_t min, max, end;              /* max only when !empty */
} sf_bounds;

typedef enum { SF_BOUNDS_UUID7, SF_BOUNDS_ULID } sf_bounds_kind;

typedef struct sf_bounds128 {
    uint64_t from_ms, to_ms; /* as asked; the ticks are 1 ms, so also the covered interval */
    bool empty;
    sf_id128 min, max, end; /* max only when !empty */
} sf_bounds128;

int sf_bounds_layout(const sf_layout *l, uint64_t from_ms, uint64_t to_ms, sf_bounds *out,
                     char *why, size_t whylen);
int sf_bounds_id128(sf_bounds_kind kind, uint64_t from_ms, uint64_t to_ms, sf_bounds128 *out,
                    char *why, size_t whylen);

#endif
