/* OpenCL backend: the launches of every op except gemm. Each op sets its
 * kernel's arguments (a tensor is a buffer and an offset in elements) and
 * enqueues it on the one in-order queue with the geometry documented at the
 * kernel in kernels/. The reductions are in opencl_reduce.c, the
 * optimizers in opencl_optim.c. */
#include "opencl_launch.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ================= elementwise ================= */

static void ocl_fill(bt_backend *be, bt_ptr dst, float value, size_t n) {
    args a = begin(be, K_fill);
    arg_f32p(&a, dst);
    arg_f(&a, value);
    arg_ul(&a, n);
    launch(be, &a, n);
}

static void ocl_add(bt_backend *be, bt_ptr out, bt_ptr x, bt_ptr y, size_t n) {
    args a = begin(be, K_add);
    arg_f32p(&a, out);
    arg_f32p(&a, x);
    arg_f32p(&a, y);
    arg_ul(&a, n);
    launch(be, &a, n);
}

static void ocl_scale(bt_backend *be, bt_ptr x, float alpha, size_t n) {
    args a = begin(be, K_scale);
    arg_f32p(&a, x);
    arg_f(&a, alpha);
    arg_ul(&a, n);
    launch(be, &a, n);
}

static void ocl_axpy(bt_backend *be, bt_ptr y, float alpha, bt_ptr x, size_t n) {
    args a = begin(be, K_axpy);
    arg_f32p(&a, y);
    arg_f(&a, alpha);
    arg_f32p(&a, x);
    arg_ul(&a, n);
    launch(be, &a, n);
}

static void ocl_bias_add(bt_backend *be, bt_ptr y, bt_ptr bias, int rows, int cols,
                         bt_dtype round16, bt_ptr y16, bool y_kept) {
    args a = begin(be, K_bias_add);
    arg_f32p(&a, y.buf ? y : bias); /* zero y: bias's address, not touched as y */
    arg_f32p(&a, bias);
    arg_ptr(&a, y16.buf ? y16 : y, 2); /* an absent copy: y's address, not touched */
    arg_i(&a, rows);
    arg_i(&a, cols);
    arg_i(&a, BT_KIND16_OF(round16));
    arg_i(&a, (y16.buf ? BT_COPY16_OUT : 0) | (y16.buf && !y_kept ? BT_COPY16_OUT_ONLY : 0) |
                  (!y.buf ? BT_COPY16_ZERO_Y : 0));
    launch(be, &a, BT_BIAS_ITEMS(rows, cols));
}

/* y = f(x) or dx = f(dout, x): the four activation kernels */
static void unary(bt_backend *be, ocl_kernel_id id, bt_ptr out, bt_ptr x, size_t n) {
    args a = begin(be, id);
    arg_f32p(&a, out);
    arg_f32p(&a, x);
    arg_ul(&a, n);
    launch(be, &a, n);
}
static void binary(bt_backend *be, ocl_kernel_id id, bt_ptr out, bt_ptr x, bt_ptr y, size_t n) {
    args a = begin(be, id);
    arg_f32p(&a, out);
    arg_f32p(&a, x);
    arg_f32p(&a, y);
    arg_ul(&a, n);
    launch(be, &a, n);
}

static void ocl_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr x, size_t n) {
    unary(be, K_gelu_fwd, out, x, n);
}
static void ocl_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr x, size_t n) {
    binary(be, K_gelu_bwd, dx, dout, x, n);
}
/* An elementwise kernel in 16 bits: its `count` 16-bit tensors t, then n
 * and the storage kind of dtype. */
static void elementwise16(bt_backend *be, ocl_kernel_id id, const bt_ptr *t, int count, size_t n,
                          bt_dtype dtype) {
    args a = begin(be, id);
    for (int i = 0; i < count; i++) arg_ptr(&a, t[i], 2);
    arg_ul(&a, n);
    arg_i(&a, BT_KIND16_OF(dtype));
    launch(be, &a, n);
}
static void ocl_tanh_fwd(bt_backend *be, bt_ptr out, bt_ptr x, size_t n, bt_dtype dtype) {
    if (dtype == BT_F32)
        unary(be, K_tanh_fwd, out, x, n);
    else
        elementwise16(be, K_tanh_fwd16, (const bt_ptr[]){out, x}, 2, n, dtype);
}
static void ocl_tanh_bwd(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr y, size_t n,
                         bt_dtype dtype) {
    if (dtype == BT_F32)
        binary(be, K_tanh_bwd, dx, dout, y, n);
    else
        elementwise16(be, K_tanh_bwd16, (const bt_ptr[]){dx, dout, y}, 3, n, dtype);
}

/* The keep threshold and 1/(1-p) are computed here, on the host, exactly as
 * the CPU backend computes them (OpenCL division need not round correctly). */
/* An absent pointer (out, out16, in in the other type) is given as the
 * start of a buffer the call has, which the kernel then does not touch. */
static void ocl_dropout(bt_backend *be, bt_ptr out, bt_ptr in, size_t n, size_t per_sample,
                        uint32_t first_sample, float p, bt_rng_key key, bt_dtype in_dtype,
                        bt_ptr out16, bt_dtype kind16) {
    if (!n || !per_sample) return;
    const size_t bps = (per_sample + 3) / 4, blocks = n / per_sample * bps;
    const bt_ptr none = {out.buf ? out.buf : out16.buf, 0};
    const bool in16 = in_dtype != BT_F32;
    args a = begin(be, K_dropout);
    arg_f32p(&a, out.buf ? out : none);
    arg_f32p(&a, in16 ? none : in);
    arg_ptr(&a, out16.buf ? out16 : none, 2);
    arg_ptr(&a, in16 ? in : none, 2);
    arg_ul(&a, per_sample);
    arg_ul(&a, bps);
    arg_ul(&a, blocks);
    arg_i(&a, BT_KIND16_OF(in_dtype));
    arg_i(&a, out16.buf ? BT_KIND16_OF(kind16) : BT_KIND16_NONE);
    arg_i(&a, out.buf != NULL);
    arg_dropout(&a, first_sample, p, key);
    launch(be, &a, blocks);
}

static void ocl_dropout_rows(bt_backend *be, bt_ptr x, bt_ptr idx, int n_idx, int cols,
                             size_t per_sample, uint32_t first_sample, float p, bt_rng_key key) {
    if (n_idx <= 0 || cols <= 0 || !per_sample) return;
    args a = begin(be, K_dropout_rows);
    arg_f32p(&a, x);
    arg_ptr(&a, idx, 4);
    arg_i(&a, n_idx);
    arg_i(&a, cols);
    arg_ul(&a, per_sample);
    arg_dropout(&a, first_sample, p, key);
    launch(be, &a, (size_t)n_idx * ((cols + 3) / 4));
}

/* ================= column and row reductions ================= */

/* Column sums in one pass up to OCL_COL_ROWS rows; beyond, fixed chunks of
 * rows into partials, then the partials added in chunk order, so a GPU
 * runs chunks x cols threads instead of cols. */
static void ocl_bias_grad(bt_backend *be, bt_ptr dbias, bt_ptr dy, int rows, int cols,
                          bt_dtype round16, bt_dtype dy_dtype) {
    const bool is16 = dy_dtype != BT_F32; /* 16-bit dy: always the two passes */
    if (is16) round16 = dy_dtype;
    if (rows <= OCL_COL_ROWS && !is16) {
        args a = begin(be, K_bias_grad);
        arg_f32p(&a, dbias);
        arg_f32p(&a, dy);
        arg_i(&a, rows);
        arg_i(&a, cols);
        arg_i(&a, BT_KIND16_OF(round16));
        launch(be, &a, BT_COL_GLOBAL(1, cols, ocl(be)->wg));
        return;
    }
    const int chunks = (rows + OCL_COL_ROWS - 1) / OCL_COL_ROWS;
    cl_mem part = ocl_scratch(ocl(be), (size_t)chunks * cols * sizeof(float));
    args a = begin(be, K_bias_grad_partial);
    arg_mem(&a, part);
    arg_ul(&a, 0);
    if (is16) { /* the pointer not read: the partials' */
        arg_mem(&a, part);
        arg_ul(&a, 0);
        arg_ptr(&a, dy, 2);
    } else {
        arg_f32p(&a, dy);
        arg_mem(&a, part);
        arg_ul(&a, 0);
    }
    arg_i(&a, rows);
    arg_i(&a, cols);
    arg_i(&a, BT_KIND16_OF(round16));
    arg_i(&a, is16);
    launch(be, &a, BT_COL_GLOBAL(chunks, cols, ocl(be)->wg));
    args f = begin(be, K_bias_grad); /* the partials, chunks x cols, summed by column */
    arg_f32p(&f, dbias);
    arg_mem(&f, part);
    arg_ul(&f, 0);
    arg_i(&f, chunks);
    arg_i(&f, cols);
    arg_i(&f, BT_KIND16_NONE);
    launch(be, &f, BT_COL_GLOBAL(1, cols, ocl(be)->wg));
}

static void ocl_layernorm_fwd(bt_backend *be, bt_ptr out, bt_ptr mean, bt_ptr rstd, bt_ptr x,
                              bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                              bt_dtype round16) {
    args a = begin(be, K_layernorm_fwd);
    arg_f32p(&a, out);
    arg_f32p(&a, mean);
    arg_f32p(&a, rstd);
    arg_f32p(&a, x);
    arg_f32p(&a, gamma);
    arg_f32p(&a, beta);
    arg_i(&a, rows);
    arg_i(&a, cols);
    arg_f(&a, eps);
    arg_i(&a, BT_KIND16_OF(round16));
    launch(be, &a, BT_ROW_GLOBAL(rows, ocl(be)->wg));
}

/* dgamma and dbeta += the column sums of the partials (chunks x 2 cols:
 * dgamma's terms, then dbeta's) from float `at` of part, in chunk order. */
static void ln_params_sum(bt_backend *be, bt_ptr dgamma, bt_ptr dbeta, cl_mem part, size_t at,
                          int chunks, int cols) {
    args f = begin(be, K_layernorm_bwd_params_sum);
    arg_f32p(&f, dgamma);
    arg_f32p(&f, dbeta);
    arg_mem(&f, part);
    arg_ul(&f, at);
    arg_i(&f, chunks);
    arg_i(&f, cols);
    launch(be, &f, BT_COL_GLOBAL(1, 2 * cols, ocl(be)->wg));
}

/* layernorm_bwd's dgamma and dbeta: one pass up to OCL_COL_ROWS rows;
 * beyond, chunk partials (chunks x 2 cols: dgamma's terms, then dbeta's),
 * then each column of them added in chunk order, as ocl_bias_grad; dout
 * rounded to round16 as it is read. */
static void ocl_layernorm_params(bt_backend *be, bt_ptr dgamma, bt_ptr dbeta, bt_ptr dout,
                                 bt_ptr dbranch, bt_ptr x, bt_ptr mean, bt_ptr rstd, int rows,
                                 int cols, bt_ln_bwd_types t) {
    const bool one_pass = rows <= OCL_COL_ROWS;
    const int chunks = (rows + OCL_COL_ROWS - 1) / OCL_COL_ROWS;
    cl_mem part = NULL;
    args a = begin(be, one_pass ? K_layernorm_bwd_params : K_layernorm_bwd_params_partial);
    if (one_pass) {
        arg_f32p(&a, dgamma);
        arg_f32p(&a, dbeta);
    } else {
        part = ocl_scratch(ocl(be), (size_t)chunks * 2 * cols * sizeof(float));
        arg_mem(&a, part);
        arg_ul(&a, 0);
    }
    arg_typed(&a, dout, t.dout != BT_F32);
    arg_typed(&a, dbranch.buf ? dbranch : dout, t.dbranch != BT_F32); /* absent: not read */
    arg_typed(&a, x, t.x != BT_F32);
    arg_f32p(&a, mean);
    arg_f32p(&a, rstd);
    arg_i(&a, rows);
    arg_i(&a, cols);
    arg_i(&a, BT_KIND16_OF(t.x));
    arg_i(&a, BT_KIND16_OF(t.round16));
    arg_i(&a, dbranch.buf != NULL);
    arg_i(&a, BT_KIND16_OF(t.dbranch));
    arg_i(&a, BT_KIND16_OF(t.dout));
    launch(be, &a, BT_COL_GLOBAL(one_pass ? 1 : chunks, cols, ocl(be)->wg));
    if (one_pass) return;
    ln_params_sum(be, dgamma, dbeta, part, 0, chunks, cols);
}

/* The arguments layernorm_bwd_dx and layernorm_bwd_dx_params share after
 * their outputs. */
static void ln_bwd_dx_args(args *a, bt_ptr dout, bt_ptr dbranch, bt_ptr x, bt_ptr mean,
                           bt_ptr rstd, bt_ptr gamma, int rows, int cols, bt_ln_bwd_types t) {
    arg_typed(a, dout, t.dout != BT_F32);
    arg_typed(a, dbranch.buf ? dbranch : dout, t.dbranch != BT_F32);
    arg_typed(a, x, t.x != BT_F32);
    arg_f32p(a, mean);
    arg_f32p(a, rstd);
    arg_f32p(a, gamma);
    arg_i(a, rows);
    arg_i(a, cols);
    arg_i(a, BT_KIND16_OF(t.round16));
    arg_i(a, BT_KIND16_OF(t.x));
    arg_i(a, dbranch.buf != NULL);
    arg_i(a, BT_KIND16_OF(t.dbranch));
    arg_i(a, BT_KIND16_OF(t.dout));
    arg_i(a, BT_KIND16_OF(t.dx));
}

/* layernorm_bwd's dropout (bt_ln_bwd_drop) after ln_bwd_dx_args: out16 (dx
 * in its place where there is none: not written), its kind, per_sample and
 * dropout's arguments. */
static void ln_bwd_drop_args(args *a, bt_ptr dx, const bt_ln_bwd_drop *drop) {
    /* no dropout: a 16-bit output the kernel never writes (kind NONE) */
    const bt_ln_bwd_drop none = {.out16 = dx, .per_sample = 1};
    const bt_ln_bwd_drop *d = drop ? drop : &none;
    arg_ptr(a, d->out16, 2);
    arg_i(a, drop ? BT_KIND16_OF(d->kind16) : BT_KIND16_NONE);
    arg_ul(a, d->per_sample);
    arg_dropout(a, d->first_sample, d->p, d->key);
}

/* As cu_layernorm_bwd_fused: dx with a row of dgamma's and dbeta's terms a
 * work-group (groups x 2 cols), beyond OCL_COL_ROWS groups added in chunks
 * by bias_grad_partial, then by column in chunk order. Only where the device
 * keeps rows in registers (row_cache) and the row fits. */
static void ocl_layernorm_bwd_fused(bt_backend *be, bt_ptr dx, bt_ptr dgamma, bt_ptr dbeta,
                                    bt_ptr dout, bt_ptr dbranch, bt_ptr x, bt_ptr mean,
                                    bt_ptr rstd, bt_ptr gamma, int rows, int cols,
                                    bt_ln_bwd_types t, const bt_ln_bwd_drop *drop) {
    const size_t wg = ocl(be)->wg, n = 2 * (size_t)cols;
    int groups = (int)((rows + BT_ROW_GROUP_ROWS(wg) - 1) / BT_ROW_GROUP_ROWS(wg));
    const int chunks = (groups + OCL_COL_ROWS - 1) / OCL_COL_ROWS;
    cl_mem part = ocl_scratch(ocl(be), ((size_t)groups + chunks) * n * sizeof(float));
    args a = begin(be, K_layernorm_bwd_dx_params);
    arg_typed(&a, dx, t.dx != BT_F32);
    arg_mem(&a, part);
    arg_ul(&a, 0);
    ln_bwd_dx_args(&a, dout, dbranch, x, mean, rstd, gamma, rows, cols, t);
    ln_bwd_drop_args(&a, dx, drop);
    launch(be, &a, BT_ROW_GLOBAL(rows, wg));
    size_t at = 0; /* the partials' first float */
    if (groups > OCL_COL_ROWS) { /* (groups x n) -> (chunks x n) */
        args p = begin(be, K_bias_grad_partial);
        arg_mem(&p, part);
        arg_ul(&p, (size_t)groups * n);
        arg_mem(&p, part);
        arg_ul(&p, 0);
        arg_mem(&p, part); /* dy16: not read */
        arg_ul(&p, 0);
        arg_i(&p, groups);
        arg_i(&p, (int)n);
        arg_i(&p, BT_KIND16_NONE);
        arg_i(&p, 0);
        launch(be, &p, BT_COL_GLOBAL(chunks, n, wg));
        at = (size_t)groups * n;
        groups = chunks;
    }
    ln_params_sum(be, dgamma, dbeta, part, at, groups, cols);
}

static void ocl_layernorm_bwd(bt_backend *be, bt_ptr dx, bt_ptr dgamma, bt_ptr dbeta,
                              bt_ptr dout, bt_ptr dbranch, bt_ptr x, bt_ptr mean, bt_ptr rstd,
                              bt_ptr gamma, int rows, int cols, bt_ln_bwd_types t,
                              const bt_ln_bwd_drop *drop) {
    if (!dbranch.buf) t.dbranch = t.dout; /* dout's buffer in its place, not read */
    const size_t wg = ocl(be)->wg;
    if (ocl(be)->row_cache && (size_t)cols <= BT_LN_ROW_MAX_OF(wg)) { /* BT_LN_CACHED */
        ocl_layernorm_bwd_fused(be, dx, dgamma, dbeta, dout, dbranch, x, mean, rstd, gamma, rows,
                                cols, t, drop);
        return;
    }
    /* parameter gradients first: dx may alias dout */
    ocl_layernorm_params(be, dgamma, dbeta, dout, dbranch, x, mean, rstd, rows, cols, t);
    args a = begin(be, K_layernorm_bwd_dx);
    arg_typed(&a, dx, t.dx != BT_F32);
    ln_bwd_dx_args(&a, dout, dbranch, x, mean, rstd, gamma, rows, cols, t);
    ln_bwd_drop_args(&a, dx, drop);
    launch(be, &a, BT_ROW_GLOBAL(rows, wg));
}

static void ocl_softmax_fwd(bt_backend *be, bt_ptr probs, bt_ptr scores, bt_ptr key_mask, int B,
                            int H, int T, float scale) {
    args a = begin(be, K_softmax_fwd);
    arg_f32p(&a, probs);
    arg_f32p(&a, scores);
    arg_ptr(&a, key_mask, 4);
    arg_i(&a, B * H * T);
    arg_i(&a, H * T);
    arg_i(&a, T);
    arg_f(&a, scale);
    launch(be, &a, BT_ROW_GLOBAL((size_t)B * H * T, ocl(be)->wg));
}

static void ocl_softmax_bwd(bt_backend *be, bt_ptr dscores, bt_ptr dprobs, bt_ptr probs,
                            int rows, int T, float scale) {
    args a = begin(be, K_softmax_bwd);
    arg_f32p(&a, dscores);
    arg_f32p(&a, dprobs);
    arg_f32p(&a, probs);
    arg_i(&a, rows);
    arg_i(&a, T);
    arg_f(&a, scale);
    launch(be, &a, BT_ROW_GLOBAL(rows, ocl(be)->wg));
}

static void ocl_xent_fwd_bwd(bt_backend *be, bt_ptr dlogits, bt_ptr loss, bt_ptr correct,
                             bt_ptr log_z, bt_ptr logits, bt_ptr labels, int rows, int V,
                             float grad_scale, float z_loss, bt_dtype round16,
                             bt_ptr dlogits16, bt_dtype logits_dtype) {
    const bool only16 = dlogits16.buf != NULL, in16 = logits_dtype != BT_F32;
    /* a pointer the kernel does not touch gets loss's address */
    args a = begin(be, K_xent_fwd_bwd);
    arg_f32p(&a, only16 ? loss : dlogits);
    arg_f32p(&a, loss);
    arg_f32p(&a, correct);
    arg_f32p(&a, log_z);
    arg_f32p(&a, in16 ? loss : logits);
    arg_ptr(&a, labels, 4);
    arg_i(&a, V);
    arg_f(&a, grad_scale);
    arg_f(&a, z_loss);
    arg_i(&a, BT_KIND16_OF(round16));
    arg_ptr(&a, only16 ? dlogits16 : loss, 2);
    arg_i(&a, only16);
    arg_ptr(&a, in16 ? logits : loss, 2);
    arg_i(&a, BT_KIND16_OF(logits_dtype));
    launch(be, &a, (size_t)rows * ocl(be)->wg);
}

/* ================= embeddings, gather / scatter ================= */

static void ocl_embed_fwd(bt_backend *be, bt_ptr out, bt_ptr ids, bt_ptr type_ids, bt_ptr wte,
                          bt_ptr wpe, bt_ptr wtt, int B, int T, int C) {
    args a = begin(be, K_embed_fwd);
    arg_f32p(&a, out);
    arg_ptr(&a, ids, 4);
    arg_ptr(&a, type_ids, 4);
    arg_f32p(&a, wte);
    arg_f32p(&a, wpe);
    arg_f32p(&a, wtt);
    arg_i(&a, B * T);
    arg_i(&a, T);
    arg_i(&a, C);
    launch(be, &a, (size_t)B * T * C);
}

/* dst[idx[i]] += src[i] along the segments of links (2n ints, bt_row_links). */
static void scatter_segments(bt_backend *be, bt_ptr dst, bt_ptr src, bt_ptr idx, bt_ptr links,
                           int n, int cols) {
    args a = begin(be, K_scatter_rows);
    arg_f32p(&a, dst);
    arg_f32p(&a, src);
    arg_ptr(&a, idx, 4);
    arg_ptr(&a, links, 4);
    arg_i(&a, n);
    arg_i(&a, cols);
    launch(be, &a, (size_t)n * cols);
}

/* dwtt (TV x C) += dout by type: one pass up to OCL_COL_ROWS tokens; beyond,
 * chunk partials in scratch, added by bias_grad. */
static void embed_types(bt_backend *be, bt_ptr dwtt, bt_ptr dout, bt_ptr type_ids, int N, int C,
                        int TV) {
    const bool one_pass = N <= OCL_COL_ROWS;
    const int chunks = (N + OCL_COL_ROWS - 1) / OCL_COL_ROWS;
    cl_mem m = one_pass ? NULL : ocl_scratch(ocl(be), (size_t)chunks * TV * C * sizeof(float));
    args a = begin(be, one_pass ? K_embed_bwd_type : K_embed_bwd_type_partial);
    if (one_pass) {
        arg_f32p(&a, dwtt);
    } else {
        arg_mem(&a, m);
        arg_ul(&a, 0);
    }
    arg_f32p(&a, dout);
    arg_ptr(&a, type_ids, 4);
    arg_i(&a, N);
    arg_i(&a, C);
    arg_i(&a, TV);
    launch(be, &a, BT_COL_GLOBAL(one_pass ? 1 : chunks, TV * C, ocl(be)->wg));
    if (one_pass) return;
    args f = begin(be, K_bias_grad); /* the partials, chunks x TV*C, summed by column */
    arg_f32p(&f, dwtt);
    arg_mem(&f, m);
    arg_ul(&f, 0);
    arg_i(&f, chunks);
    arg_i(&f, TV * C);
    arg_i(&f, BT_KIND16_NONE);
    launch(be, &f, BT_COL_GLOBAL(1, TV * C, ocl(be)->wg));
}

/* dwte along the segments of ids (the caller's links, pad tokens in none),
 * dwtt by type, dwpe by position. */
static void ocl_embed_bwd(bt_backend *be, bt_ptr dwte, bt_ptr dwpe, bt_ptr dwtt, bt_ptr dout,
                          bt_ptr ids, bt_ptr ids_links, bt_ptr type_ids, int B, int T, int C,
                          int V, int TV, int pad_id) {
    (void)V;
    (void)pad_id; /* in ids_links */
    const int N = B * T;
    if (!N || !C) return;
    scatter_segments(be, dwte, dout, ids, ids_links, N, C);
    embed_types(be, dwtt, dout, type_ids, N, C, TV);
    args a = begin(be, K_embed_bwd_pos);
    arg_f32p(&a, dwpe);
    arg_f32p(&a, dout);
    arg_i(&a, B);
    arg_i(&a, T);
    arg_i(&a, C);
    launch(be, &a, (size_t)T * C);
}

static void ocl_gather_rows(bt_backend *be, bt_ptr out, bt_ptr src, bt_ptr idx, int n_idx,
                            int cols) {
    args a = begin(be, K_gather_rows);
    arg_f32p(&a, out);
    arg_f32p(&a, src);
    arg_ptr(&a, idx, 4);
    arg_i(&a, n_idx);
    arg_i(&a, cols);
    launch(be, &a, (size_t)n_idx * cols);
}

/* One owner per (index, column) adds its segment (the caller's links) in
 * order: the bits of an in-order walk, n_idx x cols work-items instead of
 * cols. */
static void ocl_scatter_rows(bt_backend *be, bt_ptr dst, bt_ptr src, bt_ptr idx, bt_ptr links,
                             int n_idx, int cols) {
    if (!n_idx || !cols) return;
    scatter_segments(be, dst, src, idx, links, n_idx, cols);
}

/* ================= cast ================= */

static void ocl_cast(bt_backend *be, bt_ptr dst, bt_dtype dt, bt_ptr src, bt_dtype st, size_t n) {
    if (dt == st) { /* the same format: a copy of the bits */
        be->copy(be, dst, src, n * bt_dtype_size(dt));
        return;
    }
    ocl_kernel_id id = st == BT_F32    ? (dt == BT_BF16 ? K_cast_f32_to_bf16 : K_cast_f32_to_f16)
                       : st == BT_BF16 ? (dt == BT_F32 ? K_cast_bf16_to_f32 : K_cast_bf16_to_f16)
                                       : (dt == BT_F32 ? K_cast_f16_to_f32 : K_cast_f16_to_bf16);
    args a = begin(be, id);
    arg_ptr(&a, dst, bt_dtype_size(dt));
    arg_ptr(&a, src, bt_dtype_size(st));
    arg_ul(&a, n);
    launch(be, &a, n);
}

static void ocl_round16(bt_backend *be, bt_ptr x, bt_dtype dt, size_t n) {
    args a = begin(be, dt == BT_BF16 ? K_round16_bf16 : K_round16_f16);
    arg_f32p(&a, x);
    arg_ul(&a, n);
    launch(be, &a, n);
}

void ocl_fill_ops(bt_backend *be) {
    be->fill = ocl_fill;
    be->bias_add = ocl_bias_add;
    be->bias_grad = ocl_bias_grad;
    be->embed_fwd = ocl_embed_fwd;
    be->embed_bwd = ocl_embed_bwd;
    be->layernorm_fwd = ocl_layernorm_fwd;
    be->layernorm_bwd = ocl_layernorm_bwd;
    be->gelu_fwd = ocl_gelu_fwd;
    be->gelu_bwd = ocl_gelu_bwd;
    be->tanh_fwd = ocl_tanh_fwd;
    be->tanh_bwd = ocl_tanh_bwd;
    be->softmax_fwd = ocl_softmax_fwd;
    be->softmax_bwd = ocl_softmax_bwd;
    be->dropout = ocl_dropout;
    be->dropout_rows = ocl_dropout_rows;
    be->add = ocl_add;
    be->scale = ocl_scale;
    be->axpy = ocl_axpy;
    be->gather_rows = ocl_gather_rows;
    be->scatter_rows = ocl_scatter_rows;
    be->xent_fwd_bwd = ocl_xent_fwd_bwd;
    be->cast = ocl_cast;
    be->round16 = ocl_round16;
    ocl_fill_reduce_ops(be);
    ocl_fill_optim_ops(be);
    ocl_fill_fused_ops(be);
    ocl_fill_attention_ops(be);
}
