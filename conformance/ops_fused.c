/* Conformance checks of the fused ops (bias_gelu_fwd/bwd, bias_dropout_add,
 * residual_layernorm_fwd, softmax_dropout_fwd, dropout_softmax_bwd, and
 * bias_add's storage rounding with its 16-bit copy). Each
 * case runs the fused op and, on fresh copies of the same inputs, the
 * unfused ops it replaces on the same backend: the outputs must be the same
 * bits (the contract in backend.h), and close to a float64 reference built
 * from ref.c's functions and philox.h's dropout draws. */
#include "backends/common/half.h"
#include "backends/philox.h"
#include "fused_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================= bias + GELU ================= */

typedef struct {
    const float *y, *bias, *dout, *x, *db;
    size_t n, c;
    const uint16_t *x16; /* bias_gelu_bwd: x in 16 bits (the stash's copy), or NULL */
} gelu_inputs;

static void make_bias_gelu_fwd(tensor *t, void *in) {
    const gelu_inputs *g = in; /* out, y, bias, out16, y16 */
    t[0] = tensor_out("out", NULL, g->n);
    t[1] = tensor_out("y", g->y, g->n);
    t[2] = tensor_in("bias", g->bias, g->c);
    t[3] = tensor_16bit("out16", NULL, g->n, true);
    t[4] = tensor_16bit("y16", NULL, g->n, true);
}
static void run_bias_gelu_fwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    be->bias_gelu_fwd(be, f->copy_only ? BT_NO_PTR : t[0].p, t[1].p, t[2].p, f->rows, f->cols,
                      f->round16, f->copies16 ? t[3].p : BT_NO_PTR,
                      f->copies16 ? t[4].p : BT_NO_PTR, !f->copy_only);
}
static void run_bias_gelu_fwd_unfused(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    const size_t n = (size_t)f->rows * f->cols;
    be->bias_add(be, t[1].p, t[2].p, f->rows, f->cols, BT_F32, BT_NO_PTR, true);
    if (f->round16 != BT_F32) be->round16(be, t[1].p, f->round16, n);
    be->gelu_fwd(be, t[0].p, t[1].p, n);
    if (f->round16 != BT_F32) be->round16(be, t[0].p, f->round16, n);
    if (f->copies16) {
        be->cast(be, t[3].p, f->round16, t[0].p, BT_F32, n);
        be->cast(be, t[4].p, f->round16, t[1].p, BT_F32, n);
    }
}

static void make_bias_gelu_bwd(tensor *t, void *in) {
    const gelu_inputs *g = in; /* dout (dx when in place), dbias, x, dx; x in 16 bits and
                                  widened (the unfused ops' cast); dx's 16-bit copy */
    t[0] = tensor_out("dout", g->dout, g->n);
    t[1] = tensor_out("dbias", g->db, g->c);
    t[2] = tensor_in("x", g->x, g->n);
    t[3] = tensor_out("dx", NULL, g->n);
    t[4] = tensor_16bit("x16", g->x16, g->x16 ? g->n : 0, false);
    t[5] = tensor_out("x widened", NULL, g->x16 ? g->n : 0);
    t[6] = tensor_16bit("dx16", NULL, g->n, true);
}
static void run_bias_gelu_bwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    const bool x16 = t[4].n > 0;
    be->bias_gelu_bwd(be, f->inplace ? t[0].p : t[3].p, t[1].p, t[0].p, x16 ? t[4].p : t[2].p,
                      f->rows, f->cols, f->round16, x16 ? f->round16 : BT_F32, BT_F32,
                      f->copies16 ? t[6].p : BT_NO_PTR, !f->copy_only);
}
static void run_bias_gelu_bwd_unfused(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    bt_ptr dx = f->inplace ? t[0].p : t[3].p, x = t[2].p;
    if (t[4].n > 0) { /* the 16-bit x widened, as the unstash did */
        be->cast(be, t[5].p, BT_F32, t[4].p, f->round16, (size_t)f->rows * f->cols);
        x = t[5].p;
    }
    if (f->round16 != BT_F32) be->round16(be, t[0].p, f->round16, (size_t)f->rows * f->cols);
    be->gelu_bwd(be, dx, t[0].p, x, (size_t)f->rows * f->cols);
    if (f->round16 != BT_F32) be->round16(be, dx, f->round16, (size_t)f->rows * f->cols);
    be->bias_grad(be, t[1].p, dx, f->rows, f->cols, BT_F32, BT_F32);
    if (f->copies16) be->cast(be, t[6].p, f->round16, dx, BT_F32, (size_t)f->rows * f->cols);
}

/* bias_gelu_fwd without rounding and rounded to bf16 and f16 storage, the
 * last two also with the 16-bit copies of out and y, with and without the
 * fp32 out and y kept (then their copies alone: the unfused values' bits in
 * 16). The rounded
 * pre-activation's reference is the fp32 sum (the op's one rounding, exact
 * in float64) rounded by half.h, exactly; GELU's reference is taken at it in
 * float64 (within the storage's rounding: out is rounded too); a copy must
 * be half.h's conversion of its output. Against the unfused ops too (bits,
 * out rounded by round16; the copies by cast). */
static void bias_gelu_fwd_cases(bt_backend *be, fused_args *a, gelu_inputs *g) {
    static const bt_dtype rounds[] = {BT_F32, BT_BF16, BT_F16, BT_BF16, BT_F16, BT_BF16, BT_F16};
    const size_t n = g->n, c = g->c;
    double *ry = ref_alloc(n * 8), *my = ref_abs(g->y, n), *ro = ref_alloc(n * 8);
    for (size_t i = 0; i < n; i++) my[i] += fabs(g->bias[i % c]);
    for (int k = 0; k < 7; k++) {
        const bt_dtype dt = rounds[k];
        for (size_t i = 0; i < n; i++) {
            ry[i] = dt == BT_F32 ? (double)g->y[i] + g->bias[i % c]
                                 : (double)round16_host(g->y[i] + g->bias[i % c], dt);
            ro[i] = ref_gelu(ry[i]);
        }
        a->round16 = dt;
        a->copies16 = k >= 3;
        a->copy_only = k >= 5;
        fused_out outs[] = {{1, ry, my, THR_ROUND, a->copies16 ? 4 : 0, a->copy_only},
                            {0, ro, NULL, round16_thr(dt), a->copies16 ? 3 : 0, a->copy_only}};
        char shape[80];
        snprintf(shape, sizeof shape, "%dx%d%s%s", a->rows, a->cols, storage_suffix(dt),
                 a->copy_only ? ", 16-bit copies, no fp32 out or y"
                              : a->copies16 ? ", 16-bit copies" : "");
        fused_case(be, "bias_gelu_fwd", make_bias_gelu_fwd, g, 5, run_bias_gelu_fwd,
                   run_bias_gelu_fwd_unfused, a, outs, 2, shape);
    }
    a->round16 = BT_F32;
    a->copies16 = a->copy_only = false;
    free(ry), free(my), free(ro);
}

/* bias_gelu_fwd of a pre-activation given in 16 bits (y absent: a biased
 * 16-bit GEMM's output), and gelu_fwd on its values widened: t[0] the
 * 16-bit pre-activation (widened: fp32), t[1] bias, t[2] out, t[3] out16. */
typedef struct {
    bt_dtype dt;
    int rows, cols;
    bool kept; /* out given besides out16 */
} gelu_given16_args;
static void run_gelu_given16(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const gelu_given16_args *q = a;
    be->bias_gelu_fwd(be, q->kept ? t[2].p : BT_NO_PTR, BT_NO_PTR, t[1].p, q->rows, q->cols,
                      q->dt, t[3].p, t[0].p, false);
}
static void run_gelu_widened(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const gelu_given16_args *q = a;
    be->gelu_fwd(be, t[2].p, t[0].p, (size_t)q->rows * q->cols);
    be->round16(be, t[2].p, q->dt, (size_t)q->rows * q->cols);
}

/* bias_gelu_fwd with y absent and the pre-activation in y16 (bf16, f16;
 * out kept and not): out must be gelu_fwd's bits on y16's values widened
 * then rounded by round16, and within the rounding's bound of float64 GELU
 * at them; out16 cast's bits of those;
 * y16 and the bias come back unchanged (exec_op). */
static void bias_gelu_given16_cases(bt_backend *be, const fused_args *a, const gelu_inputs *g) {
    const size_t n = g->n;
    uint16_t *y16 = malloc(n * 2);
    float *wide = malloc(n * sizeof *wide);
    double *ref = ref_alloc(n * 8);
    if (!y16 || !wide) exit(99);
    for (int k = 0; k < 4; k++) {
        gelu_given16_args q = {k & 1 ? BT_F16 : BT_BF16, a->rows, a->cols, k < 2};
        for (size_t i = 0; i < n; i++) {
            y16[i] = bits16_of(g->y[i] + g->bias[i % g->c], q.dt);
            wide[i] = widen16(y16[i], q.dt);
            ref[i] = ref_gelu((double)wide[i]);
        }
        tensor t[] = {tensor_16bit("y16", y16, n, false), tensor_in("bias", g->bias, g->c),
                      tensor_out("out", NULL, n), tensor_16bit("out16", NULL, n, true)};
        tensor u[] = {tensor_in("y widened", wide, n), tensor_in("bias", g->bias, g->c),
                      tensor_out("out", NULL, n), tensor_16bit("out16", NULL, 0, true)};
        verdict v = v_new();
        if (exec_op(&v, be, t, 4, run_gelu_given16, &q, NULL) &&
            exec_op(&v, be, u, 4, run_gelu_widened, &q, NULL)) {
            if (q.kept) {
                v_nmse(&v, "out", RES(t[2]), ref, NULL, n, round16_thr(q.dt));
                v_bits(&v, "out vs gelu_fwd, round16", RES(t[2]), RES(u[2]), n);
            }
            v_bits16_of(&v, "out16 vs gelu_fwd", t[3].res, RES(u[2]), n, q.dt);
        }
        v_report(&v, "bias_gelu_fwd", "%dx%d, y given in %s%s", a->rows, a->cols,
                 q.dt == BT_BF16 ? "bf16" : "f16", q.kept ? "" : ", out16 alone");
        tensors_free(t, 4);
        tensors_free(u, 4);
    }
    free(y16), free(wide), free(ref);
}

/* bias_add with its rounding and 16-bit copy (the model's linear layers
 * with 16-bit storage): y then y16, against bias_add, round16 and cast. */
static void make_bias_add16(tensor *t, void *in) {
    const gelu_inputs *g = in;
    t[0] = tensor_out("y", g->y, g->n);
    t[1] = tensor_in("bias", g->bias, g->c);
    t[2] = tensor_16bit("y16", NULL, g->n, true);
}
static void run_bias_add16(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    be->bias_add(be, t[0].p, t[1].p, f->rows, f->cols, f->round16,
                 f->copies16 ? t[2].p : BT_NO_PTR, !f->copy_only);
}
static void run_bias_add16_unfused(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    const size_t n = (size_t)f->rows * f->cols;
    be->bias_add(be, t[0].p, t[1].p, f->rows, f->cols, BT_F32, BT_NO_PTR, true);
    if (f->round16 != BT_F32) be->round16(be, t[0].p, f->round16, n);
    if (f->copies16) be->cast(be, t[2].p, f->round16, t[0].p, BT_F32, n);
}

static void run_bias_broadcast16(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    be->bias_add(be, BT_NO_PTR, t[0].p, f->rows, f->cols, f->round16, t[1].p, false);
}

/* bias_add of a zero y (y's buf NULL) into bf16 and f16 copies: every row of
 * y16 must be cast's bits of 0 + bias (the C a biased 16-bit GEMM adds its
 * product to); the bias comes back unchanged (exec_op). */
static void bias_broadcast16_cases(bt_backend *be, fused_args *a, const gelu_inputs *g) {
    float *want = malloc(g->n * sizeof *want);
    if (!want) exit(99);
    for (size_t i = 0; i < g->n; i++) want[i] = 0.0f + g->bias[i % g->c];
    for (int k = 0; k < 2; k++) {
        a->round16 = k ? BT_F16 : BT_BF16;
        tensor t[] = {tensor_in("bias", g->bias, g->c), tensor_16bit("y16", NULL, g->n, true)};
        verdict v = v_new();
        if (exec_op(&v, be, t, 2, run_bias_broadcast16, a, NULL))
            v_bits16_of(&v, "y16", t[1].res, want, g->n, a->round16);
        v_report(&v, "bias_add", "%dx%d%s, y zero: the bias broadcast in 16 bits",
                 a->rows, a->cols, storage_suffix(a->round16));
        tensors_free(t, 2);
    }
    a->round16 = BT_F32;
    free(want);
}

/* bias_add rounded to bf16 and f16 storage, then also with y's 16-bit
 * copy, then with the copy alone (y not kept): the rounded sum's reference
 * is the fp32 sum (exact in float64) rounded by half.h, exactly; a copy
 * must be half.h's conversion of y. Against the unfused ops' bits too. */
static void bias_add16_cases(bt_backend *be, fused_args *a, gelu_inputs *g) {
    static const bt_dtype rounds[] = {BT_BF16, BT_F16, BT_BF16, BT_F16, BT_BF16, BT_F16};
    const size_t n = g->n, c = g->c;
    double *ry = ref_alloc(n * 8), *my = ref_abs(g->y, n);
    for (size_t i = 0; i < n; i++) my[i] += fabs(g->bias[i % c]);
    for (int k = 0; k < 6; k++) {
        const bt_dtype dt = rounds[k];
        for (size_t i = 0; i < n; i++) ry[i] = (double)round16_host(g->y[i] + g->bias[i % c], dt);
        a->round16 = dt;
        a->copies16 = k >= 2;
        a->copy_only = k >= 4;
        fused_out outs[] = {{0, ry, my, THR_ROUND, a->copies16 ? 2 : 0, a->copy_only}};
        char shape[80];
        snprintf(shape, sizeof shape, "%dx%d%s%s", a->rows, a->cols, storage_suffix(dt),
                 a->copy_only ? ", 16-bit copy, y not kept" : a->copies16 ? ", 16-bit copy" : "");
        fused_case(be, "bias_add", make_bias_add16, g, 3, run_bias_add16, run_bias_add16_unfused,
                   a, outs, 1, shape);
    }
    a->round16 = BT_F32;
    a->copies16 = a->copy_only = false;
    free(ry), free(my);
}

/* bias_gelu_bwd with dout in 16 bits (dt; a GEMM's 16-bit result, dx
 * apart) against the op given dout's values widened: run with the tensors
 * dx, dbias, dout (16 bits or widened), x, dx16. */
typedef struct {
    bt_dtype dt, dout_dtype;
    int rows, cols;
    bool kept;
} gelu_dout16_args;
static void run_bias_gelu_bwd_dout16(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const gelu_dout16_args *q = a;
    be->bias_gelu_bwd(be, t[0].p, t[1].p, t[2].p, t[3].p, q->rows, q->cols, q->dt, BT_F32,
                      q->dout_dtype, t[4].p, q->kept);
}

/* bias_gelu_bwd given dout in bf16 and in f16, dx kept and not: dbias, dx16
 * and (kept) dx have the bits of the op given the same values in fp32. */
static void bias_gelu_bwd_dout16_cases(bt_backend *be, const fused_args *a,
                                       const gelu_inputs *g) {
    const size_t n = g->n, c = g->c;
    uint16_t *d16 = malloc(n * 2);
    float *dw = malloc(n * 4);
    if (!d16 || !dw) exit(99);
    for (int k = 0; k < 4; k++) {
        const bt_dtype dt = k & 1 ? BT_F16 : BT_BF16;
        for (size_t i = 0; i < n; i++) {
            d16[i] = bits16_of(g->dout[i], dt);
            dw[i] = widen16(d16[i], dt);
        }
        gelu_dout16_args q = {dt, dt, a->rows, a->cols, k < 2}, q32 = q;
        q32.dout_dtype = BT_F32;
        tensor t[] = {tensor_out("dx", NULL, n), tensor_out("dbias", g->db, c),
                      tensor_16bit("dout16", d16, n, false), tensor_in("x", g->x, n),
                      tensor_16bit("dx16", NULL, n, true)};
        tensor u[5];
        memcpy(u, t, sizeof u);
        u[2] = tensor_in("dout widened", dw, n);
        verdict v = v_new();
        if (exec_op(&v, be, t, 5, run_bias_gelu_bwd_dout16, &q, NULL) &&
            exec_op(&v, be, u, 5, run_bias_gelu_bwd_dout16, &q32, NULL)) {
            if (q.kept) v_bits(&v, "dx vs dout widened", RES(t[0]), RES(u[0]), n);
            v_bits(&v, "dbias vs dout widened", RES(t[1]), RES(u[1]), c);
            v_bits16(&v, "dx16 vs dout widened", t[4].res, u[4].res, n);
        }
        v_report(&v, "bias_gelu_bwd", "%dx%d +=, dout in %s, dx's 16-bit copy%s", a->rows,
                 a->cols, dt == BT_BF16 ? "bf16" : "f16", q.kept ? "" : " alone");
        tensors_free(t, 5);
        tensors_free(u, 5);
    }
    free(d16), free(dw);
}

static void bias_gelu_cases(bt_backend *be, int si, fused_args a) {
    reseed("bias_gelu", (size_t)si);
    const size_t n = (size_t)a.rows * a.cols, c = (size_t)a.cols;
    gelu_inputs g = {rand_floats(n, 1.5, 0), rand_floats(c, 0.5, 0), rand_floats(n, 1, 0),
                     rand_floats(n, 1.5, 0), rand_floats(c, 1, 0), n, c, NULL};
    char shape[96];
    if (want_op("bias_gelu_fwd")) bias_gelu_fwd_cases(be, &a, &g);
    if (want_op("bias_gelu_fwd")) bias_gelu_given16_cases(be, &a, &g);
    if (want_op("bias_add")) bias_add16_cases(be, &a, &g);
    if (want_op("bias_add")) bias_broadcast16_cases(be, &a, &g);
    /* in place in fp32, out of place rounded to bf16 and to f16 (against the
     * unrounded reference within the rounding, and the unfused ops' bits),
     * the last two with x in 16 bits (the stash's copy; the reference takes
     * its value, the unfused ops widen it with cast) and dx's 16-bit copy
     * (half.h's conversion of dx, and the unfused ops' cast), the last two of
     * them in place with dx not kept (the copy alone checked, as the model
     * runs it) */
    static const bt_dtype rounds[] = {BT_F32,  BT_F32, BT_BF16, BT_F16,
                                      BT_BF16, BT_F16, BT_BF16, BT_F16};
    uint16_t *x16 = malloc(n * sizeof *x16);
    if (!x16) exit(99);
    for (int k = 0; k < 8 && want_op("bias_gelu_bwd"); k++) {
        const int inpl = k == 1 || k >= 6;
        const double thr = round16_thr(rounds[k]);
        a.round16 = rounds[k];
        g.x16 = k >= 4 ? x16 : NULL;
        a.copies16 = k >= 4;
        a.copy_only = k >= 6;
        for (size_t i = 0; g.x16 && i < n; i++) x16[i] = bits16_of(g.x[i], a.round16);
        double *rdx = ref_alloc(n * 8), *rdb = ref_dup(g.db, c), *mdb = ref_abs(g.db, c);
        for (size_t i = 0; i < n; i++) { /* dout rounded as the op reads it (exact) */
            const float xi = g.x16 ? round16_host(g.x[i], a.round16) : g.x[i];
            rdx[i] = (double)round16_host(g.dout[i], a.round16) * ref_gelu_grad(xi);
            rdb[i % c] += rdx[i];
            mdb[i % c] += fabs(rdx[i]);
        }
        a.inplace = inpl;
        fused_out outs[] = {{inpl ? 0 : 3, rdx, NULL, thr, a.copies16 ? 6 : 0, a.copy_only},
                            {1, rdb, mdb, thr, 0, false}};
        snprintf(shape, sizeof shape, "%dx%d +=%s%s%s%s", a.rows, a.cols, inpl ? " dx=dout" : "",
                 storage_suffix(a.round16), g.x16 ? ", x in 16 bits, dx's 16-bit copy" : "",
                 a.copy_only ? " alone" : "");
        fused_case(be, "bias_gelu_bwd", make_bias_gelu_bwd, &g, a.copies16 ? 7 : inpl ? 3 : 6,
                   run_bias_gelu_bwd, run_bias_gelu_bwd_unfused, &a, outs, 2, shape);
        free(rdx), free(rdb), free(mdb);
    }
    free(x16);
    if (want_op("bias_gelu_bwd")) bias_gelu_bwd_dout16_cases(be, &a, &g);
    g.x16 = NULL;
    a.round16 = BT_F32;
    a.copies16 = a.copy_only = false;
    a.inplace = 0;
    free((void *)g.y), free((void *)g.bias), free((void *)g.dout), free((void *)g.x);
    free((void *)g.db);
}

/* ================= softmax + dropout ================= */

typedef struct {
    const float *scores, *dp, *probs;
    const int32_t *mask;
    size_t n, nm;
    const uint16_t *probs16; /* probs' bits in 16 bits (dropout_softmax_bwd), or NULL */
} attn_inputs;

static void make_attn(tensor *t, void *in) {
    const attn_inputs *q = in; /* scores (probs when in place), mask, probs, dropped, and the
                                  16-bit copies of dropped and probs */
    t[0] = tensor_out("scores", q->scores, q->n);
    t[1] = tensor_in("key_mask", q->mask, q->nm);
    t[2] = tensor_out("probs", NULL, q->n);
    t[3] = tensor_out("dropped", NULL, q->n);
    t[4] = tensor_16bit("dropped16", NULL, q->n, true);
    t[5] = tensor_16bit("probs16", NULL, q->n, true);
}
static void run_softmax_dropout(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    const float scale = 1.0f / sqrtf(8.0f);
    be->softmax_dropout_fwd(be, f->copy_only ? BT_NO_PTR : t[3].p, f->inplace ? t[0].p : t[2].p,
                            t[0].p, t[1].p, f->B, f->H, f->T, scale, f->round16, f->first_sample,
                            f->p, f->key, f->copies16 ? t[4].p : BT_NO_PTR,
                            f->copies16 ? t[5].p : BT_NO_PTR, !f->copy_only);
}
static void run_softmax_dropout_unfused(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    const float scale = 1.0f / sqrtf(8.0f);
    bt_ptr probs = f->inplace ? t[0].p : t[2].p;
    be->softmax_fwd(be, probs, t[0].p, t[1].p, f->B, f->H, f->T, scale);
    if (f->round16 != BT_F32) be->round16(be, probs, f->round16, (size_t)f->rows * f->cols);
    be->dropout(be, t[3].p, probs, (size_t)f->rows * f->cols, f->per_sample, f->first_sample,
                f->p, f->key, BT_F32, BT_NO_PTR, BT_F32);
    if (f->copies16) {
        be->cast(be, t[4].p, f->round16, t[3].p, BT_F32, (size_t)f->rows * f->cols);
        be->cast(be, t[5].p, f->round16, probs, BT_F32, (size_t)f->rows * f->cols);
    }
}

static void make_attn_bwd(tensor *t, void *in) {
    const attn_inputs *q = in; /* dprobs (dscores when in place), probs, dscores, and with
                                  copies16 probs in 16 bits, dscores' copy, probs widened */
    t[0] = tensor_out("dprobs", q->dp, q->n);
    t[1] = tensor_in("probs", q->probs, q->n);
    t[2] = tensor_out("dscores", NULL, q->n);
    t[3] = tensor_16bit("probs16", q->probs16, q->n, false);
    t[4] = tensor_16bit("dscores16", NULL, q->n, true);
    t[5] = tensor_out("probs widened", NULL, q->n);
}
/* With copies16 probs is read in 16 bits (round16's dtype) and dscores'
 * 16-bit copy written. */
static void run_dropout_softmax_bwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    be->dropout_softmax_bwd(be, f->inplace ? t[0].p : t[2].p, t[0].p, f->copies16 ? t[3].p : t[1].p,
                            f->B, f->H, f->T, 0.125f, f->round16, f->first_sample, f->p, f->key,
                            f->copies16 ? f->round16 : BT_F32, f->copies16 ? t[4].p : BT_NO_PTR,
                            !f->copy_only);
}
/* The same as dropout, softmax_bwd and round16, the 16-bit probs widened
 * and dscores' copy made with cast. */
static void run_dropout_softmax_bwd_unfused(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    const size_t n = (size_t)f->rows * f->cols;
    bt_ptr ds = f->inplace ? t[0].p : t[2].p, probs = t[1].p;
    if (f->copies16) {
        be->cast(be, t[5].p, BT_F32, t[3].p, f->round16, n);
        probs = t[5].p;
    }
    be->dropout(be, ds, t[0].p, n, f->per_sample, f->first_sample, f->p, f->key, BT_F32,
                BT_NO_PTR, BT_F32);
    be->softmax_bwd(be, ds, ds, probs, f->rows, f->T, 0.125f);
    if (f->round16 != BT_F32) be->round16(be, ds, f->round16, n);
    if (f->copies16) be->cast(be, t[4].p, f->round16, ds, BT_F32, n);
}

/* dropout_softmax_bwd unrounded, rounded to bf16 and f16 storage, and (the
 * last four) with probs given in 16 bits and dscores' 16-bit copy, the last
 * two with dscores not kept (its copy alone checked): against
 * the float64 reference from the probabilities it is given (within the
 * rounding; for the 16-bit rows the probabilities rounded to the dtype, as
 * the stash holds them) and the unfused ops' bits (the copy: cast's). */
static void dropout_softmax_bwd_cases(bt_backend *be, fused_args *a, const attn_inputs *q,
                                      const char *shape) {
    static const bt_dtype rounds[] = {BT_F32, BT_BF16, BT_F16, BT_BF16, BT_F16, BT_BF16, BT_F16};
    const size_t n = q->n;
    double *dpk = ref_alloc(n * 8), *ds = ref_alloc(n * 8), *mds = ref_alloc(n * 8);
    float *pk = ref_alloc(n * 4);
    uint16_t *p16 = ref_alloc(n * 2);
    for (size_t i = 0; i < n; i++) dpk[i] = (double)q->dp[i] * keep_factor(a, i);
    for (int k = 0; k < 7; k++) {
        a->round16 = rounds[k];
        a->copies16 = k >= 3;
        a->copy_only = k >= 5;
        attn_inputs qk = *q;
        if (a->copies16) { /* the probabilities as the stash holds them */
            for (size_t i = 0; i < n; i++) {
                p16[i] = bits16_of(q->probs[i], rounds[k]);
                pk[i] = widen16(p16[i], rounds[k]);
            }
            qk.probs = pk;
            qk.probs16 = p16;
        }
        double *pp = ref_dup(qk.probs, n);
        ref_softmax_bwd(ds, dpk, pp, a->rows, a->T, 0.125);
        ref_softmax_bwd_mag(mds, dpk, pp, a->rows, a->T, 0.125);
        fused_out outs[] = {{a->inplace ? 0 : 2, ds, mds, round16_thr(rounds[k]),
                             a->copies16 ? 4 : 0, a->copy_only}};
        char row[160];
        snprintf(row, sizeof row, "%s%s%s", shape, storage_suffix(rounds[k]),
                 a->copy_only ? ", probs in 16 bits, 16-bit copy, dscores not kept"
                              : a->copies16 ? ", probs in 16 bits, 16-bit copy" : "");
        fused_case(be, "dropout_softmax_bwd", make_attn_bwd, &qk, a->copies16 ? 6 : 3,
                   run_dropout_softmax_bwd, run_dropout_softmax_bwd_unfused, a, outs, 1, row);
        free(pp);
    }
    a->round16 = BT_F32;
    a->copies16 = a->copy_only = false;
    free(dpk), free(ds), free(mds), free(pk), free(p16);
}

/* softmax_dropout_fwd without rounding and rounded to bf16 and to f16 storage
 * (the last two also with the 16-bit copies of dropped and probs, with and
 * without the fp32 dropped and probs kept, then their copies alone): against
 * the unfused ops (bits; the copies by cast) and the float64 reference rp, rd
 * (within the rounding), the rounded probabilities checked to be values of
 * their dtype, a copy to be half.h's conversion of its output. */
static void softmax_dropout_cases(bt_backend *be, fused_args *a, attn_inputs *q, const double *rp,
                                  const double *rd, const char *shape) {
    static const bt_dtype rounds[] = {BT_F32, BT_BF16, BT_F16, BT_BF16, BT_F16, BT_BF16, BT_F16};
    for (int k = 0; k < 7; k++) {
        a->round16 = rounds[k];
        a->copies16 = k >= 3;
        a->copy_only = k >= 5;
        const double thr = round16_thr(rounds[k]);
        const int pt = a->inplace ? 0 : 2;
        fused_out outs[] = {{pt, rp, NULL, thr, a->copies16 ? 5 : 0, a->copy_only},
                            {3, rd, NULL, thr, a->copies16 ? 4 : 0, a->copy_only}};
        char row[160];
        snprintf(row, sizeof row, "%s%s%s", shape, storage_suffix(rounds[k]),
                 a->copy_only ? ", 16-bit copies, no fp32 dropped or probs"
                              : a->copies16 ? ", 16-bit copies" : "");
        tensor tf[MAXT];
        make_attn(tf, q);
        verdict v = v_new();
        /* the rounded probabilities are values of their dtype (where kept) */
        if (rounds[k] != BT_F32 && !a->copy_only &&
            exec_op(&v, be, tf, 6, run_softmax_dropout, a, NULL))
            v_stored16(&v, tf[pt].name, RES(tf[pt]), tf[pt].n, rounds[k]);
        tensors_free(tf, 6);
        if (!v.ok) {
            v_report(&v, "softmax_dropout_fwd", "%s (storage values)", row);
            continue;
        }
        fused_case(be, "softmax_dropout_fwd", make_attn, q, 6, run_softmax_dropout,
                   run_softmax_dropout_unfused, a, outs, 2, row);
    }
    a->round16 = BT_F32;
    a->copies16 = a->copy_only = false;
}

static void attention_cases(bt_backend *be, int si, fused_args a) {
    reseed("fused_attention", (size_t)si);
    const size_t n = (size_t)a.rows * a.cols, nm = (size_t)a.B * a.T;
    int32_t *mask = rand_ints(nm, 0, 4); /* about a quarter of the keys masked */
    for (int b = 0; b < a.B; b++) mask[(size_t)b * a.T] = 1; /* at least one key */
    float *probs = ref_alloc(n * 4);
    double *rp = ref_alloc(n * 8), *rd = ref_alloc(n * 8);
    float *scores = rand_floats(n, 3, 0);
    double *rs = ref_dup(scores, n);
    ref_softmax_fwd(rp, rs, mask, a.B, a.H, a.T, 1.0 / sqrt(8.0));
    for (size_t i = 0; i < n; i++) {
        rd[i] = rp[i] * keep_factor(&a, i);
        probs[i] = (float)rp[i];
    }
    attn_inputs q = {scores, rand_floats(n, 1, 0), probs, mask, n, nm, NULL};
    char shape[96];
    for (int inpl = 0; inpl < 2; inpl++) {
        a.inplace = inpl;
        snprintf(shape, sizeof shape, "B%d H%d T%d p=%.2g%s", a.B, a.H, a.T, a.p,
                 inpl ? " in place" : "");
        if (want_op("softmax_dropout_fwd")) softmax_dropout_cases(be, &a, &q, rp, rd, shape);
        if (want_op("dropout_softmax_bwd")) dropout_softmax_bwd_cases(be, &a, &q, shape);
    }
    free(mask), free(probs), free(rp), free(rd), free(scores), free(rs), free((void *)q.dp);
}

void test_fused(bt_backend *be) {
    static const char *const ops[] = {"bias_add",              "bias_gelu_fwd",
                                      "bias_gelu_bwd",
                                      "bias_dropout_add",      "residual_layernorm_fwd",
                                      "add_dropout",
                                      "softmax_dropout_fwd",   "dropout_softmax_bwd"};
    bool any = false;
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) any |= want_op(ops[i]);
    if (!any) return;
    /* rows, cols, rows per sample (0: all; < 0: -elements per sample, rows
     * straddling samples), p, quick (-1: big); 1024 and 1100 columns: the
     * widest row residual_layernorm_fwd keeps in registers, and one past it */
    static const struct { int r, c, rps; float p; int quick; } rows[] = {
        {1, 1, 0, 0.0f, 1},    {3, 5, 1, 0.1f, 1},   {7, 33, 0, 0.5f, 0},
        {65, 3, 5, 0.1f, 1},   {31, 65, 1, 0.0f, 0}, {200, 37, 8, 0.1f, 0},
        {6, 10, -15, 0.5f, 1}, {3, 1024, 0, 0.1f, 0}, {5, 1100, 5, 0.1f, 1},
        {1024, 768, 128, 0.1f, -1}};
    for (int si = 0; si < (int)(sizeof rows / sizeof *rows); si++) {
        if (skip_shape(rows[si].quick == 1)) continue;
        const int rps = rows[si].rps ? rows[si].rps : rows[si].r;
        const size_t per = rps < 0 ? (size_t)-rps : (size_t)rps * rows[si].c;
        fused_args a = {.rows = rows[si].r, .cols = rows[si].c, .per_sample = per, .first_sample = 5,
                        .p = rows[si].p, .key = {0x5eed0000u + (uint64_t)si, 0xabcdef12345ull},
                        .eps = 1e-12f};
        bias_gelu_cases(be, si, a);
        fused_join_cases(be, si, a);
    }
    /* B, H, T, p, quick; 512 and 513 keys: the longest row the softmax
     * kernels keep in registers with 32 lanes, and one past it */
    static const struct { int B, H, T; float p; int quick; } attn[] = {
        {1, 1, 1, 0.1f, 1}, {2, 3, 7, 0.1f, 1}, {2, 2, 33, 0.5f, 0}, {1, 1, 300, 0.1f, 0},
        {2, 2, 9, 0.0f, 1}, {1, 1, 512, 0.1f, 0}, {1, 1, 513, 0.1f, 0}, {4, 12, 128, 0.1f, -1}};
    for (int si = 0; si < (int)(sizeof attn / sizeof *attn); si++) {
        if (skip_shape(attn[si].quick == 1)) continue;
        const int B = attn[si].B, H = attn[si].H, T = attn[si].T;
        fused_args a = {.rows = B * H * T, .cols = T, .B = B, .H = H, .T = T,
                        .per_sample = (size_t)H * T * T, .first_sample = 3, .p = attn[si].p,
                        .key = {0xa77e0000u + (uint64_t)si, 0x77ull}};
        attention_cases(be, si, a);
    }
}
