/* sfload's command line (see opts.h). */
#include "opts.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum {
    O_WARMUP = 256,
    O_TIMEOUT,
    O_BODY,
    O_CT,
    O_WEBBENCH,
    O_MODE,
    O_RATIO,
    O_IDKEY,
    O_IDCOUNT,
    O_KEYS,
    O_VSIZE,
    O_MSIZE,
    O_VERIFY,
    O_LAYOUT,
    O_MAXBODY,
    O_PID,
    O_JSON,
    O_REMOTE,
    O_IDSOUT,
    O_IDSOUT2,
    O_TOLERATE,
    O_MINIDS,
    O_TLS,
    O_INSECURE,
    O_CACERT,
    O_CERT,
    O_KEY,
    O_SNI,
    O_TLSVER,
    O_CIPHERS,
    O_SUITES,
    O_RESUME,
};

static const struct option longopts[] = {
    {"connections", required_argument, NULL, 'c'},
    {"time", required_argument, NULL, 't'},
    {"requests", required_argument, NULL, 'n'},
    {"threads", required_argument, NULL, 'T'},
    {"rate", required_argument, NULL, 'R'},
    {"path", required_argument, NULL, 'p'},
    {"header", required_argument, NULL, 'H'},
    {"method", required_argument, NULL, 'X'},
    {"pipeline", required_argument, NULL, 'P'},
    {"close", no_argument, NULL, 'C'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"warmup", required_argument, NULL, O_WARMUP},
    {"timeout", required_argument, NULL, O_TIMEOUT},
    {"body-file", required_argument, NULL, O_BODY},
    {"content-type", required_argument, NULL, O_CT},
    {"webbench", no_argument, NULL, O_WEBBENCH},
    {"mode", required_argument, NULL, O_MODE},
    {"mc-ratio", required_argument, NULL, O_RATIO},
    {"mc-id-key", required_argument, NULL, O_IDKEY},
    {"mc-id-count", required_argument, NULL, O_IDCOUNT},
    {"keys", required_argument, NULL, O_KEYS},
    {"value-size", required_argument, NULL, O_VSIZE},
    {"msg-size", required_argument, NULL, O_MSIZE},
    {"verify-ids", no_argument, NULL, O_VERIFY},
    {"id-layout", required_argument, NULL, O_LAYOUT},
    {"max-body", required_argument, NULL, O_MAXBODY},
    {"server-pid", required_argument, NULL, O_PID},
    {"json", no_argument, NULL, O_JSON},
    {"allow-remote", no_argument, NULL, O_REMOTE},
    {"ids-out", required_argument, NULL, O_IDSOUT},
    {"ids-out-v2", required_argument, NULL, O_IDSOUT2},
    {"tolerate-faults", no_argument, NULL, O_TOLERATE},
    {"min-ids", required_argument, NULL, O_MINIDS},
    {"tls", no_argument, NULL, O_TLS},
    {"insecure", no_argument, NULL, O_INSECURE},
    {"cacert", required_argument, NULL, O_CACERT},
    {"cert", required_argument, NULL, O_CERT},
    {"key", required_argument, NULL, O_KEY},
    {"sni", required_argument, NULL, O_SNI},
    {"tls-version", required_argument, NULL, O_TLSVER},
    {"ciphers", required_argument, NULL, O_CIPHERS},
    {"ciphersuites", required_argument, NULL, O_SUITES},
    {"tls-resume", no_argument, NULL, O_RESUME},
    {NULL, 0, NULL, 0},
};

void opts_usage(FILE *f)
{
    fputs(
        "usage: sfload [options] http[s]://HOST:PORT/PATH [http[s]://HOST:PORT/PATH ...]\n"
        "       sfload --mode memcache|echo [options] [--tls ...] HOST:PORT [HOST:PORT ...]\n"
        "Several targets (at most 32, same path): connections go round-robin over them.\n"
        "Load: loopback targets only (127.0.0.0/8, ::1) unless --allow-remote. -t or -n is "
        "required.\n"
        "  -c, --connections N    connections (default 10), split across threads\n"
        "  -t, --time SECONDS     measured duration (max 3600)\n"
        "  -n, --requests N       measured requests in total (whichever of -t/-n ends first)\n"
        "  -T, --threads N        load threads, one event loop each (default 1)\n"
        "      --warmup SECONDS   run this long first without counting (max 600)\n"
        "  -R, --rate N           open loop: N requests/s in total at fixed intervals; latency\n"
        "                         counts from the scheduled send time (default: closed loop)\n"
        "      --timeout MS       per request (default 5000)\n"
        "  -P, --pipeline N       requests in flight per connection (default 1)\n"
        "HTTP:\n"
        "  -p, --path PATH        request PATH instead of the URL's; repeat to round-robin\n"
        "  -X, --method M         request method (default GET)\n"
        "  -H, --header 'K: V'    extra request header (repeatable)\n"
        "      --body-file F      request body from file F\n"
        "      --content-type T   Content-Type of the body (default application/octet-stream)\n"
        "  -C, --close            connection per request: HTTP/1.0, read until the server closes\n"
        "      --webbench         --close, and print webbench 1.5's summary (needs -t)\n"
        "      --ids-out FILE     with --verify-ids (implied): write every ID seen, 8-byte\n"
        "                         little-endian, in no order, to FILE after the run (to check\n"
        "                         the union of several runs or servers)\n"
        "      --ids-out-v2 FILE  like --ids-out, but 16-byte records written as IDs arrive:\n"
        "                         id u64, target u16, receive ms since start u32, connection\n"
        "                         u16 (bit 15: first ID of a new TCP connection); README\n"
        "      --verify-ids       check every ID of /id and /ids responses: unique, increasing\n"
        "                         per connection, well-formed\n"
        "      --id-layout L      bit layout: twitter, sonyflake, js53 or T/D/W/S[,node_bits_low]\n"
        "                         (default: from GET /metrics, else 41/5/5/12)\n"
        "      --max-body BYTES   largest body verified (default 1048576)\n"
        "memcache (--mode memcache):\n"
        "      --mc-ratio G:S     get:set mix (default 90:10)\n"
        "      --mc-id-key KEY    every request is a get of KEY, a reserved ID key of the server\n"
        "                         (snowflaked cache.memcached_id_keys, katsubushi): each value\n"
        "                         must be there, --mc-ratio and --keys do not apply\n"
        "      --mc-id-count N    KEY named N times in each get: N IDs per request (default 1)\n"
        "      --keys N           key space sfload:0 .. sfload:N-1 (default 10000)\n"
        "      --value-size N     bytes per set (default 100)\n"
        "echo (--mode echo):\n"
        "      --msg-size N       bytes per message, echoed back byte-identical (default 64)\n"
        "TLS (any mode; an https:// URL implies --tls):\n"
        "      --tls              speak TLS (1.2 or 1.3) on every connection\n"
        "      --cacert FILE      verify the server's chain against these CAs, and its name\n"
        "      --insecure         no verification (required when --cacert is not given)\n"
        "      --cert FILE        client certificate chain (mTLS); --key FILE its key\n"
        "                         (default: the --cert file)\n"
        "      --sni NAME         server name sent and verified (default: the target's host\n"
        "                         when it is a name; an address is verified as an IP)\n"
        "      --tls-version V    pin the version: 1.2 or 1.3\n"
        "      --ciphers LIST     TLS 1.2 cipher list;  --ciphersuites LIST  TLS 1.3 suites\n"
        "      --tls-resume       a new connection resumes the last session of its slot\n"
        "                         (with --close: full vs resumed handshakes per request)\n"
        "Faults (fleets whose daemons get killed, frozen, fenced):\n"
        "      --tolerate-faults  refused/reset/closed/timed-out connections reconnect after\n"
        "                         50-500 ms (requests are sent again), 503 counts as refused;\n"
        "                         exit status from the verification and --min-ids only\n"
        "      --min-ids N        fail unless at least N IDs were received (implies\n"
        "                         --verify-ids)\n"
        "Output:\n"
        "      --json             one JSON object with every figure on stdout\n"
        "      --server-pid PID   report the server's CPU per request from /proc/PID/stat\n"
        "  -q, --quiet            no progress line on stderr\n"
        "  -h, --help             this text;  -V, --version\n"
        "Exit status: 0 no errors, 1 a request or the verification failed (or fewer than\n"
        "--min-ids IDs), 2 usage.\n",
        f);
}

const char *opts_mode_name(sl_mode m)
{
    return m == MODE_MEMCACHE ? "memcache" : m == MODE_ECHO ? "echo" : "http";
}

__attribute__((format(printf, 3, 4))) static opts_rc fail(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return OPTS_USAGE;
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_unsigned(const char *s, unsigned min, unsigned max, unsigned *out)
{
    uint64_t v;
    if (parse_u64(s, min, max, &v))
        return -1;
    *out = (unsigned)v;
    return 0;
}

static int parse_seconds(const char *s, double min, double max, double *out)
{
    if (!s || !((*s >= '0' && *s <= '9') || *s == '.'))
        return -1;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static bool token_ok(const char *s)
{
    for (; *s; s++)
        if (*s <= ' ' || *s == 0x7f)
            return false;
    return true;
}

/* host, or [v6], then :port; port required unless dflt. Returns the rest of the string. */
static const char *parse_hostport(const char *s, sl_addr *o, unsigned dflt)
{
    const char *h = s, *he;
    if (*s == '[') {
        h = s + 1;
        he = strchr(h, ']');
        if (!he)
            return NULL;
        s = he + 1;
    } else {
        he = s + strcspn(s, ":/?#");
        s = he;
    }
    if (he == h || (size_t)(he - h) >= sizeof o->host)
        return NULL;
    memcpy(o->host, h, (size_t)(he - h));
    o->host[he - h] = '\0';
    if (*s == ':') {
        s++;
        unsigned port = 0;
        const char *d = s;
        while (*s >= '0' && *s <= '9' && port <= 65535)
            port = port * 10 + (unsigned)(*s++ - '0');
        if (s == d || port == 0 || port > 65535)
            return NULL;
        o->port = port;
    } else if (dflt) {
        o->port = dflt;
    } else {
        return NULL;
    }
    return s;
}

/* Parses target number o->ntargets. In HTTP mode every URL must carry the same path: the
 * requests (and their verification) are one shape, only Host differs. */
static opts_rc parse_target(sl_opts *o, const char *t, char *err, size_t n)
{
    if (o->ntargets >= SL_MAX_TARGETS)
        return fail(err, n, "at most %d targets", SL_MAX_TARGETS);
    sl_addr *a = &o->targets[o->ntargets];
    a->target = t;
    if (o->mode == MODE_HTTP) {
        bool https = strncmp(t, "https://", 8) == 0;
        if (!https && strncmp(t, "http://", 7) != 0)
            return fail(err, n, "the target must be an http:// or https:// URL: %s", t);
        if (https)
            o->url_https = true;
        else
            o->url_http = true;
        const char *rest = parse_hostport(t + (https ? 8 : 7), a, https ? 443 : 80);
        if (!rest || (*rest && (*rest != '/' || !token_ok(rest))))
            return fail(err, n, "cannot parse the URL %s", t);
        const char *path = *rest ? rest : "/";
        if (o->ntargets == 0) {
            o->url_path = path;
            if (o->npaths == 0)
                o->paths[o->npaths++] = path;
        } else if (strcmp(path, o->url_path) != 0) {
            return fail(err, n, "every URL must have the same path (%s), got %s", o->url_path, t);
        }
    } else {
        const char *rest = parse_hostport(t, a, 0);
        if (!rest || *rest)
            return fail(err, n, "the %s target must be HOST:PORT, got %s", opts_mode_name(o->mode),
                        t);
    }
    o->ntargets++;
    return OPTS_OK;
}

/* Target 0 stays reachable through the single-target fields. */
static void copy_first_target(sl_opts *o)
{
    const sl_addr *a = &o->targets[0];
    o->target = a->target;
    memcpy(o->host, a->host, sizeof o->host);
    o->port = a->port;
    o->addr = a->addr;
    o->addrlen = a->addrlen;
}

static void defaults(sl_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mode = MODE_HTTP;
    o->method = "GET";
    o->connections = 10;
    o->threads = 1;
    o->pipeline = 1;
    o->timeout_ms = 5000;
    o->mc_gets = 90;
    o->mc_sets = 10;
    o->mc_id_count = 1;
    o->keys = 10000;
    o->value_size = 100;
    o->msg_size = 64;
    o->layout = VLAYOUT_DEFAULT;
    o->max_body = 1 << 20;
}

/* The TLS options: on with --tls or https:// URLs, and then verified unless --insecure. */
static opts_rc check_tls(sl_opts *o, char *err, size_t n)
{
    if (o->url_http && o->url_https)
        return fail(err, n, "http:// and https:// targets cannot be mixed in one run");
    if (o->url_http && o->tls)
        return fail(err, n, "--tls with an http:// URL: write https:// instead");
    if (o->url_https)
        o->tls = true;
    if (!o->tls) {
        if (o->tls_insecure || o->tls_cacert || o->tls_cert || o->tls_key || o->tls_sni ||
            o->tls_version || o->tls_ciphers || o->tls_suites || o->tls_resume)
            return fail(err, n, "TLS options need --tls (or an https:// URL)");
        return OPTS_OK;
    }
    if (!o->tls_cacert && !o->tls_insecure)
        return fail(err, n,
                    "TLS needs --cacert FILE to verify the server, or --insecure to skip the "
                    "verification explicitly");
    if (o->tls_cacert && o->tls_insecure)
        return fail(err, n, "--cacert and --insecure contradict each other: give one");
    if (o->tls_key && !o->tls_cert)
        return fail(err, n, "--key needs --cert (the client certificate it belongs to)");
    if (o->tls_cert && !o->tls_key)
        o->tls_key = o->tls_cert; /* one PEM file with the chain and the key */
    if (o->tls_version == 12 && o->tls_suites)
        return fail(err, n, "--ciphersuites are TLS 1.3's: not with --tls-version 1.2");
    if (o->tls_version == 13 && o->tls_ciphers)
        return fail(err, n, "--ciphers lists TLS 1.2 ciphers: not with --tls-version 1.3 "
                            "(use --ciphersuites)");
    return OPTS_OK;
}

/* Everything that depends on more than one option. */
static opts_rc check(sl_opts *o, char *err, size_t n)
{
    if (o->duration_s == 0 && o->requests == 0)
        return fail(err, n, "refusing an unbounded run: give -t SECONDS and/or -n REQUESTS");
    if (o->webbench && o->duration_s == 0)
        return fail(err, n, "--webbench needs -t (webbench runs for a fixed time)");
    if (o->mode != MODE_HTTP && (o->close_mode || o->verify || o->nheaders || o->body_file))
        return fail(err, n, "--close, --webbench, --verify-ids, -H and --body-file are for HTTP");
    if (o->close_mode && o->pipeline > 1)
        return fail(err, n, "--close sends one request per connection: no --pipeline");
    if (o->threads > o->connections)
        o->threads = o->connections;
    if (o->rate > 0 && o->rate < 0.001)
        return fail(err, n, "-R must be at least 0.001 requests/s");
    if (o->ids_out_v2 && o->connections > SL_IDREC_MAX_CONN)
        return fail(err, n, "--ids-out-v2 records connections in 15 bits: -c at most %d",
                    SL_IDREC_MAX_CONN);
    if (o->ids_out_v2 && o->ids_out && strcmp(o->ids_out, o->ids_out_v2) == 0)
        return fail(err, n, "--ids-out and --ids-out-v2 name the same file");
    return check_tls(o, err, n);
}

static opts_rc parse_one(sl_opts *o, int c, const char *a, char *err, size_t n)
{
    uint64_t v;
    switch (c) {
    case 'c':
        if (parse_unsigned(a, 1, 100000, &o->connections))
            return fail(err, n, "-c must be 1..100000");
        break;
    case 't':
        if (parse_seconds(a, 0.001, SL_MAX_DURATION_S, &o->duration_s))
            return fail(err, n, "-t must be a number of seconds, more than 0, at most 3600");
        break;
    case 'n':
        if (parse_u64(a, 1, UINT64_C(1) << 50, &o->requests))
            return fail(err, n, "-n must be a positive integer");
        break;
    case 'T':
        if (parse_unsigned(a, 1, 256, &o->threads))
            return fail(err, n, "-T must be 1..256");
        break;
    case 'R':
        if (parse_seconds(a, 0.001, 1e9, &o->rate))
            return fail(err, n, "-R must be a rate in requests/s, 0.001..1e9");
        break;
    case 'p':
        if (o->npaths >= SL_MAX_PATHS)
            return fail(err, n, "at most %d paths", SL_MAX_PATHS);
        if (a[0] != '/' || !token_ok(a))
            return fail(err, n, "a path starts with / and has no spaces or controls: %s", a);
        o->paths[o->npaths++] = a;
        break;
    case 'H':
        if (o->nheaders >= SL_MAX_HEADERS)
            return fail(err, n, "at most %d headers", SL_MAX_HEADERS);
        if (!strchr(a, ':') || a[0] == ':' || strpbrk(a, "\r\n"))
            return fail(err, n, "a header is 'Name: value' on one line: %s", a);
        o->headers[o->nheaders++] = a;
        break;
    case 'X':
        if (!*a || !token_ok(a) || strlen(a) > 32)
            return fail(err, n, "bad method %s", a);
        o->method = a;
        break;
    case 'P':
        if (parse_unsigned(a, 1, 1024, &o->pipeline))
            return fail(err, n, "--pipeline must be 1..1024");
        break;
    case 'C': o->close_mode = true; break;
    case 'q': o->quiet = true; break;
    case O_WARMUP:
        if (parse_seconds(a, 0, SL_MAX_WARMUP_S, &o->warmup_s))
            return fail(err, n, "--warmup must be 0..600 seconds");
        break;
    case O_TIMEOUT:
        if (parse_unsigned(a, 1, 3600000, &o->timeout_ms))
            return fail(err, n, "--timeout must be 1..3600000 ms");
        break;
    case O_BODY: o->body_file = a; break;
    case O_CT:
        if (strpbrk(a, "\r\n"))
            return fail(err, n, "bad --content-type");
        o->content_type = a;
        break;
    case O_WEBBENCH: o->webbench = o->close_mode = true; break;
    case O_MODE:
        if (strcmp(a, "http") == 0)
            o->mode = MODE_HTTP;
        else if (strcmp(a, "memcache") == 0)
            o->mode = MODE_MEMCACHE;
        else if (strcmp(a, "echo") == 0)
            o->mode = MODE_ECHO;
        else
            return fail(err, n, "--mode is http, memcache or echo");
        break;
    case O_RATIO: {
        unsigned g, s;
        char tail;
        if (sscanf(a, "%u:%u%c", &g, &s, &tail) != 2 || g + s == 0 || g > 1000000 || s > 1000000)
            return fail(err, n, "--mc-ratio is GETS:SETS, e.g. 90:10");
        o->mc_gets = g;
        o->mc_sets = s;
        break;
    }
    case O_IDKEY:
        if (!*a || strlen(a) > 250 || strpbrk(a, " \t\r\n"))
            return fail(err, n, "--mc-id-key is a memcached key (1..250 bytes, no blank)");
        o->mc_id_key = a;
        break;
    case O_IDCOUNT:
        if (parse_u64(a, 1, 1000, &v))
            return fail(err, n, "--mc-id-count must be 1..1000");
        o->mc_id_count = (unsigned)v;
        break;
    case O_KEYS:
        if (parse_u64(a, 1, UINT64_C(1) << 40, &o->keys))
            return fail(err, n, "--keys must be a positive integer");
        break;
    case O_VSIZE:
        if (parse_u64(a, 0, 1 << 20, &v))
            return fail(err, n, "--value-size must be 0..1048576");
        o->value_size = (size_t)v;
        break;
    case O_MSIZE:
        if (parse_u64(a, 1, 1 << 20, &v))
            return fail(err, n, "--msg-size must be 1..1048576");
        o->msg_size = (size_t)v;
        break;
    case O_VERIFY: o->verify = true; break;
    case O_LAYOUT:
        if (vlayout_parse(a, &o->layout))
            return fail(err, n, "--id-layout is twitter, sonyflake, js53 or T/D/W/S summing to "
                                "at most 63, e.g. 38/0/5/10 or 39/8/8/8,node_bits_low");
        o->have_layout = true;
        break;
    case O_MAXBODY:
        if (parse_u64(a, 64, 1 << 30, &v))
            return fail(err, n, "--max-body must be 64..1073741824");
        o->max_body = (size_t)v;
        break;
    case O_PID:
        if (parse_u64(a, 1, 1 << 30, &v))
            return fail(err, n, "--server-pid must be a process id");
        o->server_pid = (int)v;
        break;
    case O_JSON: o->json = true; break;
    case O_REMOTE: o->allow_remote = true; break;
    case O_IDSOUT:
        o->ids_out = a;
        o->verify = true;
        break;
    case O_IDSOUT2:
        o->ids_out_v2 = a;
        o->verify = true;
        break;
    case O_TOLERATE: o->tolerate_faults = true; break;
    case O_TLS: o->tls = true; break;
    case O_INSECURE: o->tls_insecure = true; break;
    case O_CACERT: o->tls_cacert = a; break;
    case O_CERT: o->tls_cert = a; break;
    case O_KEY: o->tls_key = a; break;
    case O_SNI:
        if (!*a || strlen(a) > 253 || !token_ok(a) || strpbrk(a, "/:[]"))
            return fail(err, n, "--sni is a host name (at most 253 characters): %s", a);
        o->tls_sni = a;
        break;
    case O_TLSVER:
        if (strcmp(a, "1.2") == 0)
            o->tls_version = 12;
        else if (strcmp(a, "1.3") == 0)
            o->tls_version = 13;
        else
            return fail(err, n, "--tls-version is 1.2 or 1.3");
        break;
    case O_CIPHERS:
        if (!*a || !token_ok(a))
            return fail(err, n, "--ciphers is an OpenSSL cipher list, e.g. ECDHE-RSA-AES128-GCM-SHA256");
        o->tls_ciphers = a;
        break;
    case O_SUITES:
        if (!*a || !token_ok(a))
            return fail(err, n, "--ciphersuites is a TLS 1.3 list, e.g. TLS_AES_128_GCM_SHA256");
        o->tls_suites = a;
        break;
    case O_RESUME: o->tls_resume = true; break;
    case O_MINIDS:
        if (parse_u64(a, 1, UINT64_C(1) << 60, &o->min_ids))
            return fail(err, n, "--min-ids must be a positive integer");
        o->verify = true;
        break;
    default: return fail(err, n, "unknown option (see sfload --help)");
    }
    return OPTS_OK;
}

opts_rc opts_parse(int argc, char **argv, sl_opts *o, char *err, size_t n)
{
    defaults(o);
    err[0] = '\0';
    optind = 0; /* full re-initialisation (glibc), so tests may call this repeatedly */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "c:t:n:T:R:p:H:X:P:CqhV", longopts, NULL)) != -1) {
        if (c == 'h') {
            opts_usage(stdout);
            return OPTS_EXIT;
        }
        if (c == 'V') {
            printf("sfload %s\n", SFLOAD_VERSION);
            return OPTS_EXIT;
        }
        if (c == '?' || c == ':') {
            if (optopt && optopt < 256)
                return fail(err, n, "unknown option or missing value: -%c", optopt);
            return fail(err, n, "unknown option or missing value: %s", argv[optind - 1]);
        }
        if (parse_one(o, c, optarg, err, n) != OPTS_OK)
            return OPTS_USAGE;
    }
    if (optind >= argc)
        return fail(err, n, "no target given");
    for (int i = optind; i < argc; i++)
        if (parse_target(o, argv[i], err, n) != OPTS_OK)
            return OPTS_USAGE;
    copy_first_target(o);
    return check(o, err, n);
}

bool opts_addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
            return true;
        return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
    }
    return false;
}

static int resolve_one(sl_addr *t, bool allow_remote, char *err, size_t n)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *pick;
    char port[8];
    snprintf(port, sizeof port, "%u", t->port);
    int rc = getaddrinfo(t->host, port, &hints, &res);
    if (rc != 0) {
        fail(err, n, "cannot resolve %s: %s", t->host, gai_strerror(rc));
        return -1;
    }
    pick = res; /* IPv4 first: "localhost" servers usually listen on 127.0.0.1 */
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    memcpy(&t->addr, pick->ai_addr, pick->ai_addrlen);
    t->addrlen = pick->ai_addrlen;
    freeaddrinfo(res);
    if (!allow_remote && !opts_addr_is_loopback((struct sockaddr *)&t->addr)) {
        fail(err, n,
             "refusing to load %s: only 127.0.0.0/8 and ::1 are allowed (--allow-remote to "
             "override)",
             t->host);
        return -1;
    }
    return 0;
}

int opts_resolve(sl_opts *o, char *err, size_t n)
{
    for (unsigned i = 0; i < o->ntargets; i++)
        if (resolve_one(&o->targets[i], o->allow_remote, err, n) != 0)
            return -1;
    copy_first_target(o);
    return 0;
}
