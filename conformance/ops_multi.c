/* Conformance checks of the ops that keep a training step off the host:
 * deferred reductions (reduce_defer / reduce_fetch) against sum, sumsq and
 * all_finite, and the multi-tensor optimizer steps (adamw_multi, lamb_multi)
 * against the per-tensor ops on the same backend and the float64 reference. */
#include "ops.h"

#include "../backends/common/partials.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================= reduce_defer / reduce_fetch ================= */

typedef struct {
    size_t n;
} defer_args;

/* Queue sum, sumsq and finiteness of x (t[0]), then overwrite x and queue its
 * sum again: s[0..3], fetched in one go. The last must see the overwrite. */
static void run_defer(bt_backend *be, tensor *t, void *a, double *s) {
    size_t n = ((defer_args *)a)->n;
    int i0 = be->reduce_defer(be, BT_REDUCE_SUM, t[0].p, n);
    int i1 = be->reduce_defer(be, BT_REDUCE_SUMSQ, t[0].p, n);
    int i2 = be->reduce_defer(be, BT_REDUCE_FINITE, t[0].p, n);
    be->fill(be, t[0].p, 0.25f, n);
    int i3 = be->reduce_defer(be, BT_REDUCE_SUM, t[0].p, n);
    double out[4];
    be->reduce_fetch(be, out);
    if (i0 != 0 || i1 != 1 || i2 != 2 || i3 != 3) { /* indices are the queue order */
        s[0] = s[1] = s[2] = s[3] = NAN;
        return;
    }
    memcpy(s, out, sizeof out);
}

/* The same values from the immediate reductions. */
static void run_immediate(bt_backend *be, tensor *t, void *a, double *s) {
    size_t n = ((defer_args *)a)->n;
    s[0] = be->sum(be, t[0].p, n);
    s[1] = be->sumsq(be, t[0].p, n);
    s[2] = be->all_finite(be, t[0].p, n) ? 1.0 : 0.0;
    be->fill(be, t[0].p, 0.25f, n);
    s[3] = be->sum(be, t[0].p, n);
}

static bool same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Deferred values equal the immediate ones bit for bit, on clean and on
 * non-finite data. */
static void defer_values(bt_backend *be, size_t si) {
    reseed("reduce_defer", si);
    defer_args q = {VECTOR_SHAPES[si].n};
    size_t n = q.n;
    float *x = rand_floats(n, 1.0, 0.3);
    verdict v = v_new();
    for (int bad = 0; bad < 2; bad++) {
        if (bad) x[ref_int(&g_input_rng, (int)n)] = INFINITY;
        double want_[4], got[4];
        tensor ti[] = {tensor_out("x", x, n)}, td[] = {tensor_out("x", x, n)};
        if (exec_op(&v, be, ti, 1, run_immediate, &q, want_) && exec_op(&v, be, td, 1, run_defer, &q, got))
            for (int k = 0; k < 4; k++)
                if (!same_double(got[k], want_[k]))
                    v_fail(&v, "%s value %d: deferred %.17g, immediate %.17g", bad ? "Inf" : "clean", k,
                           got[k], want_[k]);
        if (!bad && v.ok) v_metric(&v, "finite flag", fabs(got[2] - 1.0), 0.0);
        if (bad && v.ok && got[2] != 0.0) v_fail(&v, "an Inf passed the finiteness check");
        tensors_free(ti, 1);
        tensors_free(td, 1);
    }
    v_report(&v, "reduce_defer", "n=%zu sum,sumsq,finite at queue time", n);
    free(x);
}

/* One blocking read per fetch, none for an empty fetch or for queueing; more
 * queued partials than the first buffer holds. */
static void defer_reads(bt_backend *be) {
    const size_t n = 196608, rounds = 1500; /* 1500 x 48 chunks of 4096: past 65536 partials */
    reseed("reduce_fetch", 0);
    float *x = rand_floats(n, 1.0, 0.0);
    verdict v = v_new();
    bt_buffer *buf = be->alloc(be, n * 4);
    double *out = malloc((rounds + 1) * sizeof *out);
    if (!buf || !out) {
        v_fail(&v, "alloc failed");
    } else {
        bt_ptr p = {buf, 0};
        be->upload(be, p, x, n * 4);
        const double want_ = be->sumsq(be, p, n);
        bt_counters a, b, c;
        be->counters(be, &a);
        be->reduce_fetch(be, out); /* nothing queued */
        be->counters(be, &b);
        if (b.host_reads != a.host_reads) v_fail(&v, "an empty fetch made %ld reads", b.host_reads - a.host_reads);
        for (size_t r = 0; r < rounds; r++) {
            int i = be->reduce_defer(be, r % 2 ? BT_REDUCE_FINITE : BT_REDUCE_SUMSQ, p, n);
            if (i != (int)r) v_fail(&v, "reduction %zu got index %d", r, i);
        }
        be->counters(be, &c);
        if (c.host_reads != b.host_reads) v_fail(&v, "queueing made %ld reads", c.host_reads - b.host_reads);
        be->reduce_fetch(be, out);
        be->counters(be, &a);
        if (a.host_reads != c.host_reads + 1) v_fail(&v, "a fetch of %zu made %ld reads", rounds, a.host_reads - c.host_reads);
        for (size_t r = 0; r < rounds; r++)
            if (!same_double(out[r], r % 2 ? 1.0 : want_)) {
                v_fail(&v, "reduction %zu of %zu: %.17g, want %.17g", r, rounds, out[r], r % 2 ? 1.0 : want_);
                break;
            }
        out[0] = -1.0;
        be->reduce_fetch(be, out); /* the queue emptied */
        if (out[0] != -1.0) v_fail(&v, "a second fetch wrote a value");
        be->free(be, buf);
    }
    if (v.ok) v_metric(&v, "reads per fetch", 1.0, 1.0);
    v_report(&v, "reduce_fetch", "%zu queued: 1 read, 0 when empty", rounds);
    free(x), free(out);
}

void test_deferred_reductions(bt_backend *be) {
    if (want_op("reduce_defer"))
        for (size_t si = 0; si < sizeof VECTOR_SHAPES / sizeof *VECTOR_SHAPES; si++)
            if (!skip_shape(VECTOR_SHAPES[si].quick)) defer_values(be, si);
    if (want_op("reduce_fetch")) defer_reads(be);
}

/* ================= adamw_multi / lamb_multi ================= */

/* Tensors of every size class around the kernels' chunking, with a gap of 3
 * untouched elements before each; the largest has 259 chunks, more than
 * BT_SUM_BLOCKS, so its norms are added in blocks of 2 (partials.h); with
 * --quick it has 10 (make_spans). */
#define SPAN_MAX ((size_t)259 * 4096 - 7)
static const size_t SPAN_SIZES[] = {0, 1, 4095, 4096, 4097, 10000, SPAN_MAX, 77};
#define N_SPANS ((int)(sizeof SPAN_SIZES / sizeof *SPAN_SIZES))
#define GAP 3

typedef struct {
    bt_tensor_span spans[N_SPANS];
    int n_spans;
    size_t total;
    float lr, b1, b2, eps, min_coeff, max_coeff;
    float grad_scale; /* the clipping factor the multi ops fold in */
    bt_buffer *scratch; /* per-span runs of LAMB: its direction */
    bt_dtype w16;       /* BT_F32: no 16-bit copy of w; else its dtype (tensor 4) */
} multi_args;

/* The multi ops' w16 argument: tensor 4, or none. */
static bt_ptr w16_of(const tensor *t, const multi_args *o) {
    return o->w16 != BT_F32 ? t[4].p : (bt_ptr){NULL, 0};
}

static void run_adamw_multi(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    multi_args *o = a; /* w, g, m, v (, w16) */
    be->adamw_multi(be, t[0].p, t[1].p, t[2].p, t[3].p, w16_of(t, o), o->w16, o->spans, o->n_spans, o->lr, o->b1, o->b2, o->eps,
                    o->grad_scale, -1);
}
/* Clipping as src/model/optim.c did it before the multi ops took grad_scale:
 * a pass of its own over the gradients. */
static void scale_grads(bt_backend *be, tensor *t, const multi_args *o) {
    if (o->grad_scale != 1.0f) be->scale(be, t[1].p, o->grad_scale, o->total);
}
static void run_adamw_spans(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    multi_args *o = a;
    scale_grads(be, t, o);
    for (int i = 0; i < o->n_spans; i++) {
        const bt_tensor_span *p = &o->spans[i];
        be->adamw_step(be, bt_at(t[0].p, p->offset), bt_at(t[1].p, p->offset), bt_at(t[2].p, p->offset),
                       bt_at(t[3].p, p->offset), p->numel, o->lr, o->b1, o->b2, o->eps, p->weight_decay, p->bc1, p->bc2);
    }
}
static void run_lamb_multi(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    multi_args *o = a;
    be->lamb_multi(be, t[0].p, t[1].p, t[2].p, t[3].p, w16_of(t, o), o->w16, o->spans, o->n_spans, o->lr, o->b1, o->b2, o->eps,
                   o->min_coeff, o->max_coeff, o->grad_scale, -1);
}
/* LAMB per span as src/model/optim.c did it before lamb_multi. */
static void run_lamb_spans(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    multi_args *o = a;
    scale_grads(be, t, o);
    for (int i = 0; i < o->n_spans; i++) {
        const bt_tensor_span *p = &o->spans[i];
        bt_ptr w = bt_at(t[0].p, p->offset), u = {o->scratch, 0};
        be->lamb_update(be, u, w, bt_at(t[1].p, p->offset), bt_at(t[2].p, p->offset), bt_at(t[3].p, p->offset),
                        p->numel, o->b1, o->b2, o->eps, p->weight_decay, p->bc1, p->bc2);
        double wn = sqrt(be->sumsq(be, w, p->numel)), un = sqrt(be->sumsq(be, u, p->numel));
        double trust = (wn > 0.0 && un > 0.0) ? wn / un : 1.0;
        if (trust < o->min_coeff) trust = o->min_coeff;
        if (trust > o->max_coeff) trust = o->max_coeff;
        be->axpy(be, w, (float)(-(double)o->lr * trust), u, p->numel);
    }
}

/* The spans of SPAN_SIZES with gaps, mixed decay and bias corrections. */
static multi_args make_spans(float grad_scale) {
    multi_args o = {.lr = 0.02f, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-6f, .min_coeff = 0.01f, .max_coeff = 10.0f,
                    .grad_scale = grad_scale};
    size_t off = 0;
    for (int i = 0; i < N_SPANS; i++) {
        off += GAP;
        float t = (float)(1 + i % 3); /* as after LayerDrop: tensors at different steps */
        const size_t numel = SPAN_SIZES[i] == SPAN_MAX && g_quick ? 10 * 4096 + 5 : SPAN_SIZES[i];
        o.spans[i] = (bt_tensor_span){off, numel, i % 2 ? 0.0f : 0.01f,
                                      (float)(1.0 - pow(0.9, t)), (float)(1.0 - pow(0.999, t))};
        off += numel;
    }
    o.n_spans = N_SPANS;
    o.total = off + GAP;
    return o;
}

/* Every element outside the spans is as it was. */
static void check_gaps(verdict *v, const char *what, const float *after, const float *before,
                       const multi_args *o) {
    size_t at = 0;
    for (int i = 0; i <= o->n_spans; i++) {
        size_t end = i < o->n_spans ? o->spans[i].offset : o->total;
        if (memcmp(after + at, before + at, (end - at) * 4)) v_fail(v, "%s written outside the spans", what);
        if (i < o->n_spans) at = o->spans[i].offset + o->spans[i].numel;
    }
}

/* float64 reference of the whole multi step into rw, rm, rv (and mag: |terms| of w). */
static void ref_multi(bool lamb, const multi_args *o, double *rw, const double *rg, double *rm, double *rv,
                      double *mag) {
    for (int i = 0; i < o->n_spans; i++) {
        const bt_tensor_span *p = &o->spans[i];
        size_t b = p->offset, n = p->numel;
        double *mm = ref_alloc((n ? n : 1) * 8); /* |terms| of the new first moment */
        for (size_t k = 0; k < n; k++) mm[k] = o->b1 * fabs(rm[b + k]) + (1.0 - o->b1) * fabs(rg[b + k]);
        if (!lamb) {
            for (size_t k = 0; k < n; k++) mag[b + k] = fabs(rw[b + k]);
            ref_adamw(rw + b, rg + b, rm + b, rv + b, n, o->lr, o->b1, o->b2, o->eps, p->weight_decay, p->bc1, p->bc2);
            for (size_t k = 0; k < n; k++)
                mag[b + k] += (double)o->lr / p->bc1 * mm[k] / (sqrt(rv[b + k]) / sqrt((double)p->bc2) + o->eps);
        } else {
            double *u = ref_alloc((n ? n : 1) * 8), wn = 0, un = 0;
            ref_lamb(u, rw + b, rg + b, rm + b, rv + b, n, o->b1, o->b2, o->eps, p->weight_decay, p->bc1, p->bc2);
            for (size_t k = 0; k < n; k++) wn += rw[b + k] * rw[b + k], un += u[k] * u[k];
            double trust = (wn > 0 && un > 0) ? sqrt(wn) / sqrt(un) : 1.0;
            trust = fmin(fmax(trust, o->min_coeff), o->max_coeff);
            for (size_t k = 0; k < n; k++) {
                double umag = mm[k] / p->bc1 / (sqrt(rv[b + k] / p->bc2) + o->eps) + fabs(p->weight_decay * rw[b + k]);
                mag[b + k] = fabs(rw[b + k]) + o->lr * trust * umag;
                rw[b + k] -= o->lr * trust * u[k];
            }
            free(u);
        }
        free(mm);
    }
}

/* w16 after a multi step with a 16-bit copy: each element of the spans the
 * encoding of the new w rounded to o->w16, every other one as before. */
static void check_w16(verdict *v, const uint16_t *w16, const uint16_t *before, const float *w,
                      const multi_args *o) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < o->total; i++) {
        bool in = false;
        for (int s = 0; s < o->n_spans; s++)
            in = in || (i >= o->spans[s].offset && i < o->spans[s].offset + o->spans[s].numel);
        const uint16_t want_ = !in ? before[i]
                               : o->w16 == BT_F16 ? ref_f16_bits(ref_round_f16(w[i]))
                                                  : ref_bf16_bits(ref_round_bf16(w[i]));
        if (w16[i] != want_ && !bad++) first = i;
    }
    if (bad)
        v_fail(v, "w16: %zu elements wrong, first [%zu] 0x%04x for w %.9g", bad, first,
               w16[first], w[first]);
}

static void multi_case(bt_backend *be, bool lamb, bool has_fp64, float grad_scale, bt_dtype w16) {
    const char *op = lamb ? "lamb_multi" : "adamw_multi";
    reseed(op, 0);
    multi_args o = make_spans(grad_scale);
    o.w16 = w16;
    size_t n = o.total;
    float *w = rand_floats(n, 1, 0), *g = rand_floats(n, 1, 0), *m = rand_floats(n, 0.1, 0),
          *v = rand_floats(n, 0.01, 0);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    if (lamb) /* a tensor whose weights are all zero: trust 1 */
        for (size_t k = 0; k < o.spans[3].numel; k++) w[o.spans[3].offset + k] = 0.0f;
    o.scratch = be->alloc(be, SPAN_MAX * 4);
    verdict vd = v_new();
    uint16_t *h16 = ref_alloc(n * 2); /* w16 before: a pattern no rounding of w gives */
    for (size_t i = 0; i < n; i++) h16[i] = (uint16_t)(0x7f80u + (i & 63u));
    tensor tm[] = {tensor_out("w", w, n), tensor_in("g", g, n), tensor_out("m", m, n), tensor_out("v", v, n),
                   tensor_16bit("w16", h16, n, true)};
    const int ntm = w16 != BT_F32 ? 5 : 4;
    /* the per-tensor run clips g in place first */
    tensor ts[] = {tensor_out("w", w, n), tensor_out("g", g, n), tensor_out("m", m, n), tensor_out("v", v, n)};
    bool ran = o.scratch && exec_op(&vd, be, tm, ntm, lamb ? run_lamb_multi : run_adamw_multi, &o, NULL) &&
               exec_op(&vd, be, ts, 4, lamb ? run_lamb_spans : run_adamw_spans, &o, NULL);
    if (!o.scratch) v_fail(&vd, "alloc failed");
    if (ran) {
        double *rw = ref_dup(w, n), *rg = ref_dup(g, n), *rm = ref_dup(m, n), *rv = ref_dup(v, n),
               *mag = ref_alloc(n * 8);
        for (size_t i = 0; i < n; i++) rg[i] *= grad_scale;
        ref_multi(lamb, &o, rw, rg, rm, rv, mag);
        v_nmse(&vd, "w", RES(tm[0]), rw, mag, n, lamb ? THR_MATH : THR_ROUND); /* LAMB: norms are long sums */
        v_nmse(&vd, "m", RES(tm[2]), rm, NULL, n, THR_ROUND);
        v_nmse(&vd, "v", RES(tm[3]), rv, NULL, n, THR_ROUND);
        check_gaps(&vd, "w", RES(tm[0]), w, &o);
        check_gaps(&vd, "m", RES(tm[2]), m, &o);
        check_gaps(&vd, "v", RES(tm[3]), v, &o);
        if (w16 != BT_F32) check_w16(&vd, tm[4].res, h16, RES(tm[0]), &o);
        if (!lamb || has_fp64) {
            v_bits(&vd, "w vs per-tensor", RES(tm[0]), RES(ts[0]), n);
            v_bits(&vd, "m vs per-tensor", RES(tm[2]), RES(ts[2]), n);
            v_bits(&vd, "v vs per-tensor", RES(tm[3]), RES(ts[3]), n);
        }
        free(rw), free(rg), free(rm), free(rv), free(mag);
    }
    v_report(&vd, op, "%d spans, gaps, grad_scale %g%s%s", o.n_spans, grad_scale,
             lamb && !has_fp64 ? " (no fp64: not per-tensor bits)" : ", per-tensor bits",
             w16 == BT_BF16 ? ", bf16 copy of w" : w16 == BT_F16 ? ", f16 copy of w" : "");
    tensors_free(tm, ntm);
    free(h16);
    tensors_free(ts, 4);
    if (o.scratch) be->free(be, o.scratch);
    free(w), free(g), free(m), free(v);
}

/* Launches and reads of one multi step do not grow with the number of spans. */
static void multi_launches(bt_backend *be, bool lamb) {
    const char *op = lamb ? "lamb_multi" : "adamw_multi";
    multi_args o = make_spans(0.5f);
    verdict vd = v_new();
    bt_buffer *buf = be->alloc(be, 4 * o.total * 4);
    if (!buf) {
        v_fail(&vd, "alloc failed");
    } else {
        bt_ptr w = {buf, 0}, g = bt_at(w, o.total), m = bt_at(w, 2 * o.total), v = bt_at(w, 3 * o.total);
        be->fill(be, w, 0.5f, 4 * o.total);
        long launches[2], reads[2];
        int counts[2] = {2, N_SPANS};
        for (int k = 0; k < 2; k++) {
            bt_counters a, b;
            be->sync(be);
            be->counters(be, &a);
            if (lamb)
                be->lamb_multi(be, w, g, m, v, (bt_ptr){NULL, 0}, BT_F32, o.spans, counts[k], o.lr, o.b1, o.b2, o.eps, o.min_coeff, o.max_coeff,
                               o.grad_scale, -1);
            else
                be->adamw_multi(be, w, g, m, v, (bt_ptr){NULL, 0}, BT_F32, o.spans, counts[k], o.lr, o.b1, o.b2, o.eps, o.grad_scale, -1);
            be->counters(be, &b);
            launches[k] = b.launches - a.launches;
            reads[k] = b.host_reads - a.host_reads;
        }
        be->sync(be);
        be->free(be, buf);
        if (launches[1] != launches[0])
            v_fail(&vd, "%ld launches for %d spans, %ld for %d", launches[0], counts[0], launches[1], counts[1]);
        if (reads[0] || reads[1]) v_fail(&vd, "%ld and %ld blocking reads", reads[0], reads[1]);
        if (vd.ok) v_metric(&vd, "launches", (double)launches[1], 8.0);
    }
    v_report(&vd, op, "launches 2 = %d spans, no reads", N_SPANS);
}

/* The host's sum of partials (bt_sum_blocked), whose order LAMB's trust
 * kernel follows, in its documented order, under "ref/host": 1 then 258
 * values of 0.75 ulp(1) / 2, each lost when added to 1 alone. Up to
 * BT_SUM_BLOCKS partials the plain order gives 1; 259 go in 130 blocks of 2
 * (the last of 1), and each block [t, t] carries 1 up by one ulp: 1 + 128 ulp. */
static void host_sum_order(void) {
    enum { N = 259 };
    float p[2 * N];
    const float t = 0.75f * ldexpf(1.0f, -53);
    for (int i = 0; i < 2 * N; i++) p[i] = i < 2 ? 1.0f : t; /* stride 2: p[0] = 1 */
    verdict v = v_new();
    const double plain = bt_sum_blocked(p, 256, 2), blocked = bt_sum_blocked(p, N, 2),
                 want = 1.0 + 128 * ldexp(1.0, -52);
    if (plain != 1.0) v_fail(&v, "256 partials: %.17g, want 1 (plain order)", plain);
    if (blocked != want) v_fail(&v, "259 partials: %.17g, want %.17g (blocks of 2)", blocked, want);
    const char *save = g_backend_name;
    g_backend_name = "ref/host";
    v_report(&v, "lamb_multi", "the host's order of partials (bt_sum_blocked)");
    g_backend_name = save;
}

void test_multi_optimizers(bt_backend *be) {
    bt_device_info info;
    be->info(be, &info);
    if (want_op("lamb_multi")) host_sum_order();
    for (int lamb = 0; lamb < 2; lamb++) {
        if (!want_op(lamb ? "lamb_multi" : "adamw_multi")) continue;
        multi_case(be, lamb, info.has_fp64, 1.0f, BT_F32);
        /* clipping folded in (--quick, for Oclgrind's time: with the bf16 copy alone) */
        if (!g_quick) multi_case(be, lamb, info.has_fp64, 0.37f, BT_F32);
        multi_case(be, lamb, info.has_fp64, 0.37f, BT_BF16); /* the 16-bit weights too */
        multi_case(be, lamb, info.has_fp64, 1.0f, BT_F16);
        multi_launches(be, lamb);
    }
}
