/* What became of the run's background checkpoints (run_collect_checkpoint):
 * its own object, below both the loop and the rollback that ask it. */
#include "train_internal.h"

#include "stop.h"

#include <stdio.h>

bool run_collect_checkpoint(run_state *s, bool wait) {
    char err[1400];
    long step = 0;
    const int r = ckpt_writer_collect(s->writer, wait, &step, err, sizeof err);
    if (r > 0) s->ckpt_failures = 0;
    if (r >= 0) return true;
    s->ckpt_failures++;
    if (s->ckpt_failures < 2)
        fprintf(stderr, "bertrain: checkpoint step %ld failed: %s; training goes on and the "
                        "next checkpoint tries again (two failures in a row stop the run)\n",
                step, err);
    else
        fprintf(stderr, "bertrain: checkpoint step %ld failed: %s; %d checkpoints in a row "
                        "failed: stopping\n", step, err, s->ckpt_failures);
    if (s->ckpt_failures >= 2) stop_request(STOP_FAILED_WRITE);
    return false;
}
