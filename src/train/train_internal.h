/* What the training run (train_run.c: the loop) shares with its set-up
 * (run_setup.c), its rollback (rollback.c) and its evaluations
 * (train_eval.c). */
#ifndef BT_TRAIN_INTERNAL_H
#define BT_TRAIN_INTERNAL_H

#include "data/sample_skips.h"
#include "fill_mask.h"
#include "guard.h"
#include "metrics.h"
#include "model/loss_scale.h"
#include "plan.h"
#include "resume.h"
#include "store/ckpt.h"
#include "train.h"

#include "backends/profile.h"

#include <stdio.h>

/* train --profile N: the steps the profiler times, [first, end). */
typedef struct {
    bt_profiler *p; /* NULL: not profiling */
    long first, end;
} run_profile;

/* Everything a run owns, freed in one place. */
typedef struct {
    bt_vocab vocab;
    bt_dataset *ds, *valid;
    const train_observer *obs; /* the caller's seams (train.h), or NULL */
    bt_backend *be;
    bert_model *m;
    bt_optimizer *opt;
    grad_sync *gs;
    ckpt_writer *writer;
    bt_batch_buf *mb;
    uint32_t *first;
    int n_mb_alloc;
    metrics_log metrics;     /* OUTPUT_DIR/metrics.jsonl (rank 0) */
    int ckpt_failures;       /* background checkpoints that failed in a row (rank 0) */
    run_lock lock;           /* OUTPUT_DIR held for the run (rank 0) */
    bool lock_lost;          /* rank 0: another run may share OUTPUT_DIR: no more checkpoints */
    int most_common;         /* the frequency baseline's token (-1: no data.valid) */
    int eval_batch;          /* sequences per evaluation forward */
    eval_result last_eval;   /* the newest held-out evaluation ... */
    long last_eval_step;     /* ... and its step (0: none yet) */
    int n_fill_mask;         /* eval.fill_mask sentences, tokenized (rank 0) */
    char **fill_mask_texts;
    fill_mask_input *fill_mask;
    bool every_rank_stops;   /* every rank knows the run stops: no need to abort the job */
    /* ---- the loop ---- */
    resume_info ri;          /* where the run started (ri.active: from a checkpoint) */
    batch_plan plan;         /* the global batch over ranks (auto shares change it) */
    int T, max_masked;       /* sequence length; masked rows a micro-batch holds */
    loss_scaler scaler;      /* fp16's dynamic loss scaler */
    bt_guard guard;          /* the divergence guard */
    sample_skips skips;      /* run positions never to train on (after rollbacks) */
    sample_skips rejected;   /* batches the guard rejected since the last rollback */
    long step0;              /* the step the loop started from */
    uint64_t cursor;         /* run position of the next step's first sample */
    long reached;            /* steps done */
    int rollbacks;           /* rollbacks so far */
    int stop;                /* why the loop stops early (stop.c), 0: it does not */
    double t_run, t_start;   /* when the command and the loop started */
    double data_time;        /* seconds spent filling batches */
    metrics_window win;      /* since the last printed step */
    run_profile prof;        /* train --profile N */
} run_state;

/* Rank 0: the background checkpoint that has ended (with wait: the one in
 * flight, once it ends). A failure is one line on stderr and training goes
 * on; the second failure in a row asks every rank to stop (stop_request).
 * false when the write collected failed. */
bool run_collect_checkpoint(run_state *s, bool wait);

/* Choose the steps train --profile times: cfg->profile_steps of them after
 * the loop's first (a warm-up: first launches, lazy allocations), or from the
 * first when the run has no more. No-op without a profiler. */
void run_profile_init(run_state *s, const bt_config *cfg);

/* Around train_step: start timing step `step` when it is profiled; after it,
 * end it, and after the last profiled step print the profile (rank 0) and
 * write it to OUTPUT_DIR/profile.json (rank R > 0: profile-rankR.json). */
void run_profile_begin(run_state *s, long step);
void run_profile_end(run_state *s, const bt_config *cfg, long step);

/* Everything before the first step, on every rank: the output directory and
 * its lock, the resume point, vocab and data, the ranks' agreement, the
 * device, model, optimizer and batch plan, metrics.jsonl, the checkpoint
 * writer and the start-up lines. Returns 0, or the exit status after one
 * line saying why. */
int run_setup(run_state *s, const bt_config *cfg);

/* Host buffers for this rank's micro-batches under s->plan; false when out of
 * host memory. */
bool run_alloc_micro(run_state *s);

/* Free what the run owns (run_setup's and the loop's). */
void run_free(run_state *s);

/* A fresh model on every rank: BERT's initialization from cfg->seed (rank 0's
 * values everywhere), zero optimizer state, and Admin's omegas. s->mb must be
 * allocated for micro-batches of `micro`. false when out of host memory. */
bool run_start_fresh(run_state *s, const bt_config *cfg, int micro);

/* 1-bit Adam's errors from checkpoint dir's onebit.bin (none there: zero),
 * on every rank; false after one line saying why. */
bool run_load_onebit(run_state *s, const char *dir);

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
