/* Cache snapshot: the store's live items on disk, so a graceful restart loses nothing.
 *
 * Written at shutdown (after the loops stopped), and periodically if configured (from a thread
 * of its own while the loops run: cache_store_foreach never holds a shard lock during I/O), to
 * <path>.tmp, fsynced, renamed over <path>, and the directory fsynced (util/fsio.h): a crash or a
 * full disk leaves the previous snapshot intact and no tmp file behind. One save at a time (the
 * caller's rule). Read at start before any listener opens. Format (little-endian): "SFCACHE1", u32 version (3), u32 0, u64
 * saved at (ms); records {u8 klen, u8 ctlen | 0x80 for a key given in base64 (memcached's meta
 * b: any bytes), u32 vlen, u32 flags, u64 expiry_ms, u64 cas, key, ctype, value} (version 2,
 * still read, had no base64 keys; version 1 had no cas either); trailer "\\0SFEND\\0\\0" (a zero key
 * length, which no record has), u64 count, u32 CRC-32 of everything before the trailer, u32 0.
 * Items are reloaded least recent first, so the LRU order survives, with their CAS values
 * (ETags), and every CAS issued after the load is larger. Expired items are skipped on both
 * sides. A corrupt or
 * truncated file loads nothing (anything read before the damage is flushed again) and is reported;
 * the daemon then starts empty.
 */
#ifndef SF_CACHE_SNAPSHOT_H
#define SF_CACHE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"

#define CACHE_SNAPSHOT_FILE "cache.snapshot"

typedef struct cache_snapshot_info {
    uint64_t items, bytes; /* saved: written; loaded: stored (expired and too-large records skipped) */
} cache_snapshot_info;

/* 0, or -1 with a reason in err (nothing replaced on failure). */
int cache_snapshot_save(cache_store *s, const char *path, uint64_t now_ms,
                        cache_snapshot_info *info, char *err, size_t errlen);
/* 1 loaded, 0 no file, -1 corrupt or truncated (err says why; the store holds nothing from it),
 * -2 the file exists but cannot be opened (permissions, I/O: nothing was read). */
int cache_snapshot_load(cache_store *s, const char *path, uint64_t now_ms,
                        cache_snapshot_info *info, char *err, size_t errlen);

#endif
