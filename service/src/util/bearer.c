/* A bearer token's bytes (bearer.h). */
#include "util/bearer.h"

size_t bearer_bad_at(const char *tok, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)tok[i];
        if (c < 0x21 || c > 0x7e)
            return i;
    }
    return len;
}
