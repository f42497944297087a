/* The CPU reference backend's optimizer steps: AdamW and LAMB's first half
 * per tensor, and their multi-tensor forms, which run the per-tensor
 * arithmetic span by span (the bits of the per-tensor ops by construction). */
#include "cpu_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Adam's moments after gradient g: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
 * stored and returned. */
static inline void moments(float g, float *m, float *v, float beta1, float beta2, float *m_out,
                           float *v_out) {
    *m = *m_out = beta1 * *m + (1.0f - beta1) * g;
    *v = *v_out = beta2 * *v + (1.0f - beta2) * g * g;
}

/* torch.optim.AdamW on n elements (backend.h's adamw_step), each gradient
 * taken as the float G[i] * gs (exact for gs = 1). */
static void adamw(float *W, const float *G, float gs, float *M, float *V, size_t n, float lr,
                  float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
    const float decay = 1.0f - lr * wd, step = lr / bc1, sqrt_bc2 = sqrtf(bc2);
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float mi, vi;
        const float gi = G[i] * gs;
        moments(gi, &M[i], &V[i], beta1, beta2, &mi, &vi);
        W[i] = W[i] * decay - step * mi / (sqrtf(vi) / sqrt_bc2 + eps);
    }
}

/* LAMB's first half on n elements: moments of the gradients G[i] * gs, then
 * the update direction U. */
static void lamb_direction(float *U, const float *W, const float *G, float gs, float *M, float *V,
                           size_t n, float beta1, float beta2, float eps, float wd, float bc1,
                           float bc2) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float mi, vi;
        const float gi = G[i] * gs;
        moments(gi, &M[i], &V[i], beta1, beta2, &mi, &vi);
        U[i] = (mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * W[i];
    }
}

static void cpu_adamw_step(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, size_t n,
                           float lr, float beta1, float beta2, float eps, float wd, float bc1,
                           float bc2) {
    (void)be;
    adamw(cpu_f32(w), cpu_f32(g), 1.0f, cpu_f32(m), cpu_f32(v), n, lr, beta1, beta2, eps, wd, bc1,
          bc2);
}

static void cpu_lamb_update(bt_backend *be, bt_ptr u, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v,
                            size_t n, float beta1, float beta2, float eps, float wd, float bc1,
                            float bc2) {
    (void)be;
    lamb_direction(cpu_f32(u), cpu_f32(w), cpu_f32(g), 1.0f, cpu_f32(m), cpu_f32(v), n, beta1,
                   beta2, eps, wd, bc1, bc2);
}

/* The multi ops' 16-bit copy of span t's new weights (when w16 is asked
 * for), right after the span's update, while it is in cache. */
static void copy16(bt_backend *be, bt_ptr w16, bt_dtype dt, bt_ptr w, const bt_tensor_span *t) {
    if (!w16.buf) return;
    be->cast(be, (bt_ptr){w16.buf, w16.off + 2 * t->offset}, dt, bt_at(w, t->offset), BT_F32,
             t->numel);
}

static void cpu_adamw_multi(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                            bt_dtype w16_dtype, const bt_tensor_span *spans, int n_spans,
                            float lr, float beta1, float beta2, float eps, float grad_scale,
                            int gate) {
    bool skip;
    grad_scale = cpu_gate_scale(be->ctx, gate, grad_scale, &skip);
    if (skip) return;
    for (int s = 0; s < n_spans; s++) {
        const bt_tensor_span *t = &spans[s];
        adamw(cpu_f32(w) + t->offset, cpu_f32(g) + t->offset, grad_scale, cpu_f32(m) + t->offset,
              cpu_f32(v) + t->offset, t->numel, lr, beta1, beta2, eps, t->weight_decay, t->bc1,
              t->bc2);
        copy16(be, w16, w16_dtype, w, t);
    }
}

static void cpu_lamb_multi(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                           bt_dtype w16_dtype, const bt_tensor_span *spans, int n_spans, float lr, float beta1,
                           float beta2, float eps, float min_coeff, float max_coeff,
                           float grad_scale, int gate) {
    cpu_ctx *ctx = be->ctx;
    bool skip;
    grad_scale = cpu_gate_scale(ctx, gate, grad_scale, &skip);
    if (skip) return;
    for (int s = 0; s < n_spans; s++) {
        const bt_tensor_span *t = &spans[s];
        float *W = cpu_f32(w) + t->offset,
              *U = bt_partials_reserve(&ctx->lamb_u, t->numel, "cpu backend");
        lamb_direction(U, W, cpu_f32(g) + t->offset, grad_scale, cpu_f32(m) + t->offset,
                       cpu_f32(v) + t->offset, t->numel, beta1, beta2, eps, t->weight_decay,
                       t->bc1, t->bc2);
        const double wn = sqrt(cpu_reduce_chunks(ctx, W, t->numel, true)),
                     un = sqrt(cpu_reduce_chunks(ctx, U, t->numel, true));
        double trust = (wn > 0.0 && un > 0.0) ? wn / un : 1.0;
        if (trust < min_coeff) trust = min_coeff;
        if (trust > max_coeff) trust = max_coeff;
        const float alpha = (float)(-(double)lr * trust);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < t->numel; i++) W[i] += alpha * U[i];
        copy16(be, w16, w16_dtype, w, t);
    }
}

void cpu_fill_optim_ops(bt_backend *be) {
    be->adamw_step = cpu_adamw_step;
    be->lamb_update = cpu_lamb_update;
    be->adamw_multi = cpu_adamw_multi;
    be->lamb_multi = cpu_lamb_multi;
}
