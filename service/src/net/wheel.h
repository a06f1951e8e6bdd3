/* Hierarchical timing wheel: the timeouts of one event loop (header read, keep-alive idle,
 * write), driven by a single uv_timer_t.
 *
 * Ownership and threads: one wheel per loop, used only by that loop's thread; no locks, no
 * allocation. Timers are intrusive: embed a wheel_timer in your object and recover the object in
 * the callback with container_of. A wheel holds pointers to itself: do not move or copy it after
 * wheel_init. Nothing here fails; misuse (a NULL callback) is caught by assert.
 *
 * Contract
 *   wheel_add(w, t, at)  O(1). Schedules t to fire at absolute time `at` (ms); if t is already
 *                        scheduled it is moved. A deadline <= the wheel's time fires on the next
 *                        wheel_run.
 *   wheel_cancel(t)      O(1); a no-op if t is not scheduled. Needs no wheel pointer.
 *   wheel_run(w, now)    advances to `now` and fires every timer with expire_at <= now exactly
 *                        once, never before its expire_at, in no particular order. Time going
 *                        backwards counts as no advance. Cost: O(levels + timers it touches),
 *                        however far time jumps. Callbacks may add and cancel any timer, their
 *                        own included: cancelling (or moving) a timer that is due in the same run
 *                        but has not fired yet stops it from firing. A timer added from a callback
 *                        with a deadline <= now fires on the NEXT wheel_run, never in the current
 *                        one, so a callback that re-arms itself "immediately" cannot livelock the
 *                        loop. A callback may free its own timer's object. Returns the number
 *                        fired. Not reentrant (do not call wheel_run from a callback).
 *   wheel_next_expiry(w) UINT64_MAX when nothing is scheduled; otherwise a time <= the earliest
 *                        expire_at. It can be earlier by less than the granularity of the slot
 *                        holding that timer (a slot boundary of a higher level): the caller wakes
 *                        there, runs (which cascades) and asks again; at most one wake per level.
 *                        O(levels). The loop re-arms its uv timer for max(0, result - now).
 *   wheel_count(w)       timers scheduled, including those due but not yet fired. O(n): for
 *                        tests, debugging and occasional metrics, not for the hot path (cancel
 *                        takes no wheel, so the wheel keeps no running total).
 *
 * Layout: 6 levels x 64 slots, 1 ms resolution; level l has 2^(6l) ms slots, so the wheel
 * spans 2^36 ms (~795 days). A timer sits at the level of the highest 6-bit digit where its
 * deadline differs from the wheel's time, in the slot named by that digit (as in the Linux
 * kernel and h2o). Deadlines beyond the top level wait in an overflow list that is re-filed
 * whenever the wheel's time enters a new 2^36 ms epoch: they are never lost.
 */
#ifndef SF_NET_WHEEL_H
#define SF_NET_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WHEEL_BITS   6
#define WHEEL_SLOTS  (1u << WHEEL_BITS) /* 64: one uint64_t bitmap per level */
#define WHEEL_LEVELS 6

typedef struct wheel_timer wheel_timer;
typedef void (*wheel_cb)(wheel_timer *t);

struct wheel_timer {          /* intrusive: embed in your object, recover it with container_of */
    wheel_timer *next, *prev; /* links; both NULL when not scheduled */
    uint64_t expire_at;       /* absolute ms */
    wheel_cb cb;
};

/* Fields are private. Every list is circular around a sentinel wheel_timer whose cb is NULL and
 * whose expire_at holds its slot number (or WHEEL_NOT_A_SLOT), which is how wheel_cancel finds
 * the bitmap bit to clear when it empties a slot. */
typedef struct wheel {
    uint64_t now;                 /* the time the wheel has advanced to */
    uint64_t bits[WHEEL_LEVELS];  /* bit s of bits[l]: slot[l * 64 + s] is not empty */
    uint64_t due_min, firing_min; /* <= every expire_at in due / firing (may be stale) */
    uint64_t far_min;             /* <= every expire_at in far (may be stale) */
    wheel_timer due;              /* deadline <= now, fire on the next wheel_run */
    wheel_timer firing;           /* being fired by the current wheel_run */
    wheel_timer far;              /* beyond the top level */
    wheel_timer slot[WHEEL_LEVELS * WHEEL_SLOTS];
} wheel;

void wheel_init(wheel *w, uint64_t now_ms);
void wheel_timer_init(wheel_timer *t, wheel_cb cb);
void wheel_add(wheel *w, wheel_timer *t, uint64_t expire_at_ms);
void wheel_cancel(wheel_timer *t);
size_t wheel_run(wheel *w, uint64_t now_ms);
uint64_t wheel_next_expiry(const wheel *w);
size_t wheel_count(const wheel *w);

static inline bool wheel_is_scheduled(const wheel_timer *t)
{
    return t->next != NULL;
}

#endif
