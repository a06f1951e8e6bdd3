/* Blocking socket helpers with deadlines (see netio.h). */
#include "util/netio.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

uint64_t netio_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int netio_wait_fd(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t now = netio_mono_ms();
        if (now >= deadline_ms)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(deadline_ms - now));
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

bool netio_split_host_port(const char *s, char *host, size_t hostcap, char *port, size_t portcap)
{
    const char *colon;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return false;
        colon = close + 1;
        s++;
        if ((size_t)(close - s) >= hostcap)
            return false;
        memcpy(host, s, (size_t)(close - s));
        host[close - s] = '\0';
    } else {
        colon = strrchr(s, ':');
        if (!colon || colon == s || (size_t)(colon - s) >= hostcap)
            return false;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
    }
    size_t pl = strlen(colon + 1);
    if (pl == 0 || pl >= portcap || strspn(colon + 1, "0123456789") != pl)
        return false;
    memcpy(port, colon + 1, pl + 1);
    return true;
}

int netio_connect(const char *host, const char *port, uint64_t deadline_ms, const char **why)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV},
                    *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        *why = gai_strerror(rc);
        return -ENOENT;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        freeaddrinfo(ai);
        *why = strerror(-rc);
        return rc;
    }
    rc = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS ? 0 : -errno;
    freeaddrinfo(ai);
    if (rc == 0 && (rc = netio_wait_fd(fd, POLLOUT, deadline_ms)) == 0) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        rc = -soerr;
    }
    if (rc != 0) {
        close(fd);
        *why = strerror(-rc);
        return rc;
    }
    int one = 1; /* small request/response exchanges: no Nagle delay */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int netio_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ms)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int rc = netio_wait_fd(fd, POLLOUT, deadline_ms);
        if (rc != 0)
            return rc;
    }
    return 0;
}

ssize_t netio_recv_some(int fd, void *buf, size_t cap, uint64_t deadline_ms)
{
    for (;;) {
        ssize_t r = recv(fd, buf, cap, 0);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int rc = netio_wait_fd(fd, POLLIN, deadline_ms);
        if (rc != 0)
            return rc;
    }
}
