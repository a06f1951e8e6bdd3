/* snowflake/bounds: time -> [min, max] / end for Snowflake layouts (1 and 10 ms ticks, Twitter
 * and Sonyflake field orders, layouts narrower than 63 bits) and for UUIDv7/ULID: exact values,
 * attainment by constructed IDs, containment of every ID of a tick inside the interval and of
 * none outside, tiling of adjacent intervals, validation with reasons. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "snowflake/bounds.h"

#define EPOCH SF_DEFAULT_EPOCH_MS               /* 2020-01-01T00:00:00Z */
#define NOW   (EPOCH + UINT64_C(200000000000)) /* 2026-05-04 */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return rng_state = x;
}

static sf_layout twitter(uint32_t unit)
{
    sf_layout l;
    char err[256];
    ck_assert_msg(sf_layout_init(&l, 41, 5, 5, 12, EPOCH, unit, NOW, err, sizeof err) == 0, "%s",
                  err);
    return l;
}

/* Any layout the daemon accepts: widths summing to at most 63, in Twitter order or, with
 * node_bits_low, Sonyflake's (time | sequence | datacenter | worker). */
static sf_layout layout(unsigned ts, unsigned dc, unsigned w, unsigned seq, uint32_t unit,
                        bool node_bits_low)
{
    sf_layout l;
    char err[256];
    ck_assert_msg(sf_layout_init(&l, ts, dc, w, seq, EPOCH, unit, NOW, err, sizeof err) == 0,
                  "%u/%u/%u/%u: %s", ts, dc, w, seq, err);
    sf_layout_set_node_bits_low(&l, node_bits_low);
    return l;
}

static sf_bounds bounds(const sf_layout *l, uint64_t from, uint64_t to)
{
    sf_bounds b;
    char why[160] = "";
    ck_assert_msg(sf_bounds_layout(l, from, to, &b, why, sizeof why) == 0, "[%llu, %llu): %s",
                  (unsigned long long)from, (unsigned long long)to, why);
    return b;
}

START_TEST(test_unit_1)
{
    sf_layout l = twitter(1);
    sf_bounds b = bounds(&l, EPOCH, EPOCH + 1);
    ck_assert(!b.empty);
    ck_assert_uint_eq(b.min, 0);
    ck_assert_uint_eq(b.max, (UINT64_C(1) << 22) - 1);
    ck_assert_uint_eq(b.end, UINT64_C(1) << 22);
    ck_assert_uint_eq(b.first_tick_ms, EPOCH);
    ck_assert_uint_eq(b.end_tick_ms, EPOCH + 1);
    /* 2026-01-01T00:00:00Z .. 2026-02-01T00:00:00Z */
    uint64_t jan = UINT64_C(1767225600000), feb = UINT64_C(1769904000000);
    b = bounds(&l, jan, feb);
    ck_assert_uint_eq(b.min, (jan - EPOCH) << 22);
    ck_assert_uint_eq(b.end, (feb - EPOCH) << 22);
    ck_assert_uint_eq(b.max, b.end - 1);
    ck_assert_uint_eq(b.from_ms, jan);
    ck_assert_uint_eq(b.to_ms, feb);
    /* attained */
    ck_assert_uint_eq(b.min, sf_layout_pack(&l, jan - EPOCH, 0, 0, 0));
    ck_assert_uint_eq(b.max, sf_layout_pack(&l, feb - EPOCH - 1, 31, 31, 4095));
}
END_TEST

/* 10 ms ticks: from floors to its tick, to ceils to the next tick start. */
START_TEST(test_unit_10)
{
    sf_layout l = twitter(10);
    sf_bounds b = bounds(&l, EPOCH + 15, EPOCH + 25);
    ck_assert_uint_eq(b.first_tick_ms, EPOCH + 10);
    ck_assert_uint_eq(b.end_tick_ms, EPOCH + 30);
    ck_assert_uint_eq(b.min, sf_layout_pack(&l, 1, 0, 0, 0));
    ck_assert_uint_eq(b.max, sf_layout_pack(&l, 2, 31, 31, 4095));
    ck_assert_uint_eq(b.end, sf_layout_pack(&l, 3, 0, 0, 0));
    b = bounds(&l, EPOCH + 10, EPOCH + 20); /* aligned: exactly one tick */
    ck_assert_uint_eq(b.min, sf_layout_pack(&l, 1, 0, 0, 0));
    ck_assert_uint_eq(b.max, sf_layout_pack(&l, 1, 31, 31, 4095));
    b = bounds(&l, EPOCH + 19, EPOCH + 21); /* 2 ms over a tick edge: both ticks */
    ck_assert_uint_eq(b.min, sf_layout_pack(&l, 1, 0, 0, 0));
    ck_assert_uint_eq(b.max, sf_layout_pack(&l, 2, 31, 31, 4095));
    b = bounds(&l, EPOCH + 11, EPOCH + 12); /* 1 ms inside a tick: that tick */
    ck_assert_uint_eq(b.min, sf_layout_pack(&l, 1, 0, 0, 0));
    ck_assert_uint_eq(b.end, sf_layout_pack(&l, 2, 0, 0, 0));
}
END_TEST

START_TEST(test_empty)
{
    sf_layout l = twitter(10);
    sf_bounds b = bounds(&l, EPOCH + 15, EPOCH + 15);
    ck_assert(b.empty);
    ck_assert_uint_eq(b.min, b.end);
    ck_assert_uint_eq(b.first_tick_ms, b.end_tick_ms);
    /* where [15, x) ... would end is where an interval starting at 15's next tick begins */
    ck_assert_uint_eq(b.end, bounds(&l, EPOCH + 10, EPOCH + 15).end);
    b = bounds(&l, EPOCH, EPOCH);
    ck_assert(b.empty);
    ck_assert_uint_eq(b.min, 0);
    ck_assert_uint_eq(b.end, 0);
    sf_bounds128 u;
    char why[160];
    ck_assert_int_eq(sf_bounds_id128(SF_BOUNDS_UUID7, 5, 5, &u, why, sizeof why), 0);
    ck_assert(u.empty);
    ck_assert_int_eq(sf_id128_cmp(u.min, u.end), 0);
}
END_TEST

/* [a,b) then [b,c): end of the first is min of the second when b is on a tick edge; one tick of
 * overlap otherwise (the boundary tick belongs to both). */
START_TEST(test_tiling)
{
    for (uint32_t unit = 1; unit <= 10; unit += 9) {
        sf_layout l = twitter(unit);
        for (int i = 0; i < 20000; i++) {
            uint64_t a = EPOCH + rnd() % (UINT64_C(1) << 40);
            uint64_t b = a + rnd() % 100000, c = b + rnd() % 100000;
            sf_bounds x = bounds(&l, a, b), y = bounds(&l, b, c);
            if ((b - EPOCH) % unit == 0)
                ck_assert_uint_eq(x.end, y.min);
            else
                ck_assert_uint_eq(x.end, y.min + (UINT64_C(1) << l.timestamp_shift));
            ck_assert_uint_eq(x.end_tick_ms, sf_layout_ms_of(&l, x.end >> l.timestamp_shift));
            /* the whole is covered by the parts */
            sf_bounds w = bounds(&l, a, c);
            ck_assert_uint_eq(w.min, x.min);
            ck_assert_uint_eq(w.end, y.end);
        }
    }
    /* monthly partitions over a year, 1 ms ticks: each FROM (min) TO (end) starts where the
     * previous one ended */
    sf_layout l = twitter(1);
    static const uint64_t months[] = {1767225600000, 1769904000000, 1772323200000, 1775001600000,
                                      1777593600000, 1780272000000, 1782864000000};
    for (size_t i = 0; i + 2 < sizeof months / sizeof *months; i++)
        ck_assert_uint_eq(bounds(&l, months[i], months[i + 1]).end,
                          bounds(&l, months[i + 1], months[i + 2]).min);
}
END_TEST

/* Every ID of every node in a tick whose span meets [from, to) is in [min, max]; IDs of the
 * ticks before and after are outside [min, end); min and max are themselves IDs of the interval.
 * Twitter and Sonyflake order, 63 and 53 bits, 1 and 10 ms. */
START_TEST(test_containment)
{
    sf_layout layouts[] = {
        layout(41, 5, 5, 12, 1, false),  layout(39, 8, 8, 8, 10, true), /* sonyflake */
        layout(38, 0, 5, 10, 10, false),                                /* js53 */
        layout(41, 0, 4, 8, 1, false),   layout(30, 2, 3, 8, 1000, true),
    };
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++) {
        const sf_layout *l = &layouts[li];
        unsigned id_bits = l->id_bits; /* at most 63: b.end >> id_bits is defined */
        ck_assert_uint_eq(id_bits, l->timestamp_shift + l->timestamp_bits);
        for (int i = 0; i < 5000; i++) {
            uint64_t span = rnd() % 5000;
            uint64_t from = EPOCH + rnd() % (sf_layout_ms_of(l, l->tick_max) - EPOCH - span);
            uint64_t to = from + span;
            sf_bounds b = bounds(l, from, to);
            uint64_t k_lo = (from - EPOCH) / l->unit_ms;
            uint64_t k_end = (to - EPOCH + l->unit_ms - 1) / l->unit_ms;
            ck_assert_uint_eq(b.end >> l->timestamp_shift, k_end);
            ck_assert_uint_eq(b.end >> id_bits, 0);
            if (b.empty) {
                ck_assert_uint_eq(b.min, b.end);
                continue;
            }
            ck_assert_uint_eq(b.max + 1, b.end);
            ck_assert_uint_eq(b.min, sf_layout_pack(l, k_lo, 0, 0, 0));
            ck_assert_uint_eq(b.max,
                              sf_layout_pack(l, k_end - 1, (uint32_t)l->datacenter_max,
                                             (uint32_t)l->worker_max, (uint32_t)l->sequence_max));
            /* the first tick contains from, the last starts before to */
            ck_assert_uint_le(sf_layout_ms_of(l, k_lo), from);
            ck_assert_uint_gt(sf_layout_ms_of(l, k_lo + 1), from);
            ck_assert_uint_lt(sf_layout_ms_of(l, k_end - 1), to);
            for (int j = 0; j < 8; j++) {
                uint32_t dc = (uint32_t)(rnd() & l->datacenter_max),
                         w = (uint32_t)(rnd() & l->worker_max),
                         seq = (uint32_t)(rnd() & l->sequence_max);
                uint64_t k = k_lo + rnd() % (k_end - k_lo);
                uint64_t id = sf_layout_pack(l, k, dc, w, seq);
                ck_assert(id >= b.min && id <= b.max);
                if (k_lo > 0)
                    ck_assert_uint_lt(sf_layout_pack(l, k_lo - 1, dc, w, seq), b.min);
                if (k_end <= l->tick_max)
                    ck_assert_uint_ge(sf_layout_pack(l, k_end, dc, w, seq), b.end);
            }
        }
    }
}
END_TEST

static void refused(const sf_layout *l, uint64_t from, uint64_t to, const char *reason)
{
    sf_bounds b;
    char why[160] = "";
    ck_assert_msg(sf_bounds_layout(l, from, to, &b, why, sizeof why) == -1, "[%llu, %llu) taken",
                  (unsigned long long)from, (unsigned long long)to);
    ck_assert_msg(strstr(why, reason), "'%s' does not say '%s'", why, reason);
}

START_TEST(test_validation)
{
    sf_layout l = twitter(1);
    refused(&l, EPOCH + 2, EPOCH + 1, "from is after to");
    refused(&l, EPOCH - 1, EPOCH + 1, "from is before the layout's epoch 2020-01-01T00:00:00.000Z");
    refused(&l, 0, 0, "from is before");
    uint64_t last = sf_layout_ms_of(&l, l.tick_max); /* 2089-09-07T15:47:35.551Z */
    refused(&l, EPOCH, last + 1, "to is after the start of the layout's last tick 2089-09-");
    refused(&l, EPOCH, UINT64_MAX, "to is after");
    sf_bounds b = bounds(&l, EPOCH, last);
    ck_assert_uint_eq(b.end, l.tick_max << 22); /* fits 63 bits: a BIGINT */
    ck_assert_uint_eq(b.end >> 63, 0);
    b = bounds(&l, last, last);
    ck_assert(b.empty);
    sf_layout l10 = twitter(10);
    last = sf_layout_ms_of(&l10, l10.tick_max);
    b = bounds(&l10, last - 1, last);
    ck_assert_uint_eq(b.end, l10.tick_max << 22);
    refused(&l10, last - 1, last + 1, "to is after");

    sf_bounds128 u;
    char why[160] = "";
    ck_assert_int_eq(sf_bounds_id128(SF_BOUNDS_ULID, 3, 2, &u, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "from is after to"));
    ck_assert_int_eq(sf_bounds_id128(SF_BOUNDS_UUID7, 0, SF_ID128_MS_MAX + 1, &u, why, sizeof why),
                     -1);
    ck_assert_ptr_nonnull(strstr(why, "to is after the last millisecond"));
    ck_assert_ptr_nonnull(strstr(why, "10889-08-02T05:31:50.655Z"));
    ck_assert_int_eq(sf_bounds_id128(SF_BOUNDS_UUID7, 0, SF_ID128_MS_MAX, &u, why, sizeof why), 0);
}
END_TEST

/* The design's values: min = ts(from)-7000-8000-000000000000, max = ts(to-1)-7fff-bfff-ffff...,
 * end = ts(to)-7000-8000-...; ULID min = b32(from << 80), max = b32((to-1) << 80 | 2^80-1). */
START_TEST(test_id128_values)
{
    uint64_t jan = UINT64_C(1767225600000), feb = UINT64_C(1769904000000); /* 0x019b76daa800, 0x019c167fcc00 */
    sf_bounds128 u;
    char why[160];
    ck_assert_int_eq(sf_bounds_id128(SF_BOUNDS_UUID7, jan, feb, &u, why, sizeof why), 0);
    ck_assert(!u.empty);
    char t[SF_UUID_TEXT_LEN + 1] = "";
    sf_uuid_format(u.min, t);
    ck_assert_str_eq(t, "019b76da-a800-7000-8000-000000000000");
    sf_uuid_format(u.max, t);
    ck_assert_str_eq(t, "019c167f-cbff-7fff-bfff-ffffffffffff");
    sf_uuid_format(u.end, t);
    ck_assert_str_eq(t, "019c167f-cc00-7000-8000-000000000000");
    sf_id128 parsed;
    const char *w = NULL;
    ck_assert_int_eq(sf_uuid_parse(t, SF_UUID_TEXT_LEN, &parsed, &w), 0); /* end's text */
    ck_assert_int_eq(sf_id128_cmp(u.end, parsed), 0);

    ck_assert_int_eq(sf_bounds_id128(SF_BOUNDS_ULID, jan, feb, &u, why, sizeof why), 0);
    char v[SF_ULID_TEXT_LEN + 1] = "";
    sf_ulid_format(u.min, v);
    ck_assert_int_eq(sf_ulid_parse(v, SF_ULID_TEXT_LEN, &parsed, &w), 0);
    ck_assert_int_eq(sf_id128_cmp(u.min, parsed), 0);
    ck_assert_uint_eq(sf_id128_ms(u.min), jan);
    ck_assert_uint_eq(u.min.hi & 0xffff, 0);
    ck_assert_uint_eq(u.min.lo, 0);
    ck_assert_uint_eq(sf_id128_ms(u.max), feb - 1);
    ck_assert_uint_eq(u.max.hi & 0xffff, 0xffff);
    ck_assert_uint_eq(u.max.lo, UINT64_MAX);
    sf_ulid_format(u.max, v);
    ck_assert_str_eq(v + 10, "ZZZZZZZZZZZZZZZZ"); /* 80 bits = 16 digits, all ones */
    sf_ulid_format(u.end, v);
    ck_assert_str_eq(v + 10, "0000000000000000");
    /* ULID: end = max + 1 */
    ck_assert_uint_eq(u.end.hi, u.max.hi + 1);
    ck_assert_uint_eq(u.end.lo, 0);
}
END_TEST

/* Every UUIDv7/ULID of a millisecond in [from, to) lies in [min, max], those of from-1 and of to
 * outside [min, end); texts sort like the values. */
START_TEST(test_id128_containment)
{
    for (int kind = SF_BOUNDS_UUID7; kind <= SF_BOUNDS_ULID; kind++)
        for (int i = 0; i < 20000; i++) {
            uint64_t from = rnd() % (SF_ID128_MS_MAX - 10000), to = from + rnd() % 10000;
            if (i == 0)
                from = 0, to = 1;
            if (i == 1)
                from = SF_ID128_MS_MAX - 1, to = SF_ID128_MS_MAX;
            sf_bounds128 b;
            char why[160];
            ck_assert_int_eq(sf_bounds_id128((sf_bounds_kind)kind, from, to, &b, why, sizeof why),
                             0);
            if (b.empty)
                continue;
            ck_assert_int_lt(sf_id128_cmp(b.min, b.max), 0);
            ck_assert_int_lt(sf_id128_cmp(b.max, b.end), 0);
            uint64_t ms = from + rnd() % (to - from), r1 = rnd(), r2 = rnd();
            sf_id128 in, before, after;
            if (kind == SF_BOUNDS_UUID7) {
                in = sf_uuid7_make(ms, (uint32_t)r1, r2);
                before = sf_uuid7_make(from - 1, (uint32_t)r1, r2);
                after = sf_uuid7_make(to, (uint32_t)r1, r2);
                /* attained: valid v7 UUIDs */
                sf_uuid7_fields f;
                const char *w;
                ck_assert(sf_uuid7_split(b.min, &f, &w) && f.ms == from && f.rand_a == 0 &&
                          f.rand_b == 0);
                ck_assert(sf_uuid7_split(b.max, &f, &w) && f.ms == to - 1 &&
                          f.rand_a == SF_UUID7_RAND_A_MAX && f.rand_b == SF_UUID7_RAND_B_MAX);
                ck_assert(sf_uuid7_split(b.end, &f, &w) && f.ms == to);
            } else {
                in = sf_ulid_make(ms, (uint16_t)r1, r2);
                before = sf_ulid_make(from - 1, (uint16_t)r1, r2);
                after = sf_ulid_make(to, (uint16_t)r1, r2);
            }
            ck_assert(sf_id128_cmp(in, b.min) >= 0 && sf_id128_cmp(in, b.max) <= 0);
            if (from > 0)
                ck_assert_int_lt(sf_id128_cmp(before, b.min), 0);
            ck_assert_int_ge(sf_id128_cmp(after, b.end), 0);
            char x[SF_UUID_TEXT_LEN], y[SF_UUID_TEXT_LEN];
            size_t n = kind == SF_BOUNDS_UUID7 ? sf_uuid_format(in, x) : sf_ulid_format(in, x);
            if (kind == SF_BOUNDS_UUID7)
                sf_uuid_format(b.end, y);
            else
                sf_ulid_format(b.end, y);
            ck_assert_int_lt(memcmp(x, y, n), 0);
        }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bounds");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_unit_1);
    tcase_add_test(tc, test_unit_10);
    tcase_add_test(tc, test_empty);
    tcase_add_test(tc, test_tiling);
    tcase_add_test(tc, test_containment);
    tcase_add_test(tc, test_validation);
    tcase_add_test(tc, test_id128_values);
    tcase_add_test(tc, test_id128_containment);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
