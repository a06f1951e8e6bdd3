/* net/fswatch: a burst of changes in a watched directory is one call, debounce_ms after the
 * last; a rename over a symlink (kubelet's ..data swap) is a change; a duplicate directory is
 * watched once; a missing directory is refused with its name; stop ends the thread at once. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "net/fswatch.h"

static _Atomic int calls;

static void count(void *arg)
{
    (void)arg;
    atomic_fetch_add(&calls, 1);
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
    net_fswatch *w = net_fswatch_start(dirs, 2, 200, count, NULL, err, sizeof err);
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
    ck_assert_ptr_null(net_fswatch_start(dirs, 1, 100, count, NULL, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/sf_fswatch"));
    net_fswatch_stop(NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("fswatch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_burst_is_one_call);
    tcase_add_test(tc, test_missing_directory_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
