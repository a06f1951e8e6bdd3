#include "snowflake/encoding.h"

#include <string.h>

#include "util/fmt.h"
#include "util/hex.h"

static const char *const names[SF_ENC_COUNT] = {"dec", "hex", "base62", "base32"};
const char sf_enc_base62_digits[63] =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const char sf_enc_base32_digits[33] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const char sf_enc_hex_digits[17] = "0123456789abcdef";

int sf_enc_parse_name(const char *name, size_t len, sf_encoding *out)
{
    for (int i = 0; i < SF_ENC_COUNT; i++) {
        if (strlen(names[i]) == len && memcmp(name, names[i], len) == 0) {
            *out = (sf_encoding)i;
            return 0;
        }
    }
    if (len == 7 && memcmp(name, "decimal", 7) == 0) {
        *out = SF_ENC_DEC;
        return 0;
    }
    return -1;
}

const char *sf_enc_name(sf_encoding enc)
{
    return (unsigned)enc < SF_ENC_COUNT ? names[enc] : "?";
}

size_t sf_enc_format(sf_encoding enc, uint64_t id, char *buf)
{
    switch (enc) {
    case SF_ENC_HEX:
        for (int i = 15; i >= 0; i--, id >>= 4)
            buf[i] = sf_enc_hex_digits[id & 15];
        return 16;
    case SF_ENC_BASE62:
        for (int i = 10; i >= 0; i--, id /= 62)
            buf[i] = sf_enc_base62_digits[id % 62];
        return 11;
    case SF_ENC_BASE32:
        for (int i = 12; i >= 0; i--, id >>= 5)
            buf[i] = sf_enc_base32_digits[id & 31];
        return 13;
    default: return fmt_u64(buf, id);
    }
}

int sf_enc_digit(sf_encoding enc, unsigned char c)
{
    switch (enc) {
    case SF_ENC_DEC: return c >= '0' && c <= '9' ? c - '0' : -1;
    case SF_ENC_HEX: return hex_digit(c);
    case SF_ENC_BASE62:
        if (c >= '0' && c <= '9')
            return c - '0';
        if (c >= 'A' && c <= 'Z')
            return c - 'A' + 10;
        if (c >= 'a' && c <= 'z')
            return c - 'a' + 36;
        return -1;
    case SF_ENC_BASE32: {
        if (c >= 'a' && c <= 'z')
            c = (unsigned char)(c - 'a' + 'A');
        if (c == 'O')
            return 0;
        if (c == 'I' || c == 'L')
            return 1;
        const char *p = c ? memchr(sf_enc_base32_digits, c, 32) : NULL;
        return p ? (int)(p - sf_enc_base32_digits) : -1;
    }
    default: return -1;
    }
}

static const unsigned max_digits[SF_ENC_COUNT] = {20, 16, 11, 13};
static const unsigned radix[SF_ENC_COUNT] = {10, 16, 62, 32};

int sf_enc_parse(sf_encoding enc, const char *s, size_t len, uint64_t *out)
{
    if ((unsigned)enc >= SF_ENC_COUNT || len == 0 || len > max_digits[enc])
        return -1;
    uint64_t v = 0, base = radix[enc];
    for (size_t i = 0; i < len; i++) {
        int d = sf_enc_digit(enc, (unsigned char)s[i]);
        if (d < 0)
            return -1;
        if (v > (UINT64_MAX - (uint64_t)d) / base)
            return -1; /* overflow */
        v = v * base + (uint64_t)d;
    }
    *out = v;
    return 0;
}
