/* Client certificate names as an access list gives them (auth.client_certificates), and the
 * matching of a verified certificate's names against them. No OpenSSL here: net/tls.c takes the
 * names out of the certificate and asks certname_list_match; config/ validates the entries with
 * certname_parse (at load, exit 2 on a bad one).
 *
 * An entry is one of:
 *   "CN=orders-api,O=shop"        the subject DN in RFC 2253 form, exactly as
 *                                 `openssl x509 -noout -subject -nameopt RFC2253` prints it after
 *                                 "subject=" (most specific RDN first, no spaces around = and ,,
 *                                 OpenSSL's escaping); compared byte for byte, case included;
 *   "DNS:orders-api.shop.svc"     a subjectAltName dNSName (cert-manager's dnsNames); compared
 *                                 ASCII case-insensitively (DNS names are, RFC 4343); no wildcard:
 *                                 an entry with '*' is refused, a certificate's "*.x" SAN matches
 *                                 only the entry "DNS:*.x" which cannot be written;
 *   "URI:spiffe://td/ns/x/sa/y"   a subjectAltName URI (SPIFFE IDs, cert-manager's uris);
 *                                 compared byte for byte.
 * A certificate matches a list when its subject DN or any one of its DNS/URI SANs equals one
 * entry.
 */
#ifndef SF_UTIL_CERTNAME_H
#define SF_UTIL_CERTNAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { CERTNAME_DN, CERTNAME_DNS, CERTNAME_URI } certname_kind;

#define CERTNAME_MAX      1024 /* bytes of one entry, prefix included */
#define CERTNAME_LIST_MAX 64   /* entries of one list */

/* Checks s[0..len) as one entry: 0 with its kind and where its value starts (after "DNS:" or
 * "URI:"; 0 for a DN), or -1 with why in err (the entry itself is not quoted: the caller does). */
int certname_parse(const char *s, size_t len, certname_kind *kind, size_t *value_off, char *err,
                   size_t errlen);

typedef struct certname_entry {
    certname_kind kind;
    uint32_t len;  /* of v */
    const char *v; /* the value (the DN, the DNS name, the URI), inside the list's copy */
} certname_entry;

typedef struct certname_list {
    unsigned n;
    certname_entry e[CERTNAME_LIST_MAX];
    char *text; /* the list's own copy */
} certname_list;

/* The list from entries separated by '\n' (config's form; "" = empty list). 0, or -1 with err
 * naming the entry by its index ("[2] \"DNS:*.x\": ..."). Allocates its copy. */
int certname_list_init(certname_list *l, const char *entries, char *err, size_t errlen);
void certname_list_free(certname_list *l);

/* True when the certificate name v[0..len) of this kind equals an entry. */
bool certname_list_match(const certname_list *l, certname_kind kind, const char *v, size_t len);

#endif
