/* Optimizer steps. The host precomputes every scalar that the CPU backend
 * computes once per call (decay, step, sqrt(bc2)), so the arithmetic per
 * element is the CPU backend's. Geometry: one work-item per element. */

/* torch.optim.AdamW:  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 * w = w * decay - step * m / (sqrt(v) / sqrt_bc2 + eps)
 * with decay = 1 - lr*wd, step = lr/bc1, sqrt_bc2 = sqrt(bc2).     (n) */
__kernel void adamw_step(__global float *w, ulong w_off, __global const float *g, ulong g_off,
                         __global float *m, ulong m_off, __global float *v, ulong v_off, ulong n,
                         float beta1, float beta2, float eps, float decay, float step,
                         float sqrt_bc2) {
    const size_t i = get_global_id(0);
    if (i >= n) return;
    const float gi = g[g_off + i];
    const float mi = beta1 * m[m_off + i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[v_off + i] + (1.0f - beta2) * gi * gi;
    m[m_off + i] = mi;
    v[v_off + i] = vi;
    w[w_off + i] = w[w_off + i] * decay - step * mi / (sqrt(vi) / sqrt_bc2 + eps);
}

/* LAMB's first half (DeepSpeed): moments as AdamW, then
 * u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * w.                   (n) */
__kernel void lamb_update(__global float *u, ulong u_off, __global const float *w, ulong w_off,
                          __global const float *g, ulong g_off, __global float *m, ulong m_off,
                          __global float *v, ulong v_off, ulong n, float beta1, float beta2,
                          float eps, float wd, float bc1, float bc2) {
    const size_t i = get_global_id(0);
    if (i >= n) return;
    const float gi = g[g_off + i];
    const float mi = beta1 * m[m_off + i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[v_off + i] + (1.0f - beta2) * gi * gi;
    m[m_off + i] = mi;
    v[v_off + i] = vi;
    u[u_off + i] = (mi / bc1) / (sqrt(vi / bc2) + eps) + wd * w[w_off + i];
}
