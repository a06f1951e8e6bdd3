/* Prometheus text exposition (format 0.0.4) into a caller's buffer. Not a hot path: used when
 * /metrics is scraped. A buffer that fills up marks itself truncated instead of overflowing. */
#ifndef SF_OBS_PROM_H
#define SF_OBS_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct prom_buf {
    char *p;
    size_t len, cap;
    bool truncated;
} prom_buf;

static inline void prom_init(prom_buf *b, char *mem, size_t cap)
{
    b->p = mem;
    b->len = 0;
    b->cap = cap;
    b->truncated = false;
}

__attribute__((format(printf, 2, 3))) void prom_printf(prom_buf *b, const char *fmt, ...);
/* "# HELP name help\n# TYPE name type\n" */
void prom_family(prom_buf *b, const char *name, const char *type, const char *help);
/* "name{labels} value\n"; labels may be NULL or "" (already formatted: k="v",k2="v2"). */
void prom_u64(prom_buf *b, const char *name, const char *labels, uint64_t value);
void prom_f64(prom_buf *b, const char *name, const char *labels, double value);

#endif
