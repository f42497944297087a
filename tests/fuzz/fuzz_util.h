/* Shared by the fuzz targets: each target is one LLVMFuzzerTestOneInput,
 * linked either with libFuzzer (scripts/fuzz.sh) or with replay_main.c, which
 * runs it over stored inputs (the seed corpora and every crash found) in
 * make check. */
#ifndef BT_FUZZ_UTIL_H
#define BT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A private scratch directory for this process (made once). */
const char *fuzz_dir(void);

/* Write data to fuzz_dir()/name and return the path (static buffer). */
const char *fuzz_file(const char *name, const uint8_t *data, size_t size);

#endif
