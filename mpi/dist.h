/* Ranks and collectives. dist_mpi.c implements them with MPI; dist_single.c
 * is the one-process build, so the training loop has one code path. */
#ifndef BT_DIST_H
#define BT_DIST_H

#include <stdbool.h>
#include <stddef.h>

/* Start (MPI_Init when built with MPI): only commands that run across ranks
 * call it; before it, or without it, this process is rank 0 of 1. */
void dist_init(int *argc, char ***argv);
/* Finish (MPI_Finalize). */
void dist_finalize(void);
/* A rank that waits longer than this in a collective stops the job (exit 4),
 * naming the ranks that did not arrive; 0 waits forever (default 600 s). */
void dist_set_timeout(double seconds);
/* Stop every rank with an error code after a fatal error on this rank. */
void dist_abort(int code);

int dist_rank(void);
int dist_world(void);
/* Rank among the processes on this host (device pick). */
int dist_local_rank(void);
/* Processes of the job on this host (the CPU backend's share of its cores). */
int dist_local_size(void);
/* This host's name. */
const char *dist_hostname(void);
/* True when built with MPI. */
bool dist_is_mpi(void);

/* x[i] = sum over ranks of x[i], in place (the same bits on every rank). */
void dist_allreduce_sum_f64(double *x, int n);
/* x[i] = max over ranks of x[i], in place. */
void dist_allreduce_max_f64(double *x, int n);
/* all[r * n + i] = rank r's mine[i]. */
void dist_allgather_f64(const double *mine, int n, double *all);
/* all[r * len .. ] = rank r's string (len bytes each, NUL-padded). */
void dist_allgather_str(const char *mine, size_t len, char *all);
/* Copy rank 0's bytes to every rank. */
void dist_broadcast(void *buf, size_t bytes);
void dist_barrier(void);
/* all[r * bytes ..] gets rank r's send[rank * bytes ..]: each rank sends
 * `bytes` to every rank (the same `bytes` on every rank; 1-bit's first
 * phase). */
void dist_alltoall_bytes(const void *send, size_t bytes, void *recv);
/* all[r * bytes ..] = rank r's `bytes` of mine, on every rank. */
void dist_allgather_bytes(const void *mine, size_t bytes, void *all);
/* Rank 0's all[r * bytes ..] = rank r's `bytes` of mine (all: rank 0 only;
 * any size: sent in pieces). A checkpoint's per-rank state. */
void dist_gather_bytes(const void *mine, size_t bytes, void *all);
/* Each rank's mine = rank 0's all[rank * bytes ..] (all: rank 0 only). */
void dist_scatter_bytes(const void *all, size_t bytes, void *mine);

/* A nonblocking in-place sum of n floats over ranks. */
typedef struct dist_request dist_request;
dist_request *dist_iallreduce_sum_f32(float *buf, size_t n);
/* The same over a 16-bit wire (distributed.grad_dtype "bf16"): each value
 * travels rounded to bf16; rank r owns segment r of the n values, sums every
 * rank's bf16 copy of it in fp32 in rank order and rounds the sum to bf16
 * once; the segments are then gathered to every rank. So every rank gets the
 * same bits, whatever MPI's algorithms, and sends 2 (W-1)/W n x 2 bytes. Two
 * phases (an all-to-all, then an all-gather): dist_progress moves from the
 * first to the second, dist_wait finishes both. */
dist_request *dist_isum_bf16(float *buf, size_t n);
/* Let MPI progress request r (cheap; call often). Returns false while r is
 * the bf16 wire's and still in its first phase: the caller must then not
 * progress a later request, so that every rank starts the second phases
 * (all-gathers) in the order the requests were made. */
bool dist_progress(dist_request *r);
/* Wait for r and free it. */
void dist_wait(dist_request *r);

#endif
