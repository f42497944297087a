/* CUDA backend: the launches of the fused ops (kernels/fused.cl;
 * opencl_fused.c's twin). Each gives the bits of the ops it replaces on this
 * backend; bias_gelu_bwd's column sum takes bias_grad's two passes beyond
 * BT_COL_ROWS rows. */
#include "cuda_launch.cuh"

/* The 16-bit copies asked for (BT_COPY16_*) and their addresses: an absent
 * one's is out's, which the kernel then does not touch. */
static void cu_bias_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, int rows,
                             int cols, bt_dtype round16, bt_ptr out16, bt_ptr y16, bool y_kept) {
    cu_ctx *c = cu(be);
    const bool given = !y.buf; /* the pre-activation in y16 */
    if (given) y = bias;       /* y's place: bias's address, not touched */
    const bt_ptr o = out.buf ? out : y; /* an absent out: y's address, not touched */
    const int copies = (out16.buf ? BT_COPY16_OUT : 0) | (out.buf ? 0 : BT_COPY16_OUT_ONLY) |
                       (given ? BT_COPY16_IN_GIVEN | BT_COPY16_IN_ONLY
                              : (y16.buf ? BT_COPY16_IN : 0) | (y_kept ? 0 : BT_COPY16_IN_ONLY));
    LAUNCH(c, bias_gelu_fwd, BT_BIAS_ITEMS(rows, cols), cu_f32(o), cu_f32(y), cu_f32(bias),
           (unsigned short *)cu_addr(out16.buf ? out16 : o, 2),
           (unsigned short *)cu_addr(y16.buf ? y16 : o, 2), rows, cols, BT_KIND16_OF(round16),
           copies);
}

/* As cu_bias_grad: one pass into dbias up to BT_COL_ROWS rows, else chunk
 * partials then their sum in chunk order. */
static void cu_bias_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr dbias, bt_ptr dout, bt_ptr x,
                             int rows, int cols, bt_dtype round16, bt_dtype x_dtype,
                             bt_dtype dout_dtype, bt_ptr dx16, bool dx_kept) {
    cu_ctx *c = cu(be);
    const int kind16 = BT_KIND16_OF(round16), x_is16 = x_dtype != BT_F32,
              dout_is16 = dout_dtype != BT_F32,
              copy = (dx16.buf ? BT_COPY16_OUT : 0) |
                     (dx16.buf && !dx_kept ? BT_COPY16_OUT_ONLY : 0);
    if (rows <= 0 || cols <= 0) return;
    /* x and dout in their own types, both pointers at each (the other type's not read);
     * an absent dx16 at dout, not written */
    const unsigned short *xh = u16c(x), *douth = u16c(dout);
    const float *xf = f32c_typed(x, x_is16), *doutf = f32c_typed(dout, dout_is16);
    unsigned short *dh = u16(dx16.buf ? dx16 : dout);
    if (rows <= BT_COL_ROWS) {
        LAUNCH(c, bias_gelu_bwd, BT_COL_GLOBAL(1, cols, BT_WG), cu_f32(dbias), cu_f32(dx), doutf,
               douth, xf, xh, dh, rows, cols, rows, 1, kind16, x_is16, dout_is16, copy);
        return;
    }
    const int chunks = (rows + BT_COL_ROWS - 1) / BT_COL_ROWS;
    float *part = (float *)cu_scratch(c, (size_t)chunks * cols * sizeof(float));
    LAUNCH(c, bias_gelu_bwd, BT_COL_GLOBAL(chunks, cols, BT_WG), part, cu_f32(dx), doutf, douth,
           xf, xh, dh, rows, cols, BT_COL_ROWS, 0, kind16, x_is16, dout_is16, copy);
    LAUNCH(c, bias_grad, BT_COL_GLOBAL(1, cols, BT_WG), cu_f32(dbias), part, chunks, cols,
           BT_KIND16_NONE); /* partials by column */
}

static void cu_bias_dropout_add(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, bt_ptr resid,
                                int rows, int cols, bt_dtype round16, size_t per_sample,
                                uint32_t first_sample, float p, bt_rng_key key) {
    cu_ctx *c = cu(be);
    const drop_args d = drop_args_of(first_sample, p, key);
    LAUNCH(c, bias_dropout_add, BT_BIAS_ITEMS(rows, cols), cu_f32(out), cu_f32(y), cu_f32(bias),
           cu_f32(resid), rows, cols, BT_KIND16_OF(round16), per_sample, DROP_ARGS(d));
}

static void cu_add_dropout(bt_backend *be, bt_ptr out, bt_ptr a, bt_ptr b, bt_dtype b_dtype,
                           size_t n, size_t per_sample, uint32_t first_sample, float p,
                           bt_rng_key key, bt_dtype round16) {
    if (!n || !per_sample) return;
    cu_ctx *c = cu(be);
    const size_t bps = (per_sample + 3) / 4, blocks = n / per_sample * bps;
    const drop_args d = drop_args_of(first_sample, p, key);
    const bool b16 = b_dtype != BT_F32; /* the other type's pointer, not read: out's */
    LAUNCH(c, add_dropout, blocks, cu_f32(out), cu_f32(a), cu_f32(b16 ? out : b),
           u16c(b16 ? b : out), per_sample, bps, blocks, (int)b16, BT_KIND16_OF(round16),
           DROP_ARGS(d));
}

static void cu_residual_layernorm_fwd(bt_backend *be, bt_ptr sum, bt_ptr out, bt_ptr mean,
                                      bt_ptr rstd, bt_ptr y, bt_ptr bias, bt_ptr resid,
                                      bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                                      bt_dtype round16, size_t per_sample, uint32_t first_sample,
                                      float p, bt_rng_key key, bt_ptr sum16, bt_ptr out16,
                                      bool sum_kept, bt_dtype resid_dtype, bool out_kept) {
    cu_ctx *c = cu(be);
    const drop_args d = drop_args_of(first_sample, p, key);
    const int copies = (sum16.buf ? BT_COPY16_IN : 0) | (out16.buf ? BT_COPY16_OUT : 0) |
                       (sum_kept ? 0 : BT_COPY16_IN_ONLY) |
                       (out16.buf && !out_kept ? BT_COPY16_OUT_ONLY : 0);
    const bool r16 = resid_dtype != BT_F32; /* resid in its own type, both pointers at it */
    LAUNCH(c, residual_layernorm_fwd, BT_ROW_GLOBAL(rows, BT_WG), cu_f32(sum), cu_f32(out),
           cu_f32(mean), cu_f32(rstd), cu_f32(y), cu_f32(bias),
           f32c_typed(resid, r16), u16c(resid), cu_f32(gamma),
           cu_f32(beta), (unsigned short *)cu_addr(sum16.buf ? sum16 : out, 2),
           (unsigned short *)cu_addr(out16.buf ? out16 : out, 2), rows, cols, eps,
           BT_KIND16_OF(round16), copies, (int)r16, per_sample, DROP_ARGS(d));
}

static void cu_softmax_dropout_fwd(bt_backend *be, bt_ptr dropped, bt_ptr probs, bt_ptr scores,
                                   bt_ptr key_mask, int B, int H, int T, float scale,
                                   bt_dtype round16, uint32_t first_sample, float p,
                                   bt_rng_key key, bt_ptr dropped16, bt_ptr probs16,
                                   bool probs_kept) {
    cu_ctx *c = cu(be);
    const drop_args d = drop_args_of(first_sample, p, key);
    const bt_ptr dr = dropped.buf ? dropped : probs; /* an absent dropped: not touched */
    const int copies = (dropped16.buf ? BT_COPY16_OUT : 0) | (probs16.buf ? BT_COPY16_IN : 0) |
                       (dropped.buf ? 0 : BT_COPY16_OUT_ONLY) |
                       (probs_kept ? 0 : BT_COPY16_IN_ONLY);
    LAUNCH(c, softmax_dropout_fwd, BT_ROW_GLOBAL((size_t)B * H * T, BT_WG), cu_f32(dr),
           cu_f32(probs), cu_f32(scores), cu_i32(key_mask),
           (unsigned short *)cu_addr(dropped16.buf ? dropped16 : dr, 2),
           (unsigned short *)cu_addr(probs16.buf ? probs16 : dr, 2), B * H * T, H * T, T,
           scale, BT_KIND16_OF(round16), copies, DROP_ARGS(d));
}

/* probs in its own type, the other pointer (not read) dscores'; an absent
 * dscores16 is dscores' too. */
static void cu_dropout_softmax_bwd(bt_backend *be, bt_ptr dscores, bt_ptr dprobs, bt_ptr probs,
                                   int B, int H, int T, float scale, bt_dtype round16,
                                   uint32_t first_sample, float p, bt_rng_key key,
                                   bt_dtype probs_dtype, bt_ptr dscores16, bool dscores_kept) {
    cu_ctx *c = cu(be);
    const drop_args d = drop_args_of(first_sample, p, key);
    const bool p16 = probs_dtype != BT_F32;
    LAUNCH(c, dropout_softmax_bwd, BT_ROW_GLOBAL((size_t)B * H * T, BT_WG), cu_f32(dscores),
           cu_f32(dprobs), cu_f32(p16 ? dscores : probs), u16c(p16 ? probs : dscores),
           u16(dscores16.buf ? dscores16 : dscores), B * H * T, H * T, T, scale,
           BT_KIND16_OF(round16), BT_KIND16_OF(probs_dtype),
           (dscores16.buf ? BT_COPY16_OUT : 0) | (dscores_kept ? 0 : BT_COPY16_OUT_ONLY),
           DROP_ARGS(d));
}

void cu_fill_fused_ops(bt_backend *be) {
    be->bias_gelu_fwd = cu_bias_gelu_fwd;
    be->bias_gelu_bwd = cu_bias_gelu_bwd;
    be->bias_dropout_add = cu_bias_dropout_add;
    be->add_dropout = cu_add_dropout;
    be->residual_layernorm_fwd = cu_residual_layernorm_fwd;
    be->softmax_dropout_fwd = cu_softmax_dropout_fwd;
    be->dropout_softmax_bwd = cu_dropout_softmax_bwd;
}
