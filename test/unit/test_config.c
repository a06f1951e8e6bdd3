/* Configuration: defaults, every validation rule, layer precedence, argv parsing, printing.
 *
 * Each rule is asserted on the return value AND on the message naming the source and the key
 * path, since the message is what an operator reads. Files go to a mkdtemp directory and the
 * environment is cleaned around each test (SNOWFLAKED_*, POD_NAME, POD_INDEX).
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "config/config.h"

#define NOW_MS UINT64_C(1717200000000) /* 2024-06-01T00:00:00Z */

extern char **environ;

/* ---- fixture: temp dir and environment ------------------------------------------------------- */

static char tmpdir[64];
static char files[16][128];
static int nfiles;

static void clear_env(void)
{
    char names[64][128];
    int n = 0;
    for (char **e = environ; *e && n < 64; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if ((strncmp(*e, "SNOWFLAKED_", 11) == 0 || strncmp(*e, "POD_", 4) == 0) && len < 128) {
            memcpy(names[n], *e, len);
            names[n++][len] = '\0';
        }
    }
    for (int i = 0; i < n; i++)
        unsetenv(names[i]);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_config.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    nfiles = 0;
    clear_env();
}

static void teardown(void)
{
    for (int i = 0; i < nfiles; i++)
        unlink(files[i]);
    rmdir(tmpdir);
    clear_env();
}

/* Writes len bytes to tmpdir/name and returns the path (valid until teardown). */
static const char *write_file_n(const char *name, const char *text, size_t len)
{
    ck_assert_int_lt(nfiles, 16);
    char *path = files[nfiles];
    snprintf(path, sizeof files[0], "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    for (int i = 0; i < nfiles; i++)
        if (strcmp(files[i], path) == 0)
            return files[i];
    return files[nfiles++];
}

static const char *write_file(const char *name, const char *text)
{
    return write_file_n(name, text, strlen(text));
}

/* ---- helpers --------------------------------------------------------------------------------- */

/* Parses a NULL-terminated argument list (program name implied) and loads. */
static int load_argv(cfg *c, char *err, size_t errlen, ...)
{
    char *argv[CFG_MAX_SETS + 16];
    int argc = 0;
    va_list ap;
    argv[argc++] = (char *)"snowflaked";
    va_start(ap, errlen);
    for (char *a = va_arg(ap, char *); a && argc < (int)(sizeof argv / sizeof argv[0]) - 1;
         a = va_arg(ap, char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    cfg_cli cli;
    if (cfg_parse_args(argc, argv, &cli, err, errlen) != 0)
        return -2; /* distinguishes argv errors from load errors in assertions */
    return cfg_load(c, &cli, NOW_MS, err, errlen);
}

static const char *last_path; /* the file load_json wrote, for source assertions */

static int load_json(const char *json, cfg *c, char *err, size_t errlen)
{
    last_path = write_file("t.json", json);
    return load_argv(c, err, errlen, "-c", (char *)last_path, (char *)NULL);
}

/* err must start with prefix and contain every further string (NULL-terminated list). */
static void expect_err(int line, int rc, const char *err, const char *prefix, ...)
{
    ck_assert_msg(rc == -1, "line %d: expected -1, got %d (err: %s)", line, rc, err);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0,
                  "line %d: error \"%s\" does not start with \"%s\"", line, err, prefix);
    va_list ap;
    va_start(ap, prefix);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        ck_assert_msg(strstr(err, s) != NULL, "line %d: error \"%s\" lacks \"%s\"", line, err, s);
    va_end(ap);
}
#define EXPECT_ERR(rc, err, ...) expect_err(__LINE__, rc, err, __VA_ARGS__, (const char *)NULL)

#define EXPECT_OK(rc, err)                                                                         \
    ck_assert_msg((rc) == 0, "line %d: expected 0, got %d: %s", __LINE__, rc, err)

static char *print_to_string(const cfg *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    cfg_print_json(c, f);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

/* "server.port" -> "SNOWFLAKED_SERVER_PORT" (the documented rule, computed independently). */
static void env_name(const char *path, char *out, size_t outlen)
{
    size_t n = (size_t)snprintf(out, outlen, "SNOWFLAKED_");
    for (; *path && n + 1 < outlen; path++)
        out[n++] = *path == '.' ? '_' : (char)(*path >= 'a' && *path <= 'z' ? *path - 32 : *path);
    out[n] = '\0';
}

/* Every "key" / "section.key" path of a config-shaped JSON object, minus "resolved". */
/* The key paths of a printed or embedded config ("server.port", "snowflake.etcd.ttl_s"), the
 * derived "resolved" object left out. */
static int json_paths_under(const cJSON *obj, const char *prefix, char paths[][64], int n, int max)
{
    for (const cJSON *it = obj->child; it && n < max; it = it->next) {
        char path[64];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", it->string);
        if (!*prefix && strcmp(it->string, "resolved") == 0)
            continue;
        if (cJSON_IsObject(it))
            n = json_paths_under(it, path, paths, n, max);
        else
            snprintf(paths[n++], 64, "%s", path);
    }
    return n;
}

static int json_paths(const cJSON *root, char paths[][64], int max)
{
    return json_paths_under(root, "", paths, 0, max);
}

static bool has_path(char paths[][64], int n, const char *p)
{
    for (int i = 0; i < n; i++)
        if (strcmp(paths[i], p) == 0)
            return true;
    return false;
}

/* ---- defaults -------------------------------------------------------------------------------- */

static void check_default_values(const cfg *c)
{
    ck_assert_str_eq(c->data_dir, "./data");
    ck_assert_str_eq(c->server.host, "127.0.0.1");
    ck_assert_uint_eq(c->server.port, 8080);
    ck_assert_uint_ge(c->server.threads, 1); /* 0 in config.json = online CPUs */
    ck_assert_uint_le(c->server.threads, CFG_MAX_THREADS);
    ck_assert_uint_eq(c->server.backlog, 1024);
    ck_assert_uint_eq(c->server.max_connections, 10000);
    ck_assert_uint_eq(c->server.max_header_bytes, 8192);
    ck_assert_uint_eq(c->server.max_url_bytes, 4096);
    ck_assert_uint_eq(c->server.max_headers, 64);
    ck_assert_uint_eq(c->server.max_body_bytes, 1048576);
    ck_assert_uint_eq(c->server.max_inflight_bytes, 67108864);
    ck_assert_uint_eq(c->server.max_requests_per_connection, 10000);
    ck_assert_uint_eq(c->server.max_pipeline, 32);
    ck_assert_uint_eq(c->server.header_timeout_ms, 10000);
    ck_assert_uint_eq(c->server.idle_timeout_ms, 60000);
    ck_assert_uint_eq(c->server.write_timeout_ms, 30000);
    ck_assert_uint_eq(c->server.shutdown_grace_ms, 10000);
    ck_assert(c->server.tcp_nodelay && c->server.reuseport);
    ck_assert_uint_eq(c->snowflake.epoch_ms, UINT64_C(1577836800000));
    ck_assert_uint_eq(c->snowflake.time_unit_ms, 1);
    ck_assert_uint_eq(c->snowflake.timestamp_bits, 41);
    ck_assert_uint_eq(c->snowflake.datacenter_bits, 5);
    ck_assert_uint_eq(c->snowflake.worker_bits, 5);
    ck_assert_uint_eq(c->snowflake.sequence_bits, 12);
    ck_assert_uint_eq(c->snowflake.datacenter_id, 0);
    ck_assert_int_eq(c->snowflake.worker_source, CFG_WORKER_NUMBER);
    ck_assert_uint_eq(c->snowflake.worker_id, 0);
    ck_assert_int_eq(c->snowflake.sync, SF_SYNC_ATOMIC);
    ck_assert(!c->snowflake.per_thread_worker_ids);
    ck_assert_uint_eq(c->snowflake.max_backward_ms, 5);
    ck_assert_uint_eq(c->snowflake.max_batch, 4096);
    ck_assert_uint_eq(c->snowflake.lease_ms, 2000);
    ck_assert_int_eq(c->snowflake.default_encoding, SF_ENC_DEC);
    ck_assert_uint_eq(c->snowflake.layout.worker_max, 31);
    ck_assert_uint_eq(c->snowflake.layout.timestamp_shift, 22);
    ck_assert_ptr_null(c->snowflake.layout_preset); /* "custom": the width keys */
    ck_assert(!c->snowflake.node_bits_low && !c->snowflake.layout.node_bits_low);
    ck_assert_uint_eq(c->snowflake.layout.id_bits, 63);
    ck_assert(!c->snowflake.json_numbers);
    ck_assert_uint_eq(c->snowflake.lifetime_warning_years, 20);
    ck_assert_str_eq(c->snowflake.lifetime_warning, "");
    ck_assert(c->cache.enabled && c->cache.persist);
    ck_assert_uint_eq(c->cache.max_memory_bytes, 67108864);
    ck_assert_uint_eq(c->cache.max_item_bytes, 1048576);
    ck_assert_str_eq(c->cache.memcached_host, "127.0.0.1");
    ck_assert_uint_eq(c->cache.memcached_port, 0);
    /* memcached's defaults: no -A, -F, -C, -M; -R 20; a release build (no debugtime) */
    ck_assert(c->cache.evictions && c->cache.memcached_flush_all && c->cache.memcached_cas);
    ck_assert(!c->cache.memcached_shutdown && !c->cache.memcached_debug_commands);
    ck_assert(c->cache.memcached_watch);
    /* memcached without -X; cache_memlimit as memcached (it has no switch) */
    ck_assert(c->cache.memcached_key_listing && c->cache.memcached_memlimit_command);
    ck_assert_uint_eq(c->cache.memcached_reqs_per_event, 20);
    ck_assert(c->echo.http_enabled);
    ck_assert_str_eq(c->echo.tcp_host, "127.0.0.1");
    ck_assert_uint_eq(c->echo.tcp_port, 0);
    ck_assert_int_eq(c->log.level, CFG_LOG_INFO);
    ck_assert_str_eq(c->log.file, "");
    ck_assert(!c->log.access_log);
    ck_assert_int_eq(c->log.format, CFG_LOG_TEXT);
    ck_assert_str_eq(c->auth.token, "");
    ck_assert_str_eq(c->auth.token_file, "");
    ck_assert(!c->auth.protect_reads);
}

START_TEST(test_embedded_defaults)
{
    cfg c;
    char err[512];
    ck_assert_uint_eq(strlen(cfg_embedded_json), cfg_embedded_json_len);
    int rc = cfg_load(&c, NULL, NOW_MS, err, sizeof err);
    EXPECT_OK(rc, err);
    check_default_values(&c);
    ck_assert_str_eq(c.source, "defaults");
    ck_assert_str_eq(c.snowflake.worker_origin, "defaults");
    /* no argv at all: same thing */
    rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_OK(rc, err);
    check_default_values(&c);
}
END_TEST

START_TEST(test_default_file_loads)
{
    cfg c;
    char err[512];
    int rc = load_json(cfg_embedded_json, &c, err, sizeof err);
    EXPECT_OK(rc, err);
    check_default_values(&c);
    ck_assert_str_eq(c.source, last_path);
    rc = load_json("{}", &c, err, sizeof err); /* omitted keys keep their defaults */
    EXPECT_OK(rc, err);
    check_default_values(&c);
}
END_TEST

/* config.json is the full default: every key the loader knows (= every key it prints) is in it,
 * and every key in it is known. */
START_TEST(test_every_key_in_config_json)
{
    static char printed[128][64], embedded[128][64];
    cfg c;
    char err[512];
    ck_assert_int_eq(cfg_load(&c, NULL, NOW_MS, err, sizeof err), 0);
    char *out = print_to_string(&c);
    cJSON *p = cJSON_Parse(out), *e = cJSON_Parse(cfg_embedded_json);
    ck_assert_msg(p != NULL, "printed config is not JSON:\n%s", out);
    ck_assert_ptr_nonnull(e);
    int np = json_paths(p, printed, 128), ne = json_paths(e, embedded, 128);
    ck_assert_int_ge(np, 40);
    for (int i = 0; i < np; i++)
        ck_assert_msg(has_path(embedded, ne, printed[i]), "%s missing from config.json",
                      printed[i]);
    for (int i = 0; i < ne; i++)
        ck_assert_msg(has_path(printed, np, embedded[i]), "%s not in the schema", embedded[i]);
    ck_assert_int_eq(np, ne);
    cJSON_Delete(p);
    cJSON_Delete(e);
    free(out);
}
END_TEST

/* Every schema key is read from SNOWFLAKED_<PATH> and from --set: a value that is invalid for
 * every type (2000 x's: too long for any string, not a number, bool, enum, epoch or worker id)
 * must be rejected with the variable or flag and the path in the message. */
START_TEST(test_every_key_has_env_and_set)
{
    static char paths[128][64];
    static char junk[2001], setarg[2100];
    cfg c;
    char err[512], name[96], prefix[192];
    ck_assert_int_eq(cfg_load(&c, NULL, NOW_MS, err, sizeof err), 0);
    char *out = print_to_string(&c);
    cJSON *p = cJSON_Parse(out);
    ck_assert_ptr_nonnull(p);
    int n = json_paths(p, paths, 128);
    memset(junk, 'x', sizeof junk - 1);
    for (int i = 0; i < n; i++) {
        env_name(paths[i], name, sizeof name);
        ck_assert_int_eq(setenv(name, junk, 1), 0);
        int rc = cfg_load(&c, NULL, NOW_MS, err, sizeof err);
        ck_assert_int_lt(snprintf(prefix, sizeof prefix, "environment %s: %s: ", name, paths[i]),
                         (int)sizeof prefix);
        EXPECT_ERR(rc, err, prefix);
        unsetenv(name);

        ck_assert_int_lt(snprintf(setarg, sizeof setarg, "%s=%s", paths[i], junk),
                         (int)sizeof setarg);
        rc = load_argv(&c, err, sizeof err, "--set", setarg, (char *)NULL);
        ck_assert_int_lt(snprintf(prefix, sizeof prefix, "flag --set: %s: ", paths[i]),
                         (int)sizeof prefix);
        EXPECT_ERR(rc, err, prefix);
    }
    cJSON_Delete(p);
    free(out);
}
END_TEST

/* --check-config output, minus "resolved", is itself a valid config that loads to the same. */
START_TEST(test_print_round_trip)
{
    cfg c, c2;
    char err[512];
    setenv("POD_NAME", "snowflaked-7", 1);
    int rc = load_json("{\"server\":{\"port\":9000,\"threads\":3},"
                       "\"snowflake\":{\"epoch\":\"2021-03-04T05:06:07.089Z\",\"worker_id\":"
                       "\"ordinal\",\"sync\":\"mutex\",\"default_encoding\":\"base62\"},"
                       "\"log\":{\"level\":\"warn\",\"file\":\"a \\\"quoted\\\" \\\\ path\\t\"},"
                       "\"auth\":{\"token\":\"s3cret-s3cret-s3cret\"}}",
                       &c, err, sizeof err);
    EXPECT_OK(rc, err);
    char *out = print_to_string(&c);
    ck_assert_msg(strstr(out, "s3cret") == NULL, "token printed in clear:\n%s", out);
    ck_assert_msg(strstr(out, "\"token\": \"***\"") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\"epoch\": \"2021-03-04T05:06:07.089Z\"") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\"worker_id\": \"ordinal\"") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\"port\": 9000") != NULL, "%s", out);
    cJSON *root = cJSON_Parse(out);
    ck_assert_msg(root != NULL, "not JSON:\n%s", out);
    cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "resolved");
    ck_assert_ptr_nonnull(res);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(res, "worker_id")->valueint, 7);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(res, "worker_id_origin")->valuestring,
                     "ordinal of POD_NAME=snowflaked-7");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(res, "threads")->valueint, 3);
    ck_assert(cJSON_GetObjectItemCaseSensitive(res, "id_cap_per_second")->valuedouble == 4096000);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(res, "lifetime_ends")->valuestring,
                     "2090-11-08T20:53:42.641Z");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(res, "source")->valuestring, last_path);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "resolved");
    char *sections = cJSON_Print(root);
    const char *path2 = write_file("round.json", sections);
    /* the token reads "***": it must be given again, never started without by mistake */
    rc = load_argv(&c2, err, sizeof err, "-c", (char *)path2, (char *)NULL);
    EXPECT_ERR(rc, err, path2, ": auth.token: ", "\"***\" is the token --check-config hides",
               "SNOWFLAKED_AUTH_TOKEN");
    rc = load_argv(&c2, err, sizeof err, "-c", (char *)path2, "--set",
                   "auth.token=the-real-one-back-in", (char *)NULL);
    EXPECT_OK(rc, err);
    char *out2 = print_to_string(&c2);
    /* the sections are identical; only "resolved" (source) differs */
    *strstr(out, "\"resolved\"") = '\0';
    *strstr(out2, "\"resolved\"") = '\0';
    ck_assert_str_eq(out, out2);
    ck_assert_str_eq(c2.log.file, "a \"quoted\" \\ path\t");
    ck_assert_str_eq(c2.auth.token, "the-real-one-back-in");
    cJSON_Delete(root);
    free(sections);
    free(out);
    free(out2);
}
END_TEST

/* ---- one row per rule: a file that must be refused ------------------------------------------- */

typedef struct bad_case {
    const char *json;
    const char *key;  /* path the message must name right after the source; NULL = none */
    const char *frag; /* further text the message must contain */
} bad_case;

static const bad_case bad_files[] = {
    /* document structure */
    {"{", NULL, "not valid JSON: syntax error at line 1"},
    {"{\n  \"server\": {\n    \"port\": 80,\n  }\n}", NULL, "line 4"},
    {"{} x", NULL, "not valid JSON"},
    {"", NULL, "empty"},
    {"  \n\t ", NULL, "empty"},
    {"[]", NULL, "top level must be a JSON object, got an array"},
    {"null", NULL, "top level must be a JSON object, got null"},
    {"5", NULL, "top level must be a JSON object, got 5"},
    {"\"x\"", NULL, "top level must be a JSON object"},
    {"{\"bogus\":1}", "bogus", "unknown key"},
    {"{\"server\":{\"bogus\":1}}", "server.bogus", "unknown key"},
    {"{\"server.port\":1}", "server.port", "unknown key"},
    {"{\"Server\":{}}", "Server", "unknown key"},
    {"{\"server\":{\"Port\":1}}", "server.Port", "unknown key"},
    {"{\"server\":5}", "server", "must be an object, got 5"},
    {"{\"snowflake\":[]}", "snowflake", "must be an object, got an array"},
    {"{\"log\":null}", "log", "must be an object, got null"},
    {"{\"auth\":\"x\"}", "auth", "must be an object, got a string \"x\""},
    {"{\"data_dir\":{}}", "data_dir", "expected a non-empty string, got an object"},
    {"{\"server\":{\"port\":1,\"port\":2}}", "server.port", "duplicate key"},
    {"{\"cache\":{},\"cache\":{}}", "cache", "duplicate key"},
    {"{\"data_dir\":\"a\\u0000b\"}", NULL, "\\u0000"},
    /* integers */
    {"{\"server\":{\"port\":\"8080\"}}", "server.port",
     "expected an integer 1..65535, got a string"},
    {"{\"server\":{\"port\":true}}", "server.port", "expected an integer 1..65535, got true"},
    {"{\"server\":{\"port\":null}}", "server.port", "got null"},
    {"{\"server\":{\"port\":[8080]}}", "server.port", "got an array"},
    {"{\"server\":{\"port\":70000}}", "server.port", "must be an integer 1..65535, got 70000"},
    {"{\"server\":{\"port\":0}}", "server.port", "got 0"},
    {"{\"server\":{\"port\":-1}}", "server.port", "got -1"},
    {"{\"server\":{\"port\":1.5}}", "server.port", "got 1.5"},
    {"{\"server\":{\"port\":1e300}}", "server.port", "must be an integer 1..65535"},
    {"{\"server\":{\"port\":1e999}}", "server.port", "must be an integer 1..65535"},
    {"{\"server\":{\"port\":18446744073709551616}}", "server.port", "must be an integer"},
    {"{\"server\":{\"threads\":257}}", "server.threads", "0..256"},
    {"{\"server\":{\"backlog\":0}}", "server.backlog", "1..65535"},
    {"{\"server\":{\"max_connections\":0}}", "server.max_connections", "got 0"},
    {"{\"server\":{\"max_header_bytes\":1023}}", "server.max_header_bytes", "1024..1048576"},
    {"{\"server\":{\"max_url_bytes\":0}}", "server.max_url_bytes", "got 0"},
    {"{\"server\":{\"max_headers\":0}}", "server.max_headers", "got 0"},
    {"{\"server\":{\"max_body_bytes\":0}}", "server.max_body_bytes", "got 0"},
    {"{\"server\":{\"max_inflight_bytes\":0}}", "server.max_inflight_bytes",
     "65536..1099511627776, got 0"},
    {"{\"server\":{\"max_inflight_bytes\":1099511627777}}", "server.max_inflight_bytes",
     "got 1099511627777"},
    {"{\"server\":{\"max_requests_per_connection\":0}}", "server.max_requests_per_connection",
     "got 0"},
    {"{\"server\":{\"max_pipeline\":0}}", "server.max_pipeline", "got 0"},
    {"{\"server\":{\"header_timeout_ms\":0}}", "server.header_timeout_ms", "got 0"},
    {"{\"server\":{\"idle_timeout_ms\":0}}", "server.idle_timeout_ms", "got 0"},
    {"{\"server\":{\"write_timeout_ms\":86400001}}", "server.write_timeout_ms", "1..86400000"},
    {"{\"server\":{\"shutdown_grace_ms\":0}}", "server.shutdown_grace_ms", "got 0"},
    {"{\"snowflake\":{\"time_unit_ms\":0}}", "snowflake.time_unit_ms", "1..1000"},
    {"{\"snowflake\":{\"time_unit_ms\":1001}}", "snowflake.time_unit_ms", "got 1001"},
    {"{\"snowflake\":{\"timestamp_bits\":64}}", "snowflake.timestamp_bits", "0..63"},
    {"{\"snowflake\":{\"sequence_bits\":-12}}", "snowflake.sequence_bits", "got -12"},
    {"{\"snowflake\":{\"datacenter_id\":-1}}", "snowflake.datacenter_id", "got -1"},
    {"{\"snowflake\":{\"max_backward_ms\":1001}}", "snowflake.max_backward_ms", "0..1000"},
    {"{\"snowflake\":{\"max_batch\":0}}", "snowflake.max_batch", "1..65536"},
    {"{\"snowflake\":{\"max_batch\":65537}}", "snowflake.max_batch", "got 65537"},
    {"{\"snowflake\":{\"lease_ms\":99}}", "snowflake.lease_ms", "100..600000"},
    {"{\"snowflake\":{\"lease_ms\":600001}}", "snowflake.lease_ms", "got 600001"},
    {"{\"cache\":{\"max_memory_bytes\":1048575}}", "cache.max_memory_bytes",
     "1048576..1099511627776"},
    {"{\"cache\":{\"max_memory_bytes\":1099511627777}}", "cache.max_memory_bytes", "got"},
    {"{\"cache\":{\"max_item_bytes\":0}}", "cache.max_item_bytes", "1..1073741824"},
    {"{\"cache\":{\"max_item_bytes\":1073741825}}", "cache.max_item_bytes", "got 1073741825"},
    {"{\"cache\":{\"memcached_port\":65536}}", "cache.memcached_port", "0..65535"},
    {"{\"cache\":{\"memcached_reqs_per_event\":0}}", "cache.memcached_reqs_per_event",
     "1..1000000"},
    {"{\"cache\":{\"memcached_shutdown\":1}}", "cache.memcached_shutdown",
     "expected true or false"},
    {"{\"cache\":{\"shards\":0}}", "cache.shards", "1..4096"},
    {"{\"cache\":{\"shards\":8192}}", "cache.shards", "got 8192"},
    {"{\"echo\":{\"tcp_port\":-1}}", "echo.tcp_port", "got -1"},
    /* booleans */
    {"{\"server\":{\"tcp_nodelay\":\"yes\"}}", "server.tcp_nodelay", "expected true or false"},
    {"{\"server\":{\"reuseport\":1}}", "server.reuseport", "expected true or false, got 1"},
    {"{\"server\":{\"output_high_water_bytes\":1024}}", "server.output_high_water_bytes", "4096"},
    {"{\"server\":{\"linger_ms\":0}}", "server.linger_ms", "1..60000"},
    {"{\"server\":{\"output_limit_bytes\":1048576}}", "server.output_limit_bytes",
     "must be at least output_high_water_bytes + the largest response (1327104)"},
    {"{\"snowflake\":{\"per_thread_worker_ids\":\"true\"}}", "snowflake.per_thread_worker_ids",
     "expected true or false"},
    {"{\"cache\":{\"enabled\":null}}", "cache.enabled", "got null"},
    {"{\"cache\":{\"persist\":0}}", "cache.persist", "expected true or false"},
    {"{\"echo\":{\"http_enabled\":\"on\"}}", "echo.http_enabled", "expected true or false"},
    {"{\"log\":{\"access_log\":[]}}", "log.access_log", "expected true or false"},
    {"{\"auth\":{\"protect_reads\":{}}}", "auth.protect_reads", "expected true or false"},
    /* strings and addresses */
    {"{\"data_dir\":\"\"}", "data_dir", "must not be empty"},
    {"{\"data_dir\":5}", "data_dir", "expected a non-empty string, got 5"},
    {"{\"server\":{\"host\":\"localhost\"}}", "server.host", "numeric IPv4 or IPv6"},
    {"{\"server\":{\"host\":\"\"}}", "server.host", "must not be empty"},
    {"{\"server\":{\"host\":\"256.1.1.1\"}}", "server.host", "got \"256.1.1.1\""},
    {"{\"cache\":{\"memcached_host\":\"cache.local\"}}", "cache.memcached_host", "numeric"},
    {"{\"echo\":{\"tcp_host\":\"::g\"}}", "echo.tcp_host", "numeric"},
    {"{\"log\":{\"file\":5}}", "log.file", "expected a string, got 5"},
    {"{\"auth\":{\"token\":5}}", "auth.token", "expected a string"},
    {"{\"auth\":{\"token_file\":false}}", "auth.token_file", "expected a string, got false"},
    /* enums */
    {"{\"snowflake\":{\"sync\":\"lockfree\"}}", "snowflake.sync",
     "must be one of atomic|spinlock|mutex, got \"lockfree\""},
    {"{\"snowflake\":{\"sync\":1}}", "snowflake.sync", "expected one of atomic|spinlock|mutex"},
    {"{\"snowflake\":{\"default_encoding\":\"base64\"}}", "snowflake.default_encoding",
     "dec|hex|base62|base32"},
    {"{\"log\":{\"level\":\"verbose\"}}", "log.level", "one of debug|info|warn|error"},
    {"{\"log\":{\"level\":\"INFO\"}}", "log.level", "got \"INFO\""},
    {"{\"log\":{\"format\":\"logfmt\"}}", "log.format",
     "must be one of text|json, got \"logfmt\""},
    {"{\"log\":{\"format\":\"JSON\"}}", "log.format", "got \"JSON\""},
    {"{\"log\":{\"format\":true}}", "log.format", "expected one of text|json"},
    /* epoch */
    {"{\"snowflake\":{\"epoch\":\"2020-13-01T00:00:00Z\"}}", "snowflake.epoch", "month"},
    {"{\"snowflake\":{\"epoch\":\"2020-00-01T00:00:00Z\"}}", "snowflake.epoch", "month"},
    {"{\"snowflake\":{\"epoch\":\"2023-02-29T00:00:00Z\"}}", "snowflake.epoch", "day"},
    {"{\"snowflake\":{\"epoch\":\"2020-04-31T00:00:00Z\"}}", "snowflake.epoch", "day"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-00T00:00:00Z\"}}", "snowflake.epoch", "day"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01T24:00:00Z\"}}", "snowflake.epoch", "time of day"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01T00:60:00Z\"}}", "snowflake.epoch", "time of day"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01T00:00:60Z\"}}", "snowflake.epoch", "time of day"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01\"}}", "snowflake.epoch", "YYYY-MM-DDTHH:MM:SS"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01 00:00:00Z\"}}", "snowflake.epoch", "YYYY-MM-DD"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01T00:00:00+01:00\"}}", "snowflake.epoch", "only UTC"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01T00:00:00\"}}", "snowflake.epoch", "only UTC"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01T00:00:00z\"}}", "snowflake.epoch", "only UTC"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01T00:00:00ZZ\"}}", "snowflake.epoch", "only UTC"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01T00:00:00.1234Z\"}}", "snowflake.epoch", "1 to 3"},
    {"{\"snowflake\":{\"epoch\":\"2020-01-01T00:00:00.Z\"}}", "snowflake.epoch", "1 to 3"},
    {"{\"snowflake\":{\"epoch\":\"1969-12-31T23:59:59Z\"}}", "snowflake.epoch", "1970"},
    {"{\"snowflake\":{\"epoch\":\"\"}}", "snowflake.epoch", "got \"\""},
    {"{\"snowflake\":{\"epoch\":-1}}", "snowflake.epoch", "got -1"},
    {"{\"snowflake\":{\"epoch\":1.5}}", "snowflake.epoch", "got 1.5"},
    {"{\"snowflake\":{\"epoch\":253402300800000}}", "snowflake.epoch", "0..253402300799999"},
    {"{\"snowflake\":{\"epoch\":1e20}}", "snowflake.epoch", "must be an ISO-8601"},
    {"{\"snowflake\":{\"epoch\":true}}", "snowflake.epoch", "expected an ISO-8601"},
    /* worker id spelling */
    {"{\"snowflake\":{\"worker_id\":-1}}", "snowflake.worker_id", "got -1"},
    {"{\"snowflake\":{\"worker_id\":1.5}}", "snowflake.worker_id", "got 1.5"},
    {"{\"snowflake\":{\"worker_id\":4294967296}}", "snowflake.worker_id", "got 4294967296"},
    {"{\"snowflake\":{\"worker_id\":\"foo\"}}", "snowflake.worker_id",
     "must be an integer, \"ordinal\", \"env:NAME\" or \"etcd\", got \"foo\""},
    {"{\"snowflake\":{\"worker_id\":\"Ordinal\"}}", "snowflake.worker_id", "got \"Ordinal\""},
    /* worker_id "etcd" (snowflake.etcd, a nested section) */
    {"{\"snowflake\":{\"worker_id\":\"etcd\"}}", "snowflake.etcd.endpoints",
     "required with worker_id"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"https://127.0.0.1:2379\"}}}", "snowflake.etcd.tls.ca_file",
     "required with https:// endpoints"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"https://127.0.0.1:2379,http://127.0.0.1:2380\",\"tls\":{\"ca_file\":\"/ca.pem\"}}}}", "snowflake.etcd.endpoints",
     "every endpoint must be https://host:port when one is"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://127.0.0.1:2379\",\"tls\":{\"ca_file\":\"/ca.pem\"}}}}", "snowflake.etcd.endpoints",
     "use https://"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"https://127.0.0.1:2379\",\"tls\":{\"ca_file\":\"/ca.pem\",\"cert_file\":\"/c.pem\"}}}}", "snowflake.etcd.tls.cert_file",
     "go together"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"127.0.0.1:2379\"}}}", "snowflake.etcd.endpoints",
     "must be http://host:port"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://127.0.0.1\"}}}", "snowflake.etcd.endpoints",
     "port is required"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://127.0.0.1:2379,http://h:70000\"}}}", "snowflake.etcd.endpoints",
     "1..65535"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://127.0.0.1:2379/v3\"}}}", "snowflake.etcd.endpoints",
     "without a path"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"prefix\":\"sf\"}}}", "snowflake.etcd.prefix",
     "must start with /"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"prefix\":\"/sf/\"}}}", "snowflake.etcd.prefix",
     "not end with one"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"ttl_s\":1}}}", "snowflake.etcd.ttl_s",
     "got 1"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"fence_margin_ms\":200}}}", "snowflake.etcd.fence_margin_ms",
     "must be 300..5000 for ttl_s=10"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"fence_margin_ms\":6000}}}", "snowflake.etcd.fence_margin_ms",
     "at most half"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"ttl_s\":2}}}", "snowflake.etcd.request_timeout_ms",
     "below a quarter of the TTL (500 ms"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"worker_max\":32}}}", "snowflake.etcd.worker_max",
     "must be 0..31"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"worker_min\":9,\"worker_max\":8}}}", "snowflake.etcd.worker_min",
     "above worker_max 8"},
    {"{\"snowflake\":{\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"worker_max\":\"most\"}}}", "snowflake.etcd.worker_max",
     "or \"max\", got \"most\""},
    {"{\"snowflake\":{\"etcd\":{\"endpoint\":\"http://h:1\"}}}", "snowflake.etcd.endpoint",
     "unknown key"},
    {"{\"snowflake\":{\"etcd\":[]}}", "snowflake.etcd",
     "must be an object"},
    {"{\"snowflake\":{\"etcd\":{\"ttl_s\":10,\"ttl_s\":11}}}", "snowflake.etcd.ttl_s",
     "duplicate key"},
    {"{\"server\":{\"threads\":4},\"snowflake\":{\"per_thread_worker_ids\":true,\"worker_id\":\"etcd\",\"etcd\":{\"endpoints\":\"http://h:1\",\"worker_min\":30}}}", "snowflake.etcd.worker_min",
     "cannot hold the 4 slots"},

    {"{\"snowflake\":{\"worker_id\":\"env:\"}}", "snowflake.worker_id", "NAME must be"},
    {"{\"snowflake\":{\"worker_id\":\"env:1X\"}}", "snowflake.worker_id", "NAME must be"},
    {"{\"snowflake\":{\"worker_id\":\"env:A-B\"}}", "snowflake.worker_id", "NAME must be"},
    {"{\"snowflake\":{\"worker_id\":true}}", "snowflake.worker_id", "expected an integer"},
    {"{\"snowflake\":{\"worker_id\":\"\\u001b[31mred\"}}", "snowflake.worker_id", "?[31mred"},
    /* cross-field rules */
    {"{\"snowflake\":{\"timestamp_bits\":43}}", "snowflake", "must be at most 63"},
    {"{\"snowflake\":{\"timestamp_bits\":42}}", "snowflake", "got 42+5+5+12"},
    {"{\"snowflake\":{\"timestamp_bits\":46,\"sequence_bits\":7}}", "snowflake",
     "sequence_bits must be at least 8"},
    {"{\"snowflake\":{\"timestamp_bits\":14,\"datacenter_bits\":32}}", "snowflake", "at most 31"},
    {"{\"snowflake\":{\"epoch\":\"2030-01-01T00:00:00Z\"}}", "snowflake", "epoch is in the future"},
    {"{\"snowflake\":{\"epoch\":1717200000001}}", "snowflake", "in the future"},
    {"{\"snowflake\":{\"timestamp_bits\":32,\"sequence_bits\":21}}", "snowflake",
     "runs out of timestamps"},
    {"{\"snowflake\":{\"epoch\":\"1970-01-01T00:00:00Z\",\"timestamp_bits\":40,"
     "\"sequence_bits\":13}}",
     "snowflake", "runs out of timestamps"},
    /* named layouts: the names, a preset's fixed widths, JSON numbers */
    {"{\"snowflake\":{\"layout\":\"foo\"}}", "snowflake.layout",
     "must be one of custom|twitter|sonyflake|js53, got \"foo\""},
    {"{\"snowflake\":{\"layout\":\"Twitter\"}}", "snowflake.layout", "got \"Twitter\""},
    {"{\"snowflake\":{\"layout\":53}}", "snowflake.layout", "expected one of custom|twitter"},
    {"{\"snowflake\":{\"layout\":\"sonyflake\",\"sequence_bits\":12}}", "snowflake.sequence_bits",
     "layout sonyflake fixes it at 8, got 12"},
    {"{\"snowflake\":{\"layout\":\"js53\",\"time_unit_ms\":1}}", "snowflake.time_unit_ms",
     "layout js53 fixes it at 10, got 1"},
    {"{\"snowflake\":{\"layout\":\"js53\",\"timestamp_bits\":41}}", "snowflake.timestamp_bits",
     "layout js53 fixes it at 38, got 41"},
    {"{\"snowflake\":{\"layout\":\"twitter\",\"datacenter_bits\":4,\"worker_bits\":6}}",
     "snowflake.datacenter_bits", "layout twitter fixes it at 5, got 4"},
    {"{\"snowflake\":{\"layout\":\"twitter\",\"node_bits_low\":true}}", "snowflake.node_bits_low",
     "layout twitter fixes it at false, got true"},
    {"{\"snowflake\":{\"layout\":\"sonyflake\",\"node_bits_low\":false}}",
     "snowflake.node_bits_low", "layout sonyflake fixes it at true, got false"},
    {"{\"snowflake\":{\"layout\":\"js53\",\"worker_id\":32}}", "snowflake.worker_id", "0..31"},
    {"{\"snowflake\":{\"layout\":\"js53\",\"datacenter_id\":1}}", "snowflake.datacenter_id",
     "must be 0..0"},
    {"{\"snowflake\":{\"layout\":\"sonyflake\",\"epoch\":\"2030-01-01T00:00:00Z\"}}", "snowflake",
     "in the future"},
    {"{\"snowflake\":{\"json_ids\":\"numbers\"}}", "snowflake.json_ids",
     "must be one of string|number, got \"numbers\""},
    {"{\"snowflake\":{\"json_ids\":\"number\"}}", "snowflake.json_ids",
     "number needs a layout of at most 53 bits (this one has 63)"},
    {"{\"snowflake\":{\"layout\":\"sonyflake\",\"json_ids\":\"number\"}}", "snowflake.json_ids",
     "(this one has 63)"},
    {"{\"snowflake\":{\"timestamp_bits\":40,\"sequence_bits\":4,\"worker_bits\":4,"
     "\"time_unit_ms\":10,\"json_ids\":\"number\"}}",
     "snowflake", "sequence_bits must be at least 8"},
    {"{\"snowflake\":{\"timestamp_bits\":38,\"datacenter_bits\":1,\"worker_bits\":5,"
     "\"sequence_bits\":10,\"time_unit_ms\":10,\"json_ids\":\"number\"}}",
     "snowflake.json_ids", "(this one has 54)"},
    {"{\"snowflake\":{\"layout\":\"js53\",\"json_ids\":\"number\",\"default_encoding\":\"hex\"}}",
     "snowflake.json_ids", "number needs default_encoding dec, got hex"},
    {"{\"snowflake\":{\"lifetime_warning_years\":9}}", "snowflake.lifetime_warning_years",
     "must be an integer 10..1000, got 9"},
    {"{\"snowflake\":{\"lifetime_warning_years\":1001}}", "snowflake.lifetime_warning_years",
     "got 1001"},
    {"{\"snowflake\":{\"node_bits_low\":\"yes\"}}", "snowflake.node_bits_low",
     "expected true or false"},
    {"{\"snowflake\":{\"datacenter_id\":32}}", "snowflake.datacenter_id",
     "does not fit datacenter_bits=5: must be 0..31"},
    {"{\"snowflake\":{\"worker_id\":32}}", "snowflake.worker_id",
     "does not fit worker_bits=5: must be 0..31"},
    {"{\"snowflake\":{\"worker_bits\":2,\"timestamp_bits\":44,\"worker_id\":4}}",
     "snowflake.worker_id", "0..3"},
    {"{\"server\":{\"threads\":4},\"snowflake\":{\"worker_id\":29,"
     "\"per_thread_worker_ids\":true}}",
     "snowflake.per_thread_worker_ids", "4 threads"},
    {"{\"server\":{\"threads\":2},\"snowflake\":{\"worker_bits\":0,\"timestamp_bits\":46,"
     "\"per_thread_worker_ids\":true}}",
     "snowflake.per_thread_worker_ids", "max 0"},
    {"{\"server\":{\"max_header_bytes\":2048,\"max_url_bytes\":4096}}", "server.max_url_bytes",
     "must be <= server.max_header_bytes (2048), got 4096"},
    {"{\"snowflake\":{\"lease_ms\":500,\"max_backward_ms\":500}}", "snowflake.lease_ms",
     "must be at least 1004"},
    {"{\"snowflake\":{\"lease_ms\":2033,\"max_backward_ms\":1000,\"max_batch\":65536}}",
     "snowflake.lease_ms", "must be at least 2034"},
    {"{\"snowflake\":{\"time_unit_ms\":1000}}", "snowflake.lease_ms", "got 2000"},
    {"{\"snowflake\":{\"lease_ms\":100,\"max_backward_ms\":1000}}", "snowflake.lease_ms",
     "got 100"},
    /* the in-flight budget holds the largest body and the largest cache value */
    {"{\"server\":{\"max_inflight_bytes\":1048575}}", "server.max_inflight_bytes",
     "must be at least the largest request body or cache value (1048576"},
    {"{\"server\":{\"max_inflight_bytes\":2097152,\"max_body_bytes\":2097153}}",
     "server.max_inflight_bytes", "(2097153: server.max_body_bytes, cache.max_item_bytes)"},
    {"{\"server\":{\"max_inflight_bytes\":2097152},\"cache\":{\"max_item_bytes\":2097153}}",
     "server.max_inflight_bytes", "got 2097152"},
    {"{\"cache\":{\"max_memory_bytes\":1048576,\"max_item_bytes\":1048577}}",
     "cache.max_item_bytes", "must be <= cache.max_memory_bytes (1048576)"},
    {"{\"auth\":{\"token\":\"t\",\"token_file\":\"/etc/tok\"}}", "auth.token", "not both"},
    {"{\"auth\":{\"token\":\"x\"}}", "auth.token",
     "must be at least 16 bytes (or empty: no access control), got 1"},
    {"{\"auth\":{\"token\":\"fifteen-bytes!!\"}}", "auth.token", "got 15"},
    {"{\"cache\":{\"shards\":48}}", "cache.shards", "must be a power of two, got 48"},
    {"{\"cache\":{\"enabled\":false,\"memcached_port\":11311}}", "cache.memcached_port",
     "needs cache.enabled=true"},
    {"{\"echo\":{\"tcp_port\":8080}}", "echo.tcp_port",
     "port 8080 on 127.0.0.1 is already used by server.port on 127.0.0.1"},
    {"{\"cache\":{\"memcached_port\":8080}}", "cache.memcached_port", "server.port"},
    {"{\"cache\":{\"memcached_port\":11211},\"echo\":{\"tcp_port\":11211}}", "echo.tcp_port",
     "cache.memcached_port"},
    {"{\"server\":{\"host\":\"0.0.0.0\"},\"echo\":{\"tcp_port\":8080}}", "echo.tcp_port",
     "server.port on 0.0.0.0"},
    {"{\"server\":{\"host\":\"::\"},\"echo\":{\"tcp_port\":8080}}", "echo.tcp_port",
     "already used"},
    {"{\"server\":{\"host\":\"::1\"},\"echo\":{\"tcp_host\":\"0:0::1\",\"tcp_port\":8080}}",
     "echo.tcp_port", "already used"},
};

START_TEST(test_bad_file)
{
    const bad_case *b = &bad_files[_i];
    cfg c;
    char err[1024], prefix[512];
    int rc = load_json(b->json, &c, err, sizeof err);
    if (b->key)
        snprintf(prefix, sizeof prefix, "%s: %s: ", last_path, b->key);
    else
        snprintf(prefix, sizeof prefix, "%s: ", last_path);
    ck_assert_msg(rc == -1, "case %d %s: expected -1, got %d", _i, b->json, rc);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0,
                  "case %d %s: \"%s\" does not start with \"%s\"", _i, b->json, err, prefix);
    ck_assert_msg(strstr(err, b->frag) != NULL, "case %d %s: \"%s\" lacks \"%s\"", _i, b->json, err,
                  b->frag);
}
END_TEST

/* Edges that must be accepted, with the value they produce. */
START_TEST(test_good_edges)
{
    cfg c;
    char err[512];
    int rc = load_json("{\"snowflake\":{\"epoch\":\"2024-02-29T00:00:00Z\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.epoch_ms, UINT64_C(1709164800000));
    /* worker_id "etcd": "max" resolves to the layout's worker max; the fence margin's floor */
    rc = load_json("{\"snowflake\":{\"worker_id\":\"etcd\",\"worker_bits\":3,\"etcd\":{"
                   "\"endpoints\":\"http://127.0.0.1:2379,http://[::1]:2379\",\"ttl_s\":2,"
                   "\"fence_margin_ms\":140,\"request_timeout_ms\":499,\"worker_min\":2}}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_int_eq(c.snowflake.worker_source, CFG_WORKER_ETCD);
    ck_assert_uint_eq(c.snowflake.etcd.worker_min, 2);
    ck_assert_uint_eq(c.snowflake.etcd.worker_max, 7);
    ck_assert_uint_eq(c.snowflake.etcd.ttl_s, 2);
    ck_assert_str_eq(c.snowflake.etcd.prefix, "/snowflaked");
    rc = load_json("{\"snowflake\":{\"epoch\":\"2000-02-29T12:34:56.789Z\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.epoch_ms, UINT64_C(951827696789));
    rc = load_json("{\"snowflake\":{\"epoch\":\"2000-02-29T12:34:56.5Z\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.epoch_ms, UINT64_C(951827696500));
    rc = load_json("{\"snowflake\":{\"epoch\":\"2000-02-29T12:34:56.05Z\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.epoch_ms, UINT64_C(951827696050));
    rc = load_json("{\"snowflake\":{\"epoch\":\"2024-06-01T00:00:00Z\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err); /* the epoch may be exactly now */
    ck_assert_uint_eq(c.snowflake.epoch_ms, NOW_MS);
    rc = load_json("{\"snowflake\":{\"epoch\":\"1970-01-01T00:00:00Z\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.epoch_ms, 0);
    rc = load_json("{\"snowflake\":{\"epoch\":1600000000000}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.epoch_ms, UINT64_C(1600000000000));
    /* whole numbers written as floats, and -0, are integers */
    rc = load_json("{\"server\":{\"port\":8081.0},\"snowflake\":{\"datacenter_id\":-0}}", &c, err,
                   sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.port, 8081);
    ck_assert_uint_eq(c.snowflake.datacenter_id, 0);
    /* limits at their edges */
    rc = load_json("{\"server\":{\"port\":65535,\"threads\":256,\"max_header_bytes\":1024,"
                   "\"max_url_bytes\":1024},\"snowflake\":{\"lease_ms\":2034,"
                   "\"max_backward_ms\":1000,\"max_batch\":65536,\"datacenter_id\":31,"
                   "\"worker_id\":31},\"cache\":{\"max_memory_bytes\":1048576,"
                   "\"max_item_bytes\":1048576}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.threads, 256);
    ck_assert_uint_eq(c.snowflake.worker_id, 31);
    /* the in-flight budget: exactly the largest body or value; a cache value does not count
     * with the cache off */
    rc = load_json("{\"server\":{\"max_inflight_bytes\":65536,\"max_body_bytes\":65536},"
                   "\"cache\":{\"max_item_bytes\":65536}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.max_inflight_bytes, 65536);
    rc = load_json("{\"server\":{\"max_inflight_bytes\":1048576},\"cache\":{\"enabled\":false,"
                   "\"max_item_bytes\":2097152,\"max_memory_bytes\":4194304}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    /* the default grows to the largest body or value; one set explicitly does not */
    rc = load_json("{\"server\":{\"max_body_bytes\":100000000,\"output_limit_bytes\":300000000}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.max_inflight_bytes, 100000000);
    rc = load_json("{\"server\":{\"output_limit_bytes\":300000000},\"cache\":{"
                   "\"max_item_bytes\":134217728,\"max_memory_bytes\":268435456}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.max_inflight_bytes, 134217728);
    rc = load_json("{\"server\":{\"max_inflight_bytes\":1099511627776}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.max_inflight_bytes, UINT64_C(1099511627776));
    /* per-thread ids exactly up to the max */
    rc = load_json("{\"server\":{\"threads\":2},\"snowflake\":{\"worker_id\":30,"
                   "\"per_thread_worker_ids\":true}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    /* same port on different addresses, or a disabled port */
    rc = load_json("{\"echo\":{\"tcp_host\":\"127.0.0.2\",\"tcp_port\":8080},"
                   "\"cache\":{\"memcached_host\":\"::1\",\"memcached_port\":8080}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    /* enum aliases and every value */
    rc = load_json("{\"snowflake\":{\"sync\":\"spinlock\",\"default_encoding\":\"decimal\"},"
                   "\"log\":{\"level\":\"error\"}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_int_eq(c.snowflake.sync, SF_SYNC_SPINLOCK);
    ck_assert_int_eq(c.snowflake.default_encoding, SF_ENC_DEC);
    ck_assert_int_eq(c.log.level, CFG_LOG_ERROR);
    /* a 10 ms tick keeps a narrow timestamp alive */
    rc = load_json("{\"snowflake\":{\"time_unit_ms\":10,\"timestamp_bits\":38,"
                   "\"sequence_bits\":15}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.layout.unit_ms, 10);
}
END_TEST

START_TEST(test_threads_zero_resolves)
{
    cfg c;
    char err[512];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int rc = load_argv(&c, err, sizeof err, "-t", "0", (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.threads, cpus < 1                 ? 1
                                        : cpus > CFG_MAX_THREADS ? CFG_MAX_THREADS
                                                                 : (unsigned)cpus);
}
END_TEST

/* A token of a few bytes is guessed over the network: refused from every layer, naming the key
 * and its source, never quoting the value. Empty stays "no access control". */
START_TEST(test_short_token_refused)
{
    cfg c;
    char err[512];
    int rc = load_argv(&c, err, sizeof err, "--set", "auth.token=abc", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: auth.token: ", "at least 16 bytes", "got 3");
    ck_assert_msg(strstr(err, "abc") == NULL, "the token is quoted: %s", err);
    setenv("SNOWFLAKED_AUTH_TOKEN", "0123456789abcde", 1);
    rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_ERR(rc, err, "environment SNOWFLAKED_AUTH_TOKEN: auth.token: ", "got 15");
    ck_assert_msg(strstr(err, "0123456789abcde") == NULL, "the token is quoted: %s", err);
    setenv("SNOWFLAKED_AUTH_TOKEN", "0123456789abcdef", 1); /* 16: the shortest accepted */
    rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.auth.token, "0123456789abcdef");
    setenv("SNOWFLAKED_AUTH_TOKEN", "", 1);
    rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.auth.token, "");
    /* a token a header cannot carry (a space, a control byte, non-ASCII): where, never what */
    static const char *unsendable[] = {"secret token-0123456", "secret\ttoken-0123456",
                                       "secret\xc3\xa9token-0123456", "secret\x7ftoken-0123456"};
    for (size_t i = 0; i < sizeof unsendable / sizeof *unsendable; i++) {
        setenv("SNOWFLAKED_AUTH_TOKEN", unsendable[i], 1);
        rc = load_argv(&c, err, sizeof err, (char *)NULL);
        EXPECT_ERR(rc, err, "environment SNOWFLAKED_AUTH_TOKEN: auth.token: ",
                   "must be visible ASCII without spaces (0x21-0x7E), byte 7 is not");
        ck_assert_msg(strstr(err, "secret") == NULL, "the token is quoted: %s", err);
    }
    unsetenv("SNOWFLAKED_AUTH_TOKEN");
    rc = load_json("{\"auth\":{\"token\":\"secret token-0123456\"}}", &c, err, sizeof err);
    EXPECT_ERR(rc, err, last_path, ": auth.token: ", "byte 7 is not");
    rc = load_argv(&c, err, sizeof err, "--set", "auth.token=secret token-0123456", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: auth.token: ", "byte 7 is not");
    /* auth.token_file is read at start (app.c), where the same minimum applies */
    rc = load_argv(&c, err, sizeof err, "--set", "auth.token_file=/nonexistent/token", (char *)NULL);
    EXPECT_OK(rc, err);
}
END_TEST

START_TEST(test_loopback_hosts)
{
    const char *loopback[] = {"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"};
    const char *reachable[] = {"0.0.0.0", "::", "10.0.0.1", "192.168.1.1", "::ffff:10.0.0.1",
                               "fe80::1", "128.0.0.1", "not-an-ip"};
    for (size_t i = 0; i < sizeof loopback / sizeof loopback[0]; i++)
        ck_assert_msg(cfg_host_is_loopback(loopback[i]), "%s", loopback[i]);
    for (size_t i = 0; i < sizeof reachable / sizeof reachable[0]; i++)
        ck_assert_msg(!cfg_host_is_loopback(reachable[i]), "%s", reachable[i]);
}
END_TEST

START_TEST(test_string_lengths)
{
    static char json[2048], tok[300];
    cfg c;
    char err[512];
    memset(tok, 'a', 255);
    tok[255] = '\0';
    snprintf(json, sizeof json, "{\"auth\":{\"token\":\"%s\"}}", tok);
    int rc = load_json(json, &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(strlen(c.auth.token), 255);
    memset(tok, 'a', 256);
    tok[256] = '\0';
    snprintf(json, sizeof json, "{\"auth\":{\"token\":\"%s\"}}", tok);
    rc = load_json(json, &c, err, sizeof err);
    EXPECT_ERR(rc, err, last_path, ": auth.token: ", "at most 255 bytes, got 256");
}
END_TEST

/* ---- files that cannot be read --------------------------------------------------------------- */

START_TEST(test_missing_file)
{
    cfg c;
    char err[512], path[128];
    snprintf(path, sizeof path, "%s/nope.json", tmpdir);
    int rc = load_argv(&c, err, sizeof err, "-c", path, (char *)NULL);
    EXPECT_ERR(rc, err, path, "cannot open", "No such file");
    rc = load_argv(&c, err, sizeof err, "-c", tmpdir, (char *)NULL);
    EXPECT_ERR(rc, err, tmpdir, "cannot read");
}
END_TEST

START_TEST(test_unreadable_file)
{
    cfg c;
    char err[512];
    const char *path = write_file("secret.json", "{}");
    ck_assert_int_eq(chmod(path, 0), 0);
    int rc = load_argv(&c, err, sizeof err, "-c", (char *)path, (char *)NULL);
    if (geteuid() == 0)
        EXPECT_OK(rc, err); /* root reads anything; nothing to assert */
    else
        EXPECT_ERR(rc, err, path, "cannot open", "Permission denied");
}
END_TEST

START_TEST(test_odd_bytes)
{
    cfg c;
    char err[512];
    last_path = write_file_n("nul.json", "{}\0{\"x\":1}", 10);
    int rc = load_argv(&c, err, sizeof err, "-c", (char *)last_path, (char *)NULL);
    EXPECT_ERR(rc, err, last_path, "NUL byte");
    /* larger than any config file: refused before parsing */
    size_t big = 1024 * 1024 + 10;
    char *text = malloc(big);
    ck_assert_ptr_nonnull(text);
    memset(text, ' ', big);
    text[0] = '{';
    text[big - 1] = '}';
    last_path = write_file_n("big.json", text, big);
    free(text);
    rc = load_argv(&c, err, sizeof err, "-c", (char *)last_path, (char *)NULL);
    EXPECT_ERR(rc, err, last_path, "larger than");
}
END_TEST

/* Garbage must produce an error, never a crash (the sanitizer build runs this too). */
START_TEST(test_fuzz_no_crash)
{
    static const char *const inputs[] = {
        "{\"server\":{\"port\":1e308,\"threads\":-1e308}}",
        "{\"server\":{\"port\":-0.0000001}}",
        "{\"server\":{\"port\":4294967296}}",
        "{\"server\":{\"port\":9007199254740993}}",
        "{\"snowflake\":{\"epoch\":18446744073709551615}}",
        "{\"snowflake\":{\"epoch\":\"9999-12-31T23:59:59.999Z\"}}",
        "{\"snowflake\":{\"epoch\":\"99999-12-31T23:59:59Z\"}}",
        "{\"snowflake\":{\"epoch\":\"2\"}}",
        "{\"snowflake\":{\"worker_id\":\"env:"
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}}",
        "{\"\\u0000\":1}",
        "{\"server\":{\"\\u0000port\":1}}",
        "{\"server\":{\"port\":\"\\ud800\"}}",
        "{\"log\":{\"file\":\"\\u00ff\\u2603\"}}",
        "{\"\":{}}",
        "{\"server\":{\"\":1}}",
        "{\"server\":{}}}",
        "\xef\xbb\xbf{}",
        "{\"a\":\"\xff\xfe\"}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        "{\"server\":{\"server\":{\"server\":{\"server\":{\"server\":{\"port\":1}}}}}}",
        "\"\\",
        "{\"server\":{\"port\":1",
        "tru",
        "-",
        "{\"log\":{\"file\":\"\\\\u0000\"}}",
    };
    cfg c;
    char err[512];
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        int rc = load_json(inputs[i], &c, err, sizeof err);
        ck_assert_msg(rc == 0 || (rc == -1 && strncmp(err, last_path, strlen(last_path)) == 0),
                      "input %zu: rc %d err %s", i, rc, err);
    }
    /* deep nesting beyond cJSON's limit */
    size_t depth = 20000;
    char *deep = malloc(depth * 6 + 8), *p = deep;
    ck_assert_ptr_nonnull(deep);
    for (size_t i = 0; i < depth; i++)
        p += sprintf(p, "{\"a\":");
    *p++ = '1';
    memset(p, '}', depth);
    p[depth] = '\0';
    int rc = load_json(deep, &c, err, sizeof err);
    free(deep);
    EXPECT_ERR(rc, err, last_path, "not valid JSON");
    /* tiny error buffers are respected */
    char small[8];
    memset(small, 'Z', sizeof small);
    rc = load_json("{\"server\":{\"port\":0}}", &c, small, 5);
    ck_assert_int_eq(rc, -1);
    ck_assert_uint_eq(strlen(small), 4);
    ck_assert_int_eq(small[5], 'Z');
    rc = load_json("{\"server\":{\"port\":0}}", &c, NULL, 0);
    ck_assert_int_eq(rc, -1);
}
END_TEST

/* ---- worker id resolution -------------------------------------------------------------------- */

START_TEST(test_worker_ordinal_pod_name)
{
    cfg c;
    char err[512];
    setenv("POD_NAME", "snowflaked-3", 1);
    int rc = load_json("{\"snowflake\":{\"worker_id\":\"ordinal\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 3);
    ck_assert_int_eq(c.snowflake.worker_source, CFG_WORKER_ORDINAL);
    ck_assert_str_eq(c.snowflake.worker_origin, "ordinal of POD_NAME=snowflaked-3");
    setenv("POD_NAME", "a-b-12", 1);
    rc = load_json("{\"snowflake\":{\"worker_id\":\"ordinal\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 12);
}
END_TEST

START_TEST(test_worker_ordinal_errors)
{
    static const char *const names[] = {"web", "web-", "web-x", "web-3a", "web-+1", "7"};
    cfg c;
    char err[512], quoted[64];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        setenv("POD_NAME", names[i], 1);
        int rc = load_json("{\"snowflake\":{\"worker_id\":\"ordinal\"}}", &c, err, sizeof err);
        snprintf(quoted, sizeof quoted, "POD_NAME=\"%s\"", names[i]);
        EXPECT_ERR(rc, err, last_path, ": snowflake.worker_id: ordinal", quoted, "-<number>");
    }
    /* an ordinal that does not fit worker_bits */
    setenv("POD_NAME", "sf-40", 1);
    int rc = load_json("{\"snowflake\":{\"worker_id\":\"ordinal\"}}", &c, err, sizeof err);
    EXPECT_ERR(rc, err, last_path, ": snowflake.worker_id: 40", "ordinal of POD_NAME=sf-40",
               "0..31");
}
END_TEST

/* Without POD_NAME (or with it empty) the hostname is examined; we cannot choose the hostname,
 * so either outcome must say it used the hostname. */
START_TEST(test_worker_ordinal_hostname)
{
    cfg c;
    char err[512];
    setenv("POD_NAME", "", 1);
    int rc = load_argv(&c, err, sizeof err, "--worker-id", "ordinal", (char *)NULL);
    if (rc == 0)
        ck_assert_msg(strstr(c.snowflake.worker_origin, "ordinal of hostname ") ==
                          c.snowflake.worker_origin,
                      "%s", c.snowflake.worker_origin);
    else
        EXPECT_ERR(rc, err, "flag --worker-id: snowflake.worker_id: ordinal: hostname \"");
}
END_TEST

START_TEST(test_worker_env)
{
    cfg c;
    char err[512];
    setenv("POD_INDEX", "2", 1);
    int rc = load_json("{\"snowflake\":{\"worker_id\":\"env:POD_INDEX\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 2);
    ck_assert_int_eq(c.snowflake.worker_source, CFG_WORKER_ENV);
    ck_assert_str_eq(c.snowflake.worker_env, "POD_INDEX");
    ck_assert_str_eq(c.snowflake.worker_origin, "env POD_INDEX=2");

    unsetenv("POD_INDEX");
    rc = load_json("{\"snowflake\":{\"worker_id\":\"env:POD_INDEX\"}}", &c, err, sizeof err);
    EXPECT_ERR(rc, err, last_path, ": snowflake.worker_id: env:POD_INDEX", "POD_INDEX is not set");

    static const char *const garbage[] = {"", "x", "2x", "-1", " 2", "+2", "0x2"};
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        setenv("POD_INDEX", garbage[i], 1);
        rc = load_json("{\"snowflake\":{\"worker_id\":\"env:POD_INDEX\"}}", &c, err, sizeof err);
        EXPECT_ERR(rc, err, last_path, ": snowflake.worker_id: env:POD_INDEX",
                   "must be a decimal integer");
    }
    setenv("POD_INDEX", "99", 1);
    rc = load_json("{\"snowflake\":{\"worker_id\":\"env:POD_INDEX\"}}", &c, err, sizeof err);
    EXPECT_ERR(rc, err, last_path, ": snowflake.worker_id: 99 (env POD_INDEX=99)", "0..31");
}
END_TEST

START_TEST(test_worker_text_forms)
{
    cfg c;
    char err[512];
    setenv("POD_NAME", "sf-5", 1);
    setenv("SNOWFLAKED_SNOWFLAKE_WORKER_ID", "ordinal", 1);
    int rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 5);
    setenv("W", "6", 1);
    rc = load_argv(&c, err, sizeof err, "--worker-id", "env:W", (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 6);
    unsetenv("W");
    rc = load_argv(&c, err, sizeof err, "--worker-id", "7", (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 7);
    ck_assert_str_eq(c.snowflake.worker_origin, "flag --worker-id");
    rc = load_argv(&c, err, sizeof err, "--worker-id", "-7", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --worker-id: snowflake.worker_id: ", "got \"-7\"");
    rc = load_argv(&c, err, sizeof err, "--worker-id", "32", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --worker-id: snowflake.worker_id: 32", "0..31");
    /* a flag replaces an unresolvable ordinal from a lower layer before resolution */
    setenv("POD_NAME", "no-ordinal", 1);
    rc = load_argv(&c, err, sizeof err, "--worker-id", "1", (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 1);
}
END_TEST

/* ---- precedence ------------------------------------------------------------------------------ */

START_TEST(test_precedence_port)
{
    cfg c;
    char err[512];
    const char *path = write_file("p.json", "{\"server\":{\"port\":9000}}");
    int rc = load_argv(&c, err, sizeof err, "-c", (char *)path, (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.port, 9000);
    setenv("SNOWFLAKED_SERVER_PORT", "9001", 1);
    rc = load_argv(&c, err, sizeof err, "-c", (char *)path, (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.port, 9001);
    rc = load_argv(&c, err, sizeof err, "-c", (char *)path, "--set", "server.port=9003",
                   (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.port, 9003);
    rc = load_argv(&c, err, sizeof err, "-p", "9002", "-c", (char *)path, "--set",
                   "server.port=9003", (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.port, 9002);
    rc = load_argv(&c, err, sizeof err, "--port=9004", "--set", "server.port=1", "--set",
                   "server.port=2", (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.port, 9004);
    rc = load_argv(&c, err, sizeof err, "--set", "server.port=1", "--set", "server.port=2",
                   (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.server.port, 2); /* --set in order */
}
END_TEST

START_TEST(test_precedence_worker_and_threads)
{
    cfg c;
    char err[512];
    const char *path = write_file("w.json", "{\"server\":{\"threads\":3},"
                                            "\"snowflake\":{\"worker_id\":1}}");
    int rc = load_argv(&c, err, sizeof err, "-c", (char *)path, (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 1);
    ck_assert_str_eq(c.snowflake.worker_origin, path);
    ck_assert_uint_eq(c.server.threads, 3);
    setenv("SNOWFLAKED_SNOWFLAKE_WORKER_ID", "2", 1);
    setenv("SNOWFLAKED_SERVER_THREADS", "4", 1);
    rc = load_argv(&c, err, sizeof err, "-c", (char *)path, (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 2);
    ck_assert_str_eq(c.snowflake.worker_origin, "environment SNOWFLAKED_SNOWFLAKE_WORKER_ID");
    ck_assert_uint_eq(c.server.threads, 4);
    rc = load_argv(&c, err, sizeof err, "-c", (char *)path, "--worker-id", "3", "-t", "5",
                   (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 3);
    ck_assert_uint_eq(c.server.threads, 5);
    rc = load_argv(&c, err, sizeof err, "-c", (char *)path, "--set", "snowflake.worker_id=4",
                   "--set", "server.threads=6", (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.worker_id, 4);
    ck_assert_uint_eq(c.server.threads, 6);
    ck_assert_str_eq(c.snowflake.worker_origin, "flag --set");
}
END_TEST

START_TEST(test_env_values)
{
    cfg c;
    char err[512];
    setenv("SNOWFLAKED_DATA_DIR", "/var/lib/sf", 1);
    setenv("SNOWFLAKED_SERVER_TCP_NODELAY", "off", 1);
    setenv("SNOWFLAKED_SERVER_REUSEPORT", "No", 1);
    setenv("SNOWFLAKED_CACHE_ENABLED", "0", 1);
    setenv("SNOWFLAKED_LOG_ACCESS_LOG", "YES", 1);
    setenv("SNOWFLAKED_AUTH_PROTECT_READS", "1", 1);
    setenv("SNOWFLAKED_LOG_LEVEL", "debug", 1);
    setenv("SNOWFLAKED_LOG_FORMAT", "json", 1);
    setenv("SNOWFLAKED_LOG_FILE", "", 1); /* empty is a value: stderr */
    setenv("SNOWFLAKED_SNOWFLAKE_SYNC", "mutex", 1);
    setenv("SNOWFLAKED_SNOWFLAKE_EPOCH", "1600000000000", 1);
    setenv("SNOWFLAKED_CACHE_MAX_MEMORY_BYTES", "1099511627776", 1);
    setenv("SNOWFLAKED_SERVER_HOST", "::", 1);
    setenv("SNOWFLAKED_PORT", "tcp://10.0.0.1:80", 1); /* Kubernetes service link: ignored */
    int rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.data_dir, "/var/lib/sf");
    ck_assert(!c.server.tcp_nodelay && !c.server.reuseport && !c.cache.enabled);
    ck_assert(c.log.access_log && c.auth.protect_reads);
    ck_assert_int_eq(c.log.level, CFG_LOG_DEBUG);
    ck_assert_int_eq(c.log.format, CFG_LOG_JSON);
    ck_assert_int_eq(c.snowflake.sync, SF_SYNC_MUTEX);
    ck_assert_uint_eq(c.snowflake.epoch_ms, UINT64_C(1600000000000));
    ck_assert_uint_eq(c.cache.max_memory_bytes, UINT64_C(1099511627776));
    ck_assert_str_eq(c.server.host, "::");
    setenv("SNOWFLAKED_SNOWFLAKE_EPOCH", "2021-01-01T00:00:00Z", 1);
    rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.epoch_ms, UINT64_C(1609459200000));
}
END_TEST

START_TEST(test_env_errors)
{
    static const char *const bad_ports[] = {
        "abc", "",     " 80", "80 ", "+80", "-1", "0x50", "8e3", "99999999999999999999999",
        "0",   "65536"};
    cfg c;
    char err[512];
    for (size_t i = 0; i < sizeof bad_ports / sizeof bad_ports[0]; i++) {
        setenv("SNOWFLAKED_SERVER_PORT", bad_ports[i], 1);
        int rc = load_argv(&c, err, sizeof err, (char *)NULL);
        EXPECT_ERR(rc, err, "environment SNOWFLAKED_SERVER_PORT: server.port: ",
                   "must be an integer 1..65535, got \"");
    }
    unsetenv("SNOWFLAKED_SERVER_PORT");
    setenv("SNOWFLAKED_CACHE_PERSIST", "maybe", 1);
    int rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_ERR(rc, err, "environment SNOWFLAKED_CACHE_PERSIST: cache.persist: ", "\"maybe\"");
    unsetenv("SNOWFLAKED_CACHE_PERSIST");
    setenv("SNOWFLAKED_LOG_LEVEL", "loud", 1);
    rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_ERR(rc, err, "environment SNOWFLAKED_LOG_LEVEL: log.level: ", "debug|info|warn|error");
    unsetenv("SNOWFLAKED_LOG_LEVEL");
    setenv("SNOWFLAKED_SNOWFLAKE_EPOCH", "2020-01-01T00:00:00+00:00", 1);
    rc = load_argv(&c, err, sizeof err, (char *)NULL);
    EXPECT_ERR(rc, err, "environment SNOWFLAKED_SNOWFLAKE_EPOCH: snowflake.epoch: ", "only UTC");
    unsetenv("SNOWFLAKED_SNOWFLAKE_EPOCH");
    /* an env var beats the file, so a file error is never reached... */
    const char *path = write_file("e.json", "{\"server\":{\"port\":8081}}");
    setenv("SNOWFLAKED_ECHO_TCP_PORT", "8081", 1);
    rc = load_argv(&c, err, sizeof err, "-c", (char *)path, (char *)NULL);
    /* ...and a cross-field conflict names the highest layer involved */
    EXPECT_ERR(rc, err, "environment SNOWFLAKED_ECHO_TCP_PORT: echo.tcp_port: port 8081");
}
END_TEST

START_TEST(test_flag_errors)
{
    cfg c;
    char err[512];
    int rc = load_argv(&c, err, sizeof err, "-p", "http", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --port: server.port: ", "got \"http\"");
    rc = load_argv(&c, err, sizeof err, "--threads", "257", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --threads: server.threads: ", "0..256");
    rc = load_argv(&c, err, sizeof err, "--worker-id", "leader", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --worker-id: snowflake.worker_id: ", "\"leader\"");
    rc = load_argv(&c, err, sizeof err, "--set", "server.prot=1", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: server.prot: unknown key");
    rc = load_argv(&c, err, sizeof err, "--set", "server=1", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: server: unknown key");
    rc = load_argv(&c, err, sizeof err, "--set", "log.level=", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: log.level: ", "got \"\"");
    rc = load_argv(&c, err, sizeof err, "--set", "snowflake.timestamp_bits=43", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: snowflake: ", "must be at most 63");
    rc = load_argv(&c, err, sizeof err, "--set", "auth.token=a=b-and-16-bytes-more", (char *)NULL);
    EXPECT_OK(rc, err); /* only the first '=' splits */
    ck_assert_str_eq(c.auth.token, "a=b-and-16-bytes-more");
    rc = load_argv(&c, err, sizeof err, "--set", "server.max_url_bytes=9000", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: server.max_url_bytes: ", "8192");
}
END_TEST

/* ---- argv ------------------------------------------------------------------------------------ */

static int parse(cfg_cli *cli, char *err, size_t errlen, int argc, const char *const *args)
{
    char *argv[2 * CFG_MAX_SETS + 16];
    ck_assert_int_lt(argc + 1, (int)(sizeof argv / sizeof argv[0]));
    argv[0] = (char *)"snowflaked";
    for (int i = 0; i < argc; i++)
        argv[i + 1] = (char *)args[i];
    argv[argc + 1] = NULL;
    return cfg_parse_args(argc + 1, argv, cli, err, errlen);
}
#define PARSE(cli, err, ...)                                                                       \
    parse(cli, err, sizeof err, (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)),     \
          (const char *[]){__VA_ARGS__})

START_TEST(test_parse_args_all)
{
    cfg_cli cli;
    char err[256];
    int rc = PARSE(&cli, err, "-c", "a.json", "-p", "1", "-t", "2", "--worker-id", "ordinal",
                   "--set", "x.y=1", "--set", "a=b=c", "--check-config", "--ignore-corrupt-lease");
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(cli.config_path, "a.json");
    ck_assert_str_eq(cli.port, "1");
    ck_assert_str_eq(cli.threads, "2");
    ck_assert_str_eq(cli.worker_id, "ordinal");
    ck_assert_int_eq(cli.nsets, 2);
    ck_assert_str_eq(cli.sets[0], "x.y=1");
    ck_assert_str_eq(cli.sets[1], "a=b=c");
    ck_assert(cli.check_config && cli.ignore_corrupt_lease && !cli.help && !cli.version);
    rc = PARSE(&cli, err, "--config=b.json", "--port=3", "--threads=4", "--worker-id=env:X");
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(cli.config_path, "b.json");
    ck_assert_str_eq(cli.port, "3");
    ck_assert_str_eq(cli.threads, "4");
    ck_assert_str_eq(cli.worker_id, "env:X");
    ck_assert_int_eq(cli.nsets, 0);
    ck_assert(!cli.check_config);
    rc = PARSE(&cli, err, "-h");
    ck_assert(rc == 0 && cli.help);
    rc = PARSE(&cli, err, "--help");
    ck_assert(rc == 0 && cli.help);
    rc = PARSE(&cli, err, "-V");
    ck_assert(rc == 0 && cli.version && !cli.help);
    rc = PARSE(&cli, err, "--version");
    ck_assert(rc == 0 && cli.version);
    rc = PARSE(&cli, err, "-p8080", "-Vh");
    ck_assert(rc == 0 && cli.version && cli.help);
    ck_assert_str_eq(cli.port, "8080");
}
END_TEST

START_TEST(test_parse_args_errors)
{
    cfg_cli cli;
    char err[256];
    int rc = PARSE(&cli, err, "--bogus");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "unknown option --bogus"), "%s", err);
    rc = PARSE(&cli, err, "-x");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "unknown option -x"), "%s", err);
    rc = PARSE(&cli, err, "-p");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "-p needs a value"), "%s", err);
    rc = PARSE(&cli, err, "--config");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "--config needs a value"), "%s", err);
    rc = PARSE(&cli, err, "--worker-id");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "--worker-id needs a value"), "%s", err);
    rc = PARSE(&cli, err, "--set", "server.port");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "PATH=VALUE"), "%s", err);
    rc = PARSE(&cli, err, "--set", "=1");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "PATH=VALUE"), "%s", err);
    rc = PARSE(&cli, err, "extra");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "unexpected argument 'extra'"), "%s", err);
    rc = PARSE(&cli, err, "-c", "x.json", "stray", "-p", "1");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "'stray'"), "%s", err);
    rc = PARSE(&cli, err, "--help=yes");
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err, "--help=yes takes no value"), "%s", err);
    /* state does not leak between calls */
    rc = PARSE(&cli, err, "-p", "1");
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(err, "");
}
END_TEST

START_TEST(test_parse_args_too_many_sets)
{
    const char *args[2 * (CFG_MAX_SETS + 1)];
    cfg_cli cli;
    char err[256];
    for (int i = 0; i < CFG_MAX_SETS + 1; i++) {
        args[2 * i] = "--set";
        args[2 * i + 1] = "log.level=debug";
    }
    ck_assert_int_eq(parse(&cli, err, sizeof err, 2 * CFG_MAX_SETS, args), 0);
    ck_assert_int_eq(cli.nsets, CFG_MAX_SETS);
    ck_assert_int_eq(parse(&cli, err, sizeof err, 2 * (CFG_MAX_SETS + 1), args), -1);
    ck_assert_msg(strstr(err, "too many --set"), "%s", err);
}
END_TEST

START_TEST(test_usage)
{
    static const char *const must[] = {"--config",
                                       "--port",
                                       "--threads",
                                       "--worker-id",
                                       "--set",
                                       "--check-config",
                                       "--ignore-corrupt-lease",
                                       "--version",
                                       "--help",
                                       "SNOWFLAKED_",
                                       "SNOWFLAKED_SERVER_PORT",
                                       "environment",
                                       "flags",
                                       "-c,",
                                       "-p,",
                                       "-t,",
                                       "-V,",
                                       "-h,"};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    cfg_usage(f, "snowflaked");
    fclose(f);
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        ck_assert_msg(strstr(buf, must[i]), "usage lacks %s:\n%s", must[i], buf);
    free(buf);
}
END_TEST

/* ---- printing -------------------------------------------------------------------------------- */

START_TEST(test_print_forms)
{
    cfg c;
    char err[512];
    setenv("IDX", "4", 1);
    int rc = load_argv(&c, err, sizeof err, "--set", "snowflake.epoch=1600000000123", "--set",
                       "snowflake.worker_id=env:IDX", (char *)NULL);
    EXPECT_OK(rc, err);
    char *out = print_to_string(&c);
    ck_assert_msg(strstr(out, "\"epoch\": \"2020-09-13T12:26:40.123Z\""), "%s", out);
    ck_assert_msg(strstr(out, "\"worker_id\": \"env:IDX\""), "%s", out);
    ck_assert_msg(strstr(out, "\"worker_id\": 4,"), "%s", out);
    ck_assert_msg(strstr(out, "\"worker_id_origin\": \"env IDX=4\""), "%s", out);
    ck_assert_msg(strstr(out, "\"token\": \"\""), "%s", out); /* empty token stays empty */
    cJSON *root = cJSON_Parse(out);
    ck_assert_msg(root != NULL, "%s", out);
    cJSON_Delete(root);
    free(out);
}
END_TEST

/* ---- named layouts -------------------------------------------------------------------------- */

static void expect_widths(const cfg *c, unsigned ts, unsigned dc, unsigned w, unsigned seq,
                          uint32_t unit, bool low)
{
    const cfg_snowflake *s = &c->snowflake;
    ck_assert_uint_eq(s->timestamp_bits, ts);
    ck_assert_uint_eq(s->datacenter_bits, dc);
    ck_assert_uint_eq(s->worker_bits, w);
    ck_assert_uint_eq(s->sequence_bits, seq);
    ck_assert_uint_eq(s->time_unit_ms, unit);
    ck_assert(s->node_bits_low == low);
    ck_assert_uint_eq(s->layout.timestamp_bits, ts);
    ck_assert_uint_eq(s->layout.id_bits, ts + dc + w + seq);
    ck_assert_uint_eq(s->layout.unit_ms, unit);
    ck_assert(s->layout.node_bits_low == low);
}

START_TEST(test_layout_presets)
{
    cfg c;
    char err[512];
    /* a preset sets widths, unit, order and (as a default) the epoch */
    int rc = load_json("{\"snowflake\":{\"layout\":\"sonyflake\",\"datacenter_id\":255,"
                       "\"worker_id\":255}}",
                       &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.snowflake.layout_preset->name, "sonyflake");
    expect_widths(&c, 39, 8, 8, 8, 10, true);
    ck_assert_uint_eq(c.snowflake.epoch_ms, UINT64_C(1409529600000)); /* 2014-09-01 */
    ck_assert_uint_eq(c.snowflake.layout.sequence_shift, 16);
    ck_assert_uint_eq(c.snowflake.layout.timestamp_shift, 24);
    /* an explicit epoch wins; explicit widths equal to the preset's pass */
    rc = load_json("{\"snowflake\":{\"layout\":\"sonyflake\",\"epoch\":\"2020-01-01T00:00:00Z\","
                   "\"timestamp_bits\":39,\"datacenter_bits\":8,\"worker_bits\":8,"
                   "\"sequence_bits\":8,\"time_unit_ms\":10,\"node_bits_low\":true}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.epoch_ms, SF_DEFAULT_EPOCH_MS);
    expect_widths(&c, 39, 8, 8, 8, 10, true);
    rc = load_json("{\"snowflake\":{\"layout\":\"js53\",\"json_ids\":\"number\",\"worker_id\":31}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    expect_widths(&c, 38, 0, 5, 10, 10, false);
    ck_assert_uint_eq(c.snowflake.layout.id_max, UINT64_C(9007199254740991));
    ck_assert(c.snowflake.json_numbers);
    ck_assert_uint_eq(c.snowflake.epoch_ms, SF_DEFAULT_EPOCH_MS);
    rc = load_json("{\"snowflake\":{\"layout\":\"twitter\"}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    expect_widths(&c, 41, 5, 5, 12, 1, false);
    /* custom: any widths summing to at most 63, either order */
    rc = load_json("{\"snowflake\":{\"timestamp_bits\":40,\"node_bits_low\":true}}", &c, err,
                   sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_ptr_null(c.snowflake.layout_preset);
    expect_widths(&c, 40, 5, 5, 12, 1, true);
    ck_assert_uint_eq(c.snowflake.layout.sequence_shift, 10);
    /* JSON numbers on a custom layout of 53 bits */
    rc = load_json("{\"snowflake\":{\"timestamp_bits\":41,\"datacenter_bits\":0,\"worker_bits\":4,"
                   "\"sequence_bits\":8,\"json_ids\":\"number\"}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.snowflake.layout.id_bits, 53);
    /* the layer that set the contradicting key is named, whichever layer chose the preset */
    const char *path = write_file("w.json", "{\"snowflake\":{\"sequence_bits\":12}}");
    setenv("SNOWFLAKED_SNOWFLAKE_LAYOUT", "js53", 1);
    rc = load_argv(&c, err, sizeof err, "-c", (char *)path, (char *)NULL);
    EXPECT_ERR(rc, err, path, ": snowflake.sequence_bits: layout js53 fixes it at 10, got 12");
    rc = load_argv(&c, err, sizeof err, "--set", "snowflake.worker_bits=6", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: snowflake.worker_bits: layout js53 fixes it at 5, got 6");
    rc = load_argv(&c, err, sizeof err, "--set", "snowflake.worker_bits=5", (char *)NULL);
    EXPECT_OK(rc, err);
    unsetenv("SNOWFLAKED_SNOWFLAKE_LAYOUT");
}
END_TEST

/* A preset's --check-config output reloads (every width printed, equal to the preset's), and
 * "resolved" describes the layout. */
START_TEST(test_layout_print_round_trip)
{
    static const struct {
        const char *json, *name, *ends;
        unsigned bits;
        bool safe;
        double cap, years;
    } cases[] = {
        {"{\"snowflake\":{\"layout\":\"sonyflake\"}}", "sonyflake", "2188-11-16T03:28:58.880Z", 63,
         false, 25600, 164.5},
        {"{\"snowflake\":{\"layout\":\"js53\",\"json_ids\":\"number\"}}", "js53",
         "2107-02-08T13:44:29.440Z", 53, true, 102400, 82.7},
        {"{}", "custom", "2089-09-06T15:47:35.552Z", 63, false, 4096000, 65.3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cfg c, c2;
        char err[512];
        int rc = load_json(cases[i].json, &c, err, sizeof err);
        EXPECT_OK(rc, err);
        char *out = print_to_string(&c);
        cJSON *root = cJSON_Parse(out);
        ck_assert_msg(root != NULL, "not JSON:\n%s", out);
        cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "resolved");
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(res, "layout_name")->valuestring,
                         cases[i].name);
        ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(res, "id_bits")->valueint,
                         (int)cases[i].bits);
        ck_assert(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(res, "json_safe")));
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "json_safe")) ==
                  cases[i].safe);
        ck_assert(cJSON_GetObjectItemCaseSensitive(res, "id_cap_per_second")->valuedouble ==
                  cases[i].cap);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(res, "lifetime_ends")->valuestring,
                         cases[i].ends);
        ck_assert_msg(cJSON_GetObjectItemCaseSensitive(res, "lifetime_years_left")->valuedouble ==
                          cases[i].years,
                      "%s", out);
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(res, "warnings")), 0);
        cJSON_DeleteItemFromObjectCaseSensitive(root, "resolved");
        char *sections = cJSON_Print(root);
        const char *path2 = write_file("round.json", sections);
        rc = load_argv(&c2, err, sizeof err, "-c", (char *)path2, (char *)NULL);
        EXPECT_OK(rc, err);
        char *out2 = print_to_string(&c2);
        *strstr(out, "\"resolved\"") = '\0';
        *strstr(out2, "\"resolved\"") = '\0';
        ck_assert_str_eq(out, out2);
        cJSON_Delete(root);
        free(sections);
        free(out);
        free(out2);
    }
}
END_TEST

/* snowflake.lifetime_warning_years: a warning (not an error) when the layout ends sooner. */
START_TEST(test_lifetime_warning)
{
    cfg c;
    char err[512];
    int rc = load_json("{\"snowflake\":{\"lifetime_warning_years\":66}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.snowflake.lifetime_warning,
                     "layout runs out of timestamps at 2089-09-06T15:47:35.552Z (65.3 years): "
                     "below snowflake.lifetime_warning_years=66; plan a new epoch or layout "
                     "before then, after it every ID request is refused");
    char *out = print_to_string(&c);
    cJSON *root = cJSON_Parse(out);
    ck_assert_msg(root != NULL, "not JSON:\n%s", out);
    cJSON *w = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "resolved"),
                                                "warnings");
    ck_assert_int_eq(cJSON_GetArraySize(w), 1);
    ck_assert_str_eq(cJSON_GetArrayItem(w, 0)->valuestring, c.snowflake.lifetime_warning);
    cJSON_Delete(root);
    free(out);
    rc = load_json("{\"snowflake\":{\"lifetime_warning_years\":65}}", &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.snowflake.lifetime_warning, "");
    /* 12 years left: above the hard floor (10), below the default warning (20) */
    rc = load_json("{\"snowflake\":{\"epoch\":\"2002-01-01T00:00:00Z\",\"timestamp_bits\":40,"
                   "\"sequence_bits\":13}}",
                   &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_msg(strstr(c.snowflake.lifetime_warning, "(12.4 years)") != NULL, "%s",
                  c.snowflake.lifetime_warning);
}
END_TEST

/* auth.client_certificates, the one list key: an array in a file, the array's JSON or one entry
 * from the environment and --set; each entry checked (util/certname.h); refused without a TLS
 * listener asking for certificates; printed as an array that loads again. auth.credentials'
 * "token_and_certificate" needs both credentials. */
#define TLS_ON "\"server\":{\"tls\":{\"port\":8443,\"cert_file\":\"c\",\"key_file\":\"k\"," \
               "\"client_ca_file\":\"ca\",\"verify_client\":\"optional\"}}"
/* sequences.namespaces, the one list of objects: defaults filled, every rule checked, the token
 * hidden when printed (and refused when loaded back as the mask). */
START_TEST(test_sequences_namespaces)
{
    cfg c;
    char err[512];
    int rc = load_json("{\"sequences\":{\"namespaces\":[{\"name\":\"orders\"},{\"name\":\"inv-2.a\","
                       "\"start\":1000,\"block\":50,\"max\":99999,\"token\":\"0123456789abcdef\"},"
                       "{\"name\":\"u\",\"adaptive\":true,\"block\":10}]}}",
                       &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.sequences.nns, 3);
    ck_assert_str_eq(c.sequences.ns[0].name, "orders");
    ck_assert_uint_eq(c.sequences.ns[0].start, 1);
    ck_assert_uint_eq(c.sequences.ns[0].block, 1000);
    ck_assert_uint_eq(c.sequences.ns[1].start, 1000);
    ck_assert_uint_eq(c.sequences.ns[1].max, 99999);
    ck_assert_str_eq(c.sequences.ns[1].token, "0123456789abcdef");
    ck_assert(c.sequences.ns[2].adaptive);
    ck_assert_uint_eq(c.sequences.ns[2].block_min, 10);
    ck_assert_uint_eq(c.sequences.ns[2].block_max, 640);
    char *out = print_to_string(&c);
    ck_assert_msg(strstr(out, "\"token\": \"***\"") && !strstr(out, "0123456789abcdef"), "%s",
                  out);
    rc = load_json(out, &c, err, sizeof err);
    EXPECT_ERR(rc, err, last_path, "sequences.namespaces: \"inv-2.a\": \"***\" is the token");
    free(out);
    ck_assert_int_eq(setenv("SNOWFLAKED_SEQUENCES_NAMESPACES", "[{\"name\":\"e\",\"block\":3}]", 1),
                     0);
    rc = load_argv(&c, err, sizeof err, (char *)NULL);
    unsetenv("SNOWFLAKED_SEQUENCES_NAMESPACES");
    EXPECT_OK(rc, err);
    ck_assert_uint_eq(c.sequences.nns, 1);
    ck_assert_uint_eq(c.sequences.ns[0].block, 3);

    const struct {
        const char *set, *want;
    } bad[] = {
        {"sequences.namespaces={}", "must be a JSON array of namespace objects"},
        {"sequences.namespaces=[7]", "namespace 1: must be an object with a \"name\""},
        {"sequences.namespaces=[{\"name\":\"a/b\"}]", "namespace name \"a/b\""},
        {"sequences.namespaces=[{\"name\":\"a\",\"x\":1}]", "\"a\": unknown key x"},
        {"sequences.namespaces=[{\"name\":\"a\",\"block\":0}]", "block must be at least 1"},
        {"sequences.namespaces=[{\"name\":\"a\",\"block\":1.5}]", "block must be an integer"},
        {"sequences.namespaces=[{\"name\":\"a\",\"start\":9,\"max\":8}]", "start 9 is above max 8"},
        {"sequences.namespaces=[{\"name\":\"a\",\"token\":\"short\"}]", "token must be 16"},
        {"sequences.namespaces=[{\"name\":\"a\",\"adaptive\":1}]", "adaptive must be true or false"},
        {"sequences.namespaces=[{\"name\":\"a\"},{\"name\":\"a\"}]", "declared twice"},
        {"sequences.namespaces=[{\"name\":\"a\",\"name\":\"b\"}]", "duplicate key name"},
        /* one array and nothing after it; no \u0000 cutting a string short */
        {"sequences.namespaces=[{\"name\":\"a\"}]x", "text after the JSON value at byte 14"},
        {"sequences.namespaces=[{\"name\":\"a\"}] [{\"name\":\"b\"}]", "text after the JSON"},
        {"sequences.namespaces=[{\"name\":\"a\\u0000b\"}]", "\\u0000 in a string"},
        /* a token no Authorization header can carry: where, never what */
        {"sequences.namespaces=[{\"name\":\"a\",\"token\":\"secret token-0123456\"}]",
         "\"a\": token must be visible ASCII without spaces (0x21-0x7E), byte 7 is not"},
        {"sequences.namespaces=[{\"name\":\"a\",\"token\":\"secret\\u00e9token-0123\"}]",
         "byte 7 is not"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rc = load_argv(&c, err, sizeof err, "--set", (char *)bad[i].set, (char *)NULL);
        EXPECT_ERR(rc, err, "flag --set: sequences.namespaces: ", bad[i].want);
        ck_assert_msg(strstr(err, "secret") == NULL, "the token is quoted: %s", err);
    }
    rc = load_argv(&c, err, sizeof err, "--set", "sequences.namespaces=[{\"name\":\"a\"},"
                   "{\"name\":\"b\"}]", "--set", "sequences.max_namespaces=1", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: sequences.max_namespaces: 1 is below the 2 namespaces");
}
END_TEST

START_TEST(test_client_certificates)
{
    cfg c;
    char err[512];
    int rc = load_json("{" TLS_ON ",\"auth\":{\"client_certificates\":[\"CN=orders-api,O=shop\","
                       "\"DNS:billing.shop.svc\",\"URI:spiffe://td/ns/x/sa/y\"]}}",
                       &c, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.auth.client_certificates,
                     "CN=orders-api,O=shop\nDNS:billing.shop.svc\nURI:spiffe://td/ns/x/sa/y");
    ck_assert(!c.auth.token_and_certificate);
    char *out = print_to_string(&c);
    ck_assert_msg(strstr(out, "\"client_certificates\": [\"CN=orders-api,O=shop\", "
                              "\"DNS:billing.shop.svc\", \"URI:spiffe://td/ns/x/sa/y\"]"),
                  "%s", out);
    cfg again; /* --check-config's output loads again, the list included */
    rc = load_json(out, &again, err, sizeof err);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(again.auth.client_certificates, c.auth.client_certificates);
    free(out);

    const char *tls[] = {"--set", "server.tls.port=8443", "--set", "server.tls.cert_file=c",
                         "--set", "server.tls.key_file=k", "--set", "server.tls.client_ca_file=ca",
                         "--set", "server.tls.verify_client=required"};
#define TLS_ARGS (char *)tls[0], (char *)tls[1], (char *)tls[2], (char *)tls[3], (char *)tls[4], \
                 (char *)tls[5], (char *)tls[6], (char *)tls[7], (char *)tls[8], (char *)tls[9]
    rc = load_argv(&c, err, sizeof err, TLS_ARGS, "--set", "auth.client_certificates=CN=a,O=b",
                   (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.auth.client_certificates, "CN=a,O=b"); /* one entry */
    ck_assert_int_eq(setenv("SNOWFLAKED_AUTH_CLIENT_CERTIFICATES", "[\"DNS:a.b\",\"CN=c\"]", 1), 0);
    rc = load_argv(&c, err, sizeof err, TLS_ARGS, (char *)NULL);
    unsetenv("SNOWFLAKED_AUTH_CLIENT_CERTIFICATES");
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.auth.client_certificates, "DNS:a.b\nCN=c");
    rc = load_argv(&c, err, sizeof err, TLS_ARGS, "--set", "auth.client_certificates=[]",
                   (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert_str_eq(c.auth.client_certificates, "");

    /* refusals: a bad entry (named by its index), a wrong type, no TLS listener asking */
    rc = load_json("{" TLS_ON ",\"auth\":{\"client_certificates\":[\"CN=a\",\"DNS:*.x\"]}}", &c,
                   err, sizeof err);
    EXPECT_ERR(rc, err, last_path, "auth.client_certificates: [1] \"DNS:*.x\": no wildcards");
    rc = load_json("{" TLS_ON ",\"auth\":{\"client_certificates\":\"CN=a\"}}", &c, err, sizeof err);
    EXPECT_ERR(rc, err, last_path, "auth.client_certificates: expected an array of strings");
    rc = load_json("{" TLS_ON ",\"auth\":{\"client_certificates\":[\"CN=a\",7]}}", &c, err,
                   sizeof err);
    EXPECT_ERR(rc, err, last_path, "auth.client_certificates: [1] must be a string, got 7");
    rc = load_argv(&c, err, sizeof err, "--set", "auth.client_certificates=[\"CN=a\"",
                   (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: auth.client_certificates: ", "not a JSON array");
    rc = load_argv(&c, err, sizeof err, "--set", "auth.client_certificates=[\"CN=a\"]x",
                   (char *)NULL); /* one array, nothing after it */
    EXPECT_ERR(rc, err, "flag --set: auth.client_certificates: ", "not a JSON array");
    /* '\n' separates the stored entries: one inside an entry is refused, never split */
    rc = load_json("{" TLS_ON ",\"auth\":{\"client_certificates\":[\"CN=a\\nCN=b\"]}}", &c, err,
                   sizeof err);
    EXPECT_ERR(rc, err, last_path, "auth.client_certificates: [0]: a control character");
    rc = load_argv(&c, err, sizeof err, TLS_ARGS, "--set", "auth.client_certificates=CN=a\nCN=b",
                   (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: auth.client_certificates: ", "no line feed");
    rc = load_json("{\"auth\":{\"client_certificates\":[\"CN=a\"]}}", &c, err, sizeof err);
    EXPECT_ERR(rc, err, last_path, "auth.client_certificates: needs the HTTP TLS listener",
               "server.tls.port is 0");
    rc = load_argv(&c, err, sizeof err, TLS_ARGS, "--set", "server.tls.verify_client=none",
                   "--set", "auth.client_certificates=CN=a", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: auth.client_certificates: needs the HTTP TLS listener",
               "server.tls.verify_client is \"none\"");

    /* auth.credentials */
    rc = load_argv(&c, err, sizeof err, TLS_ARGS, "--set", "auth.client_certificates=CN=a",
                   "--set", "auth.credentials=token_and_certificate", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: auth.credentials: \"token_and_certificate\" needs");
    rc = load_argv(&c, err, sizeof err, TLS_ARGS, "--set", "auth.client_certificates=CN=a",
                   "--set", "auth.token=0123456789abcdef", "--set",
                   "auth.credentials=token_and_certificate", (char *)NULL);
    EXPECT_OK(rc, err);
    ck_assert(c.auth.token_and_certificate);
    rc = load_argv(&c, err, sizeof err, "--set", "auth.credentials=both", (char *)NULL);
    EXPECT_ERR(rc, err, "flag --set: auth.credentials: must be one of "
                        "token_or_certificate|token_and_certificate");
#undef TLS_ARGS
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_embedded_defaults);
    tcase_add_test(tc, test_default_file_loads);
    tcase_add_test(tc, test_every_key_in_config_json);
    tcase_add_test(tc, test_every_key_has_env_and_set);
    tcase_add_test(tc, test_print_round_trip);
    tcase_add_loop_test(tc, test_bad_file, 0, (int)(sizeof bad_files / sizeof bad_files[0]));
    tcase_add_test(tc, test_good_edges);
    tcase_add_test(tc, test_threads_zero_resolves);
    tcase_add_test(tc, test_short_token_refused);
    tcase_add_test(tc, test_loopback_hosts);
    tcase_add_test(tc, test_string_lengths);
    tcase_add_test(tc, test_missing_file);
    tcase_add_test(tc, test_unreadable_file);
    tcase_add_test(tc, test_odd_bytes);
    tcase_add_test(tc, test_fuzz_no_crash);
    tcase_add_test(tc, test_worker_ordinal_pod_name);
    tcase_add_test(tc, test_worker_ordinal_errors);
    tcase_add_test(tc, test_worker_ordinal_hostname);
    tcase_add_test(tc, test_worker_env);
    tcase_add_test(tc, test_worker_text_forms);
    tcase_add_test(tc, test_precedence_port);
    tcase_add_test(tc, test_precedence_worker_and_threads);
    tcase_add_test(tc, test_env_values);
    tcase_add_test(tc, test_env_errors);
    tcase_add_test(tc, test_flag_errors);
    tcase_add_test(tc, test_parse_args_all);
    tcase_add_test(tc, test_parse_args_errors);
    tcase_add_test(tc, test_parse_args_too_many_sets);
    tcase_add_test(tc, test_usage);
    tcase_add_test(tc, test_print_forms);
    tcase_add_test(tc, test_layout_presets);
    tcase_add_test(tc, test_layout_print_round_trip);
    tcase_add_test(tc, test_lifetime_warning);
    tcase_add_test(tc, test_client_certificates);
    tcase_add_test(tc, test_sequences_namespaces);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(config_suite());
}
