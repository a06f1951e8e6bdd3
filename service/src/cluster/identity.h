/* Identity backends: where this process gets its (datacenter, worker) slots and where it keeps
 * the floor E that makes IDs of a slot never repeat nor go backwards (docs/design/etcd-identity.md §3).
 *
 * One interface, several backends:
 *   - static (identity_static.c): the id configured as a number, a StatefulSet ordinal or an
 *     environment variable (config resolves it); E lives in the local lease file;
 *   - etcd (identity_etcd.c): slots claimed in etcd under a lease, E stored next to them, a
 *     fence.
 *
 * The whole contract is claim, renew, fence deadline, release, handoff time, plus a metrics hook:
 *   claim    once at start, on the main thread, before any generator exists: the slots (n workers
 *            in one datacenter, not necessarily contiguous) and the handoff floor E_prev (Unix
 *            ms) below which no ID of these slots may be issued (the previous holder's final E,
 *            or the lease file's).
 *   renew    persists a floor E >= want_end_ms (the lease keeper's wish; a backend with a fence
 *            may store less and says so), returns the E stored and the fence: the moment (ms on
 *            the generators' clock) after which this process must not issue (UINT64_MAX: none).
 *            lapsed = the slots' lease is gone (the caller stops its generators at once, then
 *            asks reclaim); lost = the slots are gone for good (someone else holds them).
 *   reclaim  after a lapse (may be NULL: such a backend never lapses): takes the same slots
 *            again under a new lease if they are free; reclaimed with handoff_ms (the E the
 *            generators must now start at), or lost when another process holds them, or -1
 *            (etcd unreachable: asked again at the next renewal). Then persists E like renew.
 *   fence_ms the current fence, cheap, any thread (UINT64_MAX: none).
 *   release  at a clean stop: persists the exact final E (the tick after the last ID issued) and
 *            frees the slots, so a successor starts without waiting.
 *   metrics  appends the backend's Prometheus families (may do nothing).
 *
 * Times are Unix ms on the generators' clock (util/clock.h). claim, renew and release are
 * called by one thread at a time (main at start, the lease keeper's thread, main at stop); they
 * may block (disk, network) and must bound how long. Errors: -1 with a reason in err, nothing
 * half-done that the next call could not repair.
 *
 * The lease keeper (snowflake/lease.h) drives renew/release through sf_identity_lease_store():
 * snowflake/ must not depend on cluster/, so the keeper defines a two-function store and this
 * module adapts a backend to it.
 */
#ifndef SF_CLUSTER_IDENTITY_H
#define SF_CLUSTER_IDENTITY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obs/prom.h"
#include "util/clock.h"
#include "snowflake/lease.h"

#define SF_IDENTITY_MAX_SLOTS 256 /* one per event loop at most (config's CFG_MAX_THREADS) */
#define SF_IDENTITY_NO_FENCE  UINT64_MAX
#define PREFIX_KEY_MAX        (256 + 64) /* an etcd key under snowflake.etcd.prefix */

typedef struct sf_identity_slots {
    uint32_t datacenter;
    uint32_t worker[SF_IDENTITY_MAX_SLOTS]; /* worker[i] for generator i (per loop) */
    unsigned n;
    uint64_t handoff_ms; /* no ID may start below this (0: no floor) */
    uint64_t fence_ms;   /* SF_IDENTITY_NO_FENCE when none */
} sf_identity_slots;

typedef struct sf_identity_renewal {
    uint64_t stored_end_ms; /* the E now persisted */
    uint64_t fence_ms;      /* SF_IDENTITY_NO_FENCE when none */
    bool lapsed;            /* renew: the lease is gone; reclaim may get the slots back */
    bool reclaimed;         /* reclaim: the same slots are ours again, from handoff_ms */
    uint64_t handoff_ms;
    bool lost;              /* the slots are someone else's now */
} sf_identity_renewal;

/* What the owner of the generators does when the identity changes under them; called on the
 * lease keeper's thread, from inside a renewal. */
typedef struct sf_identity_hooks {
    int (*bind)(void *arg, const sf_identity_slots *s); /* a later claim: give the generators
                                                           their slots and floor (sf_gen_bind) */
    void (*stop_issuing)(void *arg); /* lapsed or lost: nothing more may be issued (cap) */
    int (*resume)(void *arg, uint64_t handoff_ms); /* the same slots again: floor, lift caps */
    void (*lost)(void *arg); /* for good, once: the daemon stops (exit 75) */
    void *arg;
} sf_identity_hooks;

typedef struct sf_identity_ops {
    const char *name; /* "static", "etcd" */
    int (*claim)(void *b, unsigned n, bool once, sf_identity_slots *out, char *err, size_t errlen);
    int (*renew)(void *b, uint64_t want_end_ms, sf_identity_renewal *out, char *err, size_t errlen);
    int (*reclaim)(void *b, uint64_t want_end_ms, sf_identity_renewal *out, char *err,
                   size_t errlen);
    uint64_t (*fence_ms)(void *b);
    int (*release)(void *b, uint64_t final_end_ms, char *err, size_t errlen);
    void (*metrics)(void *b, prom_buf *p);
    const char *(*not_ready)(void *b, char *buf, size_t len); /* may be NULL */
    void (*destroy)(void *b);
} sf_identity_ops;

typedef struct sf_identity {
    const sf_identity_ops *ops;
    void *backend;
    sf_identity_slots slots; /* after a successful claim */
    _Atomic bool claimed;    /* set (release) once slots hold the claim: any thread may read them */
    _Atomic uint64_t current; /* 1 << 63 | datacenter << 32 | worker[0] while claimed */
    unsigned pending_n;      /* sf_identity_claim_later: the lease store claims this many */
    bool wait_for_slot;      /* slots all held (at start or after a loss): wait, not give up */
    sf_identity_hooks hooks; /* may be left zero: then a lapse just fails the renewals */
    bool lost_reported;
} sf_identity;

/* claim's results besides 0 and -1: should_stop said so (a signal while retrying etcd); every
 * slot is held (err says which). */
#define SF_IDENTITY_STOPPED (-2)
#define SF_IDENTITY_TAKEN   1

/* Claims n slots (1 <= n <= SF_IDENTITY_MAX_SLOTS) and checks the backend's answer (n workers,
 * no worker twice). On success id->slots holds them. once: a single round, no retrying. Returns
 * 0, -1 with err, SF_IDENTITY_TAKEN (err says which are held) or SF_IDENTITY_STOPPED. */
int sf_identity_claim(sf_identity *id, unsigned n, bool once, char *err, size_t errlen);
/* Every slot is held at start and the daemon waits: the lease store's persist tries one claim of
 * n slots each time the keeper renews, answering "not yet" (SF_LEASE_NOT_YET) until one works;
 * then hooks.bind gives the generators their slots, and the renewal goes on as usual. */
void sf_identity_claim_later(sf_identity *id, unsigned n);
bool sf_identity_claimed(const sf_identity *id); /* acquire: slots may be read when true */
/* The slots held now, for any thread (metrics): false while none is. */
bool sf_identity_current(const sf_identity *id, uint32_t *datacenter, uint32_t *worker);
int sf_identity_renew(sf_identity *id, uint64_t want_end_ms, sf_identity_renewal *out, char *err,
                      size_t errlen);
uint64_t sf_identity_fence_ms(sf_identity *id);
int sf_identity_release(sf_identity *id, uint64_t final_end_ms, char *err, size_t errlen);
void sf_identity_metrics(sf_identity *id, prom_buf *p);
/* Why the identity keeps this process from issuing now (fenced, lost), in buf; NULL when it
 * does not. Any thread. */
const char *sf_identity_not_ready(sf_identity *id, char *buf, size_t len);
/* Frees the backend (does not release: that is sf_identity_release's, at a clean stop). Safe on
 * a zeroed sf_identity. */
void sf_identity_free(sf_identity *id);

/* The lease keeper's store over id: persist = renew (open the generators up to min(E stored,
 * fence)); on a lapse: hooks.stop_issuing, then reclaim, then hooks.resume and the renewal
 * succeeds. When another process holds them: a claim of as many other free slots, given to the
 * generators by hooks.bind (then renewed as usual); none free: wait_for_slot makes later
 * renewals try again ("not yet"), else hooks.lost once. final = release. id must outlive the
 * keeper. */
void sf_identity_lease_store(sf_identity *id, sf_lease_store *out);

/* ---- the static backend (identity_static.c) ---------------------------------------------------
 * The id config resolved (a number, the StatefulSet ordinal, an environment variable: config.c
 * keeps that resolution), workers first_worker .. first_worker + n - 1, and E in the local lease
 * file, written exactly as the lease keeper always did (sf_lease_write: tmp + fsync + rename).
 * claim reads the file for the handoff floor; renew writes want_end_ms, no fence; release writes
 * the final E. Nothing is ever lost. */
typedef struct sf_identity_static_config {
    uint32_t datacenter, first_worker;
    const char *origin;     /* where the worker id came from ("config", "ordinal of ..."), logs */
    const char *lease_path; /* the local lease file */
    bool ignore_corrupt;    /* --ignore-corrupt-lease: a corrupt file gives corrupt_floor_ms */
    uint64_t corrupt_floor_ms;
} sf_identity_static_config;

/* Makes id a static identity (strings copied). Returns 0, or -1 with err. */
int sf_identity_static_init(sf_identity *id, const sf_identity_static_config *c, char *err,
                            size_t errlen);

/* ---- the etcd backend (identity_etcd.c; docs/design/etcd-identity.md §2-3) ---------------------------------
 * Keys under prefix P (dc and worker zero-padded to 7 digits, so they sort numerically):
 *   P/meta                   the fleet's layout; a claim compares it (another layout: refused)
 *   P/owner/DDDDDDD/WWWWWWW  the holder (JSON, for operators), bound to our etcd lease
 *   P/floor/DDDDDDD/WWWWWWW  {"v":1,"E":<unix ms>,...}, no lease: survives its holder
 * claim: the lowest n free workers of [worker_min, worker_max] whose floor is readable, taken
 *   in one compare-and-create transaction under a lease we grant (our own random ID), which
 *   also reads their floors: handoff_ms = the highest E. All held: SF_IDENTITY_TAKEN naming
 *   the range (waiting is the caller's: sf_identity_claim_later). No usable etcd answer for
 *   start_timeout_ms (jittered retries, should_stop polled): -1; with once, no retries.
 * renew: a keepalive sent at s (our clock) that returns TTL T' sets the fence s + T' - margin
 *   (etcd cannot expire the lease before s + T'); then a transaction that checks we still own
 *   every slot (lease and create revision) writes E = want_end_ms to the floors. Only then
 *   may the generators run, up to min(E, fence). A keepalive without TTL, or a failed check:
 *   lapsed. Any other failure: -1, the generators stop at the old fence.
 * reclaim: the same workers again under a new lease (the floor = max(want, their E)), or lost
 *   when another process holds one of them.
 * release: the exact final E to the floors (still checked), then the lease revoked, each tried
 *   on every endpoint in turn: the next holder starts at once. Nothing when the slots were
 *   lost: the stored E covers every ID. */
typedef struct sf_identity_etcd_config {
    const char *endpoints, *prefix;
    unsigned ttl_s, fence_margin_ms, request_timeout_ms, start_timeout_ms;
    uint32_t datacenter, worker_min, worker_max;
    const char *layout;  /* the fleet's layout in one line (P/meta); identical across the fleet */
    const char *holder;  /* who we are, for operators ($POD_NAME or the host name) */
    const char *version; /* ours, for operators */
    /* etcd RBAC (cluster/etcd_auth.h): a user and one of a password or a password file; no user =
     * no authentication. A refusal of them at start is fatal (claim: -1), later it fences. */
    const char *auth_user, *auth_password, *auth_password_file;
    clk_source *clock;     /* the generators' clock: fences are on it */
    bool (*should_stop)(void); /* polled between start-up retries (a pending SIGTERM); may be
                                  NULL */
    struct etcd_tls *tls; /* https:// endpoints (cluster/etcd_tls.h), owned by the caller and
                             outliving the identity; NULL: http:// */
} sf_identity_etcd_config;

int sf_identity_etcd_init(sf_identity *id, const sf_identity_etcd_config *c, char *err,
                          size_t errlen);

/* For the sequences' etcd source (cluster/seq_etcd.h): the owner key of the first slot held,
 * with the lease and create revision of its claim, which a block claim compares exactly as a
 * renewal does (a process that lost its slot claims nothing). false while no slot is held (not
 * claimed yet, lapsed, lost, released) or when the backend is not etcd. Any thread; a stale
 * answer only makes etcd refuse the compare. */
typedef struct sf_identity_owner {
    char key[PREFIX_KEY_MAX];
    int64_t lease, create_revision;
    uint32_t worker;
} sf_identity_owner;
bool sf_identity_etcd_owner(sf_identity *id, sf_identity_owner *out);
/* The etcd backend's credentials (cluster/etcd_auth.h) for a client that shares them; NULL
 * without a user or with another backend. */
struct etcd_auth *sf_identity_etcd_auth(sf_identity *id);

#endif
