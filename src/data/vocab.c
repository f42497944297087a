/* vocab.txt loading. */
#include "vocab.h"

#include "util/strmap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

uint64_t fnv1a64(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* false with "path: line N repeats line M" when a token appears twice (its
 * second id could never be produced, and transformers would map both to one). */
static bool no_duplicates(const bt_vocab *v, const char *path, char *err, size_t errlen) {
    bt_strmap seen;
    if (!strmap_init(&seen, (size_t)v->size)) {
        snprintf(err, errlen, "%s: out of memory", path);
        return false;
    }
    bool ok = true;
    for (int i = 0; ok && i < v->size; i++) {
        bool inserted;
        int64_t *first = strmap_upsert(&seen, v->tokens[i], strlen(v->tokens[i]), &inserted);
        if (!first) {
            snprintf(err, errlen, "%s: out of memory", path);
            ok = false;
        } else if (!inserted) {
            snprintf(err, errlen, "%s: line %d repeats the token \"%.40s\" of line %lld; each "
                     "token must appear once", path, i + 1, v->tokens[i], (long long)*first + 1);
            ok = false;
        } else {
            *first = i;
        }
    }
    strmap_free(&seen);
    return ok;
}

int vocab_casing(const bt_vocab *v) {
    bool letters = false;
    for (int i = 0; i < v->size; i++) {
        const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)v->tokens[i];
        size_t n = strlen(v->tokens[i]);
        if (n > 2 && p[0] == '[' && p[n - 1] == ']') continue; /* [CLS], [unused0], ... */
        for (utf8proc_ssize_t k = 0; k < (utf8proc_ssize_t)n;) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t step = utf8proc_iterate(p + k, (utf8proc_ssize_t)n - k, &cp);
            if (step <= 0) break;
            k += step;
            if (utf8proc_tolower(cp) != cp) return VOCAB_CASED;
            letters = letters || utf8proc_toupper(cp) != cp;
        }
    }
    return letters ? VOCAB_UNCASED : VOCAB_CASE_UNKNOWN;
}

bool vocab_load(bt_vocab *v, const char *path, char *err, size_t errlen) {
    memset(v, 0, sizeof *v);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open vocab: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        fclose(f);
        return false;
    }
    long len = (long)st.st_size;
    v->storage = malloc((size_t)len + 2);
    if (!v->storage || fread(v->storage, 1, (size_t)len, f) != (size_t)len) {
        snprintf(err, errlen, "%s: cannot read vocab", path);
        fclose(f);
        vocab_free(v);
        return false;
    }
    fclose(f);
    v->storage[len] = 0;
    int lines = 0;
    for (long i = 0; i < len; i++) lines += v->storage[i] == '\n';
    if (len > 0 && v->storage[len - 1] != '\n') lines++;
    v->tokens = calloc((size_t)lines + 1, sizeof *v->tokens);
    if (!v->tokens) {
        snprintf(err, errlen, "%s: out of memory", path);
        vocab_free(v);
        return false;
    }
    char *p = v->storage, *end = v->storage + len;
    v->hash = FNV1A64_INIT;
    while (p < end && v->size < lines) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((nl ? nl : end) - p);
        if (memchr(p, 0, n)) {
            snprintf(err, errlen, "%s: line %d contains a NUL byte", path, v->size + 1);
            vocab_free(v);
            return false;
        }
        p[n] = 0; /* the '\n', or the terminator after the last line */
        if (n && p[n - 1] == '\r') p[--n] = 0;
        v->tokens[v->size++] = p;
        v->hash = fnv1a64(v->hash, p, n);
        v->hash = fnv1a64(v->hash, "\n", 1);
        if (!nl) break;
        p = nl + 1;
    }
    if (!no_duplicates(v, path, err, errlen)) {
        vocab_free(v);
        return false;
    }
    int *ids[5] = {&v->pad_id, &v->unk_id, &v->cls_id, &v->sep_id, &v->mask_id};
    const char *names[5] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int s = 0; s < 5; s++) {
        *ids[s] = -1;
        for (int i = 0; i < v->size; i++)
            if (strcmp(v->tokens[i], names[s]) == 0) {
                *ids[s] = i;
                break;
            }
        if (*ids[s] < 0) {
            snprintf(err, errlen, "%s: vocab has no %s token", path, names[s]);
            vocab_free(v);
            return false;
        }
    }
    return true;
}

void vocab_free(bt_vocab *v) {
    free(v->tokens);
    free(v->storage);
    memset(v, 0, sizeof *v);
}
