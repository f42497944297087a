/* CPU reference backend: the fused ops (bias + GELU, bias + dropout +
 * residual, residual + LayerNorm, softmax + dropout). Each computes exactly
 * the expressions of the ops it replaces, in their order, so it gives their
 * bits; what it saves is the passes over memory between them. */
#include "cpu_internal.h"

/* The dropout scale 1/(1-p) as dropout rounds it. */
static float keep_scale_of(float p) { return 1.0f / (1.0f - p); }

static void cpu_bias_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, int rows,
                              int cols) {
    (void)be;
    float *O = cpu_f32(out), *Y = cpu_f32(y);
    const float *bb = cpu_f32(bias);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float *restrict yr = Y + (size_t)r * cols, *restrict o = O + (size_t)r * cols;
        for (int c = 0; c < cols; c++) yr[c] += bb[c];
        for (int c = 0; c < cols; c++) o[c] = cpu_gelu(yr[c]);
    }
}

/* Column blocks as bias_grad: each thread owns CPU_COL_BLOCK columns and
 * walks the rows in order, writing dx as it goes. */
static void cpu_bias_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr dbias, bt_ptr dout, bt_ptr x,
                              int rows, int cols) {
    (void)be;
    float *DX = cpu_f32(dx), *db = cpu_f32(dbias);
    const float *D = cpu_f32(dout), *X = cpu_f32(x);
    const int blocks = (cols + CPU_COL_BLOCK - 1) / CPU_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * CPU_COL_BLOCK,
                  c1 = c0 + CPU_COL_BLOCK < cols ? c0 + CPU_COL_BLOCK : cols;
        float acc[CPU_COL_BLOCK] = {0};
        for (int r = 0; r < rows; r++) {
            const size_t row = (size_t)r * cols;
            for (int c = c0; c < c1; c++) DX[row + c] = D[row + c] * cpu_gelu_grad(X[row + c]);
            for (int c = c0; c < c1; c++) acc[c - c0] += DX[row + c];
        }
        for (int c = c0; c < c1; c++) db[c] += acc[c - c0];
    }
}

/* sum[c] = resid[c] + dropout(y[c] + bias[c]) for one row, the dropout
 * stream d positioned at its first element. */
static void join_row(float *sum, const float *y, const float *bias, const float *resid, int cols, cpu_drop_stream *d, float p,
                     float keep_scale) {
    if (p > 0.0f)
        for (int c = 0; c < cols; c++) {
            const float v = y[c] + bias[c];
            sum[c] = (cpu_drop_next(d) ? v * keep_scale : 0.0f) + resid[c];
        }
    else
        for (int c = 0; c < cols; c++) sum[c] = (y[c] + bias[c]) + resid[c];
}

static void cpu_bias_dropout_add(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias,
                                 bt_ptr resid, int rows, int cols, size_t per_sample,
                                 uint32_t first_sample, float p, bt_rng_key key) {
    (void)be;
    float *O = cpu_f32(out);
    const float *Y = cpu_f32(y), *bb = cpu_f32(bias), *R = cpu_f32(resid);
    const float ks = keep_scale_of(p);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t row = (size_t)r * cols;
        cpu_drop_stream d = cpu_drop_stream_at(key, first_sample, per_sample, p, row);
        join_row(O + row, Y + row, bb, R + row, cols, &d, p, ks);
    }
}

/* The join of bias_dropout_add, then layernorm_fwd's arithmetic on the row. */
static void cpu_residual_layernorm_fwd(bt_backend *be, bt_ptr sum, bt_ptr out, bt_ptr mean,
                                       bt_ptr rstd, bt_ptr y, bt_ptr bias, bt_ptr resid,
                                       bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                                       size_t per_sample, uint32_t first_sample, float p,
                                       bt_rng_key key) {
    (void)be;
    float *S = cpu_f32(sum), *O = cpu_f32(out), *MU = cpu_f32(mean), *RS = cpu_f32(rstd);
    const float *Y = cpu_f32(y), *bb = cpu_f32(bias), *R = cpu_f32(resid), *G = cpu_f32(gamma),
                *Bb = cpu_f32(beta);
    const float ks = keep_scale_of(p);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const size_t row = (size_t)r * cols;
        cpu_drop_stream d = cpu_drop_stream_at(key, first_sample, per_sample, p, row);
        join_row(S + row, Y + row, bb, R + row, cols, &d, p, ks);
        cpu_layernorm_row(O + row, S + row, G, Bb, cols, eps, MU + r, RS + r);
    }
}

/* softmax_fwd's row arithmetic, then dropout of the finished row. */
static void cpu_softmax_dropout_fwd(bt_backend *be, bt_ptr dropped, bt_ptr probs, bt_ptr scores,
                                    bt_ptr key_mask, int B, int H, int T, float scale,
                                    uint32_t first_sample, float p, bt_rng_key key) {
    (void)be;
    float *P = cpu_f32(probs), *PD = cpu_f32(dropped);
    const float *S = cpu_f32(scores);
    const int32_t *K = cpu_i32(key_mask);
    const int rows = B * H * T;
    const size_t per_sample = (size_t)H * T * T;
    const float ks = keep_scale_of(p);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        cpu_drop_stream d = cpu_drop_stream_at(key, first_sample, per_sample, p, (size_t)r * T);
        float *pr = P + (size_t)r * T, *pd = PD + (size_t)r * T;
        cpu_softmax_row(pr, S + (size_t)r * T, K + (size_t)(r / (H * T)) * T, T, scale);
        for (int j = 0; j < T; j++) pd[j] = cpu_drop_next(&d) ? pr[j] * ks : 0.0f;
    }
}

/* dropout of the row of dprobs (into dscores), then softmax_bwd's arithmetic. */
static void cpu_dropout_softmax_bwd(bt_backend *be, bt_ptr dscores, bt_ptr dprobs, bt_ptr probs,
                                    int B, int H, int T, float scale, uint32_t first_sample,
                                    float p, bt_rng_key key) {
    (void)be;
    float *DS = cpu_f32(dscores);
    const float *DP = cpu_f32(dprobs), *P = cpu_f32(probs);
    const int rows = B * H * T;
    const size_t per_sample = (size_t)H * T * T;
    const float ks = keep_scale_of(p);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        cpu_drop_stream d = cpu_drop_stream_at(key, first_sample, per_sample, p, (size_t)r * T);
        const float *dp = DP + (size_t)r * T, *pr = P + (size_t)r * T;
        float *ds = DS + (size_t)r * T;
        double dot = 0.0;
        for (int j = 0; j < T; j++) {
            const float g = cpu_drop_next(&d) ? dp[j] * ks : 0.0f;
            ds[j] = g;
            dot += (double)g * pr[j];
        }
        const float fdot = (float)dot;
        for (int j = 0; j < T; j++) ds[j] = scale * pr[j] * (ds[j] - fdot);
    }
}

void cpu_fill_fused_ops(bt_backend *be) {
    be->bias_gelu_fwd = cpu_bias_gelu_fwd;
    be->bias_gelu_bwd = cpu_bias_gelu_bwd;
    be->bias_dropout_add = cpu_bias_dropout_add;
    be->residual_layernorm_fwd = cpu_residual_layernorm_fwd;
    be->softmax_dropout_fwd = cpu_softmax_dropout_fwd;
    be->dropout_softmax_bwd = cpu_dropout_softmax_bwd;
}
