/* Elementwise ops: fill, add, scale, axpy, bias_add, GELU and tanh forward and
 * backward, dropout (kernels_cl/elementwise.cl's twin). Geometry: one thread
 * per element (dropout: per four elements), blocks of BT_WG, grid n rounded up
 * to BT_WG. Outputs may alias inputs read at the same index (backend.h), so no
 * pointer is __restrict__. */
#include "common.cuh"
#include "kernels.cuh"
#include "philox.cuh"

/* out[i] = value                                         out: (n) */
__global__ void fill(float *out, float value, size_t n) {
    const size_t i = global_id();
    if (i < n) out[i] = value;
}

/* out = a + b                                            (n) */
__global__ void add(float *out, const float *a, const float *b, size_t n) {
    const size_t i = global_id();
    if (i < n) out[i] = a[i] + b[i];
}

/* x *= alpha                                             (n) */
__global__ void scale(float *x, float alpha, size_t n) {
    const size_t i = global_id();
    if (i < n) x[i] *= alpha;
}

/* y += alpha * x                                         (n) */
__global__ void axpy(float *y, float alpha, const float *x, size_t n) {
    const size_t i = global_id();
    if (i < n) y[i] += alpha * x[i];
}

/* y[r, c] += bias[c]                                     y: (rows, cols) */
__global__ void bias_add(float *y, const float *bias, int rows, int cols) {
    const size_t i = global_id();
    if (i >= (size_t)rows * (size_t)cols) return;
    const int c = (int)(i % (size_t)cols);
    y[i] += bias[c];
}

/* out = x * Phi(x), the exact erf GELU                   (n) */
__global__ void gelu_fwd(float *out, const float *x, size_t n) {
    const size_t i = global_id();
    if (i >= n) return;
    const float xi = x[i];
    out[i] = gelu_value(xi);
}

/* dx = dout * (Phi(x) + x * phi(x))                      (n) */
__global__ void gelu_bwd(float *dx, const float *dout, const float *x, size_t n) {
    const size_t i = global_id();
    if (i >= n) return;
    dx[i] = dout[i] * gelu_grad_value(x[i]);
}

/* out = tanh(x)                                          (n) */
__global__ void tanh_fwd(float *out, const float *x, size_t n) {
    const size_t i = global_id();
    if (i < n) out[i] = tanhf(x[i]);
}

/* dx = dout * (1 - y^2), y = tanh output                 (n) */
__global__ void tanh_bwd(float *dx, const float *dout, const float *y, size_t n) {
    const size_t i = global_id();
    if (i >= n) return;
    const float yi = y[i];
    dx[i] = dout[i] * (1.0f - yi * yi);
}

/* out[i] = draw >= thr ? in[i] * keep_scale : 0, for `samples` samples of
 * per_sample elements starting at sample first_sample. One thread per Philox
 * block: four consecutive elements of one sample (the last block of a sample
 * may be partial). thr and keep_scale = 1/(1-p) come from the host, so they
 * round exactly as on the CPU. grid: samples * blocks_per_sample threads. */
__global__ void dropout(float *out, const float *in, size_t per_sample, size_t blocks_per_sample,
                        size_t blocks, uint32_t first_sample, uint32_t thr, float keep_scale,
                        uint32_t seed_lo, uint32_t seed_hi, uint32_t stream_lo,
                        uint32_t stream_hi) {
    const size_t blk = global_id();
    if (blk >= blocks) return;
    const size_t s = blk / blocks_per_sample, e0 = (blk % blocks_per_sample) * 4;
    uint32_t r[4] = {(uint32_t)(e0 >> 2), first_sample + (uint32_t)s, stream_lo, stream_hi};
    philox4x32(r, seed_lo, seed_hi);
    const size_t base = s * per_sample;
    for (size_t e = e0; e < e0 + 4 && e < per_sample; e++)
        out[base + e] = r[e & 3] >= thr ? in[base + e] * keep_scale : 0.0f;
}
