/* UTF-8 validity of names and text that bertrain records in JSON
 * (state.json, metrics.jsonl, an export's files): JSON text is UTF-8, and a
 * path with other bytes in it would make those files unreadable to every
 * other tool. Such paths are refused in one line instead. */
#ifndef BT_UTIL_UTF8_CHECK_H
#define BT_UTIL_UTF8_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* Whether s is valid UTF-8 (no overlong forms, surrogates or code points
 * past U+10FFFF). */
bool utf8_valid(const char *s);

/* s for a message: printable ASCII as it is, every other byte that is not
 * part of valid UTF-8 as \xNN, cut to fit out (n bytes). */
void utf8_shown(const char *s, char *out, size_t n);

#endif
