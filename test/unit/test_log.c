/* Logger: line format and order, levels, sanitising, truncation, overflow accounting, many
 * threads, the synchronous path outside init/shutdown, shutdown flush, reopen; the JSON format
 * (escaping, validity under truncation, access lines) and the text access line. */
#include <check.h>
#include <ctype.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "obs/log.h"
#include "util/rfc3339.h"

/* --- helpers ---------------------------------------------------------------------------------- */

static char dir[64], path[128];

static void make_dir(void)
{
    strcpy(dir, "/tmp/test_log.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/out.log", dir);
}

static void remove_dir(void)
{
    char p[160];
    static const char *names[] = {"out.log", "out.log.1", "stderr.txt"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static char *slurp(const char *file, size_t *len)
{
    FILE *f = fopen(file, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = (size_t)n;
    return buf;
}

/* Splits buf into lines in place (each must end with '\n'); returns the count, *lines malloc'd. */
static size_t split_lines(char *buf, size_t len, char ***lines)
{
    size_t n = 0, cap = 1024;
    char **v = malloc(cap * sizeof *v);
    char *p = buf, *end = buf + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        ck_assert_msg(nl != NULL, "last line without newline");
        *nl = '\0';
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof *v);
        v[n++] = p;
        p = nl + 1;
    }
    *lines = v;
    return n;
}

/* "2026-11-29T21:18:17.123Z " followed by tag, and a time within a minute of now. */
static bool line_format_ok(const char *l, const char *tag)
{
    static const char pat[] = "dddd-dd-ddTdd:dd:dd.dddZ ";
    for (size_t i = 0; i < sizeof pat - 1; i++) {
        if (pat[i] == 'd' ? !isdigit((unsigned char)l[i]) : l[i] != pat[i])
            return false;
    }
    if (strncmp(l + 25, tag, strlen(tag)) != 0)
        return false;
    struct tm tm = {0};
    if (sscanf(l, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec) != 6)
        return false;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    return llabs((long long)(t - time(NULL))) <= 60;
}

static void start(log_options o)
{
    char err[256];
    if (!o.path)
        o.path = path;
    ck_assert_msg(log_init(&o, err, sizeof err) == 0, "%s", err);
}

/* Sum of N over "log: dropped N lines" summary lines. */
static uint64_t summary_total(char **lines, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = strstr(lines[i], "WARN  log: dropped ");
        unsigned long long d;
        if (p && sscanf(p, "WARN  log: dropped %llu lines", &d) == 1)
            sum += d;
    }
    return sum;
}

/* Sends stderr to <dir>/stderr.txt (its path into errpath); returns the saved descriptor. */
static int capture_stderr(char *errpath, size_t cap)
{
    snprintf(errpath, cap, "%s/stderr.txt", dir);
    int saved = dup(STDERR_FILENO);
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    return saved;
}

static void restore_stderr(int saved)
{
    dup2(saved, STDERR_FILENO);
    close(saved);
}

static int calls;
static int side_effect(void)
{
    return ++calls;
}

/* --- tests ------------------------------------------------------------------------------------ */

START_TEST(test_format_and_order)
{
    make_dir();
    start((log_options){0});
    for (int i = 0; i < 200; i++)
        LOG_INFO("line %d of %s", i, "many");
    log_shutdown();
    size_t len;
    char *buf = slurp(path, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(n, 200);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char want[64];
        snprintf(want, sizeof want, "line %zu of many", i);
        bad += !line_format_ok(lines[i], "INFO  ") || strcmp(lines[i] + 31, want) != 0;
    }
    ck_assert_msg(bad == 0, "%d malformed or out of order, first line: %s", bad, lines[0]);
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

START_TEST(test_levels_and_lazy_arguments)
{
    make_dir();
    start((log_options){.level = LOG_LEVEL_INFO});
    ck_assert(!log_enabled(LOG_LEVEL_DEBUG));
    ck_assert(log_enabled(LOG_LEVEL_INFO));
    calls = 0;
    LOG_DEBUG("debug %d", side_effect());
    ck_assert_int_eq(calls, 0); /* not evaluated */
    LOG_INFO("info %d", side_effect());
    LOG_WARN("warn %d", side_effect());
    LOG_ERROR("error %d", side_effect());
    ck_assert_int_eq(calls, 3);
    log_set_level(LOG_LEVEL_ERROR);
    LOG_WARN("hidden %d", side_effect());
    ck_assert_int_eq(calls, 3);
    log_set_level(LOG_LEVEL_DEBUG);
    LOG_DEBUG("debug %d", side_effect());
    log_shutdown();
    size_t len;
    char *buf = slurp(path, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(lines[0] + 25, "INFO  info 1");
    ck_assert_str_eq(lines[1] + 25, "WARN  warn 2");
    ck_assert_str_eq(lines[2] + 25, "ERROR error 3");
    ck_assert_str_eq(lines[3] + 25, "DEBUG debug 4");
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

START_TEST(test_control_characters_escaped)
{
    make_dir();
    start((log_options){0});
    LOG_INFO("a\nb\rc\td\x1b[31me\x7f f");
    LOG_INFO("user=%s", "evil\n2026-01-01T00:00:00.000Z ERROR forged");
    LOG_INFO("trailing newline\n");
    LOG_INFO("utf-8 stays: \xc3\xa9");
    log_shutdown();
    size_t len;
    char *buf = slurp(path, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(lines[0] + 31, "a\\nb\\rc\\td\\x1b[31me\\x7f f");
    ck_assert_str_eq(lines[1] + 31, "user=evil\\n2026-01-01T00:00:00.000Z ERROR forged");
    ck_assert_str_eq(lines[2] + 31, "trailing newline");
    ck_assert_str_eq(lines[3] + 31, "utf-8 stays: \xc3\xa9");
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* The same escaping for lines written outside the logger (main's fatal line). */
START_TEST(test_escape_controls_exposed)
{
    char out[64];
    bool cut = false;
    const char *src = "a\nb\x1b[31m\xc3\xa9";
    size_t n = log_escape_controls(src, strlen(src), out, sizeof out, &cut);
    ck_assert(!cut);
    ck_assert_int_eq((int)n, (int)strlen("a\\nb\\x1b[31m\xc3\xa9"));
    ck_assert_int_eq(memcmp(out, "a\\nb\\x1b[31m\xc3\xa9", n), 0);
    /* never half an escape: "a\n" in 2 bytes is "a", cut */
    n = log_escape_controls("a\n", 2, out, 2, &cut);
    ck_assert_uint_eq(n, 1);
    ck_assert(cut);
}
END_TEST

START_TEST(test_long_lines_truncated)
{
    make_dir();
    start((log_options){0});
    char *big = malloc(10001);
    memset(big, 'x', 10000);
    big[10000] = '\0';
    LOG_INFO("%s", big);
    for (int i = 0; i < 5000; i++) /* 2-byte UTF-8: the cut must not split one */
        memcpy(big + 2 * i, "\xc3\xa9", 2);
    LOG_INFO("%s", big);
    memset(big, '\x01', 3000); /* fits raw, not once escaped (4 bytes each) */
    big[3000] = '\0';
    LOG_INFO("%s", big);
    LOG_INFO("short after");
    log_shutdown();
    free(big);
    size_t len;
    char *buf = slurp(path, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(n, 4);
    for (size_t i = 0; i < 3; i++) {
        size_t l = strlen(lines[i]) + 1; /* the newline */
        ck_assert_uint_le(l, LOG_LINE_MAX);
        ck_assert_uint_ge(l, LOG_LINE_MAX - 4);
        ck_assert_str_eq(lines[i] + l - 1 - strlen(" [truncated]"), " [truncated]");
    }
    ck_assert_uint_eq(strlen(lines[0]) + 1, LOG_LINE_MAX);
    size_t body = strlen(lines[1]) - 31 - strlen(" [truncated]");
    ck_assert_uint_eq(body % 2, 0); /* whole characters only */
    ck_assert_int_eq(strncmp(lines[2] + 31, "\\x01\\x01", 8), 0);
    ck_assert_str_eq(lines[3] + 31, "short after");
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* A held logger cannot drain: the front buffer fills, the rest is dropped and counted, and the
 * summary line reports exactly that number once the logger runs again. */
START_TEST(test_overflow_drops_and_counts)
{
    make_dir();
    start((log_options){.buffer_size = 4096, .flush_interval_ms = 60000});
    uint64_t lines0 = log_lines_total(), dropped0 = log_dropped_total();
    log_test_hold(true);
    const int total = 1000;
    for (int i = 0; i < total; i++)
        LOG_INFO("overflow %04d, a fixed-length message of about seventy bytes", i);
    size_t line_len =
        31 + strlen("overflow 0000, a fixed-length message of about seventy bytes") + 1;
    uint64_t fit = 4096 / line_len;
    ck_assert_uint_eq(log_lines_total() - lines0, fit);
    ck_assert_uint_eq(log_dropped_total() - dropped0, total - fit);
    log_test_hold(false);
    log_flush();
    size_t len;
    char *buf = slurp(path, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(n, fit + 1);
    for (size_t i = 0; i < fit; i++) {
        char want[32];
        snprintf(want, sizeof want, "overflow %04zu,", i);
        ck_assert_int_eq(strncmp(lines[i] + 31, want, strlen(want)), 0);
    }
    char want[64];
    snprintf(want, sizeof want, "WARN  log: dropped %llu lines", (unsigned long long)(total - fit));
    ck_assert_str_eq(lines[fit] + 25, want);
    free(lines);
    free(buf);
    /* Logging resumes once there is room. */
    LOG_INFO("after the storm");
    log_shutdown();
    buf = slurp(path, &len);
    ck_assert_ptr_nonnull(strstr(buf, "INFO  after the storm\n"));
    free(buf);
    remove_dir();
}
END_TEST

#define NTHREADS   8
#define PER_THREAD 10000

typedef struct writer_arg {
    int id;
    pthread_barrier_t *barrier;
} writer_arg;

static void *writer(void *p)
{
    writer_arg *a = p;
    pthread_barrier_wait(a->barrier);
    for (int i = 0; i < PER_THREAD; i++)
        LOG_INFO("t=%d i=%d", a->id, i);
    return NULL;
}

static void run_writers(void)
{
    pthread_t th[NTHREADS];
    writer_arg args[NTHREADS];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, NTHREADS);
    for (int t = 0; t < NTHREADS; t++) {
        args[t] = (writer_arg){.id = t, .barrier = &barrier};
        ck_assert_int_eq(pthread_create(&th[t], NULL, writer, &args[t]), 0);
    }
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&barrier);
}

/* Parses the writers' lines: each at most once, in order per thread. Returns how many. */
static size_t check_writer_lines(char **lines, size_t n)
{
    static unsigned char seen[NTHREADS][PER_THREAD];
    int last[NTHREADS];
    memset(seen, 0, sizeof seen);
    for (int t = 0; t < NTHREADS; t++)
        last[t] = -1;
    size_t found = 0, dup = 0, disorder = 0, bad = 0;
    for (size_t k = 0; k < n; k++) {
        int t, i;
        if (strstr(lines[k], "log: dropped "))
            continue;
        if (!line_format_ok(lines[k], "INFO  ") ||
            sscanf(lines[k] + 31, "t=%d i=%d", &t, &i) != 2 || t < 0 || t >= NTHREADS || i < 0 ||
            i >= PER_THREAD) {
            bad++;
            continue;
        }
        dup += seen[t][i]++ != 0;
        disorder += i <= last[t];
        last[t] = i;
        found++;
    }
    ck_assert_uint_eq(bad, 0);
    ck_assert_uint_eq(dup, 0);
    ck_assert_uint_eq(disorder, 0);
    return found;
}

/* Buffers big enough for every line: all 80,000 arrive exactly once, in order per thread, while
 * the logger swaps every millisecond. */
START_TEST(test_many_threads_every_line_once)
{
    make_dir();
    start((log_options){.buffer_size = 1u << 20, .flush_interval_ms = 1});
    uint64_t lines0 = log_lines_total(), dropped0 = log_dropped_total();
    run_writers();
    log_shutdown();
    ck_assert_uint_eq(log_lines_total() - lines0, NTHREADS * PER_THREAD);
    ck_assert_uint_eq(log_dropped_total() - dropped0, 0);
    size_t len;
    char *buf = slurp(path, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(n, NTHREADS * PER_THREAD);
    ck_assert_uint_eq(check_writer_lines(lines, n), NTHREADS * PER_THREAD);
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* Tiny buffers: lines drop under load, but every line is written at most once, in order, and
 * written + dropped = sent, with the drops all reported in summary lines. */
START_TEST(test_many_threads_small_buffers_account)
{
    make_dir();
    start((log_options){.buffer_size = 1024, .flush_interval_ms = 1});
    uint64_t lines0 = log_lines_total(), dropped0 = log_dropped_total();
    run_writers();
    log_shutdown();
    uint64_t accepted = log_lines_total() - lines0, dropped = log_dropped_total() - dropped0;
    ck_assert_uint_eq(accepted + dropped, NTHREADS * PER_THREAD);
    size_t len;
    char *buf = slurp(path, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(check_writer_lines(lines, n), accepted);
    ck_assert_uint_eq(summary_total(lines, n), dropped);
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* Wakeups are never lost. With a 60 s flush interval only writers' wakeups (a buffer passing
 * half full) make the logger flush. Writers log flat out, so they keep appending (and trying to
 * wake the logger) while it wakes up; afterwards the file must hold every accepted line except
 * what may legitimately wait for the interval (less than half a buffer per writer). A lost
 * wakeup leaves the logger asleep and the wait times out. (Caught the logger clearing its wake
 * flag before draining the eventfd: a writer still appending above half full set the flag and
 * wrote the eventfd between the two, leaving the flag set with the eventfd empty, so no writer
 * ever woke the logger again.) */
#define WAKE_WRITERS 2
#define WAKE_LINES   100000
#define WAKE_BUFFER  16384

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *wake_writer(void *p)
{
    int id = *(int *)p;
    for (int i = 0; i < WAKE_LINES; i++)
        LOG_INFO("wake t=%d i=%06d, padding to a fixed length", id, i);
    return NULL;
}

START_TEST(test_wakeups_not_lost)
{
    make_dir();
    start((log_options){.buffer_size = WAKE_BUFFER, .flush_interval_ms = 60000});
    size_t line_len = 31 + strlen("wake t=0 i=000000, padding to a fixed length") + 1;
    uint64_t lines0 = log_lines_total();
    pthread_t th[WAKE_WRITERS];
    int ids[WAKE_WRITERS];
    for (int t = 0; t < WAKE_WRITERS; t++) {
        ids[t] = t;
        pthread_create(&th[t], NULL, wake_writer, &ids[t]);
    }
    for (int t = 0; t < WAKE_WRITERS; t++)
        pthread_join(th[t], NULL);
    uint64_t accepted = (log_lines_total() - lines0) * line_len; /* drop summaries only add */
    uint64_t may_wait = WAKE_WRITERS * (WAKE_BUFFER / 2);
    uint64_t want = accepted > may_wait ? accepted - may_wait : 0;
    uint64_t deadline = now_ms() + 2000;
    struct stat st;
    while (stat(path, &st) != 0 || (uint64_t)st.st_size < want) {
        if (now_ms() > deadline)
            break;
        struct timespec d = {.tv_sec = 0, .tv_nsec = 50000};
        nanosleep(&d, NULL);
    }
    ck_assert_msg((uint64_t)st.st_size >= want, "logger asleep: %lld of %llu bytes written",
                  (long long)st.st_size, (unsigned long long)want);
    log_shutdown();
    remove_dir();
}
END_TEST

static void *log_once(void *p)
{
    LOG_INFO("from thread %d", *(int *)p);
    return NULL;
}

/* Threads beyond max_threads have no slot: their lines are dropped and counted. */
START_TEST(test_registry_full_drops)
{
    make_dir();
    start((log_options){.max_threads = 2});
    uint64_t dropped0 = log_dropped_total();
    LOG_INFO("main"); /* slot 0 */
    for (int i = 1; i <= 3; i++) {
        pthread_t th;
        pthread_create(&th, NULL, log_once, &i);
        pthread_join(th, NULL);
    }
    ck_assert_uint_eq(log_dropped_total() - dropped0, 2);
    log_shutdown();
    size_t len;
    char *buf = slurp(path, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(lines[0] + 31, "main");
    ck_assert_str_eq(lines[1] + 31, "from thread 1");
    ck_assert_str_eq(lines[2] + 25, "WARN  log: dropped 2 lines");
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

START_TEST(test_stderr_before_init_and_after_shutdown)
{
    make_dir();
    char errpath[160];
    int saved = capture_stderr(errpath, sizeof errpath);

    LOG_DEBUG("not shown: default level is info");
    LOG_ERROR("before init %d", 1);
    log_access("no access log before init");
    start((log_options){0});
    LOG_INFO("while running");
    log_shutdown();
    log_shutdown(); /* idempotent */
    LOG_WARN("after shutdown%s", "\nwith newline");
    log_reopen(); /* harmless when stopped */
    log_flush();

    restore_stderr(saved);
    size_t len;
    char *buf = slurp(errpath, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(n, 2);
    ck_assert(line_format_ok(lines[0], "ERROR "));
    ck_assert_str_eq(lines[0] + 31, "before init 1");
    ck_assert(line_format_ok(lines[1], "WARN  "));
    ck_assert_str_eq(lines[1] + 31, "after shutdown\\nwith newline");
    free(lines);
    free(buf);
    buf = slurp(path, &len);
    ck_assert_ptr_nonnull(strstr(buf, "INFO  while running\n"));
    free(buf);
    remove_dir();
}
END_TEST

/* Shutdown writes what is pending without waiting for the flush interval; a new run works. */
START_TEST(test_shutdown_flushes_and_restarts)
{
    make_dir();
    start((log_options){.buffer_size = 1u << 20, .flush_interval_ms = 60000}); /* no drops */
    uint64_t dropped0 = log_dropped_total();
    for (int i = 0; i < 5000; i++)
        LOG_INFO("pending %d", i);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    log_shutdown();
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    ck_assert_msg(secs < 1.0, "shutdown took %.3f s", secs);
    ck_assert_uint_eq(log_dropped_total(), dropped0);
    size_t len;
    char *buf = slurp(path, &len), **lines;
    ck_assert_uint_eq(split_lines(buf, len, &lines), 5000);
    ck_assert_str_eq(lines[4999] + 31, "pending 4999");
    free(lines);
    free(buf);

    start((log_options){0}); /* the same thread registers again in the new run */
    LOG_INFO("second run");
    log_shutdown();
    buf = slurp(path, &len);
    ck_assert_ptr_nonnull(strstr(buf, "INFO  second run\n"));
    free(buf);
    remove_dir();
}
END_TEST

START_TEST(test_reopen_after_rename)
{
    make_dir();
    char rotated[160];
    snprintf(rotated, sizeof rotated, "%s/out.log.1", dir);
    start((log_options){.flush_interval_ms = 60000});
    LOG_INFO("first file");
    log_flush();
    ck_assert_int_eq(rename(path, rotated), 0);
    log_reopen();
    LOG_INFO("second file");
    log_flush();
    char *a = slurp(rotated, NULL), *b = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(a, "first file"));
    ck_assert_ptr_null(strstr(a, "second file"));
    ck_assert_ptr_nonnull(strstr(b, "second file"));
    ck_assert_ptr_null(strstr(b, "first file"));
    free(a);
    free(b);
    log_shutdown();
    remove_dir();
}
END_TEST

START_TEST(test_access_log_off_by_default)
{
    make_dir();
    start((log_options){0});
    ck_assert(!log_access_enabled());
    calls = 0;
    LOG_ACCESS("GET / %d", side_effect());
    log_access("direct call while off");
    ck_assert_int_eq(calls, 0);
    log_shutdown();
    start((log_options){.access_log = true});
    ck_assert(log_access_enabled());
    LOG_ACCESS("GET /id %d", 200);
    log_shutdown();
    ck_assert(!log_access_enabled());
    size_t len;
    char *buf = slurp(path, &len), **lines;
    size_t n = split_lines(buf, len, &lines);
    ck_assert_uint_eq(n, 1);
    ck_assert(line_format_ok(lines[0], "ACCESS "));
    ck_assert_str_eq(lines[0] + 32, "GET /id 200");
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* --- JSON format ------------------------------------------------------------------------------ */

/* A strict reader for the flat objects the JSON format writes: {"key":value,...} with string or
 * number values, no whitespace. Strings: RFC 8259 escapes only, no raw control characters,
 * well-formed UTF-8 (RFC 3629). Fills keys[] (malloc'd, decoded) up to max; returns the count,
 * or -1 with the reason in *why. */
static size_t utf8_len_ok(const unsigned char *s)
{
    unsigned char c = s[0];
    size_t len = c >= 0xC2 && c <= 0xDF   ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
    if (!len)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

static const char *json_string_end(const char *p, const char **why)
{
    if (*p++ != '"') {
        *why = "string expected";
        return NULL;
    }
    for (;;) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c == '\0' || c < 0x20) {
            *why = c ? "raw control character in a string" : "unterminated string";
            return NULL;
        }
        if (c == '\\') {
            char e = p[1];
            if (e == 'u') {
                for (int i = 2; i < 6; i++)
                    if (!isxdigit((unsigned char)p[i])) {
                        *why = "bad \\u escape";
                        return NULL;
                    }
                if (p[2] == 'd' || p[2] == 'D') { /* surrogates are never written */
                    *why = "surrogate escape";
                    return NULL;
                }
                p += 6;
            } else if (e && strchr("\"\\/bfnrt", e)) {
                p += 2;
            } else {
                *why = "bad escape";
                return NULL;
            }
        } else if (c >= 0x80) {
            size_t k = utf8_len_ok((const unsigned char *)p);
            if (!k) {
                *why = "invalid UTF-8 in a string";
                return NULL;
            }
            p += k;
        } else {
            p++;
        }
    }
}

typedef struct json_field {
    char key[32];
    const char *value; /* into the line: the raw JSON text of the value */
    size_t value_len;
} json_field;

static int json_flat_object(const char *line, json_field *f, int max, const char **why)
{
    const char *p = line;
    int n = 0;
    if (*p++ != '{') {
        *why = "not an object";
        return -1;
    }
    for (;;) {
        const char *k = p, *e = json_string_end(p, why);
        if (!e)
            return -1;
        if (*e != ':' || n == max || (size_t)(e - k - 2) >= sizeof f[n].key) {
            *why = "bad key";
            return -1;
        }
        memcpy(f[n].key, k + 1, (size_t)(e - k - 2));
        f[n].key[e - k - 2] = '\0';
        p = e + 1;
        f[n].value = p;
        if (*p == '"') {
            if (!(p = json_string_end(p, why)))
                return -1;
        } else {
            if (*p == '-')
                p++;
            if (!isdigit((unsigned char)*p)) {
                *why = "value neither string nor number";
                return -1;
            }
            while (isdigit((unsigned char)*p))
                p++;
            if (*p == '.') {
                p++;
                if (!isdigit((unsigned char)*p)) {
                    *why = "bad fraction";
                    return -1;
                }
                while (isdigit((unsigned char)*p))
                    p++;
            }
        }
        f[n].value_len = (size_t)(p - f[n].value);
        n++;
        if (*p == '}') {
            if (p[1] != '\0') {
                *why = "text after the object";
                return -1;
            }
            return n;
        }
        if (*p++ != ',') {
            *why = "',' or '}' expected";
            return -1;
        }
    }
}

/* The line is a valid JSON object whose keys are exactly `keys` (comma separated, in order). */
static void assert_json_keys(const char *line, const char *keys)
{
    json_field f[16];
    const char *why = "";
    int n = json_flat_object(line, f, 16, &why);
    size_t l = strlen(line); /* check's messages are short: the head and the tail */
    ck_assert_msg(n > 0, "not valid JSON (%s): %.120s ... %s", why, line,
                  line + (l > 120 ? l - 120 : 0));
    char got[256] = "";
    for (int i = 0; i < n; i++) {
        strcat(got, i ? "," : "");
        strcat(got, f[i].key);
    }
    ck_assert_msg(strcmp(got, keys) == 0, "keys %s, want %s: %.200s", got, keys, line);
}

/* {"ts":"<RFC 3339 UTC with ms, within a minute of now>", ... : returns what follows the ts. */
static const char *json_after_ts(const char *line)
{
    static const char head[] = "{\"ts\":\"";
    ck_assert_msg(strncmp(line, head, sizeof head - 1) == 0, "%s", line);
    const char *ts = line + sizeof head - 1, *why = "";
    uint64_t ms;
    ck_assert_msg(rfc3339_parse_utc_ms(ts, 24, &ms, &why) == 0, "ts: %s: %.80s", why, line);
    ck_assert_msg(ts[19] == '.' && ts[23] == 'Z' && ts[24] == '"', "ts not .mmmZ: %.80s", line);
    ck_assert_msg(llabs((long long)(ms / 1000) - (long long)time(NULL)) <= 60, "ts far: %.80s",
                  line);
    return ts + 25;
}

static char **read_lines(size_t *n, char **buf)
{
    size_t len;
    char **lines;
    *buf = slurp(path, &len);
    *n = split_lines(*buf, len, &lines);
    return lines;
}

START_TEST(test_json_lines_and_levels)
{
    make_dir();
    start((log_options){.format = LOG_FORMAT_JSON, .level = LOG_LEVEL_DEBUG});
    ck_assert_int_eq(log_current_format(), LOG_FORMAT_JSON);
    LOG_DEBUG("d %d", 1);
    LOG_INFO("i %s", "two");
    LOG_WARN("w");
    LOG_ERROR("e\n"); /* trailing newlines dropped, as in text */
    log_shutdown();
    size_t n;
    char *buf, **lines = read_lines(&n, &buf);
    ck_assert_uint_eq(n, 4);
    static const char *const want[] = {
        ",\"level\":\"debug\",\"type\":\"log\",\"msg\":\"d 1\"}",
        ",\"level\":\"info\",\"type\":\"log\",\"msg\":\"i two\"}",
        ",\"level\":\"warn\",\"type\":\"log\",\"msg\":\"w\"}",
        ",\"level\":\"error\",\"type\":\"log\",\"msg\":\"e\"}",
    };
    for (size_t i = 0; i < n; i++) {
        assert_json_keys(lines[i], "ts,level,type,msg");
        ck_assert_str_eq(json_after_ts(lines[i]), want[i]);
    }
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

START_TEST(test_json_escaping)
{
    make_dir();
    start((log_options){.format = LOG_FORMAT_JSON});
    /* every control character, NUL through %c, and DEL */
    char ctl[40];
    size_t k = 0;
    for (int c = 1; c < 0x20; c++)
        ctl[k++] = (char)c;
    ctl[k++] = 0x7f;
    ctl[k] = '\0';
    LOG_INFO("[%c%s]", 0, ctl);
    LOG_INFO("q\"uo\"te \\back\\slash /");
    LOG_INFO("utf-8 stays: \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    /* not UTF-8: a lone continuation, 0xff, overlong, a surrogate, above U+10FFFF, cut short */
    LOG_INFO("bad: \x80|\xff|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xe2\x82");
    LOG_INFO("user=%s", "evil\"}\n{\"ts\":\"forged");
    log_shutdown();
    size_t n;
    char *buf, **lines = read_lines(&n, &buf);
    ck_assert_uint_eq(n, 5);
    char want[512] = "[\\u0000";
    for (int c = 1; c < 0x20; c++) {
        char e[8];
        if (c == '\n' || c == '\r' || c == '\t')
            snprintf(e, sizeof e, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
        else
            snprintf(e, sizeof e, "\\u%04x", c);
        strcat(want, e);
    }
    strcat(want, "\\u007f]");
    const char *msgs[5];
    for (size_t i = 0; i < n; i++) {
        assert_json_keys(lines[i], "ts,level,type,msg");
        msgs[i] = strstr(lines[i], "\"msg\":\"") + 7;
        lines[i][strlen(lines[i]) - 2] = '\0'; /* the closing quote and brace */
    }
    ck_assert_str_eq(msgs[0], want);
    ck_assert_str_eq(msgs[1], "q\\\"uo\\\"te \\\\back\\\\slash /");
    ck_assert_str_eq(msgs[2], "utf-8 stays: \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    ck_assert_str_eq(msgs[3], "bad: \\ufffd|\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|"
                              "\\ufffd\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd");
    ck_assert_str_eq(msgs[4], "user=evil\\\"}\\n{\\\"ts\\\":\\\"forged");
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* Each byte value at each offset of a 16-byte plain message (the scan goes eight bytes at a
 * time): the escape is the one the schema says, and nothing around it changes. */
START_TEST(test_json_every_byte_at_every_offset)
{
    make_dir();
    start((log_options){.format = LOG_FORMAT_JSON, .buffer_size = 1u << 20});
    static const char plain[] = "abcdefghijklmnop";
    for (int b = 0; b < 256; b++)
        for (int at = 0; at < 16; at++)
            LOG_INFO("%.*s%c%s", at, plain, b, plain + at);
    log_shutdown();
    size_t n;
    char *buf, **lines = read_lines(&n, &buf);
    ck_assert_uint_eq(n, 256 * 16);
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        char esc[8];
        if (b == '"' || b == '\\')
            snprintf(esc, sizeof esc, "\\%c", b);
        else if (b == '\n' || b == '\r' || b == '\t')
            snprintf(esc, sizeof esc, "\\%c", b == '\n' ? 'n' : b == '\r' ? 'r' : 't');
        else if (b < 0x20 || b == 0x7f)
            snprintf(esc, sizeof esc, "\\u%04x", b);
        else if (b >= 0x80) /* alone, never UTF-8 */
            snprintf(esc, sizeof esc, "\\ufffd");
        else
            snprintf(esc, sizeof esc, "%c", b);
        for (int at = 0; at < 16; at++) {
            char want[128];
            snprintf(want, sizeof want,
                     ",\"level\":\"info\",\"type\":\"log\",\"msg\":\"%.*s%s%s\"}", at, plain, esc,
                     plain + at);
            const char *line = lines[b * 16 + at];
            if (strcmp(json_after_ts(line), want) != 0 && bad++ < 5)
                fprintf(stderr, "byte 0x%02x at %d: %s\n", b, at, line);
        }
    }
    ck_assert_int_eq(bad, 0);
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* Long messages of every kind of unit (plain, 2-byte escapes, 6-byte escapes, UTF-8, replaced
 * bytes), at every alignment against the limit: the line is cut with the marker, stays within
 * LOG_LINE_MAX and stays valid JSON. */
START_TEST(test_json_truncation_stays_valid)
{
    make_dir();
    start((log_options){.format = LOG_FORMAT_JSON, .buffer_size = 1u << 20});
    static const char *const units[] = {
        "x", "\"", "\x01", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xff"};
    const size_t nunits = sizeof units / sizeof units[0];
    char *big = malloc(20000);
    for (size_t u = 0; u < nunits; u++)
        for (int pad = 0; pad < 6; pad++) {
            size_t o = 0;
            for (int i = 0; i < pad; i++)
                big[o++] = 'p';
            while (o + 4 < 10000)
                for (const char *s = units[u]; *s; s++)
                    big[o++] = *s;
            big[o] = '\0';
            LOG_INFO("%s", big);
        }
    memset(big, 'y', 5000);
    big[5000] = '\0';
    LOG_INFO("%s", big); /* longer than vsnprintf's buffer too */
    LOG_INFO("short after");
    log_shutdown();
    free(big);
    size_t n;
    char *buf, **lines = read_lines(&n, &buf);
    ck_assert_uint_eq(n, nunits * 6 + 2);
    static const char tail[] = " [truncated]\"}";
    for (size_t i = 0; i + 1 < n; i++) {
        size_t l = strlen(lines[i]) + 1;
        ck_assert_uint_le(l, LOG_LINE_MAX);
        ck_assert_uint_ge(l, LOG_LINE_MAX - 6 - 1); /* at most one 6-byte escape short */
        assert_json_keys(lines[i], "ts,level,type,msg");
        ck_assert_str_eq(lines[i] + l - sizeof tail, tail);
    }
    ck_assert_str_eq(json_after_ts(lines[n - 1]),
                     ",\"level\":\"info\",\"type\":\"log\",\"msg\":\"short after\"}");
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* The logger's own lines (the drop summary) follow the format too. */
START_TEST(test_json_drop_summary)
{
    make_dir();
    start(
        (log_options){.format = LOG_FORMAT_JSON, .buffer_size = 1024, .flush_interval_ms = 60000});
    log_test_hold(true);
    for (int i = 0; i < 100; i++)
        LOG_INFO("overflow %d", i);
    log_test_hold(false);
    log_shutdown();
    size_t n;
    char *buf, **lines = read_lines(&n, &buf);
    ck_assert_uint_ge(n, 2);
    for (size_t i = 0; i < n; i++)
        assert_json_keys(lines[i], "ts,level,type,msg");
    char want[128];
    snprintf(want, sizeof want,
             ",\"level\":\"warn\",\"type\":\"log\",\"msg\":\"log: dropped %zu lines\"}",
             100 - (n - 1));
    ck_assert_str_eq(json_after_ts(lines[n - 1]), want);
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

static const char access_keys[] =
    "ts,level,type,method,path,status,duration_ms,bytes,proto,remote";

START_TEST(test_json_access_lines)
{
    make_dir();
    start((log_options){.format = LOG_FORMAT_JSON, .access_log = true});
    static const char target[] = "/cache/a\"b\\c\x01\xff?q=\xc3\xa9";
    log_access_http(&(log_access_entry){.method = "GET",
                                        .target = target,
                                        .target_len = sizeof target - 1,
                                        .status = 404,
                                        .duration_ns = 1234567,
                                        .bytes = 21,
                                        .version_major = 1,
                                        .version_minor = 1,
                                        .remote = "[2001:db8::1]:443"});
    log_access_http(&(log_access_entry){.method = "POST", .status = 400, .duration_ns = 499});
    char *long_target = malloc(3000);
    memset(long_target, '"', 3000); /* 512 kept, each escaped to 2 bytes */
    log_access_http(&(log_access_entry){.method = "HEAD",
                                        .target = long_target,
                                        .target_len = 3000,
                                        .status = 200,
                                        .duration_ns = 12345678999,
                                        .version_major = 1});
    free(long_target);
    log_access("free %s", "form");
    log_shutdown();
    size_t n;
    char *buf, **lines = read_lines(&n, &buf);
    ck_assert_uint_eq(n, 4);
    for (size_t i = 0; i < 3; i++)
        assert_json_keys(lines[i], access_keys);
    ck_assert_str_eq(json_after_ts(lines[0]),
                     ",\"level\":\"info\",\"type\":\"access\",\"method\":\"GET\","
                     "\"path\":\"/cache/a\\\"b\\\\c\\u0001\\ufffd?q=\xc3\xa9\",\"status\":404,"
                     "\"duration_ms\":1.235,\"bytes\":21,\"proto\":\"HTTP/1.1\","
                     "\"remote\":\"[2001:db8::1]:443\"}");
    ck_assert_str_eq(json_after_ts(lines[1]),
                     ",\"level\":\"info\",\"type\":\"access\",\"method\":\"POST\",\"path\":\"-\","
                     "\"status\":400,\"duration_ms\":0.000,\"bytes\":0,\"proto\":\"\","
                     "\"remote\":\"\"}");
    const char *p = strstr(lines[2], "\"path\":\"") + 8;
    for (int i = 0; i < 512; i++)
        ck_assert_msg(p[2 * i] == '\\' && p[2 * i + 1] == '"', "at %d: %s", i, lines[2]);
    ck_assert_str_eq(p + 1024, "\",\"status\":200,\"duration_ms\":12345.679,\"bytes\":0,"
                               "\"proto\":\"HTTP/1.0\",\"remote\":\"\"}");
    assert_json_keys(lines[3], "ts,level,type,msg");
    ck_assert_str_eq(json_after_ts(lines[3]),
                     ",\"level\":\"info\",\"type\":\"access\",\"msg\":\"free form\"}");
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* The text access line of log_access_http is exactly the line http.c wrote before it existed. */
START_TEST(test_text_access_lines_unchanged)
{
    make_dir();
    start((log_options){.access_log = true});
    ck_assert_int_eq(log_current_format(), LOG_FORMAT_TEXT);
    log_access_http(&(log_access_entry){.method = "GET",
                                        .target = "/id?format=hex",
                                        .target_len = 14,
                                        .status = 200,
                                        .duration_ns = 1234567,
                                        .bytes = 17,
                                        .version_major = 1,
                                        .version_minor = 1});
    log_access_http(&(log_access_entry){.method = "DELETE", .status = 400, .duration_ns = 999});
    char *long_target = malloc(1000);
    memset(long_target, 'a', 1000);
    log_access_http(&(log_access_entry){
        .method = "GET", .target = long_target, .target_len = 1000, .status = 414});
    log_shutdown();
    size_t n;
    char *buf, **lines = read_lines(&n, &buf);
    ck_assert_uint_eq(n, 3);
    ck_assert(line_format_ok(lines[0], "ACCESS "));
    ck_assert_str_eq(lines[0] + 32, "GET /id?format=hex 200 1.235ms");
    ck_assert_str_eq(lines[1] + 32, "DELETE - 400 0.001ms");
    char want[600];
    snprintf(want, sizeof want, "GET %.512s 414 0.000ms", long_target);
    ck_assert_str_eq(lines[2] + 32, want);
    free(long_target);
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

/* After log_shutdown a JSON log stays JSON (the synchronous stderr lines). */
START_TEST(test_json_kept_after_shutdown)
{
    make_dir();
    char errpath[160];
    int saved = capture_stderr(errpath, sizeof errpath);
    LOG_WARN("before init: text");
    start((log_options){.format = LOG_FORMAT_JSON});
    log_shutdown();
    ck_assert_int_eq(log_current_format(), LOG_FORMAT_JSON);
    LOG_ERROR("after shutdown: \"json\"");
    restore_stderr(saved);
    size_t len;
    char *buf = slurp(errpath, &len), **lines;
    ck_assert_uint_eq(split_lines(buf, len, &lines), 2);
    ck_assert(line_format_ok(lines[0], "WARN  "));
    assert_json_keys(lines[1], "ts,level,type,msg");
    ck_assert_str_eq(
        json_after_ts(lines[1]),
        ",\"level\":\"error\",\"type\":\"log\",\"msg\":\"after shutdown: \\\"json\\\"\"}");
    free(lines);
    free(buf);
    remove_dir();
}
END_TEST

START_TEST(test_init_errors)
{
    make_dir();
    char err[256];
    log_options o = {.path = "/nonexistent-dir/x.log"};
    ck_assert_int_eq(log_init(&o, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent-dir/x.log"));
    o = (log_options){.buffer_size = 100};
    ck_assert_int_eq(log_init(&o, err, sizeof err), -1);
    o = (log_options){.level = (log_level)9};
    ck_assert_int_eq(log_init(&o, err, sizeof err), -1);
    o = (log_options){.format = (log_format)7};
    ck_assert_int_eq(log_init(&o, err, sizeof err), -1);
    ck_assert_str_eq(err, "log: invalid format 7");
    start((log_options){0});
    o = (log_options){.path = path};
    ck_assert_int_eq(log_init(&o, err, sizeof err), -1);
    ck_assert_str_eq(err, "log: already running");
    log_shutdown();
    remove_dir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_format_and_order);
    tcase_add_test(tc, test_levels_and_lazy_arguments);
    tcase_add_test(tc, test_control_characters_escaped);
    tcase_add_test(tc, test_escape_controls_exposed);
    tcase_add_test(tc, test_long_lines_truncated);
    tcase_add_test(tc, test_overflow_drops_and_counts);
    tcase_add_test(tc, test_many_threads_every_line_once);
    tcase_add_test(tc, test_many_threads_small_buffers_account);
    tcase_add_test(tc, test_wakeups_not_lost);
    tcase_add_test(tc, test_registry_full_drops);
    tcase_add_test(tc, test_stderr_before_init_and_after_shutdown);
    tcase_add_test(tc, test_shutdown_flushes_and_restarts);
    tcase_add_test(tc, test_reopen_after_rename);
    tcase_add_test(tc, test_access_log_off_by_default);
    tcase_add_test(tc, test_json_lines_and_levels);
    tcase_add_test(tc, test_json_escaping);
    tcase_add_test(tc, test_json_every_byte_at_every_offset);
    tcase_add_test(tc, test_json_truncation_stays_valid);
    tcase_add_test(tc, test_json_drop_summary);
    tcase_add_test(tc, test_json_access_lines);
    tcase_add_test(tc, test_text_access_lines_unchanged);
    tcase_add_test(tc, test_json_kept_after_shutdown);
    tcase_add_test(tc, test_init_errors);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
