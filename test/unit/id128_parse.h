/* The 128-bit ID tests' (test_id128.c, test_typeid.c) way to read a UUID or ULID text they
 * know to be valid: the ID, or the test fails naming the text and the parser's reason. */
#ifndef SF_TEST_ID128_PARSE_H
#define SF_TEST_ID128_PARSE_H

#include <check.h>
#include <string.h>

#include "snowflake/id128.h"

static inline sf_id128 uuid(const char *s)
{
    sf_id128 id;
    const char *why = NULL;
    ck_assert_msg(sf_uuid_parse(s, strlen(s), &id, &why) == 0, "%s: %s", s, why);
    return id;
}

static inline sf_id128 ulid(const char *s)
{
    sf_id128 id;
    const char *why = NULL;
    ck_assert_msg(sf_ulid_parse(s, strlen(s), &id, &why) == 0, "%s: %s", s, why);
    return id;
}

#endif
