/* libFuzzer harness: the TLS record path of a listener, server side, through the real transport.
 *
 * Bytes -> a socketpair -> transport_tls.c (conn_accept_tls: OpenSSL's socket BIO on the
 * connection's own descriptor, the uv_poll_t, the handshake, read_more / write_record, the
 * close_notify and the close) -> conn.c -> the echo protocol, on a real libuv loop run one turn
 * at a time (UV_RUN_NOWAIT) in this thread. The listener's context is the daemon's own: net/tls.c
 * builds it (net_tls_init) from a certificate and key made at start-up (an EC P-256 key and a
 * self-signed certificate, written to the harness's private scratch directory because
 * net_tls_init takes files, as the configuration does), with the options, ALPN callback, ticket
 * settings and verify mode of a configured listener. Nothing is mocked between the socket and
 * the protocol.
 *
 * Input: byte 0 chooses the scenario, byte 1 is the splitter's flag byte (fuzz_common.h: how the
 * payload is cut into writes), the rest is the payload.
 *   bits 0-1  0: the payload is the client's first flight, raw (ClientHello parsing, records
 *                before the handshake, plaintext/garbage on the TLS port)
 *             1: an in-process OpenSSL client completes a TLS 1.3 handshake, then sends the
 *                payload as application data (the echo comes back through SSL_write)
 *             2: the same over TLS 1.2
 *             3: a TLS 1.3 handshake, then the payload raw on the socket (forged or broken
 *                records, alerts, a ClientHello after the handshake)
 *   bit 2     the listener: 0 like server.tls (ALPN http/1.1, session tickets, no client
 *             certificate), 1 mTLS (verify_client required with a client CA, no tickets)
 *   bits 3-4  the client's ALPN offer: none, "http/1.1", "h2" only (refused with an alert),
 *             "h2,http/1.1"
 *   bit 5     the client ends with its FIN (else the connection's timer expires)
 *   bit 6     small socket buffers and a client that reads only at the end: the server's writes
 *             block part way (partial records, the same bytes retried), backpressure pauses reads
 *   bit 7     mode 1: the client asks for a KeyUpdate first (the server must write while it
 *             reads); mode 2: the client tries to renegotiate (refused: SSL_OP_NO_RENEGOTIATION);
 *             mode 3: the client presents no certificate (the mTLS listener refuses it)
 *
 * Checked besides ASan/UBSan/LSan: what the client reads back is a prefix of what it sent (the
 * echo through SSL_write keeps order and loses nothing in between), and all of it when the
 * client read everything on an unbroken connection; the loop never spins (a bounded number of
 * turns reaches a quiet state); after the close every pooled object is back (connection, output
 * chunks, input buffers) and the open-connection count is zero.
 *
 * Not covered: the payload of modes 0 and 3 cannot reach the protocol (a record the fuzzer makes
 * has no valid MAC); modes 1-2 reach it through a real client, whose records the fuzzer does not
 * choose. The kernel TLS path (if any) is not used with a Unix socket.
 */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app/wiring.h"
#include "config/config.h"
#include "fuzz_common.h"
#include "net/conn_fake.h"
#include "net/tls.h"
#include "net/transport.h"
#include "proto/echo.h"
#include "util/clock.h"

#define TURNS_MAX 4000 /* loop turns per phase before the harness calls it a spin */
#define ECHO_MAX  (1u << 20)

static struct {
    conn_fake_loop fl; /* a real net_server with one loop; the listener slot has no socket */
    net_tls tls[2];    /* 0: like server.tls; 1: mTLS required */
    SSL_CTX *client;   /* the in-process client (with a client certificate) */
    SSL_CTX *client_nocert;
    char cert[300], key[300];
} G;

/* ---- start-up: a key, a self-signed certificate, the listener contexts ------------------------ */

static void make_credentials(void)
{
    EVP_PKEY *pkey = EVP_EC_gen("P-256");
    FUZZ_CHECK(pkey != NULL, "EC key generation failed");
    X509 *x = X509_new();
    FUZZ_CHECK(x != NULL, "X509_new failed");
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -86400);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400L * 365);
    X509_set_pubkey(x, pkey);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(x, n);
    /* Its own CA: the mTLS listener trusts it for client certificates, and the client sends it. */
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE");
    FUZZ_CHECK(ext && X509_add_ext(x, ext, -1), "basicConstraints");
    X509_EXTENSION_free(ext);
    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "DNS:localhost");
    FUZZ_CHECK(ext && X509_add_ext(x, ext, -1), "subjectAltName");
    X509_EXTENSION_free(ext);
    FUZZ_CHECK(X509_sign(x, pkey, EVP_sha256()) > 0, "X509_sign failed");

    fuzz_path(G.cert, sizeof G.cert, "tls.crt");
    fuzz_path(G.key, sizeof G.key, "tls.key");
    FILE *f = fopen(G.cert, "w");
    FUZZ_CHECK(f && PEM_write_X509(f, x) && fclose(f) == 0, "cannot write %s", G.cert);
    f = fopen(G.key, "w");
    FUZZ_CHECK(f && PEM_write_PrivateKey(f, pkey, NULL, NULL, 0, NULL, NULL) && fclose(f) == 0,
               "cannot write %s", G.key);

    /* The clients: certificate not verified (the server side is under test), TLS 1.2 and 1.3. */
    G.client = SSL_CTX_new(TLS_client_method());
    G.client_nocert = SSL_CTX_new(TLS_client_method());
    FUZZ_CHECK(G.client && G.client_nocert, "client contexts");
    FUZZ_CHECK(SSL_CTX_use_certificate(G.client, x) && SSL_CTX_use_PrivateKey(G.client, pkey),
               "client certificate");
    X509_free(x);
    EVP_PKEY_free(pkey);
}

static void make_listener(int i, const char *what, net_tls_verify verify, bool tickets, bool alpn)
{
    net_tls_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.cert_file, sizeof c.cert_file, "%s", G.cert);
    snprintf(c.key_file, sizeof c.key_file, "%s", G.key);
    if (verify != NET_TLS_VERIFY_NONE)
        snprintf(c.client_ca_file, sizeof c.client_ca_file, "%s", G.cert);
    c.verify = verify;
    c.session_tickets = tickets;
    c.alpn_http11 = alpn;
    char err[1024];
    if (net_tls_init(&G.tls[i], i ? "memcached" : "http", what, &c, err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "net_tls_init: %s", err);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_clean_environment();
    signal(SIGPIPE, SIG_IGN); /* as the daemon: a write to a closed socket is an error, not death */
    make_credentials();
    make_listener(0, "server.tls", NET_TLS_VERIFY_NONE, true, true);
    make_listener(1, "cache.memcached_tls", NET_TLS_VERIFY_REQUIRED, false, false);
    char err[1024];
    cfg config;
    if (cfg_load(&config, NULL, clk_now(clk_system()), err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "embedded config: %s", err);
    net_config nc;
    app_net_config(&config, &nc);
    if (conn_fake_loop_init(&G.fl, &nc, &echo_proto, NULL, err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "loop: %s", err);
    return 0;
}

/* ---- one conversation --------------------------------------------------------------------- */

typedef struct run {
    net_loop *loop;
    int peer; /* the client's end of the socketpair */
    SSL *cl;  /* the in-process client, or NULL (raw modes) */
    bool lazy; /* reads only at the end */
    uint8_t *echo;
    size_t echo_len;
    bool read_failed;
} run;

static void turn(run *r)
{
    uv_run(&r->loop->uv, UV_RUN_NOWAIT);
}

static conn *server_conn(run *r)
{
    return r->loop->conns;
}

/* Whatever the server sent, drained from the socket (raw modes) or decrypted (client modes).
 * Returns whether anything came. */
static bool client_read(run *r)
{
    char buf[16384];
    bool got = false;
    for (;;) {
        if (!r->cl) {
            ssize_t n = read(r->peer, buf, sizeof buf);
            if (n <= 0)
                return got;
            got = true;
            continue;
        }
        if (r->read_failed)
            return got;
        int n = SSL_read(r->cl, buf, sizeof buf);
        if (n > 0) {
            FUZZ_CHECK(r->echo_len + (size_t)n <= ECHO_MAX, "more echoed than sent");
            memcpy(r->echo + r->echo_len, buf, (size_t)n);
            r->echo_len += (size_t)n;
            got = true;
            continue;
        }
        int e = SSL_get_error(r->cl, n);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            r->read_failed = true; /* an alert, close_notify, EOF: nothing more to read */
        ERR_clear_error();
        return got;
    }
}

/* Turns until the server's connection is quiet: no byte for the client for a few turns in a
 * row, or closed. A live connection that keeps the loop busy past TURNS_MAX is a spin. */
static void settle(run *r, const char *phase)
{
    int quiet = 0;
    for (int i = 0; i < TURNS_MAX; i++) {
        turn(r);
        bool got = r->lazy ? false : client_read(r);
        if (!server_conn(r))
            return;
        quiet = got ? 0 : quiet + 1;
        if (quiet >= 4)
            return;
    }
    fuzz_fail(__FILE__, __LINE__, "%s: the connection still moves bytes after %d turns", phase,
              TURNS_MAX);
}

/* The client's handshake, interleaved with the server's loop. Returns whether it completed. */
static bool client_handshake(run *r)
{
    for (int i = 0; i < TURNS_MAX; i++) {
        int rc = SSL_do_handshake(r->cl);
        if (rc == 1) {
            ERR_clear_error();
            return true;
        }
        int e = SSL_get_error(r->cl, rc);
        ERR_clear_error();
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            return false; /* refused: no ALPN in common, no client certificate, ... */
        turn(r);
        if (!server_conn(r))
            return SSL_do_handshake(r->cl) == 1;
    }
    fuzz_fail(__FILE__, __LINE__, "handshake not done after %d turns", TURNS_MAX);
}

/* Writes data[0..len) to the client's end in the splitter's pieces: raw, or as SSL_write
 * records. A full socket gets loop turns (and, unless lazy, reads) until it takes more; a
 * connection that stopped reading for good ends the sending. Returns the bytes sent. */
static size_t client_send(run *r, const uint8_t *data, size_t len, uint8_t split_flags)
{
    fuzz_splitter sp;
    fuzz_splitter_init(&sp, split_flags, len);
    size_t off = 0, n = 0;
    int stalled = 0;
    while (off < len && server_conn(r)) {
        /* An SSL_write that would block must be retried with the same bytes (OpenSSL keeps the
         * record it made of them): the next piece is cut only once this one is out. */
        if (n == 0)
            n = fuzz_next_read(&sp, len - off);
        int w;
        if (r->cl) {
            w = SSL_write(r->cl, data + off, (int)n);
            if (w <= 0) {
                int e = SSL_get_error(r->cl, w);
                ERR_clear_error();
                if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ)
                    break; /* the server closed or alerted */
                w = 0;
            }
        } else {
            ssize_t k = send(r->peer, data + off, n, MSG_NOSIGNAL);
            if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                break;
            w = k < 0 ? 0 : (int)k;
        }
        off += (size_t)w;
        n -= (size_t)w;
        if (w == 0) {
            /* The socket is full: the server reads on its turn, unless it stopped reading
             * (backpressure while the client does not read): then the sending is over. */
            if (++stalled > 64)
                break;
        } else {
            stalled = 0;
        }
        turn(r);
        if (!r->lazy)
            client_read(r);
    }
    return off;
}

static void small_buffers(int fd)
{
    int sz = 4096;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
}

static void check_pools(net_loop *l)
{
    FUZZ_CHECK(l->conns == NULL, "a connection still open after the close");
    FUZZ_CHECK(counter_get(&l->listeners[0].conns.in_use) == 0, "a connection object leaked");
    FUZZ_CHECK(counter_get(&l->chunks.in_use) == 0, "%zu output chunks leaked",
               (size_t)counter_get(&l->chunks.in_use));
    FUZZ_CHECK(counter_get(&l->inbufs.in_use) == 0, "an input buffer leaked");
    FUZZ_CHECK(atomic_load(&G.fl.server.open_conns) == 0, "open connection count off");
    FUZZ_CHECK(l->pending_head == NULL, "a closed connection still queued to run");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size - 2 > ECHO_MAX)
        return 0;
    uint8_t flags = data[0], split = data[1];
    const uint8_t *payload = data + 2;
    size_t len = size - 2;
    unsigned mode = flags & 3;
    bool mtls = flags & 0x04, fin = flags & 0x20, lazy = flags & 0x40, extra = flags & 0x80;

    G.fl.server.specs[0].tls = &G.tls[mtls];
    memset(&conn_fake_net_loop(&G.fl)->listeners[0].stats, 0, sizeof(net_listener_stats));
    run r = {.loop = conn_fake_net_loop(&G.fl), .lazy = lazy};
    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0,
               "socketpair: %s", strerror(errno));
    r.peer = sv[1];
    if (lazy) {
        small_buffers(sv[0]);
        small_buffers(sv[1]);
    }
    if (mode != 0) {
        bool nocert = mode == 3 && extra;
        r.cl = SSL_new(nocert ? G.client_nocert : G.client);
        FUZZ_CHECK(r.cl && SSL_set_fd(r.cl, sv[1]), "client SSL");
        SSL_set_connect_state(r.cl);
        int v = mode == 2 ? TLS1_2_VERSION : TLS1_3_VERSION;
        SSL_set_min_proto_version(r.cl, v);
        SSL_set_max_proto_version(r.cl, v);
        static const unsigned char *const alpn[4] = {
            NULL, (const unsigned char *)"\x08http/1.1", (const unsigned char *)"\x02h2",
            (const unsigned char *)"\x02h2\x08http/1.1"};
        static const unsigned alpn_len[4] = {0, 9, 3, 12};
        unsigned a = (flags >> 3) & 3;
        if (alpn[a])
            SSL_set_alpn_protos(r.cl, alpn[a], alpn_len[a]);
        r.echo = malloc(len ? len : 1);
        FUZZ_CHECK(r.echo != NULL, "out of memory");
    }

    /* Accept: the real path (conn_open, the poll handle, SSL_new on the listener's current
     * context, the first SSL_do_handshake). The connection is the loop's only one. */
    FUZZ_CHECK(conn_accept_tls(r.loop, &r.loop->listeners[0], sv[0]) == 0, "accept failed");
    FUZZ_CHECK(server_conn(&r) != NULL, "no connection after the accept");

    bool intact = false; /* the client's application data went through an unbroken connection */
    size_t sent = 0;
    if (mode == 0) {
        sent = client_send(&r, payload, len, split);
    } else if (client_handshake(&r)) {
        if (extra && mode == 1)
            SSL_key_update(r.cl, SSL_KEY_UPDATE_REQUESTED);
        if (extra && mode == 2)
            SSL_renegotiate(r.cl);
        ERR_clear_error();
        if (mode == 3) {
            SSL *cl = r.cl; /* raw bytes after the handshake: the client stops speaking TLS */
            r.cl = NULL;
            sent = client_send(&r, payload, len, split);
            r.cl = cl;
        } else {
            sent = client_send(&r, payload, len, split);
            intact = server_conn(&r) != NULL && !(extra && mode == 2);
        }
    }
    settle(&r, "after the input");
    if (lazy) { /* the client reads at last: the blocked writes go out */
        r.lazy = false;
        settle(&r, "after the lazy client read");
    }
    if (mode != 0 && r.cl) {
        FUZZ_CHECK(r.echo_len <= sent, "echoed %zu bytes of %zu sent", r.echo_len, sent);
        FUZZ_CHECK(r.echo_len == 0 || memcmp(r.echo, payload, r.echo_len) == 0,
                   "the echo differs from what was sent (%zu bytes back)", r.echo_len);
        if (intact && server_conn(&r) && !r.read_failed)
            FUZZ_CHECK(r.echo_len == sent, "only %zu of %zu bytes echoed on a live connection",
                       r.echo_len, sent);
    }

    /* The end: the client's FIN (after its close_notify when it speaks TLS), or the timer. */
    conn *c = server_conn(&r);
    if (c && fin) {
        if (r.cl && mode != 3) {
            (void)SSL_shutdown(r.cl);
            ERR_clear_error();
        }
        shutdown(r.peer, SHUT_WR);
        settle(&r, "after the FIN");
    } else if (c) {
        conn_expire(c); /* the header timeout (handshake) or the idle timeout */
        settle(&r, "after the timeout");
    }
    /* Whatever is still open is closed, as at shutdown; the close completes on a later turn. */
    for (int i = 0; i < 64 && server_conn(&r); i++) {
        c = server_conn(&r);
        if (conn_phase_of(c) != CONN_CLOSING)
            conn_close(c);
        turn(&r);
    }
    check_pools(r.loop);
    if (fuzz_dump_enabled()) { /* triage: what happened, with the listener's counters */
        net_listener_stats *st = &r.loop->listeners[0].stats;
        fprintf(stderr, "fuzz_tls: mode %u %s, %zu bytes sent, %zu echoed; handshakes %llu", mode,
                mtls ? "mTLS" : "server.tls", sent, r.echo_len,
                (unsigned long long)(atomic_load(&st->tls_handshakes[0]) +
                                     atomic_load(&st->tls_handshakes[1])));
        for (int i = 0; i < NET_TLS_FAIL_COUNT; i++)
            if (atomic_load(&st->tls_failures[i]))
                fprintf(stderr, ", %s %llu", net_tls_fail_name(i),
                        (unsigned long long)atomic_load(&st->tls_failures[i]));
        fputc('\n', stderr);
    }

    if (r.cl)
        SSL_free(r.cl);
    ERR_clear_error();
    close(sv[1]);
    free(r.echo);
    return 0;
}
