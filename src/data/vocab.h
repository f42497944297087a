/* BERT vocab.txt (one token per line, id = line number) and the ids of its
 * special tokens; the hash ties shards to the vocab they were made with. */
#ifndef BT_VOCAB_H
#define BT_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char **tokens; /* id -> token */
    int size;
    char *storage;
    uint64_t hash; /* FNV-1a 64 over each token followed by '\n' */
    int pad_id, unk_id, cls_id, sep_id, mask_id;
} bt_vocab;

/* Load vocab.txt; false with "path: problem" in err (the specials must exist;
 * a token on two lines is an error naming both). */
bool vocab_load(bt_vocab *v, const char *path, char *err, size_t errlen);
void vocab_free(bt_vocab *v);

/* Whether a vocab was made from lowercased text: VOCAB_UNCASED when no token
 * (besides bracketed specials such as [CLS]) has a letter that lowercasing
 * changes, VOCAB_CASED when one does, VOCAB_CASE_UNKNOWN when it has no
 * letters at all. Shards must be lowercased exactly when their vocab is uncased. */
enum { VOCAB_CASE_UNKNOWN = -1, VOCAB_UNCASED = 0, VOCAB_CASED = 1 };
int vocab_casing(const bt_vocab *v);

/* FNV-1a 64-bit hash step over n bytes. */
uint64_t fnv1a64(uint64_t h, const void *data, size_t n);
#define FNV1A64_INIT 0xcbf29ce484222325ULL

#endif
