/* Number formatting for hot paths (no printf): shared by the ID encodings and the HTTP writer. */
#ifndef SF_UTIL_FMT_H
#define SF_UTIL_FMT_H

#include <stddef.h>
#include <stdint.h>

#define FMT_U64_MAX 20 /* digits of 2^64 - 1 */

/* Writes v in decimal at p (no terminator); returns the length. */
static inline size_t fmt_u64(char *p, uint64_t v)
{
    char tmp[FMT_U64_MAX];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

#endif
