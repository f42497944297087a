/* Conversions between f32, bf16 and f16, round to nearest even, by integer
 * arithmetic on the bits (the CPU backend's functions; kernels_cl/cast.cl's
 * twin): no half-precision hardware needed, and fp32 denormals never pass
 * through float arithmetic except where the CPU backend's does.
 * Geometry: one thread per element; grid: n threads. */
#include "common.cuh"
#include "kernels.cuh"

#include <math.h>

/* bits of a float -> bf16 bits */
__device__ inline uint16_t f32_to_bf16(uint32_t x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* bf16 bits -> bits of a float */
__device__ inline uint32_t bf16_to_f32(uint16_t h) { return (uint32_t)h << 16; }

/* bits of a float -> f16 bits */
__device__ inline uint16_t f32_to_f16(uint32_t x) {
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow to Inf */
    if (ax < 0x38800000u) /* subnormal or 0: a * 2^24 rounded to nearest even */
        return (uint16_t)(sign | (uint32_t)rintf(__uint_as_float(ax) * 16777216.0f));
    const uint32_t mant = ax & 0x7fffffu, exp = (ax >> 23) - 112u;
    uint32_t h = (exp << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* f16 bits -> bits of a float */
__device__ inline uint32_t f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu,
                   mant = h & 0x3ffu;
    if (exp == 0) /* subnormal or 0: mant * 2^-24 is a normal float (or 0) */
        return sign | __float_as_uint((float)mant * 0x1p-24f);
    return exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112u) << 23) | (mant << 13);
}

__global__ void cast_f32_to_bf16(uint16_t *dst, const uint32_t *src, size_t n) {
    const size_t i = global_id();
    if (i < n) dst[i] = f32_to_bf16(src[i]);
}

__global__ void cast_f32_to_f16(uint16_t *dst, const uint32_t *src, size_t n) {
    const size_t i = global_id();
    if (i < n) dst[i] = f32_to_f16(src[i]);
}

__global__ void cast_bf16_to_f32(uint32_t *dst, const uint16_t *src, size_t n) {
    const size_t i = global_id();
    if (i < n) dst[i] = bf16_to_f32(src[i]);
}

__global__ void cast_f16_to_f32(uint32_t *dst, const uint16_t *src, size_t n) {
    const size_t i = global_id();
    if (i < n) dst[i] = f16_to_f32(src[i]);
}

__global__ void cast_bf16_to_f16(uint16_t *dst, const uint16_t *src, size_t n) {
    const size_t i = global_id();
    if (i < n) dst[i] = f32_to_f16(bf16_to_f32(src[i]));
}

__global__ void cast_f16_to_bf16(uint16_t *dst, const uint16_t *src, size_t n) {
    const size_t i = global_id();
    if (i < n) dst[i] = f32_to_bf16(f16_to_f32(src[i]));
}

/* x rounded to bf16 and back, in place (mixed precision's storage rounding). */
__global__ void round16_bf16(uint32_t *x, size_t n) {
    const size_t i = global_id();
    if (i < n) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

/* x rounded to f16 and back, in place. */
__global__ void round16_f16(uint32_t *x, size_t n) {
    const size_t i = global_id();
    if (i < n) x[i] = f16_to_f32(f32_to_f16(x[i]));
}
