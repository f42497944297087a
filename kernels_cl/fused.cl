/* Fused kernels: bias + GELU, bias + dropout + residual, residual +
 * LayerNorm, softmax + dropout. Each computes the expressions of the kernels
 * it replaces, in their order and with their reduction trees, so it gives
 * their bits while reading and writing the activations once. Dropout's keep
 * decision is drop_keep (philox.cl): one Philox block per element here, where
 * dropout shares one between four. */

/* y[r, c] += bias[c]; out[r, c] = gelu(y[r, c])          y, out: (rows, cols)
 * Geometry: one work-item per element; global: rows * cols. */
__kernel void bias_gelu_fwd(__global float *out, ulong out_off, __global float *y, ulong y_off,
                            __global const float *bias, ulong b_off, int rows, int cols) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)rows * (size_t)cols) return;
    const float v = y[y_off + i] + bias[b_off + i % (size_t)cols];
    y[y_off + i] = v;
    out[out_off + i] = gelu_value(v);
}

/* dx = dout * gelu'(x) for rows [g chunk_rows, (g+1) chunk_rows) of column
 * c, and their column sum: partial[g cols + c] = sum (accumulate = 0: as
 * bias_grad_partial, then bias_grad over the partials), or += sum
 * (accumulate = 1, one chunk: as bias_grad's one pass). dx may alias dout.
 * Geometry: one work-item per (chunk, column), columns fastest;
 * global: chunks * cols. */
__kernel void bias_gelu_bwd(__global float *partial, ulong p_off, __global float *dx,
                            ulong dx_off, __global const float *dout, ulong d_off,
                            __global const float *x, ulong x_off, int rows, int cols,
                            int chunk_rows, int accumulate) {
    const size_t i = get_global_id(0), c = i % (size_t)cols, g = i / (size_t)cols;
    const size_t r0 = g * (size_t)chunk_rows;
    if (r0 >= (size_t)rows) return;
    const size_t r1 = min(r0 + (size_t)chunk_rows, (size_t)rows);
    float acc = 0.0f;
    for (size_t r = r0; r < r1; r++) {
        const size_t k = r * cols + c;
        const float v = dout[d_off + k] * gelu_grad_value(x[x_off + k]);
        dx[dx_off + k] = v;
        acc += v;
    }
    if (accumulate)
        partial[p_off + c] += acc;
    else
        partial[p_off + g * cols + c] = acc;
}

/* The join of a residual branch: resid + dropout(y + bias) at element i. */
float join_value(__global const float *y, __global const float *bias,
                 __global const float *resid, size_t i, int cols, ulong per_sample,
                 uint first_sample, uint thr, float keep_scale, uint seed_lo, uint seed_hi,
                 uint stream_lo, uint stream_hi) {
    float v = y[i] + bias[i % (size_t)cols];
    if (thr)
        v = drop_keep(i, per_sample, first_sample, thr, seed_lo, seed_hi, stream_lo, stream_hi)
                ? v * keep_scale : 0.0f;
    return v + resid[i];
}

/* out = resid + dropout(y + bias)                 y, resid, out: (rows, cols)
 * thr = 0: no dropout. Geometry: one work-item per element; global:
 * rows * cols. */
__kernel void bias_dropout_add(__global float *out, ulong out_off, __global const float *y,
                               ulong y_off, __global const float *bias, ulong b_off,
                               __global const float *resid, ulong r_off, int rows, int cols,
                               ulong per_sample, uint first_sample, uint thr, float keep_scale,
                               uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)rows * (size_t)cols) return;
    out[out_off + i] = join_value(y + y_off, bias + b_off, resid + r_off, i, cols, per_sample,
                                  first_sample, thr, keep_scale, seed_lo, seed_hi, stream_lo,
                                  stream_hi);
}

/* sum = resid + dropout(y + bias), then out = LayerNorm(sum) with mean and
 * rstd saved, layernorm_fwd's arithmetic. sum may alias resid.
 * Geometry: as layernorm_fwd: one work-group of BT_WG per row, work-item l
 * owns columns l, l + BT_WG, ...; global: rows * BT_WG. */
__kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
void residual_layernorm_fwd(__global float *sum, ulong s_off, __global float *out, ulong out_off,
                            __global float *mean, ulong mean_off, __global float *rstd,
                            ulong rstd_off, __global const float *y, ulong y_off,
                            __global const float *bias, ulong b_off, __global const float *resid,
                            ulong r_off, __global const float *gamma, ulong g_off,
                            __global const float *beta, ulong be_off, int cols, float eps,
                            ulong per_sample, uint first_sample, uint thr, float keep_scale,
                            uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi) {
    __local float red[BT_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    const size_t row = (size_t)r * cols;
    __global float *x = sum + s_off + row;
    __global float *o = out + out_off + row;
    for (int c = lid; c < cols; c += BT_WG) /* each work-item reads back only its own */
        x[c] = join_value(y + y_off, bias + b_off, resid + r_off, row + c, cols, per_sample,
                          first_sample, thr, keep_scale, seed_lo, seed_hi, stream_lo, stream_hi);
    float m;
    const float rs = layernorm_row(o, x, gamma + g_off, beta + be_off, cols, eps, red, &m);
    if (lid == 0) {
        mean[mean_off + r] = m;
        rstd[rstd_off + r] = rs;
    }
}

/* probs = softmax_fwd(scores) (in place allowed), dropped = dropout(probs)
 * with per_sample = H T T (softmax_fwd's arithmetic, then dropout's).
 * Geometry: as softmax_fwd: one work-group of BT_WG per row of T keys;
 * global: rows * BT_WG. */
__kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
void softmax_dropout_fwd(__global float *dropped, ulong d_off, __global float *probs,
                         ulong p_off, __global const float *scores, ulong s_off,
                         __global const int *key_mask, ulong m_off, int HT, int T, float scale,
                         uint first_sample, uint thr, float keep_scale, uint seed_lo,
                         uint seed_hi, uint stream_lo, uint stream_hi) {
    __local float red[BT_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    const size_t row = (size_t)r * T;
    const ulong per_sample = (ulong)HT * T;
    __global const float *s = scores + s_off + row;
    __global float *p = probs + p_off + row, *pd = dropped + d_off + row;
    softmax_row(p, s, key_mask + m_off + (size_t)(r / HT) * T, T, scale, red);
    for (int j = lid; j < T; j += BT_WG) /* the keys this work-item wrote */
        pd[j] = drop_keep(row + j, per_sample, first_sample, thr, seed_lo, seed_hi, stream_lo,
                          stream_hi) ? p[j] * keep_scale : 0.0f;
}

/* dscores = softmax_bwd(dropout(dprobs), probs), the dropout with
 * per_sample = H T T; in place allowed (each work-item rewrites the keys it
 * read). Geometry: as softmax_bwd; global: rows * BT_WG. */
__kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
void dropout_softmax_bwd(__global float *dscores, ulong ds_off, __global const float *dprobs,
                         ulong dp_off, __global const float *probs, ulong p_off, int HT, int T,
                         float scale, uint first_sample, uint thr, float keep_scale,
                         uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi) {
    __local float red[BT_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    const size_t row = (size_t)r * T;
    const ulong per_sample = (ulong)HT * T;
    __global const float *dp = dprobs + dp_off + row, *p = probs + p_off + row;
    __global float *ds = dscores + ds_off + row;
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
