/* Helpers shared by the cache store's unit tests (test_store*.c): a store, storing and reading
 * string values, and a store sized for a number of 100-byte items. */
#ifndef SF_TEST_STORE_H
#define SF_TEST_STORE_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cache/store.h"

#define MiB (UINT64_C(1) << 20)

static inline cache_store *mk(uint64_t mem, unsigned shards, cache_lock_kind lk)
{
    cache_store_config c = {.max_memory_bytes = mem, .shards = shards, .lock = lk, .seed = 42};
    char err[128];
    cache_store *s = cache_store_new(&c, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    return s;
}

static inline int put_full(cache_store *s, const char *key, const char *val, uint32_t flags,
                           uint64_t exp, cache_mode mode, uint64_t cas_in, uint64_t *cas_out,
                           uint64_t now)
{
    int err;
    size_t vlen = strlen(val);
    cache_item *it = cache_item_new(s, key, strlen(key), vlen, flags, exp, NULL, 0, &err);
    if (!it)
        return err;
    memcpy(cache_item_value_mut(it), val, vlen);
    return cache_store_item(s, it, mode, cas_in, cas_out, now);
}

static inline int put(cache_store *s, const char *key, const char *val, cache_mode mode,
                      uint64_t now)
{
    return put_full(s, key, val, 0, 0, mode, 0, NULL, now);
}

/* The value as a string ("" if absent: tests never store empty values where this is used). */
static inline const char *val(cache_store *s, const char *key, uint64_t now)
{
    static char buf[4096];
    cache_item *it = cache_get(s, key, strlen(key), now);
    if (!it)
        return "";
    size_t n = cache_item_vlen(it);
    ck_assert_uint_lt(n, sizeof buf);
    memcpy(buf, cache_item_value(it), n);
    buf[n] = 0;
    cache_item_release(it);
    return buf;
}

static inline bool has(cache_store *s, const char *key, uint64_t now)
{
    cache_item *it = cache_get(s, key, strlen(key), now);
    cache_item_release(it);
    return it != NULL;
}

static inline uint64_t cas_of(cache_store *s, const char *key, uint64_t now)
{
    cache_item *it = cache_get(s, key, strlen(key), now);
    ck_assert_ptr_nonnull(it);
    uint64_t c = cache_item_cas(it);
    cache_item_release(it);
    return c;
}

static inline cache_stats stats(cache_store *s)
{
    cache_stats st;
    cache_store_stats(s, &st);
    return st;
}

/* A store whose limit holds exactly n items of 1-byte keys and 100-byte values. */
static inline cache_store *mk_items(unsigned n, unsigned shards, size_t *item_size)
{
    cache_store *tmp = mk(MiB, 1, CACHE_LOCK_MUTEX);
    *item_size = cache_store_item_size(tmp, 2, 0, 100);
    cache_store_free(tmp);
    return mk(*item_size * n, shards, CACHE_LOCK_MUTEX);
}

static inline int put100(cache_store *s, const char *key, uint64_t now)
{
    char v[101];
    memset(v, 'v', 100);
    v[100] = 0;
    return put(s, key, v, CACHE_MODE_SET, now);
}

#endif
