/* CUDA backend: the launches of fused attention (kernels/attention.cl;
 * opencl_attention.c's twin): the forward, then the backward's two kernels,
 * dQ (which also leaves delta) before dK and dV. */
#include "cuda_launch.cuh"

static_assert(BT_ATTN_MAX_D == BT_ATTENTION_MAX_HEAD, "the kernels' widest head is backend.h's");

/* An activation in fp32 or a 16-bit dtype as the kernels read it: the fp32
 * view and the ushort view of one tensor, the unused one at the buffer's
 * start (never read), and its kind (BT_KIND16_*). */
typedef struct {
    const float *f32;
    const uint16_t *u16;
    int kind;
} attn_view;

static attn_view view_of(bt_ptr p, bt_dtype dtype) {
    const bt_ptr base = {p.buf, 0};
    if (dtype == BT_F32) return (attn_view){cu_f32(p), u16c(base), BT_KIND16_NONE};
    return (attn_view){cu_f32(base), u16c(p), BT_KIND16_OF(dtype)};
}

/* Work-items of one attention kernel over B NH T rows. */
static size_t attn_items(int B, int NH, int T) {
    const int rows = BT_WG / BT_ROW_LANES;
    return (size_t)B * NH * ((T + rows - 1) / rows) * BT_WG;
}

static void check_head(int D) {
    if (D < 1 || D > BT_ATTN_MAX_D) {
        fprintf(stderr, "bertrain: cuda: attention: head width %d outside 1..%d\n", D,
                BT_ATTN_MAX_D);
        exit(1);
    }
}

static void cu_attention_fwd(bt_backend *be, bt_ptr ctx, bt_ptr lse, bt_ptr qkv,
                             bt_dtype qkv_dtype, bt_ptr key_mask, int B, int NH, int T, int D,
                             float scale, uint32_t first_sample, float p, bt_rng_key key) {
    cu_ctx *c = cu(be);
    check_head(D);
    const drop_args d = drop_args_of(first_sample, p, key);
    const attn_view x = view_of(qkv, qkv_dtype);
    LAUNCH(c, attention_fwd, attn_items(B, NH, T), cu_f32(ctx), cu_f32(lse), x.f32, x.u16,
           cu_i32(key_mask), x.kind, NH, T, D, scale, DROP_ARGS(d));
}

static void cu_attention_bwd(bt_backend *be, bt_ptr dqkv, bt_ptr delta, bt_ptr dctx, bt_ptr ctx,
                             bt_dtype ctx_dtype, bt_ptr lse, bt_ptr qkv, bt_dtype qkv_dtype,
                             bt_ptr key_mask, int B, int NH, int T, int D, float scale,
                             uint32_t first_sample, float p, bt_rng_key key) {
    cu_ctx *c = cu(be);
    check_head(D);
    const drop_args d = drop_args_of(first_sample, p, key);
    const attn_view x = view_of(qkv, qkv_dtype), o = view_of(ctx, ctx_dtype);
    LAUNCH(c, attention_bwd_dq, attn_items(B, NH, T), cu_f32(dqkv), cu_f32(delta), cu_f32(dctx),
           o.f32, o.u16, cu_f32(lse), x.f32, x.u16, cu_i32(key_mask), x.kind, o.kind, NH, T, D,
           scale, DROP_ARGS(d));
    LAUNCH(c, attention_bwd_dkv, attn_items(B, NH, T), cu_f32(dqkv), cu_f32(dctx), cu_f32(delta),
           cu_f32(lse), x.f32, x.u16, cu_i32(key_mask), x.kind, NH, T, D, scale, DROP_ARGS(d));
}

void cu_fill_attention_ops(bt_backend *be) {
    be->attention_fwd = cu_attention_fwd;
    be->attention_bwd = cu_attention_bwd;
}
