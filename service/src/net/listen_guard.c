/* Other listeners on our port: see listen_guard.h. */
#include "net/listen_guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "util/decimal.h"
#include "util/hex.h"
#include "util/procname.h"

#define TCP_STATE_LISTEN 0x0A

/* The next whitespace-separated token of *p: its start, its length in *len (0: none left). */
static const char *token(const char **p, size_t *len)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t')
        s++;
    const char *e = s;
    while (*e && !isspace((unsigned char)*e))
        e++;
    *len = (size_t)(e - s);
    *p = e;
    return s;
}

/* n hex digits at s as a 32-bit number; false when they are not one. */
static bool hex_u32(const char *s, size_t n, uint32_t *out)
{
    uint64_t v;
    if (!hex_parse_u64(s, n, UINT32_MAX, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

/* A decimal token. */
static bool dec_ul(const char *s, size_t n, unsigned long *out)
{
    uint64_t v;
    if (!dec_parse_u64(s, n, ULONG_MAX, &v))
        return false;
    *out = (unsigned long)v;
    return true;
}

int lg_parse_line(const char *line, int family, lg_listener *out)
{
    const char *p = line;
    size_t n;
    const char *t = token(&p, &n); /* "sl:" */
    unsigned long ul;
    if (n < 2 || t[n - 1] != ':' || !dec_ul(t, n - 1, &ul))
        return -1;
    size_t words = family == AF_INET6 ? 4 : 1;
    t = token(&p, &n); /* local address: 8 or 32 hex digits, ':', 4 hex digits */
    if (n != words * 8 + 5 || t[words * 8] != ':')
        return -1;
    lg_listener l;
    memset(&l, 0, sizeof l);
    l.a.family = family;
    l.a.v6only = family == AF_INET6 ? -1 : 0; /* /proc does not show IPV6_V6ONLY */
    for (size_t w = 0; w < words; w++) {
        uint32_t v; /* the kernel printed the address word as a u32 of this host */
        if (!hex_u32(t + 8 * w, 8, &v))
            return -1;
        memcpy(l.a.addr + 4 * w, &v, 4);
    }
    uint32_t port;
    if (!hex_u32(t + words * 8 + 1, 4, &port))
        return -1;
    l.a.port = (uint16_t)port;
    token(&p, &n); /* remote address */
    if (n == 0)
        return -1;
    uint32_t st;
    t = token(&p, &n);
    if (n != 2 || !hex_u32(t, 2, &st))
        return -1;
    for (int skip = 0; skip < 3; skip++) { /* tx:rx queues, timer, retransmits */
        token(&p, &n);
        if (n == 0)
            return -1;
    }
    t = token(&p, &n);
    if (!dec_ul(t, n, &ul))
        return -1;
    l.uid = (unsigned)ul;
    token(&p, &n); /* timeout */
    t = token(&p, &n);
    if (!dec_ul(t, n, &l.inode))
        return -1;
    if (st != TCP_STATE_LISTEN)
        return 0;
    *out = l;
    return 1;
}

/* A stored listener, counted past cap. */
static void found(lg_listener *out, size_t cap, size_t *n, const lg_listener *l)
{
    if (*n < cap)
        out[*n] = *l;
    (*n)++;
}

size_t lg_parse_text(const char *text, int family, uint16_t port, lg_listener *out, size_t cap)
{
    size_t n = 0;
    char line[512];
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        size_t keep = len < sizeof line - 1 ? len : sizeof line - 1;
        memcpy(line, p, keep);
        line[keep] = '\0';
        p += len + (p[len] == '\n');
        lg_listener l;
        int rc = lg_parse_line(line, family, &l);
        if (rc == 0)
            break; /* the listening hash is printed first: no listener follows */
        if (rc == 1 && l.a.port == port)
            found(out, cap, &n, &l);
    }
    return n;
}

/* One of /proc/net/tcp{,6}, read line by line up to the first socket that does not listen. */
static int scan_file(const char *path, int family, uint16_t port, lg_listener *out, size_t cap,
                     size_t *n)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        lg_listener l;
        int rc = lg_parse_line(line, family, &l);
        if (rc == 0)
            break;
        if (rc == 1 && l.a.port == port)
            found(out, cap, n, &l);
    }
    fclose(f);
    return 0;
}

int lg_scan_proc(uint16_t port, lg_listener *out, size_t cap, size_t *n)
{
    *n = 0;
    if (scan_file("/proc/net/tcp", AF_INET, port, out, cap, n) != 0)
        return -1;
    scan_file("/proc/net/tcp6", AF_INET6, port, out, cap, n); /* absent without IPv6 */
    return 0;
}

/* ---- sock_diag ------------------------------------------------------------------------------ */

/* The attributes after an inet_diag_msg: INET_DIAG_SKV6ONLY (a u8) sets l->a.v6only. False when
 * one does not fit. */
static bool diag_attrs(const uint8_t *p, size_t len, lg_listener *l)
{
    while (len >= sizeof(struct nlattr)) {
        struct nlattr a;
        memcpy(&a, p, sizeof a);
        if (a.nla_len < sizeof a || a.nla_len > len)
            return false;
        if ((a.nla_type & NLA_TYPE_MASK) == INET_DIAG_SKV6ONLY && a.nla_len > sizeof a)
            l->a.v6only = p[NLA_HDRLEN] != 0;
        size_t step = NLA_ALIGN(a.nla_len);
        if (step >= len)
            break;
        p += step;
        len -= step;
    }
    return true;
}

/* One SOCK_DIAG_BY_FAMILY message's payload: 1 a LISTEN socket on port (*l), 0 another, -1 not
 * an inet_diag_msg. */
static int diag_msg(const uint8_t *p, size_t len, uint16_t port, lg_listener *l)
{
    struct inet_diag_msg m;
    if (len < sizeof m)
        return -1;
    memcpy(&m, p, sizeof m);
    if ((m.idiag_family != AF_INET && m.idiag_family != AF_INET6) ||
        m.idiag_state != TCP_STATE_LISTEN || ntohs(m.id.idiag_sport) != port)
        return 0;
    memset(l, 0, sizeof *l);
    l->diag = true;
    l->a.family = m.idiag_family;
    l->a.port = port;
    memcpy(l->a.addr, m.id.idiag_src, m.idiag_family == AF_INET6 ? 16 : 4);
    l->a.v6only = m.idiag_family == AF_INET6 ? -1 : 0; /* -1 until the attribute says */
    l->inode = m.idiag_inode;
    l->uid = m.idiag_uid;
    l->ifindex = m.id.idiag_if;
    size_t head = NLMSG_ALIGN(sizeof m);
    if (head < len && !diag_attrs(p + head, len - head, l))
        return -1;
    return 1;
}

int lg_diag_parse(const void *buf, size_t len, uint32_t seq, uint16_t port, lg_listener *out,
                  size_t cap, size_t *n, int *err)
{
    *err = 0;
    const uint8_t *p = buf;
    while (len >= sizeof(struct nlmsghdr)) {
        struct nlmsghdr h;
        memcpy(&h, p, sizeof h);
        if (h.nlmsg_len < sizeof h || h.nlmsg_len > len)
            return -1;
        const uint8_t *body = p + NLMSG_HDRLEN;
        size_t blen = h.nlmsg_len - NLMSG_HDRLEN;
        if (h.nlmsg_seq == seq) {
            if (h.nlmsg_flags & NLM_F_DUMP_INTR)
                return -1; /* the table changed under the dump: not a whole answer */
            if (h.nlmsg_type == NLMSG_DONE)
                return 1;
            if (h.nlmsg_type == NLMSG_ERROR) {
                struct nlmsgerr e;
                if (blen >= sizeof e.error) {
                    memcpy(&e.error, body, sizeof e.error);
                    *err = e.error < 0 ? -e.error : e.error;
                }
                return -1;
            }
            if (h.nlmsg_type == SOCK_DIAG_BY_FAMILY) {
                lg_listener l;
                int rc = diag_msg(body, blen, port, &l);
                if (rc < 0)
                    return -1;
                if (rc == 1)
                    found(out, cap, n, &l);
            }
        }
        size_t step = NLMSG_ALIGN(h.nlmsg_len);
        if (step >= len)
            break;
        p += step;
        len -= step;
    }
    return 0;
}

#define DIAG_BUF 32768 /* the most a netlink dump puts in one message batch */

/* One family's dump over fd. */
static int diag_dump(int fd, int family, uint16_t port, lg_listener *out, size_t cap, size_t *n,
                     int *err)
{
    struct {
        struct nlmsghdr h;
        struct inet_diag_req_v2 r;
    } req;
    memset(&req, 0, sizeof req);
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.h.nlmsg_seq = (uint32_t)family;
    req.r.sdiag_family = (uint8_t)family;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = 1u << TCP_STATE_LISTEN; /* the listening hash only */
    req.r.id.idiag_sport = htons(port);          /* the kernel skips other ports' listeners */
    /* No idiag_ext bit: the kernel adds INET_DIAG_SKV6ONLY to every IPv6 LISTEN socket's
     * message unasked (its number, 11, is past the 8 bits of idiag_ext anyway). */
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(fd, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel) !=
        (ssize_t)sizeof req) {
        *err = errno;
        return -1;
    }
    union {
        struct nlmsghdr align;
        uint8_t bytes[DIAG_BUF];
    } buf; /* on the stack: start-up and the main thread's housekeeping only */
    for (;;) {
        struct sockaddr_nl from;
        struct iovec iov = {.iov_base = buf.bytes, .iov_len = sizeof buf.bytes};
        struct msghdr msg = {
            .msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &iov, .msg_iovlen = 1};
        ssize_t got = recvmsg(fd, &msg, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            *err = errno; /* EAGAIN: the timeout */
            return -1;
        }
        if (msg.msg_flags & MSG_TRUNC) {
            *err = EMSGSIZE;
            return -1;
        }
        if (from.nl_pid != 0)
            continue; /* not from the kernel */
        int rc = lg_diag_parse(buf.bytes, (size_t)got, req.h.nlmsg_seq, port, out, cap, n, err);
        if (rc != 0)
            return rc > 0 ? 0 : -1;
    }
}

int lg_scan_diag(uint16_t port, lg_listener *out, size_t cap, size_t *n, int *err)
{
    *n = 0;
    *err = 0;
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    /* The kernel answers at once; the timeout only bounds a housekeeping tick if it does not. */
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int rc = diag_dump(fd, AF_INET, port, out, cap, n, err);
    if (rc == 0)
        rc = diag_dump(fd, AF_INET6, port, out, cap, n, err);
    close(fd);
    return rc;
}

int lg_scan(uint16_t port, lg_listener *out, size_t cap, size_t *n)
{
    int err;
    if (lg_scan_diag(port, out, cap, n, &err) == 0)
        return 0;
    return lg_scan_proc(port, out, cap, n);
}

static bool is_any(const lg_addr *a)
{
    static const uint8_t zero[16];
    return memcmp(a->addr, zero, a->family == AF_INET6 ? 16 : 4) == 0;
}

lg_overlap lg_overlaps(const lg_addr *a, const lg_addr *b)
{
    if (a->port != b->port)
        return LG_DISJOINT;
    if (a->family == b->family) {
        if (memcmp(a->addr, b->addr, a->family == AF_INET6 ? 16 : 4) == 0)
            return LG_SAME;
        return is_any(a) || is_any(b) ? LG_OVERLAP : LG_DISJOINT;
    }
    /* IPv4 and IPv6: a dual-stack [::] takes IPv4 connections (and, v4-mapped, so does
     * [::ffff:a.b.c.d], which the kernel lists in tcp6); an IPV6_V6ONLY socket takes none. */
    const lg_addr *v6 = a->family == AF_INET6 ? a : b, *v4 = a->family == AF_INET6 ? b : a;
    if (v6->v6only == 1)
        return LG_DISJOINT;
    if (is_any(v6))
        return LG_OVERLAP;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(v6->addr, mapped, 12) != 0)
        return LG_DISJOINT;
    return is_any(v4) || memcmp(v6->addr + 12, v4->addr, 4) == 0 ? LG_OVERLAP : LG_DISJOINT;
}

const char *lg_overlap_note(const lg_addr *ours, const lg_listener *l)
{
    if (l->a.family == AF_INET6 && ours->family == AF_INET && l->a.v6only < 0)
        return "; whether it is IPV6_V6ONLY (then it would take no IPv4 connection) cannot be "
               "read without NETLINK_SOCK_DIAG, so it counts as dual-stack";
    return "";
}

bool lg_addr_from(lg_addr *a, const struct sockaddr *sa)
{
    memset(a, 0, sizeof *a);
    a->family = sa->sa_family;
    a->v6only = sa->sa_family == AF_INET6 ? -1 : 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        memcpy(a->addr, &in->sin_addr, 4);
        a->port = ntohs(in->sin_port);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        memcpy(a->addr, &in6->sin6_addr, 16);
        a->port = ntohs(in6->sin6_port);
        return true;
    }
    return false;
}

void lg_addr_text(const lg_addr *a, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    inet_ntop(a->family, a->addr, ip, sizeof ip);
    bool v6 = a->family == AF_INET6;
    snprintf(buf, len, "%s%s%s:%u", v6 ? "[" : "", ip, v6 ? "]" : "", a->port);
}

/* Does /proc/<pid>/fd hold socket:[inode]? */
static bool pid_holds(const char *pid, const char *want)
{
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/fd", pid);
    DIR *d = opendir(path);
    if (!d)
        return false; /* another user's, or gone */
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char link[600], target[64];
        snprintf(link, sizeof link, "%s/%s", path, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            found = strcmp(target, want) == 0;
        }
    }
    closedir(d);
    return found;
}

int lg_owner(unsigned long inode, pid_t *pid, char *comm, size_t commlen)
{
    char want[48];
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    DIR *proc = opendir("/proc");
    if (!proc)
        return -1;
    int rc = -1;
    for (struct dirent *e; rc != 0 && (e = readdir(proc));) {
        uint64_t v; /* the processes' entries: "self", "sys" and the like are not */
        if (!dec_parse_u64(e->d_name, strlen(e->d_name), INT_MAX, &v) ||
            !pid_holds(e->d_name, want))
            continue;
        *pid = (pid_t)v;
        procname_comm(*pid, comm, commlen);
        rc = 0;
    }
    closedir(proc);
    return rc;
}

void lg_describe(const lg_listener *l, char *buf, size_t len)
{
    pid_t pid;
    char comm[32];
    if (lg_owner(l->inode, &pid, comm, sizeof comm) == 0)
        snprintf(buf, len, "pid %ld (%s)", (long)pid, comm);
    else
        snprintf(buf, len, "uid %u, a process /proc does not name", l->uid);
}
