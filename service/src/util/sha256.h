/* SHA-256 (FIPS 180-4) of a buffer, without allocating: for comparing a presented secret against
 * a stored hash on the request path (a sequence namespace's token created over the API), where
 * OpenSSL's EVP interface would allocate a context per call. Pure, any thread. */
#ifndef SF_UTIL_SHA256_H
#define SF_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_HEX_LEN 64

void sha256(const void *data, size_t len, uint8_t out[32]);
/* The digest as 64 lowercase hex digits and a NUL. */
void sha256_hex(const void *data, size_t len, char out[SHA256_HEX_LEN + 1]);

#endif
