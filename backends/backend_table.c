/* The op slots of the dispatch table by name, and the check that a backend
 * filled them all. Linked into the program and into the CUDA plugin
 * (bertrain-cuda.so), which checks its own table. */
#include "backend.h"

#include <stddef.h>
#include <stdio.h>

#define BT_OPS(X)                                                                  \
    X(destroy) X(info) X(sync) X(alloc) X(free) X(upload) X(download) X(copy)     \
    X(fill) X(gemm) X(gemm16) X(bias_add) X(bias_grad) X(embed_fwd) X(embed_bwd)             \
    X(layernorm_fwd) X(layernorm_bwd) X(gelu_fwd) X(gelu_bwd) X(tanh_fwd)          \
    X(tanh_bwd) X(softmax_fwd) X(softmax_bwd) X(dropout) X(add) X(scale) X(axpy)   \
    X(gather_rows) X(scatter_rows) X(xent_fwd_bwd) X(sumsq) X(sum) X(all_finite)   \
    X(reduce_defer) X(reduce_fetch) X(adamw_step) X(lamb_update) X(adamw_multi)     \
    X(lamb_multi) X(bias_gelu_fwd) X(bias_gelu_bwd) X(bias_dropout_add)             \
    X(residual_layernorm_fwd) X(softmax_dropout_fwd) X(dropout_softmax_bwd) X(cast) X(round16) X(counters) X(mark)             \
    X(mark_seconds) X(marks_reset)

/* At compile time: BT_OPS names every op slot of struct bt_backend, in the
 * struct's order, and nothing else. A shadow struct laid out from the list
 * must have each slot at the same distance from the first, and the table must
 * end where the list does. */
#define BT_OP_FIELD(op) void (*op)(void);
struct bt_op_list_layout {
    BT_OPS(BT_OP_FIELD)
};
#define BT_OP_SAME_PLACE(op)                                                                \
    _Static_assert(offsetof(bt_backend, op) - offsetof(bt_backend, destroy) ==               \
                       offsetof(struct bt_op_list_layout, op),                               \
                   "BT_OPS and struct bt_backend disagree at op " #op);
BT_OPS(BT_OP_SAME_PLACE)
_Static_assert(sizeof(bt_backend) - offsetof(bt_backend, destroy) ==
                   sizeof(struct bt_op_list_layout),
               "struct bt_backend has an op slot that BT_OPS does not list");

#define BT_OP_NAME(op) #op,
const char *const bt_op_names[] = {BT_OPS(BT_OP_NAME)};
const int bt_op_count = (int)(sizeof bt_op_names / sizeof bt_op_names[0]);

bool bt_backend_complete(const bt_backend *be) {
#define BT_OP_CHECK(op)                                                            \
    if (!be->op) {                                                                 \
        fprintf(stderr, "bertrain: backend '%s' lacks op '%s'\n", be->name, #op);  \
        return false;                                                              \
    }
    BT_OPS(BT_OP_CHECK)
#undef BT_OP_CHECK
    return true;
}
