/* Oclgrind 21.10's bug, reduced: kernels_cl/cast.cl's f16 -> f32 by integer
 * arithmetic gives the right bits on PoCL, the CPU and CUDA, but under
 * Oclgrind the negative zero and negative subnormals come out as -2^-15 and
 * thereabouts (0x8000 -> 0xb8000000 instead of 0x80000000). tests/oclgrind.sh
 * runs it with oclgrind-kernel (f16.sim): while the bug shows, the conformance
 * rows of cast and round16 that meet negative f16 subnormals are excluded. */
uint f16_to_f32(ushort h) {
    const uint sign = (uint)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0)
        return sign | as_uint((float)mant * 0x1p-24f);
    return exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112u) << 23) | (mant << 13);
}
__kernel void cast_f16_to_f32(__global uint *out, __global const ushort *in) {
    const size_t i = get_global_id(0);
    out[i] = f16_to_f32(in[i]);
}
