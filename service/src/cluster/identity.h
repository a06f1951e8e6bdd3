/* Identity backends: where this process gets its (datacenter, worker) slots and where it keeps
 * the floor E that makes IDs of a slot never repeat nor go backwards (design 14, section 4).
 *
 * One interface, several backends:
 *   - static (identity_static.c): the id configured as a number, a StatefulSet ordinal or an
 *     environment variable (config resolves it); E lives in the local lease file;
 *   - etcd (later): slots claimed in etcd under a lease, E stored next to them, a fence.
 *
 * The whole contract is claim, renew, fence deadline, release, handoff time, plus a metrics hook:
 *   claim    once at start, on the main thread, before any generator exists: the slots (n workers
 *            in one datacenter, not necessarily contiguous) and the handoff floor E_prev (Unix
 *            ms) below which no ID of these slots may be issued (the previous holder's final E,
 *            or the lease file's).
 *   renew    persists a floor E >= want_end_ms (the lease keeper's wish; a backend with a fence
 *            may store less and says so), returns the E stored and the fence: the moment (ms on
 *            the generators' clock) after which this process must not issue (UINT64_MAX: none).
 *            lost = the slot is gone for good (the caller caps its generators).
 *   fence_ms the current fence, cheap, any thread (UINT64_MAX: none).
 *   release  at a clean stop: persists the exact final E (the tick after the last ID issued) and
 *            frees the slots, so a successor starts without waiting.
 *   metrics  appends the backend's Prometheus families (may do nothing).
 *
 * Times are Unix ms on the generators' clock (snowflake/clock.h). claim, renew and release are
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obs/prom.h"
#include "snowflake/lease.h"

#define SF_IDENTITY_MAX_SLOTS 256 /* one per event loop at most (config's CFG_MAX_THREADS) */
#define SF_IDENTITY_NO_FENCE  UINT64_MAX

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
    bool lost;              /* the slot is no longer ours */
} sf_identity_renewal;

typedef struct sf_identity_ops {
    const char *name; /* "static", "etcd" */
    int (*claim)(void *b, unsigned n, sf_identity_slots *out, char *err, size_t errlen);
    int (*renew)(void *b, uint64_t want_end_ms, sf_identity_renewal *out, char *err, size_t errlen);
    uint64_t (*fence_ms)(void *b);
    int (*release)(void *b, uint64_t final_end_ms, char *err, size_t errlen);
    void (*metrics)(void *b, prom_buf *p);
    void (*destroy)(void *b);
} sf_identity_ops;

typedef struct sf_identity {
    const sf_identity_ops *ops;
    void *backend;
    sf_identity_slots slots; /* after a successful claim */
    bool claimed;
} sf_identity;

/* Claims n slots (1 <= n <= SF_IDENTITY_MAX_SLOTS) and checks the backend's answer (n workers,
 * no worker twice). On success id->slots holds them. Returns 0, or -1 with err. */
int sf_identity_claim(sf_identity *id, unsigned n, char *err, size_t errlen);
int sf_identity_renew(sf_identity *id, uint64_t want_end_ms, sf_identity_renewal *out, char *err,
                      size_t errlen);
uint64_t sf_identity_fence_ms(sf_identity *id);
int sf_identity_release(sf_identity *id, uint64_t final_end_ms, char *err, size_t errlen);
void sf_identity_metrics(sf_identity *id, prom_buf *p);
/* Frees the backend (does not release: that is sf_identity_release's, at a clean stop). Safe on
 * a zeroed sf_identity. */
void sf_identity_free(sf_identity *id);

/* The lease keeper's store over id: persist = renew (open the generators up to min(E stored,
 * fence); a lost slot is an error, the generators keep their old limit and the fence runs out),
 * final = release. id must outlive the keeper. */
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

#endif
