/* Test support: the in-memory transport and its driver (conn_fake.h). Nothing here decides
 * anything about the connection: conn.c does, as for a socket. */
#include "net/conn_fake.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "net/transport.h"

#define FAKE_MAX_TURNS (1u << 24) /* per call: far beyond any real conversation */

/* ---- the loop -------------------------------------------------------------------------------- */

int conn_fake_loop_init(conn_fake_loop *fl, const net_config *cfg, const proto *p, void *ctx,
                        char *err, size_t errlen)
{
    memset(fl, 0, sizeof *fl);
    if (net_server_init(&fl->server, cfg, 1, err, errlen) != 0)
        return -1;
    /* As net_server_listen, without a socket: the listener only provides the protocol, its ctx
     * and the connection pool. */
    net_listener_spec *spec = &fl->server.specs[0];
    spec->proto = p;
    spec->ctx = ctx;
    spec->shared_fd = -1;
    snprintf(spec->host, sizeof spec->host, "memory");
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
    close_if_open((uv_handle_t *)&l->tls_timer);
    close_if_open((uv_handle_t *)&l->pending_idle);
    uv_run(&l->uv, UV_RUN_DEFAULT); /* only the close callbacks: nothing else is active */
    uv_loop_close(&l->uv);
    l->nlisteners = 0;
    pool_drain(&l->listeners[0].conns);
    fl->server.started = false; /* net_server_join: no threads to join, no second loop close */
    net_server_join(&fl->server);
}

/* ---- the transport ---------------------------------------------------------------------------- */

static conn_fake *fake_of(conn *c)
{
    return c->io_arg;
}

static void emit(conn_fake *f, const char *p, size_t n)
{
    if (f->sink && n)
        f->sink(p, n, f->sink_arg);
    f->bytes_out += n;
}

static int mem_try_write(conn *c, const uv_buf_t *iov, unsigned n)
{
    conn_fake *f = fake_of(c);
    if (c->out.pending > f->max_pending)
        f->max_pending = c->out.pending;
    size_t done = 0;
    for (unsigned i = 0; i < n && done < f->write_budget; i++) {
        size_t k = iov[i].len < f->write_budget - done ? iov[i].len : f->write_budget - done;
        emit(f, iov[i].base, k);
        done += k;
    }
    return done ? (int)done : UV_EAGAIN;
}

static int mem_write(conn *c, const uv_buf_t *iov, unsigned n)
{
    conn_fake *f = fake_of(c);
    assert(!f->writing && n <= sizeof f->write_iov / sizeof *f->write_iov);
    memcpy(f->write_iov, iov, n * sizeof *iov);
    f->write_n = n;
    f->writing = true;
    return 0;
}

static int mem_shutdown(conn *c)
{
    fake_of(c)->shut_down = true;
    return 0;
}

static int mem_read_start(conn *c)
{
    (void)c; /* conn_fake_feed delivers while the connection reads */
    return 0;
}

static void mem_read_stop(conn *c)
{
    (void)c;
}

static void mem_close(conn *c)
{
    fake_of(c)->closed = true; /* released by conn_fake_free, as after libuv's close callback */
}

static const conn_io mem_io = {
    .name = "memory",
    .try_write = mem_try_write,
    .write = mem_write,
    .shutdown = mem_shutdown,
    .read_start = mem_read_start,
    .read_stop = mem_read_stop,
    .close = mem_close,
};

/* ---- the driver ------------------------------------------------------------------------------- */

/* The peer has read what the write in flight holds: the write completes (cancelled if the
 * connection closed meanwhile, as libuv reports it). */
static void complete_write(conn_fake *f)
{
    if (!f->writing)
        return;
    f->writing = false;
    if (f->closed) {
        conn_io_written(f->c, UV_ECANCELED);
        return;
    }
    for (unsigned i = 0; i < f->write_n; i++)
        emit(f, f->write_iov[i].base, f->write_iov[i].len);
    conn_io_written(f->c, 0);
}

static int state_of(const conn_fake *f)
{
    if (net_stat(&f->c->loop->stats.proto_errors) != f->proto_errors)
        return CONN_FAKE_BAD;
    switch (conn_phase_of(f->c)) {
    case CONN_CLOSING: return (f->c->flags & CONN_ENDED) ? CONN_FAKE_ENDING : CONN_FAKE_CLOSED;
    case CONN_ENDING:
    case CONN_LINGERING: return CONN_FAKE_ENDING;
    default: return CONN_FAKE_OK;
    }
}

/* Loop turns while the connection has work queued or waits for its output to drain. */
static int run_turns(conn_fake *f)
{
    conn *c = f->c;
    for (unsigned turn = 0; turn < FAKE_MAX_TURNS; turn++) {
        bool queued = (c->flags & CONN_PENDING) != 0;
        if (!queued && !(f->writing && (c->flags & CONN_OUT_PAUSED)))
            return state_of(f);
        uint32_t in_before = c->in_len;
        uint64_t made_before = f->bytes_out + c->out.pending;
        complete_write(f);
        conn_run_pending(conn_fake_net_loop(f->fl));
        if (queued && (c->flags & CONN_PENDING) && c->in_len == in_before &&
            f->bytes_out + c->out.pending == made_before && !f->closed)
            return CONN_FAKE_STUCK;
    }
    return CONN_FAKE_STUCK;
}

int conn_fake_open(conn_fake_loop *fl, conn_fake *f)
{
    memset(f, 0, sizeof *f);
    f->fl = fl;
    f->write_budget = SIZE_MAX;
    net_loop *loop = conn_fake_net_loop(fl);
    f->proto_errors = net_stat(&loop->stats.proto_errors);
    f->c = conn_open(loop, &loop->listeners[0], &mem_io, -1, f);
    if (!f->c)
        return -1;
    conn_io_ready(f->c);
    return 0;
}

int conn_fake_feed(conn_fake *f, const void *data, size_t len)
{
    const char *p = data;
    int rc = run_turns(f);
    while (len > 0 && rc == CONN_FAKE_OK && (f->c->flags & CONN_READING)) {
        /* A read fills what the socket transport would offer: the room behind kept input (grown
         * as it grows it), else a loop read buffer; delivered as a copy of exactly its bytes. */
        size_t room;
        conn_io_read_buffer(f->c, &room);
        size_t n = len < room ? len : room;
        char *copy = malloc(n);
        if (!copy) {
            conn_close(f->c);
            return CONN_FAKE_CLOSED;
        }
        memcpy(copy, p, n);
        conn_io_read(f->c, copy, n);
        free(copy);
        p += n;
        len -= n;
        rc = run_turns(f);
    }
    return rc;
}

int conn_fake_timeout(conn_fake *f)
{
    conn_expire(f->c);
    return run_turns(f);
}

void conn_fake_flush_all(conn_fake *f)
{
    size_t budget = f->write_budget;
    f->write_budget = SIZE_MAX;
    while (f->writing)
        complete_write(f);
    f->write_budget = budget;
}

void conn_fake_peer_eof(conn_fake *f)
{
    conn_io_eof(f->c, 0);
}

void conn_fake_free(conn_fake *f)
{
    conn *c = f->c;
    if (!c)
        return;
    if (conn_phase_of(c) == CONN_ENDING)
        conn_fake_flush_all(f); /* the queued output goes out before the close */
    conn_close(c);
    complete_write(f);
    /* The loop stays usable: a drain test must not get its handles closed by the last close. */
    net_loop *loop = c->loop;
    bool draining = loop->draining;
    loop->draining = false;
    conn_io_closed(c);
    loop->draining = draining;
    f->c = NULL;
}
