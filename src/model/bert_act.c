/* The model's activation buffer: where each saved tensor and scratch area
 * lives (the layout), and mixed precision's 16-bit storage of it: rounding
 * values to the storage dtype, and the per-layer 16-bit stash that holds a
 * layer's saved activations between its forward and its backward. */
#include "bert_internal.h"

#include <stdlib.h>
#include <string.h>


/* Where `count` elements go from *off: there, or at the start of the next
 * buffer of cap elements when they would straddle two. A tensor larger than
 * a buffer is noted in *largest (the caller refuses the layout). */
static size_t place(size_t *off, size_t count, size_t cap, size_t *largest) {
    const size_t n = (count + 15) / 16 * 16;
    if (n > *largest) *largest = n;
    if (n <= cap && *off / cap != (*off + n - 1) / cap) *off = (*off / cap + 1) * cap;
    const size_t at = *off;
    *off += n;
    return at;
}

struct bert_act_layout *bert_act_layout_new(const bert_config *c, int Bm, int Tm, int Mm,
                                            bool fused_attention, bool grads16,
                                            size_t max_buffer) {
    int L = c->num_hidden_layers;
    struct bert_act_layout *a =
        calloc(1, sizeof *a + (size_t)L * sizeof(bert_layer_acts));
    if (!a) return NULL;
    /* elements a buffer, a multiple of 16 (every tensor starts 64-byte aligned) */
    const size_t cap = max_buffer / 4 >= 16 ? max_buffer / 4 / 16 * 16 : SIZE_MAX / 64;
    a->buffer_elems = cap;
    const size_t N = (size_t)Bm * Tm, H = c->hidden_size, I = c->intermediate_size,
                 rows = (size_t)Bm * c->num_attention_heads * Tm,
                 P = fused_attention ? 0 : rows * Tm, R = fused_attention ? rows : 0,
                 M = Mm > 0 ? Mm : 1,
                 V = c->vocab_size;
    size_t off = 0;
#define TAKE(field, count) (a->field = place(&off, (count), cap, &a->largest))
    TAKE(emb_sum, N * H);
    TAKE(emb_mean, N);
    TAKE(emb_rstd, N);
    TAKE(emb_out, N * H);
    /* With the 16-bit stash, or recomputing whole layers, one working set of
     * the big fields serves every layer; otherwise each layer has its own.
     * Recomputing, one copy of the probabilities serves every layer (outside
     * the working set: never stashed). */
    const bool recompute_layer = c->recompute == BERT_RECOMPUTE_LAYER;
    const bool stash = c->storage != BT_F32 && !c->fp32_stash && !recompute_layer;
    const bool shared_probs = c->recompute != BERT_RECOMPUTE_NONE;
    const bool shared = stash || recompute_layer;
    size_t probs_shared = 0;
    if (shared_probs) probs_shared = place(&off, P, cap, &a->largest);
    a->work_base = off;
    for (int l = 0; l < (shared ? 1 : L); l++) {
        TAKE(layer[l].qkv, N * 3 * H);
        if (!shared_probs) TAKE(layer[l].probs, P);
        TAKE(layer[l].ctx, N * H);
        TAKE(layer[l].res1, N * H);
        TAKE(layer[l].ln1, N * H);
        TAKE(layer[l].fc1, N * I);
        TAKE(layer[l].gelu, N * I);
        TAKE(layer[l].res2, N * H);
        TAKE(layer[l].ln2, N * H);
    }
    if (stash) a->stash_per_layer = off - a->work_base;
    /* recompute "layer": each layer's output in 16 bits where the storage is
     * (as the values are), else in fp32 */
    a->out16 = recompute_layer && c->storage != BT_F32 && !c->fp32_stash;
    a->stash_slot = stash ? a->stash_per_layer : a->out16 ? (N * H + 15) / 16 * 16 : 0;
    for (int l = 0; l < L; l++) {
        if (shared && l > 0) a->layer[l] = a->layer[0];
        if (shared_probs) a->layer[l].probs = probs_shared;
        if (recompute_layer && !a->out16) TAKE(layer[l].out, N * H);
    }
    if (stash || a->out16) TAKE(xin, N * H);
    /* 2 bytes an element; Pre-LN's first LayerNorm reads its input in fp32 */
    TAKE(emb16, stash && c->norm != BERT_NORM_PRE ? (N * H + 1) / 2 : 0);
    for (int l = 0; l < L; l++) { /* row statistics: fp32, per layer */
        TAKE(layer[l].mean1, N);
        TAKE(layer[l].rstd1, N);
        TAKE(layer[l].mean2, N);
        TAKE(layer[l].rstd2, N);
        TAKE(layer[l].lse, R); /* fused attention's row statistics, fp32 too */
    }
    TAKE(hm, M * H);
    TAKE(t1, M * H);
    TAKE(t1_16, c->storage != BT_F32 ? (M * H + 1) / 2 : 0);
    TAKE(t2, M * H);
    TAKE(t3, M * H);
    TAKE(t3_mean, M);
    TAKE(t3_rstd, M);
    TAKE(logits, M * V);
    TAKE(mlm_loss, M);
    TAKE(mlm_correct, M);
    TAKE(mlm_log_z, M);
    TAKE(cls, (size_t)Bm * H);
    TAKE(pool_pre, (size_t)Bm * H);
    TAKE(pooled, (size_t)Bm * H);
    TAKE(nsp_logits, (size_t)Bm * 2);
    TAKE(nsp_loss, (size_t)Bm);
    TAKE(nsp_correct, (size_t)Bm);
    TAKE(nsp_log_z, (size_t)Bm);
    TAKE(pool_pre16, c->storage != BT_F32 ? ((size_t)Bm * H + 1) / 2 : 0);
    TAKE(pooled16, c->storage != BT_F32 ? ((size_t)Bm * H + 1) / 2 : 0);
    TAKE(nsp_logits16, c->storage != BT_F32 ? (size_t)Bm : 0);
    if (c->norm == BERT_NORM_PRE) {
        TAKE(final_out, N * H);
        TAKE(final_mean, N);
        TAKE(final_rstd, N);
    }
    TAKE(dA, N * H);
    grads16 = grads16 && c->storage != BT_F32;
    TAKE(dA16, grads16 ? (N * H + 1) / 2 : 0); /* 2 bytes an element */
    TAKE(dI16, grads16 ? (N * I + 1) / 2 : 0);
    TAKE(dH, N * H);
    TAKE(dctx, N * H);
    TAKE(dI, N * I);
    TAKE(dqkv, N * 3 * H);
    TAKE(dprobs, P);
    TAKE(pdrop, c->attention_logit_penalty > 0.0f ? P : 0); /* the scores, for its gradient */
    TAKE(attn_delta, R);
    TAKE(dhm, M * H);
    TAKE(dcls, (size_t)Bm * H);
    /* the top layer's rows: the masked and [CLS], padded (bert_top_plan) */
    const size_t padded = (M + (size_t)Bm + BERT_TOP_ROWS_MULTIPLE_MAX - 1) /
                          BERT_TOP_ROWS_MULTIPLE_MAX * BERT_TOP_ROWS_MULTIPLE_MAX;
    const size_t S = padded < N ? padded : N > M + Bm ? N : M + Bm;
    a->top_capacity = (int)S;
    TAKE(top_x, S * H);
    TAKE(top_ctx, S * H);
    a->total = off;
    /* 16-bit storage: the largest operand that two GEMMs read in a layer's
     * backward (bert_operand16), or attention's at once: dctx and the
     * dropped probabilities after it, and dqkv's copy, which its GEMMs
     * write, at the end (bert_attention_bwd); or the MLM logits' gradient,
     * which the cross-entropy writes there (bert_heads.c) */
    if (c->storage != BT_F32) {
        a->operand16 = N * (3 * H > I ? 3 * H : I);
        if (P && N * 4 * H + P > a->operand16) a->operand16 = N * 4 * H + P;
        if (M * V > a->operand16) a->operand16 = M * V;
    }
    a->n_buffers = (int)((off + cap - 1) / cap);
    off = 0;
#undef TAKE
#define TAKE(field, count) (a->field = off, off += ((count) + 15) / 16 * 16)
    TAKE(ids, N);
    TAKE(types, N);
    TAKE(mask, N);
    TAKE(mlm_pos, M);
    TAKE(mlm_labels, M);
    TAKE(nsp_labels, (size_t)Bm);
    TAKE(cls_idx, (size_t)Bm);
    TAKE(top_rows, S);
    TAKE(top_mlm_pos, M);
    TAKE(top_cls, (size_t)Bm);
    TAKE(links, 2 * off); /* the segments of every table above, at twice its offset */
    a->ints_batch = off;
    TAKE(zero_rows, N); /* zeroed once, when the model is built */
    a->ints_total = off;
#undef TAKE
    a->n_layers = L;
    return a;
}

void bert_act_round16(const bert_model *m, bt_ptr x, size_t n) {
    if (m->cfg.storage == BT_F32 || n == 0) return;
    m->be->round16(m->be, x, (bt_dtype)m->cfg.storage, n);
}

size_t bert_activation_bytes(const bert_model *m) {
    const struct bert_act_layout *a = m->act;
    size_t bytes = (a->total + a->ints_total) * 4 + (m->operand16 ? a->operand16 * 2 : 0);
    return bytes + (size_t)m->cfg.num_hidden_layers * a->stash_slot * 2;
}

bt_ptr bert_operand16_room(const bert_model *m, size_t first, size_t n) {
    if (!m->operand16 || !fused(m, BERT_FUSE_CAST) || n == 0 || first + n > m->act->operand16)
        return BT_NO_PTR;
    return (bt_ptr){m->operand16, first * 2};
}

bt_ptr bert_operand16(const bert_model *m, size_t off, size_t n) {
    const bt_ptr half = bert_operand16_room(m, 0, n);
    if (half.buf) m->be->cast(m->be, half, (bt_dtype)m->cfg.storage, act(m, off), BT_F32, n);
    return half;
}

int bert_activation_buffers(const bert_model *m) { return m->act->n_buffers + m->n_stash; }

/* Where field `work_off` of layer l lives in the stash. */
static bt_ptr stash_at(const bert_model *m, int l, size_t work_off) {
    const struct bert_act_layout *a = m->act;
    const size_t slot = (size_t)(l % m->stash_layers) * a->stash_slot;
    return (bt_ptr){m->stash[l / m->stash_layers], (slot + (work_off - a->work_base)) * 2};
}

bt_ptr bert_act_half(const bert_model *m, int layer, size_t off) {
    const struct bert_act_layout *a = m->act;
    if (!m->gemm16 || !a->stash_per_layer || layer < 0 || off < a->work_base ||
        off >= a->work_base + a->stash_per_layer)
        return (bt_ptr){NULL, 0};
    return stash_at(m, layer, off);
}

/* Whether the saved activation at working-set offset off of layer `layer` is
 * read by GEMMs only, which with gemm16 take it from the stash: the QKV
 * projection, GELU's output and the context (not the top layer's, whose rows
 * bert_top_enter gathers). Its fp32 copy is then never made. */
static bool read_by_gemms_only(const bert_model *m, const bert_tape *tape, int layer,
                               size_t off) {
    const bert_layer_acts *la = &m->act->layer[0]; /* with a stash every layer's offsets */
    return m->gemm16 &&
           (off == la->qkv || off == la->gelu || (off == la->ctx && layer != tape->top_layer));
}

/* Whether layer l's backward reads the fp32 copy of working-set offset off,
 * which the unstash must then make. Not the values only GEMMs read
 * (read_by_gemms_only), nor the pre-activation fc1, which the fused
 * bias_gelu_bwd reads from the stash, nor the residual sums res1 and res2,
 * which layernorm_bwd reads from there (op_layernorm_bwd), nor the
 * probabilities where the backward drops them out (attn_dropout) in the
 * fused softmax, which reads them from there too; with gemm16 not
 * the LayerNorm outputs either, which in the backward only the linear
 * layers' weight-gradient GEMMs read (from the stash): LayerNorm's backward
 * takes its input (res1, res2, Pre-LN's layer input) and the residual joins
 * only gradients. */
static bool backward_reads_fp32(const bert_model *m, const bert_tape *tape, int l, size_t off,
                                bool attn_dropout) {
    const bert_layer_acts *la = &m->act->layer[0];
    if (read_by_gemms_only(m, tape, l, off)) return false;
    if (off == la->fc1 && fused(m, BERT_FUSE_GELU)) return false; /* bias_gelu_bwd: 16 bits */
    if (off == la->res1 || off == la->res2) return false; /* layernorm_bwd reads 16 bits */
    /* with dropout the fused dropout_softmax_bwd and the dropout recomputed
     * for dV read the probabilities in 16 bits (bert_attention_bwd) */
    if (off == la->probs && attn_dropout && fused(m, BERT_FUSE_ATTENTION)) return false;
    return !(m->gemm16 && (off == la->ln1 || off == la->ln2));
}

/* Whether offset off of layer `layer` goes through the stash. */
static bool in_stash(const bert_model *m, int layer, size_t off) {
    const struct bert_act_layout *a = m->act;
    return a->stash_per_layer && layer >= 0 && off >= a->work_base &&
           off < a->work_base + a->stash_per_layer;
}

bt_ptr bert_act_stashed(const bert_model *m, int layer, size_t off) {
    return in_stash(m, layer, off) ? stash_at(m, layer, off) : BT_NO_PTR;
}

void bert_act_stored16(const bert_model *m, int layer, size_t off, size_t n) {
    if (m->cfg.storage == BT_F32 || n == 0 || !in_stash(m, layer, off)) return;
    m->be->cast(m->be, stash_at(m, layer, off), (bt_dtype)m->cfg.storage, act(m, off), BT_F32, n);
}

void bert_act_store16(const bert_model *m, const bert_tape *tape, int layer, size_t off,
                      size_t n) {
    if (in_stash(m, layer, off)) {
        const bt_dtype dt = (bt_dtype)m->cfg.storage;
        const bt_ptr slot = stash_at(m, layer, off);
        m->be->cast(m->be, slot, dt, act(m, off), BT_F32, n);
        if (!read_by_gemms_only(m, tape, layer, off))
            m->be->cast(m->be, act(m, off), BT_F32, slot, dt, n);
    } else {
        bert_act_round16(m, act(m, off), n);
    }
}

bt_ptr bert_act_slot16(const bert_model *m, const bert_tape *tape, int layer, size_t off,
                       bool rounded) {
    if (m->cfg.storage == BT_F32 || !in_stash(m, layer, off)) return BT_NO_PTR;
    if (!rounded && !read_by_gemms_only(m, tape, layer, off)) return BT_NO_PTR;
    return stash_at(m, layer, off);
}

/* The saved activations of the layer in flight that the 16-bit stash holds
 * (offsets into the working set, sizes for this batch); returns the count. */
static int stashed_spans(const bert_model *m, const bert_tape *tape, size_t off[9],
                         size_t n[9]) {
    const bert_layer_acts *la = &m->act->layer[0];
    const size_t N = (size_t)tape->B * tape->T, H = m->cfg.hidden_size,
                 I = m->cfg.intermediate_size,
                 P = m->fused_attention || m->cfg.recompute != BERT_RECOMPUTE_NONE
                         ? 0 /* none, or outside the working set */
                         : (size_t)tape->B * m->cfg.num_attention_heads * tape->T * tape->T;
    const size_t offs[9] = {la->qkv, la->probs, la->ctx, la->res1, la->ln1,
                            la->fc1, la->gelu,  la->res2, la->ln2};
    const size_t counts[9] = {N * 3 * H, P, N * H, N * H, N * H, N * I, N * I, N * H, N * H};
    memcpy(off, offs, sizeof offs);
    memcpy(n, counts, sizeof counts);
    return 9;
}

void bert_act_stash_layer(const bert_model *m, const bert_tape *tape, size_t out) {
    if (!m->act->stash_per_layer) return;
    m->be->copy(m->be, act(m, m->act->xin), act(m, out),
                (size_t)tape->B * tape->T * m->cfg.hidden_size * 4);
}

void bert_act_keep_output(const bert_model *m, const bert_tape *tape, int l, size_t out) {
    const size_t n = (size_t)tape->B * tape->T * m->cfg.hidden_size;
    if (!m->act->out16) {
        m->be->copy(m->be, act(m, m->act->layer[l].out), act(m, out), n * 4);
        return;
    }
    m->be->cast(m->be, stash_at(m, l, m->act->work_base), (bt_dtype)m->cfg.storage, act(m, out),
                BT_F32, n);
    m->be->copy(m->be, act(m, m->act->xin), act(m, out), n * 4);
}

void bert_act_restore_output(const bert_model *m, const bert_tape *tape, int l) {
    if (!m->act->out16) return;
    m->be->cast(m->be, act(m, m->act->xin), BT_F32, stash_at(m, l, m->act->work_base),
                (bt_dtype)m->cfg.storage, (size_t)tape->B * tape->T * m->cfg.hidden_size);
}

void bert_act_unstash_layer(const bert_model *m, const bert_tape *tape, int l, int before,
                            size_t before_out, bool attn_dropout) {
    if (!m->act->stash_per_layer) return;
    bt_backend *be = m->be;
    const bt_dtype dt = (bt_dtype)m->cfg.storage;
    size_t off[9], n[9];
    for (int i = 0, k = stashed_spans(m, tape, off, n); i < k; i++)
        if (n[i] && backward_reads_fp32(m, tape, l, off[i], attn_dropout))
            be->cast(be, act(m, off[i]), BT_F32, stash_at(m, l, off[i]), dt, n[i]);
    /* Post-LN's layer input meets only the QKV projection's GEMM in the
     * backward, which reads the stash copy (bert.c's half_input) */
    const bool input_in_gemm_only = m->gemm16 && fused(m, BERT_FUSE_CAST) &&
                                    m->cfg.norm != BERT_NORM_PRE;
    if (before >= 0 && !input_in_gemm_only)
        be->cast(be, act(m, m->act->xin), BT_F32, stash_at(m, before, before_out), dt,
                 (size_t)tape->B * tape->T * m->cfg.hidden_size);
}

