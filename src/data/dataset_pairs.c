/* BERT sentence pairs: segment A, then the actual next sentences (label 0) or
 * sentences from a random other document (label 1, probability 0.5), as in
 * BERT's create_pretraining_data. The chunking is fixed when the data opens;
 * the random-B choice and truncation are drawn per (epoch, sample), so each
 * epoch sees fresh negatives and the sample stays indexable. */
#include "dataset_internal.h"

#include "util/rng.h"

#include <stdio.h>
#include <stdlib.h>

#define SHORT_SEQ_PROB 0.1

static uint64_t sent_len(const bt_shard *sh, uint64_t s) {
    return sh->sent_offsets[s + 1] - sh->sent_offsets[s];
}

bool pairs_build(bt_dataset *ds, char *err, size_t errlen) {
    const uint32_t max_tokens = (uint32_t)ds->T - 3;
    uint64_t cap = 1024, n = 0;
    ds->chunks = malloc(cap * sizeof *ds->chunks);
    ds->doc_first = calloc((size_t)ds->n_shards + 1, sizeof *ds->doc_first);
    if (!ds->chunks || !ds->doc_first) goto oom;
    for (int s = 0; s < ds->n_shards; s++) {
        const bt_shard *sh = &ds->shards[s];
        ds->doc_first[s + 1] = ds->doc_first[s] + sh->n_docs;
        for (uint64_t d = 0; d < sh->n_docs; d++) {
            const uint64_t gdoc = ds->doc_first[s] + d, first = sh->doc_offsets[d],
                           last = sh->doc_offsets[d + 1];
            uint64_t start = first, length = 0;
            uint32_t chunk_no = 0, target = 0;
            for (uint64_t i = first; i < last; i++) {
                if (i == start) { /* a new chunk: draw its target length */
                    uint32_t r[4];
                    rng_block(ds->seed, RNG_STREAM_PAIRS, (uint32_t)gdoc, chunk_no, r);
                    target = max_tokens;
                    if (r[0] < (uint32_t)(SHORT_SEQ_PROB * 4294967296.0) && max_tokens > 2)
                        target = 2 + (uint32_t)(((uint64_t)r[1] * (max_tokens - 1)) >> 32);
                    length = 0;
                }
                length += sent_len(sh, i);
                if (i + 1 < last && length < target) continue;
                if (n == cap) {
                    pair_chunk *bigger = realloc(ds->chunks, (cap *= 2) * sizeof *ds->chunks);
                    if (!bigger) goto oom;
                    ds->chunks = bigger;
                }
                uint64_t count = i + 1 - start, a_end = 1;
                if (count >= 2) { /* A takes a random 1..count-1 sentences */
                    uint32_t r[4];
                    rng_block(ds->seed, RNG_STREAM_PAIRS, (uint32_t)gdoc, chunk_no, r);
                    a_end = 1 + (((uint64_t)r[2] * (count - 1)) >> 32);
                }
                ds->chunks[n++] = (pair_chunk){(uint32_t)s, target, d, start, start + a_end,
                                               i + 1};
                start = i + 1;
                chunk_no++;
            }
        }
    }
    ds->n_docs_total = ds->doc_first[ds->n_shards];
    ds->n_samples = n;
    if (n == 0) {
        snprintf(err, errlen, "data holds no sentences for sentence pairs");
        return false;
    }
    return true;
oom:
    snprintf(err, errlen, "out of host memory building sentence pairs");
    return false;
}

/* A token range [begin, end) of one shard. */
typedef struct {
    const bt_shard *sh;
    uint64_t begin, end;
} token_range;

static uint64_t range_len(const token_range *r) { return r->end - r->begin; }

void pairs_fill(bt_dataset *ds, uint64_t epoch, uint64_t sample, int32_t *ids, int32_t *types,
                int32_t *att, int32_t *nsp_label) {
    const pair_chunk *c = &ds->chunks[sample];
    const bt_shard *sh = &ds->shards[c->shard];
    const uint64_t stream = (epoch << 8) | RNG_STREAM_PAIRS;
    const uint64_t max_tokens = (uint64_t)ds->T - 3;
    uint32_t r[4];
    rng_block(ds->seed, stream, (uint32_t)sample, (uint32_t)(sample >> 32), r);

    token_range a = {sh, sh->sent_offsets[c->s0], sh->sent_offsets[c->s_a]};
    token_range b = {sh, sh->sent_offsets[c->s_a], sh->sent_offsets[c->s1]};
    bool random_b = c->s_a == c->s1 || r[0] < 0x80000000u;
    if (random_b && ds->n_docs_total > 1) {
        /* a random document other than this one, a random start sentence in it,
         * sentences up to the B budget */
        uint64_t own = ds->doc_first[c->shard] + c->doc;
        uint64_t pick = ((uint64_t)r[1] * (ds->n_docs_total - 1)) >> 32;
        if (pick >= own) pick++;
        int s = 0;
        while (ds->doc_first[s + 1] <= pick) s++;
        const bt_shard *osh = &ds->shards[s];
        uint64_t d = pick - ds->doc_first[s];
        uint64_t f = osh->doc_offsets[d], l = osh->doc_offsets[d + 1];
        uint64_t start = f + (((uint64_t)r[2] * (l - f)) >> 32);
        uint64_t budget = c->target > range_len(&a) ? c->target - range_len(&a) : 1;
        uint64_t end = start, len = 0;
        while (end < l && len < budget) len += sent_len(osh, end++);
        b = (token_range){osh, osh->sent_offsets[start], osh->sent_offsets[end]};
    } else if (random_b) { /* one document only: B follows anyway */
        random_b = false;
    }
    *nsp_label = random_b ? 1 : 0;
    /* truncate the longer segment, one token at a time, from a random end */
    for (uint32_t k = 0; range_len(&a) + range_len(&b) > max_tokens; k++) {
        token_range *t = range_len(&a) > range_len(&b) ? &a : &b;
        uint32_t q[4];
        rng_block(ds->seed, stream ^ ((uint64_t)(k / 4 + 1) << 40), (uint32_t)sample,
                  (uint32_t)(sample >> 32), q);
        if (q[k & 3] < 0x80000000u) t->begin++;
        else t->end--;
    }
    int n = 0;
    ids[n] = ds->vocab->cls_id;
    types[n++] = 0;
    for (uint64_t i = a.begin; i < a.end; i++, n++) {
        ids[n] = (int32_t)shard_token(a.sh, i);
        types[n] = 0;
    }
    ids[n] = ds->vocab->sep_id;
    types[n++] = 0;
    for (uint64_t i = b.begin; i < b.end; i++, n++) {
        ids[n] = (int32_t)shard_token(b.sh, i);
        types[n] = 1;
    }
    ids[n] = ds->vocab->sep_id;
    types[n++] = 1;
    for (int t = 0; t < ds->T; t++) {
        att[t] = t < n;
        if (t >= n) {
            ids[t] = ds->vocab->pad_id;
            types[t] = 0;
        }
    }
}
