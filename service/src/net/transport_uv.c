/* The socket transports (transport.h): libuv streams, and the raw socket an accepted connection
 * starts on. */
#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/loop.h"
#include "net/transport.h"

/* ---- libuv streams -------------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    size_t len;
    buf->base = conn_io_read_buffer(h->data, &len);
    buf->len = len;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = s->data;
    if (nread > 0)
        conn_io_read(c, buf->base, (size_t)nread);
    else if (nread < 0)
        conn_io_eof(c, nread == UV_EOF ? 0 : (int)nread);
    /* 0: EAGAIN, nothing to report */
}

static void on_write(uv_write_t *req, int status)
{
    conn_io_written(req->handle->data, status);
}

static void on_close(uv_handle_t *h)
{
    conn_io_closed(h->data);
}

static uv_stream_t *stream(conn *c)
{
    return (uv_stream_t *)&c->tcp;
}

static int stream_try_write(conn *c, const uv_buf_t *iov, unsigned n)
{
    int r = uv_try_write(stream(c), iov, n);
    return r == 0 ? UV_EAGAIN : r;
}

static int stream_write(conn *c, const uv_buf_t *iov, unsigned n)
{
    return uv_write(&c->write_req, stream(c), iov, n, on_write);
}

static int stream_shutdown(conn *c)
{
    /* Not uv_shutdown: it waits for the write queue, which is empty here, and costs a request
     * and a callback; the FIN can go now. */
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return UV_EBADF;
    return shutdown(fd, SHUT_WR) == 0 ? 0 : -errno;
}

static int stream_read_start(conn *c)
{
    return uv_read_start(stream(c), on_alloc, on_read);
}

static void stream_read_stop(conn *c)
{
    uv_read_stop(stream(c));
}

static void stream_close(conn *c)
{
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

static const conn_io stream_io = {
    .name = "libuv",
    .try_write = stream_try_write,
    .write = stream_write,
    .shutdown = stream_shutdown,
    .read_start = stream_read_start,
    .read_stop = stream_read_stop,
    .close = stream_close,
};

/* ---- the raw socket of a new connection ----------------------------------------------------- */

/* Hands the socket to libuv: from here on every operation goes through the loop. On failure the
 * connection is on libuv all the same (its close then goes through uv_close), the socket closed. */
static int attach(conn *c)
{
    uv_tcp_init(&c->loop->uv, &c->tcp);
    c->tcp.data = c;
    c->io = &stream_io;
    int r = uv_tcp_open(&c->tcp, c->fd);
    if (r != 0)
        close(c->fd);
    c->fd = -1;
    return r;
}

static int raw_try_write(conn *c, const uv_buf_t *iov, unsigned n)
{
    ssize_t w = writev(c->fd, (const struct iovec *)(const void *)iov, (int)n);
    if (w > 0)
        return (int)w;
    return w == 0 || errno == EAGAIN || errno == EWOULDBLOCK ? UV_EAGAIN : -errno;
}

static int raw_write(conn *c, const uv_buf_t *iov, unsigned n)
{
    int r = attach(c);
    return r != 0 ? r : stream_write(c, iov, n);
}

static int raw_shutdown(conn *c)
{
    return shutdown(c->fd, SHUT_WR) == 0 ? 0 : -errno;
}

static int raw_read_start(conn *c)
{
    int r = attach(c);
    return r != 0 ? r : stream_read_start(c);
}

static void raw_read_stop(conn *c)
{
    (void)c; /* never reading: a read starts by attaching */
}

static void raw_close(conn *c)
{
    close(c->fd); /* conn_accept releases the connection once its first read is handled */
    c->fd = -1;
}

static const conn_io raw_io = {
    .name = "raw",
    .try_write = raw_try_write,
    .write = raw_write,
    .shutdown = raw_shutdown,
    .read_start = raw_read_start,
    .read_stop = raw_read_stop,
    .close = raw_close,
};

/* A new connection starts on the raw socket. Clients usually send their request with the
 * connection (always with TCP_DEFER_ACCEPT), so it is read right here; a client that asks for
 * one response and the close (HTTP/1.0, webbench, ab) is answered with one writev and closed
 * without its socket ever being registered with epoll or libuv. Anything longer-lived (keep-alive,
 * a partial request, output that does not fit the socket buffer) moves to libuv on its first
 * asynchronous operation, or at the latest here, so the raw transport never outlives this call. */
int conn_accept(net_loop *loop, net_listener *l, int fd)
{
    if (l->spec->tls) /* no one-shot path: the handshake comes first */
        return conn_accept_tls(loop, l, fd);
    conn *c = conn_open(loop, l, &raw_io, fd, NULL);
    if (!c) {
        close(fd);
        return -1;
    }
    ssize_t n = read(fd, loop->read_buf, loop->server->cfg.read_buffer);
    if (n > 0)
        conn_io_read(c, loop->read_buf, (size_t)n);
    else if (n == 0)
        conn_io_eof(c, 0);
    else if (errno != EAGAIN && errno != EWOULDBLOCK)
        conn_io_eof(c, -errno);
    else
        conn_io_ready(c); /* nothing yet: wait for the request on libuv */
    if (c->io != &raw_io)
        return 0;
    if (c->phase == CONN_CLOSING) { /* answered and closed without libuv ever seeing it */
        NET_STAT_ADD(loop->stats.served_raw, 1);
        conn_io_closed(c);
    }
    else if (attach(c) != 0)
        conn_close(c);
    return 0;
}
