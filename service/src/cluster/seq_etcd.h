/* The etcd block source for sequences (seq/source.h) on a fleet: every daemon of the fleet draws
 * its blocks from one counter per namespace in etcd, by compare-and-swap, fenced by the worker
 * identity (cluster/identity.h, etcd backend). docs/sequences.md "On a fleet" has the why.
 *
 * Keys under the identity's prefix P:
 *   P/seq/def/<name>   the definition of a namespace created over the API (JSON, create-if-absent
 *                      together with its counter); `list` reads this prefix
 *   P/seq/next/<name>  the counter, no lease:
 *     {"v":1,"next":"N","lo":"L","hi":"H","worker":W,"lease":"<16 hex>","nonce":"<16 hex>"}
 *     every number a decimal string (cJSON's doubles lose precision past 2^53); [lo, hi) the
 *     block this write granted (lo == hi: it granted nothing: the counter's creation, a raise to
 *     a new start, a give-back), worker/lease the claimer's slot, nonce random per write.
 *     This format is an interface (the fleet checker reads the claims from etcd's history).
 *
 * reserve: ONE transaction: the counter's mod_revision is the one we read AND our owner key
 * (P/owner/...) still has our lease and create revision; then the counter moves to hi. A lost
 * counter compare re-reads and retries (bounded); a lost owner compare claims nothing
 * (SEQ_FAILED: the slot is not ours). A claim whose answer is lost is never re-sent: the
 * counter is re-read, our nonce there = it happened (recovered), else a fresh claim (a hole of
 * at most that one block). release: the rest back when the counter is still our write.
 *
 * Threads: its own thread with a bounded queue serves create, reserve and release, with its own
 * etcd_client (the identity's endpoints, TLS and timeout; its credentials and token shared with
 * the identity's client: one authentication per daemon, etcd_auth.h); declare and list run on the main thread before any job (seq/source.h);
 * fence_ms and the metrics on any thread. */
#ifndef SF_CLUSTER_SEQ_ETCD_H
#define SF_CLUSTER_SEQ_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/identity.h"
#include "seq/source.h"

struct etcd_tls;

typedef struct seq_etcd_config {
    const char *endpoints, *prefix; /* the identity's (snowflake.etcd.*) */
    unsigned request_timeout_ms;
    unsigned start_timeout_ms; /* declare and list retry while etcd does not answer (identity's) */
    struct etcd_tls *tls; /* https:// endpoints; NULL: http:// */
    const char *auth_user, *auth_password, *auth_password_file;
    sf_identity *identity; /* etcd backend: the owner key compared by every claim, the fence, the
                              credentials (shared); must outlive the source */
} seq_etcd_config;

typedef struct seq_etcd_source seq_etcd_source;

seq_etcd_source *seq_etcd_source_new(const seq_etcd_config *c, char *err, size_t errlen);
void seq_etcd_source_ops(seq_etcd_source *s, seq_source *out);
void seq_etcd_source_free(seq_etcd_source *s);

/* ---- the counter's value (pure: unit tested) ---------------------------------------------- */
typedef struct seq_etcd_claim {
    uint64_t next, lo, hi;
    uint32_t worker;
    uint64_t lease, nonce;
} seq_etcd_claim;

#define SEQ_ETCD_VALUE_MAX 256
/* The JSON above into out; its length, or -1 when it does not fit. */
int seq_etcd_claim_encode(const seq_etcd_claim *c, char *out, size_t cap);
/* false when s[0..len) is not such a value (v 1, every field present and well-formed, lo <= hi). */
bool seq_etcd_claim_parse(const char *s, size_t len, seq_etcd_claim *out);
/* A definition as JSON ({"v":1,"start":"..",...}); its length or -1. */
int seq_etcd_def_encode(const seq_ns_def *d, char *out, size_t cap);
/* The definition of namespace name from s[0..len); false when malformed. */
bool seq_etcd_def_parse(const char *s, size_t len, const char *name, seq_ns_def *out);

#endif
