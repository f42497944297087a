/* The per-op profiler: a backend that wraps another and, between
 * bt_profile_step_begin and _end, times every op on the device's own clock
 * (marks: CUDA events, OpenCL profiling-queue markers, the wall clock on the
 * CPU) and counts what each step costs (op calls, kernel launches, blocking
 * reads, waits, uploads, device memory peak). Outside a step it only
 * forwards. Layers above use it as any backend; nothing in it knows which
 * backend it wraps. */
#ifndef BT_PROFILE_H
#define BT_PROFILE_H

#include "backend.h"

#include <stdio.h>

typedef struct bt_profiler bt_profiler;

/* A backend whose ops are inner's, profiled. inner should have been created
 * with bt_backend_options.profile (else every mark waits for the device).
 * Destroying the wrapper destroys inner. NULL when out of host memory (inner
 * is left alone). */
bt_backend *bt_profile_wrap(bt_backend *inner);

/* The profiler behind a wrapping backend; NULL for any other backend. */
bt_profiler *bt_profiler_of(const bt_backend *be);

/* Start recording one step (forget the marks of the last). */
void bt_profile_step_begin(bt_profiler *p);

/* End the step: wait for the device, turn its marks into per-op times and
 * add the step's counts to the totals. */
void bt_profile_step_end(bt_profiler *p);

/* What the profiled steps cost on average, per step. */
typedef struct {
    int steps;
    double step_s;      /* wall time of a step */
    double op_calls;    /* ops issued through the table */
    double launches;    /* kernels and BLAS calls (0 on the CPU: it launches nothing) */
    double host_reads;  /* blocking device-to-host reads */
    double host_syncs;  /* waits for the device */
    double host_writes; /* blocking host-to-device copies */
    size_t mem_peak;    /* device memory high-water mark, bytes, since creation */
    long most_reads, most_syncs; /* blocking reads and waits in the worst step */
} bt_profile_summary;

/* The per-step averages of the steps profiled so far. */
bt_profile_summary bt_profile_summarize(const bt_profiler *p);

/* The ops of the last step recorded, in the order issued: how many, and op
 * i's name and the numbers of the wrapped backend's marks before and after
 * it (bench --project matches them with a device trace's marks). */
int bt_profile_step_len(const bt_profiler *p);
void bt_profile_step_op(const bt_profiler *p, int i, const char **name, int *mark_before,
                        int *mark_after);

/* Replay each GEMM shape of the profiled steps alone on the wrapped
 * backend (fresh seeded operands, the best of reps calls), so the reports
 * add the SGEMM ceiling at the model's own shapes. false, with a line on
 * stderr, when device memory runs out. */
bool bt_profile_gemm_alone(bt_profiler *p, int reps);

/* The profile as a table: per op calls, ms and share of the step, GFLOP/s
 * (GEMMs) or GB/s (the bytes the op must touch), then the per-step counts. */
void bt_profile_print(const bt_profiler *p, FILE *out);

/* The same as a cJSON object (for scripts: bench --json, the train profile
 * file); the caller frees it with cJSON_Delete. NULL when out of memory.
 * Returned as void * so that this header needs no cJSON. */
void *bt_profile_to_json(const bt_profiler *p);

#endif
