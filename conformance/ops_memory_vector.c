/* Conformance checks of the memory ops (alloc, free, upload, download, copy,
 * info, sync), the elementwise vector ops (fill, add, scale, axpy), the
 * reductions (sum, sumsq, all_finite) and NaN propagation. */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================= memory ops ================= */

/* host_alloc and host_free: sizes, usable bytes, many cycles. */
static void test_host_memory(bt_backend *be, const unsigned char *pat) {
    verdict v = v_new();
    static const size_t sizes[] = {1, 4, 4100, 1 << 22};
    unsigned char *keep[4] = {0};
    for (size_t s = 0; s < 4; s++) {
        keep[s] = be->host_alloc(be, sizes[s]);
        if (!keep[s]) {
            v_fail(&v, "host_alloc(%zu) returned NULL", sizes[s]);
            continue;
        }
        for (size_t i = 0; i < sizes[s]; i++) keep[s][i] = pat[i % 4096];
    }
    for (size_t s = 0; s < 4; s++) /* every byte still there: no two overlap */
        for (size_t i = 0; keep[s] && i < sizes[s]; i++)
            if (keep[s][i] != pat[i % 4096]) {
                v_fail(&v, "host_alloc(%zu): byte %zu lost", sizes[s], i);
                break;
            }
    for (size_t s = 0; s < 4; s++) be->host_free(be, keep[s]);
    for (int cyc = 0; cyc < 64; cyc++) {
        void *p = be->host_alloc(be, 64 + (size_t)cyc * 97);
        if (!p) v_fail(&v, "host_alloc failed in cycle %d", cyc);
        be->host_free(be, p);
    }
    v_report(&v, "host_alloc", "1B..4MiB, usable, distinct");
    v_report(&v, "host_free", "64 host_alloc/host_free cycles");
}

/* download_async and downloads_done: K copies of ranges filled by ops issued
 * before each copy, in flight together (more than a ticket ring's first
 * size), then upload_async back at other offsets; every byte checked. */
static void test_async_copies(bt_backend *be, const unsigned char *pat) {
    if (want_op("host_alloc") || want_op("host_free")) test_host_memory(be, pat);
    if (!want_op("download_async") && !want_op("downloads_done") && !want_op("upload_async"))
        return;
    enum { K = 40, N = 1000 };
    verdict v = v_new();
    bt_buffer *b = be->alloc(be, (size_t)2 * K * N * 4);
    float *h = be->host_alloc(be, (size_t)K * N * 4), *back = ref_alloc((size_t)2 * K * N * 4);
    long tickets[K];
    if (!b || !h) {
        v_fail(&v, "alloc or host_alloc failed");
    } else {
        be->fill(be, (bt_ptr){b, 0}, -1.0f, (size_t)2 * K * N);
        for (int k = 0; k < K; k++) { /* each copy sees the fill issued just before it */
            be->fill(be, bt_at((bt_ptr){b, 0}, (size_t)k * N), (float)k, N);
            tickets[k] = be->download_async(be, h + (size_t)k * N, bt_at((bt_ptr){b, 0}, (size_t)k * N),
                                            N * 4);
            if (k > 0 && tickets[k] != tickets[k - 1] + 1)
                v_fail(&v, "tickets %ld then %ld", tickets[k - 1], tickets[k]);
        }
        if (!be->downloads_done(be, tickets[K / 2], true)) v_fail(&v, "a wait returned false");
        if (!be->downloads_done(be, tickets[K / 2], false)) v_fail(&v, "arrived, then not");
        for (int k = 0; k <= K / 2; k++) /* arrived: readable now */
            for (int i = 0; i < N; i++)
                if (h[(size_t)k * N + i] != (float)k) {
                    v_fail(&v, "copy %d: element %d is %g before the last wait", k, i,
                           (double)h[(size_t)k * N + i]);
                    break;
                }
        if (!be->downloads_done(be, tickets[K - 1], true)) v_fail(&v, "a wait returned false");
        for (int k = 0; k < K; k++)
            for (int i = 0; i < N; i++)
                if (h[(size_t)k * N + i] != (float)k) {
                    v_fail(&v, "copy %d: element %d is %g", k, i, (double)h[(size_t)k * N + i]);
                    break;
                }
        /* back up into the second half, each copy 3 elements further on */
        for (int k = 0; k < K; k++)
            be->upload_async(be, bt_at((bt_ptr){b, 0}, (size_t)K * N + (size_t)k * N + 3),
                             h + (size_t)k * N, (N - 3) * 4);
        be->download(be, back, (bt_ptr){b, 0}, (size_t)2 * K * N * 4);
        for (int k = 0; k < K; k++)
            for (int i = 0; i < N; i++) {
                const float want = i < 3 ? -1.0f : (float)k;
                if (back[(size_t)K * N + (size_t)k * N + i] != want) {
                    v_fail(&v, "upload_async %d: element %d is %g, want %g", k, i,
                           (double)back[(size_t)K * N + (size_t)k * N + i], (double)want);
                    break;
                }
            }
    }
    if (b) be->free(be, b);
    be->host_free(be, h);
    free(back);
    v_report(&v, "download_async", "%d copies of %d floats in flight, after the ops before each",
             K, N);
    v_report(&v, "downloads_done", "waits, then polls, of %d tickets in order", K);
    v_report(&v, "upload_async", "%d copies back at +3 elements, guards kept", K);
}

void test_memory(bt_backend *be) {
    reseed("memory", 0);
    unsigned char pat[4096 + 64], back[4096 + 64];
    for (size_t i = 0; i < sizeof pat; i++) pat[i] = (unsigned char)(ref_next(&g_input_rng) | 1);

    if (want_op("alloc")) { /* sizes; usable memory; NULL on absurd requests */
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
    if (want_op("free")) { /* many cycles; live buffers stay distinct */
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
        if (!want_op(name)) continue;
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
    test_async_copies(be, pat);
    if (want_op("info")) {
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
        if (v.ok) printf("# %s: %s (%s), %d compute units, %zu MiB\n", g_backend_name, info.name,
                         info.vendor, info.compute_units, info.total_mem >> 20);
        v_report(&v, "info", "fields filled");
    }
    if (want_op("sync")) { /* op, sync, then the result must be visible */
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
} vec_args;

static void run_fill(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    be->fill(be, t[0].p, ((vec_args *)a)->alpha, ((vec_args *)a)->n);
}
static void run_add(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    vec_args *q = a; /* inplace: out aliases a (as the engine's residual adds) */
    be->add(be, q->inplace ? t[0].p : t[2].p, t[0].p, t[1].p, q->n);
}
static void run_scale(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    be->scale(be, t[0].p, ((vec_args *)a)->alpha, ((vec_args *)a)->n);
}
static void run_axpy(bt_backend *be, tensor *t, void *a, double *s) {
    (void)s;
    be->axpy(be, t[0].p, ((vec_args *)a)->alpha, t[1].p, ((vec_args *)a)->n);
}

void test_vector_ops(bt_backend *be) {
    for (size_t si = 0; si < sizeof VECTOR_SHAPES / sizeof *VECTOR_SHAPES; si++) {
        if (skip_shape(VECTOR_SHAPES[si].quick)) continue;
        reseed("vector", si);
        size_t n = VECTOR_SHAPES[si].n;
        float *a = rand_floats(n, 1.0, 0.0), *b = rand_floats(n, 2.0, 0.5);
        double *ra = ref_dup(a, n), *rb = ref_dup(b, n), *r = ref_alloc(n * sizeof *r),
               *mag = ref_alloc(n * sizeof *mag);
        if (want_op("fill")) {
            /* -1.25, -0 and +0 (which a backend may fill with its memset) in turn */
            vec_args q = {n, si % 3 == 0 ? -1.25f : si % 3 == 1 ? -0.0f : 0.0f, 0};
            float *e = ref_alloc(n * sizeof *e);
            for (size_t i = 0; i < n; i++) e[i] = q.alpha;
            tensor t[] = {tensor_out("x", a, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 1, run_fill, &q, NULL)) v_bits(&v, "x", RES(t[0]), e, n);
            v_report(&v, "fill", "n=%zu value=%g", n, q.alpha);
            tensors_free(t, 1);
            free(e);
        }
        for (int inpl = 0; inpl < 2 && want_op("add"); inpl++) {
            vec_args q = {n, 0, inpl};
            tensor t[] = {inpl ? tensor_out("a", a, n) : tensor_in("a", a, n), tensor_in("b", b, n),
                          tensor_out("out", NULL, n)};
            for (size_t i = 0; i < n; i++) r[i] = ra[i] + rb[i], mag[i] = fabs(ra[i]) + fabs(rb[i]);
            verdict v = v_new();
            if (exec_op(&v, be, t, inpl ? 2 : 3, run_add, &q, NULL))
                v_nmse(&v, "out", RES(t[inpl ? 0 : 2]), r, mag, n, THR_ROUND);
            v_report(&v, "add", "n=%zu%s", n, inpl ? " out=a" : "");
            tensors_free(t, 3);
        }
        if (want_op("scale")) {
            vec_args q = {n, (si & 1) ? 0.37f : -2.5f, 0};
            tensor t[] = {tensor_out("x", a, n)};
            for (size_t i = 0; i < n; i++) r[i] = ra[i] * q.alpha;
            verdict v = v_new();
            if (exec_op(&v, be, t, 1, run_scale, &q, NULL)) v_nmse(&v, "x", RES(t[0]), r, NULL, n, THR_ROUND);
            v_report(&v, "scale", "n=%zu alpha=%g", n, q.alpha);
            tensors_free(t, 1);
        }
        if (want_op("axpy")) { /* accumulates into a nonzero y */
            vec_args q = {n, (si & 1) ? -0.625f : 1.7f, 0};
            tensor t[] = {tensor_out("y", b, n), tensor_in("x", a, n)};
            for (size_t i = 0; i < n; i++)
                r[i] = rb[i] + (double)q.alpha * ra[i], mag[i] = fabs(rb[i]) + fabs(q.alpha * ra[i]);
            verdict v = v_new();
            if (exec_op(&v, be, t, 2, run_axpy, &q, NULL)) v_nmse(&v, "y", RES(t[0]), r, mag, n, THR_ROUND);
            v_report(&v, "axpy", "n=%zu alpha=%g", n, q.alpha);
            tensors_free(t, 2);
        }
        free(a), free(b), free(ra), free(rb), free(r), free(mag);
    }
}

/* ================= sum / sumsq / all_finite ================= */

typedef struct {
    size_t n;
} reduce_args;
static void run_sum(bt_backend *be, tensor *t, void *a, double *s) {
    s[0] = be->sum(be, t[0].p, ((reduce_args *)a)->n);
}
static void run_sumsq(bt_backend *be, tensor *t, void *a, double *s) {
    s[0] = be->sumsq(be, t[0].p, ((reduce_args *)a)->n);
}
static void run_finite(bt_backend *be, tensor *t, void *a, double *s) {
    s[0] = be->all_finite(be, t[0].p, ((reduce_args *)a)->n) ? 1.0 : 0.0;
}

void test_reductions(bt_backend *be) {
    for (size_t si = 0; si < sizeof VECTOR_SHAPES / sizeof *VECTOR_SHAPES; si++) {
        if (skip_shape(VECTOR_SHAPES[si].quick)) continue;
        reseed("reductions", si);
        reduce_args q = {VECTOR_SHAPES[si].n};
        size_t n = q.n;
        float *x = rand_floats(n, 1.0, 0.3);
        for (int sq = 0; sq < 2; sq++) {
            const char *name = sq ? "sumsq" : "sum";
            if (!want_op(name)) continue;
            long double ref = 0, mag = 0; /* error relative to sum |terms| (as ref_nmse_mag) */
            for (size_t i = 0; i < n; i++) {
                ref += sq ? (long double)x[i] * x[i] : (long double)x[i];
                mag += sq ? (long double)x[i] * x[i] : fabsl((long double)x[i]);
            }
            double got[4];
            tensor t[] = {tensor_in("x", x, n)};
            verdict v = v_new();
            if (exec_op(&v, be, t, 1, sq ? run_sumsq : run_sum, &q, got))
                v_metric(&v, "relative error", fabs(got[0] - (double)ref) / fmax((double)mag, 1e-300), SCALAR_TOL);
            v_report(&v, name, "n=%zu (rel. err)", n);
            tensors_free(t, 1);
        }
        if (want_op("all_finite")) {
            verdict v = v_new();
            static const char *what[] = {"clean", "NaN", "+Inf", "-Inf last"};
            for (int k = 0; k < 4; k++) {
                float *y = ref_alloc(n * 4);
                memcpy(y, x, n * 4);
                size_t pos = k == 3 ? n - 1 : (size_t)ref_int(&g_input_rng, (int)n);
                if (k) y[pos] = k == 1 ? NAN : k == 2 ? INFINITY : -INFINITY;
                double got[4];
                tensor t[] = {tensor_in("x", y, n)};
                if (exec_op(&v, be, t, 1, run_finite, &q, got) && got[0] != (k == 0 ? 1.0 : 0.0))
                    v_fail(&v, "%s: returned %s", what[k], got[0] != 0.0 ? "true" : "false");
                tensors_free(t, 1);
                free(y);
            }
            v_report(&v, "all_finite", "n=%zu clean/NaN/+Inf/-Inf", n);
        }
        free(x);
    }
}

/* ================= NaN propagation ================= */

/* A NaN in an input of an elementwise op gives NaN at that position. */
static void nan_case(bt_backend *be, const char *op, tensor *t, int nt, int out_i, run_fn fn,
                     void *arg, const bool *expect_nan, const char *desc) {
    if (!want_op(op)) return;
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
    tensors_free(t, nt);
}

void test_nan_propagation(bt_backend *be) {
    enum { N = 37, R = 5, C = 7 };
    reseed("nan", 0);
    float *a = rand_floats(N, 1, 0), *b = rand_floats(N, 1, 0);
    bool en[N] = {0};
    a[0] = a[17] = NAN;
    b[N - 1] = NAN;
    en[0] = en[17] = en[N - 1] = true;
    vec_args q = {N, 0.5f, 0};
    unary_args u = {N, 0, BT_F32};
    const char *d2 = "n=37 NaN@0,17 (x) @36 (y)";
    {
        tensor t[] = {tensor_in("a", a, N), tensor_in("b", b, N), tensor_out("out", NULL, N)};
        nan_case(be, "add", t, 3, 2, run_add, &q, en, d2);
    }
    {
        tensor t[] = {tensor_out("y", b, N), tensor_in("x", a, N)};
        nan_case(be, "axpy", t, 2, 0, run_axpy, &q, en, d2);
    }
    a[N - 1] = NAN; /* single-input ops: all three in x */
    {
        tensor t[] = {tensor_out("x", a, N)};
        nan_case(be, "scale", t, 1, 0, run_scale, &q, en, "n=37 NaN@0,17,36");
    }
    {
        tensor t[] = {tensor_out("out", NULL, N), tensor_in("x", a, N)};
        nan_case(be, "gelu_fwd", t, 2, 0, run_gelu_fwd, &u, en, "n=37 NaN@0,17,36");
    }
    {
        tensor t[] = {tensor_out("out", NULL, N), tensor_in("x", a, N)};
        nan_case(be, "tanh_fwd", t, 2, 0, run_tanh_fwd, &u, en, "n=37 NaN@0,17,36");
    }
    { /* bias_add: NaN in y[1,2] and in bias[4] (whole column) */
        float *y = rand_floats(R * C, 1, 0), *bias = rand_floats(C, 1, 0);
        bool eb[R * C] = {0};
        y[1 * C + 2] = NAN, bias[4] = NAN;
        for (int r = 0; r < R; r++) eb[r * C + 4] = true;
        eb[1 * C + 2] = true;
        rows_cols_args rc = {R, C};
        tensor t[] = {tensor_out("y", y, R * C), tensor_in("bias", bias, C)};
        nan_case(be, "bias_add", t, 2, 0, run_bias_add, &rc, eb, "5x7 NaN@y[1,2],bias[4]");
        free(y), free(bias);
    }
    free(a), free(b);
}
