/* sfload's command line: parsing, validation and the target address.
 *
 * opts_parse fills an sl_opts from argv (getopt_long; argv strings are referenced, not copied)
 * and checks every value and combination; opts_resolve turns the host into a socket address and
 * enforces the project's safety rule: targets must be in 127.0.0.0/8 or ::1 unless
 * --allow-remote. Both write a one-line reason into err on failure (exit status 2 for usage).
 * Called once, from main, before any thread starts.
 */
#ifndef SFLOAD_OPTS_H
#define SFLOAD_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "verify.h"

#define SFLOAD_VERSION    "0.1.0"
#define SL_MAX_PATHS      64
#define SL_MAX_HEADERS    64
#define SL_MAX_DURATION_S 3600.0 /* the cap on -t; also the bound of a run given only -n */
#define SL_MAX_WARMUP_S   600.0
#define SL_MAX_TARGETS    32    /* URLs (or HOST:PORTs) of one run */
#define SL_IDREC_MAX_CONN 32768 /* --ids-out-v2 records a connection number in 15 bits */

typedef enum sl_mode { MODE_HTTP, MODE_MEMCACHE, MODE_ECHO } sl_mode;

typedef enum opts_rc { OPTS_OK = 0, OPTS_EXIT = 1, OPTS_USAGE = -1 } opts_rc;

/* One target of a run: connection i goes to target i % ntargets (round-robin). */
typedef struct sl_addr {
    const char *target; /* the URL or host:port as given */
    char host[256];     /* without brackets */
    unsigned port;
    struct sockaddr_storage addr;
    socklen_t addrlen;
} sl_addr;

typedef struct sl_opts {
    sl_mode mode;
    /* Target 0, copied here because single-target code paths (report, /metrics) use it. */
    const char *target; /* the URL or host:port as given */
    char host[256];     /* without brackets */
    unsigned port;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    sl_addr targets[SL_MAX_TARGETS]; /* every target, in command-line order */
    unsigned ntargets;

    /* HTTP */
    const char *url_path; /* the path every URL carries */
    const char *method;
    const char *paths[SL_MAX_PATHS];
    unsigned npaths;
    const char *headers[SL_MAX_HEADERS];
    unsigned nheaders;
    const char *body_file;
    const char *content_type;
    bool close_mode; /* connection per request, HTTP/1.0, read until close */
    bool webbench;   /* close_mode + webbench 1.5's output */

    /* load shape */
    unsigned connections, threads, pipeline;
    double duration_s; /* 0: not given */
    uint64_t requests; /* 0: not given */
    double warmup_s;
    double rate; /* requests/s over all connections; 0: closed loop */
    unsigned timeout_ms;

    /* memcache */
    unsigned mc_gets, mc_sets; /* the get:set ratio */
    const char *mc_id_key;     /* --mc-id-key: every request gets this (reserved) key instead */
    unsigned mc_id_count;      /* --mc-id-count: ... named this many times in one get */
    uint64_t keys;
    size_t value_size;

    /* echo */
    size_t msg_size;

    /* verification */
    bool verify;
    bool have_layout;
    vlayout layout;
    size_t max_body;

    /* output and process */
    int server_pid; /* 0: none */
    bool json, quiet, allow_remote;
    const char *ids_out;    /* --ids-out FILE, or NULL */
    const char *ids_out_v2; /* --ids-out-v2 FILE (16-byte records, idrec.h), or NULL */

    /* TLS (--tls, or https:// URLs): the client side of every connection. Verification is on
     * (--cacert) unless --insecure says otherwise; one of the two is required. */
    bool tls;
    bool tls_insecure;         /* --insecure: no chain or name check */
    const char *tls_cacert;    /* --cacert FILE: the CAs the server chain must lead to */
    const char *tls_cert;      /* --cert FILE: client certificate chain (mTLS) */
    const char *tls_key;       /* --key FILE: its private key (default: the --cert file) */
    const char *tls_sni;       /* --sni NAME: SNI and the name verified; NULL: the target's host
                                  (sent as SNI only when it is a name, not an address) */
    int tls_version;           /* --tls-version: 0 (1.2 or 1.3), 12 or 13 (pinned) */
    const char *tls_ciphers;   /* --ciphers: the TLS 1.2 cipher list (OpenSSL syntax) */
    const char *tls_suites;    /* --ciphersuites: the TLS 1.3 ciphersuites */
    bool tls_resume;           /* --tls-resume: each connection slot resumes its last session */
    bool url_http, url_https;  /* parsing: the schemes the URLs used (they may not mix) */

    /* faults (--tolerate-faults): connection faults reconnect with backoff, 503 is "refused",
     * and the exit status depends only on verification and --min-ids */
    bool tolerate_faults;
    uint64_t min_ids; /* --min-ids N: fewer IDs received fails the run; 0: no floor */
} sl_opts;

opts_rc opts_parse(int argc, char **argv, sl_opts *o, char *err, size_t errlen);
/* Resolves every target's host:port into its addr (target 0's also into o->addr) and applies the
 * loopback rule to each. 0 or -1. */
int opts_resolve(sl_opts *o, char *err, size_t errlen);
bool opts_addr_is_loopback(const struct sockaddr *sa);
void opts_usage(FILE *f);
const char *opts_mode_name(sl_mode m);

#endif
