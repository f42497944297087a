/* Divergence guard (guard.h). */
#include "guard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool guard_init(bt_guard *g, double spike_factor, int median_window, int max_bad, int bad_window) {
    memset(g, 0, sizeof *g);
    g->spike_factor = spike_factor;
    g->median_window = median_window < 1 ? 1 : median_window;
    g->max_bad = max_bad < 1 ? 1 : max_bad;
    g->bad_window = bad_window < 1 ? 1 : bad_window;
    g->losses = calloc((size_t)g->median_window, sizeof *g->losses);
    g->bad_steps = calloc((size_t)g->max_bad, sizeof *g->bad_steps);
    return g->losses && g->bad_steps;
}

void guard_free(bt_guard *g) {
    free(g->losses);
    free(g->bad_steps);
    memset(g, 0, sizeof *g);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double guard_loss_limit(const bt_guard *g) {
    int need = g->median_window < 20 ? g->median_window : 20;
    if (g->spike_factor <= 0 || g->n_losses < need) return 0.0;
    double sorted[BT_GUARD_MAX_WINDOW];
    memcpy(sorted, g->losses, (size_t)g->n_losses * sizeof *sorted);
    qsort(sorted, (size_t)g->n_losses, sizeof *sorted, cmp_double);
    int n = g->n_losses;
    double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    return g->spike_factor * median;
}

bool guard_check(const bt_guard *g, double loss, double grad_norm, char *why, size_t n) {
    if (!isfinite(loss)) {
        snprintf(why, n, "loss is %g", loss);
        return true;
    }
    if (!isfinite(grad_norm)) {
        snprintf(why, n, "gradient norm is %g", grad_norm);
        return true;
    }
    double limit = guard_loss_limit(g);
    if (limit > 0 && loss > limit) {
        snprintf(why, n, "loss %.4f > %g x running median (limit %.4f)", loss, g->spike_factor,
                 limit);
        return true;
    }
    return false;
}

void guard_accept(bt_guard *g, double loss) {
    g->losses[g->next] = loss;
    g->next = (g->next + 1) % g->median_window;
    if (g->n_losses < g->median_window) g->n_losses++;
}

bool guard_reject(bt_guard *g, long step) {
    g->bad_steps[g->next_bad] = step;
    g->next_bad = (g->next_bad + 1) % g->max_bad;
    if (g->n_bad < g->max_bad) g->n_bad++;
    if (g->n_bad < g->max_bad) return false;
    long oldest = g->bad_steps[g->next_bad]; /* the ring is full: next is the oldest */
    return step - oldest < g->bad_window;
}

void guard_forget_bad(bt_guard *g) {
    g->n_bad = 0;
    g->next_bad = 0;
}
