/* Self-attention of one layer as backend ops: the batched GEMMs over all
 * B x NH heads (Q, K, V head-major), the masked softmax and its dropout, and
 * the gather tables between the token-major and head-major layouts. */
#include "bert_internal.h"

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
                    const size_t ctx_heads = (b * NH + h) * T + t, ctx_tokens = (b * T + t) * NH + h;
                    heads_to_ctx[ctx_tokens] = (int32_t)ctx_heads;
                    ctx_to_heads[ctx_heads] = (int32_t)ctx_tokens;
                }
    bt_backend *be = m->be;
    be->upload(be, INT(a->qkv_to_heads), qkv_to_heads, 3 * N * NH * 4);
    be->upload(be, INT(a->heads_to_qkv), heads_to_qkv, 3 * N * NH * 4);
    be->upload(be, INT(a->heads_to_ctx), heads_to_ctx, N * NH * 4);
    be->upload(be, INT(a->ctx_to_heads), ctx_to_heads, N * NH * 4);
    free(host);
    m->heads_B = B;
    m->heads_T = T;
}

/* Attention's GEMMs run once over all B x NH heads: Q, K and V live
 * head-major, (3, B, NH, T, D), each head a (T, D) block at a fixed stride. */
typedef struct {
    int T, D, heads;    /* heads = B * NH */
    long block, TT;     /* T * D, T * T */
    size_t q, k, v;     /* offsets of Q, K, V in the activations */
} attn_dims;

static attn_dims attn_dims_of(const bert_model *m, int l, const bert_batch *bt) {
    const int H = m->cfg.hidden_size, NH = m->cfg.num_attention_heads, D = H / NH;
    const size_t NHsz = (size_t)bt->B * bt->T * H, q = m->act->layer[l].qkv;
    return (attn_dims){bt->T, D, bt->B * NH, (long)bt->T * D, (long)bt->T * bt->T, q, q + NHsz,
                       q + 2 * NHsz};
}

/* out (B, NH, T, T) = Q K^T per head (unscaled: the softmax applies 1/sqrt(D)). */
static void attention_scores(bert_model *m, int l, const bert_batch *bt, size_t out) {
    const attn_dims g = attn_dims_of(m, l, bt);
    mm(m, false, true, g.T, g.T, g.D, 1.0f, ACT(g.q), g.D, g.block, ACT(g.k), g.D, g.block, 0.0f,
       ACT(out), g.T, g.TT, g.heads);
}

/* Self-attention core for one layer: ctx = dropout(softmax(QK^T/sqrt(D))) V.
 * qkv_tokens: the QKV projection (N, 3H), gathered here into layer l's
 * head-major qkv. */
void bert_attention_fwd(bert_model *m, int l, const bert_batch *bt, const bert_pass *pass,
                        size_t qkv_tokens) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const attn_dims g = attn_dims_of(m, l, bt);
    const int B = bt->B, T = bt->T, NH = m->cfg.num_attention_heads, D = g.D;
    const size_t per_b = (size_t)NH * g.TT, N = (size_t)B * T;
    const float p = pass->train ? m->cfg.attention_probs_dropout_prob : 0.0f;
    be->gather_rows(be, ACT(la->qkv), ACT(qkv_tokens), INT(a->qkv_to_heads), (int)(3 * N * NH), D);
    STORE16(la->qkv, 3 * N * NH * D);
    attention_scores(m, l, bt, la->probs);
    if (m->cfg.attention_logit_penalty > 0.0f) { /* sum of (QK^T/sqrt(D))^2 */
        int ticket = -1;
        m->attn_score_sq += stat_sum(m, pass, BT_REDUCE_SUMSQ, ACT(la->probs), B * per_b, &ticket) / D;
        if (ticket >= 0 && !m->n_attn_tickets++) m->attn_ticket_first = ticket;
    }
    const float scale = 1.0f / sqrtf((float)D);
    const bt_rng_key key = dropout_key(pass, l, SITE_ATTN_PROBS);
    size_t src = p > 0.0f ? a->pdrop : la->probs;
    if (p > 0.0f && fused(m, BERT_FUSE_ATTENTION, true)) {
        be->softmax_dropout_fwd(be, ACT(a->pdrop), ACT(la->probs), ACT(la->probs), INT(a->mask),
                                B, NH, T, scale, bt->first_sample, p, key);
        STORE16(la->probs, B * per_b);
    } else {
        be->softmax_fwd(be, ACT(la->probs), ACT(la->probs), INT(a->mask), B, NH, T, scale);
        STORE16(la->probs, B * per_b);
        if (p > 0.0f)
            be->dropout(be, ACT(a->pdrop), ACT(la->probs), B * per_b, per_b, bt->first_sample,
                        p, key);
    }
    /* ctx by head (B, NH, T, D) into dctx (free during the forward), then (N, H) */
    mm(m, false, false, T, D, T, 1.0f, ACT(src), T, g.TT, ACT(g.v), D, g.block, 0.0f, ACT(a->dctx),
       D, g.block, g.heads);
    be->gather_rows(be, ACT(la->ctx), ACT(a->dctx), INT(a->heads_to_ctx), (int)(N * NH), D);
    STORE16(la->ctx, N * NH * D);
}

/* Backward of attention_fwd: dctx (N, H) -> dqkv (N, 3H). dH is free here
 * (between the output projection's backward and the QKV projection's) and
 * holds dctx by head. */
void bert_attention_bwd(bert_model *m, int l, const bert_batch *bt, const bert_pass *pass) {
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const attn_dims g = attn_dims_of(m, l, bt);
    const int B = bt->B, T = bt->T, NH = m->cfg.num_attention_heads, D = g.D;
    const size_t per_b = (size_t)NH * g.TT, N = (size_t)B * T, NHD = N * NH * D;
    const float p = pass->train ? m->cfg.attention_probs_dropout_prob : 0.0f;
    const bt_rng_key key = dropout_key(pass, l, SITE_ATTN_PROBS);
    const size_t dq = a->dqkv_heads, dk = dq + NHD, dv = dq + 2 * NHD, dctx = a->dH;
    size_t src = la->probs;
    if (p > 0.0f) { /* recompute the dropped probabilities */
        be->dropout(be, ACT(a->pdrop), ACT(la->probs), B * per_b, per_b, bt->first_sample, p,
                    key);
        src = a->pdrop;
    }
    be->gather_rows(be, ACT(dctx), ACT(a->dctx), INT(a->ctx_to_heads), (int)(N * NH), D);
    /* dV = P^T dctx;  dP = dctx V^T */
    mm(m, true, false, T, D, T, 1.0f, ACT(src), T, g.TT, ACT(dctx), D, g.block, 0.0f, ACT(dv), D,
       g.block, g.heads);
    mm(m, false, true, T, T, D, 1.0f, ACT(dctx), D, g.block, ACT(g.v), D, g.block, 0.0f,
       ACT(a->dprobs), T, g.TT, g.heads);
    if (p > 0.0f && fused(m, BERT_FUSE_ATTENTION, false)) {
        be->dropout_softmax_bwd(be, ACT(a->dprobs), ACT(a->dprobs), ACT(la->probs), B, NH, T,
                                1.0f / sqrtf((float)D), bt->first_sample, p, key);
    } else {
        if (p > 0.0f)
            be->dropout(be, ACT(a->dprobs), ACT(a->dprobs), B * per_b, per_b, bt->first_sample,
                        p, key);
        be->softmax_bwd(be, ACT(a->dprobs), ACT(a->dprobs), ACT(la->probs), B * NH * T, T,
                        1.0f / sqrtf((float)D));
    }
    if (pass->attn_penalty_grad_scale > 0.0f) { /* + d(c sum (S/sqrt(D))^2)/dS = 2c S / D */
        attention_scores(m, l, bt, a->pdrop); /* pdrop is free again: recompute S */
        be->axpy(be, ACT(a->dprobs), 2.0f * pass->attn_penalty_grad_scale / (float)D,
                 ACT(a->pdrop), B * per_b);
    }
    STORE16(a->dprobs, B * per_b);
    /* dQ = dS K;  dK = dS^T Q */
    mm(m, false, false, T, D, T, 1.0f, ACT(a->dprobs), T, g.TT, ACT(g.k), D, g.block, 0.0f, ACT(dq),
       D, g.block, g.heads);
    mm(m, true, false, T, D, T, 1.0f, ACT(a->dprobs), T, g.TT, ACT(g.q), D, g.block, 0.0f, ACT(dk),
       D, g.block, g.heads);
    be->gather_rows(be, ACT(a->dqkv), ACT(dq), INT(a->heads_to_qkv), (int)(3 * N * NH), D);
    STORE16(a->dqkv, 3 * NHD);
}
