/* The connection lifecycle (conn.h): phases, input, output, timers and closing, written once for
 * every transport (transport.h). */
#include "net/conn.h"

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net/loop.h"
#include "net/transport.h"

#define CONN_WRITE_IOV 4 /* uv_write copies up to 4 buffers without allocating */
#define CONN_TRY_IOV   64

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static void advance(conn *c);
static void release_input(conn *c);

static const net_config *config_of(const conn *c)
{
    return &c->loop->server->cfg;
}

/* ---- phases ------------------------------------------------------------------------------- */

const char *conn_phase_name(conn_phase p)
{
    static const char *const names[] = {"open", "processing", "ending", "lingering", "closing"};
    return (unsigned)p < sizeof names / sizeof *names ? names[p] : "?";
}

/* Every phase change passes here; the asserts are the lifecycle's rules (conn.h's diagram). */
static void set_phase(conn *c, conn_phase to)
{
    conn_phase from = (conn_phase)c->phase;
    switch (to) {
    case CONN_OPEN: assert(from == CONN_PROCESSING); break;
    case CONN_PROCESSING: assert(from == CONN_OPEN); break;
    case CONN_ENDING: assert(from == CONN_OPEN || from == CONN_PROCESSING); break;
    case CONN_LINGERING:
        assert(from == CONN_ENDING && c->out.pending == 0 && c->inflight == 0);
        break;
    case CONN_CLOSING: assert(from != CONN_CLOSING); break;
    }
    assert(to != CONN_ENDING || c->in_len == 0); /* nothing after the last response is read */
    (void)from;
    c->phase = (uint8_t)to;
}

/* ---- timers ------------------------------------------------------------------------------- */

static uint32_t timeout_ms(const conn *c, conn_timeout_kind kind)
{
    const net_config *cfg = config_of(c);
    switch (kind) {
    case CONN_TIMEOUT_HEADER: return cfg->header_timeout_ms;
    case CONN_TIMEOUT_IDLE: /* the listener's own, if it has one */
        return c->listener && c->listener->spec->idle_timeout_ms ? c->listener->spec->idle_timeout_ms
                                                                 : cfg->idle_timeout_ms;
    default: return cfg->write_timeout_ms;
    }
}

static uint64_t now_ms(const conn *c)
{
    return uv_now(&c->loop->uv);
}

static void arm(conn *c, conn_timeout_kind kind, uint64_t deadline)
{
    c->timer_kind = (uint8_t)kind;
    wheel_add(&c->loop->wheel, &c->timer, deadline);
    net_loop_arm_wheel(c->loop, deadline);
}

void conn_set_timeout(conn *c, conn_timeout_kind kind)
{
    if (c->phase >= CONN_LINGERING)
        return;
    uint64_t deadline = now_ms(c) + timeout_ms(c, kind);
    if (kind != CONN_TIMEOUT_WRITE) {
        c->wait_kind = (uint8_t)kind;
        c->wait_deadline = deadline;
        if (c->inflight) /* a write is pending: its timeout stays armed until it completes */
            return;
        /* Already armed for this wait, earlier: leave the wheel alone; on_timer moves the timer
         * to wait_deadline when it fires. One wheel operation per timeout period instead of one
         * or two per request. */
        if (c->timer_kind == kind && c->timer.next && c->timer.expire_at <= deadline)
            return;
    }
    arm(c, kind, deadline);
}

/* A write completed and nothing more is queued: the connection waits for its peer again. A
 * keep-alive connection is idle from now on, not from when its last request ended (a long
 * response would otherwise end in an instant close); a request head keeps its deadline. */
static void restore_wait_timer(conn *c)
{
    if (c->wait_kind == CONN_TIMEOUT_IDLE)
        conn_set_timeout(c, CONN_TIMEOUT_IDLE);
    else
        arm(c, (conn_timeout_kind)c->wait_kind, c->wait_deadline);
}

static void on_timer(wheel_timer *t)
{
    conn *c = container_of(t, conn, timer);
    conn_timeout_kind kind = (conn_timeout_kind)c->timer_kind;
    if (c->phase < CONN_LINGERING && kind != CONN_TIMEOUT_WRITE && kind == c->wait_kind &&
        c->wait_deadline > now_ms(c)) {
        arm(c, kind, c->wait_deadline); /* extended since armed (conn_set_timeout) */
        return;
    }
    conn_expire(c);
}

void conn_expire(conn *c)
{
    if (c->phase == CONN_CLOSING)
        return;
    if (c->phase == CONN_LINGERING) { /* the half-closed peer had its chance to read */
        conn_close(c);
        return;
    }
    assert(c->phase != CONN_PROCESSING);
    conn_timeout_kind kind = (conn_timeout_kind)c->timer_kind;
    if (c->io->expire && c->io->expire(c)) { /* still setting up: nothing to say, no one to read */
        NET_STAT_ADD(c->loop->stats.timeouts[kind], 1);
        conn_close(c);
        return;
    }
    if (kind != CONN_TIMEOUT_WRITE && (c->flags & CONN_HELD)) {
        conn_set_timeout(c, kind); /* a request is being answered later: not idle, not late */
        return;
    }
    if (kind == CONN_TIMEOUT_IDLE && (c->in_len || (c->flags & CONN_PENDING))) {
        conn_set_timeout(c, CONN_TIMEOUT_IDLE); /* requests are waiting: not idle */
        return;
    }
    NET_STAT_ADD(c->loop->stats.timeouts[kind], 1);
    if (kind == CONN_TIMEOUT_WRITE || c->phase == CONN_ENDING) {
        conn_close(c); /* the peer does not read: nothing more to say */
        return;
    }
    /* The protocol may say a last word (408); its output is flushed as after on_data. */
    set_phase(c, CONN_PROCESSING);
    if (c->proto->on_timeout)
        c->proto->on_timeout(c, kind);
    if (c->phase == CONN_CLOSING)
        return;
    c->flags &= ~CONN_END_AFTER;
    release_input(c); /* nothing after the last response is read */
    set_phase(c, CONN_ENDING);
    advance(c);
    if (c->phase == CONN_ENDING) /* still writing: the peer gets one write timeout to read it */
        arm(c, CONN_TIMEOUT_WRITE, now_ms(c) + timeout_ms(c, CONN_TIMEOUT_WRITE));
}

/* ---- reading -------------------------------------------------------------------------------- */

static void set_reading(conn *c, bool on)
{
    if (on == ((c->flags & CONN_READING) != 0))
        return;
    if (!on) {
        c->io->read_stop(c);
        c->flags &= ~CONN_READING;
    } else if (c->io->read_start(c) == 0) {
        c->flags |= CONN_READING;
    } else {
        conn_close(c);
    }
}

/* Whether the connection should be reading now. */
static bool wants_input(const conn *c)
{
    if (c->flags & (CONN_PEER_EOF | CONN_HELD))
        return false;
    switch ((conn_phase)c->phase) {
    case CONN_OPEN:
        /* Not while the output drains, nor while yielded input waits for its turn. */
        return !(c->flags & CONN_OUT_PAUSED) && !(c->in_len && (c->flags & CONN_YIELDED));
    case CONN_ENDING:
    case CONN_LINGERING: return true; /* discarded, so the peer never blocks or gets a reset */
    default: return false;
    }
}

static size_t read_buffer_size(const conn *c)
{
    return config_of(c)->read_buffer;
}

static void release_input(conn *c)
{
    if (c->in) {
        if (c->in_size == read_buffer_size(c))
            pool_put(&c->loop->inbufs, c->in);
        else
            free(c->in); /* grown for a long message: not kept */
        c->in = NULL;
    }
    c->in_len = c->in_size = 0;
}

void conn_set_input_max(conn *c, size_t max)
{
    size_t rb = read_buffer_size(c);
    c->in_max = (uint32_t)(max < rb ? rb : max > UINT32_MAX / 2 ? UINT32_MAX / 2 : max);
}

/* Room for `need` bytes of input: the pooled buffer, or one grown (doubling) up to in_max.
 * Returns 0, or -1 when that is more than the protocol may leave or memory ran out. */
static int reserve_input(conn *c, size_t need)
{
    if (need <= c->in_size)
        return 0;
    if (need > c->in_max) {
        NET_STAT_ADD(c->loop->stats.proto_errors, 1); /* the protocol exceeded its own limit */
        return -1;
    }
    size_t rb = read_buffer_size(c), size = c->in_size ? c->in_size : rb;
    while (size < need)
        size *= 2;
    if (size > c->in_max)
        size = c->in_max;
    char *p = size == rb ? pool_get(&c->loop->inbufs) : malloc(size);
    if (!p) {
        NET_STAT_ADD(c->loop->stats.out_of_memory, 1);
        return -1;
    }
    if (c->in_len)
        memcpy(p, c->in, c->in_len);
    uint32_t len = c->in_len;
    release_input(c);
    c->in = p;
    c->in_len = len;
    c->in_size = (uint32_t)size;
    return 0;
}

/* Keeps the bytes the protocol did not consume. data may point into c->in. */
static int keep_input(conn *c, const char *data, size_t len)
{
    if (c->in && data >= c->in && data < c->in + c->in_size) {
        memmove(c->in, data, len);
        c->in_len = (uint32_t)len;
        return 0;
    }
    c->in_len = 0;
    if (reserve_input(c, len) != 0)
        return -1;
    memcpy(c->in, data, len);
    c->in_len = (uint32_t)len;
    return 0;
}

char *conn_io_read_buffer(conn *c, size_t *len)
{
    /* Grown here only below the maximum: at it, conn_io_read refuses the read (and counts the
     * protocol's error once). */
    if (c->in_len && (c->in_len < c->in_size ||
                      (c->in_size < c->in_max && reserve_input(c, (size_t)c->in_len + 1) == 0))) {
        *len = c->in_size - c->in_len;
        return c->in + c->in_len;
    }
    *len = read_buffer_size(c); /* nothing held, or no room to grow */
    return c->loop->read_buf;
}

/* Hands data (new bytes, or the kept input with new bytes appended) to the protocol. */
static void process(conn *c, const char *data, size_t len)
{
    set_phase(c, CONN_PROCESSING);
    c->flags &= ~CONN_YIELDED;
    ssize_t used = c->proto->on_data(c, data, len);
    if (c->phase == CONN_CLOSING)
        return;
    if (used < 0 || (size_t)used > len) {
        if (used != PROTO_CLOSE)
            NET_STAT_ADD(c->loop->stats.proto_errors, 1);
        conn_close(c);
        return;
    }
    if (c->flags & CONN_END_AFTER) {
        c->flags &= ~CONN_END_AFTER;
        if ((size_t)used < len)
            c->flags &= ~CONN_NO_LINGER; /* the peer sent more than we will answer */
        release_input(c);                /* nothing after the last response is processed */
        set_phase(c, CONN_ENDING);
    } else {
        set_phase(c, CONN_OPEN);
        if ((size_t)used == len) {
            release_input(c);
        } else if (keep_input(c, data + used, len - (size_t)used) != 0) {
            conn_close(c);
            return;
        }
    }
    advance(c);
}

void conn_io_read(conn *c, const char *data, size_t n)
{
    NET_STAT_ADD(c->loop->stats.bytes_in, n);
    NET_STAT_ADD(c->listener->stats.bytes_in, n);
    c->flags |= CONN_GOT_DATA;
    if (c->phase != CONN_OPEN)
        return; /* ending or lingering: discarded */
    if (c->flags & CONN_HELD) { /* read before the hold stopped the transport: kept for later */
        if (c->in && data == c->in + c->in_len)
            c->in_len += (uint32_t)n;
        else if (reserve_input(c, (size_t)c->in_len + n) == 0) {
            memcpy(c->in + c->in_len, data, n);
            c->in_len += (uint32_t)n;
        } else
            conn_close(c);
        return;
    }
    if (c->in && data == c->in + c->in_len) { /* read behind the unfinished message */
        c->in_len += (uint32_t)n;
        process(c, c->in, c->in_len);
    } else if (c->in_len == 0) {
        process(c, data, n); /* in the loop's buffer: what is left is kept afterwards */
    } else if (reserve_input(c, (size_t)c->in_len + n) == 0) {
        memcpy(c->in + c->in_len, data, n);
        c->in_len += (uint32_t)n;
        process(c, c->in, c->in_len);
    } else {
        conn_close(c); /* the protocol sat on more input than it may leave */
    }
}

void conn_io_eof(conn *c, int status)
{
    if (c->phase == CONN_CLOSING)
        return;
    set_reading(c, false);
    if (status != 0 || c->phase == CONN_LINGERING) {
        conn_close(c);
        return;
    }
    c->flags |= CONN_PEER_EOF; /* answer what was asked, then close */
    advance(c);
}

/* ---- writing -------------------------------------------------------------------------------- */

bool conn_output_full(const conn *c)
{
    return c->out.pending >= config_of(c)->out_high_water;
}

/* Writes what the transport takes now and hands the rest to one asynchronous write, whose
 * completion (conn_io_written) continues. Returns false when the connection was closed. */
static bool flush(conn *c)
{
    assert(c->phase == CONN_OPEN || c->phase == CONN_ENDING);
    if (c->inflight)
        return true;
    if (c->out.pending == 0) {
        obuf_reset(&c->out);
        return true;
    }
    uv_buf_t iov[CONN_TRY_IOV];
    size_t bytes;
    size_t n = obuf_iov(&c->out, 0, iov, CONN_TRY_IOV, &bytes);
    int r = c->io->try_write(c, iov, (unsigned)n);
    if (r > 0) {
        obuf_consume(&c->out, (size_t)r);
        NET_STAT_ADD(c->loop->stats.bytes_out, (uint64_t)r);
        NET_STAT_ADD(c->listener->stats.bytes_out, (uint64_t)r);
    } else if (r < 0 && r != UV_EAGAIN) {
        conn_close(c);
        return false;
    }
    if (c->out.pending == 0) {
        obuf_reset(&c->out);
        return true;
    }
    if (c->out.pending > config_of(c)->out_hard_cap) {
        NET_STAT_ADD(c->loop->stats.output_cap_closes, 1);
        conn_close(c);
        return false;
    }
    n = obuf_iov(&c->out, 0, iov, CONN_WRITE_IOV, &bytes);
    if (c->io->write(c, iov, (unsigned)n) != 0) {
        conn_close(c);
        return false;
    }
    c->inflight = bytes;
    arm(c, CONN_TIMEOUT_WRITE, now_ms(c) + timeout_ms(c, CONN_TIMEOUT_WRITE));
    return true;
}

void conn_io_written(conn *c, int status)
{
    size_t n = c->inflight;
    c->inflight = 0;
    if (c->phase == CONN_CLOSING)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    obuf_consume(&c->out, n);
    NET_STAT_ADD(c->loop->stats.bytes_out, n);
    NET_STAT_ADD(c->listener->stats.bytes_out, n);
    advance(c); /* progress: the rest is written, under a new write timeout */
    if (c->phase == CONN_OPEN && !c->inflight && !c->out.pending)
        restore_wait_timer(c);
}

/* Output that would pass the hard cap closes the connection before the memory is spent. A
 * protocol may queue a lot in one read (a memcached get of many large values: every value of
 * the read is copied before flush() sees the total), so checking only after the read would let
 * one short command line allocate gigabytes. */
static bool over_cap(conn *c, size_t len)
{
    if (c->phase == CONN_CLOSING)
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

/* ---- what next ------------------------------------------------------------------------------ */

/* The one place that decides what a connection does after any event: flush, close, half-close,
 * queue itself for the next turn, read or stop reading. Idempotent; never recursive. */
static void advance(conn *c)
{
    switch ((conn_phase)c->phase) {
    case CONN_OPEN:
        if (!flush(c))
            return;
        /* Backpressure, with hysteresis: above the high-water mark input waits (a write is in
         * flight, its completion comes back here); below half of it, paused work resumes while
         * the rest is still being written. */
        if (conn_output_full(c))
            c->flags |= CONN_OUT_PAUSED;
        else if (c->out.pending <= config_of(c)->out_high_water / 2)
            c->flags &= ~CONN_OUT_PAUSED;
        if (c->flags & CONN_HELD) { /* a response is owed: no close, no turn, no input */
            set_reading(c, false);
            return;
        }
        if (!c->out.pending && !c->inflight && !c->in_len &&
            ((c->flags & CONN_PEER_EOF) ||
             (c->loop->draining && c->wait_kind == CONN_TIMEOUT_IDLE))) {
            conn_close(c); /* all answered: the peer is gone, or the server drains */
            return;
        }
        if (c->in_len && (c->flags & CONN_YIELDED) && !(c->flags & CONN_OUT_PAUSED))
            net_loop_add_pending(c->loop, c);
        set_reading(c, wants_input(c));
        return;
    case CONN_ENDING:
        if (!flush(c))
            return;
        if (c->out.pending || c->inflight) {
            set_reading(c, wants_input(c));
            return;
        }
        /* Everything is written. When the peer may still be sending (it did not ask to close,
         * or sent more than we answered), half-close and read until it closes or drain_ms
         * passes, so that data still arriving does not turn our close into a reset that
         * destroys the response in its receive buffer. When the peer asked to close and nothing
         * is left unread, close at once (as nginx's lingering_close does). */
        c->flags |= CONN_ENDED;
        if ((c->flags & (CONN_PEER_EOF | CONN_NO_LINGER)) || c->io->shutdown(c) != 0) {
            conn_close(c);
            return;
        }
        set_phase(c, CONN_LINGERING);
        arm(c, CONN_TIMEOUT_WRITE, now_ms(c) + config_of(c)->drain_ms);
        set_reading(c, true);
        return;
    case CONN_PROCESSING: /* process() advances when on_data returns */
    case CONN_LINGERING:  /* waits for the peer's EOF or the drain timer */
    case CONN_CLOSING: return;
    }
}

void conn_flush_out(conn *c)
{
    if (c->phase == CONN_OPEN)
        advance(c);
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
        if (c->flags & CONN_HELD)
            ; /* its turn comes again with conn_release */
        else if (c->phase == CONN_OPEN && c->in_len)
            process(c, c->in, c->in_len);
        else
            advance(c);
        c = next;
    }
}

/* ---- opening and closing -------------------------------------------------------------------- */

int conn_fd(conn *c)
{
    uv_os_fd_t fd;
    if (c->fd >= 0)
        return c->fd; /* raw transport: libuv does not have it yet */
    if (c->tcp.type == UV_TCP && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        return fd;
    return -1;
}

int conn_sock_addr_text(int fd, bool peer, char *out, size_t n)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    char ip[INET6_ADDRSTRLEN] = "";
    memset(&sa, 0, sizeof sa);
    if (n)
        out[0] = '\0';
    if (fd < 0 || (peer ? getpeername(fd, (struct sockaddr *)&sa, &len)
                        : getsockname(fd, (struct sockaddr *)&sa, &len)) != 0)
        return 0;
    if (sa.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)&sa;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        snprintf(out, n, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
    } else if (sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)&sa;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        snprintf(out, n, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
    } else {
        snprintf(out, n, "<AF %d>", (int)sa.ss_family);
    }
    return sa.ss_family;
}

bool conn_draining(const conn *c)
{
    return c->loop->draining;
}

bool conn_age_passed(const conn *c)
{
    return now_ms(c) >= c->age_deadline;
}

void conn_close_aged(conn *c)
{
    if (conn_closing(c))
        return;
    NET_STAT_ADD(c->listener->stats.age_closes, 1);
    conn_close_after_flush(c);
}

/* This connection's deadline: now + its listener's max age less up to a tenth of it, drawn
 * uniformly (xorshift64 per loop: no syscall, no lock). Never above the configured cap, so the
 * setting is what it says; the spread (30 s for 300 s) is what keeps connections opened in one
 * burst from all reconnecting in the same instant, and it does not shrink over generations. */
static uint64_t age_deadline(net_loop *loop, uint32_t max_age_ms)
{
    if (!max_age_ms)
        return 0;
    uint64_t x = loop->jitter_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    loop->jitter_state = x;
    uint64_t spread = max_age_ms / 10;
    uint64_t at = uv_now(&loop->uv) + max_age_ms - (spread ? x % (spread + 1) : 0);
    return at ? at : 1;
}

conn *conn_open(net_loop *loop, net_listener *l, const conn_io *io, int fd, void *io_arg)
{
    net_server *s = loop->server;
    if (atomic_fetch_add(&s->open_conns, 1) >= s->cfg.max_connections) {
        atomic_fetch_sub(&s->open_conns, 1);
        NET_STAT_ADD(loop->stats.rejected_at_cap, 1);
        NET_STAT_ADD(l->stats.rejected_at_cap, 1);
        const char *why = l->spec->proto->reject_line;
        /* Best effort: a fresh socket takes a line. Plaintext on a TLS listener too, as memcached
         * -Z does: a TLS client reading bytes that are not a record fails its handshake without
         * answering, where a bare close makes some clients (Perl's IO::Socket::SSL) write an
         * alert into the reset socket and die of SIGPIPE (memcached's t/maxconns.t over TLS). */
        if (why && fd >= 0)
            (void)!send(fd, why, strlen(why), MSG_DONTWAIT | MSG_NOSIGNAL);
        return NULL;
    }
    const proto *p = l->spec->proto;
    conn *c = pool_get(&l->conns);
    if (!c) {
        atomic_fetch_sub(&s->open_conns, 1);
        NET_STAT_ADD(loop->stats.out_of_memory, 1);
        return NULL;
    }
    memset(c, 0, sizeof *c + p->state_size);
    c->io = io;
    c->fd = fd;
    c->io_arg = io_arg;
    c->loop = loop;
    c->listener = l;
    c->proto = p;
    c->phase = CONN_OPEN;
    c->in_max = (uint32_t)read_buffer_size(c);
    c->age_deadline = age_deadline(loop, l->spec->max_age_ms);
    wheel_timer_init(&c->timer, on_timer);
    obuf_init(&c->out, &loop->chunks);
    c->next = loop->conns;
    if (c->next)
        c->next->prev = c;
    loop->conns = c;
    NET_STAT_ADD(loop->stats.accepted, 1);
    NET_STAT_ADD(loop->stats.open, 1);
    c->wait_kind = CONN_TIMEOUT_HEADER;
    conn_set_timeout(c, CONN_TIMEOUT_HEADER);
    if (p->on_open)
        p->on_open(c);
    return c;
}

void conn_io_ready(conn *c)
{
    advance(c);
}

void conn_hold(conn *c)
{
    assert(!(c->flags & CONN_HELD));
    if (c->phase == CONN_CLOSING)
        return;
    c->flags |= CONN_HELD;
    if (c->phase != CONN_PROCESSING) /* inside on_data, process() advances when it returns */
        advance(c);
}

void conn_release(conn *c)
{
    if (!(c->flags & CONN_HELD))
        return;
    c->flags &= ~CONN_HELD;
    if (c->phase == CONN_PROCESSING || c->phase == CONN_CLOSING)
        return;
    /* Input kept while held (pipelined requests) gets its turn on the next loop turn, as
     * yielded input does: never processed from inside the caller's callback. */
    if (c->phase == CONN_OPEN && c->in_len)
        c->flags |= CONN_YIELDED;
    advance(c);
    if (c->phase == CONN_OPEN && !c->inflight && !c->out.pending)
        restore_wait_timer(c);
}

void conn_close(conn *c)
{
    if (c->phase == CONN_CLOSING)
        return;
    set_phase(c, CONN_CLOSING);
    c->flags &= ~(CONN_READING | CONN_END_AFTER); /* closing the transport stops its reads */
    wheel_cancel(&c->timer);
    c->io->close(c);
}

void conn_close_after_flush(conn *c)
{
    if (conn_closing(c))
        return;
    if (c->phase == CONN_PROCESSING) { /* takes effect when on_data returns */
        c->flags |= CONN_END_AFTER;
        return;
    }
    release_input(c);
    set_phase(c, CONN_ENDING);
    advance(c);
}

void conn_end_after_flush(conn *c)
{
    if (!conn_closing(c))
        c->flags |= CONN_NO_LINGER;
    conn_close_after_flush(c);
}

void conn_close_idle(net_loop *loop)
{
    for (conn *c = loop->conns, *next; c; c = next) {
        next = c->next;
        bool between_requests = c->wait_kind == CONN_TIMEOUT_IDLE ||
                                (c->wait_kind == CONN_TIMEOUT_HEADER && !(c->flags & CONN_GOT_DATA));
        if (c->phase == CONN_OPEN && between_requests && !c->out.pending && !c->inflight &&
            !c->in_len && !(c->flags & CONN_HELD))
            conn_close(c);
    }
}

/* Releases everything once the transport is closed; the protocol's on_close runs here, never
 * from inside its own callbacks. */
void conn_io_closed(conn *c)
{
    assert(c->phase == CONN_CLOSING);
    net_loop *loop = c->loop;
    if (c->flags & CONN_PENDING) { /* unlink from the run queue (short; rare) */
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
