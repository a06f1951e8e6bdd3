/* Event loops, listeners and the server that runs them.
 *
 * net_server owns N loop threads, each with its own uv_loop_t, timing wheel, pools and a
 * listening socket per listener bound with SO_REUSEPORT, so the kernel spreads connections and a
 * connection never leaves its loop. Without SO_REUSEPORT, loop 0 accepts for everyone and hands
 * sockets over (uv_async_send + uv_tcp_open). Accepting is our own loop over accept4() on a
 * uv_poll_t, so that EMFILE/ENFILE pause accepting for a moment instead of spinning.
 *
 * Threads: net_server_* are called from the main thread; everything else runs on loop threads.
 * Counters are per loop, single writer, relaxed atomics (plain loads and stores on x86), summed by
 * readers on other threads without locks.
 */
#ifndef SF_NET_LOOP_H
#define SF_NET_LOOP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "net/conn.h"
#include "net/listen_guard.h"
#include "net/pool.h"
#include "net/tls.h"
#include "net/wheel.h"
#include "util/counter.h"

#define NET_MAX_LISTENERS 8 /* HTTP, memcached, echo, each also over TLS */
#define NET_MAX_LOOPS     256

typedef struct net_config {
    uint32_t max_connections; /* global */
    uint32_t header_timeout_ms, idle_timeout_ms, write_timeout_ms;
    uint32_t drain_ms; /* linger after half-close before closing */
    uint32_t shutdown_grace_ms;
    size_t out_high_water; /* stop reading above this much queued output */
    size_t out_hard_cap;   /* close above this */
    int backlog;
    bool tcp_nodelay;
    bool reuseport;
    int so_rcvbuf, so_sndbuf; /* 0 = kernel default */
    int defer_accept_s;       /* TCP_DEFER_ACCEPT, 0 = off */
    size_t read_buffer;       /* per-loop read buffer; also the most unconsumed input kept */
    size_t pool_idle_max;     /* idle objects each per-loop pool keeps for reuse */
} net_config;

/* Per-loop counters. Single writer (the loop), read by scrapers: NET_STAT_ADD / net_stat, thin
 * names for util/counter.h's counter_add / counter_get. */
typedef struct net_stats {
    _Atomic uint64_t accepted, rejected_at_cap, closed, accept_errors, accept_pauses;
    _Atomic uint64_t timeouts[3]; /* by conn_timeout_kind */
    _Atomic uint64_t output_cap_closes, out_of_memory;
    _Atomic uint64_t proto_errors; /* on_data claimed more bytes than it was given (a bug) */
    _Atomic uint64_t served_raw;   /* answered and closed on the first read, never on the loop */
    _Atomic uint64_t bytes_in, bytes_out;
    _Atomic uint64_t open; /* current connections of this loop */
} net_stats;

/* The same per listener of a loop (one protocol's share of the loop's traffic; single writer). */
typedef struct net_listener_stats {
    _Atomic uint64_t bytes_in, bytes_out, rejected_at_cap, accept_pauses;
    _Atomic uint64_t age_closes; /* connections retired by the listener's max age */
    /* TLS listeners: handshakes completed ([1]: resumed) and failed, by cause; connections that
     * got kernel TLS ([0] send, [1] receive) */
    _Atomic uint64_t tls_handshakes[2], tls_failures[NET_TLS_FAIL_COUNT], tls_ktls[2];
    /* TLS listeners with an access list (net_tls.peers): completed handshakes by net_tls_peer */
    _Atomic uint64_t tls_peers[NET_TLS_PEER_COUNT];
} net_listener_stats;

#define NET_STAT_ADD(field, n) counter_add(&(field), (n))
#define net_stat(f)            counter_get(f)

typedef struct net_listener_spec {
    char host[64];
    uint16_t port;
    const proto *proto;
    void *ctx;                /* for the protocol: net_listener_ctx(conn->listener) */
    int shared_fd;            /* the one socket when reuseport is off, else -1 */
    uint32_t idle_timeout_ms; /* between requests; 0 = the server's (net_config) */
    uint32_t max_age_ms;      /* connection age cap (conn_aged); 0 = none */
    lg_addr addr;             /* what we bound */
    bool steered;             /* our SO_REUSEPORT group picks only our sockets (the CBPF program) */
    int steer_errno;          /* why not, with reuseport on: the kernel refused the program */
    bool joined;              /* net_server_watch (main thread): a foreign member last time */
    net_tls *tls;             /* TLS on this listener (the caller's, outlives the server), or NULL */
} net_listener_spec;

typedef struct net_server net_server;

struct net_listener {
    net_loop *loop;
    const net_listener_spec *spec;
    int fd;            /* -1 when another loop accepts for this one */
    unsigned long ino; /* the socket's inode (fd >= 0): ours, when /proc lists listeners */
    uv_poll_t poll;
    uv_timer_t pause_timer; /* accept paused after EMFILE/ENFILE */
    pool conns;             /* conn + protocol state */
    bool polling;
    net_listener_stats stats;
};

static inline void *net_listener_ctx(const net_listener *l)
{
    return l->spec->ctx;
}

typedef struct net_handoff {
    int fd;
    unsigned listener;
} net_handoff;

#define NET_HANDOFF_MAX 1024

struct net_loop {
    uv_loop_t uv;
    unsigned index;
    net_server *server;
    uv_thread_t thread;
    uv_async_t async;        /* drain requests and socket hand-offs */
    uv_timer_t wheel_timer;  /* the single timer driving the wheel */
    uint64_t wheel_armed_at; /* UINT64_MAX when not armed */
    uv_timer_t grace_timer;
    uv_timer_t tick_timer; /* periodic housekeeping for the application */
    uv_timer_t tls_timer;  /* with a TLS listener: idle connections' OpenSSL buffers given back */
    unsigned tick_cursor;  /* the application's per-loop position (e.g. a sweep) */
    uint64_t jitter_state; /* xorshift64 state: each connection's share of its max age */
    uv_idle_t pending_idle;
    conn *pending_head, *pending_tail;
    wheel wheel;
    pool chunks;    /* output chunks */
    pool inbufs;    /* read_buffer-sized buffers for unconsumed input */
    char *read_buf; /* shared by all reads of this loop */
    conn *conns;    /* every open connection */
    net_listener listeners[NET_MAX_LISTENERS];
    unsigned nlisteners;
    uv_mutex_t handoff_mu;
    net_handoff handoff[NET_HANDOFF_MAX];
    unsigned handoff_n;
    net_stats stats;
    bool draining, closing;
};

struct net_server {
    net_config cfg;
    net_loop *loops;
    unsigned nloops;
    net_listener_spec specs[NET_MAX_LISTENERS];
    unsigned nspecs;
    _Atomic uint32_t open_conns;
    uint32_t fd_conn_cap; /* connections that fit RLIMIT_NOFILE with descriptors to spare for the
                           * rest of the process (lease, snapshots, log); net_server_start */
    _Atomic bool draining;
    _Atomic unsigned handoff_next;        /* round robin in fallback mode */
    bool reuseport;                       /* in effect (config and kernel) */
    void (*tick)(net_loop *l, void *arg); /* see net_server_on_tick */
    void *tick_arg;
    uint32_t tick_ms;
    bool started;
    bool threads_joined; /* net_server_wait ran */
    /* Foreign listeners on our ports (net_server_watch, main thread; the atomics for any). */
    _Atomic uint32_t foreign_now;      /* listening now on an address overlapping ours */
    _Atomic uint32_t foreign_harmful;  /* of those, the ones that can take our connections */
    _Atomic uint64_t foreign_appeared; /* appearances since start */
    unsigned long foreign_known[LG_MAX_FOUND]; /* inodes seen by the last watch */
    size_t nforeign_known;
    lg_listener *scan_buf; /* room for every listener of ours and LG_MAX_FOUND others */
    size_t scan_cap;
};

/* Raises RLIMIT_NOFILE to the hard limit and allocates the loops (not started). */
int net_server_init(net_server *s, const net_config *cfg, unsigned nloops, char *err,
                    size_t errlen);
/* Binds host:port for every loop (or once, without reuseport) and attaches the protocol.
 * Call before net_server_start. Returns 0, or -1 with a message naming the address.
 *
 * The port is ours alone: for snowflaked a shared port means duplicate IDs (two processes each
 * get part of the connections). So, before binding, a probe socket with SO_REUSEADDR but without
 * SO_REUSEPORT is bound to the address: EADDRINUSE means something listens on an overlapping
 * address (the same one, the wildcard of the family when we take one address or the reverse, a
 * dual-stack [::]) and we refuse, naming the other process when /proc tells (listen_guard.h).
 * After listening, every LISTEN socket on an overlapping address must be one of ours: two
 * processes that probed at the same moment both refuse (a supervisor retries). Only then, with
 * reuseport, a classic BPF program (SO_ATTACH_REUSEPORT_CBPF) is attached that picks a random
 * socket index below nloops for each new connection, in the kernel: our sockets joined the group
 * first and hold those indices, so a foreign socket joining later (same uid, SO_REUSEPORT) gets
 * no connection. Attaching after the check means a daemon that is about to refuse never
 * replaces the group's program (any member may). A kernel that refuses the program leaves
 * spec.steered false (steer_errno says why). */
int net_server_listen(net_server *s, const char *host, uint16_t port, const proto *p, void *ctx,
                      char *err, size_t errlen);
/* The same for a listener speaking TLS with tls's context (net/tls.h): every connection
 * handshakes first (within header_timeout_ms) and never takes the one-shot raw path. */
int net_server_listen_tls(net_server *s, const char *host, uint16_t port, const proto *p,
                          void *ctx, net_tls *tls, char *err, size_t errlen);
/* The listeners serving ctx wait idle_ms (> 0) for an idle connection's next request instead of
 * the server's idle_timeout_ms (memcached's -o idle_timeout on its listener). Before
 * net_server_start. */
void net_server_set_idle_timeout(net_server *s, const void *ctx, uint32_t idle_ms);
/* The listeners serving ctx retire their connections past max_age_ms (> 0; conn_aged): the
 * protocol closes each one at its next request boundary after the age. Before
 * net_server_start. */
void net_server_set_max_age(net_server *s, const void *ctx, uint32_t max_age_ms);
/* Calls tick(loop, arg) on every loop thread every interval_ms (housekeeping such as the cache
 * expiry sweep). Call before net_server_start. */
void net_server_on_tick(net_server *s, uint32_t interval_ms, void (*tick)(net_loop *, void *),
                        void *arg);
/* How a foreign LISTEN socket on an address overlapping ours can take our connections. */
typedef enum net_foreign_kind {
    NET_FOREIGN_OVERLAP, /* another address or family: the kernel prefers the more specific one
                          * (or the other family's socket) for some of our connections */
    NET_FOREIGN_GROUP,   /* our address, joined our SO_REUSEPORT group: our program steers it
                          * nothing until it attaches its own, which any member may do */
    NET_FOREIGN_DEVICE,  /* our address, bound to a device (SO_BINDTODEVICE): another group,
                          * looked up before ours for connections arriving on that device */
} net_foreign_kind;
/* What net_server_watch found: a foreign LISTEN socket l on an address overlapping spec's. On
 * our address, without sock_diag (!l->diag) a device cannot be told: NET_FOREIGN_GROUP. */
typedef void (*net_foreign_report)(void *arg, const net_listener_spec *spec, const lg_listener *l,
                                   net_foreign_kind kind);
/* Housekeeping, main thread, after net_server_start and before the drain: rescans the kernel's
 * listeners (listen_guard.h) on our ports, calls report once for each foreign one that appeared
 * since the last call, and updates foreign_now / foreign_harmful (the same number: every kind
 * can take our connections) / foreign_appeared. While a foreign socket may be in our group, and
 * once after it left, our steering program is attached again (a program it attached is
 * replaced). Not every second regardless: reuseport_attach_prog frees the replaced classic
 * program without an RCU grace period while a SYN on another CPU may be running it, so a
 * replacement is done only when one may be needed. Without the kernel's table: nothing. */
void net_server_watch(net_server *s, net_foreign_report report, void *arg);
/* Starts the loop threads. */
int net_server_start(net_server *s, char *err, size_t errlen);
/* From any thread: stop accepting, close idle connections, let in-flight requests finish,
 * force-close the rest after shutdown_grace_ms. Idempotent. */
void net_server_drain(net_server *s);
static inline bool net_server_draining(const net_server *s)
{
    return atomic_load_explicit(&s->draining, memory_order_relaxed);
}
/* Waits for every loop thread to finish (after net_server_drain), once. The loops are not closed
 * yet: threads that do file I/O after the loops stopped (lease keeper, snapshot) should be
 * stopped in between, because libuv closes its descriptors with a raw system call that
 * ThreadSanitizer cannot see, and a descriptor number reused by another thread would be
 * reported as a race. */
void net_server_wait(net_server *s);
/* net_server_wait, then closes the loops and frees everything. */
void net_server_join(net_server *s);

/* The counters of listener l summed over every loop's copy of it (the same address and
 * protocol), from any thread: *out gets the sums. */
void net_listener_stats_sum(const net_listener *l, net_listener_stats *out);

/* Sum of one counter over all loops, from any thread. */
uint64_t net_server_stat_sum(const net_server *s, size_t offset_in_stats);
#define NET_SERVER_STAT(s, field) net_server_stat_sum((s), offsetof(net_stats, field))

/* Loop-internal, used by conn.c. */
void net_loop_arm_wheel(net_loop *l, uint64_t expire_at);
void net_loop_add_pending(net_loop *l, conn *c);
void net_loop_conn_closed(net_loop *l);

#endif
