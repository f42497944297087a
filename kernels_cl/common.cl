/* Shared definitions of the bertrain OpenCL kernels (OpenCL C 1.2).
 *
 * The host concatenates every kernels_cl/ file into one program (this file
 * first) and builds it with -DBT_WG=<work-group size> (256, or the largest
 * power of two the device allows) and -DBT_REDUCE_CHUNK=4096.
 *
 * Conventions, shared with the CUDA kernels in kernels_cu/:
 *  - every tensor argument is (pointer, ulong offset in elements): the host
 *    passes a bt_ptr's buffer and offset, never a sub-buffer;
 *  - every launch is 1-D with work-groups of BT_WG work-items, the global size
 *    rounded up to a multiple of BT_WG (extra work-items return early);
 *  - no atomics: each output element has one owner, and reductions use fixed
 *    trees whose shape depends only on BT_WG, so the same device gives the
 *    same bits on every run;
 *  - fp32 (fp64 only where a device has it: LAMB's trust ratios in optim.cl);
 *    no a*b+c contraction into fma, so the
 *    elementwise ops round exactly as the CPU reference backend does. */
#pragma OPENCL FP_CONTRACT OFF

#ifndef BT_WG
#define BT_WG 256
#endif
#ifndef BT_REDUCE_CHUNK
#define BT_REDUCE_CHUNK 4096
#endif
/* Rows per chunk of the two-pass column reductions (bias_grad, layernorm_bwd's
 * dgamma and dbeta, embed_bwd's dwtt). */
#define BT_COL_ROWS 64

/* Sum of v over the work-group by a fixed tree in red[BT_WG]; every
 * work-item gets the total. Must be reached by all work-items. */
float wg_sum(float v, __local float *red) {
    const int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BT_WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = red[0];
    barrier(CLK_LOCAL_MEM_FENCE); /* red may be reused right away */
    return total;
}

/* Maximum of v over the work-group (NaN-ignoring as `a > b`); every work-item
 * gets it. */
float wg_max(float v, __local float *red) {
    const int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BT_WG / 2; s > 0; s >>= 1) {
        if (lid < s && red[lid + s] > red[lid]) red[lid] = red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float m = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}

/* The exact-erf GELU and its derivative, shared by gelu_fwd/bwd and the
 * fused kernels so that both round alike. */
float gelu_value(float x) { return 0.5f * x * (1.0f + erf(x * M_SQRT1_2_F)); }
float gelu_grad_value(float x) {
    const float cdf = 0.5f * (1.0f + erf(x * M_SQRT1_2_F));
    const float pdf = 0.3989422804014327f * exp(-0.5f * x * x);
    return cdf + x * pdf;
}

/* One row of LayerNorm by the whole work-group (every work-item must call
 * it): out = (x - mean) * rstd * gamma + beta, work-item l owning columns l,
 * l + BT_WG, ...; mean and variance by fixed trees; returns rstd and sets
 * *mean. Shared by layernorm_fwd and residual_layernorm_fwd. */
float layernorm_row(__global float *out, __global const float *x, __global const float *gamma,
                    __global const float *beta, int cols, float eps, __local float *red,
                    float *mean) {
    const int lid = get_local_id(0);
    float s = 0.0f;
    for (int c = lid; c < cols; c += BT_WG) s += x[c];
    const float m = wg_sum(s, red) / cols;
    float v = 0.0f;
    for (int c = lid; c < cols; c += BT_WG) v += (x[c] - m) * (x[c] - m);
    const float rs = 1.0f / sqrt(wg_sum(v, red) / cols + eps);
    for (int c = lid; c < cols; c += BT_WG) out[c] = (x[c] - m) * rs * gamma[c] + beta[c];
    *mean = m;
    return rs;
}

/* One row of the masked softmax by the whole work-group: p[j] =
 * softmax_j(scale * s[j]) over keys with km[j] != 0 (masked keys 0, no key:
 * all 0), work-item l owning keys l, l + BT_WG, ... (p may be s). Shared by
 * softmax_fwd and softmax_dropout_fwd. */
void softmax_row(__global float *p, __global const float *s, __global const int *km, int T,
                 float scale, __local float *red) {
    const int lid = get_local_id(0);
    float mx = -INFINITY;
    for (int j = lid; j < T; j += BT_WG)
        if (km[j] && scale * s[j] > mx) mx = scale * s[j];
    mx = wg_max(mx, red);
    float sum = 0.0f;
    for (int j = lid; j < T; j += BT_WG) {
        const float e = km[j] ? exp(scale * s[j] - mx) : 0.0f;
        p[j] = e;
        sum += e;
    }
    sum = wg_sum(sum, red);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int j = lid; j < T; j += BT_WG) p[j] *= inv;
}
