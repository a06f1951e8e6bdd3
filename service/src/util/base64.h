/* Base64, standard alphabet (RFC 4648 section 4) with '=' padding: one alphabet, one encoder, and
 * a decoder for each of the two readers, which must not accept the same inputs:
 *   - etcd's v3 JSON gateway (protobuf `bytes` in JSON; cluster/etcd_client.c): b64_decode,
 *     strict, so that every byte string has exactly one accepted encoding;
 *   - the keys of memcached's meta commands with the b flag (proto/memcache_meta.c):
 *     b64_decode_memcached, memcached's own lenient rules (its base64.c, from hostap), so that a
 *     key memcached takes we take too, and decode to the same bytes.
 *
 * Contract
 *   b64_encoded_len(n)  bytes of the encoding of n bytes, without a terminating NUL.
 *   b64_encode_to(src, n, dst)  writes the b64_encoded_len(n) bytes of the encoding at dst, no NUL
 *       (the caller has made room: a reply line being built). Returns that length.
 *   b64_encode(src, n, dst, cap)  the same, then a NUL; returns the encoding's length, or -1 when
 *       cap < b64_encoded_len(n) + 1 (dst untouched).
 *   b64_decode(src, n, dst, cap, &why)  strict: length a multiple of 4, only alphabet bytes, '='
 *       only as the final one or two bytes, and the unused bits of the last group zero. Returns
 *       the decoded length, or -1 with *why naming the fault (static text) when the input is
 *       malformed or does not fit in cap.
 *   b64_decode_memcached(src, n, dst, cap)  memcached's base64_decode, byte for byte:
 *       - a byte outside the alphabet and '=' is skipped wherever it stands (blank, '!', '-', '_',
 *         a byte >= 0x80): "Zm9v!" and "Zm 9v" are "foo";
 *       - '=' is a digit of value 0; the digits left must be a non-zero multiple of 4 ("" and
 *         "Zm9" are refused), and cap must hold digits / 4 * 3 bytes;
 *       - they decode four at a time; the first group holding '=' ends the value: one '=' drops
 *         the group's last byte, two drop two, three or four refuse the input; what follows that
 *         group is ignored ("Zg==Zm9v" is "f"), and the '=' may stand anywhere in it ("Z=g=" is
 *         "d", from the digits Z 0 g 0);
 *       - the unused bits of a padded group need not be zero ("Zh==" is "f", as "Zg==" is).
 *       Returns the decoded length (at least 1), or 0 when the input is refused, as memcached.
 *   Decoded bytes may contain NUL; dst is not terminated.
 * Pure functions, no allocation, any thread. */
#ifndef SF_UTIL_BASE64_H
#define SF_UTIL_BASE64_H

#include <stddef.h>
#include <sys/types.h>

static inline size_t b64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

/* Upper bound of the decoded length of an n-byte encoding (either decoder). */
static inline size_t b64_decoded_max(size_t n)
{
    return n / 4 * 3;
}

size_t b64_encode_to(const void *src, size_t n, char *dst);
ssize_t b64_encode(const void *src, size_t n, char *dst, size_t cap);
ssize_t b64_decode(const char *src, size_t n, void *dst, size_t cap, const char **why);
size_t b64_decode_memcached(const char *src, size_t n, void *dst, size_t cap);

#endif
