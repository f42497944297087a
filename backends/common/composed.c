/* The fused ops as the sequences of primitive ops that their contracts in
 * backend.h name (see composed.h). */
#include "composed.h"

#include "../op_list.h"

#include <stdio.h>
#include <stdlib.h>

/* A new buffer of n floats for the composed op `op`; the caller frees it. */
static bt_buffer *scratch_f32(bt_backend *be, size_t n, const char *op) {
    bt_buffer *buf = be->alloc(be, n * sizeof(float));
    if (!buf) {
        fprintf(stderr, "bertrain: %s: out of device memory for %zu bytes of the composed %s\n",
                be->name, n * sizeof(float), op);
        exit(1);
    }
    return buf;
}

/* A new buffer holding the n 16-bit values x of dtype dt widened to fp32
 * (cast), for the composed op `op`; the caller frees it. */
static bt_buffer *widened(bt_backend *be, bt_ptr x, bt_dtype dt, size_t n, const char *op) {
    bt_buffer *wide = scratch_f32(be, n, op);
    be->cast(be, (bt_ptr){wide, 0}, BT_F32, x, dt, n);
    return wide;
}

/* y += bias, rounded with 16-bit storage; out = gelu(y), rounded alike:
 * bias_add, round16, gelu_fwd, round16; the 16-bit copies asked for with cast (an absent out made in a
 * scratch buffer for its copy); an absent y: y16 widened by cast, then
 * gelu_fwd and round16.   (rows, cols) */
static void composed_bias_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, int rows,
                                   int cols, bt_dtype round16, bt_ptr out16, bt_ptr y16,
                                   bool y_kept) {
    (void)y_kept; /* y is bias_add's and gelu_fwd's operand: written either way */
    const size_t n = (size_t)rows * cols;
    bt_buffer *tmp = out.buf ? NULL : scratch_f32(be, n, "bias_gelu_fwd");
    if (tmp) out = (bt_ptr){tmp, 0};
    if (!y.buf) { /* the pre-activation given in y16: widened, not written back */
        const bt_ptr pre = {scratch_f32(be, n, "bias_gelu_fwd"), 0};
        be->cast(be, pre, BT_F32, y16, round16, n);
        be->gelu_fwd(be, out, pre, n);
        be->free(be, pre.buf);
    } else {
        be->bias_add(be, y, bias, rows, cols, BT_F32, BT_NO_PTR, true);
        if (round16 != BT_F32) be->round16(be, y, round16, n);
        be->gelu_fwd(be, out, y, n);
    }
    if (round16 != BT_F32) be->round16(be, out, round16, n);
    if (out16.buf) be->cast(be, out16, round16, out, BT_F32, n);
    if (y16.buf && y.buf) be->cast(be, y16, round16, y, BT_F32, n);
    if (tmp) be->free(be, tmp);
}

/* dx = dout * gelu'(x), rounded with 16-bit storage; dbias += column sums of
 * dx: gelu_bwd, round16, bias_grad; dx's 16-bit copy asked for with cast. */
static void composed_bias_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr dbias, bt_ptr dout,
                                   bt_ptr x, int rows, int cols, bt_dtype round16,
                                   bt_dtype x_dtype, bt_dtype dout_dtype, bt_ptr dx16,
                                   bool dx_kept) {
    (void)dx_kept; /* dx is gelu_bwd's and bias_grad's operand: written either way */
    const size_t n = (size_t)rows * cols;
    bt_buffer *wide = x_dtype != BT_F32 ? widened(be, x, x_dtype, n, "bias_gelu_bwd") : NULL;
    if (wide) x = (bt_ptr){wide, 0};
    bt_buffer *wide_dout =
        dout_dtype != BT_F32 ? widened(be, dout, dout_dtype, n, "bias_gelu_bwd") : NULL;
    if (wide_dout) dout = (bt_ptr){wide_dout, 0};
    if (round16 != BT_F32) { /* dout rounded into dx, then gelu_bwd in place */
        if (dx.buf != dout.buf || dx.off != dout.off) be->copy(be, dx, dout, n * sizeof(float));
        be->round16(be, dx, round16, n);
        dout = dx;
    }
    be->gelu_bwd(be, dx, dout, x, n);
    if (round16 != BT_F32) be->round16(be, dx, round16, n);
    be->bias_grad(be, dbias, dx, rows, cols, BT_F32, BT_F32);
    if (dx16.buf) be->cast(be, dx16, round16, dx, BT_F32, n);
    if (wide) be->free(be, wide); /* the backends free it once the queued ops are done */
    if (wide_dout) be->free(be, wide_dout);
}

/* out = resid + dropout(y + bias), y unchanged: the branch in a scratch
 * buffer of the backend's (out may alias resid), then add; with 16-bit
 * storage round16 after bias_add and after add. */
static void composed_bias_dropout_add(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias,
                                      bt_ptr resid, int rows, int cols, bt_dtype round16,
                                      size_t per_sample, uint32_t first_sample, float p,
                                      bt_rng_key key) {
    const size_t n = (size_t)rows * cols;
    bt_buffer *scratch = be->alloc(be, n * sizeof(float));
    if (!scratch) {
        fprintf(stderr, "bertrain: %s: out of device memory for %zu bytes of the composed "
                        "bias_dropout_add\n", be->name, n * sizeof(float));
        exit(1);
    }
    const bt_ptr branch = {scratch, 0};
    be->copy(be, branch, y, n * sizeof(float));
    be->bias_add(be, branch, bias, rows, cols, BT_F32, BT_NO_PTR, true);
    if (round16 != BT_F32) be->round16(be, branch, round16, n);
    if (p > 0.0f)
        be->dropout(be, branch, branch, n, per_sample, first_sample, p, key, BT_F32, BT_NO_PTR,
                    BT_F32);
    be->add(be, out, branch, resid, n);
    if (round16 != BT_F32) be->round16(be, out, round16, n);
    be->free(be, scratch); /* the backends free it once the queued ops are done */
}

/* out = dropout(a + b): b widened or copied and rounded in a scratch
 * buffer, add, round16, dropout. */
static void composed_add_dropout(bt_backend *be, bt_ptr out, bt_ptr a, bt_ptr b,
                                 bt_dtype b_dtype, size_t n, size_t per_sample,
                                 uint32_t first_sample, float p, bt_rng_key key,
                                 bt_dtype round16) {
    bt_buffer *tmp = b_dtype != BT_F32 ? widened(be, b, b_dtype, n, "add_dropout")
                                       : scratch_f32(be, n, "add_dropout");
    const bt_ptr wide = {tmp, 0};
    if (b_dtype == BT_F32) {
        be->copy(be, wide, b, n * sizeof(float));
        if (round16 != BT_F32) be->round16(be, wide, round16, n);
    }
    be->add(be, out, a, wide, n);
    if (round16 != BT_F32) be->round16(be, out, round16, n);
    if (p > 0.0f)
        be->dropout(be, out, out, n, per_sample, first_sample, p, key, BT_F32, BT_NO_PTR, BT_F32);
    be->free(be, tmp); /* the backends free it once the queued ops are done */
}

/* sum = resid + dropout(y + bias); out, mean, rstd = layernorm_fwd(sum);
 * the 16-bit copies asked for with cast. */
static void composed_residual_layernorm_fwd(bt_backend *be, bt_ptr sum, bt_ptr out, bt_ptr mean,
                                            bt_ptr rstd, bt_ptr y, bt_ptr bias, bt_ptr resid,
                                            bt_ptr gamma, bt_ptr beta, int rows, int cols,
                                            float eps, bt_dtype round16, size_t per_sample,
                                            uint32_t first_sample, float p, bt_rng_key key,
                                            bt_ptr sum16, bt_ptr out16, bool sum_kept,
                                            bt_dtype resid_dtype, bool out_kept) {
    /* sum is layernorm_fwd's input and out its output: written either way */
    (void)sum_kept, (void)out_kept;
    const size_t n = (size_t)rows * cols;
    if (resid_dtype != BT_F32) { /* the residual widened into sum, the join in place */
        be->cast(be, sum, BT_F32, resid, resid_dtype, n);
        resid = sum;
    }
    be->bias_dropout_add(be, sum, y, bias, resid, rows, cols, round16, per_sample, first_sample, p,
                         key);
    if (sum16.buf) be->cast(be, sum16, round16, sum, BT_F32, n);
    be->layernorm_fwd(be, out, mean, rstd, sum, gamma, beta, rows, cols, eps, round16);
    if (out16.buf) be->cast(be, out16, round16, out, BT_F32, n);
}

/* probs = softmax_fwd(scores), rounded with 16-bit storage; dropped =
 * dropout(probs), per_sample H*T*T; the 16-bit copies asked for with cast. */
static void composed_softmax_dropout_fwd(bt_backend *be, bt_ptr dropped, bt_ptr probs,
                                         bt_ptr scores, bt_ptr key_mask, int B, int H, int T,
                                         float scale, bt_dtype round16, uint32_t first_sample,
                                         float p, bt_rng_key key, bt_ptr dropped16,
                                         bt_ptr probs16, bool probs_kept) {
    (void)probs_kept; /* probs is dropout's input: written either way */
    const size_t per_sample = (size_t)H * T * T, n = (size_t)B * per_sample;
    be->softmax_fwd(be, probs, scores, key_mask, B, H, T, scale);
    if (round16 != BT_F32) be->round16(be, probs, round16, n);
    /* an absent dropped: dropout writes only the 16-bit copy */
    be->dropout(be, dropped, probs, n, per_sample, first_sample, p, key, BT_F32,
                dropped.buf ? BT_NO_PTR : dropped16, round16);
    if (dropped16.buf && dropped.buf) be->cast(be, dropped16, round16, dropped, BT_F32, n);
    if (probs16.buf) be->cast(be, probs16, round16, probs, BT_F32, n);
}

/* dscores = softmax_bwd(dropout(dprobs), probs) over the B*H*T rows, rounded
 * with 16-bit storage; a 16-bit probs widened with cast, the 16-bit copy of
 * dscores asked for with cast. */
static void composed_dropout_softmax_bwd(bt_backend *be, bt_ptr dscores, bt_ptr dprobs,
                                         bt_ptr probs, int B, int H, int T, float scale,
                                         bt_dtype round16, uint32_t first_sample, float p,
                                         bt_rng_key key, bt_dtype probs_dtype,
                                         bt_ptr dscores16, bool dscores_kept) {
    (void)dscores_kept; /* dscores is softmax_bwd's operand: written either way */
    const size_t per_sample = (size_t)H * T * T, n = (size_t)B * per_sample;
    bt_buffer *wide = probs_dtype != BT_F32 ? widened(be, probs, probs_dtype, n,
                                                      "dropout_softmax_bwd")
                                            : NULL;
    if (wide) probs = (bt_ptr){wide, 0};
    be->dropout(be, dscores, dprobs, n, per_sample, first_sample, p, key, BT_F32, BT_NO_PTR,
                BT_F32);
    be->softmax_bwd(be, dscores, dscores, probs, B * H * T, T, scale);
    if (round16 != BT_F32) be->round16(be, dscores, round16, n);
    if (dscores16.buf) be->cast(be, dscores16, round16, dscores, BT_F32, n);
    if (wide) be->free(be, wide); /* the backends free it once the queued ops are done */
}

void bt_composed_gemm16_bias(bt_backend *be, bt_dtype dtype, unsigned stored16, int m, int n,
                             int k, bt_ptr a, bt_ptr b, bt_ptr bias, bt_ptr bias16, bt_ptr c16) {
    (void)bias16; /* bias_add rounds the fp32 bias to the same bits */
    be->bias_add(be, BT_NO_PTR, bias, m, n, dtype, c16, false);
    be->gemm16(be, dtype, stored16 | BT_GEMM_C16, false, true, m, n, k, 1.0f, a, k, 0, b, k, 0,
               1.0f, c16, n, 0, 1);
}

void bt_composed_gemm16_bias_grad(bt_backend *be, bt_dtype dtype, unsigned stored16, int m,
                                  int n, int k, bt_ptr a, bt_ptr b, bt_ptr c, bt_ptr dbias) {
    be->gemm16(be, dtype, (stored16 & BT_GEMM_B16) | BT_GEMM_A16, true, false, m, n, k, 1.0f, a,
               m, 0, b, n, 0, 1.0f, c, n, 0, 1);
    be->bias_grad(be, dbias, a, k, m, BT_F32, dtype);
}

/* the two GEMM epilogues' compositions are public (composed.h): the CPU and
 * OpenCL backends have no faster way, and fill their slots with them */
#define composed_gemm16_bias bt_composed_gemm16_bias
#define composed_gemm16_bias_grad bt_composed_gemm16_bias_grad

int bt_compose_missing(bt_backend *be) {
    int filled = 0;
    /* every FUSED op of the list: a new one without its composed_ function
     * here does not compile */
#define COMPOSE_ADMIN(op)
#define COMPOSE_OP(op)
#define COMPOSE_FUSED(op)       \
    if (!be->op) {              \
        be->op = composed_##op; \
        filled++;               \
    }
#define COMPOSE(op, kind) COMPOSE_##kind(op)
    BT_OP_LIST(COMPOSE)
#undef COMPOSE
    return filled;
}
