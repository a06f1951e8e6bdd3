/* TLS on a listener: its server context (OpenSSL 3), swappable while connections run, and the
 * vocabulary of handshake outcomes the transport (transport_tls.c) counts.
 *
 * A listener with TLS has one net_tls (net_listener_spec.tls). It holds the description the
 * context is built from (files, verify mode, versions, ciphers, tickets, ALPN) and the current
 * SSL_CTX. Every accepted connection takes a reference on the context current at that moment
 * (net_tls_new_ssl), so net_tls_reload can put a new context in place from any thread: new
 * connections get the new certificate, open ones keep theirs, and the old context is freed by
 * OpenSSL when its last connection ends. A reload that fails (unreadable file, a key that does
 * not match) leaves the old context in service and is counted.
 *
 * Threads: net_tls_init / net_tls_free on the main thread before the loops start / after they
 * stop; net_tls_reload on any one thread at a time (app.c serializes SIGHUP, memcached's
 * refresh_certs on a loop thread and the file watch's thread); net_tls_new_ssl on
 * the loops. Counters are atomics readable from any thread.
 */
#ifndef SF_NET_TLS_H
#define SF_NET_TLS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NET_TLS_PATH_MAX 1024

typedef enum {
    NET_TLS_VERIFY_NONE,     /* no client certificate asked for */
    NET_TLS_VERIFY_OPTIONAL, /* asked for; one that is sent must verify */
    NET_TLS_VERIFY_REQUIRED, /* a verified client certificate or no connection */
} net_tls_verify;

/* What a listener's context is built from (the configuration's `tls` object, net-layer side). */
typedef struct net_tls_config {
    char cert_file[NET_TLS_PATH_MAX];      /* PEM chain, leaf first */
    char key_file[NET_TLS_PATH_MAX];       /* PEM private key */
    char client_ca_file[NET_TLS_PATH_MAX]; /* PEM CAs client certificates must chain to; "" none */
    net_tls_verify verify;
    bool min_tls13;         /* TLS 1.3 only; else 1.2 and 1.3 */
    char ciphersuites[256]; /* TLS 1.3; "" = OpenSSL's default */
    char cipher_list[512];  /* TLS 1.2; "" = NET_TLS_DEFAULT_CIPHERS */
    bool session_tickets;   /* resumption with stateless tickets */
    bool alpn_http11;       /* negotiate ALPN "http/1.1"; a client offering only others fails */
    bool ktls;              /* kernel TLS where offered (SSL_OP_ENABLE_KTLS); see net_tls_ktls */
} net_tls_config;

/* Kernel TLS on a listener, as found when its context was last built (at start, at each reload:
 * a `modprobe tls` takes effect with the next reload). With NET_TLS_KTLS_ON, OpenSSL hands a
 * connection's record layer to the kernel after the handshake when the kernel supports its
 * cipher and version (send: TLS 1.2 and 1.3 AES-GCM, ChaCha20-Poly1305; receive: TLS 1.2 with
 * OpenSSL 3.0); SSL_read and SSL_write still go through OpenSSL, which then moves plaintext. */
typedef enum {
    NET_TLS_KTLS_OFF,        /* not asked for */
    NET_TLS_KTLS_ON,         /* asked for and offered: the context has SSL_OP_ENABLE_KTLS */
    NET_TLS_KTLS_NO_KERNEL,  /* asked for, the kernel has no tls ULP: userspace TLS */
    NET_TLS_KTLS_NO_OPENSSL, /* asked for, this OpenSSL was built without it: userspace TLS */
} net_tls_ktls;

/* Why, in words, for the log line (NULL for OFF). */
const char *net_tls_ktls_text(net_tls_ktls k);

/* The TLS 1.2 list used when cipher_list is "": forward secrecy and AEAD only (Mozilla's
 * "intermediate" without the DHE suites, which would need DH parameters). */
#define NET_TLS_DEFAULT_CIPHERS                                                                    \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"     \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

/* Why a handshake failed: a small fixed set, for counters and rate-limited logs. */
typedef enum {
    NET_TLS_FAIL_TIMEOUT,          /* not done within server.header_timeout_ms */
    NET_TLS_FAIL_EOF,              /* the peer closed first (port scanners, TCP health checks) */
    NET_TLS_FAIL_NOT_TLS,          /* plaintext or garbage: an HTTP request, bytes no record has */
    NET_TLS_FAIL_PROTOCOL_VERSION, /* no version in common (min_version) */
    NET_TLS_FAIL_NO_SHARED_CIPHER, /* no cipher suite or group in common */
    NET_TLS_FAIL_ALPN,             /* ALPN offered, http/1.1 not among it (RFC 7301 alert) */
    NET_TLS_FAIL_BAD_CERTIFICATE,  /* the client's certificate refused, or missing when required */
    NET_TLS_FAIL_PEER_ALERT,       /* the client aborted with an alert (e.g. refused ours) */
    NET_TLS_FAIL_OTHER,
    NET_TLS_FAIL_COUNT
} net_tls_fail;

/* "timeout", "eof", "not_tls", ... (the metric's reason label). */
const char *net_tls_fail_name(net_tls_fail r);

/* A connection's client certificate against the listener's access list (net_tls.peers), decided
 * once, when its handshake completes (transport_tls.c keeps the answer on the conn). */
typedef enum {
    NET_TLS_PEER_LISTED,   /* verified, and its subject DN or a DNS/URI SAN is in the list */
    NET_TLS_PEER_UNLISTED, /* verified, but none of its names is in the list */
    NET_TLS_PEER_NONE,     /* no certificate (verify_client optional) */
    NET_TLS_PEER_COUNT
} net_tls_peer;

/* "listed", "unlisted", "none" (the metric's result label). */
const char *net_tls_peer_name(net_tls_peer p);

struct ssl_ctx_st;
struct ssl_st;
struct certname_list;

typedef struct net_tls {
    char name[16];   /* the listener, for metrics: "http", "memcached", "echo" */
    char what[48];   /* the configuration section, for messages: "server.tls" */
    net_tls_config cfg;
    _Atomic int lock;            /* held only to take a reference on `current` */
    struct ssl_ctx_st *current;  /* one reference held by this struct */
    _Atomic int64_t not_after_s; /* the current certificate's notAfter, Unix seconds */
    _Atomic int64_t loaded_at_s; /* when the current context was built, Unix seconds */
    _Atomic uint64_t reloads, reload_failures;
    /* SHA-256 over the bytes of the cert, key and CA files as read just before the context in
     * service was built (files_known: it could be read): net_tls_files_changed compares. */
    unsigned char files_sha256[32];
    bool files_known;
    _Atomic int ktls;            /* net_tls_ktls of the current context */
    /* The OpenSSL reason of the last failure per cause (a static string of OpenSSL's, or NULL):
     * the rate-limited log line quotes it. */
    _Atomic(const char *) last_detail[NET_TLS_FAIL_COUNT];
    /* Client certificates that the protocol may take as credentials (util/certname.h; the HTTP
     * listener's auth.client_certificates), or NULL: no check. Set before the loops start. */
    const struct certname_list *peers;
    _Atomic int peer_lock;      /* guards last_unlisted (loops write, the log reads) */
    char last_unlisted[320];    /* the names of the last unlisted certificate, for the log */
} net_tls;

/* Builds the first context from cfg. name labels metrics, what prefixes messages
 * ("server.tls" -> "server.tls.key_file /x.pem: key values mismatch"). 0, or -1 with err. */
int net_tls_init(net_tls *t, const char *name, const char *what, const net_tls_config *cfg,
                 char *err, size_t errlen);
/* Builds a new context from the same description (the files as they are now) and puts it in
 * place. 0; or -1 with err, the old context still in service (counted in reload_failures). */
int net_tls_reload(net_tls *t, char *err, size_t errlen);
/* net_tls_reload, and on failure also memcached 1.6.18's reply line for refresh_certs in mc
 * ("Error loading the key: <path> : error:...\r\n", as its load_server_certificates). */
int net_tls_reload_mc(net_tls *t, char *err, size_t errlen, char *mc, size_t mclen);
/* Whether the files hold other bytes than those the context in service was built from (true
 * when one cannot be read: a reload then says why). The file watch asks before it reloads, so
 * an event that changed nothing (a log file, an editor's swap file, an unrelated Secret key in
 * the directory) reloads nothing, logs nothing and cannot feed back into itself. Same thread
 * rules as net_tls_reload. */
bool net_tls_files_changed(const net_tls *t);
/* Drops this struct's reference (connections still open keep theirs). */
void net_tls_free(net_tls *t);

/* A server-side connection object on the current context, or NULL (out of memory). Loop
 * threads. */
struct ssl_st *net_tls_new_ssl(net_tls *t);

/* After ssl's handshake: its client certificate (verified by OpenSSL against client_ca_file, or
 * the handshake would have failed) against t->peers: the subject DN in RFC 2253 form and the
 * DNS and URI subjectAltNames. Once per connection (a few microseconds, besides a handshake).
 * An unlisted certificate's names are kept for net_tls_last_unlisted. Loop threads. */
net_tls_peer net_tls_peer_check(net_tls *t, struct ssl_st *ssl);
/* The names of the last unlisted certificate ("" when none), into out. Any thread. */
void net_tls_last_unlisted(net_tls *t, char *out, size_t n);

/* Maps a failed SSL_do_handshake (its SSL_get_error code and the error queue) to a cause, and
 * records OpenSSL's reason for the log. */
net_tls_fail net_tls_classify(net_tls *t, int ssl_error);

#endif
