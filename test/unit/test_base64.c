/* util/base64: the RFC 4648 test vectors both ways, bytes with NUL and high bits, a round trip
 * over every length 0..64, the buffer limits, and every strict refusal with its reason. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "check_main.h"
#include "util/base64.h"

static const char *const VECTORS[][2] = {
    {"", ""},          {"f", "Zg=="},         {"fo", "Zm8="},         {"foo", "Zm9v"},
    {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
    {"/snowflaked/owner/0/3", "L3Nub3dmbGFrZWQvb3duZXIvMC8z"},
};

START_TEST(test_vectors)
{
    for (size_t i = 0; i < sizeof VECTORS / sizeof VECTORS[0]; i++) {
        const char *plain = VECTORS[i][0], *enc = VECTORS[i][1];
        char out[64];
        ck_assert_int_eq(b64_encode(plain, strlen(plain), out, sizeof out), (ssize_t)strlen(enc));
        ck_assert_str_eq(out, enc);
        const char *why = NULL;
        char dec[64];
        ssize_t n = b64_decode(enc, strlen(enc), dec, sizeof dec, &why);
        ck_assert_msg(n == (ssize_t)strlen(plain), "%s: %s", enc, why);
        ck_assert(memcmp(dec, plain, (size_t)n) == 0);
    }
}
END_TEST

START_TEST(test_round_trip_binary)
{
    uint8_t src[64], dec[64];
    char enc[100];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 37 + 0x80 * (i & 1)); /* NULs, high bits, '+' and '/' digits */
    src[0] = 0;
    for (size_t len = 0; len <= sizeof src; len++) {
        ssize_t e = b64_encode(src, len, enc, sizeof enc);
        ck_assert_int_eq(e, (ssize_t)b64_encoded_len(len));
        const char *why = NULL;
        ssize_t d = b64_decode(enc, (size_t)e, dec, sizeof dec, &why);
        ck_assert_msg(d == (ssize_t)len, "len %zu: %s", len, why);
        ck_assert(memcmp(src, dec, len) == 0);
    }
    /* 0xFB 0xFF: both alphabet extras. */
    ck_assert_int_eq(b64_encode("\xfb\xff", 2, enc, sizeof enc), 4);
    ck_assert_str_eq(enc, "+/8=");
}
END_TEST

START_TEST(test_limits)
{
    char out[8];
    memset(out, 'x', sizeof out);
    /* "foob" needs 8 bytes + NUL. */
    ck_assert_int_eq(b64_encode("foob", 4, out, 8), -1);
    ck_assert_int_eq(out[0], 'x');
    ck_assert_int_eq(b64_encode("foo", 3, out, 5), 4);
    const char *why = NULL;
    ck_assert_int_eq(b64_decode("Zm9vYmFy", 8, out, 5, &why), -1);
    ck_assert_ptr_nonnull(strstr(why, "longer than the buffer"));
    ck_assert_int_eq(b64_decode("Zm9vYmFy", 8, out, 6, &why), 6);
}
END_TEST

static void bad(const char *s, const char *reason)
{
    char out[32];
    const char *why = NULL;
    ck_assert_msg(b64_decode(s, strlen(s), out, sizeof out, &why) == -1, "'%s' decoded", s);
    ck_assert_msg(why && strstr(why, reason), "'%s': '%s' does not say '%s'", s, why, reason);
}

START_TEST(test_refusals)
{
    bad("Zm9", "multiple of 4");
    bad("Zm9vY", "multiple of 4");
    bad("Zm9v\n", "multiple of 4");
    bad("Zm-v", "alphabet");  /* URL-safe alphabet is not ours */
    bad("Zm_v", "alphabet");
    bad("Zm 9v", "multiple of 4");
    bad("Zm 9", "alphabet");
    bad("Zm9v====", "padding");
    bad("Z===", "padding");
    bad("Zg=a", "padding");   /* "=" then data: padding inside the value */
    bad("Zm=vYg==", "padding");
    bad("Zh==", "unused bits"); /* 'f' is Zg==; Zh== has a stray low bit */
    bad("Zm9=", "unused bits");
    bad("Zm\x80v", "alphabet");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("base64");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_vectors);
    tcase_add_test(tc, test_round_trip_binary);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
