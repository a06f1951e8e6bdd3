/* net/fswatch: a burst of changes in a watched directory is one call, debounce_ms after the
 * last; a rename over a symlink (kubelet's ..data swap) is a change; a duplicate directory is
 * watched once; a missing directory is refused with its name; stop ends the thread at once; a
 * directory removed and created again (or renamed away and replaced) is watched again, reported
 * once each way, with no call while it is missing and one once it is back. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "net/fswatch.h"

static _Atomic int calls, gone, back, wrong_dir;

static void count(void *arg)
{
    (void)arg;
    atomic_fetch_add(&calls, 1);
}

static void dir_state(void *arg, const char *dir, bool present)
{
    if (strcmp(dir, arg) != 0) /* the directory as it was given (checked on the test's thread) */
        atomic_fetch_add(&wrong_dir, 1);
    atomic_fetch_add(present ? &back : &gone, 1);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_burst_is_one_call)
{
    char dir[] = "/tmp/sf_fswatch_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *dirs[] = {dir, dir};
    char err[256];
    atomic_store(&calls, 0);
    net_fswatch_opts o = {.debounce_ms = 200, .changed = count};
    net_fswatch *w = net_fswatch_start(dirs, 2, &o, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    for (int i = 0; i < 5; i++) { /* 5 writes 50 ms apart: one burst */
        write_file(dir, "tls.crt", "x");
        sleep_ms(50);
    }
    sleep_ms(100);
    ck_assert_int_eq(atomic_load(&calls), 0); /* still within the debounce */
    sleep_ms(400);
    ck_assert_int_eq(atomic_load(&calls), 1);
    /* kubelet: a new symlink renamed over ..data */
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/..data_tmp", dir);
    snprintf(b, sizeof b, "%s/..data", dir);
    ck_assert_int_eq(symlink("..2026", a), 0);
    ck_assert_int_eq(rename(a, b), 0);
    sleep_ms(600);
    ck_assert_int_eq(atomic_load(&calls), 2);
    net_fswatch_stop(w);
    unlink(b);
    snprintf(a, sizeof a, "%s/tls.crt", dir);
    unlink(a);
    rmdir(dir);
}
END_TEST

START_TEST(test_missing_directory_refused)
{
    const char *dirs[] = {"/nonexistent/sf_fswatch"};
    char err[256] = "";
    net_fswatch_opts o = {.debounce_ms = 100, .changed = count};
    ck_assert_ptr_null(net_fswatch_start(dirs, 1, &o, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/sf_fswatch"));
    net_fswatch_stop(NULL);
}
END_TEST

static void remove_file(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(unlink(path), 0);
}

/* Waits up to ms for *v to reach want (the recheck runs on its own period). */
static void wait_for(_Atomic int *v, int want, long ms)
{
    for (long t = 0; t < ms && atomic_load(v) < want; t += 20)
        sleep_ms(20);
}

/* A watch of dir alone, counters reset, a short debounce and recheck. */
static net_fswatch *watch_one(char *dir)
{
    const char *dirs[] = {dir};
    char err[256];
    atomic_store(&calls, 0);
    atomic_store(&gone, 0);
    atomic_store(&back, 0);
    atomic_store(&wrong_dir, 0);
    net_fswatch_opts o = {.debounce_ms = 100, .recheck_ms = 150, .changed = count,
                          .dir_state = dir_state, .arg = dir};
    net_fswatch *w = net_fswatch_start(dirs, 1, &o, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    return w;
}

/* rm -rf dir && mkdir dir && cp ...: the watch on the old inode died with it. */
START_TEST(test_removed_directory_rearmed)
{
    char dir[] = "/tmp/sf_fswatch_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    write_file(dir, "tls.crt", "1");
    net_fswatch *w = watch_one(dir);

    remove_file(dir, "tls.crt");
    ck_assert_int_eq(rmdir(dir), 0);
    wait_for(&gone, 1, 1000);
    ck_assert_int_eq(atomic_load(&gone), 1);
    sleep_ms(600); /* several rechecks and the debounce of the deletions: nothing more */
    ck_assert_int_eq(atomic_load(&gone), 1);
    ck_assert_int_eq(atomic_load(&back), 0);
    ck_assert_int_eq(atomic_load(&calls), 0); /* no reload of files that are not there */

    ck_assert_int_eq(mkdir(dir, 0700), 0);
    write_file(dir, "tls.crt", "2");
    wait_for(&calls, 1, 2000);
    ck_assert_int_eq(atomic_load(&back), 1);
    ck_assert_int_eq(atomic_load(&calls), 1); /* the return is one reload */
    sleep_ms(400);
    ck_assert_int_eq(atomic_load(&calls), 1);

    write_file(dir, "tls.crt", "3"); /* the new directory is the one watched */
    wait_for(&calls, 2, 1000);
    ck_assert_int_eq(atomic_load(&calls), 2);
    ck_assert_int_eq(atomic_load(&gone), 1);
    ck_assert_int_eq(atomic_load(&back), 1);
    ck_assert_int_eq(atomic_load(&wrong_dir), 0);
    net_fswatch_stop(w);
    remove_file(dir, "tls.crt");
    rmdir(dir);
}
END_TEST

/* mv dir dir.old && mkdir dir: the watch would follow the old inode; the new directory at the
 * path is watched instead, and changes in the old one no longer count. */
START_TEST(test_replaced_directory_rearmed)
{
    char dir[] = "/tmp/sf_fswatch_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char old[64];
    snprintf(old, sizeof old, "%s.old", dir);
    net_fswatch *w = watch_one(dir);

    ck_assert_int_eq(rename(dir, old), 0);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    wait_for(&back, 1, 1000);
    ck_assert_int_eq(atomic_load(&gone), 1);
    ck_assert_int_eq(atomic_load(&back), 1);
    wait_for(&calls, 1, 1000); /* a new directory is a change */
    sleep_ms(300);
    ck_assert_int_eq(atomic_load(&calls), 1);

    write_file(old, "tls.crt", "old"); /* not watched any more */
    sleep_ms(400);
    ck_assert_int_eq(atomic_load(&calls), 1);
    write_file(dir, "tls.crt", "new");
    wait_for(&calls, 2, 1000);
    ck_assert_int_eq(atomic_load(&calls), 2);
    ck_assert_int_eq(atomic_load(&wrong_dir), 0);
    net_fswatch_stop(w);
    remove_file(old, "tls.crt");
    remove_file(dir, "tls.crt");
    rmdir(old);
    rmdir(dir);
}
END_TEST

/* An event named like the directory is how libuv reports the directory's own removal or move,
 * and renews the watch even when the path shows the same inode (a directory created right after
 * a removal may reuse the freed inode's number). Here a file of that name: the same directory,
 * renewed silently; it keeps working. */
START_TEST(test_same_directory_renewed_silently)
{
    char dir[] = "/tmp/sf_fswatch_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *base = strrchr(dir, '/') + 1;
    net_fswatch *w = watch_one(dir);
    write_file(dir, base, "x");
    wait_for(&calls, 1, 1000);
    sleep_ms(300);
    ck_assert_int_eq(atomic_load(&calls), 1);
    ck_assert_int_eq(atomic_load(&gone), 0);
    ck_assert_int_eq(atomic_load(&back), 0);
    write_file(dir, "tls.crt", "y");
    wait_for(&calls, 2, 1000);
    ck_assert_int_eq(atomic_load(&calls), 2);
    net_fswatch_stop(w);
    remove_file(dir, base);
    remove_file(dir, "tls.crt");
    rmdir(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("fswatch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_burst_is_one_call);
    tcase_add_test(tc, test_missing_directory_refused);
    tcase_add_test(tc, test_removed_directory_rearmed);
    tcase_add_test(tc, test_replaced_directory_rearmed);
    tcase_add_test(tc, test_same_directory_renewed_silently);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
