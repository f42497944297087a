/* Conversions between f32, bf16 and f16 (the functions are common.cl's).
 * Geometry: one work-item per element; global: n. */

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
