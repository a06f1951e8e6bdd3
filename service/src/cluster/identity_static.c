/* The static identity backend: see identity.h. */
#include "cluster/identity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obs/log.h"

typedef struct static_backend {
    sf_identity_static_config c;
    char origin[256];
    char path[4096];
    unsigned n; /* slots claimed */
} static_backend;

static int static_claim(void *b, unsigned n, bool once, sf_identity_slots *out, char *err,
                        size_t errlen)
{
    static_backend *s = b;
    (void)once; /* one round is all there is */
    if ((uint64_t)s->c.first_worker + n - 1 > UINT32_MAX) {
        snprintf(err, errlen, "worker ids %u + %u loops overflow", s->c.first_worker, n);
        return -1;
    }
    char why[512];
    uint64_t floor_ms = 0;
    int rc = sf_lease_read(s->path, &floor_ms, why, sizeof why);
    if (rc == 0) {
        LOG_INFO("no lease at %s: first start", s->path);
        floor_ms = 0;
    } else if (rc < 0) {
        if (!s->c.ignore_corrupt) {
            snprintf(err, errlen, "%s (start with --ignore-corrupt-lease to override)", why);
            return -1;
        }
        floor_ms = s->c.corrupt_floor_ms;
        LOG_WARN("%s; --ignore-corrupt-lease: issuing from %llu ms", why,
                 (unsigned long long)floor_ms);
    }
    out->datacenter = s->c.datacenter;
    for (unsigned i = 0; i < n; i++)
        out->worker[i] = s->c.first_worker + i;
    out->n = n;
    out->handoff_ms = floor_ms;
    out->fence_ms = SF_IDENTITY_NO_FENCE;
    s->n = n;
    return 0;
}

static int static_renew(void *b, uint64_t want_end_ms, sf_identity_renewal *out, char *err,
                        size_t errlen)
{
    static_backend *s = b;
    if (sf_lease_write(s->path, want_end_ms, err, errlen) != 0)
        return -1;
    *out = (sf_identity_renewal){.stored_end_ms = want_end_ms, .fence_ms = SF_IDENTITY_NO_FENCE};
    return 0;
}

static uint64_t static_fence_ms(void *b)
{
    (void)b;
    return SF_IDENTITY_NO_FENCE;
}

static int static_release(void *b, uint64_t final_end_ms, char *err, size_t errlen)
{
    static_backend *s = b;
    return sf_lease_write(s->path, final_end_ms, err, errlen);
}

static void static_metrics(void *b, prom_buf *p)
{
    static_backend *s = b;
    char labels[128];
    if (s->n == 0)
        return; /* nothing claimed yet */
    snprintf(labels, sizeof labels, "backend=\"static\",datacenter=\"%u\",workers=\"%u..%u\"",
             s->c.datacenter, s->c.first_worker, s->c.first_worker + s->n - 1);
    prom_family(p, "snowflaked_identity_info", "gauge",
                "Where this instance's worker ids come from, and which it holds.");
    prom_u64(p, "snowflaked_identity_info", labels, 1);
}

static void static_destroy(void *b)
{
    free(b);
}

static const sf_identity_ops static_ops = {
    .name = "static",
    .claim = static_claim,
    .renew = static_renew,
    .fence_ms = static_fence_ms,
    .release = static_release,
    .metrics = static_metrics,
    .destroy = static_destroy,
};

int sf_identity_static_init(sf_identity *id, const sf_identity_static_config *c, char *err,
                            size_t errlen)
{
    memset(id, 0, sizeof *id);
    static_backend *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->c = *c;
    snprintf(s->origin, sizeof s->origin, "%s", c->origin ? c->origin : "config");
    s->c.origin = s->origin;
    if (!c->lease_path ||
        (size_t)snprintf(s->path, sizeof s->path, "%s", c->lease_path) >= sizeof s->path) {
        snprintf(err, errlen, "identity static: lease path missing or too long");
        free(s);
        return -1;
    }
    s->c.lease_path = s->path;
    id->ops = &static_ops;
    id->backend = s;
    return 0;
}
