/* SHA-256 of files (see filedigest.h). */
#include "util/filedigest.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>

int file_digest_sha256(const char *const *paths, size_t n, unsigned char out[32])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!paths[i][0])
            continue;
        FILE *f = fopen(paths[i], "rb");
        if (!f) {
            rc = -1;
            break;
        }
        unsigned char buf[4096];
        uint64_t total = 0;
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
            EVP_DigestUpdate(md, buf, got);
            total += got;
        }
        if (ferror(f))
            rc = -1;
        fclose(f);
        EVP_DigestUpdate(md, &total, sizeof total);
    }
    unsigned len = 0;
    if (rc == 0 && EVP_DigestFinal_ex(md, out, &len) != 1)
        rc = -1;
    EVP_MD_CTX_free(md);
    return rc;
}
