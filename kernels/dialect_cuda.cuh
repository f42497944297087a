/* The kernels' dialect as CUDA C++: kernels/dialect_opencl.cl's names (see
 * there) for nvcc, and for g++ in the emulated device (tests/cuda_emu), so
 * that each kernels/ file compiles unchanged for CUDA. kernels_cu/NAME.cu
 * includes this header, kernels_cu/kernels.cuh (the host's declarations),
 * common.cl, philox.cl and kernels/NAME.cl. */
#ifndef BT_KERNELS_DIALECT_CUDA_CUH
#define BT_KERNELS_DIALECT_CUDA_CUH

/* every system header first: the OpenCL type names below are macros */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "constants.h"

#define BT_KERNEL __global__
#define BT_KERNEL_WG __global__ __launch_bounds__(BT_WG)
/* unused: nvcc's host pass keeps each helper as a stub, and clang as host
 * compiler (CUDA 11.8's, scripts/cuda-sm70.sh) warns about the stubs that a
 * file does not call. */
#define BT_FN static __device__ inline __attribute__((unused))
#define BT_IN(T, x) const T *x
#define BT_OUT(T, x) T *x
#define BT_BIND(x) (void)0
#define BT_LOCAL_PTR
#ifdef __CUDACC__
#define BT_UNROLL _Pragma("unroll")
#else
#define BT_UNROLL /* g++ (the emulated device): its arrays are host memory anyway */
#endif
#define BT_HAS_FP64 1
#define BT_ROW_CACHE 1

#define __global
#define __local __shared__
#define CLK_LOCAL_MEM_FENCE 1
#define barrier(flags) __syncthreads()
/* 1-D launches only: blocks of BT_WG threads (the host's LAUNCH); the
 * emulated device checks that at each use (tests/cuda_emu) */
#ifdef CUEMU_CUDA_RUNTIME_H
#define BT_GEOMETRY_CHECK() cuemu_check_block(BT_WG, __FILE__, __LINE__),
#else
#define BT_GEOMETRY_CHECK()
#endif
#define get_global_id(dim) (BT_GEOMETRY_CHECK()(size_t) blockIdx.x * BT_WG + threadIdx.x)
#define get_group_id(dim) (BT_GEOMETRY_CHECK()(size_t) blockIdx.x)
#define get_local_id(dim) (BT_GEOMETRY_CHECK()(size_t) threadIdx.x)
/* a warp of 32 lanes, and its shuffle down over the whole warp (every lane
 * of it must call it) */
#define BT_WARP 32
#define bt_shfl_down(x, delta) __shfl_down_sync(0xffffffffu, x, delta)
#define mul_hi(a, b) __umulhi(a, b)
#define as_float(u) __uint_as_float(u)
#define as_uint(f) __float_as_uint(f)
#define M_SQRT1_2_F 0.70710678118654752440f

#define uint unsigned int
#define ushort unsigned short
#define ulong unsigned long long

#endif
