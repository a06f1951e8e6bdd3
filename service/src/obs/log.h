/* Asynchronous logger: one line per event, never blocks a loop.
 *
 * Contract.
 * - log_init, log_shutdown: main thread, while no other thread uses the logger (before the
 *   loops start, after they are joined). Everything else (LOG_*, log_access, log_set_level,
 *   log_reopen, log_flush, the counters): any thread, whether the logger runs or not.
 * - Before log_init and after log_shutdown every line is written synchronously to stderr (one
 *   write(2) per line), so start-up and configuration errors are never lost.
 * - While running, a thread's first line registers it: a slot in a fixed array (max_threads)
 *   with two buffers of buffer_size bytes, the only allocation it ever makes. The thread appends
 *   formatted lines to its front buffer under a per-slot spinlock held for a memcpy; the logger
 *   thread, every flush_interval_ms or when a front buffer passes half full, swaps front and back
 *   under that lock (a pointer swap) and writes the back buffers with writev(2). Waking it is a
 *   flag test plus, at most once per flush, a non-blocking eventfd write.
 * - Overflow: a line that does not fit in the front buffer is DROPPED and counted, never waited
 *   for, never allocated. So are lines from threads beyond max_threads (slots are never reused:
 *   a thread that exits keeps its slot until log_shutdown) and lines lost to a failed write.
 *   After drops the logger writes "log: dropped N lines" at WARN.
 * - Order: one thread's lines keep their order. Across threads, order is per flush: each flush
 *   writes every thread's pending lines, one thread after another, so lines of different threads
 *   that are close in time may appear out of timestamp order.
 * - Line, format "text" (the default): "2026-11-29T21:18:17.123Z INFO  message\n" (UTC).
 *   Control characters in the message are escaped (\n \r \t \xHH; trailing newlines dropped) so
 *   one event is one line and a logged value cannot forge lines; lines longer than LOG_LINE_MAX
 *   are cut with " [truncated]". Access lines: "<ts> ACCESS GET /id 200 0.123ms".
 * - Line, format "json": one object per line, keys always in this order:
 *     {"ts":"2026-11-29T21:18:17.123Z","level":"info","type":"log","msg":"message"}
 *   level: debug|info|warn|error; type: "log", or "access" for access lines, which carry
 *     {"ts","level":"info","type":"access","method","path","status","duration_ms","bytes","proto"}
 *   (log_access_http; a log_access line has "msg" instead). Strings are valid JSON and UTF-8
 *   whatever was logged: " \ escaped, control characters as \n \r \t or \u00XX (DEL too),
 *   bytes that are not valid UTF-8 as \ufffd. A line longer than LOG_LINE_MAX gets
 *   " [truncated]" at the end of "msg", cut between escapes and characters, so it stays valid.
 *   The format is chosen by log_init and kept after log_shutdown (so the last lines of a JSON
 *   log are JSON too); before the first log_init it is text.
 * - Disabled levels cost one relaxed load and a branch: the LOG_* macros test the level before
 *   evaluating their arguments. The access log is off by default; callers test
 *   log_access_enabled() (or use LOG_ACCESS) and do nothing at all when it is off.
 * Not async-signal-safe: a signal handler must not log.
 */
#ifndef SF_OBS_LOG_H
#define SF_OBS_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Levels. (The LOG_DEBUG.. names are the macros below; <syslog.h> also defines them.) */
typedef enum log_level {
    LOG_LEVEL_DEBUG = 1,
    LOG_LEVEL_INFO = 2,
    LOG_LEVEL_WARN = 3,
    LOG_LEVEL_ERROR = 4,
} log_level;

#define LOG_LINE_MAX 4096 /* bytes per line, timestamp and newline included */

typedef enum log_format {
    LOG_FORMAT_TEXT = 0,
    LOG_FORMAT_JSON = 1,
} log_format;

#define LOG_ACCESS_TARGET_MAX 512 /* bytes of the request target an access line keeps */

/* One HTTP request for the access log. Nothing is copied beyond the line being formatted. */
typedef struct log_access_entry {
    const char *method;   /* "GET" */
    const char *target;   /* the request target as received (path and query); NULL: "-" */
    size_t target_len;    /* bytes of target; the line keeps LOG_ACCESS_TARGET_MAX at most */
    int status;           /* the response status sent */
    uint64_t duration_ns; /* from the request's first byte to its response queued */
    uint64_t bytes;       /* response body bytes sent (0 for HEAD, 204, 304) */
    uint8_t version_major, version_minor; /* the request's HTTP version; 0.0: not received */
    const char *remote; /* the client "address:port" ("[v6]:port"), NUL-terminated; NULL: "" */
} log_access_entry;

/* Copies src[0, n) to dst with the control characters (0x00-0x1f, DEL) escaped as text log
 * lines escape them: \n \r \t \xHH. At most room bytes, never half an escape; *cut (when not
 * NULL) set if src did not fit. Returns the bytes written. For client bytes that go into a log
 * line, a reply another party reads or main's fatal line (etcd's error text, paths, configuration
 * values), so they cannot forge lines or drive a terminal. dst is not NUL-terminated. */
size_t log_escape_controls(const char *src, size_t n, char *dst, size_t room, bool *cut);

/* Zero means the default for every field. */
typedef struct log_options {
    log_level level;            /* default LOG_LEVEL_INFO */
    const char *path;           /* NULL or "" = stderr; else opened O_APPEND|O_CREAT, mode 0640 */
    size_t buffer_size;         /* bytes per buffer, two per thread; default 64 KiB, min 1 KiB */
    unsigned flush_interval_ms; /* default 100 */
    unsigned max_threads;       /* registered threads; default 512 */
    bool access_log;            /* default off */
    log_format format;          /* default LOG_FORMAT_TEXT */
} log_options;

/* Opens the output and starts the logger thread. Returns 0, or -1 with a reason in err (bad
 * option, file cannot be opened, already running). */
int log_init(const log_options *o, char *err, size_t errlen);
/* Writes everything pending, stops and joins the logger thread, closes the file, frees the
 * buffers; later lines go synchronously to stderr. Idempotent. */
void log_shutdown(void);
/* Asks the logger thread to reopen the file (after logrotate renamed it). Returns at once; the
 * next flush writes to the reopened file. On failure the old file is kept and an ERROR line
 * says so. No-op when logging to stderr or not running. */
void log_reopen(void);
/* Blocks until every line appended before the call has been written. Not for loop threads. */
void log_flush(void);
void log_set_level(log_level level);

/* Lines accepted (buffered or written synchronously) and lines lost, since process start. */
uint64_t log_lines_total(void);
uint64_t log_dropped_total(void);

/* Internals the inline checks read; not for direct use. */
extern _Atomic int log__level;
extern _Atomic bool log__access_on;

static inline bool log_enabled(log_level level)
{
    return (int)level >= atomic_load_explicit(&log__level, memory_order_relaxed);
}

static inline bool log_access_enabled(void)
{
    return atomic_load_explicit(&log__access_on, memory_order_relaxed);
}

/* Formats and queues one line (checks the level again). Prefer the macros. */
void log_write(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One access-log line, tagged ACCESS; does nothing when the access log is off. */
void log_access(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One HTTP request in the access log: in text "METHOD TARGET STATUS 0.123ms" (as log_access
 * would print it), in JSON the structured object described above. Nothing when it is off. */
void log_access_http(const log_access_entry *e);
/* The format of the current (or last) run: what a line written now looks like. */
log_format log_current_format(void);

#define LOG__AT(level, ...)                                                                        \
    do {                                                                                           \
        if (log_enabled(level))                                                                    \
            log_write(level, __VA_ARGS__);                                                         \
    } while (0)
#define LOG_DEBUG(...) LOG__AT(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define LOG_INFO(...)  LOG__AT(LOG_LEVEL_INFO, __VA_ARGS__)
#define LOG_WARN(...)  LOG__AT(LOG_LEVEL_WARN, __VA_ARGS__)
#define LOG_ERROR(...) LOG__AT(LOG_LEVEL_ERROR, __VA_ARGS__)
#define LOG_ACCESS(...)                                                                            \
    do {                                                                                           \
        if (log_access_enabled())                                                                  \
            log_access(__VA_ARGS__);                                                               \
    } while (0)

/* Test hook: while held the logger thread makes no flush (lines accumulate, then drop), so tests
 * can overflow a buffer deterministically. log_test_hold(true) returns once no flush is in
 * progress. Do not call log_flush while held. */
void log_test_hold(bool hold);

#endif
