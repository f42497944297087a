/* What the model's files share (internal to src/model): the pass in flight,
 * views into the model's buffers, the model's GEMM, the dropout sites and
 * their keys, whether a fusion is on, a statistic's sum, and the functions
 * of bert_attention.c, bert_top.c and bert_heads.c. The op wrappers are in
 * bert_ops.h. */
#ifndef BT_BERT_INTERNAL_H
#define BT_BERT_INTERNAL_H

#include "bert.h"
#include "bert_act.h"
#include "util/rng.h"

#include <stdbool.h>

/* One forward or backward in flight: the model, the batch, what the pass is
 * for and its tape; in a forward, where its sums go and the state of the
 * layer that runs. bert_forward and bert_backward own it on their stack, so
 * the model holds nothing of a pass. */
typedef struct {
    bert_model *m;
    const bert_batch *bt;
    const bert_pass *pass;
    const bert_tape *tape;
    bert_stats *st;            /* forward: the sums (else NULL) */
    int layer;                 /* forward: the layer that runs (16-bit stash), or -1 */
    int half_layer;            /* the layer whose stash slots hold 16-bit copies of the
                                * working set that GEMMs may read (bert_act_half), or -1 */
    bt_ptr half_input;         /* the layer input's 16-bit copy for GEMMs (the output of
                                * the layer before, in its stash slot, or the embeddings'
                                * in emb16), or NULL */
    size_t half_input_of;      /* the activation offset of the input half_input copies
                                * (xin, or emb_out for the first layer) */
    double admin_variance_sum; /* Admin profiling: 1 + the branch variances so far */
    bool recompute_probs;      /* backward: the layer's attention probabilities are another
                                * layer's (model.recompute "attention"): compute them again */
    bool pending_join;         /* backward: dH holds the attention branch's gradient of the
                                * layer above, not yet added to dA: the next LayerNorm
                                * backward takes it (Post-LN's deferred join), or after the
                                * first layer the embeddings' dropout (add_dropout) */
    bool pending_join16;       /* ... in the storage's 16 bits (written so by its GEMM) */
    bool dA16;                 /* backward: the residual stream's gradient is in dA16 (the
                                * storage's 16 bits), not dA, as a LayerNorm backward wrote
                                * it for readers that take it so (Post-LN: bert.c) */
} bert_run;

/* Views into the model's buffers: the element at offset off (a bert_views
 * or bert_act_layout field) of the parameters, their gradients, the
 * activations and the int32 inputs, as a device pointer. */
static inline bt_ptr par(const bert_model *m, size_t off) { return (bt_ptr){m->params, off * 4}; }
static inline bt_ptr grd(const bert_model *m, size_t off) { return (bt_ptr){m->grads, off * 4}; }
static inline bt_ptr act(const bert_model *m, size_t off) {
    const size_t cap = m->act->buffer_elems; /* no tensor straddles two buffers */
    return (bt_ptr){m->acts[off / cap], off % cap * 4};
}
static inline bt_ptr ints(const bert_model *m, size_t off) { return (bt_ptr){m->ints, off * 4}; }
/* The segments of equal indices of the batch's int table at off (bert_act.h). */
static inline bt_ptr bert_links(const bert_model *m, size_t off) {
    return ints(m, m->act->links + 2 * off);
}

/* A GEMM operand at activation offset off: the 16-bit copy of it that the
 * pass in flight may read (bert_act_half, or r->half_input for the layer's
 * input; `flag`, BT_GEMM_A16 or _B16, is then added to *stored16), else the
 * fp32 activations. */
static inline bt_ptr act_operand(const bert_run *r, size_t off, unsigned flag,
                                 unsigned *stored16) {
    const bt_ptr half = r->half_input.buf && off == r->half_input_of
                            ? r->half_input
                            : bert_act_half(r->m, r->half_layer, off);
    if (!half.buf) return act(r->m, off);
    *stored16 |= flag;
    return half;
}

/* Every GEMM of the model: with 16-bit operands (fp32 accumulation) where
 * m->gemm16 (mixed precision on tensor cores), the operands in stored16 given
 * in 16 bits (act_operand), else in fp32 (stored16 is then 0). */
static inline void mm(const bert_model *m, unsigned stored16, bool ta, bool tb, int M, int N,
                      int K, float alpha, bt_ptr a, int lda, long sa, bt_ptr b, int ldb, long sb,
                      float beta, bt_ptr c, int ldc, long sc, int batch) {
    if (m->gemm16)
        m->be->gemm16(m->be, (bt_dtype)m->cfg.storage, stored16, ta, tb, M, N, K, alpha, a, lda,
                      sa, b, ldb, sb, beta, c, ldc, sc, batch);
    else
        m->be->gemm(m->be, ta, tb, M, N, K, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                    batch);
}

/* C (rows, N) = a (rows, K) op(W) + beta C, W the weight at parameter offset w
 * with row stride ldw, op(W) = W^T where trans_w: a linear layer's GEMMs.
 * With gemm16 W is read from the 16-bit copy the optimizer keeps
 * (bert_params16_refresh), so no GEMM converts a weight; a is in 16 bits
 * where stored_a is BT_GEMM_A16 (act_operand). */
static inline void mm_weight(const bert_model *m, int rows, int N, int K, bt_ptr a,
                             unsigned stored_a, size_t w, bool trans_w, int ldw, float beta,
                             bt_ptr c) {
    if (m->gemm16)
        m->be->gemm16(m->be, (bt_dtype)m->cfg.storage, stored_a | BT_GEMM_B16, false, trans_w,
                      rows, N, K, 1.0f, a, K, 0, (bt_ptr){m->params16, w * 2}, ldw, 0, beta, c,
                      N, 0, 1);
    else
        m->be->gemm(m->be, false, trans_w, rows, N, K, 1.0f, a, K, 0, par(m, w), ldw, 0, beta, c,
                    N, 0, 1);
}

enum { SITE_EMB = 1, SITE_ATTN_PROBS = 2, SITE_ATTN_OUT = 3, SITE_FFN_OUT = 4 };

/* The dropout key of one site: the same on every backend, rank and resume. */
static inline bt_rng_key dropout_key(const bert_pass *pass, int layer, int site) {
    bt_rng_key k = {pass->seed, (pass->step << 24) | ((uint64_t)(layer + 1) << 12) |
                                    ((uint64_t)site << 4) | RNG_STREAM_DROPOUT};
    return k;
}

/* Whether fusion f (BERT_FUSE_*) is on. In every storage: with 16-bit
 * storage the fused forward ops round what the unfused ops' stores would
 * (their round16 argument). */
static inline bool fused(const bert_model *m, unsigned f) { return !(m->unfused & f); }

/* A sum that the step's statistics need: read back now, or with
 * pass->defer_stats queued on the device, its index in *ticket (0 returned). */
static inline double stat_sum(const bert_run *r, bt_reduce_kind kind, bt_ptr x, size_t n,
                              int *ticket) {
    bt_backend *be = r->m->be;
    if (r->pass->defer_stats) {
        *ticket = be->reduce_defer(be, kind, x, n);
        return 0.0;
    }
    return kind == BT_REDUCE_SUMSQ ? be->sumsq(be, x, n) : be->sum(be, x, n);
}

/* Attention over all B x NH heads of layer l (bert_attention.c): ctx =
 * dropout(softmax(QK^T/sqrt(D))) V from the layer's QKV projection (N, 3H). */
void bert_attention_fwd(bert_run *r, int l);

/* Backward of bert_attention_fwd: dctx (N, H) -> dqkv (N, 3H), left as the
 * ops wrote it for op_linear_bwd_unrounded, which rounds it as it reads it;
 * or, where the returned pointer's buf is not NULL, in 16 bits there only
 * (the GEMMs' rounding: op_linear_bwd_from16 reads it). dctx16: dctx is
 * not in the activations but in 16 bits at the start of operand16, where
 * its GEMM wrote it (op_linear_bwd_to16). */
bt_ptr bert_attention_bwd(bert_run *r, int l, bool dctx16);

/* The top layer (bert_top.c; see bert_tape): everything that differs there
 * from the other layers is in that file. */

/* The top layer of a pass: the last layer that runs (-1: none, when Admin
 * profiles or the model is dense_top). */
int bert_top_layer(const bert_model *m, const bert_pass *pass, int last_layer);

/* Into the batch's int32 staging host: the top layer's rows (the token rows
 * the heads read, once each, with the first rows no head reads added up to a
 * multiple of `multiple` so that the GEMMs see few shapes; in order) and
 * each head's row among them. Returns their count S; *read gets the rows
 * the heads read (S before the padding: the model's useful work). */
int bert_top_plan(const struct bert_act_layout *a, const bert_batch *bt, bool nsp, int multiple,
                  int32_t *host, int *read);

/* The top layer's attention output: its input rows and ctx at the heads'
 * rows (top_x, top_ctx, kept for the backward); *ctx and *resid become them. */
void bert_top_enter(bert_run *r, size_t *ctx, size_t *resid);

/* dropout(x) of the top layer's S rows of H with the masks they would have
 * among all B*T rows, in place (no scratch). */
void bert_top_dropout(bert_run *r, size_t x, int S, int H, float p, bt_rng_key key);

/* The top layer's backward through its attention output projection: d ctx
 * at every row (zero off the heads' rows) from dH at the S rows. */
void bert_top_ctx_bwd(bert_run *r, const bert_layer_views *w, int S, int H);

/* d x_in of the top layer's attention join, at every row: omega dA (S rows,
 * the residual's share) joins dH (every row, the branch's, stored: rounded
 * in fp32, or with dh16 its 16-bit values from dH's start, which its GEMM
 * wrote). With stored false the result is not stored (rounded): its reader
 * rounds it as it reads it (layernorm_bwd); dh16 needs stored false. */
void bert_top_join_grad(bert_run *r, float omega, int S, int H, bool dh16, bool stored);

/* The rows of the encoder's output that the MLM head and the NSP head read
 * (int32 offsets of their row tables), and how many rows that output has. */
size_t bert_top_mlm_rows(const bert_run *r);
size_t bert_top_cls_rows(const bert_run *r);
int bert_top_hidden_rows(const bert_run *r);

/* The embeddings' output (N, H): into emb_out, or with in16_only into emb16
 * alone, where every reader takes it in 16 bits (bert.c's emb_in16_only);
 * and its backward from dA into the tables' gradients (bert_embeddings.c). */
void bert_embeddings_fwd(bert_run *r, bool in16_only);
void bert_embeddings_bwd(bert_run *r);

/* The MLM head at the masked rows of the encoder's output `hidden` (an
 * activation offset): dense, GELU, LayerNorm, the tied decoder and its bias,
 * the loss, its statistics (r->st) and its gradient; and its backward, d
 * hidden at those rows into t2 (bert_heads.c). */
void bert_mlm_head_fwd(bert_run *r, size_t hidden);
void bert_mlm_head_bwd(bert_run *r, bool d_hidden_stored);
/* Whether every row of the encoder's output that the heads read gets one
 * head's gradient at most: no masked position twice, none at a [CLS] row
 * where the NSP head runs (nsp). The scatter of the heads' gradients then
 * adds each to zeros (and the padded rows' exact zeros), so a gradient that
 * its reader rounds needs no rounding before it. seen: B T bytes of
 * scratch (the model's: its batch staging once uploaded). */
bool bert_heads_distinct(const bert_batch *bt, bool nsp, unsigned char *seen);
/* The NSP head at the [CLS] rows of hidden: pooler, tanh, the 2-way
 * classifier, its loss, statistics and gradient; and its backward, d hidden
 * at those rows into pool_pre. */
void bert_nsp_head_fwd(bert_run *r, size_t hidden);
void bert_nsp_head_bwd(bert_run *r, bool d_hidden_stored);

#endif
