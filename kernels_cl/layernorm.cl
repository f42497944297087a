/* LayerNorm forward and backward over rows of `cols` features. */

/* out = (x - mean) * rstd * gamma + beta per row; saves mean and rstd.
 * x, out: (rows, cols); mean, rstd: (rows).
 * Geometry: one work-group of BT_WG per row; work-item l handles columns l,
 * l + BT_WG, ...; mean and variance (two passes) by fixed trees in local
 * memory. global: rows * BT_WG. */
__kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
void layernorm_fwd(__global float *out, ulong out_off, __global float *mean, ulong mean_off,
                   __global float *rstd, ulong rstd_off, __global const float *x, ulong x_off,
                   __global const float *gamma, ulong g_off, __global const float *beta,
                   ulong b_off, int cols, float eps) {
    __local float red[BT_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    x += x_off + (size_t)r * cols;
    out += out_off + (size_t)r * cols;
    gamma += g_off;
    beta += b_off;
    float s = 0.0f;
    for (int c = lid; c < cols; c += BT_WG) s += x[c];
    const float m = wg_sum(s, red) / cols;
    float v = 0.0f;
    for (int c = lid; c < cols; c += BT_WG) v += (x[c] - m) * (x[c] - m);
    const float rs = 1.0f / sqrt(wg_sum(v, red) / cols + eps);
    for (int c = lid; c < cols; c += BT_WG) out[c] = (x[c] - m) * rs * gamma[c] + beta[c];
    if (lid == 0) {
        mean[mean_off + r] = m;
        rstd[rstd_off + r] = rs;
    }
}

/* dx = rstd * (dout*gamma - mean(dout*gamma) - xhat * mean(dout*gamma*xhat))
 * per row, xhat = (x - mean) * rstd. dx may alias dout: each work-item reads
 * its columns before the trees and writes the same columns after them.
 * Geometry: one work-group of BT_WG per row (as layernorm_fwd). */
__kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
void layernorm_bwd_dx(__global float *dx, ulong dx_off, __global const float *dout, ulong d_off,
                      __global const float *x, ulong x_off, __global const float *mean,
                      ulong mean_off, __global const float *rstd, ulong rstd_off,
                      __global const float *gamma, ulong g_off, int cols) {
    __local float red[BT_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    const size_t row = (size_t)r * cols;
    dx += dx_off + row;
    dout += d_off + row;
    x += x_off + row;
    gamma += g_off;
    const float mu = mean[mean_off + r], rs = rstd[rstd_off + r];
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
 * Geometry: one work-item per column, looping over rows in order (the CPU
 * backend's order); global: cols. Runs before layernorm_bwd_dx, which may
 * overwrite dout. */
__kernel void layernorm_bwd_params(__global float *dgamma, ulong dg_off, __global float *dbeta,
                                   ulong db_off, __global const float *dout, ulong d_off,
                                   __global const float *x, ulong x_off,
                                   __global const float *mean, ulong mean_off,
                                   __global const float *rstd, ulong rstd_off, int rows,
                                   int cols) {
    const int c = get_global_id(0);
    if (c >= cols) return;
    dout += d_off + c;
    x += x_off + c;
    mean += mean_off;
    rstd += rstd_off;
    float ag = 0.0f, ab = 0.0f;
    for (int r = 0; r < rows; r++) {
        const size_t i = (size_t)r * cols;
        ag += dout[i] * ((x[i] - mean[r]) * rstd[r]);
        ab += dout[i];
    }
    dgamma[dg_off + c] += ag;
    dbeta[db_off + c] += ab;
}
