/* sfload (loadtest/sfload/): HTTP response parsing split at every byte, pipelined, chunked and
 * close-delimited; ID extraction from /id and /ids bodies; the verifier (duplicates within and
 * across two and three threads, non-increasing, malformed, the map growing through incremental
 * rehashes);
 * histogram buckets and percentiles; memcached reply parsing; command-line checks. */
#include <check.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "hist.h"
#include "util/httpresp.h"
#include "ids.h"
#include "mcreply.h"
#include "opts.h"
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
    TCase *o = tcase_create("opts");
    tcase_add_test(o, opts_checks);
    suite_add_tcase(s, o);
    return s;
}

int main(void)
{
    return sf_run_suite(sfload_suite());
}
