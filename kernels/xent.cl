/* Fused cross-entropy forward and backward over rows of V logits. */

/* One logit into the online (max, first index, sum) of xent's first pass,
 * and logit y into x_y. */
BT_FN void xent_take(float xj, int j, int y, float *mx, float *sum, int *arg,
                     BT_LOCAL_PTR float *x_y) {
    if (j == y) *x_y = xj;
    if (xj > *mx) {
        *sum = *sum * exp(*mx - xj) + 1.0f;
        *mx = xj;
        *arg = j;
    } else if (xj != -INFINITY) { /* a -INFINITY adds 0, even before any finite mx */
        *sum += exp(xj - *mx);
    }
}

/* Logit j's gradient, as xent_fwd_bwd writes it. */
BT_FN void xent_put(float xj, int j, int y, float mx, float g, float grad_scale, int kind16,
                    __global float *d, __global ushort *d16, int grad16_only) {
    float v = exp(xj - mx) * g;
    if (j == y) v -= grad_scale;
    if (grad16_only)
        d16[j] = f32_to_kind16(v, kind16);
    else
        d[j] = round_kind16(v, kind16);
}

/* Per row r with label y = labels[r]:
 *   loss[r] = logsumexp(logits[r]) - logits[r, y];
 *   correct[r] = 1 if the first argmax == y else 0;
 *   log_z[r] = logsumexp(logits[r]);
 *   dlogits[r] = grad_scale * ((1 + 2 z_loss log_z[r]) softmax(logits[r]) - onehot(y))
 *   (the gradient of loss + z_loss * log_z^2);
 * a label < 0 gives loss, correct, log_z and dlogits 0. The gradient is
 * rounded to the storage kind kind16 (BT_KIND16_NONE: not rounded); with
 * grad16_only it goes to dlogits16 in kind16 alone (dlogits not written;
 * dlogits16 does not overlap logits: a row's 16 bits lie over others' logits).
 * With logits_kind a 16-bit kind the logits are read from logits16, values
 * of that kind (logits is not read), which dlogits16 may be (in place: each
 * work-item reads a logit before it writes its gradient there).
 * dlogits may alias logits: every logit is read and written by one work-item only, each read
 * before the write of the same element; x_y too, by the work-item that owns
 * logit y, which hands it on in local memory (ordered by the barriers).
 * Geometry: one work-group of BT_WG per row (a row is a vocabulary, 30,522
 * logits for BERT: a warp a row would launch an eighth of the work-items,
 * each with 8 times the serial loads); work-item l handles logits l,
 * l + BT_WG, ...: one pass over them for the (max, first index) and the sum
 * of exp(x - max), kept online (the sum rescaled when the max grows), which
 * fixed trees then combine, ties to the lower index; a second pass reads
 * each logit again and writes its gradient. global: rows * BT_WG. */
BT_KERNEL_WG void bt_xent_fwd_bwd(BT_OUT(float, dlogits), BT_OUT(float, loss),
                                  BT_OUT(float, correct), BT_OUT(float, log_z),
                                  BT_IN(float, logits), BT_IN(int, labels), int V, float grad_scale,
                                  float z_loss, int kind16, BT_OUT(ushort, dlogits16),
                                  int grad16_only, BT_IN(ushort, logits16), int logits_kind) {
    BT_BIND(dlogits);
    BT_BIND(dlogits16);
    BT_BIND(loss);
    BT_BIND(correct);
    BT_BIND(log_z);
    BT_BIND(logits);
    BT_BIND(labels);
    BT_BIND(logits16);
    __local float red[BT_WG], sum_red[BT_WG];
    __local int arg_red[BT_WG];
    __local float x_y; /* logit y, from its owner */
    const int r = get_group_id(0), lid = get_local_id(0);
    const size_t row = (size_t)r * V;
    __global const float *x = logits + row;
    __global const ushort *x16 = logits16 + row;
    __global float *d = dlogits + row;
    __global ushort *d16 = dlogits16 + row;
    const int y = labels[r];
    if (y < 0) {
        for (int j = lid; j < V; j += BT_WG) {
            if (grad16_only)
                d16[j] = 0;
            else
                d[j] = 0.0f;
        }
        if (lid == 0) loss[r] = correct[r] = log_z[r] = 0.0f;
        return;
    }
    /* own logits in increasing order: the first maximum, and the sum of
     * exp(x - mx) rescaled by exp(old mx - new mx) when mx grows. A loop for
     * each logits type: no branch on it inside a loop (PoCL 3.1 miscompiled
     * one such branch in this kernel) */
    float mx = -INFINITY, sum = 0.0f;
    int arg = INT_MAX;
    if (logits_kind != BT_KIND16_NONE)
        for (int j = lid; j < V; j += BT_WG)
            xent_take(kind16_value(x16[j], logits_kind), j, y, &mx, &sum, &arg, &x_y);
    else
        for (int j = lid; j < V; j += BT_WG) xent_take(x[j], j, y, &mx, &sum, &arg, &x_y);
    red[lid] = mx;
    arg_red[lid] = arg;
    sum_red[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BT_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            const float ma = red[lid], mb = red[lid + s];
            const int ib = arg_red[lid + s];
            const float m = mb > ma ? mb : ma; /* a part with no logit: -INFINITY, sum 0 */
            const float sa = sum_red[lid], sb = sum_red[lid + s];
            sum_red[lid] = (sa > 0.0f ? sa * exp(ma - m) : 0.0f) +
                           (sb > 0.0f ? sb * exp(mb - m) : 0.0f);
            if (mb > ma || (mb == ma && ib < arg_red[lid])) {
                red[lid] = mb;
                arg_red[lid] = ib;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mx = red[0];
    arg = arg_red[0];
    sum = sum_red[0];
    const float lz = log(sum) + mx;
    const float g = grad_scale * (1.0f + 2.0f * z_loss * lz) * (1.0f / sum);
    if (logits_kind != BT_KIND16_NONE)
        for (int j = lid; j < V; j += BT_WG)
            xent_put(kind16_value(x16[j], logits_kind), j, y, mx, g, grad_scale, kind16, d, d16,
                     grad16_only);
    else
        for (int j = lid; j < V; j += BT_WG)
            xent_put(x[j], j, y, mx, g, grad_scale, kind16, d, d16, grad16_only);
    if (lid == 0) {
        loss[r] = lz - x_y;
        correct[r] = arg == y ? 1.0f : 0.0f;
        log_z[r] = lz;
    }
}
