/* Conversions between f32, bf16 and f16, round to nearest even, by integer
 * arithmetic on the bits (the CPU backend's functions): no half-precision
 * support needed, and fp32 denormals never pass through float registers.
 * Geometry: one work-item per element; global: n. */

/* bits of a float -> bf16 bits */
ushort f32_to_bf16(uint x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (ushort)(x >> 16);
}

/* bf16 bits -> bits of a float */
uint bf16_to_f32(ushort h) { return (uint)h << 16; }

/* bits of a float -> f16 bits */
ushort f32_to_f16(uint x) {
    const uint sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (ushort)(sign | 0x7e00u);  /* NaN */
    if (ax >= 0x477ff000u) return (ushort)(sign | 0x7c00u); /* overflow to Inf */
    if (ax < 0x38800000u) /* subnormal or 0: a * 2^24 rounded to nearest even */
        return (ushort)(sign | (uint)rint(as_float(ax) * 16777216.0f));
    const uint mant = ax & 0x7fffffu, exp = (ax >> 23) - 112u;
    uint h = (exp << 10) | (mant >> 13);
    const uint rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (ushort)(sign | h);
}

/* f16 bits -> bits of a float */
uint f16_to_f32(ushort h) {
    const uint sign = (uint)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) /* subnormal or 0: mant * 2^-24 is a normal float (or 0) */
        return sign | as_uint((float)mant * 0x1p-24f);
    return exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112u) << 23) | (mant << 13);
}

__kernel void cast_f32_to_bf16(__global ushort *dst, ulong dst_off, __global const uint *src,
                               ulong src_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) dst[dst_off + i] = f32_to_bf16(src[src_off + i]);
}

__kernel void cast_f32_to_f16(__global ushort *dst, ulong dst_off, __global const uint *src,
                              ulong src_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) dst[dst_off + i] = f32_to_f16(src[src_off + i]);
}

__kernel void cast_bf16_to_f32(__global uint *dst, ulong dst_off, __global const ushort *src,
                               ulong src_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) dst[dst_off + i] = bf16_to_f32(src[src_off + i]);
}

__kernel void cast_f16_to_f32(__global uint *dst, ulong dst_off, __global const ushort *src,
                              ulong src_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) dst[dst_off + i] = f16_to_f32(src[src_off + i]);
}

__kernel void cast_bf16_to_f16(__global ushort *dst, ulong dst_off, __global const ushort *src,
                               ulong src_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) dst[dst_off + i] = f32_to_f16(bf16_to_f32(src[src_off + i]));
}

__kernel void cast_f16_to_bf16(__global ushort *dst, ulong dst_off, __global const ushort *src,
                               ulong src_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) dst[dst_off + i] = f32_to_bf16(f16_to_f32(src[src_off + i]));
}

/* x rounded to bf16 and back, in place (mixed precision's storage rounding). */
__kernel void round16_bf16(__global uint *x, ulong x_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) x[x_off + i] = bf16_to_f32(f32_to_bf16(x[x_off + i]));
}

/* x rounded to f16 and back, in place. */
__kernel void round16_f16(__global uint *x, ulong x_off, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) x[x_off + i] = f16_to_f32(f32_to_f16(x[x_off + i]));
}
