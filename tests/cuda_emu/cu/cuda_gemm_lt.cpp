/* backends/cuda/cuda_gemm_lt.cu as the emulated device compiles it: what nvcc does (cuda_runtime.h
 * first, then the file), with g++. See tests/cuda_emu/README.md. */
#include <cuda_runtime.h>

#include "backends/cuda/cuda_gemm_lt.cu"
