/* `bertrain bench --project CARD[,CARD...]`: the profiled steps' device
 * work, as the device counted it in its trace, projected onto GPUs
 * (src/util/projection.h; docs/PERFORMANCE.md, "Projection"). */
#ifndef BT_CLI_PROJECT_H
#define BT_CLI_PROJECT_H

#include "backends/profile.h"
#include "util/projection.h"

#include <stdbool.h>
#include <stdio.h>

#define BENCH_MAX_CARDS 4

/* A projection being gathered. */
typedef struct {
    proj_card cards[BENCH_MAX_CARDS];
    int n_cards;
    const char *counts; /* the trace file */
    double t_start;     /* when the bench began: an older trace is not this run's */
    FILE *f;
    proj_step step;
    bool failed;
    char err[512];
} bench_projection;

/* The cards of a comma list and the trace file (counts, else
 * $CUDA_EMU_TRACE); false after one line on stderr (no card, or no trace
 * named: nothing will count the work). */
bool project_setup(bench_projection *pr, const char *cards, const char *counts);

/* After profiled step: add the trace's lines of the step, matched by marks to
 * the profiler's ops. */
void project_after_step(bench_projection *pr, const bt_profiler *p);

/* The projection on out (host round trips from the profile), or one line on
 * stderr saying which counts are missing; 0 or 1. Frees what pr holds. */
int project_report(bench_projection *pr, const bt_profiler *p, FILE *out);

#endif
