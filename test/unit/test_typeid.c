/* TypeID text (snowflake/typeid.h) against the spec's own test vectors (valid.yml and invalid.yml
 * of TypeID spec v0.3.0, copied into typeid_spec_vectors.txt with their source), the spec
 * README's examples, each rule's message, and random round trips keeping UUID order. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "id128_parse.h"
#include "snowflake/typeid.h"

#ifndef TYPEID_VECTORS
#error "TYPEID_VECTORS (the path of test/unit/typeid_spec_vectors.txt) must be defined"
#endif

typedef struct vector {
    bool valid;
    char name[64];
    char typeid[128];
    char prefix[80];
    char uuid[40];
} vector;

/* The text between the next two double quotes after *p, into out; advances *p past them. */
static void quoted(const char **p, char *out, size_t cap)
{
    const char *a = strchr(*p, '"');
    ck_assert_ptr_nonnull(a);
    const char *b = strchr(a + 1, '"');
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_lt((size_t)(b - a - 1), cap);
    memcpy(out, a + 1, (size_t)(b - a - 1));
    out[b - a - 1] = '\0';
    *p = b + 1;
}

/* Every vector of the file; returns how many (ck_assert on a malformed line). */
static size_t load(vector *v, size_t cap)
{
    FILE *f = fopen(TYPEID_VECTORS, "r");
    ck_assert_msg(f != NULL, "cannot open %s", TYPEID_VECTORS);
    char line[512];
    size_t n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        ck_assert_uint_lt(n, cap);
        vector *x = &v[n++];
        memset(x, 0, sizeof *x);
        char kind[16];
        ck_assert_int_eq(sscanf(line, "%15s %63s", kind, x->name), 2);
        x->valid = strcmp(kind, "valid") == 0;
        ck_assert_msg(x->valid || strcmp(kind, "invalid") == 0, "bad line: %s", line);
        const char *p = line;
        quoted(&p, x->typeid, sizeof x->typeid);
        if (x->valid) {
            quoted(&p, x->prefix, sizeof x->prefix);
            ck_assert_int_eq(sscanf(p, "%39s", x->uuid), 1);
        }
    }
    fclose(f);
    return n;
}

/* Decoding gives the prefix and UUID; encoding the UUID with the prefix gives the TypeID back. */
START_TEST(test_spec_valid)
{
    vector v[64];
    size_t n = load(v, 64), valid = 0;
    for (size_t i = 0; i < n; i++) {
        if (!v[i].valid)
            continue;
        valid++;
        sf_typeid t;
        const char *why = NULL;
        ck_assert_msg(sf_typeid_parse(v[i].typeid, strlen(v[i].typeid), &t, &why) == 0,
                      "%s (%s) refused: %s", v[i].name, v[i].typeid, why);
        ck_assert_uint_eq(t.prefix_len, strlen(v[i].prefix));
        ck_assert_int_eq(memcmp(t.prefix, v[i].prefix, t.prefix_len), 0);
        char text[SF_UUID_TEXT_LEN + 1];
        text[sf_uuid_format(t.id, text)] = '\0';
        ck_assert_msg(strcmp(text, v[i].uuid) == 0, "%s: uuid %s, want %s", v[i].name, text,
                      v[i].uuid);
        char out[SF_TYPEID_TEXT_MAX + 1];
        size_t len = sf_typeid_format(v[i].prefix, strlen(v[i].prefix), uuid(v[i].uuid), out);
        out[len] = '\0';
        ck_assert_msg(strcmp(out, v[i].typeid) == 0, "%s: encodes as %s, want %s", v[i].name, out,
                      v[i].typeid);
    }
    ck_assert_uint_eq(valid, 9); /* every case of valid.yml */
}
END_TEST

/* The rule each invalid case breaks, as our message names it (a substring of *why). */
static const struct {
    const char *name, *rule;
} rules[] = {
    {"prefix-uppercase", "lowercase letters a-z and underscores only"},
    {"prefix-numeric", "lowercase letters a-z and underscores only"},
    {"prefix-period", "lowercase letters a-z and underscores only"},
    {"prefix-non-ascii", "lowercase letters a-z and underscores only"},
    {"prefix-spaces", "lowercase letters a-z and underscores only"},
    {"prefix-64-chars", "at most 63 characters"},
    {"separator-empty-prefix", "empty prefix has no separator"},
    {"separator-empty", "empty prefix has no separator"},
    {"suffix-short", "26 characters"},
    {"suffix-long", "26 characters"},
    {"suffix-spaces", "without i, l, o, u"},
    {"suffix-uppercase", "without i, l, o, u"},
    {"suffix-hyphens", "without i, l, o, u"},
    {"suffix-wrong-alphabet", "without i, l, o, u"},
    {"suffix-ambiguous-crockford", "without i, l, o, u"},
    {"suffix-hyphens-crockford", "26 characters"},
    {"suffix-overflow", "at most 7"},
    {"prefix-underscore-start", "starts with a letter"},
    {"prefix-underscore-end", "ends with a letter"},
    {"empty", "26 characters"},
    {"prefix-empty", "26 characters"},
};

START_TEST(test_spec_invalid)
{
    vector v[64];
    size_t n = load(v, 64), invalid = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].valid)
            continue;
        invalid++;
        sf_typeid t;
        const char *why = NULL;
        ck_assert_msg(sf_typeid_parse(v[i].typeid, strlen(v[i].typeid), &t, &why) != 0,
                      "%s (\"%s\") was accepted", v[i].name, v[i].typeid);
        const char *rule = NULL;
        for (size_t k = 0; k < sizeof rules / sizeof *rules; k++)
            if (strcmp(rules[k].name, v[i].name) == 0)
                rule = rules[k].rule;
        ck_assert_msg(rule != NULL, "no expected rule for %s", v[i].name);
        ck_assert_msg(why && strstr(why, rule), "%s: \"%s\", want the rule \"%s\"", v[i].name, why,
                      rule);
    }
    ck_assert_uint_eq(invalid, sizeof rules / sizeof *rules); /* every case of invalid.yml */
}
END_TEST

/* The spec README's examples: a prefix with underscores, consecutive ones, one letter, 63. */
START_TEST(test_readme_examples)
{
    static const char *const prefixes[] = {
        "",
        "user",
        "my_type",
        "a_b_c",
        "my__type",
        "a",
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk"};
    sf_id128 id = uuid("01890a5d-ac96-774b-bcce-b302099a8057");
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        const char *p = prefixes[i];
        const char *why = NULL;
        ck_assert_msg(sf_typeid_prefix_check(p, strlen(p), &why) == 0, "%s: %s", p, why);
        char out[SF_TYPEID_TEXT_MAX + 1];
        size_t len = sf_typeid_format(p, strlen(p), id, out);
        ck_assert_uint_eq(len, strlen(p) + (*p ? 1 : 0) + SF_TYPEID_SUFFIX_LEN);
        ck_assert_uint_le(len, SF_TYPEID_TEXT_MAX);
        ck_assert_int_eq(memcmp(out + len - 26, "01h455vb4pex5vsknk084sn02q", 26), 0);
        sf_typeid t;
        ck_assert_msg(sf_typeid_parse(out, len, &t, &why) == 0, "%.*s: %s", (int)len, out, why);
        ck_assert_uint_eq(t.prefix_len, strlen(p));
        ck_assert_int_eq(sf_id128_cmp(t.id, id), 0);
    }
    /* the example UUID is a UUIDv7 of 2023-07-01 */
    sf_uuid7_fields f;
    const char *why;
    ck_assert(sf_uuid7_split(id, &f, &why));
    ck_assert_uint_eq(f.ms, UINT64_C(0x01890a5dac96));
}
END_TEST

START_TEST(test_prefix_rules)
{
    const char *why = NULL;
    char p[80];
    memset(p, 'a', sizeof p);
    ck_assert_int_eq(sf_typeid_prefix_check(p, 63, &why), 0);
    ck_assert_int_eq(sf_typeid_prefix_check(p, 64, &why), -1);
    ck_assert_str_eq(why, "the prefix is at most 63 characters");
    ck_assert_int_eq(sf_typeid_prefix_check("user_", 5, &why), -1);
    ck_assert_str_eq(why, "the prefix ends with a letter a-z, not an underscore");
    ck_assert_int_eq(sf_typeid_prefix_check("_", 1, &why), -1);
    ck_assert_int_eq(sf_typeid_prefix_check("_user", 5, &why), -1);
    ck_assert_str_eq(why, "the prefix starts with a letter a-z, not an underscore");
    ck_assert_int_eq(sf_typeid_prefix_check("user1", 5, &why), -1);
    ck_assert_str_eq(why, "the prefix has lowercase letters a-z and underscores only");
    ck_assert_int_eq(sf_typeid_prefix_check("us\0er", 5, &why), -1);
    ck_assert_int_eq(sf_typeid_prefix_check("", 0, &why), 0);
    ck_assert_int_eq(sf_typeid_prefix_check("a__b", 4, &why), 0);
    /* A NUL inside the text is not the end of it. */
    sf_typeid t;
    ck_assert_int_eq(sf_typeid_parse("user_01h455vb4pex5vsknk084sn0\0q", 31, &t, &why), -1);
    /* the last underscore splits: everything before it is the prefix */
    ck_assert_int_eq(sf_typeid_parse("a_b_01h455vb4pex5vsknk084sn02q", 30, &t, &why), 0);
    ck_assert_uint_eq(t.prefix_len, 3);
}
END_TEST

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random values: decode(encode(x)) == x, the suffix is the lowercase ULID text, and suffixes
 * compare as strings in the order the UUIDs compare. */
START_TEST(test_round_trip_and_order)
{
    uint64_t seed = UINT64_C(0x9e3779b97f4a7c15);
    char prev[SF_TYPEID_TEXT_MAX];
    sf_id128 prev_id = {0, 0};
    for (int i = 0; i < 20000; i++) {
        sf_id128 id = {xorshift(&seed), xorshift(&seed)};
        if (i % 3 == 1) /* neighbours: same top half, to test the low digits' order */
            id.hi = prev_id.hi;
        char out[SF_TYPEID_TEXT_MAX], ulid[SF_ULID_TEXT_LEN];
        size_t len = sf_typeid_format("order", 5, id, out);
        ck_assert_uint_eq(len, 32);
        sf_ulid_format(id, ulid);
        for (int k = 0; k < SF_ULID_TEXT_LEN; k++)
            ck_assert_int_eq(out[6 + k], ulid[k] >= 'A' ? ulid[k] - 'A' + 'a' : ulid[k]);
        sf_typeid t;
        const char *why = NULL;
        ck_assert_msg(sf_typeid_parse(out, len, &t, &why) == 0, "%.*s: %s", (int)len, out, why);
        ck_assert_int_eq(sf_id128_cmp(t.id, id), 0);
        if (i > 0) {
            int c = memcmp(prev, out, len);
            int want = sf_id128_cmp(prev_id, id);
            ck_assert_int_eq(c < 0 ? -1 : c > 0, want);
        }
        memcpy(prev, out, len);
        prev_id = id;
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("typeid");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_spec_valid);
    tcase_add_test(tc, test_spec_invalid);
    tcase_add_test(tc, test_readme_examples);
    tcase_add_test(tc, test_prefix_rules);
    tcase_add_test(tc, test_round_trip_and_order);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
