/* Directory watch with a debounce: a thread of its own runs a libuv loop with one uv_fs_event_t
 * per directory (inotify on Linux) and calls back once `debounce_ms` after the last change in
 * any of them, so a burst (a cert and a key written one after the other, kubelet's swap of a
 * Secret volume's `..data` symlink) is one call.
 *
 * A directory, not a file, is watched: an editor or kubelet replaces files by rename, which a
 * watch on the file itself would lose with the old inode.
 *
 * Threads: net_fswatch_start / net_fswatch_stop from one thread (the main one); the callback runs
 * on the watch thread, never two at once.
 */
#ifndef SF_NET_FSWATCH_H
#define SF_NET_FSWATCH_H

#include <stddef.h>

#define NET_FSWATCH_MAX_DIRS 16

typedef struct net_fswatch net_fswatch;

/* Watches dirs[0..ndirs) (duplicates are watched once) and starts the thread. NULL with err
 * when a directory cannot be watched (missing, no inotify instance left) or out of memory. */
net_fswatch *net_fswatch_start(const char *const *dirs, size_t ndirs, unsigned debounce_ms,
                               void (*cb)(void *arg), void *arg, char *err, size_t errlen);
/* Stops the thread (a callback running is finished first) and frees w. NULL: nothing. */
void net_fswatch_stop(net_fswatch *w);

#endif
