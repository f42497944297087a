/* Ranks and collectives. dist_mpi.c implements them with MPI; dist_single.c
 * is the one-process build, so the training loop has one code path. */
#ifndef BT_DIST_H
#define BT_DIST_H

/* Start (MPI_Init when built with MPI). */
void dist_init(int *argc, char ***argv);
/* Finish (MPI_Finalize). */
void dist_finalize(void);
/* Stop every rank with an error code after a fatal error on this rank. */
void dist_abort(int code);

int dist_rank(void);
int dist_world(void);
/* Rank among the processes on this host (device pick). */
int dist_local_rank(void);

/* x[i] = sum over ranks of x[i], in place (same order on every rank). */
void dist_allreduce_sum_f64(double *x, int n);

#endif
