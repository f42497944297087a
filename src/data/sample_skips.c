/* Sample ranges skipped after a rollback, and the cursor over them. */
#include "sample_skips.h"

#include "mpi/dist.h"

#include <stdio.h>
#include <stdlib.h>

bool skips_add(sample_skips *s, uint64_t from, uint64_t to) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        sample_range *r = realloc(s->r, (size_t)cap * sizeof *r);
        if (!r) return false;
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (sample_range){from, to};
    return true;
}

uint64_t skips_next(const sample_skips *s, uint64_t cursor) {
    for (bool moved = true; moved;) { /* ranges may chain: repeat until none applies */
        moved = false;
        for (int i = 0; i < s->n; i++)
            if (cursor >= s->r[i].from && cursor < s->r[i].to) {
                cursor = s->r[i].to;
                moved = true;
            }
    }
    return cursor;
}

void skips_format(const sample_skips *s, uint64_t min_from, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < s->n && used + 48 < n; i++) {
        if (s->r[i].from < min_from) continue;
        used += (size_t)snprintf(out + used, n - used, "%s[%llu, %llu)", used ? ", " : "",
                                 (unsigned long long)s->r[i].from, (unsigned long long)s->r[i].to);
    }
}

cJSON *skips_to_json(const sample_skips *s) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < s->n; i++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)s->r[i].from));
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)s->r[i].to));
        cJSON_AddItemToArray(arr, pair);
    }
    return arr;
}

bool skips_from_json(sample_skips *s, const cJSON *arr) {
    s->n = 0;
    if (!arr) return true;
    if (!cJSON_IsArray(arr)) return false;
    const cJSON *pair;
    cJSON_ArrayForEach(pair, arr) {
        const cJSON *a = cJSON_GetArrayItem(pair, 0), *b = cJSON_GetArrayItem(pair, 1);
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 ||
            b->valuedouble <= a->valuedouble)
            return false;
        if (!skips_add(s, (uint64_t)a->valuedouble, (uint64_t)b->valuedouble)) return false;
    }
    return true;
}

void skips_broadcast(sample_skips *s) {
    long n = s->n;
    dist_broadcast(&n, sizeof n);
    if (dist_rank() != 0) {
        s->n = 0;
        for (long i = 0; i < n; i++)
            if (!skips_add(s, 0, 1)) {
                fprintf(stderr, "bertrain: rank %d: out of host memory\n", dist_rank());
                dist_abort(1);
            }
    }
    if (n > 0) dist_broadcast(s->r, (size_t)n * sizeof *s->r);
}

void skips_free(sample_skips *s) {
    free(s->r);
    *s = (sample_skips){0};
}
