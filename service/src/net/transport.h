/* The seam between a connection's lifecycle (conn.c) and the bytes' way in and out.
 *
 * conn.c makes every decision (what to process, when to write, pause, half-close, close, time
 * out); a transport only moves bytes. Three backends implement conn_io:
 *   - libuv streams (transport_uv.c), for every connection once it is registered with the loop;
 *   - a raw socket (transport_uv.c), for the first read of an accepted connection: a one-shot
 *     client (HTTP/1.0, ab, webbench) is answered with one writev and closed without its socket
 *     ever reaching epoll; anything longer-lived is handed to libuv on its first asynchronous
 *     operation (a read to wait for, a write that did not fit);
 *   - TLS (transport_tls.c), for every connection of a listener with TLS: OpenSSL reads and
 *     writes the socket itself, a uv_poll_t says when it can; the handshake runs before the
 *     connection reports any input (conn_io_ready comes once it is done);
 *   - memory (conn_fake.c), for unit tests and fuzzers: the same lifecycle without a socket.
 *
 * Contract of the operations (all on the connection's loop thread):
 *   try_write   writes what can be written now without blocking; returns the byte count (> 0),
 *               UV_EAGAIN when nothing fits, or another negative error.
 *   write       starts writing all of iov[0..n) asynchronously (the buffers stay untouched until
 *               then); completion is reported with conn_io_written(). At most one in flight.
 *               Returns 0 or a negative error (then nothing was started).
 *   shutdown    sends FIN now. Returns 0 or a negative error.
 *   read_start  from now on, input is reported with conn_io_read() / conn_io_eof(). 0 or < 0.
 *   read_stop   no more input is reported until read_start.
 *   close       closes; conn_io_closed() follows later, never from inside this call, and no
 *               other report comes after close.
 *   expire      optional: the connection's timer expired. A transport still setting up (a TLS
 *               handshake) counts it and returns true: the connection then closes without the
 *               protocol's last word (a 408 nobody could read). false: as without it.
 */
#ifndef SF_NET_TRANSPORT_H
#define SF_NET_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "net/conn.h"

struct conn_io {
    const char *name;
    int (*try_write)(conn *c, const uv_buf_t *iov, unsigned n);
    int (*write)(conn *c, const uv_buf_t *iov, unsigned n);
    int (*shutdown)(conn *c);
    int (*read_start)(conn *c);
    void (*read_stop)(conn *c);
    void (*close)(conn *c);
    bool (*expire)(conn *c);
};

/* A new connection on listener l of loop, on transport io (io_arg, fd as it needs): counted,
 * pooled, zeroed, on_open called, the header timer armed. NULL when the server is at
 * max_connections or out of memory (counted; the caller disposes of its socket). */
conn *conn_open(net_loop *loop, net_listener *l, const conn_io *io, int fd, void *io_arg);

/* The transport can now do what the connection waits for (it was just opened or changed
 * backend): the connection decides what next, as after any event. */
void conn_io_ready(conn *c);

/* Where the transport should read to: the free end of the connection's input buffer when it
 * holds an unfinished message (the bytes then land behind it without a copy), else the loop's
 * shared read buffer. *len > 0. */
char *conn_io_read_buffer(conn *c, size_t *len);
/* Reports from the transport. data[0..n) is valid for the call only; n > 0. */
void conn_io_read(conn *c, const char *data, size_t n);
/* The input ended: status 0 for the peer's EOF, else a negative error. */
void conn_io_eof(conn *c, int status);
/* The asynchronous write finished: 0, or a negative error. */
void conn_io_written(conn *c, int status);
/* The transport is closed: the protocol's on_close runs, the memory goes back to the pools. */
void conn_io_closed(conn *c);

/* Accepts fd on a listener with TLS (transport_tls.c): the connection handshakes first. 0, or
 * -1 with the socket closed (at max_connections, out of memory). */
int conn_accept_tls(net_loop *loop, net_listener *l, int fd);
/* Every CONN_TLS_SWEEP_MS on each loop with a TLS listener: the TLS connections that moved no
 * byte since the last sweep give OpenSSL's read and write buffers back (SSL_free_buffers; about
 * 33 KiB each, reallocated when they are active again). Giving them back after every request
 * (SSL_MODE_RELEASE_BUFFERS) would cost two 16 KiB allocations per request; keeping them on
 * idle connections would cost the memory (docs/tls.md). */
#define CONN_TLS_SWEEP_MS 1000
void conn_tls_sweep(net_loop *loop);

/* The armed timer's deadline has passed (the wheel calls this through the timer; tests and the
 * in-memory driver call it directly to let time pass). */
void conn_expire(conn *c);

#endif
