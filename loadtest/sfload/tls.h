/* sfload's TLS client (OpenSSL 3): one context per run, one SSL per connection over a BIO pair.
 *
 * The engine keeps libuv's TCP streams and moves bytes between them and OpenSSL: ciphertext that
 * libuv read goes in with sltls_feed, plaintext comes out with sltls_read; request bytes go in
 * with sltls_write, and the ciphertext waiting in the pair is sent straight from the pair's
 * buffer (sltls_out, then sltls_sent once the socket took it): no copy, and the bytes stay put
 * until consumed, so a uv_write may point at them. The pair's buffers (SLTLS_PAIR_BYTES each
 * way) and OpenSSL's record buffers are allocated with the connection, at its handshake; a
 * keep-alive connection allocates nothing afterwards.
 *
 * Verification: with --cacert the server's chain must lead to those CAs and its certificate must
 * name the --sni name, else the target's host (a name, or an IP address checked as one); with
 * --insecure nothing is checked. A failure leaves a one-line reason in why.
 *
 * --tls-resume: a connection slot (sltls_conn) keeps the newest session the server gave it (TLS
 * 1.3 tickets arrive after the handshake, a 1.2 session at its end) and offers it on its next
 * connection. A connection that ended cleanly keeps its session resumable (sltls_end).
 *
 * Threads: each load thread has its own context (OpenSSL writes cached encodings into the CA
 * store's certificates while verifying, so a shared store is written by several threads); an
 * sltls_conn belongs to its connection's thread.
 */
#ifndef SFLOAD_TLS_H
#define SFLOAD_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "opts.h"

#define SLTLS_PAIR_BYTES (16 * 1024) /* each direction of a connection's BIO pair */
#define SLTLS_WHY_BYTES  192

/* sltls_read results besides a byte count (> 0) */
#define SLTLS_WANT 0  /* nothing decrypted: feed more ciphertext (or, blocking: timed out) */
#define SLTLS_EOF  -1 /* the server sent close_notify */
#define SLTLS_ERR  -2 /* a TLS failure; the reason is in why */

typedef struct sltls_ctx sltls_ctx;
typedef struct ssl_st SSL;
typedef struct bio_st BIO;
typedef struct ssl_session_st SSL_SESSION;

typedef struct sltls_conn {
    SSL *ssl;             /* NULL between connections */
    BIO *net;             /* the engine's end of the pair (NULL on a blocking socket) */
    SSL_SESSION *session; /* --tls-resume: offered on the next connection of this slot */
    const char *name;     /* the name (or address) verified */
    bool done;            /* the handshake finished */
    bool got_data;        /* application data arrived on this connection */
    bool want_write;      /* the last call stopped because the pair's outgoing side was full */
    char why[SLTLS_WHY_BYTES]; /* the last failure */
} sltls_conn;

/* The run's context from o (o->tls set): versions, ciphers, the CAs, the client certificate.
 * NULL with a reason in err (an unreadable file, a key that does not match, no such cipher). */
sltls_ctx *sltls_ctx_new(const sl_opts *o, char *err, size_t errlen);
void sltls_ctx_free(sltls_ctx *x);
bool sltls_ctx_verifies(const sltls_ctx *x);

/* A new connection to host (the target's, without brackets) over a BIO pair; 0, or -1 with why. */
int sltls_start(sltls_conn *t, const sltls_ctx *x, const char *host);
/* The same on a connected blocking socket, handshake included (for the one pre-run request). */
int sltls_start_fd(sltls_conn *t, const sltls_ctx *x, const char *host, int fd);
/* Drives the handshake: 1 finished, 0 under way (send sltls_out, feed the reply), -1 failed. */
int sltls_handshake(sltls_conn *t);
/* Ciphertext from the socket into the pair: the bytes taken (fewer when the pair is full). */
size_t sltls_feed(sltls_conn *t, const char *p, size_t n);
/* Plaintext out: > 0 bytes, or SLTLS_WANT, SLTLS_EOF, SLTLS_ERR. */
long sltls_read(sltls_conn *t, char *buf, size_t n);
/* Plaintext in: > 0 bytes taken (maybe fewer than n), 0 when the pair is full (send its bytes and
 * call again with the same bytes), SLTLS_ERR. */
long sltls_write(sltls_conn *t, const char *p, size_t n);
/* The ciphertext ready to send, contiguous (0: none); it stays put until sltls_sent. */
size_t sltls_out(sltls_conn *t, char **p);
void sltls_sent(sltls_conn *t, size_t n);
/* Ends the connection (frees the SSL and the pair). clean: it ended without a failure, so its
 * session stays resumable (no close_notify is sent: the socket is closing anyway). */
void sltls_end(sltls_conn *t, bool clean);
void sltls_free(sltls_conn *t); /* sltls_end, and the kept session */

bool sltls_resumed(const sltls_conn *t);
const char *sltls_version(const sltls_conn *t); /* "TLSv1.3"; static strings */
const char *sltls_cipher(const sltls_conn *t);

#endif
