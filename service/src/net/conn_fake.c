/* Test support: see conn_fake.h. Each piece names the conn.c / loop.c code it mirrors; keep them
 * in step when those change. */
#include "net/conn_fake.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* ---- the loop -------------------------------------------------------------------------------- */

int conn_fake_loop_init(conn_fake_loop *fl, const net_config *cfg, const proto *p, void *ctx,
                        char *err, size_t errlen)
{
    memset(fl, 0, sizeof *fl);
    if (net_server_init(&fl->server, cfg, 1, err, errlen) != 0)
        return -1;
    /* As net_server_listen + attach_listener, without a socket: the listener only provides the
     * protocol, its ctx and the connection pool. */
    net_listener_spec *spec = &fl->server.specs[0];
    spec->proto = p;
    spec->ctx = ctx;
    spec->shared_fd = -1;
    snprintf(spec->host, sizeof spec->host, "fake");
    fl->server.nspecs = 1;
    net_loop *l = conn_fake_net_loop(fl);
    net_listener *li = &l->listeners[l->nlisteners++];
    li->loop = l;
    li->spec = spec;
    li->fd = -1;
    pool_init(&li->conns, sizeof(conn) + p->state_size, cfg->pool_idle_max);
    return 0;
}

static void close_if_open(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

void conn_fake_loop_free(conn_fake_loop *fl)
{
    net_loop *l = conn_fake_net_loop(fl);
    /* The handles loop_init created (the listener's pause timer was never initialised). */
    close_if_open((uv_handle_t *)&l->async);
    close_if_open((uv_handle_t *)&l->wheel_timer);
    close_if_open((uv_handle_t *)&l->grace_timer);
    close_if_open((uv_handle_t *)&l->tick_timer);
    close_if_open((uv_handle_t *)&l->pending_idle);
    uv_run(&l->uv, UV_RUN_DEFAULT); /* only the close callbacks: nothing else is active */
    uv_loop_close(&l->uv);
    l->nlisteners = 0;
    pool_drain(&l->listeners[0].conns);
    fl->server.started = false; /* net_server_join: no threads to join, no second loop close */
    net_server_join(&fl->server);
}

/* ---- connections ----------------------------------------------------------------------------- */

static void fake_on_timer(wheel_timer *t)
{
    (void)t; /* the wheel never runs here: conn_fake_timeout fires timeouts */
}

/* As conn_accept, minus the socket and the first read. */
int conn_fake_open(conn_fake_loop *fl, conn_fake *f)
{
    net_loop *loop = conn_fake_net_loop(fl);
    net_listener *l = &loop->listeners[0];
    const proto *p = l->spec->proto;
    memset(f, 0, sizeof *f);
    f->fl = fl;
    f->write_budget = SIZE_MAX;
    f->in = malloc(fl->server.cfg.read_buffer ? fl->server.cfg.read_buffer : 1);
    conn *c = f->in ? pool_get(&l->conns) : NULL;
    if (!c) {
        free(f->in);
        f->in = NULL;
        return -1;
    }
    atomic_fetch_add(&fl->server.open_conns, 1);
    memset(c, 0, sizeof *c + p->state_size);
    c->loop = loop;
    c->listener = l;
    c->proto = p;
    c->raw_fd = -1;
    /* RAW: conn_close only marks it (close(-1) fails harmlessly). IN_DATA, for good: conn.c's
     * flush never runs, so nothing ever reaches for a socket. */
    c->flags = CONN_RAW | CONN_IN_DATA;
    wheel_timer_init(&c->timer, fake_on_timer);
    obuf_init(&c->out, &loop->chunks);
    c->next = loop->conns;
    if (c->next)
        c->next->prev = c;
    loop->conns = c;
    NET_STAT_ADD(loop->stats.accepted, 1);
    NET_STAT_ADD(loop->stats.open, 1);
    c->phase = CONN_TIMEOUT_HEADER;
    conn_set_timeout(c, CONN_TIMEOUT_HEADER);
    f->c = c;
    if (p->on_open)
        p->on_open(c);
    return 0;
}

/* The socket accepts up to `budget` bytes (flush / on_write): they go to the sink. */
static void write_out(conn_fake *f, size_t budget)
{
    conn *c = f->c;
    while (c->out.pending && budget) {
        uv_buf_t iov[8];
        size_t bytes;
        size_t n = obuf_iov(&c->out, 0, iov, 8, &bytes);
        size_t done = 0;
        for (size_t i = 0; i < n && budget; i++) {
            size_t k = iov[i].len < budget ? iov[i].len : budget;
            if (f->sink)
                f->sink(iov[i].base, k, f->sink_arg);
            done += k;
            budget -= k;
        }
        obuf_consume(&c->out, done);
        f->bytes_out += done;
        NET_STAT_ADD(c->loop->stats.bytes_out, done);
    }
}

/* After on_data: as flush (what the socket takes now, the hard cap). Returns false if closed. */
static bool flush_out(conn_fake *f)
{
    conn *c = f->c;
    write_out(f, f->write_budget);
    if (c->out.pending > c->loop->server->cfg.out_hard_cap) {
        NET_STAT_ADD(c->loop->stats.output_cap_closes, 1);
        conn_close(c);
        return false;
    }
    return true;
}

/* Before more input is processed: a paused connection resumes once the output is below half the
 * high-water mark (on_write). */
static void drain_to_resume(conn_fake *f)
{
    conn *c = f->c;
    const net_config *cfg = &c->loop->server->cfg;
    if (c->out.pending >= cfg->out_high_water)
        write_out(f, c->out.pending - cfg->out_high_water / 2);
}

static void release_input(conn_fake *f)
{
    f->in_len = 0;
}

static int state_of(const conn_fake *f)
{
    if (f->c->flags & CONN_CLOSING)
        return CONN_FAKE_CLOSED;
    if (f->c->flags & CONN_CLOSE_AFTER_FLUSH)
        return CONN_FAKE_ENDING;
    return CONN_FAKE_OK;
}

/* As process(), looped as conn_run_pending would on the following turns while the protocol
 * yields. */
static int process(conn_fake *f)
{
    conn *c = f->c;
    for (;;) {
        if (c->flags & (CONN_CLOSING | CONN_CLOSE_AFTER_FLUSH | CONN_SHUTDOWN)) {
            release_input(f); /* ending: what the peer sent after the last response is dropped */
            return state_of(f);
        }
        drain_to_resume(f);
        size_t len = f->in_len;
        char *buf = malloc(len ? len : 1); /* exactly the bytes offered, for ASan */
        if (!buf) {
            conn_close(c);
            return CONN_FAKE_CLOSED;
        }
        memcpy(buf, f->in, len);
        uint64_t out_before = f->bytes_out + c->out.pending;
        c->flags &= ~CONN_YIELDED;
        ssize_t used = c->proto->on_data(c, buf, len);
        f->turns++;
        free(buf);
        if (c->out.pending > f->max_pending)
            f->max_pending = c->out.pending;
        if (c->flags & CONN_CLOSING)
            return CONN_FAKE_CLOSED;
        if (used == PROTO_CLOSE || used < 0) {
            conn_close(c);
            return CONN_FAKE_CLOSED;
        }
        if ((size_t)used > len) {
            conn_close(c);
            return CONN_FAKE_BAD;
        }
        bool wrote = f->bytes_out + c->out.pending != out_before;
        if (c->flags & CONN_CLOSE_AFTER_FLUSH) {
            if ((size_t)used < len)
                c->flags &= ~CONN_NO_LINGER;
            release_input(f);
        } else {
            memmove(f->in, f->in + used, len - (size_t)used);
            f->in_len = len - (size_t)used;
        }
        bool yielded = (c->flags & CONN_YIELDED) && f->in_len;
        if (!flush_out(f))
            return CONN_FAKE_CLOSED;
        if (!yielded)
            return state_of(f);
        if (used == 0 && !wrote)
            return CONN_FAKE_STUCK;
        /* deferred: the next loop turn offers the rest again */
    }
}

/* As received(). */
static int deliver(conn_fake *f, const char *data, size_t n)
{
    conn *c = f->c;
    NET_STAT_ADD(c->loop->stats.bytes_in, n);
    c->flags |= CONN_GOT_DATA;
    if (c->flags & (CONN_CLOSING | CONN_SHUTDOWN | CONN_CLOSE_AFTER_FLUSH))
        return state_of(f); /* draining the peer: discard */
    if (f->in_len + n > c->loop->server->cfg.read_buffer) {
        conn_close(c); /* the protocol sat on a full buffer without consuming */
        return CONN_FAKE_CLOSED;
    }
    memcpy(f->in + f->in_len, data, n);
    f->in_len += n;
    return process(f);
}

int conn_fake_feed(conn_fake *f, const void *data, size_t len)
{
    const char *p = data;
    size_t rb = f->c->loop->server->cfg.read_buffer;
    int rc = state_of(f);
    while (len > 0 && rc == CONN_FAKE_OK) {
        /* A read fills at most what the buffer has room for beside kept input... */
        size_t room = rb > f->in_len ? rb - f->in_len : 0;
        size_t n = len < rb ? len : rb;
        if (room && n > room)
            n = room; /* ...which the next read then overflows, as on a socket, if unconsumed */
        rc = deliver(f, p, n);
        p += n;
        len -= n;
    }
    return rc;
}

/* As on_timer. */
int conn_fake_timeout(conn_fake *f)
{
    conn *c = f->c;
    if (c->flags & CONN_CLOSING)
        return CONN_FAKE_CLOSED;
    if (c->flags & CONN_SHUTDOWN) { /* the half-closed peer had its chance to read */
        conn_close(c);
        return CONN_FAKE_CLOSED;
    }
    conn_timeout_kind kind = c->timer_kind;
    if (kind == CONN_TIMEOUT_IDLE && f->in_len)
        return state_of(f); /* requests are waiting: not idle (re-armed) */
    NET_STAT_ADD(c->loop->stats.timeouts[kind], 1);
    if (kind == CONN_TIMEOUT_WRITE || (c->flags & CONN_CLOSE_AFTER_FLUSH)) {
        conn_close(c); /* the peer does not read: nothing more to say */
        return CONN_FAKE_CLOSED;
    }
    if (c->proto->on_timeout)
        c->proto->on_timeout(c, kind);
    conn_close_after_flush(c);
    if (!flush_out(f))
        return CONN_FAKE_CLOSED;
    return state_of(f);
}

void conn_fake_flush_all(conn_fake *f)
{
    if (!(f->c->flags & CONN_CLOSING))
        write_out(f, SIZE_MAX);
}

void conn_fake_peer_eof(conn_fake *f)
{
    conn *c = f->c;
    c->flags |= CONN_PEER_EOF;
    if (!(c->flags & CONN_CLOSING) && f->in_len == 0 && c->out.pending == 0)
        conn_close(c); /* settle(): everything was answered and sent, the peer is gone */
}

/* As finalize (for a connection never handed to libuv). */
void conn_fake_free(conn_fake *f)
{
    conn *c = f->c;
    if (!c)
        return;
    if (!(c->flags & CONN_CLOSING) && (c->flags & CONN_CLOSE_AFTER_FLUSH))
        write_out(f, SIZE_MAX); /* the queued output goes out before the close */
    conn_close(c);
    net_loop *loop = c->loop;
    if (c->proto->on_close)
        c->proto->on_close(c);
    obuf_reset(&c->out); /* closed at once: the rest is dropped */
    if (c->prev)
        c->prev->next = c->next;
    else
        loop->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pool_put(&c->listener->conns, c);
    NET_STAT_ADD(loop->stats.closed, 1);
    NET_STAT_ADD(loop->stats.open, (uint64_t)-1);
    /* The loop stays usable: a drain test must not get its handles closed by the last close. */
    bool draining = loop->draining;
    loop->draining = false;
    net_loop_conn_closed(loop);
    loop->draining = draining;
    free(f->in);
    f->in = NULL;
    f->in_len = 0;
    f->c = NULL;
}
