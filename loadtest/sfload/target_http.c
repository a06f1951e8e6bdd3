/* HTTP target: pre-built requests per target and path (paths round-robin per connection; the
 * requests of different targets differ only in Host), responses parsed by httpresp, status
 * classes counted, /id and /ids bodies verified with --verify-ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/httpresp.h"
#include "target.h"

#define MAX_BODY_FILE (64u << 20)

typedef struct http_path {
    char *req[SL_MAX_TARGETS]; /* the whole request, headers and body, per target */
    size_t req_len[SL_MAX_TARGETS];
    bool verify;    /* an ID route: /id, /ids, or a sequence's /seq/{name}, /seqs/{name} */
    uint32_t count; /* /ids?count=N: IDs expected per response (0: unchecked) */
    ids_enc enc;
} http_path;

typedef struct http_global {
    http_path paths[SL_MAX_PATHS];
    unsigned npaths;
    bool head, close_mode, verify, tolerate_faults;
    unsigned ntargets;
    size_t max_body;
} http_global;

typedef struct http_conn {
    hresp_parser p;
    sl_conn *c;
    const http_global *g;
    verify_stream vs;
    unsigned next_path;
    bool close_after; /* the response just completed ends the connection */
    int fail_kind;    /* an sl_err found by the response callback, or -1 */
    bool have_result; /* --close: the outcome waits for the server's close */
    int result;
} http_conn;

static int classify(const http_global *g, int status)
{
    if (status == 503 && g->tolerate_faults)
        return SL_OUTCOME_REFUSED;
    if (status >= 200 && status < 300)
        return SL_OK;
    if (status >= 300 && status < 400)
        return ERR_3XX;
    if (status >= 400 && status < 500)
        return ERR_4XX;
    if (status >= 500 && status < 600)
        return ERR_5XX;
    return ERR_PARSE;
}

static void verify_body(http_conn *h, const sl_slot *s, const hresp *r)
{
    const http_path *hp = &h->g->paths[s->kind];
    verifier *v = sl_conn_verifier(h->c);
    if (!hp->verify || !v)
        return;
    uint64_t before = v->ids;
    h->vs.recv_ms = sl_conn_now_ms(h->c);
    if (r->body_truncated)
        verifier_malformed(v, &h->vs, "body larger than --max-body");
    else
        verifier_body(v, &h->vs, r->body, r->body_len, hp->enc, hp->count);
    sl_conn_stats(h->c)->target[sl_conn_target(h->c)].ids += v->ids - before;
}

static int on_response(void *ud, const hresp *r)
{
    http_conn *h = ud;
    sl_slot *s = sl_conn_pending(h->c);
    if (!s) {
        h->fail_kind = ERR_PARSE; /* a response nobody asked for */
        return 1;
    }
    int outcome = classify(h->g, r->status);
    if (r->status == 503 && s->measured)
        sl_conn_stats(h->c)->target[sl_conn_target(h->c)].status_503++;
    if (h->g->verify && outcome == SL_OK)
        verify_body(h, s, r);
    if (h->g->close_mode && !r->keep_alive) { /* complete when the server closes */
        h->have_result = true;
        h->result = outcome;
        return 0;
    }
    sl_conn_complete(h->c, outcome);
    if (!r->keep_alive || h->g->close_mode) {
        h->close_after = true;
        return 1;
    }
    return 0;
}

static int conn_init(sl_conn *c, void *st)
{
    http_conn *h = st;
    const http_global *g = sl_conn_global(c);
    h->c = c;
    h->g = g;
    h->next_path = sl_conn_id(c) % g->npaths; /* spread the paths over the connections */
    h->fail_kind = -1;
    h->vs.conn = sl_conn_id(c);
    h->vs.target = sl_conn_target(c);
    h->vs.fresh = true;
    hresp_init(&h->p, g->head, g->verify, g->max_body, on_response, h);
    return 0;
}

static void conn_free(sl_conn *c, void *st)
{
    (void)c;
    hresp_free(&((http_conn *)st)->p);
}

static void conn_reset(sl_conn *c, void *st)
{
    http_conn *h = st;
    hresp_reset(&h->p);
    h->vs.have_last = false;
    h->vs.fresh = true;
    h->vs.conn = sl_conn_id(c);
    h->close_after = false;
    h->have_result = false;
    h->fail_kind = -1;
}

static void prepare(sl_conn *c, void *st, sl_slot *s)
{
    http_conn *h = st;
    unsigned i = h->next_path;
    h->next_path = i + 1 == h->g->npaths ? 0 : i + 1;
    s->kind = i;
    const http_path *hp = &h->g->paths[i];
    unsigned t = sl_conn_target(c);
    s->bufs[0] = uv_buf_init(hp->req[t], (unsigned)hp->req_len[t]);
    s->nbufs = 1;
}

static int on_data(sl_conn *c, void *st, const char *p, size_t n)
{
    (void)c;
    http_conn *h = st;
    while (n) {
        size_t used = 0;
        int rc = hresp_feed(&h->p, p, n, &used);
        if (rc == HRESP_OK)
            return SL_CONTINUE;
        if (rc == HRESP_ERROR)
            return SL_FAIL(ERR_PARSE);
        if (h->fail_kind >= 0)
            return SL_FAIL(h->fail_kind);
        if (h->close_after)
            return SL_CLOSE;
        p += used;
        n -= used;
    }
    return SL_CONTINUE;
}

static int on_eof(sl_conn *c, void *st)
{
    http_conn *h = st;
    int rc = hresp_eof(&h->p);
    if (rc == HRESP_ERROR)
        return SL_FAIL(ERR_READ); /* closed inside a response */
    if (h->fail_kind >= 0)
        return SL_FAIL(h->fail_kind);
    if (h->have_result) {
        h->have_result = false;
        sl_conn_complete(c, h->result);
    }
    return SL_CLOSE;
}

/* True for /seq/{name} and /seqs/{name} (segment mode, docs/sequences.md): their bodies have the
 * shape of /id's and /ids' ({"id":N}, {"ids":[...]}, or text), numbers unique per namespace and
 * strictly increasing per node, so the same checks apply (one namespace per run: the duplicate
 * check spans every path). */
static bool seq_route(const char *path, size_t plen)
{
    size_t pre = plen > 5 && memcmp(path, "/seq/", 5) == 0    ? 5
                 : plen > 6 && memcmp(path, "/seqs/", 6) == 0 ? 6
                                                              : 0;
    return pre && memchr(path + pre, '/', plen - pre) == NULL;
}

/* An ID route (/id, /ids, /seq/{name}, /seqs/{name}), with ?count= and ?encoding= read from the
 * query. -1 on an encoding sfload cannot verify. */
static int analyse_path(const char *path, http_path *hp, char *err, size_t errlen)
{
    const char *q = strchr(path, '?');
    size_t plen = q ? (size_t)(q - path) : strlen(path);
    hp->verify = (plen == 3 && memcmp(path, "/id", 3) == 0) ||
                 (plen == 4 && memcmp(path, "/ids", 4) == 0) || seq_route(path, plen);
    hp->enc = IDS_DEC;
    hp->count = 0;
    if (!hp->verify || !q)
        return 0;
    for (const char *p = q + 1; *p;) {
        size_t len = strcspn(p, "&#");
        if (len > 6 && memcmp(p, "count=", 6) == 0) {
            uint64_t v;
            if (ids_parse_one(p + 6, len - 6, IDS_DEC, &v) == 0 && v <= UINT32_MAX)
                hp->count = (uint32_t)v;
        } else if (len >= 9 && memcmp(p, "encoding=", 9) == 0) {
            if (len == 12 && memcmp(p + 9, "dec", 3) == 0) {
                hp->enc = IDS_DEC;
            } else if (len == 12 && memcmp(p + 9, "hex", 3) == 0) {
                hp->enc = IDS_HEX;
            } else {
                snprintf(err, errlen,
                         "--verify-ids reads decimal and hex IDs only; %s asks for %.*s", path,
                         (int)(len - 9), p + 9);
                return -1;
            }
        }
        p += len;
        if (*p == '&')
            p++;
        else
            break;
    }
    return 0;
}

static bool has_header(const sl_opts *o, const char *name)
{
    size_t n = strlen(name);
    for (unsigned i = 0; i < o->nheaders; i++)
        if (strncasecmp(o->headers[i], name, n) == 0 && o->headers[i][n] == ':')
            return true;
    return false;
}

static char *build_request(const sl_opts *o, const sl_addr *to, const char *path, const char *body,
                           size_t blen, bool have_body, size_t *len)
{
    size_t cap = 1024 + strlen(path) + strlen(to->host) + blen;
    for (unsigned i = 0; i < o->nheaders; i++)
        cap += strlen(o->headers[i]) + 2;
    char *r = malloc(cap);
    if (!r)
        return NULL;
    int n = snprintf(r, cap, "%s %s HTTP/1.%c\r\n", o->method, path, o->close_mode ? '0' : '1');
    if (!has_header(o, "Host")) {
        bool v6 = strchr(to->host, ':') != NULL;
        n += snprintf(r + n, cap - (size_t)n, "Host: %s%s%s", v6 ? "[" : "", to->host,
                      v6 ? "]" : "");
        n += to->port == 80 ? snprintf(r + n, cap - (size_t)n, "\r\n")
                            : snprintf(r + n, cap - (size_t)n, ":%u\r\n", to->port);
    }
    if (o->webbench && !has_header(o, "User-Agent"))
        n += snprintf(r + n, cap - (size_t)n, "User-Agent: WebBench 1.5\r\n");
    for (unsigned i = 0; i < o->nheaders; i++)
        n += snprintf(r + n, cap - (size_t)n, "%s\r\n", o->headers[i]);
    if (have_body && !has_header(o, "Content-Type"))
        n += snprintf(r + n, cap - (size_t)n, "Content-Type: %s\r\n",
                      o->content_type ? o->content_type : "application/octet-stream");
    if (have_body || strcmp(o->method, "POST") == 0 || strcmp(o->method, "PUT") == 0 ||
        strcmp(o->method, "PATCH") == 0)
        n += snprintf(r + n, cap - (size_t)n, "Content-Length: %zu\r\n", blen);
    n += snprintf(r + n, cap - (size_t)n, "\r\n");
    if (blen)
        memcpy(r + n, body, blen);
    *len = (size_t)n + blen;
    return r;
}

static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open --body-file %s", path);
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            char *b = cap <= 2 * (size_t)MAX_BODY_FILE ? realloc(buf, cap) : NULL;
            if (!b)
                break;
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0 || n > MAX_BODY_FILE)
            break;
    }
    bool bad = ferror(f) || n > MAX_BODY_FILE || !buf;
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "cannot read --body-file %s (at most 64 MiB)", path);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void release(sl_target *t)
{
    http_global *g = (http_global *)t->global;
    if (!g)
        return;
    for (unsigned i = 0; i < g->npaths; i++)
        for (unsigned k = 0; k < g->ntargets; k++)
            free(g->paths[i].req[k]);
    free(g);
    t->global = NULL;
}

int target_http_setup(const sl_opts *o, sl_target *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    http_global *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    t->global = g;
    t->release = release;
    g->head = strcmp(o->method, "HEAD") == 0;
    g->close_mode = o->close_mode;
    g->verify = o->verify;
    g->tolerate_faults = o->tolerate_faults;
    g->ntargets = o->ntargets;
    g->max_body = o->max_body;
    char *body = NULL;
    size_t blen = 0;
    if (o->body_file && !(body = read_file(o->body_file, &blen, err, errlen))) {
        release(t);
        return -1;
    }
    bool any_id = false;
    for (unsigned i = 0; i < o->npaths; i++) {
        http_path *hp = &g->paths[g->npaths++];
        if (analyse_path(o->paths[i], hp, err, errlen) != 0) {
            free(body);
            release(t);
            return -1;
        }
        any_id |= hp->verify;
        for (unsigned k = 0; k < o->ntargets; k++) {
            hp->req[k] = build_request(o, &o->targets[k], o->paths[i], body, blen,
                                       o->body_file != NULL, &hp->req_len[k]);
            if (!hp->req[k]) {
                snprintf(err, errlen, "out of memory");
                free(body);
                release(t);
                return -1;
            }
        }
    }
    free(body);
    if (o->verify && !any_id) {
        snprintf(err, errlen, "--verify-ids needs an ID route among the paths (/id, /ids?count=N, "
                 "/seq/NAME, /seqs/NAME?count=N)");
        release(t);
        return -1;
    }
    t->name = "http";
    t->conn_bytes = sizeof(http_conn);
    t->conn_init = conn_init;
    t->conn_free = conn_free;
    t->conn_reset = conn_reset;
    t->prepare = prepare;
    t->on_data = on_data;
    t->on_eof = on_eof;
    return 0;
}
