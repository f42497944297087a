/* Token shards: a checked header, the tokens, sentence and document offsets
 * (format in docs/DATA.md). Opening verifies everything before use. */
#ifndef BT_SHARD_H
#define BT_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC "BRTSHARD"
#define SHARD_VERSION 1
#define SHARD_HEADER_BYTES 64

typedef struct {
    char path[1024];
    uint32_t version, token_width, vocab_size, flags;
    uint64_t vocab_hash, n_docs, n_sents, n_tokens;
    unsigned char *data;          /* whole file */
    size_t size;
    const unsigned char *tokens;  /* n_tokens x token_width */
    const uint64_t *sent_offsets; /* n_sents + 1 */
    const uint64_t *doc_offsets;  /* n_docs + 1, in sentences */
    uint64_t *count;              /* count[id]: occurrences of token id, id < n_ids */
    uint32_t n_ids;               /* the largest id + 1 (0: no tokens) */
    bool verified_earlier;        /* the payload was not read: a record of this unchanged
                                   * file says it verified (shard_open_recorded) */
} bt_shard;

/* Open and verify a shard: magic, version, size, both CRCs, offsets, every id
 * < model_vocab, and (if vocab_hash != 0) the vocab hash; count its tokens.
 * false with one line naming the file (and offset) in err. */
bool shard_open(bt_shard *s, const char *path, uint64_t vocab_hash, uint32_t model_vocab,
                char *err, size_t errlen);

/* shard_open for training: where a record (shard_record.h) says that this
 * very file (device, inode, size, both times, header checksum) verified
 * before, only the header is read and checked, and the record gives the
 * counts; otherwise everything is verified and recorded. A file changed in
 * any byte since has a new status-change time, so it is verified again
 * before any of its samples is used. */
bool shard_open_recorded(bt_shard *s, const char *path, uint64_t vocab_hash,
                         uint32_t model_vocab, char *err, size_t errlen);
void shard_close(bt_shard *s);

/* Token i of the shard. */
static inline uint32_t shard_token(const bt_shard *s, uint64_t i) {
    if (s->token_width == 2)
        return (uint32_t)s->tokens[2 * i] | ((uint32_t)s->tokens[2 * i + 1] << 8);
    const unsigned char *p = s->tokens + 4 * i;
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* First token index of document d (d may equal n_docs: the end). */
static inline uint64_t shard_doc_start(const bt_shard *s, uint64_t d) {
    return s->sent_offsets[s->doc_offsets[d]];
}

#endif
