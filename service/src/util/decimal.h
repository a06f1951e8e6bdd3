/* The daemon's one strict reader of unsigned decimal numbers: HTTP query parameters and headers
 * (?count=, ?ttl=, ?by=, ETags, /bounds' Unix milliseconds), the configuration (values, etcd
 * endpoint ports), etcd's JSON, our lease file, /proc, the store's values under meta arithmetic.
 *
 * Contract
 *   dec_parse_u64(s, n, max, &v)  true when s[0..n) is 1 to DEC_U64_DIGITS ASCII digits '0'..'9'
 *       and nothing else, of a value at most max: *v is set then, and only then.
 *       Refused: n == 0; a sign ('+', '-'); white space anywhere (before, after, inside); any
 *       other byte ("0x1f", "1e3", "1_000", "1.0", a NUL); more than DEC_U64_DIGITS bytes; a
 *       value above max, including one beyond 2^64 - 1 (never wrapped, never saturated).
 *       Accepted: leading zeros ("007" is 7, "00" is 0), counted in the DEC_U64_DIGITS.
 *   What a caller needs beyond this it says where it is: a canonical number without leading
 *   zeros (etcd's, cluster/etcd_client.c), a sign (etcd's int64 there too), and memcached's own
 *   strtoull leniency (proto/memcache.c scan_number: white space, a sign, any count of leading
 *   zeros, as memcached's safe_strtoull).
 * Pure, no allocation, any thread. */
#ifndef SF_UTIL_DECIMAL_H
#define SF_UTIL_DECIMAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEC_U64_DIGITS 20 /* digits of 2^64 - 1 */

bool dec_parse_u64(const char *s, size_t n, uint64_t max, uint64_t *v);

#endif
