/* Elementwise ops: fill, add, scale, axpy, bias_add, GELU and tanh forward and
 * backward, dropout. Geometry: one work-item per element (dropout: per four
 * elements), work-groups of BT_WG, global size n rounded up to BT_WG.
 * Outputs may alias inputs read at the same index (backend.h). */

/* out[i] = value                                         out: (n) */
__kernel void fill(__global float *out, ulong out_off, float value, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) out[out_off + i] = value;
}

/* out = a + b                                            (n) */
__kernel void add(__global float *out, ulong out_off, __global const float *a, ulong a_off,
                  __global const float *b, ulong b_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) out[out_off + i] = a[a_off + i] + b[b_off + i];
}

/* x *= alpha                                             (n) */
__kernel void scale(__global float *x, ulong x_off, float alpha, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) x[x_off + i] *= alpha;
}

/* y += alpha * x                                         (n) */
__kernel void axpy(__global float *y, ulong y_off, float alpha, __global const float *x,
                   ulong x_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) y[y_off + i] += alpha * x[x_off + i];
}

/* y[r, c] += bias[c]                                     y: (rows, cols) */
__kernel void bias_add(__global float *y, ulong y_off, __global const float *bias, ulong b_off,
                       int rows, int cols) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)rows * (size_t)cols) return;
    int c = (int)(i % (size_t)cols);
#ifdef BT_FAULT_BIAS_ADD_OFF_BY_ONE /* test builds only (tests/opencl-fault.sh) */
    c = (c + 1) % cols;
#endif
    y[y_off + i] += bias[b_off + c];
}

/* out = x * Phi(x), the exact erf GELU                   (n) */
__kernel void gelu_fwd(__global float *out, ulong out_off, __global const float *x, ulong x_off,
                       ulong n) {
    const size_t i = get_global_id(0);
    if (i >= n) return;
    const float xi = x[x_off + i];
#ifdef BT_FAULT_GELU_TANH_APPROX /* test builds only: the tanh approximation */
    out[out_off + i] = 0.5f * xi * (1.0f + tanh(0.7978845608f * (xi + 0.044715f * xi * xi * xi)));
#else
    out[out_off + i] = gelu_value(xi);
#endif
}

/* dx = dout * (Phi(x) + x * phi(x))                      (n) */
__kernel void gelu_bwd(__global float *dx, ulong dx_off, __global const float *dout,
                       ulong d_off, __global const float *x, ulong x_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i >= n) return;
    dx[dx_off + i] = dout[d_off + i] * gelu_grad_value(x[x_off + i]);
}

/* out = tanh(x)                                          (n) */
__kernel void tanh_fwd(__global float *out, ulong out_off, __global const float *x, ulong x_off,
                       ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) out[out_off + i] = tanh(x[x_off + i]);
}

/* dx = dout * (1 - y^2), y = tanh output                 (n) */
__kernel void tanh_bwd(__global float *dx, ulong dx_off, __global const float *dout,
                       ulong d_off, __global const float *y, ulong y_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i >= n) return;
    const float yi = y[y_off + i];
    dx[dx_off + i] = dout[d_off + i] * (1.0f - yi * yi);
}

/* out[i] = draw >= thr ? in[i] * keep_scale : 0, for `samples` samples of
 * per_sample elements starting at sample first_sample. One work-item per
 * Philox block: four consecutive elements of one sample (the last block of a
 * sample may be partial). thr and keep_scale = 1/(1-p) come from the host, so
 * they round exactly as on the CPU. global: samples * blocks_per_sample. */
__kernel void dropout(__global float *out, ulong out_off, __global const float *in, ulong in_off,
                      ulong per_sample, ulong blocks_per_sample, ulong blocks, uint first_sample,
                      uint thr, float keep_scale, uint seed_lo, uint seed_hi, uint stream_lo,
                      uint stream_hi) {
    const size_t blk = get_global_id(0);
    if (blk >= blocks) return;
    const size_t s = blk / blocks_per_sample, e0 = (blk % blocks_per_sample) * 4;
    uint r[4] = {(uint)(e0 >> 2), first_sample + (uint)s, stream_lo, stream_hi};
    philox4x32(r, seed_lo, seed_hi);
    const size_t base = s * per_sample;
    for (size_t e = e0; e < e0 + 4 && e < per_sample; e++)
        out[out_off + base + e] = r[e & 3] >= thr ? in[in_off + base + e] * keep_scale : 0.0f;
}
