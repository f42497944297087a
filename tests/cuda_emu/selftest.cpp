/* The emulated CUDA device's own checks: that it is faithful where bugs hide,
 * with small kernels of its own. tests/cuda-emu.sh runs it:
 *
 *   emu_selftest           the checks that return (each prints ok or FAIL)
 *   emu_selftest CASE      one that leaves the device broken, on its own:
 *     host-pointer         a kernel handed a host pointer: reported naming
 *                          the kernel, the sync fails (exit 0 when it does)
 *     read-past-end        a kernel reads one element past its buffer: the
 *                          process ends with a report naming the kernel
 *     host-touch           host code reads device memory: the same
 *     lt-sm70, lt-bias-fault, lt-bias-overlap, lt-trace
 *                          cuBLASLt checks that the run without CASE runs
 *                          in a process of their own (a pose, a broken
 *                          device, a trace)
 *
 * Each check compares what the emulation does with what a GPU does: launch
 * limits, pointer checks, stream order and waits between streams, races at
 * a missing barrier, divergent barriers, cuBLAS statuses and numerics. This
 * file holds those checks, the check counter and main(); the cuBLASLt
 * statuses and numerics are in selftest_lt.cpp (selftest.h: what the two
 * share). */
#include "selftest.h"
#include "emu.h"
#include "include/cublas_v2.h"

#include <cstdio>
#include <cstring>
#include <vector>

int failures = 0;

/* One check's line, ok or FAIL and what it checked; a failure counted for
 * the exit status. */
void check(bool ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

/* ---- kernels of the checks ---- */

/* out[i] = i over a grid that may be larger than n */
__global__ void write_index(int *out, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = i;
}

/* the sum of 256 values per block, with or without the first barrier */
__global__ void block_sum(float *out, const float *x, int with_barrier) {
    __shared__ float red[256];
    const int lid = (int)threadIdx.x;
    red[lid] = x[blockIdx.x * 256 + lid];
    if (with_barrier) __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        __syncthreads();
    }
    if (lid == 0) out[blockIdx.x] = red[0];
}

/* half the block returns before the barrier the other half waits at */
__global__ void divergent_barrier(float *out) {
    __shared__ float s[256];
    if (threadIdx.x >= 128) return;
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}

/* a block with more static __shared__ than a block may have: refused */
__global__ void big_shared(float *out) {
    __shared__ float s[13 * 1024]; /* 52 KiB: over the 48 KiB a block may have */
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}

/* out[0] = x[i], for an i past x's end */
__global__ void read_one(float *out, const float *x, int i) { out[0] = x[i]; }

/* per warp of 32: the sum of x by shuffles (down, then xor), and the ballot of
 * x > 0; `mask` for the shuffles (the full warp, or a wrong one) */
__global__ void warp_ops(float *sum_down, float *sum_xor, unsigned *ballot, const float *x,
                         unsigned mask) {
    __shared__ float one[1]; /* shared memory makes the block a team: warp operations need one */
    const int i = (int)threadIdx.x, lane = i % 32;
    if (i == 0) one[0] = 1.0f;
    __syncthreads();
    float v = x[i] * one[0], u = x[i];
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(mask, v, d);
    for (int m = 16; m > 0; m >>= 1) u += __shfl_xor_sync(0xffffffffu, u, m);
    const unsigned b = __ballot_sync(0xffffffffu, x[i] > 0.0f);
    __syncwarp(0xffffffffu);
    if (lane == 0) {
        sum_down[i / 32] = v;
        ballot[i / 32] = b;
    }
    sum_xor[i] = u;
}

/* ---- the checks ---- */

/* Launches past a GPU's limits (block size, grid y, an empty grid, shared
 * memory) are refused with its errors, and a valid one after them runs. */
static void launch_limits() {
    int *d;
    cudaMalloc((void **)&d, 4096);
    (void)cudaGetLastError();
    CUEMU_LAUNCH(write_index, 1, 1025, 0, nullptr, d, 1);
    check(cudaGetLastError() == cudaErrorInvalidConfiguration,
          "1025 threads per block: cudaErrorInvalidConfiguration");
    CUEMU_LAUNCH(write_index, dim3(1, 65536), 32, 0, nullptr, d, 1);
    check(cudaGetLastError() == cudaErrorInvalidConfiguration,
          "grid y 65536: cudaErrorInvalidConfiguration");
    CUEMU_LAUNCH(write_index, 0, 32, 0, nullptr, d, 1);
    check(cudaGetLastError() == cudaErrorInvalidConfiguration,
          "an empty grid: cudaErrorInvalidConfiguration");
    float *f = (float *)d;
    CUEMU_LAUNCH(big_shared, 1, 32, 0, nullptr, f);
    check(cudaGetLastError() == cudaErrorInvalidValue, "52 KiB of __shared__: refused");
    CUEMU_LAUNCH(write_index, 4, 256, 0, nullptr, d, 1000);
    check(cudaGetLastError() == cudaSuccess && cudaStreamSynchronize(nullptr) == cudaSuccess,
          "a valid launch after refused ones runs");
    std::vector<int> h(1000);
    cudaMemcpyAsync(h.data(), d, 4000, cudaMemcpyDeviceToHost, nullptr);
    cudaStreamSynchronize(nullptr);
    bool all = true;
    for (int i = 0; i < 1000; i++) all &= h[i] == i;
    check(all, "its grid covered every element");
    cudaFree(d);
}

/* out[i] += v for i under n: work whose order shows */
__global__ void add_value(int *out, int n, int v) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] += v;
}

/* A capture records without running; a launch runs the nodes in order; a
 * kernel node's update changes the next launch only; what a capture cannot
 * take invalidates it, and the work captured after fails. */
static void graphs() {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    int *d, *pinned;
    cudaMalloc((void **)&d, 256 * 4);
    cudaHostAlloc((void **)&pinned, 256 * 4, cudaHostAllocDefault);
    for (int i = 0; i < 256; i++) pinned[i] = 100;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    cudaMemcpyAsync(d, pinned, 256 * 4, cudaMemcpyHostToDevice, s);
    CUEMU_LAUNCH(add_value, 1, 256, 0, s, d, 256, 1);
    const cudaGraphNode_t *deps = nullptr;
    size_t n_deps = 0;
    cudaStreamCaptureStatus st;
    cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, nullptr, &n_deps);
    const cudaGraphNode_t add_node = n_deps == 1 ? deps[0] : nullptr;
    CUEMU_LAUNCH(add_value, 1, 256, 0, s, d, 256, 10);
    cudaGraph_t g = nullptr;
    check(cudaStreamEndCapture(s, &g) == cudaSuccess && g && st == cudaStreamCaptureStatusActive &&
              add_node,
          "a capture makes a graph, and names its last node");
    cudaGraphExec_t x = nullptr;
    cudaGraphInstantiateWithFlags(&x, g, 0);
    std::vector<int> h(256, 0);
    cudaMemcpyAsync(h.data(), d, 4, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    check(h[0] != 111, "captured work does not run");
    cudaGraphLaunch(x, s);
    pinned[0] = 200; /* read when the graph's copy runs */
    cudaMemcpyAsync(h.data(), d, 256 * 4, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    check(h[0] == 211 && h[255] == 111, "a launch copies from page-locked memory and runs the kernels in order");
    int v = 5;
    int n = 256;
    void *params[] = {&d, &n, &v};
    cudaKernelNodeParams p = {(void *)add_value, dim3(1), dim3(256), 0, params, nullptr};
    cudaGraphLaunch(x, s);
    check(cudaGraphExecKernelNodeSetParams(x, add_node, &p) == cudaSuccess,
          "a kernel node takes new arguments");
    cudaMemcpyAsync(h.data(), d, 256 * 4, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    check(h[0] == 211 && h[1] == 111, "an update does not change a launch queued before it");
    cudaGraphLaunch(x, s);
    cudaMemcpyAsync(h.data(), d, 256 * 4, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    check(h[0] == 215 && h[1] == 115, "the next launch runs with them");
    p.func = (void *)write_index;
    check(cudaGraphExecKernelNodeSetParams(x, add_node, &p) != cudaSuccess,
          "a kernel node refuses another kernel");
    (void)cudaGetLastError();
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    std::vector<int> pageable(256, 1);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    const cudaError_t refused = cudaMemcpyAsync(d, pageable.data(), 256 * 4,
                                                cudaMemcpyHostToDevice, s);
    g = nullptr;
    /* work pushed into the invalidated capture fails, as CUDA fails it */
    const cudaError_t copy_after = cudaMemcpyAsync(d, pinned, 4, cudaMemcpyHostToDevice, s);
    (void)cudaGetLastError();
    CUEMU_LAUNCH(add_value, 1, 256, 0, s, d, 256, 1);
    const cudaError_t launch_after = cudaGetLastError();
    check(refused != cudaSuccess && copy_after == cudaErrorStreamCaptureInvalidated &&
              launch_after == cudaErrorStreamCaptureInvalidated &&
              cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && !g,
          "a copy from pageable memory invalidates a capture, and the work after it fails");
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    const cudaError_t sync = cudaStreamSynchronize(s);
    const cudaError_t freed = cudaFree(d);
    check(sync != cudaSuccess && freed != cudaSuccess &&
              cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated,
          "a host wait and cudaFree invalidate a capture");
    (void)cudaGetLastError();
    cudaFree(d);
    cudaFreeHost(pinned);
    cudaStreamDestroy(s);
}

/* A stream forked into a capture by an event adds its work to the graph; an
 * external record there becomes a node that each launch records; a fork not
 * joined back fails the capture. */
static void graph_forks() {
    cudaStream_t s, side;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaEvent_t fork, join, arrived;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&arrived, cudaEventDisableTiming);
    int *d, *pinned;
    cudaMalloc((void **)&d, 256 * 4);
    cudaHostAlloc((void **)&pinned, 256 * 4, cudaHostAllocDefault);
    CUEMU_LAUNCH(write_index, 1, 256, 0, s, d, 256);
    cudaStreamSynchronize(s);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    CUEMU_LAUNCH(add_value, 1, 256, 0, s, d, 256, 1);
    cudaEventRecord(fork, s);
    const cudaError_t forked = cudaStreamWaitEvent(side, fork, 0);
    cudaMemcpyAsync(pinned, d, 256 * 4, cudaMemcpyDeviceToHost, side);
    const cudaError_t external = cudaEventRecordWithFlags(arrived, side, cudaEventRecordExternal);
    CUEMU_LAUNCH(add_value, 1, 256, 0, s, d, 256, 1000);
    cudaEventRecord(join, side);
    cudaStreamWaitEvent(s, join, 0);
    cudaGraph_t g = nullptr;
    check(forked == cudaSuccess && external == cudaSuccess &&
              cudaStreamEndCapture(s, &g) == cudaSuccess && g,
          "a stream forked into a capture, with an external event record, joined back");
    cudaGraphExec_t x = nullptr;
    cudaGraphInstantiateWithFlags(&x, g, 0);
    cudaGraphLaunch(x, s);
    check(cudaEventQuery(arrived) == cudaErrorNotReady, "a launch records the event node's event");
    (void)cudaGetLastError();
    cudaEventSynchronize(arrived);
    check(pinned[0] == 1 && pinned[255] == 256,
          "the forked copy ran after the work before the fork, before the work after it");
    cudaStreamSynchronize(s);
    cudaGraphLaunch(x, s);
    check(cudaEventQuery(arrived) == cudaErrorNotReady, "each launch records it again");
    (void)cudaGetLastError();
    cudaStreamSynchronize(s);
    check(cudaEventQuery(arrived) == cudaSuccess && pinned[0] == 1002,
          "and reaches it with the launch's copy");
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    cudaEventRecord(fork, s);
    cudaStreamWaitEvent(side, fork, 0);
    cudaMemcpyAsync(pinned, d, 256 * 4, cudaMemcpyDeviceToHost, side);
    g = nullptr;
    check(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureUnjoined && !g,
          "a capture whose forked stream is not joined back fails");
    (void)cudaGetLastError();
    (void)cudaGetLastError(); /* a null status: refused */
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
    cudaStreamIsCapturing(side, &st);
    check(st == cudaStreamCaptureStatusNone, "and the forked stream leaves it");
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cudaEventDestroy(arrived);
    cudaFree(d);
    cudaFreeHost(pinned);
    cudaStreamDestroy(side);
    cudaStreamDestroy(s);
}

/* Work on a stream runs at its sync, in order: an async download read before
 * it sees the old bytes. New device memory holds NaN bytes: cudaMalloc does
 * not zero it, and a program that counts on zeros must fail here too. */
static void stream_order() {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    int *d;
    cudaMalloc((void **)&d, 1024 * 4);
    std::vector<int> h(1024, -7);
    CUEMU_LAUNCH(write_index, 4, 256, 0, s, d, 1024);
    cudaMemcpyAsync(h.data(), d, 1024 * 4, cudaMemcpyDeviceToHost, s);
    check(h[5] == -7, "an async download read before the sync sees the old bytes");
    cudaStreamSynchronize(s);
    check(h[5] == 5 && h[1023] == 1023, "after cudaStreamSynchronize it sees the kernel's");
    std::vector<unsigned char> fresh(16);
    int *e;
    cudaMalloc((void **)&e, 16);
    cudaMemcpyAsync(fresh.data(), e, 16, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    check(fresh[0] == 0xFF && fresh[15] == 0xFF, "new device memory holds NaN bytes, not zeros");
    cudaFree(e);
    cudaFree(d);
    cudaStreamDestroy(s);
}

/* A copy on stream b after b waits on an event of stream a: it sees a's work
 * before the record. The emulation then runs a no further (one order a GPU
 * may take): a program that recorded its event before the work it needed
 * would read the old bytes. */
static void stream_wait() {
    cudaStream_t a, b;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    int *d, *h;
    cudaMalloc((void **)&d, 1024 * 4);
    cudaHostAlloc((void **)&h, 1024 * 4, cudaHostAllocDefault);
    for (int i = 0; i < 1024; i++) h[i] = -7;
    CUEMU_LAUNCH(write_index, 4, 256, 0, a, d, 1024);
    cudaEventRecord(ev, a);
    cudaMemsetAsync(d, 0, 1024 * 4, a); /* after the record */
    check(cudaStreamWaitEvent(b, ev, 0) == cudaSuccess, "cudaStreamWaitEvent returns success");
    cudaMemcpyAsync(h, d, 1024 * 4, cudaMemcpyDeviceToHost, b);
    check(h[5] == -7 && cudaEventQuery(ev) == cudaErrorNotReady,
          "nothing runs at the wait's call (the event not reached)");
    cudaStreamSynchronize(b);
    check(h[5] == 5 && h[1023] == 1023 && cudaEventQuery(ev) == cudaSuccess,
          "synchronising the waiting stream runs the other up to its record first");
    cudaStreamSynchronize(a);
    cudaMemcpyAsync(h, d, 1024 * 4, cudaMemcpyDeviceToHost, a);
    cudaStreamSynchronize(a);
    check(h[5] == 0, "the recording stream's work after the record still runs, in order");
    cudaEventDestroy(ev);
    cudaFreeHost(h);
    cudaFree(d);
    cudaStreamDestroy(b);
    cudaStreamDestroy(a);
}

/* Copies a GPU refuses: past an allocation's end, between overlapping device
 * ranges. */
static void pointer_checks() {
    float *d;
    cudaMalloc((void **)&d, 256 * 4);
    float host[256];
    check(cudaMemcpyAsync(d, host, 257 * 4, cudaMemcpyHostToDevice, nullptr) ==
              cudaErrorInvalidValue,
          "a copy one element past the allocation: cudaErrorInvalidValue");
    check(cudaMemcpyAsync(d, d + 1, 8, cudaMemcpyDeviceToDevice, nullptr) == cudaErrorInvalidValue,
          "a copy between overlapping device ranges: cudaErrorInvalidValue");
    (void)cudaGetLastError();
}

/* A block reduction is exact with its barriers; without the first, most
 * blocks read stale shared memory (the emulation's thread orders show it). */
static void races() {
    const int blocks = 64;
    float *x, *out;
    cudaMalloc((void **)&x, blocks * 256 * 4);
    cudaMalloc((void **)&out, blocks * 4);
    std::vector<float> h(blocks * 256), r(blocks);
    for (int i = 0; i < blocks * 256; i++) h[i] = (float)(i % 97) - 40.0f;
    cudaMemcpyAsync(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice, nullptr);
    double want[64] = {0};
    for (int b = 0; b < blocks; b++)
        for (int i = 0; i < 256; i++) want[b] += h[b * 256 + i];
    for (int barrier = 1; barrier >= 0; barrier--) {
        CUEMU_LAUNCH(block_sum, blocks, 256, 0, nullptr, out, (const float *)x, barrier);
        cudaMemcpyAsync(r.data(), out, blocks * 4, cudaMemcpyDeviceToHost, nullptr);
        cudaStreamSynchronize(nullptr);
        int wrong = 0;
        for (int b = 0; b < blocks; b++) wrong += r[b] != (float)want[b];
        if (barrier)
            check(wrong == 0, "a block reduction with its barriers is exact");
        else
            check(wrong > blocks / 2, "without the first barrier most blocks sum stale values");
    }
    cudaFree(x);
    cudaFree(out);
}

/* A barrier half the block never reaches fails the launch, stickily. */
static void divergence() {
    float *d;
    cudaMalloc((void **)&d, 256 * 4);
    CUEMU_LAUNCH(divergent_barrier, 1, 256, 0, nullptr, d);
    check(cudaStreamSynchronize(nullptr) == cudaErrorLaunchFailure,
          "a barrier half the block never reaches: the launch fails (sticky)");
    check(cudaGetLastError() == cudaErrorLaunchFailure, "and every later call says so");
}

/* cuBLAS: invalid shapes refused, SGEMM column-major, TF32 rounding, bf16
 * from sm_80 only. */
static void gemm_checks() {
    cublasHandle_t h;
    cublasCreate(&h);
    float *a, *b, *c;
    cudaMalloc((void **)&a, 64 * 4);
    cudaMalloc((void **)&b, 64 * 4);
    cudaMalloc((void **)&c, 64 * 4);
    const float one = 1, zero = 0;
    check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 3, 0, b, 4, 0,
                                    &zero, c, 4, 0, 1) == CUBLAS_STATUS_INVALID_VALUE,
          "lda 3 for 4 rows: CUBLAS_STATUS_INVALID_VALUE");
    check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, -1, &one, a, 4, 0, b, 4, 0,
                                    &zero, c, 4, 0, 1) == CUBLAS_STATUS_INVALID_VALUE,
          "k = -1: CUBLAS_STATUS_INVALID_VALUE");
    /* column-major: C (2x2) = A (2x3) B (3x2) with A = [1 2 3; 4 5 6] stored by columns */
    const float A[6] = {1, 4, 2, 5, 3, 6}, B[6] = {1, 0, 1, 0, 1, 1}, tiny = 1.0f + 0x1p-20f;
    cudaMemcpyAsync(a, A, sizeof A, cudaMemcpyHostToDevice, nullptr);
    cudaMemcpyAsync(b, B, sizeof B, cudaMemcpyHostToDevice, nullptr);
    cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a, 2, 0, b, 3, 0, &zero,
                              c, 2, 0, 1);
    float C[4];
    cudaMemcpyAsync(C, c, sizeof C, cudaMemcpyDeviceToHost, nullptr);
    cudaStreamSynchronize(nullptr);
    check(C[0] == 4 && C[1] == 10 && C[2] == 5 && C[3] == 11, "SGEMM is column-major");
    cudaMemcpyAsync(a, &tiny, 4, cudaMemcpyHostToDevice, nullptr);
    cudaMemcpyAsync(b, &one, 4, cudaMemcpyHostToDevice, nullptr);
    cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
    cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a, 1, 0, b, 1, 0, &zero,
                              c, 1, 0, 1);
    cudaMemcpyAsync(C, c, 4, cudaMemcpyDeviceToHost, nullptr);
    cudaStreamSynchronize(nullptr);
    check(C[0] == 1.0f, "TF32 math rounds 1 + 2^-20 to 1 (10 mantissa bits)");
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
    const cublasStatus_t st = cublasGemmStridedBatchedEx(
        h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a, CUDA_R_16BF, 1, 0, b, CUDA_R_16BF, 1, 0,
        &zero, c, CUDA_R_32F, 1, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    check(st == (cuemu::cfg().arch >= 80 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED),
          "bf16 GEMMs: supported from sm_80, CUBLAS_STATUS_NOT_SUPPORTED below");
    cudaStreamSynchronize(nullptr);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cublasDestroy(h);
}

/* ---- the checks that leave the device broken ---- */

/* emu_selftest host-pointer: a kernel handed a host pointer fails its sync
 * with an illegal address (exit 0 when it does). */
static int host_pointer() {
    int host[32];
    CUEMU_LAUNCH(write_index, 1, 32, 0, nullptr, host, 32);
    const cudaError_t e = cudaStreamSynchronize(nullptr);
    check(e == cudaErrorIllegalAddress, "a host pointer in a kernel: cudaErrorIllegalAddress");
    return failures ? 1 : 0;
}

/* emu_selftest read-past-end: a read one element past a buffer; the guard
 * page ends the process with a report (returning is the failure). */
static int read_past_end() {
    float *x, *out;
    cudaMalloc((void **)&x, 1024 * 4); /* a whole number of pages: the guard page follows */
    cudaMalloc((void **)&out, 4);
    CUEMU_LAUNCH(read_one, 1, 1, 0, nullptr, out, (const float *)x, 1024);
    cudaStreamSynchronize(nullptr);
    printf("read-past-end: not caught\n");
    return 0;
}

/* Warp operations over 64 threads (two warps): sums and ballots exact; with
 * mask `wrong`, a failed launch instead (reported by the emulation). */
static int warps(unsigned mask) {
    float hx[64], *x, *down, *xr;
    unsigned *bal;
    for (int i = 0; i < 64; i++) hx[i] = (float)((i * 7) % 13) - 4.0f;
    cudaMalloc((void **)&x, sizeof hx);
    cudaMalloc((void **)&down, 2 * 4);
    cudaMalloc((void **)&xr, 64 * 4);
    cudaMalloc((void **)&bal, 2 * 4);
    cudaMemcpyAsync(x, hx, sizeof hx, cudaMemcpyHostToDevice, nullptr);
    CUEMU_LAUNCH(warp_ops, 1, 64, 0, nullptr, down, xr, bal, (const float *)x, mask);
    const cudaError_t e = cudaStreamSynchronize(nullptr);
    if (mask != 0xffffffffu) {
        printf("warp-mask: the launch %s\n", e == cudaSuccess ? "succeeded: not caught" : "failed");
        return e == cudaSuccess ? 0 : 1;
    }
    float hd[2], hxr[64];
    unsigned hb[2];
    cudaMemcpyAsync(hd, down, sizeof hd, cudaMemcpyDeviceToHost, nullptr);
    cudaMemcpyAsync(hxr, xr, sizeof hxr, cudaMemcpyDeviceToHost, nullptr);
    cudaMemcpyAsync(hb, bal, sizeof hb, cudaMemcpyDeviceToHost, nullptr);
    cudaStreamSynchronize(nullptr);
    for (int w = 0; w < 2; w++) {
        float sum = 0;
        unsigned b = 0;
        for (int l = 0; l < 32; l++) {
            sum += hx[w * 32 + l];
            b |= (unsigned)(hx[w * 32 + l] > 0.0f) << l;
        }
        bool xor_ok = true;
        for (int l = 0; l < 32; l++) xor_ok &= hxr[w * 32 + l] == sum;
        check(e == cudaSuccess && hd[w] == sum, "a warp's sum by __shfl_down_sync (small integers: exact)");
        check(e == cudaSuccess && xor_ok, "every lane's sum by __shfl_xor_sync");
        check(e == cudaSuccess && hb[w] == b, "__ballot_sync");
    }
    cudaFree(x);
    cudaFree(down);
    cudaFree(xr);
    cudaFree(bal);
    return 0;
}

/* A GEMM whose C is its A, which cuBLAS does not allow: reported, and the
 * device then fails as with an illegal address. */
static int gemm_overlap() {
    cublasHandle_t h;
    cublasCreate(&h);
    float *a, *b;
    cudaMalloc((void **)&a, 16 * 4);
    cudaMalloc((void **)&b, 16 * 4);
    const float one = 1, zero = 0;
    cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, 0, b, 4, 0, &zero,
                              a, 4, 0, 1);
    const cudaError_t e = cudaStreamSynchronize(nullptr);
    printf("gemm-overlap: %s\n", e == cudaSuccess ? "not caught" : "the stream failed");
    return e == cudaSuccess ? 0 : 1;
}

/* emu_selftest host-touch: host code reads device memory; the process ends
 * with a report (returning is the failure). */
static int host_touch() {
    float *x;
    cudaMalloc((void **)&x, 64);
    volatile float v = x[3];
    (void)v;
    printf("host-touch: not caught\n");
    return 0;
}

/* With a CASE, that case alone (it leaves the device broken, or poses as
 * another one); without, every check that returns, and the count failed. */
int main(int argc, char **argv) {
    int n;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        fprintf(stderr, "emu_selftest: no emulated device (CUDA_EMU_DEVICES=0?)\n");
        return 77;
    }
    if (argc == 2 && !strcmp(argv[1], "host-pointer")) return host_pointer();
    if (argc == 2 && !strcmp(argv[1], "read-past-end")) return read_past_end();
    if (argc == 2 && !strcmp(argv[1], "host-touch")) return host_touch();
    if (argc == 2 && !strcmp(argv[1], "warp-mask")) return warps(0x0000ffffu);
    if (argc == 2 && !strcmp(argv[1], "gemm-overlap")) return gemm_overlap();
    if (argc == 2 && !strcmp(argv[1], "lt-sm70")) return lt_sm70();
    if (argc == 2 && !strcmp(argv[1], "lt-bias-fault")) return lt_bias_fault(false);
    if (argc == 2 && !strcmp(argv[1], "lt-bias-overlap")) return lt_bias_fault(true);
    if (argc == 2 && !strcmp(argv[1], "lt-trace")) return lt_trace();
    if (argc != 1) {
        fprintf(stderr, "usage: emu_selftest [host-pointer | read-past-end | host-touch | warp-mask "
                        "| gemm-overlap | lt-sm70 | lt-bias-fault | lt-bias-overlap | lt-trace]\n");
        return 2;
    }
    launch_limits();
    stream_order();
    stream_wait();
    pointer_checks();
    races();
    gemm_checks();
    lt_numerics();
    lt_statuses();
    lt_children();
    warps(0xffffffffu);
    graphs();
    graph_forks();
    divergence(); /* last: it leaves the device with a sticky error */
    printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
