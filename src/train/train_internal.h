/* What the training run (train_run.c) shares with its rollback (rollback.c)
 * and its evaluations (train_eval.c). */
#ifndef BT_TRAIN_INTERNAL_H
#define BT_TRAIN_INTERNAL_H

#include "store/ckpt.h"
#include "fill_mask.h"
#include "model/loss_scale.h"
#include "resume.h"
#include "data/sample_skips.h"
#include "train.h"

#include <stdio.h>

/* Everything a run owns, freed in one place. */
typedef struct {
    bt_vocab vocab;
    bt_dataset *ds, *valid;
    bt_backend *be;
    bert_model *m;
    bt_optimizer *opt;
    grad_sync *gs;
    ckpt_writer *writer;
    bt_batch_buf *mb;
    uint32_t *first;
    int n_mb_alloc;
    FILE *metrics;
    int lock_fd;             /* OUTPUT_DIR/.bertrain.lock, held for the run (rank 0; -1: none) */
    int most_common;         /* the frequency baseline's token (-1: no data.valid) */
    int eval_batch;          /* sequences per evaluation forward */
    eval_result last_eval;   /* the newest held-out evaluation ... */
    long last_eval_step;     /* ... and its step (0: none yet) */
    int n_fill_mask;         /* eval.fill_mask sentences, tokenized (rank 0) */
    char **fill_mask_texts;
    fill_mask_input *fill_mask;
} run_state;

/* A fresh model on every rank: BERT's initialization from cfg->seed (rank 0's
 * values everywhere), zero optimizer state, and Admin's omegas. s->mb must be
 * allocated for micro-batches of `micro`. false when out of host memory. */
bool run_start_fresh(run_state *s, const bt_config *cfg, int micro);

/* The divergence guard gave up on the current state: reload the newest
 * checkpoint in output_dir (else the one the run resumed from, else the fresh
 * initial state), add the rejected batches after it to skips, and log what
 * happens. Every rank alike. Returns the step to continue from and sets
 * *cursor, the data position; -1 after a one-line error. */
long run_rollback(run_state *s, const bt_config *cfg, const resume_info *start, int micro,
                  sample_skips *skips, sample_skips *rejected, uint64_t *cursor,
                  loss_scaler *scaler);

/* Rank 0, when the run stops for good: what to resume from, into out ("resume
 * from DIR/ckpt-N (--resume auto)", the checkpoint the run started from, or
 * "start again": no checkpoint exists). */
void run_where_to_resume(run_state *s, const bt_config *cfg, const resume_info *start, char *out,
                         size_t outlen);

/* Tokenize eval.fill_mask with the run's vocab and lowercasing (rank 0).
 * false after a one-line error naming the entry (the caller exits 2). */
bool run_fill_mask_prepare(run_state *s, const bt_config *cfg);

/* Release what run_fill_mask_prepare made. */
void run_fill_mask_free(run_state *s);

/* Evaluate after step `step`: held-out MLM loss, accuracy and the frequency
 * baseline on data.valid (every rank), then the eval.fill_mask predictions;
 * console and metrics.jsonl on rank 0. */
void run_evaluate(run_state *s, const bt_config *cfg, long step);

#endif
