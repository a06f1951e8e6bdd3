/* The etcd block source (cluster/seq_etcd.h; docs/sequences.md "On a fleet"). */
#include "cluster/seq_etcd.h"

#include <cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/etcd_client.h"
#include "obs/log.h"
#include "obs/prom.h"
#include "snowflake/rng.h"
#include "util/counter.h"
#include "util/decimal.h"

#define KEY_MAX       (PREFIX_KEY_MAX + SEQ_NAME_MAX + 16)
#define QUEUE_CAP     (2 * SEQ_MAX_NAMESPACES) /* a reserve and a create per namespace at most */
#define CLAIM_TRIES   8 /* counter compares lost in a row before a reserve fails (retried later) */
#define START_NAP_MS  100 /* between start-up attempts (declare, list) while etcd does not answer */
#define DEF_VALUE_MAX 512

enum { JOB_RESERVE, JOB_CREATE, JOB_RELEASE };
/* claims_total{result}: one per claim transaction, plus recovered per unknown one found ours */
enum { CL_OK, CL_CONFLICT, CL_UNKNOWN, CL_RECOVERED, CL_FAILED, CL_COUNT };
static const char *const claim_results[CL_COUNT] = {"ok", "conflict", "unknown", "recovered",
                                                    "failed"};
enum { GB_OK, GB_MOVED, GB_FAILED, GB_COUNT };
static const char *const giveback_results[GB_COUNT] = {"ok", "moved", "failed"};

typedef struct se_job {
    int kind;
    unsigned id;
    uint64_t want, from, hi; /* reserve; release */
    seq_ns_def def;          /* create */
    seq_done_fn done;
    void *arg;
    /* release: the main thread waits for finished (under mu) */
    bool finished;
    int rc;
    char *err;
    size_t errlen;
} se_job;

/* A namespace as the source's thread sees it (the main thread's at declare, before any job). */
typedef struct se_ns {
    bool known;
    seq_ns_def def;
    char key[KEY_MAX]; /* P/seq/next/<name> */
    bool cached;       /* mod_rev and next are the counter as last read or written */
    int64_t mod_rev;
    uint64_t next;
    bool last_ours;    /* our write is the counter's mod_rev (release may give back) */
    bool pending;      /* a claim whose answer was lost, not resolved yet */
    uint64_t p_nonce, p_lo, p_hi;
    int64_t p_base; /* the mod_revision that claim compared */
} se_ns;

struct seq_etcd_source {
    seq_etcd_config c;
    char endpoints[1024], prefix[PREFIX_KEY_MAX], auth_user[128], auth_file[1024];
    etcd_client *client;
    se_ns *ns; /* SEQ_MAX_NAMESPACES */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    se_job *queue;   /* QUEUE_CAP, a ring */
    se_job *release; /* a give-back the main thread waits for (on its stack), or NULL */
    unsigned head, n;
    bool stop, running;
    _Atomic uint64_t claims[CL_COUNT], givebacks[GB_COUNT], round_trips;
};

/* ---- values ----------------------------------------------------------------------------------- */

int seq_etcd_claim_encode(const seq_etcd_claim *c, char *out, size_t cap)
{
    int n = snprintf(out, cap,
                     "{\"v\":1,\"next\":\"%" PRIu64 "\",\"lo\":\"%" PRIu64 "\",\"hi\":\"%" PRIu64
                     "\",\"worker\":%" PRIu32 ",\"lease\":\"%016" PRIx64 "\",\"nonce\":\"%016" PRIx64
                     "\"}",
                     c->next, c->lo, c->hi, c->worker, c->lease, c->nonce);
    return n > 0 && (size_t)n < cap ? n : -1;
}

static bool json_dec(const cJSON *o, const char *field, uint64_t *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, field);
    return cJSON_IsString(j) && dec_parse_u64(j->valuestring, strlen(j->valuestring), UINT64_MAX, v);
}

static bool json_hex16(const cJSON *o, const char *field, uint64_t *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, field);
    if (!cJSON_IsString(j) || strlen(j->valuestring) != 16)
        return false;
    uint64_t x = 0;
    for (const char *p = j->valuestring; *p; p++) {
        int d = *p >= '0' && *p <= '9'   ? *p - '0'
                : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                                         : -1;
        if (d < 0)
            return false;
        x = x << 4 | (uint64_t)d;
    }
    *v = x;
    return true;
}

bool seq_etcd_claim_parse(const char *s, size_t len, seq_etcd_claim *out)
{
    cJSON *o = cJSON_ParseWithLength(s, len);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "v");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "worker");
    seq_etcd_claim c = {0};
    bool ok = cJSON_IsObject(o) && cJSON_IsNumber(v) && v->valuedouble == 1 && cJSON_IsNumber(w) &&
              w->valuedouble >= 0 && w->valuedouble <= UINT32_MAX &&
              w->valuedouble == (double)(uint32_t)w->valuedouble && json_dec(o, "next", &c.next) &&
              json_dec(o, "lo", &c.lo) && json_dec(o, "hi", &c.hi) &&
              json_hex16(o, "lease", &c.lease) && json_hex16(o, "nonce", &c.nonce) && c.lo <= c.hi;
    if (ok) {
        c.worker = (uint32_t)w->valuedouble;
        *out = c;
    }
    cJSON_Delete(o);
    return ok;
}

int seq_etcd_def_encode(const seq_ns_def *d, char *out, size_t cap)
{
    int n = snprintf(out, cap,
                     "{\"v\":1,\"start\":\"%" PRIu64 "\",\"max\":\"%" PRIu64 "\",\"block\":\"%" PRIu64
                     "\",\"adaptive\":%s,\"block_min\":\"%" PRIu64 "\",\"block_max\":\"%" PRIu64
                     "\",\"token_sha256\":\"%s\"}",
                     d->start, d->max, d->block, d->adaptive ? "true" : "false", d->block_min,
                     d->block_max, d->token_sha256);
    return n > 0 && (size_t)n < cap ? n : -1;
}

bool seq_etcd_def_parse(const char *s, size_t len, const char *name, seq_ns_def *out)
{
    cJSON *o = cJSON_ParseWithLength(s, len);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "v");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "adaptive");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "token_sha256");
    seq_ns_def d;
    memset(&d, 0, sizeof d);
    size_t tl = cJSON_IsString(t) ? strlen(t->valuestring) : 1;
    bool ok = cJSON_IsObject(o) && cJSON_IsNumber(v) && v->valuedouble == 1 && cJSON_IsBool(a) &&
              (tl == 0 || tl == SHA256_HEX_LEN) && json_dec(o, "start", &d.start) &&
              json_dec(o, "max", &d.max) && json_dec(o, "block", &d.block) &&
              json_dec(o, "block_min", &d.block_min) && json_dec(o, "block_max", &d.block_max) &&
              strlen(name) <= SEQ_NAME_MAX && seq_name_valid(name, strlen(name));
    for (size_t i = 0; ok && i < tl; i++) {
        char ch = t->valuestring[i];
        ok = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
    }
    if (ok) {
        d.adaptive = cJSON_IsTrue(a);
        memcpy(d.token_sha256, t->valuestring, tl + 1);
        snprintf(d.name, sizeof d.name, "%s", name);
        *out = d;
    }
    cJSON_Delete(o);
    return ok;
}

/* ---- etcd --------------------------------------------------------------------------------------- */

static uint64_t fresh_nonce(void)
{
    uint64_t r = 0;
    if (sf_rng_u64(&r) != 0 || r == 0) { /* never 0, never repeated in practice */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r ^= (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    }
    return r;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* At start, after an attempt etcd did not answer: naps, true while start_timeout_ms lasts. */
static bool start_retry(const seq_etcd_source *s, uint64_t started)
{
    if (mono_ms() + START_NAP_MS >= started + s->c.start_timeout_ms)
        return false;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = START_NAP_MS * 1000000L};
    nanosleep(&ts, NULL);
    return true;
}

static void describe(const etcd_error *e, char *why, size_t cap)
{
    snprintf(why, cap, "etcd %s: %s", e->endpoint[0] ? e->endpoint : "(none)", e->message);
}

static void def_key(const seq_etcd_source *s, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/seq/def/%s", s->prefix, name);
}

/* The counter's value for a write that grants [lo, hi) and leaves next. */
static int claim_value(seq_etcd_source *s, uint64_t next, uint64_t lo, uint64_t hi,
                       uint64_t nonce, char *out, size_t cap)
{
    sf_identity_owner o;
    seq_etcd_claim c = {.next = next, .lo = lo, .hi = hi, .nonce = nonce};
    if (sf_identity_etcd_owner(s->c.identity, &o)) {
        c.worker = o.worker;
        c.lease = (uint64_t)o.lease;
    }
    return seq_etcd_claim_encode(&c, out, cap);
}

/* Reads namespace ns's counter into its cache: 1 read (*claim filled), 0 absent, -1 no answer,
 * -2 a value that cannot be read (never retried: the numbers it covers are unknown). */
static int read_counter(seq_etcd_source *s, se_ns *ns, seq_etcd_claim *claim, uint64_t *ops,
                        char *why, size_t cap)
{
    etcd_range_result r;
    etcd_error e;
    (*ops)++;
    counter_add(&s->round_trips, 1);
    if (etcd_range(s->client, ns->key, NULL, &r, &e) != 0) {
        describe(&e, why, cap);
        return -1;
    }
    int rc = 0;
    if (r.n_kvs == 1) {
        if (!seq_etcd_claim_parse(r.kvs[0].value, r.kvs[0].value_len, claim)) {
            snprintf(why, cap, "%s: unreadable counter value (refusing to guess)", ns->key);
            rc = -2;
        } else {
            ns->cached = true;
            ns->mod_rev = r.kvs[0].mod_revision;
            ns->next = claim->next;
            ns->last_ours = false;
            rc = 1;
        }
    }
    etcd_range_result_free(&r);
    return rc;
}

/* An error answer of etcd that says the request was not applied: a refusal of its arguments,
 * token or permissions. Not "request timed out" or "leader changed" (UNAVAILABLE and the like):
 * such a proposal may still be applied. */
static bool refused_unapplied(const etcd_error *e)
{
    if (e->kind == ETCD_E_USAGE)
        return true;
    if (e->kind != ETCD_E_SERVER)
        return false;
    switch (e->grpc_code) {
    case ETCD_GRPC_INVALID_ARGUMENT:
    case ETCD_GRPC_NOT_FOUND:
    case ETCD_GRPC_PERMISSION_DENIED:
    case ETCD_GRPC_FAILED_PRECONDITION:
    case ETCD_GRPC_UNAUTHENTICATED:
        return true;
    default:
        return false;
    }
}

/* Commits t and frees it (one round trip counted). 0, or -1 with why and *sent: whether the
 * transaction may have been applied (sent, and no answer came back). */
static int commit(seq_etcd_source *s, etcd_txn *t, etcd_txn_result *r, bool *sent, char *why,
                  size_t cap)
{
    etcd_error e;
    counter_add(&s->round_trips, 1);
    int rc = etcd_txn_commit(s->client, t, r, &e);
    etcd_txn_free(t);
    if (rc != 0) {
        describe(&e, why, cap);
        if (sent)
            *sent = e.sent && !refused_unapplied(&e);
    }
    return rc;
}

/* ---- the thread's jobs ------------------------------------------------------------------------ */

typedef enum { TX_OK, TX_CONFLICT, TX_NOT_OURS, TX_UNKNOWN, TX_ERROR } tx_result;

/* One claim transaction of [lo, hi) (ns cached): counter unchanged AND our owner key. */
static tx_result claim_once(seq_etcd_source *s, se_ns *ns, const sf_identity_owner *o,
                            uint64_t lo, uint64_t hi, uint64_t nonce, char *why, size_t cap)
{
    char value[SEQ_ETCD_VALUE_MAX];
    seq_etcd_claim c = {.next = hi, .lo = lo, .hi = hi, .worker = o->worker,
                        .lease = (uint64_t)o->lease, .nonce = nonce};
    if (seq_etcd_claim_encode(&c, value, sizeof value) < 0) {
        snprintf(why, cap, "counter value too long");
        return TX_ERROR;
    }
    etcd_txn *t = etcd_txn_new();
    etcd_txn_compare_int(t, ns->key, ETCD_CMP_MOD, ETCD_CMP_EQUAL, ns->mod_rev);
    etcd_txn_compare_int(t, o->key, ETCD_CMP_LEASE, ETCD_CMP_EQUAL, o->lease);
    etcd_txn_compare_int(t, o->key, ETCD_CMP_CREATE, ETCD_CMP_EQUAL, o->create_revision);
    etcd_txn_put(t, ETCD_SUCCESS, ns->key, value, strlen(value), ETCD_NO_LEASE);
    etcd_txn_range(t, ETCD_FAILURE, ns->key, NULL);
    etcd_txn_result r;
    bool sent;
    if (commit(s, t, &r, &sent, why, cap) != 0) /* nothing sent: nothing happened */
        return sent ? TX_UNKNOWN : TX_ERROR;
    tx_result tr;
    if (r.succeeded) {
        ns->cached = true;
        ns->mod_rev = r.header.revision;
        ns->next = hi;
        ns->last_ours = true;
        tr = TX_OK;
    } else {
        const etcd_range_result *cur =
            r.n_responses == 1 && r.responses[0].kind == ETCD_RESP_RANGE ? &r.responses[0].range
                                                                          : NULL;
        seq_etcd_claim now;
        if (!cur || cur->n_kvs != 1) {
            snprintf(why, cap, "%s: the counter is gone from etcd", ns->key);
            ns->cached = false;
            tr = TX_ERROR;
        } else if (cur->kvs[0].mod_revision != ns->mod_rev) {
            ns->cached = false; /* someone else claimed: take their write as the new base */
            if (seq_etcd_claim_parse(cur->kvs[0].value, cur->kvs[0].value_len, &now)) {
                ns->cached = true;
                ns->mod_rev = cur->kvs[0].mod_revision;
                ns->next = now.next;
                /* our own nonce: this very claim applied already (a transport below us sent it
                 * twice); the block is ours */
                ns->last_ours = now.nonce == nonce && now.lo == lo && now.hi == hi;
            }
            tr = ns->last_ours ? TX_OK : TX_CONFLICT;
        } else {
            snprintf(why, cap,
                     "worker %" PRIu32 " is no longer this process's (its owner key changed): "
                     "no block claimed until the identity is renewed or re-claimed",
                     o->worker);
            tr = TX_NOT_OURS;
        }
    }
    etcd_txn_result_free(&r);
    return tr;
}

/* A claim whose answer was lost: resolved by reading the counter. 1 it happened (the block is
 * ours), 0 it did not (or someone claimed after it: that block is a hole), -1 still unknown. */
static int resolve_pending(seq_etcd_source *s, se_ns *ns, uint64_t *ops, char *why, size_t cap)
{
    seq_etcd_claim now;
    int got = read_counter(s, ns, &now, ops, why, cap);
    if (got < 0)
        return -1;
    ns->pending = false;
    if (got == 1 && now.nonce == ns->p_nonce && now.lo == ns->p_lo && now.hi == ns->p_hi) {
        counter_add(&s->claims[CL_RECOVERED], 1);
        ns->last_ours = true;
        return 1;
    }
    if (got == 1 && ns->mod_rev == ns->p_base)
        return 0; /* the counter is as the claim found it: it was not applied, no hole */
    LOG_WARN("sequences: namespace %s: a block claim's answer was lost and etcd does not show it "
             "(or a later claim): [%" PRIu64 ", %" PRIu64 ") is a hole at most, claiming afresh",
             ns->def.name, ns->p_lo, ns->p_hi);
    return 0;
}

static void do_reserve(seq_etcd_source *s, const se_job *j)
{
    se_ns *ns = &s->ns[j->id];
    char why[512] = "";
    seq_result r = {.status = SEQ_FAILED};
    if (!ns->known) {
        r.err = "namespace unknown to the etcd source";
        j->done(j->arg, &r);
        return;
    }
    if (ns->pending) {
        int got = resolve_pending(s, ns, &r.store_ops, why, sizeof why);
        if (got != 0) {
            if (got > 0) {
                r.status = SEQ_OK;
                r.lo = ns->p_lo;
                r.hi = ns->p_hi;
            } else {
                r.err = why;
            }
            j->done(j->arg, &r);
            return;
        }
    }
    for (unsigned attempt = 0; attempt < CLAIM_TRIES; attempt++) {
        sf_identity_owner o;
        if (!sf_identity_etcd_owner(s->c.identity, &o)) {
            r.err = "no worker slot held (identity not claimed, lapsed or lost): fenced";
            break;
        }
        seq_etcd_claim cur;
        if (!ns->cached) {
            int got = read_counter(s, ns, &cur, &r.store_ops, why, sizeof why);
            if (got <= 0) {
                if (got == 0)
                    snprintf(why, sizeof why, "%s: the counter is gone from etcd", ns->key);
                r.err = why;
                break;
            }
        }
        if (ns->next > ns->def.max) {
            r.status = SEQ_EXHAUSTED;
            break;
        }
        uint64_t left = ns->def.max - ns->next + 1; /* max < UINT64_MAX: no overflow */
        uint64_t n = j->want < left ? j->want : left;
        uint64_t lo = ns->next, hi = lo + n, nonce = fresh_nonce();
        r.store_ops++;
        tx_result tr = claim_once(s, ns, &o, lo, hi, nonce, why, sizeof why);
        if (tr == TX_OK) {
            counter_add(&s->claims[CL_OK], 1);
            r.status = SEQ_OK;
            r.lo = lo;
            r.hi = hi;
            break;
        }
        if (tr == TX_CONFLICT) {
            counter_add(&s->claims[CL_CONFLICT], 1);
            continue;
        }
        if (tr == TX_UNKNOWN) {
            /* Never re-sent: whether it happened is read from etcd (now, or at the next reserve) */
            counter_add(&s->claims[CL_UNKNOWN], 1);
            ns->pending = true;
            ns->p_nonce = nonce;
            ns->p_lo = lo;
            ns->p_hi = hi;
            ns->p_base = ns->mod_rev;
            ns->cached = false;
            char why2[512];
            int got = resolve_pending(s, ns, &r.store_ops, why2, sizeof why2);
            if (got > 0) {
                r.status = SEQ_OK;
                r.lo = lo;
                r.hi = hi;
                break;
            }
            if (got < 0) {
                snprintf(why + strlen(why), sizeof why - strlen(why),
                         "; the claim's outcome is unknown, read again at the next reserve");
                r.err = why;
                break;
            }
            continue; /* it did not happen: a fresh claim */
        }
        counter_add(&s->claims[CL_FAILED], 1);
        r.err = why;
        break;
    }
    if (r.status == SEQ_FAILED && !r.err)
        r.err = "lost the counter's compare-and-swap to other claimers too often (retried later)";
    j->done(j->arg, &r);
}

static void do_create(seq_etcd_source *s, const se_job *j)
{
    se_ns *ns = &s->ns[j->id];
    char dk[KEY_MAX], nk[KEY_MAX], dv[DEF_VALUE_MAX], cv[SEQ_ETCD_VALUE_MAX], why[512];
    seq_result r = {.status = SEQ_FAILED};
    seq_ns_def stored;
    def_key(s, j->def.name, dk, sizeof dk);
    snprintf(nk, sizeof nk, "%s/seq/next/%s", s->prefix, j->def.name);
    if (seq_etcd_def_encode(&j->def, dv, sizeof dv) < 0 ||
        claim_value(s, j->def.start, j->def.start, j->def.start, fresh_nonce(), cv, sizeof cv) < 0) {
        r.err = "definition too long";
        j->done(j->arg, &r);
        return;
    }
    /* Both absent: a counter of a namespace of another daemon's configuration is never reset */
    etcd_txn *t = etcd_txn_new();
    etcd_txn_compare_int(t, dk, ETCD_CMP_CREATE, ETCD_CMP_EQUAL, 0);
    etcd_txn_compare_int(t, nk, ETCD_CMP_CREATE, ETCD_CMP_EQUAL, 0);
    etcd_txn_put(t, ETCD_SUCCESS, dk, dv, strlen(dv), ETCD_NO_LEASE);
    etcd_txn_put(t, ETCD_SUCCESS, nk, cv, strlen(cv), ETCD_NO_LEASE);
    etcd_txn_range(t, ETCD_FAILURE, dk, NULL);
    etcd_txn_result tr;
    r.store_ops = 1;
    if (commit(s, t, &tr, NULL, why, sizeof why) != 0) {
        r.err = why;
    } else if (tr.succeeded) {
        ns->known = true;
        ns->def = j->def;
        snprintf(ns->key, sizeof ns->key, "%s", nk);
        ns->cached = true;
        ns->mod_rev = tr.header.revision;
        ns->next = j->def.start;
        ns->last_ours = false;
        ns->pending = false;
        r.status = SEQ_OK;
    } else {
        r.status = SEQ_EXISTS;
        const etcd_range_result *got =
            tr.n_responses == 1 && tr.responses[0].kind == ETCD_RESP_RANGE ? &tr.responses[0].range
                                                                           : NULL;
        if (got && got->n_kvs == 1 &&
            seq_etcd_def_parse(got->kvs[0].value, got->kvs[0].value_len, j->def.name, &stored)) {
            r.def = &stored;
            /* another daemon created it: with the same definition the core serves it, and its
             * counter is read at the first reserve */
            ns->known = true;
            ns->def = stored;
            snprintf(ns->key, sizeof ns->key, "%s", nk);
            ns->cached = false;
            ns->last_ours = false;
            ns->pending = false;
        }
        r.err = r.def ? "a namespace of that name exists"
                      : "a counter of that name exists in etcd (a namespace of a configuration)";
    }
    etcd_txn_result_free(&tr);
    j->done(j->arg, &r);
}

/* The rest [from, hi) back when the counter is still our last write (its mod_revision: nobody
 * claimed after us). Idempotent, so tried on more than one endpoint. */
static int do_release(seq_etcd_source *s, const se_job *j)
{
    se_ns *ns = &s->ns[j->id];
    if (!ns->known || !ns->cached || !ns->last_ours || ns->pending || ns->next != j->hi ||
        j->from >= j->hi) {
        counter_add(&s->givebacks[GB_MOVED], 1);
        return 0;
    }
    char value[SEQ_ETCD_VALUE_MAX], why[512] = "";
    if (claim_value(s, j->from, j->from, j->from, fresh_nonce(), value, sizeof value) < 0) {
        snprintf(j->err, j->errlen, "counter value too long");
        counter_add(&s->givebacks[GB_FAILED], 1);
        return -1;
    }
    size_t attempts = etcd_client_endpoint_count(s->client) + 1;
    for (size_t i = 0; i < attempts; i++) {
        etcd_txn *t = etcd_txn_new();
        etcd_txn_compare_int(t, ns->key, ETCD_CMP_MOD, ETCD_CMP_EQUAL, ns->mod_rev);
        etcd_txn_put(t, ETCD_SUCCESS, ns->key, value, strlen(value), ETCD_NO_LEASE);
        etcd_txn_result r;
        if (commit(s, t, &r, NULL, why, sizeof why) != 0)
            continue;
        bool ok = r.succeeded;
        int64_t rev = r.header.revision;
        etcd_txn_result_free(&r);
        if (!ok) { /* moved on (or our earlier attempt applied: then given back already) */
            counter_add(&s->givebacks[GB_MOVED], 1);
            return 0;
        }
        ns->mod_rev = rev;
        ns->next = j->from;
        ns->last_ours = false;
        counter_add(&s->givebacks[GB_OK], 1);
        LOG_INFO("sequences: namespace %s: [%" PRIu64 ", %" PRIu64 ") given back to etcd",
                 ns->def.name, j->from, j->hi);
        return 0;
    }
    counter_add(&s->givebacks[GB_FAILED], 1);
    snprintf(j->err, j->errlen, "%s", why);
    return -1;
}

static void *worker(void *arg)
{
    seq_etcd_source *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->n == 0 && !s->release && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->release) { /* the main thread waits for it (at a clean stop, nothing else runs) */
            se_job *j = s->release;
            pthread_mutex_unlock(&s->mu);
            int rc = do_release(s, j);
            pthread_mutex_lock(&s->mu);
            j->rc = rc;
            j->finished = true;
            s->release = NULL;
            pthread_cond_broadcast(&s->done_cv);
            continue;
        }
        if (s->n == 0)
            break;
        se_job j = s->queue[s->head];
        s->head = (s->head + 1) % QUEUE_CAP;
        s->n--;
        bool stopping = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stopping) { /* cancelled: etcd may be gone, and each call may take its timeout */
            seq_result r = {.status = SEQ_FAILED, .err = "stopping"};
            j.done(j.arg, &r);
        } else if (j.kind == JOB_RESERVE) {
            do_reserve(s, &j);
        } else {
            do_create(s, &j);
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int enqueue(seq_etcd_source *s, const se_job *j)
{
    pthread_mutex_lock(&s->mu);
    int rc = -1;
    if (s->running && !s->stop && s->n < QUEUE_CAP) {
        s->queue[(s->head + s->n) % QUEUE_CAP] = *j;
        s->n++;
        pthread_cond_signal(&s->cv);
        rc = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- the seq_source operations ------------------------------------------------------------------ */

static int op_start(void *ctx, char *err, size_t errlen)
{
    seq_etcd_source *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->running = true;
    pthread_mutex_unlock(&s->mu);
    int rc = pthread_create(&s->thread, NULL, worker, s);
    if (rc != 0) {
        s->running = false;
        snprintf(err, errlen, "sequences: cannot start the etcd source's thread: %s",
                 strerror(rc));
        return -1;
    }
    return 0;
}

/* Main thread, at start: the counter created at def->start when absent, raised to it when below;
 * both by compare-and-swap (another daemon may declare it at the same time). */
static int op_declare(void *ctx, unsigned id, const seq_ns_def *def, char *err, size_t errlen)
{
    seq_etcd_source *s = ctx;
    if (id >= SEQ_MAX_NAMESPACES) {
        snprintf(err, errlen, "namespace %s: no room for it in the etcd source", def->name);
        return -1;
    }
    se_ns *ns = &s->ns[id];
    memset(ns, 0, sizeof *ns);
    ns->def = *def;
    snprintf(ns->key, sizeof ns->key, "%s/seq/next/%s", s->prefix, def->name);
    char why[512] = "", value[SEQ_ETCD_VALUE_MAX];
    uint64_t started = mono_ms();
    for (unsigned lost = 0; lost < CLAIM_TRIES;) {
        seq_etcd_claim cur;
        uint64_t ops = 0;
        int got = read_counter(s, ns, &cur, &ops, why, sizeof why);
        if (got == -1 && start_retry(s, started))
            continue;
        if (got < 0)
            break;
        if (got == 1 && cur.next >= def->start) {
            ns->known = true;
            return 0;
        }
        /* absent (create) or below a raised start (move up): nothing is granted, lo == hi */
        if (claim_value(s, def->start, def->start, def->start, fresh_nonce(), value,
                        sizeof value) < 0) {
            snprintf(why, sizeof why, "counter value too long");
            break;
        }
        etcd_txn *t = etcd_txn_new();
        if (got == 0)
            etcd_txn_compare_int(t, ns->key, ETCD_CMP_CREATE, ETCD_CMP_EQUAL, 0);
        else
            etcd_txn_compare_int(t, ns->key, ETCD_CMP_MOD, ETCD_CMP_EQUAL, ns->mod_rev);
        etcd_txn_put(t, ETCD_SUCCESS, ns->key, value, strlen(value), ETCD_NO_LEASE);
        etcd_txn_result r;
        if (commit(s, t, &r, NULL, why, sizeof why) != 0) {
            if (!start_retry(s, started))
                break;
            continue; /* idempotent (compared): read again and see */
        }
        bool ok = r.succeeded;
        int64_t rev = r.header.revision;
        etcd_txn_result_free(&r);
        if (ok) {
            ns->known = true;
            ns->cached = true;
            ns->mod_rev = rev;
            ns->next = def->start;
            return 0;
        }
        snprintf(why, sizeof why, "the counter changed while it was declared");
        lost++;
    }
    snprintf(err, errlen, "sequences: namespace %s: counter %s not ready in etcd: %s", def->name,
             ns->key, why);
    return -1;
}

static int op_list(void *ctx, const char *const *declared, size_t ndeclared,
                   void (*found)(void *arg, const seq_ns_def *def), void *arg, char *err,
                   size_t errlen)
{
    seq_etcd_source *s = ctx;
    char pre[KEY_MAX], end[KEY_MAX];
    snprintf(pre, sizeof pre, "%s/seq/def/", s->prefix);
    if (etcd_prefix_end(pre, end, sizeof end) != 0) {
        snprintf(err, errlen, "sequences: bad etcd prefix %s", s->prefix);
        return -1;
    }
    etcd_range_result r;
    etcd_error e;
    uint64_t started = mono_ms();
    int got;
    while ((got = etcd_range(s->client, pre, end, &r, &e)) != 0 && start_retry(s, started)) {
    }
    if (got != 0) {
        char why[400];
        describe(&e, why, sizeof why);
        snprintf(err, errlen, "sequences: cannot list the namespaces in etcd: %s", why);
        return -1;
    }
    int rc = 0;
    size_t pl = strlen(pre);
    for (size_t i = 0; i < r.n_kvs && rc == 0; i++) {
        const etcd_kv *kv = &r.kvs[i];
        if (kv->key_len <= pl || !seq_name_valid(kv->key + pl, kv->key_len - pl))
            continue; /* not a namespace's key */
        const char *name = kv->key + pl;
        bool known = false;
        for (size_t k = 0; k < ndeclared && !known; k++)
            known = strcmp(declared[k], name) == 0;
        if (known)
            continue;
        seq_ns_def d;
        if (!seq_etcd_def_parse(kv->value, kv->value_len, name, &d)) {
            snprintf(err, errlen,
                     "sequences: %s: unreadable namespace definition in etcd (refusing to guess)",
                     kv->key);
            rc = -1;
            break;
        }
        found(arg, &d);
    }
    etcd_range_result_free(&r);
    return rc;
}

static int op_create(void *ctx, unsigned id, const seq_ns_def *def, seq_done_fn done, void *arg)
{
    if (id >= SEQ_MAX_NAMESPACES)
        return -1;
    se_job j = {.kind = JOB_CREATE, .id = id, .def = *def, .done = done, .arg = arg};
    return enqueue(ctx, &j);
}

static int op_reserve(void *ctx, unsigned id, uint64_t want, seq_done_fn done, void *arg)
{
    if (id >= SEQ_MAX_NAMESPACES || want == 0)
        return -1;
    se_job j = {.kind = JOB_RESERVE, .id = id, .want = want, .done = done, .arg = arg};
    return enqueue(ctx, &j);
}

static uint64_t op_fence(void *ctx)
{
    seq_etcd_source *s = ctx;
    return sf_identity_fence_ms(s->c.identity);
}

/* On the source's thread (it owns the client), the main thread waiting. */
static int op_release(void *ctx, unsigned id, uint64_t from, uint64_t hi, char *err,
                      size_t errlen)
{
    seq_etcd_source *s = ctx;
    if (id >= SEQ_MAX_NAMESPACES)
        return 0;
    se_job j = {.kind = JOB_RELEASE, .id = id, .from = from, .hi = hi, .err = err,
                .errlen = errlen};
    pthread_mutex_lock(&s->mu);
    if (!s->running || s->stop) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    s->release = &j;
    pthread_cond_signal(&s->cv);
    while (!j.finished)
        pthread_cond_wait(&s->done_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return j.rc;
}

static void op_metrics(void *ctx, prom_buf *p)
{
    seq_etcd_source *s = ctx;
    char labels[48];
    prom_family(p, "snowflaked_seq_etcd_claims_total", "counter",
                "Block claim transactions on etcd by result (ok, conflict: another daemon claimed "
                "first, unknown: the answer was lost, recovered: such a claim found in etcd, "
                "failed: the worker slot was not ours or etcd refused).");
    for (int i = 0; i < CL_COUNT; i++) {
        snprintf(labels, sizeof labels, "result=\"%s\"", claim_results[i]);
        prom_u64(p, "snowflaked_seq_etcd_claims_total", labels, counter_get(&s->claims[i]));
    }
    prom_family(p, "snowflaked_seq_etcd_givebacks_total", "counter",
                "Unissued block rests offered back to etcd at a clean stop by result (ok, moved: "
                "another claim came after ours, failed: etcd did not answer).");
    for (int i = 0; i < GB_COUNT; i++) {
        snprintf(labels, sizeof labels, "result=\"%s\"", giveback_results[i]);
        prom_u64(p, "snowflaked_seq_etcd_givebacks_total", labels,
                 counter_get(&s->givebacks[i]));
    }
    prom_family(p, "snowflaked_seq_etcd_round_trips_total", "counter",
                "Requests the etcd block source sent (claims, reads, creations, give-backs).");
    prom_u64(p, "snowflaked_seq_etcd_round_trips_total", "", counter_get(&s->round_trips));
}

static void op_stop(void *ctx)
{
    seq_etcd_source *s = ctx;
    pthread_mutex_lock(&s->mu);
    bool running = s->running;
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (running)
        pthread_join(s->thread, NULL);
    s->running = false;
}

static int copy_opt(char *dst, size_t cap, const char *src, const char *what, char *err,
                    size_t errlen)
{
    if ((size_t)snprintf(dst, cap, "%s", src ? src : "") >= cap) {
        snprintf(err, errlen, "sequences: etcd %s too long", what);
        return -1;
    }
    return 0;
}

seq_etcd_source *seq_etcd_source_new(const seq_etcd_config *c, char *err, size_t errlen)
{
    if (!c->identity || !c->endpoints || !c->prefix) {
        snprintf(err, errlen, "sequences: the etcd source needs the etcd identity");
        return NULL;
    }
    seq_etcd_source *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "sequences: out of memory");
        return NULL;
    }
    s->c = *c;
    if (copy_opt(s->endpoints, sizeof s->endpoints, c->endpoints, "endpoints", err, errlen) ||
        copy_opt(s->prefix, sizeof s->prefix, c->prefix, "prefix", err, errlen) ||
        copy_opt(s->auth_user, sizeof s->auth_user, c->auth_user, "user", err, errlen) ||
        copy_opt(s->auth_file, sizeof s->auth_file, c->auth_password_file, "password file", err,
                 errlen)) {
        free(s);
        return NULL;
    }
    s->ns = calloc(SEQ_MAX_NAMESPACES, sizeof *s->ns);
    s->queue = calloc(QUEUE_CAP, sizeof *s->queue);
    if (!s->ns || !s->queue) {
        free(s->ns);
        free(s->queue);
        free(s);
        snprintf(err, errlen, "sequences: out of memory");
        return NULL;
    }
    etcd_client_opts o = {.endpoints = s->endpoints,
                          .request_timeout_ms = c->request_timeout_ms,
                          .tls = c->tls,
                          .auth_user = s->auth_user[0] ? s->auth_user : NULL,
                          .auth_password = c->auth_password,
                          .auth_password_file = s->auth_file[0] ? s->auth_file : NULL,
                          .at_most_once = true,
                          /* the identity's token: one authentication per daemon */
                          .shared_auth = sf_identity_etcd_auth(c->identity)};
    etcd_error e;
    if (!(s->client = etcd_client_new(&o, &e))) {
        snprintf(err, errlen, "sequences: etcd source: %s", e.message);
        free(s->ns);
        free(s->queue);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    return s;
}

void seq_etcd_source_ops(seq_etcd_source *s, seq_source *out)
{
    *out = (seq_source){.kind = "etcd",
                        .start = op_start,
                        .declare = op_declare,
                        .list = op_list,
                        .create = op_create,
                        .reserve = op_reserve,
                        .fence_ms = op_fence,
                        .release = op_release,
                        .metrics = op_metrics,
                        .stop = op_stop,
                        .ctx = s};
}

void seq_etcd_source_free(seq_etcd_source *s)
{
    if (!s)
        return;
    op_stop(s);
    etcd_client_free(s->client);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->done_cv);
    free(s->ns);
    free(s->queue);
    free(s);
}
