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
 * Each input runs on a fresh object graph, built as the daemon builds it (app_build: generator,
 * HTTP server, API routes, store — the configured size, or tiny when bits 3 and 4 are both set,
 * so eviction happens) and one fresh connection.
 *
 * Checked besides the sanitizers: the output is a sequence of HTTP/1.1 responses (each starts
 * with a status line), the protocol never yields without progress (a busy loop in the real
 * server), every pooled object (connection, output chunk, request head) is back in its pool after
 * the close, every byte taken from the in-flight budget is given back, and the store's counters
 * agree with its contents. With the tiny store the in-flight budget is tiny too (4 KiB), so
 * bodies are refused at their head and chunked ones as they grow (503).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "app/wiring.h"
#include "config/config.h"
#include "fuzz_common.h"
#include "fuzz_conn.h"
#include "net/conn_fake.h"
#include "proto/http.h"
#include "util/clock.h"

#define TOKEN "fuzz-token"

static struct {
    cfg config;      /* the embedded config.json; auth.* and cache.* change per input */
    cfg_cache cache; /* its cache.*, for the inputs with the configured store */
    uint64_t inflight; /* its server.max_inflight_bytes */
    clk_fake clock;
    conn_fake_loop fl;
    app app; /* built per input by app_build: generator, HTTP server, API, store */
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
    uint64_t now = clk_now(clk_system());
    /* The real configuration: the embedded config.json, validated by cfg_load. */
    if (cfg_load(&G.config, NULL, now, err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "embedded config: %s", err);
    G.cache = G.config.cache;
    G.inflight = G.config.server.max_inflight_bytes;
    /* The generator's clock steps 1 ms per read: no sleeping, deterministic. */
    clk_fake_init(&G.clock, now, 1, 1);
    net_config nc;
    app_net_config(&G.config, &nc);
    if (conn_fake_loop_init(&G.fl, &nc, &http_proto, NULL, err, sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "loop: %s", err);
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
    http_server_pool_stats(G.app.http, &heads);
    FUZZ_CHECK(counter_get(&l->listeners[0].conns.in_use) == 0, "a connection object leaked");
    FUZZ_CHECK(counter_get(&l->chunks.in_use) == 0, "%zu output chunks leaked",
               (size_t)counter_get(&l->chunks.in_use));
    FUZZ_CHECK(counter_get(&l->inbufs.in_use) == 0, "an input buffer leaked");
    FUZZ_CHECK(heads.in_use == 0, "%llu request head buffers leaked",
               (unsigned long long)heads.in_use);
    FUZZ_CHECK(atomic_load(&G.fl.server.open_conns) == 0, "open connection count off");
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

    /* The configured store, or a tiny one so that eviction happens; a fixed hash seed
     * (reproducible). The token and protect_reads as the flags say. */
    bool small = (flags & 0x18) == 0x18;
    G.config.cache = G.cache;
    G.config.server.max_inflight_bytes = small ? 4096 : G.inflight;
    if (small) {
        G.config.cache.max_memory_bytes = 16 * 1024;
        G.config.cache.max_item_bytes = 4096;
        G.config.cache.shards = 2;
    }
    unsigned auth = (flags >> 4) & 3;
    snprintf(G.config.auth.token, sizeof G.config.auth.token, "%s", auth >= 2 ? TOKEN : "");
    G.config.auth.protect_reads = auth == 3;
    char err[256];
    app_options o = {.net = conn_fake_net_server(&G.fl), .clock = &G.clock.base, .cache_seed = 1};
    FUZZ_CHECK(app_build(&G.app, &G.config, &o, err, sizeof err) == 0, "app: %s", err);
    conn_fake_set_ctx(&G.fl, G.app.http);
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
    fuzz_store_check(G.app.cache, clk_now(clk_system()));
    conn_fake_set_ctx(&G.fl, NULL);
    app_free(&G.app);
    loop->draining = false;
    atomic_store(&G.fl.server.draining, false);
    return 0;
}
