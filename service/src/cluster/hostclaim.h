/* A host-wide claim on an identity: one process per (layout, datacenter, worker) on this host.
 *
 * Two daemons with the same identity issue the same IDs, whatever their ports and data
 * directories. Each identity is claimed by binding an abstract-namespace Unix socket named after
 * it, held (listening) for the process's lifetime:
 *   - the kernel releases the name the moment the process dies, however it dies: a kill -9 leaves
 *     no stale claim to clean up (a lock file's name would outlive it; its lock would not, but
 *     it needs a writable runtime directory every instance agrees on);
 *   - it needs no file system at all (read-only root, no /run mounted);
 *   - abstract names are scoped to the network namespace: containers in separate network
 *     namespaces are separate hosts here, as everywhere else in snowflaked (their identities are
 *     kept apart by the configuration, snowflake.peers and etcd); containers sharing the host's
 *     network (host networking) share the claims, as they share the ports.
 * A process refused connects to the holder's socket and reads its pid with SO_PEERCRED (no
 * accept needed), to name it. The holder drains those connections from its housekeeping
 * (hostclaim_drain), so its backlog never fills. Sockets are SOCK_CLOEXEC: a child does not
 * inherit the claim.
 *
 * Names (at most 107 bytes, no NUL inside):
 *   snowflaked/id/<ts>.<dc>.<worker>.<seq>/e<epoch ms>/u<unit ms>/<hi|lo>/<datacenter>/<worker>
 *       the Snowflake IDs of that layout (node bits high, or low: Sonyflake order);
 *   snowflaked/id128/n<node bits>/<node>
 *       UUIDv7 and ULID: their node field is (datacenter << worker_bits) | worker in
 *       datacenter_bits + worker_bits bits and does not depend on the Snowflake epoch, unit or
 *       order, so two daemons that differ only there would still share it.
 *
 * Threads: the main thread (start, housekeeping, stop). Blocking: never (non-blocking sockets).
 */
#ifndef SF_CLUSTER_HOSTCLAIM_H
#define SF_CLUSTER_HOSTCLAIM_H

#include <stddef.h>
#include <stdint.h>

#include "snowflake/layout.h"

#define HOSTCLAIM_MAX 512 /* two names per worker, one worker per loop at most */

typedef struct hostclaim {
    int fds[HOSTCLAIM_MAX];
    unsigned n;
} hostclaim;

/* Takes the claim named name (what: how to call it in a message, e.g. "datacenter 0 worker 3").
 * Returns 0, or -1 with err naming the holder ("... is already issuing on this host: pid 1234
 * (snowflaked)"). */
int hostclaim_take(hostclaim *c, const char *name, const char *what, char *err, size_t errlen);

/* Claims both names of each of the n workers (in datacenter dc, under layout l). Returns 0, or
 * -1 with err; the claims taken so far stay (hostclaim_release). */
int hostclaim_identity(hostclaim *c, const sf_layout *l, uint32_t dc, const uint32_t *workers,
                       unsigned n, char *err, size_t errlen);

/* The Snowflake claim's name for one worker (the id128 one is built alike), in buf (108 bytes). */
void hostclaim_name(char *buf, size_t len, const sf_layout *l, uint32_t dc, uint32_t worker);

/* Accepts and closes the connections refused processes made to read our pid. */
void hostclaim_drain(hostclaim *c);

/* Closes every claim (at exit; the kernel would too). Safe on a zeroed hostclaim. */
void hostclaim_release(hostclaim *c);

#endif
