/* ID verification: every ID seen must be unique across all connections and threads, and strictly
 * greater than the previous ID on the same connection; every /id and /ids body must parse.
 *
 * Method (exact, no false positives or negatives): a Snowflake ID is (timestamp, datacenter,
 * worker, sequence) with the sequence in the low bits, so the IDs of one (timestamp, dc, worker)
 * form a bitmap over 2^sequence_bits values. That bitmap is stored sparsely, as 64-bit words in
 * an open-addressing hash map keyed by id >> 6 (the (timestamp, dc, worker) prefix plus the
 * sequence's high bits; 2^B-bit words with B = min(6, sequence_bits) for exotic layouts).
 * A dense millisecond (1000+ IDs) costs the same 512 bytes as a 4096-bit bitmap would; a sparse
 * one (a few IDs) costs 16 bytes per word instead of 512. In Sonyflake's order (node_low: the
 * node in the low bits) a word holds one ID per node: still exact, 16-32 bytes per ID, fine at
 * the 25,600 IDs/s one Sonyflake node can issue. The map keeps its load factor <= 1/2
 * and grows by doubling with incremental rehashing (32 old slots moved per insert), so no insert
 * ever stalls the load loop for a whole rehash. 100 M IDs at 1 M IDs/s: ~1.6 M words, ~50 MB.
 *
 * Ownership and threads: one verifier per load thread, no sharing and no locks while running;
 * after the threads are joined, verifier_merge finds the duplicates that crossed threads: each
 * word of thread i's map is looked up in the maps of threads 0..i-1, and the bits it shares with
 * any of them are IDs seen before (counted once each however many threads saw them). Nothing is
 * copied, so the peak memory is the sum of the per-thread maps. Allocation happens only when a
 * map grows (amortised, doubling). Out of memory is reported, never ignored.
 */
#ifndef SFLOAD_VERIFY_H
#define SFLOAD_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "idrec.h"
#include "ids.h"

/* --- layout -------------------------------------------------------------------------------- */
typedef struct vlayout {
    unsigned t, d, w, s; /* timestamp, datacenter, worker, sequence bits; sum at most 63 */
    bool node_low;       /* Sonyflake order: time | sequence | datacenter | worker */
} vlayout;

#define VLAYOUT_DEFAULT  ((vlayout){41, 5, 5, 12, false})
#define VLAYOUT_NAME_MAX 40

/* A preset of the daemon's snowflake.layout ("twitter", "sonyflake", "js53"), or "T/D/W/S" (the
 * daemon's order, node above sequence) with ",node_bits_low" for Sonyflake's order; the widths
 * sum to at most 63 (the daemon's layouts may be narrower) and S, T >= 1. 0 or -1. */
int vlayout_parse(const char *s, vlayout *l);
/* Reads layout="T/D/W/S" and node_bits_low="true" of the snowflaked_info line of a Prometheus
 * text. 0 or -1. */
int vlayout_from_metrics(const char *text, size_t len, vlayout *l);
/* "T/D/W/S", or "T/D/W/S,node_bits_low" for Sonyflake's order: what vlayout_parse reads. */
void vlayout_name(const vlayout *l, char buf[VLAYOUT_NAME_MAX]);
/* Writes "id (ts T, dc D, worker W, seq S)" into buf. */
void vlayout_describe(const vlayout *l, uint64_t id, char *buf, size_t size);

/* --- the ID set ---------------------------------------------------------------------------- */
typedef struct idset_entry {
    uint64_t key; /* (id >> block_bits) + 1; 0 marks an empty slot */
    uint64_t bits;
} idset_entry;

typedef struct idset {
    idset_entry *tab; /* current table */
    size_t cap, used;
    unsigned shift;   /* 64 - log2(cap) */
    idset_entry *old; /* table being migrated into tab, or NULL */
    size_t old_cap, old_pos;
    unsigned old_shift;
    unsigned block_bits;
    uint64_t ids; /* distinct IDs held */
} idset;

/* expected_ids sizes the first table (0: a small default). 0 or -1 (out of memory). */
int idset_init(idset *s, unsigned block_bits, uint64_t expected_ids);
void idset_free(idset *s);
/* 1 if id was new, 0 if it was already present, -1 out of memory (id not stored). */
int idset_add(idset *s, uint64_t id);
bool idset_contains(const idset *s, uint64_t id);
size_t idset_bytes(const idset *s);
/* How many IDs of s are also in at least one of earlier[0..n) (each counted once), calling
 * dup(ud, id) for each. Finishes s's migration first (no allocation); reads the others. */
typedef void (*idset_dup_fn)(void *ud, uint64_t id);
uint64_t idset_count_common(idset *s, idset *const *earlier, unsigned n, idset_dup_fn dup,
                            void *ud);

/* --- the verifier -------------------------------------------------------------------------- */
#define VERIFY_EXAMPLES 8
#define VERIFY_MSG      200

typedef struct verifier {
    idset set;
    vlayout layout;
    unsigned thread; /* for messages */
    uint64_t ids, bodies;
    uint64_t distinct; /* set by verifier_merge: distinct IDs over all threads */
    uint64_t duplicates, non_increasing, malformed;
    bool oom;
    unsigned nexamples;
    char examples[VERIFY_EXAMPLES][VERIFY_MSG];
    idrec_writer *rec; /* --ids-out-v2: every ID checked is also recorded here; NULL: not */
} verifier;

/* The per-connection part: the last ID seen on it. Reset it when the connection is replaced. */
typedef struct verify_stream {
    uint64_t last;
    bool have_last;
    unsigned conn;    /* for messages and records */
    unsigned target;  /* for messages and records: which target the connection goes to */
    uint32_t recv_ms; /* records: when the body being checked arrived (ms since the start) */
    bool fresh;       /* records: no ID yet on this TCP connection (set when it is replaced) */
} verify_stream;

int verifier_init(verifier *v, const vlayout *l, unsigned thread, uint64_t expected_ids);
void verifier_free(verifier *v);
/* Checks one 200 response body: every ID must be new and greater than the stream's last; if
 * expect_count is non-zero, the body must hold exactly that many. Returns 0 if all is well,
 * -1 if anything was counted as a failure. */
int verifier_body(verifier *v, verify_stream *st, const char *body, size_t len, ids_enc enc,
                  uint32_t expect_count);
/* Counts a malformed response that has no usable body (too large, for example). */
void verifier_malformed(verifier *v, const verify_stream *st, const char *why);
/* Folds the counts of v[1..n) into v[0] and adds the duplicates across threads (n <= 256). The
 * maps stay as they are (free them with verifier_free). Call once, after the threads ended. */
void verifier_merge(verifier *const *v, unsigned n);
bool verifier_failed(const verifier *v);
/* Writes every ID held by v[0..n) (8 bytes, little-endian, hash order) to f; an ID seen by
 * several threads is written once per thread, so cross-thread duplicates stay visible to
 * whoever reads the file. 0, or -1 on a write error. */
int verifier_write_ids(verifier *const *v, unsigned n, FILE *f);

#endif
