/* 128-bit time-ordered IDs: contract in id128.h. */
#include "snowflake/id128.h"

#include <string.h>

#include "snowflake/encoding.h"

bool sf_uuid7_split(sf_id128 id, sf_uuid7_fields *out, const char **why)
{
    if (((id.hi >> 12) & 0xf) != 7) {
        *why = "not a version 7 UUID";
        return false;
    }
    if ((id.lo >> 62) != 2) {
        *why = "not a UUID of the RFC 9562 variant (10)";
        return false;
    }
    *out = (sf_uuid7_fields){.ms = sf_id128_ms(id),
                             .rand_a = (uint32_t)(id.hi & SF_UUID7_RAND_A_MAX),
                             .rand_b = id.lo & SF_UUID7_RAND_B_MAX};
    return true;
}

/* The 16 hex digits of w, most significant first. */
static void hex16(uint64_t w, char *out)
{
    for (int i = 15; i >= 0; i--, w >>= 4)
        out[i] = sf_enc_digit_char(SF_ENC_HEX, (unsigned)w & 15);
}

size_t sf_uuid_format_compact(sf_id128 id, char *out)
{
    hex16(id.hi, out);
    hex16(id.lo, out + 16);
    return SF_UUID_COMPACT_LEN;
}

size_t sf_uuid_format(sf_id128 id, char *out)
{
    char hex[SF_UUID_COMPACT_LEN];
    sf_uuid_format_compact(id, hex);
    memcpy(out, hex, 8); /* 8-4-4-4-12 */
    out[8] = '-';
    memcpy(out + 9, hex + 8, 4);
    out[13] = '-';
    memcpy(out + 14, hex + 12, 4);
    out[18] = '-';
    memcpy(out + 19, hex + 16, 4);
    out[23] = '-';
    memcpy(out + 24, hex + 20, 12);
    return SF_UUID_TEXT_LEN;
}

int sf_uuid_parse(const char *s, size_t len, sf_id128 *out, const char **why)
{
    bool canonical = len == SF_UUID_TEXT_LEN;
    if (!canonical && len != SF_UUID_COMPACT_LEN) {
        *why = "a UUID is 36 characters (8-4-4-4-12 hex) or 32 hex digits";
        return -1;
    }
    sf_id128 id = {0, 0};
    unsigned digits = 0;
    for (size_t i = 0; i < len; i++) {
        if (canonical && (i == 8 || i == 13 || i == 18 || i == 23)) {
            if (s[i] != '-') {
                *why = "a UUID has hyphens after hex digits 8, 12, 16 and 20";
                return -1;
            }
            continue;
        }
        int d = sf_enc_digit(SF_ENC_HEX, (unsigned char)s[i]);
        if (d < 0) {
            *why = "a UUID has hex digits only (and its 4 hyphens)";
            return -1;
        }
        uint64_t *w = digits < 16 ? &id.hi : &id.lo;
        *w = *w << 4 | (uint64_t)d;
        digits++;
    }
    *out = id;
    return 0;
}

size_t sf_ulid_format(sf_id128 id, char *out)
{
    /* 26 digits of 5 bits = 130 bits: the first digit holds the top 3. Digit k (from the end)
     * holds bits 5k..5k+4 of the 128-bit value. */
    for (unsigned k = 0; k < SF_ULID_TEXT_LEN; k++) {
        unsigned shift = 5 * k, v;
        if (shift >= 64)
            v = (unsigned)(id.hi >> (shift - 64));
        else if (shift > 59) /* straddles the halves */
            v = (unsigned)(id.lo >> shift | id.hi << (64 - shift));
        else
            v = (unsigned)(id.lo >> shift);
        out[SF_ULID_TEXT_LEN - 1 - k] = sf_enc_digit_char(SF_ENC_BASE32, v & 31);
    }
    return SF_ULID_TEXT_LEN;
}

int sf_ulid_parse(const char *s, size_t len, sf_id128 *out, const char **why)
{
    if (len != SF_ULID_TEXT_LEN) {
        *why = "a ULID is 26 characters of Crockford's base32";
        return -1;
    }
    sf_id128 id = {0, 0};
    for (size_t i = 0; i < len; i++) {
        int d = sf_enc_digit(SF_ENC_BASE32, (unsigned char)s[i]);
        if (d < 0) {
            *why = "a ULID has Crockford's base32 digits only (0-9, A-Z without I L O U, or "
                   "their lowercase and aliases)";
            return -1;
        }
        if (i == 0 && d > 7) {
            *why = "a ULID's first digit is at most 7 (its value would exceed 128 bits)";
            return -1;
        }
        id.hi = id.hi << 5 | id.lo >> 59;
        id.lo = id.lo << 5 | (uint64_t)d;
    }
    *out = id;
    return 0;
}
