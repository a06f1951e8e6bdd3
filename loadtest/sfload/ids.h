/* Extraction of Snowflake IDs from /id and /ids response bodies, as service/src/api/id.c writes
 * them:
 *   JSON   {"id":"<id>"}            {"ids":["<id>","<id>",...]}
 *   text   <id>                     <id>\n<id>\n...        (a final newline is optional)
 * JSON is recognised by a leading '{'; insignificant JSON whitespace is accepted, as are IDs
 * written as bare JSON numbers. An ID is decimal (1..20 digits, at most 2^64-1) or hexadecimal
 * (1..16 digits, either case), as chosen by the caller.
 *
 * Pure functions: no allocation, no global state, any thread.
 *
 * Contract
 *   ids_parse(body, len, enc, fn, ud, why)
 *       calls fn(ud, id) for every ID in body order and returns how many there were, or -1 if
 *       the body is malformed (*why then names the problem; IDs before the fault have already
 *       been passed to fn). If fn returns non-zero, parsing stops and that many IDs are returned.
 *   ids_parse_one(text, len, enc, &id)   0, or -1 if text is not exactly one ID.
 */
#ifndef SFLOAD_IDS_H
#define SFLOAD_IDS_H

#include <stddef.h>
#include <stdint.h>

typedef enum ids_enc { IDS_DEC, IDS_HEX } ids_enc;

typedef int (*ids_fn)(void *ud, uint64_t id);

int ids_parse_one(const char *text, size_t len, ids_enc enc, uint64_t *id);
long ids_parse(const char *body, size_t len, ids_enc enc, ids_fn fn, void *ud, const char **why);

#endif
