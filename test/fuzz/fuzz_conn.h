/* The conversation of the protocol harnesses (fuzz_http, fuzz_memcache) with one connection
 * without a socket (net/conn_fake.h): the client's bytes arrive in the reads the flag byte's
 * splitter cuts (fuzz_common.h), then the peer closes its side or goes quiet until the timeout.
 * Checked on the way, for any protocol: it never yields without progress (a busy loop in the
 * real server) and never consumes more than it was given. */
#ifndef SF_FUZZ_CONN_H
#define SF_FUZZ_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "net/conn_fake.h"

/* `proto` names the protocol in a failure. `peer_eof`: the client ends with its FIN (else the
 * connection times out: a header timeout or the idle close). */
static inline void fuzz_converse(conn_fake *f, const char *in, size_t len, uint8_t flags,
                                 bool peer_eof, const char *proto)
{
    fuzz_splitter sp;
    fuzz_splitter_init(&sp, flags, len);
    int rc = CONN_FAKE_OK;
    for (size_t off = 0; off < len && rc == CONN_FAKE_OK;) {
        size_t n = fuzz_next_read(&sp, len - off);
        rc = conn_fake_feed(f, in + off, n);
        off += n;
    }
    FUZZ_CHECK(rc != CONN_FAKE_STUCK, "%s yielded without progress (busy loop)", proto);
    FUZZ_CHECK(rc != CONN_FAKE_BAD, "%s consumed more than it was given", proto);
    if (rc != CONN_FAKE_OK)
        return; /* closed while reading */
    if (peer_eof)
        conn_fake_peer_eof(f);
    if (!conn_fake_closed(f))
        conn_fake_timeout(f);
}

#endif
