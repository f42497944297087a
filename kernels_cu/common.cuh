/* Shared definitions of the bertrain CUDA kernels (kernels_cl/common.cl's
 * twin). Every kernel file (kernels_cu/NAME.cu) includes this header; nvcc
 * compiles each file on its own, and backends/cuda/ launches the kernels
 * (declared in kernels.cuh).
 *
 * Conventions, shared with the OpenCL kernels in kernels_cl/:
 *  - a tensor argument is a device pointer: the host passes a bt_ptr's
 *    buffer plus its byte offset (OpenCL passes the buffer and the offset as
 *    two arguments; the arithmetic is the same);
 *  - every launch is 1-D with blocks of BT_WG threads, the grid rounded up to
 *    whole blocks (extra threads return early);
 *  - no atomics: each output element has one owner, and reductions use fixed
 *    trees whose shape depends only on BT_WG, so the same device gives the
 *    same bits on every run;
 *  - fp32 only; nvcc compiles with --fmad=false (no a*b+c contraction into
 *    fma, as OpenCL's FP_CONTRACT OFF) and IEEE division and sqrt (nvcc's
 *    default -prec-div=true -prec-sqrt=true), so the elementwise ops round
 *    exactly as the CPU reference backend does. */
#ifndef BT_KERNELS_CU_COMMON_CUH
#define BT_KERNELS_CU_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

/* The block size of every kernel (OpenCL: -DBT_WG=256, the work-group size). */
#define BT_WG 256
/* Elements per block of sum_partial / sumsq_partial (as CPU_REDUCE_CHUNK). */
#define BT_REDUCE_CHUNK 4096
/* Rows per chunk of the two-pass column reductions (bias_grad, layernorm_bwd's
 * dgamma and dbeta, embed_bwd's dwtt). */
#define BT_COL_ROWS 64
/* 1/sqrt(2) rounded to float (OpenCL's M_SQRT1_2_F, the CPU's (float)M_SQRT1_2). */
#define BT_SQRT1_2_F 0.70710678118654752440f

/* OpenCL's get_global_id(0) / get_group_id(0) / get_local_id(0). */
__device__ inline size_t global_id() { return (size_t)blockIdx.x * BT_WG + threadIdx.x; }
__device__ inline int group_id() { return (int)blockIdx.x; }
__device__ inline int local_id() { return (int)threadIdx.x; }

/* Sum of v over the block by a fixed tree in red[BT_WG]; every thread gets
 * the total. Must be reached by all threads. */
__device__ inline float wg_sum(float v, float *red) {
    const int lid = local_id();
    red[lid] = v;
    __syncthreads();
    for (int s = BT_WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        __syncthreads();
    }
    const float total = red[0];
    __syncthreads(); /* red may be reused right away */
    return total;
}

/* Maximum of v over the block (NaN-ignoring as `a > b`); every thread gets
 * it. */
__device__ inline float wg_max(float v, float *red) {
    const int lid = local_id();
    red[lid] = v;
    __syncthreads();
    for (int s = BT_WG / 2; s > 0; s >>= 1) {
        if (lid < s && red[lid + s] > red[lid]) red[lid] = red[lid + s];
        __syncthreads();
    }
    const float m = red[0];
    __syncthreads();
    return m;
}

/* The exact-erf GELU and its derivative, shared by gelu_fwd/bwd and the
 * fused kernels so that both round alike. */
__device__ inline float gelu_value(float x) { return 0.5f * x * (1.0f + erff(x * BT_SQRT1_2_F)); }
__device__ inline float gelu_grad_value(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * BT_SQRT1_2_F));
    const float pdf = 0.3989422804014327f * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

/* One row of LayerNorm by the whole block (every thread must call it): out =
 * (x - mean) * rstd * gamma + beta, thread l owning columns l, l + BT_WG,
 * ...; mean and variance by fixed trees; returns rstd and sets *mean.
 * Shared by layernorm_fwd and residual_layernorm_fwd (layernorm_row in
 * kernels_cl/common.cl). */
__device__ inline float layernorm_row(float *out, const float *x, const float *gamma,
                                      const float *beta, int cols, float eps, float *red,
                                      float *mean) {
    const int lid = local_id();
    float s = 0.0f;
    for (int c = lid; c < cols; c += BT_WG) s += x[c];
    const float m = wg_sum(s, red) / cols;
    float v = 0.0f;
    for (int c = lid; c < cols; c += BT_WG) v += (x[c] - m) * (x[c] - m);
    const float rs = 1.0f / sqrtf(wg_sum(v, red) / cols + eps);
    for (int c = lid; c < cols; c += BT_WG) out[c] = (x[c] - m) * rs * gamma[c] + beta[c];
    *mean = m;
    return rs;
}

/* One row of the masked softmax by the whole block: p[j] = softmax_j(scale
 * s[j]) over keys with km[j] != 0 (masked keys 0, no key: all 0), thread l
 * owning keys l, l + BT_WG, ... (p may be s). Shared by softmax_fwd and
 * softmax_dropout_fwd. */
__device__ inline void softmax_row(float *p, const float *s, const int *km, int T, float scale,
                                   float *red) {
    const int lid = local_id();
    float mx = -INFINITY;
    for (int j = lid; j < T; j += BT_WG)
        if (km[j] && scale * s[j] > mx) mx = scale * s[j];
    mx = wg_max(mx, red);
    float sum = 0.0f;
    for (int j = lid; j < T; j += BT_WG) {
        const float e = km[j] ? expf(scale * s[j] - mx) : 0.0f;
        p[j] = e;
        sum += e;
    }
    sum = wg_sum(sum, red);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int j = lid; j < T; j += BT_WG) p[j] *= inv;
}

#endif
