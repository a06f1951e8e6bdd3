/* TypeID (github.com/jetify-com/typeid, spec v0.3.0): a type prefix, "_", and a 128-bit UUID as
 * 26 characters of base32, e.g. user_01h455vb4pex5vsknk084sn02q. Formatting and strict parsing;
 * the UUID's bits come from the UUIDv7 generator (issue128.h). Pure functions, any thread, no
 * allocation.
 *
 * - Prefix: 0 to 63 characters of [a-z_], starting and ending with a letter (underscores only
 *   inside; consecutive ones are allowed): ^([a-z]([a-z_]{0,61}[a-z])?)?$. Empty: no separator,
 *   the TypeID is the suffix alone.
 * - Suffix: the 128 bits, two zero bits prepended, as 26 digits of 5 bits, most significant first,
 *   in 0123456789abcdefghjkmnpqrstvwxyz (Crockford's alphabet, lowercase): the ULID text of the
 *   same bits, lowercased, so suffixes sort as strings in UUID order. Parsing is strict, unlike
 *   our ULID parser: lowercase only, no aliases (i l o u), no hyphens, first digit at most 7.
 * - A TypeID is split at its last underscore (a prefix may hold underscores, the suffix never).
 * - Any UUID version parses (the spec lets users encode others); what we issue is UUIDv7.
 */
#ifndef SF_SNOWFLAKE_TYPEID_H
#define SF_SNOWFLAKE_TYPEID_H

#include <stddef.h>

#include "snowflake/id128.h"

#define SF_TYPEID_PREFIX_MAX 63
#define SF_TYPEID_SUFFIX_LEN 26
#define SF_TYPEID_TEXT_MAX   (SF_TYPEID_PREFIX_MAX + 1 + SF_TYPEID_SUFFIX_LEN) /* 90 */

/* 0 if p[0..len) is a valid prefix (empty included), else -1 with the rule it breaks in *why
 * (a sentence starting "the prefix"). */
int sf_typeid_prefix_check(const char *p, size_t len, const char **why);

/* Writes prefix "_" suffix (only the suffix when len is 0) into out, at least len + 27 bytes, no
 * terminator; returns the length. The prefix must have passed sf_typeid_prefix_check. */
size_t sf_typeid_format(const char *prefix, size_t len, sf_id128 id, char *out);

/* A parsed TypeID: the prefix points into the parsed text. */
typedef struct sf_typeid {
    const char *prefix;
    size_t prefix_len;
    sf_id128 id;
} sf_typeid;

/* Parses exactly len bytes. Returns 0, or -1 with the rule broken in *why (one line). */
int sf_typeid_parse(const char *s, size_t len, sf_typeid *out, const char **why);

#endif
