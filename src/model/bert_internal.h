/* Activation layout of bert.c: where each saved tensor and scratch area lives
 * in the model's activation buffer (offsets in fp32 elements) and where the
 * int32 batch inputs live in the int buffer. */
#ifndef BT_BERT_INTERNAL_H
#define BT_BERT_INTERNAL_H

#include "bert.h"

typedef struct {
    size_t qkv;          /* (N, 3H) */
    size_t probs;        /* (B, NH, T, T) softmax output, before dropout */
    size_t ctx;          /* (N, H) */
    size_t res1;         /* (N, H) x + dropout(attention output); Post-LN: LayerNorm input */
    size_t mean1, rstd1; /* (N) */
    size_t ln1;          /* (N, H) Post-LN: LN(res1); Pre-LN: LN(x), the attention input */
    size_t fc1;          /* (N, I) before GELU */
    size_t gelu;         /* (N, I) */
    size_t res2;         /* (N, H) Pre-LN: layer output */
    size_t mean2, rstd2; /* (N) */
    size_t ln2;          /* (N, H) Post-LN: layer output; Pre-LN: LN(res1), the FFN input */
} bert_layer_acts;

struct bert_act_layout {
    size_t emb_sum, emb_mean, emb_rstd, emb_out; /* (N, H), (N), (N), (N, H) */
    size_t hm, t1, t2, t3, t3_mean, t3_rstd;     /* MLM head: (M, H) ... */
    size_t logits, mlm_loss, mlm_correct, mlm_log_z; /* (M, V), (M), (M), (M) */
    size_t cls, pool_pre, pooled, nsp_logits, nsp_loss, nsp_correct, nsp_log_z; /* NSP: (B, H) ... */
    size_t final_out, final_mean, final_rstd; /* Pre-LN final LayerNorm: (N, H), (N), (N) */
    /* mixed precision: the input of the layer in flight (N, H), unpacked from
     * the stash (0 without a stash) */
    size_t xin;
    /* backward scratch */
    size_t dA, dH, dctx, dI, dqkv, dprobs, pdrop, dhm, dcls;
    size_t total;
    /* int32 inputs */
    size_t ids, types, mask, mlm_pos, mlm_labels, nsp_labels, cls_idx, ints_total;
    int n_layers;
    /* Mixed precision with the 16-bit stash: the big saved activations of
     * every layer (qkv .. ln2, not the LayerNorm statistics) share one fp32
     * working set from work_base; between a layer's forward and its backward
     * they live in the model's stash buffer, stash_per_layer 16-bit elements
     * per layer, each field at its offset from work_base. 0: no stash, every
     * layer has its own fp32 activations. */
    size_t work_base, stash_per_layer;
    bert_layer_acts layer[]; /* n_layers */
};

/* Plan the activation buffer for the given capacity; NULL when out of memory. */
struct bert_act_layout *bert_act_layout_new(const bert_config *c, int max_batch, int max_seq,
                                            int max_masked);

#endif
