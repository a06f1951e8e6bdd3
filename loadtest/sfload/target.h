/* What a protocol ("target": http, memcache, echo) plugs into the load engine, and what the
 * engine offers it back.
 *
 * The engine owns connections, scheduling, writes, timeouts and statistics; a target formats
 * requests into request slots and turns received bytes into completed responses. Targets run on
 * the connection's loop thread only. The engine guarantees that a slot's memory and buffers stay
 * untouched from prepare() until its response completed and its write finished.
 *
 * Target callbacks
 *   conn_init(c, st)    once per connection; st is conn_bytes of zeroed memory. 0 or -1.
 *   conn_free(c, st)    once, at the end (optional: NULL when there is nothing to free).
 *   conn_reset(c, st)   a new TCP connection starts (parsers back to their initial state).
 *   prepare(c, st, s)   fill s->bufs (s->mem has slot_bytes bytes; s->sched_ns, s->measured are
 *                       set) for the next request.
 *   on_data(c, st, p, n)  bytes received; call sl_conn_complete for each complete response.
 *   on_eof(c, st)       the server closed its side.
 *   on_data and on_eof return SL_CONTINUE, SL_CLOSE (close this connection gracefully: requests
 *   sent but unanswered are sent again on the next one, no error) or SL_FAIL(kind) (count kind
 *   for the oldest unanswered request, drop the connection).
 */
#ifndef SFLOAD_TARGET_H
#define SFLOAD_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "opts.h"
#include "stats.h"
#include "verify.h"

#define SL_CONTINUE      0
#define SL_CLOSE         1
#define SL_FAIL(kind)    (-1 - (int)(kind))
#define SL_FAIL_KIND(rc) ((sl_err)(-1 - (rc)))

typedef struct sl_slot {
    uint64_t sched_ns; /* when the request was due: latency counts from here */
    uint64_t sent_ns;  /* when it was handed to the socket: the timeout counts from here */
    uint64_t key;      /* target-defined (memcached key number, echo sequence) */
    uint32_t kind;     /* target-defined (HTTP path index, memcached get/set) */
    bool measured;     /* inside the measured window */
    unsigned nbufs;
    uv_buf_t bufs[2];
    char *mem; /* slot_bytes bytes owned by the slot */
} sl_slot;

typedef struct sl_conn sl_conn;

typedef struct sl_target {
    const char *name;
    size_t slot_bytes, conn_bytes;
    const void *global; /* the target's immutable run-wide data */
    int (*conn_init)(sl_conn *c, void *st);
    void (*conn_free)(sl_conn *c, void *st);
    void (*conn_reset)(sl_conn *c, void *st);
    void (*prepare)(sl_conn *c, void *st, sl_slot *s);
    int (*on_data)(sl_conn *c, void *st, const char *p, size_t n);
    int (*on_eof)(sl_conn *c, void *st);
    void (*release)(struct sl_target *t); /* frees global */
} sl_target;

/* --- engine services for targets (engine.c) ------------------------------------------------ */
/* The oldest request sent and not yet answered, or NULL. */
sl_slot *sl_conn_pending(sl_conn *c);
/* Completes the oldest pending request with outcome SL_OK, SL_OUTCOME_REFUSED (--tolerate-faults:
 * a 503, counted apart and pausing the connection by its backoff) or an sl_err (a response that
 * counts as a failure). Records its latency. -1 if nothing was pending (the caller reports a parse error). */
int sl_conn_complete(sl_conn *c, int outcome);
sl_stats *sl_conn_stats(sl_conn *c);
verifier *sl_conn_verifier(sl_conn *c); /* NULL unless --verify-ids */
const sl_opts *sl_conn_opts(const sl_conn *c);
unsigned sl_conn_id(const sl_conn *c);
unsigned sl_conn_target(const sl_conn *c);    /* index into opts->targets */
uint32_t sl_conn_now_ms(const sl_conn *c);    /* the loop's time, ms since the run started */
const void *sl_conn_global(const sl_conn *c); /* the target's global */
uint64_t sl_conn_random(sl_conn *c);          /* the thread's xorshift generator */

/* --- the targets ----------------------------------------------------------------------------- */
/* Build the target for o (templates, shared buffers). 0, or -1 with a reason in err. */
int target_http_setup(const sl_opts *o, sl_target *t, char *err, size_t errlen);
int target_memcache_setup(const sl_opts *o, sl_target *t, char *err, size_t errlen);
int target_echo_setup(const sl_opts *o, sl_target *t, char *err, size_t errlen);
static inline void target_release(sl_target *t)
{
    if (t->release)
        t->release(t);
}

#endif
