/* Lease file and keeper: atomic writes, corruption detection, restart floors, renewal. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "lease_fixture.h"
#include "snowflake/lease.h"

static void write_raw(const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_missing_and_round_trip)
{
    uint64_t end = 0;
    char err[256];
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 0);
    ck_assert_int_eq(sf_lease_write(path, 1700000000123ULL, err, sizeof err), 0);
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, 1700000000123ULL);
    ck_assert_int_eq(sf_lease_write(path, 5, err, sizeof err), 0); /* replaces */
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, 5);
}
END_TEST

START_TEST(test_corrupt_files_refused)
{
    static const char *bad[] = {
        "",
        "garbage\n",
        "snowflaked-lease 1 \n",
        "snowflaked-lease 1 1700000000123\n",          /* no checksum */
        "snowflaked-lease 1 1700000000123 00000000\n", /* wrong checksum */
        "snowflaked-lease 1 -1700000000123 00000000\n",
        "snowflaked-lease 2 1700000000123 00000000\n", /* unknown version */
        "snowflaked-lease 1 99999999999999999999999 00000000\n",
    };
    char err[256];
    uint64_t end = 42;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_raw(bad[i]);
        ck_assert_msg(sf_lease_read(path, &end, err, sizeof err) == -1, "accepted: %s", bad[i]);
        ck_assert_ptr_nonnull(strstr(err, "corrupt"));
        ck_assert_uint_eq(end, 42);
    }
    /* A valid file with one digit changed: the checksum catches it. */
    ck_assert_int_eq(sf_lease_write(path, 1700000000123ULL, err, sizeof err), 0);
    FILE *f = fopen(path, "r+");
    ck_assert_ptr_nonnull(f);
    fseek(f, 20, SEEK_SET);
    fputc('9', f);
    fclose(f);
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), -1);
    /* Trailing junk after a valid line. */
    ck_assert_int_eq(sf_lease_write(path, 7, err, sizeof err), 0);
    f = fopen(path, "a");
    fputs("x", f);
    fclose(f);
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), -1);
}
END_TEST

START_TEST(test_unreadable_and_unwritable)
{
    char err[256];
    uint64_t end;
    ck_assert_int_eq(mkdir(path, 0755), 0); /* a directory where the file should be */
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot read"));
    ck_assert_int_eq(sf_lease_write(path, 1, err, sizeof err), -1); /* rename onto a dir fails */
    ck_assert_ptr_nonnull(strstr(err, path));
    rmdir(path);
    char nodir[200];
    snprintf(nodir, sizeof nodir, "%s/missing/" SF_LEASE_FILE, dir);
    ck_assert_int_eq(sf_lease_write(nodir, 1, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot create"));
}
END_TEST

START_TEST(test_first_tick)
{
    sf_layout l = layout();
    ck_assert_uint_eq(sf_lease_first_tick(&l, 0), 0);
    ck_assert_uint_eq(sf_lease_first_tick(&l, SF_DEFAULT_EPOCH_MS + 10), 10);
    sf_layout l10;
    char err[256];
    ck_assert(sf_layout_init(&l10, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 10, T0, err, sizeof err) ==
              0);
    ck_assert_uint_eq(sf_lease_first_tick(&l10, SF_DEFAULT_EPOCH_MS + 10), 1);
    ck_assert_uint_eq(sf_lease_first_tick(&l10, SF_DEFAULT_EPOCH_MS + 11), 2); /* rounds up */
}
END_TEST

/* A keeper covers the generator, and the final lease after a clean stop lets the next run
 * continue strictly above every ID of this run. */
START_TEST(test_keeper_and_restart)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_at(&g, &clk, 0);
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE); /* nothing before the first lease */
    sf_lease_keeper k;
    char err[256];
    sf_gen *gens_g[] = {&g};
    ck_assert_msg(sf_lease_keeper_start(&k, gens_g, 1, path, 2000, 0, err, sizeof err) == 0, "%s",
                  err);
    uint64_t end;
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, T0 + sf_gen_max_ahead_ms(&g) + 2000); /* covers the run-ahead */
    uint64_t last = 0;
    for (int i = 0; i < 10000; i++) { /* spans 3 ticks */
        ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
        last = id;
        if (i % 4000 == 3999) /* before the tick's 4096 run out: no waiting on a still clock */
            clk_fake_set(&clk, T0 + (uint64_t)(i + 1) / 4000);
    }
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ESEALED);
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, sf_layout_ms_of(&g.layout, (last >> 22) + 1)); /* exact */
    sf_gen_destroy(&g);

    /* Restart at the same instant: the floor forbids the last tick; the clock steps to it. */
    sf_gen g2;
    sf_gen *gens_g2[] = {&g2};
    sf_layout l = layout();
    gen_at(&g2, &clk, sf_lease_first_tick(&l, end));
    ck_assert_int_eq(sf_lease_keeper_start(&k, gens_g2, 1, path, 2000, end, err, sizeof err), 0);
    clk.step_every = 3;
    clk.step_ms = 1;
    ck_assert_int_eq(sf_gen_next(&g2, &id), SF_OK);
    ck_assert_uint_gt(id, last);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    sf_gen_destroy(&g2);
}
END_TEST

START_TEST(test_restart_with_lease_in_future)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    char err[256];
    /* The wall clock went back an hour between runs: refuse, issue nothing. */
    ck_assert_int_eq(sf_lease_write(path, T0 + 3600000, err, sizeof err), 0);
    uint64_t end;
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    sf_gen g;
    sf_gen *gens_g[] = {&g};
    sf_layout l = layout();
    gen_at(&g, &clk, sf_lease_first_tick(&l, end));
    sf_lease_keeper k;
    ck_assert_int_eq(sf_lease_keeper_start(&k, gens_g, 1, path, 2000, end, err, sizeof err), 0);
    uint64_t lease_now;
    ck_assert_int_eq(sf_lease_read(path, &lease_now, err, sizeof err), 1);
    /* Kept as it was: not lowered (the promise stands), not pushed further out (a restart loop
     * while refusing must not lengthen the outage). */
    ck_assert_uint_eq(lease_now, T0 + 3600000);
    uint64_t id = 0;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ECLOCK);
    ck_assert_uint_eq(id, 0);
    ck_assert_uint_ge(sf_gen_retry_after_ms(&g), 3600000 - 10);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    ck_assert_int_eq(sf_lease_read(path, &lease_now, err, sizeof err), 1);
    ck_assert_uint_eq(lease_now, T0 + 3600000); /* nothing issued: the floor is kept */
    sf_gen_destroy(&g);

    /* Only 2 ms ahead: within max_backward_ms, so the first ID waits and lands above it. */
    ck_assert_int_eq(sf_lease_write(path, T0 + 2, err, sizeof err), 0);
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    gen_at(&g, &clk, sf_lease_first_tick(&l, end));
    ck_assert_int_eq(sf_lease_keeper_start(&k, gens_g, 1, path, 2000, end, err, sizeof err), 0);
    clk.step_every = 3;
    clk.step_ms = 1;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_uint_ge(sf_layout_ms_of(&l, id >> 22), T0 + 2);
    ck_assert_uint_ge(atomic_load(&clk.now), T0 + 2);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_keeper_renews)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_at(&g, &clk, 0);
    sf_lease_keeper k;
    char err[256];
    sf_gen *gens_g[] = {&g};
    ck_assert_int_eq(sf_lease_keeper_start(&k, gens_g, 1, path, 200, 0, err, sizeof err), 0);
    uint64_t id;
    /* Past the first lease (T0 + 200) only if the keeper renewed it in the meantime. */
    for (int step = 1; step <= 10; step++) {
        clk_fake_set(&clk, T0 + (uint64_t)step * 100);
        struct timespec d = {0, 150 * 1000000L}; /* > window/4: the keeper wakes at least once */
        nanosleep(&d, NULL);
        ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    }
    uint64_t end;
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_gt(end, T0 + 1000);
    ck_assert_uint_ge(k.writes, 5);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    sf_gen_destroy(&g);
}
END_TEST

/* Per-loop generators share one lease: it covers the furthest of them. */
START_TEST(test_keeper_many_generators)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen a, b;
    gen_at(&a, &clk, 0);
    gen_at(&b, &clk, 0);
    sf_gen *gens[] = {&a, &b};
    sf_lease_keeper k;
    char err[256];
    ck_assert_int_eq(sf_lease_keeper_start(&k, gens, 2, path, 2000, 0, err, sizeof err), 0);
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&a, &id), SF_OK);
    ck_assert_int_eq(sf_gen_next(&b, &id), SF_OK);
    clk_fake_set(&clk, T0 + 7);
    ck_assert_int_eq(sf_gen_next(&b, &id), SF_OK);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    ck_assert_int_eq(sf_gen_next(&a, &id), SF_ESEALED);
    ck_assert_int_eq(sf_gen_next(&b, &id), SF_ESEALED);
    uint64_t end;
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, T0 + 8);
    sf_gen_destroy(&a);
    sf_gen_destroy(&b);
}
END_TEST

/* One lease for generators of different tick spaces: a Snowflake layout of 10 ms ticks and the
 * Unix-ms space of UUIDv7/ULID. Each is opened in its own ticks, and the clean-stop lease is the
 * latest "tick after the last ID" over both, in ms; a restart floors each above its own IDs. */
START_TEST(test_keeper_two_tick_spaces)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_layout l10, wide;
    char err[256];
    ck_assert(sf_layout_init(&l10, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 10, T0, err, sizeof err) == 0);
    ck_assert(sf_layout_init_unix_ms(&wide, 5, 5, err, sizeof err) == 0);
    sf_gen_config cfg = {.layout = l10, .max_backward_ms = 5, .max_batch = 64,
                         .lease_guarded = true, .clock = &clk.base};
    sf_gen snow, u;
    ck_assert(sf_gen_init(&snow, &cfg, err, sizeof err) == 0);
    cfg.layout = wide;
    ck_assert(sf_gen_init(&u, &cfg, err, sizeof err) == 0);
    sf_gen *gens[] = {&snow, &u};
    sf_lease_keeper k;
    ck_assert_int_eq(sf_lease_keeper_start(&k, gens, 2, path, 2000, 0, err, sizeof err), 0);
    sf_span span;
    ck_assert_int_eq(sf_gen_reserve(&u, 1, &span), SF_OK); /* opened in its own ticks */
    clk_fake_set(&clk, T0 + 7);
    ck_assert_int_eq(sf_gen_reserve(&u, 1, &span), SF_OK);
    ck_assert_uint_eq(span.first_tick, T0 + 7);
    uint64_t id;
    clk_fake_set(&clk, T0 + 15);
    ck_assert_int_eq(sf_gen_next(&snow, &id), SF_OK); /* the 10 ms tick [T0+10, T0+20) */
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    uint64_t end;
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, T0 + 20);
    ck_assert_uint_eq(sf_lease_first_tick(&wide, end), T0 + 20);
    ck_assert_uint_eq(sf_lease_first_tick(&l10, end), (T0 + 20 - SF_DEFAULT_EPOCH_MS) / 10);
    sf_gen_destroy(&snow);
    sf_gen_destroy(&u);
    /* The other order: the wide generator's last ID is the later one. */
    clk_fake_init(&clk, T0 + 100, 0, 0);
    cfg.layout = l10;
    cfg.min_tick = sf_lease_first_tick(&l10, end);
    ck_assert(sf_gen_init(&snow, &cfg, err, sizeof err) == 0);
    cfg.layout = wide;
    cfg.min_tick = sf_lease_first_tick(&wide, end);
    ck_assert(sf_gen_init(&u, &cfg, err, sizeof err) == 0);
    ck_assert_int_eq(sf_lease_keeper_start(&k, gens, 2, path, 2000, end, err, sizeof err), 0);
    ck_assert_int_eq(sf_gen_next(&snow, &id), SF_OK);
    clk_fake_set(&clk, T0 + 113);
    ck_assert_int_eq(sf_gen_reserve(&u, 1, &span), SF_OK);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, T0 + 114);
    sf_gen_destroy(&snow);
    sf_gen_destroy(&u);
}
END_TEST

/* The disk goes away mid-run: IDs continue while the lease on disk covers them, then are
 * refused (never issued uncovered), and resume once renewal succeeds again. */
START_TEST(test_renewal_failure_refuses_then_recovers)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_at(&g, &clk, 0);
    sf_gen *gens_g[] = {&g};
    sf_lease_keeper k;
    char err[256], moved[100];
    ck_assert_int_eq(sf_lease_keeper_start(&k, gens_g, 1, path, 200, 0, err, sizeof err), 0);
    uint64_t id, end;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    snprintf(moved, sizeof moved, "%s.away", dir);
    ck_assert_int_eq(rename(dir, moved), 0);
    clk_fake_set(&clk, T0 + 1000); /* far past the last lease written */
    struct timespec d = {0, 150 * 1000000L};
    nanosleep(&d, NULL); /* the keeper tries and fails */
    ck_assert_uint_gt(k.failures, 0);
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);
    ck_assert_uint_gt(sf_gen_retry_after_ms(&g), 0);
    ck_assert_int_eq(rename(moved, dir), 0);
    nanosleep(&d, NULL); /* the keeper succeeds */
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_OK);
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_gt(sf_layout_ms_of(&g.layout, (id >> 22) + 1), 0);
    ck_assert_uint_le(sf_layout_ms_of(&g.layout, (id >> 22) + 1), end); /* covered */
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    sf_gen_destroy(&g);
}
END_TEST

START_TEST(test_keeper_start_fails_cleanly)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_at(&g, &clk, 0);
    sf_lease_keeper k;
    char err[256], bad[200];
    snprintf(bad, sizeof bad, "%s/no/such/dir/lease", dir);
    sf_gen *gens_g[] = {&g};
    ck_assert_int_eq(sf_lease_keeper_start(&k, gens_g, 1, bad, 2000, 0, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot create"));
    uint64_t id;
    ck_assert_int_eq(sf_gen_next(&g, &id), SF_ELEASE);              /* still closed */
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0); /* harmless */
    sf_gen_destroy(&g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("lease");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_missing_and_round_trip);
    tcase_add_test(tc, test_corrupt_files_refused);
    tcase_add_test(tc, test_unreadable_and_unwritable);
    tcase_add_test(tc, test_first_tick);
    tcase_add_test(tc, test_keeper_and_restart);
    tcase_add_test(tc, test_restart_with_lease_in_future);
    tcase_add_test(tc, test_keeper_renews);
    tcase_add_test(tc, test_keeper_many_generators);
    tcase_add_test(tc, test_renewal_failure_refuses_then_recovers);
    tcase_add_test(tc, test_keeper_start_fails_cleanly);
    tcase_add_test(tc, test_keeper_two_tick_spaces);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
