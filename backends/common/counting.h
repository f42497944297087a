/* What every backend counts for the profiler (backend.h's bt_counters and
 * marks): memory in use and its peak, and wall-clock marks for a backend
 * whose work is synchronous (the CPU) or that has no device timestamps. */
#ifndef BT_COUNTING_H
#define BT_COUNTING_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An allocation of `bytes` and its release. */
static inline void bt_count_alloc(bt_counters *c, size_t bytes) {
    c->mem_in_use += bytes;
    if (c->mem_in_use > c->mem_peak) c->mem_peak = c->mem_in_use;
}
static inline void bt_count_free(bt_counters *c, size_t bytes) { c->mem_in_use -= bytes; }

/* Marks that read the wall clock (monotonic seconds). */
typedef struct {
    double *t;
    int n, cap;
} bt_wall_marks;

/* Add a mark at the time now; its number. Exits with one line naming
 * `backend` when out of host memory. */
int bt_wall_mark(bt_wall_marks *m, const char *backend);

/* Seconds from mark a to mark b (0 for a mark that does not exist). */
double bt_wall_mark_seconds(const bt_wall_marks *m, int a, int b);

void bt_wall_marks_free(bt_wall_marks *m);

#ifdef __cplusplus
}
#endif

#endif
