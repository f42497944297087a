/* Self-attention of one layer as backend ops: the batched GEMMs over all
 * B x NH heads, which read Q, K, V and write the context where the
 * token-major layouts hold them (gemm_grid: the heads of each sequence), the
 * masked softmax and its dropout. */
#include "bert_internal.h"
#include "bert_ops.h"

#include <math.h>

/* The batch's attention: B sequences of NH heads, each head's Q, K, V a
 * (T, D) slice of the token-major QKV projection (N, 3H). */
typedef struct {
    int T, D, NH, B;
    long TT;        /* T * T */
    size_t q, k, v; /* offsets of Q, K, V (head 0 of sequence 0) in the activations */
} attn_dims;

static attn_dims attn_dims_of(const bert_model *m, int l, const bert_batch *bt) {
    const int H = m->cfg.hidden_size, NH = m->cfg.num_attention_heads, D = H / NH;
    const size_t q = m->act->layer[l].qkv;
    return (attn_dims){bt->T, D, NH, bt->B, (long)bt->T * bt->T, q, q + (size_t)H,
                       q + 2 * (size_t)H};
}

/* Every head's matrix of an activation: (rows, cols) with row stride ld at
 * offset off + b * seq + h * head for sequence b and head h. */
typedef struct {
    size_t off;
    int rows, cols, ld;
    long head, seq;
    bt_ptr half; /* the activation from offset `base` in 16 bits (bert_operand16), or NULL */
    size_t base;
} head_mat;

/* A head's (T, D) slice of a token-major activation `width` wide: Q, K, V in
 * the QKV projection (width 3H) or their gradients, the context (width H). */
static head_mat token_major(const attn_dims *g, size_t off, int width) {
    return (head_mat){off, g->T, g->D, width, g->D, (long)g->T * width, {NULL, 0}, 0};
}

/* A head's (T, T) block of the scores or probabilities, (B, NH, T, T). */
static head_mat by_head(const attn_dims *g, size_t off) {
    return (head_mat){off, g->T, g->T, g->T, g->TT, (long)g->NH * g->TT, {NULL, 0}, 0};
}

/* x with its 16-bit copy made once (bert_operand16) for the two GEMMs
 * that read it next, where gemm16 would convert it in each: n elements from
 * x.off. */
static head_mat with_half(const bert_run *r, head_mat x, size_t n) {
    x.half = bert_operand16(r->m, x.off, n);
    x.base = x.off;
    return x;
}

/* Where a GEMM reads x: its copy from with_half, a 16-bit copy the pass
 * keeps (act_operand), or the fp32 activations; `flag` added to *stored16
 * for the 16-bit ones. */
static bt_ptr head_operand(const bert_run *r, const head_mat *x, unsigned flag,
                           unsigned *stored16) {
    if (!x->half.buf) return act_operand(r, x->off, flag, stored16);
    *stored16 |= flag;
    return (bt_ptr){x->half.buf, x->half.off + (x->off - x->base) * 2};
}

/* c = op(a) op(b) for every head of every sequence at once (one gemm_grid),
 * op transposing where ta / tb is set: the shapes follow from the matrices,
 * so a call reads as its formula. c is written in 16 bits only, into its
 * half (from base), where it has one (with gemm16). */
static void heads_gemm(const bert_run *r, const attn_dims *g, bool ta, head_mat a, bool tb,
                       head_mat b, head_mat c) {
    const bert_model *m = r->m;
    const int M = ta ? a.cols : a.rows, K = ta ? a.rows : a.cols, N = tb ? b.rows : b.cols;
    unsigned s16 = 0; /* q, k, v and the probabilities: their 16-bit copies where kept */
    const bt_ptr pa = head_operand(r, &a, BT_GEMM_A16, &s16),
                 pb = head_operand(r, &b, BT_GEMM_B16, &s16);
    bt_ptr pc = act(m, c.off);
    if (c.half.buf && m->gemm16) {
        s16 |= BT_GEMM_C16;
        pc = (bt_ptr){c.half.buf, c.half.off + (c.off - c.base) * 2};
    }
    const bt_gemm_grid grid = {g->NH, g->B, a.head, b.head, c.head, a.seq, b.seq, c.seq};
    m->be->gemm_grid(m->be, m->gemm16 ? (bt_dtype)m->cfg.storage : BT_F32, s16, ta, tb, M, N, K,
                     1.0f, pa, a.ld, pb, b.ld, 0.0f, pc, c.ld, &grid);
}

/* out (B, NH, T, T) = Q K^T per head (unscaled: the softmax applies 1/sqrt(D)). */
static void attention_scores(const bert_run *r, int l, size_t out) {
    const attn_dims g = attn_dims_of(r->m, l, r->bt);
    const int W = 3 * r->m->cfg.hidden_size;
    heads_gemm(r, &g, false, token_major(&g, g.q, W), true, token_major(&g, g.k, W),
               by_head(&g, out));
}

/* An input of fused attention at activation offset off: its 16-bit stash
 * copy where the pass may read it (act_operand), with its dtype, else fp32. */
static bt_ptr attn_operand(const bert_run *r, size_t off, bt_dtype *dtype) {
    unsigned s16 = 0;
    const bt_ptr x = act_operand(r, off, BT_GEMM_A16, &s16);
    *dtype = s16 ? (bt_dtype)r->m->cfg.storage : BT_F32;
    return x;
}

/* The fused forward (bert_model.fused_attention): ctx and each row's lse. */
static void attention_fused_fwd(bert_run *r, int l, const attn_dims *g, float p) {
    const bert_model *m = r->m;
    const bert_layer_acts *la = &m->act->layer[l];
    bt_dtype dt;
    const bt_ptr qkv = attn_operand(r, g->q, &dt);
    m->be->attention_fwd(m->be, act(m, la->ctx), act(m, la->lse), qkv, dt, ints(m, m->act->mask),
                         g->B, g->NH, g->T, g->D, 1.0f / sqrtf((float)g->D),
                         r->bt->first_sample, p, dropout_key(r->pass, l, SITE_ATTN_PROBS));
    op_stored(r, la->ctx, (size_t)g->B * g->T * g->NH * g->D);
}

/* The fused backward: dqkv from dctx, the probabilities recomputed. */
static void attention_fused_bwd(bert_run *r, int l, const attn_dims *g, float p) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    bt_dtype qd, cd;
    const bt_ptr qkv = attn_operand(r, g->q, &qd), ctx = attn_operand(r, la->ctx, &cd);
    m->be->attention_bwd(m->be, act(m, a->dqkv), act(m, a->attn_delta), act(m, a->dctx), ctx, cd,
                         act(m, la->lse), qkv, qd, ints(m, a->mask), g->B, g->NH, g->T, g->D,
                         1.0f / sqrtf((float)g->D), r->bt->first_sample, p,
                         dropout_key(r->pass, l, SITE_ATTN_PROBS));
    /* dqkv is stored (rounded) by its reader, op_linear_bwd_unrounded */
}

/* Self-attention core for one layer: ctx (N, H) = dropout(softmax(QK^T /
 * sqrt(D))) V from layer l's QKV projection (N, 3H), token-major both. */
/* probs = softmax(QK^T/sqrt(D)) of layer l, and with dropout p its dropped
 * copy in dprobs (the backward's scratch, free until the backward needs
 * it); in a forward (r->st) the attention logit penalty's sum. Returns the
 * dropped copy's 16-bit copy where op_softmax made one (else buf NULL). */
static bt_ptr attention_probs(bert_run *r, int l, const attn_dims *g, float p) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const int NH = g->NH, D = g->D;
    attention_scores(r, l, la->probs);
    if (m->cfg.attention_logit_penalty > 0.0f && r->st) { /* sum of (QK^T/sqrt(D))^2 */
        int ticket = -1;
        r->st->attn_score_sq +=
            stat_sum(r, BT_REDUCE_SUMSQ, act(m, la->probs), (size_t)g->B * NH * g->TT, &ticket) /
            D;
        if (ticket >= 0 && !r->st->ticket.n_attn++) r->st->ticket.attn_first = ticket;
    }
    return op_softmax(r, la->probs, a->dprobs, a->mask, NH, 1.0f / sqrtf((float)D), p,
                      dropout_key(r->pass, l, SITE_ATTN_PROBS));
}

void bert_attention_fwd(bert_run *r, int l) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const attn_dims g = attn_dims_of(m, l, r->bt);
    const int H = m->cfg.hidden_size;
    const float p = r->pass->train ? m->cfg.attention_probs_dropout_prob : 0.0f;
    if (m->fused_attention) {
        attention_fused_fwd(r, l, &g, p);
        return;
    }
    const bt_ptr dropped16 = attention_probs(r, l, &g, p);
    const size_t probs = p > 0.0f ? a->dprobs : la->probs; /* after dropout */
    head_mat pm = by_head(&g, probs);
    if (dropped16.buf) { /* the softmax wrote the GEMM's 16-bit operand too */
        pm.half = dropped16;
        pm.base = probs;
    }
    /* the context, where only GEMMs read it (from the stash): in 16 bits, by the GEMM */
    head_mat ctx = token_major(&g, la->ctx, H);
    ctx.half = m->gemm16 ? bert_act_slot16(m, r->tape, r->layer, la->ctx, false) : BT_NO_PTR;
    ctx.base = la->ctx;
    heads_gemm(r, &g, false, pm, false, token_major(&g, g.v, 3 * H), ctx);
    if (!ctx.half.buf) op_stored(r, la->ctx, (size_t)g.B * g.T * H);
}

/* Layer l's dropped probabilities again, for dV's GEMM: dropout of the
 * probabilities, read from the stash where the unstash left them there. On
 * 16-bit GEMM hardware only their 16-bit copy is written, into the operand16
 * buffer after dctx's copy (its first `after` elements); else the fp32 values
 * into dprobs. */
static head_mat dropped_again(const bert_run *r, int l, const attn_dims *g, float p,
                              bt_rng_key key, size_t after) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const size_t per_b = (size_t)g->NH * g->TT, n = g->B * per_b;
    const bt_dtype dt = (bt_dtype)m->cfg.storage;
    const bt_ptr p16 = bert_act_stashed(m, r->half_layer, a->layer[l].probs),
                 half = m->gemm16 ? bert_operand16_room(m, after, n) : BT_NO_PTR;
    m->be->dropout(m->be, half.buf ? BT_NO_PTR : act(m, a->dprobs),
                   p16.buf ? p16 : act(m, a->layer[l].probs), n, per_b, r->bt->first_sample, p,
                   key, p16.buf ? dt : BT_F32, half, dt);
    head_mat pm = by_head(g, a->dprobs);
    if (half.buf) {
        pm.half = half;
        pm.base = a->dprobs;
    }
    return pm;
}

/* Where dqkv's GEMMs write its 16-bit copy, n values, once dctx's and the
 * dropped probabilities' copies (the first `before` values of operand16)
 * are read: the end of operand16, on 16-bit GEMM hardware under the cast
 * fusion where it does not overlap them; else buf NULL. */
static bt_ptr dqkv16_room(const bert_model *m, size_t before, size_t n) {
    const size_t total = m->act->operand16;
    if (!m->gemm16 || total < before + n) return BT_NO_PTR;
    return bert_operand16_room(m, total - n, n);
}

/* Backward of attention_fwd: dctx (N, H) -> dqkv (N, 3H), token-major both;
 * returns dqkv's 16-bit copy where its GEMMs wrote only that (dqkv16_room),
 * else buf NULL: dqkv in fp32. */
bt_ptr bert_attention_bwd(bert_run *r, int l, bool dctx16) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_layer_acts *la = &a->layer[l];
    const attn_dims g = attn_dims_of(m, l, r->bt);
    const int NH = g.NH, D = g.D, H = m->cfg.hidden_size, W = 3 * H;
    const size_t per_b = (size_t)NH * g.TT;
    const float p = r->pass->train ? m->cfg.attention_probs_dropout_prob : 0.0f;
    if (m->fused_attention) {
        attention_fused_bwd(r, l, &g, p);
        return BT_NO_PTR;
    }
    if (r->recompute_probs) attention_probs(r, l, &g, p); /* another layer's were there */
    const bt_rng_key key = dropout_key(r->pass, l, SITE_ATTN_PROBS);
    const size_t dq = a->dqkv, dk = dq + (size_t)H, dv = dq + 2 * (size_t)H;
    const size_t n_ctx = (size_t)g.B * g.T * H;
    head_mat dctx = token_major(&g, a->dctx, H);
    if (dctx16) { /* its GEMM wrote the copy */
        dctx.half = bert_operand16_room(m, 0, n_ctx);
        dctx.base = a->dctx;
    } else {
        dctx = with_half(r, dctx, n_ctx);
    }
    head_mat pm = by_head(&g, la->probs); /* after dropout */
    if (p > 0.0f) /* the dropped probabilities again, until dV has them */
        pm = dropped_again(r, l, &g, p, key, dctx.half.buf ? n_ctx : 0);
    /* dQ, dK, dV in 16 bits only where there is room: their readers (the
     * QKV projection's GEMMs and bias_grad) read the copy */
    const bt_ptr d16 = dctx.half.buf ? dqkv16_room(m, n_ctx + g.B * per_b, n_ctx * 3) : BT_NO_PTR;
    head_mat hq = token_major(&g, dq, W), hk = token_major(&g, dk, W), hv = token_major(&g, dv, W);
    hq.half = hk.half = hv.half = d16;
    hq.base = hk.base = hv.base = dq;
    /* dV = P^T dctx;  dP = dctx V^T */
    heads_gemm(r, &g, true, pm, false, dctx, hv);
    heads_gemm(r, &g, false, dctx, true, token_major(&g, g.v, W), by_head(&g, a->dprobs));
    /* the attention-logit penalty: + d(c sum (S/sqrt(D))^2)/dS = 2c S / D,
     * S recomputed into pdrop (there only with a penalty) */
    const float penalty = 2.0f * r->pass->attn_penalty_grad_scale / (float)D;
    if (penalty > 0.0f) attention_scores(r, l, a->pdrop);
    const bt_ptr ds16 =
        op_softmax_bwd(r, a->dprobs, la->probs, NH, 1.0f / sqrtf((float)D), p, key, penalty, a->pdrop);
    /* dQ = dS K;  dK = dS^T Q; dS in 16 bits from the op, else cast once */
    head_mat ds = by_head(&g, a->dprobs);
    if (ds16.buf) {
        ds.half = ds16;
        ds.base = a->dprobs;
    } else {
        ds = with_half(r, ds, g.B * per_b);
    }
    heads_gemm(r, &g, false, ds, false, token_major(&g, g.k, W), hq);
    heads_gemm(r, &g, true, ds, false, token_major(&g, g.q, W), hk);
    /* an fp32 dqkv is stored (rounded) by its reader, op_linear_bwd_unrounded */
    return d16;
}
