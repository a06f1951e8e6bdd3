/* The unit tests' memcached server without sockets: see memcache_fixture.h. */
#include "memcache_fixture.h"

#include <check.h>
#include <string.h>

#include "app/wiring.h"
#include "proto/memcache.h"
#include "util/clock.h"

void mc_fixture_config(mc_fixture *f)
{
    char err[512];
    int rc = cfg_load(&f->config, NULL, clk_now(clk_system()), err, sizeof err);
    ck_assert_msg(rc == 0, "embedded config: %s", err);
    f->read_buffer = 64 * 1024;
    f->out_high_water = 0;
}

void mc_fixture_start(mc_fixture *f)
{
    char err[512];
    net_config nc;
    app_net_config(&f->config, &nc);
    if (f->read_buffer)
        nc.read_buffer = f->read_buffer;
    if (f->out_high_water)
        nc.out_high_water = f->out_high_water;
    int rc = conn_fake_loop_init(&f->fl, &nc, &memcache_proto, NULL, err, sizeof err);
    ck_assert_msg(rc == 0, "loop: %s", err);
    app_options o = {.net = conn_fake_net_server(&f->fl), .cache_seed = 1};
    rc = app_build(&f->app, &f->config, &o, err, sizeof err);
    ck_assert_msg(rc == 0, "app: %s", err);
    conn_fake_set_ctx(&f->fl, f->app.mc);
}

void mc_fixture_free(mc_fixture *f)
{
    conn_fake_loop_free(&f->fl);
    app_free(&f->app);
}

mc_fixture_result mc_fixture_run(mc_fixture *f, const char *in, size_t len, const size_t *cuts,
                                 size_t ncuts, size_t budget, conn_fake_sink sink, void *arg)
{
    conn_fake c;
    ck_assert_int_eq(conn_fake_open(&f->fl, &c), 0);
    c.write_budget = budget;
    c.sink = sink;
    c.sink_arg = arg;
    mc_fixture_result r = {.rc = CONN_FAKE_OK};
    size_t from = 0;
    for (size_t i = 0; i <= ncuts && r.rc == CONN_FAKE_OK; i++) {
        size_t to = i < ncuts ? cuts[i] : len;
        if (to > from)
            r.rc = conn_fake_feed(&c, in + from, to - from);
        from = to;
    }
    conn_fake_flush_all(&c);
    r.open = r.rc == CONN_FAKE_OK && !conn_fake_closed(&c);
    r.max_pending = c.max_pending;
    conn_fake_free(&c);
    return r;
}

void mc_fixture_collect(const char *data, size_t len, void *out)
{
    mc_fixture_out *o = out;
    ck_assert_uint_lt(o->n + len, sizeof o->buf);
    memcpy(o->buf + o->n, data, len);
    o->n += len;
    o->buf[o->n] = '\0';
}
