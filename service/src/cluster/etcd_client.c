/* etcd v3 JSON-gateway client (see etcd_client.h). */
#include "cluster/etcd_client.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/etcd_auth.h"
#include "cluster/etcd_tls.h"
#include "util/base64.h"
#include "util/decimal.h"
#include "util/httpresp.h"
#include "util/netio.h"

#define ETCD_HEADER_SLACK  (64u * 1024) /* status line + headers + chunk framing beyond the body */
#define ETCD_TXN_MAX_OPS   64           /* per compare list / branch */
#define ETCD_KEY_MAX       4096         /* bytes of one key (etcd's own limit is 1.5 MiB requests) */
#define ETCD_READ_CHUNK    8192

typedef struct etcd_endpoint {
    char name[64]; /* "host:port", also the Host header */
    char host[48];
    char port[8];
    int fd;        /* -1: not connected */
    bool reused;   /* fd already carried an exchange */
    struct ssl_st *ssl;    /* https: the TLS connection on fd */
    etcd_tls_session sess; /* https: the last session, offered when reconnecting */
    _Atomic uint64_t answered, failed; /* calls; read by any thread (metrics) */
    _Atomic uint64_t tls_full, tls_resumed; /* https handshakes */
} etcd_endpoint;

struct etcd_client {
    etcd_endpoint ep[ETCD_MAX_ENDPOINTS];
    size_t n_ep, cur;
    etcd_tls *tls; /* https endpoints (not owned); NULL: http */
    bool last_tls; /* the last call failed in the TLS layer (etcd_client_tls_refused) */
    _Atomic size_t cur_seen; /* cur, for other threads */
    unsigned timeout_ms;
    size_t body_max;
    uint64_t cluster_id;
    etcd_auth *auth; /* NULL: no RBAC user */
    bool at_most_once; /* never the re-send on a fresh connection (etcd_client_opts) */
    bool auth_shared;  /* auth is another client's (etcd_client_opts.shared_auth): not freed */
    uint64_t sent_gen; /* the generation of the token the last request carried */
    char auth_hdr[ETCD_AUTH_HEADER_MAX]; /* its copy (wiped after each request) */
    hresp_parser parser;
    /* the answer the parser completed */
    bool got_response;
    int status;
    bool keep_alive;
    char *body; /* copy, NUL-terminated */
    size_t body_len;
};

struct etcd_txn {
    cJSON *root, *compare, *success, *failure;
    int n_compare, n_success, n_failure;
    const char *fault; /* first builder error */
};

static void set_err(etcd_error *err, const etcd_client *c, etcd_error_kind kind, int http,
                    int grpc, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void set_err(etcd_error *err, const etcd_client *c, etcd_error_kind kind, int http,
                    int grpc, const char *fmt, ...)
{
    if (!err)
        return;
    err->kind = kind;
    err->http_status = http;
    err->grpc_code = grpc;
    snprintf(err->endpoint, sizeof err->endpoint, "%s", c ? c->ep[c->cur].name : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

/* ---- endpoints and connections ---------------------------------------------------------------- */

static int parse_endpoints(etcd_client *c, const char *list, etcd_error *err)
{
    for (const char *p = list ? list : ""; *p;) {
        p += strspn(p, " ,");
        size_t n = strcspn(p, ", ");
        if (n == 0)
            break;
        char text[128];
        if (n >= sizeof text) {
            set_err(err, NULL, ETCD_E_USAGE, 0, 0, "etcd endpoint longer than %zu bytes",
                    sizeof text - 1);
            return -1;
        }
        memcpy(text, p, n);
        text[n] = '\0';
        p += n;
        bool https = strncmp(text, "https://", 8) == 0;
        if (!https && strncmp(text, "http://", 7) != 0) {
            set_err(err, NULL, ETCD_E_USAGE, 0, 0,
                    "etcd endpoint %s is not http://host:port or https://host:port", text);
            return -1;
        }
        if (https != (c->tls != NULL)) {
            set_err(err, NULL, ETCD_E_USAGE, 0, 0, "etcd endpoint %s: %s", text,
                    https ? "https:// needs the TLS settings (snowflake.etcd.tls.ca_file)"
                          : "http:// with TLS settings: every endpoint must be https://");
            return -1;
        }
        char *hp = text + (https ? 8 : 7);
        size_t hl = strlen(hp);
        if (hl && hp[hl - 1] == '/')
            hp[--hl] = '\0';
        if (c->n_ep == ETCD_MAX_ENDPOINTS) {
            set_err(err, NULL, ETCD_E_USAGE, 0, 0, "more than %d etcd endpoints",
                    ETCD_MAX_ENDPOINTS);
            return -1;
        }
        etcd_endpoint *e = &c->ep[c->n_ep];
        if (strlen(hp) >= sizeof e->name ||
            !netio_split_host_port(hp, e->host, sizeof e->host, e->port, sizeof e->port)) {
            set_err(err, NULL, ETCD_E_USAGE, 0, 0, "etcd endpoint %s is not %s://host:port",
                    text, https ? "https" : "http");
            return -1;
        }
        snprintf(e->name, sizeof e->name, "%s", hp);
        e->fd = -1;
        c->n_ep++;
    }
    if (c->n_ep == 0) {
        set_err(err, NULL, ETCD_E_USAGE, 0, 0, "no etcd endpoints given");
        return -1;
    }
    return 0;
}

/* ---- transport: a connection per endpoint, plain TCP or TLS over it -------------------------------
 * Everything that differs between http:// and https:// is in these four functions; the exchange
 * and failover logic above them is the same for both. */

static void ep_close(etcd_client *c, etcd_endpoint *e)
{
    if (e->ssl)
        etcd_tls_close(c->tls, e->ssl, &e->sess);
    e->ssl = NULL;
    if (e->fd >= 0)
        close(e->fd);
    e->fd = -1;
    e->reused = false;
}

/* Connects e (and with https, the handshake, offering e's last session). 0, or -1 with *err:
 * ETCD_E_UNAVAILABLE (no connection), ETCD_E_TLS (the TLS layer refused: a certificate, a
 * protocol error such as a plaintext server). Nothing of a request was sent either way. */
static int conn_open(etcd_client *c, etcd_endpoint *e, uint64_t deadline, etcd_error *err)
{
    const char *why = "";
    int fd = netio_connect(e->host, e->port, deadline, &why);
    if (fd < 0) {
        set_err(err, c, ETCD_E_UNAVAILABLE, 0, 0, "connect: %s", why);
        return -1;
    }
    if (c->tls) {
        char msg[sizeof err->message];
        bool cert_problem = false;
        e->ssl = etcd_tls_connect(c->tls, fd, e->host, &e->sess, deadline, &cert_problem, msg,
                                  sizeof msg);
        if (!e->ssl) {
            bool tls = cert_problem || strncmp(msg, "TLS", 3) == 0;
            set_err(err, c, tls ? ETCD_E_TLS : ETCD_E_UNAVAILABLE, 0, 0, "%s%s",
                    tls ? "" : "TLS handshake: ", msg);
            close(fd);
            return -1;
        }
        atomic_fetch_add(etcd_tls_resumed(e->ssl) ? &e->tls_resumed : &e->tls_full, 1);
    }
    e->fd = fd;
    e->reused = false;
    return 0;
}

/* 0 when all was sent; -1 with *err (ETCD_E_UNAVAILABLE, or ETCD_E_TLS). */
static int conn_send(etcd_client *c, etcd_endpoint *e, const char *buf, size_t len,
                     uint64_t deadline, etcd_error *err)
{
    if (!e->ssl) {
        int rc = netio_send_all(e->fd, buf, len, deadline);
        if (rc != 0)
            set_err(err, c, ETCD_E_UNAVAILABLE, 0, 0, "send: %s", strerror(-rc));
        return rc ? -1 : 0;
    }
    char msg[sizeof err->message];
    bool cert_problem;
    int rc = etcd_tls_send_all(e->ssl, e->fd, buf, len, deadline, &cert_problem, msg, sizeof msg);
    if (rc != 0)
        set_err(err, c, rc == -EPROTO ? ETCD_E_TLS : ETCD_E_UNAVAILABLE, 0, 0, "send: %s", msg);
    return rc ? -1 : 0;
}

/* Bytes (> 0), 0 at the end of the stream, or -1 with *err (ETCD_E_UNAVAILABLE, ETCD_E_TLS). */
static ssize_t conn_recv(etcd_client *c, etcd_endpoint *e, char *buf, size_t cap,
                         uint64_t deadline, etcd_error *err)
{
    if (!e->ssl) {
        ssize_t r = netio_recv_some(e->fd, buf, cap, deadline);
        if (r < 0)
            set_err(err, c, ETCD_E_UNAVAILABLE, 0, 0, "%s",
                    r == -ETIMEDOUT ? "no answer within the request timeout" : strerror((int)-r));
        return r < 0 ? -1 : r;
    }
    char msg[sizeof err->message];
    bool cert_problem;
    ssize_t r = etcd_tls_recv_some(e->ssl, e->fd, buf, cap, deadline, &cert_problem, msg,
                                   sizeof msg);
    if (r < 0)
        set_err(err, c, r == -EPROTO ? ETCD_E_TLS : ETCD_E_UNAVAILABLE, 0, 0, "%s", msg);
    return r < 0 ? -1 : r;
}

/* The current endpoint failed: drop its connection, the next call starts at the next one. */
static void rotate(etcd_client *c)
{
    ep_close(c, &c->ep[c->cur]);
    atomic_fetch_add(&c->ep[c->cur].failed, 1);
    c->cur = (c->cur + 1) % c->n_ep;
    atomic_store(&c->cur_seen, c->cur);
}

static int on_response(void *ud, const hresp *r)
{
    etcd_client *c = ud;
    c->got_response = true;
    c->status = r->status;
    c->keep_alive = r->keep_alive;
    free(c->body);
    c->body = malloc(r->body_len + 1);
    if (c->body) {
        if (r->body_len)
            memcpy(c->body, r->body, r->body_len);
        c->body[r->body_len] = '\0';
        c->body_len = r->body_len;
    }
    return 1; /* one request, one answer: stop here */
}

etcd_client *etcd_client_new(const etcd_client_opts *opts, etcd_error *err)
{
    etcd_client *c = calloc(1, sizeof *c);
    if (!c) {
        set_err(err, NULL, ETCD_E_USAGE, 0, 0, "out of memory");
        return NULL;
    }
    c->tls = opts->tls;
    if (parse_endpoints(c, opts->endpoints, err) != 0) {
        free(c);
        return NULL;
    }
    if (opts->shared_auth) {
        c->auth = opts->shared_auth;
        c->auth_shared = true;
    } else if (opts->auth_user && *opts->auth_user) {
        char why[256];
        c->auth = etcd_auth_new(opts->auth_user, opts->auth_password, opts->auth_password_file,
                                why, sizeof why);
        if (!c->auth) {
            set_err(err, NULL, ETCD_E_USAGE, 0, 0, "%s", why);
            free(c);
            return NULL;
        }
    }
    c->timeout_ms = opts->request_timeout_ms ? opts->request_timeout_ms : 1000;
    c->body_max = opts->body_max ? opts->body_max : ETCD_DEFAULT_BODY_MAX;
    c->at_most_once = opts->at_most_once;
    hresp_init(&c->parser, false, true, c->body_max, on_response, c);
    return c;
}

void etcd_client_free(etcd_client *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_ep; i++)
    {
        ep_close(c, &c->ep[i]);
        etcd_tls_session_clear(&c->ep[i].sess);
    }
    hresp_free(&c->parser);
    if (c->auth && c->body)
        memset(c->body, 0, c->body_len); /* may hold a token */
    free(c->body);
    if (!c->auth_shared)
        etcd_auth_free(c->auth);
    free(c);
}

struct etcd_auth *etcd_client_auth(const etcd_client *c)
{
    return c->auth;
}

const char *etcd_client_endpoint(const etcd_client *c)
{
    return c->ep[c->cur].name;
}

uint64_t etcd_client_cluster_id(const etcd_client *c)
{
    return c->cluster_id;
}

/* Sends the request on e's connection and reads one answer into c->status/body.
 * 0; or -1 with *err and *nothing_back = no byte of an answer arrived. */
static int exchange(etcd_client *c, etcd_endpoint *e, const char *req, size_t req_len,
                    uint64_t deadline, bool *nothing_back, etcd_error *err)
{
    *nothing_back = true;
    if (conn_send(c, e, req, req_len, deadline, err) != 0)
        return -1;
    hresp_reset(&c->parser);
    c->got_response = false;
    size_t total = 0, limit = c->body_max + ETCD_HEADER_SLACK;
    char buf[ETCD_READ_CHUNK];
    for (;;) {
        ssize_t r = conn_recv(c, e, buf, sizeof buf, deadline, err);
        if (r < 0)
            return -1;
        if (r == 0) {
            int f = hresp_eof(&c->parser);
            if (f == HRESP_STOP && c->got_response) {
                c->keep_alive = false;
                return 0;
            }
            set_err(err, c, total ? ETCD_E_GARBAGE : ETCD_E_UNAVAILABLE, 0, 0, "%s",
                    total ? "connection closed inside the answer"
                          : "connection closed without an answer");
            return -1;
        }
        *nothing_back = false;
        total += (size_t)r;
        size_t used = 0;
        int f = hresp_feed(&c->parser, buf, (size_t)r, &used);
        if (f == HRESP_ERROR) {
            set_err(err, c, ETCD_E_GARBAGE, 0, 0, "bad HTTP answer: %s", c->parser.err);
            return -1;
        }
        if (c->parser.body_truncated || total > limit) {
            set_err(err, c, ETCD_E_GARBAGE, 0, 0, "answer larger than %zu bytes", c->body_max);
            return -1;
        }
        if (f == HRESP_STOP) {
            if (used != (size_t)r) {
                set_err(err, c, ETCD_E_GARBAGE, c->status, 0, "bytes after the answer");
                return -1;
            }
            if (!c->body) {
                set_err(err, c, ETCD_E_USAGE, 0, 0, "out of memory");
                return -1;
            }
            return 0;
        }
    }
}

/* POSTs body to path (with the token unless with_token is false), tries endpoints as the header
 * explains, until deadline; on success c->status/body hold the answer. */
static int post(etcd_client *c, const char *path, const char *body, bool with_token,
                uint64_t deadline, etcd_error *err)
{
    const char *auth = "";
    if (with_token && c->auth) { /* a copy: a client sharing the credentials may renew them */
        c->sent_gen = etcd_auth_header_copy(c->auth, c->auth_hdr, sizeof c->auth_hdr);
        auth = c->auth_hdr;
    }
    size_t blen = strlen(body);
    char *req = NULL;
    size_t tried = 0;
    bool resent = false;
    int result = -1;
    while (tried < c->n_ep) {
        etcd_endpoint *e = &c->ep[c->cur];
        if (e->fd < 0) {
            if (conn_open(c, e, deadline, err) != 0) {
                rotate(c);
                tried++;
                if (netio_mono_ms() >= deadline)
                    break;
                continue;
            }
        }
        etcd_auth_wipe_free(req); /* it may hold a token or a password */
        int n = asprintf(&req,
                         "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                         "%sContent-Length: %zu\r\n\r\n%s",
                         path, e->name, auth, blen, body);
        if (n < 0) {
            req = NULL;
            set_err(err, c, ETCD_E_USAGE, 0, 0, "out of memory");
            break;
        }
        bool nothing_back = true, was_reused = e->reused;
        if (err)
            err->sent = true; /* from here on etcd may have it */
        if (exchange(c, e, req, (size_t)n, deadline, &nothing_back, err) != 0) {
            if (err && err->kind == ETCD_E_USAGE)
                break;
            ep_close(c, e);
            if (was_reused && nothing_back && !resent && !c->at_most_once && err &&
                err->kind == ETCD_E_UNAVAILABLE && netio_mono_ms() < deadline &&
                strstr(err->message, "timeout") == NULL) {
                resent = true; /* the server closed an idle connection: nothing was done */
                continue;
            }
            rotate(c); /* closed already; counts the failure */
            break;
        }
        e->reused = true;
        if (e->ssl) /* a TLS 1.3 ticket came with the answer: the next reconnect resumes */
            etcd_tls_keep_session(c->tls, e->ssl, &e->sess);
        if (!c->keep_alive)
            ep_close(c, e);
        result = 0;
        break;
    }
    etcd_auth_wipe_free(req);
    if (auth == c->auth_hdr)
        memset(c->auth_hdr, 0, sizeof c->auth_hdr);
    c->last_tls = result != 0 && err && err->kind == ETCD_E_TLS;
    return result;
}

/* ---- JSON answers -------------------------------------------------------------------------------- */

/* The digits of an etcd number, at most max. etcd (protobuf's JSON) prints numbers canonically:
 * a leading zero is not its output, so it is refused beside util/decimal.h's rules. */
static bool etcd_digits(const char *s, uint64_t max, uint64_t *v)
{
    size_t n = strlen(s);
    return !(n > 1 && s[0] == '0') && dec_parse_u64(s, n, max, v);
}

static bool parse_i64(const cJSON *j, int64_t *out)
{
    if (!j) {
        *out = 0;
        return true;
    }
    if (!cJSON_IsString(j))
        return false;
    const char *s = j->valuestring;
    bool neg = *s == '-';
    uint64_t v;
    if (!etcd_digits(s + neg, (uint64_t)INT64_MAX + neg, &v))
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool parse_u64(const cJSON *j, uint64_t *out)
{
    if (!j) {
        *out = 0;
        return true;
    }
    return cJSON_IsString(j) && etcd_digits(j->valuestring, UINT64_MAX, out);
}

static bool parse_bool(const cJSON *j, bool *out)
{
    *out = false;
    if (!j)
        return true;
    if (!cJSON_IsBool(j))
        return false;
    *out = cJSON_IsTrue(j);
    return true;
}

/* An error body, either shape → ETCD_E_SERVER. false when body is not an error. */
static bool take_error(etcd_client *c, const cJSON *root, etcd_error *err)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (!e)
        return false;
    const cJSON *code, *msg;
    if (cJSON_IsObject(e)) { /* streaming shape */
        code = cJSON_GetObjectItemCaseSensitive(e, "grpc_code");
        msg = cJSON_GetObjectItemCaseSensitive(e, "message");
    } else {
        code = cJSON_GetObjectItemCaseSensitive(root, "code");
        msg = cJSON_GetObjectItemCaseSensitive(root, "message");
        if (!cJSON_IsString(msg))
            msg = e;
    }
    if (!cJSON_IsNumber(code) || code->valuedouble < 0 || code->valuedouble > 16 ||
        !cJSON_IsString(msg)) {
        set_err(err, c, ETCD_E_GARBAGE, c->status, 0,
                "HTTP %d: an error answer without a gRPC code and message", c->status);
        return true;
    }
    set_err(err, c, ETCD_E_SERVER, c->status, code->valueint, "HTTP %d code %d: %s", c->status,
            code->valueint, msg->valuestring);
    return true;
}

static bool parse_header(etcd_client *c, const cJSON *obj, etcd_header *h, etcd_error *err)
{
    const cJSON *hj = cJSON_GetObjectItemCaseSensitive(obj, "header");
    etcd_header tmp;
    if (!h)
        h = &tmp;
    memset(h, 0, sizeof *h);
    if (!cJSON_IsObject(hj) ||
        !parse_u64(cJSON_GetObjectItemCaseSensitive(hj, "cluster_id"), &h->cluster_id) ||
        !parse_u64(cJSON_GetObjectItemCaseSensitive(hj, "member_id"), &h->member_id) ||
        !parse_i64(cJSON_GetObjectItemCaseSensitive(hj, "revision"), &h->revision) ||
        !parse_i64(cJSON_GetObjectItemCaseSensitive(hj, "raft_term"), &h->raft_term) ||
        h->cluster_id == 0) {
        set_err(err, c, ETCD_E_GARBAGE, c->status, 0, "answer without a valid header");
        return false;
    }
    if (c->cluster_id == 0) {
        c->cluster_id = h->cluster_id;
    } else if (c->cluster_id != h->cluster_id) {
        set_err(err, c, ETCD_E_GARBAGE, c->status, 0,
                "answer from cluster %016" PRIx64 ", not %016" PRIx64 " (a different etcd)",
                h->cluster_id, c->cluster_id);
        return false;
    }
    return true;
}

/* Posts body and parses: *root is the answer object (2xx, not an error), to be deleted by the
 * caller. Rotates on 5xx and garbage. */
static int call_once(etcd_client *c, const char *path, const char *body, bool with_token,
                     uint64_t deadline, cJSON **root, etcd_error *err)
{
    *root = NULL;
    if (post(c, path, body, with_token, deadline, err) != 0)
        return -1;
    cJSON *j = cJSON_ParseWithLength(c->body, c->body_len);
    if (!j || !cJSON_IsObject(j)) {
        /* a refusal in plain text (etcd's gateway: "CommonName of client sending a request
         * against gateway will be ignored...") is the operator's only clue: its first line, up
         * to 120 printable characters, anything else (quotes too) as '?' */
        char said[128] = "";
        size_t n = 0;
        if (c->status < 200 || c->status > 299)
            for (size_t i = 0; i < c->body_len && n < 120 && c->body[i] != '\n' &&
                               c->body[i] != '\r';
                 i++) {
                unsigned char ch = (unsigned char)c->body[i];
                said[n++] = ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\' ? (char)ch : '?';
            }
        said[n] = '\0';
        set_err(err, c, ETCD_E_GARBAGE, c->status, 0,
                "HTTP %d with a body that is not a JSON object%s%s%s", c->status,
                n ? ": \"" : "", said, n ? "\"" : "");
        goto bad;
    }
    if (take_error(c, j, err)) {
        if (c->status >= 500 || err->kind == ETCD_E_GARBAGE)
            goto bad;
        cJSON_Delete(j);
        return -1;
    }
    if (c->status != 200) {
        set_err(err, c, ETCD_E_GARBAGE, c->status, 0, "HTTP %d without an error body", c->status);
        goto bad;
    }
    atomic_fetch_add(&c->ep[c->cur].answered, 1);
    *root = j;
    return 0;
bad:
    cJSON_Delete(j);
    rotate(c);
    return -1;
}

static int garbage(etcd_client *c, cJSON *root);

/* POST /v3/auth/authenticate with the password read now; the token kept. etcd without auth
 * enabled: calls go on without a token (as etcd's own client does), until one is refused for
 * the lack of it. 0, or -1 with err (err->auth when the credentials were refused or the password
 * file is unusable). The request body and the answer are wiped: they hold the secrets. */
static int authenticate(etcd_client *c, uint64_t deadline, etcd_error *err)
{
    char why[256];
    etcd_auth_forget(c->auth);
    char *body = etcd_auth_request_body(c->auth, why, sizeof why);
    if (!body) {
        etcd_auth_count(c->auth, ETCD_AUTH_EV_REFUSED);
        set_err(err, c, ETCD_E_USAGE, 0, 0, "etcd user %s: %s", etcd_auth_user(c->auth), why);
        err->auth = true;
        return -1;
    }
    cJSON *root = NULL;
    int rc = call_once(c, "/v3/auth/authenticate", body, false, deadline, &root, err);
    etcd_auth_wipe_free(body);
    if (c->body)
        memset(c->body, 0, c->body_len); /* the answer holds the token */
    if (rc != 0) {
        etcd_auth_refusal r = err->kind == ETCD_E_SERVER
                                  ? etcd_auth_classify(err->grpc_code, err->message)
                                  : ETCD_AUTH_NOT_REFUSED;
        if (r == ETCD_AUTH_NOT_ENABLED) {
            etcd_auth_set_disabled(c->auth, true);
            etcd_auth_count(c->auth, ETCD_AUTH_EV_OK);
            memset(err, 0, sizeof *err);
            return 0;
        }
        if (r == ETCD_AUTH_CREDENTIALS) {
            etcd_auth_count(c->auth, ETCD_AUTH_EV_REFUSED);
            size_t len = strlen(err->message);
            snprintf(err->message + len, sizeof err->message - len,
                     " (authenticating as etcd user %s)", etcd_auth_user(c->auth));
            err->auth = true;
        } else {
            etcd_auth_count(c->auth, ETCD_AUTH_EV_ERROR);
        }
        return -1;
    }
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "token");
    bool ok = parse_header(c, root, NULL, err) && cJSON_IsString(tok) &&
              etcd_auth_set_token(c->auth, tok->valuestring);
    if (cJSON_IsString(tok))
        memset(tok->valuestring, 0, strlen(tok->valuestring));
    if (!ok) {
        etcd_auth_count(c->auth, ETCD_AUTH_EV_ERROR);
        if (err->kind != ETCD_E_GARBAGE)
            set_err(err, c, ETCD_E_GARBAGE, c->status, 0, "authenticate answer without a token");
        return garbage(c, root);
    }
    etcd_auth_set_disabled(c->auth, false);
    etcd_auth_count(c->auth, ETCD_AUTH_EV_OK);
    cJSON_Delete(root);
    return 0;
}

/* Authenticates, one client at a time, unless another client sharing the credentials changed the
 * token since generation seen (then its token, or its finding that auth is off, is used). */
static int login(etcd_client *c, uint64_t seen, uint64_t deadline, etcd_error *err)
{
    etcd_auth_login_lock(c->auth);
    bool fresh = etcd_auth_generation(c->auth) != seen &&
                 (etcd_auth_has_token(c->auth) || etcd_auth_disabled(c->auth));
    int rc = fresh ? 0 : authenticate(c, deadline, err);
    etcd_auth_login_unlock(c->auth);
    return rc;
}

/* One call: authenticates first when a user holds no token; a call refused for its token
 * (etcd_auth.h: refused before anything of it was executed) is repeated once after a fresh
 * authentication; a lasting refusal is marked err->auth. All within one request timeout. */
static int call(etcd_client *c, const char *path, cJSON *req, cJSON **root, etcd_error *err)
{
    etcd_error local;
    if (!err)
        err = &local;
    memset(err, 0, sizeof *err);
    *root = NULL;
    uint64_t deadline = netio_mono_ms() + c->timeout_ms;
    char *body = cJSON_PrintUnformatted(req);
    if (!body) {
        set_err(err, c, ETCD_E_USAGE, 0, 0, "out of memory");
        return -1;
    }
    int rc = 0;
    if (c->auth) {
        uint64_t seen = etcd_auth_generation(c->auth);
        if (!etcd_auth_has_token(c->auth) && !etcd_auth_disabled(c->auth))
            rc = login(c, seen, deadline, err);
    }
    if (rc == 0)
        rc = call_once(c, path, body, true, deadline, root, err);
    etcd_auth_refusal r = rc != 0 && err->kind == ETCD_E_SERVER
                              ? etcd_auth_classify(err->grpc_code, err->message)
                              : ETCD_AUTH_NOT_REFUSED;
    if (r == ETCD_AUTH_TOKEN && c->auth) {
        etcd_auth_count(c->auth, ETCD_AUTH_EV_TOKEN_REFUSED);
        etcd_auth_set_disabled(c->auth, false);
        rc = login(c, c->sent_gen, deadline, err);
        if (rc == 0)
            rc = call_once(c, path, body, true, deadline, root, err);
        r = rc != 0 && err->kind == ETCD_E_SERVER
                ? etcd_auth_classify(err->grpc_code, err->message)
                : ETCD_AUTH_NOT_REFUSED;
        if (r == ETCD_AUTH_TOKEN) /* refused a fresh token: for a later call to try again */
            etcd_auth_forget(c->auth);
    }
    if (r == ETCD_AUTH_DENIED && c->auth)
        etcd_auth_count(c->auth, ETCD_AUTH_EV_DENIED);
    if (r != ETCD_AUTH_NOT_REFUSED && r != ETCD_AUTH_NOT_ENABLED)
        err->auth = true;
    free(body);
    return rc;
}

/* Garbage found after call(): the same treatment as a bad answer. */
static int garbage(etcd_client *c, cJSON *root)
{
    cJSON_Delete(root);
    rotate(c);
    return -1;
}

static cJSON *id_string(int64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%" PRId64, v);
    return cJSON_CreateString(s);
}

/* ---- leases ----------------------------------------------------------------------------------- */

int etcd_lease_grant(etcd_client *c, int64_t ttl_s, int64_t id, int64_t *granted_ttl_s,
                     etcd_error *err)
{
    if (id <= 0 || ttl_s <= 0 || ttl_s > ETCD_MAX_LEASE_TTL_S) {
        set_err(err, c, ETCD_E_USAGE, 0, 0, "lease grant needs a positive ID and TTL");
        return -1;
    }
    cJSON *req = cJSON_CreateObject(), *root = NULL;
    cJSON_AddItemToObject(req, "TTL", id_string(ttl_s));
    cJSON_AddItemToObject(req, "ID", id_string(id));
    int rc = call(c, "/v3/lease/grant", req, &root, err);
    cJSON_Delete(req);
    if (rc != 0)
        return -1;
    int64_t got_id = 0, ttl = 0;
    if (!parse_header(c, root, NULL, err) ||
        !parse_i64(cJSON_GetObjectItemCaseSensitive(root, "ID"), &got_id) ||
        !parse_i64(cJSON_GetObjectItemCaseSensitive(root, "TTL"), &ttl) || got_id != id ||
        ttl <= 0 || ttl > ETCD_MAX_LEASE_TTL_S) {
        if (err && err->kind != ETCD_E_GARBAGE)
            set_err(err, c, ETCD_E_GARBAGE, c->status, 0,
                    "grant answer without our ID and a TTL of 1..%" PRId64 " s",
                    ETCD_MAX_LEASE_TTL_S);
        return garbage(c, root);
    }
    if (granted_ttl_s)
        *granted_ttl_s = ttl < ttl_s ? ttl : ttl_s;
    cJSON_Delete(root);
    return 0;
}

int etcd_lease_keepalive(etcd_client *c, int64_t id, int64_t max_ttl_s, int64_t *ttl_s,
                         etcd_error *err)
{
    if (max_ttl_s <= 0 || max_ttl_s > ETCD_MAX_LEASE_TTL_S) {
        set_err(err, c, ETCD_E_USAGE, 0, 0, "lease keepalive needs the lease's positive TTL");
        return -1;
    }
    cJSON *req = cJSON_CreateObject(), *root = NULL;
    cJSON_AddItemToObject(req, "ID", id_string(id));
    int rc = call(c, "/v3/lease/keepalive", req, &root, err);
    cJSON_Delete(req);
    if (rc != 0)
        return -1;
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "result");
    int64_t got_id = 0, ttl = 0;
    if (!cJSON_IsObject(res)) {
        set_err(err, c, ETCD_E_GARBAGE, c->status, 0, "keepalive answer without a result");
        return garbage(c, root);
    }
    if (!parse_header(c, res, NULL, err))
        return garbage(c, root);
    if (!parse_i64(cJSON_GetObjectItemCaseSensitive(res, "ID"), &got_id) ||
        !parse_i64(cJSON_GetObjectItemCaseSensitive(res, "TTL"), &ttl) || got_id != id) {
        set_err(err, c, ETCD_E_GARBAGE, c->status, 0, "keepalive answer for another lease");
        return garbage(c, root);
    }
    if (ttl < 0 || ttl > ETCD_MAX_LEASE_TTL_S) {
        set_err(err, c, ETCD_E_GARBAGE, c->status, 0,
                "keepalive answer with a TTL outside 0..%" PRId64 " s", ETCD_MAX_LEASE_TTL_S);
        return garbage(c, root);
    }
    *ttl_s = ttl < max_ttl_s ? ttl : max_ttl_s;
    cJSON_Delete(root);
    return 0;
}

int etcd_lease_revoke(etcd_client *c, int64_t id, bool *was_gone, etcd_error *err)
{
    if (was_gone)
        *was_gone = false;
    cJSON *req = cJSON_CreateObject(), *root = NULL;
    cJSON_AddItemToObject(req, "ID", id_string(id));
    int rc = call(c, "/v3/lease/revoke", req, &root, err);
    cJSON_Delete(req);
    if (rc != 0) {
        if (err && err->kind == ETCD_E_SERVER && err->grpc_code == ETCD_GRPC_NOT_FOUND) {
            if (was_gone)
                *was_gone = true;
            return 0;
        }
        return -1;
    }
    if (!parse_header(c, root, NULL, err))
        return garbage(c, root);
    cJSON_Delete(root);
    return 0;
}

/* ---- range -------------------------------------------------------------------------------------- */

static bool add_b64(cJSON *obj, const char *name, const void *data, size_t len)
{
    size_t cap = b64_encoded_len(len) + 1;
    char *s = malloc(cap);
    if (!s || b64_encode(data, len, s, cap) < 0) {
        free(s);
        return false;
    }
    bool ok = cJSON_AddStringToObject(obj, name, s) != NULL;
    free(s);
    return ok;
}

/* base64 field → malloc'd NUL-terminated bytes (missing = empty). */
static bool decode_field(const cJSON *j, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    const char *s = "";
    if (j) {
        if (!cJSON_IsString(j))
            return false;
        s = j->valuestring;
    }
    size_t n = strlen(s), cap = b64_decoded_max(n);
    char *buf = malloc(cap + 1);
    const char *why;
    ssize_t d = buf ? b64_decode(s, n, buf, cap, &why) : -1;
    if (d < 0) {
        free(buf);
        return false;
    }
    buf[d] = '\0';
    *out = buf;
    *len = (size_t)d;
    return true;
}

void etcd_range_result_free(etcd_range_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_kvs; i++) {
        free(r->kvs[i].key);
        free(r->kvs[i].value);
    }
    free(r->kvs);
    memset(r, 0, sizeof *r);
}

/* A RangeResponse object (top level or in a txn) → out. Its header is not checked here. */
static bool parse_range(const cJSON *obj, etcd_range_result *out)
{
    memset(out, 0, sizeof *out);
    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(obj, "kvs");
    if (!parse_i64(cJSON_GetObjectItemCaseSensitive(obj, "count"), &out->count) ||
        !parse_bool(cJSON_GetObjectItemCaseSensitive(obj, "more"), &out->more) ||
        (kvs && !cJSON_IsArray(kvs)))
        return false;
    int n = kvs ? cJSON_GetArraySize(kvs) : 0;
    if (n == 0)
        return true;
    out->kvs = calloc((size_t)n, sizeof *out->kvs);
    if (!out->kvs)
        return false;
    const cJSON *kv;
    cJSON_ArrayForEach(kv, kvs)
    {
        etcd_kv *k = &out->kvs[out->n_kvs++];
        if (!cJSON_IsObject(kv) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(kv, "key")) ||
            !decode_field(cJSON_GetObjectItemCaseSensitive(kv, "key"), &k->key, &k->key_len) ||
            !decode_field(cJSON_GetObjectItemCaseSensitive(kv, "value"), &k->value,
                          &k->value_len) ||
            !parse_i64(cJSON_GetObjectItemCaseSensitive(kv, "create_revision"),
                       &k->create_revision) ||
            !parse_i64(cJSON_GetObjectItemCaseSensitive(kv, "mod_revision"), &k->mod_revision) ||
            !parse_i64(cJSON_GetObjectItemCaseSensitive(kv, "version"), &k->version) ||
            !parse_i64(cJSON_GetObjectItemCaseSensitive(kv, "lease"), &k->lease)) {
            etcd_range_result_free(out);
            return false;
        }
    }
    return true;
}

static bool add_range_fields(cJSON *obj, const char *key, const char *range_end)
{
    if (!key || strlen(key) > ETCD_KEY_MAX || (range_end && strlen(range_end) > ETCD_KEY_MAX))
        return false;
    return add_b64(obj, "key", key, strlen(key)) &&
           (!range_end || add_b64(obj, "range_end", range_end, strlen(range_end)));
}

int etcd_range(etcd_client *c, const char *key, const char *range_end, etcd_range_result *out,
               etcd_error *err)
{
    memset(out, 0, sizeof *out);
    cJSON *req = cJSON_CreateObject(), *root = NULL;
    if (!req || !add_range_fields(req, key, range_end)) {
        cJSON_Delete(req);
        set_err(err, c, ETCD_E_USAGE, 0, 0, "range: bad key or out of memory");
        return -1;
    }
    int rc = call(c, "/v3/kv/range", req, &root, err);
    cJSON_Delete(req);
    if (rc != 0)
        return -1;
    if (!parse_header(c, root, &out->header, err))
        return garbage(c, root);
    etcd_header h = out->header;
    if (!parse_range(root, out)) {
        set_err(err, c, ETCD_E_GARBAGE, c->status, 0, "range answer with malformed fields");
        return garbage(c, root);
    }
    out->header = h;
    cJSON_Delete(root);
    return 0;
}

int etcd_prefix_end(const char *prefix, char *out, size_t cap)
{
    size_t n = strlen(prefix);
    if (n + 1 > cap)
        return -1;
    memcpy(out, prefix, n + 1);
    while (n > 0) {
        unsigned char b = (unsigned char)out[n - 1];
        if (b < 0xFF) {
            out[n - 1] = (char)(b + 1);
            out[n] = '\0';
            return 0;
        }
        n--; /* 0xFF: drop it and carry into the byte before */
    }
    return -1;
}

/* ---- transactions ------------------------------------------------------------------------------- */

etcd_txn *etcd_txn_new(void)
{
    etcd_txn *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->root = cJSON_CreateObject();
    t->compare = cJSON_AddArrayToObject(t->root, "compare");
    t->success = cJSON_AddArrayToObject(t->root, "success");
    t->failure = cJSON_AddArrayToObject(t->root, "failure");
    if (!t->root || !t->compare || !t->success || !t->failure)
        t->fault = "out of memory";
    return t;
}

void etcd_txn_free(etcd_txn *t)
{
    if (!t)
        return;
    cJSON_Delete(t->root);
    free(t);
}

static const char *const CMP_RESULT[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
static const char *const CMP_TARGET[] = {"VERSION", "CREATE", "MOD", "LEASE"};
static const char *const CMP_FIELD[] = {"version", "create_revision", "mod_revision", "lease"};

/* A new element for a compare list or branch, or NULL (fault set). */
static cJSON *txn_slot(etcd_txn *t, cJSON *list, int *count)
{
    if (t->fault)
        return NULL;
    if (*count >= ETCD_TXN_MAX_OPS) {
        t->fault = "too many operations in one txn";
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(list, o)) {
        cJSON_Delete(o);
        t->fault = "out of memory";
        return NULL;
    }
    (*count)++;
    return o;
}

static cJSON *txn_compare(etcd_txn *t, const char *key, const char *target,
                          etcd_cmp_result result)
{
    if (!t || (unsigned)result > ETCD_CMP_NOT_EQUAL) {
        if (t && !t->fault)
            t->fault = "bad compare result";
        return NULL;
    }
    cJSON *o = txn_slot(t, t->compare, &t->n_compare);
    if (!o)
        return NULL;
    if (!add_range_fields(o, key, NULL) || !cJSON_AddStringToObject(o, "target", target) ||
        !cJSON_AddStringToObject(o, "result", CMP_RESULT[result]))
        t->fault = "bad compare key or out of memory";
    return t->fault ? NULL : o;
}

void etcd_txn_compare_int(etcd_txn *t, const char *key, etcd_cmp_target target,
                          etcd_cmp_result result, int64_t value)
{
    if ((unsigned)target > ETCD_CMP_LEASE) {
        if (t && !t->fault)
            t->fault = "bad compare target";
        return;
    }
    cJSON *o = txn_compare(t, key, CMP_TARGET[target], result);
    if (o)
        cJSON_AddItemToObject(o, CMP_FIELD[target], id_string(value));
}

void etcd_txn_compare_value(etcd_txn *t, const char *key, etcd_cmp_result result,
                            const void *value, size_t value_len)
{
    cJSON *o = txn_compare(t, key, "VALUE", result);
    if (o && !add_b64(o, "value", value, value_len))
        t->fault = "out of memory";
}

static cJSON *txn_op(etcd_txn *t, etcd_branch branch, const char *kind)
{
    if (!t)
        return NULL;
    cJSON *o = branch == ETCD_SUCCESS ? txn_slot(t, t->success, &t->n_success)
                                      : txn_slot(t, t->failure, &t->n_failure);
    cJSON *inner = o ? cJSON_AddObjectToObject(o, kind) : NULL;
    if (o && !inner)
        t->fault = "out of memory";
    return inner;
}

void etcd_txn_put(etcd_txn *t, etcd_branch branch, const char *key, const void *value,
                  size_t value_len, int64_t lease)
{
    cJSON *o = txn_op(t, branch, "request_put");
    if (!o)
        return;
    bool ok = add_range_fields(o, key, NULL) && add_b64(o, "value", value, value_len);
    if (ok && lease == ETCD_IGNORE_LEASE)
        ok = cJSON_AddTrueToObject(o, "ignore_lease") != NULL;
    else if (ok && lease > 0)
        ok = cJSON_AddItemToObject(o, "lease", id_string(lease));
    else if (lease < 0)
        ok = false;
    if (!ok)
        t->fault = "bad put (key, lease) or out of memory";
}

void etcd_txn_range(etcd_txn *t, etcd_branch branch, const char *key, const char *range_end)
{
    cJSON *o = txn_op(t, branch, "request_range");
    if (o && !add_range_fields(o, key, range_end))
        t->fault = "bad range key or out of memory";
}

void etcd_txn_delete(etcd_txn *t, etcd_branch branch, const char *key, const char *range_end)
{
    cJSON *o = txn_op(t, branch, "request_delete_range");
    if (o && !add_range_fields(o, key, range_end))
        t->fault = "bad delete key or out of memory";
}

void etcd_txn_result_free(etcd_txn_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_responses; i++)
        etcd_range_result_free(&r->responses[i].range);
    free(r->responses);
    memset(r, 0, sizeof *r);
}

int etcd_txn_commit(etcd_client *c, const etcd_txn *t, etcd_txn_result *out, etcd_error *err)
{
    memset(out, 0, sizeof *out);
    if (!t || t->fault) {
        set_err(err, c, ETCD_E_USAGE, 0, 0, "txn: %s", t ? t->fault : "out of memory");
        return -1;
    }
    cJSON *root = NULL;
    if (call(c, "/v3/kv/txn", t->root, &root, err) != 0)
        return -1;
    const cJSON *resps = cJSON_GetObjectItemCaseSensitive(root, "responses");
    if (!parse_header(c, root, &out->header, err))
        return garbage(c, root);
    if (!parse_bool(cJSON_GetObjectItemCaseSensitive(root, "succeeded"), &out->succeeded) ||
        (resps && !cJSON_IsArray(resps)))
        goto bad;
    int n = resps ? cJSON_GetArraySize(resps) : 0;
    if (n > ETCD_TXN_MAX_OPS)
        goto bad;
    if (n > 0 && !(out->responses = calloc((size_t)n, sizeof *out->responses)))
        goto bad;
    const cJSON *r;
    cJSON_ArrayForEach(r, resps)
    {
        etcd_txn_response *x = &out->responses[out->n_responses++];
        const cJSON *put = cJSON_GetObjectItemCaseSensitive(r, "response_put");
        const cJSON *range = cJSON_GetObjectItemCaseSensitive(r, "response_range");
        const cJSON *del = cJSON_GetObjectItemCaseSensitive(r, "response_delete_range");
        if (cJSON_IsObject(put)) {
            x->kind = ETCD_RESP_PUT;
        } else if (cJSON_IsObject(range)) {
            x->kind = ETCD_RESP_RANGE;
            if (!parse_range(range, &x->range))
                goto bad;
        } else if (cJSON_IsObject(del)) {
            x->kind = ETCD_RESP_DELETE;
            if (!parse_i64(cJSON_GetObjectItemCaseSensitive(del, "deleted"), &x->deleted))
                goto bad;
        } else {
            goto bad;
        }
    }
    cJSON_Delete(root);
    return 0;
bad:
    etcd_txn_result_free(out);
    set_err(err, c, ETCD_E_GARBAGE, c->status, 0, "txn answer with malformed fields");
    return garbage(c, root);
}

bool etcd_client_https(const etcd_client *c)
{
    return c->tls != NULL;
}

size_t etcd_client_endpoint_count(const etcd_client *c)
{
    return c->n_ep;
}

void etcd_client_endpoint_stats(const etcd_client *c, size_t i, etcd_endpoint_stats *out)
{
    etcd_client *m = (etcd_client *)c; /* the counters are atomics */
    out->name = c->ep[i].name;
    out->answered = atomic_load(&m->ep[i].answered);
    out->failed = atomic_load(&m->ep[i].failed);
    out->tls_full = atomic_load(&m->ep[i].tls_full);
    out->tls_resumed = atomic_load(&m->ep[i].tls_resumed);
    out->current = atomic_load(&m->cur_seen) == i;
}

bool etcd_client_tls_refused(const etcd_client *c)
{
    return c->last_tls;
}
