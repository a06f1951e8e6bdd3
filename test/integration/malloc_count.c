/* LD_PRELOAD shim counting the allocation calls of a process, for the steady-state "no malloc
 * per request" test (test_alloc.py). glibc only: it forwards to the __libc_* entry points.
 *
 * The count reaches the test without any code in the daemon: with SF_MALLOC_COUNT_FILE=<path>
 * in the environment, the shim's constructor creates that file (8 bytes) and maps it shared, and
 * every call increments the 64-bit counter in the mapping. The test reads the file whenever it
 * likes (the page cache is the mapping, so a read sees every increment made before it); nothing
 * is sent to the process, nothing in it waits. Calls made before the constructor ran (ld.so,
 * libc start-up) are counted in a private variable and carried over.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static _Atomic uint64_t early;
static _Atomic uint64_t *calls = &early; /* switched once, before main: one thread only */

__attribute__((constructor)) static void map_counter(void)
{
    const char *path = getenv("SF_MALLOC_COUNT_FILE");
    if (!path || !*path)
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return; /* the test finds no file and says so */
    void *m = MAP_FAILED;
    if (ftruncate(fd, sizeof(uint64_t)) == 0)
        m = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd); /* the mapping keeps the file */
    if (m == MAP_FAILED)
        return;
    _Atomic uint64_t *shared = m;
    atomic_store(shared, atomic_load(&early));
    calls = shared;
}

static void count(void)
{
    atomic_fetch_add_explicit(calls, 1, memory_order_relaxed);
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
