/* memcached's ASCII authentication (its -Y authfile; memcached 1.6.18 authfile.c): the file of
 * user:password lines, read into a table, and the constant-time check of the credentials a
 * connection sends. The protocol side (the first command must be a "set" whose data is
 * "<user> <password>") is in memcache.c; the server holds the table (memcache.h
 * memcache_server_set_auth_file, memcache_server_reload_auth).
 *
 * The file: one "user:password" per line, "\n" or "\r\n" line ends, the last line's end
 * optional. The user is everything before the first ':', the password everything after it (it
 * may hold ':'). memcached's limits: at most MC_AUTH_ENTRIES_MAX lines of at most
 * MC_AUTH_LINE_MAX bytes. What memcached accepts without ever matching, or drops silently, is
 * refused here with the line's number ("line N: ..."; a line's bytes are never quoted): an empty
 * line (memcached refuses it too), a line without ':' (likewise), an empty user or password, a
 * space in either (the client's "user password" is split on spaces), a NUL byte or a carriage
 * return inside the line, a line longer than memcached's entry buffer (it would cut it and stop
 * reading), more entries than its table (it would ignore the rest), and a file without any entry
 * (memcached would start and refuse everyone). A file this module accepts authenticates the
 * same clients under memcached, but for a memcached 1.6.18 bug: it drops the last byte of a
 * one-line file without a line end (the password "bar" of "foo:bar" is "ba" there; read whole
 * here). The same user may appear on several lines: any of its
 * passwords is accepted (a password rotation: add the new one, move the clients, remove the old).
 *
 * Threads: none of its own; an mc_auth_table is immutable once parsed (the server swaps whole
 * tables). Buffers that held passwords are cleared before they are released. */
#ifndef SF_PROTO_MEMCACHE_AUTH_H
#define SF_PROTO_MEMCACHE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_AUTH_ENTRIES_MAX 8   /* memcached's MAX_ENTRIES ("not supposed to be a huge database") */
#define MC_AUTH_LINE_MAX    254 /* bytes of a line before its "\n" (memcached's fgets of 256) */
#define MC_AUTH_FILE_MAX    4096 /* a larger file cannot be valid: refused before it is parsed */
/* The longest user plus password: a line holds both and the ':' */
#define MC_AUTH_CRED_MAX (MC_AUTH_LINE_MAX - 1)

/* mc_auth_load's failures: the file could not be read (a runtime failure, exit 1 at start), or
 * its contents are wrong (bad configuration, exit 2). */
#define MC_AUTH_EIO     (-1)
#define MC_AUTH_EFORMAT (-2)

typedef struct mc_auth_entry {
    uint16_t ulen, plen;
    char user[MC_AUTH_CRED_MAX]; /* zero-padded: the check reads every byte */
    char pass[MC_AUTH_CRED_MAX];
} mc_auth_entry;

typedef struct mc_auth_table {
    unsigned n; /* 1..MC_AUTH_ENTRIES_MAX once parsed */
    mc_auth_entry e[MC_AUTH_ENTRIES_MAX];
} mc_auth_table;

/* Parses a file's contents into *t (zeroed first). Returns 0, or MC_AUTH_EFORMAT with
 * "line N: <what is wrong>" (or "no user:password line") in err. */
int mc_auth_parse(const char *data, size_t len, mc_auth_table *t, char *err, size_t errlen);

/* Reads and parses the file at path. *mode gets the file's permission bits (the caller warns
 * when others may read it). Returns 0, MC_AUTH_EIO ("<path>: <strerror>") or MC_AUTH_EFORMAT
 * ("<path>: line N: ..."), the reason in err. */
int mc_auth_load(const char *path, mc_auth_table *t, unsigned *mode, char *err, size_t errlen);

/* True when user[0..ulen) and pass[0..plen) are one of the table's entries. Constant time in
 * the credentials' bytes and lengths: every byte of every slot is compared, whatever matches. */
bool mc_auth_match(const mc_auth_table *t, const char *user, size_t ulen, const char *pass,
                   size_t plen);

/* Clears a table (it held passwords). */
void mc_auth_clear(mc_auth_table *t);

#endif
