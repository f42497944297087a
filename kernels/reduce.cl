/* Reductions: bias_grad (column sums in column tiles), sum / sumsq partials,
 * all_finite. */

/* dbias[c] += sum_r dy[r, c], each dy rounded to the storage kind kind16 as
 * it is read (BT_KIND16_NONE: as it is)                  dy: (rows, cols)
 * for rows <= BT_COL_ROWS, and as the second pass of more rows over
 * bias_grad_partial's chunk partials (chunks x cols) and over
 * embed_bwd_type_partial's (chunks x TV*C, onto dwtt). Geometry: column
 * tiles (constants.h, BT_COL_SLAB), one work-group per slab of columns, the
 * row lanes over all the rows; global: BT_COL_GLOBAL(1, cols, BT_WG). */
BT_KERNEL_WG void bt_bias_grad(BT_OUT(float, dbias), BT_IN(float, dy), int rows, int cols,
                               int kind16) {
    BT_BIND(dbias);
    BT_BIND(dy);
    __local float red[BT_WG];
    size_t g, c;
    int lane;
    col_tile((size_t)cols, &g, &c, &lane);
    const bool in = c < (size_t)cols;
    float acc = in ? col_rows_sum(dy + c, 0, (size_t)rows, (size_t)cols, lane, kind16) : 0.0f;
    acc = col_lanes_sum(acc, red);
    if (in && lane == 0) dbias[c] += acc;
}

/* bias_grad's first pass for more rows: partial[p_off + g cols + c] = sum
 * of dy[r, c] (rounded to kind16 as read, as bias_grad; with dy_is16 read
 * from dy16, values of kind16) over the rows r of chunk g (BT_COL_ROWS
 * rows), in bias_grad's order within the chunk. Geometry: column tiles, one
 * work-group per (chunk, slab of columns); global: BT_COL_GLOBAL(chunks,
 * cols, BT_WG). */
BT_KERNEL_WG void bt_bias_grad_partial(BT_OUT(float, partial), BT_IN(float, dy),
                                       BT_IN(ushort, dy16), int rows, int cols, int kind16,
                                       int dy_is16) {
    BT_BIND(partial);
    BT_BIND(dy);
    BT_BIND(dy16);
    __local float red[BT_WG];
    size_t g, c;
    int lane;
    col_tile((size_t)cols, &g, &c, &lane);
    const size_t r0 = g * BT_COL_ROWS, r1 = bt_min_size(r0 + BT_COL_ROWS, (size_t)rows);
    const bool in = c < (size_t)cols;
    float acc = 0.0f;
    if (in && dy_is16)
        for (size_t r = r0 + (size_t)lane; r < r1; r += BT_LANES)
            acc += kind16_value(dy16[r * cols + c], kind16);
    else if (in)
        acc = col_rows_sum(dy + c, r0, r1, (size_t)cols, lane, kind16);
    acc = col_lanes_sum(acc, red);
    if (in && lane == 0) partial[g * cols + c] = acc;
}

/* partial[p_off + g] = sum of x over chunk g of BT_REDUCE_CHUNK elements.
 * Geometry: one work-group of BT_WG per chunk; work-item l adds elements l,
 * l + BT_WG, ... of the chunk in order, then a fixed tree in local memory.
 * The host adds the partials in chunk order. global: chunks * BT_WG. */
BT_KERNEL_WG void bt_sum_partial(BT_OUT(float, partial), BT_IN(float, x), ulong n) {
    BT_BIND(partial);
    BT_BIND(x);
    __local float red[BT_WG];
    const size_t g = get_group_id(0), lid = get_local_id(0);
    const size_t i0 = g * BT_REDUCE_CHUNK, i1 = bt_min_size(i0 + BT_REDUCE_CHUNK, (size_t)n);
    float s = 0.0f;
    for (size_t i = i0 + lid; i < i1; i += BT_WG) s += x[i];
    s = wg_sum(s, red);
    if (lid == 0) partial[g] = s;
}

/* partial[p_off + g] = sum of x^2 over chunk g (as sum_partial). */
BT_KERNEL_WG void bt_sumsq_partial(BT_OUT(float, partial), BT_IN(float, x), ulong n) {
    BT_BIND(partial);
    BT_BIND(x);
    __local float red[BT_WG];
    const size_t g = get_group_id(0), lid = get_local_id(0);
    const size_t i0 = g * BT_REDUCE_CHUNK, i1 = bt_min_size(i0 + BT_REDUCE_CHUNK, (size_t)n);
    float s = 0.0f;
    for (size_t i = i0 + lid; i < i1; i += BT_WG) s += x[i] * x[i];
    s = wg_sum(s, red);
    if (lid == 0) partial[g] = s;
}

/* flag[flag_off] = 1 when some x[i] is NaN or Inf (the host zeroes it
 * first). Every writer stores the same value, so the result is
 * deterministic. global: n. */
BT_KERNEL void bt_all_finite(BT_OUT(float, flag), BT_IN(float, x), ulong n) {
    BT_BIND(flag);
    BT_BIND(x);
    const size_t i = get_global_id(0);
    if (i < n && !isfinite(x[i])) flag[0] = 1.0f;
}
