/* Small OpenSSL helpers shared by the listeners' TLS (net/tls.c) and the etcd client's
 * (cluster/etcd_tls.c), so that both say the same thing about the same files. */
#ifndef SF_UTIL_TLSUTIL_H
#define SF_UTIL_TLSUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/ssl.h>

/* The reason text of the thread's last OpenSSL error ("unknown OpenSSL error" when none); it
 * stays valid (a static string of OpenSSL's). */
const char *tlsutil_reason(void);

/* 0 when path can be opened for reading; else -1 with "<what>.<key> <path>: <strerror>" in err.
 * Called before OpenSSL reads a file: its own message for a missing file names no errno. */
int tlsutil_readable(const char *what, const char *key, const char *path, char *err, size_t errlen);

/* notAfter of ctx's certificate in Unix seconds; 0 when it has none. */
int64_t tlsutil_not_after_s(SSL_CTX *ctx);

#endif
