/* The test build's faults and traces (tests/c/bertrain_test): the
 * BERTRAIN_TEST_* environment variables, read once, at start-up, into a
 * train_observer (src/train/train.h) that the test program hands to
 * bertrain_main. The production program gives no observer and reads none of
 * these variables.
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
 *   BERTRAIN_TEST_LOG_LAYERDROP        log the layers LayerDrop skips
 *
 * The gradient faults (NaN, overflow) come from a backend wrapper: it
 * forwards every op to the real backend and, in a step that a fault names,
 * writes the value into the first gradient before the first reduction over
 * the gradients (the finiteness check with fp16, else the norm), which is
 * after the gradient allreduce, so every rank sees it alike. */
#ifndef BT_TESTS_FAULT_HOOKS_H
#define BT_TESTS_FAULT_HOOKS_H

#include "train/train.h"

/* Read every BERTRAIN_TEST_* variable into *obs (callbacks only where a
 * variable asks for them; all NULL without any). */
void fault_hooks_observer(train_observer *obs);

#endif
