/* Per-op checks of the backend conformance suite, one entry point per op
 * family; conformance.c runs them in a fixed order, and each reports one row
 * per check through v_report. */
#ifndef BT_CONFORMANCE_OPS_H
#define BT_CONFORMANCE_OPS_H

#include "harness.h"

/* ---- conformance_ops_memory_vector.c ---- */
/* Check alloc, free, upload, download, copy, info and sync. */
void test_memory(bt_backend *be);
/* Check fill, add (also in place), scale and axpy over the VECTOR_SHAPES shapes. */
void test_vector_ops(bt_backend *be);
/* Check sum and sumsq (relative error) and all_finite over the VECTOR_SHAPES shapes. */
void test_reductions(bt_backend *be);
/* Check that a NaN input of an elementwise op gives NaN at exactly its positions. */
void test_nan_propagation(bt_backend *be);

/* ---- ops_graph.c ---- */
/* Check graph_begin and graph_end: a region's rounds, with new scalars, a
 * shape change and a download inside, give the bits of the ops alone. */
void test_graphs(bt_backend *be);

/* ---- conformance_ops_linear.c ---- */
/* Check gemm (transposes, padded leading dimensions, NaN C with beta = 0,
 * strided batches, attention layouts, BERT sizes) and its backward. */
void test_gemm(bt_backend *be);
/* Check gemm16 (16-bit operands, fp32 accumulation) against the float64 reference. */
void test_gemm16(bt_backend *be);
/* Check gemm_grid (two-level batches: attention's heads of each sequence in
 * token-major layouts) in fp32 and with 16-bit operands. */
void test_gemm_grid(bt_backend *be);
/* Check gemm16_bias and gemm16_bias_grad (a linear layer's GEMMs with their
 * bias and bias gradient) against float64 loops. */
void test_gemm16_epilogues(bt_backend *be);
/* The GEMM checks' operands (ops_linear.c): x[i] rounded to dt, as gemm16
 * multiplies it (BT_F32: unchanged); and fp32 values x (already rounded to
 * dt), or with half their dt encodings (*bits, freed by the caller), as a
 * 2-byte tensor. */
void round_operand(double *x, size_t n, bt_dtype dt);
tensor gemm_operand(const char *name, const float *x, size_t n, bt_dtype dt, bool half,
                    uint16_t **bits);
/* Check bias_add and bias_grad over the MATRIX_SHAPES shapes. */
void test_bias(bt_backend *be);

/* ---- conformance_ops_nn.c ---- */
/* Check embed_fwd and embed_bwd (padding tokens, accumulation). */
void test_embed(bt_backend *be);
/* Check layernorm_fwd and layernorm_bwd (also dx in place of dout). */
void test_layernorm(bt_backend *be);
/* Check gelu_fwd/bwd and tanh_fwd/bwd (also dx in place of dout). */
void test_activations(bt_backend *be);
/* Check softmax_fwd and softmax_bwd with key masks (also in place). */
void test_softmax(bt_backend *be);
/* Check dropout: Philox mask bit-exact, split calls, statistics, backward. */
void test_dropout(bt_backend *be);
/* layernorm_bwd with the branch's dropout against layernorm_bwd, then dropout */
void test_layernorm_bwd_dropout(bt_backend *be);
/* Check dropout_rows: each row with the mask dropout over all rows draws. */
void test_dropout_rows(bt_backend *be);

/* ---- conformance_ops_rows_xent.c ---- */
/* Check gather_rows and scatter_rows (distinct and duplicate indices). */
void test_gather_scatter(bt_backend *be);
/* The chains of idx (n) that scatter_rows and embed_bwd take, built as the
 * model builds them (bt_row_links, skipping skip >= 0) and reported as a
 * ref/links row for op after a check against their definition; free() it. */
int32_t *host_links(const int32_t *idx, int n, int32_t skip, const char *op);
/* Check xent_fwd_bwd: dlogits, loss and correct, ignored labels, argmax ties. */
void test_xent(bt_backend *be);

/* ---- conformance_ops_optim_cast.c ---- */
/* Check adamw_step and lamb_update, with and without bias correction. */
void test_optimizers(bt_backend *be);
/* Check cast between f32, f16 and bf16 (rounding, specials, every 16-bit pattern). */
void test_cast(bt_backend *be);
/* round16: in-place rounding to bf16/f16 against the float64 reference's rounding. */
void test_round16(bt_backend *be);

/* ---- ops_multi.c ---- */
/* Check reduce_defer and reduce_fetch: the bits of sum, sumsq and all_finite,
 * values taken at queue time, one blocking read per fetch. */
void test_deferred_reductions(bt_backend *be);
/* Check adamw_multi and lamb_multi: the per-tensor ops' bits, the float64
 * reference, nothing written between spans, launches independent of spans. */
void test_multi_optimizers(bt_backend *be);

/* ---- ops_gate.c ---- */
/* Check step_gate: the host's decision on the fetched values (skips of the
 * loss scaler and the guard, clipping), and multi-tensor steps that obey it. */
void test_step_gate(bt_backend *be);

/* ---- ops_fused.c ---- */
/* Check the fused ops: the bits of the unfused ops they replace on the same
 * backend, and the float64 reference (dropout from philox.h). */
void test_fused(bt_backend *be);

/* ---- ops_attention.c ---- */
/* Check attention_fwd and attention_bwd against the float64 definition
 * (padding, a sequence with no key, dropout, fp32 and 16-bit inputs). */
void test_attention(bt_backend *be);

/* ---- ops_profiling.c ---- */
/* Check counters (memory in use and peak, reads, waits, launches) and marks
 * on the device timeline (numbering, elapsed time, reset). */
void test_profiling(bt_backend *be);

/* ---- conformance_perf.c ---- */
/* --perf: time every math op at its largest shape (gemm at BERT-mini training
 * shapes) and print ms per call and GFLOP/s or GB/s. */
void run_perf(bt_backend *be);

/* ---- op runners that test_nan_propagation shares ---- */

typedef struct {
    int rows, cols;
} rows_cols_args;
/* Issue bias_add(y = t[0], bias = t[1]) with the rows_cols_args at a. */
void run_bias_add(bt_backend *be, tensor *t, void *a, double *s);

typedef struct {
    size_t n;
    int inplace;
    bt_dtype dt; /* tanh's: BT_F32, or its tensors in 16 bits of dt */
} unary_args;
/* Issue gelu_fwd(out = t[0], x = t[1]) with the unary_args at a. */
void run_gelu_fwd(bt_backend *be, tensor *t, void *a, double *s);
/* Issue tanh_fwd(out = t[0], x = t[1]) with the unary_args at a. */
void run_tanh_fwd(bt_backend *be, tensor *t, void *a, double *s);

#endif
