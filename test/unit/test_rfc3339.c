/* util/rfc3339: both reading profiles (clients' and the configuration's), rounding of fractions
 * below the millisecond, offsets, every refusal with its reason, and formatting (round trip over
 * the whole range, years beyond 9999). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "util/rfc3339.h"

#define JAN_2026 UINT64_C(1767225600000) /* 2026-01-01T00:00:00Z */

static uint64_t ok(const char *s, bool round_up)
{
    uint64_t ms = 0;
    const char *why = "(none)";
    ck_assert_msg(rfc3339_parse_ms(s, strlen(s), round_up, &ms, &why) == 0, "%s: %s", s, why);
    return ms;
}

static void bad(const char *s, const char *reason)
{
    uint64_t ms = 42;
    const char *why = NULL;
    ck_assert_msg(rfc3339_parse_ms(s, strlen(s), false, &ms, &why) == -1, "%s parsed", s);
    ck_assert_msg(why && strstr(why, reason), "%s: '%s' does not say '%s'", s, why, reason);
    ck_assert_uint_eq(ms, 42); /* untouched on failure */
}

START_TEST(test_basic_forms)
{
    ck_assert_uint_eq(ok("2026-01-01T00:00:00Z", false), JAN_2026);
    ck_assert_uint_eq(ok("2026-01-01t00:00:00z", false), JAN_2026);
    ck_assert_uint_eq(ok("2026-01-01T01:00:00+01:00", false), JAN_2026);
    ck_assert_uint_eq(ok("2025-12-31T19:30:00-04:30", false), JAN_2026);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00-00:00", false), JAN_2026);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.250Z", false), JAN_2026 + 250);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.25Z", false), JAN_2026 + 250);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.2Z", false), JAN_2026 + 200);
    ck_assert_uint_eq(ok("2026-01-01T01:00:00.250+01:00", false), JAN_2026 + 250);
    ck_assert_uint_eq(ok("1970-01-01T00:00:00Z", false), 0);
    ck_assert_uint_eq(ok("1969-12-31T23:00:00-01:00", false), 0);
    ck_assert_uint_eq(ok("2000-02-29T12:34:56.789Z", false), UINT64_C(951827696789));
    ck_assert_uint_eq(ok("9999-12-31T23:59:59.999Z", false), RFC3339_MS_MAX);
    /* digits only: Unix ms */
    ck_assert_uint_eq(ok("0", false), 0);
    ck_assert_uint_eq(ok("1767225600000", false), JAN_2026);
    ck_assert_uint_eq(ok("001767225600000", true), JAN_2026);
    ck_assert_uint_eq(ok("253402300799999", false), RFC3339_MS_MAX);
}
END_TEST

/* Fractions below the millisecond: floor, or ceil with round_up (any length). */
START_TEST(test_fraction_rounding)
{
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.0001Z", false), JAN_2026);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.0001Z", true), JAN_2026 + 1);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.2509Z", false), JAN_2026 + 250);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.2509Z", true), JAN_2026 + 251);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.250000000Z", true), JAN_2026 + 250);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.999999999999999999999999Z", false), JAN_2026 + 999);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.999999999999999999999999Z", true), JAN_2026 + 1000);
    ck_assert_uint_eq(ok("2025-12-31T23:59:59.9991Z", true), JAN_2026);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00.000000000000000000000001Z", true), JAN_2026 + 1);
    ck_assert_uint_eq(ok("2026-01-01T00:00:00Z", true), JAN_2026); /* whole ms: nothing to raise */
}
END_TEST

START_TEST(test_refusals)
{
    bad("", "expected YYYY-MM-DDTHH:MM:SS");
    bad("2026-01-01", "expected YYYY-MM-DDTHH:MM:SS");
    bad("2026-01-01 00:00:00Z", "expected");
    bad("2026-1-01T00:00:00Z", "expected");
    bad("-1", "expected");
    bad("1e3", "expected");
    bad("2026-01-01T00:00:00", "time zone is required");
    bad("2026-01-01T00:00:00.Z", "at least one digit");
    bad("2026-01-01T00:00:00ZZ", "unexpected characters");
    bad("2026-01-01T00:00:00Z ", "unexpected characters");
    bad("2026-01-01T00:00:00+0100", "+hh:mm");
    bad("2026-01-01T00:00:00+01", "+hh:mm");
    bad("2026-01-01T00:00:00+01:00:00", "unexpected characters");
    bad("2026-01-01T00:00:00+24:00", "offset out of range");
    bad("2026-01-01T00:00:00+01:60", "offset out of range");
    bad("2026-01-01T00:00:00 01:00", "encode + as %2B");
    bad("2026-13-01T00:00:00Z", "month");
    bad("2026-00-01T00:00:00Z", "month");
    bad("2023-02-29T00:00:00Z", "day out of range");
    bad("2026-04-31T00:00:00Z", "day out of range");
    bad("2026-01-00T00:00:00Z", "day out of range");
    bad("2026-01-01T24:00:00Z", "time of day");
    bad("2026-01-01T00:60:00Z", "time of day");
    bad("2016-12-31T23:59:60Z", "leap second");
    bad("1969-12-31T23:59:59.999Z", "before 1970");
    bad("1970-01-01T00:30:00+01:00", "before 1970");
    bad("9999-12-31T23:59:59.999-00:01", "after 9999");
    bad("253402300800000", "0..253402300799999");
    bad("99999999999999999999999", "0..253402300799999");
    /* ceil past the end is refused too */
    uint64_t ms;
    const char *why = NULL;
    const char *s = "9999-12-31T23:59:59.9991Z";
    ck_assert_int_eq(rfc3339_parse_ms(s, strlen(s), true, &ms, &why), -1);
    ck_assert_ptr_nonnull(strstr(why, "after 9999"));
    /* exactly len bytes: what follows is not read */
    ck_assert_int_eq(rfc3339_parse_ms("2026-01-01T00:00:00Zjunk", 20, false, &ms, &why), 0);
    ck_assert_uint_eq(ms, JAN_2026);
    ck_assert_int_eq(rfc3339_parse_ms("2026-01-01T00:00:00Z", 19, false, &ms, &why), -1);
}
END_TEST

/* The configuration's profile: UTC, upper case, 1-3 fraction digits, no Unix ms. */
START_TEST(test_utc_profile)
{
    uint64_t ms = 0;
    const char *why = NULL;
    const char *good[] = {"2026-01-01T00:00:00Z", "2026-01-01T00:00:00.5Z"};
    const uint64_t want[] = {JAN_2026, JAN_2026 + 500};
    for (size_t i = 0; i < 2; i++) {
        ck_assert_int_eq(rfc3339_parse_utc_ms(good[i], strlen(good[i]), &ms, &why), 0);
        ck_assert_uint_eq(ms, want[i]);
    }
    const char *refused[][2] = {
        {"2026-01-01T00:00:00+01:00", "only UTC"}, {"2026-01-01T00:00:00z", "only UTC"},
        {"2026-01-01t00:00:00Z", "expected YYYY-MM-DDTHH:MM:SS[.mmm]Z"},
        {"2026-01-01T00:00:00", "only UTC"},       {"2026-01-01T00:00:00.1234Z", "1 to 3"},
        {"2026-01-01T00:00:00.Z", "1 to 3"},       {"1767225600000", "expected"},
        {"1969-12-31T23:59:59Z", "1970"},          {"2026-01-01T00:00:60Z", "time of day"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        why = NULL;
        ck_assert_msg(rfc3339_parse_utc_ms(refused[i][0], strlen(refused[i][0]), &ms, &why) == -1,
                      "%s parsed", refused[i][0]);
        ck_assert_msg(strstr(why, refused[i][1]), "%s: %s", refused[i][0], why);
    }
}
END_TEST

START_TEST(test_format)
{
    char out[RFC3339_FORMAT_CAP];
    ck_assert_uint_eq(rfc3339_format_ms(JAN_2026, out), RFC3339_TEXT_LEN);
    ck_assert_str_eq(out, "2026-01-01T00:00:00.000Z");
    rfc3339_format_ms(0, out);
    ck_assert_str_eq(out, "1970-01-01T00:00:00.000Z");
    rfc3339_format_ms(UINT64_C(951827696789), out);
    ck_assert_str_eq(out, "2000-02-29T12:34:56.789Z");
    ck_assert_uint_eq(rfc3339_format_ms(RFC3339_MS_MAX, out), RFC3339_TEXT_LEN);
    ck_assert_str_eq(out, "9999-12-31T23:59:59.999Z");
    ck_assert_uint_eq(rfc3339_format_ms(RFC3339_MS_MAX + 1, out), 25);
    ck_assert_str_eq(out, "10000-01-01T00:00:00.000Z");
    /* the ULID/UUIDv7 limit, 2^48-1 ms */
    rfc3339_format_ms((UINT64_C(1) << 48) - 1, out);
    ck_assert_str_eq(out, "10889-08-02T05:31:50.655Z");
    size_t n = rfc3339_format_ms(UINT64_MAX, out);
    ck_assert_uint_lt(n, RFC3339_FORMAT_CAP);
    ck_assert_uint_eq(strlen(out), n);
}
END_TEST

/* format then parse gives the value back, at day edges, leap days and spread over the range. */
START_TEST(test_round_trip)
{
    char out[RFC3339_FORMAT_CAP];
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 200000; i++) {
        uint64_t ms;
        if (i < 1000)
            ms = (uint64_t)i * 86400000 - (i > 0); /* last ms of each of the first days */
        else {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            ms = x % (RFC3339_MS_MAX + 1);
        }
        size_t n = rfc3339_format_ms(ms, out);
        ck_assert_uint_eq(n, RFC3339_TEXT_LEN);
        uint64_t back = ~ms;
        const char *why = NULL;
        ck_assert_msg(rfc3339_parse_ms(out, n, false, &back, &why) == 0 && back == ms,
                      "%s: %s", out, why ? why : "");
        ck_assert_int_eq(rfc3339_parse_utc_ms(out, n, &back, &why), 0);
        ck_assert_uint_eq(back, ms);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("rfc3339");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_basic_forms);
    tcase_add_test(tc, test_fraction_rounding);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_utc_profile);
    tcase_add_test(tc, test_format);
    tcase_add_test(tc, test_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
