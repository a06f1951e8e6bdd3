/* Shared pieces of the libFuzzer harnesses (test/fuzz/README.md): assertions that crash with a
 * message, the input-splitting scheme, a private scratch directory, a quiet and deterministic
 * process environment, and the cache store's consistency check.
 *
 * Header-only on purpose: every harness is one translation unit plus the libraries.
 */
#ifndef SF_FUZZ_COMMON_H
#define SF_FUZZ_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/store.h"
#include "obs/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Sanitizer defaults baked into each harness, so a crash input replays the same way whether the
 * binary is run by run.sh or by hand (UBSAN_OPTIONS / ASAN_OPTIONS from the environment are
 * applied on top). halt_on_error: the checks fuzz.cmake makes recoverable still abort unless
 * test/fuzz/ubsan.supp names them. */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void)
{
#ifdef SF_FUZZ_UBSAN_SUPP
    return "halt_on_error=1:print_stacktrace=1:suppressions=" SF_FUZZ_UBSAN_SUPP;
#else
    return "halt_on_error=1:print_stacktrace=1";
#endif
}

/* A failed property: print why and abort, which libFuzzer reports as a crash with the input. */
__attribute__((format(printf, 3, 4), noreturn)) static inline void
fuzz_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\nFUZZ PROPERTY FAILED at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fuzz_fail(__FILE__, __LINE__, __VA_ARGS__);                                            \
    } while (0)

/* ---- splitting the input into reads -------------------------------------------------------- */

/* The first input byte picks how the rest is cut into reads, so that partial reads, requests
 * split anywhere and pipelines are all exercised by the same bytes:
 *   bits 0-2  the largest read: whole input, 1, 4, 16, 64, 512, 4096 bytes, or two random halves
 *   bits 3-7  seed of the read sizes between 1 and that maximum (and of the split point)
 * The remaining flag bits mean different things to each harness (they reuse bits 3-7). */
typedef struct fuzz_splitter {
    uint32_t state;
    size_t max;
    bool halves;
} fuzz_splitter;

static inline void fuzz_splitter_init(fuzz_splitter *s, uint8_t flags, size_t total)
{
    static const size_t max[8] = {SIZE_MAX, 1, 4, 16, 64, 512, 4096, 0};
    s->state = 0x9e3779b9u ^ ((uint32_t)flags * 0x85ebca6bu) ^ (uint32_t)total;
    s->max = max[flags & 7];
    s->halves = (flags & 7) == 7;
}

static inline uint32_t fuzz_rand(fuzz_splitter *s)
{
    uint32_t x = s->state; /* xorshift32 */
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s->state = x ? x : 1;
    return s->state;
}

/* The next read's size, 1..left (left > 0). */
static inline size_t fuzz_next_read(fuzz_splitter *s, size_t left)
{
    if (s->halves) {
        s->halves = false; /* first piece random, then the rest at once */
        size_t n = 1 + fuzz_rand(s) % left;
        s->max = SIZE_MAX;
        return n;
    }
    if (s->max == SIZE_MAX)
        return left;
    size_t n = s->max == 1 ? 1 : 1 + fuzz_rand(s) % s->max;
    return n < left ? n : left;
}

/* SF_FUZZ_DUMP=1 in the environment: harnesses copy what the server wrote to stderr (for
 * triage: `SF_FUZZ_DUMP=1 build-fuzz/fuzz_http crash-...`). */
static inline bool fuzz_dump_enabled(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("SF_FUZZ_DUMP") != NULL;
    return on;
}

static inline void fuzz_dump(const char *data, size_t len)
{
    if (fuzz_dump_enabled())
        fwrite(data, 1, len, stderr);
}

/* ---- process environment --------------------------------------------------------------------- */

/* No configuration from the environment (SNOWFLAKED_*, POD_*): runs must not depend on the
 * shell that started them. */
static inline void fuzz_clean_environment(void)
{
    extern char **environ;
    for (bool again = true; again;) {
        again = false;
        for (char **e = environ; e && *e; e++) {
            if (strncmp(*e, "SNOWFLAKED_", 11) == 0 || strncmp(*e, "POD_", 4) == 0) {
                char name[256];
                size_t n = strcspn(*e, "=");
                if (n >= sizeof name)
                    n = sizeof name - 1;
                memcpy(name, *e, n);
                name[n] = '\0';
                unsetenv(name);
                again = true; /* environ changed under us: start over */
                break;
            }
        }
    }
    log_set_level(LOG_LEVEL_ERROR); /* the logger writes to stderr synchronously here */
}

/* A private directory for the harness's files, on tmpfs when there is one (snapshot saves
 * fsync), removed at exit. One per process, so parallel fuzzing jobs do not collide. */
static char fuzz_dir_path[256];

static inline void fuzz_dir_remove(void)
{
    /* Only files this harness created, by name; then the directory itself. */
    static const char *const names[] = {"input",   "input.tmp", "copy",  "copy.tmp",
                                         "printed", "tls.crt",   "tls.key"};
    char p[320];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", fuzz_dir_path, names[i]);
        unlink(p);
    }
    rmdir(fuzz_dir_path);
}

static inline const char *fuzz_dir(void)
{
    if (fuzz_dir_path[0])
        return fuzz_dir_path;
    const char *bases[] = {"/dev/shm", getenv("TMPDIR"), "/tmp"};
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
        struct stat st;
        if (!bases[i] || stat(bases[i], &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/sf_fuzz_XXXXXX", bases[i]);
        if (mkdtemp(fuzz_dir_path)) {
            atexit(fuzz_dir_remove);
            return fuzz_dir_path;
        }
    }
    fuzz_fail(__FILE__, __LINE__, "cannot create a scratch directory");
}

/* path of a file in the scratch directory */
static inline void fuzz_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", fuzz_dir(), name);
}

static inline void fuzz_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL, "cannot create %s", path);
    FUZZ_CHECK(len == 0 || fwrite(data, 1, len, f) == len, "cannot write %s", path);
    FUZZ_CHECK(fclose(f) == 0, "cannot close %s", path);
}

/* ---- the cache store's books ----------------------------------------------------------------- */

typedef struct fuzz_store_walk {
    uint64_t items, bytes;
} fuzz_store_walk;

static inline int fuzz_store_walk_fn(const cache_item *it, void *arg)
{
    fuzz_store_walk *w = arg;
    w->items++;
    w->bytes += cache_item_size(it);
    /* Keys are 1..250 bytes. Their bytes may be any since the meta commands take base64 keys
     * (memcached's b: the store keeps the decoded bytes, marked or not, and snapshots carry them);
     * the classic commands and HTTP still refuse control bytes before the store. */
    size_t klen = cache_item_klen(it);
    FUZZ_CHECK(klen >= 1 && klen <= CACHE_KEY_MAX, "a stored key of %zu bytes", klen);
    size_t ctl;
    cache_item_ctype(it, &ctl);
    FUZZ_CHECK(ctl <= CACHE_CTYPE_MAX, "stored content type of %zu bytes", ctl);
    return 0;
}

/* With no reference held outside the store: after a full sweep (expired and flushed items
 * unlinked) the counters must agree with a walk of the live items, and nothing may have wrapped
 * below zero. Returns the live item count. */
static inline uint64_t fuzz_store_check(cache_store *s, uint64_t now_ms)
{
    size_t budget = 0;
    for (unsigned i = 0; i < cache_store_shards(s); i++) {
        cache_table_info ti;
        cache_store_table_info(s, i, &ti);
        budget += (ti.buckets > ti.old_buckets ? ti.buckets : ti.old_buckets) + 1;
    }
    unsigned cursor = 0;
    cache_store_sweep(s, &cursor, budget, now_ms);
    fuzz_store_walk w = {0};
    FUZZ_CHECK(cache_store_foreach(s, now_ms, fuzz_store_walk_fn, &w) == 0, "foreach failed");
    cache_stats st;
    cache_store_stats(s, &st);
    const uint64_t huge = UINT64_C(1) << 48; /* a counter below zero shows up as ~2^64 */
    FUZZ_CHECK(st.curr_items < huge && st.bytes < huge && st.mem_used < huge,
               "store counters wrapped: items %llu bytes %llu mem_used %llu",
               (unsigned long long)st.curr_items, (unsigned long long)st.bytes,
               (unsigned long long)st.mem_used);
    FUZZ_CHECK(st.curr_items == w.items, "curr_items %llu but %llu live items",
               (unsigned long long)st.curr_items, (unsigned long long)w.items);
    FUZZ_CHECK(st.bytes == w.bytes, "bytes %llu but live items take %llu",
               (unsigned long long)st.bytes, (unsigned long long)w.bytes);
    FUZZ_CHECK(st.mem_used == st.bytes, "mem_used %llu != bytes of linked items %llu",
               (unsigned long long)st.mem_used, (unsigned long long)st.bytes);
    FUZZ_CHECK(st.mem_used <= st.mem_limit, "mem_used %llu above the limit %llu",
               (unsigned long long)st.mem_used, (unsigned long long)st.mem_limit);
    return w.items;
}

#endif
