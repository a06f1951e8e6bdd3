/* Layout: validation rules, pack/unpack at the bit edges in both field orders, narrow layouts
 * (unused high bits), the named presets and Sonyflake's own decomposition. */
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
    ck_assert_uint_eq(l.id_bits, 63);
    ck_assert_uint_eq(l.id_max, INT64_MAX);
    ck_assert(!l.node_bits_low);
    ck_assert_uint_eq(l.sequence_shift, 0);
}
END_TEST

/* Every field at 0 and at its maximum, in several layouts, survives pack -> unpack. */
START_TEST(test_pack_unpack_edges)
{
    static const unsigned layouts[][4] = {{41, 5, 5, 12}, {41, 0, 10, 12}, {39, 8, 8, 8},
                                          {42, 0, 1, 20}, {40, 3, 12, 8},  {38, 0, 5, 10},
                                          {30, 1, 1, 8}};
    unsigned k = (unsigned)_i % 7;
    unsigned ts = layouts[k][0], dc = layouts[k][1], w = layouts[k][2], seq = layouts[k][3];
    sf_layout l;
    char err[256];
    /* A 10 ms tick keeps the narrow timestamp layouts alive for 10 years (1 s the 30-bit one). */
    ck_assert_msg(init(&l, ts, dc, w, seq, SF_DEFAULT_EPOCH_MS, ts == 30 ? 1000 : 10, err) == 0,
                  "%s", err);
    sf_layout_set_node_bits_low(&l, _i >= 7); /* the second half: Sonyflake order */
    uint32_t unit = l.unit_ms;
    ck_assert_uint_eq(l.id_bits, ts + dc + w + seq);
    uint64_t ticks[] = {0, 1, l.tick_max - 1, l.tick_max};
    uint32_t dcs[] = {0, (uint32_t)l.datacenter_max}, ws[] = {0, (uint32_t)l.worker_max},
             seqs[] = {0, 1, (uint32_t)l.sequence_max};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 2; b++)
            for (size_t c = 0; c < 2; c++)
                for (size_t d = 0; d < 3; d++) {
                    uint64_t id = sf_layout_pack(&l, ticks[a], dcs[b], ws[c], seqs[d]);
                    ck_assert_uint_le(id, l.id_max);
                    sf_id_parts p;
                    ck_assert_int_eq(sf_layout_unpack(&l, id, 0, 0, &p, err, sizeof err), 0);
                    ck_assert_uint_eq(p.tick, ticks[a]);
                    ck_assert_uint_eq(p.datacenter, dcs[b]);
                    ck_assert_uint_eq(p.worker, ws[c]);
                    ck_assert_uint_eq(p.sequence, seqs[d]);
                    ck_assert_uint_eq(p.timestamp_ms, SF_DEFAULT_EPOCH_MS + ticks[a] * unit);
                    /* the time is on top in either order: IDs sort by tick first */
                    ck_assert_uint_eq(id >> l.timestamp_shift, ticks[a]);
                }
    /* All ones in id_bits is the largest valid ID; one bit more is not an ID of this layout. */
    ck_assert_uint_eq(sf_layout_pack(&l, l.tick_max, (uint32_t)l.datacenter_max,
                                     (uint32_t)l.worker_max, (uint32_t)l.sequence_max),
                      l.id_max);
    ck_assert_uint_eq(l.id_max, (UINT64_C(1) << l.id_bits) - 1);
    sf_id_parts p;
    ck_assert_int_eq(sf_layout_unpack(&l, l.id_max + 1, 0, 0, &p, err, sizeof err), -1);
    /* The sequence sits right above the node (Sonyflake) or at the bottom (Twitter); the worker
     * (every layout here has one) at the bottom or right above the sequence. */
    uint64_t seq_one = UINT64_C(1) << (l.node_bits_low ? dc + w : 0);
    uint64_t worker_one = UINT64_C(1) << (l.node_bits_low ? 0 : seq);
    ck_assert_uint_eq(sf_layout_pack(&l, 0, 0, 0, 1), seq_one);
    ck_assert_uint_eq(sf_layout_pack(&l, 0, 0, 1, 0), worker_one);
}
END_TEST

/* A narrow layout leaves its high bits zero and refuses IDs that use them. */
START_TEST(test_narrow_layout_high_bits)
{
    sf_layout l;
    char err[256];
    ck_assert_int_eq(init(&l, 38, 0, 5, 10, SF_DEFAULT_EPOCH_MS, 10, err), 0);
    ck_assert_uint_eq(l.id_bits, 53);
    ck_assert_uint_eq(l.id_max, UINT64_C(9007199254740991)); /* Number.MAX_SAFE_INTEGER */
    sf_id_parts p;
    ck_assert_int_eq(sf_layout_unpack(&l, l.id_max, 0, 0, &p, err, sizeof err), 0);
    ck_assert_uint_eq(p.tick, l.tick_max);
    ck_assert_uint_eq(p.worker, 31);
    ck_assert_uint_eq(p.sequence, 1023);
    static const uint64_t bad[] = {UINT64_C(1) << 53, (UINT64_C(1) << 53) | 5, UINT64_C(1) << 62,
                                   UINT64_MAX >> 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(sf_layout_unpack(&l, bad[i], 0, 0, &p, err, sizeof err), -1);
        ck_assert_str_eq(err, "bits above bit 52 set: not an ID of this 53-bit layout");
    }
    ck_assert_int_eq(sf_layout_unpack(&l, UINT64_MAX, 0, 0, &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "53-bit layout"));
}
END_TEST

/* The presets' figures (README's table): widths, capacity per worker, lifetime end. */
START_TEST(test_presets)
{
    static const struct {
        const char *name;
        unsigned bits;
        double cap;
        uint64_t end_ms; /* epoch + 2^timestamp_bits ticks */
    } want[] = {
        {"twitter", 63, 4096000, UINT64_C(1577836800000) + (UINT64_C(1) << 41)},
        {"sonyflake", 63, 25600, UINT64_C(1409529600000) + (UINT64_C(1) << 39) * 10},
        {"js53", 53, 102400, UINT64_C(1577836800000) + (UINT64_C(1) << 38) * 10},
    };
    ck_assert_uint_eq(sf_layout_npresets, 3);
    for (size_t i = 0; i < 3; i++) {
        const sf_layout_preset *p = sf_layout_preset_find(want[i].name);
        ck_assert_ptr_nonnull(p);
        ck_assert_ptr_eq(p, &sf_layout_presets[i]);
        sf_layout l;
        char err[256];
        ck_assert_msg(sf_layout_init(&l, p->timestamp_bits, p->datacenter_bits, p->worker_bits,
                                     p->sequence_bits, p->epoch_ms, p->unit_ms, NOW, err,
                                     sizeof err) == 0,
                      "%s: %s", p->name, err);
        sf_layout_set_node_bits_low(&l, p->node_bits_low);
        ck_assert_uint_eq(l.id_bits, want[i].bits);
        ck_assert(sf_layout_cap_per_second(&l) == want[i].cap);
        ck_assert(sf_layout_end_ms(&l) == (double)want[i].end_ms);
        ck_assert(sf_layout_years_left(&l, NOW) > 60);
    }
    /* 2089-09-06T15:47:35.552Z, 2188-11-16T03:28:58.880Z, 2107-02-08T13:44:29.440Z */
    ck_assert_uint_eq(want[0].end_ms, UINT64_C(3776860055552));
    ck_assert_uint_eq(want[1].end_ms, UINT64_C(6907087738880));
    ck_assert_uint_eq(want[2].end_ms, UINT64_C(4326615869440));
    ck_assert_ptr_null(sf_layout_preset_find("custom"));
    ck_assert_ptr_null(sf_layout_preset_find("Twitter"));
    ck_assert_ptr_null(sf_layout_preset_find(""));
}
END_TEST

/* Sonyflake order decomposes the way sony/sonyflake does (Decompose: id >> 24 time,
 * id >> 16 & 0xff sequence, id & 0xffff machine id = datacenter << 8 | worker). */
START_TEST(test_sonyflake_decomposition)
{
    const sf_layout_preset *p = sf_layout_preset_find("sonyflake");
    sf_layout l;
    char err[256];
    ck_assert_int_eq(sf_layout_init(&l, p->timestamp_bits, p->datacenter_bits, p->worker_bits,
                                    p->sequence_bits, p->epoch_ms, p->unit_ms, NOW, err,
                                    sizeof err),
                     0);
    sf_layout_set_node_bits_low(&l, true);
    ck_assert_uint_eq(l.timestamp_shift, 24);
    ck_assert_uint_eq(l.sequence_shift, 16);
    ck_assert_uint_eq(l.datacenter_shift, 8);
    ck_assert_uint_eq(l.worker_shift, 0);
    uint64_t tick = sf_layout_tick_of(&l, NOW); /* 10 ms units since 2014-09-01 */
    ck_assert_uint_eq(tick, (NOW - UINT64_C(1409529600000)) / 10);
    uint64_t id = sf_layout_pack(&l, tick, 0xc0, 0xa8, 0x7f);
    ck_assert_uint_eq(id >> 24, tick);
    ck_assert_uint_eq((id >> 16) & 0xff, 0x7f);
    ck_assert_uint_eq(id & 0xffff, 0xc0a8);
    /* the same value sonyflake's toID builds */
    ck_assert_uint_eq(id, tick << 24 | UINT64_C(0x7f) << 16 | 0xc0a8);
    sf_id_parts parts;
    ck_assert_int_eq(sf_layout_unpack(&l, id, 0, 0, &parts, err, sizeof err), 0);
    ck_assert_uint_eq(parts.tick, tick);
    ck_assert_uint_eq(parts.sequence, 0x7f);
    ck_assert_uint_eq(parts.datacenter, 0xc0);
    ck_assert_uint_eq(parts.worker, 0xa8);
    ck_assert_uint_eq(parts.timestamp_ms, UINT64_C(1409529600000) + tick * 10);
    /* issue order: sequence before the next tick, and the node never reorders one node's IDs */
    ck_assert_uint_lt(sf_layout_pack(&l, tick, 0xc0, 0xa8, 0x7f),
                      sf_layout_pack(&l, tick, 0xc0, 0xa8, 0x80));
    ck_assert_uint_lt(sf_layout_pack(&l, tick, 0xc0, 0xa8, 0xff),
                      sf_layout_pack(&l, tick + 1, 0xc0, 0xa8, 0));
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
    /* the widths may sum to less than 63: the unused high bits stay zero */
    ck_assert_int_eq(init(&l, 41, 5, 5, 11, SF_DEFAULT_EPOCH_MS, 1, err), 0);
    ck_assert_uint_eq(l.id_bits, 62);
    ck_assert_uint_eq(l.id_max, (UINT64_C(1) << 62) - 1);
    ck_assert_int_eq(init(&l, 41, 5, 5, 13, SF_DEFAULT_EPOCH_MS, 1, err), -1);
    ck_assert_ptr_nonnull(strstr(err, "must be at most 63"));
    ck_assert_ptr_nonnull(strstr(err, "got 41+5+5+13"));
    ck_assert_int_eq(init(&l, 42, 10, 0, 12, SF_DEFAULT_EPOCH_MS, 1, err), -1);
    ck_assert_ptr_nonnull(strstr(err, "at most 63"));
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
    tcase_add_loop_test(tc, test_pack_unpack_edges, 0, 14);
    tcase_add_test(tc, test_narrow_layout_high_bits);
    tcase_add_test(tc, test_presets);
    tcase_add_test(tc, test_sonyflake_decomposition);
    tcase_add_test(tc, test_unpack_rejects);
    tcase_add_test(tc, test_validation_rules);
    tcase_add_test(tc, test_tick_conversion);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
