/* BERT's BasicTokenizer, as Hugging Face tokenizers runs it (BertNormalizer
 * with clean_text and handle_chinese_chars, then BertPreTokenizer): UTF-8 in,
 * normalized words out. WordPiece (wordpiece.h) and the vocab trainer both
 * start from these words.
 *
 * Per code point, in this order:
 *   - invalid UTF-8: each maximal invalid subpart becomes U+FFFD (as Python's
 *     bytes.decode(errors="replace")) and is counted; U+FFFD is then dropped;
 *   - dropped, without splitting the word: U+0000, U+FFFD, and categories Cc,
 *     Cf, Co, Cs except \t \n \r (unassigned Cn code points are kept, as the
 *     reference keeps them);
 *   - whitespace ends a word: \t \n \r and categories Zs, Zl, Zp;
 *   - CJK ideographs (the reference's ranges, see basic_is_cjk) become
 *     one-character words;
 *   - lowercase mode: NFD, drop Mn (strip accents), then lowercase;
 *   - punctuation (categories P*, and ASCII 33-47, 58-64, 91-96, 123-126) of
 *     the normalized text becomes one-character words.
 * Unicode data (categories, NFD, case) comes from utf8proc. */
#ifndef BT_BASIC_TOKENIZE_H
#define BT_BASIC_TOKENIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Words of more code points than this encode to [UNK]; longer words are
 * reported with their full count but only this many code points stored. */
#define BT_WORD_MAX_CHARS 100

/* Called once per word: its UTF-8 bytes (not NUL-terminated; truncated when
 * n_chars > BT_WORD_MAX_CHARS) and its length in code points. Return false to
 * stop (e.g. out of memory). */
typedef bool (*bt_word_fn)(void *ctx, const char *word, size_t n_bytes, size_t n_chars);

typedef struct {
    bool lowercase; /* also strips accents (NFD, drop Mn), as BERT uncased */
    char *word;     /* the word being built, UTF-8 */
    size_t word_len, word_cap, word_chars;
} bt_basic_tokenizer;

/* Set up a basic tokenizer; false when out of memory. */
bool basic_tokenizer_init(bt_basic_tokenizer *b, bool lowercase);

/* Release the word buffer. */
void basic_tokenizer_free(bt_basic_tokenizer *b);

/* Split text (len bytes, any bytes at all) into normalized words, calling
 * on_word for each in order. Adds the count of invalid UTF-8 sequences
 * replaced to *n_invalid_utf8 (may be NULL). false when on_word stopped it. */
bool basic_tokenize(bt_basic_tokenizer *b, const char *text, size_t len, bt_word_fn on_word,
                    void *ctx, size_t *n_invalid_utf8);

/* Whether cp is a CJK ideograph in the reference's sense (these ranges, as
 * in tokenizers' BertNormalizer; note 0x2B920, where Google's BERT has 0x2B820). */
bool basic_is_cjk(uint32_t cp);

/* Decode one UTF-8 sequence at p (p < end). Returns the bytes consumed (>= 1)
 * and the code point in *cp, or U+FFFD with *invalid = true for a maximal
 * invalid subpart (Unicode's "substitution of maximal subparts"). */
size_t utf8_decode(const unsigned char *p, const unsigned char *end, uint32_t *cp,
                   bool *invalid);

/* Encode cp as UTF-8 into out (4 bytes of room); returns the byte count. */
size_t utf8_encode(uint32_t cp, char *out);

#endif
