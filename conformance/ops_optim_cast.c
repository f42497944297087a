/* Conformance checks of the optimizer steps adamw_step / lamb_update and of
 * cast between f32, f16 and bf16. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================= adamw_step / lamb_update ================= */

typedef struct {
    size_t n;
    float lr, b1, b2, eps, wd, bc1, bc2;
} optimizer_args;
static void run_adamw(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    optimizer_args *o = a; /* w, g, m, v */
    be->adamw_step(be, t[0].p, t[1].p, t[2].p, t[3].p, o->n, o->lr, o->b1, o->b2, o->eps, o->wd,
                   o->bc1, o->bc2);
}
static void run_lamb(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    optimizer_args *o = a; /* w, g, m, v, u */
    be->lamb_update(be, t[4].p, t[0].p, t[1].p, t[2].p, t[3].p, o->n, o->b1, o->b2, o->eps, o->wd,
                    o->bc1, o->bc2);
}

void test_optimizers(bt_backend *be) {
    if (!want_op("adamw_step") && !want_op("lamb_update")) return;
    for (size_t si = 0; si < sizeof VECTOR_SHAPES / sizeof *VECTOR_SHAPES; si++) {
        if (skip_shape(VECTOR_SHAPES[si].quick)) continue;
        reseed("optimizers", si);
        size_t n = VECTOR_SHAPES[si].n;
        float *w = rand_floats(n, 1, 0), *g = rand_floats(n, 1, 0), *m = rand_floats(n, 0.1, 0),
              *v = rand_floats(n, 0.01, 0);
        for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]); /* second moments are >= 0 */
        /* step 3 with bias correction, large lr; and no bias correction, no decay */
        optimizer_args cases[2] = {
            {n, 0.05f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f - 0.729f, (float)(1.0 - pow(0.999, 3))},
            {n, 1e-3f, 0.9f, 0.98f, 1e-8f, 0.0f, 1.0f, 1.0f}};
        for (int c = 0; c < 2; c++) {
            optimizer_args o = cases[c];
            double *rw = ref_dup(w, n), *rg = ref_dup(g, n), *rm = ref_dup(m, n), *rv = ref_dup(v, n),
                   *ru = ref_alloc(n * 8), *mw = ref_alloc(n * 8), *mm = ref_alloc(n * 8);
            for (size_t i = 0; i < n; i++) /* |terms| of the new first moment */
                mm[i] = o.b1 * fabs((double)m[i]) + (1.0 - o.b1) * fabs((double)g[i]);
            if (want_op("adamw_step")) {
                ref_adamw(rw, rg, rm, rv, n, o.lr, o.b1, o.b2, o.eps, o.wd, o.bc1, o.bc2);
                for (size_t i = 0; i < n; i++) /* |decayed w| + |update| built from |m terms| */
                    mw[i] = fabs(w[i] * (1.0 - (double)o.lr * o.wd)) +
                            (double)o.lr / o.bc1 * mm[i] / (sqrt(rv[i]) / sqrt((double)o.bc2) + o.eps);
                tensor t[] = {tensor_out("w", w, n), tensor_in("g", g, n), tensor_out("m", m, n),
                              tensor_out("v", v, n)};
                verdict vd = v_new();
                if (exec_op(&vd, be, t, 4, run_adamw, &o, NULL)) {
                    v_nmse(&vd, "w", RES(t[0]), rw, mw, n, THR_ROUND);
                    v_nmse(&vd, "m", RES(t[2]), rm, mm, n, THR_ROUND);
                    v_nmse(&vd, "v", RES(t[3]), rv, NULL, n, THR_ROUND); /* positive terms */
                }
                v_report(&vd, "adamw_step", "n=%zu lr=%g wd=%g bc=%s", n, o.lr, o.wd, c ? "1" : "step3");
                tensors_free(t, 4);
                free(rw), free(rm), free(rv);
                rw = ref_dup(w, n), rm = ref_dup(m, n), rv = ref_dup(v, n);
            }
            if (want_op("lamb_update")) {
                o.wd = 0.01f;
                ref_lamb(ru, rw, rg, rm, rv, n, o.b1, o.b2, o.eps, o.wd, o.bc1, o.bc2);
                for (size_t i = 0; i < n; i++) /* |direction| built from |m terms| + |wd w| */
                    mw[i] = mm[i] / o.bc1 / (sqrt(rv[i] / o.bc2) + o.eps) + fabs(o.wd * rw[i]);
                tensor t[] = {tensor_in("w", w, n), tensor_in("g", g, n), tensor_out("m", m, n),
                              tensor_out("v", v, n), tensor_out("u", NULL, n)};
                verdict vd = v_new();
                if (exec_op(&vd, be, t, 5, run_lamb, &o, NULL)) {
                    v_nmse(&vd, "u", RES(t[4]), ru, mw, n, THR_ROUND);
                    v_nmse(&vd, "m", RES(t[2]), rm, mm, n, THR_ROUND);
                    v_nmse(&vd, "v", RES(t[3]), rv, NULL, n, THR_ROUND);
                }
                v_report(&vd, "lamb_update", "n=%zu wd=%g bc=%s", n, o.wd, c ? "1" : "step3");
                tensors_free(t, 5);
            }
            free(rw), free(rg), free(rm), free(rv), free(ru), free(mw), free(mm);
        }
        free(w), free(g), free(m), free(v);
    }
}

/* ================= cast ================= */

typedef struct {
    size_t n;
    bt_dtype src, mid, dst;
    int roundtrip;
} cast_args;
static void run_cast(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    cast_args *c = a; /* src, dst | src f32, mid, dst f32 */
    if (!c->roundtrip) {
        be->cast(be, t[1].p, c->dst, t[0].p, c->src, c->n);
        return;
    }
    be->cast(be, t[1].p, c->mid, t[0].p, BT_F32, c->n);
    be->cast(be, t[2].p, BT_F32, t[1].p, c->mid, c->n);
}

static double round_to(bt_dtype t, double x) {
    return t == BT_F16 ? ref_round_f16(x) : t == BT_BF16 ? ref_round_bf16(x) : (double)(float)x;
}
static double value_of(bt_dtype t, uint16_t h) { return t == BT_F16 ? ref_f16_value(h) : ref_bf16_value(h); }

/* 16-bit result h encodes want (NaN: any NaN) */
static bool same16(bt_dtype t, uint16_t h, double want_) {
    if (isnan(want_)) return isnan(value_of(t, h));
    return h == (t == BT_F16 ? ref_f16_bits(want_) : ref_bf16_bits(want_));
}
/* float result f equals want (NaN: any NaN; zero signs must match) */
static bool same32(float f, double want_) {
    if (isnan(want_)) return isnan(f);
    float w = (float)want_;
    return memcmp(&f, &w, 4) == 0;
}

/* Round-trip test values: specials, exact ties of the format and random values. */
static float *cast_inputs(bt_dtype t, size_t *count) {
    static const float spec[] = {
        0.0f, -0.0f, 1.0f, -1.0f, -3.14159f, 65504.0f, 65519.0f, 65520.0f, 65536.0f, 1e10f,
        3.4028235e38f, INFINITY, -INFINITY, NAN, -NAN, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f,
        0x1.8p-24f, 0x1.ff8p-15f, 0x1.ffcp-15f, 0x1p-14f, 0x1.002p0f, 0x1.006p0f, 1e-8f,
        0x1p-149f, 0x1p-126f, 0x1.01p0f, 0x1.03p0f, 0x1.ffp127f, 0x1.fefffep127f, 0x1p-133f,
        0x1p-134f, 0x1.8p-133f, -0x1.8p-133f, -0x1p-25f, -65520.0f};
    /* NaNs whose payload sits in the low bits (signaling, all ones): rounding
     * must not carry them into Inf or flip the sign */
    static const uint32_t nan_bits[] = {0x7f800001u, 0x7fffffffu, 0xff800001u, 0xffffffffu,
                                        0x7f80ffffu, 0x7fa00000u};
    const size_t nn = sizeof nan_bits / sizeof *nan_bits;
    size_t ns = sizeof spec / sizeof *spec + nn, n = ns + 3000 + 3000;
    float *x = ref_alloc(n * 4);
    memcpy(x, spec, sizeof spec);
    memcpy(x + ns - nn, nan_bits, sizeof nan_bits);
    uint16_t top = t == BT_F16 ? 0x7bfe : 0x7f7e; /* last finite with a finite successor */
    for (size_t i = ns; i < ns + 3000; i++) { /* midpoints between neighbours: exact ties */
        uint16_t h = (uint16_t)(1 + ref_int(&g_input_rng, top));
        double mid = 0.5 * (value_of(t, h) + value_of(t, (uint16_t)(h + 1)));
        x[i] = (float)(ref_int(&g_input_rng, 2) ? -mid : mid);
    }
    for (size_t i = ns + 3000; i < n; i++) {
        uint32_t bits = (uint32_t)ref_next(&g_input_rng);
        if (t == BT_F16) /* exponents around the binary16 range */
            bits = (bits & 0x807fffffu) | (uint32_t)(127 - 27 + ref_int(&g_input_rng, 45)) << 23;
        memcpy(x + i, &bits, 4);
    }
    *count = n;
    return x;
}

static const char *dtype_name(bt_dtype t) { return t == BT_F16 ? "f16" : t == BT_BF16 ? "bf16" : "f32"; }

void test_cast(bt_backend *be) {
    if (!want_op("cast")) return;
    reseed("cast", 0);
    static const bt_dtype fmts[2] = {BT_F16, BT_BF16};
    for (int fi = 0; fi < 2; fi++) { /* f32 -> fmt -> f32, checking the 16-bit bits too */
        bt_dtype t = fmts[fi];
        size_t n;
        float *x = cast_inputs(t, &n);
        cast_args c = {n, BT_F32, t, BT_F32, 1};
        tensor tt[] = {tensor_in("src", x, n), tensor_16bit("mid", NULL, n, true),
                       tensor_out("dst", NULL, n)};
        verdict v = v_new();
        if (exec_op(&v, be, tt, 3, run_cast, &c, NULL)) {
            const uint16_t *mid = tt[1].res;
            const float *out = tt[2].res;
            size_t bad16 = 0, bad32 = 0, first = n;
            double *fin = ref_alloc(n * 8);
            float *fo = ref_alloc(n * 4);
            size_t nf = 0;
            for (size_t i = 0; i < n; i++) {
                double want_ = round_to(t, x[i]);
                if (!same16(t, mid[i], want_)) bad16++, first = first < i ? first : i;
                if (!same32(out[i], want_)) bad32++, first = first < i ? first : i;
                if (isfinite(want_)) fin[nf] = want_, fo[nf++] = out[i];
            }
            v_metric(&v, "values", ref_nmse(fo, fin, nf), THR_EXACT);
            if (bad16 || bad32)
                v_fail(&v, "%zu %s and %zu f32 results wrong, first %.9g -> 0x%04x -> %.9g, want %.9g",
                       bad16, dtype_name(t), bad32, x[first], mid[first], out[first], round_to(t, x[first]));
            free(fin), free(fo);
        }
        v_report(&v, "cast", "f32->%s->f32 %zu values", dtype_name(t), n);
        tensors_free(tt, 3);
        free(x);
    }
    /* every 16-bit pattern: to f32, and to the other 16-bit format */
    uint16_t *all = ref_alloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    for (int k = 0; k < 4; k++) {
        bt_dtype src = fmts[k & 1], dst = k < 2 ? BT_F32 : fmts[!(k & 1)];
        cast_args c = {65536, src, BT_F32, dst, 0};
        tensor tt[] = {tensor_16bit("src", all, 65536, false),
                       dst == BT_F32 ? tensor_out("dst", NULL, 65536)
                                     : tensor_16bit("dst", NULL, 65536, true)};
        verdict v = v_new();
        if (exec_op(&v, be, tt, 2, run_cast, &c, NULL)) {
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < 65536; i++) {
                double want_ = dst == BT_F32 ? value_of(src, all[i]) : round_to(dst, value_of(src, all[i]));
                bool ok = dst == BT_F32 ? same32(((const float *)tt[1].res)[i], want_)
                                        : same16(dst, ((const uint16_t *)tt[1].res)[i], want_);
                if (!ok && !bad++) first = i;
            }
            v_metric(&v, "mismatches", (double)bad, 0.0);
            if (bad) v_fail(&v, "first at source 0x%04zx", first);
        }
        v_report(&v, "cast", "%s->%s all 65536 (mismatches)", dtype_name(src), dtype_name(dst));
        tensors_free(tt, 2);
    }
    free(all);
    { /* f32 -> f32 is a copy */
        size_t n;
        float *x = cast_inputs(BT_BF16, &n);
        cast_args c = {n, BT_F32, BT_F32, BT_F32, 0};
        tensor tt[] = {tensor_in("src", x, n), tensor_out("dst", NULL, n)};
        verdict v = v_new();
        if (exec_op(&v, be, tt, 2, run_cast, &c, NULL))
            for (size_t i = 0; i < n; i++)
                if (!same32(RES(tt[1])[i], x[i])) {
                    v_fail(&v, "element %zu: %.9g -> %.9g", i, x[i], RES(tt[1])[i]);
                    break;
                }
        v_report(&v, "cast", "f32->f32 %zu values", n);
        tensors_free(tt, 2);
        free(x);
    }
}

/* ================= round16 ================= */

typedef struct {
    size_t n;
    bt_dtype t;
} round16_args;
static void run_round16(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    round16_args *r = a;
    be->round16(be, t[0].p, r->t, r->n);
}

void test_round16(bt_backend *be) {
    if (!want_op("round16")) return;
    static const bt_dtype fmts[2] = {BT_F16, BT_BF16};
    for (int fi = 0; fi < 2; fi++) {
        const bt_dtype t = fmts[fi];
        reseed("round16", (size_t)fi);
        size_t count;
        float *pool = cast_inputs(t, &count); /* specials first, random bits last */
        for (int si = 0; si < 8; si++) {
            const vector_shape *sh = &VECTOR_SHAPES[si];
            if (skip_shape(sh->quick)) continue;
            const size_t n = sh->n, start = n < count ? count - n : 0; /* small: random values */
            float *x = ref_alloc(n * 4);
            for (size_t i = 0; i < n; i++) x[i] = pool[(start + i) % count];
            round16_args r = {n, t};
            tensor tt[] = {tensor_out("x", x, n)};
            verdict v = v_new();
            if (exec_op(&v, be, tt, 1, run_round16, &r, NULL)) {
                size_t bad = 0, first = 0;
                for (size_t i = 0; i < n; i++)
                    if (!same32(RES(tt[0])[i], round_to(t, x[i])) && !bad++) first = i;
                v_metric(&v, "mismatches", (double)bad, 0.0);
                if (bad)
                    v_fail(&v, "%zu wrong, first %.9g -> %.9g, want %.9g", bad, x[first],
                           RES(tt[0])[first], round_to(t, x[first]));
            }
            v_report(&v, "round16", "%s in place, %zu values%s (mismatches)", dtype_name(t), n,
                     n >= count ? " +specials" : "");
            tensors_free(tt, 1);
            free(x);
        }
        free(pool);
    }
}
