#include "net/loop.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/transport.h"

#define ACCEPTS_PER_WAKEUP 64  /* fairness between accepting and serving */
#define ACCEPT_PAUSE_MS    100 /* after EMFILE/ENFILE */
/* Descriptors that client connections may not take: the lease keeper, cache snapshots and the
 * log reopen each need one for a moment, and a lease that cannot be renewed stops the IDs. */
#define FD_RESERVE 8

/* ---- sockets ------------------------------------------------------------------------------ */

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        *len = sizeof *in4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        *len = sizeof *in6;
        return 0;
    }
    return -1;
}

/* A listening socket, options set before bind (SO_REUSEPORT must be). Returns fd or -errno. */
static int open_listener(const net_config *cfg, const struct sockaddr_storage *ss, socklen_t len,
                         bool reuseport, bool defer_accept)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0))
        goto fail;
    /* Accepted sockets inherit TCP_NODELAY from the listener on Linux: one setsockopt per
     * listener instead of one per connection. */
    if (cfg->tcp_nodelay && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        goto fail;
    if (cfg->so_rcvbuf &&
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &cfg->so_rcvbuf, sizeof cfg->so_rcvbuf) != 0)
        goto fail;
    if (cfg->so_sndbuf &&
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &cfg->so_sndbuf, sizeof cfg->so_sndbuf) != 0)
        goto fail;
    if (defer_accept && cfg->defer_accept_s &&
        setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &cfg->defer_accept_s,
                   sizeof cfg->defer_accept_s) != 0)
        goto fail;
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, cfg->backlog) != 0)
        goto fail;
    return fd;
fail:;
    int e = errno;
    close(fd);
    return -e;
}

/* ---- the port is ours alone (loop.h, net_server_listen) ------------------------------------ */

/* 0 when nothing listens on an address overlapping ss (a bind without SO_REUSEPORT works), else
 * -errno (EADDRINUSE: something does). */
static int probe_port(const struct sockaddr_storage *ss, socklen_t len)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1, rc = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (const struct sockaddr *)ss, len) != 0)
        rc = -errno;
    close(fd);
    return rc;
}

static unsigned long fd_inode(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* Is inode one of our listening sockets (the loops' of every listener, and fds of the one being
 * set up)? */
static bool our_inode(const net_server *s, const int *fds, unsigned nfds, unsigned long inode)
{
    for (unsigned i = 0; i < nfds; i++)
        if (fd_inode(fds[i]) == inode)
            return true;
    for (unsigned i = 0; i < s->nloops; i++)
        for (unsigned k = 0; k < s->loops[i].nlisteners; k++)
            if (s->loops[i].listeners[k].fd >= 0 && s->loops[i].listeners[k].ino == inode)
                return true;
    return false;
}

/* The first foreign LISTEN socket on an address overlapping spec's (*out), or false (none, or no
 * /proc to tell). */
static bool find_foreign(net_server *s, const net_listener_spec *spec, const int *fds,
                         unsigned nfds, lg_listener *out)
{
    size_t n;
    if (lg_scan(spec->port, s->scan_buf, s->scan_cap, &n) != 0)
        return false;
    for (size_t i = 0; i < n && i < s->scan_cap; i++)
        if (lg_overlaps(&spec->addr, &s->scan_buf[i].a) != LG_DISJOINT &&
            !our_inode(s, fds, nfds, s->scan_buf[i].inode)) {
            *out = s->scan_buf[i];
            return true;
        }
    return false;
}

/* "pid 1234 (snowflaked) on 0.0.0.0:8080" for the first foreign listener, or a fallback. */
static void describe_foreign(net_server *s, const net_listener_spec *spec, char *buf, size_t len)
{
    lg_listener l;
    if (!find_foreign(s, spec, NULL, 0, &l)) {
        snprintf(buf, len, "a socket the kernel does not list as listening");
        return;
    }
    char who[96], where[64];
    lg_describe(&l, who, sizeof who);
    lg_addr_text(&l.a, where, sizeof where);
    snprintf(buf, len, "%s, listening on %s%s", who, where, lg_overlap_note(&spec->addr, &l));
}

/* The group's program: a random index below n. Our n sockets joined first and hold 0..n-1;
 * a socket that joins later has index n or more and is never picked. Runs in the kernel, once
 * per new connection (the SYN's listener lookup), like the hash it replaces. */
static int steer_group(int fd, unsigned n)
{
    struct sock_filter code[] = {
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)(SKF_AD_OFF + SKF_AD_RANDOM)},
        {BPF_ALU | BPF_MOD | BPF_K, 0, 0, n},
        {BPF_RET | BPF_A, 0, 0, 0},
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof *code, .filter = code};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) != 0)
        return -errno;
    return 0;
}

/* Our loop-0 socket of spec: a member of the group since it was opened. */
static int group_fd(const net_server *s, const net_listener_spec *spec)
{
    return s->loops[0].listeners[spec - s->specs].fd;
}

void net_server_watch(net_server *s, net_foreign_report report, void *arg)
{
    unsigned long seen[LG_MAX_FOUND];
    size_t nseen = 0;
    uint64_t appeared = 0;
    for (unsigned k = 0; k < s->nspecs; k++) {
        net_listener_spec *spec = &s->specs[k];
        size_t n;
        if (lg_scan(spec->port, s->scan_buf, s->scan_cap, &n) != 0)
            return; /* neither sock_diag nor /proc: nothing to say */
        bool joined = false;
        for (size_t i = 0; i < n && i < s->scan_cap && nseen < LG_MAX_FOUND; i++) {
            const lg_listener *l = &s->scan_buf[i];
            lg_overlap o = lg_overlaps(&spec->addr, &l->a);
            if (o == LG_DISJOINT || our_inode(s, NULL, 0, l->inode))
                continue;
            net_foreign_kind kind = o == LG_OVERLAP ? NET_FOREIGN_OVERLAP
                                    : l->ifindex    ? NET_FOREIGN_DEVICE
                                                    : NET_FOREIGN_GROUP;
            joined |= kind == NET_FOREIGN_GROUP;
            seen[nseen++] = l->inode;
            bool known = false;
            for (size_t j = 0; j < s->nforeign_known && !known; j++)
                known = s->foreign_known[j] == l->inode;
            if (!known) {
                appeared++;
                if (report)
                    report(arg, spec, l, kind);
            }
        }
        /* A member may have attached its own program (sending it everything): ours again, every
         * tick while one is there and once after the last left (the program it leaves behind
         * picks among our sockets only, but perhaps not all of them). A failure changes
         * nothing: the joiner is counted and /readyz fails meanwhile. */
        if (spec->steered && (joined || spec->joined))
            steer_group(group_fd(s, spec), s->nloops);
        spec->joined = joined;
    }
    memcpy(s->foreign_known, seen, nseen * sizeof *seen);
    s->nforeign_known = nseen;
    atomic_store(&s->foreign_now, (uint32_t)nseen);
    atomic_store(&s->foreign_harmful, (uint32_t)nseen);
    atomic_fetch_add(&s->foreign_appeared, appeared);
}

/* ---- accepting ------------------------------------------------------------------------------ */

static void on_acceptable(uv_poll_t *p, int status, int events);

static void listener_poll(net_listener *l, bool on)
{
    if (on == l->polling || l->fd < 0)
        return;
    if (on)
        uv_poll_start(&l->poll, UV_READABLE, on_acceptable);
    else
        uv_poll_stop(&l->poll);
    l->polling = on;
}

static void on_accept_resume(uv_timer_t *t)
{
    net_listener *l = t->data;
    if (!l->loop->draining)
        listener_poll(l, true);
}

static void hand_off(net_loop *from, unsigned listener, int fd);

/* Out of descriptors: the pending connections stay in the backlog and the socket stays readable,
 * so polling again now would spin. Pause instead; the connections being served keep running and
 * free descriptors as they close. */
static void pause_accepting(net_listener *l)
{
    NET_STAT_ADD(l->loop->stats.accept_pauses, 1);
    NET_STAT_ADD(l->stats.accept_pauses, 1);
    listener_poll(l, false);
    uv_timer_start(&l->pause_timer, on_accept_resume, ACCEPT_PAUSE_MS, 0);
}

static void on_acceptable(uv_poll_t *p, int status, int events)
{
    (void)events;
    net_listener *l = p->data;
    net_loop *loop = l->loop;
    net_server *s = loop->server;
    if (status < 0)
        return;
    /* Sockets handed to other loops are counted in open_conns only once they take them. */
    bool direct = s->reuseport || s->nloops == 1;
    for (int i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
        /* Leave descriptors to the rest of the process: without them the lease cannot be
         * renewed and every connection, old or new, gets 503 for its IDs. */
        uint32_t conns = atomic_load_explicit(&s->open_conns, memory_order_relaxed);
        if (conns + (direct ? 0u : (uint32_t)i) >= s->fd_conn_cap) {
            pause_accepting(l);
            return;
        }
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            NET_STAT_ADD(loop->stats.accept_errors, 1);
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                pause_accepting(l);
            return;
        }
        if (direct)
            conn_accept(loop, l, fd);
        else
            hand_off(loop, (unsigned)(l - loop->listeners), fd);
    }
}

/* Fallback without SO_REUSEPORT: loop 0 accepts and deals sockets out round robin. */
static void hand_off(net_loop *from, unsigned listener, int fd)
{
    net_server *s = from->server;
    unsigned i = atomic_fetch_add(&s->handoff_next, 1) % s->nloops;
    net_loop *to = &s->loops[i];
    if (to == from) {
        conn_accept(from, &from->listeners[listener], fd);
        return;
    }
    bool queued = false;
    uv_mutex_lock(&to->handoff_mu);
    if (to->handoff_n < NET_HANDOFF_MAX && !to->closing) {
        to->handoff[to->handoff_n++] = (net_handoff){.fd = fd, .listener = listener};
        uv_async_send(&to->async); /* under the lock: the handle cannot be closing */
        queued = true;
    }
    uv_mutex_unlock(&to->handoff_mu);
    if (!queued)
        conn_accept(from, &from->listeners[listener], fd);
}

/* ---- the loop ------------------------------------------------------------------------------- */

static void on_wheel_timer(uv_timer_t *t)
{
    net_loop *l = t->data;
    l->wheel_armed_at = UINT64_MAX;
    wheel_run(&l->wheel, uv_now(&l->uv));
    uint64_t next = wheel_next_expiry(&l->wheel);
    if (next != UINT64_MAX)
        net_loop_arm_wheel(l, next);
}

void net_loop_arm_wheel(net_loop *l, uint64_t expire_at)
{
    if (expire_at >= l->wheel_armed_at)
        return; /* an earlier wake-up is already set: it re-arms for the rest */
    uint64_t now = uv_now(&l->uv);
    l->wheel_armed_at = expire_at;
    uv_timer_start(&l->wheel_timer, on_wheel_timer, expire_at > now ? expire_at - now : 0, 0);
}

static void on_tls_sweep(uv_timer_t *t)
{
    conn_tls_sweep(t->data);
}

static void on_tick(uv_timer_t *t)
{
    net_loop *l = t->data;
    l->server->tick(l, l->server->tick_arg);
}

void net_server_on_tick(net_server *s, uint32_t interval_ms, void (*tick)(net_loop *, void *),
                        void *arg)
{
    s->tick = tick;
    s->tick_arg = arg;
    s->tick_ms = interval_ms ? interval_ms : 1;
}

static void on_pending(uv_idle_t *h)
{
    net_loop *l = h->data;
    conn_run_pending(l);
    if (!l->pending_head)
        uv_idle_stop(&l->pending_idle);
}

void net_loop_add_pending(net_loop *l, conn *c)
{
    if (c->flags & CONN_PENDING)
        return;
    c->flags |= CONN_PENDING;
    c->pending_next = NULL;
    if (l->pending_tail)
        l->pending_tail->pending_next = c;
    else
        l->pending_head = c;
    l->pending_tail = c;
    uv_idle_start(&l->pending_idle, on_pending);
}

static void close_loop_handles(net_loop *l);

void net_loop_conn_closed(net_loop *l)
{
    atomic_fetch_sub(&l->server->open_conns, 1);
    if (l->draining && !l->conns)
        close_loop_handles(l);
}

static void on_grace_over(uv_timer_t *t)
{
    net_loop *l = t->data;
    for (conn *c = l->conns; c; c = c->next)
        conn_close(c);
}

static void on_listener_closed(uv_handle_t *h)
{
    net_listener *li = h->data;
    close(li->fd); /* only now: libuv may still refer to the descriptor while closing */
    li->fd = -1;
}

/* Closing the listening socket (not just not polling it) makes new clients get a refusal
 * instead of waiting in a backlog nobody will accept from. */
static void close_listener(net_listener *li)
{
    uv_timer_stop(&li->pause_timer);
    if (li->fd >= 0 && !uv_is_closing((uv_handle_t *)&li->poll))
        uv_close((uv_handle_t *)&li->poll, on_listener_closed);
}

static void begin_drain(net_loop *l)
{
    if (l->draining)
        return;
    l->draining = true;
    for (unsigned i = 0; i < l->nlisteners; i++)
        close_listener(&l->listeners[i]);
    conn_close_idle(l);
    if (!l->conns) {
        close_loop_handles(l);
        return;
    }
    uv_timer_start(&l->grace_timer, on_grace_over, l->server->cfg.shutdown_grace_ms, 0);
}

static void on_async(uv_async_t *a)
{
    net_loop *l = a->data;
    net_handoff batch[NET_HANDOFF_MAX];
    uv_mutex_lock(&l->handoff_mu);
    unsigned n = l->handoff_n;
    memcpy(batch, l->handoff, n * sizeof *batch);
    l->handoff_n = 0;
    uv_mutex_unlock(&l->handoff_mu);
    for (unsigned i = 0; i < n; i++) {
        if (l->draining)
            close(batch[i].fd);
        else
            conn_accept(l, &l->listeners[batch[i].listener], batch[i].fd);
    }
    if (atomic_load(&l->server->draining))
        begin_drain(l);
}

static void close_loop_handles(net_loop *l)
{
    if (l->closing)
        return;
    uv_mutex_lock(&l->handoff_mu);
    l->closing = true; /* no more hand-offs */
    uv_mutex_unlock(&l->handoff_mu);
    for (unsigned i = 0; i < l->nlisteners; i++) {
        net_listener *li = &l->listeners[i];
        close_listener(li);
        uv_close((uv_handle_t *)&li->pause_timer, NULL);
    }
    uv_close((uv_handle_t *)&l->async, NULL);
    uv_close((uv_handle_t *)&l->wheel_timer, NULL);
    uv_close((uv_handle_t *)&l->grace_timer, NULL);
    uv_close((uv_handle_t *)&l->tick_timer, NULL);
    uv_close((uv_handle_t *)&l->tls_timer, NULL);
    uv_close((uv_handle_t *)&l->pending_idle, NULL);
}

static void loop_main(void *arg)
{
    net_loop *l = arg;
    uv_run(&l->uv, UV_RUN_DEFAULT);
    /* Sockets handed to us after we stopped are ours to close. */
    for (unsigned i = 0; i < l->handoff_n; i++)
        close(l->handoff[i].fd);
    l->handoff_n = 0;
}

static int loop_init(net_server *s, net_loop *l, unsigned index)
{
    memset(l, 0, sizeof *l);
    l->index = index;
    l->server = s;
    if (uv_loop_init(&l->uv) != 0)
        return -1;
    l->read_buf = malloc(s->cfg.read_buffer);
    if (!l->read_buf)
        return -1;
    uv_mutex_init(&l->handoff_mu);
    uv_async_init(&l->uv, &l->async, on_async);
    l->async.data = l;
    uv_timer_init(&l->uv, &l->wheel_timer);
    l->wheel_timer.data = l;
    l->wheel_armed_at = UINT64_MAX;
    uv_timer_init(&l->uv, &l->grace_timer);
    l->grace_timer.data = l;
    uv_timer_init(&l->uv, &l->tick_timer);
    l->tick_timer.data = l;
    uv_timer_init(&l->uv, &l->tls_timer);
    l->tls_timer.data = l;
    uv_idle_init(&l->uv, &l->pending_idle);
    l->pending_idle.data = l;
    wheel_init(&l->wheel, uv_now(&l->uv));
    /* Only spreads connections' ages: any seed that differs between loops and starts will do. */
    l->jitter_state = (uv_hrtime() ^ ((uint64_t)index + 1) * 0x9E3779B97F4A7C15ull) | 1;
    pool_init(&l->chunks, sizeof(obuf_chunk), s->cfg.pool_idle_max);
    pool_init(&l->inbufs, s->cfg.read_buffer, s->cfg.pool_idle_max);
    return 0;
}

/* ---- server ------------------------------------------------------------------------------- */

int net_server_init(net_server *s, const net_config *cfg, unsigned nloops, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    if (nloops < 1 || nloops > NET_MAX_LOOPS) {
        snprintf(err, errlen, "threads must be 1..%d", NET_MAX_LOOPS);
        return -1;
    }
    /* Every connection is a descriptor: take all the kernel allows us. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    s->loops = calloc(nloops, sizeof *s->loops);
    if (!s->loops) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->nloops = nloops;
    for (unsigned i = 0; i < nloops; i++) {
        if (loop_init(s, &s->loops[i], i) != 0) {
            snprintf(err, errlen, "cannot create event loop %u", i);
            return -1;
        }
    }
    s->reuseport = cfg->reuseport;
    s->scan_cap = (size_t)nloops * NET_MAX_LISTENERS + LG_MAX_FOUND;
    s->scan_buf = calloc(s->scan_cap, sizeof *s->scan_buf);
    if (!s->scan_buf) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static void attach_listener(net_loop *l, const net_listener_spec *spec, int fd)
{
    net_listener *li = &l->listeners[l->nlisteners++];
    li->loop = l;
    li->spec = spec;
    li->fd = fd;
    li->ino = fd >= 0 ? fd_inode(fd) : 0;
    pool_init(&li->conns, sizeof(conn) + spec->proto->state_size, l->server->cfg.pool_idle_max);
    uv_timer_init(&l->uv, &li->pause_timer);
    li->pause_timer.data = li;
    if (fd >= 0) {
        uv_poll_init(&l->uv, &li->poll, fd);
        li->poll.data = li;
    }
}

void net_server_set_idle_timeout(net_server *s, const void *ctx, uint32_t idle_ms)
{
    for (unsigned i = 0; i < s->nspecs; i++)
        if (s->specs[i].ctx == ctx)
            s->specs[i].idle_timeout_ms = idle_ms;
}

void net_server_set_max_age(net_server *s, const void *ctx, uint32_t max_age_ms)
{
    for (unsigned i = 0; i < s->nspecs; i++)
        if (s->specs[i].ctx == ctx)
            s->specs[i].max_age_ms = max_age_ms;
}

int net_server_listen(net_server *s, const char *host, uint16_t port, const proto *p, void *ctx,
                      char *err, size_t errlen)
{
    return net_server_listen_tls(s, host, port, p, ctx, NULL, err, errlen);
}

int net_server_listen_tls(net_server *s, const char *host, uint16_t port, const proto *p,
                          void *ctx, net_tls *tls, char *err, size_t errlen)
{
    if (s->nspecs == NET_MAX_LISTENERS) {
        snprintf(err, errlen, "too many listeners");
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(host, port, &ss, &len) != 0) {
        snprintf(err, errlen, "%s: not a numeric IPv4 or IPv6 address", host);
        return -1;
    }
    net_listener_spec *spec = &s->specs[s->nspecs];
    memset(spec, 0, sizeof *spec);
    snprintf(spec->host, sizeof spec->host, "%s", host);
    spec->port = port;
    spec->proto = p;
    spec->ctx = ctx;
    spec->tls = tls;
    spec->shared_fd = -1;
    lg_addr_from(&spec->addr, (const struct sockaddr *)&ss);
    const char *v6 = ss.ss_family == AF_INET6 ? "[" : "", *v6end = *v6 ? "]" : "";
    char who[192];
    int rc = probe_port(&ss, len);
    if (rc == -EADDRINUSE) {
        describe_foreign(s, spec, who, sizeof who);
        snprintf(err, errlen,
                 "cannot listen on %s%s%s:%u: already in use by %s; two processes sharing a port "
                 "would split its connections (for IDs: duplicates), so this one refuses to start",
                 v6, host, v6end, port, who);
        return -1;
    }
    int fds[NET_MAX_LOOPS];
    unsigned nfds = s->reuseport ? s->nloops : 1;
    for (unsigned i = 0; i < nfds; i++) {
        fds[i] =
            rc < 0 ? rc : open_listener(&s->cfg, &ss, len, s->reuseport, !p->accept_at_connect);
        if (fds[i] == -ENOPROTOOPT && s->reuseport && i == 0) {
            s->reuseport = false; /* kernel without SO_REUSEPORT: one acceptor */
            nfds = 1;
            fds[i] = open_listener(&s->cfg, &ss, len, false, !p->accept_at_connect);
        }
        if (fds[i] < 0) {
            snprintf(err, errlen, "cannot listen on %s%s%s:%u: %s", v6, host, v6end, port,
                     strerror(-fds[i]));
            for (unsigned k = 0; k < i; k++)
                close(fds[k]);
            return -1;
        }
    }
    if (ss.ss_family == AF_INET6) { /* IPV6_V6ONLY: the bindv6only sysctl's default */
        int v6only = 0;
        socklen_t olen = sizeof v6only;
        if (getsockopt(fds[0], IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &olen) == 0)
            spec->addr.v6only = v6only != 0;
    }
    lg_listener other;
    if (find_foreign(s, spec, fds, nfds, &other)) {
        char where[64];
        lg_describe(&other, who, sizeof who);
        lg_addr_text(&other.a, where, sizeof where);
        snprintf(err, errlen,
                 "cannot listen on %s%s%s:%u: %s started listening on %s at the same moment; "
                 "refusing to share the port (a supervisor may retry)%s",
                 v6, host, v6end, port, who, where, lg_overlap_note(&spec->addr, &other));
        for (unsigned k = 0; k < nfds; k++)
            close(fds[k]);
        return -1;
    }
    if (s->reuseport) { /* after the check: a process about to refuse never replaces it */
        spec->steer_errno = -steer_group(fds[0], nfds);
        spec->steered = spec->steer_errno == 0;
    } else {
        spec->shared_fd = fds[0];
    }
    for (unsigned i = 0; i < s->nloops; i++)
        attach_listener(&s->loops[i], spec, i < nfds ? fds[i] : -1);
    s->nspecs++;
    return 0;
}

/* Descriptors open in this process now (0 if /proc is not mounted). */
static unsigned open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    unsigned n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n ? n - 1 : 0; /* not the directory's own descriptor */
}

int net_server_start(net_server *s, char *err, size_t errlen)
{
    /* Every listener is open by now: what is left of the descriptor limit, less a reserve (one
     * more per loop: loops check the count concurrently), is for connections. Beyond it,
     * accepting pauses as on EMFILE (max_connections, if lower, still closes at once). */
    s->fd_conn_cap = UINT32_MAX;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        uint64_t keep = (uint64_t)open_fds() + FD_RESERVE + s->nloops;
        uint64_t cap = rl.rlim_cur > keep ? rl.rlim_cur - keep : 1;
        s->fd_conn_cap = cap < UINT32_MAX ? (uint32_t)cap : UINT32_MAX;
    }
    for (unsigned i = 0; i < s->nloops; i++) {
        net_loop *l = &s->loops[i];
        /* Handles are set up here, before the thread exists; afterwards only it touches them. */
        for (unsigned k = 0; k < l->nlisteners; k++)
            listener_poll(&l->listeners[k], true);
        if (s->tick)
            uv_timer_start(&l->tick_timer, on_tick, s->tick_ms, s->tick_ms);
        for (unsigned k = 0; k < s->nspecs; k++)
            if (s->specs[k].tls) {
                uv_timer_start(&l->tls_timer, on_tls_sweep, CONN_TLS_SWEEP_MS, CONN_TLS_SWEEP_MS);
                break;
            }
        if (uv_thread_create(&l->thread, loop_main, l) != 0) {
            snprintf(err, errlen, "cannot start loop thread %u", i);
            return -1;
        }
    }
    s->started = true;
    return 0;
}

void net_server_drain(net_server *s)
{
    if (atomic_exchange(&s->draining, true))
        return;
    for (unsigned i = 0; i < s->nloops; i++) {
        net_loop *l = &s->loops[i];
        uv_mutex_lock(&l->handoff_mu);
        if (!l->closing)
            uv_async_send(&l->async);
        uv_mutex_unlock(&l->handoff_mu);
    }
}

void net_server_wait(net_server *s)
{
    for (unsigned i = 0; s->started && !s->threads_joined && i < s->nloops; i++)
        uv_thread_join(&s->loops[i].thread);
    s->threads_joined = true;
}

void net_server_join(net_server *s)
{
    net_server_wait(s);
    for (unsigned i = 0; i < s->nloops; i++) {
        net_loop *l = &s->loops[i];
        if (s->started)
            uv_loop_close(&l->uv);
        for (unsigned k = 0; k < l->nlisteners; k++) {
            net_listener *li = &l->listeners[k];
            if (li->fd >= 0)
                close(li->fd);
            pool_drain(&li->conns);
        }
        pool_drain(&l->chunks);
        pool_drain(&l->inbufs);
        free(l->read_buf);
        uv_mutex_destroy(&l->handoff_mu);
    }
    free(s->loops);
    s->loops = NULL;
    free(s->scan_buf);
    s->scan_buf = NULL;
}

void net_listener_stats_sum(const net_listener *l, net_listener_stats *out)
{
    const net_server *s = l->loop->server;
    size_t k = (size_t)(l - l->loop->listeners);
    uint64_t in = 0, outb = 0, rej = 0, pauses = 0, aged = 0, hs[2] = {0, 0},
             fail[NET_TLS_FAIL_COUNT] = {0}, ktls[2] = {0, 0};
    uint64_t peers[NET_TLS_PEER_COUNT] = {0};
    for (unsigned i = 0; i < s->nloops; i++) {
        const net_listener_stats *st = &s->loops[i].listeners[k].stats;
        in += net_stat(&st->bytes_in);
        outb += net_stat(&st->bytes_out);
        rej += net_stat(&st->rejected_at_cap);
        pauses += net_stat(&st->accept_pauses);
        aged += net_stat(&st->age_closes);
        for (int r = 0; r < 2; r++) {
            hs[r] += net_stat(&st->tls_handshakes[r]);
            ktls[r] += net_stat(&st->tls_ktls[r]);
        }
        for (int r = 0; r < NET_TLS_FAIL_COUNT; r++)
            fail[r] += net_stat(&st->tls_failures[r]);
        for (int r = 0; r < NET_TLS_PEER_COUNT; r++)
            peers[r] += net_stat(&st->tls_peers[r]);
    }
    atomic_init(&out->bytes_in, in);
    atomic_init(&out->bytes_out, outb);
    atomic_init(&out->rejected_at_cap, rej);
    atomic_init(&out->accept_pauses, pauses);
    atomic_init(&out->age_closes, aged);
    for (int r = 0; r < 2; r++) {
        atomic_init(&out->tls_handshakes[r], hs[r]);
        atomic_init(&out->tls_ktls[r], ktls[r]);
    }
    for (int r = 0; r < NET_TLS_FAIL_COUNT; r++)
        atomic_init(&out->tls_failures[r], fail[r]);
    for (int r = 0; r < NET_TLS_PEER_COUNT; r++)
        atomic_init(&out->tls_peers[r], peers[r]);
}

uint64_t net_server_stat_sum(const net_server *s, size_t offset)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < s->nloops; i++)
        sum += net_stat((const _Atomic uint64_t *)((const char *)&s->loops[i].stats + offset));
    return sum;
}
