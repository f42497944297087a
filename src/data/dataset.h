/* Training samples from token shards: full-sentence packing, the seeded
 * per-epoch order, and dynamic MLM masking, all from the counter-based RNG so
 * that sample g of the run is the same on every backend, rank count and resume. */
#ifndef BT_DATA_H
#define BT_DATA_H

#include "config/config.h"
#include "shard.h"
#include "vocab.h"

#include <stdint.h>

/* Host storage for one micro-batch. */
typedef struct {
    int B, T, cap_masked;
    int32_t *input_ids, *token_type_ids, *attention_mask; /* (B, T) */
    int32_t *mlm_positions, *mlm_labels;                  /* (cap_masked) */
    int32_t *nsp_labels;                                  /* (B) */
    int n_masked;
    int masked_bound; /* what n_masked of batches like this exceeds rarely: mask_total_bound */
} bt_batch_buf;

typedef struct bt_dataset bt_dataset;

/* Open the shards at path (a file or a directory of *.shard) for sequences of
 * cfg->seq_len; NULL with one line in err naming the file. */
bt_dataset *dataset_open(const char *path, const bt_data_config *cfg, const bt_vocab *vocab,
                         int model_vocab, uint64_t seed, char *err, size_t errlen);
void dataset_close(bt_dataset *ds);

/* Samples per epoch. */
uint64_t dataset_num_samples(const bt_dataset *ds);

/* Tokens of all shards (without added specials). */
uint64_t dataset_num_tokens(const bt_dataset *ds);

/* A hash of the shards' verified headers, which hold their contents' CRCs:
 * equal on two ranks exactly when they read the same data (NULL: a constant). */
uint64_t dataset_fingerprint(const bt_dataset *ds);

/* Whether the shards were made from lowercased text (shard flag bit 0). */
bool dataset_lowercase(const bt_dataset *ds);

/* The checkpoint a run continues, as dataset_check_casing sees it. */
typedef struct {
    int lower;       /* its tokenizer lowercases: 1 or 0; -1: no checkpoint, or unknown */
    bool imported;   /* an import never trained: its casing is what the import chose */
    const char *dir;
} dataset_ckpt_casing;

/* The lowercasing of the training shards against the vocab's casing, the
 * validation shards' and the checkpoint's: training on shards that disagree
 * would see mostly [UNK] or tokens the model never learned. A checkpoint
 * that contradicts its own vocab is named first (no shards fit both). false
 * with one line in err naming the files and the fix. */
bool dataset_check_casing(const bt_data_config *dc, const bt_vocab *v, const bt_dataset *train,
                          const bt_dataset *valid, const dataset_ckpt_casing *ckpt, char *err,
                          size_t errlen);

/* Most MLM rows one sequence can produce (the per-sample cap). */
int dataset_max_predictions(const bt_dataset *ds);

/* Fill out with samples at run positions [g0, g0 + B): epoch g / n reads the
 * seeded permutation of that epoch. eval = true reads samples in file order
 * with masking fixed across runs. */
void dataset_fill(bt_dataset *ds, uint64_t g0, int B, bool eval, bt_batch_buf *out);

/* The most frequent non-special token id of the data (the frequency
 * baseline's constant prediction). */
int dataset_most_common_token(const bt_dataset *ds);

/* How many of the dataset's shards were read and verified in full when it
 * opened (the others are unchanged files a record says verified before:
 * shard_open_recorded), and how many it has. */
int dataset_shards_read(const bt_dataset *ds);
int dataset_num_shards(const bt_dataset *ds);

bool batch_buf_alloc(bt_batch_buf *b, int B, int T, int cap_masked);
void batch_buf_free(bt_batch_buf *b);

/* The cap on masked tokens per sequence of n_tokens that binds with
 * probability < 1e-4 (data.max_predictions 0): sizes the MLM head's buffers. */
int mask_cap_default(int n_tokens, float mask_prob);

/* The masked tokens of n_seqs sequences of up to n_tokens each, masked at
 * mask_prob with at most max_pred a sequence, that their total exceeds with
 * probability < 1e-4: the mean plus 4 standard deviations of the total, far
 * below n_seqs x the per-sequence cap (sqrt(n_seqs) times the spread, not
 * n_seqs times). A device that replays graphs pads the MLM head's rows to it. */
int mask_total_bound(int n_seqs, int n_tokens, float mask_prob, int max_pred);

/* Mask one sequence in place: ids (T), special tokens and padding excluded.
 * Appends flat rows (row_base + t) and labels; returns the count appended. */
int mask_sequence(int32_t *ids, int T, const bt_vocab *vocab, int vocab_size, float mask_prob,
                  int max_pred, uint64_t seed, uint64_t epoch, uint64_t sample, int row_base,
                  int32_t *positions, int32_t *labels);

#endif
