/* memcached get streaming: what a client receives does not depend on how its bytes arrive or on
 * how fast it reads, and the output a get queues stays bounded. Also (tcase refused_store, see
 * there): a refused storage command's data block is never run as commands, however it arrives.
 *
 * Why: get/gets/gat/gats pause between keys once the connection's unsent output reaches the
 * high-water mark and resume as the client reads (proto/memcache.c); a line cut across reads is
 * kept and completed by later reads, a line over 2048 bytes streams key by key. Two reviews found
 * bugs there that showed only for some cut positions (a CR before a NUL in a line completed across
 * reads, a too-long key at a read boundary, one value too many at the last pending key), which
 * hand-written examples hardly reach. So this test generates get traffic at random: NULs and
 * stray CRs in lines, lines over the line limit, keys over 250 bytes, leading and repeated
 * spaces, bare LF and CR CR LF line ends, several commands pipelined, quit. Each input runs
 * through the real protocol on a connection without a socket (net/conn_fake.h), on a 1 KiB
 * high-water mark with values of 600..3100 bytes (a get pauses after one or two of them):
 *   - in one read, the peer reading everything at once: the reference answer;
 *   - cut into reads at random positions, the peer taking at most 1, 100, 700, 4096 bytes or
 *     everything per write (test_cut_reads, one case per write budget);
 *   - byte by byte, the inputs under 400 bytes (test_byte_by_byte, one case per write budget).
 * Proven for every run: the answer is the reference's byte for byte and the connection ends the
 * same way; the protocol never yields without progress (CONN_FAKE_STUCK) nor consumes more than
 * it was given (CONN_FAKE_BAD); the output queued at once never exceeds the high-water mark plus
 * the largest value plus a little header slack (the memory bound a streaming get promises).
 *
 * The inputs never make the server close at once (only get/gets lines exceed the line limit): a
 * close at once drops the unsent output, so what the peer got then depends on its speed by
 * design.
 *
 * Deterministic: a fixed xorshift seed per case. SF_STREAM_ITERS=N runs N inputs per case instead
 * of STREAM_ITERS_DEFAULT (a soak); a failure prints the input, the reference and the differing
 * answer escaped, with the case's seed and the input's number.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/store.h"
#include "check_main.h"
#include "memcache_fixture.h"
#include "net/conn_fake.h"

#define STREAM_ITERS_DEFAULT 3000
#define HIGH_WATER           1024
#define NBIG                 6 /* keys b0..b5 hold values of 600, 1100, ... 3100 bytes */
#define BIG_VALUE(i)         (600 + 500 * (size_t)(i))
#define LARGEST_VALUE        BIG_VALUE(NBIG - 1)
/* Beside the value that crosses the mark: its VALUE line (at most 38 bytes with these keys and a
 * cas unique), its CRLF and an END. */
#define HEADER_SLACK 64
#define CUT_VARIANTS 4   /* random cuttings of each input per write budget */
#define BYTEWISE_MAX 400 /* inputs fed byte by byte are shorter than this */

static const size_t write_budgets[] = {SIZE_MAX, 1, 100, 700, 4096};
#define NBUDGETS (sizeof write_budgets / sizeof *write_budgets)

/* ---- bytes and randomness ------------------------------------------------------------------- */

typedef struct bytes {
    char *p;
    size_t n, cap;
} bytes;

static void bytes_add(bytes *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->n + n > cap)
            cap *= 2;
        b->p = realloc(b->p, cap);
        ck_assert_ptr_nonnull(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
#define BYTES_ADD_LIT(b, lit) bytes_add((b), (lit), sizeof(lit) - 1)

static void bytes_free(bytes *b)
{
    free(b->p);
    *b = (bytes){0};
}

static uint64_t g_rng;

static uint32_t rng_below(uint32_t n) /* xorshift64 */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11) % n;
}

static long stream_iters(void)
{
    const char *s = getenv("SF_STREAM_ITERS");
    long n = s ? strtol(s, NULL, 10) : STREAM_ITERS_DEFAULT;
    return n > 0 ? n : STREAM_ITERS_DEFAULT;
}

/* ---- the server: a store with known values, the memcached protocol on a fake loop ---------- */

static mc_fixture server; /* the daemon's object graph in process: its store and memcache server */

/* What one connection got. */
typedef struct answer {
    bytes out;
    int rc;             /* the last conn_fake_feed result */
    size_t max_pending; /* the most output queued at once */
} answer;

static void to_answer(const char *d, size_t n, void *arg)
{
    bytes_add(arg, d, n);
}

/* One connection: the input cut before each of cuts[0..ncuts) (ascending), the peer taking at
 * most `budget` bytes per write, then everything left. */
static void run_conn(const char *in, size_t len, const size_t *cuts, size_t ncuts, size_t budget,
                     answer *a)
{
    mc_fixture_result r = mc_fixture_run(&server, in, len, cuts, ncuts, budget, to_answer, &a->out);
    a->rc = r.rc;
    a->max_pending = r.max_pending;
}

static void store_via_protocol(const char *cmd, size_t len)
{
    answer a = {0};
    run_conn(cmd, len, NULL, 0, SIZE_MAX, &a);
    ck_assert_int_eq(a.rc, CONN_FAKE_OK);
    ck_assert_msg(a.out.n == 8 && memcmp(a.out.p, "STORED\r\n", 8) == 0, "set not stored");
    bytes_free(&a.out);
}

static void setup(void)
{
    mc_fixture_config(&server); /* read_buffer 64 KiB: "one read" is one read for every input */
    server.out_high_water = HIGH_WATER;
    mc_fixture_start(&server);

    for (int i = 0; i < NBIG; i++) { /* b<i>: flags i, BIG_VALUE(i) bytes of 'A' + i */
        bytes set = {0};
        char line[64], value[LARGEST_VALUE];
        int n = snprintf(line, sizeof line, "set b%d %d 0 %zu\r\n", i, i, BIG_VALUE(i));
        bytes_add(&set, line, (size_t)n);
        memset(value, 'A' + i, BIG_VALUE(i));
        bytes_add(&set, value, BIG_VALUE(i));
        BYTES_ADD_LIT(&set, "\r\n");
        store_via_protocol(set.p, set.n);
        bytes_free(&set);
    }
    static const char *const small[] = {"set s0 10 0 1\r\na\r\n", "set s1 11 0 2\r\nbb\r\n",
                                        "set s2 12 0 3\r\nccc\r\n", "set s3 13 0 0\r\n\r\n"};
    for (size_t i = 0; i < sizeof small / sizeof *small; i++)
        store_via_protocol(small[i], strlen(small[i]));
}

static void teardown(void)
{
    mc_fixture_free(&server);
}

/* ---- the inputs ------------------------------------------------------------------------------ */

typedef struct piece {
    const char *s;
    size_t n; /* NULs included */
} piece;
/* clang-format off */
#define PIECE(lit) {(lit), sizeof(lit) - 1}
/* clang-format on */
#define ADD_ONE_OF(in, pieces) add_one_of((in), (pieces), sizeof(pieces) / sizeof *(pieces))

static void add_one_of(bytes *in, const piece *pieces, size_t n)
{
    const piece *p = &pieces[rng_below((uint32_t)n)];
    bytes_add(in, p->s, p->n);
}

/* Half the time a big value; else small ones (one empty), a key with a CR in it, and misses. */
static void add_random_key(bytes *in)
{
    static const piece small[] = {PIECE("s0"), PIECE("s1"),   PIECE("s2"),
                                  PIECE("s3"), PIECE("s0\r"), PIECE("m1"),
                                  PIECE("m2"), PIECE("m33"),  PIECE("mmmm")};
    if (rng_below(2)) {
        char key[2] = {'b', (char)('0' + rng_below(NBIG))};
        bytes_add(in, key, sizeof key);
    } else {
        ADD_ONE_OF(in, small);
    }
}

/* A get, gets, gat or gats line: keys with one to three spaces before each; sometimes leading
 * spaces, a NUL before a key or after the last, a key of 251 bytes, trailing spaces, and for
 * get/gets some 300-500 keys of misses in the middle (a line of 2-3.5 KB, over the line limit);
 * ended by CRLF, LF or CR CR LF. */
static void add_get_line(bytes *in)
{
    static const piece cmds[] = {PIECE("get"),   PIECE("get"),        PIECE("gets"),
                                 PIECE("gat 0"), PIECE("gats 86400"), PIECE("get")};
    static const piece ends[] = {PIECE("\n"),   PIECE("\r\r\n"), PIECE("\r\n"),
                                 PIECE("\r\n"), PIECE("\r\n"),   PIECE("\r\n")};
    for (uint32_t lead = rng_below(4) == 0 ? rng_below(3) : 0; lead > 0; lead--)
        BYTES_ADD_LIT(in, " ");
    const piece *cmd = &cmds[rng_below(sizeof cmds / sizeof *cmds)];
    bytes_add(in, cmd->s, cmd->n);
    /* A gat line over the limit closes the connection once cut: not a get's streaming case. */
    bool touch = cmd->s[1] == 'a';
    bool long_line = !touch && rng_below(3) == 0;
    int nkeys = 1 + (int)rng_below(8);
    int nul_at = rng_below(5) == 0 ? (int)rng_below((uint32_t)nkeys + 1) : -1;
    int too_long_at = !long_line && rng_below(8) == 0 ? (int)rng_below((uint32_t)nkeys) : -1;
    for (int k = 0; k < nkeys; k++) {
        for (uint32_t sp = 1 + (rng_below(4) == 0 ? rng_below(3) : 0); sp > 0; sp--)
            BYTES_ADD_LIT(in, " ");
        if (k == nul_at)
            BYTES_ADD_LIT(in, "\0");
        if (k == too_long_at) {
            char key[CACHE_KEY_MAX + 1];
            memset(key, 'x', sizeof key);
            bytes_add(in, key, sizeof key);
            continue;
        }
        if (long_line && k == nkeys / 2) {
            for (uint32_t i = 0, pad = 300 + rng_below(200); i < pad; i++) {
                char miss[16];
                int n = snprintf(miss, sizeof miss, "m%04u ", (unsigned)i);
                bytes_add(in, miss, (size_t)n);
            }
        }
        add_random_key(in);
    }
    if (nul_at == nkeys)
        BYTES_ADD_LIT(in, "\0zz");
    if (rng_below(4) == 0)
        bytes_add(in, "  ", 1 + rng_below(2));
    ADD_ONE_OF(in, ends);
}

/* One to four lines, mostly gets; else other short commands and gets without a key (ERROR), the
 * unterminated "get \0xx\r" running into the next line. Sometimes a quit with a get behind it.
 * Always ends with version, so the last answer is complete. */
static void gen_input(bytes *in)
{
    static const piece others[] = {PIECE("version\r\n"), PIECE("mn\r\n"),   PIECE("get    \r\n"),
                                   PIECE("get \0xx\r"),  PIECE("gets\r\n"), PIECE("get\r\n")};
    for (uint32_t lines = 1 + rng_below(4); lines > 0; lines--) {
        if (rng_below(20) < 3)
            ADD_ONE_OF(in, others);
        else
            add_get_line(in);
    }
    if (rng_below(15) == 0)
        BYTES_ADD_LIT(in, "quit\r\nget s0\r\n");
    BYTES_ADD_LIT(in, "version\r\n");
}

/* ---- a case: one write budget, its inputs, what they showed ---------------------------------- */

typedef struct stream_case {
    size_t budget; /* the peer's, in the runs compared with the reference */
    uint64_t seed;
    char name[64];
    long input;         /* the number of the input being run */
    long differences;   /* runs whose answer or end differs from the reference */
    long failures;      /* runs that got CONN_FAKE_STUCK or CONN_FAKE_BAD */
    long values;        /* VALUE lines in the references: the gets did answer */
    size_t max_pending; /* over all runs */
} stream_case;

static void case_begin(stream_case *sc, int budget_index, uint64_t salt)
{
    *sc = (stream_case){.budget = write_budgets[budget_index],
                        .seed = UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(budget_index + 1) + salt};
    g_rng = sc->seed;
    if (sc->budget == SIZE_MAX)
        snprintf(sc->name, sizeof sc->name, "peer reads all");
    else
        snprintf(sc->name, sizeof sc->name, "peer reads %zu bytes per write", sc->budget);
}

/* Escaped from byte `from` on, up to SHOW_MAX characters; {xN} stands for N more of the value
 * letter before it. */
#define SHOW_MAX 3000
static void show(const char *name, const char *p, size_t n, size_t from)
{
    fprintf(stderr, "%s (%zu bytes)%s", name, n, from ? ", ..." : ": ");
    size_t run = 0, shown = 0, i = from;
    for (; i < n && shown < SHOW_MAX; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (i > from && ch == (unsigned char)p[i - 1] && ch >= 'A' && ch <= 'Z') {
            run++;
            continue;
        }
        if (run)
            shown += (size_t)fprintf(stderr, "{x%zu}", run);
        run = 0;
        if (ch >= 32 && ch < 127)
            shown += fputc(ch, stderr) != EOF;
        else
            shown += (size_t)fprintf(stderr, "\\x%02x", ch);
    }
    if (run)
        fprintf(stderr, "{x%zu}", run);
    fputs(i < n ? "...\n" : "\n", stderr);
}

/* The first few differences are printed in full: the input, and both answers from the line
 * before the first byte that differs. */
static void report_difference(const stream_case *sc, const bytes *in, const answer *ref,
                              const answer *a, const size_t *cuts, size_t ncuts)
{
    size_t at = 0, from;
    while (at < a->out.n && at < ref->out.n && a->out.p[at] == ref->out.p[at])
        at++;
    from = at;
    for (int lines = 0; from > 0 && (ref->out.p[from - 1] != '\n' || ++lines < 2);)
        from--;
    fprintf(stderr, "=== difference: %s, seed %#llx, input %ld, %zu reads", sc->name,
            (unsigned long long)sc->seed, sc->input, ncuts + 1);
    for (size_t i = 0; i < ncuts && ncuts <= 8; i++)
        fprintf(stderr, "%s%zu", i ? " " : " cut before ", cuts[i]);
    fprintf(stderr, ": from byte %zu (ends %d, reference %d)\n", at, a->rc, ref->rc);
    show("input    ", in->p, in->n, 0);
    show("reference", ref->out.p, ref->out.n, from);
    show("answer   ", a->out.p, a->out.n, from);
}

static void note(stream_case *sc, const bytes *in, const answer *a)
{
    if (a->max_pending > sc->max_pending)
        sc->max_pending = a->max_pending;
    if ((a->rc == CONN_FAKE_STUCK || a->rc == CONN_FAKE_BAD) && ++sc->failures <= 3) {
        fprintf(stderr, "=== %s: %s, seed %#llx, input %ld\n",
                a->rc == CONN_FAKE_STUCK ? "stuck" : "consumed too much", sc->name,
                (unsigned long long)sc->seed, sc->input);
        show("input    ", in->p, in->n, 0);
    }
}

/* The reference answer to `in`: one read, the peer reading everything. */
static void run_reference(stream_case *sc, const bytes *in, answer *ref)
{
    run_conn(in->p, in->n, NULL, 0, SIZE_MAX, ref);
    note(sc, in, ref);
    for (const char *p = ref->out.p, *end = p + ref->out.n;
         (p = memmem(p, (size_t)(end - p), "VALUE ", 6)) != NULL; p += 6)
        sc->values++;
}

/* `in` cut before each of cuts[0..ncuts), the case's peer: must answer as the reference. */
static void run_compared(stream_case *sc, const bytes *in, const answer *ref, const size_t *cuts,
                         size_t ncuts)
{
    answer a = {0};
    run_conn(in->p, in->n, cuts, ncuts, sc->budget, &a);
    note(sc, in, &a);
    bool same =
        a.rc == ref->rc && a.out.n == ref->out.n && memcmp(a.out.p, ref->out.p, a.out.n) == 0;
    if (!same && ++sc->differences <= 3)
        report_difference(sc, in, ref, &a, cuts, ncuts);
    bytes_free(&a.out);
}

static void case_end(const stream_case *sc)
{
    const char *what = sc->name;
    ck_assert_msg(sc->differences == 0, "%s: %ld runs answered otherwise than in one read", what,
                  sc->differences);
    ck_assert_msg(sc->failures == 0, "%s: %ld runs stuck or consumed too much", what, sc->failures);
    ck_assert_msg(sc->max_pending <= HIGH_WATER + LARGEST_VALUE + HEADER_SLACK,
                  "%s: %zu bytes queued at once, over %d + %zu + %d", what, sc->max_pending,
                  HIGH_WATER, LARGEST_VALUE, HEADER_SLACK);
    /* Not vacuous: values were answered and the output did reach the mark (gets paused). */
    ck_assert_int_gt(sc->values, 0);
    ck_assert_uint_ge(sc->max_pending, HIGH_WATER);
}

/* ---- the tests ------------------------------------------------------------------------------- */

START_TEST(test_cut_reads)
{
    stream_case sc;
    case_begin(&sc, _i, 1);
    for (long iters = stream_iters(); sc.input < iters; sc.input++) {
        bytes in = {0};
        answer ref = {0};
        gen_input(&in);
        run_reference(&sc, &in, &ref);
        for (int v = 0; v < CUT_VARIANTS; v++) {
            size_t cuts[4], ncuts = 1 + rng_below(4);
            for (size_t i = 0; i < ncuts; i++) { /* insertion: ascending, repeats allowed */
                size_t c = 1 + rng_below((uint32_t)in.n - 1), j = i;
                for (; j > 0 && cuts[j - 1] > c; j--)
                    cuts[j] = cuts[j - 1];
                cuts[j] = c;
            }
            run_compared(&sc, &in, &ref, cuts, ncuts);
        }
        bytes_free(&ref.out);
        bytes_free(&in);
    }
    case_end(&sc);
}
END_TEST

START_TEST(test_byte_by_byte)
{
    stream_case sc;
    case_begin(&sc, _i, 2);
    size_t cuts[BYTEWISE_MAX];
    for (size_t i = 0; i < BYTEWISE_MAX; i++)
        cuts[i] = i + 1;
    long fed = 0;
    for (long iters = stream_iters(); sc.input < iters; sc.input++) {
        bytes in = {0};
        gen_input(&in);
        if (in.n < BYTEWISE_MAX) {
            answer ref = {0};
            run_reference(&sc, &in, &ref);
            run_compared(&sc, &in, &ref, cuts, in.n - 1);
            bytes_free(&ref.out);
            fed++;
        }
        bytes_free(&in);
    }
    ck_assert_int_gt(fed, 0);
    case_end(&sc);
}
END_TEST

/* ---- refused storage commands: a data block is never a command (issue 21) ------------------- */

/* Why: a storage command refused with CLIENT_ERROR used to leave its data block to be parsed as
 * the next commands, so a stored value "flush_all noreply" under a UTF-8 key flushed the cache.
 * Every storage command (set, add, replace, append, prepend, cas and ms) times every refusal
 * reason times a block that is itself a command line that would show if it ran, each fed in one
 * read, byte by byte and cut at random points, after and before other pipelined commands: the
 * answer is exactly the refusal's error and the pipeline's replies, and "keep" still holds
 * "safe" ("canary" is never stored). The store's item limit is lowered to SMALL_ITEM_MAX so the
 * too-large refusal is cheap. */
#define SMALL_ITEM_MAX 64
#define TOO_LARGE_LEN  100 /* a block over SMALL_ITEM_MAX */
#define REFUSAL_CUTS   3   /* random cuttings per input */

/* The blocks: each a command line (or two) whose effect the tail would see. */
static const char *const block_payloads[] = {
    "flush_all noreply",
    "flush_all",
    "delete keep noreply",
    "delete keep",
    "set keep 0 0 4 noreply\r\nevil",
    "set canary 0 0 1\r\nx",
    "ms keep 4 q\r\nevil",
    "md keep q",
    "mn",
    "version",
    "get keep",
};
#define NPAYLOADS (sizeof block_payloads / sizeof *block_payloads)

#define LINE_ERR  "CLIENT_ERROR bad command line format\r\n"
#define LARGE_ERR "SERVER_ERROR object too large for cache\r\n"

/* A refusal of a classic storage command: the fields of "<cmd> <key> <flags> <exptime> <len>"
 * (len NULL: the block's own; "%L": TOO_LARGE_LEN) and, for cas, the cas unique. */
typedef struct classic_refusal {
    const char *why, *key, *flags, *exptime, *cas, *err;
    bool too_large;
} classic_refusal;

static const char long_key[] = /* 251 bytes */
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk";
_Static_assert(sizeof long_key - 1 == CACHE_KEY_MAX + 1, "a key one byte too long");

static const classic_refusal classic_refusals[] = {
    {"control byte in key", "k\x01y", "0", "0", "1", LINE_ERR, false},
    {"DEL in key", "k\x7fy", "0", "0", "1", LINE_ERR, false},
    {"UTF-8 key", "user:Jos\xc3\xa9", "0", "0", "1", LINE_ERR, false},
    {"key over 250 bytes", long_key, "0", "0", "1", LINE_ERR, false},
    {"flags over 32 bits", "k", "4294967296", "0", "1", LINE_ERR, false},
    {"flags not a number", "k", "abc", "0", "1", LINE_ERR, false},
    {"negative flags", "k", "-1", "0", "1", LINE_ERR, false},
    {"exptime over int32", "k", "0", "4294967296", "1", LINE_ERR, false},
    {"exptime under int32", "k", "0", "-2147483649", "1", LINE_ERR, false},
    {"exptime not a number", "k", "0", "x", "1", LINE_ERR, false},
    {"bad cas unique", "k", "0", "0", "zz", LINE_ERR, false},
    {"negative cas unique", "k", "0", "0", "-1", LINE_ERR, false},
    {"value too large", "k", "0", "0", "1", LARGE_ERR, true},
};
#define NCLASSIC (sizeof classic_refusals / sizeof *classic_refusals)

static const char *const classic_cmds[] = {"set", "add", "replace", "append", "prepend", "cas"};

/* ms refusals: the line after "ms <key> <len>" ("%K" in `key` = long_key). */
typedef struct meta_refusal {
    const char *why, *key, *flags, *err;
    bool too_large;
} meta_refusal;

static const meta_refusal meta_refusals[] = {
    {"key over 250 bytes", NULL, "", LINE_ERR, false},
    {"control byte in key", "k\x01y", "", LINE_ERR, false},
    {"UTF-8 key", "user:Jos\xc3\xa9", " T0", LINE_ERR, false},
    {"too many flags", "k", " a b c d e f g h i j k l m n o p q r",
     "CLIENT_ERROR options flags too long\r\n", false},
    {"unknown flag", "k", " Z", "CLIENT_ERROR invalid flag\r\n", false},
    {"repeated flag", "k", " T1 T1", "CLIENT_ERROR duplicate flag\r\n", false},
    {"byte >= 127 as a flag", "k", " \xff", "CLIENT_ERROR duplicate flag\r\n", false},
    {"flags over 32 bits", "k", " F4294967296", LINE_ERR, false},
    {"bad TTL", "k", " Tx", "CLIENT_ERROR bad token in command line format\r\n", false},
    {"bad CAS", "k", " Cx", "CLIENT_ERROR bad token in command line format\r\n", false},
    {"bad mode", "k", " MX", "CLIENT_ERROR invalid mode for ms M token\r\n", false},
    {"opaque too long", "k", " O12345678901234567890123456789012",
     "CLIENT_ERROR opaque token too long\r\n", false},
    {"bad base64 key", "a!", " b", "CLIENT_ERROR error decoding key\r\n", false},
    {"quiet: errors still answered", "k\x01y", " q", LINE_ERR, false},
    {"value too large", "k", " T0", LARGE_ERR, true},
};
#define NMETA (sizeof meta_refusals / sizeof *meta_refusals)

/* Before and after the refused command, pipelined with it; what they answer when the block was
 * swallowed. */
#define PIPE_HEAD       "mn\r\n"
#define PIPE_HEAD_REPLY "MN\r\n"
#define PIPE_TAIL       "get keep canary\r\nmn\r\n"
#define PIPE_TAIL_REPLY "VALUE keep 0 4\r\nsafe\r\nEND\r\nMN\r\n"

static void setup_small_items(void)
{
    mc_fixture_config(&server);
    server.config.cache.max_item_bytes = SMALL_ITEM_MAX;
    mc_fixture_start(&server);
}

/* The block of `payload` for a refusal: the payload, or for a too-large one the payload padded
 * with blanks (still the same command line) to TOO_LARGE_LEN bytes. */
static void add_block(bytes *in, const char *payload, bool too_large)
{
    size_t n = strlen(payload);
    bytes_add(in, payload, n);
    for (; too_large && n < TOO_LARGE_LEN; n++)
        BYTES_ADD_LIT(in, " ");
}

typedef struct refusal_run {
    const char *what; /* for messages */
    long runs, failures;
} refusal_run;

/* One input (head, the refused line, its block, tail) fed whole, byte by byte and cut at random:
 * each answer must be the head's reply, `err`, and the tail's replies; "keep" is reset first. */
static void check_refused(refusal_run *rr, const bytes *line, const char *payload, bool too_large,
                          const char *err)
{
    bytes in = {0}, want = {0};
    BYTES_ADD_LIT(&in, PIPE_HEAD);
    bytes_add(&in, line->p, line->n);
    add_block(&in, payload, too_large);
    BYTES_ADD_LIT(&in, "\r\n" PIPE_TAIL);
    BYTES_ADD_LIT(&want, PIPE_HEAD_REPLY);
    bytes_add(&want, err, strlen(err));
    BYTES_ADD_LIT(&want, PIPE_TAIL_REPLY);

    size_t bytewise[TOO_LARGE_LEN + 2 * CACHE_KEY_MAX + 200];
    ck_assert_uint_le(in.n, sizeof bytewise / sizeof *bytewise);
    for (size_t i = 0; i + 1 < in.n; i++)
        bytewise[i] = i + 1;
    for (int v = 0; v < 2 + REFUSAL_CUTS; v++) {
        static const char reset[] = "set keep 0 0 4 noreply\r\nsafe\r\ndelete canary noreply\r\n";
        answer r = {0};
        run_conn(reset, sizeof reset - 1, NULL, 0, SIZE_MAX, &r);
        ck_assert_uint_eq(r.out.n, 0);
        bytes_free(&r.out);

        size_t cuts[3], ncuts = 0;
        const size_t *cp = cuts;
        if (v == 1) { /* byte by byte */
            cp = bytewise;
            ncuts = in.n - 1;
        } else if (v > 1) { /* cut at random points, ascending */
            ncuts = 1 + rng_below(3);
            for (size_t i = 0; i < ncuts; i++) {
                size_t c = 1 + rng_below((uint32_t)in.n - 1), j = i;
                for (; j > 0 && cuts[j - 1] > c; j--)
                    cuts[j] = cuts[j - 1];
                cuts[j] = c;
            }
        }
        answer a = {0};
        run_conn(in.p, in.n, cp, ncuts, SIZE_MAX, &a);
        rr->runs++;
        bool ok = a.rc == CONN_FAKE_OK && a.out.n == want.n && memcmp(a.out.p, want.p, want.n) == 0;
        if (!ok && ++rr->failures <= 5) {
            fprintf(stderr, "=== %s, %s (%zu reads), rc %d\n", rr->what,
                    v == 0 ? "one read" : v == 1 ? "byte by byte" : "cut", ncuts + 1, a.rc);
            show("input ", in.p, in.n, 0);
            show("want  ", want.p, want.n, 0);
            show("answer", a.out.p, a.out.n, 0);
        }
        bytes_free(&a.out);
    }
    bytes_free(&in);
    bytes_free(&want);
}

START_TEST(test_refused_classic_block_never_runs)
{
    const char *cmd = classic_cmds[_i];
    bool cas = strcmp(cmd, "cas") == 0;
    refusal_run rr = {.what = NULL};
    char what[160];
    g_rng = UINT64_C(0x51ED270B27A1C2D3) + (uint64_t)_i;
    for (size_t r = 0; r < NCLASSIC; r++) {
        const classic_refusal *cr = &classic_refusals[r];
        bool cas_only = strstr(cr->why, "cas unique") != NULL;
        if (cas_only && !cas)
            continue;
        for (int noreply = 0; noreply < 2; noreply++) {
            for (size_t p = 0; p < NPAYLOADS; p++) {
                size_t len = cr->too_large ? TOO_LARGE_LEN : strlen(block_payloads[p]);
                bytes line = {0};
                char buf[512];
                int n = snprintf(buf, sizeof buf, "%s %s %s %s %zu%s%s%s\r\n", cmd, cr->key,
                                 cr->flags, cr->exptime, len, cas ? " " : "",
                                 cas ? (cas_only ? cr->cas : "1") : "", noreply ? " noreply" : "");
                bytes_add(&line, buf, (size_t)n);
                snprintf(what, sizeof what, "%s: %s%s, block \"%s\"", cmd, cr->why,
                         noreply ? " (noreply)" : "", block_payloads[p]);
                rr.what = what;
                check_refused(&rr, &line, block_payloads[p], cr->too_large,
                              noreply ? "" : cr->err);
                bytes_free(&line);
            }
        }
    }
    ck_assert_msg(rr.failures == 0, "%s: %ld of %ld runs executed a refused block or answered "
                  "otherwise", cmd, rr.failures, rr.runs);
    ck_assert_int_gt(rr.runs, 0);
}
END_TEST

START_TEST(test_refused_ms_block_never_runs)
{
    refusal_run rr = {.what = NULL};
    char what[160];
    g_rng = UINT64_C(0x3C6EF372FE94F82B);
    for (size_t r = 0; r < NMETA; r++) {
        const meta_refusal *mr = &meta_refusals[r];
        for (size_t p = 0; p < NPAYLOADS; p++) {
            size_t len = mr->too_large ? TOO_LARGE_LEN : strlen(block_payloads[p]);
            bytes line = {0};
            char buf[512];
            int n = snprintf(buf, sizeof buf, "ms %s %zu%s\r\n", mr->key ? mr->key : long_key, len,
                             mr->flags);
            bytes_add(&line, buf, (size_t)n);
            snprintf(what, sizeof what, "ms: %s, block \"%s\"", mr->why, block_payloads[p]);
            rr.what = what;
            check_refused(&rr, &line, block_payloads[p], mr->too_large, mr->err);
            bytes_free(&line);
        }
    }
    ck_assert_msg(rr.failures == 0, "ms: %ld of %ld runs executed a refused block or answered "
                  "otherwise", rr.failures, rr.runs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memcache_stream");
    TCase *tc = tcase_create("get");
    tcase_add_checked_fixture(tc, setup, teardown);
    /* An input takes a case about 0.05 ms, 0.25 ms under ASan, 0.7 ms under TSan: 10 ms each
     * leaves room for a loaded machine and a soak. */
    tcase_set_timeout(tc, 120 + (double)stream_iters() / 100);
    tcase_add_loop_test(tc, test_cut_reads, 0, (int)NBUDGETS);
    tcase_add_loop_test(tc, test_byte_by_byte, 0, (int)NBUDGETS);
    suite_add_tcase(s, tc);
    TCase *rf = tcase_create("refused_store");
    tcase_add_checked_fixture(rf, setup_small_items, teardown);
    tcase_set_timeout(rf, 120);
    tcase_add_loop_test(rf, test_refused_classic_block_never_runs, 0,
                        (int)(sizeof classic_cmds / sizeof *classic_cmds));
    tcase_add_test(rf, test_refused_ms_block_never_runs);
    suite_add_tcase(s, rf);
    return sf_run_suite(s);
}
