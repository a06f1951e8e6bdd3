/* libFuzzer harness: ID text encodings (snowflake/encoding.h) and the layout's unpack/pack.
 *
 * The input is tried as an ID in every encoding (dec, hex, base62, base32) and as an encoding
 * name; its first 16 bytes, when present, are also two 64-bit values to format.
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
 *     to the same ID.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "snowflake/encoding.h"
#include "snowflake/layout.h"

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
    }
    return 0;
}
