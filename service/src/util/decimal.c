/* Strict unsigned decimal (see decimal.h). */
#include "util/decimal.h"

bool dec_parse_u64(const char *s, size_t n, uint64_t max, uint64_t *v)
{
    if (n == 0 || n > DEC_U64_DIGITS)
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(unsigned char)s[i] - '0';
        /* x * 10 + d > max, asked without overflow (x * 10 <= max once the middle test passes) */
        if (d > 9 || x > max / 10 || d > max - x * 10)
            return false;
        x = x * 10 + d;
    }
    *v = x;
    return true;
}
