/* emu_selftest's cuBLASLt checks (main() and the other checks: selftest.cpp):
 * every epilogue's numerics against a reference of its own, the statuses
 * cuBLASLt returns (attribute sizes, the heuristic, inconsistent layouts,
 * what is not emulated, alignment, captures), and the cases that need a
 * process of their own (the sm_70 pose, the bias vector's faults, the
 * trace), which lt_children runs as `emu_selftest CASE`. */
#include "selftest.h"
#include "emu.h"
#include "include/cublas_v2.h"
#include "include/cublasLt.h"
#include "../../backends/common/half.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

typedef std::vector<unsigned char> bytes_t; /* a device array's bytes, on the host */

/* Bytes of one element of t. */
static size_t elem_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/* Element i of h set to v in type t, a 16-bit type rounded nearest even
 * (the project's conversions, half.h). */
static void put(bytes_t &h, size_t i, float v, cudaDataType_t t) {
    uint32_t u;
    memcpy(&u, &v, 4);
    const uint16_t s = t == CUDA_R_16BF ? f32_to_bf16(u) : f32_to_f16(u);
    if (t == CUDA_R_32F)
        memcpy(&h[4 * i], &v, 4);
    else
        memcpy(&h[2 * i], &s, 2);
}

/* v in type t. */
static bytes_t encode(const std::vector<float> &v, cudaDataType_t t) {
    bytes_t h(v.size() * elem_bytes(t));
    for (size_t i = 0; i < v.size(); i++) put(h, i, v[i], t);
    return h;
}

/* A matmul of m 5, n 7, k 9 as a linear layer's: A stored ra x ca, B rb x cb,
 * D m x n, each with a leading dimension past its rows (the gaps: NaN in A
 * and B, which a misplaced read turns into a wrong result; 77 in D, which
 * must stay). Values exact in bf16 and fp16 (A and B odd 128ths under 2, C
 * halves, the bias odd 1024ths under 1/8), so every product and sum is exact
 * in fp32 and only the conversion to a 16-bit D (or bias) rounds, as it
 * mostly must (sums of 12 bits and more); the bias's bits lie below D's
 * last, so a D rounded before the bias is added (twice) differs. */
struct lt_problem {
    static const int m = 5, n = 7, k = 9;
    bool ta, tb;
    int ra, ca, rb, cb, lda, ldb, ldd;
    std::vector<float> a, b, c, bias; /* bias: max(m, n) values */
    /* op(A)[i][kk] and op(B)[kk][j] */
    float op_a(int i, int kk) const { return ta ? a[kk + i * lda] : a[i + kk * lda]; }
    float op_b(int kk, int j) const { return tb ? b[j + kk * ldb] : b[kk + j * ldb]; }
};

/* The problem for ops ta, tb (a matrix's elements, then its gaps); fine:
 * A's values odd 1024ths (11 bits: fp16 only), so that fp16 sums of A's
 * rows round too. */
static lt_problem make_problem(bool ta, bool tb, bool fine = false) {
    lt_problem p;
    p.ta = ta;
    p.tb = tb;
    p.ra = ta ? p.k : p.m, p.ca = ta ? p.m : p.k;
    p.rb = tb ? p.n : p.k, p.cb = tb ? p.k : p.n;
    p.lda = p.ra + 2, p.ldb = p.rb + 1, p.ldd = p.m + 3;
    p.a.assign((size_t)p.lda * p.ca, NAN);
    p.b.assign((size_t)p.ldb * p.cb, NAN);
    p.c.assign((size_t)p.ldd * p.n, 77.0f);
    for (int j = 0; j < p.ca; j++)
        for (int i = 0; i < p.ra; i++)
            p.a[i + j * p.lda] = fine ? (float)((i * 37 + j * 101) % 2048 * 2 - 2047) / 1024
                                      : (float)((i * 37 + j * 101) % 256 * 2 - 255) / 128;
    for (int j = 0; j < p.cb; j++)
        for (int i = 0; i < p.rb; i++)
            p.b[i + j * p.ldb] = (float)((i * 53 + j * 29 + 7) % 256 * 2 - 255) / 128;
    for (int j = 0; j < p.n; j++)
        for (int i = 0; i < p.m; i++) p.c[i + j * p.ldd] = (float)((i * 5 + j * 3) % 11 - 5) / 2;
    for (int i = 0; i < 7; i++) p.bias.push_back((float)((i * 37) % 128 * 2 - 127) / 1024);
    return p;
}

/* A matmul as the test runs it: types, epilogue, bias type (-1: not set,
 * D's), alpha, beta. */
struct lt_case {
    cudaDataType_t in, out; /* A and B; C and D */
    uint32_t epilogue;
    int bias_type;
    float alpha, beta;
};

/* The bias vector's type in case c (BIAS_DATA_TYPE, else D's). */
static cudaDataType_t bias_type_of(const lt_case &c) {
    return c.bias_type < 0 ? c.out : (cudaDataType_t)c.bias_type;
}
/* The bias vector's elements in case c: one per row of D, or, for BGRADB
 * (sums of op(B)'s columns), one per column. */
static int bias_count(const lt_case &c, const lt_problem &p) {
    return c.epilogue == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m;
}

/* A matmul descriptor with case c's attributes (bias: the BIAS_POINTER, or
 * none when null) and the layouts of p's A, B and D (C's is D's). */
struct lt_op {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    lt_op(const lt_case &c, const lt_problem &p, void *bias) {
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        const int32_t ta = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        const int32_t bt = c.bias_type;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue,
                                       sizeof c.epilogue);
        if (bias)
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias);
        if (bt >= 0)
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                           sizeof bt);
        cublasLtMatrixLayoutCreate(&a, c.in, p.ra, p.ca, p.lda);
        cublasLtMatrixLayoutCreate(&b, c.in, p.rb, p.cb, p.ldb);
        cublasLtMatrixLayoutCreate(&d, c.out, p.m, p.n, p.ldd);
    }
    /* the descriptor and layouts go with the op */
    ~lt_op() {
        cublasLtMatrixLayoutDestroy(a);
        cublasLtMatrixLayoutDestroy(b);
        cublasLtMatrixLayoutDestroy(d);
        cublasLtMatmulDescDestroy(desc);
    }
    /* the heuristic for layouts A, B, C, D (null: this op's), with the
     * operands' alignment `align` bytes (0: the default, 256): its status;
     * *count and *r what it returned */
    cublasStatus_t heuristic(cublasLtHandle_t lt, int *count, cublasLtMatmulHeuristicResult_t *r,
                             cublasLtMatrixLayout_t la = nullptr,
                             cublasLtMatrixLayout_t lc = nullptr, uint32_t align = 0) const {
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulPreferenceCreate(&pref);
        const uint64_t ws = 1 << 20;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws);
        const int first = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
        for (int i = 0; i < 4 && align; i++) {
            const auto attr = (cublasLtMatmulPreferenceAttributes_t)(first + i);
            cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
        }
        const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
            lt, desc, la ? la : a, b, lc ? lc : d, d, pref, 1, r, count);
        cublasLtMatmulPreferenceDestroy(pref);
        return st;
    }
};

/* A device copy of h, queued on s. */
static void *upload(const bytes_t &h, cudaStream_t s) {
    void *d = nullptr;
    cudaMalloc(&d, h.size());
    cudaMemcpyAsync(d, h.data(), h.size(), cudaMemcpyHostToDevice, s);
    return d;
}

/* What D (gaps included) and the bias vector must hold after case c on p,
 * computed here: exact sums, then one conversion to the output's type. */
static void lt_expect(const lt_case &c, const lt_problem &p, bytes_t *d, bytes_t *bias) {
    *d = encode(p.c, c.out);
    for (int j = 0; j < p.n; j++)
        for (int i = 0; i < p.m; i++) {
            double sum = 0;
            for (int kk = 0; kk < p.k; kk++) sum += (double)p.op_a(i, kk) * p.op_b(kk, j);
            float r = (float)(c.alpha * sum + c.beta * (double)p.c[i + j * p.ldd]);
            if (c.epilogue == CUBLASLT_EPILOGUE_BIAS) r += p.bias[i];
            put(*d, i + (size_t)j * p.ldd, r, c.out);
        }
    const int count = bias_count(c, p);
    const bool grad_a = c.epilogue == CUBLASLT_EPILOGUE_BGRADA;
    *bias = encode(std::vector<float>(p.bias.begin(), p.bias.begin() + count), bias_type_of(c));
    if (!grad_a && c.epilogue != CUBLASLT_EPILOGUE_BGRADB) return;
    for (int r = 0; r < count; r++) {
        double sum = 0;
        for (int kk = 0; kk < p.k; kk++) sum += grad_a ? p.op_a(r, kk) : p.op_b(kk, r);
        put(*bias, r, (float)sum, bias_type_of(c));
    }
}

/* Case c on p, on stream s: the heuristic's one algorithm, cublasLtMatmul
 * with it in place on D, and, with the DEFAULT epilogue,
 * cublasGemmStridedBatchedEx of the same operands into a copy of C. True
 * when D and the bias vector hold lt_expect's bytes and the Ex call's D
 * D's. */
static bool lt_run(cublasLtHandle_t lt, cublasHandle_t h, cudaStream_t s, const lt_case &c,
                   const lt_problem &p) {
    const bool grad =
        c.epilogue == CUBLASLT_EPILOGUE_BGRADA || c.epilogue == CUBLASLT_EPILOGUE_BGRADB;
    const bytes_t hc = encode(p.c, c.out);
    bytes_t hbias = encode(p.bias, bias_type_of(c));
    if (grad) hbias = encode(std::vector<float>(p.bias.size(), 55.0f), bias_type_of(c));
    void *a = upload(encode(p.a, c.in), s), *b = upload(encode(p.b, c.in), s);
    void *d = upload(hc, s), *e = upload(hc, s), *bias = upload(hbias, s);
    lt_op o(c, p, bias);
    int count = 0;
    cublasLtMatmulHeuristicResult_t r;
    bool ok = o.heuristic(lt, &count, &r) == CUBLAS_STATUS_SUCCESS && count == 1 &&
              r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize == 0;
    ok &= cublasLtMatmul(lt, o.desc, &c.alpha, a, o.a, b, o.b, &c.beta, d, o.d, d, o.d, &r.algo,
                         nullptr, 0, s) == CUBLAS_STATUS_SUCCESS;
    if (c.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
        cublasSetStream(h, s);
        ok &= cublasGemmStridedBatchedEx(h, p.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         p.tb ? CUBLAS_OP_T : CUBLAS_OP_N, p.m, p.n, p.k, &c.alpha,
                                         a, c.in, p.lda, 0, b, c.in, p.ldb, 0, &c.beta, e, c.out,
                                         p.ldd, 0, 1, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
    }
    bytes_t want_d, want_bias, got_d(hc.size()), got_e(hc.size()), got_bias(hbias.size());
    lt_expect(c, p, &want_d, &want_bias);
    cudaMemcpyAsync(got_d.data(), d, got_d.size(), cudaMemcpyDeviceToHost, s);
    cudaMemcpyAsync(got_e.data(), e, got_e.size(), cudaMemcpyDeviceToHost, s);
    cudaMemcpyAsync(got_bias.data(), bias, got_bias.size(), cudaMemcpyDeviceToHost, s);
    ok &= cudaStreamSynchronize(s) == cudaSuccess && got_d == want_d &&
          !memcmp(got_bias.data(), want_bias.data(), want_bias.size());
    if (c.epilogue == CUBLASLT_EPILOGUE_DEFAULT) ok &= got_e == got_d;
    for (void *x : {a, b, d, e, bias}) cudaFree(x);
    return ok;
}

/* Every epilogue against the reference, for bf16 (from sm_80) and fp16
 * inputs, fp32 and 16-bit D, the four op combinations. */
void lt_numerics() {
    cublasLtHandle_t lt;
    cublasHandle_t h;
    cudaStream_t s = nullptr; /* stays null where a sticky error refuses it */
    cublasLtCreate(&lt);
    cublasCreate(&h);
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const struct {
        uint32_t epilogue;
        bool other_bias; /* BIAS_DATA_TYPE the type that is not D's */
        float alpha, beta;
        const char *what;
    } cfgs[] = {
        {CUBLASLT_EPILOGUE_DEFAULT, false, 1, 0,
         "DEFAULT, beta 0 (the bits of cublasGemmStridedBatchedEx)"},
        {CUBLASLT_EPILOGUE_DEFAULT, false, 0.5f, 1,
         "DEFAULT, alpha 0.5, beta 1 (accumulates onto C)"},
        {CUBLASLT_EPILOGUE_BIAS, false, 1, 1, "BIAS in D's type, beta 1"},
        {CUBLASLT_EPILOGUE_BIAS, true, 0.5f, 0, "BIAS in the other type (BIAS_DATA_TYPE)"},
        {CUBLASLT_EPILOGUE_BGRADA, false, 1, 1, "BGRADA in D's type"},
        {CUBLASLT_EPILOGUE_BGRADB, false, 1, 1, "BGRADB in D's type"},
        {CUBLASLT_EPILOGUE_BGRADB, true, 1, 0, "BGRADB in the other type (BIAS_DATA_TYPE)"},
    };
    for (cudaDataType_t in : {CUDA_R_16BF, CUDA_R_16F})
        for (cudaDataType_t out : {CUDA_R_32F, in})
            for (const auto &f : cfgs) {
                if (in == CUDA_R_16BF && cuemu::cfg().arch < 80) continue; /* lt_pose: refused */
                const int other = out == CUDA_R_32F ? in : CUDA_R_32F;
                const lt_case c = {in, out, f.epilogue, f.other_bias ? other : -1, f.alpha, f.beta};
                bool ok = true;
                for (int ops = 0; ops < 4; ops++)
                    ok &= lt_run(lt, h, s, c, make_problem(ops & 1, ops & 2, in == CUDA_R_16F));
                char what[200];
                snprintf(what, sizeof what,
                         "cublasLtMatmul %s -> %s, %s: the reference's bits, four op combinations",
                         in == CUDA_R_16BF ? "bf16" : "fp16", out == CUDA_R_32F ? "fp32" : "16-bit",
                         f.what);
                check(ok, what);
            }
    cudaStreamDestroy(s);
    cublasDestroy(h);
    cublasLtDestroy(lt);
}

/* Device buffers for the status checks: A, B, C, D and a bias vector, each
 * large enough for any of lt_problem's matrices in any type. */
struct lt_buffers {
    void *a, *b, *c, *d, *bias;
    /* the five allocations, 4 KiB each */
    lt_buffers() {
        for (void **p : {&a, &b, &c, &d, &bias}) cudaMalloc(p, 4096);
    }
    /* freed once the work queued on them has run */
    ~lt_buffers() {
        cudaStreamSynchronize(nullptr);
        for (void *p : {a, b, c, d, bias}) cudaFree(p);
    }
};

/* One matmul of op o on buffers x (C: c, D: x.d), its status. */
static cublasStatus_t lt_matmul(cublasLtHandle_t lt, const lt_op &o, const lt_buffers &x,
                                const void *c, cudaStream_t s = nullptr,
                                cublasLtMatrixLayout_t la = nullptr) {
    const float one = 1;
    return cublasLtMatmul(lt, o.desc, &one, x.a, la ? la : o.a, x.b, o.b, &one, c, o.d, x.d, o.d,
                          nullptr, nullptr, 0, s);
}

/* What the emulation does not run (fp32 inputs, a bias type neither fp32
 * nor A's, an epilogue it does not have, D of another 16-bit type than A):
 * NOT_SUPPORTED from the heuristic, with no algorithm, and from the matmul. */
static void lt_unsupported(cublasLtHandle_t lt, const lt_problem &p, const lt_buffers &x) {
    const lt_case cs[] = {
        {CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, -1, 1, 1},
        {CUDA_R_16F, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, CUDA_R_16BF, 1, 1},
        {CUDA_R_16F, CUDA_R_16F, 2 /* CUBLASLT_EPILOGUE_RELU */, -1, 1, 1},
        {CUDA_R_16F, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, -1, 1, 1},
    };
    bool ok = true;
    for (const lt_case &c : cs) {
        lt_op o(c, p, x.bias);
        int count = -1;
        cublasLtMatmulHeuristicResult_t r;
        ok &= o.heuristic(lt, &count, &r) == CUBLAS_STATUS_NOT_SUPPORTED && !count &&
              lt_matmul(lt, o, x, x.d) == CUBLAS_STATUS_NOT_SUPPORTED;
    }
    check(ok, "fp32 inputs, a bias type not fp32 nor A's, RELU, D bf16 of fp16: NOT_SUPPORTED");
}

/* bf16 matmuls: from sm_80 (an algorithm, and the matmul runs), else
 * NOT_SUPPORTED from the heuristic (no algorithm) and the matmul; fp16 on
 * every pose. */
static void lt_pose(cublasLtHandle_t lt, const lt_problem &p, const lt_buffers &x) {
    const bool bf16_ok = cuemu::cfg().arch >= 80;
    bool ok = true;
    for (cudaDataType_t in : {CUDA_R_16BF, CUDA_R_16F}) {
        const lt_case c = {in, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, -1, 1, 0};
        lt_op o(c, p, nullptr);
        const bool runs = in == CUDA_R_16F || bf16_ok;
        const cublasStatus_t want = runs ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
        int count = -1;
        cublasLtMatmulHeuristicResult_t r;
        ok &= o.heuristic(lt, &count, &r) == want && count == (runs ? 1 : 0) &&
              lt_matmul(lt, o, x, x.d) == want;
    }
    char what[160];
    snprintf(what, sizeof what, "sm_%d: bf16 matmuls %s; fp16 ones run", cuemu::cfg().arch,
             bf16_ok ? "run" : "NOT_SUPPORTED from the heuristic and the matmul");
    check(ok && cudaStreamSynchronize(nullptr) == cudaSuccess, what);
}

/* The heuristic's algorithm counts on the alignment the preference gives
 * (256 bytes by default): cublasLtMatmul with it refuses operands aligned
 * less (NOT_SUPPORTED), runs them with an algorithm chosen for them, or
 * with algo NULL. */
static void lt_alignment(cublasLtHandle_t lt, const lt_op &o, const lt_buffers &x) {
    const float one = 1;
    const char *a16 = (const char *)x.a + 16, *a2 = (const char *)x.a + 2; /* fp16 elements */
    int count = -1;
    cublasLtMatmulHeuristicResult_t r256, r16;
    bool ok = o.heuristic(lt, &count, &r256) == CUBLAS_STATUS_SUCCESS;
    ok &= o.heuristic(lt, &count, &r16, nullptr, nullptr, 16) == CUBLAS_STATUS_SUCCESS;
    const auto run = [&](const void *a, const cublasLtMatmulAlgo_t *algo) {
        return cublasLtMatmul(lt, o.desc, &one, a, o.a, x.b, o.b, &one, x.d, o.d, x.d, o.d, algo,
                              nullptr, 0, nullptr);
    };
    check(ok && run(x.a, &r256.algo) == CUBLAS_STATUS_SUCCESS &&
              run(a16, &r256.algo) == CUBLAS_STATUS_NOT_SUPPORTED &&
              run(a16, &r16.algo) == CUBLAS_STATUS_SUCCESS &&
              run(a2, &r16.algo) == CUBLAS_STATUS_NOT_SUPPORTED &&
              run(a2, nullptr) == CUBLAS_STATUS_SUCCESS &&
              cudaStreamSynchronize(nullptr) == cudaSuccess,
          "an algorithm counts on the preference's alignment: A aligned less, NOT_SUPPORTED");
}

/* A matmul is a node of a capture (it runs when the graph does); pushed into
 * an invalidated capture it fails, as the capture's kernels do, and so does
 * the capture's end. */
static void lt_capture(cublasLtHandle_t lt, const lt_op &o, const lt_buffers &x) {
    cudaStream_t s = nullptr; /* stays null where a sticky error refuses it */
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    bool ok = lt_matmul(lt, o, x, x.d, s) == CUBLAS_STATUS_SUCCESS &&
              cudaStreamEndCapture(s, &g) == cudaSuccess &&
              cudaGraphInstantiateWithFlags(&ge, g, 0) == cudaSuccess &&
              cudaGraphLaunch(ge, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
    check(ok, "a matmul on a capturing stream is captured, and runs in the graph");
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    std::vector<char> pageable(64);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    cudaMemcpyAsync(x.c, pageable.data(), pageable.size(), cudaMemcpyHostToDevice, s);
    ok = lt_matmul(lt, o, x, x.d, s) == CUBLAS_STATUS_EXECUTION_FAILED;
    g = nullptr;
    check(ok && cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && !g,
          "a matmul in an invalidated capture: EXECUTION_FAILED");
    (void)cudaGetLastError();
    cudaStreamDestroy(s);
}

/* SetAttribute's sizes, the heuristic's answer, inconsistent shapes, C not
 * D, a missing bias pointer, what is not emulated, an invalidated capture:
 * the statuses cuBLASLt returns. */
void lt_statuses() {
    cublasLtHandle_t lt;
    check(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate");
    const lt_problem p = make_problem(false, true);
    const lt_case c = {CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_BIAS, -1, 1, 1};
    lt_buffers x;
    lt_op o(c, p, x.bias), nobias(c, p, nullptr);
    const int64_t wide = 0;
    const int32_t narrow = 0;
    const uint64_t ws = 0;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    const auto set = [&](cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
        return cublasLtMatmulDescSetAttribute(o.desc, a, v, n) == CUBLAS_STATUS_INVALID_VALUE;
    };
    check(set(CUBLASLT_MATMUL_DESC_TRANSA, &wide, 8) &&
              set(CUBLASLT_MATMUL_DESC_EPILOGUE, &wide, 8) &&
              set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &narrow, 4) &&
              set(CUBLASLT_MATMUL_DESC_POINTER_MODE, &narrow, 4) &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &narrow, 4) == CUBLAS_STATUS_INVALID_VALUE &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, 8) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                   &ws, 8) == CUBLAS_STATUS_INVALID_VALUE,
          "cuBLASLt SetAttribute: a wrong size, or an attribute not emulated: INVALID_VALUE");
    cublasLtMatmulPreferenceDestroy(pref);
    int count = -1;
    cublasLtMatmulHeuristicResult_t r;
    check(o.heuristic(lt, &count, &r) == CUBLAS_STATUS_SUCCESS && count == 1 &&
              lt_matmul(lt, o, x, x.d) == CUBLAS_STATUS_SUCCESS,
          "a supported matmul: one algorithm, and it runs with algo NULL");
    cublasLtMatrixLayout_t k1, ld_short, c_ld;
    cublasLtMatrixLayoutCreate(&k1, CUDA_R_16F, p.ra, p.ca + 1, p.lda);
    cublasLtMatrixLayoutCreate(&ld_short, CUDA_R_16F, p.ra, p.ca, p.ra - 1);
    cublasLtMatrixLayoutCreate(&c_ld, CUDA_R_16F, p.m, p.n, p.ldd + 1);
    count = -1;
    bool bad = o.heuristic(lt, &count, &r, k1) == CUBLAS_STATUS_INVALID_VALUE && !count;
    count = -1;
    bad &= o.heuristic(lt, &count, &r, ld_short) == CUBLAS_STATUS_INVALID_VALUE && !count;
    check(bad && lt_matmul(lt, o, x, x.d, nullptr, k1) == CUBLAS_STATUS_INVALID_VALUE &&
              lt_matmul(lt, o, x, x.d, nullptr, ld_short) == CUBLAS_STATUS_INVALID_VALUE,
          "A's layout not op(A) m x k, or its ld under its rows: INVALID_VALUE, no algorithm");
    count = -1;
    check(lt_matmul(lt, o, x, x.c) == CUBLAS_STATUS_NOT_SUPPORTED &&
              o.heuristic(lt, &count, &r, nullptr, c_ld) == CUBLAS_STATUS_NOT_SUPPORTED && !count,
          "C not D (another pointer, another ld): NOT_SUPPORTED");
    check(lt_matmul(lt, nobias, x, x.d) == CUBLAS_STATUS_INVALID_VALUE,
          "the BIAS epilogue without BIAS_POINTER: INVALID_VALUE");
    for (cublasLtMatrixLayout_t l : {k1, ld_short, c_ld}) cublasLtMatrixLayoutDestroy(l);
    lt_unsupported(lt, p, x);
    lt_pose(lt, p, x);
    lt_alignment(lt, o, x);
    lt_capture(lt, o, x);
    cublasLtDestroy(lt);
}

/* ---- cuBLASLt checks in a process of their own ---- */

/* emu_selftest lt-sm70 (CUDA_EMU_ARCH=70): lt_pose on a pose without bf16. */
int lt_sm70() {
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    lt_buffers x;
    lt_pose(lt, make_problem(false, true), x);
    cublasLtDestroy(lt);
    return failures ? 1 : 0;
}

/* emu_selftest lt-bias-fault / lt-bias-overlap: a BIAS matmul whose bias
 * vector is a host array / lies in D: queued, reported, and the stream then
 * fails with an illegal address, as a GPU's (exit 0 when it does). */
int lt_bias_fault(bool overlap) {
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    static uint16_t host[16];
    const lt_case c = {CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_BIAS, -1, 1, 1};
    lt_buffers x;
    lt_op o(c, make_problem(false, true), overlap ? x.d : (void *)host);
    const cublasStatus_t st = lt_matmul(lt, o, x, x.d);
    const cudaError_t e = cudaStreamSynchronize(nullptr);
    const bool sticky = cudaGetLastError() == cudaErrorIllegalAddress &&
                        lt_matmul(lt, o, x, x.d) == CUBLAS_STATUS_EXECUTION_FAILED;
    printf("%s: queued (status %d), the stream %s%s\n",
           overlap ? "lt-bias-overlap" : "lt-bias-fault", (int)st,
           e == cudaErrorIllegalAddress ? "failed: illegal address" : "did not fail",
           sticky ? ", sticky" : ", not sticky");
    return st == CUBLAS_STATUS_SUCCESS && e == cudaErrorIllegalAddress && sticky ? 0 : 1;
}

/* emu_selftest lt-trace (CUDA_EMU_TRACE set): a BIAS matmul, then
 * cublasGemmStridedBatchedEx of its shape and types, for the trace. */
int lt_trace() {
    cublasLtHandle_t lt;
    cublasHandle_t h;
    cublasLtCreate(&lt);
    cublasCreate(&h);
    const lt_problem p = make_problem(false, true);
    const lt_case c = {CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_BIAS, -1, 1, 1};
    lt_buffers x;
    lt_op o(c, p, x.bias);
    const float one = 1;
    const bool ok =
        lt_matmul(lt, o, x, x.d) == CUBLAS_STATUS_SUCCESS &&
        cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, p.m, p.n, p.k, &one, x.a,
                                   CUDA_R_16F, p.lda, 0, x.b, CUDA_R_16F, p.ldb, 0, &one, x.c,
                                   CUDA_R_16F, p.ldd, 0, 1, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS &&
        cudaStreamSynchronize(nullptr) == cudaSuccess;
    cublasDestroy(h);
    cublasLtDestroy(lt);
    return ok ? 0 : 1;
}

/* This program again, as `env ENV emu_selftest CASE` (a pose or a trace a
 * process cannot change in itself, a fault that breaks its device): its
 * output, stdout and stderr, into *out; its exit status (-1: it did not
 * run, or did not end by exiting). */
static int run_self(const char *env, const char *arg, std::string *out) {
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    const std::string cmd = std::string("env ") + env + " '" + exe + "' " + arg + " 2>&1";
    FILE *f = popen(cmd.c_str(), "r");
    if (!f) return -1;
    char line[1024];
    while (fgets(line, sizeof line, f)) *out += line;
    const int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A child's case: exit 0 and `want` in its output (shown when not). */
static void child_check(const char *env, const char *arg, const char *want, const char *what) {
    std::string out;
    const bool ok = run_self(env, arg, &out) == 0 && out.find(want) != std::string::npos;
    if (!ok) printf("---- %s %s:\n%s----\n", env, arg, out.c_str());
    check(ok, what);
}

/* The cuBLASLt checks that need a process of their own: the sm_70 pose, the
 * bias vector's faults (they leave the device broken), the trace. */
void lt_children() {
    child_check("CUDA_EMU_ARCH=70", "lt-sm70",
                "cuda-emu: cublasLtMatmulAlgoGetHeuristic: bf16 operands on an sm_70 device",
                "(sm_70 child) bf16 matmuls: NOT_SUPPORTED, reported");
    child_check("", "lt-bias-fault", "cuda-emu: cublasLtMatmul: operand bias: ",
                "a bias vector outside the device's allocations: reported, the stream fails "
                "with an illegal address (sticky)");
    child_check("", "lt-bias-overlap",
                "cuda-emu: cublasLtMatmul: bias overlaps operand D (cuBLAS does not allow it)",
                "a bias vector in D: reported, the stream fails (sticky)");
    char path[] = "/tmp/emu_selftest_trace.XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) {
        check(false, "a trace file for lt-trace");
        return;
    }
    close(fd);
    const std::string env = std::string("CUDA_EMU_TRACE=") + path;
    child_check(env.c_str(), "lt-trace", "", "(trace child) a matmul and its Ex GEMM run");
    std::vector<std::string> gemms;
    FILE *f = fopen(path, "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "gemm ", 5)) gemms.push_back(line);
    if (f) fclose(f);
    unlink(path);
    check(gemms.size() == 2 && gemms[0] == gemms[1] && gemms[0] == "gemm fp16 5 7 9 1 630\n",
          "the trace counts a matmul's FLOPs as cublasGemmStridedBatchedEx's of its shape");
}
