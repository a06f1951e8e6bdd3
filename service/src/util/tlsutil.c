#include "util/tlsutil.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

const char *tlsutil_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "unknown OpenSSL error";
}

int tlsutil_readable(const char *what, const char *key, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s.%s %s: %s", what, key, path, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

int64_t tlsutil_not_after_s(SSL_CTX *ctx)
{
    X509 *x = SSL_CTX_get0_certificate(ctx);
    struct tm tm;
    if (!x || !ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm))
        return 0;
    return (int64_t)timegm(&tm);
}
