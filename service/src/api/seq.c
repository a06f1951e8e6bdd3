/* Segment mode over HTTP: /seq/{name}, /seqs/{name}?count=N and /sequences (docs/sequences.md).
 *
 * /seq/{name} answers like /id: {"id":N} or the number and a newline as text; /seqs/{name} like
 * /ids: {"ids":[...]} or one number per line. Numbers are JSON numbers unless ?json_ids=string.
 * A namespace with its own token needs "Authorization: Bearer <that token>" (or auth.token);
 * one without follows /id's rule (open unless auth.protect_reads). Refusals: 503 with
 * Retry-After when the namespace has no number in hand (a burst beyond both blocks that waited
 * in vain, a block reserve that failed, a fence), 410 when it is past its max, 400 for a count no
 * two blocks can ever hold. Nothing here blocks: the numbers are in memory, the blocks are
 * reserved elsewhere.
 *
 * A burst that finds both blocks used up waits briefly instead of being refused at once: the
 * request is parked (http_defer: its connection held, the loop free) in the loop's park
 * (api_seq_park, 256 slots), retried every millisecond on the loop's timing wheel, answered as
 * soon as numbers are there, or with the 503 it would have had once sequences.burst_wait_ms has
 * passed (at once when the park is full, when the wait is 0, or when the server drains). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "llhttp.h"
#include "obs/prom.h"
#include "seq/seq.h"
#include "util/bearer.h"
#include "util/counter.h"
#include "util/fmt.h"
#include "util/jsonstrict.h"
#include "util/sha256.h"

#define SEQ_PREFIX  "/seq/"
#define SEQS_PREFIX "/seqs/"

/* The namespace the path names, or NULL with 404 answered (or 401 first under the read rule:
 * which namespaces exist is not told to whom the rule refuses). */
static seq_ns *ns_of(http_request *r, api_ctx *a, size_t prefix)
{
    const char *name = r->path.p + prefix;
    size_t len = r->path.len - prefix;
    seq_ns *ns = seq_find(a->seq, name, len);
    if (!ns && api_auth(r, false, a)) {
        char msg[128];
        snprintf(msg, sizeof msg, "no sequence namespace \"%.*s\"",
                 seq_name_valid(name, len) ? (int)len : 0, name);
        http_respond_error(r, 404, msg, NULL);
    }
    return ns;
}

/* The namespace's token, or the route's usual rule. false with 401 answered. */
static bool allowed(http_request *r, api_ctx *a, const seq_ns *ns)
{
    if (ns->token_len)
        return api_auth_token(r, a, ns->token, ns->token_len, NULL);
    if (ns->def.token_sha256[0])
        return api_auth_token(r, a, NULL, 0, ns->def.token_sha256);
    return api_auth(r, false, a);
}

/* The refusal's words are seq_refusal's, which the memcached ID keys answer with too. */
static void refuse(http_request *r, seq_ns *ns, seq_take_result res)
{
    if (res == SEQ_R_EMPTY) /* counted once per answer: the park's takes are quiet */
        counter_add(&ns->stats.refused, 1);
    char msg[320];
    int status = seq_refusal(ns, res, msg, sizeof msg);
    http_respond_error(r, status, msg, status == 503 ? "Retry-After: 1\r\n" : NULL);
}

/* ?json_ids=number (the default) or string. Answers 400 and returns -1 on a bad value. */
static int quoted_option(http_request *r, bool *quote)
{
    http_str v;
    *quote = false;
    if (!http_query_param(r, "json_ids", &v))
        return 0;
    if (v.len == 6 && memcmp(v.p, "string", 6) == 0)
        *quote = true;
    else if (!(v.len == 6 && memcmp(v.p, "number", 6) == 0)) {
        http_respond_error(r, 400, "json_ids must be number or string", NULL);
        return -1;
    }
    return 0;
}

/* PUT /seq/{name}: creates a namespace (the admin token required). The body is a JSON object of
 * the configuration's fields but name (start, block, max, adaptive, block_min, block_max,
 * token: kept as its SHA-256 only, in memory and in the store). The
 * source stores it on its own thread: 202 Accepted, live once stored (/sequences says; GET
 * answers 503 "being created" until then). 200 when it exists with this definition, 409 with
 * another, 400 a bad one, 507 a full table. */
static void create(http_request *r, api_ctx *a)
{
    if (!api_auth(r, true, a)) /* a write: with a token configured, it is needed */
        return;
    if (!a->opt.seq_api_create || !a->opt.token_len) {
        http_respond_error(r, 403,
                           "creating sequence namespaces is off (sequences.api_create, with "
                           "auth.token)",
                           NULL);
        return;
    }
    const char *name = r->path.p + sizeof SEQ_PREFIX - 1;
    size_t len = r->path.len - (sizeof SEQ_PREFIX - 1);
    char body[4096], msg[320];
    seq_ns_def d = {.start = 1, .block = 1000};
    if (!seq_name_valid(name, len)) {
        http_respond_error(r, 400,
                           "a namespace name is 1 to 64 of A-Z a-z 0-9 _ . -, the first a letter "
                           "or digit",
                           NULL);
        return;
    }
    memcpy(d.name, name, len);
    if (r->body_len >= sizeof body) {
        http_respond_error(r, 413, "a namespace definition is at most 4095 bytes", NULL);
        return;
    }
    size_t n = 0;
    for (const obuf_chunk *c = r->body ? r->body->head : NULL; c; c = c->next) {
        memcpy(body + n, c->data + c->start, c->end - c->start);
        n += c->end - c->start;
    }
    const char *why, *bad = NULL;
    size_t at;
    cJSON *o = json_strict_parse(body, n, &why, &at); /* one object: nothing after, no \u0000 */
    const cJSON *twin = json_strict_twin(o);
    if (!o || twin) {
        if (o) /* named when it is a name: the key is the client's bytes */
            snprintf(msg, sizeof msg, "field %.16s is given twice",
                     strspn(twin->string, "abcdefghijklmnopqrstuvwxyz_") == strlen(twin->string)
                         ? twin->string
                         : "(a key)");
        else
            snprintf(msg, sizeof msg, "the body must be a JSON object: %s at byte %zu", why, at);
        bad = msg;
    } else if (!cJSON_IsObject(o)) {
        bad = "the body must be a JSON object";
    }
    for (const cJSON *it = o ? o->child : NULL; !bad && it; it = it->next) {
        const char *f = it->string;
        double v = it->valuedouble;
        uint64_t *num = strcmp(f, "start") == 0       ? &d.start
                        : strcmp(f, "max") == 0       ? &d.max
                        : strcmp(f, "block") == 0     ? &d.block
                        : strcmp(f, "block_min") == 0 ? &d.block_min
                        : strcmp(f, "block_max") == 0 ? &d.block_max
                                                      : NULL;
        if (num && cJSON_IsNumber(it) && v >= 0 && v <= 9007199254740992.0 &&
            v == (double)(uint64_t)v)
            *num = (uint64_t)v;
        else if (num)
            bad = "start, max, block, block_min and block_max are integers 0..2^53";
        else if (strcmp(f, "adaptive") == 0 && cJSON_IsBool(it))
            d.adaptive = cJSON_IsTrue(it);
        else if (strcmp(f, "token") == 0 && cJSON_IsString(it) &&
                 strlen(it->valuestring) >= 16 && strlen(it->valuestring) <= 255 &&
                 bearer_token_ok(it->valuestring, strlen(it->valuestring)))
            sha256_hex(it->valuestring, strlen(it->valuestring), d.token_sha256); /* kept so */
        else if (strcmp(f, "token") == 0)
            bad = "token must be a string of 16 to 255 bytes, " BEARER_RULE;
        else
            bad = "unknown or mistyped field: the fields are start, block, max, adaptive, "
                  "block_min, block_max, token";
    }
    cJSON_Delete(o);
    if (bad) {
        http_respond_error(r, 400, bad, NULL);
        return;
    }
    if (d.adaptive && d.block_min == 0) /* the configuration's defaults */
        d.block_min = d.block;
    if (d.adaptive && d.block_max == 0)
        d.block_max = d.block_min * 64;
    seq_ns *ns = NULL;
    switch (seq_table_create(a->seq, &d, &ns, msg, sizeof msg)) {
    case SEQ_C_BAD: http_respond_error(r, 400, msg, NULL); return;
    case SEQ_C_CONFLICT: http_respond_error(r, 409, msg, NULL); return;
    case SEQ_C_FULL: http_respond_error(r, 507, msg, NULL); return;
    case SEQ_C_REFUSED: http_respond_error(r, 503, msg, "Retry-After: 1\r\n"); return;
    case SEQ_C_SAME:
    case SEQ_C_ACCEPTED: break;
    }
    bool live = atomic_load(&ns->state) == SEQ_NS_LIVE;
    char loc[96], out[160];
    snprintf(loc, sizeof loc, "Location: /seq/%s\r\n", d.name);
    int m = snprintf(out, sizeof out, "{\"name\":\"%s\",\"state\":\"%s\"}", d.name,
                     live ? "live" : "creating");
    http_respond(r, live ? 200 : 202, "application/json", loc, out, (size_t)m);
}

/* One attempt: takes the numbers and answers them, or answers the refusal. SEQ_R_EMPTY with
 * may_wait leaves the request unanswered (the caller parks it, or keeps it parked); any other
 * result means it was answered (a 500 from a scratch too small included). */
static inline __attribute__((always_inline)) seq_take_result
serve(http_request *r, const api_seq_parked *w, bool may_wait)
{
    api_batch b;
    char one[API_ONE_BODY_MAX];
    uint64_t first, *nums = &first;
    if (w->batch) {
        nums = api_batch_begin(r, &b, sizeof *nums, w->count, w->text, true, w->quote);
        if (!nums)
            return SEQ_R_OK; /* answered (500) */
    } else {
        api_batch_open(&b, one, w->text, false, w->quote);
    }
    seq_take_result res;
    if (r->head_only) { /* describes a GET without spending numbers: its refusal, or the next */
        uint64_t next = 0;
        res = seq_peek(w->ns, w->count, &next);
        for (uint32_t i = 0; res == SEQ_R_OK && i < w->count; i++)
            nums[i] = next + i;
    } else {
        res = seq_take_quiet(w->ns, nums, w->count);
    }
    if (res == SEQ_R_EMPTY && may_wait)
        return res;
    if (res != SEQ_R_OK) {
        refuse(r, w->ns, res);
        return res;
    }
    for (uint32_t i = 0; i < w->count; i++) {
        char *p = api_batch_item(&b);
        api_batch_put(&b, fmt_u64(p, nums[i]));
    }
    api_batch_respond(r, &b);
    return SEQ_R_OK;
}

/* ---- the park ------------------------------------------------------------------------------ */

#define PARK_TICK_MS 1

static api_seq_park *park_of(api_ctx *a, unsigned loop_index)
{
    return &((api_loop *)perloop_at(&a->loops, loop_index))->seq_park;
}

/* Drops the entries whose request is gone (answered, or cancelled), keeping arrival order. */
static void park_compact(api_seq_park *p)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < p->n; i++)
        if (p->e[i].d)
            p->e[k++] = p->e[i];
    p->n = k;
    atomic_store_explicit(&p->parked, k, memory_order_relaxed);
}

static void park_arm(api_seq_park *p)
{
    uint64_t at = uv_now(&p->loop->uv) + PARK_TICK_MS;
    wheel_add(&p->loop->wheel, &p->tick, at);
    net_loop_arm_wheel(p->loop, at);
}

/* The connection of a parked request closed (http_defer's cancel, from its close callback):
 * the entry is only marked, the tick drops it, so that the park never changes under a tick. */
static void park_cancel(http_request *d, void *arg)
{
    api_seq_park *p = arg;
    for (uint32_t i = 0; i < p->n; i++)
        if (p->e[i].d == d) {
            p->e[i].d = NULL;
            break;
        }
}

/* Every PARK_TICK_MS while the park holds something: each request, oldest first, is served if
 * numbers are there now, refused at its deadline, refused at once when the server drains. A
 * namespace found dry for some count is not asked again in the same tick for as many or more
 * (a full park of one namespace costs one take per tick, not 256). */
static void park_tick(wheel_timer *t)
{
    api_seq_park *p = (api_seq_park *)(void *)((char *)t - offsetof(api_seq_park, tick));
    uint64_t now = uv_now(&p->loop->uv);
    bool draining = p->loop->draining;
    const seq_ns *dry = NULL;
    uint32_t dry_count = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        api_seq_parked w = p->e[i];
        if (!w.d || (w.ns == dry && w.count >= dry_count && now < w.deadline && !draining))
            continue;
        seq_take_result res;
        if (draining) {
            char msg[160];
            snprintf(msg, sizeof msg, "namespace %s has no number in hand and the server is "
                     "shutting down", w.ns->def.name);
            http_respond_error(w.d, 503, msg, "Retry-After: 1\r\n");
            res = SEQ_R_EMPTY;
        } else {
            res = serve(w.d, &w, now < w.deadline);
            if (res == SEQ_R_EMPTY && now < w.deadline) { /* still waiting */
                dry = w.ns;
                dry_count = w.count;
                continue;
            }
        }
        p->e[i].d = NULL; /* answered: its cancel never comes */
        counter_add(res == SEQ_R_OK ? &p->served : &p->refused, 1);
    }
    park_compact(p);
    if (p->n)
        park_arm(p);
}

/* SEQ_R_EMPTY: the request waits in the loop's park, or is refused at once (no slot left). */
static void park(http_request *r, api_ctx *a, const api_seq_parked *w)
{
    api_seq_park *p = park_of(a, r->loop_index);
    if (!p->loop) {
        p->loop = conn_loop(r->conn);
        wheel_timer_init(&p->tick, park_tick);
    }
    if (p->n == API_SEQ_PARK_SLOTS)
        park_compact(p);
    http_request *d = p->n < API_SEQ_PARK_SLOTS ? http_defer(r, park_cancel, p) : NULL;
    if (!d) {
        if (p->n == API_SEQ_PARK_SLOTS)
            counter_add(&p->full, 1);
        refuse(r, w->ns, SEQ_R_EMPTY);
        return;
    }
    api_seq_parked *e = &p->e[p->n++];
    *e = *w;
    e->d = d;
    e->deadline = uv_now(&p->loop->uv) + a->opt.seq_burst_wait_ms;
    atomic_store_explicit(&p->parked, p->n, memory_order_relaxed);
    if (!wheel_is_scheduled(&p->tick))
        park_arm(p);
}

void api_seq(http_request *r, void *ctx)
{
    api_ctx *a = ctx;
    if (r->method == HTTP_PUT) { /* only /seq/ takes it */
        create(r, a);
        return;
    }
    bool batch = r->path.len >= sizeof SEQS_PREFIX - 1 &&
                 memcmp(r->path.p, SEQS_PREFIX, sizeof SEQS_PREFIX - 1) == 0;
    seq_ns *ns = ns_of(r, a, batch ? sizeof SEQS_PREFIX - 1 : sizeof SEQ_PREFIX - 1);
    bool text, quote;
    uint32_t count = 1;
    if (!ns || !allowed(r, a, ns) || api_text_wanted(r, &text) != 0 ||
        quoted_option(r, &quote) != 0 ||
        (batch && api_count_param(r, a->opt.max_batch, &count) != 0))
        return;
    api_seq_parked w = {.ns = ns, .count = count, .batch = batch, .text = text, .quote = quote};
    /* HEAD spends nothing and answers what a GET would: one that finds no number in hand waits
     * in the park as a GET would, and is answered 200 once the block in flight arrives */
    if (serve(r, &w, a->opt.seq_burst_wait_ms != 0) == SEQ_R_EMPTY)
        park(r, a, &w);
}

/* GET /sequences: every namespace, its definition and what it holds (the operator's view). */
void api_sequences(http_request *r, void *ctx)
{
    api_ctx *a = ctx;
    size_t cap;
    char *out = http_scratch(r, &cap);
    size_t n = 0;
    unsigned count = seq_count(a->seq);
    n += (size_t)snprintf(out + n, cap - n, "{\"source\":\"%s\",\"namespaces\":[",
                          a->seq->src.kind);
    for (unsigned i = 0; i < count && n < cap; i++) {
        seq_ns *ns = seq_at(a->seq, i);
        int state = atomic_load(&ns->state);
        char err[160];
        seq_last_error(ns, err, sizeof err);
        for (char *p = err; *p; p++)
            if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
                *p = '\'';
        const seq_ns_def *d = &ns->def;
        char max[24] = "null"; /* none */
        if (d->max != UINT64_MAX - 1)
            snprintf(max, sizeof max, "%llu", (unsigned long long)d->max);
        n += (size_t)snprintf(
            out + n, cap - n,
            "%s{\"name\":\"%s\",\"start\":%llu,\"max\":%s,\"block\":%llu,\"adaptive\":%s,"
            "\"block_min\":%llu,\"block_max\":%llu,\"token\":%s,\"state\":\"%s\","
            "\"remaining\":%llu,\"issued\":%llu,\"blocks\":%llu,\"last_error\":\"%s\"}",
            i ? "," : "", d->name, (unsigned long long)d->start, max,
            (unsigned long long)d->block, d->adaptive ? "true" : "false",
            (unsigned long long)d->block_min, (unsigned long long)d->block_max,
            ns->token_len || ns->def.token_sha256[0] ? "true" : "false",
            state == SEQ_NS_LIVE ? "live" : state == SEQ_NS_CREATING ? "creating" : "failed",
            (unsigned long long)seq_remaining(ns),
            (unsigned long long)counter_get(&ns->stats.issued),
            (unsigned long long)counter_get(&ns->stats.blocks), err);
    }
    if (n + 3 > cap) {
        http_respond_error(r, 500, "the namespaces exceed the response buffer", NULL);
        return;
    }
    n += (size_t)snprintf(out + n, cap - n, "]}");
    http_respond(r, 200, "application/json", NULL, out, n);
}

static uint64_t max_of(seq_ns *ns)
{
    return ns->def.max == UINT64_MAX - 1 ? UINT64_MAX : ns->def.max; /* UINT64_MAX: none */
}

/* One gauge family: get's value per live namespace, none where it returns UINT64_MAX. */
static void gauge(prom_buf *b, seq_table *t, const char *name, const char *help,
                  uint64_t (*get)(seq_ns *))
{
    char labels[160];
    prom_family(b, name, "gauge", help);
    for (unsigned i = 0, count = seq_count(t); i < count; i++) {
        seq_ns *ns = seq_at(t, i);
        uint64_t v;
        if (atomic_load(&ns->state) != SEQ_NS_LIVE || (v = get(ns)) == UINT64_MAX)
            continue;
        snprintf(labels, sizeof labels, "namespace=\"%s\"", ns->def.name);
        prom_u64(b, name, labels, v);
    }
}

void api_seq_metrics(prom_buf *b, api_ctx *a)
{
    seq_table *t = a->seq;
    unsigned count = seq_count(t);
    char labels[160];
    static const struct {
        const char *name, *help;
        size_t off;
    } counters[] = {
        {"snowflaked_seq_issued_total", "Sequence numbers issued, by namespace.",
         offsetof(seq_ns_stats, issued)},
        {"snowflaked_seq_blocks_total", "Blocks reserved from the block source, by namespace.",
         offsetof(seq_ns_stats, blocks)},
        {"snowflaked_seq_block_numbers_total",
         "Numbers in the blocks reserved (issued plus held plus lost to crashes), by namespace.",
         offsetof(seq_ns_stats, block_numbers)},
        {"snowflaked_seq_block_failures_total",
         "Block reserves that failed (full disk, store unreachable) or were refused, by namespace.",
         offsetof(seq_ns_stats, fetch_failures)},
        {"snowflaked_seq_refused_total",
         "Requests answered 503 because the namespace had no number in hand, by namespace.",
         offsetof(seq_ns_stats, refused)},
        {"snowflaked_seq_fenced_total",
         "Requests answered 503 because this node was past the source's fence, by namespace.",
         offsetof(seq_ns_stats, fenced)},
        {"snowflaked_seq_store_ops_total",
         "Round trips (etcd) or fsync'd writes (file) the block reserves cost, by namespace.",
         offsetof(seq_ns_stats, store_ops)},
    };
    for (size_t c = 0; c < sizeof counters / sizeof *counters; c++) {
        prom_family(b, counters[c].name, "counter", counters[c].help);
        for (unsigned i = 0; i < count; i++) {
            seq_ns *ns = seq_at(t, i);
            if (atomic_load(&ns->state) != SEQ_NS_LIVE)
                continue;
            snprintf(labels, sizeof labels, "namespace=\"%s\"", ns->def.name);
            prom_u64(b, counters[c].name, labels,
                     counter_get((_Atomic uint64_t *)((char *)&ns->stats + counters[c].off)));
        }
    }
    uint64_t park[4] = {0};
    for (unsigned i = 0; i < perloop_count(&a->loops); i++) {
        const api_seq_park *p = &((const api_loop *)perloop_at(&a->loops, i))->seq_park;
        park[0] += counter_get(&p->parked);
        park[1] += counter_get(&p->served);
        park[2] += counter_get(&p->refused);
        park[3] += counter_get(&p->full);
    }
    prom_family(b, "snowflaked_seq_parked", "gauge",
                "Requests waiting for a block now (parked for at most sequences.burst_wait_ms).");
    prom_u64(b, "snowflaked_seq_parked", NULL, park[0]);
    prom_family(b, "snowflaked_seq_parked_served_total", "counter",
                "Parked requests answered with numbers once a block arrived.");
    prom_u64(b, "snowflaked_seq_parked_served_total", NULL, park[1]);
    prom_family(b, "snowflaked_seq_parked_refused_total", "counter",
                "Parked requests answered 503: no block within sequences.burst_wait_ms, or a "
                "drain.");
    prom_u64(b, "snowflaked_seq_parked_refused_total", NULL, park[2]);
    prom_family(b, "snowflaked_seq_park_full_total", "counter",
                "Requests refused at once (503) because all 256 park slots of their loop were in "
                "use.");
    prom_u64(b, "snowflaked_seq_park_full_total", NULL, park[3]);
    gauge(b, t, "snowflaked_seq_remaining",
          "Numbers held in memory and not yet issued (current and next block), by namespace.",
          seq_remaining);
    gauge(b, t, "snowflaked_seq_max",
          "The namespace's max, the last number it may issue (absent when it has none), by "
          "namespace.",
          max_of);
    gauge(b, t, "snowflaked_seq_block_end",
          "The end (exclusive) of the furthest block this node holds, by namespace.",
          seq_block_end);
    prom_family(b, "snowflaked_seq_block_fetch_seconds", "histogram",
                "Time from asking the block source for a block to its answer, by namespace.");
    for (unsigned i = 0; i < count; i++) {
        seq_ns *ns = seq_at(t, i);
        if (atomic_load(&ns->state) != SEQ_NS_LIVE)
            continue;
        uint64_t cum = 0;
        for (unsigned k = 0; k <= SEQ_LATENCY_BUCKETS; k++) {
            cum += counter_get(&ns->stats.latency[k]);
            if (k < SEQ_LATENCY_BUCKETS)
                snprintf(labels, sizeof labels, "namespace=\"%s\",le=\"%g\"", ns->def.name,
                         seq_latency_bounds[k]);
            else
                snprintf(labels, sizeof labels, "namespace=\"%s\",le=\"+Inf\"", ns->def.name);
            prom_u64(b, "snowflaked_seq_block_fetch_seconds_bucket", labels, cum);
        }
        snprintf(labels, sizeof labels, "namespace=\"%s\"", ns->def.name);
        prom_f64(b, "snowflaked_seq_block_fetch_seconds_sum", labels,
                 (double)counter_get(&ns->stats.latency_sum_us) / 1e6);
        prom_u64(b, "snowflaked_seq_block_fetch_seconds_count", labels, cum);
    }
    if (t->src.metrics) /* the source's own (etcd: claims by result) */
        t->src.metrics(t->src.ctx, b);
}

int api_seq_register(http_server *http, api_ctx *a)
{
    const uint32_t get = HTTP_M(HTTP_GET);
    /* The guard is skipped (HTTP_AUTH_NONE): the handler applies the namespace's token or the
     * read rule itself, once it knows the namespace. */
    const http_route routes[] = {
        {.path = "/seq/", /* literal paths: test_openapi.py reads them */
         .prefix = true,
         .wants_body = true, /* PUT: the definition */
         .methods = get | HTTP_M(HTTP_PUT),
         .handler = api_seq,
         .ctx = a},
        {.path = "/seqs/", .prefix = true, .methods = get, .handler = api_seq, .ctx = a},
        {.path = "/sequences", .methods = get, .auth = HTTP_AUTH_READ, .handler = api_sequences,
         .ctx = a},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (http_server_route(http, &routes[i]) != 0)
            return -1;
    return 0;
}
