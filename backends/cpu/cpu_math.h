/* Branch-free float exp and GELU for the CPU backend's hot loops. glibc's
 * erff takes ~26 ns an element here and blocks vectorisation, and the GELU
 * pair was 12% of a mini step; these are straight-line polynomials that GCC
 * vectorises inside `#pragma omp simd` loops. Every multiply-add is an
 * explicit fmaf (one rounding: the FMA instruction where the clone has it,
 * libm's exact fmaf where not), and nothing else is contracted under
 * -std=c11, so every element gets the same bits whichever path computes it.
 *
 * Coefficients: least-squares fits on Chebyshev nodes in float64 (relative
 * error of the fits: exp 6e-11, erfc's Q 2.2e-8; the float evaluation,
 * ~1.3e-7, dominates). Checked against float64 by tests/c/test_cpu_simd and
 * the conformance suite (gelu_fwd/bwd, softmax, xent and the fused ops). */
#ifndef BT_CPU_MATH_H
#define BT_CPU_MATH_H

#include "../backend.h"
#include "../philox.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The helpers below must inline into each clone's loop (an out-of-line copy
 * is built for the baseline ISA, where fmaf is a library call). */
#if defined(__GNUC__) || defined(__clang__)
#define CPU_INLINE static inline __attribute__((always_inline))
#else
#define CPU_INLINE static inline
#endif

/* c ? a : b by bit masks. A plain ?: lets GCC sink an arm's arithmetic into
 * a branch that it then will not if-convert (the arithmetic might trap), and
 * the loop stays scalar. */
CPU_INLINE float cpu_select(bool c, float a, float b) {
    uint32_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    const uint32_t m = 0u - (uint32_t)c, r = (ia & m) | (ib & ~m);
    float f;
    memcpy(&f, &r, sizeof f);
    return f;
}

/* e^x for x <= 88 (the callers' arguments are <= 0), within ~2 ulp; 0 below
 * -87.33 (where expf goes subnormal), +inf above 88, NaN for NaN. */
CPU_INLINE float cpu_expf(float x) {
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float xc = cpu_select(x < -87.33f, -87.33f, x);
    xc = cpu_select(xc > 88.0f, 88.0f, xc);
    const float k = fmaf(xc, 1.44269504088896341f, magic), n = k - magic;
    const float r = fmaf(-n, 1.42860682030941723e-6f, fmaf(-n, 0.693145751953125f, xc));
    float p = fmaf(0.00019826496f, r, 0.0013946021f);
    p = fmaf(p, r, 0.0083334300f);
    p = fmaf(p, r, 0.041666270f);
    p = fmaf(p, r, 0.16666666f);
    p = fmaf(p, r, 0.50000001f);
    p = 1.0f + fmaf(r * r, p, r);
    int32_t kbits;
    memcpy(&kbits, &k, sizeof kbits);
    const int32_t sbits = (int32_t)((uint32_t)(kbits - 0x4B400000 + 127) << 23); /* 2^n */
    float scale;
    memcpy(&scale, &sbits, sizeof scale);
    const float v = p * scale;
    return cpu_select(x < -87.33f, 0.0f, cpu_select(x > 88.0f, INFINITY, v));
}

/* The standard normal CDF and PDF at x (GELU's pieces) from one form for
 * every x: erfc(a) = exp(-a^2) t Q(t), a = |x|/sqrt2, t = 1/(1 + a/2) in
 * (1/6, 1], Q a polynomial fitted over all of it (a <= 10; beyond, the tail
 * is 0 in float anyway). Phi(-|x|) = erfc(a)/2 keeps x << 0's relative
 * accuracy (1 + erf(x) would cancel); Phi(|x|) = 1 - erfc(a)/2 >= 1/2. */
CPU_INLINE void cpu_normal_cdf_pdf(float x, float *cdf, float *pdf) {
    const float u = x * 0.70710678118654752f, a0 = fabsf(u);
    const float a = cpu_select(a0 > 10.0f, 10.0f, a0); /* keeps t Q(t) finite for +-inf */
    const float s = a * a;
    const float t = 1.0f / fmaf(0.5f, a, 1.0f);
    float q = fmaf(0.0135346493f, t, -0.129614055f);
    q = fmaf(q, t, 0.442811131f);
    q = fmaf(q, t, -0.687045813f);
    q = fmaf(q, t, 0.434151888f);
    q = fmaf(q, t, -0.104528479f);
    q = fmaf(q, t, 0.227445513f);
    q = fmaf(q, t, 0.238288224f);
    q = fmaf(q, t, 0.282894015f);
    q = fmaf(q, t, 0.282062888f);
    const float e = cpu_expf(-s), tail = 0.5f * (e * t * q); /* Phi(-|x|) */
    *cdf = cpu_select(x < 0.0f, tail, 1.0f - tail);       /* no branches in the loop */
    *pdf = 0.39894228040143268f * e;
}

/* Exact-erf GELU, x * Phi(x), and its derivative Phi(x) + x phi(x); shared
 * by gelu_fwd/bwd and the fused ops so that all of them round alike. */
CPU_INLINE float cpu_gelu(float x) {
    float cdf, pdf;
    cpu_normal_cdf_pdf(x, &cdf, &pdf);
    return x * cdf;
}
CPU_INLINE float cpu_gelu_grad(float x) {
    float cdf, pdf;
    cpu_normal_cdf_pdf(x, &cdf, &pdf);
    return fmaf(x, pdf, cdf);
}

/* Sums in double over CPU_LANES fixed lanes: element i goes to lane
 * i % CPU_LANES, and the lanes are added in a fixed tree at the end. The
 * order is the code's, not the vector width's, so every clone gives the same
 * bits, and the lanes break the add-latency chain (5x faster than one
 * accumulator). */
enum { CPU_LANES = 8 };

/* A dropout call's stream: samples of per_sample elements from first_sample
 * on, one Philox block per four elements of a sample; an element is kept
 * when its draw >= thr, and then scaled by keep_scale = 1/(1-p). (thr = 0
 * keeps every element, and keep_scale is then exactly 1.) */
typedef struct {
    bt_rng_key key;
    uint32_t first_sample, thr;
    size_t per_sample;
    float keep_scale;
} cpu_drop;

/* A stream for dropout with probability p. */
static inline cpu_drop cpu_drop_of(bt_rng_key key, uint32_t first_sample, size_t per_sample,
                                   float p) {
    cpu_drop d = {key, first_sample, philox_drop_threshold(p), per_sample, 1.0f / (1.0f - p)};
    return d;
}

/* The longest run cpu_drop_keep is asked for by the ops (a stack buffer). */
enum { CPU_KEEP_RUN = 1024 };

#endif

/* The spans' declarations, outside the include guard: tests/c/test_cpu_simd.c
 * includes them a second time under the library's names. */
#ifndef BT_CPU_MATH_SPANS
#define BT_CPU_MATH_SPANS

/* The hot loops over spans (cpu_math.c), built twice where the compiler can
 * (x86-64-v3, AVX2 with FMA, and baseline x86-64, picked at load time): both
 * run the same IEEE operations per element, so they give the same bits. */

/* out[i] = gelu(x[i]); out may be x. */
void cpu_gelu_span(float *out, const float *x, size_t n);

/* dx[i] = dout[i] * gelu'(x[i]); dx may be dout. */
void cpu_gelu_grad_span(float *dx, const float *dout, const float *x, size_t n);

/* out[i] = exp(scale * x[i] - shift), or 0 where keep is given and keep[i]
 * is 0 (out may be x); returns their sum, with cpu_lane_sum(out, n)'s bits:
 * softmax's and cross-entropy's exps and their sum in one pass. */
double cpu_exp_sum_span(float *out, const float *x, float scale, float shift,
                        const int32_t *keep, size_t n);

/* max_i scale * x[i] over the i with keep[i] != 0 (every i when keep is
 * NULL); -inf when there is none. NaNs are passed over. */
float cpu_max_span(const float *x, float scale, const int32_t *keep, size_t n);

/* The first i with x[i] == v, or n when there is none. */
size_t cpu_find_span(const float *x, float v, size_t n);

/* x[i] *= s */
void cpu_scale_span(float *x, float s, size_t n);

/* sum_i x[i] */
double cpu_lane_sum(const float *x, size_t n);

/* sum_i x[i]^2 */
double cpu_lane_sumsq(const float *x, size_t n);

/* sum_i a[i] b[i] */
double cpu_lane_dot(const float *a, const float *b, size_t n);

/* sum_i (x[i] - mu)^2, in double */
double cpu_lane_sq_dev(const float *x, double mu, size_t n);

/* LayerNorm backward's row sums: *sd = sum_i d[i] g[i] and *sdx = sum_i
 * d[i] g[i] xhat[i], xhat[i] = (x[i] - mu) rstd in float, in double lanes. */
void cpu_lane_ln_bwd(const float *d, const float *g, const float *x, float mu, float rstd, size_t n,
                     double *sd, double *sdx);

/* keep[j] = whether element i0 + j (counted over all samples) is kept. */
void cpu_drop_keep(uint8_t *keep, const cpu_drop *d, size_t i0, size_t n);

/* out[j] = in[j] * d->keep_scale where element i0 + j is kept, else 0; out
 * may be in. Dropout's arithmetic, shared by dropout and the fused ops. */
void cpu_dropout_run(float *out, const float *in, size_t n, const cpu_drop *d, size_t i0);

#endif
