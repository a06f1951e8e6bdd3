/* The load engine: threads, connections, scheduling, writes, timeouts (see engine.h).
 *
 * Request slots of a connection form a ring of --pipeline entries, in request order:
 *
 *   head                                                                 head + used
 *    | answered (response complete) | sent, waiting for a response | queued, not sent |
 *    |<-- written: write finished -->|  (written may be < or > answered)
 *
 * A slot is reused only once it is both answered and written (a response can in principle beat
 * the write callback), so the bytes libuv is still writing are never overwritten. Writes are
 * tried synchronously first (uv_try_write, the common case on loopback); what does not fit goes
 * out with one uv_write, and requests queued meanwhile wait for its callback.
 *
 * Open loop timing: uv timers have 1 ms resolution, far too coarse for send times (a request due
 * mid-millisecond would leave up to 1 ms late, and that lateness would count as latency). Each
 * thread keeps the connections waiting for their next scheduled time in a min-heap and arms a
 * timerfd (CLOCK_MONOTONIC, absolute, ns; the clock of uv_hrtime) at the earliest; a connection
 * with a full pipeline is sent its due requests as soon as a response frees a slot instead.
 *
 * Targets: connection i goes to target i % ntargets, for its whole life (reconnects included).
 *
 * --tolerate-faults: a refused connect, a reset, a close with requests unanswered, a failed write
 * or a timeout is a fault, not a failure: it is counted (per kind and per target), the requests
 * of the connection stay queued and are sent again on the next connection, which is opened after
 * a backoff of 50, 100, 200, 400, then 500 ms (back to 50 after a 2xx). A 503 completes its
 * request as "refused" and pauses the connection by the same backoff, so a fenced daemon is not
 * hammered. -n counts only requests that completed; a target that stays down holds its share of
 * requests until -t ends the run.
 *
 * TLS: after the TCP connect, the handshake runs from on_connect, on_read and on_write; flush
 * then hands each queued slot's bytes to SSL_write (written counts the slots OpenSSL has fully
 * taken: their memory is free again at once, the ciphertext lives in the pair) and sends the
 * pair's ciphertext with uv_try_write, or one uv_write pointing into the pair. Reads feed the
 * pair and give the target the plaintext from a per-thread buffer. The plaintext path is the
 * one it was: a TLS connection differs only where c->tls is tested.
 */
#include "engine.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define READ_BUF_BYTES (256 * 1024)             /* one per thread, shared by its connections */
#define RETRY_DELAY_NS (10 * UINT64_C(1000000)) /* after a failed connect */
#define NS_PER_MS      UINT64_C(1000000)
#define NS_PER_S       UINT64_C(1000000000)
#define BACKOFF_MIN_MS 50  /* --tolerate-faults: first wait after a fault or a 503 */
#define BACKOFF_MAX_MS 500 /* and the cap of its doubling */
#define PLAIN_BUF_BYTES (64 * 1024) /* TLS: decrypted bytes, one buffer per thread */
/* results of the TLS read path besides the target's SL_CONTINUE, SL_CLOSE and SL_FAIL() */
#define RC_EOF     2 /* close_notify: the server's end of the stream */
#define RC_HANDLED 3 /* the connection was failed or closed already */

_Static_assert(SL_MAX_TARGETS == SL_STATS_TARGETS, "per-target stats cover every target");

enum { C_IDLE, C_CONNECTING, C_OPEN, C_CLOSING, C_RETRY, C_DONE };
#define NOT_IN_HEAP UINT32_MAX

struct sl_conn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    sl_worker *w;
    unsigned id; /* over all threads */
    int state;
    bool writing;        /* a uv_write is in flight */
    bool wait_retry;     /* the close under way follows a failed connect or a tolerated fault: wait,
                            then reconnect */
    unsigned target;     /* index into o->targets */
    unsigned backoff_ms; /* --tolerate-faults: the next wait; 0: none yet */
    uint64_t pause_until; /* --tolerate-faults: no new request before this (after a 503) */
    sl_slot *slots;
    unsigned depth;
    unsigned head, used, answered, sent, written, write_upto;
    size_t write_rest; /* bytes handed to the in-flight uv_write */
    uint64_t next_sched;
    unsigned heap_idx; /* position in the worker's schedule heap, NOT_IN_HEAP if absent */
    uint64_t connect_start, retry_at;
    uv_buf_t *iov;
    char *slot_mem;
    void *tstate;
    sltls_conn *tls;   /* NULL: plaintext */
    unsigned tls_buf;  /* TLS: the next bytes for SSL_write are bufs[tls_buf] + tls_off of the */
    size_t tls_off;    /*      slot at index `written` */
    bool tls_failed;   /* TLS: this connection failed (its session is not kept) */
    uint8_t tls_counted; /* TLS: its handshake counted as full (1) or resumed (2), or not (0) */
    uv_buf_t tls_wbuf; /* TLS: what the uv_write in flight sends, inside the pair */
};

struct sl_worker {
    const sl_shared *sh;
    const sl_opts *o;
    const sl_target *t;
    unsigned index;
    uv_loop_t loop;
    uv_timer_t tick, deadline;
    uint64_t tick_ms;
    int tfd; /* open loop: the timerfd, polled by sched_poll; -1 in closed loop */
    uv_poll_t sched_poll;
    uint64_t armed_at; /* the timerfd's expiry, UINT64_MAX when disarmed */
    sl_conn **heap;    /* connections waiting for their next_sched, a binary min-heap */
    unsigned heap_len;
    uv_thread_t thread;
    bool started;
    sl_conn *conns;
    unsigned nconns;
    char *rbuf;
    uint64_t budget;   /* measured requests still to issue; UINT64_MAX: no -n */
    uint64_t inflight; /* slots in use over all connections */
    bool stopping;
    uint64_t now; /* ns, refreshed at the start of every callback */
    uint64_t rng;
    char *pbuf; /* TLS: decrypted bytes (PLAIN_BUF_BYTES), or NULL */
    sltls_ctx *tls_ctx; /* TLS: this thread's own context (its CA store, shared with no other
                           thread: OpenSSL's store caches are written during verification) */
    sl_stats stats;
    bool verify;
    verifier ver;
    idrec_writer *rec;  /* --ids-out-v2, or NULL */
    uint64_t completed; /* responses and failures, warm-up included (for the progress line) */
    _Atomic uint64_t progress_requests, progress_errors;
    _Atomic bool finished;
};

static void pump(sl_conn *c);
static void close_conn(sl_conn *c);

/* --- small helpers --------------------------------------------------------------------------- */

static sl_slot *slot_at(const sl_conn *c, unsigned i)
{
    unsigned k = c->head + i;
    return &c->slots[k >= c->depth ? k - c->depth : k];
}

static bool in_window(const sl_worker *w, uint64_t t)
{
    return t >= w->sh->measure_start_ns && t < w->sh->measure_end_ns;
}

static void publish(sl_worker *w)
{
    atomic_store_explicit(&w->progress_requests, w->completed, memory_order_relaxed);
    atomic_store_explicit(&w->progress_errors, w->stats.requests - w->stats.ok - w->stats.refused,
                          memory_order_relaxed);
}

static void count_failure(sl_conn *c, const sl_slot *s, sl_err kind)
{
    sl_worker *w = c->w;
    w->completed++;
    if (!s->measured)
        return;
    w->stats.requests++;
    w->stats.errors[kind]++;
    w->stats.target[c->target].requests++;
    w->stats.target[c->target].errors++;
    publish(w);
}

/* A failure no request slot stands for (a connect with nothing queued, stray bytes). */
static void count_loose_failure(sl_conn *c, sl_err kind)
{
    sl_worker *w = c->w;
    w->completed++;
    if (!in_window(w, w->now))
        return;
    w->stats.requests++;
    w->stats.errors[kind]++;
    w->stats.target[c->target].requests++;
    w->stats.target[c->target].errors++;
    if (w->budget != UINT64_MAX && w->budget > 0)
        w->budget--;
    publish(w);
}

/* --tolerate-faults: a connection fault, retried. Counted in the window only, like errors. */
static void count_fault(sl_conn *c, sl_err kind)
{
    sl_worker *w = c->w;
    if (!in_window(w, w->now))
        return;
    w->stats.faults[kind]++;
    w->stats.target[c->target].faults++;
}

/* The next backoff wait in ns: 50, 100, 200, 400, 500, 500, ... ms. */
static uint64_t backoff_take(sl_conn *c)
{
    unsigned ms = c->backoff_ms ? c->backoff_ms : BACKOFF_MIN_MS;
    c->backoff_ms = ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms * 2;
    return (uint64_t)ms * NS_PER_MS;
}

static void reclaim(sl_conn *c)
{
    unsigned k = c->answered < c->written ? c->answered : c->written;
    if (!k)
        return;
    c->head = (c->head + k) % c->depth;
    c->used -= k;
    c->answered -= k;
    c->sent -= k;
    c->written -= k;
    c->write_upto = c->write_upto >= k ? c->write_upto - k : 0;
    c->w->inflight -= k;
}

/* --- the open-loop schedule ------------------------------------------------------------------- */

static void heap_set(sl_worker *w, unsigned i, sl_conn *c)
{
    w->heap[i] = c;
    c->heap_idx = i;
}

static void heap_up(sl_worker *w, unsigned i)
{
    sl_conn *c = w->heap[i];
    while (i > 0 && w->heap[(i - 1) / 2]->next_sched > c->next_sched) {
        heap_set(w, i, w->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(w, i, c);
}

static void heap_down(sl_worker *w, unsigned i)
{
    sl_conn *c = w->heap[i];
    for (;;) {
        unsigned k = 2 * i + 1;
        if (k >= w->heap_len)
            break;
        if (k + 1 < w->heap_len && w->heap[k + 1]->next_sched < w->heap[k]->next_sched)
            k++;
        if (c->next_sched <= w->heap[k]->next_sched)
            break;
        heap_set(w, i, w->heap[k]);
        i = k;
    }
    heap_set(w, i, c);
}

static sl_conn *heap_pop(sl_worker *w)
{
    sl_conn *top = w->heap[0];
    top->heap_idx = NOT_IN_HEAP;
    if (--w->heap_len) {
        w->heap[0] = w->heap[w->heap_len];
        heap_down(w, 0);
    }
    return top;
}

/* Makes the timerfd expire at `at` (ns, CLOCK_MONOTONIC) unless it expires earlier already. */
static void arm(sl_worker *w, uint64_t at)
{
    if (at >= w->armed_at)
        return;
    struct itimerspec its = {
        .it_value = {.tv_sec = (time_t)(at / NS_PER_S), .tv_nsec = (long)(at % NS_PER_S)}};
    if (at == 0)
        its.it_value.tv_nsec = 1; /* zero would disarm */
    timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    w->armed_at = at;
}

/* c has room for a request, but its next one is not due yet: wake up when it is. */
static void sched_wait(sl_conn *c)
{
    sl_worker *w = c->w;
    if (c->heap_idx == NOT_IN_HEAP) {
        heap_set(w, w->heap_len++, c);
        heap_up(w, c->heap_idx);
    } else {
        heap_down(w, c->heap_idx); /* next_sched only grows */
    }
    arm(w, w->heap[0]->next_sched);
}

static void maybe_finish(sl_worker *w);

/* The timerfd expired. Re-arming (or disarming) it resets its expiry count, which is what clears
 * its readability: no read() needed. */
static void on_sched(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    sl_worker *w = p->data;
    w->armed_at = UINT64_MAX;
    w->now = uv_hrtime();
    while (w->heap_len && w->heap[0]->next_sched <= w->now && !w->stopping)
        pump(heap_pop(w));
    if (w->heap_len && !w->stopping)
        arm(w, w->heap[0]->next_sched);
    if (w->armed_at == UINT64_MAX) {
        struct itimerspec off = {{0, 0}, {0, 0}};
        timerfd_settime(w->tfd, 0, &off, NULL);
    }
    maybe_finish(w);
}

/* --- services for targets -------------------------------------------------------------------- */

sl_slot *sl_conn_pending(sl_conn *c)
{
    return c->answered < c->sent ? slot_at(c, c->answered) : NULL;
}

int sl_conn_complete(sl_conn *c, int outcome)
{
    if (c->answered >= c->sent)
        return -1;
    sl_worker *w = c->w;
    const sl_slot *s = slot_at(c, c->answered++);
    w->completed++;
    if (outcome == SL_OK)
        c->backoff_ms = 0;
    else if (outcome == SL_OUTCOME_REFUSED)
        c->pause_until = w->now + backoff_take(c);
    if (s->measured) {
        sl_stats *st = &w->stats;
        sl_tstats *tst = &st->target[c->target];
        st->requests++;
        st->responses++;
        tst->requests++;
        hist_record(&st->latency, w->now > s->sched_ns ? w->now - s->sched_ns : 0);
        if (outcome == SL_OK) {
            st->ok++;
            tst->ok++;
        } else if (outcome == SL_OUTCOME_REFUSED) {
            st->refused++;
        } else {
            st->errors[outcome]++;
            tst->errors++;
        }
    }
    publish(w);
    reclaim(c);
    return 0;
}

sl_stats *sl_conn_stats(sl_conn *c)
{
    return &c->w->stats;
}

verifier *sl_conn_verifier(sl_conn *c)
{
    return c->w->verify ? &c->w->ver : NULL;
}

const sl_opts *sl_conn_opts(const sl_conn *c)
{
    return c->w->o;
}

unsigned sl_conn_id(const sl_conn *c)
{
    return c->id;
}

unsigned sl_conn_target(const sl_conn *c)
{
    return c->target;
}

uint32_t sl_conn_now_ms(const sl_conn *c)
{
    uint64_t now = c->w->now, t0 = c->w->sh->t0_ns;
    return now > t0 ? (uint32_t)((now - t0) / NS_PER_MS) : 0;
}

const void *sl_conn_global(const sl_conn *c)
{
    return c->w->t->global;
}

uint64_t sl_conn_random(sl_conn *c)
{
    uint64_t x = c->w->rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->w->rng = x;
    return x * UINT64_C(2685821657736338717);
}

/* --- stopping -------------------------------------------------------------------------------- */

static void stop_worker(sl_worker *w)
{
    if (w->stopping)
        return;
    w->stopping = true;
    w->stats.end_ns = w->now < w->sh->measure_end_ns ? w->now : w->sh->measure_end_ns;
    for (unsigned i = 0; i < w->nconns; i++) {
        sl_conn *c = &w->conns[i];
        if (c->state == C_OPEN || c->state == C_CONNECTING)
            close_conn(c); /* requests in flight are dropped, not counted */
        else if (c->state != C_CLOSING)
            c->state = C_DONE;
    }
    uv_close((uv_handle_t *)&w->tick, NULL);
    uv_close((uv_handle_t *)&w->deadline, NULL);
    if (w->tfd >= 0)
        uv_close((uv_handle_t *)&w->sched_poll, NULL);
}

/* -n reached and every request answered or failed. */
static void maybe_finish(sl_worker *w)
{
    if (!w->stopping && w->budget == 0 && w->inflight == 0)
        stop_worker(w);
}

/* --- connection life ------------------------------------------------------------------------- */

static void on_closed(uv_handle_t *h)
{
    sl_conn *c = h->data;
    sl_worker *w = c->w;
    w->now = uv_hrtime();
    if (c->tls) { /* the pair goes only now: a cancelled uv_write pointed into it */
        sltls_end(c->tls, !c->tls_failed);
        c->tls_failed = false;
        c->tls_buf = 0;
        c->tls_off = 0;
    }
    /* Writes have completed or been cancelled: every slot's memory is free again. Answered slots
     * go; sent-but-unanswered ones (a graceful close) are queued to be sent again. */
    c->writing = false;
    c->written = c->write_upto = c->sent;
    reclaim(c);
    c->sent = c->written = c->write_upto = 0;
    if (w->stopping) {
        c->state = C_DONE;
        return;
    }
    if (c->wait_retry) {
        c->wait_retry = false;
        c->state = C_RETRY;
        c->retry_at = w->now + (w->o->tolerate_faults ? backoff_take(c) : RETRY_DELAY_NS);
        return;
    }
    c->state = C_IDLE;
    pump(c);
    maybe_finish(w);
}

static void close_conn(sl_conn *c)
{
    if (c->state != C_OPEN && c->state != C_CONNECTING)
        return;
    c->state = C_CLOSING;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

/* Drops the connection after a failure: the oldest unanswered request fails with kind; the others
 * fail too if the connection itself broke (read, write, timeout), else they are sent again. */
static void conn_fail(sl_conn *c, sl_err kind)
{
    if (c->state != C_OPEN)
        return;
    c->tls_failed = true;
    bool broken = kind == ERR_READ || kind == ERR_WRITE || kind == ERR_TIMEOUT;
    if (broken && c->w->o->tolerate_faults) {
        /* A fault: the close re-queues what was sent and unanswered; reconnect after a wait. */
        count_fault(c, kind);
        c->wait_retry = true;
        close_conn(c);
        return;
    }
    if (c->answered < c->sent) {
        count_failure(c, slot_at(c, c->answered++), kind);
        if (broken)
            while (c->answered < c->sent)
                count_failure(c, slot_at(c, c->answered++), kind);
    } else if (kind == ERR_PARSE || kind == ERR_MISMATCH) {
        count_loose_failure(c, kind);
    }
    close_conn(c);
}

static void connect_failed(sl_conn *c)
{
    sl_worker *w = c->w;
    if (w->o->tolerate_faults) {
        count_fault(c, ERR_CONNECT); /* the queued requests wait for the next connection */
    } else if (c->used > 0) {
        /* Nothing was sent on this connection: the first queued request fails with it. */
        count_failure(c, slot_at(c, 0), ERR_CONNECT);
        c->head = (c->head + 1) % c->depth;
        c->used--;
        w->inflight--;
    } else {
        count_loose_failure(c, ERR_CONNECT);
    }
    c->wait_retry = true;
    close_conn(c);
}

static void on_connect(uv_connect_t *req, int status);
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_write(uv_write_t *req, int status);

/* --- TLS ------------------------------------------------------------------------------------- */

/* The handshake failed (or the server refused us right after it, before any data: TLS 1.3 checks
 * a client certificate only then). Counted with its reason; the requests go as after a failed
 * connect (the first queued request fails; with --tolerate-faults a connect fault), except that
 * requests already sent fail too. The connection is retried after the usual wait. */
static void tls_failed(sl_conn *c)
{
    sl_worker *w = c->w;
    if (in_window(w, w->now))
        w->stats.tls_failures++;
    if (!w->stats.tls_error[0])
        memcpy(w->stats.tls_error, c->tls->why, sizeof w->stats.tls_error);
    if (c->tls_counted == 1) /* refused after our side finished: not a handshake after all */
        w->stats.tls_full--;
    else if (c->tls_counted == 2)
        w->stats.tls_resumed--;
    c->tls_counted = 0;
    c->tls_failed = true;
    if (w->o->tolerate_faults || c->answered == c->sent) {
        connect_failed(c); /* nothing went out: as a refused connect */
        return;
    }
    while (c->answered < c->sent) /* refused after the handshake: what was sent fails */
        count_failure(c, slot_at(c, c->answered++), ERR_CONNECT);
    c->wait_retry = true;
    close_conn(c);
}

/* A write failed. Over TLS, before the server sent a byte of data, that is the server refusing
 * the connection right after the handshake (TLS 1.3 checks client certificates then): a failed
 * handshake, as when its alert is read (tls_on_data) or the close is (on_read). */
static void write_failed(sl_conn *c)
{
    if (c->tls && !c->tls->got_data && c->state == C_OPEN) {
        snprintf(c->tls->why, sizeof c->tls->why, "%s",
                 c->tls->done ? "after the handshake: the server closed the connection before "
                                "any data (refused? a client certificate required?)"
                              : "handshake: write failed (the server closed the connection)");
        tls_failed(c);
        return;
    }
    conn_fail(c, ERR_WRITE);
}

/* Sends the ciphertext waiting in the pair: synchronously while the socket takes it, the rest
 * with one uv_write from the pair itself (on_write consumes it). 0, or -1: the write failed. */
static int tls_send(sl_conn *c)
{
    sl_worker *w = c->w;
    while (!c->writing) {
        char *p;
        size_t n = sltls_out(c->tls, &p);
        if (!n)
            return 0;
        c->tls_wbuf = uv_buf_init(p, (unsigned)n);
        int r = uv_try_write((uv_stream_t *)&c->tcp, &c->tls_wbuf, 1);
        if (r < 0 && r != UV_EAGAIN)
            return -1;
        size_t done = r > 0 ? (size_t)r : 0;
        sltls_sent(c->tls, done); /* the bytes after them stay where they are */
        if (done && in_window(w, w->now))
            w->stats.bytes_out += done;
        if (done == n)
            continue;
        c->tls_wbuf = uv_buf_init(p + done, (unsigned)(n - done));
        c->write_rest = n - done;
        c->writing = true;
        c->wreq.data = c;
        if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &c->tls_wbuf, 1, on_write) < 0) {
            c->writing = false;
            return -1;
        }
    }
    return 0;
}

static void tls_established(sl_conn *c)
{
    sl_worker *w = c->w;
    if (in_window(w, w->now)) {
        bool resumed = sltls_resumed(c->tls);
        if (resumed)
            w->stats.tls_resumed++;
        else
            w->stats.tls_full++;
        c->tls_counted = resumed ? 2 : 1;
    }
    if (!w->stats.tls_version[0]) {
        snprintf(w->stats.tls_version, sizeof w->stats.tls_version, "%s", sltls_version(c->tls));
        snprintf(w->stats.tls_cipher, sizeof w->stats.tls_cipher, "%s", sltls_cipher(c->tls));
    }
}

/* Drives the handshake as far as it goes now. 0: under way or finished; -1: the connection
 * failed (and is closing). */
static int tls_handshake(sl_conn *c)
{
    for (;;) {
        int r = sltls_handshake(c->tls);
        if (r < 0) {
            tls_send(c); /* the alert, if it fits: the server's log says why */
            tls_failed(c);
            return -1;
        }
        if (tls_send(c) != 0) {
            snprintf(c->tls->why, sizeof c->tls->why, "handshake: write failed");
            tls_failed(c);
            return -1;
        }
        if (r == 1) {
            tls_established(c);
            return 0;
        }
        if (!c->tls->want_write || c->writing)
            return 0; /* waiting for the server, or for on_write */
    }
}

static int tls_begin(sl_conn *c)
{
    sl_worker *w = c->w;
    c->tls_buf = 0;
    c->tls_off = 0;
    c->tls_counted = 0;
    if (sltls_start(c->tls, w->tls_ctx, w->o->targets[c->target].host) != 0) {
        tls_failed(c);
        return -1;
    }
    return tls_handshake(c);
}

/* Hands the queued requests to OpenSSL, slot by slot (a slot is written once OpenSSL took all its
 * bytes), and sends the ciphertext. Waits for the handshake, and for on_write while the socket is
 * backed up. */
static void tls_flush(sl_conn *c)
{
    sl_worker *w = c->w;
    if (c->writing || !c->tls->done)
        return;
    for (unsigned i = c->sent; i < c->used; i++)
        slot_at(c, i)->sent_ns = w->now;
    c->sent = c->used;
    while (c->written < c->sent) {
        sl_slot *s = slot_at(c, c->written);
        if (c->tls_buf >= s->nbufs) {
            c->write_upto = ++c->written;
            c->tls_buf = 0;
            c->tls_off = 0;
            continue;
        }
        const uv_buf_t *b = &s->bufs[c->tls_buf];
        if (c->tls_off >= b->len) {
            c->tls_buf++;
            c->tls_off = 0;
            continue;
        }
        long r = sltls_write(c->tls, b->base + c->tls_off, b->len - c->tls_off);
        if (r > 0) {
            c->tls_off += (size_t)r;
            continue;
        }
        char *q;
        if (r == 0 && !sltls_out(c->tls, &q))
            break; /* OpenSSL waits for the server's bytes (on_read goes on), not for room */
        if (r < 0 || tls_send(c) != 0) { /* else the pair was full: sent, go on */
            write_failed(c);
            return;
        }
        if (c->writing)
            break; /* on_write goes on from here */
    }
    if (tls_send(c) != 0) {
        write_failed(c);
        return;
    }
    reclaim(c);
}

/* Ciphertext read from the socket: through the pair, the handshake, then the target. Returns the
 * target's verdict, RC_EOF (close_notify) or RC_HANDLED. */
static int tls_on_data(sl_conn *c, const char *p, size_t n)
{
    sl_worker *w = c->w;
    sltls_conn *t = c->tls;
    unsigned stalled = 0;
    while (n) {
        size_t k = sltls_feed(t, p, n);
        p += k;
        n -= k;
        /* The pair was full and the last round took nothing out of it: with records of at most
         * 16 KiB and a 16 KiB pair this does not happen; never spin on it. */
        if (k == 0 && stalled++) {
            snprintf(t->why, sizeof t->why, "TLS input backed up");
            if (!t->done) {
                tls_failed(c);
                return RC_HANDLED;
            }
            return SL_FAIL(ERR_READ);
        }
        if (k)
            stalled = 0;
        if (!t->done) {
            if (tls_handshake(c) != 0)
                return RC_HANDLED;
            if (t->done) {
                pump(c); /* the requests that waited for it */
                if (c->state != C_OPEN)
                    return RC_HANDLED;
            }
        }
        if (t->done) {
            for (;;) {
                long got = sltls_read(t, w->pbuf, PLAIN_BUF_BYTES);
                if (got > 0) {
                    int rc = w->t->on_data(c, c->tstate, w->pbuf, (size_t)got);
                    if (rc != SL_CONTINUE)
                        return rc;
                    continue;
                }
                if (got == SLTLS_EOF)
                    return RC_EOF;
                if (got == SLTLS_ERR) {
                    if (!t->got_data) {
                        tls_failed(c);
                        return RC_HANDLED;
                    }
                    return SL_FAIL(ERR_READ);
                }
                break; /* SLTLS_WANT */
            }
        }
        if (tls_send(c) != 0) { /* what reading produced (a key update's answer) */
            write_failed(c);
            return RC_HANDLED;
        }
    }
    return SL_CONTINUE;
}

static void conn_connect(sl_conn *c)
{
    sl_worker *w = c->w;
    uv_tcp_init(&w->loop, &c->tcp);
    c->tcp.data = c;
    c->creq.data = c;
    c->state = C_CONNECTING;
    c->connect_start = w->now;
    int r = uv_tcp_connect(&c->creq, &c->tcp,
                           (const struct sockaddr *)&w->o->targets[c->target].addr, on_connect);
    if (r < 0)
        connect_failed(c);
}

static void on_connect(uv_connect_t *req, int status)
{
    sl_conn *c = req->data;
    sl_worker *w = c->w;
    w->now = uv_hrtime();
    if (c->state != C_CONNECTING)
        return; /* cancelled by a close */
    if (status < 0) {
        connect_failed(c);
        maybe_finish(w);
        return;
    }
    c->state = C_OPEN;
    w->stats.connects++;
    uv_tcp_nodelay(&c->tcp, 1);
    w->t->conn_reset(c, c->tstate);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (c->tls && tls_begin(c) != 0) {
        maybe_finish(w);
        return;
    }
    pump(c);
}

/* --- requests --------------------------------------------------------------------------------- */

/* Takes the next request into a slot if the connection, the schedule and -n allow it. */
static bool admit(sl_conn *c)
{
    sl_worker *w = c->w;
    const sl_shared *sh = w->sh;
    unsigned cap = w->o->close_mode ? 1 : c->depth;
    if (c->used >= cap || (w->o->close_mode && c->state != C_IDLE))
        return false;
    if (w->budget == 0 && w->now >= sh->measure_start_ns)
        return false;
    if (c->pause_until > w->now)
        return false; /* after a 503 (--tolerate-faults); on_tick resumes */
    uint64_t sched = w->now;
    if (sh->interval_ns) {
        if (c->next_sched > w->now) {
            sched_wait(c);
            return false;
        }
        sched = c->next_sched;
    }
    if (sched >= sh->measure_end_ns) {
        stop_worker(w);
        return false;
    }
    bool measured = sched >= sh->measure_start_ns;
    if (measured && w->budget == 0)
        return false;
    sl_slot *s = slot_at(c, c->used);
    s->sched_ns = sched;
    s->measured = measured;
    s->nbufs = 0;
    w->t->prepare(c, c->tstate, s);
    c->used++;
    w->inflight++;
    if (sh->interval_ns)
        c->next_sched += sh->interval_ns;
    if (measured && w->budget != UINT64_MAX)
        w->budget--;
    return true;
}

static void on_write(uv_write_t *req, int status)
{
    sl_conn *c = req->data;
    sl_worker *w = c->w;
    c->writing = false;
    if (c->state != C_OPEN)
        return; /* cancelled by a close */
    w->now = uv_hrtime();
    if (status < 0) {
        write_failed(c);
        maybe_finish(w);
        return;
    }
    if (in_window(w, w->now))
        w->stats.bytes_out += c->write_rest;
    if (c->tls) {
        sltls_sent(c->tls, c->write_rest);
        if (!c->tls->done)
            tls_handshake(c);
        else
            pump(c); /* tls_flush: the rest of the requests, and of the pair */
        maybe_finish(w);
        return;
    }
    c->written = c->write_upto;
    reclaim(c);
    pump(c);
    maybe_finish(w);
}

/* Sends every queued request: synchronously if the socket takes it all, else via uv_write. */
static void flush(sl_conn *c)
{
    sl_worker *w = c->w;
    if (c->tls) {
        tls_flush(c);
        return;
    }
    if (c->writing || c->sent == c->used)
        return;
    unsigned n = 0;
    size_t total = 0;
    for (unsigned i = c->sent; i < c->used; i++) {
        sl_slot *s = slot_at(c, i);
        s->sent_ns = w->now;
        for (unsigned b = 0; b < s->nbufs; b++) {
            c->iov[n++] = s->bufs[b];
            total += s->bufs[b].len;
        }
    }
    c->sent = c->used;
    int r = uv_try_write((uv_stream_t *)&c->tcp, c->iov, n);
    if (r < 0 && r != UV_EAGAIN) {
        conn_fail(c, ERR_WRITE);
        return;
    }
    size_t done = r > 0 ? (size_t)r : 0;
    if (in_window(w, w->now))
        w->stats.bytes_out += done;
    if (done == total) {
        c->written = c->write_upto = c->sent;
        reclaim(c);
        return;
    }
    unsigned k = 0;
    while (done >= c->iov[k].len)
        done -= c->iov[k++].len;
    c->iov[k].base += done;
    c->iov[k].len -= done;
    c->write_rest = total - (r > 0 ? (size_t)r : 0);
    c->write_upto = c->sent;
    c->writing = true;
    c->wreq.data = c;
    r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, c->iov + k, n - k, on_write);
    if (r < 0) {
        c->writing = false;
        conn_fail(c, ERR_WRITE);
    }
}

static void pump(sl_conn *c)
{
    sl_worker *w = c->w;
    if (w->stopping || (c->state != C_IDLE && c->state != C_OPEN && c->state != C_CONNECTING))
        return;
    while (admit(c))
        ;
    if (w->stopping)
        return;
    if (c->state == C_IDLE) {
        if (c->used > 0 || !w->o->close_mode)
            conn_connect(c);
    } else if (c->state == C_OPEN) {
        flush(c);
    }
}

/* --- reading --------------------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    sl_conn *c = h->data;
    buf->base = c->w->rbuf;
    buf->len = READ_BUF_BYTES;
}

/* The server ended its side: a TCP FIN, or TLS's close_notify. */
static void on_eof(sl_conn *c)
{
    int rc = c->w->t->on_eof(c, c->tstate);
    if (rc < 0)
        conn_fail(c, SL_FAIL_KIND(rc));
    else if (c->answered < c->sent)
        conn_fail(c, ERR_READ); /* closed with requests unanswered */
    else
        close_conn(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    sl_conn *c = s->data;
    sl_worker *w = c->w;
    if (nread == 0 || c->state != C_OPEN)
        return;
    w->now = uv_hrtime();
    if (nread > 0) {
        if (in_window(w, w->now))
            w->stats.bytes_in += (uint64_t)nread;
        int rc = c->tls ? tls_on_data(c, buf->base, (size_t)nread)
                        : w->t->on_data(c, c->tstate, buf->base, (size_t)nread);
        if (rc == SL_CONTINUE)
            pump(c);
        else if (rc == SL_CLOSE)
            close_conn(c);
        else if (rc == RC_EOF)
            on_eof(c);
        else if (rc != RC_HANDLED)
            conn_fail(c, SL_FAIL_KIND(rc));
    } else if (c->tls && (!c->tls->done || (!c->tls->got_data && c->answered < c->sent))) {
        /* In TLS 1.3 a server that refuses our certificate (or none) says so only after our
         * side of the handshake finished: an alert (tls_on_data), or just the close. */
        snprintf(c->tls->why, sizeof c->tls->why, "%s: connection %s by the server%s",
                 c->tls->done ? "after the handshake" : "handshake",
                 nread == UV_EOF ? "closed" : "reset",
                 c->tls->done ? " before any data (refused? a client certificate required?)"
                              : "");
        tls_failed(c);
    } else if (nread == UV_EOF) {
        on_eof(c);
    } else {
        conn_fail(c, ERR_READ);
    }
    maybe_finish(w);
}

/* --- timers ---------------------------------------------------------------------------------- */

static void on_tick(uv_timer_t *t)
{
    sl_worker *w = t->data;
    w->now = uv_hrtime();
    if (w->now >= w->sh->measure_end_ns) {
        stop_worker(w);
        return;
    }
    uint64_t timeout = (uint64_t)w->o->timeout_ms * NS_PER_MS;
    for (unsigned i = 0; i < w->nconns && !w->stopping; i++) {
        sl_conn *c = &w->conns[i];
        switch (c->state) {
        case C_RETRY:
            if (w->now >= c->retry_at) {
                c->state = C_IDLE;
                pump(c);
            }
            break;
        case C_CONNECTING:
            if (w->now - c->connect_start >= timeout)
                connect_failed(c);
            break;
        case C_OPEN:
            if (c->tls && !c->tls->done) {
                if (w->now - c->connect_start >= timeout) {
                    snprintf(c->tls->why, sizeof c->tls->why,
                             "handshake timed out (--timeout %u ms)", w->o->timeout_ms);
                    tls_failed(c);
                }
            } else if (c->answered < c->sent &&
                       w->now - slot_at(c, c->answered)->sent_ns >= timeout) {
                conn_fail(c, ERR_TIMEOUT);
            } else if (c->pause_until && w->now >= c->pause_until) {
                c->pause_until = 0;
                pump(c);
            } else if (w->sh->interval_ns) {
                pump(c);
            }
            break;
        case C_IDLE:
            if (w->sh->interval_ns)
                pump(c);
            break;
        default: break;
        }
    }
    maybe_finish(w);
}

static uint64_t ms_until(uint64_t now, uint64_t at)
{
    return at > now ? (at - now + NS_PER_MS - 1) / NS_PER_MS : 0;
}

static void on_deadline(uv_timer_t *t)
{
    sl_worker *w = t->data;
    w->now = uv_hrtime();
    if (w->now < w->sh->measure_end_ns) { /* the loop's cached time ran behind: wait the rest */
        uv_timer_start(t, on_deadline, ms_until(w->now, w->sh->measure_end_ns), 0);
        return;
    }
    stop_worker(w);
}

/* --- the worker ------------------------------------------------------------------------------ */

static void thread_main(void *arg)
{
    sl_worker *w = arg;
    w->now = uv_hrtime();
    uv_update_time(&w->loop);
    uv_timer_start(&w->tick, on_tick, w->tick_ms, w->tick_ms);
    uv_timer_start(&w->deadline, on_deadline, ms_until(w->now, w->sh->measure_end_ns), 0);
    if (w->tfd >= 0)
        uv_poll_start(&w->sched_poll, UV_READABLE, on_sched);
    for (unsigned i = 0; i < w->nconns && !w->stopping; i++)
        pump(&w->conns[i]);
    maybe_finish(w);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    if (w->rec)
        idrec_writer_flush(w->rec);
    if (!w->stats.end_ns)
        w->stats.end_ns = w->now;
    atomic_store(&w->finished, true);
}

static int conn_create(sl_worker *w, sl_conn *c, unsigned id)
{
    const sl_shared *sh = w->sh;
    c->w = w;
    c->id = id;
    c->target = id % w->o->ntargets;
    c->state = C_IDLE;
    c->depth = w->o->close_mode ? 1 : w->o->pipeline;
    c->slots = calloc(c->depth, sizeof *c->slots);
    c->iov = calloc(2 * (size_t)c->depth, sizeof *c->iov);
    c->tstate = calloc(1, w->t->conn_bytes ? w->t->conn_bytes : 1);
    if (w->t->slot_bytes)
        c->slot_mem = calloc(c->depth, w->t->slot_bytes);
    if (sh->tls)
        c->tls = calloc(1, sizeof *c->tls);
    if (!c->slots || !c->iov || !c->tstate || (w->t->slot_bytes && !c->slot_mem) ||
        (sh->tls && !c->tls))
        return -1;
    for (unsigned i = 0; i < c->depth; i++)
        c->slots[i].mem = w->t->slot_bytes ? c->slot_mem + (size_t)i * w->t->slot_bytes : NULL;
    /* Open loop: connections take evenly spaced phases of the schedule. */
    c->next_sched = sh->t0_ns + (uint64_t)((double)sh->interval_ns * id / sh->total_conns);
    c->heap_idx = NOT_IN_HEAP;
    return w->t->conn_init(c, c->tstate);
}

sl_worker *worker_create(const sl_shared *sh, unsigned index, unsigned first_conn, unsigned nconns,
                         uint64_t budget)
{
    sl_worker *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->sh = sh;
    w->o = sh->o;
    w->t = sh->target;
    w->index = index;
    w->budget = budget;
    w->rng = UINT64_C(0x9E3779B97F4A7C15) * (index + 1) ^ UINT64_C(0x5eed5eed12345678);
    stats_init(&w->stats);
    uv_loop_init(&w->loop);
    uv_timer_init(&w->loop, &w->tick);
    uv_timer_init(&w->loop, &w->deadline);
    w->tick.data = w->deadline.data = w;
    w->tick_ms = w->o->timeout_ms / 4 < 10 ? w->o->timeout_ms / 4 : 10;
    w->tfd = -1;
    w->armed_at = UINT64_MAX;
    if (sh->interval_ns) {
        w->heap = calloc(nconns ? nconns : 1, sizeof *w->heap);
        w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (!w->heap || w->tfd < 0 || uv_poll_init(&w->loop, &w->sched_poll, w->tfd) != 0) {
            if (w->tfd >= 0)
                close(w->tfd);
            w->tfd = -1;
            goto fail;
        }
        w->sched_poll.data = w;
    }
    if (w->tick_ms == 0)
        w->tick_ms = 1;
    w->rbuf = malloc(READ_BUF_BYTES);
    w->conns = calloc(nconns, sizeof *w->conns);
    w->nconns = nconns;
    if (sh->tls) {
        char err[256]; /* main built one from the same options already: only memory can fail */
        w->pbuf = malloc(PLAIN_BUF_BYTES);
        w->tls_ctx = sltls_ctx_new(w->o, err, sizeof err);
    }
    if (!w->rbuf || !w->conns || (sh->tls && (!w->pbuf || !w->tls_ctx)))
        goto fail;
    if (w->o->verify) {
        if (verifier_init(&w->ver, &sh->layout, index, sh->expected_ids / sh->o->threads) != 0)
            goto fail;
        w->verify = true;
        if (sh->idrec) {
            w->rec = malloc(sizeof *w->rec);
            if (!w->rec)
                goto fail;
            idrec_writer_init(w->rec, sh->idrec);
            w->ver.rec = w->rec;
        }
    }
    for (unsigned i = 0; i < nconns; i++)
        if (conn_create(w, &w->conns[i], first_conn + i) != 0)
            goto fail;
    return w;
fail:
    worker_destroy(w);
    return NULL;
}

int worker_start(sl_worker *w)
{
    int r = uv_thread_create(&w->thread, thread_main, w);
    w->started = r == 0;
    return r;
}

void worker_join(sl_worker *w)
{
    if (w->started)
        uv_thread_join(&w->thread);
    w->started = false;
}

bool worker_finished(const sl_worker *w)
{
    return atomic_load(&w->finished);
}

void worker_progress(const sl_worker *w, uint64_t *requests, uint64_t *errors)
{
    *requests = atomic_load_explicit(&w->progress_requests, memory_order_relaxed);
    *errors = atomic_load_explicit(&w->progress_errors, memory_order_relaxed);
}

const sl_stats *worker_stats(const sl_worker *w)
{
    return &w->stats;
}

verifier *worker_verifier(sl_worker *w)
{
    return w->verify ? &w->ver : NULL;
}

void worker_destroy(sl_worker *w)
{
    if (!w)
        return;
    if (w->conns) {
        for (unsigned i = 0; i < w->nconns; i++) {
            sl_conn *c = &w->conns[i];
            if (c->tstate && c->w && w->t->conn_free)
                w->t->conn_free(c, c->tstate);
            free(c->tstate);
            if (c->tls)
                sltls_free(c->tls); /* the connection ended with the run: its session */
            free(c->tls);
            free(c->slots);
            free(c->iov);
            free(c->slot_mem);
        }
    }
    if (w->verify)
        verifier_free(&w->ver);
    free(w->rec);
    /* Handles were closed by the run; a worker that never ran closes its timers here. */
    if (!w->stopping) {
        uv_close((uv_handle_t *)&w->tick, NULL);
        uv_close((uv_handle_t *)&w->deadline, NULL);
        if (w->tfd >= 0)
            uv_close((uv_handle_t *)&w->sched_poll, NULL);
        uv_run(&w->loop, UV_RUN_DEFAULT);
    }
    uv_loop_close(&w->loop);
    if (w->tfd >= 0)
        close(w->tfd);
    free(w->heap);
    free(w->conns);
    free(w->rbuf);
    free(w->pbuf);
    sltls_ctx_free(w->tls_ctx);
    free(w);
}
