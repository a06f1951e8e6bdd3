/* Test support: connections on an in-memory transport (transport.h), driven by hand, so a
 * protocol (HTTP, memcached text, echo) runs in-process through the real connection lifecycle:
 * the same conn.c deciding when to process, yield, flush, pause, time out, end and close, the
 * same pools, timing wheel and output buffer. Only the I/O primitives are simulated: there is
 * no socket and no running event loop.
 *
 * Compiled only into fuzz and test targets, never into the daemon.
 *
 * The simulated peer and loop:
 *   - reads: conn_fake_feed cuts the client's bytes into reads of the sizes the socket transport
 *     would read (conn_io_read_buffer) and delivers each (conn_io_read) once the connection reads;
 *   - the peer's reading speed: each try-write takes at most write_budget bytes; an asynchronous
 *     write completes on the next loop turn (the peer caught up);
 *   - loop turns: completing the write in flight, then the run queue (conn_run_pending), as
 *     often as the connection has queued work;
 *   - time: conn_fake_timeout expires the armed timer (conn_expire), whatever its deadline.
 *
 * Sanitizer friendliness: every read is its own heap copy of exactly the bytes delivered, freed
 * right after, so AddressSanitizer reports a protocol that reads past its input or keeps a pointer
 * into it.
 *
 * Threads: single-threaded, like a loop. Not thread-safe.
 */
#ifndef SF_NET_CONN_FAKE_H
#define SF_NET_CONN_FAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/conn.h"
#include "net/loop.h"
#include "net/proto.h"

typedef struct conn_fake_loop {
    net_server server; /* one loop, never started; specs[0] is the protocol's */
} conn_fake_loop;

/* Output sink: the bytes the connection "wrote", in order. */
typedef void (*conn_fake_sink)(const char *data, size_t len, void *arg);

typedef struct conn_fake {
    conn *c;
    conn_fake_loop *fl;
    /* The peer's reading speed: bytes each try-write takes (SIZE_MAX = all at once). What stays
     * queued goes to an asynchronous write, completed on the next loop turn. */
    size_t write_budget;
    conn_fake_sink sink;
    void *sink_arg;
    uint64_t bytes_out;
    /* The most output ever queued on the connection at once, taken at each flush (after each
     * on_data call, before the write): what the protocol added in one turn on top of what the
     * peer had not read yet. A test of a protocol's backpressure bounds it. */
    size_t max_pending;
    /* private: the asynchronous write in flight, and the transport's state */
    uv_buf_t write_iov[4];
    unsigned write_n;
    bool writing, shut_down, closed;
    uint64_t proto_errors; /* the loop's count at open */
} conn_fake;

/* Results of conn_fake_feed / conn_fake_timeout. */
enum {
    CONN_FAKE_OK = 0,     /* open; unconsumed input (if any) waits for more bytes */
    CONN_FAKE_ENDING = 1, /* ending after the queued output, lingering or closed after it */
    CONN_FAKE_CLOSED = 2, /* closed at once (conn_close, PROTO_CLOSE, limits) */
    CONN_FAKE_STUCK = -1, /* a loop turn ran the connection without it consuming or writing
                             anything, and it queued itself again: the real loop would spin */
    CONN_FAKE_BAD = -2,   /* on_data returned more than it was given (closed: a protocol bug) */
};

/* One loop (index 0) with cfg's pools and a listener slot for protocol p whose ctx is ctx.
 * Returns 0, or -1 with a reason in err. */
int conn_fake_loop_init(conn_fake_loop *fl, const net_config *cfg, const proto *p, void *ctx,
                        char *err, size_t errlen);
/* All connections must have been freed. Closes the loop's handles and frees everything. */
void conn_fake_loop_free(conn_fake_loop *fl);
static inline net_loop *conn_fake_net_loop(conn_fake_loop *fl)
{
    return &fl->server.loops[0];
}
static inline net_server *conn_fake_net_server(conn_fake_loop *fl)
{
    return &fl->server;
}
/* The protocol's ctx (net_listener_ctx) for connections opened from now on: the protocol's
 * server usually needs the net server first (http_server_new). */
static inline void conn_fake_set_ctx(conn_fake_loop *fl, void *ctx)
{
    fl->server.specs[0].ctx = ctx;
}

/* Opens a connection through conn_open (as the socket transport does on accept) and lets it
 * start reading. Returns 0, or -1 when out of memory or at max_connections. */
int conn_fake_open(conn_fake_loop *fl, conn_fake *f);
/* The client's bytes, in reads as the socket transport would make them, each delivered when
 * the connection reads (loop turns run in between while it has queued work); then turns until
 * it is quiet. */
int conn_fake_feed(conn_fake *f, const void *data, size_t len);
/* The armed timer expires (header, idle, write or drain), then turns until quiet. */
int conn_fake_timeout(conn_fake *f);
/* The peer reads everything the connection is writing, whatever write_budget says. Queued
 * input is not run (conn_fake_feed does that). */
void conn_fake_flush_all(conn_fake *f);
/* The peer's FIN. */
void conn_fake_peer_eof(conn_fake *f);
/* An ending connection's output is read first; then the connection is closed (if not yet) and
 * released through the real path (on_close, memory back to the pools). */
void conn_fake_free(conn_fake *f);

static inline bool conn_fake_closed(const conn_fake *f)
{
    return f->c->phase == CONN_CLOSING;
}

#endif
