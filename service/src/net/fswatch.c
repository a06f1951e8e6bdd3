/* Directory watch with a debounce (fswatch.h). */
#include "net/fswatch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

typedef struct watched {
    char *path;
    const char *base; /* the last component of path: libuv's name for events on the directory */
    uv_fs_event_t ev;
    bool armed; /* ev watches the directory identified by dev/ino, now at path */
    bool gone;  /* reported gone (dir_state), not yet back */
    dev_t dev;
    ino_t ino;
} watched;

struct net_fswatch {
    uv_loop_t loop;
    watched dirs[NET_FSWATCH_MAX_DIRS];
    size_t ndirs;
    uv_timer_t debounce;
    uv_timer_t recheck;
    uv_async_t stop;
    net_fswatch_opts o;
    pthread_t thread;
};

static void fired(uv_timer_t *t)
{
    net_fswatch *w = t->data;
    for (size_t i = 0; i < w->ndirs; i++)
        if (!w->dirs[i].armed)
            return; /* its files are gone: its return restarts the debounce */
    w->o.changed(w->o.arg);
}

static void changed(uv_fs_event_t *h, const char *name, int events, int status);

static void note(net_fswatch *w, watched *d, bool present)
{
    if (w->o.dir_state)
        w->o.dir_state(w->o.arg, d->path, present);
}

/* Starts the watch on whatever directory is at d->path now and remembers which one it is. */
static int arm(watched *d)
{
    int rc = uv_fs_event_start(&d->ev, changed, d->path, 0);
    if (rc != 0)
        return rc;
    struct stat st;
    bool missing = stat(d->path, &st) != 0;
    if (missing || !S_ISDIR(st.st_mode)) { /* gone again already, or not a directory */
        uv_fs_event_stop(&d->ev);
        return missing ? UV_ENOENT : UV_ENOTDIR;
    }
    d->armed = true;
    d->dev = st.st_dev;
    d->ino = st.st_ino;
    return 0;
}

/* Is the watched directory still the one at its path? If not, the watch (bound to the old
 * inode, or dead with it) is dropped; a directory at the path is watched again, and its arrival
 * counts as a change. `renewed`: the directory itself had an event (removed, moved): the watch is
 * renewed even when the path shows the same device and inode, since a file system may give a
 * directory created right after a removal the freed inode's number; only a different or missing
 * directory is reported. */
static void check(net_fswatch *w, watched *d, bool renewed)
{
    struct stat st;
    bool there = stat(d->path, &st) == 0 && S_ISDIR(st.st_mode);
    bool same = d->armed && there && st.st_dev == d->dev && st.st_ino == d->ino;
    if (same && !renewed)
        return;
    if (d->armed) {
        uv_fs_event_stop(&d->ev);
        d->armed = false;
        if (!same && !d->gone) {
            d->gone = true;
            note(w, d, false);
        }
    }
    if (there && arm(d) == 0) {
        if (d->gone) {
            d->gone = false;
            note(w, d, true);
        }
        uv_timer_start(&w->debounce, fired, w->o.debounce_ms, 0);
    }
}

/* Any event in a watched directory (re)starts the debounce: the call comes once the burst is
 * over. Which file changed does not matter: the callback reads all of them again. An event on
 * the directory itself (libuv names it with the directory's last component) renews the watch. */
static void changed(uv_fs_event_t *h, const char *name, int events, int status)
{
    (void)events;
    (void)status;
    net_fswatch *w = h->loop->data;
    watched *d = h->data;
    check(w, d, name && strcmp(name, d->base) == 0);
    uv_timer_start(&w->debounce, fired, w->o.debounce_ms, 0);
}

static void recheck(uv_timer_t *t)
{
    net_fswatch *w = t->data;
    for (size_t i = 0; i < w->ndirs; i++)
        check(w, &w->dirs[i], false);
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

static void free_watch(net_fswatch *w)
{
    for (size_t i = 0; i < w->ndirs; i++)
        free(w->dirs[i].path);
    free(w);
}

static void close_all(net_fswatch *w)
{
    uv_walk(&w->loop, close_one, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    free_watch(w);
}

net_fswatch *net_fswatch_start(const char *const *dirs, size_t ndirs, const net_fswatch_opts *o,
                               char *err, size_t errlen)
{
    net_fswatch *w = calloc(1, sizeof *w);
    if (!w || uv_loop_init(&w->loop) != 0) {
        free(w);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->loop.data = w;
    w->o = *o;
    if (!w->o.recheck_ms)
        w->o.recheck_ms = NET_FSWATCH_RECHECK_MS;
    uv_timer_init(&w->loop, &w->debounce);
    w->debounce.data = w;
    uv_timer_init(&w->loop, &w->recheck);
    w->recheck.data = w;
    for (size_t i = 0; i < ndirs; i++) {
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            seen |= strcmp(dirs[i], dirs[j]) == 0;
        if (seen)
            continue;
        if (w->ndirs == NET_FSWATCH_MAX_DIRS) {
            snprintf(err, errlen, "more than %d directories to watch", NET_FSWATCH_MAX_DIRS);
            close_all(w);
            return NULL;
        }
        watched *d = &w->dirs[w->ndirs++];
        uv_fs_event_init(&w->loop, &d->ev);
        d->ev.data = d;
        d->path = strdup(dirs[i]);
        if (d->path) {
            const char *slash = strrchr(d->path, '/');
            d->base = slash && slash[1] ? slash + 1 : d->path;
        }
        int rc = d->path ? arm(d) : UV_ENOMEM;
        if (rc != 0) {
            snprintf(err, errlen, "%s: %s", dirs[i], uv_strerror(rc));
            close_all(w);
            return NULL;
        }
    }
    uv_timer_start(&w->recheck, recheck, w->o.recheck_ms, w->o.recheck_ms);
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
    free_watch(w);
}
