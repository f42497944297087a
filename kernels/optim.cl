/* Optimizer steps. The host precomputes every scalar that the CPU backend
 * computes once per call (decay, step, sqrt(bc2)), so the arithmetic per
 * element is the CPU backend's. Per-tensor kernels: one work-item per
 * element. Multi-tensor kernels (apex's multi_tensor_apply, over the flat
 * buffers): one work-group per chunk of BT_REDUCE_CHUNK elements of a span,
 * spans found from a table the host uploads:
 *   tab[0 .. n)        span offsets in the flat buffers (elements)
 *   tab[n .. 2n)       span lengths
 *   tab[2n .. 3n+1)    chunk_begin: the first chunk of each span, then the total
 *   ftab[3t .. 3t+3)   the span's three scalars (AdamW: decay, step, sqrt_bc2;
 *                      LAMB: wd, bc1, bc2)
 * Work-item l of a chunk takes elements l, l + BT_WG, ..., as sumsq_partial
 * does, so LAMB's norms have sumsq's partials. A gated step (gated != 0)
 * reads step_gate's two floats: gate[0] != 0 skips it (nothing written),
 * gate[1] is the gradients' scale in place of grad_scale. */

#ifdef BT_HAS_FP64
typedef double trust_t; /* LAMB's norms and trust ratio: the host's double */
#else
typedef float trust_t; /* no fp64: the trust ratios round differently (conformance says so) */
#endif

/* Adam's moments after gradient g: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
 * stored and returned. */
BT_FN void moments(float g, __global float *m, __global float *v, float beta1, float beta2,
                   float *m_out, float *v_out) {
    *m = *m_out = beta1 * *m + (1.0f - beta1) * g;
    *v = *v_out = beta2 * *v + (1.0f - beta2) * g * g;
}

/* AdamW on element i with gradient gi: m, v updated;
 * w = w * decay - step * m / (sqrt(v) / sqrt_bc2 + eps), stored and
 * returned. */
BT_FN float adamw_elem(__global float *w, float gi, __global float *m, __global float *v,
                       size_t i, float beta1, float beta2, float eps, float decay, float step,
                       float sqrt_bc2) {
    float mi, vi;
    moments(gi, m + i, v + i, beta1, beta2, &mi, &vi);
    const float wi = w[i] * decay - step * mi / (sqrt(vi) / sqrt_bc2 + eps);
    w[i] = wi;
    return wi;
}

/* LAMB's moments on element i with gradient gi and weight wi, returning its
 * update direction u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * w. */
BT_FN float lamb_elem(float wi, float gi, __global float *m, __global float *v, size_t i,
                      float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
    float mi, vi;
    moments(gi, m + i, v + i, beta1, beta2, &mi, &vi);
    return (mi / bc1) / (sqrt(vi / bc2) + eps) + wd * wi;
}

/* torch.optim.AdamW:  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 * w = w * decay - step * m / (sqrt(v) / sqrt_bc2 + eps)
 * with decay = 1 - lr*wd, step = lr/bc1, sqrt_bc2 = sqrt(bc2).     (n) */
BT_KERNEL void bt_adamw_step(BT_OUT(float, w), BT_IN(float, g), BT_OUT(float, m), BT_OUT(float, v),
                             ulong n, float beta1, float beta2, float eps, float decay, float step,
                             float sqrt_bc2) {
    BT_BIND(w);
    BT_BIND(g);
    BT_BIND(m);
    BT_BIND(v);
    const size_t i = get_global_id(0);
    if (i >= n) return;
    adamw_elem(w, g[i], m, v, i, beta1, beta2, eps, decay, step, sqrt_bc2);
}

/* LAMB's first half (DeepSpeed): moments as AdamW, then
 * u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * w.                   (n) */
BT_KERNEL void bt_lamb_update(BT_OUT(float, u), BT_IN(float, w), BT_IN(float, g), BT_OUT(float, m),
                              BT_OUT(float, v), ulong n, float beta1, float beta2, float eps,
                              float wd, float bc1, float bc2) {
    BT_BIND(u);
    BT_BIND(w);
    BT_BIND(g);
    BT_BIND(m);
    BT_BIND(v);
    const size_t i = get_global_id(0);
    if (i >= n) return;
    u[i] = lamb_elem(w[i], g[i], m, v, i, beta1, beta2, eps, wd, bc1, bc2);
}

/* The span of work-group grp: the last t < n_spans with chunk_begin[t] <= grp
 * (empty spans own no chunk). */
BT_FN int span_of_group(__global const ulong *chunk_begin, int n_spans, ulong grp) {
    int lo = 0, hi = n_spans - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (chunk_begin[mid] <= grp) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* The elements [*i0, *i1) of the flat buffers that work-group grp owns, in span *t. */
BT_FN void chunk_range(__global const ulong *tab, int n_spans, ulong grp, int *t, size_t *i0,
                       size_t *i1) {
    *t = span_of_group(tab + 2 * n_spans, n_spans, grp);
    const size_t base = tab[*t], len = tab[n_spans + *t];
    const size_t first = (grp - tab[2 * n_spans + *t]) * BT_REDUCE_CHUNK;
    *i0 = base + first;
    *i1 = base + bt_min_size(first + BT_REDUCE_CHUNK, len);
}

/* adamw_step on every span (ftab: decay, step, sqrt_bc2 per span), each
 * gradient read as g * grad_scale; with kind16 (BT_KIND16_*) not none, the
 * new weight also goes to w16 in 16 bits. global: total chunks * BT_WG. */
BT_KERNEL_WG void bt_adamw_multi(BT_OUT(float, w), BT_IN(float, g), BT_OUT(float, m),
                                 BT_OUT(float, v), BT_OUT(ushort, w16), int kind16,
                                 __global const ulong *tab, BT_IN(float, ftab), int n_spans,
                                 float beta1, float beta2, float eps, float grad_scale,
                                 BT_IN(float, gate), int gated) {
    BT_BIND(w);
    BT_BIND(g);
    BT_BIND(m);
    BT_BIND(v);
    BT_BIND(w16);
    BT_BIND(ftab);
    BT_BIND(gate);
    if (gated && gate[0] != 0.0f) return; /* the step is skipped */
    if (gated) grad_scale = gate[1];
    int t;
    size_t i0, i1;
    chunk_range(tab, n_spans, get_group_id(0), &t, &i0, &i1);
    ftab += 3 * (size_t)t;
    const float decay = ftab[0], step = ftab[1], sqrt_bc2 = ftab[2]; /* read once */
    for (size_t i = i0 + get_local_id(0); i < i1; i += BT_WG) {
        const float wi = adamw_elem(w, g[i] * grad_scale, m, v, i, beta1, beta2, eps, decay,
                                    step, sqrt_bc2);
        if (kind16 != BT_KIND16_NONE) w16[i] = f32_to_kind16(wi, kind16);
    }
}

/* LAMB, pass 1 of 3: moments of every span (ftab: wd, bc1, bc2) from the
 * gradients g * grad_scale, and per chunk the partial sums of w^2 and u^2
 * (sumsq_partial's) into partial[2 grp], partial[2 grp + 1].
 * global: total chunks * BT_WG. */
BT_KERNEL_WG void bt_lamb_multi_moments(BT_IN(float, w), BT_IN(float, g), BT_OUT(float, m),
                                        BT_OUT(float, v), __global const ulong *tab,
                                        BT_IN(float, ftab), BT_OUT(float, partial), int n_spans,
                                        float beta1, float beta2, float eps, float grad_scale,
                                        BT_IN(float, gate), int gated) {
    BT_BIND(w);
    BT_BIND(g);
    BT_BIND(m);
    BT_BIND(v);
    BT_BIND(ftab);
    BT_BIND(partial);
    BT_BIND(gate);
    if (gated && gate[0] != 0.0f) return; /* the step is skipped: the whole group leaves */
    if (gated) grad_scale = gate[1];
    __local float red[BT_WG];
    int t;
    size_t i0, i1;
    const size_t grp = get_group_id(0);
    chunk_range(tab, n_spans, grp, &t, &i0, &i1);
    ftab += 3 * (size_t)t;
    const float wd = ftab[0], bc1 = ftab[1], bc2 = ftab[2]; /* read once */
    float sw = 0.0f, su = 0.0f;
    for (size_t i = i0 + get_local_id(0); i < i1; i += BT_WG) {
        const float wi = w[i];
        const float u = lamb_elem(wi, g[i] * grad_scale, m, v, i, beta1, beta2, eps, wd, bc1, bc2);
        sw += wi * wi;
        su += u * u;
    }
    sw = wg_sum(sw, red);
    su = wg_sum(su, red);
    if (get_local_id(0) == 0) {
        partial[2 * grp] = sw;
        partial[2 * grp + 1] = su;
    }
}

/* The sum in double (trust_t) of n partials p[0], p[stride], p[2 stride],
 * ... (LAMB: the chunks' w^2 or u^2 sums, interleaved, stride 2): as
 * bt_sum_blocked (backends/common/partials.h) adds them on the host, so with
 * fp64 the same bits: at most BT_SUM_BLOCKS blocks of b = ceil(n /
 * BT_SUM_BLOCKS) consecutive partials, each added in order from 0, and the
 * blocks' sums added in order. Work-item l adds blocks l, l + BT_WG, ...
 * into red; work-item 0 adds red in order and returns the total to all. */
BT_FN trust_t blocked_sum(__global const float *p, ulong n, ulong stride,
                          BT_LOCAL_PTR trust_t *red) {
    const int lid = get_local_id(0);
    const ulong b = (n + BT_SUM_BLOCKS - 1) / BT_SUM_BLOCKS;
    const int blocks = b ? (int)((n + b - 1) / b) : 0;
    for (int k = lid; k < blocks; k += BT_WG) {
        const ulong end = (ulong)(k + 1) * b < n ? (ulong)(k + 1) * b : n;
        trust_t s = 0;
        for (ulong i = (ulong)k * b; i < end; i++) s += (trust_t)p[stride * i];
        red[k] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        trust_t total = 0;
        for (int k = 0; k < blocks; k++) total += red[k];
        red[BT_SUM_BLOCKS] = total;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const trust_t total = red[BT_SUM_BLOCKS];
    barrier(CLK_LOCAL_MEM_FENCE); /* red is reused by the next call */
    return total;
}

/* LAMB, pass 2: per span (one work-group each), ||w|| and ||u|| from its
 * chunks' partials added as the host adds sumsq's (blocked_sum), the trust
 * ratio clamped to [min_coeff, max_coeff] (1 when a norm is 0), and
 * coef[t] = -lr * trust. global: n_spans * BT_WG. */
BT_KERNEL_WG void bt_lamb_multi_trust(__global const ulong *tab, BT_IN(float, partial),
                                      BT_OUT(float, coef), int n_spans, float lr,
                                      float min_coeff, float max_coeff, BT_IN(float, gate),
                                      int gated) {
    BT_BIND(partial);
    BT_BIND(coef);
    BT_BIND(gate);
    __local trust_t red[BT_SUM_BLOCKS + 1];
    const int t = get_group_id(0);
    if (t >= n_spans || (gated && gate[0] != 0.0f)) return;
    __global const ulong *chunk_begin = tab + 2 * n_spans;
    const ulong c0 = chunk_begin[t], n = chunk_begin[t + 1] - c0;
    const trust_t sw = blocked_sum(partial + 2 * c0, n, 2, red),
                  su = blocked_sum(partial + 2 * c0 + 1, n, 2, red);
    if (get_local_id(0) != 0) return;
    const trust_t wn = sqrt(sw), un = sqrt(su);
    trust_t trust = (wn > 0 && un > 0) ? wn / un : (trust_t)1;
    if (trust < (trust_t)min_coeff) trust = min_coeff;
    if (trust > (trust_t)max_coeff) trust = max_coeff;
    coef[t] = (float)(-(trust_t)lr * trust);
}

/* LAMB, pass 3: w += coef[t] * u, u recomputed from the stored moments
 * (lamb_elem's expression on the same values: the same bits), and the new
 * weight in 16 bits to w16 as in adamw_multi. global: total chunks * BT_WG. */
BT_KERNEL_WG void bt_lamb_multi_apply(BT_OUT(float, w), BT_IN(float, m), BT_IN(float, v),
                                      BT_OUT(ushort, w16), int kind16,
                                      __global const ulong *tab, BT_IN(float, ftab),
                                      BT_IN(float, coef), int n_spans, float eps,
                                      BT_IN(float, gate), int gated) {
    BT_BIND(w);
    BT_BIND(m);
    BT_BIND(v);
    BT_BIND(w16);
    BT_BIND(ftab);
    BT_BIND(coef);
    BT_BIND(gate);
    if (gated && gate[0] != 0.0f) return; /* the step is skipped */
    int t;
    size_t i0, i1;
    chunk_range(tab, n_spans, get_group_id(0), &t, &i0, &i1);
    ftab += 3 * (size_t)t;
    const float wd = ftab[0], bc1 = ftab[1], bc2 = ftab[2], alpha = coef[t];
    for (size_t i = i0 + get_local_id(0); i < i1; i += BT_WG) {
        const float wi = w[i], u = (m[i] / bc1) / (sqrt(v[i] / bc2) + eps) + wd * wi;
        const float wn = wi + alpha * u;
        w[i] = wn;
        if (kind16 != BT_KIND16_NONE) w16[i] = f32_to_kind16(wn, kind16);
    }
}

/* step_gate (backend.h's bt_step_gate) in one work-group: each reduction's
 * value from its partials added as the host adds them (blocked_sum; with
 * fp64 the host's bits), then the host's decision in double. gate[0] gets 1
 * when the step is skipped (0: it applies), gate[1] the gradients' scale.
 *   tab[0]             the finite flag's partial (~0: none)
 *   tab[1], tab[2]     the norm's sum of squares: first partial, count
 *   tab[3 + 3k ..]     loss term k: first partial, count, 0 MLM / 1 NSP
 *   num[0 .. 3)        masked, nsp, loss_limit
 * global: BT_WG. */
BT_KERNEL_WG void bt_step_gate_decide(BT_IN(float, partial), __global const ulong *tab,
                                      int n_terms, BT_IN(trust_t, num), int guard,
                                      float max_norm, BT_OUT(float, gate)) {
    BT_BIND(partial);
    BT_BIND(num);
    BT_BIND(gate);
    __local trust_t red[BT_SUM_BLOCKS + 1];
    const trust_t sumsq = blocked_sum(partial + tab[1], tab[2], 1, red);
    trust_t mlm_sum = 0, nsp_sum = 0; /* scalars, not an indexed array: registers */
    for (int k = 0; k < n_terms; k++) { /* in order, as the host adds them */
        __global const ulong *term = tab + 3 + 3 * k;
        const trust_t v = blocked_sum(partial + term[0], term[1], 1, red);
        if (term[2] != 0)
            nsp_sum += v;
        else
            mlm_sum += v;
    }
    if (get_local_id(0) != 0) return;
    const trust_t norm = sqrt(sumsq);
    const trust_t mlm = num[0] > 0 ? mlm_sum / num[0] : 0,
                  nsp = num[1] > 0 ? nsp_sum / num[1] : 0;
    const trust_t loss = mlm + nsp;
    int skip = tab[0] != ~(ulong)0 && partial[tab[0]] != 0.0f;
    if (guard && (!isfinite(loss) || !isfinite(norm) || (num[2] > 0 && loss > num[2]))) skip = 1;
    float scale = 1.0f;
    if (max_norm > 0.0f) {
        const trust_t coef = (trust_t)max_norm / (norm + (trust_t)1e-6);
        scale = coef < 1 ? (float)coef : 1.0f;
    }
    gate[0] = skip ? 1.0f : 0.0f;
    gate[1] = scale;
}
