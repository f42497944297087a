/* Philox-4x32-10, bit for bit as backends/philox.h and kernels_cl/philox.cl:
 * a draw depends only on (seed, stream, sample, element), so dropout masks
 * match every backend. */
#ifndef BT_KERNELS_CU_PHILOX_CUH
#define BT_KERNELS_CU_PHILOX_CUH

#include <stdint.h>

/* One Philox-4x32-10 block: ctr (four words) in place under key (k0, k1). */
__device__ inline void philox4x32(uint32_t ctr[4], uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; round++) {
        const uint32_t hi0 = __umulhi(0xD2511F53u, ctr[0]), lo0 = 0xD2511F53u * ctr[0];
        const uint32_t hi1 = __umulhi(0xCD9E8D57u, ctr[2]), lo1 = 0xCD9E8D57u * ctr[2];
        const uint32_t c1 = ctr[1], c3 = ctr[3];
        ctr[0] = hi1 ^ c1 ^ k0;
        ctr[1] = lo1;
        ctr[2] = hi0 ^ c3 ^ k1;
        ctr[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* Whether dropout keeps element i (counted over all samples of per_sample
 * elements from sample first_sample): the draw dropout makes for it. */
__device__ inline bool drop_keep(size_t i, size_t per_sample, uint32_t first_sample, uint32_t thr,
                                 uint32_t seed_lo, uint32_t seed_hi, uint32_t stream_lo,
                                 uint32_t stream_hi) {
    const size_t s = i / per_sample, e = i % per_sample;
    uint32_t r[4] = {(uint32_t)(e >> 2), first_sample + (uint32_t)s, stream_lo, stream_hi};
    philox4x32(r, seed_lo, seed_hi);
    return r[e & 3] >= thr;
}

#endif
