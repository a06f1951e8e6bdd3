/* 128-bit time-ordered IDs: UUIDv7 (RFC 9562 section 5.7) and ULID (github.com/ulid/spec), as
 * two 64-bit halves, most significant first, so they compare as the IDs sort. Composing,
 * decomposing, text formats and strict parsing; where the bits come from (time, counter, node,
 * randomness) is the generator's business. Pure functions, any thread, no allocation.
 *
 *   UUIDv7: unix_ts_ms (48) | ver 0111 (4) | rand_a (12) | var 10 (2) | rand_b (62)
 *   ULID:   unix ms (48) | randomness (80)
 *
 * Text: a UUID is 8-4-4-4-12 lowercase hex (canonical) or its 32 hex digits (compact); parsing
 * takes either, in either case, nothing else (no braces, no "urn:uuid:"). A ULID is 26 digits of
 * Crockford's base32, uppercase; parsing takes either case and Crockford's aliases (O for 0, I
 * and L for 1), as our base32 IDs do, and refuses a first digit above 7 (more than 128 bits).
 */
#ifndef SF_SNOWFLAKE_ID128_H
#define SF_SNOWFLAKE_ID128_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sf_id128 {
    uint64_t hi, lo;
} sf_id128;

#define SF_UUID_TEXT_LEN    36
#define SF_UUID_COMPACT_LEN 32
#define SF_ULID_TEXT_LEN    26
#define SF_ID128_MS_MAX     ((UINT64_C(1) << 48) - 1) /* the last millisecond, in 10889 */
#define SF_UUID7_RAND_A_MAX 0xfffu
#define SF_UUID7_RAND_B_MAX ((UINT64_C(1) << 62) - 1)

static inline int sf_id128_cmp(sf_id128 a, sf_id128 b)
{
    if (a.hi != b.hi)
        return a.hi < b.hi ? -1 : 1;
    return a.lo < b.lo ? -1 : a.lo > b.lo;
}

/* ms <= SF_ID128_MS_MAX, rand_a <= SF_UUID7_RAND_A_MAX, rand_b <= SF_UUID7_RAND_B_MAX (higher
 * bits are cut off). */
static inline sf_id128 sf_uuid7_make(uint64_t ms, uint32_t rand_a, uint64_t rand_b)
{
    return (sf_id128){.hi = (ms & SF_ID128_MS_MAX) << 16 | UINT64_C(0x7000) |
                            (rand_a & SF_UUID7_RAND_A_MAX),
                      .lo = UINT64_C(1) << 63 | (rand_b & SF_UUID7_RAND_B_MAX)};
}

typedef struct sf_uuid7_fields {
    uint64_t ms;
    uint32_t rand_a;
    uint64_t rand_b;
} sf_uuid7_fields;

/* The fields of a UUIDv7; false (why says which) if id is not version 7 of variant 10. */
bool sf_uuid7_split(sf_id128 id, sf_uuid7_fields *out, const char **why);

/* ULID: ms <= SF_ID128_MS_MAX; the 80 random bits as rand_hi (16) and rand_lo (64). */
static inline sf_id128 sf_ulid_make(uint64_t ms, uint16_t rand_hi, uint64_t rand_lo)
{
    return (sf_id128){.hi = (ms & SF_ID128_MS_MAX) << 16 | rand_hi, .lo = rand_lo};
}

static inline uint64_t sf_id128_ms(sf_id128 id)
{
    return id.hi >> 16;
}

/* Writes the text (no terminator) into out, at least the *_LEN of the format; returns the
 * length. */
size_t sf_uuid_format(sf_id128 id, char *out);         /* canonical, 36 */
size_t sf_uuid_format_compact(sf_id128 id, char *out); /* 32 hex digits */
size_t sf_ulid_format(sf_id128 id, char *out);         /* 26 */

/* Parses exactly len bytes. Returns 0, or -1 with a one-line reason in *why. Any UUID version
 * parses (sf_uuid7_split checks the version). */
int sf_uuid_parse(const char *s, size_t len, sf_id128 *out, const char **why);
int sf_ulid_parse(const char *s, size_t len, sf_id128 *out, const char **why);

#endif
