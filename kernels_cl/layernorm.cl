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
    float m;
    const float rs = layernorm_row(out, x, gamma + g_off, beta + b_off, cols, eps, red, &m);
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

/* Adds dout[r,c] * xhat[r,c] to *ag and dout[r,c] to *ab for the rows r of
 * [r0, r1), in order (dout and x point at column c; mean, rstd at row 0). */
void ln_params_rows(__global const float *dout, __global const float *x,
                    __global const float *mean, __global const float *rstd, size_t r0,
                    size_t r1, int cols, float *ag, float *ab) {
    for (size_t r = r0; r < r1; r++) {
        const size_t i = r * (size_t)cols;
        *ag += dout[i] * ((x[i] - mean[r]) * rstd[r]);
        *ab += dout[i];
    }
}

/* dgamma[c] += sum_r dout[r,c] * xhat[r,c],  dbeta[c] += sum_r dout[r,c]
 * for rows <= BT_COL_ROWS (more rows: layernorm_bwd_params_partial, then
 * layernorm_bwd_params_sum). Geometry: one work-item per column, looping
 * over the rows in order (the CPU backend's order); global: cols. Runs
 * before layernorm_bwd_dx, which may overwrite dout. */
__kernel void layernorm_bwd_params(__global float *dgamma, ulong dg_off, __global float *dbeta,
                                   ulong db_off, __global const float *dout, ulong d_off,
                                   __global const float *x, ulong x_off,
                                   __global const float *mean, ulong mean_off,
                                   __global const float *rstd, ulong rstd_off, int rows,
                                   int cols) {
    const int c = get_global_id(0);
    if (c >= cols) return;
    float ag = 0.0f, ab = 0.0f;
    ln_params_rows(dout + d_off + c, x + x_off + c, mean + mean_off, rstd + rstd_off, 0,
                   (size_t)rows, cols, &ag, &ab);
    dgamma[dg_off + c] += ag;
    dbeta[db_off + c] += ab;
}

/* The first pass for more rows: over the rows of chunk g (BT_COL_ROWS rows,
 * in order), partial[p_off + g 2cols + c] = sum dout * xhat and
 * partial[p_off + g 2cols + cols + c] = sum dout: row g of the partials
 * (chunks x 2cols) is dgamma's terms, then dbeta's. Geometry: one work-item
 * per (chunk, column), columns fastest, so a work-group reads whole rows;
 * global: chunks * cols. Runs before layernorm_bwd_dx. */
__kernel void layernorm_bwd_params_partial(__global float *partial, ulong p_off,
                                           __global const float *dout, ulong d_off,
                                           __global const float *x, ulong x_off,
                                           __global const float *mean, ulong mean_off,
                                           __global const float *rstd, ulong rstd_off,
                                           int rows, int cols) {
    const size_t i = get_global_id(0), c = i % (size_t)cols, g = i / (size_t)cols;
    const size_t r0 = g * BT_COL_ROWS;
    if (r0 >= (size_t)rows) return;
    const size_t r1 = min(r0 + BT_COL_ROWS, (size_t)rows);
    float ag = 0.0f, ab = 0.0f;
    ln_params_rows(dout + d_off + c, x + x_off + c, mean + mean_off, rstd + rstd_off, r0, r1,
                   cols, &ag, &ab);
    partial += p_off + g * 2 * (size_t)cols + c;
    partial[0] = ag;
    partial[cols] = ab;
}

/* The second pass: element j of (dgamma | dbeta), j < 2 cols, += the sum of
 * column j of layernorm_bwd_params_partial's partials (chunks x 2cols), in
 * chunk order. Geometry: one work-item per element of dgamma and dbeta,
 * looping over the chunks; global: 2 * cols. */
__kernel void layernorm_bwd_params_sum(__global float *dgamma, ulong dg_off,
                                       __global float *dbeta, ulong db_off,
                                       __global const float *partial, ulong p_off, int chunks,
                                       int cols) {
    const int j = get_global_id(0);
    if (j >= 2 * cols) return;
    partial += p_off + j;
    float acc = 0.0f;
    for (int g = 0; g < chunks; g++) acc += partial[(size_t)g * 2 * cols];
    if (j < cols)
        dgamma[dg_off + j] += acc;
    else
        dbeta[db_off + j - cols] += acc;
}
