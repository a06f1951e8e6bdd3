/* util/decimal: dec_parse_u64's contract row by row: what it accepts (leading zeros, the limits
 * 0 and 2^64 - 1, max exactly), and every refusal (empty, signs, white space, other bytes, a NUL,
 * too many digits, above max, beyond 2^64 - 1), with *v untouched on a refusal. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/decimal.h"

static const struct {
    const char *s;
    uint64_t max, v;
} GOOD[] = {
    {"0", UINT64_MAX, 0},
    {"7", UINT64_MAX, 7},
    {"007", UINT64_MAX, 7},  /* leading zeros */
    {"00", UINT64_MAX, 0},
    {"18446744073709551615", UINT64_MAX, UINT64_MAX},   /* 2^64 - 1: 20 digits */
    {"00000000000000000001", UINT64_MAX, 1},            /* 20 digits, zero-padded */
    {"4096", 4096, 4096},                                /* max itself */
    {"65535", 65535, 65535},
    {"0", 0, 0},                                         /* max 0 */
    {"9", 9, 9},
    {"1844674407370955161", UINT64_MAX, 1844674407370955161u},
};

START_TEST(test_accepts)
{
    for (size_t i = 0; i < sizeof GOOD / sizeof GOOD[0]; i++) {
        uint64_t v = 12345;
        ck_assert_msg(dec_parse_u64(GOOD[i].s, strlen(GOOD[i].s), GOOD[i].max, &v), "'%s' refused",
                      GOOD[i].s);
        ck_assert_msg(v == GOOD[i].v, "'%s' read as %llu", GOOD[i].s, (unsigned long long)v);
    }
    /* n bounds the text: digits after it are not read */
    uint64_t v = 0;
    ck_assert(dec_parse_u64("12345", 3, UINT64_MAX, &v));
    ck_assert_uint_eq(v, 123);
}
END_TEST

static const struct {
    const char *s;
    uint64_t max;
} BAD[] = {
    {"", UINT64_MAX},
    {"+1", UINT64_MAX}, {"-1", UINT64_MAX}, {"-0", UINT64_MAX},          /* signs */
    {" 1", UINT64_MAX}, {"1 ", UINT64_MAX}, {"1 2", UINT64_MAX},         /* white space */
    {"\t1", UINT64_MAX}, {"1\n", UINT64_MAX}, {"1\r", UINT64_MAX},
    {"0x10", UINT64_MAX}, {"1e3", UINT64_MAX}, {"1_000", UINT64_MAX},    /* other bytes */
    {"1.0", UINT64_MAX}, {"1,0", UINT64_MAX}, {"abc", UINT64_MAX}, {"\xd9\xa1", UINT64_MAX},
    {"18446744073709551616", UINT64_MAX},                                 /* 2^64 */
    {"18446744073709551620", UINT64_MAX},
    {"99999999999999999999", UINT64_MAX},
    {"000000000000000000001", UINT64_MAX},                                /* 21 digits */
    {"4097", 4096}, {"10", 9}, {"1", 0}, {"65536", 65535},                /* above max */
    {"7", 5},                                                             /* a digit above max */
    {"100000", 65535},
};

START_TEST(test_refuses)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        uint64_t v = 12345;
        ck_assert_msg(!dec_parse_u64(BAD[i].s, strlen(BAD[i].s), BAD[i].max, &v), "'%s' accepted",
                      BAD[i].s);
        ck_assert_msg(v == 12345, "'%s' wrote *v on a refusal", BAD[i].s);
    }
    uint64_t v = 12345;
    ck_assert(!dec_parse_u64("1\0" "2", 3, UINT64_MAX, &v)); /* a NUL inside the text */
    ck_assert(!dec_parse_u64(NULL, 0, UINT64_MAX, &v));
    ck_assert_uint_eq(v, 12345);
}
END_TEST

/* Every value 0..9999 under every max 0..120 agrees with plain arithmetic (the overflow test
 * must not refuse a value at max or accept one past it). */
START_TEST(test_small_max_exhaustive)
{
    char s[8];
    for (uint64_t max = 0; max <= 120; max++) {
        for (uint64_t x = 0; x < 10000; x++) {
            size_t n = (size_t)snprintf(s, sizeof s, "%llu", (unsigned long long)x);
            uint64_t v = UINT64_MAX;
            bool ok = dec_parse_u64(s, n, max, &v);
            ck_assert_msg(ok == (x <= max), "%llu under max %llu", (unsigned long long)x,
                          (unsigned long long)max);
            if (ok)
                ck_assert_uint_eq(v, x);
        }
    }
}
END_TEST

/* Near 2^64: every value from 2^64 - 1000 up, under max UINT64_MAX and under a max just below. */
START_TEST(test_near_the_top)
{
    char s[24];
    for (uint64_t x = UINT64_MAX - 1000; x != 0; x++) {
        size_t n = (size_t)snprintf(s, sizeof s, "%llu", (unsigned long long)x);
        uint64_t v = 0;
        ck_assert(dec_parse_u64(s, n, UINT64_MAX, &v));
        ck_assert(v == x);
        ck_assert(dec_parse_u64(s, n, UINT64_MAX - 500, &v) == (x <= UINT64_MAX - 500));
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("decimal");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_accepts);
    tcase_add_test(tc, test_refuses);
    tcase_add_test(tc, test_small_max_exhaustive);
    tcase_add_test(tc, test_near_the_top);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
