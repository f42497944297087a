/* Fused cross-entropy forward and backward over rows of V logits. */

/* Per row r with label y = labels[r]:
 *   loss[r] = logsumexp(logits[r]) - logits[r, y];
 *   correct[r] = 1 if the first argmax == y else 0;
 *   log_z[r] = logsumexp(logits[r]);
 *   dlogits[r] = grad_scale * ((1 + 2 z_loss log_z[r]) softmax(logits[r]) - onehot(y))
 *   (the gradient of loss + z_loss * log_z^2);
 * a label < 0 gives loss, correct, log_z and dlogits 0. dlogits may alias
 * logits: every logit is read and written by one work-item only, each read
 * before the write of the same element; x_y too, by the work-item that owns
 * logit y, which hands it on in local memory (ordered by the barriers).
 * Geometry: one work-group of BT_WG per row (a row is a vocabulary, 30,522
 * logits for BERT: a warp a row would launch an eighth of the work-items,
 * each with 8 times the serial loads); work-item l handles logits l,
 * l + BT_WG, ...; (max, first index) and the exp sum by fixed trees, ties to
 * the lower index. global: rows * BT_WG. */
BT_KERNEL_WG void bt_xent_fwd_bwd(BT_OUT(float, dlogits), BT_OUT(float, loss),
                                  BT_OUT(float, correct), BT_OUT(float, log_z),
                                  BT_IN(float, logits), BT_IN(int, labels), int V, float grad_scale,
                                  float z_loss) {
    BT_BIND(dlogits);
    BT_BIND(loss);
    BT_BIND(correct);
    BT_BIND(log_z);
    BT_BIND(logits);
    BT_BIND(labels);
    __local float red[BT_WG];
    __local int arg_red[BT_WG];
    __local float x_y; /* logit y, from its owner */
    const int r = get_group_id(0), lid = get_local_id(0);
    const size_t row = (size_t)r * V;
    __global const float *x = logits + row;
    __global float *d = dlogits + row;
    const int y = labels[r];
    if (y < 0) {
        for (int j = lid; j < V; j += BT_WG) d[j] = 0.0f;
        if (lid == 0) loss[r] = correct[r] = log_z[r] = 0.0f;
        return;
    }
    /* first maximum: own logits in increasing order, then the tree */
    float mx = -INFINITY;
    int arg = INT_MAX;
    if (lid < V) {
        mx = x[lid];
        arg = lid;
    }
    for (int j = lid + BT_WG; j < V; j += BT_WG)
        if (x[j] > mx) {
            mx = x[j];
            arg = j;
        }
    red[lid] = mx;
    arg_red[lid] = arg;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BT_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            const float mb = red[lid + s];
            const int ib = arg_red[lid + s];
            if (mb > red[lid] || (mb == red[lid] && ib < arg_red[lid])) {
                red[lid] = mb;
                arg_red[lid] = ib;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mx = red[0];
    arg = arg_red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = 0.0f;
    for (int j = lid; j < V; j += BT_WG) {
        const float xj = x[j];
        if (j == y) x_y = xj;
        const float e = exp(xj - mx);
        d[j] = e;
        sum += e;
    }
    sum = wg_sum(sum, red);
    const float lz = log(sum) + mx;
    const float g = grad_scale * (1.0f + 2.0f * z_loss * lz) * (1.0f / sum);
    for (int j = lid; j < V; j += BT_WG) {
        float v = d[j] * g;
        if (j == y) v -= grad_scale;
        d[j] = v;
    }
    if (lid == 0) {
        loss[r] = lz - x_y;
        correct[r] = arg == y ? 1.0f : 0.0f;
        log_z[r] = lz;
    }
}
