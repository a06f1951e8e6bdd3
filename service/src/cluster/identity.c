/* Identity backends: see identity.h. The checks every backend's answer gets, and the lease
 * keeper's store over a backend. */
#include "cluster/identity.h"

#include <stdio.h>
#include <string.h>

int sf_identity_claim(sf_identity *id, unsigned n, bool once, char *err, size_t errlen)
{
    if (n < 1 || n > SF_IDENTITY_MAX_SLOTS) {
        snprintf(err, errlen, "identity: %u slots asked for, 1..%d possible", n,
                 SF_IDENTITY_MAX_SLOTS);
        return -1;
    }
    sf_identity_slots s;
    memset(&s, 0, sizeof s);
    s.fence_ms = SF_IDENTITY_NO_FENCE;
    int rc = id->ops->claim(id->backend, n, once, &s, err, errlen);
    if (rc != 0)
        return rc == SF_IDENTITY_STOPPED || rc == SF_IDENTITY_TAKEN ? rc : -1;
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
    atomic_store(&id->claimed, true);
    return 0;
}

void sf_identity_claim_later(sf_identity *id, unsigned n)
{
    id->pending_n = n;
}

bool sf_identity_claimed(const sf_identity *id)
{
    return atomic_load(&((sf_identity *)id)->claimed);
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

static int report_lost(sf_identity *id, char *err, size_t errlen)
{
    const sf_identity_hooks *h = &id->hooks;
    if (h->stop_issuing)
        h->stop_issuing(h->arg);
    if (!id->lost_reported && h->lost) {
        id->lost_reported = true;
        h->lost(h->arg);
    }
    snprintf(err, errlen, "identity %s: the slots are someone else's now", id->ops->name);
    return -1;
}

static int store_persist(void *ctx, uint64_t want_end_ms, sf_lease_renewal *out, char *err,
                         size_t errlen)
{
    sf_identity *id = ctx;
    const sf_identity_hooks *h = &id->hooks;
    sf_identity_renewal r;
    if (id->pending_n && !atomic_load(&id->claimed)) { /* waiting (sf_identity_claim_later) */
        int rc = sf_identity_claim(id, id->pending_n, true, err, errlen);
        if (rc == SF_IDENTITY_TAKEN)
            return SF_LEASE_NOT_YET;
        if (rc != 0)
            return -1;
        if (!h->bind || h->bind(h->arg, &id->slots) != 0) {
            /* Cannot happen with the daemon's generators; the lease lapses at its TTL. */
            snprintf(err, errlen, "identity %s: slots claimed, generators not bound",
                     id->ops->name);
            return -1;
        }
        if (want_end_ms < id->slots.handoff_ms)
            want_end_ms = id->slots.handoff_ms; /* never store a floor below the previous one */
    }
    if (sf_identity_renew(id, want_end_ms, &r, err, errlen) != 0)
        return -1;
    if (r.lost)
        return report_lost(id, err, errlen);
    if (r.lapsed) {
        /* Stop first: the reclaim below talks to the network, and the slots are not ours. */
        if (h->stop_issuing)
            h->stop_issuing(h->arg);
        if (!id->ops->reclaim) {
            snprintf(err, errlen, "identity %s: the slots' lease lapsed", id->ops->name);
            return -1;
        }
        r = (sf_identity_renewal){.fence_ms = SF_IDENTITY_NO_FENCE};
        if (id->ops->reclaim(id->backend, want_end_ms, &r, err, errlen) != 0)
            return -1;
        if (r.lost || !r.reclaimed)
            return report_lost(id, err, errlen);
        if (!h->resume || h->resume(h->arg, r.handoff_ms) != 0) {
            snprintf(err, errlen, "identity %s: slots re-claimed, generators not resumed",
                     id->ops->name);
            return -1;
        }
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
