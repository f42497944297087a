/* Exact parsing of numbers given as text. */
#include "parse_num.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !isdigit((unsigned char)s[0])) return false; /* strtoull takes "-1" and " 1" */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = (uint64_t)v;
    return true;
}
