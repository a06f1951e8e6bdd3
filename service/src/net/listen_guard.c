/* Other listeners on our port: see listen_guard.h. */
#include "net/listen_guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "snowflake/encoding.h"
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

/* n hex digits at s as a number; false when one is not. */
static bool hex_u32(const char *s, size_t n, uint32_t *out)
{
    uint64_t v;
    if (sf_enc_parse(SF_ENC_HEX, s, n, &v) != 0 || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* A decimal token. */
static bool dec_ul(const char *s, size_t n, unsigned long *out)
{
    uint64_t v;
    if (sf_enc_parse(SF_ENC_DEC, s, n, &v) != 0 || v > ULONG_MAX)
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

size_t lg_parse_text(const char *text, int family, uint16_t port, lg_listener *out, size_t cap)
{
    size_t found = 0;
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
        if (rc == 1 && l.a.port == port) {
            if (found < cap)
                out[found] = l;
            found++;
        }
    }
    return found;
}

/* One of /proc/net/tcp{,6}, read line by line up to the first socket that does not listen. */
static int scan_file(const char *path, int family, uint16_t port, lg_listener *out, size_t cap,
                     size_t *found)
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
        if (rc == 1 && l.a.port == port) {
            if (*found < cap)
                out[*found] = l;
            (*found)++;
        }
    }
    fclose(f);
    return 0;
}

int lg_scan(uint16_t port, lg_listener *out, size_t cap, size_t *n)
{
    *n = 0;
    if (scan_file("/proc/net/tcp", AF_INET, port, out, cap, n) != 0)
        return -1;
    scan_file("/proc/net/tcp6", AF_INET6, port, out, cap, n); /* absent without IPv6 */
    return 0;
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
     * [::ffff:a.b.c.d], which the kernel lists in tcp6). */
    const lg_addr *v6 = a->family == AF_INET6 ? a : b, *v4 = a->family == AF_INET6 ? b : a;
    if (is_any(v6))
        return LG_OVERLAP;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(v6->addr, mapped, 12) != 0)
        return LG_DISJOINT;
    return is_any(v4) || memcmp(v6->addr + 12, v4->addr, 4) == 0 ? LG_OVERLAP : LG_DISJOINT;
}

bool lg_addr_from(lg_addr *a, const struct sockaddr *sa)
{
    memset(a, 0, sizeof *a);
    a->family = sa->sa_family;
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
        if (!isdigit((unsigned char)e->d_name[0]) || !pid_holds(e->d_name, want))
            continue;
        *pid = (pid_t)strtol(e->d_name, NULL, 10);
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
