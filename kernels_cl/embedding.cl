/* Embeddings forward and backward, and row gather / scatter. */

/* out[b,t,:] = wte[ids[b,t]] + wpe[t] + wtt[type_ids[b,t]]
 * out: (N = B*T, C); ids, type_ids: int (N).
 * Geometry: one work-item per output element; global: N * C. */
__kernel void embed_fwd(__global float *out, ulong out_off, __global const int *ids,
                        ulong ids_off, __global const int *tt, ulong tt_off,
                        __global const float *wte, ulong wte_off, __global const float *wpe,
                        ulong wpe_off, __global const float *wtt, ulong wtt_off, int N, int T,
                        int C) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)N * (size_t)C) return;
    const int n = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
    const float e = wte[wte_off + (size_t)ids[ids_off + n] * C + c];
    const float p = wpe[wpe_off + (size_t)(n % T) * C + c];
    const float y = wtt[wtt_off + (size_t)tt[tt_off + n] * C + c];
    out[out_off + i] = e + p + y;
}

/* dwte[ids[n]] += dout[n] (except ids[n] == pad_id) and
 * dwtt[type_ids[n]] += dout[n], for tokens n in order.   dout: (N, C)
 * Geometry: one work-item per column c, owning column c of both tables and
 * walking the tokens in order (the CPU backend's order; no atomics);
 * global: C. */
__kernel void embed_bwd_word(__global float *dwte, ulong wte_off, __global float *dwtt,
                             ulong wtt_off, __global const float *dout, ulong d_off,
                             __global const int *ids, ulong ids_off, __global const int *tt,
                             ulong tt_off, int N, int C, int pad_id) {
    const int c = get_global_id(0);
    if (c >= C) return;
    dwte += wte_off + c;
    dwtt += wtt_off + c;
    dout += d_off + c;
    ids += ids_off;
    tt += tt_off;
    for (int n = 0; n < N; n++) {
        const float g = dout[(size_t)n * C];
        dwtt[(size_t)tt[n] * C] += g;
        if (ids[n] != pad_id) dwte[(size_t)ids[n] * C] += g;
    }
}

/* dwpe[t, c] += sum_b dout[b, t, c], b in order.        dwpe: (>= T, C)
 * Geometry: one work-item per (t, c); global: T * C. */
__kernel void embed_bwd_pos(__global float *dwpe, ulong wpe_off, __global const float *dout,
                            ulong d_off, int B, int T, int C) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)T * (size_t)C) return;
    dout += d_off + i;
    float acc = dwpe[wpe_off + i];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * T * C];
    dwpe[wpe_off + i] = acc;
}

/* out[i, :] = src[idx[i], :]                 out: (n_idx, cols); idx: int (n_idx)
 * Geometry: one work-item per output element; global: n_idx * cols. */
__kernel void gather_rows(__global float *out, ulong out_off, __global const float *src,
                          ulong src_off, __global const int *idx, ulong idx_off, int n_idx,
                          int cols) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)n_idx * (size_t)cols) return;
    const int r = (int)(i / (size_t)cols), c = (int)(i % (size_t)cols);
    out[out_off + i] = src[src_off + (size_t)idx[idx_off + r] * cols + c];
}

/* dst[idx[i], :] += src[i, :] for i in order (duplicates add up in order).
 * Geometry: one work-item per column, walking i in order; global: cols. */
__kernel void scatter_rows(__global float *dst, ulong dst_off, __global const float *src,
                           ulong src_off, __global const int *idx, ulong idx_off, int n_idx,
                           int cols) {
    const int c = get_global_id(0);
    if (c >= cols) return;
    dst += dst_off + c;
    src += src_off + c;
    idx += idx_off;
    for (int i = 0; i < n_idx; i++) dst[(size_t)idx[i] * cols] += src[(size_t)i * cols];
}
