/* RFC 3339 timestamps <-> milliseconds since the Unix epoch (UTC), without libc's time functions
 * (no TZ, no locale, no time_t range): proleptic Gregorian calendar arithmetic only.
 *
 * Two reading profiles over one scanner:
 *   rfc3339_parse_ms      what clients send (/bounds?from=&to=): "YYYY-MM-DDTHH:MM:SS[.f...]Z",
 *                         'T'/'t' and 'Z'/'z', or an offset "+hh:mm" / "-hh:mm" instead of Z;
 *                         a fraction of any length (below the millisecond: floored, or raised to
 *                         the next millisecond with round_up); or digits only = Unix ms.
 *   rfc3339_parse_utc_ms  the configuration's epoch: "YYYY-MM-DDTHH:MM:SS[.mmm]Z" exactly (upper
 *                         case, UTC, 1 to 3 fraction digits) so that a config file means one
 *                         instant with nothing to round.
 * Both parse exactly len bytes (no terminator needed) and refuse a leap second (":60": Unix time
 * has none), impossible dates (2023-02-29), times before 1970-01-01T00:00:00Z and after
 * RFC3339_MS_MAX. They return 0, or -1 with a one-line reason in *why (a static string).
 *
 * rfc3339_format_ms writes "YYYY-MM-DDTHH:MM:SS.mmmZ" (always the milliseconds, always Z; a year
 * beyond 9999 gets more digits, so any uint64_t formats). Pure functions, any thread.
 */
#ifndef SF_UTIL_RFC3339_H
#define SF_UTIL_RFC3339_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RFC3339_MS_MAX    UINT64_C(253402300799999) /* 9999-12-31T23:59:59.999Z */
#define RFC3339_TEXT_LEN  24 /* "2026-01-01T00:00:00.000Z", years 0..9999 */
#define RFC3339_FORMAT_CAP 32 /* rfc3339_format_ms's buffer for any uint64_t, with the NUL */

int rfc3339_parse_ms(const char *s, size_t len, bool round_up, uint64_t *ms, const char **why);
int rfc3339_parse_utc_ms(const char *s, size_t len, uint64_t *ms, const char **why);

/* Writes the text and a NUL into out (RFC3339_FORMAT_CAP bytes); returns the length (24 up to
 * RFC3339_MS_MAX). */
size_t rfc3339_format_ms(uint64_t ms, char *out);

#endif
