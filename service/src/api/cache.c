/* /cache/{key}: the store over HTTP. PUT (If-None-Match: * = add only, If-Match = compare and
 * swap, ?ttl= seconds), GET/HEAD (If-None-Match -> 304), DELETE (If-Match), and
 * POST /cache/{key}/incr|decr?by=N. ETag is the item's CAS value. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "llhttp.h"
#include "util/decimal.h"
#include "util/fmt.h"

#define CACHE_PREFIX_LEN 7 /* "/cache/" */
#define DEFAULT_CTYPE    "application/octet-stream"
#define MAX_TTL_S        (10ull * 365 * 86400)

static uint64_t now_ms(void)
{
    return clk_now(clk_system());
}

/* The key (percent-decoded into buf) and whether the path ends in /incr or /decr. */
/* A path's counter suffix: 1 for ".../incr", -1 for ".../decr", 0 for none. */
static int counter_suffix(const char *p, size_t len)
{
    if (len > 5 && (memcmp(p + len - 5, "/incr", 5) == 0 || memcmp(p + len - 5, "/decr", 5) == 0))
        return p[len - 4] == 'i' ? 1 : -1;
    return 0;
}

#define ALLOW_COUNTER "POST"
#define ALLOW_VALUE   "GET, HEAD, PUT, DELETE"

const char *api_cache_allow(http_str path)
{
    return counter_suffix(path.p, path.len) ? ALLOW_COUNTER : ALLOW_VALUE;
}

static int parse_target(http_request *r, char *buf, size_t *klen, int *counter)
{
    const char *p = r->path.p + CACHE_PREFIX_LEN;
    size_t len = r->path.len - CACHE_PREFIX_LEN;
    *counter = counter_suffix(p, len);
    if (*counter)
        len -= 5;
    long n = http_percent_decode(p, len, buf, CACHE_KEY_MAX);
    if (n < 0 || !cache_key_valid(buf, (size_t)n))
        return -1;
    *klen = (size_t)n;
    return 0;
}

static size_t etag_header(char *out, size_t cap, uint64_t cas)
{
    return (size_t)snprintf(out, cap, "ETag: \"%llu\"\r\n", (unsigned long long)cas);
}

/* A read serves bytes anyone with write access chose (over memcached too, without a token):
 * browsers must take the Content-Type as given and never sniff the value into HTML or script. */
#define NOSNIFF "X-Content-Type-Options: nosniff\r\n"

/* A quoted CAS value ("123", W/"123") -> 1 with *cas; "*" -> 2; absent -> 0; garbage -> -1. */
static int parse_tag(http_str h, uint64_t *cas)
{
    if (!h.p)
        return 0;
    const char *p = h.p, *end = h.p + h.len;
    if (h.len == 1 && *p == '*')
        return 2;
    if (end - p > 2 && p[0] == 'W' && p[1] == '/')
        p += 2;
    if (end - p < 3 || *p != '"' || end[-1] != '"')
        return -1;
    if (!dec_parse_u64(p + 1, (size_t)(end - p - 2), UINT64_MAX, cas))
        return -1;
    return 1;
}

static void respond_result(http_request *r, int rc)
{
    switch (rc) {
    case CACHE_TOO_LARGE: http_respond_error(r, 413, "value too large for the cache", NULL); break;
    case CACHE_NO_MEMORY: http_respond_error(r, 507, "out of memory storing object", NULL); break;
    case CACHE_NOT_FOUND: http_respond_error(r, 404, "not found", NULL); break;
    case CACHE_NOT_STORED:
    case CACHE_EXISTS: http_respond_error(r, 412, "precondition failed", NULL); break;
    case CACHE_NOT_NUMERIC:
        http_respond_error(r, 409, "value is not a decimal 64-bit unsigned integer", NULL);
        break;
    default: http_respond_error(r, 500, cache_result_name(rc), NULL); break;
    }
}

static void cache_put(http_request *r, cache_store *s, const char *key, size_t klen)
{
    uint64_t now = now_ms(), expiry = 0, ttl = 0;
    http_str v;
    if (http_query_param(r, "ttl", &v)) {
        if (!dec_parse_u64(v.p, v.len, MAX_TTL_S, &ttl)) {
            http_respond_error(r, 400, "ttl must be seconds, 0..315360000", NULL);
            return;
        }
        expiry = ttl ? now + ttl * 1000 : 0;
    }
    uint64_t cas_in = 0;
    int im = parse_tag(r->headers[HTTP_H_IF_MATCH], &cas_in);
    int inm = parse_tag(r->headers[HTTP_H_IF_NONE_MATCH], &cas_in);
    if (im < 0 || inm < 0 || (inm && inm != 2) || (im && inm)) {
        http_respond_error(r, 400, "use If-None-Match: * (add only) or If-Match: \"<etag>\" or *",
                           NULL);
        return;
    }
    cache_mode mode = inm == 2  ? CACHE_MODE_ADD
                      : im == 2 ? CACHE_MODE_REPLACE
                      : im == 1 ? CACHE_MODE_CAS
                                : CACHE_MODE_SET;
    http_str ct = r->headers[HTTP_H_CONTENT_TYPE];
    int err;
    cache_item *it =
        cache_item_new(s, key, klen, r->body_len, 0, expiry, ct.p, ct.p ? ct.len : 0, &err);
    if (!it) {
        if (err == CACHE_BAD_ARG)
            http_respond_error(r, 400, "Content-Type too long", NULL);
        else
            respond_result(r, err);
        return;
    }
    char *dst = cache_item_value_mut(it);
    for (const obuf_chunk *c = r->body->head; c; c = c->next) {
        memcpy(dst, c->data + c->start, c->end - c->start);
        dst += c->end - c->start;
    }
    uint64_t cas = 0;
    bool replaced = false;
    int rc = cache_store_item_ex(s, it, mode, cas_in, &cas, &replaced, now);
    if (rc != CACHE_STORED) {
        respond_result(r, rc == CACHE_NOT_FOUND ? CACHE_EXISTS : rc); /* CAS on absent: 412 */
        return;
    }
    char etag[64];
    etag_header(etag, sizeof etag, cas);
    http_respond(r, replaced ? 204 : 201, NULL, etag, NULL, 0);
}

static void cache_read(http_request *r, cache_store *s, const char *key, size_t klen)
{
    cache_item *it = cache_get(s, key, klen, now_ms());
    if (!it) {
        http_respond_error(r, 404, "not found", NULL);
        return;
    }
    uint64_t tag = 0;
    int inm = parse_tag(r->headers[HTTP_H_IF_NONE_MATCH], &tag);
    char extra[64 + sizeof NOSNIFF];
    size_t n = etag_header(extra, 64, cache_item_cas(it));
    memcpy(extra + n, NOSNIFF, sizeof NOSNIFF);
    if (inm == 2 || (inm == 1 && tag == cache_item_cas(it))) {
        http_respond(r, 304, NULL, extra, NULL, 0);
    } else {
        size_t ctl;
        const char *ct = cache_item_ctype(it, &ctl);
        char ctype[CACHE_CTYPE_MAX + 1];
        memcpy(ctype, ctl ? ct : DEFAULT_CTYPE, ctl ? ctl : sizeof DEFAULT_CTYPE);
        ctype[ctl ? ctl : sizeof DEFAULT_CTYPE - 1] = '\0';
        http_respond(r, 200, ctype, extra, cache_item_value(it), cache_item_vlen(it));
    }
    cache_item_release(it);
}

static void cache_remove(http_request *r, cache_store *s, const char *key, size_t klen)
{
    uint64_t cas = 0;
    int im = parse_tag(r->headers[HTTP_H_IF_MATCH], &cas);
    if (im < 0) {
        http_respond_error(r, 400, "If-Match must be \"<etag>\" or *", NULL);
        return;
    }
    int rc = cache_delete(s, key, klen, im == 1 ? cas : 0, now_ms());
    if (rc == CACHE_DELETED)
        http_respond(r, 204, NULL, NULL, NULL, 0);
    else
        respond_result(r, rc);
}

static void cache_counter(http_request *r, cache_store *s, const char *key, size_t klen, bool decr)
{
    uint64_t by = 1;
    http_str v;
    if (http_query_param(r, "by", &v) && !dec_parse_u64(v.p, v.len, UINT64_MAX, &by)) {
        http_respond_error(r, 400, "by must be a decimal 64-bit unsigned integer", NULL);
        return;
    }
    uint64_t out;
    int rc = cache_incr(s, key, klen, by, decr, &out, now_ms());
    if (rc != CACHE_OK) {
        respond_result(r, rc);
        return;
    }
    char body[FMT_U64_MAX];
    size_t n = fmt_u64(body, out);
    http_respond(r, 200, "text/plain; charset=utf-8", NULL, body, n);
}

void api_cache(http_request *r, void *ctx)
{
    api_ctx *a = ctx;
    char key[CACHE_KEY_MAX];
    size_t klen;
    int counter;
    if (parse_target(r, key, &klen, &counter) != 0) {
        http_respond_error(r, 400,
                           "key must be 1..250 bytes without spaces or control "
                           "characters (percent-encoded in the URL)",
                           NULL);
        return;
    }
    /* a memcached ID key (cache.memcached_id_keys) never holds a value: its writes are refused
     * here as over the memcached protocol, so the two never mix; a read finds nothing */
    if (r->method != HTTP_GET && r->method != HTTP_HEAD && a->mc &&
        memcache_server_id_key(a->mc, key, klen) >= 0) {
        http_respond_error(r, 409,
                           "key is reserved for IDs on the memcached protocol "
                           "(cache.memcached_id_keys): it cannot be written",
                           NULL);
        return;
    }
    if (counter) {
        if (r->method != HTTP_POST)
            http_respond_error(r, 405, "method not allowed", "Allow: " ALLOW_COUNTER "\r\n");
        else
            cache_counter(r, a->cache, key, klen, counter < 0);
        return;
    }
    switch (r->method) {
    case HTTP_GET:
    case HTTP_HEAD: cache_read(r, a->cache, key, klen); break;
    case HTTP_PUT: cache_put(r, a->cache, key, klen); break;
    case HTTP_DELETE: cache_remove(r, a->cache, key, klen); break;
    default: http_respond_error(r, 405, "method not allowed", "Allow: " ALLOW_VALUE "\r\n"); break;
    }
}
