/* The hash table (memcached: assoc.c): one chained table per shard, doubled at load factor 1 by
 * an incremental resize (store.h: "Shape"). The lookups (find_link, find_live) and the bit of a
 * resize every operation pays (migrate_step) are inline in store_int.h; here is the rest:
 * allocating, growing and freeing bucket arrays, and the table's introspection. */
#include "cache/store_int.h"

#include <sys/mman.h>

#define INITIAL_BUCKETS 16
#define TABLE_MMAP_MIN  4096u /* table_new */

/* Bucket arrays of TABLE_MMAP_MIN bytes and more are mapped on their own, so the one a resize
 * leaves behind goes back to the kernel: from malloc's heap it would stay in the RSS. */
static cache_item **table_new(size_t n)
{
    if (n * sizeof(cache_item *) < TABLE_MMAP_MIN)
        return calloc(n, sizeof(cache_item *));
    void *p = mmap(NULL, n * sizeof(cache_item *), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void table_free(cache_item **t, size_t n)
{
    if (n * sizeof(cache_item *) < TABLE_MMAP_MIN)
        free(t);
    else if (t)
        munmap(t, n * sizeof(cache_item *));
}

/* A shard's first table (sh->store set). 0, or -1 out of memory. */
int table_init(cache_shard *sh)
{
    sh->buckets = table_new(INITIAL_BUCKETS);
    if (!sh->buckets)
        return -1;
    atomic_fetch_add_explicit(&sh->store->mallocs, 1, memory_order_relaxed);
    sh->mask = INITIAL_BUCKETS - 1;
    return 0;
}

/* Both tables of a shard (the items are the caller's). */
void table_destroy(cache_shard *sh)
{
    table_free(sh->buckets, sh->mask + 1);
    if (sh->old)
        table_free(sh->old, sh->old_mask + 1);
}

/* Starts a resize (maybe_grow: the table is over load factor 1 and none is under way). */
void table_grow(cache_shard *sh)
{
    size_t n = (sh->mask + 1) * 2;
    cache_item **b = table_new(n);
    if (!b)
        return; /* longer chains for now; retried on the next insert */
    atomic_fetch_add_explicit(&sh->store->mallocs, 1, memory_order_relaxed);
    sh->old = sh->buckets;
    sh->old_mask = sh->mask;
    sh->migrate_pos = 0;
    sh->buckets = b;
    sh->mask = n - 1;
    sh->stats.resizes++;
}

unsigned cache_store_shard_of(const cache_store *s, const char *key, size_t klen)
{
    return (unsigned)(hash_key(s->seed, key, klen) & (s->nshards - 1));
}

unsigned cache_store_shards(const cache_store *s)
{
    return s->nshards;
}

void cache_store_table_info(cache_store *s, unsigned shard, cache_table_info *out)
{
    cache_shard *sh = &s->shards[shard & (s->nshards - 1)];
    lock(sh);
    out->items = sh->stats.curr_items;
    out->buckets = sh->mask + 1;
    out->old_buckets = sh->old ? sh->old_mask + 1 : 0;
    out->migrated = sh->old ? sh->migrate_pos : 0;
    unlock(sh);
}
