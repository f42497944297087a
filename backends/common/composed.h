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

/* gemm16_bias as backend.h's contract names it: bias_add of the bias in 16
 * bits into c16, then gemm16 adding the product onto it (beta 1). */
void bt_composed_gemm16_bias(bt_backend *be, bt_dtype dtype, unsigned stored16, int m, int n,
                             int k, bt_ptr a, bt_ptr b, bt_ptr bias, bt_ptr bias16, bt_ptr c16);
/* gemm16_bias_grad as its contract names it: gemm16 (c += A^T B), then
 * bias_grad of the 16-bit A. */
void bt_composed_gemm16_bias_grad(bt_backend *be, bt_dtype dtype, unsigned stored16, int m,
                                  int n, int k, bt_ptr a, bt_ptr b, bt_ptr c, bt_ptr dbias);

#ifdef __cplusplus
}
#endif

#endif
