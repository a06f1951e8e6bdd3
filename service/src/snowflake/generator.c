#include "util/spinlock.h"
#include "snowflake/generator.h"
#include "snowflake/rng.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define SEALED_BIT (UINT64_C(1) << 63) /* free: timestamp_bits + sequence_bits <= 63 */
/* The Retry-After while refusing for want of a lease: see sf_gen_status. */
#define LEASE_RETRY_MS 1000u

const char *sf_gen_strerror(int err)
{
    switch (err) {
    case SF_OK: return "ok";
    case SF_ECLOCK: return "clock is behind the last issued ID beyond the tolerated gap";
    case SF_ELEASE: return "timestamp lease not reached or not renewed";
    case SF_ESEALED: return "generator is shutting down";
    case SF_EEXPIRED: return "timestamp field exhausted: layout lifetime is over";
    case SF_EINVAL: return "invalid batch size";
    case SF_EBUSY: return "ID demand exceeds the layout's capacity";
    case SF_ERANDOM: return "the kernel's random source failed";
    case SF_EBOUND: return "the generator was already leased: its identity cannot change";
    default: return "unknown error";
    }
}

static const char *const sync_names[] = {"atomic", "spinlock", "mutex"};

const char *sf_sync_mode_name(sf_sync_mode m)
{
    return (unsigned)m < 3 ? sync_names[m] : "?";
}

int sf_sync_mode_parse(const char *s, sf_sync_mode *out)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(s, sync_names[i]) == 0) {
            *out = (sf_sync_mode)i;
            return 0;
        }
    return -1;
}

/* At least one tick: around a tick boundary, threads reading the same clock may disagree by one
 * tick for a few nanoseconds, and that must not turn into an error. */
static uint64_t backward_ticks(const sf_layout *l, uint32_t max_backward_ms)
{
    uint64_t t = (max_backward_ms + l->unit_ms - 1) / l->unit_ms;
    return t < 1 ? 1 : t;
}

/* Tolerated regression, plus the ticks a maximal batch spans (from the latest random start),
 * plus the tick being filled. */
static uint64_t ahead_ticks(const sf_layout *l, uint32_t max_backward_ms, uint32_t max_batch,
                            unsigned random_start_bits)
{
    uint64_t start_max = (UINT64_C(1) << random_start_bits) - 1;
    uint64_t batch_ticks = ((uint64_t)max_batch + start_max + l->sequence_max) >> l->sequence_bits;
    return backward_ticks(l, max_backward_ms) + batch_ticks + 1;
}

uint64_t sf_gen_ahead_ms_for(const sf_layout *l, uint32_t max_backward_ms, uint32_t max_batch,
                             unsigned random_start_bits)
{
    return ahead_ticks(l, max_backward_ms, max_batch, random_start_bits) * l->unit_ms;
}

uint64_t sf_gen_successor_tick(const sf_layout *l, uint32_t max_backward_ms, uint64_t now_ms)
{
    return sf_layout_tick_of(l, now_ms) + backward_ticks(l, max_backward_ms) + 1;
}

double sf_gen_cap_per_second(const sf_layout *l, unsigned random_start_bits)
{
    double skipped = (double)((UINT64_C(1) << random_start_bits) - 1);
    double per_tick = (double)(l->sequence_max + 1) - skipped;
    return per_tick * 1000.0 / (double)l->unit_ms;
}

/* The identity and floor checks init and bind share. Returns 0, or -1 with a reason in err. */
static int check_identity(const sf_layout *l, uint32_t datacenter, uint32_t worker,
                          uint64_t min_tick, char *err, size_t errlen)
{
    if (datacenter > l->datacenter_max) {
        snprintf(err, errlen, "datacenter id %u does not fit in %u bits (max %llu)", datacenter,
                 l->datacenter_bits, (unsigned long long)l->datacenter_max);
        return -1;
    }
    if (worker > l->worker_max) {
        snprintf(err, errlen, "worker id %u does not fit in %u bits (max %llu)", worker,
                 l->worker_bits, (unsigned long long)l->worker_max);
        return -1;
    }
    if (min_tick > l->tick_max) {
        snprintf(err, errlen, "first allowed tick %llu is beyond the layout's lifetime",
                 (unsigned long long)min_tick);
        return -1;
    }
    return 0;
}

int sf_gen_init(sf_gen *g, const sf_gen_config *cfg, char *err, size_t errlen)
{
    const sf_layout *l = &cfg->layout;
    if (check_identity(l, cfg->datacenter, cfg->worker, cfg->min_tick, err, errlen) != 0)
        return -1;
    if (cfg->max_batch < 1) {
        snprintf(err, errlen, "max_batch must be at least 1");
        return -1;
    }
    if ((unsigned)cfg->sync > SF_SYNC_MUTEX) {
        snprintf(err, errlen, "unknown sync mode %d", (int)cfg->sync);
        return -1;
    }
    if (cfg->random_start_bits >= l->sequence_bits) {
        snprintf(err, errlen, "random_sequence_start_bits must be below sequence_bits (%u), got %u",
                 l->sequence_bits, cfg->random_start_bits);
        return -1;
    }
    memset(g, 0, sizeof *g);
    g->layout = *l;
    g->node_bits = sf_layout_node(l, cfg->datacenter, cfg->worker);
    g->max_backward_ticks = backward_ticks(l, cfg->max_backward_ms);
    g->max_ahead_ticks =
        ahead_ticks(l, cfg->max_backward_ms, cfg->max_batch, cfg->random_start_bits);
    g->random_start_mask = (UINT64_C(1) << cfg->random_start_bits) - 1;
    g->max_batch = cfg->max_batch;
    g->sync = cfg->sync;
    g->clock = cfg->clock ? cfg->clock : clk_system();
    /* "last issued" = (min_tick - 1, sequence_max): the next free slot is (min_tick, 0). */
    uint64_t st = (cfg->min_tick << l->sequence_bits) | l->sequence_max;
    atomic_init(&g->state, st);
    /* The floor acts as a time already shown: a clock far below it is "behind". */
    atomic_init(&g->seen, cfg->min_tick ? cfg->min_tick - 1 : 0);
    g->locked_state = st;
    atomic_init(&g->spin, 0);
    pthread_mutex_init(&g->mutex, NULL);
    atomic_init(&g->lease_limit, cfg->lease_guarded ? 0 : l->tick_max + 1);
    pthread_mutex_init(&g->lease_mutex, NULL);
    g->lease_ceiling = UINT64_MAX;
    g->lease_granted = !cfg->lease_guarded; /* unguarded: issuing from the start, nothing to bind */
    return 0;
}

void sf_gen_destroy(sf_gen *g)
{
    pthread_mutex_destroy(&g->lease_mutex);
    pthread_mutex_destroy(&g->mutex);
}

uint64_t sf_gen_now_tick(sf_gen *g)
{
    return sf_layout_tick_of(&g->layout, clk_now(g->clock));
}

/* The whole policy, shared by every sync mode: given the state word, the clock and the highest
 * tick it has shown, where do n IDs go? Pure; the caller publishes *next_state only on SF_OK. */
typedef struct reservation {
    uint64_t first_tick, end_tick; /* ticks of the first and last ID */
    uint32_t first_seq;
} reservation;

static inline __attribute__((always_inline)) int reserve(const sf_gen *g, uint64_t state,
                                                         uint64_t now, uint64_t seen, uint32_t n,
                                                         uint64_t start, reservation *r,
                                                         uint64_t *next_state)
{
    if (state & SEALED_BIT)
        return SF_ESEALED;
    if (now + g->max_backward_ticks < seen)
        return SF_ECLOCK;
    const unsigned seq_bits = g->layout.sequence_bits;
    const uint64_t seq_max = g->layout.sequence_max;
    uint64_t last_plus1 = state >> seq_bits; /* last issued tick + 1 */
    uint64_t tick, seq;
    if (now >= last_plus1) { /* the clock moved on: a fresh tick */
        tick = now;
        seq = start;
    } else if ((state & seq_max) == seq_max) { /* last tick full: continue in the next */
        tick = last_plus1;
        seq = 0;
    } else {
        tick = last_plus1 - 1;
        seq = (state & seq_max) + 1;
    }
    uint64_t end_index = seq + n - 1;
    uint64_t end_tick = tick + (end_index >> seq_bits);
    if (end_tick > g->layout.tick_max)
        return SF_EEXPIRED;
    if (end_tick > (now > seen ? now : seen) + g->max_ahead_ticks)
        return SF_EBUSY;
    if (end_tick >= atomic_load_explicit(&g->lease_limit, memory_order_acquire))
        return SF_ELEASE;
    r->first_tick = tick;
    r->first_seq = (uint32_t)seq;
    r->end_tick = end_tick;
    *next_state = ((end_tick + 1) << seq_bits) | (end_index & seq_max);
    return SF_OK;
}

/* The clock, and the highest tick it has shown (raised here, once per tick). `seen` is loaded
 * before the clock is read: a thread preempted in between then reads a later clock, never an
 * earlier one, so being descheduled cannot look like the clock going back. */
static inline __attribute__((always_inline)) uint64_t read_clock(sf_gen *g, uint64_t *seen)
{
    uint64_t before = atomic_load_explicit(&g->seen, memory_order_acquire);
    uint64_t now = sf_gen_now_tick(g);
    /* Judge by `before`: a failed CAS below loads values other threads published after our
     * clock read, which may legitimately be later than `now`. */
    for (uint64_t s = before; now > s;) {
        if (atomic_compare_exchange_weak_explicit(&g->seen, &s, now, memory_order_release,
                                                  memory_order_relaxed))
            break;
    }
    *seen = now > before ? now : before;
    return now;
}

static int reserve_locked(sf_gen *g, uint32_t n, uint64_t start, reservation *r, uint64_t *now,
                          uint64_t *seen)
{
    uint64_t next;
    *now = read_clock(g, seen); /* read under the lock: a stale reading would look "behind" */
    int rc = reserve(g, g->locked_state, *now, *seen, n, start, r, &next);
    if (rc == SF_OK)
        g->locked_state = next;
    return rc;
}

/* Waits until the clock reaches `tick`: spinning for the last millisecond, sleeping before. */
static void wait_for_tick(sf_gen *g, uint64_t tick)
{
    for (;;) {
        uint64_t now = sf_gen_now_tick(g);
        if (now >= tick)
            return;
        uint64_t ms = (tick - now) * g->layout.unit_ms;
        if (ms >= 2) {
            struct timespec d = {.tv_sec = (time_t)((ms - 1) / 1000),
                                 .tv_nsec = (long)((ms - 1) % 1000) * 1000000L};
            nanosleep(&d, NULL);
        } else {
            cpu_relax();
        }
    }
}

static inline __attribute__((always_inline)) int reserve_sync(sf_gen *g, uint32_t n, reservation *r)
{
    uint64_t now, seen, start = 0;
    int rc;
    /* Drawn before any lock: used only if the reservation opens a fresh tick. */
    if (__builtin_expect(g->random_start_mask != 0, 0)) {
        if (sf_rng_u64(&start) != 0)
            return SF_ERANDOM;
        start &= g->random_start_mask;
    }
    switch (g->sync) {
    case SF_SYNC_ATOMIC: {
        uint64_t old = atomic_load_explicit(&g->state, memory_order_relaxed), next;
        do {
            now = read_clock(g, &seen); /* re-read after a lost race, as under a lock */
            rc = reserve(g, old, now, seen, n, start, r, &next);
            if (rc != SF_OK)
                break;
        } while (!atomic_compare_exchange_weak_explicit(&g->state, &old, next, memory_order_relaxed,
                                                        memory_order_relaxed));
        break;
    }
    case SF_SYNC_SPINLOCK:
        spin_lock(&g->spin);
        rc = reserve_locked(g, n, start, r, &now, &seen);
        spin_unlock(&g->spin);
        break;
    default:
        pthread_mutex_lock(&g->mutex);
        rc = reserve_locked(g, n, start, r, &now, &seen);
        pthread_mutex_unlock(&g->mutex);
        break;
    }
    if (__builtin_expect(rc == SF_OK, 1)) {
        if (r->end_tick > now) {
            /* Ahead of the clock: wait, so that no ID carries a timestamp from the future. */
            atomic_fetch_add_explicit(now < seen ? &g->n_clock_behind_waits
                                                 : &g->n_exhaustion_waits,
                                      1, memory_order_relaxed);
            wait_for_tick(g, r->end_tick);
        }
        return SF_OK;
    }
    _Atomic uint64_t *counter = rc == SF_ECLOCK   ? &g->n_clock_behind_errors
                                : rc == SF_ELEASE ? &g->n_lease_errors
                                : rc == SF_EBUSY  ? &g->n_busy_errors
                                                  : NULL;
    if (counter)
        atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
    return rc;
}

int sf_gen_next(sf_gen *g, uint64_t *id)
{
    if (__builtin_expect(g->layout.wide, 0))
        return SF_EINVAL;
    reservation r;
    int rc = reserve_sync(g, 1, &r);
    if (rc == SF_OK)
        *id = sf_layout_compose(&g->layout, r.first_tick, g->node_bits, r.first_seq);
    return rc;
}

int sf_gen_batch(sf_gen *g, uint64_t *ids, uint32_t n)
{
    if (n < 1 || n > g->max_batch || g->layout.wide)
        return SF_EINVAL;
    reservation r;
    int rc = reserve_sync(g, n, &r);
    if (rc != SF_OK)
        return rc;
    /* The layout copied into locals: its shifts are uint8_t, which may alias the stores to ids,
     * so read through g they would be reloaded for every ID. */
    const sf_layout l = g->layout;
    const uint64_t node = g->node_bits, seq_max = l.sequence_max;
    uint64_t tick = r.first_tick, seq = r.first_seq;
    for (uint32_t i = 0; i < n; i++) {
        ids[i] = sf_layout_compose(&l, tick, node, seq);
        if (seq == seq_max) {
            seq = 0;
            tick++;
        } else {
            seq++;
        }
    }
    return SF_OK;
}

int sf_gen_reserve(sf_gen *g, uint32_t n, sf_span *out)
{
    if (n < 1 || n > g->max_batch)
        return SF_EINVAL;
    reservation r;
    int rc = reserve_sync(g, n, &r);
    if (rc == SF_OK)
        *out = (sf_span){.first_tick = r.first_tick, .first_seq = r.first_seq};
    return rc;
}

static uint64_t load_state(sf_gen *g)
{
    if (g->sync == SF_SYNC_ATOMIC)
        return atomic_load(&g->state);
    uint64_t st;
    if (g->sync == SF_SYNC_SPINLOCK) {
        spin_lock(&g->spin);
        st = g->locked_state;
        spin_unlock(&g->spin);
    } else {
        pthread_mutex_lock(&g->mutex);
        st = g->locked_state;
        pthread_mutex_unlock(&g->mutex);
    }
    return st;
}

uint64_t sf_gen_next_tick(sf_gen *g)
{
    return (load_state(g) & ~SEALED_BIT) >> g->layout.sequence_bits;
}

int sf_gen_status(sf_gen *g, uint64_t *retry_ms)
{
    uint64_t now = sf_gen_now_tick(g);
    uint64_t seen = atomic_load(&g->seen);
    if (load_state(g) & SEALED_BIT) {
        if (retry_ms)
            *retry_ms = 0;
        return SF_ESEALED;
    }
    uint64_t next = sf_gen_next_tick(g); /* where the next ID would go */
    uint64_t wait = 0;
    int rc = SF_OK;
    if (now + g->max_backward_ticks < seen) {
        wait = seen - g->max_backward_ticks - now;
        rc = SF_ECLOCK;
    }
    if (next > now + g->max_ahead_ticks && next - now - g->max_ahead_ticks > wait) {
        wait = next - now - g->max_ahead_ticks;
        rc = SF_EBUSY;
    }
    uint64_t limit = atomic_load(&g->lease_limit);
    uint64_t first = next > now ? next : now;
    /* A lease moves when its keeper renews it (a file write, an etcd round trip), not with the
     * clock: the distance to the limit says nothing of when (with no lease granted yet, e.g.
     * while an etcd identity waits for a slot, it is every tick since the epoch: a Retry-After
     * of years). Ask the client to come back in a second. */
    uint64_t lease_wait = (LEASE_RETRY_MS + g->layout.unit_ms - 1) / g->layout.unit_ms;
    if (first >= limit && lease_wait > wait) {
        wait = lease_wait;
        rc = SF_ELEASE;
    }
    if (retry_ms)
        *retry_ms = wait * g->layout.unit_ms;
    return rc;
}

uint64_t sf_gen_retry_after_ms(sf_gen *g)
{
    uint64_t ms;
    sf_gen_status(g, &ms);
    return ms;
}

uint64_t sf_gen_max_ahead_ms(const sf_gen *g)
{
    return g->max_ahead_ticks * g->layout.unit_ms;
}

/* lease_limit has three writers (extend, cap, bind), all rare and all under lease_mutex: one lock
 * makes "extend never above a cap" and "bind only before the first extend" hold however the
 * calls race, which lock-free updates of two words could not. Issuing threads never take it:
 * they load lease_limit (acquire), and the seq_cst stores here publish what was written before. */
void sf_gen_extend_lease(sf_gen *g, uint64_t limit_tick)
{
    pthread_mutex_lock(&g->lease_mutex);
    if (limit_tick > g->lease_ceiling)
        limit_tick = g->lease_ceiling;
    if (limit_tick > atomic_load(&g->lease_limit)) {
        g->lease_granted = true;
        atomic_store(&g->lease_limit, limit_tick);
    }
    pthread_mutex_unlock(&g->lease_mutex);
}

void sf_gen_cap_lease(sf_gen *g, uint64_t limit_tick)
{
    pthread_mutex_lock(&g->lease_mutex);
    if (limit_tick < g->lease_ceiling)
        g->lease_ceiling = limit_tick;
    if (limit_tick < atomic_load(&g->lease_limit))
        atomic_store(&g->lease_limit, limit_tick);
    pthread_mutex_unlock(&g->lease_mutex);
}

/* The floor raised to min_tick in a state word, keeping the seal bit (sf_gen_seal may run at any
 * time) and never lowering it. */
static uint64_t floor_raised(const sf_gen *g, uint64_t st, uint64_t min_tick)
{
    const unsigned bits = g->layout.sequence_bits;
    if (((st & ~SEALED_BIT) >> bits) >= min_tick)
        return st;
    return (st & SEALED_BIT) | (min_tick << bits) | g->layout.sequence_max;
}

/* Raises the issue floor (state word and `seen`) to min_tick, never lowering it; lease_mutex
 * held. Issuing threads raise `seen` concurrently: CAS, never a plain store. */
static void raise_floor_locked(sf_gen *g, uint64_t min_tick)
{
    if (g->sync == SF_SYNC_ATOMIC) {
        uint64_t st = atomic_load(&g->state);
        while (!atomic_compare_exchange_weak(&g->state, &st, floor_raised(g, st, min_tick))) {
        }
    } else if (g->sync == SF_SYNC_SPINLOCK) {
        spin_lock(&g->spin);
        g->locked_state = floor_raised(g, g->locked_state, min_tick);
        spin_unlock(&g->spin);
    } else {
        pthread_mutex_lock(&g->mutex);
        g->locked_state = floor_raised(g, g->locked_state, min_tick);
        pthread_mutex_unlock(&g->mutex);
    }
    uint64_t want_seen = min_tick ? min_tick - 1 : 0;
    uint64_t seen = atomic_load(&g->seen);
    while (want_seen > seen && !atomic_compare_exchange_weak(&g->seen, &seen, want_seen)) {
    }
}

int sf_gen_bind(sf_gen *g, uint32_t datacenter, uint32_t worker, uint64_t min_tick, char *err,
                size_t errlen)
{
    if (check_identity(&g->layout, datacenter, worker, min_tick, err, errlen) != 0)
        return SF_EINVAL;
    pthread_mutex_lock(&g->lease_mutex);
    if (g->lease_granted) {
        pthread_mutex_unlock(&g->lease_mutex);
        snprintf(err, errlen, "%s", sf_gen_strerror(SF_EBOUND));
        return SF_EBOUND;
    }
    /* No lease was ever granted, so no reservation can succeed and none reads node_bits or
     * publishes a state word until the next extend, which this lock orders after us. */
    g->node_bits = sf_layout_node(&g->layout, datacenter, worker);
    raise_floor_locked(g, min_tick);
    pthread_mutex_unlock(&g->lease_mutex);
    return SF_OK;
}

int sf_gen_rebind(sf_gen *g, uint32_t datacenter, uint32_t worker, uint64_t min_tick, char *err,
                  size_t errlen)
{
    if (check_identity(&g->layout, datacenter, worker, min_tick, err, errlen) != 0)
        return SF_EINVAL;
    pthread_mutex_lock(&g->lease_mutex);
    if (atomic_load(&g->lease_limit) != 0) {
        pthread_mutex_unlock(&g->lease_mutex);
        snprintf(err, errlen, "rebind of a generator that is not capped to 0");
        return SF_EBOUND;
    }
    /* Capped to 0 and (the caller's promise) no reservation in flight: nothing reads node_bits
     * until the next extend, which this lock orders after us. */
    g->node_bits = sf_layout_node(&g->layout, datacenter, worker);
    raise_floor_locked(g, min_tick);
    g->lease_ceiling = UINT64_MAX;
    pthread_mutex_unlock(&g->lease_mutex);
    return SF_OK;
}

int sf_gen_resume(sf_gen *g, uint64_t min_tick, char *err, size_t errlen)
{
    if (min_tick > g->layout.tick_max) {
        snprintf(err, errlen, "floor tick %llu is beyond the layout's last tick",
                 (unsigned long long)min_tick);
        return SF_EINVAL;
    }
    pthread_mutex_lock(&g->lease_mutex);
    /* The cap left lease_limit at or below what any persisted floor covered; raising the floor
     * first means the next extend publishes both. A reservation still in flight from before the
     * cap finishes below the old limit, which the new floor is above. */
    raise_floor_locked(g, min_tick);
    g->lease_ceiling = UINT64_MAX;
    pthread_mutex_unlock(&g->lease_mutex);
    return SF_OK;
}

uint64_t sf_gen_seal(sf_gen *g)
{
    uint64_t st;
    if (g->sync == SF_SYNC_ATOMIC) {
        st = atomic_fetch_or(&g->state, SEALED_BIT);
    } else if (g->sync == SF_SYNC_SPINLOCK) {
        spin_lock(&g->spin);
        st = g->locked_state;
        g->locked_state |= SEALED_BIT;
        spin_unlock(&g->spin);
    } else {
        pthread_mutex_lock(&g->mutex);
        st = g->locked_state;
        g->locked_state |= SEALED_BIT;
        pthread_mutex_unlock(&g->mutex);
    }
    return (st & ~SEALED_BIT) >> g->layout.sequence_bits;
}

void sf_gen_stats_get(sf_gen *g, sf_gen_stats *out)
{
    out->exhaustion_waits = atomic_load(&g->n_exhaustion_waits);
    out->clock_behind_waits = atomic_load(&g->n_clock_behind_waits);
    out->clock_behind_errors = atomic_load(&g->n_clock_behind_errors);
    out->lease_errors = atomic_load(&g->n_lease_errors);
    out->busy_errors = atomic_load(&g->n_busy_errors);
}
