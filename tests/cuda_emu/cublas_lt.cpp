/* cuBLASLt on the emulated device: the matmul with the epilogues the
 * backend's linear layers use (a bias added to each row of D, or the bias
 * gradient of op(A) or op(B) summed over k), queued on the stream each call
 * names through the emulated cuBLAS's GEMM (gemm.h), so a matmul with the
 * default epilogue is, bit for bit, cublasGemmStridedBatchedEx.
 *
 * What it emulates: compute CUBLAS_COMPUTE_32F, scale CUDA_R_32F, alpha and
 * beta host floats; A and B both bf16 (sm_80 and up) or both fp16; C and D of
 * one type, fp32 or A's; C the very D (its pointer and layout: the backend
 * runs in place); one matrix (no batch); the epilogues DEFAULT, BIAS, BGRADA
 * and BGRADB, the bias vector in CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE (fp32
 * or A's type), else in D's. Anything else is CUBLAS_STATUS_NOT_SUPPORTED,
 * reported, from cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul alike
 * (one check serves both).
 *
 * Checked as cuBLASLt checks them: an attribute's size, an attribute not
 * emulated, layouts that do not make one GEMM (D m x n, op(A) m x k, op(B)
 * k x n, C as D), a leading dimension below the rows, an epilogue without
 * its bias pointer, an algorithm not from the heuristic (NULL is allowed):
 * CUBLAS_STATUS_INVALID_VALUE, reported. The heuristic's algorithm counts on
 * the preference's alignments (256 bytes unless set), so the matmul refuses
 * it for an operand aligned less (NOT_SUPPORTED, reported). Checked as a GPU
 * faults (gemm.h): every operand's span and the bias vector's inside one
 * allocation of the handle's device, the bias vector overlapping D (or, for
 * a gradient it writes, A or B).
 *
 * Numerics: the GEMM's (cublas.cpp); BIAS adds the bias, widened, to the
 * fp32 result before its one conversion to D's type (nearest even);
 * BGRADA / BGRADB sum the widened 16-bit values in fp32 in increasing k and
 * write (never add to) the vector, converted nearest even to a 16-bit bias
 * type. m, n or k 0 runs nothing, as cublas.cpp's k = 0. */
#include "gemm.h"
#include "include/cublasLt.h"

#include <climits>
#include <cstring>

struct cublasLtContext {
    int device;
};

/* The attributes as cuBLASLt stores them: 32-bit enums, a pointer. */
struct cuemuLtMatmulDesc {
    int32_t compute, scale;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    void *bias = nullptr;
    int32_t bias_type = -1; /* not set: D's type */
};

struct cuemuLtMatrixLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};

struct cuemuLtMatmulPreference {
    uint64_t max_workspace = 0; /* the emulated algorithm needs none */
    /* the alignment in bytes that A, B, C and D will have at the least: an
     * algorithm the heuristic returns may count on it */
    uint32_t align[4] = {256, 256, 256, 256};
};

using namespace cuemu;

namespace {

/* A Create call: *out a new T of fields args (INVALID_VALUE for a null out). */
template <typename T, typename... Args>
cublasStatus_t create(T **out, Args... args) {
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    *out = new T{args...};
    return CUBLAS_STATUS_SUCCESS;
}

/* A Destroy call (null: nothing to free). */
template <typename T>
cublasStatus_t destroy(T *p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

/* data[0] of the algorithm the heuristic returns: cublasLtMatmul refuses
 * another (one not from cublasLtMatmulAlgoGetHeuristic); data[1..4]: the
 * alignments of A, B, C and D it counts on (the preference's). */
const uint64_t algo_tag = 0x63756c74656d75ull; /* "cultemu" */

/* Whether A, B, C and D (ptrs) have the alignments algo counts on, as a
 * GPU's algorithm chosen for them needs; reported when one has not (an
 * algorithm kept for aligned operands, used for others). */
bool aligned_for(const char *name, const cublasLtMatmulAlgo_t *algo, const void *const ptrs[4]) {
    for (int i = 0; i < 4; i++) {
        const uint64_t a = algo->data[1 + i];
        if (a > 1 && (uintptr_t)ptrs[i] % a) {
            report("%s: the algorithm counts on %c %llu-byte aligned "
                   "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES), at %p it is not: not supported",
                   name, "ABCD"[i], (unsigned long long)a, "ABCD"[i], ptrs[i]);
            return false;
        }
    }
    return true;
}

/* Where a SetAttribute call writes, and the size it takes: {nullptr, 0}
 * for an attribute the emulation does not have. */
struct attr_field {
    void *at;
    size_t bytes;
};

/* A SetAttribute call: its size checked as cuBLASLt checks it, then buf
 * copied into f (INVALID_VALUE, reported, for a wrong size or an attribute
 * not emulated). */
cublasStatus_t set_attr(const char *name, int attr, attr_field f, const void *buf, size_t bytes) {
    if (!f.at) {
        report("%s: attribute %d: not emulated", name, attr);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!buf || bytes != f.bytes) {
        report("%s: attribute %d: %zu bytes%s, where it takes %zu", name, attr, bytes,
               buf ? "" : " from a null buffer", f.bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(f.at, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
}

/* The descriptor's field that attribute attr sets. */
attr_field desc_field(cuemuLtMatmulDesc *d, cublasLtMatmulDescAttributes_t attr) {
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return {&d->compute, sizeof d->compute};
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return {&d->scale, sizeof d->scale};
    case CUBLASLT_MATMUL_DESC_TRANSA: return {&d->transa, sizeof d->transa};
    case CUBLASLT_MATMUL_DESC_TRANSB: return {&d->transb, sizeof d->transb};
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return {&d->epilogue, sizeof d->epilogue};
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return {&d->bias, sizeof d->bias};
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return {&d->bias_type, sizeof d->bias_type};
    default: return {nullptr, 0};
    }
}

/* The emulation's epilogue for cuBLASLt's, EPI_NONE standing for DEFAULT;
 * false for one it does not emulate. */
bool epilogue_of(uint32_t e, gemm_epilogue *out) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: *out = EPI_NONE; return true;
    case CUBLASLT_EPILOGUE_BIAS: *out = EPI_BIAS; return true;
    case CUBLASLT_EPILOGUE_BGRADA: *out = EPI_BGRADA; return true;
    case CUBLASLT_EPILOGUE_BGRADB: *out = EPI_BGRADB; return true;
    default: return false;
    }
}

/* The matmul's types and epilogue, as a GPU of the posed architecture
 * supports them (else NOT_SUPPORTED, reported), into g's type, ctype,
 * epilogue and bias_type. */
cublasStatus_t plan_types(const char *name, const cuemuLtMatmulDesc *d,
                          const cuemuLtMatrixLayout *a, const cuemuLtMatrixLayout *b,
                          const cuemuLtMatrixLayout *c, const cuemuLtMatrixLayout *dl,
                          gemm_call *g) {
    const char *why = nullptr;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
        why = "compute and scale types other than CUBLAS_COMPUTE_32F, CUDA_R_32F";
    else if (a->type != CUDA_R_16F && a->type != CUDA_R_16BF)
        why = "A not fp16 or bf16";
    else if (c->type != dl->type)
        why = "C of another type than D";
    else if (!epilogue_of(d->epilogue, &g->epilogue))
        why = "an epilogue other than DEFAULT, BIAS, BGRADA, BGRADB";
    g->bias_type = d->bias_type < 0 ? dl->type : (cudaDataType_t)d->bias_type;
    if (!why && g->epilogue != EPI_NONE && g->bias_type != CUDA_R_32F && g->bias_type != a->type)
        why = "a bias type other than fp32 or A's";
    if (why) {
        report("%s: types A %d, B %d, C %d, D %d, compute %d, scale %d, epilogue %u, bias "
               "type %d: %s: not supported",
               name, (int)a->type, (int)b->type, (int)c->type, (int)dl->type, (int)d->compute,
               (int)d->scale, (unsigned)d->epilogue, (int)g->bias_type, why);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    g->type = a->type;
    g->ctype = dl->type;
    return check_gemm_types(name, a->type, b->type, dl->type, (cublasComputeType_t)d->compute);
}

/* A layout's dimensions: within the emulated GEMM's ints (else
 * NOT_SUPPORTED) and its leading dimension at least its rows (else
 * INVALID_VALUE); reported. */
cublasStatus_t check_layout(const char *name, char which, const cuemuLtMatrixLayout *l) {
    if (l->rows > INT_MAX || l->cols > INT_MAX || l->ld > INT_MAX) {
        report("%s: layout %c: %llu x %llu, ld %lld: beyond the emulation's 32-bit dimensions",
               name, which, (unsigned long long)l->rows, (unsigned long long)l->cols,
               (long long)l->ld);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (l->ld < (l->rows > 1 ? (int64_t)l->rows : 1)) {
        report("%s: layout %c: ld %lld for %llu rows", name, which, (long long)l->ld,
               (unsigned long long)l->rows);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* The matmul's shape from its layouts and ops: D m x n, op(A) m x k, op(B)
 * k x n, C as D (else INVALID_VALUE), C's leading dimension D's (else
 * NOT_SUPPORTED: the emulation runs in place); reported. Into g's ops,
 * dimensions and leading dimensions. */
cublasStatus_t plan_shape(const char *name, const cuemuLtMatmulDesc *d,
                          const cuemuLtMatrixLayout *a, const cuemuLtMatrixLayout *b,
                          const cuemuLtMatrixLayout *c, const cuemuLtMatrixLayout *dl,
                          gemm_call *g) {
    const cuemuLtMatrixLayout *ls[4] = {a, b, c, dl};
    for (int i = 0; i < 4; i++) {
        const cublasStatus_t st = check_layout(name, "ABCD"[i], ls[i]);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    const bool ops_ok = (d->transa >= CUBLAS_OP_N && d->transa <= CUBLAS_OP_C) &&
                        (d->transb >= CUBLAS_OP_N && d->transb <= CUBLAS_OP_C);
    g->ta = d->transa != CUBLAS_OP_N;
    g->tb = d->transb != CUBLAS_OP_N;
    g->m = (int)dl->rows;
    g->n = (int)dl->cols;
    g->k = (int)(g->ta ? a->rows : a->cols);
    const uint64_t a_m = g->ta ? a->cols : a->rows;
    const uint64_t b_k = g->tb ? b->cols : b->rows, b_n = g->tb ? b->rows : b->cols;
    if (!ops_ok || a_m != dl->rows || b_k != (uint64_t)g->k || b_n != dl->cols ||
        c->rows != dl->rows || c->cols != dl->cols) {
        report("%s: ops %d %d, A %llu x %llu, B %llu x %llu, C %llu x %llu, D %llu x %llu: "
               "not one GEMM",
               name, (int)d->transa, (int)d->transb, (unsigned long long)a->rows,
               (unsigned long long)a->cols, (unsigned long long)b->rows,
               (unsigned long long)b->cols, (unsigned long long)c->rows,
               (unsigned long long)c->cols, (unsigned long long)dl->rows,
               (unsigned long long)dl->cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (c->ld != dl->ld) {
        report("%s: C's ld %lld, D's %lld: not supported (C must be D)", name, (long long)c->ld,
               (long long)dl->ld);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    g->lda = (int)a->ld;
    g->ldb = (int)b->ld;
    g->ldc = (int)dl->ld;
    return CUBLAS_STATUS_SUCCESS;
}

/* What cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul both check: the
 * handle and descriptors, the types (plan_types), the shape (plan_shape);
 * on success g is the GEMM but for its operands, alpha and beta. */
cublasStatus_t plan(const char *name, cublasLtHandle_t h, const cuemuLtMatmulDesc *d,
                    const cuemuLtMatrixLayout *a, const cuemuLtMatrixLayout *b,
                    const cuemuLtMatrixLayout *c, const cuemuLtMatrixLayout *dl, gemm_call *g) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!d || !a || !b || !c || !dl) {
        report("%s: a null descriptor", name);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    *g = gemm_call{};
    g->name = name;
    g->batch = 1;
    g->c_name = "D";
    g->bias = d->bias;
    const cublasStatus_t st = plan_types(name, d, a, b, c, dl, g);
    return st != CUBLAS_STATUS_SUCCESS ? st : plan_shape(name, d, a, b, c, dl, g);
}

}  // namespace

/* ---- the epilogues, run by run_gemm (gemm.h) ---- */

void cuemu::epilogue_bias(const gemm_call &g, float *C32) {
    for (int col = 0; col < g.n; col++)
        for (int row = 0; row < g.m; row++)
            C32[(size_t)col * (size_t)g.ldc + row] += widen(g.bias, row, g.bias_type);
}

void cuemu::epilogue_bias_grad(const gemm_call &g) {
    /* element (r, kk) of op(A) (m x k), or of op(B)^T (n x k), in the
     * stored matrix X: along X's columns where X is stored as that
     * transposed (A with OP_T, B with OP_N) */
    const bool of_a = g.epilogue == EPI_BGRADA;
    const void *X = of_a ? g.A : g.B;
    const size_t ld = (size_t)(of_a ? g.lda : g.ldb);
    const bool along_cols = of_a ? g.ta : !g.tb;
    for (int r = 0; r < bias_elems(g); r++) {
        float sum = 0.0f;
        for (int kk = 0; kk < g.k; kk++)
            sum += widen(X, along_cols ? (size_t)r * ld + kk : (size_t)kk * ld + r, g.type);
        store(g.bias, r, sum, g.bias_type);
    }
}

/* ---- the API ---- */

/* A handle of the current device, as cublasCreate makes one. */
cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    if (!blas_device_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
    *handle = new cublasLtContext{current_device()};
    return CUBLAS_STATUS_SUCCESS;
}

/* Frees a handle (its matmuls already queued still run). */
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

/* A matmul descriptor: no transposes, the DEFAULT epilogue, no bias. */
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    return create(desc, (int32_t)compute, (int32_t)scale);
}

/* Frees a descriptor (a matmul already queued keeps its own copy). */
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return destroy(desc); }

/* One attribute of a matmul descriptor; its value is checked by the matmul
 * and the heuristic. */
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    return set_attr("cublasLtMatmulDescSetAttribute", (int)attr, desc_field(desc, attr), buf,
                    sizeInBytes);
}

/* A column-major matrix layout; checked by the matmul and the heuristic. */
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    return create(layout, type, rows, cols, ld);
}

/* Frees a layout. */
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    return destroy(layout);
}

/* A heuristic preference: a workspace of 0 bytes at the most. */
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    return create(pref);
}

/* Frees a preference. */
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    return destroy(pref);
}

/* The workspace the heuristic may ask for (the emulated algorithm asks for
 * none, whatever it is), or an operand's alignment that the algorithm it
 * returns may count on. */
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    const int align = (int)attr - (int)CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
    const attr_field f =
        attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
            ? attr_field{&pref->max_workspace, sizeof pref->max_workspace}
        : align >= 0 && align < 4 ? attr_field{&pref->align[align], sizeof pref->align[align]}
                                  : attr_field{nullptr, 0};
    return set_attr("cublasLtMatmulPreferenceSetAttribute", (int)attr, f, buf, sizeInBytes);
}

/* One algorithm (no workspace) for a matmul the emulation runs, else the
 * status cublasLtMatmul would return and none. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int *count) {
    const char *name = "cublasLtMatmulAlgoGetHeuristic";
    if (count) *count = 0;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!pref || requested < 1 || !results || !count) {
        report("%s: preference %p, %d algorithms requested into %p, count at %p", name,
               (void *)pref, requested, (void *)results, (void *)count);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    gemm_call g;
    const cublasStatus_t st = plan(name, h, desc, Adesc, Bdesc, Cdesc, Ddesc, &g);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = algo_tag;
    for (int i = 0; i < 4; i++) results[0].algo.data[1 + i] = pref->align[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* D = alpha op(A) op(B) + beta C with the descriptor's epilogue, queued on
 * `stream` (nullptr: the legacy default stream) as cuBLAS's GEMMs are. */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
    const char *name = "cublasLtMatmul";
    gemm_call g;
    const cublasStatus_t st = plan(name, h, desc, Adesc, Bdesc, Cdesc, Ddesc, &g);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    (void)workspace; /* the emulated algorithm needs none */
    (void)workspaceSizeInBytes;
    const char *why = !alpha || !beta                     ? "a null alpha or beta"
                      : algo && algo->data[0] != algo_tag ? "an algo not from the heuristic"
                      : g.epilogue != EPI_NONE && !g.bias ? "an epilogue without its bias pointer"
                                                          : nullptr;
    if (why) {
        report("%s: %s", name, why);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (C != D) {
        report("%s: C %p, D %p: not supported (C must be D)", name, C, (void *)D);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const void *const ptrs[4] = {A, B, C, D};
    if (algo && !aligned_for(name, algo, ptrs)) return CUBLAS_STATUS_NOT_SUPPORTED;
    g.alpha = *(const float *)alpha;
    g.beta = *(const float *)beta;
    g.A = A;
    g.B = B;
    g.C = D;
    return queue_gemm_on(h->device, stream, g);
}
