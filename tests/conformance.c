/* bertrain backend conformance suite.
 *
 *   conformance [--backend SPEC]... [--op NAME] [--seed N] [--quick] [--threads-check]
 *
 * Checks every op of the bt_backend dispatch table (backends/backend.h) on one
 * or more backends against the float64 references of conformance_ref.c, using
 * only the public interface (alloc/upload/download and the ops). Every tensor
 * lives in a larger device buffer with sentinel guard bands on both sides;
 * every op runs twice and must give the same bits; inputs must come back
 * unchanged. Backward ops are compared with analytic float64 gradients, which
 * are in turn checked against finite differences of the float64 forwards.
 *
 * One line per check: op, shape, backend, metric (NMSE unless noted), PASS|FAIL;
 * then "N passed, N failed, N skipped". Exit 1 on any failure, 77 when
 * everything was skipped, 0 otherwise. */
#include "../backends/backend.h"
#include "../backends/philox.h"
#include "conformance_ref.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* NMSE thresholds against the float64 reference. fp32 unit roundoff is
 * u = 2^-24 ~ 6e-8, u^2 ~ 3.6e-15.
 *  THR_EXACT 0      ops that only move bits (copy, fill, gather, upload): any
 *                   difference is a bug.
 *  THR_ROUND 1e-12  a handful (<= ~8) of fp32 roundings per element and no long
 *                   sums (add, axpy, bias_add, embed_fwd, scatter, tanh_bwd,
 *                   optimizer steps): |err| <= 8u|ref| bounds NMSE by 2.3e-13.
 * Where the terms of an output can cancel, the NMSE denominator uses, per
 * element, max(ref^2, mag^2) with mag = sum of |terms| from the reference (see
 * ref_nmse_mag): fp32 error is bounded by a few u * mag, so the bounds above
 * hold, while plain NMSE over a handful of elements is decided by whichever
 * element happens to cancel. For well-conditioned data the two agree to a
 * small constant factor; a real bug still gives errors of order mag.
 *  THR_MATH  1e-9   libm-grade transcendentals (a few ulp) and fp32 reductions
 *                   over up to ~3e4 terms (gemm K <= 768, bias_grad over 256
 *                   rows, layernorm, softmax, xent): rounding errors add as a
 *                   random walk, NMSE ~ K u^2 ~ 3e-12 for K = 768; 1e-9 leaves
 *                   ~300x margin while any wrong or missing term gives >= ~1e-6.
 * Finite-difference checks of the references use a relative error of FD_TOL. */
#define THR_EXACT 0.0
#define THR_ROUND 1e-12
#define THR_MATH 1e-9
#define SCALAR_TOL 1e-6
#define FD_TOL 1e-6
#define FD_H 0x1p-10 /* exact in double next to any float; see ref_fd */

#define MAXT 8       /* tensors per op call */
#define GUARD 64     /* guard bytes on each side of every tensor (64-byte aligned) */
#define SENTINEL 0xA5

/* ---------------- global state ---------------- */

static ref_rng g_rng;      /* inputs: reseeded per test and shape (see reseed) */
static ref_rng g_fdrng;    /* finite-difference coordinates (independent of inputs) */
static uint64_t g_seed = 0x5EEDB3A7ull;
static const char *g_op;   /* --op filter */
static bool g_quick;
static bool g_fd = true;   /* validate the references (first pass only) */
static const char *g_bname = "cpu";
static int g_npass, g_nfail, g_nskip;
static int g_thread_mode;  /* 0 off, 1 record outputs, 2 compare with the record */

static bool want(const char *op) { return !g_op || strcmp(g_op, op) == 0; }

/* ---------------- results table ---------------- */

static void table_line(const char *op, const char *shape, const char *backend,
                       const char *metric, bool ok, const char *note) {
    printf("%-14s %-42s %-12s %-10s %s%s%s\n", op, shape, backend, metric, ok ? "PASS" : "FAIL",
           !ok && note && *note ? "  " : "", !ok && note ? note : "");
    fflush(stdout);
    if (ok)
        g_npass++;
    else
        g_nfail++;
}

typedef struct {
    bool ok, have;
    double shown, ratio;          /* worst metric and its ratio to its threshold */
    bool thr_checked, thr_same;   /* thread invariance (compare pass) */
    double thr_nmse;
    char note[240];
} verdict;

static verdict v_new(void) {
    verdict v;
    memset(&v, 0, sizeof v);
    v.ok = v.thr_same = true;
    return v;
}

static void v_fail(verdict *v, const char *fmt, ...) {
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    v->ok = false;
    size_t len = strlen(v->note);
    if (strstr(v->note, msg) || len + 8 >= sizeof v->note) return; /* once per message */
    snprintf(v->note + len, sizeof v->note - len, "%s%s", len ? "; " : "", msg);
}

/* Record a metric; fails when value > thr (or NaN). */
static void v_metric(verdict *v, const char *what, double value, double thr) {
    double ratio = value <= thr ? (thr > 0 ? value / thr : 0.0) : INFINITY;
    if (!v->have || ratio > v->ratio || (isnan(value) && !isnan(v->shown))) {
        v->shown = value;
        v->ratio = ratio;
        v->have = true;
    }
    if (!(value <= thr)) v_fail(v, "%s %.3g > %.0e", what, value, thr);
}

/* NMSE of out against ref; mag (or NULL): magnitudes of the terms of each
 * element, see ref_nmse_mag. */
static void v_nmse(verdict *v, const char *what, const float *out, const double *ref,
                   const double *mag, size_t n, double thr) {
    v_metric(v, what, ref_nmse_mag(out, ref, mag, n), thr);
}

/* Bit-exact comparison of floats (NMSE shown for information). */
static void v_bits(verdict *v, const char *what, const float *out, const float *want_, size_t n) {
    double *r = ref_dup(want_, n);
    v_metric(v, what, ref_nmse(out, r, n), THR_EXACT);
    free(r);
    for (size_t i = 0; i < n; i++)
        if (memcmp(out + i, want_ + i, 4) != 0) {
            v_fail(v, "%s[%zu] = %.9g, want %.9g (bits)", what, i, out[i], want_[i]);
            return;
        }
}

static void v_report(verdict *v, const char *op, const char *fmt, ...) {
    char shape[96], metric[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shape, sizeof shape, fmt, ap);
    va_end(ap);
    if (v->have)
        snprintf(metric, sizeof metric, "%.2e", v->shown);
    else
        snprintf(metric, sizeof metric, "-");
    table_line(op, shape, g_bname, metric, v->ok, v->note);
    if (v->thr_checked) {
        snprintf(metric, sizeof metric, "%.2e", v->thr_nmse);
        table_line(op, shape, "t1-vs-t2", metric, v->thr_same,
                   v->thr_same ? "" : "outputs differ between 1 and 2 threads");
    }
}

/* Reference self-checks (finite differences) are reported under "ref/fd". */
#define FD_REPORT(f, ...)                 \
    do {                                  \
        const char *save_ = g_bname;      \
        g_bname = "ref/fd";               \
        v_report(&(f), __VA_ARGS__);      \
        g_bname = save_;                  \
    } while (0)

/* One finite-difference point: relative error, with a floor for gradients
 * that are (near) zero relative to the largest of their tensor. */
static void fd_point(verdict *f, const char *what, double fd, double an, double floor_) {
    v_metric(f, what, fabs(fd - an) / fmax(fmax(fabs(an), fabs(fd)), fmax(floor_, 1e-300)), FD_TOL);
}

/* ---------------- random inputs ---------------- */

/* Inputs of each test (and its finite-difference coordinates) come from a
 * stream seeded by (--seed, test, shape), so they do not depend on --op or on
 * which tests ran before. */
static void reseed(const char *tag, size_t k) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = tag; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    g_rng.s = g_seed ^ h ^ (k * 0x9E3779B97F4A7C15ull);
    g_fdrng.s = g_rng.s ^ 0xFD5EEDull;
}

/* A random index whose analytic gradient is nonzero, if one turns up quickly
 * (masked keys and one-key rows have exactly zero gradients). */
static size_t fd_pick(const double *an, size_t n) {
    size_t idx = 0;
    for (int tries = 0; tries < 64; tries++) {
        idx = (size_t)ref_int(&g_fdrng, (int)n);
        if (an[idx] != 0.0) break;
    }
    return idx;
}

static float *rand_f(size_t n, double scale, double offset) {
    float *x = ref_alloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(offset + scale * ref_normal(&g_rng));
        if (x[i] == 0.0f) x[i] = (float)scale; /* never zero */
    }
    return x;
}

static int32_t *rand_i(size_t n, int lo, int hi) {
    int32_t *x = ref_alloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = lo + ref_int(&g_rng, hi - lo);
    return x;
}

static double maxabs(const double *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* ---------------- device execution harness ---------------- */

typedef struct {
    const char *name;
    size_t n, esz;     /* elements, bytes per element */
    const void *init;  /* host contents before the op; NULL: NaN bytes (write-only) */
    bool out;          /* the op may write it */
    bt_ptr p;          /* device address during the op */
    void *res;         /* contents after the op */
} tens;

static tens tin(const char *name, const void *init, size_t n) {
    return (tens){.name = name, .n = n, .esz = 4, .init = init, .out = false};
}
static tens tout(const char *name, const void *init, size_t n) {
    return (tens){.name = name, .n = n, .esz = 4, .init = init, .out = true};
}
static tens t16(const char *name, const void *init, size_t n, bool out) {
    return (tens){.name = name, .n = n, .esz = 2, .init = init, .out = out};
}

static void tens_free(tens *t, int nt) {
    for (int i = 0; i < nt; i++) {
        free(t[i].res);
        t[i].res = NULL;
    }
}

typedef void (*run_fn)(bt_backend *be, tens *t, void *arg, double *scal);

/* Upload every tensor into its own guarded buffer, run, download, check the
 * guards and the inputs. res[i] receives each tensor's contents. */
static bool exec_once(verdict *v, bt_backend *be, tens *t, int nt, run_fn fn, void *arg,
                      double *scal, void **res) {
    bt_buffer *buf[MAXT] = {0};
    bool ok = true;
    for (int i = 0; i < nt && ok; i++) {
        size_t bytes = t[i].n * t[i].esz, total = bytes + 2 * GUARD;
        buf[i] = be->alloc(be, total);
        if (!buf[i]) {
            v_fail(v, "alloc(%zu) failed", total);
            ok = false;
            break;
        }
        unsigned char *st = ref_alloc(total);
        memset(st, SENTINEL, total);
        if (t[i].init)
            memcpy(st + GUARD, t[i].init, bytes);
        else
            memset(st + GUARD, 0xFF, bytes); /* NaN: unwritten outputs show */
        be->upload(be, (bt_ptr){buf[i], 0}, st, total);
        free(st);
        t[i].p = (bt_ptr){buf[i], GUARD};
    }
    if (ok) {
        memset(scal, 0, 4 * sizeof *scal);
        fn(be, t, arg, scal);
        be->sync(be);
        for (int i = 0; i < nt; i++) {
            size_t bytes = t[i].n * t[i].esz, total = bytes + 2 * GUARD;
            unsigned char *st = ref_alloc(total);
            be->download(be, st, (bt_ptr){buf[i], 0}, total);
            for (size_t j = 0; j < total; j++)
                if ((j < GUARD || j >= GUARD + bytes) && st[j] != SENTINEL) {
                    v_fail(v, "guard %s %s overwritten", j < GUARD ? "before" : "after", t[i].name);
                    break;
                }
            if (!t[i].out && t[i].init && memcmp(st + GUARD, t[i].init, bytes) != 0)
                v_fail(v, "input %s modified", t[i].name);
            res[i] = ref_alloc(bytes);
            memcpy(res[i], st + GUARD, bytes);
            free(st);
        }
    }
    for (int i = 0; i < nt; i++)
        if (buf[i]) be->free(be, buf[i]);
    return ok;
}

typedef struct {
    size_t bytes;
    unsigned char *data;
} record;
static record *g_rec;
static size_t g_nrec, g_caprec, g_recpos;

static double nmse_ff(const float *out, const float *ref, size_t n) {
    double *r = ref_dup(ref, n), e = ref_nmse(out, r, n);
    free(r);
    return e;
}

/* --threads-check: record this op's outputs (pass 1) or compare (pass 2). */
static void thread_check(verdict *v, tens *t, int nt, const double *scal) {
    if (!g_thread_mode) return;
    size_t bytes = 4 * sizeof *scal;
    for (int i = 0; i < nt; i++)
        if (t[i].out) bytes += t[i].n * t[i].esz;
    unsigned char *cat = ref_alloc(bytes), *p = cat;
    memcpy(p, scal, 4 * sizeof *scal);
    p += 4 * sizeof *scal;
    for (int i = 0; i < nt; i++)
        if (t[i].out) {
            memcpy(p, t[i].res, t[i].n * t[i].esz);
            p += t[i].n * t[i].esz;
        }
    if (g_thread_mode == 1) {
        if (g_nrec == g_caprec) {
            g_caprec = g_caprec ? 2 * g_caprec : 256;
            g_rec = realloc(g_rec, g_caprec * sizeof *g_rec);
            if (!g_rec) exit(2);
        }
        g_rec[g_nrec++] = (record){bytes, cat};
        return;
    }
    v->thr_checked = true;
    if (g_recpos >= g_nrec || g_rec[g_recpos].bytes != bytes) {
        v->thr_same = false;
        v->thr_nmse = INFINITY;
    } else if (memcmp(g_rec[g_recpos].data, cat, bytes) != 0) {
        v->thr_same = false;
        double s0[4];
        memcpy(s0, g_rec[g_recpos].data, sizeof s0);
        for (int i = 0; i < 4; i++) /* scalar results: squared relative difference */
            if (memcmp(s0 + i, scal + i, sizeof *scal) != 0)
                v->thr_nmse = fmax(v->thr_nmse, s0[i] == 0 ? INFINITY
                                                            : pow((scal[i] - s0[i]) / s0[i], 2));
        const unsigned char *q = g_rec[g_recpos].data + 4 * sizeof *scal;
        p = cat + 4 * sizeof *scal;
        for (int i = 0; i < nt; i++) {
            if (!t[i].out) continue;
            if (t[i].esz == 4)
                v->thr_nmse = fmax(v->thr_nmse, nmse_ff((const float *)(const void *)p,
                                                        (const float *)(const void *)q, t[i].n));
            p += t[i].n * t[i].esz;
            q += t[i].n * t[i].esz;
        }
    }
    g_recpos++;
    free(cat);
}

/* Run an op twice on fresh copies of the inputs; both runs must give the same
 * bits. On success t[i].res holds the outputs (free with tens_free). */
static bool exec_op(verdict *v, bt_backend *be, tens *t, int nt, run_fn fn, void *arg,
                    double *scal) {
    void *r1[MAXT] = {0}, *r2[MAXT] = {0};
    double s1[4], s2[4];
    if (!scal) scal = s1;
    bool ok = exec_once(v, be, t, nt, fn, arg, scal, r1);
    if (ok && exec_once(v, be, t, nt, fn, arg, s2, r2)) {
        for (int i = 0; i < nt; i++)
            if (t[i].out && memcmp(r1[i], r2[i], t[i].n * t[i].esz) != 0)
                v_fail(v, "%s differs between two identical runs", t[i].name);
        if (memcmp(scal, s2, sizeof s2) != 0) v_fail(v, "result differs between two identical runs");
    }
    for (int i = 0; i < nt; i++) {
        t[i].res = r1[i];
        free(r2[i]);
    }
    if (ok) thread_check(v, t, nt, scal);
    return ok;
}

#define RES(t) ((const float *)(t).res)

/* ---------------- shapes ---------------- */

typedef struct {
    size_t n;
    bool quick, big;
} n_shape;
static const n_shape NS[] = {{1, 1, 0},    {3, 0, 0},    {17, 1, 0},    {255, 0, 0},
                             {1000, 0, 0}, {4099, 1, 0}, {8195, 0, 0}, {196608, 0, 1}};

typedef struct {
    int r, c;
    bool quick, big;
} rc_shape;
static const rc_shape RC[] = {{1, 1, 1, 0},   {1, 7, 0, 0},   {3, 5, 1, 0},    {7, 33, 0, 0},
                              {13, 100, 0, 0}, {31, 65, 1, 0}, {256, 768, 0, 1}};

/* --quick keeps only the shapes marked quick (never the BERT-size ones). */
static bool skip_shape(bool quick) { return g_quick && !quick; }

/* ================= memory ops ================= */

static void test_memory(bt_backend *be) {
    reseed("memory", 0);
    unsigned char pat[4096 + 64], back[4096 + 64];
    for (size_t i = 0; i < sizeof pat; i++) pat[i] = (unsigned char)(ref_next(&g_rng) | 1);

    if (want("alloc")) { /* sizes; usable memory; NULL on absurd requests */
        verdict v = v_new();
        static const size_t sizes[] = {1, 4, 100, 4100, 1 << 22};
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            bt_buffer *b = be->alloc(be, sizes[s]);
            if (!b) {
                v_fail(&v, "alloc(%zu) returned NULL", sizes[s]);
                continue;
            }
            size_t k = sizes[s] < 4096 ? sizes[s] : 4096, at = sizes[s] - k;
            be->upload(be, (bt_ptr){b, at}, pat, k);
            be->download(be, back, (bt_ptr){b, at}, k);
            if (memcmp(pat, back, k) != 0) v_fail(&v, "alloc(%zu): data lost", sizes[s]);
            be->free(be, b);
        }
        bt_buffer *huge = be->alloc(be, (size_t)1 << 60);
        if (huge) {
            v_fail(&v, "alloc(2^60) did not return NULL");
            be->free(be, huge);
        }
        v_report(&v, "alloc", "1B..4MiB, 2^60 -> NULL");
    }
    if (want("free")) { /* many cycles; live buffers stay distinct */
        verdict v = v_new();
        bt_buffer *b[8] = {0};
        for (int cyc = 0; cyc < 64; cyc++) {
            int k = cyc % 8;
            if (b[k]) be->free(be, b[k]);
            b[k] = be->alloc(be, 64 + (size_t)cyc * 97);
            if (!b[k]) v_fail(&v, "alloc failed in cycle %d", cyc);
        }
        for (int k = 0; k < 8; k++)
            if (b[k]) be->upload(be, (bt_ptr){b[k], 0}, pat + k, 64);
        for (int k = 0; k < 8; k++)
            if (b[k]) {
                be->download(be, back, (bt_ptr){b[k], 0}, 64);
                if (memcmp(back, pat + k, 64) != 0) v_fail(&v, "buffers overlap");
                be->free(be, b[k]);
            }
        v_report(&v, "free", "64 alloc/free cycles");
    }
    /* upload / download / copy at byte offsets, with guards on both sides */
    static const size_t cases[][2] = {{0, 256}, {64, 4}, {67, 13}, {128, 4096}};
    for (int op = 0; op < 3; op++) {
        const char *name = op == 0 ? "upload" : op == 1 ? "download" : "copy";
        if (!want(name)) continue;
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            size_t off = cases[c][0], len = cases[c][1], total = off + len + GUARD;
            verdict v = v_new();
            bt_buffer *d = be->alloc(be, total), *s = be->alloc(be, total);
            unsigned char *sent = ref_alloc(total), *got = ref_alloc(total + GUARD),
                          *expect = ref_alloc(total);
            memset(sent, SENTINEL, total);
            if (!d || !s) {
                v_fail(&v, "alloc failed");
            } else {
                be->upload(be, (bt_ptr){d, 0}, sent, total);
                memcpy(expect, sent, total);
                memcpy(expect + off, pat, len);
                if (op == 0) {
                    be->upload(be, (bt_ptr){d, off}, pat, len);
                } else if (op == 2) { /* copy from another buffer at another offset */
                    be->upload(be, (bt_ptr){s, 0}, sent, total);
                    be->upload(be, (bt_ptr){s, GUARD / 2 + (c & 1)}, pat, len);
                    be->copy(be, (bt_ptr){d, off}, (bt_ptr){s, GUARD / 2 + (c & 1)}, len);
                } else {
                    be->upload(be, (bt_ptr){d, 0}, expect, total);
                }
                be->sync(be);
                memset(got, 0x3C, total + GUARD);
                if (op == 1) { /* partial download into a host buffer with a guard */
                    be->download(be, got, (bt_ptr){d, off}, len);
                    if (memcmp(got, pat, len) != 0) v_fail(&v, "data differs");
                    for (size_t j = len; j < len + GUARD; j++)
                        if (got[j] != 0x3C) {
                            v_fail(&v, "wrote past the host destination");
                            break;
                        }
                } else {
                    be->download(be, got, (bt_ptr){d, 0}, total);
                    if (memcmp(got + off, pat, len) != 0) v_fail(&v, "data differs");
                    if (memcmp(got, expect, off) != 0 ||
                        memcmp(got + off + len, expect + off + len, GUARD) != 0)
                        v_fail(&v, "guard overwritten");
                }
            }
            if (d) be->free(be, d);
            if (s) be->free(be, s);
            free(sent);
            free(got);
            free(expect);
            v_report(&v, name, "%zu bytes at +%zu", len, off);
        }
    }
    if (want("info")) {
        verdict v = v_new();
        bt_device_info info;
        memset(&info, 0x5A, sizeof info);
        be->info(be, &info);
        if (!memchr(info.name, 0, sizeof info.name) || !memchr(info.vendor, 0, sizeof info.vendor))
            v_fail(&v, "name/vendor not NUL-terminated");
        else if (!info.name[0])
            v_fail(&v, "empty name");
        if (info.total_mem == 0) v_fail(&v, "total_mem is 0");
        if (info.compute_units <= 0) v_fail(&v, "compute_units <= 0");
        if (v.ok) printf("# %s: %s (%s), %d compute units, %zu MiB\n", g_bname, info.name,
                         info.vendor, info.compute_units, info.total_mem >> 20);
        v_report(&v, "info", "fields filled");
    }
    if (want("sync")) { /* op, sync, then the result must be visible */
        verdict v = v_new();
        bt_buffer *b = be->alloc(be, 4096);
        float got[1024];
        if (!b) {
            v_fail(&v, "alloc failed");
        } else {
            be->fill(be, (bt_ptr){b, 0}, 3.5f, 1024);
            be->sync(be);
            be->sync(be);
            be->download(be, got, (bt_ptr){b, 0}, sizeof got);
            for (int i = 0; i < 1024; i++)
                if (got[i] != 3.5f) {
                    v_fail(&v, "fill not visible after sync");
                    break;
                }
            be->free(be, b);
        }
        v_report(&v, "sync", "fill; sync; download");
    }
}

/* ================= fill / add / scale / axpy ================= */

typedef struct {
    size_t n;
    float alpha;
    int inplace;
} vec_a;

static void run_fill(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    be->fill(be, t[0].p, ((vec_a *)a)->alpha, ((vec_a *)a)->n);
}
static void run_add(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    vec_a *q = a; /* inplace: out aliases a (as the engine's residual adds) */
    be->add(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->n);
}
static void run_scale(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    be->scale(be, t[0].p, ((vec_a *)a)->alpha, ((vec_a *)a)->n);
}
static void run_axpy(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    be->axpy(be, t[0].p, ((vec_a *)a)->alpha, t[1].p, ((vec_a *)a)->n);
}

static void test_vector_ops(bt_backend *be) {
    for (size_t si = 0; si < sizeof NS / sizeof *NS; si++) {
        if (skip_shape(NS[si].quick)) continue;
        reseed("vector", si);
        size_t n = NS[si].n;
        float *a = rand_f(n, 1.0, 0.0), *b = rand_f(n, 2.0, 0.5);
        double *ra = ref_dup(a, n), *rb = ref_dup(b, n), *r = ref_alloc(n * sizeof *r),
               *mag = ref_alloc(n * sizeof *mag);
        if (want("fill")) {
            vec_a q = {n, (si & 1) ? -0.0f : -1.25f, 0};
            float *e = ref_alloc(n * sizeof *e);
            for (size_t i = 0; i < n; i++) e[i] = q.alpha;
            tens t[] = {tout("x", a, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 1, run_fill, &q, NULL)) v_bits(&v, "x", RES(t[0]), e, n);
            v_report(&v, "fill", "n=%zu value=%g", n, q.alpha);
            tens_free(t, 1);
            free(e);
        }
        for (int inpl = 0; inpl < 2 && want("add"); inpl++) {
            vec_a q = {n, 0, inpl};
            tens t[] = {inpl ? tout("a", a, n) : tin("a", a, n), tin("b", b, n), tout("out", NULL, n)};
            for (size_t i = 0; i < n; i++) r[i] = ra[i] + rb[i], mag[i] = fabs(ra[i]) + fabs(rb[i]);
            verdict v = v_new();
            if (exec_op(&v, be, t, inpl ? 2 : 3, run_add, &q, NULL))
                v_nmse(&v, "out", RES(t[inpl ? 0 : 2]), r, mag, n, THR_ROUND);
            v_report(&v, "add", "n=%zu%s", n, inpl ? " out=a" : "");
            tens_free(t, 3);
        }
        if (want("scale")) {
            vec_a q = {n, (si & 1) ? 0.37f : -2.5f, 0};
            tens t[] = {tout("x", a, n)};
            for (size_t i = 0; i < n; i++) r[i] = ra[i] * q.alpha;
            verdict v = v_new();
            if (exec_op(&v, be, t, 1, run_scale, &q, NULL)) v_nmse(&v, "x", RES(t[0]), r, NULL, n, THR_ROUND);
            v_report(&v, "scale", "n=%zu alpha=%g", n, q.alpha);
            tens_free(t, 1);
        }
        if (want("axpy")) { /* accumulates into a nonzero y */
            vec_a q = {n, (si & 1) ? -0.625f : 1.7f, 0};
            tens t[] = {tout("y", b, n), tin("x", a, n)};
            for (size_t i = 0; i < n; i++)
                r[i] = rb[i] + (double)q.alpha * ra[i], mag[i] = fabs(rb[i]) + fabs(q.alpha * ra[i]);
            verdict v = v_new();
            if (exec_op(&v, be, t, 2, run_axpy, &q, NULL)) v_nmse(&v, "y", RES(t[0]), r, mag, n, THR_ROUND);
            v_report(&v, "axpy", "n=%zu alpha=%g", n, q.alpha);
            tens_free(t, 2);
        }
        free(a), free(b), free(ra), free(rb), free(r), free(mag);
    }
}

/* ================= gemm ================= */

typedef struct {
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
    long sa, sb, sc;
    int batch;
    float alpha, beta;
} gemm_a;

static void run_gemm(bt_backend *be, tens *t, void *arg, double *s) {
    (void)s;
    gemm_a *g = arg;
    be->gemm(be, g->ta, g->tb, g->m, g->n, g->k, g->alpha, t[0].p, g->lda, g->sa, t[1].p,
             g->ldb, g->sb, g->beta, t[2].p, g->ldc, g->sc, g->batch);
}

static size_t gemm_span(int rows, int ld, long stride, int batch) {
    return (size_t)stride * (size_t)(batch - 1) + (size_t)rows * (size_t)ld;
}

/* One gemm call; C elements outside the m x n blocks must stay untouched.
 * nan_c: C's logical region holds NaN (beta = 0 must ignore it). */
static void gemm_case(bt_backend *be, gemm_a g, bool nan_c, const char *label) {
    reseed("gemm", (size_t)g.m * 1000003u + (size_t)g.n * 1009u + (size_t)g.k * 7u +
                       (size_t)g.batch * 131u + (size_t)g.ta + 2u * g.tb + 4u * (size_t)g.lda);
    size_t na = gemm_span(g.ta ? g.k : g.m, g.lda, g.sa, g.batch);
    size_t nb = gemm_span(g.tb ? g.n : g.k, g.ldb, g.sb, g.batch);
    size_t nc = gemm_span(g.m, g.ldc, g.sc, g.batch);
    float *A = rand_f(na, 1.0, 0.0), *B = rand_f(nb, 1.0, 0.0), *C = rand_f(nc, 1.0, 0.0);
    unsigned char *logical = ref_zalloc(nc);
    for (int b = 0; b < g.batch; b++)
        for (int i = 0; i < g.m; i++)
            for (int j = 0; j < g.n; j++) logical[(size_t)b * g.sc + (size_t)i * g.ldc + j] = 1;
    if (nan_c)
        for (size_t i = 0; i < nc; i++)
            if (logical[i]) C[i] = NAN;
    double *rA = ref_dup(A, na), *rB = ref_dup(B, nb), *rC = ref_dup(C, nc);
    ref_gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, rA, g.lda, g.sa, rB, g.ldb, g.sb, g.beta, rC,
             g.ldc, g.sc, g.batch);
    double *aA = ref_abs(A, na), *aB = ref_abs(B, nb), *mC = ref_abs(C, nc); /* |terms| */
    ref_gemm(g.ta, g.tb, g.m, g.n, g.k, fabsf(g.alpha), aA, g.lda, g.sa, aB, g.ldb, g.sb,
             fabsf(g.beta), mC, g.ldc, g.sc, g.batch);
    tens t[] = {tin("A", A, na), tin("B", B, nb), tout("C", C, nc)};
    verdict v = v_new();
    if (exec_op(&v, be, t, 3, run_gemm, &g, NULL)) {
        v_nmse(&v, "C", RES(t[2]), rC, mC, nc, THR_MATH);
        for (size_t i = 0; i < nc; i++)
            if (!logical[i] && memcmp(RES(t[2]) + i, C + i, 4) != 0) {
                v_fail(&v, "C[%zu] outside the m x n blocks modified", i);
                break;
            }
    }
    v_report(&v, "gemm", "%dx%dx%d %c%c%s a=%g b=%g%s", g.m, g.n, g.k, g.ta ? 'T' : 'N',
             g.tb ? 'T' : 'N', label, g.alpha, g.beta, nan_c ? " C=NaN" : "");
    tens_free(t, 3);
    free(A), free(B), free(C), free(rA), free(rB), free(rC), free(logical), free(aA), free(aB), free(mC);
}

static void run_gemm_bwd(bt_backend *be, tens *t, void *arg, double *s) {
    (void)s;
    gemm_a *g = arg; /* t: A (m,k), B (k,n), dC (m,n), dA, dB */
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
    gemm_a g = {.m = m, .n = n, .k = k, .alpha = alpha};
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *A = rand_f(na, 1, 0), *B = rand_f(nb, 1, 0), *dC = rand_f(nc, 1, 0),
          *dA = rand_f(na, 1, 0), *dB = rand_f(nb, 1, 0);
    double *rA = ref_dup(A, na), *rB = ref_dup(B, nb), *rdC = ref_dup(dC, nc),
           *rdA = ref_dup(dA, na), *rdB = ref_dup(dB, nb);
    ref_gemm_bwd(m, n, k, alpha, rA, rB, rdC, rdA, rdB);
    double *aA = ref_abs(A, na), *aB = ref_abs(B, nb), *adC = ref_abs(dC, nc),
           *mA = ref_abs(dA, na), *mB = ref_abs(dB, nb); /* |terms| */
    ref_gemm_bwd(m, n, k, fabsf(alpha), aA, aB, adC, mA, mB);
    tens t[] = {tin("A", A, na), tin("B", B, nb), tin("dC", dC, nc), tout("dA", dA, na),
                tout("dB", dB, nb)};
    verdict v = v_new();
    if (exec_op(&v, be, t, 5, run_gemm_bwd, &g, NULL)) {
        v_nmse(&v, "dA", RES(t[3]), rdA, mA, na, THR_MATH);
        v_nmse(&v, "dB", RES(t[4]), rdB, mB, nb, THR_MATH);
    }
    v_report(&v, "gemm", "%dx%dx%d bwd dA+=dC B^T, dB+=A^T dC", m, n, k);
    tens_free(t, 5);
    if (g_fd) { /* reference backward vs finite differences of the forward */
        verdict f = v_new();
        double *ga = ref_zalloc(na * sizeof *ga), *gb = ref_zalloc(nb * sizeof *gb);
        ref_gemm_bwd(m, n, k, alpha, rA, rB, rdC, ga, gb);
        gemm_fd_ctx ctx = {m, n, k, alpha, rA, rB};
        for (int s = 0; s < 6; s++) {
            bool isa = s < 3;
            size_t idx = (size_t)ref_int(&g_fdrng, (int)(isa ? na : nb));
            double an = isa ? ga[idx] : gb[idx], fl = 1e-4 * maxabs(isa ? ga : gb, isa ? na : nb);
            double fd = ref_fd(fwd_gemm, &ctx, nc, rdC, isa ? rA : rB, idx, FD_H);
            fd_point(&f, isa ? "dA" : "dB", fd, an, fl);
        }
        FD_REPORT(f, "gemm", "%dx%dx%d bwd vs FD of fwd", m, n, k);
        free(ga), free(gb);
    }
    free(A), free(B), free(dC), free(dA), free(dB), free(rA), free(rB), free(rdC), free(rdA), free(rdB);
    free(aA), free(aB), free(adC), free(mA), free(mB);
}

static void test_gemm(bt_backend *be) {
    if (!want("gemm")) return;
    static const int shapes[][4] = {{1, 1, 1, 1}, {1, 7, 3, 0}, {5, 3, 17, 1}, {17, 33, 65, 0},
                                    {63, 15, 129, 1}, {4, 16, 64, 0}};
    static const float ab[4][2] = {{1, 0}, {0.75f, 1}, {-1.5f, 0.5f}, {1, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        if (g_quick && !shapes[s][3]) continue;
        for (int tr = 0; tr < 4; tr++) {
            gemm_a g = {.ta = tr & 1, .tb = tr >> 1, .m = shapes[s][0], .n = shapes[s][1],
                        .k = shapes[s][2], .batch = 1, .alpha = ab[tr][0], .beta = ab[tr][1]};
            int pad = (int)(s + tr) % 2 ? 3 : 0; /* leading dimensions beyond the columns */
            g.lda = (g.ta ? g.m : g.k) + pad;
            g.ldb = (g.tb ? g.k : g.n) + pad;
            g.ldc = g.n + pad;
            gemm_case(be, g, false, pad ? " ld+3" : "");
        }
    }
    /* beta = 0 ignores C, even NaN */
    gemm_case(be, (gemm_a){.m = 17, .n = 33, .k = 65, .lda = 65, .ldb = 33, .ldc = 33, .batch = 1,
                           .alpha = 1, .beta = 0}, true, "");
    /* strided batches with gaps */
    gemm_case(be, (gemm_a){.tb = true, .m = 13, .n = 9, .k = 7, .lda = 9, .ldb = 8, .ldc = 11,
                           .sa = 13 * 9 + 5, .sb = 9 * 8 + 3, .sc = 13 * 11 + 7, .batch = 3,
                           .alpha = 0.5f, .beta = 1}, false, " batch3");
    gemm_case(be, (gemm_a){.ta = true, .m = 7, .n = 5, .k = 11, .lda = 7, .ldb = 5, .ldc = 5,
                           .sa = 77, .sb = 55, .sc = 35, .batch = 4, .alpha = 1, .beta = 0.25f},
              false, " batch4");
    /* attention layout: heads interleaved in rows of 3H (QK^T), and P V into ctx (ldc H) */
    for (int big = 0; big < 2; big++) {
        if (big && g_quick) continue;
        int T = big ? 128 : 9, D = big ? 64 : 4, NH = big ? 12 : 3, H = D * NH;
        gemm_case(be, (gemm_a){.tb = true, .m = T, .n = T, .k = D, .lda = 3 * H, .ldb = 3 * H,
                               .ldc = T, .sa = D, .sb = D, .sc = (long)T * T, .batch = NH,
                               .alpha = 0.125f, .beta = 0}, false, " QK^T heads");
        gemm_case(be, (gemm_a){.m = T, .n = D, .k = T, .lda = T, .ldb = 3 * H, .ldc = H,
                               .sa = (long)T * T, .sb = D, .sc = D, .batch = NH, .alpha = 1,
                               .beta = 0}, false, " PV heads");
    }
    if (!g_quick) { /* BERT-base linear layers */
        gemm_case(be, (gemm_a){.m = 128, .n = 768, .k = 768, .lda = 768, .ldb = 768, .ldc = 768,
                               .batch = 1, .alpha = 1, .beta = 0}, false, "");
        gemm_case(be, (gemm_a){.tb = true, .m = 128, .n = 768, .k = 768, .lda = 768, .ldb = 768,
                               .ldc = 768, .batch = 1, .alpha = 1, .beta = 0}, false, "");
        gemm_case(be, (gemm_a){.ta = true, .m = 768, .n = 768, .k = 128, .lda = 768, .ldb = 768,
                               .ldc = 768, .batch = 1, .alpha = 1, .beta = 1}, false, "");
    }
    gemm_bwd_case(be, 5, 3, 17, 1.0f);
    gemm_bwd_case(be, 17, 33, 65, 0.5f);
    if (!g_quick) gemm_bwd_case(be, 128, 768, 768, 1.0f);
}

/* ================= bias_add / bias_grad ================= */

typedef struct {
    int rows, cols;
} rc_a;
static void run_bias_add(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    be->bias_add(be, t[0].p, t[1].p, ((rc_a *)a)->rows, ((rc_a *)a)->cols);
}
static void run_bias_grad(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    be->bias_grad(be, t[0].p, t[1].p, ((rc_a *)a)->rows, ((rc_a *)a)->cols);
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

static void test_bias(bt_backend *be) {
    for (size_t si = 0; si < sizeof RC / sizeof *RC; si++) {
        if (skip_shape(RC[si].quick)) continue;
        reseed("bias", si);
        rc_a q = {RC[si].r, RC[si].c};
        size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols;
        float *y = rand_f(n, 1, 0), *bias = rand_f(c, 1, 0), *db = rand_f(c, 1, 0);
        double *ry = ref_dup(y, n), *rbias = ref_dup(bias, c), *rdb = ref_dup(db, c);
        if (want("bias_add")) {
            double *r = ref_dup(y, n), *mag = ref_abs(y, n), *ab = ref_abs(bias, c);
            ref_bias_add(r, rbias, q.rows, q.cols);
            ref_bias_add(mag, ab, q.rows, q.cols);
            tens t[] = {tout("y", y, n), tin("bias", bias, c)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 2, run_bias_add, &q, NULL)) v_nmse(&v, "y", RES(t[0]), r, mag, n, THR_ROUND);
            v_report(&v, "bias_add", "%dx%d", q.rows, q.cols);
            tens_free(t, 2);
            free(r), free(mag), free(ab);
        }
        if (want("bias_grad")) { /* dy = y; accumulates into a nonzero dbias */
            ref_bias_grad(rdb, ry, q.rows, q.cols);
            double *mag = ref_abs(db, c), *ay = ref_abs(y, n);
            ref_bias_grad(mag, ay, q.rows, q.cols);
            tens t[] = {tout("dbias", db, c), tin("dy", y, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 2, run_bias_grad, &q, NULL))
                v_nmse(&v, "dbias", RES(t[0]), rdb, mag, c, THR_MATH);
            v_report(&v, "bias_grad", "%dx%d +=", q.rows, q.cols);
            tens_free(t, 2);
            free(mag), free(ay);
            if (g_fd) { /* bias_grad is the adjoint of bias_add */
                verdict f = v_new();
                double *an = ref_zalloc(c * sizeof *an), *w = ref_dup(bias, c);
                double *dy = ref_alloc(n * sizeof *dy);
                for (size_t i = 0; i < n; i++) dy[i] = ref_normal(&g_fdrng);
                ref_bias_grad(an, dy, q.rows, q.cols);
                bias_fd_ctx ctx = {q.rows, q.cols, ry, w};
                for (int s = 0; s < 3; s++) {
                    size_t idx = (size_t)ref_int(&g_fdrng, q.cols);
                    double fd = ref_fd(fwd_bias, &ctx, n, dy, w, idx, FD_H);
                    fd_point(&f, "dbias", fd, an[idx], 1e-4 * maxabs(an, c));
                }
                FD_REPORT(f, "bias_grad", "%dx%d vs FD of bias_add", q.rows, q.cols);
                free(an), free(w), free(dy);
            }
        }
        free(y), free(bias), free(db), free(ry), free(rbias), free(rdb);
    }
}


/* ================= embed_fwd / embed_bwd ================= */

typedef struct {
    int B, T, C, V, TV, P, pad;
} emb_a;
static void run_embed_fwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    emb_a *e = a; /* out, ids, tt, wte, wpe, wtt */
    be->embed_fwd(be, t[0].p, t[1].p, t[2].p, t[3].p, t[4].p, t[5].p, e->B, e->T, e->C);
}
static void run_embed_bwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    emb_a *e = a; /* dwte, dwpe, dwtt, dout, ids, tt */
    be->embed_bwd(be, t[0].p, t[1].p, t[2].p, t[3].p, t[4].p, t[5].p, e->B, e->T, e->C, e->V,
                  e->TV, e->pad);
}

typedef struct {
    emb_a e;
    const int32_t *ids, *tt;
    double *wte, *wpe, *wtt;
} emb_fd_ctx;
static void fwd_embed(void *c, double *out) {
    emb_fd_ctx *x = c;
    ref_embed_fwd(out, x->ids, x->tt, x->wte, x->wpe, x->wtt, x->e.B, x->e.T, x->e.C);
}

static void test_embed(bt_backend *be) {
    if (!want("embed_fwd") && !want("embed_bwd")) return;
    static const int shapes[][7] = {/* B, T, C, V, TV, pad_id, quick (-1: big) */
                                    {1, 1, 1, 2, 1, -1, 1},  {2, 5, 7, 11, 2, 0, 0},
                                    {3, 17, 33, 50, 3, 1, 1}, {2, 9, 20, 6, 2, -1, 0},
                                    {2, 128, 768, 4096, 2, 0, -1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const int *sh = shapes[si];
        if (skip_shape(sh[6] == 1)) continue;
        reseed("embed", si);
        emb_a e = {sh[0], sh[1], sh[2], sh[3], sh[4], sh[1] + 3, sh[5]};
        size_t N = (size_t)e.B * e.T, C = (size_t)e.C, nte = (size_t)e.V * C,
               npe = (size_t)e.P * C, ntt = (size_t)e.TV * C;
        int32_t *ids = rand_i(N, 0, e.V), *tt = rand_i(N, 0, e.TV);
        if (e.pad >= 0)
            for (size_t i = 0; i < N; i++)
                if (ref_int(&g_rng, 5) == 0) ids[i] = e.pad; /* ~20% padding tokens */
        float *wte = rand_f(nte, 1, 0), *wpe = rand_f(npe, 1, 0), *wtt = rand_f(ntt, 1, 0),
              *dout = rand_f(N * C, 1, 0);
        double *rte = ref_dup(wte, nte), *rpe = ref_dup(wpe, npe), *rtt = ref_dup(wtt, ntt),
               *rd = ref_dup(dout, N * C);
        if (want("embed_fwd")) {
            double *r = ref_alloc(N * C * sizeof *r), *mag = ref_alloc(N * C * sizeof *mag);
            double *a1 = ref_abs(wte, nte), *a2 = ref_abs(wpe, npe), *a3 = ref_abs(wtt, ntt);
            ref_embed_fwd(r, ids, tt, rte, rpe, rtt, e.B, e.T, e.C);
            ref_embed_fwd(mag, ids, tt, a1, a2, a3, e.B, e.T, e.C);
            tens t[] = {tout("out", NULL, N * C), tin("ids", ids, N), tin("type_ids", tt, N),
                        tin("wte", wte, nte), tin("wpe", wpe, npe), tin("wtt", wtt, ntt)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 6, run_embed_fwd, &e, NULL)) v_nmse(&v, "out", RES(t[0]), r, mag, N * C, THR_ROUND);
            v_report(&v, "embed_fwd", "B%d T%d C%d V%d TV%d", e.B, e.T, e.C, e.V, e.TV);
            tens_free(t, 6);
            free(r), free(mag), free(a1), free(a2), free(a3);
        }
        if (want("embed_bwd")) { /* wte, wpe, wtt double as the nonzero initial gradients */
            double *gte = ref_dup(wte, nte), *gpe = ref_dup(wpe, npe), *gtt = ref_dup(wtt, ntt);
            ref_embed_bwd(gte, gpe, gtt, rd, ids, tt, e.B, e.T, e.C, e.pad);
            double *m1 = ref_abs(wte, nte), *m2 = ref_abs(wpe, npe), *m3 = ref_abs(wtt, ntt),
                   *ad = ref_abs(dout, N * C);
            ref_embed_bwd(m1, m2, m3, ad, ids, tt, e.B, e.T, e.C, e.pad);
            tens t[] = {tout("dwte", wte, nte), tout("dwpe", wpe, npe), tout("dwtt", wtt, ntt),
                        tin("dout", dout, N * C), tin("ids", ids, N), tin("type_ids", tt, N)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 6, run_embed_bwd, &e, NULL)) {
                v_nmse(&v, "dwte", RES(t[0]), gte, m1, nte, THR_MATH);
                v_nmse(&v, "dwpe", RES(t[1]), gpe, m2, npe, THR_MATH);
                v_nmse(&v, "dwtt", RES(t[2]), gtt, m3, ntt, THR_MATH);
                if (e.pad >= 0 && memcmp(RES(t[0]) + (size_t)e.pad * C, wte + (size_t)e.pad * C, C * 4))
                    v_fail(&v, "pad_id row of dwte modified");
                if (memcmp(RES(t[1]) + (size_t)e.T * C, wpe + (size_t)e.T * C, (npe - (size_t)e.T * C) * 4))
                    v_fail(&v, "dwpe rows >= T modified");
            }
            v_report(&v, "embed_bwd", "B%d T%d C%d V%d pad%d +=", e.B, e.T, e.C, e.V, e.pad);
            tens_free(t, 6);
            free(gte), free(gpe), free(gtt), free(m1), free(m2), free(m3), free(ad);
        }
        if (want("embed_bwd") && g_fd) { /* adjoint of embed_fwd, minus the pad row */
            verdict f = v_new();
            double *ate = ref_zalloc(nte * 8), *ape = ref_zalloc(npe * 8), *att = ref_zalloc(ntt * 8);
            ref_embed_bwd(ate, ape, att, rd, ids, tt, e.B, e.T, e.C, e.pad);
            emb_fd_ctx ctx = {e, ids, tt, rte, rpe, rtt};
            for (int s = 0; s < 9; s++) {
                int which = s / 3;
                double *par = which == 0 ? rte : which == 1 ? rpe : rtt,
                       *an = which == 0 ? ate : which == 1 ? ape : att;
                size_t np = which == 0 ? nte : which == 1 ? npe : ntt;
                size_t row = which == 0 ? (size_t)ids[ref_int(&g_fdrng, (int)N)]
                             : which == 1 ? (size_t)ref_int(&g_fdrng, e.T)
                                          : (size_t)tt[ref_int(&g_fdrng, (int)N)];
                size_t idx = row * C + (size_t)ref_int(&g_fdrng, e.C);
                if (which == 0 && (int)row == e.pad) { /* excluded: gradient must be 0 */
                    if (an[idx] != 0.0) v_fail(&f, "pad row gradient %g != 0", an[idx]);
                    continue;
                }
                double fd = ref_fd(fwd_embed, &ctx, N * C, rd, par, idx, FD_H);
                fd_point(&f, which == 0 ? "dwte" : which == 1 ? "dwpe" : "dwtt", fd, an[idx],
                         1e-4 * maxabs(an, np));
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
} ln_a;
static void run_ln_fwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    ln_a *q = a; /* out, mean, rstd, x, gamma, beta */
    be->layernorm_fwd(be, t[0].p, t[1].p, t[2].p, t[3].p, t[4].p, t[5].p, q->rows, q->cols, q->eps);
}
static void run_ln_bwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    ln_a *q = a; /* dout, dgamma, dbeta, x, mean, rstd, gamma, [dx] */
    be->layernorm_bwd(be, q->inplace ? t[0].p : t[7].p, t[1].p, t[2].p, t[0].p, t[3].p, t[4].p,
                      t[5].p, t[6].p, q->rows, q->cols);
}

typedef struct {
    ln_a q;
    double *x, *g, *b;
} ln_fd_ctx;
static void fwd_ln(void *c, double *out) {
    ln_fd_ctx *x = c;
    ref_layernorm_fwd(out, NULL, NULL, x->x, x->g, x->b, x->q.rows, x->q.cols, x->q.eps);
}

static void test_layernorm(bt_backend *be) {
    if (!want("layernorm_fwd") && !want("layernorm_bwd")) return;
    for (size_t si = 0; si < sizeof RC / sizeof *RC; si++) {
        if (skip_shape(RC[si].quick)) continue;
        reseed("layernorm", si);
        ln_a q = {RC[si].r, RC[si].c, 0, (si & 1) || RC[si].big ? 1e-12f : 1e-5f};
        size_t n = (size_t)q.rows * q.cols, c = (size_t)q.cols, r = (size_t)q.rows;
        float *x = rand_f(n, 2.0, 0.5), *g = rand_f(c, 0.1, 1.0), *b = rand_f(c, 0.1, 0.0);
        float *dout = rand_f(n, 1, 0), *dg = rand_f(c, 1, 0), *db = rand_f(c, 1, 0);
        double *rx = ref_dup(x, n), *rg = ref_dup(g, c), *rb = ref_dup(b, c), *rd = ref_dup(dout, n);
        double *ro = ref_alloc(n * 8), *rmu = ref_alloc(r * 8), *rrs = ref_alloc(r * 8);
        ref_layernorm_fwd(ro, rmu, rrs, rx, rg, rb, q.rows, q.cols, q.eps);
        float *mu = ref_alloc(r * 4), *rs = ref_alloc(r * 4);
        for (size_t i = 0; i < r; i++) mu[i] = (float)rmu[i], rs[i] = (float)rrs[i];
        if (want("layernorm_fwd")) {
            tens t[] = {tout("out", NULL, n), tout("mean", NULL, r), tout("rstd", NULL, r),
                        tin("x", x, n), tin("gamma", g, c), tin("beta", b, c)};
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
            tens_free(t, 6);
        }
        for (int inpl = 0; inpl < 2 && want("layernorm_bwd"); inpl++) {
            /* the backward gets the float mean/rstd that a forward would save */
            double *dmu = ref_dup(mu, r), *drs = ref_dup(rs, r), *rdx = ref_alloc(n * 8),
                   *rdg = ref_dup(dg, c), *rdb = ref_dup(db, c);
            ref_layernorm_bwd(rdx, rdg, rdb, rd, rx, dmu, drs, rg, q.rows, q.cols);
            double *mdx = ref_alloc(n * 8), *mdg = ref_abs(dg, c), *mdb = ref_abs(db, c);
            ref_layernorm_bwd_mag(mdx, rd, rx, dmu, drs, rg, q.rows, q.cols);
            for (size_t i = 0; i < n; i++) {
                mdg[i % c] += fabs(rd[i] * (rx[i] - dmu[i / c]) * drs[i / c]);
                mdb[i % c] += fabs(rd[i]);
            }
            q.inplace = inpl;
            tens t[] = {inpl ? tout("dout", dout, n) : tin("dout", dout, n), tout("dgamma", dg, c),
                        tout("dbeta", db, c), tin("x", x, n), tin("mean", mu, r),
                        tin("rstd", rs, r), tin("gamma", g, c), tout("dx", NULL, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, inpl ? 7 : 8, run_ln_bwd, &q, NULL)) {
                /* with cols = 1, dx is identically 0 and only mag gives it a scale */
                v_nmse(&v, "dx", RES(t[inpl ? 0 : 7]), rdx, mdx, n, THR_MATH);
                v_nmse(&v, "dgamma", RES(t[1]), rdg, mdg, c, THR_MATH);
                v_nmse(&v, "dbeta", RES(t[2]), rdb, mdb, c, THR_MATH);
            }
            v_report(&v, "layernorm_bwd", "%dx%d +=%s", q.rows, q.cols, inpl ? " dx=dout" : "");
            tens_free(t, 8);
            free(dmu), free(drs), free(rdx), free(rdg), free(rdb), free(mdx), free(mdg), free(mdb);
        }
        if (want("layernorm_bwd") && g_fd) {
            verdict f = v_new();
            double *adx = ref_alloc(n * 8), *adg = ref_zalloc(c * 8), *adb = ref_zalloc(c * 8);
            ref_layernorm_bwd(adx, adg, adb, rd, rx, rmu, rrs, rg, q.rows, q.cols);
            ln_fd_ctx ctx = {q, rx, rg, rb};
            for (int s = 0; s < 9; s++) {
                int which = s / 3;
                double *par = which == 0 ? rx : which == 1 ? rg : rb,
                       *an = which == 0 ? adx : which == 1 ? adg : adb;
                size_t np = which == 0 ? n : c, idx = (size_t)ref_int(&g_fdrng, (int)np);
                double fd = ref_fd(fwd_ln, &ctx, n, rd, par, idx, FD_H);
                fd_point(&f, which == 0 ? "dx" : which == 1 ? "dgamma" : "dbeta", fd, an[idx],
                         1e-4 * maxabs(an, np));
            }
            FD_REPORT(f, "layernorm_bwd", "%dx%d vs FD of fwd", q.rows, q.cols);
            free(adx), free(adg), free(adb);
        }
        free(x), free(g), free(b), free(dout), free(dg), free(db), free(rx), free(rg), free(rb);
        free(rd), free(ro), free(rmu), free(rrs), free(mu), free(rs);
    }
}

/* ================= gelu / tanh ================= */

typedef struct {
    size_t n;
    int inplace;
} un_a;
static void run_gelu_fwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    be->gelu_fwd(be, t[0].p, t[1].p, ((un_a *)a)->n);
}
static void run_tanh_fwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    be->tanh_fwd(be, t[0].p, t[1].p, ((un_a *)a)->n);
}
/* t: dout, x|y, [dx]; inplace: dx aliases dout (as the engine calls them) */
static void run_gelu_bwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    un_a *q = a;
    be->gelu_bwd(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->n);
}
static void run_tanh_bwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    un_a *q = a;
    be->tanh_bwd(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->n);
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

static void test_activations(bt_backend *be) {
    for (size_t si = 0; si < sizeof NS / sizeof *NS; si++) {
        if (skip_shape(NS[si].quick)) continue;
        reseed("activations", si);
        un_a q = {NS[si].n, 0};
        size_t n = q.n;
        float *x = rand_f(n, 3.0, 0.0), *dout = rand_f(n, 1.0, 0.0), *y = ref_alloc(n * 4);
        double *rx = ref_dup(x, n), *rd = ref_dup(dout, n), *r = ref_alloc(n * 8),
               *ax = ref_abs(x, n), *ad = ref_abs(dout, n);
        for (size_t i = 0; i < n; i++) y[i] = (float)tanh(rx[i]);
        for (int op = 0; op < 2; op++) {
            const char *fname = op ? "tanh_fwd" : "gelu_fwd", *bname = op ? "tanh_bwd" : "gelu_bwd";
            if (want(fname)) {
                for (size_t i = 0; i < n; i++) r[i] = op ? tanh(rx[i]) : ref_gelu(rx[i]);
                tens t[] = {tout("out", NULL, n), tin("x", x, n)};
                verdict v = v_new();
                /* gelu: x/2 + x erf(x/sqrt2)/2 cancels for x << 0: mag = |x| */
                if (exec_op(&v, be, t, 2, op ? run_tanh_fwd : run_gelu_fwd, &q, NULL))
                    v_nmse(&v, "out", RES(t[0]), r, op ? NULL : ax, n, THR_MATH);
                v_report(&v, fname, "n=%zu", n);
                tens_free(t, 2);
            }
            for (int inpl = 0; inpl < 2 && want(bname); inpl++) {
                for (size_t i = 0; i < n; i++) /* tanh_bwd takes the float output y */
                    r[i] = rd[i] * (op ? 1.0 - (double)y[i] * y[i] : ref_gelu_grad(rx[i]));
                q.inplace = inpl;
                tens t[] = {inpl ? tout("dout", dout, n) : tin("dout", dout, n),
                            tin(op ? "y" : "x", op ? y : x, n), tout("dx", NULL, n)};
                verdict v = v_new();
                /* 1 - y*y (|y| -> 1) and cdf + x pdf (x << 0) cancel: mag = |dout| */
                if (exec_op(&v, be, t, inpl ? 2 : 3, op ? run_tanh_bwd : run_gelu_bwd, &q, NULL))
                    v_nmse(&v, "dx", RES(t[inpl ? 0 : 2]), r, ad, n, op ? THR_ROUND : THR_MATH);
                v_report(&v, bname, "n=%zu%s", n, inpl ? " dx=dout" : "");
                tens_free(t, 3);
            }
            if (want(bname) && g_fd) {
                verdict f = v_new();
                un_fd_ctx ctx = {n, op == 1, rx};
                for (int s = 0; s < 3; s++) {
                    size_t idx = (size_t)ref_int(&g_fdrng, (int)n);
                    double th = tanh(rx[idx]);
                    double an = rd[idx] * (op ? 1.0 - th * th : ref_gelu_grad(rx[idx]));
                    fd_point(&f, "dx", ref_fd(fwd_unary, &ctx, n, rd, rx, idx, FD_H), an,
                             1e-4 * maxabs(rd, n)); /* gelu', tanh' <= ~1.13 */
                }
                FD_REPORT(f, bname, "n=%zu vs FD of fwd", n);
            }
        }
        free(x), free(dout), free(y), free(rx), free(rd), free(r), free(ax), free(ad);
    }
}

/* ================= softmax ================= */

typedef struct {
    int B, H, T, inplace;
    float scale;
} sm_a;
static void run_sm_fwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    sm_a *q = a; /* scores, mask, [probs] */
    be->softmax_fwd(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->B, q->H, q->T, q->scale);
}
static void run_sm_bwd(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    sm_a *q = a; /* dprobs, probs, [dscores] */
    be->softmax_bwd(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->B * q->H * q->T, q->T,
                    q->scale);
}

typedef struct {
    sm_a q;
    const int32_t *mask;
    double *s;
} sm_fd_ctx;
static void fwd_sm(void *c, double *out) {
    sm_fd_ctx *x = c;
    ref_softmax_fwd(out, x->s, x->mask, x->q.B, x->q.H, x->q.T, x->q.scale);
}

static void test_softmax(bt_backend *be) {
    if (!want("softmax_fwd") && !want("softmax_bwd")) return;
    static const int shapes[][4] = {/* B, H, T, quick (-1: big) */
                                    {1, 1, 1, 1}, {1, 2, 3, 0}, {2, 3, 17, 1}, {3, 2, 33, 0},
                                    {2, 2, 65, 0}, {2, 12, 128, -1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (skip_shape(shapes[si][3] == 1)) continue;
        reseed("softmax", si);
        sm_a q = {shapes[si][0], shapes[si][1], shapes[si][2], 0, (si & 1) ? 1.0f : 0.125f};
        size_t rows = (size_t)q.B * q.H * q.T, n = rows * q.T;
        int32_t *mask = ref_alloc((size_t)q.B * q.T * 4);
        static const int32_t keepv[] = {1, 1, 1, 2, -1}; /* any nonzero keeps */
        for (int b = 0; b < q.B; b++) {
            int32_t *m = mask + (size_t)b * q.T, any = 0;
            bool single = b == q.B - 1 && q.B > 1 && q.T > 2; /* one key left */
            for (int j = 0; j < q.T; j++) {
                m[j] = single || ref_uniform(&g_rng) < 0.3 ? 0 : keepv[ref_int(&g_rng, 5)];
                any |= m[j];
            }
            if (!any) m[ref_int(&g_rng, q.T)] = 1;
        }
        float *sc = rand_f(n, 3.0, 0.0), *dp = rand_f(n, 1.0, 0.0), *pf = ref_alloc(n * 4);
        double *rs = ref_dup(sc, n), *rp = ref_alloc(n * 8), *rdp = ref_dup(dp, n);
        ref_softmax_fwd(rp, rs, mask, q.B, q.H, q.T, q.scale);
        for (size_t i = 0; i < n; i++) pf[i] = (float)rp[i];
        for (int inpl = 0; inpl < 2 && want("softmax_fwd"); inpl++) {
            q.inplace = inpl;
            tens t[] = {inpl ? tout("scores", sc, n) : tin("scores", sc, n),
                        tin("key_mask", mask, (size_t)q.B * q.T), tout("probs", NULL, n)};
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
            tens_free(t, 3);
        }
        for (int inpl = 0; inpl < 2 && want("softmax_bwd"); inpl++) {
            double *pd = ref_dup(pf, n), *r = ref_alloc(n * 8), *mag = ref_alloc(n * 8);
            ref_softmax_bwd(r, rdp, pd, (int)rows, q.T, q.scale);
            ref_softmax_bwd_mag(mag, rdp, pd, (int)rows, q.T, q.scale);
            q.inplace = inpl;
            tens t[] = {inpl ? tout("dprobs", dp, n) : tin("dprobs", dp, n), tin("probs", pf, n),
                        tout("dscores", NULL, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, inpl ? 2 : 3, run_sm_bwd, &q, NULL))
                v_nmse(&v, "dscores", RES(t[inpl ? 0 : 2]), r, mag, n, THR_MATH);
            v_report(&v, "softmax_bwd", "rows%zu T%d s=%g%s", rows, q.T, q.scale,
                     inpl ? " in-place" : "");
            tens_free(t, 3);
            free(pd), free(r), free(mag);
        }
        if (want("softmax_bwd") && g_fd) {
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
                fd_point(&f, "dscores", fd, an[idx], 1e-4 * maxabs(an, n));
            }
            FD_REPORT(f, "softmax_bwd", "B%d H%d T%d vs FD of fwd", q.B, q.H, q.T);
            free(an);
        }
        free(mask), free(sc), free(dp), free(pf), free(rs), free(rp), free(rdp);
    }
}

/* ================= dropout ================= */

typedef struct {
    size_t n, per, split;
    uint32_t s0;
    float p;
    bt_rng_key key;
    int inplace;
} dr_a;
static void run_dropout(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    dr_a *d = a; /* in, [out] */
    bt_ptr out = d->inplace ? t[0].p : t[1].p;
    if (!d->split) {
        be->dropout(be, out, t[0].p, d->n, d->per, d->s0, d->p, d->key);
        return;
    }
    be->dropout(be, out, t[0].p, d->split, d->per, d->s0, d->p, d->key);
    be->dropout(be, bt_at(out, d->split), bt_at(t[0].p, d->split), d->n - d->split, d->per,
                d->s0 + (uint32_t)(d->split / d->per), d->p, d->key);
}

/* Expected output: philox.h decides which elements are kept (bit-exact with
 * every backend); kept values are x * (1.0f / (1.0f - p)) in float. */
static float *drop_expect(const float *x, const dr_a *d) {
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
static float *drop_run(verdict *v, bt_backend *be, const float *x, dr_a d) {
    tens t[] = {d.inplace ? tout("x", x, d.n) : tin("x", x, d.n), tout("out", NULL, d.n)};
    if (!exec_op(v, be, t, d.inplace ? 1 : 2, run_dropout, &d, NULL)) {
        tens_free(t, 2);
        return NULL;
    }
    float *o = t[d.inplace ? 0 : 1].res;
    t[d.inplace ? 0 : 1].res = NULL;
    tens_free(t, 2);
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

static void test_dropout(bt_backend *be) {
    if (!want("dropout")) return;
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
        dr_a d = {cases[ci].n, cases[ci].per, 0, cases[ci].s0, cases[ci].p, {0, 0}, 0};
        d.key.seed = ref_next(&g_rng);
        d.key.stream = (ci & 1) ? ref_next(&g_rng) : (uint64_t)ref_int(&g_rng, 100);
        size_t n = d.n;
        char shape[80];
        snprintf(shape, sizeof shape, "n=%zu per=%zu s0=%u p=%g", n, d.per, d.s0, d.p);
        float *x = rand_f(n, 1, 0), *g = rand_f(n, 1, 0), *xg = ref_alloc(n * 4);
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
            double sigma = sqrt((double)d.p * (1.0 - d.p) / (double)n), dev = fabs((double)kept / n - (1.0 - d.p));
            v_metric(&vt, "kept fraction z", sigma > 0 ? dev / sigma : (dev > 0 ? INFINITY : 0), 4.0);
            for (size_t i = 0; i < n; i++)
                if (ox[i] != 0.0f && ox[i] != x[i] * (1.0f / (1.0f - d.p))) {
                    v_fail(&vt, "kept value not x/(1-p) exactly");
                    break;
                }
            for (int k = 0; k < 2 && n >= 64 && d.p > 0.0f; k++) {
                dr_a d2 = d;
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
        if (g_fd) { /* analytic backward (mask * scale * w) vs FD of the forward */
            verdict f = v_new();
            double *rx = ref_dup(x, n), *w = ref_dup(g, n), sc = 1.0f / (1.0f - d.p);
            dr_fd_ctx ctx = {n, sc, keep, rx};
            for (int s = 0; s < 3; s++) {
                size_t idx = (size_t)ref_int(&g_fdrng, (int)n);
                double an = keep[idx] != 0.0f ? w[idx] * sc : 0.0;
                fd_point(&f, "dx", ref_fd(fwd_dropout, &ctx, n, w, rx, idx, FD_H), an, 1e-4 * maxabs(w, n));
            }
            FD_REPORT(f, "dropout", "%s vs FD", shape);
            free(rx), free(w);
        }
        free(x), free(g), free(xg), free(ex), free(eg), free(ones), free(keep), free(ox), free(oi);
    }
}

/* ================= gather_rows / scatter_rows ================= */

typedef struct {
    int n_idx, cols;
} gs_a;
static void run_gather(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    be->gather_rows(be, t[0].p, t[1].p, t[2].p, ((gs_a *)a)->n_idx, ((gs_a *)a)->cols);
}
static void run_scatter(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    be->scatter_rows(be, t[0].p, t[1].p, t[2].p, ((gs_a *)a)->n_idx, ((gs_a *)a)->cols);
}

typedef struct {
    gs_a q;
    const int32_t *idx;
    double *src;
} gs_fd_ctx;
static void fwd_gather(void *c, double *out) {
    gs_fd_ctx *x = c;
    ref_gather_rows(out, x->src, x->idx, x->q.n_idx, x->q.cols);
}

static void test_rows(bt_backend *be) {
    if (!want("gather_rows") && !want("scatter_rows")) return;
    static const int shapes[][4] = {/* rows of src/dst, cols, n_idx, quick (-1: big) */
                                    {1, 1, 1, 1},     {10, 7, 5, 0}, {100, 33, 40, 1},
                                    {50, 65, 80, 0},  {512, 768, 80, -1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (skip_shape(shapes[si][3] == 1)) continue;
        reseed("rows", si);
        int nsrc = shapes[si][0];
        gs_a q = {shapes[si][2], shapes[si][1]};
        size_t ns = (size_t)nsrc * q.cols, ni = (size_t)q.n_idx * q.cols;
        float *big = rand_f(ns, 1, 0), *small = rand_f(ni, 1, 0);
        int32_t *idx = rand_i((size_t)q.n_idx, 0, nsrc);
        double *rbig = ref_dup(big, ns), *rsmall = ref_dup(small, ni);
        if (want("gather_rows")) {
            float *e = ref_alloc(ni * 4);
            for (int i = 0; i < q.n_idx; i++) memcpy(e + (size_t)i * q.cols, big + (size_t)idx[i] * q.cols, (size_t)q.cols * 4);
            tens t[] = {tout("out", NULL, ni), tin("src", big, ns), tin("idx", idx, (size_t)q.n_idx)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 3, run_gather, &q, NULL)) v_bits(&v, "out", RES(t[0]), e, ni);
            v_report(&v, "gather_rows", "%d of %dx%d", q.n_idx, nsrc, q.cols);
            tens_free(t, 3);
            free(e);
        }
        for (int dup = 0; dup < 2 && want("scatter_rows"); dup++) {
            int32_t *ix = ref_alloc((size_t)q.n_idx * 4);
            if (!dup) { /* distinct rows: partial Fisher-Yates */
                if (q.n_idx > nsrc) {
                    free(ix);
                    continue;
                }
                int32_t *perm = ref_alloc((size_t)nsrc * 4);
                for (int i = 0; i < nsrc; i++) perm[i] = i;
                for (int i = 0; i < q.n_idx; i++) {
                    int j = i + ref_int(&g_rng, nsrc - i);
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
                    ix[i] = i > 0 && ref_int(&g_rng, 3) == 0 ? ix[ref_int(&g_rng, i)] : ref_int(&g_rng, nsrc);
                ix[q.n_idx - 1] = ix[0];
            }
            double *r = ref_dup(big, ns), *mag = ref_abs(big, ns), *as = ref_abs(small, ni);
            ref_scatter_rows(r, rsmall, ix, q.n_idx, q.cols);
            ref_scatter_rows(mag, as, ix, q.n_idx, q.cols);
            tens t[] = {tout("dst", big, ns), tin("src", small, ni), tin("idx", ix, (size_t)q.n_idx)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 3, run_scatter, &q, NULL)) v_nmse(&v, "dst", RES(t[0]), r, mag, ns, THR_ROUND);
            v_report(&v, "scatter_rows", "%d into %dx%d +=%s", q.n_idx, nsrc, q.cols,
                     dup ? " dup idx" : " distinct");
            tens_free(t, 3);
            free(r), free(ix), free(mag), free(as);
        }
        if (want("scatter_rows") && g_fd) { /* scatter_rows is the adjoint of gather_rows */
            verdict f = v_new();
            double *an = ref_zalloc(ns * 8);
            ref_scatter_rows(an, rsmall, idx, q.n_idx, q.cols);
            gs_fd_ctx ctx = {q, idx, rbig};
            for (int s = 0; s < 4; s++) {
                size_t row = s == 3 ? (size_t)ref_int(&g_fdrng, nsrc) : (size_t)idx[ref_int(&g_fdrng, q.n_idx)];
                size_t id = row * q.cols + (size_t)ref_int(&g_fdrng, q.cols);
                fd_point(&f, "dsrc", ref_fd(fwd_gather, &ctx, ni, rsmall, rbig, id, FD_H), an[id],
                         1e-4 * maxabs(an, ns));
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
    float gs;
} xe_a;
static void run_xent(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    xe_a *q = a; /* logits, labels, loss, correct, [dlogits] */
    be->xent_fwd_bwd(be, q->inplace ? t[0].p : t[4].p, t[2].p, t[3].p, t[0].p, t[1].p, q->rows,
                     q->V, q->gs);
}

typedef struct {
    xe_a q;
    const int32_t *labels;
    double *logits;
    int row;
} xe_fd_ctx;
static void fwd_xent(void *c, double *out) { /* grad_scale * loss of one row */
    xe_fd_ctx *x = c;
    memset(out, 0, (size_t)x->q.rows * sizeof *out);
    ref_xent(NULL, out, NULL, x->logits, x->labels, x->row, x->row + 1, x->q.V, 1.0);
    out[x->row] *= x->q.gs;
}

static void test_xent(bt_backend *be) {
    if (!want("xent_fwd_bwd")) return;
    static const int shapes[][3] = {/* rows, V, quick (-1: big) */
                                    {1, 1, 1},     {1, 2, 0},       {8, 2, 1},   {3, 7, 0},
                                    {5, 33, 1},    {17, 1000, 0},   {40, 30522, -1}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if (skip_shape(shapes[si][2] == 1)) continue;
        reseed("xent", si);
        xe_a q = {shapes[si][0], shapes[si][1], 0, 0};
        size_t n = (size_t)q.rows * q.V, R = (size_t)q.rows;
        float *x = rand_f(n, 2.0, 0.0);
        int32_t *lab = rand_i(R, 0, q.V);
        int valid = 0;
        for (int r = 0; r < q.rows; r++) {
            if (r > 1 && (r == q.rows - 1 || ref_uniform(&g_rng) < 0.25)) lab[r] = -1; /* ignored */
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
        ref_xent(rd, rl, rc, rx, lab, 0, q.rows, q.V, q.gs);
        float *cf = ref_alloc(R * 4);
        for (size_t r = 0; r < R; r++) cf[r] = (float)rc[r];
        /* |terms|: gs (p + onehot) for dlogits, |lse| + |x_y| for the loss */
        double *md = ref_alloc(n * 8), *ml = ref_zalloc(R * 8);
        for (size_t i = 0; i < n; i++) md[i] = fabs(rd[i]);
        for (size_t r = 0; r < R; r++)
            if (lab[r] >= 0) {
                double xy = rx[r * q.V + (size_t)lab[r]];
                md[r * q.V + (size_t)lab[r]] = q.gs * (rd[r * q.V + (size_t)lab[r]] / q.gs + 2.0);
                ml[r] = fabs(rl[r] + xy) + fabs(xy);
            }
        for (int inpl = 0; inpl < 2; inpl++) {
            q.inplace = inpl;
            tens t[] = {inpl ? tout("logits", x, n) : tin("logits", x, n), tin("labels", lab, R),
                        tout("loss", NULL, R), tout("correct", NULL, R), tout("dlogits", NULL, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, inpl ? 4 : 5, run_xent, &q, NULL)) {
                v_nmse(&v, "dlogits", RES(t[inpl ? 0 : 4]), rd, md, n, THR_MATH);
                v_nmse(&v, "loss", RES(t[2]), rl, ml, R, THR_MATH);
                v_bits(&v, "correct", RES(t[3]), cf, R);
            }
            v_report(&v, "xent_fwd_bwd", "%dx%d gs=%.3g%s", q.rows, q.V, q.gs, inpl ? " in-place" : "");
            tens_free(t, 5);
        }
        if (g_fd) { /* dlogits = d(grad_scale * loss) / dlogits */
            verdict f = v_new();
            for (int s = 0; s < 6; s++) { /* the label, the argmax and a random logit */
                int r = ref_int(&g_fdrng, q.rows), am = 0;
                if (lab[r] < 0) continue;
                const double *xr = rx + (size_t)r * q.V, *dr = rd + (size_t)r * q.V;
                for (int j = 1; j < q.V; j++) am = xr[j] > xr[am] ? j : am;
                int j = s % 3 == 0 ? lab[r] : s % 3 == 1 ? am : ref_int(&g_fdrng, q.V);
                xe_fd_ctx ctx = {q, lab, rx, r};
                size_t idx = (size_t)r * q.V + (size_t)j;
                /* floor: tiny probabilities (~1e-9 at V = 30522) are below what a
                 * difference of double losses resolves; they are checked absolutely */
                fd_point(&f, "dlogits", ref_fd(fwd_xent, &ctx, R, NULL, rx, idx, FD_H), rd[idx],
                         1e-4 * maxabs(dr, (size_t)q.V));
            }
            FD_REPORT(f, "xent_fwd_bwd", "%dx%d vs FD of loss", q.rows, q.V);
        }
        free(x), free(lab), free(rx), free(rd), free(rl), free(rc), free(cf), free(md), free(ml);
    }
}

/* ================= sum / sumsq / all_finite ================= */

typedef struct {
    size_t n;
} red_a;
static void run_sum(bt_backend *be, tens *t, void *a, double *s) { s[0] = be->sum(be, t[0].p, ((red_a *)a)->n); }
static void run_sumsq(bt_backend *be, tens *t, void *a, double *s) { s[0] = be->sumsq(be, t[0].p, ((red_a *)a)->n); }
static void run_finite(bt_backend *be, tens *t, void *a, double *s) {
    s[0] = be->all_finite(be, t[0].p, ((red_a *)a)->n) ? 1.0 : 0.0;
}

static void test_reductions(bt_backend *be) {
    for (size_t si = 0; si < sizeof NS / sizeof *NS; si++) {
        if (skip_shape(NS[si].quick)) continue;
        reseed("reductions", si);
        red_a q = {NS[si].n};
        size_t n = q.n;
        float *x = rand_f(n, 1.0, 0.3);
        for (int sq = 0; sq < 2; sq++) {
            const char *name = sq ? "sumsq" : "sum";
            if (!want(name)) continue;
            long double ref = 0, mag = 0; /* error relative to sum |terms| (as ref_nmse_mag) */
            for (size_t i = 0; i < n; i++) {
                ref += sq ? (long double)x[i] * x[i] : (long double)x[i];
                mag += sq ? (long double)x[i] * x[i] : fabsl((long double)x[i]);
            }
            double got[4];
            tens t[] = {tin("x", x, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 1, sq ? run_sumsq : run_sum, &q, got))
                v_metric(&v, "relative error", fabs(got[0] - (double)ref) / fmax((double)mag, 1e-300), SCALAR_TOL);
            v_report(&v, name, "n=%zu (rel. err)", n);
            tens_free(t, 1);
        }
        if (want("all_finite")) {
            verdict v = v_new();
            static const char *what[] = {"clean", "NaN", "+Inf", "-Inf last"};
            for (int k = 0; k < 4; k++) {
                float *y = ref_alloc(n * 4);
                memcpy(y, x, n * 4);
                size_t pos = k == 3 ? n - 1 : (size_t)ref_int(&g_rng, (int)n);
                if (k) y[pos] = k == 1 ? NAN : k == 2 ? INFINITY : -INFINITY;
                double got[4];
                tens t[] = {tin("x", y, n)};
                if (exec_op(&v, be, t, 1, run_finite, &q, got) && got[0] != (k == 0 ? 1.0 : 0.0))
                    v_fail(&v, "%s: returned %s", what[k], got[0] != 0.0 ? "true" : "false");
                tens_free(t, 1);
                free(y);
            }
            v_report(&v, "all_finite", "n=%zu clean/NaN/+Inf/-Inf", n);
        }
        free(x);
    }
}

/* ================= adamw_step / lamb_update ================= */

typedef struct {
    size_t n;
    float lr, b1, b2, eps, wd, bc1, bc2;
} opt_a;
static void run_adamw(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    opt_a *o = a; /* w, g, m, v */
    be->adamw_step(be, t[0].p, t[1].p, t[2].p, t[3].p, o->n, o->lr, o->b1, o->b2, o->eps, o->wd,
                   o->bc1, o->bc2);
}
static void run_lamb(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    opt_a *o = a; /* w, g, m, v, u */
    be->lamb_update(be, t[4].p, t[0].p, t[1].p, t[2].p, t[3].p, o->n, o->b1, o->b2, o->eps, o->wd,
                    o->bc1, o->bc2);
}

static void test_optimizers(bt_backend *be) {
    if (!want("adamw_step") && !want("lamb_update")) return;
    for (size_t si = 0; si < sizeof NS / sizeof *NS; si++) {
        if (skip_shape(NS[si].quick)) continue;
        reseed("optimizers", si);
        size_t n = NS[si].n;
        float *w = rand_f(n, 1, 0), *g = rand_f(n, 1, 0), *m = rand_f(n, 0.1, 0), *v = rand_f(n, 0.01, 0);
        for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]); /* second moments are >= 0 */
        /* step 3 with bias correction, large lr; and no bias correction, no decay */
        opt_a cases[2] = {{n, 0.05f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f - 0.729f, (float)(1.0 - pow(0.999, 3))},
                          {n, 1e-3f, 0.9f, 0.98f, 1e-8f, 0.0f, 1.0f, 1.0f}};
        for (int c = 0; c < 2; c++) {
            opt_a o = cases[c];
            double *rw = ref_dup(w, n), *rg = ref_dup(g, n), *rm = ref_dup(m, n), *rv = ref_dup(v, n),
                   *ru = ref_alloc(n * 8), *mw = ref_alloc(n * 8), *mm = ref_alloc(n * 8);
            for (size_t i = 0; i < n; i++) /* |terms| of the new first moment */
                mm[i] = o.b1 * fabs((double)m[i]) + (1.0 - o.b1) * fabs((double)g[i]);
            if (want("adamw_step")) {
                ref_adamw(rw, rg, rm, rv, n, o.lr, o.b1, o.b2, o.eps, o.wd, o.bc1, o.bc2);
                for (size_t i = 0; i < n; i++) /* |decayed w| + |update| built from |m terms| */
                    mw[i] = fabs(w[i] * (1.0 - (double)o.lr * o.wd)) +
                            (double)o.lr / o.bc1 * mm[i] / (sqrt(rv[i]) / sqrt((double)o.bc2) + o.eps);
                tens t[] = {tout("w", w, n), tin("g", g, n), tout("m", m, n), tout("v", v, n)};
                verdict vd = v_new();
                if (exec_op(&vd, be, t, 4, run_adamw, &o, NULL)) {
                    v_nmse(&vd, "w", RES(t[0]), rw, mw, n, THR_ROUND);
                    v_nmse(&vd, "m", RES(t[2]), rm, mm, n, THR_ROUND);
                    v_nmse(&vd, "v", RES(t[3]), rv, NULL, n, THR_ROUND); /* positive terms */
                }
                v_report(&vd, "adamw_step", "n=%zu lr=%g wd=%g bc=%s", n, o.lr, o.wd, c ? "1" : "step3");
                tens_free(t, 4);
                free(rw), free(rm), free(rv);
                rw = ref_dup(w, n), rm = ref_dup(m, n), rv = ref_dup(v, n);
            }
            if (want("lamb_update")) {
                o.wd = 0.01f;
                ref_lamb(ru, rw, rg, rm, rv, n, o.b1, o.b2, o.eps, o.wd, o.bc1, o.bc2);
                for (size_t i = 0; i < n; i++) /* |direction| built from |m terms| + |wd w| */
                    mw[i] = mm[i] / o.bc1 / (sqrt(rv[i] / o.bc2) + o.eps) + fabs(o.wd * rw[i]);
                tens t[] = {tin("w", w, n), tin("g", g, n), tout("m", m, n), tout("v", v, n), tout("u", NULL, n)};
                verdict vd = v_new();
                if (exec_op(&vd, be, t, 5, run_lamb, &o, NULL)) {
                    v_nmse(&vd, "u", RES(t[4]), ru, mw, n, THR_ROUND);
                    v_nmse(&vd, "m", RES(t[2]), rm, mm, n, THR_ROUND);
                    v_nmse(&vd, "v", RES(t[3]), rv, NULL, n, THR_ROUND);
                }
                v_report(&vd, "lamb_update", "n=%zu wd=%g bc=%s", n, o.wd, c ? "1" : "step3");
                tens_free(t, 5);
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
} cast_a;
static void run_cast(bt_backend *be, tens *t, void *a, double *s) {
    (void)s;
    cast_a *c = a; /* src, dst | src f32, mid, dst f32 */
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
    size_t ns = sizeof spec / sizeof *spec, n = ns + 3000 + 3000;
    float *x = ref_alloc(n * 4);
    memcpy(x, spec, sizeof spec);
    uint16_t top = t == BT_F16 ? 0x7bfe : 0x7f7e; /* last finite with a finite successor */
    for (size_t i = ns; i < ns + 3000; i++) { /* midpoints between neighbours: exact ties */
        uint16_t h = (uint16_t)(1 + ref_int(&g_rng, top));
        double mid = 0.5 * (value_of(t, h) + value_of(t, (uint16_t)(h + 1)));
        x[i] = (float)(ref_int(&g_rng, 2) ? -mid : mid);
    }
    for (size_t i = ns + 3000; i < n; i++) {
        uint32_t bits = (uint32_t)ref_next(&g_rng);
        if (t == BT_F16) /* exponents around the binary16 range */
            bits = (bits & 0x807fffffu) | (uint32_t)(127 - 27 + ref_int(&g_rng, 45)) << 23;
        memcpy(x + i, &bits, 4);
    }
    *count = n;
    return x;
}

static const char *dtype_name(bt_dtype t) { return t == BT_F16 ? "f16" : t == BT_BF16 ? "bf16" : "f32"; }

static void test_cast(bt_backend *be) {
    if (!want("cast")) return;
    reseed("cast", 0);
    static const bt_dtype fmts[2] = {BT_F16, BT_BF16};
    for (int fi = 0; fi < 2; fi++) { /* f32 -> fmt -> f32, checking the 16-bit bits too */
        bt_dtype t = fmts[fi];
        size_t n;
        float *x = cast_inputs(t, &n);
        cast_a c = {n, BT_F32, t, BT_F32, 1};
        tens tt[] = {tin("src", x, n), t16("mid", NULL, n, true), tout("dst", NULL, n)};
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
        tens_free(tt, 3);
        free(x);
    }
    /* every 16-bit pattern: to f32, and to the other 16-bit format */
    uint16_t *all = ref_alloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    for (int k = 0; k < 4; k++) {
        bt_dtype src = fmts[k & 1], dst = k < 2 ? BT_F32 : fmts[!(k & 1)];
        cast_a c = {65536, src, BT_F32, dst, 0};
        tens tt[] = {t16("src", all, 65536, false),
                     dst == BT_F32 ? tout("dst", NULL, 65536) : t16("dst", NULL, 65536, true)};
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
        tens_free(tt, 2);
    }
    free(all);
    { /* f32 -> f32 is a copy */
        size_t n;
        float *x = cast_inputs(BT_BF16, &n);
        cast_a c = {n, BT_F32, BT_F32, BT_F32, 0};
        tens tt[] = {tin("src", x, n), tout("dst", NULL, n)};
        verdict v = v_new();
        if (exec_op(&v, be, tt, 2, run_cast, &c, NULL))
            for (size_t i = 0; i < n; i++)
                if (!same32(RES(tt[1])[i], x[i])) {
                    v_fail(&v, "element %zu: %.9g -> %.9g", i, x[i], RES(tt[1])[i]);
                    break;
                }
        v_report(&v, "cast", "f32->f32 %zu values", n);
        tens_free(tt, 2);
        free(x);
    }
}

/* ================= NaN propagation ================= */

/* A NaN in an input of an elementwise op gives NaN at that position. */
static void nan_case(bt_backend *be, const char *op, tens *t, int nt, int out_i, run_fn fn,
                     void *arg, const bool *expect_nan, const char *desc) {
    if (!want(op)) return;
    verdict v = v_new();
    if (exec_op(&v, be, t, nt, fn, arg, NULL)) {
        const float *o = t[out_i].res;
        for (size_t i = 0; i < t[out_i].n; i++)
            if ((bool)isnan(o[i]) != expect_nan[i]) {
                v_fail(&v, "element %zu is %g", i, o[i]);
                break;
            }
    }
    v_report(&v, op, "%s", desc);
    tens_free(t, nt);
}

static void test_nan(bt_backend *be) {
    enum { N = 37, R = 5, C = 7 };
    reseed("nan", 0);
    float *a = rand_f(N, 1, 0), *b = rand_f(N, 1, 0);
    bool en[N] = {0};
    a[0] = a[17] = NAN;
    b[N - 1] = NAN;
    en[0] = en[17] = en[N - 1] = true;
    vec_a q = {N, 0.5f, 0};
    un_a u = {N, 0};
    const char *d2 = "n=37 NaN@0,17 (x) @36 (y)";
    {
        tens t[] = {tin("a", a, N), tin("b", b, N), tout("out", NULL, N)};
        nan_case(be, "add", t, 3, 2, run_add, &q, en, d2);
    }
    {
        tens t[] = {tout("y", b, N), tin("x", a, N)};
        nan_case(be, "axpy", t, 2, 0, run_axpy, &q, en, d2);
    }
    a[N - 1] = NAN; /* single-input ops: all three in x */
    {
        tens t[] = {tout("x", a, N)};
        nan_case(be, "scale", t, 1, 0, run_scale, &q, en, "n=37 NaN@0,17,36");
    }
    {
        tens t[] = {tout("out", NULL, N), tin("x", a, N)};
        nan_case(be, "gelu_fwd", t, 2, 0, run_gelu_fwd, &u, en, "n=37 NaN@0,17,36");
    }
    {
        tens t[] = {tout("out", NULL, N), tin("x", a, N)};
        nan_case(be, "tanh_fwd", t, 2, 0, run_tanh_fwd, &u, en, "n=37 NaN@0,17,36");
    }
    { /* bias_add: NaN in y[1,2] and in bias[4] (whole column) */
        float *y = rand_f(R * C, 1, 0), *bias = rand_f(C, 1, 0);
        bool eb[R * C] = {0};
        y[1 * C + 2] = NAN, bias[4] = NAN;
        for (int r = 0; r < R; r++) eb[r * C + 4] = true;
        eb[1 * C + 2] = true;
        rc_a rc = {R, C};
        tens t[] = {tout("y", y, R * C), tin("bias", bias, C)};
        nan_case(be, "bias_add", t, 2, 0, run_bias_add, &rc, eb, "5x7 NaN@y[1,2],bias[4]");
        free(y), free(bias);
    }
    free(a), free(b);
}

/* ================= driver ================= */

extern void openblas_set_num_threads(int) __attribute__((weak));

static void run_pass(bt_backend *be) {
    g_recpos = 0;
    test_memory(be);
    test_vector_ops(be);
    test_gemm(be);
    test_bias(be);
    test_embed(be);
    test_layernorm(be);
    test_activations(be);
    test_softmax(be);
    test_dropout(be);
    test_rows(be);
    test_xent(be);
    test_reductions(be);
    test_optimizers(be);
    test_cast(be);
    test_nan(be);
    be->destroy(be);
    if (want("destroy")) {
        verdict v = v_new();
        v_report(&v, "destroy", "returned");
    }
    g_fd = false; /* the references are backend-independent: check them once */
}

static void usage(FILE *f) {
    fprintf(f, "usage: conformance [--backend SPEC]... [--op NAME] [--seed N] [--quick] "
               "[--threads-check]\n"
               "  SPEC: cpu (default), opencl[:P:D], cuda[:N], auto, all, or a comma list\n");
}

int main(int argc, char **argv) {
    char specs[16][64];
    int nspec = 0;
    bool threads_check = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--backend") && more) {
            char list[1024];
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                if (!strcmp(tok, "all")) {
                    char built[256];
                    snprintf(built, sizeof built, "%s", bt_backends_built());
                    for (char *p = built, *e; *p && nspec < 16; p = e + (*e != 0)) {
                        e = p + strcspn(p, " ");
                        snprintf(specs[nspec++], sizeof specs[0], "%.*s", (int)(e - p), p);
                    }
                } else if (nspec < 16) {
                    snprintf(specs[nspec++], sizeof specs[0], "%s", tok);
                }
            }
        } else if (!strcmp(a, "--op") && more) {
            g_op = argv[++i];
            bool known = false;
            for (int k = 0; k < bt_op_count; k++) known |= !strcmp(g_op, bt_op_names[k]);
            if (!known) {
                fprintf(stderr, "conformance: unknown op '%s'\n", g_op);
                return 2;
            }
        } else if (!strcmp(a, "--seed") && more) {
            g_seed = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(a, "--quick")) {
            g_quick = true;
        } else if (!strcmp(a, "--threads-check")) {
            threads_check = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!nspec) snprintf(specs[nspec++], sizeof specs[0], "cpu");
    struct timespec t0, t1;
    timespec_get(&t0, TIME_UTC);
    printf("# seed %llu%s\n", (unsigned long long)g_seed, g_quick ? ", quick" : "");
    printf("%-14s %-42s %-12s %-10s %s\n", "op", "shape", "backend", "NMSE", "result");
    int ops = g_op ? 1 : bt_op_count;
    for (int s = 0; s < nspec; s++) {
        if (threads_check && !strcmp(specs[s], "cpu")) {
            /* OpenMP and OpenBLAS thread pools are process-wide: 1 thread, then 2 */
            for (int pass = 1; pass <= 2; pass++) {
                bt_backend *be = bt_cpu_backend_create(pass);
                if (!be || !bt_backend_complete(be)) {
                    printf("FAIL backend cpu: cannot create\n");
                    g_nfail += ops;
                    break;
                }
                if (openblas_set_num_threads)
                    openblas_set_num_threads(pass);
                else if (pass == 1)
                    printf("# note: openblas_set_num_threads unavailable; BLAS threads unchanged\n");
                g_thread_mode = pass;
                g_bname = pass == 1 ? "cpu/t1" : "cpu/t2";
                run_pass(be);
            }
            g_thread_mode = 0;
            continue;
        }
        if (threads_check) printf("# note: --threads-check applies to cpu only\n");
        char err[256] = "";
        bool nodev = false;
        bt_backend *be = bt_backend_create(specs[s], err, sizeof err, &nodev);
        if (!be) {
            printf("%s backend %s: %s\n", nodev ? "SKIP" : "FAIL", specs[s], err);
            if (nodev)
                g_nskip += ops;
            else
                g_nfail += ops;
            continue;
        }
        g_bname = specs[s];
        run_pass(be);
    }
    for (size_t i = 0; i < g_nrec; i++) free(g_rec[i].data);
    free(g_rec);
    timespec_get(&t1, TIME_UTC);
    fprintf(stderr, "# %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    printf("%d passed, %d failed, %d skipped\n", g_npass, g_nfail, g_nskip);
    if (g_nfail) return 1;
    return g_npass == 0 && g_nskip > 0 ? 77 : 0;
}
