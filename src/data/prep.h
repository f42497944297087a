/* Text files -> token shards (`bertrain prep`), and a shard's summary
 * (`bertrain prep --inspect`). */
#ifndef BT_PREP_H
#define BT_PREP_H

#include <stdbool.h>
#include <stdint.h>

/* Corpus convention: one sentence per line, a blank line (only spaces, tabs,
 * \r, \v, \f) ends a document, and so does the end of each file. Documents
 * are numbered from 0 across the files in the order given. */
typedef struct {
    const char *vocab_path;
    bool lowercase;
    const char *out_dir;
    double valid_fraction;  /* share of documents held out, in [0, 1) */
    uint64_t seed;          /* of the train/valid split */
    uint64_t shard_tokens;  /* a train shard closes after the document that reaches this */
    const char *const *files;
    int n_files;
} bt_prep_options;

#define PREP_DEFAULT_VALID_FRACTION 0.01
#define PREP_DEFAULT_SHARD_TOKENS (64ull << 20)

/* Whether document doc_index goes to the validation split (before the
 * at-least-one-each rule prep applies): a hash of (seed, doc_index) < fraction. */
bool prep_doc_is_valid(uint64_t seed, uint64_t doc_index, double fraction);

/* Tokenize the files into OUT/train.shard (or OUT/train/train-NNNNN.shard when
 * more than one) and OUT/valid.shard. Prints counts; returns the exit code,
 * with errors as one line naming the file. Nothing is left half-written. */
int prep_run(const bt_prep_options *o);

/* Print a shard's header and its first tokens (decoded when vocab_path is
 * given, which is then also checked against the shard). Returns the exit code. */
int prep_inspect(const char *shard_path, const char *vocab_path);

#endif
