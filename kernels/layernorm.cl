/* LayerNorm forward and backward over rows of `cols` features. */

/* out = (x - mean) * rstd * gamma + beta per row; saves mean and rstd.
 * x, out: (rows, cols); mean, rstd: (rows).
 * Geometry: one work-group of BT_WG per row; work-item l handles columns l,
 * l + BT_WG, ...; mean and variance (two passes) by fixed trees in local
 * memory. global: rows * BT_WG. */
BT_KERNEL_WG void bt_layernorm_fwd(BT_OUT(float, out), BT_OUT(float, mean), BT_OUT(float, rstd),
                                   BT_IN(float, x), BT_IN(float, gamma), BT_IN(float, beta),
                                   int cols, float eps) {
    BT_BIND(out);
    BT_BIND(mean);
    BT_BIND(rstd);
    BT_BIND(x);
    BT_BIND(gamma);
    BT_BIND(beta);
    __local float red[BT_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
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
 * per row, xhat = (x - mean) * rstd. dx may alias dout: each work-item reads
 * its columns before the trees and writes the same columns after them.
 * Geometry: one work-group of BT_WG per row (as layernorm_fwd). */
BT_KERNEL_WG void bt_layernorm_bwd_dx(BT_OUT(float, dx), BT_IN(float, dout), BT_IN(float, x),
                                      BT_IN(float, mean), BT_IN(float, rstd), BT_IN(float, gamma),
                                      int cols) {
    BT_BIND(dx);
    BT_BIND(dout);
    BT_BIND(x);
    BT_BIND(mean);
    BT_BIND(rstd);
    BT_BIND(gamma);
    __local float red[BT_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
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
BT_FN void ln_params_rows(__global const float *dout, __global const float *x,
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
BT_KERNEL void bt_layernorm_bwd_params(BT_OUT(float, dgamma), BT_OUT(float, dbeta),
                                       BT_IN(float, dout), BT_IN(float, x), BT_IN(float, mean),
                                       BT_IN(float, rstd), int rows, int cols) {
    BT_BIND(dgamma);
    BT_BIND(dbeta);
    BT_BIND(dout);
    BT_BIND(x);
    BT_BIND(mean);
    BT_BIND(rstd);
    const int c = get_global_id(0);
    if (c >= cols) return;
    float ag = 0.0f, ab = 0.0f;
    ln_params_rows(dout + c, x + c, mean, rstd, 0,
                   (size_t)rows, cols, &ag, &ab);
    dgamma[c] += ag;
    dbeta[c] += ab;
}

/* The first pass for more rows: over the rows of chunk g (BT_COL_ROWS rows,
 * in order), partial[p_off + g 2cols + c] = sum dout * xhat and
 * partial[p_off + g 2cols + cols + c] = sum dout: row g of the partials
 * (chunks x 2cols) is dgamma's terms, then dbeta's. Geometry: one work-item
 * per (chunk, column), columns fastest, so a work-group reads whole rows;
 * global: chunks * cols. Runs before layernorm_bwd_dx. */
BT_KERNEL void bt_layernorm_bwd_params_partial(BT_OUT(float, partial), BT_IN(float, dout),
                                               BT_IN(float, x), BT_IN(float, mean),
                                               BT_IN(float, rstd), int rows, int cols) {
    BT_BIND(partial);
    BT_BIND(dout);
    BT_BIND(x);
    BT_BIND(mean);
    BT_BIND(rstd);
    const size_t i = get_global_id(0), c = i % (size_t)cols, g = i / (size_t)cols;
    const size_t r0 = g * BT_COL_ROWS;
    if (r0 >= (size_t)rows) return;
    const size_t r1 = bt_min_size(r0 + BT_COL_ROWS, (size_t)rows);
    float ag = 0.0f, ab = 0.0f;
    ln_params_rows(dout + c, x + c, mean, rstd, r0, r1,
                   cols, &ag, &ab);
    partial += g * 2 * (size_t)cols + c;
    partial[0] = ag;
    partial[cols] = ab;
}

/* The second pass: element j of (dgamma | dbeta), j < 2 cols, += the sum of
 * column j of layernorm_bwd_params_partial's partials (chunks x 2cols), in
 * chunk order. Geometry: one work-item per element of dgamma and dbeta,
 * looping over the chunks; global: 2 * cols. */
BT_KERNEL void bt_layernorm_bwd_params_sum(BT_OUT(float, dgamma), BT_OUT(float, dbeta),
                                           BT_IN(float, partial), int chunks, int cols) {
    BT_BIND(dgamma);
    BT_BIND(dbeta);
    BT_BIND(partial);
    const int j = get_global_id(0);
    if (j >= 2 * cols) return;
    partial += j;
    float acc = 0.0f;
    for (int g = 0; g < chunks; g++) acc += partial[(size_t)g * 2 * cols];
    if (j < cols)
        dgamma[j] += acc;
    else
        dbeta[j - cols] += acc;
}
