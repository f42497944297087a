/* Output directories that hold a training run: one run at a time (a lock
 * held for the whole run), no fresh run over another run's checkpoints, and
 * import/export never writing over a directory bertrain did not make for
 * them. Nothing here deletes anything. */
#ifndef BT_RUN_DIR_H
#define BT_RUN_DIR_H

#include <stdbool.h>
#include <stddef.h>

#define RUN_DIR_LOCK_FILE ".bertrain.lock"
#define RUN_ID_LEN 16 /* hex digits of a run's lineage id */

/* Take the lock OUTPUT_DIR/.bertrain.lock (flock, freed by the kernel when
 * the process ends, a crash included) and record this host and PID in it.
 * Returns the open descriptor to keep for the run, or -1 with "DIR is in use
 * by a bertrain run on HOST, pid PID" (or another reason) in err. */
int run_dir_lock(const char *dir, char *err, size_t errlen);

/* Release a lock from run_dir_lock (fd < 0: nothing). */
void run_dir_unlock(int fd);

/* A fresh run (no --resume) may start in dir only when it holds no other
 * run: no checkpoint (ckpt-*), no `latest`, no non-empty metrics.jsonl.
 * false with what is there (steps, seed) and the two ways on in err. */
bool run_dir_check_fresh(const char *dir, char *err, size_t errlen);

/* import and export write only into a new or empty directory, and never
 * into one that is or holds a checkpoint or a run. `what` names the
 * command. false with the reason in err. */
bool run_dir_check_new_output(const char *dir, const char *what, char *err, size_t errlen);

/* No output of `what` (train's output_dir, export, import, prep) goes inside
 * a bertrain checkpoint, where rotation would delete it: path (which need not
 * exist yet) and every directory above it are not checkpoints. false with
 * "PATH is inside the bertrain checkpoint DIR: ..." in err. */
bool run_dir_check_outside_ckpt(const char *path, const char *what, char *err, size_t errlen);

/* A new lineage id for a fresh run: RUN_ID_LEN hex digits and a NUL. The
 * checkpoints of one run and of its resumptions share it; keep-last-K only
 * deletes checkpoints of the current lineage. */
void run_dir_new_id(char out[RUN_ID_LEN + 1]);

/* The lineage id that checkpoint dir's state.json records, into out (empty
 * when it has none: a checkpoint of an older version, or no state.json). */
void run_dir_ckpt_id(const char *ckpt_dir, char out[RUN_ID_LEN + 1]);

/* The lineage id of the newest checkpoint in output dir `dir` that records
 * one (its checksums unchecked: a damaged checkpoint still names its run),
 * into out; empty when none does. */
void run_dir_newest_id(const char *dir, char out[RUN_ID_LEN + 1]);

#endif
