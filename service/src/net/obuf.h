/* Output buffer of a connection: a chain of pooled chunks written with one writev.
 *
 * Protocols append responses while handling a read; the connection flushes once at the end of
 * the read (uv_try_write first, uv_write for the rest). Bytes handed to an in-flight uv_write
 * stay untouched until its callback consumes them; appends go after them. Single-threaded (the
 * owning loop). Appending can only fail when the chunk pool cannot malloc.
 */
#ifndef SF_NET_OBUF_H
#define SF_NET_OBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "net/pool.h"

#define OBUF_CHUNK_SIZE (16 * 1024 - 64) /* payload per chunk; the struct rounds to 16 KiB */

typedef struct obuf_chunk {
    struct obuf_chunk *next;
    uint32_t start, end; /* bytes [start, end) of data are pending */
    char data[OBUF_CHUNK_SIZE];
} obuf_chunk;

typedef struct obuf {
    obuf_chunk *head, *tail;
    size_t pending; /* bytes not yet written */
    pool *chunks;   /* the loop's chunk pool */
} obuf;

static inline void obuf_init(obuf *b, pool *chunks)
{
    b->head = b->tail = NULL;
    b->pending = 0;
    b->chunks = chunks;
}

/* Room for at least `want` (<= OBUF_CHUNK_SIZE) contiguous bytes at the end, or NULL. Write
 * into it, then obuf_commit() what was used. */
char *obuf_reserve(obuf *b, size_t want);
static inline void obuf_commit(obuf *b, size_t n)
{
    b->tail->end += (uint32_t)n;
    b->pending += n;
}

/* Copies len bytes in, across chunks as needed. Returns 0, or -1 if out of memory. */
int obuf_append(obuf *b, const void *data, size_t len);

/* Moves all of src's bytes to the end of dst (same chunk pool): copied when they fit in dst's
 * last chunk, else the chunks themselves are linked (no copy). src is left empty. */
void obuf_splice(obuf *dst, obuf *src);

/* Fills up to max iovecs (struct iovec compatible: uv_buf_t on Unix) with pending bytes starting
 * `skip` bytes in; returns the count. */
struct uv_buf_t;
size_t obuf_iov(const obuf *b, size_t skip, void *uv_bufs, size_t max, size_t *bytes);

/* Drops n written bytes from the front, returning emptied chunks to the pool. */
void obuf_consume(obuf *b, size_t n);

/* Drops everything (connection closing). */
void obuf_reset(obuf *b);

#endif
