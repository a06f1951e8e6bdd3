/* RFC 3339 <-> Unix ms (rfc3339.h). */
#include "util/rfc3339.h"

#include "util/decimal.h"

#define DAY_MS UINT64_C(86400000)

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* Its inverse, for days >= 0 (all that uint64_t ms can reach). */
static void civil_from_days(uint64_t z, uint64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    uint64_t era = z / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = yoe + era * 400 + (*m <= 2);
}

static unsigned days_in_month(unsigned y, unsigned m)
{
    static const unsigned char dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : dim[m - 1];
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Exactly n digits at s. */
static bool digits(const char *s, int n, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    *out = v;
    return true;
}

/* "hh:mm" at s (5 bytes available). */
static bool hh_mm(const char *s, unsigned *h, unsigned *m)
{
    return digits(s, 2, h) && s[2] == ':' && digits(s + 3, 2, m);
}

typedef enum { PROFILE_CLIENT, PROFILE_UTC } profile;

/* Digits only: Unix milliseconds. */
static int parse_unix_ms(const char *s, size_t len, uint64_t *ms, const char **why)
{
    if (!dec_parse_u64(s, len, RFC3339_MS_MAX, ms)) {
        *why = "Unix milliseconds must be 0..253402300799999";
        return -1;
    }
    return 0;
}

static int parse(const char *s, size_t len, profile pr, bool round_up, uint64_t *ms,
                 const char **why)
{
    const bool strict = pr == PROFILE_UTC;
    size_t nd = 0;
    while (nd < len && is_digit(s[nd]))
        nd++;
    if (!strict && len > 0 && nd == len)
        return parse_unix_ms(s, len, ms, why);

    unsigned y, mo, d, h, mi, sec;
    if (len < 19 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' ||
        !digits(s + 8, 2, &d) || !(s[10] == 'T' || (!strict && s[10] == 't')) ||
        !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' ||
        !digits(s + 17, 2, &sec)) {
        *why = strict ? "expected YYYY-MM-DDTHH:MM:SS[.mmm]Z"
                      : "expected YYYY-MM-DDTHH:MM:SS[.fff](Z|+hh:mm|-hh:mm) or Unix milliseconds";
        return -1;
    }

    /* The fraction: its first three digits are the milliseconds; any non-zero digit after them
     * is a part of a millisecond, which round_up counts as a whole one. */
    size_t p = 19;
    unsigned frac = 0;
    bool below_ms = false;
    if (p < len && s[p] == '.') {
        size_t n = 0;
        for (p++; p + n < len && is_digit(s[p + n]); n++) {
            if (n < 3)
                frac = frac * 10 + (unsigned)(s[p + n] - '0');
            else if (s[p + n] != '0')
                below_ms = true;
        }
        if (n < 1 || (strict && n > 3)) {
            *why = strict ? "the fraction must have 1 to 3 digits (milliseconds)"
                          : "the fraction after '.' needs at least one digit";
            return -1;
        }
        for (size_t k = n; k < 3; k++)
            frac *= 10;
        p += n;
    }

    /* The zone: Z, or an offset that says how far local time is ahead of UTC. */
    int64_t offset_min = 0;
    if (p < len && (s[p] == 'Z' || (!strict && s[p] == 'z'))) {
        p++;
    } else if (!strict && p < len && (s[p] == '+' || s[p] == '-' || s[p] == ' ')) {
        unsigned oh, om;
        if (len - p < 6 || !hh_mm(s + p + 1, &oh, &om)) {
            *why = "the offset must be +hh:mm or -hh:mm";
            return -1;
        }
        if (s[p] == ' ') { /* a '+' that went through form decoding (application/x-www-form-urlencoded) */
            *why = "a space where the offset's sign belongs: encode + as %2B";
            return -1;
        }
        if (oh > 23 || om > 59) {
            *why = "offset out of range (at most 23:59)";
            return -1;
        }
        offset_min = (int64_t)(oh * 60 + om) * (s[p] == '-' ? -1 : 1);
        p += 6;
    } else {
        *why = strict ? "only UTC is accepted: the time must end in Z"
                      : "a time zone is required: Z, +hh:mm or -hh:mm";
        return -1;
    }
    if (p != len) {
        *why = strict ? "only UTC is accepted: the time must end in Z"
                      : "unexpected characters after the time zone";
        return -1;
    }

    if (mo < 1 || mo > 12) {
        *why = "month out of range";
        return -1;
    }
    if (d < 1 || d > days_in_month(y, mo)) {
        *why = "day out of range for the month";
        return -1;
    }
    if (sec == 60) {
        *why = "time of day out of range: a leap second (:60) has no Unix time";
        return -1;
    }
    if (h > 23 || mi > 59 || sec > 59) {
        *why = "time of day out of range";
        return -1;
    }
    int64_t t = ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60000 + sec * INT64_C(1000) +
                frac - offset_min * 60000 + (round_up && below_ms);
    if (t < 0) {
        *why = "before 1970-01-01T00:00:00Z (Unix time 0)";
        return -1;
    }
    if ((uint64_t)t > RFC3339_MS_MAX) {
        *why = "after 9999-12-31T23:59:59.999Z";
        return -1;
    }
    *ms = (uint64_t)t;
    return 0;
}

int rfc3339_parse_ms(const char *s, size_t len, bool round_up, uint64_t *ms, const char **why)
{
    return parse(s, len, PROFILE_CLIENT, round_up, ms, why);
}

int rfc3339_parse_utc_ms(const char *s, size_t len, uint64_t *ms, const char **why)
{
    return parse(s, len, PROFILE_UTC, false, ms, why);
}

/* n digits of v, zero-padded, at out. */
static char *put(char *out, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v /= 10)
        out[i] = (char)('0' + v % 10);
    return out + n;
}

size_t rfc3339_format_ms(uint64_t ms, char *out)
{
    uint64_t y;
    unsigned mo, d;
    uint64_t day_ms = ms % DAY_MS;
    civil_from_days(ms / DAY_MS, &y, &mo, &d);
    int yd = 4;
    for (uint64_t t = y / 10000; t; t /= 10)
        yd++;
    char *p = put(out, y, yd);
    *p++ = '-';
    p = put(p, mo, 2);
    *p++ = '-';
    p = put(p, d, 2);
    *p++ = 'T';
    p = put(p, day_ms / 3600000, 2);
    *p++ = ':';
    p = put(p, day_ms / 60000 % 60, 2);
    *p++ = ':';
    p = put(p, day_ms / 1000 % 60, 2);
    *p++ = '.';
    p = put(p, day_ms % 1000, 3);
    *p++ = 'Z';
    *p = '\0';
    return (size_t)(p - out);
}
