/* The activation buffer of bert.c (bert_act.c): where each saved tensor and
 * scratch area lives in the model's activation buffer (offsets in fp32
 * elements), where the int32 batch inputs live in the int buffer, and the
 * 16-bit storage and stash of mixed precision. */
#ifndef BT_BERT_ACT_H
#define BT_BERT_ACT_H

#include "bert.h"

typedef struct {
    size_t qkv;          /* (N, 3H) Q, K, V, token-major (each head a (T, D) slice) */
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
    size_t lse;          /* (B, NH, T) fused attention: each query row's log-sum-exp */
    size_t out;          /* (N, H) recompute "layer": the layer's output, kept as the next
                            layer's input (the working set holds one layer at a time) */
} bert_layer_acts;

struct bert_act_layout {
    size_t emb_sum, emb_mean, emb_rstd, emb_out; /* (N, H), (N), (N), (N, H) */
    size_t emb16; /* with the 16-bit stash, but for Pre-LN: the embeddings' output in 16
                     bits, (N, H) of 2 bytes, where the first layer reads it so alone
                     (bert.c's emb_in16_only) */
    size_t hm, t1, t2, t3, t3_mean, t3_rstd;     /* MLM head: (M, H) ... */
    size_t t1_16; /* with 16-bit storage: t1 in 16 bits, 2 bytes an element (the MLM
                   * head's dense output where its 16-bit GEMM writes it alone) */
    size_t logits, mlm_loss, mlm_correct, mlm_log_z; /* (M, V), (M), (M), (M) */
    size_t cls, pool_pre, pooled, nsp_logits, nsp_loss, nsp_correct, nsp_log_z; /* NSP: (B, H) ... */
    /* with 16-bit storage: NSP's pooler output, tanh's output and the logits
     * in 16 bits, (B, H), (B, H), (B, 2) of 2 bytes (bert_heads.c's nsp16) */
    size_t pool_pre16, pooled16, nsp_logits16;
    size_t final_out, final_mean, final_rstd; /* Pre-LN final LayerNorm: (N, H), (N), (N) */
    /* mixed precision: the input of the layer in flight (N, H), unpacked from
     * the stash (0 without a stash) */
    size_t xin;
    /* backward scratch */
    size_t dA, dH, dctx, dI, dqkv, dhm, dcls;
    size_t dA16; /* with grads16: dA's values in 16 bits, (N, H) of 2 bytes, where Post-LN's
                    backward keeps them so between a LayerNorm backward and its readers */
    size_t dI16; /* with grads16: dI in 16 bits, (N, I) of 2 bytes, where fc2's input-gradient
                    GEMM writes it so for bias_gelu_bwd */
    size_t dprobs; /* (B, NH, T, T): also the dropped probabilities, in the forward and
                      until dV in the backward */
    size_t pdrop;  /* (B, NH, T, T) with attention_logit_penalty only: the scores again */
    size_t attn_delta; /* (B, NH, T) fused attention's backward scratch */
    /* the top layer (bert_tape.top_layer) at the heads' rows, (S, H) each for S
     * <= top_capacity rows (M + B, padded up to BERT_TOP_ROWS_MULTIPLE_MAX
     * within N): its input rows (the forward) or d ctx rows (the backward),
     * and ctx at those rows (from the forward, kept for the backward) */
    size_t top_x, top_ctx;
    int top_capacity;
    size_t total;
    /* The activations live in n_buffers device buffers of buffer_elems
     * elements each (the last one shorter), so that none exceeds the
     * device's largest allocation; no tensor straddles two (offset off is
     * element off % buffer_elems of buffer off / buffer_elems). largest: the
     * largest tensor, which must fit one buffer. */
    size_t buffer_elems, largest;
    int n_buffers;
    /* int32 inputs of a batch (uploaded with it: the first ints_batch) */
    size_t ids, types, mask, mlm_pos, mlm_labels, nsp_labels, cls_idx;
    /* the top layer's rows: top_rows (S) the token rows the heads read, in
     * order; top_mlm_pos (M) and top_cls (B) the heads' rows among them */
    size_t top_rows, top_mlm_pos, top_cls;
    /* the segments of equal indices (bt_row_links) of the tables the scatters
     * read, table t's (2 n ints) at links + 2 t (bert_links) */
    size_t links, ints_batch;
    /* N zeros (after the batch's inputs, written once): gather_rows through
     * them writes one row, a bias, into every row */
    size_t zero_rows, ints_total;
    int n_layers;
    /* Mixed precision with the 16-bit stash: the big saved activations of
     * every layer (qkv .. ln2, not the LayerNorm statistics) share one fp32
     * working set from work_base; between a layer's forward and its backward
     * they live in the model's stash buffer, stash_per_layer 16-bit elements
     * per layer, each field at its offset from work_base. 0: no stash, every
     * layer has its own fp32 activations. */
    size_t work_base, stash_per_layer;
    /* The model's 16-bit stash buffer holds stash_slot elements a layer: the
     * working set (stash_per_layer), or with recompute "layer" in 16-bit
     * storage (out16) only the layer's output, its next layer's input, which
     * comes back into xin. 0: no stash. */
    size_t stash_slot;
    bool out16;
    /* 16-bit storage: elements of the model's operand16 buffer, which holds
     * the 16-bit copy of one backward operand that two GEMMs read (the
     * largest: a linear layer's output gradient, (N, 3H) or (N, I), or the
     * attention scores' gradient, (B, NH, T, T)); 0 in fp32 */
    size_t operand16;
    bert_layer_acts layer[]; /* n_layers */
};

/* Plan the activation buffer for the given capacity; NULL when out of memory.
 * With fused_attention no T x T probabilities (probs, dprobs, pdrop: empty),
 * but each layer's lse and the backward's attn_delta. With c->recompute one
 * copy of the probabilities serves every layer; with "layer" one working set
 * of every big field does, beside each layer's kept output (no 16-bit
 * stash: there is nothing per layer left to stash but the outputs). The
 * activations are split into buffers of at most max_buffer bytes (0: one
 * buffer), no tensor across two. grads16: the backward keeps gradients in
 * 16 bits between writer and readers (16-bit storage on 16-bit GEMM
 * hardware): dA16 and dI16 get their room (else none). */
struct bert_act_layout *bert_act_layout_new(const bert_config *c, int max_batch, int max_seq,
                                            int max_masked, bool fused_attention, bool grads16,
                                            size_t max_buffer);

/* Mixed precision: round n values from x to the model's
 * 16-bit storage dtype (they become the fp32 values a bf16/fp16 tensor would
 * hold; beyond fp16's range, +-Inf); nothing in fp32. */
void bert_act_round16(const bert_model *m, bt_ptr x, size_t n);

/* The same for n activations from offset off; during layer `layer`'s forward
 * (-1: none) a value of the working set goes through that layer's stash
 * slot, so the one 16-bit copy both rounds it and keeps it for the backward.
 * With gemm16 the values only GEMMs read (the QKV projection, GELU's output,
 * the context below the top layer of the pass on `tape`) stay in the slot
 * alone: the GEMMs read them there (bert_act_half), the fp32 working set
 * keeps whatever it held, and the backward's unstash skips them too. */
void bert_act_store16(const bert_model *m, const bert_tape *tape, int layer, size_t off,
                      size_t n);

/* bert_act_store16 for n values that are already values of the storage
 * dtype (a fused op rounded them): only the stash copy is made, no rounding
 * pass (rounding them again would change no bit). */
void bert_act_stored16(const bert_model *m, int layer, size_t off, size_t n);

/* Where an op that writes activations at offset off during layer `layer`'s
 * forward may write their 16-bit copy itself: the stash slot, when that copy
 * is all the store after it would make (values it has rounded (`rounded`):
 * bert_act_stored16's copy; unrounded ones that only GEMMs read:
 * bert_act_store16's), so that the caller skips the store and its cast.
 * Else buf NULL: the caller stores as before. */
bt_ptr bert_act_slot16(const bert_model *m, const bert_tape *tape, int layer, size_t off,
                       bool rounded);

/* The stash slot of working-set offset off of layer `layer`, whatever the
 * GEMMs take, or buf NULL (no stash, layer -1, off outside the working set):
 * for an op that reads the saved 16-bit values as they are. */
bt_ptr bert_act_stashed(const bert_model *m, int layer, size_t off);

/* The 16-bit copy in layer `layer`'s stash slot of the working-set
 * activation at offset off, for gemm16 to read as it is (BT_GEMM_A16 /
 * B16), or buf NULL: no stash, no gemm16, layer -1 or off outside the
 * working set. The copy equals the fp32 value from the store16 that wrote it
 * (or is the only copy: see bert_act_store16) until the layer's backward
 * ends. */
bt_ptr bert_act_half(const bert_model *m, int layer, size_t off);

/* With gemm16 on 16-bit GEMM hardware (m->operand16): n fp32 activations
 * from offset off cast once into the operand16 buffer, for the two GEMMs
 * that read them next (BT_GEMM_A16 / B16) instead of each converting them
 * again; the copy holds until the next call. Else (or n beyond the buffer,
 * as the MLM decoder's gradient can be) buf NULL and nothing is done. The
 * values are the ones gemm16 converts itself: the same bits either way. */
bt_ptr bert_operand16(const bert_model *m, size_t off, size_t n);

/* The operand16 buffer from element `first` when bert_operand16 would use
 * it and n values fit there, for an op that writes the 16-bit copy itself;
 * else buf NULL. Attention's backward keeps two copies at once: dctx's from
 * 0 and the dropped probabilities' after it. */
bt_ptr bert_operand16_room(const bert_model *m, size_t first, size_t n);

/* After a layer's forward: its output (activation offset `out`) to xin, the
 * next layer's input. Nothing without a stash. */
void bert_act_stash_layer(const bert_model *m, const bert_tape *tape, size_t out);

/* Recompute "layer" (a->out16, else layer[l].out in fp32): layer l's
 * output (activation offset `out`) kept as the next layer's input, which
 * the forward reads from xin. */
void bert_act_keep_output(const bert_model *m, const bert_tape *tape, int l, size_t out);

/* Recompute "layer" with out16: layer l's kept output back into xin (the
 * input of the layer after it, about to be recomputed). */
void bert_act_restore_output(const bert_model *m, const bert_tape *tape, int l);

/* Before layer l's backward: its saved activations back from the stash into
 * the working set, and the output (at `before_out`) of the layer run before
 * it, `before` (-1: none), into xin: only those some op of the backward
 * reads in fp32 (not fc1 for the fused bias_gelu_bwd, nor res1 and res2,
 * which layernorm_bwd reads in 16 bits, nor with attn_dropout (the pass
 * drops out the attention probabilities) and the fused softmax the
 * probabilities; with gemm16 not the values GEMMs alone read there, the
 * LayerNorm outputs, nor, under the cast fusion, Post-LN's layer input).
 * Nothing without a stash. */
void bert_act_unstash_layer(const bert_model *m, const bert_tape *tape, int l, int before,
                            size_t before_out, bool attn_dropout);

#endif
