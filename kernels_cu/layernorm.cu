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
    float s = 0.0f;
    for (int c = lid; c < cols; c += BT_WG) s += x[c];
    const float m = wg_sum(s, red) / cols;
    float v = 0.0f;
    for (int c = lid; c < cols; c += BT_WG) v += (x[c] - m) * (x[c] - m);
    const float rs = 1.0f / sqrtf(wg_sum(v, red) / cols + eps);
    for (int c = lid; c < cols; c += BT_WG) out[c] = (x[c] - m) * rs * gamma[c] + beta[c];
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

/* dgamma[c] += sum_r dout[r,c] * xhat[r,c],  dbeta[c] += sum_r dout[r,c].
 * Geometry: one thread per column, looping over rows in order (the CPU
 * backend's order); grid: cols threads. Runs before layernorm_bwd_dx, which
 * may overwrite dout. */
__global__ void layernorm_bwd_params(float *dgamma, float *dbeta, const float *dout,
                                     const float *x, const float *mean, const float *rstd,
                                     int rows, int cols) {
    const int c = (int)global_id();
    if (c >= cols) return;
    dout += c;
    x += c;
    float ag = 0.0f, ab = 0.0f;
    for (int r = 0; r < rows; r++) {
        const size_t i = (size_t)r * cols;
        ag += dout[i] * ((x[i] - mean[r]) * rstd[r]);
        ab += dout[i];
    }
    dgamma[c] += ag;
    dbeta[c] += ab;
}
