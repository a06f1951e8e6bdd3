/* Segment mode: dense, strictly increasing numbers per namespace, handed out from blocks.
 *
 * A namespace's numbers come from blocks [lo, hi) reserved durably by a block source
 * (seq/source.h). The namespace holds two: the current block, which requests draw from, and the
 * next one, fetched in the background once prefetch_pct percent of the current block is issued
 * (double buffering, as Meituan Leaf's SegmentBuffer), so that a request never waits for the
 * store. One state per namespace, shared by every loop under a spinlock (a few nanoseconds held:
 * take, add, compare), because per-loop blocks would make the numbers a client sees go backwards
 * when its requests land on different loops; the order guarantee is per node, not per loop.
 *
 * Guarantees, per namespace (docs/sequences.md): numbers are unique (the source never grants a
 * number twice, and the process never issues one twice), strictly increasing in the order this
 * process issues them, and dense except at a block boundary the store skipped (another node took
 * the block in between) and at a crash: a crash loses the unissued rest of the current block plus
 * the whole next block (prefetched, or reserved in the store and not yet reported): at most
 * 2 x block numbers (adaptive: 2 x block_max). A clean stop gives the unissued numbers back when
 * the store allows (seq_source.release).
 *
 * When both blocks are used up (a burst faster than the store), the take is refused at once:
 * SEQ_R_EMPTY; the loop never waits for the store. The API parks the request and retries for
 * up to sequences.burst_wait_ms (api/seq.c), then answers 503 and Retry-After. A refused take
 * triggers a fetch if none is running.
 *
 * Threads: seq_table_new, _declare, _start, _stop, _free on the main thread; seq_find, seq_take,
 * seq_table_create and the readers of the statistics on any thread (loop threads). The source's
 * completions run on its thread and install the block under the namespace's lock.
 */
#ifndef SF_SEQ_SEQ_H
#define SF_SEQ_SEQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "seq/source.h"
#include "util/clock.h"

#define SEQ_TOKEN_MAX       256
#define SEQ_LATENCY_BUCKETS 14 /* block fetch latency, seconds; +Inf implied */
extern const double seq_latency_bounds[SEQ_LATENCY_BUCKETS];

typedef struct seq_options {
    uint32_t prefetch_pct;       /* fetch the next block once this share of the current is issued */
    uint32_t retry_ms;           /* after a failed fetch, the next one no sooner */
    uint64_t adaptive_block_ms;  /* adaptive namespaces: a block should last about this long */
    uint32_t start_wait_ms;      /* seq_table_start waits this long at most for the first blocks */
} seq_options;

/* Per-namespace statistics. The counters change under the namespace's lock (one writer at a
 * time) and are read relaxed by any thread. */
typedef struct seq_ns_stats {
    _Atomic uint64_t issued;         /* numbers handed out */
    _Atomic uint64_t blocks;         /* blocks granted by the source */
    _Atomic uint64_t block_numbers;  /* numbers in those blocks */
    _Atomic uint64_t fetch_failures; /* reserves that failed (SEQ_FAILED) or were refused */
    _Atomic uint64_t refused;        /* takes refused: both blocks empty (503) */
    _Atomic uint64_t fenced;         /* takes refused: past the source's fence */
    _Atomic uint64_t store_ops;      /* the source's round trips / fsyncs */
    _Atomic uint64_t latency[SEQ_LATENCY_BUCKETS + 1];
    _Atomic uint64_t latency_sum_us;
} seq_ns_stats;

typedef struct seq_table seq_table;

/* A namespace's life: declared ones are live from the start; one created over the API is
 * creating until the source has stored it, then live, or failed (a PUT may try again). */
enum { SEQ_NS_LIVE = 0, SEQ_NS_CREATING, SEQ_NS_FAILED };

typedef struct seq_ns {
    _Atomic int lock;
    /* --- under lock --- */
    uint64_t cur, cur_hi;       /* the current block's unissued part [cur, cur_hi) */
    uint64_t next_lo, next_hi;  /* the next block, empty when next_lo == next_hi */
    uint64_t prefetch_at;       /* fetch the next block once cur reaches this */
    bool fetching;              /* one reserve outstanding */
    bool exhausted;             /* the source said: past max, nothing ever again */
    bool awaited;               /* seq_table_start waits for this namespace's first block */
    uint64_t retry_at_ms;       /* no reserve before this (after a failure) */
    uint64_t fetch_started_ns;  /* the outstanding reserve's start (monotonic) */
    uint64_t block;             /* the size the next reserve asks for */
    uint64_t last_fetch_ms;     /* when the last reserve started (adaptive sizing) */
    char err[160];              /* the last failure, for logs and the refusal's message */
    uint64_t fail_logged_ms;    /* the last failure logged (0: none since the last success) */
    uint64_t fails_unlogged;    /* failures since then, said in the next line */
    _Atomic int state; /* SEQ_NS_*: release-stored once the fields below are set */
    /* --- fixed once declared (created: once live) --- */
    unsigned id;
    seq_table *table;
    seq_ns_def def;
    char token[SEQ_TOKEN_MAX + 1];
    size_t token_len; /* 0: no per-namespace token */
    seq_ns_stats stats;
} seq_ns;

struct seq_table {
    seq_source src;
    seq_options opt;
    clk_source *clock;
    seq_ns *ns; /* cap slots, allocated once: a pointer to one never moves */
    unsigned cap;
    _Atomic unsigned count; /* published namespaces: ns[0..count) */
    _Atomic int *index;     /* open addressing by name: id + 1, 0 = empty; 2 x cap slots */
    unsigned index_mask;
    pthread_mutex_t mu; /* start's wait for the first blocks; creations, one at a time */
    pthread_cond_t cv;
    unsigned first_pending;
    bool started, stopped;
};

/* An empty table for at most cap namespaces (<= SEQ_MAX_NAMESPACES) over src (copied; its ctx
 * must outlive the table). clock: the fence's and the adaptive sizing's (clk_system()). Returns
 * NULL with err. */
seq_table *seq_table_new(const seq_source *src, const seq_options *opt, clk_source *clock,
                         unsigned cap, char *err, size_t errlen);
/* A namespace of the configuration (before seq_table_start). token: its bearer token or NULL.
 * Returns 0, or -1 with err (bad definition, duplicate name, table full). */
int seq_table_declare(seq_table *t, const seq_ns_def *def, const char *token, char *err,
                      size_t errlen);
/* Checks a definition (name, start <= max, block sizes); fills defaults: block_min/block_max
 * when not adaptive. Returns 0, or -1 with err naming the field. */
int seq_def_check(seq_ns_def *def, char *err, size_t errlen);
/* Starts the source, declares every namespace to it (and those it lists), reserves every
 * namespace's first block and waits up to start_wait_ms for them (a namespace without its block
 * by then refuses until it arrives). Returns 0, or -1 with err. */
int seq_table_start(seq_table *t, char *err, size_t errlen);
/* After the loops are joined: gives back what was not issued (source.release), stops the
 * source. Idempotent. */
void seq_table_stop(seq_table *t);
void seq_table_free(seq_table *t);

/* What seq_table_create did. */
typedef enum seq_create_result {
    SEQ_C_ACCEPTED, /* the source is storing it: live once done (or failed, seq_last_error) */
    SEQ_C_SAME,     /* it exists with this definition (live or still being created): nothing */
    SEQ_C_CONFLICT, /* it exists with another definition (err says which) */
    SEQ_C_BAD,      /* the definition breaks a rule (err) */
    SEQ_C_FULL,     /* the table holds max_namespaces already */
    SEQ_C_REFUSED,  /* the source refused at once (stopping, queue full) */
} seq_create_result;
/* A namespace created at run time (the API, with the admin token): stored durably by the source
 * (seq_source.create) on its thread, live once stored, its first block reserved then. A failed
 * one may be created again. Any thread, never waits for I/O. *ns gets the namespace (for its
 * state) unless SEQ_C_BAD or SEQ_C_FULL. */
seq_create_result seq_table_create(seq_table *t, const seq_ns_def *def, seq_ns **ns, char *err,
                                   size_t errlen);

/* The namespace of that name, or NULL. Any thread, no lock. */
seq_ns *seq_find(seq_table *t, const char *name, size_t len);
static inline unsigned seq_count(seq_table *t)
{
    return atomic_load_explicit(&t->count, memory_order_acquire);
}
static inline seq_ns *seq_at(seq_table *t, unsigned i)
{
    return &t->ns[i];
}

typedef enum seq_take_result {
    SEQ_R_OK = 0,
    SEQ_R_CREATING,   /* created over the API, not stored yet: retry shortly */
    SEQ_R_FAILED,     /* its creation failed (seq_last_error): nothing to issue */
    SEQ_R_EMPTY,      /* both blocks used up (or not there yet): refuse with 503, retry later */
    SEQ_R_EXHAUSTED,  /* past the namespace's max: nothing ever again */
    SEQ_R_FENCED,     /* the source's fence passed: this node issues nothing */
    SEQ_R_TOO_MANY,   /* count above what two blocks always hold (block_min): never possible */
    SEQ_R_BEYOND_MAX, /* past max soon: fewer than count left (seq_remaining), more than none */
} seq_take_result;

/* Takes count (>= 1) numbers, strictly increasing, into out: all of them or none. They are
 * consecutive within a block; across the boundary to the next block they may jump. Any thread,
 * never blocks on I/O (may start a background fetch). */
seq_take_result seq_take(seq_ns *ns, uint64_t *out, uint32_t count);
/* The same, but SEQ_R_EMPTY is not counted in stats.refused: for a caller that may retry (the
 * HTTP park, api/seq.c) and counts the refusal itself when it finally answers one. */
seq_take_result seq_take_quiet(seq_ns *ns, uint64_t *out, uint32_t count);
/* What seq_take of count numbers would answer now, and in *next the number it would start with
 * (HEAD: the refusal a GET would get, or the numbers it describes). Takes nothing, counts nothing,
 * starts no reserve. Any thread. */
seq_take_result seq_peek(seq_ns *ns, uint32_t count, uint64_t *next);
/* Numbers held and not yet issued (current + next block), for the gauge. Any thread. */
uint64_t seq_remaining(seq_ns *ns);
/* The end (exclusive) of the furthest block held: the next block's, else the current one's; 0
 * before the first block. max + 1 minus it is what the store has left to grant. Any thread. */
uint64_t seq_block_end(seq_ns *ns);
/* The last failure of the namespace's source ("" when none), copied into buf. Any thread. */
void seq_last_error(seq_ns *ns, char *buf, size_t cap);
/* A refused take (res != SEQ_R_OK) in words, shared by every protocol so that they say the same:
 * the message into msg (cap >= 320 holds any) and the HTTP status it is answered with: 503 (retry
 * later: creating, no number in hand, fenced), 404 (creation failed), 410 (past max), 400 (count
 * above block_min). Any thread. */
int seq_refusal(seq_ns *ns, seq_take_result res, char *msg, size_t cap);

#endif
