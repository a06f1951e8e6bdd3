/* A client connection: socket, pooled buffers, one timer, limits. Owned by one loop thread.
 *
 * Life: accepted by a listener -> proto->on_open -> reads handed to proto->on_data -> responses
 * appended with conn_write*() -> flushed once per read (uv_try_write, then uv_write for the
 * rest) -> closed by conn_close() (at once) or conn_close_after_flush() (send what is queued,
 * half-close, drain the peer briefly so it sees the response instead of a reset) ->
 * proto->on_close -> memory back to the loop's pool after libuv's close callback.
 *
 * Backpressure: while queued output exceeds the high-water mark the connection stops reading
 * (and protocols stop producing: see conn_yield); above the hard cap it is closed.
 * Not thread-safe: every function must be called on the owning loop's thread.
 */
#ifndef SF_NET_CONN_H
#define SF_NET_CONN_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "net/obuf.h"
#include "net/proto.h"
#include "net/wheel.h"

typedef struct net_loop net_loop;
typedef struct net_listener net_listener;

enum {
    CONN_CLOSING = 1u << 0, /* uv_close issued */
    CONN_CLOSE_AFTER_FLUSH = 1u << 1,
    CONN_SHUTDOWN = 1u << 2,   /* FIN sent, draining the peer */
    CONN_READING = 1u << 3,    /* uv_read_start active */
    CONN_YIELDED = 1u << 4,    /* unconsumed input waits for the next loop turn */
    CONN_PENDING = 1u << 5,    /* on the loop's pending list */
    CONN_IN_DATA = 1u << 6,    /* inside proto->on_data: flush and close are deferred */
    CONN_PEER_EOF = 1u << 7,   /* the peer closed its side */
    CONN_GOT_DATA = 1u << 8,   /* at least one byte arrived */
    CONN_OUT_PAUSED = 1u << 9, /* reading stopped until output drains */
    CONN_NO_LINGER = 1u << 10, /* the peer asked to close: no half-close and drain */
    CONN_RAW = 1u << 11,       /* socket not yet handed to libuv (see conn_accept) */
};

struct conn {
    uv_tcp_t tcp;
    net_loop *loop;
    net_listener *listener;
    const proto *proto;
    conn *prev, *next;  /* the loop's connection list */
    conn *pending_next; /* the loop's list of connections with work to resume */
    obuf out;
    size_t inflight; /* bytes handed to the uv_write in flight */
    char *in;        /* unconsumed input (pooled, read_buffer bytes), or NULL */
    uint32_t in_len;
    uint32_t flags;
    conn_timeout_kind timer_kind; /* what the armed timer means */
    conn_timeout_kind phase;      /* HEADER or IDLE: restored when a write completes */
    uint64_t phase_deadline;      /* absolute ms, for the restore */
    wheel_timer timer;
    uv_write_t write_req;
    int raw_fd;               /* the socket while CONN_RAW */
    uint64_t requests;        /* for protocols: requests served on this connection */
    alignas(16) char state[]; /* protocol state, proto->state_size bytes */
};

static inline void *conn_state(conn *c)
{
    return c->state;
}
static inline net_loop *conn_loop(conn *c)
{
    return c->loop;
}

/* Output. Returns 0, or -1 when out of memory (the connection is then closed). */
int conn_write(conn *c, const void *data, size_t len);
char *conn_reserve(conn *c, size_t want); /* want <= OBUF_CHUNK_SIZE; NULL closes */
static inline void conn_commit(conn *c, size_t n)
{
    obuf_commit(&c->out, n);
}
static inline size_t conn_output_pending(const conn *c)
{
    return c->out.pending;
}
/* True when the protocol should stop producing and return what it consumed so far. */
bool conn_output_full(const conn *c);

/* The protocol stopped with unconsumed input it can handle later (fairness cap or output
 * full): the rest of this read is kept and offered again on a later loop turn. */
void conn_yield(conn *c);

/* (Re)arms the connection's single timer for this phase with the configured duration. */
void conn_set_timeout(conn *c, conn_timeout_kind kind);

void conn_close(conn *c);
/* Send what is queued, then half-close and drain the peer briefly (it may still be sending). */
void conn_close_after_flush(conn *c);
/* The same when the peer itself asked to close: skip the drain unless it sent more than was
 * answered. */
void conn_end_after_flush(conn *c);
static inline bool conn_closing(const conn *c)
{
    return (c->flags & (CONN_CLOSING | CONN_CLOSE_AFTER_FLUSH)) != 0;
}
/* True while the server drains for shutdown: protocols answer with "Connection: close". */
bool conn_draining(const conn *c);

/* Called by the listener with an accepted, non-blocking socket. Returns 0 or a negative errno. */
int conn_accept(net_loop *loop, net_listener *l, int fd);
/* Runs the connections whose processing was deferred (called by the loop once per turn). */
void conn_run_pending(net_loop *loop);
/* Closes connections that are idle between requests (server drain). */
void conn_close_idle(net_loop *loop);

#endif
