/* Output directories that hold a training run: one run at a time (a lock
 * held for the whole run), no fresh run over another run's checkpoints, and
 * import/export never writing over a directory bertrain did not make for
 * them. Nothing here deletes anything. */
#ifndef BT_RUN_DIR_H
#define BT_RUN_DIR_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define RUN_DIR_LOCK_FILE ".bertrain.lock"
#define RUN_ID_LEN 16 /* hex digits of a run's lineage id */

/* A run's hold on its output directory (run_dir_lock). */
typedef struct {
    int file_fd;          /* OUTPUT_DIR/.bertrain.lock, flocked; -1: not held */
    int dir_fd;           /* OUTPUT_DIR itself, flocked; -1 where the file system cannot */
    unsigned long long dev, ino; /* the lock file's identity, for run_dir_lock_check */
} run_lock;

/* Take the lock on OUTPUT_DIR for a run: flock on the directory itself, so
 * that deleting the lock file does not free it, and on
 * OUTPUT_DIR/.bertrain.lock, which records this host and PID for the message
 * a second run gets. The kernel frees both when the process ends, a crash
 * included. false with "DIR is in use by another bertrain run (host HOST,
 * pid PID ...)" (or another reason) in err. */
bool run_dir_lock(const char *dir, run_lock *lock, char *err, size_t errlen);

/* At each checkpoint: the run still holds dir. With the directory locked,
 * a deleted or replaced lock file is written again (a second run is refused
 * by the directory lock anyway); where directories cannot be locked, the lock
 * file must still be the one this run locked. false with why in err: then
 * another run may be writing into dir, and this one must stop. */
bool run_dir_lock_check(const char *dir, run_lock *lock, char *err, size_t errlen);

/* Release a lock from run_dir_lock (not held: nothing). */
void run_dir_unlock(run_lock *lock);

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

/* Checkpoint dir's state.json, parsed (its checksum unchecked), or NULL; the
 * caller frees it. */
cJSON *run_dir_read_state(const char *dir);

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
