/* GEMM pieces every backend shares, written once on top of the dispatch
 * table: staging buffers, gemm16 by rounding staged copies of the operands
 * (for devices without 16-bit GEMM hardware), and the k = 0 case. */
#ifndef BT_STAGED_GEMM_H
#define BT_STAGED_GEMM_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A growable device buffer of a backend's. */
typedef struct {
    bt_buffer *buf;
    size_t bytes;
} bt_stage;

/* s's buffer, grown with be->alloc to at least `bytes`; on out of memory it
 * exits with one line naming the backend and `what`. */
bt_buffer *bt_stage_reserve(bt_backend *be, bt_stage *s, size_t bytes, const char *what);

/* Free s's buffer (be->free) and empty it. */
void bt_stage_release(bt_backend *be, bt_stage *s);

/* backend.h's gemm16 without 16-bit GEMM hardware: fp32 copies of A and B in
 * stage[0] and stage[1], at their offsets modulo 64 bytes (the fp32 GEMM
 * then sees the same alignment; a 16-bit operand's offset counts as twice its
 * bytes), rounded to dt with round16 or, for the operands named in stored16,
 * converted from dt with cast, go to be->gemm. A 16-bit C (BT_GEMM_C16):
 * its span widened into stage[2], the GEMM there, the span cast back (the
 * elements between the matrices make the round trip, which keeps the bits
 * of every value but a signaling NaN's).
 * The values are those gemm16 promises: 16-bit operands, fp32 products and
 * accumulation. */
void bt_gemm16_staged(bt_backend *be, bt_stage stage[3], bt_dtype dt, unsigned stored16,
                      bool trans_a, bool trans_b,
                      int m, int n, int k, float alpha, bt_ptr a, int lda, long stride_a,
                      bt_ptr b, int ldb, long stride_b, float beta, bt_ptr c, int ldc,
                      long stride_c, int batch);

/* backend.h's gemm_grid as `outer` calls of be->gemm (dtype BT_F32) or
 * be->gemm16, one per group of `batch` matrices: for backends whose GEMM
 * takes no array of addresses, and for a grid of one group. */
void bt_gemm_grid_loop(bt_backend *be, bt_dtype dtype, unsigned stored16, bool trans_a,
                       bool trans_b, int m, int n, int k, float alpha, bt_ptr a, int lda,
                       bt_ptr b, int ldb, float beta, bt_ptr c, int ldc, const bt_gemm_grid *g);

/* gemm with k = 0: C_b = beta * C_b, row by row with be->fill (beta = 0, so
 * NaN in C is ignored as the contract says) or be->scale. */
void bt_gemm_k0(bt_backend *be, int m, int n, float beta, bt_ptr c, int ldc, long stride_c,
                int batch);

#ifdef __cplusplus
}
#endif

#endif
