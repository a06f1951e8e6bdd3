/* The memcached text protocol (memcached 1.6 doc/protocol.txt) over the cache store.
 *
 * memcache_proto plugs into a net listener whose ctx is a memcache_server. Commands: get, gets,
 * gat, gats, set, add, replace, append, prepend, cas, delete, incr, decr, touch, flush_all,
 * version, verbosity, stats, quit, the meta commands mg, ms, md, ma, mn, and the operators'
 * commands shutdown, slabs, lru, lru_crawler, cache_memlimit, debugtime, and watch (memcached's
 * live logging, memcache_watch.h). Replies and error
 * strings are byte-exact as memcached 1.6.18 (the few deliberate differences are listed at the
 * top of memcache.c; test_memcache_diff.py compares both servers session by session).
 *
 * Values may arrive in any number of reads: the item is allocated when its command line is
 * parsed and the data bytes are copied into it as they come, so nothing but the command line is
 * ever buffered. A command line longer than 2048 bytes without a newline closes the connection,
 * except get/gets, whose keys are then answered as they arrive (multigets are unbounded, as in
 * memcached). Fairness: at most reqs_per_event commands per read, and none while the
 * output is above the high-water mark; the rest waits for a later loop turn. A get/gets/gat/gats
 * also pauses between keys at the high-water mark and resumes as the output drains, so its
 * answer streams through a bounded buffer whatever its total size.
 *
 * Authentication (memcached's -Y authfile, memcache_server_set_auth_file): a connection's first
 * command must be a "set" whose data block is "<user> <password>" from the file; until then every
 * line answers CLIENT_ERROR unauthenticated, byte for byte as memcached 1.6.18 (memcache.c
 * auth_line_in; the file's rules in memcache_auth.h). The check runs on the bytes the transport
 * hands over, whatever carries them (plaintext or TLS).
 *
 * "stats" and its subcommands answer as memcached 1.6.18 does (memcache_stats.c). At
 * max_connections a connection is told "ERROR Too many open connections" and closed, as memcached
 * does; connections are accepted at connect (pooled idle clients count) and wait under the idle
 * timeout until a command starts.
 *
 * Threads: the protocol runs on loop threads; memcache_server_new/free on the main thread,
 * before the loops start and after they are joined. Counters are per loop, single writer,
 * relaxed atomics.
 */
#ifndef SF_PROTO_MEMCACHE_H
#define SF_PROTO_MEMCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"
#include "net/proto.h"
#include "proto/memcache_auth.h"
#include "snowflake/generator.h"
#include "util/budget.h"

#define MEMCACHE_MAX_PIPELINE 20   /* default reqs_per_event: memcached's -R default */
#define MEMCACHE_LINE_MAX     2048 /* an unterminated command line longer than this closes */

typedef struct memcache_server memcache_server;

extern const proto memcache_proto;

/* What memcached sets with command-line flags (memcache_admin.c has the commands they govern). */
typedef struct memcache_options {
    bool shutdown_enabled;   /* -A: "shutdown [graceful]" stops the daemon (calls `shutdown`) */
    bool flush_enabled;      /* false = -F: flush_all answers CLIENT_ERROR flush_all not allowed */
    bool cas_enabled;        /* false = -C: CAS values read 0, cas compares against 0 */
    bool debug_commands;     /* memcached-debug's "debugtime" (moves this listener's clock) */
    bool watch_enabled;      /* false = -W: watch answers CLIENT_ERROR watch commands not allowed */
    /* false = -X (--disable-dumping): the commands that list keys are refused, as memcached
     * answers: "stats cachedump" (CLIENT_ERROR stats cachedump not allowed), "lru_crawler
     * metadump" (ERROR metadump not allowed); here also "stats detail on|dump" (per-prefix
     * counts; CLIENT_ERROR stats detail not allowed), which memcached's -X leaves on */
    bool dump_enabled;
    /* false: "cache_memlimit" answers CLIENT_ERROR cache_memlimit not allowed (memcached has no
     * switch for it: anyone could shrink the store and evict what HTTP clients stored) */
    bool memlimit_enabled;
    uint32_t reqs_per_event; /* -R: commands per read before yielding (counted in conn_yields) */
    uint32_t item_size_max;  /* -I: memcached's slab classes derive from it (metadump's cls) */
    /* -o idle_timeout: the listener's own idle timeout (the caller applies it to the listener,
     * net_server_set_idle_timeout); 0 = the server's applies. Set, "stats" shows idle_kicks and
     * "stats settings" this value, as memcached with the flag. */
    uint32_t idle_timeout_s;
    /* false = -o no_lru_crawler (or no_modern): "lru_crawler crawl|metadump" are refused until
     * "lru_crawler enable", as memcached started without its crawler thread */
    bool lru_crawler;
    /* The TLS twin of this listener (memcached -Z), for "stats settings" ssl_* lines, which
     * memcached's TLS build prints whether -Z is on or not: tls_on, then the files (strings
     * the caller keeps for the server's life; NULL = none, printed as memcached does), the
     * client verification as memcached's ssl_verify_mode (0 none, 1 request, 2 require), the
     * TLS 1.2 cipher list (NULL = the default), TLS 1.3 as the minimum, resumption (tickets:
     * memcached's ssl_session_cache) on. */
    bool tls_on;
    const char *tls_cert_file, *tls_key_file, *tls_ca_file, *tls_cipher_list;
    unsigned tls_verify_mode;
    bool tls_min13, tls_resumption, tls_ktls; /* tls_ktls: memcached's -o ssl_kernel_tls */
    /* Called (on a loop thread) by "shutdown" (graceful false) and "shutdown graceful": must
     * only start the stop, e.g. signal the main thread. NULL: the command is accepted, nothing
     * stops (in-process graphs). */
    void (*shutdown)(void *arg, bool graceful);
    void *shutdown_arg;
    /* Called (on a loop thread) by memcached's "refresh_certs": reloads the TLS certificates
     * and returns 0, or -1 with reply holding the whole reply line (memcached's "Error ...\r\n").
     * NULL: no TLS here, the reply is memcached's "Error TLS not enabled". */
    int (*refresh_certs)(void *arg, char *reply, size_t replylen);
    void *refresh_certs_arg;
} memcache_options;

/* memcached's defaults: flush, CAS, watch, dumping, cache_memlimit and the LRU crawler on, the
 * rest off, reqs_per_event MEMCACHE_MAX_PIPELINE. */
void memcache_options_default(memcache_options *o);

/* NULL when out of memory. nloops = the net server's loop count. Options: the defaults. */
memcache_server *memcache_server_new(cache_store *store, unsigned nloops);
/* Before the loops start. */
void memcache_server_set_options(memcache_server *s, const memcache_options *o);
/* The budget values being received take from as their bytes arrive (util/budget.h, shared with
 * the HTTP server's bodies), or NULL (the default): unbounded. Past it a storage command is
 * refused with "SERVER_ERROR out of memory storing object", its data block swallowed and the
 * key's old value kept. Before the loops start. */
void memcache_server_set_budget(memcache_server *s, byte_budget *inflight);
void memcache_server_free(memcache_server *s); /* NULL is fine */

/* memcached's -Y: every connection must authenticate first, with an entry of the auth file at
 * path (memcache_auth.h), read now. Before the loops start. Returns 0, or MC_AUTH_EIO (cannot be
 * read) / MC_AUTH_EFORMAT (malformed, "<path>: line N: ...") with the reason in err; a file other
 * users may read is logged as a warning. Passwords are never logged. */
int memcache_server_set_auth_file(memcache_server *s, const char *path, char *err, size_t errlen);
/* Reads the auth file again (memcached does on SIGHUP): new checks use the new table at once;
 * connections already authenticated stay so. Any thread, the loops running. Returns 0 with the
 * number of entries in *entries, or the error as above, the table in use kept. */
int memcache_server_reload_auth(memcache_server *s, unsigned *entries, char *err, size_t errlen);
/* The entries of the auth file in use; 0 without one. */
unsigned memcache_server_auth_entries(memcache_server *s);

/* IDs over the memcached protocol, as kayac/go-katsubushi serves them (memcache_ids.c): a get,
 * gets, gat, gats or mg of a reserved key answers a new ID of that key's format instead of a
 * cached value: "VALUE <key> 0 <len>\r\n<id>\r\n" (the Snowflake ID in decimal, the UUIDv7
 * canonical, the ULID in its 26 characters); a get naming the key n times gets n distinct IDs,
 * increasing in the order of the keys. The IDs come from the same generators as HTTP's /id,
 * /uuid and /ulid (lease, clock-behind and fencing alike): a refusal answers
 * "SERVER_ERROR <sf_gen_strerror>" and nothing else of that get. Every command that would write
 * or delete a reserved key is refused (MC_ID_KEY_REFUSED); the keys never enter the store.
 * Two formats give the suffix of "K:<suffix>" a meaning: MC_ID_SEQUENCE's is the namespace
 * (segment mode, seq/seq.h: "get seq:orders" draws /seq/orders' next number; the bare K is a
 * CLIENT_ERROR), MC_ID_TYPEID's the TypeID's type (the bare K: a TypeID without prefix). Their
 * refusals are HTTP's words: "SERVER_ERROR <text> (retry)" where HTTP answers 503,
 * "CLIENT_ERROR <text>" where it answers 4xx. */
typedef enum {
    MC_ID_SNOWFLAKE = 0,
    MC_ID_UUID7 = 1,
    MC_ID_ULID = 2,
    MC_ID_SEQUENCE = 3,
    MC_ID_TYPEID = 4,
    MC_ID_FORMATS
} mc_id_format;
#define MC_ID_KEY_REFUSED "CLIENT_ERROR key is reserved for IDs: read it with get, gets or mg"
typedef struct seq_table seq_table;
typedef struct memcache_ids {
    const char *keys[MC_ID_FORMATS];    /* by mc_id_format; NULL or "" = that format is off */
    sf_gen *const *gens[MC_ID_FORMATS]; /* ngens each: one, or one per net loop (TypeID: the
                                           UUIDv7 ones; MC_ID_SEQUENCE: none, NULL) */
    unsigned ngens;
    seq_table *seq; /* MC_ID_SEQUENCE's namespaces; NULL: none (every namespace is unknown) */
} memcache_ids;
/* Before the loops start. A key K reserves K and every "K:<suffix>" (suffix 1+ bytes; see
 * mc_id_key). The keys must be valid text keys (cache_key_valid) whose families do not overlap:
 * none equal to another or starting with another and ':' (the configuration checks it); returns
 * 0, or -1 when they are not. */
int memcache_server_set_ids(memcache_server *s, const memcache_ids *ids);
/* The format whose reserved key family this key is in, or -1 (also without reserved keys). Any
 * thread. */
int memcache_server_id_key(const memcache_server *s, const char *key, size_t klen);
/* IDs issued over the protocol by format (mc_id_format), for /metrics. Any thread. */
void memcache_server_ids_issued(const memcache_server *s, uint64_t out[MC_ID_FORMATS]);

/* For /metrics: credentials checked (memcached's auth_cmds, never reset) and refused
 * (auth_errors), and reloads of the auth file that took and that were refused. Any thread. */
typedef struct memcache_auth_stats {
    uint64_t checks, failures;
    uint64_t reloads, reload_failures;
} memcache_auth_stats;
void memcache_server_auth_stats(const memcache_server *s, memcache_auth_stats *out);

/* For /metrics: command lines answered on the server's listeners (plain and TLS), every
 * command counted once whatever it does (memcached's cmd_* count keys and kinds instead): the
 * memcached side of a pod's request rate. Never reset. Any thread. */
uint64_t memcache_server_commands(const memcache_server *s);

#endif
