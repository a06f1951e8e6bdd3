/* Cache persistence: the snapshot file around the daemon's life (format in cache/snapshot.h).
 *
 * cache_persist_start loads the snapshot at `path` into the store (a missing file is an empty
 * cache; a damaged one is renamed to <path>.corrupt, logged, and the cache starts empty — never a
 * refusal to start, never a half-loaded cache) and, with interval_s > 0, starts a thread that
 * saves every interval_s seconds while the loops serve. Saving only takes each shard's lock long
 * enough to reference its items (cache_store_foreach), so the loops never wait for the disk.
 * cache_persist_stop ends that thread (a save in progress completes) and writes the final
 * snapshot; call it after the loops stopped, so the file holds every write they acknowledged.
 * Every outcome is logged; counters for /metrics come from cache_persist_get_stats.
 */
#ifndef SF_CACHE_PERSIST_H
#define SF_CACHE_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"

typedef struct cache_persist cache_persist;

typedef struct cache_persist_stats {
    uint64_t saves, failures;   /* snapshot writes, periodic and final */
    uint64_t last_ok_ms;        /* wall time of the last successful save, 0 = none */
    uint64_t last_items;        /* items in it */
    uint64_t last_bytes;        /* its size */
    uint64_t last_duration_us;  /* how long it took */
    uint64_t loaded_items;      /* restored at start */
    uint32_t interval_s;
} cache_persist_stats;

/* NULL with a reason in err when the snapshot exists but cannot be opened (permissions, I/O:
 * starting empty would overwrite it later) or the thread cannot be created. */
cache_persist *cache_persist_start(cache_store *s, const char *path, uint32_t interval_s,
                                   char *err, size_t errlen);
/* 0, or -1 if the final snapshot could not be written (the previous file is intact). Frees p. */
int cache_persist_stop(cache_persist *p);
void cache_persist_get_stats(cache_persist *p, cache_persist_stats *out);

#endif
