/* The file block source (seq/source_file.h). */
#include "seq/source_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/crc32.h"
#include "util/decimal.h"
#include "util/fsio.h"

#define MAGIC     "snowflaked-seq 1 "
#define SUFFIX    ".seq"
#define QUEUE_CAP (2 * SEQ_MAX_NAMESPACES) /* a reserve and a create per namespace at most */

enum { JOB_RESERVE, JOB_CREATE };

typedef struct fs_job {
    int kind;
    unsigned id;
    uint64_t want;
    seq_ns_def def;
    seq_done_fn done;
    void *arg;
} fs_job;

typedef struct fs_ns {
    bool known;
    bool api;
    uint64_t next; /* what the file says (the worker's, or the main thread's at start and stop) */
    seq_ns_def def;
} fs_ns;

struct seq_file_source {
    char dir[PATH_MAX];
    uint32_t delay_ms;
    fs_ns ns[SEQ_MAX_NAMESPACES];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fs_job *queue; /* QUEUE_CAP, a ring */
    unsigned head, n;
    bool stop, running;
};

static int path_of(const seq_file_source *fs, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s" SUFFIX, fs->dir, name);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

static bool same_def(const seq_ns_def *a, const seq_ns_def *b)
{
    return strcmp(a->name, b->name) == 0 && a->start == b->start && a->max == b->max &&
           a->block == b->block && a->adaptive == b->adaptive && a->block_min == b->block_min &&
           a->block_max == b->block_max && strcmp(a->token_sha256, b->token_sha256) == 0;
}

/* ---- the file --------------------------------------------------------------------------------- */

static int write_state(const char *path, uint64_t next, const seq_ns_def *d, bool api, char *err,
                       size_t errlen)
{
    char line[400];
    int len = snprintf(line, sizeof line,
                       MAGIC "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %d %" PRIu64
                             " %" PRIu64 " %s %s",
                       next, d->start, d->max, d->block, d->adaptive ? 1 : 0, d->block_min,
                       d->block_max, d->token_sha256[0] ? d->token_sha256 : "-",
                       api ? "api" : "config");
    len += snprintf(line + len, sizeof line - (size_t)len, " %08" PRIx32 "\n",
                    crc32_update(0, line, (size_t)len));
    return fsio_write_atomic(path, line, (size_t)len, err, errlen);
}

int seq_file_read(const char *path, const char *name, seq_file_state *st, char *err,
                  size_t errlen)
{
    char buf[480];
    size_t n;
    int got = fsio_read_small(path, buf, sizeof buf, &n, err, errlen);
    if (got <= 0)
        return got;
    /* fields after the magic: 9 words, then the crc of everything before it */
    const char *f[10];
    size_t flen[10];
    unsigned nf = 0;
    size_t magic = sizeof MAGIC - 1;
    bool ok = (size_t)n > magic && memcmp(buf, MAGIC, magic) == 0 && buf[n - 1] == '\n';
    for (const char *p = buf + magic; ok && *p != '\n';) {
        const char *e = p;
        while (*e != ' ' && *e != '\n')
            e++;
        if (e == p || nf == 10) {
            ok = false;
            break;
        }
        f[nf] = p;
        flen[nf++] = (size_t)(e - p);
        p = *e == ' ' ? e + 1 : e;
    }
    uint64_t v[7] = {0}, crc = 0;
    ok = ok && nf == 10;
    for (unsigned i = 0; ok && i < 7; i++)
        ok = dec_parse_u64(f[i], flen[i], UINT64_MAX, &v[i]);
    bool token = ok && flen[7] == SHA256_HEX_LEN; /* else "-" */
    ok = ok && (token || (flen[7] == 1 && f[7][0] == '-'));
    bool api = ok && flen[8] == 3 && memcmp(f[8], "api", 3) == 0;
    ok = ok && (api || (flen[8] == 6 && memcmp(f[8], "config", 6) == 0));
    if (ok && flen[9] == 8) {
        char hex[9];
        memcpy(hex, f[9], 8);
        hex[8] = '\0';
        char *end;
        crc = strtoull(hex, &end, 16);
        ok = *end == '\0' && crc == crc32_update(0, buf, (size_t)(f[9] - 1 - buf));
    } else {
        ok = false;
    }
    ok = ok && v[4] <= 1;
    if (!ok) {
        snprintf(err, errlen,
                 "%s: corrupt sequence file (expected \"" MAGIC
                 "<next> <start> <max> <block> <adaptive> <block_min> <block_max> "
                 "<token_sha256|-> <origin> <crc32>\"); refusing to guess which numbers were "
                 "issued",
                 path);
        return -1;
    }
    memset(st, 0, sizeof *st);
    st->next = v[0];
    snprintf(st->def.name, sizeof st->def.name, "%s", name);
    st->def.start = v[1];
    st->def.max = v[2];
    st->def.block = v[3];
    st->def.adaptive = v[4] == 1;
    st->def.block_min = v[5];
    st->def.block_max = v[6];
    if (token)
        memcpy(st->def.token_sha256, f[7], SHA256_HEX_LEN);
    st->api = api;
    return 1;
}

/* ---- the worker ------------------------------------------------------------------------------- */

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void do_reserve(seq_file_source *fs, const fs_job *j)
{
    fs_ns *s = &fs->ns[j->id];
    char err[PATH_MAX + 160], path[PATH_MAX];
    seq_result r = {.status = SEQ_FAILED};
    if (!s->known) {
        r.err = "namespace unknown to the file source";
    } else if (s->next > s->def.max) {
        r.status = SEQ_EXHAUSTED;
    } else if (path_of(fs, s->def.name, path, sizeof path) != 0) {
        r.err = "sequence file path too long";
    } else {
        uint64_t left = s->def.max - s->next + 1; /* max < UINT64_MAX: no overflow */
        uint64_t n = j->want < left ? j->want : left;
        r.store_ops = 1;
        if (write_state(path, s->next + n, &s->def, s->api, err, sizeof err) != 0) {
            r.err = err;
        } else {
            r.status = SEQ_OK;
            r.lo = s->next;
            r.hi = s->next + n;
            s->next = r.hi;
        }
    }
    j->done(j->arg, &r);
}

static void do_create(seq_file_source *fs, const fs_job *j)
{
    fs_ns *s = &fs->ns[j->id];
    char err[PATH_MAX + 300], path[PATH_MAX];
    seq_file_state st;
    seq_result r = {.status = SEQ_FAILED};
    int got = -1;
    if (path_of(fs, j->def.name, path, sizeof path) != 0)
        snprintf(err, sizeof err, "sequence file path too long");
    else
        got = seq_file_read(path, j->def.name, &st, err, sizeof err);
    if (got == 1) {
        r.status = SEQ_EXISTS;
        r.def = &st.def;
        r.err = "a namespace of that name exists";
    } else if (got == 0 && write_state(path, j->def.start, &j->def, true, err, sizeof err) == 0) {
        s->known = true;
        s->api = true;
        s->next = j->def.start;
        s->def = j->def;
        r.status = SEQ_OK;
        r.store_ops = 1;
    } else {
        r.err = err;
    }
    j->done(j->arg, &r);
}

static void *worker(void *arg)
{
    seq_file_source *fs = arg;
    pthread_mutex_lock(&fs->mu);
    for (;;) {
        while (fs->n == 0 && !fs->stop)
            pthread_cond_wait(&fs->cv, &fs->mu);
        if (fs->n == 0)
            break;
        fs_job j = fs->queue[fs->head];
        fs->head = (fs->head + 1) % QUEUE_CAP;
        fs->n--;
        bool stopping = fs->stop;
        pthread_mutex_unlock(&fs->mu);
        /* What was accepted is finished, also at stop (a few fsyncs): a creation answered 202
         * is then stored, not dropped */
        if (fs->delay_ms && !stopping)
            sleep_ms(fs->delay_ms);
        if (j.kind == JOB_RESERVE)
            do_reserve(fs, &j);
        else
            do_create(fs, &j);
        pthread_mutex_lock(&fs->mu);
    }
    pthread_mutex_unlock(&fs->mu);
    return NULL;
}

static int enqueue(seq_file_source *fs, const fs_job *j)
{
    pthread_mutex_lock(&fs->mu);
    int rc = -1;
    if (fs->running && !fs->stop && fs->n < QUEUE_CAP) {
        fs->queue[(fs->head + fs->n) % QUEUE_CAP] = *j;
        fs->n++;
        pthread_cond_signal(&fs->cv);
        rc = 0;
    }
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

/* ---- the seq_source operations ------------------------------------------------------------------ */

static int op_start(void *ctx, char *err, size_t errlen)
{
    seq_file_source *fs = ctx;
    if (mkdir(fs->dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", fs->dir, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (stat(fs->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "%s is not a directory", fs->dir);
        return -1;
    }
    if (fsio_fsync_parent(fs->dir) != 0) {
        snprintf(err, errlen, "%s: fsync of its directory failed: %s", fs->dir, strerror(errno));
        return -1;
    }
    pthread_mutex_lock(&fs->mu);
    fs->running = true;
    pthread_mutex_unlock(&fs->mu);
    int rc = pthread_create(&fs->thread, NULL, worker, fs);
    if (rc != 0) {
        fs->running = false;
        snprintf(err, errlen, "sequences: cannot start the file source's thread: %s",
                 strerror(rc));
        return -1;
    }
    return 0;
}

static int op_declare(void *ctx, unsigned id, const seq_ns_def *def, char *err, size_t errlen)
{
    seq_file_source *fs = ctx;
    char path[PATH_MAX];
    if (id >= SEQ_MAX_NAMESPACES || path_of(fs, def->name, path, sizeof path) != 0) {
        snprintf(err, errlen, "namespace %s: no room for it in the file source", def->name);
        return -1;
    }
    seq_file_state st;
    int got = seq_file_read(path, def->name, &st, err, errlen);
    if (got < 0)
        return -1;
    fs_ns *s = &fs->ns[id];
    s->known = true;
    s->def = *def;
    /* A namespace listed (created over the API) keeps its origin; one of the configuration is
     * "config" from now on. */
    s->api = got == 1 && st.api && same_def(&st.def, def);
    s->next = got == 1 && st.next > def->start ? st.next : def->start;
    if (got == 1 && s->next == st.next && s->api == st.api && same_def(&st.def, def))
        return 0; /* unchanged */
    return write_state(path, s->next, def, s->api, err, errlen);
}

static int op_list(void *ctx, const char *const *declared, size_t ndeclared,
                   void (*found)(void *arg, const seq_ns_def *def), void *arg, char *err,
                   size_t errlen)
{
    seq_file_source *fs = ctx;
    DIR *d = opendir(fs->dir);
    if (!d) {
        snprintf(err, errlen, "cannot read %s: %s", fs->dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name), sl = sizeof SUFFIX - 1;
        if (len <= sl || strcmp(e->d_name + len - sl, SUFFIX) != 0 ||
            !seq_name_valid(e->d_name, len - sl))
            continue; /* tmp files, other names */
        char name[SEQ_NAME_MAX + 1];
        memcpy(name, e->d_name, len - sl);
        name[len - sl] = '\0';
        bool known = false;
        for (size_t i = 0; i < ndeclared && !known; i++)
            known = strcmp(declared[i], name) == 0;
        if (known)
            continue;
        char path[PATH_MAX];
        seq_file_state st;
        if (path_of(fs, name, path, sizeof path) != 0 ||
            seq_file_read(path, name, &st, err, errlen) < 0) {
            rc = -1;
            break;
        }
        if (st.api)
            found(arg, &st.def);
    }
    closedir(d);
    return rc;
}

static int op_create(void *ctx, unsigned id, const seq_ns_def *def, seq_done_fn done, void *arg)
{
    if (id >= SEQ_MAX_NAMESPACES)
        return -1;
    fs_job j = {.kind = JOB_CREATE, .id = id, .def = *def, .done = done, .arg = arg};
    return enqueue(ctx, &j);
}

static int op_reserve(void *ctx, unsigned id, uint64_t want, seq_done_fn done, void *arg)
{
    if (id >= SEQ_MAX_NAMESPACES || want == 0)
        return -1;
    fs_job j = {.kind = JOB_RESERVE, .id = id, .want = want, .done = done, .arg = arg};
    return enqueue(ctx, &j);
}

static int op_release(void *ctx, unsigned id, uint64_t from, uint64_t hi, char *err,
                      size_t errlen)
{
    seq_file_source *fs = ctx;
    char path[PATH_MAX];
    if (id >= SEQ_MAX_NAMESPACES || !fs->ns[id].known)
        return 0;
    fs_ns *s = &fs->ns[id];
    if (s->next != hi || from >= hi || path_of(fs, s->def.name, path, sizeof path) != 0)
        return 0;
    if (write_state(path, from, &s->def, s->api, err, errlen) != 0)
        return -1; /* the file still says hi: a hole, never a repeat */
    s->next = from;
    return 0;
}

static void op_stop(void *ctx)
{
    seq_file_source *fs = ctx;
    pthread_mutex_lock(&fs->mu);
    bool running = fs->running;
    fs->stop = true;
    pthread_cond_broadcast(&fs->cv);
    pthread_mutex_unlock(&fs->mu);
    if (running)
        pthread_join(fs->thread, NULL);
    fs->running = false;
}

seq_file_source *seq_file_source_new(const char *dir, uint32_t delay_ms, char *err,
                                     size_t errlen)
{
    if (strlen(dir) + 1 + SEQ_NAME_MAX + sizeof SUFFIX + sizeof ".tmp" > PATH_MAX) {
        snprintf(err, errlen, "sequences directory %s: path too long", dir);
        return NULL;
    }
    seq_file_source *fs = calloc(1, sizeof *fs);
    if (fs)
        fs->queue = calloc(QUEUE_CAP, sizeof *fs->queue);
    if (!fs || !fs->queue) {
        free(fs);
        snprintf(err, errlen, "sequences: out of memory");
        return NULL;
    }
    snprintf(fs->dir, sizeof fs->dir, "%s", dir);
    fs->delay_ms = delay_ms;
    pthread_mutex_init(&fs->mu, NULL);
    pthread_cond_init(&fs->cv, NULL);
    return fs;
}

void seq_file_source_ops(seq_file_source *fs, seq_source *out)
{
    *out = (seq_source){.kind = "file",
                        .start = op_start,
                        .declare = op_declare,
                        .list = op_list,
                        .create = op_create,
                        .reserve = op_reserve,
                        .fence_ms = NULL,
                        .release = op_release,
                        .stop = op_stop,
                        .ctx = fs};
}

void seq_file_source_free(seq_file_source *fs)
{
    if (!fs)
        return;
    op_stop(fs);
    pthread_mutex_destroy(&fs->mu);
    pthread_cond_destroy(&fs->cv);
    free(fs->queue);
    free(fs);
}
