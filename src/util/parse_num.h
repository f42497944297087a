/* Exact parsing of numbers given as text (command-line values, JSON
 * strings): the whole string or nothing, never a silent wrap or rounding. */
#ifndef BT_PARSE_NUM_H
#define BT_PARSE_NUM_H

#include <stdbool.h>
#include <stdint.h>

/* Decimal digits only (no sign, no spaces) that fit in 64 bits, into *out.
 * false for anything else, 18446744073709551616 included. */
bool parse_u64(const char *s, uint64_t *out);

#endif
