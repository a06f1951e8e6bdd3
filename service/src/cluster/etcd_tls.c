/* TLS for the etcd client (see etcd_tls.h). */
#include "cluster/etcd_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/filedigest.h"
#include "util/netio.h"
#include "util/spinlock.h"
#include "util/tlsutil.h"

struct etcd_tls {
    etcd_tls_config cfg;
    char what[48];
    _Atomic int lock;           /* held only to take a reference on / swap `current` */
    SSL_CTX *current;           /* one reference held by this struct */
    _Atomic uint64_t generation; /* bumped by each reload that took */
    _Atomic uint64_t reloads, reload_failures;
    _Atomic int64_t not_after_s;
    unsigned char files_sha256[32];
    bool files_known;
};

static SSL_CTX *build(const etcd_tls *t, char *err, size_t errlen)
{
    const etcd_tls_config *c = &t->cfg;
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        snprintf(err, errlen, "%s: cannot create a TLS context: %s", t->what, tlsutil_reason());
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20");
    /* Sessions are kept by the caller per endpoint (etcd_tls_session), not in a shared cache. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
    if (!SSL_CTX_load_verify_locations(ctx, c->ca_file, NULL)) {
        if (tlsutil_readable(t->what, "ca_file", c->ca_file, err, errlen) == 0)
            snprintf(err, errlen, "%s.ca_file %s: %s", t->what, c->ca_file, tlsutil_reason());
        goto fail;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (c->cert_file[0]) {
        if (!SSL_CTX_use_certificate_chain_file(ctx, c->cert_file)) {
            if (tlsutil_readable(t->what, "cert_file", c->cert_file, err, errlen) == 0)
                snprintf(err, errlen, "%s.cert_file %s: %s", t->what, c->cert_file, tlsutil_reason());
            goto fail;
        }
        bool loaded = SSL_CTX_use_PrivateKey_file(ctx, c->key_file, SSL_FILETYPE_PEM);
        if (!loaded || !SSL_CTX_check_private_key(ctx)) {
            if (tlsutil_readable(t->what, "key_file", c->key_file, err, errlen) != 0)
                goto fail;
            unsigned long e = ERR_peek_last_error();
            bool mismatch = ERR_GET_LIB(e) == ERR_LIB_X509 &&
                            ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH;
            snprintf(err, errlen, "%s.key_file %s: %s%s", t->what, c->key_file, tlsutil_reason(),
                     mismatch ? " (the key does not belong to the certificate of cert_file)" : "");
            goto fail;
        }
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return NULL;
}

/* The CA, cert and key files' digest (util/filedigest.h). */
static int files_digest(const etcd_tls_config *cfg, unsigned char out[32])
{
    const char *paths[] = {cfg->ca_file, cfg->cert_file, cfg->key_file};
    return file_digest_sha256(paths, 3, out);
}

etcd_tls *etcd_tls_new(const etcd_tls_config *cfg, char *err, size_t errlen)
{
    etcd_tls *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->cfg = *cfg;
    snprintf(t->what, sizeof t->what, "%s", cfg->what ? cfg->what : "etcd tls");
    t->cfg.what = t->what;
    if (!cfg->ca_file[0]) {
        snprintf(err, errlen, "%s.ca_file: required with https:// endpoints", t->what);
        free(t);
        return NULL;
    }
    if (!cfg->cert_file[0] != !cfg->key_file[0]) {
        snprintf(err, errlen, "%s.cert_file and %s.key_file: give both or neither", t->what,
                 t->what);
        free(t);
        return NULL;
    }
    t->files_known = files_digest(&t->cfg, t->files_sha256) == 0;
    if (!(t->current = build(t, err, errlen))) {
        free(t);
        return NULL;
    }
    atomic_store(&t->not_after_s, tlsutil_not_after_s(t->current));
    return t;
}

void etcd_tls_free(etcd_tls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->current);
    free(t);
}

const etcd_tls_config *etcd_tls_cfg(const etcd_tls *t)
{
    return &t->cfg;
}

int etcd_tls_reload(etcd_tls *t, char *err, size_t errlen)
{
    unsigned char digest[32];
    bool known = files_digest(&t->cfg, digest) == 0;
    SSL_CTX *ctx = build(t, err, errlen);
    if (!ctx) {
        atomic_fetch_add(&t->reload_failures, 1);
        return -1;
    }
    spin_lock(&t->lock);
    SSL_CTX *old = t->current;
    t->current = ctx;
    atomic_fetch_add(&t->generation, 1);
    spin_unlock(&t->lock);
    SSL_CTX_free(old); /* a connection made with it holds its own reference */
    memcpy(t->files_sha256, digest, sizeof digest);
    t->files_known = known;
    atomic_store(&t->not_after_s, tlsutil_not_after_s(ctx));
    atomic_fetch_add(&t->reloads, 1);
    return 0;
}

bool etcd_tls_files_changed(const etcd_tls *t)
{
    unsigned char now[32];
    if (!t->files_known || files_digest(&t->cfg, now) != 0)
        return true;
    return memcmp(now, t->files_sha256, sizeof now) != 0;
}

uint64_t etcd_tls_reloads(const etcd_tls *t)
{
    return atomic_load(&((etcd_tls *)t)->reloads);
}

uint64_t etcd_tls_reload_failures(const etcd_tls *t)
{
    return atomic_load(&((etcd_tls *)t)->reload_failures);
}

int64_t etcd_tls_not_after(const etcd_tls *t)
{
    return atomic_load(&((etcd_tls *)t)->not_after_s);
}

void etcd_tls_session_clear(etcd_tls_session *sess)
{
    SSL_SESSION_free(sess->session);
    sess->session = NULL;
    sess->generation = 0;
}

/* ---- connections --------------------------------------------------------------------------------- */

/* An alert etcd sent about our certificate (none, unknown CA, expired, ...): SSL reason codes of
 * received alerts are SSL_AD_REASON_OFFSET + the alert. */
static bool peer_refused_our_cert(unsigned long e)
{
    if (ERR_GET_LIB(e) != ERR_LIB_SSL)
        return false;
    int r = ERR_GET_REASON(e) - SSL_AD_REASON_OFFSET;
    return r == SSL_AD_BAD_CERTIFICATE || r == SSL_AD_UNSUPPORTED_CERTIFICATE ||
           r == SSL_AD_CERTIFICATE_REVOKED || r == SSL_AD_CERTIFICATE_EXPIRED ||
           r == SSL_AD_CERTIFICATE_UNKNOWN || r == SSL_AD_UNKNOWN_CA ||
           r == SSL_AD_ACCESS_DENIED || r == SSL_AD_CERTIFICATE_REQUIRED;
}

/* A failed TLS operation in words; *cert_problem when a certificate was refused either way. */
static void describe_failure(SSL *ssl, const char *host, bool *cert_problem, char *err,
                             size_t errlen)
{
    const etcd_tls_config *c = SSL_get_app_data(ssl);
    long v = SSL_get_verify_result(ssl);
    unsigned long e = ERR_peek_last_error();
    if (v != X509_V_OK) {
        *cert_problem = true;
        const char *why = X509_verify_cert_error_string(v);
        if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
            snprintf(err, errlen,
                     "certificate verify failed: %s (etcd's certificate is not for %s%s)", why,
                     c->server_name[0] ? c->server_name : host,
                     c->server_name[0] ? ", snowflake.etcd.tls.server_name" : "");
        else
            snprintf(err, errlen, "certificate verify failed: %s (%s.ca_file %s)", why, c->what,
                     c->ca_file);
    } else if (e && peer_refused_our_cert(e)) {
        *cert_problem = true;
        if (c->cert_file[0])
            snprintf(err, errlen, "etcd refused our client certificate: %s (%s.cert_file %s)",
                     tlsutil_reason(), c->what, c->cert_file);
        else
            snprintf(err, errlen,
                     "etcd refused the connection: %s (no client certificate: etcd may require "
                     "one, set %s.cert_file and %s.key_file)",
                     tlsutil_reason(), c->what, c->what);
    } else if (e) {
        snprintf(err, errlen, "TLS: %s", tlsutil_reason());
    } else {
        snprintf(err, errlen, "TLS: connection closed");
    }
    ERR_clear_error();
}

/* After an SSL call returned rc: 0 to call again (waited for the socket), 1 = the stream ended
 * cleanly, or -errno with err. */
static int settle(SSL *ssl, int fd, int rc, uint64_t deadline_ms, const char *host,
                  bool *cert_problem, char *err, size_t errlen)
{
    int se = SSL_get_error(ssl, rc);
    int w;
    switch (se) {
    case SSL_ERROR_WANT_READ:
        w = netio_wait_fd(fd, POLLIN, deadline_ms);
        break;
    case SSL_ERROR_WANT_WRITE:
        w = netio_wait_fd(fd, POLLOUT, deadline_ms);
        break;
    case SSL_ERROR_ZERO_RETURN:
        return 1;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_last_error() == 0) {
            int saved = errno ? errno : ECONNRESET;
            snprintf(err, errlen, "%s", strerror(saved));
            return -saved;
        }
        /* fall through */
    default:
        describe_failure(ssl, host, cert_problem, err, errlen);
        return -EPROTO;
    }
    if (w == -ETIMEDOUT)
        snprintf(err, errlen, "no answer within the request timeout");
    else if (w < 0)
        snprintf(err, errlen, "%s", strerror(-w));
    return w;
}

static bool numeric_host(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

SSL *etcd_tls_connect(etcd_tls *t, int fd, const char *host, etcd_tls_session *sess,
                      uint64_t deadline_ms, bool *cert_problem, char *err, size_t errlen)
{
    *cert_problem = false;
    ERR_clear_error();
    spin_lock(&t->lock);
    SSL_CTX *ctx = t->current;
    SSL_CTX_up_ref(ctx);
    uint64_t gen = atomic_load(&t->generation);
    spin_unlock(&t->lock);
    SSL *ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); /* the SSL holds its own reference */
    if (!ssl || !SSL_set_fd(ssl, fd)) {
        snprintf(err, errlen, "TLS: %s", tlsutil_reason());
        SSL_free(ssl);
        ERR_clear_error();
        return NULL;
    }
    SSL_set_app_data(ssl, &t->cfg);
    const char *name = t->cfg.server_name[0] ? t->cfg.server_name : host;
    bool ok = true;
    if (numeric_host(name)) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
    } else {
        ok = SSL_set_tlsext_host_name(ssl, name) == 1 && SSL_set1_host(ssl, name) == 1;
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    }
    if (!ok) {
        snprintf(err, errlen, "TLS: cannot check the name %s: %s", name, tlsutil_reason());
        SSL_free(ssl);
        ERR_clear_error();
        return NULL;
    }
    if (sess->session && sess->generation == gen)
        SSL_set_session(ssl, sess->session);
    else if (sess->session)
        etcd_tls_session_clear(sess); /* from before a reload: another client certificate */
    for (;;) {
        int rc = SSL_connect(ssl);
        if (rc == 1)
            break;
        int s = settle(ssl, fd, rc, deadline_ms, host, cert_problem, err, errlen);
        if (s == 0)
            continue;
        if (s == 1)
            snprintf(err, errlen, "TLS: connection closed during the handshake");
        if (sess->session && !*cert_problem)
            etcd_tls_session_clear(sess); /* a session the server did not like: not again */
        SSL_free(ssl);
        return NULL;
    }
    if (!SSL_session_reused(ssl))
        etcd_tls_session_clear(sess);
    sess->generation = gen;
    return ssl;
}

/* A write failed at the socket (reset, broken pipe): a peer that refused our certificate after
 * a TLS 1.3 handshake (etcd checks it once our Finished is in) sent its alert and closed, so the
 * alert may wait in the socket's receive queue. Read it to say why; true when it was one. */
static bool alert_waiting(SSL *ssl, bool *cert_problem, char *err, size_t errlen)
{
    ERR_clear_error();
    char b[256];
    size_t n;
    int rc = SSL_read_ex(ssl, b, sizeof b, &n);
    if (rc == 1 || SSL_get_error(ssl, rc) != SSL_ERROR_SSL ||
        !peer_refused_our_cert(ERR_peek_last_error())) {
        ERR_clear_error();
        return false;
    }
    describe_failure(ssl, "", cert_problem, err, errlen);
    return true;
}

int etcd_tls_send_all(SSL *ssl, int fd, const void *buf, size_t len, uint64_t deadline_ms,
                      bool *cert_problem, char *err, size_t errlen)
{
    *cert_problem = false;
    const char *p = buf;
    while (len > 0) {
        size_t n = 0;
        int rc = SSL_write_ex(ssl, p, len, &n);
        if (rc == 1) {
            p += n;
            len -= n;
            continue;
        }
        int s = settle(ssl, fd, rc, deadline_ms, "", cert_problem, err, errlen);
        if (s == 1) {
            snprintf(err, errlen, "connection closed");
            return -EPIPE;
        }
        if ((s == -ECONNRESET || s == -EPIPE) && alert_waiting(ssl, cert_problem, err, errlen))
            return -EPROTO;
        if (s < 0)
            return s;
    }
    return 0;
}

ssize_t etcd_tls_recv_some(SSL *ssl, int fd, void *buf, size_t cap, uint64_t deadline_ms,
                           bool *cert_problem, char *err, size_t errlen)
{
    *cert_problem = false;
    for (;;) {
        size_t n = 0;
        int rc = SSL_read_ex(ssl, buf, cap, &n);
        if (rc == 1)
            return (ssize_t)n;
        int s = settle(ssl, fd, rc, deadline_ms, "", cert_problem, err, errlen);
        if (s == 1)
            return 0;
        if (s < 0)
            return s;
    }
}

void etcd_tls_keep_session(etcd_tls *t, SSL *ssl, etcd_tls_session *sess)
{
    (void)t;
    SSL_SESSION *s = SSL_get1_session(ssl);
    if (!s)
        return;
    if (!SSL_SESSION_is_resumable(s) || s == sess->session) {
        SSL_SESSION_free(s);
        return;
    }
    SSL_SESSION_free(sess->session);
    sess->session = s; /* generation: set at connect */
}

void etcd_tls_close(etcd_tls *t, SSL *ssl, etcd_tls_session *sess)
{
    if (!ssl)
        return;
    etcd_tls_keep_session(t, ssl, sess);
    /* Closed without a close_notify (the socket goes next, maybe broken): without this flag
     * SSL_free would mark the session not resumable. A fatal TLS error has already done so
     * itself, so only healthy sessions survive. */
    SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(ssl);
    ERR_clear_error();
}

bool etcd_tls_resumed(const SSL *ssl)
{
    return SSL_session_reused((SSL *)ssl) == 1;
}
