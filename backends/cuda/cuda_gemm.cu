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
    cu_ctx *x = cu(be);
    const float *A = cu_f32(a), *B = cu_f32(b);
    float *C = cu_f32(c);
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* cuBLAS wants every leading dimension >= 1, even where k = 0 leaves an
     * operand unread */
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    if (x->tf32)
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            x->blas, op_b, op_a, n, m, k, &alpha, B, CUDA_R_32F, ldb, (long long)stride_b, A,
            CUDA_R_32F, lda, (long long)stride_a, &beta, C, CUDA_R_32F, ldc, (long long)stride_c,
            batch, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cublasSgemmStridedBatched(x->blas, op_b, op_a, n, m, k, &alpha, B, ldb,
                                               (long long)stride_b, A, lda, (long long)stride_a,
                                               &beta, C, ldc, (long long)stride_c, batch));
}
