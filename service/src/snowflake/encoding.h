/* Text encodings of 64-bit IDs, for output and for parsing input.
 *
 *   SF_ENC_DEC    decimal, no padding (the default; JSON carries it as a string: IDs exceed 2^53)
 *   SF_ENC_HEX    16 lowercase hex digits, zero-padded
 *   SF_ENC_BASE62 11 digits of 0-9A-Za-z, zero-padded
 *   SF_ENC_BASE32 13 digits of Crockford's base32 (0-9A-Z without I L O U), zero-padded
 * The padded encodings sort as strings in the same order as the IDs sort as numbers.
 *
 * Parsing is strict: no sign, no prefix, no whitespace, no overflow; 1..max digits. Hex accepts
 * both cases; base32 accepts lowercase and Crockford's aliases (O->0, I/L->1), never hyphens.
 * Pure functions, any thread, no allocation.
 */
#ifndef SF_SNOWFLAKE_ENCODING_H
#define SF_SNOWFLAKE_ENCODING_H

#include <stddef.h>
#include <stdint.h>

typedef enum { SF_ENC_DEC = 0, SF_ENC_HEX, SF_ENC_BASE62, SF_ENC_BASE32, SF_ENC_COUNT } sf_encoding;

#define SF_ENC_MAX_LEN 20 /* longest output (decimal of 2^64-1), without a terminator */

/* "dec", "hex", "base62", "base32" (also "decimal") -> 0, or -1 if unknown. */
int sf_enc_parse_name(const char *name, size_t len, sf_encoding *out);
const char *sf_enc_name(sf_encoding enc);

/* Writes the ID into buf (at least SF_ENC_MAX_LEN bytes), no terminator; returns the length. */
size_t sf_enc_format(sf_encoding enc, uint64_t id, char *buf);

/* Parses exactly len bytes. Returns 0, or -1 if s is not a valid value in that encoding. */
int sf_enc_parse(sf_encoding enc, const char *s, size_t len, uint64_t *out);

/* One digit: its value in the encoding (hex and base32 in either case, base32 with Crockford's
 * aliases), or -1; and the digit of value v (below the encoding's radix). Inline: with a
 * constant encoding the digit is one table load (the 128-bit formats' hot path). */
int sf_enc_digit(sf_encoding enc, unsigned char c);
extern const char sf_enc_hex_digits[17], sf_enc_base62_digits[63], sf_enc_base32_digits[33];
static inline char sf_enc_digit_char(sf_encoding enc, unsigned v)
{
    switch (enc) {
    case SF_ENC_HEX: return sf_enc_hex_digits[v & 15];
    case SF_ENC_BASE62: return sf_enc_base62_digits[v % 62];
    case SF_ENC_BASE32: return sf_enc_base32_digits[v & 31];
    default: return (char)('0' + v % 10);
    }
}

#endif
