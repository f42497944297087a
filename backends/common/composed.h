/* The fused ops composed from the primitive ops they replace, for a backend
 * that leaves a fused slot of its table empty (ggml's supports_op, with a
 * fallback): each gives the bits of the primitive sequence its backend.h
 * contract names, on the same backend, because it is that sequence. */
#ifndef BT_COMPOSED_H
#define BT_COMPOSED_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill every empty fused slot of be (kind FUSED in backends/op_list.h) with
 * its composition; returns how many it filled. The composed ops do not pay:
 * a backend that leaves a fused op out should say so in fused_ops_pay. */
int bt_compose_missing(bt_backend *be);

#ifdef __cplusplus
}
#endif

#endif
