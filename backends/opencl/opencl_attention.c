/* OpenCL backend: the launches of fused attention (kernels/attention.cl;
 * cuda_attention.cu's twin): the forward, then the backward's two kernels,
 * dQ (which also leaves delta) before dK and dV. */
#include "opencl_launch.h"

#include <stdio.h>
#include <stdlib.h>

_Static_assert(BT_ATTN_MAX_D == BT_ATTENTION_MAX_HEAD, "the kernels' widest head is backend.h's");

/* An activation in fp32 or a 16-bit dtype as the kernels read it: the fp32
 * and the ushort view of one tensor (the unused one at the buffer's start,
 * never read); BT_KIND16_OF gives its kind. */
static void arg_view(args *a, bt_ptr p, bt_dtype dtype) {
    const bt_ptr base = {p.buf, 0};
    arg_f32p(a, dtype == BT_F32 ? p : base);
    arg_ptr(a, dtype == BT_F32 ? base : p, 2);
}

/* Work-items of one attention kernel over B NH T rows with work-groups of wg. */
static size_t attn_items(int B, int NH, int T, size_t wg) {
    const size_t rows = wg / (wg < 32 ? wg : 32);
    return (size_t)B * NH * (((size_t)T + rows - 1) / rows) * wg;
}

static void check_head(int D) {
    if (D < 1 || D > BT_ATTN_MAX_D) {
        fprintf(stderr, "bertrain: opencl: attention: head width %d outside 1..%d\n", D,
                BT_ATTN_MAX_D);
        exit(1);
    }
}

static void ocl_attention_fwd(bt_backend *be, bt_ptr ctx, bt_ptr lse, bt_ptr qkv,
                              bt_dtype qkv_dtype, bt_ptr key_mask, int B, int NH, int T, int D,
                              float scale, uint32_t first_sample, float p, bt_rng_key key) {
    check_head(D);
    args a = begin(be, K_attention_fwd);
    arg_f32p(&a, ctx);
    arg_f32p(&a, lse);
    arg_view(&a, qkv, qkv_dtype);
    arg_ptr(&a, key_mask, 4);
    arg_i(&a, BT_KIND16_OF(qkv_dtype));
    arg_i(&a, NH);
    arg_i(&a, T);
    arg_i(&a, D);
    arg_f(&a, scale);
    arg_dropout(&a, first_sample, p, key);
    launch(be, &a, attn_items(B, NH, T, ocl(be)->wg));
}

static void ocl_attention_bwd(bt_backend *be, bt_ptr dqkv, bt_ptr delta, bt_ptr dctx, bt_ptr ctx,
                              bt_dtype ctx_dtype, bt_ptr lse, bt_ptr qkv, bt_dtype qkv_dtype,
                              bt_ptr key_mask, int B, int NH, int T, int D, float scale,
                              uint32_t first_sample, float p, bt_rng_key key) {
    check_head(D);
    const size_t items = attn_items(B, NH, T, ocl(be)->wg);
    args a = begin(be, K_attention_bwd_dq);
    arg_f32p(&a, dqkv);
    arg_f32p(&a, delta);
    arg_f32p(&a, dctx);
    arg_view(&a, ctx, ctx_dtype);
    arg_f32p(&a, lse);
    arg_view(&a, qkv, qkv_dtype);
    arg_ptr(&a, key_mask, 4);
    arg_i(&a, BT_KIND16_OF(qkv_dtype));
    arg_i(&a, BT_KIND16_OF(ctx_dtype));
    arg_i(&a, NH);
    arg_i(&a, T);
    arg_i(&a, D);
    arg_f(&a, scale);
    arg_dropout(&a, first_sample, p, key);
    launch(be, &a, items);
    a = begin(be, K_attention_bwd_dkv);
    arg_f32p(&a, dqkv);
    arg_f32p(&a, dctx);
    arg_f32p(&a, delta);
    arg_f32p(&a, lse);
    arg_view(&a, qkv, qkv_dtype);
    arg_ptr(&a, key_mask, 4);
    arg_i(&a, BT_KIND16_OF(qkv_dtype));
    arg_i(&a, NH);
    arg_i(&a, T);
    arg_i(&a, D);
    arg_f(&a, scale);
    arg_dropout(&a, first_sample, p, key);
    launch(be, &a, items);
}

void ocl_fill_attention_ops(bt_backend *be) {
    be->attention_fwd = ocl_attention_fwd;
    be->attention_bwd = ocl_attention_bwd;
}
