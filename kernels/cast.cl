/* Conversions between f32, bf16 and f16, round to nearest even, by integer
 * arithmetic on the bits (the CPU backend's functions): no half-precision
 * support needed, and fp32 denormals never pass through float registers.
 * Geometry: one work-item per element; global: n. */

/* bits of a float -> bf16 bits */
BT_FN ushort f32_to_bf16(uint x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (ushort)(x >> 16);
}

/* bf16 bits -> bits of a float */
BT_FN uint bf16_to_f32(ushort h) { return (uint)h << 16; }

/* bits of a float -> f16 bits */
BT_FN ushort f32_to_f16(uint x) {
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
BT_FN uint f16_to_f32(ushort h) {
    const uint sign = (uint)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) /* subnormal or 0: mant * 2^-24 is a normal float (or 0) */
        return sign | as_uint((float)mant * 0x1p-24f);
    return exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112u) << 23) | (mant << 13);
}

BT_KERNEL void bt_cast_f32_to_bf16(BT_OUT(ushort, dst), BT_IN(uint, src), ulong n) {
    BT_BIND(dst);
    BT_BIND(src);
    const size_t i = get_global_id(0);
    if (i < n) dst[i] = f32_to_bf16(src[i]);
}

BT_KERNEL void bt_cast_f32_to_f16(BT_OUT(ushort, dst), BT_IN(uint, src), ulong n) {
    BT_BIND(dst);
    BT_BIND(src);
    const size_t i = get_global_id(0);
    if (i < n) dst[i] = f32_to_f16(src[i]);
}

BT_KERNEL void bt_cast_bf16_to_f32(BT_OUT(uint, dst), BT_IN(ushort, src), ulong n) {
    BT_BIND(dst);
    BT_BIND(src);
    const size_t i = get_global_id(0);
    if (i < n) dst[i] = bf16_to_f32(src[i]);
}

BT_KERNEL void bt_cast_f16_to_f32(BT_OUT(uint, dst), BT_IN(ushort, src), ulong n) {
    BT_BIND(dst);
    BT_BIND(src);
    const size_t i = get_global_id(0);
    if (i < n) dst[i] = f16_to_f32(src[i]);
}

BT_KERNEL void bt_cast_bf16_to_f16(BT_OUT(ushort, dst), BT_IN(ushort, src), ulong n) {
    BT_BIND(dst);
    BT_BIND(src);
    const size_t i = get_global_id(0);
    if (i < n) dst[i] = f32_to_f16(bf16_to_f32(src[i]));
}

BT_KERNEL void bt_cast_f16_to_bf16(BT_OUT(ushort, dst), BT_IN(ushort, src), ulong n) {
    BT_BIND(dst);
    BT_BIND(src);
    const size_t i = get_global_id(0);
    if (i < n) dst[i] = f32_to_bf16(f16_to_f32(src[i]));
}

/* x rounded to bf16 and back, in place (mixed precision's storage rounding). */
BT_KERNEL void bt_round16_bf16(BT_OUT(uint, x), ulong n) {
    BT_BIND(x);
    const size_t i = get_global_id(0);
    if (i < n) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

/* x rounded to f16 and back, in place. */
BT_KERNEL void bt_round16_f16(BT_OUT(uint, x), ulong n) {
    BT_BIND(x);
    const size_t i = get_global_id(0);
    if (i < n) x[i] = f16_to_f32(f32_to_f16(x[i]));
}
