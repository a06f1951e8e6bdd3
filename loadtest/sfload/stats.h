/* Per-thread run figures: request outcomes, error kinds, bytes, latency histogram, memcached
 * hit/miss counts. Written by one load thread; summed with stats_merge after the threads join. */
#ifndef SFLOAD_STATS_H
#define SFLOAD_STATS_H

#include <stdint.h>

#include "hist.h"

/* Error kinds. A response's outcome is SL_OK or one of these. */
typedef enum sl_err {
    ERR_CONNECT,  /* connect refused, failed or timed out */
    ERR_READ,     /* reset, or closed with requests unanswered or mid-response */
    ERR_WRITE,    /* write failed */
    ERR_TIMEOUT,  /* no response within --timeout of the send */
    ERR_3XX,      /* HTTP 3xx */
    ERR_4XX,      /* HTTP 4xx; memcached ERROR / CLIENT_ERROR */
    ERR_5XX,      /* HTTP 5xx; memcached SERVER_ERROR */
    ERR_PARSE,    /* malformed response, or one nobody asked for */
    ERR_MISMATCH, /* echo bytes differ; memcached reply of the wrong kind or key */
    ERR_COUNT
} sl_err;
#define SL_OK (-1) /* outcome of a successful response */

#define SL_OUTCOME_REFUSED (-2) /* --tolerate-faults: a 503, counted as refused, not failed */
#define SL_STATS_TARGETS   32   /* = SL_MAX_TARGETS */

/* One target's share of the measured requests (ids: every ID received, warm-up included). */
typedef struct sl_tstats {
    uint64_t requests, ok, status_503, errors, faults, ids;
} sl_tstats;

typedef struct sl_stats {
    uint64_t requests;  /* responses received (any status) plus requests failed without one */
    uint64_t responses; /* responses received */
    uint64_t ok;        /* responses that were a success */
    uint64_t errors[ERR_COUNT];
    uint64_t refused;           /* --tolerate-faults: 503 responses */
    uint64_t faults[ERR_COUNT]; /* --tolerate-faults: connection faults (connect, read, write,
                                   timeout) that were retried instead of failing requests */
    sl_tstats target[SL_STATS_TARGETS];
    uint64_t bytes_in, bytes_out;
    uint64_t connects; /* connections established */
    uint64_t mc_gets, mc_hits, mc_sets;
    /* TLS: handshakes finished in the measured window (full, or resuming a session), and
     * handshakes that failed there (their requests count as connect errors); the version and
     * cipher of the first handshake and the reason of the first failure, from any time */
    uint64_t tls_full, tls_resumed, tls_failures;
    char tls_version[16], tls_cipher[64], tls_error[192];
    uint64_t end_ns; /* when this thread's measured window ended */
    hist latency;    /* of every response received */
} sl_stats;

void stats_init(sl_stats *s);
void stats_merge(sl_stats *dst, const sl_stats *src);
uint64_t stats_errors(const sl_stats *s);
uint64_t stats_faults(const sl_stats *s);
const char *stats_err_name(sl_err e);

#endif
