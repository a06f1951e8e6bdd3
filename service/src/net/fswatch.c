/* Directory watch with a debounce (fswatch.h). */
#include "net/fswatch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

struct net_fswatch {
    uv_loop_t loop;
    uv_fs_event_t ev[NET_FSWATCH_MAX_DIRS];
    size_t nev;
    uv_timer_t debounce;
    uv_async_t stop;
    unsigned debounce_ms;
    void (*cb)(void *arg);
    void *arg;
    pthread_t thread;
};

static void fired(uv_timer_t *t)
{
    net_fswatch *w = t->data;
    w->cb(w->arg);
}

/* Any event in a watched directory (re)starts the debounce: the call comes once the burst is
 * over. Which file changed does not matter: the callback reads all of them again. */
static void changed(uv_fs_event_t *h, const char *name, int events, int status)
{
    (void)name;
    (void)events;
    (void)status;
    net_fswatch *w = h->data;
    uv_timer_start(&w->debounce, fired, w->debounce_ms, 0);
}

static void close_one(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void stopping(uv_async_t *a)
{
    uv_walk(a->loop, close_one, NULL);
}

static void *run(void *arg)
{
    net_fswatch *w = arg;
    uv_run(&w->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void close_all(net_fswatch *w)
{
    uv_walk(&w->loop, close_one, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    free(w);
}

net_fswatch *net_fswatch_start(const char *const *dirs, size_t ndirs, unsigned debounce_ms,
                               void (*cb)(void *arg), void *arg, char *err, size_t errlen)
{
    net_fswatch *w = calloc(1, sizeof *w);
    if (!w || uv_loop_init(&w->loop) != 0) {
        free(w);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->debounce_ms = debounce_ms;
    w->cb = cb;
    w->arg = arg;
    uv_timer_init(&w->loop, &w->debounce);
    w->debounce.data = w;
    for (size_t i = 0; i < ndirs; i++) {
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            seen |= strcmp(dirs[i], dirs[j]) == 0;
        if (seen)
            continue;
        if (w->nev == NET_FSWATCH_MAX_DIRS) {
            snprintf(err, errlen, "more than %d directories to watch", NET_FSWATCH_MAX_DIRS);
            close_all(w);
            return NULL;
        }
        uv_fs_event_t *h = &w->ev[w->nev++];
        uv_fs_event_init(&w->loop, h);
        h->data = w;
        int rc = uv_fs_event_start(h, changed, dirs[i], 0);
        if (rc != 0) {
            snprintf(err, errlen, "%s: %s", dirs[i], uv_strerror(rc));
            close_all(w);
            return NULL;
        }
    }
    if (uv_async_init(&w->loop, &w->stop, stopping) != 0 ||
        pthread_create(&w->thread, NULL, run, w) != 0) {
        snprintf(err, errlen, "cannot start the watch thread");
        close_all(w);
        return NULL;
    }
    return w;
}

void net_fswatch_stop(net_fswatch *w)
{
    if (!w)
        return;
    uv_async_send(&w->stop);
    pthread_join(w->thread, NULL);
    uv_loop_close(&w->loop);
    free(w);
}
