/* Credentials for etcd's RBAC (the auth part of cluster/etcd_client.c; docs/identity-etcd.md).
 *
 * What it owns: the user name, where the password comes from (a file whose first line is the
 * password, a mounted Kubernetes Secret, re-read before every authentication so that a rotated
 * Secret is picked up without a restart; or a password given inline), the current token, and the
 * counters. The password is read only to build one authentication request and is wiped right
 * after; the token lives in one buffer, wiped when forgotten. Neither is ever put into an error
 * message, a log line or a metric: messages name the user and the file, never their contents.
 *
 * Protocol (etcd v3 JSON gateway): POST /v3/auth/authenticate {"name","password"} answers
 * {"header":...,"token":"..."}; the token goes into an `Authorization: <token>` header (no
 * "Bearer"), which the gateway passes on as the gRPC metadata etcd reads the token from.
 *
 * Which refusals may be repeated (etcd_auth_classify): etcd resolves the token in its API layer
 * before it proposes or serves a request ("invalid auth token": unknown, expired simple token,
 * expired or badly signed JWT) and checks permissions and the token's auth revision in the apply
 * phase, where a refused request changes nothing ("revision of auth store is old", "permission
 * denied"; etcd's auth design, "Checking permission in the state machine"). So a request refused
 * for its token was not applied, and the client repeats it once after re-authenticating; a
 * permission refusal is final (another token would not change the role). Anything else,
 * including a transport error after the request was sent, is not repeated.
 *
 * Threads: the clients of more than one thread may share one etcd_auth (cluster/seq_etcd.c shares
 * the identity's: one authentication per daemon, not one per client). The token, its generation
 * and the disabled flag are under a mutex: a client copies the header it sends
 * (etcd_auth_header_copy) with the token's generation; authentications are serialized
 * (etcd_auth_login_lock), and a client whose token was refused re-authenticates only when the
 * generation is still the one it sent (else another client already did: it just repeats with the
 * new token). The counters are atomics read by any thread. */
#ifndef SF_CLUSTER_ETCD_AUTH_H
#define SF_CLUSTER_ETCD_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCD_AUTH_PASSWORD_MAX 255  /* bytes of the password (first line of the file) */
#define ETCD_AUTH_TOKEN_MAX    4096 /* bytes of a token etcd hands out (JWTs are ~300) */

typedef struct etcd_auth etcd_auth;

/* Why etcd refused a call (from its gRPC code and message; messages are stable across 3.x). */
typedef enum etcd_auth_refusal {
    ETCD_AUTH_NOT_REFUSED = 0,
    ETCD_AUTH_TOKEN,       /* invalid/expired token, auth revision old, no token: re-authenticate */
    ETCD_AUTH_CREDENTIALS, /* wrong user or password (authenticate) */
    ETCD_AUTH_DENIED,      /* the user's roles do not allow this key range */
    ETCD_AUTH_NOT_ENABLED, /* authenticate against an etcd without `auth enable` */
} etcd_auth_refusal;

etcd_auth_refusal etcd_auth_classify(int grpc_code, const char *message);
const char *etcd_auth_refusal_name(etcd_auth_refusal r);

/* NULL with err when user is empty, no or both password sources are given, or a name is too
 * long. The file is not read here (the first authentication reads it). */
etcd_auth *etcd_auth_new(const char *user, const char *password, const char *password_file,
                         char *err, size_t errlen);
void etcd_auth_free(etcd_auth *a);
const char *etcd_auth_user(const etcd_auth *a);

/* The body of an authentication request, the password read now (from the file: its first line,
 * without the line end). Release with etcd_auth_wipe_free. NULL with why when the file cannot be
 * read, its first line is empty or longer than ETCD_AUTH_PASSWORD_MAX, or out of memory. */
char *etcd_auth_request_body(etcd_auth *a, char *why, size_t cap);
/* Overwrites s before freeing it (request bodies, answers holding a token). */
void etcd_auth_wipe_free(char *s);

/* Keeps token (printable ASCII without spaces, 1..ETCD_AUTH_TOKEN_MAX bytes); false when it is
 * not such a string (the answer is then garbage). */
bool etcd_auth_set_token(etcd_auth *a, const char *token);
void etcd_auth_forget(etcd_auth *a);
bool etcd_auth_has_token(const etcd_auth *a);
/* "Authorization: <token>\r\n", or "" without a token (one thread only: the pointer is the
 * buffer a sharer may rewrite; shared credentials use etcd_auth_header_copy). */
const char *etcd_auth_header(const etcd_auth *a);
#define ETCD_AUTH_HEADER_MAX (sizeof "Authorization: " + ETCD_AUTH_TOKEN_MAX + 2)
/* The header into out (cap >= ETCD_AUTH_HEADER_MAX), and the generation of that token: +1 each
 * time a token is set or forgotten. */
uint64_t etcd_auth_header_copy(const etcd_auth *a, char *out, size_t cap);
uint64_t etcd_auth_generation(const etcd_auth *a);
/* Around an authentication, so that clients sharing a etcd_auth authenticate one at a time. */
void etcd_auth_login_lock(etcd_auth *a);
void etcd_auth_login_unlock(etcd_auth *a);

/* etcd answered that auth is not enabled: calls go without a token until a call is refused for
 * the lack of one (auth enabled later), which re-authenticates. */
void etcd_auth_set_disabled(etcd_auth *a, bool off);
bool etcd_auth_disabled(const etcd_auth *a);

typedef enum etcd_auth_event {
    ETCD_AUTH_EV_OK,            /* an authentication got a token */
    ETCD_AUTH_EV_REFUSED,       /* an authentication refused (credentials, unreadable file) */
    ETCD_AUTH_EV_ERROR,         /* an authentication without a usable answer */
    ETCD_AUTH_EV_TOKEN_REFUSED, /* a request refused for its token (then re-authenticated) */
    ETCD_AUTH_EV_DENIED,        /* a request refused for the user's permissions */
    ETCD_AUTH_EV_COUNT
} etcd_auth_event;
void etcd_auth_count(etcd_auth *a, etcd_auth_event ev);
uint64_t etcd_auth_counter(const etcd_auth *a, etcd_auth_event ev);

#endif
