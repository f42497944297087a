/* Gradient allreduce in buckets while backward still runs: each bucket of
 * finished gradients is staged to the host and summed over ranks with a
 * nonblocking allreduce, so communication hides behind the remaining layers. */
#ifndef BT_GRAD_SYNC_H
#define BT_GRAD_SYNC_H

#include "model/bert.h"
#include "model/optim.h"
#include "onebit.h"

typedef struct grad_sync grad_sync;

/* Buckets of about bucket_bytes over m's flat gradients, summed in fp32 or
 * over the bf16 wire (dist_isum_bf16: distributed.grad_dtype); with
 * onebit, also 1-bit Adam's momentum exchange. NULL when one rank. */
grad_sync *grad_sync_new(bert_model *m, size_t bucket_bytes, bool bf16, bool onebit);
void grad_sync_free(grad_sync *gs);

/* Elements [begin, end) of the gradients are final for this step (called by
 * bert_backward through bert_pass.grads_ready, highest ranges first). */
void grad_sync_ready(void *gs, size_t begin, size_t end);

/* Let the buckets in flight move (MPI progresses them only inside its
 * calls): called between the backward's ops (bert_pass.between_ops). */
void grad_sync_progress(void *gs);

/* Every bucket's all-reduce started: what is pending becomes a bucket, and
 * the copies not yet seen to arrive are waited for. Called once the backward
 * is issued and before any other collective of the step: a rank whose
 * copies arrive late (or a backend that runs them only at a wait) must not
 * start its buckets after a collective another rank started them before. */
void grad_sync_start(grad_sync *gs);

/* grad_sync_start, then wait for every bucket and put the sums back on the
 * device. Returns the seconds spent waiting (communication not hidden); the
 * bytes this rank sent for the step into *wire_bytes: 2 (W-1)/W n x 4 (fp32,
 * what a bandwidth-optimal all-reduce sends) or x 2 (the bf16 wire, exact). */
double grad_sync_finish(grad_sync *gs, double *wire_bytes);

/* 1-bit Adam past its warm-up, instead of the gradient all-reduce: this
 * rank's momentum estimate b1 m + (1 - b1) W g (W ranks; g its gradients
 * times grad_scale, which the ranks' gradients sum to the global one) goes
 * through onebit_exchange, and the ranks' average lands in the gradient
 * buffer and *host points at its host copy and the first moment it follows
 * (for optim_step's `given`; valid until the next call). Returns the
 * seconds it took; the bytes sent into *wire_bytes. */
double grad_sync_momentum(grad_sync *gs, bt_optimizer *o, float grad_scale,
                          double *wire_bytes, bt_host_momentum *host);

/* The 1-bit exchange's state (its errors, for checkpoints), or NULL. */
onebit *grad_sync_onebit(grad_sync *gs);

#endif
