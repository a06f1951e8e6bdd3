/* IDs over the memcached protocol (proto/memcache_ids.c, cache.memcached_id_keys): the reply
 * bytes of get, gets, gat, mg for reserved keys and their mix with cached keys, the refusal of
 * every write of a reserved key (exact bytes, the store untouched, a storage command's block
 * swallowed), a generator's refusal (shutdown, the etcd fence) as the get's only answer, the
 * per-format limit, and a get line streamed over the line limit and cut into reads at several
 * positions still answering one distinct ID per reserved key. Driven through the daemon's own
 * object graph on a connection without a socket (memcache_fixture.h). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "check_main.h"
#include "memcache_fixture.h"
#include "proto/memcache.h"
#include "snowflake/generator.h"
#include "util/clock.h"

#define REFUSED MC_ID_KEY_REFUSED "\r\n"

static mc_fixture *fx;
static mc_fixture_out *answer;

static void start(unsigned max_batch)
{
    fx = calloc(1, sizeof *fx);
    answer = calloc(1, sizeof *answer);
    ck_assert_ptr_nonnull(fx);
    mc_fixture_config(fx);
    snprintf(fx->config.cache.memcached_id_keys.snowflake,
             sizeof fx->config.cache.memcached_id_keys.snowflake, "id");
    snprintf(fx->config.cache.memcached_id_keys.uuidv7,
             sizeof fx->config.cache.memcached_id_keys.uuidv7, "uuid");
    snprintf(fx->config.cache.memcached_id_keys.ulid,
             sizeof fx->config.cache.memcached_id_keys.ulid, "ulid");
    if (max_batch)
        fx->config.snowflake.max_batch = max_batch;
    mc_fixture_start(fx);
}

static void stop(void)
{
    mc_fixture_free(fx);
    free(fx);
    free(answer);
}

/* One connection fed `in` in one read; the answer in answer->buf. */
static const char *run(const char *in)
{
    answer->n = 0;
    answer->buf[0] = '\0';
    mc_fixture_run(fx, in, strlen(in), NULL, 0, SIZE_MAX, mc_fixture_collect, answer);
    return answer->buf;
}

/* The VALUE blocks of an answer: keys, flags, lengths and IDs, checked for framing as they go.
 * Returns the count; ids[i] the i-th value's text. */
static size_t values(const char *s, char ids[][48], char keys[][16], size_t max, bool cas)
{
    size_t k = 0;
    while (strncmp(s, "VALUE ", 6) == 0) {
        ck_assert_uint_lt(k, max);
        unsigned len, flags;
        unsigned long long casv = 99;
        int used = 0;
        int got = cas ? sscanf(s, "VALUE %15s %u %u %llu\r\n%n", keys[k], &flags, &len, &casv, &used)
                      : sscanf(s, "VALUE %15s %u %u\r\n%n", keys[k], &flags, &len, &used);
        ck_assert_int_eq(got, cas ? 4 : 3);
        ck_assert_uint_eq(flags, 0);
        if (cas)
            ck_assert_uint_eq(casv, 0);
        s += used;
        ck_assert_uint_lt(len, 48);
        memcpy(ids[k], s, len);
        ids[k][len] = '\0';
        ck_assert_msg(s[len] == '\r' && s[len + 1] == '\n', "value not framed: %s", s);
        s += len + 2;
        k++;
    }
    ck_assert_str_eq(s, "END\r\n");
    return k;
}

START_TEST(test_get_framing_and_order)
{
    start(0);
    char ids[8][48], keys[8][16];
    /* a cached key among the reserved ones: answered in key order */
    run("set foo 0 0 3\r\nbar\r\n");
    ck_assert_uint_eq(values(run("get id id uuid foo ulid id\r\n"), ids, keys, 8, false), 6);
    static const char *const order[] = {"id", "id", "uuid", "foo", "ulid", "id"};
    for (int i = 0; i < 6; i++)
        ck_assert_str_eq(keys[i], order[i]);
    ck_assert_str_eq(ids[3], "bar");
    ck_assert_uint_eq(strlen(ids[2]), 36);
    ck_assert_int_eq(ids[2][14], '7'); /* the version nibble */
    ck_assert_uint_eq(strlen(ids[4]), 26);
    ck_assert_str_ne(ids[0], ids[1]);
    /* the Snowflake IDs: decimal, distinct, increasing in key order */
    ck_assert_uint_eq(values(run("get id id id\r\n"), ids, keys, 8, false), 3);
    unsigned long long prev = 0;
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(keys[i], "id");
        ck_assert_uint_eq(strspn(ids[i], "0123456789"), strlen(ids[i]));
        unsigned long long v = strtoull(ids[i], NULL, 10);
        ck_assert_uint_gt(v, prev);
        prev = v;
    }
    /* gets: the same with cas 0; gat: an ID, nothing touched */
    ck_assert_uint_eq(values(run("gets id uuid\r\n"), ids, keys, 8, true), 2);
    ck_assert_uint_eq(strtoull(ids[0], NULL, 10) > prev, 1);
    ck_assert_uint_eq(values(run("gat 100 ulid\r\n"), ids, keys, 8, false), 1);
    ck_assert_uint_eq(strlen(ids[0]), 26);
    /* the store never saw them */
    cache_store *st = fx->app.cache;
    uint64_t now = clk_now(clk_system());
    ck_assert_ptr_null(cache_get(st, "id", 2, now));
    ck_assert_ptr_null(cache_get(st, "uuid", 4, now));
    /* counted by format */
    uint64_t n[MC_ID_FORMATS];
    memcache_server_ids_issued(fx->app.mc, n);
    ck_assert_uint_eq(n[MC_ID_SNOWFLAKE], 3 + 3 + 1);
    ck_assert_uint_eq(n[MC_ID_UUID7], 2);
    ck_assert_uint_eq(n[MC_ID_ULID], 2);
    stop();
}
END_TEST

START_TEST(test_mg)
{
    start(0);
    char v[64];
    const char *a = run("mg id v k s t f c h l O42\r\n");
    int used = 0;
    unsigned len, s;
    ck_assert_int_eq(sscanf(a, "VA %u kid s%u t-1 f0 c0 h0 l0 O42\r\n%n", &len, &s, &used), 2);
    ck_assert_int_gt(used, 0);
    ck_assert_uint_eq(len, s);
    memcpy(v, a + used, len);
    v[len] = '\0';
    ck_assert_uint_eq(strspn(v, "0123456789"), len);
    ck_assert_str_eq(a + used + len, "\r\n");
    ck_assert_str_eq(run("mg uuid\r\n"), "HD\r\n");
    ck_assert_str_eq(run("mg uuid k q\r\n"), "HD kuuid\r\n");
    /* base64 key b: the decoded key is the reserved one, k echoes it as asked */
    a = run("mg dWxpZA== b v k\r\n");
    ck_assert_int_eq(strncmp(a, "VA 26 kdWxpZA== b\r\n", 19), 0);
    ck_assert_uint_eq(strlen(a), 19 + 26 + 2);
    /* flags that would change an item */
    ck_assert_str_eq(run("mg id v T30\r\n"), REFUSED);
    ck_assert_str_eq(run("mg id N30 v\r\n"), REFUSED);
    ck_assert_str_eq(run("mg id R30 v\r\n"), REFUSED);
    ck_assert_str_eq(run("mg id v O123456789012345678901234567890123\r\n"),
                     "CLIENT_ERROR opaque token too long\r\n");
    stop();
}
END_TEST

START_TEST(test_writes_refused)
{
    start(0);
    static const char *const cmds[] = {
        "set id 0 0 3\r\nabc\r\n",   "add id 0 0 3\r\nabc\r\n",  "replace id 0 0 3\r\nabc\r\n",
        "append id 0 0 3\r\nabc\r\n", "prepend id 0 0 3\r\nabc\r\n",
        "cas id 0 0 3 1\r\nabc\r\n",  "delete id\r\n",           "incr uuid 1\r\n",
        "decr ulid 1\r\n",            "touch id 10\r\n",         "ms id 3\r\nabc\r\n",
        "ms id 3 T0 F1\r\nabc\r\n",   "ms aWQ= 3 b\r\nabc\r\n",  "md id\r\n",
        "md id q\r\n",                "ma id\r\n",               "ma uuid MI D2\r\n",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char in[128];
        /* the data block is swallowed, never run as a command: "mn" answers right after */
        snprintf(in, sizeof in, "%smn\r\n", cmds[i]);
        ck_assert_msg(strcmp(run(in), REFUSED "MN\r\n") == 0, "%s -> %s", cmds[i], answer->buf);
    }
    /* noreply: nothing, as their other errors */
    ck_assert_str_eq(run("set id 0 0 3 noreply\r\nabc\r\ndelete id noreply\r\nmn\r\n"), "MN\r\n");
    uint64_t now = clk_now(clk_system());
    ck_assert_ptr_null(cache_get(fx->app.cache, "id", 2, now));
    /* an ordinary key beside them still works */
    ck_assert_str_eq(run("set idx 0 0 1\r\nx\r\nget idx\r\n"), "STORED\r\nVALUE idx 0 1\r\nx\r\nEND\r\n");
    stop();
}
END_TEST

START_TEST(test_refusal_is_the_whole_answer)
{
    start(0);
    run("set foo 0 0 3\r\nbar\r\n");
    /* a sealed generator (shutdown) refuses as HTTP's 503 does: no VALUE before, no END */
    sf_gen_seal(fx->app.gen_ptrs[0]);
    ck_assert_str_eq(run("get foo id\r\nmn\r\n"),
                     "SERVER_ERROR generator is shutting down\r\nMN\r\n");
    ck_assert_str_eq(run("gets foo uuid id\r\n"), "SERVER_ERROR generator is shutting down\r\n");
    ck_assert_str_eq(run("mg id v\r\n"), "SERVER_ERROR generator is shutting down\r\n");
    /* the other formats and the cache still answer */
    ck_assert_int_eq(strncmp(run("get foo uuid\r\n"), "VALUE foo 0 3\r\nbar\r\nVALUE uuid 0 36\r\n", 35), 0);
    uint64_t n[MC_ID_FORMATS];
    memcache_server_ids_issued(fx->app.mc, n);
    ck_assert_uint_eq(n[MC_ID_SNOWFLAKE], 0);
    stop();
}
END_TEST

/* The etcd fence (app.c identity_stop_issuing: the slot lapsed, every generator capped at 0):
 * the IDs stop on the memcached protocol as on HTTP, with HTTP's reason. */
START_TEST(test_fenced)
{
    start(0);
    ck_assert_int_eq(strncmp(run("get id\r\n"), "VALUE id 0 ", 11), 0);
    for (unsigned i = 0; i < 3 * fx->app.gens_per_format; i++)
        sf_gen_cap_lease(fx->app.gen_ptrs[i], 0);
    static const char want[] = "SERVER_ERROR timestamp lease not reached or not renewed\r\n";
    ck_assert_str_eq(run("get id\r\n"), want);
    ck_assert_str_eq(run("get uuid ulid\r\n"), want);
    ck_assert_str_eq(run("gets ulid\r\n"), want);
    ck_assert_str_eq(run("mg uuid v\r\n"), want);
    stop();
}
END_TEST

START_TEST(test_per_format_limit)
{
    start(4);
    char ids[8][48], keys[8][16];
    ck_assert_uint_eq(values(run("get id id id id uuid uuid uuid uuid\r\n"), ids, keys, 8, false), 8);
    ck_assert_str_eq(run("get id id id id id\r\n"),
                     "CLIENT_ERROR more than 4 ID keys of one format in a get (snowflake.max_batch)\r\n");
    stop();
}
END_TEST

/* A get line over the line limit streams key by key (memcache.c get_cont): cut into reads at
 * many positions, the reserved keys still get one distinct ID each, in key order. */
START_TEST(test_long_line_streamed)
{
    start(0);
    enum { NKEYS = 1200 }; /* 1200 * " id" = 3600 bytes: over MEMCACHE_LINE_MAX */
    static char in[NKEYS * 3 + 16];
    size_t len = 3;
    memcpy(in, "get", 3);
    for (int i = 0; i < NKEYS; i++) {
        memcpy(in + len, " id", 3);
        len += 3;
    }
    memcpy(in + len, "\r\n", 2);
    len += 2;
    static const size_t cut_sets[][3] = {{1, 2049, 3000}, {700, 701, 2500}, {2047, 2048, 2050}};
    unsigned long long last = 0;
    for (size_t c = 0; c < sizeof cut_sets / sizeof *cut_sets; c++) {
        answer->n = 0;
        mc_fixture_result r = mc_fixture_run(fx, in, len, cut_sets[c], 3, 100, mc_fixture_collect, answer);
        ck_assert(r.open);
        const char *s = answer->buf;
        int k = 0;
        while (strncmp(s, "VALUE id 0 ", 11) == 0) {
            unsigned vlen;
            int used;
            ck_assert_int_eq(sscanf(s, "VALUE id 0 %u\r\n%n", &vlen, &used), 1);
            unsigned long long v = strtoull(s + used, NULL, 10);
            ck_assert_uint_gt(v, last);
            last = v;
            s += used + vlen + 2;
            k++;
        }
        ck_assert_int_eq(k, NKEYS);
        ck_assert_str_eq(s, "END\r\n");
    }
    stop();
}
END_TEST

/* A name K reserves a family: K and every "K:<suffix>" (suffix 1+ bytes), so a key-hashing
 * client spreads `get K:1 K:2 ...` over a fleet. "K:" alone and "Kx" are cache keys. */
START_TEST(test_key_family)
{
    start(0);
    const memcache_server *mc = fx->app.mc;
    static const struct {
        const char *key;
        int f;
    } member[] = {
        {"id", MC_ID_SNOWFLAKE}, {"id:1", MC_ID_SNOWFLAKE},  {"id:abc", MC_ID_SNOWFLAKE},
        {"id::", MC_ID_SNOWFLAKE}, {"id:a:b", MC_ID_SNOWFLAKE}, {"uuid:7", MC_ID_UUID7},
        {"ulid:x", MC_ID_ULID},  {"id:", -1},                {"idx", -1},
        {"idx:1", -1},           {"i", -1},                  {"d:1", -1},
        {"uuid:", -1},           {"ID:1", -1},               {"id;1", -1},
    };
    for (size_t i = 0; i < sizeof member / sizeof *member; i++)
        ck_assert_msg(memcache_server_id_key(mc, member[i].key, strlen(member[i].key)) ==
                          member[i].f,
                      "%s", member[i].key);
    char longest[CACHE_KEY_MAX + 1];
    memset(longest, 'z', CACHE_KEY_MAX);
    memcpy(longest, "id:", 3);
    longest[CACHE_KEY_MAX] = '\0';
    ck_assert_int_eq(memcache_server_id_key(mc, longest, CACHE_KEY_MAX), MC_ID_SNOWFLAKE);

    /* get: each member answers a new ID under the exact key sent; "id:" and "idx" are misses */
    char ids[8][48], keys[8][16];
    ck_assert_uint_eq(values(run("get id:1 id: id:abc idx uuid:q ulid:r id:: id:1\r\n"), ids, keys,
                             8, false),
                      6);
    static const char *const order[] = {"id:1", "id:abc", "uuid:q", "ulid:r", "id::", "id:1"};
    for (int i = 0; i < 6; i++)
        ck_assert_str_eq(keys[i], order[i]);
    ck_assert_uint_eq(strlen(ids[2]), 36);
    ck_assert_uint_eq(strlen(ids[3]), 26);
    unsigned long long prev = 0;
    static const int snow[] = {0, 1, 4, 5};
    for (int i = 0; i < 4; i++) { /* increasing in key order, the repeated key too */
        unsigned long long v = strtoull(ids[snow[i]], NULL, 10);
        ck_assert_uint_eq(strspn(ids[snow[i]], "0123456789"), strlen(ids[snow[i]]));
        ck_assert_uint_gt(v, prev);
        prev = v;
    }
    ck_assert_uint_eq(values(run("gets id:9\r\n"), ids, keys, 8, true), 1);
    ck_assert_str_eq(keys[0], "id:9");

    /* mg: k echoes the member; b: the decoded key ("id:1") is the one compared */
    const char *a = run("mg id:42 v k\r\n");
    unsigned len;
    int used = 0;
    ck_assert_int_eq(sscanf(a, "VA %u kid:42\r\n%n", &len, &used), 1);
    ck_assert_int_gt(used, 0);
    ck_assert_str_eq(run("mg aWQ6MQ== b k\r\n"), "HD kaWQ6MQ== b\r\n");

    /* writes of a member refused, the block swallowed; "id:" and "idx" are the cache's */
    static const char *const cmds[] = {
        "set id:1 0 0 3\r\nabc\r\n", "add id:x 0 0 1\r\na\r\n", "append uuid:1 0 0 1\r\na\r\n",
        "delete id:1\r\n",           "incr id:2 1\r\n",           "touch ulid:z 10\r\n",
        "ms id:1 3\r\nabc\r\n",      "md id::\r\n",               "ma id:5\r\n",
        "ms aWQ6MQ== 1 b\r\nx\r\n",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char in[128];
        snprintf(in, sizeof in, "%smn\r\n", cmds[i]);
        ck_assert_msg(strcmp(run(in), REFUSED "MN\r\n") == 0, "%s -> %s", cmds[i], answer->buf);
    }
    uint64_t now = clk_now(clk_system());
    ck_assert_ptr_null(cache_get(fx->app.cache, "id:1", 4, now));
    ck_assert_str_eq(run("set id: 0 0 1\r\nx\r\nget id:\r\n"),
                     "STORED\r\nVALUE id: 0 1\r\nx\r\nEND\r\n");
    ck_assert_str_eq(run("set idx:1 0 0 1\r\ny\r\nget idx:1\r\n"),
                     "STORED\r\nVALUE idx:1 0 1\r\ny\r\nEND\r\n");
    stop();
}
END_TEST

/* The families of the three names must not overlap: equal names, or one starting with another
 * and ':' ("a:" too, "a::x" being in both), are refused; "ab" beside "a" is fine. */
START_TEST(test_families_must_not_overlap)
{
    start(0);
    memcache_server *mc = fx->app.mc;
    sf_gen *const *g = fx->app.gen_ptrs;
    unsigned per = fx->app.gens_per_format;
    static const char *const sets[][3] = {
        {"a", "a", ""}, {"a", "a:b", ""}, {"a:b", "a", ""}, {"a", "", "a:"}, {"a:", "x", "a"},
        {"x", "a:b:c", "a:b"},
    };
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        memcache_ids ids = {.keys = {sets[i][0], sets[i][1], sets[i][2]},
                            .gens = {g, g + per, g + 2 * per},
                            .ngens = per};
        ck_assert_msg(memcache_server_set_ids(mc, &ids) == -1, "set %zu accepted", i);
    }
    memcache_ids ok = {.keys = {"a", "ab", "b:a"}, .gens = {g, g + per, g + 2 * per}, .ngens = per};
    ck_assert_int_eq(memcache_server_set_ids(mc, &ok), 0);
    ck_assert_int_eq(memcache_server_id_key(mc, "ab:1", 4), MC_ID_UUID7);
    ck_assert_int_eq(memcache_server_id_key(mc, "b:a:1", 5), MC_ID_ULID);
    ck_assert_int_eq(memcache_server_id_key(mc, "b:1", 3), -1);
    stop();
}
END_TEST

/* Without reserved keys (the default) the same keys are ordinary cache keys. */
START_TEST(test_off_by_default)
{
    fx = calloc(1, sizeof *fx);
    answer = calloc(1, sizeof *answer);
    mc_fixture_config(fx);
    ck_assert_str_eq(fx->config.cache.memcached_id_keys.snowflake, "");
    ck_assert_str_eq(fx->config.cache.memcached_id_keys.uuidv7, "");
    ck_assert_str_eq(fx->config.cache.memcached_id_keys.ulid, "");
    mc_fixture_start(fx);
    ck_assert_str_eq(run("get id\r\n"), "END\r\n");
    ck_assert_str_eq(run("set id 0 0 1\r\n7\r\nget id\r\n"), "STORED\r\nVALUE id 0 1\r\n7\r\nEND\r\n");
    ck_assert_int_eq(memcache_server_id_key(fx->app.mc, "id", 2), -1);
    stop();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("memcache_ids");
    TCase *tc = tcase_create("ids");
    tcase_add_test(tc, test_get_framing_and_order);
    tcase_add_test(tc, test_mg);
    tcase_add_test(tc, test_writes_refused);
    tcase_add_test(tc, test_refusal_is_the_whole_answer);
    tcase_add_test(tc, test_fenced);
    tcase_add_test(tc, test_per_format_limit);
    tcase_add_test(tc, test_long_line_streamed);
    tcase_add_test(tc, test_off_by_default);
    tcase_add_test(tc, test_key_family);
    tcase_add_test(tc, test_families_must_not_overlap);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(suite());
}
