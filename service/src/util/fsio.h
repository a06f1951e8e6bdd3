/* Small file-system helpers for files replaced atomically (tmp + fsync + rename + this). */
#ifndef SF_UTIL_FSIO_H
#define SF_UTIL_FSIO_H

/* fsyncs the directory holding path, so that a rename into it survives a crash.
 * Returns 0, or -1 with errno set. */
int fsio_fsync_parent(const char *path);

#endif
