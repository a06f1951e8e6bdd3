/* cluster/etcd_tls through cluster/etcd_client against an in-process TLS server on 127.0.0.1
 * (OpenSSL, a canned range answer, the connection closed after each answer so that every call
 * reconnects): the second connection resumes the first one's session, a reload makes the next
 * one a full handshake with the new context; a CA that did not sign the server's certificate
 * and a certificate for another address fail the call with ETCD_E_TLS, naming the cause and
 * the key; bad files are refused by etcd_tls_new and by a reload (the old context stays).
 * Certificates are made with the openssl command in a temporary directory. The real etcd is
 * test/cluster/test_etcd_tls.py. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_main.h"
#include "cluster/etcd_client.h"
#include "cluster/etcd_tls.h"

static char dir[64];

/* Runs a shell command in dir; exits the process when it fails (before the tests: no check
 * context yet). */
static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[2300];
    snprintf(full, sizeof full, "cd %s && (%s) >/dev/null 2>&1", dir, cmd);
    if (system(full) != 0) {
        fprintf(stderr, "failed: %s\n", cmd);
        exit(EXIT_FAILURE);
    }
}

static const char *path(const char *name)
{
    static char buf[8][256];
    static int i;
    char *b = buf[i++ % 8];
    snprintf(b, 256, "%s/%s", dir, name);
    return b;
}

/* ca, other_ca; server (IP:127.0.0.1), server_other (IP:10.9.9.9); client, client2 (of ca),
 * other_client (of other_ca). */
static void make_certs(void)
{
    snprintf(dir, sizeof dir, "/tmp/sf_etcd_tls_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(EXIT_FAILURE);
    }
    const char *key = "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out";
    for (int i = 0; i < 2; i++) {
        const char *n = i ? "other_ca" : "ca";
        sh("%s %s.key && openssl req -x509 -new -key %s.key -sha256 -days 2 -subj /CN=%s "
           "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign -out %s.pem",
           key, n, n, n, n);
    }
    const char *leaf[][3] = {{"server", "serverAuth", "IP:127.0.0.1"},
                             {"server_other", "serverAuth", "IP:10.9.9.9"},
                             {"client", "clientAuth", NULL},
                             {"client2", "clientAuth", NULL}};
    sh("printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' > other_client.ext && "
       "%s other_client.key && openssl req -new -key other_client.key -subj /CN=oc "
       "-out other_client.csr && openssl x509 -req -in other_client.csr -CA other_ca.pem "
       "-CAkey other_ca.key -set_serial 99 -days 2 -sha256 -extfile other_client.ext "
       "-out other_client.pem",
       key);
    for (size_t i = 0; i < 4; i++) {
        const char *n = leaf[i][0];
        sh("printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=%s\\n%s%s\\n' > %s.ext && "
           "%s %s.key && openssl req -new -key %s.key -subj /CN=%s -out %s.csr && "
           "openssl x509 -req -in %s.csr -CA ca.pem -CAkey ca.key -set_serial %zu -days 2 "
           "-sha256 -extfile %s.ext -out %s.pem",
           leaf[i][1], leaf[i][2] ? "subjectAltName=" : "", leaf[i][2] ? leaf[i][2] : "", n,
           key, n, n, n, n, n, 100 + i, n, n);
    }
}

/* ---- a TLS server answering every request with one range answer, then closing ---------------- */

typedef struct tls_fake {
    int lfd, port;
    SSL_CTX *ctx;
    atomic_bool stop;
    atomic_int handshakes, resumed;
    pthread_t th;
} tls_fake;

#define BODY "{\"header\":{\"cluster_id\":\"11\",\"member_id\":\"7\",\"revision\":\"9\"," \
             "\"raft_term\":\"2\"}}"
static char answer[512];

static void *fake_main(void *arg)
{
    tls_fake *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        struct timeval tv = {.tv_sec = 2};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        SSL *ssl = SSL_new(f->ctx);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) == 1) {
            atomic_fetch_add(&f->handshakes, 1);
            if (SSL_session_reused(ssl))
                atomic_fetch_add(&f->resumed, 1);
            char buf[4096] = "";
            size_t got = 0, n;
            while (!strstr(buf, "\r\n\r\n{") && got < sizeof buf - 1 &&
                   SSL_read_ex(ssl, buf + got, sizeof buf - 1 - got, &n) == 1) {
                got += n;
                buf[got] = '\0';
            }
            SSL_write_ex(ssl, answer, strlen(answer), &n);
            SSL_shutdown(ssl);
        }
        SSL_free(ssl);
        ERR_clear_error();
        close(fd);
    }
    return NULL;
}

static tls_fake *fake_start(const char *cert, bool require_client)
{
    snprintf(answer, sizeof answer,
             "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n%s",
             strlen(BODY), BODY);
    tls_fake *f = calloc(1, sizeof *f);
    f->ctx = SSL_CTX_new(TLS_server_method());
    ck_assert_int_eq(SSL_CTX_use_certificate_chain_file(f->ctx, path(cert)), 1);
    char key[64];
    snprintf(key, sizeof key, "%.*s.key", (int)(strlen(cert) - 4), cert);
    ck_assert_int_eq(SSL_CTX_use_PrivateKey_file(f->ctx, path(key), SSL_FILETYPE_PEM), 1);
    if (require_client) {
        SSL_CTX_load_verify_locations(f->ctx, path("ca.pem"), NULL);
        SSL_CTX_set_verify(f->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        SSL_CTX_set_session_id_context(f->ctx, (const unsigned char *)"t", 1);
    }
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(f->lfd, 8), 0);
    getsockname(f->lfd, (struct sockaddr *)&a, &al);
    f->port = ntohs(a.sin_port);
    pthread_create(&f->th, NULL, fake_main, f);
    return f;
}

static void fake_stop(tls_fake *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    close(f->lfd);
    SSL_CTX_free(f->ctx);
    free(f);
}

static etcd_tls *tls_new(const char *ca, const char *cert, const char *key, char *err)
{
    etcd_tls_config c = {.what = "snowflake.etcd.tls"};
    snprintf(c.ca_file, sizeof c.ca_file, "%s", path(ca));
    if (cert) {
        snprintf(c.cert_file, sizeof c.cert_file, "%s", path(cert));
        snprintf(c.key_file, sizeof c.key_file, "%s", path(key));
    }
    return etcd_tls_new(&c, err, 512);
}

static etcd_client *client_for(tls_fake *f, etcd_tls *t)
{
    char eps[64];
    snprintf(eps, sizeof eps, "https://127.0.0.1:%d", f->port);
    etcd_error err;
    etcd_client_opts o = {.endpoints = eps, .request_timeout_ms = 2000, .tls = t};
    etcd_client *c = etcd_client_new(&o, &err);
    ck_assert_msg(c != NULL, "%s", err.message);
    return c;
}

static int range(etcd_client *c, etcd_error *err)
{
    etcd_range_result r;
    int rc = etcd_range(c, "/k", NULL, &r, err);
    etcd_range_result_free(&r);
    return rc;
}

START_TEST(test_sessions_resumed_and_dropped_by_a_reload)
{
    char err[512];
    tls_fake *f = fake_start("server.pem", true);
    etcd_tls *t = tls_new("ca.pem", "client.pem", "client.key", err);
    ck_assert_msg(t != NULL, "%s", err);
    etcd_client *c = client_for(f, t);
    etcd_error e;
    for (int i = 0; i < 3; i++) /* each answer closes: three connections */
        ck_assert_msg(range(c, &e) == 0, "%s", e.message);
    ck_assert_int_eq(atomic_load(&f->handshakes), 3);
    ck_assert_int_eq(atomic_load(&f->resumed), 2);
    etcd_endpoint_stats st;
    etcd_client_endpoint_stats(c, 0, &st);
    ck_assert_uint_eq(st.tls_full, 1);
    ck_assert_uint_eq(st.tls_resumed, 2);
    /* a rotated client certificate: the next connection is a full handshake with it */
    sh("cp client2.pem client.pem && cp client2.key client.key");
    ck_assert(etcd_tls_files_changed(t));
    ck_assert_msg(etcd_tls_reload(t, err, sizeof err) == 0, "%s", err);
    ck_assert(!etcd_tls_files_changed(t));
    ck_assert_msg(range(c, &e) == 0, "%s", e.message);
    ck_assert_int_eq(atomic_load(&f->resumed), 2);
    ck_assert_msg(range(c, &e) == 0, "%s", e.message);
    ck_assert_int_eq(atomic_load(&f->resumed), 3);
    /* a bad pair is refused, the context in service stays */
    sh("cp ca.key client.key");
    ck_assert_int_eq(etcd_tls_reload(t, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "snowflake.etcd.tls.key_file"));
    ck_assert_uint_eq(etcd_tls_reload_failures(t), 1);
    ck_assert_msg(range(c, &e) == 0, "%s", e.message);
    etcd_client_free(c);
    etcd_tls_free(t);
    fake_stop(f);
}
END_TEST

START_TEST(test_wrong_ca_and_wrong_address_fail_closed)
{
    char err[512];
    tls_fake *f = fake_start("server.pem", false);
    etcd_tls *t = tls_new("other_ca.pem", NULL, NULL, err);
    ck_assert_msg(t != NULL, "%s", err);
    etcd_client *c = client_for(f, t);
    etcd_error e;
    ck_assert_int_eq(range(c, &e), -1);
    ck_assert_int_eq(e.kind, ETCD_E_TLS);
    ck_assert(etcd_client_tls_refused(c));
    ck_assert_msg(strstr(e.message, "certificate verify failed: unable to get local issuer "
                                    "certificate (snowflake.etcd.tls.ca_file ") != NULL,
                  "%s", e.message);
    ck_assert_int_eq(atomic_load(&f->handshakes), 0);
    etcd_client_free(c);
    etcd_tls_free(t);
    fake_stop(f);

    f = fake_start("server_other.pem", false); /* IP:10.9.9.9, we dial 127.0.0.1 */
    t = tls_new("ca.pem", NULL, NULL, err);
    c = client_for(f, t);
    ck_assert_int_eq(range(c, &e), -1);
    ck_assert_int_eq(e.kind, ETCD_E_TLS);
    ck_assert_msg(strstr(e.message, "IP address mismatch (etcd's certificate is not for "
                                    "127.0.0.1)") != NULL,
                  "%s", e.message);
    etcd_client_free(c);
    etcd_tls_free(t);
    fake_stop(f);
}
END_TEST

/* The server refuses our certificate after the TLS 1.3 handshake completed on our side: the
 * alert comes with (or instead of) the answer, and the call still says why. */
START_TEST(test_client_certificate_refused_by_the_server)
{
    char err[512];
    tls_fake *f = fake_start("server.pem", true);
    const char *cases[][3] = {{NULL, NULL, "no client certificate: etcd may require one"},
                              {"other_client.pem", "other_client.key",
                               "etcd refused our client certificate"}};
    for (size_t i = 0; i < 2; i++) {
        etcd_tls *t = tls_new("ca.pem", cases[i][0], cases[i][1], err);
        ck_assert_msg(t != NULL, "%s", err);
        etcd_client *c = client_for(f, t);
        for (int round = 0; round < 20; round++) { /* the alert against the request: a race */
            etcd_error e;
            ck_assert_int_eq(range(c, &e), -1);
            ck_assert_msg(e.kind == ETCD_E_TLS && strstr(e.message, cases[i][2]),
                          "round %d: kind %d: %s", round, e.kind, e.message);
            ck_assert(etcd_client_tls_refused(c));
        }
        etcd_client_free(c);
        etcd_tls_free(t);
    }
    ck_assert_int_eq(atomic_load(&f->handshakes), 0);
    fake_stop(f);
}
END_TEST

START_TEST(test_bad_files_refused)
{
    char err[512];
    ck_assert_ptr_null(tls_new("missing.pem", NULL, NULL, err));
    ck_assert_msg(strstr(err, "snowflake.etcd.tls.ca_file") && strstr(err, "No such file"), "%s",
                  err);
    ck_assert_ptr_null(tls_new("ca.pem", "client2.pem", "ca.key", err));
    ck_assert_msg(strstr(err, "does not belong to the certificate"), "%s", err);
    etcd_tls_config c = {.what = "snowflake.etcd.tls"};
    ck_assert_ptr_null(etcd_tls_new(&c, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "ca_file: required"));
    etcd_error e;
    etcd_client_opts o = {.endpoints = "https://127.0.0.1:1"};
    ck_assert_ptr_null(etcd_client_new(&o, &e));
    ck_assert_ptr_nonnull(strstr(e.message, "https:// needs the TLS settings"));
}
END_TEST

int main(void)
{
    make_certs();
    Suite *s = suite_create("etcd_tls");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sessions_resumed_and_dropped_by_a_reload);
    tcase_add_test(tc, test_wrong_ca_and_wrong_address_fail_closed);
    tcase_add_test(tc, test_client_certificate_refused_by_the_server);
    tcase_add_test(tc, test_bad_files_refused);
    suite_add_tcase(s, tc);
    int rc = sf_run_suite(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = EXIT_FAILURE;
    return rc;
}
