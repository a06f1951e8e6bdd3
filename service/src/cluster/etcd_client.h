/* A blocking client for etcd v3's JSON gateway (grpc-gateway, `POST /v3/...`) over plain HTTP/1.1,
 * for one thread (the identity keeper; docs/design/etcd-identity.md §4). Only what slot claiming needs: leases
 * (grant with our own ID, keepalive, revoke), range, and transactions.
 *
 * Transport. Endpoints are "http://host:port", or all "https://host:port" with opts.tls
 * (cluster/etcd_tls.h: etcd's certificate verified against a CA bundle and the endpoint's host,
 * our client certificate when given, the TLS session resumed on reconnects); a comma list, at
 * most ETCD_MAX_ENDPOINTS; one keep-alive connection per endpoint. A TLS handshake that fails
 * counts as a connect failure (nothing was sent). The handshake is inside the call's timeout. A call uses the current endpoint; when it fails with a
 * transport error (refused, reset, timeout), garbage, or a 5xx answer, the client closes that
 * connection and makes the next endpoint current, so the *next* call goes elsewhere. Within one
 * call the client moves on to further endpoints only while nothing has been sent (connect
 * failed), and re-sends once on a fresh connection to the same endpoint when a *reused*
 * connection ended before any byte of the answer (the server closed an idle connection). Once
 * a request may have reached etcd, the call does not repeat it: its outcome is unknown, and
 * retries (with backoff, to a deadline) are the caller's, whose writes are idempotent (§3).
 * Every call is bounded by request_timeout_ms from its start (connect, send, answer); name
 * resolution is not (give numeric hosts).
 *
 * Answers. Parsed with llhttp (util/httpresp: Content-Length or chunked) and cJSON; at most
 * body_max bytes of body, else garbage. int64 fields must be JSON strings of decimal digits
 * (the gateway's encoding), anything else is garbage; fields the gateway omits (default
 * values) read as 0/false/empty. header.cluster_id is pinned on the first answer of the client's
 * life; an answer from another cluster is garbage. Both error shapes, unary
 * {"error":"...","message":"...","code":N} and streaming {"error":{"grpc_code":N,
 * "message":"...",...}}, become ETCD_E_SERVER with the gRPC code and the message.
 *
 * Results. 0 on success; -1 with *err filled (err may be NULL). Result structs own heap memory:
 * release with etcd_range_result_free / etcd_txn_result_free (safe on zeroed or failed results).
 * Keys and values are byte strings with a length and also NUL-terminated for convenience.
 *
 * RBAC (cluster/etcd_auth.h): with a user, the client authenticates before its first call (and
 * whenever it holds no token), sends the token on every call, and when etcd refuses a call for
 * its token (invalid or expired, auth revision old) re-authenticates and repeats that call once:
 * such a refusal happens before etcd executes anything, so the repeat cannot apply it twice.
 * Everything within the one request_timeout_ms of the call. A refusal that stays (credentials,
 * permission) is ETCD_E_SERVER with err->auth set.
 *
 * Threads: an etcd_client and its txns are used by one thread at a time; two clients of two
 * threads may share one etcd_auth (opts.shared_auth). */
#ifndef SF_CLUSTER_ETCD_CLIENT_H
#define SF_CLUSTER_ETCD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCD_MAX_ENDPOINTS   16
#define ETCD_DEFAULT_BODY_MAX (1u << 20)
/* etcd's own ceiling on a lease TTL (lease.MaxLeaseTTL, about 285 years): a TTL above it in an
 * answer is garbage. */
#define ETCD_MAX_LEASE_TTL_S INT64_C(9000000000)

/* gRPC codes the caller acts on (the gateway's "code" / "grpc_code"). */
enum {
    ETCD_GRPC_INVALID_ARGUMENT = 3,
    ETCD_GRPC_NOT_FOUND = 5, /* "requested lease not found" */
    ETCD_GRPC_PERMISSION_DENIED = 7, /* RBAC: the user's roles do not cover the keys */
    ETCD_GRPC_FAILED_PRECONDITION = 9, /* "lease already exists" */
    ETCD_GRPC_UNAVAILABLE = 14, /* "request timed out", "no leader" */
    ETCD_GRPC_UNAUTHENTICATED = 16,
};

typedef enum etcd_error_kind {
    ETCD_OK = 0,
    ETCD_E_UNAVAILABLE, /* refused, reset, timed out: no answer */
    ETCD_E_GARBAGE,     /* an answer we cannot trust: bad HTTP/JSON, types, size, cluster_id */
    ETCD_E_SERVER,      /* etcd answered an error: grpc_code, http_status, message */
    ETCD_E_USAGE,       /* bad arguments or out of memory before anything was sent */
    ETCD_E_TLS,         /* https: the TLS layer refused (a certificate, ours or etcd's; a
                           protocol error such as a plaintext server): no answer. The keeper
                           treats it as unreachable; at start it is fatal (a setup error). */
} etcd_error_kind;

typedef struct etcd_error {
    etcd_error_kind kind;
    int http_status; /* 0 when there was no answer */
    int grpc_code;   /* ETCD_E_SERVER only */
    char endpoint[80];
    char message[256];
    bool auth; /* refused for its credentials or permissions (etcd_auth.h), not repeated */
    /* A request of the call (or its authentication) was written to a connection: etcd may have
     * it. false: nothing left this process (connect or TLS handshake failed, bad arguments). */
    bool sent;
} etcd_error;

struct etcd_tls;
typedef struct etcd_client_opts {
    const char *endpoints;       /* "http://127.0.0.1:2379,http://..." */
    unsigned request_timeout_ms; /* per call; 0 = 1000 */
    size_t body_max;             /* 0 = ETCD_DEFAULT_BODY_MAX */
    struct etcd_tls *tls;        /* https:// endpoints (cluster/etcd_tls.h; every endpoint then
                                    https, not owned: outlives the client); NULL: http:// only */
    /* RBAC: a user with exactly one of a password or a password file (etcd_auth.h); no user =
     * no authentication */
    const char *auth_user, *auth_password, *auth_password_file;
    /* Never re-send a request, not even on a fresh connection after a reused one closed before
     * any byte of the answer (a request may have reached etcd then: a proxy or a member that
     * applied it and died): the call fails ETCD_E_UNAVAILABLE and the caller reads back what
     * happened (cluster/seq_etcd.c: a block claim reaches etcd at most once). */
    bool at_most_once;
    /* Another client's credentials and token (etcd_client_auth of it), shared instead of the
     * auth_* fields: one authentication serves both (etcd_auth.h "Threads"); that client must
     * outlive this one. NULL: auth_user decides. */
    struct etcd_auth *shared_auth;
} etcd_client_opts;

typedef struct etcd_client etcd_client;

typedef struct etcd_header {
    uint64_t cluster_id, member_id;
    int64_t revision, raft_term;
} etcd_header;

typedef struct etcd_kv {
    char *key, *value; /* NUL-terminated copies; lengths below */
    size_t key_len, value_len;
    int64_t create_revision, mod_revision, version, lease;
} etcd_kv;

typedef struct etcd_range_result {
    etcd_header header;
    etcd_kv *kvs;
    size_t n_kvs;
    int64_t count;
    bool more;
} etcd_range_result;

typedef enum etcd_response_kind { ETCD_RESP_PUT, ETCD_RESP_RANGE, ETCD_RESP_DELETE } etcd_response_kind;

typedef struct etcd_txn_response {
    etcd_response_kind kind;
    etcd_range_result range; /* ETCD_RESP_RANGE; zero otherwise */
    int64_t deleted;         /* ETCD_RESP_DELETE */
} etcd_txn_response;

typedef struct etcd_txn_result {
    etcd_header header;
    bool succeeded; /* the compares held: the success branch ran */
    etcd_txn_response *responses;
    size_t n_responses;
} etcd_txn_result;

/* Per endpoint, for metrics; any thread. answered: calls it answered with a well-formed
 * answer (an etcd error like "lease not found" included); failed: calls that moved the client
 * on to the next endpoint (no answer, garbage, 5xx). */
typedef struct etcd_endpoint_stats {
    const char *name; /* "host:port" */
    uint64_t answered, failed;
    uint64_t tls_full, tls_resumed; /* https: handshakes, full or resuming a session */
    bool current; /* the next call goes here */
} etcd_endpoint_stats;
size_t etcd_client_endpoint_count(const etcd_client *c);
bool etcd_client_https(const etcd_client *c);
void etcd_client_endpoint_stats(const etcd_client *c, size_t i, etcd_endpoint_stats *out);

/* NULL with *err when the options are bad (https:// without opts.tls, http:// with it). */
etcd_client *etcd_client_new(const etcd_client_opts *opts, etcd_error *err);
void etcd_client_free(etcd_client *c);
const char *etcd_client_endpoint(const etcd_client *c); /* the current one, "host:port" */
uint64_t etcd_client_cluster_id(const etcd_client *c);   /* 0 until the first answer */
/* Whether the last call failed with ETCD_E_TLS on every endpoint it tried (the start-up claim
 * stops at once then: a wrong CA or certificate does not heal by waiting). */
bool etcd_client_tls_refused(const etcd_client *c);

/* The credentials and their counters (etcd_auth.h), NULL without a user. */
struct etcd_auth *etcd_client_auth(const etcd_client *c);

/* TTLs in answers are never trusted beyond what was asked: the caller computes deadlines from
 * them (sent + TTL - margin), and an answer is not allowed to move those past what it chose. */

/* Grants lease `id` (non-zero: ours, so a retried grant cannot make a second lease; etcd answers
 * a repeat with ETCD_E_SERVER code 9) with ttl_s (1..ETCD_MAX_LEASE_TTL_S); *granted_ttl_s = the
 * TTL etcd granted, at most ttl_s (etcd raises small ones; a larger answer reads as ttl_s, which
 * only ends the caller's deadline earlier). A TTL <= 0 or above ETCD_MAX_LEASE_TTL_S: garbage. */
int etcd_lease_grant(etcd_client *c, int64_t ttl_s, int64_t id, int64_t *granted_ttl_s,
                     etcd_error *err);
/* One renewal (a POST to the streaming endpoint; one chunked message back). *ttl_s = the TTL etcd
 * renewed the lease for, at most max_ttl_s (the TTL the lease was granted with: a larger answer
 * reads as it); 0 = the lease is unknown or expired (lost). A TTL < 0 or above
 * ETCD_MAX_LEASE_TTL_S: garbage. */
int etcd_lease_keepalive(etcd_client *c, int64_t id, int64_t max_ttl_s, int64_t *ttl_s,
                         etcd_error *err);
/* Revokes lease `id`; a lease that is already gone is success with *was_gone (may be NULL). */
int etcd_lease_revoke(etcd_client *c, int64_t id, bool *was_gone, etcd_error *err);
/* Linearizable range [key, range_end); range_end NULL = the one key. */
int etcd_range(etcd_client *c, const char *key, const char *range_end, etcd_range_result *out,
               etcd_error *err);
/* The range_end that covers every key starting with prefix (prefix with its last byte + 1,
 * carrying). -1 when it does not fit or the prefix is all 0xFF. */
int etcd_prefix_end(const char *prefix, char *out, size_t cap);
void etcd_range_result_free(etcd_range_result *r);

/* Transactions: build, commit, free. Builder errors (too many operations, out of memory, a bad
 * argument) are remembered and reported by etcd_txn_commit without sending anything. */
typedef struct etcd_txn etcd_txn;
typedef enum etcd_cmp_result { ETCD_CMP_EQUAL, ETCD_CMP_GREATER, ETCD_CMP_LESS, ETCD_CMP_NOT_EQUAL } etcd_cmp_result;
typedef enum etcd_cmp_target { ETCD_CMP_VERSION, ETCD_CMP_CREATE, ETCD_CMP_MOD, ETCD_CMP_LEASE } etcd_cmp_target;
typedef enum etcd_branch { ETCD_SUCCESS, ETCD_FAILURE } etcd_branch;
#define ETCD_NO_LEASE     INT64_C(0)
#define ETCD_IGNORE_LEASE INT64_C(-1) /* put keeps the key's lease ("ignore_lease") */

etcd_txn *etcd_txn_new(void);
void etcd_txn_free(etcd_txn *t);
/* Integer compare: CREATE (create_revision; 0 = the key does not exist), MOD, VERSION, LEASE. */
void etcd_txn_compare_int(etcd_txn *t, const char *key, etcd_cmp_target target,
                          etcd_cmp_result result, int64_t value);
void etcd_txn_compare_value(etcd_txn *t, const char *key, etcd_cmp_result result,
                            const void *value, size_t value_len);
/* lease: a lease ID, ETCD_NO_LEASE (a put without one detaches the key from its lease), or
 * ETCD_IGNORE_LEASE. */
void etcd_txn_put(etcd_txn *t, etcd_branch branch, const char *key, const void *value,
                  size_t value_len, int64_t lease);
void etcd_txn_range(etcd_txn *t, etcd_branch branch, const char *key, const char *range_end);
void etcd_txn_delete(etcd_txn *t, etcd_branch branch, const char *key, const char *range_end);
int etcd_txn_commit(etcd_client *c, const etcd_txn *t, etcd_txn_result *out, etcd_error *err);
void etcd_txn_result_free(etcd_txn_result *r);

#endif
