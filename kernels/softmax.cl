/* Masked attention softmax, forward and backward, over rows of T keys. */

/* probs[b,h,i,:] = softmax_j(scale * scores[b,h,i,j]) over keys j with
 * key_mask[b,j] != 0; masked keys get 0, a row with no key gets all 0.
 * scores, probs: (B, H, T, T) = (rows, T); key_mask: int (B, T); HT = H * T.
 * In place allowed: each work-item rewrites only the keys it read.
 * Geometry: BT_ROW_LANES work-items a row (ROW_KEYS_FOR), BT_WG / BT_ROW_LANES
 * rows a work-group; max and sum by fixed trees; a row of up to 512 keys
 * read once into registers (BT_SM_CACHED), its sample's key mask once a
 * work-group where the group's rows are of one sample (stage_key_mask). global: ceil(rows /
 * (BT_WG / BT_ROW_LANES)) * BT_WG. */
BT_KERNEL_WG void bt_softmax_fwd(BT_OUT(float, probs), BT_IN(float, scores), BT_IN(int, key_mask),
                                 int rows, int HT, int T, float scale) {
    BT_BIND(probs);
    BT_BIND(scores);
    BT_BIND(key_mask);
    __local float red[BT_WG];
    __local int lkm[BT_ROW_LANES * BT_SM_LANE_KEYS];
    const int r = row_of(), n = row_keys(r, rows, T);
    const size_t row = (size_t)(n ? r : 0) * T;
    __global const int *km = key_mask + (size_t)((n ? r : 0) / HT) * T;
    if (BT_SM_CACHED(T)) { /* the row read once, the mask once a work-group */
        float v[BT_SM_LANE_KEYS];
        const bool staged = stage_key_mask(lkm, key_mask, rows, HT, T);
        softmax_row_cached(probs + row, scores + row, km, lkm, staged, n, scale, BT_KIND16_NONE,
                           red, v);
    } else {
        softmax_row(probs + row, scores + row, km, n, scale, red);
    }
}

/* dscores = scale * p * (dp - sum_j dp*p) per row of T.   (rows, T)
 * In place allowed (dscores = dprobs). Geometry: as softmax_fwd, dp and p
 * read once where the row fits. */
BT_KERNEL_WG void bt_softmax_bwd(BT_OUT(float, dscores), BT_IN(float, dprobs), BT_IN(float, probs),
                                 int rows, int T, float scale) {
    BT_BIND(dscores);
    BT_BIND(dprobs);
    BT_BIND(probs);
    __local float red[BT_WG];
    const int r = row_of(), n = row_keys(r, rows, T), lane = get_local_id(0) % BT_ROW_LANES;
    const size_t row = (size_t)(n ? r : 0) * T;
    __global const float *dp = dprobs + row, *p = probs + row;
    __global float *ds = dscores + row;
    float dot = 0.0f;
    if (BT_SM_CACHED(T)) { /* dp and p kept in registers */
        float dpv[BT_SM_LANE_KEYS], pv[BT_SM_LANE_KEYS];
        BT_UNROLL for (int k = 0; k < BT_SM_LANE_KEYS; k++) {
            const int j = sm_lane_key(k);
            dpv[k] = pv[k] = 0.0f;
            if (j >= n) continue;
            dpv[k] = dp[j];
            pv[k] = p[j];
            dot += dpv[k] * pv[k];
        }
        dot = row_sum(dot, red);
        BT_UNROLL for (int k = 0; k < BT_SM_LANE_KEYS; k++)
            if (sm_lane_key(k) < n) ds[sm_lane_key(k)] = scale * pv[k] * (dpv[k] - dot);
        return;
    }
    ROW_KEYS_FOR(j, lane, n) dot += dp[j] * p[j];
    dot = row_sum(dot, red);
    ROW_KEYS_FOR(j, lane, n) ds[j] = scale * p[j] * (dp[j] - dot);
}
