/* net/listen_guard: the /proc/net/tcp{,6} parser on canned text (as a little-endian host prints
 * it), the overlap rules between our address and another listener's, the address text. */
#include <arpa/inet.h>
#include <check.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "net/listen_guard.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the canned /proc text below is as a little-endian host prints it"
#endif

static const char tcp4[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n"
    "   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
    "1067 1 00000000974e9d85 100 0 0 10 0\n"
    "   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 "
    "12345 1 0000000000000000 100 0 0 10 0\n"
    "   2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 "
    "12346 1 0000000000000000 100 0 0 10 0\n"
    "   3: 0100007F:1F90 0100007F:CDC2 01 00000000:00000000 00:00000000 00000000  1000        0 "
    "777 1 0000000000000000 20 4 30 10 -1\n"
    /* after the established ones: never read (the kernel lists listeners first) */
    "   4: 0200007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 "
    "999 1 0000000000000000 100 0 0 10 0\n";

static const char tcp6[] =
    "  sl  local_address                         remote_address                        st "
    "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0\n"
    "   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000  1000        0 4343 1 0000000000000000 100 0 0 10 0\n"
    "   2: 0000000000000000FFFF00000100007F:1F90 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0\n";

static lg_addr addr(int family, const char *ip, uint16_t port)
{
    lg_addr a;
    memset(&a, 0, sizeof a);
    a.family = family;
    inet_pton(family, ip, a.addr);
    a.port = port;
    return a;
}
#define v4(ip, port) addr(AF_INET, ip, port)
#define v6(ip, port) addr(AF_INET6, ip, port)

static bool addr_eq(const lg_addr *a, const lg_addr *b)
{
    return a->family == b->family && a->port == b->port && memcmp(a->addr, b->addr, 16) == 0;
}

START_TEST(test_line_v4)
{
    lg_listener l;
    ck_assert_int_eq(lg_parse_line("  sl  local_address rem_address   st tx_queue", AF_INET, &l),
                     -1);
    ck_assert_int_eq(lg_parse_line("   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 "
                                   "00:00000000 00000000  1000        0 12345 1 0 100 0 0 10 0",
                                   AF_INET, &l),
                     1);
    lg_addr want = v4("127.0.0.1", 8080);
    ck_assert(addr_eq(&l.a, &want));
    ck_assert_uint_eq(l.uid, 1000);
    ck_assert_uint_eq(l.inode, 12345);
    ck_assert_int_eq(lg_parse_line("   3: 0100007F:1F90 0100007F:CDC2 01 00000000:00000000 "
                                   "00:00000000 00000000  1000        0 777 1 0 20 4 30 10 -1",
                                   AF_INET, &l),
                     0);
}
END_TEST

START_TEST(test_line_malformed)
{
    static const char *const bad[] = {
        "",
        "\n",
        "   0:",
        "   0: 0100007F:1F90",                                  /* cut short */
        "   0: 0100007G:1F90 00000000:0000 0A 0:0 0:0 0 0 0 1", /* not hex */
        "   0: 0100007F1F90 00000000:0000 0A 0:0 0:0 0 0 0 1",  /* no colon */
        "   0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 x 0 1", /* uid */
        "   0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0",   /* no inode */
        "   0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 99999999999999999999999", /* range */
        "   0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 18446744073709551616",
        "   0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 -1",
        "x0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lg_listener l;
        ck_assert_msg(lg_parse_line(bad[i], AF_INET, &l) == -1, "line %zu", i);
    }
    lg_listener l; /* a v4 line is not a v6 one */
    ck_assert_int_eq(
        lg_parse_line("   1: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 1", AF_INET6, &l), -1);
    ck_assert_int_eq(
        lg_parse_line("   1: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 1", AF_INET, &l), 1);
}
END_TEST

START_TEST(test_text_v4)
{
    lg_listener out[8];
    size_t n = lg_parse_text(tcp4, AF_INET, 8080, out, 8);
    ck_assert_uint_eq(n, 2); /* 999 follows an established socket: not read */
    ck_assert_uint_eq(out[0].inode, 12345);
    ck_assert_uint_eq(out[1].inode, 12346);
    ck_assert_uint_eq(lg_parse_text(tcp4, AF_INET, 2024, out, 8), 1);
    ck_assert_uint_eq(out[0].inode, 1067);
    ck_assert_uint_eq(lg_parse_text(tcp4, AF_INET, 9, out, 8), 0);
    ck_assert_uint_eq(lg_parse_text(tcp4, AF_INET, 8080, out, 1), 2); /* counted past cap */
    ck_assert_uint_eq(out[0].inode, 12345);
    ck_assert_uint_eq(lg_parse_text("", AF_INET, 8080, out, 8), 0);
}
END_TEST

START_TEST(test_text_v6)
{
    lg_listener out[8];
    ck_assert_uint_eq(lg_parse_text(tcp6, AF_INET6, 8080, out, 8), 3);
    lg_addr any = v6("::", 8080), lo = v6("::1", 8080), mapped = v6("::ffff:127.0.0.1", 8080);
    ck_assert(addr_eq(&out[0].a, &any));
    ck_assert(addr_eq(&out[1].a, &lo));
    ck_assert(addr_eq(&out[2].a, &mapped));
    ck_assert_uint_eq(out[2].inode, 4444);
    ck_assert_uint_eq(out[2].uid, 0);
}
END_TEST

START_TEST(test_overlaps)
{
    lg_addr any4 = v4("0.0.0.0", 80), lo4 = v4("127.0.0.1", 80), lo2 = v4("127.0.0.2", 80);
    lg_addr any6 = v6("::", 80), lo6 = v6("::1", 80), mapped = v6("::ffff:127.0.0.1", 80);
    lg_addr mapped2 = v6("::ffff:127.0.0.2", 80), other_port = v4("127.0.0.1", 81);
    ck_assert_int_eq(lg_overlaps(&lo4, &lo4), LG_SAME);
    ck_assert_int_eq(lg_overlaps(&any4, &any4), LG_SAME);
    ck_assert_int_eq(lg_overlaps(&any6, &any6), LG_SAME);
    ck_assert_int_eq(lg_overlaps(&any4, &lo4), LG_OVERLAP); /* the loopback variant */
    ck_assert_int_eq(lg_overlaps(&lo4, &any4), LG_OVERLAP); /* and the reverse */
    ck_assert_int_eq(lg_overlaps(&lo4, &lo2), LG_DISJOINT);
    ck_assert_int_eq(lg_overlaps(&lo4, &other_port), LG_DISJOINT);
    ck_assert_int_eq(lg_overlaps(&any4, &other_port), LG_DISJOINT);
    ck_assert_int_eq(lg_overlaps(&lo4, &any6), LG_OVERLAP); /* dual-stack [::] */
    ck_assert_int_eq(lg_overlaps(&any6, &lo4), LG_OVERLAP);
    ck_assert_int_eq(lg_overlaps(&any6, &lo6), LG_OVERLAP);
    ck_assert_int_eq(lg_overlaps(&lo6, &any4), LG_DISJOINT);
    ck_assert_int_eq(lg_overlaps(&lo4, &lo6), LG_DISJOINT);
    ck_assert_int_eq(lg_overlaps(&lo4, &mapped), LG_OVERLAP);
    ck_assert_int_eq(lg_overlaps(&any4, &mapped), LG_OVERLAP);
    ck_assert_int_eq(lg_overlaps(&lo4, &mapped2), LG_DISJOINT);
}
END_TEST

START_TEST(test_addr_text)
{
    char buf[64];
    lg_addr a = v4("127.0.0.1", 8080), b = v6("::1", 443);
    lg_addr_text(&a, buf, sizeof buf);
    ck_assert_str_eq(buf, "127.0.0.1:8080");
    lg_addr_text(&b, buf, sizeof buf);
    ck_assert_str_eq(buf, "[::1]:443");
    struct sockaddr_in6 sa;
    memset(&sa, 0, sizeof sa);
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(443);
    inet_pton(AF_INET6, "::1", &sa.sin6_addr);
    lg_addr c;
    ck_assert(lg_addr_from(&c, (const struct sockaddr *)&sa));
    ck_assert(addr_eq(&b, &c));
}
END_TEST

/* The real files of this host, for a socket we hold: found with its inode. */
START_TEST(test_scan_finds_our_listener)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 1), 0);
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    lg_listener out[LG_MAX_FOUND];
    size_t n;
    ck_assert_int_eq(lg_scan(ntohs(sa.sin_port), out, LG_MAX_FOUND, &n), 0);
    ck_assert_uint_eq(n, 1);
    lg_addr want = v4("127.0.0.1", ntohs(sa.sin_port));
    ck_assert(addr_eq(&out[0].a, &want));
    pid_t pid;
    char comm[32];
    ck_assert_int_eq(lg_owner(out[0].inode, &pid, comm, sizeof comm), 0);
    ck_assert_int_eq(pid, getpid());
    close(fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("listen_guard");
    TCase *tc = tcase_create("listen_guard");
    tcase_add_test(tc, test_line_v4);
    tcase_add_test(tc, test_line_malformed);
    tcase_add_test(tc, test_text_v4);
    tcase_add_test(tc, test_text_v6);
    tcase_add_test(tc, test_overlaps);
    tcase_add_test(tc, test_addr_text);
    tcase_add_test(tc, test_scan_finds_our_listener);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
