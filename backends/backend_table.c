/* The op slots of the dispatch table by name, and the check that a backend
 * filled them all. Linked into the program and into the CUDA plugin
 * (bertrain-cuda.so), which checks its own table. */
#include "backend.h"
#include "op_list.h"

#include <stddef.h>
#include <stdio.h>

/* At compile time: BT_OP_LIST (op_list.h) names every op slot of struct
 * bt_backend, in the struct's order, and nothing else. A shadow struct laid
 * out from the list must have each slot at the same distance from the first,
 * and the table must end where the list does. */
#define BT_OP_FIELD(op, kind) void (*op)(void);
struct bt_op_list_layout {
    BT_OP_LIST(BT_OP_FIELD)
};
#define BT_OP_SAME_PLACE(op, kind)                                                          \
    _Static_assert(offsetof(bt_backend, op) - offsetof(bt_backend, destroy) ==               \
                       offsetof(struct bt_op_list_layout, op),                               \
                   "BT_OP_LIST and struct bt_backend disagree at op " #op);
BT_OP_LIST(BT_OP_SAME_PLACE)
_Static_assert(sizeof(bt_backend) - offsetof(bt_backend, destroy) ==
                   sizeof(struct bt_op_list_layout),
               "struct bt_backend has an op slot that BT_OP_LIST does not list");

#define BT_OP_NAME(op, kind) #op,
const char *const bt_op_names[] = {BT_OP_LIST(BT_OP_NAME)};
const int bt_op_count = (int)(sizeof bt_op_names / sizeof bt_op_names[0]);

bool bt_backend_complete(const bt_backend *be) {
#define BT_OP_CHECK(op, kind)                                                      \
    if (!be->op) {                                                                 \
        fprintf(stderr, "bertrain: backend '%s' lacks op '%s'\n", be->name, #op);  \
        return false;                                                              \
    }
    BT_OP_LIST(BT_OP_CHECK)
#undef BT_OP_CHECK
    return true;
}

void bt_graph_begin_none(bt_backend *be, int region) {
    (void)be;
    (void)region;
}

void bt_graph_end_none(bt_backend *be) { (void)be; }
