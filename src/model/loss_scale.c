/* DeepSpeed's DynamicLossScaler.update_scale, step for step. */
#include "loss_scale.h"

#include <math.h>

void loss_scaler_init(loss_scaler *s, double static_scale, int initial_scale_power, long window,
                      int hysteresis, bool consecutive_hysteresis, double min_scale) {
    s->dynamic = static_scale <= 0;
    s->scale = s->dynamic ? ldexp(1.0, initial_scale_power) : static_scale;
    s->factor = 2.0;
    s->window = window > 0 ? window : 1;
    s->min_scale = min_scale;
    s->hysteresis = hysteresis > 0 ? hysteresis : 1;
    s->cur_hysteresis = s->hysteresis;
    s->consecutive_hysteresis = consecutive_hysteresis;
    s->iter = 0;
    s->last_overflow = -1;
    s->skipped = 0;
}

loss_scale_verdict loss_scaler_update(loss_scaler *s, bool overflow) {
    loss_scale_verdict v = SCALE_STEP_OK;
    if (!s->dynamic) {
        if (overflow) {
            s->skipped++;
            v = SCALE_STEP_SKIP;
        }
        s->iter++;
        return v;
    }
    if (overflow) {
        if (s->hysteresis == 1 || s->cur_hysteresis == 1) {
            if (s->scale <= s->min_scale) {
                s->iter++;
                return SCALE_STEP_AT_MIN;
            }
            s->scale = fmax(s->scale / s->factor, s->min_scale);
        } else {
            s->cur_hysteresis--;
        }
        s->last_overflow = s->iter;
        s->skipped++;
        v = SCALE_STEP_SKIP;
    } else {
        if (s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
        if ((s->iter - s->last_overflow) % s->window == 0) {
            if (!s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
            s->scale *= s->factor;
        }
    }
    s->iter++;
    return v;
}
