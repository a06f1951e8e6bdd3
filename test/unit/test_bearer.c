/* util/bearer: every byte 0x00-0xFF at every place of a token: 0x21-0x7E pass, the rest is
 * refused at its offset (space, tab, DEL, controls, UTF-8). */
#include <check.h>
#include <string.h>

#include "check_main.h"
#include "util/bearer.h"

START_TEST(test_every_byte)
{
    char tok[20];
    for (int c = 0; c < 256; c++)
        for (size_t pos = 0; pos < sizeof tok; pos++) {
            memset(tok, 'a', sizeof tok);
            tok[pos] = (char)c;
            bool ok = c >= 0x21 && c <= 0x7e;
            ck_assert_uint_eq(bearer_bad_at(tok, sizeof tok), ok ? sizeof tok : pos);
            ck_assert(bearer_token_ok(tok, sizeof tok) == ok);
        }
}
END_TEST

START_TEST(test_typical)
{
    static const char *good[] = {"orders-Token_0123456789", "a.b~c+d/e=", "!\"#$%&'()*+,-./~",
                                 ""};
    static const char *bad[] = {"two words-0123456789", "tab\there-0123456789", "trailing-nl\n",
                                "caf\xc3\xa9-0123456789", " leading-space0123"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ck_assert_msg(bearer_token_ok(good[i], strlen(good[i])), "'%s' refused", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!bearer_token_ok(bad[i], strlen(bad[i])), "bad[%zu] accepted", i);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bearer");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_every_byte);
    tcase_add_test(tc, test_typical);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
