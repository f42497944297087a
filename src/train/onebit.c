/* 1-bit Adam's compressed momentum exchange with error feedback (onebit.h). */
#include "onebit.h"

#include "mpi/dist.h"
#include "util/file.h"
#include "util/le.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ONEBIT_MAGIC "BTONEBIT"
#define ONEBIT_VERSION 1
#define HEADER_BYTES 24

struct onebit {
    size_t n, most;        /* values; the longest chunk */
    int world, rank;
    double *werr;          /* (n) this rank's worker error */
    double *serr;          /* (own chunk) this rank's server error */
    unsigned char *send;   /* (W x chunk bytes) compressed chunks, one per rank */
    unsigned char *recv;   /* (W x chunk bytes) */
    bool active;
};

/* +scale for a set sign bit, -scale for a clear one: a product with +-1 is
 * exact, so this is the branch's value without the branch (the signs are
 * random, and a branch on them mispredicts half the time). */
static inline float signed_scale(unsigned bit, float scale) {
    return scale * (float)((int)(bit << 1) - 1);
}

/* Compress the len sums x[i] (input plus old error, in place; sumsq their
 * sum of squares) to signs and the returned scale; x[i] becomes the new
 * error, the sum minus its decoded value. */
static float compress_sums(double *x, size_t len, double sumsq, unsigned char *bits) {
    const float scale = len ? (float)sqrt(sumsq / (double)len) : 0.0f;
    const size_t whole = len / 8;
    for (size_t b = 0; b < whole; b++) {
        double *y = x + 8 * b;
        unsigned byte = 0;
#pragma omp simd reduction(| : byte)
        for (unsigned j = 0; j < 8; j++) {
            const unsigned positive = y[j] >= 0.0;
            byte |= positive << j;
            y[j] -= signed_scale(positive, scale);
        }
        bits[b] = (unsigned char)byte;
    }
    if (whole * 8 < len) {
        unsigned byte = 0;
        for (size_t i = whole * 8; i < len; i++) {
            const unsigned positive = x[i] >= 0.0;
            byte |= positive << (i & 7);
            x[i] -= signed_scale(positive, scale);
        }
        bits[whole] = (unsigned char)byte;
    }
    return scale;
}

/* x[k] += in[k] over len values, and the sums of squares of the new x[k]
 * into sq[k & 3]: four running sums in a fixed pattern (the same bits
 * always), which SUMSQ adds up. sq is held in locals for the loop; len may
 * end anywhere, and a caller that continues a pattern starts at a multiple
 * of 4. */
static void add_and_square(double *x, const double *in_d, const float *in_f, size_t len,
                           double sq[4]) {
    double s0 = sq[0], s1 = sq[1], s2 = sq[2], s3 = sq[3];
    size_t k = 0;
#define ADD_AT(j) (in_d ? in_d[j] : (double)in_f[j])
    for (; k + 4 <= len; k += 4) {
        x[k] += ADD_AT(k);
        x[k + 1] += ADD_AT(k + 1);
        x[k + 2] += ADD_AT(k + 2);
        x[k + 3] += ADD_AT(k + 3);
        s0 += x[k] * x[k];
        s1 += x[k + 1] * x[k + 1];
        s2 += x[k + 2] * x[k + 2];
        s3 += x[k + 3] * x[k + 3];
    }
    double *lane[3] = {&s0, &s1, &s2};
    for (size_t j = 0; k < len; k++, j++) {
        x[k] += ADD_AT(k);
        *lane[j] += x[k] * x[k];
    }
#undef ADD_AT
    sq[0] = s0, sq[1] = s1, sq[2] = s2, sq[3] = s3;
}

#define SUMSQ(sq) (((sq)[0] + (sq)[1]) + ((sq)[2] + (sq)[3]))

float onebit_compress(const double *in, double *err, size_t len, unsigned char *bits) {
    double sq[4] = {0, 0, 0, 0};
    add_and_square(err, in, NULL, len, sq);
    return compress_sums(err, len, SUMSQ(sq), bits);
}

/* Decode a compressed chunk of len values: out[i] = +-scale. */
static void decode(const unsigned char *chunk, size_t len, float *out) {
    float scale;
    memcpy(&scale, chunk, 4);
    const unsigned char *bits = chunk + 4;
    const size_t whole = len / 8;
    for (size_t b = 0; b < whole; b++) {
        const unsigned byte = bits[b];
#pragma omp simd
        for (unsigned j = 0; j < 8; j++) out[8 * b + j] = signed_scale(byte >> j & 1, scale);
    }
    for (size_t i = whole * 8; i < len; i++) out[i] = signed_scale(bits[i >> 3] >> (i & 7) & 1, scale);
}

size_t onebit_chunk_bytes(size_t len) { return 4 + (len + 7) / 8; }

/* Chunk j's first value and length. */
static size_t chunk_start(const onebit *ob, int j) { return ob->n * (size_t)j / (size_t)ob->world; }
static size_t chunk_len(const onebit *ob, int j) { return chunk_start(ob, j + 1) - chunk_start(ob, j); }

onebit *onebit_new(size_t n) {
    onebit *ob = calloc(1, sizeof *ob);
    if (!ob) return NULL;
    ob->n = n;
    ob->world = dist_world();
    ob->rank = dist_rank();
    ob->most = (n + (size_t)ob->world - 1) / (size_t)ob->world;
    const size_t P = onebit_chunk_bytes(ob->most), W = (size_t)ob->world;
    ob->werr = calloc(n + 1, sizeof *ob->werr);
    ob->serr = calloc(ob->most + 1, sizeof *ob->serr);
    ob->send = calloc(W, P);
    ob->recv = calloc(W, P);
    if (!ob->werr || !ob->serr || !ob->send || !ob->recv) {
        onebit_free(ob);
        return NULL;
    }
    return ob;
}

void onebit_free(onebit *ob) {
    if (!ob) return;
    free(ob->werr);
    free(ob->serr);
    free(ob->send);
    free(ob->recv);
    free(ob);
}

bool onebit_active(const onebit *ob) { return ob && ob->active; }

void onebit_reset(onebit *ob) {
    memset(ob->werr, 0, ob->n * sizeof *ob->werr);
    memset(ob->serr, 0, ob->most * sizeof *ob->serr);
    ob->active = false;
}

/* Compress the len sums x (input plus error; the new error after), of sum
 * of squares sumsq, into the chunk at out: its scale, then its signs. */
static void put_chunk(unsigned char *out, double *x, size_t len, double sumsq) {
    const float scale = compress_sums(x, len, sumsq, out + 4);
    memcpy(out, &scale, 4);
}

/* The server's sums for its own chunk: serr[k] += the average over ranks,
 * in rank order, of the decoded chunks in recv. Returns their sum of
 * squares. Works in blocks so that each rank's chunk is decoded in one
 * pass (each value's sum still runs over the ranks in order from 0). */
static double server_sums(onebit *ob, size_t own, size_t P) {
    enum { BLOCK = 2048 }; /* a multiple of 8 */
    const int W = ob->world;
    double sq[4] = {0, 0, 0, 0}, avg[BLOCK];
    float decoded[BLOCK];
    for (size_t k0 = 0; k0 < own; k0 += BLOCK) {
        const size_t m = own - k0 < BLOCK ? own - k0 : BLOCK;
        for (size_t k = 0; k < m; k++) avg[k] = 0.0;
        for (int r = 0; r < W; r++) {
            const unsigned char *c = ob->recv + (size_t)r * P;
            unsigned char piece[4 + BLOCK / 8];
            memcpy(piece, c, 4); /* the scale, then this block's signs */
            memcpy(piece + 4, c + 4 + k0 / 8, (m + 7) / 8);
            decode(piece, m, decoded);
#pragma omp simd
            for (size_t k = 0; k < m; k++) avg[k] += decoded[k];
        }
        for (size_t k = 0; k < m; k++) avg[k] /= W;
        add_and_square(ob->serr + k0, avg, NULL, m, sq);
    }
    return SUMSQ(sq);
}

double onebit_exchange(onebit *ob, float *u) {
    const int W = ob->world;
    const size_t P = onebit_chunk_bytes(ob->most);
    ob->active = true;
    for (int j = 0; j < W; j++) { /* worker side: chunk j for rank j */
        const size_t a = chunk_start(ob, j), len = chunk_len(ob, j);
        double sq[4] = {0, 0, 0, 0}, *x = ob->werr + a;
        add_and_square(x, NULL, u + a, len, sq);
        put_chunk(ob->send + (size_t)j * P, x, len, SUMSQ(sq));
    }
    dist_alltoall_bytes(ob->send, P, ob->recv);
    const size_t own = chunk_len(ob, ob->rank);
    const double sumsq = server_sums(ob, own, P);
    unsigned char *mine = ob->send; /* the worker chunks are sent: reuse */
    put_chunk(mine, ob->serr, own, sumsq);
    memcpy(ob->recv, mine, P);
    dist_allgather_bytes(ob->recv, P, ob->send);
    for (int j = 0; j < W; j++)
        decode(ob->send + (size_t)j * P, chunk_len(ob, j), u + chunk_start(ob, j));
    return 2.0 * (W - 1) * (double)P;
}

void *onebit_gather(const onebit *ob, size_t *bytes) {
    const size_t n = ob->n, W = (size_t)ob->world;
    const size_t total = HEADER_BYTES + (W + 1) * n * sizeof(double);
    unsigned char *blob = NULL;
    double *servers = NULL, *pad = calloc(ob->most + 1, sizeof *pad);
    int ok = 1;
    if (ob->rank == 0) {
        blob = malloc(total);
        servers = malloc((W * ob->most + 1) * sizeof *servers);
        ok = blob && servers && pad;
    }
    double flag = ok && pad ? 0 : 1;
    dist_allreduce_max_f64(&flag, 1);
    if (flag != 0) {
        fprintf(stderr, "bertrain: rank %d: out of host memory for 1-bit Adam's errors\n",
                ob->rank);
        dist_abort(1);
    }
    memcpy(pad, ob->serr, chunk_len(ob, ob->rank) * sizeof *pad);
    dist_gather_bytes(ob->werr, n * sizeof(double), blob ? blob + HEADER_BYTES : NULL);
    dist_gather_bytes(pad, ob->most * sizeof(double), servers);
    free(pad);
    if (ob->rank != 0) return NULL;
    memcpy(blob, ONEBIT_MAGIC, 8);
    le_put(blob + 8, ONEBIT_VERSION, 4);
    le_put(blob + 12, W, 4);
    le_put(blob + 16, n, 8);
    unsigned char *dst = blob + HEADER_BYTES + W * n * sizeof(double);
    for (int j = 0; j < ob->world; j++)
        memcpy(dst + chunk_start(ob, j) * sizeof(double), servers + (size_t)j * ob->most,
               chunk_len(ob, j) * sizeof(double));
    free(servers);
    *bytes = total;
    return blob;
}

/* Rank 0: the file's bytes checked against this run's n: the saved world
 * size (0: no file), or -1 with err. */
static long check_file(const unsigned char *b, size_t len, size_t n, char *err, size_t errlen) {
    if (len < HEADER_BYTES || memcmp(b, ONEBIT_MAGIC, 8) != 0) {
        snprintf(err, errlen, "not a 1-bit Adam error file (bad magic or truncated)");
        return -1;
    }
    const uint64_t version = le_get(b + 8, 4), W0 = le_get(b + 12, 4), n0 = le_get(b + 16, 8);
    if (version != ONEBIT_VERSION) {
        snprintf(err, errlen, "version %llu; this bertrain reads version %d",
                 (unsigned long long)version, ONEBIT_VERSION);
        return -1;
    }
    if (n0 != n || W0 < 1 || W0 > (1u << 20)) {
        snprintf(err, errlen, "errors of %llu values from %llu ranks; the model has %zu values",
                 (unsigned long long)n0, (unsigned long long)W0, n);
        return -1;
    }
    if ((uint64_t)len != HEADER_BYTES + (W0 + 1) * n0 * sizeof(double)) {
        snprintf(err, errlen, "%zu bytes; its header says %llu", len,
                 (unsigned long long)(HEADER_BYTES + (W0 + 1) * n0 * sizeof(double)));
        return -1;
    }
    for (size_t i = 0; i < (W0 + 1) * n; i++) {
        double x;
        memcpy(&x, b + HEADER_BYTES + i * sizeof x, sizeof x);
        if (!isfinite(x)) {
            snprintf(err, errlen, "error value %zu is not finite", i);
            return -1;
        }
    }
    return (long)W0;
}

/* Rank 0: the mean of the W0 saved worker errors into mean (n), in rank order. */
static void mean_worker_error(const unsigned char *b, long W0, size_t n, double *mean) {
    for (size_t i = 0; i < n; i++) {
        double s = 0.0;
        for (long r = 0; r < W0; r++) {
            double x;
            memcpy(&x, b + HEADER_BYTES + ((size_t)r * n + i) * sizeof x, sizeof x);
            s += x;
        }
        mean[i] = s / (double)W0;
    }
}

bool onebit_load(onebit *ob, const char *path, char *err, size_t errlen) {
    const size_t n = ob->n;
    onebit_reset(ob);
    unsigned char *blob = NULL;
    double saved_world = 0; /* 0: no file; -1: a bad one */
    if (ob->rank == 0 && access(path, F_OK) == 0) {
        size_t len = 0;
        blob = (unsigned char *)file_read_all(path, &len);
        if (!blob) {
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
            saved_world = -1;
        } else {
            char why[256];
            saved_world = (double)check_file(blob, len, n, why, sizeof why);
            if (saved_world < 0) snprintf(err, errlen, "%s: %s", path, why);
        }
    }
    dist_broadcast(&saved_world, sizeof saved_world);
    if (saved_world <= 0) {
        free(blob);
        return saved_world == 0;
    }
    const long W0 = (long)saved_world;
    double *all = malloc((n + 1) * sizeof *all);
    if (!all) {
        fprintf(stderr, "bertrain: rank %d: out of host memory for 1-bit Adam's errors\n",
                ob->rank);
        dist_abort(1);
    }
    if (W0 == ob->world) { /* each rank its own */
        dist_scatter_bytes(blob ? blob + HEADER_BYTES : NULL, n * sizeof(double), ob->werr);
    } else {
        if (ob->rank == 0) {
            mean_worker_error(blob, W0, n, all);
            printf("resume: 1-bit Adam's errors were saved by %ld ranks, this job has %d: each "
                   "rank starts from their mean worker error, the server errors are cut anew\n",
                   W0, ob->world);
        }
        dist_broadcast(all, n * sizeof *all);
        memcpy(ob->werr, all, n * sizeof *all);
    }
    if (ob->rank == 0) memcpy(all, blob + HEADER_BYTES + (size_t)W0 * n * sizeof(double),
                              n * sizeof *all);
    dist_broadcast(all, n * sizeof *all);
    memcpy(ob->serr, all + chunk_start(ob, ob->rank), chunk_len(ob, ob->rank) * sizeof *all);
    free(all);
    free(blob);
    ob->active = true;
    return true;
}
