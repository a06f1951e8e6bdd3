#include "net/conn.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/loop.h"

#define CONN_WRITE_IOV 4 /* uv_write copies up to 4 buffers without allocating */
#define CONN_TRY_IOV   64

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static const net_config *config_of(const conn *c)
{
    return &c->loop->server->cfg;
}

static void flush(conn *c);
static void process(conn *c, const char *data, size_t len);

/* ---- timers ------------------------------------------------------------------------------ */

static uint32_t timeout_ms(const conn *c, conn_timeout_kind kind)
{
    const net_config *cfg = config_of(c);
    switch (kind) {
    case CONN_TIMEOUT_HEADER: return cfg->header_timeout_ms;
    case CONN_TIMEOUT_IDLE: return cfg->idle_timeout_ms;
    default: return cfg->write_timeout_ms;
    }
}

static void arm(conn *c, conn_timeout_kind kind, uint64_t deadline)
{
    c->timer_kind = kind;
    wheel_add(&c->loop->wheel, &c->timer, deadline);
    net_loop_arm_wheel(c->loop, deadline);
}

void conn_set_timeout(conn *c, conn_timeout_kind kind)
{
    if (c->flags & (CONN_CLOSING | CONN_SHUTDOWN))
        return;
    uint64_t deadline = uv_now(&c->loop->uv) + timeout_ms(c, kind);
    if (kind != CONN_TIMEOUT_WRITE) {
        c->phase = kind;
        c->phase_deadline = deadline;
        if (c->inflight) /* a write is pending: its timeout stays armed until it completes */
            return;
        /* Already armed for this phase, earlier: leave the wheel alone; on_timer moves the
         * timer to phase_deadline when it fires. One wheel operation per timeout period
         * instead of one or two per request. */
        if (c->timer_kind == kind && c->timer.next && c->timer.expire_at <= deadline)
            return;
    }
    arm(c, kind, deadline);
}

static void on_timer(wheel_timer *t)
{
    conn *c = container_of(t, conn, timer);
    if (c->flags & CONN_CLOSING)
        return;
    if (c->flags & CONN_SHUTDOWN) { /* the half-closed peer had its chance to read */
        conn_close(c);
        return;
    }
    conn_timeout_kind kind = c->timer_kind;
    if (kind != CONN_TIMEOUT_WRITE && kind == c->phase &&
        c->phase_deadline > uv_now(&c->loop->uv)) {
        arm(c, kind, c->phase_deadline); /* extended since armed (conn_set_timeout) */
        return;
    }
    if (kind == CONN_TIMEOUT_IDLE && (c->in_len || (c->flags & CONN_PENDING))) {
        conn_set_timeout(c, CONN_TIMEOUT_IDLE); /* requests are waiting: not idle */
        return;
    }
    NET_STAT_ADD(c->loop->stats.timeouts[kind], 1);
    if (kind == CONN_TIMEOUT_WRITE || (c->flags & CONN_CLOSE_AFTER_FLUSH)) {
        conn_close(c); /* the peer does not read: nothing more to say */
        return;
    }
    if (c->proto->on_timeout)
        c->proto->on_timeout(c, kind);
    conn_close_after_flush(c);
    if (!(c->flags & CONN_CLOSING) && !(c->flags & CONN_SHUTDOWN))
        arm(c, CONN_TIMEOUT_WRITE, uv_now(&c->loop->uv) + timeout_ms(c, CONN_TIMEOUT_WRITE));
}

/* ---- reading ------------------------------------------------------------------------------ */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    conn *c = h->data;
    /* One buffer per loop: libuv calls alloc and read back to back, and whatever a protocol
     * does not consume is copied out before the next read. */
    buf->base = c->loop->read_buf;
    buf->len = config_of(c)->read_buffer;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static int attach(conn *c);

static void start_reading(conn *c)
{
    if (c->flags & (CONN_READING | CONN_CLOSING | CONN_PEER_EOF))
        return;
    if (attach(c) != 0)
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->flags |= CONN_READING;
    else
        conn_close(c);
}

static void stop_reading(conn *c)
{
    if (c->flags & CONN_READING) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->flags &= ~CONN_READING;
    }
}

static void release_input(conn *c)
{
    if (c->in) {
        pool_put(&c->loop->inbufs, c->in);
        c->in = NULL;
    }
    c->in_len = 0;
}

/* Keeps bytes the protocol did not consume. data may point into c->in. */
static int keep_input(conn *c, const char *data, size_t len)
{
    if (len > config_of(c)->read_buffer)
        return -1;
    if (!c->in && !(c->in = pool_get(&c->loop->inbufs))) {
        NET_STAT_ADD(c->loop->stats.out_of_memory, 1);
        return -1;
    }
    memmove(c->in, data, len);
    c->in_len = (uint32_t)len;
    return 0;
}

/* Work is left over: run it on a later loop turn, or once the output drains. */
static void defer(conn *c)
{
    stop_reading(c);
    if (conn_output_full(c))
        c->flags |= CONN_OUT_PAUSED; /* on_write resumes */
    else
        net_loop_add_pending(c->loop, c);
}

/* Nothing left to process and nothing queued: decide what the connection does next. */
static void settle(conn *c)
{
    if (c->flags & CONN_CLOSING)
        return;
    if (c->out.pending || c->inflight)
        return;
    if (c->flags & CONN_CLOSE_AFTER_FLUSH) {
        if (c->flags & CONN_SHUTDOWN)
            return;
        if (c->flags & CONN_PEER_EOF) {
            conn_close(c);
            return;
        }
        flush(c); /* issues the half-close */
        return;
    }
    if ((c->flags & CONN_PEER_EOF) && c->in_len == 0) {
        conn_close(c);
        return;
    }
    if (c->loop->draining && c->phase == CONN_TIMEOUT_IDLE && c->in_len == 0) {
        conn_close(c); /* became idle during the drain (its response was in flight) */
        return;
    }
    if (c->in_len == 0 || !(c->flags & CONN_YIELDED))
        start_reading(c);
}

static void process(conn *c, const char *data, size_t len)
{
    if (c->flags & (CONN_CLOSE_AFTER_FLUSH | CONN_SHUTDOWN)) {
        release_input(c); /* ending: what the peer sent after the last response is dropped */
        settle(c);
        return;
    }
    c->flags |= CONN_IN_DATA;
    c->flags &= ~CONN_YIELDED;
    ssize_t used = c->proto->on_data(c, data, len);
    c->flags &= ~CONN_IN_DATA;
    if (c->flags & CONN_CLOSING)
        return;
    if (used == PROTO_CLOSE || used < 0 || (size_t)used > len) {
        conn_close(c);
        return;
    }
    if (c->flags & CONN_CLOSE_AFTER_FLUSH) {
        if ((size_t)used < len)
            c->flags &= ~CONN_NO_LINGER; /* the peer sent more than we will answer */
        release_input(c);                /* nothing after the last response is processed */
    } else if ((size_t)used < len) {
        if (keep_input(c, data + used, len - (size_t)used) != 0) {
            conn_close(c);
            return;
        }
    } else {
        release_input(c);
    }
    bool yielded = (c->flags & CONN_YIELDED) && c->in_len;
    flush(c);
    if (c->flags & CONN_CLOSING)
        return;
    /* Decided after the flush: a response that went out at once leaves room to go on. */
    if (yielded)
        defer(c);
    else if (!(c->flags & (CONN_PENDING | CONN_OUT_PAUSED)))
        settle(c);
}

/* Bytes arrived (in the loop's read buffer). */
static void received(conn *c, const char *data, size_t n)
{
    NET_STAT_ADD(c->loop->stats.bytes_in, n);
    c->flags |= CONN_GOT_DATA;
    if (c->flags & (CONN_SHUTDOWN | CONN_CLOSE_AFTER_FLUSH))
        return; /* draining the peer: discard */
    if (c->in_len == 0) {
        process(c, data, n);
    } else if (c->in_len + n <= config_of(c)->read_buffer) {
        memcpy(c->in + c->in_len, data, n);
        c->in_len += (uint32_t)n;
        process(c, c->in, c->in_len);
    } else {
        conn_close(c); /* the protocol sat on a full buffer without consuming */
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = s->data;
    if (nread > 0) {
        received(c, buf->base, (size_t)nread);
        return;
    }
    if (nread == 0)
        return; /* EAGAIN */
    stop_reading(c);
    if (nread != UV_EOF || (c->flags & CONN_SHUTDOWN)) {
        conn_close(c);
        return;
    }
    c->flags |= CONN_PEER_EOF; /* answer what was asked, then close */
    settle(c);
}

/* ---- writing ------------------------------------------------------------------------------ */

bool conn_output_full(const conn *c)
{
    return c->out.pending >= config_of(c)->out_high_water;
}

static void on_write(uv_write_t *req, int status);

/* Everything is written: end the connection. When the peer may still be sending (it did not ask
 * to close, or sent more than we answered), half-close and read until it closes or linger_ms
 * passes, so that data still arriving does not turn our close into a reset that destroys the
 * response in its receive buffer. When the peer itself asked to close and nothing is left
 * unread, close at once (as nginx's lingering_close does). */
static void finish(conn *c)
{
    if ((c->flags & CONN_PEER_EOF) || (c->flags & CONN_NO_LINGER)) {
        conn_close(c);
        return;
    }
    uv_os_fd_t fd = c->raw_fd;
    if (((c->flags & CONN_RAW) ? 0 : uv_fileno((uv_handle_t *)&c->tcp, &fd)) != 0 ||
        shutdown(fd, SHUT_WR) != 0) {
        conn_close(c);
        return;
    }
    c->flags |= CONN_SHUTDOWN;
    arm(c, CONN_TIMEOUT_WRITE, uv_now(&c->loop->uv) + config_of(c)->drain_ms);
    start_reading(c);
}

static void flush(conn *c)
{
    if (c->flags & (CONN_IN_DATA | CONN_CLOSING) || c->inflight)
        return;
    if (c->out.pending == 0) {
        obuf_reset(&c->out);
        if ((c->flags & CONN_CLOSE_AFTER_FLUSH) && !(c->flags & CONN_SHUTDOWN))
            finish(c);
        return;
    }
    uv_buf_t iov[CONN_TRY_IOV];
    size_t bytes;
    size_t n = obuf_iov(&c->out, 0, iov, CONN_TRY_IOV, &bytes);
    int r;
    if (c->flags & CONN_RAW) {
        ssize_t w = writev(c->raw_fd, (const struct iovec *)(void *)iov, (int)n);
        r = w >= 0 ? (int)w : (errno == EAGAIN || errno == EWOULDBLOCK) ? UV_EAGAIN : -errno;
    } else {
        r = uv_try_write((uv_stream_t *)&c->tcp, iov, (unsigned)n);
    }
    if (r > 0) {
        obuf_consume(&c->out, (size_t)r);
        NET_STAT_ADD(c->loop->stats.bytes_out, (uint64_t)r);
    } else if (r < 0 && r != UV_EAGAIN) {
        conn_close(c);
        return;
    }
    if (c->out.pending == 0) {
        flush(c); /* handles close-after-flush */
        return;
    }
    if (c->out.pending > config_of(c)->out_hard_cap) {
        NET_STAT_ADD(c->loop->stats.output_cap_closes, 1);
        conn_close(c);
        return;
    }
    if (attach(c) != 0) /* the rest goes out asynchronously: libuv takes over */
        return;
    n = obuf_iov(&c->out, 0, iov, CONN_WRITE_IOV, &bytes);
    if (uv_write(&c->write_req, (uv_stream_t *)&c->tcp, iov, (unsigned)n, on_write) != 0) {
        conn_close(c);
        return;
    }
    c->inflight = bytes;
    if (!(c->flags & CONN_SHUTDOWN))
        arm(c, CONN_TIMEOUT_WRITE, uv_now(&c->loop->uv) + timeout_ms(c, CONN_TIMEOUT_WRITE));
    if (conn_output_full(c)) {
        stop_reading(c);
        c->flags |= CONN_OUT_PAUSED;
    }
}

static void on_write(uv_write_t *req, int status)
{
    conn *c = req->handle->data;
    size_t n = c->inflight;
    c->inflight = 0;
    if (c->flags & CONN_CLOSING)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    obuf_consume(&c->out, n);
    NET_STAT_ADD(c->loop->stats.bytes_out, n);
    if (c->out.pending) {
        flush(c); /* progress: the write timeout starts over */
        if (c->flags & CONN_CLOSING)
            return;
    }
    /* Below the low-water mark, paused work resumes while the rest is still being written.
     * Decided after the flush, which may have written everything at once (then no further
     * on_write comes to resume) or paused again. */
    if ((c->flags & CONN_OUT_PAUSED) && c->out.pending <= config_of(c)->out_high_water / 2) {
        c->flags &= ~CONN_OUT_PAUSED;
        if (c->in_len)
            net_loop_add_pending(c->loop, c);
    }
    if (c->inflight)
        return;
    if (!(c->flags & CONN_SHUTDOWN) && c->out.pending == 0) {
        /* A keep-alive connection is idle from now on, not from when its last request ended
         * (a long response would otherwise end in an instant close); a request head keeps its
         * original deadline. */
        if (c->phase == CONN_TIMEOUT_IDLE)
            conn_set_timeout(c, CONN_TIMEOUT_IDLE);
        else
            arm(c, c->phase, c->phase_deadline);
    }
    if (!(c->flags & (CONN_OUT_PAUSED | CONN_PENDING)))
        settle(c);
}

/* Output that would pass the hard cap closes the connection before the memory is spent. A
 * protocol may queue a lot in one read (a memcached get of many large values: every value of
 * the read is copied before flush() sees the total), so checking only after the read would let
 * one short command line allocate gigabytes. */
static bool over_cap(conn *c, size_t len)
{
    if (c->flags & CONN_CLOSING)
        return true;
    if (c->out.pending + len <= config_of(c)->out_hard_cap)
        return false;
    NET_STAT_ADD(c->loop->stats.output_cap_closes, 1);
    conn_close(c);
    return true;
}

int conn_write(conn *c, const void *data, size_t len)
{
    if (over_cap(c, len))
        return -1;
    if (obuf_append(&c->out, data, len) == 0)
        return 0;
    NET_STAT_ADD(c->loop->stats.out_of_memory, 1);
    conn_close(c);
    return -1;
}

char *conn_reserve(conn *c, size_t want)
{
    if (over_cap(c, want))
        return NULL;
    char *p = obuf_reserve(&c->out, want);
    if (!p) {
        NET_STAT_ADD(c->loop->stats.out_of_memory, 1);
        conn_close(c);
    }
    return p;
}

void conn_yield(conn *c)
{
    c->flags |= CONN_YIELDED;
}

/* ---- closing ------------------------------------------------------------------------------ */

bool conn_draining(const conn *c)
{
    return c->loop->draining;
}

/* Releases everything once the socket is closed; the protocol's on_close runs here, never from
 * inside its own callbacks. */
static void finalize(conn *c)
{
    net_loop *loop = c->loop;
    if (c->flags & CONN_PENDING) { /* unlink from the pending list (short; rare) */
        conn **pp = &loop->pending_head;
        while (*pp && *pp != c)
            pp = &(*pp)->pending_next;
        if (*pp)
            *pp = c->pending_next;
        if (loop->pending_tail == c) {
            conn *t = loop->pending_head;
            while (t && t->pending_next)
                t = t->pending_next;
            loop->pending_tail = t;
        }
    }
    if (c->proto->on_close)
        c->proto->on_close(c);
    obuf_reset(&c->out);
    release_input(c);
    if (c->prev)
        c->prev->next = c->next;
    else
        loop->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pool_put(&c->listener->conns, c);
    NET_STAT_ADD(loop->stats.closed, 1);
    NET_STAT_ADD(loop->stats.open, (uint64_t)-1);
    net_loop_conn_closed(loop);
}

static void on_close(uv_handle_t *h)
{
    finalize(h->data);
}

void conn_close(conn *c)
{
    if (c->flags & CONN_CLOSING)
        return;
    c->flags |= CONN_CLOSING;
    wheel_cancel(&c->timer);
    if (c->flags & CONN_RAW) {
        close(c->raw_fd); /* never registered with libuv; conn_accept finalizes */
        return;
    }
    stop_reading(c);
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

void conn_close_after_flush(conn *c)
{
    if (c->flags & (CONN_CLOSING | CONN_CLOSE_AFTER_FLUSH))
        return;
    c->flags |= CONN_CLOSE_AFTER_FLUSH;
    flush(c); /* no-op inside on_data: process() flushes at the end */
}

void conn_end_after_flush(conn *c)
{
    if (!(c->flags & (CONN_CLOSING | CONN_CLOSE_AFTER_FLUSH)))
        c->flags |= CONN_NO_LINGER;
    conn_close_after_flush(c);
}

void conn_close_idle(net_loop *loop)
{
    for (conn *c = loop->conns, *next; c; c = next) {
        next = c->next;
        bool between_requests =
            c->timer_kind == CONN_TIMEOUT_IDLE ||
            (c->timer_kind == CONN_TIMEOUT_HEADER && !(c->flags & CONN_GOT_DATA));
        if (between_requests && !c->out.pending && !c->inflight && !c->in_len)
            conn_close(c);
    }
}

/* Hands the socket to libuv: from here on reads, writes and the close go through the loop. */
static int attach(conn *c)
{
    if (!(c->flags & CONN_RAW))
        return 0;
    uv_tcp_init(&c->loop->uv, &c->tcp);
    c->tcp.data = c;
    if (uv_tcp_open(&c->tcp, c->raw_fd) != 0) {
        conn_close(c); /* still raw: closes the descriptor, conn_accept finalizes */
        return -1;
    }
    c->flags &= ~CONN_RAW;
    return 0;
}

/* ---- accepting and pending work ------------------------------------------------------------ */

/* A new connection starts "raw": the socket is not yet given to libuv. Clients usually send
 * their request with the connection (always with TCP_DEFER_ACCEPT), so it is read right here;
 * a client that asks for one response and the close (HTTP/1.0, webbench, ab) is answered with
 * one writev and closed without its socket ever being registered with epoll or libuv. Anything
 * longer-lived (keep-alive, a partial request, output that does not fit the socket buffer) is
 * attached to libuv first, so every other code path sees a normal libuv stream. */
int conn_accept(net_loop *loop, net_listener *l, int fd)
{
    net_server *s = loop->server;
    if (atomic_fetch_add(&s->open_conns, 1) >= s->cfg.max_connections) {
        atomic_fetch_sub(&s->open_conns, 1);
        NET_STAT_ADD(loop->stats.rejected_at_cap, 1);
        close(fd);
        return 0;
    }
    const proto *p = l->spec->proto;
    conn *c = pool_get(&l->conns);
    if (!c) {
        atomic_fetch_sub(&s->open_conns, 1);
        NET_STAT_ADD(loop->stats.out_of_memory, 1);
        close(fd);
        return -ENOMEM;
    }
    memset(c, 0, sizeof *c + p->state_size);
    c->loop = loop;
    c->listener = l;
    c->proto = p;
    c->raw_fd = fd;
    c->flags = CONN_RAW;
    wheel_timer_init(&c->timer, on_timer);
    obuf_init(&c->out, &loop->chunks);
    c->next = loop->conns;
    if (c->next)
        c->next->prev = c;
    loop->conns = c;
    NET_STAT_ADD(loop->stats.accepted, 1);
    NET_STAT_ADD(loop->stats.open, 1);
    c->phase = CONN_TIMEOUT_HEADER;
    conn_set_timeout(c, CONN_TIMEOUT_HEADER);
    if (p->on_open)
        p->on_open(c);
    ssize_t n = read(fd, loop->read_buf, s->cfg.read_buffer);
    if (n > 0)
        received(c, loop->read_buf, (size_t)n);
    else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
        conn_close(c);
    if ((c->flags & CONN_CLOSING) && (c->flags & CONN_RAW)) {
        finalize(c); /* closed without libuv ever seeing it */
        return 0;
    }
    if (attach(c) != 0) {
        finalize(c);
        return 0;
    }
    if (!(c->flags & (CONN_CLOSING | CONN_PENDING | CONN_OUT_PAUSED)))
        start_reading(c); /* keep-alive, a partial request, or nothing read yet */
    return 0;
}

void conn_run_pending(net_loop *loop)
{
    /* Only the connections queued before this turn: new ones wait for the next turn, which
     * keeps one busy pipeline from starving the rest. */
    conn *c = loop->pending_head, *last = loop->pending_tail;
    loop->pending_head = loop->pending_tail = NULL;
    while (c) {
        conn *next = c == last ? NULL : c->pending_next;
        c->flags &= ~CONN_PENDING;
        c->pending_next = NULL;
        if (!(c->flags & CONN_CLOSING)) {
            if (c->in_len)
                process(c, c->in, c->in_len);
            else
                settle(c);
        }
        c = next;
    }
}
