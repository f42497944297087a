/* The profiler's GEMM shapes (profile_internal.h): each shape's time in the
 * profiled steps and, replayed alone on fresh operands, its best time, so a
 * report can say how fast the step's own GEMMs run when nothing else does:
 * the SGEMM ceiling at this model's shapes. */
#include "profile_internal.h"

#include "philox.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool same_shape(const prof_gemm_shape *a, const prof_gemm_shape *b) {
    return a->dtype == b->dtype && a->stored16 == b->stored16 && a->ta == b->ta && a->tb == b->tb && a->m == b->m &&
           a->n == b->n && a->k == b->k && a->lda == b->lda && a->ldb == b->ldb &&
           a->ldc == b->ldc && a->batch == b->batch && a->sa == b->sa && a->sb == b->sb &&
           a->sc == b->sc && a->outer == b->outer && a->oa == b->oa && a->ob == b->ob &&
           a->oc == b->oc && a->beta == b->beta;
}

int prof_gemm_shape_of(bt_profiler *p, const prof_gemm_shape *key) {
    for (int i = 0; i < p->n_shapes; i++)
        if (same_shape(&p->shapes[i], key)) return i;
    /* a model has a few dozen: the table grows in the first step only */
    p->shapes = prof_room(p->shapes, p->n_shapes, &p->cap_shapes, 32, sizeof *p->shapes);
    prof_gemm_shape *s = &p->shapes[p->n_shapes];
    *s = *key;
    s->calls = 0;
    s->seconds = s->flops = s->alone_s = 0.0;
    return p->n_shapes++;
}

/* ---- replaying each shape alone ---- */

#define MIN_ALONE_S 0.25 /* seconds of timed calls of each shape, at least */

/* Elements an operand spans: batch matrices stride apart, each rows x cols
 * with row stride ld. */
static size_t extent(int batch, long stride, int rows, int cols, int ld) {
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

/* A device buffer of n seeded values in [-1, 1); NULL when out of memory. */
static bt_buffer *seeded_buffer(bt_backend *in, size_t n, uint64_t seed, float *host) {
    bt_buffer *b = in->alloc(in, n * sizeof(float));
    if (!b) return NULL;
    for (size_t i = 0; i < n; i++) /* the backends' counter-based draws */
        host[i] =
            2.0f * philox_uniform(philox_draw(seed, 0, (uint32_t)(i >> 32), (uint32_t)i)) - 1.0f;
    in->upload(in, (bt_ptr){b, 0}, host, n * sizeof(float));
    return b;
}

static void run_shape(bt_backend *in, const prof_gemm_shape *s, bt_buffer *a, bt_buffer *b,
                      bt_buffer *c) {
    const bt_ptr A = {a, 0}, B = {b, 0}, C = {c, 0};
    if (s->outer > 0) {
        const bt_gemm_grid g = {s->batch, s->outer, s->sa, s->sb, s->sc, s->oa, s->ob, s->oc};
        in->gemm_grid(in, s->dtype < 0 ? BT_F32 : (bt_dtype)s->dtype, s->stored16, s->ta, s->tb,
                      s->m, s->n, s->k, 1.0f, A, s->lda, B, s->ldb, s->beta, C, s->ldc, &g);
    } else if (s->dtype < 0)
        in->gemm(in, s->ta, s->tb, s->m, s->n, s->k, 1.0f, A, s->lda, s->sa, B, s->ldb, s->sb,
                 s->beta, C, s->ldc, s->sc, s->batch);
    else
        in->gemm16(in, (bt_dtype)s->dtype, s->stored16, s->ta, s->tb, s->m, s->n, s->k, 1.0f, A, s->lda,
                   s->sa, B, s->ldb, s->sb, s->beta, C, s->ldc, s->sc, s->batch);
}

/* For an operand the shape reads in 16 bits: buf's n values cast to dt in a
 * buffer of their own, buf freed; NULL when out of memory. */
static bt_buffer *as_16bit(bt_backend *in, bt_buffer *buf, size_t n, bt_dtype dt) {
    if (!buf) return NULL;
    bt_buffer *h = in->alloc(in, n * 2);
    if (h) in->cast(in, (bt_ptr){h, 0}, dt, (bt_ptr){buf, 0}, BT_F32, n);
    in->free(in, buf);
    return h;
}

/* The best time of shape s on fresh operands (after one untimed call) over
 * at least reps calls and at least MIN_ALONE_S seconds, so that a short
 * shape gets enough tries on a noisy machine; false when the device runs
 * out of memory. */
static bool time_alone(bt_backend *in, prof_gemm_shape *s, int reps) {
    if (s->m <= 0 || s->n <= 0 || s->k <= 0 || s->batch <= 0) return true; /* no FLOPs to time */
    const size_t groups = s->outer > 0 ? (size_t)s->outer - 1 : 0; /* gemm_grid's other groups */
    const size_t na = extent(s->batch, s->sa, s->ta ? s->k : s->m, s->ta ? s->m : s->k, s->lda) +
                      groups * (size_t)s->oa,
                 nb = extent(s->batch, s->sb, s->tb ? s->n : s->k, s->tb ? s->k : s->n, s->ldb) +
                      groups * (size_t)s->ob,
                 nc = extent(s->batch, s->sc, s->m, s->n, s->ldc) + groups * (size_t)s->oc;
    size_t most = na > nb ? na : nb;
    most = most > nc ? most : nc;
    float *host = malloc(most * sizeof *host);
    bt_buffer *a = host ? seeded_buffer(in, na, 1, host) : NULL;
    if (s->stored16 & BT_GEMM_A16) a = as_16bit(in, a, na, (bt_dtype)s->dtype);
    bt_buffer *b = a ? seeded_buffer(in, nb, 2, host) : NULL;
    if (s->stored16 & BT_GEMM_B16) b = as_16bit(in, b, nb, (bt_dtype)s->dtype);
    bt_buffer *c = b ? seeded_buffer(in, nc, 3, host) : NULL;
    free(host);
    if (c) {
        run_shape(in, s, a, b, c);
        double best = 0.0, spent = 0.0;
        for (int r = 0; r < reps || spent < MIN_ALONE_S; r++) {
            in->marks_reset(in);
            const int m0 = in->mark(in);
            run_shape(in, s, a, b, c);
            const int m1 = in->mark(in);
            in->sync(in);
            const double t = in->mark_seconds(in, m0, m1);
            if (r == 0 || t < best) best = t;
            spent += t;
        }
        in->marks_reset(in);
        s->alone_s = best;
    }
    if (a) in->free(in, a);
    if (b) in->free(in, b);
    if (c) in->free(in, c);
    return c != NULL;
}

bool bt_profile_gemm_alone(bt_profiler *p, int reps) {
    for (int i = 0; i < p->n_shapes; i++)
        if (!time_alone(p->inner, &p->shapes[i], reps < 1 ? 1 : reps)) {
            fprintf(stderr, "bertrain: profiler: out of memory on %s replaying a GEMM of "
                            "%dx%dx%d\n",
                    p->inner->name, p->shapes[i].m, p->shapes[i].n, p->shapes[i].k);
            return false;
        }
    return true;
}

/* ---- reports ---- */

/* Shape indices by time in the steps, longest first; returns how many. */
static int shapes_by_time(const bt_profiler *p, int *order) {
    for (int i = 0; i < p->n_shapes; i++) order[i] = i;
    for (int i = 1; i < p->n_shapes; i++) /* insertion sort: stable */
        for (int j = i; j > 0 && p->shapes[order[j]].seconds > p->shapes[order[j - 1]].seconds;
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return p->n_shapes;
}

/* The GEMMs' FLOPs, seconds in the steps and seconds alone (0 unless every
 * shape was replayed), per step. */
static void gemm_totals(const bt_profiler *p, double *flops, double *in_steps, double *alone) {
    const double n = p->steps > 0 ? p->steps : 1;
    *flops = *in_steps = *alone = 0.0;
    bool all = p->n_shapes > 0;
    for (int i = 0; i < p->n_shapes; i++) {
        const prof_gemm_shape *s = &p->shapes[i];
        *flops += s->flops / n;
        *in_steps += s->seconds / n;
        *alone += s->alone_s * s->calls / n;
        all = all && (s->alone_s > 0 || s->flops == 0); /* k = 0 and the like: not replayed */
    }
    if (!all) *alone = 0.0;
}

/* GFLOP/s of shape s in the steps, and alone (0: not timed / replayed). */
static double rate_in_steps(const prof_gemm_shape *s) {
    return s->seconds > 0 ? s->flops / s->seconds / 1e9 : 0.0;
}
static double rate_alone(const prof_gemm_shape *s) {
    return s->alone_s > 0 ? s->flops / s->calls / s->alone_s / 1e9 : 0.0;
}

static const char *dtype_name(int dtype) {
    return dtype < 0 ? "f32" : dtype == BT_BF16 ? "bf16" : "f16";
}

void prof_gemm_print(const bt_profiler *p, FILE *out) {
    if (!p->n_shapes) return;
    const double n = p->steps > 0 ? p->steps : 1;
    fprintf(out, "gemm shapes (m x n x k, op(A) op(B), batch)   calls/step    ms/step    GFLOP/s  "
                 "alone GFLOP/s\n");
    int *order = malloc((size_t)p->n_shapes * sizeof *order);
    if (!order) return;
    const int k = shapes_by_time(p, order);
    for (int j = 0; j < k; j++) {
        const prof_gemm_shape *s = &p->shapes[order[j]];
        char shape[64], alone[16] = "-";
        char groups[16] = "";
        if (s->outer > 0) snprintf(groups, sizeof groups, "x%d", s->outer);
        snprintf(shape, sizeof shape, "%dx%dx%d %c%c x%d%s%s%s%s%s%s", s->m, s->n, s->k,
                 s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->batch, groups, s->dtype < 0 ? "" : " ",
                 s->dtype < 0 ? "" : dtype_name(s->dtype),
                 s->stored16 & BT_GEMM_A16 ? " A16" : "", s->stored16 & BT_GEMM_B16 ? " B16" : "",
                 s->stored16 & BT_GEMM_C16 ? " C16" : "");
        if (s->alone_s > 0) snprintf(alone, sizeof alone, "%.1f", rate_alone(s));
        fprintf(out, "  %-42s %10.1f %10.3f %10.1f %14s\n", shape, s->calls / n,
                1e3 * s->seconds / n, rate_in_steps(s), alone);
    }
    free(order);
    double flops, in_steps, alone;
    gemm_totals(p, &flops, &in_steps, &alone);
    if (alone <= 0) return;
    const double step_s = p->step_seconds / n;
    fprintf(out, "gemm ceiling at this model's shapes: %.1f GFLOP/s (the step's GEMMs alone: "
                 "%.1f ms, in the step: %.1f ms)\n",
            flops / alone / 1e9, 1e3 * alone, 1e3 * in_steps);
    fprintf(out, "the step: %.1f GFLOP/s of GEMM work, %.1f%% of that ceiling\n",
            flops / step_s / 1e9, 100.0 * alone / step_s);
}

void prof_gemm_json(const bt_profiler *p, cJSON *obj) {
    const double n = p->steps > 0 ? p->steps : 1;
    cJSON *shapes = cJSON_AddArrayToObject(obj, "gemm_shapes");
    int *order = p->n_shapes ? malloc((size_t)p->n_shapes * sizeof *order) : NULL;
    const int k = order ? shapes_by_time(p, order) : 0;
    for (int j = 0; j < k; j++) {
        const prof_gemm_shape *s = &p->shapes[order[j]];
        cJSON *shape = cJSON_CreateObject();
        cJSON_AddNumberToObject(shape, "m", s->m);
        cJSON_AddNumberToObject(shape, "n", s->n);
        cJSON_AddNumberToObject(shape, "k", s->k);
        cJSON_AddBoolToObject(shape, "trans_a", s->ta);
        cJSON_AddBoolToObject(shape, "trans_b", s->tb);
        cJSON_AddNumberToObject(shape, "batch", s->batch);
        cJSON_AddNumberToObject(shape, "groups", s->outer > 0 ? s->outer : 1); /* gemm_grid */
        cJSON_AddStringToObject(shape, "dtype", dtype_name(s->dtype));
        cJSON_AddNumberToObject(shape, "stored16", s->stored16);
        cJSON_AddNumberToObject(shape, "calls", s->calls / n);
        cJSON_AddNumberToObject(shape, "ms", 1e3 * s->seconds / n);
        cJSON_AddNumberToObject(shape, "gflops", rate_in_steps(s));
        cJSON_AddNumberToObject(shape, "alone_gflops", rate_alone(s));
        cJSON_AddItemToArray(shapes, shape);
    }
    free(order);
    double flops, in_steps, alone;
    gemm_totals(p, &flops, &in_steps, &alone);
    cJSON_AddNumberToObject(obj, "gemm_ms", 1e3 * in_steps);
    cJSON_AddNumberToObject(obj, "gemm_alone_ms", 1e3 * alone);
    cJSON_AddNumberToObject(obj, "gemm_ceiling_gflops", alone > 0 ? flops / alone / 1e9 : 0.0);
}
