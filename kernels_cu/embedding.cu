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

/* dwte[ids[n]] += dout[n] (except ids[n] == pad_id) and
 * dwtt[type_ids[n]] += dout[n], for tokens n in order.   dout: (N, C)
 * Geometry: one thread per column c, owning column c of both tables and
 * walking the tokens in order (the CPU backend's order; no atomics);
 * grid: C threads. */
__global__ void embed_bwd_word(float *dwte, float *dwtt, const float *dout, const int *ids,
                               const int *tt, int N, int C, int pad_id) {
    const int c = (int)global_id();
    if (c >= C) return;
    dwte += c;
    dwtt += c;
    dout += c;
    for (int n = 0; n < N; n++) {
        const float g = dout[(size_t)n * C];
        dwtt[(size_t)tt[n] * C] += g;
        if (ids[n] != pad_id) dwte[(size_t)ids[n] * C] += g;
    }
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

/* dst[idx[i], :] += src[i, :] for i in order (duplicates add up in order).
 * Geometry: one thread per column, walking i in order; grid: cols threads. */
__global__ void scatter_rows(float *dst, const float *src, const int *idx, int n_idx, int cols) {
    const int c = (int)global_id();
    if (c >= cols) return;
    dst += c;
    src += c;
    for (int i = 0; i < n_idx; i++) dst[(size_t)idx[i] * cols] += src[(size_t)i * cols];
}
