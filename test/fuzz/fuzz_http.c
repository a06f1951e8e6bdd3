/* libFuzzer harness: HTTP end to end, in-process, no sockets.
 *
 * Bytes -> http_proto.on_data of a connection (net/conn_fake.h: the real conn, pools, wheel and
 * output buffer; reads, flushes and timeouts simulated as conn.c does them) -> llhttp (strict) ->
 * the router -> the real handlers registered by api_register: /id, /ids, /id/{id} with a real
 * generator, /cache/{key} with a real store, /echo, /healthz, /readyz, /metrics. Responses land
 * in the connection's output buffer and are checked lightly, then discarded.
 *
 * Input: byte 0 is a flag byte, the rest is what the client sends.
 *   bits 0-2  how the bytes are cut into reads (fuzz_common.h)
 *   bit 3     slow reader: the peer takes 4 KiB per flush, so output piles up to the high-water
 *             mark (the protocol sees conn_output_full, the connection pauses)
 *   bits 4-5  access control: 0-1 none, 2 a token for writes, 3 a token for everything
 *   bit 6     the connection ends with the peer's FIN instead of a header/idle timeout
 *   bit 7     with bit 6: the server is draining (every response says Connection: close)
 *   bits 3-7  also seed the read sizes.
 * Each input runs on a fresh cache store (the configured size, or tiny when bits 3 and 4 are both
 * set, so eviction happens) and one fresh connection.
 *
 * Checked besides the sanitizers: the output is a sequence of HTTP/1.1 responses (each starts
 * with a status line), the protocol never yields without progress (a busy loop in the real
 * server), every pooled object (connection, output chunk, request head) is back in its pool after
 * the close, and the store's counters agree with its contents.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "app/wiring.h"
#include "cache/store.h"
#include "config/config.h"
#include "fuzz_common.h"
#include "fuzz_conn.h"
#include "http/http.h"
#include "net/conn_fake.h"
#include "snowflake/clock.h"
#include "snowflake/generator.h"

#define TOKEN "fuzz-token"

static struct {
    cfg config;
    sf_fake_clock clock;
    sf_gen *gen;
    sf_gen *gens[1];
    http_server *http;
    conn_fake_loop fl;
    api_ctx api;
    cache_store_config store_big, store_small;
} G;

/* Output check: the stream starts with an HTTP/1.1 status line. (Walking response by response
 * would need to know which ones answer HEAD: they carry a Content-Length but no body.) */
typedef struct out_check {
    uint64_t total;
    char head[9];
} out_check;

static void sink(const char *data, size_t len, void *arg)
{
    out_check *o = arg;
    fuzz_dump(data, len);
    for (size_t i = 0; i < len && o->total + i < sizeof o->head; i++)
        o->head[o->total + i] = data[i];
    o->total += len;
}

static void setup(void)
{
    char err[1024];
    fuzz_clean_environment();
    uint64_t now = sf_clock_now(sf_clock_system());
    /* The real configuration: the embedded config.json, validated by cfg_load. */
    if (cfg_load(&G.config, NULL, now, err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "embedded config: %s", err);
    G.config.server.threads = 1;

    /* The generator, on a clock that steps 1 ms per read: no sleeping, deterministic. No lease
     * file: not lease-guarded. */
    sf_fake_clock_init(&G.clock, now, 1, 1);
    G.gen = aligned_alloc(64, sizeof *G.gen);
    sf_gen_config gc;
    app_gen_config(&G.config, 0, &G.clock.base, &gc);
    if (!G.gen || sf_gen_init(G.gen, &gc, err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "generator: %s", err);
    G.gens[0] = G.gen;

    net_config nc;
    app_net_config(&G.config, &nc);
    if (conn_fake_loop_init(&G.fl, &nc, &http_proto, NULL, err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "loop: %s", err);
    http_limits hl;
    app_http_limits(&G.config, &hl);
    G.http = http_server_new(&hl, conn_fake_net_server(&G.fl), err, sizeof err);
    if (!G.http)
        fuzz_fail(__FILE__, __LINE__, "http: %s", err);
    conn_fake_set_ctx(&G.fl, G.http);

    /* The configured store, but always the spinlock and a fixed hash seed (reproducible). */
    app_cache_config(&G.config, &G.store_big);
    G.store_big.lock = CACHE_LOCK_SPIN;
    G.store_big.seed = 1;
    G.store_small = (cache_store_config){
        .max_memory_bytes = 16 * 1024, .max_item_bytes = 4096, .shards = 2, .seed = 1};

    api_ctx *a = &G.api;
    a->config = &G.config;
    a->gens = G.gens;
    a->ngens = 1;
    a->keeper = NULL; /* no lease file: the generator is not lease-guarded */
    a->http = G.http;
    a->net = conn_fake_net_server(&G.fl);
    a->loops = aligned_alloc(64, sizeof(api_loop));
    if (!a->loops)
        fuzz_fail(__FILE__, __LINE__, "out of memory");
    memset(a->loops, 0, sizeof(api_loop));
    atomic_store(&a->listening, true);
    a->cache = cache_store_new(&G.store_big, err, sizeof err); /* registers the cache route */
    if (!a->cache)
        fuzz_fail(__FILE__, __LINE__, "cache: %s", err);
    if (api_register(G.http, a) != 0)
        fuzz_fail(__FILE__, __LINE__, "api_register failed");
    cache_store_free(a->cache);
    a->cache = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setup();
    return 0;
}

static void check_pools(void)
{
    net_loop *l = conn_fake_net_loop(&G.fl);
    pool_stats heads;
    http_server_pool_stats(G.http, &heads);
    FUZZ_CHECK(POOL_LOAD(l->listeners[0].conns.in_use) == 0, "a connection object leaked");
    FUZZ_CHECK(POOL_LOAD(l->chunks.in_use) == 0, "%zu output chunks leaked",
               (size_t)POOL_LOAD(l->chunks.in_use));
    FUZZ_CHECK(POOL_LOAD(l->inbufs.in_use) == 0, "an input buffer leaked");
    FUZZ_CHECK(heads.in_use == 0, "%llu request head buffers leaked",
               (unsigned long long)heads.in_use);
    FUZZ_CHECK(atomic_load(&G.fl.server.open_conns) == 0, "open connection count off");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    const char *in = (const char *)data + 1;
    size_t len = size - 1;

    char err[256];
    bool small = (flags & 0x18) == 0x18;
    cache_store *store = cache_store_new(small ? &G.store_small : &G.store_big, err, sizeof err);
    FUZZ_CHECK(store != NULL, "cache: %s", err);
    G.api.cache = store;
    unsigned auth = (flags >> 4) & 3;
    G.api.token = auth >= 2 ? TOKEN : NULL;
    G.api.token_len = auth >= 2 ? strlen(TOKEN) : 0;
    G.config.auth.protect_reads = auth == 3;
    bool eof = flags & 0x40, draining = (flags & 0xc0) == 0xc0;
    net_loop *loop = conn_fake_net_loop(&G.fl);
    loop->draining = draining;
    atomic_store(&G.fl.server.draining, draining);

    conn_fake f;
    FUZZ_CHECK(conn_fake_open(&G.fl, &f) == 0, "cannot open a connection");
    out_check oc = {0};
    f.sink = sink;
    f.sink_arg = &oc;
    if (flags & 0x08)
        f.write_budget = 4096;

    fuzz_converse(&f, in, len, flags, eof, "HTTP"); /* a timeout: 408 or the idle close */
    conn_fake_free(&f);

    if (oc.total > 0) {
        FUZZ_CHECK(oc.total >= sizeof oc.head && memcmp(oc.head, "HTTP/1.1 ", 9) == 0,
                   "output does not start with an HTTP/1.1 status line");
    }
    check_pools();
    fuzz_store_check(store, sf_clock_now(sf_clock_system()));
    G.api.cache = NULL;
    cache_store_free(store);
    loop->draining = false;
    atomic_store(&G.fl.server.draining, false);
    return 0;
}
