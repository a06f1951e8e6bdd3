/* Asynchronous logger: per-thread double buffers drained by one logger thread. See log.h.
 *
 * Who touches what:
 * - a slot's front buffer, front_len, front_lines: its thread (append) and the logger (swap),
 *   both under the slot's spinlock; the writer holds it for one memcpy of a formatted line, the
 *   logger for a pointer swap. Formatting and I/O never happen under it.
 * - a slot's back buffer: the logger only, between a swap and the end of that flush's write.
 *   The writer cannot reach it again before the next swap, which the logger does after the write.
 * - a slot's lines/dropped counters: written by its thread only (so a load and a store, no
 *   lock-prefixed RMW), read by anyone.
 * - the registry, the options, the fds: set by log_init before the logger thread starts and
 *   before the epoch is published (release); writers read them after loading the epoch (acquire).
 * - mu/cv: the logger's pass counters, stop and hold flags; writers never take them.
 */
#include "obs/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "util/counter.h"
#include "util/fmt.h"

#define DEFAULT_BUFFER      (64u * 1024)
#define MIN_BUFFER          1024u
#define MAX_BUFFER          (64u * 1024 * 1024)
#define DEFAULT_INTERVAL_MS 100u
#define MAX_INTERVAL_MS     60000u
#define DEFAULT_MAX_THREADS 512u
#define MAX_MAX_THREADS     65536u
#define TS_TEXT_LEN         24                /* "2026-11-29T21:18:17.123Z" */
#define TS_LEN              (TS_TEXT_LEN + 1) /* and the space of the text format */
#define TRUNC_MARK          " [truncated]"
#define TRUNC_MARK_LEN      (sizeof TRUNC_MARK - 1)
#define TAG_LEN             6

_Atomic int log__level = LOG_LEVEL_INFO;
_Atomic bool log__access_on = false;
static _Atomic int line_format = LOG_FORMAT_TEXT; /* set by log_init, kept after log_shutdown */

static const char level_tags[][TAG_LEN + 1] = {"?     ", "DEBUG ", "INFO  ", "WARN  ", "ERROR "};
static const char access_tag[] = "ACCESS ";

/* The JSON format's keys after "ts", up to the opening quote of "msg" (or, for the structured
 * access line, up to its first key). Fixed strings: a line costs no key formatting. */
#define JSON_HEAD             "{\"ts\":\""
#define JSON_MID(level, type) "\",\"level\":\"" level "\",\"type\":\"" type "\","
static const char *const json_log_mids[] = {
    JSON_MID("?", "log") "\"msg\":\"", JSON_MID("debug", "log") "\"msg\":\"",
    JSON_MID("info", "log") "\"msg\":\"", JSON_MID("warn", "log") "\"msg\":\"",
    JSON_MID("error", "log") "\"msg\":\""};
static const char json_access_msg_mid[] = JSON_MID("info", "access") "\"msg\":\"";
static const char json_access_mid[] = JSON_MID("info", "access") "\"method\":\"";
#define JSON_TAIL     "\"}\n"
#define JSON_TAIL_LEN (sizeof JSON_TAIL - 1)

typedef struct log_slot {
    _Alignas(64) _Atomic bool lock;
    char *front, *back, *mem;
    size_t front_len, front_lines;   /* under lock */
    _Atomic uint64_t lines, dropped; /* single writer: the owning thread (util/counter.h) */
    _Atomic bool ready;              /* buffers allocated, slot visible to the logger */
} log_slot;

static struct {
    _Atomic unsigned epoch; /* 0: not running (synchronous stderr); else the run's number */
    unsigned last_epoch;
    /* set by log_init, read-only while running */
    log_slot *slots;
    unsigned max_threads;
    size_t cap;
    unsigned interval_ms;
    char *path; /* NULL: stderr */
    int efd;
    pthread_t thread;
    /* shared */
    _Atomic unsigned nreg; /* registrations attempted; slots used = min(nreg, max_threads) */
    _Atomic bool wake_pending, reopen_req, stop_flag;
    _Atomic uint64_t extra_lines, extra_dropped; /* sync path, no slot, failed writes, past runs */
    /* logger thread only (and log_init/log_shutdown around it) */
    int fd;
    uint64_t reported_dropped;
    struct iovec *iov;
    size_t *iov_lines;
    char internal[3 * LOG_LINE_MAX]; /* the logger's own lines */
    size_t internal_len;
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping, hold, in_pass;
    uint64_t passes_started, passes_done;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .fd = -1, .efd = -1};

static _Thread_local log_slot *t_slot;
static _Thread_local unsigned t_epoch;
static _Thread_local time_t t_sec = -1;
static _Thread_local char t_secbuf[19]; /* "2026-11-29T21:18:17" for t_sec */

/* --- small helpers -------------------------------------------------------------------------- */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline void spin_lock(_Atomic bool *l)
{
    unsigned spins = 0;
    while (atomic_exchange_explicit(l, true, memory_order_acquire))
        while (atomic_load_explicit(l, memory_order_relaxed)) {
            if (++spins < 100)
                cpu_relax();
            else
                sched_yield(); /* the holder was preempted */
        }
}

static inline void spin_unlock(_Atomic bool *l)
{
    atomic_store_explicit(l, false, memory_order_release);
}

static void kick(void)
{
    uint64_t one = 1;
    if (write(g.efd, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is saturated, so the logger is awake anyway */
    }
}

/* From writers: at most one eventfd write per logger pass; never blocks. */
static void wake_logger(void)
{
    if (atomic_load_explicit(&g.wake_pending, memory_order_relaxed) ||
        atomic_exchange(&g.wake_pending, true))
        return;
    kick();
}

/* --- formatting ----------------------------------------------------------------------------- */

static void put2(char *p, int v)
{
    p[0] = (char)('0' + v / 10 % 10);
    p[1] = (char)('0' + v % 10);
}

/* Writes "YYYY-MM-DDTHH:MM:SS.mmmZ" (TS_TEXT_LEN bytes); the seconds part is reformatted only
 * when the second changes (per thread). */
static void put_timestamp(char *out)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != t_sec) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        int y = tm.tm_year + 1900;
        if (y < 0 || y > 9999)
            y = 9999;
        put2(t_secbuf, y / 100);
        put2(t_secbuf + 2, y % 100);
        t_secbuf[4] = '-';
        put2(t_secbuf + 5, tm.tm_mon + 1);
        t_secbuf[7] = '-';
        put2(t_secbuf + 8, tm.tm_mday);
        t_secbuf[10] = 'T';
        put2(t_secbuf + 11, tm.tm_hour);
        t_secbuf[13] = ':';
        put2(t_secbuf + 14, tm.tm_min);
        t_secbuf[16] = ':';
        put2(t_secbuf + 17, tm.tm_sec);
        t_sec = ts.tv_sec;
    }
    memcpy(out, t_secbuf, sizeof t_secbuf);
    int ms = (int)(ts.tv_nsec / 1000000);
    out[19] = '.';
    out[20] = (char)('0' + ms / 100);
    put2(out + 21, ms % 100);
    out[23] = 'Z';
}

static inline bool is_ctl(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

size_t log_escape_controls(const char *src, size_t n, char *dst, size_t room, bool *cut)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        char esc[4];
        size_t k = 1;
        esc[0] = (char)c;
        if (is_ctl(c)) {
            esc[0] = '\\';
            k = 2;
            if (c == '\n')
                esc[1] = 'n';
            else if (c == '\r')
                esc[1] = 'r';
            else if (c == '\t')
                esc[1] = 't';
            else {
                esc[1] = 'x';
                esc[2] = hex[c >> 4];
                esc[3] = hex[c & 15];
                k = 4;
            }
        }
        if (o + k > room) {
            if (cut)
                *cut = true;
            break;
        }
        memcpy(dst + o, esc, k);
        o += k;
    }
    return o;
}

/* Cuts msg to make room for the marker, never inside a UTF-8 sequence. */
static size_t mark_truncated(char *msg, size_t n, size_t room)
{
    size_t end = room - TRUNC_MARK_LEN;
    if (n < end)
        end = n;
    while (end > 0 && ((unsigned char)msg[end] & 0xC0) == 0x80)
        end--;
    memcpy(msg + end, TRUNC_MARK, TRUNC_MARK_LEN);
    return end + TRUNC_MARK_LEN;
}

/* Formats one complete line (newline included, at most LOG_LINE_MAX bytes) into line, which
 * holds LOG_LINE_MAX + 1 bytes. Returns its length. */
__attribute__((format(printf, 4, 0))) static size_t
format_text_line(char *line, const char *tag, size_t taglen, const char *fmt, va_list ap)
{
    put_timestamp(line);
    line[TS_TEXT_LEN] = ' ';
    memcpy(line + TS_LEN, tag, taglen);
    size_t h = TS_LEN + taglen;
    char *msg = line + h;
    size_t room = LOG_LINE_MAX - 1 - h; /* message bytes, the newline excluded */
    int r = vsnprintf(msg, room + 1, fmt, ap);
    bool cut = false;
    size_t n;
    if (r < 0) {
        static const char bad[] = "(log format error)";
        memcpy(msg, bad, sizeof bad - 1);
        n = sizeof bad - 1;
    } else if ((size_t)r > room) {
        n = room;
        cut = true;
    } else {
        n = (size_t)r;
        while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
            n--;
    }
    for (size_t i = 0; i < n; i++)
        if (is_ctl((unsigned char)msg[i])) {
            char raw[LOG_LINE_MAX];
            memcpy(raw, msg, n);
            n = log_escape_controls(raw, n, msg, room, &cut);
            break;
        }
    if (cut)
        n = mark_truncated(msg, n, room);
    msg[n] = '\n';
    return h + n + 1;
}

/* Bytes copied into a JSON string as they are: printable ASCII but the quote and the backslash. */
static inline bool json_plain(unsigned char c)
{
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

#define BYTES_01 UINT64_C(0x0101010101010101)
#define BYTES_80 UINT64_C(0x8080808080808080)

/* Non-zero if a byte of v is zero (exact as to whether one is). */
static inline uint64_t any_zero_byte(uint64_t v)
{
    return (v - BYTES_01) & ~v & BYTES_80;
}

/* How many bytes at the start of s[0, n) are json_plain, eight at a time while they are (the
 * common message needs no escaping: this is the whole cost the JSON format adds to it). */
static size_t json_plain_prefix(const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t special = (w & BYTES_80) |                          /* >= 0x80 */
                           ((w - 0x20 * BYTES_01) & ~w & BYTES_80) | /* < 0x20, once none >= 0x80 */
                           any_zero_byte(w ^ ('"' * BYTES_01)) |
                           any_zero_byte(w ^ ('\\' * BYTES_01)) |
                           any_zero_byte(w ^ (0x7f * BYTES_01));
        if (special)
            break;
    }
    while (i < n && json_plain((unsigned char)s[i]))
        i++;
    return i;
}

/* Length of the well-formed UTF-8 sequence at s[0, n) (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0 if s[0] does not start one. s[0] >= 0x80. */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80; /* overlong */
        hi = c == 0xED ? 0x9F : 0xBF; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80; /* overlong */
        hi = c == 0xF4 ? 0x8F : 0xBF; /* above U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* Writes src[0, n) as the inside of a JSON string into out, at most room bytes, stopping before
 * the first escape or character that does not fit (never half of one). Returns the bytes
 * written; *used is the source bytes consumed (n unless cut). */
static size_t json_escape(const char *src, size_t n, char *out, size_t room, size_t *used)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t run = i + json_plain_prefix(src + i, n - i);
        if (run > i) { /* plain ASCII: may be cut anywhere */
            size_t k = run - i;
            if (k > room - o) {
                memcpy(out + o, s + i, room - o);
                i += room - o;
                o = room;
                break;
            }
            memcpy(out + o, s + i, k);
            o += k;
            i = run;
            if (i == n)
                break;
        }
        unsigned char c = s[i];
        char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        const char *put = esc;
        size_t k = 6, adv = 1;
        if (c >= 0x80) {
            size_t len = utf8_sequence(s + i, n - i);
            if (len) {
                put = (const char *)s + i;
                k = adv = len;
            } else {
                memcpy(esc, "\\ufffd", 6); /* not UTF-8: U+FFFD, as encoding/json does */
            }
        } else if (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t') {
            esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : (char)c;
            k = 2;
        }
        if (k > room - o)
            break;
        memcpy(out + o, put, k);
        o += k;
        i += adv;
    }
    *used = i;
    return o;
}

/* Writes JSON_HEAD and the timestamp, then mid; returns the length. */
static size_t put_json_head(char *line, const char *mid, size_t midlen)
{
    memcpy(line, JSON_HEAD, sizeof JSON_HEAD - 1);
    put_timestamp(line + sizeof JSON_HEAD - 1);
    size_t h = sizeof JSON_HEAD - 1 + TS_TEXT_LEN;
    memcpy(line + h, mid, midlen);
    return h + midlen;
}

/* The JSON twin of format_text_line: head (mid ends with the opening quote of "msg"), the
 * escaped message, cut with TRUNC_MARK when it does not fit, the closing quote and brace. The
 * message is formatted in place, as in text; only one that needs escaping or cutting is copied
 * out and escaped back (the common line costs one scan more than in text). */
__attribute__((format(printf, 3, 0))) static size_t format_json_line(char *line, const char *mid,
                                                                     const char *fmt, va_list ap)
{
    size_t h = put_json_head(line, mid, strlen(mid));
    char *msg = line + h;
    size_t room = LOG_LINE_MAX - h - JSON_TAIL_LEN; /* escaped message bytes */
    int r = vsnprintf(msg, room + 1, fmt, ap);
    size_t n, o;
    bool cut = false;
    if (r < 0) {
        static const char bad[] = "(log format error)";
        memcpy(msg, bad, sizeof bad - 1);
        n = sizeof bad - 1;
    } else if ((size_t)r > room) {
        n = room; /* escaping only grows: no byte past room can be kept */
        cut = true;
    } else {
        n = (size_t)r;
        while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
            n--;
    }
    size_t plain = json_plain_prefix(msg, n);
    if (plain == n && !cut) {
        o = n;
    } else {
        char raw[LOG_LINE_MAX];
        memcpy(raw + plain, msg + plain, n - plain);
        size_t used;
        o = plain + json_escape(raw + plain, n - plain, msg + plain, room - plain, &used);
        if (cut || plain + used < n) { /* again with room for the marker: the same cut, earlier */
            memcpy(raw, msg, plain);   /* still untouched: the escaping wrote after it */
            o = json_escape(raw, n, msg, room - TRUNC_MARK_LEN, &used);
            memcpy(msg + o, TRUNC_MARK, TRUNC_MARK_LEN);
            o += TRUNC_MARK_LEN;
        }
    }
    memcpy(msg + o, JSON_TAIL, JSON_TAIL_LEN);
    return h + o + JSON_TAIL_LEN;
}

/* One line in the current format into line (LOG_LINE_MAX + 1 bytes); returns its length. */
__attribute__((format(printf, 4, 0))) static size_t
format_line(char *line, log_level level, bool access, const char *fmt, va_list ap)
{
    if (atomic_load_explicit(&line_format, memory_order_relaxed) == LOG_FORMAT_JSON)
        return format_json_line(line, access ? json_access_msg_mid : json_log_mids[level], fmt, ap);
    if (access)
        return format_text_line(line, access_tag, sizeof access_tag - 1, fmt, ap);
    return format_text_line(line, level_tags[level], TAG_LEN, fmt, ap);
}

/* The structured access line: {"ts",...,"type":"access","method","path","status","duration_ms",
 * "bytes","proto"}. No printf: the numbers are integers (the duration in microseconds, written
 * as milliseconds with three decimals). */
static size_t format_access_json(char *line, const log_access_entry *e, const char *target,
                                 size_t target_len)
{
    /* The longest tail after "path": `","status":` + 11 + `,"duration_ms":` + 24 + `,"bytes":` +
     * 20 + `,"proto":"HTTP/` + 3 + `.` + 3 + `","remote":"` + REMOTE_ROOM + `"}\n`, rounded up. */
    enum { METHOD_ROOM = 32, REMOTE_ROOM = 64, TAIL_ROOM = 240 };
    size_t used, o = put_json_head(line, json_access_mid, sizeof json_access_mid - 1);
    const char *method = e->method ? e->method : "-";
    o += json_escape(method, strlen(method), line + o, METHOD_ROOM, &used);
    static const char path_key[] = "\",\"path\":\"";
    memcpy(line + o, path_key, sizeof path_key - 1);
    o += sizeof path_key - 1;
    o += json_escape(target, target_len, line + o, LOG_LINE_MAX - TAIL_ROOM - o, &used);
    static const char status_key[] = "\",\"status\":";
    memcpy(line + o, status_key, sizeof status_key - 1);
    o += sizeof status_key - 1;
    o += fmt_u64(line + o, e->status < 0 ? 0 : (uint64_t)e->status);
    static const char duration_key[] = ",\"duration_ms\":";
    memcpy(line + o, duration_key, sizeof duration_key - 1);
    o += sizeof duration_key - 1;
    uint64_t us = e->duration_ns / 1000 + (e->duration_ns % 1000 >= 500);
    o += fmt_u64(line + o, us / 1000);
    line[o++] = '.';
    line[o++] = (char)('0' + us % 1000 / 100);
    put2(line + o, (int)(us % 100));
    o += 2;
    static const char bytes_key[] = ",\"bytes\":";
    memcpy(line + o, bytes_key, sizeof bytes_key - 1);
    o += sizeof bytes_key - 1;
    o += fmt_u64(line + o, e->bytes);
    static const char proto_key[] = ",\"proto\":\"";
    memcpy(line + o, proto_key, sizeof proto_key - 1);
    o += sizeof proto_key - 1;
    if (e->version_major || e->version_minor) { /* else refused before the version: "" */
        memcpy(line + o, "HTTP/", 5);
        o += 5;
        o += fmt_u64(line + o, e->version_major);
        line[o++] = '.';
        o += fmt_u64(line + o, e->version_minor);
    }
    static const char remote_key[] = "\",\"remote\":\"";
    memcpy(line + o, remote_key, sizeof remote_key - 1);
    o += sizeof remote_key - 1;
    if (e->remote)
        o += json_escape(e->remote, strnlen(e->remote, REMOTE_ROOM), line + o, REMOTE_ROOM, &used);
    memcpy(line + o, JSON_TAIL, JSON_TAIL_LEN);
    return o + JSON_TAIL_LEN;
}

/* --- writers -------------------------------------------------------------------------------- */

static void write_sync(const char *line, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, line, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            atomic_fetch_add_explicit(&g.extra_dropped, 1, memory_order_relaxed);
            return;
        }
        line += w;
        n -= (size_t)w;
    }
    atomic_fetch_add_explicit(&g.extra_lines, 1, memory_order_relaxed);
}

/* The calling thread's first line in this run: take the next slot and allocate its buffers. */
static void register_thread(unsigned epoch)
{
    t_epoch = epoch;
    t_slot = NULL;
    unsigned i = atomic_fetch_add_explicit(&g.nreg, 1, memory_order_relaxed);
    if (i >= g.max_threads)
        return; /* registry full: this thread's lines are dropped and counted */
    log_slot *s = &g.slots[i];
    char *mem = malloc(2 * g.cap);
    if (!mem)
        return;
    s->mem = s->front = mem;
    s->back = mem + g.cap;
    atomic_store_explicit(&s->ready, true, memory_order_release);
    t_slot = s;
}

static void append(log_slot *s, const char *line, size_t n)
{
    size_t cap = g.cap;
    spin_lock(&s->lock);
    size_t len = s->front_len;
    bool fits = n <= cap - len;
    if (fits) {
        memcpy(s->front + len, line, n);
        s->front_len = len + n;
        s->front_lines++;
    }
    spin_unlock(&s->lock);
    counter_add(fits ? &s->lines : &s->dropped, 1);
    if (!fits || len + n >= cap / 2)
        wake_logger();
}

/* Queues one formatted line (or writes it to stderr when the logger is not running). */
static void queue_line(const char *line, size_t n)
{
    unsigned epoch = atomic_load_explicit(&g.epoch, memory_order_acquire);
    if (epoch == 0) {
        write_sync(line, n);
        return;
    }
    if (t_epoch != epoch)
        register_thread(epoch);
    if (t_slot)
        append(t_slot, line, n);
    else
        atomic_fetch_add_explicit(&g.extra_dropped, 1, memory_order_relaxed);
}

__attribute__((format(printf, 3, 0))) static void emit(log_level level, bool access,
                                                       const char *fmt, va_list ap)
{
    char line[LOG_LINE_MAX + 1];
    queue_line(line, format_line(line, level, access, fmt, ap));
}

/* For the text access line, which goes through printf like any other. */
__attribute__((format(printf, 1, 2))) static void emit_access_text(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(LOG_LEVEL_INFO, true, fmt, ap);
    va_end(ap);
}

void log_write(log_level level, const char *fmt, ...)
{
    if (level < LOG_LEVEL_DEBUG || level > LOG_LEVEL_ERROR || !log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(level, false, fmt, ap);
    va_end(ap);
}

void log_access(const char *fmt, ...)
{
    if (!log_access_enabled())
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(LOG_LEVEL_INFO, true, fmt, ap);
    va_end(ap);
}

void log_access_http(const log_access_entry *e)
{
    if (!log_access_enabled())
        return;
    const char *target = e->target ? e->target : "-";
    size_t target_len = !e->target                              ? 1
                        : e->target_len > LOG_ACCESS_TARGET_MAX ? LOG_ACCESS_TARGET_MAX
                                                                : e->target_len;
    if (atomic_load_explicit(&line_format, memory_order_relaxed) == LOG_FORMAT_TEXT) {
        emit_access_text("%s %.*s %d %.3fms", e->method ? e->method : "-", (int)target_len, target,
                         e->status, (double)e->duration_ns / 1e6);
        return;
    }
    char line[LOG_LINE_MAX + 1];
    queue_line(line, format_access_json(line, e, target, target_len));
}

log_format log_current_format(void)
{
    return (log_format)atomic_load_explicit(&line_format, memory_order_relaxed);
}

/* --- the logger thread ---------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void internal_line(log_level level, const char *fmt,
                                                                ...)
{
    if (sizeof g.internal - g.internal_len < LOG_LINE_MAX + 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    g.internal_len += format_line(g.internal + g.internal_len, level, false, fmt, ap);
    va_end(ap);
}

/* Every slot's counter (the logger, or any thread while running). */
static uint64_t slots_sum(bool dropped)
{
    uint64_t sum = 0;
    unsigned n = atomic_load_explicit(&g.nreg, memory_order_acquire);
    if (n > g.max_threads)
        n = g.max_threads;
    for (unsigned i = 0; i < n; i++)
        sum += counter_get(dropped ? &g.slots[i].dropped : &g.slots[i].lines);
    return sum;
}

static uint64_t dropped_now(void)
{
    return atomic_load_explicit(&g.extra_dropped, memory_order_relaxed) + slots_sum(true);
}

static void reopen_file(void)
{
    if (!g.path)
        return;
    int fd = open(g.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        internal_line(LOG_LEVEL_ERROR, "log: cannot reopen %s: %s; still writing to the old file",
                      g.path, strerror(errno));
        return;
    }
    close(g.fd);
    g.fd = fd;
}

/* Output stuck (a non-blocking stderr pipe nobody reads): wait, but give up when stopping. */
static bool wait_writable(void)
{
    struct pollfd p = {.fd = g.fd, .events = POLLOUT};
    for (;;) {
        int r = poll(&p, 1, 1000);
        if (r > 0)
            return true;
        if (r < 0 && errno != EINTR)
            return false;
        if (r == 0 && atomic_load(&g.stop_flag))
            return false;
    }
}

/* Writes iov[0, cnt) in order; lines of whatever cannot be written are counted as dropped. */
static void write_batch(struct iovec *iov, const size_t *lines, int cnt)
{
    int i = 0;
    while (i < cnt) {
        int k = cnt - i < IOV_MAX ? cnt - i : IOV_MAX;
        ssize_t w = writev(g.fd, iov + i, k);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_writable())
            continue;
        if (w <= 0)
            break;
        size_t left = (size_t)w;
        while (i < cnt && left >= iov[i].iov_len)
            left -= iov[i++].iov_len;
        if (left) {
            iov[i].iov_base = (char *)iov[i].iov_base + left;
            iov[i].iov_len -= left;
        }
    }
    uint64_t lost = 0;
    for (; i < cnt; i++)
        lost += lines[i];
    if (lost)
        atomic_fetch_add_explicit(&g.extra_dropped, lost, memory_order_relaxed);
}

/* One flush: swap every non-empty front buffer, write all back buffers, then the logger's own
 * lines (reopen errors, the drop summary). */
static void flush_pass(void)
{
    if (atomic_exchange(&g.reopen_req, false))
        reopen_file();
    unsigned n = atomic_load_explicit(&g.nreg, memory_order_acquire);
    if (n > g.max_threads)
        n = g.max_threads;
    int cnt = 0;
    for (unsigned i = 0; i < n; i++) {
        log_slot *s = &g.slots[i];
        if (!atomic_load_explicit(&s->ready, memory_order_acquire))
            continue;
        spin_lock(&s->lock);
        char *full = s->front;
        size_t len = s->front_len, lines = s->front_lines;
        if (len) {
            s->front = s->back;
            s->back = full;
            s->front_len = s->front_lines = 0;
        }
        spin_unlock(&s->lock);
        if (len) {
            g.iov[cnt] = (struct iovec){.iov_base = full, .iov_len = len};
            g.iov_lines[cnt++] = lines;
        }
    }
    uint64_t dropped = dropped_now();
    if (dropped > g.reported_dropped) {
        internal_line(LOG_LEVEL_WARN, "log: dropped %llu lines",
                      (unsigned long long)(dropped - g.reported_dropped));
        g.reported_dropped = dropped;
    }
    if (g.internal_len) {
        g.iov[cnt] = (struct iovec){.iov_base = g.internal, .iov_len = g.internal_len};
        g.iov_lines[cnt++] = 0; /* not user lines: not counted if lost */
    }
    write_batch(g.iov, g.iov_lines, cnt);
    g.internal_len = 0;
}

static void sleep_ms(unsigned ms)
{
    struct timespec d = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&d, NULL);
}

static void *logger_main(void *arg)
{
    (void)arg;
    struct pollfd p = {.fd = g.efd, .events = POLLIN};
    for (;;) {
        if (poll(&p, 1, (int)g.interval_ms) < 0 && errno != EINTR)
            sleep_ms(g.interval_ms);
        /* Drain the eventfd, then clear the flag, in this order: a writer that sets the flag
         * after the clear writes the eventfd after it too, so the next poll returns at once.
         * (Clearing first lets a writer still appending above half full set the flag and write
         * the eventfd between the clear and the read: the flag stays set with the eventfd empty
         * and no writer wakes us again. test_wakeups_not_lost.) */
        uint64_t v;
        if (read(g.efd, &v, sizeof v) < 0) {
            /* EAGAIN: woken by the timeout */
        }
        atomic_store(&g.wake_pending, false);
        pthread_mutex_lock(&g.mu);
        while (g.hold && !g.stopping)
            pthread_cond_wait(&g.cv, &g.mu);
        uint64_t seq = ++g.passes_started;
        bool stop = g.stopping;
        g.in_pass = true;
        pthread_mutex_unlock(&g.mu);

        flush_pass();

        pthread_mutex_lock(&g.mu);
        g.passes_done = seq;
        g.in_pass = false;
        pthread_cond_broadcast(&g.cv);
        pthread_mutex_unlock(&g.mu);
        if (stop)
            return NULL;
    }
}

/* --- lifecycle ------------------------------------------------------------------------------ */

static void release_resources(void)
{
    if (g.slots) {
        for (unsigned i = 0; i < g.max_threads; i++) {
            log_slot *s = &g.slots[i];
            atomic_fetch_add(&g.extra_lines, atomic_load(&s->lines));
            atomic_fetch_add(&g.extra_dropped, atomic_load(&s->dropped));
            free(s->mem);
        }
        free(g.slots);
    }
    free(g.iov);
    free(g.iov_lines);
    free(g.path);
    if (g.efd >= 0)
        close(g.efd);
    if (g.fd >= 0 && g.fd != STDERR_FILENO)
        close(g.fd);
    g.slots = NULL;
    g.iov = NULL;
    g.iov_lines = NULL;
    g.path = NULL;
    g.efd = g.fd = -1;
}

static int check_options(log_options *o, char *err, size_t errlen)
{
    if (o->level == 0)
        o->level = LOG_LEVEL_INFO;
    if (o->buffer_size == 0)
        o->buffer_size = DEFAULT_BUFFER;
    if (o->flush_interval_ms == 0)
        o->flush_interval_ms = DEFAULT_INTERVAL_MS;
    if (o->max_threads == 0)
        o->max_threads = DEFAULT_MAX_THREADS;
    if (o->level < LOG_LEVEL_DEBUG || o->level > LOG_LEVEL_ERROR)
        snprintf(err, errlen, "log: invalid level %d", (int)o->level);
    else if (o->buffer_size < MIN_BUFFER || o->buffer_size > MAX_BUFFER)
        snprintf(err, errlen, "log: buffer size %zu outside [%u, %u]", o->buffer_size, MIN_BUFFER,
                 MAX_BUFFER);
    else if (o->flush_interval_ms > MAX_INTERVAL_MS)
        snprintf(err, errlen, "log: flush interval %u ms above %u", o->flush_interval_ms,
                 MAX_INTERVAL_MS);
    else if (o->max_threads > MAX_MAX_THREADS)
        snprintf(err, errlen, "log: max threads %u above %u", o->max_threads, MAX_MAX_THREADS);
    else if (o->format != LOG_FORMAT_TEXT && o->format != LOG_FORMAT_JSON)
        snprintf(err, errlen, "log: invalid format %d", (int)o->format);
    else
        return 0;
    return -1;
}

static int start_thread(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* signals go to the other threads */
    int rc = pthread_create(&g.thread, NULL, logger_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int log_init(const log_options *opts, char *err, size_t errlen)
{
    log_options o = opts ? *opts : (log_options){0};
    if (atomic_load(&g.epoch) != 0) {
        snprintf(err, errlen, "log: already running");
        return -1;
    }
    if (check_options(&o, err, errlen) != 0)
        return -1;
    g.fd = STDERR_FILENO;
    if (o.path && o.path[0]) {
        g.fd = open(o.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
        if (g.fd < 0) {
            snprintf(err, errlen, "log: cannot open %s: %s", o.path, strerror(errno));
            return -1;
        }
        g.path = strdup(o.path);
    }
    g.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    size_t slots_bytes = sizeof(log_slot) * o.max_threads; /* a multiple of 64 */
    g.max_threads = o.max_threads;
    g.slots = aligned_alloc(_Alignof(log_slot), slots_bytes);
    if (g.slots)
        memset(g.slots, 0, slots_bytes);
    g.iov = calloc(o.max_threads + 1u, sizeof *g.iov);
    g.iov_lines = calloc(o.max_threads + 1u, sizeof *g.iov_lines);
    if (g.efd < 0 || !g.slots || !g.iov || !g.iov_lines || (o.path && o.path[0] && !g.path)) {
        snprintf(err, errlen, "log: out of memory or file descriptors");
        release_resources();
        return -1;
    }
    g.cap = o.buffer_size;
    g.interval_ms = o.flush_interval_ms;
    atomic_store(&g.nreg, 0);
    atomic_store(&g.wake_pending, false);
    atomic_store(&g.reopen_req, false);
    atomic_store(&g.stop_flag, false);
    g.reported_dropped = atomic_load(&g.extra_dropped);
    g.internal_len = 0;
    pthread_mutex_lock(&g.mu);
    g.stopping = g.hold = g.in_pass = false;
    g.passes_started = g.passes_done = 0;
    pthread_mutex_unlock(&g.mu);
    if (start_thread() != 0) {
        snprintf(err, errlen, "log: cannot start the logger thread");
        release_resources();
        return -1;
    }
    atomic_store_explicit(&log__level, (int)o.level, memory_order_relaxed);
    atomic_store_explicit(&log__access_on, o.access_log, memory_order_relaxed);
    atomic_store_explicit(&line_format, (int)o.format, memory_order_relaxed);
    if (++g.last_epoch == 0) /* 0 means "not running" */
        g.last_epoch = 1;
    atomic_store_explicit(&g.epoch, g.last_epoch, memory_order_release);
    return 0;
}

void log_shutdown(void)
{
    if (atomic_load(&g.epoch) == 0)
        return;
    atomic_store(&g.epoch, 0); /* from here on lines go to stderr synchronously */
    atomic_store(&log__access_on, false);
    atomic_store(&g.stop_flag, true);
    pthread_mutex_lock(&g.mu);
    g.stopping = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    kick();
    pthread_join(g.thread, NULL); /* its last pass wrote everything pending */
    release_resources();
}

void log_reopen(void)
{
    if (atomic_load_explicit(&g.epoch, memory_order_acquire) == 0)
        return;
    atomic_store(&g.reopen_req, true);
    kick();
}

void log_flush(void)
{
    if (atomic_load_explicit(&g.epoch, memory_order_acquire) == 0)
        return;
    pthread_mutex_lock(&g.mu);
    uint64_t target = g.passes_started + 1; /* a pass that starts after this point */
    pthread_mutex_unlock(&g.mu);
    kick();
    pthread_mutex_lock(&g.mu);
    while (g.passes_done < target && !g.stopping)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
}

void log_set_level(log_level level)
{
    if (level >= LOG_LEVEL_DEBUG && level <= LOG_LEVEL_ERROR)
        atomic_store_explicit(&log__level, (int)level, memory_order_relaxed);
}

void log_test_hold(bool hold)
{
    pthread_mutex_lock(&g.mu);
    g.hold = hold;
    while (hold && g.in_pass)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
}

/* The totals are read while running (slots live) or stopped (all in the extra counters). */
uint64_t log_lines_total(void)
{
    bool running = atomic_load_explicit(&g.epoch, memory_order_acquire) != 0;
    return atomic_load_explicit(&g.extra_lines, memory_order_relaxed) +
           (running ? slots_sum(false) : 0);
}

uint64_t log_dropped_total(void)
{
    bool running = atomic_load_explicit(&g.epoch, memory_order_acquire) != 0;
    return atomic_load_explicit(&g.extra_dropped, memory_order_relaxed) +
           (running ? slots_sum(true) : 0);
}
