/* memcached's auth file (memcache_auth.h). */
#include "proto/memcache_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void mc_auth_clear(mc_auth_table *t)
{
    explicit_bzero(t, sizeof *t);
}

/* One line (its "\n" aside) as an entry, or the reason it is not one. */
static const char *parse_line(const char *p, size_t n, mc_auth_entry *e)
{
    if (n > MC_AUTH_LINE_MAX)
        return "longer than 254 bytes (memcached would cut it and ignore the rest of the file)";
    if (n && p[n - 1] == '\r')
        n--; /* a "\r\n" line end */
    if (n == 0)
        return "empty line (memcached refuses it too: a malformed entry)";
    if (memchr(p, '\0', n))
        return "a NUL byte";
    if (memchr(p, '\r', n))
        return "a carriage return inside the line";
    const char *colon = memchr(p, ':', n);
    if (!colon)
        return "no ':' between the user and the password (memcached refuses it too)";
    size_t ulen = (size_t)(colon - p), plen = n - ulen - 1;
    if (ulen == 0)
        return "empty user name (no client could send it)";
    if (plen == 0)
        return "empty password (no client could send it)";
    if (memchr(p, ' ', ulen))
        return "a space in the user name (the client sends \"<user> <password>\": it could not "
               "match)";
    if (memchr(colon + 1, ' ', plen))
        return "a space in the password (the client sends \"<user> <password>\": it could not "
               "match)";
    e->ulen = (uint16_t)ulen;
    e->plen = (uint16_t)plen;
    memcpy(e->user, p, ulen);
    memcpy(e->pass, colon + 1, plen);
    return NULL;
}

int mc_auth_parse(const char *data, size_t len, mc_auth_table *t, char *err, size_t errlen)
{
    mc_auth_clear(t);
    unsigned line = 1;
    for (size_t pos = 0; pos < len; line++) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        if (t->n == MC_AUTH_ENTRIES_MAX) {
            snprintf(err, errlen,
                     "line %u: more than %d entries (memcached's limit: it would "
                     "ignore the rest)",
                     line, MC_AUTH_ENTRIES_MAX);
            mc_auth_clear(t);
            return MC_AUTH_EFORMAT;
        }
        const char *why = parse_line(data + pos, end - pos, &t->e[t->n]);
        if (why) {
            snprintf(err, errlen, "line %u: %s", line, why);
            mc_auth_clear(t);
            return MC_AUTH_EFORMAT;
        }
        t->n++;
        pos = end + 1;
    }
    if (t->n == 0) {
        snprintf(err, errlen, "no user:password line (every client would be refused)");
        return MC_AUTH_EFORMAT;
    }
    return 0;
}

int mc_auth_load(const char *path, mc_auth_table *t, unsigned *mode, char *err, size_t errlen)
{
    mc_auth_clear(t);
    *mode = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return MC_AUTH_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return MC_AUTH_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return MC_AUTH_EIO;
    }
    *mode = (unsigned)st.st_mode & 07777;
    char buf[MC_AUTH_FILE_MAX + 1];
    size_t len = 0;
    int rc = 0;
    while (len < sizeof buf) {
        ssize_t r = read(fd, buf + len, sizeof buf - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            rc = MC_AUTH_EIO;
            break;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (rc == 0 && len > MC_AUTH_FILE_MAX) {
        snprintf(err, errlen, "%s: larger than %d bytes (at most %d lines of %d bytes)", path,
                 MC_AUTH_FILE_MAX, MC_AUTH_ENTRIES_MAX, MC_AUTH_LINE_MAX);
        rc = MC_AUTH_EFORMAT;
    }
    if (rc == 0) {
        char why[160];
        if (mc_auth_parse(buf, len, t, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s: %s", path, why);
            rc = MC_AUTH_EFORMAT;
        }
    }
    explicit_bzero(buf, sizeof buf);
    return rc;
}

bool mc_auth_match(const mc_auth_table *t, const char *user, size_t ulen, const char *pass,
                   size_t plen)
{
    if (ulen > MC_AUTH_CRED_MAX || plen > MC_AUTH_CRED_MAX)
        return false; /* no entry is that long (the length is all this tells) */
    char u[MC_AUTH_CRED_MAX] = {0}, p[MC_AUTH_CRED_MAX] = {0};
    memcpy(u, user, ulen);
    memcpy(p, pass, plen);
    /* Every byte of every slot, free ones included, whatever matched: no early exit. */
    volatile unsigned found = 0;
    for (unsigned i = 0; i < MC_AUTH_ENTRIES_MAX; i++) {
        const mc_auth_entry *e = &t->e[i];
        volatile unsigned d =
            (e->ulen ^ (unsigned)ulen) | (e->plen ^ (unsigned)plen) | (unsigned)(i >= t->n);
        for (size_t k = 0; k < MC_AUTH_CRED_MAX; k++)
            d |= (unsigned)(unsigned char)(e->user[k] ^ u[k]) |
                 (unsigned)(unsigned char)(e->pass[k] ^ p[k]);
        found |= 1u & ((d - 1u) >> 31); /* 1 when d == 0 (d < 2^16): no branch on it */
    }
    explicit_bzero(u, sizeof u);
    explicit_bzero(p, sizeof p);
    return found != 0;
}
