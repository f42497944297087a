/* Shared harness of the backend conformance suite: results table, verdicts,
 * seeded inputs, guard-banded execution and --threads-check records (see
 * conformance_harness.h). */
#include "backends/common/half.h"
#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- global state ---------------- */

ref_rng g_input_rng;
ref_rng g_fd_rng;
uint64_t g_seed = 0x5EEDB3A7ull;
const char *g_op_filter;
bool g_quick;
bool g_check_references = true;
const char *g_backend_name = "cpu";
int g_n_passed, g_n_failed, g_n_skipped;
int g_thread_mode;

bool want_op(const char *op) { return !g_op_filter || strcmp(g_op_filter, op) == 0; }

/* ---------------- results table ---------------- */

static void table_line(const char *op, const char *shape, const char *backend,
                       const char *metric, bool ok, const char *note) {
    printf("%-14s %-42s %-12s %-10s %s%s%s\n", op, shape, backend, metric, ok ? "PASS" : "FAIL",
           !ok && note && *note ? "  " : "", !ok && note ? note : "");
    fflush(stdout);
    if (ok)
        g_n_passed++;
    else
        g_n_failed++;
}

verdict v_new(void) {
    verdict v;
    memset(&v, 0, sizeof v);
    v.ok = v.thr_same = true;
    return v;
}

void v_fail(verdict *v, const char *fmt, ...) {
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

void v_metric(verdict *v, const char *what, double value, double thr) {
    double ratio = value <= thr ? (thr > 0 ? value / thr : 0.0) : INFINITY;
    if (!v->have || ratio > v->ratio || (isnan(value) && !isnan(v->shown))) {
        v->shown = value;
        v->ratio = ratio;
        v->have = true;
    }
    if (!(value <= thr)) v_fail(v, "%s %.3g > %.0e", what, value, thr);
}

void v_nmse(verdict *v, const char *what, const float *out, const double *ref,
            const double *mag, size_t n, double thr) {
    v_metric(v, what, ref_nmse_mag(out, ref, mag, n), thr);
}

void v_bits(verdict *v, const char *what, const float *out, const float *want_, size_t n) {
    double *r = ref_dup(want_, n);
    v_metric(v, what, ref_nmse(out, r, n), THR_EXACT);
    free(r);
    for (size_t i = 0; i < n; i++)
        if (memcmp(out + i, want_ + i, 4) != 0) {
            v_fail(v, "%s[%zu] = %.9g, want %.9g (bits)", what, i, out[i], want_[i]);
            return;
        }
}

bool v_bits16(verdict *v, const char *what, const uint16_t *got, const uint16_t *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            v_fail(v, "%s[%zu] = 0x%04x, not 0x%04x (bits)", what, i, got[i], want[i]);
            return false;
        }
    return true;
}

bool v_bits16_of(verdict *v, const char *what, const uint16_t *got, const float *vals, size_t n,
                 bt_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        const uint16_t want = bits16_of(vals[i], dt);
        if (got[i] != want) {
            v_fail(v, "%s[%zu] = 0x%04x, not 0x%04x: %.9g in %s", what, i, got[i], want,
                   (double)vals[i], dt == BT_BF16 ? "bf16" : "f16");
            return false;
        }
    }
    return true;
}

void v_report(verdict *v, const char *op, const char *fmt, ...) {
    char shape[96], metric[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shape, sizeof shape, fmt, ap);
    va_end(ap);
    if (v->have)
        snprintf(metric, sizeof metric, "%.2e", v->shown);
    else
        snprintf(metric, sizeof metric, "-");
    table_line(op, shape, g_backend_name, metric, v->ok, v->note);
    if (v->thr_checked) {
        snprintf(metric, sizeof metric, "%.2e", v->thr_nmse);
        table_line(op, shape, "t1-vs-t2", metric, v->thr_same,
                   v->thr_same ? "" : "outputs differ between 1 and 2 threads");
    }
}

void fd_point(verdict *f, const char *what, double fd, double an, double floor_) {
    v_metric(f, what, fabs(fd - an) / fmax(fmax(fabs(an), fabs(fd)), fmax(floor_, 1e-300)), FD_TOL);
}

/* ---------------- random inputs ---------------- */

/* Inputs of each test (and its finite-difference coordinates) come from a
 * stream seeded by (--seed, test, shape), so they do not depend on --op or on
 * which tests ran before. */
void reseed(const char *tag, size_t k) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = tag; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    g_input_rng.s = g_seed ^ h ^ (k * 0x9E3779B97F4A7C15ull);
    g_fd_rng.s = g_input_rng.s ^ 0xFD5EEDull;
}

/* A random index whose analytic gradient is nonzero, if one turns up quickly
 * (masked keys and one-key rows have exactly zero gradients). */
size_t fd_pick(const double *an, size_t n) {
    size_t idx = 0;
    for (int tries = 0; tries < 64; tries++) {
        idx = (size_t)ref_int(&g_fd_rng, (int)n);
        if (an[idx] != 0.0) break;
    }
    return idx;
}

float *rand_floats(size_t n, double scale, double offset) {
    float *x = ref_alloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(offset + scale * ref_normal(&g_input_rng));
        if (x[i] == 0.0f) x[i] = (float)scale; /* never zero */
    }
    return x;
}

int32_t *rand_ints(size_t n, int lo, int hi) {
    int32_t *x = ref_alloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = lo + ref_int(&g_input_rng, hi - lo);
    return x;
}

double max_abs(const double *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* ---------------- device execution harness ---------------- */

tensor tensor_in(const char *name, const void *init, size_t n) {
    return (tensor){.name = name, .n = n, .esz = 4, .init = init, .out = false};
}
tensor tensor_out(const char *name, const void *init, size_t n) {
    return (tensor){.name = name, .n = n, .esz = 4, .init = init, .out = true};
}
tensor tensor_16bit(const char *name, const void *init, size_t n, bool out) {
    return (tensor){.name = name, .n = n, .esz = 2, .init = init, .out = out};
}

void tensors_free(tensor *t, int nt) {
    for (int i = 0; i < nt; i++) {
        free(t[i].res);
        t[i].res = NULL;
    }
}


/* The byte at j of a guarded buffer's bands: the float bits 0x7FA5A5A5, a
 * NaN, repeated from the 64-byte aligned start, so that a kernel reading past
 * a tensor puts a NaN into what it computes; a write there changes the bytes. */
static unsigned char guard_byte(size_t j) { return (j & 3) == 3 ? 0x7F : SENTINEL; }

/* Upload every tensor into its own guarded buffer, run, download, check the
 * guards and the inputs. res[i] receives each tensor's contents. */
static bool exec_once(verdict *v, bt_backend *be, tensor *t, int nt, run_fn fn, void *arg,
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
        for (size_t j = 0; j < total; j++) st[j] = guard_byte(j);
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
                if ((j < GUARD || j >= GUARD + bytes) && st[j] != guard_byte(j)) {
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
static void thread_check(verdict *v, tensor *t, int nt, const double *scal) {
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

bool exec_op(verdict *v, bt_backend *be, tensor *t, int nt, run_fn fn, void *arg, double *scal) {
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

void thread_check_restart(void) { g_recpos = 0; }

void thread_records_free(void) {
    for (size_t i = 0; i < g_nrec; i++) free(g_rec[i].data);
    free(g_rec);
    g_rec = NULL;
    g_nrec = g_caprec = g_recpos = 0;
}

/* ---------------- shapes ---------------- */

const vector_shape VECTOR_SHAPES[8] = {{1, 1, 0},    {3, 0, 0},    {17, 1, 0},    {255, 0, 0},
                                       {1000, 0, 0}, {4099, 1, 0}, {8195, 0, 0}, {196608, 0, 1}};

const matrix_shape MATRIX_SHAPES[9] = {{1, 1, 1, 0},   {1, 7, 0, 0},    {3, 5, 1, 0},
                                       {7, 33, 0, 0},  {13, 100, 0, 0}, {31, 65, 1, 0},
                                       {2, 1024, 0, 0}, {5, 1100, 1, 0}, {256, 768, 0, 1}};

bool skip_shape(bool quick) { return g_quick && !quick; }

/* NMSE bounds of an output rounded to 16-bit storage against the unrounded
 * float64 reference: half an ulp is at most 2^-8 of a normal bf16 value and
 * 2^-11 of a normal f16 value, so the squared error is at most 2^-16 (2^-22)
 * of the squared values; f16's subnormals (below 6.1e-5) are off by at most
 * 2^-25 each, far below that for the inputs here (values of order 0.01-1). */
double round16_thr(bt_dtype dt) {
    return dt == BT_BF16 ? 0x1p-16 : dt == BT_F16 ? 0x1p-22 : THR_MATH;
}

uint16_t bits16_of(float v, bt_dtype dt) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return dt == BT_BF16 ? f32_to_bf16(u) : f32_to_f16(u);
}

float widen16(uint16_t h, bt_dtype dt) {
    const uint32_t u = dt == BT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* x rounded to dt's nearest value by half.h (BT_F32: x). */
float round16_host(float x, bt_dtype dt) {
    if (dt == BT_F32) return x;
    uint32_t b;
    memcpy(&b, &x, 4);
    b = dt == BT_BF16 ? bf16_to_f32(f32_to_bf16(b)) : f16_to_f32(f32_to_f16(b));
    memcpy(&x, &b, 4);
    return x;
}
