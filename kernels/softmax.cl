/* Masked attention softmax, forward and backward, over rows of T keys. */

/* probs[b,h,i,:] = softmax_j(scale * scores[b,h,i,j]) over keys j with
 * key_mask[b,j] != 0; masked keys get 0, a row with no key gets all 0.
 * scores, probs: (B, H, T, T) = (rows, T); key_mask: int (B, T); HT = H * T.
 * In place allowed: each work-item rewrites only the keys it read.
 * Geometry: one work-group of BT_WG per row; work-item l handles keys l,
 * l + BT_WG, ...; max and sum by fixed trees. global: rows * BT_WG. */
BT_KERNEL_WG void bt_softmax_fwd(BT_OUT(float, probs), BT_IN(float, scores), BT_IN(int, key_mask),
                                 int HT, int T, float scale) {
    BT_BIND(probs);
    BT_BIND(scores);
    BT_BIND(key_mask);
    __local float red[BT_WG];
    const int r = get_group_id(0);
    const size_t row = (size_t)r * T;
    __global const float *s = scores + row;
    __global float *p = probs + row;
    softmax_row(p, s, key_mask + (size_t)(r / HT) * T, T, scale, red);
}

/* dscores = scale * p * (dp - sum_j dp*p) per row of T.   (rows, T)
 * In place allowed (dscores = dprobs). Geometry: as softmax_fwd. */
BT_KERNEL_WG void bt_softmax_bwd(BT_OUT(float, dscores), BT_IN(float, dprobs), BT_IN(float, probs),
                                 int T, float scale) {
    BT_BIND(dscores);
    BT_BIND(dprobs);
    BT_BIND(probs);
    __local float red[BT_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    const size_t row = (size_t)r * T;
    __global const float *dp = dprobs + row, *p = probs + row;
    __global float *ds = dscores + row;
    float dot = 0.0f;
    for (int j = lid; j < T; j += BT_WG) dot += dp[j] * p[j];
    dot = wg_sum(dot, red);
    for (int j = lid; j < T; j += BT_WG) ds[j] = scale * p[j] * (dp[j] - dot);
}
