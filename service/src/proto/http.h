/* HTTP/1.x on the connection layer: llhttp in strict mode, keep-alive, pipelining, limits.
 *
 * http_proto plugs into a net listener whose ctx is an http_server. Per request the parser
 * collects the URL and the few headers handlers use into a pooled head buffer, routes at the end
 * of the headers, and calls the route's handler at the end of the message; the handler answers
 * with http_respond*() into the connection's output, which the connection layer flushes once per
 * read. A request with a body is decided at the end of its headers, before any of the body is
 * read and before a 100 Continue: 404, 405, the guard's 401, and 503 (Retry-After) when the
 * Content-Length its route buffers could not fit the in-flight budget now
 * (http_server_set_budget). The body takes its bytes from the budget as they arrive (never the
 * announced length), and a body that grows past it is refused then. Such a refusal carries
 * Connection: close and the connection ends after it: the unread body is never buffered nor
 * parsed as a request. Responses always carry
 * Content-Length, Date, Server and, when the connection ends, Connection: close. Errors are JSON
 * {"error": "..."}.
 *
 * Rejected with 400 and a close: malformed requests (llhttp strict mode: bare CR/LF, CL+TE,
 * duplicate Content-Length, bad chunk sizes, control characters), obs-fold continuation lines,
 * HTTP/0.9; 414 URL too long, 431 header section too large or too many headers, 413 body too
 * large, 505 HTTP/2 preface. All of it runs on the connection's loop thread.
 */
#ifndef SF_PROTO_HTTP_H
#define SF_PROTO_HTTP_H

#include <stdbool.h>
#include <stdint.h>

#include "net/conn.h"
#include "net/loop.h"
#include "net/proto.h"
#include "util/budget.h"

typedef struct http_str {
    const char *p;
    uint32_t len;
} http_str;

enum { /* the request headers handlers may read */
       HTTP_H_ACCEPT = 0,
       HTTP_H_CONTENT_TYPE,
       HTTP_H_IF_MATCH,
       HTTP_H_IF_NONE_MATCH,
       HTTP_H_AUTHORIZATION,
       HTTP_H_EXPECT,
       HTTP_H_COUNT
};

typedef struct http_server http_server;
typedef struct http_loop http_loop;

typedef struct http_request {
    conn *conn;
    http_server *server;
    http_loop *loop; /* per-loop HTTP state (scratch buffer, metrics) */
    unsigned loop_index;
    uint8_t method; /* llhttp_method_t */
    uint8_t version_major, version_minor;
    http_str path;                  /* raw, still percent-encoded */
    http_str query;                 /* after '?', empty if none */
    http_str headers[HTTP_H_COUNT]; /* p == NULL when absent */
    obuf *body;                     /* chunks of the body, when the route wants it */
    uint64_t body_len;
    bool head_only; /* HEAD: send headers, no body */
    int status;     /* set by http_respond, for metrics and logs */
} http_request;

typedef void (*http_handler)(http_request *r, void *ctx);

/* Methods a route accepts, as a bit mask of llhttp methods (HEAD is implied by GET). */
#define HTTP_M(m) (1u << (m))

/* The access a route requires. The server's guard (http_server_set_guard) checks it once per
 * request, after routing (404) and the method check (405), before the handler runs: at the end
 * of the headers for a request with a body, else at the end of the message. */
typedef enum {
    HTTP_AUTH_NONE = 0,  /* open to everyone (health, readiness) */
    HTTP_AUTH_READ,      /* a read */
    HTTP_AUTH_WRITE,     /* a write */
    HTTP_AUTH_BY_METHOD, /* GET and HEAD read, every other method writes */
} http_auth;

typedef struct http_route {
    const char *path; /* exact path, or a prefix ending in '/' when prefix is set */
    bool prefix;
    bool wants_body;
    uint32_t methods;
    http_auth auth;
    http_handler handler;
    void *ctx;
    /* Optional, for a prefix route whose paths take different methods (/cache/KEY and
     * /cache/KEY/incr): the Allow value of a 405 for this path. NULL: the methods above. */
    const char *(*allow)(http_str path);
} http_route;

/* The access check of routes whose auth is not HTTP_AUTH_NONE. Returns true to let the request
 * through; false after answering it (e.g. 401): its handler is then not called. */
typedef bool (*http_guard)(http_request *r, bool write, void *ctx);

#define HTTP_MAX_ROUTES 32

typedef struct http_limits {
    uint32_t max_header_bytes, max_url_bytes, max_headers;
    uint64_t max_body_bytes;
    uint32_t max_requests_per_connection, max_pipeline;
    size_t scratch_bytes; /* per-loop body scratch; raised to HTTP_SCRATCH_MIN */
    size_t pool_idle_max; /* idle request-head buffers kept per loop */
} http_limits;

extern const proto http_proto;

/* The server: routes and limits shared by all loops, per-loop state inside. */
http_server *http_server_new(const http_limits *limits, net_server *net, char *err, size_t errlen);
void http_server_free(http_server *s);
int http_server_route(http_server *s, const http_route *route);
/* Installs the guard (none: every route is open). Before the loops start. */
void http_server_set_guard(http_server *s, http_guard guard, void *ctx);
/* The budget request bodies being buffered take from (util/budget.h; shared with other servers),
 * or NULL (the default): bounded only by max_body_bytes per request. Before the loops start. */
void http_server_set_budget(http_server *s, byte_budget *inflight);
net_server *http_server_net(const http_server *s);
unsigned http_server_route_count(const http_server *s);
const char *http_server_route_name(const http_server *s, unsigned i); /* i == count: unmatched */

/* Responses. body may be NULL when len is 0. extra_headers: complete "Name: value\r\n" lines. */
void http_respond(http_request *r, int status, const char *content_type, const char *extra_headers,
                  const void *body, size_t len);
void http_respond_error(http_request *r, int status, const char *message,
                        const char *extra_headers);
/* Responds with the request's own body (route with wants_body), moved into the output without
 * a copy when large. */
void http_respond_request_body(http_request *r, int status, const char *content_type,
                               const char *extra_headers);
/* Deferred responses: a handler that cannot answer now (a /seq burst waiting for a block)
 * calls http_defer(r, cancel, arg) instead of responding, and keeps the handle it returns (r
 * itself is only valid during the handler). The connection is held (conn_hold): pipelined
 * requests after this one wait, in order, and no timer closes it meanwhile. The handle is
 * answered later, on the same loop thread and outside any handler of this connection, with
 * http_respond / http_respond_error as any request: keep-alive or close, HTTP/1.0, HEAD, the
 * route's metrics (latency from the request's arrival) and the access log as for an immediate
 * answer (a drain begun meanwhile closes after it). The answer ends the deferral and the handle.
 * If the connection closes first (the peer reset it, the server's grace ran out), cancel(d, arg)
 * runs from its close (never from inside an http_* call of the owner), and d is invalid after
 * it returns. Returns NULL if this request cannot be deferred (then answer it now). */
typedef void (*http_defer_cancel)(http_request *d, void *arg);
http_request *http_defer(http_request *r, http_defer_cancel cancel, void *arg);

#define HTTP_CTYPE_MAX 127 /* longer Content-Type values are cut in responses */
/* Scratch space of the loop for building a body (limits.scratch_bytes, at least
 * HTTP_SCRATCH_MIN); valid until the next http_respond on this loop. */
#define HTTP_SCRATCH_MIN (256 * 1024)
char *http_scratch(http_request *r, size_t *size);

/* ?name=value lookup in the raw query; *value is still percent-encoded. Returns true if found. */
bool http_query_param(const http_request *r, const char *name, http_str *value);
/* Percent-decoding ("+" stays "+"). Returns the decoded length, or -1 on a bad escape or when
 * out is too small. */
long http_percent_decode(const char *in, size_t len, char *out, size_t outcap);

const char *http_status_text(int status);

/* ---- metrics (summed over loops on scrape) ---- */
#define HTTP_LATENCY_BUCKETS 17
extern const double http_latency_bounds[HTTP_LATENCY_BUCKETS]; /* seconds, +Inf implied */
typedef enum {
    HTTP_S_1XX,
    HTTP_S_200,
    HTTP_S_201,
    HTTP_S_204,
    HTTP_S_2XX,
    HTTP_S_304,
    HTTP_S_3XX,
    HTTP_S_400,
    HTTP_S_401,
    HTTP_S_403,
    HTTP_S_404,
    HTTP_S_405,
    HTTP_S_408,
    HTTP_S_409,
    HTTP_S_412,
    HTTP_S_413,
    HTTP_S_414,
    HTTP_S_417,
    HTTP_S_431,
    HTTP_S_4XX,
    HTTP_S_500,
    HTTP_S_503,
    HTTP_S_505,
    HTTP_S_507,
    HTTP_S_5XX,
    HTTP_S_COUNT
} http_status_slot;
const char *http_status_slot_label(http_status_slot s);
typedef struct http_route_metrics {
    uint64_t requests[HTTP_S_COUNT];
    uint64_t latency[HTTP_LATENCY_BUCKETS + 1];
    uint64_t latency_sum_ns;
} http_route_metrics;
/* Sums route i's metrics over all loops into *out. */
void http_server_route_metrics(const http_server *s, unsigned i, http_route_metrics *out);
/* Request head buffer pools, summed over loops. */
void http_server_pool_stats(const http_server *s, pool_stats *out);

#endif
