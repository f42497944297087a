/* Reductions: bias_grad (column sums), sum / sumsq partials, all_finite. */

/* dbias[c] += sum_r dy[r, c]                             dy: (rows, cols)
 * for rows <= BT_COL_ROWS, and as the second pass of more rows over
 * bias_grad_partial's chunk partials (chunks x cols) and over
 * embed_bwd_type_partial's (chunks x TV*C, onto dwtt). Geometry: one
 * work-item per column, looping over the rows in order; global: cols. */
__kernel void bias_grad(__global float *dbias, ulong db_off, __global const float *dy,
                        ulong dy_off, int rows, int cols) {
    const int c = get_global_id(0);
    if (c >= cols) return;
    dy += dy_off + c;
    float acc = 0.0f;
    for (int r = 0; r < rows; r++) acc += dy[(size_t)r * cols];
    dbias[db_off + c] += acc;
}

/* bias_grad's first pass for more rows: partial[p_off + g cols + c] = sum
 * of dy[r, c] over the rows r of chunk g (BT_COL_ROWS rows, in order).
 * Geometry: one work-item per (chunk, column), columns fastest, so a
 * work-group reads whole rows; global: chunks * cols. */
__kernel void bias_grad_partial(__global float *partial, ulong p_off, __global const float *dy,
                                ulong dy_off, int rows, int cols) {
    const size_t i = get_global_id(0), c = i % (size_t)cols, g = i / (size_t)cols;
    const size_t r0 = g * BT_COL_ROWS;
    if (r0 >= (size_t)rows) return;
    const size_t r1 = min(r0 + BT_COL_ROWS, (size_t)rows);
    dy += dy_off + c;
    float acc = 0.0f;
    for (size_t r = r0; r < r1; r++) acc += dy[r * cols];
    partial[p_off + g * cols + c] = acc;
}

/* partial[p_off + g] = sum of x over chunk g of BT_REDUCE_CHUNK elements.
 * Geometry: one work-group of BT_WG per chunk; work-item l adds elements l,
 * l + BT_WG, ... of the chunk in order, then a fixed tree in local memory.
 * The host adds the partials in chunk order. global: chunks * BT_WG. */
__kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
void sum_partial(__global float *partial, ulong p_off, __global const float *x, ulong x_off,
                 ulong n) {
    __local float red[BT_WG];
    const size_t g = get_group_id(0), lid = get_local_id(0);
    const size_t i0 = g * BT_REDUCE_CHUNK, i1 = min(i0 + BT_REDUCE_CHUNK, (size_t)n);
    x += x_off;
    float s = 0.0f;
    for (size_t i = i0 + lid; i < i1; i += BT_WG) s += x[i];
    s = wg_sum(s, red);
    if (lid == 0) partial[p_off + g] = s;
}

/* partial[p_off + g] = sum of x^2 over chunk g (as sum_partial). */
__kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
void sumsq_partial(__global float *partial, ulong p_off, __global const float *x, ulong x_off,
                   ulong n) {
    __local float red[BT_WG];
    const size_t g = get_group_id(0), lid = get_local_id(0);
    const size_t i0 = g * BT_REDUCE_CHUNK, i1 = min(i0 + BT_REDUCE_CHUNK, (size_t)n);
    x += x_off;
    float s = 0.0f;
    for (size_t i = i0 + lid; i < i1; i += BT_WG) s += x[i] * x[i];
    s = wg_sum(s, red);
    if (lid == 0) partial[p_off + g] = s;
}

/* flag[flag_off] = 1 when some x[i] is NaN or Inf (the host zeroes it
 * first). Every writer stores the same value, so the result is
 * deterministic. global: n. */
__kernel void all_finite(__global float *flag, ulong flag_off, __global const float *x,
                         ulong x_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n && !isfinite(x[x_off + i])) flag[flag_off] = 1.0f;
}
