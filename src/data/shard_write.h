/* Writing BRTSHARD v1 files (format in docs/DATA.md) one sentence at a time:
 * tokens stream to PATH.tmp with running CRCs, offsets are kept in memory
 * (8 bytes per sentence), and the finished file is renamed into place, so a
 * reader never sees a half-written shard. */
#ifndef BT_SHARD_WRITE_H
#define BT_SHARD_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHARD_FLAG_LOWERCASE 1u

typedef struct bt_shard_writer bt_shard_writer;

/* Start a shard whose final name is path, writing to path.tmp. Token width is
 * 2 bytes when vocab_size <= 65536, else 4. NULL with one line in err. */
bt_shard_writer *shard_writer_open(const char *path, uint32_t vocab_size, uint64_t vocab_hash,
                                   uint32_t flags, char *err, size_t errlen);

/* Append one sentence (n > 0 ids, each < vocab_size) to the current document;
 * n == 0 is ignored (empty sentences are not stored). false with err on a
 * write error or a bad id. */
bool shard_writer_add_sentence(bt_shard_writer *w, const int32_t *ids, size_t n, char *err,
                               size_t errlen);

/* End the current document; one without sentences is skipped. */
bool shard_writer_end_document(bt_shard_writer *w, char *err, size_t errlen);

/* Counts so far (documents ended, sentences, tokens). */
uint64_t shard_writer_docs(const bt_shard_writer *w);
uint64_t shard_writer_sentences(const bt_shard_writer *w);
uint64_t shard_writer_tokens(const bt_shard_writer *w);

/* Complete path.tmp (offsets, header with both CRCs, fsync) without renaming
 * it; ends an open document first. false with err (the writer stays valid for
 * shard_writer_abort). */
bool shard_writer_finish(bt_shard_writer *w, char *err, size_t errlen);

/* Rename the finished path.tmp to final_path (NULL: the path given to open)
 * and free the writer. false with err (the temp file is removed). */
bool shard_writer_commit(bt_shard_writer *w, const char *final_path, char *err, size_t errlen);

/* Drop the shard: remove path.tmp and free the writer (NULL is fine). */
void shard_writer_abort(bt_shard_writer *w);

#endif
