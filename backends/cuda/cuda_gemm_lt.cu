/* CUDA backend: the GEMMs with an epilogue on cuBLASLt (backend.h's
 * gemm16_bias and gemm16_bias_grad). A linear layer's bias joins its
 * forward GEMM (CUBLASLT_EPILOGUE_BIAS: no pass writes the broadcast that
 * a plain GEMM would add onto), and its bias gradient joins the weight
 * gradient's GEMM (CUBLASLT_EPILOGUE_BGRADB: the output gradient is summed
 * as the GEMM reads it, not by a pass reading it again).
 *
 * Row-major to column-major as cuda_gemm.cu: the call passes backend.h's B
 * as cuBLASLt's A and backend.h's A as its B, the dimensions as (n, m, k).
 * So the forward's bias (one value per output feature, backend.h's n) is a
 * value per row of cuBLASLt's D, what BIAS adds; and in the weight
 * gradient, backend.h's A (the output gradient, k x m) is cuBLASLt's B, whose
 * sums over k are BGRADB's (one per column of D, backend.h's m).
 *
 * Each shape's algorithm is chosen once (cublasLtMatmulAlgoGetHeuristic)
 * and kept: the same algorithm, so the same bits, on every call. Where
 * cuBLASLt has none for a shape, the op is composed (common/composed.h),
 * with one line on stderr the first time. */
#include "cuda_internal.h"
#include "../common/composed.h"

#include <stdlib.h>
#include <string.h>

/* cuBLAS's own default workspace sizes: Hopper's kernels want more */
#define LT_WORKSPACE_HOPPER ((size_t)32 << 20)
#define LT_WORKSPACE ((size_t)4 << 20)

cublasStatus_t cu_lt_create(cu_ctx *c, const cudaDeviceProp *prop) {
    if (prop->major < 7) return CUBLAS_STATUS_SUCCESS; /* no 16-bit tensor cores */
    const size_t bytes = prop->major >= 9 ? LT_WORKSPACE_HOPPER : LT_WORKSPACE;
    if (cudaMalloc(&c->lt.workspace, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        c->lt.workspace = NULL;
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    c->lt.workspace_bytes = bytes;
    return cublasLtCreate(&c->lt.handle);
}

void cu_lt_release(cu_ctx *c) {
    if (c->lt.handle) (void)cublasLtDestroy(c->lt.handle);
    if (c->lt.workspace) (void)cudaFree(c->lt.workspace);
    memset(&c->lt, 0, sizeof c->lt);
}

/* The largest power of two, at most 256, that divides every address. */
static unsigned alignment_of(const void *const *p, int n) {
    uintptr_t bits = 256;
    for (int i = 0; i < n; i++) bits |= (uintptr_t)p[i];
    return (unsigned)(bits & (~bits + 1));
}

/* One epilogue GEMM in cuBLASLt's terms (column-major). */
typedef struct {
    cublasLtEpilogue_t epilogue;
    cudaDataType_t in_type, out_type;  /* A and B; C and D */
    cublasOperation_t op_a, op_b;
    int rows_a, cols_a, rows_b, cols_b; /* as stored */
    int m, n, k;                        /* D is m x n */
    const void *A, *B, *vector;         /* vector: BIAS's bias, BGRADB's gradient */
    void *D;
    float beta;
} lt_gemm;

/* The descriptors of g (NULL where creating one failed: the status says). */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
} lt_descs;

static void lt_descs_free(lt_descs *s) {
    if (s->op) (void)cublasLtMatmulDescDestroy(s->op);
    if (s->a) (void)cublasLtMatrixLayoutDestroy(s->a);
    if (s->b) (void)cublasLtMatrixLayoutDestroy(s->b);
    if (s->d) (void)cublasLtMatrixLayoutDestroy(s->d);
}

static cublasStatus_t lt_descs_make(const lt_gemm *g, lt_descs *s) {
    memset(s, 0, sizeof *s);
    const int32_t ta = g->op_a, tb = g->op_b;
    const uint32_t ep = g->epilogue;
    const void *vec = g->vector;
    cublasStatus_t st = cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!st) st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (!st) st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (!st) st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
    if (!st)
        st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec,
                                            sizeof vec);
    if (!st) st = cublasLtMatrixLayoutCreate(&s->a, g->in_type, g->rows_a, g->cols_a, g->rows_a);
    if (!st) st = cublasLtMatrixLayoutCreate(&s->b, g->in_type, g->rows_b, g->cols_b, g->rows_b);
    if (!st) st = cublasLtMatrixLayoutCreate(&s->d, g->out_type, g->m, g->n, g->m);
    return st;
}

/* The plan of key: found, or chosen now (the heuristic's first algorithm
 * for these descriptors and alignment) and kept. */
static const cu_lt_plan *lt_plan(cu_ctx *c, const cu_lt_key *key, const lt_descs *s) {
    cu_lt *lt = &c->lt;
    for (int i = 0; i < lt->n_plans; i++)
        if (!memcmp(&lt->plans[i].key, key, sizeof *key)) return &lt->plans[i];
    const int slot = lt->n_plans < CU_LT_PLANS ? lt->n_plans++ : lt->next_evict++ % CU_LT_PLANS;
    cu_lt_plan *p = &lt->plans[slot];
    memset(p, 0, sizeof *p);
    p->key = *key;
    cublasLtMatmulPreference_t pref = NULL;
    const uint64_t ws = lt->workspace_bytes;
    const uint32_t align = key->align;
    cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
    if (!st)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && !st; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    if (!st)
        st = cublasLtMatmulAlgoGetHeuristic(lt->handle, s->op, s->a, s->b, s->d, s->d, pref, 1,
                                            &result, &found);
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
    p->ok = !st && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (p->ok) p->algo = result.algo;
    if (!p->ok && !lt->told) {
        lt->told = true;
        fprintf(stderr, "bertrain: cuda: cuBLASLt has no %s epilogue for a %d x %d x %d GEMM "
                "(%s): a separate pass does its part\n",
                key->epilogue == CUBLASLT_EPILOGUE_BIAS ? "BIAS" : "BGRADB", key->m, key->n,
                key->k, cublas_status_name(st ? st : CUBLAS_STATUS_NOT_SUPPORTED));
    }
    return p;
}

/* Run g with its epilogue; false (nothing issued) where cuBLASLt has no
 * algorithm for it, and the caller composes the op. */
static bool lt_run(bt_backend *be, const lt_gemm *g) {
    cu_ctx *c = cu(be);
    if (!c->lt.handle) return false;
    const void *addrs[3] = {g->A, g->B, g->D};
    /* backend.h's m and n: D's columns and rows */
    const cu_lt_key key = {(int)g->epilogue, (int)g->in_type, g->n, g->m, g->k,
                           alignment_of(addrs, 3)};
    lt_descs s;
    cublasStatus_t st = lt_descs_make(g, &s);
    const cu_lt_plan *p = st ? NULL : lt_plan(c, &key, &s);
    if (p && p->ok) {
        const float alpha = 1.0f;
        CUBLAS_CHECK(cublasLtMatmul(c->lt.handle, s.op, &alpha, g->A, s.a, g->B, s.b, &g->beta,
                                    g->D, s.d, g->D, s.d, &p->algo, c->lt.workspace,
                                    c->lt.workspace_bytes, c->stream));
        c->count.launches++;
        CU_SYNC_IF_DEBUG(c);
    }
    lt_descs_free(&s);
    if (st) cublas_fatal("cublasLt descriptors", st, __FILE__, __LINE__);
    return p->ok;
}

/* l zeroed for a GEMM of dt operands with epilogue ep, its output in dt or
 * (out32) in fp32; false where the device has no tensor cores for dt or k
 * is 0 (nothing to multiply): the op is then composed. */
static bool lt_begin(const cu_ctx *c, bt_dtype dt, int k, cublasLtEpilogue_t ep, bool out32,
                     lt_gemm *l) {
    memset(l, 0, sizeof *l);
    const bool tensor = dt == BT_BF16 ? c->info.tensor_bf16 : c->info.tensor_f16;
    l->epilogue = ep;
    l->in_type = dt == BT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    l->out_type = out32 ? CUDA_R_32F : l->in_type;
    return tensor && k > 0;
}

/* An epilogue op's arguments, as a graph region records them (padding
 * zeroed, so that equal calls compare equal byte for byte): gemm16_bias's
 * c16, bias and bias16 in c, vec and vec16; gemm16_bias_grad's c and dbias in
 * c and vec. */
typedef struct {
    bt_dtype dt;
    unsigned stored16;
    int m, n, k;
    bt_ptr a, b, c, vec, vec16;
} lt_call;

static lt_call lt_call_of(bt_dtype dt, unsigned stored16, int m, int n, int k, bt_ptr a,
                          bt_ptr b, bt_ptr c, bt_ptr vec, bt_ptr vec16) {
    lt_call g;
    memset(&g, 0, sizeof g);
    g.dt = dt;
    g.stored16 = stored16;
    g.m = m, g.n = n, g.k = k;
    g.a = a, g.b = b, g.c = c, g.vec = vec, g.vec16 = vec16;
    return g;
}

/* ---- gemm16_bias ---- */

static void bias_issue(bt_backend *be, const void *p) {
    const lt_call *g = (const lt_call *)p;
    if (g->m <= 0 || g->n <= 0) return;
    lt_gemm l;
    if (lt_begin(cu(be), g->dt, g->k, CUBLASLT_EPILOGUE_BIAS, false, &l) && g->vec16.buf) {
        const size_t span_a = (size_t)g->m * g->k, span_b = (size_t)g->n * g->k;
        l.op_a = CUBLAS_OP_T; /* the weight (n, k) row-major: k x n stored */
        l.op_b = CUBLAS_OP_N; /* the input (m, k) row-major: k x m stored */
        l.rows_a = g->k, l.cols_a = g->n, l.rows_b = g->k, l.cols_b = g->m;
        l.m = g->n, l.n = g->m, l.k = g->k;
        l.A = cu_operand16(be, 1, g->b, span_b, g->dt, g->stored16 & BT_GEMM_B16);
        l.B = cu_operand16(be, 0, g->a, span_a, g->dt, g->stored16 & BT_GEMM_A16);
        l.vector = cu_addr(g->vec16, 2);
        l.D = cu_addr(g->c, 2);
        l.beta = 0.0f;
        if (lt_run(be, &l)) return;
    }
    bt_composed_gemm16_bias(be, g->dt, g->stored16, g->m, g->n, g->k, g->a, g->b, g->vec,
                            g->vec16, g->c);
}

void cu_gemm16_bias(bt_backend *be, bt_dtype dt, unsigned stored16, int m, int n, int k, bt_ptr a,
                    bt_ptr b, bt_ptr bias, bt_ptr bias16, bt_ptr c16) {
    const lt_call g = lt_call_of(dt, stored16, m, n, k, a, b, c16, bias, bias16);
    cu_graph_op(be, bias_issue, &g, sizeof g);
}

/* ---- gemm16_bias_grad ---- */

static void bias_grad_issue(bt_backend *be, const void *p) {
    const lt_call *g = (const lt_call *)p;
    if (g->m <= 0 || g->n <= 0) return;
    cu_ctx *c = cu(be);
    lt_gemm l; /* D in fp32, and so the bias gradient */
    if (lt_begin(c, g->dt, g->k, CUBLASLT_EPILOGUE_BGRADB, true, &l)) {
        const bt_ptr grad = {bt_stage_reserve(be, &c->stage[3], (size_t)g->m * 4,
                                              "a bias gradient"), 0};
        l.op_a = CUBLAS_OP_N; /* the input (k, n) row-major: n x k stored */
        l.op_b = CUBLAS_OP_T; /* the output gradient (k, m) row-major: m x k stored */
        l.rows_a = g->n, l.cols_a = g->k, l.rows_b = g->m, l.cols_b = g->k;
        l.m = g->n, l.n = g->m, l.k = g->k;
        l.A = cu_operand16(be, 1, g->b, (size_t)g->k * g->n, g->dt, g->stored16 & BT_GEMM_B16);
        l.B = cu_addr(g->a, 2);
        l.vector = cu_f32(grad);
        l.D = cu_f32(g->c);
        l.beta = 1.0f;
        if (lt_run(be, &l)) { /* the epilogue writes the sums: added to dbias */
            be->add(be, g->vec, g->vec, grad, (size_t)g->m);
            return;
        }
    }
    bt_composed_gemm16_bias_grad(be, g->dt, g->stored16, g->m, g->n, g->k, g->a, g->b, g->c,
                                 g->vec);
}

void cu_gemm16_bias_grad(bt_backend *be, bt_dtype dt, unsigned stored16, int m, int n, int k,
                         bt_ptr a, bt_ptr b, bt_ptr c, bt_ptr dbias) {
    const lt_call g = lt_call_of(dt, stored16, m, n, k, a, b, c, dbias, BT_NO_PTR);
    cu_graph_op(be, bias_grad_issue, &g, sizeof g);
}
