/* Shared by test_lease.c and test_identity.c: a lease file in a fresh temporary directory per
 * test (setup/teardown for tcase_add_checked_fixture), the 41/5/5/12 layout, and lease-guarded
 * generators on a fake clock around T0. Include once per test file (static definitions). */
#ifndef SF_TEST_LEASE_FIXTURE_H
#define SF_TEST_LEASE_FIXTURE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/clock.h"
#include "snowflake/generator.h"
#include "snowflake/lease.h"

#define T0 (SF_DEFAULT_EPOCH_MS + UINT64_C(200000000000))

static char dir[64], path[128]; /* the test's directory and its lease file */

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/sf_lease_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/" SF_LEASE_FILE, dir);
}

static void teardown(void)
{
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(path);
    unlink(tmp);
    rmdir(path); /* when a test put a directory there */
    rmdir(dir);
}

static inline sf_layout layout(void)
{
    sf_layout l;
    char err[256];
    ck_assert(sf_layout_init(&l, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 1, T0, err, sizeof err) == 0);
    return l;
}

static void gen_at(sf_gen *g, clk_fake *clk, uint64_t min_tick)
{
    sf_gen_config cfg = {.layout = layout(),
                         .max_backward_ms = 5,
                         .max_batch = 64,
                         .min_tick = min_tick,
                         .lease_guarded = true,
                         .clock = &clk->base};
    char err[256];
    ck_assert_msg(sf_gen_init(g, &cfg, err, sizeof err) == 0, "%s", err);
}

#endif
