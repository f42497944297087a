/* Clean stops: a signal handler that only sets a flag, and a per-step
 * max-allreduce of that flag so that every rank stops after the same step. */
#define _XOPEN_SOURCE 700
#include "mpi/dist.h"
#include "resume.h"
#include "stop.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;
static int requested; /* stop_request's reason */
static struct sigaction old_term, old_usr1, old_int;
static bool installed;

static void on_signal(int sig) {
    if (sig == SIGINT && stop_signal == SIGINT) {
        static const char msg[] = "\nbertrain: second SIGINT: aborting without a checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(130);
    }
    if (stop_signal == 0 || sig == SIGINT) stop_signal = sig;
}

void stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    stop_signal = 0;
    requested = 0;
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1);
    sigaction(SIGINT, &sa, &old_int);
    installed = true;
}

void stop_uninstall(void) {
    if (!installed) return;
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    sigaction(SIGINT, &old_int, NULL);
    installed = false;
}

void stop_request(int reason) {
    if (reason > requested) requested = reason;
}

int stop_agree(double max_runtime, double elapsed) {
    double why = stop_signal > requested ? stop_signal : requested;
    if (max_runtime > 0 && elapsed >= max_runtime && why == 0) why = STOP_RUNTIME;
    dist_allreduce_max_f64(&why, 1);
    return (int)why;
}

const char *stop_reason_name(int reason) {
    switch (reason) {
    case SIGTERM:
        return "SIGTERM";
    case SIGUSR1:
        return "SIGUSR1";
    case SIGINT:
        return "SIGINT";
    case STOP_RUNTIME:
        return "checkpoint.max_runtime";
    case STOP_FAILED_WRITE:
        return "a failed write";
    }
    return "a signal";
}
