/* Timestamp lease: restart safety for the generator.
 *
 * The lease file holds one time E (ms since the Unix epoch) with the promise that every ID issued
 * so far has a tick starting before E. At start the generator may only issue ticks starting at or
 * after E, so a restart (crash, kill -9, wall clock stepped back) can never repeat or go below an
 * earlier ID. While running, a keeper thread moves E ahead of the clock by `window_ms`, writing
 * the file atomically (util/fsio.h: tmp + fsync + rename + fsync of the directory) well before
 * the generator reaches it; the generator refuses ticks the file does not cover (SF_ELEASE), so a
 * stalled disk costs availability, never uniqueness. On a clean stop the final E is exactly the
 * tick after the last issued ID, so a graceful restart never waits.
 *
 * File format, one line: "snowflaked-lease 1 <E> <crc32 of the text before it, 8 hex digits>\n".
 *
 * Where E goes is the keeper's store (sf_lease_store): the lease file by default, or an identity
 * backend (cluster/identity.h, which adapts its renew/release to this interface: snowflake/ knows
 * nothing of cluster/). The keeper owns the policy (when to renew, how far, the exact final E,
 * opening the generators); the store only persists and says how far the generators may go.
 */
#ifndef SF_SNOWFLAKE_LEASE_H
#define SF_SNOWFLAKE_LEASE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "snowflake/generator.h"

#define SF_LEASE_FILE "snowflake.lease"

/* Returns 1 and *end_ms if the file holds a valid lease, 0 if it does not exist, -1 with a reason
 * in err if it exists but cannot be read or is corrupt. */
int sf_lease_read(const char *path, uint64_t *end_ms, char *err, size_t errlen);
/* Atomically replaces the file (util/fsio.h: on failure the old one is intact). Returns 0, or -1
 * with a reason in err. */
int sf_lease_write(const char *path, uint64_t end_ms, char *err, size_t errlen);

/* First tick of `layout` that starts at or after end_ms: the generator's min_tick after restart. */
uint64_t sf_lease_first_tick(const sf_layout *layout, uint64_t end_ms);

/* What one persist call achieved. */
typedef struct sf_lease_renewal {
    uint64_t stored_end_ms; /* the E now persisted (the file: the one asked for) */
    uint64_t open_until_ms; /* the generators may issue ticks that start before this; the keeper
                               uses min(this, stored_end_ms): a fence may hold it lower */
} sf_lease_renewal;

/* Where the keeper's promises go. Called by one thread at a time: the starter (the first
 * persist), the keeper thread (renewals), the stopper (final). */
#define SF_LEASE_NOT_YET 1

typedef struct sf_lease_store {
    /* Persists a promise that every ID issued starts before want_end_ms (never below the last
     * one). Returns 0 with *out, -1 with a reason in err (the generators keep their limit, a
     * failure is counted), or SF_LEASE_NOT_YET: nothing to persist yet (an identity still
     * waiting for a slot), the generators stay closed, asked again at the next renewal. */
    int (*persist)(void *ctx, uint64_t want_end_ms, sf_lease_renewal *out, char *err,
                   size_t errlen);
    /* The exact promise at a clean stop: the tick after the last ID issued (may be below the
     * last persisted E). Returns 0, or -1 with err. */
    int (*final)(void *ctx, uint64_t end_ms, char *err, size_t errlen);
    void *ctx;
} sf_lease_store;

typedef struct sf_lease_keeper {
    sf_gen *const *gens; /* every generator of the process (one, or one per loop) */
    size_t ngens;
    sf_lease_store store;
    char path[4096]; /* the lease file, for sf_lease_keeper_start's own store */
    uint32_t window_ms;
    uint64_t end_ms;                   /* last lease written */
    _Atomic uint64_t writes, failures; /* stats: one writer at a time, util/counter.h */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, running;
} sf_lease_keeper;

/* Writes the first lease (covering [now, now + window) and never below prev_end_ms) synchronously,
 * opens the generators up to it, then starts the renewal thread (also when the store says
 * SF_LEASE_NOT_YET: then the generators stay closed until a renewal succeeds). The generators share one clock
 * and must outlive the keeper; each may have its own layout (tick space): E is a Unix-ms time, so
 * one lease covers Snowflake IDs and the 128-bit formats alike. Returns 0, or -1 with err. */
int sf_lease_keeper_start(sf_lease_keeper *k, sf_gen *const *gens, size_t ngens, const char *path,
                          uint32_t window_ms, uint64_t prev_end_ms, char *err, size_t errlen);
/* The same with another store (which must outlive the keeper); the keeper must not move while
 * it runs. */
int sf_lease_keeper_start_store(sf_lease_keeper *k, sf_gen *const *gens, size_t ngens,
                                const sf_lease_store *store, uint32_t window_ms,
                                uint64_t prev_end_ms, char *err, size_t errlen);
/* Seals the generators, stops the thread and hands the exact final lease to the store. Returns 0
 * or -1. */
int sf_lease_keeper_stop(sf_lease_keeper *k, char *err, size_t errlen);

#endif
