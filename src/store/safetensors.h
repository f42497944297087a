/* safetensors files (Hugging Face's weight format): an 8-byte header length,
 * a JSON header of name -> {dtype, shape, data_offsets}, then raw data. */
#ifndef BT_SAFETENSORS_H
#define BT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char name[160];
    char dtype[8]; /* "F32", "I32", ... */
    int ndim;
    long shape[8];
    size_t begin, end; /* byte offsets into the data section */
} st_entry;

typedef struct {
    unsigned char *file;
    size_t size, data_start;
    st_entry *entries;
    int n;
    void *meta; /* cJSON object or NULL */
} st_file;

/* Read and validate a safetensors file; false with "path: problem" in err. */
bool st_open(st_file *f, const char *path, char *err, size_t errlen);
void st_close(st_file *f);

/* Entry by name, or NULL. */
const st_entry *st_find(const st_file *f, const char *name);

/* Pointer to an entry's bytes. */
const void *st_data(const st_file *f, const st_entry *e);

/* Number of elements of an entry. */
size_t st_numel(const st_entry *e);

/* A __metadata__ string value, or NULL. */
const char *st_meta(const st_file *f, const char *key);

/* One tensor to write. */
typedef struct {
    const char *name;
    const char *dtype; /* "F32", "I32" */
    int ndim;
    long shape[8];
    const void *data;
    size_t bytes;
} st_tensor;

/* Write tensors (sorted by name in the data section) and string metadata
 * (meta_kv: key, value, key, value, ...; n_meta pairs) to path, then fsync.
 * false with "path: problem" in err. */
bool st_write(const char *path, const st_tensor *tensors, int n, const char *const *meta_kv,
              int n_meta, char *err, size_t errlen);

#endif
