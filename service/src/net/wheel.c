/* Hierarchical timing wheel; the contract is in wheel.h.
 *
 * Invariant (relative to w->now): a timer in level l, slot s has a deadline that agrees with
 * w->now on every 6-bit digit above l and has digit s > now's digit at level l. So a slot's
 * timers all fall in one window of 2^(6l) ms that starts after now, and the lowest non-empty
 * level holds the earliest window. Advancing to `to` takes every slot whose window has begun,
 * sets now = to and places its timers again: they land in a strictly lower level, or in the due
 * list, so each timer moves at most WHEEL_LEVELS times in its life whatever the jumps (plus once
 * per 2^36 ms epoch boundary crossed while it waits in the far list). */
#include "net/wheel.h"

#include <assert.h>

#define WHEEL_NOT_A_SLOT UINT64_MAX /* expire_at of the due, firing and far sentinels */
#define WHEEL_SPAN_BITS  (WHEEL_BITS * WHEEL_LEVELS) /* 36: the wheel covers 2^36 ms */

_Static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "__builtin_c?zll on uint64_t");
_Static_assert(WHEEL_SLOTS == 64, "one uint64_t bitmap per level");

/* --- circular lists around a sentinel -------------------------------------------------------- */

static void list_init(wheel_timer *s, uint64_t id)
{
    s->next = s->prev = s;
    s->expire_at = id;
    s->cb = NULL; /* marks a sentinel */
}

static bool list_empty(const wheel_timer *s)
{
    return s->next == s;
}

static void list_append(wheel_timer *s, wheel_timer *t)
{
    t->prev = s->prev;
    t->next = s;
    s->prev->next = t;
    s->prev = t;
}

/* Moves all of `from` to the end of `to`; `from` is left empty. */
static void list_splice(wheel_timer *to, wheel_timer *from)
{
    if (list_empty(from))
        return;
    wheel_timer *first = from->next, *last = from->prev;
    first->prev = to->prev;
    to->prev->next = first;
    last->next = to;
    to->prev = last;
    from->next = from->prev = from;
}

/* --- slots and bitmaps ---------------------------------------------------------------------------
 */

static uint64_t bit(unsigned s)
{
    return UINT64_C(1) << s;
}

/* The wheel that owns a slot sentinel: its slot number is stored in it, so cancel needs no wheel.
 */
static wheel *wheel_of_slot(wheel_timer *sentinel)
{
    wheel_timer *first = sentinel - sentinel->expire_at;
    return (wheel *)((char *)first - offsetof(wheel, slot));
}

static void clear_slot_bit(wheel_timer *sentinel)
{
    uint64_t n = sentinel->expire_at;
    wheel_of_slot(sentinel)->bits[n / WHEEL_SLOTS] &= ~bit((unsigned)(n % WHEEL_SLOTS));
}

static void unlink_timer(wheel_timer *t)
{
    wheel_timer *p = t->prev, *n = t->next;
    p->next = n;
    n->prev = p;
    t->next = t->prev = NULL;
    /* Both neighbours are the same node only when t was the last timer: that node is the
     * sentinel, and a slot that just became empty must leave the bitmap. */
    if (p == n && p->expire_at != WHEEL_NOT_A_SLOT) {
        assert(p->cb == NULL);
        clear_slot_bit(p);
    }
}

/* Start of the window of level `level`, slot `s`, in the revolution that contains `now`. */
static uint64_t slot_time(uint64_t now, unsigned level, unsigned s)
{
    unsigned shift = level * WHEEL_BITS;
    return ((now >> shift >> WHEEL_BITS << WHEEL_BITS) | s) << shift;
}

/* Links t where the invariant wants it, relative to w->now. */
static void place(wheel *w, wheel_timer *t)
{
    uint64_t at = t->expire_at;
    if (at <= w->now) {
        if (list_empty(&w->due) || at < w->due_min)
            w->due_min = at;
        list_append(&w->due, t);
        return;
    }
    unsigned level = (unsigned)(63 - __builtin_clzll(at ^ w->now)) / WHEEL_BITS;
    if (level >= WHEEL_LEVELS) {
        if (list_empty(&w->far) || at < w->far_min)
            w->far_min = at;
        list_append(&w->far, t);
        return;
    }
    unsigned s = (unsigned)(at >> (level * WHEEL_BITS)) & (WHEEL_SLOTS - 1);
    list_append(&w->slot[level * WHEEL_SLOTS + s], t);
    w->bits[level] |= bit(s);
}

/* Empties a list and places its timers again relative to w->now. */
static void replace_all(wheel *w, wheel_timer *sentinel)
{
    wheel_timer *t = sentinel->next;
    sentinel->next = sentinel->prev = sentinel;
    while (t != sentinel) {
        wheel_timer *next = t->next; /* place() rewrites t's links */
        place(w, t);
        t = next;
    }
}

/* A level-0 slot holds a single deadline and that deadline has come: the whole list is due,
 * moved in O(1) without touching each timer. */
static void take_due(wheel *w, wheel_timer *sentinel)
{
    uint64_t at = sentinel->next->expire_at;
    if (list_empty(&w->due) || at < w->due_min)
        w->due_min = at;
    list_splice(&w->due, sentinel);
}

/* Empties the slots of one level whose bits are in `begun` and re-files their timers. */
static void take_slots(wheel *w, unsigned level, uint64_t begun)
{
    w->bits[level] &= ~begun;
    while (begun) {
        unsigned s = (unsigned)__builtin_ctzll(begun);
        begun &= begun - 1;
        wheel_timer *slot = &w->slot[level * WHEEL_SLOTS + s];
        if (level == 0)
            take_due(w, slot);
        else
            replace_all(w, slot);
    }
}

/* Visits only non-empty slots whose window has begun, so a jump of hours costs what it touches,
 * not what it skips. Levels go upwards: timers taken from level l land below l, in levels
 * already visited. A level whose window did not wrap ends the walk, because the digits above it
 * did not change, so no higher slot has begun: a 1 ms tick usually looks at level 0 only. The far
 * list comes last, only when every level wrapped (a new 2^36 ms epoch); its timers may land in
 * any level. */
static void advance(wheel *w, uint64_t to)
{
    uint64_t from = w->now;
    w->now = to;
    for (unsigned l = 0; l < WHEEL_LEVELS; l++) {
        unsigned shift = l * WHEEL_BITS;
        bool wrapped = from >> shift >> WHEEL_BITS != to >> shift >> WHEEL_BITS;
        unsigned digit = (unsigned)(to >> shift) & (WHEEL_SLOTS - 1);
        /* Slots up to `to`'s digit have begun (those up to `from`'s are empty anyway); all of
         * them if the level wrapped. Digit 63: 2 << 63 wraps to 0, giving all ones. */
        uint64_t begun = wrapped ? UINT64_MAX : (UINT64_C(2) << digit) - 1;
        if (w->bits[l] & begun)
            take_slots(w, l, w->bits[l] & begun);
        if (!wrapped)
            return;
    }
    replace_all(w, &w->far);
}

/* --- API
 * -------------------------------------------------------------------------------------------- */

void wheel_init(wheel *w, uint64_t now_ms)
{
    w->now = now_ms;
    for (unsigned l = 0; l < WHEEL_LEVELS; l++)
        w->bits[l] = 0;
    w->due_min = w->firing_min = w->far_min = UINT64_MAX;
    list_init(&w->due, WHEEL_NOT_A_SLOT);
    list_init(&w->firing, WHEEL_NOT_A_SLOT);
    list_init(&w->far, WHEEL_NOT_A_SLOT);
    for (unsigned i = 0; i < WHEEL_LEVELS * WHEEL_SLOTS; i++)
        list_init(&w->slot[i], i);
}

void wheel_timer_init(wheel_timer *t, wheel_cb cb)
{
    assert(cb != NULL); /* a NULL cb would make t look like a sentinel */
    t->next = t->prev = NULL;
    t->expire_at = 0;
    t->cb = cb;
}

void wheel_add(wheel *w, wheel_timer *t, uint64_t expire_at_ms)
{
    assert(t->cb != NULL);
    if (wheel_is_scheduled(t))
        unlink_timer(t);
    t->expire_at = expire_at_ms;
    place(w, t);
}

void wheel_cancel(wheel_timer *t)
{
    if (wheel_is_scheduled(t))
        unlink_timer(t);
}

/* Due timers move to a separate firing list first, so timers that callbacks add with a past
 * deadline go to the due list and wait for the next run: the loop cannot livelock. */
size_t wheel_run(wheel *w, uint64_t now_ms)
{
    assert(list_empty(&w->firing)); /* not reentrant */
    if (now_ms > w->now)
        advance(w, now_ms);
    list_splice(&w->firing, &w->due);
    w->firing_min = w->due_min;
    size_t fired = 0;
    while (!list_empty(&w->firing)) {
        wheel_timer *t = w->firing.next;
        unlink_timer(t);
        t->cb(t); /* may free t: not touched afterwards */
        fired++;
    }
    return fired;
}

uint64_t wheel_next_expiry(const wheel *w)
{
    bool due = !list_empty(&w->due), firing = !list_empty(&w->firing);
    if (due || firing) {
        uint64_t a = due ? w->due_min : UINT64_MAX, b = firing ? w->firing_min : UINT64_MAX;
        return a < b ? a : b;
    }
    for (unsigned l = 0; l < WHEEL_LEVELS; l++)
        if (w->bits[l])
            return slot_time(w->now, l, (unsigned)__builtin_ctzll(w->bits[l]));
    if (!list_empty(&w->far))
        return w->far_min >> WHEEL_SPAN_BITS << WHEEL_SPAN_BITS; /* where its epoch starts */
    return UINT64_MAX;
}

static size_t list_length(const wheel_timer *s)
{
    size_t n = 0;
    for (const wheel_timer *t = s->next; t != s; t = t->next)
        n++;
    return n;
}

size_t wheel_count(const wheel *w)
{
    size_t n = list_length(&w->due) + list_length(&w->firing) + list_length(&w->far);
    for (unsigned l = 0; l < WHEEL_LEVELS; l++)
        for (uint64_t b = w->bits[l]; b; b &= b - 1)
            n += list_length(&w->slot[l * WHEEL_SLOTS + (unsigned)__builtin_ctzll(b)]);
    return n;
}
