/* UTF-8 validity (utf8_check.h), by utf8proc's decoder. */
#include "utf8_check.h"

#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

/* Bytes of the valid UTF-8 sequence at s (0: not valid there). */
static size_t valid_at(const char *s) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s, -1, &cp);
    return n > 0 ? (size_t)n : 0;
}

bool utf8_valid(const char *s) {
    for (size_t n; *s; s += n)
        if (!(n = valid_at(s))) return false;
    return true;
}

void utf8_shown(const char *s, char *out, size_t n) {
    size_t k = 0;
    for (size_t step; *s && k + 5 < n; s += step) {
        step = valid_at(s);
        if (step > 0 && k + step + 1 < n && (step > 1 || (*s >= 0x20 && *s < 0x7f))) {
            memcpy(out + k, s, step);
            k += step;
        } else {
            k += (size_t)snprintf(out + k, n - k, "\\x%02x", (unsigned char)*s);
            step = 1;
        }
    }
    out[k < n ? k : n - 1] = 0;
}
