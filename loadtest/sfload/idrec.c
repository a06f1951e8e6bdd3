/* --ids-out-v2 records and their writer (see idrec.h). */
#include "idrec.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static void put_le(unsigned char *p, uint64_t v, unsigned bytes)
{
    for (unsigned i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void idrec_encode(const idrec *r, unsigned char out[IDREC_BYTES])
{
    put_le(out, r->id, 8);
    put_le(out + 8, r->target, 2);
    put_le(out + 10, r->ms, 4);
    put_le(out + 14, (r->conn & IDREC_CONN_MAX) | (r->fresh ? IDREC_FRESH : 0), 2);
}

int idrec_decode(const unsigned char in[IDREC_BYTES], idrec *r)
{
    uint16_t c = (uint16_t)get_le(in + 14, 2);
    r->id = get_le(in, 8);
    r->target = (uint16_t)get_le(in + 8, 2);
    r->ms = (uint32_t)get_le(in + 10, 4);
    r->conn = c & IDREC_CONN_MAX;
    r->fresh = (c & IDREC_FRESH) != 0;
    return 0;
}

int idrec_open(idrec_file *f, const char *path)
{
    f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    atomic_init(&f->offset, 0);
    atomic_init(&f->error, 0);
    return f->fd < 0 ? -1 : 0;
}

int idrec_close(idrec_file *f)
{
    int e = atomic_load(&f->error);
    if (f->fd >= 0 && close(f->fd) != 0 && !e)
        e = errno;
    f->fd = -1;
    if (e) {
        errno = e;
        return -1;
    }
    return 0;
}

void idrec_writer_init(idrec_writer *w, idrec_file *f)
{
    w->f = f;
    w->n = 0;
}

void idrec_writer_flush(idrec_writer *w)
{
    size_t len = w->n * IDREC_BYTES;
    w->n = 0;
    if (!len || atomic_load_explicit(&w->f->error, memory_order_relaxed))
        return;
    uint64_t off = atomic_fetch_add(&w->f->offset, len);
    const unsigned char *p = w->buf;
    for (unsigned tries = 0; len && tries < 1000; tries++) { /* regular file: partial is rare */
        ssize_t k = pwrite(w->f->fd, p, len, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int expected = 0;
            atomic_compare_exchange_strong(&w->f->error, &expected, k < 0 ? errno : EIO);
            return;
        }
        p += k;
        off += (uint64_t)k;
        len -= (size_t)k;
    }
    if (len) {
        int expected = 0;
        atomic_compare_exchange_strong(&w->f->error, &expected, EIO);
    }
}

void idrec_writer_add(idrec_writer *w, const idrec *r)
{
    idrec_encode(r, w->buf + w->n * IDREC_BYTES);
    if (++w->n == IDREC_BUF_RECS)
        idrec_writer_flush(w);
}
