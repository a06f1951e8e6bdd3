/* Start-up check that no other replica already issues IDs under our worker id.
 *
 * Uniqueness across replicas rests on each owning a distinct (datacenter, worker) pair; in
 * Kubernetes the StatefulSet ordinal gives that, but a misconfigured second deployment, a copied
 * config or a reused ordinal would silently produce duplicates. With snowflake.peers set
 * ("host:port" of the replicas' HTTP listeners, comma-separated; our own address may be listed,
 * it is not listening yet), peers_check asks each one for an ID (GET /id?encoding=dec, text)
 * before this instance opens its listeners, decodes it with our layout, and fails if a peer
 * answers with our datacenter and a worker id in our range. A peer that does not answer within
 * timeout_ms (not started yet, unreachable) is logged and skipped: the check proves a conflict,
 * it cannot prove its absence. Two duplicates started at the very same moment can both pass.
 * Blocking (plain sockets with poll), for the main thread before the loops start.
 */
#ifndef SF_CLUSTER_PEERS_H
#define SF_CLUSTER_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "snowflake/layout.h"

typedef struct peers_result {
    unsigned asked, answered;
} peers_result;

/* 0 when no answering peer uses our identity (workers [worker_first, worker_last]); -1 with
 * the reason in err on a conflict or a malformed list. */
int peers_check(const char *list, const sf_layout *layout, uint32_t datacenter,
                uint32_t worker_first, uint32_t worker_last, unsigned timeout_ms,
                peers_result *res, char *err, size_t errlen);

#endif
