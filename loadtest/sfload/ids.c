/* ID extraction from /id and /ids bodies (see ids.h). */
#include "ids.h"

#include <string.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int ids_parse_one(const char *t, size_t len, ids_enc enc, uint64_t *id)
{
    uint64_t v = 0;
    if (len == 0)
        return -1;
    if (enc == IDS_HEX) {
        if (len > 16)
            return -1;
        for (size_t i = 0; i < len; i++) {
            int d = hexval(t[i]);
            if (d < 0)
                return -1;
            v = v << 4 | (uint64_t)d;
        }
    } else {
        if (len > 20)
            return -1;
        for (size_t i = 0; i < len; i++) {
            if (t[i] < '0' || t[i] > '9')
                return -1;
            uint64_t d = (uint64_t)(t[i] - '0');
            if (v > (UINT64_MAX - d) / 10)
                return -1;
            v = v * 10 + d;
        }
    }
    *id = v;
    return 0;
}

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
        c->p++;
}

static int expect(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 0;
    }
    return -1;
}

/* A JSON string or bare token holding an ID. */
static int json_id(cursor *c, ids_enc enc, uint64_t *id)
{
    skip_ws(c);
    const char *s;
    size_t n;
    if (c->p < c->end && *c->p == '"') {
        s = ++c->p;
        while (c->p < c->end && *c->p != '"')
            c->p++;
        if (c->p == c->end)
            return -1;
        n = (size_t)(c->p - s);
        c->p++;
    } else {
        s = c->p;
        while (c->p < c->end && hexval(*c->p) >= 0)
            c->p++;
        n = (size_t)(c->p - s);
    }
    return ids_parse_one(s, n, enc, id);
}

/* {"<key>": ... with key "id" or "ids"; returns 1 for "ids", 0 for "id", -1 otherwise. */
static int json_key(cursor *c)
{
    if (expect(c, '{') || expect(c, '"'))
        return -1;
    const char *k = c->p;
    while (c->p < c->end && *c->p != '"')
        c->p++;
    if (c->p == c->end)
        return -1;
    size_t n = (size_t)(c->p - k);
    c->p++;
    if (expect(c, ':'))
        return -1;
    if (n == 2 && memcmp(k, "id", 2) == 0)
        return 0;
    if (n == 3 && memcmp(k, "ids", 3) == 0)
        return 1;
    return -1;
}

static long parse_json(cursor *c, ids_enc enc, ids_fn fn, void *ud, const char **why)
{
    int list = json_key(c);
    uint64_t id;
    long count = 0;
    if (list < 0) {
        *why = "JSON body is not {\"id\":...} or {\"ids\":[...]}";
        return -1;
    }
    if (!list) {
        if (json_id(c, enc, &id)) {
            *why = "JSON \"id\" is not a valid ID";
            return -1;
        }
        count = 1;
        if (fn(ud, id))
            return count;
    } else {
        if (expect(c, '[')) {
            *why = "JSON \"ids\" is not an array";
            return -1;
        }
        skip_ws(c);
        if (c->p < c->end && *c->p == ']') {
            c->p++;
        } else {
            for (;;) {
                if (json_id(c, enc, &id)) {
                    *why = "JSON \"ids\" holds an invalid ID";
                    return -1;
                }
                count++;
                if (fn(ud, id))
                    return count;
                skip_ws(c);
                if (c->p < c->end && *c->p == ',') {
                    c->p++;
                    continue;
                }
                if (expect(c, ']')) {
                    *why = "JSON \"ids\" array is not closed";
                    return -1;
                }
                break;
            }
        }
    }
    if (expect(c, '}')) {
        *why = "JSON object is not closed after the IDs";
        return -1;
    }
    skip_ws(c);
    if (c->p != c->end) {
        *why = "bytes after the JSON object";
        return -1;
    }
    return count;
}

static long parse_text(cursor *c, ids_enc enc, ids_fn fn, void *ud, const char **why)
{
    long count = 0;
    while (c->p < c->end) {
        const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
        const char *eol = nl ? nl : c->end;
        size_t n = (size_t)(eol - c->p);
        if (n && c->p[n - 1] == '\r')
            n--;
        uint64_t id;
        if (ids_parse_one(c->p, n, enc, &id)) {
            *why = n ? "text line is not a valid ID" : "empty line in text body";
            return -1;
        }
        count++;
        if (fn(ud, id))
            return count;
        c->p = nl ? nl + 1 : c->end;
    }
    if (count == 0)
        *why = "empty body";
    return count ? count : -1;
}

long ids_parse(const char *body, size_t len, ids_enc enc, ids_fn fn, void *ud, const char **why)
{
    cursor c = {body, body + len};
    skip_ws(&c);
    if (c.p < c.end && *c.p == '{')
        return parse_json(&c, enc, fn, ud, why);
    c.p = body;
    return parse_text(&c, enc, fn, ud, why);
}
