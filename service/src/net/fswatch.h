/* Directory watch with a debounce: a thread of its own runs a libuv loop with one uv_fs_event_t
 * per directory (inotify on Linux) and calls back once `debounce_ms` after the last change in
 * any of them, so a burst (a cert and a key written one after the other, kubelet's swap of a
 * Secret volume's `..data` symlink) is one call.
 *
 * A directory, not a file, is watched: an editor or kubelet replaces files by rename, which a
 * watch on the file itself would lose with the old inode.
 *
 * A watched directory that goes away (removed, or renamed and replaced: `rm -rf d && mkdir d &&
 * cp ...`, an operator recreating a mount path) is looked for every `recheck_ms` and watched
 * again when a directory is back at its path; `dir_state` says so once each way. No change is
 * reported while a directory is missing (the files in it are gone too: a reload could only
 * fail); its return counts as a change, so what was copied into it is picked up, whether the
 * copy finished before or after the watch was armed again. The same recheck also notices a
 * directory replaced between two events (a new inode at the path), and an event on the directory
 * itself (its removal or move) renews the watch at once even when the path shows the same inode
 * number (a file system may give a directory created right after a removal the freed one).
 *
 * Threads: net_fswatch_start / net_fswatch_stop from one thread (the main one); the callbacks run
 * on the watch thread, never two at once, never on a loop thread.
 */
#ifndef SF_NET_FSWATCH_H
#define SF_NET_FSWATCH_H

#include <stdbool.h>
#include <stddef.h>

#define NET_FSWATCH_MAX_DIRS   16
#define NET_FSWATCH_RECHECK_MS 2000 /* how often the directories' presence is checked */

typedef struct net_fswatch net_fswatch;

typedef struct net_fswatch_opts {
    unsigned debounce_ms; /* quiet time after the last change before `changed` */
    unsigned recheck_ms;  /* presence check period; 0: NET_FSWATCH_RECHECK_MS */
    void (*changed)(void *arg);
    /* Optional: dir went away (present false) or is watched again (true). */
    void (*dir_state)(void *arg, const char *dir, bool present);
    void *arg;
} net_fswatch_opts;

/* Watches dirs[0..ndirs) (duplicates are watched once) and starts the thread. NULL with err
 * when a directory cannot be watched (missing, no inotify instance left) or out of memory. */
net_fswatch *net_fswatch_start(const char *const *dirs, size_t ndirs, const net_fswatch_opts *o,
                               char *err, size_t errlen);
/* Stops the thread (a callback running is finished first) and frees w. NULL: nothing. */
void net_fswatch_stop(net_fswatch *w);

#endif
