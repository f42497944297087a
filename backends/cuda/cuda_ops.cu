/* CUDA backend: the launches of every op except gemm (opencl_ops.c's twin).
 * Each op launches its kernel of kernels/ on the backend's one stream with
 * the geometry documented at the kernel: 1-D, blocks of BT_WG threads, the
 * grid rounded up to whole blocks. Nothing here waits for the device. The
 * reductions are in cuda_reduce.cu, the optimizers in cuda_optim.cu. */
#include "cuda_launch.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================= elementwise ================= */

static void cu_fill(bt_backend *be, bt_ptr dst, float value, size_t n) {
    cu_ctx *c = cu(be);
    LAUNCH(c, fill, n, cu_f32(dst), value, n);
}

static void cu_add(bt_backend *be, bt_ptr out, bt_ptr x, bt_ptr y, size_t n) {
    cu_ctx *c = cu(be);
    LAUNCH(c, add, n, cu_f32(out), cu_f32(x), cu_f32(y), n);
}

static void cu_scale(bt_backend *be, bt_ptr x, float alpha, size_t n) {
    cu_ctx *c = cu(be);
    LAUNCH(c, scale, n, cu_f32(x), alpha, n);
}

static void cu_axpy(bt_backend *be, bt_ptr y, float alpha, bt_ptr x, size_t n) {
    cu_ctx *c = cu(be);
    LAUNCH(c, axpy, n, cu_f32(y), alpha, cu_f32(x), n);
}

static void cu_bias_add(bt_backend *be, bt_ptr y, bt_ptr bias, int rows, int cols,
                        bt_dtype round16, bt_ptr y16, bool y_kept) {
    cu_ctx *c = cu(be);
    const int copies = (y16.buf ? BT_COPY16_OUT : 0) |
                       (y16.buf && !y_kept ? BT_COPY16_OUT_ONLY : 0) |
                       (!y.buf ? BT_COPY16_ZERO_Y : 0);
    LAUNCH(c, bias_add, BT_BIAS_ITEMS(rows, cols), cu_f32(y.buf ? y : bias), cu_f32(bias),
           (unsigned short *)cu_addr(y16.buf ? y16 : y, 2), rows, cols, BT_KIND16_OF(round16),
           copies); /* an absent copy: y's address, not touched */
}

static void cu_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr x, size_t n) {
    cu_ctx *c = cu(be);
    LAUNCH(c, gelu_fwd, n, cu_f32(out), cu_f32(x), n);
}

static void cu_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr x, size_t n) {
    cu_ctx *c = cu(be);
    LAUNCH(c, gelu_bwd, n, cu_f32(dx), cu_f32(dout), cu_f32(x), n);
}

static void cu_tanh_fwd(bt_backend *be, bt_ptr out, bt_ptr x, size_t n, bt_dtype dtype) {
    cu_ctx *c = cu(be);
    if (dtype == BT_F32)
        LAUNCH(c, tanh_fwd, n, cu_f32(out), cu_f32(x), n);
    else
        LAUNCH(c, tanh_fwd16, n, (unsigned short *)cu_addr(out, 2),
               (const unsigned short *)cu_addr(x, 2), n, BT_KIND16_OF(dtype));
}

static void cu_tanh_bwd(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr y, size_t n,
                        bt_dtype dtype) {
    cu_ctx *c = cu(be);
    if (dtype == BT_F32)
        LAUNCH(c, tanh_bwd, n, cu_f32(dx), cu_f32(dout), cu_f32(y), n);
    else
        LAUNCH(c, tanh_bwd16, n, (unsigned short *)cu_addr(dx, 2),
               (const unsigned short *)cu_addr(dout, 2), (const unsigned short *)cu_addr(y, 2),
               n, BT_KIND16_OF(dtype));
}

/* The keep threshold and 1/(1-p) are computed here, on the host, exactly as
 * the CPU backend computes them, so the kept values are bit-identical. An
 * absent pointer (out, out16, in in the other type) is given as the start
 * of a buffer the call has, which the kernel then does not touch. */
static void cu_dropout(bt_backend *be, bt_ptr out, bt_ptr in, size_t n, size_t per_sample,
                       uint32_t first_sample, float p, bt_rng_key key, bt_dtype in_dtype,
                       bt_ptr out16, bt_dtype kind16) {
    if (!n || !per_sample) return;
    cu_ctx *c = cu(be);
    const size_t bps = (per_sample + 3) / 4, blocks = n / per_sample * bps;
    const drop_args d = drop_args_of(first_sample, p, key);
    const bt_ptr none = {out.buf ? out.buf : out16.buf, 0}; /* what an absent one points at */
    const bool in16 = in_dtype != BT_F32;
    LAUNCH(c, dropout, blocks, cu_f32(out.buf ? out : none), cu_f32(in16 ? none : in),
           u16(out16.buf ? out16 : none), u16c(in16 ? in : none), per_sample, bps, blocks,
           BT_KIND16_OF(in_dtype), out16.buf ? BT_KIND16_OF(kind16) : BT_KIND16_NONE,
           out.buf != NULL, DROP_ARGS(d));
}

static void cu_dropout_rows(bt_backend *be, bt_ptr x, bt_ptr idx, int n_idx, int cols,
                            size_t per_sample, uint32_t first_sample, float p, bt_rng_key key) {
    if (n_idx <= 0 || cols <= 0 || !per_sample) return;
    cu_ctx *c = cu(be);
    const drop_args d = drop_args_of(first_sample, p, key);
    LAUNCH(c, dropout_rows, (size_t)n_idx * ((cols + 3) / 4), cu_f32(x), cu_i32(idx), n_idx, cols,
           per_sample, DROP_ARGS(d));
}

/* ================= column and row reductions ================= */

/* As ocl_bias_grad: one pass up to BT_COL_ROWS rows, else chunk partials
 * then their sum in chunk order. */
static void cu_bias_grad(bt_backend *be, bt_ptr dbias, bt_ptr dy, int rows, int cols,
                         bt_dtype round16, bt_dtype dy_dtype) {
    cu_ctx *c = cu(be);
    const bool is16 = dy_dtype != BT_F32; /* 16-bit dy: always the two passes */
    const int kind16 = BT_KIND16_OF(is16 ? dy_dtype : round16);
    if (rows <= BT_COL_ROWS && !is16) {
        LAUNCH(c, bias_grad, BT_COL_GLOBAL(1, cols, BT_WG), cu_f32(dbias), cu_f32(dy), rows, cols,
               kind16);
        return;
    }
    const int chunks = (rows + BT_COL_ROWS - 1) / BT_COL_ROWS;
    float *part = (float *)cu_scratch(c, (size_t)chunks * cols * sizeof(float));
    LAUNCH(c, bias_grad_partial, BT_COL_GLOBAL(chunks, cols, BT_WG), part,
           is16 ? (const float *)part : cu_f32(dy), is16 ? u16c(dy) : (const uint16_t *)part,
           rows, cols, kind16, is16); /* the pointer not read: the partials' */
    LAUNCH(c, bias_grad, BT_COL_GLOBAL(1, cols, BT_WG), cu_f32(dbias), part, chunks, cols,
           BT_KIND16_NONE); /* partials by column */
}

static void cu_layernorm_fwd(bt_backend *be, bt_ptr out, bt_ptr mean, bt_ptr rstd, bt_ptr x,
                             bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                             bt_dtype round16) {
    cu_ctx *c = cu(be);
    LAUNCH(c, layernorm_fwd, BT_ROW_GLOBAL(rows, BT_WG), cu_f32(out), cu_f32(mean), cu_f32(rstd),
           cu_f32(x), cu_f32(gamma), cu_f32(beta), rows, cols, eps, BT_KIND16_OF(round16));
}

/* An input of LayerNorm's backward (x, dout, dbranch) in its own type
 * (kind, BT_KIND16_*): both pointers hold its address, the one of the other
 * type not read. */
typedef struct {
    const float *f32;
    const unsigned short *h16;
    int kind;
} cu_ln_x;

static cu_ln_x cu_ln_x_of(bt_ptr p, bt_dtype dt) {
    const unsigned short *h16 = (const unsigned short *)cu_addr(p, 2);
    return (cu_ln_x){f32c_typed(p, dt != BT_F32), h16, BT_KIND16_OF(dt)};
}

/* As ocl_layernorm_params: dgamma and dbeta in one pass up to BT_COL_ROWS
 * rows, else chunk partials (chunks x 2 cols) then their sum in chunk order;
 * dout rounded to kind16 as it is read. */
static void cu_layernorm_params(cu_ctx *c, bt_ptr dgamma, bt_ptr dbeta, cu_ln_x dy,
                                int branch, cu_ln_x db, cu_ln_x x, bt_ptr mean, bt_ptr rstd,
                                int rows, int cols, int kind16) {
    if (rows <= BT_COL_ROWS) {
        LAUNCH(c, layernorm_bwd_params, BT_COL_GLOBAL(1, cols, BT_WG), cu_f32(dgamma),
               cu_f32(dbeta), dy.f32, dy.h16, db.f32, db.h16, x.f32, x.h16, cu_f32(mean),
               cu_f32(rstd), rows, cols, x.kind, kind16, branch, db.kind, dy.kind);
        return;
    }
    const int chunks = (rows + BT_COL_ROWS - 1) / BT_COL_ROWS;
    float *part = (float *)cu_scratch(c, (size_t)chunks * 2 * cols * sizeof(float));
    LAUNCH(c, layernorm_bwd_params_partial, BT_COL_GLOBAL(chunks, cols, BT_WG), part,
           dy.f32, dy.h16, db.f32, db.h16, x.f32, x.h16, cu_f32(mean), cu_f32(rstd), rows, cols,
           x.kind, kind16, branch, db.kind, dy.kind);
    LAUNCH(c, layernorm_bwd_params_sum, BT_COL_GLOBAL(1, 2 * cols, BT_WG), cu_f32(dgamma),
           cu_f32(dbeta), part, chunks, cols);
}

/* layernorm_bwd's dropout (bt_ln_bwd_drop) as its row kernels take it: kind
 * BT_KIND16_NONE and an out16 not written where there is none. */
typedef struct {
    unsigned short *out16;
    int kind;
    unsigned long long per_sample;
    drop_args d;
} cu_ln_drop;

static cu_ln_drop cu_ln_drop_of(const bt_ln_bwd_drop *drop, unsigned short *unused) {
    if (!drop) return (cu_ln_drop){unused, BT_KIND16_NONE, 1, drop_args_of(0, 0.0f, bt_rng_key{})};
    return (cu_ln_drop){u16(drop->out16), BT_KIND16_OF(drop->kind16), drop->per_sample,
                        drop_args_of(drop->first_sample, drop->p, drop->key)};
}
#define LN_DROP_ARGS(dr) (dr).out16, (dr).kind, (dr).per_sample, DROP_ARGS((dr).d)

/* dx with dgamma's and dbeta's terms in one pass where the row fits in
 * registers (cols up to BT_LN_ROW_MAX_OF(BT_WG)): a row of partials
 * per work-group (groups x 2 cols), beyond BT_COL_ROWS groups added in
 * chunks by bias_grad_partial, then by column in chunk order. */
static void cu_layernorm_bwd_fused(cu_ctx *c, float *dx32, unsigned short *dx16, bt_ptr dgamma,
                                   bt_ptr dbeta, cu_ln_x dy, int branch, cu_ln_x db, cu_ln_x x,
                                   bt_ptr mean, bt_ptr rstd, bt_ptr gamma, int rows, int cols,
                                   bt_ln_bwd_types t, cu_ln_drop dr) {
    int groups = (rows + BT_ROW_GROUP_ROWS(BT_WG) - 1) / BT_ROW_GROUP_ROWS(BT_WG);
    const int chunks = (groups + BT_COL_ROWS - 1) / BT_COL_ROWS, n = 2 * cols;
    float *part = (float *)cu_scratch(c, ((size_t)groups + chunks) * n * sizeof(float));
    LAUNCH(c, layernorm_bwd_dx_params, BT_ROW_GLOBAL(rows, BT_WG), dx32, dx16, part, dy.f32,
           dy.h16, db.f32, db.h16, x.f32, x.h16, cu_f32(mean), cu_f32(rstd), cu_f32(gamma), rows,
           cols, BT_KIND16_OF(t.round16), x.kind, branch, db.kind, dy.kind, BT_KIND16_OF(t.dx),
           LN_DROP_ARGS(dr));
    if (groups > BT_COL_ROWS) { /* (groups x n) -> (chunks x n) */
        float *sums = part + (size_t)groups * n;
        LAUNCH(c, bias_grad_partial, BT_COL_GLOBAL(chunks, n, BT_WG), sums, part,
               (const uint16_t *)part, groups, n, BT_KIND16_NONE, 0); /* the last: not read */
        part = sums;
        groups = chunks;
    }
    LAUNCH(c, layernorm_bwd_params_sum, BT_COL_GLOBAL(1, n, BT_WG), cu_f32(dgamma),
           cu_f32(dbeta), part, groups, cols);
}

static void cu_layernorm_bwd(bt_backend *be, bt_ptr dx, bt_ptr dgamma, bt_ptr dbeta,
                             bt_ptr dout, bt_ptr dbranch, bt_ptr x, bt_ptr mean, bt_ptr rstd,
                             bt_ptr gamma, int rows, int cols, bt_ln_bwd_types t,
                             const bt_ln_bwd_drop *drop) {
    cu_ctx *c = cu(be);
    const cu_ln_x xs = cu_ln_x_of(x, t.x), dy = cu_ln_x_of(dout, t.dout);
    const int branch = dbranch.buf != NULL; /* absent: dout's, not read */
    const cu_ln_x db = branch ? cu_ln_x_of(dbranch, t.dbranch) : dy;
    unsigned short *dx16 = (unsigned short *)cu_addr(dx, 2);
    float *dx32 = t.dx != BT_F32 ? (float *)dx16 : cu_f32(dx); /* the one not written */
    const cu_ln_drop dr = cu_ln_drop_of(drop, dx16);
    if (cols <= BT_LN_ROW_MAX_OF(BT_WG)) { /* the row in registers (BT_LN_CACHED) */
        cu_layernorm_bwd_fused(c, dx32, dx16, dgamma, dbeta, dy, branch, db, xs, mean, rstd, gamma,
                               rows, cols, t, dr);
        return;
    }
    /* parameter gradients first: dx may alias dout */
    cu_layernorm_params(c, dgamma, dbeta, dy, branch, db, xs, mean, rstd, rows, cols,
                        BT_KIND16_OF(t.round16));
    LAUNCH(c, layernorm_bwd_dx, BT_ROW_GLOBAL(rows, BT_WG), dx32, dx16, dy.f32, dy.h16, db.f32,
           db.h16, xs.f32, xs.h16, cu_f32(mean), cu_f32(rstd), cu_f32(gamma), rows, cols,
           BT_KIND16_OF(t.round16), xs.kind, branch, db.kind, dy.kind, BT_KIND16_OF(t.dx),
           LN_DROP_ARGS(dr));
}

static void cu_softmax_fwd(bt_backend *be, bt_ptr probs, bt_ptr scores, bt_ptr key_mask, int B,
                           int H, int T, float scale) {
    cu_ctx *c = cu(be);
    LAUNCH(c, softmax_fwd, BT_ROW_GLOBAL((size_t)B * H * T, BT_WG), cu_f32(probs), cu_f32(scores),
           cu_i32(key_mask), B * H * T, H * T, T, scale);
}

static void cu_softmax_bwd(bt_backend *be, bt_ptr dscores, bt_ptr dprobs, bt_ptr probs,
                           int rows, int T, float scale) {
    cu_ctx *c = cu(be);
    LAUNCH(c, softmax_bwd, BT_ROW_GLOBAL(rows, BT_WG), cu_f32(dscores), cu_f32(dprobs),
           cu_f32(probs), rows, T, scale);
}

static void cu_xent_fwd_bwd(bt_backend *be, bt_ptr dlogits, bt_ptr loss, bt_ptr correct,
                            bt_ptr log_z, bt_ptr logits, bt_ptr labels, int rows, int V,
                            float grad_scale, float z_loss, bt_dtype round16, bt_ptr dlogits16,
                            bt_dtype logits_dtype) {
    cu_ctx *c = cu(be);
    const bool only16 = dlogits16.buf != NULL, in16 = logits_dtype != BT_F32;
    /* a pointer the kernel does not touch gets loss's address */
    LAUNCH(c, xent_fwd_bwd, (size_t)rows * BT_WG, cu_f32(only16 ? loss : dlogits), cu_f32(loss),
           cu_f32(correct), cu_f32(log_z), cu_f32(in16 ? loss : logits), cu_i32(labels), V,
           grad_scale, z_loss, BT_KIND16_OF(round16), u16(only16 ? dlogits16 : loss), only16,
           u16(in16 ? logits : loss), BT_KIND16_OF(logits_dtype));
}

/* ================= embeddings, gather / scatter ================= */

static void cu_embed_fwd(bt_backend *be, bt_ptr out, bt_ptr ids, bt_ptr type_ids, bt_ptr wte,
                         bt_ptr wpe, bt_ptr wtt, int B, int T, int C) {
    cu_ctx *c = cu(be);
    LAUNCH(c, embed_fwd, (size_t)B * T * C, cu_f32(out), cu_i32(ids), cu_i32(type_ids),
           cu_f32(wte), cu_f32(wpe), cu_f32(wtt), B * T, T, C);
}

/* As embed_types in opencl_ops.c: dwtt (TV x C) += dout by type in one pass
 * up to BT_COL_ROWS tokens, else chunk partials at part, added by bias_grad. */
static void cu_embed_types(cu_ctx *c, bt_ptr dwtt, bt_ptr dout, bt_ptr type_ids, float *part,
                           int N, int C, int TV) {
    if (N <= BT_COL_ROWS) {
        LAUNCH(c, embed_bwd_type, BT_COL_GLOBAL(1, TV * C, BT_WG), cu_f32(dwtt), cu_f32(dout),
               cu_i32(type_ids), N, C, TV);
        return;
    }
    const int chunks = (N + BT_COL_ROWS - 1) / BT_COL_ROWS;
    LAUNCH(c, embed_bwd_type_partial, BT_COL_GLOBAL(chunks, TV * C, BT_WG), part, cu_f32(dout),
           cu_i32(type_ids), N, C, TV);
    LAUNCH(c, bias_grad, BT_COL_GLOBAL(1, TV * C, BT_WG), cu_f32(dwtt), part, chunks, TV * C,
           BT_KIND16_NONE); /* partials by column */
}

/* As ocl_embed_bwd: dwte along the segments of ids (the caller's links, pad
 * tokens in none), dwtt by type (its partials in scratch), dwpe by
 * position. */
static void cu_embed_bwd(bt_backend *be, bt_ptr dwte, bt_ptr dwpe, bt_ptr dwtt, bt_ptr dout,
                         bt_ptr ids, bt_ptr ids_links, bt_ptr type_ids, int B, int T, int C,
                         int V, int TV, int pad_id) {
    (void)V;
    (void)pad_id; /* in ids_links */
    cu_ctx *c = cu(be);
    const int N = B * T;
    if (!N || !C) return;
    const size_t chunks = N <= BT_COL_ROWS ? 0 : (size_t)(N + BT_COL_ROWS - 1) / BT_COL_ROWS;
    float *part = chunks ? (float *)cu_scratch(c, chunks * TV * C * sizeof(float)) : NULL;
    LAUNCH(c, scatter_rows, (size_t)N * C, cu_f32(dwte), cu_f32(dout), cu_i32(ids),
           cu_i32(ids_links), N, C);
    cu_embed_types(c, dwtt, dout, type_ids, part, N, C, TV);
    LAUNCH(c, embed_bwd_pos, (size_t)T * C, cu_f32(dwpe), cu_f32(dout), B, T, C);
}

static void cu_gather_rows(bt_backend *be, bt_ptr out, bt_ptr src, bt_ptr idx, int n_idx,
                           int cols) {
    cu_ctx *c = cu(be);
    LAUNCH(c, gather_rows, (size_t)n_idx * cols, cu_f32(out), cu_f32(src), cu_i32(idx), n_idx,
           cols);
}

/* As ocl_scatter_rows: one owner per (index, column) adds its segment (the
 * caller's links) in order. */
static void cu_scatter_rows(bt_backend *be, bt_ptr dst, bt_ptr src, bt_ptr idx, bt_ptr links,
                            int n_idx, int cols) {
    if (!n_idx || !cols) return;
    cu_ctx *c = cu(be);
    LAUNCH(c, scatter_rows, (size_t)n_idx * cols, cu_f32(dst), cu_f32(src), cu_i32(idx),
           cu_i32(links), n_idx, cols);
}

/* ================= cast ================= */

static void cu_cast(bt_backend *be, bt_ptr dst, bt_dtype dt, bt_ptr src, bt_dtype st, size_t n) {
    if (dt == st) { /* the same format: a copy of the bits */
        be->copy(be, dst, src, n * bt_dtype_size(dt));
        return;
    }
    cu_ctx *c = cu(be);
    if (st == BT_F32) {
        if (dt == BT_BF16)
            LAUNCH(c, cast_f32_to_bf16, n, u16(dst), u32(src), n);
        else
            LAUNCH(c, cast_f32_to_f16, n, u16(dst), u32(src), n);
    } else if (st == BT_BF16) {
        if (dt == BT_F32)
            LAUNCH(c, cast_bf16_to_f32, n, u32(dst), u16c(src), n);
        else
            LAUNCH(c, cast_bf16_to_f16, n, u16(dst), u16c(src), n);
    } else {
        if (dt == BT_F32)
            LAUNCH(c, cast_f16_to_f32, n, u32(dst), u16c(src), n);
        else
            LAUNCH(c, cast_f16_to_bf16, n, u16(dst), u16c(src), n);
    }
}

static void cu_round16(bt_backend *be, bt_ptr x, bt_dtype dt, size_t n) {
    cu_ctx *c = cu(be);
    if (dt == BT_BF16)
        LAUNCH(c, round16_bf16, n, u32(x), n);
    else
        LAUNCH(c, round16_f16, n, u32(x), n);
}

void cu_fill_ops(bt_backend *be) {
    be->fill = cu_fill;
    be->bias_add = cu_bias_add;
    be->bias_grad = cu_bias_grad;
    be->embed_fwd = cu_embed_fwd;
    be->embed_bwd = cu_embed_bwd;
    be->layernorm_fwd = cu_layernorm_fwd;
    be->layernorm_bwd = cu_layernorm_bwd;
    be->gelu_fwd = cu_gelu_fwd;
    be->gelu_bwd = cu_gelu_bwd;
    be->tanh_fwd = cu_tanh_fwd;
    be->tanh_bwd = cu_tanh_bwd;
    be->softmax_fwd = cu_softmax_fwd;
    be->softmax_bwd = cu_softmax_bwd;
    be->dropout = cu_dropout;
    be->dropout_rows = cu_dropout_rows;
    be->add = cu_add;
    be->scale = cu_scale;
    be->axpy = cu_axpy;
    be->gather_rows = cu_gather_rows;
    be->scatter_rows = cu_scatter_rows;
    be->xent_fwd_bwd = cu_xent_fwd_bwd;
    be->cast = cu_cast;
    be->round16 = cu_round16;
    cu_fill_reduce_ops(be);
    cu_fill_optim_ops(be);
    cu_fill_fused_ops(be);
    cu_fill_attention_ops(be);
}

/* ================= the probe at creation ================= */

cudaError_t cu_probe_launch(cu_ctx *c) {
    if (!c->scratch) {
        cudaError_t e = cudaMalloc(&c->scratch, 256);
        if (e != cudaSuccess) return e;
        c->scratch_bytes = 256;
    }
    BT_KERNEL_LAUNCH(bt_fill, 1, BT_WG, c->stream, (float *)c->scratch, 0.0f, 1ull);
    return cudaGetLastError();
}
