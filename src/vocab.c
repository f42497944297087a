/* vocab.txt loading. */
#include "vocab.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

uint64_t fnv1a64(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
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
