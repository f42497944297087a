/* Test hooks: the faults and traces the test suite injects through
 * BERTRAIN_TEST_* environment variables, read once, at start-up
 * (test_hooks_init), into this module. Training and checkpointing code asks
 * it by name; nothing else reads these variables, and in a run without them
 * each question is a check of a flag.
 *
 *   BERTRAIN_TEST_NAN_STEPS="3,5"      a NaN in the summed gradients of steps 3, 5
 *   BERTRAIN_TEST_SPIKE_STEPS="4"      a 1000x loss at step 4
 *   BERTRAIN_TEST_OVERFLOW_STEPS="2"   fp16: an infinite gradient at step 2
 *   BERTRAIN_TEST_NAN_SAMPLES="64,900" a NaN in the step that trains run position 64 or 900
 *   BERTRAIN_TEST_DIE="RANK,STEP"      RANK kills itself (SIGKILL) after STEP
 *   BERTRAIN_TEST_PERTURB="RANK,STEP"  RANK changes one parameter after STEP
 *   BERTRAIN_TEST_CKPT="POINT,STEP,ACTION"  the checkpoint writer of STEP (0: any)
 *                                      at POINT (begin, model, optim, state, rename,
 *                                      latest) does ACTION: kill, pause:SECONDS,
 *                                      or wait:FILE (until FILE exists, at most 120 s)
 *   BERTRAIN_TEST_LOG_SAMPLES          log each micro-batch's sample range
 *   BERTRAIN_TEST_LOG_LAYERDROP        log the layers LayerDrop skips */
#ifndef BT_UTIL_TEST_HOOKS_H
#define BT_UTIL_TEST_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

/* Read every BERTRAIN_TEST_* variable (main calls it first; the questions
 * below call it too, so a test program needs no call of its own). */
void test_hooks_init(void);

/* Step hooks, by 1-based step. */
bool hook_nan_step(long step);
bool hook_spike_step(long step);
bool hook_overflow_step(long step);

/* Does BERTRAIN_TEST_NAN_SAMPLES list a run position in [from, to)? */
bool hook_nan_samples(uint64_t from, uint64_t to);

/* Should `rank` kill itself, or perturb a parameter, after `step`? */
bool hook_die(int rank, long step);
bool hook_perturb(int rank, long step);

/* The checkpoint writer of `step` reached `point`: kill or pause here when
 * BERTRAIN_TEST_CKPT says so. */
void hook_ckpt_point(const char *point, long step);

/* Trace switches. */
bool hook_log_samples(void);
bool hook_log_layerdrop(void);

#endif
