/* Dynamic loss scaling with DeepSpeed's exact semantics (fp16 training): on
 * an overflow the step is skipped and, once hysteresis is used up, the scale
 * is halved; after loss_scale_window clean steps it doubles. At the minimum
 * scale an overflow stops the run with a clear message instead of looping
 * forever (the failure where NVIDIA's BERT recipe went down to 1e-12). */
#ifndef BT_LOSS_SCALE_H
#define BT_LOSS_SCALE_H

#include <stdbool.h>

typedef struct {
    double scale;          /* current loss scale */
    double factor;         /* 2 */
    long window;           /* loss_scale_window */
    double min_scale;      /* min_loss_scale */
    int hysteresis;        /* configured delayed shift */
    int cur_hysteresis;    /* overflows still tolerated before halving */
    bool consecutive_hysteresis;
    bool dynamic;          /* false: a static scale (loss_scale > 0) */
    long iter;             /* updates seen */
    long last_overflow;    /* iteration of the last overflow, -1: none */
    long skipped;          /* steps skipped so far */
} loss_scaler;

/* A dynamic scaler starting at 2^initial_scale_power, or a static one when
 * static_scale > 0 (DeepSpeed's "loss_scale"). */
void loss_scaler_init(loss_scaler *s, double static_scale, int initial_scale_power, long window,
                      int hysteresis, bool consecutive_hysteresis, double min_scale);

typedef enum {
    SCALE_STEP_OK = 0,     /* apply the update */
    SCALE_STEP_SKIP = 1,   /* overflow: skip this update */
    SCALE_STEP_AT_MIN = 2, /* overflow at the minimum scale: stop the run */
} loss_scale_verdict;

/* Record whether this step's gradients overflowed and update the scale. */
loss_scale_verdict loss_scaler_update(loss_scaler *s, bool overflow);

#endif
