/* Bit-exact conversions between f32, bf16 and f16 (round to nearest even),
 * on the host: the CPU backend's casts and rounding, and whatever else reads
 * or writes 16-bit values (Hugging Face F16 weights on import, the emulated
 * tensor cores). On the bits, every case computed and one selected (no
 * branches), so loops over them vectorize. The GPU kernels
 * (kernels/cast.cl, for OpenCL and CUDA) compute the same bits. */
#ifndef BT_HALF_H
#define BT_HALF_H

#include <stdint.h>
#include <string.h>

/* bits of a float -> bf16 bits (NaN stays a quiet NaN, never Inf) */
static inline uint16_t f32_to_bf16(uint32_t x) {
    const uint32_t nan = (x & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    return (uint16_t)(nan ? (x >> 16) | 0x40u : rounded);
}

/* bf16 bits -> bits of a float (exact) */
static inline uint32_t bf16_to_f32(uint16_t h) { return (uint32_t)h << 16; }

/* bits of a float -> f16 bits (beyond the range: +-Inf; NaN stays NaN) */
static inline uint16_t f32_to_f16(uint32_t x) {
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    float a;
    memcpy(&a, &ax, 4);
    /* subnormal or 0: a * 2^24 (exact) + 2^23 rounds to an integer, to nearest even */
    const float sub = (a * 16777216.0f + 8388608.0f) - 8388608.0f;
    const uint32_t mant = ax & 0x7fffffu, rest = mant & 0x1fffu;
    uint32_t normal = (((ax >> 23) - 112u) << 10) | (mant >> 13);
    normal += (rest > 0x1000u) | ((rest == 0x1000u) & normal);
    /* all-ones masks pick the case: NaN, overflow to Inf, subnormal, normal */
    const uint32_t nan_m = 0u - (uint32_t)(ax > 0x7f800000u),
                   big_m = 0u - (uint32_t)(ax >= 0x477ff000u),
                   sub_m = 0u - (uint32_t)(ax < 0x38800000u);
    const uint32_t bits = (nan_m & 0x7e00u) | (~nan_m & big_m & 0x7c00u) |
                          (sub_m & (uint32_t)(int32_t)sub) | (~big_m & ~sub_m & normal);
    return (uint16_t)(sign | bits);
}

/* f16 bits -> bits of a float (exact) */
static inline uint32_t f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu,
                   mant = h & 0x3ffu;
    const float sub = (float)(int32_t)mant * 0x1p-24f; /* exact */
    uint32_t sub_bits;
    memcpy(&sub_bits, &sub, 4);
    const uint32_t zero_m = 0u - (uint32_t)(exp == 0), top_m = 0u - (uint32_t)(exp == 31);
    return sign | (zero_m & sub_bits) | (top_m & (0x7f800000u | (mant << 13))) |
           (~zero_m & ~top_m & (((exp + 112u) << 23) | (mant << 13)));
}

/* the float with these bits */
static inline float bt_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
