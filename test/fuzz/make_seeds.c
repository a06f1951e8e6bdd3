/* Writes the snapshot seeds of test/fuzz/corpus/fuzz_snapshot/ with the real code: valid
 * snapshots saved by cache_snapshot_save (empty, one item, several items with content types,
 * flags, expiry and CAS values, a value larger than fuzz_snapshot's item limit), a version-1
 * file (no CAS) built by hand with the real CRC, and damaged copies (truncated at every
 * interesting place, a flipped byte, a wrong count, a wrong version, trailing bytes).
 *
 * Usage: make_seeds DIR   (test/fuzz/run.sh --seeds runs it; the output is committed)
 * The time is fixed (fuzz_snapshot uses the same), so items with an expiry stay live there.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/snapshot.h"
#include "cache/store.h"
#include "util/crc32.h"

#define FIXED_NOW_MS UINT64_C(1767225600000) /* 2026-01-01T00:00:00Z, as fuzz_snapshot */
#define DAY_MS       UINT64_C(86400000)

static const char *dir;

static void die(const char *what)
{
    fprintf(stderr, "make_seeds: %s\n", what);
    exit(1);
}

static cache_store *new_store(void)
{
    cache_store_config c = {.max_memory_bytes = 1u << 20, .shards = 4, .seed = 7};
    char err[256];
    cache_store *s = cache_store_new(&c, err, sizeof err);
    if (!s)
        die(err);
    return s;
}

static void put(cache_store *s, const char *key, const char *val, size_t vlen, uint32_t flags,
                uint64_t expiry, const char *ctype)
{
    int err;
    cache_item *it = cache_item_new(s, key, strlen(key), vlen, flags, expiry, ctype,
                                    ctype ? strlen(ctype) : 0, &err);
    if (!it)
        die("cache_item_new");
    memcpy(cache_item_value_mut(it), val, vlen);
    if (cache_store_item(s, it, CACHE_MODE_SET, 0, NULL, FIXED_NOW_MS) != CACHE_STORED)
        die("cache_store_item");
}

static void save(cache_store *s, const char *name)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (cache_snapshot_save(s, path, FIXED_NOW_MS, NULL, err, sizeof err) != 0)
        die(err);
}

static unsigned char *read_all(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot read back a seed");
    unsigned char *buf = malloc(1 << 20);
    if (!buf)
        die("out of memory");
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

static void write_seed(const char *name, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0)
        die("cannot write a seed");
}

/* ---- version 1, by hand (cache/snapshot.h: records without the CAS) ---------------------- */

typedef struct buf {
    unsigned char d[4096];
    size_t n;
} buf;

static void b_put(buf *b, const void *p, size_t n)
{
    memcpy(b->d + b->n, p, n);
    b->n += n;
}

static void b_le(buf *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        b->d[b->n++] = (unsigned char)(v >> (8 * i));
}

static void v1_record(buf *b, const char *key, const char *ctype, const char *val, uint32_t flags,
                      uint64_t expiry)
{
    b->d[b->n++] = (unsigned char)strlen(key);
    b->d[b->n++] = (unsigned char)strlen(ctype);
    b_le(b, strlen(val), 4);
    b_le(b, flags, 4);
    b_le(b, expiry, 8);
    b_put(b, key, strlen(key));
    b_put(b, ctype, strlen(ctype));
    b_put(b, val, strlen(val));
}

static void write_v1(void)
{
    buf b = {.n = 0};
    b_put(&b, "SFCACHE1", 8);
    b_le(&b, 1, 4);
    b_le(&b, 0, 4);
    b_le(&b, FIXED_NOW_MS - 1000, 8);
    v1_record(&b, "v1:a", "", "alpha", 0, 0);
    v1_record(&b, "v1:b", "text/plain", "bravo", 42, FIXED_NOW_MS + DAY_MS);
    v1_record(&b, "v1:expired", "", "gone", 0, FIXED_NOW_MS - 1);
    uint32_t crc = crc32_update(0, b.d, b.n);
    b_put(&b, "\0SFEND\0\0", 8);
    b_le(&b, 3, 8);
    b_le(&b, crc, 4);
    b_le(&b, 0, 4);
    write_seed("v1_three_items", b.d, b.n);
}

/* ---- damaged copies ---------------------------------------------------------------------- */

static void damaged(const char *from)
{
    size_t len;
    unsigned char *d = read_all(from, &len);
    char name[256];
    /* Truncations: inside the header, after it, inside the first record, before the trailer,
     * inside the trailer, one byte short. */
    size_t cuts[] = {0, 7, 23, 24, 30, 50, len > 32 ? len - 32 : 1, len - 20, len - 9, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        if (cuts[i] >= len)
            continue;
        snprintf(name, sizeof name, "%s_truncated_%zu", from, cuts[i]);
        write_seed(name, d, cuts[i]);
    }
    /* A flipped byte in a record (checksum mismatch), in the count, in the version. */
    unsigned char *c = malloc(len + 8);
    if (!c)
        die("out of memory");
    memcpy(c, d, len);
    c[len / 2] ^= 0x20;
    snprintf(name, sizeof name, "%s_flipped", from);
    write_seed(name, c, len);
    memcpy(c, d, len);
    c[len - 16] ^= 1; /* the count */
    snprintf(name, sizeof name, "%s_bad_count", from);
    write_seed(name, c, len);
    memcpy(c, d, len);
    c[8] = 3; /* version 3 */
    snprintf(name, sizeof name, "%s_bad_version", from);
    write_seed(name, c, len);
    memcpy(c, d, len);
    memcpy(c + len, "garbage!", 8); /* after the trailer: ignored */
    snprintf(name, sizeof name, "%s_trailing", from);
    write_seed(name, c, len + 8);
    free(c);
    free(d);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    dir = argv[1];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        die("cannot create the directory");

    cache_store *s = new_store();
    save(s, "v2_empty");

    put(s, "greeting", "hello", 5, 0, 0, NULL);
    save(s, "v2_one_item");

    put(s, "user:1", "{\"name\":\"ada\"}", 14, 7, 0, "application/json");
    put(s, "ttl", "expires tomorrow", 16, 0, FIXED_NOW_MS + DAY_MS, "text/plain");
    put(s, "counter", "12345", 5, 0, 0, NULL);
    put(s, "empty", "", 0, 4294967295u, 0, NULL);
    put(s, "greeting", "hello again", 11, 1, 0, NULL); /* replaced: a later CAS */
    save(s, "v2_several");

    static char big[6000];
    memset(big, 'x', sizeof big);
    put(s, "big", big, sizeof big, 0, 0, "application/octet-stream"); /* > fuzz item limit */
    save(s, "v2_with_large_value");
    cache_store_free(s);

    write_v1();
    damaged("v2_several");
    damaged("v1_three_items");
    return 0;
}
