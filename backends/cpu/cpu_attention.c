/* CPU reference backend: fused attention (attention_fwd, attention_bwd), one
 * (sequence, head) or query row at a time with its scores in a row of
 * scratch. The model keeps its GEMM path on the CPU (its GEMMs run near the
 * core's peak; bt_device_info.fused_attention_pays); these are the ops'
 * plain definition, for the conformance suite and model.attention_kernel
 * "fused". */
#include "cpu_internal.h"

#include "../common/half.h"

#include <math.h>
#include <omp.h>

/* Where one head's Q, K and V rows and their element type live. */
typedef struct {
    const float *f32;
    const uint16_t *u16;
    bt_dtype dtype;
    int ld, H, D, T, NH;
} attn_src;

static attn_src attn_src_of(bt_ptr p, bt_dtype dtype, int NH, int T, int D, int ld) {
    return (attn_src){dtype == BT_F32 ? cpu_f32(p) : NULL, dtype == BT_F32 ? NULL : cpu_u16(p),
                      dtype, ld, NH * D, D, T, NH};
}

/* Element i of the source as fp32. */
static float attn_at(const attn_src *s, size_t i) {
    if (s->dtype == BT_F32) return s->f32[i];
    return bt_f32_from_bits(s->dtype == BT_BF16 ? bf16_to_f32(s->u16[i]) : f16_to_f32(s->u16[i]));
}

/* Column `part` (0 Q, 1 K, 2 V) of head h of token t, D values into out. */
static void attn_row(const attn_src *s, size_t t, int part, int h, float *out) {
    const size_t base = t * (size_t)s->ld + (size_t)part * s->H + (size_t)h * s->D;
    for (int d = 0; d < s->D; d++) out[d] = attn_at(s, base + d);
}

/* Part `part` of head h of every token of sequence b, as a (T, D) fp32 matrix. */
static void attn_gather(const attn_src *s, int b, int part, int h, float *out) {
    for (int t = 0; t < s->T; t++) attn_row(s, (size_t)b * s->T + t, part, h, out + (size_t)t * s->D);
}

/* a . b over n values, in lanes (the same order on every run) */
static float dot(const float *restrict a, const float *restrict b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y += a x over n values */
static void axpy(float *restrict y, float a, const float *restrict x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* keep[j] for the T probabilities of row i of head h in sample b (all 1
 * without dropout). */
static void attn_keep_row(uint8_t *keep, const cpu_drop *d, int b, int h, int i, int T) {
    if (d->thr == 0) {
        memset(keep, 1, (size_t)T);
        return;
    }
    const size_t i0 = (size_t)b * d->per_sample + ((size_t)h * T + i) * T;
    for (int j0 = 0; j0 < T; j0 += CPU_KEEP_RUN) {
        const int n = T - j0 < CPU_KEEP_RUN ? T - j0 : CPU_KEEP_RUN;
        cpu_drop_keep(keep + j0, d, i0 + (size_t)j0, (size_t)n);
    }
}

/* Scaled scores of query q against the T keys K (T, D) of one sequence into
 * s (-Inf where km masks the key); their maximum returned. */
static float attn_scores(const float *q, const float *K, const int32_t *km, int T, int D,
                         float scale, float *s) {
    float mx = -INFINITY;
    for (int j = 0; j < T; j++) {
        s[j] = km[j] ? scale * dot(q, K + (size_t)j * D, D) : -INFINITY;
        if (s[j] > mx) mx = s[j];
    }
    return mx;
}

/* One thread's scratch for a (sequence, head): Q, K, V and ctx as (T, D)
 * matrices, a row of T scores or probabilities, and T keep flags. */
typedef struct {
    float *q, *k, *v, *o, *s;
    uint8_t *keep;
} attn_scratch;

/* Floats of one thread's attn_scratch. */
static size_t attn_scratch_floats(int T, int D) {
    return 4 * (size_t)T * D + (size_t)T + ((size_t)T + 3) / 4;
}

/* Room for every thread's scratch in the backend's grow-only buffer, before
 * the parallel region: no op allocates in the step once it has grown. */
static float *attn_scratch_reserve(bt_backend *be, int T, int D) {
    cpu_ctx *c = be->ctx;
    return bt_partials_reserve(&c->attn_part, (size_t)omp_get_max_threads() * attn_scratch_floats(T, D),
                               "cpu");
}

/* This thread's slice of the reserved scratch. */
static attn_scratch attn_scratch_of(float *base, int T, int D) {
    const size_t td = (size_t)T * D;
    float *f = base + (size_t)omp_get_thread_num() * attn_scratch_floats(T, D);
    return (attn_scratch){f, f + td, f + 2 * td, f + 3 * td, f + 4 * td,
                          (uint8_t *)(f + 4 * td + T)};
}

/* The forward of one (sequence, head): ctx rows and lse. */
static void attn_fwd_head(const attn_src *src, const int32_t *km, float *C, float *L, int b,
                          int h, float scale, const cpu_drop *d, attn_scratch *w) {
    const int T = src->T, D = src->D;
    attn_gather(src, b, 0, h, w->q);
    attn_gather(src, b, 1, h, w->k);
    attn_gather(src, b, 2, h, w->v);
    for (int i = 0; i < T; i++) {
        float *s = w->s, *out = C + ((size_t)b * T + i) * src->H + (size_t)h * D;
        const float mx = attn_scores(w->q + (size_t)i * D, w->k, km, T, D, scale, s);
        float sum = 0.0f;
        for (int j = 0; j < T; j++) {
            s[j] = s[j] == -INFINITY ? 0.0f : expf(s[j] - mx);
            sum += s[j];
        }
        attn_keep_row(w->keep, d, b, h, i, T);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int c = 0; c < D; c++) out[c] = 0.0f;
        for (int j = 0; j < T; j++)
            if (w->keep[j] && s[j] > 0.0f) axpy(out, s[j] * inv * d->keep_scale, w->v + (size_t)j * D, D);
        L[((size_t)b * src->NH + h) * T + i] = sum > 0.0f ? mx + logf(sum) : INFINITY;
    }
}

static void cpu_attention_fwd(bt_backend *be, bt_ptr ctx, bt_ptr lse, bt_ptr qkv,
                              bt_dtype qkv_dtype, bt_ptr key_mask, int B, int NH, int T, int D,
                              float scale, uint32_t first_sample, float p, bt_rng_key key) {
    const attn_src src = attn_src_of(qkv, qkv_dtype, NH, T, D, 3 * NH * D);
    const int32_t *km = cpu_i32(key_mask);
    float *C = cpu_f32(ctx), *L = cpu_f32(lse);
    const cpu_drop d = cpu_drop_of(key, first_sample, (size_t)NH * T * T, p);
    float *scratch = attn_scratch_reserve(be, T, D);
#pragma omp parallel
    {
        attn_scratch w = attn_scratch_of(scratch, T, D);
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++)
            attn_fwd_head(&src, km + (size_t)(bh / NH) * T, C, L, bh / NH, bh % NH, scale, &d, &w);
    }
}

/* The backward of one (sequence, head) into dqkv's rows of it: dQ row by
 * row, dK and dV summed over the queries in order, so the bits do not
 * depend on the threads. */
static void attn_bwd_head(const attn_src *src, const attn_src *out, const float *dctx,
                          const float *L, float *delta, const int32_t *km, float *dqkv, int b,
                          int h, float scale, const cpu_drop *d, attn_scratch *w) {
    const int T = src->T, D = src->D, H = src->H, ld = src->ld;
    attn_gather(src, b, 0, h, w->q);
    attn_gather(src, b, 1, h, w->k);
    attn_gather(src, b, 2, h, w->v);
    attn_gather(out, b, 0, h, w->o); /* ctx as a one-part source */
    for (int j = 0; j < T; j++) { /* dK and dV rows start at 0 */
        float *dk = dqkv + ((size_t)b * T + j) * ld + H + (size_t)h * D;
        for (int c = 0; c < D; c++) dk[c] = dk[c + H] = 0.0f;
    }
    for (int i = 0; i < T; i++) {
        const size_t t = (size_t)b * T + i, row = ((size_t)b * src->NH + h) * T + i;
        const float *g = dctx + t * H + (size_t)h * D, *q = w->q + (size_t)i * D;
        const float dl = dot(g, w->o + (size_t)i * D, D);
        delta[row] = dl;
        attn_scores(q, w->k, km, T, D, scale, w->s);
        attn_keep_row(w->keep, d, b, h, i, T);
        float *dq = dqkv + t * ld + (size_t)h * D;
        for (int c = 0; c < D; c++) dq[c] = 0.0f;
        if (L[row] == INFINITY) continue; /* no key: no gradient */
        for (int j = 0; j < T; j++) {
            if (w->s[j] == -INFINITY) continue;
            const float pr = expf(w->s[j] - L[row]);
            float *dk = dqkv + ((size_t)b * T + j) * ld + H + (size_t)h * D, *dv = dk + H;
            const float dp = w->keep[j] ? dot(g, w->v + (size_t)j * D, D) * d->keep_scale : 0.0f;
            const float pd = w->keep[j] ? pr * d->keep_scale : 0.0f;
            const float ds = scale * (pr * (dp - dl));
            axpy(dv, pd, g, D);
            axpy(dq, ds, w->k + (size_t)j * D, D);
            axpy(dk, ds, q, D);
        }
    }
}

static void cpu_attention_bwd(bt_backend *be, bt_ptr dqkv, bt_ptr delta, bt_ptr dctx, bt_ptr ctx,
                              bt_dtype ctx_dtype, bt_ptr lse, bt_ptr qkv, bt_dtype qkv_dtype,
                              bt_ptr key_mask, int B, int NH, int T, int D, float scale,
                              uint32_t first_sample, float p, bt_rng_key key) {
    const attn_src src = attn_src_of(qkv, qkv_dtype, NH, T, D, 3 * NH * D);
    const attn_src out = attn_src_of(ctx, ctx_dtype, NH, T, D, NH * D);
    const cpu_drop d = cpu_drop_of(key, first_sample, (size_t)NH * T * T, p);
    const int32_t *km = cpu_i32(key_mask);
    float *scratch = attn_scratch_reserve(be, T, D);
#pragma omp parallel
    {
        attn_scratch w = attn_scratch_of(scratch, T, D);
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++)
            attn_bwd_head(&src, &out, cpu_f32(dctx), cpu_f32(lse), cpu_f32(delta),
                          km + (size_t)(bh / NH) * T, cpu_f32(dqkv), bh / NH, bh % NH, scale, &d,
                          &w);
    }
}

void cpu_fill_attention_ops(bt_backend *be) {
    be->attention_fwd = cpu_attention_fwd;
    be->attention_bwd = cpu_attention_bwd;
}
