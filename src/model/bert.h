/* BERT (Hugging Face BertForPreTraining semantics) as a sequence of backend
 * ops: the flat parameter buffer with named views, forward and backward. */
#ifndef BT_BERT_H
#define BT_BERT_H

#include "backends/backend.h"
#include "backends/row_links.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { BERT_NORM_POST = 0, BERT_NORM_PRE = 1, BERT_NORM_ADMIN = 2 };
enum { BERT_ADMIN_CLOSED_FORM = 0, BERT_ADMIN_PROFILE = 1 };
#define BERT_MAX_LAYERS 256
/* model.attention_kernel: "auto" (fused where the backend says it pays,
 * bt_device_info.fused_attention_pays, and no attention_logit_penalty),
 * "fused" (attention_fwd / attention_bwd: the T x T probabilities never
 * stored) or "unfused" (GEMMs, softmax, dropout; the probabilities kept). */
enum { BERT_ATTN_AUTO = 0, BERT_ATTN_FUSED = 1, BERT_ATTN_UNFUSED = 2 };
/* model.recompute: what the backward computes again instead of keeping it
 * from the forward. "none"; "attention" (the T x T probabilities: one copy
 * serves every layer, and each layer's backward recomputes its own from the
 * kept Q and K); "layer" (only each layer's input is kept: one working set
 * of activations serves every layer, and each layer's backward first runs
 * its forward again). The dropout masks come from the counter RNG, so the
 * recomputed values are the forward's, bit for bit. */
enum { BERT_RECOMPUTE_NONE = 0, BERT_RECOMPUTE_ATTENTION = 1, BERT_RECOMPUTE_LAYER = 2 };

/* The largest LayerDrop probability (model.layerdrop): above it most steps
 * would train almost nothing. */
#define BERT_MAX_LAYERDROP 0.95

typedef struct {
    int vocab_size;
    int hidden_size;
    int num_hidden_layers;
    int num_attention_heads;
    int intermediate_size;
    int max_position_embeddings;
    int type_vocab_size;
    float layer_norm_eps;
    float hidden_dropout_prob;
    float attention_probs_dropout_prob;
    float initializer_range;
    bool nsp;   /* pooler + next-sentence head */
    int norm;   /* BERT_NORM_POST (BERT, HF), BERT_NORM_PRE (LayerNorm before each block
                 * and once after the last layer) or BERT_NORM_ADMIN (Post-LN with the
                 * residual scaled: x = LN(omega * x + f(x))) */
    int admin_init; /* Admin: BERT_ADMIN_CLOSED_FORM or BERT_ADMIN_PROFILE (omega from a
                     * profiling forward) */
    /* Admin's residual scales, sublayer 2l (attention) and 2l+1 (feed-forward) of
     * layer l; 1 for the other norms. Set at initialization, then fixed (saved in
     * state.json, folded away by export). */
    float admin_omega[2 * BERT_MAX_LAYERS];
    int pad_id; /* [PAD]: no gradient through the embedding lookup (torch padding_idx) */
    float layerdrop; /* LayerDrop: probability that a training step skips a layer (0: off) */
    float z_loss;    /* z-loss: + z_loss * mean over MLM rows of logsumexp(logits)^2 (0: off) */
    float attention_logit_penalty; /* + this * mean of (QK^T/sqrt(d))^2 over every attention
                                    * score of the layers run (0: off) */
    int storage;     /* BT_F32, or BT_BF16 / BT_F16 (mixed precision): activations and
                      * gradients are stored with 16-bit precision, the math and the master
                      * weights and moments stay fp32 */
    int gemm16;      /* 16-bit storage only: GEMMs on 16-bit operands (backend gemm16)
                      * 0: where the backend runs them on tensor cores; 1: always
                      * (tests); -1: never */
    int attention_kernel; /* BERT_ATTN_*: the self-attention's core as the backend's fused
                           * attention ops or as GEMMs, softmax and dropout */
    int recompute;   /* BERT_RECOMPUTE_*: what the backward recomputes (model.recompute) */
    bool fp32_stash; /* 16-bit storage only: keep every layer's saved activations in
                      * fp32 buffers (still rounded to 16 bits) instead of the 16-bit
                      * stash; the same bits, twice the memory (tests compare them) */
} bert_config;

/* One named tensor of the flat parameter buffer. Offsets count fp32 elements. */
typedef struct {
    char name[96]; /* Hugging Face name */
    size_t offset;
    size_t numel;
    int ndim;
    int shape[2];
    bool decay; /* weight decay applies (not biases, not LayerNorm) */
    int layer;  /* encoder layer the tensor belongs to, or -1 */
} bert_tensor;

/* Offsets (in elements) of one encoder layer's parameters. q, k, v weights are
 * adjacent so that one GEMM computes all three; likewise their biases. */
typedef struct {
    size_t qkv_w, qkv_b;   /* (3H, H), (3H) */
    size_t ao_w, ao_b;     /* attention.output.dense (H, H), (H) */
    size_t ln1_w, ln1_b;   /* attention.output.LayerNorm */
    size_t fc1_w, fc1_b;   /* intermediate.dense (I, H), (I) */
    size_t fc2_w, fc2_b;   /* output.dense (H, I), (H) */
    size_t ln2_w, ln2_b;   /* output.LayerNorm */
} bert_layer_views;

typedef struct {
    size_t wte, wpe, wtt, emb_ln_w, emb_ln_b;
    bert_layer_views *layer;
    size_t final_ln_w, final_ln_b; /* Pre-LN only: after the last layer (else 0) */
    size_t head_w, head_b, head_ln_w, head_ln_b, dec_b; /* MLM head; decoder tied to wte */
    size_t pool_w, pool_b, nsp_w, nsp_b;                /* only when cfg.nsp */
} bert_views;

/* One micro-batch on the host. Rows are flattened b*T + t. */
typedef struct {
    int B, T;
    const int32_t *input_ids;      /* (B, T) */
    const int32_t *token_type_ids; /* (B, T) */
    const int32_t *attention_mask; /* (B, T) 1 = real token */
    int n_masked;
    const int32_t *mlm_positions;  /* (n_masked) flat rows */
    const int32_t *mlm_labels;     /* (n_masked) */
    const int32_t *nsp_labels;     /* (B) or NULL */
    uint32_t first_sample;         /* position of sample 0 in the global batch */
    int masked_bound; /* n_masked of batches like this one rarely exceeds it (< 1e-4); 0:
                       * unknown. Where the device replays graphs, the heads' rows are
                       * padded to it (one shape, few added rows), or to the capacity
                       * above it. */
} bert_batch;

/* What one forward pass is for. */
typedef struct {
    bool train;           /* dropout on */
    uint64_t seed;        /* run seed (dropout key) */
    uint64_t step;        /* optimizer step (dropout stream) */
    float mlm_grad_scale; /* d loss / d (sum of MLM token losses); 0: no gradient */
    float nsp_grad_scale; /* same for NSP */
    float *mlm_logits_out; /* optional host copy of MLM logits (n_masked, V) */
    float *nsp_logits_out; /* optional host copy of NSP logits (B, 2) */
    /* optional: told during backward which gradient ranges [begin, end)
     * (elements of the flat buffer) are final, so they can be reduced early */
    void (*grads_ready)(void *ctx, size_t begin, size_t end);
    void *grads_ready_ctx;
    /* optional: called (with grads_ready_ctx) after each GEMM of a linear
     * layer's backward, so that reductions in flight move between the
     * layers' completions: MPI moves a nonblocking collective only while
     * the rank calls into it */
    void (*between_ops)(void *ctx);
    /* optional (num_hidden_layers): nonzero = this pass skips the layer
     * (LayerDrop, or evaluating a pruned model); NULL: every layer runs */
    const unsigned char *layer_skip;
    /* Admin profiling (bert_admin_profile): each residual join sets its omega from
     * the variances of the branches before it */
    bool admin_profile;
    /* d loss / d (sum of squared attention scores QK^T/sqrt(d)): the attention-logit
     * penalty over the global batch (0: no gradient) */
    float attn_penalty_grad_scale;
    /* queue the sums of bert_stats on the device (reduce_defer) instead of
     * reading each back: the caller fetches them with everything else the
     * step reads, then calls bert_stats_resolve */
    bool defer_stats;
    /* more micro-batches of the step add to these gradients: with 16-bit storage
     * the sums stay unrounded fp32 until the last one's backward rounds them
     * (op_grads_done), so they round once a step, not once a micro-batch */
    bool grads_accumulate;
} bert_pass;

/* Sums over one micro-batch (the host divides by global counts). */
typedef struct {
    double mlm_loss_sum, mlm_correct;
    long n_masked;
    double nsp_loss_sum, nsp_correct;
    long n_nsp;
    double mlm_log_z_sq; /* sum over MLM rows of logsumexp(logits)^2 (with z_loss) */
    double attn_score_sq; /* sum of squared attention scores (with the penalty, training) */
    /* with bert_pass.defer_stats: the reduce_defer index of each sum above
     * (-1: none), the attention's one per layer that ran, consecutive */
    struct {
        int mlm_loss, mlm_correct, nsp_loss, nsp_correct, log_z_sq, attn_first, n_attn;
    } ticket;
} bert_stats;

/* What a forward pass leaves for its backward, besides the activations in
 * the model's buffers: the caller owns it, so the model keeps no state of a
 * pass. The top layer is the last encoder layer that runs: after its
 * attention it computes only the rows the heads read (masked tokens and
 * [CLS]), the same values as at every row. */
typedef struct {
    int B, T, n_masked;       /* the batch's shape */
    int top_layer, n_top;     /* the top layer and its rows; -1 and 0: every row in every
                               * layer (no head reads, Admin profiling, dense_top) */
    int n_top_read;           /* of them, the rows the heads read (the rest: padding) */
    int n_head;               /* the MLM head's rows: n_masked padded as the top layer's
                               * rows are (top_rows_multiple, rows_to_capacity), the added
                               * ones labelled -1 */
    unsigned long forward_id; /* which of the model's forward passes this is */
    bool heads_distinct;      /* no row of the encoder's output gets two heads' gradients
                               * (bert_heads_distinct) */
} bert_tape;

typedef struct bert_model bert_model;

struct bert_model {
    bert_config cfg;
    bt_backend *be;
    int max_batch, max_seq, max_masked; /* activation capacity */
    bert_tensor *tensors;
    int n_tensors;
    size_t n_params;
    bert_views v;
    bt_buffer *params; /* (n_params) fp32 master weights */
    bt_buffer *params16; /* with gemm16: (n_params) the weights in cfg.storage, the GEMMs'
                          * operand (the optimizer writes it with each step), or NULL */
    bool params16_fresh; /* params16 holds the weights now (else the next forward
                          * makes it again: bert_params_at hands the weights out) */
    bt_buffer *grads;  /* (n_params) gradient sums */
    bt_buffer **acts;  /* activations and backward scratch: act->n_buffers buffers, none
                        * past the device's largest allocation (bert_act_layout) */
    bt_buffer *ints;   /* uploaded int32 batch inputs */
    int32_t *ints_host; /* their staging on the host (act->ints_batch), reused every batch */
    bt_row_links_work links_work; /* bt_row_links' table, reused every batch */
    struct bert_act_layout *act;
    bt_buffer **stash;            /* 16-bit storage: every layer's saved activations between
                                   * forward and backward, in cfg.storage, stash_layers
                                   * layers a buffer, n_stash buffers (or NULL) */
    int n_stash, stash_layers;
    unsigned long forwards;       /* forward passes run: each tape has its number */
    unsigned long acts_of;        /* the forward whose activations the buffers hold (0: none,
                                   * or its backward has consumed them) */
    bool gemm16;                  /* GEMMs multiply 16-bit operands (see cfg.gemm16) */
    bt_buffer *operand16; /* with gemm16 on 16-bit GEMM hardware: act->operand16 elements
                           * in cfg.storage (bert_operand16), or NULL */
    unsigned unfused;             /* BERT_FUSE_* fusions off: all where the device says they
                                   * do not pay (bt_device_info), else none; bench --unfused */
    bool fused_attention; /* attention_fwd / attention_bwd (cfg.attention_kernel) */
    bool dense_top; /* no top layer: every row in every layer (bench --dense-top; tests) */
    int top_rows_multiple; /* the top layer's rows padded up to a multiple of this, with
                            * rows no head reads (bt_device_info.gemm_rows_multiple;
                            * 1: none; at most BERT_TOP_ROWS_MULTIPLE_MAX) */
    bool rows_to_capacity; /* the top layer's and the MLM head's rows padded to the batch's
                            * masked_bound, or to their capacity above it or without one:
                            * the same every batch (bt_device_info.replays_graphs) */
    bool replays_graphs;   /* bt_device_info.replays_graphs: a training step on one rank
                            * gates its update on the device (step_gate), one region */
};

/* The largest padding of the top layer's rows the activations make room for. */
#define BERT_TOP_ROWS_MULTIPLE_MAX 128

/* The fused ops the model uses, each a bit of bert_model.unfused to turn it
 * off. Results are the same bits either way, in every storage (with 16-bit
 * storage the fused kernels round what the unfused ops' stores round), but
 * for BERT_FUSE_EPILOGUE's bias gradients on CUDA, which cuBLASLt sums in
 * its own (fixed) order. */
enum {
    BERT_FUSE_GELU = 1,      /* bias_gelu_fwd, bias_gelu_bwd */
    BERT_FUSE_JOIN = 2,      /* bias_dropout_add, residual_layernorm_fwd; Post-LN's backward
                              * join with LN1's backward (layernorm_bwd's dbranch), and a
                              * branch's dropout with the LayerNorm backward before it
                              * (layernorm_bwd's drop) */
    BERT_FUSE_ATTENTION = 4, /* softmax_dropout_fwd, dropout_softmax_bwd */
    BERT_FUSE_CAST = 8,      /* one 16-bit copy of a backward operand for its two GEMMs
                              * (bert_operand16), not a conversion in each */
    BERT_FUSE_EPILOGUE = 16, /* gemm16_bias, gemm16_bias_grad: a linear layer's bias and its
                              * gradient in the GEMMs (16-bit GEMMs only) */
    BERT_FUSE_ALL = 31
};

/* Fill cfg with a named preset (tiny, mini, small, medium, base, large);
 * false if the name is unknown. Vocabulary and dropout keep BERT's defaults. */
bool bert_preset(const char *name, bert_config *cfg);

/* How start-up lines name a model of shape cfg configured from `preset`:
 * "tiny"; "tiny modified (hidden_size 256 instead of 128)" when the config
 * overrides some of the preset's layers, hidden size, heads and intermediate
 * size; "custom" when it overrides all of them, or there is no preset. */
void bert_describe(const char *preset, const bert_config *cfg, char *out, size_t n);

/* Check a config; on error write "key: problem" into err and return false. */
bool bert_config_valid(const bert_config *cfg, char *err, size_t errlen);

/* Build the tensor table and allocate parameters, gradients and activations for
 * micro-batches up to (max_batch, max_seq) with up to max_masked MLM rows.
 * NULL with a reason in err when memory runs out. */
bert_model *bert_create(bt_backend *be, const bert_config *cfg, int max_batch, int max_seq,
                        int max_masked, char *err, size_t errlen);
void bert_free(bert_model *m);

/* Initialize parameters as BERT does (truncated normal(0, initializer_range)
 * within 2 sigma, zero biases, unit LayerNorm, zero [PAD] row) from seed. */
void bert_init_params(bert_model *m, uint64_t seed);

/* Find a tensor by its Hugging Face name; NULL if absent. */
const bert_tensor *bert_find_tensor(const bert_model *m, const char *name);

/* Forward pass: loss sums and, when pass->mlm_grad_scale/nsp_grad_scale are
 * nonzero, the loss gradients that bert_backward then propagates; what the
 * backward needs to know of it goes to *tape. */
void bert_forward(bert_model *m, const bert_batch *batch, const bert_pass *pass,
                  bert_tape *tape, bert_stats *stats);

/* Fill st's sums from the values of its deferred reductions (values[i] =
 * reduction i since the fetch's queue began): the same bits as a forward
 * without defer_stats. */
void bert_stats_resolve(const bert_model *m, bert_stats *st, const double *values);

/* Backward pass of the model's last forward (its tape; an earlier tape is an
 * internal error, its activations are gone): grads += d loss / d params. */
void bert_backward(bert_model *m, const bert_batch *batch, const bert_pass *pass,
                   const bert_tape *tape);

/* LayerDrop's decisions for optimizer step `step`: skip[l] = 1 for each layer
 * the step leaves out, a pure function of (seed, step), so every rank, backend
 * and resume drops the same layers. Returns how many are skipped. */
int bert_layerdrop_draw(const bert_config *cfg, uint64_t seed, uint64_t step,
                        unsigned char *skip);

/* Admin's omega for every sublayer from the closed form sqrt((N+1)/ln(N+1) - 1),
 * N = 2 num_hidden_layers: no data needed. */
void bert_admin_closed_form(bert_config *cfg);

/* Admin's profiling forward pass on one batch (no dropout): omega_0 = 1 and
 * omega_i^2 = omega_{i-1}^2 + Var f_{i-1}, each branch's variance measured
 * with the omegas before it in place. Sets m->cfg.admin_omega. */
void bert_admin_profile(bert_model *m, const bert_batch *batch);

/* The device memory of a model (bert_memory_needed), in bytes. */
typedef struct {
    double params; /* the weights; the gradients and each optimizer moment take as much */
    double acts;   /* the fp32 activation buffer: the model's largest single allocation */
    double ints;   /* the int32 buffer: the batch's inputs and the gather tables */
    double stash;  /* the 16-bit activation stash (0 with fp32 storage) */
    double params16; /* the weights' 16-bit copy for gemm16: with 16-bit storage, at most
                      * (the device may have no tensor cores for it) */
    double operand16; /* gemm16's copy of an operand two GEMMs read (bert_operand16): the
                       * same, at most */
    double largest_act; /* the largest activation tensor: the activations are split into
                         * buffers of at most max_buffer bytes, but a tensor is never split */
    double stash_layer; /* one layer's 16-bit stash: a stash buffer holds whole layers */
    int act_buffers;    /* how many buffers the activations take */
} bert_memory;

/* What bert_create would allocate for this shape and capacity on a device
 * whose largest allocation is max_buffer bytes (0: no limit below its
 * memory), computed in 64 bits without allocating it: set-up checks it
 * against the device before anything is allocated. false with why when a
 * count exceeds the model's int32 row indices or any device (so no size
 * arithmetic can wrap). */
bool bert_memory_needed(const bert_config *cfg, long long max_batch, long long max_seq,
                        long long max_masked, size_t max_buffer, bert_memory *out, char *err,
                        size_t errlen);

/* Device bytes that activations take (fp32 buffers, the 16-bit stash, int32
 * inputs): what mixed precision saves is visible here. */
size_t bert_activation_bytes(const bert_model *m);

/* How many device buffers the activations take: more than one where the
 * device's largest allocation (bt_device_info.max_alloc) is smaller than
 * they are (the fp32 activations and the 16-bit stash counted together). */
int bert_activation_buffers(const bert_model *m);

/* The flat buffers at element off, as device pointers: the parameters and
 * their gradients, in the tensor table's layout. Code outside the model
 * (store/, train/) reads and writes them through these; whatever it does
 * with the parameters, the next forward makes their 16-bit copy again. */
bt_ptr bert_params_at(bert_model *m, size_t off);

/* The 16-bit copy of the weights (gemm16's operand) made from the fp32
 * weights, unless the optimizer's steps have kept it current since anything
 * else touched them; every forward starts with it. */
void bert_params16_refresh(bert_model *m);
bt_ptr bert_grads_at(const bert_model *m, size_t off);

/* How many parameters (elements of each flat buffer). */
size_t bert_n_params(const bert_model *m);

/* Set all gradients to zero (start of an optimizer step). */
void bert_zero_grads(bert_model *m);

/* Training FLOPs of one sample (forward + backward, 6 per MAC plus attention);
 * top_rows_per_seq: the rows the top layer computes after its attention
 * (bert_tape.n_top per sequence; seq_len when every row). */
double bert_train_flops_per_sample(const bert_config *cfg, int seq_len, double masked_per_seq,
                                   double top_rows_per_seq);

#endif
