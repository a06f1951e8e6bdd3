#include "obs/prom.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void prom_printf(prom_buf *b, const char *fmt, ...)
{
    if (b->truncated)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len) {
        b->truncated = true;
        return;
    }
    b->len += (size_t)n;
}

void prom_family(prom_buf *b, const char *name, const char *type, const char *help)
{
    prom_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_u64(prom_buf *b, const char *name, const char *labels, uint64_t value)
{
    if (labels && *labels)
        prom_printf(b, "%s{%s} %llu\n", name, labels, (unsigned long long)value);
    else
        prom_printf(b, "%s %llu\n", name, (unsigned long long)value);
}

/* The shortest of %.15g and %.17g that reads back as the same double, as Prometheus' own
 * clients print: %.9g rounded a Unix time such as a certificate's not-after (10 digits) to tens of
 * seconds, while %.17g alone prints 0.1 as 0.10000000000000001. */
void prom_f64(prom_buf *b, const char *name, const char *labels, double value)
{
    char num[32];
    snprintf(num, sizeof num, "%.15g", value);
    if (strtod(num, NULL) != value)
        snprintf(num, sizeof num, "%.17g", value);
    if (labels && *labels)
        prom_printf(b, "%s{%s} %s\n", name, labels, num);
    else
        prom_printf(b, "%s %s\n", name, num);
}
