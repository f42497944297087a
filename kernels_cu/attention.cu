/* kernels/attention.cl compiled as CUDA (kernels/dialect_cuda.cuh): the one
 * source of these kernels, which the OpenCL backend compiles as OpenCL C. */
#include "../kernels/dialect_cuda.cuh"
#include "kernels.cuh"

#include "../kernels/common.cl"
#include "../kernels/philox.cl"
#include "../kernels/attention.cl"
