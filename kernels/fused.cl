/* Fused kernels: bias + GELU, bias + dropout + residual, residual +
 * LayerNorm, softmax + dropout. Each computes the expressions of the kernels
 * it replaces, in their order and with their reduction trees, so it gives
 * their bits while reading and writing the activations once. Dropout's keep
 * decision is drop_keep (philox.cl): one Philox block per element here, where
 * dropout shares one between four. */

/* y[r, c] += bias[c], rounded to the storage kind kind16 (BT_KIND16_NONE:
 * not rounded); out[r, c] = gelu(y[r, c]), rounded to kind16 too; with copies16's BT_COPY16_OUT
 * and _IN bits out16 and y16 take out and y in kind16 too (else they are
 * not touched), with BT_COPY16_OUT_ONLY out16 only (out is not touched),
 * with BT_COPY16_IN_ONLY y16 only (y keeps its input); with
 * BT_COPY16_IN_GIVEN (and _IN_ONLY) y16 holds the pre-activation instead,
 * in kind16, read as it is: no bias added, y and bias not read.
 *                        y, out, y16, out16: (rows, cols)
 * Geometry: BT_BIAS_ROWS rows of a column per work-item, as bias_add;
 * global: BT_BIAS_ITEMS(rows, cols). */
BT_KERNEL void bt_bias_gelu_fwd(BT_OUT(float, out), BT_OUT(float, y), BT_IN(float, bias),
                                BT_OUT(ushort, out16), BT_OUT(ushort, y16), int rows, int cols,
                                int kind16, int copies16) {
    BT_BIND(out);
    BT_BIND(y);
    BT_BIND(bias);
    BT_BIND(out16);
    BT_BIND(y16);
    const size_t item = get_global_id(0);
    if (item >= BT_BIAS_ITEMS(rows, cols)) return;
    const size_t c = item % (size_t)cols, r0 = item / (size_t)cols * BT_BIAS_ROWS,
                 r1 = bt_min_size(r0 + BT_BIAS_ROWS, (size_t)rows);
    const float b = copies16 & BT_COPY16_IN_GIVEN ? 0.0f : bias[c]; /* given: not read */
    for (size_t i = r0 * cols + c; i < r1 * cols; i += cols) {
        const float v = copies16 & BT_COPY16_IN_GIVEN ? kind16_value(y16[i], kind16)
                                                      : round_kind16(y[i] + b, kind16);
        const float g = round_kind16(gelu_value(v), kind16);
        if (!(copies16 & BT_COPY16_IN_ONLY)) y[i] = v;
        if (!(copies16 & BT_COPY16_OUT_ONLY)) out[i] = g;
        if (copies16 & BT_COPY16_OUT) out16[i] = f32_to_kind16(g, kind16);
        if (copies16 & BT_COPY16_IN) y16[i] = f32_to_kind16(v, kind16);
    }
}

/* dx = dout * gelu'(x), dout rounded to the storage kind kind16 as it is read
 * and dx as it is written (BT_KIND16_NONE: neither), x read from x16 in
 * kind16 where x_is16 (else from x), dout from dout16 in kind16 where
 * dout_is16 (read as it is; dx then does not overlap it), dx16 taking dx
 * in kind16 too where
 * copies16 has BT_COPY16_OUT (with BT_COPY16_OUT_ONLY dx is not written),
 * for rows [g chunk_rows, (g+1) chunk_rows) of column c, and
 * their column sum: partial[g cols + c] = sum (accumulate = 0: as
 * bias_grad_partial, then bias_grad over the partials), or += sum
 * (accumulate = 1, one chunk: as bias_grad's one pass), in bias_grad's
 * order. dx may alias dout. Geometry: column tiles (constants.h,
 * BT_COL_SLAB), one work-group per (chunk, slab of columns); global:
 * BT_COL_GLOBAL(chunks, cols, BT_WG). */
BT_KERNEL_WG void bt_bias_gelu_bwd(BT_OUT(float, partial), BT_OUT(float, dx), BT_IN(float, dout),
                                   BT_IN(ushort, dout16), BT_IN(float, x), BT_IN(ushort, x16),
                                   BT_OUT(ushort, dx16), int rows, int cols, int chunk_rows,
                                   int accumulate, int kind16, int x_is16, int dout_is16,
                                   int copies16) {
    BT_BIND(partial);
    BT_BIND(dx);
    BT_BIND(dout);
    BT_BIND(dout16);
    BT_BIND(x);
    BT_BIND(x16);
    BT_BIND(dx16);
    __local float red[BT_WG];
    size_t g, c;
    int lane;
    col_tile((size_t)cols, &g, &c, &lane);
    const size_t r0 = g * (size_t)chunk_rows;
    const size_t r1 = bt_min_size(r0 + (size_t)chunk_rows, (size_t)rows);
    const bool in = c < (size_t)cols;
    float acc = 0.0f;
    for (size_t r = r0 + (size_t)lane; in && r < r1; r += BT_LANES) {
        const size_t k = r * cols + c;
        const float xk = x_is16 ? kind16_value(x16[k], kind16) : x[k];
        const float dk =
            dout_is16 ? kind16_value(dout16[k], kind16) : round_kind16(dout[k], kind16);
        const float v = round_kind16(dk * gelu_grad_value(xk), kind16);
        if (!(copies16 & BT_COPY16_OUT_ONLY)) dx[k] = v;
        if (copies16 & BT_COPY16_OUT) dx16[k] = f32_to_kind16(v, kind16);
        acc += v;
    }
    acc = col_lanes_sum(acc, red);
    if (!in || lane != 0) return;
    if (accumulate)
        partial[c] += acc;
    else
        partial[g * cols + c] = acc;
}

/* The join of a residual branch: resid + dropout(y + b) at element i (b:
 * the bias of its column), y + b and the sum rounded to the storage kind
 * kind16 (BT_KIND16_NONE: not rounded). resid16 (0: none) holds the
 * residual in kind16 instead of resid, read as it is. */
BT_FN float join_value(__global const float *y, float b, __global const float *resid,
                       __global const ushort *resid16, size_t i, int kind16, ulong per_sample,
                       uint first_sample, uint thr, float keep_scale, uint seed_lo,
                       uint seed_hi, uint stream_lo, uint stream_hi) {
    float v = round_kind16(y[i] + b, kind16);
    if (thr)
        v = drop_keep(i, per_sample, first_sample, thr, seed_lo, seed_hi, stream_lo, stream_hi)
                ? v * keep_scale : 0.0f;
    return round_kind16(v + (resid16 ? kind16_value(resid16[i], kind16) : resid[i]), kind16);
}

/* out = resid + dropout(y + bias), rounded as join_value
 * y, resid, out: (rows, cols)
 * thr = 0: no dropout. Geometry: BT_BIAS_ROWS rows of a column per
 * work-item, as bias_add; global: BT_BIAS_ITEMS(rows, cols). */
BT_KERNEL void bt_bias_dropout_add(BT_OUT(float, out), BT_IN(float, y), BT_IN(float, bias),
                                   BT_IN(float, resid), int rows, int cols, int kind16,
                                   ulong per_sample,
                                   uint first_sample, uint thr, float keep_scale, uint seed_lo,
                                   uint seed_hi, uint stream_lo, uint stream_hi) {
    BT_BIND(out);
    BT_BIND(y);
    BT_BIND(bias);
    BT_BIND(resid);
    const size_t item = get_global_id(0);
    if (item >= BT_BIAS_ITEMS(rows, cols)) return;
    const size_t c = item % (size_t)cols, r0 = item / (size_t)cols * BT_BIAS_ROWS,
                 r1 = bt_min_size(r0 + BT_BIAS_ROWS, (size_t)rows);
    const float b = bias[c];
    for (size_t i = r0 * cols + c; i < r1 * cols; i += cols)
        out[i] = join_value(y, b, resid, 0, i, kind16, per_sample, first_sample, thr, keep_scale,
                            seed_lo, seed_hi, stream_lo, stream_hi);
}

/* out = dropout(a + b): b rounded to the storage kind kind16 as it is read
 * (b_is16: read from b16 in kind16 as it is), the sum rounded to kind16
 * (BT_KIND16_NONE: neither rounded), then dropout's arithmetic with its
 * draws; out not rounded. out may alias a.             a, b, out: (n)
 * Geometry: as dropout: four consecutive elements of a sample per
 * work-item, one Philox block; global: blocks (n / per_sample samples of
 * blocks_per_sample = ceil(per_sample / 4)). */
BT_KERNEL void bt_add_dropout(BT_OUT(float, out), BT_IN(float, a), BT_IN(float, b),
                              BT_IN(ushort, b16), ulong per_sample, ulong blocks_per_sample,
                              ulong blocks, int b_is16, int kind16, uint first_sample, uint thr,
                              float keep_scale, uint seed_lo, uint seed_hi, uint stream_lo,
                              uint stream_hi) {
    BT_BIND(out);
    BT_BIND(a);
    BT_BIND(b);
    BT_BIND(b16);
    const size_t blk = get_global_id(0);
    if (blk >= blocks) return;
    uint r[4];
    size_t e0;
    const size_t base = drop_block(blk, per_sample, blocks_per_sample, first_sample, seed_lo,
                                   seed_hi, stream_lo, stream_hi, r, &e0);
    for (size_t e = e0; e < e0 + 4 && e < per_sample; e++) {
        const size_t i = base + e;
        const float bv = b_is16 ? kind16_value(b16[i], kind16) : round_kind16(b[i], kind16);
        const float x = round_kind16(a[i] + bv, kind16);
        out[i] = r[e & 3] >= thr ? x * keep_scale : 0.0f;
    }
}

/* sum = resid + dropout(y + bias) (rounded as join_value), then out =
 * LayerNorm(sum) with mean and rstd saved, layernorm_fwd's arithmetic, out
 * rounded to the storage kind kind16 (BT_KIND16_NONE: not rounded). sum may
 * alias resid. With copies16's BT_COPY16_IN and _OUT bits, sum16 and out16
 * take sum and out in kind16 too (else they are not touched); with
 * BT_COPY16_IN_ONLY sum is not written where the row fits in registers, with
 * BT_COPY16_OUT_ONLY out is not written. resid_is16: the residual is resid16,
 * in kind16 (resid not read).
 * Geometry: as layernorm_fwd: BT_ROW_LANES work-items a row, lane l owning
 * columns l, l + BT_ROW_LANES, ..., the sums kept in registers where the row
 * fits (BT_LN_CACHED); global: BT_ROW_GLOBAL(rows, BT_WG). */
BT_KERNEL_WG void bt_residual_layernorm_fwd(BT_OUT(float, sum), BT_OUT(float, out),
                                            BT_OUT(float, mean), BT_OUT(float, rstd),
                                            BT_IN(float, y), BT_IN(float, bias),
                                            BT_IN(float, resid), BT_IN(ushort, resid16),
                                            BT_IN(float, gamma), BT_IN(float, beta),
                                            BT_OUT(ushort, sum16), BT_OUT(ushort, out16),
                                            int rows, int cols, float eps, int kind16,
                                            int copies16, int resid_is16,
                                            ulong per_sample, uint first_sample, uint thr,
                                            float keep_scale, uint seed_lo, uint seed_hi,
                                            uint stream_lo, uint stream_hi) {
    BT_BIND(sum);
    BT_BIND(out);
    BT_BIND(mean);
    BT_BIND(rstd);
    BT_BIND(y);
    BT_BIND(bias);
    BT_BIND(resid);
    BT_BIND(resid16);
    BT_BIND(gamma);
    BT_BIND(beta);
    BT_BIND(sum16);
    BT_BIND(out16);
    __local float red[BT_WG];
    __local float lbias[BT_LN_ROW_MAX], lgamma[BT_LN_ROW_MAX], lbeta[BT_LN_ROW_MAX];
    const int r = row_of(), n = r < rows ? cols : 0;
    const size_t row = (size_t)(n ? r : 0) * cols;
    __global float *x = sum + row;
    __global float *o = copies16 & BT_COPY16_OUT_ONLY ? 0 : out + row;
    __global ushort *x16 = copies16 & BT_COPY16_IN ? sum16 + row : 0;
    __global ushort *o16 = copies16 & BT_COPY16_OUT ? out16 + row : 0;
    __global const ushort *r16 = resid_is16 ? resid16 : 0;
    float m, rs;
    if (BT_LN_CACHED(cols)) { /* the sums kept in registers as they are written; the
                               * parameter vectors read once a work-group */
        stage_vector(lbias, bias, cols);
        stage_vector(lgamma, gamma, cols);
        stage_vector(lbeta, beta, cols);
        float xv[BT_LN_LANE_COLS];
        BT_UNROLL for (int k = 0; k < BT_LN_LANE_COLS; k++) {
            const int c = ln_lane_col(k);
            xv[k] = 0.0f;
            if (c < n) {
                xv[k] = join_value(y, lbias[c], resid, r16, row + c, kind16, per_sample,
                                   first_sample, thr, keep_scale, seed_lo, seed_hi, stream_lo,
                                   stream_hi);
                if (!(copies16 & BT_COPY16_IN_ONLY)) x[c] = xv[k];
                if (x16) x16[c] = f32_to_kind16(xv[k], kind16);
            }
        }
        rs = layernorm_row_cached(o, o16, xv, lgamma, lbeta, n, eps, kind16, red, &m);
    } else {
        for (int c = get_local_id(0) % BT_ROW_LANES; c < n; c += BT_ROW_LANES) {
            const float v = join_value(y, bias[c], resid, r16, row + c, kind16, per_sample,
                                       first_sample, thr, keep_scale, seed_lo, seed_hi,
                                       stream_lo, stream_hi);
            x[c] = v;
            if (x16) x16[c] = f32_to_kind16(v, kind16);
        }
        /* each lane reads back only its own columns before the trees */
        rs = layernorm_row(o, o16, x, gamma, beta, n, eps, kind16, red, &m);
    }
    if (n && get_local_id(0) % BT_ROW_LANES == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* probs = softmax_fwd(scores) (in place allowed), rounded to the storage
 * kind kind16 (BT_KIND16_NONE: not rounded), dropped = dropout(probs) with
 * per_sample = H T T (softmax_fwd's arithmetic, round16's, then dropout's, a
 * lane's four keys from one Philox block where the row allows it). With
 * copies16's BT_COPY16_OUT and _IN bits, dropped16 and probs16 take dropped
 * and probs in kind16 too (else they are not touched), with BT_COPY16_OUT_ONLY
 * dropped16 only (dropped is not touched), with BT_COPY16_IN_ONLY probs16
 * alone where the row fits in registers (elsewhere probs is its scratch).
 * Geometry: as softmax_fwd (the row read once, the probabilities written
 * once where it fits). */
BT_KERNEL_WG void bt_softmax_dropout_fwd(BT_OUT(float, dropped), BT_OUT(float, probs),
                                         BT_IN(float, scores), BT_IN(int, key_mask),
                                         BT_OUT(ushort, dropped16), BT_OUT(ushort, probs16),
                                         int rows, int HT, int T, float scale, int kind16,
                                         int copies16, uint first_sample, uint thr,
                                         float keep_scale, uint seed_lo, uint seed_hi,
                                         uint stream_lo, uint stream_hi) {
    BT_BIND(dropped);
    BT_BIND(probs);
    BT_BIND(scores);
    BT_BIND(key_mask);
    BT_BIND(dropped16);
    BT_BIND(probs16);
    __local float red[BT_WG];
    __local int lkm[BT_ROW_LANES * BT_SM_LANE_KEYS];
    const int r = row_of(), n = row_keys(r, rows, T), lane = get_local_id(0) % BT_ROW_LANES;
    const int rr = n ? r : 0;
    const size_t row = (size_t)rr * T;
    const ulong e_row = (ulong)(rr % HT) * T; /* the row's first element in its sample */
    __global float *p = probs + row, *pd = dropped + row;
    __global ushort *pd16 = copies16 & BT_COPY16_OUT ? dropped16 + row : 0;
    __global ushort *p16 = copies16 & BT_COPY16_IN ? probs16 + row : 0;
    __global const int *km = key_mask + (size_t)(rr / HT) * T;
    ulong drawn = ~(ulong)0;
    uint draw[4];
    if (BT_SM_CACHED(T)) { /* the row read once, the probabilities written once, the
                            * mask read once a work-group (stage_key_mask) */
        float v[BT_SM_LANE_KEYS];
        const bool staged = stage_key_mask(lkm, key_mask, rows, HT, T);
        softmax_row_cached(copies16 & BT_COPY16_IN_ONLY ? 0 : p, scores + row, km, lkm, staged,
                           n, scale, kind16, red, v);
        BT_UNROLL for (int k = 0; k < BT_SM_LANE_KEYS; k++) {
            const int j = sm_lane_key(k);
            if (j >= n) continue;
            const float d = drop_keep_at((uint)(rr / HT), e_row + j, first_sample, thr, seed_lo,
                                         seed_hi, stream_lo, stream_hi, &drawn, draw)
                                ? v[k] * keep_scale
                                : 0.0f;
            if (!(copies16 & BT_COPY16_OUT_ONLY)) pd[j] = d;
            if (pd16) pd16[j] = f32_to_kind16(d, kind16);
            if (p16) p16[j] = f32_to_kind16(v[k], kind16);
        }
        return;
    }
    softmax_row(p, scores + row, km, n, scale, red);
    ROW_KEYS_FOR(j, lane, n) { /* the keys this work-item wrote */
        const float pj = round_kind16(p[j], kind16);
        if (kind16 != BT_KIND16_NONE) p[j] = pj;
        const float d = drop_keep_at((uint)(rr / HT), e_row + j, first_sample, thr, seed_lo,
                                     seed_hi, stream_lo, stream_hi, &drawn, draw)
                            ? pj * keep_scale
                            : 0.0f;
        if (!(copies16 & BT_COPY16_OUT_ONLY)) pd[j] = d;
        if (pd16) pd16[j] = f32_to_kind16(d, kind16);
        if (p16) p16[j] = f32_to_kind16(pj, kind16);
    }
}

/* dscores = softmax_bwd(dropout(dprobs), probs), the dropout with
 * per_sample = H T T, rounded to the storage kind kind16 (BT_KIND16_NONE: not
 * rounded); in place allowed (each work-item rewrites the keys it read).
 * probs is read from probs16 in the kind probs_kind (BT_KIND16_NONE: from
 * probs, fp32); with copies16's
 * BT_COPY16_OUT bit dscores16 takes dscores in kind16 too, with
 * BT_COPY16_OUT_ONLY alone where the row fits in registers (elsewhere
 * dscores is the row's scratch).
 * Geometry: as softmax_bwd (dprobs and probs read once where the row fits). */
BT_KERNEL_WG void bt_dropout_softmax_bwd(BT_OUT(float, dscores), BT_IN(float, dprobs),
                                         BT_IN(float, probs), BT_IN(ushort, probs16),
                                         BT_OUT(ushort, dscores16), int rows, int HT, int T,
                                         float scale, int kind16, int probs_kind, int copies16,
                                         uint first_sample, uint thr, float keep_scale,
                                         uint seed_lo, uint seed_hi, uint stream_lo,
                                         uint stream_hi) {
    BT_BIND(dscores);
    BT_BIND(dprobs);
    BT_BIND(probs);
    BT_BIND(probs16);
    BT_BIND(dscores16);
    __local float red[BT_WG];
    const int r = row_of(), n = row_keys(r, rows, T), lane = get_local_id(0) % BT_ROW_LANES;
    const int rr = n ? r : 0;
    const size_t row = (size_t)rr * T;
    const ulong e_row = (ulong)(rr % HT) * T;
    __global const float *dp = dprobs + row, *p = probs + row;
    __global const ushort *p16 = probs_kind != BT_KIND16_NONE ? probs16 + row : 0;
    __global float *ds = dscores + row;
    __global ushort *ds16 = copies16 & BT_COPY16_OUT ? dscores16 + row : 0;
    ulong drawn = ~(ulong)0;
    uint draw[4];
    float dot = 0.0f;
    if (BT_SM_CACHED(T)) { /* the dropped dp and p kept in registers */
        float gv[BT_SM_LANE_KEYS], pv[BT_SM_LANE_KEYS];
        BT_UNROLL for (int k = 0; k < BT_SM_LANE_KEYS; k++) {
            const int j = sm_lane_key(k);
            gv[k] = pv[k] = 0.0f;
            if (j >= n) continue;
            gv[k] = drop_keep_at((uint)(rr / HT), e_row + j, first_sample, thr, seed_lo, seed_hi,
                                 stream_lo, stream_hi, &drawn, draw)
                        ? dp[j] * keep_scale
                        : 0.0f;
            pv[k] = p16 ? kind16_value(p16[j], probs_kind) : p[j];
            dot += gv[k] * pv[k];
        }
        dot = row_sum(dot, red);
        BT_UNROLL for (int k = 0; k < BT_SM_LANE_KEYS; k++) {
            const int j = sm_lane_key(k);
            if (j >= n) continue;
            const float v = round_kind16(scale * pv[k] * (gv[k] - dot), kind16);
            if (!(copies16 & BT_COPY16_OUT_ONLY)) ds[j] = v;
            if (ds16) ds16[j] = f32_to_kind16(v, kind16);
        }
        return;
    }
    ROW_KEYS_FOR(j, lane, n) {
        const float g = drop_keep_at((uint)(rr / HT), e_row + j, first_sample, thr, seed_lo,
                                     seed_hi, stream_lo, stream_hi, &drawn, draw)
                            ? dp[j] * keep_scale
                            : 0.0f;
        ds[j] = g;
        dot += g * (p16 ? kind16_value(p16[j], probs_kind) : p[j]);
    }
    dot = row_sum(dot, red);
    ROW_KEYS_FOR(j, lane, n) {
        const float pj = p16 ? kind16_value(p16[j], probs_kind) : p[j];
        const float v = round_kind16(scale * pj * (ds[j] - dot), kind16);
        ds[j] = v;
        if (ds16) ds16[j] = f32_to_kind16(v, kind16);
    }
}
