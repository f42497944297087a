/* Fused kernels: bias + GELU, bias + dropout + residual, residual +
 * LayerNorm, softmax + dropout (kernels_cl/fused.cl's twin). Each computes
 * the expressions of the kernels it replaces, in their order and with their
 * reduction trees, so it gives their bits while reading and writing the
 * activations once. Dropout's keep decision is drop_keep (philox.cuh). */
#include "common.cuh"
#include "kernels.cuh"
#include "philox.cuh"

#include <math.h>

/* y[r, c] += bias[c]; out[r, c] = gelu(y[r, c])          y, out: (rows, cols)
 * Geometry: one thread per element; grid: rows * cols threads. */
__global__ void bias_gelu_fwd(float *out, float *y, const float *bias, int rows, int cols) {
    const size_t i = global_id();
    if (i >= (size_t)rows * (size_t)cols) return;
    const float v = y[i] + bias[i % (size_t)cols];
    y[i] = v;
    out[i] = gelu_value(v);
}

/* dx = dout * gelu'(x) for rows [g chunk_rows, (g+1) chunk_rows) of column
 * c, and their column sum: partial[g cols + c] = sum (accumulate = 0: as
 * bias_grad_partial, then bias_grad over the partials), or += sum
 * (accumulate = 1, one chunk: as bias_grad's one pass). dx may alias dout.
 * Geometry: one thread per (chunk, column), columns fastest;
 * grid: chunks * cols threads. */
__global__ void bias_gelu_bwd(float *partial, float *dx, const float *dout, const float *x,
                              int rows, int cols, int chunk_rows, int accumulate) {
    const size_t i = global_id(), c = i % (size_t)cols, g = i / (size_t)cols;
    const size_t r0 = g * (size_t)chunk_rows;
    if (r0 >= (size_t)rows) return;
    const size_t r1 = r0 + (size_t)chunk_rows < (size_t)rows ? r0 + (size_t)chunk_rows : (size_t)rows;
    float acc = 0.0f;
    for (size_t r = r0; r < r1; r++) {
        const size_t k = r * cols + c;
        const float v = dout[k] * gelu_grad_value(x[k]);
        dx[k] = v;
        acc += v;
    }
    if (accumulate)
        partial[c] += acc;
    else
        partial[g * cols + c] = acc;
}

/* The join of a residual branch: resid + dropout(y + bias) at element i. */
__device__ inline float join_value(const float *y, const float *bias, const float *resid,
                                   size_t i, int cols, size_t per_sample, uint32_t first_sample,
                                   uint32_t thr, float keep_scale, uint32_t seed_lo,
                                   uint32_t seed_hi, uint32_t stream_lo, uint32_t stream_hi) {
    float v = y[i] + bias[i % (size_t)cols];
    if (thr)
        v = drop_keep(i, per_sample, first_sample, thr, seed_lo, seed_hi, stream_lo, stream_hi)
                ? v * keep_scale : 0.0f;
    return v + resid[i];
}

/* out = resid + dropout(y + bias)                 y, resid, out: (rows, cols)
 * thr = 0: no dropout. Geometry: one thread per element; grid: rows * cols
 * threads. */
__global__ void bias_dropout_add(float *out, const float *y, const float *bias,
                                 const float *resid, int rows, int cols, size_t per_sample,
                                 uint32_t first_sample, uint32_t thr, float keep_scale,
                                 uint32_t seed_lo, uint32_t seed_hi, uint32_t stream_lo,
                                 uint32_t stream_hi) {
    const size_t i = global_id();
    if (i >= (size_t)rows * (size_t)cols) return;
    out[i] = join_value(y, bias, resid, i, cols, per_sample, first_sample, thr, keep_scale,
                        seed_lo, seed_hi, stream_lo, stream_hi);
}

/* sum = resid + dropout(y + bias), then out = LayerNorm(sum) with mean and
 * rstd saved, layernorm_fwd's arithmetic. sum may alias resid.
 * Geometry: as layernorm_fwd: one block of BT_WG per row, thread l owns
 * columns l, l + BT_WG, ...; grid: rows blocks. */
__global__ void __launch_bounds__(BT_WG)
residual_layernorm_fwd(float *sum, float *out, float *mean, float *rstd, const float *y,
                       const float *bias, const float *resid, const float *gamma,
                       const float *beta, int cols, float eps, size_t per_sample,
                       uint32_t first_sample, uint32_t thr, float keep_scale, uint32_t seed_lo,
                       uint32_t seed_hi, uint32_t stream_lo, uint32_t stream_hi) {
    __shared__ float red[BT_WG];
    const int r = group_id(), lid = local_id();
    const size_t row = (size_t)r * cols;
    float *x = sum + row, *o = out + row;
    for (int c = lid; c < cols; c += BT_WG) /* each thread reads back only its own */
        x[c] = join_value(y, bias, resid, row + c, cols, per_sample, first_sample, thr,
                          keep_scale, seed_lo, seed_hi, stream_lo, stream_hi);
    float m;
    const float rs = layernorm_row(o, x, gamma, beta, cols, eps, red, &m);
    if (lid == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* probs = softmax_fwd(scores) (in place allowed), dropped = dropout(probs)
 * with per_sample = H T T (softmax_fwd's arithmetic, then dropout's).
 * Geometry: as softmax_fwd: one block of BT_WG per row of T keys;
 * grid: rows blocks. */
__global__ void __launch_bounds__(BT_WG)
softmax_dropout_fwd(float *dropped, float *probs, const float *scores, const int *key_mask,
                    int HT, int T, float scale, uint32_t first_sample, uint32_t thr,
                    float keep_scale, uint32_t seed_lo, uint32_t seed_hi, uint32_t stream_lo,
                    uint32_t stream_hi) {
    __shared__ float red[BT_WG];
    const int r = group_id(), lid = local_id();
    const size_t row = (size_t)r * T, per_sample = (size_t)HT * T;
    const float *s = scores + row;
    float *p = probs + row, *pd = dropped + row;
    softmax_row(p, s, key_mask + (size_t)(r / HT) * T, T, scale, red);
    for (int j = lid; j < T; j += BT_WG) /* the keys this thread wrote */
        pd[j] = drop_keep(row + j, per_sample, first_sample, thr, seed_lo, seed_hi, stream_lo,
                          stream_hi) ? p[j] * keep_scale : 0.0f;
}

/* dscores = softmax_bwd(dropout(dprobs), probs), the dropout with
 * per_sample = H T T; in place allowed (each thread rewrites the keys it
 * read). Geometry: as softmax_bwd; grid: rows blocks. */
__global__ void __launch_bounds__(BT_WG)
dropout_softmax_bwd(float *dscores, const float *dprobs, const float *probs, int HT, int T,
                    float scale, uint32_t first_sample, uint32_t thr, float keep_scale,
                    uint32_t seed_lo, uint32_t seed_hi, uint32_t stream_lo, uint32_t stream_hi) {
    __shared__ float red[BT_WG];
    const int r = group_id(), lid = local_id();
    const size_t row = (size_t)r * T, per_sample = (size_t)HT * T;
    const float *dp = dprobs + row, *p = probs + row;
    float *ds = dscores + row;
    float dot = 0.0f;
    for (int j = lid; j < T; j += BT_WG) {
        const float g = drop_keep(row + j, per_sample, first_sample, thr, seed_lo, seed_hi,
                                  stream_lo, stream_hi) ? dp[j] * keep_scale : 0.0f;
        ds[j] = g;
        dot += g * p[j];
    }
    dot = wg_sum(dot, red);
    for (int j = lid; j < T; j += BT_WG) ds[j] = scale * p[j] * (ds[j] - dot);
}
