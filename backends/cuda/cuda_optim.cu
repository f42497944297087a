/* CUDA backend: optimizer steps, per tensor and over every tensor at once
 * (opencl_optim.c's twin; kernels in kernels/optim.cl). A multi-tensor
 * step copies its span table to the device without waiting (pageable host
 * memory is staged before cudaMemcpyAsync returns) and launches a fixed
 * number of kernels however many spans. */
#include "cuda_launch.cuh"

#include <math.h>
#include <string.h>

static void cu_adamw_step(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, size_t n,
                          float lr, float beta1, float beta2, float eps, float wd, float bc1,
                          float bc2) {
    cu_ctx *c = cu(be);
    /* the CPU backend's per-call scalars, rounded on the host */
    const float decay = 1.0f - lr * wd, step = lr / bc1, sqrt_bc2 = sqrtf(bc2);
    LAUNCH(c, adamw_step, n, cu_f32(w), cu_f32(g), cu_f32(m), cu_f32(v), n, beta1, beta2, eps,
           decay, step, sqrt_bc2);
}

static void cu_lamb_update(bt_backend *be, bt_ptr u, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v,
                           size_t n, float beta1, float beta2, float eps, float wd, float bc1,
                           float bc2) {
    cu_ctx *c = cu(be);
    LAUNCH(c, lamb_update, n, cu_f32(u), cu_f32(w), cu_f32(g), cu_f32(m), cu_f32(v), n, beta1,
           beta2, eps, wd, bc1, bc2);
}

/* A multi-tensor step's data on the device (c->multi_mem): the span table
 * (see kernels/optim.cl), the span scalars, two partials per chunk and
 * one trust coefficient per span. */
typedef struct {
    size_t chunks; /* blocks of the element passes */
    const unsigned long long *tab;
    const float *ftab;
    float *partial, *coef;
} multi_layout;

/* Host memory of at least `bytes` for the table. */
static void *host_table(cu_ctx *c, size_t bytes) {
    return bt_host_reserve(&c->multi_host, bytes, "cuda", "an optimizer step");
}

/* Build and copy (without waiting) the table of n spans with `scalars` (3
 * per span); grow c->multi_mem to hold it all. */
static multi_layout upload_spans(cu_ctx *c, const bt_tensor_span *s, int n, const float *scalars) {
    const size_t n_ul = 3 * (size_t)n + 1;
    size_t chunks = 0;
    for (int t = 0; t < n; t++) chunks += (s[t].numel + BT_REDUCE_CHUNK - 1) / BT_REDUCE_CHUNK;
    const size_t ftab_off = 2 * n_ul, part_off = ftab_off + 3 * (size_t)n,
                 coef_off = part_off + 2 * chunks, table_bytes = part_off * sizeof(float),
                 bytes = (coef_off + (size_t)n) * sizeof(float);
    if (bytes > c->multi_bytes) {
        cu_graph_break(c, "the optimizer's table grows");
        if (c->multi_mem) CU_CHECK(cudaFree(c->multi_mem));
        CU_CHECK(cudaMalloc(&c->multi_mem, bytes));
        c->multi_bytes = bytes;
    }
    unsigned long long *tab = (unsigned long long *)host_table(c, table_bytes);
    unsigned long long chunk = 0;
    for (int t = 0; t < n; t++) {
        tab[t] = s[t].offset;
        tab[n + t] = s[t].numel;
        tab[2 * n + t] = chunk;
        chunk += (s[t].numel + BT_REDUCE_CHUNK - 1) / BT_REDUCE_CHUNK;
    }
    tab[3 * n] = chunk;
    memcpy((float *)tab + ftab_off, scalars, 3 * (size_t)n * sizeof(float));
    if (!cu_graph_upload(c, c->multi_mem, tab, table_bytes)) {
        cu_graph_break(c, "the optimizer's table"); /* pageable: not in a capture */
        CU_CHECK(cudaMemcpyAsync(c->multi_mem, tab, table_bytes, cudaMemcpyHostToDevice,
                                 c->stream));
    }
    float *dev = (float *)c->multi_mem;
    return multi_layout{chunks, (const unsigned long long *)dev, dev + ftab_off, dev + part_off,
                        dev + coef_off};
}

/* Per-span scalars (3 per span), freed by the caller. */
static float *span_scalars(int n) {
    float *f = (float *)malloc(3 * (size_t)(n > 0 ? n : 1) * sizeof *f);
    if (!f) {
        fprintf(stderr, "bertrain: cuda: out of host memory for an optimizer step\n");
        exit(1);
    }
    return f;
}

/* The multi kernels' w16: where the 16-bit copy of the weights goes, or w
 * itself (never written, kind16 none). */
static unsigned short *w16_arg(bt_ptr w, bt_ptr w16) {
    return (unsigned short *)cu_addr(w16.buf ? w16 : w, 2);
}

/* The multi kernels' kind16 (BT_KIND16_*, kernels/common.cl). */
static int kind16_arg(bt_ptr w16, bt_dtype dt) { return !w16.buf ? BT_KIND16_NONE : BT_KIND16_OF(dt); }

static void cu_adamw_multi(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                           bt_dtype w16_dtype, const bt_tensor_span *spans, int n, float lr,
                           float beta1, float beta2, float eps, float grad_scale, int gate) {
    cu_ctx *c = cu(be);
    if (n <= 0) return;
    float *f = span_scalars(n);
    for (int t = 0; t < n; t++) { /* adamw_step's per-call scalars */
        f[3 * t] = 1.0f - lr * spans[t].weight_decay;
        f[3 * t + 1] = lr / spans[t].bc1;
        f[3 * t + 2] = sqrtf(spans[t].bc2);
    }
    const multi_layout L = upload_spans(c, spans, n, f);
    free(f);
    const float *G = cu_gate_arg(c, gate);
    LAUNCH(c, adamw_multi, L.chunks * BT_WG, cu_f32(w), cu_f32(g), cu_f32(m), cu_f32(v),
           w16_arg(w, w16), kind16_arg(w16, w16_dtype), L.tab, L.ftab, n, beta1, beta2, eps,
           grad_scale, G, (int)(G != NULL));
}

static void cu_lamb_multi(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                          bt_dtype w16_dtype, const bt_tensor_span *spans, int n, float lr,
                          float beta1, float beta2, float eps, float min_coeff, float max_coeff,
                          float grad_scale, int gate) {
    cu_ctx *c = cu(be);
    if (n <= 0) return;
    float *f = span_scalars(n);
    for (int t = 0; t < n; t++) {
        f[3 * t] = spans[t].weight_decay;
        f[3 * t + 1] = spans[t].bc1;
        f[3 * t + 2] = spans[t].bc2;
    }
    const multi_layout L = upload_spans(c, spans, n, f);
    free(f);
    const float *G = cu_gate_arg(c, gate);
    LAUNCH(c, lamb_multi_moments, L.chunks * BT_WG, cu_f32(w), cu_f32(g), cu_f32(m), cu_f32(v),
           L.tab, L.ftab, L.partial, n, beta1, beta2, eps, grad_scale, G, (int)(G != NULL));
    LAUNCH(c, lamb_multi_trust, (size_t)n * BT_WG, L.tab, L.partial, L.coef, n, lr, min_coeff,
           max_coeff, G, (int)(G != NULL));
    LAUNCH(c, lamb_multi_apply, L.chunks * BT_WG, cu_f32(w), cu_f32(m), cu_f32(v),
           w16_arg(w, w16), kind16_arg(w16, w16_dtype), L.tab, L.ftab, L.coef, n, eps, G,
           (int)(G != NULL));
}

void cu_optim_release(cu_ctx *c) {
    if (c->multi_mem) (void)cudaFree(c->multi_mem);
    bt_host_buf_free(&c->multi_host);
    c->multi_mem = NULL;
    c->multi_bytes = 0;
}

void cu_fill_optim_ops(bt_backend *be) {
    be->adamw_step = cu_adamw_step;
    be->lamb_update = cu_lamb_update;
    be->adamw_multi = cu_adamw_multi;
    be->lamb_multi = cu_lamb_multi;
}
