#include "proto/http.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "llhttp.h"
#include "obs/log.h"
#include "util/budget.h"
#include "util/counter.h"
#include "util/fmt.h"
#include "util/perloop.h"
#include "util/version.h"

#define SERVER_HEADER     "Server: snowflaked/" SF_VERSION "\r\n"
#define EXTRA_HEADERS_MAX 1024

/* From 5 us: a keep-alive /id is answered in 10..30 us, and histogram_quantile() can say no
 * more than "below the lowest bound" about requests that all fall in the lowest bucket. */
const double http_latency_bounds[HTTP_LATENCY_BUCKETS] = {
    0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
    0.005,    0.01,    0.025,    0.05,    0.1,    0.25,    0.5,    1.0};

typedef struct loop_metrics {
    _Atomic uint64_t requests[HTTP_MAX_ROUTES + 1][HTTP_S_COUNT];
    _Atomic uint64_t latency[HTTP_MAX_ROUTES + 1][HTTP_LATENCY_BUCKETS + 1];
    _Atomic uint64_t latency_sum_ns[HTTP_MAX_ROUTES + 1];
} loop_metrics;

struct http_loop {
    pool heads; /* request head buffers, max_header_bytes each */
    time_t date_sec;
    char date_line[48]; /* "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n" */
    size_t date_len;
    char *scratch;
    loop_metrics m;
};

struct http_server {
    http_limits limits;
    net_server *net;
    http_route routes[HTTP_MAX_ROUTES];
    unsigned nroutes;
    http_guard guard; /* checks routes with an auth attribute */
    void *guard_ctx;
    byte_budget *inflight; /* bodies being buffered take from it; NULL: max_body_bytes only */
    perloop loops; /* http_loop, one per net loop */
};

static http_loop *loop_of(const http_server *s, unsigned i)
{
    return perloop_at(&s->loops, i);
}

/* Per-connection state: the parser and the request being received. */
typedef struct http_conn {
    llhttp_t parser;
    conn *c;
    http_server *srv;
    http_loop *hl;
    char *head;          /* pooled while a request is being received */
    uint32_t head_len;   /* bytes stored in head */
    uint32_t head_bytes; /* bytes of the request head seen (the 431 limit) */
    uint32_t url_len;
    uint32_t field_off; /* current header name, stored at head + field_off */
    int8_t cur;         /* HTTP_H_* of the header whose value is arriving, or -1 */
    bool value_started;
    bool in_message;
    bool keep_alive;
    uint32_t hv_off[HTTP_H_COUNT], hv_len[HTTP_H_COUNT];
    uint8_t hv_set; /* bit per HTTP_H_* */
    uint16_t nheaders;
    int16_t route; /* index, nroutes = no route, -1 = not routed yet */
    uint16_t err_status;
    const char *err_msg;
    obuf body;
    uint64_t body_len;
    uint64_t held;          /* bytes of srv->inflight taken for this request's body (received) */
    bool admitted;          /* routed, allowed and within the budget at its head (with a body) */
    uint32_t handled;       /* requests answered during this read */
    const char *read_start; /* the buffer llhttp is running over, for obs-fold detection */
    char prev_byte;         /* last non-blank byte of the previous read */
    bool head_only;         /* the current message is HEAD (known after its headers) */
    bool te_value;          /* a Transfer-Encoding value is arriving */
    bool te_other;          /* a Transfer-Encoding other than exactly "chunked" was seen */
    uint8_t te_matched;     /* bytes of "chunked" matched so far in the current value */
    uint64_t start_ns;
    uint64_t sent_body_len; /* the response's body bytes, for the access log */
    bool deferred;          /* dreq is owed a response (http_defer) */
    bool close_aged;        /* the owed response ends the connection for its age */
    bool client_keeps;      /* the client asked to keep the connection (for the deferred close) */
    http_defer_cancel defer_cancel;
    void *defer_arg;
    http_request dreq; /* the deferred request, as its handler saw it */
    bool remote_known;      /* remote holds the client's address (access log only) */
    char remote[56];        /* "[ffff:...:ffff]:65535", or "" when the socket does not say */
} http_conn;

static const llhttp_settings_t settings;

/* ---- small helpers ------------------------------------------------------------------------ */

static void refresh_date(http_loop *hl)
{
    time_t now = time(NULL);
    if (now == hl->date_sec)
        return; /* formatted at most once per second per loop */
    struct tm tm;
    gmtime_r(&now, &tm);
    hl->date_len =
        strftime(hl->date_line, sizeof hl->date_line, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
    hl->date_sec = now;
}

const char *http_status_text(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    case 507: return "Insufficient Storage";
    default: return "Unknown";
    }
}

static http_status_slot status_slot(int s)
{
    switch (s) {
    case 200: return HTTP_S_200;
    case 201: return HTTP_S_201;
    case 204: return HTTP_S_204;
    case 304: return HTTP_S_304;
    case 400: return HTTP_S_400;
    case 401: return HTTP_S_401;
    case 403: return HTTP_S_403;
    case 404: return HTTP_S_404;
    case 405: return HTTP_S_405;
    case 408: return HTTP_S_408;
    case 409: return HTTP_S_409;
    case 412: return HTTP_S_412;
    case 413: return HTTP_S_413;
    case 414: return HTTP_S_414;
    case 417: return HTTP_S_417;
    case 431: return HTTP_S_431;
    case 500: return HTTP_S_500;
    case 503: return HTTP_S_503;
    case 505: return HTTP_S_505;
    case 507: return HTTP_S_507;
    default:
        return s < 200   ? HTTP_S_1XX
               : s < 300 ? HTTP_S_2XX
               : s < 400 ? HTTP_S_3XX
               : s < 500 ? HTTP_S_4XX
                         : HTTP_S_5XX;
    }
}

const char *http_status_slot_label(http_status_slot s)
{
    static const char *const labels[HTTP_S_COUNT] = {
        "1xx", "200", "201", "204", "2xx", "304", "3xx", "400", "401", "403", "404", "405", "408",
        "409", "412", "413", "414", "417", "431", "4xx", "500", "503", "505", "507", "5xx"};
    return (unsigned)s < HTTP_S_COUNT ? labels[s] : "?";
}

/* The client's address for the access log: one getpeername per connection, on its first
 * logged request (nothing when the access log is off). "" when the socket does not say. */
static const char *remote_of(http_conn *h)
{
    if (!h->remote_known) {
        h->remote_known = true;
        conn_sock_addr_text(conn_fd(h->c), true, h->remote, sizeof h->remote);
    }
    return h->remote;
}

static void record(http_conn *h, int status)
{
    unsigned route = h->route < 0 ? h->srv->nroutes : (unsigned)h->route;
    loop_metrics *m = &h->hl->m;
    counter_add(&m->requests[route][status_slot(status)], 1);
    uint64_t ns = uv_hrtime() - h->start_ns;
    double s = (double)ns / 1e9;
    unsigned b = 0;
    while (b < HTTP_LATENCY_BUCKETS && s > http_latency_bounds[b])
        b++;
    counter_add(&m->latency[route][b], 1);
    counter_add(&m->latency_sum_ns[route], ns);
    if (!log_access_enabled())
        return;
    log_access_entry e = {.method = llhttp_method_name((llhttp_method_t)h->parser.method),
                          .target = h->head,
                          .target_len = h->url_len,
                          .status = status,
                          .duration_ns = ns,
                          .bytes = h->sent_body_len,
                          .version_major = h->parser.http_major,
                          .version_minor = h->parser.http_minor};
    if (log_current_format() == LOG_FORMAT_JSON) /* the text line has no address */
        e.remote = remote_of(h);
    log_access_http(&e);
}

/* ---- responses ---------------------------------------------------------------------------- */

static void respond(http_conn *h, bool head_only, int status, const char *ctype, const char *extra,
                    const void *body, size_t len, obuf *chunks)
{
    conn *c = h->c;
    h->sent_body_len = 0;
    size_t extra_len = extra ? strlen(extra) : 0;
    if (extra_len > EXTRA_HEADERS_MAX)
        extra_len = 0; /* a handler bug; never a buffer overrun */
    refresh_date(h->hl);
    char *p = conn_reserve(c, 512 + extra_len + h->hl->date_len);
    if (!p)
        return;
    char *start = p;
    memcpy(p, "HTTP/1.1 ", 9);
    p += 9;
    p += fmt_u64(p, (uint64_t)status);
    *p++ = ' ';
    const char *text = http_status_text(status);
    size_t tl = strlen(text);
    memcpy(p, text, tl);
    p += tl;
    memcpy(p, "\r\n" SERVER_HEADER, 2 + sizeof SERVER_HEADER - 1);
    p += 2 + sizeof SERVER_HEADER - 1;
    memcpy(p, h->hl->date_line, h->hl->date_len);
    p += h->hl->date_len;
    if (ctype) {
        size_t cl = strlen(ctype);
        if (cl > HTTP_CTYPE_MAX)
            cl = HTTP_CTYPE_MAX;
        memcpy(p, "Content-Type: ", 14);
        p += 14;
        memcpy(p, ctype, cl);
        p += cl;
        *p++ = '\r';
        *p++ = '\n';
    }
    if (status >= 200 && status != 204 && status != 304) {
        memcpy(p, "Content-Length: ", 16);
        p += 16;
        p += fmt_u64(p, len);
        *p++ = '\r';
        *p++ = '\n';
    }
    if (!h->keep_alive) {
        memcpy(p, "Connection: close\r\n", 19);
        p += 19;
    } else if (h->parser.http_major == 1 && h->parser.http_minor == 0) {
        memcpy(p, "Connection: keep-alive\r\n", 24); /* HTTP/1.0 asked for it */
        p += 24;
    }
    if (extra_len) {
        memcpy(p, extra, extra_len);
        p += extra_len;
    }
    *p++ = '\r';
    *p++ = '\n';
    conn_commit(c, (size_t)(p - start));
    if (len && !head_only && status != 204 && status != 304) {
        h->sent_body_len = len;
        if (chunks)
            obuf_splice(&c->out, chunks);
        else
            conn_write(c, body, len);
    }
}

static void end_message(http_conn *h);

/* The deferred response is queued: the request ends as on_message_complete would have ended it,
 * then the connection goes on (its pipelined input gets a turn, or it ends). */
static void finish_deferred(http_conn *h)
{
    conn *c = h->c;
    h->deferred = false;
    record(h, h->dreq.status);
    end_message(h);
    if (!h->keep_alive) {
        if (h->close_aged)
            conn_close_aged(c);
        else if (h->client_keeps)
            conn_close_after_flush(c);
        else
            conn_end_after_flush(c);
    } else {
        conn_set_timeout(c, CONN_TIMEOUT_IDLE);
    }
    conn_release(c);
}

http_request *http_defer(http_request *r, http_defer_cancel cancel, void *arg)
{
    http_conn *h = conn_state(r->conn);
    if (h->deferred || r->status != 0 || conn_closing(r->conn) || !cancel)
        return NULL;
    h->dreq = *r;
    h->deferred = true;
    h->defer_cancel = cancel;
    h->defer_arg = arg;
    return &h->dreq;
}

/* The answer to the connection's deferred request (r == &h->dreq). A drain begun since it was
 * deferred makes it the connection's last. Out of line: the immediate answer's path (GET /id)
 * pays one load and one branch for the deferral. */
static __attribute__((noinline, cold)) void respond_deferred(http_conn *h, http_request *r,
                                                             int status, const char *ctype,
                                                             const char *extra, const void *body,
                                                             size_t len, obuf *chunks)
{
    if (h->keep_alive && conn_draining(h->c))
        h->keep_alive = false;
    r->status = status;
    respond(h, r->head_only, status, ctype, extra, body, len, chunks);
    finish_deferred(h);
}

void http_respond(http_request *r, int status, const char *ctype, const char *extra,
                  const void *body, size_t len)
{
    http_conn *h = conn_state(r->conn);
    if (__builtin_expect(h->deferred, 0) && r == &h->dreq) {
        respond_deferred(h, r, status, ctype, extra, body, len, NULL);
        return;
    }
    r->status = status;
    respond(h, r->head_only, status, ctype, extra, body, len, NULL);
}

void http_respond_request_body(http_request *r, int status, const char *ctype, const char *extra)
{
    http_conn *h = conn_state(r->conn);
    size_t len = r->body ? r->body_len : 0;
    if (__builtin_expect(h->deferred, 0) && r == &h->dreq) {
        respond_deferred(h, r, status, ctype, extra, NULL, len, r->body);
        return;
    }
    r->status = status;
    respond(h, r->head_only, status, ctype, extra, NULL, len, r->body);
}

/* {"error":"<message>"} with the message JSON-escaped. */
static size_t error_json(char *out, size_t cap, const char *msg)
{
    size_t n = 0;
    const char *pre = "{\"error\":\"";
    memcpy(out, pre, 10);
    n = 10;
    for (const unsigned char *s = (const unsigned char *)msg; *s && n + 8 < cap; s++) {
        if (*s == '"' || *s == '\\') {
            out[n++] = '\\';
            out[n++] = (char)*s;
        } else if (*s < 0x20 || *s == 0x7f) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", *s);
        } else {
            out[n++] = (char)*s;
        }
    }
    memcpy(out + n, "\"}", 2);
    return n + 2;
}

void http_respond_error(http_request *r, int status, const char *msg, const char *extra)
{
    char body[512];
    size_t n = error_json(body, sizeof body, msg);
    http_respond(r, status, "application/json", extra, body, n);
}

char *http_scratch(http_request *r, size_t *size)
{
    *size = r->server->limits.scratch_bytes;
    return r->loop->scratch;
}

/* ---- query strings ------------------------------------------------------------------------ */

bool http_query_param(const http_request *r, const char *name, http_str *value)
{
    size_t nl = strlen(name);
    if (!r->query.p) /* no query string: NULL + 0 would be undefined (found by fuzzing) */
        return false;
    const char *p = r->query.p, *end = r->query.p + r->query.len;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *key_end = eq ? eq : stop;
        if ((size_t)(key_end - p) == nl && memcmp(p, name, nl) == 0) {
            value->p = eq ? eq + 1 : stop;
            value->len = (uint32_t)(eq ? stop - eq - 1 : 0);
            return true;
        }
        p = amp ? amp + 1 : NULL;
    }
    return false;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

long http_percent_decode(const char *in, size_t len, char *out, size_t outcap)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (n == outcap)
            return -1;
        if (in[i] != '%') {
            out[n++] = in[i];
            continue;
        }
        if (i + 2 >= len)
            return -1;
        int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
        if (hi < 0 || lo < 0)
            return -1;
        out[n++] = (char)(hi << 4 | lo);
        i += 2;
    }
    return (long)n;
}

/* ---- parser callbacks --------------------------------------------------------------------- */

static http_conn *hc(llhttp_t *p)
{
    return p->data;
}

/* Stops the parser with a response status to send before closing. llhttp turns -1 into an error
 * code that depends on the callback (HPE_USER, HPE_CB_HEADERS_COMPLETE, ...); err_status is what
 * http_data looks at. */
static int fail(http_conn *h, int status, const char *msg)
{
    h->err_status = (uint16_t)status;
    h->err_msg = msg;
    return -1;
}

static int store(http_conn *h, const char *at, size_t len)
{
    if (h->head_len + len > h->srv->limits.max_header_bytes)
        return fail(h, 431, "request header section too large");
    memcpy(h->head + h->head_len, at, len);
    h->head_len += (uint32_t)len;
    return 0;
}

static int count_head(http_conn *h, size_t len)
{
    h->head_bytes += (uint32_t)len;
    if (h->head_bytes > h->srv->limits.max_header_bytes)
        return fail(h, 431, "request header section too large");
    return 0;
}

static int on_message_begin(llhttp_t *p)
{
    http_conn *h = hc(p);
    h->head = pool_get(&h->hl->heads);
    if (!h->head)
        return fail(h, 503, "out of memory");
    h->in_message = true;
    h->head_len = h->head_bytes = h->url_len = 0;
    h->hv_set = 0;
    h->nheaders = 0;
    h->cur = -2;
    h->route = -1;
    h->body_len = 0;
    h->head_only = false;
    h->te_value = h->te_other = false;
    h->te_matched = 0;
    h->start_ns = uv_hrtime();
    conn_set_timeout(h->c, CONN_TIMEOUT_HEADER); /* the whole head must arrive in time */
    return count_head(h, 16);                    /* method, version, line ends */
}

static int on_url(llhttp_t *p, const char *at, size_t len)
{
    http_conn *h = hc(p);
    h->url_len += (uint32_t)len;
    if (h->url_len > h->srv->limits.max_url_bytes)
        return fail(h, 414, "request URL too long");
    int rc = count_head(h, len);
    return rc ? rc : store(h, at, len);
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    http_conn *h = hc(p);
    if (h->cur == -2) { /* first span of a new name */
        h->field_off = h->head_len;
        h->cur = -1;
    }
    int rc = count_head(h, len);
    return rc ? rc : store(h, at, len);
}

static int8_t header_index(const char *name, size_t len)
{
    static const char *const names[HTTP_H_COUNT] = {"accept",        "content-type",  "if-match",
                                                    "if-none-match", "authorization", "expect"};
    for (int8_t i = 0; i < HTTP_H_COUNT; i++)
        if (strlen(names[i]) == len && strncasecmp(name, names[i], len) == 0)
            return i;
    return -1;
}

#define TE_NAME    "transfer-encoding"
#define TE_CHUNKED "chunked"

static int on_header_field_complete(llhttp_t *p)
{
    http_conn *h = hc(p);
    if (++h->nheaders > h->srv->limits.max_headers)
        return fail(h, 431, "too many request headers");
    /* llhttp 8 accepts an empty field name (": value"); a field name is a token (RFC 9110 5.1).
     * Without a span on_header_field never ran for it (cur is still -2). */
    if (h->cur == -2 || h->head_len == h->field_off)
        return fail(h, 400, "empty header field name");
    size_t name_len = h->head_len - h->field_off;
    h->te_value = name_len == sizeof TE_NAME - 1 &&
                  strncasecmp(h->head + h->field_off, TE_NAME, name_len) == 0;
    h->te_matched = 0;
    int8_t idx = header_index(h->head + h->field_off, name_len);
    h->head_len = h->field_off; /* the name is not kept */
    h->cur = idx;
    h->value_started = false;
    if (idx >= 0) {
        if (h->hv_set & (1u << idx))
            h->cur = -1; /* first occurrence wins */
        else
            h->hv_off[idx] = h->head_len;
    }
    return count_head(h, 4); /* ": " and the line end */
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
    http_conn *h = hc(p);
    /* obs-fold (RFC 9112 5.2): llhttp 8 accepts a continuation line and hands it over as more
     * value. Such a span starts right after a line feed; a span split by a read boundary starts
     * after a value byte instead. */
    const char *q = at; /* llhttp skips the whitespace that starts a value: look behind it */
    while (q > h->read_start && (q[-1] == ' ' || q[-1] == '\t'))
        q--;
    char before = q > h->read_start ? q[-1] : h->prev_byte;
    if (len && (before == '\n' || before == '\r'))
        return fail(h, 400, "obsolete line folding is not allowed");
    int rc = count_head(h, len);
    if (rc)
        return rc;
    h->value_started = true;
    /* Transfer-Encoding: only "chunked" (any case, with optional whitespace around it) is
     * understood. llhttp 8 frames "gzip, chunked" or "identity, chunked" as chunked and hands
     * over the still-coded body; RFC 9112 6.1 and 7: a coding we do not implement is a 501.
     * Checked byte by byte: a value may arrive in several spans. */
    for (size_t i = 0; h->te_value && i < len && !h->te_other; i++) {
        char ch = at[i];
        if (h->te_matched < sizeof TE_CHUNKED - 1 && (ch | 0x20) == TE_CHUNKED[h->te_matched])
            h->te_matched++;
        else if (!((ch == ' ' || ch == '\t') &&
                   (h->te_matched == 0 || h->te_matched == sizeof TE_CHUNKED - 1)))
            h->te_other = true;
    }
    return h->cur >= 0 ? store(h, at, len) : 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    http_conn *h = hc(p);
    if (h->te_value && h->te_matched != sizeof TE_CHUNKED - 1)
        h->te_other = true; /* "chunk", an empty value, ... */
    h->te_value = false;
    if (h->cur >= 0) {
        h->hv_len[h->cur] = h->head_len - h->hv_off[h->cur];
        h->hv_set |= (uint8_t)(1u << h->cur);
    }
    h->cur = -2;
    return 0;
}

static void route(http_conn *h)
{
    const char *url = h->head;
    const char *q = memchr(url, '?', h->url_len);
    size_t plen = q ? (size_t)(q - url) : h->url_len;
    h->route = (int16_t)h->srv->nroutes;
    for (unsigned i = 0; i < h->srv->nroutes; i++) {
        const http_route *r = &h->srv->routes[i];
        size_t rl = strlen(r->path);
        if (r->prefix ? plen > rl && memcmp(url, r->path, rl) == 0
                      : plen == rl && memcmp(url, r->path, rl) == 0) {
            h->route = (int16_t)i;
            return;
        }
    }
}

static bool header_is(const http_conn *h, int idx, const char *value)
{
    size_t vl = strlen(value);
    return (h->hv_set & (1u << idx)) && h->hv_len[idx] == vl &&
           strncasecmp(h->head + h->hv_off[idx], value, vl) == 0;
}

static void end_message(http_conn *h)
{
    if (h->head) {
        pool_put(&h->hl->heads, h->head);
        h->head = NULL;
    }
    obuf_reset(&h->body);
    if (h->held) {
        budget_give(h->srv->inflight, h->held);
        h->held = 0;
    }
    h->admitted = false;
    h->in_message = false;
    h->head_only = false;
    h->start_ns = 0;
}

/* The request as handlers see it, from the head received (valid until end_message). Inlined:
 * it is on every request's path (dispatch), and a call costs GET /id a measurable share. */
static inline __attribute__((always_inline)) void request_of(http_conn *h, http_request *r)
{
    *r = (http_request){.conn = h->c,
                        .server = h->srv,
                        .loop = h->hl,
                        .loop_index = conn_loop(h->c)->index,
                        .method = h->parser.method,
                        .version_major = h->parser.http_major,
                        .version_minor = h->parser.http_minor,
                        .body = &h->body,
                        .body_len = h->body_len,
                        .head_only = h->head_only};
    const char *q = memchr(h->head, '?', h->url_len);
    r->path = (http_str){h->head, q ? (uint32_t)(q - h->head) : h->url_len};
    if (q)
        r->query = (http_str){q + 1, (uint32_t)(h->head + h->url_len - q - 1)};
    for (int i = 0; i < HTTP_H_COUNT; i++)
        if (h->hv_set & (1u << i))
            r->headers[i] = (http_str){h->head + h->hv_off[i], h->hv_len[i]};
}

/* The route's access attribute, checked once per request before its handler: false when the
 * guard refused the request (and answered it). */
static inline __attribute__((always_inline)) bool authorized(const http_server *s,
                                                             const http_route *rt, http_request *r)
{
    if (rt->auth == HTTP_AUTH_NONE || !s->guard)
        return true;
    bool write = rt->auth == HTTP_AUTH_WRITE || (rt->auth == HTTP_AUTH_BY_METHOD &&
                                                 r->method != HTTP_GET && r->method != HTTP_HEAD);
    return s->guard(r, write, s->guard_ctx);
}

/* What every route answers without looking at the body: 404 without a route, 405 for a method
 * it does not take, the guard's refusal (401). False when r was refused (and answered). Inlined
 * for dispatch, as request_of. */
static inline __attribute__((always_inline)) bool admit(http_conn *h, http_request *r)
{
    if ((unsigned)h->route >= h->srv->nroutes) {
        http_respond_error(r, 404, "not found", NULL);
        return false;
    }
    const http_route *rt = &h->srv->routes[h->route];
    uint8_t m = r->method == HTTP_HEAD ? HTTP_GET : r->method;
    if (!(rt->methods & HTTP_M(m))) {
        char allow[128] = "Allow: ";
        size_t n = 7;
        for (unsigned k = 0; !rt->allow && k < 32 && n < sizeof allow - 24; k++) {
            if (!(rt->methods & HTTP_M(k)))
                continue;
            n += (size_t)snprintf(allow + n, sizeof allow - n, "%s%s", n > 7 ? ", " : "",
                                  llhttp_method_name((llhttp_method_t)k));
            if (k == HTTP_GET)
                n += (size_t)snprintf(allow + n, sizeof allow - n, ", HEAD");
        }
        if (rt->allow) /* the route's methods differ by path: it names this path's */
            snprintf(allow + n, sizeof allow - n, "%s\r\n", rt->allow(r->path));
        else
            snprintf(allow + n, sizeof allow - n, "\r\n");
        http_respond_error(r, 405, "method not allowed", allow);
        return false;
    }
    return authorized(h->srv, rt, r);
}

/* n more bytes of body to buffer, from the server's in-flight budget (none: unbounded): taken
 * as they arrive, the request's share being what it already holds (util/budget.h). */
static bool take_inflight(http_conn *h, uint64_t n)
{
    if (!h->srv->inflight)
        return true; /* nothing taken: end_message has nothing to give back */
    if (!budget_take_share(h->srv->inflight, h->held, n))
        return false;
    h->held += n;
    return true;
}

#define BUSY_MSG "too many request bytes in flight (server.max_inflight_bytes); retry later"

/* Ends a request answered before its body was read (or all of it): the connection is closed
 * once the response is out, so the rest of the body is never read, neither buffered nor taken
 * for a request of its own (a client refused before its 100 Continue may never send the body,
 * and discarding by its Content-Length would then swallow its next request). The half-close and
 * drain of conn_close_after_flush (server.linger_ms) discard what still arrives, so the client
 * reads the response rather than a reset. */
static int answered_early(http_conn *h, http_request *r)
{
    record(h, r->status);
    end_message(h);
    conn_close_after_flush(h->c);
    return HPE_PAUSED; /* nothing after the head is read */
}

/* 503 with Retry-After: the body would pass the in-flight budget. */
static int refuse_busy(http_conn *h)
{
    http_request r;
    request_of(h, &r);
    h->keep_alive = false;
    http_respond_error(&r, 503, BUSY_MSG, "Retry-After: 1\r\n");
    return answered_early(h, &r);
}

/* A request with a body is decided at its head, before a byte of the body is read or a 100
 * Continue sent (RFC 9110 10.1.1): its route, method and access (admit), then whether the
 * in-flight budget could hold the Content-Length its route buffers now (budget_admits; nothing
 * is taken: the body takes its bytes as they arrive, on_body, so a head that announces a large
 * body and sends none holds nothing). Refused: answered now, with Connection: close
 * (answered_early). */
static int admit_with_body(http_conn *h, const llhttp_t *p)
{
    http_request r;
    request_of(h, &r);
    h->keep_alive = false; /* a refusal's Connection: close; decided again at message complete */
    if (!admit(h, &r))
        return answered_early(h, &r);
    h->keep_alive = true;
    if (h->srv->inflight && h->srv->routes[h->route].wants_body &&
        (p->flags & F_CONTENT_LENGTH) && !budget_admits(h->srv->inflight, p->content_length))
        return refuse_busy(h);
    h->admitted = true;
    return 0;
}

static int on_headers_complete(llhttp_t *p)
{
    http_conn *h = hc(p);
    h->head_only = p->method == HTTP_HEAD;
    if (p->http_major == 0)
        return fail(h, 400, "HTTP/0.9 requests are not supported");
    /* llhttp 8 also parses "HTTP/2.0" in a request line (not the h2 preface): not HTTP/1.x. */
    if (p->http_major != 1)
        return fail(h, 505, "HTTP version not supported; use HTTP/1.1");
    if ((p->flags & F_TRANSFER_ENCODING) && h->te_other)
        return fail(h, 501, "only Transfer-Encoding: chunked is supported");
    route(h); /* once: dispatch uses h->route */
    bool chunked = (p->flags & F_CHUNKED) != 0;
    bool has_body = chunked || ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0);
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > h->srv->limits.max_body_bytes)
        return fail(h, 413, "request body too large");
    bool expect = (h->hv_set & (1u << HTTP_H_EXPECT)) != 0;
    if (expect && !header_is(h, HTTP_H_EXPECT, "100-continue"))
        return fail(h, 417, "only Expect: 100-continue is supported");
    if (!has_body) /* decided at message complete, which follows at once (GET /id's path) */
        return 0;
    int rc = admit_with_body(h, p);
    if (rc)
        return rc;
    if (expect && p->http_minor >= 1)
        conn_write(h->c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    http_conn *h = hc(p);
    h->body_len += len;
    if (h->body_len > h->srv->limits.max_body_bytes)
        return fail(h, 413, "request body too large");
    if (h->route >= 0 && (unsigned)h->route < h->srv->nroutes &&
        h->srv->routes[h->route].wants_body) {
        /* the body takes from the budget as it arrives, whatever its head announced */
        if (h->body_len > h->held && !take_inflight(h, h->body_len - h->held))
            return refuse_busy(h);
        if (obuf_append(&h->body, at, len) != 0)
            return fail(h, 503, "out of memory");
    }
    return 0;
}

static void dispatch(http_conn *h)
{
    http_request r;
    request_of(h, &r);
    if (h->admitted || admit(h, &r)) {
        const http_route *rt = &h->srv->routes[h->route];
        rt->handler(&r, rt->ctx);
        if (__builtin_expect(h->deferred, 0))
            return; /* answered later (http_defer): recorded then */
    }
    if (r.status == 0) /* a handler that did not answer is a bug: still answer */
        http_respond_error(&r, 500, "no response", NULL);
    record(h, r.status);
}

static int on_message_complete(llhttp_t *p)
{
    http_conn *h = hc(p);
    conn *c = h->c;
    c->requests++;
    /* An Upgrade request is answered as plain HTTP; what follows would be another protocol. */
    bool client_keeps = llhttp_should_keep_alive(p) && !p->upgrade;
    bool we_keep = !conn_draining(c) && c->requests < h->srv->limits.max_requests_per_connection;
    /* Past its age (server.max_connection_age_s), the response that starts now is the
     * connection's last, exactly as at max_requests_per_connection: the client reconnects, and
     * its load balancer may pick another replica. */
    bool aged = we_keep && client_keeps && conn_aged(c);
    h->keep_alive = client_keeps && we_keep && !aged;
    dispatch(h);
    if (__builtin_expect(h->deferred, 0)) { /* the handler answers later: nothing after this request is read now */
        h->close_aged = aged;
        h->client_keeps = client_keeps;
        h->handled++;
        conn_hold(c);
        return HPE_PAUSED;
    }
    end_message(h);
    h->handled++;
    if (!h->keep_alive) {
        if (aged)
            conn_close_aged(c); /* the same, counted as an age close */
        else if (client_keeps)
            conn_close_after_flush(c); /* our decision: the client may be sending already */
        else
            conn_end_after_flush(c);
        return HPE_PAUSED; /* nothing after this request is read */
    }
    conn_set_timeout(c, CONN_TIMEOUT_IDLE);
    /* Fairness and backpressure: stop after max_pipeline requests in one read, or when the
     * output is already above the high-water mark; the rest waits for a later turn. */
    if (h->handled >= h->srv->limits.max_pipeline || conn_output_full(c))
        return HPE_PAUSED;
    return 0;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- the protocol ------------------------------------------------------------------------- */

static void send_error_and_close(http_conn *h, int status, const char *msg)
{
    h->keep_alive = false;
    char body[512];
    size_t n = error_json(body, sizeof body, msg);
    if (h->route < 0)
        h->route = (int16_t)h->srv->nroutes;
    if (!h->start_ns)
        h->start_ns = uv_hrtime();
    respond(h, h->head_only, status, "application/json", NULL, body, n, NULL);
    record(h, status);
    end_message(h);
    conn_close_after_flush(h->c);
}

static void http_open(conn *c)
{
    http_conn *h = conn_state(c);
    h->c = c;
    h->srv = net_listener_ctx(c->listener);
    h->hl = loop_of(h->srv, conn_loop(c)->index);
    h->cur = -2;
    h->keep_alive = true;
    obuf_init(&h->body, &conn_loop(c)->chunks);
    llhttp_init(&h->parser, HTTP_REQUEST, &settings);
    h->parser.data = h;
}

static ssize_t http_data(conn *c, const char *data, size_t len)
{
    http_conn *h = conn_state(c);
    h->read_start = data;
    h->handled = 0;
    llhttp_errno_t e = llhttp_execute(&h->parser, data, len);
    size_t used = len;
    if (e == HPE_PAUSED) {
        used = (size_t)(llhttp_get_error_pos(&h->parser) - data);
        llhttp_resume(&h->parser);
        if (!conn_closing(c))
            conn_yield(c);
    } else if (e == HPE_PAUSED_UPGRADE) {
        conn_close_after_flush(c); /* answered as plain HTTP; what follows is another protocol */
    } else if (e == HPE_PAUSED_H2_UPGRADE) {
        send_error_and_close(h, 505, "HTTP/2 is not supported; use HTTP/1.1");
    } else if (e != HPE_OK && h->err_status) {
        send_error_and_close(h, h->err_status, h->err_msg);
    } else if (e != HPE_OK) {
        char msg[160];
        snprintf(msg, sizeof msg, "malformed request: %s", llhttp_get_error_reason(&h->parser));
        send_error_and_close(h, 400, msg);
    }
    /* The last byte that is not blank, for obs-fold detection across reads. */
    for (size_t i = used; i > 0; i--) {
        if (data[i - 1] != ' ' && data[i - 1] != '\t') {
            h->prev_byte = data[i - 1];
            break;
        }
    }
    return (ssize_t)used;
}

static void http_timeout(conn *c, conn_timeout_kind kind)
{
    http_conn *h = conn_state(c);
    if (kind == CONN_TIMEOUT_HEADER && h->in_message)
        send_error_and_close(h, 408, "request not received in time");
}

static void http_close(conn *c)
{
    http_conn *h = conn_state(c);
    if (h->deferred) { /* closed before its answer: its owner forgets it */
        h->deferred = false;
        h->defer_cancel(&h->dreq, h->defer_arg);
    }
    end_message(h);
}

const proto http_proto = {
    .name = "http",
    .state_size = sizeof(http_conn),
    .on_open = http_open,
    .on_data = http_data,
    .on_timeout = http_timeout,
    .on_close = http_close,
};

/* ---- server ------------------------------------------------------------------------------- */

http_server *http_server_new(const http_limits *limits, net_server *net, char *err, size_t errlen)
{
    http_server *s = calloc(1, sizeof *s);
    if (!s || perloop_init(&s->loops, net->nloops, sizeof(http_loop)) != 0) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->limits = *limits;
    if (s->limits.scratch_bytes < HTTP_SCRATCH_MIN)
        s->limits.scratch_bytes = HTTP_SCRATCH_MIN;
    s->net = net;
    for (unsigned i = 0; i < perloop_count(&s->loops); i++) {
        http_loop *hl = loop_of(s, i);
        pool_init(&hl->heads, limits->max_header_bytes, limits->pool_idle_max);
        hl->date_sec = -1;
        hl->scratch = malloc(s->limits.scratch_bytes);
        if (!hl->scratch) {
            http_server_free(s);
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
    }
    return s;
}

void http_server_free(http_server *s)
{
    if (!s)
        return;
    for (unsigned i = 0; i < perloop_count(&s->loops); i++) {
        http_loop *hl = loop_of(s, i);
        pool_drain(&hl->heads);
        free(hl->scratch);
    }
    perloop_free(&s->loops);
    free(s);
}

int http_server_route(http_server *s, const http_route *r)
{
    if (s->nroutes == HTTP_MAX_ROUTES)
        return -1;
    s->routes[s->nroutes++] = *r;
    return 0;
}

void http_server_set_guard(http_server *s, http_guard guard, void *ctx)
{
    s->guard = guard;
    s->guard_ctx = ctx;
}

void http_server_set_budget(http_server *s, byte_budget *inflight)
{
    s->inflight = inflight;
}

net_server *http_server_net(const http_server *s)
{
    return s->net;
}

unsigned http_server_route_count(const http_server *s)
{
    return s->nroutes;
}

const char *http_server_route_name(const http_server *s, unsigned i)
{
    return i < s->nroutes ? s->routes[i].path : "unmatched";
}

void http_server_route_metrics(const http_server *s, unsigned route, http_route_metrics *out)
{
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < perloop_count(&s->loops); i++) {
        const loop_metrics *m = &loop_of(s, i)->m;
        for (int k = 0; k < HTTP_S_COUNT; k++)
            out->requests[k] += counter_get(&m->requests[route][k]);
        for (int k = 0; k <= HTTP_LATENCY_BUCKETS; k++)
            out->latency[k] += counter_get(&m->latency[route][k]);
        out->latency_sum_ns += counter_get(&m->latency_sum_ns[route]);
    }
}

void http_server_pool_stats(const http_server *s, pool_stats *out)
{
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < perloop_count(&s->loops); i++)
        pool_stats_add(&loop_of(s, i)->heads, out);
}
