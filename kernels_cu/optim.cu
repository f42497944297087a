/* Optimizer steps (kernels_cl/optim.cl's twin). The host precomputes every
 * scalar that the CPU backend computes once per call (decay, step,
 * sqrt(bc2)), so the arithmetic per element is the CPU backend's.
 * Per-tensor kernels: one thread per element. Multi-tensor kernels: one
 * block per chunk of BT_REDUCE_CHUNK elements of a span, spans from the
 * table the host uploads (layout in kernels_cl/optim.cl: tab holds offsets,
 * lengths and chunk_begin; ftab three scalars per span). */
#include "common.cuh"
#include "kernels.cuh"

#include <math.h>

/* Adam's moments after gradient g: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
 * stored and returned. */
__device__ inline void moments(float g, float *m, float *v, float beta1, float beta2,
                               float *m_out, float *v_out) {
    *m = *m_out = beta1 * *m + (1.0f - beta1) * g;
    *v = *v_out = beta2 * *v + (1.0f - beta2) * g * g;
}

/* AdamW on element i with gradient gi: m, v updated;
 * w = w * decay - step * m / (sqrt(v) / sqrt_bc2 + eps). */
__device__ inline void adamw_elem(float *w, float gi, float *m, float *v, size_t i, float beta1,
                                  float beta2, float eps, float decay, float step,
                                  float sqrt_bc2) {
    float mi, vi;
    moments(gi, m + i, v + i, beta1, beta2, &mi, &vi);
    w[i] = w[i] * decay - step * mi / (sqrtf(vi) / sqrt_bc2 + eps);
}

/* LAMB's moments on element i with gradient gi, returning its update
 * direction u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * w. */
__device__ inline float lamb_elem(const float *w, float gi, float *m, float *v, size_t i,
                                  float beta1, float beta2, float eps, float wd, float bc1,
                                  float bc2) {
    float mi, vi;
    moments(gi, m + i, v + i, beta1, beta2, &mi, &vi);
    return (mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w[i];
}

/* torch.optim.AdamW:  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 * w = w * decay - step * m / (sqrt(v) / sqrt_bc2 + eps)
 * with decay = 1 - lr*wd, step = lr/bc1, sqrt_bc2 = sqrt(bc2).     (n) */
__global__ void adamw_step(float *w, const float *g, float *m, float *v, size_t n, float beta1,
                           float beta2, float eps, float decay, float step, float sqrt_bc2) {
    const size_t i = global_id();
    if (i >= n) return;
    adamw_elem(w, g[i], m, v, i, beta1, beta2, eps, decay, step, sqrt_bc2);
}

/* LAMB's first half (DeepSpeed): moments as AdamW, then
 * u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * w.                   (n) */
__global__ void lamb_update(float *u, const float *w, const float *g, float *m, float *v,
                            size_t n, float beta1, float beta2, float eps, float wd, float bc1,
                            float bc2) {
    const size_t i = global_id();
    if (i >= n) return;
    u[i] = lamb_elem(w, g[i], m, v, i, beta1, beta2, eps, wd, bc1, bc2);
}

/* The span of block grp: the last t < n_spans with chunk_begin[t] <= grp. */
__device__ inline int span_of_group(const unsigned long long *chunk_begin, int n_spans,
                                    unsigned long long grp) {
    int lo = 0, hi = n_spans - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (chunk_begin[mid] <= grp) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* The elements [*i0, *i1) of the flat buffers that block grp owns, in span *t. */
__device__ inline void chunk_range(const unsigned long long *tab, int n_spans,
                                   unsigned long long grp, int *t, size_t *i0, size_t *i1) {
    *t = span_of_group(tab + 2 * n_spans, n_spans, grp);
    const size_t base = tab[*t], len = tab[n_spans + *t];
    const size_t first = (grp - tab[2 * n_spans + *t]) * BT_REDUCE_CHUNK;
    *i0 = base + first;
    *i1 = base + (first + BT_REDUCE_CHUNK < len ? first + BT_REDUCE_CHUNK : len);
}

/* adamw_step on every span (ftab: decay, step, sqrt_bc2 per span), each
 * gradient read as g * grad_scale. grid: total chunks blocks. */
__global__ void __launch_bounds__(BT_WG)
adamw_multi(float *w, const float *g, float *m, float *v, const unsigned long long *tab,
            const float *ftab, int n_spans, float beta1, float beta2, float eps,
            float grad_scale) {
    int t;
    size_t i0, i1;
    chunk_range(tab, n_spans, (unsigned long long)group_id(), &t, &i0, &i1);
    ftab += 3 * (size_t)t;
    for (size_t i = i0 + local_id(); i < i1; i += BT_WG)
        adamw_elem(w, g[i] * grad_scale, m, v, i, beta1, beta2, eps, ftab[0], ftab[1], ftab[2]);
}

/* LAMB, pass 1 of 3: moments of every span (ftab: wd, bc1, bc2) from the
 * gradients g * grad_scale, and per chunk the partial sums of w^2 and u^2
 * (sumsq_partial's) into partial[2 grp], partial[2 grp + 1].
 * grid: total chunks blocks. */
__global__ void __launch_bounds__(BT_WG)
lamb_multi_moments(const float *w, const float *g, float *m, float *v,
                   const unsigned long long *tab, const float *ftab, float *partial, int n_spans,
                   float beta1, float beta2, float eps, float grad_scale) {
    __shared__ float red[BT_WG];
    int t;
    size_t i0, i1;
    const size_t grp = (size_t)group_id();
    chunk_range(tab, n_spans, grp, &t, &i0, &i1);
    ftab += 3 * (size_t)t;
    float sw = 0.0f, su = 0.0f;
    for (size_t i = i0 + local_id(); i < i1; i += BT_WG) {
        const float u = lamb_elem(w, g[i] * grad_scale, m, v, i, beta1, beta2, eps, ftab[0],
                                  ftab[1], ftab[2]);
        sw += w[i] * w[i];
        su += u * u;
    }
    sw = wg_sum(sw, red);
    su = wg_sum(su, red);
    if (local_id() == 0) {
        partial[2 * grp] = sw;
        partial[2 * grp + 1] = su;
    }
}

/* LAMB, pass 2: per span, ||w|| and ||u|| from its chunks' partials added in
 * order in double (as the host adds sumsq's), the trust ratio clamped to
 * [min_coeff, max_coeff] (1 when a norm is 0), and coef[t] = -lr * trust.
 * grid: n_spans threads. */
__global__ void lamb_multi_trust(const unsigned long long *tab, const float *partial, float *coef,
                                 int n_spans, float lr, float min_coeff, float max_coeff) {
    const int t = (int)global_id();
    if (t >= n_spans) return;
    const unsigned long long *chunk_begin = tab + 2 * n_spans;
    double sw = 0, su = 0;
    for (unsigned long long c = chunk_begin[t]; c < chunk_begin[t + 1]; c++) {
        sw += (double)partial[2 * c];
        su += (double)partial[2 * c + 1];
    }
    const double wn = sqrt(sw), un = sqrt(su);
    double trust = (wn > 0 && un > 0) ? wn / un : 1.0;
    if (trust < (double)min_coeff) trust = min_coeff;
    if (trust > (double)max_coeff) trust = max_coeff;
    coef[t] = (float)(-(double)lr * trust);
}

/* LAMB, pass 3: w += coef[t] * u, u recomputed from the stored moments
 * (lamb_elem's expression on the same values: the same bits).
 * grid: total chunks blocks. */
__global__ void __launch_bounds__(BT_WG)
lamb_multi_apply(float *w, const float *m, const float *v, const unsigned long long *tab,
                 const float *ftab, const float *coef, int n_spans, float eps) {
    int t;
    size_t i0, i1;
    chunk_range(tab, n_spans, (unsigned long long)group_id(), &t, &i0, &i1);
    ftab += 3 * (size_t)t;
    const float wd = ftab[0], bc1 = ftab[1], bc2 = ftab[2], alpha = coef[t];
    for (size_t i = i0 + local_id(); i < i1; i += BT_WG) {
        const float u = (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps) + wd * w[i];
        w[i] += alpha * u;
    }
}
