/* Wiring: see wiring.h. Field by field, so that a field added to either side is seen here. */
#include "app/wiring.h"

#include <stdio.h>

#include "cache/snapshot.h"

void app_gen_config(const cfg *c, uint32_t index, clk_source *clock, sf_gen_config *out)
{
    const cfg_snowflake *s = &c->snowflake;
    *out = (sf_gen_config){.layout = s->layout,
                           .datacenter = s->datacenter_id,
                           .worker = s->worker_id + index,
                           .sync = s->sync,
                           .max_backward_ms = s->max_backward_ms,
                           .max_batch = s->max_batch,
                           .min_tick = 0,
                           .random_start_bits = (uint8_t)s->random_sequence_start_bits,
                           .lease_guarded = false,
                           .clock = clock};
}

void app_net_config(const cfg *c, net_config *out)
{
    const cfg_server *sv = &c->server;
    *out = (net_config){.max_connections = sv->max_connections,
                        .header_timeout_ms = sv->header_timeout_ms,
                        .idle_timeout_ms = sv->idle_timeout_ms,
                        .write_timeout_ms = sv->write_timeout_ms,
                        .drain_ms = sv->linger_ms,
                        .shutdown_grace_ms = sv->shutdown_grace_ms,
                        .out_high_water = sv->output_high_water_bytes,
                        .out_hard_cap = sv->output_limit_bytes,
                        .backlog = (int)sv->backlog,
                        .tcp_nodelay = sv->tcp_nodelay,
                        .reuseport = sv->reuseport,
                        .so_rcvbuf = (int)sv->so_rcvbuf,
                        .so_sndbuf = (int)sv->so_sndbuf,
                        .defer_accept_s = (int)sv->tcp_defer_accept_s,
                        .read_buffer = sv->read_buffer_bytes,
                        .pool_idle_max = sv->pool_idle_max};
}

void app_inflight_share(const cfg *c, uint64_t *floor, uint64_t *reserve)
{
    uint64_t limit = c->server.max_inflight_bytes;
    uint64_t largest = c->server.max_body_bytes;
    if (c->cache.enabled && c->cache.max_item_bytes > largest)
        largest = c->cache.max_item_bytes;
    *floor = APP_INFLIGHT_FLOOR;
    *reserve = largest >= limit ? 0 : limit / 8 < limit - largest ? limit / 8 : limit - largest;
}

void app_http_limits(const cfg *c, http_limits *out)
{
    const cfg_server *sv = &c->server;
    *out = (http_limits){.max_header_bytes = sv->max_header_bytes,
                         .max_url_bytes = sv->max_url_bytes,
                         .max_headers = sv->max_headers,
                         .max_body_bytes = sv->max_body_bytes,
                         .max_requests_per_connection = sv->max_requests_per_connection,
                         .max_pipeline = sv->max_pipeline,
                         /* with sequences, /metrics and /sequences write about 3 KiB per
                          * namespace there */
                         .scratch_bytes = api_ids_scratch_bytes(c->snowflake.max_batch) +
                                          (app_sequences_possible(c)
                                               ? (size_t)c->sequences.max_namespaces * 3072
                                               : 0),
                         .pool_idle_max = sv->pool_idle_max};
}

bool app_sequences_possible(const cfg *c)
{
    return c->sequences.nns > 0 || c->sequences.api_create;
}

void app_cache_config(const cfg *c, cache_store_config *out)
{
    const cfg_cache *cc = &c->cache;
    *out = (cache_store_config){.max_memory_bytes = cc->max_memory_bytes,
                                .max_item_bytes = cc->max_item_bytes,
                                .shards = cc->shards,
                                .lock = c->snowflake.sync == SF_SYNC_MUTEX ? CACHE_LOCK_MUTEX
                                                                           : CACHE_LOCK_SPIN,
                                .seed = 0,
                                .no_evictions = !cc->evictions,
                                .flat_lru = !cc->lru_segmented,
                                .temporary_ttl_s = cc->memcached_temporary_ttl_s};
}

void app_memcache_options(const cfg *c, memcache_options *out)
{
    const cfg_cache *cc = &c->cache;
    memcache_options_default(out);
    out->shutdown_enabled = cc->memcached_shutdown;
    out->flush_enabled = cc->memcached_flush_all;
    out->cas_enabled = cc->memcached_cas;
    out->debug_commands = cc->memcached_debug_commands;
    out->watch_enabled = cc->memcached_watch;
    out->dump_enabled = cc->memcached_key_listing;
    out->memlimit_enabled = cc->memcached_memlimit_command;
    out->reqs_per_event = cc->memcached_reqs_per_event;
    out->item_size_max = cc->max_item_bytes;
    out->idle_timeout_s = cc->memcached_idle_timeout_s;
    out->lru_crawler = cc->memcached_lru_crawler;
    /* "stats settings" ssl_* (the config outlives the server) */
    const cfg_tls *t = &cc->memcached_tls;
    out->tls_on = t->port != 0;
    if (out->tls_on) {
        out->tls_cert_file = t->cert_file;
        out->tls_key_file = t->key_file;
        out->tls_ca_file = t->client_ca_file[0] ? t->client_ca_file : NULL;
        out->tls_cipher_list = t->cipher_list[0] ? t->cipher_list : NULL;
        out->tls_verify_mode = t->verify_client == CFG_VERIFY_REQUIRED   ? 2
                               : t->verify_client == CFG_VERIFY_OPTIONAL ? 1
                                                                         : 0;
        out->tls_min13 = t->min_tls13;
        out->tls_resumption = t->session_tickets;
        out->tls_ktls = t->ktls;
    }
}

void app_tls_config(const cfg_tls *t, bool alpn_http11, net_tls_config *out)
{
    *out = (net_tls_config){.verify = t->verify_client == CFG_VERIFY_REQUIRED ? NET_TLS_VERIFY_REQUIRED
                                      : t->verify_client == CFG_VERIFY_OPTIONAL
                                          ? NET_TLS_VERIFY_OPTIONAL
                                          : NET_TLS_VERIFY_NONE,
                            .min_tls13 = t->min_tls13,
                            .session_tickets = t->session_tickets,
                            .ktls = t->ktls,
                            .alpn_http11 = alpn_http11};
    snprintf(out->cert_file, sizeof out->cert_file, "%s", t->cert_file);
    snprintf(out->key_file, sizeof out->key_file, "%s", t->key_file);
    snprintf(out->client_ca_file, sizeof out->client_ca_file, "%s", t->client_ca_file);
    snprintf(out->ciphersuites, sizeof out->ciphersuites, "%s", t->ciphersuites);
    snprintf(out->cipher_list, sizeof out->cipher_list, "%s", t->cipher_list);
}

void app_log_options(const cfg *c, log_options *out)
{
    *out =
        (log_options){.level = (log_level)(c->log.level + LOG_LEVEL_DEBUG),
                      .path = c->log.file,
                      .access_log = c->log.access_log,
                      .format = c->log.format == CFG_LOG_JSON ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT};
}

void app_api_options(const cfg *c, api_options *out)
{
    const cfg_snowflake *s = &c->snowflake;
    *out = (api_options){.layout = s->layout,
                         .layout_name = s->layout_preset ? s->layout_preset->name : "custom",
                         .default_encoding = s->default_encoding,
                         .json_numbers = s->json_numbers,
                         .max_batch = s->max_batch,
                         .datacenter_id = s->datacenter_id,
                         .worker_id = s->worker_id,
                         .per_thread_worker_ids = s->per_thread_worker_ids,
                         .sync = s->sync,
                         .echo_http = c->echo.http_enabled,
                         .protect_reads = c->auth.protect_reads,
                         .token = NULL,
                         .token_len = 0,
                         .client_certificates = c->auth.client_certificates[0] != '\0',
                         .token_and_certificate = c->auth.token_and_certificate,
                         .seq_api_create = c->sequences.api_create};
}

void app_snapshot_path(const cfg *c, char *out, size_t cap)
{
    if (c->cache.snapshot_path[0])
        snprintf(out, cap, "%s", c->cache.snapshot_path);
    else
        snprintf(out, cap, "%s/" CACHE_SNAPSHOT_FILE, c->data_dir);
}
