/* Text -> WordPiece ids, as BERT's FullTokenizer / Hugging Face's
 * BertWordPieceTokenizer compute them: the basic tokenizer (basic_tokenize.h),
 * then greedy longest-match-first WordPiece with "##" continuations. A word of
 * more than 100 code points, or one that cannot be matched to the end, is one
 * [UNK]. Literal "[MASK]" etc. in the text are NOT special here: they split
 * into "[", "mask", "]" as in Google's BERT (Hugging Face instead matches its
 * added special tokens in raw text). */
#ifndef BT_WORDPIECE_H
#define BT_WORDPIECE_H

#include "basic_tokenize.h"
#include "util/strmap.h"
#include "vocab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable array of token ids. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} bt_ids;

/* A tokenizer keeps per-call state and a cache of recent words: use one per
 * thread. */
typedef struct bt_tokenizer bt_tokenizer;

/* A tokenizer over vocab v (which must outlive it); lowercase also strips
 * accents (BERT uncased). NULL with one line in err when out of memory. */
bt_tokenizer *tokenizer_new(const bt_vocab *v, bool lowercase, char *err, size_t errlen);

/* Release a tokenizer (NULL is fine). */
void tokenizer_free(bt_tokenizer *t);

/* Append the ids of text (len bytes, any bytes) to out; adds the number of
 * invalid UTF-8 sequences replaced (and dropped) to *n_invalid_utf8 (may be
 * NULL). false only when out of memory (out keeps what was appended). */
bool tokenizer_encode(bt_tokenizer *t, const char *text, size_t len, bt_ids *out,
                      size_t *n_invalid_utf8);

/* WordPiece of one normalized word (from the basic tokenizer) appended to
 * out: its pieces, or [UNK]. false only when out of memory. */
bool tokenizer_encode_word(bt_tokenizer *t, const char *word, size_t n_bytes, size_t n_chars,
                           bt_ids *out);

/* Text of ids for people: pieces joined by spaces, "##" pieces glued to the
 * previous one, unknown ids as "[id?]". A malloc'd string; NULL when out of memory. */
char *tokenizer_decode(const bt_vocab *v, const int32_t *ids, size_t n);

/* Make room for n more ids; false when out of memory. */
bool ids_reserve(bt_ids *a, size_t n);

/* Release the ids and reset a to empty. */
void ids_free(bt_ids *a);

#endif
