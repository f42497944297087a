/* The step loop: micro-batches -> (allreduce) -> clip -> optimizer -> log. */
#ifndef BT_TRAIN_H
#define BT_TRAIN_H

#include "model/bert.h"
#include "config/config.h"
#include "data/dataset.h"
#include "grad_sync.h"
#include "guard.h"
#include "model/loss_scale.h"
#include "model/optim.h"
#include "store/ckpt.h"

/* What one optimizer step did, summed over ranks. */
typedef struct {
    double loss;       /* mean MLM loss + mean NSP loss (as HF's total loss) */
    double z_loss;       /* model.z_loss x mean log_z^2 over MLM rows (also minimized) */
    double attn_penalty; /* model.attention_logit_penalty x mean squared score (also minimized) */
    double mlm_loss, mlm_acc, nsp_loss, nsp_acc;
    long n_masked, n_nsp, n_samples, n_tokens;
    double grad_norm;  /* before clipping */
    double lr;
    double compute_s;  /* this rank: forward + backward */
    double idle_s;     /* this rank: waiting for slower ranks */
    double comm_s;     /* this rank: gradient communication not hidden behind compute */
    double wire_bytes; /* this rank: the bytes its gradient exchange sent (grad_sync_finish) */
    bool onebit;       /* the exchange was 1-bit Adam's compressed momentum (grad_sync_momentum) */
    int layers_dropped; /* LayerDrop: encoder layers this step skipped */
    long top_rows;      /* this rank: the rows its top layers computed after attention for
                         * the heads, their padding not counted (bert_tape.n_top_read;
                         * B*T per micro-batch without one) */
    long top_rows_run, head_rows_run; /* this rank: the rows its top layers and MLM heads
                                       * computed, padding included (bert_tape.n_top, n_head) */
    bool skipped;      /* no update (parameters untouched): the guard refused it, or fp16 overflowed */
    bool overflow;     /* fp16: the gradients overflowed (skipped by the loss scaler) */
    bool at_min_scale; /* fp16: ... at the minimum loss scale: the run must stop */
    double loss_scale, next_loss_scale; /* fp16: the scale this step used, the next one's */
    char skip_why[96];
} step_result;

/* One step's input: this rank's micro-batches, already filled on the host. */
typedef struct {
    bt_batch_buf *mb;             /* n_micro micro-batches */
    const uint32_t *first_sample; /* each one's first sample: its place in the global batch */
    int n_micro;
    uint64_t run_position;        /* run position of the global batch's first sample */
    long global;                  /* samples in the global batch */
} step_batch;

/* The seams a caller of train_run may give a run: callbacks at its named
 * places, each member NULL for none (the bertrain program gives no observer
 * at all). The test build (tests/c/bertrain_test, tests/c/fault_hooks.c)
 * injects its faults and traces through them. Steps are 1-based. */
typedef struct train_observer {
    void *ctx; /* passed to each callback */
    /* the training backend as opened: returns the one the run uses (a
     * wrapper that forwards to it), or NULL when out of memory */
    bt_backend *(*wrap_backend)(void *ctx, bt_backend *be);
    /* `step` of model m begins; it trains run positions [from, to) */
    void (*step_begin)(void *ctx, bert_model *m, long step, uint64_t from, uint64_t to);
    /* the step's MLM loss summed over ranks, before it is averaged and guarded */
    void (*loss_summed)(void *ctx, long step, double *mlm_loss_sum);
    /* one of this rank's micro-batches of `step` holds run positions [from, to) */
    void (*micro_batch)(void *ctx, int rank, long step, uint64_t from, uint64_t to);
    /* LayerDrop skips layer l of `step` where skip[l] is set (n_layers in all) */
    void (*layerdrop)(void *ctx, int rank, long step, const unsigned char *skip, int n_layers);
    /* `step` is done on this rank (its update applied or skipped) */
    void (*step_done)(void *ctx, bert_model *m, int rank, long step);
    ckpt_points ckpt; /* the checkpoint writer's points (ckpt.h) */
} train_observer;

/* One optimizer step over this rank's micro-batches: global counts first, so
 * each loss gradient is seeded with 1/count and the update is the same
 * however the global batch is split. A guard (or NULL) may refuse the
 * update: the result says skipped, and why. With fp16 a loss scaler (else
 * NULL) scales the loss, and skips the update when the gradients overflow.
 * obs (or NULL) is told the step's places (train_observer). */
step_result train_step(bert_model *m, bt_optimizer *opt, const bt_config *cfg, long step,
                       const step_batch *in, double lr, grad_sync *gs, const bt_guard *guard,
                       loss_scaler *scaler, const train_observer *obs);

/* `bertrain train`: the whole run described by cfg, observed by obs (or
 * NULL). Returns the exit code. */
int train_main(const bt_config *cfg, const train_observer *obs);

/* train_main that also hands back the final parameters (malloc'd, n_params
 * floats in the flat layout) when final_params is not NULL. */
int train_run(const bt_config *cfg, const train_observer *obs, float **final_params,
              size_t *n_params);


#endif
