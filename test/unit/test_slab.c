/* Slab allocator: chunk geometry and alignment, a chunk's page telling its owner and class, empty
 * pages back to the pool and reused by another class, memory handed back to the kernel beyond the
 * pool's resident pages, the counters, bad class tables, and threads allocating and freeing
 * each other's chunks. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/slab.h"
#include "check_main.h"

static const uint32_t sizes[] = {64, 72, 184, 1024, 7936};
#define NCLS (sizeof sizes / sizeof sizes[0])

static slab_arena *mk(void *owner)
{
    slab_arena *a = slab_arena_new(sizes, NCLS, owner);
    ck_assert_ptr_nonnull(a);
    return a;
}

static unsigned per_page(uint32_t size)
{
    return (SLAB_PAGE_BYTES - SLAB_PAGE_HEADER) / size;
}

START_TEST(test_geometry)
{
    int owner;
    slab_arena *a = mk(&owner);
    for (unsigned c = 0; c < NCLS; c++) {
        unsigned n = per_page(sizes[c]) + 3; /* a second page */
        char **p = calloc(n, sizeof *p);
        for (unsigned i = 0; i < n; i++) {
            p[i] = slab_alloc(a, c);
            ck_assert_ptr_nonnull(p[i]);
            ck_assert_uint_eq((uintptr_t)p[i] % 8, 0);
            ck_assert_ptr_eq(slab_owner(p[i]), &owner);
            ck_assert_uint_eq(slab_class_of(p[i]), c);
            memset(p[i], (int)i, sizes[c]); /* the whole chunk is ours: ASan would see */
            if (i)
                ck_assert(p[i] != p[i - 1]);
        }
        /* The first page's chunks are consecutive, after the page header. */
        ck_assert_uint_eq((uintptr_t)p[0] % SLAB_PAGE_BYTES, SLAB_PAGE_HEADER);
        ck_assert_ptr_eq(p[1], p[0] + sizes[c]);
        for (unsigned i = 0; i < n; i++)
            slab_free(p[i]);
        free(p);
    }
    slab_stats st;
    slab_get_stats(a, &st);
    ck_assert_uint_eq(st.chunk_bytes, 0);
    /* Each class keeps one empty page; the second pages went back to the pool. */
    ck_assert_uint_eq(st.pages_in_use, NCLS);
    ck_assert_uint_eq(st.pages_taken, 2 * NCLS);
    ck_assert_uint_eq(st.regions, 1);
    slab_arena_free(a);
}
END_TEST

START_TEST(test_pages_move_between_classes)
{
    slab_arena *a = mk(NULL);
    /* Fill every page of one region with class 0, free them all: the pages go back to the pool
     * (all but the one class 0 keeps), and class 4 gets them without a new region. */
    unsigned n = per_page(64) * SLAB_REGION_PAGES;
    void **p = calloc(n, sizeof *p);
    for (unsigned i = 0; i < n; i++)
        ck_assert_ptr_nonnull(p[i] = slab_alloc(a, 0));
    slab_stats st;
    slab_get_stats(a, &st);
    ck_assert_uint_eq(st.regions, 1);
    ck_assert_uint_eq(st.pages_in_use, SLAB_REGION_PAGES);
    ck_assert_uint_eq(st.chunk_bytes, (uint64_t)n * 64);
    for (unsigned i = 0; i < n; i++)
        slab_free(p[i]);
    slab_get_stats(a, &st);
    ck_assert_uint_eq(st.pages_in_use, 1);
    ck_assert_uint_eq(st.pages_pooled, SLAB_REGION_PAGES - 1);
    ck_assert_uint_eq(st.free_chunk_bytes, (uint64_t)per_page(64) * 64);
    unsigned m = per_page(7936) * (SLAB_REGION_PAGES - 1);
    for (unsigned i = 0; i < m; i++)
        ck_assert_ptr_nonnull(p[i] = slab_alloc(a, 4));
    slab_get_stats(a, &st);
    ck_assert_uint_eq(st.regions, 1);
    ck_assert_uint_eq(st.pages_pooled, 0);
    /* One more chunk maps the next region. */
    void *extra = slab_alloc(a, 4);
    ck_assert_ptr_nonnull(extra);
    slab_get_stats(a, &st);
    ck_assert_uint_eq(st.regions, 2);
    slab_free(extra);
    for (unsigned i = 0; i < m; i++)
        slab_free(p[i]);
    free(p);
    slab_arena_free(a);
}
END_TEST

/* A page pooled beyond the resident ones had its memory handed back: taken again, its chunks
 * read as zero (MADV_DONTNEED on private anonymous memory), and they are usable. */
START_TEST(test_pool_gives_memory_back)
{
    slab_arena *a = mk(NULL);
    unsigned pages = SLAB_POOL_RESIDENT + 4, n = per_page(1024) * pages;
    char **p = calloc(n, sizeof *p);
    for (unsigned i = 0; i < n; i++) {
        ck_assert_ptr_nonnull(p[i] = slab_alloc(a, 3));
        memset(p[i], 0xab, 1024);
    }
    for (unsigned i = 0; i < n; i++)
        slab_free(p[i]);
    unsigned zero = 0;
    for (unsigned i = 0; i < n; i++) {
        p[i] = slab_alloc(a, 3);
        zero += p[i][1023] == 0;
    }
    ck_assert_uint_gt(zero, 0);
    for (unsigned i = 0; i < n; i++)
        slab_free(p[i]);
    free(p);
    slab_arena_free(a);
}
END_TEST

START_TEST(test_bad_tables)
{
    const uint32_t unsorted[] = {64, 64}, odd[] = {60}, big[] = {8192};
    ck_assert_ptr_null(slab_arena_new(unsorted, 2, NULL));
    ck_assert_ptr_null(slab_arena_new(odd, 1, NULL));
    ck_assert_ptr_null(slab_arena_new(big, 1, NULL));
    ck_assert_ptr_null(slab_arena_new(sizes, 0, NULL));
}
END_TEST

/* Threads allocate, hand half their chunks to the next thread to free, and check that no chunk
 * is handed out twice (each writes its id into its chunks and finds it there when freeing). */
#define THREADS 4
#define ROUNDS  200
#define BATCH   500

typedef struct {
    slab_arena *a;
    unsigned id;
    void *_Atomic *inbox; /* chunks another thread left for this one */
    void *_Atomic *outbox;
    unsigned bad;
} worker;

static void *run(void *arg)
{
    worker *w = arg;
    void *mine[BATCH];
    for (unsigned r = 0; r < ROUNDS; r++) {
        for (unsigned i = 0; i < BATCH; i++) {
            unsigned cls = (i + r + w->id) % NCLS;
            mine[i] = slab_alloc(w->a, cls);
            if (!mine[i]) {
                w->bad++;
                continue;
            }
            memset(mine[i], (int)w->id + 1, sizes[cls]);
        }
        for (unsigned i = 0; i < BATCH; i++) {
            if (!mine[i])
                continue;
            unsigned cls = slab_class_of(mine[i]);
            const unsigned char *b = mine[i];
            w->bad += b[0] != w->id + 1 || b[sizes[cls] - 1] != w->id + 1;
            if (i % 2) {
                slab_free(mine[i]);
                continue;
            }
            /* Leave it in the next thread's inbox; free what was there. */
            void *old = atomic_exchange(&w->outbox[i / 2], mine[i]);
            if (old)
                slab_free(old);
        }
    }
    return NULL;
}

START_TEST(test_threads)
{
    slab_arena *a = mk(NULL);
    static void *_Atomic boxes[THREADS][BATCH / 2];
    memset(boxes, 0, sizeof boxes);
    worker w[THREADS];
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (worker){.a = a, .id = i, .outbox = boxes[(i + 1) % THREADS]};
        pthread_create(&t[i], NULL, run, &w[i]);
    }
    unsigned bad = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        bad += w[i].bad;
    }
    ck_assert_uint_eq(bad, 0);
    for (unsigned i = 0; i < THREADS; i++)
        for (unsigned k = 0; k < BATCH / 2; k++)
            if (boxes[i][k])
                slab_free(boxes[i][k]);
    slab_stats st;
    slab_get_stats(a, &st);
    ck_assert_uint_eq(st.chunk_bytes, 0);
    slab_arena_free(a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("slab");
    TCase *tc = tcase_create("slab");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_geometry);
    tcase_add_test(tc, test_pages_move_between_classes);
    tcase_add_test(tc, test_pool_gives_memory_back);
    tcase_add_test(tc, test_bad_tables);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return sf_run_suite(s);
}
