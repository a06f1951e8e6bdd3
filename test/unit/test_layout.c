/* Layout: validation rules and pack/unpack at the bit edges. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "snowflake/layout.h"

#define NOW (SF_DEFAULT_EPOCH_MS + UINT64_C(200000000000))

static int init(sf_layout *l, unsigned ts, unsigned dc, unsigned w, unsigned seq, uint64_t epoch,
                uint32_t unit, char *err)
{
    return sf_layout_init(l, ts, dc, w, seq, epoch, unit, NOW, err, 256);
}

START_TEST(test_default_layout_fields)
{
    sf_layout l;
    char err[256];
    ck_assert_int_eq(init(&l, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 1, err), 0);
    ck_assert_uint_eq(l.worker_shift, 12);
    ck_assert_uint_eq(l.datacenter_shift, 17);
    ck_assert_uint_eq(l.timestamp_shift, 22);
    ck_assert_uint_eq(l.sequence_max, 4095);
    ck_assert_uint_eq(l.worker_max, 31);
    ck_assert_uint_eq(l.datacenter_max, 31);
    ck_assert_uint_eq(l.tick_max, (UINT64_C(1) << 41) - 1);
    ck_assert(sf_layout_cap_per_second(&l) == 4096000.0);
}
END_TEST

/* Every field at 0 and at its maximum, in several layouts, survives pack -> unpack. */
START_TEST(test_pack_unpack_edges)
{
    static const unsigned layouts[][4] = {
        {41, 5, 5, 12}, {41, 0, 10, 12}, {39, 8, 8, 8}, {42, 0, 1, 20}, {40, 3, 12, 8}};
    unsigned ts = layouts[_i][0], dc = layouts[_i][1], w = layouts[_i][2], seq = layouts[_i][3];
    sf_layout l;
    char err[256];
    /* A 10 ms tick keeps the narrow timestamp layouts alive for 10 years. */
    ck_assert_msg(init(&l, ts, dc, w, seq, SF_DEFAULT_EPOCH_MS, 10, err) == 0, "%s", err);
    uint64_t ticks[] = {0, 1, l.tick_max - 1, l.tick_max};
    uint32_t dcs[] = {0, (uint32_t)l.datacenter_max}, ws[] = {0, (uint32_t)l.worker_max},
             seqs[] = {0, 1, (uint32_t)l.sequence_max};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 2; b++)
            for (size_t c = 0; c < 2; c++)
                for (size_t d = 0; d < 3; d++) {
                    uint64_t id = sf_layout_pack(&l, ticks[a], dcs[b], ws[c], seqs[d]);
                    ck_assert_uint_eq(id >> 63, 0);
                    sf_id_parts p;
                    ck_assert_int_eq(sf_layout_unpack(&l, id, 0, 0, &p, err, sizeof err), 0);
                    ck_assert_uint_eq(p.tick, ticks[a]);
                    ck_assert_uint_eq(p.datacenter, dcs[b]);
                    ck_assert_uint_eq(p.worker, ws[c]);
                    ck_assert_uint_eq(p.sequence, seqs[d]);
                    ck_assert_uint_eq(p.timestamp_ms, SF_DEFAULT_EPOCH_MS + ticks[a] * 10);
                }
    /* All ones in 63 bits is the largest valid ID. */
    ck_assert_uint_eq(sf_layout_pack(&l, l.tick_max, (uint32_t)l.datacenter_max,
                                     (uint32_t)l.worker_max, (uint32_t)l.sequence_max),
                      INT64_MAX);
}
END_TEST

START_TEST(test_unpack_rejects)
{
    sf_layout l;
    char err[256];
    ck_assert_int_eq(init(&l, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 1, err), 0);
    sf_id_parts p;
    ck_assert_int_eq(sf_layout_unpack(&l, UINT64_C(1) << 63, 0, 0, &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "sign bit"));
    uint64_t tick_now = NOW - SF_DEFAULT_EPOCH_MS;
    uint64_t future = sf_layout_pack(&l, tick_now + 60000, 0, 0, 0);
    ck_assert_int_eq(sf_layout_unpack(&l, future, NOW, 1000, &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "future"));
    uint64_t recent = sf_layout_pack(&l, tick_now + 500, 0, 0, 0);
    ck_assert_int_eq(sf_layout_unpack(&l, recent, NOW, 1000, &p, err, sizeof err), 0);
}
END_TEST

START_TEST(test_validation_rules)
{
    sf_layout l;
    char err[256];
    ck_assert_int_eq(init(&l, 41, 5, 5, 11, SF_DEFAULT_EPOCH_MS, 1, err), -1);
    ck_assert_ptr_nonnull(strstr(err, "must be 63"));
    ck_assert_int_eq(init(&l, 41, 5, 5, 13, SF_DEFAULT_EPOCH_MS, 1, err), -1);
    ck_assert_int_eq(init(&l, 45, 5, 6, 7, SF_DEFAULT_EPOCH_MS, 1, err), -1);
    ck_assert_ptr_nonnull(strstr(err, "sequence_bits must be at least 8"));
    ck_assert_int_eq(init(&l, 41, 5, 5, 12, NOW + 1, 1, err), -1);
    ck_assert_ptr_nonnull(strstr(err, "future"));
    ck_assert_int_eq(init(&l, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 0, err), -1);
    ck_assert_ptr_nonnull(strstr(err, "time_unit_ms"));
    /* 38 bits of 1 ms last 8.7 years: refused; 40 bits (34.8 years) from 2020 are fine. */
    ck_assert_int_eq(init(&l, 38, 5, 8, 12, NOW - 1000, 1, err), -1);
    ck_assert_ptr_nonnull(strstr(err, "at least 10 years"));
    ck_assert_int_eq(init(&l, 40, 5, 6, 12, SF_DEFAULT_EPOCH_MS, 1, err), 0);
    /* An old epoch eats the lifetime: 40 bits of 1 ms from 1970 ran out in 2004. */
    ck_assert_int_eq(init(&l, 40, 5, 6, 12, 0, 1, err), -1);
    ck_assert_ptr_nonnull(strstr(err, "0.0 years"));
    ck_assert_int_eq(init(&l, 40, 5, 6, 12, 0, 100, err), 0);
    ck_assert_int_eq(init(&l, 64, 0, 0, 0, 0, 1, err), -1);
    ck_assert_int_eq(init(&l, 41, 0, 0, 22, SF_DEFAULT_EPOCH_MS, 1, err), -1); /* no node bits */
    ck_assert_ptr_nonnull(strstr(err, "at least 1"));
    ck_assert_int_eq(init(&l, 54, 0, 1, 8, SF_DEFAULT_EPOCH_MS, 1000, err), -1); /* 2^54 s */
    ck_assert_ptr_nonnull(strstr(err, "64-bit"));
    ck_assert_int_eq(init(&l, 0, 0, 31, 32, 0, 1, err), -1);
}
END_TEST

START_TEST(test_tick_conversion)
{
    sf_layout l;
    char err[256];
    ck_assert_int_eq(init(&l, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 10, err), 0);
    ck_assert_uint_eq(sf_layout_tick_of(&l, SF_DEFAULT_EPOCH_MS - 5), 0);
    ck_assert_uint_eq(sf_layout_tick_of(&l, SF_DEFAULT_EPOCH_MS + 19), 1);
    ck_assert_uint_eq(sf_layout_tick_of(&l, SF_DEFAULT_EPOCH_MS + 20), 2);
    ck_assert_uint_eq(sf_layout_ms_of(&l, 2), SF_DEFAULT_EPOCH_MS + 20);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("layout");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, test_default_layout_fields);
    tcase_add_loop_test(tc, test_pack_unpack_edges, 0, 5);
    tcase_add_test(tc, test_unpack_rejects);
    tcase_add_test(tc, test_validation_rules);
    tcase_add_test(tc, test_tick_conversion);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
