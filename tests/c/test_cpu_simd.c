/* The CPU backend's vectorised element-wise loops (backends/cpu/cpu_math.c)
 * give the bits of the same code run one element at a time: this program
 * holds a second, scalar copy of cpu_math.c (built without OpenMP's simd and
 * without GCC's vectoriser, no x86-64-v3 clones or intrinsics) and compares the library's
 * functions (vectorised; the x86-64-v3 clone, AVX2 + FMA, where the CPU has it) with it, bit
 * for bit, on seeded random values, special values (NaN, +-inf, +-0,
 * subnormals, the polynomials' switch points) and every length from 0 to 67
 * at odd offsets. It also checks the dropout draws against philox.h's
 * philox_draw (an independent scalar reference) and GELU and exp against
 * double precision. */
#define BT_CPU_MATH_NO_CLONES
#define cpu_gelu_span scalar_gelu_span
#define cpu_gelu_grad_span scalar_gelu_grad_span
#define cpu_exp_sum_span scalar_exp_sum_span
#define cpu_max_span scalar_max_span
#define cpu_find_span scalar_find_span
#define cpu_scale_span scalar_scale_span
#define cpu_lane_sum scalar_lane_sum
#define cpu_lane_sumsq scalar_lane_sumsq
#define cpu_lane_dot scalar_lane_dot
#define cpu_lane_sq_dev scalar_lane_sq_dev
#define cpu_lane_ln_bwd scalar_lane_ln_bwd
#define cpu_drop_keep scalar_drop_keep
#define cpu_dropout_run scalar_dropout_run
#include "backends/cpu/cpu_math.c"
#undef cpu_gelu_span
#undef cpu_gelu_grad_span
#undef cpu_exp_sum_span
#undef cpu_max_span
#undef cpu_find_span
#undef cpu_scale_span
#undef cpu_lane_sum
#undef cpu_lane_sumsq
#undef cpu_lane_dot
#undef cpu_lane_sq_dev
#undef cpu_lane_ln_bwd
#undef cpu_drop_keep
#undef cpu_dropout_run
#undef BT_CPU_MATH_SPANS
#include "backends/cpu/cpu_math.h" /* again: the library's functions, under their names */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 1 << 16 };
static int failures;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) { /* xorshift64*: the test's own stream */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 32);
}
static float uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)(next_u32() >> 8) / 16777216.0f;
}

/* Inputs: a third anywhere in float's range (random bits), a third in
 * [-range, range], and special values spread through. */
static void fill_inputs(float *x, size_t n, float range) {
    static const float special[] = {0.0f,
                                    -0.0f,
                                    INFINITY,
                                    -INFINITY,
                                    NAN,
                                    1e-40f,
                                    -1e-40f,
                                    0.9f * 1.41421356f,
                                    -0.9f * 1.41421356f,
                                    10.0f * 1.41421356f,
                                    -87.33f,
                                    -87.34f,
                                    88.0f,
                                    88.01f,
                                    1e30f,
                                    -1e30f};
    for (size_t i = 0; i < n; i++) {
        const uint32_t r = next_u32();
        if (i % 3 == 0)
            memcpy(&x[i], &r, sizeof r);
        else
            x[i] = uniform(-range, range);
        if (i % 97 == 0) x[i] = special[(i / 97) % (sizeof special / sizeof special[0])];
    }
}

/* The same bits, where a NaN matches any NaN: which NaN an operation passes
 * on is not fixed by IEEE (x86 keeps the first operand's, and a compiler may
 * swap the operands of a commutative add). */
static int same_bits(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}
static int same_double(double a, double b) {
    return !memcmp(&a, &b, sizeof a) || (isnan(a) && isnan(b));
}

/* Every length 0..67 at offsets 0..3, then the whole array. */
#define EACH_SPAN(...)                                                                             \
    for (size_t len = 0; len <= 67; len++)                                                         \
        for (size_t off = 0; off < 4; off++) {                                                     \
            __VA_ARGS__;                                                                           \
        }                                                                                          \
    {                                                                                              \
        const size_t len = N, off = 0;                                                             \
        __VA_ARGS__;                                                                               \
    }

static void test_elementwise(void) {
    const size_t room = N + 4; /* the shifted reads go up to 1 past N */
    float *x = malloc(room * sizeof *x), *d = malloc(room * sizeof *d),
          *a = malloc(room * sizeof *a), *b = malloc(room * sizeof *b);
    int32_t *keep = malloc(room * sizeof *keep);
    fill_inputs(x, room, 12.0f);
    fill_inputs(d, room, 3.0f);
    float *f = malloc(room * sizeof *f); /* finite, for sums that mean something */
    for (size_t i = 0; i < room; i++) f[i] = uniform(-3.0f, 3.0f);
    for (size_t i = 0; i < room; i++) keep[i] = (int32_t)(next_u32() % 3 == 0 ? 0 : next_u32());
    int ok = 1;
    EACH_SPAN(cpu_gelu_span(a, x + off, len); scalar_gelu_span(b, x + off, len);
              ok &= same_bits(a, b, len));
    check(ok, "gelu span: vectorised == scalar, bit for bit");
    ok = 1;
    EACH_SPAN(cpu_gelu_grad_span(a, d + off, x + off, len);
              scalar_gelu_grad_span(b, d + off, x + off, len); ok &= same_bits(a, b, len));
    check(ok, "gelu grad span: vectorised == scalar");
    ok = 1;
    EACH_SPAN(double s1 = cpu_exp_sum_span(a, x + off, 0.125f, 3.0f, NULL, len);
              double s2 = scalar_exp_sum_span(b, x + off, 0.125f, 3.0f, NULL, len);
              ok &= same_bits(a, b, len) && same_double(s1, s2) &&
                    same_double(s1, scalar_lane_sum(b, len));
              s1 = cpu_exp_sum_span(a, x + off, 1.0f, -2.0f, keep + off, len);
              s2 = scalar_exp_sum_span(b, x + off, 1.0f, -2.0f, keep + off, len);
              ok &= same_bits(a, b, len) && same_double(s1, s2) &&
                    same_double(s1, scalar_lane_sum(b, len)));
    check(ok, "exp span and its sum (with and without a key mask): vectorised == scalar, "
              "the sum == lane_sum of the exps");
    ok = 1;
    int agree = 1;
    EACH_SPAN(const float m1 = cpu_max_span(x + off, 0.5f, NULL, len),
              m2 = scalar_max_span(x + off, 0.5f, NULL, len);
              const float k1 = cpu_max_span(x + off, -2.0f, keep + off, len),
              k2 = scalar_max_span(x + off, -2.0f, keep + off, len);
              ok &= same_bits(&m1, &m2, 1) && same_bits(&k1, &k2, 1);
              float r1 = -INFINITY, r2 = -INFINITY; /* the plain loop, NaNs passed over */
              for (size_t i = 0; i < len; i++) {
                  if (0.5f * x[off + i] > r1) r1 = 0.5f * x[off + i];
                  if (keep[off + i] && -2.0f * x[off + i] > r2) r2 = -2.0f * x[off + i];
              } agree &= r1 == m1 && r2 == k1);
    check(ok, "max span (with and without a key mask): vectorised == scalar");
    check(agree, "max span == the maximum by a plain loop");
    ok = 1, agree = 1;
    EACH_SPAN(const float v = len ? x[off + (len * 7) / 11] : 1.0f;
              const size_t f1 = cpu_find_span(x + off, v, len), f2 = scalar_find_span(x + off, v, len);
              size_t r = 0; while (r < len && !(x[off + r] == v)) r++;
              ok &= f1 == f2; agree &= f1 == r);
    check(ok, "find span: vectorised == scalar");
    check(agree, "find span == the first match by a plain loop (n when none: NaN)");
    ok = 1;
    EACH_SPAN(memcpy(a, x + off, len * sizeof *a); memcpy(b, x + off, len * sizeof *b);
              cpu_scale_span(a, 0.37f, len); scalar_scale_span(b, 0.37f, len);
              ok &= same_bits(a, b, len));
    check(ok, "scale span: vectorised == scalar");
    ok = 1;
    EACH_SPAN(double s1 = cpu_lane_sum(d + off, len), s2 = scalar_lane_sum(d + off, len);
              double q1 = cpu_lane_sumsq(d + off, len), q2 = scalar_lane_sumsq(d + off, len);
              double t1 = cpu_lane_dot(d + off, x + off, len),
              t2 = scalar_lane_dot(d + off, x + off, len);
              double v1 = cpu_lane_sq_dev(d + off, 0.25, len),
              v2 = scalar_lane_sq_dev(d + off, 0.25, len);
              double l1, l2, m1, m2; cpu_lane_ln_bwd(d + off, x, d, 0.5f, 1.5f, len, &l1, &m1);
              scalar_lane_ln_bwd(d + off, x, d, 0.5f, 1.5f, len, &l2, &m2);
              ok &= same_double(s1, s2) && same_double(q1, q2) && same_double(t1, t2) &&
                    same_double(v1, v2) && same_double(l1, l2) && same_double(m1, m2));
    check(ok, "lane sums, sums of squares, dots, deviations, LayerNorm rows: vectorised == scalar");
    ok = 1;
    EACH_SPAN(double s1 = cpu_lane_sum(f + off, len), s2 = scalar_lane_sum(f + off, len);
              double t1 = cpu_lane_dot(f + off, f, len), t2 = scalar_lane_dot(f + off, f, len);
              double v1 = cpu_lane_sq_dev(f + off, 0.25, len),
              v2 = scalar_lane_sq_dev(f + off, 0.25, len);
              double l1, l2, m1, m2; cpu_lane_ln_bwd(f + off, f, f + 1, 0.5f, 1.5f, len, &l1, &m1);
              scalar_lane_ln_bwd(f + off, f, f + 1, 0.5f, 1.5f, len, &l2, &m2);
              ok &= !memcmp(&s1, &s2, 8) && !memcmp(&t1, &t2, 8) && !memcmp(&v1, &v2, 8) &&
                    !memcmp(&l1, &l2, 8) && !memcmp(&m1, &m2, 8) && isfinite(s1) && isfinite(l1));
    check(ok, "the same on finite values, exactly");
    free(x), free(d), free(a), free(b), free(keep), free(f);
}

static void test_accuracy(void) {
    double worst_exp = 0, worst_gelu = 0, worst_grad = 0;
    for (int i = 0; i < 2000000; i++) {
        const float e = uniform(-87.0f, 0.0f), g = uniform(-9.0f, 9.0f);
        float r;
        scalar_exp_sum_span(&r, &e, 1.0f, 0.0f, NULL, 1);
        worst_exp = fmax(worst_exp, fabs(r - exp((double)e)) / exp((double)e));
        const double G = g, cdf = 0.5 * erfc(-G / sqrt(2.0));
        cpu_gelu_span(&r, &g, 1);
        const double gelu = G * cdf;
        if (fabs(gelu) > 1e-30) worst_gelu = fmax(worst_gelu, fabs(r - gelu) / fabs(gelu));
        const float one = 1.0f;
        cpu_gelu_grad_span(&r, &one, &g, 1);
        worst_grad = fmax(worst_grad,
                          fabs(r - (cdf + G * exp(-G * G / 2) / sqrt(2 * 3.14159265358979323846))));
    }
    printf("     exp rel %.3g, gelu rel %.3g (x in [-9, 9]), gelu' abs %.3g\n", worst_exp,
           worst_gelu, worst_grad);
    /* float rounds to 6e-8: a few ulps for exp; GELU's tail loses what
     * exp(-x^2/2) does to x^2's rounding (x^2 <= 81: ~3e-6) */
    check(worst_exp < 3e-7, "exp within 3e-7 of double on [-87, 0]");
    check(worst_gelu < 1e-5, "gelu within 1e-5 (relative) of double on [-9, 9]");
    check(worst_grad < 1e-6, "gelu' within 1e-6 of double on [-9, 9]");
    const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
    float r[5];
    cpu_gelu_span(r, specials, 5);
    check(isnan(r[0]) && r[1] == INFINITY && isnan(r[2]) && r[3] == 0.0f && r[4] == 0.0f,
          "gelu(NaN, inf, -inf, 0, -0) = NaN, inf, NaN (-inf * 0, as erf's form), 0, 0");
    const float big[] = {-100.0f, 89.0f, NAN};
    cpu_exp_sum_span(r, big, 1.0f, 0.0f, NULL, 3);
    check(r[0] == 0.0f && r[1] == INFINITY && isnan(r[2]),
          "exp(-100) = 0, exp(89) = inf, exp(NaN) = NaN");
}

/* Keep decisions of every run of a stream with samples of per_sample
 * elements: vectorised against scalar (*ok) and against philox_draw (*agree). */
static void keep_runs(bt_rng_key key, size_t per_sample, uint8_t *k1, uint8_t *k2, size_t n,
                      int *ok, int *agree) {
    const cpu_drop d = cpu_drop_of(key, 5, per_sample, 0.3f);
    for (size_t i0 = 0; i0 < 200; i0 += 7)
        for (size_t len = 1; len < n - i0; len = len * 3 + 1) {
            cpu_drop_keep(k1, &d, i0, len);
            scalar_drop_keep(k2, &d, i0, len);
            *ok &= !memcmp(k1, k2, len);
            for (size_t j = 0; j < len; j++) {
                const size_t i = i0 + j;
                const uint32_t r = philox_draw(key.seed, key.stream, 5 + (uint32_t)(i / per_sample),
                                               (uint32_t)(i % per_sample));
                *agree &= k1[j] == (r >= d.thr);
            }
        }
}

static void test_dropout(void) {
    const bt_rng_key key = {0x0123456789abcdefull, 0xfedcba9876543210ull};
    const size_t n = 3000;
    uint8_t *k1 = malloc(n), *k2 = malloc(n);
    int ok = 1, agree = 1;
    /* not multiples of 4: blocks restart at each sample; 37 gives runs of up
     * to 10 blocks, 1001 runs of the 64-block cap, and between them every
     * path of the AVX2 Philox (2 groups of 4 blocks, 1 group, the C tail) */
    keep_runs(key, 37, k1, k2, n, &ok, &agree);
    keep_runs(key, 1001, k1, k2, n, &ok, &agree);
    check(ok, "dropout keep decisions: vectorised == scalar");
    check(agree, "dropout keep decisions == philox.h's philox_draw >= threshold");
    float *x = malloc(n * sizeof *x), *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    fill_inputs(x, n, 4.0f);
    const cpu_drop d = cpu_drop_of(key, 5, 37, 0.3f);
    cpu_dropout_run(a, x, n, &d, 11);
    scalar_dropout_run(b, x, n, &d, 11);
    check(same_bits(a, b, n), "dropout run: vectorised == scalar");
    free(k1), free(k2), free(x), free(a), free(b);
}

int main(void) {
    test_elementwise();
    test_accuracy();
    test_dropout();
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
