/* net/listen_guard: the /proc/net/tcp{,6} parser on canned text (as a little-endian host prints
 * it), the sock_diag parser on canned netlink messages, the overlap rules between our address
 * and another listener's, the address text; both sources on this host's real sockets. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <net/if.h>
#include <string.h>
#include <sys/stat.h>
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

START_TEST(test_overlaps_v6only)
{
    lg_addr any4 = v4("0.0.0.0", 80), lo4 = v4("127.0.0.1", 80);
    lg_addr any6 = v6("::", 80), lo6 = v6("::1", 80), mapped = v6("::ffff:127.0.0.1", 80);
    any6.v6only = 1; /* nginx's `listen [::]:80` */
    ck_assert_int_eq(lg_overlaps(&lo4, &any6), LG_DISJOINT);
    ck_assert_int_eq(lg_overlaps(&any4, &any6), LG_DISJOINT);
    ck_assert_int_eq(lg_overlaps(&any6, &any4), LG_DISJOINT); /* ours v6only, theirs IPv4 */
    ck_assert_int_eq(lg_overlaps(&any6, &lo6), LG_OVERLAP);   /* IPv6 is still shared */
    ck_assert_int_eq(lg_overlaps(&lo6, &any6), LG_OVERLAP);
    ck_assert_int_eq(lg_overlaps(&any6, &any6), LG_SAME);
    any6.v6only = -1; /* /proc: not known, counts as dual-stack */
    ck_assert_int_eq(lg_overlaps(&lo4, &any6), LG_OVERLAP);
    ck_assert_int_eq(lg_overlaps(&any4, &any6), LG_OVERLAP);
    mapped.v6only = -1;
    ck_assert_int_eq(lg_overlaps(&lo4, &mapped), LG_OVERLAP);
    lg_listener l = {.a = any6};
    ck_assert_str_ne(lg_overlap_note(&lo4, &l), "");
    ck_assert_str_eq(lg_overlap_note(&lo6, &l), ""); /* IPv6 overlaps either way */
    l.a.v6only = 0;
    ck_assert_str_eq(lg_overlap_note(&lo4, &l), "");
    lg_addr from;
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6};
    ck_assert(lg_addr_from(&from, (const struct sockaddr *)&sa));
    ck_assert_int_eq(from.v6only, -1); /* an address does not say */
}
END_TEST

/* ---- sock_diag: canned answers, laid out as the kernel sends them --------------------------- */

typedef struct diag_buf {
    union {
        struct nlmsghdr align;
        uint8_t b[4096];
    } u;
    size_t len;
} diag_buf;

static struct nlmsghdr *diag_add(diag_buf *d, uint16_t type, uint16_t flags, uint32_t seq,
                                 const void *body, size_t blen)
{
    struct nlmsghdr *h = (struct nlmsghdr *)(d->u.b + d->len);
    memset(h, 0, NLMSG_SPACE(blen));
    h->nlmsg_len = (uint32_t)NLMSG_LENGTH(blen);
    h->nlmsg_type = type;
    h->nlmsg_flags = flags;
    h->nlmsg_seq = seq;
    memcpy(NLMSG_DATA(h), body, blen);
    d->len += NLMSG_SPACE(blen);
    return h;
}

/* An attribute appended to the last message h. */
static void diag_attr(diag_buf *d, struct nlmsghdr *h, uint16_t type, const void *v, size_t vlen)
{
    struct nlattr *a = (struct nlattr *)(d->u.b + d->len);
    memset(a, 0, NLA_ALIGN(NLA_HDRLEN + vlen));
    a->nla_len = (uint16_t)(NLA_HDRLEN + vlen);
    a->nla_type = type;
    memcpy((uint8_t *)a + NLA_HDRLEN, v, vlen);
    d->len += NLA_ALIGN(a->nla_len);
    h->nlmsg_len = (uint32_t)(d->u.b + d->len - (uint8_t *)h);
}

static struct nlmsghdr *diag_sock(diag_buf *d, uint32_t seq, int family, const char *ip,
                                  uint16_t port, uint8_t state, unsigned ifindex, uint32_t inode)
{
    struct inet_diag_msg m;
    memset(&m, 0, sizeof m);
    m.idiag_family = (uint8_t)family;
    m.idiag_state = state;
    m.id.idiag_sport = htons(port);
    m.id.idiag_if = ifindex;
    inet_pton(family, ip, m.id.idiag_src);
    m.idiag_uid = 1000;
    m.idiag_inode = inode;
    return diag_add(d, SOCK_DIAG_BY_FAMILY, NLM_F_MULTI, seq, &m, sizeof m);
}

START_TEST(test_diag_parse)
{
    diag_buf d = {.len = 0};
    uint8_t zero = 0, one = 1;
    diag_sock(&d, 10, AF_INET, "127.0.0.1", 8080, 10, 0, 501);
    diag_sock(&d, 10, AF_INET, "127.0.0.1", 8080, 10, 1, 502); /* SO_BINDTODEVICE lo */
    struct nlmsghdr *h = diag_sock(&d, 10, AF_INET6, "::", 8080, 10, 0, 503);
    diag_attr(&d, h, INET_DIAG_SHUTDOWN, &zero, 1); /* the kernel sends this one first */
    diag_attr(&d, h, INET_DIAG_SKV6ONLY, &one, 1);
    h = diag_sock(&d, 10, AF_INET6, "::1", 8080, 10, 0, 504);
    diag_attr(&d, h, INET_DIAG_SKV6ONLY, &zero, 1);
    diag_sock(&d, 10, AF_INET6, "::2", 8080, 10, 0, 505);      /* an older kernel: no attribute */
    diag_sock(&d, 10, AF_INET, "127.0.0.1", 8081, 10, 0, 506); /* another port */
    diag_sock(&d, 10, AF_INET, "127.0.0.1", 8080, 1, 0, 507);  /* established */
    diag_sock(&d, 11, AF_INET, "127.0.0.1", 8080, 10, 0, 508); /* another request's */
    lg_listener out[8];
    size_t n = 0;
    int err = -1;
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len, 10, 8080, out, 8, &n, &err), 0); /* no DONE */
    ck_assert_int_eq(err, 0);
    ck_assert_uint_eq(n, 5);
    lg_addr lo = v4("127.0.0.1", 8080), any6 = v6("::", 8080), lo6 = v6("::1", 8080);
    ck_assert(addr_eq(&out[0].a, &lo));
    ck_assert(out[0].diag);
    ck_assert_uint_eq(out[0].inode, 501);
    ck_assert_uint_eq(out[0].uid, 1000);
    ck_assert_uint_eq(out[0].ifindex, 0);
    ck_assert_int_eq(out[0].a.v6only, 0);
    ck_assert_uint_eq(out[1].ifindex, 1);
    ck_assert(addr_eq(&out[2].a, &any6));
    ck_assert_int_eq(out[2].a.v6only, 1);
    ck_assert(addr_eq(&out[3].a, &lo6));
    ck_assert_int_eq(out[3].a.v6only, 0);
    ck_assert_int_eq(out[4].a.v6only, -1);
    ck_assert_uint_eq(out[4].inode, 505);

    /* the end of the dump, in the same buffer or the next */
    uint32_t done = 0;
    diag_add(&d, NLMSG_DONE, NLM_F_MULTI, 10, &done, sizeof done);
    n = 0;
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len, 10, 8080, out, 2, &n, &err), 1);
    ck_assert_uint_eq(n, 5); /* counted past cap */
    ck_assert_uint_eq(out[1].inode, 502);
    n = 0;
    ck_assert_int_eq(lg_diag_parse(d.u.b, 0, 10, 8080, out, 8, &n, &err), 0);
    ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(test_diag_parse_errors)
{
    lg_listener out[4];
    size_t n = 0;
    int err;
    diag_buf d = {.len = 0};
    struct nlmsgerr e;
    memset(&e, 0, sizeof e);
    e.error = -ENOENT; /* no inet_diag for the family */
    diag_add(&d, NLMSG_ERROR, 0, 7, &e, sizeof e);
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len, 7, 80, out, 4, &n, &err), -1);
    ck_assert_int_eq(err, ENOENT);

    d.len = 0; /* interrupted dump */
    uint32_t done = 0;
    diag_add(&d, NLMSG_DONE, NLM_F_MULTI | NLM_F_DUMP_INTR, 7, &done, sizeof done);
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len, 7, 80, out, 4, &n, &err), -1);
    ck_assert_int_eq(err, 0);

    d.len = 0; /* a message longer than the buffer */
    diag_sock(&d, 7, AF_INET, "127.0.0.1", 80, 10, 0, 1);
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len - 4, 7, 80, out, 4, &n, &err), -1);
    d.u.align.nlmsg_len = 8; /* shorter than its header */
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len, 7, 80, out, 4, &n, &err), -1);

    d.len = 0; /* a payload shorter than an inet_diag_msg */
    uint8_t small[8] = {AF_INET, 10};
    diag_add(&d, SOCK_DIAG_BY_FAMILY, NLM_F_MULTI, 7, small, sizeof small);
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len, 7, 80, out, 4, &n, &err), -1);

    d.len = 0; /* an attribute running past its message */
    uint8_t one = 1;
    struct nlmsghdr *h = diag_sock(&d, 7, AF_INET6, "::", 80, 10, 0, 1);
    diag_attr(&d, h, INET_DIAG_SKV6ONLY, &one, 1);
    struct nlattr *a = (struct nlattr *)((uint8_t *)h + NLMSG_SPACE(sizeof(struct inet_diag_msg)));
    a->nla_len = 200;
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len, 7, 80, out, 4, &n, &err), -1);
    a->nla_len = 2; /* shorter than its header */
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len, 7, 80, out, 4, &n, &err), -1);
    a->nla_len = NLA_HDRLEN; /* empty: v6only stays unknown; then an empty one of another type */
    struct nlattr next = {.nla_len = NLA_HDRLEN, .nla_type = INET_DIAG_SHUTDOWN};
    memcpy((uint8_t *)a + NLA_HDRLEN, &next, sizeof next);
    n = 0;
    ck_assert_int_eq(lg_diag_parse(d.u.b, d.len, 7, 80, out, 4, &n, &err), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(out[0].a.v6only, -1);
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

static uint16_t listen_on(int fd, const struct sockaddr *sa, socklen_t len)
{
    ck_assert_int_eq(bind(fd, sa, len), 0);
    ck_assert_int_eq(listen(fd, 1), 0);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port); /* same offset in sockaddr_in6 */
}

static unsigned long inode_of(int fd)
{
    struct stat st;
    fstat(fd, &st);
    return (unsigned long)st.st_ino;
}

/* sock_diag on this host's sockets: the inode, IPV6_V6ONLY and the device are read. */
START_TEST(test_scan_diag_real)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return; /* no IPv6 here */
    int one = 1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6}; /* [::] */
    uint16_t port = listen_on(fd, (struct sockaddr *)&sa6, sizeof sa6);
    lg_listener out[LG_MAX_FOUND];
    size_t n;
    int err;
    if (lg_scan_diag(port, out, LG_MAX_FOUND, &n, &err) != 0) {
        close(fd); /* a sandbox without NETLINK_SOCK_DIAG: the /proc fallback is all there is */
        ck_assert_int_ne(err, 0);
        return;
    }
    ck_assert_uint_eq(n, 1);
    ck_assert(out[0].diag);
    ck_assert_int_eq(out[0].a.family, AF_INET6);
    ck_assert_int_eq(out[0].a.v6only, 1);
    ck_assert_uint_eq(out[0].inode, inode_of(fd));
    ck_assert_uint_eq(out[0].uid, getuid());
    ck_assert_uint_eq(out[0].ifindex, 0);
    ck_assert_int_eq(lg_scan_proc(port, out, LG_MAX_FOUND, &n), 0); /* the fallback cannot tell */
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(out[0].a.v6only, -1);

    int dev = socket(AF_INET, SOCK_STREAM, 0); /* on the same port: IPv4 does not clash */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (setsockopt(dev, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3) == 0) {
        listen_on(dev, (struct sockaddr *)&sa, sizeof sa);
        ck_assert_int_eq(lg_scan(port, out, LG_MAX_FOUND, &n), 0);
        ck_assert_uint_eq(n, 2);
        const lg_listener *l = out[0].a.family == AF_INET ? &out[0] : &out[1];
        ck_assert_uint_eq(l->ifindex, if_nametoindex("lo"));
        ck_assert_uint_eq(l->inode, inode_of(dev));
    }
    close(dev);
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
    tcase_add_test(tc, test_overlaps_v6only);
    tcase_add_test(tc, test_diag_parse);
    tcase_add_test(tc, test_diag_parse_errors);
    tcase_add_test(tc, test_addr_text);
    tcase_add_test(tc, test_scan_finds_our_listener);
    tcase_add_test(tc, test_scan_diag_real);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
