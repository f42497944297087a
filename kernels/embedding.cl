/* Embeddings forward and backward, and row gather / scatter. */

/* out[b,t,:] = wte[ids[b,t]] + wpe[t] + wtt[type_ids[b,t]]
 * out: (N = B*T, C); ids, type_ids: int (N).
 * Geometry: one work-item per output element; global: N * C. */
BT_KERNEL void bt_embed_fwd(BT_OUT(float, out), BT_IN(int, ids), BT_IN(int, tt), BT_IN(float, wte),
                            BT_IN(float, wpe), BT_IN(float, wtt), int N, int T, int C) {
    BT_BIND(out);
    BT_BIND(ids);
    BT_BIND(tt);
    BT_BIND(wte);
    BT_BIND(wpe);
    BT_BIND(wtt);
    const size_t i = get_global_id(0);
    if (i >= (size_t)N * (size_t)C) return;
    const int n = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
    const float e = wte[(size_t)ids[n] * C + c];
    const float p = wpe[(size_t)(n % T) * C + c];
    const float y = wtt[(size_t)tt[n] * C + c];
    out[i] = e + p + y;
}

/* A row lane's share of a column tile of dwtt (TV x C): the sum of dout[n,
 * c] over the tokens n = n0 + lane, n0 + lane + BT_LANES, ... below n1 with
 * type_ids[n] == t, in order, for element i = t C + c (i < TV C). */
BT_FN float type_rows_sum(__global const float *dout, __global const int *tt, size_t n0,
                          size_t n1, size_t i, int C, int lane) {
    const int t = (int)(i / (size_t)C);
    dout += i % (size_t)C;
    float acc = 0.0f;
    for (size_t n = n0 + (size_t)lane; n < n1; n += BT_LANES)
        if (tt[n] == t) acc += dout[n * (size_t)C];
    return acc;
}

/* dwtt[t, c] += dout[n, c] for the tokens n < N with type_ids[n] == t, for
 * N <= BT_COL_ROWS (more: embed_bwd_type_partial, then bias_grad over its
 * partials), in bias_grad's order. Geometry: column tiles (constants.h,
 * BT_COL_SLAB) over the TV * C elements of dwtt, one work-group per slab;
 * global: BT_COL_GLOBAL(1, TV * C, BT_WG). */
BT_KERNEL_WG void bt_embed_bwd_type(BT_OUT(float, dwtt), BT_IN(float, dout), BT_IN(int, tt),
                                    int N, int C, int TV) {
    BT_BIND(dwtt);
    BT_BIND(dout);
    BT_BIND(tt);
    __local float red[BT_WG];
    const size_t n = (size_t)TV * (size_t)C;
    size_t g, i;
    int lane;
    col_tile(n, &g, &i, &lane);
    float acc = i < n ? type_rows_sum(dout, tt, 0, (size_t)N, i, C, lane) : 0.0f;
    acc = col_lanes_sum(acc, red);
    if (i < n && lane == 0) dwtt[i] += acc;
}

/* The first pass of dwtt for more tokens: partial[p_off + (g TV + t) C + c]
 * = the sum of dout[n, c] over the tokens n of chunk g (BT_COL_ROWS tokens)
 * with type_ids[n] == t, in bias_grad's order; bias_grad then adds the
 * partials (chunks x TV*C) onto dwtt (TV x C) in chunk order. Geometry:
 * column tiles over the TV * C elements, one work-group per (chunk, slab);
 * global: BT_COL_GLOBAL(chunks, TV * C, BT_WG). */
BT_KERNEL_WG void bt_embed_bwd_type_partial(BT_OUT(float, partial), BT_IN(float, dout),
                                            BT_IN(int, tt), int N, int C, int TV) {
    BT_BIND(partial);
    BT_BIND(dout);
    BT_BIND(tt);
    __local float red[BT_WG];
    const size_t n = (size_t)TV * (size_t)C;
    size_t g, i;
    int lane;
    col_tile(n, &g, &i, &lane);
    const size_t n0 = g * BT_COL_ROWS, n1 = bt_min_size(n0 + BT_COL_ROWS, (size_t)N);
    float acc = i < n ? type_rows_sum(dout, tt, n0, n1, i, C, lane) : 0.0f;
    acc = col_lanes_sum(acc, red);
    if (i < n && lane == 0) partial[g * n + i] = acc;
}

/* dwpe[t, c] += sum_b dout[b, t, c], b in order.        dwpe: (>= T, C)
 * Geometry: one work-item per (t, c); global: T * C. */
BT_KERNEL void bt_embed_bwd_pos(BT_OUT(float, dwpe), BT_IN(float, dout), int B, int T, int C) {
    BT_BIND(dwpe);
    BT_BIND(dout);
    const size_t i = get_global_id(0);
    if (i >= (size_t)T * (size_t)C) return;
    dout += i;
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * T * C];
    dwpe[i] = acc;
}

/* out[i, :] = src[idx[i], :]                 out: (n_idx, cols); idx: int (n_idx)
 * Geometry: one work-item per output element; global: n_idx * cols. */
BT_KERNEL void bt_gather_rows(BT_OUT(float, out), BT_IN(float, src), BT_IN(int, idx), int n_idx,
                              int cols) {
    BT_BIND(out);
    BT_BIND(src);
    BT_BIND(idx);
    const size_t i = get_global_id(0);
    if (i >= (size_t)n_idx * (size_t)cols) return;
    const int r = (int)(i / (size_t)cols), c = (int)(i % (size_t)cols);
    out[i] = src[(size_t)idx[r] * cols + c];
}

/* dst[idx[i], :] += src[i, :] for i in order (duplicates add up in order),
 * along idx's segments at links (2 n_idx ints: bt_row_links in
 * backends/row_links.h, built on the host: order, then each group's end).
 * Also embed_bwd's dwte[ids[n]] += dout[n] (its pad tokens in no group).
 * Geometry: one work-item per (group g, column c), columns fastest; it owns
 * element c of its index's row of dst and adds the group's tokens onto it in
 * order, the same additions in the same order as one owner per column
 * walking all tokens (no atomics). The tokens come from the order array, so
 * the loads are independent: no chain of pointers. Work-items past the last
 * group (empty segments) return. global: n_idx * cols. */
BT_KERNEL void bt_scatter_rows(BT_OUT(float, dst), BT_IN(float, src), BT_IN(int, idx),
                               BT_IN(int, links), int n_idx, int cols) {
    BT_BIND(dst);
    BT_BIND(src);
    BT_BIND(idx);
    BT_BIND(links);
    const size_t k = get_global_id(0);
    if (k >= (size_t)n_idx * (size_t)cols) return;
    const int g = (int)(k / (size_t)cols), c = (int)(k % (size_t)cols);
    const int s0 = g ? links[n_idx + g - 1] : 0, s1 = links[n_idx + g];
    if (s0 >= s1) return;
    dst += (size_t)idx[links[s0]] * cols + c;
    src += c;
    float acc = *dst;
    for (int s = s0; s < s1; s++) acc += src[(size_t)links[s] * cols];
    *dst = acc;
}
