/* OpenCL backend: GEMM through CLBlast (row-major, offsets in elements,
 * strided batches). The tuned kernel parameters it runs with come from
 * opencl_tuning.c. */
#include "opencl_internal.h"

#include <clblast_c.h>
#include <stdlib.h>
#include <string.h>

#define CLBLAST_CHECK(call)                                                                \
    do {                                                                                   \
        CLBlastStatusCode s_ = (call);                                                     \
        if (s_ != CLBlastSuccess) {                                                        \
            fprintf(stderr, "bertrain: opencl: %.*s failed: %s (%d) at %s:%d\n",           \
                    (int)strcspn(#call, "("), #call, ocl_clblast_status_name(s_), (int)s_,     \
                    __FILE__, __LINE__);                                                   \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

void ocl_gemm_release(ocl_ctx *c) {
    (void)c;
    /* CLBlast caches programs per context; a later context could reuse the
     * address of this one */
    CLBlastClearCache();
}

/* For each b < batch: C_b = alpha op(A_b) op(B_b) + beta C_b (backend.h).
 * One CLBlastSgemmStridedBatched (CLBlastSgemm for one batch); a per-batch
 * loop if the batched routine is unavailable. CLBlast computes beta * C
 * only when beta != 0 (checked by the conformance suite's C=NaN case). */
void ocl_gemm(bt_backend *be, bool ta, bool tb, int m, int n, int k, float alpha, bt_ptr a,
              int lda, long sa, bt_ptr b, int ldb, long sb, float beta, bt_ptr c, int ldc,
              long sc, int batch) {
    ocl_ctx *x = ocl(be);
    if (m <= 0 || n <= 0 || batch <= 0) return;
    const size_t ao = ocl_elem_off(a, 4), bo = ocl_elem_off(b, 4), co = ocl_elem_off(c, 4);
    if (k <= 0) {
        bt_gemm_k0(be, m, n, beta, c, ldc, sc, batch);
        return;
    }
    const CLBlastTranspose opa = ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    const CLBlastTranspose opb = tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    x->count.launches++;
    if (batch == 1) {
        CLBLAST_CHECK(CLBlastSgemm(CLBlastLayoutRowMajor, opa, opb, (size_t)m, (size_t)n,
                                   (size_t)k, alpha, a.buf->mem, ao, (size_t)lda, b.buf->mem,
                                   bo, (size_t)ldb, beta, c.buf->mem, co, (size_t)ldc, &x->queue,
                                   NULL));
        return;
    }
    CLBlastStatusCode s = CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, opa, opb, (size_t)m, (size_t)n, (size_t)k, alpha, a.buf->mem, ao,
        (size_t)lda, (size_t)sa, b.buf->mem, bo, (size_t)ldb, (size_t)sb, beta, c.buf->mem, co,
        (size_t)ldc, (size_t)sc, (size_t)batch, &x->queue, NULL);
    if (s == CLBlastSuccess) return;
    if (s != CLBlastNotImplemented) CLBLAST_CHECK(s);
    x->count.launches += batch - 1;
    for (int i = 0; i < batch; i++) /* fallback: one CLBlastSgemm per batch */
        CLBLAST_CHECK(CLBlastSgemm(CLBlastLayoutRowMajor, opa, opb, (size_t)m, (size_t)n,
                                   (size_t)k, alpha, a.buf->mem, ao + (size_t)i * (size_t)sa,
                                   (size_t)lda, b.buf->mem, bo + (size_t)i * (size_t)sb,
                                   (size_t)ldb, beta, c.buf->mem, co + (size_t)i * (size_t)sc,
                                   (size_t)ldc, &x->queue, NULL));
}

/* CLBlast's Hgemm is not used for fp16: it accumulates in half precision,
 * where gemm16 promises fp32 accumulation. */
void ocl_gemm16(bt_backend *be, bt_dtype dt, unsigned stored16, bool ta, bool tb, int m, int n,
                int k, float alpha, bt_ptr a, int lda, long sa, bt_ptr b, int ldb, long sb,
                float beta, bt_ptr c, int ldc, long sc, int batch) {
    bt_gemm16_staged(be, ocl(be)->stage, dt, stored16, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta,
                     c, ldc, sc, batch);
}
