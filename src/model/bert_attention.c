/* Self-attention of one layer as backend ops: the batched GEMMs over all
 * B x NH heads (Q, K, V head-major), the masked softmax and its dropout, and
 * the gather tables between the token-major and head-major layouts. */
#include "bert_internal.h"
#include "bert_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The gather tables between token-major and head-major layouts (see
 * bert_act_layout), for a B x T batch: rows of D floats; uploaded only when
 * the shape changes. */
void bert_upload_head_tables(bert_model *m, int B, int T) {
    if (B == m->heads_B && T == m->heads_T) return;
    const struct bert_act_layout *a = m->act;
    const size_t NH = (size_t)m->cfg.num_attention_heads, N = (size_t)B * T, n = 8 * N * NH;
    int32_t *host = malloc(n * sizeof *host);
    if (!host) {
        fprintf(stderr, "bertrain: out of host memory staging a batch\n");
        exit(1);
    }
    int32_t *qkv_to_heads = host, *heads_to_qkv = host + 3 * N * NH,
            *heads_to_ctx = host + 6 * N * NH, *ctx_to_heads = host + 7 * N * NH;
    for (size_t s = 0; s < 3; s++)
        for (size_t b = 0; b < (size_t)B; b++)
            for (size_t h = 0; h < NH; h++)
                for (size_t t = 0; t < (size_t)T; t++) {
                    const size_t heads = ((s * B + b) * NH + h) * T + t, /* (3, B, NH, T) */
                        tokens = ((b * T + t) * 3 + s) * NH + h;      /* (N, 3, NH) */
                    qkv_to_heads[heads] = (int32_t)tokens;
                    heads_to_qkv[tokens] = (int32_t)heads;
                    if (s) continue;
                    const size_t ctx_heads = (b * NH + h) * T + t,
                                 ctx_tokens = (b * T + t) * NH + h;
                    heads_to_ctx[ctx_tokens] = (int32_t)ctx_heads;
                    ctx_to_heads[ctx_heads] = (int32_t)ctx_tokens;
                }
    bt_backend *be = m->be;
    be->upload(be, ints(m, a->qkv_to_heads), qkv_to_heads, 3 * N * NH * 4);
    be->upload(be, ints(m, a->heads_to_qkv), heads_to_qkv, 3 * N * NH * 4);
    be->upload(be, ints(m, a->heads_to_ctx), heads_to_ctx, N * NH * 4);
    be->upload(be, ints(m, a->ctx_to_heads), ctx_to_heads, N * NH * 4);
    free(host);
    m->heads_B = B;
    m->heads_T = T;
}

/* Attention's GEMMs run once over all B x NH heads: Q, K and V live
 * head-major, (3, B, NH, T, D), each head a (T, D) block at a fixed stride. */
typedef struct {
    int T, D, heads;    /* heads = B * NH */
    long TT;            /* T * T */
    size_t q, k, v;     /* offsets of Q, K, V in the activations */
} attn_dims;

static attn_dims attn_dims_of(const bert_model *m, int l, const bert_batch *bt) {
    const int H = m->cfg.hidden_size, NH = m->cfg.num_attention_heads, D = H / NH;
    const size_t NHsz = (size_t)bt->B * bt->T * H, q = m->act->layer[l].qkv;
    return (attn_dims){bt->T, D, bt->B * NH, (long)bt->T * bt->T, q, q + NHsz, q + 2 * NHsz};
}

/* One head's matrix of a head-major activation: a (rows, cols) block at
 * activation offset `off`, the next head's block right after it. */
typedef struct {
    size_t off;
    int rows, cols;
} head_mat;

static head_mat by_head(size_t off, int rows, int cols) { return (head_mat){off, rows, cols}; }

/* c = op(a) op(b) for every head at once (one batched GEMM over g->heads
 * blocks), op transposing where ta / tb is set: the shapes follow from the
 * blocks, so a call reads as its formula. */
static void heads_gemm(const bert_run *r, const attn_dims *g, bool ta, head_mat a, bool tb,
                       head_mat b, head_mat c) {
    const bert_model *m = r->m;
    const int M = ta ? a.cols : a.rows, K = ta ? a.rows : a.cols, N = tb ? b.rows : b.cols;
    unsigned s16 = 0; /* q, k, v and the probabilities: their 16-bit copies where kept */
    const bt_ptr pa = act_operand(r, a.off, BT_GEMM_A16, &s16),
                 pb = act_operand(r, b.off, BT_GEMM_B16, &s16);
    mm(m, s16, ta, tb, M, N, K, 1.0f, pa, a.cols, (long)a.rows * a.cols, pb, b.cols,
       (long)b.rows * b.cols, 0.0f, act(m, c.off), c.cols, (long)c.rows * c.cols, g->heads);
}

/* out (B, NH, T, T) = Q K^T per head (unscaled: the softmax applies 1/sqrt(D)). */
static void attention_scores(const bert_run *r, int l, size_t out) {
    const attn_dims g = attn_dims_of(r->m, l, r->bt);
    heads_gemm(r, &g, false, by_head(g.q, g.T, g.D), true, by_head(g.k, g.T, g.D),
               by_head(out, g.T, g.T));
}

/* Self-attention core for one layer: ctx = dropout(softmax(QK^T/sqrt(D))) V.
 * qkv_tokens: the QKV projection (N, 3H), gathered here into layer l's
 * head-major qkv. */
void bert_attention_fwd(bert_run *r, int l, size_t qkv_tokens) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const attn_dims g = attn_dims_of(m, l, r->bt);
    const int B = r->bt->B, T = g.T, NH = m->cfg.num_attention_heads, D = g.D;
    const int N = B * T;
    const float p = r->pass->train ? m->cfg.attention_probs_dropout_prob : 0.0f;
    op_relayout(r, la->qkv, qkv_tokens, a->qkv_to_heads, 3 * N * NH, D);
    attention_scores(r, l, la->probs);
    if (m->cfg.attention_logit_penalty > 0.0f) { /* sum of (QK^T/sqrt(D))^2 */
        int ticket = -1;
        r->st->attn_score_sq +=
            stat_sum(r, BT_REDUCE_SUMSQ, act(m, la->probs), (size_t)B * NH * g.TT, &ticket) / D;
        if (ticket >= 0 && !r->st->ticket.n_attn++) r->st->ticket.attn_first = ticket;
    }
    op_softmax(r, la->probs, a->pdrop, a->mask, NH, 1.0f / sqrtf((float)D), p,
               dropout_key(r->pass, l, SITE_ATTN_PROBS));
    const size_t probs = p > 0.0f ? a->pdrop : la->probs; /* after dropout */
    /* ctx by head (B, NH, T, D) into dctx (free during the forward), then (N, H) */
    heads_gemm(r, &g, false, by_head(probs, T, T), false, by_head(g.v, T, D),
               by_head(a->dctx, T, D));
    op_relayout(r, la->ctx, a->dctx, a->heads_to_ctx, N * NH, D);
}

/* Backward of attention_fwd: dctx (N, H) -> dqkv (N, 3H). dH is free here
 * (between the output projection's backward and the QKV projection's) and
 * holds dctx by head. */
void bert_attention_bwd(bert_run *r, int l) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const attn_dims g = attn_dims_of(m, l, r->bt);
    const int B = r->bt->B, T = g.T, NH = m->cfg.num_attention_heads, D = g.D;
    const int N = B * T;
    const size_t per_b = (size_t)NH * g.TT, NHD = (size_t)N * NH * D;
    const float p = r->pass->train ? m->cfg.attention_probs_dropout_prob : 0.0f;
    const bt_rng_key key = dropout_key(r->pass, l, SITE_ATTN_PROBS);
    const size_t dq = a->dqkv_heads, dk = dq + NHD, dv = dq + 2 * NHD, dctx = a->dH;
    size_t probs = la->probs; /* after dropout */
    if (p > 0.0f) { /* recompute the dropped probabilities */
        be->dropout(be, act(m, a->pdrop), act(m, la->probs), B * per_b, per_b,
                    r->bt->first_sample, p, key);
        probs = a->pdrop;
    }
    be->gather_rows(be, act(m, dctx), act(m, a->dctx), ints(m, a->ctx_to_heads), N * NH, D);
    /* dV = P^T dctx;  dP = dctx V^T */
    heads_gemm(r, &g, true, by_head(probs, T, T), false, by_head(dctx, T, D), by_head(dv, T, D));
    heads_gemm(r, &g, false, by_head(dctx, T, D), true, by_head(g.v, T, D),
               by_head(a->dprobs, T, T));
    /* the attention-logit penalty: + d(c sum (S/sqrt(D))^2)/dS = 2c S / D,
     * S recomputed into pdrop (free again) */
    const float penalty = 2.0f * r->pass->attn_penalty_grad_scale / (float)D;
    if (penalty > 0.0f) attention_scores(r, l, a->pdrop);
    op_softmax_bwd(r, a->dprobs, la->probs, NH, 1.0f / sqrtf((float)D), p, key, penalty, a->pdrop);
    /* dQ = dS K;  dK = dS^T Q */
    heads_gemm(r, &g, false, by_head(a->dprobs, T, T), false, by_head(g.k, T, D),
               by_head(dq, T, D));
    heads_gemm(r, &g, true, by_head(a->dprobs, T, T), false, by_head(g.q, T, D), by_head(dk, T, D));
    op_relayout(r, a->dqkv, dq, a->heads_to_qkv, 3 * N * NH, D);
}
