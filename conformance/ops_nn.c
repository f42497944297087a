/* Conformance checks of the neural-network ops: embed_fwd/bwd,
 * layernorm_fwd/bwd, gelu and tanh forward/backward and softmax_fwd/bwd
 * (dropout: ops_dropout.c). Backward references are checked against finite
 * differences. */
#include "backends/common/half.h"
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ================= embed_fwd / embed_bwd ================= */

typedef struct {
    int B, T, C, V, TV, P, pad;
} embed_args;
static void run_embed_fwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    embed_args *e = a; /* out, ids, tt, wte, wpe, wtt */
    be->embed_fwd(be, t[0].p, t[1].p, t[2].p, t[3].p, t[4].p, t[5].p, e->B, e->T, e->C);
}
static void run_embed_bwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    embed_args *e = a; /* dwte, dwpe, dwtt, dout, ids, tt, ids' links */
    be->embed_bwd(be, t[0].p, t[1].p, t[2].p, t[3].p, t[4].p, t[6].p, t[5].p, e->B, e->T, e->C,
                  e->V, e->TV, e->pad);
}

typedef struct {
    embed_args e;
    const int32_t *ids, *tt;
    double *wte, *wpe, *wtt;
} emb_fd_ctx;
static void fwd_embed(void *c, double *out) {
    emb_fd_ctx *x = c;
    ref_embed_fwd(out, x->ids, x->tt, x->wte, x->wpe, x->wtt, x->e.B, x->e.T, x->e.C);
}

void test_embed(bt_backend *be) {
    if (!want_op("embed_fwd") && !want_op("embed_bwd")) return;
    static const int shapes[][7] = {/* B, T, C, V, TV, pad_id, quick (-1: big) */
                                    {1, 1, 1, 2, 1, -1, 1},  {2, 5, 7, 11, 2, 0, 0},
                                    {3, 17, 33, 50, 3, 1, 1}, {2, 9, 20, 6, 2, -1, 0},
                                    {2, 128, 768, 4096, 2, 0, -1},
                                    /* past the devices' 64-token chunks of type rows, and
                                     * thousands of tokens on few ids (long chains) */
                                    {1, 65, 3, 4, 2, -1, 1},  {4, 300, 37, 13, 2, 3, 1},
                                    {16, 128, 64, 5000, 3, 0, 0},
                                    {32, 128, 768, 4096, 2, 0, -1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const int *sh = shapes[si];
        if (skip_shape(sh[6] == 1)) continue;
        reseed("embed", si);
        embed_args e = {sh[0], sh[1], sh[2], sh[3], sh[4], sh[1] + 3, sh[5]};
        size_t N = (size_t)e.B * e.T, C = (size_t)e.C, nte = (size_t)e.V * C,
               npe = (size_t)e.P * C, ntt = (size_t)e.TV * C;
        int32_t *ids = rand_ints(N, 0, e.V), *tt = rand_ints(N, 0, e.TV);
        if (e.pad >= 0)
            for (size_t i = 0; i < N; i++)
                if (ref_int(&g_input_rng, 5) == 0) ids[i] = e.pad; /* ~20% padding tokens */
        float *wte = rand_floats(nte, 1, 0), *wpe = rand_floats(npe, 1, 0), *wtt = rand_floats(ntt, 1, 0),
              *dout = rand_floats(N * C, 1, 0);
        double *rte = ref_dup(wte, nte), *rpe = ref_dup(wpe, npe), *rtt = ref_dup(wtt, ntt),
               *rd = ref_dup(dout, N * C);
        if (want_op("embed_fwd")) {
            double *r = ref_alloc(N * C * sizeof *r), *mag = ref_alloc(N * C * sizeof *mag);
            double *a1 = ref_abs(wte, nte), *a2 = ref_abs(wpe, npe), *a3 = ref_abs(wtt, ntt);
            ref_embed_fwd(r, ids, tt, rte, rpe, rtt, e.B, e.T, e.C);
            ref_embed_fwd(mag, ids, tt, a1, a2, a3, e.B, e.T, e.C);
            tensor t[] = {tensor_out("out", NULL, N * C), tensor_in("ids", ids, N),
                          tensor_in("type_ids", tt, N), tensor_in("wte", wte, nte),
                          tensor_in("wpe", wpe, npe), tensor_in("wtt", wtt, ntt)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 6, run_embed_fwd, &e, NULL))
                v_nmse(&v, "out", RES(t[0]), r, mag, N * C, THR_ROUND);
            v_report(&v, "embed_fwd", "B%d T%d C%d V%d TV%d", e.B, e.T, e.C, e.V, e.TV);
            tensors_free(t, 6);
            free(r), free(mag), free(a1), free(a2), free(a3);
        }
        if (want_op("embed_bwd")) { /* wte, wpe, wtt double as the nonzero initial gradients */
            double *gte = ref_dup(wte, nte), *gpe = ref_dup(wpe, npe), *gtt = ref_dup(wtt, ntt);
            ref_embed_bwd(gte, gpe, gtt, rd, ids, tt, e.B, e.T, e.C, e.pad);
            double *m1 = ref_abs(wte, nte), *m2 = ref_abs(wpe, npe), *m3 = ref_abs(wtt, ntt),
                   *ad = ref_abs(dout, N * C);
            ref_embed_bwd(m1, m2, m3, ad, ids, tt, e.B, e.T, e.C, e.pad);
            int32_t *lk = host_links(ids, (int)N, e.pad, "embed_bwd");
            tensor t[] = {tensor_out("dwte", wte, nte), tensor_out("dwpe", wpe, npe),
                          tensor_out("dwtt", wtt, ntt), tensor_in("dout", dout, N * C),
                          tensor_in("ids", ids, N), tensor_in("type_ids", tt, N),
                          tensor_in("links", lk, 2 * N)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 7, run_embed_bwd, &e, NULL)) {
                v_nmse(&v, "dwte", RES(t[0]), gte, m1, nte, THR_MATH);
                v_nmse(&v, "dwpe", RES(t[1]), gpe, m2, npe, THR_MATH);
                v_nmse(&v, "dwtt", RES(t[2]), gtt, m3, ntt, THR_MATH);
                if (e.pad >= 0 && memcmp(RES(t[0]) + (size_t)e.pad * C, wte + (size_t)e.pad * C, C * 4))
                    v_fail(&v, "pad_id row of dwte modified");
                if (memcmp(RES(t[1]) + (size_t)e.T * C, wpe + (size_t)e.T * C, (npe - (size_t)e.T * C) * 4))
                    v_fail(&v, "dwpe rows >= T modified");
            }
            v_report(&v, "embed_bwd", "B%d T%d C%d V%d pad%d +=", e.B, e.T, e.C, e.V, e.pad);
            tensors_free(t, 7);
            free(gte), free(gpe), free(gtt), free(m1), free(m2), free(m3), free(ad), free(lk);
        }
        if (want_op("embed_bwd") && g_check_references) { /* adjoint of embed_fwd, minus the pad row */
            verdict f = v_new();
            double *ate = ref_zalloc(nte * 8), *ape = ref_zalloc(npe * 8), *att = ref_zalloc(ntt * 8);
            ref_embed_bwd(ate, ape, att, rd, ids, tt, e.B, e.T, e.C, e.pad);
            emb_fd_ctx ctx = {e, ids, tt, rte, rpe, rtt};
            for (int s = 0; s < 9; s++) {
                int which = s / 3;
                double *par = which == 0 ? rte : which == 1 ? rpe : rtt,
                       *an = which == 0 ? ate : which == 1 ? ape : att;
                size_t np = which == 0 ? nte : which == 1 ? npe : ntt;
                size_t row = which == 0 ? (size_t)ids[ref_int(&g_fd_rng, (int)N)]
                             : which == 1 ? (size_t)ref_int(&g_fd_rng, e.T)
                                          : (size_t)tt[ref_int(&g_fd_rng, (int)N)];
                size_t idx = row * C + (size_t)ref_int(&g_fd_rng, e.C);
                if (which == 0 && (int)row == e.pad) { /* excluded: gradient must be 0 */
                    if (an[idx] != 0.0) v_fail(&f, "pad row gradient %g != 0", an[idx]);
                    continue;
                }
                double fd = ref_fd(fwd_embed, &ctx, N * C, rd, par, idx, FD_H);
                fd_point(&f, which == 0 ? "dwte" : which == 1 ? "dwpe" : "dwtt", fd, an[idx],
                         1e-4 * max_abs(an, np));
            }
            FD_REPORT(f, "embed_bwd", "B%d T%d C%d pad%d vs FD", e.B, e.T, e.C, e.pad);
            free(ate), free(ape), free(att);
        }
        free(ids), free(tt), free(wte), free(wpe), free(wtt), free(dout);
        free(rte), free(rpe), free(rtt), free(rd);
    }
}

/* ================= layernorm ================= */

typedef struct {
    int rows, cols, inplace;
    float eps;
    bt_dtype round16; /* layernorm_bwd's rounding of dx, layernorm_fwd's of out (BT_F32: none) */
    bt_dtype x_dtype; /* layernorm_bwd's x: BT_F32, or 16 bits */
    bt_dtype dbranch_dtype; /* layernorm_bwd's dbranch: BT_F32, or 16 bits */
    bt_dtype dout_dtype, dx_dtype; /* layernorm_bwd's dout and dx: BT_F32, or 16 bits */
    bool no_branch; /* run_ln_bwd_branch without the branch's gradient (BT_NO_PTR) */
} layernorm_args;

/* layernorm_bwd's types (bt_ln_bwd_types) from q. */
static bt_ln_bwd_types ln_types(const layernorm_args *q) {
    return (bt_ln_bwd_types){q->round16, q->x_dtype, q->dbranch_dtype, q->dout_dtype,
                             q->dx_dtype};
}
static void run_ln_fwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    layernorm_args *q = a; /* out, mean, rstd, x, gamma, beta */
    be->layernorm_fwd(be, t[0].p, t[1].p, t[2].p, t[3].p, t[4].p, t[5].p, q->rows, q->cols, q->eps,
                      q->round16);
}

/* run_ln_fwd's tensors for q's shape: out, mean, rstd, x, gamma, beta. */
static void ln_fwd_tensors(tensor t[6], const layernorm_args *q, const float *x, const float *g,
                           const float *b) {
    const size_t n = (size_t)q->rows * q->cols, c = (size_t)q->cols, r = (size_t)q->rows;
    t[0] = tensor_out("out", NULL, n);
    t[1] = tensor_out("mean", NULL, r);
    t[2] = tensor_out("rstd", NULL, r);
    t[3] = tensor_in("x", x, n);
    t[4] = tensor_in("gamma", g, c);
    t[5] = tensor_in("beta", b, c);
}

/* layernorm_fwd with out rounded to q.round16 (16-bit storage) gives the
 * bits of the op in fp32 with out rounded after it (nearest even, as
 * round16): out, mean and rstd. */
static void check_ln_fwd16(bt_backend *be, layernorm_args q, const float *x, const float *g,
                           const float *b) {
    const size_t n = (size_t)q.rows * q.cols, r = (size_t)q.rows;
    tensor t[6], u[6];
    ln_fwd_tensors(t, &q, x, g, b);
    ln_fwd_tensors(u, &q, x, g, b);
    layernorm_args q32 = q;
    q32.round16 = BT_F32;
    verdict v = v_new();
    if (exec_op(&v, be, t, 6, run_ln_fwd, &q, NULL) &&
        exec_op(&v, be, u, 6, run_ln_fwd, &q32, NULL)) {
        float *want = malloc(n * sizeof *want);
        if (!want) exit(99);
        for (size_t i = 0; i < n; i++) want[i] = widen16(bits16_of(RES(u[0])[i], q.round16), q.round16);
        v_bits(&v, "out vs fp32 out rounded", RES(t[0]), want, n);
        v_bits(&v, "mean vs fp32 run", RES(t[1]), RES(u[1]), r);
        v_bits(&v, "rstd vs fp32 run", RES(t[2]), RES(u[2]), r);
        free(want);
    }
    v_report(&v, "layernorm_fwd", "%dx%d eps=%g out rounded to %s", q.rows, q.cols, q.eps,
             q.round16 == BT_BF16 ? "bf16" : "f16");
    tensors_free(t, 6);
    tensors_free(u, 6);
}
static void run_ln_bwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    layernorm_args *q = a; /* dout, dgamma, dbeta, x, mean, rstd, gamma, [dx] */
    be->layernorm_bwd(be, q->inplace ? t[0].p : t[7].p, t[1].p, t[2].p, t[0].p, BT_NO_PTR, t[3].p,
                      t[4].p, t[5].p, t[6].p, q->rows, q->cols, ln_types(q), NULL);
}

/* layernorm_bwd with x given in q.x_dtype (16 bits: the stash's copy) gives
 * the bits of the op given the same values widened to fp32: dx, dgamma,
 * dbeta. */
static void check_ln_bwd_x16(bt_backend *be, layernorm_args q, const float *x, const float *g,
                             const float *dout, const float *dg, const float *db, const float *mu,
                             const float *rs) {
    const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols, r = (size_t)q.rows;
    const int inpl = q.inplace, nt = inpl ? 7 : 8, o = inpl ? 0 : 7;
    uint16_t *x16 = malloc(n * sizeof *x16);
    float *xw = malloc(n * sizeof *xw);
    if (!x16 || !xw) exit(99);
    for (size_t i = 0; i < n; i++) {
        x16[i] = bits16_of(x[i], q.x_dtype);
        xw[i] = widen16(x16[i], q.x_dtype);
    }
    tensor t[] = {inpl ? tensor_out("dout", dout, n) : tensor_in("dout", dout, n),
                  tensor_out("dgamma", dg, c), tensor_out("dbeta", db, c),
                  tensor_16bit("x16", x16, n, false), tensor_in("mean", mu, r),
                  tensor_in("rstd", rs, r), tensor_in("gamma", g, c),
                  tensor_out("dx", NULL, n)};
    tensor u[8];
    memcpy(u, t, sizeof u);
    u[3] = tensor_in("x widened", xw, n);
    layernorm_args q32 = q;
    q32.x_dtype = BT_F32;
    verdict v = v_new();
    if (exec_op(&v, be, t, nt, run_ln_bwd, &q, NULL) &&
        exec_op(&v, be, u, nt, run_ln_bwd, &q32, NULL)) {
        v_bits(&v, "dx vs x widened", RES(t[o]), RES(u[o]), n);
        v_bits(&v, "dgamma vs x widened", RES(t[1]), RES(u[1]), c);
        v_bits(&v, "dbeta vs x widened", RES(t[2]), RES(u[2]), c);
    }
    v_report(&v, "layernorm_bwd", "%dx%d +=%s dx %s, x in %s", q.rows, q.cols,
             inpl ? " dx=dout" : "", q.round16 == BT_BF16 ? "bf16" : "f16",
             q.x_dtype == BT_BF16 ? "bf16" : "f16");
    tensors_free(t, 8);
    tensors_free(u, 8);
    free(x16), free(xw);
}

/* layernorm_bwd with a branch's gradient: dout, dbranch, dgamma, dbeta, x,
 * mean, rstd, gamma, [dx], and for the unfused ops dbranch's rounded copy. */
static void run_ln_bwd_branch(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    layernorm_args *q = a;
    be->layernorm_bwd(be, q->inplace ? t[0].p : t[8].p, t[2].p, t[3].p, t[0].p,
                      q->no_branch ? BT_NO_PTR : t[1].p, t[4].p, t[5].p, t[6].p, t[7].p, q->rows,
                      q->cols, ln_types(q), NULL);
}
/* The same as its ops: dbranch rounded as stored (a copy), added to dout
 * (into dx, or dout in place), layernorm_bwd of the sum. */
static void run_ln_bwd_branch_unfused(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    layernorm_args *q = a;
    const size_t n = (size_t)q->rows * q->cols;
    const bt_ptr sum = q->inplace ? t[0].p : t[8].p;
    be->copy(be, t[9].p, t[1].p, n * 4);
    if (q->round16 != BT_F32) be->round16(be, t[9].p, q->round16, n);
    be->add(be, sum, t[0].p, t[9].p, n);
    be->layernorm_bwd(be, sum, t[2].p, t[3].p, sum, BT_NO_PTR, t[4].p, t[5].p, t[6].p, t[7].p,
                      q->rows, q->cols,
                      (bt_ln_bwd_types){q->round16, q->x_dtype, BT_F32, BT_F32, BT_F32}, NULL);
}

/* layernorm_bwd given a residual branch's gradient dbranch beside dout gives
 * the bits of round16 (where q.round16) of a copy of dbranch, add and
 * layernorm_bwd of the sum: dx, dgamma, dbeta; dbranch unchanged. */
static void check_ln_bwd_branch(bt_backend *be, layernorm_args q, const float *x, const float *g,
                                const float *dout, const float *dbr, const float *dg,
                                const float *db, const float *mu, const float *rs) {
    const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols, r = (size_t)q.rows;
    const int inpl = q.inplace, o = inpl ? 0 : 8;
    tensor t[] = {inpl ? tensor_out("dout", dout, n) : tensor_in("dout", dout, n),
                  tensor_in("dbranch", dbr, n), tensor_out("dgamma", dg, c),
                  tensor_out("dbeta", db, c), tensor_in("x", x, n), tensor_in("mean", mu, r),
                  tensor_in("rstd", rs, r), tensor_in("gamma", g, c),
                  tensor_out("dx", NULL, n), tensor_out("dbranch rounded", NULL, n)};
    tensor u[10];
    memcpy(u, t, sizeof u);
    u[0] = tensor_out("dout", dout, n);
    if (!inpl) u[8] = tensor_out("dx", NULL, n);
    verdict v = v_new();
    if (exec_op(&v, be, t, inpl ? 8 : 9, run_ln_bwd_branch, &q, NULL) &&
        exec_op(&v, be, u, 10, run_ln_bwd_branch_unfused, &q, NULL)) {
        v_bits(&v, "dx vs the ops", RES(t[o]), RES(u[o]), n);
        v_bits(&v, "dgamma vs the ops", RES(t[2]), RES(u[2]), c);
        v_bits(&v, "dbeta vs the ops", RES(t[3]), RES(u[3]), c);
    }
    v_report(&v, "layernorm_bwd", "%dx%d +=%s%s, with a branch's gradient", q.rows, q.cols,
             inpl ? " dx=dout" : "",
             q.round16 == BT_BF16 ? " dx bf16" : q.round16 == BT_F16 ? " dx f16" : "");
    tensors_free(t, 10);
    tensors_free(u, 10);
}

/* layernorm_bwd given dbranch in q.round16's 16 bits (a GEMM's 16-bit
 * result: fp32 values cast) gives the bits of the op given the fp32 values,
 * which it rounds as it reads them: dx, dgamma, dbeta. */
static void check_ln_bwd_branch16(bt_backend *be, layernorm_args q, const float *x,
                                  const float *g, const float *dout, const float *dbr,
                                  const float *dg, const float *db, const float *mu,
                                  const float *rs) {
    const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols, r = (size_t)q.rows;
    const int inpl = q.inplace, o = inpl ? 0 : 8;
    uint16_t *b16 = malloc(n * sizeof *b16);
    if (!b16) exit(99);
    for (size_t i = 0; i < n; i++) b16[i] = bits16_of(dbr[i], q.round16);
    tensor t[] = {inpl ? tensor_out("dout", dout, n) : tensor_in("dout", dout, n),
                  tensor_16bit("dbranch16", b16, n, false), tensor_out("dgamma", dg, c),
                  tensor_out("dbeta", db, c), tensor_in("x", x, n), tensor_in("mean", mu, r),
                  tensor_in("rstd", rs, r), tensor_in("gamma", g, c), tensor_out("dx", NULL, n)};
    tensor u[9];
    memcpy(u, t, sizeof u);
    u[1] = tensor_in("dbranch", dbr, n);
    layernorm_args q16 = q;
    q16.dbranch_dtype = q.round16;
    q.dbranch_dtype = BT_F32;
    verdict v = v_new();
    if (exec_op(&v, be, t, inpl ? 8 : 9, run_ln_bwd_branch, &q16, NULL) &&
        exec_op(&v, be, u, inpl ? 8 : 9, run_ln_bwd_branch, &q, NULL)) {
        v_bits(&v, "dx vs dbranch in fp32", RES(t[o]), RES(u[o]), n);
        v_bits(&v, "dgamma vs dbranch in fp32", RES(t[2]), RES(u[2]), c);
        v_bits(&v, "dbeta vs dbranch in fp32", RES(t[3]), RES(u[3]), c);
    }
    v_report(&v, "layernorm_bwd", "%dx%d +=%s, with a branch's gradient in %s", q.rows, q.cols,
             inpl ? " dx=dout" : "", q.round16 == BT_BF16 ? "bf16" : "f16");
    tensors_free(t, 9);
    tensors_free(u, 9);
    free(b16);
}

/* The n values h of dt widened to floats (new memory). */
static float *ln_widened(const uint16_t *h, bt_dtype dt, size_t n) {
    float *w = malloc(n * sizeof *w);
    if (!w) exit(99);
    for (size_t i = 0; i < n; i++) w[i] = widen16(h[i], dt);
    return w;
}

/* layernorm_bwd with a branch's gradient (dbr; NULL: none) and dout, dx
 * or both in q.round16's 16 bits (form 0: dout, 1: dx, 2: both, 3: both, dx
 * in place of dout), x in q.x_dtype, gives the bits of the op in fp32 on
 * the 16-bit values widened: dx (widened from 16 bits), dgamma, dbeta. The
 * kernels branch on each of these choices inside loops whose trip counts
 * differ between work-items, the shape PoCL 3.1 once miscompiled. */
static void check_ln_bwd_io16(bt_backend *be, layernorm_args q, int form, const float *x,
                              const float *g, const float *dout, const float *dbr,
                              const float *dg, const float *db, const float *mu,
                              const float *rs) {
    const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols, r = (size_t)q.rows;
    const bt_dtype dt = q.round16;
    const bool in16 = form != 1, out16 = form != 0, inpl = form == 3, x16 = q.x_dtype != BT_F32;
    uint16_t *d16 = malloc(n * sizeof *d16), *xh = malloc(n * sizeof *xh);
    if (!d16 || !xh) exit(99);
    for (size_t i = 0; i < n; i++) {
        d16[i] = bits16_of(dout[i], dt);
        xh[i] = x16 ? bits16_of(x[i], q.x_dtype) : 0;
    }
    float *dw = ln_widened(d16, dt, n), *xw = x16 ? ln_widened(xh, q.x_dtype, n) : NULL;
    layernorm_args q16 = q, q32 = q;
    q16.inplace = inpl;
    q16.dout_dtype = in16 ? dt : BT_F32;
    q16.dx_dtype = out16 ? dt : BT_F32;
    q16.no_branch = q32.no_branch = !dbr;
    q32.inplace = 0;
    q32.x_dtype = BT_F32;
    tensor t[] = {in16 ? tensor_16bit("dout16", d16, n, inpl) : tensor_in("dout", dout, n),
                  tensor_in("dbranch", dbr ? dbr : dout, n), tensor_out("dgamma", dg, c),
                  tensor_out("dbeta", db, c),
                  x16 ? tensor_16bit("x16", xh, n, false) : tensor_in("x", x, n),
                  tensor_in("mean", mu, r), tensor_in("rstd", rs, r), tensor_in("gamma", g, c),
                  out16 ? tensor_16bit("dx16", NULL, n, true) : tensor_out("dx", NULL, n)};
    tensor u[9];
    memcpy(u, t, sizeof u);
    u[0] = in16 ? tensor_in("dout widened", dw, n) : tensor_in("dout", dout, n);
    if (x16) u[4] = tensor_in("x widened", xw, n);
    u[8] = tensor_out("dx", NULL, n);
    verdict v = v_new();
    if (exec_op(&v, be, t, inpl ? 8 : 9, run_ln_bwd_branch, &q16, NULL) &&
        exec_op(&v, be, u, 9, run_ln_bwd_branch, &q32, NULL)) {
        const tensor *dx = &t[inpl ? 0 : 8];
        float *got = out16 ? ln_widened(dx->res, dt, n) : NULL;
        v_bits(&v, "dx vs fp32", got ? got : RES(*dx), RES(u[8]), n);
        v_bits(&v, "dgamma vs fp32", RES(t[2]), RES(u[2]), c);
        v_bits(&v, "dbeta vs fp32", RES(t[3]), RES(u[3]), c);
        free(got);
    }
    static const char *const forms[] = {"dout", "dx", "dout and dx", "dout and dx in place"};
    v_report(&v, "layernorm_bwd", "%dx%d +=, %s, %s in %s%s", q.rows, q.cols,
             dbr ? "with a branch's gradient" : "no branch", forms[form],
             dt == BT_BF16 ? "bf16" : "f16", x16 ? ", x in 16 bits" : "");
    tensors_free(t, 9);
    tensors_free(u, 9);
    free(d16), free(xh), free(dw), free(xw);
}

typedef struct {
    layernorm_args q;
    double *x, *g, *b;
} ln_fd_ctx;
static void fwd_ln(void *c, double *out) {
    ln_fd_ctx *x = c;
    ref_layernorm_fwd(out, NULL, NULL, x->x, x->g, x->b, x->q.rows, x->q.cols, x->q.eps);
}

/* layernorm_bwd of dout at x (with the float mean mu and rstd rs a forward
 * saves) into dgamma = dg, dbeta = db and dx (dout itself when q.inplace),
 * against the float64 reference; with q.round16, which rounds dout as the
 * op reads it, the reference takes dout rounded by half.h, and the op is
 * checked against the same op unrounded given dout rounded: dx must be its
 * values rounded by half.h, bit for bit, and dgamma, dbeta its bits. */
static void check_ln_bwd(bt_backend *be, layernorm_args q, const float *x, const float *g,
                         const float *dout, const float *dg, const float *db, const float *mu,
                         const float *rs) {
    const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols, r = (size_t)q.rows;
    const int inpl = q.inplace;
    float *dr = ref_alloc(n * 4); /* dout as the op reads it */
    for (size_t i = 0; i < n; i++)
        dr[i] = q.round16 == BT_F32 ? dout[i] : round16_host(dout[i], q.round16);
    double *rx = ref_dup(x, n), *rg = ref_dup(g, c), *rd = ref_dup(dr, n);
    double *dmu = ref_dup(mu, r), *drs = ref_dup(rs, r), *rdx = ref_alloc(n * 8),
           *rdg = ref_dup(dg, c), *rdb = ref_dup(db, c);
    ref_layernorm_bwd(rdx, rdg, rdb, rd, rx, dmu, drs, rg, q.rows, q.cols);
    double *mdx = ref_alloc(n * 8), *mdg = ref_abs(dg, c), *mdb = ref_abs(db, c);
    ref_layernorm_bwd_mag(mdx, rd, rx, dmu, drs, rg, q.rows, q.cols);
    for (size_t i = 0; i < n; i++) {
        mdg[i % c] += fabs(rd[i] * (rx[i] - dmu[i / c]) * drs[i / c]);
        mdb[i % c] += fabs(rd[i]);
    }
    tensor t[] = {inpl ? tensor_out("dout", dout, n) : tensor_in("dout", dout, n),
                  tensor_out("dgamma", dg, c), tensor_out("dbeta", db, c),
                  tensor_in("x", x, n), tensor_in("mean", mu, r),
                  tensor_in("rstd", rs, r), tensor_in("gamma", g, c),
                  tensor_out("dx", NULL, n)};
    tensor u[8];
    memcpy(u, t, sizeof u);
    u[0] = inpl ? tensor_out("dout rounded", dr, n) : tensor_in("dout rounded", dr, n);
    verdict v = v_new();
    if (exec_op(&v, be, t, inpl ? 7 : 8, run_ln_bwd, &q, NULL)) {
        /* with cols = 1, dx is identically 0 and only mag gives it a scale */
        v_nmse(&v, "dx", RES(t[inpl ? 0 : 7]), rdx, mdx, n, round16_thr(q.round16));
        v_nmse(&v, "dgamma", RES(t[1]), rdg, mdg, c, THR_MATH);
        v_nmse(&v, "dbeta", RES(t[2]), rdb, mdb, c, THR_MATH);
    }
    layernorm_args q32 = q;
    q32.round16 = BT_F32;
    if (q.round16 != BT_F32 && v.ok && exec_op(&v, be, u, inpl ? 7 : 8, run_ln_bwd, &q32, NULL)) {
        const float *got = RES(t[inpl ? 0 : 7]), *f32 = RES(u[inpl ? 0 : 7]);
        for (size_t i = 0; i < n; i++) {
            const float want = round16_host(f32[i], q.round16);
            if (memcmp(&want, &got[i], 4) != 0) {
                v_fail(&v, "dx[%zu] = %.9g, the fp32 op's %.9g rounded is %.9g", i,
                       (double)got[i], (double)f32[i], (double)want);
                break;
            }
        }
        v_bits(&v, "dgamma vs unrounded on dout rounded", RES(t[1]), RES(u[1]), c);
        v_bits(&v, "dbeta vs unrounded on dout rounded", RES(t[2]), RES(u[2]), c);
    }
    tensors_free(u, 8);
    v_report(&v, "layernorm_bwd", "%dx%d +=%s%s", q.rows, q.cols, inpl ? " dx=dout" : "",
             q.round16 == BT_BF16 ? " dx bf16" : q.round16 == BT_F16 ? " dx f16" : "");
    tensors_free(t, 8);
    free(rx), free(rg), free(rd), free(dmu), free(drs), free(rdx), free(rdg), free(rdb);
    free(mdx), free(mdg), free(mdb), free(dr);
}

/* layernorm_bwd past the devices' one-pass limit (64 rows) of the parameter
 * gradients: whole and partial row chunks, up to a BERT-base batch of
 * tokens, dx apart and in place. On GPUs (rows in registers) each work-group
 * of 8 rows writes a row of partials: 601 rows make 76 of them, past the 64
 * that are summed in one pass, in a case quick enough for Oclgrind. */
static void test_layernorm_bwd_chunks(bt_backend *be) {
    static const matrix_shape shapes[] = {
        {65, 3, 1, 0}, {200, 37, 1, 0}, {601, 5, 1, 0}, {4100, 768, 0, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (skip_shape(shapes[si].quick)) continue;
        reseed("layernorm_bwd_chunks", si);
        layernorm_args q = {.rows = shapes[si].r, .cols = shapes[si].c, .eps = 1e-5f};
        const size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols, r = (size_t)q.rows;
        float *x = rand_floats(n, 2.0, 0.5), *g = rand_floats(c, 0.1, 1.0),
              *dout = rand_floats(n, 1, 0), *dg = rand_floats(c, 1, 0), *db = rand_floats(c, 1, 0);
        double *rx = ref_dup(x, n), *rg = ref_dup(g, c), *ro = ref_alloc(n * 8),
               *rmu = ref_alloc(r * 8), *rrs = ref_alloc(r * 8);
        ref_layernorm_fwd(ro, rmu, rrs, rx, rg, rg, q.rows, q.cols, q.eps); /* for mean, rstd */
        float *mu = ref_alloc(r * 4), *rs = ref_alloc(r * 4);
        for (size_t i = 0; i < r; i++) mu[i] = (float)rmu[i], rs[i] = (float)rrs[i];
        float *dbr = rand_floats(n, 1, 0); /* a residual branch's gradient */
        for (int k = 0; k < 4; k++) { /* fp32 apart and in place; bf16 apart, f16 in place */
            /* with --quick (Oclgrind's time) the 16-bit dx at 65 x 3 alone: its
             * rounding is per element, the larger shapes' chunks the same for
             * every dtype */
            if (g_quick && si != 0 && k >= 2) continue;
            q.inplace = k & 1;
            q.round16 = k < 2 ? BT_F32 : k == 2 ? BT_BF16 : BT_F16;
            check_ln_bwd(be, q, x, g, dout, dg, db, mu, rs);
            check_ln_bwd_branch(be, q, x, g, dout, dbr, dg, db, mu, rs);
            /* the 16-bit inputs and outputs below: with --quick at 65 x 3 alone,
             * where most lanes of a row have no column */
            if (k < 2) continue;
            check_ln_bwd_branch16(be, q, x, g, dout, dbr, dg, db, mu, rs);
            for (int form = 0; form < 4; form++) {
                check_ln_bwd_io16(be, q, form, x, g, dout, dbr, dg, db, mu, rs);
                check_ln_bwd_io16(be, q, form, x, g, dout, NULL, dg, db, mu, rs);
                q.x_dtype = q.round16;
                check_ln_bwd_io16(be, q, form, x, g, dout, dbr, dg, db, mu, rs);
                q.x_dtype = BT_F32;
            }
            q.x_dtype = q.round16; /* the same with x in 16 bits */
            check_ln_bwd_x16(be, q, x, g, dout, dg, db, mu, rs);
            q.x_dtype = BT_F32;
        }
        free(x), free(g), free(dout), free(dg), free(db), free(rx), free(rg), free(ro);
        free(rmu), free(rrs), free(mu), free(rs), free(dbr);
    }
}

void test_layernorm(bt_backend *be) {
    if (!want_op("layernorm_fwd") && !want_op("layernorm_bwd")) return;
    if (want_op("layernorm_bwd")) test_layernorm_bwd_chunks(be);
    for (size_t si = 0; si < sizeof MATRIX_SHAPES / sizeof *MATRIX_SHAPES; si++) {
        if (skip_shape(MATRIX_SHAPES[si].quick)) continue;
        reseed("layernorm", si);
        layernorm_args q = {.rows = MATRIX_SHAPES[si].r, .cols = MATRIX_SHAPES[si].c,
                            .eps = (si & 1) || MATRIX_SHAPES[si].big ? 1e-12f : 1e-5f};
        size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols, r = (size_t)q.rows;
        float *x = rand_floats(n, 2.0, 0.5), *g = rand_floats(c, 0.1, 1.0), *b = rand_floats(c, 0.1, 0.0);
        float *dout = rand_floats(n, 1, 0), *dg = rand_floats(c, 1, 0), *db = rand_floats(c, 1, 0);
        double *rx = ref_dup(x, n), *rg = ref_dup(g, c), *rb = ref_dup(b, c), *rd = ref_dup(dout, n);
        double *ro = ref_alloc(n * 8), *rmu = ref_alloc(r * 8), *rrs = ref_alloc(r * 8);
        ref_layernorm_fwd(ro, rmu, rrs, rx, rg, rb, q.rows, q.cols, q.eps);
        float *mu = ref_alloc(r * 4), *rs = ref_alloc(r * 4);
        for (size_t i = 0; i < r; i++) mu[i] = (float)rmu[i], rs[i] = (float)rrs[i];
        if (want_op("layernorm_fwd")) {
            tensor t[6];
            ln_fwd_tensors(t, &q, x, g, b);
            double *mo = ref_alloc(n * 8), *mm = ref_zalloc(r * 8); /* |terms| */
            for (size_t i = 0; i < n; i++) {
                mo[i] = fabs(ro[i] - rb[i % c]) + fabs(rb[i % c]);
                mm[i / c] += fabs(rx[i]) / (double)c;
            }
            verdict v = v_new();
            if (exec_op(&v, be, t, 6, run_ln_fwd, &q, NULL)) {
                v_nmse(&v, "out", RES(t[0]), ro, mo, n, THR_MATH);
                v_nmse(&v, "mean", RES(t[1]), rmu, mm, r, THR_MATH);
                v_nmse(&v, "rstd", RES(t[2]), rrs, NULL, r, THR_MATH);
            }
            free(mo), free(mm);
            v_report(&v, "layernorm_fwd", "%dx%d eps=%g", q.rows, q.cols, q.eps);
            tensors_free(t, 6);
            for (int k = 0; k < 2; k++) {
                q.round16 = k ? BT_F16 : BT_BF16;
                check_ln_fwd16(be, q, x, g, b);
            }
            q.round16 = BT_F32;
        }
        for (int k = 0; k < 4 && want_op("layernorm_bwd"); k++) {
            q.inplace = k & 1;
            q.round16 = k < 2 ? BT_F32 : k == 2 ? BT_BF16 : BT_F16;
            check_ln_bwd(be, q, x, g, dout, dg, db, mu, rs);
            if (k < 2) continue;
            q.x_dtype = q.round16; /* the same with x in 16 bits */
            check_ln_bwd_x16(be, q, x, g, dout, dg, db, mu, rs);
            q.x_dtype = BT_F32;
        }
        q.round16 = BT_F32;
        if (want_op("layernorm_bwd") && g_check_references) {
            verdict f = v_new();
            double *adx = ref_alloc(n * 8), *adg = ref_zalloc(c * 8), *adb = ref_zalloc(c * 8);
            ref_layernorm_bwd(adx, adg, adb, rd, rx, rmu, rrs, rg, q.rows, q.cols);
            ln_fd_ctx ctx = {q, rx, rg, rb};
            for (int s = 0; s < 9; s++) {
                int which = s / 3;
                double *par = which == 0 ? rx : which == 1 ? rg : rb,
                       *an = which == 0 ? adx : which == 1 ? adg : adb;
                size_t np = which == 0 ? n : c, idx = (size_t)ref_int(&g_fd_rng, (int)np);
                double fd = ref_fd(fwd_ln, &ctx, n, rd, par, idx, FD_H);
                fd_point(&f, which == 0 ? "dx" : which == 1 ? "dgamma" : "dbeta", fd, an[idx],
                         1e-4 * max_abs(an, np));
            }
            FD_REPORT(f, "layernorm_bwd", "%dx%d vs FD of fwd", q.rows, q.cols);
            free(adx), free(adg), free(adb);
        }
        free(x), free(g), free(b), free(dout), free(dg), free(db), free(rx), free(rg), free(rb);
        free(rd), free(ro), free(rmu), free(rrs), free(mu), free(rs);
    }
}

/* ================= gelu / tanh ================= */

void run_gelu_fwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    be->gelu_fwd(be, t[0].p, t[1].p, ((unary_args *)a)->n);
}
void run_tanh_fwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    be->tanh_fwd(be, t[0].p, t[1].p, ((unary_args *)a)->n, ((unary_args *)a)->dt);
}
/* t: dout, x|y, [dx]; inplace: dx aliases dout (as the engine calls them) */
static void run_gelu_bwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    unary_args *q = a;
    be->gelu_bwd(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->n);
}
static void run_tanh_bwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    unary_args *q = a;
    be->tanh_bwd(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->n, q->dt);
}

/* tanh_fwd and tanh_bwd in 16 bits of dt (every tensor): the bits of the
 * fp32 op on the inputs widened, its output cast (cast's bits), and within
 * the storage's rounding of float64 on the same inputs. x, dout: fp32 values
 * that are rounded to dt first. */
static void check_tanh16(bt_backend *be, const float *x, const float *dout, size_t n,
                         bt_dtype dt) {
    uint16_t *x16 = malloc(n * 2), *d16 = malloc(n * 2), *y16 = malloc(n * 2);
    float *xw = malloc(n * 4), *dw = malloc(n * 4), *yw = malloc(n * 4);
    double *r = malloc(n * 8);
    if (!x16 || !d16 || !y16 || !xw || !dw || !yw || !r) exit(99);
    const char *dn = dt == BT_BF16 ? "bf16" : "f16";
    for (size_t i = 0; i < n; i++) {
        x16[i] = bits16_of(x[i], dt), xw[i] = widen16(x16[i], dt);
        d16[i] = bits16_of(dout[i], dt), dw[i] = widen16(d16[i], dt);
    }
    unary_args q = {n, 0, dt}, q32 = {n, 0, BT_F32};
    if (want_op("tanh_fwd")) {
        tensor t[] = {tensor_16bit("out16", NULL, n, true), tensor_16bit("x16", x16, n, false)},
               u[] = {tensor_out("out", NULL, n), tensor_in("x widened", xw, n)};
        verdict v = v_new();
        for (size_t i = 0; i < n; i++) r[i] = tanh((double)xw[i]);
        if (exec_op(&v, be, t, 2, run_tanh_fwd, &q, NULL) &&
            exec_op(&v, be, u, 2, run_tanh_fwd, &q32, NULL)) {
            v_bits16_of(&v, "out16 vs fp32 op, cast", t[0].res, RES(u[0]), n, dt);
            for (size_t i = 0; i < n; i++) yw[i] = widen16(((const uint16_t *)t[0].res)[i], dt);
            v_nmse(&v, "out16", yw, r, NULL, n, round16_thr(dt));
        }
        v_report(&v, "tanh_fwd", "n=%zu in %s", n, dn);
        tensors_free(t, 2);
        tensors_free(u, 2);
    }
    for (size_t i = 0; i < n; i++) { /* y: tanh's output in dt */
        y16[i] = bits16_of((float)tanh((double)xw[i]), dt);
        yw[i] = widen16(y16[i], dt);
    }
    for (int inpl = 0; inpl < 2 && want_op("tanh_bwd"); inpl++) {
        q.inplace = q32.inplace = inpl;
        tensor t[] = {tensor_16bit("dout16", d16, n, inpl), tensor_16bit("y16", y16, n, false),
                      tensor_16bit("dx16", NULL, n, true)},
               u[] = {inpl ? tensor_out("dout", dw, n) : tensor_in("dout", dw, n),
                      tensor_in("y widened", yw, n), tensor_out("dx", NULL, n)};
        const int nt = inpl ? 2 : 3, o = inpl ? 0 : 2;
        verdict v = v_new();
        for (size_t i = 0; i < n; i++) r[i] = (double)dw[i] * (1.0 - (double)yw[i] * yw[i]);
        if (exec_op(&v, be, t, nt, run_tanh_bwd, &q, NULL) &&
            exec_op(&v, be, u, nt, run_tanh_bwd, &q32, NULL)) {
            v_bits16_of(&v, "dx16 vs fp32 op, cast", t[o].res, RES(u[o]), n, dt);
            float *got = malloc(n * 4);
            double *ad = ref_abs(dw, n); /* 1 - y*y cancels as |y| -> 1 */
            if (!got) exit(99);
            for (size_t i = 0; i < n; i++) got[i] = widen16(((const uint16_t *)t[o].res)[i], dt);
            v_nmse(&v, "dx16", got, r, ad, n, round16_thr(dt));
            free(got), free(ad);
        }
        v_report(&v, "tanh_bwd", "n=%zu in %s%s", n, dn, inpl ? " dx=dout" : "");
        tensors_free(t, 3);
        tensors_free(u, 3);
    }
    free(x16), free(d16), free(y16), free(xw), free(dw), free(yw), free(r);
}

typedef struct {
    size_t n;
    bool tanh_;
    double *x;
} un_fd_ctx;
static void fwd_unary(void *c, double *out) {
    un_fd_ctx *u = c;
    for (size_t i = 0; i < u->n; i++) out[i] = u->tanh_ ? tanh(u->x[i]) : ref_gelu(u->x[i]);
}

void test_activations(bt_backend *be) {
    for (size_t si = 0; si < sizeof VECTOR_SHAPES / sizeof *VECTOR_SHAPES; si++) {
        if (skip_shape(VECTOR_SHAPES[si].quick)) continue;
        reseed("activations", si);
        unary_args q = {VECTOR_SHAPES[si].n, 0, BT_F32};
        size_t n = q.n;
        float *x = rand_floats(n, 3.0, 0.0), *dout = rand_floats(n, 1.0, 0.0), *y = ref_alloc(n * 4);
        double *rx = ref_dup(x, n), *rd = ref_dup(dout, n), *r = ref_alloc(n * 8),
               *ax = ref_abs(x, n), *ad = ref_abs(dout, n);
        for (size_t i = 0; i < n; i++) y[i] = (float)tanh(rx[i]);
        for (int op = 0; op < 2; op++) {
            const char *fname = op ? "tanh_fwd" : "gelu_fwd", *bname = op ? "tanh_bwd" : "gelu_bwd";
            if (want_op(fname)) {
                for (size_t i = 0; i < n; i++) r[i] = op ? tanh(rx[i]) : ref_gelu(rx[i]);
                tensor t[] = {tensor_out("out", NULL, n), tensor_in("x", x, n)};
                verdict v = v_new();
                /* gelu: x/2 + x erf(x/sqrt2)/2 cancels for x << 0: mag = |x| */
                if (exec_op(&v, be, t, 2, op ? run_tanh_fwd : run_gelu_fwd, &q, NULL))
                    v_nmse(&v, "out", RES(t[0]), r, op ? NULL : ax, n, THR_MATH);
                v_report(&v, fname, "n=%zu", n);
                tensors_free(t, 2);
            }
            for (int inpl = 0; inpl < 2 && want_op(bname); inpl++) {
                for (size_t i = 0; i < n; i++) /* tanh_bwd takes the float output y */
                    r[i] = rd[i] * (op ? 1.0 - (double)y[i] * y[i] : ref_gelu_grad(rx[i]));
                q.inplace = inpl;
                tensor t[] = {inpl ? tensor_out("dout", dout, n) : tensor_in("dout", dout, n),
                              tensor_in(op ? "y" : "x", op ? y : x, n), tensor_out("dx", NULL, n)};
                verdict v = v_new();
                /* 1 - y*y (|y| -> 1) and cdf + x pdf (x << 0) cancel: mag = |dout| */
                if (exec_op(&v, be, t, inpl ? 2 : 3, op ? run_tanh_bwd : run_gelu_bwd, &q, NULL))
                    v_nmse(&v, "dx", RES(t[inpl ? 0 : 2]), r, ad, n, op ? THR_ROUND : THR_MATH);
                v_report(&v, bname, "n=%zu%s", n, inpl ? " dx=dout" : "");
                tensors_free(t, 3);
            }
            if (want_op(bname) && g_check_references) {
                verdict f = v_new();
                un_fd_ctx ctx = {n, op == 1, rx};
                for (int s = 0; s < 3; s++) {
                    size_t idx = (size_t)ref_int(&g_fd_rng, (int)n);
                    double th = tanh(rx[idx]);
                    double an = rd[idx] * (op ? 1.0 - th * th : ref_gelu_grad(rx[idx]));
                    fd_point(&f, "dx", ref_fd(fwd_unary, &ctx, n, rd, rx, idx, FD_H), an,
                             1e-4 * max_abs(rd, n)); /* gelu', tanh' <= ~1.13 */
                }
                FD_REPORT(f, bname, "n=%zu vs FD of fwd", n);
            }
        }
        check_tanh16(be, x, dout, n, BT_BF16);
        check_tanh16(be, x, dout, n, BT_F16);
        free(x), free(dout), free(y), free(rx), free(rd), free(r), free(ax), free(ad);
    }
}

/* ================= softmax ================= */

typedef struct {
    int B, H, T, inplace;
    float scale;
} softmax_args;
static void run_sm_fwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    softmax_args *q = a; /* scores, mask, [probs] */
    be->softmax_fwd(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->B, q->H, q->T, q->scale);
}
static void run_sm_bwd(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    softmax_args *q = a; /* dprobs, probs, [dscores] */
    be->softmax_bwd(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->B * q->H * q->T, q->T,
                    q->scale);
}

typedef struct {
    softmax_args q;
    const int32_t *mask;
    double *s;
} sm_fd_ctx;
static void fwd_sm(void *c, double *out) {
    sm_fd_ctx *x = c;
    ref_softmax_fwd(out, x->s, x->mask, x->q.B, x->q.H, x->q.T, x->q.scale);
}

void test_softmax(bt_backend *be) {
    if (!want_op("softmax_fwd") && !want_op("softmax_bwd")) return;
    /* B, H, T, quick (-1: big); 512 and 513 keys: the longest row the
     * kernels keep in registers with 32 lanes, and one past it */
    static const int shapes[][4] = {{1, 1, 1, 1},   {1, 2, 3, 0},   {2, 3, 17, 1},
                                    {3, 2, 33, 0},  {2, 2, 65, 0},  {1, 2, 300, 0},
                                    {1, 1, 512, 0}, {1, 1, 513, 1}, {2, 12, 128, -1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (skip_shape(shapes[si][3] == 1)) continue;
        reseed("softmax", si);
        softmax_args q = {shapes[si][0], shapes[si][1], shapes[si][2], 0, (si & 1) ? 1.0f : 0.125f};
        size_t rows = (size_t)q.B * q.H * q.T, n = rows * q.T;
        int32_t *mask = ref_alloc((size_t)q.B * q.T * 4);
        static const int32_t keepv[] = {1, 1, 1, 2, -1}; /* any nonzero keeps */
        for (int b = 0; b < q.B; b++) {
            int32_t *m = mask + (size_t)b * q.T, any = 0;
            bool single = b == q.B - 1 && q.B > 1 && q.T > 2; /* one key left */
            for (int j = 0; j < q.T; j++) {
                m[j] = single || ref_uniform(&g_input_rng) < 0.3 ? 0 : keepv[ref_int(&g_input_rng, 5)];
                any |= m[j];
            }
            if (!any) m[ref_int(&g_input_rng, q.T)] = 1;
        }
        float *sc = rand_floats(n, 3.0, 0.0), *dp = rand_floats(n, 1.0, 0.0), *pf = ref_alloc(n * 4);
        double *rs = ref_dup(sc, n), *rp = ref_alloc(n * 8), *rdp = ref_dup(dp, n);
        ref_softmax_fwd(rp, rs, mask, q.B, q.H, q.T, q.scale);
        for (size_t i = 0; i < n; i++) pf[i] = (float)rp[i];
        for (int inpl = 0; inpl < 2 && want_op("softmax_fwd"); inpl++) {
            q.inplace = inpl;
            tensor t[] = {inpl ? tensor_out("scores", sc, n) : tensor_in("scores", sc, n),
                          tensor_in("key_mask", mask, (size_t)q.B * q.T),
                          tensor_out("probs", NULL, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, inpl ? 2 : 3, run_sm_fwd, &q, NULL)) {
                const float *o = RES(t[inpl ? 0 : 2]);
                v_nmse(&v, "probs", o, rp, NULL, n, THR_MATH); /* positive terms only */
                for (size_t i = 0; i < n; i++)
                    if (rp[i] == 0.0 && o[i] != 0.0f) {
                        v_fail(&v, "masked key has probability %g", o[i]);
                        break;
                    }
            }
            v_report(&v, "softmax_fwd", "B%d H%d T%d s=%g%s", q.B, q.H, q.T, q.scale,
                     inpl ? " in-place" : "");
            tensors_free(t, 3);
        }
        for (int inpl = 0; inpl < 2 && want_op("softmax_bwd"); inpl++) {
            double *pd = ref_dup(pf, n), *r = ref_alloc(n * 8), *mag = ref_alloc(n * 8);
            ref_softmax_bwd(r, rdp, pd, (int)rows, q.T, q.scale);
            ref_softmax_bwd_mag(mag, rdp, pd, (int)rows, q.T, q.scale);
            q.inplace = inpl;
            tensor t[] = {inpl ? tensor_out("dprobs", dp, n) : tensor_in("dprobs", dp, n),
                          tensor_in("probs", pf, n), tensor_out("dscores", NULL, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, inpl ? 2 : 3, run_sm_bwd, &q, NULL))
                v_nmse(&v, "dscores", RES(t[inpl ? 0 : 2]), r, mag, n, THR_MATH);
            v_report(&v, "softmax_bwd", "rows%zu T%d s=%g%s", rows, q.T, q.scale,
                     inpl ? " in-place" : "");
            tensors_free(t, 3);
            free(pd), free(r), free(mag);
        }
        if (want_op("softmax_bwd") && g_check_references) {
            verdict f = v_new();
            double *an = ref_alloc(n * 8);
            ref_softmax_bwd(an, rdp, rp, (int)rows, q.T, q.scale);
            sm_fd_ctx ctx = {q, mask, rs};
            for (int s = 0; s < 5; s++) {
                size_t idx = fd_pick(an, n);
                if (s == 4) /* a masked key, if any: both must be 0 */
                    for (size_t i = 0; i < n; i++)
                        if (rp[i] == 0.0) {
                            idx = i;
                            break;
                        }
                double fd = ref_fd(fwd_sm, &ctx, n, rdp, rs, idx, FD_H);
                fd_point(&f, "dscores", fd, an[idx], 1e-4 * max_abs(an, n));
            }
            FD_REPORT(f, "softmax_bwd", "B%d H%d T%d vs FD of fwd", q.B, q.H, q.T);
            free(an);
        }
        free(mask), free(sc), free(dp), free(pf), free(rs), free(rp), free(rdp);
    }
}
