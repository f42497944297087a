/* Duplicate keys in JSON text (json_dups.h): a small recursive scan that
 * decodes each object's keys and remembers where they stand. */
#include "json_dups.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *text, *p, *end;
    char *out;
    size_t outlen;
    bool found;
} scan;

/* A key of the object being scanned: decoded, and where its quote stands. */
typedef struct {
    char *name;
    const char *at;
} key_seen;

static void skip_ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* 1-based line and column of `at` in the text. */
static void line_col(const scan *s, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *q = s->text; q < at; q++) {
        *col = *q == '\n' ? 1 : *col + 1;
        *line += *q == '\n';
    }
}

/* Four hex digits at p into *v; false when they are not. */
static bool hex4(const char *p, const char *end, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        if (p + i >= end) return false;
        const char c = p[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        *v = *v * 16 + (unsigned)d;
    }
    return true;
}

/* Append code point u as UTF-8. */
static size_t put_utf8(char *o, unsigned u) {
    if (u < 0x80) return (size_t)(o[0] = (char)u, 1);
    if (u < 0x800) return o[0] = (char)(0xC0 | u >> 6), o[1] = (char)(0x80 | (u & 63)), 2;
    if (u < 0x10000)
        return o[0] = (char)(0xE0 | u >> 12), o[1] = (char)(0x80 | (u >> 6 & 63)),
               o[2] = (char)(0x80 | (u & 63)), 3;
    return o[0] = (char)(0xF0 | u >> 18), o[1] = (char)(0x80 | (u >> 12 & 63)),
           o[2] = (char)(0x80 | (u >> 6 & 63)), o[3] = (char)(0x80 | (u & 63)), 4;
}

/* The string at s->p (its opening quote), decoded into *out (malloc'd, or
 * NULL when out is NULL); false on anything that is not a JSON string. */
static bool scan_string(scan *s, char **out) {
    const char *q = ++s->p;
    char *o = out ? malloc((size_t)(s->end - q) + 1) : NULL, *w = o;
    if (out && !o) return false;
    while (q < s->end && *q != '"') {
        if (*q != '\\') {
            if (w) *w++ = *q;
            q++;
            continue;
        }
        if (++q >= s->end) break;
        unsigned u;
        const char *simple = strchr("\"\\/bfnrt", *q), *with = "\"\\/\b\f\n\r\t";
        if (simple && *q) {
            if (w) *w++ = with[simple - "\"\\/bfnrt"];
            q++;
        } else if (*q == 'u' && hex4(q + 1, s->end, &u)) {
            q += 5;
            unsigned lo;
            if (u >= 0xD800 && u < 0xDC00 && q + 1 < s->end && q[0] == '\\' && q[1] == 'u' &&
                hex4(q + 2, s->end, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                q += 6;
            }
            if (w) w += put_utf8(w, u);
        } else {
            break;
        }
    }
    const bool ok = q < s->end && *q == '"';
    s->p = q + 1;
    if (w) *w = 0;
    if (out && ok) *out = o;
    else free(o);
    return ok;
}

static bool scan_value(scan *s, const char *path, int depth);

/* Say the duplicate: the dotted path of the key and both places. */
static void found_twice(scan *s, const char *path, const key_seen *first, const key_seen *again) {
    int l1, c1, l2, c2;
    line_col(s, first->at, &l1, &c1);
    line_col(s, again->at, &l2, &c2);
    snprintf(s->out, s->outlen, "key \"%s%s%s\" appears twice (line %d, column %d and line %d, "
             "column %d): a key may appear once in an object", path, *path ? "." : "",
             again->name, l1, c1, l2, c2);
    s->found = true;
}

/* An object at s->p ('{'): its keys compared, its values scanned. */
static bool scan_object(scan *s, const char *path, int depth) {
    key_seen *keys = NULL;
    int n = 0, cap = 0;
    bool ok = true;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return true;
    }
    while (ok && !s->found) {
        skip_ws(s);
        key_seen k = {NULL, s->p};
        if (s->p >= s->end || *s->p != '"' || !scan_string(s, &k.name)) break;
        if (n == cap) {
            key_seen *grown = realloc(keys, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *keys);
            if (!grown) {
                free(k.name);
                break;
            }
            keys = grown;
        }
        keys[n++] = k;
        for (int i = 0; i < n - 1 && !s->found; i++)
            if (!strcmp(keys[i].name, k.name)) found_twice(s, path, &keys[i], &k);
        skip_ws(s);
        if (s->found || s->p >= s->end || *s->p++ != ':') break;
        size_t len = strlen(path) + strlen(k.name) + 2;
        char *sub = malloc(len);
        if (!sub) break;
        snprintf(sub, len, "%s%s%s", path, *path ? "." : "", k.name);
        ok = scan_value(s, sub, depth + 1);
        free(sub);
        skip_ws(s);
        if (!ok || s->found || s->p >= s->end) break;
        if (*s->p == '}') {
            s->p++;
            break;
        }
        ok = *s->p++ == ',';
    }
    for (int i = 0; i < n; i++) free(keys[i].name);
    free(keys);
    return ok;
}

static bool scan_value(scan *s, const char *path, int depth) {
    skip_ws(s);
    if (depth > 1000 || s->p >= s->end) return false;
    if (*s->p == '{') return scan_object(s, path, depth);
    if (*s->p == '"') return scan_string(s, NULL);
    if (*s->p != '[') { /* a number, true, false or null: up to the next delimiter */
        while (s->p < s->end && !strchr(",]} \t\r\n", *s->p)) s->p++;
        return true;
    }
    s->p++;
    for (int i = 0; !s->found; i++) {
        skip_ws(s);
        if (s->p < s->end && *s->p == ']') break;
        char sub[64];
        snprintf(sub, sizeof sub, "[%d]", i);
        size_t len = strlen(path) + sizeof sub;
        char *elem = malloc(len);
        if (!elem) return false;
        snprintf(elem, len, "%s%s", path, sub);
        const bool ok = scan_value(s, elem, depth + 1);
        free(elem);
        skip_ws(s);
        if (!ok || s->p >= s->end) return false;
        if (*s->p != ',') break;
        s->p++;
    }
    if (s->p < s->end && *s->p == ']') s->p++;
    return true;
}

bool json_find_duplicate(const char *text, size_t len, char *out, size_t outlen) {
    scan s = {text, text, text + len, out, outlen, false};
    scan_value(&s, "", 0);
    return s.found;
}
