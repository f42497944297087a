/* Resuming a run from a checkpoint, and stopping one cleanly on a signal or
 * a time limit (so that a batch scheduler's job ends with a checkpoint). */
#ifndef BT_RESUME_H
#define BT_RESUME_H

#include "model/loss_scale.h"
#include "model/bert.h"
#include "config/config.h"
#include "model/optim.h"
#include "store/run_dir.h"
#include "data/sample_skips.h"
#include "data/vocab.h"

#include <stdbool.h>
#include <stdio.h>

/* The checkpoint a run continues from. */
typedef struct {
    bool active;         /* false: a fresh start */
    char dir[1024];
    long step;           /* optimizer steps already done */
    long opt_step;       /* rank 0: state.json's optimizer.step (updates applied), else step */
    bool exact_opt_step; /* rank 0: state.json records optimizer.step */
    long long position;  /* data cursor: run position of the step's first sample */
    int lowercase;       /* the checkpoint's shards were lowercased: 1, 0, or -1 unknown */
    bool imported;       /* the checkpoint is an import, never trained (its "imported_from") */
    char run_id[RUN_ID_LEN + 1]; /* the run's lineage: the checkpoint's, or new for a fresh run */
} resume_info;

/* Pick the checkpoint for cfg->resume ("auto": the newest one in output_dir
 * whose checksums verify, skipping damaged ones; else a directory), check
 * cfg against the config it was trained with (a change of the model's shape
 * is an error naming the key and both values; other changes are logged) and
 * say what happens (for a rollback, the caller says it when there is no
 * checkpoint). Rank 0 decides; every rank gets the outcome. Returns 0, or 2
 * after a one-line error. */
int resume_prepare(const bt_config *cfg, resume_info *ri, bool rollback);

/* The run's vocab v (from vocab_path) must be the one the checkpoint keeps
 * (its vocab.txt), token for token; false with the first differing line in
 * err. true when not resuming or the checkpoint keeps no vocab. */
bool resume_check_vocab(const resume_info *ri, const bt_vocab *v, const char *vocab_path,
                        char *err, size_t errlen);

/* Load the chosen checkpoint's weights, moments and optimizer step on rank 0
 * and copy them to every rank. false (on every rank) after a one-line error. */
bool resume_load(const resume_info *ri, bert_model *m, bt_optimizer *o);

/* Rank 0's parameters and optimizer moments to every rank (through host
 * memory, one buffer at a time): after a resume, and to re-sync ranks that
 * drifted apart. Every rank calls it; out of host memory aborts the job. */
void broadcast_weights(bert_model *m, bt_optimizer *o);

/* fp16: continue the dynamic loss scaler s (initialized from the config) from
 * the checkpoint's state.json, when it was trained with fp16; rank 0 reads,
 * every rank gets the same state. */
void resume_scaler(const resume_info *ri, loss_scaler *s);

/* The sample ranges the checkpoint's run skipped after rollbacks (state.json
 * data.skipped_samples) into s, on every rank; false after a one-line error. */
bool resume_skips(const resume_info *ri, sample_skips *s);

/* Open OUTPUT_DIR/metrics.jsonl: truncated for a fresh run; when resuming,
 * keeping the lines up to the checkpoint's step and appending after them. */
FILE *resume_open_metrics(const char *path, const resume_info *ri);

#endif
