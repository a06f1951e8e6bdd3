/* Segment mode: the double-buffered namespace logic over a hand-driven source, and the file
 * source (restart, release, corruption, write failures). */
#include <check.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "seq/seq.h"
#include "seq/source_file.h"
#include "util/counter.h"

/* ---- a fake source: reserves are queued and completed by the test ---------------------------- */

typedef struct fake_call {
    unsigned id;
    uint64_t want;
    seq_done_fn done;
    void *arg;
} fake_call;

static struct {
    fake_call calls[16];
    unsigned ncalls, completed;
    uint64_t counter; /* next number to grant */
    uint64_t fence;
    bool refuse;
} fk;

static int fk_start(void *ctx, char *err, size_t errlen)
{
    (void)ctx, (void)err, (void)errlen;
    return 0;
}
static int fk_declare(void *ctx, unsigned id, const seq_ns_def *def, char *err, size_t errlen)
{
    (void)ctx, (void)id, (void)err, (void)errlen;
    if (fk.counter < def->start)
        fk.counter = def->start;
    return 0;
}
static int fk_list(void *ctx, const char *const *declared, size_t ndeclared,
                   void (*found)(void *arg, const seq_ns_def *def), void *arg, char *err,
                   size_t errlen)
{
    (void)ctx, (void)declared, (void)ndeclared, (void)found, (void)arg, (void)err, (void)errlen;
    return 0;
}
static int fk_reserve(void *ctx, unsigned id, uint64_t want, seq_done_fn done, void *arg)
{
    (void)ctx;
    if (fk.refuse || fk.ncalls == 16)
        return -1;
    fk.calls[fk.ncalls++] = (fake_call){id, want, done, arg};
    return 0;
}
static uint64_t fk_fence(void *ctx)
{
    (void)ctx;
    return fk.fence;
}
static void fk_stop(void *ctx)
{
    (void)ctx;
}

/* Completes the oldest open reserve with status (SEQ_OK: the next want numbers). */
static void fk_complete(seq_status status, uint64_t skip)
{
    ck_assert_uint_lt(fk.completed, fk.ncalls);
    fake_call *c = &fk.calls[fk.completed++];
    seq_result r = {.status = status, .store_ops = 1};
    if (status == SEQ_OK) {
        fk.counter += skip; /* another node took some in between */
        r.lo = fk.counter;
        r.hi = fk.counter += c->want;
    } else if (status == SEQ_FAILED) {
        r.err = "disk full";
    }
    c->done(c->arg, &r);
}

static clk_fake clock_;
static seq_table *t;

static seq_ns *make(uint64_t start, uint64_t block, uint32_t pct, bool with_fence)
{
    memset(&fk, 0, sizeof fk);
    fk.fence = SEQ_NO_FENCE;
    clk_fake_init(&clock_, 1000000, 0, 0);
    seq_source src = {.kind = "fake",
                      .start = fk_start,
                      .declare = fk_declare,
                      .list = fk_list,
                      .reserve = fk_reserve,
                      .fence_ms = with_fence ? fk_fence : NULL,
                      .stop = fk_stop};
    seq_options o = {.prefetch_pct = pct, .retry_ms = 100, .adaptive_block_ms = 1000,
                     .start_wait_ms = 0};
    char err[256];
    t = seq_table_new(&src, &o, &clock_.base, 8, err, sizeof err);
    ck_assert_ptr_nonnull(t);
    seq_ns_def d = {.name = "orders", .start = start, .block = block};
    ck_assert_int_eq(seq_table_declare(t, &d, "s3cret", err, sizeof err), 0);
    ck_assert_int_eq(seq_table_start(t, err, sizeof err), 0);
    seq_ns *ns = seq_find(t, "orders", 6);
    ck_assert_ptr_nonnull(ns);
    return ns;
}

static void done_table(void)
{
    seq_table_free(t);
    t = NULL;
}

static uint64_t take1(seq_ns *ns)
{
    uint64_t v = 0;
    ck_assert_int_eq(seq_take(ns, &v, 1), SEQ_R_OK);
    return v;
}

START_TEST(test_dense_and_increasing_with_prefetch)
{
    seq_ns *ns = make(100, 10, 50, false);
    ck_assert_uint_eq(fk.ncalls, 1); /* the first block, asked at start */
    uint64_t v;
    ck_assert_int_eq(seq_take(ns, &v, 1), SEQ_R_EMPTY); /* not there yet */
    ck_assert_uint_eq(fk.ncalls, 1);                    /* no second reserve while one runs */
    fk_complete(SEQ_OK, 0);
    for (uint64_t i = 0; i < 5; i++)
        ck_assert_uint_eq(take1(ns), 100 + i);
    ck_assert_uint_eq(fk.ncalls, 2); /* half of the block issued: the next is asked for */
    ck_assert_uint_eq(fk.calls[1].want, 10);
    fk_complete(SEQ_OK, 0);
    ck_assert_uint_eq(seq_remaining(ns), 15);
    for (uint64_t i = 5; i < 25; i++) { /* across the boundary, and the third block */
        if (i == 20)
            ck_assert_int_eq(seq_take(ns, &v, 1), SEQ_R_EMPTY);
        if (fk.completed < fk.ncalls && i == 20)
            fk_complete(SEQ_OK, 0);
        ck_assert_uint_eq(take1(ns), 100 + i);
    }
    ck_assert_uint_eq(counter_get(&ns->stats.issued), 25);
    ck_assert_uint_eq(counter_get(&ns->stats.refused), 2);
    ck_assert_uint_eq(counter_get(&ns->stats.blocks), 3);
    done_table();
}
END_TEST

START_TEST(test_batch_all_or_nothing_and_limits)
{
    seq_ns *ns = make(0, 8, 100, false);
    fk_complete(SEQ_OK, 0);
    uint64_t out[8];
    ck_assert_int_eq(seq_take(ns, out, 9), SEQ_R_TOO_MANY); /* never possible: > block */
    ck_assert_int_eq(seq_take(ns, out, 0), SEQ_R_TOO_MANY);
    ck_assert_int_eq(seq_take(ns, out, 6), SEQ_R_OK);
    ck_assert_uint_eq(out[5], 5);
    ck_assert_uint_eq(fk.ncalls, 1); /* 75% < 100%: not yet */
    ck_assert_int_eq(seq_take(ns, out, 3), SEQ_R_EMPTY); /* 2 left: none taken */
    ck_assert_uint_eq(fk.ncalls, 2);                      /* the refusal asked for a block */
    fk_complete(SEQ_OK, 1000);                            /* a jump: another node's numbers */
    ck_assert_int_eq(seq_take(ns, out, 3), SEQ_R_OK);
    ck_assert_uint_eq(out[0], 6);
    ck_assert_uint_eq(out[1], 7);
    ck_assert_uint_eq(out[2], 1008); /* increasing across the boundary */
    done_table();
}
END_TEST

START_TEST(test_failure_waits_then_retries)
{
    seq_ns *ns = make(0, 4, 0, false); /* 0%: the next block as soon as one is current */
    fk_complete(SEQ_FAILED, 0);
    char err[64];
    seq_last_error(ns, err, sizeof err);
    ck_assert_str_eq(err, "disk full");
    uint64_t v;
    ck_assert_int_eq(seq_take(ns, &v, 1), SEQ_R_EMPTY);
    ck_assert_uint_eq(fk.ncalls, 1); /* within retry_ms: no new reserve */
    clk_fake_set(&clock_, 1000000 + 100);
    ck_assert_int_eq(seq_take(ns, &v, 1), SEQ_R_EMPTY);
    ck_assert_uint_eq(fk.ncalls, 2);
    fk_complete(SEQ_OK, 0);
    ck_assert_uint_eq(take1(ns), 0);
    ck_assert_uint_eq(fk.ncalls, 3); /* 0%: prefetch at once */
    seq_last_error(ns, err, sizeof err);
    ck_assert_str_eq(err, "");
    ck_assert_uint_eq(counter_get(&ns->stats.fetch_failures), 1);
    /* a source that refuses a reserve outright counts as a failure too */
    fk_complete(SEQ_OK, 0);
    fk.refuse = true;
    for (int i = 0; i < 7; i++)
        take1(ns);
    ck_assert_int_eq(seq_take(ns, &v, 1), SEQ_R_EMPTY);
    ck_assert_uint_eq(counter_get(&ns->stats.fetch_failures), 2);
    done_table();
}
END_TEST

START_TEST(test_exhausted_and_fenced)
{
    seq_ns *ns = make(0, 4, 100, true);
    fk_complete(SEQ_OK, 0);
    for (int i = 0; i < 4; i++)
        take1(ns);
    uint64_t v;
    ck_assert_int_eq(seq_take(ns, &v, 1), SEQ_R_EMPTY);
    fk_complete(SEQ_EXHAUSTED, 0);
    ck_assert_int_eq(seq_take(ns, &v, 1), SEQ_R_EXHAUSTED);
    ck_assert_uint_eq(fk.ncalls, 2); /* never asked again */
    fk.fence = 1000000; /* == now: past */
    ck_assert_int_eq(seq_take(ns, &v, 1), SEQ_R_FENCED);
    ck_assert_uint_eq(counter_get(&ns->stats.fenced), 1);
    done_table();
}
END_TEST

/* A count above what is left before max, once the source said exhausted: a client error (400),
 * not Gone (410), while numbers remain; 410 only when none is left. */
START_TEST(test_beyond_max_is_not_gone)
{
    seq_ns *ns = make(0, 4, 100, false);
    fk_complete(SEQ_OK, 0);
    uint64_t out[4];
    take1(ns);
    take1(ns);
    ck_assert_int_eq(seq_take(ns, out, 3), SEQ_R_EMPTY); /* not known yet: a reserve starts */
    ck_assert_uint_eq(fk.ncalls, 2);
    fk_complete(SEQ_EXHAUSTED, 0);
    ck_assert_int_eq(seq_take(ns, out, 3), SEQ_R_BEYOND_MAX);
    ck_assert_uint_eq(seq_remaining(ns), 2); /* nothing taken */
    ck_assert_int_eq(seq_take(ns, out, 2), SEQ_R_OK);
    ck_assert_uint_eq(out[0], 2);
    ck_assert_uint_eq(out[1], 3);
    ck_assert_int_eq(seq_take(ns, out, 1), SEQ_R_EXHAUSTED);
    ck_assert_int_eq(seq_take(ns, out, 3), SEQ_R_EXHAUSTED); /* none left: Gone whatever the count */
    done_table();
}
END_TEST

/* seq_peek answers what a take of count would get, and takes, counts and fetches nothing. */
START_TEST(test_peek_tells_the_refusal)
{
    seq_ns *ns = make(10, 4, 100, true);
    uint64_t next = 7;
    ck_assert_int_eq(seq_peek(ns, 1, &next), SEQ_R_EMPTY); /* the first block not there yet */
    ck_assert_uint_eq(counter_get(&ns->stats.refused), 0);
    ck_assert_uint_eq(fk.ncalls, 1);
    fk_complete(SEQ_OK, 0);
    ck_assert_int_eq(seq_peek(ns, 1, &next), SEQ_R_OK);
    ck_assert_uint_eq(next, 10);
    ck_assert_int_eq(seq_peek(ns, 5, &next), SEQ_R_TOO_MANY);
    ck_assert_int_eq(seq_peek(ns, 0, &next), SEQ_R_TOO_MANY);
    ck_assert_uint_eq(take1(ns), 10);
    ck_assert_int_eq(seq_peek(ns, 4, &next), SEQ_R_EMPTY); /* 3 held */
    ck_assert_uint_eq(fk.ncalls, 1);                       /* a peek starts no reserve */
    ck_assert_uint_eq(counter_get(&ns->stats.refused), 0);
    take1(ns);
    take1(ns);
    take1(ns); /* 100%: the next reserve starts */
    ck_assert_uint_eq(fk.ncalls, 2);
    fk_complete(SEQ_EXHAUSTED, 0);
    ck_assert_int_eq(seq_peek(ns, 1, &next), SEQ_R_EXHAUSTED);
    ck_assert_uint_eq(seq_remaining(ns), 0);
    fk.fence = 1000000; /* == now: past */
    ck_assert_int_eq(seq_peek(ns, 1, &next), SEQ_R_FENCED);
    ck_assert_uint_eq(counter_get(&ns->stats.fenced), 0);
    ck_assert_uint_eq(counter_get(&ns->stats.issued), 4);
    done_table();
}
END_TEST

START_TEST(test_adaptive_block)
{
    memset(&fk, 0, sizeof fk);
    fk.fence = SEQ_NO_FENCE;
    clk_fake_init(&clock_, 1000000, 0, 0);
    seq_source src = {.kind = "fake", .start = fk_start, .declare = fk_declare,
                      .list = fk_list, .reserve = fk_reserve, .stop = fk_stop};
    seq_options o = {.prefetch_pct = 100, .retry_ms = 100, .adaptive_block_ms = 1000};
    char err[256];
    t = seq_table_new(&src, &o, &clock_.base, 8, err, sizeof err);
    seq_ns_def d = {.name = "a", .block = 10, .adaptive = true, .block_min = 5, .block_max = 40};
    ck_assert_int_eq(seq_table_declare(t, &d, NULL, err, sizeof err), 0);
    ck_assert_int_eq(seq_table_start(t, err, sizeof err), 0);
    seq_ns *ns = seq_find(t, "a", 1);
    ck_assert_uint_eq(fk.calls[0].want, 10);
    fk_complete(SEQ_OK, 0);
    uint64_t v, out[5];
    /* used up at once (< target / 2): the next block doubles, up to block_max */
    for (int round = 0; round < 3; round++) {
        while (seq_take(ns, &v, 1) == SEQ_R_OK) {
        }
        fk_complete(SEQ_OK, 0);
    }
    ck_assert_uint_eq(fk.calls[1].want, 20);
    ck_assert_uint_eq(fk.calls[2].want, 40);
    ck_assert_uint_eq(fk.calls[3].want, 40);
    /* a block lasting longer than twice the target halves the next */
    ck_assert_int_eq(seq_take(ns, out, 5), SEQ_R_OK);
    clk_fake_set(&clock_, 1000000 + 5000);
    while (seq_take(ns, &v, 1) == SEQ_R_OK) {
    }
    ck_assert_uint_eq(fk.calls[4].want, 20);
    ck_assert_int_eq(seq_take(ns, out, 6), SEQ_R_TOO_MANY); /* > block_min */
    done_table();
}
END_TEST

START_TEST(test_definitions_checked)
{
    seq_ns_def d = {.name = "ok_name-1.x", .start = 5, .block = 1};
    char err[256];
    ck_assert_int_eq(seq_def_check(&d, err, sizeof err), 0);
    ck_assert_uint_eq(d.max, UINT64_MAX - 1);
    seq_ns_def h = {.name = "h", .block = 1, .token_sha256 = "ABC"};
    ck_assert_int_eq(seq_def_check(&h, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "token_sha256"));
    const char *bad[] = {"", ".hidden", "-x", "a/b", "a b", "é"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        seq_ns_def b = {.block = 1};
        snprintf(b.name, sizeof b.name, "%s", bad[i]);
        ck_assert_int_eq(seq_def_check(&b, err, sizeof err), -1);
        ck_assert_ptr_nonnull(strstr(err, "namespace name"));
    }
    seq_ns_def s = {.name = "s", .start = 10, .max = 9, .block = 1};
    ck_assert_int_eq(seq_def_check(&s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "above max"));
    seq_ns_def z = {.name = "z"};
    ck_assert_int_eq(seq_def_check(&z, err, sizeof err), -1);
    seq_ns_def a = {.name = "a", .adaptive = true, .block_min = 10, .block_max = 5};
    ck_assert_int_eq(seq_def_check(&a, err, sizeof err), -1);
}
END_TEST

/* ---- the file source ------------------------------------------------------------------------ */

static char dir[64];

static void fs_setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/sf_seq_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void fs_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static seq_file_source *fsrc;

/* A table over the file source in dir/sequences with one namespace "inv" (start 1, block 10). */
static seq_ns *file_table(const char *token, uint64_t max)
{
    char sub[128], err[512];
    snprintf(sub, sizeof sub, "%s/" SEQ_FILE_DIR, dir);
    fsrc = seq_file_source_new(sub, 0, err, sizeof err);
    ck_assert_ptr_nonnull(fsrc);
    seq_source src;
    seq_file_source_ops(fsrc, &src);
    seq_options o = {.prefetch_pct = 50, .retry_ms = 50, .start_wait_ms = 5000};
    t = seq_table_new(&src, &o, clk_system(), 8, err, sizeof err);
    ck_assert_ptr_nonnull(t);
    seq_ns_def d = {.name = "inv", .start = 1, .block = 10, .max = max};
    ck_assert_int_eq(seq_table_declare(t, &d, token, err, sizeof err), 0);
    ck_assert_msg(seq_table_start(t, err, sizeof err) == 0, "%s", err);
    return seq_find(t, "inv", 3);
}

static void file_done(void)
{
    seq_table_free(t);
    seq_file_source_free(fsrc);
    t = NULL;
    fsrc = NULL;
}

static uint64_t file_next(void)
{
    char path[160], err[512];
    snprintf(path, sizeof path, "%s/" SEQ_FILE_DIR "/inv.seq", dir);
    seq_file_state st;
    ck_assert_msg(seq_file_read(path, "inv", &st, err, sizeof err) == 1, "%s", err);
    return st.next;
}

/* Takes one number, waiting (bounded) for a block in flight. */
static uint64_t take_wait(seq_ns *ns)
{
    uint64_t v;
    for (int i = 0; i < 2000; i++) {
        seq_take_result r = seq_take(ns, &v, 1);
        if (r == SEQ_R_OK)
            return v;
        ck_assert_int_eq(r, SEQ_R_EMPTY);
        usleep(1000);
    }
    ck_abort_msg("no block within 2 s");
    return 0;
}

START_TEST(test_file_restart_never_reissues)
{
    seq_ns *ns = file_table(NULL, 0);
    ck_assert_uint_eq(file_next(), 11); /* the first block [1, 11) is on disk before any use */
    uint64_t last = 0;
    for (int i = 0; i < 7; i++) {
        uint64_t v = take_wait(ns);
        ck_assert_uint_eq(v, (uint64_t)i + 1);
        last = v;
    }
    /* a crash now (no stop): the file covers every number issued and the prefetched block */
    for (int i = 0; i < 2000 && seq_remaining(ns) < 3 + 10; i++)
        usleep(1000);
    uint64_t on_disk = file_next();
    ck_assert_uint_eq(on_disk, 21);
    /* the crash: the table goes without giving anything back, as after kill -9 */
    t->src.release = NULL;
    file_done();
    seq_ns *again = file_table(NULL, 0);
    uint64_t v = take_wait(again);
    ck_assert_uint_gt(v, last);
    ck_assert_uint_eq(v, on_disk);                 /* the hole: 13 numbers, < 2 blocks */
    ck_assert_uint_le(v - last - 1, 2 * 10);
    file_done();
}
END_TEST

START_TEST(test_file_clean_stop_gives_back)
{
    seq_ns *ns = file_table(NULL, 0);
    for (int i = 0; i < 3; i++)
        take_wait(ns);
    file_done(); /* release: the file says 4 again */
    ck_assert_uint_eq(file_next(), 4);
    ns = file_table(NULL, 0);
    ck_assert_uint_eq(take_wait(ns), 4); /* no hole after a clean stop */
    file_done();
}
END_TEST

START_TEST(test_file_max_and_raised_start)
{
    seq_ns *ns = file_table(NULL, 15);
    for (uint64_t i = 1; i <= 15; i++)
        ck_assert_uint_eq(take_wait(ns), i);
    uint64_t v;
    seq_take_result r;
    for (int i = 0; i < 200 && (r = seq_take(ns, &v, 1)) == SEQ_R_EMPTY; i++)
        usleep(1000);
    ck_assert_int_eq(r, SEQ_R_EXHAUSTED);
    file_done();
    /* the configuration raises start above the counter: the counter moves up */
    char sub[128], err[512];
    snprintf(sub, sizeof sub, "%s/" SEQ_FILE_DIR, dir);
    fsrc = seq_file_source_new(sub, 0, err, sizeof err);
    seq_source src;
    seq_file_source_ops(fsrc, &src);
    seq_options o = {.prefetch_pct = 50, .retry_ms = 50, .start_wait_ms = 5000};
    t = seq_table_new(&src, &o, clk_system(), 8, err, sizeof err);
    seq_ns_def d = {.name = "inv", .start = 500, .block = 10};
    ck_assert_int_eq(seq_table_declare(t, &d, NULL, err, sizeof err), 0);
    ck_assert_int_eq(seq_table_start(t, err, sizeof err), 0);
    ck_assert_uint_eq(take_wait(seq_find(t, "inv", 3)), 500);
    file_done();
}
END_TEST

START_TEST(test_file_corrupt_refused)
{
    char sub[128], path[160], err[512];
    snprintf(sub, sizeof sub, "%s/" SEQ_FILE_DIR, dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    snprintf(path, sizeof path, "%s/inv.seq", sub);
    FILE *f = fopen(path, "w");
    fputs("snowflaked-seq 1 99 1 18446744073709551614 10 0 10 10 config 00000000\n", f);
    fclose(f);
    fsrc = seq_file_source_new(sub, 0, err, sizeof err);
    seq_source src;
    seq_file_source_ops(fsrc, &src);
    seq_options o = {.prefetch_pct = 50, .start_wait_ms = 100};
    t = seq_table_new(&src, &o, clk_system(), 8, err, sizeof err);
    seq_ns_def d = {.name = "inv", .start = 1, .block = 10};
    ck_assert_int_eq(seq_table_declare(t, &d, NULL, err, sizeof err), 0);
    ck_assert_int_eq(seq_table_start(t, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "corrupt sequence file"));
    file_done();
}
END_TEST

START_TEST(test_file_write_failure_refuses)
{
    seq_ns *ns = file_table(NULL, 0);
    for (int i = 0; i < 10; i++)
        take_wait(ns);
    for (int i = 0; i < 2000 && seq_remaining(ns) < 10; i++)
        usleep(1000); /* the second block is in hand too */
    /* every later write fails (EFBIG: the file-size limit below the file's size) */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, small = {.rlim_cur = 8, .rlim_max = RLIM_INFINITY};
    getrlimit(RLIMIT_FSIZE, &old);
    small.rlim_max = old.rlim_max;
    uint64_t before = file_next(), v, above = 0;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    /* check reports through files too: nothing is asserted until the limit is lifted */
    int ok = 0;
    seq_take_result r = SEQ_R_OK;
    for (int i = 0; i < 3000 && (r = seq_take(ns, &v, 1)) != SEQ_R_EXHAUSTED; i++) {
        if (r == SEQ_R_OK && ++ok && v >= before)
            above++; /* a number the file does not cover: must never happen */
        if (r == SEQ_R_EMPTY && counter_get(&ns->stats.fetch_failures) > 0)
            break;
        usleep(500);
    }
    setrlimit(RLIMIT_FSIZE, &old);
    ck_assert_int_eq(r, SEQ_R_EMPTY);
    ck_assert_int_eq(ok, 10);
    ck_assert_uint_eq(above, 0);
    char err[160];
    seq_last_error(ns, err, sizeof err);
    ck_assert_ptr_nonnull(strstr(err, "File too large"));
    ck_assert_uint_eq(file_next(), before);
    usleep(60 * 1000); /* retry_ms */
    ck_assert_uint_eq(take_wait(ns), before); /* the disk is back: the numbers go on */
    file_done();
}
END_TEST


START_TEST(test_file_table_create)
{
    seq_ns *inv = file_table(NULL, 0);
    (void)inv;
    char err[256];
    seq_ns *ns = NULL;
    seq_ns_def d = {.name = "tickets", .start = 40, .block = 5};
    ck_assert_int_eq(seq_table_create(t, &d, &ns, err, sizeof err), SEQ_C_ACCEPTED);
    ck_assert_ptr_nonnull(ns);
    for (int i = 0; i < 2000 && atomic_load(&ns->state) != SEQ_NS_LIVE; i++)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&ns->state), SEQ_NS_LIVE);
    ck_assert_ptr_eq(seq_find(t, "tickets", 7), ns);
    for (uint64_t i = 40; i < 52; i++) /* across blocks of 5 */
        ck_assert_uint_eq(take_wait(ns), i);
    seq_ns *again = NULL;
    ck_assert_int_eq(seq_table_create(t, &d, &again, err, sizeof err), SEQ_C_SAME);
    ck_assert_ptr_eq(again, ns);
    seq_ns_def other = {.name = "tickets", .start = 1, .block = 5};
    ck_assert_int_eq(seq_table_create(t, &other, &again, err, sizeof err), SEQ_C_CONFLICT);
    ck_assert_ptr_nonnull(strstr(err, "another definition"));
    seq_ns_def bad = {.name = "bad/name", .block = 5};
    ck_assert_int_eq(seq_table_create(t, &bad, &again, err, sizeof err), SEQ_C_BAD);
    /* the table holds 8: six more fit, the ninth does not */
    for (int i = 0; i < 6; i++) {
        seq_ns_def n = {.block = 1};
        snprintf(n.name, sizeof n.name, "n%d", i);
        ck_assert_int_eq(seq_table_create(t, &n, &again, err, sizeof err), SEQ_C_ACCEPTED);
    }
    seq_ns_def full = {.name = "ninth", .block = 1};
    ck_assert_int_eq(seq_table_create(t, &full, &again, err, sizeof err), SEQ_C_FULL);
    file_done();
    /* a restart lists it, and goes on where the clean stop left it */
    char sub[128];
    snprintf(sub, sizeof sub, "%s/" SEQ_FILE_DIR, dir);
    fsrc = seq_file_source_new(sub, 0, err, sizeof err);
    seq_source src;
    seq_file_source_ops(fsrc, &src);
    seq_options o = {.prefetch_pct = 50, .retry_ms = 50, .start_wait_ms = 5000};
    t = seq_table_new(&src, &o, clk_system(), 16, err, sizeof err);
    ck_assert_int_eq(seq_table_start(t, err, sizeof err), 0);
    ck_assert_uint_eq(seq_count(t), 7); /* tickets and n0..n5; inv was declared, not created */
    ck_assert_uint_eq(take_wait(seq_find(t, "tickets", 7)), 52);
    ck_assert_ptr_null(seq_find(t, "inv", 3));
    file_done();
}
END_TEST

static seq_ns_def listed_defs[4];
static unsigned nlisted;
static void on_found(void *arg, const seq_ns_def *d)
{
    (void)arg;
    listed_defs[nlisted++] = *d;
}
static void on_created(void *arg, const seq_result *r)
{
    atomic_store((_Atomic int *)arg, (int)r->status);
}

START_TEST(test_file_create_and_list)
{
    char sub[128], err[512];
    snprintf(sub, sizeof sub, "%s/" SEQ_FILE_DIR, dir);
    fsrc = seq_file_source_new(sub, 0, err, sizeof err);
    seq_source src;
    seq_file_source_ops(fsrc, &src);
    ck_assert_int_eq(src.start(src.ctx, err, sizeof err), 0);
    seq_ns_def d = {.name = "users", .start = 7, .block = 3, .block_min = 3, .block_max = 3,
                    .max = 1000};
    sha256_hex("users-token-0123456", 19, d.token_sha256);
    _Atomic int st = -1;
    ck_assert_int_eq(src.create(src.ctx, 2, &d, on_created, (void *)&st), 0);
    for (int i = 0; i < 2000 && st == -1; i++)
        usleep(1000);
    ck_assert_int_eq(st, SEQ_OK);
    st = -1;
    ck_assert_int_eq(src.create(src.ctx, 3, &d, on_created, (void *)&st), 0);
    for (int i = 0; i < 2000 && st == -1; i++)
        usleep(1000);
    ck_assert_int_eq(st, SEQ_EXISTS);
    src.stop(src.ctx);
    seq_file_source_free(fsrc);
    /* a restart finds it (and skips declared names) */
    fsrc = seq_file_source_new(sub, 0, err, sizeof err);
    seq_file_source_ops(fsrc, &src);
    ck_assert_int_eq(src.start(src.ctx, err, sizeof err), 0);
    nlisted = 0;
    ck_assert_int_eq(src.list(src.ctx, NULL, 0, on_found, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(nlisted, 1);
    ck_assert_str_eq(listed_defs[0].name, "users");
    ck_assert_uint_eq(listed_defs[0].start, 7);
    ck_assert_uint_eq(listed_defs[0].max, 1000);
    ck_assert_str_eq(listed_defs[0].token_sha256, d.token_sha256); /* kept, the token is not */
    const char *declared[] = {"users"};
    nlisted = 0;
    ck_assert_int_eq(src.list(src.ctx, declared, 1, on_found, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(nlisted, 0);
    src.stop(src.ctx);
    seq_file_source_free(fsrc);
    fsrc = NULL;
}
END_TEST

int main(void)
{
    Suite *s = suite_create("seq");
    TCase *tc = tcase_create("buffer");
    tcase_add_test(tc, test_dense_and_increasing_with_prefetch);
    tcase_add_test(tc, test_batch_all_or_nothing_and_limits);
    tcase_add_test(tc, test_failure_waits_then_retries);
    tcase_add_test(tc, test_exhausted_and_fenced);
    tcase_add_test(tc, test_beyond_max_is_not_gone);
    tcase_add_test(tc, test_peek_tells_the_refusal);
    tcase_add_test(tc, test_adaptive_block);
    tcase_add_test(tc, test_definitions_checked);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("file");
    tcase_add_checked_fixture(tf, fs_setup, fs_teardown);
    tcase_add_test(tf, test_file_restart_never_reissues);
    tcase_add_test(tf, test_file_clean_stop_gives_back);
    tcase_add_test(tf, test_file_max_and_raised_start);
    tcase_add_test(tf, test_file_corrupt_refused);
    tcase_add_test(tf, test_file_write_failure_refuses);
    tcase_add_test(tf, test_file_create_and_list);
    tcase_add_test(tf, test_file_table_create);
    suite_add_tcase(s, tf);
    return sf_run_suite(s);
}
