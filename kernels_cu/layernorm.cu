/* LayerNorm forward and backward over rows of `cols` features
 * (kernels_cl/layernorm.cl's twin). */
#include "common.cuh"
#include "kernels.cuh"

/* out = (x - mean) * rstd * gamma + beta per row; saves mean and rstd.
 * x, out: (rows, cols); mean, rstd: (rows).
 * Geometry: one block of BT_WG per row; thread l handles columns l,
 * l + BT_WG, ...; mean and variance (two passes) by fixed trees in shared
 * memory. grid: rows blocks. */
__global__ void __launch_bounds__(BT_WG)
layernorm_fwd(float *out, float *mean, float *rstd, const float *x, const float *gamma,
              const float *beta, int cols, float eps) {
    __shared__ float red[BT_WG];
    const int r = group_id(), lid = local_id();
    x += (size_t)r * cols;
    out += (size_t)r * cols;
    float m;
    const float rs = layernorm_row(out, x, gamma, beta, cols, eps, red, &m);
    if (lid == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* dx = rstd * (dout*gamma - mean(dout*gamma) - xhat * mean(dout*gamma*xhat))
 * per row, xhat = (x - mean) * rstd. dx may alias dout: each thread reads
 * its columns before the trees and writes the same columns after them.
 * Geometry: one block of BT_WG per row (as layernorm_fwd). */
__global__ void __launch_bounds__(BT_WG)
layernorm_bwd_dx(float *dx, const float *dout, const float *x, const float *mean,
                 const float *rstd, const float *gamma, int cols) {
    __shared__ float red[BT_WG];
    const int r = group_id(), lid = local_id();
    const size_t row = (size_t)r * cols;
    dx += row;
    dout += row;
    x += row;
    const float mu = mean[r], rs = rstd[r];
    float sd = 0.0f, sdx = 0.0f;
    for (int c = lid; c < cols; c += BT_WG) {
        const float dn = dout[c] * gamma[c];
        sd += dn;
        sdx += dn * ((x[c] - mu) * rs);
    }
    const float mean_d = wg_sum(sd, red) / cols;
    const float mean_dx = wg_sum(sdx, red) / cols;
    for (int c = lid; c < cols; c += BT_WG) {
        const float xhat = (x[c] - mu) * rs;
        dx[c] = rs * (dout[c] * gamma[c] - mean_d - xhat * mean_dx);
    }
}

/* Adds dout[r,c] * xhat[r,c] to *ag and dout[r,c] to *ab for the rows r of
 * [r0, r1), in order (dout and x point at column c; mean, rstd at row 0). */
__device__ inline void ln_params_rows(const float *dout, const float *x, const float *mean,
                                      const float *rstd, size_t r0, size_t r1, int cols,
                                      float *ag, float *ab) {
    for (size_t r = r0; r < r1; r++) {
        const size_t i = r * (size_t)cols;
        *ag += dout[i] * ((x[i] - mean[r]) * rstd[r]);
        *ab += dout[i];
    }
}

/* dgamma[c] += sum_r dout[r,c] * xhat[r,c],  dbeta[c] += sum_r dout[r,c]
 * for rows <= BT_COL_ROWS (more rows: layernorm_bwd_params_partial, then
 * layernorm_bwd_params_sum). Geometry: one thread per column, looping over
 * the rows in order (the CPU backend's order); grid: cols threads. Runs
 * before layernorm_bwd_dx, which may overwrite dout. */
__global__ void layernorm_bwd_params(float *dgamma, float *dbeta, const float *dout,
                                     const float *x, const float *mean, const float *rstd,
                                     int rows, int cols) {
    const int c = (int)global_id();
    if (c >= cols) return;
    float ag = 0.0f, ab = 0.0f;
    ln_params_rows(dout + c, x + c, mean, rstd, 0, (size_t)rows, cols, &ag, &ab);
    dgamma[c] += ag;
    dbeta[c] += ab;
}

/* The first pass for more rows: over the rows of chunk g (BT_COL_ROWS rows,
 * in order), partial[g 2cols + c] = sum dout * xhat and
 * partial[g 2cols + cols + c] = sum dout: row g of the partials
 * (chunks x 2cols) is dgamma's terms, then dbeta's. Geometry: one thread per
 * (chunk, column), columns fastest, so a block reads whole rows; grid:
 * chunks * cols threads. Runs before layernorm_bwd_dx. */
__global__ void layernorm_bwd_params_partial(float *partial, const float *dout, const float *x,
                                             const float *mean, const float *rstd, int rows,
                                             int cols) {
    const size_t i = global_id(), c = i % (size_t)cols, g = i / (size_t)cols;
    const size_t r0 = g * BT_COL_ROWS;
    if (r0 >= (size_t)rows) return;
    const size_t r1 = r0 + BT_COL_ROWS < (size_t)rows ? r0 + BT_COL_ROWS : (size_t)rows;
    float ag = 0.0f, ab = 0.0f;
    ln_params_rows(dout + c, x + c, mean, rstd, r0, r1, cols, &ag, &ab);
    partial += g * 2 * (size_t)cols + c;
    partial[0] = ag;
    partial[cols] = ab;
}

/* The second pass: element j of (dgamma | dbeta), j < 2 cols, += the sum of
 * column j of layernorm_bwd_params_partial's partials (chunks x 2cols), in
 * chunk order. Geometry: one thread per element of dgamma and dbeta,
 * looping over the chunks; grid: 2 * cols threads. */
__global__ void layernorm_bwd_params_sum(float *dgamma, float *dbeta, const float *partial,
                                         int chunks, int cols) {
    const int j = (int)global_id();
    if (j >= 2 * cols) return;
    partial += j;
    float acc = 0.0f;
    for (int g = 0; g < chunks; g++) acc += partial[(size_t)g * 2 * cols];
    if (j < cols)
        dgamma[j] += acc;
    else
        dbeta[j - cols] += acc;
}
