/* Exact parsing of numbers given as text (command-line values, JSON
 * strings): the whole string or nothing, never a silent wrap or rounding. */
#ifndef BT_PARSE_NUM_H
#define BT_PARSE_NUM_H

#include <stdbool.h>
#include <stdint.h>

/* Decimal digits only (no sign, no spaces) that fit in 64 bits, into *out.
 * false for anything else, 18446744073709551616 included. */
bool parse_u64(const char *s, uint64_t *out);

/* An optional '-' then decimal digits that fit in 64 bits, into *out; false
 * for anything else (spaces, '+', "5x", "1e3", "0x10"). */
bool parse_i64(const char *s, int64_t *out);

/* A finite decimal number as strtod reads it ("0.5", "-1", "1e-3"), the whole
 * string, into *out; false for anything else (spaces, "0.5x", "nan", "inf",
 * hexadecimal, a value that overflows). */
bool parse_f64(const char *s, double *out);

#endif
