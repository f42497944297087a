/* Divergence guard: decides which optimizer steps to skip (a non-finite loss
 * or gradient norm, or a loss above k times the running median of accepted
 * losses) and when too many skips in a window mean the run must stop. Every
 * input is a global value, so every rank decides the same. */
#ifndef BT_GUARD_H
#define BT_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#define BT_GUARD_MAX_WINDOW 10000

typedef struct {
    double spike_factor; /* k: skip a loss above k x median (0: off) */
    int median_window;   /* accepted losses the median is taken over */
    int max_bad;         /* M: this many skips ... */
    int bad_window;      /* ... within this many steps stop the run */
    double *losses;      /* ring of the last median_window accepted losses */
    int n_losses, next;
    long *bad_steps;     /* ring of the last max_bad skipped steps */
    int n_bad, next_bad;
} bt_guard;

/* Set up a guard; false when out of memory. */
bool guard_init(bt_guard *g, double spike_factor, int median_window, int max_bad, int bad_window);

/* Release what guard_init allocated. */
void guard_free(bt_guard *g);

/* The loss above which a step is a spike: k x the median of the accepted
 * losses, or 0 (no limit) while fewer than min(20, window) are known. */
double guard_loss_limit(const bt_guard *g);

/* Why step's (loss, grad_norm) must be skipped, written into why (size n), or
 * false when it may be applied. The device decides the same before a gated
 * update (kernels/optim.cl's bt_step_gate_decide, the CPU's cpu_step_gate):
 * a change here changes them too, or a gated run stops at its check. */
bool guard_check(const bt_guard *g, double loss, double grad_norm, char *why, size_t n);

/* Record an applied step's loss. */
void guard_accept(bt_guard *g, double loss);

/* Record a skipped step; true when it makes max_bad skips within bad_window
 * steps (the run should stop rather than skip on). */
bool guard_reject(bt_guard *g, long step);

/* Forget the skipped steps (after a rollback, the window starts over). */
void guard_forget_bad(bt_guard *g);

#endif
