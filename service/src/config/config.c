/* Configuration loading: one schema table (cfg_keys) drives every layer.
 *
 * The embedded config.json, the -c file, SNOWFLAKED_* environment variables, --set and the
 * dedicated flags all end up in cfg_set_text(), which parses one textual value for one key of the
 * table. JSON values are type-checked first (a port must be a JSON number, not "8080") and then
 * rendered to text, so every range rule and every error message exists exactly once. Printing
 * (--check-config) walks the same table, so a key added to the table is automatically read from
 * JSON, from SNOWFLAKED_<PATH>, from --set, and printed.
 *
 * After the layers, cross-field rules run on the merged result (layout via sf_layout_init, ids
 * fit their bits, listener ports distinct, ...). Their errors name the highest layer that set one
 * of the keys involved, since that is where the user has to look.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getopt_long, gethostname, strcasecmp; the build defines it too */
#endif

#include "config/config.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "seq/seq.h"
#include "snowflake/typeid.h"
#include "util/certname.h"
#include "util/decimal.h"
#include "util/rfc3339.h"
#include "util/version.h"

#define CFG_KIB          UINT64_C(1024)
#define CFG_MIB          (CFG_KIB * 1024)
#define CFG_GIB          (CFG_MIB * 1024)
#define CFG_TIB          (CFG_GIB * 1024)
#define CFG_DAY_MS       UINT64_C(86400000)
#define CFG_EPOCH_MAX_MS UINT64_C(253402300799999) /* 9999-12-31T23:59:59.999Z */
#define CFG_U53          UINT64_C(9007199254740992) /* 2^53: JSON numbers stay exact below */
#define CFG_FILE_MAX     (1024 * 1024)             /* a config file larger than this is a mistake */
#define CFG_SHOW_MAX     72                        /* echoed user values are cut to this */
#define CFG_HIDDEN       "***" /* how --check-config prints a secret; loads as "given elsewhere" */
#define CFG_ENV_PREFIX   "SNOWFLAKED_"

/* ---- schema ---------------------------------------------------------------------------------- */

typedef enum {
    CFG_T_U32,    /* uint32_t in min..max */
    CFG_T_U64,    /* uint64_t in min..max; every max is <= 2^53 so JSON doubles stay exact */
    CFG_T_BOOL,   /* bool */
    CFG_T_STR,    /* char[max + 1]; min is the minimum length (1 = non-empty) */
    CFG_T_ENUM,   /* a name, through parse/name */
    CFG_T_EPOCH,  /* snowflake.epoch_ms: integer ms since 1970 or "YYYY-MM-DDTHH:MM:SS[.mmm]Z" */
    CFG_T_WORKER, /* snowflake.worker_id: integer | "ordinal" | "env:NAME" | "etcd" */
    CFG_T_U32_OR_MAX, /* uint32_t in min..max, or "max" (stored as CFG_WORKER_MAX_AUTO) */
    CFG_T_LIST, /* a JSON array of strings, stored joined by '\n' in char[max + 1] (entries of
                 * util/certname.h: the one list key); as text (--set, environment) the array's
                 * JSON, or one entry */
    CFG_T_SEQS, /* sequences.namespaces: a JSON array of objects, stored as given in char[max + 1]
                 * and parsed into cfg_sequences.ns; as text the array's JSON */
} cfg_type;

enum {
    CFG_F_IPADDR = 1, /* string must be a numeric IPv4 or IPv6 address */
    CFG_F_SECRET = 2, /* never printed in clear */
};

typedef struct cfg_key {
    const char *path; /* "section.name" or "name"; a section's keys must be contiguous */
    cfg_type type;
    size_t off; /* into cfg */
    uint64_t min, max;
    unsigned flags;
    int (*parse)(const char *name, void *field); /* CFG_T_ENUM */
    const char *(*name)(const void *field);      /* CFG_T_ENUM */
    const char *choices;                         /* CFG_T_ENUM, for messages */
    const char *doc; /* one line of meaning, with the rules the range does not show */
} cfg_key;

static int cfg_sync_parse(const char *s, void *field)
{
    return sf_sync_mode_parse(s, (sf_sync_mode *)field);
}
static const char *cfg_sync_name(const void *field)
{
    return sf_sync_mode_name(*(const sf_sync_mode *)field);
}
static int cfg_enc_parse(const char *s, void *field)
{
    return sf_enc_parse_name(s, strlen(s), (sf_encoding *)field);
}
static const char *cfg_enc_name(const void *field)
{
    return sf_enc_name(*(const sf_encoding *)field);
}
static int cfg_layout_parse(const char *s, void *field)
{
    const sf_layout_preset *p = sf_layout_preset_find(s);
    if (!p && strcmp(s, "custom") != 0)
        return -1;
    *(const sf_layout_preset **)field = p;
    return 0;
}
static const char *cfg_layout_name(const void *field)
{
    const sf_layout_preset *p = *(const sf_layout_preset *const *)field;
    return p ? p->name : "custom";
}
static int cfg_json_ids_parse(const char *s, void *field)
{
    if (strcmp(s, "number") != 0 && strcmp(s, "string") != 0)
        return -1;
    *(bool *)field = s[0] == 'n';
    return 0;
}
static const char *cfg_json_ids_name(const void *field)
{
    return *(const bool *)field ? "number" : "string";
}
static const char *cfg_log_level_name(cfg_log_level l)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    return (unsigned)l < sizeof names / sizeof names[0] ? names[l] : "?";
}
static int cfg_log_parse(const char *s, void *field)
{
    for (cfg_log_level l = CFG_LOG_DEBUG; l <= CFG_LOG_ERROR; l++)
        if (strcmp(s, cfg_log_level_name(l)) == 0) {
            *(cfg_log_level *)field = l;
            return 0;
        }
    return -1;
}
static const char *cfg_log_name(const void *field)
{
    return cfg_log_level_name(*(const cfg_log_level *)field);
}
static int cfg_log_format_parse(const char *s, void *field)
{
    if (strcmp(s, "text") != 0 && strcmp(s, "json") != 0)
        return -1;
    *(cfg_log_format *)field = s[0] == 'j' ? CFG_LOG_JSON : CFG_LOG_TEXT;
    return 0;
}
static const char *cfg_log_format_name(const void *field)
{
    return *(const cfg_log_format *)field == CFG_LOG_JSON ? "json" : "text";
}

static int cfg_credentials_parse(const char *s, void *field)
{
    if (strcmp(s, "token_or_certificate") != 0 && strcmp(s, "token_and_certificate") != 0)
        return -1;
    *(bool *)field = s[6] == 'a';
    return 0;
}
static const char *cfg_credentials_name(const void *field)
{
    return *(const bool *)field ? "token_and_certificate" : "token_or_certificate";
}

static int cfg_verify_parse(const char *s, void *field)
{
    static const char *const names[] = {"none", "optional", "required"};
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            *(cfg_tls_verify *)field = (cfg_tls_verify)i;
            return 0;
        }
    return -1;
}
static const char *cfg_verify_name(const void *field)
{
    cfg_tls_verify v = *(const cfg_tls_verify *)field;
    return v == CFG_VERIFY_REQUIRED ? "required" : v == CFG_VERIFY_OPTIONAL ? "optional" : "none";
}
static int cfg_tls_version_parse(const char *s, void *field)
{
    if (strcmp(s, "1.2") != 0 && strcmp(s, "1.3") != 0)
        return -1;
    *(bool *)field = s[2] == '3';
    return 0;
}
static const char *cfg_tls_version_name(const void *field)
{
    return *(const bool *)field ? "1.3" : "1.2";
}
static int cfg_ktls_parse(const char *s, void *field)
{
    if (strcmp(s, "off") != 0 && strcmp(s, "auto") != 0)
        return -1;
    *(bool *)field = s[0] == 'a';
    return 0;
}
static const char *cfg_ktls_name(const void *field)
{
    return *(const bool *)field ? "auto" : "off";
}

/* offsetof(cfg, f), plus a compile-time check that the field has the size the row's type needs:
 * a row pointing a U32 at a bool does not compile (negative array size). */
#define CFG_AT(f, size)                                                                            \
    (offsetof(cfg, f) + 0 * sizeof(char[sizeof(((cfg *)0)->f) == (size) ? 1 : -1]))
#define CFG_FSIZE(f) sizeof(((cfg *)0)->f)

#define K_U32(p, f, lo, hi, doc)                                                                   \
    {                                                                                              \
        p, CFG_T_U32, CFG_AT(f, 4), lo, hi, 0, NULL, NULL, NULL, doc                               \
    }
#define K_U64(p, f, lo, hi, doc)                                                                   \
    {                                                                                              \
        p, CFG_T_U64, CFG_AT(f, 8), lo, hi, 0, NULL, NULL, NULL, doc                               \
    }
#define K_U32_OR_MAX(p, f, lo, hi, doc)                                                            \
    {                                                                                              \
        p, CFG_T_U32_OR_MAX, CFG_AT(f, 4), lo, hi, 0, NULL, NULL, NULL, doc                        \
    }
#define K_BOOL(p, f, doc)                                                                          \
    {                                                                                              \
        p, CFG_T_BOOL, CFG_AT(f, sizeof(bool)), 0, 1, 0, NULL, NULL, NULL, doc                     \
    }
#define K_STR(p, f, minlen, fl, doc)                                                               \
    {                                                                                              \
        p, CFG_T_STR, offsetof(cfg, f), minlen, CFG_FSIZE(f) - 1, fl, NULL, NULL, NULL, doc        \
    }
#define K_LIST(p, f, doc)                                                                          \
    {                                                                                              \
        p, CFG_T_LIST, offsetof(cfg, f), 0, CFG_FSIZE(f) - 1, 0, NULL, NULL, NULL, doc             \
    }
#define K_SEQS(p, f, doc)                                                                          \
    {                                                                                              \
        p, CFG_T_SEQS, offsetof(cfg, f), 0, CFG_FSIZE(f) - 1, 0, NULL, NULL, NULL, doc             \
    }
#define K_ENUM(p, f, pa, na, ch, doc)                                                              \
    {                                                                                              \
        p, CFG_T_ENUM, offsetof(cfg, f), 0, 0, 0, pa, na, ch, doc                                  \
    }

/* The rows of one listener's `tls` object (cfg_tls): section path p, field f. */
#define K_TLS(p, f, port_doc)                                                                      \
    K_U32(p ".port", f.port, 0, 65535, port_doc),                                                  \
        K_STR(p ".cert_file", f.cert_file, 0, 0,                                                   \
              "PEM certificate chain, leaf first; read at start (unreadable or unparsable: exit "  \
              "2) and again on `SIGHUP` (a bad one is then refused and the old stays)"),           \
        K_STR(p ".key_file", f.key_file, 0, 0,                                                     \
              "PEM private key of `cert_file`'s certificate; one that does not match: exit 2"),    \
        K_STR(p ".client_ca_file", f.client_ca_file, 0, 0,                                         \
              "PEM CA certificates a client certificate must chain to (mutual TLS); their names "  \
              "are sent to clients as the acceptable CAs"),                                        \
        K_ENUM(p ".verify_client", f.verify_client, cfg_verify_parse, cfg_verify_name,             \
               "none|optional|required",                                                           \
               "`none`: no client certificate asked for; `optional`: asked for, one sent must "    \
               "verify; `required`: none or a bad one fails the handshake; not `none` needs "      \
               "`client_ca_file`"),                                                                \
        K_ENUM(p ".min_version", f.min_tls13, cfg_tls_version_parse, cfg_tls_version_name,         \
               "1.2|1.3", "the oldest TLS version accepted"),                                     \
        K_STR(p ".ciphersuites", f.ciphersuites, 0, 0,                                             \
              "TLS 1.3 suites, OpenSSL syntax; `\"\"` = OpenSSL's default "                        \
              "(AES-256-GCM, ChaCha20-Poly1305, AES-128-GCM)"),                                    \
        K_STR(p ".cipher_list", f.cipher_list, 0, 0,                                               \
              "TLS 1.2 ciphers, OpenSSL syntax; `\"\"` = ECDHE with AES-GCM or ChaCha20-Poly1305 " \
              "only"),                                                                             \
        K_BOOL(p ".session_tickets", f.session_tickets,                                            \
               "resumption with stateless tickets (their keys survive a `SIGHUP` reload); "        \
               "`false`: a full handshake for every connection"),                               \
        K_BOOL(p ".watch_files", f.watch_files,                                                    \
               "reload the certificate when the directory of `cert_file`, `key_file` or "          \
               "`client_ca_file` changes (files replaced, a Kubernetes Secret's `..data` swap), "  \
               "500 ms after the last change; `false`: only on `SIGHUP` or `refresh_certs`"),     \
        K_ENUM(p ".ktls", f.ktls, cfg_ktls_parse, cfg_ktls_name, "off|auto",                       \
               "kernel TLS: `auto` hands a connection's record encryption to the kernel after "    \
               "the handshake where the kernel has the `tls` module (CONFIG_TLS) and the cipher "  \
               "allows it (send; receive on TLS 1.2), else userspace TLS as with `off`; "          \
               "unmeasured here, see docs/tls.md")

/* Every key, in config.json order, with its meaning: docs/configuration.md is generated from this
 * table (snowflaked --print-schema, make docs) and ctest docs_config fails when they differ. Bounds
 * are deliberately generous but finite: a value outside them is a typo or a unit mistake (ms vs
 * s), not a tuning choice. Cross-field rules (cfg_check_*) are named in the meanings. */
static const cfg_key cfg_keys[] = {
    K_STR("data_dir", data_dir, 1, 0,
          "created if missing (like `mkdir -p`); holds the lease file, the pid lock and the cache "
          "snapshot. One daemon per data_dir (an exclusive lock refuses a second)"),
    K_STR("server.host", server.host, 1, CFG_F_IPADDR,
          "HTTP listen address; host names are not resolved"),
    K_U32("server.port", server.port, 1, 65535, "HTTP port"),
    K_U32("server.threads", server.threads, 0, CFG_MAX_THREADS,
          "event loops; 0 = one per online CPU"),
    K_U32("server.backlog", server.backlog, 1, 65535, "listen backlog"),
    K_U32("server.max_connections", server.max_connections, 1, 1000000,
          "global connection cap; at the cap new connections are closed at once and counted"),
    K_U32("server.max_header_bytes", server.max_header_bytes, 1024, CFG_MIB,
          "request line + headers limit → 431"),
    K_U32("server.max_url_bytes", server.max_url_bytes, 1, CFG_MIB,
          "request target limit → 414; at most `server.max_header_bytes`"),
    K_U32("server.max_headers", server.max_headers, 1, 1024, "header count limit → 431"),
    K_U32("server.max_body_bytes", server.max_body_bytes, 1, CFG_GIB, "request body limit → 413"),
    K_U64(
        "server.max_inflight_bytes", server.max_inflight_bytes, 65536, CFG_TIB,
        "Bytes held for requests still being received, HTTP bodies being buffered and memcached "
        "values together, across all loops, counted as they arrive (an announced length holds "
        "nothing until its bytes come); an announced length it could not hold now, or a body "
        "growing past it, is refused (HTTP `503` + `Retry-After: 1`, memcached `SERVER_ERROR out "
        "of memory storing object` with the data block swallowed and the old value kept). Its "
        "last eighth (less when the largest body or value would not fit in the rest) is kept for "
        "requests holding at most 64 KiB. On top of `cache.max_memory_bytes`, plus under one 16 "
        "KiB chunk per connection receiving a body; the default holds 64 concurrent maximum-size "
        "bodies or values, far more than healthy clients hold at once, while slow or hostile ones "
        "cannot hold more. At least `server.max_body_bytes` and (cache on) "
        "`cache.max_item_bytes`: the default grows to them, a smaller value set is refused (exit "
        "2)"),
    K_U32("server.max_requests_per_connection", server.max_requests_per_connection, 1, 1000000000,
          "requests served on one connection, then `Connection: close`"),
    K_U32("server.max_connection_age_s", server.max_connection_age_s, 0, 2592000,
          "HTTP and HTTPS: the first response that starts after a connection is this old (each "
          "connection's own age drawn in 0.9–1.0 × it) carries `Connection: close` and is its "
          "last, so keep-alive clients reconnect and their load balancer (kube-proxy) can pick "
          "a replica added since; an idle connection waits for its next request. 0 = off "
          "([rebalancing.md](rebalancing.md))"),
    K_U32("server.max_pipeline", server.max_pipeline, 1, 1024,
          "pipelined requests handled per read before yielding to other connections"),
    K_U32(
        "server.header_timeout_ms", server.header_timeout_ms, 1, CFG_DAY_MS,
        "from the first byte of a request to the end of its head, and for a body in transit → 408 "
        "and close (slowloris, slow bodies)"),
    K_U32("server.idle_timeout_ms", server.idle_timeout_ms, 1, CFG_DAY_MS,
          "between keep-alive requests → close"),
    K_U32("server.write_timeout_ms", server.write_timeout_ms, 1, CFG_DAY_MS,
          "a write that makes no progress for this long → close (like nginx's `send_timeout`: a "
          "very slow reader behind a large socket buffer can trip it)"),
    K_U32("server.shutdown_grace_ms", server.shutdown_grace_ms, 1, 3600000,
          "drain time on SIGTERM, then remaining connections are closed"),
    K_BOOL("server.tcp_nodelay", server.tcp_nodelay,
           "set on the listener, inherited by connections"),
    K_BOOL("server.reuseport", server.reuseport,
           "one listening socket per loop with SO_REUSEPORT; `false` = loop 0 accepts and hands "
           "sockets out"),
    K_U32("server.tcp_defer_accept_s", server.tcp_defer_accept_s, 0, 3600,
          "`TCP_DEFER_ACCEPT` on the listeners: a connection is accepted when its first bytes "
          "arrive (a silent one after about this many seconds), so a one-request client (HTTP/1.0, "
          "`ab`) is answered with accept4, read, writev, close and never reaches epoll; 0 = off "
          "(accept at connect)"),
    K_U32("server.so_rcvbuf", server.so_rcvbuf, 0, 64 * CFG_MIB,
          "socket receive buffer (SO_RCVBUF); 0 = kernel default"),
    K_U32("server.so_sndbuf", server.so_sndbuf, 0, 64 * CFG_MIB,
          "socket send buffer (SO_SNDBUF); 0 = kernel default"),
    K_U32("server.output_high_water_bytes", server.output_high_water_bytes, 4096, CFG_GIB,
          "unsent output above which a connection stops being read (backpressure)"),
    K_U32(
        "server.output_limit_bytes", server.output_limit_bytes, 65536, CFG_GIB,
        "unsent output above which a connection is closed; the largest response is the biggest of "
        "max_body_bytes, cache.max_item_bytes, a full /typeids batch (93 bytes per ID with a "
        "63-character prefix), "
        "read_buffer_bytes (with the raw TCP echo on) and 256 KiB, plus 16 KiB; at least "
        "`server.output_high_water_bytes` + the largest response"),
    K_U32("server.linger_ms", server.linger_ms, 1, 60000,
          "after a server-initiated close: half-close and drain the peer this long"),
    K_U32("server.read_buffer_bytes", server.read_buffer_bytes, 4096, CFG_MIB,
          "each loop's read buffer, and the most unconsumed input a connection may hold"),
    K_U32("server.pool_idle_max", server.pool_idle_max, 0, 1000000,
          "idle objects each per-loop pool (connections, output chunks, input buffers, request "
          "heads) keeps for reuse; beyond that they go back to malloc"),
    K_TLS("server.tls", server.tls,
          "HTTPS port on `server.host`, beside `server.port`; 0 = off; needs `cert_file` and "
          "`key_file` (docs/tls.md)"),
    K_ENUM(
        "snowflake.layout", snowflake.layout_preset, cfg_layout_parse, cfg_layout_name,
        "custom|twitter|sonyflake|js53",
        "a preset fixes the widths, the tick and the order, and defaults the epoch; `custom`: the "
        "width keys below"),
    {"snowflake.epoch", CFG_T_EPOCH, CFG_AT(snowflake.epoch_ms, 8), 0, CFG_EPOCH_MAX_MS, 0, NULL,
     NULL, NULL,
     "custom epoch, not in the future (a preset's is a default): RFC 3339 UTC "
     "(`2020-01-01T00:00:00Z`) or integer ms since 1970"},
    K_U32("snowflake.time_unit_ms", snowflake.time_unit_ms, 1, 1000, "tick length"),
    K_U32("snowflake.timestamp_bits", snowflake.timestamp_bits, 0, 63,
          "width of the timestamp field; the four widths sum to at most 63 (unused high bits stay "
          "0) and must leave at least 10 years"),
    K_U32("snowflake.datacenter_bits", snowflake.datacenter_bits, 0, 63,
          "width of the datacenter id field"),
    K_U32("snowflake.worker_bits", snowflake.worker_bits, 0, 63, "width of the worker id field"),
    K_U32("snowflake.sequence_bits", snowflake.sequence_bits, 0, 63,
          "width of the per-tick sequence; at least 8"),
    K_BOOL("snowflake.node_bits_low", snowflake.node_bits_low,
           "Sonyflake order: time, sequence, node"),
    K_U32("snowflake.datacenter_id", snowflake.datacenter_id, 0, UINT32_MAX,
          "this node's datacenter; must fit `datacenter_bits`"),
    {"snowflake.worker_id", CFG_T_WORKER, CFG_AT(snowflake.worker_id, 4), 0, UINT32_MAX, 0, NULL,
     NULL, NULL,
     "this node's worker: a number; `\"ordinal\"` ($POD_INDEX, else the trailing -N of $POD_NAME "
     "or "
     "of the host name); `\"env:NAME\"` (the decimal value of variable NAME); or `\"etcd\"` "
     "(claimed "
     "at start from etcd within `snowflake.etcd.worker_min..worker_max`). Must fit `worker_bits`"},
    K_ENUM("snowflake.sync", snowflake.sync, cfg_sync_parse, cfg_sync_name, "atomic|spinlock|mutex",
           "generator synchronisation"),
    K_BOOL("snowflake.per_thread_worker_ids", snowflake.per_thread_worker_ids,
           "loop *i* uses worker_id + *i*; worker_id + threads − 1 must fit `worker_bits`"),
    K_U32("snowflake.max_backward_ms", snowflake.max_backward_ms, 0, 1000,
          "clock regression waited out (at least one tick); below `lease_ms`"),
    K_U32("snowflake.max_batch", snowflake.max_batch, 1, 65536,
          "largest `count` of /ids, /uuids, /ulids, /typeids"),
    K_STR("snowflake.peers", snowflake.peers, 0, 0,
          "the replicas' HTTP addresses (`host:port,...`, names allowed), asked at start; a peer "
          "issuing with our identity stops the start (exit 1)"),
    K_U32("snowflake.peer_timeout_ms", snowflake.peer_timeout_ms, 50, 60000, "per peer at start"),
    K_U32("snowflake.lease_ms", snowflake.lease_ms, 100, 600000,
          "how far the lease runs ahead (at least 2 × the run-ahead); the longest refusal after a "
          "crash restart (not used with `worker_id: \"etcd\"`: the floor lives in etcd)"),
    K_ENUM("snowflake.default_encoding", snowflake.default_encoding, cfg_enc_parse, cfg_enc_name,
           "dec|hex|base62|base32", "encoding when a request gives none"),
    K_ENUM(
        "snowflake.json_ids", snowflake.json_numbers, cfg_json_ids_parse, cfg_json_ids_name,
        "string|number",
        "decimal IDs in JSON without `?json_ids=`; `number` needs a layout of at most 53 bits and "
        "`default_encoding` `dec`"),
    K_U32("snowflake.lifetime_warning_years", snowflake.lifetime_warning_years,
          SF_MIN_LIFETIME_YEARS, 1000,
          "warn at start when the layout runs out of timestamps sooner"),
    K_U32("snowflake.random_sequence_start_bits", snowflake.random_sequence_start_bits, 0,
          SF_WIDE_COUNTER_BITS - 1,
          "a fresh tick's sequence (and the UUIDv7/ULID counter) starts at a random value below "
          "2^bits; costs up to 2^bits − 1 IDs per tick; below `sequence_bits`"),
    K_STR("snowflake.etcd.endpoints", snowflake.etcd.endpoints, 0, 0,
          "etcd client URLs `http://host:port,...` or `https://host:port,...` (at most 16, one "
          "scheme for all; `https://` needs `snowflake.etcd.tls.ca_file`), required with "
          "`worker_id: \"etcd\"`; numeric hosts avoid DNS at start"),
    K_STR("snowflake.etcd.prefix", snowflake.etcd.prefix, 1, 0,
          "where the fleet's keys live, one prefix per ID space: starts with `/`, no trailing `/`"),
    K_U32("snowflake.etcd.ttl_s", snowflake.etcd.ttl_s, 2, 300,
          "etcd lease TTL; renewals every TTL/4"),
    K_U32("snowflake.etcd.fence_margin_ms", snowflake.etcd.fence_margin_ms, 0, 150000,
          "IDs stop this long before etcd could expire the lease; from 2 % of the TTL + 100 ms to "
          "TTL/2"),
    K_U32("snowflake.etcd.request_timeout_ms", snowflake.etcd.request_timeout_ms, 50, 30000,
          "per etcd call; below TTL/4 (the renewal period)"),
    K_U32("snowflake.etcd.start_timeout_ms", snowflake.etcd.start_timeout_ms, 0, 3600000,
          "no usable etcd answer for this long at start: exit 1"),
    K_BOOL(
        "snowflake.etcd.wait_for_slot", snowflake.etcd.wait_for_slot,
        "every slot held at start: listen but stay unready (`/readyz` 503, ID routes 503) and try "
        "a claim every ttl_s/4, instead of exit 1"),
    K_U32("snowflake.etcd.worker_min", snowflake.etcd.worker_min, 0, UINT32_MAX - 1,
          "the first worker this fleet claims from (several fleets can split one datacenter); must "
          "fit `worker_bits`"),
    K_U32_OR_MAX(
        "snowflake.etcd.worker_max", snowflake.etcd.worker_max, 0, UINT32_MAX - 1,
        "the last worker this fleet claims from, at least `worker_min`, or `\"max\"` = the "
        "layout's "
        "last worker; the range must hold one slot per loop with `per_thread_worker_ids` (at most "
        "127 loops: one transaction)"),
    K_STR("snowflake.etcd.tls.ca_file", snowflake.etcd.tls.ca_file, 0, 0,
          "PEM CA certificates etcd's server certificate must chain to; required with `https://` "
          "endpoints (the system store is not used: etcd runs on a private CA); the certificate "
          "must also name the endpoint's host (an IP SAN for a numeric host)"),
    K_STR("snowflake.etcd.tls.cert_file", snowflake.etcd.tls.cert_file, 0, 0,
          "PEM client certificate chain for etcd's `--client-cert-auth`, leaf first; with "
          "`key_file`; `\"\"` = none"),
    K_STR("snowflake.etcd.tls.key_file", snowflake.etcd.tls.key_file, 0, 0,
          "PEM private key of `cert_file`; one that does not match: exit 1 at start"),
    K_STR("snowflake.etcd.tls.server_name", snowflake.etcd.tls.server_name, 0, 0,
          "the name etcd's certificate must carry (and SNI), instead of each endpoint's host; "
          "`\"\"` = the host"),
    K_BOOL("snowflake.etcd.tls.watch_files", snowflake.etcd.tls.watch_files,
           "re-read the CA, certificate and key when their directory changes (500 ms after the "
           "last change; a bad new pair is refused, the old stays; the slots are kept); also on "
           "`SIGHUP`"),
    K_STR("snowflake.etcd.auth.username", snowflake.etcd.auth_username, 0, 0,
          "etcd RBAC user (etcd with `auth enable`); empty = no authentication. Its role needs "
          "`readwrite` on `prefix` only (docs/identity-etcd.md); refused credentials or "
          "permissions stop the start (exit 1) and fence the IDs at run time"),
    K_STR("snowflake.etcd.auth.password_file", snowflake.etcd.auth_password_file, 0, 0,
          "the user's password as the file's first line (a mounted Secret), required with "
          "`username`; read again before every authentication (a rotated Secret needs no restart), "
          "never logged nor printed; there is no inline password key"),
    K_BOOL("cache.enabled", cache.enabled, "serve `/cache/`"),
    K_U64("cache.max_memory_bytes", cache.max_memory_bytes, CFG_MIB, CFG_TIB,
          "memory for items; LRU eviction beyond"),
    K_U32("cache.max_item_bytes", cache.max_item_bytes, 1, CFG_GIB,
          "largest value (413 above); at most `cache.max_memory_bytes`"),
    K_U32("cache.shards", cache.shards, 1, 4096,
          "a power of two: hash-table shards, each with its own lock and LRU list; eviction "
          "compares the shards' LRU tails by age (CAS order) and takes the oldest, so it follows "
          "one LRU order across the store up to 64 shards, and a sample of 64 shards' tails beyond "
          "(store.h says how close)"),
    K_STR("cache.memcached_host", cache.memcached_host, 1, CFG_F_IPADDR,
          "memcached listener address (no authentication without `memcached_auth_file`: keep it "
          "private); host names are not resolved"),
    K_U32("cache.memcached_port", cache.memcached_port, 0, 65535,
          "memcached text protocol listener, 0 = off; needs `cache.enabled`"),
    K_BOOL("cache.persist", cache.persist,
           "snapshot on graceful stop (and periodically), load at start"),
    K_STR("cache.snapshot_path", cache.snapshot_path, 0, 0, "`\"\"` = `data_dir/cache.snapshot`"),
    K_U32("cache.snapshot_interval_s", cache.snapshot_interval_s, 0, 86400,
          "periodic snapshot while running; 0 = only at stop"),
    K_BOOL("cache.evictions", cache.evictions,
           "`false`: a full cache refuses writes instead of evicting (memcached `-M`)"),
    K_BOOL("cache.memcached_shutdown", cache.memcached_shutdown,
           "the `shutdown` command stops the daemon (memcached `-A`); dangerous: anyone who can "
           "connect (and authenticate, with `memcached_auth_file`) can stop it"),
    K_BOOL("cache.memcached_flush_all", cache.memcached_flush_all,
           "`false`: `flush_all` is refused (memcached `-F`)"),
    K_BOOL("cache.memcached_cas", cache.memcached_cas,
           "`false`: CAS values read 0 (memcached `-C`)"),
    K_U32("cache.memcached_reqs_per_event", cache.memcached_reqs_per_event, 1, 1000000,
          "commands per read before yielding (memcached `-R`)"),
    K_BOOL("cache.memcached_debug_commands", cache.memcached_debug_commands,
           "memcached-debug's `debugtime` (moves the listener's clock; HTTP does not see it)"),
    K_BOOL("cache.memcached_watch", cache.memcached_watch,
           "`false`: the `watch` command is refused (memcached `-W`)"),
    K_BOOL("cache.memcached_key_listing", cache.memcached_key_listing,
           "`false`: the commands that list keys are refused: `stats cachedump`, `lru_crawler "
           "metadump` (memcached `-X`, its replies; `stats settings` says `dump_enabled no`) and "
           "`stats detail on`/`dump` (per-prefix counts; `CLIENT_ERROR stats detail not allowed`)"),
    K_BOOL("cache.memcached_memlimit_command", cache.memcached_memlimit_command,
           "`false`: `cache_memlimit` is refused (`CLIENT_ERROR cache_memlimit not allowed`; "
           "memcached has no switch): anyone who reaches the port could otherwise shrink the store "
           "and evict what HTTP clients stored"),
    K_U32("cache.memcached_idle_timeout_s", cache.memcached_idle_timeout_s, 0, 86400,
          "the memcached listener's own idle timeout (memcached `-o idle_timeout`; `stats` then "
          "shows `idle_kicks`); 0 = `server.idle_timeout_ms` applies"),
    K_U32("cache.memcached_max_connection_age_s", cache.memcached_max_connection_age_s, 0, 2592000,
          "memcached listeners (plaintext and TLS): a connection this old (each one's own age "
          "drawn in 0.9–1.0 × it) is closed after the reply that crosses it, once every command "
          "it sent is answered; the client sees EOF at its next command and reconnects (one "
          "failed command unless it retries: [rebalancing.md](rebalancing.md)). 0 = off"),
    K_BOOL("cache.memcached_lru_crawler", cache.memcached_lru_crawler,
           "`false`: `lru_crawler crawl`/`metadump` refused until `lru_crawler enable` (memcached "
           "`-o no_lru_crawler`)"),
    K_BOOL("cache.lru_segmented", cache.lru_segmented,
           "memcached's HOT/WARM/COLD LRU per shard; `false`: one list (memcached `-o "
           "no_lru_maintainer`)"),
    K_U32("cache.memcached_temporary_ttl_s", cache.memcached_temporary_ttl_s, 0, 86400 * 30,
          "items stored with a TTL up to this go to the TEMP LRU and are never evicted (memcached "
          "`-o temporary_ttl`); 0 = off"),
    K_STR("cache.memcached_auth_file", cache.memcached_auth_file, 0, 0,
          "memcached `-Y`: a file of `user:password` lines (at most 8, 254 bytes each); every "
          "memcached connection, plaintext or TLS, must first send `set <any> 0 0 <n>` with "
          "`<user> <password>` as data. Read at start when a memcached listener is on "
          "(unreadable: exit 1; empty or malformed: exit 2, with the line number) and on `SIGHUP` "
          "(a bad file is logged and the old one kept); `\"\"` = no authentication"),
    K_TLS("cache.memcached_tls", cache.memcached_tls,
          "memcached protocol over TLS on `cache.memcached_host`, beside `cache.memcached_port` "
          "(memcached `-Z`); 0 = off; needs `cache.enabled`, `cert_file` and `key_file`"),
    K_STR("cache.memcached_id_keys.snowflake", cache.memcached_id_keys.snowflake, 0, 0,
          "a memcached key name reserved for IDs, as kayac/go-katsubushi serves them: the name K "
          "and every key `K:<suffix>` (suffix 1+ bytes, so key-hashing clients and proxies spread "
          "`get K:1 K:2 ...` over a fleet; `K:` alone stays a cache key); `get <key>` "
          "(plaintext and TLS port) answers a new Snowflake ID in decimal (`VALUE <key> 0 <len>`), "
          "a key named n times in one get gives n distinct IDs, from the generator of `/id` (a "
          "refusal: `SERVER_ERROR <why>`); a write of such a key is refused, a snapshot's values "
          "under them dropped at start. No name may equal another or start with another and "
          "`:`. `\"\"` = off, the "
          "default: turning a key into an ID key changes what its gets answer, so it is never done "
          "behind an existing user's back (set e.g. `id`)"),
    K_STR("cache.memcached_id_keys.uuidv7", cache.memcached_id_keys.uuidv7, 0, 0,
          "as `cache.memcached_id_keys.snowflake`, for a UUIDv7 in canonical text (`/uuid`'s "
          "generator); `\"\"` = off"),
    K_STR("cache.memcached_id_keys.ulid", cache.memcached_id_keys.ulid, 0, 0,
          "as `cache.memcached_id_keys.snowflake`, for a ULID (26 characters, `/ulid`'s "
          "generator); `\"\"` = off"),
    K_BOOL("echo.http_enabled", echo.http_enabled, "`POST /echo`, `GET /echo?msg=`"),
    K_STR("echo.tcp_host", echo.tcp_host, 1, CFG_F_IPADDR,
          "raw TCP echo address; host names are not resolved"),
    K_U32("echo.tcp_port", echo.tcp_port, 0, 65535, "raw TCP echo port, 0 = off"),
    K_TLS("echo.tcp_tls", echo.tcp_tls,
          "the TCP echo over TLS on `echo.tcp_host`, beside `echo.tcp_port`; 0 = off; needs "
          "`cert_file` and `key_file`"),
    K_ENUM("log.level", log.level, cfg_log_parse, cfg_log_name, "debug|info|warn|error",
           "the lowest level logged"),
    K_STR("log.file", log.file, 0, 0,
          "appended to; lines are written by a logger thread; `SIGHUP` reopens it (logrotate)"),
    K_BOOL("log.access_log", log.access_log,
           "one line per request (method, URL, status, ms); free when off"),
    K_ENUM("log.format", log.format, cfg_log_format_parse, cfg_log_format_name, "text|json",
           "`json`: one JSON object per line, for log pipelines"),
    K_STR("auth.token", auth.token, 0, CFG_F_SECRET,
          "bearer token for cache writes (and every route but /healthz and /readyz with "
          "`protect_reads`); empty = no access control, else at least 16 bytes (shorter: exit 2); "
          "not with `token_file`. `--check-config` prints it as `\"***\"`; it is never logged"),
    K_STR("auth.token_file", auth.token_file, 0, 0,
          "the token as the file's first line (a mounted Secret), 16–255 bytes; unreadable refuses "
          "to start (exit 1), empty or shorter too (exit 2)"),
    K_BOOL("auth.protect_reads", auth.protect_reads,
           "also require the token for `/id*`, cache reads, `/echo`, `/metrics` (never `/healthz`, "
           "`/readyz`)"),
    K_LIST("auth.client_certificates", auth.client_certificates,
           "client certificates that grant what the token grants, on `server.tls` only: each a "
           "subject DN in RFC 2253 form (`CN=orders-api,O=shop`, as `openssl x509 -noout -subject "
           "-nameopt RFC2253` prints it), `DNS:name` or `URI:uri` (a subjectAltName); exact "
           "match (DNS names case-insensitive), no wildcards, at most 64; needs "
           "`server.tls.verify_client` `optional` or `required` (else exit 2). "
           "[tls.md](tls.md#client-certificates-as-credentials)"),
    K_ENUM("auth.credentials", auth.token_and_certificate, cfg_credentials_parse,
           cfg_credentials_name, "token_or_certificate|token_and_certificate",
           "how the token and `client_certificates` combine: either one suffices, or a request "
           "needs a listed certificate and the token (then both must be set, else exit 2)"),
    K_SEQS("sequences.namespaces", sequences.namespaces,
           "segment mode's namespaces, each an object: `name` (1–64 of `A-Za-z0-9_.-`, the first "
           "a letter or digit), `start` (first number, default 1), `block` (numbers per block, "
           "default 1000), `max` (last number, 0 = none), `adaptive` with `block_min` and "
           "`block_max` (the block follows the load), `token` (this namespace's bearer token, "
           "16–255 bytes, printed as `\"***\"`); at most 64. "
           "[sequences.md](sequences.md)"),
    K_U32("sequences.prefetch_percent", sequences.prefetch_percent, 0, 100,
          "the next block is reserved in the background once this share of the current one is "
          "issued (0: as soon as a block is in use)"),
    K_U32("sequences.retry_ms", sequences.retry_ms, 1, 600000,
          "after a failed block reserve (disk full, store down) the next one waits this long"),
    K_U64("sequences.adaptive_block_ms", sequences.adaptive_block_ms, 1000, CFG_DAY_MS,
          "adaptive namespaces: a block should last about this long (faster: the next doubles, "
          "up to `block_max`; more than twice as long: it halves, down to `block_min`)"),
    K_U32("sequences.start_wait_ms", sequences.start_wait_ms, 0, 600000,
          "start waits this long at most for every namespace's first block (later ones answer "
          "503 until theirs arrives)"),
    K_U32("sequences.max_namespaces", sequences.max_namespaces, 1, 1024,
          "namespaces of the configuration and created over the API together"),
    K_BOOL("sequences.api_create", sequences.api_create,
           "`PUT /seq/{name}` with `auth.token` creates namespaces at run time, kept in "
           "`data_dir` (with `worker_id: \"etcd\"`: in etcd, for the whole fleet) across "
           "restarts (needs `auth.token` or `token_file`, else exit 2)"),
    K_U32("sequences.reserve_delay_ms", sequences.reserve_delay_ms, 0, 60000,
          "fault injection for tests: every block reserve of the file source waits this long "
          "first (not the etcd source); 0 in production"),
};

#define CFG_NKEYS (sizeof cfg_keys / sizeof cfg_keys[0])

/* ---- load context and errors ----------------------------------------------------------------- */

typedef enum { CFG_L_DEFAULT = 0, CFG_L_FILE, CFG_L_ENV, CFG_L_FLAG } cfg_layer;

typedef struct cfg_ctx {
    cfg *c;
    const char *file;                   /* -c path as the user typed it, or NULL */
    cfg_layer layer[CFG_NKEYS];         /* the layer that last set each key */
    const char *flag[CFG_NKEYS];        /* "--port", "--set", ... for CFG_L_FLAG */
    bool seen[CFG_NKEYS];               /* set by the JSON document being applied */
    char hidden_src[CFG_PATH_MAX + 32]; /* the last layer that gave a secret as CFG_HIDDEN */
    char *err;
    size_t errlen;
} cfg_ctx;

__attribute__((format(printf, 4, 5))) static int cfg_fail(cfg_ctx *ctx, const char *src,
                                                          const char *path, const char *fmt, ...)
{
    if (!ctx->err || ctx->errlen == 0)
        return -1;
    int n = path ? snprintf(ctx->err, ctx->errlen, "%s: %s: ", src, path)
                 : snprintf(ctx->err, ctx->errlen, "%s: ", src);
    if (n >= 0 && (size_t)n < ctx->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->err + n, ctx->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A user-supplied value made safe to echo: printable ASCII only, cut to CFG_SHOW_MAX, quoted
 * unless bare (numbers and booleans from JSON). Keeps escape sequences out of terminals and logs.
 */
static void cfg_show(char *out, size_t outlen, const char *s, bool bare)
{
    size_t n = 0, max = outlen - 6; /* room for quotes, "..." and the terminator */
    if (!bare)
        out[n++] = '"';
    for (; *s && n < max; s++) {
        unsigned char ch = (unsigned char)*s;
        out[n++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (*s) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    if (!bare)
        out[n++] = '"';
    out[n] = '\0';
}

/* strlcpy: copies what fits and always terminates (labels and origins may be cut, never overrun).
 */
static void cfg_copy(char *dst, size_t dstlen, const char *src)
{
    size_t n = strlen(src);
    if (n >= dstlen)
        n = dstlen - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static const cfg_key *cfg_key_find(const char *path, size_t len, size_t *idx)
{
    for (size_t i = 0; i < CFG_NKEYS; i++)
        if (strlen(cfg_keys[i].path) == len && memcmp(cfg_keys[i].path, path, len) == 0) {
            if (idx)
                *idx = i;
            return &cfg_keys[i];
        }
    return NULL;
}

static bool cfg_is_section(const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < CFG_NKEYS; i++)
        if (strncmp(cfg_keys[i].path, name, len) == 0 && cfg_keys[i].path[len] == '.')
            return true;
    return false;
}

/* "server.port" -> "SNOWFLAKED_SERVER_PORT". */
static void cfg_env_name(const char *path, char *out, size_t outlen)
{
    size_t n = strlen(CFG_ENV_PREFIX);
    memcpy(out, CFG_ENV_PREFIX, n);
    for (; *path && n + 1 < outlen; path++) {
        char ch = *path;
        out[n++] = ch == '.' ? '_' : (ch >= 'a' && ch <= 'z') ? (char)(ch - 'a' + 'A') : ch;
    }
    out[n] = '\0';
}

/* Where key i got its current value, for cross-field error messages. */
static void cfg_origin_label(const cfg_ctx *ctx, size_t i, char *out, size_t outlen)
{
    char env[96];
    switch (ctx->layer[i]) {
    case CFG_L_FILE: cfg_copy(out, outlen, ctx->file); break;
    case CFG_L_ENV:
        cfg_env_name(cfg_keys[i].path, env, sizeof env);
        snprintf(out, outlen, "environment %s", env);
        break;
    case CFG_L_FLAG: snprintf(out, outlen, "flag %s", ctx->flag[i]); break;
    default: snprintf(out, outlen, "defaults"); break;
    }
}

/* The label of the highest layer among the named keys (NULL-terminated list). */
static void cfg_cross_label(const cfg_ctx *ctx, char *out, size_t outlen, ...)
{
    va_list ap;
    size_t best = CFG_NKEYS;
    va_start(ap, outlen);
    for (const char *p = va_arg(ap, const char *); p; p = va_arg(ap, const char *)) {
        size_t i;
        if (cfg_key_find(p, strlen(p), &i) &&
            (best == CFG_NKEYS || ctx->layer[i] >= ctx->layer[best]))
            best = i;
    }
    va_end(ap);
    if (best == CFG_NKEYS)
        snprintf(out, outlen, "defaults");
    else
        cfg_origin_label(ctx, best, out, outlen);
}

static size_t cfg_key_index_of(const char *path)
{
    size_t i = 0;
    cfg_key_find(path, strlen(path), &i);
    return i;
}

/* ---- text parsing ---------------------------------------------------------------------------- */

/* Decimal digits only: no sign, no space, no overflow (util/decimal.h). */
static bool cfg_parse_uint(const char *s, uint64_t *out)
{
    return dec_parse_u64(s, strlen(s), UINT64_MAX, out);
}

static bool cfg_is_digits(const char *s)
{
    return *s && s[strspn(s, "0123456789")] == '\0';
}

/* Case-insensitive, because TRUE and On are common in shell environments. */
static bool cfg_parse_bool(const char *s, bool *out)
{
    static const char *const words[][2] = {
        {"true", "false"}, {"1", "0"}, {"yes", "no"}, {"on", "off"}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        for (size_t v = 0; v < 2; v++)
            if (strcasecmp(s, words[i][v]) == 0) {
                *out = v == 0;
                return true;
            }
    return false;
}

static bool cfg_is_ip(const char *s)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* A JSON number as text. Non-negative whole numbers up to 2^53 (exact in a double) become plain
 * digits; anything else becomes %.17g, which round-trips and so always shows a sign, a fraction
 * or an exponent: it can never pass cfg_parse_uint. Range checks therefore happen on exact
 * integers and no out-of-range double is ever cast. */
static void cfg_number_text(double d, char *out, size_t outlen)
{
    if (d >= 0 && d <= 9007199254740992.0 && (double)(uint64_t)d == d)
        snprintf(out, outlen, "%llu", (unsigned long long)(uint64_t)d);
    else
        snprintf(out, outlen, "%.17g", d);
}

/* ---- time ------------------------------------------------------------------------------------ */

/* ms since 1970 -> ISO-8601 UTC, with .mmm only when needed (util/rfc3339.h always writes it). */
static void cfg_format_iso(uint64_t ms, char *out, size_t outlen)
{
    char text[RFC3339_FORMAT_CAP];
    size_t n = rfc3339_format_ms(ms, text);
    if (ms % 1000 == 0) { /* "...:SS.000Z" -> "...:SSZ" */
        n -= 4;
        text[n - 1] = 'Z';
        text[n] = '\0';
    }
    snprintf(out, outlen, "%s", text);
}

/* ---- setting one key from text --------------------------------------------------------------- */

static void *cfg_field(cfg *c, const cfg_key *k)
{
    return (char *)c + k->off;
}

/* What a key accepts, for messages: "an integer 1..65535", "one of dec|hex|base62|base32". */
static void cfg_expect(const cfg_key *k, char *out, size_t outlen)
{
    switch (k->type) {
    case CFG_T_U32:
    case CFG_T_U64:
        snprintf(out, outlen, "an integer %llu..%llu", (unsigned long long)k->min,
                 (unsigned long long)k->max);
        break;
    case CFG_T_U32_OR_MAX:
        snprintf(out, outlen, "an integer %llu..%llu or \"max\"", (unsigned long long)k->min,
                 (unsigned long long)k->max);
        break;
    case CFG_T_BOOL: snprintf(out, outlen, "true or false"); break;
    case CFG_T_STR:
        snprintf(out, outlen, "%s",
                 (k->flags & CFG_F_IPADDR) ? "a numeric IPv4 or IPv6 address"
                 : k->min                  ? "a non-empty string"
                                           : "a string");
        break;
    case CFG_T_ENUM: snprintf(out, outlen, "one of %s", k->choices); break;
    case CFG_T_EPOCH:
        snprintf(out, outlen,
                 "an ISO-8601 UTC time like \"2020-01-01T00:00:00Z\" or integer ms since 1970");
        break;
    case CFG_T_WORKER:
        snprintf(out, outlen, "an integer, \"ordinal\", \"env:NAME\" or \"etcd\"");
        break;
    case CFG_T_LIST: snprintf(out, outlen, "an array of strings"); break;
    case CFG_T_SEQS: snprintf(out, outlen, "an array of namespace objects"); break;
    }
}

static int cfg_bad_value(cfg_ctx *ctx, const cfg_key *k, const char *src, const char *shown,
                         const char *why)
{
    char expect[128];
    cfg_expect(k, expect, sizeof expect);
    return cfg_fail(ctx, src, k->path, "must be %s, got %s%s%s%s", expect, shown, why ? " (" : "",
                    why ? why : "", why ? ")" : "");
}

static int cfg_store_uint(cfg_ctx *ctx, const cfg_key *k, const char *text, const char *shown,
                          const char *src)
{
    uint64_t v;
    if (k->type == CFG_T_U32_OR_MAX && strcmp(text, "max") == 0)
        v = CFG_WORKER_MAX_AUTO;
    else if (!cfg_parse_uint(text, &v) || v < k->min || v > k->max)
        return cfg_bad_value(ctx, k, src, shown, NULL);
    void *field = cfg_field(ctx->c, k);
    if (k->type != CFG_T_U64) {
        uint32_t v32 = (uint32_t)v;
        memcpy(field, &v32, sizeof v32);
    } else {
        memcpy(field, &v, sizeof v);
    }
    return 0;
}

static int cfg_store_str(cfg_ctx *ctx, const cfg_key *k, const char *text, const char *shown,
                         const char *src)
{
    size_t len = strlen(text);
    if (len < k->min)
        return cfg_fail(ctx, src, k->path, "must not be empty");
    if (len > k->max)
        return cfg_fail(ctx, src, k->path, "must be at most %llu bytes, got %zu",
                        (unsigned long long)k->max, len);
    if ((k->flags & CFG_F_IPADDR) && !cfg_is_ip(text))
        return cfg_bad_value(ctx, k, src, shown, "host names are not resolved");
    memcpy(cfg_field(ctx->c, k), text, len + 1);
    return 0;
}

static void cfg_json_describe(const cJSON *item, char *out, size_t outlen);

/* A list key: text is the array's JSON (a file's array arrives so, --set and the environment
 * may give it so), else one entry ("" = none). Every entry is checked (util/certname.h) and the
 * list stored joined by '\n'. */
static int cfg_store_list(cfg_ctx *ctx, const cfg_key *k, const char *text, const char *shown,
                          const char *src)
{
    char joined[8192], why[512];
    size_t n = 0;
    if (text[0] != '[') {
        if (strchr(text, '\n')) /* '\n' separates the stored entries: never inside one */
            return cfg_bad_value(ctx, k, src, shown, "one entry holds no line feed; give several "
                                                     "as a JSON array");
        n = strlen(text);
        if (n > k->max)
            return cfg_fail(ctx, src, k->path, "must be at most %llu bytes, got %zu",
                            (unsigned long long)k->max, n);
        memcpy(joined, text, n);
    } else {
        cJSON *arr = cJSON_Parse(text);
        if (!cJSON_IsArray(arr)) {
            cJSON_Delete(arr);
            return cfg_bad_value(ctx, k, src, shown, "not a JSON array");
        }
        int i = 0;
        for (const cJSON *it = arr->child; it; it = it->next, i++) {
            size_t len = cJSON_IsString(it) ? strlen(it->valuestring) : 0;
            if (!cJSON_IsString(it) || (i && n + 1 + len > k->max) || n + len > k->max) {
                char got[CFG_SHOW_MAX + 16];
                cfg_json_describe(it, got, sizeof got);
                cJSON_Delete(arr);
                return cJSON_IsString(it)
                           ? cfg_fail(ctx, src, k->path, "must be at most %llu bytes together",
                                      (unsigned long long)k->max)
                           : cfg_fail(ctx, src, k->path, "[%d] must be a string, got %s", i, got);
            }
            if (strchr(it->valuestring, '\n')) {
                cJSON_Delete(arr);
                return cfg_fail(ctx, src, k->path, "[%d]: a control character (a line feed)", i);
            }
            if (i)
                joined[n++] = '\n';
            memcpy(joined + n, it->valuestring, len);
            n += len;
            if (len == 0) { /* "" would vanish in the joined form: say so rather than drop it */
                cJSON_Delete(arr);
                return cfg_fail(ctx, src, k->path, "[%d] \"\": empty", i);
            }
        }
        cJSON_Delete(arr);
    }
    joined[n] = '\0';
    certname_list l;
    if (certname_list_init(&l, joined, why, sizeof why) != 0)
        return cfg_fail(ctx, src, k->path, "%s", why);
    certname_list_free(&l);
    memcpy(cfg_field(ctx->c, k), joined, n + 1);
    return 0;
}

static int cfg_store_epoch(cfg_ctx *ctx, const cfg_key *k, const char *text, const char *shown,
                           const char *src)
{
    uint64_t ms;
    const char *why = NULL;
    if (cfg_is_digits(text)) {
        if (!cfg_parse_uint(text, &ms) || ms > k->max)
            why = "integer ms must be 0..253402300799999";
    } else {
        rfc3339_parse_utc_ms(text, strlen(text), &ms, &why);
    }
    if (why)
        return cfg_bad_value(ctx, k, src, shown, why);
    ctx->c->snowflake.epoch_ms = ms;
    return 0;
}

static bool cfg_is_env_name(const char *s)
{
    size_t n = 0;
    if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
        return false;
    for (; s[n]; n++)
        if (!(s[n] == '_' || (s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= 'a' && s[n] <= 'z') ||
              (s[n] >= '0' && s[n] <= '9')))
            return false;
    return n < sizeof(((cfg_snowflake *)0)->worker_env);
}

/* Only records the choice; resolution (hostname, env lookups, bit fit) happens after all layers,
 * so a flag can replace an "ordinal" that would not have resolved. */
static int cfg_store_worker(cfg_ctx *ctx, const cfg_key *k, const char *text, const char *shown,
                            const char *src)
{
    cfg_snowflake *s = &ctx->c->snowflake;
    uint64_t v;
    if (cfg_is_digits(text)) {
        if (!cfg_parse_uint(text, &v) || v > k->max)
            return cfg_bad_value(ctx, k, src, shown, NULL);
        s->worker_source = CFG_WORKER_NUMBER;
        s->worker_id = (uint32_t)v;
        s->worker_env[0] = '\0';
    } else if (strcmp(text, "ordinal") == 0) {
        s->worker_source = CFG_WORKER_ORDINAL;
        s->worker_env[0] = '\0';
    } else if (strcmp(text, "etcd") == 0) {
        s->worker_source = CFG_WORKER_ETCD;
        s->worker_env[0] = '\0';
    } else if (strncmp(text, "env:", 4) == 0) {
        if (!cfg_is_env_name(text + 4))
            return cfg_bad_value(
                ctx, k, src, shown,
                "NAME must be an environment variable name, [A-Za-z_][A-Za-z0-9_]*");
        s->worker_source = CFG_WORKER_ENV;
        cfg_copy(s->worker_env, sizeof s->worker_env, text + 4);
    } else {
        return cfg_bad_value(ctx, k, src, shown, NULL);
    }
    return 0;
}

static bool cfg_has_earlier_twin(const cJSON *item);

/* One number of a namespace object: an integer 0..max (JSON doubles are exact up to 2^53). */
static int cfg_seq_number(cfg_ctx *ctx, const char *src, const char *name, const cJSON *it,
                          uint64_t max, uint64_t *out)
{
    double d = it->valuedouble;
    if (!cJSON_IsNumber(it) || d < 0 || d > (double)max || d != (double)(uint64_t)d)
        return cfg_fail(ctx, src, "sequences.namespaces", "%s: %s must be an integer 0..%llu",
                        name, it->string, (unsigned long long)max);
    *out = (uint64_t)d;
    return 0;
}

/* sequences.namespaces: text is the array's JSON. Every object is checked (unknown keys, types,
 * seq_def_check's rules, duplicate names) and the list replaces the one of a lower layer. */
static int cfg_store_seqs(cfg_ctx *ctx, const cfg_key *k, const char *text, const char *src)
{
    static cfg_sequences parsed; /* the main thread's, one load at a time: too big for a stack */
    cfg_sequences *sq = &parsed;
    const char *P = k->path;
    size_t len = strlen(text);
    if (len > k->max)
        return cfg_fail(ctx, src, P, "must be at most %llu bytes of JSON, got %zu",
                        (unsigned long long)k->max, len);
    cJSON *arr = cJSON_Parse(text);
    if (!cJSON_IsArray(arr)) {
        cJSON_Delete(arr);
        return cfg_fail(ctx, src, P, "must be a JSON array of namespace objects");
    }
    memset(sq->ns, 0, sizeof sq->ns);
    sq->nns = 0;
    int rc = 0;
    char name[96];
    for (const cJSON *o = arr->child; o && rc == 0; o = o->next) {
        if (sq->nns == CFG_SEQ_MAX) {
            rc = cfg_fail(ctx, src, P, "at most %d namespaces (more over the API)", CFG_SEQ_MAX);
            break;
        }
        cfg_seq_ns *n = &sq->ns[sq->nns];
        snprintf(name, sizeof name, "namespace %u", sq->nns + 1);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
        if (!cJSON_IsObject(o) || !cJSON_IsString(nm)) {
            rc = cfg_fail(ctx, src, P, "%s: must be an object with a \"name\"", name);
            break;
        }
        cfg_show(name, sizeof name, nm->valuestring, false);
        n->start = 1;
        n->block = 1000;
        for (const cJSON *it = o->child; it && rc == 0; it = it->next) {
            const char *f = it->string;
            if (cfg_has_earlier_twin(it))
                rc = cfg_fail(ctx, src, P, "%s: duplicate key %s", name, f);
            else if (strcmp(f, "name") == 0)
                snprintf(n->name, sizeof n->name, "%s", strlen(it->valuestring) < sizeof n->name
                                                            ? it->valuestring
                                                            : "");
            else if (strcmp(f, "start") == 0)
                rc = cfg_seq_number(ctx, src, name, it, CFG_U53, &n->start);
            else if (strcmp(f, "max") == 0)
                rc = cfg_seq_number(ctx, src, name, it, CFG_U53, &n->max);
            else if (strcmp(f, "block") == 0)
                rc = cfg_seq_number(ctx, src, name, it, CFG_U53, &n->block);
            else if (strcmp(f, "block_min") == 0)
                rc = cfg_seq_number(ctx, src, name, it, CFG_U53, &n->block_min);
            else if (strcmp(f, "block_max") == 0)
                rc = cfg_seq_number(ctx, src, name, it, CFG_U53, &n->block_max);
            else if (strcmp(f, "adaptive") == 0 && cJSON_IsBool(it))
                n->adaptive = cJSON_IsTrue(it);
            else if (strcmp(f, "token") == 0 && cJSON_IsString(it)) {
                size_t tl = strlen(it->valuestring);
                if (strcmp(it->valuestring, CFG_HIDDEN) == 0)
                    rc = cfg_fail(ctx, src, P,
                                  "%s: \"" CFG_HIDDEN "\" is the token --check-config hides: "
                                  "give the real one",
                                  name);
                else if (tl && (tl < CFG_TOKEN_MIN || tl >= sizeof n->token))
                    rc = cfg_fail(ctx, src, P, "%s: token must be %d–%zu bytes (or \"\")", name,
                                  CFG_TOKEN_MIN, sizeof n->token - 1);
                else
                    memcpy(n->token, it->valuestring, tl + 1);
            } else if (strcmp(f, "adaptive") == 0 || strcmp(f, "token") == 0)
                rc = cfg_fail(ctx, src, P, "%s: %s must be %s", name, f,
                              f[0] == 'a' ? "true or false" : "a string");
            else
                rc = cfg_fail(ctx, src, P, "%s: unknown key %s (name, start, block, max, adaptive, "
                              "block_min, block_max, token)", name, f);
        }
        if (rc != 0)
            break;
        if (n->adaptive && n->block_min == 0) /* defaults that print as what they mean */
            n->block_min = n->block;
        if (n->adaptive && n->block_max == 0)
            n->block_max = n->block_min * 64;
        seq_ns_def d = {.start = n->start, .max = n->max, .block = n->block,
                        .adaptive = n->adaptive, .block_min = n->block_min,
                        .block_max = n->block_max};
        snprintf(d.name, sizeof d.name, "%s", n->name);
        char why[256];
        if (strlen(nm->valuestring) > SEQ_NAME_MAX || seq_def_check(&d, why, sizeof why) != 0) {
            if (strlen(nm->valuestring) > SEQ_NAME_MAX)
                snprintf(why, sizeof why, "namespace name %s: at most %d characters", name,
                         SEQ_NAME_MAX);
            rc = cfg_fail(ctx, src, P, "%s", why);
            break;
        }
        for (unsigned j = 0; j < sq->nns; j++)
            if (strcmp(sq->ns[j].name, n->name) == 0)
                rc = cfg_fail(ctx, src, P, "%s is declared twice", name);
        sq->nns++;
    }
    cJSON_Delete(arr);
    if (rc != 0)
        return rc;
    cfg_sequences *c = &ctx->c->sequences;
    memcpy(c->ns, sq->ns, sizeof c->ns);
    c->nns = sq->nns;
    memcpy(c->namespaces, text, len + 1);
    return 0;
}

/* Parses text for key i and stores it, remembering which layer set it. bare: the text came from a
 * JSON number or boolean (echoed without quotes in errors). */
static int cfg_set_text(cfg_ctx *ctx, size_t i, const char *text, bool bare, const char *src,
                        cfg_layer layer, const char *flag)
{
    const cfg_key *k = &cfg_keys[i];
    char shown[CFG_SHOW_MAX];
    bool b;
    int rc = 0;
    cfg_show(shown, sizeof shown, text, bare);
    if ((k->flags & CFG_F_SECRET) && strcmp(text, CFG_HIDDEN) == 0) {
        /* --check-config output loaded again: the secret it hid must come from another layer
         * (or auth.token_file); cfg_check_hidden says so when none gives it. */
        cfg_copy(ctx->hidden_src, sizeof ctx->hidden_src, src);
        return 0;
    }
    switch (k->type) {
    case CFG_T_U32:
    case CFG_T_U32_OR_MAX:
    case CFG_T_U64: rc = cfg_store_uint(ctx, k, text, shown, src); break;
    case CFG_T_BOOL:
        if (!cfg_parse_bool(text, &b))
            rc = cfg_fail(ctx, src, k->path, "must be true/false, 1/0, yes/no or on/off, got %s",
                          shown);
        else
            memcpy(cfg_field(ctx->c, k), &b, sizeof b);
        break;
    case CFG_T_STR: rc = cfg_store_str(ctx, k, text, shown, src); break;
    case CFG_T_ENUM:
        if (k->parse(text, cfg_field(ctx->c, k)) != 0)
            rc = cfg_bad_value(ctx, k, src, shown, NULL);
        break;
    case CFG_T_EPOCH: rc = cfg_store_epoch(ctx, k, text, shown, src); break;
    case CFG_T_WORKER: rc = cfg_store_worker(ctx, k, text, shown, src); break;
    case CFG_T_LIST: rc = cfg_store_list(ctx, k, text, shown, src); break;
    case CFG_T_SEQS: rc = cfg_store_seqs(ctx, k, text, src); break;
    }
    if (rc == 0) {
        ctx->layer[i] = layer;
        ctx->flag[i] = flag;
        if (k->flags & CFG_F_SECRET) /* given for real above the hidden one ("" included) */
            ctx->hidden_src[0] = '\0';
    }
    return rc;
}

/* ---- JSON layers ----------------------------------------------------------------------------- */

static void cfg_json_describe(const cJSON *item, char *out, size_t outlen)
{
    char shown[CFG_SHOW_MAX], num[40];
    if (cJSON_IsString(item)) {
        cfg_show(shown, sizeof shown, item->valuestring, false);
        snprintf(out, outlen, "a string %s", shown);
    } else if (cJSON_IsNumber(item)) {
        cfg_number_text(item->valuedouble, num, sizeof num);
        snprintf(out, outlen, "%s", num);
    } else {
        snprintf(out, outlen, "%s",
                 cJSON_IsTrue(item)    ? "true"
                 : cJSON_IsFalse(item) ? "false"
                 : cJSON_IsNull(item)  ? "null"
                 : cJSON_IsArray(item) ? "an array"
                                       : "an object");
    }
}

/* Type-checks a JSON value against key i, then hands its text to cfg_set_text. epoch and worker_id
 * take numbers or strings, and (like their env/flag forms) a string of digits reads as a number. */
static int cfg_apply_item(cfg_ctx *ctx, size_t i, const cJSON *item, const char *src,
                          cfg_layer layer)
{
    const cfg_key *k = &cfg_keys[i];
    char num[40], expect[128], got[CFG_SHOW_MAX + 16];
    bool either = k->type == CFG_T_EPOCH || k->type == CFG_T_WORKER || k->type == CFG_T_U32_OR_MAX;
    bool numeric = k->type == CFG_T_U32 || k->type == CFG_T_U64 || either;
    bool stringy = k->type == CFG_T_STR || k->type == CFG_T_ENUM || either;
    if (cJSON_IsNumber(item) && numeric) {
        cfg_number_text(item->valuedouble, num, sizeof num);
        return cfg_set_text(ctx, i, num, true, src, layer, NULL);
    }
    if (cJSON_IsBool(item) && k->type == CFG_T_BOOL)
        return cfg_set_text(ctx, i, cJSON_IsTrue(item) ? "true" : "false", true, src, layer, NULL);
    if (cJSON_IsString(item) && stringy)
        return cfg_set_text(ctx, i, item->valuestring, false, src, layer, NULL);
    if (cJSON_IsArray(item) && (k->type == CFG_T_LIST || k->type == CFG_T_SEQS)) {
        char *text = cJSON_PrintUnformatted(item);
        if (!text)
            return cfg_fail(ctx, src, k->path, "out of memory");
        int rc = cfg_set_text(ctx, i, text, false, src, layer, NULL);
        cJSON_free(text);
        return rc;
    }
    cfg_expect(k, expect, sizeof expect);
    cfg_json_describe(item, got, sizeof got);
    return cfg_fail(ctx, src, k->path, "expected %s, got %s", expect, got);
}

/* Duplicate keys are errors: cJSON keeps both and which one "wins" would be an accident. */
static bool cfg_has_earlier_twin(const cJSON *item)
{
    for (const cJSON *p = item->prev; p && p->next; p = p->prev) /* head's prev is the tail */
        if (strcmp(p->string, item->string) == 0)
            return true;
    return false;
}

/* The section sec_path ("server", "snowflake.etcd"): its keys, and sections nested in it. */
static int cfg_apply_section(cfg_ctx *ctx, const cJSON *sec, const char *sec_path, const char *src,
                             cfg_layer layer)
{
    char got[CFG_SHOW_MAX + 16], path[160], shown[CFG_SHOW_MAX];
    if (!cJSON_IsObject(sec)) {
        cfg_json_describe(sec, got, sizeof got);
        return cfg_fail(ctx, src, sec_path, "must be an object, got %s", got);
    }
    for (const cJSON *it = sec->child; it; it = it->next) {
        size_t i;
        int n = snprintf(path, sizeof path, "%s.%s", sec_path, it->string);
        bool fits = n > 0 && (size_t)n < sizeof path && !strchr(it->string, '.');
        if (fits && cfg_has_earlier_twin(it))
            return cfg_fail(ctx, src, path, "duplicate key");
        if (fits && cfg_key_find(path, (size_t)n, &i)) {
            if (cfg_apply_item(ctx, i, it, src, layer) != 0)
                return -1;
            ctx->seen[i] = true;
        } else if (fits && cfg_is_section(path)) {
            if (cfg_apply_section(ctx, it, path, src, layer) != 0)
                return -1;
        } else {
            cfg_show(shown, sizeof shown, it->string, true);
            return cfg_fail(ctx, src, NULL, "%s.%s: unknown key", sec_path, shown);
        }
    }
    return 0;
}

static int cfg_apply_tree(cfg_ctx *ctx, const cJSON *root, const char *src, cfg_layer layer)
{
    char got[CFG_SHOW_MAX + 16], shown[CFG_SHOW_MAX];
    if (!cJSON_IsObject(root)) {
        cfg_json_describe(root, got, sizeof got);
        return cfg_fail(ctx, src, NULL, "the top level must be a JSON object, got %s", got);
    }
    memset(ctx->seen, 0, sizeof ctx->seen);
    for (const cJSON *it = root->child; it; it = it->next) {
        size_t i;
        if (cfg_has_earlier_twin(it)) {
            cfg_show(shown, sizeof shown, it->string, true);
            return cfg_fail(ctx, src, shown, "duplicate key");
        }
        /* top-level names have no dots: "server.port" here is not a way to spell a key */
        if (!strchr(it->string, '.') && cfg_key_find(it->string, strlen(it->string), &i)) {
            if (cfg_apply_item(ctx, i, it, src, layer) != 0)
                return -1;
            ctx->seen[i] = true;
        } else if (cfg_is_section(it->string)) {
            if (cfg_apply_section(ctx, it, it->string, src, layer) != 0)
                return -1;
        } else if (layer == CFG_L_FILE && strcmp(it->string, "resolved") == 0) {
            /* --check-config output loaded again: its derived values are derived anew */
            if (!cJSON_IsObject(it)) {
                cfg_json_describe(it, got, sizeof got);
                return cfg_fail(ctx, src, "resolved",
                                "must be an object (the derived values --check-config prints, "
                                "ignored on load), got %s",
                                got);
            }
        } else {
            cfg_show(shown, sizeof shown, it->string, true);
            return cfg_fail(ctx, src, shown, "unknown key");
        }
    }
    return 0;
}

static void cfg_line_col(const char *text, size_t off, unsigned *line, unsigned *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

/* cJSON decodes "\u0000" into a NUL that silently truncates the string; refuse it instead. Only
 * called on text cJSON accepted, where quotes and backslashes occur in strings only. */
static const char *cfg_find_nul_escape(const char *text)
{
    bool in_string = false;
    for (const char *p = text; *p; p++) {
        if (*p == '"') {
            in_string = !in_string;
        } else if (in_string && *p == '\\') {
            if (p[1] == 'u' && strncmp(p + 2, "0000", 4) == 0)
                return p;
            if (p[1])
                p++; /* skip the escaped character, so \" does not end the string */
        }
    }
    return NULL;
}

/* text must be NUL-terminated at text[len]. */
static int cfg_apply_json(cfg_ctx *ctx, const char *text, size_t len, const char *src,
                          cfg_layer layer)
{
    unsigned line, col;
    const char *nul = memchr(text, '\0', len), *end = NULL;
    if (nul) {
        cfg_line_col(text, (size_t)(nul - text), &line, &col);
        return cfg_fail(ctx, src, NULL, "not valid JSON: NUL byte at line %u, column %u", line,
                        col);
    }
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        bool blank = strspn(text, " \t\r\n") == len;
        cfg_line_col(text, off, &line, &col);
        if (blank)
            return cfg_fail(ctx, src, NULL,
                            "not valid JSON: the file is empty, expected an object");
        return cfg_fail(ctx, src, NULL, "not valid JSON: syntax error at line %u, column %u", line,
                        col);
    }
    const char *esc = cfg_find_nul_escape(text);
    int rc;
    if (esc) {
        cfg_line_col(text, (size_t)(esc - text), &line, &col);
        rc = cfg_fail(ctx, src, NULL, "\\u0000 in a string at line %u, column %u is not allowed",
                      line, col);
    } else {
        rc = cfg_apply_tree(ctx, root, src, layer);
    }
    cJSON_Delete(root);
    return rc;
}

/* Reads the whole file, NUL-terminated. */
static int cfg_read_file(cfg_ctx *ctx, const char *path, char **out, size_t *outlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cfg_fail(ctx, path, NULL, "cannot open: %s", strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf && len <= CFG_FILE_MAX) {
        if (len + 1 == cap) { /* keep one byte for the terminator */
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        if (n == 0)
            break; /* end of file or error, told apart by ferror below */
        len += n;
    }
    int rc = 0, saved = errno;
    if (!buf)
        rc = cfg_fail(ctx, path, NULL, "out of memory reading the file");
    else if (ferror(f))
        rc = cfg_fail(ctx, path, NULL, "cannot read: %s", strerror(saved));
    else if (len > CFG_FILE_MAX)
        rc = cfg_fail(ctx, path, NULL, "larger than %d bytes; not a config file?", CFG_FILE_MAX);
    fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    *outlen = len;
    return 0;
}

/* ---- text layers ----------------------------------------------------------------------------- */

/* Every key can come from SNOWFLAKED_<PATH>. Other SNOWFLAKED_* variables are ignored on purpose:
 * Kubernetes injects SNOWFLAKED_PORT, SNOWFLAKED_SERVICE_HOST, ... for a service of that name. */
static int cfg_apply_env(cfg_ctx *ctx)
{
    char name[96], src[128];
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        cfg_env_name(cfg_keys[i].path, name, sizeof name);
        const char *v = getenv(name);
        if (!v)
            continue;
        snprintf(src, sizeof src, "environment %s", name);
        if (cfg_set_text(ctx, i, v, false, src, CFG_L_ENV, NULL) != 0)
            return -1;
    }
    return 0;
}

static int cfg_apply_flag(cfg_ctx *ctx, const char *path, const char *flag, const char *value)
{
    char src[64];
    size_t i = cfg_key_index_of(path);
    snprintf(src, sizeof src, "flag %s", flag);
    return cfg_set_text(ctx, i, value, false, src, CFG_L_FLAG, flag);
}

static int cfg_apply_flags(cfg_ctx *ctx, const cfg_cli *cli)
{
    char shown[CFG_SHOW_MAX];
    for (int s = 0; s < cli->nsets && s < CFG_MAX_SETS; s++) {
        const char *arg = cli->sets[s], *eq = arg ? strchr(arg, '=') : NULL;
        size_t i;
        if (!eq || eq == arg) {
            cfg_show(shown, sizeof shown, arg ? arg : "", false);
            return cfg_fail(ctx, "flag --set", NULL, "expected PATH=VALUE, got %s", shown);
        }
        if (!cfg_key_find(arg, (size_t)(eq - arg), &i)) {
            cfg_show(shown, sizeof shown, arg, true);
            shown[strcspn(shown, "=")] = '\0';
            return cfg_fail(ctx, "flag --set", shown, "unknown key");
        }
        if (cfg_set_text(ctx, i, eq + 1, false, "flag --set", CFG_L_FLAG, "--set") != 0)
            return -1;
    }
    if (cli->port && cfg_apply_flag(ctx, "server.port", "--port", cli->port) != 0)
        return -1;
    if (cli->threads && cfg_apply_flag(ctx, "server.threads", "--threads", cli->threads) != 0)
        return -1;
    if (cli->worker_id &&
        cfg_apply_flag(ctx, "snowflake.worker_id", "--worker-id", cli->worker_id) != 0)
        return -1;
    return 0;
}

/* ---- resolution and cross-field rules -------------------------------------------------------- */

static void cfg_resolve_threads(cfg *c)
{
    if (c->server.threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        c->server.threads = n < 1 ? 1 : n > CFG_MAX_THREADS ? CFG_MAX_THREADS : (uint32_t)n;
    }
}

/* A secret given as CFG_HIDDEN (a --check-config output loaded again) must be given for real by
 * another layer, or come from auth.token_file: starting without the token it stood for would
 * silently drop the access control. */
static int cfg_check_hidden(cfg_ctx *ctx)
{
    if (!ctx->hidden_src[0] || ctx->c->auth.token[0] || ctx->c->auth.token_file[0])
        return 0;
    return cfg_fail(ctx, ctx->hidden_src, "auth.token",
                    "\"" CFG_HIDDEN "\" is the token --check-config hides: give the real one "
                    "(SNOWFLAKED_AUTH_TOKEN, --set auth.token=..., or auth.token_file), or \"\" "
                    "for no access control");
}

static int cfg_check_sequences(cfg_ctx *ctx)
{
    const cfg_sequences *sq = &ctx->c->sequences;
    char src[CFG_PATH_MAX + 32];
    cfg_cross_label(ctx, src, sizeof src, "sequences.max_namespaces", "sequences.namespaces",
                    (const char *)NULL);
    if (sq->api_create && !ctx->c->auth.token[0] && !ctx->c->auth.token_file[0]) {
        cfg_cross_label(ctx, src, sizeof src, "sequences.api_create", (const char *)NULL);
        return cfg_fail(ctx, src, "sequences.api_create",
                        "needs auth.token (or auth.token_file): creating namespaces is the "
                        "admin's");
    }
    if (sq->nns > sq->max_namespaces)
        return cfg_fail(ctx, src, "sequences.max_namespaces",
                        "%u is below the %u namespaces sequences.namespaces declares",
                        sq->max_namespaces, sq->nns);
    return 0;
}

static int cfg_check_limits(cfg_ctx *ctx)
{
    const cfg *c = ctx->c;
    char src[CFG_PATH_MAX + 32];
    if (c->server.max_url_bytes > c->server.max_header_bytes) {
        cfg_cross_label(ctx, src, sizeof src, "server.max_url_bytes", "server.max_header_bytes",
                        (const char *)NULL);
        return cfg_fail(ctx, src, "server.max_url_bytes",
                        "must be <= server.max_header_bytes (%u), got %u",
                        c->server.max_header_bytes, c->server.max_url_bytes);
    }
    /* The hard cap must hold the high-water mark plus the largest single response the server
     * can produce: an echoed body, a cache value, a full /ids or /typeids batch, the /metrics
     * buffer. */
    uint64_t largest = c->server.max_body_bytes;
    if (c->cache.max_item_bytes > largest)
        largest = c->cache.max_item_bytes;
    /* the longest batch: /typeids with a 63-character prefix, 90 characters, "", comma */
    uint64_t batch = (uint64_t)c->snowflake.max_batch * (SF_TYPEID_TEXT_MAX + 3) + 64;
    if (batch > largest)
        largest = batch;
    if (c->echo.tcp_port && c->server.read_buffer_bytes > largest)
        largest = c->server.read_buffer_bytes; /* the raw echo answers a whole read at once */
    if (largest < 262144)
        largest = 262144;
    largest += 16384; /* headers */
    if ((uint64_t)c->server.output_limit_bytes <
        (uint64_t)c->server.output_high_water_bytes + largest) {
        cfg_cross_label(ctx, src, sizeof src, "server.output_limit_bytes",
                        "server.output_high_water_bytes", "server.max_body_bytes",
                        "cache.max_item_bytes", "snowflake.max_batch", "server.read_buffer_bytes",
                        (const char *)NULL);
        return cfg_fail(ctx, src, "server.output_limit_bytes",
                        "must be at least output_high_water_bytes + the largest response "
                        "(%llu), so that one full response always fits, got %u",
                        (unsigned long long)c->server.output_high_water_bytes + largest,
                        c->server.output_limit_bytes);
    }
    /* The in-flight budget must hold the largest request it can be asked for alone, or that
     * request would be refused (503, SERVER_ERROR) even on an idle server. The default grows to
     * it (raising max_body_bytes or max_item_bytes alone keeps working); a value set too small
     * is a mistake to name. */
    uint64_t largest_in = c->server.max_body_bytes;
    if (c->cache.enabled && c->cache.max_item_bytes > largest_in)
        largest_in = c->cache.max_item_bytes;
    if (c->server.max_inflight_bytes < largest_in &&
        ctx->layer[cfg_key_index_of("server.max_inflight_bytes")] == CFG_L_DEFAULT)
        ctx->c->server.max_inflight_bytes = largest_in;
    if (c->server.max_inflight_bytes < largest_in) {
        cfg_cross_label(ctx, src, sizeof src, "server.max_inflight_bytes", "server.max_body_bytes",
                        "cache.max_item_bytes", (const char *)NULL);
        return cfg_fail(ctx, src, "server.max_inflight_bytes",
                        "must be at least the largest request body or cache value (%llu: "
                        "server.max_body_bytes, cache.max_item_bytes), or such a request could "
                        "never be received, got %llu",
                        (unsigned long long)largest_in,
                        (unsigned long long)c->server.max_inflight_bytes);
    }
    if (c->cache.memcached_port && !c->cache.enabled) {
        cfg_cross_label(ctx, src, sizeof src, "cache.memcached_port", "cache.enabled",
                        (const char *)NULL);
        return cfg_fail(ctx, src, "cache.memcached_port",
                        "the memcached listener needs cache.enabled=true (or port 0 = off)");
    }
    const char *const id_keys[] = {c->cache.memcached_id_keys.snowflake,
                                   c->cache.memcached_id_keys.uuidv7,
                                   c->cache.memcached_id_keys.ulid};
    const char *const id_paths[] = {"cache.memcached_id_keys.snowflake",
                                    "cache.memcached_id_keys.uuidv7",
                                    "cache.memcached_id_keys.ulid"};
    for (int f = 0; f < 3; f++) {
        const char *k = id_keys[f];
        for (const char *q = k; *q; q++)
            if (*q <= ' ' || *q == 0x7f) {
                cfg_cross_label(ctx, src, sizeof src, id_paths[f], (const char *)NULL);
                return cfg_fail(ctx, src, id_paths[f],
                                "must be a memcached text key (no blank or control character), "
                                "got \"%s\"", k);
            }
        for (int e = 0; k[0] && e < f; e++) {
            if (!id_keys[e][0])
                continue;
            if (strcmp(k, id_keys[e]) == 0) {
                cfg_cross_label(ctx, src, sizeof src, id_paths[f], id_paths[e],
                                (const char *)NULL);
                return cfg_fail(ctx, src, id_paths[f], "must differ from %s (both \"%s\")",
                                id_paths[e], k);
            }
            /* a name K reserves K and every "K:<suffix>" (mc_id_key): a name starting with
             * another and ':' would share keys with it ("a:" too: "a::x" is in both) */
            int in = -1;
            size_t kn = strlen(k), en = strlen(id_keys[e]);
            if (kn > en && k[en] == ':' && memcmp(k, id_keys[e], en) == 0)
                in = e; /* k is in e's family */
            else if (en > kn && id_keys[e][kn] == ':' && memcmp(id_keys[e], k, kn) == 0)
                in = f;
            if (in >= 0) {
                int mem = in == e ? f : e;
                cfg_cross_label(ctx, src, sizeof src, id_paths[f], id_paths[e],
                                (const char *)NULL);
                return cfg_fail(ctx, src, id_paths[f],
                                "%s \"%s\" is in the key family of %s \"%s\" (a name K "
                                "reserves K and every \"K:<suffix>\"): choose names of which "
                                "none starts with another followed by ':'",
                                id_paths[mem], id_keys[mem], id_paths[in], id_keys[in]);
            }
        }
    }
    if (c->cache.max_item_bytes > c->cache.max_memory_bytes) {
        cfg_cross_label(ctx, src, sizeof src, "cache.max_item_bytes", "cache.max_memory_bytes",
                        (const char *)NULL);
        return cfg_fail(ctx, src, "cache.max_item_bytes",
                        "must be <= cache.max_memory_bytes (%llu), got %u",
                        (unsigned long long)c->cache.max_memory_bytes, c->cache.max_item_bytes);
    }
    if (c->cache.shards & (c->cache.shards - 1)) {
        cfg_cross_label(ctx, src, sizeof src, "cache.shards", (const char *)NULL);
        return cfg_fail(ctx, src, "cache.shards", "must be a power of two, got %u",
                        c->cache.shards);
    }
    if (c->auth.token[0] && c->auth.token_file[0]) {
        cfg_cross_label(ctx, src, sizeof src, "auth.token", "auth.token_file", (const char *)NULL);
        return cfg_fail(ctx, src, "auth.token",
                        "set either auth.token or auth.token_file, not both");
    }
    size_t token_len = strlen(c->auth.token);
    if (token_len && token_len < CFG_TOKEN_MIN) { /* the length only: the value is secret */
        cfg_cross_label(ctx, src, sizeof src, "auth.token", (const char *)NULL);
        return cfg_fail(ctx, src, "auth.token",
                        "must be at least %d bytes (or empty: no access control), got %zu",
                        CFG_TOKEN_MIN, token_len);
    }
    return 0;
}

/* The first ms the layout's timestamps cannot reach, as ISO-8601 (or "after 9999-..."). */
static void cfg_layout_end_text(const sf_layout *l, char *out, size_t outlen)
{
    uint64_t ticks = l->tick_max + 1, unit = l->unit_ms ? l->unit_ms : 1;
    if (l->epoch_ms <= CFG_EPOCH_MAX_MS && ticks <= (CFG_EPOCH_MAX_MS - l->epoch_ms) / unit)
        cfg_format_iso(l->epoch_ms + ticks * unit, out, outlen);
    else
        snprintf(out, outlen, "after 9999-12-31T23:59:59.999Z");
}

/* A preset fixes widths, unit and order. A key set above the defaults to another value
 * contradicts it and is refused (the operator has to pick one); an equal value passes, so
 * --check-config output, which prints every key, loads again. Keys left at their defaults take
 * the preset's values; the epoch is only a default the preset changes. */
static int cfg_apply_preset(cfg_ctx *ctx)
{
    cfg_snowflake *s = &ctx->c->snowflake;
    const sf_layout_preset *p = s->layout_preset;
    char src[CFG_PATH_MAX + 32];
    if (!p)
        return 0;
    const struct {
        const char *key;
        uint32_t *field;
        uint32_t fixed;
    } fixed[] = {
        {"snowflake.time_unit_ms", &s->time_unit_ms, p->unit_ms},
        {"snowflake.timestamp_bits", &s->timestamp_bits, p->timestamp_bits},
        {"snowflake.datacenter_bits", &s->datacenter_bits, p->datacenter_bits},
        {"snowflake.worker_bits", &s->worker_bits, p->worker_bits},
        {"snowflake.sequence_bits", &s->sequence_bits, p->sequence_bits},
    };
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) {
        size_t i = cfg_key_index_of(fixed[k].key);
        if (ctx->layer[i] != CFG_L_DEFAULT && *fixed[k].field != fixed[k].fixed) {
            cfg_origin_label(ctx, i, src, sizeof src);
            return cfg_fail(ctx, src, fixed[k].key, "layout %s fixes it at %u, got %u", p->name,
                            fixed[k].fixed, *fixed[k].field);
        }
        *fixed[k].field = fixed[k].fixed;
    }
    size_t i = cfg_key_index_of("snowflake.node_bits_low");
    if (ctx->layer[i] != CFG_L_DEFAULT && s->node_bits_low != p->node_bits_low) {
        cfg_origin_label(ctx, i, src, sizeof src);
        return cfg_fail(ctx, src, "snowflake.node_bits_low", "layout %s fixes it at %s, got %s",
                        p->name, p->node_bits_low ? "true" : "false",
                        s->node_bits_low ? "true" : "false");
    }
    s->node_bits_low = p->node_bits_low;
    if (ctx->layer[cfg_key_index_of("snowflake.epoch")] == CFG_L_DEFAULT)
        s->epoch_ms = p->epoch_ms;
    return 0;
}

/* JSON numbers are exact in JavaScript only up to 2^53 - 1, and only decimal IDs are numbers. */
static int cfg_check_json_ids(cfg_ctx *ctx)
{
    cfg_snowflake *s = &ctx->c->snowflake;
    char src[CFG_PATH_MAX + 32];
    if (!s->json_numbers)
        return 0;
    if (s->layout.id_bits > SF_JSON_SAFE_BITS) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.json_ids", "snowflake.layout",
                        "snowflake.timestamp_bits", "snowflake.datacenter_bits",
                        "snowflake.worker_bits", "snowflake.sequence_bits", (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.json_ids",
                        "number needs a layout of at most %d bits (this one has %u): larger "
                        "JSON numbers lose digits in JavaScript; use layout js53 or string",
                        SF_JSON_SAFE_BITS, (unsigned)s->layout.id_bits);
    }
    if (s->default_encoding != SF_ENC_DEC) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.json_ids", "snowflake.default_encoding",
                        (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.json_ids", "number needs default_encoding dec, got %s",
                        sf_enc_name(s->default_encoding));
    }
    return 0;
}

/* Not an error (the hard floor is SF_MIN_LIFETIME_YEARS), but time to plan a new epoch. */
static void cfg_lifetime_warning(cfg_snowflake *s, uint64_t now_ms)
{
    char ends[64];
    s->lifetime_years_left = sf_layout_years_left(&s->layout, now_ms);
    s->lifetime_warning[0] = '\0';
    if (s->lifetime_years_left >= s->lifetime_warning_years)
        return;
    cfg_layout_end_text(&s->layout, ends, sizeof ends);
    snprintf(s->lifetime_warning, sizeof s->lifetime_warning,
             "layout runs out of timestamps at %s (%.1f years): below "
             "snowflake.lifetime_warning_years=%u; plan a new epoch or layout before then, "
             "after it every ID request is refused",
             ends, s->lifetime_years_left, s->lifetime_warning_years);
}

static int cfg_check_layout(cfg_ctx *ctx, uint64_t now_ms)
{
    cfg_snowflake *s = &ctx->c->snowflake;
    char why[256], src[CFG_PATH_MAX + 32];
    if (cfg_apply_preset(ctx) != 0)
        return -1;
    if (sf_layout_init(&s->layout, s->timestamp_bits, s->datacenter_bits, s->worker_bits,
                       s->sequence_bits, s->epoch_ms, s->time_unit_ms, now_ms, why,
                       sizeof why) != 0) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.layout", "snowflake.epoch",
                        "snowflake.time_unit_ms", "snowflake.timestamp_bits",
                        "snowflake.datacenter_bits", "snowflake.worker_bits",
                        "snowflake.sequence_bits", (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake", "%s", why);
    }
    sf_layout_set_node_bits_low(&s->layout, s->node_bits_low);
    if (cfg_check_json_ids(ctx) != 0)
        return -1;
    if (s->random_sequence_start_bits >= s->sequence_bits) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.random_sequence_start_bits",
                        "snowflake.sequence_bits", "snowflake.layout", (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.random_sequence_start_bits",
                        "must be below sequence_bits (%u): the top sequence bit stays free for "
                        "the rest of the tick, got %u",
                        s->sequence_bits, s->random_sequence_start_bits);
    }
    cfg_lifetime_warning(s, now_ms);
    /* The lease must cover how far IDs may run ahead of the clock, with room to renew. */
    uint64_t ahead = sf_gen_ahead_ms_for(&s->layout, s->max_backward_ms, s->max_batch,
                                         s->random_sequence_start_bits);
    if (s->lease_ms < 2 * ahead) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.lease_ms", "snowflake.max_backward_ms",
                        "snowflake.max_batch", "snowflake.time_unit_ms", "snowflake.sequence_bits",
                        (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.lease_ms",
                        "must be at least %llu: twice how far IDs may run ahead of the clock "
                        "(max_backward_ms %u + the ticks of one max_batch + 1 tick = %llu ms), "
                        "got %u",
                        (unsigned long long)(2 * ahead), s->max_backward_ms,
                        (unsigned long long)ahead, s->lease_ms);
    }
    return 0;
}

/* "snowflaked-3" -> 3: the digits after the last '-'. */
static bool cfg_trailing_ordinal(const char *name, uint64_t *out)
{
    const char *dash = strrchr(name, '-');
    return dash && cfg_parse_uint(dash + 1, out);
}

static int cfg_resolve_worker(cfg_ctx *ctx, const char *src, uint64_t *id)
{
    cfg_snowflake *s = &ctx->c->snowflake;
    char host[256], shown[CFG_SHOW_MAX];
    const char *name, *what;
    switch (s->worker_source) {
    case CFG_WORKER_ORDINAL:
        /* Kubernetes >= 1.28 labels StatefulSet pods with their ordinal
         * (apps.kubernetes.io/pod-index), which the downward API passes as POD_INDEX. */
        name = getenv("POD_INDEX");
        if (name && *name) {
            cfg_show(shown, sizeof shown, name, false);
            if (!cfg_parse_uint(name, id))
                return cfg_fail(ctx, src, "snowflake.worker_id",
                                "ordinal: POD_INDEX must be a decimal integer, got %s", shown);
            snprintf(s->worker_origin, sizeof s->worker_origin, "ordinal POD_INDEX=%s", name);
            return 0;
        }
        name = getenv("POD_NAME");
        what = "POD_NAME=";
        if (!name || !*name) {
            if (gethostname(host, sizeof host) != 0)
                return cfg_fail(ctx, src, "snowflake.worker_id",
                                "ordinal: POD_NAME is not set and gethostname failed: %s",
                                strerror(errno));
            host[sizeof host - 1] = '\0';
            name = host;
            what = "hostname ";
        }
        cfg_show(shown, sizeof shown, name, false);
        if (!cfg_trailing_ordinal(name, id))
            return cfg_fail(ctx, src, "snowflake.worker_id",
                            "ordinal: %s%s does not end in -<number> (like snowflaked-3)", what,
                            shown);
        cfg_show(shown, sizeof shown, name, true);
        snprintf(s->worker_origin, sizeof s->worker_origin, "ordinal of %s%s", what, shown);
        return 0;
    case CFG_WORKER_ENV:
        name = getenv(s->worker_env);
        if (!name)
            return cfg_fail(ctx, src, "snowflake.worker_id",
                            "env:%s: environment variable %s is not set", s->worker_env,
                            s->worker_env);
        cfg_show(shown, sizeof shown, name, false);
        if (!cfg_parse_uint(name, id))
            return cfg_fail(ctx, src, "snowflake.worker_id",
                            "env:%s: must be a decimal integer, got %s=%s", s->worker_env,
                            s->worker_env, shown);
        snprintf(s->worker_origin, sizeof s->worker_origin, "env %s=%s", s->worker_env, name);
        return 0;
    default:
        *id = s->worker_id;
        cfg_copy(s->worker_origin, sizeof s->worker_origin, src);
        return 0;
    }
}

/* One "http://host:port" of snowflake.etcd.endpoints (len bytes at e). */
static const char *cfg_etcd_endpoint_problem(const char *e, size_t len, bool https)
{
    const char *scheme = https ? "https://" : "http://";
    size_t slen = strlen(scheme);
    if (len <= slen || strncmp(e, scheme, slen) != 0)
        return https ? "every endpoint must be https://host:port when one is"
                     : "each endpoint must be http://host:port or https://host:port";
    const char *host = e + slen, *end = e + len, *colon = NULL;
    for (const char *p = host; p < end; p++) {
        if (*p == '/' || *p == '@' || *p == '?' || *p == ' ' || (unsigned char)*p < 0x21)
            return "each endpoint must be http://host:port, without a path, user or spaces";
        if (*p == ':')
            colon = p;
    }
    if (!colon || colon == host)
        return "each endpoint must be http://host:port (the port is required)";
    uint64_t port;
    if (!dec_parse_u64(colon + 1, (size_t)(end - colon - 1), 65535, &port) || port == 0)
        return "the port must be 1..65535";
    return NULL;
}

/* worker_id "etcd": the endpoints, prefix and timing rules, and the worker range (resolved). */
static int cfg_check_etcd(cfg_ctx *ctx)
{
    cfg_snowflake *s = &ctx->c->snowflake;
    cfg_etcd *e = &s->etcd;
    char src[CFG_PATH_MAX + 32], shown[CFG_SHOW_MAX];
    size_t count = 0;
    cfg_origin_label(ctx, cfg_key_index_of("snowflake.etcd.endpoints"), src, sizeof src);
    if (!e->endpoints[0]) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.worker_id", "snowflake.etcd.endpoints",
                        (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.etcd.endpoints",
                        "required with worker_id \"etcd\" (http://host:port,...)");
    }
    bool https = strncmp(e->endpoints, "https://", 8) == 0;
    for (const char *p = e->endpoints;; p++) {
        size_t len = strcspn(p, ",");
        const char *why = cfg_etcd_endpoint_problem(p, len, https);
        if (why) {
            char one[CFG_SHOW_MAX];
            snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one - 1 ? len : sizeof one - 1),
                     p);
            cfg_show(shown, sizeof shown, one, false);
            return cfg_fail(ctx, src, "snowflake.etcd.endpoints", "%s: %s", shown, why);
        }
        if (++count > 16)
            return cfg_fail(ctx, src, "snowflake.etcd.endpoints", "at most 16 endpoints");
        p += len;
        if (!*p)
            break;
    }
    /* TLS: https:// needs a CA (fail closed: no system store), http:// takes no TLS settings (a
     * CA given for plaintext endpoints is a forgotten https://), a certificate needs its key. */
    bool any_tls = e->tls.ca_file[0] || e->tls.cert_file[0] || e->tls.key_file[0] ||
                   e->tls.server_name[0];
    if (https && !e->tls.ca_file[0]) {
        cfg_origin_label(ctx, cfg_key_index_of("snowflake.etcd.endpoints"), src, sizeof src);
        return cfg_fail(ctx, src, "snowflake.etcd.tls.ca_file",
                        "required with https:// endpoints (the CA that signed etcd's certificate)");
    }
    if (!https && any_tls) {
        cfg_origin_label(ctx, cfg_key_index_of("snowflake.etcd.endpoints"), src, sizeof src);
        return cfg_fail(ctx, src, "snowflake.etcd.endpoints",
                        "http:// endpoints with snowflake.etcd.tls.* set: use https://");
    }
    if (!e->tls.cert_file[0] != !e->tls.key_file[0]) {
        cfg_origin_label(ctx, cfg_key_index_of("snowflake.etcd.tls.cert_file"), src, sizeof src);
        return cfg_fail(ctx, src, "snowflake.etcd.tls.cert_file",
                        "snowflake.etcd.tls.cert_file and key_file go together");
    }
    const char *pre = e->prefix;
    size_t plen = strlen(pre);
    bool clean = true;
    for (const char *p = pre; *p; p++)
        clean = clean && (unsigned char)*p > 0x20 && *p != 0x7f;
    if (pre[0] != '/' || pre[plen - 1] == '/' || !clean) {
        cfg_origin_label(ctx, cfg_key_index_of("snowflake.etcd.prefix"), src, sizeof src);
        cfg_show(shown, sizeof shown, pre, false);
        return cfg_fail(ctx, src, "snowflake.etcd.prefix",
                        "must start with / and not end with one, without spaces or control "
                        "characters, got %s",
                        shown);
    }
    /* The fence (design-14 §2): we stop at our clock's  last renewal + TTL - margin; etcd
     * expires no earlier than TTL after it on its clock. Clocks whose rates differ by up to 1 %
     * need margin >= 2 % of the TTL; 100 ms on top for scheduling. */
    uint64_t ttl_ms = (uint64_t)e->ttl_s * 1000;
    if (e->fence_margin_ms < ttl_ms / 50 + 100 || e->fence_margin_ms > ttl_ms / 2) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.etcd.fence_margin_ms",
                        "snowflake.etcd.ttl_s", (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.etcd.fence_margin_ms",
                        "%u must be %llu..%llu for ttl_s=%u (at least 2 %% of the TTL + 100 ms "
                        "for clock-rate error, at most half of it)",
                        e->fence_margin_ms, (unsigned long long)(ttl_ms / 50 + 100),
                        (unsigned long long)(ttl_ms / 2), e->ttl_s);
    }
    if (e->request_timeout_ms >= ttl_ms / 4) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.etcd.request_timeout_ms",
                        "snowflake.etcd.ttl_s", (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.etcd.request_timeout_ms",
                        "%u must be below a quarter of the TTL (%llu ms, the renewal period) so a "
                        "stalled call cannot eat the fence margin",
                        e->request_timeout_ms, (unsigned long long)(ttl_ms / 4));
    }
    if (!e->auth_username[0] != !e->auth_password_file[0]) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.etcd.auth.username",
                        "snowflake.etcd.auth.password_file", (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.etcd.auth.username",
                        "the etcd user and its password_file go together (both, or neither for an "
                        "etcd without authentication)");
    }
    uint64_t max = s->layout.worker_max;
    if (e->worker_max == CFG_WORKER_MAX_AUTO)
        e->worker_max = (uint32_t)max;
    unsigned slots = s->per_thread_worker_ids ? ctx->c->server.threads : 1;
    cfg_cross_label(ctx, src, sizeof src, "snowflake.etcd.worker_min", "snowflake.etcd.worker_max",
                    "snowflake.worker_bits", (const char *)NULL);
    if (e->worker_max > max)
        return cfg_fail(ctx, src, "snowflake.etcd.worker_max",
                        "%u does not fit worker_bits=%u: must be 0..%llu", e->worker_max,
                        s->worker_bits, (unsigned long long)max);
    if (e->worker_min > e->worker_max)
        return cfg_fail(ctx, src, "snowflake.etcd.worker_min", "%u is above worker_max %u",
                        e->worker_min, e->worker_max);
    if ((uint64_t)e->worker_max - e->worker_min + 1 < slots)
        return cfg_fail(ctx, src, "snowflake.etcd.worker_min",
                        "workers %u..%u cannot hold the %u slots per_thread_worker_ids needs "
                        "(one per loop)",
                        e->worker_min, e->worker_max, slots);
    if (slots > 127)
        return cfg_fail(ctx, src, "server.threads",
                        "%u loops with per_thread_worker_ids and worker_id \"etcd\": one etcd "
                        "transaction claims every slot, and etcd allows at most 128 operations "
                        "in one",
                        slots);
    s->worker_id = e->worker_min; /* a placeholder until the claim; logs use the claim */
    snprintf(s->worker_origin, sizeof s->worker_origin,
             "etcd: claimed at start from workers %u..%u", e->worker_min, e->worker_max);
    return 0;
}

static int cfg_check_ids(cfg_ctx *ctx)
{
    cfg_snowflake *s = &ctx->c->snowflake;
    char src[CFG_PATH_MAX + 32];
    uint64_t id = 0;
    if (s->datacenter_id > s->layout.datacenter_max) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.datacenter_id",
                        "snowflake.datacenter_bits", (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.datacenter_id",
                        "%u does not fit datacenter_bits=%u: must be 0..%llu", s->datacenter_id,
                        s->datacenter_bits, (unsigned long long)s->layout.datacenter_max);
    }
    if (s->worker_source == CFG_WORKER_ETCD)
        return cfg_check_etcd(ctx);
    cfg_origin_label(ctx, cfg_key_index_of("snowflake.worker_id"), src, sizeof src);
    if (cfg_resolve_worker(ctx, src, &id) != 0)
        return -1;
    if (id > s->layout.worker_max) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.worker_id", "snowflake.worker_bits",
                        (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.worker_id",
                        "%llu (%s) does not fit worker_bits=%u: must be 0..%llu",
                        (unsigned long long)id, s->worker_origin, s->worker_bits,
                        (unsigned long long)s->layout.worker_max);
    }
    s->worker_id = (uint32_t)id;
    uint64_t last = id + ctx->c->server.threads - 1;
    if (s->per_thread_worker_ids && last > s->layout.worker_max) {
        cfg_cross_label(ctx, src, sizeof src, "snowflake.per_thread_worker_ids",
                        "snowflake.worker_id", "snowflake.worker_bits", "server.threads",
                        (const char *)NULL);
        return cfg_fail(ctx, src, "snowflake.per_thread_worker_ids",
                        "worker ids %llu..%llu (worker_id %llu + %u threads - 1) exceed the worker "
                        "max %llu (worker_bits=%u); lower server.threads or worker_id",
                        (unsigned long long)id, (unsigned long long)last, (unsigned long long)id,
                        ctx->c->server.threads, (unsigned long long)s->layout.worker_max,
                        s->worker_bits);
    }
    return 0;
}

typedef struct cfg_addr {
    int family;
    unsigned char a[16];
} cfg_addr;

static void cfg_addr_parse(const char *s, cfg_addr *out)
{
    memset(out, 0, sizeof *out);
    out->family = inet_pton(AF_INET, s, out->a) == 1 ? AF_INET : AF_INET6;
    if (out->family == AF_INET6 && inet_pton(AF_INET6, s, out->a) != 1)
        out->family = 0;
}

static bool cfg_addr_any(const cfg_addr *a)
{
    static const unsigned char zero[16] = {0};
    return memcmp(a->a, zero, a->family == AF_INET ? 4 : 16) == 0;
}

/* Would binding both addresses to one port collide? Equal addresses do; a wildcard collides with
 * its own family, and :: (dual-stack by default on Linux) with everything. */
static bool cfg_hosts_overlap(const char *h1, const char *h2)
{
    cfg_addr a, b;
    cfg_addr_parse(h1, &a);
    cfg_addr_parse(h2, &b);
    if (a.family == b.family)
        return memcmp(a.a, b.a, sizeof a.a) == 0 || cfg_addr_any(&a) || cfg_addr_any(&b);
    return (a.family == AF_INET6 && cfg_addr_any(&a)) || (b.family == AF_INET6 && cfg_addr_any(&b));
}

bool cfg_host_is_loopback(const char *host)
{
    static const unsigned char v6_loopback[16] = {[15] = 1};
    static const unsigned char v4_mapped[12] = {[10] = 0xff, [11] = 0xff};
    cfg_addr a;
    cfg_addr_parse(host, &a);
    if (a.family == AF_INET)
        return a.a[0] == 127;
    return a.family == AF_INET6 && (memcmp(a.a, v6_loopback, 16) == 0 ||
                                    (memcmp(a.a, v4_mapped, 12) == 0 && a.a[12] == 127));
}

static int cfg_check_listeners(cfg_ctx *ctx)
{
    const cfg *c = ctx->c;
    const struct {
        const char *port_key, *host_key, *host;
        uint32_t port;
    } l[] = {
        {"server.port", "server.host", c->server.host, c->server.port},
        {"cache.memcached_port", "cache.memcached_host", c->cache.memcached_host,
         c->cache.memcached_port},
        {"echo.tcp_port", "echo.tcp_host", c->echo.tcp_host, c->echo.tcp_port},
        {"server.tls.port", "server.host", c->server.host, c->server.tls.port},
        {"cache.memcached_tls.port", "cache.memcached_host", c->cache.memcached_host,
         c->cache.memcached_tls.port},
        {"echo.tcp_tls.port", "echo.tcp_host", c->echo.tcp_host, c->echo.tcp_tls.port},
    };
    char src[CFG_PATH_MAX + 32];
    for (size_t i = 1; i < sizeof l / sizeof l[0]; i++)
        for (size_t j = 0; j < i; j++) {
            if (!l[i].port || l[i].port != l[j].port || !cfg_hosts_overlap(l[i].host, l[j].host))
                continue;
            cfg_cross_label(ctx, src, sizeof src, l[i].port_key, l[i].host_key, l[j].port_key,
                            l[j].host_key, (const char *)NULL);
            return cfg_fail(ctx, src, l[i].port_key, "port %u on %s is already used by %s on %s",
                            l[i].port, l[i].host, l[j].port_key, l[j].host);
        }
    return 0;
}

/* A TLS port needs its certificate and key; a client check needs the CAs to check against. The
 * files themselves are read at start (net/tls.c), where OpenSSL says what is wrong with them. */
static int cfg_check_tls(cfg_ctx *ctx)
{
    const cfg *c = ctx->c;
    const struct {
        const char *sec;
        const cfg_tls *t;
    } l[] = {{"server.tls", &c->server.tls},
             {"cache.memcached_tls", &c->cache.memcached_tls},
             {"echo.tcp_tls", &c->echo.tcp_tls}};
    char src[CFG_PATH_MAX + 32], k1[64], k2[64], k3[64];
    for (size_t i = 0; i < sizeof l / sizeof l[0]; i++) {
        const cfg_tls *t = l[i].t;
        if (!t->port)
            continue;
        snprintf(k1, sizeof k1, "%s.port", l[i].sec);
        snprintf(k2, sizeof k2, "%s.cert_file", l[i].sec);
        snprintf(k3, sizeof k3, "%s.key_file", l[i].sec);
        if (!t->cert_file[0] || !t->key_file[0]) {
            cfg_cross_label(ctx, src, sizeof src, k1, k2, k3, (const char *)NULL);
            return cfg_fail(ctx, src, k1, "TLS on port %u needs %s and %s", t->port, k2, k3);
        }
        snprintf(k1, sizeof k1, "%s.verify_client", l[i].sec);
        snprintf(k2, sizeof k2, "%s.client_ca_file", l[i].sec);
        if (t->verify_client != CFG_VERIFY_NONE && !t->client_ca_file[0]) {
            cfg_cross_label(ctx, src, sizeof src, k1, k2, (const char *)NULL);
            return cfg_fail(ctx, src, k1, "\"%s\" needs %s (the CAs client certificates must "
                            "chain to)", cfg_verify_name(&t->verify_client), k2);
        }
    }
    /* A certificate is only seen on the HTTP TLS listener, and only when it asks for one. */
    const cfg_auth *au = &c->auth;
    if (au->client_certificates[0] &&
        (!c->server.tls.port || c->server.tls.verify_client == CFG_VERIFY_NONE)) {
        cfg_cross_label(ctx, src, sizeof src, "auth.client_certificates", "server.tls.port",
                        "server.tls.verify_client", (const char *)NULL);
        return cfg_fail(ctx, src, "auth.client_certificates",
                        "needs the HTTP TLS listener asking for client certificates: "
                        "server.tls.port and server.tls.verify_client \"optional\" or "
                        "\"required\" (%s)",
                        !c->server.tls.port ? "server.tls.port is 0"
                                            : "server.tls.verify_client is \"none\"");
    }
    if (au->token_and_certificate && (!au->client_certificates[0] ||
                                      (!au->token[0] && !au->token_file[0] && !ctx->hidden_src[0]))) {
        cfg_cross_label(ctx, src, sizeof src, "auth.credentials", "auth.client_certificates",
                        "auth.token", "auth.token_file", (const char *)NULL);
        return cfg_fail(ctx, src, "auth.credentials",
                        "\"token_and_certificate\" needs auth.client_certificates and a token "
                        "(auth.token or auth.token_file)");
    }
    return 0;
}

/* ---- public ---------------------------------------------------------------------------------- */

int cfg_load(cfg *c, const cfg_cli *cli, uint64_t now_ms, char *err, size_t errlen)
{
    cfg_ctx ctx;
    memset(c, 0, sizeof *c);
    memset(&ctx, 0, sizeof ctx);
    ctx.c = c;
    ctx.err = err;
    ctx.errlen = errlen;
    if (err && errlen)
        err[0] = '\0';

    /* The embedded default must set every key: it is the documentation of the full config. */
    if (cfg_apply_json(&ctx, cfg_embedded_json, cfg_embedded_json_len, "embedded config.json",
                       CFG_L_DEFAULT) != 0)
        return -1;
    for (size_t i = 0; i < CFG_NKEYS; i++)
        if (!ctx.seen[i])
            return cfg_fail(&ctx, "embedded config.json", cfg_keys[i].path,
                            "missing: config.json must list every key");

    if (cli && cli->config_path) {
        char *text = NULL;
        size_t len = 0;
        ctx.file = cli->config_path;
        if (cfg_read_file(&ctx, ctx.file, &text, &len) != 0)
            return -1;
        int rc = cfg_apply_json(&ctx, text, len, ctx.file, CFG_L_FILE);
        free(text);
        if (rc != 0)
            return -1;
    }
    if (cfg_apply_env(&ctx) != 0)
        return -1;
    if (cli && cfg_apply_flags(&ctx, cli) != 0)
        return -1;

    cfg_resolve_threads(c);
    if (cfg_check_hidden(&ctx) != 0 || cfg_check_limits(&ctx) != 0 ||
        cfg_check_layout(&ctx, now_ms) != 0 || cfg_check_ids(&ctx) != 0 ||
        cfg_check_listeners(&ctx) != 0 || cfg_check_tls(&ctx) != 0 ||
        cfg_check_sequences(&ctx) != 0)
        return -1;
    cfg_copy(c->source, sizeof c->source, ctx.file ? ctx.file : "defaults");
    return 0;
}

enum {
    CFG_OPT_WORKER_ID = 256,
    CFG_OPT_SET,
    CFG_OPT_CHECK,
    CFG_OPT_IGNORE_LEASE,
    CFG_OPT_PRINT_SCHEMA
};

int cfg_parse_args(int argc, char **argv, cfg_cli *cli, char *err, size_t errlen)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"port", required_argument, NULL, 'p'},
        {"threads", required_argument, NULL, 't'},
        {"worker-id", required_argument, NULL, CFG_OPT_WORKER_ID},
        {"set", required_argument, NULL, CFG_OPT_SET},
        {"check-config", no_argument, NULL, CFG_OPT_CHECK},
        {"print-schema", no_argument, NULL, CFG_OPT_PRINT_SCHEMA},
        {"ignore-corrupt-lease", no_argument, NULL, CFG_OPT_IGNORE_LEASE},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt, rc = 0;
    memset(cli, 0, sizeof *cli);
    if (err && errlen)
        err[0] = '\0';
    optind = 0; /* glibc: 0 re-initialises getopt completely, so tests can call this repeatedly */
    opterr = 0; /* we report errors ourselves; never print */
    while (rc == 0 && (opt = getopt_long(argc, argv, ":c:p:t:Vh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': cli->config_path = optarg; break;
        case 'p': cli->port = optarg; break;
        case 't': cli->threads = optarg; break;
        case CFG_OPT_WORKER_ID: cli->worker_id = optarg; break;
        case CFG_OPT_CHECK: cli->check_config = true; break;
        case CFG_OPT_PRINT_SCHEMA: cli->print_schema = true; break;
        case CFG_OPT_IGNORE_LEASE: cli->ignore_corrupt_lease = true; break;
        case 'V': cli->version = true; break;
        case 'h': cli->help = true; break;
        case CFG_OPT_SET:
            if (cli->nsets == CFG_MAX_SETS) {
                snprintf(err, errlen, "too many --set options (at most %d)", CFG_MAX_SETS);
                rc = -1;
            } else if (!strchr(optarg, '=') || optarg[0] == '=') {
                snprintf(err, errlen, "--set expects PATH=VALUE (like server.port=9090), got '%s'",
                         optarg);
                rc = -1;
            } else {
                cli->sets[cli->nsets++] = optarg;
            }
            break;
        case ':': /* only the last argument can lack its value, so argv[optind - 1] is it */
            if (strncmp(argv[optind - 1], "--", 2) == 0 || optopt <= 0 || optopt >= 256)
                snprintf(err, errlen, "option %s needs a value", argv[optind - 1]);
            else
                snprintf(err, errlen, "option -%c needs a value", optopt);
            rc = -1;
            break;
        default:
            if ((optopt == 'h' || optopt == 'V') && strncmp(argv[optind - 1], "--", 2) == 0)
                snprintf(err, errlen, "option %s takes no value", argv[optind - 1]);
            else if (optopt > 0 && optopt < 256)
                snprintf(err, errlen, "unknown option -%c (see --help)", optopt);
            else
                snprintf(err, errlen, "unknown option %s (see --help)", argv[optind - 1]);
            rc = -1;
            break;
        }
    }
    if (rc == 0 && optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s' (see --help)", argv[optind]);
        rc = -1;
    }
    return rc;
}

void cfg_usage(FILE *out, const char *prog)
{
    fprintf(
        out,
        "Usage: %s [options]\n"
        "\n"
        "Snowflake ID and cache network daemon (version %s).\n"
        "\n"
        "Options:\n"
        "  -c, --config FILE        JSON config file; keys it omits keep their defaults\n"
        "  -p, --port N             server.port\n"
        "  -t, --threads N          server.threads (0 = one per online CPU)\n"
        "      --worker-id V        snowflake.worker_id: a number, \"ordinal\" ($POD_INDEX, else\n"
        "                           the trailing -N of $POD_NAME or the hostname), \"env:NAME\"\n"
        "                           or \"etcd\" (claimed from snowflake.etcd.endpoints)\n"
        "      --set PATH=VALUE     set any key, e.g. --set snowflake.sync=mutex (repeatable)\n"
        "      --check-config       validate, print the effective config as JSON, exit\n"
        "      --print-schema       print every key (type, default, range, meaning) as JSON, exit\n"
        "      --ignore-corrupt-lease  start even if the lease file is unreadable\n"
        "  -V, --version            print the version and exit\n"
        "  -h, --help               print this help and exit\n"
        "\n"
        "Configuration layers, later ones win:\n"
        "  built-in defaults (config.json) < --config FILE < environment < flags\n"
        "  (among flags: --set in order, then --port, --threads, --worker-id)\n"
        "\n"
        "Every key can be set from the environment as SNOWFLAKED_ + its path upper-cased with\n"
        "dots as underscores: server.port -> SNOWFLAKED_SERVER_PORT, data_dir ->\n"
        "SNOWFLAKED_DATA_DIR. Booleans accept true/false, 1/0, yes/no, on/off.\n"
        "\n"
        "Exit status: 0 clean stop; 1 refused at start (data_dir, lease file, a port or identity\n"
        "another process holds, etcd) or a final snapshot/lease not written; 2 usage or\n"
        "configuration error; 75 the etcd identity lost (restart to claim afresh).\n"
        "Details: docs/operations.md, Exit codes.\n",
        prog, SF_VERSION);
}

/* ---- printing -------------------------------------------------------------------------------- */

static void cfg_print_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

/* sequences.namespaces as it loads again, every field given, tokens hidden. */
static void cfg_print_seqs(const cfg_sequences *sq, FILE *out)
{
    fputc('[', out);
    for (unsigned i = 0; i < sq->nns; i++) {
        const cfg_seq_ns *n = &sq->ns[i];
        fputs(i ? ", {\"name\": " : "{\"name\": ", out);
        cfg_print_str(out, n->name);
        fprintf(out,
                ", \"start\": %llu, \"block\": %llu, \"max\": %llu, \"adaptive\": %s, "
                "\"block_min\": %llu, \"block_max\": %llu, \"token\": ",
                (unsigned long long)n->start, (unsigned long long)n->block,
                (unsigned long long)n->max, n->adaptive ? "true" : "false",
                (unsigned long long)n->block_min, (unsigned long long)n->block_max);
        cfg_print_str(out, n->token[0] ? CFG_HIDDEN : "");
        fputc('}', out);
    }
    fputc(']', out);
}

static void cfg_print_value(const cfg *c, const cfg_key *k, FILE *out)
{
    const void *field = (const char *)c + k->off;
    uint32_t v32;
    uint64_t v64;
    char iso[48];
    switch (k->type) {
    case CFG_T_U32:
        memcpy(&v32, field, sizeof v32);
        fprintf(out, "%u", v32);
        break;
    case CFG_T_U32_OR_MAX:
        memcpy(&v32, field, sizeof v32);
        fprintf(out, v32 == CFG_WORKER_MAX_AUTO ? "\"max\"" : "%u", v32);
        break;
    case CFG_T_U64:
        memcpy(&v64, field, sizeof v64);
        fprintf(out, "%llu", (unsigned long long)v64);
        break;
    case CFG_T_BOOL: fputs(*(const bool *)field ? "true" : "false", out); break;
    case CFG_T_STR:
        cfg_print_str(out, (k->flags & CFG_F_SECRET) && *(const char *)field ? CFG_HIDDEN
                                                                             : (const char *)field);
        break;
    case CFG_T_ENUM: cfg_print_str(out, k->name(field)); break;
    case CFG_T_EPOCH:
        cfg_format_iso(c->snowflake.epoch_ms, iso, sizeof iso);
        cfg_print_str(out, iso);
        break;
    case CFG_T_WORKER:
        /* the choice, not the resolved number, so the output stays valid on another pod */
        if (c->snowflake.worker_source == CFG_WORKER_ORDINAL)
            fputs("\"ordinal\"", out);
        else if (c->snowflake.worker_source == CFG_WORKER_ETCD)
            fputs("\"etcd\"", out);
        else if (c->snowflake.worker_source == CFG_WORKER_ENV)
            fprintf(out, "\"env:%s\"", c->snowflake.worker_env);
        else
            fprintf(out, "%u", c->snowflake.worker_id);
        break;
    case CFG_T_SEQS: cfg_print_seqs(&c->sequences, out); break;
    case CFG_T_LIST: {
        const char *p = field;
        fputc('[', out);
        while (*p) {
            const char *nl = strchr(p, '\n');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            char one[CERTNAME_MAX + 1];
            snprintf(one, sizeof one, "%.*s", (int)len, p);
            if (p != (const char *)field)
                fputs(", ", out);
            cfg_print_str(out, one);
            p += len + (nl != NULL);
        }
        fputc(']', out);
        break;
    }
    }
}

/* The whole output loads again as a config file (-c): the sections have config.json's shape,
 * "resolved" (derived values, for humans and scripts) is ignored when a file is loaded, and a
 * secret printed as CFG_HIDDEN must be given by another layer (cfg_check_hidden). */
/* Length of the section part of a key path ("snowflake.etcd" of "snowflake.etcd.ttl_s"; 0 at
 * the top level) and how deep it is. */
static size_t cfg_section_len(const char *path, unsigned *depth)
{
    const char *last = strrchr(path, '.');
    *depth = 0;
    for (const char *p = path; last && p <= last; p++)
        *depth += *p == '.';
    return last ? (size_t)(last - path) : 0;
}

/* How many leading sections two section paths share. */
static unsigned cfg_common_sections(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned n = 0;
    size_t i = 0;
    for (; i < alen && i < blen && a[i] == b[i]; i++)
        if (a[i] == '.')
            n++;
    bool whole = (i == alen || a[i] == '.') && (i == blen || b[i] == '.');
    return alen && blen && whole ? n + 1 : n;
}

static void cfg_indent(FILE *out, unsigned depth)
{
    fprintf(out, "\n%*s", (int)(2 * depth + 2), "");
}

void cfg_print_json(const cfg *c, FILE *out)
{
    const char *open = ""; /* the path of the innermost open section ("" = top level) */
    size_t open_len = 0;
    unsigned open_depth = 0;
    bool first = true; /* nothing printed yet at the current level */
    fputs("{", out);
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const char *path = cfg_keys[i].path;
        unsigned depth;
        size_t sec_len = cfg_section_len(path, &depth);
        unsigned keep = cfg_common_sections(open, open_len, path, sec_len);
        for (; open_depth > keep; open_depth--) { /* close what this key is not in */
            cfg_indent(out, open_depth - 1);
            fputs("}", out);
            first = false;
        }
        while (open_depth < depth) { /* open the sections it is in */
            const char *name = path;
            for (unsigned d = 0; d < open_depth; d++)
                name = strchr(name, '.') + 1;
            size_t name_len = (size_t)(strchr(name, '.') - name);
            fputs(first ? "" : ",", out);
            cfg_indent(out, open_depth);
            fprintf(out, "\"%.*s\": {", (int)name_len, name);
            open_depth++;
            first = true;
        }
        open = path;
        open_len = sec_len;
        fputs(first ? "" : ",", out);
        cfg_indent(out, depth);
        fprintf(out, "\"%s\": ", strrchr(path, '.') ? strrchr(path, '.') + 1 : path);
        first = false;
        cfg_print_value(c, &cfg_keys[i], out);
    }
    for (; open_depth > 0; open_depth--) {
        cfg_indent(out, open_depth - 1);
        fputs("}", out);
    }

    const cfg_snowflake *s = &c->snowflake;
    const sf_layout *l = &s->layout;
    char ends[64];
    cfg_layout_end_text(l, ends, sizeof ends);
    fputs(",\n  \"resolved\": {\n    \"source\": ", out);
    cfg_print_str(out, c->source);
    if (s->worker_source == CFG_WORKER_ETCD) /* known after the claim: GET /metrics, the log */
        fputs(",\n    \"worker_id\": null,\n    \"worker_id_origin\": ", out);
    else
        fprintf(out, ",\n    \"worker_id\": %u,\n    \"worker_id_origin\": ", s->worker_id);
    cfg_print_str(out, s->worker_origin);
    fprintf(out,
            ",\n    \"threads\": %u,\n    \"layout_name\": \"%s\",\n    \"id_bits\": %u,\n"
            "    \"json_safe\": %s,\n    \"id_cap_per_second\": %.0f,\n"
            "    \"lifetime_ends\": \"%s\",\n    \"lifetime_years_left\": %.1f,\n"
            "    \"warnings\": [",
            c->server.threads, cfg_layout_name(&s->layout_preset), (unsigned)l->id_bits,
            l->id_bits <= SF_JSON_SAFE_BITS ? "true" : "false",
            l->unit_ms ? sf_gen_cap_per_second(l, s->random_sequence_start_bits) : 0.0, ends,
            s->lifetime_years_left);
    if (s->lifetime_warning[0]) {
        fputs("\n      ", out);
        cfg_print_str(out, s->lifetime_warning);
        fputs("\n    ", out);
    }
    fputs("]\n  }\n}\n", out);
}

/* The schema table as JSON, one key per line, for docs/configuration.md (test/docs/configuration.py
 * renders it). Defaults are those of the embedded config.json alone: no file, environment or flag
 * is read, so the output is the same wherever it runs. */
int cfg_print_schema(FILE *out)
{
    static const char *const types[] = {
        [CFG_T_U32] = "u32",       [CFG_T_U64] = "u64",
        [CFG_T_BOOL] = "bool",     [CFG_T_STR] = "string",
        [CFG_T_ENUM] = "enum",     [CFG_T_EPOCH] = "epoch",
        [CFG_T_WORKER] = "worker", [CFG_T_U32_OR_MAX] = "u32_or_max",
        [CFG_T_LIST] = "list",     [CFG_T_SEQS] = "namespaces",
    };
    static cfg defaults;
    cfg_ctx ctx;
    char err[256], env[96];
    memset(&defaults, 0, sizeof defaults);
    memset(&ctx, 0, sizeof ctx);
    ctx.c = &defaults;
    ctx.err = err;
    ctx.errlen = sizeof err;
    if (cfg_apply_json(&ctx, cfg_embedded_json, cfg_embedded_json_len, "embedded config.json",
                       CFG_L_DEFAULT) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    fputs("[", out);
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const cfg_key *k = &cfg_keys[i];
        cfg_env_name(k->path, env, sizeof env);
        fprintf(out, "%s\n  {\"key\": \"%s\", \"type\": \"%s\", \"default\": ", i ? "," : "",
                k->path, types[k->type]);
        cfg_print_value(&defaults, k, out);
        if (k->type == CFG_T_ENUM) {
            fputs(", \"choices\": [\"", out);
            for (const char *c = k->choices; *c; c++)
                fputs(*c == '|' ? "\", \"" : (char[]){*c, '\0'}, out);
            fputs("\"]", out);
        } else if (k->type != CFG_T_BOOL) {
            fprintf(out, ", \"min\": %llu, \"max\": %llu", (unsigned long long)k->min,
                    (unsigned long long)k->max);
        }
        fprintf(out, ", \"ipaddr\": %s, \"secret\": %s, \"env\": \"%s\", \"doc\": ",
                k->flags & CFG_F_IPADDR ? "true" : "false",
                k->flags & CFG_F_SECRET ? "true" : "false", env);
        cfg_print_str(out, k->doc);
        fputs("}", out);
    }
    fputs("\n]\n", out);
    return 0;
}
