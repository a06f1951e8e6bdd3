/* util/sha256.h: FIPS 180-4's examples, and OpenSSL's digest of every length 0..300 (the
 * padding's edge cases at 55, 56, 63, 64 bytes and beyond). */
#include <check.h>
#include <openssl/evp.h>
#include <string.h>

#include "check_main.h"
#include "util/sha256.h"

START_TEST(test_known_answers)
{
    char hex[SHA256_HEX_LEN + 1];
    sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(m, strlen(m), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

START_TEST(test_against_openssl)
{
    unsigned char msg[300], ours[32], theirs[32];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (unsigned char)(i * 131 + 7);
    for (size_t len = 0; len <= sizeof msg; len++) {
        unsigned int n = 0;
        sha256(msg, len, ours);
        ck_assert_int_eq(EVP_Digest(msg, len, theirs, &n, EVP_sha256(), NULL), 1);
        ck_assert_msg(n == 32 && memcmp(ours, theirs, 32) == 0, "length %zu differs", len);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sha256");
    TCase *tc = tcase_create("sha256");
    tcase_add_test(tc, test_known_answers);
    tcase_add_test(tc, test_against_openssl);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
