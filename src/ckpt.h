/* Checkpoints: a directory written under a temporary name, fsynced, then
 * renamed, so a crash never leaves a half-written checkpoint in its place. */
#ifndef BT_CKPT_H
#define BT_CKPT_H

#include "bert.h"
#include "config.h"

#include <stdbool.h>

/* Save the model after `step` optimizer steps as OUTPUT_DIR/ckpt-<step>
 * (model.safetensors with HF names, state.json), point OUTPUT_DIR/latest at
 * it, and delete all but the newest `keep`. false with a reason in err. */
bool ckpt_save(const bt_config *cfg, bert_model *m, long step, long samples, char *err,
               size_t errlen);

/* Load a checkpoint's (or an HF-named safetensors file's) weights into m: every
 * tensor of m must be present with its shape. dir may be a checkpoint
 * directory or a .safetensors file. */
bool ckpt_load_weights(const char *dir, bert_model *m, char *err, size_t errlen);

#endif
