/* What a training run tells the person and the file: every console line of
 * the loop and every record of metrics.jsonl, in one place. Rank 0 writes;
 * the other ranks call nothing here except where a function says so.
 *
 * metrics.jsonl records are JSON objects printed as {"key": value, ...}:
 * keys and strings escaped by cJSON, numbers in fixed printf formats (so a
 * value prints the same in every version); the fill-mask record is cJSON's
 * compact print. */
#ifndef BT_METRICS_H
#define BT_METRICS_H

#include "eval.h"
#include "fill_mask.h"
#include "tb_events.h"
#include "train.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

/* ---- metrics.jsonl ---- */

/* metrics.jsonl as the loop writes it: the stream and what failed. A record
 * that cannot be written is counted, never silently dropped: metrics_check
 * says it at the next step boundary. */
typedef struct {
    FILE *f;
    char path[1200];
    int err;     /* errno of the first failed write since the last metrics_check; 0: none */
    long lost;   /* records not written, in all */
    bool stopping; /* metrics_check asked the run to stop: later failures are only counted */
    tb_writer *tb; /* metrics.tensorboard: every record's numbers also go here (NULL: off) */
} metrics_log;

/* What a failed metrics.jsonl write does (config metrics.on_error). */
enum { METRICS_ON_ERROR_STOP = 0, METRICS_ON_ERROR_WARN = 1 };

/* Rank 0, at a step boundary after `step`: when a write failed since the last
 * check (metrics.jsonl or the TensorBoard event file), one line on stderr for
 * each file that failed, naming it, the error and the records lost;
 * true when the run must stop for it (on_error METRICS_ON_ERROR_STOP). */
bool metrics_check(metrics_log *log, long step, int on_error);

/* Close metrics.jsonl and the event file; false (log->err set, or the event
 * file's error kept for metrics_check) when the last records did not reach
 * them. The event writer is freed by run_free (tb_free). */
bool metrics_close(metrics_log *log);

/* ---- records ---- */

/* A new record {"step": step}. */
cJSON *mrec_new(long step);
/* key: v printed with fmt ("%.9g"), or as an integer. */
void mrec_num(cJSON *rec, const char *key, const char *fmt, double v);
void mrec_int(cJSON *rec, const char *key, long long v);
/* key: "s", escaped. */
void mrec_str(cJSON *rec, const char *key, const char *s);
/* Write rec as one line of the log ({"key": value, ...}), flush, and free
 * it; a failure is recorded in the log. With log->tb, its numbers also go to
 * the event file as one Event (tb_write_record). */
void mrec_write(metrics_log *log, cJSON *rec);

/* ---- the step lines ---- */

/* Sums over the steps since the last printed one. */
typedef struct {
    double t0;                    /* when the window began */
    double data_s, compute_s, idle_s, comm_s;
    long samples, tokens;
} metrics_window;

void metrics_window_add(metrics_window *w, const step_result *r);
/* Start a new window at time t. */
void metrics_window_reset(metrics_window *w, double t);

/* What a printed step line needs besides the step's result. */
typedef struct {
    long step;              /* 1-based */
    long train_steps;
    double eta_s;
    long global_batch;      /* samples of this step */
    long long samples;      /* run position after this step */
    bool fp16, rampup, nsp, z_loss, attn_penalty;
    int world;
    bool grad_bf16;         /* distributed.grad_dtype "bf16" (the step line names the wire) */
    const double *per_rank; /* world x {compute, comm, idle} seconds (world > 1) */
    const long *shares;     /* world: each rank's share of the global batch */
} metrics_step_info;

/* The step line on the console, the per-rank lines (world > 1) and the
 * step's metrics.jsonl record. */
void metrics_step(metrics_log *log, const step_result *r, const metrics_window *w, double now,
                  const metrics_step_info *i);

/* ---- steps without an update ---- */

/* The guard refused the update of `step`: stderr and metrics.jsonl. */
void metrics_guard_skip(metrics_log *log, long step, const char *why, uint64_t from, uint64_t to);

/* fp16: the loss scaler skipped `step` (stderr and metrics.jsonl), or the
 * run stops because it happened at the minimum scale (r->at_min_scale). */
void metrics_overflow(metrics_log *log, const step_result *r, long step, long overflow_steps,
                      const char *output_dir);

/* A rollback from `at_step` to `back_to`: the data continues at `cursor`
 * and never trains on the ranges in `ranges` (already formatted); the
 * record lists them as [from, to) pairs (n of them). */
void metrics_rollback(metrics_log *log, long at_step, long back_to, uint64_t cursor, const char *ranges,
                      const uint64_t (*skipped)[2], int n);

/* ---- evaluation ---- */

/* The held-out evaluation of `step`, which took `seconds`. */
void metrics_eval(metrics_log *log, long step, const eval_result *ev, bool nsp, double seconds);

/* The fill-mask predictions of `step`: per text, the top `top` guesses for
 * each [MASK] (guesses[i][k * top + j]), on the console and as one compact
 * record. */
void metrics_fill_mask(metrics_log *log, long step, int n, char *const *texts, const int *n_masks,
                       fill_mask_guess *const *guesses, int top, const bt_vocab *vocab);

/* ---- the rest of the loop's lines ---- */

/* The auto shares changed at `step`: the new shares, formatted. */
void metrics_rebalance(long step, const char *shares);

/* The parameters of `rank` drifted from rank 0's by `diff` (relative) at
 * `step`, beyond `tolerance`: they are re-synced. */
void metrics_drift(long step, int rank, double diff, double tolerance);

/* The one rank-table row per rank of a multi-rank run. */
void metrics_rank_row(int rank, const char *host, const char *backend, const char *device,
                      double memory_gb, long share, double speed);

#endif
