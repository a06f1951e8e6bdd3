/* Bearer-token access control (auth.token / auth.token_file / SNOWFLAKED_AUTH_TOKEN). */
#include "api/api.h"

#include <stdio.h>
#include <string.h>

#include "util/counter.h"

/* Compares every byte of the longer length whatever matches: the time taken tells nothing
 * about the token. */
static bool same_secret(const char *given, size_t glen, const char *token, size_t tlen)
{
    unsigned char diff = (unsigned char)(glen != tlen);
    size_t n = glen > tlen ? glen : tlen;
    for (size_t i = 0; i < n; i++) {
        unsigned char g = i < glen ? (unsigned char)given[i] : 0;
        unsigned char t = i < tlen ? (unsigned char)token[i] : 0;
        diff |= (unsigned char)(g ^ t);
    }
    return diff == 0;
}

/* "Bearer <token>": the scheme case-insensitively (RFC 7235), one or more spaces. */
static bool bearer(const http_str *h, const char **tok, size_t *len)
{
    if (!h->p || h->len < 7 || strncasecmp(h->p, "Bearer ", 7) != 0)
        return false;
    size_t i = 7;
    while (i < h->len && h->p[i] == ' ')
        i++;
    *tok = h->p + i;
    *len = h->len - i;
    return *len > 0;
}

bool api_auth(http_request *r, bool write, void *ctx)
{
    api_ctx *a = ctx;
    if (a->opt.token_len == 0 || (!write && !a->opt.protect_reads))
        return true;
    const char *tok;
    size_t len;
    bool given = bearer(&r->headers[HTTP_H_AUTHORIZATION], &tok, &len);
    if (given && same_secret(tok, len, a->opt.token, a->opt.token_len))
        return true;
    api_loop *l = perloop_at(&a->loops, r->loop_index);
    counter_add(&l->auth_failures, 1);
    /* RFC 6750: no error code when no credentials came, invalid_token when wrong ones did. */
    http_respond_error(r, 401, given ? "invalid bearer token" : "a bearer token is required",
                       given ? "WWW-Authenticate: Bearer realm=\"snowflaked\", "
                               "error=\"invalid_token\"\r\n"
                             : "WWW-Authenticate: Bearer realm=\"snowflaked\"\r\n");
    return false;
}
