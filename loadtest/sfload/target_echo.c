/* Raw TCP echo target: each request is --msg-size bytes, unique per connection (a sequence number
 * in its first bytes, a fixed pattern after), and must come back byte-identical and in order. */
#include <stdio.h>
#include <string.h>

#include "target.h"

typedef struct echo_conn {
    size_t off; /* bytes of the oldest pending message already matched */
    uint64_t seq;
    size_t size;
} echo_conn;

static int conn_init(sl_conn *c, void *st)
{
    echo_conn *e = st;
    e->size = sl_conn_opts(c)->msg_size;
    e->seq = (uint64_t)sl_conn_id(c) << 40;
    return 0;
}

static void conn_reset(sl_conn *c, void *st)
{
    (void)c;
    ((echo_conn *)st)->off = 0;
}

static void prepare(sl_conn *c, void *st, sl_slot *s)
{
    (void)c;
    echo_conn *e = st;
    if (!s->kind) { /* first use of this slot's memory: the pattern */
        for (size_t i = 0; i < e->size; i++)
            s->mem[i] = (char)(i * 31 + 7);
        s->kind = 1;
    }
    uint64_t seq = ++e->seq;
    memcpy(s->mem, &seq, e->size < sizeof seq ? e->size : sizeof seq);
    s->key = seq;
    s->bufs[0] = uv_buf_init(s->mem, (unsigned)e->size);
    s->nbufs = 1;
}

static int on_data(sl_conn *c, void *st, const char *p, size_t n)
{
    echo_conn *e = st;
    while (n) {
        const sl_slot *s = sl_conn_pending(c);
        if (!s)
            return SL_FAIL(ERR_MISMATCH); /* bytes nobody sent */
        size_t take = e->size - e->off < n ? e->size - e->off : n;
        if (memcmp(p, s->mem + e->off, take) != 0)
            return SL_FAIL(ERR_MISMATCH);
        e->off += take;
        p += take;
        n -= take;
        if (e->off == e->size) {
            e->off = 0;
            sl_conn_complete(c, SL_OK);
        }
    }
    return SL_CONTINUE;
}

static int on_eof(sl_conn *c, void *st)
{
    (void)c;
    return ((echo_conn *)st)->off ? SL_FAIL(ERR_READ) : SL_CLOSE;
}

int target_echo_setup(const sl_opts *o, sl_target *t, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    memset(t, 0, sizeof *t);
    t->name = "echo";
    t->slot_bytes = o->msg_size;
    t->conn_bytes = sizeof(echo_conn);
    t->conn_init = conn_init;
    t->conn_reset = conn_reset;
    t->prepare = prepare;
    t->on_data = on_data;
    t->on_eof = on_eof;
    return 0;
}
