/* The dynamic loss scaler with injected overflows: skip, hysteresis, halving,
 * growth after a clean window, the minimum-scale stop, static scales. The
 * expected scales follow DeepSpeed's DynamicLossScaler.update_scale, worked
 * out by hand step by step in the comments. */
#include "model/loss_scale.h"

#include <stdio.h>

static int failures = 0;

static void check(bool ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

int main(void) {
    loss_scaler s;
    /* growth: window 3, no overflow: 2^4 -> doubles after each 3 clean steps
     * (DeepSpeed counts from last_overflow = -1, so the first doubling comes
     * at iteration 2) */
    loss_scaler_init(&s, 0, 4, 3, 2, false, 1);
    double seen[7];
    for (int i = 0; i < 7; i++) {
        loss_scaler_update(&s, false);
        seen[i] = s.scale;
    }
    check(seen[0] == 16 && seen[1] == 16 && seen[2] == 32 && seen[4] == 32 && seen[5] == 64,
          "scale doubles after every window of clean steps");

    /* hysteresis 2: the first overflow is tolerated (skip, same scale), the
     * second halves */
    loss_scaler_init(&s, 0, 10, 1000, 2, false, 1);
    loss_scale_verdict v1 = loss_scaler_update(&s, true);
    check(v1 == SCALE_STEP_SKIP && s.scale == 1024, "first overflow: step skipped, scale kept (hysteresis)");
    loss_scale_verdict v2 = loss_scaler_update(&s, true);
    check(v2 == SCALE_STEP_SKIP && s.scale == 512, "second overflow: skipped and halved");
    loss_scaler_update(&s, true);
    check(s.scale == 256, "hysteresis stays used up (non-consecutive mode): halved again");
    check(s.skipped == 3, "three skipped steps counted");

    /* a clean window after an overflow restores hysteresis and doubles */
    loss_scaler_init(&s, 0, 10, 4, 2, false, 1);
    loss_scaler_update(&s, true);  /* iter 0: tolerated */
    loss_scaler_update(&s, true);  /* iter 1: 1024 -> 512 */
    for (int i = 0; i < 3; i++) loss_scaler_update(&s, false); /* iters 2..4 */
    check(s.scale == 512, "no growth before a full window since the overflow");
    loss_scaler_update(&s, false); /* iter 5: (5 - 1) % 4 == 0 */
    check(s.scale == 1024 && s.cur_hysteresis == 2, "growth after the window, hysteresis restored");

    /* consecutive hysteresis: a clean step restores the tolerance */
    loss_scaler_init(&s, 0, 10, 1000, 2, true, 1);
    loss_scaler_update(&s, true);
    loss_scaler_update(&s, false);
    loss_scaler_update(&s, true);
    check(s.scale == 1024, "consecutive_hysteresis: isolated overflows never halve");

    /* minimum scale: halving stops at min, then an overflow there stops the run */
    loss_scaler_init(&s, 0, 2, 1000, 1, false, 1);
    loss_scaler_update(&s, true); /* 4 -> 2 */
    loss_scaler_update(&s, true); /* 2 -> 1 */
    check(s.scale == 1, "halving reaches min_loss_scale");
    check(loss_scaler_update(&s, true) == SCALE_STEP_AT_MIN, "overflow at the minimum stops the run");

    /* static scale: overflow skips, scale never moves */
    loss_scaler_init(&s, 128, 16, 1000, 2, false, 1);
    check(loss_scaler_update(&s, true) == SCALE_STEP_SKIP && s.scale == 128 &&
              loss_scaler_update(&s, false) == SCALE_STEP_OK && s.scale == 128,
          "static loss_scale: skip on overflow, constant scale");
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
