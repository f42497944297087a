/* cuBLAS on the emulated device: the two strided-batched GEMMs and the
 * batched GEMM over arrays of matrix addresses that the backend calls, with cuBLAS's column-major semantics computed by CBLAS column-major
 * calls, queued on the handle's stream.
 *
 * Checked as cuBLAS checks them: m, n, k, batch >= 0 and every leading
 * dimension at least the rows it must cover (else
 * CUBLAS_STATUS_INVALID_VALUE); the data types and the compute type a GPU
 * of the posed architecture supports (bf16 needs sm_80; else
 * CUBLAS_STATUS_NOT_SUPPORTED). Checked as a GPU would fault: every operand's
 * span (rows, columns, leading dimension, batch stride) must lie inside one
 * allocation of the handle's device; for the batched GEMM, the three address
 * arrays when it is called and each matrix when it runs (the arrays are
 * device memory, read in stream order).
 *
 * Numerics: 16-bit operands are widened exactly and multiplied in fp32 (the
 * tensor cores' products of fp16/bf16 values are exact in fp32, accumulated in
 * fp32); TF32 rounds the fp32 operands to 10 mantissa bits, to nearest with
 * ties away from zero, as cvt.rna.tf32.f32. k = 0 is undocumented in
 * cuBLAS: the emulation takes the least helpful reading and leaves C as it
 * was, so a caller that needs C = beta * C must do it itself.
 *
 * The GEMM itself (gemm.h: the call as queued, its checks, its run) serves
 * cuBLASLt's matmul too (cublas_lt.cpp), whose epilogues run_gemm applies. */
#include "gemm.h"
#include "../../backends/common/half.h"

#include <cblas.h>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

struct cublasContext {
    int device;
    cudaStream_t stream = nullptr;
    cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

using namespace cuemu;

/* OpenBLAS's, where the BLAS is OpenBLAS: its own threads would spin beside
 * the emulation's workers. */
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace cuemu {

bool blas_device_ready() {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    if (sticky() != cudaSuccess) return false;
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace cuemu

cublasStatus_t cublasCreate(cublasHandle_t *handle) {
    if (!blas_device_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasContext *h = new cublasContext;
    h->device = current_device();
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (s && ((stream *)s)->device != h->device) {
        report("cublasSetStream: a stream of device %d for a handle of device %d",
               ((stream *)s)->device, h->device);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST) {
        report("cublasSetPointerMode: only CUBLAS_POINTER_MODE_HOST is emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    h->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    (void)mode; /* the emulated GEMMs never use atomics */
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- elements (gemm.h) ---- */
namespace cuemu {

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

float widen(const void *p, size_t i, cudaDataType_t t) {
    if (t == CUDA_R_32F) {
        float f;
        memcpy(&f, (const char *)p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return bt_f32_from_bits(t == CUDA_R_16BF ? bf16_to_f32(h) : f16_to_f32(h));
}

void store(void *p, size_t i, float v, cudaDataType_t t) {
    if (t == CUDA_R_32F) {
        memcpy((char *)p + 4 * i, &v, 4);
        return;
    }
    uint32_t u;
    memcpy(&u, &v, 4);
    const uint16_t h = t == CUDA_R_16BF ? f32_to_bf16(u) : f32_to_f16(u);
    memcpy((char *)p + 2 * i, &h, 2);
}

}  // namespace cuemu

namespace {

/* Elements an operand spans: batch matrices of rows x cols (column-major,
 * leading dimension ld) with batch stride s. */
size_t span(int rows, int cols, int ld, long long s, int batch) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (size_t)(batch - 1) * (size_t)s + (size_t)(cols - 1) * (size_t)ld + (size_t)rows;
}

/* fp32 -> TF32 (10 mantissa bits), nearest, ties away from zero. */
float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

/* An operand as fp32 (widened or rounded as the call says): the elements of
 * its whole span. */
std::vector<float> as_f32(const void *p, size_t n, cudaDataType_t t, bool round_tf32) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        const float f = widen(p, i, t);
        v[i] = round_tf32 ? tf32(f) : f;
    }
    return v;
}

/* The call's work, as its stream runs it (device memory reachable): the
 * product in fp32 by CBLAS, the epilogue's bias added to C's fp32 result,
 * a 16-bit C converted back once, then the epilogue's bias gradient. */
void run_gemm(const gemm_call &g) {
    if (g.m == 0 || g.n == 0 || g.batch == 0 || g.k == 0) return; /* k = 0: see the top */
    const int ra = g.ta ? g.k : g.m, ca = g.ta ? g.m : g.k;
    const int rb = g.tb ? g.n : g.k, cb = g.tb ? g.k : g.n;
    const size_t na = span(ra, ca, g.lda, g.sa, g.batch), nb = span(rb, cb, g.ldb, g.sb, g.batch);
    const bool convert = g.type != CUDA_R_32F || g.tf32;
    std::vector<float> a, b;
    if (convert) {
        a = as_f32(g.A, na, g.type, g.tf32);
        b = as_f32(g.B, nb, g.type, g.tf32);
    }
    const float *A = convert ? a.data() : (const float *)g.A;
    const float *B = convert ? b.data() : (const float *)g.B;
    /* a 16-bit C: its span widened, the GEMM in fp32, then each element of
     * the matrices (not the gaps between them) converted back, nearest even */
    const size_t nc = span(g.m, g.n, g.ldc, g.sc, g.batch);
    std::vector<float> c16 = g.ctype == CUDA_R_32F ? std::vector<float>()
                                                   : as_f32(g.C, nc, g.ctype, false);
    float *C = g.ctype == CUDA_R_32F ? (float *)g.C : c16.data();
    for (int i = 0; i < g.batch; i++)
        cblas_sgemm(CblasColMajor, g.ta ? CblasTrans : CblasNoTrans,
                    g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, g.alpha,
                    A + (size_t)i * (size_t)g.sa, g.lda, B + (size_t)i * (size_t)g.sb, g.ldb,
                    g.beta, C + (size_t)i * (size_t)g.sc, g.ldc);
    if (g.epilogue == EPI_BIAS) epilogue_bias(g, C);
    if (g.ctype != CUDA_R_32F)
        for (int i = 0; i < g.batch; i++)
            for (int col = 0; col < g.n; col++)
                for (int row = 0; row < g.m; row++) {
                    const size_t at = (size_t)i * (size_t)g.sc + (size_t)col * (size_t)g.ldc + row;
                    store(g.C, at, C[at], g.ctype);
                }
    if (g.epilogue == EPI_BGRADA || g.epilogue == EPI_BGRADB) epilogue_bias_grad(g);
}

/* An operand of a call: its name in reports, and its bytes from p. */
struct operand {
    const char *what;
    const void *p;
    size_t bytes;
};

/* Whether w's span, which the call writes (C, a bias gradient) or reads
 * beside C (a bias), overlaps o's: cuBLAS does not allow C to alias A or B
 * (its blocks would read what others have written), nor cuBLASLt a bias
 * vector to alias D, and the emulation, which reads every operand before it
 * writes, would hide it; reported as the error it is. */
bool overlaps(const char *name, const operand &w, const operand &o) {
    const char *w0 = (const char *)w.p, *o0 = (const char *)o.p;
    if (!w.bytes || !o.bytes || w0 >= o0 + o.bytes || o0 >= w0 + w.bytes) return false;
    report("%s: %s overlaps operand %s (cuBLAS does not allow it)", name, w.what, o.what);
    return true;
}

/* Whether any of ops lies outside the allocations of `device` (each
 * reported, prefixed by `what`): a GPU's illegal address when it runs. */
template <size_t N>
bool outside(const char *name, const char *what, const operand (&ops)[N], int device) {
    bool fault = false;
    for (const operand &o : ops) {
        char why[256];
        if (o.bytes && bad_range(o.p, o.bytes, device, why, sizeof why)) {
            report("%s: %s%s: %s", name, what, o.what, why);
            fault = true;
        }
    }
    return fault;
}

/* A strided call's operands (A, B, C and an epilogue's bias vector) checked
 * as a GPU faults: each span inside one allocation of `device`, and no
 * overlap that cuBLAS forbids. True (reported) when the call must fail. */
bool operands_fault(const gemm_call &g, int device) {
    const int ra = g.ta ? g.k : g.m, ca = g.ta ? g.m : g.k;
    const int rb = g.tb ? g.n : g.k, cb = g.tb ? g.k : g.n;
    const operand ops[4] = {
        {"A", g.A, span(ra, ca, g.lda, g.sa, g.batch) * type_bytes(g.type)},
        {"B", g.B, span(rb, cb, g.ldb, g.sb, g.batch) * type_bytes(g.type)},
        {g.c_name, g.C, span(g.m, g.n, g.ldc, g.sc, g.batch) * type_bytes(g.ctype)},
        {"bias", g.bias, (size_t)bias_elems(g) * type_bytes(g.bias_type)},
    };
    const bool fault = outside(g.name, "operand ", ops, device);
    const bool grad = g.epilogue == EPI_BGRADA || g.epilogue == EPI_BGRADB;
    const bool overlap =
        g.k && (overlaps(g.name, ops[2], ops[0]) || overlaps(g.name, ops[2], ops[1]) ||
                overlaps(g.name, ops[3], ops[2]) ||
                (grad && (overlaps(g.name, ops[3], ops[0]) || overlaps(g.name, ops[3], ops[1]))));
    return fault || overlap;
}

/* Each matrix of a batched call (pointer arrays, read now: the device reads
 * them as the call runs): its span checked as a GPU faults, then the GEMM.
 * False (reported) when one lies outside the device's allocations. */
bool run_gemm_arrays(const gemm_call &g, int device) {
    const int ra = g.ta ? g.k : g.m, ca = g.ta ? g.m : g.k;
    const int rb = g.tb ? g.n : g.k, cb = g.tb ? g.k : g.n;
    const size_t bytes[3] = {span(ra, ca, g.lda, 0, 1) * type_bytes(g.type),
                             span(rb, cb, g.ldb, 0, 1) * type_bytes(g.type),
                             span(g.m, g.n, g.ldc, 0, 1) * type_bytes(g.ctype)};
    for (int i = 0; i < g.batch; i++) {
        const operand ops[3] = {{"A", g.Aarr[i], bytes[0]}, {"B", g.Barr[i], bytes[1]},
                                {"C", g.Carr[i], bytes[2]}};
        char what[32];
        snprintf(what, sizeof what, "matrix %d of operand ", i);
        if (outside(g.name, what, ops, device)) return false;
        if (g.k && (overlaps(g.name, ops[2], ops[0]) || overlaps(g.name, ops[2], ops[1])))
            return false;
        gemm_call one = g;
        one.batch = 1;
        one.A = ops[0].p;
        one.B = ops[1].p;
        one.C = g.Carr[i];
        run_gemm(one);
    }
    return true;
}

/* A batched call's three address arrays checked as a GPU faults when it
 * reads them (the matrices are checked when it runs). */
bool arrays_fault(const gemm_call &g, int device) {
    const size_t bytes = (size_t)g.batch * sizeof(void *);
    const operand arr[3] = {{"A", g.Aarr, bytes}, {"B", g.Barr, bytes}, {"C", g.Carr, bytes}};
    return outside(g.name, "the address array of ", arr, device);
}

}  // namespace

namespace cuemu {

cublasStatus_t queue_gemm_on(int device, cudaStream_t st, const gemm_call &g) {
    if (sticky() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (current_device() != device) {
        report("%s: a handle of device %d used while device %d is current", g.name, device,
               current_device());
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const int ra = g.ta ? g.k : g.m, rb = g.tb ? g.n : g.k;
    if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0 || g.lda < (ra > 1 ? ra : 1) ||
        g.ldb < (rb > 1 ? rb : 1) || g.ldc < (g.m > 1 ? g.m : 1)) {
        report("%s: invalid value (m %d, n %d, k %d, lda %d, ldb %d, ldc %d, batch %d)", g.name,
               g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    stream *s = stream_of(st, device);
    if (!s) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (capture_refuses(s)) { /* its kernel's launch fails */
        record(cudaErrorStreamCaptureInvalidated);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const bool any = g.m && g.n && g.batch;
    const bool fault = any && (g.Aarr ? arrays_fault(g, device) : operands_fault(g, device));
    s->push([g, fault, device] {
        if (fault || (g.Aarr && g.k && !run_gemm_arrays(g, device))) /* a GPU: illegal address */
            set_sticky(cudaErrorIllegalAddress);
        else {
            if (!g.Aarr) run_gemm(g);
            trace_gemm(g.type == CUDA_R_16BF ? "bf16" : g.type == CUDA_R_16F ? "fp16"
                       : g.tf32               ? "tf32" : "fp32",
                       g.m, g.n, g.k, g.batch);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_gemm_types(const char *name, cudaDataType_t Atype, cudaDataType_t Btype,
                                cudaDataType_t Ctype, cublasComputeType_t computeType) {
    const bool f32 = Atype == CUDA_R_32F && Btype == CUDA_R_32F;
    const bool f16 = Atype == CUDA_R_16F && Btype == CUDA_R_16F;
    const bool bf16 = Atype == CUDA_R_16BF && Btype == CUDA_R_16BF;
    const bool fast_tf32 = computeType == CUBLAS_COMPUTE_32F_FAST_TF32;
    const bool c_ok = Ctype == CUDA_R_32F || ((f16 || bf16) && Ctype == Atype && !fast_tf32);
    if (!c_ok || !(f32 || f16 || bf16) || (fast_tf32 && !f32) ||
        (computeType != CUBLAS_COMPUTE_32F && !fast_tf32)) {
        report("%s: types A %d, B %d, C %d, compute %d: not supported", name, (int)Atype,
               (int)Btype, (int)Ctype, (int)computeType);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (bf16 && cfg().arch < 80) {
        report("%s: bf16 operands on an sm_%d device: not supported", name, cfg().arch);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace cuemu

/* A cuBLAS call: queued on its handle's stream and device. */
static cublasStatus_t queue_gemm(cublasHandle_t h, const gemm_call &g) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    return queue_gemm_on(h->device, h->stream, g);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long strideA, const float *B, int ldb,
                                         long long strideB, const float *beta, float *C,
                                         int ldc, long long strideC, int batchCount) {
    gemm_call g = {"cublasSgemmStridedBatched", transa != CUBLAS_OP_N, transb != CUBLAS_OP_N,
                   m, n, k, lda, ldb, ldc, batchCount, strideA, strideB, strideC, *alpha, *beta,
                   A, B, C, CUDA_R_32F,
                   h && h->math == CUBLAS_TF32_TENSOR_OP_MATH && cfg().arch >= 80, nullptr,
                   nullptr, nullptr, CUDA_R_32F};
    return queue_gemm(h, g);
}

/* The types of an Ex call as cuBLAS checks them (the emulation supports what
 * the backend uses: fp32, TF32, fp16 and bf16 inputs, fp32 output or, with
 * 16-bit inputs and fp32 compute, output in the inputs' type; the default
 * algorithm); on success *tf32 says whether the fp32 operands are rounded to
 * TF32. */
static cublasStatus_t check_ex_types(const char *name, cublasHandle_t h, cudaDataType_t Atype,
                                     cudaDataType_t Btype, cudaDataType_t Ctype,
                                     cublasComputeType_t computeType, cublasGemmAlgo_t algo,
                                     bool *tf32) {
    if (algo != CUBLAS_GEMM_DEFAULT) {
        report("%s: algo %d: not supported", name, (int)algo);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const cublasStatus_t st = check_gemm_types(name, Atype, Btype, Ctype, computeType);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    *tf32 = (computeType == CUBLAS_COMPUTE_32F_FAST_TF32 ||
             (h && h->math == CUBLAS_TF32_TENSOR_OP_MATH)) &&
            Atype == CUDA_R_32F && cfg().arch >= 80;
    return CUBLAS_STATUS_SUCCESS;
}

/* An Ex call: its types checked (check_ex_types), then g queued. */
static cublasStatus_t queue_ex(cublasHandle_t h, gemm_call g, cudaDataType_t Btype,
                               cudaDataType_t Ctype, cublasComputeType_t computeType,
                               cublasGemmAlgo_t algo) {
    const cublasStatus_t st =
        check_ex_types(g.name, h, g.type, Btype, Ctype, computeType, algo, &g.tf32);
    g.ctype = Ctype;
    return st != CUBLAS_STATUS_SUCCESS ? st : queue_gemm(h, g);
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType_t Atype, int lda, long long strideA,
    const void *B, cudaDataType_t Btype, int ldb, long long strideB, const void *beta, void *C,
    cudaDataType_t Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    const gemm_call g = {"cublasGemmStridedBatchedEx", transa != CUBLAS_OP_N,
                         transb != CUBLAS_OP_N, m, n, k, lda, ldb, ldc, batchCount, strideA,
                         strideB, strideC, *(const float *)alpha, *(const float *)beta, A, B,
                         C, Atype, false, nullptr, nullptr, nullptr, CUDA_R_32F};
    return queue_ex(h, g, Btype, Ctype, computeType, algo);
}

cublasStatus_t cublasGemmBatchedEx(
    cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *const Aarray[], cudaDataType_t Atype, int lda,
    const void *const Barray[], cudaDataType_t Btype, int ldb, const void *beta,
    void *const Carray[], cudaDataType_t Ctype, int ldc, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    const gemm_call g = {"cublasGemmBatchedEx", transa != CUBLAS_OP_N, transb != CUBLAS_OP_N,
                         m, n, k, lda, ldb, ldc, batchCount, 0, 0, 0, *(const float *)alpha,
                         *(const float *)beta, nullptr, nullptr, nullptr, Atype, false, Aarray,
                         Barray, Carray, CUDA_R_32F};
    return queue_ex(h, g, Btype, Ctype, computeType, algo);
}
