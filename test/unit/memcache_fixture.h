/* The memcached server of the unit tests that drive the protocol without a socket
 * (test_memcache_stream.c, test_memcache_auth.c): the daemon's own object graph (app_build: the
 * store and the memcache server) on a loop of in-memory connections (net/conn_fake.h), built
 * from the embedded config.json with the test's changes, and one connection fed by hand.
 *
 * Use: mc_fixture_config (the embedded configuration, then change f->config and the net
 * overrides), mc_fixture_start, mc_fixture_run per connection, mc_fixture_free. Failures are
 * check assertions. Single-threaded, like a loop.
 */
#ifndef SF_TEST_MEMCACHE_FIXTURE_H
#define SF_TEST_MEMCACHE_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>

#include "app/app.h"
#include "config/config.h"
#include "net/conn_fake.h"

typedef struct mc_fixture {
    cfg config; /* the embedded config.json after mc_fixture_config; change before start */
    /* Applied over the configuration's net settings by mc_fixture_start; 0 keeps them.
     * mc_fixture_config sets read_buffer to 64 KiB, so that "one read" is one read for every
     * input of the tests. */
    size_t read_buffer, out_high_water;
    conn_fake_loop fl;
    app app;
} mc_fixture;

/* What one connection did (mc_fixture_run). */
typedef struct mc_fixture_result {
    int rc;             /* the last conn_fake_feed result */
    bool open;          /* still open after the input (rc OK and not closing) */
    size_t max_pending; /* the most output queued at once */
} mc_fixture_result;

void mc_fixture_config(mc_fixture *f);
void mc_fixture_start(mc_fixture *f);
void mc_fixture_free(mc_fixture *f);

/* What a connection wrote (mc_fixture_collect appends it): NUL-terminated; more than fits fails
 * the test. */
typedef struct mc_fixture_out {
    char buf[1 << 20];
    size_t n;
} mc_fixture_out;
void mc_fixture_collect(const char *data, size_t len, void *out); /* a conn_fake_sink */

/* One connection fed in[0..len) cut before each of cuts[0..ncuts) (ascending; none: one read),
 * the peer taking at most `budget` bytes per write (SIZE_MAX: everything) and then everything
 * left; the bytes it wrote go to sink(arg). Closed and released before returning. */
mc_fixture_result mc_fixture_run(mc_fixture *f, const char *in, size_t len, const size_t *cuts,
                                 size_t ncuts, size_t budget, conn_fake_sink sink, void *arg);

#endif
