/* The profiler's op table: each op calls the wrapped backend's between two
 * marks and records its cost, the FLOPs of a GEMM or the bytes an op must
 * read and write (each element once: the least any kernel could move). */
#include "profile_internal.h"

#include <stdio.h>
#include <stdlib.h>

#define INNER(be) (((bt_profiler *)(be)->ctx)->inner)

/* Run `call` on the wrapped backend `in` as op `op` costing (flops, bytes). */
#define TIMED(be, op, flops, bytes, call)                            \
    do {                                                             \
        bt_profiler *p_ = (be)->ctx;                                 \
        bt_backend *in = p_->inner;                                  \
        const int m0_ = prof_before(p_);                             \
        call;                                                        \
        prof_after(p_, PROF_##op, m0_, (flops), (bytes));            \
    } while (0)

#define F4 4.0 /* bytes of an fp32 or int32 element */

static const char *const op_names[] = {
#define BT_PROF_NAME(op, kind) BT_OP_IF_TIMED(kind, #op, )
    BT_OP_LIST(BT_PROF_NAME)
#undef BT_PROF_NAME
};

const char *prof_op_name(int i) { return op_names[i]; }

/* ---- recording ---- */

int prof_before(bt_profiler *p) {
    if (!p->in_step) return -1;
    return p->inner->mark(p->inner);
}

void prof_after(bt_profiler *p, int op, int m0, double flops, double bytes) {
    if (m0 < 0) return;
    const int m1 = p->inner->mark(p->inner);
    p->ev = prof_room(p->ev, p->n_ev, &p->cap_ev, 1024, sizeof *p->ev);
    p->ev[p->n_ev++] = (prof_event){op, m0, m1, flops, bytes, -1};
    p->step_calls++;
}

/* ---- forwarded untimed: device queries, memory management, profiling ---- */

static void p_info(bt_backend *be, bt_device_info *out) { INNER(be)->info(INNER(be), out); }
static bt_buffer *p_alloc(bt_backend *be, size_t bytes) { return INNER(be)->alloc(INNER(be), bytes); }
static void p_free(bt_backend *be, bt_buffer *b) { INNER(be)->free(INNER(be), b); }
static void p_counters(bt_backend *be, bt_counters *out) { INNER(be)->counters(INNER(be), out); }
static int p_mark(bt_backend *be) { return INNER(be)->mark(INNER(be)); }
static double p_mark_seconds(bt_backend *be, int a, int b) {
    return INNER(be)->mark_seconds(INNER(be), a, b);
}
static void p_marks_reset(bt_backend *be) { INNER(be)->marks_reset(INNER(be)); }
/* Passed on: the marks between the ops break a region each time, so the
 * device runs a profiled step as it comes (and says so in its launches). */
static void p_graph_begin(bt_backend *be, int region) {
    INNER(be)->graph_begin(INNER(be), region);
}
static void p_graph_end(bt_backend *be) { INNER(be)->graph_end(INNER(be)); }

/* ---- device and memory ---- */

static void p_sync(bt_backend *be) { TIMED(be, sync, 0, 0, in->sync(in)); }
static void p_upload(bt_backend *be, bt_ptr dst, const void *src, size_t bytes) {
    TIMED(be, upload, 0, (double)bytes, in->upload(in, dst, src, bytes));
}
static void p_download(bt_backend *be, void *dst, bt_ptr src, size_t bytes) {
    TIMED(be, download, 0, (double)bytes, in->download(in, dst, src, bytes));
}
static void *p_host_alloc(bt_backend *be, size_t bytes) {
    return INNER(be)->host_alloc(INNER(be), bytes);
}
static void p_host_free(bt_backend *be, void *p) { INNER(be)->host_free(INNER(be), p); }
static long p_download_async(bt_backend *be, void *dst, bt_ptr src, size_t bytes) {
    long t = 0;
    TIMED(be, download_async, 0, (double)bytes, t = in->download_async(in, dst, src, bytes));
    return t;
}
static bool p_downloads_done(bt_backend *be, long ticket, bool wait) {
    bool done = false;
    TIMED(be, downloads_done, 0, 0, done = in->downloads_done(in, ticket, wait));
    return done;
}
static void p_upload_async(bt_backend *be, bt_ptr dst, const void *src, size_t bytes) {
    TIMED(be, upload_async, 0, (double)bytes, in->upload_async(in, dst, src, bytes));
}
static void p_copy(bt_backend *be, bt_ptr dst, bt_ptr src, size_t bytes) {
    TIMED(be, copy, 0, 2.0 * bytes, in->copy(in, dst, src, bytes));
}
static void p_fill(bt_backend *be, bt_ptr dst, float value, size_t n) {
    TIMED(be, fill, 0, F4 * n, in->fill(in, dst, value, n));
}

/* ---- math ---- */

/* Bytes of a GEMM: A and B read, C written (and read when beta != 0). */
/* Bytes a GEMM's operands move: A and B at 4 bytes an element, or 2 where
 * stored16 says they are 16-bit, and C read (beta != 0) and written. */
static double gemm_bytes(int m, int n, int k, float beta, int batch, unsigned stored16) {
    const double a = stored16 & BT_GEMM_A16 ? 2.0 : F4, b = stored16 & BT_GEMM_B16 ? 2.0 : F4;
    return batch * (a * m * k + b * k * n + F4 * (beta != 0.0f ? 2.0 : 1.0) * m * n);
}

/* Tag the event just recorded (when a step is) with its GEMM shape. */
static void note_gemm_shape(bt_profiler *p, const prof_gemm_shape *key) {
    if (p->in_step) p->ev[p->n_ev - 1].shape = prof_gemm_shape_of(p, key);
}

static void p_gemm(bt_backend *be, bool ta, bool tb, int m, int n, int k, float alpha, bt_ptr a,
                   int lda, long sa, bt_ptr b, int ldb, long sb, float beta, bt_ptr c, int ldc,
                   long sc, int batch) {
    TIMED(be, gemm, 2.0 * m * n * k * batch, gemm_bytes(m, n, k, beta, batch, 0),
          in->gemm(in, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch));
    const prof_gemm_shape key = {.dtype = -1, .ta = ta, .tb = tb, .m = m, .n = n, .k = k,
                                 .lda = lda, .ldb = ldb, .ldc = ldc, .batch = batch,
                                 .sa = sa, .sb = sb, .sc = sc, .beta = beta};
    note_gemm_shape(be->ctx, &key);
}
static void p_gemm16(bt_backend *be, bt_dtype dt, unsigned s16, bool ta, bool tb, int m, int n,
                     int k, float alpha, bt_ptr a, int lda, long sa, bt_ptr b, int ldb, long sb,
                     float beta, bt_ptr c, int ldc, long sc, int batch) {
    TIMED(be, gemm16, 2.0 * m * n * k * batch, gemm_bytes(m, n, k, beta, batch, s16),
          in->gemm16(in, dt, s16, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                     sc, batch));
    const prof_gemm_shape key = {.dtype = (int)dt, .stored16 = s16, .ta = ta, .tb = tb, .m = m, .n = n, .k = k,
                                 .lda = lda, .ldb = ldb, .ldc = ldc, .batch = batch,
                                 .sa = sa, .sb = sb, .sc = sc, .beta = beta};
    note_gemm_shape(be->ctx, &key);
}
static void p_gemm16_bias(bt_backend *be, bt_dtype dt, unsigned s16, int m, int n, int k,
                          bt_ptr a, bt_ptr b, bt_ptr bias, bt_ptr bias16, bt_ptr c16) {
    /* the GEMM's operands and its 16-bit output, and the bias once */
    TIMED(be, gemm16_bias, 2.0 * m * n * k,
          gemm_bytes(m, n, k, 0.0f, 1, s16) - 2.0 * m * n + F4 * n,
          in->gemm16_bias(in, dt, s16, m, n, k, a, b, bias, bias16, c16));
    const prof_gemm_shape key = {.dtype = (int)dt, .stored16 = s16 | BT_GEMM_C16, .tb = true,
                                 .m = m, .n = n, .k = k, .lda = k, .ldb = k, .ldc = n,
                                 .batch = 1, .beta = 1.0f};
    note_gemm_shape(be->ctx, &key);
}
static void p_gemm16_bias_grad(bt_backend *be, bt_dtype dt, unsigned s16, int m, int n, int k,
                               bt_ptr a, bt_ptr b, bt_ptr c, bt_ptr dbias) {
    /* the GEMM's (C read and written) and dbias read and written */
    TIMED(be, gemm16_bias_grad, 2.0 * m * n * k,
          gemm_bytes(m, n, k, 1.0f, 1, s16 | BT_GEMM_A16) + 2.0 * F4 * m,
          in->gemm16_bias_grad(in, dt, s16, m, n, k, a, b, c, dbias));
    const prof_gemm_shape key = {.dtype = (int)dt, .stored16 = s16 | BT_GEMM_A16, .ta = true,
                                 .m = m, .n = n, .k = k, .lda = m, .ldb = n, .ldc = n,
                                 .batch = 1, .beta = 1.0f};
    note_gemm_shape(be->ctx, &key);
}
static void p_gemm_grid(bt_backend *be, bt_dtype dt, unsigned s16, bool ta, bool tb, int m,
                        int n, int k, float alpha, bt_ptr a, int lda, bt_ptr b, int ldb,
                        float beta, bt_ptr c, int ldc, const bt_gemm_grid *g) {
    const int count = g->batch * g->outer;
    TIMED(be, gemm_grid, 2.0 * m * n * k * count, gemm_bytes(m, n, k, beta, count, s16),
          in->gemm_grid(in, dt, s16, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, g));
    const prof_gemm_shape key = {.dtype = dt == BT_F32 ? -1 : (int)dt, .stored16 = s16,
                                 .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda,
                                 .ldb = ldb, .ldc = ldc, .batch = g->batch, .sa = g->stride_a,
                                 .sb = g->stride_b, .sc = g->stride_c, .outer = g->outer,
                                 .oa = g->outer_a, .ob = g->outer_b, .oc = g->outer_c,
                                 .beta = beta};
    note_gemm_shape(be->ctx, &key);
}
static void p_bias_add(bt_backend *be, bt_ptr y, bt_ptr bias, int rows, int cols, bt_dtype r16,
                       bt_ptr y16, bool y_kept) {
    const double passes = !y.buf ? 0.0 : 1.0 + (y_kept || !y16.buf); /* zero y: not read */
    TIMED(be, bias_add, 0, F4 * (passes * rows * cols + cols) + (y16.buf ? 2.0 * rows * cols : 0),
          in->bias_add(in, y, bias, rows, cols, r16, y16, y_kept));
}
static void p_bias_grad(bt_backend *be, bt_ptr dbias, bt_ptr dy, int rows, int cols,
                        bt_dtype round16, bt_dtype dy_dtype) {
    TIMED(be, bias_grad, 0,
          (double)bt_dtype_size(dy_dtype) * rows * cols + F4 * 2.0 * cols,
          in->bias_grad(in, dbias, dy, rows, cols, round16, dy_dtype));
}
static void p_embed_fwd(bt_backend *be, bt_ptr out, bt_ptr ids, bt_ptr tt, bt_ptr wte, bt_ptr wpe,
                        bt_ptr wtt, int B, int T, int C) {
    const double btc = (double)B * T * C;
    TIMED(be, embed_fwd, 0, F4 * (4.0 * btc + 2.0 * B * T),
          in->embed_fwd(in, out, ids, tt, wte, wpe, wtt, B, T, C));
}
static void p_embed_bwd(bt_backend *be, bt_ptr dwte, bt_ptr dwpe, bt_ptr dwtt, bt_ptr dout,
                        bt_ptr ids, bt_ptr links, bt_ptr tt, int B, int T, int C, int V,
                        int TV, int pad) {
    const double btc = (double)B * T * C; /* dout read; the touched rows read and written */
    TIMED(be, embed_bwd, 0, F4 * (btc + 2.0 * btc + 2.0 * (double)T * C + 2.0 * B * T),
          in->embed_bwd(in, dwte, dwpe, dwtt, dout, ids, links, tt, B, T, C, V, TV, pad));
}
static void p_layernorm_fwd(bt_backend *be, bt_ptr out, bt_ptr mean, bt_ptr rstd, bt_ptr x,
                            bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                            bt_dtype round16) {
    TIMED(be, layernorm_fwd, 0, F4 * (2.0 * rows * cols + 2.0 * cols + 2.0 * rows),
          in->layernorm_fwd(in, out, mean, rstd, x, gamma, beta, rows, cols, eps, round16));
}
static void p_layernorm_bwd(bt_backend *be, bt_ptr dx, bt_ptr dgamma, bt_ptr dbeta, bt_ptr dout,
                            bt_ptr dbranch, bt_ptr x, bt_ptr mean, bt_ptr rstd, bt_ptr gamma,
                            int rows, int cols, bt_ln_bwd_types t, const bt_ln_bwd_drop *drop) {
    const double rc = (double)rows * cols;
    TIMED(be, layernorm_bwd, 0,
          F4 * (5.0 * cols + 2.0 * rows) +
              rc * (double)(bt_dtype_size(t.dout) + bt_dtype_size(t.dx) + bt_dtype_size(t.x) +
                            (dbranch.buf ? bt_dtype_size(t.dbranch) : 0) +
                            (drop ? bt_dtype_size(drop->kind16) : 0)),
          in->layernorm_bwd(in, dx, dgamma, dbeta, dout, dbranch, x, mean, rstd, gamma, rows,
                            cols, t, drop));
}
static void p_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr x, size_t n) {
    TIMED(be, gelu_fwd, 0, F4 * 2.0 * n, in->gelu_fwd(in, out, x, n));
}
static void p_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr x, size_t n) {
    TIMED(be, gelu_bwd, 0, F4 * 3.0 * n, in->gelu_bwd(in, dx, dout, x, n));
}
static void p_tanh_fwd(bt_backend *be, bt_ptr out, bt_ptr x, size_t n, bt_dtype dtype) {
    TIMED(be, tanh_fwd, 0, bt_dtype_size(dtype) * 2.0 * n, in->tanh_fwd(in, out, x, n, dtype));
}
static void p_tanh_bwd(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr y, size_t n,
                       bt_dtype dtype) {
    TIMED(be, tanh_bwd, 0, bt_dtype_size(dtype) * 3.0 * n,
          in->tanh_bwd(in, dx, dout, y, n, dtype));
}
static void p_softmax_fwd(bt_backend *be, bt_ptr probs, bt_ptr scores, bt_ptr mask, int B, int H,
                          int T, float scale) {
    TIMED(be, softmax_fwd, 0, F4 * (2.0 * B * H * T * T + (double)B * T),
          in->softmax_fwd(in, probs, scores, mask, B, H, T, scale));
}
static void p_softmax_bwd(bt_backend *be, bt_ptr ds, bt_ptr dp, bt_ptr p, int rows, int T,
                          float scale) {
    TIMED(be, softmax_bwd, 0, F4 * 3.0 * rows * T, in->softmax_bwd(in, ds, dp, p, rows, T, scale));
}
static void p_dropout_rows(bt_backend *be, bt_ptr x, bt_ptr idx, int n_idx, int cols, size_t per,
                           uint32_t first, float p, bt_rng_key key) {
    TIMED(be, dropout_rows, 0, F4 * (2.0 * n_idx * cols + n_idx),
          in->dropout_rows(in, x, idx, n_idx, cols, per, first, p, key));
}
static void p_dropout(bt_backend *be, bt_ptr out, bt_ptr x, size_t n, size_t per, uint32_t first,
                      float p, bt_rng_key key, bt_dtype x_dtype, bt_ptr out16, bt_dtype kind16) {
    const double bytes = (x_dtype == BT_F32 ? 4.0 : 2.0) + (out.buf ? 4.0 : 0.0) +
                         (out16.buf ? 2.0 : 0.0);
    TIMED(be, dropout, 0, bytes * n,
          in->dropout(in, out, x, n, per, first, p, key, x_dtype, out16, kind16));
}
static void p_add(bt_backend *be, bt_ptr out, bt_ptr a, bt_ptr b, size_t n) {
    TIMED(be, add, 0, F4 * 3.0 * n, in->add(in, out, a, b, n));
}
static void p_scale(bt_backend *be, bt_ptr x, float alpha, size_t n) {
    TIMED(be, scale, 0, F4 * 2.0 * n, in->scale(in, x, alpha, n));
}
static void p_axpy(bt_backend *be, bt_ptr y, float alpha, bt_ptr x, size_t n) {
    TIMED(be, axpy, 0, F4 * 3.0 * n, in->axpy(in, y, alpha, x, n));
}
static void p_gather_rows(bt_backend *be, bt_ptr out, bt_ptr src, bt_ptr idx, int n_idx, int cols) {
    TIMED(be, gather_rows, 0, F4 * (2.0 * n_idx * cols + n_idx),
          in->gather_rows(in, out, src, idx, n_idx, cols));
}
static void p_scatter_rows(bt_backend *be, bt_ptr dst, bt_ptr src, bt_ptr idx, bt_ptr links,
                           int n_idx, int cols) {
    TIMED(be, scatter_rows, 0, F4 * (3.0 * n_idx * cols + n_idx),
          in->scatter_rows(in, dst, src, idx, links, n_idx, cols));
}
static void p_xent(bt_backend *be, bt_ptr dlogits, bt_ptr loss, bt_ptr correct, bt_ptr log_z,
                   bt_ptr logits, bt_ptr labels, int rows, int V, float gs, float z,
                   bt_dtype round16, bt_ptr dlogits16, bt_dtype logits_dtype) {
    const double grad_bytes = dlogits16.buf ? 2.0 : 4.0; /* the gradient's, a logit */
    const double logit_bytes = logits_dtype != BT_F32 ? 2.0 : 4.0;
    TIMED(be, xent_fwd_bwd, 0, (logit_bytes + grad_bytes) * rows * V + F4 * 4.0 * rows,
          in->xent_fwd_bwd(in, dlogits, loss, correct, log_z, logits, labels, rows, V, gs, z,
                           round16, dlogits16, logits_dtype));
}
static double p_sumsq(bt_backend *be, bt_ptr x, size_t n) {
    double r;
    TIMED(be, sumsq, 0, F4 * n, r = in->sumsq(in, x, n));
    return r;
}
static double p_sum(bt_backend *be, bt_ptr x, size_t n) {
    double r;
    TIMED(be, sum, 0, F4 * n, r = in->sum(in, x, n));
    return r;
}
static bool p_all_finite(bt_backend *be, bt_ptr x, size_t n) {
    bool r;
    TIMED(be, all_finite, 0, F4 * n, r = in->all_finite(in, x, n));
    return r;
}
static int p_reduce_defer(bt_backend *be, bt_reduce_kind kind, bt_ptr x, size_t n) {
    int r;
    TIMED(be, reduce_defer, 0, F4 * n, r = in->reduce_defer(in, kind, x, n));
    return r;
}
static void p_reduce_fetch(bt_backend *be, double *out) {
    TIMED(be, reduce_fetch, 0, 0, in->reduce_fetch(in, out));
}
static int p_step_gate(bt_backend *be, const bt_step_gate *rule) {
    int r;
    TIMED(be, step_gate, 0, 0, r = in->step_gate(in, rule));
    return r;
}

/* Elements of all spans. */
static double span_elems(const bt_tensor_span *s, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) e += (double)s[i].numel;
    return e;
}

/* AdamW: w, g, m, v read and w, m, v written, and the 16-bit copy of w. */
static void p_adamw_multi(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                          bt_dtype d16, const bt_tensor_span *s, int n, float lr, float b1,
                          float b2, float eps, float gs, int gate) {
    TIMED(be, adamw_multi, 0, (F4 * 7.0 + (w16.buf ? 2.0 : 0.0)) * span_elems(s, n),
          in->adamw_multi(in, w, g, m, v, w16, d16, s, n, lr, b1, b2, eps, gs, gate));
}
/* LAMB's three passes: w, g, m, v read and m, v written; w, m, v read and w
 * (and its 16-bit copy) written. */
static void p_lamb_multi(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                         bt_dtype d16, const bt_tensor_span *s, int n, float lr, float b1,
                         float b2, float eps, float lo, float hi, float gs, int gate) {
    TIMED(be, lamb_multi, 0, (F4 * 10.0 + (w16.buf ? 2.0 : 0.0)) * span_elems(s, n),
          in->lamb_multi(in, w, g, m, v, w16, d16, s, n, lr, b1, b2, eps, lo, hi, gs, gate));
}

static void p_adamw_step(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, size_t n,
                         float lr, float b1, float b2, float eps, float wd, float bc1, float bc2) {
    TIMED(be, adamw_step, 0, F4 * 7.0 * n,
          in->adamw_step(in, w, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2));
}
static void p_lamb_update(bt_backend *be, bt_ptr u, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v,
                          size_t n, float b1, float b2, float eps, float wd, float bc1, float bc2) {
    TIMED(be, lamb_update, 0, F4 * 7.0 * n,
          in->lamb_update(in, u, w, g, m, v, n, b1, b2, eps, wd, bc1, bc2));
}
static void p_cast(bt_backend *be, bt_ptr dst, bt_dtype dt, bt_ptr src, bt_dtype st, size_t n) {
    TIMED(be, cast, 0, (double)n * (bt_dtype_size(dt) + bt_dtype_size(st)),
          in->cast(in, dst, dt, src, st, n));
}
static void p_round16(bt_backend *be, bt_ptr x, bt_dtype dt, size_t n) {
    TIMED(be, round16, 0, F4 * 2.0 * n, in->round16(in, x, dt, n));
}

/* ---- fused ops: the bytes of their inputs and outputs, each once ---- */

static void p_bias_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, int rows,
                            int cols, bt_dtype r16, bt_ptr out16, bt_ptr y16, bool y_kept) {
    const double copies = (out16.buf != NULL) + (y16.buf != NULL),
                 passes = (y.buf ? 1.0 + y_kept : 0.0) + (out.buf != NULL); /* y16 given */
    TIMED(be, bias_gelu_fwd, 0, F4 * (passes * rows * cols + cols) + 2.0 * copies * rows * cols,
          in->bias_gelu_fwd(in, out, y, bias, rows, cols, r16, out16, y16, y_kept));
}
static void p_bias_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr db, bt_ptr dout, bt_ptr x,
                            int rows, int cols, bt_dtype r16, bt_dtype xt, bt_dtype dt,
                            bt_ptr dx16, bool dx_kept) {
    const double dx_passes = dx_kept || !dx16.buf;
    TIMED(be, bias_gelu_bwd, 0,
          F4 * (dx_passes * rows * cols + 2.0 * cols) +
              ((double)bt_dtype_size(xt) + (double)bt_dtype_size(dt) +
               (dx16.buf ? 2.0 : 0.0)) * rows * cols,
          in->bias_gelu_bwd(in, dx, db, dout, x, rows, cols, r16, xt, dt, dx16, dx_kept));
}
static void p_bias_dropout_add(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, bt_ptr resid,
                               int rows, int cols, bt_dtype r16, size_t per, uint32_t first,
                               float p, bt_rng_key key) {
    TIMED(be, bias_dropout_add, 0, F4 * (3.0 * rows * cols + cols),
          in->bias_dropout_add(in, out, y, bias, resid, rows, cols, r16, per, first, p, key));
}
static void p_add_dropout(bt_backend *be, bt_ptr out, bt_ptr a, bt_ptr b, bt_dtype bt, size_t n,
                          size_t per, uint32_t first, float p, bt_rng_key key, bt_dtype r16) {
    TIMED(be, add_dropout, 0, (8.0 + (double)bt_dtype_size(bt)) * n,
          in->add_dropout(in, out, a, b, bt, n, per, first, p, key, r16));
}
static void p_residual_layernorm_fwd(bt_backend *be, bt_ptr sum, bt_ptr out, bt_ptr mean,
                                     bt_ptr rstd, bt_ptr y, bt_ptr bias, bt_ptr resid,
                                     bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                                     bt_dtype r16, size_t per, uint32_t first, float p,
                                     bt_rng_key key, bt_ptr sum16, bt_ptr out16, bool sum_kept,
                                     bt_dtype resid_dtype, bool out_kept) {
    /* y, and sum and out where kept, in fp32; resid in its own type */
    const double copies = (sum16.buf != NULL) + (out16.buf != NULL),
                 passes = 1.0 + sum_kept + (out_kept || !out16.buf),
                 resid_bytes = resid_dtype == BT_F32 ? F4 : 2.0;
    TIMED(be, residual_layernorm_fwd, 0,
          F4 * (passes * rows * cols + 3.0 * cols + 2.0 * rows) +
              (2.0 * copies + resid_bytes) * rows * cols,
          in->residual_layernorm_fwd(in, sum, out, mean, rstd, y, bias, resid, gamma, beta,
                                     rows, cols, eps, r16, per, first, p, key, sum16, out16,
                                     sum_kept, resid_dtype, out_kept));
}
static void p_softmax_dropout_fwd(bt_backend *be, bt_ptr dropped, bt_ptr probs, bt_ptr scores,
                                  bt_ptr mask, int B, int H, int T, float scale, bt_dtype r16,
                                  uint32_t first, float p, bt_rng_key key, bt_ptr dropped16,
                                  bt_ptr probs16, bool probs_kept) {
    const double copies = (dropped16.buf != NULL) + (probs16.buf != NULL),
                 passes = 1.0 + probs_kept + (dropped.buf != NULL);
    TIMED(be, softmax_dropout_fwd, 0,
          F4 * (passes * B * H * T * T + (double)B * T) + 2.0 * copies * B * H * T * T,
          in->softmax_dropout_fwd(in, dropped, probs, scores, mask, B, H, T, scale, r16, first,
                                  p, key, dropped16, probs16, probs_kept));
}
static void p_dropout_softmax_bwd(bt_backend *be, bt_ptr ds, bt_ptr dp, bt_ptr probs, int B,
                                  int H, int T, float scale, bt_dtype round16, uint32_t first,
                                  float p, bt_rng_key key, bt_dtype probs_dtype, bt_ptr ds16,
                                  bool ds_kept) {
    const double bytes = (1.0 + ds_kept) * F4 + (probs_dtype == BT_F32 ? F4 : 2.0) +
                         (ds16.buf ? 2.0 : 0.0);
    TIMED(be, dropout_softmax_bwd, 0, bytes * B * H * T * T,
          in->dropout_softmax_bwd(in, ds, dp, probs, B, H, T, scale, round16, first, p, key,
                                  probs_dtype, ds16, ds_kept));
}

/* Fused attention: its bytes are Q, K, V (or their 16-bit copies), the mask
 * and the outputs once; its FLOPs the products it computes, the backward's
 * recomputed scores included (forward 2 products, backward 7 in its two
 * kernels), so that the profiler's TFLOP/s is the kernels' own rate. */
static double attn_flops(int B, int NH, int T, int D, int products) {
    return 2.0 * products * (double)B * NH * T * T * D;
}
static void p_attention_fwd(bt_backend *be, bt_ptr ctx, bt_ptr lse, bt_ptr qkv, bt_dtype qd,
                            bt_ptr mask, int B, int NH, int T, int D, float scale, uint32_t first,
                            float p, bt_rng_key key) {
    const double N = (double)B * T, H = (double)NH * D;
    TIMED(be, attention_fwd, attn_flops(B, NH, T, D, 2),
          N * 3 * H * bt_dtype_size(qd) + F4 * (N + N * H + (double)B * NH * T),
          in->attention_fwd(in, ctx, lse, qkv, qd, mask, B, NH, T, D, scale, first, p, key));
}
static void p_attention_bwd(bt_backend *be, bt_ptr dqkv, bt_ptr delta, bt_ptr dctx, bt_ptr ctx,
                            bt_dtype cd, bt_ptr lse, bt_ptr qkv, bt_dtype qd, bt_ptr mask, int B,
                            int NH, int T, int D, float scale, uint32_t first, float p,
                            bt_rng_key key) {
    const double N = (double)B * T, H = (double)NH * D, rows = (double)B * NH * T;
    TIMED(be, attention_bwd, attn_flops(B, NH, T, D, 7),
          N * 3 * H * bt_dtype_size(qd) + N * H * bt_dtype_size(cd) +
              F4 * (N + N * H + 3 * N * H + 3 * rows),
          in->attention_bwd(in, dqkv, delta, dctx, ctx, cd, lse, qkv, qd, mask, B, NH, T, D,
                            scale, first, p, key));
}

void prof_fill_ops(bt_backend *w) {
    w->info = p_info;
    w->sync = p_sync;
    w->alloc = p_alloc;
    w->free = p_free;
    w->upload = p_upload;
    w->download = p_download;
    w->host_alloc = p_host_alloc;
    w->host_free = p_host_free;
    w->download_async = p_download_async;
    w->downloads_done = p_downloads_done;
    w->upload_async = p_upload_async;
    w->copy = p_copy;
    w->fill = p_fill;
    w->gemm = p_gemm;
    w->gemm16 = p_gemm16;
    w->gemm_grid = p_gemm_grid;
    w->gemm16_bias = p_gemm16_bias;
    w->gemm16_bias_grad = p_gemm16_bias_grad;
    w->bias_add = p_bias_add;
    w->bias_grad = p_bias_grad;
    w->embed_fwd = p_embed_fwd;
    w->embed_bwd = p_embed_bwd;
    w->layernorm_fwd = p_layernorm_fwd;
    w->layernorm_bwd = p_layernorm_bwd;
    w->gelu_fwd = p_gelu_fwd;
    w->gelu_bwd = p_gelu_bwd;
    w->tanh_fwd = p_tanh_fwd;
    w->tanh_bwd = p_tanh_bwd;
    w->softmax_fwd = p_softmax_fwd;
    w->softmax_bwd = p_softmax_bwd;
    w->dropout = p_dropout;
    w->dropout_rows = p_dropout_rows;
    w->add = p_add;
    w->scale = p_scale;
    w->axpy = p_axpy;
    w->gather_rows = p_gather_rows;
    w->scatter_rows = p_scatter_rows;
    w->xent_fwd_bwd = p_xent;
    w->sumsq = p_sumsq;
    w->sum = p_sum;
    w->all_finite = p_all_finite;
    w->reduce_defer = p_reduce_defer;
    w->reduce_fetch = p_reduce_fetch;
    w->step_gate = p_step_gate;
    w->adamw_step = p_adamw_step;
    w->lamb_update = p_lamb_update;
    w->adamw_multi = p_adamw_multi;
    w->lamb_multi = p_lamb_multi;
    w->bias_gelu_fwd = p_bias_gelu_fwd;
    w->bias_gelu_bwd = p_bias_gelu_bwd;
    w->bias_dropout_add = p_bias_dropout_add;
    w->add_dropout = p_add_dropout;
    w->residual_layernorm_fwd = p_residual_layernorm_fwd;
    w->softmax_dropout_fwd = p_softmax_dropout_fwd;
    w->dropout_softmax_bwd = p_dropout_softmax_bwd;
    w->attention_fwd = p_attention_fwd;
    w->attention_bwd = p_attention_bwd;
    w->cast = p_cast;
    w->round16 = p_round16;
    w->counters = p_counters;
    w->mark = p_mark;
    w->mark_seconds = p_mark_seconds;
    w->marks_reset = p_marks_reset;
    w->graph_begin = p_graph_begin;
    w->graph_end = p_graph_end;
}
