/* Wall-clock helpers for logs and progress lines. */
#ifndef BT_UTIL_CLOCK_H
#define BT_UTIL_CLOCK_H

#include <stddef.h>

/* Monotonic seconds. */
double now_s(void);

/* "1h02m03s" for a duration in seconds (negative or not finite: 0). */
void format_eta(double s, char *out, size_t n);

#endif
