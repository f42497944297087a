/* OpenCL backend: optimizer steps, per tensor and over every tensor at once
 * (kernels/optim.cl). A multi-tensor step uploads its span table without
 * waiting and launches a fixed number of kernels however many spans. */
#include "opencl_launch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The four flat buffers of a step. */
static void flat_args(args *a, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v) {
    arg_f32p(a, w);
    arg_f32p(a, g);
    arg_f32p(a, m);
    arg_f32p(a, v);
}

static void ocl_adamw_step(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, size_t n,
                           float lr, float beta1, float beta2, float eps, float wd, float bc1,
                           float bc2) {
    /* the CPU backend's per-call scalars, rounded on the host */
    const float decay = 1.0f - lr * wd, step = lr / bc1, sqrt_bc2 = sqrtf(bc2);
    args a = begin(be, K_adamw_step);
    flat_args(&a, w, g, m, v);
    arg_ul(&a, n);
    arg_f(&a, beta1);
    arg_f(&a, beta2);
    arg_f(&a, eps);
    arg_f(&a, decay);
    arg_f(&a, step);
    arg_f(&a, sqrt_bc2);
    launch(be, &a, n);
}

static void ocl_lamb_update(bt_backend *be, bt_ptr u, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v,
                            size_t n, float beta1, float beta2, float eps, float wd, float bc1,
                            float bc2) {
    args a = begin(be, K_lamb_update);
    arg_f32p(&a, u);
    flat_args(&a, w, g, m, v);
    arg_ul(&a, n);
    arg_f(&a, beta1);
    arg_f(&a, beta2);
    arg_f(&a, eps);
    arg_f(&a, wd);
    arg_f(&a, bc1);
    arg_f(&a, bc2);
    launch(be, &a, n);
}

/* Where a multi-tensor step's data lies in c->multi_mem: the span table
 * (ulongs, see kernels/optim.cl), then in floats the span scalars, two
 * partials per chunk and one trust coefficient per span. */
typedef struct {
    size_t chunks;                      /* work-groups of the element passes */
    size_t ftab_off, part_off, coef_off; /* float offsets */
} multi_layout;

/* The host's copy of the table, at least `bytes`, once its last upload is done. */
static void *host_table(ocl_ctx *c, size_t bytes) {
    if (c->multi_write) {
        CL_CHECK(clWaitForEvents(1, &c->multi_write));
        CL_CHECK(clReleaseEvent(c->multi_write));
        c->multi_write = NULL;
    }
    return bt_host_reserve(&c->multi_host, bytes, "opencl", "an optimizer step");
}

/* Build and upload (without waiting) the table of n spans with per-span
 * scalars from `scalars` (3 per span); grow c->multi_mem to hold it all. */
static multi_layout upload_spans(ocl_ctx *c, const bt_tensor_span *s, int n,
                                 const float *scalars) {
    multi_layout L = {0, 0, 0, 0};
    const size_t n_ul = 3 * (size_t)n + 1;
    for (int t = 0; t < n; t++) L.chunks += (s[t].numel + OCL_REDUCE_CHUNK - 1) / OCL_REDUCE_CHUNK;
    L.ftab_off = 2 * n_ul; /* floats after the ulongs */
    L.part_off = L.ftab_off + 3 * (size_t)n;
    L.coef_off = L.part_off + 2 * L.chunks;
    const size_t table_bytes = L.part_off * sizeof(float),
                 bytes = (L.coef_off + (size_t)n) * sizeof(float);
    if (bytes > c->multi_bytes) {
        if (c->multi_mem) CL_CHECK(clReleaseMemObject(c->multi_mem));
        cl_int e;
        c->multi_mem = clCreateBuffer(c->context, CL_MEM_READ_WRITE, bytes, NULL, &e);
        CL_CHECK_CODE("clCreateBuffer", e);
        c->multi_bytes = bytes;
    }
    cl_ulong *tab = host_table(c, table_bytes);
    cl_ulong chunk = 0;
    for (int t = 0; t < n; t++) {
        tab[t] = s[t].offset;
        tab[n + t] = s[t].numel;
        tab[2 * n + t] = chunk;
        chunk += (s[t].numel + OCL_REDUCE_CHUNK - 1) / OCL_REDUCE_CHUNK;
    }
    tab[3 * n] = chunk;
    memcpy((float *)tab + L.ftab_off, scalars, 3 * (size_t)n * sizeof(float));
    CL_CHECK(clEnqueueWriteBuffer(c->queue, c->multi_mem, CL_FALSE, 0, table_bytes, tab, 0, NULL,
                                  &c->multi_write));
    return L;
}


/* The multi kernels' span table and per-span scalars (tab, ftab). */
static void tab_args(args *a, ocl_ctx *c, const multi_layout *L) {
    arg_mem(a, c->multi_mem);
    arg_mem(a, c->multi_mem);
    arg_ul(a, L->ftab_off);
}

/* The multi kernels' w16 and kind16 arguments: where the 16-bit copy of the
 * weights goes, or w itself (never written) with kind none. */
static void w16_args(args *a, bt_ptr w, bt_ptr w16, bt_dtype dt) {
    arg_ptr(a, w16.buf ? w16 : w, 2);
    arg_i(a, !w16.buf ? BT_KIND16_NONE : BT_KIND16_OF(dt));
}

/* Per-span scalars into a growable host array (3 per span). */
static float *span_scalars(int n) {
    float *f = malloc(3 * (size_t)(n > 0 ? n : 1) * sizeof *f);
    if (!f) {
        fprintf(stderr, "bertrain: opencl: out of host memory for an optimizer step\n");
        exit(1);
    }
    return f;
}

static void ocl_adamw_multi(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                            bt_dtype w16_dtype, const bt_tensor_span *spans, int n, float lr,
                            float beta1, float beta2, float eps, float grad_scale, int gate) {
    ocl_ctx *c = ocl(be);
    if (n <= 0) return;
    float *f = span_scalars(n);
    for (int t = 0; t < n; t++) { /* adamw_step's per-call scalars */
        f[3 * t] = 1.0f - lr * spans[t].weight_decay;
        f[3 * t + 1] = lr / spans[t].bc1;
        f[3 * t + 2] = sqrtf(spans[t].bc2);
    }
    const multi_layout L = upload_spans(c, spans, n, f);
    free(f);
    args a = begin(be, K_adamw_multi);
    flat_args(&a, w, g, m, v);
    w16_args(&a, w, w16, w16_dtype);
    tab_args(&a, c, &L);
    arg_i(&a, n);
    arg_f(&a, beta1);
    arg_f(&a, beta2);
    arg_f(&a, eps);
    arg_f(&a, grad_scale);
    ocl_gate_args(&a, c, gate);
    launch(be, &a, L.chunks * c->wg);
}

static void ocl_lamb_multi(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                           bt_dtype w16_dtype, const bt_tensor_span *spans, int n, float lr,
                           float beta1, float beta2, float eps, float min_coeff, float max_coeff,
                           float grad_scale, int gate) {
    ocl_ctx *c = ocl(be);
    if (n <= 0) return;
    float *f = span_scalars(n);
    for (int t = 0; t < n; t++) {
        f[3 * t] = spans[t].weight_decay;
        f[3 * t + 1] = spans[t].bc1;
        f[3 * t + 2] = spans[t].bc2;
    }
    const multi_layout L = upload_spans(c, spans, n, f);
    free(f);
    args a = begin(be, K_lamb_multi_moments);
    flat_args(&a, w, g, m, v);
    tab_args(&a, c, &L);
    arg_mem(&a, c->multi_mem);
    arg_ul(&a, L.part_off);
    arg_i(&a, n);
    arg_f(&a, beta1);
    arg_f(&a, beta2);
    arg_f(&a, eps);
    arg_f(&a, grad_scale);
    ocl_gate_args(&a, c, gate);
    launch(be, &a, L.chunks * c->wg);
    args t = begin(be, K_lamb_multi_trust);
    arg_mem(&t, c->multi_mem);
    arg_mem(&t, c->multi_mem);
    arg_ul(&t, L.part_off);
    arg_mem(&t, c->multi_mem);
    arg_ul(&t, L.coef_off);
    arg_i(&t, n);
    arg_f(&t, lr);
    arg_f(&t, min_coeff);
    arg_f(&t, max_coeff);
    ocl_gate_args(&t, c, gate);
    launch(be, &t, (size_t)n * c->wg);
    args p = begin(be, K_lamb_multi_apply);
    arg_f32p(&p, w);
    arg_f32p(&p, m);
    arg_f32p(&p, v);
    w16_args(&p, w, w16, w16_dtype);
    tab_args(&p, c, &L);
    arg_mem(&p, c->multi_mem);
    arg_ul(&p, L.coef_off);
    arg_i(&p, n);
    arg_f(&p, eps);
    ocl_gate_args(&p, c, gate);
    launch(be, &p, L.chunks * c->wg);
}

void ocl_optim_release(ocl_ctx *c) {
    if (c->multi_write) {
        clWaitForEvents(1, &c->multi_write);
        clReleaseEvent(c->multi_write);
    }
    if (c->multi_mem) clReleaseMemObject(c->multi_mem);
    bt_host_buf_free(&c->multi_host);
    c->multi_write = NULL;
    c->multi_mem = NULL;
    c->multi_bytes = 0;
}

void ocl_fill_optim_ops(bt_backend *be) {
    be->adamw_step = ocl_adamw_step;
    be->lamb_update = ocl_lamb_update;
    be->adamw_multi = ocl_adamw_multi;
    be->lamb_multi = ocl_lamb_multi;
}
