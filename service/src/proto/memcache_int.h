/* Internal to the memcached protocol module: included by memcache.c, memcache_meta.c and
 * memcache_stats.c and memcache_watch.c only,
 * never from outside service/src/proto (the public side is memcache.h). It holds what the two
 * files share: the per-loop counters and the server object, the connection state, the tokens,
 * the reply and number helpers, and the meta commands' entry points that dispatch calls.
 *
 * memcache.c: the classic commands, dispatch, the input (parsed in place) and the server object.
 * memcache_meta.c: the meta commands mg, ms, md, ma (mn is answered by dispatch).
 * memcache_admin.c: the operators' commands (shutdown, slabs, lru, lru_crawler, cache_memlimit,
 * debugtime) and the listener's clock (mc_now).
 * memcache_stats.c: "stats" and its subcommands, the reset baselines, "stats detail".
 * memcache_watch.c: watch, memcached's live logging (memcache_watch.h).
 * memcache_auth.c: memcached's auth file (-Y) and the credentials' check (memcache_auth.h); the
 * unauthenticated connection's input is memcache.c's.
 * memcache_ids.c: the reserved ID keys (memcache.h memcache_server_set_ids): their IDs for the
 * retrieval commands, reserved per get line.
 */
#ifndef SF_PROTO_MEMCACHE_INT_H
#define SF_PROTO_MEMCACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cache/store.h"
#include "net/conn.h"
#include "net/loop.h"
#include "obs/log.h"
#include "proto/memcache.h"
#include "proto/memcache_auth.h"
#include "proto/memcache_watch.h"
#include "seq/seq.h"
#include "util/clock.h"
#include "util/budget.h"
#include "util/counter.h"
#include "util/perloop.h"
#include "util/version.h"

/* What `version` and `stats` report: the memcached protocol level we implement first (clients
 * and conformance checkers such as memccapable parse it to decide which behaviour to expect),
 * then who we are. */
#define MEMCACHED_COMPAT "1.6.18"
#define MC_VERSION       MEMCACHED_COMPAT "-snowflaked-" SF_VERSION

#define MC_REL_MAX    2592000 /* exptimes up to 30 days are relative */
#define MC_OPAQUE_MAX 32      /* memcached refuses a meta O(paque) token longer (the O included) */

/* Per-loop counters: single writer (the loop, util/counter.h), summed by "stats". The incr/decr
 * counters are ma's only (incr/decr count in the store); "stats" adds the two. store_* count
 * storage commands refused for size or memory (memcached's store_too_large / store_no_memory),
 * conn_yields the reads cut short by opts.reqs_per_event (memcached -R). */
typedef struct mc_loop {
    _Atomic uint64_t cmd_get, cmd_set, cmd_flush, cmd_touch, cmd_meta, total_items;
    _Atomic uint64_t conns_opened, conns_closed, conn_yields;
    _Atomic uint64_t incr_hits, incr_misses, decr_hits, decr_misses;
    _Atomic uint64_t store_too_large, store_no_memory;
    _Atomic uint64_t idle_kicks; /* connections closed by the idle timeout (memcache.c) */
    /* memcached -Y: credentials checked against the auth file, and those refused (memcached
     * counts neither an unauthenticated command nor a badly formed credentials block) */
    _Atomic uint64_t auth_cmds, auth_errors;
    /* command lines answered (every command, IDs and errors included): the request rate of
     * /metrics' snowflaked_memcached_commands_total, which an autoscaler scales on */
    _Atomic uint64_t commands;
    _Atomic uint64_t ids_issued[MC_ID_FORMATS]; /* reserved keys answered (memcache_ids.c) */
} mc_loop;

/* The settings memcached's admin commands change at run time (memcache_admin.c); any loop may
 * write them, "stats settings" reads them. */
typedef struct mc_admin {
    _Atomic bool crawler_enabled;   /* lru_crawler enable|disable (memcached's default: on) */
    _Atomic bool walk_busy;         /* a crawl or metadump runs (one at a time, as memcached) */
    _Atomic uint32_t crawler_sleep; /* lru_crawler sleep: accepted, reported (no pacing here) */
    _Atomic uint32_t crawler_tocrawl;
    _Atomic uint32_t slab_automove; /* slabs automove 0|1|2: accepted, reported (no slabs) */
    _Atomic uint64_t automove_ratio; /* slabs automove ratio: a double's bits, reported */
    _Atomic uint64_t flushed_ms;     /* the moment the last flush_all took effect, 0 = never */
    _Atomic int64_t clock_offset_ms; /* debugtime N: added to this listener's clock */
    _Atomic uint64_t clock_paused;   /* debugtime p: the frozen clock (ms), 0 = running */
} mc_admin;

typedef struct mc_stats mc_stats; /* memcache_stats.c: reset baselines, the detail table */

/* A memcache listener's ctx (memcache_server_new): the store, and one mc_loop per net loop. */
struct memcache_server {
    cache_store *store;
    mc_watch watch; /* its flags word is read by every command: next to `store` */
    uint64_t started_ms;
    perloop loops;              /* mc_loop, one per net loop */
    memcache_options opts;
    mc_admin admin;
    mc_stats *stats;            /* mc_stats_new */
    _Atomic bool detail_on;     /* "stats detail on": per-prefix counts (mc_detail_record) */
    _Atomic uint32_t verbosity; /* the last "verbosity" level, shown by "stats settings" */
    byte_budget *inflight;      /* values being received (mc_value_hold), or NULL: unbounded */
    /* memcached -Y (memcache_server_set_auth_file): set before the loops start, never cleared */
    bool auth_on;
    char *auth_path;         /* the file, as "stats settings" names it (auth_enabled_ascii) */
    pthread_mutex_t auth_mu; /* guards auth: the loops check under it, a reload swaps it */
    mc_auth_table *auth;
    _Atomic uint64_t auth_reloads, auth_reload_failures; /* memcache_server_reload_auth */
    /* IDs (memcache_server_set_ids): set before the loops start, read-only after */
    bool ids_on;                             /* some format has a reserved key */
    uint8_t id_klen[MC_ID_FORMATS];          /* 0 = the format is off */
    char id_key[MC_ID_FORMATS][CACHE_KEY_MAX];
    sf_gen *const *id_gens[MC_ID_FORMATS];
    unsigned id_ngens;
    seq_table *id_seq; /* MC_ID_SEQUENCE's namespaces, or NULL */
};

/* What the bytes of a connection are, in mc_conn.state. */
typedef enum {
    MC_LINE = 0,  /* waiting for a command line */
    MC_DATA,      /* receiving a storage command's data block: into m->item, or staged */
    MC_SWALLOW,   /* discarding a refused data block */
    MC_GET_CONT,  /* the rest of a get line: keys are answered as they arrive, or as the
                   * output drains (the keys not yet answered stay in the input) */
    MC_SKIP_LINE, /* discarding the rest of a failed long get line */
    MC_WALK,      /* lru_crawler crawl/metadump in slices (memcache_admin.c); the command's
                   * "\n" stays in the input until it ends, so the connection is offered its
                   * input again on every loop turn it yields */
    MC_WATCH,     /* a watcher (memcache_watch.c): log lines out, input ignored */
    MC_AUTH_DATA, /* unauthenticated: the data block of the credentials' "set" (mc_auth_rx) */
} mc_state;

/* The credentials' data block as it arrives, "<user> <password>" (memcached splits it as a
 * command line: on ' ', a NUL ends it; more tokens are ignored): the two tokens' bytes while
 * they fit (longer ones match no entry), kept nowhere else. */
typedef struct mc_auth_rx {
    uint32_t tlen[2]; /* the user's and the password's lengths */
    uint8_t ntok;     /* tokens begun (counted up to 3) */
    bool in_tok, nul;
    bool big; /* a block memcached's read buffer cannot hold: closed once that much came */
    char buf[MC_AUTH_CRED_MAX]; /* the user's bytes, then the password's */
} mc_auth_rx;

/* A connection's protocol state (proto.state_size: zeroed at open), used on its loop only. */
typedef struct mc_conn {
    conn *c;
    memcache_server *srv;
    mc_loop *ml;
    cache_item *item; /* MC_DATA: the unstored item being filled, or NULL: staged */
    obuf stage;       /* MC_DATA without item: the value bytes received so far */
    uint32_t held;    /* bytes of srv->inflight taken for them (as they arrived) */
    size_t line_rest; /* bytes after the command line in the read that holds it (line_in) */
    /* MC_DATA without item: the item to make once the value is in (mc_store_begin) */
    uint64_t pend_exp;
    uint32_t pend_flags;
    uint8_t pend_klen, pend_marks;
    union { /* never both: a connection authenticates before it stores anything */
        char pend_key[CACHE_KEY_MAX];
        mc_auth_rx auth; /* MC_AUTH_DATA */
    };
    bool authed; /* memcached -Y: set once the credentials matched (at open without -Y) */
    uint64_t cas_in;
    uint64_t need; /* MC_DATA / MC_SWALLOW: bytes still expected (value + "\r\n") */
    uint32_t vlen;
    uint8_t state, mode;
    bool noreply;
    bool get_cas, get_touch; /* MC_GET_CONT: gets / gat(s), with get_exp */
    bool in_cmd;             /* a command is partly received (the header timeout runs) */
    bool get_paused;         /* a get paused on a full output (its resumption is progress) */
    bool get_any;            /* MC_GET_CONT: the line named a key (else it ends in ERROR) */
    uint64_t get_exp;        /* gat(s): the new expiry */
    const char *get_stop;    /* set by cmd_get when it pauses: the first key not answered */
    bool walk_dump;          /* MC_WALK: metadump (lines out), else crawl (silent) */
    bool clock_moved;        /* debugtime ran: mc_data reads the clock again */
    uint64_t walk_cursor;    /* MC_WALK: cache_store_scan's cursor */
    uint64_t walk_classes;   /* MC_WALK metadump: bit i = slab class i asked for */
    char tail[2]; /* the two bytes after the value: must be "\r\n" */
    /* ms: what the reply after the data block needs, noted when the line is parsed (memcached
     * stashes the same): the return flags O, k, c in request order, the opaque, b and q. */
    bool meta, meta_b, meta_q;
    uint8_t meta_nret, meta_olen;
    char meta_ret[3];
    char meta_opaque[MC_OPAQUE_MAX];
    uint64_t last_cmd_ms; /* when the last command line was parsed ("stats conns") */
    /* watch (memcache_watch.c) */
    bool resp_stacked;          /* a reply of this read is still unsent (memcached's resp stack) */
    uint8_t close_reason;       /* MC_CLOSE_*, when the protocol knows why it closes */
    bool peer_known;            /* peer_addr holds the peer's address */
    int cfd;                    /* the socket, as memcached's cfd= names the connection */
    struct mc_watcher *watcher; /* MC_WATCH: this connection's watcher */
    uint8_t peer_addr[28];      /* a struct sockaddr_in / _in6, for conn_close lines */
} mc_conn;

/* A token of a command line: p[0..n), inside the line, not NUL-terminated. */
typedef struct mc_tok {
    const char *p;
    size_t n;
} mc_tok;

static inline bool tok_is(const mc_tok *t, const char *s)
{
    size_t n = strlen(s);
    return t->n == n && memcmp(t->p, s, n) == 0;
}

/* memcached's set_noreply_maybe: the last token is "noreply". */
static inline bool last_is_noreply(const mc_tok *t, size_t nt)
{
    return nt > 0 && tok_is(&t[nt - 1], "noreply");
}

/* ---- output ------------------------------------------------------------------------------- */

/* Writes s[0..n) to the connection, nothing when the command is noreply (m->noreply). */
static inline void out(mc_conn *m, const char *s, size_t n)
{
    if (!m->noreply)
        conn_write(m->c, s, n);
}

/* out() of a string literal with "\r\n" appended. */
#define OUT(m, lit) out((m), lit "\r\n", sizeof(lit "\r\n") - 1)

/* Client bytes (a key or its prefix) that go into a reply line another client or an operator
 * reads (stats detail dump, stats cachedump): control characters escaped as the log does
 * (log_escape_controls), so a key stored in base64 (ms b) or looked up with control bytes cannot
 * forge lines or drive a terminal. dst holds MC_ESCAPED_MAX(n) bytes. Keys of the text rule
 * (0x21..0x7e) come out unchanged, as memcached prints them. */
#define MC_ESCAPED_MAX(n) (4 * (n))
static inline size_t mc_escaped(const char *src, size_t n, char *dst)
{
    return log_escape_controls(src, n, dst, MC_ESCAPED_MAX(n), NULL);
}

/* ---- parsing helpers (memcache.c) --------------------------------------------------------- */

/* A number token read as memcached's safe_strtoull: true with *out_v set, else *out_v untouched. */
bool mc_parse_u64(const mc_tok *t, uint64_t *out_v);
/* As mc_parse_u64, then refused (false) above UINT32_MAX where memcached truncates. */
bool mc_parse_u32(const mc_tok *t, uint32_t *out_v);
/* As memcached's safe_strtol, refused (false) outside int32 where memcached truncates. */
bool mc_parse_i32(const mc_tok *t, int64_t *out_v);

/* ---- data blocks (memcache.c) -------------------------------------------------------------- */

/* A storage command's length token (classic <bytes>, ms <datalen>) read as the size of the data
 * block that follows the line: 0..INT32_MAX - 2, as memcached takes it, else -1 (no block size is
 * known: a negative or unreadable length, as in memcached, is refused and nothing swallowed). */
int64_t mc_data_len(const mc_tok *t);
/* The data block of a refused storage command is discarded (MC_SWALLOW, vlen + 2 bytes whatever
 * they are), so a value is never read as commands; nothing when vlen < 0. Every refusal of a line
 * whose length reads (mc_data_len) goes through here: the key, flags, exptime, cas or meta flags
 * being wrong, the value too large, no memory. */
void mc_swallow(mc_conn *m, int64_t vlen);
/* out() of err[0..errlen) and "\r\n" (nothing under noreply), then mc_swallow(vlen). */
void mc_store_refuse(mc_conn *m, const char *err, size_t errlen, int64_t vlen);
/* The item a storage command makes once its line is accepted (the caller has set m->meta,
 * m->mode, m->cas_in and the meta reply fields). */
typedef struct mc_value {
    const char *key;
    size_t klen;
    int64_t vlen; /* mc_data_len */
    uint32_t flags;
    uint64_t expiry_ms;
    unsigned marks; /* CACHE_ITEM_* */
} mc_value;

/* The one way into MC_DATA. A value whose block is whole in the read that holds its line (the
 * common case) is received into its item, allocated now. Any other is checked now (bad key,
 * too large: refused and swallowed) and staged in pooled chunks as its bytes arrive, taking them
 * from the in-flight budget as they come (a line whose value never comes holds nothing); the
 * item is allocated once the block is in. Past the budget (a length it could not hold now, or a
 * staged byte it cannot take), the command is refused with SERVER_ERROR out of memory storing
 * object and its block swallowed, and the key's old value stays: the refusal comes from other
 * clients' bytes in flight, not from the cache (unlike a failed allocation, below). */
void mc_store_begin(mc_conn *m, const mc_value *v, uint64_t now);

/* A storage command whose item cannot be made (err from cache_item_new_ex: CLIENT_ERROR for a
 * bad key or argument, SERVER_ERROR for too large or no memory), answered, counted and its block
 * swallowed (mc_swallow(vlen)). With drop_old (a failed allocation), the key's old value is
 * dropped as memcached drops it: a classic set, an ms whatever its mode. */
void mc_store_failed(mc_conn *m, const char *key, size_t klen, int err, int64_t vlen,
                     bool drop_old, uint64_t now);

/* A storage command refused for its size or for memory (cache_item_new or cache_store_item
 * answered TOO_LARGE or NO_MEMORY): counted where memcached counts its failed item_alloc
 * (store_too_large / store_no_memory). The store reserves memory when the item is stored, not
 * when it is allocated, so under -M (no evictions) the refusal usually comes at the store. */
static inline void mc_count_refusal(mc_conn *m, int r)
{
    counter_add(r == CACHE_TOO_LARGE ? &m->ml->store_too_large : &m->ml->store_no_memory, 1);
}

/* The value being received is stored or dropped: its staged bytes go back to the chunk pool and
 * to the budget. */
static inline void mc_value_release(mc_conn *m)
{
    obuf_reset(&m->stage);
    if (m->held) {
        budget_give(m->srv->inflight, m->held);
        m->held = 0;
    }
}

/* memcached exptime -> absolute ms (0 = never). Negative: already expired. */
static inline uint64_t expiry_ms(int64_t t, uint64_t now_ms)
{
    if (t == 0)
        return 0;
    if (t < 0)
        return 1; /* long past: invisible at once */
    if (t <= MC_REL_MAX)
        return now_ms + (uint64_t)t * 1000;
    return (uint64_t)t * 1000;
}

/* ---- IDs over the protocol (memcache_ids.c) ---------------------------------------------- */

/* The format of a reserved key, or -1: one load per key without them. A configured name K
 * reserves a family: K itself and every "K:<suffix>" (suffix 1+ bytes), so a key-hashing client
 * or proxy spreads `get K:1 K:2 ...` over a fleet; "K:" alone stays a cache key. The families
 * never overlap (memcache_server_set_ids, the configuration), so the first match is the only. */
static inline int mc_id_key(const memcache_server *s, const char *key, size_t klen)
{
    if (!s->ids_on)
        return -1;
    for (int f = 0; f < MC_ID_FORMATS; f++) {
        size_t n = s->id_klen[f];
        if (n && (klen == n || (klen > n + 1 && key[n] == ':')) &&
            memcmp(s->id_key[f], key, n) == 0)
            return f;
    }
    return -1;
}

/* A get line's sequence keys: at most this many keys, of at most this many namespaces (the
 * numbers are taken before anything is written, into the caller's stack). */
#define MC_SEQ_KEYS_MAX 128
#define MC_SEQ_NS_MAX   16
typedef struct mc_seq_draw {
    seq_ns *ns;
    uint32_t want, used; /* keys of this namespace on the line, answered so far */
    uint32_t at;         /* its numbers: mc_id_spans.nums[at .. at + want) */
} mc_seq_draw;

/* The IDs a get line's keys take, reserved before anything is written: per format the slots
 * (one reservation of the generator for all of that format's keys) and how many are used; the
 * sequence numbers per namespace (one seq_take each). */
typedef struct mc_id_spans {
    sf_gen *g[MC_ID_FORMATS];
    sf_span span[MC_ID_FORMATS];
    uint32_t want[MC_ID_FORMATS], used[MC_ID_FORMATS];
    mc_seq_draw draw[MC_SEQ_NS_MAX];
    unsigned ndraw;
    uint64_t nums[MC_SEQ_KEYS_MAX];
} mc_id_spans;

/* Counts the reserved keys among the blank-separated keys of p[0..n) and reserves that many IDs
 * of each format, all or none: true (sp->want[f] may all be 0), or false with the error line
 * written: "SERVER_ERROR <why>" for a refusal of a generator, CLIENT_ERROR for more keys of a
 * format than snowflake.max_batch, a bad TypeID type, a bad or unknown sequence namespace;
 * a namespace's refusal in seq_refusal's words. */
bool mc_ids_reserve(mc_conn *m, const char *p, size_t n, mc_id_spans *sp);
/* Whether sequence numbers taken for the line are still unanswered: the get must not pause
 * (its resumed rest would take them again, a hole). */
static inline bool mc_ids_pending(const mc_id_spans *sp)
{
    return sp->want[MC_ID_SEQUENCE] != sp->used[MC_ID_SEQUENCE];
}
/* The VALUE block of the next reserved ID of format f, for key (gets: cas 0). false with the
 * error line written when the random source fails (UUIDv7, ULID, TypeID). */
bool mc_ids_value(mc_conn *m, mc_id_spans *sp, int f, const char *key, size_t klen, bool with_cas);
#define MC_ID_TEXT_MAX 96 /* a TypeID's 90 characters, a UUID's 36, a Snowflake ID's 20 digits */
/* One new ID of format f for key as text into out (MC_ID_TEXT_MAX): its length, or 0 with the
 * error line written (mg). Counted. */
size_t mc_ids_one(mc_conn *m, int f, const char *key, size_t klen, char *out);

/* ---- stats (memcache_stats.c) ------------------------------------------------------------- */

/* The stats state of a server: NULL when out of memory. */
mc_stats *mc_stats_new(void);
void mc_stats_free(mc_stats *st); /* NULL is fine */
/* "stats ...": t[0..nt) the command line's tokens (t[0] is "stats"); writes the whole reply. */
void mc_cmd_stats(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now);

/* "stats detail on": counts a get (hit or miss), a set or a delete of key under its prefix (the
 * bytes before the first ':'; keys without one are not counted), as memcached. One relaxed load
 * when detail is off (the default); when on, a short mutex hold per key (memcached: its global
 * stats lock), a debugging mode. */
typedef enum { MC_DETAIL_GET, MC_DETAIL_HIT, MC_DETAIL_SET, MC_DETAIL_DEL } mc_detail_kind;
void mc_detail_record_slow(memcache_server *s, const char *key, size_t klen, mc_detail_kind k);
static inline void mc_detail_record(memcache_server *s, const char *key, size_t klen,
                                    mc_detail_kind k)
{
    if (atomic_load_explicit(&s->detail_on, memory_order_relaxed))
        mc_detail_record_slow(s, key, klen, k);
}

/* ---- meta commands (memcache_meta.c) ------------------------------------------------------ */

/* Each takes the command line's tokens t[0..nt) (t[0] the command name) and writes the reply. */

/* me <key> [b]: memcached's debug line for an item, or EN. */
void mc_meta_me(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now);
/* mg <key> <flags>*: the whole command. */
void mc_meta_mg(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now);
/* ms <key> <datalen> <flags>*: an error (the data block then swallowed, MC_SWALLOW, once its
 * length is known), or m->item allocated, the reply noted in m->meta* and MC_DATA entered. */
void mc_meta_ms(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now);
/* memcache.c's store_done, once an ms data block is in with its "\r\n": stores `it` (takes the
 * reference) and writes the reply mc_meta_ms noted. */
void mc_meta_ms_done(mc_conn *m, cache_item *it, uint64_t now);
/* md <key> <flags>*: the whole command. */
void mc_meta_md(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now);
/* ma <key> <flags>*: the whole command. */
void mc_meta_ma(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now);

/* ---- operators' commands (memcache_admin.c) ------------------------------------------------ */

/* memcached's uriencode: every byte but [A-Za-z0-9-._~] as %XX. dst holds 3 * n + 1; returns
 * the length written (dst is NUL-terminated). */
size_t mc_uri_encode(const char *src, size_t n, char *dst);
/* The memcached size class (1-based) the store counts an item of these lengths in
 * (cache_store_size_class of its accounted size: the class "stats items", "me" and metadump
 * name). */
unsigned mc_slab_clsid(const memcache_server *s, size_t klen, size_t vlen, uint32_t flags);

/* This listener's clock in ms: the system clock, moved by debugtime when debug commands are on
 * (HTTP does not see the move). Inline: it runs once per read, and without debug commands it is
 * the system clock and nothing else. */
uint64_t mc_debug_now(const memcache_server *s);
static inline uint64_t mc_now(const memcache_server *s)
{
    return s->opts.debug_commands ? mc_debug_now(s) : clk_now(clk_system());
}

/* slabs automove ratio: kept for "stats settings" (memcached's settings.slab_automove_ratio). */
void mc_admin_set_ratio(mc_admin *a, double ratio);
double mc_admin_ratio(const mc_admin *a);

/* Each takes the command line's tokens t[0..nt) and writes the reply (memcached's exact lines). */
void mc_admin_shutdown(mc_conn *m, const mc_tok *t, size_t nt);
void mc_admin_refresh_certs(mc_conn *m, const mc_tok *t, size_t nt);
void mc_admin_slabs(mc_conn *m, const mc_tok *t, size_t nt);
void mc_admin_lru(mc_conn *m, const mc_tok *t, size_t nt);
void mc_admin_memlimit(mc_conn *m, const mc_tok *t, size_t nt);
void mc_admin_debugtime(mc_conn *m, const mc_tok *t, size_t nt);
/* lru_crawler ...: crawl and metadump enter MC_WALK (the caller leaves the line's "\n"). */
void mc_admin_lru_crawler(mc_conn *m, const mc_tok *t, size_t nt, uint64_t now);
/* MC_WALK: one bounded slice of the walk. True once it ended (walk_busy released, MC_LINE). */
bool mc_admin_walk(mc_conn *m, uint64_t now);
/* A connection closing in MC_WALK gives the walk up. */
void mc_admin_close(mc_conn *m);

#endif
