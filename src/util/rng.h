/* Host-side draws from the counter-based generator (backends/philox.h):
 * initialization, data order and MLM masking. Every value is a pure function
 * of its key, so resumes and world sizes see the same numbers. */
#ifndef BT_RNG_H
#define BT_RNG_H

#include "backends/philox.h"

#include <math.h>
#include <stdint.h>

/* Streams, kept apart so no two uses share draws. */
enum {
    RNG_STREAM_INIT = 1,    /* (tensor index) << 8 */
    RNG_STREAM_ORDER = 2,   /* epoch permutation */
    RNG_STREAM_MASK = 3,    /* MLM masking */
    RNG_STREAM_BENCH = 4,   /* bench's random tokens */
    RNG_STREAM_PAIRS = 5,   /* sentence-pair sampling */
    RNG_STREAM_DROPOUT = 6, /* (step << 20) | (layer << 8) | site */
    RNG_STREAM_LAYERDROP = 7, /* counter (step, layer) */
};

/* Four 32-bit draws for counter (a, b) in (seed, stream). */
static inline void rng_block(uint64_t seed, uint64_t stream, uint32_t a, uint32_t b,
                             uint32_t out[4]) {
    out[0] = a;
    out[1] = b;
    out[2] = (uint32_t)stream;
    out[3] = (uint32_t)(stream >> 32);
    philox4x32(out, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform double in [0, 1) from counter (a, b). */
static inline double rng_uniform(uint64_t seed, uint64_t stream, uint32_t a, uint32_t b) {
    uint32_t r[4];
    rng_block(seed, stream, a, b, r);
    return ((double)(r[0] >> 5) * 67108864.0 + (double)(r[1] >> 6)) / 9007199254740992.0;
}

/* Uniform integer in [0, n) from counter (a, b) (n < 2^32; bias < 2^-32). */
static inline uint32_t rng_below(uint64_t seed, uint64_t stream, uint32_t a, uint32_t b,
                                 uint32_t n) {
    uint32_t r[4];
    rng_block(seed, stream, a, b, r);
    uint64_t x = ((uint64_t)r[0] << 32) | r[1];
    return (uint32_t)(((unsigned __int128)x * n) >> 64);
}

/* Standard normal truncated to [-2, 2], element `elem` of `stream`: Box-Muller,
 * redrawing with the next attempt counter until inside the bounds. */
static inline double rng_trunc_normal(uint64_t seed, uint64_t stream, uint32_t elem) {
    for (uint32_t attempt = 0;; attempt++) {
        uint32_t r[4];
        rng_block(seed, stream, elem, attempt, r);
        double u1 = ((double)r[0] + 1.0) / 4294967297.0; /* (0, 1) */
        double u2 = (double)r[1] / 4294967296.0;
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        if (z >= -2.0 && z <= 2.0) return z;
    }
}

#endif
