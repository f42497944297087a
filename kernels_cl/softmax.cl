/* Masked attention softmax, forward and backward, over rows of T keys. */

/* probs[b,h,i,:] = softmax_j(scale * scores[b,h,i,j]) over keys j with
 * key_mask[b,j] != 0; masked keys get 0, a row with no key gets all 0.
 * scores, probs: (B, H, T, T) = (rows, T); key_mask: int (B, T); HT = H * T.
 * In place allowed: each work-item rewrites only the keys it read.
 * Geometry: one work-group of BT_WG per row; work-item l handles keys l,
 * l + BT_WG, ...; max and sum by fixed trees. global: rows * BT_WG. */
__kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
void softmax_fwd(__global float *probs, ulong p_off, __global const float *scores, ulong s_off,
                 __global const int *key_mask, ulong m_off, int HT, int T, float scale) {
    __local float red[BT_WG];
    const int r = get_group_id(0);
    const size_t row = (size_t)r * T;
    __global const float *s = scores + s_off + row;
    __global float *p = probs + p_off + row;
    softmax_row(p, s, key_mask + m_off + (size_t)(r / HT) * T, T, scale, red);
}

/* dscores = scale * p * (dp - sum_j dp*p) per row of T.   (rows, T)
 * In place allowed (dscores = dprobs). Geometry: as softmax_fwd. */
__kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
void softmax_bwd(__global float *dscores, ulong ds_off, __global const float *dprobs,
                 ulong dp_off, __global const float *probs, ulong p_off, int T, float scale) {
    __local float red[BT_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    const size_t row = (size_t)r * T;
    __global const float *dp = dprobs + dp_off + row, *p = probs + p_off + row;
    __global float *ds = dscores + ds_off + row;
    float dot = 0.0f;
    for (int j = lid; j < T; j += BT_WG) dot += dp[j] * p[j];
    dot = wg_sum(dot, red);
    for (int j = lid; j < T; j += BT_WG) ds[j] = scale * p[j] * (dp[j] - dot);
}
