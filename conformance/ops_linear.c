/* Conformance checks of the linear-layer ops: gemm (forward layouts and the
 * backward through transposed gemms) and bias_add / bias_grad. */
#include "backends/common/half.h"
#include "backends/common/staged_gemm.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================= gemm ================= */

typedef struct {
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
    long sa, sb, sc;
    int batch;
    float alpha, beta;
    bt_dtype dt; /* BT_F32: gemm; BT_BF16 / BT_F16: gemm16 */
    unsigned stored16; /* gemm16: A and/or B given in 16 bits (BT_GEMM_A16, BT_GEMM_B16) */
} gemm_args;

static void run_gemm(bt_backend *be, tensor *t, void *arg, double *s) {
    (void)s;
    gemm_args *g = arg;
    if (g->dt != BT_F32)
        be->gemm16(be, g->dt, g->stored16, g->ta, g->tb, g->m, g->n, g->k, g->alpha, t[0].p, g->lda, g->sa,
                   t[1].p, g->ldb, g->sb, g->beta, t[2].p, g->ldc, g->sc, g->batch);
    else
        be->gemm(be, g->ta, g->tb, g->m, g->n, g->k, g->alpha, t[0].p, g->lda, g->sa, t[1].p,
                 g->ldb, g->sb, g->beta, t[2].p, g->ldc, g->sc, g->batch);
}

/* x[i] = x rounded to dt (the operands gemm16 multiplies) */
void round_operand(double *x, size_t n, bt_dtype dt) {
    if (dt == BT_F32) return;
    for (size_t i = 0; i < n; i++) x[i] = dt == BT_F16 ? ref_round_f16(x[i]) : ref_round_bf16(x[i]);
}

/* An operand of gemm_case: fp32 values x, or with half their dt encodings
 * (x rounded to dt already), a 2-byte tensor. */
tensor gemm_operand(const char *name, const float *x, size_t n, bt_dtype dt, bool half,
                    uint16_t **bits) {
    *bits = NULL;
    if (!half) return tensor_in(name, x, n);
    *bits = ref_alloc(n * 2);
    for (size_t i = 0; i < n; i++)
        (*bits)[i] = dt == BT_F16 ? ref_f16_bits(x[i]) : ref_bf16_bits(x[i]);
    return tensor_16bit(name, *bits, n, false);
}

/* C against the float64 reference rC (|terms| mC), and every element outside
 * the matrices (logical 0) as it was before the call (C). */
static void check_c(verdict *v, const float *out, const double *rC, const double *mC,
                    const float *C, const unsigned char *logical, size_t nc) {
    v_nmse(v, "C", out, rC, mC, nc, THR_MATH);
    for (size_t i = 0; i < nc; i++)
        if (!logical[i] && memcmp(out + i, C + i, 4) != 0) {
            v_fail(v, "C[%zu] outside the matrices modified", i);
            break;
        }
}

/* gemm16 with A and B given in fp32 (rounded by the op) must give the bits
 * that the case's 16-bit operands gave (out: its C). */
static void same_bits_from_f32(verdict *v, bt_backend *be, gemm_args g, const float *A, size_t na,
                               const float *B, size_t nb, const float *C, size_t nc,
                               const float *out) {
    g.stored16 = 0;
    tensor t[] = {tensor_in("A", A, na), tensor_in("B", B, nb), tensor_out("C", C, nc)};
    if (exec_op(v, be, t, 3, run_gemm, &g, NULL)) v_bits(v, "C (fp32 operands)", out, RES(t[2]), nc);
    tensors_free(t, 3);
}

/* The 16-bit C of gemm16 / gemm_grid (BT_GEMM_C16): run again with C in dt
 * (C's values are dt's, so beta reads the same values either way), it must
 * hold the bits of the fp32 run's C (out) converted to dt
 * (half.h's conversion: cast's bits) in the matrices (logical), and its
 * own bits between them. Returns whether the check ran. */
static bool same_bits_c16(verdict *v, bt_backend *be, tensor *t, run_fn run, void *arg,
                          const float *C, const float *out, const unsigned char *logical,
                          size_t nc, bt_dtype dt) {
    uint16_t *before = ref_alloc(nc * 2);
    for (size_t i = 0; i < nc; i++) {
        uint32_t u;
        memcpy(&u, &C[i], 4);
        before[i] = dt == BT_BF16 ? f32_to_bf16(u) : f32_to_f16(u);
    }
    tensor c16[3] = {t[0], t[1], tensor_16bit("C16", before, nc, true)};
    const bool ran = exec_op(v, be, c16, 3, run, arg, NULL);
    for (size_t i = 0; ran && i < nc; i++) {
        uint32_t u;
        memcpy(&u, &out[i], 4);
        const uint16_t want = logical[i] ? dt == BT_BF16 ? f32_to_bf16(u) : f32_to_f16(u)
                                         : before[i];
        const uint16_t got = ((const uint16_t *)c16[2].res)[i];
        if (got != want) {
            v_fail(v, "C16[%zu] = 0x%04x, not 0x%04x (%s)", i, got, want,
                   logical[i] ? "the fp32 C in 16 bits" : "outside the matrices: as it was");
            break;
        }
    }
    tensors_free(c16, 3); /* exec_op gave each its own result */
    free(before);
    return ran;
}

static size_t gemm_span(int rows, int ld, long stride, int batch) {
    return (size_t)stride * (size_t)(batch - 1) + (size_t)rows * (size_t)ld;
}

/* One gemm call; C elements outside the m x n blocks must stay untouched.
 * nan_c: C's logical region holds NaN (beta = 0 must ignore it). */
static void gemm_case(bt_backend *be, gemm_args g, bool nan_c, const char *label) {
    reseed("gemm", (size_t)g.m * 1000003u + (size_t)g.n * 1009u + (size_t)g.k * 7u +
                       (size_t)g.batch * 131u + (size_t)g.ta + 2u * g.tb + 4u * (size_t)g.lda);
    size_t na = gemm_span(g.ta ? g.k : g.m, g.lda, g.sa, g.batch);
    size_t nb = gemm_span(g.tb ? g.n : g.k, g.ldb, g.sb, g.batch);
    size_t nc = gemm_span(g.m, g.ldc, g.sc, g.batch);
    float *A = rand_floats(na, 1.0, 0.0), *B = rand_floats(nb, 1.0, 0.0), *C = rand_floats(nc, 1.0, 0.0);
    unsigned char *logical = ref_zalloc(nc);
    for (int b = 0; b < g.batch; b++)
        for (int i = 0; i < g.m; i++)
            for (int j = 0; j < g.n; j++) logical[(size_t)b * g.sc + (size_t)i * g.ldc + j] = 1;
    if (nan_c) {
        for (size_t i = 0; i < nc; i++)
            if (logical[i]) C[i] = NAN;
    } else if (g.dt != BT_F32) { /* values a 16-bit C holds too (same_bits_c16 with beta) */
        for (size_t i = 0; i < nc; i++) C[i] = round16_host(C[i], g.dt);
    }
    double *rA = ref_dup(A, na), *rB = ref_dup(B, nb), *rC = ref_dup(C, nc);
    round_operand(rA, na, g.dt);
    round_operand(rB, nb, g.dt);
    if (g.stored16 & BT_GEMM_A16) /* the device gets these values in 16 bits */
        for (size_t i = 0; i < na; i++) A[i] = (float)rA[i];
    if (g.stored16 & BT_GEMM_B16)
        for (size_t i = 0; i < nb; i++) B[i] = (float)rB[i];
    ref_gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, rA, g.lda, g.sa, rB, g.ldb, g.sb, g.beta, rC,
             g.ldc, g.sc, g.batch);
    double *aA = ref_abs(A, na), *aB = ref_abs(B, nb), *mC = ref_abs(C, nc); /* |terms| */
    ref_gemm(g.ta, g.tb, g.m, g.n, g.k, fabsf(g.alpha), aA, g.lda, g.sa, aB, g.ldb, g.sb,
             fabsf(g.beta), mC, g.ldc, g.sc, g.batch);
    uint16_t *bits_a, *bits_b;
    tensor t[] = {gemm_operand("A", A, na, g.dt, g.stored16 & BT_GEMM_A16, &bits_a),
                  gemm_operand("B", B, nb, g.dt, g.stored16 & BT_GEMM_B16, &bits_b),
                  tensor_out("C", C, nc)};
    verdict v = v_new();
    bool c16 = false;
    if (exec_op(&v, be, t, 3, run_gemm, &g, NULL)) {
        check_c(&v, RES(t[2]), rC, mC, C, logical, nc);
        if (g.stored16) same_bits_from_f32(&v, be, g, A, na, B, nb, C, nc, RES(t[2]));
        if (g.dt != BT_F32 && !nan_c) { /* the same C in 16 bits, read by beta too */
            gemm_args g16 = g;
            g16.stored16 |= BT_GEMM_C16;
            c16 = same_bits_c16(&v, be, t, run_gemm, &g16, C, RES(t[2]), logical, nc, g.dt);
        }
    }
    v_report(&v, g.dt == BT_F32 ? "gemm" : "gemm16", "%s%dx%dx%d %c%c%s%s%s a=%g b=%g%s%s",
             g.dt == BT_F16 ? "f16 " : g.dt == BT_BF16 ? "bf16 " : "", g.m, g.n, g.k,
             g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', label, g.stored16 & BT_GEMM_A16 ? " A16" : "",
             g.stored16 & BT_GEMM_B16 ? " B16" : "", g.alpha, g.beta, nan_c ? " C=NaN" : "",
             c16 ? ", and C16" : "");
    tensors_free(t, 3);
    free(bits_a), free(bits_b);
    free(A), free(B), free(C), free(rA), free(rB), free(rC), free(logical), free(aA), free(aB), free(mC);
}

static void run_gemm_bwd(bt_backend *be, tensor *t, void *arg, double *s) {
    (void)s;
    gemm_args *g = arg; /* t: A (m,k), B (k,n), dC (m,n), dA, dB */
    be->gemm(be, false, true, g->m, g->k, g->n, g->alpha, t[2].p, g->n, 0, t[1].p, g->n, 0, 1.0f,
             t[3].p, g->k, 0, 1);
    be->gemm(be, true, false, g->k, g->n, g->m, g->alpha, t[0].p, g->k, 0, t[2].p, g->n, 0, 1.0f,
             t[4].p, g->n, 0, 1);
}

typedef struct {
    int m, n, k;
    double alpha, *a, *b;
} gemm_fd_ctx;
static void fwd_gemm(void *c, double *out) {
    gemm_fd_ctx *x = c;
    ref_gemm(false, false, x->m, x->n, x->k, x->alpha, x->a, x->k, 0, x->b, x->n, 0, 0.0, out,
             x->n, 0, 1);
}

/* Backward of C = alpha A B: dA += alpha dC B^T, dB += alpha A^T dC through the
 * backend gemm with transposes, against independent loops; the loops are
 * checked against finite differences. */
static void gemm_bwd_case(bt_backend *be, int m, int n, int k, float alpha) {
    reseed("gemm_bwd", (size_t)m * 1000003u + (size_t)n * 1009u + (size_t)k);
    gemm_args g = {.m = m, .n = n, .k = k, .alpha = alpha};
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *A = rand_floats(na, 1, 0), *B = rand_floats(nb, 1, 0), *dC = rand_floats(nc, 1, 0),
          *dA = rand_floats(na, 1, 0), *dB = rand_floats(nb, 1, 0);
    double *rA = ref_dup(A, na), *rB = ref_dup(B, nb), *rdC = ref_dup(dC, nc),
           *rdA = ref_dup(dA, na), *rdB = ref_dup(dB, nb);
    ref_gemm_bwd(m, n, k, alpha, rA, rB, rdC, rdA, rdB);
    double *aA = ref_abs(A, na), *aB = ref_abs(B, nb), *adC = ref_abs(dC, nc),
           *mA = ref_abs(dA, na), *mB = ref_abs(dB, nb); /* |terms| */
    ref_gemm_bwd(m, n, k, fabsf(alpha), aA, aB, adC, mA, mB);
    tensor t[] = {tensor_in("A", A, na), tensor_in("B", B, nb), tensor_in("dC", dC, nc),
                  tensor_out("dA", dA, na), tensor_out("dB", dB, nb)};
    verdict v = v_new();
    if (exec_op(&v, be, t, 5, run_gemm_bwd, &g, NULL)) {
        v_nmse(&v, "dA", RES(t[3]), rdA, mA, na, THR_MATH);
        v_nmse(&v, "dB", RES(t[4]), rdB, mB, nb, THR_MATH);
    }
    v_report(&v, "gemm", "%dx%dx%d bwd dA+=dC B^T, dB+=A^T dC", m, n, k);
    tensors_free(t, 5);
    if (g_check_references) { /* reference backward vs finite differences of the forward */
        verdict f = v_new();
        double *ga = ref_zalloc(na * sizeof *ga), *gb = ref_zalloc(nb * sizeof *gb);
        ref_gemm_bwd(m, n, k, alpha, rA, rB, rdC, ga, gb);
        gemm_fd_ctx ctx = {m, n, k, alpha, rA, rB};
        for (int s = 0; s < 6; s++) {
            bool isa = s < 3;
            size_t idx = (size_t)ref_int(&g_fd_rng, (int)(isa ? na : nb));
            double an = isa ? ga[idx] : gb[idx], fl = 1e-4 * max_abs(isa ? ga : gb, isa ? na : nb);
            double fd = ref_fd(fwd_gemm, &ctx, nc, rdC, isa ? rA : rB, idx, FD_H);
            fd_point(&f, isa ? "dA" : "dB", fd, an, fl);
        }
        FD_REPORT(f, "gemm", "%dx%dx%d bwd vs FD of fwd", m, n, k);
        free(ga), free(gb);
    }
    free(A), free(B), free(dC), free(dA), free(dB), free(rA), free(rB), free(rdC), free(rdA), free(rdB);
    free(aA), free(aB), free(adC), free(mA), free(mB);
}

/* k = 0: C = beta * C, NaN in C ignored when beta = 0 (backend.h), strided
 * batches and padded rows included. */
static void gemm_k0_cases(bt_backend *be, bt_dtype dt) {
    gemm_case(be, (gemm_args){.tb = true, .m = 5, .n = 7, .k = 0, .lda = 1, .ldb = 1, .ldc = 9,
                              .sa = 5, .sb = 7, .sc = 5 * 9 + 2, .batch = 2, .alpha = 1,
                              .beta = 0, .dt = dt}, true, " k=0 batch2");
    gemm_case(be, (gemm_args){.tb = true, .m = 5, .n = 7, .k = 0, .lda = 1, .ldb = 1, .ldc = 9,
                              .sa = 5, .sb = 7, .sc = 5 * 9 + 2, .batch = 2, .alpha = 1,
                              .beta = 0.5f, .dt = dt}, false, " k=0 batch2");
}

/* alpha and beta for the transposes NN, TN, NT, TT */
static const float GEMM_AB[4][2] = {{1, 0}, {0.75f, 1}, {-1.5f, 0.5f}, {1, 1}};

/* Every transpose of an m x n x k GEMM over a batch of 2, with leading
 * dimensions `pad` beyond the columns and `gap` floats between the batch's
 * matrices, so that an offset slip in any tile or part shows. nan_nn: NaN in
 * C for NN, whose beta is 0. */
static void padded_batch_cases(bt_backend *be, int m, int n, int k, int pad, int gap,
                               bool nan_nn, const char *label) {
    for (int tr = 0; tr < 4; tr++) {
        gemm_args g = {.ta = tr & 1, .tb = tr >> 1, .m = m, .n = n, .k = k, .batch = 2,
                       .alpha = GEMM_AB[tr][0], .beta = GEMM_AB[tr][1]};
        g.lda = (g.ta ? g.m : g.k) + pad;
        g.ldb = (g.tb ? g.k : g.n) + pad;
        g.ldc = g.n + pad;
        g.sa = (long)g.lda * (g.ta ? g.k : g.m) + gap;
        g.sb = (long)g.ldb * (g.tb ? g.n : g.k) + gap;
        g.sc = (long)g.ldc * g.m + gap;
        gemm_case(be, g, nan_nn && tr == 0, label);
    }
}

void test_gemm(bt_backend *be) {
    if (!want_op("gemm")) return;
    static const int shapes[][4] = {{1, 1, 1, 1}, {1, 7, 3, 0}, {5, 3, 17, 1}, {17, 33, 65, 0},
                                    {63, 15, 129, 1}, {4, 16, 64, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        if (g_quick && !shapes[s][3]) continue;
        for (int tr = 0; tr < 4; tr++) {
            gemm_args g = {.ta = tr & 1, .tb = tr >> 1, .m = shapes[s][0], .n = shapes[s][1],
                           .k = shapes[s][2], .batch = 1, .alpha = GEMM_AB[tr][0],
                           .beta = GEMM_AB[tr][1]};
            int pad = (int)(s + tr) % 2 ? 3 : 0; /* leading dimensions beyond the columns */
            g.lda = (g.ta ? g.m : g.k) + pad;
            g.ldb = (g.tb ? g.k : g.n) + pad;
            g.ldc = g.n + pad;
            gemm_case(be, g, false, pad ? " ld+3" : "");
        }
    }
    /* beta = 0 ignores C, even NaN */
    gemm_case(be, (gemm_args){.m = 17, .n = 33, .k = 65, .lda = 65, .ldb = 33, .ldc = 33, .batch = 1,
                              .alpha = 1, .beta = 0}, true, "");
    gemm_k0_cases(be, BT_F32);
    /* strided batches with gaps */
    gemm_case(be, (gemm_args){.tb = true, .m = 13, .n = 9, .k = 7, .lda = 9, .ldb = 8, .ldc = 11,
                              .sa = 13 * 9 + 5, .sb = 9 * 8 + 3, .sc = 13 * 11 + 7, .batch = 3,
                              .alpha = 0.5f, .beta = 1}, false, " batch3");
    gemm_case(be, (gemm_args){.ta = true, .m = 7, .n = 5, .k = 11, .lda = 7, .ldb = 5, .ldc = 5,
                              .sa = 77, .sb = 55, .sc = 35, .batch = 4, .alpha = 1, .beta = 0.25f},
              false, " batch4");
    /* sizes that leave partial blocks in rows and columns (the CPU backend's
     * tiles, 80x80 here, GPU work-groups) */
    padded_batch_cases(be, 70, 300, 33, 5, 3, false, " ld+5 batch2");
    /* the CPU backend's even split into 272x416 tiles (2 x 4, the last row
     * and column short) */
    if (!g_quick)
        gemm_case(be, (gemm_args){.tb = true, .m = 520, .n = 1601, .k = 9, .lda = 9, .ldb = 9,
                                  .ldc = 1601, .batch = 1, .alpha = 1, .beta = 0.5f},
                  false, " 272x416 tiles");
    /* a small C over a long k (the weight gradients): the CPU backend splits
     * k into parts of 1040, 1040, 1040 and 980 and two tiles of 48 rows, and
     * adds the parts onto C in order */
    if (!g_quick) padded_batch_cases(be, 96, 80, 4100, 3, 5, true, " k parts batch2");
    /* attention layout: heads interleaved in rows of 3H (QK^T), and P V into ctx (ldc H) */
    for (int big = 0; big < 2; big++) {
        if (big && g_quick) continue;
        int T = big ? 128 : 9, D = big ? 64 : 4, NH = big ? 12 : 3, H = D * NH;
        gemm_case(be, (gemm_args){.tb = true, .m = T, .n = T, .k = D, .lda = 3 * H, .ldb = 3 * H,
                                  .ldc = T, .sa = D, .sb = D, .sc = (long)T * T, .batch = NH,
                                  .alpha = 0.125f, .beta = 0}, false, " QK^T heads");
        gemm_case(be, (gemm_args){.m = T, .n = D, .k = T, .lda = T, .ldb = 3 * H, .ldc = H,
                                  .sa = (long)T * T, .sb = D, .sc = D, .batch = NH, .alpha = 1,
                                  .beta = 0}, false, " PV heads");
    }
    if (!g_quick) { /* BERT-base linear layers */
        gemm_case(be, (gemm_args){.m = 128, .n = 768, .k = 768, .lda = 768, .ldb = 768, .ldc = 768,
                                  .batch = 1, .alpha = 1, .beta = 0}, false, "");
        gemm_case(be, (gemm_args){.tb = true, .m = 128, .n = 768, .k = 768, .lda = 768, .ldb = 768,
                                  .ldc = 768, .batch = 1, .alpha = 1, .beta = 0}, false, "");
        gemm_case(be, (gemm_args){.ta = true, .m = 768, .n = 768, .k = 128, .lda = 768, .ldb = 768,
                                  .ldc = 768, .batch = 1, .alpha = 1, .beta = 1}, false, "");
    }
    gemm_bwd_case(be, 5, 3, 17, 1.0f);
    gemm_bwd_case(be, 17, 33, 65, 0.5f);
    if (!g_quick) gemm_bwd_case(be, 128, 768, 768, 1.0f);
}

/* gemm16: the operands rounded to bf16 / f16 (the float64 reference rounds
 * them too), fp32 accumulation: every transpose, leading dimensions beyond
 * the columns, beta = 0 over NaN, strided batches, the attention layout and a
 * BERT-base layer; operands given in 16 bits (A, B, both) at every
 * transpose, strided batches and the linear layer's weight, each also giving
 * the bits of the same values in fp32. A and B must come back unchanged. */
void test_gemm16(bt_backend *be) {
    if (!want_op("gemm16")) return;
    static const bt_dtype dts[2] = {BT_BF16, BT_F16};
    for (int d = 0; d < 2; d++) {
        const bt_dtype dt = dts[d];
        for (int tr = 0; tr < 4; tr++) {
            gemm_args g = {.ta = tr & 1, .tb = tr >> 1, .m = 17, .n = 33, .k = 65, .batch = 1,
                           .alpha = tr == 2 ? -1.5f : 1.0f, .beta = tr == 1 ? 0.75f : 0.0f,
                           .dt = dt};
            int pad = tr % 2 ? 3 : 0;
            g.lda = (g.ta ? g.m : g.k) + pad;
            g.ldb = (g.tb ? g.k : g.n) + pad;
            g.ldc = g.n + pad;
            gemm_case(be, g, false, pad ? " ld+3" : "");
            g.stored16 = 1u + (unsigned)tr % 3u; /* A, B, both */
            gemm_case(be, g, false, pad ? " ld+3" : "");
        }
        gemm_case(be, (gemm_args){.m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldc = 1,
                                  .batch = 1, .alpha = 1, .beta = 0, .dt = dt}, true, "");
        gemm_k0_cases(be, dt);
        gemm_case(be, (gemm_args){.tb = true, .m = 13, .n = 9, .k = 7, .lda = 9, .ldb = 8,
                                  .ldc = 11, .sa = 13 * 9 + 5, .sb = 9 * 8 + 3,
                                  .sc = 13 * 11 + 7, .batch = 3, .alpha = 0.5f, .beta = 1,
                                  .dt = dt}, false, " batch3");
        gemm_case(be, (gemm_args){.tb = true, .m = 13, .n = 9, .k = 7, .lda = 9, .ldb = 8,
                                  .ldc = 11, .sa = 13 * 9 + 5, .sb = 9 * 8 + 3,
                                  .sc = 13 * 11 + 7, .batch = 3, .alpha = 0.5f, .beta = 1,
                                  .dt = dt, .stored16 = BT_GEMM_A16 | BT_GEMM_B16}, false,
                  " batch3");
        const int T = 9, D = 4, NH = 3, H = D * NH;
        gemm_case(be, (gemm_args){.tb = true, .m = T, .n = T, .k = D, .lda = 3 * H,
                                  .ldb = 3 * H, .ldc = T, .sa = D, .sb = D, .sc = (long)T * T,
                                  .batch = NH, .alpha = 0.125f, .beta = 0, .dt = dt},
                  false, " QK^T heads");
        if (!g_quick)
            for (unsigned s16 = 0; s16 <= BT_GEMM_B16; s16 += BT_GEMM_B16) /* B: a weight */
                gemm_case(be, (gemm_args){.tb = true, .m = 128, .n = 768, .k = 768, .lda = 768,
                                          .ldb = 768, .ldc = 768, .batch = 1, .alpha = 1,
                                          .beta = 0, .dt = dt, .stored16 = s16}, false, "");
    }
}

/* ================= gemm_grid ================= */

typedef struct {
    gemm_args g; /* shape, dtype, stored16; its sa, sb, sc are the grid's strides */
    bt_gemm_grid grid;
} grid_args;

static void run_gemm_grid(bt_backend *be, tensor *t, void *arg, double *s) {
    (void)s;
    const grid_args *q = arg;
    const gemm_args *g = &q->g;
    be->gemm_grid(be, g->dt, g->stored16, g->ta, g->tb, g->m, g->n, g->k, g->alpha, t[0].p,
                  g->lda, t[1].p, g->ldb, g->beta, t[2].p, g->ldc, &q->grid);
}

/* Elements an operand of the grid spans. */
static size_t grid_span(int rows, int ld, long stride, long outer, const bt_gemm_grid *q) {
    return (size_t)outer * (size_t)(q->outer - 1) + gemm_span(rows, ld, stride, q->batch);
}

/* One gemm_grid call against the float64 GEMM of each matrix (operands
 * rounded to a 16-bit dtype first); C outside the matrices untouched. */
static void gemm_grid_case(bt_backend *be, gemm_args g, bt_gemm_grid q, const char *label) {
    reseed("gemm_grid", (size_t)g.m * 1009u + (size_t)g.n * 31u + (size_t)q.outer * 7u +
                            (size_t)g.ta + 2u * g.tb + 4u * g.stored16 + 16u * g.dt);
    const size_t na = grid_span(g.ta ? g.k : g.m, g.lda, q.stride_a, q.outer_a, &q),
                 nb = grid_span(g.tb ? g.n : g.k, g.ldb, q.stride_b, q.outer_b, &q),
                 nc = grid_span(g.m, g.ldc, q.stride_c, q.outer_c, &q);
    float *A = rand_floats(na, 1.0, 0.0), *B = rand_floats(nb, 1.0, 0.0), *C = rand_floats(nc, 1.0, 0.0);
    double *rA = ref_dup(A, na), *rB = ref_dup(B, nb), *rC = ref_dup(C, nc);
    round_operand(rA, na, g.dt);
    round_operand(rB, nb, g.dt);
    if (g.stored16 & BT_GEMM_A16)
        for (size_t i = 0; i < na; i++) A[i] = (float)rA[i];
    if (g.stored16 & BT_GEMM_B16)
        for (size_t i = 0; i < nb; i++) B[i] = (float)rB[i];
    double *aA = ref_abs(A, na), *aB = ref_abs(B, nb), *mC = ref_abs(C, nc);
    unsigned char *logical = ref_zalloc(nc);
    for (int o = 0; o < q.outer; o++) { /* each group: a strided batch of the reference */
        const size_t oa = (size_t)o * q.outer_a, ob = (size_t)o * q.outer_b, oc = (size_t)o * q.outer_c;
        ref_gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, rA + oa, g.lda, q.stride_a, rB + ob, g.ldb,
                 q.stride_b, g.beta, rC + oc, g.ldc, q.stride_c, q.batch);
        ref_gemm(g.ta, g.tb, g.m, g.n, g.k, fabsf(g.alpha), aA + oa, g.lda, q.stride_a, aB + ob,
                 g.ldb, q.stride_b, fabsf(g.beta), mC + oc, g.ldc, q.stride_c, q.batch);
        for (int b = 0; b < q.batch; b++)
            for (int i = 0; i < g.m; i++)
                memset(logical + oc + (size_t)b * q.stride_c + (size_t)i * g.ldc, 1, (size_t)g.n);
    }
    uint16_t *bits_a, *bits_b;
    tensor t[] = {gemm_operand("A", A, na, g.dt, g.stored16 & BT_GEMM_A16, &bits_a),
                  gemm_operand("B", B, nb, g.dt, g.stored16 & BT_GEMM_B16, &bits_b),
                  tensor_out("C", C, nc)};
    grid_args arg = {g, q};
    verdict v = v_new();
    bool c16 = false;
    if (exec_op(&v, be, t, 3, run_gemm_grid, &arg, NULL)) {
        check_c(&v, RES(t[2]), rC, mC, C, logical, nc);
        if (g.dt != BT_F32 && g.beta == 0.0f) { /* the same C in 16 bits */
            grid_args a16 = arg;
            a16.g.stored16 |= BT_GEMM_C16;
            c16 = same_bits_c16(&v, be, t, run_gemm_grid, &a16, C, RES(t[2]), logical, nc, g.dt);
        }
    }
    v_report(&v, "gemm_grid", "%s%dx%dx%d %c%c %dx%d%s%s%s%s", g.dt == BT_F16 ? "f16 " : g.dt == BT_BF16 ? "bf16 " : "",
             g.m, g.n, g.k, g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', q.outer, q.batch, label,
             g.stored16 & BT_GEMM_A16 ? " A16" : "", g.stored16 & BT_GEMM_B16 ? " B16" : "",
             c16 ? ", and C16" : "");
    tensors_free(t, 3);
    free(bits_a), free(bits_b), free(logical);
    free(A), free(B), free(C), free(rA), free(rB), free(rC), free(aA), free(aB), free(mC);
}

/* gemm_grid: the attention's GEMMs as the model calls them, B sequences
 * (outer) of NH heads (batch) of T x D in token-major rows of 3H (Q, K, V)
 * and H (the context), scores by head: Q K^T, P V into the context, P^T dC
 * and dC V^T; a grid of one group; fp32, bf16 and f16 with operands in 16 bits;
 * a grid of 51,200 matrices. */
void test_gemm_grid(bt_backend *be) {
    if (!want_op("gemm_grid")) return;
    const int B = 3, NH = 2, T = 7, D = 4, H = NH * D, TT = T * T;
    const bt_gemm_grid scores = {NH, B, D, D, TT, (long)T * 3 * H, (long)T * 3 * H, (long)NH * TT},
                       pv = {NH, B, TT, D, D, (long)NH * TT, (long)T * 3 * H, (long)T * H},
                       ptdc = {NH, B, TT, D, D, (long)NH * TT, (long)T * H, (long)T * 3 * H},
                       dcvt = {NH, B, D, D, TT, (long)T * H, (long)T * 3 * H, (long)NH * TT},
                       one = {NH, 1, D, D, TT, 0, 0, 0};
    static const bt_dtype dts[3] = {BT_F32, BT_BF16, BT_F16};
    for (int d = 0; d < 3; d++) {
        const bt_dtype dt = dts[d];
        for (unsigned s16 = 0; s16 <= (dt == BT_F32 ? 0u : 3u); s16 += dt == BT_F32 ? 1u : 3u) {
            gemm_args g = {.tb = true, .m = T, .n = T, .k = D, .lda = 3 * H, .ldb = 3 * H,
                           .ldc = T, .alpha = 0.5f, .beta = 0, .dt = dt, .stored16 = s16};
            gemm_grid_case(be, g, scores, " Q K^T");
            gemm_grid_case(be, g, one, " Q K^T, one group");
            g = (gemm_args){.m = T, .n = D, .k = T, .lda = T, .ldb = 3 * H, .ldc = H, .alpha = 1,
                            .beta = 0, .dt = dt, .stored16 = s16};
            gemm_grid_case(be, g, pv, " P V");
            g = (gemm_args){.ta = true, .m = T, .n = D, .k = T, .lda = T, .ldb = H,
                            .ldc = 3 * H, .alpha = 1, .beta = 0.5f, .dt = dt, .stored16 = s16};
            gemm_grid_case(be, g, ptdc, " P^T dC");
            g = (gemm_args){.tb = true, .m = T, .n = T, .k = D, .lda = H, .ldb = 3 * H,
                            .ldc = T, .alpha = -1, .beta = 0, .dt = dt, .stored16 = s16};
            gemm_grid_case(be, g, dcvt, " dC V^T");
        }
    }
    /* 51,200 1x1 matrices: more addresses (1.2 MB) than CUDA's first arena holds.
     * A backend that loops over the grid (bt_gemm_grid_loop) has no arena: with
     * --quick it is left out there (a minute of Oclgrind's time for 200 strided
     * GEMMs like those above) */
    if (g_quick && be->gemm_grid == bt_gemm_grid_loop) return;
    const bt_gemm_grid many = {200, 256, 1, 1, 1, 200, 200, 200};
    gemm_grid_case(be, (gemm_args){.m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldc = 1,
                                   .alpha = 1, .beta = 1, .dt = BT_F32}, many, " 51200 matrices");
}

/* ================= bias_add / bias_grad ================= */

void run_bias_add(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    be->bias_add(be, t[0].p, t[1].p, ((rows_cols_args *)a)->rows, ((rows_cols_args *)a)->cols,
                 BT_F32, BT_NO_PTR, true);
}
/* bias_grad's shape, the storage dtype it rounds dy to as it reads it and
 * dy's own dtype (16 bits: the values of a gradient's copy) */
typedef struct {
    rows_cols_args q;
    bt_dtype round16, dy_dtype;
} bias_grad_args;
static void run_bias_grad(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const bias_grad_args *g = a;
    be->bias_grad(be, t[0].p, t[1].p, g->q.rows, g->q.cols, g->round16, g->dy_dtype);
}

typedef struct {
    int rows, cols;
    const double *y;
    double *bias;
} bias_fd_ctx;
static void fwd_bias(void *c, double *out) {
    bias_fd_ctx *x = c;
    memcpy(out, x->y, (size_t)x->rows * x->cols * sizeof *out);
    ref_bias_add(out, x->bias, x->rows, x->cols);
}

/* bias_grad of dy = y (rows x cols) into db against the float64 reference
 * (ry, rdb: y and db in double; rdb is updated). */
static void check_bias_grad(bt_backend *be, rows_cols_args q, const float *y, const float *db,
                            const double *ry, double *rdb) {
    const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols;
    ref_bias_grad(rdb, ry, q.rows, q.cols);
    double *mag = ref_abs(db, c), *ay = ref_abs(y, n);
    ref_bias_grad(mag, ay, q.rows, q.cols);
    tensor t[] = {tensor_out("dbias", db, c), tensor_in("dy", y, n)};
    verdict v = v_new();
    bias_grad_args g = {q, BT_F32, BT_F32};
    if (exec_op(&v, be, t, 2, run_bias_grad, &g, NULL))
        v_nmse(&v, "dbias", RES(t[0]), rdb, mag, c, THR_MATH);
    v_report(&v, "bias_grad", "%dx%d +=", q.rows, q.cols);
    tensors_free(t, 2);
    free(mag), free(ay);
}

/* bias_grad rounding dy to bf16 and to f16 storage as it reads it: the bits
 * of bias_grad of dy rounded first (half.h's rounding), and within the
 * rounding of the float64 sums of the rounded dy; and bias_grad of the
 * rounded dy given in 16 bits (dy_dtype): the same bits. */
static void check_bias_grad_rounded(bt_backend *be, rows_cols_args q, const float *y,
                                    const float *db) {
    const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols;
    float *yr = malloc(n * sizeof *yr);
    uint16_t *y16 = malloc(n * sizeof *y16);
    if (!yr || !y16) exit(99);
    for (int k = 0; k < 2; k++) {
        const bt_dtype dt = k ? BT_F16 : BT_BF16;
        for (size_t i = 0; i < n; i++) {
            yr[i] = round16_host(y[i], dt);
            y16[i] = dt == BT_F16 ? ref_f16_bits(yr[i]) : ref_bf16_bits(yr[i]);
        }
        double *rdb = ref_dup(db, c), *ry = ref_dup(yr, n), *mag = ref_abs(db, c);
        double *ay = ref_abs(yr, n);
        ref_bias_grad(rdb, ry, q.rows, q.cols);
        ref_bias_grad(mag, ay, q.rows, q.cols);
        tensor t[] = {tensor_out("dbias", db, c), tensor_in("dy", y, n)};
        tensor u[] = {tensor_out("dbias", db, c), tensor_in("dy rounded", yr, n)};
        tensor h[] = {tensor_out("dbias", db, c), tensor_16bit("dy in 16 bits", y16, n, false)};
        verdict v = v_new();
        bias_grad_args g = {q, dt, BT_F32}, g32 = {q, BT_F32, BT_F32}, g16 = {q, BT_F32, dt};
        if (exec_op(&v, be, t, 2, run_bias_grad, &g, NULL) &&
            exec_op(&v, be, u, 2, run_bias_grad, &g32, NULL) &&
            exec_op(&v, be, h, 2, run_bias_grad, &g16, NULL)) {
            v_nmse(&v, "dbias", RES(t[0]), rdb, mag, c, THR_MATH);
            v_bits(&v, "dbias vs dy rounded first", RES(t[0]), RES(u[0]), c);
            v_bits(&v, "dbias from dy in 16 bits", RES(h[0]), RES(u[0]), c);
        }
        v_report(&v, "bias_grad", "%dx%d += dy rounded to %s as read, and given in %s", q.rows,
                 q.cols, dt == BT_BF16 ? "bf16" : "f16", dt == BT_BF16 ? "bf16" : "f16");
        tensors_free(t, 2);
        tensors_free(u, 2);
        tensors_free(h, 2);
        free(rdb), free(ry), free(mag), free(ay);
    }
    free(yr), free(y16);
}

/* bias_grad past the devices' one-pass limit (64 rows): whole and partial
 * row chunks, up to a BERT-base batch of tokens. */
static void test_bias_grad_chunks(bt_backend *be) {
    static const matrix_shape shapes[] = {{65, 3, 1, 0}, {200, 37, 1, 0}, {4100, 768, 0, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (skip_shape(shapes[si].quick)) continue;
        reseed("bias_grad_chunks", si);
        rows_cols_args q = {shapes[si].r, shapes[si].c};
        const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols;
        float *y = rand_floats(n, 1, 0), *db = rand_floats(c, 1, 0);
        double *ry = ref_dup(y, n), *rdb = ref_dup(db, c);
        check_bias_grad_rounded(be, q, y, db);
        check_bias_grad(be, q, y, db, ry, rdb);
        free(y), free(db), free(ry), free(rdb);
    }
}

void test_bias(bt_backend *be) {
    if (want_op("bias_grad")) test_bias_grad_chunks(be);
    for (size_t si = 0; si < sizeof MATRIX_SHAPES / sizeof *MATRIX_SHAPES; si++) {
        if (skip_shape(MATRIX_SHAPES[si].quick)) continue;
        reseed("bias", si);
        rows_cols_args q = {MATRIX_SHAPES[si].r, MATRIX_SHAPES[si].c};
        size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols;
        float *y = rand_floats(n, 1, 0), *bias = rand_floats(c, 1, 0), *db = rand_floats(c, 1, 0);
        double *ry = ref_dup(y, n), *rbias = ref_dup(bias, c), *rdb = ref_dup(db, c);
        if (want_op("bias_add")) {
            double *r = ref_dup(y, n), *mag = ref_abs(y, n), *ab = ref_abs(bias, c);
            ref_bias_add(r, rbias, q.rows, q.cols);
            ref_bias_add(mag, ab, q.rows, q.cols);
            tensor t[] = {tensor_out("y", y, n), tensor_in("bias", bias, c)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 2, run_bias_add, &q, NULL))
                v_nmse(&v, "y", RES(t[0]), r, mag, n, THR_ROUND);
            v_report(&v, "bias_add", "%dx%d", q.rows, q.cols);
            tensors_free(t, 2);
            free(r), free(mag), free(ab);
        }
        if (want_op("bias_grad")) { /* dy = y; accumulates into a nonzero dbias */
            check_bias_grad_rounded(be, q, y, db);
            check_bias_grad(be, q, y, db, ry, rdb);
            if (g_check_references) { /* bias_grad is the adjoint of bias_add */
                verdict f = v_new();
                double *an = ref_zalloc(c * sizeof *an), *w = ref_dup(bias, c);
                double *dy = ref_alloc(n * sizeof *dy);
                for (size_t i = 0; i < n; i++) dy[i] = ref_normal(&g_fd_rng);
                ref_bias_grad(an, dy, q.rows, q.cols);
                bias_fd_ctx ctx = {q.rows, q.cols, ry, w};
                for (int s = 0; s < 3; s++) {
                    size_t idx = (size_t)ref_int(&g_fd_rng, q.cols);
                    double fd = ref_fd(fwd_bias, &ctx, n, dy, w, idx, FD_H);
                    fd_point(&f, "dbias", fd, an[idx], 1e-4 * max_abs(an, c));
                }
                FD_REPORT(f, "bias_grad", "%dx%d vs FD of bias_add", q.rows, q.cols);
                free(an), free(w), free(dy);
            }
        }
        free(y), free(bias), free(db), free(ry), free(rbias), free(rdb);
    }
}
