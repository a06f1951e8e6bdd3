#include "cache/snapshot.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fsio.h"
#include "util/crc32.h"

#define MAGIC   "SFCACHE1"
#define TRAILER "\0SFEND\0\0" /* starts with klen 0, which no record has */
#define VERSION 3u /* 2 added the CAS, 3 base64 keys; versions 1 and 2 still load */
#define CTLEN_KEY_BINARY 0x80u /* in the ctlen byte (content types are <= 127 bytes) */

typedef struct writer {
    fsio_atomic out; /* <path>.tmp until committed; remembers the first write error */
    uint32_t crc;
    uint64_t count, bytes;
} writer;

static void put(writer *w, const void *p, size_t n)
{
    if (fsio_atomic_write(&w->out, p, n) != 0)
        return;
    w->crc = crc32_update(w->crc, p, n);
    w->bytes += n;
}

static void put_u32(writer *w, uint32_t v)
{
    unsigned char b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    put(w, b, 4);
}

static void put_u64(writer *w, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    put(w, b, 8);
}

static int write_item(const cache_item *it, void *arg)
{
    writer *w = arg;
    size_t ctlen;
    const char *ct = cache_item_ctype(it, &ctlen);
    unsigned char lens[2] = {(unsigned char)cache_item_klen(it),
                             (unsigned char)(ctlen | (cache_item_key_binary(it) ? CTLEN_KEY_BINARY
                                                                                 : 0))};
    put(w, lens, 2);
    put_u32(w, (uint32_t)cache_item_vlen(it));
    put_u32(w, cache_item_flags(it));
    put_u64(w, cache_item_expiry(it));
    put_u64(w, cache_item_cas(it));
    put(w, cache_item_key(it), cache_item_klen(it));
    put(w, ct, ctlen);
    put(w, cache_item_value(it), cache_item_vlen(it));
    w->count++;
    return w->out.err ? -1 : 0; /* a failed write ends the walk: nothing more would be written */
}

int cache_snapshot_save(cache_store *s, const char *path, uint64_t now_ms,
                        cache_snapshot_info *info, char *err, size_t errlen)
{
    writer w = {.crc = 0};
    char buf[1 << 16]; /* per call: a periodic save and the final one may share no state */
    if (fsio_atomic_open(&w.out, path, buf, sizeof buf, err, errlen) != 0)
        return -1;
    put(&w, MAGIC, 8);
    put_u32(&w, VERSION);
    put_u32(&w, 0);
    put_u64(&w, now_ms);
    if (cache_store_foreach(s, now_ms, write_item, &w) != 0)
        fsio_atomic_fail(&w.out, ENOMEM); /* the walk's own failure; a write error comes first */
    uint32_t crc = w.crc;
    put(&w, TRAILER, 8);
    put_u64(&w, w.count);
    put_u32(&w, crc);
    put_u32(&w, 0);
    if (fsio_atomic_commit(&w.out, err, errlen) != 0) {
        size_t used = errlen ? strlen(err) : 0;
        if (used + 1 < errlen)
            snprintf(err + used, errlen - used, " (the previous snapshot is untouched)");
        return -1;
    }
    if (info)
        *info = (cache_snapshot_info){.items = w.count, .bytes = w.bytes};
    return 0;
}

/* ---- loading ------------------------------------------------------------------------------- */

typedef struct reader {
    FILE *f;
    uint32_t crc;
    bool eof;
} reader;

static bool get(reader *r, void *p, size_t n)
{
    if (n == 0)
        return true;
    if (fread(p, 1, n, r->f) != n) {
        r->eof = true;
        return false;
    }
    r->crc = crc32_update(r->crc, p, n);
    return true;
}

static uint64_t le(const unsigned char *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

static int fail(cache_store *s, uint64_t now_ms, FILE *f, const char *path, const char *why,
                char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s; starting with an empty cache", path, why);
    fclose(f);
    cache_flush_all(s, now_ms, now_ms); /* nothing of a damaged file stays */
    return -1;
}

int cache_snapshot_load(cache_store *s, const char *path, uint64_t now_ms,
                        cache_snapshot_info *info, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -2;
    }
    reader r = {.f = f};
    unsigned char head[24];
    if (!get(&r, head, sizeof head) || memcmp(head, MAGIC, 8) != 0)
        return fail(s, now_ms, f, path, "not a snapshot file", err, errlen);
    uint64_t version = le(head + 8, 4);
    if (version < 1 || version > VERSION)
        return fail(s, now_ms, f, path, "unsupported snapshot version", err, errlen);
    const size_t rec_len = version == 1 ? 18 : 26;
    uint64_t count = 0, loaded = 0, bytes = 0, max_cas = 0;
    char key[256], ctype[256];
    for (;;) {
        uint32_t crc_before = r.crc;
        unsigned char rec[26];
        if (!get(&r, rec, 8))
            return fail(s, now_ms, f, path, "truncated", err, errlen);
        if (memcmp(rec, TRAILER, 8) == 0) {
            unsigned char tail[16];
            if (fread(tail, 1, sizeof tail, f) != sizeof tail)
                return fail(s, now_ms, f, path, "truncated trailer", err, errlen);
            if (le(tail, 8) != count || le(tail + 8, 4) != crc_before)
                return fail(s, now_ms, f, path, "checksum or count mismatch", err, errlen);
            break;
        }
        if (!get(&r, rec + 8, rec_len - 8))
            return fail(s, now_ms, f, path, "truncated", err, errlen);
        size_t klen = rec[0], ctlen = rec[1] & ~CTLEN_KEY_BINARY;
        bool key_binary = version >= 3 && (rec[1] & CTLEN_KEY_BINARY);
        uint64_t vlen = le(rec + 2, 4), expiry = le(rec + 10, 8);
        uint64_t cas = version == 1 ? 0 : le(rec + 18, 8);
        uint32_t flags = (uint32_t)le(rec + 6, 4);
        if (klen == 0 || ctlen > CACHE_CTYPE_MAX || (version < 3 && rec[1] > CACHE_CTYPE_MAX) ||
            !get(&r, key, klen) || !get(&r, ctype, ctlen))
            return fail(s, now_ms, f, path, "malformed record", err, errlen);
        /* a key of other bytes than text came in base64: as its item was made (meta N, ma N
         * and append leave it unmarked, as memcached does) */
        unsigned marks = key_binary                   ? CACHE_ITEM_KEY_BINARY
                         : !cache_key_valid(key, klen) ? CACHE_ITEM_KEY_ANY
                                                       : 0;
        int rc;
        cache_item *it =
            cache_item_new_ex(s, key, klen, vlen, flags, expiry, ctype, ctlen, marks, &rc);
        if (!it) {
            /* Too large for this configuration: skip its value (still checksummed). */
            char skip[4096];
            for (uint64_t left = vlen; left > 0;) {
                size_t n = left > sizeof skip ? sizeof skip : (size_t)left;
                if (!get(&r, skip, n))
                    return fail(s, now_ms, f, path, "truncated", err, errlen);
                left -= n;
            }
        } else {
            if (!get(&r, cache_item_value_mut(it), vlen)) {
                cache_item_release(it);
                return fail(s, now_ms, f, path, "truncated", err, errlen);
            }
            if (expiry != 0 && expiry <= now_ms) { /* expired while we were down: skip */
                cache_item_release(it);
            } else {
                int stored = cas ? cache_store_restore(s, it, cas, now_ms)
                                 : cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, now_ms);
                if (stored == CACHE_STORED) {
                    loaded++;
                    bytes += vlen;
                }
                if (cas > max_cas)
                    max_cas = cas;
            }
        }
        count++;
    }
    fclose(f);
    cache_store_raise_cas(s, max_cas);
    if (info)
        *info = (cache_snapshot_info){.items = loaded, .bytes = bytes};
    return 1;
}
