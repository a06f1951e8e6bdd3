/* /uuid, /uuids, /uuid/{uuid}, /ulid, /ulids, /ulid/{ulid}: UUIDv7 and ULIDs issued by the
 * per-format generators (snowflake/issue128.h), in the same shapes as /id, /ids, /id/{id}:
 * {"id":"..."}, {"ids":[...]}, or text with ?format=text, so a client switches format by path.
 * /typeid, /typeids, /typeid/{typeid}: TypeIDs (snowflake/typeid.h), ?prefix= and a UUIDv7 from
 * the UUIDv7 generator, so a TypeID's UUID is one /uuid could have given (same order, same
 * lease, never the same value twice). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "snowflake/typeid.h"
#include "util/counter.h"
#include "util/rfc3339.h"

typedef enum { TEXT_CANONICAL, TEXT_HEX, TEXT_BASE32, TEXT_TYPEID } id128_text;

static const char *const format_names[] = {"uuid7", "ulid"};

/* prefix: TypeID's (checked), for TEXT_TYPEID. */
static size_t format_text(id128_text t, http_str prefix, sf_id128 id, char *out)
{
    switch (t) {
    case TEXT_CANONICAL: return sf_uuid_format(id, out);
    case TEXT_HEX: return sf_uuid_format_compact(id, out);
    case TEXT_TYPEID: return sf_typeid_format(prefix.p, prefix.len, id, out);
    default: return sf_ulid_format(id, out);
    }
}

/* ?encoding= (UUIDs: canonical, hex, base32; ULIDs: base32 only) and ?format= / Accept. */
static int output_options(http_request *r, sf_id128_format f, id128_text *t, bool *text)
{
    *t = f == SF_FORMAT_UUID7 ? TEXT_CANONICAL : TEXT_BASE32;
    http_str v;
    if (http_query_param(r, "encoding", &v)) {
#define IS(s) (v.len == sizeof(s) - 1 && memcmp(v.p, s, v.len) == 0)
        if (IS("base32"))
            *t = TEXT_BASE32;
        else if (f == SF_FORMAT_UUID7 && IS("canonical"))
            *t = TEXT_CANONICAL;
        else if (f == SF_FORMAT_UUID7 && IS("hex"))
            *t = TEXT_HEX;
        else {
            http_respond_error(r, 400,
                               f == SF_FORMAT_UUID7
                                   ? "encoding must be one of canonical, hex, base32"
                                   : "encoding must be base32 (the only text of a ULID)",
                               NULL);
            return -1;
        }
#undef IS
    }
    return api_text_wanted(r, text);
}

/* HEAD describes the GET response without spending a slot: an ID of this node at the current
 * millisecond, counter and random bits zero (same length, hence same headers). */
static sf_id128 head_placeholder(sf_gen *g, sf_id128_format f)
{
    return sf_id128_compose(&g->layout, f, sf_gen_now_tick(g), 0, g->node_bits, 0, 0);
}

/* Answers one ID of format f (or ?count= of them with batch) as text t. */
static void respond(http_request *r, api_ctx *a, sf_id128_format f, id128_text t, http_str prefix,
                    bool text, bool batch)
{
    uint32_t count = 1;
    if (batch && api_count_param(r, a->opt.max_batch, &count) != 0)
        return;
    api_batch b;
    sf_id128 *ids = api_batch_begin(r, &b, sizeof *ids, count, text, batch, true);
    if (!ids)
        return;
    sf_gen *g = api_gen_for(a->gens128[f], a->ngens, r);
    if (r->head_only) {
        for (uint32_t i = 0; i < count; i++)
            ids[i] = head_placeholder(g, f);
    } else {
        int rc = sf_id128_issue(g, f, ids, count);
        if (rc != SF_OK) {
            api_refuse(r, g, rc);
            return;
        }
        api_loop *l = perloop_at(&a->loops, r->loop_index);
        counter_add(t == TEXT_TYPEID ? &l->typeids_issued : &l->ids128_issued[f], count);
    }
    for (uint32_t i = 0; i < count; i++) {
        char *p = api_batch_item(&b);
        api_batch_put(&b, format_text(t, prefix, ids[i], p));
    }
    api_batch_respond(r, &b);
}

static void issue(http_request *r, api_ctx *a, sf_id128_format f)
{
    id128_text t;
    bool text, batch = r->path.len > 5 && r->path.p[5] == 's'; /* "/uuids", "/ulids" */
    if (output_options(r, f, &t, &text) == 0)
        respond(r, a, f, t, (http_str){NULL, 0}, text, batch);
}

void api_uuid(http_request *r, void *ctx)
{
    issue(r, ctx, SF_FORMAT_UUID7);
}

void api_ulid(http_request *r, void *ctx)
{
    issue(r, ctx, SF_FORMAT_ULID);
}

/* ?prefix= (absent or empty: none, the TypeID is the suffix alone), ?encoding=typeid (the only
 * text; accepted so that clients of /uuid can send it), ?format= / Accept. */
void api_typeid(http_request *r, void *ctx)
{
    bool text, batch = r->path.len > 7 && r->path.p[7] == 's'; /* "/typeids" */
    http_str prefix = {NULL, 0}, v;
    const char *why;
    char msg[160];
    if (http_query_param(r, "prefix", &prefix) &&
        sf_typeid_prefix_check(prefix.p, prefix.len, &why) != 0) {
        snprintf(msg, sizeof msg, "prefix: %s (TypeID spec v0.3)", why);
        http_respond_error(r, 400, msg, NULL);
        return;
    }
    if (http_query_param(r, "encoding", &v) && !(v.len == 6 && memcmp(v.p, "typeid", 6) == 0)) {
        http_respond_error(r, 400, "encoding must be typeid (the only text of a TypeID)", NULL);
        return;
    }
    if (api_text_wanted(r, &text) == 0)
        respond(r, ctx, SF_FORMAT_UUID7, TEXT_TYPEID, prefix, text, batch);
}

/* The random bits as hex digits, as many as they need. */
static void random_hex(const sf_id128_parts *p, char *out, size_t cap)
{
    if (p->random_bits > 64)
        snprintf(out, cap, "%0*" PRIx64 "%016" PRIx64, (int)(p->random_bits - 64 + 3) / 4,
                 p->random_hi, p->random_lo);
    else
        snprintf(out, cap, "%0*" PRIx64, (int)(p->random_bits + 3) / 4, p->random_lo);
}

/* The fields of id read with this node's layout (the node and random split is ours, the rest
 * is standard), as JSON members without braces: "timestamp_ms":...,"random_bits":N. Returns their
 * length, or -1 with 400 answered when the timestamp lies in the future (no node issued it). */
static int decoded_fields(http_request *r, const api_ctx *a, sf_id128_format f, sf_id128 id,
                          char *out, size_t cap)
{
    sf_id128_parts p;
    sf_id128_decompose(&a->gens128[f][0]->layout, f, id, &p);
    uint64_t now = clk_now(clk_system());
    if (p.ms > now + API_PARSE_FUTURE_SLACK_MS) {
        char msg[96];
        snprintf(msg, sizeof msg, "timestamp %" PRIu64 " ms is in the future", p.ms);
        http_respond_error(r, 400, msg, NULL);
        return -1;
    }
    char iso[RFC3339_FORMAT_CAP], rnd[24];
    rfc3339_format_ms(p.ms, iso);
    random_hex(&p, rnd, sizeof rnd);
    return snprintf(out, cap,
                    "\"timestamp_ms\":%" PRIu64 ",\"time\":\"%s\",\"counter\":%u,\"datacenter\":%u,"
                    "\"worker\":%u,\"random\":\"%s\",\"random_bits\":%u",
                    p.ms, iso, p.counter, p.datacenter, p.worker, rnd, p.random_bits);
}

/* /uuid/{uuid} takes the canonical text (either case), the 32 hex digits, or the 26-character
 * base32 form /uuid?encoding=base32 gives; /ulid/{ulid} takes 26 characters. */
static void parse(http_request *r, api_ctx *a, sf_id128_format f, size_t prefix)
{
    const char *text = r->path.p + prefix, *why = NULL;
    size_t len = r->path.len - prefix;
    sf_id128 id;
    char msg[160];
    int rc = f == SF_FORMAT_ULID || len == SF_ULID_TEXT_LEN ? sf_ulid_parse(text, len, &id, &why)
                                                           : sf_uuid_parse(text, len, &id, &why);
    if (rc != 0) {
        snprintf(msg, sizeof msg, "not a valid %s: %s", f == SF_FORMAT_ULID ? "ULID" : "UUID",
                 why);
        http_respond_error(r, 400, msg, NULL);
        return;
    }
    sf_uuid7_fields uf;
    if (f == SF_FORMAT_UUID7 && !sf_uuid7_split(id, &uf, &why)) {
        snprintf(msg, sizeof msg, "%s (version %u, variant bits %u%u)", why,
                 (unsigned)(id.hi >> 12 & 0xf), (unsigned)(id.lo >> 63),
                 (unsigned)(id.lo >> 62 & 1));
        http_respond_error(r, 400, msg, NULL);
        return;
    }
    char fields[320];
    if (decoded_fields(r, a, f, id, fields, sizeof fields) < 0)
        return;
    char uuid[SF_UUID_TEXT_LEN + 1], ulid[SF_ULID_TEXT_LEN + 1];
    uuid[sf_uuid_format(id, uuid)] = '\0';
    ulid[sf_ulid_format(id, ulid)] = '\0';
    char body[448];
    int n;
    if (f == SF_FORMAT_UUID7)
        n = snprintf(body, sizeof body, "{\"uuid\":\"%s\",\"version\":7,%s,\"base32\":\"%s\"}",
                     uuid, fields, ulid);
    else
        n = snprintf(body, sizeof body, "{\"ulid\":\"%s\",\"uuid\":\"%s\",%s}", ulid, uuid,
                     fields);
    http_respond(r, 200, "application/json", NULL, body, (size_t)n);
}

void api_uuid_parse(http_request *r, void *ctx)
{
    parse(r, ctx, SF_FORMAT_UUID7, 6); /* after "/uuid/" */
}

void api_ulid_parse(http_request *r, void *ctx)
{
    parse(r, ctx, SF_FORMAT_ULID, 6); /* after "/ulid/" */
}

/* /typeid/{typeid}[?prefix=P]: any TypeID the spec accepts (any UUID inside, as the spec lets
 * users encode other versions); with ?prefix=, also of that type (typeid-js's fromString(s, P)).
 * A UUIDv7 (version 7, variant 10) is decoded as /uuid/{uuid} decodes it; another UUID gets
 * "uuid7":false and its version (null outside variant 10) and nothing else. The path is
 * percent-decoded first, so that a pasted text with a space or a non-ASCII letter is judged by
 * the rule it breaks, not by its escapes. */
void api_typeid_parse(http_request *r, void *ctx)
{
    api_ctx *a = ctx;
    const char *text = r->path.p + 8, *why = NULL; /* after "/typeid/" */
    size_t len = r->path.len - 8;
    sf_typeid t;
    char msg[224], decoded[3 * SF_TYPEID_TEXT_MAX];
    if (memchr(text, '%', len)) {
        /* A character takes at most 3 bytes escaped: longer text decodes to over 90. */
        long n =
            len > sizeof decoded ? -1 : http_percent_decode(text, len, decoded, sizeof decoded);
        if (n < 0) {
            http_respond_error(r, 400,
                               len > sizeof decoded ? "not a valid TypeID: at most 90 characters"
                                                    : "not a valid TypeID: bad percent-encoding",
                               NULL);
            return;
        }
        text = decoded, len = (size_t)n;
    }
    if (sf_typeid_parse(text, len, &t, &why) != 0) {
        snprintf(msg, sizeof msg, "not a valid TypeID: %s (TypeID spec v0.3)", why);
        http_respond_error(r, 400, msg, NULL);
        return;
    }
    http_str want;
    if (http_query_param(r, "prefix", &want) &&
        (want.len != t.prefix_len || memcmp(want.p, t.prefix, want.len) != 0)) {
        if (sf_typeid_prefix_check(want.p, want.len, &why) != 0)
            snprintf(msg, sizeof msg, "prefix: %s (TypeID spec v0.3)", why);
        else
            snprintf(msg, sizeof msg, "prefix: the TypeID's prefix is \"%.*s\", not \"%.*s\"",
                     (int)t.prefix_len, t.prefix, (int)want.len, want.p);
        http_respond_error(r, 400, msg, NULL);
        return;
    }
    sf_uuid7_fields uf;
    bool v7 = sf_uuid7_split(t.id, &uf, &why);
    char fields[320] = "";
    if (v7 && decoded_fields(r, a, SF_FORMAT_UUID7, t.id, fields, sizeof fields) < 0)
        return;
    char uuid[SF_UUID_TEXT_LEN + 1], version[8] = "null"; /* outside variant 10: no version */
    uuid[sf_uuid_format(t.id, uuid)] = '\0';
    if ((t.id.lo >> 62) == 2)
        snprintf(version, sizeof version, "%u", (unsigned)(t.id.hi >> 12 & 0xf));
    char body[640];
    int n = snprintf(body, sizeof body,
                     "{\"typeid\":\"%.*s\",\"prefix\":\"%.*s\",\"suffix\":\"%.*s\",\"uuid\":\"%s\","
                     "\"version\":%s,\"uuid7\":%s%s%s}",
                     (int)len, text, (int)t.prefix_len, t.prefix, SF_TYPEID_SUFFIX_LEN,
                     text + len - SF_TYPEID_SUFFIX_LEN, uuid, version, v7 ? "true" : "false",
                     v7 ? "," : "", fields);
    http_respond(r, 200, "application/json", NULL, body, (size_t)n);
}

const char *api_format_name(sf_id128_format f)
{
    return format_names[f];
}
