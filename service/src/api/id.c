/* /id, /ids and /id/{id}, and what the ID routes share: output options, ?count=, the batch
 * scratch and its writer (api.h). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "snowflake/encoding.h"
#include "util/counter.h"
#include "util/decimal.h"
#include "util/fmt.h"
#include "util/rfc3339.h"

static sf_gen *gen_for(const api_ctx *a, const http_request *r)
{
    return api_gen_for(a->gens, a->ngens, r);
}

/* HEAD must describe the GET response without taking IDs from the sequence: answer it with the
 * ID this node would issue at the current tick's start (same length, hence same headers). */
static uint64_t head_placeholder(sf_gen *g)
{
    return sf_layout_pack(&g->layout, sf_gen_now_tick(g), 0, 0, 0) | g->node_bits;
}

static void count_ids(api_ctx *a, const http_request *r, uint64_t n)
{
    api_loop *l = perloop_at(&a->loops, r->loop_index);
    counter_add(&l->ids_issued, n);
}

static bool str_has(http_str s, const char *needle)
{
    size_t n = strlen(needle);
    for (uint32_t i = 0; s.p && i + n <= s.len; i++)
        if (strncasecmp(s.p + i, needle, n) == 0)
            return true;
    return false;
}

int api_text_wanted(http_request *r, bool *text)
{
    http_str v;
    *text = str_has(r->headers[HTTP_H_ACCEPT], "text/plain") &&
            !str_has(r->headers[HTTP_H_ACCEPT], "application/json");
    if (http_query_param(r, "format", &v)) {
        if (v.len == 4 && memcmp(v.p, "text", 4) == 0) {
            *text = true;
        } else if (v.len == 4 && memcmp(v.p, "json", 4) == 0) {
            *text = false;
        } else {
            http_respond_error(r, 400, "format must be json or text", NULL);
            return -1;
        }
    }
    return 0;
}

/* ?encoding= and ?format= / Accept. Answers 400 itself and returns -1 on a bad value. */
static int output_options(http_request *r, const api_ctx *a, sf_encoding *enc, bool *text)
{
    *enc = a->opt.default_encoding;
    http_str v;
    if (http_query_param(r, "encoding", &v) && sf_enc_parse_name(v.p, v.len, enc) != 0) {
        http_respond_error(r, 400, "encoding must be one of dec, hex, base62, base32", NULL);
        return -1;
    }
    return api_text_wanted(r, text);
}

/* ?json_ids=number|string: decimal IDs as bare JSON numbers for clients that read them into
 * doubles (JavaScript's JSON.parse), exact only up to 2^53 - 1, hence only for layouts of at most
 * SF_JSON_SAFE_BITS bits. Without the parameter snowflake.json_ids decides (checked at start),
 * for decimal IDs only: ?encoding=hex still gets strings. An explicit number with an encoding
 * other than dec is a contradiction. enc: the IDs' output encoding. Answers 400 itself and
 * returns -1 on a bad value. */
int api_json_ids_option(http_request *r, const api_ctx *a, sf_encoding enc, bool *numbers)
{
    http_str v;
    char msg[96];
    if (!http_query_param(r, "json_ids", &v)) {
        *numbers = a->opt.json_numbers && enc == SF_ENC_DEC;
        return 0;
    }
    bool number = v.len == 6 && memcmp(v.p, "number", 6) == 0;
    if (!number && !(v.len == 6 && memcmp(v.p, "string", 6) == 0)) {
        http_respond_error(r, 400, "json_ids must be number or string", NULL);
        return -1;
    }
    if (number && a->opt.layout.id_bits > SF_JSON_SAFE_BITS) {
        snprintf(msg, sizeof msg,
                 "json_ids=number needs a layout of at most %d bits (this one has %u)",
                 SF_JSON_SAFE_BITS, (unsigned)a->opt.layout.id_bits);
        http_respond_error(r, 400, msg, NULL);
        return -1;
    }
    if (number && enc != SF_ENC_DEC) {
        snprintf(msg, sizeof msg, "json_ids=number needs encoding=dec, got %s", sf_enc_name(enc));
        http_respond_error(r, 400, msg, NULL);
        return -1;
    }
    *numbers = number;
    return 0;
}

void api_refuse(http_request *r, sf_gen *g, int rc)
{
    uint64_t ms = sf_gen_retry_after_ms(g);
    char extra[64];
    snprintf(extra, sizeof extra, "Retry-After: %llu\r\n",
             (unsigned long long)(ms ? (ms + 999) / 1000 : 1));
    http_respond_error(r, 503, sf_gen_strerror(rc), extra);
}

/* ?encoding=, ?format= / Accept and ?json_ids= of /id and /ids. Answers 400 itself and returns
 * -1 on a bad value. */
static int id_options(http_request *r, const api_ctx *a, sf_encoding *enc, bool *text,
                      bool *numbers)
{
    return output_options(r, a, enc, text) != 0 || api_json_ids_option(r, a, *enc, numbers) != 0
               ? -1
               : 0;
}

/* count IDs of the request's generator into ids, or for HEAD placeholders (none spent). false
 * with the 503 answered when the generator refuses. Inlined: a call here costs /id measurably
 * (bench_instructions.py). */
static inline __attribute__((always_inline)) bool take_ids(http_request *r, api_ctx *a, uint64_t *ids, uint32_t count, bool batch)
{
    sf_gen *g = gen_for(a, r);
    if (r->head_only) {
        ids[0] = head_placeholder(g);
        for (uint32_t i = 1; i < count; i++)
            ids[i] = ids[0];
        return true;
    }
    int rc = batch ? sf_gen_batch(g, ids, count) : sf_gen_next(g, ids);
    if (rc != SF_OK) {
        api_refuse(r, g, rc);
        return false;
    }
    count_ids(a, r, count);
    return true;
}

/* {"id":"<20 digits>"} and the separator the writer puts after it. */
_Static_assert(6 + 2 + FMT_U64_MAX + 1 + 1 <= API_ONE_BODY_MAX, "one ID fits API_ONE_BODY_MAX");

void api_id(http_request *r, void *ctx)
{
    api_ctx *a = ctx;
    sf_encoding enc;
    bool text, numbers;
    uint64_t id;
    if (id_options(r, a, &enc, &text, &numbers) != 0 || !take_ids(r, a, &id, 1, false))
        return;
    char body[API_ONE_BODY_MAX]; /* one ID needs no scratch: the hottest route stays lean */
    api_batch b;
    api_batch_open(&b, body, text, false, !numbers);
    char *p = api_batch_item(&b);
    api_batch_put(&b, sf_enc_format(enc, id, p));
    api_batch_respond(r, &b);
}

void api_ids(http_request *r, void *ctx)
{
    api_ctx *a = ctx;
    sf_encoding enc;
    bool text, numbers;
    uint32_t count;
    if (id_options(r, a, &enc, &text, &numbers) != 0 ||
        api_count_param(r, a->opt.max_batch, &count) != 0)
        return;
    api_batch b;
    uint64_t *ids = api_batch_begin(r, &b, sizeof *ids, count, text, true, !numbers);
    if (!ids || !take_ids(r, a, ids, count, true))
        return;
    for (uint32_t i = 0; i < count; i++) {
        char *p = api_batch_item(&b);
        api_batch_put(&b, sf_enc_format(enc, ids[i], p));
    }
    api_batch_respond(r, &b);
}

int api_count_param(http_request *r, uint32_t max, uint32_t *count)
{
    http_str v;
    uint64_t n;
    if (http_query_param(r, "count", &v) && dec_parse_u64(v.p, v.len, max, &n) && n >= 1) {
        *count = (uint32_t)n;
        return 0;
    }
    char msg[96];
    snprintf(msg, sizeof msg, "count must be an integer 1..%u", max);
    http_respond_error(r, 400, msg, NULL);
    return -1;
}

/* Without ?encoding=: the padded encodings have fixed lengths (hex 16, base32 13, base62 11);
 * a string of that length is read in that encoding first, and as decimal if that does not give
 * a valid ID (a decimal ID of the same length). Other lengths are decimal. */
static sf_encoding guess_encoding(size_t len)
{
    return len == 16   ? SF_ENC_HEX
           : len == 13 ? SF_ENC_BASE32
           : len == 11 ? SF_ENC_BASE62
                       : SF_ENC_DEC;
}

void api_batch_too_large(http_request *r)
{
    http_respond_error(r, 500, "batch too large for the response buffer", NULL);
}

/* Parses text as an ID in `enc` and checks it against the layout. 0, or -1 with why. */
static int decode(const sf_layout *l, sf_encoding enc, const char *text, size_t len, uint64_t *id,
                  sf_id_parts *parts, char *why, size_t whylen)
{
    if (sf_enc_parse(enc, text, len, id) != 0) {
        snprintf(why, whylen, "not a valid %s snowflake ID", sf_enc_name(enc));
        return -1;
    }
    char reason[128];
    uint64_t now = clk_now(clk_system());
    if (sf_layout_unpack(l, *id, now, API_PARSE_FUTURE_SLACK_MS, parts, reason, sizeof reason) !=
        0) {
        snprintf(why, whylen, "not a valid snowflake ID under this layout: %s", reason);
        return -1;
    }
    return 0;
}

void api_id_parse(http_request *r, void *ctx)
{
    api_ctx *a = ctx;
    const char *text = r->path.p + 4; /* after "/id/" */
    size_t len = r->path.len - 4;
    const sf_layout *l = &a->opt.layout;
    uint64_t id;
    sf_id_parts parts;
    char why[192];
    http_str v;
    bool numbers; /* the answer's "id" is decimal whatever the input's encoding */
    if (api_json_ids_option(r, a, SF_ENC_DEC, &numbers) != 0)
        return;
    if (http_query_param(r, "encoding", &v)) {
        sf_encoding enc;
        if (sf_enc_parse_name(v.p, v.len, &enc) != 0) {
            http_respond_error(r, 400, "encoding must be one of dec, hex, base62, base32", NULL);
            return;
        }
        if (decode(l, enc, text, len, &id, &parts, why, sizeof why) != 0) {
            http_respond_error(r, 400, why, NULL);
            return;
        }
    } else {
        sf_encoding enc = guess_encoding(len);
        char why_dec[192];
        if (decode(l, enc, text, len, &id, &parts, why, sizeof why) != 0 &&
            (enc == SF_ENC_DEC ||
             decode(l, SF_ENC_DEC, text, len, &id, &parts, why_dec, sizeof why_dec) != 0)) {
            http_respond_error(r, 400, why, NULL);
            return;
        }
    }
    char iso[RFC3339_FORMAT_CAP];
    rfc3339_format_ms(parts.timestamp_ms, iso);
    char body[320];
    int n = snprintf(body, sizeof body,
                     "{\"id\":%s%llu%s,\"timestamp_ms\":%llu,\"time\":\"%s\",\"datacenter\":%u,"
                     "\"worker\":%u,\"sequence\":%u}",
                     numbers ? "" : "\"", (unsigned long long)id, numbers ? "" : "\"",
                     (unsigned long long)parts.timestamp_ms, iso, parts.datacenter, parts.worker,
                     parts.sequence);
    http_respond(r, 200, "application/json", NULL, body, (size_t)n);
}
