/* The kernels' dialect as OpenCL C 1.2 (kernels/dialect_cuda.cuh is the same
 * for CUDA). Every kernels/ file is written once, in OpenCL C plus these
 * names, and compiled for both APIs: the OpenCL backend concatenates
 * constants.h, this file, common.cl, philox.cl and the kernel files into one
 * program, built with -DBT_WG=<work-group size> (256, or the largest power of
 * two the device allows) and -DBT_REDUCE_CHUNK=4096.
 *
 *   BT_KERNEL       a kernel whose work-groups may have any size
 *   BT_KERNEL_WG    a kernel that needs work-groups of exactly BT_WG
 *   BT_FN           a helper function of the kernels
 *   BT_IN(T, x)     a tensor argument read by the kernel: here a buffer and an
 *                   offset in elements, `x` and `x_off` (the host passes a
 *                   bt_ptr's buffer and offset, never a sub-buffer); in CUDA a
 *                   pointer already advanced by the offset
 *   BT_OUT(T, x)    the same for a tensor the kernel writes
 *   BT_BIND(x)      first in the kernel body, for each BT_IN and BT_OUT: x
 *                   then points at the tensor's first element in both APIs
 *   BT_LOCAL_PTR    a helper's pointer argument into local (shared) memory
 *   BT_HAS_FP64     defined where kernels may compute in double
 *   BT_WARP         defined (32) where lanes of a warp exchange values by
 *                   bt_shfl_down(x, delta): CUDA; OpenCL keeps local-memory
 *                   trees (sub-groups are optional there)
 *   BT_UNROLL       before a loop of constant trip count over a private
 *                   array (a row's values a lane keeps): unrolled, so that
 *                   every index is a constant and the array stays in
 *                   registers; rolled, the compiler puts it in local
 *                   (per-thread, off-chip) memory
 *   BT_ROW_CACHE    defined where the row kernels keep a row's values in
 *                   registers between their trees (common.cl, BT_LN_CACHED):
 *                   CUDA, and OpenCL GPUs (the host passes -DBT_ROW_CACHE=1);
 *                   a CPU device (PoCL) reads the row again from its cache,
 *                   which there costs less than values kept across barriers
 *   __local, __global, barrier(CLK_LOCAL_MEM_FENCE), get_global_id(0),
 *   get_group_id(0), get_local_id(0), mul_hi, as_float, as_uint, uint,
 *   ushort, ulong: OpenCL's own, mapped to CUDA by dialect_cuda.cuh.
 *
 * Conventions of every kernel:
 *  - every launch is 1-D with work-groups of BT_WG work-items, the global size
 *    rounded up to a multiple of BT_WG (extra work-items return early);
 *  - no atomics: each output element has one owner, and reductions use fixed
 *    trees whose shape depends only on BT_WG, so the same device gives the
 *    same bits on every run;
 *  - fp32 (fp64 only where a device has it: LAMB's trust ratios in optim.cl);
 *    no a*b+c contraction into fma (FP_CONTRACT OFF here, nvcc --fmad=false),
 *    so the elementwise ops round exactly as the CPU reference backend does;
 *  - kernel names start with bt_, so that none can collide with a built-in
 *    function of either API. */
#pragma OPENCL FP_CONTRACT OFF
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define BT_HAS_FP64 1 /* double in kernels (LAMB's trust ratios) */
#endif

#define BT_KERNEL __kernel
#define BT_KERNEL_WG __kernel __attribute__((reqd_work_group_size(BT_WG, 1, 1)))
#define BT_FN
#define BT_IN(T, x) __global const T *x, ulong x##_off
#define BT_OUT(T, x) __global T *x, ulong x##_off
#define BT_BIND(x) x += x##_off
#define BT_LOCAL_PTR __local
#define BT_UNROLL _Pragma("unroll")
