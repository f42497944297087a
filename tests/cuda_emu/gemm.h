/* The emulated GEMM that cublas.cpp (cuBLAS) and cublas_lt.cpp (cuBLASLt)
 * share: one call as it is queued, its element access, its type checks, and
 * its queueing with the checks a GPU faults on. Internal to tests/cuda_emu. */
#ifndef CUEMU_GEMM_H
#define CUEMU_GEMM_H

#include "emu.h"
#include "include/cublas_v2.h"

#include <vector>

namespace cuemu {

/* What a call does after the product, before C is written: cuBLASLt's
 * epilogues (cublas_lt.cpp); cuBLAS's calls have none. */
enum gemm_epilogue { EPI_NONE, EPI_BIAS, EPI_BGRADA, EPI_BGRADB };

/* One GEMM as queued: column-major, C (m x n) = alpha op(A) op(B) + beta C. */
struct gemm_call {
    const char *name;
    bool ta, tb;
    int m, n, k, lda, ldb, ldc, batch;
    long long sa, sb, sc;
    float alpha, beta;
    const void *A, *B;
    void *C;
    cudaDataType_t type; /* of A and B */
    bool tf32;
    /* cublasGemmBatchedEx: device arrays of batch matrix addresses (A, B and C
     * above unused, sa, sb, sc 0), else NULL */
    const void *const *Aarr, *const *Barr;
    void *const *Carr;
    cudaDataType_t ctype; /* of C: fp32, or A's 16-bit type */
    /* the epilogue (batch 1, no address arrays): EPI_BIAS adds bias[row] to
     * C's fp32 result before C's conversion; EPI_BGRADA / EPI_BGRADB write
     * over bias the sums of op(A)'s rows / op(B)'s columns (bias_elems) */
    gemm_epilogue epilogue = EPI_NONE;
    void *bias = nullptr;
    cudaDataType_t bias_type = CUDA_R_32F;
    const char *c_name = "C"; /* C in reports (cuBLASLt writes it as D) */
};

/* The bias vector's elements: one per row of C, or per column for BGRADB. */
inline int bias_elems(const gemm_call &g) {
    return g.epilogue == EPI_NONE ? 0 : g.epilogue == EPI_BGRADB ? g.n : g.m;
}

/* ---- cublas.cpp ---- */
/* Bytes of one element of t (fp32, or a 16-bit type). */
size_t type_bytes(cudaDataType_t t);
/* Element i of p (type t) as fp32: 16-bit values widened exactly. */
float widen(const void *p, size_t i, cudaDataType_t t);
/* Element i of p (type t) set to v, converted nearest even to a 16-bit t. */
void store(void *p, size_t i, float v, cudaDataType_t t);
/* A cuBLAS or cuBLASLt handle's creation: OpenBLAS held to one thread,
 * false when no device can take the handle (a sticky error, no device). */
bool blas_device_ready();
/* The types of a GEMM (A, B, C, compute) as cuBLAS checks them, whatever the
 * call: reported and CUBLAS_STATUS_NOT_SUPPORTED when a GPU of the posed
 * architecture has no such GEMM (bf16 before sm_80). */
cublasStatus_t check_gemm_types(const char *name, cudaDataType_t Atype, cudaDataType_t Btype,
                                cudaDataType_t Ctype, cublasComputeType_t computeType);
/* g queued on stream st (nullptr: the legacy default stream) of `device`,
 * for a handle of that device: the checks of every GEMM (shapes, the sticky
 * error, the current device, an invalidated capture), the operands' spans
 * checked as a GPU faults (a fault then fails the stream when it runs), the
 * trace line when it runs. */
cublasStatus_t queue_gemm_on(int device, cudaStream_t st, const gemm_call &g);

/* ---- cublas_lt.cpp: the epilogues, run by run_gemm ---- */
/* EPI_BIAS: bias[row] added to C's fp32 result C32 (leading dimension ldc). */
void epilogue_bias(const gemm_call &g, float *C32);
/* EPI_BGRADA / EPI_BGRADB: the sums over k written to bias. */
void epilogue_bias_grad(const gemm_call &g);

}  // namespace cuemu

#endif
