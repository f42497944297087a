/* CPU reference backend: fused attention (attention_fwd, attention_bwd), one
 * (sequence, head) or query row at a time with its scores in a row of
 * scratch. The model keeps its GEMM path on the CPU (its GEMMs run near the
 * core's peak; bt_device_info.fused_attention_pays); these are the ops'
 * plain definition, for the conformance suite and model.attention_kernel
 * "fused". */
#include "cpu_internal.h"

#include "../common/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* One line and exit: out of host memory for an op's row scratch. */
static void cpu_out_of_memory(const char *what) {
    fprintf(stderr, "bertrain: cpu backend: out of host memory for the %s\n", what);
    exit(1);
}

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

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
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

/* Scaled scores of query q against every key of sequence b, head h, into s
 * (-Inf where masked), their maximum returned. */
static float attn_scores(const attn_src *src, const int32_t *km, int b, int h, const float *q,
                         float scale, float *kbuf, float *s) {
    float mx = -INFINITY;
    for (int j = 0; j < src->T; j++) {
        s[j] = -INFINITY;
        if (!km[(size_t)b * src->T + j]) continue;
        attn_row(src, (size_t)b * src->T + j, 1, h, kbuf);
        s[j] = scale * dot(q, kbuf, src->D);
        if (s[j] > mx) mx = s[j];
    }
    return mx;
}

static void cpu_attention_fwd(bt_backend *be, bt_ptr ctx, bt_ptr lse, bt_ptr qkv,
                              bt_dtype qkv_dtype, bt_ptr key_mask, int B, int NH, int T, int D,
                              float scale, uint32_t first_sample, float p, bt_rng_key key) {
    (void)be;
    const attn_src src = attn_src_of(qkv, qkv_dtype, NH, T, D, 3 * NH * D);
    const int32_t *km = cpu_i32(key_mask);
    float *C = cpu_f32(ctx), *L = cpu_f32(lse);
    const cpu_drop d = cpu_drop_of(key, first_sample, (size_t)NH * T * T, p);
    const long rows = (long)B * NH * T;
#pragma omp parallel
    {
        float *s = malloc(((size_t)T + 3 * (size_t)D) * sizeof *s);
        uint8_t *keep = malloc((size_t)T);
        if (!s || !keep) cpu_out_of_memory("attention_fwd scratch");
#pragma omp for schedule(static)
        for (long r = 0; r < rows; r++) {
            const int i = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / T / NH);
            float *q = s + T, *kv = q + D, *out = kv + D;
            attn_row(&src, (size_t)b * T + i, 0, h, q);
            const float mx = attn_scores(&src, km, b, h, q, scale, kv, s);
            float sum = 0.0f;
            for (int j = 0; j < T; j++) {
                s[j] = s[j] == -INFINITY ? 0.0f : expf(s[j] - mx);
                sum += s[j];
            }
            attn_keep_row(keep, &d, b, h, i, T);
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            for (int c = 0; c < D; c++) out[c] = 0.0f;
            for (int j = 0; j < T; j++) {
                const float pj = keep[j] ? s[j] * inv * d.keep_scale : 0.0f;
                if (pj == 0.0f) continue;
                attn_row(&src, (size_t)b * T + j, 2, h, kv);
                for (int c = 0; c < D; c++) out[c] += pj * kv[c];
            }
            float *dst = C + ((size_t)b * T + i) * NH * D + (size_t)h * D;
            for (int c = 0; c < D; c++) dst[c] = out[c];
            L[r] = sum > 0.0f ? mx + logf(sum) : INFINITY;
        }
        free(s);
        free(keep);
    }
}

/* The backward of one (sequence, head): rows of dK and dV summed over the
 * queries in order, so the bits do not depend on the threads. */
static void attn_bwd_head(const attn_src *src, const attn_src *out, const float *dctx,
                          const float *L, float *delta, const int32_t *km, float *dqkv, int b,
                          int h, float scale, const cpu_drop *d, float *s, uint8_t *keep) {
    const int T = src->T, D = src->D, H = src->H, ld = src->ld;
    float *q = s + T, *kv = q + D, *o = kv + D;
    for (int j = 0; j < T; j++) { /* dK and dV rows start at 0 */
        float *dk = dqkv + ((size_t)b * T + j) * ld + H + (size_t)h * D;
        for (int c = 0; c < D; c++) dk[c] = dk[c + H] = 0.0f;
    }
    for (int i = 0; i < T; i++) {
        const size_t t = (size_t)b * T + i, row = ((size_t)b * src->NH + h) * T + i;
        const float *g = dctx + t * H + (size_t)h * D;
        attn_row(out, t, 0, h, o); /* ctx as a one-part source */
        const float dl = dot(g, o, D);
        delta[row] = dl;
        attn_row(src, t, 0, h, q);
        attn_scores(src, km, b, h, q, scale, kv, s);
        attn_keep_row(keep, d, b, h, i, T);
        float *dq = dqkv + t * ld + (size_t)h * D;
        for (int c = 0; c < D; c++) dq[c] = 0.0f;
        for (int j = 0; j < T; j++) {
            if (s[j] == -INFINITY || L[row] == INFINITY) continue;
            const float pr = expf(s[j] - L[row]);
            const size_t tj = (size_t)b * T + j;
            float *dk = dqkv + tj * ld + H + (size_t)h * D, *dv = dk + H;
            attn_row(src, tj, 2, h, kv);
            const float dp = keep[j] ? dot(g, kv, D) * d->keep_scale : 0.0f;
            const float pd = keep[j] ? pr * d->keep_scale : 0.0f;
            const float ds = scale * (pr * (dp - dl));
            for (int c = 0; c < D; c++) dv[c] += pd * g[c];
            attn_row(src, tj, 1, h, kv);
            for (int c = 0; c < D; c++) {
                dq[c] += ds * kv[c];
                dk[c] += ds * q[c];
            }
        }
    }
}

static void cpu_attention_bwd(bt_backend *be, bt_ptr dqkv, bt_ptr delta, bt_ptr dctx, bt_ptr ctx,
                              bt_dtype ctx_dtype, bt_ptr lse, bt_ptr qkv, bt_dtype qkv_dtype,
                              bt_ptr key_mask, int B, int NH, int T, int D, float scale,
                              uint32_t first_sample, float p, bt_rng_key key) {
    (void)be;
    const attn_src src = attn_src_of(qkv, qkv_dtype, NH, T, D, 3 * NH * D);
    const attn_src out = attn_src_of(ctx, ctx_dtype, NH, T, D, NH * D);
    const cpu_drop d = cpu_drop_of(key, first_sample, (size_t)NH * T * T, p);
    const int32_t *km = cpu_i32(key_mask);
#pragma omp parallel
    {
        float *s = malloc(((size_t)T + 3 * (size_t)D) * sizeof *s);
        uint8_t *keep = malloc((size_t)T);
        if (!s || !keep) cpu_out_of_memory("attention_bwd scratch");
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++)
            attn_bwd_head(&src, &out, cpu_f32(dctx), cpu_f32(lse), cpu_f32(delta), km,
                          cpu_f32(dqkv), bh / NH, bh % NH, scale, &d, s, keep);
        free(s);
        free(keep);
    }
}

void cpu_fill_attention_ops(bt_backend *be) {
    be->attention_fwd = cpu_attention_fwd;
    be->attention_bwd = cpu_attention_bwd;
}
