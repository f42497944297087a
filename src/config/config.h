/* The run configuration: a JSON file (DeepSpeed keys accepted as they are)
 * parsed with cJSON into one validated struct. Every error names the key. */
#ifndef BT_CONFIG_H
#define BT_CONFIG_H

#include "model/bert.h"
#include "model/optim.h"

#include <stdbool.h>
#include <stdint.h>

#define BT_MAX_RANKS 1024
#define BT_MAX_FILL_MASK 16 /* eval.fill_mask: sentences at most */

typedef enum {
    SCHED_CONSTANT = 0,
    SCHED_WARMUP,            /* DeepSpeed WarmupLR: warmup, then constant */
    SCHED_WARMUP_DECAY,      /* DeepSpeed WarmupDecayLR: warmup, then linear decay to 0 */
    SCHED_WARMUP_EXP_DECAY,  /* DeepSpeed BERT: warmup, then decay_rate^((s-w)/decay_step) */
    SCHED_INVERSE_SQRT,      /* fairseq: warmup, then lr * sqrt(warmup / s) */
    SCHED_COSINE,            /* DeepSpeed WarmupCosineLR */
} bt_sched_type;


typedef struct {
    bt_sched_type type;
    double warmup_min_lr, warmup_max_lr; /* max: the optimizer's lr unless given */
    long warmup_num_steps, total_num_steps;
    bool warmup_log;         /* WarmupLR warmup_type "log" */
    double decay_rate;       /* exp decay */
    long decay_step;
    double cos_min_ratio, warmup_min_ratio;
    int unit;                /* scheduler.unit: 0 steps, 1 samples (SCHED_UNIT_SAMPLES) */
    long start;              /* scheduler.start: the update (or sample) where s is 0 */
} bt_sched_config;

enum { SCHED_UNIT_STEPS = 0, SCHED_UNIT_SAMPLES = 1 };
enum { RAMPUP_LINEAR = 0, RAMPUP_STEPWISE = 1 };

typedef struct {
    char train[1024]; /* shard file or directory of *.shard */
    char valid[1024];
    char vocab[1024];
    int seq_len;
    float mask_prob;
    int max_predictions; /* per sequence; 0: derived from seq_len and mask_prob */
    bool sentence_pairs; /* false: full_sentences packing */
    long limit_samples;  /* use only the first N samples of the data (0: all) */
} bt_data_config;

typedef struct {
    char path[1024]; /* the config file, for messages */
    bert_config model;
    char preset[16];
    long train_batch_size, micro_batch, grad_accum; /* global, per rank, per rank */
    int world_size;
    long train_steps;
    uint64_t seed;
    char output_dir[1024];
    int steps_per_print;
    float gradient_clipping; /* 0: off */
    bt_optim_config optim;
    bt_sched_config sched;
    bt_data_config data;
    char device[64];
    int cpu_threads;
    bool tf32;             /* tf32: allow TF32 tensor-core GEMMs where the device has them */
    int profile_steps;     /* train --profile N (not a config key): steps the profiler times */
    long ckpt_interval;    /* checkpoint.interval: steps between checkpoints (0: only the last) */
    int ckpt_keep;         /* checkpoint.keep: newest checkpoints kept */
    double max_runtime;    /* checkpoint.max_runtime: seconds, then checkpoint and stop (0: off) */
    int metrics_on_error;  /* metrics.on_error: a failed metrics.jsonl write stops the run (0,
                              "stop") or is warned about and training goes on (1, "warn") */
    bool metrics_tensorboard; /* metrics.tensorboard: metrics.jsonl's numbers also go to
                                 TensorBoard event files in output_dir (rank 0) */
    long eval_interval;    /* eval.interval: steps between evaluations (0: only after the last) */
    long eval_max_samples; /* eval.max_samples: validation sequences used (0: all) */
    int eval_batch;        /* eval.batch_size (0: the micro-batch) */
    char eval_fill_mask_json[4096]; /* eval.fill_mask: JSON list of sentences with [MASK]
                                     * whose predictions each evaluation prints ("": none) */
    /* guard: skip non-finite or spiking steps; stop after max_bad within window */
    double guard_spike_factor; /* guard.loss_spike_factor: k x running median (0: off) */
    int guard_median_window;   /* guard.median_window: accepted losses in the median */
    int guard_max_bad;         /* guard.max_bad_steps */
    int guard_window;          /* guard.window: steps */
    int guard_max_rollbacks;   /* guard.max_rollbacks: rollbacks before the run stops */
    /* batch-size rampup: the global batch grows with the samples trained on */
    long rampup_start;   /* batch_rampup.start_batch_size (0: no rampup) */
    long rampup_samples; /* batch_rampup.samples: samples over which it grows */
    int rampup_type;     /* batch_rampup.type: RAMPUP_LINEAR or RAMPUP_STEPWISE */
    int rampup_stages;   /* batch_rampup.stages: increases of a stepwise rampup */
    /* mixed precision (DeepSpeed's keys): fp16 with dynamic loss scaling, or bf16 */
    bool fp16;                        /* fp16.enabled */
    bool bf16;                        /* bf16.enabled */
    double fp16_loss_scale;           /* fp16.loss_scale: 0 dynamic, > 0 a static scale */
    int fp16_initial_scale_power;     /* fp16.initial_scale_power: the dynamic scale starts at 2^this */
    long fp16_loss_scale_window;      /* fp16.loss_scale_window: clean steps before doubling */
    int fp16_hysteresis;              /* fp16.hysteresis: overflows tolerated before halving */
    bool fp16_consecutive_hysteresis; /* fp16.consecutive_hysteresis */
    double fp16_min_loss_scale;       /* fp16.min_loss_scale: an overflow here stops the run */
    /* distributed */
    int n_shares;           /* distributed.shares given per rank (0: equal split) */
    long shares[BT_MAX_RANKS];
    bool shares_auto;       /* distributed.shares "auto": measured speed */
    long rebalance_interval; /* steps between re-plans of auto shares (0: never) */
    long sync_check_interval; /* steps between parameter checksum comparisons (0: never) */
    double drift_tolerance;   /* relative checksum difference that triggers a re-sync */
    double bucket_mb;         /* allreduce bucket size */
    int grad_bf16;            /* distributed.grad_dtype "bf16": gradients travel in 16 bits */
    double dist_timeout_s;    /* a rank waiting longer in a collective stops the job (0: never) */
    char devices_json[4096];  /* "devices": a list by rank or an object by host:local_rank */
    /* not keys */
    char *resolved_json; /* every key's effective value after presets, --set and defaults
                          * (JSON text, malloc'd by config_load, freed by config_free) */
    char resume[1024];   /* train --resume: "" (fresh), "auto" or a checkpoint directory */
    bool allow_data_change; /* train --allow-data-change: resume may change seed or data.train */
} bt_config;

/* Load path, apply "key.path=value" overrides, validate. On any problem print
 * one line naming the file and key to stderr and return false (exit 2). */
bool config_load(bt_config *cfg, const char *path, const char *const *overrides, int n_over,
                 int world_size);

/* config_load without a file: the defaults and the overrides alone (the
 * command-line options of `bertrain bench`), validated as config_load does;
 * messages name `name` where they would name the file. */
bool config_load_named(bt_config *cfg, const char *name, const char *const *overrides, int n_over,
                       int world_size);

/* Free what config_load allocated (resolved_json). */
void config_free(bt_config *cfg);

/* The effective value of every key of cfg as a JSON object (caller frees with
 * cJSON_Delete; returned as void * so this header needs no cJSON). Checkpoints
 * store it so that a resume can compare configs key by key. */
void *config_to_cjson(const bt_config *cfg);

/* Fill defaults (the built-in demo: tiny model on the bundled data). */
void config_defaults(bt_config *cfg);

/* Levenshtein distance, for "did you mean" suggestions. */
int edit_distance(const char *a, const char *b);

#endif
