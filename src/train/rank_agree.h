/* Ranks agree before any work: every rank's configuration (all keys but the
 * per-rank device and cpu_threads), data, vocab and bertrain version are
 * compared with rank 0's, so that ranks started differently stop at once
 * with one line instead of training apart or overrunning a buffer. */
#ifndef BT_RANK_AGREE_H
#define BT_RANK_AGREE_H

#include "config/config.h"

#include <stdbool.h>
#include <stdint.h>

/* Collective. true when every rank's fingerprint equals rank 0's; else the
 * lowest differing rank prints one line naming the first differing key, its
 * two values and the ranks that differ, and every rank returns false. */
bool rank_agree(const bt_config *cfg, uint64_t train_data, uint64_t valid_data,
                uint64_t vocab_hash);

#endif
