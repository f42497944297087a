/* What the emulated CUDA device's self-test (emu_selftest) shares between its
 * files: the check counter, kept in selftest.cpp with main(), and the
 * cuBLASLt checks of selftest_lt.cpp that main() runs or dispatches to. */
#ifndef CUEMU_SELFTEST_H
#define CUEMU_SELFTEST_H

/* How many checks have failed so far (main's exit status, a child's). */
extern int failures;

/* One check: prints "ok" or "FAIL" and what it checked; counts a failure. */
void check(bool ok, const char *what);

/* ---- selftest_lt.cpp: the cuBLASLt checks ---- */

/* The checks that return, run by main() without a CASE. */
void lt_numerics();
void lt_statuses();
void lt_children();

/* The cases lt_children runs this program again for (emu_selftest CASE):
 * lt-sm70, lt-bias-fault / lt-bias-overlap, lt-trace; each its exit status. */
int lt_sm70();
int lt_bias_fault(bool overlap);
int lt_trace();

#endif
