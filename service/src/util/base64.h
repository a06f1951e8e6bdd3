/* Base64, standard alphabet (RFC 4648 section 4) with '=' padding: the encoding etcd's v3 JSON
 * gateway uses for keys and values (protobuf `bytes` in JSON).
 *
 * Contract
 *   b64_encoded_len(n)  bytes of the encoding of n bytes, without the terminating NUL.
 *   b64_encode(src, n, dst, cap)  writes the encoding and a NUL; returns its length, or -1 when
 *       cap < b64_encoded_len(n) + 1 (dst untouched).
 *   b64_decode(src, n, dst, cap, &why)  strict: length a multiple of 4, only alphabet bytes, '='
 *       only as the final one or two bytes, and the unused bits of the last group zero (so every
 *       byte string has exactly one accepted encoding). Returns the decoded length, or -1 with
 *       *why naming the fault (static text) when the input is malformed or does not fit in cap.
 *       Decoded bytes may contain NUL; dst is not terminated.
 * Pure functions, no allocation, any thread. */
#ifndef SF_UTIL_BASE64_H
#define SF_UTIL_BASE64_H

#include <stddef.h>
#include <sys/types.h>

static inline size_t b64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

/* Upper bound of the decoded length of an n-byte encoding. */
static inline size_t b64_decoded_max(size_t n)
{
    return n / 4 * 3;
}

ssize_t b64_encode(const void *src, size_t n, char *dst, size_t cap);
ssize_t b64_decode(const char *src, size_t n, void *dst, size_t cap, const char **why);

#endif
