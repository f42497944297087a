/* Conformance checks of the GEMMs with an epilogue (backend.h's gemm16_bias
 * and gemm16_bias_grad): a linear layer's forward with its bias, and its
 * weight gradient with its bias gradient, against float64 loops. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bt_dtype dt;
    unsigned stored16; /* the operands given in 16 bits (BT_GEMM_A16, BT_GEMM_B16) */
    int m, n, k;
} epilogue_args;

/* An operand: x's values rounded to dt in place, then given in 16 bits
 * where half, else in fp32 (gemm_operand). */
static tensor operand(const char *name, float *x, size_t n, bt_dtype dt, bool half,
                      uint16_t **bits) {
    for (size_t i = 0; i < n; i++) x[i] = round16_host(x[i], dt);
    return gemm_operand(name, x, n, dt, half, bits);
}

/* ---- gemm16_bias ---- */

static void run_gemm16_bias(bt_backend *be, tensor *t, void *arg, double *s) {
    (void)s;
    const epilogue_args *g = arg; /* t: A (m, k), B (n, k), bias (n), bias16 (n), C16 (m, n) */
    be->gemm16_bias(be, g->dt, g->stored16, g->m, g->n, g->k, t[0].p, t[1].p, t[2].p, t[3].p,
                    t[4].p);
}

/* C16 = A B^T + bias against float64 (the operands and the bias rounded to
 * dt, the sum unrounded); C16 starts as NaNs, all overwritten. */
static void bias_case(bt_backend *be, epilogue_args g) {
    reseed("gemm16_bias", (size_t)g.m * 1000003u + (size_t)g.n * 1009u + (size_t)g.k * 7u +
                              g.stored16 + 8u * g.dt);
    const size_t na = (size_t)g.m * g.k, nb = (size_t)g.n * g.k, nc = (size_t)g.m * g.n;
    float *A = rand_floats(na, 1.0, 0.0), *B = rand_floats(nb, 0.5, 0.0);
    float *bias = rand_floats((size_t)g.n, 2.0, 0.0);
    uint16_t *bits_a, *bits_b, *bias16 = ref_alloc((size_t)g.n * 2), *c16 = ref_alloc(nc * 2);
    for (int j = 0; j < g.n; j++) bias16[j] = bits16_of(bias[j], g.dt);
    for (size_t i = 0; i < nc; i++) c16[i] = g.dt == BT_BF16 ? 0x7fc0 : 0x7e00; /* NaN */
    tensor t[] = {operand("A", A, na, g.dt, g.stored16 & BT_GEMM_A16, &bits_a),
                  operand("B", B, nb, g.dt, g.stored16 & BT_GEMM_B16, &bits_b),
                  tensor_in("bias", bias, (size_t)g.n),
                  tensor_16bit("bias16", bias16, (size_t)g.n, false),
                  tensor_16bit("C16", c16, nc, true)};
    double *rA = ref_dup(A, na), *rB = ref_dup(B, nb), *rb = ref_dup(bias, (size_t)g.n);
    round_operand(rb, (size_t)g.n, g.dt);
    double *rC = ref_alloc(nc * sizeof(double)), *mC = ref_alloc(nc * sizeof(double));
    double *aA = ref_abs(A, na), *aB = ref_abs(B, nb);
    for (int i = 0; i < g.m; i++)
        for (int j = 0; j < g.n; j++) {
            rC[(size_t)i * g.n + j] = rb[j];
            mC[(size_t)i * g.n + j] = fabs(rb[j]);
        }
    ref_gemm(false, true, g.m, g.n, g.k, 1.0, rA, g.k, 0, rB, g.k, 0, 1.0, rC, g.n, 0, 1);
    ref_gemm(false, true, g.m, g.n, g.k, 1.0, aA, g.k, 0, aB, g.k, 0, 1.0, mC, g.n, 0, 1);
    verdict v = v_new();
    if (exec_op(&v, be, t, 5, run_gemm16_bias, &g, NULL)) {
        float *out = ref_alloc(nc * sizeof(float));
        for (size_t i = 0; i < nc; i++) out[i] = widen16(((const uint16_t *)t[4].res)[i], g.dt);
        v_nmse(&v, "C16", out, rC, mC, nc, round16_thr(g.dt));
        free(out);
    }
    v_report(&v, "gemm16_bias", "%s %dx%dx%d%s%s", g.dt == BT_BF16 ? "bf16" : "f16", g.m, g.n,
             g.k, g.stored16 & BT_GEMM_A16 ? " A16" : "", g.stored16 & BT_GEMM_B16 ? " B16" : "");
    tensors_free(t, 5);
    free(bits_a), free(bits_b), free(bias16), free(c16);
    free(A), free(B), free(bias), free(rA), free(rB), free(rb), free(rC), free(mC), free(aA),
        free(aB);
}

/* ---- gemm16_bias_grad ---- */

static void run_gemm16_bias_grad(bt_backend *be, tensor *t, void *arg, double *s) {
    (void)s;
    const epilogue_args *g = arg; /* t: A (k, m) 16-bit, B (k, n), C (m, n), dbias (m) */
    be->gemm16_bias_grad(be, g->dt, g->stored16, g->m, g->n, g->k, t[0].p, t[1].p, t[2].p,
                         t[3].p);
}

/* C += A^T B and dbias += A's column sums against float64, onto random
 * values (both accumulate). */
static void bias_grad_case(bt_backend *be, epilogue_args g) {
    reseed("gemm16_bias_grad", (size_t)g.m * 1000003u + (size_t)g.n * 1009u +
                                   (size_t)g.k * 7u + g.stored16 + 8u * g.dt);
    const size_t na = (size_t)g.k * g.m, nb = (size_t)g.k * g.n, nc = (size_t)g.m * g.n;
    float *A = rand_floats(na, 1.0, 0.25), *B = rand_floats(nb, 1.0, 0.0);
    float *C = rand_floats(nc, 1.0, 0.0), *db = rand_floats((size_t)g.m, 1.0, 0.0);
    uint16_t *bits_a, *bits_b;
    tensor t[] = {operand("A", A, na, g.dt, true, &bits_a),
                  operand("B", B, nb, g.dt, g.stored16 & BT_GEMM_B16, &bits_b),
                  tensor_out("C", C, nc), tensor_out("dbias", db, (size_t)g.m)};
    double *rA = ref_dup(A, na), *rB = ref_dup(B, nb), *rC = ref_dup(C, nc),
           *rdb = ref_dup(db, (size_t)g.m);
    double *aA = ref_abs(A, na), *aB = ref_abs(B, nb), *mC = ref_abs(C, nc),
           *mdb = ref_abs(db, (size_t)g.m);
    ref_gemm(true, false, g.m, g.n, g.k, 1.0, rA, g.m, 0, rB, g.n, 0, 1.0, rC, g.n, 0, 1);
    ref_gemm(true, false, g.m, g.n, g.k, 1.0, aA, g.m, 0, aB, g.n, 0, 1.0, mC, g.n, 0, 1);
    for (int r = 0; r < g.k; r++)
        for (int i = 0; i < g.m; i++) {
            rdb[i] += rA[(size_t)r * g.m + i];
            mdb[i] += aA[(size_t)r * g.m + i];
        }
    verdict v = v_new();
    if (exec_op(&v, be, t, 4, run_gemm16_bias_grad, &g, NULL)) {
        v_nmse(&v, "C", RES(t[2]), rC, mC, nc, THR_MATH);
        v_nmse(&v, "dbias", RES(t[3]), rdb, mdb, (size_t)g.m, THR_MATH);
    }
    v_report(&v, "gemm16_bias_grad", "%s %dx%dx%d%s", g.dt == BT_BF16 ? "bf16" : "f16", g.m,
             g.n, g.k, g.stored16 & BT_GEMM_B16 ? " B16" : "");
    tensors_free(t, 4);
    free(bits_a), free(bits_b);
    free(A), free(B), free(C), free(db), free(rA), free(rB), free(rC), free(rdb), free(aA),
        free(aB), free(mC), free(mdb);
}

/* Both ops in bf16 and f16, with the operands in 16 bits and in fp32: a
 * one-element GEMM, odd sizes, and (not --quick) a BERT-base layer's
 * (rows 128: the forward's QKV projection, the gradient of its output
 * projection). */
void test_gemm16_epilogues(bt_backend *be) {
    static const bt_dtype dts[2] = {BT_BF16, BT_F16};
    static const struct {
        int m, n, k;
        bool quick;
    } shapes[] = {{1, 1, 1, true}, {17, 33, 65, true}, {5, 130, 9, true}, {128, 768, 768, false}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (skip_shape(shapes[s].quick)) continue;
            for (unsigned s16 = 0; s16 <= (BT_GEMM_A16 | BT_GEMM_B16); s16 += 3) {
                const epilogue_args g = {dts[d], s16, shapes[s].m, shapes[s].n, shapes[s].k};
                if (want_op("gemm16_bias")) bias_case(be, g);
                const epilogue_args w = {dts[d], s16 & BT_GEMM_B16, shapes[s].n, shapes[s].k,
                                         shapes[s].m}; /* W's gradient (n, k) over m rows */
                if (want_op("gemm16_bias_grad")) bias_grad_case(be, w);
            }
        }
}
