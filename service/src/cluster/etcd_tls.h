/* TLS for the etcd client (etcd_client.c): the client context (a CA bundle to verify etcd's
 * certificate, optionally our certificate and key for etcd's --client-cert-auth), swappable
 * while the keeper runs, and the blocking handshake/read/write over an already connected
 * non-blocking socket with the caller's deadline (util/netio.h's rules).
 *
 * Verification fails closed: the peer's chain must reach ca_file (no system store: etcd
 * clusters run on a private CA, and a public CA would vouch for any host name), and its
 * certificate must name the host of the endpoint (an IP SAN for a numeric host, a DNS SAN
 * otherwise) or server_name when set; SNI carries a DNS name (never an IP, RFC 6066).
 *
 * Reload. etcd_tls_reload builds a new context from the same files (any thread; one at a time)
 * and puts it in place; a context that cannot be built (unreadable file, a key that does not
 * match) leaves the old one in service. Connections open keep the context they were made with;
 * the generation goes up, so sessions cached from the old one are not resumed on the new one
 * (a resumed session would carry the old client certificate's identity).
 *
 * Sessions: a connection's session is kept by the caller per endpoint (etcd_tls_session) and
 * offered on the next handshake to that endpoint: a reconnect then costs one round trip and no
 * certificate checks.
 *
 * Threads: etcd_tls_connect / _send_all / _recv_some / _close on the keeper's thread;
 * etcd_tls_reload / _files_changed on one other thread at a time (the file watch, SIGHUP). */
#ifndef SF_CLUSTER_ETCD_TLS_H
#define SF_CLUSTER_ETCD_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ETCD_TLS_PATH_MAX 1024

typedef struct etcd_tls_config {
    char ca_file[ETCD_TLS_PATH_MAX];   /* PEM CAs etcd's certificate must chain to (required) */
    char cert_file[ETCD_TLS_PATH_MAX]; /* PEM chain, leaf first; "" = no client certificate */
    char key_file[ETCD_TLS_PATH_MAX];  /* with cert_file */
    char server_name[256];             /* checked instead of the endpoint's host; "" = the host */
    const char *what;                  /* config prefix for messages: "snowflake.etcd.tls" */
} etcd_tls_config;

typedef struct etcd_tls etcd_tls;
struct ssl_st;
struct ssl_session_st;

/* A cached session of one endpoint (zeroed = none). */
typedef struct etcd_tls_session {
    struct ssl_session_st *session;
    uint64_t generation; /* of the context it came from */
} etcd_tls_session;

/* Builds the first context. NULL with err ("snowflake.etcd.tls.key_file /x: key values
 * mismatch (...)"). */
etcd_tls *etcd_tls_new(const etcd_tls_config *cfg, char *err, size_t errlen);
void etcd_tls_free(etcd_tls *t);
const etcd_tls_config *etcd_tls_cfg(const etcd_tls *t);
int etcd_tls_reload(etcd_tls *t, char *err, size_t errlen);
/* Whether the files hold other bytes than the context in service was built from. */
bool etcd_tls_files_changed(const etcd_tls *t);
uint64_t etcd_tls_reloads(const etcd_tls *t);
uint64_t etcd_tls_reload_failures(const etcd_tls *t);
/* The client certificate's notAfter (Unix seconds), 0 without one. */
int64_t etcd_tls_not_after(const etcd_tls *t);

/* The handshake on connected fd to host (the endpoint's, numeric or a name), offering *sess when
 * it is from the current context. The connection, or NULL with err and *cert_problem (a
 * certificate was refused: theirs by us, or ours by them), fd untouched (the caller closes). */
struct ssl_st *etcd_tls_connect(etcd_tls *t, int fd, const char *host, etcd_tls_session *sess,
                                uint64_t deadline_ms, bool *cert_problem, char *err,
                                size_t errlen);
/* 0 when every byte was sent; -ETIMEDOUT at the deadline; -EPROTO (a TLS failure: err says
 * which, *cert_problem when a certificate was refused) or another -errno. */
int etcd_tls_send_all(struct ssl_st *ssl, int fd, const void *buf, size_t len, uint64_t deadline_ms,
                      bool *cert_problem, char *err, size_t errlen);
/* Bytes read (> 0), 0 at the end of the stream (close_notify or a plain close), or -errno as
 * etcd_tls_send_all. */
ssize_t etcd_tls_recv_some(struct ssl_st *ssl, int fd, void *buf, size_t cap, uint64_t deadline_ms,
                           bool *cert_problem, char *err, size_t errlen);
/* Keeps ssl's session in *sess when it can be resumed (call after an exchange: TLS 1.3 tickets
 * arrive after the handshake), then frees ssl (no close_notify: the socket is closed next). */
void etcd_tls_close(etcd_tls *t, struct ssl_st *ssl, etcd_tls_session *sess);
/* After an answer: remember the session (a TLS 1.3 ticket that came with it). */
void etcd_tls_keep_session(etcd_tls *t, struct ssl_st *ssl, etcd_tls_session *sess);
void etcd_tls_session_clear(etcd_tls_session *sess);
/* Whether ssl's handshake resumed a session. */
bool etcd_tls_resumed(const struct ssl_st *ssl);

#endif
