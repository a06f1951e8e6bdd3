/* Strict JSON on top of cJSON: one value, no NUL, no \u0000, no key twice (jsonstrict.h). */
#include "util/jsonstrict.h"

#include <string.h>

/* Only called on text cJSON accepted, where quotes and backslashes occur in strings only. */
static const char *find_nul_escape(const char *text, size_t len)
{
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '"') {
            in_string = !in_string;
        } else if (in_string && text[i] == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 6 <= len && memcmp(text + i + 2, "0000", 4) == 0)
                return text + i;
            i++; /* skip the escaped character, so \" does not end the string */
        }
    }
    return NULL;
}

cJSON *json_strict_parse(const char *text, size_t len, const char **why, size_t *at)
{
    const char *nul = memchr(text, '\0', len), *end = NULL;
    if (nul) {
        *why = "a NUL byte";
        *at = (size_t)(nul - text);
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        *why = "not valid JSON";
        *at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return NULL;
    }
    size_t off = (size_t)(end - text);
    while (off < len && strchr(" \t\r\n", text[off]))
        off++;
    const char *esc = off < len ? NULL : find_nul_escape(text, len);
    if (off < len || esc) {
        *why = off < len ? "text after the JSON value" : "\\u0000 in a string";
        *at = off < len ? off : (size_t)(esc - text);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

bool json_strict_has_earlier_twin(const cJSON *item)
{
    if (!item->string)
        return false;
    for (const cJSON *p = item->prev; p && p->next; p = p->prev) /* head's prev is the tail */
        if (p->string && strcmp(p->string, item->string) == 0)
            return true;
    return false;
}

const cJSON *json_strict_twin(const cJSON *root)
{
    for (const cJSON *it = root ? root->child : NULL; it; it = it->next) {
        if (cJSON_IsObject(root) && json_strict_has_earlier_twin(it))
            return it;
        const cJSON *deeper = json_strict_twin(it);
        if (deeper)
            return deeper;
    }
    return NULL;
}
