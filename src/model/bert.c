/* BERT forward and backward as backend ops (llm.c style: one short function
 * per block). Shapes: N = B*T token rows, M = masked rows, H hidden, I
 * intermediate, NH heads of size D, V vocabulary. Post-LN, exactly as Hugging
 * Face BertForPreTraining, or (model.norm "pre") Pre-LN: x + f(LN(x)) per block
 * and one LayerNorm after the last layer. */
#include "bert_internal.h"
#include "util/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* out (rows, out_f) = in (rows, in_f) @ W^T, the bias left to a fused op.  W: (out_f, in_f) */
static void linear_fwd_nobias(bert_model *m, bt_ptr out, bt_ptr in, size_t w, int rows,
                              int in_f, int out_f) {
    mm(m, false, true, rows, out_f, in_f, 1.0f, in, in_f, 0, par(m, w), in_f, 0, 0.0f, out,
       out_f, 0, 1);
}

/* out (rows, out_f) = in (rows, in_f) @ W^T + b,  W: (out_f, in_f): b written
 * into every row, then the GEMM adds onto it (beta 1), so no pass of its own
 * adds the bias (OpenBLAS zero-fills C for beta 0 anyway). The products
 * accumulate onto b: not the bits of a bias_add after (DESIGN-NOTES 24). */
static void linear_fwd(bert_model *m, bt_ptr out, bt_ptr in, size_t w, size_t b, int rows,
                       int in_f, int out_f) {
    if (rows == 0) return;
    m->be->gather_rows(m->be, out, par(m, b), ints(m, m->act->zero_rows), rows, out_f);
    mm(m, false, true, rows, out_f, in_f, 1.0f, in, in_f, 0, par(m, w), in_f, 0, 1.0f, out, out_f,
       0, 1);
    store16_ptr(m, out, (size_t)rows * out_f);
}

#define NO_BIAS ((size_t)-1) /* linear_bwd: the bias gradient comes from a fused op */

/* dW += dout^T @ in;  db += sum_rows dout (unless b is NO_BIAS);  din = dout @ W
 * (skipped if din.buf NULL) */
static void linear_bwd(bert_model *m, bt_ptr din, size_t w, size_t b, bt_ptr dout, bt_ptr in,
                       int rows, int in_f, int out_f) {
    if (rows == 0) return;
    bt_backend *be = m->be;
    mm(m, true, false, out_f, in_f, rows, 1.0f, dout, out_f, 0, in, in_f, 0, 1.0f, grd(m, w),
             in_f, 0, 1);
    if (b != NO_BIAS) be->bias_grad(be, grd(m, b), dout, rows, out_f);
    if (din.buf) {
        mm(m, false, false, rows, in_f, out_f, 1.0f, dout, out_f, 0, par(m, w), in_f, 0, 0.0f,
                 din, in_f, 0, 1);
        store16_ptr(m, din, (size_t)rows * in_f);
    }
}

/* LayerNorm forward over rows of cols, the output stored as an activation. */
static void ln_fwd(bert_model *m, bt_ptr out, bt_ptr mean, bt_ptr rstd, bt_ptr in, bt_ptr w,
                   bt_ptr b, int rows, int cols, float eps) {
    m->be->layernorm_fwd(m->be, out, mean, rstd, in, w, b, rows, cols, eps);
    store16_ptr(m, out, (size_t)rows * cols);
}

/* LayerNorm backward: dx (stored as an activation gradient), dw and db += . */
static void ln_bwd(bert_model *m, bt_ptr dx, bt_ptr dw, bt_ptr db, bt_ptr dy, bt_ptr x,
                   bt_ptr mean, bt_ptr rstd, bt_ptr w, int rows, int cols) {
    m->be->layernorm_bwd(m->be, dx, dw, db, dy, x, mean, rstd, w, rows, cols);
    store16_ptr(m, dx, (size_t)rows * cols);
}

static int compare_i32(const void *x, const void *y) {
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* Where token row `row` is among the S sorted top rows. */
static int32_t top_index(const int32_t *rows, int S, int32_t row) {
    const int32_t *at = bsearch(&row, rows, (size_t)S, sizeof *rows, compare_i32);
    return (int32_t)(at - rows);
}

/* The top layer's rows into host (the batch's int32 staging): the token rows
 * the heads read (masked tokens, [CLS] when nsp), in order and once each, and
 * each head's row among them. Returns their count S. */
static int plan_top_rows(const struct bert_act_layout *a, const bert_batch *bt, bool nsp,
                         int32_t *host) {
    int32_t *rows = host + a->top_rows;
    int n = 0, S = 0;
    for (int i = 0; i < bt->n_masked; i++) rows[n++] = bt->mlm_positions[i];
    for (int b = 0; nsp && b < bt->B; b++) rows[n++] = b * bt->T;
    qsort(rows, (size_t)n, sizeof *rows, compare_i32);
    for (int i = 0; i < n; i++)
        if (S == 0 || rows[i] != rows[S - 1]) rows[S++] = rows[i];
    for (int i = 0; i < bt->n_masked; i++)
        host[a->top_mlm_pos + i] = top_index(rows, S, bt->mlm_positions[i]);
    for (int b = 0; nsp && b < bt->B; b++) host[a->top_cls + b] = top_index(rows, S, b * bt->T);
    return S;
}

/* The batch's int32 inputs to the device; with a top layer (m->top_layer),
 * its rows, which set m->n_top (none: no top layer). */
static void upload_batch(bert_model *m, const bert_batch *bt) {
    const struct bert_act_layout *a = m->act;
    int32_t *host = calloc(a->ints_batch, sizeof *host);
    if (!host) {
        fprintf(stderr, "bertrain: out of host memory staging a batch\n");
        exit(1);
    }
    size_t N = (size_t)bt->B * bt->T;
    memcpy(host + a->ids, bt->input_ids, N * 4);
    memcpy(host + a->types, bt->token_type_ids, N * 4);
    memcpy(host + a->mask, bt->attention_mask, N * 4);
    if (bt->n_masked > 0) {
        memcpy(host + a->mlm_pos, bt->mlm_positions, (size_t)bt->n_masked * 4);
        memcpy(host + a->mlm_labels, bt->mlm_labels, (size_t)bt->n_masked * 4);
    }
    for (int b = 0; b < bt->B; b++) {
        host[a->nsp_labels + b] = bt->nsp_labels ? bt->nsp_labels[b] : -1;
        host[a->cls_idx + b] = b * bt->T;
    }
    m->n_top = m->top_layer >= 0 ? plan_top_rows(a, bt, m->cfg.nsp && bt->nsp_labels, host) : 0;
    if (m->n_top == 0) m->top_layer = -1;
    m->be->upload(m->be, ints(m, 0), host, a->ints_batch * 4);
    free(host);
}


/* Geometry shared by a layer's blocks. */
typedef struct {
    int N, H, I;
    float p; /* hidden dropout (0 outside training) */
    size_t per_sample;
    bool top;    /* the top layer: after attention, N is its S rows, not all B*T */
    size_t all;  /* B*T*H: every row's values */
} layer_dims;

/* Layer l's geometry in this pass. */
static layer_dims dims_of(const bert_model *m, int l, const bert_batch *bt,
                          const bert_pass *pass) {
    const bool top = l == m->top_layer;
    layer_dims d = {top ? m->n_top : bt->B * bt->T, m->cfg.hidden_size,
                    m->cfg.intermediate_size, pass->train ? m->cfg.hidden_dropout_prob : 0.0f,
                    (size_t)bt->T * m->cfg.hidden_size, top,
                    (size_t)bt->B * bt->T * m->cfg.hidden_size};
    return d;
}

/* dropout(x) of the top layer's rows x (S, H) with the masks they would have
 * among all B*T rows: through dI (free whenever a branch's dropout runs), the
 * rows at their places, the dropout over all rows, and the rows back. */
static void top_dropout(bert_model *m, size_t x, const bert_batch *bt, layer_dims d,
                        bt_rng_key key) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    be->fill(be, act(m, a->dI), 0.0f, d.all);
    be->scatter_rows(be, act(m, a->dI), act(m, x), ints(m, a->top_rows), d.N, d.H);
    be->dropout(be, act(m, a->dI), act(m, a->dI), d.all, d.per_sample, bt->first_sample, d.p, key);
    be->gather_rows(be, act(m, x), act(m, a->dI), ints(m, a->top_rows), d.N, d.H);
}

/* Admin's residual scale at the join `site` of layer l (1 but for Admin). */
static float omega_at(const bert_model *m, int l, int site) {
    return m->cfg.norm == BERT_NORM_ADMIN ? m->cfg.admin_omega[2 * l + (site == SITE_FFN_OUT)]
                                          : 1.0f;
}

/* Admin profiling at a join: omega_i = sqrt(1 + the variances of the branches
 * before it), then this branch's variance (dH, all N x H values) joins the sum. */
static void admin_measure(bert_model *m, int l, int site, layer_dims d) {
    bt_backend *be = m->be;
    const size_t n = (size_t)d.N * d.H;
    const int i = 2 * l + (site == SITE_FFN_OUT);
    double mean = be->sum(be, act(m, m->act->dH), n) / (double)n;
    double var = be->sumsq(be, act(m, m->act->dH), n) / (double)n - mean * mean;
    if (i == 0) m->admin_variance_sum = 1.0; /* the embeddings: unit variance after LN */
    m->cfg.admin_omega[i] = (float)sqrt(m->admin_variance_sum);
    m->admin_variance_sum += var;
}

/* out = omega * resid + dropout(dH): a residual branch's output (in dH, its
 * bias added) joins the stream; omega = 1 (a plain add) but for Admin. */
static void branch_out(bert_model *m, int l, int site, size_t out, size_t resid,
                       const bert_batch *bt, const bert_pass *pass, layer_dims d) {
    bt_backend *be = m->be;
    const size_t dH = m->act->dH, n = (size_t)d.N * d.H;
    if (pass->admin_profile) admin_measure(m, l, site, d);
    if (d.p > 0.0f && d.top)
        top_dropout(m, dH, bt, d, dropout_key(pass, l, site));
    else if (d.p > 0.0f)
        be->dropout(be, act(m, dH), act(m, dH), n, d.per_sample, bt->first_sample, d.p,
                    dropout_key(pass, l, site));
    const float omega = omega_at(m, l, site);
    if (omega == 1.0f) {
        be->add(be, act(m, out), act(m, dH), act(m, resid), n);
    } else {
        be->copy(be, act(m, out), act(m, dH), n * 4);
        be->axpy(be, act(m, out), omega, act(m, resid), n);
    }
    store16(m, out, n);
}

/* A LayerNorm right after a residual join: its output, saved statistics and
 * parameters. */
typedef struct {
    size_t out, mean, rstd, w, b;
} join_norm;

/* out = omega * resid + dropout(dH + bias), then (ln not NULL) ln->out =
 * LayerNorm(out): a branch's output (dH, before its bias) joins the stream.
 * One fused op where it can (omega = 1, no Admin profiling, not the top
 * layer, whose rows are not the fused ops' rows), else the ops one by one. */
static void join_fwd(bert_model *m, int l, int site, size_t out, size_t resid, size_t bias,
                     const join_norm *ln, const bert_batch *bt, const bert_pass *pass,
                     layer_dims d) {
    bt_backend *be = m->be;
    const size_t dH = m->act->dH, n = (size_t)d.N * d.H;
    const float eps = m->cfg.layer_norm_eps;
    if (fused(m, BERT_FUSE_JOIN, true) && omega_at(m, l, site) == 1.0f && !pass->admin_profile &&
        !d.top) {
        const bt_rng_key key = dropout_key(pass, l, site);
        if (ln)
            be->residual_layernorm_fwd(be, act(m, out), act(m, ln->out), act(m, ln->mean),
                                       act(m, ln->rstd), act(m, dH), par(m, bias), act(m, resid),
                                       par(m, ln->w), par(m, ln->b), d.N, d.H, eps, d.per_sample,
                                       bt->first_sample, d.p, key);
        else
            be->bias_dropout_add(be, act(m, out), act(m, dH), par(m, bias), act(m, resid), d.N, d.H,
                                 d.per_sample, bt->first_sample, d.p, key);
        store16(m, out, n);
        if (ln) store16(m, ln->out, n);
        return;
    }
    be->bias_add(be, act(m, dH), par(m, bias), d.N, d.H);
    store16(m, dH, n);
    branch_out(m, l, site, out, resid, bt, pass, d);
    if (ln)
        ln_fwd(m, act(m, ln->out), act(m, ln->mean), act(m, ln->rstd), act(m, out), par(m, ln->w),
               par(m, ln->b), d.N, d.H, eps);
}

/* dA = omega * dA + dH: the gradient of a residual join's input, through the
 * residual (dA holds d out) and the branch (dH). At the top layer's attention
 * join dA has its S rows and dH every row: the sum has every row. */
static void residual_grad(bert_model *m, int l, int site, layer_dims d) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const float omega = omega_at(m, l, site);
    const size_t n = (size_t)d.N * d.H;
    if (omega != 1.0f) be->scale(be, act(m, a->dA), omega, n);
    if (d.top && site == SITE_ATTN_OUT) {
        be->scatter_rows(be, act(m, a->dH), act(m, a->dA), ints(m, a->top_rows), d.N, d.H);
        be->copy(be, act(m, a->dA), act(m, a->dH), d.all * 4);
        store16(m, a->dA, d.all);
        return;
    }
    be->add(be, act(m, a->dA), act(m, a->dA), act(m, a->dH), n);
    store16(m, a->dA, n);
}

/* Attention block: res1 = resid + dropout(attention(in) Wo + bo), then
 * LayerNorm(res1) when ln is not NULL.  in, resid: (N, H); res1 and ln: the
 * top layer's S rows (of the heads) or all N */
static void attn_block_fwd(bert_model *m, int l, size_t in, size_t resid, const join_norm *ln,
                           const bert_batch *bt, const bert_pass *pass) {
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const bert_layer_views *w = &m->v.layer[l];
    const layer_dims d = dims_of(m, l, bt, pass);
    /* the projection (N, 3H) into dqkv, free during the forward: every row,
     * for the keys and values */
    linear_fwd(m, act(m, a->dqkv), act(m, in), w->qkv_w, w->qkv_b, bt->B * bt->T, d.H, 3 * d.H);
    bert_attention_fwd(m, l, bt, pass, a->dqkv);
    size_t ctx = la->ctx;
    if (d.top) { /* from here on, the heads' rows only (top_ctx kept for the backward) */
        m->be->gather_rows(m->be, act(m, a->top_ctx), act(m, ctx), ints(m, a->top_rows), d.N, d.H);
        m->be->gather_rows(m->be, act(m, a->top_x), act(m, resid), ints(m, a->top_rows), d.N, d.H);
        ctx = a->top_ctx;
        resid = a->top_x;
    }
    linear_fwd_nobias(m, act(m, a->dH), act(m, ctx), w->ao_w, d.N, d.H, d.H); /* dH: scratch */
    join_fwd(m, l, SITE_ATTN_OUT, la->res1, resid, w->ao_b, ln, bt, pass, d);
}

/* Feed-forward block: res2 = resid + dropout(gelu(in W1 + b1) W2 + b2), then
 * LayerNorm(res2) when ln is not NULL.  (N, H) */
static void ffn_block_fwd(bert_model *m, int l, size_t in, size_t resid, const join_norm *ln,
                          const bert_batch *bt, const bert_pass *pass) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const bert_layer_views *w = &m->v.layer[l];
    const layer_dims d = dims_of(m, l, bt, pass);
    const size_t NI = (size_t)d.N * d.I;
    if (fused(m, BERT_FUSE_GELU, true)) {
        linear_fwd_nobias(m, act(m, la->fc1), act(m, in), w->fc1_w, d.N, d.H, d.I);
        be->bias_gelu_fwd(be, act(m, la->gelu), act(m, la->fc1), par(m, w->fc1_b), d.N, d.I);
        store16(m, la->fc1, NI);
    } else { /* the ops bias_gelu_fwd replaces, for its bits */
        linear_fwd_nobias(m, act(m, la->fc1), act(m, in), w->fc1_w, d.N, d.H, d.I);
        be->bias_add(be, act(m, la->fc1), par(m, w->fc1_b), d.N, d.I);
        store16(m, la->fc1, NI);
        be->gelu_fwd(be, act(m, la->gelu), act(m, la->fc1), NI);
    }
    store16(m, la->gelu, NI);
    linear_fwd_nobias(m, act(m, a->dH), act(m, la->gelu), w->fc2_w, d.N, d.I, d.H);
    join_fwd(m, l, SITE_FFN_OUT, la->res2, resid, w->fc2_b, ln, bt, pass, d);
}

/* dH = the gradient reaching a residual branch through its output dropout:
 * dropout(dA) with the forward's mask. */
static void branch_grad(bert_model *m, int l, int site, const bert_batch *bt,
                        const bert_pass *pass, layer_dims d) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    if (d.p > 0.0f && !d.top) { /* straight from dA: no copy first */
        be->dropout(be, act(m, a->dH), act(m, a->dA), (size_t)d.N * d.H, d.per_sample,
                    bt->first_sample, d.p, dropout_key(pass, l, site));
        return;
    }
    be->copy(be, act(m, a->dH), act(m, a->dA), (size_t)d.N * d.H * 4);
    if (d.p > 0.0f) top_dropout(m, a->dH, bt, d, dropout_key(pass, l, site));
}

/* Backward of ffn_block_fwd's branch: dA holds d res2; dH gets d in (the
 * residual's share is the caller's). */
static void ffn_block_bwd(bert_model *m, int l, size_t in, const bert_batch *bt,
                          const bert_pass *pass) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const bert_layer_views *w = &m->v.layer[l];
    const layer_dims d = dims_of(m, l, bt, pass);
    branch_grad(m, l, SITE_FFN_OUT, bt, pass, d);
    linear_bwd(m, act(m, a->dI), w->fc2_w, w->fc2_b, act(m, a->dH), act(m, la->gelu), d.N, d.I,
               d.H);
    const bool fuse = fused(m, BERT_FUSE_GELU, false);
    if (fuse) /* dI = dI * gelu'(fc1) and the bias gradient in one pass */
        be->bias_gelu_bwd(be, act(m, a->dI), grd(m, w->fc1_b), act(m, a->dI), act(m, la->fc1), d.N,
                          d.I);
    else
        be->gelu_bwd(be, act(m, a->dI), act(m, a->dI), act(m, la->fc1), (size_t)d.N * d.I);
    store16(m, a->dI, (size_t)d.N * d.I);
    linear_bwd(m, act(m, a->dH), w->fc1_w, fuse ? NO_BIAS : w->fc1_b, act(m, a->dI), act(m, in),
               d.N, d.H, d.I);
}

/* Backward of attn_block_fwd's branch: dA holds d res1 (the top layer: at its
 * rows); dH gets d in (every row). */
static void attn_block_bwd(bert_model *m, int l, size_t in, const bert_batch *bt,
                           const bert_pass *pass) {
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const bert_layer_views *w = &m->v.layer[l];
    const layer_dims d = dims_of(m, l, bt, pass);
    branch_grad(m, l, SITE_ATTN_OUT, bt, pass, d);
    if (d.top) { /* d ctx at the heads' rows (into top_x), then at every row */
        bt_backend *be = m->be;
        linear_bwd(m, act(m, a->top_x), w->ao_w, w->ao_b, act(m, a->dH), act(m, a->top_ctx), d.N,
                   d.H, d.H);
        be->fill(be, act(m, a->dctx), 0.0f, d.all);
        be->scatter_rows(be, act(m, a->dctx), act(m, a->top_x), ints(m, a->top_rows), d.N, d.H);
    } else {
        linear_bwd(m, act(m, a->dctx), w->ao_w, w->ao_b, act(m, a->dH), act(m, la->ctx), d.N, d.H,
                   d.H);
    }
    bert_attention_bwd(m, l, bt, pass);
    linear_bwd(m, act(m, a->dH), w->qkv_w, w->qkv_b, act(m, a->dqkv), act(m, in), bt->B * bt->T,
               d.H, 3 * d.H);
}

/* One encoder layer, x_in (N, H) -> layer output (N, H); the top layer's
 * output has only the S rows the heads read (m->top_layer).
 * Post-LN: ln1 = LN1(x + attn(x)); ln2 = LN2(ln1 + ffn(ln1)), the output.
 * Admin:   as Post-LN with x and ln1 scaled by their omegas in the sums.
 * Pre-LN:  res1 = x + attn(LN1(x)); res2 = res1 + ffn(LN2(res1)), the output. */
static void layer_fwd(bert_model *m, int l, size_t x_in, const bert_batch *bt,
                      const bert_pass *pass) {
    const bert_layer_acts *la = &m->act->layer[l];
    const bert_layer_views *w = &m->v.layer[l];
    const int N = bt->B * bt->T, H = m->cfg.hidden_size;
    const float eps = m->cfg.layer_norm_eps;
    const join_norm norm1 = {la->ln1, la->mean1, la->rstd1, w->ln1_w, w->ln1_b},
                    norm2 = {la->ln2, la->mean2, la->rstd2, w->ln2_w, w->ln2_b};
    if (m->cfg.norm == BERT_NORM_PRE) {
        ln_fwd(m, act(m, la->ln1), act(m, la->mean1), act(m, la->rstd1), act(m, x_in),
               par(m, w->ln1_w), par(m, w->ln1_b), N, H, eps);
        attn_block_fwd(m, l, la->ln1, x_in, &norm2, bt, pass); /* res1, ln2 = LN2(res1) */
        ffn_block_fwd(m, l, la->ln2, la->res1, NULL, bt, pass);
    } else {
        attn_block_fwd(m, l, x_in, x_in, &norm1, bt, pass);   /* res1, ln1 = LN1(res1) */
        ffn_block_fwd(m, l, la->ln1, la->ln1, &norm2, bt, pass); /* res2, ln2 = LN2(res2) */
    }
}

/* Backward of layer_fwd: dA holds d(layer output); on return it holds d(x_in). */
static void layer_bwd(bert_model *m, int l, size_t x_in, const bert_batch *bt,
                      const bert_pass *pass) {
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const bert_layer_views *w = &m->v.layer[l];
    const layer_dims d = dims_of(m, l, bt, pass); /* d.N: the rows after attention */
    const int N = bt->B * bt->T, H = d.H;
    if (m->cfg.norm == BERT_NORM_PRE) {
        ffn_block_bwd(m, l, la->ln2, bt, pass);
        ln_bwd(m, act(m, a->dH), grd(m, w->ln2_w), grd(m, w->ln2_b), act(m, a->dH),
               act(m, la->res1), act(m, la->mean2), act(m, la->rstd2), par(m, w->ln2_w), d.N, H);
        residual_grad(m, l, SITE_FFN_OUT, d); /* d res1 */
        attn_block_bwd(m, l, la->ln1, bt, pass);
        ln_bwd(m, act(m, a->dH), grd(m, w->ln1_w), grd(m, w->ln1_b), act(m, a->dH), act(m, x_in),
               act(m, la->mean1), act(m, la->rstd1), par(m, w->ln1_w), N, H);
        residual_grad(m, l, SITE_ATTN_OUT, d); /* d x_in */
    } else {
        ln_bwd(m, act(m, a->dA), grd(m, w->ln2_w), grd(m, w->ln2_b), act(m, a->dA),
               act(m, la->res2), act(m, la->mean2), act(m, la->rstd2), par(m, w->ln2_w), d.N, H);
        ffn_block_bwd(m, l, la->ln1, bt, pass);
        residual_grad(m, l, SITE_FFN_OUT, d); /* d ln1 */
        ln_bwd(m, act(m, a->dA), grd(m, w->ln1_w), grd(m, w->ln1_b), act(m, a->dA),
               act(m, la->res1), act(m, la->mean1), act(m, la->rstd1), par(m, w->ln1_w), d.N, H);
        attn_block_bwd(m, l, x_in, bt, pass);
        residual_grad(m, l, SITE_ATTN_OUT, d); /* d x_in */
    }
}

/* The output of layer l (its input when l is the layer after). */
static size_t layer_output(const bert_model *m, int l) {
    return m->cfg.norm == BERT_NORM_PRE ? m->act->layer[l].res2 : m->act->layer[l].ln2;
}

static bool layer_skipped(const bert_pass *pass, int l) {
    return pass->layer_skip && pass->layer_skip[l];
}

/* The last layer before l that runs in this pass, or -1. */
static int layer_before(const bert_pass *pass, int l) {
    for (int k = l - 1; k >= 0; k--)
        if (!layer_skipped(pass, k)) return k;
    return -1;
}

/* The input of layer l: the output of the last layer before it that runs in
 * this pass (a skipped layer passes its input through), or the embeddings.
 * l = num_hidden_layers gives the encoder's output. With the 16-bit stash that
 * output is a copy in xin (the working set is the layer's own). */
static size_t layer_input(const bert_model *m, int l, const bert_pass *pass) {
    const int k = layer_before(pass, l);
    if (k < 0) return m->act->emb_out;
    return m->act->stash_per_layer ? m->act->xin : layer_output(m, k);
}

/* After layer l's forward: its output goes to xin, the next layer's input
 * (bert_act.c). */
static void stash_layer(bert_model *m, int l) { bert_act_stash_layer(m, layer_output(m, l)); }

/* Before layer l's backward: its saved activations and its input back from
 * the stash (bert_act.c). */
static void unstash_layer(bert_model *m, int l, const bert_pass *pass) {
    const int before = layer_before(pass, l);
    bert_act_unstash_layer(m, l, before, before >= 0 ? layer_output(m, before) : 0);
}

int bert_layerdrop_draw(const bert_config *cfg, uint64_t seed, uint64_t step,
                        unsigned char *skip) {
    int n = 0;
    for (int l = 0; l < cfg->num_hidden_layers; l++) {
        skip[l] = cfg->layerdrop > 0.0f &&
                  rng_uniform(seed, RNG_STREAM_LAYERDROP, (uint32_t)step, (uint32_t)l) <
                      cfg->layerdrop;
        n += skip[l];
    }
    return n;
}

void bert_admin_closed_form(bert_config *cfg) {
    const double n = 2.0 * cfg->num_hidden_layers;
    const float omega = (float)sqrt((n + 1.0) / log(n + 1.0) - 1.0);
    for (int i = 0; i < 2 * cfg->num_hidden_layers; i++) cfg->admin_omega[i] = omega;
}

void bert_admin_profile(bert_model *m, const bert_batch *bt) {
    bert_pass pass = {.train = false, .admin_profile = true};
    bert_stats st;
    bert_forward(m, bt, &pass, &st);
}

/* The rows of the encoder's output that the MLM head reads (int32 offsets):
 * among the top layer's rows, or among all. */
static size_t mlm_rows_of(const bert_model *m) {
    return m->top_layer >= 0 ? m->act->top_mlm_pos : m->act->mlm_pos;
}

/* The same for the NSP head's [CLS] rows. */
static size_t cls_rows_of(const bert_model *m) {
    return m->top_layer >= 0 ? m->act->top_cls : m->act->cls_idx;
}

/* MLM head at the M masked rows of hidden: dense -> GELU -> LayerNorm -> tied
 * decoder + bias, the loss and its gradient (into the logits). */
static void mlm_head_fwd(bert_model *m, const bert_batch *bt, const bert_pass *pass,
                         bert_stats *st, size_t hidden) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    const int H = m->cfg.hidden_size, V = m->cfg.vocab_size, M = bt->n_masked;
    const float eps = m->cfg.layer_norm_eps;
    be->gather_rows(be, act(m, a->hm), act(m, hidden), ints(m, mlm_rows_of(m)), M, H);
    linear_fwd(m, act(m, a->t1), act(m, a->hm), v->head_w, v->head_b, M, H, H);
    be->gelu_fwd(be, act(m, a->t2), act(m, a->t1), (size_t)M * H);
    store16(m, a->t2, (size_t)M * H);
    ln_fwd(m, act(m, a->t3), act(m, a->t3_mean), act(m, a->t3_rstd), act(m, a->t2),
           par(m, v->head_ln_w), par(m, v->head_ln_b), M, H, eps);
    linear_fwd(m, act(m, a->logits), act(m, a->t3), v->wte, v->dec_b, M, H, V);
    if (pass->mlm_logits_out)
        be->download(be, pass->mlm_logits_out, act(m, a->logits), (size_t)M * V * 4);
    be->xent_fwd_bwd(be, act(m, a->logits), act(m, a->mlm_loss), act(m, a->mlm_correct),
                     act(m, a->mlm_log_z), act(m, a->logits), ints(m, a->mlm_labels), M, V,
                     pass->mlm_grad_scale, m->cfg.z_loss);
    if (m->cfg.z_loss > 0.0f)
        st->mlm_log_z_sq = stat_sum(m, pass, BT_REDUCE_SUMSQ, act(m, a->mlm_log_z), (size_t)M,
                                    &st->ticket.log_z_sq);
    store16(m, a->logits, (size_t)M * V); /* now d loss / d logits */
    st->mlm_loss_sum = stat_sum(m, pass, BT_REDUCE_SUM, act(m, a->mlm_loss), (size_t)M,
                                &st->ticket.mlm_loss);
    st->mlm_correct = stat_sum(m, pass, BT_REDUCE_SUM, act(m, a->mlm_correct), (size_t)M,
                               &st->ticket.mlm_correct);
    st->n_masked = M;
}

/* NSP head on the [CLS] rows of hidden: pooler dense -> tanh -> 2-way
 * classifier, the loss and its gradient (into the logits). */
static void nsp_head_fwd(bert_model *m, const bert_batch *bt, const bert_pass *pass,
                         bert_stats *st, size_t hidden) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    const int B = bt->B, H = m->cfg.hidden_size;
    be->gather_rows(be, act(m, a->cls), act(m, hidden), ints(m, cls_rows_of(m)), B, H);
    linear_fwd(m, act(m, a->pool_pre), act(m, a->cls), v->pool_w, v->pool_b, B, H, H);
    be->tanh_fwd(be, act(m, a->pooled), act(m, a->pool_pre), (size_t)B * H);
    store16(m, a->pooled, (size_t)B * H);
    linear_fwd(m, act(m, a->nsp_logits), act(m, a->pooled), v->nsp_w, v->nsp_b, B, H, 2);
    if (pass->nsp_logits_out)
        be->download(be, pass->nsp_logits_out, act(m, a->nsp_logits), (size_t)B * 2 * 4);
    be->xent_fwd_bwd(be, act(m, a->nsp_logits), act(m, a->nsp_loss), act(m, a->nsp_correct),
                     act(m, a->nsp_log_z), act(m, a->nsp_logits), ints(m, a->nsp_labels), B, 2,
                     pass->nsp_grad_scale, 0.0f);
    store16(m, a->nsp_logits, (size_t)B * 2);
    st->nsp_loss_sum = stat_sum(m, pass, BT_REDUCE_SUM, act(m, a->nsp_loss), (size_t)B,
                                &st->ticket.nsp_loss);
    st->nsp_correct = stat_sum(m, pass, BT_REDUCE_SUM, act(m, a->nsp_correct), (size_t)B,
                               &st->ticket.nsp_correct);
    st->n_nsp = B;
}

void bert_forward(bert_model *m, const bert_batch *bt, const bert_pass *pass, bert_stats *st) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    const int B = bt->B, T = bt->T, N = B * T, H = m->cfg.hidden_size;
    const int L = m->cfg.num_hidden_layers, M = bt->n_masked;
    const float eps = m->cfg.layer_norm_eps;
    if (B > m->max_batch || T > m->max_seq || M > m->max_masked) {
        fprintf(stderr, "bertrain: internal error: batch %dx%d with %d masked exceeds the "
                        "model's capacity %dx%d/%d\n", B, T, M, m->max_batch, m->max_seq,
                m->max_masked);
        exit(1);
    }
    m->cur_B = B;
    m->cur_T = T;
    m->cur_masked = M;
    /* the last layer that runs is the top layer, at the heads' rows only (but
     * Admin's profiling measures every row, and dense_top turns it off) */
    m->top_layer = m->dense_top || pass->admin_profile ? -1 : layer_before(pass, L);
    upload_batch(m, bt); /* with the top layer's rows, or none */
    bert_upload_head_tables(m, B, T);
    m->backward_ready = true;
    memset(st, 0, sizeof *st);
    st->ticket.mlm_loss = st->ticket.mlm_correct = st->ticket.nsp_loss = -1;
    st->ticket.nsp_correct = st->ticket.log_z_sq = st->ticket.attn_first = -1;
    m->attn_score_sq = 0.0;
    m->n_attn_tickets = 0;

    /* embeddings -> LayerNorm -> dropout */
    be->embed_fwd(be, act(m, a->emb_sum), ints(m, a->ids), ints(m, a->types), par(m, v->wte),
                  par(m, v->wpe), par(m, v->wtt), B, T, H);
    ln_fwd(m, act(m, a->emb_out), act(m, a->emb_mean), act(m, a->emb_rstd), act(m, a->emb_sum),
           par(m, v->emb_ln_w), par(m, v->emb_ln_b), N, H, eps);
    if (pass->train && m->cfg.hidden_dropout_prob > 0.0f)
        be->dropout(be, act(m, a->emb_out), act(m, a->emb_out), (size_t)N * H, (size_t)T * H,
                    bt->first_sample, m->cfg.hidden_dropout_prob,
                    dropout_key(pass, -1, SITE_EMB));
    store16(m, a->emb_out, (size_t)N * H);
    for (int l = 0; l < L; l++)
        if (!layer_skipped(pass, l)) {
            m->layer_in_flight = l;
            layer_fwd(m, l, layer_input(m, l, pass), bt, pass);
            m->layer_in_flight = -1;
            stash_layer(m, l);
        }
    size_t hidden = layer_input(m, L, pass);
    const int rows = m->top_layer >= 0 ? m->n_top : N; /* the rows of hidden */
    st->attn_score_sq = m->attn_score_sq;
    if (m->n_attn_tickets) st->ticket.attn_first = m->attn_ticket_first;
    st->ticket.n_attn = m->n_attn_tickets;
    if (m->cfg.norm == BERT_NORM_PRE) { /* the final LayerNorm of Pre-LN */
        ln_fwd(m, act(m, a->final_out), act(m, a->final_mean), act(m, a->final_rstd),
               act(m, hidden), par(m, v->final_ln_w), par(m, v->final_ln_b), rows, H, eps);
        hidden = a->final_out;
    }

    if (M > 0) mlm_head_fwd(m, bt, pass, st, hidden);
    if (m->cfg.nsp && bt->nsp_labels) nsp_head_fwd(m, bt, pass, st, hidden);
}

void bert_stats_resolve(const bert_model *m, bert_stats *st, const double *values) {
    const double D = m->cfg.hidden_size / m->cfg.num_attention_heads;
    if (st->ticket.mlm_loss >= 0) st->mlm_loss_sum = values[st->ticket.mlm_loss];
    if (st->ticket.mlm_correct >= 0) st->mlm_correct = values[st->ticket.mlm_correct];
    if (st->ticket.nsp_loss >= 0) st->nsp_loss_sum = values[st->ticket.nsp_loss];
    if (st->ticket.nsp_correct >= 0) st->nsp_correct = values[st->ticket.nsp_correct];
    if (st->ticket.log_z_sq >= 0) st->mlm_log_z_sq = values[st->ticket.log_z_sq];
    if (st->ticket.n_attn) { /* as the forward adds them, layer by layer */
        double sum = 0.0;
        for (int i = 0; i < st->ticket.n_attn; i++) sum += values[st->ticket.attn_first + i] / D;
        st->attn_score_sq = sum;
    }
}

/* The gradients of parameters [begin, end) are complete for this micro-batch:
 * stored in 16 bits (mixed precision), and reported for an early allreduce. */
static void grads_final(bert_model *m, const bert_pass *pass, size_t begin, size_t end) {
    bert_store16(m, m->grads, begin, end - begin);
    if (pass->grads_ready) pass->grads_ready(pass->grads_ready_ctx, begin, end);
}

void bert_backward(bert_model *m, const bert_batch *bt, const bert_pass *pass) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    const int B = bt->B, T = bt->T, N = B * T, H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    const int L = m->cfg.num_hidden_layers, M = bt->n_masked;
    if (!m->backward_ready) {
        fprintf(stderr, "bertrain: internal error: backward without a forward pass before it\n");
        exit(1);
    }
    m->backward_ready = false;
    const size_t rows = m->top_layer >= 0 ? (size_t)m->n_top : (size_t)N; /* of hidden */

    be->fill(be, act(m, a->dA), 0.0f, rows * H); /* d final hidden */
    if (M > 0) {
        /* logits now hold d loss / d logits */
        linear_bwd(m, act(m, a->dhm), v->wte, v->dec_b, act(m, a->logits), act(m, a->t3), M, H, V);
        ln_bwd(m, act(m, a->dhm), grd(m, v->head_ln_w), grd(m, v->head_ln_b), act(m, a->dhm),
               act(m, a->t2), act(m, a->t3_mean), act(m, a->t3_rstd), par(m, v->head_ln_w), M, H);
        be->gelu_bwd(be, act(m, a->dhm), act(m, a->dhm), act(m, a->t1), (size_t)M * H);
        store16(m, a->dhm, (size_t)M * H);
        linear_bwd(m, act(m, a->t2), v->head_w, v->head_b, act(m, a->dhm), act(m, a->hm), M, H, H);
        be->scatter_rows(be, act(m, a->dA), act(m, a->t2), ints(m, mlm_rows_of(m)), M,
                         H); /* t2: scratch */
    }
    if (m->cfg.nsp && bt->nsp_labels) {
        linear_bwd(m, act(m, a->dcls), v->nsp_w, v->nsp_b, act(m, a->nsp_logits), act(m, a->pooled),
                   B, H, 2);
        be->tanh_bwd(be, act(m, a->dcls), act(m, a->dcls), act(m, a->pooled), (size_t)B * H);
        store16(m, a->dcls, (size_t)B * H);
        linear_bwd(m, act(m, a->pool_pre), v->pool_w, v->pool_b, act(m, a->dcls), act(m, a->cls), B,
                   H, H);
        be->scatter_rows(be, act(m, a->dA), act(m, a->pool_pre), ints(m, cls_rows_of(m)), B, H);
    }
    store16(m, a->dA, rows * H);
    /* the heads' parameters (after the layers in the flat buffer) are final */
    grads_final(m, pass, v->head_w, m->n_params);
    size_t layers_end = v->head_w; /* where the last layer's parameters end */
    if (m->cfg.norm == BERT_NORM_PRE) { /* the final LayerNorm lies between layers and heads */
        ln_bwd(m, act(m, a->dA), grd(m, v->final_ln_w), grd(m, v->final_ln_b), act(m, a->dA),
               act(m, layer_input(m, L, pass)), act(m, a->final_mean),
               act(m, a->final_rstd), par(m, v->final_ln_w), (int)rows, H);
        grads_final(m, pass, v->final_ln_w, v->head_w);
        layers_end = v->final_ln_w;
    }
    for (int l = L - 1; l >= 0; l--) {
        if (layer_skipped(pass, l)) continue; /* identity: dA passes through; no gradient */
        unstash_layer(m, l, pass);
        layer_bwd(m, l, layer_input(m, l, pass), bt, pass);
        /* a skipped layer's range is never reported: not reduced */
        grads_final(m, pass, v->layer[l].qkv_w, l + 1 < L ? v->layer[l + 1].qkv_w : layers_end);
    }
    /* embeddings */
    if (pass->train && m->cfg.hidden_dropout_prob > 0.0f)
        be->dropout(be, act(m, a->dA), act(m, a->dA), (size_t)N * H, (size_t)T * H,
                    bt->first_sample, m->cfg.hidden_dropout_prob, dropout_key(pass, -1, SITE_EMB));
    store16(m, a->dA, (size_t)N * H);
    ln_bwd(m, act(m, a->dA), grd(m, v->emb_ln_w), grd(m, v->emb_ln_b), act(m, a->dA),
           act(m, a->emb_sum), act(m, a->emb_mean), act(m, a->emb_rstd), par(m, v->emb_ln_w), N,
           H);
    be->embed_bwd(be, grd(m, v->wte), grd(m, v->wpe), grd(m, v->wtt), act(m, a->dA),
                  ints(m, a->ids), ints(m, a->types), B, T, H, V, m->cfg.type_vocab_size,
                  m->cfg.pad_id);
    grads_final(m, pass, 0, v->layer[0].qkv_w);
}
