/* Test support: a net loop without sockets and connections fed by hand, so a protocol (HTTP,
 * memcached text, echo) runs in-process exactly as on a real connection: same conn struct, same
 * pools, same timing wheel, same output buffer, same conn_write / conn_yield / close calls.
 *
 * Compiled only into fuzz and test targets, never into the daemon.
 *
 * What is real and what is simulated.
 *   Real: net_server_init (uv_loop_init, pools, wheel; the loop never runs, so no I/O ever
 *   happens), the listener's connection pool, every conn_* function the protocol calls.
 *   Simulated here, mirroring conn.c: accepting (conn_fake_open instead of conn_accept),
 *   reading (conn_fake_feed instead of libuv reads), keeping unconsumed input and offering it
 *   again (as process() and conn_run_pending do), writing (the output is handed to a sink and
 *   consumed instead of going to a socket), timeouts (conn_fake_timeout fires the armed kind, as
 *   on_timer does) and the final release (conn_fake_free, as finalize does).
 *   The connection keeps CONN_RAW with no descriptor (raw_fd = -1) and CONN_IN_DATA set for its
 *   whole life: conn.c's own flush is then always deferred and never touches a socket, and
 *   conn_close only marks the connection closing.
 *
 * Sanitizer friendliness: every on_data call gets its own heap copy of exactly the bytes offered,
 * freed right after the call, so AddressSanitizer reports a protocol that reads past the input or
 * keeps a pointer into it.
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
    char *in; /* unconsumed input, up to read_buffer bytes (as conn.c's c->in) */
    size_t in_len;
    /* The peer's reading speed: bytes accepted per flush (SIZE_MAX = all at once). What stays
     * queued makes conn_output_full() true for the protocol; before more input is offered the
     * output is drained to the resume mark, as on_write does. */
    size_t write_budget;
    conn_fake_sink sink;
    void *sink_arg;
    uint64_t bytes_out;
    unsigned turns; /* on_data calls made */
    /* The most output ever queued on the connection at once: taken after each on_data call,
     * before the flush, i.e. what the protocol added in one turn on top of what the peer had not
     * read yet. A test of a protocol's backpressure bounds it. */
    size_t max_pending;
} conn_fake;

/* Results of conn_fake_feed / conn_fake_timeout. */
enum {
    CONN_FAKE_OK = 0,     /* open; unconsumed input (if any) waits for more bytes */
    CONN_FAKE_ENDING = 1, /* closing after the queued output (close_after_flush) */
    CONN_FAKE_CLOSED = 2, /* closed at once (conn_close, PROTO_CLOSE, limits) */
    CONN_FAKE_STUCK = -1, /* the protocol yielded without consuming or writing anything: the
                             real loop would offer the same bytes forever (a busy loop) */
    CONN_FAKE_BAD = -2,   /* on_data returned more than it was given */
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

/* Accepts a connection (pooled, zeroed state, on_open called, header timeout armed), as
 * conn_accept does for a socket. Returns 0, or -1 when out of memory. */
int conn_fake_open(conn_fake_loop *fl, conn_fake *f);
/* One or more reads of these bytes (split at read_buffer, as the kernel would), each processed
 * as conn.c's received() + process() would, including re-offering yielded input on the
 * following loop turns. Output goes to the sink. */
int conn_fake_feed(conn_fake *f, const void *data, size_t len);
/* The armed timer fires (header or idle timeout): the protocol's on_timeout, then the close
 * after the flush, as on_timer does. A write or drain timer just closes. */
int conn_fake_timeout(conn_fake *f);
/* The peer reads everything queued (whatever write_budget says), as a peer that finally catches
 * up would. Kept input is not offered again: conn_fake_feed does that before its next read.
 * Nothing on a connection closed at once (its output is dropped, as conn_close does). */
void conn_fake_flush_all(conn_fake *f);
/* The peer's FIN: once everything asked was answered and sent, the close (settle). */
void conn_fake_peer_eof(conn_fake *f);
/* Closes (if not closed yet), calls the protocol's on_close and returns the memory to the
 * pools, as finalize does after libuv's close callback. */
void conn_fake_free(conn_fake *f);

static inline bool conn_fake_closed(const conn_fake *f)
{
    return (f->c->flags & CONN_CLOSING) != 0;
}

#endif
