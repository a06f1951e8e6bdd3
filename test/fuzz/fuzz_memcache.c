/* libFuzzer harness: the memcached text protocol, in-process, no sockets.
 *
 * Bytes -> memcache_proto.on_data of a connection (net/conn_fake.h) -> the command parser
 * (storage, retrieval, arithmetic, touch, flush_all, stats, and the meta commands mg ms md ma mn)
 * -> a real cache store. Replies land in the connection's output buffer and are discarded.
 *
 * Input: byte 0 is a flag byte, the rest is what the client sends.
 *   bits 0-2  how the bytes are cut into reads (fuzz_common.h)
 *   bit 3     slow reader: the peer takes 4 KiB per flush, and the output's high-water mark is
 *             1 KiB instead of the configured one (output piles up, the protocol sees
 *             conn_output_full and yields; a multiget pauses between keys and resumes)
 *   bit 4     tiny store (16 KiB, 4 KiB items, 2 shards): eviction and TOO_LARGE happen
 *   bit 5     the store's shard lock is a mutex instead of the spinlock (snowflake.sync=mutex)
 *   bit 6     the connection ends with the peer's FIN instead of a timeout
 *   bit 7     memcached -Y (cache.memcached_auth_file, memcached's t/authfile: foo:bar and
 *             baaaz:quux): the connection starts unauthenticated; "set a 0 0 7\r\nfoo bar\r\n"
 *             lets the rest in
 *   bits 3-7  also seed the read sizes.
 * Each input runs on a fresh object graph, built as the daemon builds it (app_build: the store
 * and the memcache server, with the rest the daemon has), and a fresh connection.
 *
 * Checked besides the sanitizers: no yield without progress (a busy loop in the real server),
 * the unstored item of a half-received command is released at the close (the store's memory
 * account returns to exactly its linked items), every pooled object is back in its pool, every
 * byte taken from the in-flight budget is given back, and the store's counters agree with its
 * contents. With the tiny store the in-flight budget is 1 KiB, so that values of 1..4 KiB are
 * refused by it (SERVER_ERROR out of memory, the data block swallowed).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "app/wiring.h"
#include "cache/store.h"
#include "config/config.h"
#include "fuzz_common.h"
#include "fuzz_conn.h"
#include "net/conn_fake.h"
#include "proto/memcache.h"
#include "util/clock.h"

static struct {
    cfg config;                  /* the embedded config.json; cache.* and sync change per input */
    cfg_cache cache;             /* its cache.* */
    sf_sync_mode sync;           /* its snowflake.sync (atomic: the store's spinlock) */
    uint64_t inflight;           /* its server.max_inflight_bytes */
    conn_fake_loop fl, fl_tight; /* the configured output limits; a 1 KiB high-water mark */
    app app;                     /* built per input */
    char auth_path[64];          /* memcached's t/authfile, written at start (bit 7) */
} G;

static void remove_auth_file(void)
{
    unlink(G.auth_path);
}

static void sink(const char *data, size_t len, void *arg)
{
    (void)arg;
    fuzz_dump(data, len);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[1024];
    fuzz_clean_environment();
    if (cfg_load(&G.config, NULL, clk_now(clk_system()), err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "embedded config: %s", err);
    G.cache = G.config.cache;
    G.sync = G.config.snowflake.sync;
    G.inflight = G.config.server.max_inflight_bytes;
    net_config nc;
    app_net_config(&G.config, &nc);
    if (conn_fake_loop_init(&G.fl, &nc, &memcache_proto, NULL, err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "loop: %s", err);
    nc.out_high_water = 1024;
    if (conn_fake_loop_init(&G.fl_tight, &nc, &memcache_proto, NULL, err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "loop: %s", err);
    snprintf(G.auth_path, sizeof G.auth_path, "/tmp/fuzz_memcache_auth.XXXXXX");
    int fd = mkstemp(G.auth_path);
    static const char authfile[] = "foo:bar\nbaaaz:quux\n";
    if (fd < 0 || write(fd, authfile, sizeof authfile - 1) != (ssize_t)(sizeof authfile - 1) ||
        close(fd) != 0)
        fuzz_fail(__FILE__, __LINE__, "cannot write the auth file %s", G.auth_path);
    atexit(remove_auth_file);
    return 0;
}

static void check_pools(conn_fake_loop *fl)
{
    net_loop *l = conn_fake_net_loop(fl);
    FUZZ_CHECK(counter_get(&l->listeners[0].conns.in_use) == 0, "a connection object leaked");
    FUZZ_CHECK(counter_get(&l->chunks.in_use) == 0, "%zu output chunks leaked",
               (size_t)counter_get(&l->chunks.in_use));
    FUZZ_CHECK(counter_get(&l->inbufs.in_use) == 0, "an input buffer leaked");
    FUZZ_CHECK(atomic_load(&fl->server.open_conns) == 0, "open connection count off");
    FUZZ_CHECK(budget_held(&G.app.inflight) == 0, "%llu in-flight bytes not given back",
               (unsigned long long)budget_held(&G.app.inflight));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    const char *in = (const char *)data + 1;
    size_t len = size - 1;

    /* The configured store, or a tiny one (bit 4); its lock follows snowflake.sync: the
     * configured one, or a mutex (bit 5); a fixed hash seed (reproducible). */
    G.config.cache = G.cache;
    G.config.server.max_inflight_bytes = (flags & 0x10) ? 1024 : G.inflight;
    if (flags & 0x10) {
        G.config.cache.max_memory_bytes = 16 * 1024;
        G.config.cache.max_item_bytes = 4096;
        G.config.cache.shards = 2;
    }
    G.config.snowflake.sync = (flags & 0x20) ? SF_SYNC_MUTEX : G.sync;
    if (flags & 0x80)
        snprintf(G.config.cache.memcached_auth_file, sizeof G.config.cache.memcached_auth_file,
                 "%s", G.auth_path);
    char err[256];
    app_options o = {.net = conn_fake_net_server(&G.fl), .cache_seed = 1};
    FUZZ_CHECK(app_build(&G.app, &G.config, &o, err, sizeof err) == 0, "app: %s", err);
    conn_fake_loop *fl = (flags & 0x08) ? &G.fl_tight : &G.fl;
    conn_fake_set_ctx(fl, G.app.mc);

    conn_fake f;
    FUZZ_CHECK(conn_fake_open(fl, &f) == 0, "cannot open a connection");
    if (flags & 0x08)
        f.write_budget = 4096;
    f.sink = sink;
    fuzz_converse(&f, in, len, flags, flags & 0x40, "memcache");
    conn_fake_free(&f);

    check_pools(fl);
    fuzz_store_check(G.app.cache, clk_now(clk_system()));
    conn_fake_set_ctx(fl, NULL);
    app_free(&G.app);
    return 0;
}
