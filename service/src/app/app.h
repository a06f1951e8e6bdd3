/* The application object: builds, starts and stops every subsystem of snowflaked, in order.
 *
 * app_start brings the daemon up, in this order: logger, data directory lock, identity (the
 * static backend, cluster/identity.h: the configured slots and the lease floor), peer check,
 * the host-wide claim on the static identity (cluster/hostclaim.h: one process per identity on
 * this host; etcd arbitrates its own slots), generators and lease keeper (the first renewal is on
 * disk before any ID can be issued; the floor also past a previous holder of the identity on this
 * host), event loops, HTTP server, cache store (and memcached server), bearer token and API
 * routes, cache persistence (the snapshot loaded), a wait until the clock reaches that floor
 * (milliseconds; app.c), the HTTP, memcached and echo listeners (each port ours alone:
 * net/loop.h), then the loop threads. app_stop drains and joins the loops, writes the final
 * snapshot and the exact final lease, stops the logger and frees everything.
 *
 * app_build makes the same object graph in process, for the fuzz harnesses and unit tests that
 * drive it through net/conn_fake.h: generators, HTTP server with the API routes, store and
 * memcached server, on the caller's net server — without logger set-up, data directory, lease
 * file, persistence, peers, sockets or threads. app_free releases it.
 *
 * Threads: the main thread (or the harness's), before the loops start and after they stop.
 * Failure: app_start returns an exit code (1 at run time, 2 for a configuration the modules
 * refuse) with the message in err, and leaves what it built to the exit that follows (app.c says
 * why); app_build returns -1 with the message in err, having released everything.
 */
#ifndef SF_APP_APP_H
#define SF_APP_APP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "cache/persist.h"
#include "cache/store.h"
#include "cluster/hostclaim.h"
#include "cluster/identity.h"
#include "config/config.h"
#include "net/fswatch.h"
#include "net/loop.h"
#include "proto/http.h"
#include "proto/memcache.h"
#include "seq/seq.h"
#include "seq/source_file.h"
#include "util/clock.h"
#include "snowflake/generator.h"
#include "snowflake/lease.h"
#include "util/budget.h"
#include "util/certname.h"
#include "util/perloop.h"

/* The listeners that may speak TLS: app.tls[] in this order. */
enum { APP_TLS_HTTP, APP_TLS_MEMCACHED, APP_TLS_ECHO, APP_TLS_LISTENERS };

/* app_build: what an in-process graph differs in. */
typedef struct app_options {
    net_server *net;     /* the caller's (conn_fake_net_server): never started, outlives the app */
    clk_source *clock;     /* the generators' clock; NULL = the system clock */
    uint64_t cache_seed; /* the store's hash seed; 0 = random (fixed: reproducible runs) */
} app_options;

/* The fields above `private` may be read once built (a harness hands http or mc to its fake
 * connections as their listener's ctx); none may be written. */
typedef struct app {
    const cfg *config;
    net_server *net;
    http_server *http;
    cache_store *cache;  /* NULL when cache.enabled is false */
    memcache_server *mc; /* with the cache; the daemon's only with cache.memcached_port */
    api_ctx api;
    /* private */
    bool daemon;
    perloop gens;             /* sf_gen: per format, one or one per loop (per_thread_worker_ids) */
    sf_gen **gen_ptrs;        /* to each, once initialised: Snowflake's, then UUIDv7's, ULID's */
    unsigned gens_per_format; /* 1, or the loops */
    cache_persist *persist;
    sf_identity identity; /* the daemon's: where its slots and its floor E come from */
    hostclaim claims;     /* the daemon's static identity, claimed on this host */
    _Atomic bool identity_lost; /* the slots were lost while running: exit APP_EXIT_LOST */
    _Atomic uint64_t *loop_ticks; /* per loop, bumped by its housekeeping tick (quiescence) */
    sf_lease_keeper keeper;
    uint64_t issue_from_ms; /* start waits for it: the successor floor, when above the lease's */
    char lease_path[CFG_PATH_MAX + 32];
    char token[256];
    byte_budget inflight; /* server.max_inflight_bytes: HTTP bodies and memcached values */
    net_tls tls[APP_TLS_LISTENERS]; /* server.tls, cache.memcached_tls, echo.tcp_tls */
    bool tls_on[APP_TLS_LISTENERS];  /* built (and listening, once app_start returned) */
    uint64_t tls_fail_seen[APP_TLS_LISTENERS][NET_TLS_FAIL_COUNT]; /* logged up to this count */
    uint64_t tls_fail_logged_ms[APP_TLS_LISTENERS][NET_TLS_FAIL_COUNT];
    net_fswatch *tls_watch; /* the TLS files' directories (tls.watch_files); NULL: none */
    struct etcd_tls *etcd_tls;   /* https:// etcd endpoints (snowflake.etcd.tls); NULL: none */
    net_fswatch *etcd_tls_watch; /* its files' directories (snowflake.etcd.tls.watch_files) */
    certname_list http_peers; /* auth.client_certificates, server.tls's access list (net_tls.peers) */
    uint64_t peer_unlisted_seen, peer_unlisted_logged_ms; /* their refusals, logged once a minute */
    net_server own_net;   /* the daemon's */
    seq_table *seq;            /* segment mode's namespaces, or NULL (none declared or created) */
    seq_file_source *seq_file; /* their block source on a single node */
    struct seq_etcd_source *seq_etcd; /* theirs on a fleet (worker_id "etcd") */
} app;

/* The daemon, from a loaded configuration: everything up and listening, "listening on" logged.
 * Signals must already be blocked in the calling thread (the threads started inherit the mask).
 * Returns 0, or an exit code with the message in err. */
int app_start(app *a, const cfg *c, const cfg_cli *cli, char *err, size_t errlen);
/* Once a second on the main thread between app_start and app_stop (off the request path): looks
 * for foreign listeners on our ports (logged once per appearance, counted, /readyz 503 while one
 * can take our connections), drains the connections refused processes made to the identity
 * claims to learn our pid, and logs failed TLS handshakes (at most once a minute per listener
 * and cause). */
void app_housekeeping(app *a);
/* On SIGHUP, as memcached: reads cache.memcached_auth_file again (memcache.h
 * memcache_server_reload_auth), logged; a file that cannot be used leaves the old one in use.
 * Nothing without the file. Main thread, between app_start and app_stop. */
void app_reload_memcached_auth(app *a);
/* SIGHUP, main thread: every TLS listener's certificate, key and CAs read again; new connections
 * get the new ones, open ones keep theirs. A pair that does not load is refused with a log line
 * and counted (snowflaked_tls_reloads_total{result="failed"}); the old one stays in service. */
void app_reload_tls(app *a);
/* app_start's result when SIGTERM/SIGINT came while it waited for a slot: exit 0, nothing ran. */
#define APP_STOPPED_AT_START (-1)
/* app_stop's result after the identity's slots were lost (the etcd lease expired): EX_TEMPFAIL,
 * so a supervisor restarts the process, which claims afresh. */
#define APP_EXIT_LOST 75
/* After app_start: drains (up to server.shutdown_grace_ms), joins the loops, writes the final
 * snapshot and lease, logs "stopped", shuts the logger down and frees everything. Returns the
 * exit code: 0, 1 when a final snapshot or lease could not be written, APP_EXIT_LOST. */
int app_stop(app *a);

/* The in-process graph on o->net (c->server.threads is ignored: one generator per loop of o->net
 * with per_thread_worker_ids). Ready at once (/readyz answers 200). Returns 0, or -1 with err. */
int app_build(app *a, const cfg *c, const app_options *o, char *err, size_t errlen);
/* Releases what app_build made; every connection of o->net must have been freed. */
void app_free(app *a);

#endif
