/* The dispatch table every backend fills in.
 *
 * Device memory is an opaque bt_buffer; a device address is (buffer, byte
 * offset), so no backend needs sub-buffers. All math is fp32 unless an op takes
 * a dtype. Matrices are row-major. Ops that produce gradients say whether they
 * overwrite (=) or accumulate (+=) their output; accumulation never uses atomics,
 * so the same inputs give the same bits on the same backend. */
#ifndef BT_BACKEND_H
#define BT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct bt_buffer bt_buffer;

/* A device address: a buffer and a byte offset into it. */
typedef struct {
    bt_buffer *buf;
    size_t off;
} bt_ptr;

/* No address: an optional tensor left out. */
#define BT_NO_PTR ((bt_ptr){NULL, 0})

/* Address `count` fp32/int32 elements past p. */
static inline bt_ptr bt_at(bt_ptr p, size_t count) {
    p.off += count * 4;
    return p;
}

typedef enum { BT_F32 = 0, BT_BF16 = 1, BT_F16 = 2 } bt_dtype;

/* gemm16's operands that are stored in its 16-bit dtype (a bit mask);
 * BT_GEMM_C16: the result too. */
enum { BT_GEMM_A16 = 1u, BT_GEMM_B16 = 2u, BT_GEMM_C16 = 4u };

/* Elements a gemm operand spans in its buffer: `batch` matrices of `rows` x
 * `cols` (as stored: transposed ones swapped) with row stride ld and batch
 * stride `stride`. Backends that stage operands copy this much. */
static inline size_t bt_gemm_operand_span(int rows, int cols, int ld, long stride, int batch) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

/* The matrices of gemm_grid: `outer` groups of `batch`, matrix (o, i) of
 * operand X at X + o * outer_x + i * stride_x elements. */
typedef struct {
    int batch, outer;
    long stride_a, stride_b, stride_c;
    long outer_a, outer_b, outer_c;
} bt_gemm_grid;

/* The widest head (values per head) attention_fwd and attention_bwd take. */
#define BT_ATTENTION_MAX_HEAD 128

/* Bytes per element of a dtype. */
static inline size_t bt_dtype_size(bt_dtype t) { return t == BT_F32 ? 4 : 2; }

typedef struct {
    char name[128];
    char vendor[128];
    size_t total_mem;     /* bytes */
    size_t free_mem;      /* bytes, 0 if unknown */
    size_t max_alloc;     /* the largest single buffer in bytes (OpenCL's
                             CL_DEVICE_MAX_MEM_ALLOC_SIZE); 0: no limit below total_mem */
    int compute_units;
    bool has_fp16;
    /* gemm16 with fp16 / bf16 operands runs on 16-bit hardware (tensor cores), so
     * mixed precision uses it; elsewhere it would only add rounding passes */
    bool tensor_f16, tensor_bf16;
    /* fp32 GEMMs run on TF32 tensor cores (inputs rounded to 10 mantissa
     * bits): the tf32 option on a device that has them */
    bool gemm_tf32;
    bool has_fp64;
    /* the fused ops (bias_gelu_fwd ... dropout_softmax_bwd) beat the ops they
     * replace here, so the model uses them: the CPU (measured), GPUs (where
     * a pass over memory costs more than the arithmetic it saves); not CPU
     * devices under OpenCL, whose fused kernels draw 4x the random numbers
     * (measured on PoCL: docs/PERFORMANCE.md) */
    bool fused_ops_pay;
    /* a GEMM dimension that changes from step to step (the top layer's rows)
     * is best padded up to a multiple of this: cuBLAS chooses and loads its
     * kernels per shape, and a new row count cost up to 5 ms a GEMM in bf16 on
     * an H100 (docs/PERFORMANCE.md); 0 or 1: shapes cost nothing extra */
    int gemm_rows_multiple;
    /* the device can record a step's regions (graph_begin) and replay them
     * whole while they stay the same: a shape that changes from step to step
     * (the heads' rows) is best padded to its largest, so that it does not */
    bool replays_graphs;
    /* attention_fwd / attention_bwd beat the GEMMs, softmax and dropout they
     * replace here, so the model uses them (model.attention_kernel "auto").
     * No backend claims it: on an H100 the fused kernels made BERT-base's
     * step 1.5-2.6x slower (docs/PERFORMANCE.md, "Fused attention"), and on
     * the CPU the GEMM path is faster */
    bool fused_attention_pays;
    /* the tuned parameters this device's kernels run with and where they came
     * from (OpenCL: "CLBlast tuning for Xgemm from FILE"), for the start-up
     * lines; "" when none were loaded */
    char tuning[320];
} bt_device_info;

/* Key of a counter-based random stream (Philox-4x32-10): the value for element
 * e of sample s under (seed, stream) is the same on every backend. */
typedef struct {
    uint64_t seed;
    uint64_t stream;
} bt_rng_key;

/* What a deferred reduction computes (reduce_defer). */
typedef enum {
    BT_REDUCE_SUM = 0,   /* sum of x[i] (as the sum op) */
    BT_REDUCE_SUMSQ = 1, /* sum of x[i]^2 (as sumsq) */
    BT_REDUCE_FINITE = 2 /* 1 when no x[i] is NaN or Inf, else 0 (as all_finite) */
} bt_reduce_kind;

/* One tensor of a multi-tensor optimizer step: elements [offset, offset +
 * numel) of the flat parameter, gradient and moment buffers, with its own
 * weight decay and bias corrections (see adamw_step). */
typedef struct {
    size_t offset, numel;
    float weight_decay, bc1, bc2;
} bt_tensor_span;

/* A step's gate (step_gate): whether the optimizer's update applies and the
 * scale of its gradients, decided on the device from reductions queued
 * since the last reduce_fetch (their indices), with the host's arithmetic
 * in double:
 *   skip when finite >= 0 and its value is 0 (fp16: the scaled gradients
 *   overflowed); with guard, also when the loss or the norm is not finite,
 *   or when loss_limit > 0 and the loss is above it;
 *   norm = sqrt(value of norm_sumsq);
 *   loss = (sum over mlm_loss[k] of their values, in order) / masked (0 when
 *   masked is 0) + the same over nsp_loss[k] with nsp;
 *   grad_scale = max_norm <= 0 ? 1 : (float)min(1, max_norm / (norm + 1e-6)). */
typedef struct bt_step_gate_s {
    int finite;          /* all_finite's index, or -1 */
    int norm_sumsq;      /* sumsq of the gradients (clipping's norm) */
    const int *mlm_loss; /* n_mlm indices of MLM loss sums */
    int n_mlm;
    double masked;       /* the MLM loss's divisor */
    const int *nsp_loss; /* n_nsp indices of NSP loss sums */
    int n_nsp;
    double nsp;          /* the NSP loss's divisor */
    bool guard;          /* the divergence guard's checks of the loss and norm */
    double loss_limit;   /* > 0: skip a loss above it */
    float max_norm;      /* gradient clipping's norm (<= 0: no clipping) */
} bt_step_gate;

/* The storage of layernorm_bwd's tensors (BT_F32, or 16 bits: BT_BF16,
 * BT_F16) and its rounding. */
typedef struct {
    bt_dtype round16; /* dout rounded to it as it is read, dx as it is written (BT_F32: neither) */
    bt_dtype x;       /* 16 bits: the stash's copy, read as it is */
    bt_dtype dbranch; /* 16 bits: a GEMM's 16-bit result, read as it is */
    bt_dtype dout;    /* 16 bits: a gradient stored in 16 bits, read as it is */
    bt_dtype dx;      /* 16 bits: cast's bits of the fp32 dx the op computes */
} bt_ln_bwd_types;

/* The dropout layernorm_bwd may apply to the dx it writes: a Post-LN join's
 * branch gradient (dropout's backward of dx), made as dx is written instead
 * of read back by `dropout`. */
typedef struct {
    bt_ptr out16;          /* dropout(dx), as `dropout` gives it on dx's values, cast's bits */
    bt_dtype kind16;       /* out16's dtype: BT_BF16 or BT_F16 */
    size_t per_sample;     /* dropout's per_sample, first_sample, p and key */
    uint32_t first_sample;
    float p;
    bt_rng_key key;
} bt_ln_bwd_drop;

/* What a backend has done since its creation, for the profiler and the
 * tests of the host-sync budget. */
typedef struct {
    long launches;     /* kernels and BLAS calls enqueued (the CPU: op calls) */
    long host_reads;   /* blocking device-to-host reads: downloads, reductions to the host */
    long host_syncs;   /* waits for the device to finish (sync) */
    long host_writes;  /* blocking host-to-device copies (upload) */
    size_t mem_in_use; /* bytes allocated through alloc and not freed */
    size_t mem_peak;   /* the most mem_in_use has been */
} bt_counters;

typedef struct bt_backend bt_backend;

struct bt_backend {
    const char *name; /* "cpu", "opencl", "cuda" */
    void *ctx;

    /* ---- device ---- */
    void (*destroy)(bt_backend *be);
    void (*info)(bt_backend *be, bt_device_info *out);
    void (*sync)(bt_backend *be);

    /* ---- memory ---- */
    bt_buffer *(*alloc)(bt_backend *be, size_t bytes); /* NULL when out of memory */
    void (*free)(bt_backend *be, bt_buffer *buf);
    void (*upload)(bt_backend *be, bt_ptr dst, const void *src, size_t bytes);
    void (*download)(bt_backend *be, void *dst, bt_ptr src, size_t bytes);
    /* Host memory that the async copies below move without a staging copy or
     * a wait: page-locked on CUDA where the driver grants it (else ordinary
     * memory, and the copies still work), ordinary elsewhere. NULL when out
     * of host memory. host_free waits for the copies that use it. */
    void *(*host_alloc)(bt_backend *be, size_t bytes);
    void (*host_free)(bt_backend *be, void *p);
    /* Starts copying `bytes` from src into dst (host memory, best from
     * host_alloc) after the work issued so far, and returns at once with the
     * copy's ticket: 1, 2, 3, ... in issue order. The work issued after it
     * does not wait for it (CUDA: the copy runs on a second stream). dst must
     * not be read, nor src written, until downloads_done says the ticket has
     * arrived. */
    long (*download_async)(bt_backend *be, void *dst, bt_ptr src, size_t bytes);
    /* Whether every download_async up to `ticket` has arrived in host memory;
     * with wait, blocks until they have (a host wait, counted in host_syncs
     * only when it had to wait) and returns true. Never runs anything else.
     * On a device that records regions (graph_begin: CUDA) the copies
     * issued in a region run when graph_end launches it: until then it says
     * false for them without wait, and a wait ends the region. */
    bool (*downloads_done)(bt_backend *be, long ticket, bool wait);
    /* As upload, in order with the ops, but src (best from host_alloc) is
     * read when the copy runs: it must stay unchanged until a download_async
     * issued after it has arrived, or a sync. Nothing waits (CUDA, from
     * page-locked src; OpenCL; the CPU copies at once). */
    void (*upload_async)(bt_backend *be, bt_ptr dst, const void *src, size_t bytes);
    void (*copy)(bt_backend *be, bt_ptr dst, bt_ptr src, size_t bytes);
    /* dst[0..n) = value (fp32) */
    void (*fill)(bt_backend *be, bt_ptr dst, float value, size_t n);

    /* ---- math ---- */
    /* For each b < batch: C_b = alpha * op(A_b) * op(B_b) + beta * C_b, where
     * op(A_b) is (m, k), op(B_b) is (k, n), C_b is (m, n); X_b = X + b*stride_x
     * elements; ld* are row strides in elements. beta = 0 ignores C's contents. */
    void (*gemm)(bt_backend *be, bool trans_a, bool trans_b, int m, int n, int k,
                 float alpha, bt_ptr a, int lda, long stride_a,
                 bt_ptr b, int ldb, long stride_b,
                 float beta, bt_ptr c, int ldc, long stride_c, int batch);
    /* gemm with 16-bit operands (mixed precision): as gemm, but each element of
     * A and B is a value of dtype (BT_BF16 or BT_F16), and the products
     * accumulate in fp32; C stays fp32. An operand named in stored16
     * (BT_GEMM_A16, BT_GEMM_B16) is stored in dtype, 2 bytes an element (its
     * ld and stride count elements, its pointer's offset bytes), and is read
     * as it is; any other is an fp32 buffer whose elements are rounded to
     * dtype first and left unchanged. With BT_GEMM_C16 C is stored in dtype
     * too (2 bytes an element, ldc and stride_c in elements, its offset in
     * bytes): it gets the fp32 result converted to dtype, cast's bits of
     * what C in fp32 would hold (beta reads C's 16-bit values), and the
     * elements between its matrices keep their bits. CUDA: tensor cores
     * (cuBLAS, fp32 operands converted in device scratch, a 16-bit C written
     * by the GEMM); elsewhere fp32 copies of the 16-bit values go to the fp32
     * GEMM (a 16-bit C through an fp32 copy). The same values give the same
     * bits whether an operand comes in fp32 or in 16 bits. */
    void (*gemm16)(bt_backend *be, bt_dtype dtype, unsigned stored16, bool trans_a,
                   bool trans_b, int m, int n, int k, float alpha, bt_ptr a, int lda,
                   long stride_a, bt_ptr b, int ldb, long stride_b, float beta, bt_ptr c,
                   int ldc, long stride_c, int batch);
    /* gemm (dtype BT_F32) or gemm16 (BT_BF16, BT_F16, with stored16) on every
     * matrix of a two-level grid (bt_gemm_grid), in one launch where the
     * device has a batched GEMM that takes each matrix's address: the
     * attention's heads (batch) of each sequence (outer), read and written in
     * the token-major layouts, so no gather makes head-major copies. Each
     * matrix gets what gemm / gemm16 would compute for it (BT_GEMM_C16 in
     * stored16 with a 16-bit dtype: C in dtype, as gemm16's); the same
     * inputs give the same bits. */
    void (*gemm_grid)(bt_backend *be, bt_dtype dtype, unsigned stored16, bool trans_a,
                      bool trans_b, int m, int n, int k, float alpha, bt_ptr a, int lda,
                      bt_ptr b, int ldb, float beta, bt_ptr c, int ldc, const bt_gemm_grid *grid);
    /* y[r, c] += bias[c], with round16 BT_BF16 or BT_F16 rounded to it
     * (16-bit storage: round16's bits; BT_F32: not rounded). With 16-bit
     * storage y16 (buf NULL: not written) takes y in round16 as well, cast's
     * bits: the 16-bit copy the model keeps, without a cast reading y back.
     * y_kept false (y16 given): y's contents after the call are unspecified
     * (a device may leave it as it was), the copy being all that reads it.
     * With BT_F32 y16 must be NULL. y with buf NULL (y16 given, y_kept
     * false): y is zero and is not read, so y16 gets round16(0 + bias[c])
     * in every row: the bias broadcast in 16 bits, the C that a 16-bit GEMM
     * (gemm16 with BT_GEMM_C16, beta 1) then adds its product to: a linear
     * layer's output with its bias in one rounding, no fp32 pass between.
     *                                           y, y16: (rows, cols) */
    void (*bias_add)(bt_backend *be, bt_ptr y, bt_ptr bias, int rows, int cols,
                     bt_dtype round16, bt_ptr y16, bool y_kept);
    /* dbias[c] += sum_r dy[r, c], with round16 BT_BF16 or BT_F16 each dy
     * rounded to it as it is read (the bits of round16, then bias_grad: for
     * a gradient whose other readers round it too, so that no pass rounds
     * it first); BT_F32: as it is. dy_dtype BT_BF16 or BT_F16: dy holds
     * values of that dtype, 2 bytes an element (a gradient's 16-bit copy,
     * offset in bytes), read as they are (round16 BT_F32 or dy_dtype); the
     * same bits as their fp32 values in dy with dy_dtype BT_F32. */
    void (*bias_grad)(bt_backend *be, bt_ptr dbias, bt_ptr dy, int rows, int cols,
                      bt_dtype round16, bt_dtype dy_dtype);
    /* out[b,t,:] = wte[ids[b,t]] + wpe[t] + wtt[type_ids[b,t]]   out: (B, T, C);
     * ids, type_ids: int32 (B, T) */
    void (*embed_fwd)(bt_backend *be, bt_ptr out, bt_ptr ids, bt_ptr type_ids,
                      bt_ptr wte, bt_ptr wpe, bt_ptr wtt, int B, int T, int C);
    /* dwte[ids] += dout (rows whose id == pad_id get nothing, as torch's
     * padding_idx), dwpe[t] += sum_b dout[b,t], dwtt[type] += dout.
     * V, TV: rows of dwte and dwtt. pad_id < 0 disables the exclusion.
     * ids_links: ids' segments with pad_id skipped (2 B T int32, bt_row_links
     * in row_links.h): the tokens grouped by id, which a backend may follow
     * instead of finding them. */
    void (*embed_bwd)(bt_backend *be, bt_ptr dwte, bt_ptr dwpe, bt_ptr dwtt, bt_ptr dout,
                      bt_ptr ids, bt_ptr ids_links, bt_ptr type_ids, int B, int T, int C,
                      int V, int TV, int pad_id);
    /* out = (x - mean) * rstd * gamma + beta per row; saves mean, rstd (rows).
     * With round16 BT_BF16 or BT_F16 (16-bit storage) out is rounded to it as
     * it is written, round16's bits (BT_F32: not rounded); mean and rstd
     * never are. */
    void (*layernorm_fwd)(bt_backend *be, bt_ptr out, bt_ptr mean, bt_ptr rstd, bt_ptr x,
                          bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                          bt_dtype round16);
    /* dx = d out / d x (may alias dout), dgamma += sum_r dout * xhat,
     * dbeta += sum_r dout   (x, mean, rstd from the forward); with round16
     * BT_BF16 or BT_F16 (16-bit storage) dout is rounded to it as it is read
     * and dx as it is written, as round16 before and after would (BT_F32:
     * neither; dout itself is not written unless it is dx); dgamma and
     * dbeta never are. Rounding dout as it is read lets the model leave the
     * rounding pass over a gradient that this op alone reads. With dbranch
     * (buf NULL: none) the op's dout is dout + dbranch, dbranch rounded to
     * round16 first: round16 of dbranch, add, then the op, a residual
     * join's backward and the LayerNorm's before it in one pass (dbranch is
     * not written; dx may alias dout, not dbranch). types (bt_ln_bwd_types)
     * gives round16 and the storage of x, dbranch, dout and dx: a 16-bit
     * input is read as it is, the op giving the bits it gives on its values
     * widened to fp32 (a 16-bit dbranch in round16's dtype: also those of
     * the fp32 dbranch it was cast from, which the op rounds); a 16-bit dx
     * gets cast's bits of the fp32 dx (dx may alias dout where both are).
     * With drop (NULL: none) drop->out16 also takes `dropout` of dx (in
     * types.dx) into drop->kind16, the bits that call would write
     * (bt_ln_bwd_drop; out16 aliases nothing the op reads or writes). */
    void (*layernorm_bwd)(bt_backend *be, bt_ptr dx, bt_ptr dgamma, bt_ptr dbeta,
                          bt_ptr dout, bt_ptr dbranch, bt_ptr x, bt_ptr mean, bt_ptr rstd,
                          bt_ptr gamma, int rows, int cols, bt_ln_bwd_types types,
                          const bt_ln_bwd_drop *drop);
    /* In-place: unless an op says otherwise, an output may alias an input of
     * the same shape that is read at the same index only (dx = dout in the
     * backward ops, out = a in add). */
    /* out = x * Phi(x), exact erf GELU */
    void (*gelu_fwd)(bt_backend *be, bt_ptr out, bt_ptr x, size_t n);
    /* dx = dout * gelu'(x) */
    void (*gelu_bwd)(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr x, size_t n);
    /* out = tanh(x). dtype BT_F32: fp32 out and x; BT_BF16 or BT_F16 (16-bit
     * storage): out and x are 16-bit values of dtype, x read as it is and out
     * rounded as it is written (the fp32 op on x widened, then cast's bits):
     * a 16-bit activation with no fp32 copy and no rounding pass. */
    void (*tanh_fwd)(bt_backend *be, bt_ptr out, bt_ptr x, size_t n, bt_dtype dtype);
    /* dx = dout * (1 - y^2), y = tanh output. dtype as tanh_fwd's: with a
     * 16-bit dtype dx, dout and y are 16-bit values, dx rounded as written. */
    void (*tanh_bwd)(bt_backend *be, bt_ptr dx, bt_ptr dout, bt_ptr y, size_t n, bt_dtype dtype);
    /* probs[b,h,i,:] = softmax_j(scale * scores[b,h,i,j]) over keys j with
     * key_mask[b,j] != 0; masked keys get probability 0.
     * scores, probs: (B, H, T, T); key_mask: int32 (B, T). In-place allowed. */
    void (*softmax_fwd)(bt_backend *be, bt_ptr probs, bt_ptr scores, bt_ptr key_mask,
                        int B, int H, int T, float scale);
    /* dscores = scale * p * (dp - sum_j dp*p) per row of T.  In-place allowed. */
    void (*softmax_bwd)(bt_backend *be, bt_ptr dscores, bt_ptr dprobs, bt_ptr probs,
                        int rows, int T, float scale);
    /* out[i] = keep ? in[i] / (1 - p) : 0, where element i is element
     * (i % per_sample) of sample first_sample + i / per_sample and keep is drawn
     * from key; n is a multiple of per_sample and 0 <= p < 1. The same call on
     * a gradient is the backward. In-place allowed (in_dtype BT_F32).
     * in is in in_dtype: BT_F32, or BT_BF16 / BT_F16 (a 16-bit copy, read as
     * it is). out16 (buf NULL: not written) takes out in kind16 (BT_BF16 or
     * BT_F16), cast's bits: the operand a 16-bit GEMM reads next, without a
     * cast reading out back. out with buf NULL is not written (out16 given). */
    void (*dropout)(bt_backend *be, bt_ptr out, bt_ptr in, size_t n, size_t per_sample,
                    uint32_t first_sample, float p, bt_rng_key key, bt_dtype in_dtype,
                    bt_ptr out16, bt_dtype kind16);
    /* x[s, :] (n_idx rows of cols values) = dropout of x[s, :] as `dropout`
     * over a tensor of such rows would drop row idx[s] (int32): element
     * idx[s] * cols + c of samples of per_sample values (a multiple of cols)
     * from first_sample. In place: a dropout at some rows of a batch (the top
     * layer's, bert_top.c) with the masks they have among all rows. */
    void (*dropout_rows)(bt_backend *be, bt_ptr x, bt_ptr idx, int n_idx, int cols,
                         size_t per_sample, uint32_t first_sample, float p, bt_rng_key key);
    /* out = a + b */
    void (*add)(bt_backend *be, bt_ptr out, bt_ptr a, bt_ptr b, size_t n);
    /* x *= alpha */
    void (*scale)(bt_backend *be, bt_ptr x, float alpha, size_t n);
    /* y += alpha * x */
    void (*axpy)(bt_backend *be, bt_ptr y, float alpha, bt_ptr x, size_t n);
    /* out[i, :] = src[idx[i], :]          idx: int32 (n_idx), rows of cols */
    void (*gather_rows)(bt_backend *be, bt_ptr out, bt_ptr src, bt_ptr idx, int n_idx,
                        int cols);
    /* dst[idx[i], :] += src[i, :]   (adjoint of gather_rows; in order of i).
     * links: idx's segments (2 n_idx int32, bt_row_links in row_links.h
     * with no skip), which a backend may follow instead of finding them. */
    void (*scatter_rows)(bt_backend *be, bt_ptr dst, bt_ptr src, bt_ptr idx, bt_ptr links,
                         int n_idx, int cols);
    /* Per row r of logits (rows, V) with label y = labels[r] (int32):
     * loss[r] = logsumexp(logits[r]) - logits[r, y];  correct[r] = 1 if the
     * first argmax == y else 0; log_z[r] = logsumexp(logits[r]);
     * dlogits[r] = grad_scale * ((1 + 2 z_loss log_z[r]) softmax - onehot(y)),
     * the gradient of loss + z_loss * log_z^2 (z-loss, PaLM; 0: plain cross-entropy).
     * A label < 0 gives loss, correct, log_z and dlogits 0. dlogits may alias logits.
     * round16 (BT_BF16/BT_F16; BT_F32: none): dlogits rounded to that 16-bit
     * storage as written (the model's store of it, without a rounding pass);
     * dlogits16 given (round16 16-bit): the gradient written there only, in
     * round16, for the GEMMs that read it in 16 bits; dlogits is then not
     * written and may be BT_NO_PTR, and dlogits16 must not overlap logits.
     * logits_dtype BT_BF16/BT_F16 (round16's, with dlogits16): logits holds
     * values of that dtype, 2 bytes an element (offset in bytes), read as
     * they are, with the bits of their fp32 values read with BT_F32; then
     * dlogits16 may be logits itself (in place), and only there overlap it. */
    void (*xent_fwd_bwd)(bt_backend *be, bt_ptr dlogits, bt_ptr loss, bt_ptr correct,
                         bt_ptr log_z, bt_ptr logits, bt_ptr labels, int rows, int V,
                         float grad_scale, float z_loss, bt_dtype round16, bt_ptr dlogits16,
                         bt_dtype logits_dtype);
    /* sum of x[i]^2 (a deterministic reduction; the host gets the value) */
    double (*sumsq)(bt_backend *be, bt_ptr x, size_t n);
    /* sum of x[i] (deterministic; the host gets the value) */
    double (*sum)(bt_backend *be, bt_ptr x, size_t n);
    /* true when no x[i] is NaN or Inf */
    bool (*all_finite)(bt_backend *be, bt_ptr x, size_t n);
    /* Deferred reductions, so that a step reads its statistics in one go:
     * queue the reduction `kind` of x[0..n) after everything issued so far
     * and return its index among those queued since the last reduce_fetch.
     * Its value is the bits sum, sumsq or all_finite would return. */
    int (*reduce_defer)(bt_backend *be, bt_reduce_kind kind, bt_ptr x, size_t n);
    /* out[i] = the value of queued reduction i, for every one queued since the
     * last fetch, in one blocking read (none when nothing is queued); the
     * queue empties. */
    void (*reduce_fetch)(bt_backend *be, double *out);
    /* Decide the step's gate (bt_step_gate) on the device, after everything
     * issued so far, and queue it as two values: returns the index of the
     * first, which reads 1 when the update applies and 0 when it is
     * skipped; the next holds the gradients' scale (as a float), so that
     * the host can check both. A
     * multi-tensor optimizer step given that index (`gate`) before the next
     * reduce_fetch reads its gradient scale from the gate and changes
     * nothing when it is skipped: the update and the decision that allows
     * it run with no read by the host in between (one CUDA Graph a step). */
    int (*step_gate)(bt_backend *be, const bt_step_gate *rule);
    /* torch.optim.AdamW on one tensor:  w *= 1 - lr*wd;  m = b1 m + (1-b1) g;
     * v = b2 v + (1-b2) g^2;  w -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
     * bc1 = 1 - b1^t and bc2 = 1 - b2^t, or 1 without bias correction. */
    void (*adamw_step)(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, size_t n,
                       float lr, float beta1, float beta2, float eps, float wd,
                       float bc1, float bc2);
    /* First half of a LAMB step (DeepSpeed semantics): update moments and write
     * u = (m/bc1) / (sqrt(v/bc2) + eps) + wd * w; the trust ratio and
     * w -= lr * trust * u follow from sumsq and axpy. Training uses lamb_multi,
     * which does all of it on the device; this op is its conformance
     * reference, composed that way. */
    void (*lamb_update)(bt_backend *be, bt_ptr u, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v,
                        size_t n, float beta1, float beta2, float eps, float wd,
                        float bc1, float bc2);
    /* adamw_step on every span of the flat buffers w, g, m, v, in a number of
     * launches that does not grow with n_spans, each gradient read as the
     * float product g * grad_scale (gradient clipping without a pass of its
     * own; g is not written). The same bits as scale(g, grad_scale), then one
     * adamw_step per span. Spans do not overlap. Where w16.buf is not NULL,
     * the same pass writes w16[i] = the new w[i] cast to w16_dtype (BT_BF16
     * or BT_F16, 2 bytes an element, as cast) for every element of the
     * spans: the 16-bit weights gemm16 reads (BT_GEMM_B16) with no cast of
     * its own. gate >= 0 (step_gate's index): grad_scale is the gate's, and
     * a skipped gate leaves w, m, v and w16 as they are; -1: no gate. */
    void (*adamw_multi)(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                        bt_dtype w16_dtype, const bt_tensor_span *spans, int n_spans, float lr, float beta1,
                        float beta2, float eps, float grad_scale, int gate);
    /* A whole LAMB step on every span, trust ratios on the device: per span,
     * lamb_update, then trust = ||w|| / ||u|| (1 when either is 0; each norm
     * the square root of sumsq's double value) clamped to [min_coeff,
     * max_coeff], then w += (float)(-(double)lr * trust) * u as axpy. The same
     * bits as those ops per span where the device has fp64 (the conformance
     * suite says so where it has not). Launches do not grow with n_spans.
     * Gradients are read as g * grad_scale, w16 is written and a gate is
     * obeyed, as in adamw_multi. */
    void (*lamb_multi)(bt_backend *be, bt_ptr w, bt_ptr g, bt_ptr m, bt_ptr v, bt_ptr w16,
                       bt_dtype w16_dtype,
                       const bt_tensor_span *spans, int n_spans, float lr, float beta1,
                       float beta2, float eps, float min_coeff, float max_coeff,
                       float grad_scale, int gate);
    /* ---- fused ops: each saves a pass over the activations and gives the
     * bits of the ops it replaces, called in order on the same backend ---- */
    /* y[r, c] += bias[c]; with round16 BT_BF16 or BT_F16 y = round16(y)
     * (16-bit storage; BT_F32: no rounding); out[r, c] = gelu(y[r, c]),
     * rounded to round16 as well: bias_add, round16, gelu_fwd, round16 (the
     * output stored as the storage stores it, no pass after). y keeps the pre-activation the backward
     * needs; out may not alias y. With 16-bit storage out16 and y16 (buf
     * NULL: not written) take out and y in round16 as well, cast's bits:
     * the 16-bit copies the model keeps, without a cast reading them back.
     * out with buf NULL is not written (out16 given): the copy is all that
     * reads it. y_kept false (y16 given): y's contents after the call are
     * unspecified (a device may leave it as it was), the copy being all that
     * reads the pre-activation. With BT_F32 both copies must be NULL. y
     * with buf NULL (y16 given, y_kept false): the pre-activation is y16's
     * 16-bit values, read as they are (a biased 16-bit GEMM's output,
     * bias_add's zero y), the bias not added: out = gelu of them.
     *                                   y, out, y16, out16: (rows, cols) */
    void (*bias_gelu_fwd)(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, int rows,
                          int cols, bt_dtype round16, bt_ptr out16, bt_ptr y16, bool y_kept);
    /* dx = round16(dout) * gelu'(x), with round16 BT_BF16 or BT_F16 rounded
     * to it (16-bit storage; BT_F32: neither rounded); dbias[c] += sum_r
     * dx[r, c]: round16 (of dout, into dx), gelu_bwd, round16, bias_grad (dx
     * may alias dout; dout itself is not written unless it is dx). Rounding
     * dout as it is read lets the model leave the rounding pass over a
     * gradient that this op alone reads. x is in x_dtype: BT_F32, or with
     * 16-bit storage round16's dtype (the stash's copy, read as it is).
     * dout is in dout_dtype: BT_F32, or with 16-bit storage round16's dtype
     * (a GEMM's 16-bit result, read as it is: the op's bits on its values
     * widened; dx must then not overlap dout).
     * With 16-bit storage dx16 (buf NULL: not written) takes dx in round16
     * as well, cast's bits; with BT_F32 it must be NULL. dx_kept false
     * (dx16 given): dx's contents after the call are unspecified (a device
     * may leave it as it was), the copy being all that reads it; dbias is
     * the same.                               dx, dout, x, dx16: (rows, cols) */
    void (*bias_gelu_bwd)(bt_backend *be, bt_ptr dx, bt_ptr dbias, bt_ptr dout, bt_ptr x,
                          int rows, int cols, bt_dtype round16, bt_dtype x_dtype,
                          bt_dtype dout_dtype, bt_ptr dx16, bool dx_kept);
    /* out = resid + dropout(y + bias): bias_add, dropout over element r*cols + c
     * (per_sample, first_sample, p, key as dropout's), add. With round16
     * BT_BF16 or BT_F16 (16-bit storage) y + bias is rounded to it before the
     * dropout, and so is out (as round16 after bias_add and after add);
     * BT_F32: no rounding. y is left unchanged; out may alias resid.
     * y, resid, out: (rows, cols) */
    void (*bias_dropout_add)(bt_backend *be, bt_ptr out, bt_ptr y, bt_ptr bias, bt_ptr resid,
                             int rows, int cols, bt_dtype round16, size_t per_sample,
                             uint32_t first_sample, float p, bt_rng_key key);
    /* out = dropout(a + b), dropout's element i (per_sample, first_sample, p,
     * key as dropout's, its draws): two gradients' sum and a dropout's
     * backward in one pass (the first layer's residual join and the
     * embeddings' dropout). With round16 BT_BF16 or BT_F16 (16-bit storage)
     * b is rounded to it before the add and so is the sum before the
     * dropout: round16 of b, add, round16, dropout; out is not rounded (its
     * reader, layernorm_bwd, rounds). b is in b_dtype: BT_F32, or with
     * 16-bit storage round16's dtype (a GEMM's 16-bit result, read as it is:
     * the op's bits on its values widened). out may alias a, not b; n is a
     * multiple of per_sample.                               a, b, out: (n) */
    void (*add_dropout)(bt_backend *be, bt_ptr out, bt_ptr a, bt_ptr b, bt_dtype b_dtype,
                        size_t n, size_t per_sample, uint32_t first_sample, float p,
                        bt_rng_key key, bt_dtype round16);
    /* sum = resid + dropout(y + bias) as bias_dropout_add (rounded alike),
     * then out, mean, rstd = layernorm_fwd(sum), and with round16 BT_BF16 or
     * BT_F16 out = round16(out): a residual join, the LayerNorm after it and
     * the storage rounding of both in one pass. sum may alias resid; out may
     * not alias an input. With 16-bit storage sum16 and out16 (buf NULL: not
     * written) take sum and out in round16 as well, cast's bits; with BT_F32
     * both must be NULL. sum_kept false (sum16 given): sum's contents after
     * the call are unspecified (a device may use it as scratch, or not write
     * it), the copy being all that reads the sum; out_kept false (out16
     * given) the same for out. resid is in resid_dtype: BT_F32, or with
     * 16-bit storage round16's dtype (a 16-bit copy, read as it is: the op's
     * bits on its values widened; it must then not alias an output). */
    void (*residual_layernorm_fwd)(bt_backend *be, bt_ptr sum, bt_ptr out, bt_ptr mean,
                                   bt_ptr rstd, bt_ptr y, bt_ptr bias, bt_ptr resid,
                                   bt_ptr gamma, bt_ptr beta, int rows, int cols, float eps,
                                   bt_dtype round16, size_t per_sample, uint32_t first_sample,
                                   float p, bt_rng_key key, bt_ptr sum16, bt_ptr out16,
                                   bool sum_kept, bt_dtype resid_dtype, bool out_kept);
    /* probs = softmax_fwd(scores) (in place allowed), then with round16 BT_BF16
     * or BT_F16 probs = round16(probs) (16-bit storage), then dropped =
     * dropout(probs) with per_sample = H*T*T: attention's scale, mask, softmax,
     * storage rounding and dropout in one pass (round16 BT_F32: no rounding).
     * dropped: (B, H, T, T), not aliasing the others. With 16-bit storage
     * dropped16 and probs16 (buf NULL: not written) take dropped and probs in
     * round16 as well, cast's bits; with BT_F32 both must be NULL. dropped
     * with buf NULL is not written (dropped16 given); probs_kept false
     * (probs16 given): probs' contents after the call are unspecified (a
     * device may not write it, or use it as scratch). */
    void (*softmax_dropout_fwd)(bt_backend *be, bt_ptr dropped, bt_ptr probs, bt_ptr scores,
                                bt_ptr key_mask, int B, int H, int T, float scale,
                                bt_dtype round16, uint32_t first_sample, float p,
                                bt_rng_key key, bt_ptr dropped16, bt_ptr probs16,
                                bool probs_kept);
    /* dscores = softmax_bwd(dropout(dprobs), probs) over the B*H*T rows, the
     * dropout with per_sample = H*T*T: the backward of softmax_dropout_fwd;
     * then with round16 BT_BF16 or BT_F16 (16-bit storage) dscores =
     * round16(dscores) (BT_F32: not rounded). In place allowed (dscores =
     * dprobs). probs is in probs_dtype: BT_F32, BT_BF16 or BT_F16 (the
     * stash's copy, read as it is; round16 may be BT_F32 then). With 16-bit storage
     * dscores16 (buf NULL: not written) takes dscores in round16 as well,
     * cast's bits; with BT_F32 it must be NULL. dscores_kept false
     * (dscores16 given): dscores' contents after the call are unspecified
     * (a device may not write it, or use it as scratch). */
    void (*dropout_softmax_bwd)(bt_backend *be, bt_ptr dscores, bt_ptr dprobs, bt_ptr probs,
                                int B, int H, int T, float scale, bt_dtype round16,
                                uint32_t first_sample, float p, bt_rng_key key,
                                bt_dtype probs_dtype, bt_ptr dscores16, bool dscores_kept);
    /* ---- a linear layer's bias in its GEMM's epilogue (16-bit GEMMs) ---- */
    /* A linear layer's forward: c16 (m, n) = A B^T + bias broadcast over the
     * rows, in dtype (BT_BF16, BT_F16) with one rounding of each sum: the
     * values of bias_add(NO_PTR, bias, m, n, dtype, c16, false) (the bias in
     * 16 bits) then gemm16(dtype, stored16 | BT_GEMM_C16, no trans_a,
     * trans_b, alpha 1, beta 1, batch 1) adding the product onto it, the
     * products summed in the backend's GEMM order (its bits where that is
     * gemm16's: the CPU, OpenCL, the emulated device). A (m, k)
     * the input, B (n, k) the weight, each in dtype where stored16 has
     * BT_GEMM_A16 / BT_GEMM_B16 (2 bytes an element, offset in bytes), else
     * fp32 that gemm16 rounds as it reads it; every matrix dense (row
     * strides k, k, n). bias: n fp32 values; bias16: the same in dtype
     * (cast's bits; buf NULL: none), which a backend may read instead
     * (cuBLASLt's BIAS epilogue takes the bias in the output's type). c16
     * (2 bytes an element, offset in bytes) is overwritten and aliases none
     * of the others. CUDA: one cuBLASLt GEMM with the BIAS epilogue, no
     * pass writing the broadcast. */
    void (*gemm16_bias)(bt_backend *be, bt_dtype dtype, unsigned stored16, int m, int n, int k,
                        bt_ptr a, bt_ptr b, bt_ptr bias, bt_ptr bias16, bt_ptr c16);
    /* A linear layer's weight and bias gradients from one read of the output
     * gradient: c (m, n) += A^T B in fp32 (gemm16 with trans_a, alpha 1,
     * beta 1, batch 1) and dbias[i] += sum_r A[r, i] (r < k), where A (k, m)
     * is the output gradient in dtype (BT_BF16, BT_F16; 2 bytes an element,
     * its offset in bytes) and B (k, n) the layer's input, in dtype where
     * stored16 has BT_GEMM_B16, else fp32 that gemm16 rounds as it reads it;
     * every matrix dense (row strides m, n, n). The values of gemm16 then
     * bias_grad(dbias, a, k, m, BT_F32, dtype); the bias sums' order is the
     * backend's (CUDA: cuBLASLt's BGRADB epilogue sums A's columns inside
     * the GEMM into a scratch vector that one launch adds to dbias), fixed
     * for a shape, so the same bits on every run. dbias (m fp32) aliases
     * none of the others. */
    void (*gemm16_bias_grad)(bt_backend *be, bt_dtype dtype, unsigned stored16, int m, int n,
                             int k, bt_ptr a, bt_ptr b, bt_ptr c, bt_ptr dbias);
    /* ---- fused attention: the probabilities never stored ---- */
    /* ctx (B T, NH D) = dropout(softmax(scale Q K^T over the keys j with
     * key_mask[b, j] != 0)) V for every head, Q, K, V the token-major QKV
     * projection qkv (B T, 3 NH D: head h of a token at columns h D, NH D + h D,
     * 2 NH D + h D), in qkv_dtype (fp32, or a 16-bit copy); lse (B, NH, T) =
     * each query row's log-sum-exp of its scaled scores (+Inf: no key, the
     * context 0), kept for the backward. Dropout: element (h T + i) T + j of
     * sample b as softmax_dropout_fwd draws it, so the same masks.
     * D <= BT_ATTN_MAX_D (kernels/constants.h). */
    void (*attention_fwd)(bt_backend *be, bt_ptr ctx, bt_ptr lse, bt_ptr qkv, bt_dtype qkv_dtype,
                          bt_ptr key_mask, int B, int NH, int T, int D, float scale,
                          uint32_t first_sample, float p, bt_rng_key key);
    /* dqkv (B T, 3 NH D) = the gradient of attention_fwd's loss given dctx
     * (fp32), from the forward's inputs, its ctx (in ctx_dtype) and lse: the
     * probabilities and dropout recomputed. delta: (B, NH, T) scratch. */
    void (*attention_bwd)(bt_backend *be, bt_ptr dqkv, bt_ptr delta, bt_ptr dctx, bt_ptr ctx,
                          bt_dtype ctx_dtype, bt_ptr lse, bt_ptr qkv, bt_dtype qkv_dtype,
                          bt_ptr key_mask, int B, int NH, int T, int D, float scale,
                          uint32_t first_sample, float p, bt_rng_key key);
    /* dst = src converted between dtypes (round to nearest even) */
    void (*cast)(bt_backend *be, bt_ptr dst, bt_dtype dst_type, bt_ptr src,
                 bt_dtype src_type, size_t n);
    /* x = x rounded to dtype (BT_BF16 or BT_F16), in place: the fp32 values a
     * tensor of that dtype would hold (nearest even; beyond fp16's range +-Inf;
     * NaN stays NaN). Mixed precision's storage rounding in one pass, with no
     * 16-bit staging buffer. */
    void (*round16)(bt_backend *be, bt_ptr x, bt_dtype dtype, size_t n);

    /* ---- profiling ---- */
    /* The backend's counters (bt_counters) as they are now: counting only, no
     * device work. */
    void (*counters)(bt_backend *be, bt_counters *out);
    /* A mark on the device's timeline after everything issued so far; returns
     * its number, 0, 1, ... since the last marks_reset. Cheap with
     * bt_backend_options.profile (device events); without it a mark waits for
     * the device. */
    int (*mark)(bt_backend *be);
    /* Seconds of device time from mark a to mark b (a before b), waiting for
     * the device to pass b. The CPU backend's marks read the wall clock. */
    double (*mark_seconds)(bt_backend *be, int a, int b);
    /* Forget every mark (their resources are kept for reuse). */
    void (*marks_reset)(bt_backend *be);

    /* ---- graphs ---- */
    /* The work issued from graph_begin(region) to graph_end is a region
     * (BT_GRAPH_STEP, BT_GRAPH_UPDATE) that the caller issues again and
     * again, the same ops on the same buffers but for their scalars: a
     * device that can (CUDA) records it once as a graph and then launches
     * it whole at graph_end, taking each op's new scalars. The ops compute
     * what they would without it. A download_async is part of the region
     * (its copy runs when the graph reaches it). Inside a region nothing
     * may wait for the device's results (a download, a reduction read at
     * once, sync, downloads_done with wait): that is allowed, but the
     * region then runs as it comes, this time. The
     * CPU and OpenCL issue the work as it comes (both are no-ops). */
    void (*graph_begin)(bt_backend *be, int region);
    void (*graph_end)(bt_backend *be);
};

/* The regions of a training step (graph_begin): the forward and backward
 * passes (under MPI with the gradient buckets' copies to the host; on one
 * rank with the gradients' checks, the step's gate and the update it
 * governs: step_gate), and the optimizer's update when the host decides it
 * between the two (under MPI, 1-bit LAMB). */
enum { BT_GRAPH_STEP = 0, BT_GRAPH_UPDATE = 1 };

/* Options given to a backend at its creation. Each backend takes what
 * applies to it and ignores the rest, so the layers above never ask which
 * backend runs. */
typedef struct {
    int cpu_threads; /* the CPU backend's OpenMP threads; 0: its default */
    bool tf32;       /* GEMMs on TF32 tensor cores where the device has them
                        (config "tf32"); elsewhere exact fp32 */
    bool profile;    /* device timestamps for mark (an OpenCL profiling queue);
                        without it a mark waits for the device */
    int local_rank;  /* this process's rank among those on its node: the
                        registry's choice of GPU for "auto" and a bare "cuda"
                        (the CUDA device local_rank modulo the count) */
    int local_ranks; /* the job's processes on this node (0 or 1: this one
                        alone): the CPU backend's default threads share the
                        node's usable CPUs among them */
} bt_backend_options;

/* Names of every op slot in the table, in order (backends/op_list.h), for
 * start-up checks and the conformance suite. */
extern const char *const bt_op_names[];
extern const int bt_op_count;

/* Check that every slot of be is filled; print the first missing op and return
 * false otherwise. An op a backend lacks is an error, except a fused op, which
 * the registry composes from the ops it replaces first (common/composed.h). */
bool bt_backend_complete(const bt_backend *be);

/* graph_begin and graph_end of a backend that issues each region's work as
 * it comes: no-ops. */
void bt_graph_begin_none(bt_backend *be, int region);
void bt_graph_end_none(bt_backend *be);

#endif
