/* GET /bounds?from=T&to=T[&type=snowflake|uuid7|ulid|typeid][&encoding=...][&prefix=P]: the ID
 * range a time
 * interval [from, to) maps to (snowflake/bounds.h), for range scans and partitions:
 *
 *   {"type":"snowflake","from_ms":N,"to_ms":N,"first_tick_ms":N,"end_tick_ms":N,
 *    "min":"...","max":"..."|null,"end":"...","empty":false}
 *
 * T is RFC 3339 or Unix ms (util/rfc3339.h), percent-decoded first (clients encode ':' and '+');
 * from floors to the millisecond, to ceils (an ID stamped ms m can be issued at m + 0.3). IDs are
 * strings in the requested encoding: snowflake dec|hex|base62|base32 (default: the configured
 * one), uuid7 canonical|hex|base32 (default canonical), ulid base32, typeid typeid: the uuid7
 * bounds as TypeIDs of ?prefix= (default none), which sort as strings in UUID order within a
 * prefix. Every bad parameter is a 400 whose message starts with its name. Nothing allocated,
 * nothing taken from a generator.
 */
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "snowflake/bounds.h"
#include "snowflake/id128.h"
#include "snowflake/typeid.h"
#include "util/rfc3339.h"

/* A time parameter longer than this (encoded) is refused; the URL limit bounds it anyway. */
#define BOUNDS_TIME_MAX 256

typedef enum { TYPE_SNOWFLAKE, TYPE_UUID7, TYPE_ULID, TYPE_TYPEID } bounds_type;
typedef enum { ENC128_CANONICAL, ENC128_HEX, ENC128_BASE32 } enc128;

static const char *const type_names[] = {"snowflake", "uuid7", "ulid", "typeid"};

static bool is(http_str v, const char *word)
{
    return v.len == strlen(word) && memcmp(v.p, word, v.len) == 0;
}

/* ?from= / ?to=: required, percent-decoded, parsed. Answers 400 itself and returns -1. */
static int time_param(http_request *r, const char *name, bool round_up, uint64_t *ms)
{
    http_str v;
    char msg[192];
    if (!http_query_param(r, name, &v) || v.len == 0) {
        snprintf(msg, sizeof msg, "%s is required: an RFC 3339 time or Unix milliseconds", name);
        http_respond_error(r, 400, msg, NULL);
        return -1;
    }
    char text[BOUNDS_TIME_MAX];
    long n = v.len > sizeof text ? -1 : http_percent_decode(v.p, v.len, text, sizeof text);
    const char *why = NULL;
    if (n < 0) /* decoding never grows the text: only a bad escape fails once it fits */
        why = v.len > sizeof text ? "too long (at most 256 characters)" : "bad percent-encoding";
    else if (rfc3339_parse_ms(text, (size_t)n, round_up, ms, &why) == 0)
        return 0;
    snprintf(msg, sizeof msg, "%s: %s", name, why);
    http_respond_error(r, 400, msg, NULL);
    return -1;
}

static size_t format128(bounds_type type, enc128 enc, http_str prefix, sf_id128 id, char *out)
{
    if (type == TYPE_TYPEID)
        return sf_typeid_format(prefix.p, prefix.len, id, out);
    if (type == TYPE_ULID || enc == ENC128_BASE32)
        return sf_ulid_format(id, out); /* the same 128 bits in Crockford's base32 */
    return enc == ENC128_HEX ? sf_uuid_format_compact(id, out) : sf_uuid_format(id, out);
}

void api_bounds(http_request *r, void *ctx)
{
    api_ctx *a = ctx;
    http_str v;
    bounds_type type = TYPE_SNOWFLAKE;
    if (http_query_param(r, "type", &v)) {
        if (is(v, "uuid7"))
            type = TYPE_UUID7;
        else if (is(v, "ulid"))
            type = TYPE_ULID;
        else if (is(v, "typeid"))
            type = TYPE_TYPEID;
        else if (!is(v, "snowflake")) {
            http_respond_error(r, 400, "type must be one of snowflake, uuid7, ulid, typeid", NULL);
            return;
        }
    }
    http_str prefix = {NULL, 0};
    if (http_query_param(r, "prefix", &prefix)) {
        const char *why;
        char msg[160];
        if (type != TYPE_TYPEID) {
            http_respond_error(r, 400, "prefix is for type=typeid only", NULL);
            return;
        }
        if (sf_typeid_prefix_check(prefix.p, prefix.len, &why) != 0) {
            snprintf(msg, sizeof msg, "prefix: %s (TypeID spec v0.3)", why);
            http_respond_error(r, 400, msg, NULL);
            return;
        }
    }
    sf_encoding enc = a->opt.default_encoding;
    enc128 e128 = type == TYPE_ULID ? ENC128_BASE32 : ENC128_CANONICAL;
    if (http_query_param(r, "encoding", &v)) {
        const char *bad = NULL;
        if (type == TYPE_SNOWFLAKE) {
            if (sf_enc_parse_name(v.p, v.len, &enc) != 0)
                bad = "encoding must be one of dec, hex, base62, base32";
        } else if (type == TYPE_UUID7) {
            if (is(v, "canonical"))
                e128 = ENC128_CANONICAL;
            else if (is(v, "hex"))
                e128 = ENC128_HEX;
            else if (is(v, "base32"))
                e128 = ENC128_BASE32;
            else
                bad = "encoding must be one of canonical, hex, base32 for type=uuid7";
        } else if (type == TYPE_TYPEID) {
            if (!is(v, "typeid"))
                bad = "encoding must be typeid for type=typeid";
        } else if (!is(v, "base32")) {
            bad = "encoding must be base32 for type=ulid";
        }
        if (bad) {
            http_respond_error(r, 400, bad, NULL);
            return;
        }
    }
    bool numbers = false; /* ?json_ids=number: Snowflake IDs of a JSON-safe layout as numbers */
    if (type == TYPE_SNOWFLAKE) {
        if (api_json_ids_option(r, a, enc, &numbers) != 0)
            return;
    } else if (http_query_param(r, "json_ids", &v) && !is(v, "string")) {
        http_respond_error(r, 400, "json_ids must be string for type=uuid7, ulid and typeid", NULL);
        return;
    }
    uint64_t from, to;
    if (time_param(r, "from", false, &from) != 0 || time_param(r, "to", true, &to) != 0)
        return;

    char why[160];
    char min[SF_TYPEID_TEXT_MAX + 1], max[SF_TYPEID_TEXT_MAX + 1] = "", end[SF_TYPEID_TEXT_MAX + 1];
    size_t nmin, nmax = 0, nend;
    uint64_t first_tick_ms, end_tick_ms;
    bool empty;
    if (type == TYPE_SNOWFLAKE) {
        sf_bounds b;
        if (sf_bounds_layout(&a->opt.layout, from, to, &b, why, sizeof why) != 0) {
            http_respond_error(r, 400, why, NULL);
            return;
        }
        nmin = sf_enc_format(enc, b.min, min);
        nend = sf_enc_format(enc, b.end, end);
        if (!b.empty)
            nmax = sf_enc_format(enc, b.max, max);
        first_tick_ms = b.first_tick_ms, end_tick_ms = b.end_tick_ms, empty = b.empty;
    } else {
        sf_bounds128 b;
        sf_bounds_kind kind = type == TYPE_ULID ? SF_BOUNDS_ULID : SF_BOUNDS_UUID7;
        if (sf_bounds_id128(kind, from, to, &b, why, sizeof why) != 0) {
            http_respond_error(r, 400, why, NULL);
            return;
        }
        nmin = format128(type, e128, prefix, b.min, min);
        nend = format128(type, e128, prefix, b.end, end);
        if (!b.empty)
            nmax = format128(type, e128, prefix, b.max, max);
        first_tick_ms = from, end_tick_ms = to, empty = b.empty; /* 1 ms ticks */
    }
    const char *q = numbers ? "" : "\""; /* IDs quoted, or bare JSON numbers */
    char body[768]; /* three 90-character TypeIDs at most */
    int n = snprintf(body, sizeof body,
                     "{\"type\":\"%s\",\"from_ms\":%llu,\"to_ms\":%llu,\"first_tick_ms\":%llu,"
                     "\"end_tick_ms\":%llu,\"min\":%s%.*s%s,\"max\":%s%.*s%s,\"end\":%s%.*s%s,"
                     "\"empty\":%s}",
                     type_names[type], (unsigned long long)from, (unsigned long long)to,
                     (unsigned long long)first_tick_ms, (unsigned long long)end_tick_ms, q,
                     (int)nmin, min, q, empty ? "null" : q, (int)nmax, max, empty ? "" : q, q,
                     (int)nend, end, q, empty ? "true" : "false");
    http_respond(r, 200, "application/json", NULL, body, (size_t)n);
}
