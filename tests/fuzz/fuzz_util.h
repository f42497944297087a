/* Shared by the fuzz targets: each target is one LLVMFuzzerTestOneInput,
 * linked either with libFuzzer (scripts/fuzz.sh) or with replay_main.c, which
 * runs it over stored inputs (the seed corpora and every crash found) in
 * make check. */
#ifndef BT_FUZZ_UTIL_H
#define BT_FUZZ_UTIL_H

#include "model/bert.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A private scratch directory for this process (made once, removed with
 * what is in it when the process exits). */
const char *fuzz_dir(void);

/* Write data to fuzz_dir()/name and return the path (static buffer). */
const char *fuzz_file(const char *name, const uint8_t *data, size_t size);

/* A config input (fuzz_config, fuzz_sizes): up to 8 "key.path=value" lines,
 * a NUL byte, then the JSON, written to a scratch file (path). */
typedef struct {
    char *text;          /* the --set lines, split in place */
    const char *sets[8];
    int n_sets;
    const char *path;    /* the JSON config's file */
} fuzz_config_input;

/* Split data into in; false when out of memory. fuzz_config_free after. */
bool fuzz_config_split(const uint8_t *data, size_t size, fuzz_config_input *in);
void fuzz_config_free(fuzz_config_input *in);

/* The small model fuzz_optim and fuzz_import load into: 1 layer, hidden 8,
 * 2 heads, intermediate 8, 16 tokens, 8 positions. */
void fuzz_small_model(bert_config *mc);

#endif
