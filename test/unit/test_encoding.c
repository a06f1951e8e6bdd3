/* Encodings: known vectors, round trips at the edges and at random, sort order, strict parsing. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "snowflake/encoding.h"

static void expect_format(sf_encoding enc, uint64_t v, const char *want)
{
    char buf[SF_ENC_MAX_LEN + 1];
    size_t n = sf_enc_format(enc, v, buf);
    buf[n] = '\0';
    ck_assert_str_eq(buf, want);
}

START_TEST(test_known_vectors)
{
    expect_format(SF_ENC_DEC, 0, "0");
    expect_format(SF_ENC_DEC, UINT64_MAX, "18446744073709551615");
    expect_format(SF_ENC_HEX, 0x0123456789abcdefULL, "0123456789abcdef");
    expect_format(SF_ENC_HEX, 1, "0000000000000001");
    expect_format(SF_ENC_BASE62, 0, "00000000000");
    expect_format(SF_ENC_BASE62, 61, "0000000000z");
    expect_format(SF_ENC_BASE62, 62, "00000000010");
    expect_format(SF_ENC_BASE62, UINT64_MAX, "LygHa16AHYF");
    expect_format(SF_ENC_BASE32, 0, "0000000000000");
    expect_format(SF_ENC_BASE32, 31, "000000000000Z");
    expect_format(SF_ENC_BASE32, UINT64_MAX, "FZZZZZZZZZZZZ");
}
END_TEST

static void round_trip(uint64_t v)
{
    for (int e = 0; e < SF_ENC_COUNT; e++) {
        char buf[SF_ENC_MAX_LEN];
        size_t n = sf_enc_format((sf_encoding)e, v, buf);
        uint64_t back = ~v;
        ck_assert_msg(sf_enc_parse((sf_encoding)e, buf, n, &back) == 0, "%s of %llu",
                      sf_enc_name((sf_encoding)e), (unsigned long long)v);
        ck_assert_uint_eq(back, v);
    }
}

START_TEST(test_round_trips)
{
    uint64_t edges[] = {0, 1, 9, 10, 61, 62, 63, INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        round_trip(edges[i]);
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < 20000; i++) { /* xorshift: values of every magnitude */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        round_trip(x >> (i % 64));
    }
}
END_TEST

/* Padded encodings compare as strings the way the numbers compare. */
START_TEST(test_padded_sort_order)
{
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 5000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t a = x >> (i % 63), b = (x * 2654435761u) >> ((i * 7) % 63);
        for (int e = SF_ENC_HEX; e < SF_ENC_COUNT; e++) {
            char sa[SF_ENC_MAX_LEN], sb[SF_ENC_MAX_LEN];
            size_t na = sf_enc_format((sf_encoding)e, a, sa),
                   nb = sf_enc_format((sf_encoding)e, b, sb);
            ck_assert_uint_eq(na, nb);
            int c = memcmp(sa, sb, na);
            ck_assert((c < 0) == (a < b) && (c == 0) == (a == b));
        }
    }
}
END_TEST

static int parse(sf_encoding enc, const char *s, uint64_t *v)
{
    return sf_enc_parse(enc, s, strlen(s), v);
}

START_TEST(test_strict_parsing)
{
    uint64_t v;
    ck_assert_int_eq(parse(SF_ENC_DEC, "", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_DEC, "-1", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_DEC, "+1", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_DEC, " 1", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_DEC, "1 ", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_DEC, "12a", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_DEC, "18446744073709551616", &v), -1);  /* 2^64 */
    ck_assert_int_eq(parse(SF_ENC_DEC, "000000000000000000001", &v), -1); /* 21 digits */
    ck_assert_int_eq(parse(SF_ENC_DEC, "18446744073709551615", &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert_int_eq(parse(SF_ENC_HEX, "0x10", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_HEX, "ABCDEF", &v), 0);
    ck_assert_uint_eq(v, 0xABCDEF);
    ck_assert_int_eq(parse(SF_ENC_HEX, "g", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_HEX, "10000000000000000", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_BASE62, "LygHa16AHYG", &v), -1); /* 2^64 */
    ck_assert_int_eq(parse(SF_ENC_BASE62, "zzzzzzzzzzz", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_BASE62, "a-b", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_BASE32, "G000000000000", &v), -1); /* 2^64 */
    ck_assert_int_eq(parse(SF_ENC_BASE32, "U", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_BASE32, "1-2", &v), -1);
    ck_assert_int_eq(parse(SF_ENC_BASE32, "oIl", &v), 0); /* Crockford aliases, any case */
    ck_assert_uint_eq(v, 0 * 1024 + 1 * 32 + 1);
    ck_assert_int_eq(sf_enc_parse(SF_ENC_DEC,
                                  "12\0"
                                  "3",
                                  4, &v),
                     -1); /* embedded NUL */
    ck_assert_int_eq(sf_enc_parse(SF_ENC_BASE32, "\0", 1, &v), -1);
    ck_assert_int_eq(sf_enc_parse((sf_encoding)99, "1", 1, &v), -1);
}
END_TEST

START_TEST(test_names)
{
    sf_encoding e;
    ck_assert_int_eq(sf_enc_parse_name("base62", 6, &e), 0);
    ck_assert_int_eq(e, SF_ENC_BASE62);
    ck_assert_int_eq(sf_enc_parse_name("decimal", 7, &e), 0);
    ck_assert_int_eq(e, SF_ENC_DEC);
    ck_assert_int_eq(sf_enc_parse_name("base64", 6, &e), -1);
    ck_assert_int_eq(sf_enc_parse_name("hexx", 3, &e), 0); /* length-delimited, not C strings */
    ck_assert_int_eq(e, SF_ENC_HEX);
    ck_assert_str_eq(sf_enc_name(SF_ENC_BASE32), "base32");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("encoding");
    TCase *tc = tcase_create("encoding");
    tcase_add_test(tc, test_known_vectors);
    tcase_add_test(tc, test_round_trips);
    tcase_add_test(tc, test_padded_sort_order);
    tcase_add_test(tc, test_strict_parsing);
    tcase_add_test(tc, test_names);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
