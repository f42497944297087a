/* Internals shared by the CPU reference backend's files. */
#ifndef BT_CPU_INTERNAL_H
#define BT_CPU_INTERNAL_H

#include "cpu_backend.h"

#include "../common/counting.h"
#include "../common/staged_gemm.h"

#include "../philox.h"

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

/* Exact-erf GELU and its derivative, shared by gelu_fwd/bwd and the fused
 * ops so that both round alike. */
static inline float cpu_gelu(float x) { return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)); }
static inline float cpu_gelu_grad(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * (float)M_SQRT1_2));
    const float pdf = 0.3989422804014327f * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

/* LayerNorm of one row: out = (x - mean) * rstd * gamma + beta, mean and
 * variance in double; the mean and rstd the op saves go to *mean, *rstd.
 * Shared by layernorm_fwd and residual_layernorm_fwd. */
static inline void cpu_layernorm_row(float *out, const float *x, const float *gamma,
                                     const float *beta, int cols, float eps, float *mean,
                                     float *rstd) {
    double s = 0.0;
    for (int c = 0; c < cols; c++) s += x[c];
    double mu = s / cols, v = 0.0;
    for (int c = 0; c < cols; c++) v += ((double)x[c] - mu) * ((double)x[c] - mu);
    const float m = (float)mu, rs = (float)(1.0 / sqrt(v / cols + eps));
    for (int c = 0; c < cols; c++) out[c] = (x[c] - m) * rs * gamma[c] + beta[c];
    *mean = m;
    *rstd = rs;
}

/* The masked softmax of one row: p[j] = softmax_j(scale * s[j]) over keys
 * with km[j] != 0 (masked keys 0; no key: all 0); p may be s. Shared by
 * softmax_fwd and softmax_dropout_fwd. */
static inline void cpu_softmax_row(float *p, const float *s, const int32_t *km, int T,
                                   float scale) {
    float mx = -INFINITY;
    for (int j = 0; j < T; j++)
        if (km[j] && scale * s[j] > mx) mx = scale * s[j];
    double sum = 0.0;
    for (int j = 0; j < T; j++) {
        const float e = km[j] ? expf(scale * s[j] - mx) : 0.0f;
        p[j] = e;
        sum += e;
    }
    const float inv = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int j = 0; j < T; j++) p[j] *= inv;
}

/* Dropout's keep decisions along a run of consecutive elements (dropout's
 * stream: one Philox block per four elements of a sample), drawing each
 * block once and dividing only at the start of the run. */
typedef struct {
    bt_rng_key key;
    uint32_t first_sample, thr;
    size_t per_sample;
    size_t s, e;  /* the sample and element of the next decision */
    bool drawn;   /* r holds the block of (s, e) */
    uint32_t r[4];
} cpu_drop_stream;

/* A stream for dropout with probability p over samples of per_sample
 * elements, positioned at element i (counted over all samples). */
static inline cpu_drop_stream cpu_drop_stream_at(bt_rng_key key, uint32_t first_sample,
                                                 size_t per_sample, float p, size_t i) {
    cpu_drop_stream d = {key,   first_sample, philox_drop_threshold(p), per_sample,
                         i / per_sample, i % per_sample, false, {0, 0, 0, 0}};
    return d;
}

/* Whether the next element is kept; the stream moves on by one. */
static inline bool cpu_drop_next(cpu_drop_stream *d) {
    if (!d->drawn || (d->e & 3) == 0) {
        uint32_t r[4] = {(uint32_t)(d->e >> 2), d->first_sample + (uint32_t)d->s,
                         (uint32_t)d->key.stream, (uint32_t)(d->key.stream >> 32)};
        philox4x32(r, (uint32_t)d->key.seed, (uint32_t)(d->key.seed >> 32));
        memcpy(d->r, r, sizeof r);
        d->drawn = true;
    }
    const bool keep = d->r[d->e & 3] >= d->thr;
    if (++d->e == d->per_sample) { /* the next sample starts a new block */
        d->e = 0;
        d->s++;
        d->drawn = false;
    }
    return keep;
}

/* Fill the fused ops (cpu_fused.c) into a table. */
void cpu_fill_fused_ops(bt_backend *be);

/* Fill the nn ops (cpu_nn.c) into a table. */
void cpu_fill_nn_ops(bt_backend *be);

/* Set the reduction slots (cpu_reduce.c). */
void cpu_fill_reduce_ops(bt_backend *be);

/* Fill the optimizer ops (cpu_optim.c) into a table. */
void cpu_fill_optim_ops(bt_backend *be);

#endif
