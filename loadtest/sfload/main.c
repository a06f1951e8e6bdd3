/* sfload: a load generator for snowflaked (HTTP, memcached text protocol, TCP echo).
 *
 *   sfload [options] http://127.0.0.1:8080/id
 *   sfload --mode memcache|echo [options] 127.0.0.1:11211
 *
 * This file: the command line, the pre-run steps (address, TLS context, target, ID layout from
 * /metrics), the threads, the progress line, the server's CPU from /proc, and the report. See
 * README.md. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "util/httpresp.h"
#include "opts.h"
#include "report.h"
#include "target.h"
#include "tls.h"

#define METRICS_MAX (4u << 20)
#define NS_PER_S    UINT64_C(1000000000)

/* --- the ID layout from GET /metrics ---------------------------------------------------------- */

typedef struct metrics_fetch {
    int status;
    bool found;
    vlayout layout;
} metrics_fetch;

static int on_metrics(void *ud, const hresp *r)
{
    metrics_fetch *m = ud;
    m->status = r->status;
    if (r->status == 200 && r->body)
        m->found = vlayout_from_metrics(r->body, r->body_len, &m->layout) == 0;
    return 1;
}

/* The blocking socket of fetch_layout, plain or TLS. */
static int io_send(sltls_conn *t, int fd, const char *p, size_t n)
{
    while (n) {
        long k = t ? sltls_write(t, p, n) : (long)send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static long io_recv(sltls_conn *t, int fd, char *p, size_t n)
{
    if (!t)
        return (long)recv(fd, p, n, 0);
    long k = sltls_read(t, p, n);
    if (k == SLTLS_EOF)
        return 0;
    if (k == SLTLS_WANT) /* a blocking socket: the receive timeout */
        errno = EAGAIN;
    return k > 0 ? k : -1;
}

/* One blocking request, 2 s timeouts, before any load starts. 0, or -1 with a reason. */
static int fetch_layout(const sl_opts *o, const sltls_ctx *tls, const sl_addr *to, vlayout *l,
                        char *why, size_t n)
{
    int fd = socket(to->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, n, "socket: %s", strerror(errno));
        return -1;
    }
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char req[8192];
    int len =
        snprintf(req, sizeof req, "GET /metrics HTTP/1.1\r\nHost: %s:%u\r\n", to->host, to->port);
    for (unsigned i = 0; i < o->nheaders && len < (int)sizeof req - 512; i++)
        len += snprintf(req + len, sizeof req - (size_t)len, "%s\r\n", o->headers[i]);
    len += snprintf(req + len, sizeof req - (size_t)len, "Connection: close\r\n\r\n");
    metrics_fetch m = {0};
    hresp_parser p;
    hresp_init(&p, false, true, METRICS_MAX, on_metrics, &m);
    int rc = -1;
    sltls_conn tc = {0}, *t = tls ? &tc : NULL;
    if (connect(fd, (const struct sockaddr *)&to->addr, to->addrlen) != 0) {
        snprintf(why, n, "connect: %s", strerror(errno));
    } else if (t && sltls_start_fd(t, tls, to->host, fd) != 0) {
        snprintf(why, n, "TLS: %s", t->why);
    } else if (io_send(t, fd, req, (size_t)len) != 0) {
        snprintf(why, n, "send failed");
    } else {
        char buf[16384];
        size_t total = 0;
        for (;;) {
            long got = io_recv(t, fd, buf, sizeof buf);
            size_t used;
            if (got < 0) {
                snprintf(why, n, "recv: %s", strerror(errno));
                break;
            }
            int fr = got == 0 ? hresp_eof(&p) : hresp_feed(&p, buf, (size_t)got, &used);
            total += (size_t)got;
            if (fr == HRESP_STOP || (got == 0 && fr == HRESP_OK) || fr == HRESP_ERROR ||
                total > METRICS_MAX)
                break;
        }
        if (m.status && !m.found)
            snprintf(why, n, "GET /metrics answered %d without a snowflaked_info layout", m.status);
        else if (!m.status && !why[0])
            snprintf(why, n, "no response to GET /metrics");
        if (m.found) {
            *l = m.layout;
            rc = 0;
        }
    }
    hresp_free(&p);
    sltls_free(&tc);
    close(fd);
    return rc;
}

/* --- CPU
 * ------------------------------------------------------------------------------------------ */

/* utime + stime of every thread of pid, in microseconds. -1 if unreadable. */
static double proc_cpu_us(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    unsigned long long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) * 1e6 / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* --- the run ---------------------------------------------------------------------------------- */

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / NS_PER_S), (long)(ns % NS_PER_S)};
    nanosleep(&ts, NULL);
}

static void raise_nofile(unsigned want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* IDs one request yields at most: count= of an /ids path, else 1. */
static uint64_t ids_per_request(const sl_opts *o)
{
    uint64_t most = 1;
    for (unsigned i = 0; i < o->npaths; i++) {
        const char *c = strstr(o->paths[i], "count=");
        if (strncmp(o->paths[i], "/ids", 4) == 0 && c) {
            uint64_t v = strtoull(c + 6, NULL, 10);
            if (v > most && v < 1000000)
                most = v;
        }
    }
    return most;
}

typedef struct run {
    sl_opts *o;
    sl_shared sh;
    sl_worker **w;
    double server_cpu0, server_cpu1, client_cpu0, client_cpu1;
    uint64_t cpu_t0, cpu_t1;
    bool sampled;
} run;

static void sample_start(run *r)
{
    r->cpu_t0 = uv_hrtime();
    r->client_cpu0 = self_cpu_us();
    if (r->o->server_pid)
        r->server_cpu0 = proc_cpu_us(r->o->server_pid);
    r->sampled = true;
}

/* Waits for the threads, sampling CPU at the window's start and printing progress. */
static void watch(run *r)
{
    const sl_opts *o = r->o;
    bool tty = isatty(STDERR_FILENO) && !o->quiet;
    uint64_t next = r->sh.t0_ns + NS_PER_S, last_req = 0;
    for (;;) {
        bool done = true;
        for (unsigned i = 0; i < o->threads; i++)
            done = done && worker_finished(r->w[i]);
        if (done)
            break;
        uint64_t now = uv_hrtime();
        if (!r->sampled && now >= r->sh.measure_start_ns)
            sample_start(r);
        if (tty && now >= next) {
            uint64_t req = 0, err = 0;
            for (unsigned i = 0; i < o->threads; i++) {
                uint64_t a, b;
                worker_progress(r->w[i], &a, &b);
                req += a;
                err += b;
            }
            double t = (double)(now - r->sh.t0_ns) / 1e9;
            fprintf(stderr,
                    "\rsfload: %5.0fs %s %12" PRIu64 " requests %10" PRIu64 " req/s %8" PRIu64
                    " errors ",
                    t, now < r->sh.measure_start_ns ? "warm-up" : "       ", req, req - last_req,
                    err);
            last_req = req;
            next += NS_PER_S;
        }
        uint64_t nap = 10 * UINT64_C(1000000);
        if (!r->sampled && r->sh.measure_start_ns > now && r->sh.measure_start_ns - now < nap)
            nap = r->sh.measure_start_ns - now;
        sleep_ns(nap);
    }
    if (!r->sampled)
        sample_start(r);
    r->cpu_t1 = uv_hrtime();
    r->client_cpu1 = self_cpu_us();
    if (o->server_pid)
        r->server_cpu1 = proc_cpu_us(o->server_pid);
    if (tty)
        fputs("\r\033[K", stderr);
}

static const char *setup_layout(sl_opts *o, const sltls_ctx *tls)
{
    if (!o->verify)
        return "";
    if (o->have_layout)
        return "option";
    char why[256] = "";
    for (unsigned i = 0; i < o->ntargets; i++) { /* the first target that answers */
        why[0] = '\0';
        if (fetch_layout(o, tls, &o->targets[i], &o->layout, why, sizeof why) == 0)
            return "metrics";
    }
    fprintf(stderr, "sfload: ID layout not read from /metrics (%s); assuming 41/5/5/12\n", why);
    o->layout = VLAYOUT_DEFAULT;
    return "default";
}

static int setup_target(const sl_opts *o, sl_target *t, char *err, size_t n)
{
    switch (o->mode) {
    case MODE_MEMCACHE: return target_memcache_setup(o, t, err, n);
    case MODE_ECHO: return target_echo_setup(o, t, err, n);
    default: return target_http_setup(o, t, err, n);
    }
}

int main(int argc, char **argv)
{
    static sl_opts o; /* large: static, not on the stack */
    char err[512];
    opts_rc orc = opts_parse(argc, argv, &o, err, sizeof err);
    if (orc == OPTS_EXIT)
        return 0;
    if (orc != OPTS_OK || opts_resolve(&o, err, sizeof err) != 0) {
        fprintf(stderr, "sfload: %s\n", err);
        return 2;
    }
    if (o.server_pid && proc_cpu_us(o.server_pid) < 0) {
        fprintf(stderr, "sfload: cannot read /proc/%d/stat (--server-pid)\n", o.server_pid);
        return 2;
    }
    sltls_ctx *tls = NULL;
    if (o.tls && !(tls = sltls_ctx_new(&o, err, sizeof err))) {
        fprintf(stderr, "sfload: %s\n", err);
        return 2;
    }
    sl_target target;
    if (setup_target(&o, &target, err, sizeof err) != 0) {
        fprintf(stderr, "sfload: %s\n", err);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    raise_nofile(o.connections + 64);

    run r = {.o = &o};
    const char *layout_source = setup_layout(&o, tls);
    r.sh.o = &o;
    r.sh.tls = tls;
    r.sh.target = &target;
    r.sh.layout = o.layout;
    r.sh.total_conns = o.connections;
    double window = o.duration_s > 0 ? o.duration_s : SL_MAX_DURATION_S;
    if (o.rate > 0)
        r.sh.interval_ns = (uint64_t)((double)o.connections / o.rate * 1e9);
    if (r.sh.interval_ns == 0 && o.rate > 0)
        r.sh.interval_ns = 1;
    uint64_t per_req = ids_per_request(&o);
    if (o.requests)
        r.sh.expected_ids = o.requests * per_req;
    else if (o.rate > 0)
        r.sh.expected_ids = (uint64_t)(o.rate * (window + o.warmup_s)) * per_req;

    static idrec_file ids_v2; /* --ids-out-v2, written by the load threads as IDs arrive */
    if (o.ids_out_v2) {
        if (idrec_open(&ids_v2, o.ids_out_v2) != 0) {
            fprintf(stderr, "sfload: --ids-out-v2 %s: %s\n", o.ids_out_v2, strerror(errno));
            return 2;
        }
        r.sh.idrec = &ids_v2;
    }
    r.w = calloc(o.threads, sizeof *r.w);
    if (!r.w) {
        fprintf(stderr, "sfload: out of memory\n");
        return 2;
    }
    r.sh.t0_ns = uv_hrtime();
    r.sh.measure_start_ns = r.sh.t0_ns + (uint64_t)(o.warmup_s * 1e9);
    r.sh.measure_end_ns = r.sh.measure_start_ns + (uint64_t)(window * 1e9);
    unsigned first = 0;
    for (unsigned i = 0; i < o.threads; i++) {
        unsigned nc = o.connections / o.threads + (i < o.connections % o.threads);
        uint64_t budget = UINT64_MAX;
        if (o.requests)
            budget = o.requests / o.threads + (i < o.requests % o.threads);
        r.w[i] = worker_create(&r.sh, i, first, nc, budget);
        if (!r.w[i]) {
            fprintf(stderr, "sfload: out of memory creating %u connections\n", nc);
            return 2;
        }
        first += nc;
    }
    if (o.webbench && !o.json) {
        fprintf(stderr, "sfload %s (webbench 1.5 compatible summary)\n", SFLOAD_VERSION);
        report_webbench_header(stdout, &o);
    }
    for (unsigned i = 0; i < o.threads; i++) {
        int e = worker_start(r.w[i]);
        if (e != 0) {
            fprintf(stderr, "sfload: cannot start thread %u: %s\n", i, uv_strerror(e));
            return 2;
        }
    }
    watch(&r);

    /* Merge: statistics, then the ID sets (cross-thread duplicates are found here). */
    sl_stats total;
    stats_init(&total);
    size_t map_bytes = 0;
    for (unsigned i = 0; i < o.threads; i++) {
        worker_join(r.w[i]);
        stats_merge(&total, worker_stats(r.w[i]));
        if (worker_verifier(r.w[i]))
            map_bytes += idset_bytes(&worker_verifier(r.w[i])->set);
    }
    uint64_t m0 = uv_hrtime();
    verifier *ver = worker_verifier(r.w[0]);
    bool ids_out_failed = false;
    if (o.ids_out_v2 && idrec_close(&ids_v2) != 0) { /* every thread flushed when it ended */
        fprintf(stderr, "sfload: --ids-out-v2 %s: %s\n", o.ids_out_v2, strerror(errno));
        ids_out_failed = true;
    }
    if (ver) {
        verifier *vs[256];
        for (unsigned i = 0; i < o.threads; i++)
            vs[i] = worker_verifier(r.w[i]);
        verifier_merge(vs, o.threads);
        if (o.ids_out) {
            FILE *f = fopen(o.ids_out, "wb");
            if (!f || verifier_write_ids(vs, o.threads, f) != 0 || fclose(f) != 0) {
                fprintf(stderr, "sfload: --ids-out %s: %s\n", o.ids_out, strerror(errno));
                ids_out_failed = true;
            }
        }
    }
    double merge_ms = (double)(uv_hrtime() - m0) / 1e6;

    sl_report rep = {
        .o = &o,
        .st = &total,
        .elapsed_s = total.end_ns > r.sh.measure_start_ns
                         ? (double)(total.end_ns - r.sh.measure_start_ns) / 1e9
                         : 0.0,
        .ver = ver,
        .layout_source = layout_source,
        .verify_map_bytes = map_bytes,
        .verify_merge_ms = merge_ms,
        .have_server = o.server_pid && r.server_cpu0 >= 0 && r.server_cpu1 >= 0,
        .server_cpu_us = r.server_cpu1 - r.server_cpu0,
        .cpu_window_s = (double)(r.cpu_t1 - r.cpu_t0) / 1e9,
        .client_cpu_us = r.client_cpu1 - r.client_cpu0,
    };
    if (o.json)
        report_json(stdout, &rep);
    else if (o.webbench)
        report_webbench(stdout, &rep);
    else
        report_text(stdout, &rep);
    fflush(stdout);
    report_verify_failure(stderr, &rep);
    bool passed = report_passed(&rep);
    if (!passed && o.min_ids && (!ver || ver->ids < o.min_ids))
        fprintf(stderr, "sfload: %" PRIu64 " IDs received, fewer than --min-ids %" PRIu64 "\n",
                ver ? ver->ids : 0, o.min_ids);
    if (!passed && stats_errors(&total) && !o.tolerate_faults)
        fprintf(stderr, "sfload: %" PRIu64 " of %" PRIu64 " requests failed\n",
                stats_errors(&total), total.requests);
    if (total.tls_error[0])
        fprintf(stderr, "sfload: TLS handshakes failed (%" PRIu64 " in the measured window); the "
                "first: %s\n", total.tls_failures, total.tls_error);
    for (unsigned i = 0; i < o.threads; i++)
        worker_destroy(r.w[i]);
    free(r.w);
    target_release(&target);
    sltls_ctx_free(tls);
    return passed && !ids_out_failed ? 0 : 1;
}
