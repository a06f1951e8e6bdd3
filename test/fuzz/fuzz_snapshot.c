/* libFuzzer harness: loading a cache snapshot (cache/snapshot.h).
 *
 * The input is a snapshot file, written to a scratch file and loaded with cache_snapshot_load
 * into a fresh store (64 KiB, 4 KiB items, 4 shards: records too large are skipped, eviction
 * happens while loading). The clock is fixed, so expiry does not depend on when this runs; the
 * seeds are written by make_seeds with the same fixed time.
 *
 * A mutated record almost never comes with a matching CRC and count, so most inputs would stop at
 * the trailer check. Each input is therefore loaded twice: as it is, and (when it has the shape
 * of a snapshot up to a trailer) with the trailer's count and CRC recomputed, so arbitrary
 * records also reach the success path and the save + reload check.
 *
 * Properties (each violation aborts with a message):
 *   - the result is 1 (loaded) or -1 (corrupt, truncated) for an existing file, with a reason
 *     for -1;
 *   - -1 leaves nothing of the file in the store;
 *   - the store's counters agree with its contents and never wrap below zero (fuzz_common.h);
 *   - after a load, saving the store and loading that file into a fresh store gives the same
 *     items (key, value, flags, expiry, content type, CAS);
 *   - loading the same file a second time into the loaded store works and keeps it consistent.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/snapshot.h"
#include "cache/store.h"
#include "fuzz_common.h"
#include "util/crc32.h"

#define FIXED_NOW_MS UINT64_C(1767225600000) /* 2026-01-01T00:00:00Z */

static char input_path[300], copy_path[300];
static const cache_store_config store_cfg = {
    .max_memory_bytes = 64 * 1024, .max_item_bytes = 4096, .shards = 4, .seed = 7};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_clean_environment();
    fuzz_path(input_path, sizeof input_path, "input");
    fuzz_path(copy_path, sizeof copy_path, "copy");
    return 0;
}

static cache_store *new_store(void)
{
    char err[256];
    cache_store *s = cache_store_new(&store_cfg, err, sizeof err);
    FUZZ_CHECK(s != NULL, "cache: %s", err);
    return s;
}

/* Every item of the walked store is in `other`, identical. */
static int same_in_other(const cache_item *a, void *arg)
{
    cache_store *other = arg;
    size_t klen = cache_item_klen(a);
    cache_item *b = cache_get(other, cache_item_key(a), klen, FIXED_NOW_MS);
    FUZZ_CHECK(b != NULL, "item %.*s lost by save + load", (int)klen, cache_item_key(a));
    size_t al, bl;
    const char *act = cache_item_ctype(a, &al), *bct = cache_item_ctype(b, &bl);
    FUZZ_CHECK(cache_item_vlen(a) == cache_item_vlen(b) &&
                   memcmp(cache_item_value(a), cache_item_value(b), cache_item_vlen(a)) == 0,
               "item %.*s: value changed by save + load", (int)klen, cache_item_key(a));
    FUZZ_CHECK(cache_item_flags(a) == cache_item_flags(b) &&
                   cache_item_expiry(a) == cache_item_expiry(b),
               "item %.*s: flags or expiry changed by save + load", (int)klen, cache_item_key(a));
    FUZZ_CHECK(al == bl && memcmp(act, bct, al) == 0,
               "item %.*s: content type changed by save + load", (int)klen, cache_item_key(a));
    /* Restored CAS values at or above CACHE_CAS_RESTORE_MAX are replaced on purpose. */
    FUZZ_CHECK(cache_item_cas(a) >= CACHE_CAS_RESTORE_MAX || cache_item_cas(a) == cache_item_cas(b),
               "item %.*s: CAS %llu became %llu by save + load", (int)klen, cache_item_key(a),
               (unsigned long long)cache_item_cas(a), (unsigned long long)cache_item_cas(b));
    cache_item_release(b);
    return 0;
}

static uint64_t le(const uint8_t *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* Walks the records as cache/snapshot.h lays them out; if a trailer follows them, writes the
 * record count and the CRC of everything before it into the trailer. Returns true if d was
 * changed. */
static bool fix_trailer(uint8_t *d, size_t n)
{
    if (n < 24 || memcmp(d, "SFCACHE1", 8) != 0)
        return false;
    uint64_t version = le(d + 8, 4);
    if (version != 1 && version != 2)
        return false;
    size_t rec_len = version == 1 ? 18 : 26, off = 24;
    uint64_t count = 0;
    for (;;) {
        if (n - off < 8)
            return false;
        if (memcmp(d + off, "\0SFEND\0\0", 8) == 0)
            break;
        if (n - off < rec_len)
            return false;
        uint64_t skip = rec_len + d[off] + d[off + 1] + le(d + off + 2, 4);
        if (skip > n - off)
            return false;
        off += (size_t)skip;
        count++;
    }
    if (n - off < 24)
        return false;
    uint8_t trailer[12];
    uint32_t crc = crc32_update(0, d, off);
    for (int i = 0; i < 8; i++)
        trailer[i] = (uint8_t)(count >> (8 * i));
    for (int i = 0; i < 4; i++)
        trailer[8 + i] = (uint8_t)(crc >> (8 * i));
    if (memcmp(d + off + 8, trailer, sizeof trailer) == 0)
        return false;
    memcpy(d + off + 8, trailer, sizeof trailer);
    return true;
}

static void check_file(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_file(data, size);
    uint8_t *fixed = malloc(size ? size : 1);
    FUZZ_CHECK(fixed != NULL, "out of memory");
    memcpy(fixed, data, size);
    if (fix_trailer(fixed, size))
        check_file(fixed, size);
    free(fixed);
    return 0;
}

static void check_file(const uint8_t *data, size_t size)
{
    fuzz_write_file(input_path, data, size);
    char err[1024] = "";
    cache_snapshot_info info = {0};
    cache_store *s = new_store();
    int rc = cache_snapshot_load(s, input_path, FIXED_NOW_MS, &info, err, sizeof err);
    FUZZ_CHECK(rc == 1 || rc == -1, "load returned %d for an existing file (%s)", rc, err);
    uint64_t live = fuzz_store_check(s, FIXED_NOW_MS);
    if (rc == -1) {
        FUZZ_CHECK(err[0] != '\0', "load failed without a reason");
        FUZZ_CHECK(live == 0, "a failed load left %llu items in the store",
                   (unsigned long long)live);
        cache_store_free(s);
        return;
    }
    FUZZ_CHECK(live <= info.items, "%llu items live but the load reports %llu",
               (unsigned long long)live, (unsigned long long)info.items);

    /* Save and load again: the same items. */
    cache_snapshot_info saved = {0}, loaded = {0};
    FUZZ_CHECK(cache_snapshot_save(s, copy_path, FIXED_NOW_MS, &saved, err, sizeof err) == 0,
               "save failed: %s", err);
    FUZZ_CHECK(saved.items == live, "saved %llu items of %llu", (unsigned long long)saved.items,
               (unsigned long long)live);
    cache_store *t = new_store();
    rc = cache_snapshot_load(t, copy_path, FIXED_NOW_MS, &loaded, err, sizeof err);
    FUZZ_CHECK(rc == 1, "a snapshot just saved does not load (%d): %s", rc, err);
    FUZZ_CHECK(loaded.items == live, "reloaded %llu items of %llu",
               (unsigned long long)loaded.items, (unsigned long long)live);
    FUZZ_CHECK(fuzz_store_check(t, FIXED_NOW_MS) == live, "reloaded store lost items");
    FUZZ_CHECK(cache_store_foreach(s, FIXED_NOW_MS, same_in_other, t) == 0, "walk failed");
    cache_store_free(t);

    /* A second load of the same file over what the first one stored. */
    rc = cache_snapshot_load(s, input_path, FIXED_NOW_MS, &info, err, sizeof err);
    FUZZ_CHECK(rc == 1, "a snapshot that loaded once does not load twice (%d): %s", rc, err);
    fuzz_store_check(s, FIXED_NOW_MS);
    cache_store_free(s);
}
