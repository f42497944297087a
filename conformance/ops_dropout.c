/* Conformance checks of dropout: the Philox mask bit for bit (philox.h),
 * split calls, statistics, the backward against finite differences, and the
 * 16-bit input and output against the fp32 op's values. */
#include "backends/common/half.h"
#include "backends/philox.h"
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================= dropout ================= */

typedef struct {
    size_t n, per, split;
    uint32_t s0;
    float p;
    bt_rng_key key;
    int inplace;
} dropout_args;
static void run_dropout(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    dropout_args *d = a; /* in, [out] */
    bt_ptr out = d->inplace ? t[0].p : t[1].p;
    if (!d->split) {
        be->dropout(be, out, t[0].p, d->n, d->per, d->s0, d->p, d->key, BT_F32, BT_NO_PTR, BT_F32);
        return;
    }
    be->dropout(be, out, t[0].p, d->split, d->per, d->s0, d->p, d->key, BT_F32, BT_NO_PTR, BT_F32);
    be->dropout(be, bt_at(out, d->split), bt_at(t[0].p, d->split), d->n - d->split, d->per,
                d->s0 + (uint32_t)(d->split / d->per), d->p, d->key, BT_F32, BT_NO_PTR, BT_F32);
}

/* Expected output: philox.h decides which elements are kept (bit-exact with
 * every backend); kept values are x * (1.0f / (1.0f - p)) in float. */
static float *drop_expect(const float *x, const dropout_args *d) {
    float *e = ref_alloc(d->n * 4);
    const uint32_t thr = philox_drop_threshold(d->p);
    const float scale = 1.0f / (1.0f - d->p);
    for (size_t i = 0; i < d->n; i++) {
        uint32_t sample = d->s0 + (uint32_t)(i / d->per), elem = (uint32_t)(i % d->per);
        e[i] = philox_draw(d->key.seed, d->key.stream, sample, elem) >= thr ? x[i] * scale : 0.0f;
    }
    return e;
}

/* Run dropout on x with d; returns the output (caller frees) or NULL. */
static float *drop_run(verdict *v, bt_backend *be, const float *x, dropout_args d) {
    tensor t[] = {d.inplace ? tensor_out("x", x, d.n) : tensor_in("x", x, d.n), tensor_out("out", NULL, d.n)};
    if (!exec_op(v, be, t, d.inplace ? 1 : 2, run_dropout, &d, NULL)) {
        tensors_free(t, 2);
        return NULL;
    }
    float *o = t[d.inplace ? 0 : 1].res;
    t[d.inplace ? 0 : 1].res = NULL;
    tensors_free(t, 2);
    return o;
}

typedef struct {
    size_t n;
    double scale;
    const float *keep; /* expected forward output of ones: scale or 0 */
    double *x;
} dr_fd_ctx;
static void fwd_dropout(void *c, double *out) {
    dr_fd_ctx *d = c;
    for (size_t i = 0; i < d->n; i++) out[i] = d->keep[i] != 0.0f ? d->x[i] * d->scale : 0.0;
}

/* ---- 16-bit input and output ---- */

typedef struct {
    dropout_args d;
    bt_dtype in_dtype, kind16;
    bool f32_out; /* out given (else buf NULL: not written) */
} dropout16_args;
static void run_dropout16(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const dropout16_args *q = a; /* in (fp32 or 16-bit), out16, [out] */
    be->dropout(be, q->f32_out ? t[2].p : BT_NO_PTR, t[0].p, q->d.n, q->d.per, q->d.s0, q->d.p,
                q->d.key, q->in_dtype, t[1].p, q->kind16);
}

/* dropout with its input in 16 bits (in_dtype dt: the stash's copy of x)
 * and with a 16-bit copy of its output (out16 in dt), with and without the
 * fp32 out: out must be the fp32 op's output on x's values (widened from dt
 * where x is given in it), and out16 its bits in dt, as a cast after the op
 * would make them. */
static void check_dropout16(bt_backend *be, const dropout_args *d, const float *x,
                            const char *shape) {
    const size_t n = d->n;
    for (int k = 0; k < 2; k++) {
        const bt_dtype dt = k ? BT_F16 : BT_BF16;
        uint16_t *x16 = malloc(n * 2);
        float *xw = malloc(n * 4);
        if (!x16 || !xw) exit(99);
        for (size_t i = 0; i < n; i++) {
            x16[i] = bits16_of(x[i], dt);
            xw[i] = widen16(x16[i], dt);
        }
        for (int form = 0; form < 3; form++) { /* in fp32 / 16 bits with out / 16 bits alone */
            const dropout16_args q = {*d, form ? dt : BT_F32, dt, form < 2};
            float *want = drop_expect(form ? xw : x, d);
            tensor t[] = {form ? tensor_16bit("in16", x16, n, false) : tensor_in("x", x, n),
                          tensor_16bit("out16", NULL, n, true), tensor_out("out", NULL, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, q.f32_out ? 3 : 2, run_dropout16, (void *)&q, NULL)) {
                if (q.f32_out) v_bits(&v, "out", RES(t[2]), want, n);
                v_bits16_of(&v, "out16", t[1].res, want, n, dt);
            }
            v_report(&v, "dropout", "%s in %s, out16 %s%s", shape,
                     form ? (dt == BT_BF16 ? "bf16" : "f16") : "fp32",
                     dt == BT_BF16 ? "bf16" : "f16", q.f32_out ? "" : ", no fp32 out");
            tensors_free(t, 3);
            free(want);
        }
        free(x16), free(xw);
    }
}

void test_dropout(bt_backend *be) {
    if (!want_op("dropout")) return;
    static const struct {
        size_t n, per;
        uint32_t s0;
        float p;
        int quick; /* -1: big */
    } cases[] = {/* n is a multiple of per_sample (backend.h); odd per_sample values
                  * make Philox blocks of four straddle sample boundaries */
                 {1, 1, 0, 0.1f, 1},         {15, 5, 3, 0.1f, 1},     {256, 64, 0, 0.5f, 0},
                 {999, 3, 11, 0.25f, 0},     {1000, 1000, 0, 0.0f, 0}, {4000, 1000, 7, 0.1f, 1},
                 {8198, 4099, 0, 0.9f, 0},   {196608, 98304, 5, 0.1f, -1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        if (skip_shape(cases[ci].quick == 1)) continue;
        reseed("dropout", ci);
        dropout_args d = {cases[ci].n, cases[ci].per, 0, cases[ci].s0, cases[ci].p, {0, 0}, 0};
        d.key.seed = ref_next(&g_input_rng);
        d.key.stream = (ci & 1) ? ref_next(&g_input_rng) : (uint64_t)ref_int(&g_input_rng, 100);
        size_t n = d.n;
        char shape[80];
        snprintf(shape, sizeof shape, "n=%zu per=%zu s0=%u p=%g", n, d.per, d.s0, d.p);
        float *x = rand_floats(n, 1, 0), *g = rand_floats(n, 1, 0), *xg = ref_alloc(n * 4);
        for (size_t i = 0; i < n; i++) xg[i] = x[i] + g[i];
        float *ex = drop_expect(x, &d), *eg = drop_expect(g, &d), *ones = ref_alloc(n * 4);
        for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
        float *keep = drop_expect(ones, &d);

        /* forward, out-of-place and in-place: bit-exact */
        verdict v = v_new();
        float *ox = drop_run(&v, be, x, d);
        if (ox) v_bits(&v, "out", ox, ex, n);
        d.inplace = 1;
        float *oi = drop_run(&v, be, x, d);
        if (oi) v_bits(&v, "in-place", oi, ex, n);
        d.inplace = 0;
        v_report(&v, "dropout", "%s", shape);
        check_dropout16(be, &d, x, shape);

        /* the mask depends only on (seed, stream, sample, elem): split calls */
        size_t full = n / d.per;
        if (n > d.per) { /* at least two samples */
            verdict vs = v_new();
            d.split = d.per * (full / 2 ? full / 2 : 1);
            float *os = drop_run(&vs, be, x, d);
            if (os) v_bits(&vs, "split", os, ex, n);
            d.split = 0;
            v_report(&vs, "dropout", "%s split@%zu", shape, d.per * (full / 2 ? full / 2 : 1));
            free(os);
        }

        /* statistics: kept fraction within 4 sigma; other stream/seed, other mask */
        if (ox) {
            verdict vt = v_new();
            size_t kept = 0;
            for (size_t i = 0; i < n; i++) kept += ox[i] != 0.0f;
            double sigma = sqrt((double)d.p * (1.0 - d.p) / (double)n),
                   dev = fabs((double)kept / n - (1.0 - d.p));
            v_metric(&vt, "kept fraction z", sigma > 0 ? dev / sigma : (dev > 0 ? INFINITY : 0), 4.0);
            for (size_t i = 0; i < n; i++)
                if (ox[i] != 0.0f && ox[i] != x[i] * (1.0f / (1.0f - d.p))) {
                    v_fail(&vt, "kept value not x/(1-p) exactly");
                    break;
                }
            for (int k = 0; k < 2 && n >= 64 && d.p > 0.0f; k++) {
                dropout_args d2 = d;
                if (k == 0)
                    d2.key.stream ^= 1;
                else
                    d2.key.seed += 1;
                float *o2 = drop_run(&vt, be, x, d2);
                size_t diff = 0;
                for (size_t i = 0; o2 && i < n; i++) diff += (o2[i] == 0.0f) != (ox[i] == 0.0f);
                if (o2 && diff == 0) v_fail(&vt, "same mask for another %s", k ? "seed" : "stream");
                free(o2);
            }
            v_report(&vt, "dropout", "%s stats (z)", shape);
        }

        /* backward: the same call on a gradient applies the forward's mask and is linear */
        if (ox) {
            verdict vb = v_new();
            float *og = drop_run(&vb, be, g, d), *oxg = drop_run(&vb, be, xg, d);
            if (og && oxg) {
                v_bits(&vb, "dgrad", og, eg, n);
                for (size_t i = 0; i < n; i++)
                    if ((og[i] == 0.0f) != (ox[i] == 0.0f)) {
                        v_fail(&vb, "gradient mask differs from the forward mask at %zu", i);
                        break;
                    }
                double *lin = ref_alloc(n * 8), *mag = ref_alloc(n * 8);
                for (size_t i = 0; i < n; i++)
                    lin[i] = (double)ox[i] + og[i], mag[i] = fabs((double)ox[i]) + fabs((double)og[i]);
                v_nmse(&vb, "linearity", oxg, lin, mag, n, THR_ROUND);
                free(lin), free(mag);
            }
            v_report(&vb, "dropout", "%s bwd+linear", shape);
            free(og), free(oxg);
        }
        if (g_check_references) { /* analytic backward (mask * scale * w) vs FD of the forward */
            verdict f = v_new();
            double *rx = ref_dup(x, n), *w = ref_dup(g, n), sc = 1.0f / (1.0f - d.p);
            dr_fd_ctx ctx = {n, sc, keep, rx};
            for (int s = 0; s < 3; s++) {
                size_t idx = (size_t)ref_int(&g_fd_rng, (int)n);
                double an = keep[idx] != 0.0f ? w[idx] * sc : 0.0;
                fd_point(&f, "dx", ref_fd(fwd_dropout, &ctx, n, w, rx, idx, FD_H), an, 1e-4 * max_abs(w, n));
            }
            FD_REPORT(f, "dropout", "%s vs FD", shape);
            free(rx), free(w);
        }
        free(x), free(g), free(xg), free(ex), free(eg), free(ones), free(keep), free(ox), free(oi);
    }
}

/* ================= dropout_rows ================= */

typedef struct {
    int n_idx, cols;
    size_t per;
    uint32_t s0;
    float p;
    bt_rng_key key;
} dropout_rows_args;
static void run_dropout_rows(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    const dropout_rows_args *d = a; /* x (in place), idx */
    be->dropout_rows(be, t[0].p, t[1].p, d->n_idx, d->cols, d->per, d->s0, d->p, d->key);
}

/* dropout_rows at rows chosen among `rows` (in any order, some twice): each
 * row's values with the mask that dropout over all rows draws for it
 * (philox.h, bit for bit), and the same as dropout over all rows then a
 * gather of those rows on the backend. */
void test_dropout_rows(bt_backend *be) {
    if (!want_op("dropout_rows")) return;
    static const struct {
        int rows, n_idx, cols, per_rows; /* per_sample = per_rows * cols */
        uint32_t s0;
        float p;
        int quick;
    } cases[] = {{1, 1, 1, 1, 0, 0.1f, 1},     {8, 5, 3, 2, 3, 0.25f, 1},
                 {12, 12, 5, 4, 0, 0.5f, 0},   {64, 20, 6, 8, 9, 0.1f, 1},
                 {40, 17, 64, 40, 1, 0.0f, 0}, {512, 83, 768, 128, 2, 0.1f, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        if (skip_shape(cases[ci].quick == 1)) continue;
        reseed("dropout_rows", ci);
        const int rows = cases[ci].rows, S = cases[ci].n_idx, cols = cases[ci].cols;
        dropout_rows_args d = {S, cols, (size_t)cases[ci].per_rows * cols, cases[ci].s0,
                               cases[ci].p, {ref_next(&g_input_rng), ref_next(&g_input_rng)}};
        const size_t all = (size_t)rows * cols, n = (size_t)S * cols;
        float *x_all = rand_floats(all, 1, 0), *x = malloc(n * 4), *want = malloc(n * 4);
        int32_t *idx = rand_ints((size_t)S, 0, rows);
        if (!x || !want) exit(99);
        if (S > 2) idx[S - 1] = idx[0]; /* a row twice */
        const uint32_t thr = philox_drop_threshold(d.p);
        const float scale = 1.0f / (1.0f - d.p);
        for (int s = 0; s < S; s++)
            for (int c = 0; c < cols; c++) {
                const size_t e = (size_t)idx[s] * cols + c, i = (size_t)s * cols + c;
                x[i] = x_all[e];
                const uint32_t sample = d.s0 + (uint32_t)(e / d.per), elem = (uint32_t)(e % d.per);
                want[i] = philox_draw(d.key.seed, d.key.stream, sample, elem) >= thr ? x[i] * scale
                                                                                    : 0.0f;
            }
        tensor t[] = {tensor_out("x", x, n), tensor_in("idx", idx, (size_t)S)};
        verdict v = v_new();
        if (exec_op(&v, be, t, 2, run_dropout_rows, &d, NULL)) v_bits(&v, "x", RES(t[0]), want, n);
        /* against the backend's dropout over every row, gathered */
        dropout_args da = {all, d.per, 0, d.s0, d.p, d.key, 1};
        float *dropped = drop_run(&v, be, x_all, da);
        for (int s = 0; dropped && s < S; s++)
            if (memcmp(dropped + (size_t)idx[s] * cols, want + (size_t)s * cols,
                       (size_t)cols * 4)) {
                v_fail(&v, "row %d (row %d of all): not dropout's over every row", s, idx[s]);
                break;
            }
        v_report(&v, "dropout_rows", "%d of %d rows x %d, per=%zu s0=%u p=%g", S, rows, cols,
                 d.per, d.s0, d.p);
        tensors_free(t, 2);
        free(x_all), free(x), free(want), free(idx), free(dropped);
    }
}

/* ================= layernorm_bwd's dropout ================= */

typedef struct {
    int rows, cols, inplace; /* inplace: dout and dx in 16 bits, dx in place of dout */
    bt_ln_bwd_types t;
    bt_ln_bwd_drop drop;
} ln_drop_args;

/* tensors: dout, dbranch, dgamma, dbeta, x, mean, rstd, gamma, out16, [dx] */
static bt_ptr ln_drop_dx(const ln_drop_args *q, tensor *t) { return q->inplace ? t[0].p : t[9].p; }

static void run_ln_bwd_drop(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    ln_drop_args *q = a;
    q->drop.out16 = t[8].p;
    be->layernorm_bwd(be, ln_drop_dx(q, t), t[2].p, t[3].p, t[0].p, t[1].p, t[4].p, t[5].p,
                      t[6].p, t[7].p, q->rows, q->cols, q->t, &q->drop);
}
/* The same as its ops: layernorm_bwd, then dropout of dx into out16. */
static void run_ln_bwd_then_dropout(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    ln_drop_args *q = a;
    const bt_ptr dx = ln_drop_dx(q, t);
    be->layernorm_bwd(be, dx, t[2].p, t[3].p, t[0].p, t[1].p, t[4].p, t[5].p, t[6].p, t[7].p,
                      q->rows, q->cols, q->t, NULL);
    be->dropout(be, BT_NO_PTR, dx, (size_t)q->rows * q->cols, q->drop.per_sample,
                q->drop.first_sample, q->drop.p, q->drop.key, q->t.dx, t[8].p, q->drop.kind16);
}

/* One case: the op with its dropout against the op and `dropout` after it,
 * bit for bit: dx, dgamma, dbeta and the dropped copy. */
static void check_ln_bwd_drop(bt_backend *be, ln_drop_args q, const float *x, const float *g,
                              const float *dout, const float *dbr, const float *dg,
                              const float *db, const float *mu, const float *rs) {
    const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols, r = (size_t)q.rows;
    const bt_dtype dt = q.drop.kind16;
    uint16_t *d16 = malloc(n * 2);
    if (!d16) exit(99);
    for (size_t i = 0; i < n; i++) d16[i] = bits16_of(dout[i], dt);
    tensor t[] = {q.inplace ? tensor_16bit("dout16", d16, n, true) : tensor_in("dout", dout, n),
                  tensor_in("dbranch", dbr, n), tensor_out("dgamma", dg, c),
                  tensor_out("dbeta", db, c), tensor_in("x", x, n), tensor_in("mean", mu, r),
                  tensor_in("rstd", rs, r), tensor_in("gamma", g, c),
                  tensor_16bit("dropped16", NULL, n, true), tensor_out("dx", NULL, n)};
    tensor u[10];
    memcpy(u, t, sizeof u);
    const int nt = q.inplace ? 9 : 10;
    verdict v = v_new();
    if (exec_op(&v, be, t, nt, run_ln_bwd_drop, &q, NULL) &&
        exec_op(&v, be, u, nt, run_ln_bwd_then_dropout, &q, NULL)) {
        if (q.inplace) {
            v_bits16(&v, "dx16 vs the ops", t[0].res, u[0].res, n);
        } else {
            v_bits(&v, "dx vs the ops", RES(t[9]), RES(u[9]), n);
        }
        v_bits(&v, "dgamma vs the ops", RES(t[2]), RES(u[2]), c);
        v_bits(&v, "dbeta vs the ops", RES(t[3]), RES(u[3]), c);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) kept += ((const uint16_t *)u[8].res)[i] != 0;
        if (v_bits16(&v, "dropped16 vs dropout after the op", t[8].res, u[8].res, n) &&
            q.drop.p > 0.0f && (kept == 0 || kept == n))
            v_fail(&v, "dropped16: %zu of %zu values kept: no mask to compare", kept, n);
    }
    v_report(&v, "layernorm_bwd", "%dx%d, branch's dropout p=%g per=%zu into %s, dx %s", q.rows,
             q.cols, (double)q.drop.p, q.drop.per_sample, dt == BT_BF16 ? "bf16" : "f16",
             q.inplace ? "16-bit in place of dout" : "fp32");
    tensors_free(t, 10);
    tensors_free(u, 10);
    free(d16);
}

void test_layernorm_bwd_dropout(bt_backend *be) {
    if (!want_op("layernorm_bwd")) return;
    static const struct {
        int rows, cols, per_rows; /* per_sample = per_rows * cols */
        float p;
        int quick;
    } cases[] = {/* a row past one work-group; many groups; BERT's row; past the rows
                  * kept in registers (1,024 columns) */
                 {65, 3, 13, 0.1f, 1}, {601, 5, 1, 0.25f, 1}, {256, 768, 128, 0.1f, 0},
                 {16, 1500, 4, 0.5f, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        if (skip_shape(cases[ci].quick)) continue;
        reseed("layernorm_bwd_dropout", ci);
        const int rows = cases[ci].rows, cols = cases[ci].cols;
        const size_t n = (size_t)rows * cols, c = (size_t)cols, r = (size_t)rows;
        float *x = rand_floats(n, 2.0, 0.5), *g = rand_floats(c, 0.1, 1.0),
              *dout = rand_floats(n, 1, 0), *dbr = rand_floats(n, 1, 0),
              *dg = rand_floats(c, 1, 0), *db = rand_floats(c, 1, 0);
        double *rx = ref_dup(x, n), *rg = ref_dup(g, c), *ro = ref_alloc(n * 8),
               *rmu = ref_alloc(r * 8), *rrs = ref_alloc(r * 8);
        ref_layernorm_fwd(ro, rmu, rrs, rx, rg, rg, rows, cols, 1e-5f); /* mean, rstd */
        float *mu = ref_alloc(r * 4), *rs = ref_alloc(r * 4);
        for (size_t i = 0; i < r; i++) mu[i] = (float)rmu[i], rs[i] = (float)rrs[i];
        for (int k = 0; k < 4; k++) { /* bf16, f16; dx in fp32, in 16 bits in place */
            /* with --quick (Oclgrind's time) past 65 x 3 bf16 into fp32 and f16
             * in place alone: the mask and the rounding are per element */
            if (g_quick && ci != 0 && (k == 1 || k == 2)) continue;
            const bt_dtype dt = k & 1 ? BT_F16 : BT_BF16;
            const int inplace = k >= 2;
            ln_drop_args q = {rows, cols, inplace,
                              (bt_ln_bwd_types){dt, BT_F32, BT_F32, inplace ? dt : BT_F32,
                                                inplace ? dt : BT_F32},
                              (bt_ln_bwd_drop){BT_NO_PTR, dt, (size_t)cases[ci].per_rows * cols,
                                               (uint32_t)ci * 5 + 1, cases[ci].p, {0, 0}}};
            q.drop.key.seed = ref_next(&g_input_rng);
            q.drop.key.stream = ref_next(&g_input_rng);
            check_ln_bwd_drop(be, q, x, g, dout, dbr, dg, db, mu, rs);
        }
        free(x), free(g), free(dout), free(dbr), free(rx), free(rg), free(ro), free(rmu);
        free(rrs), free(mu), free(rs), free(dg), free(db);
    }
}
