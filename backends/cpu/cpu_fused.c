/* CPU reference backend: the fused ops (bias + GELU, bias + dropout +
 * residual, residual + LayerNorm, softmax + dropout). Each computes exactly
 * the expressions of the ops it replaces, in their order, so it gives their
 * bits; what it saves is the passes over memory between them. */
#include "cpu_internal.h"
#include "../common/composed.h"

/* A fused op whose fp32 output is left out (its 16-bit copy given) makes
 * that output in pieces of this many values on the stack. */
#define CPU_FUSED_PIECE 256

/* bias_gelu_fwd of a pre-activation given in 16 bits (y16, dt): out and
 * its copy out16 = gelu of y16's values rounded to dt, in pieces on the
 * stack. */
static void cpu_gelu_of16(float *O, uint16_t *O16, const uint16_t *Y16, int rows, int cols,
                          bt_dtype dt) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float x[CPU_FUSED_PIECE], piece[CPU_FUSED_PIECE];
        for (size_t c = 0; c < (size_t)cols; c += CPU_FUSED_PIECE) {
            const size_t at = (size_t)r * cols + c,
                         len = cols - c < CPU_FUSED_PIECE ? cols - c : CPU_FUSED_PIECE;
            float *o = O ? O + at : piece;
            cpu_from16_span((uint32_t *)x, Y16 + at, dt, len);
            cpu_gelu_span(o, x, len);
            cpu_round16_span((uint32_t *)o, dt, len);
            if (O16) cpu_to16_span(O16 + at, (const uint32_t *)o, dt, len);
        }
    }
}

static void cpu_bias_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, int rows,
                              int cols, bt_dtype round16, bt_ptr out16, bt_ptr y16, bool y_kept) {
    (void)be, (void)y_kept; /* y is the row's workspace: written either way */
    if (!y.buf) { /* the pre-activation given in y16 */
        cpu_gelu_of16(out.buf ? cpu_f32(out) : NULL, out16.buf ? cpu_u16(out16) : NULL,
                      cpu_u16(y16), rows, cols, round16);
        return;
    }
    float *O = out.buf ? cpu_f32(out) : NULL, *Y = cpu_f32(y);
    uint16_t *O16 = out16.buf ? cpu_u16(out16) : NULL, *Y16 = y16.buf ? cpu_u16(y16) : NULL;
    const float *bb = cpu_f32(bias);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t at = (size_t)r * cols;
        float *restrict yr = Y + at;
        cpu_bias_row(yr, bb, cols, round16, Y16 ? Y16 + at : NULL);
        /* without out, GELU in pieces that only its copy keeps */
        float piece[CPU_FUSED_PIECE];
        const size_t step = O ? (size_t)cols : CPU_FUSED_PIECE;
        for (size_t c = 0; c < (size_t)cols; c += step) {
            const size_t len = cols - c < step ? cols - c : step;
            float *o = O ? O + at + c : piece;
            cpu_gelu_span(o, yr + c, len);
            if (round16 != BT_F32) cpu_round16_span((uint32_t *)o, round16, len);
            if (O16) cpu_to16_span(O16 + at + c, (const uint32_t *)o, round16, len);
        }
    }
}

/* gelu_bwd's rows (rounded with 16-bit storage; the 16-bit copy of each
 * made as cast makes it), then bias_grad's column sums of the result. */
static void cpu_bias_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr dbias, bt_ptr dout, bt_ptr x,
                              int rows, int cols, bt_dtype round16, bt_dtype x_dtype,
                              bt_dtype dout_dtype, bt_ptr dx16, bool dx_kept) {
    (void)dx_kept; /* dx is the rows' workspace, which the column sums read: written either way */
    float *DX = cpu_f32(dx);
    uint16_t *DX16 = dx16.buf ? cpu_u16(dx16) : NULL;
    const uint16_t *D16 = dout_dtype != BT_F32 ? cpu_u16(dout) : NULL;
    const float *D = cpu_f32(dout), *X = cpu_f32(x);
    if (x_dtype != BT_F32) /* a 16-bit x widened first: the fp32 path's bits */
        X = cpu_widen16(be->ctx, x, x_dtype, (size_t)rows * cols);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t row = (size_t)r * cols;
        const float *d = D + row;
        if (D16) { /* a 16-bit dout widened into dx (which does not overlap it) */
            cpu_from16_span((uint32_t *)(DX + row), D16 + row, dout_dtype, (size_t)cols);
            d = DX + row;
        } else if (round16 != BT_F32) { /* dout rounded as it is read, into dx */
            if (DX != D) memcpy(DX + row, D + row, (size_t)cols * sizeof *DX);
            cpu_round16_span((uint32_t *)(DX + row), round16, (size_t)cols);
            d = DX + row;
        }
        cpu_gelu_grad_span(DX + row, d, X + row, (size_t)cols);
        if (round16 != BT_F32) cpu_round16_span((uint32_t *)(DX + row), round16, (size_t)cols);
        if (DX16) cpu_to16_span(DX16 + row, (const uint32_t *)(DX + row), round16, (size_t)cols);
    }
    cpu_column_sums(be->ctx, cpu_f32(dbias), NULL, DX, NULL, NULL, NULL, rows, cols);
}

/* join_row with 16-bit storage: y + bias and the sum rounded to dt, as the
 * unfused ops' round16 after bias_add and after add. */
static void join_row_rounded(float *sum, const float *y, const float *bias, const float *resid,
                             int cols, const cpu_drop *d, size_t i0, bt_dtype dt) {
    uint8_t keep[CPU_KEEP_RUN];
    for (int c0 = 0; c0 < cols; c0 += CPU_KEEP_RUN) {
        const int len = cols - c0 < CPU_KEEP_RUN ? cols - c0 : CPU_KEEP_RUN;
        if (d->thr) cpu_drop_keep(keep, d, i0 + (size_t)c0, (size_t)len);
        for (int j = 0; j < len; j++) {
            const int c = c0 + j;
            float v = cpu_round16_value(y[c] + bias[c], dt);
            if (d->thr) v = cpu_select(keep[j] != 0, v * d->keep_scale, 0.0f);
            sum[c] = cpu_round16_value(v + resid[c], dt);
        }
    }
}

/* sum[c] = resid[c] + dropout(y[c] + bias[c]) for one row whose first
 * element is element i0 of the dropout stream d; with dt BT_BF16 or BT_F16
 * rounded as join_row_rounded. */
static void join_row(float *sum, const float *y, const float *bias, const float *resid, int cols,
                     const cpu_drop *d, size_t i0, bt_dtype dt) {
    if (dt != BT_F32) {
        join_row_rounded(sum, y, bias, resid, cols, d, i0, dt);
        return;
    }
    if (d->thr == 0) { /* p = 0: every element kept, scaled by exactly 1 */
        for (int c = 0; c < cols; c++) sum[c] = (y[c] + bias[c]) + resid[c];
        return;
    }
    uint8_t keep[CPU_KEEP_RUN];
    for (int c0 = 0; c0 < cols; c0 += CPU_KEEP_RUN) {
        const int len = cols - c0 < CPU_KEEP_RUN ? cols - c0 : CPU_KEEP_RUN;
        cpu_drop_keep(keep, d, i0 + (size_t)c0, (size_t)len);
#pragma omp simd
        for (int j = 0; j < len; j++) {
            const int c = c0 + j;
            const float v = y[c] + bias[c];
            sum[c] = cpu_select(keep[j] != 0, v * d->keep_scale, 0.0f) + resid[c];
        }
    }
}

static void cpu_bias_dropout_add(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias,
                                 bt_ptr resid, int rows, int cols, bt_dtype round16,
                                 size_t per_sample, uint32_t first_sample, float p,
                                 bt_rng_key key) {
    (void)be;
    float *O = cpu_f32(out);
    const float *Y = cpu_f32(y), *bb = cpu_f32(bias), *R = cpu_f32(resid);
    const cpu_drop d = cpu_drop_of(key, first_sample, per_sample, p);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t row = (size_t)r * cols;
        join_row(O + row, Y + row, bb, R + row, cols, &d, row, round16);
    }
}

/* out = dropout(a + b) with add_dropout's roundings: the sums in runs on
 * the stack, then dropout's arithmetic and draws on them. */
static void cpu_add_dropout(bt_backend *be, bt_ptr out, bt_ptr a, bt_ptr b, bt_dtype b_dtype,
                            size_t n, size_t per_sample, uint32_t first_sample, float p,
                            bt_rng_key key, bt_dtype round16) {
    (void)be;
    if (!n || !per_sample) return;
    float *O = cpu_f32(out);
    const float *A = cpu_f32(a), *B = b_dtype == BT_F32 ? cpu_f32(b) : NULL;
    const uint16_t *B16 = b_dtype != BT_F32 ? cpu_u16(b) : NULL;
    const cpu_drop d = cpu_drop_of(key, first_sample, per_sample, p);
    const size_t runs = (n + CPU_KEEP_RUN - 1) / CPU_KEEP_RUN;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < runs; k++) {
        const size_t i = k * CPU_KEEP_RUN, len = n - i < CPU_KEEP_RUN ? n - i : CPU_KEEP_RUN;
        float x[CPU_KEEP_RUN];
        if (B16) cpu_from16_span((uint32_t *)x, B16 + i, b_dtype, len);
        else memcpy(x, B + i, len * sizeof *x);
        if (round16 != BT_F32 && !B16) cpu_round16_span((uint32_t *)x, round16, len);
        for (size_t j = 0; j < len; j++) x[j] += A[i + j];
        if (round16 != BT_F32) cpu_round16_span((uint32_t *)x, round16, len);
        cpu_dropout_run(O + i, x, len, &d, i);
    }
}

/* The join of bias_dropout_add, then layernorm_fwd's arithmetic on the row,
 * rounded as round16 with 16-bit storage. */
static void cpu_residual_layernorm_fwd(bt_backend *be, bt_ptr sum, bt_ptr out, bt_ptr mean,
                                       bt_ptr rstd, bt_ptr y, bt_ptr bias, bt_ptr resid,
                                       bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                                       bt_dtype round16, size_t per_sample,
                                       uint32_t first_sample, float p, bt_rng_key key,
                                       bt_ptr sum16, bt_ptr out16, bool sum_kept,
                                       bt_dtype resid_dtype, bool out_kept) {
    /* sum is the row's workspace, and out computed in place: written either way */
    (void)be, (void)sum_kept, (void)out_kept;
    float *S = cpu_f32(sum), *O = cpu_f32(out), *MU = cpu_f32(mean), *RS = cpu_f32(rstd);
    uint16_t *S16 = sum16.buf ? cpu_u16(sum16) : NULL, *O16 = out16.buf ? cpu_u16(out16) : NULL;
    const float *Y = cpu_f32(y), *bb = cpu_f32(bias), *G = cpu_f32(gamma), *Bb = cpu_f32(beta);
    const bool r16 = resid_dtype != BT_F32;
    const float *R = r16 ? NULL : cpu_f32(resid);
    const uint16_t *R16 = r16 ? cpu_u16(resid) : NULL;
    const cpu_drop d = cpu_drop_of(key, first_sample, per_sample, p);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t row = (size_t)r * cols;
        if (r16) /* the residual widened into the row's sum, the join in place */
            cpu_from16_span((uint32_t *)(S + row), R16 + row, resid_dtype, (size_t)cols);
        join_row(S + row, Y + row, bb, r16 ? S + row : R + row, cols, &d, row, round16);
        if (S16) cpu_to16_span(S16 + row, (const uint32_t *)(S + row), round16, (size_t)cols);
        cpu_layernorm_row(O + row, S + row, G, Bb, cols, eps, MU + r, RS + r);
        if (round16 != BT_F32) cpu_round16_span((uint32_t *)(O + row), round16, (size_t)cols);
        if (O16) cpu_to16_span(O16 + row, (const uint32_t *)(O + row), round16, (size_t)cols);
    }
}

/* softmax_fwd's row arithmetic, round16's rounding (with 16-bit storage),
 * then dropout of the finished row. */
static void cpu_softmax_dropout_fwd(bt_backend *be, bt_ptr dropped, bt_ptr probs, bt_ptr scores,
                                    bt_ptr key_mask, int B, int H, int T, float scale,
                                    bt_dtype round16, uint32_t first_sample, float p,
                                    bt_rng_key key, bt_ptr dropped16, bt_ptr probs16,
                                    bool probs_kept) {
    (void)be, (void)probs_kept; /* probs is the row's workspace: written either way */
    float *P = cpu_f32(probs), *PD = dropped.buf ? cpu_f32(dropped) : NULL;
    uint16_t *PD16 = dropped16.buf ? cpu_u16(dropped16) : NULL,
             *P16 = probs16.buf ? cpu_u16(probs16) : NULL;
    const float *S = cpu_f32(scores);
    const int32_t *K = cpu_i32(key_mask);
    const int rows = B * H * T;
    const size_t per_sample = (size_t)H * T * T;
    const cpu_drop d = cpu_drop_of(key, first_sample, per_sample, p);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t at = (size_t)r * T;
        float *pr = P + at;
        cpu_softmax_row(pr, S + at, K + (size_t)(r / (H * T)) * T, T, scale);
        if (round16 != BT_F32) cpu_round16_span((uint32_t *)pr, round16, (size_t)T);
        /* without dropped, dropout in pieces that only its copy keeps */
        float piece[CPU_FUSED_PIECE];
        const size_t step = PD ? (size_t)T : CPU_FUSED_PIECE;
        for (size_t j = 0; j < (size_t)T; j += step) {
            const size_t len = T - j < step ? T - j : step;
            float *pd = PD ? PD + at + j : piece;
            cpu_dropout_run(pd, pr + j, len, &d, at + j);
            if (PD16) cpu_to16_span(PD16 + at + j, (const uint32_t *)pd, round16, len);
        }
        if (P16) cpu_to16_span(P16 + at, (const uint32_t *)pr, round16, (size_t)T);
    }
}

/* dropout of the row of dprobs (into dscores), then softmax_bwd's arithmetic,
 * then round16's rounding with 16-bit storage; a 16-bit probs widened first
 * (cpu_widen16), the 16-bit copy of each finished row made as cast makes it. */
static void cpu_dropout_softmax_bwd(bt_backend *be, bt_ptr dscores, bt_ptr dprobs, bt_ptr probs,
                                    int B, int H, int T, float scale, bt_dtype round16,
                                    uint32_t first_sample, float p, bt_rng_key key,
                                    bt_dtype probs_dtype, bt_ptr dscores16, bool dscores_kept) {
    (void)dscores_kept; /* dscores is the row's workspace: written either way */
    float *DS = cpu_f32(dscores);
    const int rows = B * H * T;
    const size_t per_sample = (size_t)H * T * T;
    const float *DP = cpu_f32(dprobs),
                *P = probs_dtype == BT_F32
                         ? cpu_f32(probs)
                         : cpu_widen16(be->ctx, probs, probs_dtype, (size_t)rows * T);
    uint16_t *DS16 = dscores16.buf ? cpu_u16(dscores16) : NULL;
    const cpu_drop d = cpu_drop_of(key, first_sample, per_sample, p);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *dp = DP + (size_t)r * T, *pr = P + (size_t)r * T;
        float *ds = DS + (size_t)r * T;
        cpu_dropout_run(ds, dp, (size_t)T, &d, (size_t)r * T);
        const float fdot = (float)cpu_lane_dot(ds, pr, (size_t)T);
        for (int j = 0; j < T; j++) ds[j] = scale * pr[j] * (ds[j] - fdot);
        if (round16 != BT_F32) cpu_round16_span((uint32_t *)ds, round16, (size_t)T);
        if (DS16) cpu_to16_span(DS16 + (size_t)r * T, (const uint32_t *)ds, round16, (size_t)T);
    }
}

void cpu_fill_fused_ops(bt_backend *be) {
    be->bias_gelu_fwd = cpu_bias_gelu_fwd;
    be->bias_gelu_bwd = cpu_bias_gelu_bwd;
    be->bias_dropout_add = cpu_bias_dropout_add;
    be->add_dropout = cpu_add_dropout;
    be->residual_layernorm_fwd = cpu_residual_layernorm_fwd;
    be->softmax_dropout_fwd = cpu_softmax_dropout_fwd;
    be->dropout_softmax_bwd = cpu_dropout_softmax_bwd;
    /* the GEMM and the bias pass as they are: no GEMM here has an epilogue */
    be->gemm16_bias = bt_composed_gemm16_bias;
    be->gemm16_bias_grad = bt_composed_gemm16_bias_grad;
}
