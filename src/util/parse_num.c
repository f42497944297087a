/* Exact parsing of numbers given as text. */
#include "parse_num.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
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

bool parse_i64(const char *s, int64_t *out) {
    if (!s || !isdigit((unsigned char)s[s[0] == '-'])) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = (int64_t)v;
    return true;
}

bool parse_f64(const char *s, double *out) {
    /* a digit, or a sign or point then one: no spaces, no "nan", "inf" or "0x" */
    const char *p = s ? s + (s[0] == '-' || s[0] == '+') : NULL;
    if (!p || !(isdigit((unsigned char)p[0]) || (p[0] == '.' && isdigit((unsigned char)p[1]))))
        return false;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE && (v > 1.0 || v < -1.0)) return false; /* overflow; underflow is 0 */
    if (*end || !isfinite(v)) return false;
    *out = v;
    return true;
}
