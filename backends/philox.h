/* Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011), shared by
 * every backend and the host so that a draw depends only on (key, counter):
 * dropout masks, MLM masks and data order are then identical on every backend,
 * world size and resume. kernels/philox.cl carries the same function, for OpenCL and CUDA. */
#ifndef BT_PHILOX_H
#define BT_PHILOX_H

#include <stdint.h>

/* One Philox-4x32-10 block: four 32-bit outputs for a 128-bit counter and a
 * 64-bit key. */
static inline void philox4x32(uint32_t ctr[4], uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * ctr[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * ctr[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t c1 = ctr[1], c3 = ctr[3];
        ctr[0] = hi1 ^ c1 ^ k0;
        ctr[1] = lo1;
        ctr[2] = hi0 ^ c3 ^ k1;
        ctr[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* The 32-bit draw for element `elem` of sample `sample` in stream `stream`
 * under `seed`. Four consecutive elements share one Philox block. */
static inline uint32_t philox_draw(uint64_t seed, uint64_t stream, uint32_t sample,
                                   uint32_t elem) {
    uint32_t ctr[4] = {elem >> 2, sample, (uint32_t)stream, (uint32_t)(stream >> 32)};
    philox4x32(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
    return ctr[elem & 3];
}

/* Dropout threshold: an element is kept when its draw >= this value. */
static inline uint32_t philox_drop_threshold(float p) {
    return (uint32_t)(p * 4294967296.0f);
}

/* A uniform float in [0, 1) with 24 random bits. */
static inline float philox_uniform(uint32_t r) { return (float)(r >> 8) * (1.0f / 16777216.0f); }

#endif
