#include "util/fsio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* errno after a call that failed, never 0: stdio need not set it for every short write, and a
 * 0 here would read as success to callers that test a->err. */
static int failure_errno(void)
{
    return errno ? errno : EIO;
}

int fsio_atomic_open(fsio_atomic *a, const char *path, void *buf, size_t bufsize, char *err,
                     size_t errlen)
{
    a->f = NULL;
    a->path = path;
    a->err = 0;
    if ((size_t)snprintf(a->tmp, sizeof a->tmp, "%s.tmp", path) >= sizeof a->tmp) {
        snprintf(err, errlen, "%s.tmp: cannot create: %s", path, strerror(ENAMETOOLONG));
        return -1;
    }
    int fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", a->tmp, strerror(errno));
        return -1;
    }
    a->f = fdopen(fd, "wb");
    if (!a->f) {
        int e = errno;
        close(fd);
        unlink(a->tmp);
        snprintf(err, errlen, "%s: cannot create: %s", a->tmp, strerror(e));
        return -1;
    }
    if (buf)
        setvbuf(a->f, buf, _IOFBF, bufsize);
    return 0;
}

int fsio_atomic_write(fsio_atomic *a, const void *p, size_t n)
{
    if (a->err)
        return -1;
    errno = 0;
    if (n > 0 && fwrite(p, 1, n, a->f) != n) {
        a->err = failure_errno();
        return -1;
    }
    return 0;
}

void fsio_atomic_fail(fsio_atomic *a, int errnum)
{
    if (!a->err)
        a->err = errnum ? errnum : EIO;
}

int fsio_atomic_commit(fsio_atomic *a, char *err, size_t errlen)
{
    /* Each step only runs if the ones before succeeded; the first failure is the one reported.
     * The file is closed in every case. */
    const char *what = a->err ? "write" : NULL;
    int e = a->err;
    errno = 0;
    if (!what && fflush(a->f) != 0) {
        what = "write";
        e = failure_errno();
    }
    if (!what && fsync(fileno(a->f)) != 0) {
        what = "fsync";
        e = failure_errno();
    }
    if (fclose(a->f) != 0 && !what) {
        what = "close";
        e = failure_errno();
    }
    a->f = NULL;
    if (!what && rename(a->tmp, a->path) != 0) {
        what = "rename";
        e = failure_errno();
    }
    if (!what && fsio_fsync_parent(a->path) != 0) {
        what = "fsync of the directory";
        e = failure_errno();
    }
    if (!what)
        return 0;
    snprintf(err, errlen, "%s: %s failed: %s", a->path, what, strerror(e));
    unlink(a->tmp); /* already gone when only the directory fsync failed */
    return -1;
}

void fsio_atomic_abort(fsio_atomic *a)
{
    if (!a->f)
        return;
    fclose(a->f);
    a->f = NULL;
    unlink(a->tmp);
}

int fsio_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    fsio_atomic a;
    if (fsio_atomic_open(&a, path, NULL, 0, err, errlen) != 0)
        return -1;
    fsio_atomic_write(&a, data, len);
    return fsio_atomic_commit(&a, err, errlen);
}

int fsio_fsync_parent(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int fsio_read_small(const char *path, char *buf, size_t cap, size_t *len, char *err,
                    size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    ssize_t n = read(fd, buf, cap - 1);
    int saved = errno;
    close(fd);
    if (n < 0) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(saved));
        return -1;
    }
    buf[n] = '\0';
    *len = (size_t)n;
    return 1;
}
