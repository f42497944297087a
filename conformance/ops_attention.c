/* Conformance checks of fused attention (attention_fwd, attention_bwd)
 * against a float64 reference written out here from the definition: scores,
 * key mask, softmax, dropout (philox.h's draws at element (h T + i) T + j of
 * each sample) and the product with V, and the backward's dQ, dK, dV by the
 * chain rule through them. Q, K, V come as the token-major QKV projection in
 * fp32, bf16 or f16; sequences have padding, one shape has a sequence with no
 * key at all; seq 1 to 512, heads of 8 to 128. */
#include "backends/philox.h"
#include "ops.h"
#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int B, NH, T, D;
    float p;
    bt_dtype dtype; /* of qkv (and of ctx for the backward) */
    uint32_t first_sample;
    bt_rng_key key;
    float scale;
} attn_case;

/* Inputs (as the device gets them) and the float64 reference. */
typedef struct {
    const attn_case *c;
    size_t nqkv, nctx, nrow;    /* elements of qkv, ctx, lse */
    float *qkv, *dctx, *ctx32, *lse32; /* fp32 values (qkv, ctx: rounded to dtype) */
    uint16_t *qkv16, *ctx16;    /* their 16-bit encodings (dtype not fp32) */
    int32_t *mask;
    double *ctx, *lse, *dqkv, *mctx, *mdqkv;
} attn_data;

static double keep_of(const attn_case *c, int b, int h, int i, int j) {
    if (c->p <= 0.0f) return 1.0;
    const uint32_t elem = (uint32_t)(((size_t)h * c->T + i) * c->T + j);
    return philox_draw(c->key.seed, c->key.stream, c->first_sample + (uint32_t)b, elem) >=
                   philox_drop_threshold(c->p)
               ? (double)(1.0f / (1.0f - c->p))
               : 0.0;
}

/* x rounded to the case's dtype, with its encoding in *bits. */
static float round_to(float x, bt_dtype dt, uint16_t *bits) {
    if (dt == BT_F32) return x;
    const double r = dt == BT_F16 ? ref_round_f16(x) : ref_round_bf16(x);
    *bits = dt == BT_F16 ? ref_f16_bits(r) : ref_bf16_bits(r);
    return (float)r;
}

/* Element (token t, part 0 Q / 1 K / 2 V, head h, column d) of qkv. */
static double qkv_at(const attn_data *a, size_t t, int part, int h, int d) {
    const int H = a->c->NH * a->c->D;
    return a->qkv[t * 3 * H + (size_t)part * H + (size_t)h * a->c->D + d];
}

/* One head's probabilities P (T x T, before dropout) and the scaled scores'
 * log-sum-exp of each row, in float64. */
static void ref_probs(const attn_data *a, int b, int h, double *P, double *lse) {
    const attn_case *c = a->c;
    for (int i = 0; i < c->T; i++) {
        double mx = -INFINITY, sum = 0.0;
        double *row = P + (size_t)i * c->T;
        for (int j = 0; j < c->T; j++) {
            row[j] = -INFINITY;
            if (!a->mask[(size_t)b * c->T + j]) continue;
            double s = 0.0;
            for (int d = 0; d < c->D; d++)
                s += qkv_at(a, (size_t)b * c->T + i, 0, h, d) * qkv_at(a, (size_t)b * c->T + j, 1, h, d);
            row[j] = (double)c->scale * s;
            if (row[j] > mx) mx = row[j];
        }
        for (int j = 0; j < c->T; j++) {
            row[j] = row[j] == -INFINITY ? 0.0 : exp(row[j] - mx);
            sum += row[j];
        }
        for (int j = 0; j < c->T; j++) row[j] = sum > 0.0 ? row[j] / sum : 0.0;
        lse[i] = sum > 0.0 ? mx + log(sum) : INFINITY;
    }
}

/* The forward of one head in float64: ctx and lse (P: T x T scratch). */
static void ref_head_fwd(attn_data *a, int b, int h, double *P) {
    const attn_case *c = a->c;
    const int T = c->T, D = c->D, H = c->NH * D;
    ref_probs(a, b, h, P, a->lse + ((size_t)b * c->NH + h) * T);
    for (int i = 0; i < T; i++) {
        const size_t o = ((size_t)b * T + i) * H + (size_t)h * D;
        for (int j = 0; j < T; j++) {
            const double pd = P[(size_t)i * T + j] * keep_of(c, b, h, i, j);
            for (int d = 0; d < D; d++) {
                const double v = qkv_at(a, (size_t)b * T + j, 2, h, d);
                a->ctx[o + d] += pd * v;
                a->mctx[o + d] += fabs(pd * v);
            }
        }
    }
}

/* The backward of one head in float64 by the chain rule, with delta_i =
 * dctx_i . ctx_i from the ctx the op is given (ctx32), as the op defines it
 * (P: T x T scratch, dp: T). */
static void ref_head_bwd(attn_data *a, int b, int h, double *P, double *dp) {
    const attn_case *c = a->c;
    const int T = c->T, D = c->D, H = c->NH * D;
    double *lse = ref_alloc((size_t)T * 8);
    ref_probs(a, b, h, P, lse);
    free(lse);
    for (int i = 0; i < T; i++) {
        const size_t ti = (size_t)b * T + i, o = ti * H + (size_t)h * D;
        const float *g = a->dctx + o;
        double dl = 0.0;
        for (int d = 0; d < D; d++) dl += (double)g[d] * a->ctx32[o + d];
        for (int j = 0; j < T; j++) { /* dp = dropout'(dctx . v_j) */
            double gv = 0.0;
            for (int d = 0; d < D; d++) gv += g[d] * qkv_at(a, (size_t)b * T + j, 2, h, d);
            dp[j] = gv * keep_of(c, b, h, i, j);
        }
        for (int j = 0; j < T; j++) {
            const size_t tj = (size_t)b * T + j;
            const double pij = P[(size_t)i * T + j], pd = pij * keep_of(c, b, h, i, j);
            const double ds = c->scale * pij * (dp[j] - dl);
            for (int d = 0; d < D; d++) {
                const size_t q = ti * 3 * H + (size_t)h * D + d, k = tj * 3 * H + H + (size_t)h * D + d;
                a->dqkv[q] += ds * qkv_at(a, tj, 1, h, d);
                a->mdqkv[q] += fabs(ds * qkv_at(a, tj, 1, h, d));
                a->dqkv[k] += ds * qkv_at(a, ti, 0, h, d);
                a->mdqkv[k] += fabs(ds * qkv_at(a, ti, 0, h, d));
                a->dqkv[k + H] += pd * g[d];
                a->mdqkv[k + H] += fabs(pd * g[d]);
            }
        }
    }
}

/* Random inputs for case c: padding at the end of each sequence (the last
 * one without any key where no_key), and the reference. */
static void attn_data_make(attn_data *a, const attn_case *c, bool no_key) {
    memset(a, 0, sizeof *a);
    a->c = c;
    const size_t N = (size_t)c->B * c->T, H = (size_t)c->NH * c->D;
    a->nqkv = N * 3 * H, a->nctx = N * H, a->nrow = (size_t)c->B * c->NH * c->T;
    a->qkv = rand_floats(a->nqkv, 1.0, 0);
    a->dctx = rand_floats(a->nctx, 1.0, 0);
    a->qkv16 = ref_alloc(a->nqkv * 2 + 2);
    a->ctx16 = ref_alloc(a->nctx * 2 + 2);
    for (size_t i = 0; i < a->nqkv; i++) a->qkv[i] = round_to(a->qkv[i], c->dtype, a->qkv16 + i);
    a->mask = ref_alloc(N * 4);
    for (int b = 0; b < c->B; b++) {
        const int len = no_key && b == c->B - 1 ? 0 : c->T - (b * c->T) / (2 * c->B);
        for (int j = 0; j < c->T; j++) a->mask[(size_t)b * c->T + j] = j < len;
    }
    a->ctx = ref_alloc(a->nctx * 8), a->mctx = ref_alloc(a->nctx * 8);
    a->lse = ref_alloc(a->nrow * 8);
    a->dqkv = ref_alloc(a->nqkv * 8), a->mdqkv = ref_alloc(a->nqkv * 8);
    memset(a->ctx, 0, a->nctx * 8), memset(a->mctx, 0, a->nctx * 8);
    memset(a->dqkv, 0, a->nqkv * 8), memset(a->mdqkv, 0, a->nqkv * 8);
    double *P = ref_alloc((size_t)c->T * c->T * 8), *dp = ref_alloc((size_t)c->T * 8);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++) ref_head_fwd(a, b, h, P);
    /* the backward's ctx and lse inputs: the reference's, as the device stores them */
    a->ctx32 = ref_alloc(a->nctx * 4), a->lse32 = ref_alloc(a->nrow * 4);
    for (size_t i = 0; i < a->nctx; i++) a->ctx32[i] = round_to((float)a->ctx[i], c->dtype, a->ctx16 + i);
    for (size_t i = 0; i < a->nrow; i++) a->lse32[i] = (float)a->lse[i];
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++) ref_head_bwd(a, b, h, P, dp);
    free(P), free(dp);
}

static void attn_data_free(attn_data *a) {
    free(a->qkv), free(a->dctx), free(a->ctx32), free(a->lse32), free(a->qkv16), free(a->ctx16);
    free(a->mask), free(a->ctx), free(a->lse), free(a->dqkv), free(a->mctx), free(a->mdqkv);
}

static tensor qkv_tensor(const attn_data *a) {
    return a->c->dtype == BT_F32 ? tensor_in("qkv", a->qkv, a->nqkv)
                                 : tensor_16bit("qkv", a->qkv16, a->nqkv, false);
}

static void run_fwd(bt_backend *be, tensor *t, void *arg, double *s) {
    (void)s;
    const attn_case *c = ((const attn_data *)arg)->c;
    be->attention_fwd(be, t[0].p, t[1].p, t[2].p, c->dtype, t[3].p, c->B, c->NH, c->T, c->D,
                      c->scale, c->first_sample, c->p, c->key);
}

static void run_bwd(bt_backend *be, tensor *t, void *arg, double *s) {
    (void)s;
    const attn_case *c = ((const attn_data *)arg)->c;
    be->attention_bwd(be, t[0].p, t[1].p, t[2].p, t[3].p, c->dtype, t[4].p, t[5].p, c->dtype,
                      t[6].p, c->B, c->NH, c->T, c->D, c->scale, c->first_sample, c->p, c->key);
}

/* lse where the row has keys must match; +Inf exactly where it has none. */
static void check_lse(verdict *v, const float *out, const double *ref, size_t n) {
    double *r = ref_alloc(n * 8);
    float *o = ref_alloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        const bool inf = ref[i] == INFINITY;
        if (inf != (out[i] == INFINITY)) {
            v_fail(v, "lse[%zu] = %g, want %g", i, out[i], ref[i]);
            break;
        }
        r[i] = inf ? 0.0 : ref[i];
        o[i] = inf ? 0.0f : out[i];
    }
    v_nmse(v, "lse", o, r, NULL, n, THR_MATH);
    free(r), free(o);
}

static void attn_run_case(bt_backend *be, const attn_case *c, bool no_key) {
    attn_data a;
    attn_data_make(&a, c, no_key);
    char shape[96];
    snprintf(shape, sizeof shape, "B%d NH%d T%d D%d p=%.2g %s%s", c->B, c->NH, c->T, c->D, c->p,
             c->dtype == BT_F32 ? "fp32" : c->dtype == BT_BF16 ? "bf16" : "f16",
             no_key ? " no-key seq" : "");
    if (want_op("attention_fwd")) {
        tensor t[4] = {tensor_out("ctx", NULL, a.nctx), tensor_out("lse", NULL, a.nrow),
                       qkv_tensor(&a), tensor_in("key_mask", a.mask, (size_t)c->B * c->T)};
        verdict v = v_new();
        if (exec_op(&v, be, t, 4, run_fwd, &a, NULL)) {
            v_nmse(&v, "ctx", RES(t[0]), a.ctx, a.mctx, a.nctx, THR_MATH);
            check_lse(&v, RES(t[1]), a.lse, a.nrow);
        }
        v_report(&v, "attention_fwd", "%s", shape);
        tensors_free(t, 4);
    }
    if (want_op("attention_bwd")) {
        tensor t[7] = {tensor_out("dqkv", NULL, a.nqkv), tensor_out("delta", NULL, a.nrow),
                       tensor_in("dctx", a.dctx, a.nctx),
                       c->dtype == BT_F32 ? tensor_in("ctx", a.ctx32, a.nctx)
                                          : tensor_16bit("ctx", a.ctx16, a.nctx, false),
                       tensor_in("lse", a.lse32, a.nrow), qkv_tensor(&a),
                       tensor_in("key_mask", a.mask, (size_t)c->B * c->T)};
        verdict v = v_new();
        if (exec_op(&v, be, t, 7, run_bwd, &a, NULL))
            v_nmse(&v, "dqkv", RES(t[0]), a.dqkv, a.mdqkv, a.nqkv, THR_MATH);
        v_report(&v, "attention_bwd", "%s", shape);
        tensors_free(t, 7);
    }
    attn_data_free(&a);
}

void test_attention(bt_backend *be) {
    if (!want_op("attention_fwd") && !want_op("attention_bwd")) return;
    /* B, NH, T, D, p, no_key, quick (1: in --quick too) */
    static const struct { int B, NH, T, D; float p; int no_key, quick; } shapes[] = {
        {1, 1, 1, 8, 0.0f, 0, 1},    {2, 2, 8, 8, 0.1f, 1, 1},   {2, 3, 33, 16, 0.1f, 0, 1},
        {1, 2, 64, 64, 0.0f, 0, 0},  {2, 2, 128, 64, 0.1f, 0, 0}, {1, 1, 300, 32, 0.5f, 0, 0},
        {1, 2, 40, 128, 0.1f, 0, 1}, {2, 1, 50, 96, 0.1f, 1, 0},  {1, 1, 512, 64, 0.1f, 0, 0},
        /* no dropout where a tile holds under 32 rows (D >= 64), so that the lanes' loops
         * over it run different trip counts; D = 96 and 100 load tiles unevenly too */
        {1, 2, 40, 128, 0.0f, 0, 0}, {2, 1, 50, 96, 0.0f, 1, 1},  {2, 2, 37, 100, 0.0f, 0, 0}};
    static const bt_dtype dtypes[] = {BT_F32, BT_BF16, BT_F16};
    for (int si = 0; si < (int)(sizeof shapes / sizeof *shapes); si++) {
        if (skip_shape(shapes[si].quick == 1)) continue;
        for (int di = 0; di < 3; di++) {
            if (di > 0 && shapes[si].T > 128) continue; /* 16-bit: the short shapes suffice */
            /* with --quick (Oclgrind's time) the wide heads in one 16-bit type each:
             * f16 at D = 128, bf16 at D = 96 (both at D = 16) */
            if (g_quick && shapes[si].D >= 64 && di == (shapes[si].D % 128 == 0 ? 1 : 2))
                continue;
            reseed("attention", (size_t)(si * 3 + di));
            const attn_case c = {shapes[si].B, shapes[si].NH, shapes[si].T, shapes[si].D,
                                 shapes[si].p, dtypes[di], 3, {0x5eedULL + (uint64_t)si, 7},
                                 1.0f / sqrtf((float)shapes[si].D)};
            attn_run_case(be, &c, shapes[si].no_key);
        }
    }
}
