/* Masked attention softmax, forward and backward, over rows of T keys
 * (kernels_cl/softmax.cl's twin). */
#include "common.cuh"
#include "kernels.cuh"

#include <math.h>

/* probs[b,h,i,:] = softmax_j(scale * scores[b,h,i,j]) over keys j with
 * key_mask[b,j] != 0; masked keys get 0, a row with no key gets all 0.
 * scores, probs: (B, H, T, T) = (rows, T); key_mask: int (B, T); HT = H * T.
 * In place allowed: each thread rewrites only the keys it read.
 * Geometry: one block of BT_WG per row; thread l handles keys l, l + BT_WG,
 * ...; max and sum by fixed trees. grid: rows blocks. */
__global__ void __launch_bounds__(BT_WG)
softmax_fwd(float *probs, const float *scores, const int *key_mask, int HT, int T,
            float scale) {
    __shared__ float red[BT_WG];
    const int r = group_id();
    const size_t row = (size_t)r * T;
    const float *s = scores + row;
    float *p = probs + row;
    softmax_row(p, s, key_mask + (size_t)(r / HT) * T, T, scale, red);
}

/* dscores = scale * p * (dp - sum_j dp*p) per row of T.   (rows, T)
 * In place allowed (dscores = dprobs). Geometry: as softmax_fwd. */
__global__ void __launch_bounds__(BT_WG)
softmax_bwd(float *dscores, const float *dprobs, const float *probs, int T, float scale) {
    __shared__ float red[BT_WG];
    const int r = group_id(), lid = local_id();
    const size_t row = (size_t)r * T;
    const float *dp = dprobs + row, *p = probs + row;
    float *ds = dscores + row;
    float dot = 0.0f;
    for (int j = lid; j < T; j += BT_WG) dot += dp[j] * p[j];
    dot = wg_sum(dot, red);
    for (int j = lid; j < T; j += BT_WG) ds[j] = scale * p[j] * (dp[j] - dot);
}
