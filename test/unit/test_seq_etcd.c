/* The etcd block source's values (cluster/seq_etcd.h): the counter's claim record and a namespace
 * definition, encoded and parsed back; every number a decimal string so that values past 2^53
 * survive (cJSON's doubles would round them); malformed values refused, never guessed. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "check_main.h"
#include "cluster/seq_etcd.h"

static void same_def(const seq_ns_def *a, const seq_ns_def *b)
{
    ck_assert_str_eq(a->name, b->name);
    ck_assert(a->start == b->start && a->max == b->max && a->block == b->block &&
              a->adaptive == b->adaptive && a->block_min == b->block_min &&
              a->block_max == b->block_max);
    ck_assert_str_eq(a->token_sha256, b->token_sha256);
}

static bool parse(const char *s, seq_etcd_claim *c)
{
    return seq_etcd_claim_parse(s, strlen(s), c);
}

START_TEST(claim_round_trip)
{
    seq_etcd_claim c = {.next = UINT64_MAX - 1,
                        .lo = (UINT64_C(1) << 53) + 1,
                        .hi = UINT64_MAX - 1,
                        .worker = 4095,
                        .lease = 0x0123456789abcdefu,
                        .nonce = UINT64_MAX},
                   back;
    char buf[SEQ_ETCD_VALUE_MAX];
    int n = seq_etcd_claim_encode(&c, buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    ck_assert_str_eq(buf, "{\"v\":1,\"next\":\"18446744073709551614\",\"lo\":\"9007199254740993\","
                          "\"hi\":\"18446744073709551614\",\"worker\":4095,"
                          "\"lease\":\"0123456789abcdef\",\"nonce\":\"ffffffffffffffff\"}");
    ck_assert(seq_etcd_claim_parse(buf, (size_t)n, &back));
    ck_assert(back.next == c.next && back.lo == c.lo && back.hi == c.hi &&
              back.worker == c.worker && back.lease == c.lease && back.nonce == c.nonce);
    ck_assert_int_eq(seq_etcd_claim_encode(&c, buf, 40), -1); /* does not fit: refused */
}
END_TEST

START_TEST(claim_malformed)
{
    seq_etcd_claim c;
    const char *ok = "{\"v\":1,\"next\":\"5\",\"lo\":\"1\",\"hi\":\"5\",\"worker\":2,"
                     "\"lease\":\"0000000000000001\",\"nonce\":\"00000000000000ff\"}";
    ck_assert(parse(ok, &c));
    ck_assert(c.next == 5 && c.lo == 1 && c.hi == 5 && c.worker == 2 && c.lease == 1 &&
              c.nonce == 255);
    static const char *const bad[] = {
        "",
        "null",
        "[]",
        "{\"v\":2,\"next\":\"5\",\"lo\":\"1\",\"hi\":\"5\",\"worker\":2,\"lease\":\"0000000000000001\","
        "\"nonce\":\"00000000000000ff\"}", /* another version */
        "{\"v\":1,\"next\":5,\"lo\":\"1\",\"hi\":\"5\",\"worker\":2,\"lease\":\"0000000000000001\","
        "\"nonce\":\"00000000000000ff\"}", /* a JSON number: may have lost precision */
        "{\"v\":1,\"next\":\"5\",\"lo\":\"6\",\"hi\":\"5\",\"worker\":2,\"lease\":\"0000000000000001\","
        "\"nonce\":\"00000000000000ff\"}", /* lo > hi */
        "{\"v\":1,\"next\":\"5\",\"lo\":\"1\",\"hi\":\"5\",\"worker\":-1,\"lease\":\"0000000000000001\","
        "\"nonce\":\"00000000000000ff\"}",
        "{\"v\":1,\"next\":\"5\",\"lo\":\"1\",\"hi\":\"5\",\"worker\":2.5,\"lease\":\"0000000000000001\","
        "\"nonce\":\"00000000000000ff\"}",
        "{\"v\":1,\"next\":\"5\",\"lo\":\"1\",\"hi\":\"5\",\"worker\":2,\"lease\":\"1\","
        "\"nonce\":\"00000000000000ff\"}", /* not 16 hex digits */
        "{\"v\":1,\"next\":\"5\",\"lo\":\"1\",\"hi\":\"5\",\"worker\":2,\"lease\":\"0000000000000001\","
        "\"nonce\":\"00000000000000FG\"}",
        "{\"v\":1,\"next\":\"18446744073709551616\",\"lo\":\"1\",\"hi\":\"5\",\"worker\":2,"
        "\"lease\":\"0000000000000001\",\"nonce\":\"00000000000000ff\"}", /* past 2^64 - 1 */
        "{\"v\":1,\"next\":\"-5\",\"lo\":\"1\",\"hi\":\"5\",\"worker\":2,"
        "\"lease\":\"0000000000000001\",\"nonce\":\"00000000000000ff\"}",
        "{\"v\":1,\"lo\":\"1\",\"hi\":\"5\",\"worker\":2,\"lease\":\"0000000000000001\","
        "\"nonce\":\"00000000000000ff\"}", /* next missing */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!parse(bad[i], &c), "accepted %s", bad[i]);
    /* a value cut short (its length, not its NUL, ends it) */
    ck_assert(!seq_etcd_claim_parse(ok, strlen(ok) - 1, &c));
}
END_TEST

START_TEST(def_round_trip)
{
    seq_ns_def d, back;
    memset(&d, 0, sizeof d);
    strcpy(d.name, "orders.eu-1");
    d.start = 1;
    d.max = UINT64_MAX - 1;
    d.block = 1000;
    d.adaptive = true;
    d.block_min = 100;
    d.block_max = (UINT64_C(1) << 60) + 3;
    memset(d.token_sha256, 'a', SHA256_HEX_LEN);
    char buf[512];
    int n = seq_etcd_def_encode(&d, buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    ck_assert(seq_etcd_def_parse(buf, (size_t)n, "orders.eu-1", &back));
    same_def(&d, &back);
    d.token_sha256[0] = '\0'; /* none */
    d.adaptive = false;
    n = seq_etcd_def_encode(&d, buf, sizeof buf);
    ck_assert(seq_etcd_def_parse(buf, (size_t)n, "orders.eu-1", &back));
    same_def(&d, &back);
    /* a bad name (from a key), a token that is not lowercase hex, a number as a JSON number */
    ck_assert(!seq_etcd_def_parse(buf, (size_t)n, "../x", &back));
    const char *upper = "{\"v\":1,\"start\":\"1\",\"max\":\"9\",\"block\":\"1\",\"adaptive\":false,"
                        "\"block_min\":\"1\",\"block_max\":\"1\",\"token_sha256\":\"ABC\"}";
    ck_assert(!seq_etcd_def_parse(upper, strlen(upper), "x", &back));
    const char *num = "{\"v\":1,\"start\":1,\"max\":\"9\",\"block\":\"1\",\"adaptive\":false,"
                      "\"block_min\":\"1\",\"block_max\":\"1\",\"token_sha256\":\"\"}";
    ck_assert(!seq_etcd_def_parse(num, strlen(num), "x", &back));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("seq_etcd");
    TCase *tc = tcase_create("values");
    tcase_add_test(tc, claim_round_trip);
    tcase_add_test(tc, claim_malformed);
    tcase_add_test(tc, def_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
