/* The model's ops (bert_ops.c, internal to src/model): each wraps backend
 * ops and stores what it writes as the model stores values, so that the
 * blocks of bert.c read as the math. Storing is mixed precision's business:
 * with 16-bit storage every activation and activation gradient an op
 * completes is rounded to cfg.storage, and during a layer's forward the
 * saved ones go through that layer's 16-bit stash (bert_act.c); with fp32
 * storage nothing happens. The few ops whose result another op finishes
 * say so (op_linear_nobias, op_softmax's dropped copy).
 *
 * Operands are offsets: x, y, out, in and their gradients into the
 * activations (bert_act_layout fields), w and b into the parameters and,
 * for gradients, the gradients (bert_views fields). */
#ifndef BT_BERT_OPS_H
#define BT_BERT_OPS_H

#include "bert_internal.h"

/* An out-of-range parameter offset: op_linear_bwd leaves the bias gradient
 * to a fused op. */
#define NO_BIAS ((size_t)-1)

/* out (rows, out_f) = in (rows, in_f) @ W^T, W (out_f, in_f): the product
 * alone, which the bias op after it finishes and stores. */
void op_linear_nobias(bert_run *r, size_t out, size_t in, size_t w, int rows, int in_f, int out_f);

/* out (rows, out_f) = in (rows, in_f) @ W^T + b, stored. With fp32 storage
 * b is written into every row and the GEMM adds onto it (beta 1), so no
 * pass of its own adds the bias: the products accumulate onto b, not the
 * bits of a bias_add after. With 16-bit storage the GEMM writes the product
 * and bias_add adds b in the pass that stores it (rounding, stash copy);
 * where only the 16-bit copy is read after and GEMMs run in 16 bits
 * (gemm16), b is broadcast into that copy in 16 bits and the GEMM adds onto
 * it, one rounding of each sum (a biased GEMM's bits, not bias_add's). */
void op_linear(bert_run *r, size_t out, size_t in, size_t w, size_t b, int rows, int in_f,
               int out_f);

/* op_linear with 16-bit storage whose result goes to out16 in the storage's
 * 16 bits only (the bits op_linear would store): the GEMM writes out, which
 * is then scratch, and bias_add writes out16; with gemm16 the GEMM writes
 * out16 onto the broadcast bias, as op_linear's, and out is not touched. */
void op_linear_to16(bert_run *r, bt_ptr out16, size_t out, size_t in, size_t w, size_t b,
                    int rows, int in_f, int out_f);

/* Backward of op_linear: dW += dout^T in; db += the column sums of dout
 * (unless b is NO_BIAS); din = dout W. */
void op_linear_bwd(bert_run *r, size_t din, size_t w, size_t b, size_t dout, size_t in, int rows,
                   int in_f, int out_f);

/* op_linear_bwd with din left as the GEMM wrote it, not stored (rounded) as
 * the model stores activations (for a din whose readers all round it as they
 * read it), and dout's 16-bit copy for the two GEMMs already made by the op
 * that wrote dout (d16; buf NULL: cast here where the cast fusion is on).
 * bias_grad rounds dout to the storage as it reads it: the same bits for a
 * stored dout, a stored dout's for one not yet stored (a branch's gradient
 * after its dropout). */
void op_linear_bwd_given16(bert_run *r, size_t din, size_t w, size_t b, size_t dout, bt_ptr d16,
                           size_t in, int rows, int in_f, int out_f);

/* op_linear_bwd_given16 (d16 made here) for a dout not yet stored (rounded) as the model
 * stores activations: rounded where it is read, by the cast of its 16-bit
 * copy and by bias_grad, or by a pass first where no copy is made. */
void op_linear_bwd_unrounded(bert_run *r, size_t din, size_t w, size_t b, size_t dout, size_t in,
                             int rows, int in_f, int out_f);

/* op_linear_bwd_given16 (d16 given) with din written in 16 bits only, at
 * din16 (the input-gradient GEMM's rounding): for a din that only GEMMs
 * read, from that copy. */
void op_linear_bwd_to16(bert_run *r, bt_ptr din16, size_t w, size_t b, size_t dout, bt_ptr d16,
                        size_t in, int rows, int in_f, int out_f);

/* op_linear_bwd_given16 for a dout that exists only as its 16-bit copy d16
 * (rows, out_f), the values stored: both GEMMs and bias_grad read d16. With
 * din16 (buf not NULL) din is written in 16 bits only, there, as in
 * op_linear_bwd_to16 (din not written). */
void op_linear_bwd_from16(bert_run *r, size_t din, bt_ptr din16, size_t w, size_t b, bt_ptr d16,
                          size_t in, int rows, int in_f, int out_f);

/* out = LayerNorm(in) (rows, H) with the parameters w, b; mean and rstd
 * (rows) saved for the backward. */
void op_layernorm(bert_run *r, size_t out, size_t mean, size_t rstd, size_t in, size_t w,
                  size_t b, int rows);

/* Backward of op_layernorm: dx from dy (dx may be dy), dw and db += . With
 * drop (NULL: none) also dropout(dx) into drop->out16 as dx is written
 * (layernorm_bwd's bt_ln_bwd_drop: a Post-LN branch's gradient). */
void op_layernorm_bwd(bert_run *r, size_t dx, size_t w, size_t b, size_t dy, size_t x,
                      size_t mean, size_t rstd, int rows, const bt_ln_bwd_drop *drop);

/* Which gradients of op_join_layernorm_bwd its buffers hold in the
 * storage's 16 bits instead of fp32 (a bit mask): dbranch (a GEMM's 16-bit
 * result written there), dy (a gradient stored so), and dx, which it
 * writes so. */
enum { LN_DBRANCH16 = 1u, LN_DY16 = 2u, LN_DX16 = 4u };

/* op_residual_bwd (omega 1) of dy and the branch's gradient dbranch (rows,
 * H), then op_layernorm_bwd of the sum, in one op: dbranch is read as its
 * store would round it, and may be left unstored. halves: the gradients in
 * 16 bits (LN_DBRANCH16 ...), read as they are; dx in 16 bits is the
 * rounded dx's bits (dx may be dy in both types). */
void op_join_layernorm_bwd(bert_run *r, size_t dx, size_t w, size_t b, size_t dy, size_t dbranch,
                           unsigned halves, size_t x, size_t mean, size_t rstd, int rows,
                           const bt_ln_bwd_drop *drop);

/* fc1 += b (rows, cols), then gelu = GELU(fc1): one fused op where it is
 * on (BERT_FUSE_GELU), else the two it replaces. */
void op_bias_gelu(bert_run *r, size_t gelu, size_t fc1, size_t b, int rows, int cols);

/* fc1 (rows, out_f) = in (rows, in_f) @ W^T + b, gelu = GELU(fc1), both
 * stored: op_linear_nobias then op_bias_gelu; or, where GEMMs run in 16
 * bits (gemm16) and fc1 has a 16-bit stash slot, or else a 16-bit home
 * (fc1_home16: buf NULL, none; the MLM head's), fc1 there only, as
 * op_linear's biased 16-bit GEMM writes it, and GELU of its values (fp32
 * fc1 then written only where the GELU fusion is off, for gelu_bwd); with
 * gemm16 and neither (a recomputed layer's), fc1 in fp32 with those values
 * (op_linear), then op_gelu. */
void op_linear_gelu(bert_run *r, size_t gelu, size_t fc1, bt_ptr fc1_home16, size_t in,
                    size_t w, size_t b, int rows, int in_f, int out_f);

/* Backward of op_bias_gelu's GELU in place: d *= GELU'(fc1), fc1 read from
 * its stash slot, else from fc1_home16 where given (op_linear_gelu's
 * home: the fused op only), else in fp32; returns true
 * when the fused op has also added b's gradient (op_linear_bwd then gets
 * NO_BIAS). With dout16 (buf not NULL; the fused op only) d's incoming
 * values are there in the storage's 16 bits instead (a GEMM's 16-bit
 * result), read as they are. *d16 gets d's 16-bit copy for the GEMMs after
 * it where the fused op wrote it into the operand16 buffer
 * (bert_operand16_room), else buf NULL. */
bool op_bias_gelu_bwd(bert_run *r, size_t d, bt_ptr dout16, size_t fc1, bt_ptr fc1_home16,
                      size_t b, int rows, int cols, bt_ptr *d16);

/* out = GELU(in) and its backward dx = dy * GELU'(x), n values. With stored
 * false dx is left as the op wrote it, not stored (rounded): for a dx whose
 * readers round it as they read it (op_linear_bwd_unrounded). */
void op_gelu(bert_run *r, size_t out, size_t in, size_t n);
void op_gelu_bwd(bert_run *r, size_t dx, size_t dy, size_t x, size_t n, bool stored);

/* out = tanh(in) and its backward dx = dy * (1 - y^2), n values; with
 * stored false dx is left as the op wrote it (as op_gelu_bwd's). */
void op_tanh(bert_run *r, size_t out, size_t in, size_t n);
void op_tanh_bwd(bert_run *r, size_t dx, size_t dy, size_t y, size_t n, bool stored);

/* x (rows, cols) += b in every row, the sums rounded by the op (16-bit
 * storage). */
void op_bias_add(bert_run *r, size_t x, size_t b, int rows, int cols);

/* x = dropout(x) in place (p 0: x as it is), n values in samples of
 * per_sample from the batch's first sample. With stored false x is left as
 * the op wrote it: for a gradient whose one reader rounds it as it reads it
 * (layernorm_bwd). */
void op_dropout(bert_run *r, size_t x, size_t n, size_t per_sample, float p, bt_rng_key key,
                bool stored);

/* out = omega * resid + branch (n values): a residual join. */
void op_residual(bert_run *r, size_t out, float omega, size_t resid, size_t branch, size_t n);

/* Backward of op_residual for its input: d = omega * d + dbranch. With stored false the sum is left as the
 * ops wrote it, not stored (rounded): for a sum whose one reader rounds it
 * as it reads it (layernorm_bwd). With stored true dbranch must hold stored
 * values (rounded): with 16-bit storage, omega 1 and the join fusion the sum
 * is rounded as it is made (add_dropout with no dropout), not by a pass. */
void op_residual_bwd(bert_run *r, size_t d, float omega, size_t dbranch, size_t n,
                     bool stored);

/* out = resid + dropout(branch + b) (rows, H), then with norm: norm's out
 * = LayerNorm(out): one fused op (BERT_FUSE_JOIN). With norm, resid16 (buf
 * NULL: none) holds resid's values in the storage's 16 bits, read instead
 * of resid; out_kept false: norm's out is wanted in its stash copy alone,
 * its fp32 values left unwritten where the op has that copy. */
typedef struct {
    size_t out, mean, rstd, w, b;
} join_norm;
void op_join_fused(bert_run *r, size_t out, const join_norm *norm, size_t branch, size_t b,
                   size_t resid, int rows, size_t per_sample, float p, bt_rng_key key,
                   bt_ptr resid16, bool out_kept);

/* dst = src, n values; stored false: as op_dropout's. */
void op_copy(bert_run *r, size_t dst, size_t src, size_t n, bool stored);

/* d (n values) = the rows of a (rows_a of cols) added at the rows that
 * table_a (int32 offset) lists, plus those of b at table_b's, into zeros:
 * the gradient of a tensor that two row gathers read (rows 0: none). With
 * stored false the sums are left as the scatters wrote them, for a reader
 * that rounds them as it reads them (layernorm_bwd). */
void op_gathers_bwd(bert_run *r, size_t d, size_t n, size_t a, size_t table_a, int rows_a,
                    size_t b, size_t table_b, int rows_b, int cols, bool stored);

/* n values from activation offset off, written by ops called outside this
 * file (the attention's batched GEMMs), are complete: stored as every op
 * here stores what it writes (16-bit rounding, the stash). */
void op_stored(bert_run *r, size_t off, size_t n);

/* probs = softmax(scale * scores) over the keys the mask keeps (B, NH, T, T),
 * in place, and with p > 0 dropped = dropout(probs): one fused op
 * (BERT_FUSE_ATTENTION) or the two. dropped is the GEMM's operand, not
 * stored. In a layer's forward the fused op writes the stash's copy of probs
 * itself, and dropped's 16-bit copy for the GEMM into the operand16 buffer
 * (bert_operand16_room), which it returns; else buf NULL. */
bt_ptr op_softmax(bert_run *r, size_t probs, size_t dropped, size_t mask, int NH, float scale,
                  float p, bt_rng_key key);

/* Backward of op_softmax in place on dprobs, plus penalty * scores where
 * penalty > 0 (the attention-logit penalty's gradient; scores (B, NH, T, T)).
 * The fused op reads probs from the stash where it is there, and without
 * the penalty writes the 16-bit copy of the result that the GEMMs after it
 * read into the operand16 buffer (bert_operand16_room), which it returns;
 * else buf NULL. */
bt_ptr op_softmax_bwd(bert_run *r, size_t dprobs, size_t probs, int NH, float scale, float p,
                      bt_rng_key key, float penalty, size_t scores);

/* Cross-entropy of logits (rows, classes) against labels: per-row loss,
 * correct and log-sum-exp; the logits become d loss / d logits (times
 * grad_scale, with z_loss's term), stored as the model stores activations
 * (rounded by the op itself). dlogits16 given (16-bit storage): the
 * gradient goes there in 16 bits only, and the logits stay as they are. */
void op_xent(bert_run *r, size_t logits, size_t loss, size_t correct, size_t log_z,
             size_t labels, int rows, int classes, float grad_scale, float z_loss,
             bt_ptr dlogits16);

/* op_xent on logits in the storage's 16 bits at logits16 (op_linear_to16's),
 * whose gradient goes there too in 16 bits, over them. */
void op_xent_from16(bert_run *r, bt_ptr logits16, size_t loss, size_t correct, size_t log_z,
                    size_t labels, int rows, int classes, float grad_scale, float z_loss);

/* The gradients of parameters [begin, end) are complete for this
 * micro-batch: stored (rounded to 16 bits after the step's last
 * micro-batch), and reported for an early allreduce. */
void op_grads_done(bert_run *r, size_t begin, size_t end);

#endif
