/* Embeddings forward and backward, and row gather / scatter
 * (kernels_cl/embedding.cl's twin). */
#include "common.cuh"
#include "kernels.cuh"

/* out[b,t,:] = wte[ids[b,t]] + wpe[t] + wtt[type_ids[b,t]]
 * out: (N = B*T, C); ids, type_ids: int (N).
 * Geometry: one thread per output element; grid: N * C threads. */
__global__ void embed_fwd(float *out, const int *ids, const int *tt, const float *wte,
                          const float *wpe, const float *wtt, int N, int T, int C) {
    const size_t i = global_id();
    if (i >= (size_t)N * (size_t)C) return;
    const int n = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
    const float e = wte[(size_t)ids[n] * C + c];
    const float p = wpe[(size_t)(n % T) * C + c];
    const float y = wtt[(size_t)tt[n] * C + c];
    out[i] = e + p + y;
}

/* The chains of equal indices that scatter_rows walks, for idx (n):
 * links[i] = the smallest j > i with idx[j] == idx[i], or -1, and
 * links[n + i] = 1 when i is the first token of its index (no j < i has
 * it), else 0. A token whose index is skip (skip >= 0: embed_bwd's pad_id)
 * belongs to no chain: next -1, first 0. Geometry: one thread per token,
 * comparing its index with the tokens before it up to the previous
 * occurrence and after it up to the next: at most n - 1 integer compares
 * each, under n^2 in all (16.8 million at n = 4096); grid: n threads. */
__global__ void row_links(int *links, const int *idx, int n, int skip) {
    const int i = (int)global_id();
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
 * over its partials). Geometry: one thread per element (t, c) of dwtt,
 * walking the tokens in order (the CPU backend's order and bits); grid:
 * TV * C threads. */
__global__ void embed_bwd_type(float *dwtt, const float *dout, const int *tt, int N, int C,
                               int TV) {
    const size_t i = global_id();
    if (i >= (size_t)TV * (size_t)C) return;
    const int t = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
    dout += c;
    float acc = dwtt[i];
    for (int n = 0; n < N; n++)
        if (tt[n] == t) acc += dout[(size_t)n * C];
    dwtt[i] = acc;
}

/* The first pass of dwtt for more tokens: partial[(g TV + t) C + c] = the
 * sum of dout[n, c] over the tokens n of chunk g (BT_COL_ROWS tokens, in
 * order) with type_ids[n] == t; bias_grad then adds the partials (chunks x
 * TV*C) onto dwtt (TV x C) in chunk order. Geometry: one thread per (chunk,
 * type, column), columns fastest; grid: chunks * TV * C threads. */
__global__ void embed_bwd_type_partial(float *partial, const float *dout, const int *tt, int N,
                                       int C, int TV) {
    const size_t i = global_id(), row = (size_t)TV * (size_t)C;
    const size_t g = i / row, t = i % row / (size_t)C, c = i % (size_t)C;
    const size_t n0 = g * BT_COL_ROWS;
    if (n0 >= (size_t)N) return;
    const size_t n1 = n0 + BT_COL_ROWS < (size_t)N ? n0 + BT_COL_ROWS : (size_t)N;
    dout += c;
    float acc = 0.0f;
    for (size_t n = n0; n < n1; n++)
        if (tt[n] == (int)t) acc += dout[n * C];
    partial[i] = acc;
}

/* dwpe[t, c] += sum_b dout[b, t, c], b in order.        dwpe: (>= T, C)
 * Geometry: one thread per (t, c); grid: T * C threads. */
__global__ void embed_bwd_pos(float *dwpe, const float *dout, int B, int T, int C) {
    const size_t i = global_id();
    if (i >= (size_t)T * (size_t)C) return;
    dout += i;
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * T * C];
    dwpe[i] = acc;
}

/* out[i, :] = src[idx[i], :]                 out: (n_idx, cols); idx: int (n_idx)
 * Geometry: one thread per output element; grid: n_idx * cols threads. */
__global__ void gather_rows(float *out, const float *src, const int *idx, int n_idx, int cols) {
    const size_t i = global_id();
    if (i >= (size_t)n_idx * (size_t)cols) return;
    const int r = (int)(i / (size_t)cols), c = (int)(i % (size_t)cols);
    out[i] = src[(size_t)idx[r] * cols + c];
}

/* dst[idx[i], :] += src[i, :] for i in order (duplicates add up in order),
 * with row_links' chains of idx at links (2 n_idx ints). Also embed_bwd's
 * dwte[ids[n]] += dout[n] (its pad tokens in no chain). Geometry: one
 * thread per (token i, column c), columns fastest; the thread of the first
 * token of an index owns element c of its row of dst: it adds the chain i,
 * next[i], next[next[i]], ... onto it in order, the same additions in the
 * same order as one owner per column walking all tokens (no atomics; the
 * other threads return); grid: n_idx * cols threads. */
__global__ void scatter_rows(float *dst, const float *src, const int *idx, const int *links,
                             int n_idx, int cols) {
    const size_t k = global_id();
    if (k >= (size_t)n_idx * (size_t)cols) return;
    const int i = (int)(k / (size_t)cols), c = (int)(k % (size_t)cols);
    if (!links[n_idx + i]) return;
    dst += (size_t)idx[i] * cols + c;
    src += c;
    float acc = *dst;
    for (int j = i; j >= 0; j = links[j]) acc += src[(size_t)j * cols];
    *dst = acc;
}
