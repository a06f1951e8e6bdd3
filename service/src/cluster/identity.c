/* Identity backends: see identity.h. The checks every backend's answer gets, and the lease
 * keeper's store over a backend. */
#include "cluster/identity.h"

#include <stdio.h>
#include <string.h>

int sf_identity_claim(sf_identity *id, unsigned n, char *err, size_t errlen)
{
    if (n < 1 || n > SF_IDENTITY_MAX_SLOTS) {
        snprintf(err, errlen, "identity: %u slots asked for, 1..%d possible", n,
                 SF_IDENTITY_MAX_SLOTS);
        return -1;
    }
    sf_identity_slots s;
    memset(&s, 0, sizeof s);
    s.fence_ms = SF_IDENTITY_NO_FENCE;
    int rc = id->ops->claim(id->backend, n, &s, err, errlen);
    if (rc != 0)
        return rc == SF_IDENTITY_STOPPED ? rc : -1;
    /* A backend bug here would mean duplicate IDs: refuse rather than trust. */
    if (s.n != n) {
        snprintf(err, errlen, "identity %s: claimed %u slots, %u asked for", id->ops->name, s.n, n);
        return -1;
    }
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = i + 1; j < n; j++)
            if (s.worker[i] == s.worker[j]) {
                snprintf(err, errlen, "identity %s: worker %u claimed twice", id->ops->name,
                         s.worker[i]);
                return -1;
            }
    id->slots = s;
    id->claimed = true;
    return 0;
}

int sf_identity_renew(sf_identity *id, uint64_t want_end_ms, sf_identity_renewal *out, char *err,
                      size_t errlen)
{
    *out = (sf_identity_renewal){.fence_ms = SF_IDENTITY_NO_FENCE};
    return id->ops->renew(id->backend, want_end_ms, out, err, errlen);
}

uint64_t sf_identity_fence_ms(sf_identity *id)
{
    return id->ops->fence_ms ? id->ops->fence_ms(id->backend) : SF_IDENTITY_NO_FENCE;
}

int sf_identity_release(sf_identity *id, uint64_t final_end_ms, char *err, size_t errlen)
{
    return id->ops->release(id->backend, final_end_ms, err, errlen);
}

const char *sf_identity_not_ready(sf_identity *id, char *buf, size_t len)
{
    if (!id || !id->ops || !id->ops->not_ready)
        return NULL;
    return id->ops->not_ready(id->backend, buf, len);
}

void sf_identity_metrics(sf_identity *id, prom_buf *p)
{
    if (id->ops && id->ops->metrics)
        id->ops->metrics(id->backend, p);
}

void sf_identity_free(sf_identity *id)
{
    if (id->ops && id->ops->destroy)
        id->ops->destroy(id->backend);
    memset(id, 0, sizeof *id);
}

static int store_persist(void *ctx, uint64_t want_end_ms, sf_lease_renewal *out, char *err,
                         size_t errlen)
{
    sf_identity *id = ctx;
    sf_identity_renewal r;
    if (sf_identity_renew(id, want_end_ms, &r, err, errlen) != 0)
        return -1;
    if (r.lost) {
        if (!id->lost_reported && id->on_lost) {
            id->lost_reported = true;
            id->on_lost(id->on_lost_arg);
        }
        snprintf(err, errlen, "identity %s: the slots are no longer ours", id->ops->name);
        return -1;
    }
    out->stored_end_ms = r.stored_end_ms;
    out->open_until_ms = r.fence_ms < r.stored_end_ms ? r.fence_ms : r.stored_end_ms;
    return 0;
}

static int store_final(void *ctx, uint64_t end_ms, char *err, size_t errlen)
{
    return sf_identity_release(ctx, end_ms, err, errlen);
}

void sf_identity_lease_store(sf_identity *id, sf_lease_store *out)
{
    *out = (sf_lease_store){.persist = store_persist, .final = store_final, .ctx = id};
}
