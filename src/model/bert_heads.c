/* The pre-training heads (llm.c style, as bert.c's layers): the MLM head
 * at the masked rows and the NSP head at the [CLS] rows of the encoder's
 * output, each with its loss and its gradient, and their backwards. */
#include "bert_internal.h"
#include "bert_ops.h"

#include <string.h>

/* The MLM logits' gradient in 16 bits only, where the operand16 buffer
 * holds it (16-bit GEMM hardware): xent writes it there (over the logits,
 * which the decoder's bias_add writes there in 16 bits), and the decoder's
 * backward reads it there, its GEMMs with no conversion and its bias
 * gradient in half the bytes. Nothing between the head's forward and its
 * backward uses operand16. BT_NO_PTR: the gradient in the logits, fp32. */
static bt_ptr mlm_dlogits16(const bert_run *r) {
    return bert_operand16_room(r->m, 0, (size_t)r->tape->n_head * r->m->cfg.vocab_size);
}

/* The dense layer's output in 16 bits alone (t1_16), where the GEMMs run in
 * 16 bits: its biased GEMM writes it there and GELU reads it there, in the
 * forward and, fused, in the backward (op_linear_gelu, op_bias_gelu_bwd);
 * else buf NULL (t1 in fp32). */
static bt_ptr mlm_t1_16(const bert_run *r) {
    const bert_model *m = r->m;
    return m->gemm16 && m->cfg.storage != BT_F32 ? act(m, m->act->t1_16) : BT_NO_PTR;
}

/* MLM head at the M masked rows of hidden: dense -> GELU -> LayerNorm -> tied
 * decoder + bias, the loss and its gradient (into the logits, or in 16 bits
 * alone into operand16 over the 16-bit logits: mlm_dlogits16). */
void bert_mlm_head_fwd(bert_run *r, size_t hidden) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    bert_stats *st = r->st;
    const int H = m->cfg.hidden_size, V = m->cfg.vocab_size, M = r->tape->n_head;
    m->be->gather_rows(m->be, act(m, a->hm), act(m, hidden), ints(m, bert_top_mlm_rows(r)), M, H);
    if (m->cfg.storage == BT_F32) { /* the bias under the GEMM (op_linear's fp32 bits) */
        op_linear(r, a->t1, a->hm, v->head_w, v->head_b, M, H, H);
        op_gelu(r, a->t2, a->t1, (size_t)M * H);
    } else { /* op_linear's and op_gelu's bits, rounded by the ops that write them */
        op_linear_gelu(r, a->t2, a->t1, mlm_t1_16(r), a->hm, v->head_w, v->head_b, M, H, H);
    }
    op_layernorm(r, a->t3, a->t3_mean, a->t3_rstd, a->t2, v->head_ln_w, v->head_ln_b, M);
    /* where the gradient goes to operand16 in 16 bits and nothing else reads the
     * logits, they go there in 16 bits too, and the gradient over them */
    const bt_ptr d16 = mlm_dlogits16(r);
    if (d16.buf && !r->pass->mlm_logits_out) {
        op_linear_to16(r, d16, a->logits, a->t3, v->wte, v->dec_b, M, H, V);
        op_xent_from16(r, d16, a->mlm_loss, a->mlm_correct, a->mlm_log_z, a->mlm_labels, M, V,
                       r->pass->mlm_grad_scale, m->cfg.z_loss);
    } else {
        op_linear(r, a->logits, a->t3, v->wte, v->dec_b, M, H, V);
        if (r->pass->mlm_logits_out) /* the masked rows' */
            m->be->download(m->be, r->pass->mlm_logits_out, act(m, a->logits),
                            (size_t)r->bt->n_masked * V * 4);
        op_xent(r, a->logits, a->mlm_loss, a->mlm_correct, a->mlm_log_z, a->mlm_labels, M, V,
                r->pass->mlm_grad_scale, m->cfg.z_loss, d16);
    }
    if (m->cfg.z_loss > 0.0f)
        st->mlm_log_z_sq = stat_sum(r, BT_REDUCE_SUMSQ, act(m, a->mlm_log_z), (size_t)M,
                                    &st->ticket.log_z_sq);
    st->mlm_loss_sum =
        stat_sum(r, BT_REDUCE_SUM, act(m, a->mlm_loss), (size_t)M, &st->ticket.mlm_loss);
    st->mlm_correct =
        stat_sum(r, BT_REDUCE_SUM, act(m, a->mlm_correct), (size_t)M, &st->ticket.mlm_correct);
    st->n_masked = r->bt->n_masked;
}

bool bert_heads_distinct(const bert_batch *bt, bool nsp, unsigned char *seen) {
    const size_t N = (size_t)bt->B * bt->T;
    memset(seen, 0, N);
    bool distinct = true;
    for (int b = 0; nsp && b < bt->B; b++) seen[(size_t)b * bt->T] = 1;
    for (int i = 0; i < bt->n_masked && distinct; i++) {
        const int32_t row = bt->mlm_positions[i];
        distinct = row >= 0 && (size_t)row < N && !seen[row];
        if (distinct) seen[row] = 1;
    }
    return distinct;
}

/* Backward of bert_mlm_head_fwd (the logits, or mlm_dlogits16, hold d loss /
 * d logits): d hidden at the masked rows into t2 (free again), stored
 * (rounded) where d_hidden_stored, else as its GEMM wrote it. The decoder's
 * input gradient is not stored (rounded) by a pass: the LayerNorm backward
 * rounds it as it reads it. GELU's backward: with the GELU fusion one op
 * with the dense layer's bias gradient, rounding as it writes (and its
 * 16-bit copy for the GEMMs where operand16 has room); else gelu_bwd,
 * unrounded, its reader rounding (op_linear_bwd_unrounded). */
void bert_mlm_head_bwd(bert_run *r, bool d_hidden_stored) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    const int H = m->cfg.hidden_size, V = m->cfg.vocab_size, M = r->tape->n_head;
    const bt_ptr d16 = mlm_dlogits16(r);
    if (d16.buf)
        op_linear_bwd_from16(r, a->dhm, BT_NO_PTR, v->wte, v->dec_b, d16, a->t3, M, H, V);
    else
        op_linear_bwd_given16(r, a->dhm, v->wte, v->dec_b, a->logits, BT_NO_PTR, a->t3, M, H, V);
    op_layernorm_bwd(r, a->dhm, v->head_ln_w, v->head_ln_b, a->dhm, a->t2, a->t3_mean, a->t3_rstd,
                     M, NULL);
    if (fused(m, BERT_FUSE_GELU)) {
        bt_ptr d_16;
        op_bias_gelu_bwd(r, a->dhm, BT_NO_PTR, a->t1, mlm_t1_16(r), v->head_b, M, H, &d_16);
        op_linear_bwd_given16(r, a->t2, v->head_w, NO_BIAS, a->dhm, d_16, a->hm, M, H, H);
    } else {
        op_gelu_bwd(r, a->dhm, a->dhm, a->t1, (size_t)M * H, false);
        op_linear_bwd_unrounded(r, a->t2, v->head_w, v->head_b, a->dhm, a->hm, M, H, H);
    }
    if (d_hidden_stored) op_stored(r, a->t2, (size_t)M * H);
}

/* The NSP head in 16 bits: where the GEMMs run in 16 bits under the cast
 * fusion and the logits are not read back, the pooler's output, tanh's and
 * the logits live in 16 bits alone (pool_pre16, pooled16, nsp_logits16),
 * written rounded by the ops that make them (a biased 16-bit GEMM,
 * tanh_fwd, the GEMM again) and read so by the next: no rounding pass and
 * no fp32 copy. The backward's gradients take the same homes: the logits'
 * gradient over the logits (xent), the classifier's input gradient and
 * tanh's over pool_pre16. */
static bool nsp16(const bert_run *r) {
    const bert_model *m = r->m;
    return m->gemm16 && m->cfg.storage != BT_F32 && fused(m, BERT_FUSE_CAST) &&
           !r->pass->nsp_logits_out;
}

/* The GEMMs of the ops between this and the next call read activation off
 * from x16 (its only copy); BT_NO_PTR: as before (the heads run with none). */
static void nsp_operand16(bert_run *r, size_t off, bt_ptr x16) {
    r->half_input = x16;
    r->half_input_of = off;
}

/* NSP head on the [CLS] rows of hidden: pooler dense -> tanh -> 2-way
 * classifier, the loss and its gradient (into the logits, or in 16 bits:
 * nsp16). */
void bert_nsp_head_fwd(bert_run *r, size_t hidden) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    bert_stats *st = r->st;
    const int B = r->bt->B, H = m->cfg.hidden_size;
    m->be->gather_rows(m->be, act(m, a->cls), act(m, hidden), ints(m, bert_top_cls_rows(r)), B, H);
    if (nsp16(r)) {
        const bt_dtype s = (bt_dtype)m->cfg.storage;
        const bt_ptr pre16 = act(m, a->pool_pre16), y16 = act(m, a->pooled16),
                     z16 = act(m, a->nsp_logits16);
        op_linear_to16(r, pre16, a->pool_pre, a->cls, v->pool_w, v->pool_b, B, H, H);
        m->be->tanh_fwd(m->be, y16, pre16, (size_t)B * H, s);
        nsp_operand16(r, a->pooled, y16);
        op_linear_to16(r, z16, a->nsp_logits, a->pooled, v->nsp_w, v->nsp_b, B, H, 2);
        nsp_operand16(r, 0, BT_NO_PTR);
        op_xent_from16(r, z16, a->nsp_loss, a->nsp_correct, a->nsp_log_z, a->nsp_labels, B, 2,
                       r->pass->nsp_grad_scale, 0.0f);
    } else {
        op_linear(r, a->pool_pre, a->cls, v->pool_w, v->pool_b, B, H, H);
        op_tanh(r, a->pooled, a->pool_pre, (size_t)B * H);
        op_linear(r, a->nsp_logits, a->pooled, v->nsp_w, v->nsp_b, B, H, 2);
        if (r->pass->nsp_logits_out)
            m->be->download(m->be, r->pass->nsp_logits_out, act(m, a->nsp_logits),
                            (size_t)B * 2 * 4);
        op_xent(r, a->nsp_logits, a->nsp_loss, a->nsp_correct, a->nsp_log_z, a->nsp_labels, B,
                2, r->pass->nsp_grad_scale, 0.0f, BT_NO_PTR);
    }
    st->nsp_loss_sum =
        stat_sum(r, BT_REDUCE_SUM, act(m, a->nsp_loss), (size_t)B, &st->ticket.nsp_loss);
    st->nsp_correct =
        stat_sum(r, BT_REDUCE_SUM, act(m, a->nsp_correct), (size_t)B, &st->ticket.nsp_correct);
    st->n_nsp = B;
}

/* Backward of bert_nsp_head_fwd: d hidden at the [CLS] rows into pool_pre (free
 * again), stored (rounded) where d_hidden_stored, else as its GEMM wrote it.
 * tanh's gradient is not stored by a pass: in 16 bits tanh_bwd rounds it as
 * it writes it, else the pooler's backward rounds it as it reads it
 * (op_linear_bwd_unrounded). */
void bert_nsp_head_bwd(bert_run *r, bool d_hidden_stored) {
    const bert_model *m = r->m;
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    const int B = r->bt->B, H = m->cfg.hidden_size;
    if (nsp16(r)) {
        const bt_ptr d16 = act(m, a->pool_pre16), y16 = act(m, a->pooled16);
        nsp_operand16(r, a->pooled, y16);
        op_linear_bwd_from16(r, 0, d16, v->nsp_w, v->nsp_b, act(m, a->nsp_logits16), a->pooled,
                             B, H, 2);
        nsp_operand16(r, 0, BT_NO_PTR);
        m->be->tanh_bwd(m->be, d16, d16, y16, (size_t)B * H, (bt_dtype)m->cfg.storage);
        op_linear_bwd_from16(r, a->pool_pre, BT_NO_PTR, v->pool_w, v->pool_b, d16, a->cls, B, H,
                             H);
    } else {
        op_linear_bwd(r, a->dcls, v->nsp_w, v->nsp_b, a->nsp_logits, a->pooled, B, H, 2);
        op_tanh_bwd(r, a->dcls, a->dcls, a->pooled, (size_t)B * H, false);
        op_linear_bwd_unrounded(r, a->pool_pre, v->pool_w, v->pool_b, a->dcls, a->cls, B, H, H);
    }
    if (d_hidden_stored) op_stored(r, a->pool_pre, (size_t)B * H);
}
