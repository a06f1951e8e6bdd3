/* util/base64: the RFC 4648 test vectors both ways, bytes with NUL and high bits, a round trip
 * over every length 0..64 through both decoders, the buffer limits, every strict refusal with its
 * reason, and memcached's lenient decoder: what it accepts beyond the strict one (each rule of
 * memcached's base64.c) and what it still refuses. */
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

START_TEST(test_encode_to_writes_no_nul)
{
    char out[16];
    memset(out, 'x', sizeof out);
    ck_assert_uint_eq(b64_encode_to("fo", 2, out), 4);
    ck_assert(memcmp(out, "Zm8=x", 5) == 0);
    ck_assert_uint_eq(b64_encode_to("", 0, out), 0);
    ck_assert_uint_eq(b64_encode_to("foobar", 6, out), 8);
    ck_assert(memcmp(out, "Zm9vYmFyx", 9) == 0);
}
END_TEST

/* Every canonical encoding decodes the same through memcached's decoder (length 0 aside: an empty
 * key is refused, as memcached returns 0 for it). */
START_TEST(test_memcached_round_trip)
{
    uint8_t src[64], dec[66]; /* the padding comes off after the check: 64 bytes need 66 */
    char enc[100];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 37 + 0x80 * (i & 1));
    src[0] = 0;
    for (size_t len = 1; len <= sizeof src; len++) {
        size_t e = b64_encode_to(src, len, enc);
        ck_assert_uint_eq(b64_decode_memcached(enc, e, dec, sizeof dec), len);
        ck_assert(memcmp(src, dec, len) == 0);
    }
    for (size_t i = 1; i < sizeof VECTORS / sizeof VECTORS[0]; i++) {
        const char *plain = VECTORS[i][0], *e = VECTORS[i][1];
        ck_assert_uint_eq(b64_decode_memcached(e, strlen(e), dec, sizeof dec), strlen(plain));
        ck_assert(memcmp(dec, plain, strlen(plain)) == 0);
    }
    ck_assert_uint_eq(b64_decode_memcached("", 0, dec, sizeof dec), 0);
}
END_TEST

/* What memcached's decoder takes that the strict one refuses, row by row with the bytes it gives
 * (checked against memcached's base64.c). */
static const struct {
    const char *in, *out;
    size_t out_len;
} LENIENT[] = {
    {"Zm9v!", "foo", 3},       /* a byte outside the alphabet is skipped... */
    {"Zm 9v", "foo", 3},       /* ...a blank too */
    {"Zm9v\r\n", "foo", 3},    /* ...and a line end */
    {"-Zm9v_", "foo", 3},      /* the URL-safe extras are not digits: skipped */
    {"Z\x80m9v\xff", "foo", 3}, /* so are bytes >= 0x80 */
    {"Zh==", "f", 1},          /* non-zero unused bits of a padded group */
    {"Zm9=", "fo", 2},
    {"Zg==Zm9v", "f", 1},      /* the first padded group ends the value */
    {"Zg==!!", "f", 1},
    {"Zg= =", "f", 1},         /* a blank between the '=' */
    {"Z=g=", "d", 1},          /* '=' inside the group: a digit 0, still counted as padding */
    {"AB==", "\0", 1},        /* a NUL byte, from a group with a stray bit */
};

START_TEST(test_memcached_lenient)
{
    for (size_t i = 0; i < sizeof LENIENT / sizeof LENIENT[0]; i++) {
        char dec[32];
        const char *why = NULL;
        size_t n = b64_decode_memcached(LENIENT[i].in, strlen(LENIENT[i].in), dec, sizeof dec);
        ck_assert_msg(n == LENIENT[i].out_len, "'%s': %zu bytes", LENIENT[i].in, n);
        ck_assert_msg(memcmp(dec, LENIENT[i].out, n) == 0, "'%s': other bytes", LENIENT[i].in);
        ck_assert_msg(b64_decode(LENIENT[i].in, strlen(LENIENT[i].in), dec, sizeof dec, &why) < 0,
                      "'%s' passes the strict decoder too", LENIENT[i].in);
    }
}
END_TEST

START_TEST(test_memcached_refusals)
{
    static const char *const bad_keys[] = {
        "",         /* no digits */
        "!!!!",     /* no digits either */
        "a!",       /* 1 digit */
        "Zm9",      /* 3 */
        "Zm9vY",    /* 5 */
        "Z===",     /* three '=' */
        "====",     /* four */
        "Zm9vZ===", /* three in the second group */
    };
    char dec[32];
    for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++) {
        size_t n = b64_decode_memcached(bad_keys[i], strlen(bad_keys[i]), dec, sizeof dec);
        ck_assert_msg(n == 0, "'%s' decoded to %zu bytes", bad_keys[i], n);
    }
    /* cap must hold digits / 4 * 3 bytes before the padding is taken off, as memcached checks */
    ck_assert_uint_eq(b64_decode_memcached("Zm9vYmFy", 8, dec, 5), 0);
    ck_assert_uint_eq(b64_decode_memcached("Zm9vYmFy", 8, dec, 6), 6);
    ck_assert_uint_eq(b64_decode_memcached("Zg==", 4, dec, 2), 0);
    ck_assert_uint_eq(b64_decode_memcached("Zg==", 4, dec, 3), 1);
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
    tcase_add_test(tc, test_encode_to_writes_no_nul);
    tcase_add_test(tc, test_memcached_round_trip);
    tcase_add_test(tc, test_memcached_lenient);
    tcase_add_test(tc, test_memcached_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
