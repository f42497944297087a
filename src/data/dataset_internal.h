/* Internals shared by data.c (shards, packing, order, masking) and
 * data_pairs.c (BERT sentence pairs with NSP labels). */
#ifndef BT_DATA_INTERNAL_H
#define BT_DATA_INTERNAL_H

#include "dataset.h"

#define EVAL_EPOCH 0xFFFFFFFFull /* masking key of evaluation: fixed across runs */

/* One sentence-pair sample: sentences [s0, s_a) of a document form segment A,
 * [s_a, s1) the actual next segment B (empty when the chunk has one sentence,
 * so B is always random). target: the token budget the chunk was cut for. */
typedef struct {
    uint32_t shard;
    uint32_t target;
    uint64_t doc; /* within the shard */
    uint64_t s0, s_a, s1;
} pair_chunk;

struct bt_dataset {
    bt_shard *shards;
    int n_shards;
    uint64_t *stream_start; /* per shard: first stream position (tokens + one [SEP] per doc) */
    uint64_t stream_len, n_tokens;
    int T, W; /* sequence length; tokens of the stream per sample (T - 2) */
    uint64_t n_samples;
    const bt_vocab *vocab;
    int model_vocab;
    float mask_prob;
    int max_pred;
    uint64_t seed;
    uint32_t *perm;
    uint64_t perm_epoch; /* epoch whose permutation perm holds, or UINT64_MAX */
    /* sentence_pairs mode */
    bool pairs;
    pair_chunk *chunks;
    uint64_t n_docs_total;
    uint64_t *doc_first; /* per shard: global index of its first document (n_shards + 1) */
};

/* Cut every document into sentence-pair chunks as BERT's
 * create_pretraining_data does (target T - 3 tokens, short with probability
 * 0.1); sets ds->n_samples. false with a reason in err. */
bool pairs_build(bt_dataset *ds, char *err, size_t errlen);

/* Write sample `sample` of `epoch` as [CLS] A [SEP] B [SEP] + padding into
 * ids/types/att (T each) and its NSP label (0: B follows A, 1: random B). */
void pairs_fill(bt_dataset *ds, uint64_t epoch, uint64_t sample, int32_t *ids, int32_t *types,
                int32_t *att, int32_t *nsp_label);

#endif
