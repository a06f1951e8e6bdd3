/* 128-bit IDs: RFC 9562's UUIDv7 example (appendix A.6) and the ULID spec's examples field by
 * field, every text form round trip, order kept by both texts, and each malformed input refused
 * with its reason. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "id128_parse.h"
#include "snowflake/id128.h"

/* RFC 9562 A.6: 017F22E2-79B0-7CC3-98C4-DC0C0C07398F, Tuesday February 22, 2022 2:22:22 PM GMT
 * (1645557742000 ms), rand_a 0xCC3, rand_b 0x18C4DC0C0C07398F. */
START_TEST(test_rfc9562_example)
{
    sf_id128 id = uuid("017F22E2-79B0-7CC3-98C4-DC0C0C07398F");
    sf_uuid7_fields f;
    const char *why;
    ck_assert(sf_uuid7_split(id, &f, &why));
    ck_assert_uint_eq(f.ms, UINT64_C(1645557742000));
    ck_assert_uint_eq(f.rand_a, 0xcc3);
    ck_assert_uint_eq(f.rand_b, UINT64_C(0x18C4DC0C0C07398F));
    sf_id128 made = sf_uuid7_make(f.ms, f.rand_a, f.rand_b);
    ck_assert_int_eq(sf_id128_cmp(made, id), 0);
    char text[SF_UUID_TEXT_LEN];
    ck_assert_uint_eq(sf_uuid_format(id, text), SF_UUID_TEXT_LEN);
    ck_assert_int_eq(memcmp(text, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f", SF_UUID_TEXT_LEN), 0);
    ck_assert_uint_eq(sf_uuid_format_compact(id, text), SF_UUID_COMPACT_LEN);
    ck_assert_int_eq(memcmp(text, "017f22e279b07cc398c4dc0c0c07398f", SF_UUID_COMPACT_LEN), 0);
    ck_assert_int_eq(sf_id128_cmp(uuid("017f22e279b07cc398c4dc0c0c07398f"), id), 0);
}
END_TEST

START_TEST(test_uuid_versions)
{
    sf_uuid7_fields f;
    const char *why = NULL;
    /* RFC 9562's version 4 example (A.3) and the nil UUID: valid UUIDs, not version 7. */
    ck_assert(!sf_uuid7_split(uuid("919108f7-52d1-4320-9bac-f847db4148a8"), &f, &why));
    ck_assert_str_eq(why, "not a version 7 UUID");
    ck_assert(!sf_uuid7_split(uuid("00000000-0000-0000-0000-000000000000"), &f, &why));
    /* version 7, variant 110 (Microsoft's) */
    ck_assert(!sf_uuid7_split(uuid("017f22e2-79b0-7cc3-d8c4-dc0c0c07398f"), &f, &why));
    ck_assert_str_eq(why, "not a UUID of the RFC 9562 variant (10)");
    /* the largest fields */
    sf_id128 max = sf_uuid7_make(SF_ID128_MS_MAX, SF_UUID7_RAND_A_MAX, SF_UUID7_RAND_B_MAX);
    char text[SF_UUID_TEXT_LEN];
    sf_uuid_format(max, text);
    ck_assert_int_eq(memcmp(text, "ffffffff-ffff-7fff-bfff-ffffffffffff", SF_UUID_TEXT_LEN), 0);
    ck_assert(sf_uuid7_split(max, &f, &why));
    ck_assert_uint_eq(f.ms, SF_ID128_MS_MAX);
}
END_TEST

/* The ULID spec and the npm ulid package: 01ARYZ6S41TSV4RRFFQ69G5FAV was made at 1469918176385;
 * the largest is 7ZZZZZZZZZZZZZZZZZZZZZZZZZ. */
START_TEST(test_ulid_examples)
{
    sf_id128 id = ulid("01ARYZ6S41TSV4RRFFQ69G5FAV");
    ck_assert_uint_eq(sf_id128_ms(id), UINT64_C(1469918176385));
    char text[SF_ULID_TEXT_LEN];
    ck_assert_uint_eq(sf_ulid_format(id, text), SF_ULID_TEXT_LEN);
    ck_assert_int_eq(memcmp(text, "01ARYZ6S41TSV4RRFFQ69G5FAV", SF_ULID_TEXT_LEN), 0);
    /* lowercase and Crockford's aliases read as their digits */
    ck_assert_int_eq(sf_id128_cmp(ulid("01aryz6s41tsv4rrffq69g5fav"), id), 0);
    ck_assert_int_eq(sf_id128_cmp(ulid("OIARYZ6S4ITSV4RRFFQ69G5FAV"), id), 0);
    sf_id128 max = ulid("7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
    ck_assert_uint_eq(max.hi, UINT64_MAX);
    ck_assert_uint_eq(max.lo, UINT64_MAX);
    ck_assert_uint_eq(sf_id128_ms(max), SF_ID128_MS_MAX);
    sf_id128 zero = ulid("00000000000000000000000000");
    ck_assert(zero.hi == 0 && zero.lo == 0);
    sf_id128 made = sf_ulid_make(UINT64_C(1469918176385), 0xabcd, UINT64_C(0x0123456789abcdef));
    ck_assert_uint_eq(made.hi & 0xffff, 0xabcd);
    char z[SF_ULID_TEXT_LEN + 1] = {0};
    sf_ulid_format(made, z);
    ck_assert_int_eq(sf_id128_cmp(ulid(z), made), 0);
    ck_assert_int_eq(memcmp(z, "01ARYZ6S41", 10), 0); /* the same millisecond's 10 digits */
}
END_TEST

/* Pseudo-random 128-bit values: every text form parses back to the value, and comparing the
 * texts byte by byte orders them as the values (the property a database key needs). */
START_TEST(test_round_trips_and_order)
{
    uint64_t x = 0x9e3779b97f4a7c15u;
    sf_id128 prev = {0, 0};
    char prev_uuid[SF_UUID_TEXT_LEN], prev_ulid[SF_ULID_TEXT_LEN];
    sf_uuid_format(prev, prev_uuid);
    sf_ulid_format(prev, prev_ulid);
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        sf_id128 id = {.hi = x, .lo = x * 0xff51afd7ed558ccdu};
        if (i % 7 == 0) /* runs of equal high halves: the low half decides */
            id.hi = prev.hi;
        char u[SF_UUID_TEXT_LEN], c[SF_UUID_COMPACT_LEN], l[SF_ULID_TEXT_LEN];
        sf_uuid_format(id, u);
        sf_uuid_format_compact(id, c);
        sf_ulid_format(id, l);
        sf_id128 a, b, d;
        const char *why;
        bad += sf_uuid_parse(u, sizeof u, &a, &why) != 0 || sf_id128_cmp(a, id) != 0;
        bad += sf_uuid_parse(c, sizeof c, &b, &why) != 0 || sf_id128_cmp(b, id) != 0;
        bad += sf_ulid_parse(l, sizeof l, &d, &why) != 0 || sf_id128_cmp(d, id) != 0;
        int order = sf_id128_cmp(id, prev);
        int su = memcmp(u, prev_uuid, sizeof u), sl = memcmp(l, prev_ulid, sizeof l);
        bad += (order > 0) != (su > 0) || (order < 0) != (su < 0);
        bad += (order > 0) != (sl > 0) || (order < 0) != (sl < 0);
        prev = id;
        memcpy(prev_uuid, u, sizeof u);
        memcpy(prev_ulid, l, sizeof l);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(test_malformed)
{
    static const struct {
        const char *text, *why;
    } uuids[] = {
        {"", "a UUID is 36 characters (8-4-4-4-12 hex) or 32 hex digits"},
        {"017f22e2-79b0-7cc3-98c4-dc0c0c07398", "a UUID is 36 characters (8-4-4-4-12 hex) or 32 hex digits"},
        {"{017f22e2-79b0-7cc3-98c4-dc0c0c0739}", "a UUID has hex digits only (and its 4 hyphens)"},
        {"017f22e2079b0-7cc3-98c4-dc0c0c07398f", "a UUID has hyphens after hex digits 8, 12, 16 and 20"},
        {"017f22e2-79b0-7cc3-98c4-dc0c0c07398g", "a UUID has hex digits only (and its 4 hyphens)"},
        {"017f22e2-79b0-7cc3-98c4+dc0c0c07398f", "a UUID has hyphens after hex digits 8, 12, 16 and 20"},
        {"017f22e279b07cc398c4dc0c0c07398-", "a UUID has hex digits only (and its 4 hyphens)"},
        {"017f22e2-79b0-7cc3-98c4-dc0c0c07398\0", "a UUID has hex digits only (and its 4 hyphens)"},
    };
    for (size_t i = 0; i < sizeof uuids / sizeof uuids[0]; i++) {
        sf_id128 id;
        const char *why = NULL;
        size_t len = i == 7 ? SF_UUID_TEXT_LEN : strlen(uuids[i].text);
        ck_assert_int_eq(sf_uuid_parse(uuids[i].text, len, &id, &why), -1);
        ck_assert_str_eq(why, uuids[i].why);
    }
    static const struct {
        const char *text, *why;
    } ulids[] = {
        {"01ARYZ6S41TSV4RRFFQ69G5FA", "a ULID is 26 characters of Crockford's base32"},
        {"01ARYZ6S41TSV4RRFFQ69G5FAVV", "a ULID is 26 characters of Crockford's base32"},
        {"80000000000000000000000000",
         "a ULID's first digit is at most 7 (its value would exceed 128 bits)"},
        {"01ARYZ6S41TSV4RRFFQ69G5FAU",
         "a ULID has Crockford's base32 digits only (0-9, A-Z without I L O U, or their lowercase "
         "and aliases)"},
        {"01ARYZ6S41-SV4RRFFQ69G5FAV",
         "a ULID has Crockford's base32 digits only (0-9, A-Z without I L O U, or their lowercase "
         "and aliases)"},
    };
    for (size_t i = 0; i < sizeof ulids / sizeof ulids[0]; i++) {
        sf_id128 id;
        const char *why = NULL;
        ck_assert_int_eq(sf_ulid_parse(ulids[i].text, strlen(ulids[i].text), &id, &why), -1);
        ck_assert_str_eq(why, ulids[i].why);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("id128");
    TCase *tc = tcase_create("id128");
    tcase_add_test(tc, test_rfc9562_example);
    tcase_add_test(tc, test_uuid_versions);
    tcase_add_test(tc, test_ulid_examples);
    tcase_add_test(tc, test_round_trips_and_order);
    tcase_add_test(tc, test_malformed);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
