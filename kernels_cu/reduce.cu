/* Reductions: bias_grad (column sums), sum / sumsq partials, all_finite
 * (kernels_cl/reduce.cl's twin). */
#include "common.cuh"
#include "kernels.cuh"

#include <math.h>

/* dbias[c] += sum_r dy[r, c]                             dy: (rows, cols)
 * for rows <= BT_COL_ROWS, and as the second pass of more rows over
 * bias_grad_partial's chunk partials (chunks x cols) and over
 * embed_bwd_type_partial's (chunks x TV*C, onto dwtt). Geometry: one thread
 * per column, looping over the rows in order; grid: cols threads. */
__global__ void bias_grad(float *dbias, const float *dy, int rows, int cols) {
    const int c = (int)global_id();
    if (c >= cols) return;
    dy += c;
    float acc = 0.0f;
    for (int r = 0; r < rows; r++) acc += dy[(size_t)r * cols];
    dbias[c] += acc;
}

/* bias_grad's first pass for more rows: partial[g cols + c] = sum of
 * dy[r, c] over the rows r of chunk g (BT_COL_ROWS rows, in order).
 * Geometry: one thread per (chunk, column), columns fastest, so a block
 * reads whole rows; grid: chunks * cols threads. */
__global__ void bias_grad_partial(float *partial, const float *dy, int rows, int cols) {
    const size_t i = global_id(), c = i % (size_t)cols, g = i / (size_t)cols;
    const size_t r0 = g * BT_COL_ROWS;
    if (r0 >= (size_t)rows) return;
    const size_t r1 = r0 + BT_COL_ROWS < (size_t)rows ? r0 + BT_COL_ROWS : (size_t)rows;
    dy += c;
    float acc = 0.0f;
    for (size_t r = r0; r < r1; r++) acc += dy[r * cols];
    partial[g * cols + c] = acc;
}

/* partial[g] = sum of x over chunk g of BT_REDUCE_CHUNK elements.
 * Geometry: one block of BT_WG per chunk; thread l adds elements l,
 * l + BT_WG, ... of the chunk in order, then a fixed tree in shared memory.
 * The host adds the partials in chunk order. grid: chunks blocks. */
__global__ void __launch_bounds__(BT_WG)
sum_partial(float *partial, const float *x, size_t n) {
    __shared__ float red[BT_WG];
    const size_t g = (size_t)group_id(), lid = (size_t)local_id();
    const size_t i0 = g * BT_REDUCE_CHUNK;
    const size_t i1 = i0 + BT_REDUCE_CHUNK < n ? i0 + BT_REDUCE_CHUNK : n;
    float s = 0.0f;
    for (size_t i = i0 + lid; i < i1; i += BT_WG) s += x[i];
    s = wg_sum(s, red);
    if (lid == 0) partial[g] = s;
}

/* partial[g] = sum of x^2 over chunk g (as sum_partial). */
__global__ void __launch_bounds__(BT_WG)
sumsq_partial(float *partial, const float *x, size_t n) {
    __shared__ float red[BT_WG];
    const size_t g = (size_t)group_id(), lid = (size_t)local_id();
    const size_t i0 = g * BT_REDUCE_CHUNK;
    const size_t i1 = i0 + BT_REDUCE_CHUNK < n ? i0 + BT_REDUCE_CHUNK : n;
    float s = 0.0f;
    for (size_t i = i0 + lid; i < i1; i += BT_WG) s += x[i] * x[i];
    s = wg_sum(s, red);
    if (lid == 0) partial[g] = s;
}

/* *flag = 1 when some x[i] is NaN or Inf (the host zeroes flag first). Every
 * writer stores the same value, so the result is deterministic. grid: n
 * threads. */
__global__ void all_finite(float *flag, const float *x, size_t n) {
    const size_t i = global_id();
    if (i < n && !isfinite(x[i])) *flag = 1.0f;
}
