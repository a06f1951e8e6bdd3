/* The etcd identity backend: see identity.h (and docs/design/etcd-identity.md §2-3 for the why).
 *
 * State: claim runs on the main thread before anything serves; renew and release run on the
 * lease keeper's thread; fence_ms, not_ready and metrics on any thread. What the latter read is
 * atomic (open_until, the counters); the rest belongs to the one thread at a time that claims,
 * renews or releases. */
#include "cluster/identity.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/etcd_auth.h"
#include "cluster/etcd_client.h"
#include "cluster/etcd_tls.h"
#include "obs/log.h"
#include "snowflake/rng.h"
#include "util/counter.h"
#include "util/decimal.h"
#include "util/spinlock.h"

#define PREFIX_MAX       256
#define KEY_MAX          (PREFIX_MAX + 64)
#define FLOOR_FUTURE_MS  (24u * 3600u * 1000u) /* an E further ahead than this is not believed */
#define BACKOFF_MIN_MS   50
#define BACKOFF_MAX_MS   1000
#define RACES_BEFORE_NAP 8 /* lost claim races in a row before waiting like a taken range */

typedef enum { TRY_OK, TRY_TAKEN, TRY_RACE, TRY_UNAVAILABLE, TRY_FATAL } try_result;

typedef struct etcd_backend {
    sf_identity_etcd_config c;
    char endpoints[1024], prefix[PREFIX_MAX], holder[256], version[64];
    char meta_value[512];
    etcd_client *client;
    bool meta_ok;
    int64_t lease;     /* 0: none */
    int64_t owner_rev; /* create revision of our owner keys (one transaction made them all) */
    /* n and workers_text are written by the thread that claims (main at start, the lease
     * keeper on a re-claim) under shown_lock, which metrics take on a loop thread to read them:
     * a re-claim may change the slots while /metrics is being served. */
    _Atomic int shown_lock;
    unsigned n;
    uint32_t worker[SF_IDENTITY_MAX_SLOTS];
    char workers_text[64]; /* "3" or "3,4,..." for labels and logs (cut when long) */
    /* also under shown_lock: what sf_identity_etcd_owner hands the sequences (0: none held) */
    int64_t shown_lease, shown_rev;
    uint64_t started_ms;
    uint64_t last_ok_ms; /* when the last successful renewal (or the claim's grant) was sent */
    bool fenced_logged;
    bool auth_refused; /* the last failed call was refused for credentials or permissions */
    bool said_auth_off;
    _Atomic uint64_t lapsed_at_ms; /* when the lapse was seen (fenced time; metrics read it) */
    /* read by any thread */
    _Atomic uint64_t open_until_ms; /* generators may issue ticks before this (our clock) */
    _Atomic bool held, lost;
    _Atomic bool lapsed;  /* the lease is gone; reclaim tries to get the same slots back */
    _Atomic bool waiting; /* the last claim found every slot held */
    _Atomic uint64_t fenced_ms_total; /* closed fenced intervals */
    _Atomic uint64_t claims_ok, claims_taken, claims_error, bad_records;
    _Atomic uint64_t renew_ok, renew_error, renew_lapsed, renew_us_sum, renew_us_max;
    _Atomic uint64_t reclaims_ok, reclaims_taken, reclaims_error;
} etcd_backend;

static uint64_t now_ms(etcd_backend *b)
{
    return clk_now(b->c.clock);
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t random_below(uint64_t n)
{
    uint64_t r = 0;
    if (n == 0 || sf_rng_u64(&r) != 0)
        return 0;
    return r % n;
}

/* Sleeps ms, in slices, returning early (true) when should_stop says so. */
static bool nap(etcd_backend *b, uint64_t ms)
{
    while (ms > 0) {
        if (b->c.should_stop && b->c.should_stop())
            return true;
        uint64_t slice = ms < 100 ? ms : 100;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(slice * 1000000u)};
        nanosleep(&ts, NULL);
        ms -= slice;
    }
    return b->c.should_stop && b->c.should_stop();
}

/* ---- keys and records ------------------------------------------------------------------------ */

static void key_of(const etcd_backend *b, const char *kind, uint32_t worker, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s/%07" PRIu32 "/%07" PRIu32, b->prefix, kind, b->c.datacenter, worker);
}

static void dc_prefix(const etcd_backend *b, const char *kind, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s/%07" PRIu32 "/", b->prefix, kind, b->c.datacenter);
}

/* The worker of "P/kind/DDDDDDD/WWWWWWW", or -1 for a key of another shape. */
static int64_t worker_of_key(const etcd_backend *b, const char *kind, const etcd_kv *kv)
{
    char pre[KEY_MAX];
    dc_prefix(b, kind, pre, sizeof pre);
    size_t n = strlen(pre);
    if (kv->key_len != n + 7 || memcmp(kv->key, pre, n) != 0)
        return -1;
    uint64_t w;
    return dec_parse_u64(kv->key + n, 7, UINT64_MAX, &w) ? (int64_t)w : -1;
}

/* A floor record's E, or -1 when it is unreadable or E is beyond belief. */
static int64_t floor_of(const etcd_kv *kv)
{
    cJSON *j = cJSON_ParseWithLength(kv->value, kv->value_len);
    const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "E") : NULL;
    int64_t out = -1;
    if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble <= 9007199254740992.0 &&
        e->valuedouble == (double)(int64_t)e->valuedouble &&
        (uint64_t)e->valuedouble <= wall_ms() + FLOOR_FUTURE_MS)
        out = (int64_t)e->valuedouble;
    cJSON_Delete(j);
    return out;
}

static int owner_value(const etcd_backend *b, char *out, size_t cap)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return -1;
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRIx64, (uint64_t)b->lease);
    cJSON_AddNumberToObject(j, "v", 1);
    cJSON_AddStringToObject(j, "holder", b->holder);
    cJSON_AddStringToObject(j, "host", host);
    cJSON_AddNumberToObject(j, "pid", (double)getpid());
    cJSON_AddNumberToObject(j, "started_ms", (double)b->started_ms);
    cJSON_AddStringToObject(j, "version", b->version);
    cJSON_AddStringToObject(j, "lease", lease);
    int rc = cJSON_PrintPreallocated(j, out, (int)cap, false) ? 0 : -1;
    cJSON_Delete(j);
    return rc;
}

static int floor_value(const etcd_backend *b, uint64_t end_ms, char *out, size_t cap)
{
    int n = snprintf(out, cap, "{\"v\":1,\"E\":%" PRIu64 ",\"at_ms\":%" PRIu64 ",\"by\":\"", end_ms,
                     wall_ms());
    /* the holder is ours ($POD_NAME or a host name); keep only what needs no escaping */
    for (const char *p = b->holder; *p && (size_t)n + 3 < cap; p++)
        if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
            out[n++] = *p;
    if ((size_t)n + 3 > cap)
        return -1;
    memcpy(out + n, "\"}", 3);
    return 0;
}

/* What went wrong, for logs and errors (never a secret: etcd_auth.h). A refusal for credentials
 * or permissions is remembered: at start it is fatal, not retried. */
static void describe(etcd_backend *b, const etcd_error *e, char *out, size_t cap)
{
    b->auth_refused = e->auth;
    if (e->auth && e->kind == ETCD_E_SERVER && e->grpc_code == ETCD_GRPC_PERMISSION_DENIED)
        snprintf(out, cap,
                 "%s: etcd error %d (HTTP %d): %s: etcd user %s may not read and write under %s "
                 "(grant its role readwrite on that prefix: docs/identity-etcd.md)",
                 e->endpoint, e->grpc_code, e->http_status, e->message,
                 etcd_client_auth(b->client) ? etcd_auth_user(etcd_client_auth(b->client))
                                             : "(none: snowflake.etcd.auth.username is empty)",
                 b->prefix);
    else if (e->kind == ETCD_E_SERVER)
        snprintf(out, cap, "%s: etcd error %d (HTTP %d): %s", e->endpoint, e->grpc_code,
                 e->http_status, e->message);
    else if (e->kind == ETCD_E_TLS)
        snprintf(out, cap, "etcd https://%s: %s", e->endpoint, e->message);
    else
        snprintf(out, cap, "%s: %s", e->endpoint[0] ? e->endpoint : "etcd", e->message);
}

/* Commits and frees t; on failure, why says what went wrong (*r is then not to be freed). */
static int commit(etcd_backend *b, etcd_txn *t, etcd_txn_result *r, char *why, size_t cap)
{
    etcd_error e;
    int rc = etcd_txn_commit(b->client, t, r, &e);
    etcd_txn_free(t);
    if (rc != 0)
        describe(b, &e, why, cap);
    return rc;
}

/* ---- claim ----------------------------------------------------------------------------------- */

/* P/meta: created by the first claimer; every later one must find its own layout there. */
static try_result ensure_meta(etcd_backend *b, char *why, size_t cap)
{
    if (b->meta_ok)
        return TRY_OK;
    char key[KEY_MAX];
    snprintf(key, sizeof key, "%s/meta", b->prefix);
    etcd_txn *t = etcd_txn_new();
    etcd_txn_compare_int(t, key, ETCD_CMP_CREATE, ETCD_CMP_EQUAL, 0);
    etcd_txn_put(t, ETCD_SUCCESS, key, b->meta_value, strlen(b->meta_value), ETCD_NO_LEASE);
    etcd_txn_range(t, ETCD_FAILURE, key, NULL);
    etcd_txn_result r;
    if (commit(b, t, &r, why, cap) != 0)
        return TRY_UNAVAILABLE;
    try_result out = TRY_OK;
    if (!r.succeeded) {
        const etcd_range_result *got = r.n_responses == 1 && r.responses[0].kind == ETCD_RESP_RANGE
                                           ? &r.responses[0].range
                                           : NULL;
        bool same = got && got->n_kvs == 1 && got->kvs[0].value_len == strlen(b->meta_value) &&
                    memcmp(got->kvs[0].value, b->meta_value, got->kvs[0].value_len) == 0;
        if (!same) {
            snprintf(why, cap,
                     "%s already holds another fleet's layout (%.*s); ours is %s: give this fleet "
                     "its own snowflake.etcd.prefix or the same layout",
                     key,
                     got && got->n_kvs
                         ? (int)(got->kvs[0].value_len > 200 ? 200 : got->kvs[0].value_len)
                         : 0,
                     got && got->n_kvs ? got->kvs[0].value : "", b->meta_value);
            out = TRY_FATAL;
        }
    }
    etcd_txn_result_free(&r);
    b->meta_ok = out == TRY_OK;
    return out;
}

/* Marks in `busy` (indexed worker - worker_min) the workers that are held or whose floor cannot be
 * trusted; returns how many are free, or -1 with why. */
static int64_t scan_slots(etcd_backend *b, uint8_t *busy, bool *bad_logged, char *why, size_t cap)
{
    uint32_t lo = b->c.worker_min, hi = b->c.worker_max;
    memset(busy, 0, (size_t)(hi - lo) + 1);
    const char *kinds[2] = {"owner", "floor"};
    for (int k = 0; k < 2; k++) {
        char pre[KEY_MAX], end[KEY_MAX];
        dc_prefix(b, kinds[k], pre, sizeof pre);
        etcd_prefix_end(pre, end, sizeof end);
        etcd_range_result r;
        etcd_error e;
        if (etcd_range(b->client, pre, end, &r, &e) != 0) {
            describe(b, &e, why, cap);
            return -1;
        }
        for (size_t i = 0; i < r.n_kvs; i++) {
            int64_t w = worker_of_key(b, kinds[k], &r.kvs[i]);
            if (w < lo || w > hi)
                continue;
            if (k == 1 && floor_of(&r.kvs[i]) < 0) {
                counter_add(&b->bad_records, 1);
                if (!*bad_logged)
                    LOG_ERROR("etcd identity: %.*s is unreadable or too far in the future; that "
                              "slot is not taken (repair or delete the key)",
                              (int)r.kvs[i].key_len, r.kvs[i].key);
                *bad_logged = true;
            } else if (k == 1) {
                continue;
            }
            busy[w - lo] = 1;
        }
        etcd_range_result_free(&r);
    }
    int64_t free_n = 0;
    for (uint64_t w = lo; w <= hi; w++)
        free_n += !busy[w - lo];
    return free_n;
}

/* The owner record the sequences' claims compare (sf_identity_etcd_owner); lease 0: none. */
static void show_owner(etcd_backend *b, int64_t lease, int64_t rev)
{
    spin_lock(&b->shown_lock);
    b->shown_lease = lease;
    b->shown_rev = rev;
    spin_unlock(&b->shown_lock);
}

/* Revokes our lease, best effort (it deletes whatever it holds); a new one next time. */
static void drop_lease(etcd_backend *b)
{
    show_owner(b, 0, 0);
    if (b->lease) {
        etcd_error e;
        etcd_lease_revoke(b->client, b->lease, NULL, &e);
    }
    b->lease = 0;
}

static try_result grant(etcd_backend *b, uint64_t *sent_ms, int64_t *ttl, char *why, size_t cap)
{
    uint64_t id = 0;
    while (id == 0) {
        if (sf_rng_u64(&id) != 0) {
            snprintf(why, cap, "the kernel's random source failed (lease ID)");
            return TRY_UNAVAILABLE;
        }
        id &= INT64_MAX; /* etcd lease IDs are positive int64 */
    }
    etcd_error e;
    *sent_ms = now_ms(b);
    if (etcd_lease_grant(b->client, (int64_t)b->c.ttl_s, (int64_t)id, ttl, &e) != 0) {
        describe(b, &e, why, cap); /* a grant that may have happened expires unused */
        return TRY_UNAVAILABLE;
    }
    b->lease = (int64_t)id;
    return TRY_OK;
}

static try_result claim_workers(etcd_backend *b, const uint32_t *chosen, unsigned n,
                                sf_identity_slots *out, char *why, size_t cap);

static try_result try_claim(etcd_backend *b, unsigned n, uint8_t *busy, bool *bad_logged,
                            sf_identity_slots *out, char *why, size_t cap)
{
    try_result tr = ensure_meta(b, why, cap);
    if (tr != TRY_OK)
        return tr;
    int64_t free_n = scan_slots(b, busy, bad_logged, why, cap);
    if (free_n < 0)
        return TRY_UNAVAILABLE;
    if (free_n < (int64_t)n)
        return TRY_TAKEN;
    uint32_t chosen[SF_IDENTITY_MAX_SLOTS];
    unsigned k = 0;
    for (uint64_t w = b->c.worker_min; k < n; w++)
        if (!busy[w - b->c.worker_min])
            chosen[k++] = (uint32_t)w;
    return claim_workers(b, chosen, n, out, why, cap);
}

/* One compare-and-create of exactly these workers (increasing) under a new lease: TRY_OK (out
 * filled), TRY_RACE (one was taken, or its floor is unreadable), TRY_UNAVAILABLE. */
static try_result claim_workers(etcd_backend *b, const uint32_t *chosen, unsigned n,
                                sf_identity_slots *out, char *why, size_t cap)
{
    try_result tr;
    uint64_t sent;
    int64_t ttl = 0;
    if ((tr = grant(b, &sent, &ttl, why, cap)) != TRY_OK)
        return tr;

    char owner[1024], key[KEY_MAX], meta_key[KEY_MAX], lo[KEY_MAX], hi[KEY_MAX];
    if (owner_value(b, owner, sizeof owner) != 0) {
        snprintf(why, cap, "owner record too long");
        return TRY_FATAL;
    }
    snprintf(meta_key, sizeof meta_key, "%s/meta", b->prefix);
    etcd_txn *t = etcd_txn_new();
    etcd_txn_compare_value(t, meta_key, ETCD_CMP_EQUAL, b->meta_value, strlen(b->meta_value));
    for (unsigned i = 0; i < n; i++) {
        key_of(b, "owner", chosen[i], key, sizeof key);
        etcd_txn_compare_int(t, key, ETCD_CMP_CREATE, ETCD_CMP_EQUAL, 0);
        etcd_txn_put(t, ETCD_SUCCESS, key, owner, strlen(owner), b->lease);
    }
    key_of(b, "floor", chosen[0], lo, sizeof lo);
    key_of(b, "floor", chosen[n - 1] + 1, hi, sizeof hi); /* chosen is increasing */
    etcd_txn_range(t, ETCD_SUCCESS, lo, hi);
    etcd_txn_result r;
    if (commit(b, t, &r, why, cap) != 0) {
        /* Outcome unknown: revoking the lease undoes a claim that may have happened. */
        drop_lease(b);
        return TRY_UNAVAILABLE;
    }
    if (!r.succeeded) { /* someone was faster (or meta changed: the next scan sees it) */
        etcd_txn_result_free(&r);
        drop_lease(b);
        b->meta_ok = false;
        return TRY_RACE;
    }
    const etcd_range_result *floors = NULL;
    for (size_t i = 0; i < r.n_responses; i++)
        if (r.responses[i].kind == ETCD_RESP_RANGE)
            floors = &r.responses[i].range;
    uint64_t handoff = 0;
    bool readable = floors != NULL;
    for (size_t i = 0; floors && i < floors->n_kvs; i++) {
        int64_t w = worker_of_key(b, "floor", &floors->kvs[i]);
        bool ours = false;
        for (unsigned j = 0; j < n; j++)
            ours = ours || w == chosen[j];
        if (!ours)
            continue;
        int64_t e_ms = floor_of(&floors->kvs[i]);
        if (e_ms < 0)
            readable = false; /* changed since the scan: give the slots back, scan again */
        else if ((uint64_t)e_ms > handoff)
            handoff = (uint64_t)e_ms;
    }
    b->owner_rev = r.header.revision;
    etcd_txn_result_free(&r);
    if (!readable) {
        drop_lease(b);
        return TRY_RACE;
    }
    char text[sizeof b->workers_text] = "";
    size_t len = 0;
    for (unsigned i = 0; i < n && len + 12 < sizeof text; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%u", i ? "," : "", chosen[i]);
    spin_lock(&b->shown_lock);
    b->n = n;
    memcpy(b->worker, chosen, n * sizeof chosen[0]);
    memcpy(b->workers_text, text, sizeof text);
    b->shown_lease = b->lease;
    b->shown_rev = b->owner_rev;
    spin_unlock(&b->shown_lock);
    /* ttl is 1..c.ttl_s (etcd_lease_grant never passes on more than was asked): no overflow */
    uint64_t fence = sent + (uint64_t)ttl * 1000u - b->c.fence_margin_ms;
    b->last_ok_ms = sent;
    atomic_store(&b->open_until_ms, 0); /* the first renewal opens the generators */
    atomic_store(&b->lapsed, false);
    atomic_store(&b->lost, false);
    atomic_store(&b->held, true);
    out->datacenter = b->c.datacenter;
    memcpy(out->worker, chosen, n * sizeof chosen[0]);
    out->n = n;
    out->handoff_ms = handoff;
    out->fence_ms = fence;
    LOG_INFO("etcd identity: claimed datacenter %u worker%s %s under %s (lease %" PRIx64
             ", TTL %" PRId64 " s, fence margin %u ms); IDs start at or after %" PRIu64
             " (the previous holders' floor)",
             b->c.datacenter, n > 1 ? "s" : "", b->workers_text, b->prefix, (uint64_t)b->lease, ttl,
             b->c.fence_margin_ms, handoff);
    return TRY_OK;
}

/* once: one round (the lease keeper's, while the daemon waits for a slot); otherwise a start-up
 * claim that retries an unreachable etcd with jittered backoff until start_timeout_ms. */
static int etcd_claim(void *vb, unsigned n, bool once, sf_identity_slots *out, char *err,
                      size_t errlen)
{
    etcd_backend *b = vb;
    uint64_t range = (uint64_t)b->c.worker_max - b->c.worker_min + 1;
    uint8_t *busy = malloc(range);
    if (!busy) {
        snprintf(err, errlen, "out of memory (worker range %" PRIu64 ")", range);
        return -1;
    }
    uint64_t deadline = mono_us() + (uint64_t)b->c.start_timeout_ms * 1000u;
    uint64_t backoff = BACKOFF_MIN_MS;
    bool said_unavailable = false, bad_logged = b->waiting; /* logged when waiting began */
    unsigned races = 0;
    char why[768] = "";
    int rc = -1;
    for (;;) {
        b->auth_refused = false;
        try_result tr = try_claim(b, n, busy, &bad_logged, out, why, sizeof why);
        if (tr == TRY_UNAVAILABLE && b->auth_refused && !once) {
            /* fail closed: a wrong password, an unknown or revoked user or a role without the
             * prefix does not heal by waiting, and must not look like an unreachable etcd */
            counter_add(&b->claims_error, 1);
            snprintf(err, errlen,
                     "etcd identity: our etcd credentials or permissions do not work (not "
                     "retried): %s",
                     why);
            break;
        }
        if (tr == TRY_RACE && ++races < RACES_BEFORE_NAP)
            continue; /* lost to a faster claimer: rescan at once */
        if (tr == TRY_OK) {
            const etcd_auth *au = etcd_client_auth(b->client);
            if (au && etcd_auth_disabled(au) && !b->said_auth_off) {
                LOG_WARN("etcd identity: etcd user %s configured, but etcd has authentication "
                         "off (every client may write the slots); going on without a token",
                         etcd_auth_user(au));
                b->said_auth_off = true;
            }
            counter_add(&b->claims_ok, 1);
            atomic_store(&b->waiting, false);
            rc = 0;
            break;
        }
        if (tr == TRY_FATAL) {
            counter_add(&b->claims_error, 1);
            snprintf(err, errlen, "etcd identity: %s", why);
            break;
        }
        if (tr == TRY_TAKEN || tr == TRY_RACE) {
            counter_add(&b->claims_taken, 1);
            atomic_store(&b->waiting, true); /* (the owner may give up instead: lost) */
            atomic_store(&b->lapsed, false); /* whatever we held is given up */
            snprintf(err, errlen,
                     "etcd identity: all %" PRIu64 " slots of datacenter %u (workers %u..%u) "
                     "under %s are held (or unreadable); %u needed",
                     range, b->c.datacenter, b->c.worker_min, b->c.worker_max, b->prefix, n);
            rc = SF_IDENTITY_TAKEN;
            break;
        }
        counter_add(&b->claims_error, 1); /* TRY_UNAVAILABLE */
        if (!once && etcd_client_tls_refused(b->client)) {
            /* Fail closed at start: a wrong CA, a certificate for another name, a client
             * certificate etcd refuses are set-up errors that waiting does not mend. At run
             * time (once) the same failure is an unreachable etcd: the fence holds. */
            snprintf(err, errlen, "etcd identity: %s", why);
            break;
        }
        if (once || mono_us() >= deadline) {
            snprintf(err, errlen,
                     once ? "etcd identity: %s%s"
                          : "etcd identity: no usable answer from %s within start_timeout_ms "
                            "(last: %s); not guessing a worker id",
                     once ? "" : b->endpoints, why);
            break;
        }
        if (!said_unavailable)
            LOG_WARN("etcd identity: %s; retrying for up to %u ms", why, b->c.start_timeout_ms);
        said_unavailable = true;
        uint64_t wait_ms = random_below(backoff) + 1; /* full jitter */
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        if (nap(b, wait_ms)) {
            snprintf(err, errlen, "etcd identity: stopped while claiming a slot");
            rc = SF_IDENTITY_STOPPED;
            break;
        }
    }
    free(busy);
    return rc;
}

/* ---- renew, release -------------------------------------------------------------------------- */

/* The lease is gone (expired, revoked, or the owner keys are not ours): stop, then reclaim. */
static int mark_lapsed(etcd_backend *b, const char *how, sf_identity_renewal *out)
{
    if (!atomic_exchange(&b->lapsed, true)) {
        counter_add(&b->renew_lapsed, 1);
        uint64_t open = atomic_load(&b->open_until_ms), now = now_ms(b);
        atomic_store(&b->lapsed_at_ms, open && open < now ? open : now); /* fenced since */
        LOG_ERROR("etcd identity: datacenter %u worker%s %s: %s; no IDs until they are "
                  "re-claimed",
                  b->c.datacenter, b->n > 1 ? "s" : "", b->workers_text, how);
    }
    b->lease = 0; /* gone with whatever it held */
    show_owner(b, 0, 0);
    atomic_store(&b->held, false);
    atomic_store(&b->open_until_ms, 0);
    out->lapsed = true;
    return 0;
}

/* Every owner key still ours (lease and create revision): the check before writing a floor. */
static void compare_ours(etcd_backend *b, etcd_txn *t)
{
    char key[KEY_MAX];
    for (unsigned i = 0; i < b->n; i++) {
        key_of(b, "owner", b->worker[i], key, sizeof key);
        etcd_txn_compare_int(t, key, ETCD_CMP_LEASE, ETCD_CMP_EQUAL, b->lease);
        etcd_txn_compare_int(t, key, ETCD_CMP_CREATE, ETCD_CMP_EQUAL, b->owner_rev);
    }
}

/* Writes E to every floor if we still own every slot: 1 written, 0 not ours, -1 error. */
static int write_floors(etcd_backend *b, uint64_t end_ms, char *why, size_t cap)
{
    char value[512], key[KEY_MAX];
    if (floor_value(b, end_ms, value, sizeof value) != 0) {
        snprintf(why, cap, "floor record too long");
        return -1;
    }
    etcd_txn *t = etcd_txn_new();
    compare_ours(b, t);
    for (unsigned i = 0; i < b->n; i++) {
        key_of(b, "floor", b->worker[i], key, sizeof key);
        etcd_txn_put(t, ETCD_SUCCESS, key, value, strlen(value), ETCD_NO_LEASE);
    }
    etcd_txn_result r;
    if (commit(b, t, &r, why, cap) != 0)
        return -1;
    int rc = r.succeeded ? 1 : 0;
    etcd_txn_result_free(&r);
    return rc;
}

static int renew_failed(etcd_backend *b, const char *why, char *err, size_t errlen)
{
    counter_add(&b->renew_error, 1);
    uint64_t now = now_ms(b), open = atomic_load(&b->open_until_ms);
    if (now >= open && !b->fenced_logged) {
        LOG_ERROR("etcd identity: fenced: no successful renewal for %" PRIu64 " ms; IDs refused "
                  "until etcd answers (%s)",
                  now - b->last_ok_ms, why);
        b->fenced_logged = true;
    }
    snprintf(err, errlen, "etcd identity: %s", why);
    return -1;
}

static int etcd_renew(void *vb, uint64_t want_end_ms, sf_identity_renewal *out, char *err,
                      size_t errlen)
{
    etcd_backend *b = vb;
    if (atomic_load(&b->lost)) {
        out->lost = true;
        return 0;
    }
    if (atomic_load(&b->lapsed))
        return mark_lapsed(b, "still lapsed", out);
    char why[512];
    uint64_t t0 = mono_us(), sent = now_ms(b);
    int64_t ttl = 0;
    etcd_error e;
    if (etcd_lease_keepalive(b->client, b->lease, (int64_t)b->c.ttl_s, &ttl, &e) != 0) {
        describe(b, &e, why, sizeof why);
        return renew_failed(b, why, err, errlen);
    }
    if (ttl <= 0)
        return mark_lapsed(b, "etcd says their lease expired", out);
    /* ttl is 1..c.ttl_s (etcd_lease_keepalive's max): a hostile answer cannot push the fence */
    uint64_t fence = sent + (uint64_t)ttl * 1000u - b->c.fence_margin_ms;
    int rc = write_floors(b, want_end_ms, why, sizeof why);
    if (rc < 0)
        return renew_failed(b, why, err, errlen);
    if (rc == 0)
        return mark_lapsed(b, "their owner keys are no longer ours", out);
    uint64_t took = mono_us() - t0, now = now_ms(b);
    counter_add(&b->renew_ok, 1);
    counter_add(&b->renew_us_sum, took);
    if (took > atomic_load(&b->renew_us_max))
        atomic_store(&b->renew_us_max, took);
    uint64_t old_open = atomic_load(&b->open_until_ms);
    uint64_t open = fence < want_end_ms ? fence : want_end_ms;
    if (old_open && now > old_open) { /* a fenced interval ends */
        counter_add(&b->fenced_ms_total, now - old_open);
        LOG_WARN("etcd identity: renewed after %" PRIu64 " ms fenced; issuing again",
                 now - old_open);
    }
    b->fenced_logged = false;
    b->last_ok_ms = sent;
    atomic_store(&b->open_until_ms, open);
    out->stored_end_ms = want_end_ms;
    out->fence_ms = fence;
    return 0;
}

static int etcd_reclaim(void *vb, uint64_t want_end_ms, sf_identity_renewal *out, char *err,
                        size_t errlen)
{
    etcd_backend *b = vb;
    char why[768];
    sf_identity_slots s;
    memset(&s, 0, sizeof s);
    uint32_t workers[SF_IDENTITY_MAX_SLOTS];
    memcpy(workers, b->worker, b->n * sizeof workers[0]);
    try_result tr = claim_workers(b, workers, b->n, &s, why, sizeof why);
    if (tr == TRY_RACE) { /* another process holds one of them (or wrote a bad floor) */
        counter_add(&b->reclaims_taken, 1);
        atomic_store(&b->lost, true);
        show_owner(b, 0, 0);
        LOG_ERROR("etcd identity: datacenter %u worker%s %s are held by another process now; "
                  "giving them up",
                  b->c.datacenter, b->n > 1 ? "s" : "", b->workers_text);
        out->lost = true;
        return 0;
    }
    if (tr != TRY_OK) {
        counter_add(&b->reclaims_error, 1);
        snprintf(err, errlen, "etcd identity: re-claim failed (retried at the next renewal): %s",
                 why);
        return -1;
    }
    /* Ours again: the floor goes to the higher of what the keeper wants and what the holders in
     * between reached, before anything is issued. */
    uint64_t stored = want_end_ms > s.handoff_ms ? want_end_ms : s.handoff_ms;
    int rc = write_floors(b, stored, why, sizeof why);
    if (rc <= 0) { /* give the slots back; the next renewal claims them afresh */
        counter_add(&b->reclaims_error, 1);
        drop_lease(b);
        atomic_store(&b->held, false);
        snprintf(err, errlen, "etcd identity: re-claimed, but the floor was not written: %s",
                 rc < 0 ? why : "the slots changed hands at once");
        return -1;
    }
    counter_add(&b->reclaims_ok, 1);
    uint64_t now = now_ms(b);
    uint64_t lapsed_at = atomic_load(&b->lapsed_at_ms);
    if (now > lapsed_at)
        counter_add(&b->fenced_ms_total, now - lapsed_at);
    atomic_store(&b->lapsed, false);
    b->fenced_logged = false;
    uint64_t open = s.fence_ms < stored ? s.fence_ms : stored;
    atomic_store(&b->open_until_ms, open);
    out->reclaimed = true;
    out->handoff_ms = s.handoff_ms;
    out->stored_end_ms = stored;
    out->fence_ms = s.fence_ms;
    return 0;
}

static uint64_t etcd_fence(void *vb)
{
    return atomic_load(&((etcd_backend *)vb)->open_until_ms);
}

/* Both steps of a release are idempotent, so each is tried on every endpoint in turn (the client
 * moves on after a failure) plus twice more: one frozen or dead member must not make a clean
 * stop leave its slot held until the TTL (found by make chaos). Bounded: attempts x
 * request_timeout_ms. Without quorum both fail: the floor renewed last still covers every ID. */
static int etcd_release(void *vb, uint64_t final_end_ms, char *err, size_t errlen)
{
    etcd_backend *b = vb;
    if (atomic_load(&b->lost) || !b->lease)
        return 0; /* the floor stored last covers every ID; nothing of ours is left */
    size_t attempts = etcd_client_endpoint_count(b->client) + 2;
    char why[512] = "";
    int rc = -1;
    for (size_t i = 0; i < attempts && rc < 0; i++)
        rc = write_floors(b, final_end_ms, why, sizeof why);
    if (rc <= 0)
        snprintf(err, errlen,
                 "etcd identity: final floor not written (the renewed one covers every "
                 "ID): %s",
                 rc < 0 ? why : "the slots were no longer ours");
    bool revoked = false;
    etcd_error e;
    for (size_t i = 0; i < attempts && !revoked; i++)
        revoked = etcd_lease_revoke(b->client, b->lease, NULL, &e) == 0;
    if (!revoked && rc > 0) {
        describe(b, &e, why, sizeof why);
        snprintf(err, errlen, "etcd identity: lease not revoked (the slots free up at its TTL): %s",
                 why);
    }
    b->lease = 0;
    show_owner(b, 0, 0);
    atomic_store(&b->held, false);
    if (rc <= 0 || !revoked)
        return -1;
    LOG_INFO("etcd identity: released datacenter %u worker%s %s (floor %" PRIu64 ")",
             b->c.datacenter, b->n > 1 ? "s" : "", b->workers_text, final_end_ms);
    return 0;
}

static const char *etcd_not_ready(void *vb, char *buf, size_t len)
{
    etcd_backend *b = vb;
    if (atomic_load(&b->waiting)) {
        snprintf(buf, len, "etcd: waiting for a free slot in datacenter %u (workers %u..%u)",
                 b->c.datacenter, b->c.worker_min, b->c.worker_max);
        return buf;
    }
    if (atomic_load(&b->lost))
        return "etcd: the slots are held by another process now";
    if (atomic_load(&b->lapsed))
        return "etcd: the slot lease lapsed; re-claiming the same slots";
    uint64_t open = atomic_load(&b->open_until_ms), now = now_ms(b);
    if (atomic_load(&b->held) && open && now >= open) {
        snprintf(buf, len, "etcd: slot lease not renewed in time, fenced for %" PRIu64 " ms",
                 now - open);
        return buf;
    }
    return NULL;
}

/* A counter family with three result="..." series. */
static void by_result(prom_buf *p, const char *name, const char *help, const char *const *results,
                      const uint64_t *values)
{
    char labels[48];
    prom_family(p, name, "counter", help);
    for (int i = 0; i < 3; i++) {
        snprintf(labels, sizeof labels, "result=\"%s\"", results[i]);
        prom_u64(p, name, labels, values[i]);
    }
}

static void etcd_metrics(void *vb, prom_buf *p)
{
    etcd_backend *b = vb;
    char labels[160];
    uint64_t now = now_ms(b), open = atomic_load(&b->open_until_ms);
    bool held = atomic_load(&b->held), lapsed = atomic_load(&b->lapsed);
    bool fenced = lapsed || (held && open && now >= open);
    uint64_t fenced_since = lapsed ? atomic_load(&b->lapsed_at_ms) : open;
    spin_lock(&b->shown_lock);
    unsigned n = b->n;
    snprintf(labels, sizeof labels, "backend=\"etcd\",datacenter=\"%u\",workers=\"%s\"",
             b->c.datacenter, b->workers_text);
    spin_unlock(&b->shown_lock);
    prom_family(p, "snowflaked_identity_info", "gauge",
                "Where this instance's worker ids come from, and which it holds.");
    prom_u64(p, "snowflaked_identity_info", labels, 1);
    prom_family(p, "snowflaked_identity_slots_held", "gauge",
                "Worker slots this instance holds in etcd (0 once lost).");
    prom_u64(p, "snowflaked_identity_slots_held", "", held ? n : 0);
    prom_family(p, "snowflaked_identity_fenced", "gauge",
                "1 while IDs are refused because the etcd lease was not renewed in time.");
    prom_u64(p, "snowflaked_identity_fenced", "", fenced);
    prom_family(p, "snowflaked_identity_fenced_seconds_total", "counter",
                "Time spent fenced (IDs refused for want of an etcd renewal).");
    prom_f64(p, "snowflaked_identity_fenced_seconds_total", "",
             (double)(atomic_load(&b->fenced_ms_total) +
                      (fenced && now > fenced_since ? now - fenced_since : 0)) /
                 1000.0);
    prom_family(p, "snowflaked_identity_fence_remaining_seconds", "gauge",
                "Time left before IDs stop unless the etcd lease is renewed.");
    prom_f64(p, "snowflaked_identity_fence_remaining_seconds", "",
             held && open > now ? (double)(open - now) / 1000.0 : 0.0);
    by_result(p, "snowflaked_identity_claims_total", "Slot claim attempts, by result.",
              (const char *[]){"ok", "taken", "error"},
              (uint64_t[]){counter_get(&b->claims_ok), counter_get(&b->claims_taken),
                           counter_get(&b->claims_error)});
    by_result(p, "snowflaked_identity_renewals_total",
              "Lease renewals (keepalive and floor write), by result.",
              (const char *[]){"ok", "error", "lapsed"},
              (uint64_t[]){counter_get(&b->renew_ok), counter_get(&b->renew_error),
                           counter_get(&b->renew_lapsed)});
    by_result(p, "snowflaked_identity_reclaims_total",
              "Attempts to take the same slots back after their lease lapsed, by result.",
              (const char *[]){"ok", "taken", "error"},
              (uint64_t[]){counter_get(&b->reclaims_ok), counter_get(&b->reclaims_taken),
                           counter_get(&b->reclaims_error)});
    size_t n_ep = etcd_client_endpoint_count(b->client);
    prom_family(p, "snowflaked_etcd_requests_total", "counter",
                "etcd calls by endpoint: answered, or failed over to the next endpoint.");
    for (size_t i = 0; i < n_ep; i++) {
        etcd_endpoint_stats st;
        etcd_client_endpoint_stats(b->client, i, &st);
        snprintf(labels, sizeof labels, "endpoint=\"%s\",result=\"answered\"", st.name);
        prom_u64(p, "snowflaked_etcd_requests_total", labels, st.answered);
        snprintf(labels, sizeof labels, "endpoint=\"%s\",result=\"failed\"", st.name);
        prom_u64(p, "snowflaked_etcd_requests_total", labels, st.failed);
    }
    prom_family(p, "snowflaked_etcd_endpoint_current", "gauge",
                "1 for the etcd endpoint the next call goes to.");
    for (size_t i = 0; i < n_ep; i++) {
        etcd_endpoint_stats st;
        etcd_client_endpoint_stats(b->client, i, &st);
        snprintf(labels, sizeof labels, "endpoint=\"%s\"", st.name);
        prom_u64(p, "snowflaked_etcd_endpoint_current", labels, st.current);
    }
    if (etcd_client_https(b->client)) {
        prom_family(p, "snowflaked_etcd_tls_handshakes_total", "counter",
                    "TLS handshakes with etcd by endpoint: full, or resuming the endpoint's "
                    "last session.");
        for (size_t i = 0; i < n_ep; i++) {
            etcd_endpoint_stats st;
            etcd_client_endpoint_stats(b->client, i, &st);
            snprintf(labels, sizeof labels, "endpoint=\"%s\",session=\"full\"", st.name);
            prom_u64(p, "snowflaked_etcd_tls_handshakes_total", labels, st.tls_full);
            snprintf(labels, sizeof labels, "endpoint=\"%s\",session=\"resumed\"", st.name);
            prom_u64(p, "snowflaked_etcd_tls_handshakes_total", labels, st.tls_resumed);
        }
        prom_family(p, "snowflaked_etcd_tls_reloads_total", "counter",
                    "Re-reads of snowflake.etcd.tls's files: ok, or refused (the previous "
                    "certificates stay).");
        prom_u64(p, "snowflaked_etcd_tls_reloads_total", "result=\"ok\"",
                 etcd_tls_reloads(b->c.tls));
        prom_u64(p, "snowflaked_etcd_tls_reloads_total", "result=\"refused\"",
                 etcd_tls_reload_failures(b->c.tls));
        prom_family(p, "snowflaked_etcd_tls_client_cert_expiry_timestamp_seconds", "gauge",
                    "notAfter of the client certificate in service (0: none).");
        prom_u64(p, "snowflaked_etcd_tls_client_cert_expiry_timestamp_seconds", "",
                 (uint64_t)etcd_tls_not_after(b->c.tls));
    }
    /* zero without an etcd user: the families are always there for dashboards and alerts */
    const etcd_auth *au = etcd_client_auth(b->client);
#define AUTH_N(ev) (au ? etcd_auth_counter(au, ev) : 0)
    by_result(p, "snowflaked_etcd_authentications_total",
              "Authentications as the etcd user (a token fetched), by result.",
              (const char *[]){"ok", "refused", "error"},
              (uint64_t[]){AUTH_N(ETCD_AUTH_EV_OK), AUTH_N(ETCD_AUTH_EV_REFUSED),
                           AUTH_N(ETCD_AUTH_EV_ERROR)});
    prom_family(p, "snowflaked_etcd_auth_refusals_total", "counter",
                "etcd calls refused for their token (then re-authenticated and repeated once) "
                "or for the user's permissions.");
    prom_u64(p, "snowflaked_etcd_auth_refusals_total", "reason=\"token\"",
             AUTH_N(ETCD_AUTH_EV_TOKEN_REFUSED));
    prom_u64(p, "snowflaked_etcd_auth_refusals_total", "reason=\"permission\"",
             AUTH_N(ETCD_AUTH_EV_DENIED));
#undef AUTH_N
    prom_family(p, "snowflaked_identity_renewal_seconds", "summary",
                "Duration of successful renewals (keepalive and floor write).");
    prom_f64(p, "snowflaked_identity_renewal_seconds_sum", "",
             (double)counter_get(&b->renew_us_sum) / 1e6);
    prom_u64(p, "snowflaked_identity_renewal_seconds_count", "", counter_get(&b->renew_ok));
    prom_family(p, "snowflaked_identity_renewal_max_seconds", "gauge",
                "Longest successful renewal since start.");
    prom_f64(p, "snowflaked_identity_renewal_max_seconds", "",
             (double)atomic_load(&b->renew_us_max) / 1e6);
    prom_family(p, "snowflaked_identity_bad_records_total", "counter",
                "Floor records found unreadable (their slots are not taken).");
    prom_u64(p, "snowflaked_identity_bad_records_total", "", counter_get(&b->bad_records));
}

static void etcd_destroy(void *vb)
{
    etcd_backend *b = vb;
    etcd_client_free(b->client);
    free(b);
}

static const sf_identity_ops etcd_ops = {
    .name = "etcd",
    .claim = etcd_claim,
    .renew = etcd_renew,
    .reclaim = etcd_reclaim,
    .fence_ms = etcd_fence,
    .release = etcd_release,
    .metrics = etcd_metrics,
    .not_ready = etcd_not_ready,
    .destroy = etcd_destroy,
};

static int copy_str(char *dst, size_t cap, const char *src, const char *what, char *err,
                    size_t errlen)
{
    if (!src || (size_t)snprintf(dst, cap, "%s", src) >= cap) {
        snprintf(err, errlen, "etcd identity: %s missing or too long", what);
        return -1;
    }
    return 0;
}

int sf_identity_etcd_init(sf_identity *id, const sf_identity_etcd_config *c, char *err,
                          size_t errlen)
{
    memset(id, 0, sizeof *id);
    if (!c->clock || c->worker_min > c->worker_max || c->ttl_s < 2 ||
        (uint64_t)c->fence_margin_ms >= (uint64_t)c->ttl_s * 1000u) {
        snprintf(err, errlen,
                 "etcd identity: bad configuration (clock, worker range, TTL, margin)");
        return -1;
    }
    etcd_backend *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    b->c = *c;
    if (copy_str(b->endpoints, sizeof b->endpoints, c->endpoints, "endpoints", err, errlen) ||
        copy_str(b->prefix, sizeof b->prefix, c->prefix, "prefix", err, errlen) ||
        copy_str(b->holder, sizeof b->holder, c->holder ? c->holder : "", "holder", err, errlen) ||
        copy_str(b->version, sizeof b->version, c->version ? c->version : "", "version", err,
                 errlen)) {
        free(b);
        return -1;
    }
    if (!c->layout ||
        (size_t)snprintf(b->meta_value, sizeof b->meta_value, "{\"v\":1,\"layout\":\"%s\"}",
                         c->layout) >= sizeof b->meta_value) {
        snprintf(err, errlen, "etcd identity: layout missing or too long");
        free(b);
        return -1;
    }
    etcd_client_opts o = {.endpoints = b->endpoints,
                          .request_timeout_ms = c->request_timeout_ms,
                          .tls = c->tls,
                          .auth_user = c->auth_user,
                          .auth_password = c->auth_password,
                          .auth_password_file = c->auth_password_file};
    etcd_error e;
    if (!(b->client = etcd_client_new(&o, &e))) {
        snprintf(err, errlen, "etcd identity: %s", e.message);
        free(b);
        return -1;
    }
    b->started_ms = wall_ms();
    snprintf(b->workers_text, sizeof b->workers_text, "none");
    id->ops = &etcd_ops;
    id->backend = b;
    return 0;
}

bool sf_identity_etcd_owner(sf_identity *id, sf_identity_owner *out)
{
    if (!id->ops || id->ops != &etcd_ops)
        return false;
    etcd_backend *b = id->backend;
    spin_lock(&b->shown_lock);
    bool held = b->shown_lease != 0 && b->n > 0;
    if (held) {
        key_of(b, "owner", b->worker[0], out->key, sizeof out->key);
        out->lease = b->shown_lease;
        out->create_revision = b->shown_rev;
        out->worker = b->worker[0];
    }
    spin_unlock(&b->shown_lock);
    return held;
}

struct etcd_auth *sf_identity_etcd_auth(sf_identity *id)
{
    if (!id->ops || id->ops != &etcd_ops)
        return NULL;
    return etcd_client_auth(((etcd_backend *)id->backend)->client);
}
