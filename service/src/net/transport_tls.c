/* The TLS transport (transport.h): OpenSSL's socket BIO on the connection's own socket, driven
 * by a uv_poll_t, as nginx drives it.
 *
 * Why the socket BIO and not memory BIOs over the libuv stream: OpenSSL reads and writes the
 * socket itself, so ciphertext is never copied between our buffers and OpenSSL's, and a later
 * kTLS (SSL_OP_ENABLE_KTLS) needs exactly this BIO. With read_ahead (tls.c) one read() brings
 * what the socket holds; a response goes out as one record per SSL_write (up to 16 KiB: the
 * pieces of a response are gathered into one record first), so a small keep-alive request costs
 * one read and one write, as in plaintext. docs/tls.md has the measurements.
 *
 * The poll is level-triggered and registered for what OpenSSL waits for: readable while the
 * connection reads (or a write wants a read), writable while a write is blocked (or a read wants
 * a write). Records OpenSSL already holds (read ahead, left when conn.c stopped reading) make no
 * event, so a connection that starts reading again with some asks for "writable" once, which a
 * socket almost always is, and reads them on that turn.
 *
 * Memory: OpenSSL's two 16 KiB buffers stay while a connection is busy (releasing them after
 * every request, SSL_MODE_RELEASE_BUFFERS, would free and allocate both for each request) and
 * are given back once it has moved no byte for a sweep period (conn_tls_sweep).
 *
 * Writes: conn.c's try_write and write hand over the front of the connection's output. Each
 * SSL_write takes one record's worth from it; when it would block, OpenSSL keeps that record and
 * must be called again with the same bytes: they are still the front of the output (nothing was
 * reported written), gathered the same way from at most TLS_IOV buffers, which conn.c's
 * asynchronous write always covers.
 */
#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/loop.h"
#include "net/transport.h"

#define TLS_RECORD 16384 /* the largest TLS plaintext record */
#define TLS_IOV    4     /* conn.c's asynchronous write hands over at most this many buffers */

enum {
    T_HANDSHAKEN = 1u << 0,  /* the handshake completed */
    T_HS_WRITE = 1u << 1,    /* the handshake waits for the socket to be writable */
    T_READING = 1u << 2,     /* conn.c wants input */
    T_WRITING = 1u << 3,     /* an asynchronous write is in progress */
    T_READ_WANTS_W = 1u << 4, /* SSL_read needs the socket writable */
    T_WRITE_WANTS_R = 1u << 5, /* SSL_write needs the socket readable */
    T_FATAL = 1u << 6,       /* a fatal error or a failed handshake: no close_notify */
    T_SHUT = 1u << 7,        /* close_notify sent */
    T_CLOSING = 1u << 8,
    T_NO_HANDLE = 1u << 9,   /* the poll handle could not be set up */
    T_MAYBE_MORE = 1u << 10, /* reading stopped with records OpenSSL holds: no event will say so */
    T_ACTIVE = 1u << 11,     /* moved bytes since the last sweep */
    T_RELEASED = 1u << 12,   /* OpenSSL's buffers given back (conn_tls_sweep) */
};

typedef struct tls_conn {
    SSL *ssl;
    unsigned flags;
    int events;               /* registered with the poll */
    uv_buf_t wiov[TLS_IOV];   /* the asynchronous write's rest */
    unsigned wi, wn;
} tls_conn;

/* Where small buffers are gathered into one record: per loop thread, used only within a call. */
static _Thread_local char stage[TLS_RECORD];

static tls_conn *tc(conn *c)
{
    return c->io_arg;
}

static net_listener_stats *lstats(conn *c)
{
    return &c->listener->stats;
}

static void on_poll(uv_poll_t *p, int status, int events);

static void update_poll(conn *c, tls_conn *t)
{
    if (t->flags & (T_CLOSING | T_NO_HANDLE))
        return;
    int ev = 0;
    if (!(t->flags & T_HANDSHAKEN)) {
        ev = t->flags & T_HS_WRITE ? UV_WRITABLE : UV_READABLE;
    } else {
        if (t->flags & T_READING)
            ev |= t->flags & T_READ_WANTS_W ? UV_WRITABLE : UV_READABLE;
        if (t->flags & T_WRITING)
            ev |= t->flags & T_WRITE_WANTS_R ? UV_READABLE : UV_WRITABLE;
        if ((t->flags & T_READING) && (t->flags & T_MAYBE_MORE))
            ev |= UV_WRITABLE; /* held records make no event: come back on the next turn */
    }
    if (ev == t->events)
        return;
    t->events = ev;
    if (ev)
        uv_poll_start(&c->poll, ev, on_poll);
    else
        uv_poll_stop(&c->poll);
}

/* SSL_get_error after a failed call, as a libuv error for conn.c (after marking the
 * connection: no close_notify on a broken one). */
static int io_error(tls_conn *t, int ssl_error)
{
    t->flags |= T_FATAL;
    int e = ssl_error == SSL_ERROR_SYSCALL && errno ? -errno : UV_EPROTO;
    ERR_clear_error();
    return e;
}

/* ---- writing -------------------------------------------------------------------------------- */

/* One record from the front of iov[0..n): the first buffer itself when it holds a record's worth
 * or is alone, else up to a record gathered from the first buffers. Returns the bytes written,
 * UV_EAGAIN, or an error. */
static int write_record(tls_conn *t, const uv_buf_t *iov, unsigned n)
{
    const char *p = iov[0].base;
    size_t len = iov[0].len;
    if (n > TLS_IOV)
        n = TLS_IOV;
    if (len >= TLS_RECORD || n == 1) {
        len = len < TLS_RECORD ? len : TLS_RECORD;
    } else {
        len = 0;
        for (unsigned i = 0; i < n && len < TLS_RECORD; i++) {
            size_t k = iov[i].len < TLS_RECORD - len ? iov[i].len : TLS_RECORD - len;
            memcpy(stage + len, iov[i].base, k);
            len += k;
        }
        p = stage;
    }
    if (len == 0)
        return 0;
    ERR_clear_error();
    int r = SSL_write(t->ssl, p, (int)len);
    t->flags = (t->flags | T_ACTIVE) & ~T_RELEASED;
    if (r > 0)
        return r;
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_WRITE) {
        t->flags &= ~T_WRITE_WANTS_R;
        return UV_EAGAIN;
    }
    if (e == SSL_ERROR_WANT_READ) {
        t->flags |= T_WRITE_WANTS_R;
        return UV_EAGAIN;
    }
    return io_error(t, e);
}

/* Drops n written bytes from the front of iov[*i..m). */
static void advance_iov(uv_buf_t *iov, unsigned *i, unsigned m, size_t n)
{
    while (n && *i < m) {
        size_t k = n < iov[*i].len ? n : iov[*i].len;
        iov[*i].base += k;
        iov[*i].len -= k;
        n -= k;
        if (iov[*i].len == 0)
            (*i)++;
    }
    while (*i < m && iov[*i].len == 0)
        (*i)++;
}

static int tls_try_write(conn *c, const uv_buf_t *iov, unsigned n)
{
    tls_conn *t = tc(c);
    if (!(t->flags & T_HANDSHAKEN) || (t->flags & T_WRITING))
        return UV_EAGAIN;
    uv_buf_t v[TLS_IOV];
    unsigned m = n < TLS_IOV ? n : TLS_IOV, i = 0;
    memcpy(v, iov, m * sizeof *v);
    size_t done = 0;
    for (;;) {
        while (i < m && v[i].len == 0)
            i++;
        if (i == m)
            break;
        int r = write_record(t, v + i, m - i);
        if (r == UV_EAGAIN)
            break;
        if (r < 0)
            return done ? (int)done : r; /* the error comes back on the next call */
        done += (size_t)r;
        advance_iov(v, &i, m, (size_t)r);
        if (done > INT_MAX - TLS_RECORD)
            break;
    }
    return done ? (int)done : UV_EAGAIN;
}

/* The asynchronous write's progress; conn_io_written once it is all out (or failed). */
static void write_more(conn *c, tls_conn *t)
{
    while (t->wi < t->wn) {
        int r = write_record(t, t->wiov + t->wi, t->wn - t->wi);
        if (r == UV_EAGAIN)
            return;
        if (r < 0) {
            t->flags &= ~T_WRITING;
            conn_io_written(c, r);
            return;
        }
        advance_iov(t->wiov, &t->wi, t->wn, (size_t)r);
    }
    t->flags &= ~(T_WRITING | T_WRITE_WANTS_R);
    conn_io_written(c, 0);
}

static int tls_write(conn *c, const uv_buf_t *iov, unsigned n)
{
    tls_conn *t = tc(c);
    if (t->flags & T_WRITING)
        return UV_EBUSY;
    if (n > TLS_IOV) /* conn.c never does: its completion would count bytes we did not take */
        return UV_EINVAL;
    memcpy(t->wiov, iov, n * sizeof *iov);
    t->wi = 0;
    t->wn = n;
    t->flags |= T_WRITING;
    update_poll(c, t); /* the socket just refused more (try_write came first): wait for it */
    return 0;
}

/* ---- reading -------------------------------------------------------------------------------- */

/* Hands conn.c what OpenSSL can decrypt now, while it reads. */
static void read_more(conn *c, tls_conn *t)
{
    t->flags &= ~(T_READ_WANTS_W | T_MAYBE_MORE);
    for (;;) {
        if ((t->flags & (T_READING | T_CLOSING)) != T_READING) {
            if (!(t->flags & T_CLOSING) && SSL_has_pending(t->ssl))
                t->flags |= T_MAYBE_MORE; /* for when conn.c reads again */
            return;
        }
        size_t cap;
        char *buf = conn_io_read_buffer(c, &cap);
        ERR_clear_error();
        int r = SSL_read(t->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
        t->flags = (t->flags | T_ACTIVE) & ~T_RELEASED;
        if (r > 0) {
            conn_io_read(c, buf, (size_t)r);
            if (!SSL_has_pending(t->ssl))
                return; /* anything more makes the socket readable */
            continue;
        }
        int e = SSL_get_error(t->ssl, r);
        if (e == SSL_ERROR_WANT_READ)
            return; /* at most part of a record is held: the socket says when the rest comes */
        if (e == SSL_ERROR_WANT_WRITE) {
            t->flags |= T_READ_WANTS_W;
            return;
        }
        if (e == SSL_ERROR_ZERO_RETURN) { /* close_notify, or EOF (SSL_OP_IGNORE_UNEXPECTED_EOF) */
            ERR_clear_error();
            conn_io_eof(c, 0);
            return;
        }
        conn_io_eof(c, io_error(t, e));
        return;
    }
}

static int tls_read_start(conn *c)
{
    tls_conn *t = tc(c);
    t->flags |= T_READING;
    if (t->flags & T_HANDSHAKEN)
        update_poll(c, t);
    return 0;
}

static void tls_read_stop(conn *c)
{
    tls_conn *t = tc(c);
    t->flags &= ~T_READING;
    if (t->flags & T_HANDSHAKEN)
        update_poll(c, t);
}

/* ---- the handshake -------------------------------------------------------------------------- */

/* Whether OpenSSL handed the connection's records to the kernel (SSL_OP_ENABLE_KTLS, decided
 * when the handshake set the keys). Either way SSL_read and SSL_write stay what moves the bytes:
 * with kTLS they move plaintext, and the readiness of the socket means the same. */
static void count_ktls(conn *c, tls_conn *t)
{
    if (BIO_get_ktls_send(SSL_get_wbio(t->ssl)))
        NET_STAT_ADD(lstats(c)->tls_ktls[0], 1);
    if (BIO_get_ktls_recv(SSL_get_rbio(t->ssl)))
        NET_STAT_ADD(lstats(c)->tls_ktls[1], 1);
}

static void handshake(conn *c, tls_conn *t)
{
    ERR_clear_error();
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        t->flags = (t->flags | T_HANDSHAKEN) & ~T_HS_WRITE;
        NET_STAT_ADD(lstats(c)->tls_handshakes[SSL_session_reused(t->ssl) ? 1 : 0], 1);
        net_tls *tls = c->listener->spec->tls;
        if (tls->peers) { /* the client certificate as a credential: decided once, here */
            net_tls_peer p = net_tls_peer_check(tls, t->ssl);
            c->peer_listed = p == NET_TLS_PEER_LISTED;
            NET_STAT_ADD(lstats(c)->tls_peers[p], 1);
        }
        if (c->listener->spec->tls->cfg.ktls)
            count_ktls(c, t);
        conn_io_ready(c); /* conn.c starts reading */
        if ((t->flags & (T_WRITING | T_CLOSING)) == T_WRITING)
            write_more(c, t); /* output queued before the handshake ended */
        if (!(t->flags & T_CLOSING) && SSL_has_pending(t->ssl))
            read_more(c, t); /* the request came with the client's Finished */
        if (!(t->flags & T_CLOSING))
            update_poll(c, t);
        return;
    }
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        t->flags = e == SSL_ERROR_WANT_WRITE ? t->flags | T_HS_WRITE : t->flags & ~T_HS_WRITE;
        update_poll(c, t);
        return;
    }
    net_tls_fail why = net_tls_classify(c->listener->spec->tls, e);
    NET_STAT_ADD(lstats(c)->tls_failures[why], 1);
    t->flags |= T_FATAL;
    conn_io_eof(c, UV_EPROTO); /* conn.c closes */
}

static bool tls_expire(conn *c)
{
    tls_conn *t = tc(c);
    if (t->flags & T_HANDSHAKEN)
        return false;
    NET_STAT_ADD(lstats(c)->tls_failures[NET_TLS_FAIL_TIMEOUT], 1);
    t->flags |= T_FATAL;
    return true;
}

static void on_poll(uv_poll_t *p, int status, int events)
{
    conn *c = p->data;
    tls_conn *t = tc(c);
    if (t->flags & T_CLOSING)
        return;
    if (status < 0) {
        t->flags |= T_FATAL;
        if (!(t->flags & T_HANDSHAKEN))
            NET_STAT_ADD(lstats(c)->tls_failures[NET_TLS_FAIL_OTHER], 1);
        conn_io_eof(c, status);
        return;
    }
    if (!(t->flags & T_HANDSHAKEN)) {
        handshake(c, t);
        return;
    }
    bool rd = events & UV_READABLE, wr = events & UV_WRITABLE;
    if ((t->flags & T_WRITING) && (t->flags & T_WRITE_WANTS_R ? rd : wr))
        write_more(c, t);
    if ((t->flags & (T_READING | T_CLOSING)) == T_READING &&
        ((t->flags & T_READ_WANTS_W ? wr : rd) || (t->flags & T_MAYBE_MORE)))
        read_more(c, t);
    if (!(t->flags & T_CLOSING))
        update_poll(c, t);
}

/* ---- closing -------------------------------------------------------------------------------- */

/* close_notify, once, never waited for: a socket that does not take it now does not get it. */
static void notify_close(tls_conn *t)
{
    if ((t->flags & (T_HANDSHAKEN | T_FATAL | T_SHUT)) != T_HANDSHAKEN)
        return;
    t->flags |= T_SHUT;
    ERR_clear_error();
    (void)SSL_shutdown(t->ssl);
    ERR_clear_error();
}

static int tls_shutdown(conn *c)
{
    notify_close(tc(c));
    return shutdown(c->fd, SHUT_WR) == 0 ? 0 : -errno;
}

static void release(conn *c)
{
    tls_conn *t = tc(c);
    SSL_free(t->ssl); /* the socket BIO does not own the descriptor */
    free(t);
    c->io_arg = NULL;
    close(c->fd);
    c->fd = -1;
}

static void on_close(uv_handle_t *h)
{
    conn *c = h->data;
    release(c);
    conn_io_closed(c);
}

static void tls_close(conn *c)
{
    tls_conn *t = tc(c);
    notify_close(t);
    t->flags |= T_CLOSING;
    if (t->flags & T_NO_HANDLE)
        return; /* conn_accept_tls releases it */
    uv_close((uv_handle_t *)&c->poll, on_close);
}

static const conn_io tls_io = {
    .name = "tls",
    .try_write = tls_try_write,
    .write = tls_write,
    .shutdown = tls_shutdown,
    .read_start = tls_read_start,
    .read_stop = tls_read_stop,
    .close = tls_close,
    .expire = tls_expire,
};

void conn_tls_sweep(net_loop *loop)
{
    for (conn *c = loop->conns; c; c = c->next) {
        if (c->io != &tls_io)
            continue;
        tls_conn *t = tc(c);
        bool idle = (t->flags & (T_HANDSHAKEN | T_ACTIVE | T_RELEASED | T_WRITING | T_CLOSING |
                                 T_MAYBE_MORE)) == T_HANDSHAKEN;
        t->flags &= ~T_ACTIVE;
        if (idle && SSL_free_buffers(t->ssl)) /* 0 while a record is half read or unsent */
            t->flags |= T_RELEASED;
    }
}

int conn_accept_tls(net_loop *loop, net_listener *l, int fd)
{
    tls_conn *t = calloc(1, sizeof *t);
    conn *c = t ? conn_open(loop, l, &tls_io, fd, t) : NULL;
    if (!c) {
        if (!t)
            NET_STAT_ADD(loop->stats.out_of_memory, 1);
        free(t);
        close(fd);
        return -1;
    }
    if (uv_poll_init(&loop->uv, &c->poll, fd) != 0) {
        t->flags |= T_NO_HANDLE;
        conn_close(c);
        release(c);
        conn_io_closed(c);
        return -1;
    }
    c->poll.data = c;
    t->ssl = net_tls_new_ssl(l->spec->tls);
    if (!t->ssl || !SSL_set_fd(t->ssl, fd)) {
        NET_STAT_ADD(loop->stats.out_of_memory, 1);
        ERR_clear_error();
        t->flags |= T_FATAL;
        conn_close(c);
        return -1;
    }
    SSL_set_accept_state(t->ssl);
    handshake(c, t); /* the ClientHello is usually here already (TCP_DEFER_ACCEPT) */
    return 0;
}
