/* Listener TLS contexts: see tls.h. */
#include "net/tls.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/certname.h"
#include "util/filedigest.h"
#include "util/spinlock.h"
#include "util/tlsutil.h"

#define TICKET_KEYS_LEN 80 /* OpenSSL 1.1.1+: key name 16, HMAC 32, AES 32 */
#ifndef TCP_ULP
#define TCP_ULP 31 /* linux/tcp.h */
#endif

const char *net_tls_fail_name(net_tls_fail r)
{
    static const char *const names[NET_TLS_FAIL_COUNT] = {
        "timeout",          "eof",  "not_tls",         "protocol_version", "no_shared_cipher",
        "alpn", "bad_certificate", "peer_alert",       "other"};
    return (unsigned)r < NET_TLS_FAIL_COUNT ? names[r] : "other";
}

const char *net_tls_ktls_text(net_tls_ktls k)
{
    switch (k) {
    case NET_TLS_KTLS_ON:
        return "the kernel has the tls ULP: connections whose cipher it supports get kernel TLS "
               "(snowflaked_tls_ktls_connections_total)";
    case NET_TLS_KTLS_NO_KERNEL:
        return "the kernel has no tls ULP (CONFIG_TLS; as a module: modprobe tls): userspace TLS";
    case NET_TLS_KTLS_NO_OPENSSL:
        return "this OpenSSL was built without kTLS (no-ktls): userspace TLS";
    default: return NULL;
    }
}

/* Whether the kernel offers the tls ULP, as OpenSSL will ask for it (setsockopt TCP_ULP "tls"):
 * on a socket that is not connected, a kernel with it refuses with ENOTCONN (tls_init wants an
 * established connection), one without with ENOENT. Asking loads the module when it is one and
 * we may (CAP_NET_ADMIN), as OpenSSL's own setsockopt would; /proc/sys/net/ipv4/
 * tcp_available_ulp lists only loaded ones. */
static net_tls_ktls ktls_probe(bool wanted)
{
    if (!wanted)
        return NET_TLS_KTLS_OFF;
#ifdef OPENSSL_NO_KTLS
    return NET_TLS_KTLS_NO_OPENSSL;
#else
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NET_TLS_KTLS_NO_KERNEL;
    int r = setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", 3), e = errno;
    close(fd);
    return r == 0 || e == ENOTCONN ? NET_TLS_KTLS_ON : NET_TLS_KTLS_NO_KERNEL;
#endif
}

/* OpenSSL's reason for the last error on this thread's queue. */
/* memcached's load_server_certificates failure line: "<what><path> : <OpenSSL's first error, as
 * ERR_error_string_n writes it>\r\n" (no " : " when path is NULL), the bytes refresh_certs
 * answers. Nothing when mc is NULL (SIGHUP and start-up need only err). */
static void mc_error(char *mc, size_t mclen, const char *what, const char *path)
{
    if (!mc)
        return;
    char e[256] = "";
    unsigned long code = ERR_peek_error();
    if (code)
        ERR_error_string_n(code, e, sizeof e);
    if (path)
        snprintf(mc, mclen, "%s%s : %s\r\n", what, path, e);
    else
        snprintf(mc, mclen, "%s%s\r\n", what, e);
}

/* RFC 7301: a client whose ALPN list lacks http/1.1 gets a fatal no_application_protocol
 * alert (rather than a connection without ALPN that it would then use for h2). A client that
 * offers no ALPN at all is served: ALPN is optional for HTTP/1.1. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    (void)arg;
    static const unsigned char http11[] = "\x08http/1.1";
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, http11, sizeof http11 - 1, in, inlen) ==
        OPENSSL_NPN_NEGOTIATED) {
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* The session ID context: a session resumes only into a context with the same one. It covers
 * the listener, the verify mode and, when client certificates are checked, the CAs they were
 * verified against (each one's SHA-256, in the store's order): a resumed session skips the
 * verification, so one verified under a CA that a reload removed must not resume (its
 * certificate would keep the access it had, auth.client_certificates' grant included). A reload
 * that keeps the CAs (a new server certificate) keeps resumption working. */
static int set_sid_ctx(SSL_CTX *ctx, const net_tls *t)
{
    unsigned char md[EVP_MAX_MD_SIZE], one[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0, onelen;
    int verify = (int)t->cfg.verify, rc = -1;
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    if (!h || !EVP_DigestInit_ex(h, EVP_sha256(), NULL) ||
        !EVP_DigestUpdate(h, t->name, strlen(t->name)) ||
        !EVP_DigestUpdate(h, &verify, sizeof verify))
        goto done;
    if (t->cfg.verify != NET_TLS_VERIFY_NONE) {
        STACK_OF(X509_OBJECT) *objs = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
        for (int i = 0; i < sk_X509_OBJECT_num(objs); i++) {
            X509 *x = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objs, i));
            if (x && (!X509_digest(x, EVP_sha256(), one, &onelen) ||
                      !EVP_DigestUpdate(h, one, onelen)))
                goto done;
        }
    }
    if (EVP_DigestFinal_ex(h, md, &mdlen) && mdlen <= SSL_MAX_SID_CTX_LENGTH &&
        SSL_CTX_set_session_id_context(ctx, md, mdlen))
        rc = 0;
done:
    EVP_MD_CTX_free(h);
    return rc;
}

static SSL_CTX *build(const net_tls *t, net_tls_ktls ktls, char *err, size_t errlen, char *mc,
                      size_t mclen)
{
    if (mc && mclen)
        mc[0] = '\0';
    const net_tls_config *c = &t->cfg;
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        snprintf(err, errlen, "%s: cannot create a TLS context: %s", t->what, tlsutil_reason());
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, c->min_tls13 ? TLS1_3_VERSION : TLS1_2_VERSION);
    /* No renegotiation (a client could make us pay handshakes on one connection); a peer that
     * closes without close_notify is an EOF, as curl and most clients do it; tickets only when
     * resumption is wanted. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF |
                                 (c->session_tickets ? 0 : SSL_OP_NO_TICKET));
    /* Kernel TLS only where the kernel has it: on one without, OpenSSL would try (and fail) a
     * setsockopt on every connection. */
    if (ktls == NET_TLS_KTLS_ON)
        SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS);
    /* One record per SSL_write call (transport_tls.c retries with the same bytes from another
     * address). No SSL_MODE_RELEASE_BUFFERS: it frees and reallocates both 16 KiB buffers on
     * every request; transport_tls.c frees them once a connection has been idle a second. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* Read what the socket holds in one read(), not a record header then its body. */
    SSL_CTX_set_read_ahead(ctx, 1);
    /* Resumption by stateless tickets only: no session cache shared (and locked) by the loops. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    if (!c->session_tickets)
        SSL_CTX_set_num_tickets(ctx, 0);
    if (c->ciphersuites[0] && !SSL_CTX_set_ciphersuites(ctx, c->ciphersuites)) {
        snprintf(err, errlen, "%s.ciphersuites \"%s\": %s", t->what, c->ciphersuites,
                 tlsutil_reason());
        goto fail;
    }
    if (!SSL_CTX_set_cipher_list(ctx, c->cipher_list[0] ? c->cipher_list : NET_TLS_DEFAULT_CIPHERS)) {
        snprintf(err, errlen, "%s.cipher_list \"%s\": %s", t->what, c->cipher_list, tlsutil_reason());
        goto fail;
    }
    if (!SSL_CTX_use_certificate_chain_file(ctx, c->cert_file)) {
        mc_error(mc, mclen, "Error loading the certificate chain: ", c->cert_file);
        if (tlsutil_readable(t->what, "cert_file", c->cert_file, err, errlen) == 0)
            snprintf(err, errlen, "%s.cert_file %s: %s", t->what, c->cert_file, tlsutil_reason());
        goto fail;
    }
    bool key_loaded = SSL_CTX_use_PrivateKey_file(ctx, c->key_file, SSL_FILETYPE_PEM);
    if (!key_loaded || !SSL_CTX_check_private_key(ctx)) {
        if (key_loaded)
            mc_error(mc, mclen, "Error validating the certificate: ", NULL);
        else
            mc_error(mc, mclen, "Error loading the key: ", c->key_file);
        if (tlsutil_readable(t->what, "key_file", c->key_file, err, errlen) != 0)
            goto fail;
        unsigned long e = ERR_peek_last_error();
        bool mismatch = ERR_GET_LIB(e) == ERR_LIB_X509 &&
                        ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH;
        snprintf(err, errlen, "%s.key_file %s: %s%s", t->what, c->key_file, tlsutil_reason(),
                 mismatch ? " (the key does not belong to the certificate of cert_file)" : "");
        goto fail;
    }
    if (c->client_ca_file[0]) {
        if (!SSL_CTX_load_verify_locations(ctx, c->client_ca_file, NULL)) {
            mc_error(mc, mclen, "Error loading the CA certificate: ", c->client_ca_file);
            if (tlsutil_readable(t->what, "client_ca_file", c->client_ca_file, err, errlen) == 0)
                snprintf(err, errlen, "%s.client_ca_file %s: %s", t->what, c->client_ca_file,
                         tlsutil_reason());
            goto fail;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(c->client_ca_file);
        if (!names) {
            mc_error(mc, mclen, "Error loading the CA certificate: ", c->client_ca_file);
            snprintf(err, errlen, "%s.client_ca_file %s: no PEM certificate in it", t->what,
                     c->client_ca_file);
            goto fail;
        }
        SSL_CTX_set_client_CA_list(ctx, names); /* the CAs we accept, named to the client */
    }
    int mode = c->verify == NET_TLS_VERIFY_NONE     ? SSL_VERIFY_NONE
               : c->verify == NET_TLS_VERIFY_OPTIONAL ? SSL_VERIFY_PEER
                                                      : SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx, mode, NULL);
    if (set_sid_ctx(ctx, t) != 0) {
        snprintf(err, errlen, "%s: cannot set the session ID context: %s", t->what, tlsutil_reason());
        goto fail;
    }
    if (c->alpn_http11)
        SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
    return ctx;
fail:
    if (mc && !mc[0])
        snprintf(mc, mclen, "Error %s\r\n", err);
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return NULL;
}

/* The cert, key and CA files' digest (util/filedigest.h). */
static int files_digest(const net_tls_config *cfg, unsigned char out[32])
{
    const char *paths[] = {cfg->cert_file, cfg->key_file, cfg->client_ca_file};
    return file_digest_sha256(paths, 3, out);
}

bool net_tls_files_changed(const net_tls *t)
{
    unsigned char now[32];
    if (!t->files_known || files_digest(&t->cfg, now) != 0)
        return true;
    return memcmp(now, t->files_sha256, sizeof now) != 0;
}

int net_tls_init(net_tls *t, const char *name, const char *what, const net_tls_config *cfg,
                 char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->what, sizeof t->what, "%s", what);
    t->cfg = *cfg;
    if (cfg->verify != NET_TLS_VERIFY_NONE && !cfg->client_ca_file[0]) {
        snprintf(err, errlen, "%s.verify_client: needs %s.client_ca_file", what, what);
        return -1;
    }
    /* Read before the build: a change landing between the two is then seen as one later. */
    t->files_known = files_digest(cfg, t->files_sha256) == 0;
    net_tls_ktls ktls = ktls_probe(cfg->ktls);
    t->current = build(t, ktls, err, errlen, NULL, 0);
    if (!t->current)
        return -1;
    atomic_store(&t->ktls, (int)ktls);
    atomic_store(&t->not_after_s, tlsutil_not_after_s(t->current));
    atomic_store(&t->loaded_at_s, (int64_t)time(NULL));
    return 0;
}

int net_tls_reload(net_tls *t, char *err, size_t errlen)
{
    return net_tls_reload_mc(t, err, errlen, NULL, 0);
}

int net_tls_reload_mc(net_tls *t, char *err, size_t errlen, char *mc, size_t mclen)
{
    unsigned char digest[32];
    bool known = files_digest(&t->cfg, digest) == 0;
    net_tls_ktls ktls = ktls_probe(t->cfg.ktls);
    SSL_CTX *ctx = build(t, ktls, err, errlen, mc, mclen);
    if (!ctx) {
        atomic_fetch_add(&t->reload_failures, 1);
        return -1;
    }
    /* Tickets issued before the rotation still resume after it. Only this thread swaps, so
     * `current` is stable here. */
    unsigned char keys[TICKET_KEYS_LEN];
    if (SSL_CTX_get_tlsext_ticket_keys(t->current, keys, sizeof keys) == 1)
        SSL_CTX_set_tlsext_ticket_keys(ctx, keys, sizeof keys);
    OPENSSL_cleanse(keys, sizeof keys);
    spin_lock(&t->lock);
    SSL_CTX *old = t->current;
    t->current = ctx;
    spin_unlock(&t->lock);
    SSL_CTX_free(old); /* connections on it hold their own references */
    atomic_store(&t->not_after_s, tlsutil_not_after_s(ctx));
    atomic_store(&t->loaded_at_s, (int64_t)time(NULL));
    memcpy(t->files_sha256, digest, sizeof digest);
    t->files_known = known;
    atomic_store(&t->ktls, (int)ktls);
    atomic_fetch_add(&t->reloads, 1);
    return 0;
}

void net_tls_free(net_tls *t)
{
    SSL_CTX_free(t->current);
    t->current = NULL;
}

SSL *net_tls_new_ssl(net_tls *t)
{
    spin_lock(&t->lock);
    SSL_CTX *ctx = t->current;
    SSL_CTX_up_ref(ctx);
    spin_unlock(&t->lock);
    SSL *ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); /* the SSL holds its own reference */
    return ssl;
}

net_tls_fail net_tls_classify(net_tls *t, int ssl_error)
{
    unsigned long e = ERR_peek_last_error();
    net_tls_fail why = NET_TLS_FAIL_OTHER;
    if (!e && (ssl_error == SSL_ERROR_SYSCALL || ssl_error == SSL_ERROR_ZERO_RETURN))
        why = NET_TLS_FAIL_EOF;
    else if (ERR_GET_LIB(e) == ERR_LIB_SSL) {
        int r = ERR_GET_REASON(e);
        switch (r) {
        case SSL_R_HTTP_REQUEST:
        case SSL_R_HTTPS_PROXY_REQUEST:
        case SSL_R_WRONG_VERSION_NUMBER:
        case SSL_R_PACKET_LENGTH_TOO_LONG:
        case SSL_R_RECORD_LENGTH_MISMATCH:
        case SSL_R_UNEXPECTED_RECORD:
        case SSL_R_UNEXPECTED_MESSAGE:
        case SSL_R_UNKNOWN_PROTOCOL:
        case SSL_R_BAD_PACKET_LENGTH:
        case SSL_R_LENGTH_TOO_SHORT: why = NET_TLS_FAIL_NOT_TLS; break;
        case SSL_R_UNSUPPORTED_PROTOCOL:
        case SSL_R_VERSION_TOO_LOW:
        case SSL_R_NO_PROTOCOLS_AVAILABLE:
        case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION: why = NET_TLS_FAIL_PROTOCOL_VERSION; break;
        case SSL_R_NO_SHARED_CIPHER:
        case SSL_R_NO_SHARED_GROUPS: why = NET_TLS_FAIL_NO_SHARED_CIPHER; break;
        case SSL_R_NO_APPLICATION_PROTOCOL: why = NET_TLS_FAIL_ALPN; break;
        case SSL_R_CERTIFICATE_VERIFY_FAILED:
        case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
        case SSL_R_NO_CERTIFICATES_RETURNED: why = NET_TLS_FAIL_BAD_CERTIFICATE; break;
        case SSL_R_UNEXPECTED_EOF_WHILE_READING: why = NET_TLS_FAIL_EOF; break;
        default:
            if (r > SSL_AD_REASON_OFFSET && r < SSL_AD_REASON_OFFSET + 256)
                why = NET_TLS_FAIL_PEER_ALERT; /* SSL_R_*_ALERT_*: the alert the peer sent */
        }
    }
    if (e) {
        const char *detail = ERR_reason_error_string(e); /* static in OpenSSL's string table */
        if (detail)
            atomic_store_explicit(&t->last_detail[why], detail, memory_order_relaxed);
    }
    ERR_clear_error();
    return why;
}

/* ---- client certificates as credentials ---------------------------------------------------- */

const char *net_tls_peer_name(net_tls_peer p)
{
    static const char *const names[NET_TLS_PEER_COUNT] = {"listed", "unlisted", "none"};
    return (unsigned)p < NET_TLS_PEER_COUNT ? names[p] : "none";
}

/* The subject DN as `openssl x509 -noout -subject -nameopt RFC2253` prints it, into out (cut to
 * n - 1 bytes). Returns its full length (0 on failure). */
static size_t subject_rfc2253(X509 *x, char *out, size_t n)
{
    out[0] = '\0';
    BIO *b = BIO_new(BIO_s_mem());
    if (!b)
        return 0;
    size_t len = 0;
    if (X509_NAME_print_ex(b, X509_get_subject_name(x), 0, XN_FLAG_RFC2253) >= 0) {
        char *p;
        long m = BIO_get_mem_data(b, &p);
        if (m > 0) {
            len = (size_t)m;
            size_t k = len < n - 1 ? len : n - 1;
            memcpy(out, p, k);
            out[k] = '\0';
        }
    }
    BIO_free(b);
    return len;
}

/* Appends " DNS:x" / " URI:y" to the description of an unlisted certificate. */
static void describe_san(char *d, size_t n, const char *kind, const unsigned char *v, int len)
{
    size_t used = strlen(d);
    if (used + 8 < n)
        snprintf(d + used, n - used, " %s:%.*s", kind, len, (const char *)v);
}

net_tls_peer net_tls_peer_check(net_tls *t, SSL *ssl)
{
    X509 *x = SSL_get0_peer_certificate(ssl);
    if (!x)
        return NET_TLS_PEER_NONE;
    /* With SSL_VERIFY_PEER a certificate that does not verify fails the handshake; a resumed
     * session carries its full handshake's result. Checked all the same: never grant on an
     * unverified name. */
    if (SSL_get_verify_result(ssl) != X509_V_OK)
        return NET_TLS_PEER_UNLISTED;
    const certname_list *l = t->peers;
    char dn[CERTNAME_MAX + 1], desc[sizeof t->last_unlisted];
    size_t dnlen = subject_rfc2253(x, dn, sizeof dn);
    bool listed = dnlen && dnlen <= CERTNAME_MAX && l &&
                  certname_list_match(l, CERTNAME_DN, dn, dnlen);
    snprintf(desc, sizeof desc, "%s", dnlen ? dn : "(empty subject)");
    GENERAL_NAMES *sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
        const ASN1_IA5STRING *v = g->type == GEN_DNS   ? g->d.dNSName
                                  : g->type == GEN_URI ? g->d.uniformResourceIdentifier
                                                       : NULL;
        if (!v)
            continue;
        certname_kind kind = g->type == GEN_DNS ? CERTNAME_DNS : CERTNAME_URI;
        const unsigned char *p = ASN1_STRING_get0_data(v);
        int len = ASN1_STRING_length(v);
        if (!listed && l && len > 0 && certname_list_match(l, kind, (const char *)p, (size_t)len))
            listed = true;
        describe_san(desc, sizeof desc, kind == CERTNAME_DNS ? "DNS" : "URI", p, len);
    }
    GENERAL_NAMES_free(sans);
    ERR_clear_error();
    if (listed)
        return NET_TLS_PEER_LISTED;
    for (char *c = desc; *c; c++) /* a certificate's bytes go into a log line */
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    spin_lock(&t->peer_lock);
    memcpy(t->last_unlisted, desc, sizeof desc);
    spin_unlock(&t->peer_lock);
    return NET_TLS_PEER_UNLISTED;
}

void net_tls_last_unlisted(net_tls *t, char *out, size_t n)
{
    spin_lock(&t->peer_lock);
    snprintf(out, n, "%s", t->last_unlisted);
    spin_unlock(&t->peer_lock);
}
