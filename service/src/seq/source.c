/* The block-source contract's small shared pieces: name rules, status names. */
#include "seq/source.h"

bool seq_name_valid(const char *name, size_t len)
{
    if (len == 0 || len > SEQ_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        /* the first character is alphanumeric: no ".", "..", hidden files or option-like names */
        if (!alnum && (i == 0 || (c != '_' && c != '-' && c != '.')))
            return false;
    }
    return true;
}

const char *seq_status_name(seq_status s)
{
    switch (s) {
    case SEQ_OK:
        return "ok";
    case SEQ_EXHAUSTED:
        return "exhausted";
    case SEQ_EXISTS:
        return "exists";
    case SEQ_FAILED:
        return "failed";
    }
    return "unknown";
}
