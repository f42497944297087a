/* Internals shared by the CPU reference backend's files. */
#ifndef BT_CPU_INTERNAL_H
#define BT_CPU_INTERNAL_H

#include "cpu_backend.h"

#include "../common/counting.h"
#include "../common/staged_gemm.h"

#include <stdbool.h>

struct bt_buffer {
    void *data;
    size_t bytes;
};

/* The CPU backend's state. */
typedef struct {
    int threads;
    bt_stage stage[2]; /* gemm16: the rounded copies of A and B */
    bt_counters count; /* launches stay 0: the CPU has none (the profiler counts op calls) */
    bt_wall_marks marks;
    double *deferred;  /* values of the reductions queued since the last fetch */
    int n_deferred, cap_deferred;
    float *lamb_u;     /* lamb_multi: one span's update direction, grown as needed */
    size_t lamb_u_cap;
} cpu_ctx;

/* Host address of a device address. */
static inline float *cpu_f32(bt_ptr p) { return (float *)((char *)p.buf->data + p.off); }
static inline int32_t *cpu_i32(bt_ptr p) { return (int32_t *)((char *)p.buf->data + p.off); }
static inline uint16_t *cpu_u16(bt_ptr p) { return (uint16_t *)((char *)p.buf->data + p.off); }

/* Fixed reduction chunk: partial sums are formed per chunk of this many
 * elements and then added in chunk order, so the result does not depend on the
 * thread count. */
#define CPU_REDUCE_CHUNK 4096

/* Columns per task in column-parallel gradient reductions. */
#define CPU_COL_BLOCK 32

/* Deterministic sum of x[0..n) (or of its squares): per-chunk double
 * partials of CPU_REDUCE_CHUNK elements, added in chunk order. */
double cpu_reduce_chunks(const float *x, size_t n, bool squares);

/* Fill the nn ops (cpu_nn.c) into a table. */
void cpu_fill_nn_ops(bt_backend *be);

/* Set the reduction slots (cpu_reduce.c). */
void cpu_fill_reduce_ops(bt_backend *be);

/* Fill the optimizer ops (cpu_optim.c) into a table. */
void cpu_fill_optim_ops(bt_backend *be);

#endif
