/* memcached text-protocol reply parser (see mcreply.h). */
#include "mcreply.h"

#include <string.h>

enum { ST_LINE, ST_DATA };

#define MAX_VALUE_BYTES (UINT64_C(1) << 32)

void mc_reset(mc_parser *p)
{
    p->state = ST_LINE;
    p->line_len = 0;
    p->data_left = 0;
    p->nvalues = 0;
    p->key_len = 0;
    p->value_len = 0;
    p->err = NULL;
}

const char *mc_kind_name(mc_kind k)
{
    static const char *const names[] = {"END",       "STORED",       "NOT_STORED",  "EXISTS",
                                        "NOT_FOUND", "DELETED",      "TOUCHED",     "OK",
                                        "ERROR",     "CLIENT_ERROR", "SERVER_ERROR"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

static int word_is(const char *s, size_t n, const char *w)
{
    size_t wl = strlen(w);
    return n >= wl && memcmp(s, w, wl) == 0 && (n == wl || s[wl] == ' ');
}

/* Next space-separated token of line[*pos..n). */
static int token(const char *s, size_t n, size_t *pos, const char **t, size_t *tl)
{
    size_t i = *pos;
    if (i >= n || s[i] != ' ')
        return -1;
    i++;
    size_t b = i;
    while (i < n && s[i] != ' ')
        i++;
    if (i == b)
        return -1;
    *t = s + b;
    *tl = i - b;
    *pos = i;
    return 0;
}

static int number(const char *t, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 20)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(t[i] - '0');
        if (v > max)
            return -1;
    }
    *out = v;
    return 0;
}

/* "VALUE <key> <flags> <bytes> [<cas>]" */
static int value_line(mc_parser *p, const char *s, size_t n)
{
    size_t pos = 5;
    const char *t;
    size_t tl;
    uint64_t flags, bytes, cas;
    if (token(s, n, &pos, &t, &tl) || tl > MC_KEY_MAX)
        return -1;
    if (p->nvalues == 0) {
        memcpy(p->key, t, tl);
        p->key[tl] = '\0';
        p->key_len = tl;
    }
    if (token(s, n, &pos, &t, &tl) || number(t, tl, UINT32_MAX, &flags))
        return -1;
    if (token(s, n, &pos, &t, &tl) || number(t, tl, MAX_VALUE_BYTES, &bytes))
        return -1;
    if (pos < n && (token(s, n, &pos, &t, &tl) || number(t, tl, UINT64_MAX / 10, &cas)))
        return -1;
    if (pos != n)
        return -1;
    if (p->nvalues == 0)
        p->value_len = bytes;
    p->nvalues++;
    p->data_left = bytes + 2;
    p->state = ST_DATA;
    return 0;
}

static void fill(mc_parser *p, mc_kind k, mc_reply *r)
{
    r->kind = k;
    r->nvalues = p->nvalues;
    r->key = p->key;
    r->key_len = p->key_len;
    r->value_len = p->value_len;
    p->nvalues = 0;
    p->key_len = 0;
    p->value_len = 0;
}

/* A complete line without its CRLF: 1 reply done, 0 more to come, -1 malformed. */
static int line_done(mc_parser *p, const char *s, size_t n, mc_reply *r)
{
    static const struct {
        const char *word;
        mc_kind kind;
        int args; /* the rest of the line is free text */
    } lines[] = {
        {"END", MC_END, 0},
        {"STORED", MC_STORED, 0},
        {"NOT_STORED", MC_NOT_STORED, 0},
        {"EXISTS", MC_EXISTS, 0},
        {"NOT_FOUND", MC_NOT_FOUND, 0},
        {"DELETED", MC_DELETED, 0},
        {"TOUCHED", MC_TOUCHED, 0},
        {"OK", MC_OK, 0},
        {"ERROR", MC_ERROR, 1},
        {"CLIENT_ERROR", MC_CLIENT_ERROR, 1},
        {"SERVER_ERROR", MC_SERVER_ERROR, 1},
    };
    if (word_is(s, n, "VALUE")) {
        if (value_line(p, s, n) != 0) {
            p->err = "malformed VALUE line";
            return -1;
        }
        return 0;
    }
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        size_t wl = strlen(lines[i].word);
        if (lines[i].args ? word_is(s, n, lines[i].word)
                          : (n == wl && memcmp(s, lines[i].word, wl) == 0)) {
            if (p->nvalues && lines[i].kind != MC_END && lines[i].kind != MC_SERVER_ERROR) {
                p->err = "VALUE block not ended by END";
                return -1;
            }
            fill(p, lines[i].kind, r);
            return 1;
        }
    }
    p->err = "unknown reply line";
    return -1;
}

int mc_feed(mc_parser *p, const char *data, size_t len, size_t *used, mc_reply *r)
{
    size_t i = 0;
    while (i < len) {
        if (p->state == ST_DATA) {
            if (p->data_left > 2) { /* value bytes: skipped, never copied */
                uint64_t skip = p->data_left - 2;
                if (skip > len - i)
                    skip = len - i;
                i += (size_t)skip;
                p->data_left -= skip;
                continue;
            }
            if (data[i] != (p->data_left == 2 ? '\r' : '\n')) {
                p->err = "value data not followed by CRLF";
                return -1;
            }
            i++;
            if (--p->data_left == 0)
                p->state = ST_LINE;
            continue;
        }
        const char *nl = memchr(data + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (data + i)) + 1 : len - i;
        if (p->line_len + n > MC_LINE_MAX) {
            p->err = "reply line longer than 2048 bytes";
            return -1;
        }
        memcpy(p->line + p->line_len, data + i, n);
        p->line_len += n;
        i += n;
        if (!nl)
            break;
        size_t ll = p->line_len;
        p->line_len = 0;
        if (ll < 2 || p->line[ll - 2] != '\r') {
            p->err = "reply line not ended by CRLF";
            return -1;
        }
        int rc = line_done(p, p->line, ll - 2, r);
        if (rc < 0)
            return -1;
        if (rc == 1) {
            *used = i;
            return 1;
        }
    }
    *used = i;
    return 0;
}
