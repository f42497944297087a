/* BERT forward and backward (llm.c style: one short function per block), as
 * the model's ops (bert_ops.h). Shapes: N = B*T token rows, M = masked rows,
 * H hidden, I intermediate, NH heads of size D, V vocabulary. Post-LN,
 * exactly as Hugging Face BertForPreTraining, or (model.norm "pre") Pre-LN:
 * x + f(LN(x)) per block and one LayerNorm after the last layer. The top
 * layer's rows (bert_tape) are bert_top.c's; here a layer only asks whether
 * it is the top one. The embeddings are bert_embeddings.c's, the MLM and NSP
 * heads bert_heads.c's. */
#include "bert_internal.h"
#include "bert_ops.h"
#include "backends/row_links.h"
#include "util/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The batch's bound on its masked rows (bert_batch.masked_bound) where it
 * holds them all, else 0: the head's and the top layer's padding on a
 * device that replays graphs. */
static int covering_bound(const bert_batch *bt) {
    return bt->masked_bound > 0 && bt->masked_bound >= bt->n_masked ? bt->masked_bound : 0;
}

/* The MLM head's rows for the batch's M masked ones: M padded up to a
 * multiple of the top layer's (fewer shapes from batch to batch for cuBLAS;
 * 1: none added), or where the device replays graphs, to the batch's bound
 * (one shape) or the capacity above it; within the model's capacity; 0
 * without any. */
static int head_rows(const bert_model *m, const bert_batch *bt) {
    const int M = bt->n_masked, bound = covering_bound(bt);
    if (M > 0 && m->rows_to_capacity)
        return bound > 0 && bound < m->max_masked ? bound
               : M > m->max_masked                ? M
                                                  : m->max_masked;
    const int k = m->top_rows_multiple;
    const int padded = M > 0 && k > 1 ? (M + k - 1) / k * k : M;
    return padded < m->max_masked ? padded : M > m->max_masked ? M : m->max_masked;
}

/* The batch's int32 inputs to the device, with the top layer's rows when
 * top_layer >= 0; returns how many rows that is (0: no top layer), and the
 * head's rows in *n_head. A row added to the head's reads row 0 and has the
 * label -1, which gives it no loss and no gradient. */
static int upload_batch(bert_model *m, const bert_batch *bt, int top_layer, int *n_head,
                        int *top_read) {
    const struct bert_act_layout *a = m->act;
    int32_t *host = m->ints_host;
    memset(host, 0, a->ints_batch * sizeof *host);
    size_t N = (size_t)bt->B * bt->T;
    memcpy(host + a->ids, bt->input_ids, N * 4);
    memcpy(host + a->types, bt->token_type_ids, N * 4);
    memcpy(host + a->mask, bt->attention_mask, N * 4);
    const int Mh = head_rows(m, bt);
    *n_head = Mh;
    if (bt->n_masked > 0) {
        memcpy(host + a->mlm_pos, bt->mlm_positions, (size_t)bt->n_masked * 4);
        memcpy(host + a->mlm_labels, bt->mlm_labels, (size_t)bt->n_masked * 4);
        for (int i = bt->n_masked; i < Mh; i++) host[a->mlm_labels + i] = -1;
    }
    for (int b = 0; b < bt->B; b++) {
        host[a->nsp_labels + b] = bt->nsp_labels ? bt->nsp_labels[b] : -1;
        host[a->cls_idx + b] = b * bt->T;
    }
    const bool nsp = m->cfg.nsp && bt->nsp_labels;
    /* the top layer's rows (at most the masked and [CLS] ones) padded as the head's */
    const int bound = covering_bound(bt) > 0 ? covering_bound(bt) + (nsp ? bt->B : 0) : 0;
    const int multiple = !m->rows_to_capacity ? m->top_rows_multiple
                         : bound > 0 && bound < a->top_capacity ? bound
                                                                : a->top_capacity;
    *top_read = 0;
    const int S = top_layer >= 0 ? bert_top_plan(a, bt, nsp, multiple, host, top_read) : 0;
    /* the segments of the tables the scatters read: dwte's rows by id (pad in
     * none), the heads' rows, the top layer's */
    const struct { size_t off; int n, skip; } tables[] = {
        {a->ids, (int)N, m->cfg.pad_id}, {a->mlm_pos, Mh, -1}, {a->cls_idx, bt->B, -1},
        {a->top_rows, S, -1}, {a->top_mlm_pos, S ? Mh : 0, -1},
        {a->top_cls, S && nsp ? bt->B : 0, -1}};
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
        if (bt_row_links(host + tables[i].off, tables[i].n, tables[i].skip,
                         host + a->links + 2 * tables[i].off, &m->links_work)) {
            fprintf(stderr, "bertrain: out of host memory staging a batch\n");
            exit(1);
        }
    m->be->upload(m->be, ints(m, 0), host, a->ints_batch * 4); /* host reusable at once */
    return S;
}

/* Geometry shared by a layer's blocks. */
typedef struct {
    int N, H, I; /* N: the rows after attention (the top layer's S, else B*T) */
    float p;     /* hidden dropout (0 outside training) */
    size_t per_sample;
    bool top; /* the top layer */
} layer_dims;

/* Layer l's geometry in this pass. */
static layer_dims dims_of(const bert_run *r, int l) {
    const bert_config *c = &r->m->cfg;
    const bool top = l == r->tape->top_layer;
    return (layer_dims){top ? r->tape->n_top : r->bt->B * r->bt->T, c->hidden_size,
                        c->intermediate_size, r->pass->train ? c->hidden_dropout_prob : 0.0f,
                        (size_t)r->bt->T * c->hidden_size, top};
}

/* Admin's residual scale at the join `site` of layer l (1 but for Admin). */
static float omega_at(const bert_model *m, int l, int site) {
    return m->cfg.norm == BERT_NORM_ADMIN ? m->cfg.admin_omega[2 * l + (site == SITE_FFN_OUT)]
                                          : 1.0f;
}

/* Admin profiling at a join: omega_i = sqrt(1 + the variances of the branches
 * before it), then this branch's variance (dH, all N x H values) joins the sum. */
static void admin_measure(bert_run *r, int l, int site, layer_dims d) {
    bert_model *m = r->m;
    bt_backend *be = m->be;
    const size_t n = (size_t)d.N * d.H;
    const int i = 2 * l + (site == SITE_FFN_OUT);
    double mean = be->sum(be, act(m, m->act->dH), n) / (double)n;
    double var = be->sumsq(be, act(m, m->act->dH), n) / (double)n - mean * mean;
    if (i == 0) r->admin_variance_sum = 1.0; /* the embeddings: unit variance after LN */
    m->cfg.admin_omega[i] = (float)sqrt(r->admin_variance_sum);
    r->admin_variance_sum += var;
}

/* Whether the join at `site` of layer l runs as one fused op: omega = 1, no
 * Admin profiling, not the top layer, whose rows are not the fused op's. */
static bool join_fuses(const bert_run *r, int l, int site) {
    return fused(r->m, BERT_FUSE_JOIN) && omega_at(r->m, l, site) == 1.0f &&
           !r->pass->admin_profile && l != r->tape->top_layer;
}

static int layer_before(const bert_pass *pass, int l);
static size_t layer_output(const bert_model *m, int l);
static bool layer_skipped(const bert_pass *pass, int l);

/* The first layer after l that runs in this pass, or -1 (the heads). */
static int layer_after(const bert_run *r, int l) {
    for (int k = l + 1; k < r->m->cfg.num_hidden_layers; k++)
        if (!layer_skipped(r->pass, k)) return k;
    return -1;
}

/* Whether the embeddings' output goes to its 16-bit copy (emb16) alone,
 * which is all its readers take: with gemm16 under the cast fusion and the
 * 16-bit stash, Post-LN, where the first layer that runs reads its input in
 * its QKV projection's GEMMs (half_input: forward and backward) and in its
 * fused attention join (join_resid16) only. Not where that layer is the top
 * layer (bert_top_enter gathers fp32 rows) or its join is not fused, nor
 * where no layer runs (the heads read fp32). */
static bool emb_in16_only(const bert_run *r) {
    const bert_model *m = r->m;
    if (!m->gemm16 || !m->act->stash_per_layer || m->cfg.norm == BERT_NORM_PRE ||
        !fused(m, BERT_FUSE_CAST))
        return false;
    const int first = layer_after(r, -1);
    return first >= 0 && join_fuses(r, first, SITE_ATTN_OUT);
}

/* The residual of Post-LN's join at `site` of layer l in the storage's 16
 * bits, where the join is fused: the stash copy of the LayerNorm output that
 * it adds (LN1's for the FFN join, the layer before's output for the
 * attention join, or the first layer's emb16: emb_in16_only), whose fp32
 * values are the same 16-bit values; else buf NULL (the residual read in
 * fp32). */
static bt_ptr join_resid16(const bert_run *r, int l, int site) {
    const bert_model *m = r->m;
    if (m->cfg.norm == BERT_NORM_PRE || !join_fuses(r, l, site)) return BT_NO_PTR;
    if (site == SITE_FFN_OUT) return bert_act_slot16(m, r->tape, l, m->act->layer[l].ln1, true);
    const int before = layer_before(r->pass, l);
    if (before < 0) return emb_in16_only(r) ? act(m, m->act->emb16) : BT_NO_PTR;
    return bert_act_slot16(m, r->tape, before, layer_output(m, before), true);
}

/* Whether the fp32 values of the LayerNorm output that Post-LN's join at
 * `site` of layer l writes must be kept: not where every reader takes its
 * stash copy, with gemm16 (the GEMMs read 16-bit copies): LN1's output meets
 * fc1's GEMMs and the FFN join (join_resid16); the layer's output (LN2's)
 * meets the next layer's QKV projection (from half_input, with the cast
 * fusion) and its attention join, and in the backward only the QKV
 * projection's weight-gradient GEMM (from the stash, bert_act.c). Kept
 * before the top layer, whose rows bert_top_enter gathers in fp32, and
 * after the last, whose output the heads read. */
static bool ln_out_kept(const bert_run *r, int l, int site) {
    const bert_model *m = r->m;
    if (!m->gemm16 || m->cfg.norm == BERT_NORM_PRE) return true;
    if (site == SITE_ATTN_OUT) return !join_resid16(r, l, SITE_FFN_OUT).buf;
    const int next = layer_after(r, l);
    return next < 0 || !fused(m, BERT_FUSE_CAST) || !join_resid16(r, next, SITE_ATTN_OUT).buf;
}

/* out = omega * resid + dropout(dH), then (norm not NULL) norm's out =
 * LayerNorm(out): a residual branch's output (in dH, before its bias b)
 * joins the stream. One fused op where it can (join_fuses), reading the
 * residual's 16-bit copy where Post-LN has it, else the ops one by one. */
static void join_fwd(bert_run *r, int l, int site, size_t out, size_t resid, size_t b,
                     const join_norm *norm, layer_dims d) {
    const bert_model *m = r->m;
    const size_t dH = m->act->dH, n = (size_t)d.N * d.H;
    const bt_rng_key key = dropout_key(r->pass, l, site);
    const float omega = omega_at(m, l, site);
    if (join_fuses(r, l, site)) {
        op_join_fused(r, out, norm, dH, b, resid, d.N, d.per_sample, d.p, key,
                      join_resid16(r, l, site), ln_out_kept(r, l, site));
        return;
    }
    op_bias_add(r, dH, b, d.N, d.H);
    if (r->pass->admin_profile) admin_measure(r, l, site, d);
    if (d.p > 0.0f && d.top)
        bert_top_dropout(r, dH, d.N, d.H, d.p, key);
    else if (d.p > 0.0f) /* the branch's dropout, which the join completes */
        m->be->dropout(m->be, act(m, dH), act(m, dH), n, d.per_sample, r->bt->first_sample, d.p,
                       key, BT_F32, BT_NO_PTR, BT_F32);
    op_residual(r, out, omega, resid, dH, n);
    if (norm) op_layernorm(r, norm->out, norm->mean, norm->rstd, out, norm->w, norm->b, d.N);
}

/* Whether the backward may keep gradients in the storage's 16 bits between
 * their writer and readers that take 16 bits (the residual stream's dA
 * between LayerNorm backwards, dH and dI from their GEMMs): 16-bit storage
 * on 16-bit GEMM hardware with one 16-bit copy of each backward operand
 * (bert_operand16_room), where a pass over memory costs more than the
 * conversions it saves. The values are the same in either type: each
 * writer rounds what it writes, or each reader as it reads. */
static bool grads16(const bert_model *m) { return bert_operand16_room(m, 0, 1).buf != NULL; }

/* Exits on dA's values held in dA16 where `reader` would read them from dA:
 * the model's own bookkeeping gone wrong (layer_bwd decides where they are
 * kept in 16 bits from who reads them next). */
static void need_fp32_da(const bert_run *r, const char *reader) {
    if (!r->dA16) return;
    fprintf(stderr, "bertrain: internal error: %s reads dA in fp32, but it is in dA16\n",
            reader);
    exit(1);
}

/* dA = omega * dA + dH: the gradient of a residual join's input, through the
 * residual (dA holds d out) and the branch (dH). ln_next: the next op to
 * read dA is layernorm_bwd, which rounds it as it reads it: no rounding
 * pass here. */
static void join_bwd(bert_run *r, int l, int site, layer_dims d, bool ln_next) {
    const struct bert_act_layout *a = r->m->act;
    need_fp32_da(r, "a residual join's backward");
    const float omega = omega_at(r->m, l, site);
    if (d.top && site == SITE_ATTN_OUT) /* dA: S rows, dH: every row */
        bert_top_join_grad(r, omega, d.N, d.H, false, !ln_next);
    else
        op_residual_bwd(r, a->dA, omega, a->dH, (size_t)d.N * d.H, !ln_next);
}

/* dH = the gradient reaching a residual branch through its output dropout:
 * dropout(dA) with the forward's mask (dA read from dA16 where r->dA16 says
 * it is there). Where the operand16 buffer has room (bert_operand16_room,
 * from element `at`) the dropout writes dH there in 16 bits only, the
 * stored values that the branch's last linear layer reads (its GEMMs and
 * its bias gradient: op_linear_bwd_from16), and returns that copy; else
 * dH in fp32 and buf NULL. Where the LayerNorm backward before has made
 * that copy already (dropped: branch_drop's, else NULL) it returns it. */
static bt_ptr branch_bwd(bert_run *r, int l, int site, layer_dims d, size_t at,
                         const bt_ln_bwd_drop *dropped) {
    const bert_model *m = r->m;
    bt_backend *be = m->be;
    const struct bert_act_layout *a = m->act;
    const bt_rng_key key = dropout_key(r->pass, l, site);
    const size_t n = (size_t)d.N * d.H;
    if (dropped) return dropped->out16; /* the LayerNorm backward before dropped it out */
    if (d.p > 0.0f && !d.top) { /* straight from dA: no copy first */
        const bt_ptr d16 = bert_operand16_room(m, at, n);
        be->dropout(be, d16.buf ? BT_NO_PTR : act(m, a->dH), act(m, r->dA16 ? a->dA16 : a->dA),
                    n, d.per_sample, r->bt->first_sample, d.p, key,
                    r->dA16 ? (bt_dtype)m->cfg.storage : BT_F32, d16, (bt_dtype)m->cfg.storage);
        return d16;
    }
    need_fp32_da(r, "a residual branch's backward");
    be->copy(be, act(m, a->dH), act(m, a->dA), n * 4);
    if (d.p > 0.0f) bert_top_dropout(r, a->dH, d.N, d.H, d.p, key);
    return BT_NO_PTR;
}

/* With the unfused attention on 16-bit GEMM hardware dctx's GEMM writes its
 * 16-bit copy alone at the start of operand16, which attention's GEMMs read:
 * that copy (else buf NULL). The attention branch's dH in 16 bits, which
 * that GEMM reads, goes after it (probabilities recomputed in the backward
 * make no 16-bit copy: op_softmax outside a forward layer). */
static bt_ptr attn_ctx16(const bert_run *r, layer_dims d) {
    const size_t n = (size_t)d.N * d.H;
    const bool room = bert_operand16_room(r->m, 0, 2 * n).buf != NULL;
    return !d.top && !r->m->fused_attention && room ? bert_operand16_room(r->m, 0, n)
                                                    : BT_NO_PTR;
}

/* Where in operand16 the attention branch's dH goes in 16 bits: after
 * attn_ctx16's copy where there is one, else at its start. */
static size_t attn_dh16_at(const bert_run *r, layer_dims d) {
    return attn_ctx16(r, d).buf ? (size_t)d.N * d.H : 0;
}

/* The dropout of a Post-LN branch's gradient (site's) that the LayerNorm
 * backward before branch_bwd makes as it writes dA (layernorm_bwd's drop),
 * where branch_bwd would write dH in 16 bits alone from dA (at element `at`
 * of operand16) and the join's fusion is on; else NULL. Given to branch_bwd,
 * it tells it that the copy is made. */
static const bt_ln_bwd_drop *branch_drop(bert_run *r, int l, int site, layer_dims d, size_t at,
                                         bt_ln_bwd_drop *drop) {
    const bert_model *m = r->m;
    const bt_ptr d16 = bert_operand16_room(m, at, (size_t)d.N * d.H);
    if (d.p <= 0.0f || d.top || !fused(m, BERT_FUSE_JOIN) || !d16.buf) return NULL;
    *drop = (bt_ln_bwd_drop){d16, (bt_dtype)m->cfg.storage, d.per_sample, r->bt->first_sample,
                             d.p, dropout_key(r->pass, l, site)};
    return drop;
}

/* Attention block: res1 = resid + dropout(attention(in) Wo + bo), then
 * LayerNorm(res1) when norm is not NULL.  in, resid: (N, H); res1 and its
 * norm: the top layer's S rows, or all N */
static void attn_block_fwd(bert_run *r, int l, size_t in, size_t resid, const join_norm *norm) {
    const struct bert_act_layout *a = r->m->act;
    const bert_layer_views *w = &r->m->v.layer[l];
    const layer_dims d = dims_of(r, l);
    /* the projection (N, 3H): every row, for the keys and values */
    op_linear(r, a->layer[l].qkv, in, w->qkv_w, w->qkv_b, r->bt->B * r->bt->T, d.H, 3 * d.H);
    bert_attention_fwd(r, l);
    size_t ctx = a->layer[l].ctx;
    if (d.top) bert_top_enter(r, &ctx, &resid); /* from here on, the heads' rows */
    op_linear_nobias(r, a->dH, ctx, w->ao_w, d.N, d.H, d.H);
    join_fwd(r, l, SITE_ATTN_OUT, a->layer[l].res1, resid, w->ao_b, norm, d);
}

/* How a block's backward leaves dH, its input gradient: rounded by a pass
 * (DH_STORED), or unrounded for its reader, a LayerNorm backward, which
 * rounds it as it reads it: in fp32 (DH_UNROUNDED), or where the GEMM that
 * writes it runs in 16 bits and the reader takes them, in the storage's 16
 * bits (DH_UNROUNDED_OR_16: a join's LayerNorm backward). */
typedef enum { DH_STORED, DH_UNROUNDED, DH_UNROUNDED_OR_16 } dh_store;

/* Backward of attn_block_fwd's branch: dA holds d res1 (the top layer: at its
 * rows); dH gets d in (every row), as dh says. Returns whether dH was
 * written in the storage's 16 bits (DH_UNROUNDED_OR_16 only). dropped: the
 * branch's gradient as the LayerNorm backward before made it (branch_bwd). */
static bool attn_block_bwd(bert_run *r, int l, size_t in, dh_store dh,
                           const bt_ln_bwd_drop *dropped) {
    const struct bert_act_layout *a = r->m->act;
    const bert_layer_views *w = &r->m->v.layer[l];
    const layer_dims d = dims_of(r, l);
    const size_t n = (size_t)d.N * d.H;
    const bt_ptr ctx16 = attn_ctx16(r, d);
    const bt_ptr dh16 = branch_bwd(r, l, SITE_ATTN_OUT, d, attn_dh16_at(r, d), dropped);
    const bool dctx16 = ctx16.buf && dh16.buf;
    if (d.top) {
        bert_top_ctx_bwd(r, w, d.N, d.H);
    } else if (dctx16) {
        op_linear_bwd_from16(r, 0, ctx16, w->ao_w, w->ao_b, dh16, a->layer[l].ctx, d.N, d.H, d.H);
    } else {
        if (dh16.buf)
            op_linear_bwd_from16(r, a->dctx, BT_NO_PTR, w->ao_w, w->ao_b, dh16, a->layer[l].ctx,
                                 d.N, d.H, d.H);
        else
            op_linear_bwd_given16(r, a->dctx, w->ao_w, w->ao_b, a->dH, dh16, a->layer[l].ctx,
                                  d.N, d.H, d.H);
        /* dctx meets only bert_operand16's cast (attention's GEMMs), which rounds */
        if (r->m->fused_attention || !bert_operand16_room(r->m, 0, n).buf) op_stored(r, a->dctx, n);
    }
    const bt_ptr dqkv16 = bert_attention_bwd(r, l, dctx16);
    const int N = r->bt->B * r->bt->T;
    const bool dh_16bit = dh == DH_UNROUNDED_OR_16 && dqkv16.buf;
    if (dqkv16.buf)
        op_linear_bwd_from16(r, a->dH, dh_16bit ? act(r->m, a->dH) : BT_NO_PTR, w->qkv_w, w->qkv_b,
                             dqkv16, in, N, d.H, 3 * d.H);
    else
        op_linear_bwd_unrounded(r, a->dH, w->qkv_w, w->qkv_b, a->dqkv, in, N, d.H, 3 * d.H);
    if (dh == DH_STORED) op_stored(r, a->dH, (size_t)N * d.H);
    return dh_16bit;
}

/* Feed-forward block: res2 = resid + dropout(gelu(in W1 + b1) W2 + b2), then
 * LayerNorm(res2) when norm is not NULL.  (N, H) */
static void ffn_block_fwd(bert_run *r, int l, size_t in, size_t resid, const join_norm *norm) {
    const struct bert_act_layout *a = r->m->act;
    const bert_layer_acts *la = &a->layer[l];
    const bert_layer_views *w = &r->m->v.layer[l];
    const layer_dims d = dims_of(r, l);
    op_linear_gelu(r, la->gelu, la->fc1, BT_NO_PTR, in, w->fc1_w, w->fc1_b, d.N, d.H, d.I);
    op_linear_nobias(r, a->dH, la->gelu, w->fc2_w, d.N, d.I, d.H);
    join_fwd(r, l, SITE_FFN_OUT, la->res2, resid, w->fc2_b, norm, d);
}

/* Backward of ffn_block_fwd's branch: dA holds d res2; dH gets d in (the
 * residual's share is join_bwd's), as dh says. Returns whether dH was
 * written in the storage's 16 bits (DH_UNROUNDED_OR_16 only). dropped: as
 * attn_block_bwd's. */
static bool ffn_block_bwd(bert_run *r, int l, size_t in, dh_store dh,
                          const bt_ln_bwd_drop *dropped) {
    const struct bert_act_layout *a = r->m->act;
    const bert_layer_acts *la = &a->layer[l];
    const bert_layer_views *w = &r->m->v.layer[l];
    const layer_dims d = dims_of(r, l);
    const bt_ptr dh16 = branch_bwd(r, l, SITE_FFN_OUT, d, 0, dropped);
    /* bias_gelu_bwd, dI's one reader where fused, rounds it: on 16-bit GEMM hardware fc2's
     * input-gradient GEMM writes it in 16 bits, which it reads as they are */
    const bool gelu_fused = fused(r->m, BERT_FUSE_GELU);
    const bt_ptr di_in16 = gelu_fused && grads16(r->m) ? act(r->m, a->dI16) : BT_NO_PTR;
    if (dh16.buf)
        op_linear_bwd_from16(r, a->dI, di_in16, w->fc2_w, w->fc2_b, dh16, la->gelu, d.N, d.I, d.H);
    else if (di_in16.buf)
        op_linear_bwd_to16(r, di_in16, w->fc2_w, w->fc2_b, a->dH, dh16, la->gelu, d.N, d.I, d.H);
    else
        op_linear_bwd_given16(r, a->dI, w->fc2_w, w->fc2_b, a->dH, dh16, la->gelu, d.N, d.I,
                              d.H);
    if (!gelu_fused) op_stored(r, a->dI, (size_t)d.N * d.I);
    bt_ptr di16;
    const bool bias_done =
        op_bias_gelu_bwd(r, a->dI, di_in16, la->fc1, BT_NO_PTR, w->fc1_b, d.N, d.I, &di16);
    const size_t b1 = bias_done ? NO_BIAS : w->fc1_b;
    const bool dh_16bit = dh == DH_UNROUNDED_OR_16 && di16.buf;
    if (dh_16bit)
        op_linear_bwd_to16(r, act(r->m, a->dH), w->fc1_w, b1, a->dI, di16, in, d.N, d.H, d.I);
    else
        op_linear_bwd_given16(r, a->dH, w->fc1_w, b1, a->dI, di16, in, d.N, d.H, d.I);
    if (dh == DH_STORED) op_stored(r, a->dH, (size_t)d.N * d.H);
    return dh_16bit;
}

/* One encoder layer, x_in (N, H) -> layer output (N, H); the top layer's
 * output has only the S rows the heads read.
 * Post-LN: ln1 = LN1(x + attn(x)); ln2 = LN2(ln1 + ffn(ln1)), the output.
 * Admin:   as Post-LN with x and ln1 scaled by their omegas in the sums.
 * Pre-LN:  res1 = x + attn(LN1(x)); res2 = res1 + ffn(LN2(res1)), the output. */
static void layer_fwd(bert_run *r, int l, size_t x_in) {
    const bert_layer_acts *la = &r->m->act->layer[l];
    const bert_layer_views *w = &r->m->v.layer[l];
    const join_norm norm1 = {la->ln1, la->mean1, la->rstd1, w->ln1_w, w->ln1_b},
                    norm2 = {la->ln2, la->mean2, la->rstd2, w->ln2_w, w->ln2_b};
    if (r->m->cfg.norm == BERT_NORM_PRE) {
        op_layernorm(r, la->ln1, la->mean1, la->rstd1, x_in, w->ln1_w, w->ln1_b,
                     r->bt->B * r->bt->T);
        attn_block_fwd(r, l, la->ln1, x_in, &norm2); /* res1, ln2 = LN2(res1) */
        ffn_block_fwd(r, l, la->ln2, la->res1, NULL);
    } else {
        attn_block_fwd(r, l, x_in, x_in, &norm1);        /* res1, ln1 = LN1(res1) */
        ffn_block_fwd(r, l, la->ln1, la->ln1, &norm2); /* res2, ln2 = LN2(res2) */
    }
}

/* A residual join's backward and the LayerNorm's before it (w, b; x, mean,
 * rstd of the forward), one op: dA (or dA16 where r->dA16) plus the
 * branch's dH (in 16 bits where dh16) into dA, or into dA16 where out16
 * (r->dA16 then says which). */
static void join_layernorm_bwd(bert_run *r, size_t w, size_t b, bool dh16, bool out16, size_t x,
                               size_t mean, size_t rstd, int rows, const bt_ln_bwd_drop *drop) {
    const struct bert_act_layout *a = r->m->act;
    const unsigned halves =
        (dh16 ? LN_DBRANCH16 : 0) | (r->dA16 ? LN_DY16 : 0) | (out16 ? LN_DX16 : 0);
    op_join_layernorm_bwd(r, out16 ? a->dA16 : a->dA, w, b, r->dA16 ? a->dA16 : a->dA, a->dH,
                          halves, x, mean, rstd, rows, drop);
    r->dA16 = out16;
}

/* Whether layer l's attention join (its dH into dA) is left to the
 * embeddings' backward, whose dropout adds the two as it reads them
 * (add_dropout): the first layer that runs, not the top one (its join is
 * its own), with the join fusion and omega 1. */
static bool emb_takes_join(const bert_run *r, int l, layer_dims d) {
    return layer_before(r->pass, l) < 0 && !d.top && fused(r->m, BERT_FUSE_JOIN) &&
           omega_at(r->m, l, SITE_ATTN_OUT) == 1.0f;
}

/* Backward of layer_fwd: dA holds d(layer output); on return it holds d(x_in),
 * or with r->pending_join set d(x_in) less dH, the attention branch's share
 * (in 16 bits where r->pending_join16), which the next op adds. */
static void layer_bwd(bert_run *r, int l, size_t x_in) {
    const struct bert_act_layout *a = r->m->act;
    const bert_layer_acts *la = &a->layer[l];
    const bert_layer_views *w = &r->m->v.layer[l];
    const layer_dims d = dims_of(r, l); /* d.N: the rows after attention */
    const int N = r->bt->B * r->bt->T;
    if (r->m->cfg.norm == BERT_NORM_PRE) {
        /* each branch's dH read by its LayerNorm's backward alone, which rounds it */
        ffn_block_bwd(r, l, la->ln2, DH_UNROUNDED, NULL);
        op_layernorm_bwd(r, a->dH, w->ln2_w, w->ln2_b, a->dH, la->res1, la->mean2, la->rstd2, d.N,
                         NULL);
        join_bwd(r, l, SITE_FFN_OUT, d, false); /* d res1 */
        attn_block_bwd(r, l, la->ln1, DH_UNROUNDED, NULL);
        op_layernorm_bwd(r, a->dH, w->ln1_w, w->ln1_b, a->dH, x_in, la->mean1, la->rstd1, N, NULL);
        if (emb_takes_join(r, l, d)) /* dH: rounded by LN1's backward */
            r->pending_join = true, r->pending_join16 = false;
        else
            join_bwd(r, l, SITE_ATTN_OUT, d, false); /* d x_in */
    } else {
        /* d ln1 = dA + dH and LN1's backward: one op where the join is fused */
        const bool join = fused(r->m, BERT_FUSE_JOIN) && omega_at(r->m, l, SITE_FFN_OUT) == 1.0f;
        /* d x_in = dA + dH, read next by the LN2 backward of the layer below, if one runs:
         * where the join is fused, that op adds the two (no recompute forward of the layer
         * below comes between and overwrites dH; the top layer's join is its own) */
        const int below = layer_before(r->pass, l);
        const bool defer = below >= 0 && !d.top && fused(r->m, BERT_FUSE_JOIN) &&
                           omega_at(r->m, l, SITE_ATTN_OUT) == 1.0f &&
                           r->m->cfg.recompute != BERT_RECOMPUTE_LAYER;
        /* d ln2 and d ln1 kept in 16 bits where both their readers take them so: the
         * branch's dropout and a join's LayerNorm backward */
        const bool keep16 = grads16(r->m) && d.p > 0.0f && !d.top;
        /* each LayerNorm backward drops out the gradient of the branch after it as it
         * writes dA, where it can (branch_drop) */
        bt_ln_bwd_drop ffn_room, attn_room;
        const bt_ln_bwd_drop *ffn_drop = branch_drop(r, l, SITE_FFN_OUT, d, 0, &ffn_room);
        /* d ln2: dA, plus the layer above's attention branch in dH where its join was left
         * to this op (LN2's backward reads the two as a join's, rounding dH as stored) */
        if (r->pending_join) {
            join_layernorm_bwd(r, w->ln2_w, w->ln2_b, r->pending_join16, keep16 && join,
                               la->res2, la->mean2, la->rstd2, d.N, ffn_drop);
        } else {
            need_fp32_da(r, "LN2's backward");
            op_layernorm_bwd(r, a->dA, w->ln2_w, w->ln2_b, a->dA, la->res2, la->mean2,
                             la->rstd2, d.N, ffn_drop);
        }
        r->pending_join = false;
        const bool ffn_dh16 =
            ffn_block_bwd(r, l, la->ln1, join ? DH_UNROUNDED_OR_16 : DH_STORED, ffn_drop);
        const bt_ln_bwd_drop *attn_drop =
            branch_drop(r, l, SITE_ATTN_OUT, d, attn_dh16_at(r, d), &attn_room);
        if (join) {
            join_layernorm_bwd(r, w->ln1_w, w->ln1_b, ffn_dh16, keep16 && defer, la->res1,
                               la->mean1, la->rstd1, d.N, attn_drop);
        } else {
            join_bwd(r, l, SITE_FFN_OUT, d, true); /* read by LN1's backward, which rounds it */
            op_layernorm_bwd(r, a->dA, w->ln1_w, w->ln1_b, a->dA, la->res1, la->mean1, la->rstd1,
                             d.N, attn_drop);
        }
        /* the top layer's d x_in, read next by the LN2 backward below (which rounds it):
         * its dH may come in 16 bits from its GEMM (bert_top_join_grad) */
        const bool top16 = d.top && below >= 0, to_emb = emb_takes_join(r, l, d);
        const bool attn_dh16 = attn_block_bwd(
            r, l, x_in, defer || top16 || to_emb ? DH_UNROUNDED_OR_16 : DH_STORED, attn_drop);
        if (defer || to_emb) { /* dH unstored: add_dropout, like LN2's backward, rounds it */
            r->pending_join = true;
            r->pending_join16 = attn_dh16;
        } else if (top16) {
            need_fp32_da(r, "the top layer's join backward");
            if (!attn_dh16) op_stored(r, a->dH, (size_t)N * d.H); /* the rounding it skipped */
            bert_top_join_grad(r, omega_at(r->m, l, SITE_ATTN_OUT), d.N, d.H, attn_dh16, false);
        } else
            join_bwd(r, l, SITE_ATTN_OUT, d, below >= 0);
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
    if (m->cfg.recompute == BERT_RECOMPUTE_LAYER) /* the last one's is still in the working set */
        return l == m->cfg.num_hidden_layers ? layer_output(m, k)
               : m->act->out16                ? m->act->xin
                                              : m->act->layer[k].out;
    return m->act->stash_per_layer ? m->act->xin : layer_output(m, k);
}

/* After layer l's forward with model.recompute "layer": its output kept as
 * the next layer's input (the last layer's stays where it is, in the working
 * set, which no layer overwrites before its backward). */
static void keep_layer_output(const bert_run *r, int l) {
    const bert_model *m = r->m;
    if (m->cfg.recompute != BERT_RECOMPUTE_LAYER ||
        l == layer_before(r->pass, m->cfg.num_hidden_layers))
        return;
    bert_act_keep_output(m, r->tape, l, layer_output(m, l));
}

/* Before layer l's backward, what model.recompute discards: with "layer" the
 * layer's forward again (the working set holds a later layer's; no
 * statistics: r->st is NULL in a backward), with "attention" its
 * probabilities (bert_attention_bwd). The last layer that ran keeps its own. */
static void recompute_layer(bert_run *r, int l) {
    const bert_model *m = r->m;
    const bool last = l == layer_before(r->pass, m->cfg.num_hidden_layers);
    r->recompute_probs = m->cfg.recompute == BERT_RECOMPUTE_ATTENTION && !last;
    if (m->cfg.recompute != BERT_RECOMPUTE_LAYER || last) return;
    const int before = layer_before(r->pass, l);
    if (before >= 0) bert_act_restore_output(m, r->tape, before); /* its input, into xin */
    r->layer = l;
    layer_fwd(r, l, layer_input(m, l, r->pass));
    r->layer = -1;
}

/* Layer l's input as the GEMMs of its pass read it (r->half_input): the
 * 16-bit copy of xin, the output of the layer before it in that layer's
 * stash slot (bert_act_half), where the cast fusion is on; for the first
 * layer, emb16 where emb_in16_only; else none (the fp32 activations). */
static void set_half_input(bert_run *r, int l) {
    const bert_model *m = r->m;
    const int before = layer_before(r->pass, l);
    r->half_input = BT_NO_PTR;
    if (before < 0 && emb_in16_only(r)) {
        r->half_input = act(m, m->act->emb16);
        r->half_input_of = m->act->emb_out;
    } else if (before >= 0 && fused(m, BERT_FUSE_CAST)) {
        r->half_input = bert_act_half(m, before, layer_output(m, before));
        r->half_input_of = m->act->xin;
    }
}

/* Before layer l's backward: its saved activations and its input back from
 * the stash (bert_act.c). */
static void unstash_layer(const bert_run *r, int l) {
    const int before = layer_before(r->pass, l);
    const bool attn_dropout = r->pass->train && r->m->cfg.attention_probs_dropout_prob > 0.0f;
    bert_act_unstash_layer(r->m, r->tape, l, before, before >= 0 ? layer_output(r->m, before) : 0,
                           attn_dropout);
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
    bert_tape tape;
    bert_stats st;
    bert_forward(m, bt, &pass, &tape, &st);
}

static bool nsp_on(const bert_model *m, const bert_batch *bt) {
    return m->cfg.nsp && bt->nsp_labels;
}

/* A new pass over a B x T batch with M masked rows: within the model's
 * capacity (else an internal error), its inputs on the device, its tape. */
static void begin_forward(bert_model *m, const bert_batch *bt, const bert_pass *pass,
                          bert_tape *tape) {
    const int B = bt->B, T = bt->T, M = bt->n_masked, L = m->cfg.num_hidden_layers;
    if (B > m->max_batch || T > m->max_seq || M > m->max_masked) {
        fprintf(stderr, "bertrain: internal error: batch %dx%d with %d masked exceeds the "
                        "model's capacity %dx%d/%d\n", B, T, M, m->max_batch, m->max_seq,
                m->max_masked);
        exit(1);
    }
    /* the last layer that runs is the top layer (bert_top.c) */
    const int top = bert_top_layer(m, pass, layer_before(pass, L));
    int n_head, top_read;
    const int S = upload_batch(m, bt, top, &n_head, &top_read); /* with the top layer's rows */
    *tape = (bert_tape){B,        T,         M,           S > 0 ? top : -1,
                        S,        top_read,  n_head,      ++m->forwards,
                        /* the staging is free again once uploaded: N bytes of it */
                        bert_heads_distinct(bt, nsp_on(m, bt), (unsigned char *)m->ints_host)};
    m->acts_of = tape->forward_id;
}

void bert_forward(bert_model *m, const bert_batch *bt, const bert_pass *pass, bert_tape *tape,
                  bert_stats *st) {
    const struct bert_act_layout *a = m->act;
    const int L = m->cfg.num_hidden_layers;
    begin_forward(m, bt, pass, tape);
    bert_params16_refresh(m);
    memset(st, 0, sizeof *st);
    st->ticket.mlm_loss = st->ticket.mlm_correct = st->ticket.nsp_loss = -1;
    st->ticket.nsp_correct = st->ticket.log_z_sq = st->ticket.attn_first = -1;
    bert_run r = {.m = m, .bt = bt, .pass = pass, .tape = tape, .st = st, .layer = -1,
                  .half_layer = -1};

    bert_embeddings_fwd(&r, emb_in16_only(&r));
    for (int l = 0; l < L; l++)
        if (!layer_skipped(pass, l)) {
            r.layer = r.half_layer = l;
            set_half_input(&r, l);
            layer_fwd(&r, l, layer_input(m, l, pass));
            r.layer = r.half_layer = -1;
            r.half_input = (bt_ptr){NULL, 0};
            keep_layer_output(&r, l);
            if (ln_out_kept(&r, l, SITE_FFN_OUT)) /* else read from the stash copy alone */
                bert_act_stash_layer(m, tape, layer_output(m, l)); /* the next layer's input */
        }
    size_t hidden = layer_input(m, L, pass);
    if (m->cfg.norm == BERT_NORM_PRE) { /* the final LayerNorm of Pre-LN */
        op_layernorm(&r, a->final_out, a->final_mean, a->final_rstd, hidden, m->v.final_ln_w,
                     m->v.final_ln_b, bert_top_hidden_rows(&r));
        hidden = a->final_out;
    }
    if (bt->n_masked > 0) bert_mlm_head_fwd(&r, hidden);
    if (nsp_on(m, bt)) bert_nsp_head_fwd(&r, hidden);
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

void bert_backward(bert_model *m, const bert_batch *bt, const bert_pass *pass,
                   const bert_tape *tape) {
    const struct bert_act_layout *a = m->act;
    const bert_views *v = &m->v;
    const int L = m->cfg.num_hidden_layers, H = m->cfg.hidden_size;
    if (!m->acts_of || tape->forward_id != m->acts_of) {
        fprintf(stderr, "bertrain: internal error: backward without its forward pass just "
                        "before it\n");
        exit(1);
    }
    m->acts_of = 0; /* the backward overwrites some of them */
    bert_run r = {.m = m, .bt = bt, .pass = pass, .tape = tape, .layer = -1, .half_layer = -1};
    const int rows = bert_top_hidden_rows(&r); /* of the encoder's output */

    /* read next by a LayerNorm backward, which rounds it as it reads it: Pre-LN's final
     * one, or Post-LN's LN2 of the last layer that runs (the embeddings' dropout where
     * none runs); so is the MLM head's d hidden where the scatter adds it to nothing
     * but zeros */
    const bool ln_next = m->cfg.norm == BERT_NORM_PRE || layer_before(pass, L) >= 0;
    const bool d_hidden_stored = !(ln_next && tape->heads_distinct);
    if (bt->n_masked > 0) bert_mlm_head_bwd(&r, d_hidden_stored);
    if (nsp_on(m, bt)) bert_nsp_head_bwd(&r, d_hidden_stored);
    op_gathers_bwd(&r, a->dA, (size_t)rows * H, a->t2, bert_top_mlm_rows(&r), tape->n_head,
                   a->pool_pre, bert_top_cls_rows(&r), nsp_on(m, bt) ? bt->B : 0, H, !ln_next);
    /* the heads' parameters (after the layers in the flat buffer) are final */
    op_grads_done(&r, v->head_w, m->n_params);
    size_t layers_end = v->head_w; /* where the last layer's parameters end */
    if (m->cfg.norm == BERT_NORM_PRE) { /* the final LayerNorm lies between layers and heads */
        op_layernorm_bwd(&r, a->dA, v->final_ln_w, v->final_ln_b, a->dA,
                         layer_input(m, L, pass), a->final_mean, a->final_rstd, rows, NULL);
        op_grads_done(&r, v->final_ln_w, v->head_w);
        layers_end = v->final_ln_w;
    }
    for (int l = L - 1; l >= 0; l--) {
        if (layer_skipped(pass, l)) continue; /* identity: dA passes through; no gradient */
        unstash_layer(&r, l);
        r.half_layer = l; /* its stash slots hold what the forward stored */
        recompute_layer(&r, l);
        set_half_input(&r, l);
        layer_bwd(&r, l, layer_input(m, l, pass));
        r.half_layer = -1;
        r.half_input = (bt_ptr){NULL, 0};
        r.recompute_probs = false;
        /* a skipped layer's range is never reported: not reduced */
        op_grads_done(&r, v->layer[l].qkv_w, l + 1 < L ? v->layer[l + 1].qkv_w : layers_end);
    }
    bert_embeddings_bwd(&r);
    op_grads_done(&r, 0, v->layer[0].qkv_w);
}
