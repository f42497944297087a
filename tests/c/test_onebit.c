/* 1-bit Adam's compression (src/train/onebit.h) in one process:
 *  - compress and decompress: each value decodes to +scale where its input
 *    plus error is >= 0 (a negative zero included), else -scale; the scale is
 *    the fp32 root mean square of the inputs plus errors;
 *  - error feedback: over 300 rounds of momentum-like inputs, the decoded
 *    value plus the new error equals the input plus the old error exactly
 *    (compared as exact sums with TwoSum, so no rounding hides a difference),
 *    and the running sum of the decoded values is the running sum of the
 *    inputs minus the current error;
 *  - the checkpoint's errors: onebit_gather's file read back by onebit_load
 *    continues the exchange bit for bit as if never stopped; a file from 3
 *    ranks loaded into this 1-rank world gives the mean worker error (in
 *    rank order) and the whole server error, checked through the exchange;
 *  - bad files (magic, size, a NaN, another n) are refused with a reason.
 * Exit 0 when everything holds. */
#include "train/onebit.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                      \
            printf(__VA_ARGS__);                                                             \
            printf("\n");                                                                    \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

/* A counter-based uniform in [0, 1) for (round, i, stream). */
static double uniform(uint64_t round, uint64_t i, uint64_t stream) {
    uint64_t z = round * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xBF58476D1CE4E5B9ull ^ stream << 56;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

/* A momentum-like input: mostly of one magnitude, some exact zeros, some
 * negative zeros, some up to 2^10 smaller, a few 2^6 larger. */
static float input(uint64_t round, uint64_t i) {
    const double u = uniform(round, i, 1), v = uniform(round, i, 2) * 2.0 - 1.0;
    if (u < 0.02) return 0.0f;
    if (u < 0.03) return -0.0f;
    const double mag = u < 0.2 ? ldexp(1.0, -(int)(uniform(round, i, 3) * 10)) : u > 0.99 ? 64 : 1;
    return (float)(v * mag * 1e-3);
}

/* a + b as an exact pair (s, e): s = fl(a + b), e = (a + b) - s (TwoSum). */
static void two_sum(double a, double b, double *s, double *e) {
    *s = a + b;
    const double bb = *s - a;
    *e = (a - (*s - bb)) + (b - bb);
}

static void check_compress(void) {
    enum { N = 4099, ROUNDS = 300 };
    double *err = calloc(N, sizeof *err), *in = malloc(N * sizeof *in);
    long double *sum_in = calloc(N, sizeof *sum_in), *sum_out = calloc(N, sizeof *sum_out);
    unsigned char bits[(N + 7) / 8];
    long inexact = 0, sign_wrong = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double old[N], x[N];
        long double sumsq = 0;
        for (int i = 0; i < N; i++) {
            in[i] = input((uint64_t)r, (uint64_t)i);
            old[i] = err[i];
            x[i] = in[i] + err[i];
            sumsq += (long double)x[i] * x[i];
        }
        const float scale = onebit_compress(in, err, N, bits);
        CHECK(scale == (float)sqrtl(sumsq / N), "round %d: scale %.9g, the rms is %.9g", r,
              (double)scale, (double)sqrtl(sumsq / N));
        for (int i = 0; i < N; i++) {
            const float c = onebit_value(bits, (size_t)i, scale);
            if (c != (x[i] >= 0.0 ? scale : -scale)) sign_wrong++;
            double s1, e1, s2, e2; /* in + old and c + new as exact sums */
            two_sum(in[i], old[i], &s1, &e1);
            two_sum(c, err[i], &s2, &e2);
            if (s1 != s2 || e1 != e2) inexact++;
            sum_in[i] += in[i];
            sum_out[i] += c;
        }
    }
    CHECK(sign_wrong == 0, "%ld values decode to the wrong sign", sign_wrong);
    CHECK(inexact == 0, "%ld of %d decoded values plus new errors differ from inputs plus old "
          "errors", inexact, N * ROUNDS);
    long drift = 0;
    for (int i = 0; i < N; i++)
        if (fabsl(sum_out[i] - (sum_in[i] - err[i])) > 1e-12L * (fabsl(sum_in[i]) + 1e-3L)) drift++;
    CHECK(drift == 0, "%ld running sums of decoded values differ from inputs minus error", drift);
    double z[3] = {-0.0, 0.0, -1e-30}, ze[3] = {0, 0, 0};
    unsigned char zb[1];
    const float zs = onebit_compress(z, ze, 3, zb);
    CHECK(onebit_value(zb, 0, zs) == zs && onebit_value(zb, 1, zs) == zs &&
          onebit_value(zb, 2, zs) == -zs, "signed zeros: -0 and +0 decode to +scale");
    printf("compress: %d rounds of %d values: signs, scales, exact error feedback\n", ROUNDS, N);
    free(err);
    free(in);
    free(sum_in);
    free(sum_out);
}

/* The exchange in a 1-rank world from errors (werr, serr), by the pure
 * functions: the worker compresses u + werr, the server u' + serr. */
static void simulate(float *u, double *werr, double *serr, size_t n) {
    double *in = malloc(n * sizeof *in);
    unsigned char *bits = malloc((n + 7) / 8);
    for (size_t i = 0; i < n; i++) in[i] = u[i];
    float s = onebit_compress(in, werr, n, bits);
    for (size_t i = 0; i < n; i++) in[i] = (double)onebit_value(bits, i, s) / 1;
    s = onebit_compress(in, serr, n, bits);
    for (size_t i = 0; i < n; i++) u[i] = onebit_value(bits, i, s);
    free(in);
    free(bits);
}

static void fill(float *u, size_t n, int round) {
    for (size_t i = 0; i < n; i++) u[i] = input((uint64_t)round + 1000, i);
}

static bool write_file(const char *path, const void *b, size_t len) {
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(b, 1, len, f) == len;
    if (f) fclose(f);
    return ok;
}

static void put_le(unsigned char *p, uint64_t x, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(x >> (8 * i));
}

static void check_checkpoint(const char *dir) {
    enum { N = 1001 };
    char path[1024];
    snprintf(path, sizeof path, "%s/onebit.bin", dir);
    onebit *a = onebit_new(N), *b = onebit_new(N);
    float u[N], v[N];
    char err[512];
    CHECK(!onebit_active(a), "a new exchange has errors to save");
    for (int r = 0; r < 5; r++) {
        fill(u, N, r);
        onebit_exchange(a, u);
    }
    size_t len = 0;
    void *blob = onebit_gather(a, &len);
    CHECK(blob && len == 24 + 2 * N * 8, "gathered %zu bytes", len);
    CHECK(blob && write_file(path, blob, len), "cannot write %s", path);
    CHECK(onebit_load(b, path, err, sizeof err), "load: %s", err);
    long differ = 0;
    for (int r = 5; r < 12; r++) {
        fill(u, N, r);
        memcpy(v, u, sizeof u);
        onebit_exchange(a, u);
        onebit_exchange(b, v);
        differ += memcmp(u, v, sizeof u) != 0;
    }
    CHECK(differ == 0, "%ld of 7 exchanges after a reload differ from the uninterrupted ones",
          differ);
    /* 3 ranks' file: this world starts from the mean worker error */
    const size_t big = 24 + 4 * N * 8;
    unsigned char *f3 = malloc(big);
    memcpy(f3, "BTONEBIT", 8);
    put_le(f3 + 8, 1, 4);
    put_le(f3 + 12, 3, 4);
    put_le(f3 + 16, N, 8);
    double werr[N], serr[N];
    for (size_t i = 0; i < N; i++) {
        double s = 0.0;
        for (int r = 0; r < 3; r++) {
            const double e = (uniform(7, i, (uint64_t)r) - 0.5) * 1e-3;
            memcpy(f3 + 24 + ((size_t)r * N + i) * 8, &e, 8);
            s += e;
        }
        werr[i] = s / 3;
        serr[i] = (uniform(8, i, 0) - 0.5) * 1e-4;
        memcpy(f3 + 24 + (3 * N + i) * 8, &serr[i], 8);
    }
    CHECK(write_file(path, f3, big), "cannot write %s", path);
    CHECK(onebit_load(b, path, err, sizeof err), "load of 3 ranks' errors: %s", err);
    fill(u, N, 99);
    memcpy(v, u, sizeof u);
    onebit_exchange(b, u);
    simulate(v, werr, serr, N);
    CHECK(memcmp(u, v, sizeof u) == 0, "3 ranks' errors in 1 rank: not the mean worker error and "
          "the whole server error");
    /* refusals */
    struct { const char *what; size_t at; unsigned char byte; size_t len; } bad[] = {
        {"bad magic", 0, 'X', big}, {"truncated", 0, 'B', big - 8},
        {"a NaN", 24 + 7, 0xff, big}, {"another n", 16, 0x02, big}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        unsigned char *c = malloc(big);
        memcpy(c, f3, big);
        c[bad[k].at] = bad[k].byte;
        if (bad[k].at == 24 + 7) c[24 + 6] = 0xf8; /* exponent all ones, mantissa set */
        write_file(path, c, bad[k].len);
        err[0] = 0;
        CHECK(!onebit_load(b, path, err, sizeof err) && strstr(err, path),
              "%s: loaded (or no path in \"%s\")", bad[k].what, err);
        printf("refused (%s): %s\n", bad[k].what, err);
        free(c);
    }
    unlink(path);
    CHECK(onebit_load(b, path, err, sizeof err) && !onebit_active(b), "no file: not zero errors");
    free(f3);
    free(blob);
    onebit_free(a);
    onebit_free(b);
    printf("checkpoint: reload continues bit for bit; 3 ranks' errors to 1 by the mean\n");
}

int main(void) {
    char dir[] = "/tmp/test_onebit.XXXXXX";
    if (!mkdtemp(dir)) {
        printf("test_onebit: cannot make a temporary directory\n");
        return 1;
    }
    check_compress();
    check_checkpoint(dir);
    rmdir(dir);
    printf("%s\n", failures ? "test_onebit: FAIL" : "test_onebit: PASS");
    return failures ? 1 : 0;
}
