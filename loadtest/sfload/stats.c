/* Per-thread figures (see stats.h). */
#include "stats.h"

#include <string.h>

void stats_init(sl_stats *s)
{
    memset(s, 0, sizeof *s);
    hist_init(&s->latency);
}

void stats_merge(sl_stats *d, const sl_stats *s)
{
    d->requests += s->requests;
    d->responses += s->responses;
    d->ok += s->ok;
    for (int i = 0; i < ERR_COUNT; i++)
        d->errors[i] += s->errors[i];
    d->refused += s->refused;
    for (int i = 0; i < ERR_COUNT; i++)
        d->faults[i] += s->faults[i];
    for (int i = 0; i < SL_STATS_TARGETS; i++) {
        sl_tstats *dt = &d->target[i];
        const sl_tstats *st = &s->target[i];
        dt->requests += st->requests;
        dt->ok += st->ok;
        dt->status_503 += st->status_503;
        dt->errors += st->errors;
        dt->faults += st->faults;
        dt->ids += st->ids;
    }
    d->bytes_in += s->bytes_in;
    d->bytes_out += s->bytes_out;
    d->connects += s->connects;
    d->mc_gets += s->mc_gets;
    d->mc_hits += s->mc_hits;
    d->mc_sets += s->mc_sets;
    d->tls_full += s->tls_full;
    d->tls_resumed += s->tls_resumed;
    d->tls_failures += s->tls_failures;
    if (!d->tls_version[0])
        memcpy(d->tls_version, s->tls_version, sizeof d->tls_version);
    if (!d->tls_cipher[0])
        memcpy(d->tls_cipher, s->tls_cipher, sizeof d->tls_cipher);
    if (!d->tls_error[0])
        memcpy(d->tls_error, s->tls_error, sizeof d->tls_error);
    if (s->end_ns > d->end_ns)
        d->end_ns = s->end_ns;
    hist_merge(&d->latency, &s->latency);
}

uint64_t stats_faults(const sl_stats *s)
{
    uint64_t n = 0;
    for (int i = 0; i < ERR_COUNT; i++)
        n += s->faults[i];
    return n;
}

uint64_t stats_errors(const sl_stats *s)
{
    uint64_t n = 0;
    for (int i = 0; i < ERR_COUNT; i++)
        n += s->errors[i];
    return n;
}

const char *stats_err_name(sl_err e)
{
    static const char *const names[ERR_COUNT] = {"connect",    "read",       "write",
                                                 "timeout",    "status_3xx", "status_4xx",
                                                 "status_5xx", "parse",      "mismatch"};
    return (unsigned)e < ERR_COUNT ? names[e] : "?";
}
