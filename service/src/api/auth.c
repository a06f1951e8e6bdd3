/* Access control: the bearer token (auth.token / auth.token_file / SNOWFLAKED_AUTH_TOKEN) and
 * listed client certificates (auth.client_certificates, auth.credentials). */
#include "api/api.h"

#include <stdio.h>
#include <string.h>

#include "util/counter.h"
#include "util/sha256.h"

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

const char *api_credential_name(api_credential c)
{
    return c == API_BY_CERTIFICATE ? "certificate" : c == API_BY_BOTH ? "token_and_certificate"
                                                                      : "token";
}

bool api_auth(http_request *r, bool write, void *ctx)
{
    api_ctx *a = ctx;
    const api_options *o = &a->opt;
    if ((o->token_len == 0 && !o->client_certificates) || (!write && !o->protect_reads))
        return true;
    api_loop *l = perloop_at(&a->loops, r->loop_index);
    bool cert = conn_peer_listed(r->conn); /* decided at the handshake: a load, not a parse */
    if (cert && !o->token_and_certificate) {
        counter_add(&l->auth_granted[API_BY_CERTIFICATE], 1);
        return true;
    }
    /* Whether a token can still let this request in: there is one, and it suffices alone or the
     * certificate came too. */
    bool token_helps = o->token_len && (cert || !o->token_and_certificate);
    const char *tok;
    size_t len;
    bool given = token_helps && bearer(&r->headers[HTTP_H_AUTHORIZATION], &tok, &len);
    if (given && same_secret(tok, len, o->token, o->token_len)) {
        counter_add(&l->auth_granted[cert ? API_BY_BOTH : API_BY_TOKEN], 1);
        return true;
    }
    counter_add(&l->auth_failures, 1);
    if (!token_helps) {
        /* No HTTP credential can help (RFC 9110's 401 needs a challenge the client can answer):
         * the certificate is the TLS connection's. */
        http_respond_error(r, 403,
                           o->token_and_certificate
                               ? "a client certificate listed in auth.client_certificates is "
                                 "required, with the bearer token"
                               : "a client certificate listed in auth.client_certificates is "
                                 "required",
                           NULL);
        return false;
    }
    /* RFC 6750: no error code when no credentials came, invalid_token when wrong ones did. */
    http_respond_error(r, 401,
                       given                    ? "invalid bearer token"
                       : o->client_certificates ? "a bearer token or a listed client certificate "
                                                  "is required"
                                                : "a bearer token is required",
                       given ? "WWW-Authenticate: Bearer realm=\"snowflaked\", "
                               "error=\"invalid_token\"\r\n"
                             : "WWW-Authenticate: Bearer realm=\"snowflaked\"\r\n");
    return false;
}

bool api_auth_token(http_request *r, api_ctx *a, const char *token, size_t token_len,
                    const char *token_sha256)
{
    const api_options *o = &a->opt;
    api_loop *l = perloop_at(&a->loops, r->loop_index);
    if (conn_peer_listed(r->conn) && !o->token_and_certificate) {
        counter_add(&l->auth_granted[API_BY_CERTIFICATE], 1);
        return true;
    }
    const char *tok;
    size_t len;
    bool given = bearer(&r->headers[HTTP_H_AUTHORIZATION], &tok, &len);
    /* both compared, whatever the first gave: the time taken tells nothing */
    bool own;
    if (token_sha256) { /* stored as its hash: the bearer's hash is compared */
        char hex[SHA256_HEX_LEN + 1] = "";
        if (given)
            sha256_hex(tok, len, hex);
        own = given && same_secret(hex, SHA256_HEX_LEN, token_sha256, SHA256_HEX_LEN);
    } else {
        own = given && same_secret(tok, len, token, token_len);
    }
    bool admin = given && o->token_len && same_secret(tok, len, o->token, o->token_len);
    if (own || admin) {
        counter_add(&l->auth_granted[API_BY_TOKEN], 1);
        return true;
    }
    counter_add(&l->auth_failures, 1);
    http_respond_error(r, 401, given ? "invalid bearer token" : "a bearer token is required",
                       given ? "WWW-Authenticate: Bearer realm=\"snowflaked\", "
                               "error=\"invalid_token\"\r\n"
                             : "WWW-Authenticate: Bearer realm=\"snowflaked\"\r\n");
    return false;
}
