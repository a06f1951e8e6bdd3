#include "cluster/peers.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "obs/log.h"
#include "util/decimal.h"
#include "util/netio.h"

#define PEER_TEXT_MAX 300 /* one "host:port" */
#define REPLY_MAX     4096

/* Asks one peer for an ID. 0 with *id, or a negative errno / -EPROTO with *why set. */
static int ask_peer(const char *host, const char *port, unsigned timeout_ms, uint64_t *id,
                    const char **why)
{
    uint64_t deadline = netio_mono_ms() + timeout_ms;
    int fd = netio_connect(host, port, deadline, why);
    int rc = fd < 0 ? fd : 0;
    char buf[REPLY_MAX + 1];
    size_t len = 0;
    if (rc == 0) {
        int n = snprintf(buf, sizeof buf,
                         "GET /id?encoding=dec HTTP/1.0\r\nHost: %s\r\nAccept: text/plain\r\n"
                         "User-Agent: snowflaked-peer-check\r\n\r\n",
                         host);
        rc = netio_send_all(fd, buf, (size_t)n, deadline);
    }
    while (rc == 0 && len < REPLY_MAX) { /* HTTP/1.0: the peer closes after the response */
        ssize_t r = netio_recv_some(fd, buf + len, REPLY_MAX - len, deadline);
        if (r == 0)
            break;
        if (r < 0)
            rc = (int)r;
        else
            len += (size_t)r;
    }
    if (fd >= 0)
        close(fd);
    if (rc != 0) {
        if (fd >= 0) /* netio_connect set *why already */
            *why = strerror(-rc);
        return rc;
    }
    buf[len] = '\0';
    const char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || len < 12 || strncmp(buf + 9, "200", 3) != 0 || !body) {
        *why = "no 200 answer to GET /id (not a snowflaked, or not ready)";
        return -EPROTO;
    }
    body += 4;
    /* the digits that begin the body: what follows them (a newline from a proxy) is not read */
    if (!dec_parse_u64(body, strspn(body, "0123456789"), UINT64_MAX, id)) {
        *why = "the /id answer is not a decimal ID";
        return -EPROTO;
    }
    return 0;
}

int peers_check(const char *list, const sf_layout *layout, uint32_t datacenter,
                uint32_t worker_first, uint32_t worker_last, unsigned timeout_ms,
                peers_result *res, char *err, size_t errlen)
{
    *res = (peers_result){0};
    for (const char *p = list; *p;) {
        p += strspn(p, " ,");
        size_t n = strcspn(p, ",");
        while (n && p[n - 1] == ' ')
            n--;
        if (n == 0)
            break;
        char peer[PEER_TEXT_MAX], host[256], port[8];
        if (n >= sizeof peer) {
            snprintf(err, errlen, "snowflake.peers: an entry is longer than %zu bytes",
                     sizeof peer - 1);
            return -1;
        }
        memcpy(peer, p, n);
        peer[n] = '\0';
        p += n;
        if (!netio_split_host_port(peer, host, sizeof host, port, sizeof port)) {
            snprintf(err, errlen, "snowflake.peers: \"%s\" is not host:port", peer);
            return -1;
        }
        res->asked++;
        uint64_t id = 0;
        const char *why = NULL;
        if (ask_peer(host, port, timeout_ms, &id, &why) != 0) {
            LOG_INFO("peers: %s did not answer (%s); its worker id is not checked", peer, why);
            continue;
        }
        res->answered++;
        sf_id_parts parts;
        char why_bad[128];
        if (sf_layout_unpack(layout, id, 0, 0, &parts, why_bad, sizeof why_bad) != 0) {
            LOG_WARN("peers: %s answered %llu, not an ID of our layout (%s)", peer,
                     (unsigned long long)id, why_bad);
            continue;
        }
        if (parts.datacenter == datacenter && parts.worker >= worker_first &&
            parts.worker <= worker_last) {
            snprintf(err, errlen,
                     "peer %s already issues IDs as datacenter %u worker %u (it answered %llu): "
                     "two replicas with one identity would issue duplicate IDs; refusing to start",
                     peer, parts.datacenter, parts.worker, (unsigned long long)id);
            return -1;
        }
        LOG_INFO("peers: %s is datacenter %u worker %u: no conflict", peer, parts.datacenter,
                 parts.worker);
    }
    return 0;
}
