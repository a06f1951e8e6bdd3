/* etcd_probe: drives cluster/etcd_client for test/cluster/test_etcd_client.py. One client for the
 * process's life (so connection reuse and endpoint rotation are what the daemon would see); one
 * operation per stdin line, one JSON line per operation on stdout:
 *   grant ID TTL | keepalive ID [MAX_TTL] | revoke ID | range KEY | claim KEY VALUE LEASE | quit
 * claim = the design's claim txn: compare create_revision(KEY) == 0; success: put KEY=VALUE with
 * LEASE; failure: range KEY (the holder comes back).
 * Output: {"op":..,"ok":bool,"ms":..,"endpoint":..,[result fields],[error fields]}.
 * Usage: etcd_probe ENDPOINTS TIMEOUT_MS. Test tool, not installed. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/etcd_client.h"
#include "util/netio.h"

static void print_err(const etcd_error *e)
{
    static const char *const KIND[] = {"ok", "unavailable", "garbage", "server", "usage", "tls"};
    printf(",\"kind\":\"%s\",\"http\":%d,\"code\":%d,\"message\":\"", KIND[e->kind], e->http_status,
           e->grpc_code);
    for (const char *p = e->message; *p; p++)
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if ((unsigned char)*p >= 0x20)
            putchar(*p);
    putchar('"');
}

static void print_kvs(const etcd_range_result *r)
{
    printf(",\"count\":%" PRId64 ",\"kvs\":[", r->count);
    for (size_t i = 0; i < r->n_kvs; i++)
        printf("%s{\"key\":\"%s\",\"value\":\"%s\",\"lease\":%" PRId64 ",\"create_revision\":%" PRId64 "}",
               i ? "," : "", r->kvs[i].key, r->kvs[i].value, r->kvs[i].lease,
               r->kvs[i].create_revision);
    putchar(']');
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: etcd_probe ENDPOINTS TIMEOUT_MS\n");
        return 2;
    }
    etcd_error err;
    etcd_client_opts o = {.endpoints = argv[1], .request_timeout_ms = (unsigned)atoi(argv[2])};
    etcd_client *c = etcd_client_new(&o, &err);
    if (!c) {
        fprintf(stderr, "etcd_probe: %s\n", err.message);
        return 2;
    }
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        char op[16] = "", a[200] = "", b[200] = "", d[32] = "";
        if (sscanf(line, "%15s %199s %199s %31s", op, a, b, d) < 1)
            continue;
        if (strcmp(op, "quit") == 0)
            break;
        memset(&err, 0, sizeof err);
        uint64_t t0 = netio_mono_ms();
        int rc = -1;
        char extra[1024] = "";
        etcd_range_result rr = {0};
        etcd_txn_result tr = {0};
        const char *used = etcd_client_endpoint(c); /* where the call starts */
        char start[80];
        snprintf(start, sizeof start, "%s", used);
        if (strcmp(op, "grant") == 0) {
            int64_t ttl = 0;
            rc = etcd_lease_grant(c, atoll(b), atoll(a), &ttl, &err);
            snprintf(extra, sizeof extra, ",\"ttl\":%" PRId64, ttl);
        } else if (strcmp(op, "keepalive") == 0) {
            int64_t ttl = -1;
            rc = etcd_lease_keepalive(c, atoll(a), b[0] ? atoll(b) : ETCD_MAX_LEASE_TTL_S, &ttl,
                                      &err);
            snprintf(extra, sizeof extra, ",\"ttl\":%" PRId64, ttl);
        } else if (strcmp(op, "revoke") == 0) {
            bool gone = false;
            rc = etcd_lease_revoke(c, atoll(a), &gone, &err);
            snprintf(extra, sizeof extra, ",\"was_gone\":%s", gone ? "true" : "false");
        } else if (strcmp(op, "range") == 0) {
            rc = etcd_range(c, a, NULL, &rr, &err);
        } else if (strcmp(op, "claim") == 0) {
            etcd_txn *t = etcd_txn_new();
            etcd_txn_compare_int(t, a, ETCD_CMP_CREATE, ETCD_CMP_EQUAL, 0);
            etcd_txn_put(t, ETCD_SUCCESS, a, b, strlen(b), atoll(d));
            etcd_txn_range(t, ETCD_FAILURE, a, NULL);
            rc = etcd_txn_commit(c, t, &tr, &err);
            etcd_txn_free(t);
            snprintf(extra, sizeof extra, ",\"succeeded\":%s", tr.succeeded ? "true" : "false");
        } else {
            snprintf(err.message, sizeof err.message, "unknown op");
            err.kind = ETCD_E_USAGE;
        }
        printf("{\"op\":\"%s\",\"ok\":%s,\"ms\":%" PRIu64 ",\"start\":\"%s\",\"endpoint\":\"%s\"%s", op,
               rc == 0 ? "true" : "false", netio_mono_ms() - t0, start,
               rc == 0 ? etcd_client_endpoint(c) : err.endpoint, extra);
        if (rc == 0 && strcmp(op, "range") == 0)
            print_kvs(&rr);
        if (rc == 0 && tr.n_responses && tr.responses[0].kind == ETCD_RESP_RANGE)
            print_kvs(&tr.responses[0].range);
        if (rc != 0)
            print_err(&err);
        printf("}\n");
        fflush(stdout);
        etcd_range_result_free(&rr);
        etcd_txn_result_free(&tr);
    }
    etcd_client_free(c);
    return 0;
}
