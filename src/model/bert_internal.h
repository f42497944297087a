/* What bert.c and bert_attention.c share: views into the model's buffers,
 * the model's GEMM, the dropout sites and their keys, whether a fusion is on
 * and a statistic's sum (internal to src/model). */
#ifndef BT_BERT_INTERNAL_H
#define BT_BERT_INTERNAL_H

#include "bert.h"
#include "bert_act.h"
#include "util/rng.h"

#include <stdbool.h>

/* Views into the model's buffers: the element at offset off (a bert_views
 * or bert_act_layout field) of the parameters, their gradients, the
 * activations and the int32 inputs, as a device pointer. */
static inline bt_ptr par(const bert_model *m, size_t off) { return (bt_ptr){m->params, off * 4}; }
static inline bt_ptr grd(const bert_model *m, size_t off) { return (bt_ptr){m->grads, off * 4}; }
static inline bt_ptr act(const bert_model *m, size_t off) { return (bt_ptr){m->acts, off * 4}; }
static inline bt_ptr ints(const bert_model *m, size_t off) { return (bt_ptr){m->ints, off * 4}; }

/* Mixed precision: n activations (or activation gradients) from offset off,
 * or from p, stored in 16 bits (bert_act_store16); nothing in fp32. */
static inline void store16(bert_model *m, size_t off, size_t n) {
    bert_act_store16(m, m->acts, off, n);
}
static inline void store16_ptr(bert_model *m, bt_ptr p, size_t n) {
    bert_act_store16(m, p.buf, p.off / 4, n);
}

/* Every GEMM of the model: with 16-bit operands (fp32 accumulation) where
 * m->gemm16 (mixed precision on tensor cores), else in fp32. */
static inline void mm(bert_model *m, bool ta, bool tb, int M, int N, int K, float alpha, bt_ptr a,
               int lda, long sa, bt_ptr b, int ldb, long sb, float beta, bt_ptr c, int ldc,
               long sc, int batch) {
    if (m->gemm16)
        m->be->gemm16(m->be, (bt_dtype)m->cfg.storage, ta, tb, M, N, K, alpha, a, lda, sa, b, ldb,
                      sb, beta, c, ldc, sc, batch);
    else
        m->be->gemm(m->be, ta, tb, M, N, K, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                    batch);
}

enum { SITE_EMB = 1, SITE_ATTN_PROBS = 2, SITE_ATTN_OUT = 3, SITE_FFN_OUT = 4 };

/* The dropout key of one site: the same on every backend, rank and resume. */
static inline bt_rng_key dropout_key(const bert_pass *pass, int layer, int site) {
    bt_rng_key k = {pass->seed, (pass->step << 24) | ((uint64_t)(layer + 1) << 12) |
                                    ((uint64_t)site << 4) | RNG_STREAM_DROPOUT};
    return k;
}

/* Whether fusion f (BERT_FUSE_*) is on; forward is true for a fusion of the
 * forward pass, which needs fp32 storage (see BERT_FUSE_GELU). */
static inline bool fused(const bert_model *m, unsigned f, bool forward) {
    return !(m->unfused & f) && (!forward || m->cfg.storage == BT_F32);
}

/* A sum that the step's statistics need: read back now, or with
 * pass->defer_stats queued on the device, its index in *ticket (0 returned). */
static inline double stat_sum(bert_model *m, const bert_pass *pass, bt_reduce_kind kind, bt_ptr x,
                       size_t n, int *ticket) {
    bt_backend *be = m->be;
    if (pass->defer_stats) {
        *ticket = be->reduce_defer(be, kind, x, n);
        return 0.0;
    }
    return kind == BT_REDUCE_SUMSQ ? be->sumsq(be, x, n) : be->sum(be, x, n);
}

/* Attention over all B x NH heads of layer l (bert_attention.c): ctx =
 * dropout(softmax(QK^T/sqrt(D))) V from the QKV projection qkv_tokens (N, 3H). */
void bert_attention_fwd(bert_model *m, int l, const bert_batch *bt, const bert_pass *pass,
                        size_t qkv_tokens);

/* Backward of bert_attention_fwd: dctx (N, H) -> dqkv (N, 3H). */
void bert_attention_bwd(bert_model *m, int l, const bert_batch *bt, const bert_pass *pass);

/* Upload the gather tables between token-major and head-major layouts for a
 * B x T batch (only when the shape changes). */
void bert_upload_head_tables(bert_model *m, int B, int T);

#endif
