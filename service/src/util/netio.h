/* Blocking socket helpers with absolute deadlines, for the few client calls the daemon makes
 * outside its event loops (cluster/peers' start-up check, cluster/etcd_client on the keeper
 * thread). Sockets are non-blocking; every wait is a poll bounded by the caller's deadline on
 * CLOCK_MONOTONIC in milliseconds, so no call here can hang.
 *
 * Contract
 *   netio_mono_ms()  CLOCK_MONOTONIC in ms.
 *   netio_wait_fd(fd, events, deadline)  0 when fd is ready for events, -ETIMEDOUT at the
 *       deadline, another -errno on poll failure. EINTR retried.
 *   netio_split_host_port("host:port" | "[v6]:port", ...)  false when malformed or too long.
 *   netio_connect(host, port, deadline, &why)  a connected non-blocking TCP socket (CLOEXEC,
 *       TCP_NODELAY), or -errno with *why (static text). Name resolution (getaddrinfo) is not
 *       bounded by the deadline: give numeric addresses where that matters.
 *   netio_send_all(fd, buf, len, deadline)  0 when all bytes were sent, else -errno
 *       (-ETIMEDOUT at the deadline). No SIGPIPE.
 *   netio_recv_some(fd, buf, cap, deadline)  bytes received (> 0), 0 at end of stream, or
 *       -errno (-ETIMEDOUT at the deadline). */
#ifndef SF_UTIL_NETIO_H
#define SF_UTIL_NETIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

uint64_t netio_mono_ms(void);
int netio_wait_fd(int fd, short events, uint64_t deadline_ms);
bool netio_split_host_port(const char *s, char *host, size_t hostcap, char *port, size_t portcap);
int netio_connect(const char *host, const char *port, uint64_t deadline_ms, const char **why);
int netio_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ms);
ssize_t netio_recv_some(int fd, void *buf, size_t cap, uint64_t deadline_ms);

#endif
