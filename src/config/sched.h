/* The learning-rate schedule and the batch-size rampup (sched.c): what the
 * config asks for at a given point of the run. */
#ifndef BT_SCHED_H
#define BT_SCHED_H

#include "config.h"

/* Learning rate at optimizer step `step` (0-based) under the schedule. */
double sched_lr(const bt_config *cfg, long step);

/* The scheduler's position before an update, given the updates applied so far
 * (`step`; steps the fp16 loss scaler or the guard skipped do not count, as in
 * DeepSpeed) and the run position `samples` of the step's first sample: the
 * update count, or with scheduler.unit "samples" the samples consumed so far,
 * less scheduler.start (a later phase's schedule starts over there), never
 * below 0. */
long sched_position(const bt_config *cfg, long step, long long samples);

/* Batch-size rampup: the gradient accumulation count of the step that starts
 * at run position `samples` (the global batch is micro-batch x this x ranks);
 * gradient_accumulation_steps when there is no rampup or it is complete. */
long rampup_accum(const bt_config *cfg, long long samples);

#endif
