/* Snowflake ID generator: unique, strictly increasing IDs for one (datacenter, worker) pair.
 *
 * Thread-safety is the sync mode's job: SF_SYNC_ATOMIC (lock-free, one packed 64-bit state word
 * updated by CAS on its own cache line), SF_SYNC_SPINLOCK (test-and-test-and-set with PAUSE) or
 * SF_SYNC_MUTEX. All modes share one pure reservation function, so they issue identical sequences.
 * To give each thread its own counter instead, create one generator per thread with its own
 * worker id.
 *
 * Two times matter: `now`, the clock's tick, and `seen`, the highest tick the clock has shown this
 * generator (initially the tick before min_tick, the floor from the lease). Rules for n IDs:
 *   - sealed (shutdown)                               -> SF_ESEALED
 *   - now < seen - max_backward   (the clock went back) -> SF_ECLOCK, nothing issued, counted
 *   - IDs continue from max(now, the slot after the last issued ID); in a fresh tick from a
 *     random sequence below 2^random_start_bits when configured (Leaf's defence against reading
 *     order volumes off sequence numbers; the top sequence bit stays free). When the last one lands in
 *     a tick after `now` (the sequence ran out, the clock is slightly behind, a batch spans
 *     ticks) the call waits until the clock reaches it, so no ID carries a future timestamp.
 *     Counted as sequence-exhaustion or clock-behind waits.
 *   - ...but never more than max_ahead ticks ahead of the clock: demand above the layout's
 *     capacity is refused, not queued   -> SF_EBUSY, counted
 *   - a tick beyond the persisted lease  -> SF_ELEASE (the lease keeper fell behind), counted
 *   - a tick beyond the layout's lifetime -> SF_EEXPIRED
 * max_ahead = max_backward + the ticks one max_batch spans + 1. Waits spin for short gaps and
 * sleep for longer ones; they are bounded by max_ahead. Nothing here does I/O.
 */
#ifndef SF_SNOWFLAKE_GENERATOR_H
#define SF_SNOWFLAKE_GENERATOR_H

#include <pthread.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/clock.h"
#include "snowflake/layout.h"

typedef enum { SF_SYNC_ATOMIC = 0, SF_SYNC_SPINLOCK, SF_SYNC_MUTEX } sf_sync_mode;

enum {
    SF_OK = 0,
    SF_ECLOCK = -1,   /* clock behind what it showed before by more than max_backward */
    SF_ELEASE = -2,   /* the next tick is not covered by a persisted lease */
    SF_ESEALED = -3,  /* generator sealed for shutdown */
    SF_EEXPIRED = -4, /* timestamp field exhausted: the layout's lifetime is over */
    SF_EINVAL = -5,   /* bad argument (batch size) */
    SF_EBUSY = -6,    /* demand beyond the layout's capacity: would run too far ahead */
    SF_ERANDOM = -7,  /* the kernel's random source failed (128-bit formats only) */
    SF_EBOUND = -8,   /* sf_gen_bind after the first lease: the identity is fixed */
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
    uint8_t random_start_bits; /* a fresh tick's sequence starts at a random value below
                                  2^bits (< sequence_bits): no volume read off sequence numbers */
    bool lease_guarded;       /* if set, nothing is issued until sf_gen_extend_lease() */
    clk_source *clock;          /* NULL = clk_system() */
} sf_gen_config;

typedef struct sf_gen_stats {
    uint64_t exhaustion_waits;    /* waits for the next tick because a tick's sequence ran out */
    uint64_t clock_behind_waits;  /* waits because the clock was behind what it showed */
    uint64_t clock_behind_errors; /* SF_ECLOCK returned */
    uint64_t lease_errors;        /* SF_ELEASE returned */
    uint64_t busy_errors;         /* SF_EBUSY returned */
} sf_gen_stats;

typedef struct sf_gen {
    /* Hot, written on every issue: alone on a cache line (atomic mode) or with its lock. */
    alignas(64) _Atomic uint64_t state; /* ((last_tick + 1) << sequence_bits) | last_seq */
    _Atomic uint64_t seen;              /* highest clock tick observed (plus the floor) */
    _Atomic int spin;
    pthread_mutex_t mutex;
    uint64_t locked_state; /* state for the lock modes, guarded by spin / mutex */

    /* Read-mostly. */
    alignas(64) sf_layout layout;
    uint64_t node_bits; /* datacenter and worker, in place */
    uint64_t max_backward_ticks, max_ahead_ticks;
    uint32_t max_batch;
    uint64_t random_start_mask; /* 2^random_start_bits - 1 */
    sf_sync_mode sync;
    clk_source *clock;
    _Atomic uint64_t lease_limit; /* first tick NOT covered by the persisted lease */

    /* Rare-path counters. */
    alignas(64) _Atomic uint64_t n_exhaustion_waits, n_clock_behind_waits, n_clock_behind_errors,
        n_lease_errors, n_busy_errors;

    /* Writers of lease_limit (extend, cap, bind) serialise on lease_mutex; the hot path only
     * loads lease_limit. */
    pthread_mutex_t lease_mutex;
    uint64_t lease_ceiling; /* lowest sf_gen_cap_lease so far; no extend goes above it */
    bool lease_granted;     /* a lease was ever extended above 0: sf_gen_bind is over */
} sf_gen;

/* Validates ids against the layout. Returns 0, or -1 with a reason in err. */
int sf_gen_init(sf_gen *g, const sf_gen_config *cfg, char *err, size_t errlen);
void sf_gen_destroy(sf_gen *g);

/* One ID. Returns SF_OK or a negative SF_E* code (*id untouched). SF_EINVAL on a wide layout
 * (a 128-bit format's tick space: use sf_gen_reserve). */
int sf_gen_next(sf_gen *g, uint64_t *id);
/* n consecutive IDs (1 <= n <= max_batch) reserved in one operation, increasing. */
int sf_gen_batch(sf_gen *g, uint64_t *ids, uint32_t n);

/* n consecutive (tick, sequence) slots reserved in one operation, under the same rules, for a
 * format that composes its own IDs from them (snowflake/id128.h on a layout from
 * sf_layout_init_unix_ms). The slots are first_tick/first_seq and the n - 1 after it, the
 * sequence rolling over into the next tick after sequence_max. */
typedef struct sf_span {
    uint64_t first_tick;
    uint32_t first_seq;
} sf_span;
int sf_gen_reserve(sf_gen *g, uint32_t n, sf_span *out);

/* Milliseconds until a refusal (clock behind, lease, busy) may clear; 0 if issuing would work. */
uint64_t sf_gen_retry_after_ms(sf_gen *g);
/* Whether an ID could be issued now: SF_OK, or the refusal it would meet (SF_ECLOCK, SF_ELEASE,
 * SF_EBUSY, SF_ESEALED), with the wait in *retry_ms when not NULL. */
int sf_gen_status(sf_gen *g, uint64_t *retry_ms);

/* Last tick that may be issued is limit - 1. Only ever raises the limit, and never above a cap
 * (sf_gen_cap_lease, until sf_gen_resume). Any thread. */
void sf_gen_extend_lease(sf_gen *g, uint64_t limit_tick);
/* The slot is lost (an identity backend says so: lease lost, not ours any more). Lowers the limit
 * to limit_tick at once if it is above, and makes limit_tick a permanent ceiling: no later
 * sf_gen_extend_lease raises the limit above the lowest cap, so a renewal that raced the loss
 * cannot revive the slot. To issue under the same slot again (re-claimed), sf_gen_resume; under
 * another, build a new generator. Any thread.
 *
 * What a cap guarantees to reservations racing it: every reservation (sf_gen_next, _batch,
 * _reserve) compares its last tick with lease_limit, loaded once per attempt, and publishes only
 * what that comparison allowed. So
 *   - a call that begins after sf_gen_cap_lease returned issues only ticks < limit_tick;
 *   - a call in flight while the cap runs may still return IDs with ticks in
 *     [limit_tick, old limit): it loaded the old limit before the cap's store. At most one
 *     reservation per concurrently running call; its ticks are below the limit that was in force
 *     (so below every lease persisted), and it may reach its caller after the cap returned (for
 *     instance after waiting in a tick ahead of the clock).
 * A caller that needs "nothing handed out after the loss" must therefore also wait for the calls
 * in flight (for the daemon: one pass of every event loop). */
void sf_gen_cap_lease(sf_gen *g, uint64_t limit_tick);
/* Gives a generator its identity late: a daemon that waits for a slot builds its generators
 * lease-guarded first, then binds the slot it claimed. Sets the node bits to (datacenter, worker)
 * and raises the floor to min_tick (the floor never moves down: the higher of min_tick and the
 * one given at init stays). Legal only while no lease was ever granted (lease_limit has always
 * been 0, so nothing was issued): returns SF_EBOUND otherwise, SF_EINVAL (err filled) for ids or
 * a min_tick the layout cannot hold, SF_OK on success. Any thread, concurrently with issuing
 * calls (they refuse with SF_ELEASE until the first extend, and read the node bits only after
 * their acquire load of a granted limit, so the first extend publishes the binding). */
int sf_gen_bind(sf_gen *g, uint32_t datacenter, uint32_t worker, uint64_t min_tick, char *err,
                size_t errlen);
/* The same slot is ours again after a cap (the identity re-claimed it under a new lease): raises
 * the floor to min_tick (the previous holders' E: never lowered) and lifts the ceiling, so the
 * next sf_gen_extend_lease opens it. The node bits do not change: a different slot needs a new
 * generator. Returns SF_OK, or SF_EINVAL (err filled) for a min_tick the layout cannot hold. Any
 * thread. */
int sf_gen_resume(sf_gen *g, uint64_t min_tick, char *err, size_t errlen);
/* Another slot after a loss: new node bits, the floor raised to min_tick (the new slot's previous
 * holders' E), the ceiling lifted; the next sf_gen_extend_lease opens it. The caller must have
 * capped the generator to 0 (SF_EBOUND otherwise) AND waited until no reservation that began
 * before the cap can still be running (the daemon: one pass of every event loop), since such a
 * reservation could combine the new node bits with an old tick. SF_EINVAL (err) for ids or a
 * min_tick the layout cannot hold. */
int sf_gen_rebind(sf_gen *g, uint32_t datacenter, uint32_t worker, uint64_t min_tick, char *err,
                  size_t errlen);
/* Last issued tick + 1 (or min_tick if nothing was issued); what the lease must stay above. */
uint64_t sf_gen_next_tick(sf_gen *g);
/* How far (ms) IDs can run ahead of the clock: what a lease must cover beyond `now`. */
uint64_t sf_gen_max_ahead_ms(const sf_gen *g);
/* The same, before a generator exists (configuration checks). */
uint64_t sf_gen_ahead_ms_for(const sf_layout *l, uint32_t max_backward_ms, uint32_t max_batch,
                             unsigned random_start_bits);
/* The first tick a process taking over this identity may issue when the previous holder was
 * another process whose floor it cannot read (another data_dir: no lease of its own to go by),
 * that holder having ended before now_ms. An ID leaves a generator only once the clock has
 * reached its tick (ticks reserved beyond it die with the process), so the holder handed out
 * nothing past its clock; what is added to ours: the tick now_ms is in, and max_backward_ms (at
 * least one tick) for the two processes' clocks disagreeing (each anchors its own: microseconds,
 * or a wall-clock step back of up to that much while the holder ran). */
uint64_t sf_gen_successor_tick(const sf_layout *l, uint32_t max_backward_ms, uint64_t now_ms);
/* IDs per second one generator guarantees: every tick holds 2^sequence_bits IDs, less up to
 * 2^random_start_bits - 1 skipped at a random start. */
double sf_gen_cap_per_second(const sf_layout *l, unsigned random_start_bits);
/* Refuses all further IDs and returns the tick after the last issued one (for the final lease). */
uint64_t sf_gen_seal(sf_gen *g);

void sf_gen_stats_get(sf_gen *g, sf_gen_stats *out);
uint64_t sf_gen_now_tick(sf_gen *g);

#endif
