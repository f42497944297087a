/* What a full verification of a shard found, recorded per file so that a
 * later open of the same, unchanged file need not read its payload again:
 * with 16 ranks and a 20 GB corpus every start would otherwise read 320 GB.
 * A record is keyed by the file's device, inode, size, modification and
 * status-change times (any write changes the latter, and no user can set
 * it) and its header checksum; it holds the largest token id and each
 * token's count (the baseline of the held-out evaluation needs them). The
 * records live in BERTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/bertrain, else
 * ~/.cache/bertrain, as shard-<key>.rec files (the newest 256 kept);
 * BERTRAIN_SHARD_RECORDS=off makes every open read everything. */
#ifndef BT_SHARD_RECORD_H
#define BT_SHARD_RECORD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

typedef struct {
    uint32_t max_id;  /* the largest token id in the shard */
    uint32_t n_ids;   /* entries of count: max_id + 1 (0 for an empty shard) */
    uint64_t *count;  /* count[id]: how often token id occurs (malloc'ed) */
} shard_facts;

/* The facts recorded for the file with stat st and header checksum
 * header_crc, into *f (the caller frees f->count); false when there is no
 * such record, it does not match in every key, or records are off. */
bool shard_record_load(const struct stat *st, uint32_t header_crc, shard_facts *f);

/* Record f for that file. Best effort: a cache that cannot be written only
 * means that the next open reads the file again. */
void shard_record_save(const struct stat *st, uint32_t header_crc, const shard_facts *f);

#endif
