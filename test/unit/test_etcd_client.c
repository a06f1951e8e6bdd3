/* cluster/etcd_client against in-process fake servers on 127.0.0.1 with canned answers (the
 * shapes etcd 3.4's gateway sends, design-14 §1, and garbage it never sends): chunked keepalive
 * (renewed and lost), both error shapes and which of them rotate, garbage JSON, int64 not as a
 * string, a different cluster_id, an oversize body, a stalled server (timeout, the next call goes
 * to the next endpoint), a refused endpoint (skipped within the call), a txn with omitted
 * defaults, and the JSON the builder sends; RBAC (scripted answers): authenticate, the token in
 * the header, one re-authentication and repeat on a token refusal only, no repeat on a permission
 * refusal, refused credentials never send the request, the password file read again each time,
 * an etcd without auth. The real etcd is test/cluster/test_etcd_client.py and test_etcd_auth.py. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_main.h"
#include "cluster/etcd_auth.h"
#include "cluster/etcd_client.h"
#include "util/netio.h"

#define HDR(cid) "\"header\":{\"cluster_id\":\"" cid "\",\"member_id\":\"7\",\"revision\":\"9\",\"raft_term\":\"2\"}"

typedef struct fake {
    int lfd, port;
    _Atomic(const char *) answer; /* NULL: read requests, never answer (a stalled member) */
    atomic_bool stop;
    atomic_int requests;
    char last_body[4096];
    _Atomic(const char *) script[8]; /* when set: the answer to request i (the last repeats) */
    atomic_int script_n;
    char req[8][2048]; /* the first 8 requests, head and body */
    pthread_t th;
} fake;

/* Reads one request (headers + Content-Length body) from fd; false on close/stop. */
static bool read_request(fake *f, int fd)
{
    char buf[8192];
    size_t len = 0;
    while (!atomic_load(&f->stop) && len < sizeof buf - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t r = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (r <= 0)
            return false;
        len += (size_t)r;
        buf[len] = '\0';
        char *end = strstr(buf, "\r\n\r\n"), *cl = strstr(buf, "Content-Length: ");
        if (end && cl) {
            size_t want = (size_t)atoi(cl + 16), have = len - (size_t)(end + 4 - buf);
            if (have >= want) {
                snprintf(f->last_body, sizeof f->last_body, "%.*s", (int)want, end + 4);
                int n = atomic_load(&f->requests);
                if (n < 8)
                    snprintf(f->req[n], sizeof f->req[n], "%.*s", (int)sizeof f->req[n] - 1, buf);
                return true;
            }
        }
    }
    return false;
}

static void *fake_main(void *arg)
{
    fake *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        while (read_request(f, fd)) {
            int n = atomic_fetch_add(&f->requests, 1);
            const char *a = atomic_load(&f->answer);
            int sn = atomic_load(&f->script_n);
            if (sn)
                a = atomic_load(&f->script[n < sn ? n : sn - 1]);
            if (!a) { /* stall until the test ends */
                while (!atomic_load(&f->stop))
                    usleep(20000);
                break;
            }
            bool then_close = a[0] == '!'; /* "!...": answer, then close the connection */
            a += then_close;
            if (send(fd, a, strlen(a), MSG_NOSIGNAL) < 0 || then_close)
                break;
        }
        close(fd);
    }
    return NULL;
}

static fake *fake_start(const char *answer)
{
    fake *f = calloc(1, sizeof *f);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(f->lfd, 8), 0);
    getsockname(f->lfd, (struct sockaddr *)&a, &al);
    f->port = ntohs(a.sin_port);
    atomic_store(&f->answer, answer);
    pthread_create(&f->th, NULL, fake_main, f);
    return f;
}

static void fake_stop(fake *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    close(f->lfd);
    free(f);
}

/* A port nothing listens on. */
static int refused_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);
    return ntohs(a.sin_port);
}

static etcd_client *client(unsigned timeout_ms, size_t body_max, int p1, int p2)
{
    char eps[128];
    if (p2)
        snprintf(eps, sizeof eps, "http://127.0.0.1:%d, http://127.0.0.1:%d/", p1, p2);
    else
        snprintf(eps, sizeof eps, "http://127.0.0.1:%d", p1);
    etcd_error err;
    etcd_client_opts o = {.endpoints = eps, .request_timeout_ms = timeout_ms, .body_max = body_max};
    etcd_client *c = etcd_client_new(&o, &err);
    ck_assert_msg(c != NULL, "%s", err.message);
    return c;
}

/* Canned answers live in a ring of static buffers (the fakes read them while the test runs). */
static char *http_answer(const char *status, const char *body)
{
    static char buf[16][8192];
    static int i;
    char *b = buf[i++ % 16];
    snprintf(b, 8192, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             status, strlen(body), body);
    return b;
}

static char *http200(const char *body)
{
    return http_answer("200 OK", body);
}

/* The body in two chunks split inside a token, as a streaming gateway answer. */
static char *http200_chunked(const char *body)
{
    static char buf[4][8192];
    static int i;
    char *b = buf[i++ % 4];
    size_t n = strlen(body), first = n / 3;
    snprintf(b, 8192,
             "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
             "%zx\r\n%.*s\r\n%zx\r\n%s\r\n0\r\n\r\n",
             first, (int)first, body, n - first, body + first);
    return b;
}

START_TEST(test_keepalive_chunked)
{
    fake *f = fake_start(
        http200_chunked("{\"result\":{" HDR("11") ",\"ID\":\"4242\",\"TTL\":\"10\"}}\n"));
    etcd_client *c = client(2000, 0, f->port, 0);
    etcd_error err;
    int64_t ttl = -1;
    for (int i = 0; i < 3; i++) { /* one connection, reused */
        ck_assert_msg(etcd_lease_keepalive(c, 4242, 10, &ttl, &err) == 0, "%s", err.message);
        ck_assert_int_eq(ttl, 10);
    }
    ck_assert_str_eq(f->last_body, "{\"ID\":\"4242\"}");
    ck_assert_uint_eq(etcd_client_cluster_id(c), 11);
    /* lease lost: 200, a result without TTL */
    atomic_store(&f->answer, http200("{\"result\":{" HDR("11") ",\"ID\":\"4242\"}}"));
    ck_assert_int_eq(etcd_lease_keepalive(c, 4242, 10, &ttl, &err), 0);
    ck_assert_int_eq(ttl, 0);
    /* the answer is for another lease: garbage */
    ck_assert_int_eq(etcd_lease_keepalive(c, 4343, 10, &ttl, &err), -1);
    ck_assert_int_eq(err.kind, ETCD_E_GARBAGE);
    etcd_client_free(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_error_shapes)
{
    fake *a = fake_start(http_answer("412 Precondition Failed",
                                     "{\"error\":\"etcdserver: lease already exists\",\"code\":9,"
                                     "\"message\":\"lease exists\"}"));
    fake *b = fake_start(http200("{" HDR("11") ",\"ID\":\"4242\",\"TTL\":\"5\"}"));
    etcd_client *c = client(2000, 0, a->port, b->port);
    etcd_error err;
    int64_t ttl = 0;
    ck_assert_int_eq(etcd_lease_grant(c, 5, 4242, &ttl, &err), -1);
    ck_assert_int_eq(err.kind, ETCD_E_SERVER);
    ck_assert_int_eq(err.http_status, 412);
    ck_assert_int_eq(err.grpc_code, ETCD_GRPC_FAILED_PRECONDITION);
    ck_assert_ptr_nonnull(strstr(err.message, "lease exists"));
    /* a 4xx is a definite answer from a healthy member: no rotation */
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", a->port);
    ck_assert_str_eq(etcd_client_endpoint(c), ep);
    /* the streaming shape with 503: same error, and the next call goes to the next endpoint */
    atomic_store(&a->answer,
                 http_answer("503 Service Unavailable",
                             "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":"
                             "\"etcdserver: no leader\",\"http_status\":\"Service Unavailable\"}}"));
    int64_t left = 0;
    ck_assert_int_eq(etcd_lease_keepalive(c, 4242, 5, &left, &err), -1);
    ck_assert_int_eq(err.kind, ETCD_E_SERVER);
    ck_assert_int_eq(err.http_status, 503);
    ck_assert_int_eq(err.grpc_code, ETCD_GRPC_UNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.message, "no leader"));
    ck_assert_int_eq(etcd_lease_grant(c, 5, 4242, &ttl, &err), 0);
    ck_assert_int_eq(ttl, 5);
    ck_assert_str_eq(b->last_body, "{\"TTL\":\"5\",\"ID\":\"4242\"}");
    /* revoke of a lease already gone (404 code 5) is success */
    atomic_store(&b->answer, http_answer("404 Not Found",
                                         "{\"error\":\"etcdserver: requested lease not found\","
                                         "\"code\":5}"));
    bool gone = false;
    ck_assert_int_eq(etcd_lease_revoke(c, 4242, &gone, &err), 0);
    ck_assert(gone);
    etcd_client_free(c);
    fake_stop(a);
    fake_stop(b);
}
END_TEST

/* TTLs in answers never exceed what was asked: the identity computes its fence as sent + TTL -
 * margin, so a hostile or broken etcd answering 9223372036854775807 must not move (or overflow)
 * it; a TTL above etcd's own maximum, or negative, is garbage. */
START_TEST(test_hostile_ttls)
{
    fake *f = fake_start(http200("{" HDR("11") ",\"ID\":\"4242\",\"TTL\":\"9223372036854775807\"}"));
    etcd_client *c = client(2000, 0, f->port, 0);
    etcd_error err;
    int64_t ttl = 0;
    ck_assert_int_eq(etcd_lease_grant(c, 10, 4242, &ttl, &err), -1);
    ck_assert_msg(err.kind == ETCD_E_GARBAGE, "kind %d: %s", err.kind, err.message);
    const char *grants[][2] = {
        {"3600", "10"}, /* more than asked: what was asked */
        {"9000000000", "10"},
        {"2", "2"}, /* less (never, but honest): as answered */
    };
    for (size_t i = 0; i < sizeof grants / sizeof grants[0]; i++) {
        static char body[256];
        snprintf(body, sizeof body, "{" HDR("11") ",\"ID\":\"4242\",\"TTL\":\"%s\"}",
                 grants[i][0]);
        atomic_store(&f->answer, http200(body));
        ttl = 0;
        ck_assert_msg(etcd_lease_grant(c, 10, 4242, &ttl, &err) == 0, "%s", err.message);
        ck_assert_int_eq(ttl, atoll(grants[i][1]));
    }
    const char *bad_grants[] = {"-5", "0", "9000000001", "-9223372036854775808"};
    for (size_t i = 0; i < sizeof bad_grants / sizeof bad_grants[0]; i++) {
        static char body[256];
        snprintf(body, sizeof body, "{" HDR("11") ",\"ID\":\"4242\",\"TTL\":\"%s\"}",
                 bad_grants[i]);
        atomic_store(&f->answer, http200(body));
        ck_assert_int_eq(etcd_lease_grant(c, 10, 4242, &ttl, &err), -1);
        ck_assert_msg(err.kind == ETCD_E_GARBAGE, "TTL %s: kind %d", bad_grants[i], err.kind);
    }
    const char *kept[][2] = {{"9223372036854775807", NULL}, {"-1", NULL}, {"-9223372036854775808", NULL},
                             {"9000000000", "10"}, {"11", "10"}, {"10", "10"}, {"4", "4"}};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        static char body[256];
        snprintf(body, sizeof body, "{\"result\":{" HDR("11") ",\"ID\":\"4242\",\"TTL\":\"%s\"}}",
                 kept[i][0]);
        atomic_store(&f->answer, http200_chunked(body));
        ttl = -7;
        int rc = etcd_lease_keepalive(c, 4242, 10, &ttl, &err);
        if (kept[i][1]) {
            ck_assert_msg(rc == 0, "TTL %s: %s", kept[i][0], err.message);
            ck_assert_int_eq(ttl, atoll(kept[i][1]));
        } else {
            ck_assert_msg(rc == -1 && err.kind == ETCD_E_GARBAGE, "TTL %s: rc %d kind %d",
                          kept[i][0], rc, err.kind);
            ck_assert_int_eq(ttl, -7); /* untouched */
        }
    }
    /* what the caller asks is checked too */
    ck_assert_int_eq(etcd_lease_keepalive(c, 4242, 0, &ttl, &err), -1);
    ck_assert_int_eq(err.kind, ETCD_E_USAGE);
    ck_assert_int_eq(etcd_lease_grant(c, INT64_MAX, 4242, &ttl, &err), -1);
    ck_assert_int_eq(err.kind, ETCD_E_USAGE);
    etcd_client_free(c);
    fake_stop(f);
}
END_TEST

static void expect_garbage(const char *answer, const char *says)
{
    fake *f = fake_start(answer);
    etcd_client *c = client(2000, 1024, f->port, 0);
    etcd_error err;
    etcd_range_result r;
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), -1);
    ck_assert_msg(err.kind == ETCD_E_GARBAGE, "kind %d: %s", err.kind, err.message);
    ck_assert_msg(strstr(err.message, says), "'%s' does not say '%s'", err.message, says);
    etcd_range_result_free(&r);
    etcd_client_free(c);
    fake_stop(f);
}

START_TEST(test_garbage)
{
    expect_garbage(http200("{\"header\":"), "not a JSON object");
    expect_garbage(http200("[1,2]"), "not a JSON object");
    expect_garbage("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "not a JSON object");
    /* a plain-text refusal is quoted (its first line, printable characters only) */
    expect_garbage(http_answer("400 Bad Request", "CommonName of client \"x\"\x01\nsecond"),
                   "not a JSON object: \"CommonName of client ?x??\"");
    expect_garbage("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n{}", "bad HTTP");
    expect_garbage("SSH-2.0-OpenSSH_9.2\r\n", "bad HTTP");
    expect_garbage(http200("{\"kvs\":[]}"), "header");
    expect_garbage(http200("{\"header\":{\"cluster_id\":11}}"), "header"); /* int64 not a string */
    expect_garbage(http200("{" HDR("11") ",\"count\":1}"), "malformed");
    expect_garbage(http200("{" HDR("11") ",\"kvs\":[{\"key\":\"!!\"}],\"count\":\"1\"}"), "malformed");
    expect_garbage(http200("{" HDR("11") ",\"count\":\"99999999999999999999\"}"), "malformed");
    expect_garbage(http200("{" HDR("11") ",\"count\":\"+1\"}"), "malformed");
    expect_garbage(http_answer("500 Internal", "{}"), "without an error body");
    expect_garbage(http_answer("503 Unavailable", "{\"error\":\"x\"}"), "without a gRPC code");
    expect_garbage("!HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", "closed inside");
    static char big[6000];
    char body[4100];
    memset(body, ' ', sizeof body - 1);
    body[0] = '{';
    body[sizeof body - 2] = '}';
    body[sizeof body - 1] = '\0';
    snprintf(big, sizeof big, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
    expect_garbage(big, "larger than 1024");
}
END_TEST

START_TEST(test_cluster_id_pinned)
{
    fake *f = fake_start(http200("{" HDR("11") ",\"count\":\"0\"}"));
    etcd_client *c = client(2000, 0, f->port, 0);
    etcd_error err;
    etcd_range_result r;
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), 0);
    ck_assert_int_eq(r.n_kvs, 0);
    ck_assert_int_eq(r.header.revision, 9);
    atomic_store(&f->answer, http200("{" HDR("12") ",\"count\":\"0\"}"));
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), -1);
    ck_assert_int_eq(err.kind, ETCD_E_GARBAGE);
    ck_assert_ptr_nonnull(strstr(err.message, "different etcd"));
    ck_assert_uint_eq(etcd_client_cluster_id(c), 11);
    etcd_client_free(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_stall_then_next)
{
    fake *stall = fake_start(NULL);
    fake *good = fake_start(http200("{" HDR("11") "}"));
    etcd_client *c = client(300, 0, stall->port, good->port);
    etcd_error err;
    uint64_t t0 = netio_mono_ms();
    ck_assert_int_eq(etcd_lease_revoke(c, 1, NULL, &err), -1);
    uint64_t took = netio_mono_ms() - t0;
    ck_assert_int_eq(err.kind, ETCD_E_UNAVAILABLE);
    ck_assert_msg(took >= 250 && took < 5000, "timed out after %llu ms", (unsigned long long)took);
    ck_assert_int_eq(atomic_load(&stall->requests), 1); /* sent once, never repeated */
    ck_assert_int_eq(etcd_lease_revoke(c, 1, NULL, &err), 0);
    ck_assert_int_eq(atomic_load(&good->requests), 1);
    etcd_client_free(c);
    fake_stop(stall);
    fake_stop(good);
}
END_TEST

START_TEST(test_refused_rotates_within_call)
{
    fake *good = fake_start(http200("{" HDR("11") "}"));
    etcd_client *c = client(2000, 0, refused_port(), good->port);
    etcd_error err;
    ck_assert_msg(etcd_lease_revoke(c, 1, NULL, &err) == 0, "%s", err.message);
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", good->port);
    ck_assert_str_eq(etcd_client_endpoint(c), ep);
    etcd_client_free(c);
    /* every endpoint refused: an error, promptly */
    c = client(2000, 0, refused_port(), refused_port());
    ck_assert_int_eq(etcd_lease_revoke(c, 1, NULL, &err), -1);
    ck_assert_int_eq(err.kind, ETCD_E_UNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.message, "connect"));
    etcd_client_free(c);
    fake_stop(good);
}
END_TEST

START_TEST(test_txn)
{
    fake *f = fake_start(http200(
        "{" HDR("11") ",\"responses\":[{\"response_range\":{" HDR("11") ",\"kvs\":[{\"key\":"
        "\"L3Mvby8w\",\"create_revision\":\"5\",\"mod_revision\":\"6\",\"version\":\"2\","
        "\"lease\":\"77\"}],\"count\":\"1\"}},{\"response_put\":{" HDR("11") "}}]}"));
    etcd_client *c = client(2000, 0, f->port, 0);
    etcd_txn *t = etcd_txn_new();
    etcd_txn_compare_int(t, "/s/o/0", ETCD_CMP_CREATE, ETCD_CMP_EQUAL, 0);
    etcd_txn_compare_int(t, "/s/o/0", ETCD_CMP_LEASE, ETCD_CMP_EQUAL, 4242);
    etcd_txn_compare_value(t, "/s/o/0", ETCD_CMP_NOT_EQUAL, "a", 1);
    etcd_txn_put(t, ETCD_SUCCESS, "/s/o/0", "h", 1, 4242);
    etcd_txn_put(t, ETCD_SUCCESS, "/s/e/0", "", 0, ETCD_IGNORE_LEASE);
    etcd_txn_range(t, ETCD_FAILURE, "/s/o/", "/s/o0");
    etcd_txn_delete(t, ETCD_FAILURE, "/s/x", NULL);
    etcd_txn_result r;
    etcd_error err;
    ck_assert_msg(etcd_txn_commit(c, t, &r, &err) == 0, "%s", err.message);
    ck_assert(!r.succeeded); /* omitted = false */
    ck_assert_int_eq(r.n_responses, 2);
    ck_assert_int_eq(r.responses[0].kind, ETCD_RESP_RANGE);
    ck_assert_int_eq(r.responses[0].range.n_kvs, 1);
    etcd_kv *kv = &r.responses[0].range.kvs[0];
    ck_assert_str_eq(kv->key, "/s/o/0");
    ck_assert_int_eq(kv->value_len, 0); /* omitted = empty */
    ck_assert_int_eq(kv->lease, 77);
    ck_assert_int_eq(kv->create_revision, 5);
    ck_assert_int_eq(r.responses[1].kind, ETCD_RESP_PUT);
    etcd_txn_result_free(&r);
    ck_assert_str_eq(
        f->last_body,
        "{\"compare\":[{\"key\":\"L3Mvby8w\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
        "\"create_revision\":\"0\"},{\"key\":\"L3Mvby8w\",\"target\":\"LEASE\",\"result\":\"EQUAL\","
        "\"lease\":\"4242\"},{\"key\":\"L3Mvby8w\",\"target\":\"VALUE\",\"result\":\"NOT_EQUAL\","
        "\"value\":\"YQ==\"}],\"success\":[{\"request_put\":{\"key\":\"L3Mvby8w\",\"value\":\"aA==\","
        "\"lease\":\"4242\"}},{\"request_put\":{\"key\":\"L3MvZS8w\",\"value\":\"\","
        "\"ignore_lease\":true}}],\"failure\":[{\"request_range\":{\"key\":\"L3Mvby8=\","
        "\"range_end\":\"L3MvbzA=\"}},{\"request_delete_range\":{\"key\":\"L3MveA==\"}}]}");
    etcd_txn_free(t);
    /* builder errors are reported without sending */
    t = etcd_txn_new();
    for (int i = 0; i < 70; i++)
        etcd_txn_range(t, ETCD_SUCCESS, "/k", NULL);
    int before = atomic_load(&f->requests);
    ck_assert_int_eq(etcd_txn_commit(c, t, &r, &err), -1);
    ck_assert_int_eq(err.kind, ETCD_E_USAGE);
    ck_assert_int_eq(atomic_load(&f->requests), before);
    etcd_txn_free(t);
    etcd_client_free(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_options_and_prefix)
{
    etcd_error err;
    etcd_client_opts o = {.endpoints = "https://127.0.0.1:2379"};
    ck_assert_ptr_null(etcd_client_new(&o, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "https:// needs the TLS settings"));
    o.endpoints = "127.0.0.1:2379";
    ck_assert_ptr_null(etcd_client_new(&o, &err));
    o.endpoints = "";
    ck_assert_ptr_null(etcd_client_new(&o, &err));
    char end[16];
    ck_assert_int_eq(etcd_prefix_end("/s/o/", end, sizeof end), 0);
    ck_assert_str_eq(end, "/s/o0");
    ck_assert_int_eq(etcd_prefix_end("a\xff", end, sizeof end), 0);
    ck_assert_str_eq(end, "b");
    ck_assert_int_eq(etcd_prefix_end("\xff", end, sizeof end), -1);
}
END_TEST

/* ---- RBAC ---- */

#define AUTH_OK(tok) http200("{" HDR("11") ",\"token\":\"" tok "\"}")
#define RANGE_OK     http200("{" HDR("11") ",\"count\":\"0\"}")
#define TOKEN_BAD                                                                                  \
    http_answer("401 Unauthorized", "{\"error\":\"etcdserver: invalid auth token\",\"code\":16,"      \
                                    "\"message\":\"etcdserver: invalid auth token\"}")

static char pw_path[64];

static void write_pw(const char *pw)
{
    FILE *f = fopen(pw_path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n", pw);
    fclose(f);
}

static etcd_client *auth_client(fake *f)
{
    char eps[64];
    snprintf(eps, sizeof eps, "http://127.0.0.1:%d", f->port);
    snprintf(pw_path, sizeof pw_path, "/tmp/test_etcd_auth.%d", (int)getpid());
    write_pw("s3cret-pw");
    etcd_error err;
    etcd_client_opts o = {.endpoints = eps, .request_timeout_ms = 2000, .auth_user = "sf",
                          .auth_password_file = pw_path};
    etcd_client *c = etcd_client_new(&o, &err);
    ck_assert_msg(c != NULL, "%s", err.message);
    return c;
}

static fake *scripted(int n, const char *const *answers)
{
    fake *f = fake_start(answers[0]);
    for (int i = 0; i < n; i++)
        atomic_store(&f->script[i], answers[i]);
    atomic_store(&f->script_n, n);
    return f;
}

START_TEST(test_auth_token_refused_repeats_once)
{
    const char *const s[] = {AUTH_OK("tokA.1"), TOKEN_BAD, AUTH_OK("tokB.2"), RANGE_OK};
    fake *f = scripted(4, s);
    etcd_client *c = auth_client(f);
    etcd_range_result r;
    etcd_error err;
    write_pw("s3cret-pw");
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), 0);
    etcd_range_result_free(&r);
    ck_assert_int_eq(atomic_load(&f->requests), 4);
    ck_assert_ptr_nonnull(strstr(f->req[0], "POST /v3/auth/authenticate "));
    ck_assert_ptr_nonnull(strstr(f->req[0], "{\"name\":\"sf\",\"password\":\"s3cret-pw\"}"));
    ck_assert_ptr_null(strstr(f->req[0], "Authorization"));
    ck_assert_ptr_nonnull(strstr(f->req[1], "POST /v3/kv/range "));
    ck_assert_ptr_nonnull(strstr(f->req[1], "\r\nAuthorization: tokA.1\r\n"));
    ck_assert_ptr_nonnull(strstr(f->req[2], "POST /v3/auth/authenticate "));
    ck_assert_ptr_nonnull(strstr(f->req[3], "\r\nAuthorization: tokB.2\r\n"));
    const etcd_auth *a = etcd_client_auth(c);
    ck_assert_uint_eq(etcd_auth_counter(a, ETCD_AUTH_EV_OK), 2);
    ck_assert_uint_eq(etcd_auth_counter(a, ETCD_AUTH_EV_TOKEN_REFUSED), 1);
    /* refused again with the fresh token: not repeated a second time */
    const char *const s2[] = {TOKEN_BAD, AUTH_OK("tokC.3"), TOKEN_BAD};
    for (int i = 0; i < 3; i++)
        atomic_store(&f->script[i], s2[i]);
    atomic_store(&f->script_n, 3);
    atomic_store(&f->requests, 0);
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), -1);
    ck_assert(err.auth);
    ck_assert_int_eq(atomic_load(&f->requests), 3);
    etcd_client_free(c);
    fake_stop(f);
    unlink(pw_path);
}
END_TEST

START_TEST(test_auth_denied_not_repeated)
{
    const char *const s[] = {
        AUTH_OK("tokA"), http_answer("403 Forbidden", "{\"error\":\"etcdserver: permission "
                                                      "denied\",\"code\":7,\"message\":"
                                                      "\"etcdserver: permission denied\"}")};
    fake *f = scripted(2, s);
    etcd_client *c = auth_client(f);
    etcd_range_result r;
    etcd_error err;
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), -1);
    ck_assert(err.auth);
    ck_assert_int_eq(err.grpc_code, ETCD_GRPC_PERMISSION_DENIED);
    ck_assert_int_eq(atomic_load(&f->requests), 2);
    ck_assert_uint_eq(etcd_auth_counter(etcd_client_auth(c), ETCD_AUTH_EV_DENIED), 1);
    etcd_client_free(c);
    fake_stop(f);
    unlink(pw_path);
}
END_TEST

START_TEST(test_auth_credentials_and_file)
{
    const char *const s[] = {http_answer("400 Bad Request",
                                         "{\"error\":\"etcdserver: authentication failed, invalid "
                                         "user ID or password\",\"code\":3}"),
                             AUTH_OK("tokA"), RANGE_OK};
    fake *f = scripted(3, s);
    etcd_client *c = auth_client(f);
    etcd_range_result r;
    etcd_error err;
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), -1);
    ck_assert(err.auth);
    ck_assert_int_eq(atomic_load(&f->requests), 1); /* the range itself never went out */
    ck_assert_ptr_nonnull(strstr(err.message, "etcd user sf"));
    ck_assert_ptr_null(strstr(err.message, "s3cret"));
    ck_assert_uint_eq(etcd_auth_counter(etcd_client_auth(c), ETCD_AUTH_EV_REFUSED), 1);
    /* the file read again: an empty first line, a missing file, then the new password */
    write_pw("");
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), -1);
    ck_assert(err.auth);
    ck_assert_ptr_nonnull(strstr(err.message, "first line is empty"));
    unlink(pw_path);
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), -1);
    ck_assert(err.auth);
    ck_assert_ptr_nonnull(strstr(err.message, pw_path));
    ck_assert_int_eq(atomic_load(&f->requests), 1);
    write_pw("n3w-pw");
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), 0);
    etcd_range_result_free(&r);
    ck_assert_ptr_nonnull(strstr(f->req[1], "\"password\":\"n3w-pw\""));
    etcd_client_free(c);
    fake_stop(f);
    unlink(pw_path);
}
END_TEST

START_TEST(test_auth_not_enabled)
{
    const char *const s[] = {http_answer("412 Precondition Failed",
                                         "{\"error\":\"etcdserver: authentication is not "
                                         "enabled\",\"code\":9}"),
                             RANGE_OK};
    fake *f = scripted(2, s);
    etcd_client *c = auth_client(f);
    etcd_range_result r;
    etcd_error err;
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), 0);
    etcd_range_result_free(&r);
    ck_assert_ptr_null(strstr(f->req[1], "Authorization"));
    ck_assert(etcd_auth_disabled(etcd_client_auth(c)));
    ck_assert_int_eq(etcd_range(c, "/k", NULL, &r, &err), 0); /* no authentication each time */
    etcd_range_result_free(&r);
    ck_assert_int_eq(atomic_load(&f->requests), 3);
    etcd_client_free(c);
    fake_stop(f);
    unlink(pw_path);
}
END_TEST

START_TEST(test_auth_classify_and_options)
{
    ck_assert_int_eq(etcd_auth_classify(16, "etcdserver: invalid auth token"), ETCD_AUTH_TOKEN);
    ck_assert_int_eq(etcd_auth_classify(3, "HTTP 400 code 3: etcdserver: revision of auth store is "
                                           "old"),
                     ETCD_AUTH_TOKEN);
    ck_assert_int_eq(etcd_auth_classify(3, "etcdserver: user name is empty"), ETCD_AUTH_TOKEN);
    ck_assert_int_eq(etcd_auth_classify(3, "etcdserver: authentication failed, invalid user ID or "
                                           "password"),
                     ETCD_AUTH_CREDENTIALS);
    ck_assert_int_eq(etcd_auth_classify(7, "etcdserver: permission denied"), ETCD_AUTH_DENIED);
    ck_assert_int_eq(etcd_auth_classify(9, "etcdserver: authentication is not enabled"),
                     ETCD_AUTH_NOT_ENABLED);
    ck_assert_int_eq(etcd_auth_classify(3, "etcdserver: key is not provided"),
                     ETCD_AUTH_NOT_REFUSED);
    ck_assert_int_eq(etcd_auth_classify(9, "etcdserver: lease already exists"),
                     ETCD_AUTH_NOT_REFUSED);
    etcd_error err;
    etcd_client_opts o = {.endpoints = "http://127.0.0.1:2379", .auth_user = "sf"};
    ck_assert_ptr_null(etcd_client_new(&o, &err)); /* a user without a password */
    o.auth_password = "x";
    o.auth_password_file = "/f";
    ck_assert_ptr_null(etcd_client_new(&o, &err)); /* both */
    o.auth_password_file = NULL;
    etcd_client *c = etcd_client_new(&o, &err);
    ck_assert_ptr_nonnull(c);
    etcd_auth *a = etcd_client_auth(c);
    ck_assert(!etcd_auth_set_token(a, "has space"));
    ck_assert(!etcd_auth_set_token(a, "line\r\nX-Injected: 1"));
    ck_assert(!etcd_auth_set_token(a, ""));
    ck_assert(etcd_auth_set_token(a, "abc.def"));
    ck_assert_str_eq(etcd_auth_header(a), "Authorization: abc.def\r\n");
    etcd_client_free(c);
}
END_TEST

/* Credentials shared by two clients (etcd_auth.h "Threads"): the sharer does not free them, the
 * header is copied with the generation of its token, and every change of the token moves it. */
static void *hammer_tokens(void *arg)
{
    etcd_auth *a = arg;
    for (int i = 0; i < 2000; i++) {
        etcd_auth_set_token(a, (i & 1) ? "tok.odd" : "tok.even");
        if (i % 7 == 0)
            etcd_auth_forget(a);
    }
    return NULL;
}

START_TEST(test_auth_shared)
{
    etcd_error err;
    etcd_client_opts o = {.endpoints = "http://127.0.0.1:2379", .auth_user = "sf",
                          .auth_password = "pw"};
    etcd_client *owner = etcd_client_new(&o, &err);
    ck_assert_ptr_nonnull(owner);
    etcd_auth *a = etcd_client_auth(owner);
    etcd_client_opts so = {.endpoints = "http://127.0.0.1:2379", .shared_auth = a};
    etcd_client *sharer = etcd_client_new(&so, &err);
    ck_assert_ptr_nonnull(sharer);
    ck_assert_ptr_eq(etcd_client_auth(sharer), a);
    char hdr[ETCD_AUTH_HEADER_MAX];
    uint64_t g0 = etcd_auth_header_copy(a, hdr, sizeof hdr);
    ck_assert_str_eq(hdr, "");
    ck_assert(etcd_auth_set_token(a, "abc.def"));
    uint64_t g1 = etcd_auth_header_copy(a, hdr, sizeof hdr);
    ck_assert_str_eq(hdr, "Authorization: abc.def\r\n");
    ck_assert(g1 != g0 && g1 == etcd_auth_generation(a));
    ck_assert(!etcd_auth_set_token(a, "bad token")); /* refused: nothing changes */
    ck_assert_uint_eq(etcd_auth_generation(a), g1);
    etcd_auth_forget(a);
    ck_assert(etcd_auth_generation(a) != g1 && !etcd_auth_has_token(a));
    /* copies taken while another thread changes the token are whole (TSan: no race) */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, hammer_tokens, a), 0);
    for (int i = 0; i < 2000; i++) {
        etcd_auth_header_copy(a, hdr, sizeof hdr);
        ck_assert(hdr[0] == '\0' || strcmp(hdr, "Authorization: tok.odd\r\n") == 0 ||
                  strcmp(hdr, "Authorization: tok.even\r\n") == 0);
    }
    pthread_join(t, NULL);
    etcd_client_free(sharer); /* leaves the credentials to their owner */
    ck_assert(etcd_auth_set_token(a, "still.here"));
    etcd_client_free(owner);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("etcd_client");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_keepalive_chunked);
    tcase_add_test(tc, test_auth_shared);
    tcase_add_test(tc, test_error_shapes);
    tcase_add_test(tc, test_garbage);
    tcase_add_test(tc, test_hostile_ttls);
    tcase_add_test(tc, test_cluster_id_pinned);
    tcase_add_test(tc, test_stall_then_next);
    tcase_add_test(tc, test_refused_rotates_within_call);
    tcase_add_test(tc, test_txn);
    tcase_add_test(tc, test_options_and_prefix);
    tcase_add_test(tc, test_auth_token_refused_repeats_once);
    tcase_add_test(tc, test_auth_denied_not_repeated);
    tcase_add_test(tc, test_auth_credentials_and_file);
    tcase_add_test(tc, test_auth_not_enabled);
    tcase_add_test(tc, test_auth_classify_and_options);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
