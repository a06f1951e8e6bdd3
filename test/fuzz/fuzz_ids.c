/* libFuzzer harness: ID text encodings (snowflake/encoding.h), the layout's unpack/pack, the
 * 128-bit IDs' texts (snowflake/id128.h), RFC 3339 times (util/rfc3339.h) and time -> ID bounds
 * (snowflake/bounds.h).
 *
 * The input is tried as an ID in every encoding (dec, hex, base62, base32), as an encoding
 * name, as a UUID, as a ULID and as a time; its first 16 bytes, when present, are also two 64-bit
 * values to format; its first 40 bytes, when present, also describe a layout and three instants
 * for the bounds.
 *
 * Properties (each violation aborts with a message):
 *   - format then parse gives the value back, in every encoding, for any value;
 *   - formatted text has the documented shape: hex 16, base62 11, base32 13 digits, decimal
 *     without leading zeros; the padded encodings sort as strings as the values sort as numbers;
 *   - anything that parses re-formats to the same text up to what parsing forgives: leading
 *     zeros (padding), the case of hex digits, base32's lowercase and aliases (O->0, I/L->1);
 *     i.e. parsing is the exact inverse of formatting on canonical text and accepts nothing else;
 *   - a hex value in upper case and a base32 value in lower case / with aliases parse the same;
 *   - an ID without the sign bit unpacks under the default layout into parts that pack back
 *     to the same ID;
 *   - UUID and ULID texts: whatever parses is 36 or 32 (UUID) / 26 (ULID) characters and
 *     re-formats to the input up to case (and, for ULID, Crockford's aliases); a refusal says
 *     why; sf_uuid7_split accepts exactly version 7 of variant 10;
 *   - TypeID texts (snowflake/typeid.h): whatever parses re-formats to exactly the input (the
 *     spec's parsing forgives nothing), its prefix passes the prefix rules and its suffix is the
 *     lowercase ULID text of the same bits; any 128 bits format with and without a prefix and
 *     parse back; a refusal has a printable reason;
 *   - RFC 3339: a time that parses is within 1970..9999, formats to 24 characters that parse back
 *     to the same ms in both profiles; the rounded-up reading is the floor or the next ms; what
 *     the configuration's strict profile takes, the clients' profile takes with the same value;
 *     a refusal says why;
 *   - bounds, for a layout sf_layout_init accepts, built from the bytes (widths summing to at
 *     most 63, either field order, 1..1000 ms ticks, epochs below 2^46 ms): min <= every ID
 *     packed with a tick in [k_lo, k_end) <= max, IDs of the ticks around are outside
 *     [min, end), end = max + 1, min and max are the all-zero / all-one IDs of their ticks,
 *     adjacent intervals tile (one tick of overlap off a tick edge), invalid intervals are
 *     refused with a reason naming from/to; for UUIDv7/ULID the same containment with random
 *     IDs of each millisecond.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "snowflake/bounds.h"
#include "snowflake/encoding.h"
#include "snowflake/id128.h"
#include "snowflake/layout.h"
#include "snowflake/typeid.h"
#include "util/rfc3339.h"

#define FIXED_NOW_MS UINT64_C(1767225600000) /* 2026-01-01T00:00:00Z */

static const size_t width[SF_ENC_COUNT] = {0, 16, 11, 13}; /* 0: not padded */
static sf_layout layout;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[256];
    if (sf_layout_init(&layout, 41, 5, 5, 12, SF_DEFAULT_EPOCH_MS, 1, FIXED_NOW_MS, err,
                       sizeof err) != 0)
        fuzz_fail(__FILE__, __LINE__, "layout: %s", err);
    return 0;
}

/* What parsing forgives, undone: the canonical text of s in enc (s parsed, so it is valid). */
static size_t canonical(sf_encoding enc, const char *s, size_t len, char *out)
{
    size_t n = 0;
    if (enc == SF_ENC_DEC) {
        while (len > 1 && *s == '0') { /* leading zeros */
            s++;
            len--;
        }
        memcpy(out, s, len);
        return len;
    }
    for (size_t pad = width[enc] - len; n < pad; n++)
        out[n] = '0';
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (enc == SF_ENC_HEX && c >= 'A' && c <= 'F')
            c = (char)(c - 'A' + 'a');
        if (enc == SF_ENC_BASE32) {
            if (c >= 'a' && c <= 'z')
                c = (char)(c - 'a' + 'A');
            if (c == 'O')
                c = '0';
            if (c == 'I' || c == 'L')
                c = '1';
        }
        out[n++] = c;
    }
    return n;
}

static void check_value(uint64_t v)
{
    for (int e = 0; e < SF_ENC_COUNT; e++) {
        sf_encoding enc = (sf_encoding)e;
        char buf[SF_ENC_MAX_LEN + 1];
        size_t n = sf_enc_format(enc, v, buf);
        FUZZ_CHECK(n >= 1 && n <= SF_ENC_MAX_LEN, "%s: length %zu", sf_enc_name(enc), n);
        if (width[enc])
            FUZZ_CHECK(n == width[enc], "%s: %zu digits, not %zu", sf_enc_name(enc), n,
                       width[enc]);
        else
            FUZZ_CHECK(n == 1 || buf[0] != '0', "dec: leading zero in %.*s", (int)n, buf);
        uint64_t back = ~v;
        FUZZ_CHECK(sf_enc_parse(enc, buf, n, &back) == 0 && back == v,
                   "%s: %llu formats to %.*s, which does not parse back (got %llu)",
                   sf_enc_name(enc), (unsigned long long)v, (int)n, buf,
                   (unsigned long long)back);
        /* The forgiving spellings of the same text. */
        char alt[SF_ENC_MAX_LEN + 1];
        memcpy(alt, buf, n);
        bool changed = false;
        for (size_t i = 0; i < n; i++) {
            if (enc == SF_ENC_HEX && alt[i] >= 'a' && alt[i] <= 'f') {
                alt[i] = (char)(alt[i] - 'a' + 'A');
                changed = true;
            } else if (enc == SF_ENC_BASE32) {
                static const char zero[] = "Oo", one[] = "IiLl";
                if (alt[i] == '0')
                    alt[i] = zero[(v >> (i % 60)) & 1];
                else if (alt[i] == '1')
                    alt[i] = one[(v >> (i % 60)) & 3];
                else if (alt[i] >= 'A' && alt[i] <= 'Z' && ((v >> (i % 60)) & 1))
                    alt[i] = (char)(alt[i] - 'A' + 'a');
                changed = true;
            }
        }
        if (changed) {
            back = ~v;
            FUZZ_CHECK(sf_enc_parse(enc, alt, n, &back) == 0 && back == v,
                       "%s: %.*s (a spelling of %.*s) does not parse to %llu", sf_enc_name(enc),
                       (int)n, alt, (int)n, buf, (unsigned long long)v);
        }
    }
    if (!(v >> 63)) {
        sf_id_parts p;
        char err[128];
        FUZZ_CHECK(sf_layout_unpack(&layout, v, 0, 0, &p, err, sizeof err) == 0,
                   "unpack of %llu failed: %s", (unsigned long long)v, err);
        FUZZ_CHECK(p.tick <= layout.tick_max && p.datacenter <= layout.datacenter_max &&
                       p.worker <= layout.worker_max && p.sequence <= layout.sequence_max,
                   "unpack of %llu gave parts out of range", (unsigned long long)v);
        uint64_t packed = sf_layout_pack(&layout, p.tick, p.datacenter, p.worker, p.sequence);
        FUZZ_CHECK(packed == v, "unpack/pack of %llu gave %llu", (unsigned long long)v,
                   (unsigned long long)packed);
    }
}

static void check_order(uint64_t x, uint64_t y)
{
    for (int e = SF_ENC_HEX; e < SF_ENC_COUNT; e++) {
        char a[SF_ENC_MAX_LEN], b[SF_ENC_MAX_LEN];
        size_t na = sf_enc_format((sf_encoding)e, x, a), nb = sf_enc_format((sf_encoding)e, y, b);
        int c = memcmp(a, b, na < nb ? na : nb);
        int want = x < y ? -1 : x > y;
        FUZZ_CHECK(na == nb && (c > 0) - (c < 0) == want, "%s: %llu and %llu sort wrongly as text",
                   sf_enc_name((sf_encoding)e), (unsigned long long)x, (unsigned long long)y);
    }
}

/* ---- UUID / ULID texts ------------------------------------------------------------------------ */

static char to_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static char to_upper(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
}

static bool same128(sf_id128 a, sf_id128 b)
{
    return sf_id128_cmp(a, b) == 0;
}

static void check_uuid_text(const char *s, size_t size)
{
    sf_id128 id, back;
    const char *why = NULL;
    if (sf_uuid_parse(s, size, &id, &why) != 0) {
        FUZZ_CHECK(why && *why, "uuid: %.*s refused without a reason", (int)size, s);
        return;
    }
    FUZZ_CHECK(size == SF_UUID_TEXT_LEN || size == SF_UUID_COMPACT_LEN,
               "uuid: parsed %zu characters", size);
    char canon[SF_UUID_TEXT_LEN], compact[SF_UUID_COMPACT_LEN];
    FUZZ_CHECK(sf_uuid_format(id, canon) == SF_UUID_TEXT_LEN &&
                   sf_uuid_format_compact(id, compact) == SF_UUID_COMPACT_LEN,
               "uuid: format lengths");
    const char *want = size == SF_UUID_TEXT_LEN ? canon : compact;
    for (size_t i = 0; i < size; i++)
        FUZZ_CHECK(to_lower(s[i]) == want[i], "uuid: %.*s parses but formats as %.*s",
                   (int)size, s, (int)size, want);
    FUZZ_CHECK(sf_uuid_parse(canon, sizeof canon, &back, &why) == 0 && same128(back, id),
               "uuid: canonical %.*s does not parse back", (int)sizeof canon, canon);
    FUZZ_CHECK(sf_uuid_parse(compact, sizeof compact, &back, &why) == 0 && same128(back, id),
               "uuid: compact %.*s does not parse back", (int)sizeof compact, compact);
    for (size_t i = 0; i < sizeof canon; i++)
        canon[i] = to_upper(canon[i]);
    FUZZ_CHECK(sf_uuid_parse(canon, sizeof canon, &back, &why) == 0 && same128(back, id),
               "uuid: upper-case %.*s does not parse", (int)sizeof canon, canon);
    sf_uuid7_fields f;
    bool v7 = sf_uuid7_split(id, &f, &why);
    bool want_v7 = ((id.hi >> 12) & 0xf) == 7 && (id.lo >> 62) == 2;
    FUZZ_CHECK(v7 == want_v7, "uuid7_split of %.*s: %d, version %u variant %u", (int)size, s, v7,
               (unsigned)((id.hi >> 12) & 0xf), (unsigned)(id.lo >> 62));
    if (v7)
        FUZZ_CHECK(same128(sf_uuid7_make(f.ms, f.rand_a, f.rand_b), id),
                   "uuid7: split/make of %.*s", (int)size, s);
    else
        FUZZ_CHECK(why && *why, "uuid7_split refused without a reason");
}

/* A ULID digit as formatting writes it: upper case, Crockford's aliases undone. */
static char ulid_canonical(char c)
{
    c = to_upper(c);
    return c == 'O' ? '0' : c == 'I' || c == 'L' ? '1' : c;
}

static void check_ulid_text(const char *s, size_t size)
{
    sf_id128 id, back;
    const char *why = NULL;
    if (sf_ulid_parse(s, size, &id, &why) != 0) {
        FUZZ_CHECK(why && *why, "ulid: %.*s refused without a reason", (int)size, s);
        return;
    }
    FUZZ_CHECK(size == SF_ULID_TEXT_LEN, "ulid: parsed %zu characters", size);
    char text[SF_ULID_TEXT_LEN];
    FUZZ_CHECK(sf_ulid_format(id, text) == SF_ULID_TEXT_LEN, "ulid: format length");
    FUZZ_CHECK(text[0] >= '0' && text[0] <= '7', "ulid: first digit %c", text[0]);
    for (size_t i = 0; i < size; i++)
        FUZZ_CHECK(ulid_canonical(s[i]) == text[i], "ulid: %.*s parses but formats as %.*s",
                   (int)size, s, (int)size, text);
    FUZZ_CHECK(sf_ulid_parse(text, sizeof text, &back, &why) == 0 && same128(back, id),
               "ulid: %.*s does not parse back", (int)sizeof text, text);
}

static bool printable(const char *why);

static void check_typeid_text(const char *s, size_t size)
{
    sf_typeid t;
    const char *why = NULL;
    if (sf_typeid_parse(s, size, &t, &why) != 0) {
        FUZZ_CHECK(printable(why), "typeid: %.*s refused without a printable reason", (int)size,
                   s);
        return;
    }
    FUZZ_CHECK(t.prefix == s && t.prefix_len <= SF_TYPEID_PREFIX_MAX, "typeid: prefix");
    FUZZ_CHECK(sf_typeid_prefix_check(t.prefix, t.prefix_len, &why) == 0,
               "typeid: %.*s parses with a prefix the rules refuse", (int)size, s);
    char text[SF_TYPEID_TEXT_MAX];
    size_t n = sf_typeid_format(t.prefix, t.prefix_len, t.id, text);
    FUZZ_CHECK(n == size && memcmp(text, s, n) == 0, "typeid: %.*s parses but formats as %.*s",
               (int)size, s, (int)n, text);
    char ulid[SF_ULID_TEXT_LEN];
    sf_ulid_format(t.id, ulid);
    for (size_t i = 0; i < SF_ULID_TEXT_LEN; i++)
        FUZZ_CHECK(to_upper(s[size - SF_ULID_TEXT_LEN + i]) == ulid[i],
                   "typeid: %.*s: suffix is not the ULID text in lowercase", (int)size, s);
}

static void check_typeid_value(sf_id128 id)
{
    static const char *const prefixes[] = {"", "a", "user", "my__type_x"};
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++) {
        char text[SF_TYPEID_TEXT_MAX];
        size_t n = sf_typeid_format(prefixes[k], strlen(prefixes[k]), id, text);
        sf_typeid t;
        const char *why = NULL;
        FUZZ_CHECK(sf_typeid_parse(text, n, &t, &why) == 0 && same128(t.id, id) &&
                       t.prefix_len == strlen(prefixes[k]),
                   "typeid: %.*s does not parse back (%s)", (int)n, text, why ? why : "");
    }
}

/* ---- RFC 3339 ---------------------------------------------------------------------------------- */

static bool printable(const char *why)
{
    if (!why || !*why)
        return false;
    for (; *why; why++)
        if (*why < 0x20 || *why > 0x7e)
            return false;
    return true;
}

static void check_round_trip(uint64_t ms)
{
    char text[RFC3339_FORMAT_CAP];
    size_t n = rfc3339_format_ms(ms, text);
    FUZZ_CHECK(n == RFC3339_TEXT_LEN && strlen(text) == n, "rfc3339: %llu formats as %s",
               (unsigned long long)ms, text);
    uint64_t back = ~ms;
    const char *why = NULL;
    FUZZ_CHECK(rfc3339_parse_ms(text, n, false, &back, &why) == 0 && back == ms,
               "rfc3339: %s (%llu) does not parse back: %s", text, (unsigned long long)ms,
               why ? why : "");
    FUZZ_CHECK(rfc3339_parse_ms(text, n, true, &back, &why) == 0 && back == ms,
               "rfc3339: %s rounds up", text);
    FUZZ_CHECK(rfc3339_parse_utc_ms(text, n, &back, &why) == 0 && back == ms,
               "rfc3339: %s refused by the strict profile", text);
}

/* Whether a time text that parsed has a non-zero fraction digit below the millisecond: then and
 * only then its rounded-up reading is one ms above its floor. */
static bool has_sub_ms(const char *s, size_t size)
{
    if (size < 21 || s[19] != '.')
        return false;
    for (size_t i = 20; i < size && s[i] >= '0' && s[i] <= '9'; i++)
        if (i >= 23 && s[i] != '0')
            return true;
    return false;
}

static void check_time_text(const char *s, size_t size)
{
    uint64_t lo = 0, hi = 0, strict = 0;
    const char *why_lo = NULL, *why_hi = NULL, *why_strict = NULL;
    bool a = rfc3339_parse_ms(s, size, false, &lo, &why_lo) == 0;
    bool b = rfc3339_parse_ms(s, size, true, &hi, &why_hi) == 0;
    bool c = rfc3339_parse_utc_ms(s, size, &strict, &why_strict) == 0;
    FUZZ_CHECK(a || printable(why_lo), "rfc3339: %.*s refused without a printable reason",
               (int)size, s);
    FUZZ_CHECK(b || printable(why_hi), "rfc3339: %.*s (up) refused without a reason", (int)size,
               s);
    FUZZ_CHECK(c || printable(why_strict), "rfc3339: %.*s (strict) refused without a reason",
               (int)size, s);
    if (a)
        FUZZ_CHECK(lo <= RFC3339_MS_MAX, "rfc3339: %.*s beyond 9999", (int)size, s);
    if (a && b)
        FUZZ_CHECK(hi == lo + has_sub_ms(s, size), "rfc3339: %.*s floors to %llu, ceils to %llu",
                   (int)size, s, (unsigned long long)lo, (unsigned long long)hi);
    /* only a fraction below the ms crosses a limit: floor before 1970, or ceil after 9999 */
    if (a && !b)
        FUZZ_CHECK(lo == RFC3339_MS_MAX, "rfc3339: %.*s floors but does not ceil", (int)size, s);
    if (b && !a)
        FUZZ_CHECK(hi == 0, "rfc3339: %.*s ceils but does not floor", (int)size, s);
    if (c)
        FUZZ_CHECK(a && b && lo == strict && hi == strict,
                   "rfc3339: %.*s strict %llu, lenient %d %llu", (int)size, s,
                   (unsigned long long)strict, a, (unsigned long long)lo);
    if (a)
        check_round_trip(lo);
    if (b)
        check_round_trip(hi);
}

/* ---- bounds ------------------------------------------------------------------------------------ */

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A layout built from the bytes by the daemon's own sf_layout_init (and, for Sonyflake's order,
 * sf_layout_set_node_bits_low), the widths mapped into what it accepts: sequence 8..31 bits, at
 * least one node bit, a sum of at most 63, a timestamp wide enough for the required lifetime
 * and short enough to end inside 63-bit ms, "now" at the epoch. Returns false (after checking the
 * reason) when no timestamp width fits between those two limits. */
static bool layout_from(const uint8_t *d, sf_layout *l)
{
    unsigned seq = 8 + d[0] % 24;
    unsigned w = d[1] % 32;                   /* seq + w <= 62 */
    unsigned dc = d[2] % (63 - seq - w) % 32; /* seq + w + dc <= 62 */
    if (dc + w == 0)
        w = 1;
    unsigned room = 63 - seq - w - dc; /* widths for the timestamp: >= 1 */
    uint32_t unit = 1 + (uint32_t)((d[4] | d[5] << 8) % 1000);
    uint64_t epoch = le64(d + 8) % (UINT64_C(1) << 46);
    double years = (double)SF_MIN_LIFETIME_YEARS * SF_MS_PER_YEAR;
    unsigned ts_min = 1;
    while (ts_min < room && (double)(UINT64_C(1) << ts_min) * unit < years)
        ts_min++;
    unsigned ts = ts_min + d[3] % (room - ts_min + 1);
    while (ts > ts_min && (double)epoch + (double)(UINT64_C(1) << ts) * unit >= 9.2e18)
        ts--;
    char err[256] = "";
    if (sf_layout_init(l, ts, dc, w, seq, epoch, unit, epoch, err, sizeof err) != 0) {
        FUZZ_CHECK(printable(err) && err[0], "layout %u/%u/%u/%u: refused without a reason", ts, dc,
                   w, seq);
        return false;
    }
    sf_layout_set_node_bits_low(l, d[6] & 1);
    return true;
}

/* sf_layout_pack of arbitrary field values, each cut to its width. */
static uint64_t pack_any(const sf_layout *l, uint64_t tick, uint64_t dc, uint64_t w, uint64_t seq)
{
    return sf_layout_pack(l, tick, (uint32_t)(dc & l->datacenter_max),
                          (uint32_t)(w & l->worker_max), (uint32_t)(seq & l->sequence_max));
}

static void check_bounds_layout(const uint8_t *d)
{
    sf_layout layout_bytes;
    if (!layout_from(d, &layout_bytes))
        return;
    const sf_layout *l = &layout_bytes;
    const unsigned S = l->timestamp_shift, id_bits = l->id_bits;
    uint64_t epoch = l->epoch_ms, last = sf_layout_ms_of(l, l->tick_max);
    uint64_t x = le64(d + 16), y = le64(d + 24), z = le64(d + 32);
    uint64_t from = x, to = y, c = z;
    if (d[7] & 3) { /* mostly valid instants: epoch <= from <= to <= c <= last */
        from = epoch + x % (last - epoch + 1);
        to = from + y % (last - from + 1);
        c = to + z % (last - to + 1);
        if (d[7] & 2) { /* short intervals: a few ticks */
            to = from + y % (4 * (uint64_t)l->unit_ms + 1);
            to = to > last ? last : to;
            c = to + z % (4 * (uint64_t)l->unit_ms + 1);
            c = c > last ? last : c;
        }
    }
    sf_bounds b;
    char why[160] = "";
    bool valid = from <= to && from >= epoch && to <= last;
    int rc = sf_bounds_layout(l, from, to, &b, why, sizeof why);
    FUZZ_CHECK((rc == 0) == valid, "bounds [%llu, %llu) epoch %llu last %llu: rc %d (%s)",
               (unsigned long long)from, (unsigned long long)to, (unsigned long long)epoch,
               (unsigned long long)last, rc, why);
    if (rc != 0) {
        FUZZ_CHECK(printable(why) && (strncmp(why, "from ", 5) == 0 || strncmp(why, "to ", 3) == 0),
                   "bounds: reason '%s' does not name from/to", why);
        return;
    }
    uint64_t k_lo = (from - epoch) / l->unit_ms;
    uint64_t k_end = (to - epoch + l->unit_ms - 1) / l->unit_ms;
    FUZZ_CHECK(b.end == k_end << S && (id_bits == 64 || b.end >> id_bits == 0),
               "bounds: end %llu for tick %llu", (unsigned long long)b.end,
               (unsigned long long)k_end);
    FUZZ_CHECK(b.end_tick_ms == sf_layout_ms_of(l, k_end) && b.end_tick_ms >= to &&
                   b.end_tick_ms - to < l->unit_ms,
               "bounds: end_tick_ms %llu for to %llu", (unsigned long long)b.end_tick_ms,
               (unsigned long long)to);
    FUZZ_CHECK(b.empty == (from == to), "bounds: empty flag");
    if (b.empty) {
        FUZZ_CHECK(b.min == b.end && b.first_tick_ms == b.end_tick_ms, "bounds: empty min/end");
    } else {
        FUZZ_CHECK(b.max + 1 == b.end, "bounds: max %llu end %llu", (unsigned long long)b.max,
                   (unsigned long long)b.end);
        FUZZ_CHECK(b.first_tick_ms == sf_layout_ms_of(l, k_lo) && b.first_tick_ms <= from &&
                       from - b.first_tick_ms < l->unit_ms,
                   "bounds: first_tick_ms %llu for from %llu", (unsigned long long)b.first_tick_ms,
                   (unsigned long long)from);
        /* attained: the first ID of node 0 and the last of the all-ones node */
        FUZZ_CHECK(b.min == pack_any(l, k_lo, 0, 0, 0), "bounds: min not node 0 / seq 0");
        FUZZ_CHECK(b.max == pack_any(l, k_end - 1, l->datacenter_max, l->worker_max,
                                     l->sequence_max),
                   "bounds: max not the all-ones node / last seq");
        uint64_t dc = d[12] | (uint64_t)d[13] << 8, w = d[14] | (uint64_t)d[15] << 8,
                 seq = le64(d + 32);
        uint64_t ks[4] = {k_lo, k_end - 1, k_lo + z % (k_end - k_lo), k_lo + y % (k_end - k_lo)};
        for (int i = 0; i < 4; i++) {
            uint64_t id = pack_any(l, ks[i], dc, w, seq);
            FUZZ_CHECK(id >= b.min && id <= b.max, "bounds: ID %llu of tick %llu outside "
                       "[%llu, %llu]", (unsigned long long)id, (unsigned long long)ks[i],
                       (unsigned long long)b.min, (unsigned long long)b.max);
        }
        if (k_lo > 0)
            FUZZ_CHECK(pack_any(l, k_lo - 1, dc, w, seq) < b.min, "bounds: tick before in");
        if (k_end <= l->tick_max)
            FUZZ_CHECK(pack_any(l, k_end, dc, w, seq) >= b.end, "bounds: tick after in");
    }
    /* [from, to) then [to, c): end of the first is min of the second, on a tick edge */
    if (to <= c && c <= last) {
        sf_bounds n;
        FUZZ_CHECK(sf_bounds_layout(l, to, c, &n, why, sizeof why) == 0, "bounds: next: %s", why);
        bool edge = (to - epoch) % l->unit_ms == 0;
        uint64_t overlap = edge || n.empty ? 0 : UINT64_C(1) << S;
        FUZZ_CHECK(b.end == n.min + overlap, "bounds: [%llu,%llu) ends at %llu, [%llu,%llu) "
                   "starts at %llu", (unsigned long long)from, (unsigned long long)to,
                   (unsigned long long)b.end, (unsigned long long)to, (unsigned long long)c,
                   (unsigned long long)n.min);
        sf_bounds whole;
        if (!b.empty && !n.empty) {
            FUZZ_CHECK(sf_bounds_layout(l, from, c, &whole, why, sizeof why) == 0 &&
                           whole.min == b.min && whole.end == n.end,
                       "bounds: the parts do not cover the whole");
        }
    }
}

static void check_bounds_id128(const uint8_t *d)
{
    uint64_t x = le64(d + 16), y = le64(d + 24), r1 = le64(d + 32), r2 = le64(d + 8);
    uint64_t from = x, to = y;
    if (d[7] & 4) {
        from = x % (SF_ID128_MS_MAX + 1);
        to = from + y % (SF_ID128_MS_MAX - from + 1);
    }
    for (int kind = SF_BOUNDS_UUID7; kind <= SF_BOUNDS_ULID; kind++) {
        sf_bounds128 b;
        char why[160] = "";
        int rc = sf_bounds_id128((sf_bounds_kind)kind, from, to, &b, why, sizeof why);
        bool valid = from <= to && to <= SF_ID128_MS_MAX;
        FUZZ_CHECK((rc == 0) == valid, "bounds128 [%llu, %llu): rc %d (%s)",
                   (unsigned long long)from, (unsigned long long)to, rc, why);
        if (rc != 0) {
            FUZZ_CHECK(printable(why) && (strncmp(why, "from ", 5) == 0 ||
                                          strncmp(why, "to ", 3) == 0),
                       "bounds128: reason '%s'", why);
            continue;
        }
        FUZZ_CHECK(sf_id128_ms(b.min) == (b.empty ? to : from) && sf_id128_ms(b.end) == to,
                   "bounds128: min/end ms");
        if (b.empty) {
            FUZZ_CHECK(same128(b.min, b.end), "bounds128: empty min != end");
            continue;
        }
        uint64_t mss[3] = {from, to - 1, from + r2 % (to - from)};
        for (int i = 0; i < 3; i++) {
            sf_id128 id = kind == SF_BOUNDS_UUID7 ? sf_uuid7_make(mss[i], (uint32_t)r1, r2)
                                                  : sf_ulid_make(mss[i], (uint16_t)r1, r2);
            FUZZ_CHECK(sf_id128_cmp(id, b.min) >= 0 && sf_id128_cmp(id, b.max) <= 0 &&
                           sf_id128_cmp(id, b.end) < 0,
                       "bounds128: ID of ms %llu outside", (unsigned long long)mss[i]);
        }
        sf_id128 after = kind == SF_BOUNDS_UUID7 ? sf_uuid7_make(to, (uint32_t)r1, r2)
                                                 : sf_ulid_make(to, (uint16_t)r1, r2);
        if (to <= SF_ID128_MS_MAX)
            FUZZ_CHECK(sf_id128_cmp(after, b.end) >= 0, "bounds128: ID of ms to inside");
        if (from > 0) {
            sf_id128 before = kind == SF_BOUNDS_UUID7 ? sf_uuid7_make(from - 1, (uint32_t)r1, r2)
                                                      : sf_ulid_make(from - 1, (uint16_t)r1, r2);
            FUZZ_CHECK(sf_id128_cmp(before, b.min) < 0, "bounds128: ID of ms from-1 inside");
        }
        if (kind == SF_BOUNDS_ULID) {
            FUZZ_CHECK(b.end.lo == 0 && b.max.lo == UINT64_MAX && b.end.hi == b.max.hi + 1,
                       "bounds128: ULID end != max + 1");
        } else {
            sf_uuid7_fields fl;
            const char *w;
            FUZZ_CHECK(sf_uuid7_split(b.min, &fl, &w) && fl.rand_a == 0 && fl.rand_b == 0 &&
                           sf_uuid7_split(b.max, &fl, &w) && fl.ms == to - 1 &&
                           fl.rand_a == SF_UUID7_RAND_A_MAX && fl.rand_b == SF_UUID7_RAND_B_MAX,
                       "bounds128: UUIDv7 min/max not the all-zero/all-one v7 UUIDs");
        }
    }
}


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    for (int e = 0; e < SF_ENC_COUNT; e++) {
        sf_encoding enc = (sf_encoding)e;
        uint64_t v;
        if (sf_enc_parse(enc, s, size, &v) != 0)
            continue;
        FUZZ_CHECK(size >= 1 && size <= (width[enc] ? width[enc] : 20),
                   "%s: parsed %zu characters", sf_enc_name(enc), size);
        check_value(v);
        char fmt[SF_ENC_MAX_LEN], canon[SF_ENC_MAX_LEN + 1];
        size_t n = sf_enc_format(enc, v, fmt);
        size_t cn = canonical(enc, s, size, canon);
        FUZZ_CHECK(n == cn && memcmp(fmt, canon, n) == 0,
                   "%s: %.*s parses to %llu, which formats as %.*s", sf_enc_name(enc), (int)size,
                   s, (unsigned long long)v, (int)n, fmt);
    }
    sf_encoding enc;
    if (sf_enc_parse_name(s, size, &enc) == 0) {
        const char *name = sf_enc_name(enc);
        FUZZ_CHECK((strlen(name) == size && memcmp(name, s, size) == 0) ||
                       (size == 7 && memcmp(s, "decimal", 7) == 0 && enc == SF_ENC_DEC),
                   "encoding name %.*s accepted as %s", (int)size, s, name);
    }
    if (size >= 16) {
        uint64_t x = 0, y = 0;
        for (int i = 7; i >= 0; i--) {
            x = x << 8 | data[i];
            y = y << 8 | data[8 + i];
        }
        check_value(x);
        check_value(y);
        check_order(x, y);
        check_typeid_value((sf_id128){x, y});
    }
    check_uuid_text(s, size);
    check_ulid_text(s, size);
    check_typeid_text(s, size);
    check_time_text(s, size);
    if (size >= 40) {
        check_bounds_layout(data);
        check_bounds_id128(data);
    }
    return 0;
}
