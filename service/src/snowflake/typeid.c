/* TypeID text: contract in typeid.h. */
#include "snowflake/typeid.h"

#include <string.h>

static bool is_lower(unsigned char c)
{
    return c >= 'a' && c <= 'z';
}

int sf_typeid_prefix_check(const char *p, size_t len, const char **why)
{
    if (len == 0)
        return 0;
    if (len > SF_TYPEID_PREFIX_MAX) {
        *why = "the prefix is at most 63 characters";
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if (!is_lower((unsigned char)p[i]) && p[i] != '_') {
            *why = "the prefix has lowercase letters a-z and underscores only";
            return -1;
        }
    }
    if (p[0] == '_') {
        *why = "the prefix starts with a letter a-z, not an underscore";
        return -1;
    }
    if (p[len - 1] == '_') {
        *why = "the prefix ends with a letter a-z, not an underscore";
        return -1;
    }
    return 0;
}

size_t sf_typeid_format(const char *prefix, size_t len, sf_id128 id, char *out)
{
    size_t n = 0;
    if (len) {
        memcpy(out, prefix, len);
        out[len] = '_';
        n = len + 1;
    }
    /* The ULID text of the same bits in lowercase: its alphabet is digits and uppercase letters,
     * and setting bit 0x20 lowers a letter and keeps a digit. */
    sf_ulid_format(id, out + n);
    for (size_t i = n; i < n + SF_TYPEID_SUFFIX_LEN; i++)
        out[i] = (char)(out[i] | 0x20);
    return n + SF_TYPEID_SUFFIX_LEN;
}

/* The spec's alphabet exactly: no uppercase, no Crockford aliases. */
static bool suffix_digit(unsigned char c)
{
    return (c >= '0' && c <= '9') || (is_lower(c) && c != 'i' && c != 'l' && c != 'o' && c != 'u');
}

int sf_typeid_parse(const char *s, size_t len, sf_typeid *out, const char **why)
{
    const char *sep = len ? memrchr(s, '_', len) : NULL;
    size_t plen = sep ? (size_t)(sep - s) : 0;
    const char *suffix = sep ? sep + 1 : s;
    size_t slen = len - (size_t)(suffix - s);
    if (sep && plen == 0) {
        *why = "a TypeID with an empty prefix has no separator (no leading underscore)";
        return -1;
    }
    if (sf_typeid_prefix_check(s, plen, why) != 0)
        return -1;
    if (slen != SF_TYPEID_SUFFIX_LEN) {
        *why = "the suffix (after the last underscore) is 26 characters";
        return -1;
    }
    for (size_t i = 0; i < slen; i++) {
        if (!suffix_digit((unsigned char)suffix[i])) {
            *why = "the suffix has only 0-9 and lowercase a-z without i, l, o, u (TypeID's "
                   "base32)";
            return -1;
        }
    }
    if (suffix[0] > '7') {
        *why = "the suffix's first character is at most 7 (more would exceed 128 bits)";
        return -1;
    }
    const char *ignored;
    if (sf_ulid_parse(suffix, slen, &out->id, &ignored) != 0) { /* cannot fail now */
        *why = "the suffix is not base32";
        return -1;
    }
    out->prefix = s;
    out->prefix_len = plen;
    return 0;
}
