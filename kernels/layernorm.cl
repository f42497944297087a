/* LayerNorm forward and backward over rows of `cols` features. */

/* out = (x - mean) * rstd * gamma + beta per row; saves mean and rstd; out
 * rounded to the storage kind kind16 (BT_KIND16_NONE: not rounded).
 * x, out: (rows, cols); mean, rstd: (rows).
 * Geometry: a row kernel (softmax_fwd's): BT_ROW_LANES work-items a row,
 * lane l handling columns l, l + BT_ROW_LANES, ...; mean and variance (two
 * passes) by row_sum's fixed trees, the row read once into registers where
 * it fits (BT_LN_CACHED). global: BT_ROW_GLOBAL(rows, BT_WG). */
BT_KERNEL_WG void bt_layernorm_fwd(BT_OUT(float, out), BT_OUT(float, mean), BT_OUT(float, rstd),
                                   BT_IN(float, x), BT_IN(float, gamma), BT_IN(float, beta),
                                   int rows, int cols, float eps, int kind16) {
    BT_BIND(out);
    BT_BIND(mean);
    BT_BIND(rstd);
    BT_BIND(x);
    BT_BIND(gamma);
    BT_BIND(beta);
    __local float red[BT_WG];
    __local float lgamma[BT_LN_ROW_MAX], lbeta[BT_LN_ROW_MAX];
    const int r = row_of(), n = r < rows ? cols : 0;
    const size_t row = (size_t)(n ? r : 0) * cols;
    float m, rs;
    if (BT_LN_CACHED(cols)) { /* the row read once, gamma and beta once a work-group */
        stage_vector(lgamma, gamma, cols);
        stage_vector(lbeta, beta, cols);
        float xv[BT_LN_LANE_COLS];
        ln_lane_load(xv, x + row, n);
        rs = layernorm_row_cached(out + row, 0, xv, lgamma, lbeta, n, eps, kind16, red, &m);
    } else {
        rs = layernorm_row(out + row, 0, x + row, gamma, beta, n, eps, kind16, red, &m);
    }
    if (n && get_local_id(0) % BT_ROW_LANES == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* x[i] of LayerNorm's backward: from x, or from x16 in the storage kind
 * x_kind (the stash's copy) where x_kind is not BT_KIND16_NONE. */
BT_FN float ln_x(__global const float *x, __global const ushort *x16, size_t i, int x_kind) {
    return x_kind != BT_KIND16_NONE ? kind16_value(x16[i], x_kind) : x[i];
}

/* A gradient LayerNorm's backward reads (dout, a residual branch's
 * dbranch): fp32 values (f32; kind BT_KIND16_NONE) or 16-bit values of
 * `kind` (h16: a gradient stored in 16 bits, a GEMM's 16-bit result), read
 * as they are. */
typedef struct {
    __global const float *f32;
    __global const ushort *h16;
    int kind;
} ln_grad;

/* The gradient from element `at` on: f32 (fp32) or h16 (16 bits of kind),
 * the other not read. */
BT_FN ln_grad ln_grad_at(__global const float *f32, __global const ushort *h16, int kind,
                         size_t at) {
    ln_grad g = {f32 + at, h16 + at, kind};
    return g;
}

/* Element i of g, rounded to kind16 where it is fp32 (as stored). */
BT_FN float ln_grad_value(ln_grad g, size_t i, int kind16) {
    return g.kind != BT_KIND16_NONE ? kind16_value(g.h16[i], g.kind)
                                    : round_kind16(g.f32[i], kind16);
}

/* dout[i] as LayerNorm's backward reads it: with `branch`, dout + dbranch
 * (a residual join's two gradients, an fp32 dbranch rounded to kind16 first,
 * as stored; a 16-bit one is), rounded to kind16 (BT_KIND16_NONE: neither
 * rounded). */
BT_FN float ln_dy(ln_grad dout, ln_grad br, size_t i, int branch, int kind16) {
    float d = dout.kind != BT_KIND16_NONE ? kind16_value(dout.h16[i], dout.kind) : dout.f32[i];
    if (branch) d += ln_grad_value(br, i, kind16);
    return round_kind16(d, kind16);
}

/* The dropout LayerNorm's backward may apply to the dx it writes (a Post-LN
 * join's branch gradient: dropout's backward, without dx read back): out16
 * (at the row's first element) takes dropout(dx) as bt_dropout draws it for
 * element row + c, in the 16-bit kind `kind` (BT_KIND16_NONE: no dropout). */
typedef struct {
    __global ushort *out16;
    int kind;
    size_t row;
    ulong per_sample;
    uint first_sample, thr;
    float keep_scale;
    uint seed_lo, seed_hi, stream_lo, stream_hi;
} ln_drop;

/* dx[c] of a row = v: fp32 into dx, or its bits in 16-bit kind dx_kind into
 * dx16 where that is not BT_KIND16_NONE; and dropout(v) into dr's out16
 * where dr has a kind (bt_dropout's arithmetic on the value dx holds). */
BT_FN void ln_put_dx(__global float *dx, __global ushort *dx16, int dx_kind, int c, float v,
                     ln_drop dr) {
    if (dx_kind != BT_KIND16_NONE)
        dx16[c] = f32_to_kind16(v, dx_kind);
    else
        dx[c] = v;
    if (dr.kind == BT_KIND16_NONE) return;
    const float held = dx_kind != BT_KIND16_NONE ? kind16_value(f32_to_kind16(v, dx_kind), dx_kind)
                                                 : v;
    const bool keep = drop_keep(dr.row + c, dr.per_sample, dr.first_sample, dr.thr, dr.seed_lo,
                                dr.seed_hi, dr.stream_lo, dr.stream_hi);
    dr.out16[c] = f32_to_kind16(keep ? held * dr.keep_scale : 0.0f, dr.kind);
}

/* ln_drop from a kernel's arguments for the row at element `row` (out16
 * offset to it). */
BT_FN ln_drop ln_drop_at(__global ushort *out16, int kind, size_t row, ulong per_sample,
                         uint first_sample, uint thr, float keep_scale, uint seed_lo,
                         uint seed_hi, uint stream_lo, uint stream_hi) {
    ln_drop dr = {out16 + row, kind,      row,     per_sample, first_sample, thr,
                  keep_scale,  seed_lo,   seed_hi, stream_lo,  stream_hi};
    return dr;
}

/* layernorm_bwd_dx's row where it fits in registers (BT_LN_CACHED), for
 * the work-item's lane of a row of n columns (0 past the rows) whose first
 * element dx, dx16, dy, br, x and x16 point at: d[k] = dout as ln_dy reads
 * it and xh[k] = xhat (0 past n) of the lane's columns ln_lane_col(k), kept
 * for the caller, and the row's dx written (layernorm_bwd_dx's arithmetic);
 * gamma staged in lgamma; dx's dropout into dr (ln_put_dx). Must be reached by
 * all work-items. */
BT_FN void ln_bwd_row_cached(float *d, float *xh, __global float *dx, __global ushort *dx16,
                             int dx_kind, ln_grad dy, ln_grad br, int branch, int kind16,
                             __global const float *x, __global const ushort *x16, int x_kind,
                             float mu, float rs, BT_LOCAL_PTR const float *lgamma, int n,
                             int cols, BT_LOCAL_PTR float *red, ln_drop dr) {
    float sd = 0.0f, sdx = 0.0f;
    BT_UNROLL for (int k = 0; k < BT_LN_LANE_COLS; k++) {
        const int c = ln_lane_col(k);
        d[k] = xh[k] = 0.0f;
        if (c >= n) continue;
        d[k] = ln_dy(dy, br, c, branch, kind16);
        xh[k] = (ln_x(x, x16, c, x_kind) - mu) * rs;
        const float dn = d[k] * lgamma[c];
        sd += dn;
        sdx += dn * xh[k];
    }
    const float mean_d = row_sum(sd, red) / cols;
    const float mean_dx = row_sum(sdx, red) / cols;
    BT_UNROLL for (int k = 0; k < BT_LN_LANE_COLS; k++) {
        const int c = ln_lane_col(k);
        if (c < n)
            ln_put_dx(dx, dx16, dx_kind, c,
                      round_kind16(rs * (d[k] * lgamma[c] - mean_d - xh[k] * mean_dx), kind16),
                      dr);
    }
}

/* dx = rstd * (dout*gamma - mean(dout*gamma) - xhat * mean(dout*gamma*xhat))
 * per row, xhat = (x - mean) * rstd, dout as ln_dy reads it (from dout16 in
 * kind dout_kind where that is not BT_KIND16_NONE; with the branch's
 * gradient where `branch`) and dx rounded to the storage kind kind16 as it
 * is written (BT_KIND16_NONE: not rounded), into dx16 as bits of kind
 * dx_kind where that is not BT_KIND16_NONE; x read from x16 in the storage
 * kind x_kind where that is not BT_KIND16_NONE (ln_x). dx may alias dout (dx16
 * dout16): each work-item reads its columns before the trees and writes the
 * same columns after them. Geometry: a row kernel, as layernorm_fwd; where the row fits
 * (BT_LN_CACHED), dout and xhat stay in registers between the trees and the
 * writes (ln_bwd_row_cached). */
BT_KERNEL_WG void bt_layernorm_bwd_dx(BT_OUT(float, dx), BT_OUT(ushort, dx16),
                                      BT_IN(float, dout), BT_IN(ushort, dout16),
                                      BT_IN(float, dbranch), BT_IN(ushort, dbranch16),
                                      BT_IN(float, x), BT_IN(ushort, x16), BT_IN(float, mean),
                                      BT_IN(float, rstd), BT_IN(float, gamma), int rows, int cols,
                                      int kind16, int x_kind, int branch, int branch_kind,
                                      int dout_kind, int dx_kind, BT_OUT(ushort, drop16),
                                      int drop_kind, ulong per_sample, uint first_sample,
                                      uint thr, float keep_scale, uint seed_lo, uint seed_hi,
                                      uint stream_lo, uint stream_hi) {
    BT_BIND(dx);
    BT_BIND(dx16);
    BT_BIND(dout);
    BT_BIND(dout16);
    BT_BIND(dbranch);
    BT_BIND(dbranch16);
    BT_BIND(x);
    BT_BIND(x16);
    BT_BIND(mean);
    BT_BIND(rstd);
    BT_BIND(gamma);
    BT_BIND(drop16);
    __local float red[BT_WG];
    __local float lgamma[BT_LN_ROW_MAX];
    const int r = row_of(), n = r < rows ? cols : 0, lane = get_local_id(0) % BT_ROW_LANES;
    const size_t row = (size_t)(n ? r : 0) * cols;
    const ln_drop dr = ln_drop_at(drop16, drop_kind, row, per_sample, first_sample, thr,
                                  keep_scale, seed_lo, seed_hi, stream_lo, stream_hi);
    dx += row;
    dx16 += row;
    const ln_grad dy = ln_grad_at(dout, dout16, dout_kind, row),
                  br = ln_grad_at(dbranch, dbranch16, branch_kind, row);
    x += row;
    x16 += row;
    const float mu = mean[n ? r : 0], rs = rstd[n ? r : 0];
    float sd = 0.0f, sdx = 0.0f;
    if (BT_LN_CACHED(cols)) { /* dout and xhat kept in registers, gamma staged */
        stage_vector(lgamma, gamma, cols);
        float d[BT_LN_LANE_COLS], xh[BT_LN_LANE_COLS];
        ln_bwd_row_cached(d, xh, dx, dx16, dx_kind, dy, br, branch, kind16, x, x16, x_kind, mu,
                          rs, lgamma, n, cols, red, dr);
        return;
    }
    for (int c = lane; c < n; c += BT_ROW_LANES) {
        const float dn = ln_dy(dy, br, c, branch, kind16) * gamma[c];
        sd += dn;
        sdx += dn * ((ln_x(x, x16, c, x_kind) - mu) * rs);
    }
    const float mean_d = row_sum(sd, red) / cols;
    const float mean_dx = row_sum(sdx, red) / cols;
    for (int c = lane; c < n; c += BT_ROW_LANES) {
        const float xhat = (ln_x(x, x16, c, x_kind) - mu) * rs;
        const float dn = ln_dy(dy, br, c, branch, kind16) * gamma[c];
        ln_put_dx(dx, dx16, dx_kind, c, round_kind16(rs * (dn - mean_d - xhat * mean_dx), kind16),
                  dr);
    }
}

/* layernorm_bwd_dx (the same arguments, the same dx) with dgamma's and
 * dbeta's terms of its rows, for rows that fit in registers
 * (BT_LN_CACHED(cols); the host launches it only there): the terms of
 * layernorm_bwd_params (dout as ln_dy reads it times xhat, and dout) come
 * from the values dx is made of, so that dout, dbranch and x are read once
 * for both. The work-group's rows add their terms column by column in row
 * order in local memory; the group writes them as row g (its index) of
 * partial (groups x 2 cols: dgamma's terms, then dbeta's), which
 * bias_grad_partial (more than BT_COL_ROWS groups) and
 * layernorm_bwd_params_sum add. Geometry: a row kernel, as
 * layernorm_bwd_dx. */
BT_KERNEL_WG void bt_layernorm_bwd_dx_params(BT_OUT(float, dx), BT_OUT(ushort, dx16),
                                             BT_OUT(float, partial), BT_IN(float, dout),
                                             BT_IN(ushort, dout16), BT_IN(float, dbranch),
                                             BT_IN(ushort, dbranch16), BT_IN(float, x),
                                             BT_IN(ushort, x16), BT_IN(float, mean),
                                             BT_IN(float, rstd), BT_IN(float, gamma), int rows,
                                             int cols, int kind16, int x_kind, int branch,
                                             int branch_kind, int dout_kind, int dx_kind,
                                             BT_OUT(ushort, drop16), int drop_kind,
                                             ulong per_sample, uint first_sample, uint thr,
                                             float keep_scale, uint seed_lo, uint seed_hi,
                                             uint stream_lo, uint stream_hi) {
    BT_BIND(dx);
    BT_BIND(dx16);
    BT_BIND(partial);
    BT_BIND(dout);
    BT_BIND(dout16);
    BT_BIND(dbranch);
    BT_BIND(dbranch16);
    BT_BIND(x);
    BT_BIND(x16);
    BT_BIND(mean);
    BT_BIND(rstd);
    BT_BIND(gamma);
    BT_BIND(drop16);
    __local float red[BT_WG];
    __local float lgamma[BT_LN_ROW_MAX];
    __local float terms[2 * BT_LN_ROW_MAX];
    if (!BT_LN_CACHED(cols)) return; /* not launched: the row does not fit */
    const int r = row_of(), n = r < rows ? cols : 0, w = get_local_id(0) / BT_ROW_LANES;
    const size_t row = (size_t)(n ? r : 0) * cols;
    stage_vector(lgamma, gamma, cols);
    float d[BT_LN_LANE_COLS], xh[BT_LN_LANE_COLS];
    ln_bwd_row_cached(d, xh, dx + row, dx16 + row, dx_kind,
                      ln_grad_at(dout, dout16, dout_kind, row),
                      ln_grad_at(dbranch, dbranch16, branch_kind, row), branch, kind16, x + row,
                      x16 + row, x_kind, mean[n ? r : 0], rstd[n ? r : 0], lgamma, n, cols, red,
                      ln_drop_at(drop16, drop_kind, row, per_sample, first_sample, thr,
                                 keep_scale, seed_lo, seed_hi, stream_lo, stream_hi));
    /* row w of the group adds its terms after row w - 1 (row 0 always exists) */
    for (int j = 0; j < BT_WG / BT_ROW_LANES; j++) {
        if (w == j && n)
            BT_UNROLL for (int k = 0; k < BT_LN_LANE_COLS; k++) {
                const int c = ln_lane_col(k);
                if (c >= n) continue;
                const float g = d[k] * xh[k];
                terms[c] = j ? terms[c] + g : g;
                terms[cols + c] = j ? terms[cols + c] + d[k] : d[k];
            }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    partial += (size_t)get_group_id(0) * 2 * cols;
    for (int i = get_local_id(0); i < 2 * cols; i += BT_WG) partial[i] = terms[i];
}

/* A row lane's share of a column tile of dgamma and dbeta: adds dout[r,c] *
 * xhat[r,c] to *ag and dout[r,c] to *ab for the rows r = r0 + lane, r0 +
 * lane + BT_LANES, ... below r1, in order (dout and x point at column c;
 * stats holds the mean, then at BT_COL_ROWS the rstd, of rows r0 ...; x as
 * ln_x reads it, dout as ln_dy). */
BT_FN void ln_params_rows(ln_grad dout, ln_grad br, int branch,
                          __global const float *x, __global const ushort *x16, int x_kind,
                          int kind16, BT_LOCAL_PTR const float *stats, size_t r0, size_t r1,
                          size_t cols, int lane, float *ag, float *ab) {
    for (size_t r = r0 + (size_t)lane; r < r1; r += BT_LANES) {
        const size_t i = r * cols;
        const float d = ln_dy(dout, br, i, branch, kind16);
        *ag += d * ((ln_x(x, x16, i, x_kind) - stats[r - r0]) * stats[BT_COL_ROWS + r - r0]);
        *ab += d;
    }
}

/* A column tile's (dgamma, dbeta) terms over the rows [r0, r1) (at most
 * BT_COL_ROWS) for the work-item's column c of `cols`: the mean and rstd of
 * the rows staged once in stats, the row lanes' sums added in lane order.
 * Row lane 0 gets the totals in *ag, *ab. Must be reached by all
 * work-items. */
BT_FN void ln_params_tile(ln_grad dout, ln_grad br, int branch,
                          __global const float *x, __global const ushort *x16, int x_kind,
                          int kind16,
                          __global const float *mean, __global const float *rstd, size_t r0,
                          size_t r1, size_t c, size_t cols, int lane,
                          BT_LOCAL_PTR float *stats, BT_LOCAL_PTR float *red, float *ag,
                          float *ab) {
    for (size_t i = get_local_id(0); r0 + i < r1; i += BT_WG) {
        stats[i] = mean[r0 + i];
        stats[BT_COL_ROWS + i] = rstd[r0 + i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float g = 0.0f, b = 0.0f;
    if (c < cols)
        ln_params_rows(ln_grad_at(dout.f32, dout.h16, dout.kind, c),
                       ln_grad_at(br.f32, br.h16, br.kind, c), branch, x + c, x16 + c, x_kind,
                       kind16, stats, r0, r1, cols, lane, &g, &b);
    *ag = col_lanes_sum(g, red);
    *ab = col_lanes_sum(b, red);
}

/* dgamma[c] += sum_r dout[r,c] * xhat[r,c],  dbeta[c] += sum_r dout[r,c]
 * (x as ln_x reads it, dout as ln_dy) for rows <= BT_COL_ROWS (more rows: layernorm_bwd_params_partial, then
 * layernorm_bwd_params_sum). Geometry: column tiles (constants.h,
 * BT_COL_SLAB), one work-group per slab of columns; global:
 * BT_COL_GLOBAL(1, cols, BT_WG). Runs before layernorm_bwd_dx, which may
 * overwrite dout. */
BT_KERNEL_WG void bt_layernorm_bwd_params(BT_OUT(float, dgamma), BT_OUT(float, dbeta),
                                          BT_IN(float, dout), BT_IN(ushort, dout16),
                                          BT_IN(float, dbranch), BT_IN(ushort, dbranch16),
                                          BT_IN(float, x), BT_IN(ushort, x16),
                                          BT_IN(float, mean), BT_IN(float, rstd), int rows,
                                          int cols, int x_kind, int kind16, int branch,
                                          int branch_kind, int dout_kind) {
    BT_BIND(dgamma);
    BT_BIND(dbeta);
    BT_BIND(dout);
    BT_BIND(dout16);
    BT_BIND(dbranch);
    BT_BIND(dbranch16);
    BT_BIND(x);
    BT_BIND(x16);
    BT_BIND(mean);
    BT_BIND(rstd);
    __local float red[BT_WG];
    __local float stats[2 * BT_COL_ROWS];
    size_t g, c;
    int lane;
    col_tile((size_t)cols, &g, &c, &lane);
    float ag, ab;
    ln_params_tile(ln_grad_at(dout, dout16, dout_kind, 0),
                   ln_grad_at(dbranch, dbranch16, branch_kind, 0), branch, x, x16, x_kind, kind16,
                   mean, rstd, 0, (size_t)rows, c,
                   (size_t)cols, lane, stats, red, &ag, &ab);
    if (c < (size_t)cols && lane == 0) {
        dgamma[c] += ag;
        dbeta[c] += ab;
    }
}

/* The first pass for more rows: over the rows of chunk g (BT_COL_ROWS rows),
 * partial[p_off + g 2cols + c] = sum dout * xhat and
 * partial[p_off + g 2cols + cols + c] = sum dout: row g of the partials
 * (chunks x 2cols) is dgamma's terms, then dbeta's (dout as ln_dy reads
 * it). Geometry: column tiles,
 * one work-group per (chunk, slab of columns); global:
 * BT_COL_GLOBAL(chunks, cols, BT_WG). Runs before layernorm_bwd_dx. */
BT_KERNEL_WG void bt_layernorm_bwd_params_partial(BT_OUT(float, partial), BT_IN(float, dout),
                                                  BT_IN(ushort, dout16), BT_IN(float, dbranch),
                                                  BT_IN(ushort, dbranch16), BT_IN(float, x),
                                                  BT_IN(ushort, x16), BT_IN(float, mean),
                                                  BT_IN(float, rstd), int rows, int cols,
                                                  int x_kind, int kind16, int branch,
                                                  int branch_kind, int dout_kind) {
    BT_BIND(partial);
    BT_BIND(dout);
    BT_BIND(dout16);
    BT_BIND(dbranch);
    BT_BIND(dbranch16);
    BT_BIND(x);
    BT_BIND(x16);
    BT_BIND(mean);
    BT_BIND(rstd);
    __local float red[BT_WG];
    __local float stats[2 * BT_COL_ROWS];
    size_t g, c;
    int lane;
    col_tile((size_t)cols, &g, &c, &lane);
    const size_t r0 = g * BT_COL_ROWS, r1 = bt_min_size(r0 + BT_COL_ROWS, (size_t)rows);
    float ag, ab;
    ln_params_tile(ln_grad_at(dout, dout16, dout_kind, 0),
                   ln_grad_at(dbranch, dbranch16, branch_kind, 0), branch, x, x16, x_kind, kind16,
                   mean, rstd, r0, r1, c,
                   (size_t)cols, lane, stats, red, &ag, &ab);
    if (c < (size_t)cols && lane == 0) {
        partial += g * 2 * (size_t)cols + c;
        partial[0] = ag;
        partial[cols] = ab;
    }
}

/* The second pass: element j of (dgamma | dbeta), j < 2 cols, += the sum of
 * column j of layernorm_bwd_params_partial's partials (chunks x 2cols), in
 * bias_grad's order. Geometry: column tiles over the 2 cols columns, one
 * work-group per slab; global: BT_COL_GLOBAL(1, 2 cols, BT_WG). */
BT_KERNEL_WG void bt_layernorm_bwd_params_sum(BT_OUT(float, dgamma), BT_OUT(float, dbeta),
                                              BT_IN(float, partial), int chunks, int cols) {
    BT_BIND(dgamma);
    BT_BIND(dbeta);
    BT_BIND(partial);
    __local float red[BT_WG];
    const size_t n = 2 * (size_t)cols;
    size_t g, j;
    int lane;
    col_tile(n, &g, &j, &lane);
    float acc = j < n ? col_rows_sum(partial + j, 0, (size_t)chunks, n, lane, BT_KIND16_NONE) : 0.0f;
    acc = col_lanes_sum(acc, red);
    if (j >= n || lane != 0) return;
    if (j < (size_t)cols)
        dgamma[j] += acc;
    else
        dbeta[j - cols] += acc;
}
