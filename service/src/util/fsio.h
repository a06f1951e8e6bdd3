/* File-system helpers: files replaced atomically, for the lease and the cache snapshot.
 *
 * Atomic replacement (fsio_atomic_open/write/commit/abort, or fsio_write_atomic for contents held
 * in memory): the new contents go to "<path>.tmp" (created or truncated, mode 0644 before the
 * umask, close-on-exec so that no child keeps it open). Commit flushes it, fsyncs it, closes it,
 * renames it over <path> and fsyncs the directory holding <path>, so that a reader, or the file
 * system after a crash at any point, sees either the whole old file (or none) or the whole new
 * one; once commit returns 0 the new contents survive a power loss.
 *
 * On failure (-1, a reason in err) the tmp file is removed and <path> is as it was before: absent
 * or the old contents, untouched. One exception: when only the final directory fsync fails, the
 * rename has already happened, so <path> holds the new contents but may lose them in a crash.
 * The reasons, which callers pass on to logs and tests match:
 *   "<path>.tmp: cannot create: <strerror>"                      (open)
 *   "<path>: <step> failed: <strerror>"                          (commit)
 * with <step> one of write (a write or the final flush; also a producer's fsio_atomic_fail),
 * fsync, close, rename, "fsync of the directory".
 *
 * The tmp name is fixed, so at most one writer per path at a time (the callers' rule). Not
 * thread-safe per fsio_atomic; separate ones are independent.
 */
#ifndef SF_UTIL_FSIO_H
#define SF_UTIL_FSIO_H

#include <limits.h>
#include <stdio.h>

typedef struct fsio_atomic {
    FILE *f;          /* the tmp file; NULL once committed or aborted */
    const char *path; /* the caller's string; must stay valid until commit or abort */
    int err;          /* 0 while every write went through, else the errno of the first failure
                         (then later writes are skipped and commit fails); read-only for callers */
    char tmp[PATH_MAX + sizeof ".tmp"];
} fsio_atomic;

/* Creates <path>.tmp. buf (bufsize bytes, NULL for stdio's default) buffers the writes; it must
 * outlive commit or abort. Returns 0, or -1 with a reason in err (nothing is left behind). */
int fsio_atomic_open(fsio_atomic *a, const char *path, void *buf, size_t bufsize, char *err,
                     size_t errlen);
/* Appends n bytes. Returns 0, or -1 once any write failed (a->err says why; nothing more is
 * written): a long producer can stop early, or carry on and let commit report it. */
int fsio_atomic_write(fsio_atomic *a, const void *p, size_t n);
/* The producer could not make the contents (errnum, e.g. ENOMEM): commit will fail with
 * "write failed: <strerror(errnum)>" and replace nothing. A first failure is kept. */
void fsio_atomic_fail(fsio_atomic *a, int errnum);
/* Replaces <path> with what was written (see above). Returns 0, or -1 with a reason in err. */
int fsio_atomic_commit(fsio_atomic *a, char *err, size_t errlen);
/* Gives up before commit: closes and removes the tmp file; <path> is untouched. */
void fsio_atomic_abort(fsio_atomic *a);

/* open + one write of len bytes + commit. Returns 0, or -1 with a reason in err. */
int fsio_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* Reads a small file whole (the lease, a sequence's high-water mark): at most cap - 1 bytes
 * into buf, NUL-terminated, *len their count. Returns 1, 0 when the file does not exist, or -1
 * with "<path>: cannot open|read: <strerror>" in err. */
int fsio_read_small(const char *path, char *buf, size_t cap, size_t *len, char *err,
                    size_t errlen);

/* fsyncs the directory holding path, so that a rename into it survives a crash.
 * Returns 0, or -1 with errno set. */
int fsio_fsync_parent(const char *path);

#endif
