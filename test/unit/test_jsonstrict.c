/* util/jsonstrict: one JSON value and nothing after it, no NUL byte, no \u0000 escape (cJSON
 * would cut the string there), and a key given twice found at any depth. */
#include <check.h>
#include <string.h>

#include "check_main.h"
#include "util/jsonstrict.h"

static cJSON *parse(const char *s, const char **why, size_t *at)
{
    *why = NULL;
    *at = 99999;
    return json_strict_parse(s, strlen(s), why, at);
}

START_TEST(test_accepts)
{
    static const char *good[] = {"{}", " {\"a\":1} \n", "[1,2]\r\n", "\"x\\u0001y\"",
                                 "{\"a\":\"\\\\u0000\"}", /* an escaped backslash, then text */
                                 "{\"a\":{\"b\":[{\"c\":1},{\"c\":2}]}}", "0", "null"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        const char *why;
        size_t at;
        cJSON *j = parse(good[i], &why, &at);
        ck_assert_msg(j != NULL, "'%s' refused: %s at %zu", good[i], why, at);
        ck_assert_msg(json_strict_twin(j) == NULL, "'%s': a twin found", good[i]);
        cJSON_Delete(j);
    }
}
END_TEST

START_TEST(test_refuses)
{
    static const struct {
        const char *s, *why;
        size_t at;
    } bad[] = {
        {"{\"start\":5}x", "text after the JSON value", 11},
        {"{\"a\":1}{\"a\":2}", "text after the JSON value", 7},
        {"[1] [2]", "text after the JSON value", 4},
        {"{} ,", "text after the JSON value", 3},
        {"{\"token\":\"abc\\u0000def\"}", "\\u0000 in a string", 13},
        {"{\"k\\u0000\":1}", "\\u0000 in a string", 3},
        {"{\"a\":", "not valid JSON", 5},
        {"", "not valid JSON", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *why;
        size_t at;
        cJSON *j = parse(bad[i].s, &why, &at);
        ck_assert_msg(j == NULL, "'%s' accepted", bad[i].s);
        ck_assert_str_eq(why, bad[i].why);
        if (strcmp(why, "not valid JSON") != 0)
            ck_assert_msg(at == bad[i].at, "'%s': at %zu, not %zu", bad[i].s, at, bad[i].at);
    }
    /* a NUL byte inside the length: the text is refused, not read up to the NUL */
    const char *why;
    size_t at;
    ck_assert_ptr_null(json_strict_parse("{}\0{}", 5, &why, &at));
    ck_assert_str_eq(why, "a NUL byte");
    ck_assert_uint_eq(at, 2);
    /* the length bounds the text: what follows it is not read */
    cJSON *j = json_strict_parse("{\"a\":1}garbage", 7, &why, &at);
    ck_assert_ptr_nonnull(j);
    cJSON_Delete(j);
}
END_TEST

START_TEST(test_twins)
{
    static const struct {
        const char *s, *key;
    } cases[] = {
        {"{\"start\":1,\"start\":2}", "start"},
        {"{\"a\":1,\"b\":2,\"a\":3}", "a"},
        {"{\"x\":{\"n\":1,\"n\":1}}", "n"},
        {"[{\"ok\":1},{\"t\":1,\"u\":2,\"t\":3}]", "t"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *why;
        size_t at;
        cJSON *j = parse(cases[i].s, &why, &at);
        ck_assert_ptr_nonnull(j);
        const cJSON *t = json_strict_twin(j);
        ck_assert_msg(t != NULL, "'%s': no twin found", cases[i].s);
        ck_assert_str_eq(t->string, cases[i].key);
        ck_assert(json_strict_has_earlier_twin(t));
        cJSON_Delete(j);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("jsonstrict");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_accepts);
    tcase_add_test(tc, test_refuses);
    tcase_add_test(tc, test_twins);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
