/* Timed waits of the background threads (lease keeper, snapshot saver) on CLOCK_MONOTONIC, so
 * that a step of the wall clock (NTP, an operator) neither cuts a wait short nor stretches it;
 * pthread_cond_timedwait measures against CLOCK_REALTIME unless the condition variable says so.
 *   monowait_cond_init(&cv)  pthread_cond_init(&cv) on the monotonic clock; returns its result.
 *   monowait_deadline(ms)    the time ms milliseconds from now on that clock, for
 *                            pthread_cond_timedwait on such a condition variable. */
#ifndef SF_UTIL_MONOWAIT_H
#define SF_UTIL_MONOWAIT_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline int monowait_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

static inline struct timespec monowait_deadline(uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + ms % 1000u * 1000000u;
    ts.tv_sec += (time_t)(ms / 1000u + ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    return ts;
}

#endif
