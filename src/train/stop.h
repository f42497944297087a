/* Stopping at a step boundary (stop.c): signals and checkpoint.max_runtime,
 * agreed by every rank so that all stop after the same step. */
#ifndef BT_STOP_H
#define BT_STOP_H

#define STOP_RUNTIME 1000      /* stop reason: checkpoint.max_runtime reached */
#define STOP_FAILED_WRITE 1001 /* stop reason: metrics or checkpoints could not be written */

/* SIGTERM, SIGUSR1 and SIGINT request a stop at the next step boundary; a
 * second SIGINT exits at once with status 130. */
void stop_install(void);

/* Restore the previous signal handlers. */
void stop_uninstall(void);

/* This rank asks every rank to stop at the next step boundary for `reason`
 * (STOP_FAILED_WRITE). */
void stop_request(int reason);

/* Called by every rank at every step boundary (a collective): the reason all
 * ranks stop now (the largest signal number any rank received, or
 * STOP_RUNTIME once any rank has run max_runtime seconds), or 0 to go on. */
int stop_agree(double max_runtime, double elapsed);

/* "SIGTERM", "SIGUSR1", "SIGINT", "checkpoint.max_runtime" or "a failed write". */
const char *stop_reason_name(int reason);

#endif
