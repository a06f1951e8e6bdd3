/* The one rule for a bearer token's bytes: it travels in "Authorization: Bearer <token>", so
 * only what a header carries unchanged is accepted: visible ASCII without spaces, 0x21-0x7E
 * (RFC 6750's b64token is narrower; this admits every token a client can send). A space would
 * split it, a control byte or a byte above 0x7E is refused or rewritten by clients and
 * proxies: such a token could never be presented, and every request would get 401.
 *
 * Checked wherever a token enters: auth.token from every source (config, environment, --set,
 * auth.token_file), sequences.namespaces[].token, PUT /seq/{name}'s token. The messages say
 * where, never the token or its bytes (it is secret). Any thread; no state. */
#ifndef SF_UTIL_BEARER_H
#define SF_UTIL_BEARER_H

#include <stdbool.h>
#include <stddef.h>

#define BEARER_RULE "visible ASCII without spaces (0x21-0x7E)"

/* The offset of the first byte of tok[0..len) a header cannot carry, or len when there is none. */
size_t bearer_bad_at(const char *tok, size_t len);

static inline bool bearer_token_ok(const char *tok, size_t len)
{
    return bearer_bad_at(tok, len) == len;
}

#endif
