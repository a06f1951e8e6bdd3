/* Issuing UUIDv7 and ULIDs with Snowflake's guarantees.
 *
 * A generator on a wide layout (sf_layout_init_unix_ms) reserves (millisecond, counter) slots
 * under the same rules as Snowflake IDs: strictly increasing per generator across threads and
 * batches, never below the lease after a restart, clock-behind / overload / lease refusals. The
 * ID then carries, most significant first:
 *
 *   UUIDv7: unix ms (48) | ver 7 | counter (12, RFC 9562 6.2 method 1) | var 10 | node | random
 *   ULID:   unix ms (48) | counter (12) | node | random                 (80 bits after the time)
 *
 * node = the generator's (datacenter << worker_bits) | worker, in datacenter_bits + worker_bits
 * bits (at most 30), so IDs of different nodes differ in the node field and IDs of one node in
 * (ms, counter): unique across replicas by construction, not by probability. The rest (at least
 * 32 bits; 52 of UUIDv7 and 58 of ULID with 5+5 node bits) comes from the kernel's CSPRNG
 * (snowflake/rng.h), fresh for each ID, so IDs stay unguessable within a millisecond.
 */
#ifndef SF_SNOWFLAKE_ISSUE128_H
#define SF_SNOWFLAKE_ISSUE128_H

#include <stdint.h>

#include "snowflake/generator.h"
#include "snowflake/id128.h"

typedef enum { SF_FORMAT_UUID7 = 0, SF_FORMAT_ULID = 1 } sf_id128_format;

/* n consecutive IDs (1 <= n <= max_batch), increasing, in one reservation of g (a wide layout).
 * Returns SF_OK, a refusal of the generator (SF_ECLOCK, SF_ELEASE, SF_EBUSY, SF_ESEALED,
 * SF_EEXPIRED), SF_EINVAL, or SF_ERANDOM (nothing issued and, as the slots are spent, nothing
 * repeated). */
int sf_id128_issue(sf_gen *g, sf_id128_format f, sf_id128 *out, uint32_t n);

/* The ID of the given fields; node and random are cut to their widths for this layout. Pure:
 * tests and the bounds use it. */
sf_id128 sf_id128_compose(const sf_layout *l, sf_id128_format f, uint64_t ms, uint32_t counter,
                          uint64_t node, uint64_t random_lo, uint64_t random_hi);

/* The fields of an ID of this layout (the inverse of compose; UUIDs must be version 7). */
typedef struct sf_id128_parts {
    uint64_t ms;
    uint32_t counter;
    uint32_t datacenter, worker;
    uint64_t random_lo, random_hi; /* the random bits, right-aligned: hi holds bits 64.. */
    unsigned random_bits;
} sf_id128_parts;
void sf_id128_decompose(const sf_layout *l, sf_id128_format f, sf_id128 id, sf_id128_parts *out);

/* Random bits per ID of this format and layout. */
unsigned sf_id128_random_bits(const sf_layout *l, sf_id128_format f);

#endif
