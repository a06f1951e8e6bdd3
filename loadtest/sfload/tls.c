/* sfload's TLS client over OpenSSL 3 (see tls.h). */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sltls_ctx {
    SSL_CTX *ctx;
    const char *sni; /* --sni, or NULL */
    bool verify, resume;
};

/* --- the context ------------------------------------------------------------------------------ */

/* The reason of the oldest queued OpenSSL error ("no certificate or crl found"), then clears. */
static const char *ossl_reason(char *buf, size_t n)
{
    unsigned long e = ERR_peek_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    if (r)
        snprintf(buf, n, "%s", r);
    else if (e)
        ERR_error_string_n(e, buf, n);
    else
        snprintf(buf, n, "unknown error");
    ERR_clear_error();
    return buf;
}

/* NULL, with "what file: reason" (file: a path, checked for readability first, or NULL). */
static sltls_ctx *ctx_fail(sltls_ctx *x, char *err, size_t n, const char *what, const char *file)
{
    char r[160];
    if (file && access(file, R_OK) != 0)
        snprintf(err, n, "%s %s: %s", what, file, strerror(errno));
    else if (file)
        snprintf(err, n, "%s %s: %s", what, file, ossl_reason(r, sizeof r));
    else
        snprintf(err, n, "%s: %s", what, ossl_reason(r, sizeof r));
    sltls_ctx_free(x);
    return NULL;
}

static sltls_ctx *list_fail(sltls_ctx *x, char *err, size_t n, const char *opt, const char *list)
{
    snprintf(err, n, "%s %s: OpenSSL knows none of these (see `openssl ciphers -s -v`)", opt,
             list);
    ERR_clear_error();
    sltls_ctx_free(x);
    return NULL;
}

/* --tls-resume: the newest session of a connection replaces the one its slot kept. */
static int on_new_session(SSL *ssl, SSL_SESSION *s)
{
    sltls_conn *t = SSL_get_app_data(ssl);
    if (!t)
        return 0;
    SSL_SESSION_free(t->session);
    t->session = s;
    return 1; /* the reference is ours now */
}

static int tls13_suites(SSL_CTX *ctx)
{
    STACK_OF(SSL_CIPHER) *all = SSL_CTX_get_ciphers(ctx);
    int k = 0;
    for (int i = 0; i < sk_SSL_CIPHER_num(all); i++)
        k += strcmp(SSL_CIPHER_get_version(sk_SSL_CIPHER_value(all, i)), "TLSv1.3") == 0;
    return k;
}

sltls_ctx *sltls_ctx_new(const sl_opts *o, char *err, size_t n)
{
    sltls_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    ERR_clear_error();
    x->ctx = SSL_CTX_new(TLS_client_method());
    if (!x->ctx)
        return ctx_fail(x, err, n, "TLS context", NULL);
    x->sni = o->tls_sni;
    x->verify = !o->tls_insecure;
    x->resume = o->tls_resume;
    int min = o->tls_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION;
    int max = o->tls_version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION;
    SSL_CTX_set_min_proto_version(x->ctx, min);
    SSL_CTX_set_max_proto_version(x->ctx, max);
    if (o->tls_ciphers && !SSL_CTX_set_cipher_list(x->ctx, o->tls_ciphers))
        return list_fail(x, err, n, "--ciphers", o->tls_ciphers);
    /* Unknown TLS 1.3 names are skipped silently by OpenSSL: count what is left. */
    if (o->tls_suites &&
        (!SSL_CTX_set_ciphersuites(x->ctx, o->tls_suites) || tls13_suites(x->ctx) == 0))
        return list_fail(x, err, n, "--ciphersuites", o->tls_suites);
    if (x->verify) {
        if (!SSL_CTX_load_verify_locations(x->ctx, o->tls_cacert, NULL))
            return ctx_fail(x, err, n, "--cacert", o->tls_cacert);
        SSL_CTX_set_verify(x->ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(x->ctx, SSL_VERIFY_NONE, NULL);
    }
    if (o->tls_cert) {
        if (!SSL_CTX_use_certificate_chain_file(x->ctx, o->tls_cert))
            return ctx_fail(x, err, n, "--cert", o->tls_cert);
        if (!SSL_CTX_use_PrivateKey_file(x->ctx, o->tls_key, SSL_FILETYPE_PEM))
            return ctx_fail(x, err, n, "--key", o->tls_key);
        if (!SSL_CTX_check_private_key(x->ctx))
            return ctx_fail(x, err, n, "--key does not match --cert", NULL);
    }
    /* Partial writes: a request larger than the pair goes out in pieces; the engine retries with
     * the same bytes from the same place, but ACCEPT_MOVING keeps OpenSSL from insisting. */
    SSL_CTX_set_mode(x->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (x->resume) {
        /* No internal store: each connection slot keeps its own session (on_new_session). */
        SSL_CTX_set_session_cache_mode(x->ctx,
                                       SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(x->ctx, on_new_session);
    } else {
        SSL_CTX_set_session_cache_mode(x->ctx, SSL_SESS_CACHE_OFF);
    }
    return x;
}

void sltls_ctx_free(sltls_ctx *x)
{
    if (!x)
        return;
    SSL_CTX_free(x->ctx);
    free(x);
}

bool sltls_ctx_verifies(const sltls_ctx *x)
{
    return x->verify;
}

/* --- a connection ----------------------------------------------------------------------------- */

static bool is_address(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* SNI, the name to verify, the session to offer. */
static int setup(sltls_conn *t, const sltls_ctx *x, const char *host)
{
    bool addr = !x->sni && is_address(host);
    t->name = x->sni ? x->sni : host;
    t->done = t->got_data = t->want_write = false;
    t->why[0] = '\0';
    SSL_set_app_data(t->ssl, t);
    if (!addr && !SSL_set_tlsext_host_name(t->ssl, t->name))
        goto fail;
    if (x->verify) {
        if (addr) {
            if (!X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), host))
                goto fail;
        } else {
            SSL_set_hostflags(t->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            if (!SSL_set1_host(t->ssl, t->name))
                goto fail;
        }
    }
    if (x->resume && t->session && !SSL_set_session(t->ssl, t->session))
        goto fail;
    SSL_set_connect_state(t->ssl);
    return 0;
fail:
    snprintf(t->why, sizeof t->why, "cannot set up the connection for %s: ", t->name);
    ossl_reason(t->why + strlen(t->why), sizeof t->why - strlen(t->why));
    sltls_end(t, false);
    return -1;
}

int sltls_start(sltls_conn *t, const sltls_ctx *x, const char *host)
{
    BIO *inner = NULL;
    ERR_clear_error();
    t->ssl = SSL_new(x->ctx);
    if (!t->ssl || !BIO_new_bio_pair(&inner, SLTLS_PAIR_BYTES, &t->net, SLTLS_PAIR_BYTES)) {
        snprintf(t->why, sizeof t->why, "out of memory for a TLS connection");
        ERR_clear_error();
        sltls_end(t, false);
        return -1;
    }
    SSL_set_bio(t->ssl, inner, inner); /* the SSL owns the inner end */
    return setup(t, x, host);
}

int sltls_start_fd(sltls_conn *t, const sltls_ctx *x, const char *host, int fd)
{
    ERR_clear_error();
    t->ssl = SSL_new(x->ctx);
    if (!t->ssl || !SSL_set_fd(t->ssl, fd)) {
        snprintf(t->why, sizeof t->why, "out of memory for a TLS connection");
        ERR_clear_error();
        sltls_end(t, false);
        return -1;
    }
    if (setup(t, x, host) != 0)
        return -1;
    return sltls_handshake(t) == 1 ? 0 : -1;
}

/* why for a failed call that returned ret: the certificate check's verdict when that was the
 * cause, else OpenSSL's reason, else what the socket did. Clears the error queue. */
static void failure(sltls_conn *t, int ret, const char *when)
{
    int e = SSL_get_error(t->ssl, ret);
    unsigned long code = ERR_peek_error();
    long v = SSL_get_verify_result(t->ssl);
    char r[120];
    if (ERR_GET_LIB(code) == ERR_LIB_SSL &&
        ERR_GET_REASON(code) == SSL_R_CERTIFICATE_VERIFY_FAILED && v != X509_V_OK) {
        snprintf(t->why, sizeof t->why, "certificate verify failed: %s (name %s)",
                 X509_verify_cert_error_string(v), t->name);
        ERR_clear_error();
    } else if (code) {
        ossl_reason(r, sizeof r);
        bool plain = strstr(r, "wrong version number") || strstr(r, "packet length too long") ||
                     strstr(r, "record layer failure");
        snprintf(t->why, sizeof t->why, "%s%s: %s%s", when, t->done ? "" : " (handshake)", r,
                 plain ? " (is the server speaking TLS on this port?)" : "");
    } else if (e == SSL_ERROR_SYSCALL) {
        snprintf(t->why, sizeof t->why, "%s: %s", when,
                 errno ? strerror(errno) : "connection closed by the server");
    } else {
        snprintf(t->why, sizeof t->why, "%s: TLS error %d", when, e);
    }
}

int sltls_handshake(sltls_conn *t)
{
    ERR_clear_error();
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        t->done = true;
        t->want_write = false;
        return 1;
    }
    int e = SSL_get_error(t->ssl, r);
    t->want_write = e == SSL_ERROR_WANT_WRITE;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (!t->net) { /* a blocking socket: a timeout */
            snprintf(t->why, sizeof t->why, "handshake timed out");
            return -1;
        }
        return 0;
    }
    failure(t, r, "handshake");
    return -1;
}

size_t sltls_feed(sltls_conn *t, const char *p, size_t n)
{
    if (!n)
        return 0;
    int k = BIO_write(t->net, p, n > INT_MAX ? INT_MAX : (int)n);
    return k > 0 ? (size_t)k : 0;
}

long sltls_read(sltls_conn *t, char *buf, size_t n)
{
    ERR_clear_error();
    int r = SSL_read(t->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
    if (r > 0) {
        t->got_data = true;
        return r;
    }
    int e = SSL_get_error(t->ssl, r);
    t->want_write = e == SSL_ERROR_WANT_WRITE;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return SLTLS_WANT;
    if (e == SSL_ERROR_ZERO_RETURN)
        return SLTLS_EOF;
    failure(t, r, "read");
    return SLTLS_ERR;
}

long sltls_write(sltls_conn *t, const char *p, size_t n)
{
    ERR_clear_error();
    int r = SSL_write(t->ssl, p, n > (1u << 30) ? (int)(1u << 30) : (int)n);
    if (r > 0) {
        t->want_write = false;
        return r;
    }
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
        t->want_write = true;
        return 0;
    }
    failure(t, r, "write");
    return SLTLS_ERR;
}

size_t sltls_out(sltls_conn *t, char **p)
{
    int k = BIO_nread0(t->net, p);
    return k > 0 ? (size_t)k : 0;
}

void sltls_sent(sltls_conn *t, size_t n)
{
    char *p;
    if (n)
        BIO_nread(t->net, &p, (int)n);
}

void sltls_end(sltls_conn *t, bool clean)
{
    if (t->ssl) {
        /* OpenSSL marks the session of an SSL freed without a sent close_notify not resumable;
         * a connection that ended well (the server closed after its response, or we close at
         * the end of the run) may keep it, as curl's would after sending one. */
        if (clean && t->done)
            SSL_set_shutdown(t->ssl, SSL_get_shutdown(t->ssl) | SSL_SENT_SHUTDOWN);
        SSL_free(t->ssl); /* and the pair's inner end */
    }
    BIO_free(t->net);
    t->ssl = NULL;
    t->net = NULL;
    t->done = false;
}

void sltls_free(sltls_conn *t)
{
    sltls_end(t, false);
    SSL_SESSION_free(t->session);
    t->session = NULL;
}

bool sltls_resumed(const sltls_conn *t)
{
    return t->ssl && SSL_session_reused(t->ssl);
}

const char *sltls_version(const sltls_conn *t)
{
    return t->ssl ? SSL_get_version(t->ssl) : "";
}

const char *sltls_cipher(const sltls_conn *t)
{
    return t->ssl ? SSL_CIPHER_get_name(SSL_get_current_cipher(t->ssl)) : "";
}
