/* Process configuration: one typed struct, filled in layers and validated before anything starts.
 *
 * Layers, lowest first: the embedded default (config.json compiled into the binary), the file
 * given with -c/--config (optional; keys it omits keep their defaults), environment variables
 * SNOWFLAKED_<PATH> (the key path upper-cased, dots as underscores: snowflake.worker_id ->
 * SNOWFLAKED_SNOWFLAKE_WORKER_ID, data_dir -> SNOWFLAKED_DATA_DIR), then command-line flags.
 * Precedence therefore: flag > env > file > default.
 *
 * Every key is checked for type and range, unknown keys are errors, and cross-field rules
 * (a preset's fixed widths, layout bits sum to at most 63, ids fit their bits, ...) run on the
 * merged result. Errors are one line:
 * "<source>: <key path>: <reason>", where source is the file name, "environment NAME",
 * "flag --x" or, for cross-field rules, the highest layer that set one of the keys involved
 * (or "defaults").
 *
 * Called once from main before any thread starts; not thread-safe; no allocation survives.
 */
#ifndef SF_CONFIG_CONFIG_H
#define SF_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "snowflake/encoding.h"
#include "snowflake/generator.h"
#include "snowflake/layout.h"

#define CFG_HOST_MAX    256
#define CFG_PATH_MAX    1024
#define CFG_MAX_THREADS 256
#define CFG_MAX_SETS    64

typedef enum { CFG_LOG_DEBUG = 0, CFG_LOG_INFO, CFG_LOG_WARN, CFG_LOG_ERROR } cfg_log_level;
typedef enum { CFG_LOG_TEXT = 0, CFG_LOG_JSON } cfg_log_format;

typedef enum { CFG_VERIFY_NONE = 0, CFG_VERIFY_OPTIONAL, CFG_VERIFY_REQUIRED } cfg_tls_verify;

/* A listener's TLS twin (server.tls, cache.memcached_tls, echo.tcp_tls): its own port on the
 * plaintext listener's host, the same protocol over TLS. Files are read at start (and reloaded
 * on SIGHUP), not at load: a bad file is refused then, exit 2 all the same. */
typedef struct cfg_tls {
    uint32_t port; /* 0 = off; needs cert_file and key_file */
    char cert_file[CFG_PATH_MAX];
    char key_file[CFG_PATH_MAX];
    char client_ca_file[CFG_PATH_MAX];
    cfg_tls_verify verify_client; /* not none: needs client_ca_file */
    bool min_tls13;               /* min_version "1.3"; else "1.2" */
    char ciphersuites[256];       /* TLS 1.3; "" = OpenSSL's default */
    char cipher_list[512];        /* TLS 1.2; "" = net/tls.h's modern list */
    bool session_tickets;
    bool watch_files; /* reload when a file's directory changes (net/fswatch.h) */
    bool ktls;        /* "auto": kernel TLS where the kernel and OpenSSL offer it; else "off" */
} cfg_tls;

typedef struct cfg_server {
    char host[CFG_HOST_MAX]; /* listen address, numeric IPv4 or IPv6 */
    uint32_t port;           /* 1..65535 */
    uint32_t threads;        /* event loops; 0 in the file = online CPUs (resolved) */
    uint32_t backlog;
    uint32_t max_connections;
    uint32_t max_header_bytes;
    uint32_t max_url_bytes;
    uint32_t max_headers;
    uint32_t max_body_bytes;
    uint64_t max_inflight_bytes; /* HTTP bodies + memcached values being received, all loops */
    uint32_t max_requests_per_connection;
    uint32_t max_connection_age_s; /* HTTP listeners: retire connections past it; 0 = off */
    uint32_t max_pipeline; /* requests handled per read before yielding */
    uint32_t header_timeout_ms, idle_timeout_ms, write_timeout_ms, shutdown_grace_ms;
    bool tcp_nodelay, reuseport;
    uint32_t tcp_defer_accept_s;      /* TCP_DEFER_ACCEPT, 0 = off */
    uint32_t so_rcvbuf, so_sndbuf;    /* 0 = kernel default */
    uint32_t output_high_water_bytes; /* stop reading a connection above this much unsent */
    uint32_t output_limit_bytes;      /* close it above this */
    uint32_t linger_ms;               /* after the last response: drain the peer this long */
    uint32_t read_buffer_bytes;       /* per-loop read buffer */
    uint32_t pool_idle_max;           /* idle objects kept per pool per loop */
    cfg_tls tls;                      /* HTTPS on server.host */
} cfg_server;

typedef enum {
    CFG_WORKER_NUMBER = 0,
    CFG_WORKER_ORDINAL,
    CFG_WORKER_ENV,
    CFG_WORKER_ETCD, /* claimed at start from etcd (cluster/identity.h), within etcd.worker_* */
} cfg_worker_source;

#define CFG_ETCD_PREFIX_MAX 200
#define CFG_WORKER_MAX_AUTO UINT32_MAX /* "max": the layout's worker max */

/* snowflake.etcd: the etcd identity backend (worker_id "etcd"; design-14). */
typedef struct cfg_etcd {
    char endpoints[1024];                 /* "http://host:port,..." (numeric hosts best) */
    char prefix[CFG_ETCD_PREFIX_MAX + 1]; /* key prefix, "/snowflaked" */
    uint32_t ttl_s;                       /* lease TTL */
    uint32_t fence_margin_ms;             /* stop issuing this long before the lease can expire */
    uint32_t request_timeout_ms;          /* per etcd call */
    uint32_t start_timeout_ms;            /* no etcd answer by then at start: exit 1 */
    bool wait_for_slot;                   /* all slots held at start: wait instead of exit 1 */
    uint32_t worker_min, worker_max;      /* the worker ids to claim from; max resolved */
    struct {                              /* https:// endpoints (cluster/etcd_tls.h) */
        char ca_file[CFG_PATH_MAX];       /* required with https:// */
        char cert_file[CFG_PATH_MAX];     /* client certificate; "" = none */
        char key_file[CFG_PATH_MAX];
        char server_name[256];            /* "" = each endpoint's host */
        bool watch_files;
    } tls;
    char auth_username[129];              /* etcd RBAC user; "" = no authentication */
    char auth_password_file[1024];        /* its password: the file's first line (a Secret) */
} cfg_etcd;

typedef struct cfg_snowflake {
    /* "layout": NULL = "custom" (the width keys below), else a preset that fixes widths, unit
     * and order (a width key set to another value is an error) and defaults the epoch */
    const sf_layout_preset *layout_preset;
    uint64_t epoch_ms; /* "epoch": ISO-8601 UTC string or integer ms */
    uint32_t time_unit_ms;
    uint32_t timestamp_bits, datacenter_bits, worker_bits, sequence_bits;
    bool node_bits_low; /* Sonyflake order: time | sequence | node */
    uint32_t datacenter_id;
    cfg_worker_source worker_source; /* "worker_id": number | "ordinal" | "env:NAME" | "etcd" */
    char worker_env[128];            /* NAME for CFG_WORKER_ENV */
    uint32_t worker_id;              /* resolved */
    char worker_origin[256];         /* where the resolved id came from, for logs */
    char peers[1024];                /* "host:port,..." checked at start (cluster/peers.h) */
    uint32_t peer_timeout_ms;        /* per peer */
    sf_sync_mode sync;               /* "atomic" | "spinlock" | "mutex" */
    bool per_thread_worker_ids;      /* loop i uses worker_id + i */
    uint32_t max_backward_ms;
    uint32_t max_batch;
    uint32_t lease_ms;               /* lease window */
    sf_encoding default_encoding;    /* "dec" | "hex" | "base62" | "base32" */
    bool json_numbers;               /* "json_ids": "number" (needs <= 53 bits, dec) | "string" */
    uint32_t lifetime_warning_years; /* warn at start when the layout ends sooner */
    uint32_t random_sequence_start_bits; /* fresh ticks start their sequence below 2^bits */
    cfg_etcd etcd;                   /* worker_id "etcd" */
    sf_layout layout;                /* derived and validated */
    double lifetime_years_left;      /* derived: from the load time to the layout's end */
    char lifetime_warning[256];      /* derived: "" or the warning to log at start */
} cfg_snowflake;

typedef struct cfg_cache {
    bool enabled;
    uint64_t max_memory_bytes;
    uint32_t max_item_bytes;
    uint32_t shards; /* power of two: lock and LRU granularity */
    char memcached_host[CFG_HOST_MAX];
    uint32_t memcached_port; /* 0 = off */
    bool persist;            /* snapshot on shutdown (and periodically), load at start */
    char snapshot_path[CFG_PATH_MAX]; /* "" = <data_dir>/cache.snapshot */
    uint32_t snapshot_interval_s;     /* periodic snapshots while running; 0 = only at stop */
    bool evictions;                   /* false: full = refuse writes (memcached -M) */
    /* memcached's command-line switches for its listener (proto/memcache.h memcache_options) */
    bool memcached_shutdown;          /* -A: the "shutdown" command stops the daemon */
    bool memcached_flush_all;         /* false = -F: flush_all refused */
    bool memcached_cas;               /* false = -C: CAS values 0 */
    uint32_t memcached_reqs_per_event; /* -R */
    bool memcached_debug_commands;    /* memcached-debug's debugtime */
    bool memcached_watch;             /* false = -W: the watch command refused */
    bool memcached_key_listing;       /* false = -X: cachedump, metadump, stats detail refused */
    bool memcached_memlimit_command;  /* false: cache_memlimit refused (memcached has no flag) */
    uint32_t memcached_idle_timeout_s; /* -o idle_timeout; 0 = server.idle_timeout_ms applies */
    uint32_t memcached_max_connection_age_s; /* retire connections past it; 0 = off */
    bool memcached_lru_crawler;        /* false = -o no_lru_crawler: lru_crawler starts disabled */
    bool lru_segmented;                /* HOT/WARM/COLD per shard; false = one LRU (store.h) */
    uint32_t memcached_temporary_ttl_s; /* -o temporary_ttl: TTLs <= it never evicted; 0 = off */
    char memcached_auth_file[CFG_PATH_MAX]; /* -Y: "" = no authentication */
    cfg_tls memcached_tls;              /* memcached over TLS on memcached_host (memcached -Z) */
    struct { /* memcached-protocol keys whose get answers a new ID (katsubushi); "" = off */
        char snowflake[251], uuidv7[251], ulid[251]; /* a memcached key: at most 250 bytes */
        char sequence[251], typeid[251];              /* "K:<namespace>", "K:<type>" */
    } memcached_id_keys;
} cfg_cache;

typedef struct cfg_echo {
    bool http_enabled;
    char tcp_host[CFG_HOST_MAX];
    uint32_t tcp_port; /* 0 = off */
    cfg_tls tcp_tls;   /* the TCP echo over TLS on tcp_host */
} cfg_echo;

typedef struct cfg_log {
    cfg_log_level level;
    char file[CFG_PATH_MAX]; /* "" = stderr */
    bool access_log;
    cfg_log_format format; /* text lines or one JSON object per line */
} cfg_log;

/* A shorter bearer token is refused (auth.token at load, auth.token_file when read at start):
 * a few bytes can be guessed over the network, and a 1-byte token looked like protection. */
#define CFG_TOKEN_MIN 16

typedef struct cfg_auth {
    char token[256]; /* "" = no token, else CFG_TOKEN_MIN..255 bytes */
    char token_file[CFG_PATH_MAX];
    bool protect_reads; /* also require the token for reads and /id */
    /* Client certificates that stand for the token on server.tls (util/certname.h entries,
     * separated by '\n'; "" = none), and whether they stand for it or must come with it. */
    char client_certificates[8192];
    bool token_and_certificate; /* auth.credentials "token_and_certificate" */
} cfg_auth;

/* Segment mode (seq/seq.h, docs/sequences.md): the namespaces the configuration declares. */
#define CFG_SEQ_MAX      64    /* namespaces in sequences.namespaces (more come over the API) */
#define CFG_SEQ_JSON_MAX 16384 /* their JSON, as given */
typedef struct cfg_seq_ns {
    char name[65];
    uint64_t start, max; /* max 0 = none */
    uint64_t block, block_min, block_max;
    bool adaptive;
    char token[256]; /* "" = the route's usual access; else this namespace's bearer token */
} cfg_seq_ns;

typedef struct cfg_sequences {
    char namespaces[CFG_SEQ_JSON_MAX]; /* the JSON array (sequences.namespaces) */
    cfg_seq_ns ns[CFG_SEQ_MAX];        /* parsed from it */
    unsigned nns;
    uint32_t prefetch_percent;  /* the next block is fetched once this share of one is issued */
    uint32_t retry_ms;          /* after a failed block reserve */
    uint64_t adaptive_block_ms; /* adaptive namespaces: how long a block should last */
    uint32_t start_wait_ms;     /* start waits this long at most for the first blocks */
    uint32_t max_namespaces;    /* declared and created over the API together */
    uint32_t reserve_delay_ms;  /* test knob: every block reserve waits this long first */
    uint32_t burst_wait_ms;     /* a request finding both blocks empty waits this long at most */
    bool api_create;            /* PUT /seq/{name} with auth.token creates namespaces */
} cfg_sequences;

typedef struct cfg {
    char data_dir[CFG_PATH_MAX];
    cfg_server server;
    cfg_snowflake snowflake;
    cfg_cache cache;
    cfg_echo echo;
    cfg_log log;
    cfg_auth auth;
    cfg_sequences sequences;
    char source[CFG_PATH_MAX]; /* the file loaded, or "defaults" */
} cfg;

/* Command line, parsed but not yet applied. */
typedef struct cfg_cli {
    const char *config_path;                /* -c/--config, NULL = embedded defaults only */
    const char *port, *threads, *worker_id; /* -p, -t, --worker-id (raw text) */
    const char *sets[CFG_MAX_SETS];         /* --set PATH=VALUE, any scalar key */
    int nsets;
    bool check_config, print_schema, help, version, ignore_corrupt_lease;
} cfg_cli;

/* Parses argv. Returns 0, or -1 with a message in err (unknown flag, missing value). */
int cfg_parse_args(int argc, char **argv, cfg_cli *cli, char *err, size_t errlen);
void cfg_usage(FILE *out, const char *prog);

/* Builds the effective configuration from all layers (environment read with getenv), validates
 * it against now_ms (epoch, lifetime) and resolves the worker id. Returns 0, or -1 with one line
 * in err. Never exits, never crashes on bad input. */
int cfg_load(cfg *c, const cfg_cli *cli, uint64_t now_ms, char *err, size_t errlen);

/* The effective configuration as JSON (for --check-config), resolved values included. */
void cfg_print_json(const cfg *c, FILE *out);

/* Every key of the schema as JSON (for --print-schema and docs/configuration.md): path, type,
 * the embedded default, range or choices, environment variable and meaning. 0, or -1 (message on
 * stderr) if the embedded default does not load. */
int cfg_print_schema(FILE *out);

/* Whether a listener's numeric host (server.host, cache.memcached_host, echo.tcp_host) accepts
 * only this machine: 127.0.0.0/8, ::1 or ::ffff:127.x.y.z. Wildcards and every other address
 * are reachable from elsewhere. */
bool cfg_host_is_loopback(const char *host);

/* The embedded default, generated from config.json at build time. */
extern const char cfg_embedded_json[];
extern const size_t cfg_embedded_json_len;

#endif
