/* Checkpoints: a directory written under a temporary name, fsynced, then
 * renamed, so a crash never leaves a half-written checkpoint in its place.
 *
 *   ckpt-<step>/model.safetensors  fp32 weights under Hugging Face names
 *   ckpt-<step>/optim.bin          optimizer moments m, v per tensor + step
 *   ckpt-<step>/vocab.txt          the run's vocabulary (for export)
 *   ckpt-<step>/carried.safetensors  (only after an import) tensors of the
 *                                  imported model that this model does not
 *                                  train, such as a pooler without model.nsp:
 *                                  carried unchanged into every checkpoint and
 *                                  the export
 *   ckpt-<step>/onebit.bin         (only past 1-bit Adam's warm-up over several
 *                                  ranks) every rank's error feedback
 *   ckpt-<step>/onebit_lamb.bin    (1-bit LAMB only) its state beyond the moments
 *   ckpt-<step>/state.json         step, data cursor, seed, schedule, the full
 *                                  resolved config, version, and the size and
 *                                  CRC-32 of every other file; its own CRC-32
 *
 * Training writes from a host copy in a background thread (ckpt_writer);
 * resuming verifies every checksum first (ckpt_verify, ckpt_find_auto). */
#ifndef BT_CKPT_H
#define BT_CKPT_H

#include "model/bert.h"
#include "config/config.h"
#include "model/loss_scale.h"
#include "model/optim.h"
#include "safetensors.h"
#include "data/sample_skips.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#define CKPT_FORMAT_VERSION 2
#define OPTIM_MAGIC "BTOPTIM"  /* 8 bytes with the NUL */
#define OPTIM_VERSION 1
#define CKPT_CARRIED_FILE "carried.safetensors"
#define CKPT_ONEBIT_FILE "onebit.bin"
#define CKPT_LAMB1_FILE "onebit_lamb.bin"

/* Where the run is: what state.json records besides the tensors. */
typedef struct {
    long step;                   /* optimizer steps done */
    long long position;          /* run position of the next training sample (data cursor) */
    long global_batch;           /* samples per step */
    unsigned long long samples_per_epoch;
    bool lowercase;              /* the shards were lowercased (the tokenizer's do_lower_case) */
    const loss_scaler *scaler;   /* fp16's dynamic loss scaler, or NULL */
    const sample_skips *skips;   /* samples the data cursor passes over, or NULL */
    const cJSON *eval;           /* the held-out metrics at this step (state.json's "eval":
                                    eval_result_json), or NULL */
} ckpt_progress;

/* One checkpoint's contents on the host, for ckpt_write_dir. */
typedef struct {
    const bert_model *m;                 /* tensor table: names, shapes, offsets */
    const float *params, *mom1, *mom2;   /* flat (n_params); moments NULL: zeros */
    long opt_step;
    int opt_type;                        /* bt_optim_type */
    const char *vocab;                   /* vocab.txt bytes, or NULL */
    size_t vocab_len;
    cJSON *state;                        /* state.json fields; "files" and the CRC are added */
    const char *const *st_meta;          /* safetensors metadata pairs (NULL: the default) */
    int n_meta;
    const st_tensor *carried;            /* CKPT_CARRIED_FILE's tensors (n_carried 0: none) */
    int n_carried;
    const void *onebit;                  /* CKPT_ONEBIT_FILE's bytes (train/onebit.h), or NULL */
    size_t onebit_len;
    const void *lamb1;                   /* CKPT_LAMB1_FILE's bytes (onebit_lamb_save), or NULL */
    size_t lamb1_len;
} ckpt_contents;

/* A callback the checkpoint writer calls at each of its named points
 * ("begin", "model", "optim", "state", "rename", then "latest" in the
 * training writer) with the checkpoint's step: a seam for the test suite,
 * which stops or delays the writer there (tests/c/fault_hooks.c). bertrain
 * gives none (NULL). */
typedef struct {
    void (*reached)(void *ctx, const char *point, long step);
    void *ctx;
} ckpt_points;

/* Write c as directory `dir` atomically (temporary name, fsync, rename; an
 * existing dir of that name is replaced). points (or NULL) is told each point
 * the write reaches for checkpoint `step` (0 outside training: not told).
 * false with a reason. */
bool ckpt_write_dir(const char *dir, const ckpt_contents *c, const ckpt_points *points, long step,
                    char *err, size_t errlen);

/* Whether checkpoint directory dir (a finished one, or a write's temporary
 * or replaced copy) holds only what bertrain wrote into it: regular files
 * that its state.json lists, and state.json (without a readable state.json:
 * files of the names a checkpoint has). true when dir does not exist. false
 * with "DIR holds NAME, which bertrain did not write" in err. */
bool ckpt_removable(const char *dir, char *err, size_t errlen);

/* Remove checkpoint directory dir when ckpt_removable says it may: its
 * files, then the directory. Anything else in it keeps it whole: false with
 * the reason in err. Rotation, leftovers and replacement all go through
 * this, so bertrain never deletes what it did not write. */
bool ckpt_remove(const char *dir, char *err, size_t errlen);

/* Remove the leftovers of interrupted writes of checkpoint directory dir
 * (DIR.tmp-PID that no process holds: their writer was killed), as far as
 * ckpt_remove allows; each one is said. import calls it before it writes. */
void ckpt_clean_leftovers(const char *dir);

/* The base model of a checkpoint's state.json ("base_model"; a checkpoint
 * of an older version: its "imported_from"): a new object, or NULL when the
 * checkpoint descends from no import. */
cJSON *ckpt_base_model(const cJSON *state);

/* Whether the MLM head of the checkpoint with this state.json is still as an
 * import initialized it (a BertModel has none): listed in
 * base_model.initialized, and no step trained since. */
bool ckpt_mlm_head_untrained(const cJSON *state);

/* state.json fields of a training checkpoint at progress p, with the model's
 * state beyond its weights (Admin's omegas) from `model` (the caller adds
 * nothing; ckpt_write_dir adds the checksums). */
cJSON *ckpt_state_new(const bt_config *cfg, const ckpt_progress *p, const bt_optimizer *o,
                      const bert_config *model);

/* ---- the training writer: one write in flight, in a background thread ---- */

typedef struct ckpt_writer ckpt_writer;

/* A writer for cfg's output_dir and model m (rank 0 only, holding the run
 * lock), for the checkpoints of lineage run_id (run_dir.h): it replaces or
 * deletes no checkpoint of another lineage. points (or NULL; copied) is told
 * the points each write reaches. NULL with a reason. */
ckpt_writer *ckpt_writer_new(const bt_config *cfg, const bert_model *m, const char *run_id,
                             const ckpt_points *points, char *err, size_t errlen);

/* At a step boundary: wait for the previous write, copy weights and moments to
 * the host, then write OUTPUT_DIR/ckpt-<step> in the background, point
 * OUTPUT_DIR/latest at it and keep the run's newest checkpoint.keep. false (with the
 * reason) when the previous write failed and nobody collected it (the
 * training loop collects each write: ckpt_writer_collect). */
bool ckpt_writer_start(ckpt_writer *w, bert_model *m, const bt_optimizer *o,
                       const ckpt_progress *p, char *err, size_t errlen);

/* The bytes of CKPT_ONEBIT_FILE for the next write (malloc'd; the writer
 * owns and frees them): 1-bit Adam's error feedback, which every rank's
 * part of rank 0 gathered at this step boundary. */
void ckpt_writer_set_onebit(ckpt_writer *w, void *bytes, size_t len);
/* Carry the tensors of checkpoint src_dir's CKPT_CARRIED_FILE (if it has one)
 * and its state.json's "base_model" (an import's provenance: the directory,
 * its licence, the tensors the import initialized) into every checkpoint
 * this writer writes, so that a resumed import keeps them and every later
 * model card names its base model. false with a reason when the file is
 * there but unreadable. */
bool ckpt_writer_carry(ckpt_writer *w, const char *src_dir, char *err, size_t errlen);

/* The write in flight once it has ended (with wait: once it ends): 1 when
 * it succeeded, -1 when it failed (*step its step, err why), 0 when no write
 * ended. The training loop calls it at every step boundary, so that a failed
 * background write is reported at once, not at the next checkpoint. */
int ckpt_writer_collect(ckpt_writer *w, bool wait, long *step, char *err, size_t errlen);

/* Wait for the write in flight (if any); false with its error. */
bool ckpt_writer_wait(ckpt_writer *w, char *err, size_t errlen);

/* Wait, then free. */
void ckpt_writer_free(ckpt_writer *w);

/* ---- reading ---- */

/* CRC-32 (zlib) and size of a file; false if it cannot be read. */
bool ckpt_file_crc(const char *path, uint32_t *crc, long long *size);

/* Verify checkpoint directory dir: state.json parses and matches its own
 * CRC-32, and every file it lists exists with its size and CRC-32. On success
 * *state is the parsed state.json (cJSON_Delete it). false with
 * "DIR: FILE: problem" in err. */
bool ckpt_verify(const char *dir, cJSON **state, char *err, size_t errlen);

/* The newest ckpt-* directory of out_dir that verifies, into path (and its
 * state into *state). Each damaged one is reported on stderr as one line
 * naming the checkpoint, the file and the problem. false if there is none. */
bool ckpt_find_auto(const char *out_dir, char *path, size_t pathlen, cJSON **state);

/* The item at dotted path ("data.lowercase") in a state.json or config
 * object, or NULL. */
const cJSON *ckpt_json_at(const cJSON *obj, const char *path);

/* The checkpoint that `path` names, into out: a checkpoint directory as it is,
 * a run's output_dir (it has a `latest` file) as its latest checkpoint. */
void ckpt_resolve(const char *path, char *out, size_t outlen);

/* The vocab.txt that goes with checkpoint dir, into out: its own copy, else
 * the training config's data.vocab that state.json records. */
void ckpt_vocab_path(const char *dir, const cJSON *state, char *out, size_t outlen);

/* Whether the checkpoint's shards were lowercased (state.json data.lowercase;
 * absent: true, BERT's default). */
bool ckpt_lowercase(const cJSON *state);

/* The model config a checkpoint's state.json records (config.model). */
bool ckpt_model_config(const cJSON *state, bert_config *mc, char *err, size_t errlen);

/* Every value of tensor `name` (x, n floats, from `file`) is finite; false
 * with "FILE: tensor NAME holds N NaN or infinite values ..." in err. x may be
 * unaligned (a tensor inside a safetensors file). */
bool ckpt_check_finite(const char *file, const char *name, const void *x, size_t n, char *err,
                       size_t errlen);

/* Load a checkpoint's (or an HF-named safetensors file's) weights into m: every
 * tensor of m must be present with its shape and finite values. dir may be a
 * checkpoint directory or a .safetensors file. */
bool ckpt_load_weights(const char *dir, bert_model *m, char *err, size_t errlen);

/* Load dir/optim.bin into o (moments and step); its tensors must be m's,
 * every first moment finite, every second moment finite and >= 0, and its
 * step max_step (exact_step: state.json's optimizer.step) or at most max_step
 * (state.json's step, for a checkpoint that records no optimizer.step): a
 * checksum says a file is as written, not that it is sane. */
bool ckpt_load_optim(const char *dir, bert_model *m, bt_optimizer *o, long max_step,
                     bool exact_step, char *err, size_t errlen);

#endif
