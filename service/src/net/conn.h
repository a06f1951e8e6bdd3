/* A client connection: one lifecycle, driven by events, over a pluggable transport. Owned by one
 * loop thread; not thread-safe.
 *
 * Phases (conn_phase; every change goes through set_phase() in conn.c, which asserts it):
 *
 *     accept ──► OPEN ◄──────► PROCESSING          (proto->on_data runs; flush and ending wait)
 *                 │               │
 *                 │ close_after_flush / timeout
 *                 ▼               ▼
 *               ENDING ─── output all written ──► LINGERING ── peer EOF / drain_ms ──┐
 *                 │        (peer asked to close, or  │ (FIN sent, input discarded)     │
 *                 │         it is gone: no linger) ──┼─────────────────────────────────┤
 *                 ▼                                  ▼                                 ▼
 *   any phase ── conn_close / error / limit ──────► CLOSING ── transport closed ──► released
 *
 * What a connection does after any event (bytes read, a write completed, its turn in the run
 * queue, a timer, the peer's EOF) is decided in one function, advance(), from the phase and a few
 * orthogonal facts (flags below): flush the output, read or stop reading, queue itself for the
 * next loop turn, half-close, close.
 *
 * Output: protocols append with conn_write*(); it is flushed when on_data returns (try-write
 * first, an asynchronous write for the rest). Backpressure: above the high-water mark of queued
 * output the connection stops reading and protocols stop producing (conn_output_full); it resumes
 * below half of it; above the hard cap it is closed.
 *
 * Transports (net/transport.h): libuv streams, a raw socket for the first read of an accepted
 * connection, TLS over the socket, and an in-memory backend for tests and fuzzers all drive this
 * same code.
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
typedef struct conn_io conn_io;

typedef enum conn_phase {
    CONN_OPEN,       /* serving: input is handed to the protocol as it arrives */
    CONN_PROCESSING, /* inside proto->on_data: flushing and ending wait until it returns */
    CONN_ENDING,     /* the last response is queued: input is discarded, output flushed */
    CONN_LINGERING,  /* FIN sent: input discarded until the peer closes or drain_ms passes */
    CONN_CLOSING,    /* the transport is closing; released in its close callback */
} conn_phase;

/* Facts independent of the phase. */
enum {
    CONN_READING = 1u << 0,    /* the transport is delivering input */
    CONN_PENDING = 1u << 1,    /* queued to run on the next loop turn */
    CONN_YIELDED = 1u << 2,    /* the protocol left input it will handle on a later turn */
    CONN_OUT_PAUSED = 1u << 3, /* above the high-water mark: input waits for the output to drain */
    CONN_PEER_EOF = 1u << 4,   /* the peer closed its side */
    CONN_NO_LINGER = 1u << 5,  /* the peer asked to close: no half-close and drain */
    CONN_GOT_DATA = 1u << 6,   /* at least one byte arrived */
    CONN_END_AFTER = 1u << 7,  /* PROCESSING: the protocol asked to end after this response */
    CONN_ENDED = 1u << 8,      /* ENDING completed: the last response was all written */
    CONN_HELD = 1u << 9,       /* conn_hold: a response is owed later; input and turns wait */
};

struct conn {
    union {
        uv_tcp_t tcp;   /* libuv transport */
        uv_poll_t poll; /* TLS transport: the socket's readiness, OpenSSL reads and writes it */
    };
    const conn_io *io; /* the transport (net/transport.h) */
    int fd;            /* raw and TLS transports: the socket (libuv's own once it has it) */
    void *io_arg;      /* the transport's own (in-memory backend) */
    net_loop *loop;
    net_listener *listener;
    const proto *proto;
    conn *prev, *next;  /* the loop's connection list */
    conn *pending_next; /* the loop's run queue */
    obuf out;
    size_t inflight; /* bytes handed to the asynchronous write in flight */
    char *in;         /* unconsumed input, or NULL: pooled (read_buffer bytes) or, grown, malloc'd */
    uint32_t in_len;  /* bytes in it */
    uint32_t in_size; /* its capacity */
    uint32_t in_max;  /* the most unconsumed input the protocol may leave (conn_set_input_max) */
    uint8_t phase;    /* conn_phase */
    uint16_t flags;   /* CONN_READING ... */
    uint8_t timer_kind;       /* conn_timeout_kind the armed timer means */
    uint8_t wait_kind;        /* HEADER or IDLE: what the connection waits for between writes */
    bool peer_listed;         /* TLS: the client certificate is in the listener's access list
                               * (net_tls_peer_check, once, after the handshake) */
    uint64_t wait_deadline;   /* absolute ms, restored when a write completes */
    uint64_t age_deadline;    /* loop ms past which the connection is retired (its listener's
                               * max age, jittered; conn_aged), or 0: no cap */
    wheel_timer timer;
    uv_write_t write_req;
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
static inline conn_phase conn_phase_of(const conn *c)
{
    return (conn_phase)c->phase;
}
const char *conn_phase_name(conn_phase p); /* for logs and test messages */
/* True when the connection came with a verified client certificate its listener's access list
 * names (net/tls.h, net_tls.peers): decided once after the handshake, kept for the connection's
 * life (a certificate rotated meanwhile changes nothing for it, as TLS itself). Never on a
 * plaintext connection. One load: protocols check it per request. */
static inline bool conn_peer_listed(const conn *c)
{
    return c->peer_listed;
}

/* Output. Returns 0, or -1 when out of memory or over the hard cap (the connection is then
 * closed). */
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

/* Input. Bytes a protocol does not consume are kept in the connection's input buffer and offered
 * again, at the start of `data`, with the bytes that arrive next (a message cut by a read), or
 * on a later loop turn (conn_yield). Protocols parse in place and may keep offsets into what they
 * leave unconsumed. The buffer grows (it starts at read_buffer bytes) up to `max` bytes, by
 * default read_buffer: a protocol that needs more for one message (a long request head) raises
 * it in on_open, and must answer its own error (431, CLIENT_ERROR ...) before leaving more than
 * that; a protocol that does not is closed (a bug, counted in proto_errors). */
void conn_set_input_max(conn *c, size_t max);

/* The protocol stopped with unconsumed input it can handle later (fairness cap or output
 * full): the rest of this read is kept and offered again on a later loop turn. */
void conn_yield(conn *c);

/* Sends what a protocol wrote outside on_data (from a timer of its own, e.g. memcached's watch):
 * the connection then goes on as after any event. Not needed, and not to be called, from inside
 * on_data (its output is flushed when it returns). */
void conn_flush_out(conn *c);

/* (Re)arms the connection's single timer for this wait with the configured duration. */
void conn_set_timeout(conn *c, conn_timeout_kind kind);

/* Holding (a protocol that answers a request later, e.g. a parked /seq burst): while held the
 * connection reads nothing (the transport stops reading, TLS included), takes no run-queue turn,
 * and is neither closed as "all answered" (the peer's EOF, a drain) nor by its header or idle
 * timer (re-armed instead; the write timer of output in flight still applies). Input already
 * buffered stays buffered and is handed to the protocol, in order, after conn_release. Output
 * written meanwhile (an earlier pipelined response) is still flushed. conn_close, a transport
 * error and a server's grace timer still close a held connection: the protocol's on_close runs
 * as always, and must forget the held request there. Loop thread; conn_hold is normally called
 * from inside on_data, conn_release from a timer or any callback outside it (it flushes what the
 * protocol wrote and resumes as after any event; inside on_data it only clears the hold).
 * Neither nests: one hold at a time. */
void conn_hold(conn *c);
void conn_release(conn *c);
static inline bool conn_held(const conn *c)
{
    return (c->flags & CONN_HELD) != 0;
}

/* Closes at once; queued output is dropped. */
void conn_close(conn *c);
/* Send what is queued, then half-close and drain the peer briefly (it may still be sending). */
void conn_close_after_flush(conn *c);
/* The same when the peer itself asked to close: skip the drain unless it sent more than was
 * answered. */
void conn_end_after_flush(conn *c);
/* True once the connection is ending or closed: nothing more will be read for the protocol. */
static inline bool conn_closing(const conn *c)
{
    return c->phase >= CONN_ENDING || (c->flags & CONN_END_AFTER);
}
/* The connection's socket (for getpeername, `stats conns`), or -1 (in-memory transport). */
int conn_fd(conn *c);
/* fd's peer (peer) or local address as "1.2.3.4:5" or "[::1]:5" into out (n bytes;
 * INET6_ADDRSTRLEN + 8 hold any), "<AF n>" for another family. Returns the address family, or 0 when fd is < 0 or the
 * socket does not say (out is then ""). */
int conn_sock_addr_text(int fd, bool peer, char *out, size_t n);
/* True while the server drains for shutdown: protocols answer with "Connection: close". */
bool conn_draining(const conn *c);

/* Connection age cap (net_server_set_max_age): true once the connection is older than its
 * listener's cap, drawn per connection in [0.9, 1.0] x the cap at accept so that connections
 * opened together (a fleet's clients after a rollout) do not all reconnect at once. A protocol
 * checks it when it is between requests and retires the connection there: HTTP at the next
 * response (Connection: close), memcached after the reply that crosses it. Nothing is armed:
 * one load and one compare against the loop's cached time, no syscall. An idle connection is
 * left to its idle timeout (an idle one carries no load, and closing it races the request its
 * client may be sending). */
bool conn_age_passed(const conn *c);
static inline bool conn_aged(const conn *c)
{
    return c->age_deadline != 0 && conn_age_passed(c);
}
/* conn_close_after_flush for a connection retired by its age: counted per listener
 * (net_listener_stats.age_closes, snowflaked_connection_age_closes_total). */
void conn_close_aged(conn *c);

/* Called by the listener with an accepted, non-blocking socket. Returns 0 or a negative errno. */
int conn_accept(net_loop *loop, net_listener *l, int fd);
/* Runs the connections queued for this turn (called by the loop once per turn). */
void conn_run_pending(net_loop *loop);
/* Closes connections that are idle between requests (server drain). */
void conn_close_idle(net_loop *loop);

#endif
