/* Printing a run's figures: the human report, one JSON object (cJSON), or webbench 1.5's
 * summary. Called from the main thread after every load thread has been joined and merged. */
#ifndef SFLOAD_REPORT_H
#define SFLOAD_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "opts.h"
#include "stats.h"
#include "verify.h"

typedef struct sl_report {
    const sl_opts *o;
    const sl_stats *st;        /* merged over threads */
    double elapsed_s;          /* the measured window */
    const verifier *ver;       /* merged; NULL unless --verify-ids */
    const char *layout_source; /* "option", "metrics" or "default" */
    size_t verify_map_bytes;   /* the ID maps of all threads, at the end of the run */
    double verify_merge_ms;
    bool have_server;
    double server_cpu_us, cpu_window_s; /* over the measured window */
    double client_cpu_us;
} sl_report;

/* True when no request failed and the verification (if any) passed: exit status 0. */
bool report_passed(const sl_report *r);
void report_text(FILE *f, const sl_report *r);
int report_json(FILE *f, const sl_report *r); /* 0 or -1 (out of memory) */
void report_webbench_header(FILE *f, const sl_opts *o);
void report_webbench(FILE *f, const sl_report *r);
/* The verification verdict with examples, for stderr. Prints nothing if it passed. */
void report_verify_failure(FILE *f, const sl_report *r);

#endif
