/* The interface between the connection layer and a protocol (HTTP, memcached text, raw echo).
 *
 * The connection layer owns the socket, buffers, timeouts, limits and pooling; a protocol only
 * turns bytes into responses. All callbacks run on the connection's loop thread.
 *
 *   on_open   a connection was accepted; its state (state_size bytes, zeroed) is ready.
 *   on_data   bytes arrived. Consume what you can, append responses with conn_write*(), and
 *             return how many bytes were consumed. Bytes not consumed are kept: after
 *             conn_yield() (max_pipeline reached, or conn_output_full()) they are offered again
 *             on a later loop turn, once output is below the low-water mark; otherwise they are
 *             offered again with the next bytes that arrive (an incomplete message). Return
 *             PROTO_CLOSE to close at once; conn_close_after_flush() / conn_end_after_flush()
 *             end the connection after the queued output.
 *   on_timeout the connection's deadline passed (header or idle timeout); the protocol may write
 *             a last response (e.g. 408) — the connection then closes. Optional.
 *   on_close  the connection is going away; release what the state holds. Called exactly once,
 *             never from inside on_data. Optional.
 */
#ifndef SF_NET_PROTO_H
#define SF_NET_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct conn conn;

#define PROTO_CLOSE ((ssize_t)-1)

typedef enum { CONN_TIMEOUT_HEADER, CONN_TIMEOUT_IDLE, CONN_TIMEOUT_WRITE } conn_timeout_kind;

typedef struct proto {
    const char *name;
    size_t state_size;
    /* Optional: written (best effort, never waited for) to a connection refused because the
     * server is at max_connections, before it is closed; NULL closes without a word. */
    const char *reject_line;
    /* Accept connections when they are made, not when their first bytes arrive (no
     * TCP_DEFER_ACCEPT whatever server.tcp_defer_accept_s says): for protocols whose clients
     * open connections ahead of use, which must count (and be refused at max_connections) then. */
    bool accept_at_connect;
    void (*on_open)(conn *c);
    ssize_t (*on_data)(conn *c, const char *data, size_t len);
    void (*on_timeout)(conn *c, conn_timeout_kind kind);
    void (*on_close)(conn *c);
} proto;

#endif
