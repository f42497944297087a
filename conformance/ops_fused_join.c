/* Conformance checks of the fused residual joins, bias_dropout_add and
 * residual_layernorm_fwd (with the residual in 16 bits too), and of the
 * backward's add_dropout (with b in 16 bits too): the bits of the unfused
 * ops they replace on the same backend, and the float64 reference. */
#include "fused_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ================= bias + dropout + residual (+ LayerNorm) ================= */

typedef struct {
    const float *y, *bias, *resid, *gamma, *beta;
    size_t n, c, r;
    const uint16_t *resid16; /* the residual in 16 bits (resid: its values), or NULL */
} join_inputs;

static void make_join(tensor *t, void *in) {
    const join_inputs *j = in; /* resid (sum/out when in place), y, bias, out (sum), scratch
                                  (the unfused branch), ln out, mean, rstd, gamma, beta, the
                                  16-bit copies of the sum and ln out, and the residual in 16
                                  bits (the op then given it alone; the fp32 one, NaN, is the
                                  unfused run's widened copy) */
    t[0] = tensor_out("resid", j->resid16 ? NULL : j->resid, j->n);
    t[1] = tensor_in("y", j->y, j->n);
    t[2] = tensor_in("bias", j->bias, j->c);
    t[3] = tensor_out("out", NULL, j->n);
    t[4] = tensor_out("scratch", NULL, j->n);
    t[5] = tensor_out("ln", NULL, j->n);
    t[6] = tensor_out("mean", NULL, j->r);
    t[7] = tensor_out("rstd", NULL, j->r);
    t[8] = tensor_in("gamma", j->gamma, j->c);
    t[9] = tensor_in("beta", j->beta, j->c);
    t[10] = tensor_16bit("sum16", NULL, j->n, true);
    t[11] = tensor_16bit("ln16", NULL, j->n, true);
    t[12] = tensor_16bit("resid16", j->resid16, j->n, false);
}
static void run_bias_dropout_add(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    be->bias_dropout_add(be, f->inplace ? t[0].p : t[3].p, t[1].p, t[2].p, t[0].p, f->rows,
                         f->cols, f->round16, f->per_sample, f->first_sample, f->p, f->key);
}
/* scratch = dropout(y + bias), as the model did before the fusion (with
 * 16-bit storage y + bias rounded, as the model stores it) */
static void branch_unfused(bt_backend *be, tensor *t, const fused_args *f) {
    const size_t n = (size_t)f->rows * f->cols;
    be->copy(be, t[4].p, t[1].p, n * 4);
    be->bias_add(be, t[4].p, t[2].p, f->rows, f->cols, BT_F32, BT_NO_PTR, true);
    if (f->round16 != BT_F32) be->round16(be, t[4].p, f->round16, n);
    if (f->p > 0.0f)
        be->dropout(be, t[4].p, t[4].p, n, f->per_sample, f->first_sample, f->p, f->key, BT_F32,
                    BT_NO_PTR, BT_F32);
}
static void run_bias_dropout_add_unfused(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    const bt_ptr out = f->inplace ? t[0].p : t[3].p;
    branch_unfused(be, t, f);
    be->add(be, out, t[4].p, t[0].p, (size_t)f->rows * f->cols);
    if (f->round16 != BT_F32) be->round16(be, out, f->round16, (size_t)f->rows * f->cols);
}

static void run_residual_ln(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    be->residual_layernorm_fwd(be, f->inplace ? t[0].p : t[3].p, t[5].p, t[6].p, t[7].p, t[1].p,
                               t[2].p, f->resid16 ? t[12].p : t[0].p, t[8].p, t[9].p, f->rows,
                               f->cols, f->eps, f->round16, f->per_sample, f->first_sample, f->p,
                               f->key, f->copies16 ? t[10].p : BT_NO_PTR,
                               f->copies16 ? t[11].p : BT_NO_PTR, !f->copy_only,
                               f->resid16 ? f->round16 : BT_F32,
                               !(f->resid16 && f->copy_only));
}
static void run_residual_ln_unfused(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    bt_ptr sum = f->inplace ? t[0].p : t[3].p;
    if (f->resid16) /* the residual widened, as the model kept it in fp32 before */
        be->cast(be, t[0].p, BT_F32, t[12].p, f->round16, (size_t)f->rows * f->cols);
    branch_unfused(be, t, f);
    be->add(be, sum, t[4].p, t[0].p, (size_t)f->rows * f->cols);
    if (f->round16 != BT_F32) be->round16(be, sum, f->round16, (size_t)f->rows * f->cols);
    be->layernorm_fwd(be, t[5].p, t[6].p, t[7].p, sum, t[8].p, t[9].p, f->rows, f->cols, f->eps,
                      BT_F32);
    if (f->round16 != BT_F32) be->round16(be, t[5].p, f->round16, (size_t)f->rows * f->cols);
    if (f->copies16) {
        be->cast(be, t[10].p, f->round16, sum, BT_F32, (size_t)f->rows * f->cols);
        be->cast(be, t[11].p, f->round16, t[5].p, BT_F32, (size_t)f->rows * f->cols);
    }
}

/* The sum, its magnitudes, and float64 LayerNorm of the sum (out, mean,
 * rstd). The sum in float64; with a->round16 (16-bit storage) in the op's own
 * fp32 steps, each rounded to its float and then to the storage dtype as
 * the op defines, so exactly the op's values. */
static void join_reference(const join_inputs *j, const fused_args *a, double *sum, double *mag,
                           double *ln, double *mean, double *rstd) {
    for (size_t i = 0; i < j->n; i++) {
        const double k = a->p > 0.0f ? keep_factor(a, i) : 1.0;
        const double branch = ((double)j->y[i] + j->bias[i % j->c]) * k;
        sum[i] = branch + j->resid[i];
        mag[i] = (fabs((double)j->y[i]) + fabs((double)j->bias[i % j->c])) * k + fabs(j->resid[i]);
        if (a->round16 != BT_F32) {
            float v = round16_host(j->y[i] + j->bias[i % j->c], a->round16);
            if (a->p > 0.0f) v = k != 0.0 ? v * (float)k : 0.0f;
            sum[i] = round16_host(v + j->resid[i], a->round16);
        }
    }
    double *g = ref_dup(j->gamma, j->c), *b = ref_dup(j->beta, j->c);
    ref_layernorm_fwd(ln, mean, rstd, sum, g, b, (int)j->r, (int)j->c, a->eps);
    free(g), free(b);
}

/* The join's cases for storage rounding a.round16 (BT_F32: none). */
static void join_cases_rounded(bt_backend *be, fused_args a, join_inputs *pj) {
    const join_inputs j = *pj;
    const size_t n = j.n, c = j.c, r = j.r;
    double *sum = ref_alloc(n * 8), *mag = ref_alloc(n * 8), *ln = ref_alloc(n * 8),
           *mean = ref_alloc(r * 8), *rstd = ref_alloc(r * 8), *mln = ref_alloc(n * 8);
    join_reference(&j, &a, sum, mag, ln, mean, rstd);
    for (size_t i = 0; i < n; i++) mln[i] = fabs(ln[i] - j.beta[i % c]) + fabs(j.beta[i % c]);
    char shape[96];
    /* with 16-bit storage the later passes also ask residual_layernorm_fwd for
     * the 16-bit copies of the sum and the LayerNorm output, the last with
     * the sum not kept (its copy alone checked); join_resid16 then gives it
     * the residual in 16 bits */
    for (int pass = 0; pass < (a.round16 != BT_F32 ? 4 : 2); pass++) {
        const int inpl = pass == 1;
        a.inplace = inpl;
        a.copies16 = pass >= 2;
        a.copy_only = pass == 3;
        snprintf(shape, sizeof shape, "%dx%d p=%.2g per=%zu%s%s%s", a.rows, a.cols, a.p,
                 a.per_sample, inpl ? " out=resid" : "", storage_suffix(a.round16),
                 a.copy_only ? ", 16-bit copies, sum not kept" : a.copies16 ? ", 16-bit copies" : "");
        fused_out outs[] = {{inpl ? 0 : 3, sum, mag, THR_ROUND, a.copies16 ? 10 : 0, a.copy_only},
                            {5, ln, mln, round16_thr(a.round16), a.copies16 ? 11 : 0, false},
                            {6, mean, NULL, THR_MATH, 0, false},
                            {7, rstd, NULL, THR_MATH, 0, false}};
        if (want_op("bias_dropout_add") && !a.copies16)
            fused_case(be, "bias_dropout_add", make_join, pj, 5, run_bias_dropout_add,
                       run_bias_dropout_add_unfused, &a, outs, 1, shape);
        if (want_op("residual_layernorm_fwd"))
            fused_case(be, "residual_layernorm_fwd", make_join, pj, 12, run_residual_ln,
                       run_residual_ln_unfused, &a, outs, 4, shape);
    }
    a.copies16 = a.copy_only = false;
    free(sum), free(mag), free(ln), free(mean), free(rstd), free(mln);
}

/* residual_layernorm_fwd with the residual in 16 bits (a.round16's dtype,
 * the values of pj's residual rounded to it), as the model joins Post-LN's
 * residual stream: with every output kept, checked against float64 on the
 * rounded residual, and bit for bit against the unfused ops on it widened
 * with their copies; then with only the 16-bit copies of the sum and the
 * LayerNorm output kept, those copies against the unfused ops' (mean and
 * rstd against float64 too). The op is given the 16-bit tensor alone: a
 * kernel reading it as floats reads past it (into the guard band's NaNs). */
static void join_resid16(bt_backend *be, fused_args a, const join_inputs *pj) {
    join_inputs j = *pj;
    float *resid = ref_alloc(j.n * 4);
    uint16_t *resid16 = ref_alloc(j.n * 2);
    for (size_t i = 0; i < j.n; i++) {
        resid16[i] = bits16_of(pj->resid[i], a.round16);
        resid[i] = round16_host(pj->resid[i], a.round16);
    }
    j.resid = resid;
    j.resid16 = resid16;
    const size_t n = j.n, r = j.r;
    double *sum = ref_alloc(n * 8), *mag = ref_alloc(n * 8), *ln = ref_alloc(n * 8),
           *mean = ref_alloc(r * 8), *rstd = ref_alloc(r * 8), *mln = ref_alloc(n * 8);
    join_reference(&j, &a, sum, mag, ln, mean, rstd);
    for (size_t i = 0; i < n; i++)
        mln[i] = fabs(ln[i] - j.beta[i % j.c]) + fabs(j.beta[i % j.c]);
    a.copies16 = a.resid16 = true;
    for (int only = 0; only < 2; only++) {
        a.copy_only = only;
        char shape[96];
        snprintf(shape, sizeof shape, "%dx%d p=%.2g per=%zu%s, residual in 16 bits%s", a.rows,
                 a.cols, a.p, a.per_sample, storage_suffix(a.round16),
                 only ? ", copies alone" : ", 16-bit copies");
        fused_out outs[] = {{3, sum, mag, THR_ROUND, 10, a.copy_only},
                            {5, ln, mln, round16_thr(a.round16), 11, a.copy_only},
                            {6, mean, NULL, THR_MATH, 0, false},
                            {7, rstd, NULL, THR_MATH, 0, false}};
        if (want_op("residual_layernorm_fwd"))
            fused_case(be, "residual_layernorm_fwd", make_join, &j, 13, run_residual_ln,
                       run_residual_ln_unfused, &a, outs, 4, shape);
    }
    free(resid), free(resid16);
    free(sum), free(mag), free(ln), free(mean), free(rstd), free(mln);
}

/* ================= add + dropout (the backward's) ================= */

/* a (out when in place), b, out, the unfused run's scratch (b rounded or
 * widened), and b in 16 bits (the op then given it alone) */
static void make_add_dropout(tensor *t, void *in) {
    const join_inputs *j = in;
    t[0] = tensor_out("a", j->resid, j->n);
    t[1] = tensor_in("b", j->resid16 ? NULL : j->y, j->resid16 ? 0 : j->n);
    t[2] = tensor_out("out", NULL, j->n);
    t[3] = tensor_out("scratch", NULL, j->n);
    t[4] = tensor_16bit("b16", j->resid16, j->resid16 ? j->n : 0, false);
}
static void run_add_dropout(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    be->add_dropout(be, f->inplace ? t[0].p : t[2].p, t[0].p, f->resid16 ? t[4].p : t[1].p,
                    f->resid16 ? f->round16 : BT_F32, (size_t)f->rows * f->cols, f->per_sample,
                    f->first_sample, f->p, f->key, f->round16);
}
/* b rounded (or widened) into scratch, add, round16, dropout: the model's
 * ops before the fusion */
static void run_add_dropout_unfused(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const fused_args *f = a;
    const size_t n = (size_t)f->rows * f->cols;
    const bt_ptr out = f->inplace ? t[0].p : t[2].p;
    if (f->resid16) {
        be->cast(be, t[3].p, BT_F32, t[4].p, f->round16, n);
    } else {
        be->copy(be, t[3].p, t[1].p, n * 4);
        if (f->round16 != BT_F32) be->round16(be, t[3].p, f->round16, n);
    }
    be->add(be, out, t[0].p, t[3].p, n);
    if (f->round16 != BT_F32) be->round16(be, out, f->round16, n);
    if (f->p > 0.0f)
        be->dropout(be, out, out, n, f->per_sample, f->first_sample, f->p, f->key, BT_F32,
                    BT_NO_PTR, BT_F32);
}

/* add_dropout in storage a.round16, out apart and in place, and with 16-bit
 * storage b also given in 16 bits (its values rounded: the same reference):
 * against float64 (with rounding: exactly the op's fp32 steps, each
 * rounded as the op defines) and the unfused ops' bits. */
static void add_dropout_cases(bt_backend *be, fused_args a, const join_inputs *pj) {
    join_inputs j = *pj;
    const size_t n = j.n;
    double *ref = ref_alloc(n * 8), *mag = ref_alloc(n * 8);
    uint16_t *b16 = ref_alloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        const double k = a.p > 0.0f ? keep_factor(&a, i) : 1.0;
        ref[i] = ((double)j.resid[i] + j.y[i]) * k;
        mag[i] = (fabs((double)j.resid[i]) + fabs((double)j.y[i])) * k;
        if (a.round16 != BT_F32) {
            const float v = round16_host(j.resid[i] + round16_host(j.y[i], a.round16), a.round16);
            ref[i] = k != 0.0 ? v * (float)k : 0.0f;
            b16[i] = bits16_of(j.y[i], a.round16);
        }
    }
    for (int pass = 0; pass < (a.round16 != BT_F32 ? 4 : 2); pass++) {
        a.inplace = pass & 1;
        a.resid16 = pass >= 2;
        j.resid16 = a.resid16 ? b16 : NULL;
        char shape[96];
        snprintf(shape, sizeof shape, "%zu p=%.2g per=%zu%s%s%s", n, a.p, a.per_sample,
                 a.inplace ? " out=a" : "", storage_suffix(a.round16),
                 a.resid16 ? ", b in 16 bits" : "");
        const fused_out outs[] = {{a.inplace ? 0 : 2, ref, mag, THR_ROUND, 0, false}};
        fused_case(be, "add_dropout", make_add_dropout, &j, 5, run_add_dropout,
                   run_add_dropout_unfused, &a, outs, 1, shape);
    }
    free(ref), free(mag), free(b16);
}

void fused_join_cases(bt_backend *be, int si, fused_args a) {
    reseed("fused_join", (size_t)si);
    const size_t n = (size_t)a.rows * a.cols, c = (size_t)a.cols, r = (size_t)a.rows;
    join_inputs j = {rand_floats(n, 1, 0), rand_floats(c, 0.5, 0), rand_floats(n, 1, 0.2),
                     rand_floats(c, 0.1, 1.0), rand_floats(c, 0.1, 0), n, c, r, NULL};
    static const bt_dtype rounds[] = {BT_F32, BT_BF16, BT_F16};
    for (int k = 0; k < 3; k++) {
        a.round16 = rounds[k];
        join_cases_rounded(be, a, &j);
        if (a.round16 != BT_F32) join_resid16(be, a, &j);
        if (want_op("add_dropout")) add_dropout_cases(be, a, &j);
    }
    free((void *)j.y), free((void *)j.bias), free((void *)j.resid), free((void *)j.gamma);
    free((void *)j.beta);
}
