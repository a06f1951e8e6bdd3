#include "net/obuf.h"

#include <uv.h>

static obuf_chunk *chunk_new(obuf *b)
{
    obuf_chunk *c = pool_get(b->chunks);
    if (!c)
        return NULL;
    c->next = NULL;
    c->start = c->end = 0;
    if (b->tail)
        b->tail->next = c;
    else
        b->head = c;
    b->tail = c;
    return c;
}

char *obuf_reserve(obuf *b, size_t want)
{
    obuf_chunk *c = b->tail;
    if ((!c || OBUF_CHUNK_SIZE - c->end < want) && !(c = chunk_new(b)))
        return NULL;
    return c->data + c->end;
}

int obuf_append(obuf *b, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        obuf_chunk *c = b->tail;
        if (!c || c->end == OBUF_CHUNK_SIZE) {
            if (!(c = chunk_new(b)))
                return -1;
        }
        size_t n = OBUF_CHUNK_SIZE - c->end;
        if (n > len)
            n = len;
        memcpy(c->data + c->end, p, n);
        c->end += (uint32_t)n;
        b->pending += n;
        p += n;
        len -= n;
    }
    return 0;
}

void obuf_splice(obuf *dst, obuf *src)
{
    if (!src->head)
        return;
    size_t room = dst->tail ? OBUF_CHUNK_SIZE - dst->tail->end : 0;
    if (src->pending <= room) { /* small: one chunk and one iovec fewer */
        for (obuf_chunk *c = src->head; c; c = c->next) {
            memcpy(dst->tail->data + dst->tail->end, c->data + c->start, c->end - c->start);
            dst->tail->end += c->end - c->start;
        }
        dst->pending += src->pending;
        obuf_reset(src);
        return;
    }
    if (dst->tail)
        dst->tail->next = src->head;
    else
        dst->head = src->head;
    dst->tail = src->tail;
    dst->pending += src->pending;
    src->head = src->tail = NULL;
    src->pending = 0;
}

size_t obuf_iov(const obuf *b, size_t skip, void *uv_bufs, size_t max, size_t *bytes)
{
    uv_buf_t *iov = uv_bufs;
    size_t n = 0, total = 0;
    for (const obuf_chunk *c = b->head; c && n < max; c = c->next) {
        size_t len = c->end - c->start;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        iov[n].base = (char *)c->data + c->start + skip;
        iov[n].len = len - skip;
        total += len - skip;
        skip = 0;
        n++;
    }
    *bytes = total;
    return n;
}

void obuf_consume(obuf *b, size_t n)
{
    b->pending -= n;
    while (n > 0) {
        obuf_chunk *c = b->head;
        size_t len = c->end - c->start;
        if (n < len) {
            c->start += (uint32_t)n;
            return;
        }
        n -= len;
        /* Emptied chunks go back at once: an idle keep-alive connection holds no buffer. */
        b->head = c->next;
        if (!b->head)
            b->tail = NULL;
        pool_put(b->chunks, c);
    }
}

void obuf_reset(obuf *b)
{
    while (b->head) {
        obuf_chunk *c = b->head;
        b->head = c->next;
        pool_put(b->chunks, c);
    }
    b->tail = NULL;
    b->pending = 0;
}
