/* CUDA backend: the gemm op on cuBLAS. backend.h's matrices are row-major and
 * cuBLAS's column-major; a row-major (r x c) matrix with row stride ld is the
 * column-major (c x r) matrix with leading dimension ld, its transpose. So
 *   C = op(A) op(B)  (row-major)   <=>   C^T = op(B)^T op(A)^T  (column-major)
 * and the call passes B first, A second and the dimensions as (n, m, k), with
 * each operand's own transpose flag. */
#include "cuda_internal.h"

void cu_gemm(bt_backend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
             bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb, long stride_b, float beta,
             bt_ptr c, int ldc, long stride_c, int batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0) { /* C = beta C: what cuBLAS does with k = 0 is not documented */
        bt_gemm_k0(be, m, n, beta, c, ldc, stride_c, batch);
        return;
    }
    cu_ctx *x = cu(be);
    const float *A = cu_f32(a), *B = cu_f32(b);
    float *C = cu_f32(c);
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (x->tf32)
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            x->blas, op_b, op_a, n, m, k, &alpha, B, CUDA_R_32F, ldb, (long long)stride_b, A,
            CUDA_R_32F, lda, (long long)stride_a, &beta, C, CUDA_R_32F, ldc, (long long)stride_c,
            batch, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cublasSgemmStridedBatched(x->blas, op_b, op_a, n, m, k, &alpha, B, ldb,
                                               (long long)stride_b, A, lda, (long long)stride_a,
                                               &beta, C, ldc, (long long)stride_c, batch));
    x->count.launches++;
    CU_SYNC_IF_DEBUG(x);
}

/* The operand's span in dt for cuBLAS's 16-bit inputs: src itself where it is
 * stored in dt (half), else converted into staging area i (the same leading
 * dimension and batch stride, from element 0). */
static const void *operand16(bt_backend *be, int i, bt_ptr src, size_t span, bt_dtype dt,
                             bool half) {
    if (half) return cu_addr(src, 2);
    cu_ctx *x = cu(be);
    bt_ptr p = {bt_stage_reserve(be, &x->stage[i], span * 2, "16-bit GEMM operand"), 0};
    be->cast(be, p, dt, src, BT_F32, span);
    return p.buf->ptr;
}

/* gemm16 on tensor cores: A and B in fp16/bf16, products accumulated in fp32
 * (CUBLAS_COMPUTE_32F), C in fp32. A device without tensor cores for dt (a
 * V100 has fp16 but no bf16 ones) gets fp32 copies of the 16-bit values in
 * the fp32 GEMM, as backend.h's contract says; so does k = 0, which has
 * nothing to convert. */
void cu_gemm16(bt_backend *be, bt_dtype dt, unsigned stored16, bool trans_a, bool trans_b, int m,
               int n, int k, float alpha, bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb,
               long stride_b, float beta, bt_ptr c, int ldc, long stride_c, int batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    cu_ctx *x = cu(be);
    const bool tensor = dt == BT_BF16 ? x->info.tensor_bf16 : x->info.tensor_f16;
    if (k <= 0 || !tensor) {
        bt_gemm16_staged(be, x->stage, dt, stored16, trans_a, trans_b, m, n, k, alpha, a, lda,
                         stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
        return;
    }
    const size_t span_a = bt_gemm_operand_span(trans_a ? k : m, trans_a ? m : k, lda, stride_a,
                                               batch),
                 span_b = bt_gemm_operand_span(trans_b ? n : k, trans_b ? k : n, ldb, stride_b,
                                               batch);
    const void *A = operand16(be, 0, a, span_a, dt, stored16 & BT_GEMM_A16),
               *B = operand16(be, 1, b, span_b, dt, stored16 & BT_GEMM_B16);
    const cudaDataType_t t = dt == BT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        x->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
        k, &alpha, B, t, ldb, (long long)stride_b, A, t, lda, (long long)stride_a, &beta,
        cu_f32(c), CUDA_R_32F, ldc, (long long)stride_c, batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
    x->count.launches++;
    CU_SYNC_IF_DEBUG(x);
}
