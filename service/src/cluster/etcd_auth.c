/* etcd RBAC credentials and token (see etcd_auth.h). */
#include "cluster/etcd_auth.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ETCD_AUTH_USER_MAX 128
#define ETCD_AUTH_PATH_MAX 1024
#define AUTH_HEADER        "Authorization: "

struct etcd_auth {
    char user[ETCD_AUTH_USER_MAX + 1];
    char password_file[ETCD_AUTH_PATH_MAX + 1]; /* "" = inline password */
    char password[ETCD_AUTH_PASSWORD_MAX + 1];  /* inline only */
    /* "Authorization: <token>\r\n" kept whole, so that each request adds it with one %s */
    char header[sizeof AUTH_HEADER + ETCD_AUTH_TOKEN_MAX + 2];
    bool has_token, disabled;
    uint64_t gen; /* +1 whenever the token changes (set, forgotten) */
    /* mu: header, has_token, disabled, gen (clients of two threads may share the credentials);
     * login: one authentication at a time (etcd_auth_login_lock) */
    pthread_mutex_t mu, login;
    _Atomic uint64_t counters[ETCD_AUTH_EV_COUNT];
};

#define LOCKED(a, stmt)                                                                            \
    do {                                                                                           \
        pthread_mutex_lock((pthread_mutex_t *)&(a)->mu);                                           \
        stmt;                                                                                      \
        pthread_mutex_unlock((pthread_mutex_t *)&(a)->mu);                                         \
    } while (0)

static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p; /* not optimised away: the memory is freed right after */
    while (n--)
        *v++ = 0;
}

etcd_auth_refusal etcd_auth_classify(int grpc_code, const char *m)
{
    if (!m)
        m = "";
    if (grpc_code == 16) /* Unauthenticated: "etcdserver: invalid auth token" */
        return ETCD_AUTH_TOKEN;
    if (grpc_code == 7) /* PermissionDenied: "etcdserver: permission denied" */
        return ETCD_AUTH_DENIED;
    if (grpc_code == 3 &&
        (strstr(m, "revision of auth store is old") || strstr(m, "user name is empty")))
        return ETCD_AUTH_TOKEN;
    if (grpc_code == 3 && strstr(m, "authentication failed"))
        return ETCD_AUTH_CREDENTIALS; /* "..., invalid user ID or password" */
    if (grpc_code == 9 && strstr(m, "user name not found"))
        return ETCD_AUTH_CREDENTIALS;
    if (grpc_code == 9 && strstr(m, "authentication is not enabled"))
        return ETCD_AUTH_NOT_ENABLED;
    return ETCD_AUTH_NOT_REFUSED;
}

const char *etcd_auth_refusal_name(etcd_auth_refusal r)
{
    static const char *const names[] = {"not refused", "token refused", "credentials refused",
                                        "permission denied", "auth not enabled"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

etcd_auth *etcd_auth_new(const char *user, const char *password, const char *password_file,
                         char *err, size_t errlen)
{
    bool inline_pw = password && *password, file_pw = password_file && *password_file;
    if (!user || !*user || strlen(user) > ETCD_AUTH_USER_MAX) {
        snprintf(err, errlen, "etcd auth: the user name must be 1..%d bytes", ETCD_AUTH_USER_MAX);
        return NULL;
    }
    if (inline_pw == file_pw) {
        snprintf(err, errlen,
                 "etcd auth: user %s needs exactly one of a password or a password "
                 "file",
                 user);
        return NULL;
    }
    if ((inline_pw && strlen(password) > ETCD_AUTH_PASSWORD_MAX) ||
        (file_pw && strlen(password_file) > ETCD_AUTH_PATH_MAX)) {
        snprintf(err, errlen,
                 "etcd auth: the password (at most %d bytes) or its file name (%d) "
                 "is too long",
                 ETCD_AUTH_PASSWORD_MAX, ETCD_AUTH_PATH_MAX);
        return NULL;
    }
    etcd_auth *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(a->user, sizeof a->user, "%s", user);
    if (file_pw)
        snprintf(a->password_file, sizeof a->password_file, "%s", password_file);
    else
        snprintf(a->password, sizeof a->password, "%s", password);
    pthread_mutex_init(&a->mu, NULL);
    pthread_mutex_init(&a->login, NULL);
    return a;
}

void etcd_auth_free(etcd_auth *a)
{
    if (!a)
        return;
    pthread_mutex_destroy(&a->mu);
    pthread_mutex_destroy(&a->login);
    wipe(a, sizeof *a);
    free(a);
}

const char *etcd_auth_user(const etcd_auth *a)
{
    return a->user;
}

/* The first line of the password file into out (cap bytes): 0, or -1 with why (never the
 * contents). */
static int read_password(const etcd_auth *a, char *out, size_t cap, char *why, size_t whylen)
{
    FILE *f = fopen(a->password_file, "re");
    if (!f) {
        snprintf(why, whylen, "password file %s: %s", a->password_file, strerror(errno));
        return -1;
    }
    char line[ETCD_AUTH_PASSWORD_MAX + 3]; /* password, "\r\n", NUL */
    bool got = fgets(line, sizeof line, f) != NULL;
    bool read_err = ferror(f);
    fclose(f);
    size_t n = got ? strcspn(line, "\r\n") : 0;
    bool too_long = got && n == strlen(line) && n == sizeof line - 1;
    int rc = -1;
    if (read_err)
        snprintf(why, whylen, "password file %s: read error", a->password_file);
    else if (n == 0)
        snprintf(why, whylen, "password file %s: the first line is empty", a->password_file);
    else if (too_long || n >= cap)
        snprintf(why, whylen, "password file %s: the first line is longer than %d bytes",
                 a->password_file, ETCD_AUTH_PASSWORD_MAX);
    else {
        memcpy(out, line, n);
        out[n] = '\0';
        rc = 0;
    }
    wipe(line, sizeof line);
    return rc;
}

char *etcd_auth_request_body(etcd_auth *a, char *why, size_t cap)
{
    char pw[ETCD_AUTH_PASSWORD_MAX + 1];
    if (a->password_file[0]) {
        if (read_password(a, pw, sizeof pw, why, cap) != 0)
            return NULL;
    } else {
        memcpy(pw, a->password, sizeof pw);
    }
    char *body = NULL;
    cJSON *j = cJSON_CreateObject();
    if (j && cJSON_AddStringToObject(j, "name", a->user) &&
        cJSON_AddStringToObject(j, "password", pw))
        body = cJSON_PrintUnformatted(j);
    if (j) { /* the tree holds a copy of the password too */
        cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "password");
        if (cJSON_IsString(p))
            wipe(p->valuestring, strlen(p->valuestring));
        cJSON_Delete(j);
    }
    wipe(pw, sizeof pw);
    if (!body)
        snprintf(why, cap, "out of memory");
    return body;
}

void etcd_auth_wipe_free(char *s)
{
    if (!s)
        return;
    wipe(s, strlen(s));
    free(s);
}

static void forget_locked(etcd_auth *a)
{
    wipe(a->header, sizeof a->header);
    a->has_token = false;
    a->gen++;
}

bool etcd_auth_set_token(etcd_auth *a, const char *token)
{
    size_t n = token ? strlen(token) : 0;
    if (n == 0 || n > ETCD_AUTH_TOKEN_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)token[i] <= 0x20 || (unsigned char)token[i] >= 0x7f)
            return false; /* it goes into a header line as it is */
    LOCKED(a, {
        forget_locked(a);
        snprintf(a->header, sizeof a->header, AUTH_HEADER "%s\r\n", token);
        a->has_token = true;
    });
    return true;
}

void etcd_auth_forget(etcd_auth *a)
{
    LOCKED(a, forget_locked(a));
}

bool etcd_auth_has_token(const etcd_auth *a)
{
    bool v;
    LOCKED(a, v = a->has_token);
    return v;
}

const char *etcd_auth_header(const etcd_auth *a)
{
    return a && a->has_token ? a->header : "";
}

uint64_t etcd_auth_header_copy(const etcd_auth *a, char *out, size_t cap)
{
    uint64_t g;
    LOCKED(a, {
        snprintf(out, cap, "%s", a->has_token ? a->header : "");
        g = a->gen;
    });
    return g;
}

uint64_t etcd_auth_generation(const etcd_auth *a)
{
    uint64_t g;
    LOCKED(a, g = a->gen);
    return g;
}

void etcd_auth_login_lock(etcd_auth *a)
{
    pthread_mutex_lock(&a->login);
}

void etcd_auth_login_unlock(etcd_auth *a)
{
    pthread_mutex_unlock(&a->login);
}

void etcd_auth_set_disabled(etcd_auth *a, bool off)
{
    LOCKED(a, a->disabled = off);
}

bool etcd_auth_disabled(const etcd_auth *a)
{
    bool v;
    LOCKED(a, v = a->disabled);
    return v;
}

void etcd_auth_count(etcd_auth *a, etcd_auth_event ev)
{
    if ((unsigned)ev < ETCD_AUTH_EV_COUNT)
        atomic_fetch_add(&a->counters[ev], 1);
}

uint64_t etcd_auth_counter(const etcd_auth *a, etcd_auth_event ev)
{
    etcd_auth *m = (etcd_auth *)a; /* the counters are atomics */
    return (unsigned)ev < ETCD_AUTH_EV_COUNT ? atomic_load(&m->counters[ev]) : 0;
}
