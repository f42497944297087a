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

/* A and B converted to dt in staging area i (the operand's span from its
 * first element), for cuBLAS's 16-bit inputs. */
static const void *stage_operand(bt_backend *be, int i, bt_ptr src, size_t span, bt_dtype dt) {
    cu_ctx *x = cu(be);
    const size_t need = span * 2;
    if (need > x->stage_bytes[i]) {
        if (x->stage[i]) be->free(be, x->stage[i]);
        x->stage[i] = be->alloc(be, need);
        x->stage_bytes[i] = x->stage[i] ? need : 0;
        if (!x->stage[i]) {
            fprintf(stderr, "bertrain: cuda: out of device memory staging a %.1f MB 16-bit "
                            "GEMM operand\n", need / 1e6);
            exit(1);
        }
    }
    bt_ptr p = {x->stage[i], 0};
    be->cast(be, p, dt, src, BT_F32, span);
    return x->stage[i]->ptr;
}

/* gemm16 on tensor cores: A and B in fp16/bf16, products accumulated in fp32
 * (CUBLAS_COMPUTE_32F), C in fp32. */
void cu_gemm16(bt_backend *be, bt_dtype dt, bool trans_a, bool trans_b, int m, int n, int k,
               float alpha, bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb, long stride_b,
               float beta, bt_ptr c, int ldc, long stride_c, int batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0) { /* nothing to convert: the fp32 path scales C */
        cu_gemm(be, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta,
                c, ldc, stride_c, batch);
        return;
    }
    cu_ctx *x = cu(be);
    const size_t span_a = bt_gemm_operand_span(trans_a ? k : m, trans_a ? m : k, lda, stride_a,
                                               batch),
                 span_b = bt_gemm_operand_span(trans_b ? n : k, trans_b ? k : n, ldb, stride_b,
                                               batch);
    const void *A = stage_operand(be, 0, a, span_a, dt), *B = stage_operand(be, 1, b, span_b, dt);
    const cudaDataType_t t = dt == BT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        x->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
        k, &alpha, B, t, ldb, (long long)stride_b, A, t, lda, (long long)stride_a, &beta,
        cu_f32(c), CUDA_R_32F, ldc, (long long)stride_c, batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
}
