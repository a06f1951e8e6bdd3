/* Snowflake ID generator: unique, strictly increasing IDs for one (datacenter, worker) pair.
 *
 * Thread-safety is the sync mode's job: SF_SYNC_ATOMIC (lock-free, one packed 64-bit state word
 * updated by CAS on its own cache line), SF_SYNC_SPINLOCK (test-and-test-and-set with PAUSE) or
 * SF_SYNC_MUTEX. All modes share one pure reservation function, so they issue identical sequences.
 * To give each thread its own counter instead, create one generator per thread with its own
 * worker id.
 *
 * Rules, in order, for a request of n IDs at clock tick `now` after last issued (last, seq):
 *   - sealed (shutdown)                         -> SF_ESEALED
 *   - now < last - max_backward                 -> SF_ECLOCK, nothing issued, counted
 *   - otherwise IDs continue from max(now, next free slot after (last, seq)); if the last one
 *     lands in a tick after `now` (sequence exhausted, clock slightly behind, or a batch spanning
 *     ticks) the call spins until the clock reaches it, so no ID carries a future timestamp.
 *     Counted as sequence-exhaustion or clock-behind waits.
 *   - a tick beyond the persisted lease          -> SF_ELEASE (the lease keeper fell behind)
 *   - a tick beyond the layout's lifetime        -> SF_EEXPIRED
 * Nothing here does I/O; the only blocking is the bounded wait above.
 */
#ifndef SF_SNOWFLAKE_GENERATOR_H
#define SF_SNOWFLAKE_GENERATOR_H

#include <pthread.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>

#include "snowflake/clock.h"
#include "snowflake/layout.h"

typedef enum { SF_SYNC_ATOMIC = 0, SF_SYNC_SPINLOCK, SF_SYNC_MUTEX } sf_sync_mode;

enum {
    SF_OK = 0,
    SF_ECLOCK = -1,   /* clock behind the last issued tick by more than max_backward */
    SF_ELEASE = -2,   /* the next tick is not covered by a persisted lease */
    SF_ESEALED = -3,  /* generator sealed for shutdown */
    SF_EEXPIRED = -4, /* timestamp field exhausted: the layout's lifetime is over */
    SF_EINVAL = -5,   /* bad argument (batch size) */
};

const char *sf_gen_strerror(int err);
const char *sf_sync_mode_name(sf_sync_mode m);
int sf_sync_mode_parse(const char *s, sf_sync_mode *out); /* 0 or -1 */

typedef struct sf_gen_config {
    sf_layout layout;
    uint32_t datacenter, worker;
    sf_sync_mode sync;
    uint32_t max_backward_ms; /* tolerated clock regression, waited out (at least 1 tick) */
    uint32_t max_batch;       /* largest n for sf_gen_batch */
    uint64_t min_tick;        /* first tick that may be issued (from the lease file); 0 = any */
    bool lease_guarded;       /* if set, nothing is issued until sf_gen_extend_lease() */
    sf_clock *clock;          /* NULL = sf_clock_system() */
} sf_gen_config;

typedef struct sf_gen_stats {
    uint64_t exhaustion_waits;    /* waits for the next tick because a tick's sequence ran out */
    uint64_t clock_behind_waits;  /* waits because the clock was behind the last tick */
    uint64_t clock_behind_errors; /* SF_ECLOCK returned */
    uint64_t lease_errors;        /* SF_ELEASE returned */
} sf_gen_stats;

typedef struct sf_gen {
    /* Hot, written on every issue: alone on a cache line (atomic mode) or with its lock. */
    alignas(64) _Atomic uint64_t state; /* ((last_tick + 1) << sequence_bits) | last_seq */
    _Atomic int spin;
    pthread_mutex_t mutex;
    uint64_t locked_state; /* state for the lock modes, guarded by spin / mutex */

    /* Read-mostly. */
    alignas(64) sf_layout layout;
    uint64_t node_bits; /* datacenter and worker, in place */
    uint64_t max_backward_ticks;
    uint32_t max_batch;
    sf_sync_mode sync;
    sf_clock *clock;
    _Atomic uint64_t lease_limit; /* first tick NOT covered by the persisted lease */

    /* Rare-path counters. */
    alignas(64) _Atomic uint64_t n_exhaustion_waits, n_clock_behind_waits, n_clock_behind_errors,
        n_lease_errors;
} sf_gen;

/* Validates ids against the layout. Returns 0, or -1 with a reason in err. */
int sf_gen_init(sf_gen *g, const sf_gen_config *cfg, char *err, size_t errlen);
void sf_gen_destroy(sf_gen *g);

/* One ID. Returns SF_OK or a negative SF_E* code (*id untouched). */
int sf_gen_next(sf_gen *g, uint64_t *id);
/* n consecutive IDs (1 <= n <= max_batch) reserved in one operation, increasing. */
int sf_gen_batch(sf_gen *g, uint64_t *ids, uint32_t n);

/* Milliseconds until an SF_ECLOCK / lease refusal may clear (0 if issuing now would work). */
uint64_t sf_gen_retry_after_ms(sf_gen *g);

/* Last tick that may be issued is limit - 1. Only ever raises the limit. Any thread. */
void sf_gen_extend_lease(sf_gen *g, uint64_t limit_tick);
/* Last issued tick + 1 (or min_tick if nothing was issued); what the lease must stay above. */
uint64_t sf_gen_next_tick(sf_gen *g);
/* Refuses all further IDs and returns the tick after the last issued one (for the final lease). */
uint64_t sf_gen_seal(sf_gen *g);

void sf_gen_stats_get(sf_gen *g, sf_gen_stats *out);
uint64_t sf_gen_now_tick(sf_gen *g);

#endif
