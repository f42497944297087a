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

/* The chains of equal indices that scatter_rows walks, for idx (n):
 * links[l_off + i] = the smallest j > i with idx[j] == idx[i], or -1, and
 * links[l_off + n + i] = 1 when i is the first token of its index (no j < i
 * has it), else 0. A token whose index is skip (skip >= 0: embed_bwd's
 * pad_id) belongs to no chain: next -1, first 0. Geometry: one work-item per
 * token, comparing its index with the tokens before it up to the previous
 * occurrence and after it up to the next: at most n - 1 integer compares
 * each, under n^2 in all (16.8 million at n = 4096); global: n. */
BT_KERNEL void bt_row_links(BT_OUT(int, links), BT_IN(int, idx), int n, int skip) {
    BT_BIND(links);
    BT_BIND(idx);
    const int i = get_global_id(0);
    if (i >= n) return;
    const int v = idx[i];
    int next = -1, first = 0;
    if (skip < 0 || v != skip) {
        first = 1;
        for (int j = i - 1; j >= 0; j--)
            if (idx[j] == v) {
                first = 0;
                break;
            }
        for (int j = i + 1; j < n; j++)
            if (idx[j] == v) {
                next = j;
                break;
            }
    }
    links[i] = next;
    links[n + i] = first;
}

/* dwtt[t, c] += dout[n, c] for the tokens n < N with type_ids[n] == t, in
 * order, for N <= BT_COL_ROWS (more: embed_bwd_type_partial, then bias_grad
 * over its partials). Geometry: one work-item per element (t, c) of dwtt,
 * walking the tokens in order (the CPU backend's order and bits); global:
 * TV * C. */
BT_KERNEL void bt_embed_bwd_type(BT_OUT(float, dwtt), BT_IN(float, dout), BT_IN(int, tt), int N,
                                 int C, int TV) {
    BT_BIND(dwtt);
    BT_BIND(dout);
    BT_BIND(tt);
    const size_t i = get_global_id(0);
    if (i >= (size_t)TV * (size_t)C) return;
    const int t = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
    dout += c;
    float acc = dwtt[i];
    for (int n = 0; n < N; n++)
        if (tt[n] == t) acc += dout[(size_t)n * C];
    dwtt[i] = acc;
}

/* The first pass of dwtt for more tokens: partial[p_off + (g TV + t) C + c]
 * = the sum of dout[n, c] over the tokens n of chunk g (BT_COL_ROWS tokens,
 * in order) with type_ids[n] == t; bias_grad then adds the partials (chunks
 * x TV*C) onto dwtt (TV x C) in chunk order. Geometry: one work-item per
 * (chunk, type, column), columns fastest; global: chunks * TV * C. */
BT_KERNEL void bt_embed_bwd_type_partial(BT_OUT(float, partial), BT_IN(float, dout), BT_IN(int, tt),
                                         int N, int C, int TV) {
    BT_BIND(partial);
    BT_BIND(dout);
    BT_BIND(tt);
    const size_t i = get_global_id(0), row = (size_t)TV * (size_t)C;
    const size_t g = i / row, t = i % row / (size_t)C, c = i % (size_t)C;
    const size_t n0 = g * BT_COL_ROWS;
    if (n0 >= (size_t)N) return;
    const size_t n1 = bt_min_size(n0 + BT_COL_ROWS, (size_t)N);
    dout += c;
    float acc = 0.0f;
    for (size_t n = n0; n < n1; n++)
        if (tt[n] == (int)t) acc += dout[n * C];
    partial[i] = acc;
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
 * with row_links' chains of idx at links (2 n_idx ints). Also embed_bwd's
 * dwte[ids[n]] += dout[n] (its pad tokens in no chain). Geometry: one
 * work-item per (token i, column c), columns fastest; the work-item of the
 * first token of an index owns element c of its row of dst: it adds the
 * chain i, next[i], next[next[i]], ... onto it in order, the same additions
 * in the same order as one owner per column walking all tokens (no atomics;
 * the other work-items return); global: n_idx * cols. */
BT_KERNEL void bt_scatter_rows(BT_OUT(float, dst), BT_IN(float, src), BT_IN(int, idx),
                               BT_IN(int, links), int n_idx, int cols) {
    BT_BIND(dst);
    BT_BIND(src);
    BT_BIND(idx);
    BT_BIND(links);
    const size_t k = get_global_id(0);
    if (k >= (size_t)n_idx * (size_t)cols) return;
    const int i = (int)(k / (size_t)cols), c = (int)(k % (size_t)cols);
    if (!links[n_idx + i]) return;
    dst += (size_t)idx[i] * cols + c;
    src += c;
    float acc = *dst;
    for (int j = i; j >= 0; j = links[j]) acc += src[(size_t)j * cols];
    *dst = acc;
}
