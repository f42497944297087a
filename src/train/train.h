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
    int layers_dropped; /* LayerDrop: encoder layers this step skipped */
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

/* One optimizer step over this rank's micro-batches: global counts first, so
 * each loss gradient is seeded with 1/count and the update is the same
 * however the global batch is split. A guard (or NULL) may refuse the
 * update: the result says skipped, and why. With fp16 a loss scaler (else
 * NULL) scales the loss, and skips the update when the gradients overflow. */
step_result train_step(bert_model *m, bt_optimizer *opt, const bt_config *cfg, long step,
                       const step_batch *in, double lr, grad_sync *gs, const bt_guard *guard,
                       loss_scaler *scaler);

/* `bertrain train`: the whole run described by cfg. Returns the exit code. */
int train_main(const bt_config *cfg);

/* train_main that also hands back the final parameters (malloc'd, n_params
 * floats in the flat layout) when final_params is not NULL. */
int train_run(const bt_config *cfg, float **final_params, size_t *n_params);


#endif
