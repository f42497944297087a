/* Every op slot of struct bt_backend (backend.h), in the struct's order, with
 * its kind: the one list that the dispatch table's checks
 * (backend_table.c), the profiler (profile*.c), the composed fallbacks
 * (common/composed.c), tests/op-places.sh and tests/cuda-parity.sh read.
 *   ADMIN  the device, memory management and profiling: not timed
 *   OP     an op every backend implements; timed by the profiler
 *   FUSED  a fused op: timed; a backend may leave its slot empty, and
 *          bt_compose_missing fills it with the primitive ops it replaces */
#ifndef BT_OP_LIST_H
#define BT_OP_LIST_H

#define BT_OP_LIST(X)                                                                    \
    X(destroy, ADMIN) X(info, ADMIN) X(sync, OP) X(alloc, ADMIN) X(free, ADMIN)          \
    X(upload, OP) X(download, OP) X(host_alloc, ADMIN) X(host_free, ADMIN)               \
    X(download_async, OP) X(downloads_done, OP) X(upload_async, OP) X(copy, OP)          \
    X(fill, OP) X(gemm, OP) X(gemm16, OP)                                                \
    X(gemm_grid, OP) X(bias_add, OP) X(bias_grad, OP) X(embed_fwd, OP) X(embed_bwd, OP)  \
    X(layernorm_fwd, OP) X(layernorm_bwd, OP) X(gelu_fwd, OP) X(gelu_bwd, OP)            \
    X(tanh_fwd, OP) X(tanh_bwd, OP) X(softmax_fwd, OP) X(softmax_bwd, OP) X(dropout, OP) \
    X(dropout_rows, OP) X(add, OP) X(scale, OP) X(axpy, OP) X(gather_rows, OP)           \
    X(scatter_rows, OP)                                                                  \
    X(xent_fwd_bwd, OP) X(sumsq, OP) X(sum, OP) X(all_finite, OP) X(reduce_defer, OP)    \
    X(reduce_fetch, OP) X(step_gate, OP) X(adamw_step, OP) X(lamb_update, OP)            \
    X(adamw_multi, OP) X(lamb_multi, OP) X(bias_gelu_fwd, FUSED) X(bias_gelu_bwd, FUSED) \
    X(bias_dropout_add, FUSED) X(add_dropout, FUSED) X(residual_layernorm_fwd, FUSED)     \
    X(softmax_dropout_fwd, FUSED) X(dropout_softmax_bwd, FUSED) X(gemm16_bias, FUSED)   \
    X(gemm16_bias_grad, FUSED) X(attention_fwd, OP)                                      \
    X(attention_bwd, OP) X(cast, OP) X(round16, OP) X(counters, ADMIN) X(mark, ADMIN)    \
    X(mark_seconds, ADMIN)                                                               \
    X(marks_reset, ADMIN) X(graph_begin, ADMIN) X(graph_end, ADMIN)

/* BT_OP_IF_TIMED(kind, ...): the rest of the arguments for an OP or FUSED op,
 * nothing for an ADMIN one (the profiler's lists). */
#define BT_OP_IF_TIMED(kind, ...) BT_OP_IF_TIMED_##kind(__VA_ARGS__)
#define BT_OP_IF_TIMED_ADMIN(...)
#define BT_OP_IF_TIMED_OP(...) __VA_ARGS__
#define BT_OP_IF_TIMED_FUSED(...) __VA_ARGS__

#endif
