/* snowflaked: the command line and the signals; the application object (app/app.h) does the rest.
 *
 * Exit codes: 0 clean stop (or --help/--version/--check-config), 1 a runtime failure at start
 * (data directory, lease file, a port another process listens on, an identity another process
 * on this host holds, ...), 2 bad configuration or usage, 75 the etcd identity lost (app.h).
 *
 * SIGTERM, SIGINT and SIGHUP are blocked before any thread starts, so only this thread takes
 * them (sigwait). SIGHUP reopens log.file (after logrotate renamed it), reads
 * cache.memcached_auth_file again (as memcached rereads its -Y file) and reloads the TLS
 * listeners' certificates (app_reload_tls; memcached's refresh_certs and the watch of the files'
 * directories reload them too, from their own threads, serialized in app.c); a second SIGTERM/SIGINT during the drain ends the
 * process at once; SIGHUP stays blocked then.
 * Between signals the thread wakes once a second for app_housekeeping (foreign listeners on our
 * ports, the identity claims): it has nothing else to do, and no loop thread is disturbed. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "app/app.h"
#include "obs/log.h"
#include "util/version.h"

/* "snowflaked: <msg><tail>" on stderr, msg's control characters escaped as the logger escapes
 * them: a start-up error quotes etcd's answers, paths and configuration values, and none of them
 * may put a raw CR, LF or ESC on an operator's terminal or forge lines in a log collector. */
static void print_error(const char *msg, const char *tail)
{
    enum { SLICE = 256 };
    char out[4 * SLICE]; /* an escape is at most 4 bytes: a slice always fits */
    fputs("snowflaked: ", stderr);
    for (size_t n = strlen(msg), i = 0; i < n; i += SLICE) {
        bool cut = false;
        size_t k = n - i < SLICE ? n - i : SLICE;
        fwrite(out, 1, log_escape_controls(msg + i, k, out, sizeof out, &cut), stderr);
    }
    fputs(tail, stderr);
}

#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer builds only. libuv closes connection sockets with a raw close(2) that TSan
 * cannot see (net/loop.h), so when the main thread's once-a-second scan (foreign listeners: a
 * sock_diag socket, else /proc; claim pids: /proc) gets a descriptor number a loop thread used
 * for a connection just closed, TSan reports the close/closedir/fclose as racing with that
 * connection's last read: a false report about a number, not about memory. Only those two files' descriptor reuse is silenced. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "race:listen_guard.c\nrace:hostclaim.c\n";
}
#endif

static int fail(int code, const char *msg)
{
    log_shutdown(); /* what was logged before comes first */
    if (log_current_format() == LOG_FORMAT_JSON)
        LOG_ERROR("snowflaked: %s", msg); /* a JSON log stays JSON to its last line */
    else
        print_error(msg, "\n");
    return code;
}

int main(int argc, char **argv)
{
    char err[CFG_PATH_MAX * 3]; /* room for messages quoting paths */
    cfg_cli cli;
    if (cfg_parse_args(argc, argv, &cli, err, sizeof err) != 0) {
        print_error(err, "\nTry 'snowflaked --help'.\n");
        return 2;
    }
    if (cli.print_schema)
        return cfg_print_schema(stdout) == 0 ? 0 : 1;
    if (cli.help || cli.version) {
        if (cli.help)
            cfg_usage(stdout, "snowflaked");
        else
            printf("snowflaked %s\n", SF_VERSION);
        return 0;
    }
    static cfg c;
    if (cfg_load(&c, &cli, clk_now(clk_system()), err, sizeof err) != 0)
        return fail(2, err);
    if (cli.check_config) {
        cfg_print_json(&c, stdout);
        return 0;
    }
    sigset_t stop, waited;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    waited = stop;
    sigaddset(&waited, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &waited, NULL); /* inherited by every thread app_start creates */
    signal(SIGPIPE, SIG_IGN);
    static app a;
    int code = app_start(&a, &c, &cli, err, sizeof err);
    if (code == APP_STOPPED_AT_START) {
        log_shutdown();
        return 0;
    }
    if (code != 0)
        return fail(code, err);
    int sig = 0;
    const struct timespec housekeeping = {.tv_sec = 1, .tv_nsec = 0};
    for (;;) {
        sig = sigtimedwait(&waited, NULL, &housekeeping);
        if (sig < 0) {
            if (errno == EAGAIN)
                app_housekeeping(&a);
            continue; /* EAGAIN or EINTR */
        }
        if (sig != SIGHUP)
            break;
        LOG_INFO("SIGHUP received: reopening the log file, reloading TLS certificates");
        log_reopen();
        app_reload_memcached_auth(&a);
        app_reload_tls(&a);
    }
    LOG_INFO("%s received, draining (up to %u ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
             c.server.shutdown_grace_ms);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
    return app_stop(&a);
}
