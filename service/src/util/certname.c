/* Client certificate names of an access list: see certname.h. */
#include "util/certname.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define RFC2253_HINT                                                                               \
    "write the subject in RFC 2253 form, most specific first, as `openssl x509 -noout -subject "   \
    "-nameopt RFC2253` prints it (e.g. CN=orders-api,O=shop)"

static bool is_alpha(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* An attribute type at s[*i] (a name such as CN or emailAddress, or a dotted OID), then '='. */
static int dn_type(const char *s, size_t len, size_t *i, char *err, size_t errlen)
{
    size_t j = *i;
    if (j < len && is_alpha(s[j])) {
        while (j < len && (is_alpha(s[j]) || is_digit(s[j]) || s[j] == '-'))
            j++;
    } else if (j < len && is_digit(s[j])) {
        while (j < len && (is_digit(s[j]) || (s[j] == '.' && j + 1 < len && is_digit(s[j + 1]))))
            j++;
    } else {
        if (j < len && s[j] == ' ')
            snprintf(err, errlen, "a space after ',' or '+' is not RFC 2253 form: " RFC2253_HINT);
        else
            snprintf(err, errlen, "an attribute type (CN, O, OU, ... or an OID) must come at "
                                  "byte %zu: " RFC2253_HINT, j);
        return -1;
    }
    if (j < len && s[j] == ' ') {
        snprintf(err, errlen, "a space before '=' is not RFC 2253 form: " RFC2253_HINT);
        return -1;
    }
    if (j >= len || s[j] != '=') {
        snprintf(err, errlen, "'=' must follow the attribute type at byte %zu: " RFC2253_HINT, j);
        return -1;
    }
    *i = j + 1;
    return 0;
}

static int dn_check(const char *s, size_t len, char *err, size_t errlen)
{
    if (len >= 8 && strncmp(s, "subject=", 8) == 0) {
        snprintf(err, errlen, "leave out the \"subject=\" openssl prints before the DN");
        return -1;
    }
    if (s[0] == '/') {
        snprintf(err, errlen, "that is OpenSSL's old /C=../CN=.. form (least specific first): "
                              RFC2253_HINT);
        return -1;
    }
    if (!memchr(s, '=', len)) {
        snprintf(err, errlen, "neither a subject DN (TYPE=value,...) nor DNS:name nor URI:uri");
        return -1;
    }
    size_t i = 0;
    for (;;) {
        if (dn_type(s, len, &i, err, errlen) != 0)
            return -1;
        if (i < len && s[i] == ' ') {
            snprintf(err, errlen, "a space after '=' is not RFC 2253 form (a value's leading "
                                  "space is written \\ ): " RFC2253_HINT);
            return -1;
        }
        while (i < len && s[i] != ',' && s[i] != '+') {
            if (s[i] == '\\' && ++i >= len) {
                snprintf(err, errlen, "ends in a lone '\\'");
                return -1;
            }
            i++;
        }
        if (i >= len)
            return 0;
        i++; /* ',' or '+': another attribute follows */
    }
}

static int dns_check(const char *v, size_t len, char *err, size_t errlen)
{
    if (len == 0 || len > 253) {
        snprintf(err, errlen, "a DNS name is 1..253 bytes, got %zu", len);
        return -1;
    }
    if (memchr(v, '*', len)) {
        snprintf(err, errlen, "no wildcards: list each name the certificates carry");
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        if (!is_alpha(v[i]) && !is_digit(v[i]) && v[i] != '-' && v[i] != '.' && v[i] != '_') {
            unsigned char ch = (unsigned char)v[i];
            if (ch >= 0x20 && ch < 0x7f)
                snprintf(err, errlen, "a DNS name holds letters, digits, '-', '_' and '.', got '%c'",
                         ch);
            else
                snprintf(err, errlen, "a DNS name holds letters, digits, '-', '_' and '.', got "
                                      "byte 0x%02x", ch);
            return -1;
        }
    if (v[0] == '.' || v[len - 1] == '.') {
        snprintf(err, errlen, "a DNS name neither starts nor ends with '.'");
        return -1;
    }
    return 0;
}

static int uri_check(const char *v, size_t len, char *err, size_t errlen)
{
    size_t i = 0;
    if (len && is_alpha(v[0]))
        while (i < len && (is_alpha(v[i]) || is_digit(v[i]) || v[i] == '+' || v[i] == '-' ||
                           v[i] == '.'))
            i++;
    if (i == 0 || i >= len || v[i] != ':' || i + 1 >= len) {
        snprintf(err, errlen, "a URI starts with its scheme (e.g. URI:spiffe://trust.domain/ns/x)");
        return -1;
    }
    if (memchr(v, ' ', len)) {
        snprintf(err, errlen, "a URI holds no space");
        return -1;
    }
    return 0;
}

int certname_parse(const char *s, size_t len, certname_kind *kind, size_t *value_off, char *err,
                   size_t errlen)
{
    if (len == 0) {
        snprintf(err, errlen, "empty");
        return -1;
    }
    if (len > CERTNAME_MAX) {
        snprintf(err, errlen, "at most %d bytes, got %zu", CERTNAME_MAX, len);
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) {
            snprintf(err, errlen, "a control character at byte %zu", i);
            return -1;
        }
    if (len >= 4 && memcmp(s, "DNS:", 4) == 0) {
        *kind = CERTNAME_DNS;
        *value_off = 4;
        return dns_check(s + 4, len - 4, err, errlen);
    }
    if (len >= 4 && memcmp(s, "URI:", 4) == 0) {
        *kind = CERTNAME_URI;
        *value_off = 4;
        return uri_check(s + 4, len - 4, err, errlen);
    }
    *kind = CERTNAME_DN;
    *value_off = 0;
    return dn_check(s, len, err, errlen);
}

int certname_list_init(certname_list *l, const char *entries, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    if (!entries[0])
        return 0;
    l->text = strdup(entries);
    if (!l->text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char *p = l->text;
    for (unsigned i = 0;; i++) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char why[256];
        certname_kind kind;
        size_t off;
        if (i == CERTNAME_LIST_MAX) {
            snprintf(err, errlen, "at most %d entries", CERTNAME_LIST_MAX);
            goto fail;
        }
        if (certname_parse(p, len, &kind, &off, why, sizeof why) != 0) {
            char shown[84]; /* the entry as errors show values: printable ASCII, cut */
            size_t k = 0;
            for (; k < len && k < 80; k++)
                shown[k] = (unsigned char)p[k] >= 0x20 && (unsigned char)p[k] < 0x7f ? p[k] : '?';
            memcpy(shown + k, k < len ? "..." : "", k < len ? 4 : 1);
            snprintf(err, errlen, "[%u] \"%s\": %s", i, shown, why);
            goto fail;
        }
        l->e[i] = (certname_entry){.kind = kind, .len = (uint32_t)(len - off), .v = p + off};
        l->n = i + 1;
        if (!nl)
            return 0;
        *nl = '\0';
        p = nl + 1;
    }
fail:
    certname_list_free(l);
    return -1;
}

void certname_list_free(certname_list *l)
{
    free(l->text);
    memset(l, 0, sizeof *l);
}

bool certname_list_match(const certname_list *l, certname_kind kind, const char *v, size_t len)
{
    for (unsigned i = 0; i < l->n; i++) {
        const certname_entry *e = &l->e[i];
        if (e->kind != kind || e->len != len)
            continue;
        if (kind == CERTNAME_DNS ? strncasecmp(e->v, v, len) == 0 : memcmp(e->v, v, len) == 0)
            return true;
    }
    return false;
}
