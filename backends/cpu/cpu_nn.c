/* CPU reference backend: the neural-network ops (embeddings, LayerNorm, GELU,
 * tanh, masked softmax, dropout, row gather/scatter, fused cross-entropy).
 * Row statistics use double accumulators; gradient reductions over rows run
 * column-parallel so every thread count gives the same bits. */
#include "cpu_internal.h"

#include <math.h>

static void cpu_embed_fwd(bt_backend *be, bt_ptr out, bt_ptr ids, bt_ptr type_ids, bt_ptr wte,
                          bt_ptr wpe, bt_ptr wtt, int B, int T, int C) {
    (void)be;
    float *O = cpu_f32(out);
    const int32_t *I = cpu_i32(ids), *TT = cpu_i32(type_ids);
    const float *E = cpu_f32(wte), *P = cpu_f32(wpe), *Y = cpu_f32(wtt);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const float *e = E + (size_t)I[n] * C, *p = P + (size_t)(n % T) * C,
                    *y = Y + (size_t)TT[n] * C;
        float *o = O + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c] + y[c];
    }
}

/* Walks the tokens in order per block of columns: the links are not needed. */
static void cpu_embed_bwd(bt_backend *be, bt_ptr dwte, bt_ptr dwpe, bt_ptr dwtt, bt_ptr dout,
                          bt_ptr ids, bt_ptr ids_links, bt_ptr type_ids, int B, int T, int C,
                          int V, int TV, int pad_id) {
    (void)ids_links;
    (void)V;
    (void)TV;
    float *DE = cpu_f32(dwte), *DP = cpu_f32(dwpe), *DY = cpu_f32(dwtt);
    const float *D = cpu_f32(dout);
    const int32_t *I = cpu_i32(ids), *TT = cpu_i32(type_ids);
    const int width = cpu_col_block(C, ((cpu_ctx *)be->ctx)->threads_max),
              blocks = (C + width - 1) / width;
    /* each task owns a block of columns and walks tokens in order: no races,
     * and the summation order is fixed */
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * width, c1 = c0 + width < C ? c0 + width : C;
        for (int n = 0; n < B * T; n++) {
            const float *d = D + (size_t)n * C;
            float *dp = DP + (size_t)(n % T) * C, *dy = DY + (size_t)TT[n] * C;
            for (int c = c0; c < c1; c++) {
                dp[c] += d[c];
                dy[c] += d[c];
            }
            if (I[n] == pad_id) continue;
            float *de = DE + (size_t)I[n] * C;
            for (int c = c0; c < c1; c++) de[c] += d[c];
        }
    }
}

static void cpu_layernorm_fwd(bt_backend *be, bt_ptr out, bt_ptr mean, bt_ptr rstd, bt_ptr x,
                              bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                              bt_dtype round16) {
    (void)be;
    float *O = cpu_f32(out), *MU = cpu_f32(mean), *RS = cpu_f32(rstd);
    const float *X = cpu_f32(x), *G = cpu_f32(gamma), *Bb = cpu_f32(beta);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float *o = O + (size_t)r * cols;
        cpu_layernorm_row(o, X + (size_t)r * cols, G, Bb, cols, eps, MU + r, RS + r);
        if (round16 != BT_F32) cpu_round16_span((uint32_t *)o, round16, (size_t)cols);
    }
}

/* One row of dout as layernorm_bwd reads it, into d (which may be dout):
 * dout + round16(dbranch) where there is a branch, rounded to round16
 * (BT_F32: neither rounded); dout and dbranch fp32 where their types in t
 * are BT_F32, else 16-bit values of them, widened (dbranch not rounded). */
static void cpu_ln_dy_row(float *d, const void *dout, const void *dbranch, bt_ln_bwd_types t,
                          int cols) {
    const bt_dtype round16 = t.round16, branch_dtype = t.dbranch;
    if (t.dout != BT_F32)
        cpu_from16_span((uint32_t *)d, dout, t.dout, (size_t)cols);
    else if ((const void *)d != dout)
        memcpy(d, dout, (size_t)cols * sizeof *d);
    if (dbranch) {
        float b[CPU_KEEP_RUN];
        for (int c0 = 0; c0 < cols; c0 += CPU_KEEP_RUN) {
            const int len = cols - c0 < CPU_KEEP_RUN ? cols - c0 : CPU_KEEP_RUN;
            if (branch_dtype != BT_F32) {
                cpu_from16_span((uint32_t *)b, (const uint16_t *)dbranch + c0, branch_dtype,
                                (size_t)len);
            } else {
                memcpy(b, (const float *)dbranch + c0, (size_t)len * sizeof *b);
                if (round16 != BT_F32) cpu_round16_span((uint32_t *)b, round16, (size_t)len);
            }
            for (int j = 0; j < len; j++) d[c0 + j] += b[j];
        }
    }
    if (round16 != BT_F32) cpu_round16_span((uint32_t *)d, round16, (size_t)cols);
}

static void cpu_dropout(bt_backend *be, bt_ptr out, bt_ptr in, size_t n, size_t per_sample,
                        uint32_t first_sample, float p, bt_rng_key key, bt_dtype in_dtype,
                        bt_ptr out16, bt_dtype kind16);

/* layernorm_bwd's dx; then, with drop, `dropout` of it (the op's definition) */
static void cpu_layernorm_bwd(bt_backend *be, bt_ptr dx, bt_ptr dgamma, bt_ptr dbeta,
                              bt_ptr dout, bt_ptr dbranch, bt_ptr x, bt_ptr mean, bt_ptr rstd,
                              bt_ptr gamma, int rows, int cols, bt_ln_bwd_types t,
                              const bt_ln_bwd_drop *drop) {
    cpu_ctx *ctx = be->ctx;
    const bt_dtype round16 = t.round16;
    const size_t n = (size_t)rows * cols;
    /* a 16-bit dx: computed in fp32 scratch, then cast */
    float *DX = t.dx != BT_F32 ? bt_partials_reserve(&ctx->ln_dx, n, "cpu") : cpu_f32(dx);
    float *DG = cpu_f32(dgamma), *DB = cpu_f32(dbeta);
    const float *D = cpu_f32(dout), *X = cpu_f32(x), *MU = cpu_f32(mean), *RS = cpu_f32(rstd),
                *G = cpu_f32(gamma);
    if (t.x != BT_F32) /* a 16-bit x widened first: the fp32 path's bits */
        X = cpu_widen16(ctx, x, t.x, n);
    if (round16 != BT_F32 || dbranch.buf || t.dout != BT_F32) {
        /* dout as it is read (widened, the branch's gradient rounded and added,
         * the sum rounded): into dx, read from there */
        const char *DY = (const char *)cpu_f32(dout),
                   *DBR = dbranch.buf ? (const char *)cpu_f32(dbranch) : NULL;
        const size_t dy_row = (size_t)cols * bt_dtype_size(t.dout),
                     br_row = (size_t)cols * bt_dtype_size(t.dbranch);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++)
            cpu_ln_dy_row(DX + (size_t)r * cols, DY + (size_t)r * dy_row,
                          DBR ? DBR + (size_t)r * br_row : NULL, t, cols);
        D = DX;
    }
    /* parameter gradients first: dx may alias dout */
    cpu_column_sums(be->ctx, DB, DG, D, X, MU, RS, rows, cols);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *d = D + (size_t)r * cols, *xr = X + (size_t)r * cols;
        float mu = MU[r], rs = RS[r];
        double sd, sdx;
        cpu_lane_ln_bwd(d, G, xr, mu, rs, (size_t)cols, &sd, &sdx);
        float mean_d = (float)(sd / cols), mean_dx = (float)(sdx / cols);
        float *o = DX + (size_t)r * cols;
#pragma omp simd
        for (int c = 0; c < cols; c++) {
            float xhat = (xr[c] - mu) * rs;
            o[c] = rs * (d[c] * G[c] - mean_d - xhat * mean_dx);
        }
        if (round16 != BT_F32) cpu_round16_span((uint32_t *)o, round16, (size_t)cols);
        if (t.dx != BT_F32) cpu_to16_span(cpu_u16(dx) + (size_t)r * cols, (uint32_t *)o, t.dx,
                                          (size_t)cols);
    }
    if (drop)
        cpu_dropout(be, BT_NO_PTR, dx, n, drop->per_sample, drop->first_sample, drop->p,
                    drop->key, t.dx, drop->out16, drop->kind16);
}

static void cpu_gelu_fwd(bt_backend *be, bt_ptr out, bt_ptr x, size_t n) {
    (void)be;
    float *O = cpu_f32(out);
    const float *X = cpu_f32(x);
    const size_t chunks = (n + CPU_REDUCE_CHUNK - 1) / CPU_REDUCE_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < chunks; k++) {
        const size_t i = k * CPU_REDUCE_CHUNK;
        cpu_gelu_span(O + i, X + i, n - i < CPU_REDUCE_CHUNK ? n - i : CPU_REDUCE_CHUNK);
    }
}

static void cpu_gelu_bwd(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr x, size_t n) {
    (void)be;
    float *DX = cpu_f32(dx);
    const float *D = cpu_f32(dout), *X = cpu_f32(x);
    const size_t chunks = (n + CPU_REDUCE_CHUNK - 1) / CPU_REDUCE_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < chunks; k++) {
        const size_t i = k * CPU_REDUCE_CHUNK;
        const size_t len = n - i < CPU_REDUCE_CHUNK ? n - i : CPU_REDUCE_CHUNK;
        cpu_gelu_grad_span(DX + i, D + i, X + i, len);
    }
}

/* The value of the 16 bits h of dt (BT_BF16 or BT_F16), widened exactly. */
static inline float from16_value(uint16_t h, bt_dtype dt) {
    uint32_t b;
    cpu_from16_span(&b, &h, dt, 1);
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* The 16 bits of x in dt (BT_BF16 or BT_F16): cast's rounding. */
static inline uint16_t to16_value(float x, bt_dtype dt) {
    uint32_t b;
    memcpy(&b, &x, 4);
    uint16_t h;
    cpu_to16_span(&h, &b, dt, 1);
    return h;
}

static void cpu_tanh_fwd(bt_backend *be, bt_ptr out, bt_ptr x, size_t n, bt_dtype dtype) {
    (void)be;
    if (dtype != BT_F32) { /* 16 bits in and out */
        uint16_t *O = cpu_u16(out);
        const uint16_t *X = cpu_u16(x);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) O[i] = to16_value(tanhf(from16_value(X[i], dtype)), dtype);
        return;
    }
    float *O = cpu_f32(out);
    const float *X = cpu_f32(x);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) O[i] = tanhf(X[i]);
}

static void cpu_tanh_bwd(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr y, size_t n,
                         bt_dtype dtype) {
    (void)be;
    if (dtype != BT_F32) { /* 16 bits in and out */
        uint16_t *DX = cpu_u16(dx);
        const uint16_t *D = cpu_u16(dout), *Y = cpu_u16(y);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            const float yi = from16_value(Y[i], dtype);
            DX[i] = to16_value(from16_value(D[i], dtype) * (1.0f - yi * yi), dtype);
        }
        return;
    }
    float *DX = cpu_f32(dx);
    const float *D = cpu_f32(dout), *Y = cpu_f32(y);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) DX[i] = D[i] * (1.0f - Y[i] * Y[i]);
}

static void cpu_softmax_fwd(bt_backend *be, bt_ptr probs, bt_ptr scores, bt_ptr key_mask, int B,
                            int H, int T, float scale) {
    (void)be;
    float *P = cpu_f32(probs);
    const float *S = cpu_f32(scores);
    const int32_t *K = cpu_i32(key_mask);
    int rows = B * H * T;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        cpu_softmax_row(P + (size_t)r * T, S + (size_t)r * T, K + (size_t)(r / (H * T)) * T, T,
                        scale);
    }
}

static void cpu_softmax_bwd(bt_backend *be, bt_ptr dscores, bt_ptr dprobs, bt_ptr probs,
                            int rows, int T, float scale) {
    (void)be;
    float *DS = cpu_f32(dscores);
    const float *DP = cpu_f32(dprobs), *P = cpu_f32(probs);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *dp = DP + (size_t)r * T, *p = P + (size_t)r * T;
        const float fdot = (float)cpu_lane_dot(dp, p, (size_t)T);
        float *ds = DS + (size_t)r * T;
        for (int j = 0; j < T; j++) ds[j] = scale * p[j] * (dp[j] - fdot);
    }
}

/* Runs of CPU_KEEP_RUN elements: a 16-bit input widened and an output that
 * is not kept (out absent) go through stack buffers of one run. */
static void cpu_dropout(bt_backend *be, bt_ptr out, bt_ptr in, size_t n, size_t per_sample,
                        uint32_t first_sample, float p, bt_rng_key key, bt_dtype in_dtype,
                        bt_ptr out16, bt_dtype kind16) {
    (void)be;
    float *O = out.buf ? cpu_f32(out) : NULL;
    const float *X = in_dtype == BT_F32 ? cpu_f32(in) : NULL;
    const uint16_t *X16 = in_dtype != BT_F32 ? cpu_u16(in) : NULL;
    uint16_t *O16 = out16.buf ? cpu_u16(out16) : NULL;
    const cpu_drop d = cpu_drop_of(key, first_sample, per_sample, p);
    const size_t runs = (n + CPU_KEEP_RUN - 1) / CPU_KEEP_RUN;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < runs; k++) {
        const size_t i = k * CPU_KEEP_RUN;
        const size_t len = n - i < CPU_KEEP_RUN ? n - i : CPU_KEEP_RUN;
        float x[CPU_KEEP_RUN], y[CPU_KEEP_RUN];
        if (X16) cpu_from16_span((uint32_t *)x, X16 + i, in_dtype, len);
        float *o = O ? O + i : y;
        cpu_dropout_run(o, X16 ? x : X + i, len, &d, i);
        if (O16) cpu_to16_span(O16 + i, (const uint32_t *)o, kind16, len);
    }
}

static void cpu_dropout_rows(bt_backend *be, bt_ptr x, bt_ptr idx, int n_idx, int cols,
                             size_t per_sample, uint32_t first_sample, float p, bt_rng_key key) {
    (void)be;
    if (n_idx <= 0 || cols <= 0 || !per_sample) return;
    float *X = cpu_f32(x);
    const int32_t *I = cpu_i32(idx);
    const cpu_drop d = cpu_drop_of(key, first_sample, per_sample, p);
#pragma omp parallel for schedule(static)
    for (int s = 0; s < n_idx; s++) {
        float *row = X + (size_t)s * cols;
        cpu_dropout_run(row, row, (size_t)cols, &d, (size_t)I[s] * cols);
    }
}

static void cpu_gather_rows(bt_backend *be, bt_ptr out, bt_ptr src, bt_ptr idx, int n_idx,
                            int cols) {
    (void)be;
    float *O = cpu_f32(out);
    const float *S = cpu_f32(src);
    const int32_t *I = cpu_i32(idx);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n_idx; i++)
        memcpy(O + (size_t)i * cols, S + (size_t)I[i] * cols, (size_t)cols * sizeof *O);
}

/* As embed_bwd's word rows: in order per block of columns, without links. */
static void cpu_scatter_rows(bt_backend *be, bt_ptr dst, bt_ptr src, bt_ptr idx, bt_ptr links,
                             int n_idx, int cols) {
    (void)links;
    float *D = cpu_f32(dst);
    const float *S = cpu_f32(src);
    const int32_t *I = cpu_i32(idx);
    const int width = cpu_col_block(cols, ((cpu_ctx *)be->ctx)->threads_max),
              blocks = (cols + width - 1) / width;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * width, c1 = c0 + width < cols ? c0 + width : cols;
        for (int i = 0; i < n_idx; i++)
            for (int c = c0; c < c1; c++) D[(size_t)I[i] * cols + c] += S[(size_t)i * cols + c];
    }
}

static void cpu_xent_fwd_bwd(bt_backend *be, bt_ptr dlogits, bt_ptr loss, bt_ptr correct,
                             bt_ptr log_z, bt_ptr logits, bt_ptr labels, int rows, int V,
                             float grad_scale, float z_loss, bt_dtype round16,
                             bt_ptr dlogits16, bt_dtype logits_dtype) {
    cpu_ctx *ctx = be->ctx;
    /* a gradient in 16 bits only: computed in fp32 scratch, then converted */
    float *DL = dlogits16.buf ? bt_partials_reserve(&ctx->xent_d, (size_t)rows * V, "cpu")
                              : cpu_f32(dlogits);
    float *L = cpu_f32(loss), *CR = cpu_f32(correct), *LZ = cpu_f32(log_z);
    /* 16-bit logits widened first: dlogits16 may lie over them */
    const float *X = logits_dtype != BT_F32
                         ? cpu_widen16(ctx, logits, logits_dtype, (size_t)rows * V)
                         : cpu_f32(logits);
    const int32_t *Y = cpu_i32(labels);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *x = X + (size_t)r * V;
        float *d = DL + (size_t)r * V;
        int y = Y[r];
        if (y < 0) {
            L[r] = 0.0f;
            CR[r] = 0.0f;
            LZ[r] = 0.0f;
            for (int j = 0; j < V; j++) d[j] = 0.0f;
            continue;
        }
        const float mx = cpu_max_span(x, 1.0f, NULL, (size_t)V);
        size_t arg = cpu_find_span(x, mx, (size_t)V); /* the first argmax */
        if (arg == (size_t)V) arg = 0;                 /* every value NaN */
        const float x_y = x[y]; /* saved: d may alias x */
        const double sum = cpu_exp_sum_span(d, x, 1.0f, mx, NULL, (size_t)V);
        L[r] = (float)(log(sum) + mx - x_y);
        CR[r] = arg == (size_t)y ? 1.0f : 0.0f;
        LZ[r] = (float)(log(sum) + mx);
        cpu_scale_span(d, grad_scale * (1.0f + 2.0f * z_loss * LZ[r]) * (float)(1.0 / sum),
                       (size_t)V);
        d[y] -= grad_scale;
    }
    if (round16 == BT_F32) return;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        uint32_t *d = (uint32_t *)(DL + (size_t)r * V);
        if (dlogits16.buf)
            cpu_to16_span(cpu_u16(dlogits16) + (size_t)r * V, d, round16, (size_t)V);
        else
            cpu_round16_span(d, round16, (size_t)V);
    }
}

void cpu_fill_nn_ops(bt_backend *be) {
    be->embed_fwd = cpu_embed_fwd;
    be->embed_bwd = cpu_embed_bwd;
    be->layernorm_fwd = cpu_layernorm_fwd;
    be->layernorm_bwd = cpu_layernorm_bwd;
    be->gelu_fwd = cpu_gelu_fwd;
    be->gelu_bwd = cpu_gelu_bwd;
    be->tanh_fwd = cpu_tanh_fwd;
    be->tanh_bwd = cpu_tanh_bwd;
    be->softmax_fwd = cpu_softmax_fwd;
    be->softmax_bwd = cpu_softmax_bwd;
    be->dropout = cpu_dropout;
    be->dropout_rows = cpu_dropout_rows;
    be->gather_rows = cpu_gather_rows;
    be->scatter_rows = cpu_scatter_rows;
    be->xent_fwd_bwd = cpu_xent_fwd_bwd;
}
