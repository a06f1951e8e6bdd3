/* /healthz, /readyz, /metrics and the route table. */
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "snowflake/rng.h"
#include "llhttp.h"
#include "obs/prom.h"
#include "util/counter.h"
#include "util/version.h"

void api_healthz(http_request *r, void *ctx)
{
    (void)ctx;
    static const char body[] = "{\"status\":\"ok\"}";
    http_respond(r, 200, "application/json", NULL, body, sizeof body - 1);
}

const char *api_not_ready_reason(api_ctx *a)
{
    static _Thread_local char identity_why[160]; /* the reason the identity gives, per thread */
    if (!atomic_load(&a->listening))
        return "starting";
    if (net_server_draining(a->net))
        return "draining";
    if (atomic_load(&a->net->foreign_harmful)) /* app_housekeeping logged who */
        return "another process listens on our port and can take our connections (see the log)";
    const char *why = sf_identity_not_ready(a->identity, identity_why, sizeof identity_why);
    if (why) /* before the generators' own view: it says why their lease stopped */
        return why;
    /* Refusals that last: a clock behind the stored lease, a lease that cannot be renewed.
     * Overload (SF_EBUSY) clears within milliseconds and must not flap readiness. */
    for (unsigned i = 0; i < a->nall_gens; i++) {
        int rc = sf_gen_status(a->all_gens[i], NULL);
        if (rc == SF_ECLOCK)
            return "clock is behind the last issued ID (or the stored lease)";
        if (rc == SF_ELEASE)
            return "timestamp lease not written or not renewed";
        if (rc == SF_ESEALED)
            return "shutting down";
    }
    return NULL;
}

void api_readyz(http_request *r, void *ctx)
{
    const char *why = api_not_ready_reason(ctx);
    if (!why) {
        static const char body[] = "{\"status\":\"ready\"}";
        http_respond(r, 200, "application/json", NULL, body, sizeof body - 1);
        return;
    }
    char body[256];
    int n = snprintf(body, sizeof body, "{\"status\":\"not ready\",\"reason\":\"%s\"}", why);
    http_respond(r, 503, "application/json", "Retry-After: 1\r\n", body, (size_t)n);
}

/* ---- /metrics ------------------------------------------------------------------------------ */

static void metrics_http(prom_buf *b, const http_server *http)
{
    unsigned nroutes = http_server_route_count(http);
    http_route_metrics m[HTTP_MAX_ROUTES + 1];
    for (unsigned i = 0; i <= nroutes; i++)
        http_server_route_metrics(http, i, &m[i]);
    prom_family(b, "snowflaked_http_requests_total", "counter",
                "HTTP requests answered, by route and status.");
    char labels[160];
    for (unsigned i = 0; i <= nroutes; i++)
        for (int s = 0; s < HTTP_S_COUNT; s++)
            if (m[i].requests[s]) {
                snprintf(labels, sizeof labels, "route=\"%s\",status=\"%s\"",
                         http_server_route_name(http, i),
                         http_status_slot_label((http_status_slot)s));
                prom_u64(b, "snowflaked_http_requests_total", labels, m[i].requests[s]);
            }
    prom_family(b, "snowflaked_http_request_duration_seconds", "histogram",
                "Time from the first byte of a request to its response being queued.");
    for (unsigned i = 0; i <= nroutes; i++) {
        uint64_t cumulative = 0;
        const char *route = http_server_route_name(http, i);
        for (int k = 0; k <= HTTP_LATENCY_BUCKETS; k++) {
            cumulative += m[i].latency[k];
            if (k < HTTP_LATENCY_BUCKETS)
                snprintf(labels, sizeof labels, "route=\"%s\",le=\"%g\"", route,
                         http_latency_bounds[k]);
            else
                snprintf(labels, sizeof labels, "route=\"%s\",le=\"+Inf\"", route);
            prom_u64(b, "snowflaked_http_request_duration_seconds_bucket", labels, cumulative);
        }
        snprintf(labels, sizeof labels, "route=\"%s\"", route);
        prom_f64(b, "snowflaked_http_request_duration_seconds_sum", labels,
                 (double)m[i].latency_sum_ns / 1e9);
        prom_u64(b, "snowflaked_http_request_duration_seconds_count", labels, cumulative);
    }
}

#define NET_SUM(net, field) NET_SERVER_STAT(net, field)

static void counter(prom_buf *b, const char *name, const char *help, uint64_t v)
{
    prom_family(b, name, "counter", help);
    prom_u64(b, name, NULL, v);
}

static void gauge(prom_buf *b, const char *name, const char *help, uint64_t v)
{
    prom_family(b, name, "gauge", help);
    prom_u64(b, name, NULL, v);
}

static void metrics_net(prom_buf *b, const net_server *net)
{
    gauge(b, "snowflaked_connections_open", "Open client connections.", NET_SUM(net, open));
    counter(b, "snowflaked_connections_accepted_total", "Connections accepted.",
            NET_SUM(net, accepted));
    counter(b, "snowflaked_connections_rejected_total",
            "Connections closed at once because max_connections was reached.",
            NET_SUM(net, rejected_at_cap));
    prom_family(b, "snowflaked_connection_timeouts_total", "counter",
                "Connections closed by a timeout, by kind.");
    static const char *const kinds[3] = {"header", "idle", "write"};
    char labels[32];
    for (int k = 0; k < 3; k++) {
        uint64_t v = 0;
        for (unsigned i = 0; i < net->nloops; i++)
            v += net_stat(&net->loops[i].stats.timeouts[k]);
        snprintf(labels, sizeof labels, "kind=\"%s\"", kinds[k]);
        prom_u64(b, "snowflaked_connection_timeouts_total", labels, v);
    }
    counter(b, "snowflaked_output_limit_closes_total",
            "Connections closed because their unsent output passed the hard cap.",
            NET_SUM(net, output_cap_closes));
    counter(b, "snowflaked_accept_errors_total", "accept() failures.", NET_SUM(net, accept_errors));
    counter(b, "snowflaked_accept_pauses_total",
            "Times accepting paused because descriptors ran out.", NET_SUM(net, accept_pauses));
    counter(b, "snowflaked_out_of_memory_total", "Allocations that failed.",
            NET_SUM(net, out_of_memory));
    counter(b, "snowflaked_received_bytes_total", "Bytes read from clients.",
            NET_SUM(net, bytes_in));
    counter(b, "snowflaked_sent_bytes_total", "Bytes written to clients.", NET_SUM(net, bytes_out));
    gauge(b, "snowflaked_foreign_listeners",
          "Sockets of other processes listening on an address overlapping one of our listeners "
          "(checked every second).",
          atomic_load(&net->foreign_now));
    gauge(b, "snowflaked_foreign_listeners_harmful",
          "Of those, the ones that can take connections meant for us (/readyz fails meanwhile).",
          atomic_load(&net->foreign_harmful));
    counter(b, "snowflaked_foreign_listeners_detected_total",
            "Foreign listeners that appeared on our ports since start.",
            atomic_load(&net->foreign_appeared));
}

/* Connections retired by their listener's max age (server.max_connection_age_s,
 * cache.memcached_max_connection_age_s), by protocol, plaintext and TLS listeners together; a
 * row for each protocol that listens, 0 while its cap is off. */
static void metrics_age(prom_buf *b, const net_server *net)
{
    static const struct {
        const char *proto, *label;
    } kinds[] = {{"http", "http"}, {"memcache", "memcached"}};
    const net_loop *l0 = &net->loops[0];
    prom_family(b, "snowflaked_connection_age_closes_total", "counter",
                "Connections closed because they passed their listener's max connection age.");
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        bool listens = false;
        uint64_t v = 0;
        for (unsigned k = 0; k < l0->nlisteners; k++) {
            if (strcmp(l0->listeners[k].spec->proto->name, kinds[i].proto) != 0)
                continue;
            net_listener_stats sum;
            net_listener_stats_sum(&l0->listeners[k], &sum);
            v += counter_get(&sum.age_closes);
            listens = true;
        }
        if (!listens)
            continue;
        char labels[48];
        snprintf(labels, sizeof labels, "listener=\"%s\"", kinds[i].label);
        prom_u64(b, "snowflaked_connection_age_closes_total", labels, v);
    }
}

/* TLS listeners (net/tls.h): handshakes, failures by cause, the certificate's expiry, reloads.
 * Nothing when no listener speaks TLS. */
static void metrics_tls(prom_buf *b, const net_server *net)
{
    const net_loop *l0 = &net->loops[0];
    net_listener_stats sum[NET_MAX_LISTENERS];
    bool any = false;
    for (unsigned k = 0; k < l0->nlisteners; k++)
        if (l0->listeners[k].spec->tls) {
            net_listener_stats_sum(&l0->listeners[k], &sum[k]);
            any = true;
        }
    if (!any)
        return;
    char labels[96];
    prom_family(b, "snowflaked_tls_handshakes_total", "counter",
                "TLS handshakes completed, by listener and whether a session was resumed.");
    for (unsigned k = 0; k < l0->nlisteners; k++) {
        const net_tls *t = l0->listeners[k].spec->tls;
        for (int r = 0; t && r < 2; r++) {
            snprintf(labels, sizeof labels, "listener=\"%s\",resumed=\"%s\"", t->name,
                     r ? "true" : "false");
            prom_u64(b, "snowflaked_tls_handshakes_total", labels,
                     counter_get(&sum[k].tls_handshakes[r]));
        }
    }
    prom_family(b, "snowflaked_tls_handshake_failures_total", "counter",
                "TLS handshakes that failed (the connection closed), by listener and cause.");
    for (unsigned k = 0; k < l0->nlisteners; k++) {
        const net_tls *t = l0->listeners[k].spec->tls;
        for (int r = 0; t && r < NET_TLS_FAIL_COUNT; r++) {
            snprintf(labels, sizeof labels, "listener=\"%s\",reason=\"%s\"", t->name,
                     net_tls_fail_name((net_tls_fail)r));
            prom_u64(b, "snowflaked_tls_handshake_failures_total", labels,
                     counter_get(&sum[k].tls_failures[r]));
        }
    }
    prom_family(b, "snowflaked_tls_ktls_connections_total", "counter",
                "TLS connections whose records the kernel encrypts (direction send) or decrypts "
                "(receive) after the handshake: kernel TLS, with ktls \"auto\" where offered.");
    for (unsigned k = 0; k < l0->nlisteners; k++) {
        const net_tls *t = l0->listeners[k].spec->tls;
        for (int r = 0; t && r < 2; r++) {
            snprintf(labels, sizeof labels, "listener=\"%s\",direction=\"%s\"", t->name,
                     r ? "receive" : "send");
            prom_u64(b, "snowflaked_tls_ktls_connections_total", labels,
                     counter_get(&sum[k].tls_ktls[r]));
        }
    }
    prom_family(b, "snowflaked_tls_certificate_not_after_seconds", "gauge",
                "Unix time at which the certificate the listener serves expires.");
    for (unsigned k = 0; k < l0->nlisteners; k++) {
        const net_tls *t = l0->listeners[k].spec->tls;
        if (t) {
            snprintf(labels, sizeof labels, "listener=\"%s\"", t->name);
            prom_f64(b, "snowflaked_tls_certificate_not_after_seconds", labels,
                     (double)atomic_load(&t->not_after_s));
        }
    }
    prom_family(b, "snowflaked_tls_reloads_total", "counter",
                "Certificate reloads (SIGHUP, refresh_certs, files changed), by listener and "
                "result; a failed one leaves the "
                "previous certificate in service.");
    for (unsigned k = 0; k < l0->nlisteners; k++) {
        const net_tls *t = l0->listeners[k].spec->tls;
        if (t) {
            snprintf(labels, sizeof labels, "listener=\"%s\",result=\"ok\"", t->name);
            prom_u64(b, "snowflaked_tls_reloads_total", labels, atomic_load(&t->reloads));
            snprintf(labels, sizeof labels, "listener=\"%s\",result=\"failed\"", t->name);
            prom_u64(b, "snowflaked_tls_reloads_total", labels, atomic_load(&t->reload_failures));
        }
    }
    bool lists = false;
    for (unsigned k = 0; k < l0->nlisteners; k++)
        lists |= l0->listeners[k].spec->tls && l0->listeners[k].spec->tls->peers;
    if (!lists)
        return;
    prom_family(b, "snowflaked_tls_client_certificates_total", "counter",
                "TLS handshakes on a listener whose client certificates are credentials "
                "(auth.client_certificates), by result: listed, unlisted, none sent.");
    for (unsigned k = 0; k < l0->nlisteners; k++) {
        const net_tls *t = l0->listeners[k].spec->tls;
        for (int r = 0; t && t->peers && r < NET_TLS_PEER_COUNT; r++) {
            snprintf(labels, sizeof labels, "listener=\"%s\",result=\"%s\"", t->name,
                     net_tls_peer_name((net_tls_peer)r));
            prom_u64(b, "snowflaked_tls_client_certificates_total", labels,
                     counter_get(&sum[k].tls_peers[r]));
        }
    }
}

static void pool_lines(prom_buf *b, const char *name, const pool_stats *s)
{
    char labels[64];
    snprintf(labels, sizeof labels, "pool=\"%s\",state=\"in_use\"", name);
    prom_u64(b, "snowflaked_pool_objects", labels, s->in_use);
    snprintf(labels, sizeof labels, "pool=\"%s\",state=\"idle\"", name);
    prom_u64(b, "snowflaked_pool_objects", labels, s->idle);
}

/* The in-flight budget (server.max_inflight_bytes): what it holds now, its limit and the part of
 * it kept for small requests, and what it refused (HTTP 503 and memcached SERVER_ERROR out of
 * memory, together). */
static void metrics_inflight(prom_buf *b, const byte_budget *inflight)
{
    gauge(b, "snowflaked_inflight_bytes",
          "Bytes held for requests being received, as received: HTTP bodies and memcached values.",
          budget_held(inflight));
    gauge(b, "snowflaked_inflight_limit_bytes", "server.max_inflight_bytes.",
          budget_limit(inflight));
    gauge(b, "snowflaked_inflight_reserve_bytes",
          "Part of server.max_inflight_bytes only requests holding at most 64 KiB may use.",
          budget_reserve(inflight));
    counter(b, "snowflaked_inflight_refusals_total",
            "Requests refused because their body or value would pass server.max_inflight_bytes.",
            budget_refusals(inflight));
}

static void metrics_pools(prom_buf *b, const api_ctx *a)
{
    const net_server *net = a->net;
    pool_stats conns = {0}, chunks = {0}, inbufs = {0}, heads;
    for (unsigned i = 0; i < net->nloops; i++) {
        const net_loop *l = &net->loops[i];
        for (unsigned k = 0; k < l->nlisteners; k++)
            pool_stats_add(&l->listeners[k].conns, &conns);
        pool_stats_add(&l->chunks, &chunks);
        pool_stats_add(&l->inbufs, &inbufs);
    }
    http_server_pool_stats(a->http, &heads);
    prom_family(b, "snowflaked_pool_objects", "gauge",
                "Objects of the per-loop pools, in use or idle on free lists.");
    pool_lines(b, "connection", &conns);
    pool_lines(b, "output_chunk", &chunks);
    pool_lines(b, "input_buffer", &inbufs);
    pool_lines(b, "request_head", &heads);
    prom_family(b, "snowflaked_pool_mallocs_total", "counter",
                "malloc calls made by the pools; flat in steady state.");
    prom_u64(b, "snowflaked_pool_mallocs_total", "pool=\"connection\"", conns.mallocs);
    prom_u64(b, "snowflaked_pool_mallocs_total", "pool=\"output_chunk\"", chunks.mallocs);
    prom_u64(b, "snowflaked_pool_mallocs_total", "pool=\"input_buffer\"", inbufs.mallocs);
    prom_u64(b, "snowflaked_pool_mallocs_total", "pool=\"request_head\"", heads.mallocs);
}

/* The ID-space budget per format: when the timestamp field runs out and how many IDs per second
 * this process can issue at most (every generator of the format at its full sequence). An alert
 * on the remaining seconds gives years of warning (README, "ID-space budget"). */
static void metrics_id_space(prom_buf *b, const api_ctx *a)
{
    const sf_layout *layouts[3] = {&a->opt.layout, &a->gens128[0][0]->layout,
                                   &a->gens128[1][0]->layout};
    const char *names[3] = {"snowflake", api_format_name(SF_FORMAT_UUID7),
                            api_format_name(SF_FORMAT_ULID)};
    double now_s = (double)clk_now(clk_system()) / 1000.0, end_s[3];
    for (int f = 0; f < 3; f++)
        end_s[f] = (double)sf_layout_ms_of(layouts[f], layouts[f]->tick_max + 1) / 1000.0;
    char label[32];
    prom_family(b, "snowflaked_id_space_end_timestamp_seconds", "gauge",
                "Unix time at which the format's timestamp field runs out.");
    for (int f = 0; f < 3; f++) {
        snprintf(label, sizeof label, "format=\"%s\"", names[f]);
        prom_f64(b, "snowflaked_id_space_end_timestamp_seconds", label, end_s[f]);
    }
    prom_family(b, "snowflaked_id_space_remaining_seconds", "gauge",
                "Seconds until the format's timestamp field runs out.");
    for (int f = 0; f < 3; f++) {
        snprintf(label, sizeof label, "format=\"%s\"", names[f]);
        prom_f64(b, "snowflaked_id_space_remaining_seconds", label,
                 end_s[f] > now_s ? end_s[f] - now_s : 0.0);
    }
    prom_family(b, "snowflaked_id_capacity_per_second", "gauge",
                "IDs per second this process can issue at most, per format.");
    for (int f = 0; f < 3; f++) {
        snprintf(label, sizeof label, "format=\"%s\"", names[f]);
        const sf_gen *g = f == 0 ? a->gens[0] : a->gens128[f - 1][0];
        unsigned start_bits = (unsigned)__builtin_popcountll(g->random_start_mask);
        prom_f64(b, "snowflaked_id_capacity_per_second", label,
                 sf_gen_cap_per_second(layouts[f], start_bits) * (double)a->ngens);
    }
}

static void metrics_ids(prom_buf *b, const api_ctx *a)
{
    uint64_t issued = 0, issued128[2] = {0, 0}, typeids = 0, denied = 0;
    uint64_t granted[API_BY_COUNT] = {0};
    for (unsigned i = 0; i < perloop_count(&a->loops); i++) {
        const api_loop *l = perloop_at(&a->loops, i);
        issued += counter_get(&l->ids_issued);
        issued128[0] += counter_get(&l->ids128_issued[0]);
        issued128[1] += counter_get(&l->ids128_issued[1]);
        typeids += counter_get(&l->typeids_issued);
        denied += counter_get(&l->auth_failures);
        for (int c = 0; c < API_BY_COUNT; c++)
            granted[c] += counter_get(&l->auth_granted[c]);
    }
    uint64_t mc_ids[MC_ID_FORMATS] = {0}; /* reserved keys over the memcached protocol */
    if (a->mc)
        memcache_server_ids_issued(a->mc, mc_ids);
    issued += mc_ids[MC_ID_SNOWFLAKE];
    issued128[SF_FORMAT_UUID7] += mc_ids[MC_ID_UUID7];
    issued128[SF_FORMAT_ULID] += mc_ids[MC_ID_ULID];
    typeids += mc_ids[MC_ID_TYPEID]; /* sequence numbers are not IDs: snowflaked_seq_issued_total */
    sf_gen_stats total = {0};
    for (unsigned i = 0; i < a->nall_gens; i++) {
        sf_gen_stats s;
        sf_gen_stats_get(a->all_gens[i], &s);
        total.exhaustion_waits += s.exhaustion_waits;
        total.clock_behind_waits += s.clock_behind_waits;
        total.clock_behind_errors += s.clock_behind_errors;
        total.lease_errors += s.lease_errors;
        total.busy_errors += s.busy_errors;
    }
    counter(b, "snowflaked_ids_issued_total",
            "IDs handed out (single and batch), every format.",
            issued + issued128[0] + issued128[1] + typeids);
    prom_family(b, "snowflaked_ids_issued_by_format_total", "counter",
                "IDs handed out, by format (snowflake, uuid7, ulid, typeid).");
    prom_u64(b, "snowflaked_ids_issued_by_format_total", "format=\"snowflake\"", issued);
    for (int f = 0; f < 2; f++) {
        char label[32];
        snprintf(label, sizeof label, "format=\"%s\"", api_format_name((sf_id128_format)f));
        prom_u64(b, "snowflaked_ids_issued_by_format_total", label, issued128[f]);
    }
    prom_u64(b, "snowflaked_ids_issued_by_format_total", "format=\"typeid\"", typeids);
    counter(b, "snowflaked_random_failures_total",
            "UUIDv7/ULID requests refused because the kernel's random source failed.",
            sf_rng_failures());
    counter(b, "snowflaked_auth_failures_total",
            "Requests refused by the access check: 401 (missing or wrong bearer token) or 403 "
            "(no listed client certificate where only one can help).",
            denied);
    prom_family(b, "snowflaked_auth_granted_total", "counter",
                "Requests the access check let through, by the credential that did: token, "
                "certificate (auth.client_certificates), token_and_certificate.");
    for (int c = 0; c < API_BY_COUNT; c++) {
        char label[48];
        snprintf(label, sizeof label, "credential=\"%s\"", api_credential_name((api_credential)c));
        prom_u64(b, "snowflaked_auth_granted_total", label, granted[c]);
    }
    counter(b, "snowflaked_sequence_exhaustion_waits_total",
            "Waits for the next tick because a tick's sequence ran out.", total.exhaustion_waits);
    counter(b, "snowflaked_clock_behind_waits_total",
            "Waits because the clock was behind the last issued tick.", total.clock_behind_waits);
    counter(b, "snowflaked_clock_behind_refusals_total",
            "Requests refused because the clock was too far behind.", total.clock_behind_errors);
    counter(b, "snowflaked_lease_refusals_total",
            "Requests refused because no persisted lease covered the tick.", total.lease_errors);
    counter(b, "snowflaked_overload_refusals_total",
            "Requests refused because demand exceeded the layout's capacity.", total.busy_errors);
    if (a->keeper) {
        counter(b, "snowflaked_lease_writes_total", "Timestamp lease renewals written.",
                counter_get(&a->keeper->writes));
        counter(b, "snowflaked_lease_write_failures_total", "Timestamp lease renewals failed.",
                counter_get(&a->keeper->failures));
    }
    if (a->identity)
        sf_identity_metrics(a->identity, b);
    metrics_id_space(b, a);
    const api_options *o = &a->opt;
    const sf_layout *l = &o->layout;
    uint32_t dc_id = o->datacenter_id, worker_id = o->worker_id;
    if (a->identity) /* etcd decides them, maybe late, maybe anew */
        sf_identity_current(a->identity, &dc_id, &worker_id);
    prom_family(b, "snowflaked_info", "gauge", "Build and identity of this instance.");
    char labels[400];
    snprintf(labels, sizeof labels,
             "version=\"%s\",datacenter_id=\"%u\",worker_id=\"%u\",per_thread_worker_ids=\"%s\","
             "layout=\"%u/%u/%u/%u\",layout_name=\"%s\",id_bits=\"%u\",node_bits_low=\"%s\","
             "epoch_ms=\"%llu\",time_unit_ms=\"%u\",sync=\"%s\"",
             SF_VERSION, dc_id, worker_id,
             o->per_thread_worker_ids ? "true" : "false", l->timestamp_bits, l->datacenter_bits,
             l->worker_bits, l->sequence_bits, o->layout_name ? o->layout_name : "custom",
             (unsigned)l->id_bits, l->node_bits_low ? "true" : "false",
             (unsigned long long)l->epoch_ms, l->unit_ms, sf_sync_mode_name(o->sync));
    prom_u64(b, "snowflaked_info", labels, 1);
}

static void metrics_cache(prom_buf *b, cache_store *store)
{
    cache_stats st;
    cache_store_stats(store, &st);
    gauge(b, "snowflaked_cache_items", "Items in the cache.", st.curr_items);
    gauge(b, "snowflaked_cache_bytes", "Memory reserved by cache items.", st.mem_used);
    gauge(b, "snowflaked_cache_limit_bytes", "cache.max_memory_bytes.", st.mem_limit);
    prom_family(b, "snowflaked_cache_operations_total", "counter",
                "Cache operations by kind and outcome.");
#define CACHE_OP_LINE(name)                                                                        \
    prom_u64(b, "snowflaked_cache_operations_total", "op=\"" #name "\"", st.name);
    CACHE_OP_LINE(get_hits)
    CACHE_OP_LINE(get_misses)
    CACHE_OP_LINE(sets)
    CACHE_OP_LINE(cas_hits)
    CACHE_OP_LINE(cas_badval)
    CACHE_OP_LINE(cas_misses)
    CACHE_OP_LINE(delete_hits)
    CACHE_OP_LINE(delete_misses)
    CACHE_OP_LINE(incr_hits)
    CACHE_OP_LINE(incr_misses)
    CACHE_OP_LINE(decr_hits)
    CACHE_OP_LINE(decr_misses)
#undef CACHE_OP_LINE
    counter(b, "snowflaked_cache_evictions_total", "Items evicted to stay under the limit.",
            st.evictions);
    counter(b, "snowflaked_cache_expired_total", "Expired items reclaimed.",
            st.expired_lazy + st.expired_swept);
}

/* IDs over the memcached protocol (cache.memcached_id_keys): also in
 * snowflaked_ids_issued_by_format_total, which counts every protocol. */
static void metrics_memcached_ids(prom_buf *b, const memcache_server *mc)
{
    static const char *const names[MC_ID_FORMATS] = {"snowflake", "uuid7", "ulid", "sequence",
                                                     "typeid"};
    uint64_t n[MC_ID_FORMATS];
    memcache_server_ids_issued(mc, n);
    prom_family(b, "snowflaked_memcached_ids_issued_total", "counter",
                "IDs handed out for reserved keys over the memcached protocol, by format.");
    for (int f = 0; f < MC_ID_FORMATS; f++) {
        char label[32];
        snprintf(label, sizeof label, "format=\"%s\"", names[f]);
        prom_u64(b, "snowflaked_memcached_ids_issued_total", label, n[f]);
    }
}

/* memcached -Y (cache.memcached_auth_file); 0 without the file. */
static void metrics_memcached_auth(prom_buf *b, const memcache_server *mc)
{
    memcache_auth_stats st;
    memcache_server_auth_stats(mc, &st);
    prom_family(b, "snowflaked_memcached_auth_total", "counter",
                "memcached credentials checked against the auth file, by result.");
    prom_u64(b, "snowflaked_memcached_auth_total", "result=\"ok\"", st.checks - st.failures);
    prom_u64(b, "snowflaked_memcached_auth_total", "result=\"failure\"", st.failures);
    prom_family(b, "snowflaked_memcached_auth_reloads_total", "counter",
                "Reloads of the memcached auth file (SIGHUP), by result (failure: the old one "
                "stays).");
    prom_u64(b, "snowflaked_memcached_auth_reloads_total", "result=\"ok\"", st.reloads);
    prom_u64(b, "snowflaked_memcached_auth_reloads_total", "result=\"failure\"",
             st.reload_failures);
}

/* The memcached side of the request rate (HTTP's is snowflaked_http_requests_total): what
 * deploy/monitoring's instance:snowflaked_requests:rate1m adds up for the autoscaler. */
static void metrics_memcached_commands(prom_buf *b, const memcache_server *mc)
{
    counter(b, "snowflaked_memcached_commands_total",
            "memcached command lines answered (plain and TLS listeners), every command.",
            memcache_server_commands(mc));
}

static void metrics_persist(prom_buf *b, cache_persist *p)
{
    cache_persist_stats ps;
    cache_persist_get_stats(p, &ps);
    counter(b, "snowflaked_cache_snapshots_total", "Cache snapshots written.", ps.saves);
    counter(b, "snowflaked_cache_snapshot_failures_total",
            "Cache snapshots that could not be written (the previous file stays).", ps.failures);
    gauge(b, "snowflaked_cache_snapshot_last_success_seconds",
          "Unix time of the last snapshot written, 0 = none yet.", ps.last_ok_ms / 1000);
    gauge(b, "snowflaked_cache_snapshot_last_items", "Items in the last snapshot written.",
          ps.last_items);
    gauge(b, "snowflaked_cache_snapshot_last_bytes", "Size of the last snapshot written.",
          ps.last_bytes);
    prom_family(b, "snowflaked_cache_snapshot_last_duration_seconds", "gauge",
                "How long the last snapshot took to write.");
    prom_f64(b, "snowflaked_cache_snapshot_last_duration_seconds", NULL,
             (double)ps.last_duration_us / 1e6);
    gauge(b, "snowflaked_cache_snapshot_loaded_items", "Items restored from the snapshot at start.",
          ps.loaded_items);
}

void api_metrics(http_request *r, void *ctx)
{
    api_ctx *a = ctx;
    prom_buf b;
    size_t size;
    char *mem = http_scratch(r, &size);
    prom_init(&b, mem, size);
    gauge(&b, "snowflaked_ready", "1 when /readyz answers 200.", api_not_ready_reason(a) == NULL);
    gauge(&b, "snowflaked_draining", "1 while shutting down.", net_server_draining(a->net));
    metrics_ids(&b, a);
    metrics_http(&b, a->http);
    metrics_net(&b, a->net);
    metrics_age(&b, a->net);
    metrics_tls(&b, a->net);
    metrics_pools(&b, a);
    if (a->inflight)
        metrics_inflight(&b, a->inflight);
    if (a->cache)
        metrics_cache(&b, a->cache);
    if (a->mc) {
        metrics_memcached_auth(&b, a->mc);
        metrics_memcached_commands(&b, a->mc);
        metrics_memcached_ids(&b, a->mc);
    }
    if (a->persist)
        metrics_persist(&b, a->persist);
    if (a->seq)
        api_seq_metrics(&b, a);
    if (b.truncated) {
        http_respond_error(r, 500, "metrics output exceeds its buffer", NULL);
        return;
    }
    http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.p, b.len);
}

int api_register(http_server *http, api_ctx *a)
{
    const uint32_t get = HTTP_M(HTTP_GET);
    const http_auth read = HTTP_AUTH_READ;
    const http_route routes[] = {
        {.path = "/id", .methods = get, .auth = read, .handler = api_id, .ctx = a},
        {.path = "/ids", .methods = get, .auth = read, .handler = api_ids, .ctx = a},
        {.path = "/id/",
         .prefix = true,
         .methods = get,
         .auth = read,
         .handler = api_id_parse,
         .ctx = a},
        {.path = "/uuid", .methods = get, .auth = read, .handler = api_uuid, .ctx = a},
        {.path = "/uuids", .methods = get, .auth = read, .handler = api_uuid, .ctx = a},
        {.path = "/uuid/",
         .prefix = true,
         .methods = get,
         .auth = read,
         .handler = api_uuid_parse,
         .ctx = a},
        {.path = "/ulid", .methods = get, .auth = read, .handler = api_ulid, .ctx = a},
        {.path = "/ulids", .methods = get, .auth = read, .handler = api_ulid, .ctx = a},
        {.path = "/ulid/",
         .prefix = true,
         .methods = get,
         .auth = read,
         .handler = api_ulid_parse,
         .ctx = a},
        {.path = "/typeid", .methods = get, .auth = read, .handler = api_typeid, .ctx = a},
        {.path = "/typeids", .methods = get, .auth = read, .handler = api_typeid, .ctx = a},
        {.path = "/typeid/",
         .prefix = true,
         .methods = get,
         .auth = read,
         .handler = api_typeid_parse,
         .ctx = a},
        {.path = "/bounds", .methods = get, .auth = read, .handler = api_bounds, .ctx = a},
        {.path = "/healthz", .methods = get, .handler = api_healthz, .ctx = a},
        {.path = "/readyz", .methods = get, .handler = api_readyz, .ctx = a},
        {.path = "/metrics", .methods = get, .auth = read, .handler = api_metrics, .ctx = a},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (http_server_route(http, &routes[i]) != 0)
            return -1;
    if (a->cache) {
        const http_route cache = {.path = "/cache/",
                                  .prefix = true,
                                  .wants_body = true,
                                  .methods = get | HTTP_M(HTTP_PUT) | HTTP_M(HTTP_DELETE) |
                                             HTTP_M(HTTP_POST),
                                  .auth = HTTP_AUTH_BY_METHOD, /* GET, HEAD read */
                                  .handler = api_cache,
                                  .allow = api_cache_allow,
                                  .ctx = a};
        if (http_server_route(http, &cache) != 0)
            return -1;
    }
    if (a->opt.echo_http) {
        const http_route echo = {.path = "/echo",
                                 .wants_body = true,
                                 .methods = get | HTTP_M(HTTP_POST),
                                 .auth = read, /* a POST too: it changes nothing */
                                 .handler = api_echo,
                                 .ctx = a};
        if (http_server_route(http, &echo) != 0)
            return -1;
    }
    if (a->seq && api_seq_register(http, a) != 0)
        return -1;
    http_server_set_guard(http, api_auth, a);
    return 0;
}
