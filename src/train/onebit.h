/* 1-bit Adam's momentum exchange (optimizer.type "OneBitAdam", after its
 * freeze_step warm-up): DeepSpeed's compressed all-reduce, with error
 * feedback on the worker and on the server side.
 *
 * The n values are cut into W chunks, chunk j served by rank j. Each rank
 * adds its worker error to its momentum estimate (in fp64), sends chunk j to
 * rank j as one sign bit a value and one fp32 scale (the chunk's root mean
 * square), and keeps what the signs did not carry as its new worker error.
 * Rank j averages the W decoded chunks in rank order, adds its server error,
 * and compresses the result the same way; the compressed chunks are gathered
 * to every rank. So every rank decodes the same bits, whatever its share of
 * the batch, and each rank sends about 2 (W-1)/W n/8 bytes a step: 32x less
 * than an fp32 all-reduce.
 *
 * The errors are part of the checkpoint (onebit.bin), so a resumed run is
 * bit for bit the run that was not stopped. */
#ifndef BT_ONEBIT_H
#define BT_ONEBIT_H

#include <stdbool.h>
#include <stddef.h>

/* ---- the compression (pure functions; tests/c/test_onebit.c) ---- */

/* Compress len values in[i] + err[i] (summed in fp64) to signs (bits, LSB
 * first; bit set: the sum is >= 0) and the returned scale: the fp32 root
 * mean square of the sums. err[i] becomes the sum minus its decoded value
 * (onebit_value), so the decoded value plus the new error is the input plus
 * the old error. */
float onebit_compress(const double *in, double *err, size_t len, unsigned char *bits);

/* Element i of a compressed chunk: +scale or -scale. */
static inline float onebit_value(const unsigned char *bits, size_t i, float scale) {
    return bits[i >> 3] >> (i & 7) & 1 ? scale : -scale;
}

/* Bytes of one compressed chunk of up to len values: the scale, then the
 * sign bits. */
size_t onebit_chunk_bytes(size_t len);

/* ---- the exchange ---- */

typedef struct onebit onebit;

/* The exchange of n values over this job's ranks, errors zero. NULL when
 * out of host memory. */
onebit *onebit_new(size_t n);
void onebit_free(onebit *ob);

/* Replace u (n values: this rank's momentum estimate) by the average over
 * ranks, compressed on both sides with error feedback: the same bits on
 * every rank. Every rank calls it. Returns the bytes this rank sent. */
double onebit_exchange(onebit *ob, float *u);

/* Whether any exchange ran since the errors were zero (they then belong in a
 * checkpoint). */
bool onebit_active(const onebit *ob);

/* The checkpoint file onebit.bin: a 24-byte little-endian header (magic
 * BTONEBIT, u32 version 1, u32 world size W, u64 n), then each rank's worker
 * error (W x n fp64, rank order), then the server errors (n fp64 in element
 * order: chunk j from rank j). Every rank calls it; rank 0 gets the file's
 * bytes (malloc'd, *bytes their size; NULL elsewhere or out of memory). */
void *onebit_gather(const onebit *ob, size_t *bytes);

/* Load the errors from a checkpoint's onebit.bin at path (none there: zero
 * errors). Every rank calls it; rank 0 reads. With the file's world size,
 * every rank gets its own errors back; with another world size each rank
 * starts from the mean of the saved worker errors, and the server errors
 * are cut into the new world's chunks (the sum of what the errors still owe
 * the average is kept). false (on every rank) with "PATH: problem" in err
 * on rank 0. */
bool onebit_load(onebit *ob, const char *path, char *err, size_t errlen);

/* Back to zero errors (a rollback to the initial weights). */
void onebit_reset(onebit *ob);

#endif
