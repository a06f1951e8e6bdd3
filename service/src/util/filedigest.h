/* SHA-256 over the bytes of a few files in order, each followed by its length (so bytes moving
 * from one file to the next still change it); "" paths are skipped. For "did these certificate
 * files change since they were loaded" (net/tls.c's listeners, cluster/etcd_tls.c's client): a
 * watch event that changed nothing then reloads nothing. */
#ifndef SF_UTIL_FILEDIGEST_H
#define SF_UTIL_FILEDIGEST_H

#include <stddef.h>

/* 0, or -1 when one file cannot be read (or out of memory). */
int file_digest_sha256(const char *const *paths, size_t n, unsigned char out[32]);

#endif
