/* HTTP/1.x response parsing (sfload, cluster/etcd_client), over llhttp in HTTP_RESPONSE mode
 * (strict): Content-Length and chunked bodies, pipelined responses in one buffer, responses split across
 * reads at any byte, "Connection: close" and HTTP/1.0 defaults, bodies delimited by the close
 * (finished with hresp_eof), and HEAD responses (no body despite Content-Length).
 *
 * Ownership and threads: one parser per connection, used by one thread at a time.
 * Body bytes are copied only when collection is on (ID verification), into a buffer that grows
 * by doubling up to body_max and is then reused: no allocation per response in steady state.
 * The parser keeps no pointer into the caller's data after hresp_feed returns.
 *
 * Contract
 *   hresp_feed(p, data, len, &used)
 *       parses bytes, calling on_response once per complete response, in order. Returns
 *       HRESP_OK when all bytes were used, HRESP_STOP when the callback returned non-zero (used
 *       bytes were consumed, including the response that stopped it), HRESP_ERROR on a protocol
 *       error (p->err says what; a response after one that ended the connection is an error).
 *   hresp_eof(p)   at end of stream: completes a close-delimited response (calling on_response)
 *       and returns HRESP_OK, or HRESP_STOP if the callback asked to; returns HRESP_ERROR when the
 *       stream ended inside a response (truncated). Nothing pending: HRESP_OK.
 *   hresp_reset(p) before reusing the parser on a new connection.
 *   hresp_busy(p)  true between the first byte of a response and its end.
 */
#ifndef SF_UTIL_HTTPRESP_H
#define SF_UTIL_HTTPRESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>

enum { HRESP_OK = 0, HRESP_STOP = 1, HRESP_ERROR = -1 };

typedef struct hresp {
    int status;
    bool keep_alive;     /* false: the server closes after this response */
    const char *body;    /* collected body (NULL unless collecting) */
    size_t body_len;     /* bytes collected */
    bool body_truncated; /* the body exceeded body_max; body holds its first body_max bytes */
    uint64_t body_bytes; /* body length on the wire (decoded from chunks) */
} hresp;

typedef int (*hresp_cb)(void *ud, const hresp *r);

typedef struct hresp_parser {
    llhttp_t llh;
    llhttp_settings_t settings;
    hresp_cb cb;
    void *ud;
    bool head;    /* responses answer HEAD requests: no body */
    bool collect; /* copy bodies */
    bool in_message;
    bool stopped;
    char *body;
    size_t body_len, body_cap, body_max;
    bool body_truncated;
    uint64_t body_bytes;
    const char *err;
} hresp_parser;

void hresp_init(hresp_parser *p, bool head, bool collect, size_t body_max, hresp_cb cb, void *ud);
void hresp_free(hresp_parser *p);
void hresp_reset(hresp_parser *p);
int hresp_feed(hresp_parser *p, const char *data, size_t len, size_t *used);
int hresp_eof(hresp_parser *p);
static inline bool hresp_busy(const hresp_parser *p)
{
    return p->in_message;
}

#endif
