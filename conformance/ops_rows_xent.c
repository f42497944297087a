/* Conformance checks of the row-indexed ops gather_rows / scatter_rows and of
 * the fused cross-entropy xent_fwd_bwd. */
#include "ops.h"
#include "fused_case.h"

#include "backends/row_links.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================= gather_rows / scatter_rows ================= */

typedef struct {
    int n_idx, cols;
} rows_args;
static void run_gather(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    be->gather_rows(be, t[0].p, t[1].p, t[2].p, ((rows_args *)a)->n_idx, ((rows_args *)a)->cols);
}
/* t: dst, src, idx, idx's links */
static void run_scatter(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    be->scatter_rows(be, t[0].p, t[1].p, t[2].p, t[3].p, ((rows_args *)a)->n_idx,
                     ((rows_args *)a)->cols);
}

/* The segments of idx (n) as the model builds them (bt_row_links, 2n
 * ints), checked against their definition, built again by a quadratic
 * search, under "ref/links" (the backends that follow them trust them). One
 * table serves every call, larger and smaller, as the model's serves every
 * batch: what a call leaves in it must not leak into the next. */
int32_t *host_links(const int32_t *idx, int n, int32_t skip, const char *op) {
    static bt_row_links_work work;
    int32_t *lk = ref_alloc((size_t)(n ? 2 * n : 1) * 4), *want = ref_alloc((size_t)(n ? 2 * n : 1) * 4);
    verdict v = v_new();
    if (bt_row_links(idx, n, skip, lk, &work)) v_fail(&v, "out of memory");
    int groups = 0, placed = 0;
    for (int i = 0; i < n; i++) { /* i first of its index: its group, in order */
        bool first = !(skip >= 0 && idx[i] == skip);
        for (int j = i - 1; j >= 0 && first; j--) first = idx[j] != idx[i];
        if (!first) continue;
        for (int j = i; j < n; j++)
            if (idx[j] == idx[i]) want[placed++] = j;
        want[n + groups++] = placed;
    }
    for (int g = groups; g < n; g++) want[n + g] = placed;
    for (int k = placed; k < n; k++) want[k] = -1;
    long wrong = 0;
    for (int k = 0; k < 2 * n && v.ok; k++) wrong += lk[k] != want[k];
    if (wrong) v_fail(&v, "%ld of %d entries wrong (%d groups)", wrong, 2 * n, groups);
    free(want);
    const char *save = g_backend_name;
    g_backend_name = "ref/links";
    v_report(&v, op, "segments of %d indices%s", n, skip >= 0 ? ", skipping one" : "");
    g_backend_name = save;
    return lk;
}

typedef struct {
    rows_args q;
    const int32_t *idx;
    double *src;
} gs_fd_ctx;
static void fwd_gather(void *c, double *out) {
    gs_fd_ctx *x = c;
    ref_gather_rows(out, x->src, x->idx, x->q.n_idx, x->q.cols);
}

/* Many tokens into few rows: each row of dst gets up to hundreds of source
 * rows, adjacent and far apart, and some rows none. Against the float64
 * reference, and bit for bit against the additions in order of i that the
 * contract prescribes (every backend adds them in that order). */
static void test_scatter_many(bt_backend *be) {
    static const int shapes[][4] = {/* n_idx, rows of dst, cols, quick (-1: big) */
                                    {65, 3, 5, 1}, {3000, 7, 33, 1}, {5000, 2000, 65, 0},
                                    {4096, 512, 768, -1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (skip_shape(shapes[si][3] == 1)) continue;
        reseed("scatter_many", si);
        const int nsrc = shapes[si][1];
        rows_args q = {shapes[si][0], shapes[si][2]};
        const size_t ns = (size_t)nsrc * q.cols, ni = (size_t)q.n_idx * q.cols;
        float *dst = rand_floats(ns, 1, 0), *src = rand_floats(ni, 1, 0);
        int32_t *ix = ref_alloc((size_t)q.n_idx * 4);
        for (int i = 0; i < q.n_idx; i++) /* half repeat the previous index: runs */
            ix[i] = i > 0 && ref_int(&g_input_rng, 2) ? ix[i - 1] : ref_int(&g_input_rng, nsrc);
        float *want = ref_alloc(ns * 4); /* fp32, in order of i */
        memcpy(want, dst, ns * 4);
        for (int i = 0; i < q.n_idx; i++)
            for (int c = 0; c < q.cols; c++)
                want[(size_t)ix[i] * q.cols + c] += src[(size_t)i * q.cols + c];
        double *r = ref_dup(dst, ns), *mag = ref_abs(dst, ns), *rs = ref_dup(src, ni),
               *as = ref_abs(src, ni);
        ref_scatter_rows(r, rs, ix, q.n_idx, q.cols);
        ref_scatter_rows(mag, as, ix, q.n_idx, q.cols);
        int32_t *lk = host_links(ix, q.n_idx, -1, "scatter_rows");
        tensor t[] = {tensor_out("dst", dst, ns), tensor_in("src", src, ni),
                      tensor_in("idx", ix, (size_t)q.n_idx),
                      tensor_in("links", lk, 2 * (size_t)q.n_idx)};
        verdict v = v_new();
        if (exec_op(&v, be, t, 4, run_scatter, &q, NULL)) {
            /* sums of hundreds of terms: THR_MATH, not THR_ROUND */
            v_nmse(&v, "dst", RES(t[0]), r, mag, ns, THR_MATH);
            v_bits(&v, "dst in order", RES(t[0]), want, ns);
        }
        v_report(&v, "scatter_rows", "%d into %dx%d += many dup", q.n_idx, nsrc, q.cols);
        tensors_free(t, 4);
        free(dst), free(src), free(ix), free(lk), free(want), free(r), free(mag), free(rs),
            free(as);
    }
}

void test_gather_scatter(bt_backend *be) {
    if (!want_op("gather_rows") && !want_op("scatter_rows")) return;
    if (want_op("scatter_rows")) test_scatter_many(be);
    static const int shapes[][4] = {/* rows of src/dst, cols, n_idx, quick (-1: big) */
                                    {1, 1, 1, 1},     {10, 7, 5, 0}, {100, 33, 40, 1},
                                    {50, 65, 80, 0},  {512, 768, 80, -1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (skip_shape(shapes[si][3] == 1)) continue;
        reseed("rows", si);
        int nsrc = shapes[si][0];
        rows_args q = {shapes[si][2], shapes[si][1]};
        size_t ns = (size_t)nsrc * q.cols, ni = (size_t)q.n_idx * q.cols;
        float *big = rand_floats(ns, 1, 0), *small = rand_floats(ni, 1, 0);
        int32_t *idx = rand_ints((size_t)q.n_idx, 0, nsrc);
        double *rbig = ref_dup(big, ns), *rsmall = ref_dup(small, ni);
        if (want_op("gather_rows")) {
            float *e = ref_alloc(ni * 4);
            for (int i = 0; i < q.n_idx; i++)
                memcpy(e + (size_t)i * q.cols, big + (size_t)idx[i] * q.cols, (size_t)q.cols * 4);
            tensor t[] = {tensor_out("out", NULL, ni), tensor_in("src", big, ns),
                          tensor_in("idx", idx, (size_t)q.n_idx)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 3, run_gather, &q, NULL)) v_bits(&v, "out", RES(t[0]), e, ni);
            v_report(&v, "gather_rows", "%d of %dx%d", q.n_idx, nsrc, q.cols);
            tensors_free(t, 3);
            free(e);
        }
        for (int dup = 0; dup < 2 && want_op("scatter_rows"); dup++) {
            int32_t *ix = ref_alloc((size_t)q.n_idx * 4);
            if (!dup) { /* distinct rows: partial Fisher-Yates */
                if (q.n_idx > nsrc) {
                    free(ix);
                    continue;
                }
                int32_t *perm = ref_alloc((size_t)nsrc * 4);
                for (int i = 0; i < nsrc; i++) perm[i] = i;
                for (int i = 0; i < q.n_idx; i++) {
                    int j = i + ref_int(&g_input_rng, nsrc - i);
                    int32_t tmp = perm[i];
                    perm[i] = perm[j], perm[j] = tmp;
                    ix[i] = perm[i];
                }
                free(perm);
            } else { /* with duplicates, some adjacent and some far apart */
                if (q.n_idx < 2) {
                    free(ix);
                    continue;
                }
                for (int i = 0; i < q.n_idx; i++)
                    ix[i] = i > 0 && ref_int(&g_input_rng, 3) == 0 ? ix[ref_int(&g_input_rng, i)]
                                                                   : ref_int(&g_input_rng, nsrc);
                ix[q.n_idx - 1] = ix[0];
            }
            double *r = ref_dup(big, ns), *mag = ref_abs(big, ns), *as = ref_abs(small, ni);
            ref_scatter_rows(r, rsmall, ix, q.n_idx, q.cols);
            ref_scatter_rows(mag, as, ix, q.n_idx, q.cols);
            int32_t *lk = host_links(ix, q.n_idx, -1, "scatter_rows");
            tensor t[] = {tensor_out("dst", big, ns), tensor_in("src", small, ni),
                          tensor_in("idx", ix, (size_t)q.n_idx),
                          tensor_in("links", lk, 2 * (size_t)q.n_idx)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 4, run_scatter, &q, NULL))
                v_nmse(&v, "dst", RES(t[0]), r, mag, ns, THR_ROUND);
            v_report(&v, "scatter_rows", "%d into %dx%d +=%s", q.n_idx, nsrc, q.cols,
                     dup ? " dup idx" : " distinct");
            tensors_free(t, 4);
            free(r), free(ix), free(lk), free(mag), free(as);
        }
        if (want_op("scatter_rows") && g_check_references) { /* scatter_rows is the adjoint of gather_rows */
            verdict f = v_new();
            double *an = ref_zalloc(ns * 8);
            ref_scatter_rows(an, rsmall, idx, q.n_idx, q.cols);
            gs_fd_ctx ctx = {q, idx, rbig};
            for (int s = 0; s < 4; s++) {
                size_t row = s == 3 ? (size_t)ref_int(&g_fd_rng, nsrc)
                                    : (size_t)idx[ref_int(&g_fd_rng, q.n_idx)];
                size_t id = row * q.cols + (size_t)ref_int(&g_fd_rng, q.cols);
                fd_point(&f, "dsrc", ref_fd(fwd_gather, &ctx, ni, rsmall, rbig, id, FD_H), an[id],
                         1e-4 * max_abs(an, ns));
            }
            FD_REPORT(f, "scatter_rows", "%d of %dx%d vs FD of gather", q.n_idx, nsrc, q.cols);
            free(an);
        }
        free(big), free(small), free(idx), free(rbig), free(rsmall);
    }
}

/* ================= xent_fwd_bwd ================= */

typedef struct {
    int rows, V, inplace;
    float gs, z;      /* grad_scale, z_loss */
    bt_dtype round16; /* the gradient's rounding */
    int only16;       /* the gradient in 16 bits only: t[5] is dlogits16 */
    int logits16;     /* the logits in round16's 16 bits, t[0], which is dlogits16 too
                       * (in place, as the model calls it) */
} xent_args;
static void run_xent(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    xent_args *q = a; /* logits, labels, loss, correct, log_z, [dlogits or dlogits16] */
    const bt_ptr d = q->inplace || q->only16 ? t[0].p : t[5].p;
    if (q->logits16) {
        be->xent_fwd_bwd(be, BT_NO_PTR, t[2].p, t[3].p, t[4].p, t[0].p, t[1].p, q->rows, q->V,
                         q->gs, q->z, q->round16, t[0].p, q->round16);
        return;
    }
    be->xent_fwd_bwd(be, d, t[2].p, t[3].p, t[4].p, t[0].p, t[1].p, q->rows, q->V, q->gs, q->z,
                     q->round16, q->only16 ? t[5].p : BT_NO_PTR, BT_F32);
}

/* xent_fwd_bwd with its gradient rounded to bf16 and to f16 storage, out
 * of place and in place (as the NSP head calls it), then in 16 bits only
 * (dlogits16; dlogits aliases the logits, as the model calls it, and the
 * logits must come back unchanged): loss, correct and log_z have the bits
 * of the fp32 run, the gradient half.h's rounding (or conversion) of the
 * fp32 run's. */
static void xent16_cases(bt_backend *be, xent_args q, const float *x, const int32_t *lab) {
    const size_t n = (size_t)q.rows * q.V, R = (size_t)q.rows;
    q.inplace = q.only16 = 0;
    q.round16 = BT_F32;
    tensor f[] = {tensor_in("logits", x, n), tensor_in("labels", lab, R),
                  tensor_out("loss", NULL, R), tensor_out("correct", NULL, R),
                  tensor_out("log_z", NULL, R), tensor_out("dlogits", NULL, n)};
    verdict v32 = v_new();
    const bool have32 = exec_op(&v32, be, f, 6, run_xent, &q, NULL);
    float *want = malloc(n * 4);
    if (!want) exit(99);
    for (int k = 0; k < 6; k++) { /* rounded, rounded in place, 16 bits only */
        q.round16 = k & 1 ? BT_F16 : BT_BF16;
        q.inplace = k == 2 || k == 3;
        q.only16 = k >= 4;
        tensor t[] = {q.inplace ? tensor_out("logits", x, n) : tensor_in("logits", x, n),
                      tensor_in("labels", lab, R),
                      tensor_out("loss", NULL, R), tensor_out("correct", NULL, R),
                      tensor_out("log_z", NULL, R),
                      q.only16 ? tensor_16bit("dlogits16", NULL, n, true)
                               : tensor_out("dlogits", NULL, n)};
        verdict v = v_new();
        if (!have32) v_fail(&v, "the fp32 run failed: %s", v32.note);
        if (have32 && exec_op(&v, be, t, 6, run_xent, &q, NULL)) {
            v_bits(&v, "loss", RES(t[2]), RES(f[2]), R);
            v_bits(&v, "correct", RES(t[3]), RES(f[3]), R);
            v_bits(&v, "log_z", RES(t[4]), RES(f[4]), R);
            if (q.only16) {
                v_bits16_of(&v, "dlogits16", t[5].res, RES(f[5]), n, q.round16);
            } else {
                for (size_t i = 0; i < n; i++) want[i] = round16_host(RES(f[5])[i], q.round16);
                v_bits(&v, "dlogits", RES(t[q.inplace ? 0 : 5]), want, n);
            }
        }
        v_report(&v, "xent_fwd_bwd", "%dx%d z=%.3g%s%s", q.rows, q.V, q.z,
                 storage_suffix(q.round16),
                 q.only16 ? ", dlogits16 only" : q.inplace ? " in-place" : "");
        tensors_free(t, 6);
    }
    free(want);
    tensors_free(f, 6);
}

/* xent_fwd_bwd reading its logits in 16 bits (bf16, f16) and writing its
 * gradient over them (dlogits16 = logits, in place, as the MLM head calls
 * it): loss, correct, log_z and the gradient's 16 bits are those of the
 * call on the same values in fp32 with the gradient in 16 bits only. */
static void xent_logits16_cases(bt_backend *be, xent_args q, const float *x, const int32_t *lab) {
    const size_t n = (size_t)q.rows * q.V, R = (size_t)q.rows;
    float *xr = malloc(n * 4);
    uint16_t *x16 = malloc(n * 2);
    if (!xr || !x16) exit(99);
    for (int k = 0; k < 2; k++) {
        q.round16 = k ? BT_F16 : BT_BF16;
        for (size_t i = 0; i < n; i++) {
            xr[i] = round16_host(x[i], q.round16);
            x16[i] = bits16_of(x[i], q.round16);
        }
        q.inplace = q.logits16 = 0;
        q.only16 = 1;
        tensor f[] = {tensor_in("logits", xr, n), tensor_in("labels", lab, R),
                      tensor_out("loss", NULL, R), tensor_out("correct", NULL, R),
                      tensor_out("log_z", NULL, R), tensor_16bit("dlogits16", NULL, n, true)};
        verdict v = v_new();
        const bool have32 = exec_op(&v, be, f, 6, run_xent, &q, NULL);
        q.logits16 = 1;
        tensor t[] = {tensor_16bit("logits16", x16, n, true), tensor_in("labels", lab, R),
                      tensor_out("loss", NULL, R), tensor_out("correct", NULL, R),
                      tensor_out("log_z", NULL, R)};
        if (have32 && exec_op(&v, be, t, 5, run_xent, &q, NULL)) {
            v_bits(&v, "loss", RES(t[2]), RES(f[2]), R);
            v_bits(&v, "correct", RES(t[3]), RES(f[3]), R);
            v_bits(&v, "log_z", RES(t[4]), RES(f[4]), R);
            v_bits16(&v, "dlogits16 vs the call on fp32 logits", t[0].res, f[5].res, n);
        }
        v_report(&v, "xent_fwd_bwd", "%dx%d z=%.3g%s, logits16 in place", q.rows, q.V, q.z,
                 storage_suffix(q.round16));
        tensors_free(t, 5);
        tensors_free(f, 6);
    }
    free(xr);
    free(x16);
}

typedef struct {
    xent_args q;
    const int32_t *labels;
    double *logits;
    int row;
} xe_fd_ctx;
static void fwd_xent(void *c, double *out) { /* grad_scale * (loss + z lse^2) of one row */
    xe_fd_ctx *x = c;
    memset(out, 0, (size_t)x->q.rows * sizeof *out);
    double *lz = ref_zalloc((size_t)x->q.rows * sizeof *lz);
    ref_xent(NULL, out, NULL, lz, x->logits, x->labels, x->row, x->row + 1, x->q.V, 1.0, 0.0);
    out[x->row] = x->q.gs * (out[x->row] + x->q.z * lz[x->row] * lz[x->row]);
    free(lz);
}

void test_xent(bt_backend *be) {
    if (!want_op("xent_fwd_bwd")) return;
    static const int shapes[][3] = {/* rows, V, quick (-1: big) */
                                    {1, 1, 1},     {1, 2, 0},       {8, 2, 1},   {3, 7, 0},
                                    {5, 33, 1},    {17, 1000, 0},   {40, 30522, -1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (skip_shape(shapes[si][2] == 1)) continue;
        reseed("xent", si);
        xent_args q = {.rows = shapes[si][0], .V = shapes[si][1],
                       .z = si % 2 ? 0.03f : 0.0f}; /* z-loss on odd */
        size_t n = (size_t)q.rows * q.V, R = (size_t)q.rows;
        float *x = rand_floats(n, 2.0, 0.0);
        int32_t *lab = rand_ints(R, 0, q.V);
        int valid = 0;
        for (int r = 0; r < q.rows; r++) {
            if (r > 1 && (r == q.rows - 1 || ref_uniform(&g_input_rng) < 0.25)) lab[r] = -1; /* ignored */
            valid += lab[r] >= 0;
        }
        if (q.V >= 3 && q.rows >= 2) /* argmax ties: the first maximum counts */
            for (int r = 0; r < 2; r++) {
                float *xr = x + (size_t)r * q.V, mx = xr[0];
                for (int j = 1; j < q.V; j++) mx = fmaxf(mx, xr[j]);
                xr[1] = xr[q.V - 1] = mx + 1.0f;
                lab[r] = r == 0 ? q.V - 1 : 1; /* row 0: correct 0, row 1: correct 1 */
            }
        q.gs = 1.0f / (float)(valid ? valid : 1);
        double *rx = ref_dup(x, n), *rd = ref_alloc(n * 8), *rl = ref_alloc(R * 8), *rc = ref_alloc(R * 8);
        double *rz = ref_alloc(R * 8), *mz = ref_zalloc(R * 8);
        ref_xent(rd, rl, rc, rz, rx, lab, 0, q.rows, q.V, q.gs, q.z);
        float *cf = ref_alloc(R * 4);
        for (size_t r = 0; r < R; r++) cf[r] = (float)rc[r];
        /* |terms|: gs ((1 + 2 z |lse|) p + onehot) for dlogits, |lse| + |x_y| for the loss,
         * |max| + |log sum| for log_z */
        double *md = ref_alloc(n * 8), *ml = ref_zalloc(R * 8);
        for (size_t i = 0; i < n; i++) md[i] = fabs(rd[i]);
        for (size_t r = 0; r < R; r++)
            if (lab[r] >= 0) {
                double xy = rx[r * q.V + (size_t)lab[r]];
                const double zf = 1.0 + 2.0 * q.z * rz[r], zm = fabs(zf) + 2.0 * q.z * fabs(rz[r]);
                for (int j = 0; j < q.V; j++) md[r * q.V + (size_t)j] *= zm / fabs(zf);
                const double p_y = (rd[r * q.V + (size_t)lab[r]] / q.gs + 1.0) / zf;
                md[r * q.V + (size_t)lab[r]] = q.gs * (zm * p_y + 1.0);
                ml[r] = fabs(rl[r] + xy) + fabs(xy);
                mz[r] = fabs(rz[r]) + 1.0;
            }
        for (int inpl = 0; inpl < 2; inpl++) {
            q.inplace = inpl;
            tensor t[] = {inpl ? tensor_out("logits", x, n) : tensor_in("logits", x, n),
                          tensor_in("labels", lab, R), tensor_out("loss", NULL, R),
                          tensor_out("correct", NULL, R), tensor_out("log_z", NULL, R),
                          tensor_out("dlogits", NULL, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, inpl ? 5 : 6, run_xent, &q, NULL)) {
                v_nmse(&v, "dlogits", RES(t[inpl ? 0 : 5]), rd, md, n, THR_MATH);
                v_nmse(&v, "loss", RES(t[2]), rl, ml, R, THR_MATH);
                v_bits(&v, "correct", RES(t[3]), cf, R);
                v_nmse(&v, "log_z", RES(t[4]), rz, mz, R, THR_MATH);
            }
            v_report(&v, "xent_fwd_bwd", "%dx%d gs=%.3g z=%.3g%s", q.rows, q.V, q.gs, q.z,
                     inpl ? " in-place" : "");
            tensors_free(t, 6);
        }
        xent16_cases(be, q, x, lab);
        xent_logits16_cases(be, q, x, lab);
        if (g_check_references) { /* dlogits = d(grad_scale * loss) / dlogits */
            verdict f = v_new();
            for (int s = 0; s < 6; s++) { /* the label, the argmax and a random logit */
                int r = ref_int(&g_fd_rng, q.rows), am = 0;
                if (lab[r] < 0) continue;
                const double *xr = rx + (size_t)r * q.V, *dr = rd + (size_t)r * q.V;
                for (int j = 1; j < q.V; j++) am = xr[j] > xr[am] ? j : am;
                int j = s % 3 == 0 ? lab[r] : s % 3 == 1 ? am : ref_int(&g_fd_rng, q.V);
                xe_fd_ctx ctx = {q, lab, rx, r};
                size_t idx = (size_t)r * q.V + (size_t)j;
                /* floor: tiny probabilities (~1e-9 at V = 30522) are below what a
                 * difference of double losses resolves; they are checked absolutely */
                fd_point(&f, "dlogits", ref_fd(fwd_xent, &ctx, R, NULL, rx, idx, FD_H), rd[idx],
                         1e-4 * max_abs(dr, (size_t)q.V));
            }
            FD_REPORT(f, "xent_fwd_bwd", "%dx%d z=%.3g vs FD of loss + z lse^2", q.rows, q.V, q.z);
        }
        free(x), free(lab), free(rx), free(rd), free(rl), free(rc), free(cf), free(md), free(ml);
        free(rz), free(mz);
    }
}
