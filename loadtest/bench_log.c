/* Logger benchmark: lines/s and ns per LOG_INFO call at 1, 2 and 4 threads, to /dev/null and to
 * a file in /tmp (deleted afterwards), with a ~100-byte message carrying two integers. Prints
 * figures; not a test.
 *
 *   bench_log [-n LINES] [-t THREADS] [-b BUFFER_BYTES] [-i FLUSH_MS] [-r RATE] [-R REPEATS]
 *             [-f text|json] [-a]
 *
 * -n lines per thread (default 1,000,000); -t runs only that thread count (default 1, 2, 4);
 * -b bytes per buffer (default 65536, the daemon's default); -i flush interval (default 100);
 * -r paces the writers to RATE lines/s in total (default: as fast as they can); -R runs each
 * row REPEATS times (default 3) and prints the median by written/s. -f sets log.format; -a logs
 * access lines (log_access_http, as http.c does for each request) instead of the message.
 *
 * Columns: "calls/s" is the rate the writer threads logged at (lines offered / time until the
 * last writer finished), "ns/call" the time of one call on one thread; "written/s" is lines
 * actually written / time until log_shutdown returned with everything on disk; "dropped" lines
 * lost because the logger fell behind. When a run drops, short runs (~0.5 s) are repeated with
 * writers paced to lower total rates (80 % of the written rate, then x0.7 each step, then three
 * bisection steps) and the highest rate that dropped nothing is printed as "no-drop rate". */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "obs/log.h"

static log_format format = LOG_FORMAT_TEXT;
static bool access_lines;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct writer {
    pthread_t th;
    int id;
    uint64_t lines;
    double rate; /* lines/s for this thread, 0 = as fast as possible */
    pthread_barrier_t *go;
    uint64_t t0, t1;
} writer;

/* Holds a thread to `rate` lines/s, 64 lines at a time, without catching up after a stall (a
 * catch-up burst would measure the buffer size, not the sustainable rate). */
static void pace(uint64_t *next, double rate)
{
    uint64_t now = mono_ns();
    *next += (uint64_t)(64e9 / rate);
    if (*next + 100000 < now)
        *next = now; /* more than 100 us behind: forget the debt */
    if (*next > now + 20000) {
        struct timespec d = {.tv_sec = 0, .tv_nsec = (long)(*next - now)};
        if (d.tv_nsec >= 1000000000) {
            d.tv_sec = d.tv_nsec / 1000000000;
            d.tv_nsec %= 1000000000;
        }
        nanosleep(&d, NULL);
    }
}

static void *write_lines(void *p)
{
    writer *w = p;
    pthread_barrier_wait(w->go);
    w->t0 = mono_ns();
    uint64_t next = w->t0;
    for (uint64_t i = 0; i < w->lines; i++) {
        if (w->rate > 0 && (i & 63) == 63)
            pace(&next, w->rate);
        if (access_lines) {
            static const char target[] = "/id?format=base62";
            log_access_http(&(log_access_entry){.method = "GET",
                                                .target = target,
                                                .target_len = sizeof target - 1,
                                                .status = 200,
                                                .duration_ns = 48000 + i % 1000,
                                                .bytes = 19,
                                                .version_major = 1,
                                                .version_minor = 1});
            continue;
        }
        /* 100 bytes of message with the two integers */
        LOG_INFO("bench writer %d line %llu: request handled, status=ok, the quick brown fox "
                 "jumps over the dog",
                 w->id, (unsigned long long)i);
    }
    w->t1 = mono_ns();
    return NULL;
}

typedef struct result {
    double calls_per_s, ns_per_call, written_per_s;
    uint64_t offered, written, dropped;
} result;

static result run(const char *path, int threads, uint64_t lines, size_t buffer,
                  unsigned interval_ms, double total_rate)
{
    char err[256];
    log_options o = {.path = path,
                     .buffer_size = buffer,
                     .flush_interval_ms = interval_ms,
                     .access_log = access_lines,
                     .format = format};
    if (log_init(&o, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    uint64_t lines0 = log_lines_total(), dropped0 = log_dropped_total();
    writer w[64];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)threads + 1);
    for (int t = 0; t < threads; t++) {
        w[t] = (writer){.id = t, .lines = lines, .rate = total_rate / threads, .go = &go};
        pthread_create(&w[t].th, NULL, write_lines, &w[t]);
    }
    pthread_barrier_wait(&go);
    uint64_t start = mono_ns(), writers_done = 0;
    double call_ns = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(w[t].th, NULL);
        if (w[t].t1 > writers_done)
            writers_done = w[t].t1;
        call_ns += (double)(w[t].t1 - w[t].t0) / (double)lines;
    }
    log_shutdown();
    uint64_t end = mono_ns();
    result r = {.offered = lines * (uint64_t)threads};
    r.written = log_lines_total() - lines0;
    r.dropped = log_dropped_total() - dropped0;
    r.calls_per_s = (double)r.offered * 1e9 / (double)(writers_done - start);
    r.ns_per_call = call_ns / threads;
    r.written_per_s = (double)r.written * 1e9 / (double)(end - start);
    pthread_barrier_destroy(&go);
    return r;
}

/* Removes the benchmark's own file between runs (never the /dev/null sink). */
static void remove_output(const char *path, const char *own_file)
{
    if (strcmp(path, own_file) == 0)
        unlink(path);
}

static int by_written(const void *a, const void *b)
{
    double x = ((const result *)a)->written_per_s, y = ((const result *)b)->written_per_s;
    return x < y ? -1 : x > y;
}

/* True if `rate` lines/s in total for about half a second (at least 200,000 lines) drops none. */
static bool no_drops_at(const char *path, const char *own_file, int threads, size_t buffer,
                        unsigned interval_ms, double rate, double *achieved)
{
    uint64_t n = (uint64_t)(rate / 2 / threads);
    if (n < 200000 / (uint64_t)threads)
        n = 200000 / (uint64_t)threads;
    result p = run(path, threads, n, buffer, interval_ms, rate);
    remove_output(path, own_file);
    *achieved = p.calls_per_s;
    return p.dropped == 0;
}

static void bench(const char *label, const char *path, const char *own_file, int threads,
                  uint64_t lines, size_t buffer, unsigned interval_ms, double fixed_rate,
                  int repeats)
{
    result rs[16];
    for (int i = 0; i < repeats; i++) {
        rs[i] = run(path, threads, lines, buffer, interval_ms, fixed_rate);
        remove_output(path, own_file);
    }
    qsort(rs, (size_t)repeats, sizeof rs[0], by_written);
    result r = rs[repeats / 2]; /* the median run */
    printf("%-10s %7d %12.0f %8.0f %12.0f %10llu %6.2f%%", label, threads, r.calls_per_s,
           r.ns_per_call, r.written_per_s, (unsigned long long)r.dropped,
           100.0 * (double)r.dropped / (double)r.offered);
    if (fixed_rate > 0 || r.dropped == 0) {
        printf(" %14s\n", fixed_rate > 0 ? "(paced run)" : "(none dropped)");
        return;
    }
    fflush(stdout);
    /* Down by x0.7 from 80 % of the written rate until a probe drops nothing, then bisect. */
    double fail = r.calls_per_s, ok = 0.8 * r.written_per_s, got = 0, best = 0;
    bool found = false;
    for (int step = 0; step < 12 && !found; step++) {
        found = no_drops_at(path, own_file, threads, buffer, interval_ms, ok, &got);
        if (!found) {
            fail = ok;
            ok *= 0.7;
        }
    }
    if (!found) {
        printf(" %14s\n", "(not found)");
        return;
    }
    best = got;
    for (int step = 0; step < 3; step++) {
        double mid = (ok + fail) / 2;
        if (no_drops_at(path, own_file, threads, buffer, interval_ms, mid, &got)) {
            ok = mid;
            best = got;
        } else {
            fail = mid;
        }
    }
    printf(" %14.0f\n", best);
}

int main(int argc, char **argv)
{
    uint64_t lines = 1000000;
    int only_threads = 0;
    size_t buffer = 65536;
    unsigned interval_ms = 100;
    double fixed_rate = 0;
    int repeats = 3;
    int c;
    while ((c = getopt(argc, argv, "n:t:b:i:r:R:f:a")) != -1) {
        switch (c) {
        case 'n': lines = strtoull(optarg, NULL, 10); break;
        case 't': only_threads = atoi(optarg); break;
        case 'b': buffer = strtoull(optarg, NULL, 10); break;
        case 'i': interval_ms = (unsigned)atoi(optarg); break;
        case 'r': fixed_rate = strtod(optarg, NULL); break;
        case 'R': repeats = atoi(optarg); break;
        case 'f': format = strcmp(optarg, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT; break;
        case 'a': access_lines = true; break;
        default:
            fprintf(stderr,
                    "usage: %s [-n LINES] [-t THREADS] [-b BUFFER] [-i FLUSH_MS] [-r RATE]"
                    " [-R REPEATS] [-f text|json] [-a]\n",
                    argv[0]);
            return 2;
        }
    }
    if (lines == 0 || only_threads < 0 || only_threads > 64 || repeats < 1 || repeats > 15) {
        fprintf(stderr, "bad -n, -t (1..64) or -R (1..15)\n");
        return 2;
    }
    char file[] = "/tmp/bench_log.XXXXXX";
    int fd = mkstemp(file);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    close(fd);
    printf("bench_log: %llu %s lines per thread, format %s, %zu-byte buffers x2 per thread, "
           "flush %u ms, %ld CPUs\n",
           (unsigned long long)lines, access_lines ? "access" : "message",
           format == LOG_FORMAT_JSON ? "json" : "text", buffer, interval_ms,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("%-10s %7s %12s %8s %12s %10s %7s %14s\n", "sink", "threads", "calls/s", "ns/call",
           "written/s", "dropped", "drop%", "no-drop rate");
    static const int counts[] = {1, 2, 4};
    for (int s = 0; s < 2; s++) {
        for (size_t k = 0; k < 3; k++) {
            int t = only_threads ? only_threads : counts[k];
            bench(s == 0 ? "/dev/null" : "file", s == 0 ? "/dev/null" : file, file, t, lines,
                  buffer, interval_ms, fixed_rate, repeats);
            if (only_threads)
                break;
        }
    }
    unlink(file);
    return 0;
}
