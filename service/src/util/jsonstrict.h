/* The daemon's strict JSON reader, on top of cJSON, for text from outside (the configuration's
 * JSON values, request bodies). cJSON alone accepts text after the value ("{}x", two objects:
 * the rest is ignored), keeps every copy of a key given twice (readers that look a key up get
 * the first, loops over the members see both), and decodes "\u0000" into a NUL that silently
 * cuts the string short. These refuse all three, and a NUL byte in the text.
 *
 * Any thread; no state. json_strict_parse allocates the tree (cJSON); the caller frees it. */
#ifndef SF_UTIL_JSONSTRICT_H
#define SF_UTIL_JSONSTRICT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* Parses text[0..len) as exactly one JSON value with only white space around it. Returns the
 * tree, or NULL with *why (a static string: "not valid JSON", "text after the JSON value",
 * "a NUL byte", "\\u0000 in a string") and *at (the byte offset it concerns). A key given twice
 * is not checked here (json_strict_twin): callers that name the key's path say it better. */
cJSON *json_strict_parse(const char *text, size_t len, const char **why, size_t *at);

/* The first member, at any depth, whose key an earlier member of the same object has already
 * given, or NULL when none. */
const cJSON *json_strict_twin(const cJSON *root);

/* Whether an earlier member of item's object has item's key (one object level). */
bool json_strict_has_earlier_twin(const cJSON *item);

#endif
