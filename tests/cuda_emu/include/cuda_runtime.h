/* The CUDA runtime as the emulated device (tests/cuda_emu) provides it, for
 * compiling the .cu files of backends/cuda and kernels_cu with g++ as host C++.
 *
 * Only what those files use is declared: a runtime call the backend starts
 * to use fails to compile (or link) here until it is emulated. The values of
 * the enums are the CUDA toolkit's, so messages and statuses read the same.
 *
 * Device code: __global__ and __device__ functions become host functions;
 * threadIdx, blockIdx, blockDim and gridDim are the running emulated thread's;
 * __shared__ variables are shared by the threads of a block (one block runs on
 * an OS thread at a time, its threads as fibers); __syncthreads() is a
 * barrier of the block's team. Launches go through CUEMU_LAUNCH, which
 * backends/cuda/cuda_internal.h's BT_KERNEL_LAUNCH uses in place of <<<>>>. */
#ifndef CUEMU_CUDA_RUNTIME_H
#define CUEMU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

/* ---- types ---- */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorStubLibrary = 34,
    cudaErrorInsufficientDriver = 35,
    cudaErrorSetOnActiveProcess = 36,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorInvalidPtx = 218,
    cudaErrorUnsupportedPtxVersion = 222,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorGraphExecUpdateFailure = 910,
} cudaError_t;

/* The toolkit whose graph calls this device takes (CUDA 13's
 * cudaStreamGetCaptureInfo, with edge data). */
#define CUDART_VERSION 13000

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

/* how a host thread waits for the device (cudaSetDeviceFlags) */
#define cudaDeviceScheduleAuto 0x00
#define cudaDeviceScheduleSpin 0x01
#define cudaDeviceScheduleYield 0x02
#define cudaDeviceScheduleBlockingSync 0x04
#define cudaDeviceScheduleMask 0x07

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

#define cudaHostAllocDefault 0x00
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;
struct cudaKernelNodeParams; /* after the device code's names (gridDim ...) */

/* Stream capture: the work issued on a capturing stream becomes a graph's
 * nodes instead of running (graph.cpp). */
typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;
typedef enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
} cudaStreamCaptureStatus;
typedef struct cudaGraphEdgeData_st {
    unsigned char from_port, to_port, type, reserved[5];
} cudaGraphEdgeData;

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
};

/* The fields the backend reads, and the limits a launch is checked against. */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int maxThreadsPerBlock;
    int maxGridSize[3];
    int major, minor;
    int multiProcessorCount;
    int pciDomainID, pciBusID, pciDeviceID;
};

/* ---- the runtime calls the backend makes (C linkage, as the toolkit's) ---- */

extern "C" {
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaSetDeviceFlags(unsigned int flags);
cudaError_t cudaGetDeviceFlags(unsigned int *flags);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorName(cudaError_t error);
const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
/* cudaEventRecordWithFlags: a capture makes an event record node of an
 * external record; a plain one only orders streams (fork and join) */
#define cudaEventRecordDefault 0x00
#define cudaEventRecordExternal 0x01
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status);
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus *status,
                                     unsigned long long *id, cudaGraph_t *graph,
                                     const cudaGraphNode_t **dependencies,
                                     const cudaGraphEdgeData **edge_data, size_t *n_dependencies);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                          unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                             const cudaKernelNodeParams *params);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
}

/* ---- device code ---- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* one instance per OS thread, which runs one block at a time */
#define __shared__ static thread_local

extern thread_local dim3 cuemu_thread_idx, cuemu_block_idx, cuemu_block_dim, cuemu_grid_dim;
#define threadIdx cuemu_thread_idx
#define blockIdx cuemu_block_idx
#define blockDim cuemu_block_dim
#define gridDim cuemu_grid_dim

/* A kernel written for 1-D blocks of `threads` (kernels/dialect_cuda.cuh's
 * get_global_id and friends, with BT_WG) asks at each use: any other launch
 * geometry is reported, naming the kernel and file:line, and aborts. */
void cuemu_check_block(unsigned threads, const char *file, int line);

/* Warp operations (launch.cpp's cuemu_warp_op): the lanes of the mask meet,
 * their masks and places checked; width is always 32 here. */
unsigned long long cuemu_warp_op(int kind, unsigned mask, unsigned long long value, int arg,
                                 const char *file, int line);
namespace cuemu {
template <typename T>
T warp_value(int kind, unsigned mask, T v, int arg, const char *file, int line) {
    static_assert(sizeof(T) <= 8, "a warp operation on more than 8 bytes");
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = cuemu_warp_op(kind, mask, bits, arg, file, line);
    T out;
    memcpy(&out, &bits, sizeof out);
    return out;
}
}  // namespace cuemu
#define __shfl_sync(mask, v, src) cuemu::warp_value(0, mask, v, (int)(src), __FILE__, __LINE__)
#define __shfl_down_sync(mask, v, d) cuemu::warp_value(1, mask, v, (int)(d), __FILE__, __LINE__)
#define __shfl_up_sync(mask, v, d) cuemu::warp_value(2, mask, v, (int)(d), __FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, m) cuemu::warp_value(3, mask, v, (int)(m), __FILE__, __LINE__)
#define __ballot_sync(mask, pred) \
    ((unsigned)cuemu_warp_op(4, mask, (pred) ? 1ull : 0ull, 0, __FILE__, __LINE__))
#define __syncwarp(mask) ((void)cuemu_warp_op(5, mask, 0, 0, __FILE__, __LINE__))

/* The barrier of the running block: every thread of it must reach it. */
void cuemu_syncthreads(const char *file, int line);
#define __syncthreads() cuemu_syncthreads(__FILE__, __LINE__)

inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int)(((unsigned long long)a * b) >> 32);
}
inline float __uint_as_float(unsigned int u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- launches ---- */

/* A kernel node's launch: the kernel, its geometry, and one pointer to
 * each parameter's value (declared here: gridDim and blockDim are
 * the device code's names above). */
struct cudaKernelNodeParams {
    void *func;
    dim3 gridDim, blockDim;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
};


namespace cuemu {

/* One launch as the runtime sees it: the kernel, its geometry, and how to
 * run its body for the current emulated thread with the arguments it was
 * launched with. */
struct kernel_launch {
    const char *name;              /* as written at the launch */
    void (*kernel)();              /* the kernel's address (its type erased) */
    dim3 grid, block;
    size_t dynamic_shared;
    void (*run)(void (*kernel)(), const void *args); /* the body, for one thread */
    void *args;                    /* owned: a std::tuple of the parameters */
    void (*free_args)(void *args);
    const void *const *pointers;   /* the pointer arguments, for the launch checks */
    int n_pointers;
    void *(*make_args)(void *const *params); /* new arguments from a kernel node's */
    int (*pointers_of)(const void *args, const void **out); /* args' pointer arguments */
};

/* Check the launch (limits, pointer arguments, code for the device's
 * architecture) and queue it on stream, as a <<<>>> launch does; errors go
 * where cudaGetLastError finds them. Takes ownership of l.args. */
void enqueue_kernel(const kernel_launch &l, cudaStream_t stream);

/* What the emulated binary holds code for, as configure's list for a real
 * build ("sm_70 sm_80 sm_90"; CUDA_EMU_BUILT_FOR); backends/cuda/cuda_internal.h's
 * BT_CUDA_BUILT_FOR takes it through CUEMU_BUILT_FOR. */
const char *built_for();

template <typename... P> struct launcher {
    typedef std::tuple<typename std::decay<P>::type...> args_t;
    static void run(void (*k)(), const void *a) {
        std::apply((void (*)(P...))k, *(const args_t *)a);
    }
    static void free_args(void *a) { delete (args_t *)a; }
    /* a copy of the arguments from one pointer to each (a kernel node's
     * kernelParams) */
    template <size_t... I> static void *from_params(void *const *p, std::index_sequence<I...>) {
        return new args_t(*(const typename std::tuple_element<I, args_t>::type *)p[I]...);
    }
    static void *make_args(void *const *p) {
        return from_params(p, std::index_sequence_for<P...>{});
    }
};

/* The pointer arguments of a tuple, as const void *, into out; their count. */
template <typename Tuple, size_t... I>
int collect_pointers(const Tuple &t, const void **out, std::index_sequence<I...>) {
    int n = 0;
    (void)t;
    (void)out;
    (
        [&] {
            typedef typename std::tuple_element<I, Tuple>::type T;
            if constexpr (std::is_pointer<T>::value) out[n++] = (const void *)std::get<I>(t);
        }(),
        ...);
    return n;
}

/* The pointer arguments of a launcher<P...>::args_t, into out; their count. */
template <typename... P> int pointers_of(const void *args, const void **out) {
    typedef typename launcher<P...>::args_t args_t;
    return collect_pointers(*(const args_t *)args, out, std::index_sequence_for<P...>{});
}

/* A launch of kernel k: the arguments are converted to the parameter types
 * and copied now, as a real launch copies them. */
template <typename... P, typename... A>
void launch(const char *name, void (*k)(P...), dim3 grid, dim3 block, size_t shared,
            cudaStream_t stream, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "a kernel launch with the wrong argument count");
    typedef typename launcher<P...>::args_t args_t;
    args_t *a = new args_t(static_cast<typename std::decay<P>::type>(std::forward<A>(args))...);
    const void *ptrs[sizeof...(P) + 1];
    const int n = collect_pointers(*a, ptrs, std::index_sequence_for<P...>{});
    const kernel_launch l = {name, (void (*)())k, grid, block, shared, launcher<P...>::run,
                             a, launcher<P...>::free_args, ptrs, n, launcher<P...>::make_args,
                             pointers_of<P...>};
    enqueue_kernel(l, stream);
}

}  // namespace cuemu

#define CUEMU_BUILT_FOR() cuemu::built_for()

/* kernel<<<grid, block, shared, stream>>>(args...) */
#define CUEMU_LAUNCH(kernel, grid, block, shared, stream, ...) \
    cuemu::launch(#kernel, kernel, grid, block, shared, stream, __VA_ARGS__)

#endif
