/* Internals shared by the CPU reference backend's files. */
#ifndef BT_CPU_INTERNAL_H
#define BT_CPU_INTERNAL_H

#include "cpu_backend.h"
#include "cpu_math.h"

#include "../common/counting.h"
#include "../common/half.h"
#include "../common/partials.h"
#include "../common/staged_gemm.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct bt_buffer {
    void *data;
    size_t bytes;
};

/* The CPU backend's state. */
typedef struct {
    char threads_why[64]; /* where the thread count comes from (the device's name says) */
    int threads_max;              /* the most threads it uses (its block widths, its name) */
    int threads_now;              /* the count in use now (cpu_govern_threads) */
    double gov_t, gov_changed_t;  /* its last look and last change (monotonic s; 0: none) */
    double gov_waited;            /* the threads' run-queue wait at its last look, s */
    double gov_idle;              /* its CPUs' idle time at its last look, s (< 0: unknown) */
    double gov_own;               /* this process's CPU time at its last look, s */
    bool gov_started;             /* its first window, from the backend's creation, is over */
    double gov_probe_s;           /* how long it waits before it tries one thread more */
    bool gov_last_up;             /* its last change added a thread (a try) */
    bt_stage stage[3]; /* gemm16: the rounded copies of A and B, a 16-bit C widened */
    bt_counters count; /* launches stay 0: the CPU has none (the profiler counts op calls) */
    long downloads;    /* download_async's last ticket (the copies are done at once) */
    bt_wall_marks marks;
    double *deferred;  /* values of the reductions queued since the last fetch */
    int n_deferred;
    size_t cap_deferred;
    int gate;          /* the last step_gate's index among the deferred (-1: none);
                        * its gradients' scale is the next value */
    /* grow-only host scratch, so that no op allocates in the step */
    bt_partials lamb_u;   /* lamb_multi: one span's update direction */
    bt_partials col_part; /* cpu_column_sums: the chunks' partial sums */
    bt_partials gemm_part; /* cpu_gemm: the products of k parts after the first */
    bt_partials attn_part; /* attention_fwd/bwd: each thread's rows of one head */
    bt_partials wide16;    /* cpu_widen16: a 16-bit input widened to fp32 */
    bt_partials ln_dx;     /* layernorm_bwd: an fp32 dx before a 16-bit dx */
    bt_partials xent_d;    /* xent_fwd_bwd: the fp32 gradient before its 16-bit copy */
    double *chunk_part;    /* cpu_reduce_chunks: the chunks' double partials */
    size_t cap_chunk_part;
} cpu_ctx;

/* Host address of a device address. */
static inline float *cpu_f32(bt_ptr p) { return (float *)((char *)p.buf->data + p.off); }
static inline int32_t *cpu_i32(bt_ptr p) { return (int32_t *)((char *)p.buf->data + p.off); }
static inline uint16_t *cpu_u16(bt_ptr p) { return (uint16_t *)((char *)p.buf->data + p.off); }

/* Fixed reduction chunk: partial sums are formed per chunk of this many
 * elements and then added in chunk order, so the result does not depend on the
 * thread count. */
#define CPU_REDUCE_CHUNK 4096

/* Columns per task in the column-parallel scatters (embed_bwd, scatter_rows):
 * one block a thread, in multiples of 16. Each task walks every row in order,
 * so the bits never depend on the block; wide blocks read each scattered row
 * in one piece. */
static inline int cpu_col_block(int cols, int threads) {
    const int per = (cols + threads - 1) / (threads > 0 ? threads : 1);
    return per < 16 ? 16 : (per + 15) / 16 * 16;
}

/* Rows per chunk in two-pass column sums. */
#define CPU_ROW_CHUNK 64

/* Column sums of the rows x cols matrix D, two-pass: float partials per
 * fixed chunk of CPU_ROW_CHUNK rows, then the chunks added in order in double
 * (the same bits for any thread count): sum[c] += sum_r D[r][c], and where
 * sum_xhat is given, sum_xhat[c] += sum_r D[r][c] (X[r][c] - mean[r]) rstd[r]
 * (LayerNorm's dgamma). */
/* The n 16-bit values of dtype dt at x widened to floats in ctx's grow-only
 * scratch (wide16): for an op that takes a 16-bit input (the stash's copy)
 * and computes in fp32, with the bits of the same op given the fp32 values. */
const float *cpu_widen16(cpu_ctx *ctx, bt_ptr x, bt_dtype dt, size_t n);

/* The n floats at x rounded to dt (BT_BF16 or BT_F16) in the same scratch
 * as cpu_widen16: for an op that rounds its input as it reads it, with the
 * bits of round16 then the op. */
const float *cpu_rounded16(cpu_ctx *ctx, bt_ptr x, bt_dtype dt, size_t n);

void cpu_column_sums(cpu_ctx *ctx, float *sum, float *sum_xhat, const float *D, const float *X,
                     const float *mean, const float *rstd, int rows, int cols);

/* Deterministic sum of x[0..n) (or of its squares): per-chunk double
 * partials of CPU_REDUCE_CHUNK elements (in ctx's grow-only scratch), added
 * in chunk order. */
double cpu_reduce_chunks(cpu_ctx *ctx, const float *x, size_t n, bool squares);

/* LayerNorm of one row: out = (x - mean) * rstd * gamma + beta, mean and
 * variance in double; the mean and rstd the op saves go to *mean, *rstd.
 * Shared by layernorm_fwd and residual_layernorm_fwd. */
static inline void cpu_layernorm_row(float *out, const float *x, const float *gamma,
                                     const float *beta, int cols, float eps, float *mean,
                                     float *rstd) {
    const double mu = cpu_lane_sum(x, (size_t)cols) / cols,
                 v = cpu_lane_sq_dev(x, mu, (size_t)cols);
    const float m = (float)mu, rs = (float)(1.0 / sqrt(v / cols + eps));
#pragma omp simd
    for (int c = 0; c < cols; c++) out[c] = (x[c] - m) * rs * gamma[c] + beta[c];
    *mean = m;
    *rstd = rs;
}

/* The bits of the n floats of v in dt (BT_BF16 or BT_F16) into h: cast's
 * arithmetic on one span. */
static inline void cpu_to16_span(uint16_t *h, const uint32_t *v, bt_dtype dt, size_t n) {
    if (dt == BT_BF16) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(v[i]);
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) h[i] = f32_to_f16(v[i]);
    }
}

/* The float bits of the n values h of dt (BT_BF16 or BT_F16) into v: a
 * 16-bit input widened, one span. */
static inline void cpu_from16_span(uint32_t *v, const uint16_t *h, bt_dtype dt, size_t n) {
    if (dt == BT_BF16) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) v[i] = bf16_to_f32(h[i]);
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) v[i] = f16_to_f32(h[i]);
    }
}

/* v (float bits) rounded in place to the nearest values of dt (BT_BF16 or
 * BT_F16): round16's arithmetic on one span. */
static inline void cpu_round16_span(uint32_t *v, bt_dtype dt, size_t n) {
    if (dt == BT_BF16) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) v[i] = bf16_to_f32(f32_to_bf16(v[i]));
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) v[i] = f16_to_f32(f32_to_f16(v[i]));
    }
}

/* One row of bias_add: yr += bias (cols values), rounded to round16
 * (BT_F32: not), its 16-bit copy into y16 where that is not NULL. The row
 * bias_gelu_fwd begins with too. */
static inline void cpu_bias_row(float *restrict yr, const float *bias, int cols, bt_dtype round16,
                                uint16_t *y16) {
#pragma omp simd
    for (int c = 0; c < cols; c++) yr[c] += bias[c];
    if (round16 != BT_F32) cpu_round16_span((uint32_t *)yr, round16, (size_t)cols);
    if (y16) cpu_to16_span(y16, (const uint32_t *)yr, round16, (size_t)cols);
}

/* x rounded to the nearest value of dt (BT_BF16 or BT_F16): round16's
 * arithmetic on one value. */
static inline float cpu_round16_value(float x, bt_dtype dt) {
    uint32_t b;
    memcpy(&b, &x, 4);
    b = dt == BT_BF16 ? bf16_to_f32(f32_to_bf16(b)) : f16_to_f32(f32_to_f16(b));
    memcpy(&x, &b, 4);
    return x;
}

/* The masked softmax of one row: p[j] = softmax_j(scale * s[j]) over keys
 * with km[j] != 0 (masked keys 0; no key: all 0); p may be s. Shared by
 * softmax_fwd and softmax_dropout_fwd. */
static inline void cpu_softmax_row(float *p, const float *s, const int32_t *km, int T,
                                   float scale) {
    const float mx = cpu_max_span(s, scale, km, (size_t)T);
    const double sum = cpu_exp_sum_span(p, s, scale, mx, km, (size_t)T);
    cpu_scale_span(p, sum > 0.0 ? (float)(1.0 / sum) : 0.0f, (size_t)T);
}

/* C = alpha op(A) op(B) + beta C, batched (backend.h's gemm), threaded over
 * a grid of single-threaded BLAS calls fixed by the shapes (cpu_gemm.c). */
void cpu_gemm(bt_backend *be, bool ta, bool tb, int m, int n, int k, float alpha, bt_ptr a,
              int lda, long sa, bt_ptr b, int ldb, long sb, float beta, bt_ptr c, int ldc,
              long sc, int batch);

/* Fill the fused ops (cpu_fused.c) into a table. */
void cpu_fill_fused_ops(bt_backend *be);

/* ---- cpu_threads.c ---- */
/* The default thread count for a process that shares its node's usable CPUs
 * with local_ranks - 1 others, and in why (n bytes) where it comes from
 * ("2 CPUs in the affinity mask"); 0 where OMP_NUM_THREADS decides. */
int cpu_default_threads(int local_ranks, char *why, size_t n);
/* The thread count follows the CPUs the process actually gets: called at
 * the start of the heavy ops, at most once per window it reads how long the
 * process's threads waited to run; above the contended share it drops a
 * thread (down to 1), below it tries one thread more (up to threads_max)
 * after a while. Fork-join threads that the kernel preempts for other processes
 * stall every barrier; the results are the same bits for any count. */
void cpu_govern_threads(cpu_ctx *c);
/* Open the governor's first window at the backend's creation: at its first
 * look it goes by the CPU time other processes took since then (the
 * machine's busy time less this process's), so that a run that starts
 * beside a busy process does not spend its first window at a contended
 * thread count, and one that starts idle does not read its own start-up
 * threads' run-queue waits as contention. */
void cpu_govern_start(cpu_ctx *c);
/* What the governor reads at a look: the time (monotonic s), this process's
 * threads' run-queue wait (s), its CPUs' idle time (s; < 0: unknown) and how
 * many CPUs that sums, and this process's CPU time (s). */
typedef struct {
    double now, waited, idle, own;
    int cpus;
} cpu_gov_sample;
/* The governor's state machine, apart from what it reads (the seam of
 * tests/c/test_cpu_threads.c): open its window at sample s (at_creation:
 * the first window goes by the others' CPU), and decide at the end of a
 * window, returning the thread count it wants (set in c->threads_now). */
void cpu_govern_open(cpu_ctx *c, const cpu_gov_sample *s, bool at_creation);
int cpu_govern_decide(cpu_ctx *c, const cpu_gov_sample *s);

/* The smallest CPU quota (CPUs; 0: none) of the cgroup a /proc/PID/cgroup
 * file names and its parents, under the cgroup file system at root: v2
 * cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us. */
double cpu_cgroup_quota(const char *proc_cgroup, const char *root);

/* Fill in attention_fwd and attention_bwd (cpu_attention.c). */
void cpu_fill_attention_ops(bt_backend *be);

/* Fill the nn ops (cpu_nn.c) into a table. */
void cpu_fill_nn_ops(bt_backend *be);

/* Set the reduction slots and step_gate (cpu_reduce.c). */
void cpu_fill_reduce_ops(bt_backend *be);
/* An optimizer step's gradient scale for `gate` (step_gate's index, or -1:
 * grad_scale as given); *skip: the gate skips the step. */
float cpu_gate_scale(cpu_ctx *c, int gate, float grad_scale, bool *skip);

/* Fill the optimizer ops (cpu_optim.c) into a table. */
void cpu_fill_optim_ops(bt_backend *be);

#endif
