/* util/fsio.h's atomic replacement: the new contents or the old, never a mix, and no tmp file
 * left behind whatever fails. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "util/fsio.h"

static char dir[64], path[128], tmp[160];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/sf_fsio_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/file", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
}

static void teardown(void)
{
    char inner[200];
    snprintf(inner, sizeof inner, "%s/inner", path);
    unlink(inner);
    rmdir(path); /* when a test put a directory there */
    unlink(path);
    unlink(tmp);
    rmdir(dir);
}

static bool exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* The whole file as a NUL-terminated string (the tests write text). */
static const char *contents(const char *p)
{
    static char buf[1 << 17];
    FILE *f = fopen(p, "rb");
    ck_assert_msg(f != NULL, "%s: %s", p, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void write_old(void)
{
    char err[256];
    ck_assert_int_eq(fsio_write_atomic(path, "old\n", 4, err, sizeof err), 0);
}

/* The old file, and a replacement of it opened for writing. */
static void open_over_old(fsio_atomic *a)
{
    char err[256];
    write_old();
    ck_assert_int_eq(fsio_atomic_open(a, path, NULL, 0, err, sizeof err), 0);
}

/* What every failure must leave: the old file as it was and no tmp file. */
static void assert_old_intact(void)
{
    ck_assert_str_eq(contents(path), "old\n");
    ck_assert(!exists(tmp));
}

START_TEST(test_creates)
{
    char err[256];
    ck_assert_int_eq(fsio_write_atomic(path, "hello\n", 6, err, sizeof err), 0);
    ck_assert_str_eq(contents(path), "hello\n");
    ck_assert(!exists(tmp));
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    mode_t mask = umask(0);
    umask(mask);
    ck_assert_uint_eq(st.st_mode & 0777, 0644 & ~mask);
    ck_assert_int_eq(fsio_write_atomic(path, "", 0, err, sizeof err), 0); /* empty is a file too */
    ck_assert_str_eq(contents(path), "");
}
END_TEST

START_TEST(test_replaces)
{
    char err[256];
    write_old();
    ck_assert_int_eq(fsio_write_atomic(path, "new contents\n", 13, err, sizeof err), 0);
    ck_assert_str_eq(contents(path), "new contents\n");
    ck_assert(!exists(tmp));
}
END_TEST

/* Streaming: until commit, readers of path see the old file; then all the pieces at once. */
START_TEST(test_streams_and_commits)
{
    char err[256], buf[16];
    write_old();
    fsio_atomic a;
    ck_assert_int_eq(fsio_atomic_open(&a, path, buf, sizeof buf, err, sizeof err), 0);
    for (int i = 0; i < 1000; i++) {
        char piece[16];
        int n = snprintf(piece, sizeof piece, "%d,", i);
        ck_assert_int_eq(fsio_atomic_write(&a, piece, (size_t)n), 0);
    }
    ck_assert_str_eq(contents(path), "old\n");
    ck_assert(exists(tmp));
    ck_assert_int_eq(fsio_atomic_commit(&a, err, sizeof err), 0);
    ck_assert(!exists(tmp));
    const char *got = contents(path);
    ck_assert_uint_eq(strlen(got), 10 * 2 + 90 * 3 + 900 * 4);
    ck_assert(strncmp(got, "0,1,2,", 6) == 0);
    ck_assert(strstr(got, ",998,999,") != NULL);
}
END_TEST

START_TEST(test_missing_directory)
{
    char err[256], nodir[200];
    snprintf(nodir, sizeof nodir, "%s/missing/file", dir);
    ck_assert_int_eq(fsio_write_atomic(nodir, "x", 1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/missing/file.tmp: cannot create: No such file") != NULL, "%s", err);
    ck_assert(!exists(nodir));
}
END_TEST

/* As root the permission bits do not stop the write, so this part only runs unprivileged. */
START_TEST(test_unwritable_directory)
{
    char err[256];
    write_old();
    if (geteuid() == 0)
        return;
    ck_assert_int_eq(chmod(dir, 0555), 0);
    int rc = fsio_write_atomic(path, "new\n", 4, err, sizeof err);
    chmod(dir, 0755);
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "cannot create: Permission denied") != NULL, "%s", err);
    assert_old_intact();
}
END_TEST

/* The last step before the new file is visible fails: the tmp file must not stay. */
START_TEST(test_rename_fails)
{
    char err[256], inner[200];
    ck_assert_int_eq(mkdir(path, 0755), 0); /* a non-empty directory where the file goes */
    snprintf(inner, sizeof inner, "%s/inner", path);
    FILE *f = fopen(inner, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(fsio_write_atomic(path, "new\n", 4, err, sizeof err), -1);
    ck_assert_msg(strstr(err, path) == err && strstr(err, ": rename failed: ") != NULL, "%s", err);
    ck_assert(!exists(tmp));
    ck_assert(exists(inner));
}
END_TEST

/* A real write error mid-stream (the file size limit, as a full disk would): nothing replaced. */
START_TEST(test_write_fails)
{
    char err[256];
    fsio_atomic a;
    open_over_old(&a);
    struct rlimit old_lim, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
    lim = old_lim;
    lim.rlim_cur = 4096;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of a signal */
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    static char big[1 << 16];
    memset(big, 'x', sizeof big);
    int first = fsio_atomic_write(&a, big, sizeof big);
    int later = fsio_atomic_write(&a, "y", 1);
    int rc = fsio_atomic_commit(&a, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old_lim);
    signal(SIGXFSZ, old_handler);
    ck_assert_int_eq(first, -1);
    ck_assert_int_eq(later, -1); /* sticky: nothing more is written */
    ck_assert_int_eq(a.err, EFBIG);
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, ": write failed: File too large") != NULL, "%s", err);
    assert_old_intact();
}
END_TEST

/* The producer fails (e.g. out of memory while walking the store): nothing replaced. */
START_TEST(test_producer_fails)
{
    char err[256];
    fsio_atomic a;
    open_over_old(&a);
    ck_assert_int_eq(fsio_atomic_write(&a, "half", 4), 0);
    fsio_atomic_fail(&a, ENOMEM);
    fsio_atomic_fail(&a, EIO); /* the first failure is the one reported */
    ck_assert_int_eq(fsio_atomic_write(&a, "more", 4), -1);
    ck_assert_int_eq(fsio_atomic_commit(&a, err, sizeof err), -1);
    char want[300];
    snprintf(want, sizeof want, "%s: write failed: %s", path, strerror(ENOMEM));
    ck_assert_str_eq(err, want);
    assert_old_intact();
}
END_TEST

START_TEST(test_abort)
{
    fsio_atomic a;
    open_over_old(&a);
    ck_assert_int_eq(fsio_atomic_write(&a, "new\n", 4), 0);
    fsio_atomic_abort(&a);
    assert_old_intact();
    fsio_atomic_abort(&a); /* twice is harmless */
}
END_TEST

START_TEST(test_read_small)
{
    char buf[8], err[256];
    size_t n = 99;
    ck_assert_int_eq(fsio_read_small(path, buf, sizeof buf, &n, err, sizeof err), 0); /* absent */
    ck_assert_int_eq(fsio_write_atomic(path, "0123456789", 10, err, sizeof err), 0);
    ck_assert_int_eq(fsio_read_small(path, buf, sizeof buf, &n, err, sizeof err), 1);
    ck_assert_uint_eq(n, 7); /* cut to cap - 1, NUL-terminated */
    ck_assert_str_eq(buf, "0123456");
    ck_assert_int_eq(fsio_read_small(dir, buf, sizeof buf, &n, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot read"));
}
END_TEST

START_TEST(test_fsync_parent)
{
    ck_assert_int_eq(fsio_fsync_parent(path), 0); /* the directory, not the (absent) file */
    ck_assert_int_eq(fsio_fsync_parent("relative"), 0); /* "." */
    ck_assert_int_eq(fsio_fsync_parent("/top"), 0);      /* "/" */
    errno = 0;
    ck_assert_int_eq(fsio_fsync_parent("/no/such/dir/file"), -1);
    ck_assert_int_eq(errno, ENOENT);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fsio");
    TCase *tc = tcase_create("atomic");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_creates);
    tcase_add_test(tc, test_read_small);
    tcase_add_test(tc, test_replaces);
    tcase_add_test(tc, test_streams_and_commits);
    tcase_add_test(tc, test_missing_directory);
    tcase_add_test(tc, test_unwritable_directory);
    tcase_add_test(tc, test_rename_fails);
    tcase_add_test(tc, test_write_fails);
    tcase_add_test(tc, test_producer_fails);
    tcase_add_test(tc, test_abort);
    tcase_add_test(tc, test_fsync_parent);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
