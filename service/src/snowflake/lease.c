#include "snowflake/lease.h"

#include "obs/log.h"
#include "util/counter.h"
#include "util/fsio.h"
#include "util/monowait.h"
#include "util/crc32.h"
#include "util/decimal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LEASE_MAGIC "snowflaked-lease 1 "

static uint32_t crc32_of(const char *s, size_t n)
{
    return crc32_update(0, s, n);
}

int sf_lease_read(const char *path, uint64_t *end_ms, char *err, size_t errlen)
{
    char buf[128];
    size_t n;
    int got = fsio_read_small(path, buf, sizeof buf, &n, err, errlen);
    if (got <= 0)
        return got;
    size_t magic = sizeof LEASE_MAGIC - 1;
    char *space = NULL;
    if ((size_t)n > magic && memcmp(buf, LEASE_MAGIC, magic) == 0)
        space = strchr(buf + magic, ' ');
    if (space) {
        uint64_t v;
        unsigned long crc = strtoul(space + 1, NULL, 16);
        bool digits = dec_parse_u64(buf + magic, (size_t)(space - buf) - magic, UINT64_MAX, &v);
        bool tail = strlen(space + 1) == 9 && space[9] == '\n';
        if (digits && tail && crc == crc32_of(buf, (size_t)(space - buf))) {
            *end_ms = v;
            return 1;
        }
    }
    snprintf(err, errlen,
             "%s: corrupt lease file (expected \"" LEASE_MAGIC "<ms> <crc32>\"); refusing to guess "
             "which IDs were issued before",
             path);
    return -1;
}

int sf_lease_write(const char *path, uint64_t end_ms, char *err, size_t errlen)
{
    char line[96];
    int len = snprintf(line, sizeof line, LEASE_MAGIC "%" PRIu64, end_ms);
    len += snprintf(line + len, sizeof line - (size_t)len, " %08" PRIx32 "\n",
                    crc32_of(line, (size_t)len));
    return fsio_write_atomic(path, line, (size_t)len, err, errlen);
}

uint64_t sf_lease_first_tick(const sf_layout *l, uint64_t end_ms)
{
    if (end_ms <= l->epoch_ms)
        return 0;
    return (end_ms - l->epoch_ms + l->unit_ms - 1) / l->unit_ms;
}

static clk_source *keeper_clock(const sf_lease_keeper *k)
{
    return k->gens[0]->clock;
}

/* How far past `now` the generators may issue: they run at most max_ahead ticks ahead. */
static uint64_t keeper_ahead_ms(const sf_lease_keeper *k)
{
    uint64_t ahead = 0;
    for (size_t i = 0; i < k->ngens; i++) {
        uint64_t a = sf_gen_max_ahead_ms(k->gens[i]);
        if (a > ahead)
            ahead = a;
    }
    return ahead;
}

/* The lease must cover every tick the generators may issue before the next renewal: up to
 * now + max_ahead + window. It is never lowered while running, and it is not pushed further out
 * than that either (a restart while the clock is behind an old lease keeps the old lease). */
static int renew(sf_lease_keeper *k, char *err, size_t errlen)
{
    uint64_t end = clk_now(keeper_clock(k)) + keeper_ahead_ms(k) + k->window_ms;
    if (end < k->end_ms)
        end = k->end_ms;
    sf_lease_renewal r;
    int rc = k->store.persist(k->store.ctx, end, &r, err, errlen);
    if (rc == SF_LEASE_NOT_YET)
        return rc;
    if (rc != 0) {
        counter_add(&k->failures, 1);
        return -1;
    }
    counter_add(&k->writes, 1);
    k->end_ms = r.stored_end_ms;
    uint64_t open = r.open_until_ms < r.stored_end_ms ? r.open_until_ms : r.stored_end_ms;
    for (size_t i = 0; i < k->ngens; i++)
        sf_gen_extend_lease(k->gens[i], sf_lease_first_tick(&k->gens[i]->layout, open));
    return 0;
}

/* The default store: the lease file at k->path. */
static int file_persist(void *ctx, uint64_t want_end_ms, sf_lease_renewal *out, char *err,
                        size_t errlen)
{
    if (sf_lease_write(ctx, want_end_ms, err, errlen) != 0)
        return -1;
    *out = (sf_lease_renewal){.stored_end_ms = want_end_ms, .open_until_ms = want_end_ms};
    return 0;
}

static int file_final(void *ctx, uint64_t end_ms, char *err, size_t errlen)
{
    return sf_lease_write(ctx, end_ms, err, errlen);
}

/* Renewals are due once a quarter of the window is used (the generators never get close): the
 * next one is timed from the start of the last one, so a slow store (etcd under load) does not
 * stretch the period. A failed one is retried after RETRY_MS (or the period, if shorter): the
 * generators' limit (and an identity's fence) keeps running out meanwhile. */
#define RETRY_MS 100

/* ms until the next renewal is due (0: now), at most `period`: due once the lease left beyond
 * `now` is down to `keep`. */
static uint64_t until_due(const sf_lease_keeper *k, uint64_t now, uint64_t keep, uint64_t period)
{
    uint64_t left = k->end_ms > now + keep ? k->end_ms - now - keep : 0;
    return left < period ? left : period;
}

static void *keeper_main(void *arg)
{
    sf_lease_keeper *k = arg;
    char err[512];
    uint64_t last_report = 0, period = k->window_ms / 4 ? k->window_ms / 4 : 1;
    uint64_t retry = period < RETRY_MS ? period : RETRY_MS, wait_ms = period;
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        struct timespec ts = monowait_deadline(wait_ms);
        pthread_cond_timedwait(&k->cv, &k->mu, &ts);
        if (k->stop)
            break;
        uint64_t now = clk_now(keeper_clock(k));
        uint64_t keep = keeper_ahead_ms(k) + (uint64_t)k->window_ms * 3 / 4;
        if ((wait_ms = until_due(k, now, keep, period)) > 0)
            continue; /* not due yet: sleep until it is */
        int rc = renew(k, err, sizeof err);
        if (rc < 0 && now - last_report >= 10000) {
            /* Rate-limited: the generator keeps issuing while the old lease lasts. */
            LOG_ERROR("lease renewal failed (%llu so far; IDs stop when the lease runs out): %s",
                      (unsigned long long)counter_get(&k->failures), err);
            last_report = now;
        }
        if (rc == 0) /* due again a quarter window after this one's start */
            wait_ms = until_due(k, clk_now(keeper_clock(k)), keep, period);
        else
            wait_ms = rc < 0 ? retry : period; /* SF_LEASE_NOT_YET: the next period */
        if (wait_ms == 0)
            wait_ms = 1;
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* k zeroed but for the path. The first persist happens here, before the thread exists. */
static int keeper_start(sf_lease_keeper *k, sf_gen *const *gens, size_t ngens,
                        const sf_lease_store *store, uint32_t window_ms, uint64_t prev_end_ms,
                        char *err, size_t errlen)
{
    k->store = *store;
    if (ngens == 0) {
        snprintf(err, errlen, "lease keeper needs at least one generator");
        return -1;
    }
    k->gens = gens;
    k->ngens = ngens;
    k->window_ms = window_ms;
    k->end_ms = prev_end_ms;
    if (renew(k, err, errlen) < 0)
        return -1;
    pthread_mutex_init(&k->mu, NULL);
    monowait_cond_init(&k->cv);
    int rc = pthread_create(&k->thread, NULL, keeper_main, k);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start lease thread: %s", strerror(rc));
        pthread_cond_destroy(&k->cv);
        pthread_mutex_destroy(&k->mu);
        return -1;
    }
    k->running = true;
    return 0;
}

int sf_lease_keeper_start(sf_lease_keeper *k, sf_gen *const *gens, size_t ngens, const char *path,
                          uint32_t window_ms, uint64_t prev_end_ms, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    if ((size_t)snprintf(k->path, sizeof k->path, "%s", path) >= sizeof k->path) {
        snprintf(err, errlen, "lease path too long");
        return -1;
    }
    sf_lease_store file = {.persist = file_persist, .final = file_final, .ctx = k->path};
    return keeper_start(k, gens, ngens, &file, window_ms, prev_end_ms, err, errlen);
}

int sf_lease_keeper_start_store(sf_lease_keeper *k, sf_gen *const *gens, size_t ngens,
                                const sf_lease_store *store, uint32_t window_ms,
                                uint64_t prev_end_ms, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    return keeper_start(k, gens, ngens, store, window_ms, prev_end_ms, err, errlen);
}

int sf_lease_keeper_stop(sf_lease_keeper *k, char *err, size_t errlen)
{
    if (!k->running)
        return 0;
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    k->running = false;
    /* Exact final promise: the start of the tick after the last ID, the latest over the
     * generators (each in its own tick space). It can only be below the lease persisted. */
    uint64_t end = 0;
    for (size_t i = 0; i < k->ngens; i++) {
        uint64_t ms = sf_layout_ms_of(&k->gens[i]->layout, sf_gen_seal(k->gens[i]));
        if (ms > end)
            end = ms;
    }
    if (k->store.final(k->store.ctx, end, err, errlen) != 0)
        return -1;
    k->end_ms = end;
    return 0;
}
