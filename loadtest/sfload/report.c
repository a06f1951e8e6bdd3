/* Text, JSON and webbench output (see report.h). */
#include "report.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <string.h>

static const double pcts[] = {50, 75, 90, 99, 99.9, 99.99};

bool report_passed(const sl_report *r)
{
    const sl_opts *o = r->o;
    if (r->ver && verifier_failed(r->ver))
        return false;
    if (o->min_ids && (!r->ver || r->ver->ids < o->min_ids))
        return false;
    /* --tolerate-faults: the fleet is being broken on purpose; request errors are reported, and
     * only the IDs decide. */
    return o->tolerate_faults || stats_errors(r->st) == 0;
}

/* Requests that neither succeeded nor were refused (503 under --tolerate-faults). */
static uint64_t failed_requests(const sl_stats *st)
{
    return st->requests - st->ok - st->refused;
}

static double per_s(double n, double secs)
{
    return secs > 0 ? n / secs : 0.0;
}

/* ns as "812ns", "45.1us", "1.23ms", "2.50s". */
static const char *fmt_ns(uint64_t ns, char *buf, size_t n)
{
    if (ns < 1000)
        snprintf(buf, n, "%" PRIu64 "ns", ns);
    else if (ns < 1000000)
        snprintf(buf, n, "%.1fus", (double)ns / 1e3);
    else if (ns < 1000000000)
        snprintf(buf, n, "%.2fms", (double)ns / 1e6);
    else
        snprintf(buf, n, "%.2fs", (double)ns / 1e9);
    return buf;
}

static const char *fmt_bytes(double b, char *buf, size_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", b, units[u]);
    return buf;
}

static const char *model(const sl_opts *o)
{
    if (o->mode != MODE_HTTP)
        return o->pipeline > 1 ? "pipelined" : "one request at a time per connection";
    if (o->close_mode)
        return "connection per request (HTTP/1.0, read until close)";
    return o->pipeline > 1 ? "keep-alive, pipelined" : "keep-alive";
}

/* Latency rows at 1-2-5 steps (in us), from the first to the last occupied. */
#define NSTEPS 40
static void steps(const hist *h, uint64_t bound_ns[NSTEPS], uint64_t count[NSTEPS], int *first,
                  int *last)
{
    static const unsigned mult[3] = {1, 2, 5};
    uint64_t base = 1000; /* bounds: 1us, 2us, 5us, 10us, ... */
    for (int i = 0; i < NSTEPS; i++) {
        bound_ns[i] = base * mult[i % 3];
        count[i] = 0;
        if (i % 3 == 2)
            base *= 10;
    }
    *first = -1;
    *last = -1;
    for (size_t k = 0; k < HIST_BUCKETS; k++) {
        if (!h->counts[k])
            continue;
        uint64_t v = hist_bucket_low(k);
        int i = 0;
        while (i < NSTEPS - 1 && v > bound_ns[i])
            i++;
        count[i] += h->counts[k];
        if (*first < 0 || i < *first)
            *first = i;
        if (i > *last)
            *last = i;
    }
}

static void text_latency(FILE *f, const hist *h)
{
    char a[24], b[24];
    if (!h->total) {
        fprintf(f, "  latency      no responses\n");
        return;
    }
    fprintf(f, "  latency      min %s  mean %s", fmt_ns(h->min, a, sizeof a),
            fmt_ns((uint64_t)hist_mean(h), b, sizeof b));
    fprintf(f, "  stdev %s  max %s\n", fmt_ns((uint64_t)hist_stdev(h), a, sizeof a),
            fmt_ns(h->max, b, sizeof b));
    fprintf(f, "  percentiles ");
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
        fprintf(f, " p%g %s", pcts[i], fmt_ns(hist_percentile(h, pcts[i]), a, sizeof a));
    fprintf(f, "\n  histogram    (latency <= bound: count, share)\n");
    uint64_t bound[NSTEPS], count[NSTEPS];
    int first, last;
    steps(h, bound, count, &first, &last);
    uint64_t peak = 1;
    for (int i = first; i <= last; i++)
        if (count[i] > peak)
            peak = count[i];
    for (int i = first; i <= last && first >= 0; i++) {
        char bar[41];
        int n = (int)(40.0 * (double)count[i] / (double)peak + 0.5);
        memset(bar, '#', (size_t)n);
        bar[n] = '\0';
        fprintf(f, "    %s%-8s %12" PRIu64 " %7.3f%%%s%s\n",
                i == NSTEPS - 1 ? ">" : "<=", fmt_ns(bound[i], a, sizeof a), count[i],
                100.0 * (double)count[i] / (double)h->total, n ? "  " : "", bar);
    }
}

static void text_verify(FILE *f, const sl_report *r)
{
    const verifier *v = r->ver;
    char b[32], layout[VLAYOUT_NAME_MAX];
    vlayout_name(&v->layout, layout);
    fprintf(f,
            "  verify-ids   %" PRIu64 " IDs (%" PRIu64 " distinct) in %" PRIu64
            " bodies, layout %s (%s): %" PRIu64 " duplicates, %" PRIu64
            " not increasing, %" PRIu64 " malformed%s: %s\n",
            v->ids, v->distinct, v->bodies, layout, r->layout_source, v->duplicates, v->non_increasing, v->malformed,
            v->oom ? ", OUT OF MEMORY" : "", verifier_failed(v) ? "FAILED" : "passed");
    fprintf(f, "               ID maps %s at the end, merged in %.1f ms\n",
            fmt_bytes((double)r->verify_map_bytes, b, sizeof b), r->verify_merge_ms);
    for (unsigned i = 0; i < v->nexamples; i++)
        fprintf(f, "               %s\n", v->examples[i]);
}

void report_text(FILE *f, const sl_report *r)
{
    const sl_opts *o = r->o;
    const sl_stats *st = r->st;
    char a[32], b[32], c[32];
    fprintf(f, "sfload %s: %s %s%s%s\n", SFLOAD_VERSION, opts_mode_name(o->mode),
            o->mode == MODE_HTTP ? o->method : "", o->mode == MODE_HTTP ? " " : "", o->target);
    if (o->mode == MODE_HTTP && (o->npaths > 1 || strstr(o->target, o->paths[0]) == NULL)) {
        fprintf(f, "  paths       ");
        for (unsigned i = 0; i < o->npaths; i++)
            fprintf(f, " %s", o->paths[i]);
        fprintf(f, "\n");
    }
    fprintf(f, "  %u connection%s, %u thread%s, %s, pipeline %u, ", o->connections,
            o->connections == 1 ? "" : "s", o->threads, o->threads == 1 ? "" : "s", model(o),
            o->close_mode ? 1 : o->pipeline);
    if (o->rate > 0)
        fprintf(f, "open loop at %g req/s", o->rate);
    else
        fprintf(f, "closed loop");
    fprintf(f, ", warm-up %gs\n", o->warmup_s);
    uint64_t failed = failed_requests(st);
    fprintf(f, "  requests     %" PRIu64 " in %.2fs: %.1f req/s (%" PRIu64 " ok, ", st->requests,
            r->elapsed_s, per_s((double)st->requests, r->elapsed_s), st->ok);
    if (o->tolerate_faults)
        fprintf(f, "%" PRIu64 " refused (503), ", st->refused);
    fprintf(f, "%" PRIu64 " failed)\n", failed);
    fprintf(f, "  bytes        received %s (%s/s), sent %s, %" PRIu64 " connections opened\n",
            fmt_bytes((double)st->bytes_in, a, sizeof a),
            fmt_bytes(per_s((double)st->bytes_in, r->elapsed_s), b, sizeof b),
            fmt_bytes((double)st->bytes_out, c, sizeof c), st->connects);
    text_latency(f, &st->latency);
    fprintf(f, "  errors      ");
    if (!stats_errors(st))
        fprintf(f, " none");
    for (int i = 0; i < ERR_COUNT; i++)
        if (st->errors[i])
            fprintf(f, " %s %" PRIu64, stats_err_name((sl_err)i), st->errors[i]);
    fprintf(f, "\n");
    if (o->tolerate_faults) {
        fprintf(f, "  faults      ");
        if (!stats_faults(st))
            fprintf(f, " none");
        for (int i = 0; i < ERR_COUNT; i++)
            if (st->faults[i])
                fprintf(f, " %s %" PRIu64, stats_err_name((sl_err)i), st->faults[i]);
        fprintf(f, " (retried)\n");
    }
    if (o->ntargets > 1)
        for (unsigned i = 0; i < o->ntargets; i++) {
            const sl_tstats *t = &st->target[i];
            fprintf(f,
                    "  target %-3u  %s: %" PRIu64 " requests, %" PRIu64 " 2xx, %" PRIu64
                    " 503, %" PRIu64 " errors, %" PRIu64 " faults, %" PRIu64 " IDs\n",
                    i, o->targets[i].target, t->requests, t->ok, t->status_503, t->errors,
                    t->faults, t->ids);
        }
    if (o->tls) {
        fprintf(f, "  tls          %s%s%s, server %s, %s; handshakes %" PRIu64 " full, %" PRIu64
                   " resumed, %" PRIu64 " failed%s%s\n",
                st->tls_version[0] ? st->tls_version : "no handshake finished",
                st->tls_version[0] ? " " : "", st->tls_cipher,
                o->tls_insecure ? "NOT verified (--insecure)" : "verified",
                o->tls_resume ? "resuming sessions" : "no resumption", st->tls_full,
                st->tls_resumed, st->tls_failures, st->tls_error[0] ? "; the first: " : "",
                st->tls_error);
        uint64_t hs = st->tls_full + st->tls_resumed;
        if (r->have_server && hs)
            fprintf(f, "               server %.2f us CPU per handshake (connection)\n",
                    r->server_cpu_us / (double)hs);
    }
    if (o->mode == MODE_MEMCACHE)
        fprintf(f, "  memcache     gets %" PRIu64 " (hits %" PRIu64 ", %.1f%%), sets %" PRIu64 "\n",
                st->mc_gets, st->mc_hits,
                st->mc_gets ? 100.0 * (double)st->mc_hits / (double)st->mc_gets : 0.0, st->mc_sets);
    if (r->ver)
        text_verify(f, r);
    if (r->have_server)
        fprintf(f, "  server       pid %d: %.2f us CPU per request, %.1f%% of one core\n",
                o->server_pid, st->requests ? r->server_cpu_us / (double)st->requests : 0.0,
                r->cpu_window_s > 0 ? r->server_cpu_us / (r->cpu_window_s * 1e4) : 0.0);
    if (r->cpu_window_s > 0)
        fprintf(f, "  sfload       %.1f%% of one core\n",
                r->client_cpu_us / (r->cpu_window_s * 1e4));
    fprintf(f, "  result       %s\n", report_passed(r) ? "PASS" : "FAIL");
}

/* --- JSON ------------------------------------------------------------------------------------- */

static void num(cJSON *o, const char *k, double v)
{
    cJSON_AddNumberToObject(o, k, v);
}

static cJSON *json_latency(const hist *h)
{
    cJSON *l = cJSON_CreateObject();
    num(l, "count", (double)h->total);
    num(l, "min", h->total ? (double)h->min / 1e3 : 0);
    num(l, "mean", hist_mean(h) / 1e3);
    num(l, "stdev", hist_stdev(h) / 1e3);
    static const char *const names[] = {"p50", "p75", "p90", "p99", "p99_9", "p99_99"};
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
        num(l, names[i], (double)hist_percentile(h, pcts[i]) / 1e3);
    num(l, "max", (double)h->max / 1e3);
    return l;
}

static cJSON *json_histogram(const hist *h)
{
    cJSON *a = cJSON_CreateArray();
    uint64_t bound[NSTEPS], count[NSTEPS];
    int first, last;
    steps(h, bound, count, &first, &last);
    for (int i = first; i <= last && first >= 0; i++) {
        cJSON *row = cJSON_CreateObject();
        if (i == NSTEPS - 1)
            num(row, "gt_us", (double)bound[i - 1] / 1e3);
        else
            num(row, "le_us", (double)bound[i] / 1e3);
        num(row, "count", (double)count[i]);
        cJSON_AddItemToArray(a, row);
    }
    return a;
}

static cJSON *json_verify(const sl_report *r)
{
    const verifier *v = r->ver;
    cJSON *j = cJSON_CreateObject();
    char layout[VLAYOUT_NAME_MAX];
    vlayout_name(&v->layout, layout);
    cJSON_AddBoolToObject(j, "passed", !verifier_failed(v));
    cJSON_AddStringToObject(j, "layout", layout);
    cJSON_AddStringToObject(j, "layout_source", r->layout_source);
    num(j, "ids", (double)v->ids);
    num(j, "distinct_ids", (double)v->distinct);
    num(j, "bodies", (double)v->bodies);
    num(j, "duplicates", (double)v->duplicates);
    num(j, "non_increasing", (double)v->non_increasing);
    num(j, "malformed", (double)v->malformed);
    cJSON_AddBoolToObject(j, "out_of_memory", v->oom);
    num(j, "map_bytes", (double)r->verify_map_bytes);
    num(j, "merge_ms", r->verify_merge_ms);
    cJSON *ex = cJSON_AddArrayToObject(j, "examples");
    for (unsigned i = 0; i < v->nexamples; i++)
        cJSON_AddItemToArray(ex, cJSON_CreateString(v->examples[i]));
    return j;
}

int report_json(FILE *f, const sl_report *r)
{
    const sl_opts *o = r->o;
    const sl_stats *st = r->st;
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return -1;
    cJSON_AddStringToObject(j, "sfload_version", SFLOAD_VERSION);
    cJSON_AddStringToObject(j, "mode", opts_mode_name(o->mode));
    cJSON_AddStringToObject(j, "target", o->target);
    if (o->mode == MODE_HTTP) {
        cJSON_AddStringToObject(j, "method", o->method);
        cJSON *p = cJSON_AddArrayToObject(j, "paths");
        for (unsigned i = 0; i < o->npaths; i++)
            cJSON_AddItemToArray(p, cJSON_CreateString(o->paths[i]));
    }
    cJSON_AddStringToObject(j, "connection_model",
                            o->close_mode     ? "close"
                            : o->pipeline > 1 ? "pipeline"
                                              : "keep-alive");
    num(j, "connections", o->connections);
    num(j, "threads", o->threads);
    num(j, "pipeline", o->close_mode ? 1 : o->pipeline);
    cJSON_AddBoolToObject(j, "open_loop", o->rate > 0);
    num(j, "rate", o->rate);
    num(j, "warmup_s", o->warmup_s);
    num(j, "duration_s", r->elapsed_s);
    num(j, "requests", (double)st->requests);
    num(j, "responses", (double)st->responses);
    num(j, "succeeded", (double)st->ok);
    num(j, "refused", (double)st->refused);
    num(j, "failed", (double)failed_requests(st));
    num(j, "requests_per_sec", per_s((double)st->requests, r->elapsed_s));
    num(j, "bytes_received", (double)st->bytes_in);
    num(j, "bytes_received_per_sec", per_s((double)st->bytes_in, r->elapsed_s));
    num(j, "bytes_sent", (double)st->bytes_out);
    num(j, "connects", (double)st->connects);
    cJSON *e = cJSON_AddObjectToObject(j, "errors");
    for (int i = 0; i < ERR_COUNT; i++)
        num(e, stats_err_name((sl_err)i), (double)st->errors[i]);
    cJSON_AddBoolToObject(j, "tolerate_faults", o->tolerate_faults);
    cJSON *fl = cJSON_AddObjectToObject(j, "faults");
    static const sl_err fault_kinds[] = {ERR_CONNECT, ERR_READ, ERR_WRITE, ERR_TIMEOUT};
    for (size_t i = 0; i < sizeof fault_kinds / sizeof fault_kinds[0]; i++)
        num(fl, stats_err_name(fault_kinds[i]), (double)st->faults[fault_kinds[i]]);
    num(j, "min_ids", (double)o->min_ids);
    cJSON *ta = cJSON_AddArrayToObject(j, "targets");
    for (unsigned i = 0; i < o->ntargets; i++) {
        const sl_tstats *t = &st->target[i];
        cJSON *tj = cJSON_CreateObject();
        cJSON_AddStringToObject(tj, "target", o->targets[i].target);
        num(tj, "requests", (double)t->requests);
        num(tj, "ok", (double)t->ok);
        num(tj, "status_503", (double)t->status_503);
        num(tj, "errors", (double)t->errors);
        num(tj, "faults", (double)t->faults);
        num(tj, "ids", (double)t->ids);
        cJSON_AddItemToArray(ta, tj);
    }
    cJSON_AddItemToObject(j, "latency_us", json_latency(&st->latency));
    cJSON_AddItemToObject(j, "histogram", json_histogram(&st->latency));
    if (o->mode == MODE_MEMCACHE) {
        cJSON *m = cJSON_AddObjectToObject(j, "memcache");
        num(m, "gets", (double)st->mc_gets);
        num(m, "hits", (double)st->mc_hits);
        num(m, "misses", (double)(st->mc_gets - st->mc_hits));
        num(m, "sets", (double)st->mc_sets);
    }
    if (r->ver)
        cJSON_AddItemToObject(j, "verify", json_verify(r));
    if (o->tls) {
        cJSON *t = cJSON_AddObjectToObject(j, "tls");
        cJSON_AddStringToObject(t, "version", st->tls_version);
        cJSON_AddStringToObject(t, "cipher", st->tls_cipher);
        cJSON_AddBoolToObject(t, "verified", !o->tls_insecure);
        cJSON_AddBoolToObject(t, "resume", o->tls_resume);
        num(t, "handshakes", (double)(st->tls_full + st->tls_resumed));
        num(t, "full", (double)st->tls_full);
        num(t, "resumed", (double)st->tls_resumed);
        num(t, "failures", (double)st->tls_failures);
        if (st->tls_error[0])
            cJSON_AddStringToObject(t, "first_failure", st->tls_error);
        else
            cJSON_AddNullToObject(t, "first_failure");
    }
    if (r->have_server) {
        cJSON *s = cJSON_AddObjectToObject(j, "server");
        num(s, "pid", o->server_pid);
        num(s, "cpu_us", r->server_cpu_us);
        num(s, "cpu_us_per_request", st->requests ? r->server_cpu_us / (double)st->requests : 0.0);
        if (o->tls) {
            uint64_t hs = st->tls_full + st->tls_resumed;
            num(s, "cpu_us_per_handshake", hs ? r->server_cpu_us / (double)hs : 0.0);
        }
        num(s, "cpu_percent", r->cpu_window_s > 0 ? r->server_cpu_us / (r->cpu_window_s * 1e4) : 0);
    }
    cJSON *c = cJSON_AddObjectToObject(j, "client");
    num(c, "cpu_us", r->client_cpu_us);
    num(c, "cpu_percent", r->cpu_window_s > 0 ? r->client_cpu_us / (r->cpu_window_s * 1e4) : 0);
    cJSON_AddBoolToObject(j, "passed", report_passed(r));
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text)
        return -1;
    fprintf(f, "%s\n", text);
    cJSON_free(text);
    return 0;
}

/* --- webbench 1.5 ----------------------------------------------------------------------------- */

void report_webbench_header(FILE *f, const sl_opts *o)
{
    fprintf(f, "\nBenchmarking: %s %s\n", o->method, o->target);
    if (o->connections == 1)
        fprintf(f, "1 client");
    else
        fprintf(f, "%u clients", o->connections);
    fprintf(f, ", running %d sec.\n", (int)o->duration_s);
    fflush(f);
}

void report_webbench(FILE *f, const sl_report *r)
{
    const sl_stats *st = r->st;
    double secs = r->elapsed_s > 0 ? r->elapsed_s : 1;
    uint64_t failed = st->requests - st->ok;
    /* webbench: pages/min counts failed requests too; bytes are those received. */
    fprintf(f, "\nSpeed=%d pages/min, %d bytes/sec.\nRequests: %d susceed, %d failed.\n",
            (int)((double)(st->ok + failed) / (secs / 60.0)), (int)((double)st->bytes_in / secs),
            (int)st->ok, (int)failed);
}

void report_verify_failure(FILE *f, const sl_report *r)
{
    const verifier *v = r->ver;
    if (!v || !verifier_failed(v))
        return;
    fprintf(f,
            "sfload: ID verification FAILED: %" PRIu64 " duplicate%s, %" PRIu64
            " not increasing, %" PRIu64 " malformed%s (of %" PRIu64 " IDs)\n",
            v->duplicates, v->duplicates == 1 ? "" : "s", v->non_increasing, v->malformed,
            v->oom ? ", out of memory" : "", v->ids);
    for (unsigned i = 0; i < v->nexamples; i++)
        fprintf(f, "sfload:   %s\n", v->examples[i]);
}
