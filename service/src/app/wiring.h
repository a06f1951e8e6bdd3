/* Wiring: the parsed configuration (config/config.h) translated into each module's own config.
 *
 * The one place that knows both the configuration and the modules it configures, so that the
 * daemon and the in-process graphs of the harnesses (app/app.h) build their modules the same way:
 * a field added to a module's config is mapped here once. config/ itself depends on none of the
 * modules below.
 *
 * Contract: every function is pure (no I/O, no allocation, no global state) and fills the whole
 * of *out, overwriting it; fields that do not come from the configuration are zero (the module's
 * default) unless said otherwise. Pointers stored in *out point into *c and live as long as it.
 * Callers that deliberately differ (a fake clock, one loop, a tiny store) override fields after
 * the call, visibly.
 */
#ifndef SF_APP_WIRING_H
#define SF_APP_WIRING_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "cache/store.h"
#include "config/config.h"
#include "net/loop.h"
#include "obs/log.h"
#include "proto/http.h"
#include "proto/memcache.h"
#include "util/clock.h"
#include "snowflake/generator.h"

/* The generator of loop `index` (worker_id + index; index 0 unless per_thread_worker_ids) on
 * `clock` (NULL = the system clock). min_tick and lease_guarded stay 0/false: they come from the
 * lease file, not the configuration, and are the lease keeper's caller's to set. */
void app_gen_config(const cfg *c, uint32_t index, clk_source *clock, sf_gen_config *out);

/* Connection limits, timeouts, socket options and pools of the event loops (server.*). */
void app_net_config(const cfg *c, net_config *out);

/* HTTP parser limits (server.*) and the per-loop scratch, sized for snowflake.max_batch IDs. */
void app_http_limits(const cfg *c, http_limits *out);

/* The in-flight budget's fair shares (util/budget.h, server.max_inflight_bytes): a request holding
 * at most APP_INFLIGHT_FLOOR bytes may use the whole budget; beyond that, only what leaves the
 * reserve free: an eighth of the budget, less when the largest request (max_body_bytes,
 * cache.max_item_bytes) would not fit in the rest (0 when the budget is exactly that). */
#define APP_INFLIGHT_FLOOR (64 * 1024)
void app_inflight_share(const cfg *c, uint64_t *floor, uint64_t *reserve);

/* The cache store (cache.*); its shard lock follows snowflake.sync (mutex or spinlock); hash seed
 * 0 (random). */
void app_cache_config(const cfg *c, cache_store_config *out);
/* The memcached listener's switches (cache.memcached_*); shutdown stays NULL: the daemon sets it. */
void app_memcache_options(const cfg *c, memcache_options *out);

/* A listener's TLS (server.tls, cache.memcached_tls, echo.tcp_tls) as the net layer's context
 * description; alpn_http11 for the HTTP listener. */
void app_tls_config(const cfg_tls *t, bool alpn_http11, net_tls_config *out);

/* The logger (log.*): level, file ("" = stderr), access log; buffers and threads default. */
void app_log_options(const cfg *c, log_options *out);

/* The API's handler options (snowflake.*, echo.http_enabled, auth.protect_reads). token and
 * token_len stay NULL/0: the token may come from a file (auth.token_file), which is the caller's
 * to read. */
void app_api_options(const cfg *c, api_options *out);

/* The cache snapshot file: cache.snapshot_path, or <data_dir>/cache.snapshot when it is empty.
 * Truncated to cap - 1 bytes (cap > 0). */
void app_snapshot_path(const cfg *c, char *out, size_t cap);

/* Whether segment mode may be on (namespaces declared, or sequences.api_create; the file
 * source, or the etcd one with worker_id "etcd"): the table is built, /seq routes exist, the
 * HTTP scratch is sized for max_namespaces in /metrics. app.c also builds it when
 * data_dir/sequences holds namespaces created before (file source). */
bool app_sequences_possible(const cfg *c);

#endif
