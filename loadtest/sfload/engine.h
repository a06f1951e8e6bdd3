/* The load engine: load threads, each one libuv loop with its share of the connections.
 *
 * A connection keeps up to --pipeline requests in flight (one with --close, where each request
 * gets its own connection). Closed loop: a request is issued as soon as a slot is free, and its
 * latency counts from then. Open loop (-R): connection i of C issues requests at the fixed times
 * start + (i + k * C) / R; when the connection is busy they wait, and latency still counts from
 * the scheduled time, so a stalled server shows as latency instead of fewer samples
 * (no coordinated omission). Requests due before the measured window (warm-up) are sent but not
 * counted. -n is divided between the threads.
 *
 * TLS (sh->tls): every connection handshakes after its TCP connect (within --timeout of the
 * connect's start), and its requests wait for the handshake; the engine moves ciphertext between
 * libuv and the connection's BIO pair (tls.h). A failed handshake fails its connection's first
 * request as a connect error (a fault with --tolerate-faults) and is counted with its reason.
 *
 * Ownership and threads: the main thread creates workers, starts them, may read their progress
 * counters while they run (relaxed atomics), and reads everything else only after worker_join.
 * A worker allocates everything at creation (connections, slots, one read buffer); the steady
 * state allocates nothing, except the verifier's map growing by doubling.
 */
#ifndef SFLOAD_ENGINE_H
#define SFLOAD_ENGINE_H

#include <stdint.h>

#include "opts.h"
#include "stats.h"
#include "target.h"
#include "idrec.h"
#include "tls.h"
#include "verify.h"

typedef struct sl_shared {
    const sl_opts *o;
    const sl_target *target;
    uint64_t t0_ns;            /* start (uv_hrtime clock) */
    uint64_t measure_start_ns; /* t0 + warm-up */
    uint64_t measure_end_ns;   /* measure_start + -t, or + 3600 s */
    uint64_t interval_ns;      /* per-connection interval in open loop; 0 closed loop */
    unsigned total_conns;
    vlayout layout;
    uint64_t expected_ids; /* sizes the verifiers' maps (0: unknown) */
    idrec_file *idrec;     /* --ids-out-v2, or NULL */
    const sltls_ctx *tls;  /* --tls (main's context, checked; each thread makes its own from
                              the same options), or NULL: plaintext */
} sl_shared;

typedef struct sl_worker sl_worker;

/* Connections [first_conn, first_conn + nconns); budget: measured requests to issue
 * (UINT64_MAX: no -n). NULL on out of memory. */
sl_worker *worker_create(const sl_shared *sh, unsigned index, unsigned first_conn, unsigned nconns,
                         uint64_t budget);
int worker_start(sl_worker *w); /* 0 or a negative libuv error */
void worker_join(sl_worker *w);
bool worker_finished(const sl_worker *w);
/* Requests completed so far, warm-up included, and measured failures (any thread; approximate
 * while running). */
void worker_progress(const sl_worker *w, uint64_t *requests, uint64_t *errors);
const sl_stats *worker_stats(const sl_worker *w);
verifier *worker_verifier(sl_worker *w); /* NULL unless verifying */
void worker_destroy(sl_worker *w);

#endif
