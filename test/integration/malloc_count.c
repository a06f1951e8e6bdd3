/* LD_PRELOAD shim counting the allocation calls of a process: the steady-state "no malloc per
 * request" test reads the count through snowflaked's /metrics (which finds sf_malloc_calls with
 * dlsym when this library is preloaded). glibc only: it forwards to the __libc_* entry points. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static _Atomic uint64_t calls;

uint64_t sf_malloc_calls(void);
uint64_t sf_malloc_calls(void)
{
    return atomic_load_explicit(&calls, memory_order_relaxed);
}

static void count(void)
{
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
    count();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    count();
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    count();
    return __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    count();
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    count();
    void *p = __libc_memalign(align, n);
    if (!p)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}

void free(void *p)
{
    __libc_free(p);
}
