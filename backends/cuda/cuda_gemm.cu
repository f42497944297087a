/* CUDA backend: the gemm op on cuBLAS. backend.h's matrices are row-major and
 * cuBLAS's column-major; a row-major (r x c) matrix with row stride ld is the
 * column-major (c x r) matrix with leading dimension ld, its transpose. So
 *   C = op(A) op(B)  (row-major)   <=>   C^T = op(B)^T op(A)^T  (column-major)
 * and the call passes B first, A second and the dimensions as (n, m, k), with
 * each operand's own transpose flag. */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

/* A GEMM's arguments, as a graph region records them (padding zeroed, so
 * that equal calls compare equal byte for byte). */
typedef struct {
    bt_dtype dt;
    unsigned stored16;
    bool trans_a, trans_b;
    int m, n, k;
    float alpha, beta;
    bt_ptr a, b, c;
    int lda, ldb, ldc;
    long stride_a, stride_b, stride_c;
    int batch;
    bt_gemm_grid grid;
} gemm_call;

static gemm_call gemm_call_of(bt_dtype dt, unsigned stored16, bool trans_a, bool trans_b, int m,
                              int n, int k, float alpha, bt_ptr a, int lda, long stride_a,
                              bt_ptr b, int ldb, long stride_b, float beta, bt_ptr c, int ldc,
                              long stride_c, int batch) {
    gemm_call g;
    memset(&g, 0, sizeof g);
    g.dt = dt;
    g.stored16 = stored16;
    g.trans_a = trans_a;
    g.trans_b = trans_b;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = alpha;
    g.beta = beta;
    g.a = a;
    g.b = b;
    g.c = c;
    g.lda = lda;
    g.ldb = ldb;
    g.ldc = ldc;
    g.stride_a = stride_a;
    g.stride_b = stride_b;
    g.stride_c = stride_c;
    g.batch = batch;
    return g;
}

static void gemm_issue(bt_backend *be, bool trans_a, bool trans_b, int m, int n, int k,
                       float alpha, bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb,
                       long stride_b, float beta, bt_ptr c, int ldc, long stride_c, int batch);

static void gemm_again(bt_backend *be, const void *p) {
    const gemm_call *g = (const gemm_call *)p;
    gemm_issue(be, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->stride_a,
               g->b, g->ldb, g->stride_b, g->beta, g->c, g->ldc, g->stride_c, g->batch);
}

void cu_gemm(bt_backend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
             bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb, long stride_b, float beta,
             bt_ptr c, int ldc, long stride_c, int batch) {
    const gemm_call g = gemm_call_of(BT_F32, 0, trans_a, trans_b, m, n, k, alpha, a, lda,
                                     stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
    cu_graph_op(be, gemm_again, &g, sizeof g);
}

static void gemm_issue(bt_backend *be, bool trans_a, bool trans_b, int m, int n, int k,
                       float alpha, bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb,
                       long stride_b, float beta, bt_ptr c, int ldc, long stride_c, int batch) {
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

const void *cu_operand16(bt_backend *be, int i, bt_ptr src, size_t span, bt_dtype dt,
                         bool half) {
    if (half) return cu_addr(src, 2);
    cu_ctx *x = cu(be);
    bt_ptr p = {bt_stage_reserve(be, &x->stage[i], span * 2, "16-bit GEMM operand"), 0};
    be->cast(be, p, dt, src, BT_F32, span);
    return p.buf->ptr;
}

/* gemm16 on tensor cores: A and B in fp16/bf16, products accumulated in fp32
 * (CUBLAS_COMPUTE_32F), C in fp32, or in dt (BT_GEMM_C16: cuBLAS converts
 * the fp32 result, nearest even). A device without tensor cores for dt (a
 * V100 has fp16 but no bf16 ones) gets fp32 copies of the 16-bit values in
 * the fp32 GEMM, as backend.h's contract says; so does k = 0, which has
 * nothing to convert. */
static void gemm16_issue(bt_backend *be, bt_dtype dt, unsigned stored16, bool trans_a,
                         bool trans_b, int m, int n, int k, float alpha, bt_ptr a, int lda,
                         long stride_a, bt_ptr b, int ldb, long stride_b, float beta, bt_ptr c,
                         int ldc, long stride_c, int batch);

static void gemm16_again(bt_backend *be, const void *p) {
    const gemm_call *g = (const gemm_call *)p;
    gemm16_issue(be, g->dt, g->stored16, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, g->a,
                 g->lda, g->stride_a, g->b, g->ldb, g->stride_b, g->beta, g->c, g->ldc,
                 g->stride_c, g->batch);
}

void cu_gemm16(bt_backend *be, bt_dtype dt, unsigned stored16, bool trans_a, bool trans_b, int m,
               int n, int k, float alpha, bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb,
               long stride_b, float beta, bt_ptr c, int ldc, long stride_c, int batch) {
    const gemm_call g = gemm_call_of(dt, stored16, trans_a, trans_b, m, n, k, alpha, a, lda,
                                     stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
    cu_graph_op(be, gemm16_again, &g, sizeof g);
}

static void gemm16_issue(bt_backend *be, bt_dtype dt, unsigned stored16, bool trans_a,
                         bool trans_b, int m, int n, int k, float alpha, bt_ptr a, int lda,
                         long stride_a, bt_ptr b, int ldb, long stride_b, float beta, bt_ptr c,
                         int ldc, long stride_c, int batch) {
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
    const void *A = cu_operand16(be, 0, a, span_a, dt, stored16 & BT_GEMM_A16),
               *B = cu_operand16(be, 1, b, span_b, dt, stored16 & BT_GEMM_B16);
    const cudaDataType_t t = dt == BT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const bool c16 = stored16 & BT_GEMM_C16;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        x->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
        k, &alpha, B, t, ldb, (long long)stride_b, A, t, lda, (long long)stride_a, &beta,
        c16 ? cu_addr(c, 2) : (void *)cu_f32(c), c16 ? t : CUDA_R_32F, ldc, (long long)stride_c,
        batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    x->count.launches++;
    CU_SYNC_IF_DEBUG(x);
}

/* ---- gemm_grid ---- */

void cu_grid_release(cu_ctx *c) {
    cu_grid_sets *s = &c->grid_sets;
    for (int i = 0; i < s->n; i++) free(s->host[i]);
    free(s->scratch);
    if (s->mem) (void)cudaFree(s->mem);
    memset(s, 0, sizeof *s);
}

/* Room for `bytes` more in the arena: when full it doubles (at least 1 MB),
 * the sets moved with it in stream order; when CU_GRID_SETS sets are kept,
 * every one is dropped. cudaFree waits for the work that reads the old one. */
static void grid_room(cu_ctx *c, size_t bytes) {
    cu_grid_sets *s = &c->grid_sets;
    if (s->n == CU_GRID_SETS) { /* drop the sets, keep the arena */
        for (int i = 0; i < s->n; i++) free(s->host[i]);
        s->n = 0;
        s->used = 0;
    }
    if (s->used + bytes <= s->bytes) return;
    cu_graph_break(c, "gemm_grid's address arena grows");
    size_t want = s->bytes ? 2 * s->bytes : (size_t)1 << 20;
    while (want < s->used + bytes) want *= 2;
    void *mem;
    CU_CHECK(cudaMalloc(&mem, want));
    if (s->used)
        CU_CHECK(cudaMemcpyAsync(mem, s->mem, s->used, cudaMemcpyDeviceToDevice, c->stream));
    if (s->mem) CU_CHECK(cudaFree(s->mem));
    s->mem = mem;
    s->bytes = want;
}

/* The device copy of the address set `host` (3 x count pointers): one made
 * before, else a new one, copied without waiting (pageable memory is staged
 * before cudaMemcpyAsync returns; the host copy is kept for the lookups). */
static void **grid_set(cu_ctx *c, void **host, size_t count) {
    cu_grid_sets *s = &c->grid_sets;
    const size_t bytes = 3 * count * sizeof(void *);
    for (int i = 0; i < s->n; i++)
        if (s->count[i] == count && !memcmp(s->host[i], host, bytes))
            return (void **)((char *)s->mem + s->at[i]);
    cu_graph_break(c, "a new address set for gemm_grid"); /* copied from pageable memory */
    grid_room(c, (bytes + 255) / 256 * 256);
    void **keep = (void **)malloc(bytes);
    if (!keep) {
        fprintf(stderr, "bertrain: cuda: out of host memory for a batched GEMM\n");
        exit(1);
    }
    memcpy(keep, host, bytes);
    s->host[s->n] = keep;
    s->count[s->n] = count;
    s->at[s->n] = s->used;
    void **dev = (void **)((char *)s->mem + s->used);
    CU_CHECK(cudaMemcpyAsync(dev, keep, bytes, cudaMemcpyHostToDevice, c->stream));
    s->used += (bytes + 255) / 256 * 256;
    s->n++;
    return dev;
}

/* An operand of the grid: its device address in the GEMM's input type (16-bit
 * operands given in fp32 converted into staging area i) and its element size. */
static const char *grid_operand(bt_backend *be, int i, bt_ptr p, size_t span, bt_dtype dt,
                                bool half, size_t *esz) {
    *esz = dt == BT_F32 ? 4 : 2;
    if (dt == BT_F32) return (const char *)cu_f32(p);
    return (const char *)cu_operand16(be, i, p, span, dt, half);
}

static void gemm_grid_issue(bt_backend *be, bt_dtype dt, unsigned stored16, bool ta, bool tb,
                            int m, int n, int k, float alpha, bt_ptr a, int lda, bt_ptr b, int ldb,
                            float beta, bt_ptr c, int ldc, const bt_gemm_grid *g);

static void gemm_grid_again(bt_backend *be, const void *p) {
    const gemm_call *g = (const gemm_call *)p;
    gemm_grid_issue(be, g->dt, g->stored16, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha,
                    g->a, g->lda, g->b, g->ldb, g->beta, g->c, g->ldc, &g->grid);
}

void cu_gemm_grid(bt_backend *be, bt_dtype dt, unsigned stored16, bool ta, bool tb, int m, int n,
                  int k, float alpha, bt_ptr a, int lda, bt_ptr b, int ldb, float beta, bt_ptr c,
                  int ldc, const bt_gemm_grid *g) {
    gemm_call call = gemm_call_of(dt, stored16, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta,
                                  c, ldc, 0, 0);
    call.grid = *g;
    cu_graph_op(be, gemm_grid_again, &call, sizeof call);
}

static void gemm_grid_issue(bt_backend *be, bt_dtype dt, unsigned stored16, bool ta, bool tb,
                            int m, int n, int k, float alpha, bt_ptr a, int lda, bt_ptr b, int ldb,
                            float beta, bt_ptr c, int ldc, const bt_gemm_grid *g) {
    if (m <= 0 || n <= 0 || g->batch <= 0 || g->outer <= 0) return;
    cu_ctx *x = cu(be);
    const bool tensor = dt == BT_F32 || (dt == BT_BF16 ? x->info.tensor_bf16 : x->info.tensor_f16);
    if (g->outer == 1 || k <= 0 || !tensor) { /* one strided batch, or no 16-bit hardware */
        bt_gemm_grid_loop(be, dt, stored16, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                          g);
        return;
    }
    const size_t groups = (size_t)g->outer - 1;
    const size_t span_a = bt_gemm_operand_span(ta ? k : m, ta ? m : k, lda, g->stride_a,
                                               g->batch) + groups * (size_t)g->outer_a,
                 span_b = bt_gemm_operand_span(tb ? n : k, tb ? k : n, ldb, g->stride_b,
                                               g->batch) + groups * (size_t)g->outer_b;
    size_t ea, eb;
    const char *A = grid_operand(be, 0, a, span_a, dt, stored16 & BT_GEMM_A16, &ea),
               *B = grid_operand(be, 1, b, span_b, dt, stored16 & BT_GEMM_B16, &eb);
    const bool c16 = stored16 & BT_GEMM_C16; /* C in dt (a 16-bit dt only) */
    const size_t ec = c16 ? 2 : 4;
    char *C = c16 ? (char *)cu_addr(c, 2) : (char *)cu_f32(c);
    const size_t count = (size_t)g->batch * (size_t)g->outer;
    cu_grid_sets *sets = &x->grid_sets;
    if (count > sets->scratch_count) { /* grown once, reused by every call */
        free(sets->scratch);
        sets->scratch = (void **)malloc(3 * count * sizeof(void *));
        sets->scratch_count = sets->scratch ? count : 0;
        if (!sets->scratch) {
            fprintf(stderr, "bertrain: cuda: out of host memory for a batched GEMM\n");
            exit(1);
        }
    }
    void **host = sets->scratch;
    for (size_t i = 0; i < count; i++) { /* matrix (o, j): cuBLAS takes B first */
        const size_t o = i / (size_t)g->batch, j = i % (size_t)g->batch;
        host[i] = (void *)(B + (o * g->outer_b + j * g->stride_b) * eb);
        host[count + i] = (void *)(A + (o * g->outer_a + j * g->stride_a) * ea);
        host[2 * count + i] = (void *)(C + (o * g->outer_c + j * g->stride_c) * ec);
    }
    void **dev = grid_set(x, host, count);
    const cudaDataType_t t = dt == BT_F32 ? CUDA_R_32F : dt == BT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const cublasComputeType_t compute = dt == BT_F32 && x->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasGemmBatchedEx(
        x->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
        (const void *const *)dev, t, ldb, (const void *const *)(dev + count), t, lda, &beta,
        (void *const *)(dev + 2 * count), c16 ? t : CUDA_R_32F, ldc, (int)count, compute,
        CUBLAS_GEMM_DEFAULT));
    x->count.launches++;
    CU_SYNC_IF_DEBUG(x);
}
