#include "cache/persist.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/snapshot.h"
#include "obs/log.h"
#include "util/clock.h"
#include "util/monowait.h"

#define PATH_CAP 4096

struct cache_persist {
    cache_store *store;
    char path[PATH_CAP];
    uint32_t interval_s;
    bool thread_started, stopping;
    pthread_t thread;
    pthread_mutex_t mu; /* guards stopping and stats */
    pthread_cond_t wake;
    pthread_mutex_t save_mu; /* one save at a time (snapshot.h's rule), whoever calls */
    cache_persist_stats stats;
};

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* 0, or -1 when the file exists but cannot be read: starting empty would overwrite it at the
 * next save, so the caller refuses to start instead. */
static int load(cache_persist *p, char *errout, size_t errlen)
{
    char err[PATH_CAP + 256];
    cache_snapshot_info info;
    uint64_t t0 = mono_us();
    int rc = cache_snapshot_load(p->store, p->path, clk_now(clk_system()), &info, err,
                                 sizeof err);
    if (rc == 1) {
        p->stats.loaded_items = info.items;
        LOG_INFO("cache: loaded %llu items (%llu value bytes) from %s in %.0f ms",
                 (unsigned long long)info.items, (unsigned long long)info.bytes, p->path,
                 (double)(mono_us() - t0) / 1e3);
    } else if (rc == -2) {
        snprintf(errout, errlen, "cache: %s (fix it, or move the file away to start empty)", err);
        return -1;
    } else if (rc < 0) {
        /* A damaged snapshot cannot be trusted: kept aside for inspection, start empty. */
        char aside[PATH_CAP + 16];
        snprintf(aside, sizeof aside, "%s.corrupt", p->path);
        if (rename(p->path, aside) != 0)
            LOG_ERROR("cache: %s (could not move it to %s: %s)", err, aside, strerror(errno));
        else
            LOG_ERROR("cache: %s (moved to %s)", err, aside);
    }
    return 0;
}

static int save(cache_persist *p, const char *why)
{
    char err[PATH_CAP + 256];
    cache_snapshot_info info;
    pthread_mutex_lock(&p->save_mu);
    uint64_t t0 = mono_us();
    uint64_t now = clk_now(clk_system());
    int rc = cache_snapshot_save(p->store, p->path, now, &info, err, sizeof err);
    uint64_t took = mono_us() - t0;
    pthread_mutex_unlock(&p->save_mu);
    pthread_mutex_lock(&p->mu);
    if (rc == 0) {
        p->stats.saves++;
        p->stats.last_ok_ms = now;
        p->stats.last_items = info.items;
        p->stats.last_bytes = info.bytes;
        p->stats.last_duration_us = took;
    } else {
        p->stats.failures++;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc != 0)
        LOG_ERROR("cache: %s snapshot not written: %s", why, err);
    else
        LOG_INFO("cache: %s snapshot: %llu items (%llu bytes) to %s in %.0f ms", why,
                 (unsigned long long)info.items, (unsigned long long)info.bytes, p->path,
                 (double)took / 1e3);
    return rc;
}

static void *periodic(void *arg)
{
    cache_persist *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stopping) {
        struct timespec until = monowait_deadline((uint64_t)p->interval_s * 1000u);
        while (!p->stopping && pthread_cond_timedwait(&p->wake, &p->mu, &until) != ETIMEDOUT) {
        }
        if (p->stopping)
            break;
        pthread_mutex_unlock(&p->mu);
        save(p, "periodic");
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cache_persist *cache_persist_start(cache_store *s, const char *path, uint32_t interval_s,
                                   char *err, size_t errlen)
{
    cache_persist *p = calloc(1, sizeof *p);
    if (!p || strlen(path) >= sizeof p->path) {
        snprintf(err, errlen, "cache: %s", p ? "snapshot path too long" : "out of memory");
        free(p);
        return NULL;
    }
    p->store = s;
    memcpy(p->path, path, strlen(path) + 1);
    p->interval_s = interval_s;
    p->stats.interval_s = interval_s;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->save_mu, NULL);
    monowait_cond_init(&p->wake);
    if (load(p, err, errlen) != 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
        pthread_mutex_destroy(&p->save_mu);
        free(p);
        return NULL;
    }
    if (interval_s > 0) {
        int rc = pthread_create(&p->thread, NULL, periodic, p);
        if (rc != 0) {
            snprintf(err, errlen, "cache: snapshot thread: %s", strerror(rc));
            pthread_cond_destroy(&p->wake);
            pthread_mutex_destroy(&p->mu);
            pthread_mutex_destroy(&p->save_mu);
            free(p);
            return NULL;
        }
        p->thread_started = true;
    }
    return p;
}

int cache_persist_stop(cache_persist *p)
{
    if (!p)
        return 0;
    if (p->thread_started) {
        pthread_mutex_lock(&p->mu);
        p->stopping = true;
        pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    int rc = save(p, "final");
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->save_mu);
    free(p);
    return rc;
}

void cache_persist_get_stats(cache_persist *p, cache_persist_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    pthread_mutex_unlock(&p->mu);
}
