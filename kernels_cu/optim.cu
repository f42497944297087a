/* Optimizer steps (kernels_cl/optim.cl's twin). The host precomputes every
 * scalar that the CPU backend computes once per call (decay, step,
 * sqrt(bc2)), so the arithmetic per element is the CPU backend's.
 * Geometry: one thread per element. */
#include "common.cuh"
#include "kernels.cuh"

#include <math.h>

/* torch.optim.AdamW:  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 * w = w * decay - step * m / (sqrt(v) / sqrt_bc2 + eps)
 * with decay = 1 - lr*wd, step = lr/bc1, sqrt_bc2 = sqrt(bc2).     (n) */
__global__ void adamw_step(float *w, const float *g, float *m, float *v, size_t n, float beta1,
                           float beta2, float eps, float decay, float step, float sqrt_bc2) {
    const size_t i = global_id();
    if (i >= n) return;
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] * decay - step * mi / (sqrtf(vi) / sqrt_bc2 + eps);
}

/* LAMB's first half (DeepSpeed): moments as AdamW, then
 * u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * w.                   (n) */
__global__ void lamb_update(float *u, const float *w, const float *g, float *m, float *v,
                            size_t n, float beta1, float beta2, float eps, float wd, float bc1,
                            float bc2) {
    const size_t i = global_id();
    if (i >= n) return;
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    u[i] = (mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w[i];
}
