/* CPU reference backend: the element-wise hot loops (GELU, exp, softmax's
 * and cross-entropy's row passes, dropout's Philox draws) over spans, written
 * so that GCC vectorises them, and built for x86-64-v3 (AVX2 + FMA) beside
 * baseline x86-64 where the compiler supports it; Philox's rounds, which GCC
 * vectorises badly, by hand with AVX2 intrinsics. Element i's result never
 * depends on its neighbours, the vector width or the path. */
#include "cpu_math.h"

/* BT_CPU_MATH_NO_CLONES: tests/c/test_cpu_simd.c's plain scalar copy. Not with clang
 * (scripts/fuzz.sh's builds): clang 14 emits the clones without the symbol that
 * resolves them, so nothing links */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(BT_CPU_MATH_NO_CLONES) && \
    !defined(__clang__)
#if __has_attribute(target_clones) && defined(__ELF__)
#define CPU_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
#endif
#ifndef CPU_SIMD_CLONES
#define CPU_SIMD_CLONES
#endif

CPU_SIMD_CLONES void cpu_gelu_span(float *out, const float *x, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = cpu_gelu(x[i]);
}

CPU_SIMD_CLONES void cpu_gelu_grad_span(float *dx, const float *dout, const float *x, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dx[i] = dout[i] * cpu_gelu_grad(x[i]);
}

/* The lane sums: TERM(i) is element i's double term, evaluated once per i
 * (an assignment in it writes element i's value as it is summed). */
#define LANE_SUM(TERM)                                                                             \
    double acc[CPU_LANES] = {0};                                                                   \
    size_t i0 = 0;                                                                                 \
    for (; i0 + CPU_LANES <= n; i0 += CPU_LANES) {                                                 \
        _Pragma("omp simd") for (size_t l = 0; l < CPU_LANES; l++) {                               \
            const size_t i = i0 + l;                                                               \
            acc[l] += (TERM);                                                                      \
        }                                                                                          \
    }                                                                                              \
    for (size_t i = i0; i < n; i++) acc[i % CPU_LANES] += (TERM);                                  \
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))

CPU_SIMD_CLONES double cpu_exp_sum_span(float *out, const float *x, float scale, float shift,
                                        const int32_t *keep, size_t n) {
    if (keep) {
        LANE_SUM(out[i] = cpu_select(keep[i] != 0, cpu_expf(scale * x[i] - shift), 0.0f));
    }
    LANE_SUM(out[i] = cpu_expf(scale * x[i] - shift));
}

/* The maximum in MAX_LANES lanes (element i in lane i % MAX_LANES), the
 * lanes then taken in order: one comparison chain per lane instead of one
 * for the whole span. A NaN never wins; a tie keeps the earlier value. */
enum { MAX_LANES = 8 };
#define MAX_OVER(COND)                                                                             \
    float m[MAX_LANES];                                                                            \
    for (size_t l = 0; l < MAX_LANES; l++) m[l] = -INFINITY;                                       \
    size_t i0 = 0;                                                                                 \
    for (; i0 + MAX_LANES <= n; i0 += MAX_LANES) {                                                 \
        _Pragma("omp simd") for (size_t l = 0; l < MAX_LANES; l++) {                               \
            const size_t i = i0 + l;                                                               \
            const float v = scale * x[i];                                                          \
            m[l] = cpu_select((COND) & (v > m[l]), v, m[l]);                                       \
        }                                                                                          \
    }                                                                                              \
    for (size_t i = i0; i < n; i++) {                                                              \
        const float v = scale * x[i];                                                              \
        m[i % MAX_LANES] = cpu_select((COND) & (v > m[i % MAX_LANES]), v, m[i % MAX_LANES]);       \
    }                                                                                              \
    float mx = m[0];                                                                               \
    for (size_t l = 1; l < MAX_LANES; l++)                                                        \
        if (m[l] > mx) mx = m[l];                                                                  \
    return mx

CPU_SIMD_CLONES float cpu_max_span(const float *x, float scale, const int32_t *keep, size_t n) {
    if (keep) {
        MAX_OVER(keep[i] != 0);
    }
    MAX_OVER(true);
}

CPU_SIMD_CLONES size_t cpu_find_span(const float *x, float v, size_t n) {
    enum { CHUNK = 64 }; /* whole chunks tested by vector compares, then the hit's one by one */
    size_t i0 = 0;
    for (; i0 + CHUNK <= n; i0 += CHUNK) {
        int hit = 0;
#pragma omp simd reduction(| : hit)
        for (size_t l = 0; l < CHUNK; l++) hit |= x[i0 + l] == v;
        if (hit) break;
    }
    for (size_t i = i0; i < n; i++)
        if (x[i] == v) return i;
    return n;
}

CPU_SIMD_CLONES void cpu_scale_span(float *x, float s, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

CPU_SIMD_CLONES double cpu_lane_sum(const float *x, size_t n) { LANE_SUM((double)x[i]); }

CPU_SIMD_CLONES double cpu_lane_sumsq(const float *x, size_t n) { LANE_SUM((double)x[i] * x[i]); }

CPU_SIMD_CLONES double cpu_lane_dot(const float *a, const float *b, size_t n) {
    LANE_SUM((double)a[i] * b[i]);
}

CPU_SIMD_CLONES double cpu_lane_sq_dev(const float *x, double mu, size_t n) {
    LANE_SUM(((double)x[i] - mu) * ((double)x[i] - mu));
}

CPU_SIMD_CLONES void cpu_lane_ln_bwd(const float *d, const float *g, const float *x, float mu,
                                     float rstd, size_t n, double *sd, double *sdx) {
    double a[CPU_LANES] = {0}, b[CPU_LANES] = {0};
    size_t i0 = 0;
    for (; i0 + CPU_LANES <= n; i0 += CPU_LANES) {
#pragma omp simd
        for (size_t l = 0; l < CPU_LANES; l++) {
            const double dn = (double)d[i0 + l] * g[i0 + l];
            a[l] += dn;
            b[l] += dn * ((x[i0 + l] - mu) * rstd);
        }
    }
    for (size_t i = i0; i < n; i++) {
        const double dn = (double)d[i] * g[i];
        a[i % CPU_LANES] += dn;
        b[i % CPU_LANES] += dn * ((x[i] - mu) * rstd);
    }
    *sd = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    *sdx = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
}

/* Philox blocks b0 .. b0+nb-1 of one sample, block b's four words at
 * w[4b .. 4b+3]: philox.h's philox4x32, one block at a time. (GCC's own
 * vectorisation of the rounds ran no faster: it reorders the 64-bit
 * products' halves with lane-crossing shuffles.) */
enum { DROP_BLOCKS = 64 };
static void philox_blocks_c(uint32_t *w, uint32_t b0, int nb, uint32_t sample, bt_rng_key key) {
    for (int b = 0; b < nb; b++) {
        uint32_t *c = w + 4 * b;
        c[0] = b0 + (uint32_t)b, c[1] = sample, c[2] = (uint32_t)key.stream,
        c[3] = (uint32_t)(key.stream >> 32);
        philox4x32(c, (uint32_t)key.seed, (uint32_t)(key.seed >> 32));
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) &&                         \
    !defined(BT_CPU_MATH_NO_CLONES)
#include <immintrin.h>
#define CPU_PHILOX_AVX2 1

/* Philox on AVX2 for blocks c .. c + 4 groups - 1 (groups <= PHILOX_GROUPS),
 * their words to out. Each block sits in a 64-bit lane with its word in the
 * low half, so that a round's 32 x 32 -> 64 products are one vpmuludq each
 * and need no shuffles (the high halves carry junk that vpmuludq ignores and
 * the output drops). A round is one chain of dependent multiplies, shifts
 * and xors; groups run side by side fill one chain's latency with another's
 * work (2 groups: the dropout op 1.5x faster than 1 group, 4 no faster). */
enum { PHILOX_GROUPS = 2 };
__attribute__((target("avx2"), always_inline)) static inline void
philox_groups_avx2(uint32_t *out, uint32_t c, int groups, uint32_t sample, bt_rng_key key) {
    const __m256i m0 = _mm256_set1_epi64x(0xD2511F53u), m1 = _mm256_set1_epi64x(0xCD9E8D57u),
                  low = _mm256_set1_epi64x(0xFFFFFFFFu);
    __m256i c0[PHILOX_GROUPS], c1[PHILOX_GROUPS], c2[PHILOX_GROUPS], c3[PHILOX_GROUPS];
#pragma GCC unroll 4
    for (int g = 0; g < groups; g++) {
        const uint32_t first = c + 4u * (uint32_t)g;
        c0[g] = _mm256_setr_epi64x(first, first + 1u, first + 2u, first + 3u);
        c1[g] = _mm256_set1_epi64x(sample);
        c2[g] = _mm256_set1_epi64x((uint32_t)key.stream);
        c3[g] = _mm256_set1_epi64x((uint32_t)(key.stream >> 32));
    }
    uint32_t k0 = (uint32_t)key.seed, k1 = (uint32_t)(key.seed >> 32);
#pragma GCC unroll 10
    for (int round = 0; round < 10; round++) {
        const __m256i key0 = _mm256_set1_epi64x(k0), key1 = _mm256_set1_epi64x(k1);
#pragma GCC unroll 4
        for (int g = 0; g < groups; g++) {
            const __m256i p0 = _mm256_mul_epu32(c0[g], m0), p1 = _mm256_mul_epu32(c2[g], m1);
            c0[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[g]), key0);
            c2[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[g]), key1);
            c1[g] = p1;
            c3[g] = p0;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    /* lanes (w0 | w1 << 32) and (w2 | w3 << 32), then blocks in order */
#pragma GCC unroll 4
    for (int g = 0; g < groups; g++) {
        const __m256i w01 = _mm256_or_si256(_mm256_and_si256(c0[g], low),
                                            _mm256_slli_epi64(c1[g], 32)),
                      w23 = _mm256_or_si256(_mm256_and_si256(c2[g], low),
                                            _mm256_slli_epi64(c3[g], 32)),
                      even = _mm256_unpacklo_epi64(w01, w23), odd = _mm256_unpackhi_epi64(w01, w23);
        uint32_t *o = out + 16 * g;
        _mm256_storeu_si256((__m256i *)o, _mm256_permute2x128_si256(even, odd, 0x20));
        _mm256_storeu_si256((__m256i *)(o + 8), _mm256_permute2x128_si256(even, odd, 0x31));
    }
}

/* philox_blocks_c on AVX2: PHILOX_GROUPS groups of four blocks
 * at a time, then one group, then the last blocks in C. The same words as
 * philox4x32: tests/c/test_cpu_simd checks both. */
__attribute__((target("avx2"))) static void philox_blocks_avx2(uint32_t *w, uint32_t b0, int nb,
                                                               uint32_t sample, bt_rng_key key) {
    int b = 0;
    for (; b + 4 * PHILOX_GROUPS <= nb; b += 4 * PHILOX_GROUPS)
        philox_groups_avx2(w + 4 * b, b0 + (uint32_t)b, PHILOX_GROUPS, sample, key);
    for (; b + 4 <= nb; b += 4) philox_groups_avx2(w + 4 * b, b0 + (uint32_t)b, 1, sample, key);
    philox_blocks_c(w + 4 * b, b0 + (uint32_t)b, nb - b, sample, key);
}
#endif

static void philox_blocks(uint32_t w[4 * DROP_BLOCKS], uint32_t b0, int nb, uint32_t sample,
                          bt_rng_key key) {
#ifdef CPU_PHILOX_AVX2
    if (__builtin_cpu_supports("avx2")) {
        philox_blocks_avx2(w, b0, nb, sample, key);
        return;
    }
#endif
    philox_blocks_c(w, b0, nb, sample, key);
}

CPU_SIMD_CLONES void cpu_drop_keep(uint8_t *keep, const cpu_drop *d, size_t i0, size_t n) {
    const size_t per_sample = d->per_sample;
    uint32_t w[4 * DROP_BLOCKS];
    size_t done = 0;
    while (done < n) {
        const size_t i = i0 + done, s = i / per_sample, e = i % per_sample;
        size_t run = per_sample - e; /* this sample's elements, at most DROP_BLOCKS blocks */
        if (run > n - done) run = n - done;
        const size_t b0 = e >> 2, b_end = (e + run - 1) / 4 + 1;
        const int nb = (int)(b_end - b0 < DROP_BLOCKS ? b_end - b0 : DROP_BLOCKS);
        if (run > (b0 + nb) * 4 - e) run = (b0 + nb) * 4 - e;
        philox_blocks(w, (uint32_t)b0, nb, d->first_sample + (uint32_t)s, d->key);
        const uint32_t *draw = w + (e - 4 * b0), thr = d->thr;
        uint8_t *k = keep + done;
#pragma omp simd
        for (size_t j = 0; j < run; j++) k[j] = draw[j] >= thr;
        done += run;
    }
}

CPU_SIMD_CLONES void cpu_dropout_run(float *out, const float *in, size_t n, const cpu_drop *d,
                                     size_t i0) {
    const float keep_scale = d->keep_scale;
    uint8_t keep[CPU_KEEP_RUN];
    for (size_t k = 0; k < n; k += CPU_KEEP_RUN) {
        const size_t len = n - k < CPU_KEEP_RUN ? n - k : CPU_KEEP_RUN;
        cpu_drop_keep(keep, d, i0 + k, len);
#pragma omp simd
        for (size_t j = 0; j < len; j++)
            out[k + j] = cpu_select(keep[j] != 0, in[k + j] * keep_scale, 0.0f);
    }
}
