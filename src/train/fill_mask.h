/* Fill-mask: the model's most probable tokens for each [MASK] of a sentence,
 * as transformers' fill-mask pipeline computes them (the sentence alone as
 * [CLS] pieces [SEP], softmax over the whole vocab at each masked position).
 * `bertrain predict` prints them; training prints them for eval.fill_mask at
 * every evaluation, so a person sees what the model learned. */
#ifndef BT_FILL_MASK_H
#define BT_FILL_MASK_H

#include "model/bert.h"
#include "data/vocab.h"
#include "data/wordpiece.h"

#include <stdbool.h>
#include <stddef.h>

/* One guess for one [MASK]. */
typedef struct {
    int id;
    double prob;
} fill_mask_guess;

/* A sentence as model input. */
typedef struct {
    bt_ids ids;    /* [CLS] pieces [SEP], the mask token where the text says "[MASK]" */
    int n_masks;
    int *mask_pos; /* (n_masks) positions in ids */
} fill_mask_input;

/* Tokenize text for fill-mask: each literal "[MASK]" (written so, in capitals,
 * as transformers matches it) becomes the mask token, and each literal
 * "[UNK]", "[CLS]", "[SEP]" and "[PAD]" its token too, as transformers'
 * tokenizers and the exported tokenizer.json match them; the text around
 * them WordPiece. false with one line in err: no [MASK], or more than max_len
 * tokens with [CLS] and [SEP]. */
bool fill_mask_encode(bt_tokenizer *tok, const bt_vocab *v, const char *text, int max_len,
                      fill_mask_input *in, char *err, size_t errlen);

/* Release an input's ids and positions. */
void fill_mask_input_free(fill_mask_input *in);

/* Run m (no dropout, no gradient) on inputs in[0..n), as many per forward as
 * its capacity holds, and write the top_k (<= the model's vocab_size) guesses
 * of every [MASK], best first,
 * to out[i] (in[i].n_masks x top_k, malloc'd; the caller frees each). false
 * with a reason when an input exceeds the model's capacity or memory runs out. */
bool fill_mask_predict(bert_model *m, const bt_vocab *v, const fill_mask_input *in, int n,
                       int top_k, fill_mask_guess **out, char *err, size_t errlen);

#endif
