/* OpenCL backend: the launches of the fused ops (kernels/fused.cl). Each
 * gives the bits of the ops it replaces on this backend; the column sum of
 * bias_gelu_bwd takes bias_grad's two passes beyond OCL_COL_ROWS rows. */
#include "opencl_launch.h"
#include "../common/composed.h"

/* An absent 16-bit copy's address is out's, which the kernel then does not
 * touch (BT_COPY16_* say which are written). */
static void ocl_bias_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, int rows,
                              int cols, bt_dtype round16, bt_ptr out16, bt_ptr y16, bool y_kept) {
    const bool given = !y.buf; /* the pre-activation in y16 */
    if (given) y = bias;       /* y's place: bias's address, not touched */
    const bt_ptr o = out.buf ? out : y; /* an absent out: y's address, not touched */
    args a = begin(be, K_bias_gelu_fwd);
    arg_f32p(&a, o);
    arg_f32p(&a, y);
    arg_f32p(&a, bias);
    arg_ptr(&a, out16.buf ? out16 : o, 2);
    arg_ptr(&a, y16.buf ? y16 : o, 2);
    arg_i(&a, rows);
    arg_i(&a, cols);
    arg_i(&a, BT_KIND16_OF(round16));
    arg_i(&a, (out16.buf ? BT_COPY16_OUT : 0) | (out.buf ? 0 : BT_COPY16_OUT_ONLY) |
                  (given ? BT_COPY16_IN_GIVEN | BT_COPY16_IN_ONLY
                         : (y16.buf ? BT_COPY16_IN : 0) | (y_kept ? 0 : BT_COPY16_IN_ONLY)));
    launch(be, &a, BT_BIAS_ITEMS(rows, cols));
}

/* One pass into dbias up to OCL_COL_ROWS rows; beyond, chunk partials then
 * bias_grad over them, as ocl_bias_grad. */
static void ocl_bias_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr dbias, bt_ptr dout, bt_ptr x,
                              int rows, int cols, bt_dtype round16, bt_dtype x_dtype,
                              bt_dtype dout_dtype, bt_ptr dx16, bool dx_kept) {
    /* x and dout in their own types: the other type's argument, not read, is
     * the buffer at offset 0 */
    const bool x16 = x_dtype != BT_F32, dout16 = dout_dtype != BT_F32;
    if (rows <= 0 || cols <= 0) return;
    const bool one_pass = rows <= OCL_COL_ROWS;
    const int chunks = one_pass ? 1 : (rows + OCL_COL_ROWS - 1) / OCL_COL_ROWS;
    cl_mem part = one_pass ? NULL : ocl_scratch(ocl(be), (size_t)chunks * cols * sizeof(float));
    args a = begin(be, K_bias_gelu_bwd);
    if (one_pass) {
        arg_f32p(&a, dbias);
    } else {
        arg_mem(&a, part);
        arg_ul(&a, 0);
    }
    arg_f32p(&a, dx);
    arg_typed(&a, dout, dout16);
    arg_typed(&a, x, x16);
    arg_ptr(&a, dx16.buf ? dx16 : dout, 2); /* absent: dout's, not written */
    arg_i(&a, rows);
    arg_i(&a, cols);
    arg_i(&a, one_pass ? rows : OCL_COL_ROWS);
    arg_i(&a, one_pass);
    arg_i(&a, BT_KIND16_OF(round16));
    arg_i(&a, x16);
    arg_i(&a, dout16);
    arg_i(&a, (dx16.buf ? BT_COPY16_OUT : 0) | (dx16.buf && !dx_kept ? BT_COPY16_OUT_ONLY : 0));
    launch(be, &a, BT_COL_GLOBAL(chunks, cols, ocl(be)->wg));
    if (one_pass) return;
    args f = begin(be, K_bias_grad); /* the partials, chunks x cols, summed by column */
    arg_f32p(&f, dbias);
    arg_mem(&f, part);
    arg_ul(&f, 0);
    arg_i(&f, chunks);
    arg_i(&f, cols);
    arg_i(&f, BT_KIND16_NONE);
    launch(be, &f, BT_COL_GLOBAL(1, cols, ocl(be)->wg));
}

static void ocl_bias_dropout_add(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias,
                                 bt_ptr resid, int rows, int cols, bt_dtype round16,
                                 size_t per_sample, uint32_t first_sample, float p,
                                 bt_rng_key key) {
    args a = begin(be, K_bias_dropout_add);
    arg_f32p(&a, out);
    arg_f32p(&a, y);
    arg_f32p(&a, bias);
    arg_f32p(&a, resid);
    arg_i(&a, rows);
    arg_i(&a, cols);
    arg_i(&a, BT_KIND16_OF(round16));
    arg_ul(&a, per_sample);
    arg_dropout(&a, first_sample, p, key);
    launch(be, &a, BT_BIAS_ITEMS(rows, cols));
}

static void ocl_add_dropout(bt_backend *be, bt_ptr out, bt_ptr a, bt_ptr b, bt_dtype b_dtype,
                            size_t n, size_t per_sample, uint32_t first_sample, float p,
                            bt_rng_key key, bt_dtype round16) {
    if (!n || !per_sample) return;
    const size_t bps = (per_sample + 3) / 4, blocks = n / per_sample * bps;
    const bool b16 = b_dtype != BT_F32; /* the other type's argument, not read: out */
    args k = begin(be, K_add_dropout);
    arg_f32p(&k, out);
    arg_f32p(&k, a);
    arg_f32p(&k, b16 ? out : b);
    arg_ptr(&k, b16 ? b : out, 2);
    arg_ul(&k, per_sample);
    arg_ul(&k, bps);
    arg_ul(&k, blocks);
    arg_i(&k, b16);
    arg_i(&k, BT_KIND16_OF(round16));
    arg_dropout(&k, first_sample, p, key);
    launch(be, &k, blocks);
}

static void ocl_residual_layernorm_fwd(bt_backend *be, bt_ptr sum, bt_ptr out, bt_ptr mean,
                                       bt_ptr rstd, bt_ptr y, bt_ptr bias, bt_ptr resid,
                                       bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                                       bt_dtype round16, size_t per_sample,
                                       uint32_t first_sample, float p, bt_rng_key key,
                                       bt_ptr sum16, bt_ptr out16, bool sum_kept,
                                       bt_dtype resid_dtype, bool out_kept) {
    const bool r16 = resid_dtype != BT_F32;
    args a = begin(be, K_residual_layernorm_fwd);
    arg_f32p(&a, sum);
    arg_f32p(&a, out);
    arg_f32p(&a, mean);
    arg_f32p(&a, rstd);
    arg_f32p(&a, y);
    arg_f32p(&a, bias);
    arg_typed(&a, resid, r16);
    arg_f32p(&a, gamma);
    arg_f32p(&a, beta);
    arg_ptr(&a, sum16.buf ? sum16 : out, 2);
    arg_ptr(&a, out16.buf ? out16 : out, 2);
    arg_i(&a, rows);
    arg_i(&a, cols);
    arg_f(&a, eps);
    arg_i(&a, BT_KIND16_OF(round16));
    arg_i(&a, (sum16.buf ? BT_COPY16_IN : 0) | (out16.buf ? BT_COPY16_OUT : 0) |
                  (sum_kept ? 0 : BT_COPY16_IN_ONLY) |
                  (out16.buf && !out_kept ? BT_COPY16_OUT_ONLY : 0));
    arg_i(&a, r16);
    arg_ul(&a, per_sample);
    arg_dropout(&a, first_sample, p, key);
    launch(be, &a, BT_ROW_GLOBAL(rows, ocl(be)->wg));
}

static void ocl_softmax_dropout_fwd(bt_backend *be, bt_ptr dropped, bt_ptr probs, bt_ptr scores,
                                    bt_ptr key_mask, int B, int H, int T, float scale,
                                    bt_dtype round16, uint32_t first_sample, float p,
                                    bt_rng_key key, bt_ptr dropped16, bt_ptr probs16,
                                    bool probs_kept) {
    const bt_ptr d = dropped.buf ? dropped : probs; /* an absent dropped: not touched */
    args a = begin(be, K_softmax_dropout_fwd);
    arg_f32p(&a, d);
    arg_f32p(&a, probs);
    arg_f32p(&a, scores);
    arg_ptr(&a, key_mask, 4);
    arg_ptr(&a, dropped16.buf ? dropped16 : d, 2);
    arg_ptr(&a, probs16.buf ? probs16 : d, 2);
    arg_i(&a, B * H * T);
    arg_i(&a, H * T);
    arg_i(&a, T);
    arg_f(&a, scale);
    arg_i(&a, BT_KIND16_OF(round16));
    arg_i(&a, (dropped16.buf ? BT_COPY16_OUT : 0) | (probs16.buf ? BT_COPY16_IN : 0) |
                  (dropped.buf ? 0 : BT_COPY16_OUT_ONLY) | (probs_kept ? 0 : BT_COPY16_IN_ONLY));
    arg_dropout(&a, first_sample, p, key);
    launch(be, &a, BT_ROW_GLOBAL((size_t)B * H * T, ocl(be)->wg));
}

/* probs in its own type, the other pointer (not read) dscores'; an absent
 * dscores16 is dscores' too. */
static void ocl_dropout_softmax_bwd(bt_backend *be, bt_ptr dscores, bt_ptr dprobs, bt_ptr probs,
                                    int B, int H, int T, float scale, bt_dtype round16,
                                    uint32_t first_sample, float p, bt_rng_key key,
                                    bt_dtype probs_dtype, bt_ptr dscores16, bool dscores_kept) {
    const bool p16 = probs_dtype != BT_F32;
    args a = begin(be, K_dropout_softmax_bwd);
    arg_f32p(&a, dscores);
    arg_f32p(&a, dprobs);
    arg_f32p(&a, p16 ? dscores : probs);
    arg_ptr(&a, p16 ? probs : dscores, 2);
    arg_ptr(&a, dscores16.buf ? dscores16 : dscores, 2);
    arg_i(&a, B * H * T);
    arg_i(&a, H * T);
    arg_i(&a, T);
    arg_f(&a, scale);
    arg_i(&a, BT_KIND16_OF(round16));
    arg_i(&a, BT_KIND16_OF(probs_dtype));
    arg_i(&a, (dscores16.buf ? BT_COPY16_OUT : 0) | (dscores_kept ? 0 : BT_COPY16_OUT_ONLY));
    arg_dropout(&a, first_sample, p, key);
    launch(be, &a, BT_ROW_GLOBAL((size_t)B * H * T, ocl(be)->wg));
}

void ocl_fill_fused_ops(bt_backend *be) {
    be->bias_gelu_fwd = ocl_bias_gelu_fwd;
    be->bias_gelu_bwd = ocl_bias_gelu_bwd;
    be->bias_dropout_add = ocl_bias_dropout_add;
    be->add_dropout = ocl_add_dropout;
    be->residual_layernorm_fwd = ocl_residual_layernorm_fwd;
    be->softmax_dropout_fwd = ocl_softmax_dropout_fwd;
    be->dropout_softmax_bwd = ocl_dropout_softmax_bwd;
    /* the GEMM and the bias pass as they are: no GEMM here has an epilogue */
    be->gemm16_bias = bt_composed_gemm16_bias;
    be->gemm16_bias_grad = bt_composed_gemm16_bias_grad;
}
