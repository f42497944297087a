/* --perf mode of the conformance suite: times every math op of a backend at
 * the largest shape the suite checks (and GEMM at the shapes of a BERT-mini
 * training step) and prints ms per call and GFLOP/s (gemm) or GB/s (the
 * memory-bound ops: bytes read + written once). Numbers only; nothing is
 * checked here. */
#include "ops.h"

#include "backends/row_links.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------- device tensors for one op ---------------- */

enum { MAX_BUFS = 8, LINKS = -1 /* run_case: the segments of the tensor before */ };

typedef struct {
    bt_backend *be;
    bt_buffer *bufs[MAX_BUFS];
    int n;
    bool failed;
} pool;

/* n floats uniform in [-1, 1) (or ints in [0, int_hi) when int_hi > 0). */
static bt_ptr dev_tensor(pool *p, size_t n, int int_hi) {
    bt_ptr z = {NULL, 0};
    if (p->failed || p->n == MAX_BUFS) return z;
    bt_buffer *b = p->be->alloc(p->be, n ? n * 4 : 4);
    if (!b) {
        p->failed = true;
        return z;
    }
    p->bufs[p->n++] = b;
    uint32_t *h = malloc(n ? n * 4 : 4);
    if (!h) exit(2);
    for (size_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)ref_next(&g_input_rng);
        if (int_hi > 0) {
            h[i] = r % (uint32_t)int_hi;
        } else {
            float f = (float)(r >> 8) * (2.0f / 16777216.0f) - 1.0f;
            memcpy(h + i, &f, 4);
        }
    }
    p->be->upload(p->be, (bt_ptr){b, 0}, h, n * 4);
    free(h);
    return (bt_ptr){b, 0};
}
/* The segments of idx (n ints on the device) as the model builds them
 * (bt_row_links with skip), 2n ints on the device. */
static bt_ptr dev_links(pool *p, bt_ptr idx, size_t n, int32_t skip) {
    bt_ptr z = {NULL, 0};
    if (p->failed || p->n == MAX_BUFS) return z;
    int32_t *h = malloc((n ? n : 1) * 3 * 4);
    if (!h) exit(2);
    p->be->download(p->be, h, idx, n * 4);
    bt_row_links_work work = {0};
    if (bt_row_links(h, (int)n, skip, h + n, &work)) exit(2);
    bt_row_links_free(&work);
    bt_buffer *b = p->be->alloc(p->be, n ? 2 * n * 4 : 4);
    if (!b) {
        p->failed = true;
        free(h);
        return z;
    }
    p->bufs[p->n++] = b;
    p->be->upload(p->be, (bt_ptr){b, 0}, h + n, 2 * n * 4);
    free(h);
    return (bt_ptr){b, 0};
}
static bt_ptr dev_f(pool *p, size_t n) { return dev_tensor(p, n, 0); }
static bt_ptr dev_i(pool *p, size_t n, int hi) { return dev_tensor(p, n, hi); }

static void pool_free(pool *p) {
    for (int i = 0; i < p->n; i++) p->be->free(p->be, p->bufs[i]);
    p->n = 0;
}

/* ---------------- timing ---------------- */

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One op call with its tensors. */
typedef struct perf_case perf_case;
struct perf_case {
    const char *op;
    char shape[64];
    double work; /* flops (gemm) or bytes moved */
    bool flops;
    bt_ptr t[MAX_BUFS];
    int i[8];
    size_t n;
    void (*call)(bt_backend *be, perf_case *c);
};

/* Seconds per call: one warm-up call (kernel compilation), then batches of
 * doubling size until one takes >= 0.25 s, synchronizing after each batch. */
static double time_case(bt_backend *be, perf_case *c) {
    c->call(be, c);
    be->sync(be);
    for (int reps = 1;; reps *= 2) {
        double t0 = now_s();
        for (int r = 0; r < reps; r++) c->call(be, c);
        be->sync(be);
        double dt = now_s() - t0;
        if (dt >= 0.25 || reps >= 1 << 16) return dt / reps;
    }
}

static void report(bt_backend *be, perf_case *c) {
    double s = time_case(be, c);
    printf("%-14s %-42s %-12s %10.3f ms %9.2f %s\n", c->op, c->shape, g_backend_name, s * 1e3,
           c->work / s * 1e-9, c->flops ? "GFLOP/s" : "GB/s");
    fflush(stdout);
}

/* ---------------- the ops ---------------- */

static void call_gemm(bt_backend *be, perf_case *c) {
    int *g = c->i; /* ta tb m n k batch */
    int lda = g[0] ? g[2] : g[4], ldb = g[1] ? g[4] : g[3];
    be->gemm(be, g[0], g[1], g[2], g[3], g[4], 1.0f, c->t[0], lda, (long)g[2] * g[4], c->t[1], ldb,
             (long)g[4] * g[3], 0.0f, c->t[2], g[3], (long)g[2] * g[3], g[5]);
}
static void call_fill(bt_backend *be, perf_case *c) { be->fill(be, c->t[0], 0.5f, c->n); }
static void call_add(bt_backend *be, perf_case *c) { be->add(be, c->t[2], c->t[0], c->t[1], c->n); }
static void call_scale(bt_backend *be, perf_case *c) { be->scale(be, c->t[0], 1.0f, c->n); }
static void call_axpy(bt_backend *be, perf_case *c) { be->axpy(be, c->t[0], 1e-3f, c->t[1], c->n); }
static void call_bias_add(bt_backend *be, perf_case *c) {
    be->bias_add(be, c->t[0], c->t[1], c->i[0], c->i[1], BT_F32, BT_NO_PTR, true);
}
static void call_bias_grad(bt_backend *be, perf_case *c) {
    be->bias_grad(be, c->t[1], c->t[0], c->i[0], c->i[1], BT_F32, BT_F32);
}
static void call_embed_fwd(bt_backend *be, perf_case *c) {
    be->embed_fwd(be, c->t[0], c->t[1], c->t[2], c->t[3], c->t[4], c->t[5], c->i[0], c->i[1],
                  c->i[2]);
}
/* t: dout, ids, ids' links (pad id 0), type_ids, dwte, dwpe, dwtt */
static void call_embed_bwd(bt_backend *be, perf_case *c) {
    be->embed_bwd(be, c->t[4], c->t[5], c->t[6], c->t[0], c->t[1], c->t[2], c->t[3], c->i[0],
                  c->i[1], c->i[2], c->i[3], c->i[4], 0);
}
static void call_ln_fwd(bt_backend *be, perf_case *c) {
    be->layernorm_fwd(be, c->t[1], c->t[2], c->t[3], c->t[0], c->t[4], c->t[5], c->i[0], c->i[1],
                      1e-12f, BT_F32);
}
static void call_ln_bwd(bt_backend *be, perf_case *c) {
    /* t: x, dout, mean, rstd, gamma, dgamma, dbeta, dx */
    be->layernorm_bwd(be, c->t[7], c->t[5], c->t[6], c->t[1], BT_NO_PTR, c->t[0], c->t[2], c->t[3],
                      c->t[4], c->i[0], c->i[1],
                      (bt_ln_bwd_types){BT_F32, BT_F32, BT_F32, BT_F32, BT_F32}, NULL);
}
static void call_gelu_fwd(bt_backend *be, perf_case *c) { be->gelu_fwd(be, c->t[1], c->t[0], c->n); }
static void call_gelu_bwd(bt_backend *be, perf_case *c) {
    be->gelu_bwd(be, c->t[2], c->t[1], c->t[0], c->n);
}
static void call_tanh_fwd(bt_backend *be, perf_case *c) {
    be->tanh_fwd(be, c->t[1], c->t[0], c->n, BT_F32);
}
static void call_tanh_bwd(bt_backend *be, perf_case *c) {
    be->tanh_bwd(be, c->t[2], c->t[1], c->t[0], c->n, BT_F32);
}
static void call_sm_fwd(bt_backend *be, perf_case *c) {
    be->softmax_fwd(be, c->t[1], c->t[0], c->t[2], c->i[0], c->i[1], c->i[2], 0.125f);
}
static void call_sm_bwd(bt_backend *be, perf_case *c) {
    be->softmax_bwd(be, c->t[2], c->t[1], c->t[0], c->i[0] * c->i[1] * c->i[2], c->i[2], 0.125f);
}
static void call_dropout(bt_backend *be, perf_case *c) {
    be->dropout(be, c->t[1], c->t[0], c->n, c->n / 2, 0, 0.1f, (bt_rng_key){42, 7}, BT_F32,
                BT_NO_PTR, BT_F32);
}
/* t: x (80 rows of 768), idx (into 512 rows) */
static void call_dropout_rows(bt_backend *be, perf_case *c) {
    be->dropout_rows(be, c->t[0], c->t[1], c->i[0], c->i[1], 128u * c->i[1], 0, 0.1f,
                     (bt_rng_key){42, 7});
}
static void call_gather(bt_backend *be, perf_case *c) {
    be->gather_rows(be, c->t[1], c->t[0], c->t[2], c->i[0], c->i[1]);
}
/* t: dst, src, idx, idx's links */
static void call_scatter(bt_backend *be, perf_case *c) {
    be->scatter_rows(be, c->t[0], c->t[1], c->t[2], c->t[3], c->i[0], c->i[1]);
}
static void call_xent(bt_backend *be, perf_case *c) {
    /* t: logits, labels, loss, correct, log_z, dlogits */
    be->xent_fwd_bwd(be, c->t[5], c->t[2], c->t[3], c->t[4], c->t[0], c->t[1], c->i[0], c->i[1],
                     0.01f, 1e-4f, BT_F32, BT_NO_PTR, BT_F32);
}
static void call_sum(bt_backend *be, perf_case *c) { (void)be->sum(be, c->t[0], c->n); }
static void call_sumsq(bt_backend *be, perf_case *c) { (void)be->sumsq(be, c->t[0], c->n); }
static void call_finite(bt_backend *be, perf_case *c) { (void)be->all_finite(be, c->t[0], c->n); }
static void call_adamw(bt_backend *be, perf_case *c) {
    be->adamw_step(be, c->t[0], c->t[1], c->t[2], c->t[3], c->n, 1e-6f, 0.9f, 0.999f, 1e-6f, 0.01f,
                   0.5f, 0.5f);
}
static void call_lamb(bt_backend *be, perf_case *c) {
    be->lamb_update(be, c->t[4], c->t[0], c->t[1], c->t[2], c->t[3], c->n, 0.9f, 0.999f, 1e-6f,
                    0.01f, 0.5f, 0.5f);
}
static void call_cast(bt_backend *be, perf_case *c) {
    be->cast(be, c->t[1], BT_BF16, c->t[0], BT_F32, c->n);
}
static void call_round16(bt_backend *be, perf_case *c) {
    be->round16(be, c->t[0], BT_BF16, c->n);
}

/* ---- the fused ops, and the unfused ops each replaces (same tensors) ---- */
static const bt_rng_key perf_key = {7, 11};
static void call_bias_gelu_fwd(bt_backend *be, perf_case *c) {
    be->bias_gelu_fwd(be, c->t[1], c->t[0], c->t[2], c->i[0], c->i[1], BT_F32, BT_NO_PTR,
                      BT_NO_PTR, true);
}
static void call_bias_gelu_fwd_unfused(bt_backend *be, perf_case *c) {
    be->bias_add(be, c->t[0], c->t[2], c->i[0], c->i[1], BT_F32, BT_NO_PTR, true);
    be->gelu_fwd(be, c->t[1], c->t[0], (size_t)c->i[0] * c->i[1]);
}
static void call_bias_gelu_bwd(bt_backend *be, perf_case *c) {
    be->bias_gelu_bwd(be, c->t[0], c->t[2], c->t[0], c->t[1], c->i[0], c->i[1], BT_F32, BT_F32,
                      BT_F32, BT_NO_PTR, true);
}
static void call_bias_gelu_bwd_unfused(bt_backend *be, perf_case *c) {
    be->gelu_bwd(be, c->t[0], c->t[0], c->t[1], (size_t)c->i[0] * c->i[1]);
    be->bias_grad(be, c->t[2], c->t[0], c->i[0], c->i[1], BT_F32, BT_F32);
}
/* t: y, bias, resid, out, scratch, ln out, mean, rstd; gamma = bias, beta = bias */
static void call_join(bt_backend *be, perf_case *c) {
    const size_t per = (size_t)c->i[1] * 128;
    if (c->i[2])
        be->residual_layernorm_fwd(be, c->t[3], c->t[5], c->t[6], c->t[7], c->t[0], c->t[1],
                                   c->t[2], c->t[1], c->t[1], c->i[0], c->i[1], 1e-12f, BT_F32,
                                   per, 0, 0.1f, perf_key, BT_NO_PTR, BT_NO_PTR, true, BT_F32,
                                   true);
    else
        be->bias_dropout_add(be, c->t[3], c->t[0], c->t[1], c->t[2], c->i[0], c->i[1], BT_F32,
                             per, 0, 0.1f, perf_key);
}
static void call_join_unfused(bt_backend *be, perf_case *c) {
    const size_t n = (size_t)c->i[0] * c->i[1], per = (size_t)c->i[1] * 128;
    /* scratch: y's stand-in */
    be->bias_add(be, c->t[4], c->t[1], c->i[0], c->i[1], BT_F32, BT_NO_PTR, true);
    be->dropout(be, c->t[4], c->t[4], n, per, 0, 0.1f, perf_key, BT_F32, BT_NO_PTR, BT_F32);
    be->add(be, c->t[3], c->t[4], c->t[2], n);
    if (c->i[2])
        be->layernorm_fwd(be, c->t[5], c->t[6], c->t[7], c->t[3], c->t[1], c->t[1], c->i[0],
                          c->i[1], 1e-12f, BT_F32);
}
/* t: a (out, in place), b, scratch (the unfused add's), as the embeddings' backward */
static void call_add_dropout(bt_backend *be, perf_case *c) {
    const size_t n = (size_t)c->i[0] * c->i[1], per = (size_t)c->i[1] * 128;
    be->add_dropout(be, c->t[0], c->t[0], c->t[1], BT_F32, n, per, 0, 0.1f, perf_key, BT_F32);
}
static void call_add_dropout_unfused(bt_backend *be, perf_case *c) {
    const size_t n = (size_t)c->i[0] * c->i[1], per = (size_t)c->i[1] * 128;
    be->add(be, c->t[0], c->t[0], c->t[1], n);
    be->dropout(be, c->t[0], c->t[0], n, per, 0, 0.1f, perf_key, BT_F32, BT_NO_PTR, BT_F32);
}
/* t: scores, probs, dropped, mask (i: B, H, T) */
static void call_softmax_dropout(bt_backend *be, perf_case *c) {
    be->softmax_dropout_fwd(be, c->t[2], c->t[1], c->t[0], c->t[3], c->i[0], c->i[1], c->i[2],
                            0.125f, BT_F32, 0, 0.1f, perf_key, BT_NO_PTR, BT_NO_PTR, true);
}
static void call_softmax_dropout_unfused(bt_backend *be, perf_case *c) {
    const size_t per = (size_t)c->i[1] * c->i[2] * c->i[2];
    be->softmax_fwd(be, c->t[1], c->t[0], c->t[3], c->i[0], c->i[1], c->i[2], 0.125f);
    be->dropout(be, c->t[2], c->t[1], per * c->i[0], per, 0, 0.1f, perf_key, BT_F32, BT_NO_PTR,
                BT_F32);
}
static void call_dropout_softmax(bt_backend *be, perf_case *c) {
    be->dropout_softmax_bwd(be, c->t[2], c->t[0], c->t[1], c->i[0], c->i[1], c->i[2], 0.125f,
                            BT_F32, 0, 0.1f, perf_key, BT_F32, BT_NO_PTR, true);
}
static void call_dropout_softmax_unfused(bt_backend *be, perf_case *c) {
    const size_t per = (size_t)c->i[1] * c->i[2] * c->i[2];
    be->dropout(be, c->t[2], c->t[0], per * c->i[0], per, 0, 0.1f, perf_key, BT_F32, BT_NO_PTR,
                BT_F32);
    be->softmax_bwd(be, c->t[2], c->t[2], c->t[1], c->i[0] * c->i[1] * c->i[2], c->i[2], 0.125f);
}

/* Allocate the case's tensors (sizes in elements; int_hi > 0: int tensors)
 * and time it; skipped under --op for other ops. */
static void run_case(bt_backend *be, perf_case c, const size_t *sizes, const int *int_hi, int nt) {
    if (!want_op(c.op)) return;
    pool p = {.be = be};
    /* int_hi: ints below it; LINKS: the segments of tensor i - 1 (its sizes[i - 1] ints) */
    for (int i = 0; i < nt; i++)
        c.t[i] = !int_hi || !int_hi[i] ? dev_f(&p, sizes[i])
                 : int_hi[i] == LINKS  ? dev_links(&p, c.t[i - 1], sizes[i - 1], c.i[7])
                                       : dev_i(&p, sizes[i], int_hi[i]);
    if (p.failed)
        printf("%-14s %-42s %-12s alloc failed\n", c.op, c.shape, g_backend_name);
    else
        report(be, &c);
    pool_free(&p);
}

static void gemm_perf(bt_backend *be, const char *what, bool ta, bool tb, int m, int n, int k,
                      int batch) {
    perf_case c = {.op = "gemm", .flops = true, .call = call_gemm,
                   .work = 2.0 * m * n * k * batch, .i = {ta, tb, m, n, k, batch}};
    snprintf(c.shape, sizeof c.shape, "%dx%dx%d %c%c x%d %s", m, n, k, ta ? 'T' : 'N',
             tb ? 'T' : 'N', batch, what);
    size_t sz[3] = {(size_t)m * k * batch, (size_t)k * n * batch, (size_t)m * n * batch};
    run_case(be, c, sz, NULL, 3);
}

/* t: ctx, lse, qkv, key_mask (i: B, NH, T, D) */
static void call_attention_fwd(bt_backend *be, perf_case *c) {
    be->attention_fwd(be, c->t[0], c->t[1], c->t[2], BT_F32, c->t[3], c->i[0], c->i[1], c->i[2],
                      c->i[3], 0.125f, 0, 0.1f, perf_key);
}
/* t: dqkv, delta, dctx, ctx, lse, qkv, key_mask */
static void call_attention_bwd(bt_backend *be, perf_case *c) {
    be->attention_bwd(be, c->t[0], c->t[1], c->t[2], c->t[3], BT_F32, c->t[4], c->t[5], BT_F32,
                      c->t[6], c->i[0], c->i[1], c->i[2], c->i[3], 0.125f, 0, 0.1f, perf_key);
}

/* Fused attention at BERT-mini's training shape (B16 T128, 4 heads of 64):
 * GFLOP/s of the products it computes (forward 2, backward 7: it recomputes
 * the scores, and dP for each of its two kernels), as the profiler counts. */
static void attention_perf(bt_backend *be) {
    const int B = 16, NH = 4, T = 128, D = 64;
    const size_t N = (size_t)B * T, H = (size_t)NH * D, R = (size_t)B * NH * T;
    const double pair = 2.0 * B * NH * T * T * D;
    perf_case c = {.op = "attention_fwd", .work = 2 * pair, .flops = true, .i = {B, NH, T, D},
                   .call = call_attention_fwd};
    snprintf(c.shape, sizeof c.shape, "B16 NH4 T128 D64 p=0.1");
    run_case(be, c, (size_t[]){N * H, R, N * 3 * H, N}, (int[]){0, 0, 0, 2}, 4);
    c = (perf_case){.op = "attention_bwd", .work = 7 * pair, .flops = true, .i = {B, NH, T, D},
                    .call = call_attention_bwd};
    snprintf(c.shape, sizeof c.shape, "B16 NH4 T128 D64 p=0.1");
    run_case(be, c, (size_t[]){N * 3 * H, R, N * H, N * H, R, N * 3 * H, N},
             (int[]){0, 0, 0, 0, 0, 0, 2}, 7);
}

/* Each fused op beside the unfused ops it replaces, at BERT-mini's training
 * shapes (B16 T128: 2048 tokens, H256, I1024, 4 heads): the bytes are the
 * fused op's, so the two GB/s figures compare as times. */
static void fused_perf(bt_backend *be) {
    perf_case c;
    const int N = 2048, H = 256, I = 1024;
    const size_t NI = (size_t)N * I, NH = (size_t)N * H, S = 16u * 4 * 128 * 128;
    for (int unf = 0; unf < 2; unf++) {
        const char *tag = unf ? " unfused" : "";
        c = (perf_case){.op = "bias_gelu_fwd", .work = 12.0 * NI, .i = {N, I},
                        .call = unf ? call_bias_gelu_fwd_unfused : call_bias_gelu_fwd};
        snprintf(c.shape, sizeof c.shape, "2048x1024%s", tag);
        run_case(be, c, (size_t[]){NI, NI, (size_t)I}, NULL, 3);
        c = (perf_case){.op = "bias_gelu_bwd", .work = 12.0 * NI, .i = {N, I},
                        .call = unf ? call_bias_gelu_bwd_unfused : call_bias_gelu_bwd};
        snprintf(c.shape, sizeof c.shape, "2048x1024 dx=dout%s", tag);
        run_case(be, c, (size_t[]){NI, NI, (size_t)I}, NULL, 3);
        for (int ln = 0; ln < 2; ln++) {
            c = (perf_case){.op = ln ? "residual_layernorm_fwd" : "bias_dropout_add",
                            .work = (ln ? 16.0 : 12.0) * NH, .i = {N, H, ln},
                            .call = unf ? call_join_unfused : call_join};
            snprintf(c.shape, sizeof c.shape, "2048x256 p=0.1%s", tag);
            run_case(be, c, (size_t[]){NH, (size_t)H, NH, NH, NH, NH, (size_t)N, (size_t)N}, NULL,
                     8);
        }
        c = (perf_case){.op = "add_dropout", .work = 12.0 * NH, .i = {N, H},
                        .call = unf ? call_add_dropout_unfused : call_add_dropout};
        snprintf(c.shape, sizeof c.shape, "2048x256 p=0.1 out=a%s", tag);
        run_case(be, c, (size_t[]){NH, NH}, NULL, 2);
        c = (perf_case){.op = "softmax_dropout_fwd", .work = 12.0 * S, .i = {16, 4, 128},
                        .call = unf ? call_softmax_dropout_unfused : call_softmax_dropout};
        snprintf(c.shape, sizeof c.shape, "B16 H4 T128 p=0.1%s", tag);
        run_case(be, c, (size_t[]){S, S, S, 16u * 128}, (int[]){0, 0, 0, 2}, 4);
        c = (perf_case){.op = "dropout_softmax_bwd", .work = 12.0 * S, .i = {16, 4, 128},
                        .call = unf ? call_dropout_softmax_unfused : call_dropout_softmax};
        snprintf(c.shape, sizeof c.shape, "B16 H4 T128 p=0.1%s", tag);
        run_case(be, c, (size_t[]){S, S, S}, NULL, 3);
    }
}


/* The GEMM cases: a BERT-mini training step's shapes, B=16 T=128 (N=2048
 * tokens), H=256, I=1024, 4 heads of 64, ~15% masked (M=320) over a 30522
 * vocabulary, and BERT-base's largest at batch 8. */
static void gemm_perfs(bt_backend *be) {
    gemm_perf(be, "qkv fwd", false, true, 2048, 768, 256, 1);
    gemm_perf(be, "ffn up fwd", false, true, 2048, 1024, 256, 1);
    gemm_perf(be, "ffn down fwd", false, true, 2048, 256, 1024, 1);
    gemm_perf(be, "ffn up dW", true, false, 1024, 256, 2048, 1);
    gemm_perf(be, "ffn up dX", false, false, 2048, 256, 1024, 1);
    gemm_perf(be, "QK^T heads", false, true, 128, 128, 64, 4);
    gemm_perf(be, "PV heads", false, false, 128, 64, 128, 4);
    gemm_perf(be, "mlm decoder fwd", false, true, 320, 30522, 256, 1);
    gemm_perf(be, "bert-base linear", false, false, 128, 768, 768, 1);
    /* BERT-base's largest GEMM at batch 8 x seq 128: the SGEMM ceiling that
     * scripts/bench-vs-torch.sh compares a training step with */
    gemm_perf(be, "base ffn up", false, true, 1024, 3072, 768, 1);
}

void run_perf(bt_backend *be) {
    reseed("perf", 0);
    printf("%-14s %-42s %-12s %13s %9s\n", "op", "shape", "backend", "time/call", "rate");
    gemm_perfs(be);

    const size_t N = 196608; /* the suite's largest vector */
    const int R = 256, C = 768;
    const size_t RC = (size_t)R * C;
    perf_case c;
#define CASE(name, fn, bytes_, shape_, ...)                                        \
    do {                                                                           \
        c = (perf_case){.op = name, .call = fn, .work = (double)(bytes_), __VA_ARGS__}; \
        snprintf(c.shape, sizeof c.shape, "%s", shape_);                           \
    } while (0)
    CASE("fill", call_fill, 4.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N}, NULL, 1);
    CASE("add", call_add, 12.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N, N, N}, NULL, 3);
    CASE("scale", call_scale, 8.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N}, NULL, 1);
    CASE("axpy", call_axpy, 12.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N, N}, NULL, 2);
    CASE("bias_add", call_bias_add, 8.0 * RC, "256x768", .i = {R, C});
    run_case(be, c, (size_t[]){RC, (size_t)C}, NULL, 2);
    CASE("bias_grad", call_bias_grad, 4.0 * RC, "256x768", .i = {R, C});
    run_case(be, c, (size_t[]){RC, (size_t)C}, NULL, 2);
    { /* B2 T128 C768 V4096 TV2 */
        int B = 2, T = 128, E = 768, V = 4096;
        size_t NT = (size_t)B * T, NE = NT * E;
        CASE("embed_fwd", call_embed_fwd, 16.0 * NE, "B2 T128 C768 V4096", .i = {B, T, E});
        run_case(be, c, (size_t[]){NE, NT, NT, (size_t)V * E, (size_t)T * E, 2u * E},
                 (int[]){0, V, 2, 0, 0, 0}, 6);
        CASE("embed_bwd", call_embed_bwd, 28.0 * NE, "B2 T128 C768 V4096",
             .i = {B, T, E, V, 2, 0, 0, 0});
        run_case(be, c, (size_t[]){NE, NT, 2 * NT, NT, (size_t)V * E, (size_t)T * E, 2u * E},
                 (int[]){0, V, LINKS, 2, 0, 0, 0}, 7);
    }
    CASE("layernorm_fwd", call_ln_fwd, 8.0 * RC, "256x768", .i = {R, C});
    run_case(be, c, (size_t[]){RC, RC, (size_t)R, (size_t)R, (size_t)C, (size_t)C}, NULL, 6);
    CASE("layernorm_bwd", call_ln_bwd, 16.0 * RC, "256x768", .i = {R, C});
    run_case(be, c, (size_t[]){RC, RC, (size_t)R, (size_t)R, (size_t)C, (size_t)C, (size_t)C, RC},
             NULL, 8);
    CASE("gelu_fwd", call_gelu_fwd, 8.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N, N}, NULL, 2);
    CASE("gelu_bwd", call_gelu_bwd, 12.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N, N, N}, NULL, 3);
    CASE("tanh_fwd", call_tanh_fwd, 8.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N, N}, NULL, 2);
    CASE("tanh_bwd", call_tanh_bwd, 12.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N, N, N}, NULL, 3);
    { /* B2 H12 T128 */
        size_t S = 2u * 12 * 128 * 128;
        CASE("softmax_fwd", call_sm_fwd, 8.0 * S, "B2 H12 T128", .i = {2, 12, 128});
        run_case(be, c, (size_t[]){S, S, 256}, (int[]){0, 0, 2}, 3);
        CASE("softmax_bwd", call_sm_bwd, 12.0 * S, "B2 H12 T128", .i = {2, 12, 128});
        run_case(be, c, (size_t[]){S, S, S}, NULL, 3);
    }
    CASE("dropout", call_dropout, 8.0 * N, "n=196608 per=98304 p=0.1", .n = N);
    run_case(be, c, (size_t[]){N, N}, NULL, 2);
    CASE("dropout_rows", call_dropout_rows, 8.0 * 80 * C, "80 of 512x768 p=0.1", .i = {80, C});
    run_case(be, c, (size_t[]){80u * C, 80}, (int[]){0, 512}, 2);
    CASE("gather_rows", call_gather, 8.0 * 80 * C, "80 of 512x768", .i = {80, C});
    run_case(be, c, (size_t[]){512u * C, 80u * C, 80}, (int[]){0, 0, 512}, 3);
    CASE("scatter_rows", call_scatter, 12.0 * 80 * C, "80 into 512x768", .i = {80, C, [7] = -1});
    run_case(be, c, (size_t[]){512u * C, 80u * C, 80, 160}, (int[]){0, 0, 512, LINKS}, 4);
    { /* 40 x 30522 */
        size_t X = 40u * 30522;
        CASE("xent_fwd_bwd", call_xent, 8.0 * X, "40x30522", .i = {40, 30522});
        run_case(be, c, (size_t[]){X, 40, 40, 40, 40, X}, (int[]){0, 30522, 0, 0, 0, 0}, 6);
    }
    CASE("sum", call_sum, 4.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N}, NULL, 1);
    CASE("sumsq", call_sumsq, 4.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N}, NULL, 1);
    CASE("all_finite", call_finite, 4.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N}, NULL, 1);
    CASE("adamw_step", call_adamw, 28.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N, N, N, N}, NULL, 4);
    CASE("lamb_update", call_lamb, 28.0 * N, "n=196608", .n = N);
    run_case(be, c, (size_t[]){N, N, N, N, N}, NULL, 5);
    CASE("cast", call_cast, 6.0 * N, "n=196608 f32->bf16", .n = N);
    CASE("round16", call_round16, 8.0 * N, "n=196608 bf16", .n = N);
    run_case(be, c, (size_t[]){N, N}, NULL, 2);
#undef CASE
    fused_perf(be);
    attention_perf(be);
}
