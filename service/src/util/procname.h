/* The name a process gives itself (/proc/<pid>/comm), fit for a message: bytes outside printable
 * ASCII become '?' (a process chooses its own name, control bytes included, and our messages go
 * to terminals and log collectors). For start-up and housekeeping messages that name another
 * process (the holder of our port or identity). Any thread. */
#ifndef SF_UTIL_PROCNAME_H
#define SF_UTIL_PROCNAME_H

#include <stddef.h>
#include <sys/types.h>

/* "?" when /proc does not tell. */
void procname_comm(pid_t pid, char *buf, size_t len);

#endif
