/* A process's name for messages: see procname.h. */
#include "util/procname.h"

#include <stdio.h>
#include <string.h>

void procname_comm(pid_t pid, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/comm", (long)pid);
    snprintf(buf, len, "?");
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    if (!fgets(buf, (int)len, f))
        snprintf(buf, len, "?");
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
            *c = '?';
}
