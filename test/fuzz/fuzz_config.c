/* libFuzzer harness: the configuration loader (config/config.h).
 *
 * Input: the bytes up to the first NUL are a config file (written to a scratch file and loaded
 * with cfg_load over the embedded config.json, as `snowflaked -c FILE` does); each further
 * NUL-separated piece is one more command-line argument for cfg_parse_args (--set PATH=VALUE,
 * --port, --threads, --worker-id, ...). -c/--config from the input is ignored: the file is
 * always the scratch file (a fuzzed path could name a FIFO and block).
 *
 * Checked besides the sanitizers:
 *   - a failure comes with a message that is one line of printable ASCII (config.h: errors are
 *     one line; values are shown escaped so they cannot forge lines or reach a terminal raw);
 *   - a success prints (cfg_print_json) a document that never shows the bearer token in clear
 *     and whose sections load again, as a file on their own, to the very same configuration:
 *     printing it again gives the same text. The token is printed as "***", which loads only
 *     when another layer gives the real token (config.c cfg_check_hidden), so the round trip is
 *     made with the token cleared: what it checks is every other key.
 * The clock is fixed, so results do not depend on when the fuzzer runs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "fuzz_common.h"

#define FIXED_NOW_MS UINT64_C(1767225600000) /* 2026-01-01T00:00:00Z */
#define MAX_ARGS     24

static char input_path[300], printed_path[300];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_clean_environment();
    fuzz_path(input_path, sizeof input_path, "input");
    fuzz_path(printed_path, sizeof printed_path, "printed");
    return 0;
}

static void check_error(const char *err)
{
    FUZZ_CHECK(err[0] != '\0', "cfg_load failed without a message");
    for (const unsigned char *p = (const unsigned char *)err; *p; p++)
        FUZZ_CHECK(*p >= 0x20 && *p <= 0x7e, "error message has byte 0x%02x at %zu: %s", *p,
                   (size_t)((const char *)p - err), err);
}

/* The printed configuration, or NULL. The caller frees. */
static char *print(const cfg *c, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    FUZZ_CHECK(f != NULL, "open_memstream failed");
    cfg_print_json(c, f);
    FUZZ_CHECK(fclose(f) == 0, "printing failed");
    return buf;
}

/* The sections part: everything before "resolved" (which is for humans and does not load). */
static size_t sections_len(const char *printed)
{
    const char *r = strstr(printed, ",\n  \"resolved\": {");
    FUZZ_CHECK(r != NULL, "printed configuration without its resolved section:\n%s", printed);
    return (size_t)(r - printed);
}

static void check_secret_hidden(const cfg *c)
{
    if (!c->auth.token[0])
        return;
    size_t len;
    char *p = print(c, &len);
    FUZZ_CHECK(strstr(p, "\"token\": \"***\"") != NULL, "the token is not shown as ***:\n%s", p);
    /* Every token is >= 16 bytes, so finding it is not a coincidence of a short string. */
    FUZZ_CHECK(memmem(p, len, c->auth.token, strlen(c->auth.token)) == NULL,
               "the printed configuration shows the token in clear:\n%s", p);
    free(p);
}

static void check_round_trip(const cfg *loaded)
{
    static cfg shown;
    shown = *loaded;
    shown.auth.token[0] = '\0'; /* printed as "***", which does not load: see the top */
    const cfg *c = &shown;
    size_t len1;
    char *p1 = print(c, &len1);
    size_t s1 = sections_len(p1);
    /* As a file of its own: the sections, closed. */
    char *doc = malloc(s1 + 4);
    FUZZ_CHECK(doc != NULL, "out of memory");
    memcpy(doc, p1, s1);
    memcpy(doc + s1, "\n}\n", 3);
    fuzz_write_file(printed_path, doc, s1 + 3);
    free(doc);

    static cfg again;
    char err[4096];
    cfg_cli cli = {.config_path = printed_path};
    int rc = cfg_load(&again, &cli, FIXED_NOW_MS, err, sizeof err);
    FUZZ_CHECK(rc == 0, "the printed configuration does not load again: %s\n%s", err, p1);
    size_t len2;
    char *p2 = print(&again, &len2);
    size_t s2 = sections_len(p2);
    FUZZ_CHECK(s1 == s2 && memcmp(p1, p2, s1) == 0,
               "the printed configuration loads differently:\nfirst:\n%s\nsecond:\n%s", p1, p2);
    free(p1);
    free(p2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    size_t file_len = nul ? (size_t)(nul - text) : size;
    fuzz_write_file(input_path, text, file_len);

    /* The arguments: copies, NUL-terminated (getopt may permute argv). */
    char *args[MAX_ARGS + 1];
    int argc = 0;
    args[argc++] = strdup("snowflaked");
    for (size_t off = file_len + 1; nul && off <= size && argc < MAX_ARGS;) {
        const char *p = text + off;
        const char *end = memchr(p, '\0', size - off);
        size_t n = end ? (size_t)(end - p) : size - off;
        args[argc++] = strndup(p, n);
        off += n + 1;
    }
    args[argc] = NULL;

    char err[4096];
    cfg_cli cli;
    if (cfg_parse_args(argc, args, &cli, err, sizeof err) != 0) {
        /* Not checked for printable bytes: it quotes the command line, which the user typed. */
        FUZZ_CHECK(err[0] != '\0', "cfg_parse_args failed without a message");
        memset(&cli, 0, sizeof cli); /* still load the file */
    }
    cli.config_path = input_path;

    static cfg c;
    int rc = cfg_load(&c, &cli, FIXED_NOW_MS, err, sizeof err);
    if (rc != 0) {
        check_error(err);
        fuzz_dump(err, strlen(err));
    } else {
        check_secret_hidden(&c);
        check_round_trip(&c);
        fuzz_dump("loaded", 6);
    }
    fuzz_dump("\n", 1);

    for (int i = 0; i < argc; i++)
        free(args[i]);
    return 0;
}
