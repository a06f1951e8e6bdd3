/* Base64 (see base64.h): the alphabet, its digit values and the encoder serve both decoders. */
#include "util/base64.h"

#include <stdbool.h>
#include <stdint.h>

static const char B64_ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t b64_encode_to(const void *src, size_t n, char *dst)
{
    const uint8_t *s = src;
    char *d = dst;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *d++ = B64_ALPHABET[v >> 18];
        *d++ = B64_ALPHABET[(v >> 12) & 63];
        *d++ = B64_ALPHABET[(v >> 6) & 63];
        *d++ = B64_ALPHABET[v & 63];
    }
    if (i < n) { /* one or two bytes left: two or three digits, then '=' padding */
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        *d++ = B64_ALPHABET[v >> 18];
        *d++ = B64_ALPHABET[(v >> 12) & 63];
        *d++ = i + 1 < n ? B64_ALPHABET[(v >> 6) & 63] : '=';
        *d++ = '=';
    }
    return (size_t)(d - dst);
}

ssize_t b64_encode(const void *src, size_t n, char *dst, size_t cap)
{
    if (cap < b64_encoded_len(n) + 1)
        return -1;
    size_t out = b64_encode_to(src, n, dst);
    dst[out] = '\0';
    return (ssize_t)out;
}

/* 0..63, or -1 for a byte outside the alphabet. */
static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

ssize_t b64_decode(const char *src, size_t n, void *dst, size_t cap, const char **why)
{
    if (n % 4 != 0) {
        *why = "base64 length is not a multiple of 4";
        return -1;
    }
    size_t pad = 0;
    if (n >= 1 && src[n - 1] == '=')
        pad = n >= 2 && src[n - 2] == '=' ? 2 : 1;
    size_t out = n / 4 * 3 - pad;
    if (out > cap) {
        *why = "base64 value is longer than the buffer";
        return -1;
    }
    uint8_t *d = dst;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        bool last = i + 4 == n;
        size_t data = last ? 4 - pad : 4;
        uint32_t v = 0;
        for (size_t j = 0; j < 4; j++) {
            int x = 0;
            if (j < data) {
                x = b64_value((unsigned char)src[i + j]);
                if (x < 0) {
                    *why = src[i + j] == '=' ? "base64 padding inside the value"
                                             : "byte outside the base64 alphabet";
                    return -1;
                }
            }
            v = v << 6 | (uint32_t)x;
        }
        if (data == 2 && (v & 0xFFFF) != 0) {
            *why = "base64 final group has non-zero unused bits";
            return -1;
        }
        if (data == 3 && (v & 0xFF) != 0) {
            *why = "base64 final group has non-zero unused bits";
            return -1;
        }
        d[o++] = (uint8_t)(v >> 16);
        if (data >= 3)
            d[o++] = (uint8_t)(v >> 8);
        if (data == 4)
            d[o++] = (uint8_t)v;
    }
    return (ssize_t)o;
}

/* memcached's base64_decode (see base64.h): two passes, as memcached's, so that the length check
 * comes before any byte is written. */
size_t b64_decode_memcached(const char *src, size_t n, void *dst, size_t cap)
{
    size_t digits = 0;
    for (size_t i = 0; i < n; i++)
        digits += src[i] == '=' || b64_value((unsigned char)src[i]) >= 0;
    if (digits == 0 || digits % 4 != 0 || digits / 4 * 3 > cap)
        return 0;
    uint8_t *d = dst, g[4];
    size_t o = 0;
    unsigned k = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        int v = src[i] == '=' ? 0 : b64_value((unsigned char)src[i]);
        if (v < 0)
            continue;
        pad += src[i] == '=';
        g[k++] = (uint8_t)v;
        if (k < 4)
            continue;
        d[o++] = (uint8_t)(g[0] << 2 | g[1] >> 4);
        d[o++] = (uint8_t)(g[1] << 4 | g[2] >> 2);
        d[o++] = (uint8_t)(g[2] << 6 | g[3]);
        k = 0;
        if (pad) /* the first padded group ends the value */
            return pad <= 2 ? o - pad : 0;
    }
    return o;
}
