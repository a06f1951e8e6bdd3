/* Items (store.h: "Items"): the accessors, making one (its class, its memory, header and key) and
 * the last release. The layout and the word of references and expiry are in store_int.h. */
#include "cache/store_int.h"

bool cache_key_valid(const char *key, size_t klen)
{
    return key_valid(key, klen);
}

void cache_item_release(cache_item *it)
{
    if (!it || !ref_drop(it))
        return;
    cache_shard *sh = item_shard(item_store(it), it);
    lock(sh);
    item_free_locked(sh, it);
    unlock(sh);
}

const char *cache_item_key(const cache_item *it)
{
    return it->data;
}
size_t cache_item_klen(const cache_item *it)
{
    return it->klen;
}
const char *cache_item_value(const cache_item *it)
{
    return it->data + it->klen + it->ctlen;
}
size_t cache_item_vlen(const cache_item *it)
{
    return it->vlen;
}
uint32_t cache_item_flags(const cache_item *it)
{
    return item_flags(it);
}
uint64_t cache_item_cas(const cache_item *it)
{
    return it->cas;
}
size_t cache_item_size(const cache_item *it)
{
    return item_bytes(item_store(it), it);
}
bool cache_item_key_binary(const cache_item *it)
{
    return it->key_binary;
}
char *cache_item_value_mut(cache_item *it)
{
    return it->data + it->klen + it->ctlen;
}

uint64_t cache_item_expiry(const cache_item *it)
{
    return item_expiry(it);
}

const char *cache_item_ctype(const cache_item *it, size_t *len)
{
    *len = it->ctlen;
    return it->data + it->klen;
}

/* An item of these sizes can never be stored (cache_item_new's CACHE_TOO_LARGE). */
static bool too_large(const cache_store *s, size_t klen, size_t ctlen, size_t vlen, uint32_t flags)
{
    size_t raw = raw_size(klen, ctlen, vlen, flags);
    return vlen > s->max_item || class_bytes(s, class_of(s, raw), raw) > memory_limit(s);
}

/* An unlinked item with one reference, header and key filled; arguments already validated. */
cache_item *item_make(cache_store *s, uint64_t h, const char *key, size_t klen, size_t vlen,
                      uint32_t flags, uint64_t expiry_ms, const char *ctype, size_t ctlen, int *err)
{
    if (too_large(s, klen, ctlen, vlen, flags)) {
        *err = CACHE_TOO_LARGE;
        return NULL;
    }
    size_t raw = raw_size(klen, ctlen, vlen, flags);
    unsigned cls = class_of(s, raw);
    cache_shard *sh = shard_for(s, h);
    cache_item *it = item_alloc(sh, cls, raw);
    if (!it) {
        *err = CACHE_NO_MEMORY;
        return NULL;
    }
    memset(it, 0, sizeof *it);
    atomic_init(&it->ref_exp, REF_ONE | clamp_expiry(expiry_ms));
    it->vlen = (uint32_t)vlen & 0x7fffffffu;
    it->klen = (uint8_t)klen;
    it->ctlen = (uint8_t)ctlen;
    it->cls = (uint8_t)cls;
    memcpy(it->data, key, klen);
    if (ctlen)
        memcpy(it->data + klen, ctype, ctlen);
    if (flags) {
        it->has_flags = 1;
        memcpy(it->data + klen + ctlen + vlen, &flags, sizeof flags);
    }
    *err = CACHE_OK;
    return it;
}

/* cache_item_new_ex's argument checks: CACHE_OK, CACHE_BAD_KEY or CACHE_BAD_ARG. */
static inline int item_args(const char *key, size_t klen, const char *ctype, size_t ctype_len,
                            unsigned marks)
{
    bool any = marks & (CACHE_ITEM_KEY_BINARY | CACHE_ITEM_KEY_ANY);
    if (any ? klen == 0 || klen > CACHE_KEY_MAX : !key_valid(key, klen))
        return CACHE_BAD_KEY;
    if (ctype_len > CACHE_CTYPE_MAX || (ctype_len && !ctype))
        return CACHE_BAD_ARG;
    return CACHE_OK;
}

int cache_item_check(const cache_store *s, const char *key, size_t klen, size_t vlen,
                     uint32_t flags, const char *ctype, size_t ctype_len, unsigned marks)
{
    int e = item_args(key, klen, ctype, ctype_len, marks);
    if (e == CACHE_OK && too_large(s, klen, ctype_len, vlen, flags))
        e = CACHE_TOO_LARGE;
    return e;
}

cache_item *cache_item_new_ex(cache_store *s, const char *key, size_t klen, size_t vlen,
                              uint32_t flags, uint64_t expiry_ms, const char *ctype,
                              size_t ctype_len, unsigned marks, int *err)
{
    bool binary = marks & CACHE_ITEM_KEY_BINARY;
    if ((*err = item_args(key, klen, ctype, ctype_len, marks)) != CACHE_OK)
        return NULL;
    cache_item *it = item_make(s, hash_key(s->seed, key, klen), key, klen, vlen, flags, expiry_ms,
                               ctype, ctype_len, err);
    if (it) {
        it->key_binary = binary;
        it->token_sent = (marks & CACHE_ITEM_TOKEN_SENT) != 0;
    }
    return it;
}

cache_item *cache_item_new(cache_store *s, const char *key, size_t klen, size_t vlen,
                           uint32_t flags, uint64_t expiry_ms, const char *ctype, size_t ctype_len,
                           int *err)
{
    return cache_item_new_ex(s, key, klen, vlen, flags, expiry_ms, ctype, ctype_len, 0, err);
}
