/* Incremental parser for memcached text-protocol replies (doc/protocol.txt of memcached):
 * one-line replies (STORED, NOT_STORED, EXISTS, NOT_FOUND, DELETED, TOUCHED, OK, END, ERROR,
 * CLIENT_ERROR <msg>, SERVER_ERROR <msg>) and retrieval replies (VALUE <key> <flags> <bytes>
 * [<cas>]\r\n<data>\r\n ... END\r\n). Replies may be split across reads at any byte and several
 * may arrive in one read (pipelining). Value data is checked for length and its terminating CRLF
 * but never stored, so any value size costs nothing.
 *
 * Ownership and threads: one parser per connection, owned by its loop thread; no allocation.
 *
 * Contract
 *   mc_feed(p, data, len, &used, &reply)
 *       returns 1 when a reply completed (used = bytes consumed, reply filled; the key points into
 *       the parser and is valid until the next call), 0 when every byte was consumed without
 *       completing one, -1 on a malformed reply (p->err says what; the stream cannot be resynced).
 *   mc_reset(p) for a new connection.
 */
#ifndef SFLOAD_MCREPLY_H
#define SFLOAD_MCREPLY_H

#include <stddef.h>
#include <stdint.h>

#define MC_LINE_MAX 2048 /* memcached's own limit on a command line */
#define MC_KEY_MAX  250

typedef enum mc_kind {
    MC_END, /* END: a retrieval finished (nvalues tells hits) */
    MC_STORED,
    MC_NOT_STORED,
    MC_EXISTS,
    MC_NOT_FOUND,
    MC_DELETED,
    MC_TOUCHED,
    MC_OK,
    MC_ERROR,
    MC_CLIENT_ERROR,
    MC_SERVER_ERROR,
} mc_kind;

typedef struct mc_reply {
    mc_kind kind;
    unsigned nvalues; /* VALUE blocks before END */
    const char *key;  /* first VALUE's key (nvalues > 0) */
    size_t key_len;
    uint64_t value_len; /* first VALUE's data length */
} mc_reply;

typedef struct mc_parser {
    int state; /* line or data */
    char line[MC_LINE_MAX];
    size_t line_len;
    uint64_t data_left; /* data bytes + 2 for the CRLF still to come */
    unsigned nvalues;
    char key[MC_KEY_MAX + 1];
    size_t key_len;
    uint64_t value_len;
    const char *err;
} mc_parser;

void mc_reset(mc_parser *p);
int mc_feed(mc_parser *p, const char *data, size_t len, size_t *used, mc_reply *r);
const char *mc_kind_name(mc_kind k);

#endif
