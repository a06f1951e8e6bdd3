/* Strict reading of hexadecimal digits, for what the daemon reads in base 16: /proc/net/tcp's
 * addresses and ports (net/listen_guard.c) and the "hex" ID encoding (snowflake/encoding.c).
 *
 * Contract
 *   hex_digit(c)   0..15 for '0'..'9', 'a'..'f', 'A'..'F'; -1 for any other byte.
 *   hex_parse_u64(s, n, max, &v)  true when s[0..n) is 1 to 16 hex digits and nothing else, of a
 *       value at most max: *v is set then, and only then. No "0x", sign or white space.
 * Pure, header-only, any thread. */
#ifndef SF_UTIL_HEX_H
#define SF_UTIL_HEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline int hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20; /* 'A'..'F' -> 'a'..'f'; no other byte lands in 'a'..'f' */
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static inline bool hex_parse_u64(const char *s, size_t n, uint64_t max, uint64_t *v)
{
    if (n == 0 || n > 16)
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        int d = hex_digit((unsigned char)s[i]);
        if (d < 0)
            return false;
        x = x << 4 | (uint64_t)d; /* 16 digits at most: never overflows */
    }
    if (x > max)
        return false;
    *v = x;
    return true;
}

#endif
