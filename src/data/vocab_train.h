/* Learning a WordPiece vocabulary from text files (`bertrain vocab`). */
#ifndef BT_VOCAB_TRAIN_H
#define BT_VOCAB_TRAIN_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    int vocab_size;      /* target token count, specials included */
    bool lowercase;      /* normalize as BERT uncased (lowercase, strip accents) */
    int min_frequency;   /* a merge needs a pair seen at least this often (2) */
    int limit_alphabet;  /* keep only the most frequent characters; 0: all */
    const char *out_path;
    const char *const *files;
    int n_files;
} bt_vocab_train_options;

/* Learn the vocab and write it to out_path (via a temp file): [PAD] [UNK]
 * [CLS] [SEP] [MASK] (ids 0..4), every character (word-initial form, then
 * "##" forms of those seen inside words), then merged pieces, most frequent
 * pair first, ties by the smaller (left, right) strings, as
 * scripts/make-demo-data.py does. Memory grows with the distinct words, not
 * the corpus. Prints progress; returns the exit code (errors: one line). */
int vocab_train(const bt_vocab_train_options *o);

#endif
