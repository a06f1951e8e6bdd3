/* memcached text-protocol target: get/set mix over keys sfload:0 .. sfload:N-1, one shared value
 * buffer for every set, replies parsed by mcreply and checked against the request. With
 * --mc-id-key, every request is instead one get of a reserved ID key named --mc-id-count times
 * (katsubushi-style IDs, snowflaked cache.memcached_id_keys): the line is built once, and a reply
 * must hold one value per key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcreply.h"
#include "target.h"
#include "util/fmt.h"

#define KEY_PREFIX "sfload:"
#define LINE_BYTES 64 /* "set sfload:<20 digits> 0 0 <7 digits>\r\n" fits */

enum { OP_GET, OP_SET };

typedef struct mc_global {
    char *value; /* value_size bytes + CRLF */
    size_t value_len;
    char size_text[16];
    unsigned gets, sets;
    uint64_t keys;
    char *id_get; /* --mc-id-key: the whole get line, or NULL */
    size_t id_get_len;
    unsigned id_count;
} mc_global;

typedef struct mc_conn {
    mc_parser p;
    const mc_global *g;
} mc_conn;

static size_t put_str(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return n;
}

static int conn_init(sl_conn *c, void *st)
{
    mc_conn *m = st;
    m->g = sl_conn_global(c);
    mc_reset(&m->p);
    return 0;
}

static void conn_reset(sl_conn *c, void *st)
{
    (void)c;
    mc_reset(&((mc_conn *)st)->p);
}

static void prepare(sl_conn *c, void *st, sl_slot *s)
{
    const mc_global *g = ((mc_conn *)st)->g;
    if (g->id_get) {
        s->kind = OP_GET;
        s->bufs[0] = uv_buf_init(g->id_get, (unsigned)g->id_get_len);
        s->nbufs = 1;
        return;
    }
    uint64_t r = sl_conn_random(c);
    s->kind = (r >> 40) % (g->gets + g->sets) < g->gets ? OP_GET : OP_SET;
    s->key = (r & ((UINT64_C(1) << 40) - 1)) % g->keys;
    char *p = s->mem;
    size_t n = put_str(p, s->kind == OP_GET ? "get " KEY_PREFIX : "set " KEY_PREFIX);
    n += fmt_u64(p + n, s->key);
    if (s->kind == OP_SET) {
        n += put_str(p + n, " 0 0 ");
        n += put_str(p + n, g->size_text);
    }
    n += put_str(p + n, "\r\n");
    s->bufs[0] = uv_buf_init(p, (unsigned)n);
    s->nbufs = 1;
    if (s->kind == OP_SET)
        s->bufs[s->nbufs++] = uv_buf_init(g->value, (unsigned)g->value_len);
}

static int error_kind(mc_kind k)
{
    if (k == MC_SERVER_ERROR)
        return ERR_5XX;
    if (k == MC_CLIENT_ERROR || k == MC_ERROR)
        return ERR_4XX;
    return ERR_MISMATCH;
}

static int outcome_of(const mc_global *g, const sl_slot *s, const mc_reply *r, sl_stats *st)
{
    if (s->kind == OP_SET) {
        if (s->measured)
            st->mc_sets++;
        return r->kind == MC_STORED ? SL_OK : error_kind(r->kind);
    }
    if (s->measured)
        st->mc_gets++;
    if (r->kind != MC_END)
        return error_kind(r->kind);
    if (g->id_get) { /* an ID for every key, or the server refused (SERVER_ERROR above) */
        if (r->nvalues != g->id_count)
            return ERR_MISMATCH;
        if (s->measured)
            st->mc_hits++;
        return SL_OK;
    }
    if (r->nvalues == 0)
        return SL_OK; /* a miss */
    char key[48];
    size_t n = put_str(key, KEY_PREFIX);
    n += fmt_u64(key + n, s->key);
    if (r->nvalues != 1 || r->key_len != n || memcmp(r->key, key, n) != 0)
        return ERR_MISMATCH;
    if (s->measured)
        st->mc_hits++;
    return SL_OK;
}

static int on_data(sl_conn *c, void *st, const char *p, size_t n)
{
    mc_conn *m = st;
    while (n) {
        size_t used = 0;
        mc_reply r;
        int rc = mc_feed(&m->p, p, n, &used, &r);
        if (rc < 0)
            return SL_FAIL(ERR_PARSE);
        if (rc == 0)
            return SL_CONTINUE;
        const sl_slot *s = sl_conn_pending(c);
        if (!s)
            return SL_FAIL(ERR_PARSE);
        int outcome = outcome_of(m->g, s, &r, sl_conn_stats(c));
        if (outcome == ERR_MISMATCH) /* out of step: fails this request, resyncs on a new conn */
            return SL_FAIL(ERR_MISMATCH);
        sl_conn_complete(c, outcome);
        p += used;
        n -= used;
    }
    return SL_CONTINUE;
}

static int on_eof(sl_conn *c, void *st)
{
    (void)c;
    mc_conn *m = st;
    return m->p.line_len || m->p.data_left ? SL_FAIL(ERR_READ) : SL_CLOSE;
}

static void release(sl_target *t)
{
    mc_global *g = (mc_global *)t->global;
    if (g) {
        free(g->value);
        free(g->id_get);
    }
    free(g);
    t->global = NULL;
}

int target_memcache_setup(const sl_opts *o, sl_target *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    mc_global *g = calloc(1, sizeof *g);
    if (!g || !(g->value = malloc(o->value_size + 2))) {
        free(g);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < o->value_size; i++)
        g->value[i] = (char)('a' + i % 26);
    memcpy(g->value + o->value_size, "\r\n", 2);
    g->value_len = o->value_size + 2;
    snprintf(g->size_text, sizeof g->size_text, "%zu", o->value_size);
    g->gets = o->mc_gets;
    g->sets = o->mc_sets;
    g->keys = o->keys;
    if (o->mc_id_key) {
        size_t k = strlen(o->mc_id_key);
        g->id_count = o->mc_id_count;
        if (!(g->id_get = malloc(3 + (size_t)g->id_count * (k + 1) + 2))) {
            free(g->value);
            free(g);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        size_t n = put_str(g->id_get, "get");
        for (unsigned i = 0; i < g->id_count; i++) {
            g->id_get[n++] = ' ';
            memcpy(g->id_get + n, o->mc_id_key, k);
            n += k;
        }
        g->id_get_len = n + put_str(g->id_get + n, "\r\n");
    }
    t->global = g;
    t->release = release;
    t->name = "memcache";
    t->slot_bytes = LINE_BYTES;
    t->conn_bytes = sizeof(mc_conn);
    t->conn_init = conn_init;
    t->conn_reset = conn_reset;
    t->prepare = prepare;
    t->on_data = on_data;
    t->on_eof = on_eof;
    return 0;
}
