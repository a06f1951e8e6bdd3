/* memcached ASCII authentication (-Y, cache.memcached_auth_file): the auth file's parser and
 * loader (proto/memcache_auth.h), the constant-time check, and the protocol before
 * authentication (proto/memcache.c auth_line_in / auth_data_in) on a connection without a socket
 * (net/conn_fake.h).
 *
 *   file:   what memcached 1.6.18's authfile.c accepts is read the same (its own t/authfile,
 *           "\r\n" ends, a last line without one, ':' in a password, a tab, a repeated user, 8
 *           entries, a 254-byte line); what it refuses or would silently drop or never match is
 *           refused with the line's number and never the line's bytes; the loader's I/O errors.
 *   match:  exact user and password only (prefixes, extensions, crossed pairs, empty slots).
 *   stream: sessions whose answers are memcached's (checked against the real one by
 *           test/integration/test_memcache_auth.py), the same whether the bytes come in one read,
 *           byte by byte, or cut at every position; the 2048-byte line and the 16 KiB block that
 *           close the connection, as memcached's read buffer does.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "memcache_fixture.h"
#include "net/conn_fake.h"
#include "proto/memcache.h"
#include "proto/memcache_auth.h"

#define LIT(s) (s), sizeof(s) - 1

/* ---- file ------------------------------------------------------------------------------------ */

static bool has(const mc_auth_table *t, const char *user, const char *pass)
{
    return mc_auth_match(t, user, strlen(user), pass, strlen(pass));
}

static void parse_ok(const char *data, size_t len, mc_auth_table *t)
{
    char err[256] = "";
    int rc = mc_auth_parse(data, len, t, err, sizeof err);
    ck_assert_msg(rc == 0, "refused: %s", err);
}

START_TEST(test_parse_memcached_authfile)
{
    mc_auth_table t;
    parse_ok(LIT("foo:bar\nbaaaz:quux\n"), &t); /* memcached 1.6.18's t/authfile */
    ck_assert_uint_eq(t.n, 2);
    ck_assert(has(&t, "foo", "bar"));
    ck_assert(has(&t, "baaaz", "quux"));
    ck_assert(!has(&t, "foo", "quux"));
    ck_assert(!has(&t, "baaaz", "bar"));
}
END_TEST

START_TEST(test_parse_accepts)
{
    mc_auth_table t;
    parse_ok(LIT("foo:bar\r\nx:y\r\n"), &t); /* CRLF: the password ends before the CR */
    ck_assert_uint_eq(t.n, 2);
    ck_assert(has(&t, "foo", "bar"));
    ck_assert(!has(&t, "foo", "bar\r"));
    ck_assert(has(&t, "x", "y"));
    parse_ok(LIT("foo:bar"), &t); /* no line end: read whole (memcached 1.6.18 drops the 'r') */
    ck_assert(has(&t, "foo", "bar"));
    ck_assert(!has(&t, "foo", "ba"));
    parse_ok(LIT("a:b\nfoo:bar"), &t);
    ck_assert(has(&t, "foo", "bar"));
    parse_ok(LIT("foo:b:a:r\n"), &t); /* the first ':' splits */
    ck_assert(has(&t, "foo", "b:a:r"));
    ck_assert(!has(&t, "foo:b", "a:r"));
    parse_ok(LIT("t\tab:pa\tss\n"), &t); /* tabs are bytes like others: the client splits on ' ' */
    ck_assert(has(&t, "t\tab", "pa\tss"));
    parse_ok(LIT("app:old\napp:new\n"), &t); /* a rotation: both passwords */
    ck_assert(has(&t, "app", "old"));
    ck_assert(has(&t, "app", "new"));
    parse_ok(LIT("a:1\nb:2\nc:3\nd:4\ne:5\nf:6\ng:7\nh:8\n"), &t);
    ck_assert_uint_eq(t.n, MC_AUTH_ENTRIES_MAX);
    ck_assert(has(&t, "h", "8"));
    char line[MC_AUTH_LINE_MAX + 2];
    memset(line, 'p', sizeof line);
    memcpy(line, "user:", 5);
    line[MC_AUTH_LINE_MAX] = '\n';
    parse_ok(line, MC_AUTH_LINE_MAX + 1, &t);
    char pass[MC_AUTH_LINE_MAX];
    memset(pass, 'p', sizeof pass);
    ck_assert(mc_auth_match(&t, "user", 4, pass, MC_AUTH_LINE_MAX - 5));
    ck_assert(!mc_auth_match(&t, "user", 4, pass, MC_AUTH_LINE_MAX - 6));
}
END_TEST

static const struct {
    const char *data;
    size_t len;
    const char *err;
} BAD[] = {
    {LIT(""), "no user:password line"},
    {LIT("\n"), "line 1: empty line"},
    {LIT("\r\n"), "line 1: empty line"},
    {LIT("foo:bar\n\n"), "line 2: empty line"},
    {LIT("foo:bar\nfoobar\n"), "line 2: no ':'"},
    {LIT(":bar\n"), "line 1: empty user name"},
    {LIT("foo:\n"), "line 1: empty password"},
    {LIT("foo:\r\n"), "line 1: empty password"},
    {LIT("fo o:bar\n"), "line 1: a space in the user name"},
    {LIT("foo:SECRET word\n"), "line 1: a space in the password"},
    {LIT("foo:SECRET \n"), "line 1: a space in the password"},
    {LIT("foo:SEC\0RET\n"), "line 1: a NUL byte"},
    {LIT("foo:SEC\rRET\n"), "line 1: a carriage return inside the line"},
    {LIT("foo:SECRET\r\r\n"), "line 1: a carriage return inside the line"},
    {LIT("a:1\nb:2\nc:3\nd:4\ne:5\nf:6\ng:7\nh:8\ni:9\n"), "line 9: more than 8 entries"},
};

START_TEST(test_parse_refuses)
{
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        mc_auth_table t;
        char err[256] = "";
        int rc = mc_auth_parse(BAD[i].data, BAD[i].len, &t, err, sizeof err);
        ck_assert_msg(rc == MC_AUTH_EFORMAT, "case %zu accepted", i);
        ck_assert_msg(strncmp(err, BAD[i].err, strlen(BAD[i].err)) == 0,
                      "case %zu: \"%s\", expected \"%s...\"", i, err, BAD[i].err);
        ck_assert_msg(!strstr(err, "SEC"), "case %zu: the error quotes the password: %s", i, err);
        ck_assert_uint_eq(t.n, 0);
    }
    /* a line longer than memcached's entry buffer, with its line number */
    char data[8 + MC_AUTH_LINE_MAX + 2];
    memcpy(data, "foo:bar\n", 8);
    memset(data + 8, 'x', MC_AUTH_LINE_MAX + 1);
    data[4 + 4] = 'u';
    data[8 + 1] = ':';
    data[sizeof data - 1] = '\n';
    mc_auth_table t;
    char err[256] = "";
    ck_assert_int_eq(mc_auth_parse(data, sizeof data, &t, err, sizeof err), MC_AUTH_EFORMAT);
    ck_assert_msg(strncmp(err, "line 2: longer than 254 bytes", 29) == 0, "%s", err);
}
END_TEST

START_TEST(test_match)
{
    mc_auth_table t;
    parse_ok(LIT("foo:bar\nbaaaz:quux\n"), &t);
    ck_assert(!has(&t, "fo", "bar"));
    ck_assert(!has(&t, "fooo", "bar"));
    ck_assert(!has(&t, "foo", "ba"));
    ck_assert(!has(&t, "foo", "barr"));
    ck_assert(!has(&t, "Foo", "bar"));
    ck_assert(!has(&t, "", "")); /* the free slots */
    ck_assert(!has(&t, "foo", ""));
    ck_assert(!mc_auth_match(&t, "foo", 3, "bar\0", 4)); /* lengths, not C strings */
    char big[MC_AUTH_CRED_MAX + 1];
    memset(big, 'a', sizeof big);
    ck_assert(!mc_auth_match(&t, big, sizeof big, "bar", 3));
    ck_assert(!mc_auth_match(&t, "foo", 3, big, sizeof big));
}
END_TEST

static char tmpdir[64];

static void write_file(const char *path, const char *data, size_t len, mode_t mode)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(path, mode), 0);
}

static void file_setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sf_mcauth.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void file_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_load)
{
    char path[128], err[512];
    mc_auth_table t;
    unsigned mode;
    snprintf(path, sizeof path, "%s/auth", tmpdir);
    write_file(path, LIT("foo:bar\nbaaaz:quux\n"), 0640);
    ck_assert_int_eq(mc_auth_load(path, &t, &mode, err, sizeof err), 0);
    ck_assert_uint_eq(t.n, 2);
    ck_assert(has(&t, "baaaz", "quux"));
    ck_assert_uint_eq(mode, 0640);
    chmod(path, 0644);
    ck_assert_int_eq(mc_auth_load(path, &t, &mode, err, sizeof err), 0);
    ck_assert_uint_eq(mode & S_IROTH, S_IROTH);

    write_file(path, LIT("foo:bar\nSECRET\n"), 0600);
    ck_assert_int_eq(mc_auth_load(path, &t, &mode, err, sizeof err), MC_AUTH_EFORMAT);
    char want[256];
    snprintf(want, sizeof want, "%s: line 2: no ':'", path);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    ck_assert_uint_eq(t.n, 0);

    write_file(path, "", 0, 0600);
    ck_assert_int_eq(mc_auth_load(path, &t, &mode, err, sizeof err), MC_AUTH_EFORMAT);
    ck_assert_msg(strstr(err, "no user:password line"), "%s", err);

    static char big[MC_AUTH_FILE_MAX + 1];
    memset(big, 'a', sizeof big);
    write_file(path, big, sizeof big, 0600);
    ck_assert_int_eq(mc_auth_load(path, &t, &mode, err, sizeof err), MC_AUTH_EFORMAT);
    ck_assert_msg(strstr(err, "larger than 4096 bytes"), "%s", err);

    snprintf(path, sizeof path, "%s/none", tmpdir);
    ck_assert_int_eq(mc_auth_load(path, &t, &mode, err, sizeof err), MC_AUTH_EIO);
    ck_assert_msg(strstr(err, strerror(ENOENT)), "%s", err);
    ck_assert_int_eq(mc_auth_load(tmpdir, &t, &mode, err, sizeof err), MC_AUTH_EIO);
    ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
}
END_TEST

/* ---- stream ---------------------------------------------------------------------------------- */

static mc_fixture server;

typedef mc_fixture_out out;

static void stream_setup(void)
{
    file_setup();
    char path[128];
    snprintf(path, sizeof path, "%s/authfile", tmpdir);
    write_file(path, LIT("foo:bar\nbaaaz:quux\n"), 0600);
    mc_fixture_config(&server);
    snprintf(server.config.cache.memcached_auth_file, CFG_PATH_MAX, "%s", path);
    mc_fixture_start(&server);
}

static void stream_teardown(void)
{
    mc_fixture_free(&server);
    file_teardown();
}

/* One connection fed `in` cut before each of cuts[0..ncuts); what it answered, and whether it
 * is still open. */
static bool run(const char *in, size_t len, const size_t *cuts, size_t ncuts, out *o)
{
    o->n = 0;
    mc_fixture_result r = mc_fixture_run(&server, in, len, cuts, ncuts, SIZE_MAX, mc_fixture_collect, o);
    ck_assert_msg(r.rc == CONN_FAKE_OK || r.rc == CONN_FAKE_CLOSED, "feed: %d", r.rc);
    return r.open;
}

/* The answer is `want` (and the connection open) in one read, byte by byte, and cut in two at
 * every position. */
static void session(const char *in, size_t len, const char *want, size_t wlen)
{
    static out o;
    size_t *cuts = malloc((len ? len : 1) * sizeof *cuts);
    ck_assert_ptr_nonnull(cuts);
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    for (int mode = 0; mode < 2; mode++) {
        bool open = run(in, len, mode ? cuts : NULL, mode ? len - 1 : 0, &o);
        ck_assert_msg(open, "closed (%s)", mode ? "byte by byte" : "one read");
        ck_assert_msg(o.n == wlen && memcmp(o.buf, want, wlen) == 0,
                      "%s: got \"%.*s\", want \"%s\"", mode ? "byte by byte" : "one read", (int)o.n,
                      o.buf, want);
    }
    for (size_t at = 1; at < len; at++) {
        run(in, len, &at, 1, &o);
        ck_assert_msg(o.n == wlen && memcmp(o.buf, want, wlen) == 0,
                      "cut at %zu: got \"%.*s\", want \"%s\"", at, (int)o.n, o.buf, want);
    }
    free(cuts);
}
#define SESSION(in, want) session(LIT(in), LIT(want))

#define UNAUTH "CLIENT_ERROR unauthenticated\r\n"

START_TEST(test_ascii_auth_t)
{
    /* memcached's t/ascii-auth.t, one connection */
    SESSION("set foo 0 0 2\r\nhi\r\nget foo\r\nset foo 0 0 7\r\nfoo bab\r\n"
            "set foo 0 0 7\r\nfoo bar\r\nset toast 0 0 2\r\nhi\r\nget toast\r\n",
            "CLIENT_ERROR bad authentication token format\r\n" UNAUTH
            "CLIENT_ERROR authentication failure\r\nSTORED\r\nSTORED\r\n"
            "VALUE toast 0 2\r\nhi\r\nEND\r\n");
    SESSION("set foo 0 0 10\r\nbaaaz quux\r\nset toast2 0 0 2\r\nho\r\nget toast2\r\n",
            "STORED\r\nSTORED\r\nVALUE toast2 0 2\r\nho\r\nEND\r\n");
}
END_TEST

START_TEST(test_every_command_refused)
{
    SESSION("get foo\r\ngets foo\r\nversion\r\nstats\r\nquit\r\nmn\r\nmg foo v\r\nms foo 2\r\n"
            "delete foo\r\nflush_all\r\nshutdown\r\nwatch\r\nGET / HTTP/1.1\r\nset foo 0 0\r\n"
            "SET foo 0 0 7\r\nset foo 0 0 x\r\nset foo 0 0 -1\r\nadd foo 0 0 7\r\n\r\n \r\n",
            UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH
                UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH UNAUTH);
    /* a lone "\n" waits for a second byte, as memcached; then each empty line is refused */
    SESSION("\n\nget a\n", UNAUTH UNAUTH UNAUTH);
    /* still refused after a failure and a badly terminated block */
    SESSION("set a 0 0 7\r\nfoo baz\r\nset a 0 0 7\r\nfoo barXYget a\r\n",
            "CLIENT_ERROR authentication failure\r\n"
            "CLIENT_ERROR bad command line termination\r\n" UNAUTH);
}
END_TEST

START_TEST(test_credentials_block)
{
    /* key, flags and exptime are not read; noreply does not silence the answer */
    SESSION("set whatever x y 7 noreply\r\nfoo bar\r\nmn\r\n", "STORED\r\nMN\r\n");
    SESSION("set a 0 0 7\nfoo bar\r\nmn\r\n", "STORED\r\nMN\r\n"); /* LF-only line */
    /* blanks around and between the tokens; more tokens are ignored */
    SESSION("set a 0 0 14\r\n   foo   bar  \r\nmn\r\n", "STORED\r\nMN\r\n");
    SESSION("set a 0 0 13\r\nfoo bar extra\r\nmn\r\n", "STORED\r\nMN\r\n");
    /* the block is a C string: a NUL ends it */
    SESSION("set a 0 0 9\r\nfoo bar\0x\r\nmn\r\n", "STORED\r\nMN\r\n");
    SESSION("set a 0 0 8\r\nfoo\0 bar\r\n", "CLIENT_ERROR bad authentication token format\r\n");
    /* the tokens are the user and password exactly (a CR inside is a byte of the password) */
    SESSION("set a 0 0 8\r\nfoo bar\r\r\n", "CLIENT_ERROR authentication failure\r\n");
    SESSION("set a 0 0 7\r\nfoo\tbar\r\n", "CLIENT_ERROR bad authentication token format\r\n");
    SESSION("set a 0 0 0\r\n\r\n", "CLIENT_ERROR bad authentication token format\r\n");
    /* the length read as memcached's safe_strtoul into 32 bits: 2^32 + 7 is 7; "+7" and "07" */
    SESSION("set a 0 0 4294967303\r\nfoo bar\r\nmn\r\n", "STORED\r\nMN\r\n");
    SESSION("set a 0 0 +7\r\nfoo bar\r\nmn\r\n", "STORED\r\nMN\r\n");
    /* the second user; a user's password does not open another's entry */
    SESSION("set a 0 0 8\r\nfoo quux\r\nset a 0 0 10\r\nbaaaz quux\r\nmn\r\n",
            "CLIENT_ERROR authentication failure\r\nSTORED\r\nMN\r\n");
    /* a long user (no entry is that long) */
    static char in[1200];
    int n = snprintf(in, sizeof in, "set a 0 0 1000\r\n");
    memset(in + n, 'u', 996);
    memcpy(in + n + 996, " bar\r\n", 6);
    session(in, (size_t)n + 1002, LIT("CLIENT_ERROR authentication failure\r\n"));
}
END_TEST

START_TEST(test_counters)
{
    static out o;
    ck_assert(run(LIT("set a 0 0 7\r\nfoo baz\r\nset a 0 0 1\r\nx\r\nset a 0 0 7\r\nfoo bar\r\n"
                      "stats\r\nstats settings\r\n"),
                  NULL, 0, &o));
    o.buf[o.n < sizeof o.buf ? o.n : sizeof o.buf - 1] = '\0';
    /* a failure and a success; the badly formed block is not a check */
    ck_assert_msg(strstr(o.buf, "STAT auth_cmds 2\r\n"), "%s", o.buf);
    ck_assert_msg(strstr(o.buf, "STAT auth_errors 1\r\n"), "%s", o.buf);
    char want[CFG_PATH_MAX + 64];
    snprintf(want, sizeof want, "STAT auth_enabled_ascii %s\r\n",
             server.config.cache.memcached_auth_file);
    ck_assert_msg(strstr(o.buf, want), "%s", o.buf);
    ck_assert_uint_eq(memcache_server_auth_entries(server.app.mc), 2);
}
END_TEST

START_TEST(test_closes)
{
    static char in[20000];
    static out o;
    /* a line over 2048 bytes without its newline closes, whatever it is (no get exception) */
    memset(in, 'a', 2049);
    memcpy(in, "get ", 4);
    ck_assert(run(in, 2048, NULL, 0, &o));
    ck_assert(!run(in, 2049, NULL, 0, &o));
    ck_assert_uint_eq(o.n, 0);
    /* with its newline in the same read: answered up to memcached's 16 KiB read buffer */
    memset(in, 'a', 16383);
    memcpy(in, "get ", 4);
    in[16383] = '\n';
    ck_assert(run(in, 16384, NULL, 0, &o));
    ck_assert_msg(o.n == 30 && memcmp(o.buf, UNAUTH, 30) == 0, "%.*s", (int)o.n, o.buf);
    in[16383] = 'a';
    in[16384] = '\n';
    ck_assert(!run(in, 16385, NULL, 0, &o));
    ck_assert_uint_eq(o.n, 0);
    /* a block over memcached's 16 KiB read buffer: closed when a byte comes beyond 16384 */
    int n = snprintf(in, sizeof in, "set a 0 0 16383\r\n");
    memset(in + n, 'b', sizeof in - (size_t)n);
    ck_assert(run(in, (size_t)n + 16384, NULL, 0, &o));
    ck_assert(!run(in, (size_t)n + 16385, NULL, 0, &o));
    ck_assert_uint_eq(o.n, 0);
    size_t at = (size_t)n + 16384;
    ck_assert(!run(in, (size_t)n + 16385, &at, 1, &o));
    /* the largest length: memcached's uint32 + 2 wraps to 1 there and reads before its buffer
     * (not copied); here it is a block too long like any other */
    n = snprintf(in, sizeof in, "set a 0 0 4294967295\r\n");
    memset(in + n, 'b', sizeof in - (size_t)n);
    ck_assert(run(in, (size_t)n + 16384, NULL, 0, &o));
    ck_assert(!run(in, (size_t)n + 16385, NULL, 0, &o));
    /* 16382 bytes and its "\r\n" fit */
    n = snprintf(in, sizeof in, "set a 0 0 16382\r\n");
    memset(in + n, 'b', 16382);
    memcpy(in + n + 16382, "\r\n", 2);
    ck_assert(run(in, (size_t)n + 16384, NULL, 0, &o));
    ck_assert_msg(o.n == 46 &&
                      memcmp(o.buf, "CLIENT_ERROR bad authentication token format\r\n", 46) == 0,
                  "%.*s", (int)o.n, o.buf);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("memcache_auth");
    TCase *tc = tcase_create("file");
    tcase_add_checked_fixture(tc, file_setup, file_teardown);
    tcase_add_test(tc, test_parse_memcached_authfile);
    tcase_add_test(tc, test_parse_accepts);
    tcase_add_test(tc, test_parse_refuses);
    tcase_add_test(tc, test_match);
    tcase_add_test(tc, test_load);
    suite_add_tcase(s, tc);
    tc = tcase_create("stream");
    tcase_add_checked_fixture(tc, stream_setup, stream_teardown);
    tcase_add_test(tc, test_ascii_auth_t);
    tcase_add_test(tc, test_every_command_refused);
    tcase_add_test(tc, test_credentials_block);
    tcase_add_test(tc, test_counters);
    tcase_add_test(tc, test_closes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
