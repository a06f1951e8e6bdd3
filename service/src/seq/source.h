/* Block sources: where a namespace's blocks of sequence numbers come from (segment mode).
 *
 * The segment core (seq/seq.h) hands out numbers from blocks [lo, hi) it reserved from a source.
 * A source owns durability and fleet-wide uniqueness: every block it grants is disjoint from every
 * block it (or any other node sharing its store) ever granted or will grant for that namespace,
 * and the counter behind it is persisted BEFORE the grant is reported (a crash after the grant
 * loses at most the numbers of that block: a hole, never a repeat). Blocks of one namespace are
 * granted in increasing order: a grant's lo is >= the hi of every earlier grant to this process,
 * which is what makes the core's output strictly increasing per node.
 *
 * Two sources: the file source (seq/source_file.h: an fsync'd high-water mark per namespace in
 * data_dir) and the etcd source (cluster/: a compare-and-swap on the namespace's counter key,
 * fenced like the worker identity). seq/ never links cluster/; app/ wires the one configured.
 *
 * Threads. start, declare, list, stop: the main thread, before the loops start / after they are
 * joined. create and reserve: any thread (a loop thread, the admin route), and they never block:
 * they queue the work for the source's own thread(s) and return. Each call they accept (return
 * 0) gets exactly one done(arg, result) later, from the source's thread, never from inside the
 * call itself; the result is only valid during done. A call they refuse at once (return -1:
 * stopping, queue full) never gets a done. The core keeps at most one reserve outstanding per
 * namespace. fence_ms: any thread, cheap (the request path may call it per request).
 *
 * Namespace ids are the core's: small integers 0..SEQ_MAX_NAMESPACES-1, given to a namespace once
 * (declare or create) and never reused while the process runs; the source maps them to its state.
 */
#ifndef SF_SEQ_SOURCE_H
#define SF_SEQ_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/sha256.h"

struct prom_buf;

#define SEQ_NAME_MAX       64 /* [A-Za-z0-9][A-Za-z0-9_.-]{0,63}: a file name and an etcd key part */
#define SEQ_MAX_NAMESPACES 1024
#define SEQ_NO_FENCE       UINT64_MAX

/* What defines a namespace (config sequences.namespaces[], or PUT /seq/{name} by the admin).
 * The source persists the fields it needs to rebuild the definition for `list` (a namespace
 * created over the API survives a restart), token_sha256 included; a token itself is never
 * given to a source (a configured one stays in the configuration). */
typedef struct seq_ns_def {
    char name[SEQ_NAME_MAX + 1];
    uint64_t start; /* the first number the namespace ever issues */
    uint64_t max;   /* the last number it may issue (inclusive); UINT64_MAX - 1 at most */
    uint64_t block; /* numbers per block: fixed, or the first size when adaptive */
    bool adaptive;  /* the core sizes blocks between block_min and block_max (seq.h) */
    uint64_t block_min, block_max;
    /* created over the API with a token: its SHA-256 in lowercase hex ("" = none), which the
     * request path compares the bearer token's hash with (util/sha256.h) */
    char token_sha256[SHA256_HEX_LEN + 1];
} seq_ns_def;

typedef enum seq_status {
    SEQ_OK = 0,
    SEQ_EXHAUSTED, /* reserve: the counter is past max, no number is left ever */
    SEQ_EXISTS,    /* create: a namespace of that name is in the store already (def: its own) */
    SEQ_FAILED,    /* transient: disk full or I/O error, store unreachable, fenced, stopping;
                      err says which; the core retries later and refuses requests meanwhile */
} seq_status;

typedef struct seq_result {
    seq_status status;
    uint64_t lo, hi;       /* reserve, SEQ_OK: the block granted, [lo, hi), lo < hi; hi - lo may
                              be less than asked (the namespace's max), never more */
    uint64_t store_ops;    /* round trips or fsyncs this result cost (metrics: per 1,000 numbers) */
    const seq_ns_def *def; /* create, SEQ_EXISTS: the stored definition; else NULL */
    const char *err;       /* SEQ_FAILED (and SEQ_EXISTS): why, for logs and the API; else NULL */
} seq_result;

typedef void (*seq_done_fn)(void *arg, const seq_result *res);

typedef struct seq_source {
    const char *kind; /* "file", "etcd": logs and metric labels */
    /* Ready the store (open data_dir, connect). Returns 0, or -1 with a reason in err. */
    int (*start)(void *ctx, char *err, size_t errlen);
    /* A namespace of the configuration: the store creates its counter at def->start when absent
     * and keeps it when present (the configured start only ever applies to a new namespace; a
     * counter below a raised start is moved up to it). Synchronous, at start. Returns 0, or -1
     * with err (fatal: the daemon does not start without its declared namespaces). */
    int (*declare)(void *ctx, unsigned id, const seq_ns_def *def, char *err, size_t errlen);
    /* The namespaces created over the API that the store holds and the configuration does not
     * name (the core passes the names it declared): found(arg, def) for each; the core gives
     * each an id and then calls declare for it. Synchronous, at start. Returns 0 or -1 + err. */
    int (*list)(void *ctx, const char *const *declared, size_t ndeclared,
                void (*found)(void *arg, const seq_ns_def *def), void *arg, char *err,
                size_t errlen);
    /* Creates namespace id with def durably (so that list finds it after a restart) and its
     * counter at def->start. done: SEQ_OK, SEQ_EXISTS (nothing changed), SEQ_FAILED. */
    int (*create)(void *ctx, unsigned id, const seq_ns_def *def, seq_done_fn done, void *arg);
    /* Reserves the next block of namespace id: n = min(want, max + 1 - counter) numbers from the
     * store's counter c; persists c + n (fsync / a committed transaction) and only then reports
     * done(SEQ_OK, lo = c, hi = c + n). want >= 1. Nothing is persisted on SEQ_FAILED, and a
     * failure never reports a block (a disk that fills refuses: no unsaved number is issued). */
    int (*reserve)(void *ctx, unsigned id, uint64_t want, seq_done_fn done, void *arg);
    /* Optional (NULL: never fenced): numbers may be issued only while clk_now(clk_system()) <
     * fence_ms(ctx) (util/clock.h, Unix ms); SEQ_NO_FENCE when unfenced now. A node past its fence
     * issues nothing, also from blocks it already holds. */
    uint64_t (*fence_ms)(void *ctx);
    /* Optional (NULL: nothing is given back). At a clean stop, main thread, synchronous, before
     * stop: the numbers [from, hi) of namespace id were reserved and never issued. When the
     * store's counter is still hi (nobody reserved after us) it is set back to from, so that a
     * clean restart continues without a hole; when it moved on, nothing changes. Returns 0 (given
     * back, or not possible), -1 with err (the numbers stay a hole; never a repeat). */
    int (*release)(void *ctx, unsigned id, uint64_t from, uint64_t hi, char *err, size_t errlen);
    /* Finishes or cancels what is queued (each accepted call still gets its done, SEQ_FAILED
     * "stopping" when cancelled), joins the source's threads, releases everything. After the
     * loops are joined; the core calls nothing after it. */
    void (*stop)(void *ctx);
    /* Optional (NULL: none): appends the source's own Prometheus families (api/ prints them
     * after the sequences' families, so that api/ needs no source's header). Any thread. */
    void (*metrics)(void *ctx, struct prom_buf *p);
    void *ctx;
} seq_source;

/* True when name is a valid namespace name (SEQ_NAME_MAX above; len bytes, no NUL needed). */
bool seq_name_valid(const char *name, size_t len);
/* "ok", "exhausted", "exists", "failed". */
const char *seq_status_name(seq_status s);

#endif
