/* sfload (loadtest/sfload/): HTTP response parsing split at every byte, pipelined, chunked and
 * close-delimited; ID extraction from /id and /ids bodies; the verifier (duplicates within and
 * across two and three threads, non-increasing, malformed, the map growing through incremental
 * rehashes);
 * histogram buckets and percentiles; memcached reply parsing; command-line checks (several
 * targets, --tolerate-faults, --min-ids, --ids-out-v2, the TLS options and their combinations);
 * the TLS context refusing unreadable files and unknown ciphers; the --ids-out-v2 record format
 * and its writer. */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "hist.h"
#include "idrec.h"
#include "util/httpresp.h"
#include "ids.h"
#include "mcreply.h"
#include "opts.h"
#include "tls.h"
#include "verify.h"

/* --- HTTP responses -------------------------------------------------------------------------- */

#define MAX_SEEN 16

typedef struct seen {
    unsigned n;
    int status[MAX_SEEN];
    bool keep_alive[MAX_SEEN];
    char body[MAX_SEEN][256];
    size_t body_len[MAX_SEEN];
    bool truncated[MAX_SEEN];
    int stop_after; /* return 1 (stop) after this many responses; 0: never */
} seen;

static int on_resp(void *ud, const hresp *r)
{
    seen *s = ud;
    ck_assert_uint_lt(s->n, MAX_SEEN);
    s->status[s->n] = r->status;
    s->keep_alive[s->n] = r->keep_alive;
    s->body_len[s->n] = r->body_len;
    s->truncated[s->n] = r->body_truncated;
    if (r->body_len)
        memcpy(s->body[s->n], r->body, r->body_len < 256 ? r->body_len : 256);
    s->n++;
    return s->stop_after && s->n == (unsigned)s->stop_after;
}

/* Feeds the stream in pieces cut at the given positions; returns the last feed's result. */
static int feed_all(hresp_parser *p, const char *data, size_t len, size_t cut1, size_t cut2)
{
    size_t cuts[4] = {0, cut1, cut2, len};
    int rc = HRESP_OK;
    for (int i = 0; i < 3 && rc == HRESP_OK; i++) {
        size_t used;
        if (cuts[i + 1] > cuts[i])
            rc = hresp_feed(p, data + cuts[i], cuts[i + 1] - cuts[i], &used);
    }
    return rc;
}

static const char pipelined[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n"
    "{\"id\":\"915027735296868352\"}"
    "HTTP/1.1 204 No Content\r\n\r\n"
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\n"
    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy";

static void check_pipelined(const seen *s)
{
    ck_assert_uint_eq(s->n, 5);
    ck_assert_int_eq(s->status[0], 200);
    ck_assert_uint_eq(s->body_len[0], 27);
    ck_assert(memcmp(s->body[0], "{\"id\":\"915027735296868352\"}", 27) == 0);
    ck_assert_int_eq(s->status[1], 204);
    ck_assert_uint_eq(s->body_len[1], 0);
    ck_assert_int_eq(s->status[2], 200);
    ck_assert_uint_eq(s->body_len[2], 12);
    ck_assert(memcmp(s->body[2], "hello, world", 12) == 0);
    ck_assert_int_eq(s->status[3], 404);
    ck_assert_int_eq(s->status[4], 503);
    ck_assert(memcmp(s->body[4], "busy", 4) == 0);
    for (int i = 0; i < 4; i++)
        ck_assert(s->keep_alive[i]);
    ck_assert(!s->keep_alive[4]);
}

START_TEST(http_pipelined_split_everywhere)
{
    size_t len = sizeof pipelined - 1;
    for (size_t a = 0; a <= len; a++) {
        for (size_t b = a; b <= len; b += (a % 7 == 0) ? 1 : 13) { /* every a; many b */
            seen s = {0};
            hresp_parser p;
            hresp_init(&p, false, true, 1024, on_resp, &s);
            ck_assert_int_eq(feed_all(&p, pipelined, len, a, b), HRESP_OK);
            check_pipelined(&s);
            ck_assert(!hresp_busy(&p));
            ck_assert_int_eq(hresp_eof(&p), HRESP_OK);
            hresp_free(&p);
        }
    }
}
END_TEST

START_TEST(http_byte_by_byte)
{
    seen s = {0};
    hresp_parser p;
    hresp_init(&p, false, true, 1024, on_resp, &s);
    for (size_t i = 0; i < sizeof pipelined - 1; i++) {
        size_t used;
        ck_assert_int_eq(hresp_feed(&p, pipelined + i, 1, &used), HRESP_OK);
        ck_assert_uint_eq(used, 1);
    }
    check_pipelined(&s);
    hresp_free(&p);
}
END_TEST

START_TEST(http_stop_reports_bytes_used)
{
    seen s = {.stop_after = 1};
    hresp_parser p;
    hresp_init(&p, false, true, 1024, on_resp, &s);
    size_t used = 0;
    ck_assert_int_eq(hresp_feed(&p, pipelined, sizeof pipelined - 1, &used), HRESP_STOP);
    size_t first = strlen("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          "Content-Length: 27\r\n\r\n") +
                   27;
    ck_assert_uint_eq(used, first);
    ck_assert_uint_eq(s.n, 1);
    /* The parser continues with the rest. */
    s.stop_after = 0;
    ck_assert_int_eq(hresp_feed(&p, pipelined + used, sizeof pipelined - 1 - used, &used),
                     HRESP_OK);
    check_pipelined(&s);
    hresp_free(&p);
}
END_TEST

static const char close_delimited[] = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n"
                                      "915027735347200000\n915027735347200001\n";

START_TEST(http10_read_until_close_split_everywhere)
{
    size_t len = sizeof close_delimited - 1;
    for (size_t a = 0; a <= len; a++) {
        seen s = {0};
        hresp_parser p;
        hresp_init(&p, false, true, 1024, on_resp, &s);
        ck_assert_int_eq(feed_all(&p, close_delimited, len, a, a), HRESP_OK);
        ck_assert_uint_eq(s.n, 0); /* not complete before the close */
        ck_assert_int_eq(hresp_eof(&p), HRESP_OK);
        ck_assert_uint_eq(s.n, 1);
        ck_assert_int_eq(s.status[0], 200);
        ck_assert(!s.keep_alive[0]);
        ck_assert_uint_eq(s.body_len[0], 38);
        ck_assert(memcmp(s.body[0], "915027735347200000\n915027735347200001\n", 38) == 0);
        hresp_free(&p);
    }
}
END_TEST

START_TEST(http10_with_length_and_keepalive_rules)
{
    static const char r10[] = "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok";
    static const char r10ka[] =
        "HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok";
    seen s = {0};
    hresp_parser p;
    size_t used;
    hresp_init(&p, false, true, 64, on_resp, &s);
    ck_assert_int_eq(hresp_feed(&p, r10, sizeof r10 - 1, &used), HRESP_OK);
    ck_assert_uint_eq(s.n, 1);
    ck_assert(!s.keep_alive[0]); /* HTTP/1.0 closes by default */
    hresp_reset(&p);
    ck_assert_int_eq(hresp_feed(&p, r10ka, sizeof r10ka - 1, &used), HRESP_OK);
    ck_assert_uint_eq(s.n, 2);
    ck_assert(s.keep_alive[1]);
    hresp_free(&p);
}
END_TEST

START_TEST(http_truncated_and_garbage)
{
    static const char cut[] = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345";
    seen s = {0};
    hresp_parser p;
    size_t used;
    hresp_init(&p, false, false, 0, on_resp, &s);
    ck_assert_int_eq(hresp_feed(&p, cut, sizeof cut - 1, &used), HRESP_OK);
    ck_assert(hresp_busy(&p));
    ck_assert_int_eq(hresp_eof(&p), HRESP_ERROR);
    ck_assert_uint_eq(s.n, 0);
    hresp_reset(&p);
    static const char headers_only[] = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n";
    ck_assert_int_eq(hresp_feed(&p, headers_only, sizeof headers_only - 1, &used), HRESP_OK);
    ck_assert_int_eq(hresp_eof(&p), HRESP_ERROR); /* closed inside the headers */
    hresp_reset(&p);
    ck_assert_int_eq(hresp_feed(&p, "garbage\r\n\r\n", 11, &used), HRESP_ERROR);
    ck_assert_ptr_nonnull(p.err);
    hresp_reset(&p);
    static const char two_lengths[] =
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab";
    ck_assert_int_eq(hresp_feed(&p, two_lengths, sizeof two_lengths - 1, &used), HRESP_ERROR);
    hresp_reset(&p); /* a reset parser works again */
    ck_assert_int_eq(hresp_feed(&p, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 38, &used),
                     HRESP_OK);
    ck_assert_uint_eq(s.n, 1);
    hresp_free(&p);
}
END_TEST

START_TEST(http_head_and_body_limit)
{
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\n"
                               "HTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\n";
    seen s = {0};
    hresp_parser p;
    size_t used;
    hresp_init(&p, true, true, 64, on_resp, &s);
    ck_assert_int_eq(hresp_feed(&p, head, sizeof head - 1, &used), HRESP_OK);
    ck_assert_uint_eq(s.n, 2); /* no body after HEAD responses */
    hresp_free(&p);

    static const char big[] =
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
        "0123456789012345678901234567890123456789012345678901234567890123456789"
        "012345678901234567890123456789";
    seen t = {0};
    hresp_init(&p, false, true, 64, on_resp, &t);
    ck_assert_int_eq(hresp_feed(&p, big, sizeof big - 1, &used), HRESP_OK);
    ck_assert_uint_eq(t.n, 1);
    ck_assert(t.truncated[0]);
    ck_assert_uint_eq(t.body_len[0], 64);
    hresp_free(&p);
}
END_TEST

/* --- ID extraction -----------------------------------------------------------------------------
 */

typedef struct idlist {
    uint64_t v[64];
    unsigned n;
    unsigned stop_at;
} idlist;

static int collect(void *ud, uint64_t id)
{
    idlist *l = ud;
    if (l->n < 64)
        l->v[l->n] = id;
    l->n++;
    return l->stop_at && l->n == l->stop_at;
}

static long parse(const char *body, ids_enc enc, idlist *l)
{
    const char *why = NULL;
    memset(l, 0, sizeof *l);
    long n = ids_parse(body, strlen(body), enc, collect, l, &why);
    if (n < 0)
        ck_assert_ptr_nonnull(why);
    return n;
}

START_TEST(ids_single_and_batch)
{
    idlist l;
    ck_assert_int_eq(parse("{\"id\":\"915027735296868352\"}", IDS_DEC, &l), 1);
    ck_assert_uint_eq(l.v[0], UINT64_C(915027735296868352));
    ck_assert_int_eq(parse("915027735296868352", IDS_DEC, &l), 1);
    ck_assert_int_eq(parse("915027735296868352\n", IDS_DEC, &l), 1);
    ck_assert_int_eq(parse(" { \"id\" : 42 } \n", IDS_DEC, &l), 1); /* bare number, spaces */
    ck_assert_uint_eq(l.v[0], 42);
    ck_assert_int_eq(parse("{\"ids\":[\"1\",\"2\",\"3\"]}", IDS_DEC, &l), 3);
    ck_assert_uint_eq(l.v[2], 3);
    ck_assert_int_eq(parse("{\"ids\":[]}", IDS_DEC, &l), 0);
    ck_assert_int_eq(parse("1\n2\n3\n", IDS_DEC, &l), 3);
    ck_assert_int_eq(parse("1\r\n2\r\n3", IDS_DEC, &l), 3);
    ck_assert_int_eq(parse("18446744073709551615", IDS_DEC, &l), 1);
    ck_assert_uint_eq(l.v[0], UINT64_MAX);
    ck_assert_int_eq(parse("{\"id\":\"0cb2c5a4e5400000\"}", IDS_HEX, &l), 1);
    ck_assert_uint_eq(l.v[0], UINT64_C(0x0cb2c5a4e5400000));
    ck_assert_int_eq(parse("{\"ids\":[\"0CB2C5A4E5400000\",\"0cb2c5a4e5400001\"]}", IDS_HEX, &l),
                     2);
    ck_assert_uint_eq(l.v[1], UINT64_C(0x0cb2c5a4e5400001));
}
END_TEST

START_TEST(ids_malformed)
{
    idlist l;
    const char *bad[] = {
        "",
        "\n",
        "abc",
        "18446744073709551616", /* 2^64 */
        "123456789012345678901",
        "{\"id\":\"12x\"}",
        "{\"id\":\"\"}",
        "{\"id\":\"12\"",
        "{\"id\":\"12\"}x",
        "{\"name\":\"12\"}",
        "{\"ids\":[\"1\",\"2\"}",
        "{\"ids\":[\"1\",]}",
        "{\"ids\":\"1\"}",
        "1\n\n2\n",
        "1 2",
        "-1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(parse(bad[i], IDS_DEC, &l) < 0, "accepted: %s", bad[i]);
    ck_assert_int_lt(parse("0cb2c5a4e54000001", IDS_HEX, &l), 0); /* 17 hex digits */
    ck_assert_int_lt(parse("{\"id\":\"0xff\"}", IDS_HEX, &l), 0);
}
END_TEST

START_TEST(ids_callback_stops)
{
    idlist l = {.stop_at = 2};
    const char *why;
    const char body[] = "{\"ids\":[\"1\",\"2\",\"3\"]}";
    ck_assert_int_eq(ids_parse(body, sizeof body - 1, IDS_DEC, collect, &l, &why), 2);
    ck_assert_uint_eq(l.n, 2);
}
END_TEST

/* --- the verifier --------------------------------------------------------------------------------
 */

static uint64_t make_id(const vlayout *l, uint64_t ts, uint64_t dc, uint64_t w, uint64_t seq)
{
    return ts << (l->d + l->w + l->s) | dc << (l->w + l->s) | w << l->s | seq;
}

START_TEST(layout_parse_and_metrics)
{
    vlayout l;
    ck_assert_int_eq(vlayout_parse("41/5/5/12", &l), 0);
    ck_assert_uint_eq(l.t, 41);
    ck_assert_uint_eq(l.s, 12);
    ck_assert_int_eq(vlayout_parse("42/5/5/12", &l), -1);
    ck_assert_int_eq(vlayout_parse("41/5/5", &l), -1);
    ck_assert_int_eq(vlayout_parse("41/5/5/12x", &l), -1);
    ck_assert_int_eq(vlayout_parse("41/5/17/0", &l), -1);
    ck_assert_int_eq(vlayout_parse(" 41/5/5/12", &l), -1);
    static const char metrics[] =
        "# HELP snowflaked_info Build and identity of this instance.\n"
        "# TYPE snowflaked_info gauge\n"
        "snowflaked_info{version=\"0.1.0\",datacenter_id=\"0\",worker_id=\"0\","
        "per_thread_worker_ids=\"false\",layout=\"39/6/6/12\",epoch_ms=\"1577836800000\"} 1\n"
        "snowflaked_ids_issued_total 5\n";
    ck_assert_int_eq(vlayout_from_metrics(metrics, sizeof metrics - 1, &l), 0);
    ck_assert_uint_eq(l.t, 39);
    ck_assert_uint_eq(l.d, 6);
    ck_assert_int_eq(vlayout_from_metrics("x 1\n", 4, &l), -1);
    static const char comment_only[] = "# HELP snowflaked_info{layout=\"41/5/5/12\"}\n";
    ck_assert_int_eq(vlayout_from_metrics(comment_only, sizeof comment_only - 1, &l), -1);
}
END_TEST

/* Narrower layouts (widths summing to less than 63), the daemon's presets by name and
 * Sonyflake's order (sequence above the node), from the option and from /metrics. */
START_TEST(layout_narrow_presets_and_node_low)
{
    vlayout l;
    char name[VLAYOUT_NAME_MAX];
    ck_assert_int_eq(vlayout_parse("38/0/5/10", &l), 0); /* 53 bits */
    ck_assert(l.t == 38 && l.d == 0 && l.w == 5 && l.s == 10 && !l.node_low);
    ck_assert_int_eq(vlayout_parse("js53", &l), 0);
    ck_assert(l.t == 38 && l.d == 0 && l.w == 5 && l.s == 10 && !l.node_low);
    ck_assert_int_eq(vlayout_parse("twitter", &l), 0);
    ck_assert(l.t == 41 && l.d == 5 && l.w == 5 && l.s == 12 && !l.node_low);
    ck_assert_int_eq(vlayout_parse("sonyflake", &l), 0);
    ck_assert(l.t == 39 && l.d == 8 && l.w == 8 && l.s == 8 && l.node_low);
    vlayout_name(&l, name);
    ck_assert_str_eq(name, "39/8/8/8,node_bits_low");
    ck_assert_int_eq(vlayout_parse(name, &l), 0);
    ck_assert(l.t == 39 && l.s == 8 && l.node_low);
    ck_assert_int_eq(vlayout_parse("38/0/5/10,node_bits_low", &l), 0);
    vlayout_name(&l, name);
    ck_assert_str_eq(name, "38/0/5/10,node_bits_low");
    ck_assert_int_eq(vlayout_parse("43/5/5/11", &l), -1); /* 64 bits */
    ck_assert_int_eq(vlayout_parse("39/8/8/8,", &l), -1);
    ck_assert_int_eq(vlayout_parse("39/8/8/8,node_bits", &l), -1);
    ck_assert_int_eq(vlayout_parse("Sonyflake", &l), -1);
    ck_assert_int_eq(vlayout_parse("custom", &l), -1);

    static const char sony[] =
        "snowflaked_info{version=\"0.1.0\",datacenter_id=\"192\",worker_id=\"168\","
        "per_thread_worker_ids=\"false\",layout=\"39/8/8/8\",layout_name=\"sonyflake\","
        "id_bits=\"63\",node_bits_low=\"true\",epoch_ms=\"1409529600000\"} 1\n";
    ck_assert_int_eq(vlayout_from_metrics(sony, sizeof sony - 1, &l), 0);
    ck_assert(l.t == 39 && l.d == 8 && l.w == 8 && l.s == 8 && l.node_low);
    static const char js53[] =
        "snowflaked_info{version=\"0.1.0\",layout=\"38/0/5/10\",layout_name=\"js53\","
        "id_bits=\"53\",node_bits_low=\"false\"} 1\n";
    ck_assert_int_eq(vlayout_from_metrics(js53, sizeof js53 - 1, &l), 0);
    ck_assert(l.t == 38 && l.d == 0 && l.w == 5 && l.s == 10 && !l.node_low);

    /* sony/sonyflake's toID: time<<24 | sequence<<16 | machine, machine = dc<<8 | worker */
    char d[96];
    ck_assert_int_eq(vlayout_parse("sonyflake", &l), 0);
    uint64_t id = UINT64_C(1000) << 24 | UINT64_C(7) << 16 | 192 << 8 | 168;
    vlayout_describe(&l, id, d, sizeof d);
    ck_assert_ptr_nonnull(strstr(d, "(timestamp 1000, dc 192, worker 168, seq 7)"));
    ck_assert_int_eq(vlayout_parse("js53", &l), 0);
    vlayout_describe(&l, make_id(&l, 1000, 0, 21, 1023), d, sizeof d);
    ck_assert_ptr_nonnull(strstr(d, "(timestamp 1000, dc 0, worker 21, seq 1023)"));
}
END_TEST

/* Sonyflake order: one node's IDs are 2^16 apart within a tick; the verifier stays exact. */
START_TEST(verifier_sonyflake_order)
{
    vlayout l;
    ck_assert_int_eq(vlayout_parse("sonyflake", &l), 0);
    verifier v;
    ck_assert_int_eq(verifier_init(&v, &l, 0, 0), 0);
    verify_stream st = {.conn = 1}, other = {.conn = 2};
    char body[64];
    for (uint64_t tick = 500; tick < 503; tick++)
        for (uint64_t seq = 0; seq < 256; seq++) {
            uint64_t id = tick << 24 | seq << 16 | 0x0102;
            snprintf(body, sizeof body, "{\"id\":\"%llu\"}", (unsigned long long)id);
            ck_assert_int_eq(verifier_body(&v, &st, body, strlen(body), IDS_DEC, 0), 0);
            id = tick << 24 | seq << 16 | 0x0103; /* another node: interleaved, not a dup */
            snprintf(body, sizeof body, "{\"id\":\"%llu\"}", (unsigned long long)id);
            ck_assert_int_eq(verifier_body(&v, &other, body, strlen(body), IDS_DEC, 0), 0);
        }
    ck_assert_uint_eq(v.set.ids, 2 * 3 * 256);
    ck_assert(!verifier_failed(&v));
    uint64_t dup = UINT64_C(501) << 24 | UINT64_C(9) << 16 | 0x0102;
    verify_stream fresh = {.conn = 3};
    snprintf(body, sizeof body, "%llu", (unsigned long long)dup);
    ck_assert_int_eq(verifier_body(&v, &fresh, body, strlen(body), IDS_DEC, 0), -1);
    ck_assert_uint_eq(v.duplicates, 1);
    ck_assert_ptr_nonnull(strstr(v.examples[0], "(timestamp 501, dc 1, worker 2, seq 9)"));
    verifier_free(&v);
}
END_TEST

START_TEST(verifier_good_stream)
{
    vlayout l = VLAYOUT_DEFAULT;
    verifier v;
    ck_assert_int_eq(verifier_init(&v, &l, 0, 0), 0);
    verify_stream st = {0};
    char body[512];
    uint64_t a = make_id(&l, 1000, 0, 0, 0);
    snprintf(body, sizeof body, "{\"id\":\"%llu\"}", (unsigned long long)a);
    ck_assert_int_eq(verifier_body(&v, &st, body, strlen(body), IDS_DEC, 0), 0);
    snprintf(body, sizeof body, "{\"ids\":[\"%llu\",\"%llu\",\"%llu\"]}",
             (unsigned long long)(a + 1), (unsigned long long)(a + 2),
             (unsigned long long)make_id(&l, 1001, 0, 0, 0));
    ck_assert_int_eq(verifier_body(&v, &st, body, strlen(body), IDS_DEC, 3), 0);
    ck_assert_uint_eq(v.ids, 4);
    ck_assert(!verifier_failed(&v));
    verifier_free(&v);
}
END_TEST

START_TEST(verifier_duplicate_nonincreasing_malformed)
{
    vlayout l = VLAYOUT_DEFAULT;
    verifier v;
    ck_assert_int_eq(verifier_init(&v, &l, 3, 0), 0);
    verify_stream s1 = {.conn = 1}, s2 = {.conn = 2};
    ck_assert_int_eq(verifier_body(&v, &s1, "{\"id\":\"100\"}", 12, IDS_DEC, 0), 0);
    /* Another connection, same ID: a duplicate (but increasing on its own connection). */
    ck_assert_int_eq(verifier_body(&v, &s2, "{\"id\":\"100\"}", 12, IDS_DEC, 0), -1);
    ck_assert_uint_eq(v.duplicates, 1);
    ck_assert_uint_eq(v.non_increasing, 0);
    /* Going backwards on connection 1: not increasing (and new). */
    ck_assert_int_eq(verifier_body(&v, &s1, "99", 2, IDS_DEC, 0), -1);
    ck_assert_uint_eq(v.non_increasing, 1);
    ck_assert_uint_eq(v.duplicates, 1);
    /* The same ID twice in a row on one connection: both. */
    ck_assert_int_eq(verifier_body(&v, &s1, "99", 2, IDS_DEC, 0), -1);
    ck_assert_uint_eq(v.non_increasing, 2);
    ck_assert_uint_eq(v.duplicates, 2);
    /* Malformed bodies, and a batch of the wrong size. */
    ck_assert_int_eq(verifier_body(&v, &s1, "{\"error\":\"busy\"}", 16, IDS_DEC, 0), -1);
    ck_assert_int_eq(verifier_body(&v, &s1, "1000\n1001\n", 10, IDS_DEC, 3), -1);
    ck_assert_uint_eq(v.malformed, 2);
    verifier_malformed(&v, &s1, "body larger than --max-body");
    ck_assert_uint_eq(v.malformed, 3);
    ck_assert(verifier_failed(&v));
    ck_assert_uint_ge(v.nexamples, 5);
    ck_assert_ptr_nonnull(strstr(v.examples[0], "duplicate on thread 3 connection 2: 100"));
    ck_assert_ptr_nonnull(strstr(v.examples[1], "not increasing on thread 3 connection 1"));
    verifier_free(&v);
}
END_TEST

START_TEST(verifier_merge_finds_cross_thread_duplicates)
{
    vlayout l = VLAYOUT_DEFAULT;
    verifier a, b;
    ck_assert_int_eq(verifier_init(&a, &l, 0, 0), 0);
    ck_assert_int_eq(verifier_init(&b, &l, 1, 0), 0);
    verify_stream sa = {0}, sb = {0};
    char body[64];
    for (uint64_t i = 0; i < 5000; i++) {
        uint64_t id = make_id(&l, 2000 + i / 1000, 1, 2, i % 1000);
        snprintf(body, sizeof body, "%llu", (unsigned long long)id);
        /* Threads take alternate IDs, except that both take every 1000th. */
        if (i % 2 == 0 || i % 1000 == 0)
            ck_assert_int_eq(verifier_body(&a, &sa, body, strlen(body), IDS_DEC, 0), 0);
        if (i % 2 == 1 || i % 1000 == 0)
            ck_assert_int_eq(verifier_body(&b, &sb, body, strlen(body), IDS_DEC, 0), 0);
    }
    ck_assert(!verifier_failed(&a) && !verifier_failed(&b));
    verifier *both[] = {&a, &b};
    verifier_merge(both, 2);
    ck_assert_uint_eq(a.duplicates, 5);
    ck_assert_uint_eq(a.ids, 5005);
    ck_assert_uint_eq(a.distinct, 5000);
    ck_assert_ptr_nonnull(strstr(a.examples[0], "duplicate across load threads"));
    ck_assert_ptr_nonnull(strstr(a.examples[0], "dc 1, worker 2"));
    verifier_free(&a);
    verifier_free(&b);
}
END_TEST

START_TEST(verifier_merge_three_threads_counts_each_extra_copy)
{
    /* An ID seen by all three threads is two duplicates; one seen by two is one. */
    vlayout l = VLAYOUT_DEFAULT;
    verifier v[3];
    verify_stream st[3] = {{0}};
    for (unsigned i = 0; i < 3; i++)
        ck_assert_int_eq(verifier_init(&v[i], &l, i, 0), 0);
    ck_assert_int_eq(verifier_body(&v[0], &st[0], "7\n8\n9", 5, IDS_DEC, 0), 0);
    ck_assert_int_eq(verifier_body(&v[1], &st[1], "7\n10", 4, IDS_DEC, 0), 0);
    ck_assert_int_eq(verifier_body(&v[2], &st[2], "7\n9\n11", 6, IDS_DEC, 0), 0);
    verifier *all[] = {&v[0], &v[1], &v[2]};
    verifier_merge(all, 3);
    ck_assert_uint_eq(v[0].duplicates, 3); /* 7 twice more, 9 once more */
    ck_assert_uint_eq(v[0].ids, 8);
    ck_assert_uint_eq(v[0].distinct, 5);
    ck_assert(verifier_failed(&v[0]));
    for (unsigned i = 0; i < 3; i++)
        verifier_free(&v[i]);
}
END_TEST

START_TEST(idset_grows_exactly)
{
    /* Dense milliseconds (1000 IDs each) and sparse ones (1 ID), through many doublings with
     * incremental rehashing; every ID found, every repeat caught, including mid-migration. */
    vlayout l = VLAYOUT_DEFAULT;
    idset s;
    ck_assert_int_eq(idset_init(&s, l.s, 0), 0);
    size_t cap0 = s.cap;
    uint64_t n = 0;
    for (uint64_t ms = 0; ms < 600; ms++)
        for (uint64_t q = 0; q < 1000; q++, n++)
            ck_assert_int_eq(idset_add(&s, make_id(&l, 5000 + ms, 0, 0, q)), 1);
    for (uint64_t ms = 0; ms < 100000; ms++, n++)
        ck_assert_int_eq(idset_add(&s, make_id(&l, 100000 + ms, 3, 7, ms % 4096)), 1);
    ck_assert_uint_gt(s.cap, cap0 * 64);
    ck_assert_uint_eq(s.ids, n);
    for (uint64_t ms = 0; ms < 600; ms += 7)
        for (uint64_t q = 0; q < 1000; q += 3) {
            ck_assert(idset_contains(&s, make_id(&l, 5000 + ms, 0, 0, q)));
            ck_assert_int_eq(idset_add(&s, make_id(&l, 5000 + ms, 0, 0, q)), 0);
        }
    ck_assert(!idset_contains(&s, make_id(&l, 5000, 0, 0, 1000)));
    ck_assert(!idset_contains(&s, make_id(&l, 5000, 0, 1, 0)));
    ck_assert(!idset_contains(&s, make_id(&l, 100000, 3, 7, 1)));
    /* Repeats while a migration is in progress. */
    idset t;
    ck_assert_int_eq(idset_init(&t, l.s, 0), 0);
    bool saw_migration = false;
    for (uint64_t i = 0; i < 300000; i++) {
        uint64_t id = make_id(&l, 7000 + i, 0, 0, 0);
        ck_assert_int_eq(idset_add(&t, id), 1);
        if (t.old) {
            saw_migration = true;
            ck_assert_int_eq(idset_add(&t, id), 0);
            ck_assert_int_eq(idset_add(&t, make_id(&l, 7000 + i / 2, 0, 0, 0)), 0);
        }
    }
    ck_assert(saw_migration);
    ck_assert_uint_eq(t.ids, 300000);
    ck_assert_uint_le(idset_bytes(&t), (size_t)300000 * 16 * 4 + 16384);
    /* Overlap: none between s and t; exactly the shared IDs with u. */
    idset *earlier[] = {&s};
    ck_assert_uint_eq(idset_count_common(&t, earlier, 1, NULL, NULL), 0);
    idset u;
    ck_assert_int_eq(idset_init(&u, l.s, 0), 0);
    for (uint64_t q = 0; q < 1000; q += 10) /* 100 shared */
        ck_assert_int_eq(idset_add(&u, make_id(&l, 5300, 0, 0, q)), 1);
    ck_assert_int_eq(idset_add(&u, make_id(&l, 5300, 0, 0, 1000)), 1); /* not in s */
    idset *two[] = {&t, &s};
    ck_assert_uint_eq(idset_count_common(&u, two, 2, NULL, NULL), 100);
    idset_free(&u);
    idset_free(&t);
    idset_free(&s);
}
END_TEST

START_TEST(idset_tiny_sequence_bits)
{
    vlayout l;
    ck_assert_int_eq(vlayout_parse("55/2/2/4", &l), 0);
    idset s;
    ck_assert_int_eq(idset_init(&s, l.s, 100), 0);
    ck_assert_uint_eq(s.block_bits, 4);
    for (uint64_t i = 0; i < 10000; i++)
        ck_assert_int_eq(idset_add(&s, i), 1);
    for (uint64_t i = 0; i < 10000; i++)
        ck_assert_int_eq(idset_add(&s, i), 0);
    idset_free(&s);
}
END_TEST

/* --- histogram
 * ------------------------------------------------------------------------------------ */

START_TEST(hist_buckets_cover_values)
{
    uint64_t probes[] = {0,          1,    255,   256,    257,     511,
                         512,        1000, 12345, 999999, 1000000, UINT64_C(123456789012),
                         HIST_MAX_NS};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        uint64_t v = probes[i];
        size_t k = hist_index(v);
        ck_assert_uint_lt(k, HIST_BUCKETS);
        ck_assert_uint_le(hist_bucket_low(k), v);
        ck_assert_uint_ge(hist_bucket_high(k), v);
        /* ~1 % precision: a bucket is at most 1/128 of its lower bound wide. */
        ck_assert_uint_le((hist_bucket_high(k) - hist_bucket_low(k)) * 128, hist_bucket_low(k));
    }
    for (size_t k = 1; k < HIST_BUCKETS; k++)
        ck_assert_uint_eq(hist_bucket_low(k), hist_bucket_high(k - 1) + 1);
    ck_assert_uint_eq(hist_index(HIST_MAX_NS), HIST_BUCKETS - 1);
    ck_assert_uint_eq(hist_index(UINT64_MAX), HIST_BUCKETS - 1);
}
END_TEST

START_TEST(hist_percentiles)
{
    static hist h, a, b;
    hist_init(&h);
    ck_assert_uint_eq(hist_percentile(&h, 50), 0);
    for (uint64_t v = 1; v <= 100000; v++)
        hist_record(&h, v * 1000); /* 1 us .. 100 ms, uniform */
    ck_assert_uint_eq(h.total, 100000);
    ck_assert_uint_eq(h.min, 1000);
    ck_assert_uint_eq(hist_percentile(&h, 100), 100000000);
    double want[] = {50, 90, 99, 99.9};
    for (size_t i = 0; i < 4; i++) {
        double exact = want[i] * 1000 * 1000;
        double got = (double)hist_percentile(&h, want[i]);
        ck_assert_msg(got >= exact && got <= exact * 1.01, "p%g: %f vs %f", want[i], got, exact);
    }
    ck_assert(hist_mean(&h) > 50000000 - 1000 && hist_mean(&h) < 50001000);
    /* Small values are exact. */
    hist_init(&a);
    for (int i = 0; i < 99; i++)
        hist_record(&a, 100);
    hist_record(&a, 200);
    ck_assert_uint_eq(hist_percentile(&a, 50), 100);
    ck_assert_uint_eq(hist_percentile(&a, 99), 100);
    ck_assert_uint_eq(hist_percentile(&a, 99.9), 200);
    /* Merging equals recording everything in one. */
    hist_init(&b);
    hist_record(&b, 5000000000ull);
    hist_merge(&a, &b);
    ck_assert_uint_eq(a.total, 101);
    ck_assert_uint_eq(a.max, 5000000000ull);
    ck_assert_uint_eq(a.min, 100);
    ck_assert_uint_eq(hist_percentile(&a, 100), 5000000000ull);
    ck_assert_uint_eq(hist_percentile(&a, 98), 100); /* rank 99 of 101 */
    ck_assert_uint_eq(hist_percentile(&a, 99), 200); /* rank 100 of 101 */
}
END_TEST

/* --- memcached replies
 * ---------------------------------------------------------------------------- */

typedef struct mc_seen {
    unsigned n;
    mc_kind kind[16];
    unsigned nvalues[16];
    char key[16][64];
    uint64_t vlen[16];
} mc_seen;

/* Feeds data in pieces cut at a and b; -1 on a parse error. */
static int mc_run(const char *data, size_t len, size_t a, size_t b, mc_seen *s)
{
    mc_parser p;
    mc_reset(&p);
    memset(s, 0, sizeof *s);
    size_t cuts[4] = {0, a, b, len};
    for (int i = 0; i < 3; i++) {
        const char *q = data + cuts[i];
        size_t n = cuts[i + 1] - cuts[i];
        while (n) {
            size_t used;
            mc_reply r;
            int rc = mc_feed(&p, q, n, &used, &r);
            if (rc < 0)
                return -1;
            ck_assert_uint_le(used, n);
            if (rc == 1) {
                s->kind[s->n] = r.kind;
                s->nvalues[s->n] = r.nvalues;
                s->vlen[s->n] = r.value_len;
                if (r.nvalues)
                    snprintf(s->key[s->n], 64, "%.*s", (int)r.key_len, r.key);
                s->n++;
            }
            q += used;
            n -= used;
            if (rc == 0)
                ck_assert_uint_eq(n, 0);
        }
    }
    return p.line_len || p.data_left ? 1 : 0; /* 1: a partial reply is pending */
}

static const char mc_stream[] = "STORED\r\n"
                                "END\r\n"
                                "VALUE sfload:42 0 5\r\nhello\r\nEND\r\n"
                                "VALUE a 1 3 77\r\nx\r\n\r\nVALUE b 2 0\r\n\r\nEND\r\n"
                                "SERVER_ERROR out of memory storing object\r\n"
                                "CLIENT_ERROR bad data chunk\r\n"
                                "ERROR\r\n"
                                "NOT_STORED\r\n";

START_TEST(mc_split_everywhere)
{
    size_t len = sizeof mc_stream - 1;
    for (size_t a = 0; a <= len; a++)
        for (size_t b = a; b <= len; b++) {
            mc_seen s;
            ck_assert_int_eq(mc_run(mc_stream, len, a, b, &s), 0);
            ck_assert_uint_eq(s.n, 8);
            ck_assert_int_eq(s.kind[0], MC_STORED);
            ck_assert_int_eq(s.kind[1], MC_END);
            ck_assert_uint_eq(s.nvalues[1], 0);
            ck_assert_int_eq(s.kind[2], MC_END);
            ck_assert_uint_eq(s.nvalues[2], 1);
            ck_assert_str_eq(s.key[2], "sfload:42");
            ck_assert_uint_eq(s.vlen[2], 5);
            ck_assert_uint_eq(s.nvalues[3], 2); /* value data may hold CRLF */
            ck_assert_str_eq(s.key[3], "a");
            ck_assert_uint_eq(s.vlen[3], 3);
            ck_assert_int_eq(s.kind[4], MC_SERVER_ERROR);
            ck_assert_int_eq(s.kind[5], MC_CLIENT_ERROR);
            ck_assert_int_eq(s.kind[6], MC_ERROR);
            ck_assert_int_eq(s.kind[7], MC_NOT_STORED);
        }
}
END_TEST

START_TEST(mc_malformed)
{
    const char *bad[] = {
        "STORED\n",                        /* no CR */
        "VALUE k 0 5\r\nhelloXX",          /* data not followed by CRLF */
        "VALUE k 0\r\n",                   /* missing length */
        "VALUE k 0 x\r\n",                 /* bad length */
        "VALUE k 0 1 2 3\r\nx\r\nEND\r\n", /* extra token */
        "VALUE  k 0 1\r\n",                /* empty key */
        "WHAT\r\n",                        /* unknown reply */
        "STOREDX\r\n",                     /* not exactly the word */
        "VALUE k 0 1\r\nx\r\nSTORED\r\n",  /* a value block not ended by END */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mc_seen s;
        ck_assert_msg(mc_run(bad[i], strlen(bad[i]), 0, 0, &s) == -1, "accepted: %s", bad[i]);
    }
    char longline[MC_LINE_MAX + 16];
    memset(longline, 'A', sizeof longline);
    mc_seen s;
    ck_assert_int_eq(mc_run(longline, sizeof longline, 0, 0, &s), -1);
    /* A partial reply is not a reply. */
    ck_assert_int_eq(mc_run("VALUE k 0 10\r\nabc", 17, 0, 0, &s), 1);
    ck_assert_uint_eq(s.n, 0);
}
END_TEST

/* --- command line
 * --------------------------------------------------------------------------------- */

static opts_rc run_opts(sl_opts *o, char *err, const char *first, ...)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"sfload";
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    return opts_parse(argc, argv, o, err, 256);
}

START_TEST(opts_checks)
{
    static sl_opts o;
    char err[256];
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "http://127.0.0.1:8080/id", NULL), OPTS_OK);
    ck_assert_uint_eq(o.port, 8080);
    ck_assert_str_eq(o.paths[0], "/id");
    ck_assert_int_eq(
        run_opts(&o, err, "-n", "10", "-p", "/id", "-p", "/ids?count=5", "http://[::1]:81", NULL),
        OPTS_OK);
    ck_assert_str_eq(o.host, "::1");
    ck_assert_uint_eq(o.npaths, 2);
    ck_assert_int_eq(run_opts(&o, err, "http://127.0.0.1:8080/id", NULL), OPTS_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "unbounded"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "3601", "http://127.0.0.1:8080/", NULL), OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "https://127.0.0.1/", NULL), OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "--webbench", "-n", "5", "http://127.0.0.1/", NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "-C", "-P", "4", "-t", "1", "http://127.0.0.1/", NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "--mode", "memcache", "-t", "1", "127.0.0.1", NULL),
                     OPTS_USAGE); /* no port */
    ck_assert_int_eq(run_opts(&o, err, "--mode", "memcache", "--mc-ratio", "3:1", "-t", "1",
                              "127.0.0.1:11211", NULL),
                     OPTS_OK);
    ck_assert_uint_eq(o.mc_gets, 3);
    ck_assert_int_eq(run_opts(&o, err, "-c", "2", "-T", "8", "-t", "1", "http://127.0.0.1/", NULL),
                     OPTS_OK);
    ck_assert_uint_eq(o.threads, 2); /* never more threads than connections */
    ck_assert_int_eq(run_opts(&o, err, "--id-layout", "41/5/5/13", "-t", "1", "http://x/", NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "--id-layout", "sonyflake", "-t", "1", "http://x/", NULL),
                     OPTS_OK);
    ck_assert(o.have_layout && o.layout.t == 39 && o.layout.s == 8 && o.layout.node_low);
    ck_assert_int_eq(run_opts(&o, err, "--id-layout", "38/0/5/10", "-t", "1", "http://x/", NULL),
                     OPTS_OK);
    ck_assert(o.have_layout && o.layout.t == 38 && o.layout.w == 5 && !o.layout.node_low);
    /* The loopback rule. */
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "http://10.1.2.3:80/", NULL), OPTS_OK);
    ck_assert_int_eq(opts_resolve(&o, err, 256), -1);
    ck_assert_ptr_nonnull(strstr(err, "--allow-remote"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "http://127.8.9.10:80/", NULL), OPTS_OK);
    ck_assert_int_eq(opts_resolve(&o, err, 256), 0);
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "http://[::1]:80/", NULL), OPTS_OK);
    ck_assert_int_eq(opts_resolve(&o, err, 256), 0);
    struct sockaddr_in6 m = {.sin6_family = AF_INET6};
    m.sin6_addr.s6_addr[10] = m.sin6_addr.s6_addr[11] = 0xff;
    m.sin6_addr.s6_addr[12] = 127;
    ck_assert(opts_addr_is_loopback((struct sockaddr *)&m));
    m.sin6_addr.s6_addr[12] = 10;
    ck_assert(!opts_addr_is_loopback((struct sockaddr *)&m));
}
END_TEST

START_TEST(opts_several_targets)
{
    static sl_opts o;
    char err[256];
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "http://127.0.0.1:8080/ids?count=5",
                              "http://127.0.0.2:8081/ids?count=5", "http://[::1]:8082/ids?count=5",
                              NULL),
                     OPTS_OK);
    ck_assert_uint_eq(o.ntargets, 3);
    ck_assert_str_eq(o.targets[1].host, "127.0.0.2");
    ck_assert_uint_eq(o.targets[1].port, 8081);
    ck_assert_str_eq(o.targets[2].host, "::1");
    ck_assert_str_eq(o.targets[2].target, "http://[::1]:8082/ids?count=5");
    ck_assert_uint_eq(o.npaths, 1);
    ck_assert_str_eq(o.paths[0], "/ids?count=5");
    /* Target 0 stays in the single-target fields. */
    ck_assert_str_eq(o.host, "127.0.0.1");
    ck_assert_uint_eq(o.port, 8080);
    ck_assert_str_eq(o.target, "http://127.0.0.1:8080/ids?count=5");
    ck_assert_int_eq(opts_resolve(&o, err, 256), 0);
    ck_assert_int_eq(o.targets[2].addr.ss_family, AF_INET6);
    ck_assert_int_eq(o.addr.ss_family, AF_INET);
    /* Defaults are unchanged by the new options. */
    ck_assert(!o.tolerate_faults && o.min_ids == 0 && !o.ids_out_v2 && !o.verify);
    /* Every URL must carry the same path. */
    ck_assert_int_eq(
        run_opts(&o, err, "-t", "5", "http://127.0.0.1:8080/id", "http://127.0.0.1:8081/ids", NULL),
        OPTS_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "same path"));
    ck_assert_int_eq(
        run_opts(&o, err, "-t", "5", "http://127.0.0.1:8080/", "http://127.0.0.1:8081", NULL),
        OPTS_OK); /* "/" either way */
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "http://127.0.0.1:8080/id", "garbage", NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(
        run_opts(&o, err, "--mode", "echo", "-t", "1", "127.0.0.1:7", "127.0.0.1:8", NULL),
        OPTS_OK);
    ck_assert_uint_eq(o.ntargets, 2);
    ck_assert_uint_eq(o.targets[1].port, 8);
    /* The loopback rule holds for every target, not only the first. */
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "http://127.0.0.1/", "http://10.0.0.1/", NULL),
                     OPTS_OK);
    ck_assert_int_eq(opts_resolve(&o, err, 256), -1);
    ck_assert_ptr_nonnull(strstr(err, "10.0.0.1"));
}
END_TEST

START_TEST(opts_too_many_targets)
{
    static sl_opts o;
    static char urls[SL_MAX_TARGETS + 1][40];
    char *argv[SL_MAX_TARGETS + 8];
    char err[256];
    int argc = 0;
    argv[argc++] = (char *)"sfload";
    argv[argc++] = (char *)"-t";
    argv[argc++] = (char *)"1";
    for (int i = 0; i <= SL_MAX_TARGETS; i++) {
        snprintf(urls[i], sizeof urls[i], "http://127.0.0.1:%d/id", 1000 + i);
        argv[argc++] = urls[i];
    }
    argv[argc] = NULL;
    ck_assert_int_eq(opts_parse(argc, argv, &o, err, sizeof err), OPTS_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "at most 32 targets"));
    ck_assert_int_eq(opts_parse(argc - 1, argv, &o, err, sizeof err), OPTS_OK);
    ck_assert_uint_eq(o.ntargets, SL_MAX_TARGETS);
}
END_TEST

START_TEST(opts_fault_options)
{
    static sl_opts o;
    char err[256];
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "--tolerate-faults", "http://127.0.0.1/id", NULL),
                     OPTS_OK);
    ck_assert(o.tolerate_faults && !o.verify && o.min_ids == 0);
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "--min-ids", "1000", "http://127.0.0.1/id", NULL),
                     OPTS_OK);
    ck_assert(o.verify && o.min_ids == 1000); /* --min-ids counts verified IDs */
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "--min-ids", "0", "http://127.0.0.1/id", NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "--min-ids", "x", "http://127.0.0.1/id", NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(
        run_opts(&o, err, "-t", "5", "--ids-out-v2", "/tmp/x.bin", "http://127.0.0.1/id", NULL),
        OPTS_OK);
    ck_assert(o.verify);
    ck_assert_str_eq(o.ids_out_v2, "/tmp/x.bin");
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "-c", "32769", "--ids-out-v2", "/tmp/x.bin",
                              "http://127.0.0.1/id", NULL),
                     OPTS_USAGE); /* the connection number has 15 bits */
    ck_assert_ptr_nonnull(strstr(err, "15 bits"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "-c", "32768", "--ids-out-v2", "/tmp/x.bin",
                              "http://127.0.0.1/id", NULL),
                     OPTS_OK);
    ck_assert_int_eq(run_opts(&o, err, "-t", "5", "--ids-out", "/tmp/x.bin", "--ids-out-v2",
                              "/tmp/x.bin", "http://127.0.0.1/id", NULL),
                     OPTS_USAGE);
}
END_TEST

START_TEST(opts_tls)
{
    static sl_opts o;
    char err[256];
    /* An https:// URL means TLS, on port 443 unless given, and verification must be decided. */
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "https://127.0.0.1/id", NULL), OPTS_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--cacert FILE"));
    ck_assert_ptr_nonnull(strstr(err, "--insecure"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "https://127.0.0.1/id", NULL),
                     OPTS_OK);
    ck_assert(o.tls && o.tls_insecure && !o.tls_cacert);
    ck_assert_uint_eq(o.port, 443);
    ck_assert_str_eq(o.paths[0], "/id");
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--cacert", "ca.pem", "--cert", "c.pem",
                              "https://localhost:8443/id", NULL),
                     OPTS_OK);
    ck_assert(o.tls && !o.tls_insecure && !o.tls_resume && o.tls_version == 0);
    ck_assert_str_eq(o.tls_cacert, "ca.pem");
    ck_assert_str_eq(o.tls_key, "c.pem"); /* the key from the --cert file */
    ck_assert_uint_eq(o.port, 8443);
    ck_assert_str_eq(o.host, "localhost");
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--cacert", "ca.pem", "--cert", "c.pem", "--key",
                              "k.pem", "https://[::1]:8443/", NULL),
                     OPTS_OK);
    ck_assert_str_eq(o.tls_key, "k.pem");
    ck_assert_str_eq(o.host, "::1");
    /* Plaintext runs are untouched, and TLS options alone do not turn TLS on. */
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "http://127.0.0.1/id", NULL), OPTS_OK);
    ck_assert(!o.tls && !o.tls_insecure && !o.tls_cacert && !o.tls_sni);
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--cacert", "ca.pem", "http://127.0.0.1/", NULL),
                     OPTS_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "need --tls"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--tls", "--insecure", "http://127.0.0.1/", NULL),
                     OPTS_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "https://"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "https://127.0.0.1:1/",
                              "http://127.0.0.1:2/", NULL),
                     OPTS_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "mixed"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--cacert", "ca.pem",
                              "https://127.0.0.1/", NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--key", "k.pem",
                              "https://127.0.0.1/", NULL),
                     OPTS_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--key needs --cert"));
    /* memcache and echo: --tls with HOST:PORT. */
    ck_assert_int_eq(run_opts(&o, err, "--mode", "memcache", "--tls", "--cacert", "ca.pem", "-t",
                              "1", "127.0.0.1:11211", NULL),
                     OPTS_OK);
    ck_assert(o.tls && o.mode == MODE_MEMCACHE);
    ck_assert_int_eq(run_opts(&o, err, "--mode", "echo", "--tls", "-t", "1", "127.0.0.1:7", NULL),
                     OPTS_USAGE); /* verification undecided */
    ck_assert_int_eq(run_opts(&o, err, "--mode", "echo", "--insecure", "-t", "1", "127.0.0.1:7",
                              NULL),
                     OPTS_USAGE); /* no --tls */
    /* Versions, ciphers, SNI, resumption. */
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--tls-version", "1.3",
                              "--ciphersuites", "TLS_AES_128_GCM_SHA256", "--sni", "api.example",
                              "--tls-resume", "--close", "https://127.0.0.1/id", NULL),
                     OPTS_OK);
    ck_assert(o.tls_version == 13 && o.tls_resume && o.close_mode);
    ck_assert_str_eq(o.tls_sni, "api.example");
    ck_assert_str_eq(o.tls_suites, "TLS_AES_128_GCM_SHA256");
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--tls-version", "1.2",
                              "--ciphers", "ECDHE-RSA-AES128-GCM-SHA256", "https://127.0.0.1/",
                              NULL),
                     OPTS_OK);
    ck_assert(o.tls_version == 12);
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--tls-version", "1.1",
                              "https://127.0.0.1/", NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--tls-version", "1.2",
                              "--ciphersuites", "TLS_AES_128_GCM_SHA256", "https://127.0.0.1/",
                              NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--tls-version", "1.3",
                              "--ciphers", "ECDHE-RSA-AES128-GCM-SHA256", "https://127.0.0.1/",
                              NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--sni", "", "https://127.0.0.1/",
                              NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--sni", "a b",
                              "https://127.0.0.1/", NULL),
                     OPTS_USAGE);
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--tls-resume", "http://127.0.0.1/", NULL),
                     OPTS_USAGE);
}
END_TEST

/* The context fails with the file or list named, before any connection. */
START_TEST(tls_context_errors)
{
    static sl_opts o;
    char err[256];
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--cacert", "/nonexistent/ca.pem",
                              "https://127.0.0.1/", NULL),
                     OPTS_OK);
    ck_assert_ptr_null(sltls_ctx_new(&o, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "--cacert /nonexistent/ca.pem: No such file"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--cacert", "/dev/null", "https://127.0.0.1/",
                              NULL),
                     OPTS_OK);
    ck_assert_ptr_null(sltls_ctx_new(&o, err, sizeof err)); /* readable, but no certificate */
    ck_assert_ptr_nonnull(strstr(err, "--cacert /dev/null: "));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--ciphers", "NO-SUCH-CIPHER",
                              "https://127.0.0.1/", NULL),
                     OPTS_OK);
    ck_assert_ptr_null(sltls_ctx_new(&o, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "--ciphers NO-SUCH-CIPHER"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--ciphersuites", "TLS_NO_SUCH",
                              "https://127.0.0.1/", NULL),
                     OPTS_OK);
    ck_assert_ptr_null(sltls_ctx_new(&o, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "--ciphersuites TLS_NO_SUCH"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--cert", "/nonexistent/c.pem",
                              "https://127.0.0.1/", NULL),
                     OPTS_OK);
    ck_assert_ptr_null(sltls_ctx_new(&o, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "--cert /nonexistent/c.pem: No such file"));
    ck_assert_int_eq(run_opts(&o, err, "-t", "1", "--insecure", "--tls-version", "1.3",
                              "--ciphersuites", "TLS_CHACHA20_POLY1305_SHA256:TLS_NO_SUCH",
                              "https://127.0.0.1/", NULL),
                     OPTS_OK);
    sltls_ctx *x = sltls_ctx_new(&o, err, sizeof err); /* one known suite is enough */
    ck_assert_ptr_nonnull(x);
    ck_assert(!sltls_ctx_verifies(x));
    sltls_ctx_free(x);
}
END_TEST

/* --- --ids-out-v2 records -------------------------------------------------------------------- */

START_TEST(idrec_layout_is_fixed)
{
    idrec r = {UINT64_C(0x0102030405060708), 0x0a0b, 0x11223344, 0x1234, true}, d;
    unsigned char b[IDREC_BYTES];
    idrec_encode(&r, b);
    static const unsigned char want[IDREC_BYTES] = {
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* id, little-endian */
        0x0b, 0x0a,                                     /* target */
        0x44, 0x33, 0x22, 0x11,                         /* ms */
        0x34, 0x92,                                     /* conn 0x1234 | fresh 0x8000 */
    };
    ck_assert_mem_eq(b, want, IDREC_BYTES);
    ck_assert_int_eq(idrec_decode(b, &d), 0);
    ck_assert(d.id == r.id && d.target == r.target && d.ms == r.ms && d.conn == r.conn && d.fresh);
    /* Extremes round-trip; the connection number is masked to 15 bits, never into the flag. */
    idrec e = {UINT64_MAX, UINT16_MAX, UINT32_MAX, IDREC_CONN_MAX, false};
    idrec_encode(&e, b);
    ck_assert_int_eq(idrec_decode(b, &d), 0);
    ck_assert(d.id == UINT64_MAX && d.target == UINT16_MAX && d.ms == UINT32_MAX);
    ck_assert(d.conn == IDREC_CONN_MAX && !d.fresh);
    e.conn = 0xffff;
    idrec_encode(&e, b);
    idrec_decode(b, &d);
    ck_assert(d.conn == IDREC_CONN_MAX && !d.fresh);
}
END_TEST

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Two writers (two load threads) through full buffers and partial ones: every record lands once,
 * each writer's records stay in order, the file is whole records. */
START_TEST(idrec_writers_share_a_file)
{
    char path[] = "/tmp/sfload_idrec_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    static idrec_file f;
    ck_assert_int_eq(idrec_open(&f, path), 0);
    static idrec_writer a, b;
    idrec_writer_init(&a, &f);
    idrec_writer_init(&b, &f);
    const unsigned na = IDREC_BUF_RECS * 2 + 17, nb = 5;
    for (unsigned i = 0; i < na || i < nb; i++) {
        if (i < na) {
            idrec r = {1000000 + i, 0, i / 10, 3, i == 0};
            idrec_writer_add(&a, &r);
        }
        if (i < nb) {
            idrec r = {2000000 + i, 1, i, 4, false};
            idrec_writer_add(&b, &r);
        }
    }
    idrec_writer_flush(&a);
    idrec_writer_flush(&b);
    idrec_writer_flush(&b); /* empty: writes nothing */
    ck_assert_int_eq(idrec_close(&f), 0);
    size_t len;
    unsigned char *data = slurp(path, &len);
    unlink(path);
    ck_assert_uint_eq(len, (size_t)(na + nb) * IDREC_BYTES);
    uint64_t next_a = 1000000, next_b = 2000000;
    for (size_t k = 0; k < len / IDREC_BYTES; k++) {
        idrec r;
        idrec_decode(data + k * IDREC_BYTES, &r);
        if (r.target == 0) {
            ck_assert_uint_eq(r.id, next_a);
            ck_assert_uint_eq(r.conn, 3);
            ck_assert(r.fresh == (r.id == 1000000));
            ck_assert_uint_eq(r.ms, (r.id - 1000000) / 10);
            next_a++;
        } else {
            ck_assert_uint_eq(r.target, 1);
            ck_assert_uint_eq(r.id, next_b++);
        }
    }
    ck_assert_uint_eq(next_a, 1000000 + na);
    ck_assert_uint_eq(next_b, 2000000 + nb);
    free(data);
}
END_TEST

/* A write error is kept and reported by idrec_close (the run then fails), never ignored. */
START_TEST(idrec_write_error_is_reported)
{
    static idrec_file f;
    ck_assert_int_eq(idrec_open(&f, "/dev/full"), 0);
    static idrec_writer w;
    idrec_writer_init(&w, &f);
    idrec r = {1, 0, 0, 0, false};
    idrec_writer_add(&w, &r);
    idrec_writer_flush(&w);
    ck_assert_int_eq(idrec_close(&f), -1);
    ck_assert_int_eq(errno, ENOSPC);
    ck_assert_int_eq(idrec_open(&f, "/nonexistent-dir/x.bin"), -1);
}
END_TEST

/* The verifier records every ID it checks, with the stream's target, time and connection, and
 * marks the first ID of a new connection. */
START_TEST(verifier_records_ids)
{
    char path[] = "/tmp/sfload_idrec_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    static idrec_file f;
    static idrec_writer w;
    ck_assert_int_eq(idrec_open(&f, path), 0);
    idrec_writer_init(&w, &f);
    verifier v;
    vlayout l = VLAYOUT_DEFAULT;
    ck_assert_int_eq(verifier_init(&v, &l, 0, 0), 0);
    v.rec = &w;
    verify_stream st = {.conn = 7, .target = 2, .recv_ms = 1500, .fresh = true};
    const char *b1 = "{\"ids\":[\"100\",\"101\"]}";
    ck_assert_int_eq(verifier_body(&v, &st, b1, strlen(b1), IDS_DEC, 2), 0);
    st.recv_ms = 1600;
    const char *b2 = "{\"id\":\"102\"}";
    ck_assert_int_eq(verifier_body(&v, &st, b2, strlen(b2), IDS_DEC, 0), 0);
    idrec_writer_flush(&w);
    ck_assert_int_eq(idrec_close(&f), 0);
    verifier_free(&v);
    size_t len;
    unsigned char *data = slurp(path, &len);
    unlink(path);
    ck_assert_uint_eq(len, 3 * IDREC_BYTES);
    idrec r[3];
    for (int i = 0; i < 3; i++)
        idrec_decode(data + i * IDREC_BYTES, &r[i]);
    ck_assert(r[0].id == 100 && r[0].target == 2 && r[0].ms == 1500 && r[0].conn == 7 &&
              r[0].fresh);
    ck_assert(r[1].id == 101 && r[1].ms == 1500 && !r[1].fresh);
    ck_assert(r[2].id == 102 && r[2].ms == 1600 && !r[2].fresh);
    free(data);
}
END_TEST

static Suite *sfload_suite(void)
{
    Suite *s = suite_create("sfload");
    TCase *http = tcase_create("http");
    tcase_add_test(http, http_pipelined_split_everywhere);
    tcase_add_test(http, http_byte_by_byte);
    tcase_add_test(http, http_stop_reports_bytes_used);
    tcase_add_test(http, http10_read_until_close_split_everywhere);
    tcase_add_test(http, http10_with_length_and_keepalive_rules);
    tcase_add_test(http, http_truncated_and_garbage);
    tcase_add_test(http, http_head_and_body_limit);
    suite_add_tcase(s, http);
    TCase *ids = tcase_create("ids");
    tcase_add_test(ids, ids_single_and_batch);
    tcase_add_test(ids, ids_malformed);
    tcase_add_test(ids, ids_callback_stops);
    suite_add_tcase(s, ids);
    TCase *ver = tcase_create("verify");
    tcase_add_test(ver, layout_parse_and_metrics);
    tcase_add_test(ver, layout_narrow_presets_and_node_low);
    tcase_add_test(ver, verifier_sonyflake_order);
    tcase_add_test(ver, verifier_good_stream);
    tcase_add_test(ver, verifier_duplicate_nonincreasing_malformed);
    tcase_add_test(ver, verifier_merge_finds_cross_thread_duplicates);
    tcase_add_test(ver, verifier_merge_three_threads_counts_each_extra_copy);
    tcase_add_test(ver, idset_grows_exactly);
    tcase_add_test(ver, idset_tiny_sequence_bits);
    suite_add_tcase(s, ver);
    TCase *h = tcase_create("hist");
    tcase_add_test(h, hist_buckets_cover_values);
    tcase_add_test(h, hist_percentiles);
    suite_add_tcase(s, h);
    TCase *mc = tcase_create("memcache");
    tcase_add_test(mc, mc_split_everywhere);
    tcase_add_test(mc, mc_malformed);
    suite_add_tcase(s, mc);
    TCase *rec = tcase_create("idrec");
    tcase_add_test(rec, idrec_layout_is_fixed);
    tcase_add_test(rec, idrec_writers_share_a_file);
    tcase_add_test(rec, idrec_write_error_is_reported);
    tcase_add_test(rec, verifier_records_ids);
    suite_add_tcase(s, rec);
    TCase *o = tcase_create("opts");
    tcase_add_test(o, opts_checks);
    tcase_add_test(o, opts_several_targets);
    tcase_add_test(o, opts_too_many_targets);
    tcase_add_test(o, opts_fault_options);
    tcase_add_test(o, opts_tls);
    tcase_add_test(o, tls_context_errors);
    suite_add_tcase(s, o);
    return s;
}

int main(void)
{
    return sf_run_suite(sfload_suite());
}
