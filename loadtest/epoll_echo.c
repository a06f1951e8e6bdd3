/* The reference floor for the raw TCP echo benchmark: a minimal single-threaded epoll echo
 * server, the way one writes it by hand. Level-triggered epoll, one 64 KiB buffer shared by all
 * connections, read then write back at once; a connection whose peer does not keep up gets its
 * unsent rest buffered and stops being read until it is written (so memory stays bounded).
 * No timeouts, no limits, no metrics: it only sets the bar for what the connection layer costs.
 *
 *   epoll_echo PORT [HOST]      (default host 127.0.0.1; runs until SIGINT/SIGTERM)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF_SIZE   (64 * 1024)
#define MAX_EVENTS 256

typedef struct pending {
    char *data; /* unsent bytes, or NULL */
    size_t len, off;
} pending;

static pending *pend;
static size_t npend;
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static pending *pending_of(int fd)
{
    if ((size_t)fd >= npend) {
        size_t n = npend ? npend : 1024;
        while (n <= (size_t)fd)
            n *= 2;
        pending *p = realloc(pend, n * sizeof *p);
        if (!p) {
            perror("realloc");
            exit(1);
        }
        memset(p + npend, 0, (n - npend) * sizeof *p);
        pend = p;
        npend = n;
    }
    return &pend[fd];
}

static void drop(int ep, int fd)
{
    pending *p = pending_of(fd);
    free(p->data);
    *p = (pending){0};
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
}

/* Writes what it can; keeps the rest and waits for EPOLLOUT instead of reading. */
static int send_all(int ep, int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w > 0) {
            data += w;
            len -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            pending *p = pending_of(fd);
            if (!(p->data = malloc(len)))
                return -1;
            memcpy(p->data, data, len);
            p->len = len;
            p->off = 0;
            struct epoll_event ev = {.events = EPOLLOUT, .data.fd = fd};
            return epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
        } else {
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [HOST]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    if (inet_pton(AF_INET, argc > 2 ? argv[2] : "127.0.0.1", &a.sin_addr) != 1 ||
        bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 4096) != 0) {
        perror("listen");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}, events[MAX_EVENTS];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    static char buf[BUF_SIZE];
    while (!stop) {
        int n = epoll_wait(ep, events, MAX_EVENTS, 500);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            pending *p = pending_of(fd);
            if (p->data) { /* EPOLLOUT: finish the rest, then read again */
                char *rest = p->data;
                size_t off = p->off, len = p->len;
                *p = (pending){0};
                struct epoll_event rev = {.events = EPOLLIN, .data.fd = fd};
                epoll_ctl(ep, EPOLL_CTL_MOD, fd, &rev);
                int rc = send_all(ep, fd, rest + off, len - off);
                free(rest);
                if (rc != 0)
                    drop(ep, fd);
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r > 0) {
                if (send_all(ep, fd, buf, (size_t)r) != 0)
                    drop(ep, fd);
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                drop(ep, fd);
            }
        }
    }
    close(ep);
    close(ls);
    free(pend);
    return 0;
}
