/* safetensors reading with full bounds checks. */
#include "safetensors.h"

#include "util/json_dups.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t dtype_size(const char *d) {
    if (!strcmp(d, "F32") || !strcmp(d, "I32") || !strcmp(d, "U32")) return 4;
    if (!strcmp(d, "F16") || !strcmp(d, "BF16") || !strcmp(d, "I16")) return 2;
    if (!strcmp(d, "F64") || !strcmp(d, "I64")) return 8;
    if (!strcmp(d, "U8") || !strcmp(d, "I8") || !strcmp(d, "BOOL")) return 1;
    return 0;
}

#define BAD(...)                                                                             \
    do {                                                                                     \
        int k_ = snprintf(err, errlen, "%s: ", path);                                        \
        if (k_ > 0 && (size_t)k_ < errlen) snprintf(err + k_, errlen - (size_t)k_, __VA_ARGS__); \
        cJSON_Delete(root);                                                                  \
        st_close(f);                                                                         \
        return false;                                                                        \
    } while (0)

/* A JSON number that is a whole number in [0, 2^53], as a double; -1 for
 * anything else (a string, a fraction, a negative or too large number). */
static double json_whole(const cJSON *x) {
    if (!cJSON_IsNumber(x)) return -1;
    double v = x->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(uint64_t)v) return -1;
    return v;
}

bool st_open(st_file *f, const char *path, char *err, size_t errlen) {
    cJSON *root = NULL;
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) BAD("cannot open: %s", strerror(errno));
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->size = len > 0 ? (size_t)len : 0;
    f->file = malloc(f->size + 1);
    if (!f->file || fread(f->file, 1, f->size, fp) != f->size) {
        fclose(fp);
        BAD("cannot read %zu bytes", f->size);
    }
    fclose(fp);
    if (f->size < 8) BAD("truncated (no header length)");
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->file[i];
    if (hlen > f->size - 8) BAD("header length %llu exceeds the file", (unsigned long long)hlen);
    f->data_start = 8 + (size_t)hlen;
    root = cJSON_ParseWithLength((const char *)f->file + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) BAD("header is not a JSON object");
    char dup[512]; /* a tensor named twice: which one is meant? */
    if (json_find_duplicate((const char *)f->file + 8, (size_t)hlen, dup, sizeof dup))
        BAD("header: %s", dup);
    int count = cJSON_GetArraySize(root);
    f->entries = calloc((size_t)count + 1, sizeof *f->entries);
    if (!f->entries) BAD("out of memory");
    size_t data_len = f->size - f->data_start;
    for (cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) continue;
        st_entry *e = &f->entries[f->n];
        if (strlen(it->string) >= sizeof e->name) BAD("tensor name too long: %.40s...", it->string);
        strcpy(e->name, it->string);
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(dt) || !dtype_size(dt->valuestring) || !cJSON_IsArray(sh) ||
            cJSON_GetArraySize(sh) > 8 || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
            BAD("tensor %s: bad dtype, shape or data_offsets", e->name);
        snprintf(e->dtype, sizeof e->dtype, "%s", dt->valuestring);
        e->ndim = cJSON_GetArraySize(sh);
        /* every dimension a whole number, and the element count bounded by the
         * data bytes, so neither the casts nor the product can overflow */
        size_t numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            double x = json_whole(cJSON_GetArrayItem(sh, d));
            if (x < 0 || x > (double)data_len) BAD("tensor %s: bad shape", e->name);
            e->shape[d] = (long)x;
            if (e->shape[d] != 0 && numel > data_len / (size_t)e->shape[d])
                BAD("tensor %s: shape holds more elements than the file has bytes", e->name);
            numel *= (size_t)e->shape[d];
        }
        double b = json_whole(cJSON_GetArrayItem(of, 0)), en = json_whole(cJSON_GetArrayItem(of, 1));
        if (b < 0 || en < b || en > (double)data_len) { /* shown as written, not as parsed */
            char *text = cJSON_PrintUnformatted(of);
            char shown[128];
            snprintf(shown, sizeof shown, "%s", text ? text : "?");
            free(text);
            BAD("tensor %s: data_offsets %s outside the %zu data bytes", e->name, shown, data_len);
        }
        e->begin = (size_t)b;
        e->end = (size_t)en;
        if (e->end - e->begin != numel * dtype_size(e->dtype))
            BAD("tensor %s: %zu bytes for shape of %zu %s elements", e->name, e->end - e->begin,
                numel, e->dtype);
        f->n++;
    }
    cJSON *meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
    f->meta = meta;
    cJSON_Delete(root);
    return true;
}

void st_close(st_file *f) {
    free(f->file);
    free(f->entries);
    cJSON_Delete(f->meta);
    memset(f, 0, sizeof *f);
}

const st_entry *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
    return NULL;
}

const void *st_data(const st_file *f, const st_entry *e) {
    return f->file + f->data_start + e->begin;
}

size_t st_numel(const st_entry *e) {
    size_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= (size_t)e->shape[d];
    return n;
}

const char *st_meta(const st_file *f, const char *key) {
    cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

bool st_write(const char *path, const st_tensor *tensors, int n, const char *const *meta_kv,
              int n_meta, char *err, size_t errlen) {
    cJSON *root = NULL;
    const st_tensor **order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    FILE *fp = NULL;
    char *json = NULL;
    bool ok = false;
    if (!order) goto fail_oom;
    for (int i = 0; i < n; i++) order[i] = &tensors[i];
    qsort(order, (size_t)n, sizeof *order, cmp_tensor_name);
    root = cJSON_CreateObject();
    if (n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(meta, meta_kv[2 * i], meta_kv[2 * i + 1]);
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, order[i]->name);
        cJSON_AddStringToObject(e, "dtype", order[i]->dtype);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < order[i]->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)order[i]->shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + order[i]->bytes)));
        off += order[i]->bytes;
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) goto fail_oom;
    size_t hlen = strlen(json), padded = (hlen + 8 + 7) / 8 * 8 - 8; /* data 8-aligned */
    unsigned char len_le[8];
    for (int i = 0; i < 8; i++) len_le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    fp = fopen(path, "wb");
    if (!fp) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        goto out;
    }
    bool wrote = fwrite(len_le, 1, 8, fp) == 8 && fwrite(json, 1, hlen, fp) == hlen;
    for (size_t i = hlen; wrote && i < padded; i++) wrote = fputc(' ', fp) != EOF;
    for (int i = 0; wrote && i < n; i++)
        wrote = fwrite(order[i]->data, 1, order[i]->bytes, fp) == order[i]->bytes;
    wrote = wrote && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    if (fclose(fp) != 0) wrote = false;
    fp = NULL;
    if (!wrote) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        goto out;
    }
    ok = true;
    goto out;
fail_oom:
    snprintf(err, errlen, "%s: out of memory", path);
out:
    if (fp) fclose(fp);
    free(json);
    cJSON_Delete(root);
    free(order);
    return ok;
}
