/* Elementwise ops: fill, add, scale, axpy, bias_add, GELU and tanh forward and
 * backward (tanh in fp32 and in 16 bits), dropout. Geometry: one work-item
 * per element (dropout: per four elements), work-groups of BT_WG, global
 * size n rounded up to BT_WG.
 * Outputs may alias inputs read at the same index (backend.h). */

/* out[i] = value                                         out: (n) */
BT_KERNEL void bt_fill(BT_OUT(float, out), float value, ulong n) {
    BT_BIND(out);
    const size_t i = get_global_id(0);
    if (i < n) out[i] = value;
}

/* out = a + b                                            (n) */
BT_KERNEL void bt_add(BT_OUT(float, out), BT_IN(float, a), BT_IN(float, b), ulong n) {
    BT_BIND(out);
    BT_BIND(a);
    BT_BIND(b);
    const size_t i = get_global_id(0);
    if (i < n) out[i] = a[i] + b[i];
}

/* x *= alpha                                             (n) */
BT_KERNEL void bt_scale(BT_OUT(float, x), float alpha, ulong n) {
    BT_BIND(x);
    const size_t i = get_global_id(0);
    if (i < n) x[i] *= alpha;
}

/* y += alpha * x                                         (n) */
BT_KERNEL void bt_axpy(BT_OUT(float, y), float alpha, BT_IN(float, x), ulong n) {
    BT_BIND(y);
    BT_BIND(x);
    const size_t i = get_global_id(0);
    if (i < n) y[i] += alpha * x[i];
}

/* y[r, c] += bias[c], rounded to the storage kind kind16 (BT_KIND16_NONE:
 * not rounded); with BT_COPY16_OUT in copies16 y16 takes the sum in kind16
 * too, and with BT_COPY16_OUT_ONLY y is not written (the copy is all that
 * reads it); with BT_COPY16_ZERO_Y as well y is not read either, but taken
 * as zero: y16 gets the bias broadcast (0 + bias[c]) to every row.
 *                                                 y, y16: (rows, cols)
 * Geometry: BT_BIAS_ROWS rows of a column per work-item (constants.h);
 * global: BT_BIAS_ITEMS(rows, cols). */
BT_KERNEL void bt_bias_add(BT_OUT(float, y), BT_IN(float, bias), BT_OUT(ushort, y16), int rows,
                           int cols, int kind16, int copies16) {
    BT_BIND(y);
    BT_BIND(bias);
    BT_BIND(y16);
    const size_t item = get_global_id(0);
    if (item >= BT_BIAS_ITEMS(rows, cols)) return;
    const int c = (int)(item % (size_t)cols);
    const size_t r0 = item / (size_t)cols * BT_BIAS_ROWS,
                 r1 = bt_min_size(r0 + BT_BIAS_ROWS, (size_t)rows);
    const float b = bias[c];
    for (size_t i = r0 * cols + c; i < r1 * cols; i += cols) {
        const float v = round_kind16((copies16 & BT_COPY16_ZERO_Y ? 0.0f : y[i]) + b, kind16);
        if (!(copies16 & BT_COPY16_OUT_ONLY)) y[i] = v;
        if (copies16 & BT_COPY16_OUT) y16[i] = f32_to_kind16(v, kind16);
    }
}

/* x[s, c] = dropout of x[s, c] as element idx[s] * cols + c of a dropout
 * over every row (bt_dropout's draws: drop_keep_at): some rows of a batch
 * with the masks they have among all. In place.      x: (n_idx, cols)
 * Geometry: four consecutive columns of a row per work-item (one Philox
 * block where they share one); global: n_idx * ceil(cols / 4). */
BT_KERNEL void bt_dropout_rows(BT_OUT(float, x), BT_IN(int, idx), int n_idx, int cols,
                               ulong per_sample, uint first_sample, uint thr, float keep_scale,
                               uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi) {
    BT_BIND(x);
    BT_BIND(idx);
    const size_t quads = (size_t)(cols + 3) / 4, item = get_global_id(0);
    if (item >= (size_t)n_idx * quads) return;
    const size_t s = item / quads, c0 = item % quads * 4;
    const size_t row = (size_t)idx[s] * (size_t)cols; /* its first element among all rows */
    ulong drawn = ~(ulong)0;
    uint r[4];
    for (size_t c = c0; c < c0 + 4 && c < (size_t)cols; c++) {
        const size_t e = row + c, i = s * (size_t)cols + c;
        const bool keep = drop_keep_at((uint)(e / per_sample), e % per_sample, first_sample, thr,
                                       seed_lo, seed_hi, stream_lo, stream_hi, &drawn, r);
        x[i] = keep ? x[i] * keep_scale : 0.0f;
    }
}

/* out = x * Phi(x), the exact erf GELU                   (n) */
BT_KERNEL void bt_gelu_fwd(BT_OUT(float, out), BT_IN(float, x), ulong n) {
    BT_BIND(out);
    BT_BIND(x);
    const size_t i = get_global_id(0);
    if (i >= n) return;
    const float xi = x[i];
    out[i] = gelu_value(xi);
}

/* dx = dout * (Phi(x) + x * phi(x))                      (n) */
BT_KERNEL void bt_gelu_bwd(BT_OUT(float, dx), BT_IN(float, dout), BT_IN(float, x), ulong n) {
    BT_BIND(dx);
    BT_BIND(dout);
    BT_BIND(x);
    const size_t i = get_global_id(0);
    if (i >= n) return;
    dx[i] = dout[i] * gelu_grad_value(x[i]);
}

/* out = tanh(x)                                          (n) */
BT_KERNEL void bt_tanh_fwd(BT_OUT(float, out), BT_IN(float, x), ulong n) {
    BT_BIND(out);
    BT_BIND(x);
    const size_t i = get_global_id(0);
    if (i < n) out[i] = tanh(x[i]);
}

/* dx = dout * (1 - y^2), y = tanh output                 (n) */
BT_KERNEL void bt_tanh_bwd(BT_OUT(float, dx), BT_IN(float, dout), BT_IN(float, y), ulong n) {
    BT_BIND(dx);
    BT_BIND(dout);
    BT_BIND(y);
    const size_t i = get_global_id(0);
    if (i >= n) return;
    const float yi = y[i];
    dx[i] = dout[i] * (1.0f - yi * yi);
}

/* out = tanh(x) in the 16-bit storage kind `kind` (BT_KIND16_BF16 or _F16):
 * x read as it is, out rounded to the kind as it is written.     (n) */
BT_KERNEL void bt_tanh_fwd16(BT_OUT(ushort, out), BT_IN(ushort, x), ulong n, int kind) {
    BT_BIND(out);
    BT_BIND(x);
    const size_t i = get_global_id(0);
    if (i < n) out[i] = f32_to_kind16(tanh(kind16_value(x[i], kind)), kind);
}

/* dx = dout * (1 - y^2) in the 16-bit storage kind `kind`: dout and y read
 * as they are, dx rounded to the kind as it is written.          (n) */
BT_KERNEL void bt_tanh_bwd16(BT_OUT(ushort, dx), BT_IN(ushort, dout), BT_IN(ushort, y), ulong n,
                             int kind) {
    BT_BIND(dx);
    BT_BIND(dout);
    BT_BIND(y);
    const size_t i = get_global_id(0);
    if (i >= n) return;
    const float yi = kind16_value(y[i], kind);
    dx[i] = f32_to_kind16(kind16_value(dout[i], kind) * (1.0f - yi * yi), kind);
}

/* out[i] = draw >= thr ? in[i] * keep_scale : 0, for `samples` samples of
 * per_sample elements starting at sample first_sample. One work-item per
 * Philox block: four consecutive elements of one sample (the last block of a
 * sample may be partial). thr and keep_scale = 1/(1-p) come from the host, so
 * they round exactly as on the CPU. in is read from in16 in the 16-bit kind
 * in_kind (BT_KIND16_NONE: from in, fp32); out is written where f32_out, and
 * out16 takes out in the kind out16_kind (BT_KIND16_NONE: not written).
 * global: samples * blocks_per_sample. */
BT_KERNEL void bt_dropout(BT_OUT(float, out), BT_IN(float, in), BT_OUT(ushort, out16),
                          BT_IN(ushort, in16), ulong per_sample, ulong blocks_per_sample,
                          ulong blocks, int in_kind, int out16_kind, int f32_out,
                          uint first_sample, uint thr, float keep_scale, uint seed_lo,
                          uint seed_hi, uint stream_lo, uint stream_hi) {
    BT_BIND(out);
    BT_BIND(in);
    BT_BIND(out16);
    BT_BIND(in16);
    const size_t blk = get_global_id(0);
    if (blk >= blocks) return;
    uint r[4];
    size_t e0;
    const size_t base = drop_block(blk, per_sample, blocks_per_sample, first_sample, seed_lo,
                                   seed_hi, stream_lo, stream_hi, r, &e0);
    for (size_t e = e0; e < e0 + 4 && e < per_sample; e++) {
        const size_t i = base + e;
        const float x = in_kind != BT_KIND16_NONE ? kind16_value(in16[i], in_kind) : in[i];
        const float y = r[e & 3] >= thr ? x * keep_scale : 0.0f;
        if (f32_out) out[i] = y;
        if (out16_kind != BT_KIND16_NONE) out16[i] = f32_to_kind16(y, out16_kind);
    }
}
