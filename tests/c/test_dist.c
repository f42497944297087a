/* The dist layer called directly under mpiexec.
 *   test_dist sizes   rank r starts a gradient all-reduce of 100 + r floats:
 *                     the job must stop (exit 2) before it runs, so
 *                     "reduced" is never printed (tests/mpi-agree.sh).
 *   test_dist bf16 N  the bf16 wire's sum of N values a rank (each rank's
 *                     values a function of rank and index, with values that
 *                     round, large and small exponents, signed zeros, an
 *                     Inf, a NaN, and one whose sum only rank order gives) against the sum computed here from
 *                     every rank's values: each rounded to bf16, added in
 *                     fp32 in rank order, rounded to bf16 once. Bits must
 *                     be equal (tests/grad-wire.sh).
 *   test_dist rate MB rank 0 sends MB megabytes to the other ranks (a
 *                     broadcast: with 2 ranks one point-to-point stream)
 *                     after a warm-up; rank 1 prints the rate it received
 *                     at (tests/pool.sh: the emulated link's rate).
 *   test_dist onebit N FILE  1-bit Adam's exchange (train/onebit.h) of N
 *                     values a rank for 20 rounds against the same exchange
 *                     simulated here with every rank's inputs and errors:
 *                     bits must be equal on every rank; after round 10 the
 *                     errors are gathered into FILE and loaded back, and the
 *                     rounds after must still equal the uninterrupted
 *                     simulation (tests/onebit.sh).
 *   test_dist allreduce MB REPS  times REPS fp32 all-reduces of MB megabytes
 *                     (the gradient all-reduce's call, in place) after one
 *                     to warm up; rank 0 prints the mean time and the bus
 *                     bandwidth, 2 (W-1)/W x bytes / time
 *                     (scripts/bench-allreduce.sh). */
#include "backends/common/half.h"
#include "mpi/dist.h"
#include "train/onebit.h"

#include <math.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rank r's value i: spread over signs, exponents and mantissas. */
static float value(int r, size_t i) {
    if (i == 7) return r == 1 ? INFINITY : 1.0f;
    if (i == 11) return r == 0 ? NAN : 2.0f;
    if (i == 13) return r % 2 ? -0.0f : 0.0f;
    /* in rank order (1 + 2^-24) - 1 = 0; in any other order 2^-24 or more */
    if (i == 17) return r == 0 ? 1.0f : r == 1 ? ldexpf(1.0f, -24) : r == 2 ? -1.0f : 0.0f;
    const uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 7u);
    const float mant = 1.0f + (float)(h & 0xffffu) / 65536.0f;
    return ((h >> 16) & 1 ? -mant : mant) * ldexpf(1.0f, (int)((h >> 17) % 40) - 20);
}

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return bt_f32_from_bits(bf16_to_f32(f32_to_bf16(u)));
}

/* The bf16 wire on n values a rank against its definition; 0 when equal. */
static int check_bf16(size_t n) {
    const int me = dist_rank(), W = dist_world();
    float *buf = malloc(n * sizeof *buf);
    if (!buf) return 1;
    for (size_t i = 0; i < n; i++) buf[i] = value(me, i);
    dist_request *r = dist_isum_bf16(buf, n);
    dist_progress(r);
    dist_wait(r);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (int q = 0; q < W; q++) s += bf16_round(value(q, i));
        const float want = bf16_round(s);
        if (memcmp(&want, &buf[i], 4) != 0 && !bad++) first = i;
    }
    if (bad)
        printf("rank %d: bf16 wire: %zu of %zu sums differ from the definition (the first: "
               "value %zu)\n", me, bad, n, first);
    else
        printf("rank %d: bf16 wire: %zu sums over %d ranks equal the definition bit for bit\n",
               me, n, W);
    free(buf);
    return bad ? 1 : 0;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Rank 0 sends mb megabytes to the others; rank 1 prints the rate. */
static int measure_rate(size_t mb) {
    const size_t bytes = mb << 20;
    char *buf = calloc(bytes, 1);
    if (!buf) return 1;
    dist_broadcast(buf, bytes / 8); /* warm-up: connections set up */
    dist_barrier();
    const double t0 = seconds();
    dist_broadcast(buf, bytes);
    const double t = seconds() - t0;
    if (dist_rank() == 1) printf("rate %.2f MB/s (%zu MB in %.3f s)\n", bytes / t / 1e6, mb, t);
    free(buf);
    return 0;
}

/* Rank r's momentum estimate i at round t: of one magnitude, some zeros. */
static float estimate(int r, int t, size_t i) {
    const uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + (uint32_t)t * 9973u);
    if (h % 37 == 0) return 0.0f;
    return ((float)(h & 0xffffu) / 32768.0f - 1.0f) * 1e-3f * (1.0f + (float)r);
}

/* The exchange of every rank's estimates at round t, simulated from the
 * definition: werr (W x n) and serr (n) are every rank's errors; out gets
 * what every rank must decode. */
static void simulate_round(int W, size_t n, int t, double *werr, double *serr, float *out) {
    double *in = malloc((n + 1) * sizeof *in), *avg = calloc(n + 1, sizeof *avg);
    unsigned char *bits = malloc(n / 8 + 2);
    for (int r = 0; r < W; r++)
        for (int j = 0; j < W; j++) {
            const size_t a = n * j / W, len = n * (j + 1) / W - a;
            for (size_t k = 0; k < len; k++) in[k] = estimate(r, t, a + k);
            const float s = onebit_compress(in, werr + (size_t)r * n + a, len, bits);
            for (size_t k = 0; k < len; k++) avg[a + k] += onebit_value(bits, k, s);
        }
    for (int j = 0; j < W; j++) {
        const size_t a = n * j / W, len = n * (j + 1) / W - a;
        for (size_t k = 0; k < len; k++) in[k] = avg[a + k] / W;
        const float s = onebit_compress(in, serr + a, len, bits);
        for (size_t k = 0; k < len; k++) out[a + k] = onebit_value(bits, k, s);
    }
    free(in);
    free(avg);
    free(bits);
}

/* 20 rounds of the exchange against the simulation, reloaded after 10. */
static int check_onebit(size_t n, const char *file) {
    const int me = dist_rank(), W = dist_world();
    double *werr = calloc((size_t)W * n + 1, sizeof *werr), *serr = calloc(n + 1, sizeof *serr);
    float *u = malloc((n + 1) * sizeof *u), *want = malloc((n + 1) * sizeof *want);
    onebit *ob = onebit_new(n);
    if (!werr || !serr || !u || !want || !ob) return 1;
    int bad = 0;
    for (int t = 0; t < 20; t++) {
        if (t == 10) { /* a checkpoint and a resume */
            size_t len = 0;
            void *blob = onebit_gather(ob, &len);
            if (me == 0) {
                FILE *f = fopen(file, "wb");
                if (!f || fwrite(blob, 1, len, f) != len) bad++;
                if (f) fclose(f);
            }
            free(blob);
            dist_barrier();
            onebit_free(ob);
            ob = onebit_new(n);
            char err[512];
            if (!ob || !onebit_load(ob, file, err, sizeof err)) {
                printf("rank %d: load: %s\n", me, err);
                return 1;
            }
        }
        for (size_t i = 0; i < n; i++) u[i] = estimate(me, t, i);
        onebit_exchange(ob, u);
        simulate_round(W, n, t, werr, serr, want);
        if (memcmp(u, want, n * sizeof *u) != 0) {
            printf("rank %d: 1-bit exchange, round %d: differs from the simulation\n", me, t);
            bad++;
        }
    }
    if (!bad)
        printf("rank %d: 1-bit exchange of %zu values over %d ranks: 20 rounds equal the "
               "simulation bit for bit, reloaded after round 10\n", me, n, W);
    onebit_free(ob);
    free(werr);
    free(serr);
    free(u);
    free(want);
    return bad ? 1 : 0;
}

/* REPS all-reduces of mb megabytes: rank 0 prints time and bus bandwidth. */
static int time_allreduce(size_t mb, int reps) {
    const size_t n = (mb << 20) / sizeof(float);
    float *buf = malloc(n * sizeof *buf);
    if (!buf) return 1;
    for (size_t i = 0; i < n; i++) buf[i] = 1e-3f;
    dist_wait(dist_iallreduce_sum_f32(buf, n));
    dist_barrier();
    const double t0 = seconds();
    for (int r = 0; r < reps; r++) dist_wait(dist_iallreduce_sum_f32(buf, n));
    const double t = (seconds() - t0) / reps, W = dist_world();
    if (dist_rank() == 0)
        printf("allreduce %zu MB over %d ranks: %.1f ms, bus bandwidth %.1f MB/s\n", mb,
               dist_world(), t * 1e3, 2.0 * (W - 1) / W * (double)(n * 4) / t / 1e6);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    dist_init(&argc, &argv);
    if (argc == 3 && strcmp(argv[1], "rate") == 0) {
        const int rc = measure_rate((size_t)strtoul(argv[2], NULL, 10));
        dist_finalize();
        return rc;
    }
    if (argc == 3 && strcmp(argv[1], "bf16") == 0) {
        const int rc = check_bf16((size_t)strtoul(argv[2], NULL, 10));
        dist_finalize();
        return rc;
    }
    if (argc == 4 && strcmp(argv[1], "allreduce") == 0) {
        const int rc = time_allreduce((size_t)strtoul(argv[2], NULL, 10), atoi(argv[3]));
        dist_finalize();
        return rc;
    }
    if (argc == 4 && strcmp(argv[1], "onebit") == 0) {
        const int rc = check_onebit((size_t)strtoul(argv[2], NULL, 10), argv[3]);
        dist_finalize();
        return rc;
    }
    if (argc < 2 || strcmp(argv[1], "sizes") != 0) {
        fprintf(stderr, "usage: test_dist sizes | bf16 N | rate MB | onebit N FILE | allreduce MB REPS (under "
                "mpiexec -n 2 or more)\n");
        dist_finalize();
        return 2;
    }
    float buf[128];
    for (int i = 0; i < 128; i++) buf[i] = (float)i;
    dist_request *r = dist_iallreduce_sum_f32(buf, 100 + (size_t)dist_rank());
    dist_wait(r);
    printf("rank %d: reduced (%g)\n", dist_rank(), (double)buf[99]);
    dist_finalize();
    return 0;
}
