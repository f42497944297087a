/* Sample ranges a run must not train on: the batches of the steps the
 * divergence guard rejected before it rolled the run back. The data cursor
 * passes over them, so a rolled-back (or resumed) run does not meet them again;
 * they are saved in state.json (data.skipped_samples). */
#ifndef BT_SAMPLE_SKIPS_H
#define BT_SAMPLE_SKIPS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t from, to; /* run positions [from, to) */
} sample_range;

typedef struct {
    sample_range *r;
    int n, cap;
} sample_skips;

/* Add [from, to); false when out of memory. */
bool skips_add(sample_skips *s, uint64_t from, uint64_t to);

/* The first run position at or after cursor that no range covers. */
uint64_t skips_next(const sample_skips *s, uint64_t cursor);

/* "[a, b), [c, d)" into out (size n), for a log line. */
void skips_format(const sample_skips *s, uint64_t min_from, char *out, size_t n);

/* The ranges as a JSON array of [from, to] pairs. */
cJSON *skips_to_json(const sample_skips *s);

/* Replace s by the ranges of a JSON array of [from, to] pairs (NULL: none);
 * false when the array is malformed or memory runs out. */
bool skips_from_json(sample_skips *s, const cJSON *arr);

/* Every rank takes rank 0's ranges. */
void skips_broadcast(sample_skips *s);

void skips_free(sample_skips *s);

#endif
