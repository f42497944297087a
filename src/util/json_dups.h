/* Duplicate keys in JSON text. cJSON keeps both copies of a repeated key and
 * lookups see the first, so a config with "train_steps" twice, or two
 * "model" objects, would run something other than what its author read:
 * every JSON bertrain reads (configs, state.json, a safetensors header, an
 * HF config.json) is refused instead. */
#ifndef BT_UTIL_JSON_DUPS_H
#define BT_UTIL_JSON_DUPS_H

#include <stdbool.h>
#include <stddef.h>

/* Whether an object of the JSON text (len bytes) holds a key twice (keys
 * compared after decoding their escapes). When it does, out gets
 * "key \"PATH\" appears twice (line L, column C and line L2, column C2): ...",
 * PATH dotted from the top ("model.hidden_size", "devices[0].x"). Text that is
 * not JSON gives false. */
bool json_find_duplicate(const char *text, size_t len, char *out, size_t outlen);

#endif
