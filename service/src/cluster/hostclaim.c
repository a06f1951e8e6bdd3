/* Host-wide identity claims: see hostclaim.h. */
#include "cluster/hostclaim.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/procname.h"

#define CLAIM_BACKLOG 64 /* refused processes connecting at once; drained every second */

/* The abstract address of name: sun_path[0] = 0, then the name, no terminator. */
static socklen_t claim_addr(struct sockaddr_un *sa, const char *name)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = strnlen(name, sizeof sa->sun_path - 1);
    memcpy(sa->sun_path + 1, name, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* The holder's pid through SO_PEERCRED on a connection to its socket: > 0, 0 when it is not
 * listening (between its bind and listen, or gone: try again), -1 when we cannot tell (its
 * backlog is full). */
static pid_t holder_pid(const struct sockaddr_un *sa, socklen_t len)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    pid_t pid = -1;
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (connect(fd, (const struct sockaddr *)sa, len) == 0) {
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 && cred.pid > 0)
            pid = cred.pid;
    } else if (errno == ECONNREFUSED) {
        pid = 0;
    }
    close(fd);
    return pid;
}

int hostclaim_take(hostclaim *c, const char *name, const char *what, char *err, size_t errlen)
{
    if (c->n == HOSTCLAIM_MAX) {
        snprintf(err, errlen, "too many identity claims");
        return -1;
    }
    struct sockaddr_un sa;
    socklen_t len = claim_addr(&sa, name);
    pid_t pid = -1;
    for (int tries = 0; tries < 5; tries++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(err, errlen, "cannot claim %s on this host: socket: %s", what,
                     strerror(errno));
            return -1;
        }
        if (bind(fd, (const struct sockaddr *)&sa, len) == 0 && listen(fd, CLAIM_BACKLOG) == 0) {
            c->fds[c->n++] = fd;
            return 0;
        }
        int e = errno;
        close(fd);
        if (e != EADDRINUSE) {
            snprintf(err, errlen, "cannot claim %s on this host (abstract socket @%s): %s", what,
                     name, strerror(e));
            return -1;
        }
        pid = holder_pid(&sa, len);
        if (pid != 0)
            break;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 10 * 1000000L}; /* it is just starting */
        nanosleep(&ts, NULL);
    }
    char who[64] = "a process that does not say which";
    if (pid > 0) {
        char comm[32];
        procname_comm(pid, comm, sizeof comm);
        snprintf(who, sizeof who, "pid %ld (%s)", (long)pid, comm);
    }
    snprintf(err, errlen,
             "%s is already issuing IDs on this host: claimed by %s (@%s); two processes with one "
             "identity issue duplicates, so this one refuses to start: give each its own "
             "snowflake.worker_id (or datacenter_id)",
             what, who, name);
    return -1;
}

void hostclaim_name(char *buf, size_t len, const sf_layout *l, uint32_t dc, uint32_t worker)
{
    snprintf(buf, len, "snowflaked/id/%u.%u.%u.%u/e%llu/u%u/%s/%u/%u", l->timestamp_bits,
             l->datacenter_bits, l->worker_bits, l->sequence_bits, (unsigned long long)l->epoch_ms,
             l->unit_ms, l->node_bits_low ? "lo" : "hi", dc, worker);
}

int hostclaim_identity(hostclaim *c, const sf_layout *l, uint32_t dc, const uint32_t *workers,
                       unsigned n, char *err, size_t errlen)
{
    char name[108], what[96];
    for (unsigned i = 0; i < n; i++) {
        snprintf(what, sizeof what, "datacenter %u worker %u", dc, workers[i]);
        hostclaim_name(name, sizeof name, l, dc, workers[i]);
        if (hostclaim_take(c, name, what, err, errlen) != 0)
            return -1;
        unsigned bits = (unsigned)l->datacenter_bits + l->worker_bits;
        uint64_t node = (uint64_t)dc << l->worker_bits | workers[i];
        snprintf(what, sizeof what, "datacenter %u worker %u (UUIDv7/ULID node %llu of %u bits)",
                 dc, workers[i], (unsigned long long)node, bits);
        snprintf(name, sizeof name, "snowflaked/id128/n%u/%llu", bits, (unsigned long long)node);
        if (hostclaim_take(c, name, what, err, errlen) != 0)
            return -1;
    }
    return 0;
}

void hostclaim_drain(hostclaim *c)
{
    for (unsigned i = 0; i < c->n; i++)
        for (int fd; (fd = accept4(c->fds[i], NULL, NULL, SOCK_CLOEXEC)) >= 0;)
            close(fd);
}

void hostclaim_release(hostclaim *c)
{
    for (unsigned i = 0; i < c->n; i++)
        close(c->fds[i]);
    c->n = 0;
}
