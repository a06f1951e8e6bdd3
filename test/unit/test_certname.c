/* util/certname: the three entry forms and their kinds, every refusal with its reason (the
 * operator's usual mistakes: OpenSSL's other DN formats, "subject=", wildcards), and matching:
 * DN and URI byte for byte, DNS names ASCII case-insensitively, lengths exact (a prefix or a
 * name with a NUL never matches), the list's limits. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/certname.h"

static int parse(const char *s, certname_kind *kind, size_t *off, char *err, size_t errlen)
{
    return certname_parse(s, strlen(s), kind, off, err, errlen);
}

START_TEST(test_forms)
{
    static const struct {
        const char *s;
        certname_kind kind;
        size_t off;
    } ok[] = {
        {"CN=orders-api,O=shop", CERTNAME_DN, 0},
        {"CN=a", CERTNAME_DN, 0},
        {"CN=a+UID=7,OU=x\\, y,O=Shop GmbH,C=DE", CERTNAME_DN, 0},
        {"emailAddress=a@b.c,CN=x", CERTNAME_DN, 0},
        {"2.5.4.3=x", CERTNAME_DN, 0},
        {"CN=caf\\C3\\A9", CERTNAME_DN, 0},
        {"CN=", CERTNAME_DN, 0},
        {"DNS:orders.shop.svc", CERTNAME_DNS, 4},
        {"DNS:orders.shop.svc.cluster.local", CERTNAME_DNS, 4},
        {"DNS:_srv.x", CERTNAME_DNS, 4},
        {"URI:spiffe://cluster.local/ns/shop/sa/orders", CERTNAME_URI, 4},
        {"URI:urn:x", CERTNAME_URI, 4},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        certname_kind kind;
        size_t off = 99;
        char err[256] = "";
        ck_assert_msg(parse(ok[i].s, &kind, &off, err, sizeof err) == 0, "%s: %s", ok[i].s, err);
        ck_assert_int_eq(kind, ok[i].kind);
        ck_assert_uint_eq(off, ok[i].off);
    }
}
END_TEST

START_TEST(test_refusals)
{
    static const char *const bad[][2] = {
        {"", "empty"},
        {"/O=shop/CN=x", "old /C=../CN=.. form"},
        {"subject=CN=x", "leave out the \"subject=\""},
        {"CN = x", "a space before '='"},
        {"CN= x", "a space after '='"},
        {"CN=x, O=y", "a space after ',' or '+'"},
        {"CN=x,", "an attribute type"},
        {"CN=x,=y", "an attribute type"},
        {"CN;x=y", "'=' must follow"},
        {"CN=x\\", "lone '\\'"},
        {"orders-api", "neither a subject DN"},
        {"dns:x.y", "neither a subject DN"},
        {"DNS:", "1..253 bytes"},
        {"DNS:*.shop.svc", "no wildcards"},
        {"DNS:a b", "got ' '"},
        {"DNS:.x", "neither starts nor ends"},
        {"DNS:x.", "neither starts nor ends"},
        {"URI:", "starts with its scheme"},
        {"URI:nope", "starts with its scheme"},
        {"URI:1x:y", "starts with its scheme"},
        {"URI:spiffe://a b", "no space"},
        {"CN=a\tb", "a control character at byte 4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        certname_kind kind;
        size_t off;
        char err[512] = "";
        ck_assert_msg(parse(bad[i][0], &kind, &off, err, sizeof err) == -1, "%s", bad[i][0]);
        ck_assert_msg(strstr(err, bad[i][1]), "%s: %s", bad[i][0], err);
    }
    char big[CERTNAME_MAX + 8];
    memset(big, 'a', sizeof big - 1);
    memcpy(big, "CN=", 3);
    big[sizeof big - 1] = '\0';
    certname_kind kind;
    size_t off;
    char err[256];
    ck_assert_int_eq(parse(big, &kind, &off, err, sizeof err), -1);
    ck_assert(strstr(err, "at most 1024 bytes"));
    big[CERTNAME_MAX] = '\0';
    ck_assert_int_eq(parse(big, &kind, &off, err, sizeof err), 0);
}
END_TEST

START_TEST(test_match)
{
    certname_list l;
    char err[256];
    ck_assert_int_eq(certname_list_init(&l,
                                        "CN=orders-api,O=shop\nDNS:billing.shop.svc\n"
                                        "URI:spiffe://cluster.local/ns/shop/sa/orders",
                                        err, sizeof err),
                     0);
    ck_assert_uint_eq(l.n, 3);
#define M(kind, s) certname_list_match(&l, kind, s, strlen(s))
    ck_assert(M(CERTNAME_DN, "CN=orders-api,O=shop"));
    ck_assert(!M(CERTNAME_DN, "CN=Orders-api,O=shop"));   /* case counts in a DN */
    ck_assert(!M(CERTNAME_DN, "O=shop,CN=orders-api"));   /* so does the order */
    ck_assert(!M(CERTNAME_DN, "CN=orders-api,O=shop2"));  /* and the length */
    ck_assert(!M(CERTNAME_DN, "CN=orders-api"));
    ck_assert(!M(CERTNAME_DNS, "CN=orders-api,O=shop"));  /* a kind matches only its kind */
    ck_assert(M(CERTNAME_DNS, "billing.shop.svc"));
    ck_assert(M(CERTNAME_DNS, "Billing.SHOP.svc"));       /* DNS names: case-insensitive */
    ck_assert(!M(CERTNAME_DNS, "billing.shop.svc.evil"));
    ck_assert(!M(CERTNAME_DNS, "x.billing.shop.svc"));
    ck_assert(!M(CERTNAME_DNS, "*.shop.svc"));
    ck_assert(!certname_list_match(&l, CERTNAME_DNS, "billing.shop.svc\0.evil", 21));
    ck_assert(!certname_list_match(&l, CERTNAME_DNS, "billing\0shop.svc", 16));
    ck_assert(M(CERTNAME_URI, "spiffe://cluster.local/ns/shop/sa/orders"));
    ck_assert(!M(CERTNAME_URI, "spiffe://cluster.local/ns/shop/sa/Orders"));
    ck_assert(!M(CERTNAME_URI, "spiffe://cluster.local/ns/shop/sa/orders/x"));
#undef M
    certname_list_free(&l);
    ck_assert_uint_eq(l.n, 0);
    ck_assert(!certname_list_match(&l, CERTNAME_DN, "CN=orders-api,O=shop", 20));
}
END_TEST

START_TEST(test_list_limits)
{
    certname_list l;
    char err[256], text[CERTNAME_LIST_MAX * 12 + 16] = "";
    ck_assert_int_eq(certname_list_init(&l, "", err, sizeof err), 0);
    ck_assert_uint_eq(l.n, 0);
    certname_list_free(&l);
    size_t n = 0;
    for (int i = 0; i < CERTNAME_LIST_MAX; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%sDNS:h%d", i ? "\n" : "", i);
    ck_assert_int_eq(certname_list_init(&l, text, err, sizeof err), 0);
    ck_assert_uint_eq(l.n, CERTNAME_LIST_MAX);
    ck_assert(certname_list_match(&l, CERTNAME_DNS, "h63", 3));
    certname_list_free(&l);
    snprintf(text + n, sizeof text - n, "\nDNS:one-too-many");
    ck_assert_int_eq(certname_list_init(&l, text, err, sizeof err), -1);
    ck_assert(strstr(err, "at most 64 entries"));
    ck_assert_int_eq(certname_list_init(&l, "CN=a\nDNS:*.x", err, sizeof err), -1);
    ck_assert_str_eq(err, "[1] \"DNS:*.x\": no wildcards: list each name the certificates carry");
    ck_assert_int_eq(certname_list_init(&l, "CN=a\n\nCN=b", err, sizeof err), -1);
    ck_assert_str_eq(err, "[1] \"\": empty");
    ck_assert(l.text == NULL); /* a refused list keeps nothing */
    /* errors are one line of printable ASCII whatever the entry holds */
    ck_assert_int_eq(certname_list_init(&l, "CN=\x01\xc3\xa9", err, sizeof err), -1);
    ck_assert_str_eq(err, "[0] \"CN=???\": a control character at byte 3");
    ck_assert_int_eq(certname_list_init(&l, "DNS:caf\xc3\xa9", err, sizeof err), -1);
    ck_assert_str_eq(err, "[0] \"DNS:caf??\": a DNS name holds letters, digits, '-', '_' and "
                          "'.', got byte 0xc3");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("certname");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_forms);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_match);
    tcase_add_test(tc, test_list_limits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
