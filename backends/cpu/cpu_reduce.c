/* The CPU reference backend's reductions: sums and sums of squares over
 * fixed chunks in double, added in chunk order (the same bits for any thread
 * count), the finiteness check, and the deferred forms, which the CPU computes
 * at once and hands over at the fetch; and, beside cpu_column_sums, the other
 * helper of the ops over saved activations: a 16-bit input widened into the
 * context's scratch (cpu_widen16). */
#include "cpu_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for need doubles at *v (grow-only scratch of capacity *cap); on out of
 * host memory, one line and exit. */
static double *grow_doubles(double **v, size_t *cap, size_t need) {
    if (need > *cap) {
        const size_t want = need > 2 * *cap ? need : 2 * *cap;
        double *grown = realloc(*v, want * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "bertrain: cpu backend: out of host memory in a reduction\n");
            exit(1);
        }
        *v = grown;
        *cap = want;
    }
    return *v;
}

double cpu_reduce_chunks(cpu_ctx *ctx, const float *x, size_t n, bool squares) {
    const size_t chunks = (n + CPU_REDUCE_CHUNK - 1) / CPU_REDUCE_CHUNK;
    if (chunks == 0) return 0.0;
    double *part = grow_doubles(&ctx->chunk_part, &ctx->cap_chunk_part, chunks);
#pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < chunks; ch++) {
        const size_t i0 = ch * CPU_REDUCE_CHUNK,
                     i1 = i0 + CPU_REDUCE_CHUNK < n ? i0 + CPU_REDUCE_CHUNK : n;
        part[ch] = squares ? cpu_lane_sumsq(x + i0, i1 - i0) : cpu_lane_sum(x + i0, i1 - i0);
    }
    double total = 0.0;
    for (size_t ch = 0; ch < chunks; ch++) total += part[ch];
    return total;
}

/* One chunk's column sums: rows r0..r1 added in order, all columns at once
 * (contiguous, so the loop vectorises). */
static void chunk_column_sums(float *restrict acc, float *restrict acc_xhat, const float *D,
                              const float *X, const float *mean, const float *rstd, int r0,
                              int r1, int cols) {
    for (int r = r0; r < r1; r++) {
        const float *restrict d = D + (size_t)r * cols;
#pragma omp simd
        for (int c = 0; c < cols; c++) acc[c] += d[c];
        if (!acc_xhat) continue;
        const float *restrict x = X + (size_t)r * cols;
        const float mu = mean[r], rs = rstd[r];
#pragma omp simd
        for (int c = 0; c < cols; c++) acc_xhat[c] += d[c] * ((x[c] - mu) * rs);
    }
}

void cpu_column_sums(cpu_ctx *ctx, float *sum, float *sum_xhat, const float *D, const float *X,
                     const float *mean, const float *rstd, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const int chunks = (rows + CPU_ROW_CHUNK - 1) / CPU_ROW_CHUNK, parts = sum_xhat ? 2 : 1;
    const size_t n_part = (size_t)chunks * parts * cols;
    float *part = bt_partials_reserve(&ctx->col_part, n_part, "cpu backend");
    memset(part, 0, n_part * sizeof *part);
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < chunks; ch++) {
        const int r0 = ch * CPU_ROW_CHUNK,
                  r1 = r0 + CPU_ROW_CHUNK < rows ? r0 + CPU_ROW_CHUNK : rows;
        float *acc = part + (size_t)ch * parts * cols;
        chunk_column_sums(acc, sum_xhat ? acc + cols : NULL, D, X, mean, rstd, r0, r1, cols);
    }
#pragma omp parallel for schedule(static)
    for (int c = 0; c < cols; c++) {
        double s = 0.0, sx = 0.0;
        for (int ch = 0; ch < chunks; ch++) {
            s += part[(size_t)ch * parts * cols + c];
            if (sum_xhat) sx += part[(size_t)ch * parts * cols + cols + c];
        }
        sum[c] += (float)s;
        if (sum_xhat) sum_xhat[c] += (float)sx;
    }
}

static double cpu_sumsq(bt_backend *be, bt_ptr x, size_t n) {
    ((cpu_ctx *)be->ctx)->count.host_reads++;
    return cpu_reduce_chunks(be->ctx, cpu_f32(x), n, true);
}

static double cpu_sum(bt_backend *be, bt_ptr x, size_t n) {
    ((cpu_ctx *)be->ctx)->count.host_reads++;
    return cpu_reduce_chunks(be->ctx, cpu_f32(x), n, false);
}

static bool all_finite(const float *x, size_t n) {
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (size_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
    return !bad;
}

static bool cpu_all_finite(bt_backend *be, bt_ptr x, size_t n) {
    ((cpu_ctx *)be->ctx)->count.host_reads++;
    return all_finite(cpu_f32(x), n);
}

/* Deferred reductions: the CPU computes each at once and keeps its value
 * until the fetch, which hands them over (counted as one read, as a device's
 * fetch is). */
static int cpu_reduce_defer(bt_backend *be, bt_reduce_kind kind, bt_ptr x, size_t n) {
    cpu_ctx *c = be->ctx;
    grow_doubles(&c->deferred, &c->cap_deferred, (size_t)c->n_deferred + 1);
    double v;
    if (kind == BT_REDUCE_FINITE)
        v = all_finite(cpu_f32(x), n) ? 1.0 : 0.0;
    else
        v = cpu_reduce_chunks(c, cpu_f32(x), n, kind == BT_REDUCE_SUMSQ);
    c->deferred[c->n_deferred] = v;
    return c->n_deferred++;
}

/* Deferred value i, checked to be queued (an internal error if not). */
static double deferred_value(const cpu_ctx *c, int i) {
    if (i < 0 || i >= c->n_deferred) {
        fprintf(stderr, "bertrain: cpu backend: internal error: step_gate given %d, not a "
                        "queued reduction\n", i);
        exit(1);
    }
    return c->deferred[i];
}

/* The sum of the deferred values idx[0 .. n) in order, from 0. */
static double deferred_sum(const cpu_ctx *c, const int *idx, int n) {
    double s = 0.0;
    for (int k = 0; k < n; k++) s += deferred_value(c, idx[k]);
    return s;
}

/* bt_step_gate's decision on the values queued (kernels/optim.cl's
 * bt_step_gate_decide is its twin on the devices). */
static int cpu_step_gate(bt_backend *be, const bt_step_gate *rule) {
    cpu_ctx *c = be->ctx;
    const double norm = sqrt(deferred_value(c, rule->norm_sumsq));
    const double mlm = rule->masked > 0 ? deferred_sum(c, rule->mlm_loss, rule->n_mlm) / rule->masked
                                        : 0.0,
                 nsp = rule->nsp > 0 ? deferred_sum(c, rule->nsp_loss, rule->n_nsp) / rule->nsp : 0.0;
    const double loss = mlm + nsp;
    bool skip = rule->finite >= 0 && deferred_value(c, rule->finite) == 0.0;
    if (rule->guard &&
        (!isfinite(loss) || !isfinite(norm) || (rule->loss_limit > 0 && loss > rule->loss_limit)))
        skip = true;
    float scale = 1.0f;
    if (rule->max_norm > 0.0f) {
        const double coef = rule->max_norm / (norm + 1e-6);
        scale = coef < 1.0 ? (float)coef : 1.0f;
    }
    grow_doubles(&c->deferred, &c->cap_deferred, (size_t)c->n_deferred + 2);
    c->deferred[c->n_deferred] = skip ? 0.0 : 1.0;
    c->deferred[c->n_deferred + 1] = scale;
    c->gate = c->n_deferred;
    c->n_deferred += 2;
    return c->gate;
}

float cpu_gate_scale(cpu_ctx *c, int gate, float grad_scale, bool *skip) {
    *skip = false;
    if (gate < 0) return grad_scale;
    if (gate != c->gate || gate + 1 >= c->n_deferred) {
        fprintf(stderr, "bertrain: cpu backend: internal error: an optimizer step given gate %d, "
                        "not the last step_gate's\n", gate);
        exit(1);
    }
    *skip = c->deferred[gate] == 0.0;
    return (float)c->deferred[gate + 1];
}

static void cpu_reduce_fetch(bt_backend *be, double *out) {
    cpu_ctx *c = be->ctx;
    c->gate = -1;
    if (c->n_deferred == 0) return; /* nothing queued: out may be NULL */
    c->count.host_reads++;
    memcpy(out, c->deferred, (size_t)c->n_deferred * sizeof *out);
    c->n_deferred = 0;
}

void cpu_fill_reduce_ops(bt_backend *be) {
    be->sum = cpu_sum;
    be->sumsq = cpu_sumsq;
    be->all_finite = cpu_all_finite;
    be->reduce_defer = cpu_reduce_defer;
    be->reduce_fetch = cpu_reduce_fetch;
    be->step_gate = cpu_step_gate;
}

/* n floats in ctx's grow-only scratch (wide16), made chunk by chunk: x's
 * 16-bit values of dtype dt widened (widen), or x's floats rounded to dt. */
static const float *scratch_floats(cpu_ctx *ctx, bt_ptr x, bt_dtype dt, size_t n, bool widen) {
    float *w = bt_partials_reserve(&ctx->wide16, n, "cpu");
    const size_t chunks = (n + CPU_REDUCE_CHUNK - 1) / CPU_REDUCE_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < chunks; k++) {
        const size_t i = k * CPU_REDUCE_CHUNK;
        const size_t len = n - i < CPU_REDUCE_CHUNK ? n - i : CPU_REDUCE_CHUNK;
        if (widen) {
            cpu_from16_span((uint32_t *)w + i, cpu_u16(x) + i, dt, len);
        } else {
            memcpy(w + i, cpu_f32(x) + i, len * sizeof *w);
            cpu_round16_span((uint32_t *)w + i, dt, len);
        }
    }
    return w;
}

const float *cpu_rounded16(cpu_ctx *ctx, bt_ptr x, bt_dtype dt, size_t n) {
    return scratch_floats(ctx, x, dt, n, false);
}

const float *cpu_widen16(cpu_ctx *ctx, bt_ptr x, bt_dtype dt, size_t n) {
    return scratch_floats(ctx, x, dt, n, true);
}
