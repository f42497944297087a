/* Wall-clock helpers (clock.h). */
#include "clock.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void format_eta(double s, char *out, size_t n) {
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    snprintf(out, n, "%ldh%02ldm%02lds", t / 3600, (t / 60) % 60, t % 60);
}
