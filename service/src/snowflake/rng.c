#include "snowflake/rng.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

typedef struct rng_buffer {
    size_t pos; /* next unused byte; SF_RNG_BUFFER_BYTES = empty */
    unsigned char bytes[SF_RNG_BUFFER_BYTES];
} rng_buffer;

static _Thread_local rng_buffer tls_buffer = {.pos = SF_RNG_BUFFER_BYTES};
static _Atomic uint64_t failures;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The child of a fork holds a copy of the forking thread's buffer: drop it, or parent and child
 * would hand out the same bytes. */
static void forget_in_child(void)
{
    tls_buffer.pos = SF_RNG_BUFFER_BYTES;
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}

/* getrandom until n bytes are in, never blocking: short reads (signals, large requests) loop. */
static int read_kernel(unsigned char *out, size_t n)
{
    while (n > 0) {
        ssize_t got = getrandom(out, n, GRND_NONBLOCK);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            atomic_fetch_add_explicit(&failures, 1, memory_order_relaxed);
            return -1;
        }
        out += got;
        n -= (size_t)got;
    }
    return 0;
}

int sf_rng_fill(void *out, size_t n)
{
    rng_buffer *b = &tls_buffer;
    unsigned char *dst = out;
    size_t have = SF_RNG_BUFFER_BYTES - b->pos;
    if (n <= have) {
        memcpy(dst, b->bytes + b->pos, n);
        memset(b->bytes + b->pos, 0, n);
        b->pos += n;
        return 0;
    }
    if (n >= SF_RNG_BUFFER_BYTES) /* a large batch: straight into the caller's memory */
        return read_kernel(dst, n);
    memcpy(dst, b->bytes + b->pos, have);
    memset(b->bytes + b->pos, 0, have);
    b->pos = SF_RNG_BUFFER_BYTES;
    if (read_kernel(b->bytes, SF_RNG_BUFFER_BYTES) != 0)
        return -1;
    b->pos = 0;
    return sf_rng_fill(dst + have, n - have);
}

int sf_rng_u64(uint64_t *out)
{
    return sf_rng_fill(out, sizeof *out);
}

uint64_t sf_rng_failures(void)
{
    return atomic_load_explicit(&failures, memory_order_relaxed);
}

int sf_rng_probe(bool *waited, char *err, size_t errlen)
{
    pthread_once(&atfork_once, register_atfork);
    unsigned char byte;
    *waited = false;
    for (;;) {
        ssize_t got = getrandom(&byte, 1, *waited ? 0 : GRND_NONBLOCK);
        if (got == 1)
            return 0;
        if (got < 0 && errno == EAGAIN && !*waited) {
            *waited = true; /* the pool is not initialised yet: wait for it, once */
            continue;
        }
        if (got < 0 && errno == EINTR)
            continue;
        snprintf(err, errlen, "getrandom: %s (UUIDv7 and ULID need the kernel's random source)",
                 got < 0 ? strerror(errno) : "short read");
        return -1;
    }
}
