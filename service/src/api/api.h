/* The HTTP API: ID routes (/id, /ids, /id/{id}; /uuid, /uuids, /uuid/{uuid}; /ulid, /ulids,
 * /ulid/{ulid}; /typeid, /typeids, /typeid/{typeid}; /bounds) and administration (/healthz,
 * /readyz, /metrics). Handlers run on loop threads; the only shared state they touch on the
 * request path is the generator (in its configured sync mode) and per-loop counters. What they
 * need to know of the configuration comes in api_options, filled once by app/wiring.c: the API
 * does not depend on config/.
 */
#ifndef SF_API_API_H
#define SF_API_API_H

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "cache/persist.h"
#include "cache/store.h"
#include "cluster/identity.h"
#include "proto/http.h"
#include "obs/prom.h"
#include "proto/memcache.h"
#include "seq/seq.h"
#include "snowflake/encoding.h"
#include "snowflake/generator.h"
#include "snowflake/issue128.h"
#include "snowflake/layout.h"
#include "snowflake/typeid.h"
#include "snowflake/lease.h"
#include "util/perloop.h"

/* What let a request through the access check (snowflaked_auth_granted_total's label). */
typedef enum { API_BY_TOKEN, API_BY_CERTIFICATE, API_BY_BOTH, API_BY_COUNT } api_credential;

/* Segment mode's park (api/seq.c): /seq and /seqs requests that found both blocks used up,
 * waiting (deferred, http_defer) for the next block up to sequences.burst_wait_ms. Fixed size,
 * nothing allocated per request; polled on the loop's timing wheel every millisecond only while
 * it holds something. Loop thread only, but the counters (util/counter.h) for any reader. */
#define API_SEQ_PARK_SLOTS 256
typedef struct api_seq_parked {
    http_request *d;   /* the deferred request */
    seq_ns *ns;        /* what it asks for */
    uint64_t deadline; /* loop ms: answered 503 then */
    uint32_t count;
    bool batch, text, quote;
} api_seq_parked;
typedef struct api_seq_park {
    net_loop *loop;           /* set when first used */
    wheel_timer tick;         /* scheduled only while n > 0 */
    uint32_t n;               /* entries in use, oldest first */
    _Atomic uint64_t parked;  /* the gauge: n, for readers on other threads */
    _Atomic uint64_t served;  /* parked, then answered with numbers */
    _Atomic uint64_t refused; /* parked, then answered 503 (deadline, drain, a failure) */
    _Atomic uint64_t full;    /* refused at once: every slot in use */
    api_seq_parked e[API_SEQ_PARK_SLOTS];
} api_seq_park;

/* Counters of one loop, written by that loop only (util/counter.h); api_ctx.loops holds one per
 * net loop, each on its own cache lines (util/perloop.h). */
typedef struct api_loop {
    _Atomic uint64_t ids_issued;      /* Snowflake IDs */
    _Atomic uint64_t ids128_issued[2]; /* by sf_id128_format */
    _Atomic uint64_t typeids_issued;   /* TypeIDs (from the UUIDv7 generators) */
    _Atomic uint64_t auth_failures;
    _Atomic uint64_t auth_granted[API_BY_COUNT]; /* by api_credential */
    api_seq_park seq_park;                       /* api/seq.c */
} api_loop;
const char *api_credential_name(api_credential c); /* "token", "certificate", "token_and_certificate" */

/* The handlers' options (app_api_options maps the configuration onto them). */
typedef struct api_options {
    sf_layout layout;                  /* /id/{id} decodes with it; the info metric shows it */
    const char *layout_name;           /* the info metric: snowflake.layout's preset or "custom" */
    sf_encoding default_encoding;      /* IDs without ?encoding= */
    bool json_numbers;                 /* without ?json_ids=: decimal IDs as JSON numbers */
    uint32_t max_batch;                /* /ids?count= at most */
    uint32_t datacenter_id, worker_id; /* the info metric (worker_id: loop 0's) */
    bool per_thread_worker_ids;        /* the info metric */
    sf_sync_mode sync;                 /* the info metric */
    bool echo_http;                    /* /echo is registered */
    bool protect_reads;                /* with a token: reads need it too, not only writes */
    const char *token;                 /* the bearer token (auth.token or its file), or NULL */
    size_t token_len;                  /* 0 = no token */
    bool client_certificates;          /* auth.client_certificates: a listed one is a credential */
    bool token_and_certificate;        /* both needed, not either (auth.credentials) */
    bool seq_api_create;               /* PUT /seq/{name} creates (sequences.api_create) */
    uint32_t seq_burst_wait_ms;        /* a /seq burst parks this long at most (0: refused) */
} api_options;

typedef struct api_ctx {
    api_options opt;
    sf_gen *const *gens; /* Snowflake IDs: one, or one per loop with per_thread_worker_ids */
    unsigned ngens;      /* also the count of each gens128[f] */
    sf_gen *const *gens128[2]; /* UUIDv7 and ULID, by sf_id128_format, ngens each */
    sf_gen *const *all_gens;   /* all of the above, for readiness and metrics */
    unsigned nall_gens;
    const sf_lease_keeper *keeper;
    sf_identity *identity; /* the daemon's (readiness, metrics); NULL in process */
    http_server *http;
    net_server *net;
    perloop loops;          /* api_loop, one per net loop */
    _Atomic bool listening; /* set once every listener is up */
    cache_store *cache;     /* NULL when cache.enabled is false */
    memcache_server *mc;    /* the memcached listener's (metrics), or NULL */
    cache_persist *persist; /* NULL unless cache.persist */
    const byte_budget *inflight; /* bytes held for requests being received (metrics), or NULL */
    seq_table *seq;              /* segment mode's namespaces (api/seq.c), or NULL: no routes */
} api_ctx;

/* Registers every route on the HTTP server. Returns 0 or -1. */
int api_register(http_server *http, api_ctx *ctx);

/* Handlers, by file. */
void api_id(http_request *r, void *ctx);
void api_ids(http_request *r, void *ctx);
void api_id_parse(http_request *r, void *ctx);
void api_uuid(http_request *r, void *ctx);  /* /uuid and /uuids */
void api_ulid(http_request *r, void *ctx);  /* /ulid and /ulids */
void api_uuid_parse(http_request *r, void *ctx);
void api_ulid_parse(http_request *r, void *ctx);
void api_typeid(http_request *r, void *ctx); /* /typeid and /typeids */
void api_typeid_parse(http_request *r, void *ctx);
const char *api_format_name(sf_id128_format f); /* "uuid7", "ulid": the metrics' label */
void api_bounds(http_request *r, void *ctx);
void api_healthz(http_request *r, void *ctx);
void api_readyz(http_request *r, void *ctx);
void api_metrics(http_request *r, void *ctx);
void api_cache(http_request *r, void *ctx);
/* The Allow value of a 405 on a /cache/ path: POST for KEY/incr and KEY/decr, GET, HEAD, PUT,
 * DELETE otherwise (the route's allow hook: its methods differ by path). */
const char *api_cache_allow(http_str path);
void api_echo(http_request *r, void *ctx);
/* Segment mode (api/seq.c): /seq/{name}, /seqs/{name}, /sequences and their metrics; registered
 * by api_register when ctx->seq is set. */
void api_seq(http_request *r, void *ctx);
void api_sequences(http_request *r, void *ctx);
void api_seq_metrics(prom_buf *b, api_ctx *a);
int api_seq_register(http_server *http, api_ctx *a);

/* Access control, the HTTP server's guard (an api_ctx as ctx) for the routes api_register marks:
 * with a token or client certificates configured, writes (and with protect_reads, reads) need
 * "Authorization: Bearer <token>" (compared in constant time) or a connection whose client
 * certificate is listed (conn_peer_listed: decided at the handshake, one load here); with
 * token_and_certificate, both. Otherwise this answers 401 with WWW-Authenticate when the token
 * could still let the request in, else 403, counts the failure and returns false. Health and
 * readiness are open. */
bool api_auth(http_request *r, bool write, void *ctx);
/* The same for a resource with a token of its own (a sequence namespace's): "Authorization:
 * Bearer" with that token or auth.token lets it through (a listed client certificate too, as
 * for auth.token); else 401 with WWW-Authenticate answered, counted, false. token_sha256 (64
 * hex digits) instead of token: the token is known by its SHA-256 only. */
bool api_auth_token(http_request *r, api_ctx *a, const char *token, size_t token_len,
                    const char *token_sha256);

/* Why this instance should not get traffic now, or NULL (for /readyz). */
const char *api_not_ready_reason(api_ctx *a);
/* The most bytes one ID takes in a batch's body: the longest text (a TypeID with a 63-character
 * prefix, 90), quoted, with a comma. */
#define API_ID_BODY_MAX (SF_TYPEID_TEXT_MAX + 3)
/* Scratch bytes /ids, /uuids, /ulids or /typeids need for count IDs (app_http_limits sizes the
 * HTTP scratch with it): per ID, a 128-bit ID and its longest text in the body. */
static inline size_t api_ids_scratch_bytes(uint32_t count)
{
    return (size_t)count * (sizeof(sf_id128) + API_ID_BODY_MAX) + 64;
}

/* The answer of every ID route that issues (/id, /ids, /uuid, /uuids, /ulid, /ulids, /typeid,
 * /typeids). A batch is
 * built in the loop's scratch (http_scratch, sized for max_batch at start; nothing allocated):
 * the count IDs first, then the body after them; /id writes its one ID into a stack buffer of
 * API_ONE_BODY_MAX instead (the hottest route). JSON {"id":X} for one ID, {"ids":[X,...]} for a
 * batch (list), X quoted unless the IDs go as bare numbers; text: the IDs, each followed by a
 * newline in a batch. Use: ids = api_batch_begin(...) (or api_batch_open on a buffer of one's
 * own); fill ids; for each ID, p = api_batch_item(&b), write its text at p, api_batch_put(&b,
 * its length); then api_batch_respond. */
#define API_ONE_BODY_MAX 64 /* {"id":"<36-character UUID>"} and the separator, with room */
typedef struct api_batch {
    char *body;  /* where the body is built */
    size_t n;    /* body bytes so far */
    bool text;   /* text/plain, else JSON */
    bool list;   /* {"ids":[...]}, a newline after each ID in text; else {"id":X} */
    bool quote;  /* JSON strings, not bare numbers */
    char sep;    /* after each ID: ',' (JSON: the last one is taken back), '\n', or none */
} api_batch;

void api_batch_too_large(http_request *r); /* 500: the scratch was sized for fewer IDs */

/* Starts the body at body (room for the IDs' text: API_ONE_BODY_MAX for one ID). The writer is
 * inline: the IDs' loop stays tight and b in registers. */
static inline void api_batch_open(api_batch *b, char *body, bool text, bool list, bool quote)
{
    *b = (api_batch){.body = body,
                     .text = text,
                     .list = list,
                     .quote = !text && quote,
                     .sep = !text ? ',' : list ? '\n' : 0};
    if (!text && list)
        memcpy(b->body, "{\"ids\":[", b->n = 8);
    else if (!text)
        memcpy(b->body, "{\"id\":", b->n = 6);
}
/* A batch: the loop's scratch holds the IDs (count of elem bytes, aligned for any ID type), then
 * the body, opened. Returns the IDs' array, or NULL with 500 answered when the scratch cannot
 * hold them (only a sizing bug gets there). */
static inline void *api_batch_begin(http_request *r, api_batch *b, size_t elem, uint32_t count,
                                    bool text, bool list, bool quote)
{
    size_t size;
    char *scratch = http_scratch(r, &size);
    if (elem > sizeof(sf_id128) || api_ids_scratch_bytes(count) > size) {
        api_batch_too_large(r);
        return NULL;
    }
    api_batch_open(b, scratch + elem * count, text, list, quote);
    return scratch;
}
/* Where the next ID's text goes (after its opening quote). */
static inline char *api_batch_item(api_batch *b)
{
    if (b->quote)
        b->body[b->n++] = '"';
    return b->body + b->n;
}
/* The ID's text of len bytes is written at api_batch_item's pointer. */
static inline void api_batch_put(api_batch *b, size_t len)
{
    b->n += len;
    if (b->quote)
        b->body[b->n++] = '"';
    if (b->sep)
        b->body[b->n++] = b->sep;
}
/* Closes the JSON and answers 200. At least one ID was put. */
static inline void api_batch_respond(http_request *r, api_batch *b)
{
    if (b->text) {
        http_respond(r, 200, "text/plain; charset=utf-8", NULL, b->body, b->n);
        return;
    }
    b->n--; /* the last ',' */
    if (b->list)
        b->body[b->n++] = ']';
    b->body[b->n++] = '}';
    http_respond(r, 200, "application/json", NULL, b->body, b->n);
}

/* Shared by the ID handlers (api/id.c). Each answers the error itself and returns -1 on bad
 * input. */
int api_text_wanted(http_request *r, bool *text);                 /* ?format=, Accept */
int api_count_param(http_request *r, uint32_t max, uint32_t *count); /* ?count=1..max */
void api_refuse(http_request *r, sf_gen *g, int rc);             /* 503 + Retry-After */
/* ?json_ids=number|string for Snowflake IDs in encoding enc (snowflake.json_ids without it). */
int api_json_ids_option(http_request *r, const api_ctx *a, sf_encoding enc, bool *numbers);
#define API_PARSE_FUTURE_SLACK_MS 60000 /* clocks of other replicas may run a little ahead */
/* The generator of the request's loop among gens (one, or one per loop). */
static inline sf_gen *api_gen_for(sf_gen *const *gens, unsigned ngens, const http_request *r)
{
    return ngens > 1 ? gens[r->loop_index] : gens[0];
}

#endif
